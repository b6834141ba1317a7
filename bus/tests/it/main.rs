//! llbus's integration tests, in one binary with one module per subject:
//!
//! - `flow`: messages through the bus, per-edge order, group threads, a stop that loses nothing;
//! - `stop` (and `stop::hostile`): the stop contract, and stops from every side and at every
//!   moment;
//! - `handles` (and `handles::waiting`): external publishers and subscriptions, and how they wait;
//! - `tokio_edges`: the tokio adapter's channels, across a stop;
//! - `broadcast`: `Block` subscribers sharing one broadcast ring;
//! - `policies`: backpressure and supervision policies with exact counts;
//! - `failure`: panics, hangs and deadlocks as a new user meets them;
//! - `supervision`: restart limits and delays, escalation, `never_waits`;
//! - `builder`: settings that cannot work are start errors, whatever the order of the calls;
//! - `wiring`: wiring mistakes named by `start()`;
//! - `inbox`: `#[derive(Inbox)]` and an actor that receives through one;
//! - `derive`: `#[derive(Message)]`'s topics and fingerprints;
//! - `schema_decode`: the generic decoder against serde's own;
//! - `counters`: the live counters file;
//! - `pinning`: pinning inside the process's CPU set;
//! - `topics`: named topics: several of one type, the topic of each message, remapping, and
//!   the names `start()` refuses.
//!
//! `fixtures` holds the message types and actors several modules share. Allocation counting
//! needs a process of its own: see `tests/alloc.rs`.
#![cfg(not(loom))]

mod broadcast;
mod builder;
mod counters;
mod derive;
mod failure;
mod fixtures;
mod flow;
mod handles;
mod inbox;
mod pinning;
mod policies;
mod schema_decode;
mod services;
mod stop;
mod supervision;
mod tokio_edges;
mod topics;
mod wiring;
