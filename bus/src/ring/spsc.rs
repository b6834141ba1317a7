//! The bounded single-producer single-consumer ring.
//!
//! The algorithm is Lamport's circular buffer with the refinements of rigtorp's `SPSCQueue` and
//! `rtrb`: a power-of-two slot array allocated once, two monotonically increasing indices
//! (`tail`, written only by the producer; `head`, written only by the consumer) on cache lines of
//! their own (`CachePadded`: 128 bytes on x86-64, where the spatial prefetcher pulls line pairs),
//! and on each side a private cached copy of the other side's index, refreshed only when the
//! cached value says the ring is full (producer) or empty (consumer). In the common case a push
//! or a pop therefore touches one slot and its own index, and no line the other side writes.
//!
//! A push writes the slot, then publishes it with a `Release` store of `tail`; a pop reads `tail`
//! with `Acquire`, reads the slot, then frees it with a `Release` store of `head`. Batch
//! operations move many items under one store.
//!
//! The consumer frees lazily, as MCRingBuffer does (Lee, Bu and Chandranmenon, "A Lock-Free,
//! Cache-Efficient Multi-Core Synchronization Mechanism for Line-Rate Network Traffic
//! Monitoring", IPDPS 2010): it stores `head` once it has taken a quarter of the ring since its
//! last store ([`Consumer::set_release_every`]), when it has taken every value it knew of, when
//! asked ([`Consumer::release`]) and when it is dropped. While a stream keeps the ring full the
//! producer then re-reads `head` once per quarter ring instead of once per pop, and writes into
//! slots the consumer left long ago rather than the ones it is reading; the README's Performance
//! section has what that is worth (the `ring` suite of `benches`). The price: the producer may see up to `release_every - 1` fewer free
//! slots than there are, only while the consumer is still taking values.

use std::fmt;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// Something a ring half calls after it publishes (producer) or frees (consumer) slots, so that a
/// thread sleeping on the other side can be woken. See `Doorbell` in the wait layer.
///
/// `notify` runs on the hot path of every push or pop it is attached to: it must be cheap when
/// nobody sleeps (a fence and a load), and make a system call only when somebody does.
pub trait Notify: Send + Sync {
    /// Called after each push or batch (on a producer) or each pop or batch (on a consumer).
    fn notify(&self);
}

/// The shared part of a ring, owned jointly by its two halves.
struct Shared<T> {
    /// The consumer's position: the next slot to read. Written only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// The producer's position: the next slot to write. Written only by the producer.
    /// Invariant: `head <= tail <= head + capacity` (in wrapping arithmetic).
    tail: CachePadded<AtomicUsize>,
    /// Set by whichever half is dropped first, so the other can tell it is alone.
    closed: CachePadded<AtomicBool>,
    /// The slots. Slots in `[head, tail)` (masked) hold initialised values; the rest do not.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: `Shared` is only reachable through one `Producer` and one `Consumer`. A slot is
// written only by the producer while it is outside `[head, tail)` and read only by the consumer
// while it is inside; the Release/Acquire pairs on `tail` and `head` order those accesses. Values
// of `T` move from one thread to the other, which needs `T: Send` and nothing more.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above: the two halves never access the same slot at the same time.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both halves are gone, so nobody else touches the ring: drop what is still in it,
        // exactly once. If one value's `Drop` panics, `rest` drops the others while unwinding.
        struct DropRest<'a, T> {
            shared: &'a Shared<T>,
            next: usize,
            end: usize,
        }
        impl<T> Drop for DropRest<'_, T> {
            fn drop(&mut self) {
                let mask = self.shared.mask();
                while self.next != self.end {
                    let slot = &self.shared.slots[self.next & mask];
                    self.next = self.next.wrapping_add(1);
                    // SAFETY: slots in `[head, tail)` hold initialised values (the invariant on
                    // `tail`), each visited once because `next` advances before the drop runs.
                    slot.with_mut(|p| unsafe { (*p).assume_init_drop() });
                }
            }
        }
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        let mut rest = DropRest {
            shared: self,
            next: head,
            end: tail,
        };
        let mask = rest.shared.mask();
        while rest.next != rest.end {
            let slot = &rest.shared.slots[rest.next & mask];
            rest.next = rest.next.wrapping_add(1);
            // SAFETY: as in `DropRest::drop`: `[head, tail)` holds initialised values, each
            // visited once. A panic here unwinds through `rest`, which drops the others.
            slot.with_mut(|p| unsafe { (*p).assume_init_drop() });
        }
    }
}

