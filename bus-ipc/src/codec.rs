//! How a message goes into a slot: plain data is copied as it is; anything else is encoded
//! with bincode (the network bridge's codec: bincode 1 format, little-endian, fixed-width
//! integers) behind a length prefix, and decoded with the bounded decoder the network bridge uses
//! too (`llbus::decode_bounded`: no length or element count claims more than the slot holds).
//!
//! A codec never sees shared bytes directly: it copies them between the slot ([`Slots`]) and
//! private memory (the value itself, or a scratch buffer of one slot that the channel end
//! allocates once), and interprets only the private copy.

use crate::layout::{Kind, SLOT_ALIGN};
use crate::region::Slots;

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
    /// Writes `value` into `slot`, building its bytes in `scratch` (private, at least a slot
    /// long) if it needs to.
    ///
    /// # Errors
    /// [`CodecError::TooLarge`] if it does not fit.
    fn encode(value: &T, slot: &mut Slots<'_>, scratch: &mut [u8]) -> Result<(), CodecError>;
    /// Reads a value out of `slot`, which may hold anything, copying what it needs into
    /// `scratch` (private, at least a slot long) before it looks at it.
    ///
    /// # Errors
    /// [`CodecError::Malformed`] if the bytes are not a value.
    fn decode(slot: &Slots<'_>, scratch: &mut [u8]) -> Result<T, CodecError>;
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
    fn encode(value: &T, slot: &mut Slots<'_>, _: &mut [u8]) -> Result<(), CodecError> {
        if slot.write(0, bytemuck::bytes_of(value)) {
            Ok(())
        } else {
            Err(CodecError::TooLarge)
        }
    }

    #[inline]
    fn decode(slot: &Slots<'_>, _: &mut [u8]) -> Result<T, CodecError> {
        // Every bit pattern is a `T`: whatever was copied is a value.
        slot.read_pod(0).ok_or(CodecError::Malformed)
    }
}

/// Any serde type, bincode-encoded behind a `u32` length (then 4 bytes of padding) in a slot
/// of `max_message + 8` bytes. Decoding is bounded by the slot: no length prefix may claim more
/// than the bytes the slot holds, nor an element count more than those bytes plus a fixed spare
/// of 4096 (room for genuine zero-size elements), so a decode costs at most a step per byte plus
/// 4096 whatever the bytes say.
#[derive(Debug)]
pub struct Bincode;

/// The most bytes one decode may claim for strings and vectors: the largest slot. (Each
/// decode is bounded by its own slot, which is at most this.)
pub const DECODE_LIMIT: usize = crate::layout::MAX_SLOT as usize;

fn config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<DECODE_LIMIT>()
}

impl<T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static> SlotCodec<T> for Bincode {
    const KIND: Kind = Kind::Bytes;

    fn slot_size(max_message: usize) -> usize {
        round_up(max_message.saturating_add(8)).max(16)
    }

    fn encode(value: &T, slot: &mut Slots<'_>, scratch: &mut [u8]) -> Result<(), CodecError> {
        let room = slot.len().min(scratch.len());
        let buf = scratch.get_mut(..room).ok_or(CodecError::TooLarge)?;
        let (len, body) = buf.split_at_mut_checked(8).ok_or(CodecError::TooLarge)?;
        let n = bincode::serde::encode_into_slice(value, body, config())
            .map_err(|_| CodecError::TooLarge)?;
        let n32 = u32::try_from(n).map_err(|_| CodecError::TooLarge)?;
        len.fill(0);
        len[..4].copy_from_slice(&n32.to_le_bytes());
        let whole = buf.get(..8 + n).ok_or(CodecError::TooLarge)?;
        if slot.write(0, whole) {
            Ok(())
        } else {
            Err(CodecError::TooLarge)
        }
    }

    fn decode(slot: &Slots<'_>, scratch: &mut [u8]) -> Result<T, CodecError> {
        let mut head = [0u8; 8];
        if !slot.read(0, &mut head) {
            return Err(CodecError::Malformed);
        }
        let mut n = [0u8; 4];
        n.copy_from_slice(&head[..4]);
        // Checked against the slot and the scratch buffer before anything is copied: the
        // prefix is the peer's word.
        let n = u32::from_le_bytes(n) as usize;
        if n > slot.len().saturating_sub(8) {
            return Err(CodecError::Malformed);
        }
        let body = scratch.get_mut(..n).ok_or(CodecError::Malformed)?;
        if !slot.read(8, body) {
            return Err(CodecError::Malformed);
        }
        decode_bounded(body)
    }
}

/// Decodes a whole bincode payload with the bounded decoder: every byte must be used.
pub(crate) fn decode_bounded<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    match llbus::decode_bounded(body) {
        Ok((v, 0)) => Ok(v),
        _ => Err(CodecError::Malformed),
    }
}
