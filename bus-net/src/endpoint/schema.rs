//! Schemas served and fetched: the publisher side answers a `SchemaRequest` with one page of
//! an export's encoded shape; the requester side fetches a topic's shape page by page, with
//! retries, and hands it to the application only once it decoded (bounded) and hashed to the
//! fingerprint the publisher stated (`docs/PROTOCOL.md`, "Schema frames").
//!
//! Serving (ring-fed and direct exports alike, and served services: their
//! [`Shape::service`], under its own fingerprint): a request is answered only when it is its
//! datagram's only frame, so its answer is one datagram; the page is cut to the request's
//! padding, so that datagram is never larger than the request. The topic's allowlist (or the
//! endpoint's) and the per-source rate limit of the handshake apply; the egress seals the
//! answer with the pre-shared key when there is one. A topic that is not exported, or exported
//! without a shape, is answered with `total` 0, so a tool learns at once that there is nothing
//! to fetch.
//!
//! Fetching: one page in flight per fetch, each page asked with a fresh nonce and asked again
//! (same nonce) every [`SCHEMA_RETRY_NS`], [`SCHEMA_ATTEMPTS`] times at most; a reply is taken
//! only from the publisher asked, for the topic asked, with the nonce of the page in flight
//! (anything else is `BadNonce`). The first page fixes the fingerprint and the total; a later
//! page that disagrees ends the fetch (the publisher restarted with another type).
//!
//! Serving is the publisher side's ([`PublisherSide::on_schema_request`]); fetching is
//! [`SchemaFetches`], which the subscriber side owns. Inputs of a fetch: the request
//! ([`SchemaFetches::request`]), `SchemaReply` frames with their source, and the timer.
//! Outputs: `SchemaRequest`s, and one [`Event::SchemaReceived`] or [`Event::SchemaFailed`] per
//! fetch.
//!
//! [`PublisherSide::on_schema_request`]: super::publisher::PublisherSide::on_schema_request

use std::net::SocketAddr;
use std::sync::Arc;

use llbus::schema::{Shape, ShapeError};

use super::common::Common;
use super::event::Event;
use crate::{
    BatchEncoder, DropReason, Frame, SchemaReply, SchemaRequest, Wire, DEFAULT_MAX_DATAGRAM,
};

/// How long a fetch waits for a page before asking again.
pub const SCHEMA_RETRY_NS: u64 = 200_000_000;
/// How many times a page is asked for before the fetch fails ([`SchemaFailure::TimedOut`]).
pub const SCHEMA_ATTEMPTS: u32 = 10;
/// How many fetches an endpoint runs at once.
pub const MAX_SCHEMA_FETCHES: usize = 16;

/// A type's shape encoded for the wire ([`Shape::to_bytes`]), as an export serves it: checked
/// once, when it is made, to be at most [`MAX_SCHEMA_LEN`](crate::MAX_SCHEMA_LEN) bytes and
/// nested at most `llbus::schema::MAX_DEPTH` deep, so that every requester can decode it.
/// Cloning it shares the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedShape {
    bytes: Arc<[u8]>,
    /// The shape's fingerprint ([`Shape::fingerprint`]).
    fingerprint: u64,
}