/// A bounded SPSC ring queue; [`Ring::new`] makes one and hands out its two halves.
///
/// # Contract
/// - All memory is allocated in [`Ring::new`]; no operation allocates afterwards.
/// - Every operation is wait-free: `try_push`, `try_pop` and the batch operations finish in a
///   bounded number of steps whatever the other side does. Blocking `push`/`pop` wait with an
///   idle strategy of your choice (see the `IdleStrategy` trait).
/// - When the ring is full, `try_push` hands the value back ([`TryPushError::Full`]).
/// - When one half is dropped the other can tell ([`Producer::is_abandoned`]); values left in the
///   ring are dropped exactly once, when the second half goes.
///
/// ```
/// use llbus::Ring;
///
/// let (mut tx, mut rx) = Ring::new(4);
/// tx.try_push(1).unwrap();
/// assert_eq!(tx.push_slice(&[2, 3, 4, 5]), 3); // only three more fit
/// assert_eq!(rx.try_pop(), Some(1));
/// let mut got = Vec::new();
/// rx.pop_batch(8, |v| got.push(v));
/// assert_eq!(got, [2, 3, 4]);
/// ```
#[derive(Debug)]
pub struct Ring<T>(std::marker::PhantomData<T>);

impl<T> Ring<T> {
    /// Makes a ring of at least `capacity` slots (rounded up to a power of two) and returns its
    /// producer and consumer halves.
    ///
    /// # Panics
    /// If `capacity` is 0, or rounding it up to a power of two overflows `usize`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(capacity: usize) -> (Producer<T>, Consumer<T>) {
        assert!(capacity > 0, "ring capacity must be at least 1");
        let capacity = capacity
            .checked_next_power_of_two()
            .unwrap_or_else(|| panic!("ring capacity {capacity} is too large"));
        let slots = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            closed: CachePadded::new(AtomicBool::new(false)),
            slots,
        });
        let producer = Producer {
            shared: Arc::clone(&shared),
            mask: capacity - 1,
            tail: 0,
            head_cache: std::cell::Cell::new(0),
            notify: None,
        };
        let consumer = Consumer {
            shared,
            mask: capacity - 1,
            head: 0,
            tail_cache: std::cell::Cell::new(0),
            published: 0,
            release_every: default_release_every(capacity),
            notify: None,
        };
        (producer, consumer)
    }
}

/// Why [`Producer::try_push`] did not push; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TryPushError<T> {
    /// The ring was full. (A ring whose consumer is gone still takes values while it has room;
    /// check [`Producer::is_abandoned`] to tell.)
    Full(T),
}

impl<T> TryPushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            TryPushError::Full(v) => v,
        }
    }
}

impl<T> fmt::Debug for TryPushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryPushError::Full(_) => f.write_str("Full(..)"),
        }
    }
}

impl<T> fmt::Display for TryPushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryPushError::Full(_) => f.write_str(
                "ring is full: pop from the consumer side, retry later, or use a larger capacity",
            ),
        }
    }
}

impl<T> std::error::Error for TryPushError<T> {}

/// Why a blocking push ([`Producer::push`], [`Producer::push_timeout`]) did not happen; the
/// value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// The ring was still full when the timeout ran out.
    Full(T),
    /// The consumer is gone and the ring is full, so the value can never be taken.
    Abandoned(T),
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) | PushError::Abandoned(v) => v,
        }
    }
}

impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("Full(..)"),
            PushError::Abandoned(_) => f.write_str("Abandoned(..)"),
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str(
                "ring stayed full until the timeout ran out: the consumer is slow or stuck; wait longer or use a larger capacity",
            ),
            PushError::Abandoned(_) => {
                f.write_str("ring is full and its consumer was dropped: nothing will ever pop it")
            }
        }
    }
}

impl<T> std::error::Error for PushError<T> {}

