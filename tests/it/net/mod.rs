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
    free: Mutex<usize>,
    freed: Condvar,
}

/// A slot of [`Slots`], given back when dropped.
pub(crate) struct Slot<'a>(&'a Slots);

impl Slots {
    const fn new(n: usize) -> Slots {
        Slots {
            free: Mutex::new(n),
            freed: Condvar::new(),
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
        Slot(self)
    }

    fn lock(&self) -> MutexGuard<'_, usize> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.lock() += 1;
        self.0.freed.notify_one();
    }
}
