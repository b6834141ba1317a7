//! The state every thread of a running bus shares: the stop phase, the go signal, the first
//! escalated error, and the doorbells to ring when the phase changes.
//!
//! Phases only move forward: `Running` -> `Draining` (no more ticks or polls; inboxes drain) ->
//! `Stopping` (each thread runs its actors' `on_stop` once, then keeps draining) -> `Exit`.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::wait::Doorbell;

pub(crate) const RUNNING: u8 = 0;
pub(crate) const DRAINING: u8 = 1;
pub(crate) const STOPPING: u8 = 2;
pub(crate) const EXIT: u8 = 3;

pub(crate) const GO_WAIT: u8 = 0;
pub(crate) const GO_RUN: u8 = 1;
pub(crate) const GO_ABORT: u8 = 2;

/// An escalated failure: the actor and its panic message.
#[derive(Clone, Debug)]
pub(crate) struct Escalation {
    pub(crate) actor: String,
    pub(crate) message: String,
}

#[derive(Debug)]
pub(crate) struct Control {
    phase: AtomicU8,
    go: AtomicU8,
    stop_requested: AtomicBool,
    /// Wakes `join` when a stop is requested.
    stop_lock: Mutex<bool>,
    stop_bell: Condvar,
    escalation: Mutex<Option<Escalation>>,
    /// Threads that have run their actors' `on_stop` hooks.
    pub(crate) stop_hooks_done: AtomicUsize,
    doorbells: Vec<Arc<Doorbell>>,
}

impl Control {
    pub(crate) fn new(doorbells: Vec<Arc<Doorbell>>) -> Self {
        Control {
            phase: AtomicU8::new(RUNNING),
            go: AtomicU8::new(GO_WAIT),
            stop_requested: AtomicBool::new(false),
            stop_lock: Mutex::new(false),
            stop_bell: Condvar::new(),
            escalation: Mutex::new(None),
            stop_hooks_done: AtomicUsize::new(0),
            doorbells,
        }
    }

    #[inline]
    pub(crate) fn phase(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    pub(crate) fn set_phase(&self, phase: u8) {
        self.phase.fetch_max(phase, Ordering::AcqRel);
        self.ring_all();
    }

    pub(crate) fn ring_all(&self) {
        for bell in &self.doorbells {
            bell.ring();
        }
    }

    pub(crate) fn go(&self) -> u8 {
        self.go.load(Ordering::Acquire)
    }

    pub(crate) fn set_go(&self, go: u8) {
        self.go.store(go, Ordering::Release);
    }

    pub(crate) fn request_stop(&self) {
        if !self.stop_requested.swap(true, Ordering::AcqRel) {
            let mut requested = self
                .stop_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
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
        let mut requested = self
            .stop_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while !*requested {
            requested = self
                .stop_bell
                .wait(requested)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Records the first escalated failure and stops the bus.
    pub(crate) fn escalate(&self, actor: &str, message: &str) {
        let mut slot = self
            .escalation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(Escalation {
                actor: actor.to_owned(),
                message: message.to_owned(),
            });
        }
        drop(slot);
        self.request_stop();
    }

    pub(crate) fn escalation(&self) -> Option<Escalation> {
        self.escalation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
