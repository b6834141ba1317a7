//! The endpoint's sans-IO tests, on one simulated network ([`world`]): hosts at addresses,
//! each a shipped `Endpoint` driven through the calls a bridge makes, a simulated clock, a
//! link with loss, duplication, reordering and outages, multicast groups, and an off-path
//! adversary that forges any source (allowed hosts subscribe like anyone, so they learn what
//! a subscriber learns). Time moves only when a test says so, so every bound is exact.
//!
//! Fixtures, written once:
//! - `world`: the network, its [`Outbox`](world::Outbox) wire and sinks.
//! - `pair`: one publisher and one subscriber on a lossless world, forged frames, the raw
//!   handshake of an allowed host.
//! - `stream`: one publisher's stream to one subscriber through faults, message by message.
//! - `fleet`: publishers and subscribers of one topic for discovery and multicast.
//!
//! Tests by subject, attacks beside the promise they attack:
//! - `handshake`: answers to one datagram, unanswerable sources, duplicated and late
//!   answers, restarts of either side.
//! - `admission`: slots per host, rate limits, expiry, unsubscribes.
//! - `tokens`: forged data, heartbeats and answers from an allowed host (and a property test
//!   of an adversary injecting anything from anywhere).
//! - `reliable`: reliable delivery under loss, outages and forged NAKs and `Unavailable`s.
//! - `large`: fragmented messages, reliable and best effort.
//! - `flood`: NAK floods and late-join bursts against the per-host budget.
//! - `psk`: the pre-shared key's MAC against keyless hosts, alterations and replays.
//! - `wire`: hostile bytes, datagram sizes, the wire version, deadlines.
//! - `schema`: schema fetches, forged replies and spoofed requests.
//! - `discovery` (+ `discovery/forged`): announcements, queries, publishers that come and go;
//!   forged and replayed announcements.
//! - `multicast` (+ `multicast/forged`): data groups, fallback to unicast, group repair;
//!   replayed and forged subscribes, forged group data.
//! - `services`: calls across hosts: replies, errors and timeouts, each call ending once
//!   through loss and duplication; requests without a handshake, forged replies, request
//!   floods against the reply budget.
//! - `alloc`: what allocates nothing once warm; this build's `#[global_allocator]`, counting
//!   per thread.

mod admission;
mod alloc;
mod discovery;
mod fleet;
mod flood;
mod handshake;
mod large;
mod multicast;
mod pair;
mod psk;
mod reliable;
mod schema;
mod services;
mod stream;
mod tokens;
mod wire;
mod world;
