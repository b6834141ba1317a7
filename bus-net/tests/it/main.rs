//! The network bridge's integration tests, one binary: bridges, endpoints and raw sockets driven
//! in this process over loopback (the tests that run the examples or the `llbus` command as
//! processes, or network namespaces, are the workspace's `tests/it/net/`). The allocation tests
//! are `tests/alloc.rs`, a binary of its own (a counting global allocator).
//!
//! - `golden`: both dialects' bytes against the vectors in docs/PROTOCOL.md;
//! - `proptest`: decoders on arbitrary bytes, round trips, models of the trackers and limits;
//! - `bounded_payload`: decoding bounded by the payload's bytes;
//! - `protocol`: fingerprints, subscription expiry, restarts, malformed datagrams, ICMP, sizes,
//!   a broken socket;
//! - `loopback`: two buses joined by bridges, both directions, direct senders, late joiners,
//!   batching;
//! - `security`: allowlists, the cookie handshake, rate limits, caps, the pre-shared key, replays;
//! - `compat`: ll-udp-pubsub v0.1 byte for byte, and its control under the same limits;
//! - `dual_stack`: IPv6 and dual-stack bridges;
//! - `faults`: loss, duplication and reordering through a proxy, reliable recovery, NAKs to a
//!   best-effort export;
//! - `large`: messages in fragments, through loss, and a slow subscriber;
//! - `flood`: a flood of bad datagrams beside real traffic;
//! - `park`: a parked bridge wakes for a datagram and for a local message;
//! - `discovery`: publishers found by topic (`discovery/forged`: announcements and queries
//!   forged against it);
//! - `multicast`: data to a group (`multicast/membership`: joining and leaving groups across
//!   publisher restarts; `multicast/forged`: injection and amplification through groups);
//! - `schema`: schema frames under attack and the generic decoder's bounds;
//! - `services`: a service called across two bridges (reply, error, panic, no server); raw
//!   hosts' requests without a handshake, forged replies (spoofing the server), and a request
//!   flood against the reply budget;
//! - `topics`: named topics across the bridge, two of one type kept apart;
//! - `fixtures`: what several modules share (a loopback address, a tick with its feed and sink,
//!   the CPU guards of the tests that keep a core busy).

mod bounded_payload;
mod compat;
mod discovery;
mod dual_stack;
mod faults;
mod fixtures;
mod flood;
mod golden;
mod large;
mod loopback;
mod multicast;
mod park;
mod proptest;
mod protocol;
mod schema;
mod security;
mod services;
mod services_ends;
mod services_frames;
mod services_limits;
mod services_loss;
mod topics;