impl EncodedShape {
    /// Encodes `shape`.
    ///
    /// # Errors
    /// [`ShapeError::TooLarge`] or [`ShapeError::TooDeep`] for a shape no requester would
    /// accept: a type too large or too deeply nested to be described on the wire.
    pub fn new(shape: &Shape) -> Result<EncodedShape, ShapeError> {
        Ok(EncodedShape {
            bytes: shape.to_bytes()?.into(),
            fingerprint: shape.fingerprint(),
        })
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The shape's fingerprint: what a schema reply states for a service, whose shape
    /// ([`Shape::service`]) is not its topic's type.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// Why a schema fetch ([`Endpoint::request_schema`](super::Endpoint::request_schema)) ended
/// without a shape.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaFailure {
    /// The publisher serves no schema for the topic (it does not export it, or exports it
    /// without a shape).
    NotServed,
    /// A page was asked for [`SCHEMA_ATTEMPTS`] times without an answer: the publisher is
    /// not there, does not allow this host, or the key differs.
    TimedOut,
    /// The pages disagree about the fingerprint or the length: the publisher restarted with
    /// another type in the middle of the fetch.
    Changed,
    /// The bytes are not a shape (or one too deep or too large).
    Malformed(ShapeError),
    /// The shape does not hash to the fingerprint the publisher stated: refused.
    Mismatch {
        /// The fingerprint the publisher stated.
        fingerprint: u64,
        /// The hash of the shape it sent.
        computed: u64,
    },
}

impl std::fmt::Display for SchemaFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaFailure::NotServed => {
                f.write_str("the publisher serves no schema for this topic")
            }
            SchemaFailure::TimedOut => f.write_str(
                "no answer from the publisher: check its address, its allowlist and the key",
            ),
            SchemaFailure::Changed => f.write_str(
                "the publisher's schema changed during the fetch (it restarted); ask again",
            ),
            SchemaFailure::Malformed(e) => write!(f, "the publisher sent a bad schema: {e}"),
            SchemaFailure::Mismatch {
                fingerprint,
                computed,
            } => write!(
                f,
                "the schema sent hashes to {computed:#018x}, not to the fingerprint \
                 {fingerprint:#018x} the publisher stated: refused"
            ),
        }
    }
}

impl std::error::Error for SchemaFailure {}

/// One fetch under way.
struct Fetch {
    topic_id: u64,
    publisher: SocketAddr,
    /// The nonce of the page in flight (never 0).
    nonce: u64,
    /// The fingerprint and total length the first page stated.
    first: Option<(u64, u32)>,
    /// The pages received, in order (at most `MAX_SCHEMA_LEN` bytes).
    bytes: Vec<u8>,
    /// How many times the page in flight was asked for.
    attempts: u32,
    /// When it is asked for (again).
    deadline: u64,
}

/// The schema fetches under way (at most [`MAX_SCHEMA_FETCHES`]).
#[derive(Default)]
pub(crate) struct SchemaFetches {
    fetches: Vec<Fetch>,
}

impl SchemaFetches {
    /// Starts fetching the shape of topic `topic_id` from `publisher` (its first page due at
    /// once), the nonce drawn from `common`'s entropy. Asking again for a fetch under way does
    /// nothing. Returns `false` (and starts nothing) when [`MAX_SCHEMA_FETCHES`] are under way.
    pub(crate) fn request(
        &mut self,
        topic_id: u64,
        publisher: SocketAddr,
        common: &mut Common,
    ) -> bool {
        let publisher = crate::canonical(publisher);
        if self
            .fetches
            .iter()
            .any(|f| f.topic_id == topic_id && f.publisher == publisher)
        {
            return true;
        }
        if self.fetches.len() >= MAX_SCHEMA_FETCHES {
            return false;
        }
        let nonce = common.entropy.next_u64().max(1);
        self.fetches.push(Fetch {
            topic_id,
            publisher,
            nonce,
            first: None,
            bytes: Vec::new(),
            attempts: 0,
            deadline: 0,
        });
        true
    }

