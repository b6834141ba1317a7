//! A bounded SPSC ring whose hop moves one cache line: values sit in lines that carry their own
//! header.
//!
//! The algorithm is [`spsc`](super::spsc)'s (a slot array allocated once, a private cached copy
//! of the consumer's index on the producer's side, lazy frees after MCRingBuffer) with the
//! producer's shared index replaced by a sequence number in each line of slots, after the LMAX
//! disruptor's sequence per entry (Thompson et al., "Disruptor: High performance alternative to
//! bounded queues for exchanging data between concurrent threads", 2011) and FastForward's
//! in-slot marker (Giacomoni, Moseley and Vachharajani, PPoPP 2008), with the marker per line
//! rather than per slot.
//!
//! # Layout
//! The ring is an array of *blocks*, each one cache line (64 bytes; more only for a value that
//! does not fit beside the header), a header word followed by as many slots as fit:
//!
//! ```text
//!  block 0                                   block 1
//! +--------+------+------+-----+--------+   +--------+------+-----
//! | header | v[0] | v[1] | ... | v[k-1] |   | header | v[0] | ...
//! +--------+------+------+-----+--------+   +--------+------+-----
//!  <-------------- 64 bytes ------------>
//! ```
//!
//! For 8-byte values a block holds 7 (`Ring` packs 8 in a line); for 16-byte values 3. Positions
//! count values from 0 and walk the blocks in order, slot by slot, wrapping after the last block.
//!
//! # Protocol
//! The producer writes the values of a run of positions into a block, then stores the position
//! after the last one into the block's header (`Release`): one store per block and batch, and one
//! per value one at a time. The consumer at position `p` loads its block's header (`Acquire`):
//! a header `h` with `h > p` (in wrapping arithmetic) says every position of this block from `p`
//! up to `h` is written, so the consumer reads them all without another load. A header left
//! from the block's previous lap is at most the first position of this lap, so it never says
//! ready. Neither side reads a line the other writes, except the block the consumer is about to
//! take: a hand-off from one thread to the other moves one line, where
//! [`Ring`](super::Ring) moves two (the slot and `tail`).
//!
//! Free space travels as in `Ring`: the consumer stores its position `head` lazily (every
//! [`SlotConsumer::set_release_every`] values, when it finds the next position not yet written,
//! on [`SlotConsumer::release`] and when dropped), and the producer re-reads `head` only when its
//! cached copy says the ring is too full. The price of the layout: one word per line goes to the
//! header, counting what is in the ring from the consumer's side walks the headers
//! ([`SlotConsumer::len`]), and a batch is moved a block at a time (a header load or store and a
//! run each), where `Ring` copies it as one or two runs: in the `ring` suite its batches run
//! slower than `Ring`'s, its round trip on the cache-line floor (docs/PERFORMANCE.md, "A ring
//! hop that moves one line: `SlotRing`").

use std::alloc::{self, Layout};
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::spsc::{Notify, TryPushError};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// The cache line a block is sized to.
const LINE: usize = 64;

/// A slot: one value's cell.
type Cell<T> = UnsafeCell<MaybeUninit<T>>;

const fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// A block's layout for values of `T`, fixed at compile time.
struct Geometry<T>(PhantomData<T>);

impl<T> Geometry<T> {
    /// Slots per block: as many values as fit in a line beside a header word (at least one).
    /// Counted with the plain types' sizes, so that the loom build (whose atomics and cells are
    /// larger) checks the same blocks the release build runs.
    const SLOTS: usize = if size_of::<T>() == 0 {
        8
    } else {
        max(
            1,
            LINE.saturating_sub(round_up(size_of::<usize>(), align_of::<T>())) / size_of::<T>(),
        )
    };
    /// Where the first slot starts in a block.
    const VALUES: usize = round_up(size_of::<AtomicUsize>(), align_of::<Cell<T>>());
    /// A block's alignment: a line, or more for an over-aligned `T`.
    const ALIGN: usize = max(LINE, max(align_of::<AtomicUsize>(), align_of::<Cell<T>>()));
    /// A block's size: whole lines.
    const BLOCK: usize = round_up(
        Self::VALUES + Self::SLOTS * size_of::<Cell<T>>(),
        Self::ALIGN,
    );
}

/// The blocks' memory: headers and cells in one allocation, built and torn down whole.
struct Blocks<T> {
    base: NonNull<u8>,
    /// Blocks in the allocation (at least 1).
    count: usize,
    layout: Layout,
    _values: PhantomData<T>,
}

