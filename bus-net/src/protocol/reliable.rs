//! The frames of reliable topics: `Nak` and `Unavailable` (`docs/PROTOCOL.md`, "Reliable
//! topics").
//!
//! A subscriber that sees a gap asks for one range of sequence numbers with a `Nak`; several
//! ranges go as several frames in one datagram. The `Nak` carries the subscriber's current
//! cookie, so only a host that sees the publisher's answers to it (its address proven) can ask
//! for retransmissions, and a fresh nonce. The publisher retransmits the data frames it still
//! has in history, byte for byte as first sent, and answers the part of the range that left
//! history with one `Unavailable` that echoes the nonce, so an off-path host can neither
//! trigger retransmissions nor make a subscriber give up on a range.
//!
//! Payload layouts (all little-endian); the header's topic id and fingerprint name the topic,
//! its session is the sender's session id, its sequence number and timestamp are 0:
//!
//! | kind        | payload                                                   |
//! |-------------|-----------------------------------------------------------|
//! | Nak         | cookie (16), nonce `u64`, first `u64`, last `u64` (40)    |
//! | Unavailable | nonce `u64` echoed, first `u64`, last `u64` (24)          |
//!
//! `first <= last`, and `first >= 1` (sequence numbers start at 1); anything else is
//! [`DropReason::BadControl`].

use super::control::control_header as header;
use super::cookie::{Cookie, COOKIE_LEN};
use super::decode::{DropReason, Frame};
use super::encode::{BatchEncoder, EncodeError};
use super::header::Kind;

/// The payload length of a `Nak`: cookie, nonce, first, last.
pub const NAK_PAYLOAD_LEN: usize = COOKIE_LEN + 24;
/// The payload length of an `Unavailable`: nonce, first, last.
pub const UNAVAILABLE_PAYLOAD_LEN: usize = 24;

/// Subscriber to publisher: retransmit `first..=last` of a reliable topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nak {
    /// The topic id.
    pub topic_id: u64,
    /// The subscriber's fingerprint of the topic's type.
    pub fingerprint: u64,
    /// The subscriber's session id (the one it subscribed with).
    pub session: u64,
    /// The latest cookie the publisher gave the subscriber: proves its address.
    pub cookie: Cookie,
    /// A fresh random number, echoed by an `Unavailable`.
    pub nonce: u64,
    /// The first sequence number missing.
    pub first: u64,
    /// The last sequence number missing (`>= first`).
    pub last: u64,
}

/// Publisher to subscriber: `first..=last` (part of what a `Nak` asked for) is no longer in
/// history and will never be retransmitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Unavailable {
    /// The topic id.
    pub topic_id: u64,
    /// The publisher's fingerprint.
    pub fingerprint: u64,
    /// The publisher's session id.
    pub session: u64,
    /// The nonce of the `Nak` answered, echoed.
    pub nonce: u64,
    /// The first sequence number gone.
    pub first: u64,
    /// The last sequence number gone (`>= first`).
    pub last: u64,
}

/// The `u64` at `at` of `p` (0 if out of range, which the fixed lengths rule out).
pub(super) fn le_u64(p: &[u8], at: usize) -> u64 {
    p.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Checks a range's shape.
fn range(first: u64, last: u64) -> Result<(u64, u64), DropReason> {
    if first == 0 || first > last {
        Err(DropReason::BadControl)
    } else {
        Ok((first, last))
    }
}

impl Nak {
    /// The `Nak` of a frame.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind or an empty or reversed range;
    /// [`DropReason::BadLength`] for a payload of the wrong length.
    pub fn from_frame(frame: &Frame<'_>) -> Result<Nak, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::Nak {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        if p.len() != NAK_PAYLOAD_LEN {
            return Err(DropReason::BadLength);
        }
        let mut cookie = [0u8; COOKIE_LEN];
        cookie.copy_from_slice(p.get(..COOKIE_LEN).ok_or(DropReason::BadLength)?);
        let (first, last) = range(le_u64(p, COOKIE_LEN + 8), le_u64(p, COOKIE_LEN + 16))?;
        Ok(Nak {
            topic_id: h.topic_id,
            fingerprint: h.fingerprint,
            session: h.session,
            cookie: Cookie(cookie),
            nonce: le_u64(p, COOKIE_LEN),
            first,
            last,
        })
    }

    /// How many sequence numbers the range holds (saturating).
    pub fn len(&self) -> u64 {
        (self.last - self.first).saturating_add(1)
    }

    /// Never true: a range holds at least one number.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Unavailable {
    /// The `Unavailable` of a frame.
    ///
    /// # Errors
    /// As [`Nak::from_frame`].
    pub fn from_frame(frame: &Frame<'_>) -> Result<Unavailable, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::Unavailable {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        if p.len() != UNAVAILABLE_PAYLOAD_LEN {
            return Err(DropReason::BadLength);
        }
        let (first, last) = range(le_u64(p, 8), le_u64(p, 16))?;
        Ok(Unavailable {
            topic_id: h.topic_id,
            fingerprint: h.fingerprint,
            session: h.session,
            nonce: le_u64(p, 0),
            first,
            last,
        })
    }
}