    /// When a fetch next asks for a page (`u64::MAX`: no fetch under way).
    pub(crate) fn deadline(&self) -> u64 {
        self.fetches
            .iter()
            .map(|f| f.deadline)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Asks for the pages that are due, padded to a whole datagram; ends the fetches that
    /// asked too often.
    pub(crate) fn poll(&mut self, now_ns: u64, wire: &mut dyn Wire, common: &mut Common) {
        let tag = common.seal_len();
        // Padded to our datagram size, but never past what every endpoint takes in (the IPv4
        // default): a publisher with a smaller limit than our jumbo frames still reads it.
        let request_len = common.max_datagram.min(DEFAULT_MAX_DATAGRAM);
        let mut i = 0;
        while i < self.fetches.len() {
            let Some(fetch) = self.fetches.get_mut(i) else {
                break;
            };
            if fetch.deadline > now_ns {
                i += 1;
                continue;
            }
            if fetch.attempts >= SCHEMA_ATTEMPTS {
                self.end(i, Err(SchemaFailure::TimedOut), common);
                continue;
            }
            fetch.attempts += 1;
            fetch.deadline = now_ns.saturating_add(SCHEMA_RETRY_NS);
            let request = SchemaRequest {
                topic_id: fetch.topic_id,
                session: common.session,
                nonce: fetch.nonce,
                offset: u32::try_from(fetch.bytes.len()).unwrap_or(u32::MAX),
                room: SchemaRequest::room_in(request_len, tag),
            };
            let dest = fetch.publisher;
            let mut enc = BatchEncoder::new(&mut common.control_buf[..request_len - tag]);
            if enc.push_schema_request(&request).is_ok() {
                let len = enc.len();
                common.send_control_buf(wire, len, dest, None);
            }
            i += 1;
        }
    }

    /// Ends fetch `i`, saying how in an event.
    fn end(&mut self, i: usize, result: Result<(u64, Shape), SchemaFailure>, common: &mut Common) {
        if i >= self.fetches.len() {
            return;
        }
        let fetch = self.fetches.swap_remove(i);
        let (topic_id, publisher) = (fetch.topic_id, fetch.publisher);
        let event = match result {
            Ok((fingerprint, shape)) => Event::SchemaReceived {
                topic_id,
                publisher,
                fingerprint,
                shape,
            },
            Err(reason) => Event::SchemaFailed {
                topic_id,
                publisher,
                reason,
            },
        };
        common.push_event(event);
    }

    /// A `SchemaReply` from `src`: the page in flight of the fetch it answers (else
    /// `BadNonce`). The last page ends the fetch, with the shape if it decodes and hashes to
    /// the stated fingerprint.
    pub(crate) fn on_reply(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        now_ns: u64,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let reply = SchemaReply::from_frame(frame)?;
        let Some(i) = self.fetches.iter().position(|f| {
            f.publisher == src && f.topic_id == reply.topic_id && f.nonce == reply.nonce
        }) else {
            return Err(DropReason::BadNonce);
        };
        let Some(fetch) = self.fetches.get_mut(i) else {
            return Err(DropReason::BadNonce);
        };
        if reply.total == 0 {
            self.end(i, Err(SchemaFailure::NotServed), common);
            return Ok(());
        }
        let stated = (reply.fingerprint, reply.total);
        if *fetch.first.get_or_insert(stated) != stated {
            self.end(i, Err(SchemaFailure::Changed), common);
            return Ok(());
        }
        if reply.offset as usize != fetch.bytes.len() || reply.page.is_empty() {
            // A page that is not the next one, or none at all (a request with no room for
            // it, which this side never sends): asked again at the deadline.
            return Err(DropReason::BadControl);
        }
        fetch.bytes.extend_from_slice(reply.page);
        if fetch.bytes.len() < reply.total as usize {
            // The next page, with a fresh nonce, goes out at once.
            fetch.nonce = common.entropy.next_u64().max(1);
            fetch.attempts = 0;
            fetch.deadline = now_ns;
            return Ok(());
        }
        let result = match Shape::from_bytes(&fetch.bytes) {
            Err(e) => Err(SchemaFailure::Malformed(e)),
            Ok(shape) if shape.fingerprint() != reply.fingerprint => Err(SchemaFailure::Mismatch {
                fingerprint: reply.fingerprint,
                computed: shape.fingerprint(),
            }),
            Ok(shape) => Ok((reply.fingerprint, shape)),
        };
        self.end(i, result, common);
        Ok(())
    }
}