impl<T> Blocks<T> {
    /// Allocates `count` blocks with zeroed headers and empty cells.
    fn new(count: usize) -> Self {
        let layout = Geometry::<T>::BLOCK
            .checked_mul(count)
            .and_then(|size| Layout::from_size_align(size, Geometry::<T>::ALIGN).ok())
            .unwrap_or_else(|| panic!("ring of {count} blocks is too large"));
        // SAFETY: `layout` has a non-zero size (a block is at least one line, `count >= 1`).
        let base = unsafe { alloc::alloc(layout) };
        let Some(base) = NonNull::new(base) else {
            alloc::handle_alloc_error(layout)
        };
        let blocks = Blocks {
            base,
            count,
            layout,
            _values: PhantomData,
        };
        for b in 0..count {
            // SAFETY: the header and the cells of block `b < count` lie inside the allocation
            // at their types' alignment (`Geometry`), and nothing has been written there yet.
            unsafe {
                blocks.header_ptr(b).write(AtomicUsize::new(0));
                for i in 0..Geometry::<T>::SLOTS {
                    blocks
                        .cell_ptr(b, i)
                        .write(UnsafeCell::new(MaybeUninit::uninit()));
                }
            }
        }
        blocks
    }

    /// # Safety
    /// `b < self.count`.
    #[inline(always)]
    unsafe fn header_ptr(&self, b: usize) -> *mut AtomicUsize {
        debug_assert!(b < self.count);
        // SAFETY: the caller's `b < count` keeps the offset inside the allocation.
        unsafe { self.base.as_ptr().add(b * Geometry::<T>::BLOCK).cast() }
    }

    /// # Safety
    /// `b < self.count` and `i < Geometry::<T>::SLOTS`.
    #[inline(always)]
    unsafe fn cell_ptr(&self, b: usize, i: usize) -> *mut Cell<T> {
        debug_assert!(b < self.count && i < Geometry::<T>::SLOTS);
        let offset = b * Geometry::<T>::BLOCK + Geometry::<T>::VALUES + i * size_of::<Cell<T>>();
        // SAFETY: the caller's bounds keep the offset inside block `b` of the allocation.
        unsafe { self.base.as_ptr().add(offset).cast() }
    }

    /// Block `b`'s header.
    #[inline(always)]
    fn header(&self, b: usize) -> &AtomicUsize {
        assert!(b < self.count);
        // SAFETY: in bounds (asserted; the check folds away where `b` is known), initialised
        // in `new`, and only ever accessed through shared references.
        unsafe { &*self.header_ptr(b) }
    }

    /// Slots `first..first + n` of block `b`, unchecked: the hot paths' way in.
    ///
    /// # Safety
    /// `b < self.count` and `first + n <= Geometry::<T>::SLOTS`: the halves keep their `Place`
    /// inside the ring and their runs inside a block.
    #[inline(always)]
    unsafe fn run_unchecked(&self, b: usize, first: usize, n: usize) -> &[Cell<T>] {
        debug_assert!(b < self.count && first + n <= Geometry::<T>::SLOTS);
        // SAFETY: in bounds (the caller's contract): a block's cells follow each other at the
        // cell type's stride, as in an array, and were initialised in `new`.
        unsafe { std::slice::from_raw_parts(self.cell_ptr(b, first), n) }
    }

    /// Block `b`'s header, unchecked.
    ///
    /// # Safety
    /// `b < self.count`.
    #[inline(always)]
    unsafe fn header_unchecked(&self, b: usize) -> &AtomicUsize {
        // SAFETY: in bounds (the caller's contract), initialised in `new`.
        unsafe { &*self.header_ptr(b) }
    }

    /// Slots `first..first + n` of block `b`: contiguous, so a batch walks them with no
    /// per-item bounds check.
    #[inline(always)]
    fn run(&self, b: usize, first: usize, n: usize) -> &[Cell<T>] {
        assert!(b < self.count && first + n <= Geometry::<T>::SLOTS);
        // SAFETY: in bounds (asserted): a block's cells follow each other at the cell type's
        // stride, as in an array, and were initialised in `new`; the values inside are accessed
        // only through the cells' `with`/`with_mut` under the ring's protocol.
        unsafe { std::slice::from_raw_parts(self.cell_ptr(b, first), n) }
    }
}

