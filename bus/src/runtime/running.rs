//! A started bus: the handle `start()` returns, its figures while it runs, and `join`.
//!
//! The stop protocol runs on the bus's own stop driver (see `stop`); this handle only asks for
//! a stop and, in `join`, waits for the driver to finish and turns what it recorded into the
//! final report or error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::Control;
use super::error::{panic_message, BusError};
use super::metrics::{ActorReport, CallReport, EdgeReport, EdgeSnapshot, Report, StopReport};
use super::start::{ActorInfo, CallInfo, EdgeInfo};
use super::stop::Finished;

/// A started bus. Stop it with [`stop`](Self::stop) (or a [`StopHandle`], or from an actor with
/// `ctx.request_stop()`): the stop runs at once on the bus's own stop driver, whether or not
/// anyone calls [`join`](Self::join), which waits for it and returns the final figures.
/// Dropping it stops and joins it (within the stop timeout, as `join` does).
#[must_use = "a running bus stops when dropped: keep it, and stop and join it when done"]
pub struct RunningBus {
    pub(super) control: Arc<Control>,
    /// The stop driver, until `join` (or `Drop`) takes its outcome.
    pub(super) driver: Option<std::thread::JoinHandle<Finished>>,
    pub(super) thread_names: Vec<String>,
    pub(super) edges: Vec<EdgeInfo>,
    pub(super) actors: Vec<ActorInfo>,
    /// Every caller of every service.
    pub(super) calls: Vec<CallInfo>,
    pub(super) warnings: Vec<String>,
    /// External handles made by `start()`, until redeemed (`publisher`, `subscription`).
    pub(super) handles: Vec<Option<Box<dyn std::any::Any + Send>>>,
    /// Matches the keys of the handles declared on this bus.
    pub(super) serial: u64,
    /// The bus's renamings (`remap`), for [`RunningBus::topic`].
    pub(super) renames: Arc<super::names::Renames>,
    /// The live counters file, removed when the bus is joined.
    #[cfg(unix)]
    pub(super) counters_file: Option<super::counters_file::CountersFile>,
}

impl std::fmt::Debug for RunningBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningBus")
            .field("threads", &self.thread_names)
            .finish_non_exhaustive()
    }
}

/// A handle that asks a running bus to stop, from any thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct StopHandle {
    control: Arc<Control>,
}

impl StopHandle {
    /// Asks the bus to stop gracefully; the stop runs at once (see [`RunningBus::stop`]).
    pub fn stop(&self) {
        self.control.request_stop();
    }
}

impl RunningBus {
    /// Asks the bus to stop gracefully, and returns at once. The stop runs on the bus's own
    /// stop driver, without anyone calling [`join`](Self::join): from this call on no tick or
    /// `poll` starts, every message published before it (and every message those cause) is
    /// handled, each actor's `on_stop` runs and what it publishes is handled, then the threads
    /// exit and every [`Subscription`](crate::Subscription) reports closed once it has read
    /// what is queued for it; all within the stop timeout
    /// ([`BusBuilder::stop_timeout`](crate::BusBuilder::stop_timeout)) plus under a second. A
    /// publisher waiting on a full `Block` subscription gives up at once (its message counted
    /// lost): the stop never waits for a reader outside the bus.
    pub fn stop(&self) {
        self.control.request_stop();
    }

    /// The name `topic` runs under on this bus: itself, or what
    /// [`BusBuilder::remap`](crate::BusBuilder::remap) renamed it to, as
    /// [`Setup::topic`](crate::Setup::topic) tells an actor's factory. For code outside the bus
    /// that puts a topic's id on a wire or its name in a key (a gateway's external handles), so
    /// that a renamed topic is renamed there too.
    pub fn topic<M: crate::Message>(&self, topic: &crate::Topic<M>) -> crate::Topic<M> {
        crate::Topic::with_name(self.topic_name(topic.name()))
    }

    /// The name a topic declared as `name` runs under on this bus (see [`topic`](Self::topic)).
    pub fn topic_name(&self, name: &crate::TopicName) -> crate::TopicName {
        match self.renames.get(name.as_str()) {
            Some(to) => to.clone(),
            None => name.clone(),
        }
    }

