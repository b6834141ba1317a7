//! The running bus and its stop protocol.
//!
//! A stop moves every thread through the phases of `control` (`Running` -> `Draining` ->
//! `Stopping` -> `Exit`), driven by [`drive_stop`] on the thread that calls `join`:
//!
//! 1. `Draining`: no more ticks or polls; every inbox drains. Wait until every edge is quiet
//!    (nothing in flight, two sweeps with no counter moving), or until the stop timeout.
//! 2. If the timeout passed, every `Block` wait is called off (`Control::end_waits`): a
//!    publisher stuck on a full ring (a `Block` cycle) counts its message lost and goes on.
//! 3. `Stopping`: each thread runs its actors' `on_stop` once; wait for all of them (a thread
//!    that died counts as done through its guard), then for the edges to be quiet again.
//! 4. `Exit`: waits are called off for good and the threads leave their loops.
//!
//! Every wait is bounded by one deadline, the stop timeout from the stop request; a step that
//! starts after it gets [`STOP_GRACE`]; `join` gives the threads until the deadline plus
//! [`STOP_MARGIN`] to exit and reports any that did not ([`BusError::Unresponsive`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::{Control, DRAINING, EXIT, STOPPING};
use super::error::{panic_message, BusError};
use super::metrics::{ActorReport, EdgeCounters, EdgeReport, EdgeSnapshot, Report};
use super::start::{ActorInfo, EdgeInfo};
use crate::sync::Ordering;

/// How long a step of the stop that starts after the stop timeout may take (the `on_stop`
/// hooks, the last drain).
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(100);

/// How long after the stop timeout `join` waits for the threads to exit, at most.
pub(crate) const STOP_MARGIN: Duration = Duration::from_millis(400);

/// The pace and the clock of [`drive_stop`]: real time for a bus, a step count for the loom
/// model.
pub(crate) trait StopClock {
    /// Waits a little before looking again (and wakes every sleeping thread).
    fn pause(&mut self, control: &Control);
    /// True once the drain phase's deadline (the stop timeout) has passed.
    fn drain_over(&self) -> bool;
    /// Starts a later step; `step_over` then says when it must give up.
    fn begin_step(&mut self);
    /// True once the current later step must give up.
    fn step_over(&self) -> bool;
}

/// How a stop went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StopOutcome {
    /// Every edge was quiet before the stop timeout: nothing was given up.
    pub(crate) drained: bool,
    /// Every thread ran its stop hooks in time.
    pub(crate) hooks_done: bool,
}

/// Drives the stop protocol through every phase up to `Exit` (see the module docs). Returns
/// without waiting for the threads to leave.
pub(crate) fn drive_stop(
    control: &Control,
    edges: &[&EdgeCounters],
    threads: usize,
    clock: &mut impl StopClock,
) -> StopOutcome {
    control.set_phase(DRAINING);
    let drained = quiesce(control, edges, clock, |c| c.drain_over());
    if !drained {
        log::warn!(
            "the bus did not drain within its stop timeout; Block waits give up and what is left is counted as lost"
        );
        control.end_waits();
    }
    control.set_phase(STOPPING);
    clock.begin_step();
    let mut hooks_done = true;
    while control.stop_hooks_done.load(Ordering::Acquire) < threads {
        if clock.step_over() {
            hooks_done = false;
            log::warn!("not every bus thread ran its on_stop hooks in time");
            break;
        }
        clock.pause(control);
    }
    clock.begin_step();
    if !quiesce(control, edges, clock, |c| c.step_over()) {
        control.end_waits();
    }
    control.set_phase(EXIT);
    control.end_waits();
    StopOutcome {
        drained,
        hooks_done,
    }
}

/// Waits until every edge is quiet (nothing in flight) in two sweeps with no counter moving
/// between them, or until `over` says time is up. Returns whether it got quiet.
///
/// A handler's publishes are counted before its own message counts as handled, so a message
/// in the middle of a cascade always shows on some edge; and counters only grow, so two equal
/// sweeps mean nothing moved between them.
fn quiesce<C: StopClock>(
    control: &Control,
    edges: &[&EdgeCounters],
    clock: &mut C,
    over: impl Fn(&C) -> bool,
) -> bool {
    let sweep = || -> Option<Vec<EdgeSnapshot>> {
        let mut all = Vec::with_capacity(edges.len());
        for e in edges {
            if e.in_flight() != 0 {
                return None;
            }
            all.push(e.snapshot());
        }
        Some(all)
    };
    loop {
        if let Some(first) = sweep() {
            clock.pause(control);
            if sweep().as_ref() == Some(&first) {
                return true;
            }
        } else {
            clock.pause(control);
        }
        if over(clock) {
            return false;
        }
    }
}

