//! A bounded ring with one producer and several readers, each of which gets every value: the
//! LMAX disruptor's broadcast (Thompson, Farley, Barker, Gee and Stewart, "Disruptor: High
//! performance alternative to bounded queues for exchanging data between concurrent threads",
//! 2011), with `spsc`'s cached indices.
//!
//! The producer publishes one position, `tail`, for all readers; each reader has its own `head`
//! on cache lines of its own, and the producer gates on the slowest reader still there,
//! re-reading the readers' heads only when its cached minimum says the ring is full. Each reader
//! has its own array of slots: a value is cloned for every reader but the last, which gets it
//! moved, and each reader moves its values out as `spsc`'s consumer does. So no two threads
//! ever touch one value, and `T` needs only be `Send`.
//!
//! Writing and publishing are apart: [`BroadcastProducer::write`] fills the readers' slots of
//! the next position, [`BroadcastProducer::commit`] publishes everything written with one
//! Release store of `tail` (and rings the readers' doorbells). A producer that writes a run of
//! values one at a time and commits once moves the `tail` line to the readers once per run
//! instead of once per value: an implicit burst. Dropping the producer commits.
//!
//! A reader that is dropped marks itself closed and counts itself in `closed`; the producer
//! notices at its next [`BroadcastProducer::refresh_readers`] (and whenever it looks for room),
//! stops gating on that reader, drops the values it left unread and writes none for it again.
//!
//! # Contract
//! - Allocates in `new` only.
//! - `write`, `commit` and `pop_batch` are wait-free.
//! - A full ring (the slowest live reader is `capacity` positions behind what was written)
//!   refuses a `write`, handing the value back.
//! - Values written but not committed are not visible to readers; they count as used room.
//! - A `Clone` that panics in `write` abandons that position: the clones already made for it
//!   are dropped, the value unwinds with the panic, and nothing is written.

use std::fmt;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::spsc::Notify;
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// One reader's position, on cache lines of its own.
struct ReaderIndex {
    /// The next position this reader reads. Written only by the reader.
    head: AtomicUsize,
    /// Set by the reader when it is dropped, after its last store of `head`.
    closed: AtomicBool,
}

/// The shared part of a broadcast ring.
struct Shared<T> {
    /// Every position below it is written and published. Written only by the producer.
    /// Invariant: `head(r) <= tail <= min(head(r) of live r) + capacity`.
    tail: CachePadded<AtomicUsize>,
    readers: Box<[CachePadded<ReaderIndex>]>,
    /// Readers dropped so far: one load tells the producer whether any went.
    closed: CachePadded<AtomicUsize>,
    /// Set when the producer is dropped.
    producer_gone: CachePadded<AtomicBool>,
    /// Per reader: the producer dropped what the (closed) reader left and writes nothing more
    /// for it. Written only by the producer.
    settled: Box<[AtomicBool]>,
    /// `capacity` slots per reader: reader `r`'s slot of position `p` is at
    /// `r * capacity + (p & mask)`. Reader `r`'s slots of `[head(r), tail)` hold initialised
    /// values while it is not settled; the others do not.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    capacity: usize,
}

