//! Decoding a received native datagram: one validation pass over the frame headers, then a
//! zero-copy iterator of (header, payload slice), then bincode decoding of a payload on demand.
//!
//! A datagram is accepted or dropped whole for structural faults (truncation, bad magic or
//! version, unknown kind, bad lengths, too large): [`parse_datagram`] checks every frame header
//! before the first frame is handed out, so a bridge never delivers half of a corrupt batch. A
//! payload that fails to decode drops only its own message ([`decode_payload`]). Nothing here
//! panics or allocates, whatever the bytes.

use serde::de::DeserializeOwned;

use super::header::{Flags, Header, Kind, HEADER_LEN, TOKEN_LEN};

/// Why a received datagram (or one message of it) was dropped. Each has a counter in
/// [`DropCounts`]; the bridge and the io layer count, they never fail on these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Shorter than one frame header (an empty datagram included), or a compat datagram shorter
    /// than its message.
    Truncated,
    /// The first three bytes of a frame are not `b"LLU"`.
    BadMagic,
    /// A frame of a protocol version this crate does not speak.
    BadVersion,
    /// A frame kind that no version defines.
    UnknownKind,
    /// A frame kind reserved for authentication extensions (`0x21..=0x3f`).
    ReservedKind,
    /// A frame with a flag this version does not understand, or the cookie flag on a kind that
    /// carries no cookie.
    UnsupportedFlags,
    /// A payload length that runs past the end of the datagram, or is wrong for the kind.
    BadLength,
    /// A datagram longer than the configured maximum (or than the receive buffer), or a
    /// fragment of a message longer than the maximum message size.
    TooLarge,
    /// A payload that bincode could not decode into the topic's type, that left bytes over, or
    /// or whose length prefixes claimed more than the bytes left in it.
    PayloadDecode,
    /// A control value that no version defines (a refuse reason, a compat control message).
    BadControl,
    /// A frame for a topic this side neither exports nor imports.
    UnknownTopic,
    /// A frame whose schema fingerprint differs from the local type's.
    FingerprintMismatch,
    /// A frame from an address this side has no business with (data from a host it did not
    /// subscribe to, an acknowledgement it did not ask for), or on a group's socket a frame
    /// that is not sent to that group.
    UnknownSender,
    /// A subscribe that would exceed the subscriber table's capacity.
    TableFull,
    /// With a pre-shared key: a datagram whose tag is missing or wrong, or a control frame in
    /// a datagram without a tag. Without one: a datagram that carries a tag (the MAC flag).
    BadMac,
    /// A `Subscribe` or `Unsubscribe` whose cookie does not prove the sender's address (forged,
    /// for another address, or older than two cookie windows), or an `Unsubscribe` without one.
    BadCookie,
    /// A control message over its source address's rate limit.
    RateLimited,
    /// A control message from an address outside the export's allowlist.
    NotAllowed,
    /// A subscribe that would exceed the per-topic subscriber cap.
    TopicFull,
    /// A datagram from a source no host can receive at (port 0, an unspecified, multicast or
    /// broadcast address): forged, since an answer could not be delivered.
    BadSource,
    /// A `CookieChallenge`, `SubscribeAck` or `Refuse` whose nonce answers no `Subscribe` this
    /// side sent: forged by someone who did not see the request.
    BadNonce,
    /// With a pre-shared key: a sealed datagram whose packet number was seen before or is
    /// older than the replay window, or that claims the receiver's own session (reflected);
    /// with or without a key, a `Subscribe` carrying the receiver's own session.
    Replayed,
    /// A fragment whose fields disagree (index out of range, count or piece length
    /// inconsistent with the total and chunk, or with the other fragments of its message).
    BadFragment,
    /// A fragmented message given up before all its fragments arrived (the reassemblies in
    /// flight were full, or it timed out): the message is dropped, never delivered in part.
    Incomplete,
    /// Without a pre-shared key: a data frame, heartbeat or `Unavailable` whose datagram does
    /// not end with the subscription token this import was given (forged by a host that does
    /// not hold it), or a datagram whose frames disagree about carrying one.
    BadToken,
}

