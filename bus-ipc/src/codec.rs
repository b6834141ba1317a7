//! How a message goes into a slot: plain data is copied as it is; anything else is encoded
//! with bincode (the network bridge's codec: bincode 1 format, little-endian, fixed-width
//! integers) behind a length prefix.

use crate::layout::{Kind, SLOT_ALIGN};

/// Why a message could not be put in a slot or taken out of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// The encoded message does not fit the channel's slot: raise `max_message`.
    TooLarge,
    /// The slot's bytes are not a valid message (a faulty or hostile peer).
    Malformed,
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::TooLarge => {
                f.write_str("message does not fit the channel's slot: raise max_message")
            }
            CodecError::Malformed => f.write_str("slot holds a malformed message"),
        }
    }
}

impl std::error::Error for CodecError {}

/// A way of putting values of `T` into fixed-size slots.
pub trait SlotCodec<T>: Send + 'static {
    /// The slot encoding, written in the header and checked by the peer.
    const KIND: Kind;
    /// The slot size for a channel whose encoded messages are at most `max_message` bytes
    /// (ignored by fixed-size encodings): a multiple of 8.
    fn slot_size(max_message: usize) -> usize;
    /// Writes `value` into `slot`.
    ///
    /// # Errors
    /// [`CodecError::TooLarge`] if it does not fit.
    fn encode(value: &T, slot: &mut [u8]) -> Result<(), CodecError>;
    /// Reads a value out of `slot`, which may hold anything.
    ///
    /// # Errors
    /// [`CodecError::Malformed`] if the bytes are not a value.
    fn decode(slot: &[u8]) -> Result<T, CodecError>;
}

fn round_up(n: usize) -> usize {
    n.max(1).div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

/// Plain data (`bytemuck::Pod`: no pointers, no padding, a fixed layout, every bit pattern
/// valid), copied into the slot once and out of it once.
#[derive(Debug)]
pub struct Pod;

impl<T: bytemuck::Pod + Send> SlotCodec<T> for Pod {
    const KIND: Kind = Kind::Pod;

    fn slot_size(_: usize) -> usize {
        round_up(std::mem::size_of::<T>())
    }

    #[inline]
    fn encode(value: &T, slot: &mut [u8]) -> Result<(), CodecError> {
        let bytes = bytemuck::bytes_of(value);
        let dst = slot.get_mut(..bytes.len()).ok_or(CodecError::TooLarge)?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    #[inline]
    fn decode(slot: &[u8]) -> Result<T, CodecError> {
        let src = slot
            .get(..std::mem::size_of::<T>())
            .ok_or(CodecError::Malformed)?;
        // Unaligned read: slots are 8-aligned, `T` may want more. Every bit pattern is a `T`.
        Ok(bytemuck::pod_read_unaligned(src))
    }
}

/// Any serde type, bincode-encoded behind a `u32` length (then 4 bytes of padding) in a slot
/// of `max_message + 8` bytes. Decoding claims at most [`DECODE_LIMIT`] bytes for containers,
/// whatever length prefixes the bytes hold.
#[derive(Debug)]
pub struct Bincode;

/// The most bytes one decode may claim for strings and vectors (a slot's largest size).
pub const DECODE_LIMIT: usize = crate::layout::MAX_SLOT as usize;

fn config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<DECODE_LIMIT>()
}

impl<T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static> SlotCodec<T> for Bincode {
    const KIND: Kind = Kind::Bytes;

    fn slot_size(max_message: usize) -> usize {
        round_up(max_message.saturating_add(8)).max(16)
    }

    fn encode(value: &T, slot: &mut [u8]) -> Result<(), CodecError> {
        let (len, body) = slot.split_at_mut_checked(8).ok_or(CodecError::TooLarge)?;
        let n = bincode::serde::encode_into_slice(value, body, config())
            .map_err(|_| CodecError::TooLarge)?;
        let n = u32::try_from(n).map_err(|_| CodecError::TooLarge)?;
        len[..4].copy_from_slice(&n.to_le_bytes());
        Ok(())
    }

    fn decode(slot: &[u8]) -> Result<T, CodecError> {
        let (len, body) = slot.split_at_checked(8).ok_or(CodecError::Malformed)?;
        let mut n = [0u8; 4];
        n.copy_from_slice(&len[..4]);
        let n = u32::from_le_bytes(n) as usize;
        let body = body.get(..n).ok_or(CodecError::Malformed)?;
        match bincode::serde::decode_from_slice::<T, _>(body, config()) {
            Ok((v, used)) if used == n => Ok(v),
            _ => Err(CodecError::Malformed),
        }
    }
}
