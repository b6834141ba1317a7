//! The llbus network layer: topics of one bus made to appear on another bus on another host,
//! over UDP, in llbus's own native format (wire version 3) or the original ll-udp-pubsub v0.1
//! format, byte for byte.
//!
//! Five layers, bottom up:
//!
//! - The **protocol** layer is pure: frame layouts, batch encoding into a caller's buffer,
//!   validating zero-copy decoding, control frames, the compat format, the sequence tracker and
//!   the subscriber table. No sockets, threads or clocks (timestamps and "now" are passed in).
//!   The wire format is specified, with test vectors, in `docs/PROTOCOL.md`.
//! - The **session** layer is pure too: sans-IO state machines in the manner of quinn-proto,
//!   [`PublisherSession`] (the publisher side of the handshake: allowlist, rate limit, cookies,
//!   subscriber table) and [`SubscriberSession`] (one import: fresh nonces, which answers are
//!   its own, which publisher session it follows, renewal, backoff, sequence tracking). Each
//!   takes `(frame, source, now)` and returns answers ([`Replies`]) and events, so every attack
//!   and fault is a unit test.
//! - The **endpoint** ([`Endpoint`]) is sans-IO too: a router over parts that each own their
//!   state, one file each under `endpoint/`: the publisher side (the publisher machine, every
//!   export's sequence and history), the subscriber side (every import's machine, reliable
//!   receiver and reassembler, the schema fetches), discovery, compat, and the egress that
//!   seals or tokens each datagram. Datagrams and time go in; datagrams to send (through a
//!   [`Wire`]), messages to deliver (to a [`Sink`]), events and the next deadline come out.
//! - The **io** layer is a non-blocking UDP socket ([`UdpEndpoint`]) with batched send and
//!   receive: `sendmmsg`/`recvmmsg` on Linux, `send_to`/`recv_from` loops elsewhere.
//! - The **bridge** ([`Bridge`]) joins them to the bus as an actor of its own:
//!   `Bridge::bind(addr)?.export::<Quote>().import::<Order>(peer)`, then `bus.add(bridge)`.
//!   Exported topics are read from their rings and sent in batched datagrams to every
//!   subscriber; imported topics are checked (fingerprint, sequence), decoded once and published
//!   on the local bus without ever waiting on it (a full ring drops and counts). Subscriptions
//!   are renewed every second and expire after 60 s; heartbeats every 100 ms carry the last
//!   sequence number. Its figures (datagrams, messages and bytes in and out; lost, duplicate,
//!   reordered; drops by reason; subscribers per topic) are named metrics of its actor in the
//!   bus's report. [`Bridge::direct`] sends a topic from the publishing actor's own thread
//!   instead, skipping the ring. [`Bridge::export_service`] and [`Bridge::import_service`] call a
//!   service (`llbus::Service`) of one bus from another: one `Request` and one `Reply`
//!   datagram per call, under the topics' handshake and a per-host reply byte budget. `export_compat`/`import_compat` speak ll-udp-pubsub v0.1.
//!   On a shared network it admits only subscribers that proved their address with a cookie,
//!   from its allowlist (loopback by default), rate-limits control traffic per source (renewals
//!   included), caps subscribers per topic and per host, binds every handshake answer to its
//!   request with a nonce and every subscriber's data to its handshake with a subscription
//!   token, answers NAKs and late joiners from one retransmission budget per host, drops
//!   datagrams from sources that cannot be answered, and can require a replay-resistant
//!   pre-shared-key MAC: see `SECURITY.md`. Nothing from the network stops it: a failed send
//!   to one destination is counted, and a socket that truly fails (`EBADF`, `ENOTSOCK`,
//!   `EFAULT`) is reported through the bus, never by a panic: the bus stops and `join`
//!   returns `llbus::BusError::ActorFailed` naming the bridge and the socket (also in
//!   [`BridgeStatus`] and the `socket_failed` metric).
//!
//! # Contract
//!
//! **What allocates.** Creating a [`RecvBatch`] or [`SendBatch`] (N buffers of the maximum
//! datagram size, once), binding a [`UdpEndpoint`], and inserting a *new* entry into a
//! [`SubscriberTable`] (the vector grows up to its capacity). Decoding a payload allocates what
//! the message type itself owns (a `String` field, a `Vec`), nothing more. Nothing else does:
//! encoding a batch ([`BatchEncoder`]), parsing and iterating a datagram ([`parse_datagram`]),
//! decoding a payload of plain fields, control frames, the compat format, [`SeqTracker`],
//! renewing and expiring subscribers, and batched socket send and receive allocate nothing per
//! message (checked by a counting-allocator test, `tests/alloc.rs`). Nothing here locks.
//! Answering a schema request allocates nothing; fetching a schema
//! ([`Endpoint::request_schema`]) allocates the pages it receives (at most
//! [`MAX_SCHEMA_LEN`] bytes) and the decoded shape.
//!
//! **Hardening primitives** (see `SECURITY.md`): stateless address-proving cookies
//! ([`CookieJar`]), the optional pre-shared-key MAC ([`FrameMac`]), the subscriber allowlist
//! ([`Allowlist`], loopback only by default), the per-source control rate limit
//! ([`RateLimiter`]) and the per-topic subscriber cap ([`SubscriberTable::with_topic_cap`]).
//! Building an [`Allowlist`] or a [`RateLimiter`] allocates, once; issuing and verifying
//! cookies, sealing and opening datagrams, and allowlist and rate-limit checks allocate nothing.
//!
//! **What is dropped and counted, never an error or a panic.** Every malformed datagram
//! (truncated, wrong magic or version, unknown or reserved kind, unsupported flags, absurd
//! lengths, undecodable payload, too large, ...) is dropped whole and counted under one
//! [`DropReason`] ([`DropCounts`]); a payload's length prefixes may not claim more than the
//! bytes left in it, so garbage cannot make a decode allocate more than it carries. Lost,
//! duplicate, reordered and stale messages are counted per publisher and topic in
//! [`LossCounts`]. At the socket, datagrams too large for the receive buffer, ICMP-surfaced
//! errors (`ECONNREFUSED`, unreachable) and sends refused for a full buffer are counted in
//! [`IoStats`].
//!
//! **What is an error.** A message too large for an empty datagram is refused when it is
//! encoded ([`EncodeError::TooLarge`]: nothing is truncated or fragmented); a subscription
//! refused for good is reported as a [`Refusal`] naming the topic and both fingerprints (a
//! transient one is a warning, retried); a broken socket (closed, not a socket) is returned as
//! `io::Error` by [`UdpEndpoint`] and reported through [`BridgeStatus`] by the bridge. A send
//! that fails for its destination is counted, never an error.
//!
//! **What is lost on a crash.** UDP is unreliable by design: datagrams in flight or in socket
//! buffers. A restarted publisher has a new session id, which subscribers notice and start over
//! from without a false gap storm.
//!
//! # Example
//!
//! Two quotes batched into one datagram, sent over loopback and decoded:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use llbus_net::*;
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct Quote { px: i64, qty: u32 }
//!
//! let loopback = "127.0.0.1:0".parse()?;
//! let mut publisher = UdpEndpoint::bind(loopback, &SocketConfig::default())?;
//! let mut subscriber = UdpEndpoint::bind(loopback, &SocketConfig::default())?;
//!
//! // Allocated once, reused for every datagram.
//! let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
//! let mut send = SendBatch::new(16);
//! let mut recv = RecvBatch::new(16, DEFAULT_MAX_DATAGRAM);
//!
//! let meta = DataMeta { topic_id: 1, fingerprint: 2, session: 3, seq: 1, timestamp_ns: 0 };
//! let mut enc = BatchEncoder::new(&mut buf);
//! enc.push_data(meta, &Quote { px: 100, qty: 5 })?;
//! enc.push_data(DataMeta { seq: 2, ..meta }, &Quote { px: 101, qty: 1 })?;
//! publisher.send_batch(&mut send, [(enc.as_bytes(), subscriber.local_addr())])?;
//!
//! let mut quotes = Vec::new();
//! let mut tracker = SeqTracker::new(LatePolicy::Deliver);
//! while quotes.len() < 2 {
//!     if subscriber.recv_batch(&mut recv)? == 0 {
//!         std::thread::yield_now(); // a pinned bridge would busy-poll instead
//!     }
//!     for (datagram, _from) in recv.iter() {
//!         for frame in parse_datagram(datagram, DEFAULT_MAX_DATAGRAM)? {
//!             if tracker.observe(frame.header.session, frame.header.seq).is_deliver() {
//!                 quotes.push(decode_payload::<Quote>(frame.payload)?);
//!             }
//!         }
//!     }
//! }
//! assert_eq!(quotes, [Quote { px: 100, qty: 5 }, Quote { px: 101, qty: 1 }]);
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! Modules are private and their public types are re-exported here (the house style); the
//! bridge, in this crate, reaches the same items through `crate::protocol` and `crate::io`.
//!
//! **One crate, split by modules, not two crates.** quinn splits its protocol (`quinn-proto`)
//! from its sockets (`quinn`); llbus-net draws the same line inside one crate: `protocol`,
//! `session` and `endpoint` never touch a socket, a thread or a clock, and are public (the
//! CLI's tap and the fuzz targets drive them); `io` and `bridge` own sockets and threads.
//! A second crate would buy nothing a user can measure: the socket layer's dependencies
//! (`socket2`, `libc`) are ones every user of the protocol (the CLI, a bridge) needs anyway,
//! and the line is kept by the module tree (of `io` and `bridge`, `endpoint` uses only the
//! settings, [`BridgeConfig`], plain data), which a split would only move across a crate
//! boundary.
//!
//! The [`Endpoint`] owns every piece of a bridge's protocol state and makes every protocol
//! decision; the bridge's actor only moves bytes between its sockets, the bus's rings and the
//! endpoint, and the simulator (tests) drives the same endpoint. Every datagram leaves
//! through one egress (`endpoint/egress.rs`), which seals it or appends its token, and then a
//! [`Wire`]: the bridge's socket, a direct sender's, or the simulator's network.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod protocol;