// SAFETY: `Shared` is reachable only through one `BroadcastProducer` and the readers. A slot
// is written only by the producer while its position is outside its reader's `[head, tail)`
// and moved out only by that reader while inside; the Release/Acquire pairs on `tail` and on
// each `head` order those accesses, and no two readers share a slot. Values of `T` move from
// the producer's thread to one reader's, which needs `T: Send` only.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above: no slot is accessed by two threads at once.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn slot(&self, reader: usize, position: usize) -> &UnsafeCell<MaybeUninit<T>> {
        &self.slots[reader * self.capacity + (position & (self.capacity - 1))]
    }

    /// Drops reader `reader`'s values of positions `[from, to)`.
    ///
    /// # Safety
    /// Those slots hold initialised values that nobody reads or drops again.
    unsafe fn drop_values(&self, reader: usize, from: usize, to: usize) {
        let mut p = from;
        while p != to {
            // SAFETY: the caller's contract; each position is dropped once.
            self.slot(reader, p)
                .with_mut(|s| unsafe { (*s).assume_init_drop() });
            p = p.wrapping_add(1);
        }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Everyone is gone: what is still in a reader's `[head, tail)` was never read, unless
        // the producer settled that reader (it dropped those values then).
        let tail = self.tail.load(Ordering::Acquire);
        for r in 0..self.readers.len() {
            if self.settled[r].load(Ordering::Acquire) {
                continue;
            }
            let head = self.readers[r].head.load(Ordering::Acquire);
            // SAFETY: reader `r` is not settled, so its slots of `[head, tail)` are
            // initialised (the producer commits what it wrote when it is dropped), and nobody
            // else is left to read them.
            unsafe { self.drop_values(r, head, tail) };
        }
    }
}

/// Makes broadcast rings: see [`Broadcast::new`].
///
/// ```
/// use llbus::Broadcast;
///
/// let (mut tx, mut readers) = Broadcast::<u64>::new(4, 2);
/// tx.write(1).unwrap();
/// tx.write(2).unwrap();
/// assert_eq!(readers[0].try_pop(), None); // written, not yet committed
/// tx.commit();
/// for rx in &mut readers {
///     let mut got = Vec::new();
///     rx.pop_batch(8, |v| got.push(v));
///     assert_eq!(got, [1, 2]);
/// }
/// ```
#[derive(Debug)]
pub struct Broadcast<T>(std::marker::PhantomData<T>);

impl<T> Broadcast<T> {
    /// A ring of `capacity` positions (rounded up to a power of two, at least 1) read by
    /// `readers` readers (at least 1). Allocates `capacity * readers` slots, here and only here.
    ///
    /// # Panics
    /// If `capacity * readers` slots overflow `usize`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize, readers: usize) -> (BroadcastProducer<T>, Vec<BroadcastReader<T>>) {
        let capacity = capacity.max(1).next_power_of_two();
        let readers = readers.max(1);
        let total = capacity
            .checked_mul(readers)
            .unwrap_or_else(|| panic!("a broadcast ring of {capacity} x {readers} slots"));
        let shared = Arc::new(Shared {
            tail: CachePadded::new(AtomicUsize::new(0)),
            readers: (0..readers)
                .map(|_| {
                    CachePadded::new(ReaderIndex {
                        head: AtomicUsize::new(0),
                        closed: AtomicBool::new(false),
                    })
                })
                .collect(),
            closed: CachePadded::new(AtomicUsize::new(0)),
            producer_gone: CachePadded::new(AtomicBool::new(false)),
            settled: (0..readers).map(|_| AtomicBool::new(false)).collect(),
            slots: (0..total)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            capacity,
        });
        let producer = BroadcastProducer {
            shared: Arc::clone(&shared),
            mask: capacity - 1,
            written: 0,
            committed: 0,
            head_cache: 0,
            live: (0..readers).map(|_| CachePadded::new(true)).collect(),
            live_count: readers,
            closed_seen: 0,
            notify: Vec::new(),
        };
        let readers = (0..readers)
            .map(|index| BroadcastReader {
                shared: Arc::clone(&shared),
                index,
                mask: capacity - 1,
                head: 0,
                tail_cache: std::cell::Cell::new(0),
                notify: None,
            })
            .collect();
        (producer, readers)
    }
}

/// The copies of one position written so far, for the live readers below `readers`: dropped
/// if a `Clone` unwinds before the position is complete (the write is then abandoned, and the
/// slots are uninitialised again). Forgotten once the position is written.
struct Written<'a, T> {
    shared: &'a Shared<T>,
    live: &'a [CachePadded<bool>],
    position: usize,
    readers: usize,
}

