//! The sleep/wake handshake on a futex word in the mapping: the one part of the shared ring's
//! protocol that the in-process ring does not have (llbus's `Doorbell` uses a lock and a
//! condition variable, which cannot be shared with another process).
//!
//! Dekker's pattern: the sleeper stores 1 in its word, fences, and re-checks the index it waits
//! on; the waker stores that index (`Release`), fences, and loads the word. The two fences
//! forbid the outcome where the sleeper sees the old index *and* the waker sees the old word, so
//! a wake-up is never lost.
//!
//! The fences are asymmetric where the kernel allows it (folly's `asymmetricThreadFence*`):
//! every process that uses a channel registers for `membarrier(GLOBAL_EXPEDITED)`; the sleeper
//! (the slow path) issues that system call, which runs a full barrier on every running thread
//! of every registered process, so the waker (the hot path: every publish and every free) needs
//! only a compiler fence. Without the registration a process's wakers use a `SeqCst` fence, and
//! a sleeper whose `membarrier` fails sleeps at most 50 µs at a time.
//!
//! NB: a `SeqCst` fence after every index store makes each batch wait for its store to reach
//! the other core, which costs the cross-process batched throughput more than half of what it
//! is without (the `ipc` suite; docs/PERFORMANCE.md, "Shared memory").
//!
//! The loom models (`loom_models`) check the symmetric form (loom has no `membarrier`), on
//! these very functions; the asymmetric form is that pattern with the sleeper's fence made
//! global, as Linux documents for `membarrier`.

#[cfg(loom)]
use loom::sync::atomic::{fence, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{compiler_fence, fence, Ordering};

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

/// The sleeper's fence. Returns whether a peer that uses the light fence is covered.
#[inline]
fn heavy() -> bool {
    fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    {
        crate::sys::heavy_fence()
    }
    #[cfg(loom)]
    {
        true
    }
}

/// The waker's fence.
#[inline]
fn light() {
    #[cfg(not(loom))]
    {
        if crate::sys::asymmetric_fences() {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// What the sleeper's re-check decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The awaited index moved: do not sleep.
    Ready,
    /// Sleep on the word (expecting 1) as long as the caller likes.
    Sleep,
    /// Sleep, but briefly: a peer using the light fence may not be covered.
    SleepBriefly,
}

/// Makes sure this process's wakers know which fence to use (registers for `membarrier`):
/// call before the first publish or free on a channel.
pub(crate) fn prepare() {
    #[cfg(not(loom))]
    let _ = crate::sys::asymmetric_fences();
}

/// The sleeper's half: announces the sleep, then re-checks with `still_nothing` (which loads
/// the other side's index). The caller stores 0 in `word` when it wakes.
#[inline]
pub(crate) fn announce<W: Word, E>(
    word: &W,
    still_nothing: impl FnOnce() -> Result<bool, E>,
) -> Result<Decision, E> {
    word.store(1);
    let covered = heavy();
    Ok(match still_nothing()? {
        false => Decision::Ready,
        true if covered => Decision::Sleep,
        true => Decision::SleepBriefly,
    })
}

/// The waker's half, right after its `Release` store of its index: whether the other side
/// announced a sleep (then the caller makes the wake-up system call). Clears the word.
#[inline]
pub(crate) fn must_wake<W: Word>(word: &W) -> bool {
    light();
    if word.load() != 0 {
        word.store(0);
        true
    } else {
        false
    }
}
