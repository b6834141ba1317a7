//! The preallocated buffers of a batch: [`RecvBatch`] holds N receive buffers of the maximum
//! datagram size (plus one byte, so an oversized datagram is recognised, not silently cut) in
//! one allocation; [`SendBatch`] holds the system call's descriptors for N datagrams. Both
//! allocate once, in `new`, and never again.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use crate::protocol::header::MAX_DATAGRAM_LIMIT;

/// The most datagrams one batch holds.
pub const MAX_BATCH: usize = 1024;

/// The length of the per-destination suffix a batched send may append to a datagram (a
/// subscription token).
pub const SUFFIX_LEN: usize = 8;

/// Marks a slot whose datagram was dropped (too large, unknown address family).
pub(super) const DROPPED: usize = usize::MAX;

/// Receive buffers for one batch of datagrams. See the module docs.
#[derive(Debug)]
pub struct RecvBatch {
    /// `capacity` slots of `slot_len` bytes, back to back.
    pub(super) buf: Box<[u8]>,
    /// `max_datagram + 1`.
    pub(super) slot_len: usize,
    pub(super) max_datagram: usize,
    /// Per slot: the received length, or `DROPPED`. Meaningful for slots `< taken`.
    pub(super) lens: Box<[usize]>,
    /// Per slot: the sender. Meaningful where `lens` is not `DROPPED`.
    pub(super) addrs: Box<[SocketAddr]>,
    /// Slots filled by the last receive, dropped ones included. Invariant: `taken <= capacity`.
    pub(super) taken: usize,
    #[cfg(target_os = "linux")]
    pub(super) sys: super::linux::RecvState,
}

impl RecvBatch {
    /// Buffers for `capacity` datagrams (1 to [`MAX_BATCH`]; 16 to 64 is typical) of at most
    /// `max_datagram` bytes (at most [`MAX_DATAGRAM_LIMIT`]). Allocates
    /// `capacity * (max_datagram + 1)` bytes and the descriptors, once.
    pub fn new(capacity: usize, max_datagram: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_BATCH);
        let max_datagram = max_datagram.min(MAX_DATAGRAM_LIMIT);
        let slot_len = max_datagram + 1;
        let unspecified = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        RecvBatch {
            buf: vec![0u8; capacity * slot_len].into_boxed_slice(),
            slot_len,
            max_datagram,
            lens: vec![DROPPED; capacity].into_boxed_slice(),
            addrs: vec![unspecified; capacity].into_boxed_slice(),
            taken: 0,
            #[cfg(target_os = "linux")]
            sys: super::linux::RecvState::new(capacity),
        }
    }

    /// How many datagrams one receive takes at most.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// The maximum datagram size; larger ones are dropped and counted.
    pub fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    /// Datagrams taken off the socket by the last receive, dropped ones included.
    pub fn taken(&self) -> usize {
        self.taken
    }

    pub(super) fn clear(&mut self) {
        self.taken = 0;
    }

    /// The slot `i` of the buffer, mutable (for the portable receive loop).
    #[cfg(any(not(target_os = "linux"), test))]
    pub(super) fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        self.buf.chunks_exact_mut(self.slot_len).nth(i)
    }

    /// The datagram in slot `i` with its sender, if slot `i` holds one.
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.taken {
            return None;
        }
        let len = *self.lens.get(i)?;
        if len == DROPPED {
            return None;
        }
        let start = i.checked_mul(self.slot_len)?;
        let bytes = self.buf.get(start..start.checked_add(len)?)?;
        Some((bytes, *self.addrs.get(i)?))
    }

    /// The datagrams of the last receive, with their senders, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> + '_ {
        (0..self.taken).filter_map(move |i| self.get(i))
    }
}

/// Descriptors for sending one batch of datagrams with one system call. See the module docs.
#[derive(Debug)]
pub struct SendBatch {
    capacity: usize,
    #[cfg(target_os = "linux")]
    pub(super) sys: super::linux::SendState,
    /// Where a datagram and its suffix are put together for `send_to`.
    #[cfg(not(target_os = "linux"))]
    pub(super) scratch: Vec<u8>,
}

impl SendBatch {
    /// Descriptors for `capacity` datagrams per system call (1 to [`MAX_BATCH`]). Allocates once.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_BATCH);
        SendBatch {
            capacity,
            #[cfg(target_os = "linux")]
            sys: super::linux::SendState::new(capacity),
            #[cfg(not(target_os = "linux"))]
            scratch: vec![0; MAX_DATAGRAM_LIMIT + SUFFIX_LEN],
        }
    }

    /// How many datagrams one system call sends at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
