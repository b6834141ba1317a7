//! The pure protocol layer: byte layouts, encoding and decoding, loss accounting and the
//! subscriber table. No sockets, no threads, no clocks: time is always passed in.
//!
//! The wire format is specified in `docs/PROTOCOL.md`; the golden tests in this module check
//! its hex vectors verbatim.
//!
//! - [`header`]: the native frame header (48 bytes, little-endian, version 3), kinds and flags.
//! - [`encode`]: packing one or more frames into a caller's datagram buffer, without allocating.
//! - [`decode`]: validating a received datagram and iterating its frames zero-copy; why a
//!   datagram is dropped ([`DropReason`]) and counters for it.
//! - [`control`]: the control frames (subscribe, cookie challenge, acknowledge, refuse,
//!   unsubscribe, heartbeat) and the reasons a subscription is refused.
//! - [`cookie`]: stateless address-proving cookies (keyed BLAKE3 over address and time window).
//! - [`mac`]: the optional pre-shared-key MAC tag after a datagram's last frame.
//! - [`limits`]: the allowlist of subscriber networks and the per-source rate limiter.
//! - [`fragment`]: the `Fragment` frame, one piece of a message larger than a datagram.
//! - [`reliable`]: the frames of reliable topics: `Nak` (retransmit a range) and `Unavailable`
//!   (that range left history).
//! - [`schema`]: the schema frames: `SchemaRequest` and `SchemaReply` (a page of a topic's
//!   encoded shape, never larger than the request).
//! - [`discovery`]: `Announce` (a bridge's exports and addresses) and `Query` (who exports
//!   this topic?), the discovery frames.
//! - [`multicast`]: the `Group` frame, which tells a subscriber the multicast group and group
//!   token of a topic's data.
//! - [`compat`]: the ll-udp-pubsub v0.1 format, byte for byte.
//! - [`service`]: the frames of services: `Request` and `Reply`, one call each.
//! - [`seq`]: per-(publisher session, topic) sequence tracking: lost, duplicate, reordered.
//! - [`subscribers`]: the publisher's table of subscribers, with expiry.

pub(crate) mod compat;
pub(crate) mod control;
pub(crate) mod cookie;
pub(crate) mod decode;
pub(crate) mod discovery;
pub(crate) mod encode;
pub(crate) mod fragment;
pub(crate) mod header;
pub(crate) mod limits;
pub(crate) mod mac;
pub(crate) mod multicast;
pub(crate) mod reliable;
pub(crate) mod schema;
pub(crate) mod seq;
pub(crate) mod service;
pub(crate) mod subscribers;

/// The bincode configuration of every payload, in both dialects: bincode 1.x layout
/// (little-endian, fixed-width integers, `u64` length prefixes, `u32` enum variant indices),
/// which is also what ll-udp-pubsub v0.1 puts on the wire.
///
/// NB: fixed-width integers rather than `standard()`'s varints: a message of fixed-size fields
/// encodes to a fixed size (so "does it fit" is known per type) and each field is one store;
/// the few bytes varints would save are small next to the 48-byte frame header and the 28-byte
/// IP/UDP header.
pub(crate) const fn bincode_config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::NoLimit,
> {
    bincode::config::legacy()
}

/// The bounded payload decoder, shared with llbus-ipc (it lives in `llbus`): no claimed length
/// or element count, zero-size elements included, costs more than the bytes that carry it plus
/// a fixed spare of 4096 elements.
/// Returns the value and the bytes left over.
pub(crate) use llbus::{decode_bounded, PayloadError};