impl<T> Drop for Blocks<T> {
    fn drop(&mut self) {
        for b in 0..self.count {
            // SAFETY: every header and cell was written in `new` and is dropped once here (the
            // cells' values, if any, were dropped by `Shared::drop`; `MaybeUninit` drops none).
            // Plain atomics and cells need no drop; loom's do.
            unsafe {
                self.header_ptr(b).drop_in_place();
                for i in 0..Geometry::<T>::SLOTS {
                    self.cell_ptr(b, i).drop_in_place();
                }
            }
        }
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// Where a position lies: its block and its slot in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    block: usize,
    slot: usize,
}

/// The shared part of a slotted ring, owned jointly by its two halves.
struct Shared<T> {
    /// The consumer's position as last published: every position before it is free. Written
    /// only by the consumer. Invariant: `head <= (producer's position) <= head + capacity`.
    head: CachePadded<AtomicUsize>,
    /// The place of `head` (block * slots + slot), stored by the consumer when it goes, for
    /// `Shared::drop`.
    head_place: AtomicUsize,
    /// Set by whichever half is dropped first.
    closed: CachePadded<AtomicBool>,
    /// Slots used in each block (`1..=Geometry::SLOTS`).
    slots: usize,
    /// The blocks. A block's header holds `q + 1` for the last position `q` written into it;
    /// position `p >= head` in block `b` holds an initialised value exactly when `header(b)`,
    /// read at `p`, says ready ([`ready`]).
    blocks: Blocks<T>,
}

/// How many positions from `p` (whose block has `left` slots from `p` to its end) a header
/// `h` says are written: `h - p` when `h` is ahead of `p`, capped at the block's end; 0 when the
/// header is from an earlier lap (at most the first position of `p`'s lap in that block).
#[inline(always)]
fn ready(h: usize, p: usize, left: usize) -> usize {
    let ahead = h.wrapping_sub(p);
    if (ahead as isize) <= 0 {
        0
    } else {
        ahead.min(left)
    }
}

// SAFETY: `Shared` is reachable only through one `SlotProducer` and one `SlotConsumer`. A cell's
// value is written only by the producer while its position is free (below `head + capacity`,
// so the consumer has moved past the position's previous value), and read only by the consumer
// after the block's header (Release/Acquire) says it was written; the consumer's Release store
// of `head` orders its reads before the producer's next writes. Values of `T` move from one
// thread to the other, which needs `T: Send`.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above: the two halves never access one cell's value at the same time.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Values ready from position `p` at `place`, walking the headers (at most `capacity`).
    fn count_from(&self, mut p: usize, mut place: Place) -> usize {
        let capacity = self.blocks.count * self.slots;
        let mut count = 0;
        while count < capacity {
            let left = self.slots - place.slot;
            let h = self.blocks.header(place.block).load(Ordering::Acquire);
            let n = ready(h, p, left);
            count += n;
            if n < left {
                break;
            }
            p = p.wrapping_add(n);
            place = Place {
                block: (place.block + 1) % self.blocks.count,
                slot: 0,
            };
        }
        count.min(capacity)
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both halves are gone (the consumer published its position and place as it went): drop
        // the values from `head` on, exactly once. If one value's `Drop` panics, `rest` drops
        // the others while unwinding.
        struct DropRest<'a, T> {
            shared: &'a Shared<T>,
            place: Place,
            left: usize,
        }
        impl<T> DropRest<'_, T> {
            fn drop_next(&mut self) {
                let Place { block, slot } = self.place;
                self.left -= 1;
                self.place = if slot + 1 == self.shared.slots {
                    Place {
                        block: (block + 1) % self.shared.blocks.count,
                        slot: 0,
                    }
                } else {
                    Place {
                        block,
                        slot: slot + 1,
                    }
                };
                let cell = &self.shared.blocks.run(block, slot, 1)[0];
                // SAFETY: the position is one of the `left` counted ready from `head`: it holds
                // an initialised value nobody took, visited once because `place` moves first.
                cell.with_mut(|v| unsafe { (*v).assume_init_drop() });
            }
        }
        impl<T> Drop for DropRest<'_, T> {
            fn drop(&mut self) {
                while self.left > 0 {
                    self.drop_next();
                }
            }
        }
        let head = self.head.load(Ordering::Relaxed);
        let at = self.head_place.load(Ordering::Relaxed);
        let place = Place {
            block: at / self.slots,
            slot: at % self.slots,
        };
        let left = self.count_from(head, place);
        let mut rest = DropRest {
            shared: self,
            place,
            left,
        };
        while rest.left > 0 {
            rest.drop_next();
        }
    }
}

