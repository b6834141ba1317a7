//! The zenoh gateway's integration tests, as a user and as a hostile zenoh client on the same
//! key space: each test opens the gateway's session and a second zenoh session, peers on
//! loopback with scouting off, that puts whatever it likes on an import's key. Every wait is
//! bounded by `fixtures::LIMIT`, and a call that could hang (a close) runs on a thread of its
//! own, waited for with a timeout.
//!
//! Modules:
//! - `export`: a publisher never waits for zenoh; encodings, keys, put failures.
//! - `import`: what an import counts of what it is sent; `import::forged`: forged sequence
//!   numbers.
//! - `close`: `Gateway::close` returns in bounded time with final figures.
//! - `refusals`: what `GatewayBuilder::start` refuses (echo, duplicate keys, zenoh's refusals).
//! - `errors`: the errors table of `Gateway::errors`.
//! - `counters`: the gateway's figures in the bus's live counters file.
//! - `topics`: named topics: one key per name, each import its own, remaps, echo by name.
//! - `clients`: what a zenoh client that is not llbus sees and sends.
//! - `services`: services exported as queryables and imported through `get`.
//! - `fixtures`: the message types, peer configurations and bounded waits they share.
//!
//! Two llbus processes talking through zenoh, and a zenoh peer killed mid-stream, are in
//! `tests/two_processes.rs`: that binary runs itself again as the other process.

mod clients;
mod close;
#[cfg(unix)]
mod counters;
mod errors;
mod export;
mod fixtures;
mod import;
mod refusals;
mod services;
mod topics;
