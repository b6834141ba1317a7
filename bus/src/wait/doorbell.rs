//! The doorbell: a sleeping thread's lazy wake-up.
//!
//! The waiter *arms* the bell (a `Relaxed` store of `armed`, then a `SeqCst` fence), polls its
//! queues once more, and only then sleeps. A producer, after publishing with its `Release`
//! store, issues a `SeqCst` fence and loads `armed`. This is the store-buffering pattern with a
//! `SeqCst` fence on each side: the fences are totally ordered, so either the producer's load
//! sees `armed` (and it rings), or the waiter's re-poll sees the producer's item (and it does not
//! sleep). No wake-up is lost, and a producer whose consumer is spinning pays a fence and a load
//! of a line that nobody writes: no lock, no system call. Checked by the loom models in
//! `ring::loom_models`.
//!
//! A doorbell wakes its waiter in one of two ways. By default the waiter sleeps on a condvar
//! and a ringer takes its mutex and notifies. A waiter that also waits for file descriptors
//! (a parked thread that owns sockets, see `kernel`) attaches an eventfd waker once, before
//! it first arms; from then on a ringer writes the eventfd instead. The arm's swap is a
//! `Release` and the ringer's claiming swap an `Acquire`, so a ringer that claims an arm made
//! after the attachment sees the waker.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::ring::Notify;
use crate::sync::{fence, lock, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};

/// A lazy wake-up for one sleeping thread, rung by any number of producers.
#[derive(Debug)]
pub struct Doorbell {
    /// True from `arm` until the waiter wakes or a ringer claims the wake-up.
    armed: CachePadded<AtomicBool>,
    /// True when rung and not yet consumed by `sleep`.
    rung: Mutex<bool>,
    bell: Condvar,
    /// How many rings took the slow path (lock and notify, or the eventfd). Written by ringers.
    wakeups: AtomicU64,
    /// The waiter's eventfd, once it sleeps in the kernel on file descriptors too. Set by the
    /// waiter before it arms (see the module docs); never changed after.
    #[cfg(all(unix, not(loom)))]
    waker: std::sync::OnceLock<std::sync::Arc<mio::Waker>>,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A silent doorbell.
    pub fn new() -> Self {
        Doorbell {
            armed: CachePadded::new(AtomicBool::new(false)),
            rung: Mutex::new(false),
            bell: Condvar::new(),
            wakeups: AtomicU64::new(0),
            #[cfg(all(unix, not(loom)))]
            waker: std::sync::OnceLock::new(),
        }
    }

    /// Makes ringers write `waker` instead of notifying the condvar. Called by the waiter,
    /// before it next arms; a second waker is ignored (the first stays).
    #[cfg(all(unix, not(loom)))]
    pub(crate) fn attach_waker(&self, waker: std::sync::Arc<mio::Waker>) {
        let _ = self.waker.set(waker);
    }

    /// Ends a sleep that did not go through [`sleep`](Self::sleep) (the kernel wait).
    #[cfg(all(unix, not(loom)))]
    pub(crate) fn woke(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }

    /// Announces that the waiter is about to sleep. The waiter must poll its queues once more
    /// after this and before [`sleep`](Self::sleep).
    pub fn arm(&self) {
        // NB: a swap, not a store: in C11 either works (a ringer's claiming swap that read an
        // earlier `false` is ordered before this in the location's modification order), but
        // loom keeps modification order partial and, with a plain store, lets a later ringer
        // read that claim's `false` instead of this `true`: a false lost wake-up in the model
        // with two producers. The waiter's side is not hot (it is about to sleep). `Release`:
        // a ringer whose `Acquire` claim reads this sees an eventfd waker attached before.
        self.armed.swap(true, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// Withdraws the announcement (the re-poll found work).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }

    /// Sleeps until rung, or until `timeout` passes. Returns early if a ring came after `arm`.
    /// Spurious returns are possible; the caller polls again either way.
    pub fn sleep(&self, timeout: Option<Duration>) {
        let mut rung = lock(&self.rung);
        if !*rung {
            rung = match timeout {
                None => self
                    .bell
                    .wait(rung)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                #[cfg(not(loom))]
                Some(t) => {
                    self.bell
                        .wait_timeout(rung, t)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
                // Loom models no time; its models never pass a timeout.
                #[cfg(loom)]
                Some(_) => self
                    .bell
                    .wait(rung)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
        }
        *rung = false;
        drop(rung);
        self.armed.store(false, Ordering::Relaxed);
    }

    /// Wakes the waiter if it has armed the bell; otherwise costs a fence and a load. Call after
    /// publishing what the waiter waits for.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        // NB: the claim is `Acquire` (see `arm`); it runs only when the bell is armed, so a
        // ringer whose waiter is awake still pays a fence and a relaxed load, nothing more.
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::Acquire) {
            self.ring_slow();
        }
    }

    #[cold]
    fn ring_slow(&self) {
        #[cfg(all(unix, not(loom)))]
        if let Some(waker) = self.waker.get() {
            if let Err(e) = waker.wake() {
                log::warn!("could not write a parked thread's eventfd: {e}");
            }
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut rung = lock(&self.rung);
        *rung = true;
        drop(rung);
        self.bell.notify_one();
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times a ring found the waiter armed and woke it (took the lock and notified, or
    /// wrote its eventfd).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}

impl Notify for Doorbell {
    #[inline]
    fn notify(&self) {
        self.ring();
    }
}
