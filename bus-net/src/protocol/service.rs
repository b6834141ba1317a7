//! The frames of services: `Request` (caller's bridge to server's bridge) and `Reply` (back),
//! one frame per datagram.
//!
//! A service rides on a subscription: the caller's bridge subscribes to the service's name
//! (its topic id) with the request type's fingerprint, by the ordinary handshake, and every
//! `Request` it sends ends with the subscription token that handshake gave it (without a
//! key; with one, the MAC seals the datagram instead). The server's bridge answers only a
//! source in its subscriber table under that session and token, and every `Reply` ends with
//! the same token. Layout (`docs/PROTOCOL.md`, "Services"):
//!
//! | frame   | header: topic id / fingerprint / session | payload |
//! |---------|------------------------------------------|---------|
//! | Request | service id / `Request<Req>`'s / caller's | call id (8), deadline budget in ms (4), bincode of the request |
//! | Reply   | service id / `Reply<Rep>`'s / server's   | call id (8), status (1: 0 ok, else a [`CallStatus`] code), bincode of the reply when ok |
//!
//! The header's sequence number and timestamp are 0.

use serde::Serialize;

use super::decode::{DropReason, Frame};
use super::encode::EncodeError;
use super::header::{Flags, Header, Kind, HEADER_LEN};

/// The fixed part of a `Request` payload: call id (8), deadline budget in ms (4).
pub const REQUEST_FIXED: usize = 12;
/// The fixed part of a `Reply` payload: call id (8), status (1).
pub const REPLY_FIXED: usize = 9;

/// How a remote call ended, as a `Reply` frame's status byte says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallStatus {
    /// `00`: answered; the reply follows.
    Ok,
    /// `01`: the server's local call timed out.
    Timeout,
    /// `02`: the server panicked holding the call.
    ServerPanicked,
    /// `03`: the server dropped the call unanswered.
    Dropped,
    /// `04`: the server's bus stopped.
    Stopped,
    /// `05`: the server's queue (or the bridge's table of calls) is full.
    QueueFull,
    /// `06`: the reply would have exceeded the caller's host's reply byte budget.
    OverBudget,
    /// `07`: the request or the reply does not fit in one datagram.
    TooLarge,
    /// `08`: the service is refused (unknown, or another type; said by the handshake, never
    /// sent in a frame).
    Refused,
    /// A code this version does not know: the call ended with an error.
    Other(u8),
}

impl CallStatus {
    /// The status byte.
    pub const fn code(self) -> u8 {
        match self {
            CallStatus::Ok => 0,
            CallStatus::Timeout => 1,
            CallStatus::ServerPanicked => 2,
            CallStatus::Dropped => 3,
            CallStatus::Stopped => 4,
            CallStatus::QueueFull => 5,
            CallStatus::OverBudget => 6,
            CallStatus::TooLarge => 7,
            CallStatus::Refused => 8,
            CallStatus::Other(code) => code,
        }
    }

    /// The status of byte `code`.
    pub const fn from_code(code: u8) -> CallStatus {
        match code {
            0 => CallStatus::Ok,
            1 => CallStatus::Timeout,
            2 => CallStatus::ServerPanicked,
            3 => CallStatus::Dropped,
            4 => CallStatus::Stopped,
            5 => CallStatus::QueueFull,
            6 => CallStatus::OverBudget,
            7 => CallStatus::TooLarge,
            8 => CallStatus::Refused,
            other => CallStatus::Other(other),
        }
    }
}

/// What a `Request` or `Reply` header carries besides its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallMeta {
    /// The service's topic id (its name's).
    pub topic_id: u64,
    /// `Request<Req>`'s fingerprint in a request, `Reply<Rep>`'s in a reply.
    pub fingerprint: u64,
    /// The sender's session.
    pub session: u64,
}

/// A `Request` frame, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFrame<'a> {
    /// The call's id, unique per caller session.
    pub call: u64,
    /// The time the caller has left, in milliseconds.
    pub budget_ms: u32,
    /// The bincode of the request.
    pub body: &'a [u8],
}

/// A `Reply` frame, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyFrame<'a> {
    /// The call it answers.
    pub call: u64,
    /// How the call ended.
    pub status: CallStatus,
    /// The bincode of the reply (empty unless `status` is `Ok`).
    pub body: &'a [u8],
}

