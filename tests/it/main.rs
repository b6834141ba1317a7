//! The workspace's cross-crate tests, in one binary: the `llbus` command and the examples run
//! as processes, two hosts in network namespaces, and the checks that keep the docs true.
//!
//! - `cli`: the `llbus` command against the examples (`list`, `stat`, `top`, `hz`, `spy`,
//!   `topics`, `play`), and what other users' counters files can do to it. The command's
//!   tests that need no example are in `cli/tests/it/`.
//! - `docs`: docs/CONTRACT.md names a test for every promise, links resolve, the documented
//!   limits are the defaults.
//! - `examples`: the examples' command lines, exit codes, and the zenoh transport.
//! - `ipc`: shared-memory channels between processes, with the examples.
//! - `net`: the network bridge between processes and between namespaces.
//! - `netns_harness`: the two-host harness (`tests::netns`) itself, with raw UDP.
//!
//! The examples and the `llbus` command come from `tests::example_bins` and `tests::cli`: the
//! binaries `cargo test --workspace` has built beside this one.
//!
//! A binary of its own, where the process is the fixture: `counters_env.rs` (its tests set the
//! environment).

mod cli;
mod docs;
mod examples;
mod ipc;
mod net;
mod netns_harness;