/// A bounded SPSC ring whose hop moves one cache line (see the module docs);
/// [`SlotRing::new`] makes one and hands out its two halves.
///
/// # Contract
/// As [`Ring`](super::Ring)'s: all memory is allocated in [`SlotRing::new`]; every operation is
/// wait-free; a full ring hands the value back; each half can tell when the other is gone;
/// values left in the ring are dropped exactly once, when the second half goes; either half can
/// ring a doorbell ([`Notify`]) for a thread that sleeps on the other side. Its halves have the
/// methods of `Ring`'s that a bus edge uses, with the same meaning.
///
/// ```
/// use llbus::SlotRing;
///
/// let (mut tx, mut rx) = SlotRing::new(4);
/// tx.try_push(1).unwrap();
/// assert_eq!(tx.push_slice(&[2, 3, 4, 5]), 3); // only three more fit
/// assert_eq!(rx.try_pop(), Some(1));
/// let mut got = Vec::new();
/// rx.pop_batch(8, |v| got.push(v));
/// assert_eq!(got, [2, 3, 4]);
/// ```
#[derive(Debug)]
pub struct SlotRing<T>(PhantomData<T>);

impl<T> SlotRing<T> {
    /// Makes a ring of at least `capacity` slots and returns its producer and consumer halves.
    /// The capacity is rounded up to whole blocks (for 8-byte values, to a multiple of 7 when
    /// `capacity` is above 7): see [`SlotProducer::capacity`].
    ///
    /// # Panics
    /// If `capacity` is 0, or the ring would not fit in memory.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize) -> (SlotProducer<T>, SlotConsumer<T>) {
        assert!(capacity > 0, "ring capacity must be at least 1");
        Self::with_slots_per_block(capacity, Geometry::<T>::SLOTS.min(capacity))
    }

    /// As [`SlotRing::new`] with `slots` of each block used (`1..=Geometry::SLOTS`): tests
    /// choose small blocks to cross block boundaries in few steps.
    pub(crate) fn with_slots_per_block(
        capacity: usize,
        slots: usize,
    ) -> (SlotProducer<T>, SlotConsumer<T>) {
        assert!(capacity > 0, "ring capacity must be at least 1");
        assert!((1..=Geometry::<T>::SLOTS).contains(&slots));
        let count = capacity.div_ceil(slots);
        let capacity = count
            .checked_mul(slots)
            .filter(|&c| c <= isize::MAX as usize)
            .unwrap_or_else(|| panic!("ring capacity {capacity} is too large"));
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicUsize::new(0)),
            head_place: AtomicUsize::new(0),
            closed: CachePadded::new(AtomicBool::new(false)),
            slots,
            blocks: Blocks::new(count),
        });
        let producer = SlotProducer {
            shared: Arc::clone(&shared),
            capacity,
            slots,
            tail: 0,
            place: Place { block: 0, slot: 0 },
            head_cache: 0,
            notify: None,
        };
        let consumer = SlotConsumer {
            shared,
            capacity,
            slots,
            head: 0,
            place: Place { block: 0, slot: 0 },
            ready_end: 0,
            published: 0,
            release_every: (capacity / 4).max(1),
            notify: None,
        };
        (producer, consumer)
    }
}

