//! A bounded SPSC ring whose hop moves one cache line: each slot carries its own sequence.
//!
//! The algorithm is [`spsc`](super::spsc)'s (a power-of-two slot array, a private cached copy of
//! the consumer's index on the producer's side, lazy frees after MCRingBuffer) with the
//! producer's shared index replaced by a sequence number in each slot, as the LMAX disruptor's
//! sequence per entry (Thompson et al., "Disruptor: High performance alternative to bounded
//! queues for exchanging data between concurrent threads", 2011) and FastForward's empty-slot
//! marker (Giacomoni, Moseley and Vachharajani, PPoPP 2008) have it. The producer writes a value
//! into the slot of position `p`, then stores `p + 1` into that slot's sequence (`Release`); the
//! consumer at position `p` waits for the slot's sequence to read `p + 1` (`Acquire`), and never
//! reads a line the producer writes other than the slot it is about to take. A hand-off from one
//! thread to the other therefore moves one line, the slot's (value and sequence side by side),
//! where [`Ring`](super::Ring) moves two (the slot and `tail`).
//!
//! Free space travels as in `Ring`: the consumer stores its index `head` lazily (every
//! [`SlotConsumer::set_release_every`] values, when it finds the next slot not yet written, on
//! [`SlotConsumer::release`] and when dropped), and the producer re-reads `head` only when its
//! cached copy says the ring is full. A sequence left from the slot's previous lap reads
//! `p + 1 - capacity`, never `p + 1`, so a stale slot is never taken for a fresh one.
//!
//! The price: a slot is a `usize` bigger (for 8-byte values, four slots per line instead of
//! eight), a batch stores each slot's sequence instead of one index, and counting what is in
//! the ring from the consumer's side walks the slots ([`SlotConsumer::len`]).

use std::fmt;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// One slot: the value and the sequence that says which position last wrote it.
struct Slot<T> {
    /// `p + 1` once the producer has written the value of position `p` here (0: never written).
    /// Written only by the producer.
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// The shared part of a slotted ring, owned jointly by its two halves.
struct Shared<T> {
    /// The consumer's position as last published: every slot before it is free. Written only
    /// by the consumer. Invariant: `head <= (producer's position) <= head + capacity`.
    head: CachePadded<AtomicUsize>,
    /// Set by whichever half is dropped first.
    closed: CachePadded<AtomicBool>,
    /// The slots. The slot of position `p` holds an initialised value exactly when
    /// `head <= p` and its `seq` reads `p + 1`.
    slots: Box<[Slot<T>]>,
}

// SAFETY: `Shared` is reachable only through one `SlotProducer` and one `SlotConsumer`. A slot's
// value is written only by the producer while the slot is free (its position is below
// `head + capacity` and the consumer has moved past its previous value), and read only by the
// consumer after the slot's `seq` (Release/Acquire) says it was written; the consumer's
// Release store of `head` orders its read before the producer's next write. Values of `T` move
// from one thread to the other, which needs `T: Send`.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above: the two halves never access one slot's value at the same time.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// True if the slot of position `p` holds its value (`Acquire`: the value is visible).
    #[inline(always)]
    fn ready(&self, p: usize) -> bool {
        self.slots[p & self.mask()].seq.load(Ordering::Acquire) == p.wrapping_add(1)
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both halves are gone (the consumer published its position as it went): drop the
        // values from `head` on, exactly once. A panicking `Drop` leaves the rest leaked, not
        // dropped twice (each slot's sequence is cleared before its value is dropped).
        let mut p = self.head.load(Ordering::Relaxed);
        for _ in 0..self.slots.len() {
            if !self.ready(p) {
                break;
            }
            let slot = &self.slots[p & self.mask()];
            slot.seq.store(0, Ordering::Relaxed);
            // SAFETY: the slot of position `p >= head` reads `p + 1`: it holds the value of
            // position `p`, not yet taken; clearing `seq` first means it is dropped once.
            slot.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
            p = p.wrapping_add(1);
        }
    }
}

