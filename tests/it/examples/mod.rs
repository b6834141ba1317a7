//! The examples of `examples/` as a user runs them, as processes. Their `--transport zenoh`
//! is checked by `zenoh_examples.rs`, a binary of its own.

/// Exit codes the README promises: timeout, and corrupted messages under `--reliable`.
mod exits;
/// `--help`, usage errors, bind errors in words, one thread unless `--split`.
mod flags;
