//! A second crate holding definitions identical to some in `tests/derive_message.rs`, so the
//! tests can check that identical definitions in two crates have equal fingerprints.
#![allow(missing_docs, dead_code)]

use llbus::Message;

#[derive(Message, Debug)]
pub enum Venue {
    Xnas,
    Xlon,
    Other(String),
}

#[derive(Message, Debug)]
#[message(topic = "md.quote")]
pub struct Quote {
    pub px: f64,
    pub qty: u32,
    pub venue: Venue,
}

#[derive(Message, Debug)]
pub struct Heartbeat;
