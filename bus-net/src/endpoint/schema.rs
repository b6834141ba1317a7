//! Schemas served and fetched: the publisher side answers a `SchemaRequest` with one page of
//! an export's encoded shape; the requester side fetches a topic's shape page by page, with
//! retries, and hands it to the application only once it decoded (bounded) and hashed to the
//! fingerprint the publisher stated (`docs/PROTOCOL.md`, "Schema frames").
//!
//! Serving (ring-fed and direct exports alike): a request is answered only when it is its
//! datagram's only frame, so its answer is one datagram; the page is cut to the request's
//! padding, so that datagram is never larger than the request. The topic's allowlist (or the endpoint's) and the per-source rate limit of
//! the handshake apply; the egress seals the answer with the pre-shared key when there is one.
//! A topic that is not exported, or exported without a shape, is answered with `total` 0, so a
//! tool learns at once that there is nothing to fetch.
//!
//! Fetching: one page in flight per fetch, each page asked with a fresh nonce and asked again
//! (same nonce) every [`SCHEMA_RETRY_NS`], [`SCHEMA_ATTEMPTS`] times at most; a reply is taken
//! only from the publisher asked, for the topic asked, with the nonce of the page in flight
//! (anything else is `BadNonce`). The first page fixes the fingerprint and the total; a later
//! page that disagrees ends the fetch (the publisher restarted with another type).

use std::net::SocketAddr;
use std::sync::Arc;

use llbus::schema::{Shape, ShapeError};

use super::{push_event, Endpoint, Event};
use crate::{
    BatchEncoder, DropReason, Frame, SchemaReply, SchemaRequest, Wire, DEFAULT_MAX_DATAGRAM,
    HEADER_LEN, MAC_TAG_LEN, SCHEMA_REPLY_FIXED,
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
        })
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Why a schema fetch ([`Endpoint::request_schema`]) ended without a shape.
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
pub(crate) struct Fetch {
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

impl Endpoint {
    /// Starts fetching the shape of topic `topic_id` from the publisher at `publisher`: the
    /// requests go out from [`on_timer`](Self::on_timer) (due at once: see
    /// [`next_deadline`](Self::next_deadline)), and the fetch ends with
    /// [`Event::SchemaReceived`] or [`Event::SchemaFailed`]. Asking again for a fetch under
    /// way does nothing. Returns `false` (and starts nothing) when [`MAX_SCHEMA_FETCHES`] are
    /// under way.
    pub fn request_schema(&mut self, topic_id: u64, publisher: SocketAddr) -> bool {
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
        let nonce = self.entropy.next_u64().max(1);
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
    pub(super) fn schema_deadline(&self) -> u64 {
        self.fetches
            .iter()
            .map(|f| f.deadline)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Asks for the pages that are due, padded to a whole datagram; ends the fetches that
    /// asked too often.
    pub(super) fn poll_schema(&mut self, now_ns: u64, wire: &mut dyn Wire) {
        let tag = self.seal_len();
        // Padded to our datagram size, but never past what every endpoint takes in (the IPv4
        // default): a publisher with a smaller limit than our jumbo frames still reads it.
        let request_len = self.max_datagram.min(DEFAULT_MAX_DATAGRAM);
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
                self.end_fetch(i, Err(SchemaFailure::TimedOut));
                continue;
            }
            fetch.attempts += 1;
            fetch.deadline = now_ns.saturating_add(SCHEMA_RETRY_NS);
            let request = SchemaRequest {
                topic_id: fetch.topic_id,
                session: self.session,
                nonce: fetch.nonce,
                offset: u32::try_from(fetch.bytes.len()).unwrap_or(u32::MAX),
                room: SchemaRequest::room_in(request_len, tag),
            };
            let dest = fetch.publisher;
            let mut enc = BatchEncoder::new(&mut self.control_buf[..request_len - tag]);
            if enc.push_schema_request(&request).is_ok() {
                let len = enc.len();
                self.send_control_buf(wire, len, dest, None);
            }
            i += 1;
        }
    }

    /// The MAC trailer's length with a key, else 0: what a sealed control datagram adds.
    fn seal_len(&self) -> usize {
        if self.egress.mac.is_some() {
            MAC_TAG_LEN
        } else {
            0
        }
    }

    /// Ends fetch `i`, saying how in an event.
    fn end_fetch(&mut self, i: usize, result: Result<(u64, Shape), SchemaFailure>) {
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
        push_event(&mut self.events, event);
    }

    /// A `SchemaRequest` from `src`, in a datagram of `datagram_len` bytes if it is the only
    /// frame there (`None` otherwise: not answered, `BadControl`). Answered with one page
    /// of the export's shape, no larger than the request.
    pub(super) fn on_schema_request(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        now_ns: u64,
        datagram_len: Option<usize>,
        wire: &mut dyn Wire,
    ) -> Result<(), DropReason> {
        let request = SchemaRequest::from_frame(frame)?;
        let datagram_len = datagram_len.ok_or(DropReason::BadControl)?;
        if !self.publisher.allowed(request.topic_id, src) {
            return Err(DropReason::NotAllowed);
        }
        if !self.publisher.rate_ok(src, now_ns) {
            return Err(DropReason::RateLimited);
        }
        let exported = self.exports.iter().map(|e| {
            let s = &e.spec;
            (s.topic_id, s.fingerprint, s.shape.as_ref())
        });
        let direct = self
            .directs
            .iter()
            .map(|d| (d.topic_id, d.fingerprint, d.shape.as_ref()));
        let served = exported
            .chain(direct)
            .find(|&(topic_id, ..)| topic_id == request.topic_id);
        let fingerprint = served.map_or(0, |(_, fingerprint, _)| fingerprint);
        let bytes = served
            .and_then(|(.., shape)| shape)
            .map_or(&[][..], EncodedShape::as_bytes);
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        let rest = bytes.get(offset..).ok_or(DropReason::BadControl)?;
        // The answer, sealed or not, is at most the request's length: the request's padding
        // bounds the page, and the request carried the same trailer.
        let tag = self.seal_len();
        let fits = datagram_len.saturating_sub(tag + HEADER_LEN + SCHEMA_REPLY_FIXED);
        let page = rest
            .get(..rest.len().min(request.room).min(fits))
            .unwrap_or_default();
        let reply = SchemaReply {
            topic_id: request.topic_id,
            fingerprint,
            session: self.session,
            nonce: request.nonce,
            total: u32::try_from(bytes.len()).unwrap_or(0),
            offset: request.offset,
            page,
        };
        let room = (datagram_len - tag.min(datagram_len)).min(self.control_buf.len());
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_schema_reply(&reply).is_err() {
            // Cannot happen: the reply is no longer than the request, which fit.
            return Err(DropReason::TooLarge);
        }
        let len = enc.len();
        debug_assert!(
            len + tag <= datagram_len,
            "a schema reply larger than its request"
        );
        self.send_control_buf(wire, len, src, None);
        Ok(())
    }

    /// A `SchemaReply` from `src`: the page in flight of the fetch it answers (else
    /// `BadNonce`). The last page ends the fetch, with the shape if it decodes and hashes to
    /// the stated fingerprint.
    pub(super) fn on_schema_reply(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        now_ns: u64,
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
            self.end_fetch(i, Err(SchemaFailure::NotServed));
            return Ok(());
        }
        let stated = (reply.fingerprint, reply.total);
        if *fetch.first.get_or_insert(stated) != stated {
            self.end_fetch(i, Err(SchemaFailure::Changed));
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
            fetch.nonce = self.entropy.next_u64().max(1);
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
        self.end_fetch(i, result);
        Ok(())
    }
}
