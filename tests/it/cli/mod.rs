//! The `llbus` command as a process, against the examples as processes, each test with a
//! counters directory of its own (`tests::cli::CountersDir`).
//!
//! The command's tests that need only the command and a bus of the test process (`echo`,
//! `spy --decode`, `record`) are in `cli/tests/it/`.

/// `hz` and `spy` against the publisher example.
mod hz_spy;
/// Another user's bus never shadows one's own (root).
mod owners;
/// Hostile files planted beside counters files: skipped promptly, names escaped.
mod planted;
/// `record` then `play` between the publisher and subscriber examples.
mod play;
/// `list` and `stat` against the `watched` example, and stale files.
mod stat;
/// `top` in a terminal (tmux).
mod top;
/// `topics` over loopback multicast, and the subscriber's discovery.
mod topics;
