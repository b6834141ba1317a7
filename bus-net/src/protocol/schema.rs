//! The schema frames: `SchemaRequest` and `SchemaReply` (`docs/PROTOCOL.md`, "Schema frames").
//!
//! A tool without a topic's Rust type asks the publisher for the type's shape (what the
//! fingerprint hashes, encoded by `llbus::schema::Shape::to_bytes`) one page at a time. The
//! request is padded by the requester: the padding is the room the reply's page may take, so an
//! answer is never larger than the datagram that asked for it (as QUIC pads its first packet),
//! and a forged source earns its victim no more bytes than the forger sent. Each page is bound
//! to its request by a fresh nonce, which the reply echoes.
//!
//! Payload layouts (all little-endian); the header's topic id names the topic, its session is
//! the sender's session id, its sequence number and timestamp are 0:
//!
//! | kind          | header fingerprint | payload                                               |
//! |---------------|--------------------|-------------------------------------------------------|
//! | SchemaRequest | 0                  | nonce `u64`, offset `u32`, zero `u32`, zero padding (`n` bytes) |
//! | SchemaReply   | the topic's        | nonce `u64` echoed, total `u32`, offset `u32`, page (at most `n` bytes) |
//!
//! `total` is the encoded shape's length, 0 if the publisher serves no schema for the topic;
//! the page is the shape's bytes `offset..offset + page.len()`. A request whose nonce is 0 or
//! whose padding is not zero, and a reply whose page runs past `total` or whose `total` is
//! larger than [`MAX_SCHEMA_LEN`], is [`DropReason::BadControl`].

use super::control::control_header as header;
use super::decode::{DropReason, Frame};
use super::encode::{BatchEncoder, EncodeError};
use super::header::{Kind, HEADER_LEN, MAX_DATAGRAM_LIMIT};
use super::reliable::le_u64;

/// The fixed part of a `SchemaRequest`'s payload: nonce, offset, zero word.
pub const SCHEMA_REQUEST_FIXED: usize = 16;
/// The fixed part of a `SchemaReply`'s payload: nonce, total, offset.
pub const SCHEMA_REPLY_FIXED: usize = 16;
/// The largest encoded shape served or accepted: `llbus::schema::MAX_ENCODED_LEN`.
pub const MAX_SCHEMA_LEN: usize = llbus::schema::MAX_ENCODED_LEN;

/// A request's padding (zero-initialised, so it costs no space in the binary).
static ZEROS: [u8; MAX_DATAGRAM_LIMIT] = [0; MAX_DATAGRAM_LIMIT];

/// Requester to publisher: send the page of topic `topic_id`'s encoded shape that starts at
/// `offset`, at most `room` bytes of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SchemaRequest {
    /// The topic id.
    pub topic_id: u64,
    /// The requester's session id.
    pub session: u64,
    /// A fresh random number (not 0), echoed by the reply.
    pub nonce: u64,
    /// Where the page starts in the encoded shape.
    pub offset: u32,
    /// The zero padding after the fixed part: the most page bytes the reply may carry.
    pub room: usize,
}

/// Publisher to requester: one page of a topic's encoded shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SchemaReply<'a> {
    /// The topic id.
    pub topic_id: u64,
    /// The topic's fingerprint (what its data frames carry); 0 for a topic not served.
    pub fingerprint: u64,
    /// The publisher's session id.
    pub session: u64,
    /// The request's nonce, echoed.
    pub nonce: u64,
    /// The encoded shape's length; 0: no schema is served for this topic.
    pub total: u32,
    /// Where `page` starts in it.
    pub offset: u32,
    /// The bytes.
    pub page: &'a [u8],
}