/// Real time: the stop timeout from the stop request, then [`STOP_GRACE`] per later step.
struct WallClock {
    deadline: Instant,
    step_deadline: Instant,
}

impl StopClock for WallClock {
    fn pause(&mut self, control: &Control) {
        std::thread::sleep(Duration::from_micros(200));
        control.ring_all();
    }

    fn drain_over(&self) -> bool {
        Instant::now() >= self.deadline
    }

    fn begin_step(&mut self) {
        let now = Instant::now();
        self.step_deadline = self
            .deadline
            .max(now.checked_add(STOP_GRACE).unwrap_or(now));
    }

    fn step_over(&self) -> bool {
        Instant::now() >= self.step_deadline
    }
}

/// A started bus. Stop it with [`stop`](Self::stop) (or from an actor with
/// `ctx.request_stop()`), then [`join`](Self::join) for the final figures. Dropping it stops and
/// joins it (within the stop timeout, as `join` does).
#[must_use = "a running bus stops when dropped: keep it, and stop and join it when done"]
pub struct RunningBus {
    pub(super) control: Arc<Control>,
    pub(super) threads: Vec<(String, std::thread::JoinHandle<()>)>,
    pub(super) edges: Vec<EdgeInfo>,
    pub(super) actors: Vec<ActorInfo>,
    pub(super) warnings: Vec<String>,
    pub(super) stop_timeout: Duration,
    pub(super) joined: bool,
    /// External handles made by `start()`, until redeemed (`publisher`, `subscription`).
    pub(super) handles: Vec<Option<Box<dyn std::any::Any + Send>>>,
    /// Matches the keys of the handles declared on this bus.
    pub(super) serial: u64,
    /// The live counters file, removed when the bus is joined.
    #[cfg(unix)]
    pub(super) counters_file: Option<super::counters_file::CountersFile>,
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

    /// Every counter of the report, read now while the bus runs: the same figures as
    /// [`report`](Self::report). Reading takes no lock that a hot path takes and makes no
    /// syscall; the bus's threads do no extra work for it (each counter is a plain atomic
    /// that its one writer thread stores, and this reads). Every edge balances in it, with
    /// what is still queued as `in_flight`. Only the actors' named metrics are read under
    /// the lock they are registered with, which no message path takes.
    pub fn snapshot(&self) -> Report {
        self.report()
    }

    /// The figures now, taken while the bus runs.
    pub fn report(&self) -> Report {
        report_of(&self.edges, &self.actors)
    }

    /// The path of the bus's live counters file, if it writes one
    /// ([`BusBuilder::counters_file`](crate::BusBuilder::counters_file)).
    #[cfg(unix)]
    pub fn counters_path(&self) -> Option<&std::path::Path> {
        self.counters_file.as_ref().map(|f| f.path())
    }