pub use protocol::compat::{decode_compat_packet, encode_compat_packet, CompatControl};
pub use protocol::control::{
    Control, Refusal, RefuseReason, HANDSHAKE_PAYLOAD_LEN, REFUSE_PAYLOAD_LEN,
};
pub use protocol::cookie::{Cookie, CookieJar, COOKIE_LEN, DEFAULT_COOKIE_WINDOW};
pub use protocol::decode::{decode_payload, parse_datagram, DropCounts, DropReason, Frame, Frames};
pub use protocol::discovery::{
    entry_len, Announce, AnnounceHead, AnnouncedTopic, Query, ANNOUNCE_FIXED_LEN, ENTRY_RELIABLE,
    ENTRY_SERVICE, MAX_ANNOUNCED_NAME, QUERY_LEN,
};
pub use protocol::encode::{
    check_fits, encode_payload, encode_payload_sized, payload_size, BatchEncoder, DataMeta,
    EncodeError,
};
pub use protocol::fragment::{
    fragment_room, split_fragments, FragmentHeader, DEFAULT_MAX_MESSAGE, FRAGMENT_HEADER_LEN,
};
pub use protocol::header::{
    Flags, Header, Kind, DEFAULT_MAX_DATAGRAM, DEFAULT_MAX_DATAGRAM_V6, HEADER_LEN, MAGIC,
    MAX_DATAGRAM_LIMIT, TOKEN_LEN, VERSION,
};
pub use protocol::limits::{
    Allowlist, Cidr, CidrError, RateLimit, RateLimiter, DEFAULT_RATE_LIMIT,
    DEFAULT_RATE_LIMIT_SOURCES,
};
pub use protocol::mac::{
    FrameMac, ReplayGuard, SealError, SealInfo, MAC_TAG_LEN, MAX_KEYS, REPLAY_WINDOW,
};
pub use protocol::multicast::{GroupOffer, GROUP_PAYLOAD_LEN};
pub use protocol::reliable::{Nak, Unavailable, NAK_PAYLOAD_LEN, UNAVAILABLE_PAYLOAD_LEN};
pub use protocol::schema::{
    SchemaReply, SchemaRequest, MAX_SCHEMA_LEN, SCHEMA_REPLY_FIXED, SCHEMA_REQUEST_FIXED,
};
pub use protocol::seq::{JumpGuard, LatePolicy, LossCounts, SeqTracker, Verdict, MAX_JUMP, WINDOW};
pub use protocol::service::{
    encode_reply, encode_request, CallMeta, CallStatus, ReplyFrame, RequestFrame, REPLY_FIXED,
    REQUEST_FIXED,
};
pub use protocol::subscribers::{
    Host, Renewal, Subscriber, SubscriberTable, DEFAULT_SUBSCRIBERS_PER_HOST,
    DEFAULT_SUBSCRIBERS_PER_TOPIC, DEFAULT_SUBSCRIBER_TIMEOUT,
};