/// A bounded SPSC ring whose hop moves one cache line (see the module docs);
/// [`SlotRing::new`] makes one and hands out its two halves.
///
/// # Contract
/// As [`Ring`](super::Ring)'s: all memory is allocated in [`SlotRing::new`]; every operation is
/// wait-free; a full ring hands the value back; each half can tell when the other is gone;
/// values left in the ring are dropped exactly once, when the second half goes. It has no
/// doorbell (`Notify`) hook: for threads that spin.
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
pub struct SlotRing<T>(std::marker::PhantomData<T>);

impl<T> SlotRing<T> {
    /// Makes a ring of at least `capacity` slots (rounded up to a power of two) and returns its
    /// producer and consumer halves.
    ///
    /// # Panics
    /// If `capacity` is 0, or rounding it up to a power of two overflows `usize`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize) -> (SlotProducer<T>, SlotConsumer<T>) {
        assert!(capacity > 0, "ring capacity must be at least 1");
        let capacity = capacity
            .checked_next_power_of_two()
            .unwrap_or_else(|| panic!("ring capacity {capacity} is too large"));
        let slots = (0..capacity)
            .map(|_| Slot {
                seq: AtomicUsize::new(0),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicUsize::new(0)),
            closed: CachePadded::new(AtomicBool::new(false)),
            slots,
        });
        let producer = SlotProducer {
            shared: Arc::clone(&shared),
            mask: capacity - 1,
            tail: 0,
            head_cache: 0,
        };
        let consumer = SlotConsumer {
            shared,
            mask: capacity - 1,
            head: 0,
            published: 0,
            release_every: (capacity / 4).max(1),
        };
        (producer, consumer)
    }
}

/// The writing half of a [`SlotRing`]. `Send`, not `Clone`.
pub struct SlotProducer<T> {
    shared: Arc<Shared<T>>,
    mask: usize,
    /// The next position to write.
    tail: usize,
    /// The last `head` read. Invariant: `head_cache <= shared.head <= tail`.
    head_cache: usize,
}

/// The reading half of a [`SlotRing`]. `Send`, not `Clone`.
pub struct SlotConsumer<T> {
    shared: Arc<Shared<T>>,
    mask: usize,
    /// The next position to read.
    head: usize,
    /// The last `head` stored in `shared.head`. Invariant: `published <= head`.
    published: usize,
    release_every: usize,
}

impl<T> SlotProducer<T> {
    /// Pushes `value`, or hands it back in `Err` when the ring is full. Wait-free; allocates
    /// nothing.
    ///
    /// # Errors
    /// The value, when the ring is full.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), T> {
        if self.free_slots(1) == 0 {
            return Err(value);
        }
        self.write(value);
        Ok(())
    }

    /// Pushes clones of the items of `items` while there is room; returns how many. Each slot
    /// is published by its own sequence as it is written, so a `Clone` that panics leaves the
    /// clones made before it pushed.
    pub fn push_slice(&mut self, items: &[T]) -> usize
    where
        T: Clone,
    {
        let n = self.free_slots(items.len()).min(items.len());
        for item in &items[..n] {
            self.write(item.clone());
        }
        n
    }

    /// The ring's capacity in slots (a power of two).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How many values can be pushed now: at most the true free space (the consumer frees in
    /// groups).
    pub fn slots(&mut self) -> usize {
        self.free_slots(1)
    }

    /// True once the consumer has been dropped.
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Free slots, re-reading `head` only when the cached one shows fewer than `wanted`.
    #[inline(always)]
    fn free_slots(&mut self, wanted: usize) -> usize {
        let capacity = self.mask + 1;
        let used = self.tail.wrapping_sub(self.head_cache);
        if capacity - used >= wanted.max(1) {
            return capacity - used;
        }
        self.head_cache = self.shared.head.load(Ordering::Acquire);
        capacity - self.tail.wrapping_sub(self.head_cache)
    }

    /// Writes `value` into the slot of `tail`, which must be free, and publishes it.
    #[inline(always)]
    fn write(&mut self, value: T) {
        debug_assert!(self.tail.wrapping_sub(self.head_cache) < self.capacity());
        let slot = &self.shared.slots[self.tail & self.mask];
        // SAFETY: `tail < head + capacity` (checked by the caller against a `head` read with
        // Acquire, after the consumer's Release store that moved past this slot's previous
        // value), so the consumer no longer reads this slot and will not until its sequence
        // reads `tail + 1`. Only this producer writes slots.
        slot.value.with_mut(|v| unsafe { (*v).write(value) });
        self.tail = self.tail.wrapping_add(1);
        slot.seq.store(self.tail, Ordering::Release);
    }
}

