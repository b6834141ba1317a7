//! The state every thread of a running bus shares: the stop phase, the go signal, the first
//! escalated error, and the doorbells to ring when the phase changes.
//!
//! Phases only move forward: `Running` -> `Draining` (no more ticks or polls; inboxes drain) ->
//! `Stopping` (each thread runs its actors' `on_stop` once, then keeps draining) -> `Exit`.
//! A stop request moves the phase to `Draining` at once, whoever makes it, and wakes the bus's
//! stop driver (see `stop`), which moves it on from there.

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

pub(crate) struct Control {
    phase: AtomicUsize,
    go: AtomicUsize,
    stop_requested: AtomicBool,
    /// Set when a stop runs past its drain phase: every `Block` wait gives up (its message is
    /// counted lost), so that no thread waits on a ring that will never drain.
    waits_over: AtomicBool,
    /// Set by the stop driver once the bus's threads have left (or the wait for them is over):
    /// nothing more is published into external subscriptions, which may then report closed.
    threads_gone: AtomicBool,
    /// Wakes the stop driver when a stop is requested.
    stop_lock: Mutex<bool>,
    stop_bell: Condvar,
    escalation: Mutex<Option<Escalation>>,
    /// Per bus thread: set once it has run its actors' `on_stop` hooks (or died: its guard sets
    /// it). The stop driver waits for all of them and reports the ones that were late.
    hooks_done: Vec<AtomicBool>,
    /// Edges outside the bus's threads that still hold messages they accepted before the stop
    /// (the tokio adapter's channel): the drain waits for them to hand everything over.
    flushing: AtomicUsize,
    /// Called once, on the stop request, to wake what waits outside the bus's threads and
    /// doorbells (the tokio adapter's forwarding thread).
    stop_wakers: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
    doorbells: Vec<Arc<Doorbell>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("phase", &self.phase())
            .field("stop_requested", &self.is_stopping())
            .finish_non_exhaustive()
    }
}

impl Control {
    /// The control of a bus with `threads` threads (each runs `on_stop` hooks once), whose
    /// phase changes ring `doorbells`.
    pub(crate) fn new(threads: usize, doorbells: Vec<Arc<Doorbell>>) -> Self {
        Control {
            phase: AtomicUsize::new(RUNNING),
            go: AtomicUsize::new(GO_WAIT),
            stop_requested: AtomicBool::new(false),
            waits_over: AtomicBool::new(false),
            threads_gone: AtomicBool::new(false),
            stop_lock: Mutex::new(false),
            stop_bell: Condvar::new(),
            escalation: Mutex::new(None),
            hooks_done: (0..threads).map(|_| AtomicBool::new(false)).collect(),
            flushing: AtomicUsize::new(0),
            stop_wakers: Mutex::new(Vec::new()),
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

    /// The bus's threads have left (or are left running on their own): see `threads_gone`.
    pub(crate) fn threads_gone(&self) {
        self.threads_gone.store(true, Ordering::Release);
        self.ring_all();
    }

    /// True once the bus's threads have left.
    #[inline]
    pub(crate) fn has_exited(&self) -> bool {
        self.threads_gone.load(Ordering::Acquire)
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

    /// Asks the bus to stop: the phase moves to `Draining` at once (no tick or poll starts
    /// after this returns, and `Block` waits into external subscriptions give up), every
    /// sleeping thread is rung, and the stop driver wakes to run the rest of the protocol.
    pub(crate) fn request_stop(&self) {
        if !self.stop_requested.swap(true, Ordering::AcqRel) {
            self.set_phase(DRAINING);
            let mut requested = lock(&self.stop_lock);
            *requested = true;
            drop(requested);
            self.stop_bell.notify_all();
            for wake in lock(&self.stop_wakers).iter() {
                wake();
            }
        }
    }

    #[cfg(feature = "tokio")]
    /// Calls `wake` once when a stop is requested (at once if one already was).
    pub(crate) fn on_stop_request(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let mut wakers = lock(&self.stop_wakers);
        if self.is_stopping() {
            drop(wakers);
            wake();
        } else {
            wakers.push(wake);
        }
    }

    #[cfg(feature = "tokio")]
    /// An edge outside the bus's threads now holds accepted messages that it must hand over
    /// before the bus can drain; [`flushed`](Self::flushed) when it has.
    pub(crate) fn begin_flush(&self) {
        self.flushing.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(feature = "tokio")]
    /// The edge of a [`begin_flush`](Self::begin_flush) has handed everything over.
    pub(crate) fn flushed(&self) {
        self.flushing.fetch_sub(1, Ordering::AcqRel);
        self.ring_all();
    }

    /// True while an edge outside the bus's threads still holds accepted messages.
    pub(crate) fn is_flushing(&self) -> bool {
        self.flushing.load(Ordering::Acquire) != 0
    }

    /// Thread `thread` has run its actors' stop hooks (or died). Idempotent.
    pub(crate) fn hooks_ran(&self, thread: usize) {
        if let Some(done) = self.hooks_done.get(thread) {
            done.store(true, Ordering::Release);
        }
    }

    /// The threads that have not run their stop hooks yet.
    pub(crate) fn hooks_pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.hooks_done
            .iter()
            .enumerate()
            .filter(|(_, done)| !done.load(Ordering::Acquire))
            .map(|(t, _)| t)
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }

    /// Blocks until a stop is requested (the stop driver's sleep).
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