/// The `u32` at `at` of `p` (0 if out of range).
fn le_u32(p: &[u8], at: usize) -> u32 {
    p.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

impl SchemaRequest {
    /// The request of a frame.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind, a zero nonce or padding that is not zero;
    /// [`DropReason::BadLength`] for a payload shorter than its fixed part.
    pub fn from_frame(frame: &Frame<'_>) -> Result<SchemaRequest, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::SchemaRequest {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        let padding = p.get(SCHEMA_REQUEST_FIXED..).ok_or(DropReason::BadLength)?;
        let nonce = le_u64(p, 0);
        if nonce == 0 || le_u32(p, 12) != 0 || padding.iter().any(|&b| b != 0) {
            return Err(DropReason::BadControl);
        }
        Ok(SchemaRequest {
            topic_id: h.topic_id,
            session: h.session,
            nonce,
            offset: le_u32(p, 8),
            room: padding.len(),
        })
    }

    /// The padding that fills a datagram of `datagram` bytes, `trailer` of them kept for the
    /// MAC (or 0): the largest page a request of that size can be answered with.
    pub fn room_in(datagram: usize, trailer: usize) -> usize {
        datagram.saturating_sub(trailer + HEADER_LEN + SCHEMA_REQUEST_FIXED)
    }
}

impl<'a> SchemaReply<'a> {
    /// The reply of a frame.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind, a `total` over [`MAX_SCHEMA_LEN`] or a page
    /// that runs past it; [`DropReason::BadLength`] for a payload shorter than its fixed part.
    pub fn from_frame(frame: &Frame<'a>) -> Result<SchemaReply<'a>, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::SchemaReply {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        let page = p.get(SCHEMA_REPLY_FIXED..).ok_or(DropReason::BadLength)?;
        let (total, offset) = (le_u32(p, 8), le_u32(p, 12));
        let end = u64::from(offset) + page.len() as u64;
        if total as usize > MAX_SCHEMA_LEN || end > u64::from(total) {
            return Err(DropReason::BadControl);
        }
        Ok(SchemaReply {
            topic_id: h.topic_id,
            fingerprint: h.fingerprint,
            session: h.session,
            nonce: le_u64(p, 0),
            total,
            offset,
            page,
        })
    }
}

impl BatchEncoder<'_> {
    /// Appends a `SchemaRequest` padded with `request.room` zero bytes.
    ///
    /// # Errors
    /// [`EncodeError::Full`] when the datagram has no room left for it;
    /// [`EncodeError::TooLarge`] if it could not fit an empty one.
    pub fn push_schema_request(&mut self, request: &SchemaRequest) -> Result<(), EncodeError> {
        let mut fixed = [0u8; SCHEMA_REQUEST_FIXED];
        fixed[..8].copy_from_slice(&request.nonce.to_le_bytes());
        fixed[8..12].copy_from_slice(&request.offset.to_le_bytes());
        let room = request.room.min(ZEROS.len());
        self.push_raw_parts(
            header(Kind::SchemaRequest, request.topic_id, 0, request.session),
            &fixed,
            &ZEROS[..room],
        )
    }

    /// Appends a `SchemaReply`.
    ///
    /// # Errors
    /// As [`push_schema_request`](Self::push_schema_request).
    pub fn push_schema_reply(&mut self, reply: &SchemaReply<'_>) -> Result<(), EncodeError> {
        let mut fixed = [0u8; SCHEMA_REPLY_FIXED];
        fixed[..8].copy_from_slice(&reply.nonce.to_le_bytes());
        fixed[8..12].copy_from_slice(&reply.total.to_le_bytes());
        fixed[12..].copy_from_slice(&reply.offset.to_le_bytes());
        self.push_raw_parts(
            header(
                Kind::SchemaReply,
                reply.topic_id,
                reply.fingerprint,
                reply.session,
            ),
            &fixed,
            reply.page,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_datagram, DEFAULT_MAX_DATAGRAM};

    fn one(bytes: &[u8]) -> Frame<'_> {
        let mut frames = parse_datagram(bytes, DEFAULT_MAX_DATAGRAM).expect("valid datagram");
        frames.next().expect("one frame")
    }

    #[test]
    fn frames_round_trip_and_malformed_ones_are_refused() {
        let mut buf = [0u8; 512];
        let request = SchemaRequest {
            topic_id: 0x0102,
            session: 0x0304,
            nonce: 0x0506,
            offset: 7,
            room: 100,
        };
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_schema_request(&request).expect("fits");
        let bytes = enc.as_bytes().to_vec();
        assert_eq!(bytes.len(), HEADER_LEN + SCHEMA_REQUEST_FIXED + 100);
        assert_eq!(SchemaRequest::from_frame(&one(&bytes)), Ok(request));
        // A nonce of 0, a reserved word or padding that is not zero.
        for at in [HEADER_LEN, HEADER_LEN + 12, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at..at + 8.min(bytes.len() - at)].fill(0);
            if at != HEADER_LEN {
                bad[at] = 1;
            }
            let got = SchemaRequest::from_frame(&one(&bad));
            assert_eq!(got, Err(DropReason::BadControl), "byte {at}");
        }

        let page = [9u8; 20];
        let reply = SchemaReply {
            topic_id: 0x0102,
            fingerprint: 0x0708,
            session: 0x090a,
            nonce: 0x0506,
            total: 30,
            offset: 10,
            page: &page,
        };
        let mut buf = [0u8; 512];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_schema_reply(&reply).expect("fits");
        let bytes = enc.as_bytes().to_vec();
        assert_eq!(SchemaReply::from_frame(&one(&bytes)), Ok(reply));
        // A page past the total, and a total past the limit.
        for total in [29u32, MAX_SCHEMA_LEN as u32 + 1] {
            let mut bad = bytes.clone();
            bad[HEADER_LEN + 8..HEADER_LEN + 12].copy_from_slice(&total.to_le_bytes());
            let got = SchemaReply::from_frame(&one(&bad));
            assert_eq!(got, Err(DropReason::BadControl), "total {total}");
        }
        // Too short for the fixed part.
        let mut short = [0u8; 512];
        let mut enc = BatchEncoder::new(&mut short);
        enc.push_raw(header(Kind::SchemaReply, 1, 2, 3), &[0; 15])
            .expect("fits");
        let got = SchemaReply::from_frame(&one(enc.as_bytes()));
        assert_eq!(got, Err(DropReason::BadLength));
    }
}
