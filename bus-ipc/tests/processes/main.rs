//! A binary of its own because it re-executes itself as the other side of a channel: the
//! `child` tests (and `*_child`) are the entry points of the child processes and do nothing
//! unless their variable is set. By subject:
//!
//! - `pair`: two processes through a channel: order and backpressure through two buses, a
//!   fingerprint mismatch, `kill -9` of either side, garbage written into the mapping, stale
//!   channel names.
//! - `local`: what another local process of the same user (or root) can do to a running
//!   channel: resize or punch its memory, stop its writer, hand over huge pages, send a payload
//!   nested as deep as a slot allows.
//! - `users`: what another user can do: plant its socket at a channel's name, connect to
//!   another user's channel, squat the per-user directories (needs root; skipped, loudly,
//!   otherwise).
//!
//! Every child is killed (SIGKILL, reaped) when its `Running` is dropped, also when a test
//! fails; every wait is bounded; every channel name holds this process's pid, and every file
//! a test makes is removed by a guard.
#![cfg(not(loom))]

#[path = "../it/fixtures.rs"]
#[allow(dead_code)] // `it`'s fixtures: the fake writer is for `it` alone.
mod fixtures;
mod local;
mod pair;
mod users;

use std::process::Command;
use std::time::{Duration, Instant};

use tests::example_bins::Running;

/// This test binary, to run test `path` (`module::function`) alone as a child process, its
/// output not captured.
fn reexec(path: &str) -> Command {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args([path, "--exact", "--nocapture", "--test-threads=1"]);
    cmd
}

/// Waits for the child's READY line and returns what follows the word.
fn ready(child: &mut Running) -> String {
    child
        // The harness's "test child ... " may share the line.
        .wait_line(Duration::from_secs(20), |l| l.contains("READY"))
        .and_then(|l| {
            l.split_once("READY")
                .map(|(_, rest)| rest.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("{} never said READY", child.name()))
}

/// Retries `f` until it returns `Some` or `timeout` passes.
fn eventually<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
