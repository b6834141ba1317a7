//! The layout of a channel's mapping: a versioned header of fixed offsets, then the slots.
//!
//! ```text
//! offset    0  line 0  magic u64 | version u32 | kind u32 | slot_size u32 | capacity u32 |
//!                      fingerprint u64 | topic_id u64            (written once by the creator)
//! offset  128  line 1  writer_pid u32 | writer_closed u32 | writer_stamp u64 | generation u64
//! offset  256  line 2  reader_pid u32 | reader_closed u32 | reader_stamp u64
//! offset  384  line 3  tail u64       (written only by the writer: slots published)
//! offset  512  line 4  head u64       (written only by the reader: slots freed)
//! offset  640  line 5  reader_sleeps u32 (futex word: the reader sleeps on `tail`)
//! offset  768  line 6  writer_sleeps u32 (futex word: the writer sleeps on `head`)
//! offset 1024          slot 0, slot 1, ... slot capacity-1, each `slot_size` bytes
//! ```
//!
//! Every field is little-endian (the host's: both sides are on one host) and accessed through
//! an atomic, so a header is valid for every bit pattern: what a peer writes there can be wrong
//! but never undefined behaviour to read. The creator writes line 0 and then `magic` last, with
//! `Release`; an attacher reads `magic` with `Acquire` and copies line 0 into a private
//! [`Geometry`] once, after checking it ([`Geometry::check`]). Afterwards only `head`, `tail`
//! and the liveness fields are read from the mapping, and each read is validated before use.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// "llbusIPC" as a little-endian u64: the first eight bytes of every channel file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"llbusIPC");
/// The layout version; bumped on any change to this module's offsets or meanings.
pub const VERSION: u32 = 1;
/// Bytes before slot 0.
pub const HEADER_LEN: usize = 1024;
/// The largest slot count a channel may have (2^24): bounds the mapping a peer can ask for.
pub const MAX_CAPACITY: u64 = 1 << 24;
/// The largest slot a channel may have (1 MiB).
pub const MAX_SLOT: u64 = 1 << 20;
/// The largest mapping a channel may have (1 GiB).
pub const MAX_LEN: u64 = 1 << 30;
/// Slots are multiples of this, so that every slot is 8-byte aligned.
pub const SLOT_ALIGN: usize = 8;

/// How a channel's slots are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// A plain-data value (`bytemuck::Pod`) copied into the slot as it is.
    Pod = 1,
    /// A `u32` length, 4 bytes of padding, then that many bytes of bincode.
    Bytes = 2,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        match v {
            1 => Some(Kind::Pod),
            2 => Some(Kind::Bytes),
            _ => None,
        }
    }
}

/// One 128-byte line of the header (two 64-byte lines: x86-64's spatial prefetcher pulls pairs).
#[repr(C, align(128))]
#[derive(Debug)]
pub(crate) struct Line<T>(pub(crate) T);

/// Line 0: what the creator writes once.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Fixed {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) kind: AtomicU32,
    pub(crate) slot_size: AtomicU32,
    pub(crate) capacity: AtomicU32,
    pub(crate) fingerprint: AtomicU64,
    pub(crate) topic_id: AtomicU64,
}

/// Lines 1 and 2: one side's liveness.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Side {
    /// The process id of the side's owner; 0 when nobody holds the side.
    pub(crate) pid: AtomicU32,
    /// Set when the side's owner left gracefully.
    pub(crate) closed: AtomicU32,
    /// `CLOCK_MONOTONIC` nanoseconds of the owner's last sign of life.
    pub(crate) stamp: AtomicU64,
    /// Bumped each time a new owner takes the side.
    pub(crate) generation: AtomicU64,
}

/// The header at offset 0 of every mapping.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) fixed: Line<Fixed>,
    pub(crate) writer: Line<Side>,
    pub(crate) reader: Line<Side>,
    pub(crate) tail: Line<AtomicU64>,
    pub(crate) head: Line<AtomicU64>,
    pub(crate) reader_sleeps: Line<AtomicU32>,
    pub(crate) writer_sleeps: Line<AtomicU32>,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_LEN);
