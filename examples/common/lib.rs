//! What the examples share: the network examples' command-line pieces ([`cli`]), the publisher's
//! and subscriber's messages ([`messages`]) and their checked payload ([`payload`]). Each example is a binary of this
//! package (`cargo run --release --example NAME`); this library is their common code.

pub mod cli;
pub mod messages;
pub mod payload;

/// Installs the examples' logger (`env_logger`): what llbus and llbus-net log through the `log`
/// crate (a refused subscription, a publisher of another type, a signal that stops the bus)
/// goes to stderr, warnings and errors by default; `RUST_LOG=info` shows more (`debug`,
/// `llbus_net=debug`: still more). A program of one's own does the same with any logger.
pub fn logger() {
    let env = env_logger::Env::default().default_filter_or("warn");
    // A logger installed already is kept.
    let _ = env_logger::Builder::from_env(env).try_init();
}
