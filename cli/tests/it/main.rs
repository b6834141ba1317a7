//! The `llbus` command as a process against buses of this test process (bridges on loopback):
//! `echo` and `spy --decode` print what they receive, `record` writes it to a file, and both
//! take a `--topic` pattern.
//!
//! Its tests against the examples as processes (`list`, `stat`, `top`, `hz`, `spy`, `topics`,
//! `play`) are in the workspace's `tests/it/cli/`.

use std::path::Path;
use std::process::Output;

use tests::cli::CountersDir;

/// `call` of a served service (its reply as JSON, a request refused naming its field, the
/// errors in words) and `topics` listing it as a service.
mod call;
/// `echo` and `spy --decode`: JSON lines from the topic's schema, with and without the key.
mod echo;
/// `echo` and `record` of a `--topic` pattern: every matching topic under its name, no other.
mod pattern;
/// `play` announcing its topics: found by a discovering subscriber.
mod play;
/// `record` through a lossy proxy: every message, and the gaps marked (none for a reliable
/// export).
mod record;

/// Runs the `llbus` command that cargo built for these tests with `args` and the counters
/// directory `dir`, bounded in time.
fn llbus(dir: &CountersDir, args: &[&str]) -> Output {
    tests::cli::run(Path::new(env!("CARGO_BIN_EXE_llbus")), dir, args)
}