/// The writing half of a [`SlotRing`]. `Send`, not `Clone`.
pub struct SlotProducer<T> {
    shared: Arc<Shared<T>>,
    /// Copies of the ring's geometry, so the hot path reads no shared line.
    capacity: usize,
    slots: usize,
    /// The next position to write.
    tail: usize,
    /// Where `tail` lies.
    place: Place,
    /// The last `head` read. Invariant: `head_cache <= shared.head <= tail`.
    head_cache: usize,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

/// The reading half of a [`SlotRing`]. `Send`, not `Clone`.
pub struct SlotConsumer<T> {
    shared: Arc<Shared<T>>,
    capacity: usize,
    slots: usize,
    /// The next position to read.
    head: usize,
    /// Where `head` lies.
    place: Place,
    /// Positions `[head, ready_end)` are known written (all in `head`'s block, read from its
    /// header). Invariant: `head <= ready_end`.
    ready_end: usize,
    /// The last `head` stored in `shared.head`. Invariant: `published <= head`.
    published: usize,
    release_every: usize,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

/// The place after `n` positions from `place` (`place.slot + n <= slots`: within its block).
#[inline(always)]
fn step(place: &mut Place, n: usize, slots: usize, blocks: usize) {
    place.slot += n;
    if place.slot == slots {
        place.slot = 0;
        place.block += 1;
        if place.block == blocks {
            place.block = 0;
        }
    }
}

/// A batch being written, with the producer's state in locals: publishes what was written
/// into the current block when the block fills, and everything on drop (the batch's end, or a
/// panic in user code), then writes the state back and rings the doorbell once.
struct Writer<'a, T> {
    blocks: &'a Blocks<T>,
    slots: usize,
    /// The producer's `tail` and `place`, written back on drop.
    tail_out: &'a mut usize,
    place_out: &'a mut Place,
    notify: &'a Option<std::sync::Arc<dyn Notify>>,
    /// The first position not yet published, at `place`.
    tail: usize,
    place: Place,
    /// Values written at `place` onwards, not yet published (`place.slot + pending <= slots`).
    pending: usize,
    /// Values published by this batch.
    done: usize,
}

impl<T> Writer<'_, T> {
    /// Writes `value` at the next position, which must be free.
    #[inline(always)]
    fn put(&mut self, value: T) {
        debug_assert!(self.place.slot + self.pending < self.slots);
        // SAFETY: `place` is inside the ring and `slot + pending < slots` (flushed at the
        // block's end), so the cell is in bounds.
        let cell = unsafe {
            &self
                .blocks
                .run_unchecked(self.place.block, self.place.slot + self.pending, 1)[0]
        };
        // SAFETY: the caller checked the position is below `head + capacity` (against a `head`
        // read with Acquire after the consumer's Release store that moved past the previous
        // value here), so the consumer does not read this cell until the block's header says
        // so, which `flush` stores after this write. Only this producer writes cells.
        cell.with_mut(|v| unsafe { (*v).write(value) });
        self.pending += 1;
        if self.place.slot + self.pending == self.slots {
            self.flush();
        }
    }

    /// Publishes the pending values with one Release store of their block's header.
    #[inline(always)]
    fn flush(&mut self) {
        self.tail = self.tail.wrapping_add(self.pending);
        // SAFETY: `place` is inside the ring.
        let header = unsafe { self.blocks.header_unchecked(self.place.block) };
        header.store(self.tail, Ordering::Release);
        step(&mut self.place, self.pending, self.slots, self.blocks.count);
        self.done += self.pending;
        self.pending = 0;
    }
}

impl<T> Drop for Writer<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.pending > 0 {
            self.flush();
        }
        *self.tail_out = self.tail;
        *self.place_out = self.place;
        if self.done > 0 {
            if let Some(notify) = self.notify {
                notify.notify();
            }
        }
    }
}