/// Why a blocking pop returned without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopError {
    /// The ring stayed empty until the timeout ran out.
    Empty,
    /// The ring is empty and its producer was dropped: nothing more will arrive.
    Abandoned,
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PopError::Empty => f.write_str("ring stayed empty until the timeout: nothing to pop"),
            PopError::Abandoned => {
                f.write_str("ring is empty and its producer was dropped: nothing more will arrive")
            }
        }
    }
}

impl std::error::Error for PopError {}

/// The writing half of a [`Ring`]. `Send`, not `Clone`.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Copy of `shared.slots.len() - 1`, kept here so the hot path reads no shared line.
    mask: usize,
    /// The producer's own position; equal to `shared.tail` after every operation.
    tail: usize,
    /// The last `head` this side read. Invariant: `head_cache <= shared.head`.
    head_cache: std::cell::Cell<usize>,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

/// The reading half of a [`Ring`]. `Send`, not `Clone`.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Copy of `shared.slots.len() - 1`.
    mask: usize,
    /// The consumer's own position; equal to `shared.head` after every operation.
    head: usize,
    /// The last `tail` this side read. Invariant: `tail_cache <= shared.tail`.
    tail_cache: std::cell::Cell<usize>,
    /// The last `head` stored in `shared.head`. Invariant: `published <= head` and
    /// `head - published < release_every` between operations.
    published: usize,
    /// How many freed slots the consumer gathers before it stores `head`; see
    /// [`Consumer::set_release_every`].
    release_every: usize,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

