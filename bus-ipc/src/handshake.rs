//! The sleep/wake handshake on a futex word in the mapping: the one part of the shared ring's
//! protocol that the in-process ring does not have (llbus's `Doorbell` uses a lock and a
//! condition variable, which cannot be shared with another process).
//!
//! Dekker's pattern: the sleeper stores 1 in its word, issues a `SeqCst` fence and re-checks
//! the index it waits on; the waker stores that index (`Release`), issues a `SeqCst` fence
//! and loads the word. The two fences forbid the outcome where the sleeper sees the old index
//! *and* the waker sees the old word, so a wake-up is never lost; in the common case (nobody
//! sleeps) the waker pays a fence and a load, and no system call. Checked by loom in
//! `loom_models`, on these very functions.

#[cfg(loom)]
use loom::sync::atomic::{fence, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, Ordering};

/// A futex word: std's atomic in a mapping, loom's in a model.
pub(crate) trait Word {
    fn load(&self) -> u32;
    fn store(&self, v: u32);
}

impl Word for std::sync::atomic::AtomicU32 {
    #[inline]
    fn load(&self) -> u32 {
        self.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[inline]
    fn store(&self, v: u32) {
        self.store(v, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(loom)]
impl Word for loom::sync::atomic::AtomicU32 {
    fn load(&self) -> u32 {
        self.load(Ordering::Relaxed)
    }
    fn store(&self, v: u32) {
        self.store(v, Ordering::Relaxed)
    }
}

/// The sleeper's half: announces the sleep, then re-checks with `still_nothing` (which loads
/// the other side's index). Returns whether it may sleep (on `word`, expecting 1); the caller
/// stores 0 in `word` when it wakes.
#[inline]
pub(crate) fn announce<W: Word, E>(
    word: &W,
    still_nothing: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    word.store(1);
    fence(Ordering::SeqCst);
    still_nothing()
}

/// The waker's half, right after its `Release` store of its index: whether the other side
/// announced a sleep (then the caller makes the wake-up system call). Clears the word.
#[inline]
pub(crate) fn must_wake<W: Word>(word: &W) -> bool {
    // NB: a SeqCst fence and one load per batch when nobody sleeps; the system call only when
    // the peer announced a sleep. Without the fence the store of the index and the load of the
    // word may be reordered (store buffering) and a wake-up lost until the sleeper's timeout.
    fence(Ordering::SeqCst);
    if word.load() != 0 {
        word.store(0);
        true
    } else {
        false
    }
}