impl<T> Drop for Written<'_, T> {
    #[cold]
    fn drop(&mut self) {
        for r in (0..self.readers).filter(|&r| *self.live[r]) {
            // SAFETY: `write` wrote reader `r`'s slot of `position` (a live reader below
            // `readers`) and has not published it: nobody else reads or drops it.
            unsafe {
                self.shared
                    .drop_values(r, self.position, self.position.wrapping_add(1))
            };
        }
    }
}

/// The writing half of a [`Broadcast`] ring. `Send`, not `Clone`.
// NB: aligned to a line pair so that whatever holds it puts nothing another thread writes
// beside the fields every write reads.
#[repr(align(128))]
pub struct BroadcastProducer<T> {
    shared: Arc<Shared<T>>,
    mask: usize,
    /// Positions written so far. Invariant: `committed <= written`.
    written: usize,
    /// The last `tail` stored.
    committed: usize,
    /// The smallest `head` of a live reader this side last read. Invariant: at most every live
    /// reader's `head`.
    head_cache: usize,
    /// The readers not settled.
    /// Padded: read on every write, it must not share a line with what a reader writes.
    live: Box<[CachePadded<bool>]>,
    live_count: usize,
    /// Closed readers this side has settled (compared with `Shared::closed`).
    closed_seen: usize,
    /// Rung after each commit: the readers' doorbells, each once.
    notify: Vec<std::sync::Arc<dyn Notify>>,
}

impl<T> BroadcastProducer<T> {
    /// Writes `value` for every live reader (a clone each, the last one moved) at the next
    /// position, unpublished until [`commit`](Self::commit); hands it back when the ring is
    /// full. With no live reader left the value is dropped. Wait-free; allocates nothing.
    ///
    /// # Errors
    /// The value, when the slowest live reader has not freed room for it.
    #[inline]
    pub fn write(&mut self, value: T) -> Result<(), T>
    where
        T: Clone,
    {
        if self.free_for(1) == 0 {
            return Err(value);
        }
        let position = self.written;
        let shared: &Shared<T> = &self.shared;
        let Some(last) = self.live.iter().rposition(|l| **l) else {
            return Ok(());
        };
        let write_copy = |r: usize| {
            let copy = value.clone();
            // SAFETY: `free_for` found `position` below every live reader's `head + capacity`
            // and it is at or past `tail`, so reader `r`'s slot is outside its `[head, tail)`:
            // uninitialised, and not read until a commit publishes it.
            shared
                .slot(r, position)
                .with_mut(|s| unsafe { (*s).write(copy) });
        };
        let others = self.live[..last]
            .iter()
            .enumerate()
            .filter(|(_, l)| ***l)
            .map(|(r, _)| r);
        if std::mem::needs_drop::<T>() {
            // Should a clone panic, the guard drops the copies already written at `position`.
            let mut guard = Written {
                shared,
                live: &self.live,
                position,
                readers: 0,
            };
            for r in others {
                write_copy(r);
                guard.readers = r + 1;
            }
            std::mem::forget(guard);
        } else {
            // NB: without drop glue a copy an unwinding clone leaves behind owns nothing, so no
            // guard: one slows the bus's fan-out to three (docs/PERFORMANCE.md, "A clone that
            // panics mid-write").
            others.for_each(write_copy);
        }
        // SAFETY: as above, for the last live reader.
        shared
            .slot(last, position)
            .with_mut(|s| unsafe { (*s).write(value) });
        self.written = position.wrapping_add(1);
        Ok(())
    }

    /// Publishes everything written with one Release store of `tail`, and rings every reader's
    /// doorbell; does nothing when nothing new was written.
    #[inline]
    pub fn commit(&mut self) {
        if self.written != self.committed {
            self.committed = self.written;
            self.shared.tail.store(self.written, Ordering::Release);
            for n in &self.notify {
                n.notify();
            }
        }
    }

    /// True when values are written but not yet committed.
    pub fn has_uncommitted(&self) -> bool {
        self.written != self.committed
    }

    /// How many values can be written now: at most the true free room.
    pub fn slots(&mut self) -> usize {
        self.free_for(1)
    }