impl<T> SlotProducer<T> {
    /// Pushes `value`, or hands it back in [`TryPushError::Full`] when the ring is full.
    /// Wait-free; allocates nothing. As `Ring`'s, a ring whose consumer is gone still takes
    /// values while it has room.
    ///
    /// # Errors
    /// [`TryPushError::Full`] with the value when the ring is full.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), TryPushError<T>> {
        if self.free_slots(1) == 0 {
            return Err(TryPushError::Full(value));
        }
        let blocks = &self.shared.blocks;
        let Place { block, slot } = self.place;
        // SAFETY: `place` is inside the ring (`step` keeps it there).
        let (cell, header) = unsafe {
            (
                &blocks.run_unchecked(block, slot, 1)[0],
                blocks.header_unchecked(block),
            )
        };
        // SAFETY: as in `Writer::put`: the position is free, and unpublished until the store.
        cell.with_mut(|v| unsafe { (*v).write(value) });
        self.tail = self.tail.wrapping_add(1);
        header.store(self.tail, Ordering::Release);
        step(&mut self.place, 1, self.slots, blocks.count);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
        Ok(())
    }

    /// Pushes items from `iter` until the ring is full or `iter` ends; each block's share is
    /// published with one store. `head` is re-read when the cached one shows less room than
    /// `iter`'s size hint. Returns how many were pushed; `iter` is not advanced past the last.
    ///
    /// If `iter` panics, the items already taken from it stay pushed.
    pub fn push_iter<I: Iterator<Item = T>>(&mut self, iter: &mut I) -> usize {
        let free = self.free_slots(iter.size_hint().0.max(1));
        let mut w = self.writer();
        for _ in 0..free {
            let Some(value) = iter.next() else { break };
            w.put(value);
        }
        w.pending + w.done
    }

    /// Pushes clones of the items of `items` while there is room; returns how many. Each
    /// block's share is published with one store. If `Clone` panics, the clones already made
    /// stay pushed.
    pub fn push_slice(&mut self, items: &[T]) -> usize
    where
        T: Clone,
    {
        let n = self.free_slots(items.len()).min(items.len());
        let mut w = self.writer();
        let mut items = &items[..n];
        while !items.is_empty() {
            let first = w.place.slot + w.pending;
            let k = items.len().min(w.slots - first);
            let (now, rest) = items.split_at(k);
            items = rest;
            // SAFETY: `place` is inside the ring and `first + k <= slots`.
            let run = unsafe { w.blocks.run_unchecked(w.place.block, first, k) };
            if k == Geometry::<T>::SLOTS {
                // NB: a whole block as a loop of a constant count, so that `Copy` items compile
                // to a few vector moves instead of a call to `memcpy` per block; the one-thread
                // program `benches/examples/one_thread_ring.rs` measures it.
                for i in 0..Geometry::<T>::SLOTS {
                    // SAFETY: as in `Writer::put`: the position is free and not yet published.
                    run[i].with_mut(|v| unsafe { (*v).write(now[i].clone()) });
                    w.pending += 1;
                }
            } else {
                for (cell, item) in run.iter().zip(now) {
                    // SAFETY: as in `Writer::put`.
                    cell.with_mut(|v| unsafe { (*v).write(item.clone()) });
                    w.pending += 1;
                }
            }
            if w.place.slot + w.pending == w.slots {
                w.flush();
            }
        }
        n
    }

    /// The ring's capacity in values: the capacity asked for, rounded up to whole blocks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many values are in the ring, as seen from this side: at least the true count (the
    /// consumer tells of what it took in groups; see [`SlotConsumer::set_release_every`]).
    pub fn len(&self) -> usize {
        self.tail
            .wrapping_sub(self.shared.head.load(Ordering::Acquire))
    }

    /// True if the ring is empty as seen from this side.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many values can be pushed now: at most the true free space.
    pub fn slots(&mut self) -> usize {
        self.free_slots(1)
    }

    /// Free slots, re-reading the consumer's index whenever the cached one shows fewer than
    /// `wanted`: how much of a batch of `wanted` fits now (as `Producer::slots_for`).
    #[allow(
        dead_code,
        reason = "what a bus edge reads from `Ring`'s halves, for an edge on this ring"
    )]
    #[inline]
    pub(crate) fn slots_for(&mut self, wanted: usize) -> usize {
        self.free_slots(wanted)
    }

    /// True once the consumer has been dropped.
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Calls `notify` after every push or batch, so a consumer that sleeps while the ring is
    /// empty can be woken (the `Park` strategy's doorbell). `None` detaches it.
    pub fn notify_on_push(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// Free slots, re-reading `head` only when the cached one shows fewer than `wanted`.
    #[inline(always)]
    fn free_slots(&mut self, wanted: usize) -> usize {
        let used = self.tail.wrapping_sub(self.head_cache);
        if self.capacity - used >= wanted.max(1) {
            return self.capacity - used;
        }
        self.head_cache = self.shared.head.load(Ordering::Acquire);
        self.capacity - self.tail.wrapping_sub(self.head_cache)
    }

    #[inline(always)]
    fn writer(&mut self) -> Writer<'_, T> {
        Writer {
            blocks: &self.shared.blocks,
            slots: self.slots,
            tail: self.tail,
            place: self.place,
            tail_out: &mut self.tail,
            place_out: &mut self.place,
            notify: &self.notify,
            pending: 0,
            done: 0,
        }
    }
}

/// A batch pop, with the consumer's state in locals: on drop (the batch's end, or a panic in
/// the caller's closure) moves `head` past what was handed out, writes the state back and frees
/// the slots when due.
struct Reader<'a, T> {
    shared: &'a Shared<T>,
    slots: usize,
    /// The consumer's fields, written back on drop.
    out: ReaderOut<'a>,
    /// Moves past each value as it is handed out.
    head: usize,
    /// Where `run_head` lies.
    place: Place,
    /// `head` when the current run began.
    run_head: usize,
    ready_end: usize,
    /// The batch found the next position not yet written.
    drained: bool,
}