    /// Waits for a stop to be requested, stops the bus gracefully, joins every thread and
    /// returns the final figures.
    ///
    /// The stop drains: every message published before it (and every message those cause) is
    /// handled, then each actor's `on_stop` runs, then what they publish is handled, then the
    /// threads exit. The whole stop takes at most the stop timeout
    /// ([`BusBuilder::stop_timeout`](crate::BusBuilder::stop_timeout), default 10 s) plus a
    /// margin of under a second: if draining takes longer, every `Block` wait gives up and what
    /// is left is counted as lost. Every edge of the report balances (`published == handled +
    /// panicked + dropped + conflated + lost + in_flight`) with nothing in flight, except an
    /// edge into an external [`Subscription`](crate::Subscription): the stop does not wait for
    /// its reader, and what it has not read yet is `in_flight` (still readable after `join`).
    ///
    /// # Errors
    /// [`BusError::ActorPanicked`] if an actor panicked and its policy escalated (the first
    /// one); [`BusError::ActorFailed`] if an actor reported a fatal error with
    /// [`Context::fail`](crate::Context::fail) (the first failure of either kind wins);
    /// [`BusError::ThreadPanicked`] if a bus thread itself failed;
    /// [`BusError::Unresponsive`] if a thread did not exit in time (a handler that never
    /// returns): it is left running, and its edges may show messages in flight.
    pub fn join(mut self) -> Result<Report, BusError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Report, BusError> {
        self.joined = true;
        self.control.wait_for_stop_request();
        let now = Instant::now();
        // `start()` refuses a stop timeout this far out; saturate all the same.
        let deadline = now
            .checked_add(self.stop_timeout)
            .unwrap_or_else(|| now + Duration::from_secs(86_400));
        let mut clock = WallClock {
            deadline,
            step_deadline: deadline,
        };
        // The drain waits for every edge but those into external subscriptions, whose reader
        // may well be this thread; what they have not read stays readable after `join`.
        let edges: Vec<&EdgeCounters> = self
            .edges
            .iter()
            .filter(|e| !e.to_handle)
            .map(|e| &*e.counters)
            .collect();
        drive_stop(&self.control, &edges, self.threads.len(), &mut clock);

        // The threads leave their loops within a round; wait for them until the deadline and
        // the margin, at most. One that is still busy (a handler that does not return) is left
        // running and reported.
        let after = Instant::now();
        let hard_end = deadline.checked_add(STOP_MARGIN).unwrap_or(deadline);
        let exit_by = after
            .checked_add(STOP_GRACE)
            .unwrap_or(after)
            .max(deadline)
            .min(hard_end);
        while Instant::now() < exit_by && self.threads.iter().any(|(_, h)| !h.is_finished()) {
            std::thread::sleep(Duration::from_micros(200));
            self.control.ring_all();
        }
        let mut thread_failure = None;
        let mut unresponsive = Vec::new();
        for (name, handle) in std::mem::take(&mut self.threads) {
            if !handle.is_finished() {
                log::error!(
                    "bus thread '{name}' did not exit within the stop timeout; it is left running"
                );
                unresponsive.push(name);
                continue;
            }
            if let Err(payload) = handle.join() {
                thread_failure.get_or_insert((name, panic_message(&*payload)));
            }
        }
        let report = self.report();
        // The bus no longer runs: its counters file goes.
        #[cfg(unix)]
        drop(self.counters_file.take());
        if let Some((thread, message)) = thread_failure {
            return Err(BusError::ThreadPanicked {
                thread,
                message,
                report: Box::new(report),
            });
        }
        if let Some(e) = self.control.escalation() {
            return Err(if e.reported {
                BusError::ActorFailed {
                    actor: e.actor,
                    error: e.message,
                    report: Box::new(report),
                }
            } else {
                BusError::ActorPanicked {
                    actor: e.actor,
                    message: e.message,
                    report: Box::new(report),
                }
            });
        }
        if !unresponsive.is_empty() {
            return Err(BusError::Unresponsive {
                threads: unresponsive,
                report: Box::new(report),
            });
        }
        Ok(report)
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

/// The figures of `edges` and `actors` now.
pub(super) fn report_of(edges: &[EdgeInfo], actors: &[ActorInfo]) -> Report {
    Report {
        edges: edges
            .iter()
            .map(|e| {
                edge_report_of(
                    e,
                    &e.counters.snapshot(),
                    e.publisher.clone(),
                    e.subscriber.clone(),
                )
            })
            .collect(),
        actors: actors
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

/// The report row of edge `e` from `snap`, with the given publisher and subscriber names (the
/// counters file passes empty ones, so that it allocates nothing).
pub(super) fn edge_report_of(
    e: &EdgeInfo,
    snap: &EdgeSnapshot,
    publisher: String,
    subscriber: String,
) -> EdgeReport {
    EdgeReport {
        topic: e.topic,
        publisher,
        subscriber,
        policy: e.policy,
        published: snap.published(),
        handled: snap.handled,
        panicked: snap.panicked,
        dropped: snap.dropped,
        conflated: snap.conflated,
        waited: snap.waited,
        lost: snap.publisher_lost + snap.subscriber_lost,
        // Never negative (see `EdgeCounters::snapshot`); clamped all the same.
        in_flight: u64::try_from(snap.in_flight()).unwrap_or(0),
        max_depth: snap.max_depth,
    }
}
