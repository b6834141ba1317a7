//! The state every thread of a running bus shares: the stop phase, the go signal, the first
//! escalated error, and the doorbells to ring when the phase changes.
//!
//! Phases only move forward: `Running` -> `Draining` (no more ticks or polls; inboxes drain) ->
//! `Stopping` (each thread runs its actors' `on_stop` once, then keeps draining) -> `Exit`.

use std::sync::Arc;

use crate::sync::{lock, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};
use crate::wait::Doorbell;

pub(crate) const RUNNING: usize = 0;
pub(crate) const DRAINING: usize = 1;
pub(crate) const STOPPING: usize = 2;
pub(crate) const EXIT: usize = 3;

pub(crate) const GO_WAIT: usize = 0;
pub(crate) const GO_RUN: usize = 1;
pub(crate) const GO_ABORT: usize = 2;

/// An escalated failure: the actor and its panic message, or the error it reported.
#[derive(Clone, Debug)]
pub(crate) struct Escalation {
    pub(crate) actor: String,
    pub(crate) message: String,
    /// Reported with `Context::fail` (an error), not a panic.
    pub(crate) reported: bool,
}

#[derive(Debug)]
pub(crate) struct Control {
    phase: AtomicUsize,
    go: AtomicUsize,
    stop_requested: AtomicBool,
    /// Set when a stop runs past its drain phase: every `Block` wait gives up (its message is
    /// counted lost), so that no thread waits on a ring that will never drain.
    waits_over: AtomicBool,
    /// Wakes `join` when a stop is requested.
    stop_lock: Mutex<bool>,
    stop_bell: Condvar,
    escalation: Mutex<Option<Escalation>>,
    /// Threads that have run their actors' `on_stop` hooks (or died: their guard counts them).
    pub(crate) stop_hooks_done: AtomicUsize,
    doorbells: Vec<Arc<Doorbell>>,
}

impl Control {
    pub(crate) fn new(doorbells: Vec<Arc<Doorbell>>) -> Self {
        Control {
            phase: AtomicUsize::new(RUNNING),
            go: AtomicUsize::new(GO_WAIT),
            stop_requested: AtomicBool::new(false),
            waits_over: AtomicBool::new(false),
            stop_lock: Mutex::new(false),
            stop_bell: Condvar::new(),
            escalation: Mutex::new(None),
            stop_hooks_done: AtomicUsize::new(0),
            doorbells,
        }
    }

    #[inline]
    pub(crate) fn phase(&self) -> usize {
        self.phase.load(Ordering::Acquire)
    }

    /// Moves the phase forward to `phase` (never back) and wakes every sleeping thread.
    pub(crate) fn set_phase(&self, phase: usize) {
        let mut current = self.phase.load(Ordering::Acquire);
        while current < phase {
            match self.phase.compare_exchange_weak(
                current,
                phase,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.ring_all();
    }

    /// Calls every `Block` wait off, now and from now on, and wakes the waiters.
    pub(crate) fn end_waits(&self) {
        self.waits_over.store(true, Ordering::Release);
        self.ring_all();
    }

    /// True once waits are called off.
    #[inline]
    pub(crate) fn waits_over(&self) -> bool {
        self.waits_over.load(Ordering::Acquire)
    }

    pub(crate) fn ring_all(&self) {
        for bell in &self.doorbells {
            bell.ring();
        }
    }

    pub(crate) fn go(&self) -> usize {
        self.go.load(Ordering::Acquire)
    }

    pub(crate) fn set_go(&self, go: usize) {
        self.go.store(go, Ordering::Release);
    }

    pub(crate) fn request_stop(&self) {
        if !self.stop_requested.swap(true, Ordering::AcqRel) {
            let mut requested = lock(&self.stop_lock);
            *requested = true;
            drop(requested);
            self.stop_bell.notify_all();
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }

    /// Blocks until a stop is requested.
    pub(crate) fn wait_for_stop_request(&self) {
        let mut requested = lock(&self.stop_lock);
        while !*requested {
            requested = match self.stop_bell.wait(requested) {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }

    /// Records the first escalated panic and stops the bus.
    pub(crate) fn escalate(&self, actor: &str, message: &str) {
        self.record(actor, message, false);
    }

    /// Records the first error an actor reported as fatal (`Context::fail`) and stops the bus.
    pub(crate) fn fail(&self, actor: &str, message: &str) {
        self.record(actor, message, true);
    }

    fn record(&self, actor: &str, message: &str, reported: bool) {
        let mut slot = lock(&self.escalation);
        if slot.is_none() {
            *slot = Some(Escalation {
                actor: actor.to_owned(),
                message: message.to_owned(),
                reported,
            });
        }
        drop(slot);
        self.request_stop();
    }

    pub(crate) fn escalation(&self) -> Option<Escalation> {
        lock(&self.escalation).clone()
    }
}