    /// Free positions, re-reading the readers' heads (and settling readers that went) whenever
    /// the cached minimum shows fewer than `wanted`.
    #[inline(always)]
    pub(crate) fn free_for(&mut self, wanted: usize) -> usize {
        let capacity = self.mask + 1;
        let used = self.written.wrapping_sub(self.head_cache);
        if capacity - used >= wanted {
            return capacity - used;
        }
        self.refresh_readers();
        let mut min = self.written;
        for (r, index) in self.shared.readers.iter().enumerate() {
            if *self.live[r] {
                let head = index.head.load(Ordering::Acquire);
                if self.written.wrapping_sub(head) > self.written.wrapping_sub(min) {
                    min = head;
                }
            }
        }
        self.head_cache = min;
        capacity - self.written.wrapping_sub(min)
    }

    /// True if a reader went since this side last settled the readers: then
    /// [`refresh_readers`](Self::refresh_readers) settles it. One load of a line that changes
    /// only when a reader goes.
    #[inline(always)]
    pub fn readers_changed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed) != self.closed_seen
    }

    /// Settles every reader that went: stops gating on it, drops what it left unread (with
    /// what this side wrote for it since) and writes nothing more for it.
    #[cold]
    pub fn refresh_readers(&mut self) {
        let closed = self.shared.closed.load(Ordering::Acquire);
        if closed == self.closed_seen {
            return;
        }
        self.closed_seen = closed;
        for r in 0..self.live.len() {
            if !*self.live[r] || !self.shared.readers[r].closed.load(Ordering::Acquire) {
                continue;
            }
            let head = self.shared.readers[r].head.load(Ordering::Acquire);
            *self.live[r] = false;
            self.live_count -= 1;
            // SAFETY: reader `r` is closed (Acquire: its last store of `head` and its last
            // read came before), so its slots of `[head, written)` hold what this side wrote
            // for it and nobody reads them; `settled` keeps `Shared::drop` off them.
            unsafe { self.shared.drop_values(r, head, self.written) };
            self.shared.settled[r].store(true, Ordering::Release);
        }
    }

    /// True if reader `reader` is still there, as of the last settling.
    #[inline(always)]
    pub fn is_live(&self, reader: usize) -> bool {
        self.live.get(reader).is_some_and(|l| **l)
    }

    /// True once every reader is gone (as of the last settling).
    pub fn is_abandoned(&self) -> bool {
        self.live_count == 0
    }

    /// The ring's capacity in positions (a power of two).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How many readers the ring was made with.
    pub fn readers(&self) -> usize {
        self.live.len()
    }

    /// Rings each of `notify` after every commit (and when this side is dropped), so readers
    /// that sleep while the ring is empty can be woken. Give each doorbell once.
    pub fn notify_on_commit(&mut self, notify: Vec<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }
}

impl<T> Drop for BroadcastProducer<T> {
    fn drop(&mut self) {
        // What was written stays readable, as a committed value of `spsc` does.
        self.commit();
        self.shared.producer_gone.store(true, Ordering::Release);
        for n in &self.notify {
            n.notify();
        }
    }
}

