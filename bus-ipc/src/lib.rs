//! llbus-ipc: llbus topics between processes on one host, through shared memory.
//!
//! One SPSC ring per publisher-subscriber pair lives in a sealed anonymous memory file, with
//! the in-process ring's cached-index algorithm and batching. The writer hands the file to the
//! reader over a Unix socket in a directory only their user can write; each side checks with
//! the kernel that the other is that user (or one admitted by configuration), and the reader
//! maps only memory whose size is sealed. See `docs/IPC.md` for the layout.
//!
//! # Contract
//!
//! - **What allocates.** Opening a channel allocates (the mapping, its path). Writing and
//!   reading plain-data messages ([`Pod`]) allocates nothing and makes no system call unless
//!   the other side announced that it sleeps; bincode messages ([`Bincode`]) allocate only
//!   what decoding their own type allocates.
//! - **What is trusted.** Nothing in the mapping, and no process of another user. Slot bytes
//!   are only copied, a word at a time through atomics, into private memory ([`Slots`]), never
//!   viewed through a reference; every index and length read is checked before use; a value
//!   out of range makes the ring [`RingError::Corrupt`], which the caller counts before it
//!   reconnects; bincode decoding is bounded by the slot, element counts included. No bytes a
//!   peer writes can cause undefined behaviour, a panic or a hang in this crate (a fuzz target
//!   and miri check the reader), and no peer can shrink the memory under us (no `SIGBUS`).
//! - **When a ring is full.** The writer is told ([`RingWriter::free`] is 0) and may wait
//!   ([`RingWriter::park`]): nothing is dropped by the ring itself.
//! - **What is lost on a crash.** Messages in the ring of a writer that dies are still read;
//!   a reader that dies leaves its unread messages for the reader that replaces it.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use llbus_ipc::{Geometry, Kind, Region, RingReader, RingWriter};
//!
//! let geo = Geometry { kind: Kind::Pod, slot_size: 8, capacity: 4, fingerprint: 7, topic_id: 1 };
//! let region = Arc::new(Region::heap(geo.mapping_len()));
//! let mut tx = RingWriter::create(region.clone(), geo)?;
//! let mut rx = RingReader::attach(region)?;
//! tx.write_batch(2, |slot| slot.write(0, &42u64.to_le_bytes()))?;
//! let mut got = Vec::new();
//! rx.read_batch(8, |slot| got.extend(slot.read_pod::<u64>(0)))?;
//! assert_eq!(got, [42, 42]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Under loom only the handshake's models run; the system-call paths are unused.
#![cfg_attr(loom, allow(dead_code))]

mod channel;
mod codec;
mod component;
#[cfg(unix)]
mod file;
mod handshake;
mod layout;
#[cfg(all(test, loom))]
mod loom_models;
mod region;
#[cfg(unix)]
mod rendezvous;
mod ring;
mod sys;

#[cfg(all(test, not(loom)))]
mod tests;

pub use channel::{
    remove_stale, topic_channel, ChannelConfig, OpenError, PeerState, Receiver, RecvError,
    SendError, Sender,
};
pub use codec::{Bincode, CodecError, Pod, SlotCodec, DECODE_LIMIT};
pub use component::{ExportActor, ImportActor, IpcStatus, ShmExport, ShmImport};
pub use layout::{Geometry, Kind, LayoutError, HEADER_LEN, MAGIC, VERSION};
pub use region::{Region, Slots};
pub use ring::{RingError, RingReader, RingWriter};

/// Re-exported so that users can implement or derive [`bytemuck::Pod`] for their messages.
pub use bytemuck;