impl<T> Producer<T> {
    /// Pushes `value`, or hands it back in [`TryPushError::Full`] when the ring is full.
    ///
    /// Wait-free; allocates nothing. Pushing into a ring whose consumer is gone succeeds while
    /// there is room (the value is dropped with the ring).
    ///
    /// # Errors
    /// [`TryPushError::Full`] with the value when the ring is full.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), TryPushError<T>> {
        if self.free_slots() == 0 {
            return Err(TryPushError::Full(value));
        }
        self.write(self.tail, value);
        self.commit(1);
        Ok(())
    }

    /// Pushes items from `iter` until the ring is full or `iter` ends, and publishes them all
    /// with one store. The other side's index is re-read when the cached one shows less room
    /// than `iter`'s size hint, so a batch fills what is really free. Returns how many were
    /// pushed; `iter` is not advanced past the last one.
    ///
    /// If `iter` panics, the items already taken from it stay pushed.
    pub fn push_iter<I: Iterator<Item = T>>(&mut self, iter: &mut I) -> usize {
        let free = self.free_slots_for(iter.size_hint().0.max(1));
        let (runs, shared, mut publish) = self.batch(free);
        'runs: for run in runs {
            for slot in &shared.slots[run] {
                let Some(value) = iter.next() else {
                    break 'runs;
                };
                // SAFETY: `batch` handed out only slots of `[tail, head + capacity)`: free, and
                // not read by the consumer until `publish` moves `tail` past them.
                slot.with_mut(|p| unsafe { (*p).write(value) });
                publish.count += 1;
            }
        }
        publish.count
        // `publish` drops here and publishes the items with one Release store.
    }

    /// Pushes clones of the items of `items` while there is room, publishing them with one
    /// store; returns how many were pushed.
    ///
    /// If `Clone` panics, the clones already made stay pushed.
    pub fn push_slice(&mut self, items: &[T]) -> usize
    where
        T: Clone,
    {
        let n = self.free_slots_for(items.len()).min(items.len());
        let (runs, shared, mut publish) = self.batch(n);
        let mut items = items;
        for run in runs {
            let (now, rest) = items.split_at(run.len());
            items = rest;
            // NB: a run of slots zipped with a run of items, with no per-item masking or bounds
            // check, compiles to a plain copy for `Copy` items; a per-item loop falls behind
            // rtrb's chunks in the ring suite's `throughput_batch` (see `benches/src/ring.rs`;
            // docs/PERFORMANCE.md, "The ring: lazy frees").
            for (slot, item) in shared.slots[run].iter().zip(now) {
                // SAFETY: as in `push_iter`: the slot is free and unpublished.
                slot.with_mut(|p| unsafe { (*p).write(item.clone()) });
                publish.count += 1;
            }
        }
        publish.count
    }

    /// The slots a batch of up to `n` items fills, as two runs of slot indices (the second
    /// non-empty when the batch wraps), and the guard that publishes what was written. `n` must
    /// not exceed the free slots.
    #[inline(always)]
    fn batch(&mut self, n: usize) -> ([std::ops::Range<usize>; 2], &Shared<T>, Publish<'_>) {
        debug_assert!(n <= self.capacity() - self.tail.wrapping_sub(self.head_cache.get()));
        let start = self.tail & self.mask;
        let first = n.min(self.mask + 1 - start);
        let shared: &Shared<T> = &self.shared;
        let publish = Publish {
            position: &mut self.tail,
            index: &shared.tail,
            notify: &self.notify,
            count: 0,
            lazy: None,
        };
        ([start..start + first, 0..n - first], shared, publish)
    }

    /// The ring's capacity in slots (a power of two).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How many values are in the ring, as seen from this side: at least the true count, since
    /// the consumer may have taken more since, and tells of what it took in groups (see
    /// [`Consumer::set_release_every`]).
    pub fn len(&self) -> usize {
        self.tail
            .wrapping_sub(self.shared.head.load(Ordering::Acquire))
    }

    /// True if the ring is empty as seen from this side.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many values can be pushed now without waiting: at most the true free space, for the
    /// reasons given at [`Producer::len`].
    pub fn slots(&self) -> usize {
        self.free_slots()
    }

    /// True once the consumer has been dropped.
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Free slots, as [`slots`](Self::slots), but re-reading the consumer's index whenever the
    /// cached one shows fewer than `wanted`: how much of a batch of `wanted` fits now.
    #[inline]
    pub(crate) fn slots_for(&self, wanted: usize) -> usize {
        self.free_slots_for(wanted.max(1))
    }

    /// Calls `notify` after every push or batch, so a consumer that sleeps while the ring is
    /// empty can be woken (the `Park` strategy's doorbell). `None` detaches it.
    pub fn notify_on_push(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// Free slots, refreshing the cached `head` only when the cache says the ring is full.
    #[inline(always)]
    fn free_slots(&self) -> usize {
        self.free_slots_for(1)
    }

    /// Free slots, refreshing the cached `head` only when the cache shows fewer than `wanted`.
    #[inline(always)]
    fn free_slots_for(&self, wanted: usize) -> usize {
        let capacity = self.mask + 1;
        let used = self.tail.wrapping_sub(self.head_cache.get());
        if capacity - used >= wanted {
            return capacity - used;
        }
        let head = self.shared.head.load(Ordering::Acquire);
        self.head_cache.set(head);
        capacity - self.tail.wrapping_sub(head)
    }

    /// Writes `value` into the slot of position `index`, which must be free.
    #[inline(always)]
    fn write(&mut self, index: usize, value: T) {
        debug_assert!(index.wrapping_sub(self.head_cache.get()) < self.capacity());
        let slot = &self.shared.slots[index & self.mask];
        // SAFETY: the caller checked that `index` is in `[tail, head + capacity)`, so the slot is
        // outside `[head, tail)`: uninitialised, and the consumer does not read it until `tail`
        // passes it with a Release store (in `commit`). Only this producer writes slots.
        slot.with_mut(|p| unsafe { (*p).write(value) });
    }

    /// Publishes `n` written slots with one Release store and rings the doorbell, if any.
    #[inline(always)]
    fn commit(&mut self, n: usize) {
        self.tail = self.tail.wrapping_add(n);
        self.shared.tail.store(self.tail, Ordering::Release);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

/// Ends a batch push or pop, normally or by a panic in user code: moves the side's own
/// position past the `count` slots written (or read), publishes it with one Release store, and
/// rings the doorbell, if any, as `Producer::commit` and `Consumer::advance` do for one item. A
/// consumer's store may be deferred (`lazy`).
struct Publish<'a> {
    /// The side's own position (`Producer::tail` or `Consumer::head`).
    position: &'a mut usize,
    /// The shared index the other side reads (`Shared::tail` or `Shared::head`).
    index: &'a AtomicUsize,
    notify: &'a Option<std::sync::Arc<dyn Notify>>,
    count: usize,
    /// The consumer's deferral: `None` stores at once (the producer always does).
    lazy: Option<Lazy<'a>>,
}

/// What a consumer's [`Publish`] needs to decide whether to store `head` now.
struct Lazy<'a> {
    /// `Consumer::published`.
    published: &'a mut usize,
    /// `Consumer::release_every`.
    every: usize,
    /// `Consumer::tail_cache` when the batch began.
    known: usize,
}

