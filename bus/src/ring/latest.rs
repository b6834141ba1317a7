//! The conflating slot behind the `Latest` backpressure policy: a lock-free triple buffer.
//!
//! Three slots; at any moment the writer owns one (the back), the reader owns one (the front)
//! and the third (the middle) is shared, its index kept in one atomic word together with a
//! `FRESH` bit meaning "the middle holds a value the reader has not taken". A write fills the
//! back slot and swaps it with the middle (`AcqRel`); a read swaps its front with the middle when
//! `FRESH` is set. Neither side ever waits, and the reader always gets the newest value written;
//! values overwritten before the reader took them are *conflated*, and the writer learns of each
//! one (the swap returns the old `FRESH` bit), so it can count them.

use std::fmt;

use crossbeam_utils::CachePadded;

use super::Notify;
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};

const INDEX: usize = 0b011;
const FRESH: usize = 0b100;

struct Shared<T> {
    /// The middle slot's index, and `FRESH` when it holds a value not yet read.
    middle: CachePadded<AtomicUsize>,
    /// Set by whichever half is dropped first.
    closed: AtomicBool,
    /// Slot `i` is owned by whoever holds index `i`: the writer (back), the reader (front) or
    /// the `middle` word. `None` when empty.
    slots: [UnsafeCell<Option<T>>; 3],
}

// SAFETY: each slot is accessed only by the side that currently owns its index, and ownership
// changes hands through AcqRel swaps of `middle`, which order the accesses. Values move between
// threads, which needs `T: Send`.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Shared<T> {}

/// A latest-value slot: [`Latest::new`] makes one and hands out its two halves.
///
/// ```
/// use llbus::Latest;
///
/// let (mut tx, mut rx) = Latest::new();
/// assert!(!tx.write(1));      // nothing was overwritten
/// assert!(tx.write(2));       // 1 was never read: conflated
/// assert_eq!(rx.read(), Some(2));
/// assert_eq!(rx.read(), None);
/// ```
#[derive(Debug)]
pub struct Latest<T>(std::marker::PhantomData<T>);

impl<T> Latest<T> {
    /// Makes an empty slot and returns its writer and reader. Allocates once, here.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> (LatestWriter<T>, LatestReader<T>) {
        let shared = Arc::new(Shared {
            middle: CachePadded::new(AtomicUsize::new(1)),
            closed: AtomicBool::new(false),
            slots: [
                UnsafeCell::new(None),
                UnsafeCell::new(None),
                UnsafeCell::new(None),
            ],
        });
        (
            LatestWriter {
                shared: Arc::clone(&shared),
                back: 0,
                notify: None,
            },
            LatestReader { shared, front: 2 },
        )
    }
}

/// The writing half of a [`Latest`] slot. `Send`, not `Clone`.
pub struct LatestWriter<T> {
    shared: Arc<Shared<T>>,
    /// Index of the slot this side owns.
    back: usize,
    notify: Option<std::sync::Arc<dyn Notify>>,
}

/// The reading half of a [`Latest`] slot. `Send`, not `Clone`.
pub struct LatestReader<T> {
    shared: Arc<Shared<T>>,
    /// Index of the slot this side owns.
    front: usize,
}

impl<T> LatestWriter<T> {
    /// Makes `value` the newest. Returns true if it replaced a value the reader never took (a
    /// conflation). Wait-free; allocates nothing.
    #[inline]
    pub fn write(&mut self, value: T) -> bool {
        let slot = &self.shared.slots[self.back];
        // SAFETY: this side owns slot `back` until the swap below hands it over.
        slot.with_mut(|p| unsafe { *p = Some(value) });
        let old = self.shared.middle.swap(self.back | FRESH, Ordering::AcqRel);
        self.back = old & INDEX;
        if let Some(notify) = &self.notify {
            notify.notify();
        }
        old & FRESH != 0
    }

    /// Calls `notify` after every write, so a reader that sleeps can be woken. `None` detaches.
    pub fn notify_on_write(&mut self, notify: Option<std::sync::Arc<dyn Notify>>) {
        self.notify = notify;
    }

    /// True once the reader has been dropped.
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

impl<T> LatestReader<T> {
    /// Takes the newest value if one was written since the last read. Wait-free.
    #[inline]
    pub fn read(&mut self) -> Option<T> {
        if !self.has_fresh() {
            return None;
        }
        let old = self.shared.middle.swap(self.front, Ordering::AcqRel);
        self.front = old & INDEX;
        let slot = &self.shared.slots[self.front];
        // SAFETY: the swap gave this side slot `front`; the writer's Release half of its swap
        // published what it wrote there, and our Acquire half made it visible.
        slot.with_mut(|p| unsafe { (*p).take() })
    }

    /// True if a value was written since the last read.
    pub fn has_fresh(&self) -> bool {
        self.shared.middle.load(Ordering::Acquire) & FRESH != 0
    }

    /// True once the writer has been dropped. The slot is finished when it is abandoned and has
    /// no fresh value (check in that order).
    pub fn is_abandoned(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

impl<T> Drop for LatestWriter<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if let Some(notify) = &self.notify {
            notify.notify();
        }
    }
}

impl<T> Drop for LatestReader<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

impl<T> fmt::Debug for LatestWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatestWriter").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for LatestReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatestReader")
            .field("fresh", &self.has_fresh())
            .finish_non_exhaustive()
    }
}
