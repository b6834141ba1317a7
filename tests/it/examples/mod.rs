//! The examples of `examples/` as a user runs them, as processes.

/// Exit codes the README promises: timeout, and corrupted messages under `--reliable`.
mod exits;
/// `--help`, usage errors, bind errors in words, one thread unless `--split`.
mod flags;
/// The `service` and `caller` examples: calls over UDP between two processes.
mod services;
/// `--transport zenoh`: the publisher and subscriber through the zenoh gateway.
mod zenoh;
