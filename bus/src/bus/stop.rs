//! The running bus and its stop protocol.
//!
//! A stop moves every thread through the phases of `control` (`Running` -> `Draining` ->
//! `Stopping` -> `Exit`). `join` drives them: it waits until every edge is quiet, lets each
//! thread run its actors' `on_stop`, waits until what those published is handled, and lets the
//! threads exit.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::{Control, DRAINING, EXIT, STOPPING};
use super::error::{panic_message, BusError};
use super::metrics::{ActorReport, EdgeReport, Report};
use super::start::{ActorInfo, EdgeInfo};

/// A started bus. Stop it with [`stop`](Self::stop) (or from an actor with
/// `ctx.request_stop()`), then [`join`](Self::join) for the final figures. Dropping it stops and
/// joins it.
pub struct RunningBus {
    pub(super) control: Arc<Control>,
    pub(super) threads: Vec<(String, std::thread::JoinHandle<()>)>,
    pub(super) edges: Vec<EdgeInfo>,
    pub(super) actors: Vec<ActorInfo>,
    pub(super) warnings: Vec<String>,
    pub(super) stop_timeout: Duration,
    pub(super) joined: bool,
}

impl std::fmt::Debug for RunningBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningBus")
            .field(
                "threads",
                &self.threads.iter().map(|t| &t.0).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A handle that asks a running bus to stop, from any thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct StopHandle {
    control: Arc<Control>,
}

impl StopHandle {
    /// Asks the bus to stop gracefully.
    pub fn stop(&self) {
        self.control.request_stop();
    }
}

impl RunningBus {
    /// Asks the bus to stop gracefully; [`join`](Self::join) waits for it.
    pub fn stop(&self) {
        self.control.request_stop();
    }

    /// A handle to stop the bus from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            control: Arc::clone(&self.control),
        }
    }

    /// Warnings from wiring, such as topics published but never subscribed.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The figures now, taken while the bus runs.
    pub fn report(&self) -> Report {
        Report {
            edges: self
                .edges
                .iter()
                .map(|e| {
                    let p = &e.counters.publisher;
                    let s = &e.counters.subscriber;
                    EdgeReport {
                        topic: e.topic,
                        publisher: e.publisher.clone(),
                        subscriber: e.subscriber.clone(),
                        policy: e.policy,
                        published: p.sent.get(),
                        handled: s.handled.get(),
                        dropped: p.dropped.get(),
                        conflated: p.conflated.get(),
                        waited: p.waited.get(),
                        lost: p.lost.get() + s.lost.get(),
                        max_depth: s.max_depth.get(),
                    }
                })
                .collect(),
            actors: self
                .actors
                .iter()
                .map(|a| ActorReport {
                    name: a.name.clone(),
                    thread: a.thread.clone(),
                    handled: a.counters.handled.get(),
                    ticks: a.counters.ticks.get(),
                    idle_rounds: a.counters.idle_rounds.get(),
                    restarts: a.counters.restarts.get(),
                    panics: a.counters.panics.get(),
                    metrics: a.counters.named_snapshot(),
                })
                .collect(),
        }
    }

    /// Waits for a stop to be requested, stops the bus gracefully, joins every thread and
    /// returns the final figures.
    ///
    /// The stop drains: every message published before it (and every message those cause) is
    /// handled, then each actor's `on_stop` runs, then what they publish is handled, then the
    /// threads exit. If draining takes longer than the stop timeout, what is left is counted as
    /// lost.
    ///
    /// # Errors
    /// [`BusError::ActorPanicked`] if an actor with the `Escalate` policy panicked (the first
    /// one); [`BusError::ThreadPanicked`] if a bus thread itself failed.
    pub fn join(mut self) -> Result<Report, BusError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Report, BusError> {
        self.joined = true;
        self.control.wait_for_stop_request();
        self.control.set_phase(DRAINING);
        let deadline = Instant::now() + self.stop_timeout;
        if !self.quiesce(deadline) {
            log::warn!(
                "the bus did not drain within {:?}; what is left is counted as lost",
                self.stop_timeout
            );
        }
        self.control.set_phase(STOPPING);
        let threads = self.threads.len();
        while self.control.stop_hooks_done.load(Ordering::Acquire) < threads
            && Instant::now() < deadline + self.stop_timeout
            && !self.threads.iter().any(|(_, h)| h.is_finished())
        {
            std::thread::sleep(Duration::from_micros(200));
            self.control.ring_all();
        }
        self.quiesce(Instant::now() + self.stop_timeout);
        self.control.set_phase(EXIT);
        let mut thread_failure = None;
        for (name, handle) in std::mem::take(&mut self.threads) {
            if let Err(payload) = handle.join() {
                thread_failure.get_or_insert((name, panic_message(&*payload)));
            }
        }
        let report = self.report();
        if let Some((thread, message)) = thread_failure {
            return Err(BusError::ThreadPanicked {
                thread,
                message,
                report: Box::new(report),
            });
        }
        match self.control.escalation() {
            Some(e) => Err(BusError::ActorPanicked {
                actor: e.actor,
                message: e.message,
                report: Box::new(report),
            }),
            None => Ok(report),
        }
    }

    /// Waits until every edge is quiet (nothing in flight) in two sweeps with no counter moving
    /// between them, or until `deadline`. Returns whether it got quiet.
    ///
    /// A handler's publishes are counted before its own message counts as handled, so a message
    /// in the middle of a cascade always shows on some edge; and counters only grow, so two equal
    /// sweeps mean nothing moved between them.
    fn quiesce(&self, deadline: Instant) -> bool {
        let sweep = || -> Option<Vec<[u64; 5]>> {
            let mut raw = Vec::with_capacity(self.edges.len());
            for e in &self.edges {
                if e.counters.in_flight() != 0 {
                    return None;
                }
                raw.push(e.counters.raw());
            }
            Some(raw)
        };
        loop {
            if let Some(first) = sweep() {
                std::thread::sleep(Duration::from_micros(200));
                if sweep().as_ref() == Some(&first) {
                    return true;
                }
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.control.ring_all();
        }
    }
}

impl Drop for RunningBus {
    fn drop(&mut self) {
        if !self.joined {
            self.control.request_stop();
            let _ = self.finish();
        }
    }
}