    /// Whether a stop was requested, by anyone: [`stop`](Self::stop), a [`StopHandle`], an
    /// actor, an escalated failure, or a signal ([`stop_on_signals`](Self::stop_on_signals)).
    /// A program whose main thread loops while its bus runs checks it to leave the loop.
    pub fn is_stopping(&self) -> bool {
        self.control.is_stopping()
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
        report_of(&self.edges, &self.actors, &self.calls)
    }

    /// The path of the bus's live counters file, if it writes one
    /// ([`BusBuilder::counters_file`](crate::BusBuilder::counters_file)).
    #[cfg(unix)]
    pub fn counters_path(&self) -> Option<&std::path::Path> {
        self.counters_file.as_ref().map(|f| f.path())
    }

    /// Stops the bus gracefully on the process's first SIGINT or SIGTERM, as
    /// [`stop`](Self::stop) does: the signal no longer kills the process, so that a service
    /// run from a terminal or by a supervisor (systemd, Kubernetes) ends with its stop hooks
    /// run, its final report returned by [`join`](Self::join) (print it there), and its
    /// counters file removed. A second signal, or any once the bus is stopping or stopped,
    /// does what it would have done without this call (the process ends), so an operator can
    /// still kill a bus whose stop hangs.
    ///
    /// The signals are taken by a thread named `llbus-signals` (signal-hook's iterator), not
    /// in a signal handler: the bus's threads are never interrupted by them. Call it once per
    /// bus; each call's thread lives until the process ends. Unix only.
    ///
    /// ```no_run
    /// let mut builder = llbus::Bus::builder();
    /// # builder.actor("idle", |_: &mut llbus::Setup<'_>| Idle);
    /// # struct Idle;
    /// # impl llbus::Actor for Idle { type In = (); fn on_message(&mut self, (): (), _: &mut llbus::Context<'_>) {} }
    /// let bus = builder.start()?;
    /// bus.stop_on_signals()?;
    /// let report = bus.join()?; // returns after Ctrl-C or `kill PID`
    /// println!("{report}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The signals could not be registered, or the thread not spawned.
    #[cfg(unix)]
    pub fn stop_on_signals(&self) -> std::io::Result<()> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let control = Arc::clone(&self.control);
        std::thread::Builder::new()
            .name("llbus-signals".to_owned())
            .spawn(move || {
                for signal in signals.forever() {
                    if control.is_stopping() {
                        // The default action (the process ends); if it returns (the signal
                        // was ignored before), there is nothing more to do for it.
                        let _ = signal_hook::low_level::emulate_default_handler(signal);
                    } else {
                        log::info!(
                            "llbus: {} received: stopping the bus",
                            signal_hook::low_level::signal_name(signal).unwrap_or("a signal")
                        );
                        control.request_stop();
                    }
                }
            })?;
        Ok(())
    }

    /// [`join`](Self::join) with a deadline: waits at most `timeout` for the bus to end (a stop
    /// to be requested and to finish), and returns `Ok` with what `join` would return, or
    /// `Err` with the bus itself, still running (or still stopping), when `timeout` passes
    /// first. The bus is never stopped by this call: ask for a stop first
    /// ([`stop`](Self::stop)) to wait for a stop, or do so with the bus handed back, and join
    /// it again. A stop ends within the stop timeout
    /// ([`BusBuilder::stop_timeout`](crate::BusBuilder::stop_timeout)) even with a handler
    /// that never returns ([`BusError::Unresponsive`]), so after `stop`, a `timeout` a little
    /// longer than the stop timeout always returns `Ok`.
    ///
    /// # Errors
    /// `Err(bus)`: `timeout` passed with the bus not ended. `Ok(Err(e))`: as [`join`](Self::join).
    #[allow(clippy::result_large_err)] // The bus handed back: moved, not copied about.
    pub fn join_timeout(self, timeout: Duration) -> Result<Result<Report, BusError>, RunningBus> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if self.driver.as_ref().is_none_or(|d| d.is_finished()) {
                let mut bus = self;
                return Ok(bus.finish());
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => return Err(self),
                Some(d) => d - now,
                None => JOIN_POLL,
            };
            // NB: a join is no message path; polling the driver's end every millisecond
            // costs nothing measurable and returns within a millisecond of it.
            std::thread::sleep(left.min(JOIN_POLL));
        }
    }

    /// Waits for a stop to be requested and for it to end (see [`stop`](Self::stop)), and
    /// returns the final figures, with how the stop went in [`Report::stop`] (whether it
    /// drained in time, threads whose `on_stop` hooks ran late, how long it took).
    ///
    /// Every edge of the report balances (`published == handled + panicked + dropped +
    /// conflated + lost + in_flight`) with nothing in flight, except an edge into an external
    /// [`Subscription`](crate::Subscription): the stop does not wait for its reader, and what
    /// it has not read yet is `in_flight` (still readable after `join`). If draining takes
    /// longer than the stop timeout, every `Block` wait gives up and what is left is counted
    /// as lost.
    ///
    /// # Errors
    /// [`BusError::ActorPanicked`] if an actor panicked and its policy escalated (the first
    /// one); [`BusError::ActorFailed`] if an actor reported a fatal error with
    /// [`Context::fail`](crate::Context::fail) (the first failure of either kind wins);
    /// [`BusError::ThreadPanicked`] if a bus thread itself failed;
    /// [`BusError::Unresponsive`] if a thread did not exit in time (a handler that never
    /// returns): it is left running, and its edges may show messages in flight. Each carries
    /// the final report.
    pub fn join(mut self) -> Result<Report, BusError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Report, BusError> {
        let Some(driver) = self.driver.take() else {
            // Joined already (only `Drop` can get here after `join`).
            return Ok(self.report());
        };
        let finished = match driver.join() {
            Ok(finished) => finished,
            Err(payload) => Finished {
                thread_failure: Some(("llbus-stop".to_owned(), panic_message(&*payload))),
                ..Finished::default()
            },
        };
        let mut report = self.report();
        report.stop = Some(StopReport {
            drained: finished.drained,
            late_hooks: finished.late_hooks,
            unresponsive: finished.unresponsive.clone(),
            took: finished.took,
        });
        // The bus no longer runs: its counters file goes.
        #[cfg(unix)]
        drop(self.counters_file.take());
        if let Some((thread, message)) = finished.thread_failure {
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
        if !finished.unresponsive.is_empty() {
            return Err(BusError::Unresponsive {
                threads: finished.unresponsive,
                report: Box::new(report),
            });
        }
        Ok(report)
    }
}