impl<'a> RequestFrame<'a> {
    /// The request in `frame` (of kind `Request`).
    ///
    /// # Errors
    /// [`DropReason::BadLength`] if the payload is shorter than its fixed part.
    pub fn from_frame(frame: &Frame<'a>) -> Result<Self, DropReason> {
        let p = frame.payload;
        let (Some(call), Some(budget), Some(body)) = (
            p.first_chunk::<8>(),
            p.get(8..REQUEST_FIXED).and_then(|b| b.first_chunk::<4>()),
            p.get(REQUEST_FIXED..),
        ) else {
            return Err(DropReason::BadLength);
        };
        Ok(RequestFrame {
            call: u64::from_le_bytes(*call),
            budget_ms: u32::from_le_bytes(*budget),
            body,
        })
    }
}

impl<'a> ReplyFrame<'a> {
    /// The reply in `frame` (of kind `Reply`).
    ///
    /// # Errors
    /// [`DropReason::BadLength`] if the payload is shorter than its fixed part, or an error
    /// status carries a body.
    pub fn from_frame(frame: &Frame<'a>) -> Result<Self, DropReason> {
        let p = frame.payload;
        let (Some(call), Some(&status), Some(body)) =
            (p.first_chunk::<8>(), p.get(8), p.get(REPLY_FIXED..))
        else {
            return Err(DropReason::BadLength);
        };
        let status = CallStatus::from_code(status);
        if status != CallStatus::Ok && !body.is_empty() {
            return Err(DropReason::BadLength);
        }
        Ok(ReplyFrame {
            call: u64::from_le_bytes(*call),
            status,
            body,
        })
    }
}

/// Writes one frame of `kind` into `buf`: the header (flag TOKEN if `token`), `fixed`, then
/// `body` bincode-encoded in place. Returns the frame's length.
fn write_frame<T: Serialize + ?Sized>(
    buf: &mut [u8],
    kind: Kind,
    meta: CallMeta,
    token: bool,
    fixed: &[u8],
    body: Option<&T>,
) -> Result<usize, EncodeError> {
    let topic = meta.topic_id;
    let start = HEADER_LEN + fixed.len();
    let too_large = |size: usize, max: usize| EncodeError::TooLarge { topic, size, max };
    let max = buf.len().min(crate::MAX_DATAGRAM_LIMIT);
    let Some(dst) = buf.get_mut(HEADER_LEN..start) else {
        return Err(too_large(start, max));
    };
    dst.copy_from_slice(fixed);
    let body_len = match body {
        None => 0,
        Some(value) => {
            let dst = buf.get_mut(start..max).unwrap_or_default();
            match bincode::serde::encode_into_slice(value, dst, super::bincode_config()) {
                Ok(n) => n,
                Err(bincode::error::EncodeError::UnexpectedEnd) => {
                    let size = super::encode::payload_size(topic, value)?;
                    return Err(too_large(start + size, max));
                }
                Err(source) => return Err(EncodeError::Serialize { topic, source }),
            }
        }
    };
    let payload_len = fixed.len() + body_len;
    let header = Header {
        kind,
        flags: Flags(if token { Flags::TOKEN } else { 0 }),
        payload_len: u16::try_from(payload_len).map_err(|_| too_large(start + body_len, max))?,
        topic_id: meta.topic_id,
        fingerprint: meta.fingerprint,
        session: meta.session,
        seq: 0,
        timestamp_ns: 0,
    };
    if let Some(head) = buf.first_chunk_mut::<HEADER_LEN>() {
        header.write(head);
    }
    Ok(HEADER_LEN + payload_len)
}

/// Writes a `Request` frame into `buf` (whose length is the room for it: the datagram less
/// its trailer); `token`: the datagram will end with the caller's subscription token.
/// Returns its length.
///
/// # Errors
/// [`EncodeError::TooLarge`] if it does not fit (requests are never fragmented);
/// [`EncodeError::Serialize`] if `body` cannot be encoded.
pub fn encode_request<T: Serialize + ?Sized>(
    buf: &mut [u8],
    meta: CallMeta,
    token: bool,
    call: u64,
    budget_ms: u32,
    body: &T,
) -> Result<usize, EncodeError> {
    let mut fixed = [0u8; REQUEST_FIXED];
    fixed[..8].copy_from_slice(&call.to_le_bytes());
    fixed[8..].copy_from_slice(&budget_ms.to_le_bytes());
    write_frame(buf, Kind::Request, meta, token, &fixed, Some(body))
}