/// True if a consumer at `head` must store it now: it has taken every value it knew of (`known`,
/// its cached `tail`: it may be about to wait, and the producer with it), or gathered `every`
/// freed slots since the `head` it last stored (`published`). The drained case is tested first:
/// it is every pop of a ping-pong.
#[inline(always)]
fn release_due(head: usize, published: usize, every: usize, known: usize) -> bool {
    head == known || head.wrapping_sub(published) >= every
}

impl Drop for Publish<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.count > 0 {
            *self.position = self.position.wrapping_add(self.count);
            if let Some(lazy) = &mut self.lazy {
                if !release_due(*self.position, *lazy.published, lazy.every, lazy.known) {
                    return;
                }
                *lazy.published = *self.position;
            }
            self.index.store(*self.position, Ordering::Release);
            if let Some(notify) = self.notify {
                notify.notify();
            }
        }
    }
}

impl<T> Consumer<T> {
    /// Pops the oldest value, or returns `None` when the ring is empty. Wait-free.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        if self.available() == 0 {
            return None;
        }
        let value = self.read(self.head);
        self.advance(1);
        Some(value)
    }

    /// A reference to the oldest value without popping it, or `None` when the ring is empty.
    pub fn peek(&self) -> Option<&T> {
        if self.available() == 0 {
            return None;
        }
        let slot = &self.shared.slots[self.head & self.mask];
        // SAFETY: `head < tail`, so the slot holds an initialised value that only this consumer
        // may move out, and it cannot do so while the returned borrow of `self` lives.
        Some(slot.with(|p| unsafe { (*p).assume_init_ref() }))
    }

    /// Pops up to `max` values, handing each to `f` in order, and frees their slots with at most
    /// one store (see [`Consumer::set_release_every`]). Returns how many were popped.
    ///
    /// If `f` panics, the values already handed to it (including the one it panicked on) count as
    /// popped; the rest stay in the ring.
    pub fn pop_batch<F: FnMut(T)>(&mut self, max: usize, mut f: F) -> usize {
        let n = self.available_for(max).min(max);
        debug_assert!(n <= self.tail_cache.get().wrapping_sub(self.head));
        let start = self.head & self.mask;
        let first = n.min(self.mask + 1 - start);
        let shared: &Shared<T> = &self.shared;
        let mut release = Publish {
            position: &mut self.head,
            index: &shared.head,
            notify: &self.notify,
            count: 0,
            lazy: Some(Lazy {
                published: &mut self.published,
                every: self.release_every,
                known: self.tail_cache.get(),
            }),
        };
        // NB: two runs of slots, walked without per-item masking or bounds checks (see
        // `Producer::push_slice`).
        for run in [start..start + first, 0..n - first] {
            for slot in &shared.slots[run] {
                // SAFETY: the slot is in `[head, tail)`: the producer initialised it before its
                // Release store of `tail`, which `available_for` read with Acquire. `release`
                // counts it before `f` runs, so it is freed (never read again) even if `f`
                // panics: each value is moved out once.
                let value = slot.with(|p| unsafe { (*p).assume_init_read() });
                release.count += 1;
                f(value);
            }
        }
        n
        // `release` drops here and frees `n` slots, with one Release store if one is due.
    }

    /// The ring's capacity in slots (a power of two).
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How many values are in the ring now.
    pub fn len(&self) -> usize {
        self.shared
            .tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }

    /// True if the ring is empty now.
    pub fn is_empty(&self) -> bool {
        self.available() == 0
    }

    /// True once the producer has been dropped. Values it pushed before may still be waiting:
    /// the ring is finished when it is abandoned *and* empty (check in that order).
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Calls `notify` after every pop or batch, so a producer that sleeps while the ring is full
    /// can be woken. `None` detaches it.
    pub fn notify_on_pop(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// Values known to be ready without reading the producer's index: a lower bound on `len`.
    #[inline(always)]
    pub(crate) fn cached_len(&self) -> usize {
        self.tail_cache.get().wrapping_sub(self.head)
    }

    /// Values ready to pop, refreshing the cached `tail` only when the cache says empty.
    #[inline(always)]
    fn available(&self) -> usize {
        self.available_for(1)
    }

    /// Values ready to pop, refreshing the cached `tail` only when the cache shows fewer than
    /// `wanted`.
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

    /// Moves the value out of the slot of position `index`, which must be in `[head, tail)`.
    #[inline(always)]
    fn read(&mut self, index: usize) -> T {
        debug_assert!(
            index.wrapping_sub(self.head) < self.tail_cache.get().wrapping_sub(self.head)
        );
        let slot = &self.shared.slots[index & self.mask];
        // SAFETY: `index` is in `[head, tail)`, so the slot was initialised by the producer before
        // its Release store of `tail`, which our Acquire load in `available` saw. The caller
        // advances `head` past it before anyone could read it again, so it is moved out once.
        slot.with(|p| unsafe { (*p).assume_init_read() })
    }

    /// Moves past `n` read slots, and frees them (with those gathered before) when a store is
    /// due: see [`release_due`].
    #[inline(always)]
    fn advance(&mut self, n: usize) {
        self.head = self.head.wrapping_add(n);
        let known = self.tail_cache.get();
        if release_due(self.head, self.published, self.release_every, known) {
            self.publish_head();
        }
    }

    /// Stores `head` (Release) and rings the doorbell, if any: the slots read so far are free.
    #[inline(always)]
    fn publish_head(&mut self) {
        self.published = self.head;
        self.shared.head.store(self.head, Ordering::Release);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }

    /// Frees every slot this side has read, so that the producer sees all the room there is
    /// (one Release store of `head`, and the doorbell, if any, when there was something to
    /// free). A consumer that stops taking values with some still in the ring, say to wait for
    /// something its producer must do first, calls this before it waits; see
    /// [`Consumer::set_release_every`].
    #[inline]
    pub fn release(&mut self) {
        if self.published != self.head {
            self.publish_head();
        }
    }

    /// Sets how many freed slots this side gathers before it tells the producer (one store of
    /// its index), clamped to `1..=capacity`; the default is a quarter of the capacity (1 for
    /// capacities up to 4). Whatever the setting, everything gathered is freed as soon as this side
    /// has taken every value it knew to be in the ring, on [`Consumer::release`], and when it is
    /// dropped.
    ///
    /// Gathering is what makes a full ring fast: the producer re-reads the consumer's index
    /// once per `n` values instead of once per pop. The price is that, while this side keeps
    /// taking values from a ring that holds more, the producer may see up to `n - 1` fewer free
    /// slots than there are (its `slots()`, `len()` and `try_push` are a step behind). `1`
    /// frees every slot at once: choose it when the producer's view must be exact, for example
    /// when it drops values that do not fit and every slot of a burst counts.
    pub fn set_release_every(&mut self, n: usize) {
        self.release_every = n.clamp(1, self.capacity());
        if self.head.wrapping_sub(self.published) >= self.release_every {
            self.release();
        }
    }

    /// See [`Consumer::set_release_every`].
    pub fn release_every(&self) -> usize {
        self.release_every
    }
}

/// The consumer's default [`Consumer::set_release_every`]: a quarter of `capacity`, at least 1.
fn default_release_every(capacity: usize) -> usize {
    (capacity / 4).max(1)
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // A consumer asleep on an empty ring must wake to see that nothing more will come.
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        // The slots read since the last store must be freed first: `Shared::drop` drops what
        // lies in `[head, tail)`, and a producer that sees `closed` tries its push once more.
        self.release();
        self.shared.closed.store(true, Ordering::Release);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .field("abandoned", &self.is_abandoned())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .field("abandoned", &self.is_abandoned())
            .finish_non_exhaustive()
    }
}

// `Producer` and `Consumer` are `Send` when `T: Send`: they hold an `Arc<Shared<T>>` (Send +
// Sync by the impls above), plain integers, a `Cell` (Send) and an `Arc<dyn Notify>` (Notify is
// Send + Sync). They are not `Sync` (the `Cell`), so each half is used by one thread at a time.