const _: () = assert!(std::mem::align_of::<Header>() == 128);
const _: () = assert!(std::mem::offset_of!(Header, tail) == 384);
const _: () = assert!(std::mem::offset_of!(Header, writer_sleeps) == 768);

/// A channel's shape, copied out of line 0 once and checked; never re-read from the mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// How slots are encoded.
    pub kind: Kind,
    /// Bytes per slot, a multiple of 8.
    pub slot_size: usize,
    /// Slots, a power of two.
    pub capacity: usize,
    /// The schema fingerprint of the topic's type.
    pub fingerprint: u64,
    /// The topic id of the topic.
    pub topic_id: u64,
}

/// Why a mapping's header was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// The creator has not finished writing the header (or the file is not a channel).
    NotReady,
    /// The header is of another layout version.
    Version(u32),
    /// The header holds a value out of range: the file is corrupt or from a hostile peer.
    Corrupt(&'static str),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::NotReady => f.write_str("channel header not initialised yet"),
            LayoutError::Version(v) => write!(
                f,
                "channel layout version {v}, this build speaks {VERSION}: upgrade both sides"
            ),
            LayoutError::Corrupt(what) => write!(f, "channel header is corrupt: {what}"),
        }
    }
}

impl std::error::Error for LayoutError {}

impl Geometry {
    /// The mapping length this geometry needs.
    pub fn mapping_len(&self) -> usize {
        HEADER_LEN + self.slot_size * self.capacity
    }

    /// Checks a geometry's numbers (from a peer or a user) and returns the mapping length.
    ///
    /// # Errors
    /// [`LayoutError::Corrupt`] naming the value out of range.
    pub fn validate(&self) -> Result<usize, LayoutError> {
        let cap = self.capacity as u64;
        let slot = self.slot_size as u64;
        if cap == 0 || !cap.is_power_of_two() || cap > MAX_CAPACITY {
            return Err(LayoutError::Corrupt("capacity"));
        }
        if slot == 0 || slot > MAX_SLOT || slot % SLOT_ALIGN as u64 != 0 {
            return Err(LayoutError::Corrupt("slot size"));
        }
        if self.kind == Kind::Bytes && slot < 16 {
            return Err(LayoutError::Corrupt("slot size"));
        }
        let len = cap
            .checked_mul(slot)
            .and_then(|b| b.checked_add(HEADER_LEN as u64))
            .filter(|&l| l <= MAX_LEN)
            .ok_or(LayoutError::Corrupt("mapping length"))?;
        usize::try_from(len).map_err(|_| LayoutError::Corrupt("mapping length"))
    }

    /// Reads line 0 of `header` and checks it against a mapping of `len` bytes.
    ///
    /// # Errors
    /// [`LayoutError`] when the header is not ready, of another version, or out of range.
    pub(crate) fn read(header: &Header, len: usize) -> Result<Geometry, LayoutError> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        let f = &header.fixed.0;
        if f.magic.load(Acquire) != MAGIC {
            return Err(LayoutError::NotReady);
        }
        let version = f.version.load(Relaxed);
        if version != VERSION {
            return Err(LayoutError::Version(version));
        }
        let kind = Kind::from_u32(f.kind.load(Relaxed)).ok_or(LayoutError::Corrupt("kind"))?;
        let g = Geometry {
            kind,
            slot_size: f.slot_size.load(Relaxed) as usize,
            capacity: f.capacity.load(Relaxed) as usize,
            fingerprint: f.fingerprint.load(Relaxed),
            topic_id: f.topic_id.load(Relaxed),
        };
        if g.validate()? != len {
            return Err(LayoutError::Corrupt("mapping length"));
        }
        Ok(g)
    }

    /// Writes line 0 (magic last, `Release`) of a fresh header.
    pub(crate) fn write(&self, header: &Header) {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        let f = &header.fixed.0;
        f.version.store(VERSION, Relaxed);
        f.kind.store(self.kind as u32, Relaxed);
        // Lossless: `validate` bounds both far below u32::MAX.
        f.slot_size.store(self.slot_size as u32, Relaxed);
        f.capacity.store(self.capacity as u32, Relaxed);
        f.fingerprint.store(self.fingerprint, Relaxed);
        f.topic_id.store(self.topic_id, Relaxed);
        f.magic.store(MAGIC, Release);
    }
}