mod session;
pub use session::publisher::{ExportedTopic, PublisherCounts, PublisherEvent, PublisherSession};
pub use session::reassembly::{Reassembled, Reassembler, ReassemblyConfig, ReassemblyCounts};
pub use session::reliable::{
    Delivery, History, HostBudgets, ReliableConfig, ReliableExport, ReliableReceiver,
    ReliableRecvCounts, ReliableSendCounts, Retransmit,
};
pub use session::subscriber::{
    ImportState, SubscriberCounts, SubscriberEvent, SubscriberSession, MAX_BACKOFF_NS, OUTSTANDING,
    RESUBSCRIBE_GAP_NS,
};
pub use session::{canonical, is_answerable, Replies};

mod endpoint;
pub use endpoint::{
    DiscoverPattern, DiscoverSpec, DiscoveryCounts, EncodedShape, Endpoint, Event, ExportBatch,
    ExportSpec, GroupRepairCounts, ImportSpec, Origin, SchemaFailure, ServiceImportSpec,
    ServiceSpec, Sink, Wire, EVENT_QUEUE, MAX_SCHEMA_FETCHES, RESEND_FIRST_NS, RESEND_MAX_NS,
    SCHEMA_ATTEMPTS, SCHEMA_RETRY_NS, SEEN_WINDOW,
};

mod bridge;
mod io;
pub use bridge::{
    Bridge, BridgeActor, BridgeConfig, BridgeStatus, DirectError, DirectSender, Discovered,
    DiscoveryConfig, Missed, MulticastConfig, ServiceConfig, SocketWire, DEFAULT_CACHED_PER_SOURCE,
    DEFAULT_CALLS_IN_FLIGHT, DEFAULT_DISCOVERY_GROUP, DEFAULT_REPLY_RATE, DEFAULT_REQUEST_LIMIT,
    DEFAULT_SERVED_CALLS,
};
pub use io::{
    multicast_v4_interfaces, new_session_id, random_secret, realtime_ns, IoStats, RecvBatch,
    SendBatch, SocketConfig, UdpEndpoint, MAX_BATCH,
};

#[cfg(test)]
mod tests;