/// Writes a `Reply` frame into `buf`: `Ok(body)` or an error status with no body.
///
/// # Errors
/// As [`encode_request`].
pub fn encode_reply<T: Serialize + ?Sized>(
    buf: &mut [u8],
    meta: CallMeta,
    token: bool,
    call: u64,
    result: Result<&T, CallStatus>,
) -> Result<usize, EncodeError> {
    let mut fixed = [0u8; REPLY_FIXED];
    fixed[..8].copy_from_slice(&call.to_le_bytes());
    let (status, body) = match result {
        Ok(body) => (CallStatus::Ok, Some(body)),
        // An error is never `Ok`: a caller that passes `Err(Ok)` gets `Dropped`.
        Err(CallStatus::Ok) => (CallStatus::Dropped, None),
        Err(status) => (status, None),
    };
    fixed[8] = status.code();
    write_frame(buf, Kind::Reply, meta, token, &fixed, body)
}

/// Rewrites the deadline budget of the `Request` frame at the start of `frame` (a resend says
/// the time the caller has left then).
pub(crate) fn set_budget(frame: &mut [u8], budget_ms: u32) {
    let at = HEADER_LEN + 8;
    if let Some(dst) = frame.get_mut(at..at + 4) {
        dst.copy_from_slice(&budget_ms.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_datagram;

    const META: CallMeta = CallMeta {
        topic_id: 7,
        fingerprint: 9,
        session: 11,
    };

    #[test]
    fn a_request_and_a_reply_round_trip() {
        let mut buf = [0u8; 256];
        let n = encode_request(&mut buf, META, false, 42, 1500, &(1u32, 2u64)).expect("fits");
        let frame = parse_datagram(&buf[..n], 1472)
            .expect("parses")
            .next()
            .expect("a frame");
        assert_eq!(frame.header.kind, Kind::Request);
        let r = RequestFrame::from_frame(&frame).expect("decodes");
        assert_eq!((r.call, r.budget_ms, r.body.len()), (42, 1500, 12));

        let n = encode_reply(&mut buf, META, false, 42, Ok(&7u16)).expect("fits");
        let frame = parse_datagram(&buf[..n], 1472).expect("parses").next();
        let r = ReplyFrame::from_frame(&frame.expect("a frame")).expect("decodes");
        assert_eq!(
            (r.call, r.status, r.body),
            (42, CallStatus::Ok, &[7u8, 0][..])
        );

        let n = encode_reply::<u16>(&mut buf, META, false, 43, Err(CallStatus::QueueFull))
            .expect("fits");
        assert_eq!(n, HEADER_LEN + REPLY_FIXED);
        let frame = parse_datagram(&buf[..n], 1472).expect("parses").next();
        let r = ReplyFrame::from_frame(&frame.expect("a frame")).expect("decodes");
        assert_eq!((r.call, r.status), (43, CallStatus::QueueFull));
    }

    #[test]
    fn a_body_too_large_for_the_room_is_refused_with_its_size() {
        let mut buf = [0u8; 100];
        let err = encode_request(&mut buf, META, false, 1, 1, &vec![0u8; 200]);
        assert!(
            matches!(err, Err(EncodeError::TooLarge { size, max: 100, .. }) if size == HEADER_LEN + REQUEST_FIXED + 208),
            "{err:?}"
        );
    }

    #[test]
    fn short_payloads_and_error_bodies_are_bad_length() {
        let mut buf = [0u8; 256];
        let n = encode_reply(&mut buf, META, false, 1, Ok(&1u8)).expect("fits");
        buf[HEADER_LEN + 8] = CallStatus::Dropped.code(); // an error status with a body
        let frame = parse_datagram(&buf[..n], 1472).expect("parses").next();
        assert_eq!(
            ReplyFrame::from_frame(&frame.expect("a frame")),
            Err(DropReason::BadLength)
        );
        for code in 0..=255u8 {
            assert_eq!(CallStatus::from_code(code).code(), code);
        }
    }
}