/// One reading half of a [`Broadcast`] ring. `Send`, not `Clone`.
// NB: aligned to a line pair so that the `head` and `tail_cache` every batch writes share no
// line with what the producer reads.
#[repr(align(128))]
pub struct BroadcastReader<T> {
    shared: Arc<Shared<T>>,
    index: usize,
    mask: usize,
    /// This reader's position; equal to its shared `head` after every operation.
    head: usize,
    /// The last `tail` this side read. Invariant: `tail_cache <= shared.tail`.
    tail_cache: std::cell::Cell<usize>,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

impl<T> BroadcastReader<T> {
    /// Pops up to `max` values, handing each to `f` in order, and frees their slots with one
    /// Release store of this reader's `head` (and its doorbell). Returns how many were popped.
    ///
    /// If `f` panics, the values already handed to it (including the one it panicked on)
    /// count as popped; the rest stay in the ring.
    pub fn pop_batch<F: FnMut(T)>(&mut self, max: usize, mut f: F) -> usize {
        /// Frees what was read, with one store of the reader's `head`, normally or while `f`
        /// unwinds.
        struct Free<'a> {
            head: &'a mut usize,
            index: &'a AtomicUsize,
            notify: &'a Option<std::sync::Arc<dyn Notify>>,
            count: usize,
        }
        impl Drop for Free<'_> {
            fn drop(&mut self) {
                if self.count > 0 {
                    *self.head = self.head.wrapping_add(self.count);
                    self.index.store(*self.head, Ordering::Release);
                    if let Some(n) = self.notify {
                        n.notify();
                    }
                }
            }
        }
        let n = self.available_for(max).min(max);
        let (head, reader) = (self.head, self.index);
        let shared: &Shared<T> = &self.shared;
        let mut free = Free {
            head: &mut self.head,
            index: &shared.readers[reader].head,
            notify: &self.notify,
            count: 0,
        };
        for i in 0..n {
            // SAFETY: the position is in `[head, tail)`: the producer initialised this
            // reader's slot before its Release store of `tail`, which `available_for` read
            // with Acquire. `free` counts it before `f` runs, so it is freed (never read
            // again) even if `f` panics: each value is moved out once.
            let value = shared
                .slot(reader, head.wrapping_add(i))
                .with(|s| unsafe { (*s).assume_init_read() });
            free.count += 1;
            f(value);
        }
        n
    }

    /// Pops the oldest value, or `None` when there is none. Wait-free.
    pub fn try_pop(&mut self) -> Option<T> {
        let mut got = None;
        self.pop_batch(1, |v| got = Some(v));
        got
    }

    /// How many values are there for this reader now.
    pub fn len(&self) -> usize {
        self.shared
            .tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// True if there is nothing for this reader now.
    pub fn is_empty(&self) -> bool {
        self.available_for(1) == 0
    }

    /// Values known to be ready without reading the producer's index: a lower bound on `len`.
    #[inline(always)]
    pub fn cached_len(&self) -> usize {
        self.tail_cache.get().wrapping_sub(self.head)
    }

    /// True once the producer has been dropped. What it wrote before is still readable: the
    /// ring is finished when it is abandoned *and* empty (check in that order).
    pub fn is_abandoned(&self) -> bool {
        self.shared.producer_gone.load(Ordering::Acquire)
    }

    /// The ring's capacity in positions.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Rings `notify` after every pop (and when this reader is dropped), so a producer that
    /// sleeps while the ring is full can be woken. `None` detaches it.
    pub fn notify_on_pop(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// Values ready, refreshing the cached `tail` only when the cache shows fewer than `wanted`.
    #[inline(always)]
    fn available_for(&self, wanted: usize) -> usize {
        let cached = self.tail_cache.get().wrapping_sub(self.head);
        if cached >= wanted {
            return cached;
        }
        let tail = self.shared.tail.load(Ordering::Acquire);
        self.tail_cache.set(tail);
        tail.wrapping_sub(self.head)
    }
}

impl<T> Drop for BroadcastReader<T> {
    fn drop(&mut self) {
        // `head` is stored after every batch, so the producer will find the final one.
        let index = &self.shared.readers[self.index];
        index.closed.store(true, Ordering::Release);
        self.shared.closed.fetch_add(1, Ordering::AcqRel);
        if let Some(n) = &self.notify {
            n.notify();
        }
    }
}

impl<T> fmt::Debug for BroadcastProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BroadcastProducer")
            .field("capacity", &self.capacity())
            .field("readers", &self.live_count)
            .field("written", &self.written)
            .field("committed", &self.committed)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for BroadcastReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BroadcastReader")
            .field("reader", &self.index)
            .field("head", &self.head)
            .field("abandoned", &self.is_abandoned())
            .finish_non_exhaustive()
    }
}