/// Where a [`Reader`] writes the consumer's state back.
struct ReaderOut<'a> {
    head: &'a mut usize,
    place: &'a mut Place,
    ready_end: &'a mut usize,
    published: &'a mut usize,
    release_every: usize,
    notify: &'a Option<std::sync::Arc<dyn Notify>>,
}

/// Moves the value out of `cell`.
///
/// # Safety
/// `cell` holds an initialised value that no one else reads or moves out, now or later.
#[inline(always)]
unsafe fn take<T>(cell: &Cell<T>) -> T {
    // SAFETY: the caller's contract.
    cell.with(|v| unsafe { (*v).assume_init_read() })
}

/// Frees every position before `head` (one Release store) and rings the doorbell, if any.
#[inline(always)]
fn free<T>(
    shared: &Shared<T>,
    head: usize,
    published: &mut usize,
    notify: &Option<std::sync::Arc<dyn Notify>>,
) {
    *published = head;
    shared.head.store(head, Ordering::Release);
    if let Some(notify) = notify {
        notify.notify();
    }
}

impl<T> Reader<'_, T> {
    /// Moves `place` past the values of the current run.
    #[inline(always)]
    fn settle(&mut self) {
        let taken = self.head.wrapping_sub(self.run_head);
        step(&mut self.place, taken, self.slots, self.shared.blocks.count);
        self.run_head = self.head;
    }
}

impl<T> Drop for Reader<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.settle();
        let out = &mut self.out;
        *out.head = self.head;
        *out.place = self.place;
        *out.ready_end = self.ready_end;
        // Drained: the producer may be about to wait for room, so free at once.
        if (self.drained && self.head != *out.published)
            || self.head.wrapping_sub(*out.published) >= out.release_every
        {
            free(self.shared, self.head, out.published, out.notify);
        }
    }
}

