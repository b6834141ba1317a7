//! The message types, streams and temporary directories the recording tests share (this
//! binary's modules, and the binaries `alloc.rs` and `killed.rs`, which include this file).
#![allow(dead_code)] // Each binary uses part of it.

use std::path::PathBuf;

use llbus::Message;
use serde::{Deserialize, Serialize};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "md.quote")]
pub struct Quote {
    pub px: f64,
    pub qty: u32,
    pub venue: String,
    pub side: Side,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Side {
    Buy,
    Sell { urgent: bool },
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "md.trade")]
pub struct Trade(pub u64, pub i64);

/// The `i`th quote of a test stream.
pub fn quote(i: u64) -> Quote {
    Quote {
        px: i as f64 * 0.25,
        qty: (i % 1000) as u32,
        venue: format!("v{}", i % 7),
        side: if i % 3 == 0 {
            Side::Buy
        } else {
            Side::Sell { urgent: i % 2 == 0 }
        },
    }
}

/// The `i`th trade of a test stream.
pub fn trade(i: u64) -> Trade {
    Trade(i, -(i as i64) * 3)
}

/// A fresh directory for one test's files, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "llbus-record-{tag}-{}-{}",
            std::process::id(),
            fastish_unique()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("temp dir {dir:?}: {e}"));
        TempDir(dir)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fastish_unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

pub fn now_ns() -> u64 {
    fastish_unique() as u64
}

pub fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::legacy())
        .unwrap_or_else(|e| panic!("encodes: {e}"))
}