impl BatchEncoder<'_> {
    /// Appends a `Nak`.
    ///
    /// # Errors
    /// [`EncodeError::Full`] when the datagram has no room left for it.
    pub fn push_nak(&mut self, nak: &Nak) -> Result<(), EncodeError> {
        let mut p = [0u8; NAK_PAYLOAD_LEN];
        p[..COOKIE_LEN].copy_from_slice(&nak.cookie.0);
        p[COOKIE_LEN..COOKIE_LEN + 8].copy_from_slice(&nak.nonce.to_le_bytes());
        p[COOKIE_LEN + 8..COOKIE_LEN + 16].copy_from_slice(&nak.first.to_le_bytes());
        p[COOKIE_LEN + 16..].copy_from_slice(&nak.last.to_le_bytes());
        self.push_raw(
            header(Kind::Nak, nak.topic_id, nak.fingerprint, nak.session),
            &p,
        )
    }

    /// Appends an `Unavailable`.
    ///
    /// # Errors
    /// [`EncodeError::Full`] when the datagram has no room left for it.
    pub fn push_unavailable(&mut self, u: &Unavailable) -> Result<(), EncodeError> {
        let mut p = [0u8; UNAVAILABLE_PAYLOAD_LEN];
        p[..8].copy_from_slice(&u.nonce.to_le_bytes());
        p[8..16].copy_from_slice(&u.first.to_le_bytes());
        p[16..].copy_from_slice(&u.last.to_le_bytes());
        self.push_raw(
            header(Kind::Unavailable, u.topic_id, u.fingerprint, u.session),
            &p,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_datagram, DEFAULT_MAX_DATAGRAM};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    const NAK: Nak = Nak {
        topic_id: 0x0102,
        fingerprint: 0x0304,
        session: 0x0506,
        cookie: Cookie([0xcc; 16]),
        nonce: 0x0708,
        first: 5,
        last: 9,
    };

    /// The vector in `docs/PROTOCOL.md`, "Reliable topics".
    #[test]
    fn nak_vector_and_round_trip() {
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_nak(&NAK).unwrap();
        assert_eq!(
            hex(enc.as_bytes()),
            "4c4c5503140028000201000000000000\
             04030000000000000605000000000000\
             00000000000000000000000000000000\
             cccccccccccccccccccccccccccccccc\
             08070000000000000500000000000000\
             0900000000000000"
        );
        let bytes = enc.as_bytes().to_vec();
        let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
            .unwrap()
            .next()
            .unwrap();
        assert_eq!(Nak::from_frame(&frame), Ok(NAK));
        assert_eq!(NAK.len(), 5);
    }

    #[test]
    fn unavailable_vector_and_round_trip() {
        let u = Unavailable {
            topic_id: 0x0102,
            fingerprint: 0x0304,
            session: 0x0a0b,
            nonce: 0x0708,
            first: 5,
            last: 6,
        };
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_unavailable(&u).unwrap();
        assert_eq!(
            hex(enc.as_bytes()),
            "4c4c5503150018000201000000000000\
             04030000000000000b0a000000000000\
             00000000000000000000000000000000\
             08070000000000000500000000000000\
             0600000000000000"
        );
        let bytes = enc.as_bytes().to_vec();
        let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
            .unwrap()
            .next()
            .unwrap();
        assert_eq!(Unavailable::from_frame(&frame), Ok(u));
        // Never larger than the NAK it answers: no amplification.
        let mut nak_buf = [0u8; 128];
        let mut nak_enc = BatchEncoder::new(&mut nak_buf);
        nak_enc.push_nak(&NAK).unwrap();
        assert!(bytes.len() < nak_enc.len());
    }

    #[test]
    fn bad_ranges_and_kinds_are_refused() {
        for (first, last) in [(0, 3), (4, 3), (0, 0)] {
            let mut buf = [0u8; 128];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_nak(&Nak { first, last, ..NAK }).unwrap();
            let bytes = enc.as_bytes().to_vec();
            let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
                .unwrap()
                .next()
                .unwrap();
            assert_eq!(Nak::from_frame(&frame), Err(DropReason::BadControl));
            assert_eq!(Unavailable::from_frame(&frame), Err(DropReason::BadControl));
            assert_eq!(
                crate::Control::from_frame(&frame),
                Err(DropReason::BadControl)
            );
        }
        // A wrong length is refused by the datagram parser already.
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_nak(&NAK).unwrap();
        let mut bytes = enc.as_bytes().to_vec();
        bytes[6] = 39;
        bytes.pop();
        assert_eq!(
            parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).err(),
            Some(DropReason::BadLength)
        );
    }
}