impl<T> SlotConsumer<T> {
    /// Pops the oldest value, or returns `None` when the ring is empty. Wait-free.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let mut got = None;
        self.pop_batch(1, |v| got = Some(v));
        got
    }

    /// Pops up to `max` values, handing each to `f` in order; returns how many. Frees their
    /// slots with at most one store of `head`.
    ///
    /// If `f` panics, the values already handed to it (including the one it panicked on) count
    /// as popped; the rest stay in the ring.
    pub fn pop_batch<F: FnMut(T)>(&mut self, max: usize, mut f: F) -> usize {
        struct Advance<'a, T> {
            consumer: &'a mut SlotConsumer<T>,
            count: usize,
            drained: bool,
        }
        impl<T> Drop for Advance<'_, T> {
            #[inline(always)]
            fn drop(&mut self) {
                let c = &mut *self.consumer;
                c.head = c.head.wrapping_add(self.count);
                // Drained: the producer may be about to wait for room, so free at once.
                if (self.drained && c.head != c.published)
                    || c.head.wrapping_sub(c.published) >= c.release_every
                {
                    c.release();
                }
            }
        }
        let mut advance = Advance {
            consumer: self,
            count: 0,
            drained: false,
        };
        while advance.count < max {
            let c = &*advance.consumer;
            let p = c.head.wrapping_add(advance.count);
            if !c.shared.ready(p) {
                advance.drained = true;
                break;
            }
            let slot = &c.shared.slots[p & c.mask];
            // SAFETY: the slot's sequence read `p + 1` with Acquire after the producer's
            // Release store, so it holds the initialised value of position `p`, which only
            // this consumer takes; `advance` counts it before `f` runs, so `head` moves past
            // it even if `f` panics, and it is never read again.
            let value = slot.value.with(|v| unsafe { (*v).assume_init_read() });
            advance.count += 1;
            f(value);
        }
        advance.count
    }

    /// The ring's capacity in slots (a power of two).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How many values are in the ring now (walks the written slots from `head`).
    pub fn len(&self) -> usize {
        (0..self.capacity())
            .take_while(|&i| self.shared.ready(self.head.wrapping_add(i)))
            .count()
    }

    /// True if the ring is empty now.
    pub fn is_empty(&self) -> bool {
        !self.shared.ready(self.head)
    }

    /// True once the producer has been dropped. Values it pushed before may still be waiting.
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Frees every slot this side has read (one Release store of `head`).
    #[inline]
    pub fn release(&mut self) {
        if self.published != self.head {
            self.published = self.head;
            self.shared.head.store(self.head, Ordering::Release);
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
}

impl<T> Drop for SlotProducer<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

impl<T> Drop for SlotConsumer<T> {
    fn drop(&mut self) {
        // `Shared::drop` drops from the published `head`: publish what was taken first.
        self.release();
        self.shared.closed.store(true, Ordering::Release);
    }
}

impl<T> fmt::Debug for SlotProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotProducer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for SlotConsumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotConsumer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}