impl DropReason {
    /// How many reasons there are: the length of [`DropCounts`]'s array.
    pub const COUNT: usize = 25;
    /// Every reason, in counter order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Truncated,
        DropReason::BadMagic,
        DropReason::BadVersion,
        DropReason::UnknownKind,
        DropReason::ReservedKind,
        DropReason::UnsupportedFlags,
        DropReason::BadLength,
        DropReason::TooLarge,
        DropReason::PayloadDecode,
        DropReason::BadControl,
        DropReason::UnknownTopic,
        DropReason::FingerprintMismatch,
        DropReason::UnknownSender,
        DropReason::TableFull,
        DropReason::BadMac,
        DropReason::BadCookie,
        DropReason::RateLimited,
        DropReason::NotAllowed,
        DropReason::TopicFull,
        DropReason::BadSource,
        DropReason::BadNonce,
        DropReason::Replayed,
        DropReason::BadFragment,
        DropReason::Incomplete,
        DropReason::BadToken,
    ];

    /// This reason's index in [`DropReason::ALL`] and in a [`DropCounts`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A short snake-case name, for metrics.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::BadMagic => "bad_magic",
            DropReason::BadVersion => "bad_version",
            DropReason::UnknownKind => "unknown_kind",
            DropReason::ReservedKind => "reserved_kind",
            DropReason::UnsupportedFlags => "unsupported_flags",
            DropReason::BadLength => "bad_length",
            DropReason::TooLarge => "too_large",
            DropReason::PayloadDecode => "payload_decode",
            DropReason::BadControl => "bad_control",
            DropReason::UnknownTopic => "unknown_topic",
            DropReason::FingerprintMismatch => "fingerprint_mismatch",
            DropReason::UnknownSender => "unknown_sender",
            DropReason::TableFull => "table_full",
            DropReason::BadMac => "bad_mac",
            DropReason::BadCookie => "bad_cookie",
            DropReason::RateLimited => "rate_limited",
            DropReason::NotAllowed => "not_allowed",
            DropReason::TopicFull => "topic_full",
            DropReason::BadSource => "bad_source",
            DropReason::BadNonce => "bad_nonce",
            DropReason::Replayed => "replayed",
            DropReason::BadFragment => "bad_fragment",
            DropReason::Incomplete => "incomplete",
            DropReason::BadToken => "bad_token",
        }
    }
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DropReason::Truncated => "datagram truncated: shorter than its headers say",
            DropReason::BadMagic => "bad magic: not a native frame",
            DropReason::BadVersion => {
                "unsupported native protocol version (this side speaks version 3)"
            }
            DropReason::UnknownKind => "unknown frame kind",
            DropReason::ReservedKind => "frame kind reserved for authentication extensions",
            DropReason::UnsupportedFlags => "frame flags not supported by this version",
            DropReason::BadLength => {
                "payload length runs past the datagram or is wrong for its kind"
            }
            DropReason::TooLarge => "datagram larger than the configured maximum",
            DropReason::PayloadDecode => "payload does not decode as the topic's type",
            DropReason::BadControl => "unknown control value",
            DropReason::UnknownTopic => "topic neither exported nor imported here",
            DropReason::FingerprintMismatch => "schema fingerprint differs from the local type's",
            DropReason::UnknownSender => "frame from an unexpected address",
            DropReason::TableFull => "subscriber table full",
            DropReason::BadMac => "message authentication tag missing, wrong or unexpected",
            DropReason::BadCookie => "address-proving cookie missing, forged or expired",
            DropReason::RateLimited => "control message over its source's rate limit",
            DropReason::NotAllowed => "source address outside the allowlist",
            DropReason::TopicFull => "per-topic subscriber cap reached",
            DropReason::BadSource => {
                "source address that cannot be answered (port 0, unspecified, multicast, broadcast)"
            }
            DropReason::BadNonce => "handshake answer whose nonce matches no request sent",
            DropReason::Replayed => "sealed datagram replayed (packet number seen or too old)",
            DropReason::BadFragment => "fragment inconsistent with its message",
            DropReason::Incomplete => "fragmented message given up before all fragments arrived",
            DropReason::BadToken => {
                "data or heartbeat without this subscription's token (forged, or a datagram \
                 whose frames disagree about carrying one)"
            }
        })
    }
}

impl std::error::Error for DropReason {}

/// One counter per [`DropReason`]. Owned and written by one thread; copy it to publish a
/// snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    counts: [u64; DropReason::COUNT],
}

impl DropCounts {
    /// All zero.
    pub const fn new() -> Self {
        DropCounts {
            counts: [0; DropReason::COUNT],
        }
    }

    /// Counts one drop for `reason`.
    #[inline]
    pub fn record(&mut self, reason: DropReason) {
        if let Some(c) = self.counts.get_mut(reason.index()) {
            *c = c.saturating_add(1);
        }
    }