/// How often [`RunningBus::join_timeout`] looks whether the bus has ended.
const JOIN_POLL: Duration = Duration::from_millis(1);

impl Drop for RunningBus {
    fn drop(&mut self) {
        if self.driver.is_some() {
            self.control.request_stop();
            let _ = self.finish();
        }
    }
}

/// The figures of `edges`, `actors` and `calls` now.
pub(super) fn report_of(edges: &[EdgeInfo], actors: &[ActorInfo], calls: &[CallInfo]) -> Report {
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
        services: calls.iter().map(|c| call_report_of(c, true)).collect(),
        stop: None,
    }
}

/// The report row of caller `c` now; with its caller's and server's names only if `named`
/// (the counters file asks without, so that it allocates nothing).
pub(super) fn call_report_of(c: &CallInfo, named: bool) -> CallReport {
    let snap = c.counters.snapshot();
    let name = |n: &String| if named { n.clone() } else { String::new() };
    CallReport {
        service: c.service.clone(),
        caller: name(&c.caller),
        server: name(&c.server),
        calls: snap.calls,
        replies: snap.replies,
        errors: snap.errors(),
        timeouts: snap.timeouts,
        dropped: snap.dropped,
        server_panicked: snap.server_panicked,
        stopped: snap.stopped,
        queue_full: snap.queue_full,
        refused: snap.refused,
        // Never negative (see `CallCounters::snapshot`); clamped all the same.
        in_flight: u64::try_from(snap.in_flight()).unwrap_or(0),
        late: snap.late,
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
        topic: e.topic.clone(),
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
