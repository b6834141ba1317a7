//! What the examples share: the network examples' command-line pieces ([`cli`]), the publisher's
//! and subscriber's messages ([`messages`]) and their checked payload ([`payload`]). Each example is a binary of this
//! package (`cargo run --release --example NAME`); this library is their common code.

pub mod cli;
pub mod messages;
pub mod payload;