    /// The count for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts.get(reason.index()).copied().unwrap_or(0)
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Each reason with its count, in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(move |&r| (r, self.get(r)))
    }
}

/// One frame of a received datagram: its header and its payload, borrowed from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The frame's header.
    pub header: Header,
    /// The frame's payload bytes (`header.payload_len` of them).
    pub payload: &'a [u8],
}

/// The frames of a validated datagram, in order. Made by [`parse_datagram`]; never allocates.
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
    remaining: usize,
    token: Option<u64>,
}

impl<'a> Frames<'a> {
    /// How many frames are left.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// The subscription token after the last frame, if the frames are marked
    /// [`Flags::TOKEN`](super::header::Flags::TOKEN) (every frame is, or none).
    pub fn token(&self) -> Option<u64> {
        self.token
    }
}

/// Splits one frame off the front of `bytes`, checking its header and lengths.
fn split_frame(bytes: &[u8]) -> Result<(Frame<'_>, &[u8]), DropReason> {
    let (head, rest) = bytes
        .split_first_chunk::<HEADER_LEN>()
        .ok_or(DropReason::Truncated)?;
    let header = Header::read(head)?;
    let len = usize::from(header.payload_len);
    if let Some(fixed) = header.kind.fixed_payload_len() {
        if len != fixed {
            return Err(DropReason::BadLength);
        }
    }
    if len > rest.len() {
        return Err(DropReason::BadLength);
    }
    let (payload, rest) = rest.split_at(len);
    Ok((Frame { header, payload }, rest))
}

/// What a datagram's frames must say about the MAC, checked while validating them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Auth {
    /// No pre-shared key here, or none expected: no frame may carry `Flags::MAC`.
    Plain,
    /// The tag was verified and stripped: every frame must carry `Flags::MAC`.
    Sealed,
    /// A key is configured but this datagram has no tag (data MAC off): only data frames,
    /// none carrying `Flags::MAC`.
    PlainDataOnly,
}

impl Auth {
    /// Whether `header` is acceptable under this rule.
    #[inline]
    fn admits(self, header: &Header) -> bool {
        match self {
            Auth::Plain => !header.flags.mac(),
            Auth::Sealed => header.flags.mac(),
            Auth::PlainDataOnly => !header.flags.mac() && header.kind.is_data(),
        }
    }
}

/// Validates a received native datagram and returns its frames.
///
/// Every frame header is checked before this returns, so iterating the result cannot fail: a
/// datagram is dropped whole or delivered whole (payload decoding aside). `max_datagram` is the
/// configured maximum datagram size. This is the receive path without a pre-shared key; with
/// one, use [`FrameMac::open`](super::mac::FrameMac::open) instead.
///
/// # Errors
/// The [`DropReason`] of the first fault: [`DropReason::TooLarge`] if `datagram` is longer than
/// `max_datagram`; [`DropReason::Truncated`] if it is empty or ends inside a frame header; the
/// header's own faults ([`Header::read`]); [`DropReason::BadLength`] for a payload length that
/// runs past the end or is wrong for its kind; [`DropReason::BadMac`] for a frame that says the
/// datagram carries a MAC tag (a peer configured with a pre-shared key this side lacks);
/// [`DropReason::BadToken`] for a datagram whose frames disagree about ending with a
/// subscription token (it is read from the last [`TOKEN_LEN`] bytes when the first frame is
/// marked [`Flags::TOKEN`](super::header::Flags::TOKEN), and every frame must be).
pub fn parse_datagram(datagram: &[u8], max_datagram: usize) -> Result<Frames<'_>, DropReason> {
    parse_with(datagram, max_datagram, Auth::Plain)
}

/// [`parse_datagram`] with a MAC rule for the frames.
pub(crate) fn parse_with(
    datagram: &[u8],
    max_datagram: usize,
    auth: Auth,
) -> Result<Frames<'_>, DropReason> {
    if datagram.len() > max_datagram {
        return Err(DropReason::TooLarge);
    }
    if datagram.is_empty() {
        return Err(DropReason::Truncated);
    }
    let (frames, token) = split_token(datagram, auth)?;
    let mut rest = frames;
    let mut count = 0usize;
    while !rest.is_empty() {
        let (frame, next) = split_frame(rest)?;
        if !auth.admits(&frame.header) {
            return Err(DropReason::BadMac);
        }
        if frame.header.flags.token() != token.is_some() {
            return Err(DropReason::BadToken);
        }
        rest = next;
        count += 1;
    }
    Ok(Frames {
        rest: frames,
        remaining: count,
        token,
    })
}

