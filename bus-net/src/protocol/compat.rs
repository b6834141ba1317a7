//! The ll-udp-pubsub v0.1 format, byte for byte, for exports and imports in compatibility mode.
//!
//! One socket carries one topic and there is no header: a data datagram is the bincode-1
//! encoding of `Packet<T> { data: T, sent_ts: i64 }` (little-endian, fixed-width integers,
//! `u64` length prefixes, `u32` enum variant indices; trailing bytes allowed on decode), and a
//! control datagram, subscriber to publisher, is a `u32` LE: `0` subscribe, `1` unsubscribe.
//! For `T = i64` a data datagram is 16 bytes: `data` then `sent_ts`, each 8 bytes LE.
//!
//! There is no topic id, fingerprint, session or sequence number on this wire, so an import in
//! compatibility mode cannot detect loss or a type mismatch beyond a payload that fails to
//! decode. Unlike ll-udp-pubsub, a malformed control datagram is counted and dropped, never a
//! panic.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::decode::DropReason;
use super::encode::EncodeError;
use super::header::MAX_DATAGRAM_LIMIT;

/// The wire struct of ll-udp-pubsub v0.1, borrowed for encoding (serde encodes `&T` as `T`).
#[derive(Serialize)]
struct PacketRef<'a, T: ?Sized> {
    data: &'a T,
    sent_ts: i64,
}

/// The wire struct of ll-udp-pubsub v0.1, owned for decoding.
#[derive(Deserialize)]
struct Packet<T> {
    data: T,
    sent_ts: i64,
}

/// Encodes one ll-udp-pubsub v0.1 data datagram into `buf` (whose length is the maximum
/// datagram size) and returns its length. `topic` only names the topic in errors.
///
/// # Errors
/// [`EncodeError::TooLarge`] if it does not fit in `buf`; [`EncodeError::Serialize`] if `data`
/// cannot be encoded. `buf` may be partly overwritten on error.
pub fn encode_compat_packet<T: Serialize + ?Sized>(
    buf: &mut [u8],
    topic: u64,
    data: &T,
    sent_ts: i64,
) -> Result<usize, EncodeError> {
    let max = buf.len().min(MAX_DATAGRAM_LIMIT);
    let dst = buf.get_mut(..max).unwrap_or(&mut []);
    let packet = PacketRef { data, sent_ts };
    match bincode::serde::encode_into_slice(&packet, dst, super::bincode_config()) {
        Ok(n) => Ok(n),
        Err(bincode::error::EncodeError::UnexpectedEnd) => {
            let size = super::encode::payload_size(topic, &packet)?;
            Err(EncodeError::TooLarge { topic, size, max })
        }
        Err(source) => Err(EncodeError::Serialize { topic, source }),
    }
}

/// Decodes one ll-udp-pubsub v0.1 data datagram: the value and its `sent_ts`. Trailing bytes
/// are allowed, as bincode 1 allowed them.
///
/// # Errors
/// [`DropReason::TooLarge`] if longer than `max_datagram`; [`DropReason::Truncated`] if it ends
/// early; [`DropReason::PayloadDecode`] if it is not a `Packet<T>`.
pub fn decode_compat_packet<T: DeserializeOwned>(
    datagram: &[u8],
    max_datagram: usize,
) -> Result<(T, i64), DropReason> {
    if datagram.len() > max_datagram {
        return Err(DropReason::TooLarge);
    }
    match super::decode_bounded::<Packet<T>>(datagram) {
        Ok((p, _left)) => Ok((p.data, p.sent_ts)),
        Err(super::PayloadError::Truncated) => Err(DropReason::Truncated),
        Err(_) => Err(DropReason::PayloadDecode),
    }
}

/// The ll-udp-pubsub v0.1 control message, subscriber to publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CompatControl {
    /// Subscribe (or renew): `u32` LE `0`.
    Subscribe = 0,
    /// Unsubscribe: `u32` LE `1`.
    Unsubscribe = 1,
}

impl CompatControl {
    /// The 4 bytes on the wire.
    pub const fn encode(self) -> [u8; 4] {
        (self as u32).to_le_bytes()
    }

    /// Decodes a control datagram. Trailing bytes are allowed, as bincode 1 allowed them.
    ///
    /// # Errors
    /// [`DropReason::Truncated`] if shorter than 4 bytes; [`DropReason::BadControl`] for a
    /// value other than 0 or 1.
    pub fn decode(datagram: &[u8]) -> Result<CompatControl, DropReason> {
        let (word, _) = datagram
            .split_first_chunk::<4>()
            .ok_or(DropReason::Truncated)?;
        match u32::from_le_bytes(*word) {
            0 => Ok(CompatControl::Subscribe),
            1 => Ok(CompatControl::Unsubscribe),
            _ => Err(DropReason::BadControl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_faults() {
        let mut buf = [0u8; 64];
        let n = encode_compat_packet(&mut buf, 1, &(-5i64), 77).unwrap();
        assert_eq!(n, 16);
        assert_eq!(decode_compat_packet::<i64>(&buf[..n], 1472), Ok((-5, 77)));
        assert_eq!(
            decode_compat_packet::<i64>(&buf[..15], 1472),
            Err(DropReason::Truncated)
        );
        assert_eq!(
            decode_compat_packet::<i64>(&[], 1472),
            Err(DropReason::Truncated)
        );
        assert_eq!(
            decode_compat_packet::<i64>(&buf[..n], 15),
            Err(DropReason::TooLarge)
        );
        assert_eq!(
            decode_compat_packet::<bool>(&[9; 9], 1472),
            Err(DropReason::PayloadDecode)
        );
        // Does not fit: refused with the size, never truncated.
        let mut small = [0u8; 10];
        match encode_compat_packet(&mut small, 1, &1i64, 0) {
            Err(EncodeError::TooLarge {
                topic: 1,
                size: 16,
                max: 10,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn control_faults_are_counted_not_panics() {
        assert_eq!(
            CompatControl::decode(&[0, 0, 0]),
            Err(DropReason::Truncated)
        );
        assert_eq!(
            CompatControl::decode(&[2, 0, 0, 0]),
            Err(DropReason::BadControl)
        );
        assert_eq!(
            CompatControl::decode(&[0, 0, 0, 1]),
            Err(DropReason::BadControl)
        );
        assert_eq!(
            CompatControl::decode(&[1, 0, 0, 0, 7]),
            Ok(CompatControl::Unsubscribe)
        );
    }
}