impl<T> SlotConsumer<T> {
    /// Pops the oldest value, or returns `None` when the ring is empty. Wait-free.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let blocks = &self.shared.blocks;
        let Place { block, slot } = self.place;
        if self.ready_end == self.head {
            // SAFETY: `place` is inside the ring (`step` keeps it there).
            let h = unsafe { blocks.header_unchecked(block) }.load(Ordering::Acquire);
            let n = ready(h, self.head, self.slots - slot);
            if n == 0 {
                // Drained: the producer may be about to wait for room, so free at once.
                self.release();
                return None;
            }
            self.ready_end = self.head.wrapping_add(n);
        }
        // SAFETY: `place` is inside the ring.
        let cell = unsafe { &blocks.run_unchecked(block, slot, 1)[0] };
        // SAFETY: `head < ready_end`: the block's header, read with Acquire after the producer's
        // Release store, said the position is written; `head` moves past it at once, so it is
        // moved out once.
        let value = cell.with(|v| unsafe { (*v).assume_init_read() });
        self.head = self.head.wrapping_add(1);
        step(&mut self.place, 1, self.slots, blocks.count);
        if self.head.wrapping_sub(self.published) >= self.release_every {
            self.release();
        }
        Some(value)
    }

    /// Pops up to `max` values, handing each to `f` in order; returns how many. Reads one
    /// header per block and frees the slots with at most one store of `head`.
    ///
    /// If `f` panics, the values already handed to it (including the one it panicked on) count
    /// as popped; the rest stay in the ring.
    pub fn pop_batch<F: FnMut(T)>(&mut self, max: usize, mut f: F) -> usize {
        let mut r = Reader {
            shared: &self.shared,
            slots: self.slots,
            head: self.head,
            place: self.place,
            run_head: self.head,
            ready_end: self.ready_end,
            out: ReaderOut {
                head: &mut self.head,
                place: &mut self.place,
                ready_end: &mut self.ready_end,
                published: &mut self.published,
                release_every: self.release_every,
                notify: &self.notify,
            },
            drained: false,
        };
        let slots = r.slots;
        let blocks = &r.shared.blocks;
        let start = r.head;
        while r.head.wrapping_sub(start) < max {
            if r.ready_end == r.head {
                // SAFETY: `place` is inside the ring.
                let header = unsafe { blocks.header_unchecked(r.place.block) };
                let n = ready(header.load(Ordering::Acquire), r.head, slots - r.place.slot);
                if n == 0 {
                    r.drained = true;
                    break;
                }
                r.ready_end = r.head.wrapping_add(n);
            }
            let n = (r.ready_end.wrapping_sub(r.head)).min(max - r.head.wrapping_sub(start));
            // SAFETY: `place` is inside the ring and `[head, ready_end)` inside its block.
            let run = unsafe { blocks.run_unchecked(r.place.block, r.place.slot, n) };
            // Both loops: the position is in `[head, ready_end)`: the block's header,
            // read with Acquire after the producer's Release store, said it is written. `r`
            // moves past it before `f` runs, so `head` moves past it even if `f` panics: each
            // value is moved out once.
            if n == Geometry::<T>::SLOTS {
                // NB: a whole block as a loop of a constant count (unrolled: no loop exit to
                // predict per block), as `push_slice` writes one;
                // `benches/examples/one_thread_ring.rs` measures it.
                #[allow(clippy::needless_range_loop, reason = "a constant trip count")]
                for i in 0..Geometry::<T>::SLOTS {
                    // SAFETY: as said above the two loops.
                    let value = unsafe { take(&run[i]) };
                    r.head = r.head.wrapping_add(1);
                    f(value);
                }
            } else {
                for cell in run {
                    // SAFETY: as said above the two loops.
                    let value = unsafe { take(cell) };
                    r.head = r.head.wrapping_add(1);
                    f(value);
                }
            }
            r.settle();
        }
        r.head.wrapping_sub(start)
    }

    /// The ring's capacity in values (see [`SlotProducer::capacity`]).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many values are in the ring now (walks the headers from `head`).
    pub fn len(&self) -> usize {
        self.shared.count_from(self.head, self.place)
    }

    /// True if the ring is empty now.
    pub fn is_empty(&self) -> bool {
        let left = self.slots - self.place.slot;
        let h = self
            .shared
            .blocks
            .header(self.place.block)
            .load(Ordering::Acquire);
        self.ready_end == self.head && ready(h, self.head, left) == 0
    }

    /// Values known to be ready without loading a header: a lower bound on `len`.
    #[allow(
        dead_code,
        reason = "what a bus edge reads from `Ring`'s halves, for an edge on this ring"
    )]
    #[inline(always)]
    pub(crate) fn cached_len(&self) -> usize {
        self.ready_end.wrapping_sub(self.head)
    }

    /// True once the producer has been dropped. Values it pushed before may still be waiting:
    /// the ring is finished when it is abandoned *and* empty (check in that order).
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Calls `notify` after every store of `head`, so a producer that sleeps while the ring is
    /// full can be woken. `None` detaches it.
    pub fn notify_on_pop(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// Frees every slot this side has read (one Release store of `head`, and the doorbell, if
    /// any, when there was something to free).
    #[inline]
    pub fn release(&mut self) {
        if self.published != self.head {
            free(&self.shared, self.head, &mut self.published, &self.notify);
        }
    }

    /// Sets how many freed slots this side gathers before it stores `head`, clamped to
    /// `1..=capacity` (default: a quarter of the capacity), as
    /// [`Consumer::set_release_every`](super::Consumer::set_release_every).
    pub fn set_release_every(&mut self, n: usize) {
        self.release_every = n.clamp(1, self.capacity());
        if self.head.wrapping_sub(self.published) >= self.release_every {
            self.release();
        }
    }

    /// See [`SlotConsumer::set_release_every`].
    pub fn release_every(&self) -> usize {
        self.release_every
    }
}

impl<T> Drop for SlotProducer<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // A consumer asleep on an empty ring must wake to see that nothing more will come.
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

impl<T> Drop for SlotConsumer<T> {
    fn drop(&mut self) {
        // `Shared::drop` drops from the published `head` at its place: publish both first.
        self.release();
        let at = self.place.block * self.slots + self.place.slot;
        self.shared.head_place.store(at, Ordering::Relaxed);
        self.shared.closed.store(true, Ordering::Release);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

impl<T> fmt::Debug for SlotProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotProducer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .field("abandoned", &self.is_abandoned())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for SlotConsumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotConsumer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .field("abandoned", &self.is_abandoned())
            .finish_non_exhaustive()
    }
}