/// The frames of `datagram` and the subscription token after them, if its first frame says
/// there is one (only in a datagram without a MAC: a sealed one never carries a token).
fn split_token(datagram: &[u8], auth: Auth) -> Result<(&[u8], Option<u64>), DropReason> {
    // Only a first frame that may carry the flag says so: on another kind the flag is the
    // frame's fault (`UnsupportedFlags`, from the header check), not a trailer to strip.
    let marked = datagram.get(5).is_some_and(|f| f & Flags::TOKEN != 0)
        && datagram
            .get(4)
            .is_some_and(|&k| Kind::from_u8(k).is_ok_and(Kind::carries_token));
    if !marked || auth != Auth::Plain {
        return Ok((datagram, None));
    }
    match datagram
        .len()
        .checked_sub(TOKEN_LEN)
        .map(|at| datagram.split_at(at))
    {
        Some((frames, token)) if frames.len() >= HEADER_LEN => {
            let token: [u8; TOKEN_LEN] = token.try_into().map_err(|_| DropReason::Truncated)?;
            Ok((frames, Some(u64::from_le_bytes(token))))
        }
        _ => Err(DropReason::Truncated),
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Frame<'a>;

    #[inline]
    fn next(&mut self) -> Option<Frame<'a>> {
        if self.remaining == 0 {
            return None;
        }
        // Validated by `parse_datagram`; should a frame fail anyway, end the iteration.
        match split_frame(self.rest) {
            Ok((frame, rest)) => {
                self.rest = rest;
                self.remaining -= 1;
                Some(frame)
            }
            Err(_) => {
                debug_assert!(false, "frame failed after validation");
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Frames<'_> {}

/// Decodes a data frame's payload as `T`, in the bincode 1.x layout, with the bounded decoder:
/// the decode limit is the payload's length, so no length prefix can claim more than the bytes
/// that carry it. The whole payload must be consumed.
///
/// Allocates only what `T` itself owns, as it is decoded (a `String` field allocates its
/// bytes; a struct of numbers allocates nothing; a `Vec` grows with its elements, never
/// pre-allocated from its length prefix).
///
/// # Errors
/// [`DropReason::PayloadDecode`] if the bytes are not a `T`, claim too much, or leave bytes over.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, DropReason> {
    match super::decode_bounded::<T>(payload) {
        Ok((value, 0)) => Ok(value),
        _ => Err(DropReason::PayloadDecode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::control::Control;
    use crate::protocol::encode::{BatchEncoder, DataMeta};
    use crate::protocol::header::DEFAULT_MAX_DATAGRAM;

    /// Two data frames (payloads `u32` 1 and `String` "ab") and a subscribe.
    fn sample() -> Vec<u8> {
        let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        let meta = DataMeta {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            seq: 1,
            timestamp_ns: 4,
        };
        enc.push_data(meta, &1u32).unwrap();
        enc.push_data(DataMeta { seq: 2, ..meta }, "ab").unwrap();
        enc.push_control(&Control::Subscribe {
            topic_id: 1,
            fingerprint: 2,
            session: 9,
            nonce: 0x6e6f6e6365,
            cookie: None,
        })
        .unwrap();
        enc.as_bytes().to_vec()
    }

    fn reason(bytes: &[u8]) -> DropReason {
        parse_datagram(bytes, DEFAULT_MAX_DATAGRAM).unwrap_err()
    }

    #[test]
    fn sample_parses() {
        let bytes = sample();
        let frames: Vec<_> = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
            .unwrap()
            .collect();
        assert_eq!(frames.len(), 3);
        assert_eq!(decode_payload::<u32>(frames[0].payload), Ok(1));
        assert_eq!(decode_payload::<String>(frames[1].payload), Ok("ab".into()));
    }

    #[test]
    fn every_structural_fault_has_its_reason() {
        let good = sample();
        assert_eq!(reason(&[]), DropReason::Truncated);
        assert_eq!(reason(&good[..47]), DropReason::Truncated);
        // Cut inside the second frame's header, and inside its payload.
        assert_eq!(reason(&good[..52 + 20]), DropReason::Truncated);
        assert_eq!(reason(&good[..52 + 48 + 3]), DropReason::BadLength);

        let with = |at: usize, value: u8| {
            let mut b = good.clone();
            b[at] = value;
            reason(&b)
        };
        assert_eq!(with(0, b'X'), DropReason::BadMagic);
        assert_eq!(with(3, 1), DropReason::BadVersion);
        assert_eq!(with(3, 2), DropReason::BadVersion);
        assert_eq!(with(3, 4), DropReason::BadVersion);
        assert_eq!(with(4, 0), DropReason::UnknownKind);
        assert_eq!(with(4, 0x7f), DropReason::UnknownKind);
        assert_eq!(with(4, 0x21), DropReason::ReservedKind);
        assert_eq!(with(4, 0x30), DropReason::ReservedKind);
        // The cookie flag on a data frame; the MAC flag without a key.
        assert_eq!(with(5, 0x01), DropReason::UnsupportedFlags);
        assert_eq!(with(5, 0x02), DropReason::BadMac);
        assert_eq!(with(5, 0x80), DropReason::UnsupportedFlags);
        // The token flag on a kind a publisher never sends down a subscription.
        assert_eq!(with(52 + 58 + 5, 0x04), DropReason::UnsupportedFlags);
        // Payload length past the end.
        assert_eq!(with(7, 0xff), DropReason::BadLength);
        // A subscribe (third frame, at 52 + 58) with a payload length other than 24.
        assert_eq!(with(52 + 58 + 6, 1), DropReason::BadLength);
        // A fault in the last frame drops the whole datagram: nothing half delivered.
        assert_eq!(with(52 + 58, b'X'), DropReason::BadMagic);
        // Trailing garbage after the last frame.
        let mut b = good.clone();
        b.push(0);
        assert_eq!(reason(&b), DropReason::Truncated);
        // Larger than the configured maximum.
        assert_eq!(
            parse_datagram(&good, good.len() - 1).unwrap_err(),
            DropReason::TooLarge
        );
    }

    #[test]
    fn payload_faults() {
        assert_eq!(
            decode_payload::<u32>(&[1, 0, 0]),
            Err(DropReason::PayloadDecode)
        );
        assert_eq!(
            decode_payload::<u32>(&[1, 0, 0, 0, 9]),
            Err(DropReason::PayloadDecode)
        );
        // A string claiming 2^62 bytes: refused by the limit, nothing allocated.
        let mut huge = (1u64 << 62).to_le_bytes().to_vec();
        huge.extend_from_slice(b"abc");
        assert_eq!(
            decode_payload::<String>(&huge),
            Err(DropReason::PayloadDecode)
        );
        assert_eq!(
            decode_payload::<Vec<u64>>(&huge),
            Err(DropReason::PayloadDecode)
        );
        // Invalid UTF-8, an invalid bool.
        assert_eq!(
            decode_payload::<String>(&[2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe]),
            Err(DropReason::PayloadDecode)
        );
        assert_eq!(decode_payload::<bool>(&[2]), Err(DropReason::PayloadDecode));
    }

    #[test]
    fn counts_by_reason() {
        let mut c = DropCounts::new();
        c.record(DropReason::BadMagic);
        c.record(DropReason::BadMagic);
        c.record(DropReason::TableFull);
        assert_eq!(c.get(DropReason::BadMagic), 2);
        assert_eq!(c.total(), 3);
        assert_eq!(c.iter().filter(|&(_, n)| n > 0).count(), 2);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(!r.to_string().is_empty());
            assert!(!r.name().is_empty());
        }
    }

    #[test]
    fn a_token_follows_the_frames_of_a_marked_datagram() {
        let mut buf = [0u8; 256];
        let meta = DataMeta {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            seq: 1,
            timestamp_ns: 4,
        };
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        enc.push_data(meta, &1u32).unwrap();
        enc.push_data(DataMeta { seq: 2, ..meta }, &2u32).unwrap();
        let mut bytes = enc.as_bytes().to_vec();
        assert!(bytes[5] & Flags::TOKEN != 0);
        bytes.extend(0x1234_5678_u64.to_le_bytes());
        let frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
        assert_eq!(frames.token(), Some(0x1234_5678));
        assert_eq!(frames.count(), 2);
        // Without its token the last frame is cut short; a frame that disagrees is refused.
        assert_eq!(reason(&bytes[..bytes.len() - 8]), DropReason::Truncated);
        let mut mixed = bytes.clone();
        mixed[52 + 5] = 0;
        assert_eq!(reason(&mixed), DropReason::BadToken);
        // An unmarked datagram has no token.
        let plain = sample();
        assert_eq!(
            parse_datagram(&plain, DEFAULT_MAX_DATAGRAM)
                .unwrap()
                .token(),
            None
        );
    }
}
