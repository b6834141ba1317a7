//! The network across crates: the `publisher` and `subscriber` examples and the `llbus` command
//! as processes against bridges, forged source addresses from raw sockets, and hosts in network
//! namespaces (root; skipped loudly off root except in CI). What drives bridges in one process
//! is `llbus-net`'s own `bus-net/tests/it/`.
//!
//! - `processes`: the examples as two processes on loopback, both formats, restarts, expiry;
//! - `spoof`: attacks with forged source addresses against the examples (root);
//! - `netns`: the examples on two namespaces joined by a shaped link (root);
//! - `multicast_ns`: discovery and multicast across namespaces (`fallback`: members whose
//!   multicast stops and resumes) (root);
//! - `topics`: `llbus topics` against bridges and forgers on a discovery group;
//! - `schema_cli`: `llbus echo`, `spy --decode`, `play` and `record` against hostile publishers
//!   and recordings.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

mod multicast_ns;
mod netns;
mod processes;
mod schema_cli;
mod spoof;
mod topics;

/// Namespace cases running at once across the modules: two. Each case has namespaces,
/// addresses and a wire of its own (`tests::netns` numbers them per process), so cases do not
/// see each other's packets; what they share is the machine's cores, with their wires (threads
/// of this process) and their examples. Two at once keep both cores busy; more would starve a
/// wire thread on a two-core machine and add loss of its own to cases that assert exact counts.
pub(crate) static NAMESPACES: Slots = Slots::new(2);

/// A counting semaphore: [`Slots::take`] blocks while every slot is held.
pub(crate) struct Slots {
    /// Slots not held; at most `all`.
    free: Mutex<usize>,
    freed: Condvar,
    all: usize,
}

/// Slots of [`Slots`] (how many), given back when dropped.
pub(crate) struct Slot<'a>(&'a Slots, usize);

impl Slots {
    const fn new(n: usize) -> Slots {
        Slots {
            free: Mutex::new(n),
            freed: Condvar::new(),
            all: n,
        }
    }

    /// Waits for a free slot and holds it until the returned guard is dropped. A test that
    /// panicked while holding one has given it back (the guard drops while unwinding), so a
    /// poisoned lock is taken as it is.
    pub(crate) fn take(&self) -> Slot<'_> {
        let mut free = self.lock();
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self, 1)
    }

    /// Waits until no slot is held and holds them all until the returned guard is dropped:
    /// for a case that needs the cores to itself.
    pub(crate) fn take_all(&self) -> Slot<'_> {
        let mut free = self.lock();
        while *free < self.all {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free = 0;
        Slot(self, self.all)
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut free = self.0.lock();
        *free += self.1;
        debug_assert!(*free <= self.0.all);
        self.0.freed.notify_all();
    }
}
