//! The stop protocol, and the stop driver: a thread of the bus's own that runs it.
//!
//! A stop acts at once, whoever asks for it ([`RunningBus::stop`](crate::RunningBus::stop), a
//! [`StopHandle`](crate::StopHandle), `ctx.request_stop()`, `ctx.fail()`, an escalated panic,
//! or dropping the running bus): the request itself moves the phase to `Draining` (no tick or
//! poll starts after it; `Block` waits into external subscriptions give up) and wakes the stop
//! driver, which `start()` spawned asleep on the request. Nobody has to call `join`: the driver
//! moves every thread through the phases of `control` (`Running` -> `Draining` -> `Stopping` ->
//! `Exit`) with [`drive_stop`]:
//!
//! 1. `Draining`: no more ticks or polls; every inbox drains, and edges outside the bus's
//!    threads (the tokio adapter) hand over what they accepted. Wait until every edge is quiet
//!    (nothing in flight, two sweeps with no counter moving), or until the stop timeout.
//! 2. If the timeout passed, every `Block` wait is called off (`Control::end_waits`): a
//!    publisher stuck on a full ring (a `Block` cycle) counts its message lost and goes on.
//! 3. `Stopping`: each thread runs its actors' `on_stop` once; wait for all of them (a thread
//!    that died counts as done through its guard), then for the edges to be quiet again.
//! 4. `Exit`: waits are called off for good and the threads leave their loops without
//!    handling anything more. Once they have left (or the wait for them is over), external
//!    subscriptions report closed when their rings are empty, and stay closed.
//!
//! Then the driver waits for the threads to leave, joins those that did and records how the
//! stop went ([`Finished`]), which [`RunningBus::join`](crate::RunningBus::join) picks up: it
//! only waits for the driver. The drain never waits for a reader outside the bus (the thread
//! reading a subscription may be the one that will call `join`): edges into external
//! subscriptions are left out of it, and what they hold stays readable.
//!
//! Every wait is bounded by one deadline, the stop timeout from the stop request. A step that
//! starts after it gets [`STOP_GRACE`], and so do the threads to leave after `Exit`, however
//! late that is: the whole stop takes at most the stop timeout plus three grace periods.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::{Control, DRAINING, EXIT, STOPPING};
use super::error::panic_message;
use super::metrics::{EdgeCounters, EdgeSnapshot};

/// How long a step of the stop that starts after the stop timeout may take (the `on_stop`
/// hooks, the last drain, the threads' exit).
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(100);

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

/// How the protocol's steps went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StopOutcome {
    /// Every edge was quiet before the stop timeout: nothing was given up.
    pub(crate) drained: bool,
    /// The threads (by index) that had not run their stop hooks when the stop moved on.
    pub(crate) late_hooks: Vec<usize>,
}

/// Drives the stop protocol through every phase up to `Exit` (see the module docs). Returns
/// without waiting for the threads to leave.
pub(crate) fn drive_stop(
    control: &Control,
    edges: &[&EdgeCounters],
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
    while control.hooks_pending().next().is_some() {
        if clock.step_over() {
            log::warn!("not every bus thread ran its on_stop hooks in time");
            break;
        }
        clock.pause(control);
    }
    let late_hooks = control.hooks_pending().collect();
    clock.begin_step();
    // What the hooks published must drain too: a stop that gives it up did not drain.
    let drained_after_hooks = quiesce(control, edges, clock, |c| c.step_over());
    if !drained_after_hooks {
        control.end_waits();
    }
    control.set_phase(EXIT);
    control.end_waits();
    StopOutcome {
        drained: drained && drained_after_hooks,
        late_hooks,
    }
}

/// Waits until every edge is quiet (nothing in flight, nothing held outside the bus's threads)
/// in two sweeps with no counter moving between them, or until `over` says time is up. Returns
/// whether it got quiet.
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
        if control.is_flushing() {
            return None;
        }
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

impl WallClock {
    fn new(deadline: Instant) -> Self {
        WallClock {
            deadline,
            step_deadline: deadline,
        }
    }

    /// The later of the stop deadline and [`STOP_GRACE`] from now.
    fn grace_from_now(&self) -> Instant {
        let now = Instant::now();
        self.deadline
            .max(now.checked_add(STOP_GRACE).unwrap_or(now))
    }
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
        self.step_deadline = self.grace_from_now();
    }

    fn step_over(&self) -> bool {
        Instant::now() >= self.step_deadline
    }
}

/// What the stop driver hands `join`: how the stop went, thread by thread.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    /// Every edge drained before the stop timeout.
    pub(crate) drained: bool,
    /// Threads whose stop hooks had not run when the stop moved on.
    pub(crate) late_hooks: Vec<String>,
    /// Threads still running when the stop ended (left detached).
    pub(crate) unresponsive: Vec<String>,
    /// The first bus thread that panicked outside the actors' hooks, and its message.
    pub(crate) thread_failure: Option<(String, String)>,
    /// From the stop request to the end of the stop.
    pub(crate) took: Duration,
}

/// Everything the stop driver needs: what to drain, which threads to wait for, and how long.
pub(crate) struct Driver {
    pub(crate) control: Arc<Control>,
    /// The edges the drain waits for (all but those into external subscriptions).
    pub(crate) edges: Vec<Arc<EdgeCounters>>,
    /// The bus's threads, in `Control`'s order.
    pub(crate) threads: Vec<(String, std::thread::JoinHandle<()>)>,
    pub(crate) stop_timeout: Duration,
}

impl Driver {
    /// The stop driver's body: sleeps until a stop is requested, runs the protocol, waits for
    /// the threads to leave and joins them.
    pub(crate) fn run(self) -> Finished {
        let Driver {
            control,
            edges,
            threads,
            stop_timeout,
        } = self;
        control.wait_for_stop_request();
        let requested = Instant::now();
        // `start()` refuses a stop timeout this far out; saturate all the same.
        let deadline = requested
            .checked_add(stop_timeout)
            .unwrap_or_else(|| requested + Duration::from_secs(86_400));
        let mut clock = WallClock::new(deadline);
        let edge_refs: Vec<&EdgeCounters> = edges.iter().map(|e| &**e).collect();
        let outcome = drive_stop(&control, &edge_refs, &mut clock);

        // The threads leave their loops within a round of `Exit`; wait for them until the
        // deadline, and never less than a grace period. One still busy (a handler that does not
        // return) is left running and reported.
        let exit_by = clock.grace_from_now();
        while Instant::now() < exit_by && threads.iter().any(|(_, h)| !h.is_finished()) {
            std::thread::sleep(Duration::from_micros(200));
            control.ring_all();
        }
        // Whatever is left running now is on its own: external subscriptions may close.
        control.threads_gone();
        let mut finished = Finished {
            drained: outcome.drained,
            late_hooks: outcome
                .late_hooks
                .iter()
                .filter_map(|&t| threads.get(t).map(|(name, _)| name.clone()))
                .collect(),
            ..Finished::default()
        };
        for (name, handle) in threads {
            if !handle.is_finished() {
                log::error!(
                    "bus thread '{name}' did not exit within the stop timeout; it is left running"
                );
                finished.unresponsive.push(name);
                continue;
            }
            if let Err(payload) = handle.join() {
                finished
                    .thread_failure
                    .get_or_insert((name, panic_message(&*payload)));
            }
        }
        finished.took = requested.elapsed();
        finished
    }
}