// `BroadcastProducer` and `BroadcastReader` are `Send` when `T: Send`: an `Arc<Shared<T>>`
// (Send + Sync by the impls above), integers, a boxed slice of `bool`, a `Cell` and `Arc<dyn
// Notify>`s. The reader is not `Sync` (the `Cell`).

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    fn drain<T>(rx: &mut BroadcastReader<T>) -> Vec<T> {
        let mut got = Vec::new();
        rx.pop_batch(usize::MAX, |v| got.push(v));
        got
    }

    #[test]
    fn every_reader_gets_every_value_once_committed() {
        let (mut tx, mut rxs) = Broadcast::new(8, 3);
        for v in 0..5u64 {
            tx.write(v).expect("room");
        }
        assert!(rxs.iter().all(|rx| rx.is_empty()), "not committed yet");
        tx.commit();
        assert!(!tx.has_uncommitted());
        for rx in &mut rxs {
            assert_eq!(rx.len(), 5);
            assert_eq!(drain(rx), [0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn the_slowest_reader_gates_the_producer() {
        let (mut tx, mut rxs) = Broadcast::new(4, 2);
        for v in 0..4u64 {
            tx.write(v).expect("room");
        }
        tx.commit();
        assert_eq!(drain(&mut rxs[0]), [0, 1, 2, 3]);
        assert_eq!(tx.write(4), Err(4), "reader 1 has read nothing");
        assert_eq!(rxs[1].try_pop(), Some(0));
        assert_eq!(tx.write(4), Ok(()));
        assert_eq!(tx.write(5), Err(5));
        tx.commit();
        assert_eq!(drain(&mut rxs[1]), [1, 2, 3, 4]);
        assert_eq!(drain(&mut rxs[0]), [4]);
    }

    #[test]
    fn a_reader_that_goes_stops_gating_and_the_last_one_abandons() {
        let (mut tx, mut rxs) = Broadcast::new(2, 2);
        let slow = rxs.pop().expect("two readers");
        tx.write(1u64).expect("room");
        tx.write(2).expect("room");
        tx.commit();
        assert_eq!(tx.write(3), Err(3));
        assert!(!tx.readers_changed());
        drop(slow);
        assert!(tx.readers_changed());
        assert_eq!(drain(&mut rxs[0]), [1, 2]);
        // Looking for room settles the reader that went.
        assert_eq!(tx.write(3), Ok(()));
        assert!(!tx.is_live(1) && tx.is_live(0) && !tx.is_abandoned());
        tx.commit();
        assert_eq!(drain(&mut rxs[0]), [3]);
        drop(rxs);
        tx.refresh_readers();
        assert!(tx.is_abandoned());
        assert_eq!(tx.write(4), Ok(()), "dropped: nobody reads");
    }

    /// Counts its drops.
    #[derive(Debug)]
    struct Counted(Arc<StdAtomicUsize>);

    impl Clone for Counted {
        fn clone(&self) -> Self {
            Counted(Arc::clone(&self.0))
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Every copy is dropped exactly once: read ones by their reader, ones a settled reader
    /// left by the producer, ones still in the ring (committed or not) when everyone is gone.
    #[test]
    fn every_copy_is_dropped_once() {
        let drops = Arc::new(StdAtomicUsize::new(0));
        let dropped = || drops.load(std::sync::atomic::Ordering::Relaxed);
        let (mut tx, mut rxs) = Broadcast::new(8, 3);
        for _ in 0..3 {
            tx.write(Counted(Arc::clone(&drops))).expect("room");
        }
        tx.commit();
        assert_eq!(
            dropped(),
            0,
            "one clone each for two readers, the value moved to the third"
        );
        drop(drain(&mut rxs[0]));
        assert_eq!(dropped(), 3);
        assert_eq!(rxs[1].try_pop().map(drop), Some(()));
        assert_eq!(dropped(), 4);
        // Reader 1 goes with two unread; the producer settles it when it next looks.
        let gone = rxs.remove(1);
        drop(gone);
        tx.refresh_readers();
        assert_eq!(dropped(), 6);
        // Two more, the second left uncommitted: both readers left have them all.
        tx.write(Counted(Arc::clone(&drops))).expect("room");
        tx.commit();
        tx.write(Counted(Arc::clone(&drops))).expect("room");
        assert_eq!(dropped(), 6);
        drop(tx);
        // Reader 0 (now rxs[0]) holds 2, reader 2 (rxs[1]) holds 3 + 2.
        assert_eq!(rxs[0].len(), 2);
        assert_eq!(rxs[1].len(), 5);
        drop(rxs);
        assert_eq!(dropped(), 6 + 2 + 5);
    }

    /// Panics on its `fuse`-th clone (counting clones of every copy); counts its drops.
    #[derive(Debug)]
    struct Brittle {
        drops: Arc<StdAtomicUsize>,
        clones: Arc<StdAtomicUsize>,
        fuse: usize,
    }

    impl Clone for Brittle {
        fn clone(&self) -> Self {
            let n = self
                .clones
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            assert_ne!(n, self.fuse, "clone {n} breaks");
            Brittle {
                drops: Arc::clone(&self.drops),
                clones: Arc::clone(&self.clones),
                fuse: self.fuse,
            }
        }
    }

    impl Drop for Brittle {
        fn drop(&mut self) {
            self.drops
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A clone that panics partway through a position (the third reader's copy, after two
    /// were written) abandons the position: the two copies and the value are dropped, nothing
    /// is written, and the ring goes on at that position.
    #[test]
    fn a_clone_that_panics_mid_write_drops_the_copies_already_written() {
        let drops = Arc::new(StdAtomicUsize::new(0));
        let clones = Arc::new(StdAtomicUsize::new(0));
        let dropped = || drops.load(std::sync::atomic::Ordering::Relaxed);
        let (mut tx, mut rxs) = Broadcast::new(4, 4);
        let value = Brittle {
            drops: Arc::clone(&drops),
            clones: Arc::clone(&clones),
            fuse: 3,
        };
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.write(value)));
        assert!(unwound.is_err(), "the third clone panics");
        assert_eq!(dropped(), 3, "two copies written, and the value itself");
        assert!(!tx.has_uncommitted(), "the position was abandoned");
        tx.commit();
        assert!(rxs.iter().all(|rx| rx.is_empty()));
        // The next write takes that position, and every reader gets it.
        let value = Brittle {
            drops: Arc::clone(&drops),
            clones: Arc::clone(&clones),
            fuse: 0,
        };
        tx.write(value).map_err(drop).expect("room");
        tx.commit();
        for rx in &mut rxs {
            assert_eq!(drain(rx).len(), 1);
        }
        assert_eq!(dropped(), 3 + 4, "every copy dropped once, nothing leaked");
        drop((tx, rxs));
        assert_eq!(dropped(), 7);
    }

    #[test]
    fn a_panic_in_a_batch_frees_what_was_handed_over() {
        let (mut tx, mut rxs) = Broadcast::new(8, 1);
        for v in 0..5u64 {
            tx.write(v).expect("room");
        }
        tx.commit();
        let rx = &mut rxs[0];
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rx.pop_batch(8, |v| assert_ne!(v, 2));
        }));
        assert!(unwound.is_err());
        assert_eq!(drain(rx), [3, 4]);
    }

    /// A producer writing runs of values to readers on two other threads: each reads every
    /// value in order.
    #[test]
    fn readers_on_other_threads_read_every_run_in_order() {
        let n: u64 = if cfg!(miri) { 200 } else { 20_000 };
        let (mut tx, rxs) = Broadcast::new(16, 2);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let readers: Vec<_> = rxs
            .into_iter()
            .map(|mut rx| {
                std::thread::spawn(move || {
                    let mut next = 0u64;
                    while next < n && std::time::Instant::now() < deadline {
                        let got = rx.pop_batch(7, |v| {
                            assert_eq!(v, next);
                            next += 1;
                        });
                        if got == 0 {
                            std::thread::yield_now();
                        }
                    }
                    next
                })
            })
            .collect();
        let mut v = 0u64;
        while v < n && std::time::Instant::now() < deadline {
            // Runs of up to 5, committed once each.
            for _ in 0..5 {
                if v == n || tx.write(v).is_err() {
                    break;
                }
                v += 1;
            }
            tx.commit();
            std::thread::yield_now();
        }
        for r in readers {
            assert_eq!(r.join().expect("reader"), n);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::thread;

    /// Pops what is there, up to `tries` times (no spinning: the state space stays small).
    fn pop_some(rx: &mut BroadcastReader<usize>, tries: usize, got: &mut Vec<usize>) {
        for _ in 0..tries {
            rx.pop_batch(8, |v| got.push(v));
            thread::yield_now();
        }
    }

    /// Writes `v` if there is room within `tries` attempts, committing after it. Returns
    /// whether it went in.
    fn write_some(tx: &mut BroadcastProducer<usize>, v: usize, tries: usize) -> bool {
        for _ in 0..tries {
            if tx.write(v).is_ok() {
                tx.commit();
                return true;
            }
            thread::yield_now();
        }
        false
    }

    /// A ring of 2, two readers on their own threads, a run of two values committed once and
    /// a third that reuses the first slot only once both readers freed it: each reader reads
    /// its values in order, and loom checks that no slot is written while a reader reads it.
    #[test]
    fn loom_two_readers_and_a_slot_reused_behind_them() {
        loom::model(|| {
            let (mut tx, rxs) = Broadcast::new(2, 2);
            let readers: Vec<_> = rxs
                .into_iter()
                .map(|mut rx| {
                    thread::spawn(move || {
                        let mut got = Vec::new();
                        pop_some(&mut rx, 2, &mut got);
                        (rx, got)
                    })
                })
                .collect();
            tx.write(0).unwrap();
            tx.write(1).unwrap();
            tx.commit();
            let third = write_some(&mut tx, 2, 2);
            for r in readers {
                let (mut rx, mut got) = r.join().unwrap();
                // What the thread did not take is all there now.
                rx.pop_batch(8, |v| got.push(v));
                let want: &[usize] = if third { &[0, 1, 2] } else { &[0, 1] };
                assert_eq!(got, want);
            }
        });
    }

    /// A reader that goes while the producer writes into a full ring: the producer settles it
    /// (dropping what it left, which loom checks against the reader's last reads) and the
    /// reader that stays gets every value in order.
    #[test]
    fn loom_a_reader_goes_while_the_producer_writes() {
        loom::model(|| {
            let (mut tx, mut rxs) = Broadcast::new(2, 2);
            let mut leaving = rxs.pop().unwrap();
            let mut stays = rxs.pop().unwrap();
            tx.write(0).unwrap();
            tx.write(1).unwrap();
            tx.commit();
            let leaver = thread::spawn(move || {
                let _ = leaving.try_pop();
                drop(leaving);
            });
            let producer = thread::spawn(move || {
                let third = write_some(&mut tx, 2, 2);
                (tx, third)
            });
            let mut got = Vec::new();
            pop_some(&mut stays, 1, &mut got);
            leaver.join().unwrap();
            let (mut tx, third) = producer.join().unwrap();
            stays.pop_batch(8, |v| got.push(v));
            if !third {
                tx.write(2).expect("the reader that went no longer gates");
                tx.commit();
                stays.pop_batch(8, |v| got.push(v));
            } else if got.len() < 3 {
                stays.pop_batch(8, |v| got.push(v));
            }
            assert_eq!(got, [0, 1, 2]);
            // The producer settles a reader that went when it next looks.
            tx.refresh_readers();
            assert!(!tx.is_live(1) && tx.is_live(0));
        });
    }
}
