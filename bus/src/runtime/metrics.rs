//! Counters per edge, per actor and per caller of a service, and the report built from them.
//!
//! Every counter has exactly one writer thread (noted beside it), which updates it with a plain
//! load and `Release` store (no read-modify-write); any thread may read a snapshot. Each block
//! of counters sits on cache lines of its own (`CachePadded`), so the publisher's and the
//! subscriber's counters never share a line with each other or with the ring.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::topic::TopicName;

/// A counter with one writer: increments are a load and a store, not an atomic RMW.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    pub(crate) fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Release);
    }

    /// Takes back an `add(n)` of this writer's (a message counted as sent before a push that
    /// then found the ring full).
    #[inline(always)]
    pub(crate) fn sub(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_sub(n), Ordering::Release);
    }

    /// Adds `n` with an atomic read-modify-write, for a counter that more than one thread may
    /// write at once (an edge's `lost` once its subscriber's values can be dropped outside the
    /// bus: the tokio adapter). Every writer of such a counter must use this; none is on a hot
    /// path.
    #[inline]
    pub(crate) fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }

    #[inline(always)]
    pub(crate) fn raise_to(&self, v: u64) {
        if v > self.0.load(Ordering::Relaxed) {
            self.0.store(v, Ordering::Release);
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The publisher's side of an edge's counters.
///
/// Every publish on the edge is counted exactly once, in `sent`, `dropped` or `lost`. `sent`
/// is counted *before* the value enters the ring (and taken back if the ring was full), so a
/// reader that loads the subscriber's counters first never sees more handled than sent.
#[derive(Debug, Default)]
pub(crate) struct PublisherCounters {
    /// Messages put into the ring or slot. Writer: the publisher.
    pub(crate) sent: Counter,
    /// Messages refused because the ring was full (`DropNewest`). Writer: the publisher.
    pub(crate) dropped: Counter,
    /// Unread values overwritten (`Latest`). Writer: the publisher.
    pub(crate) conflated: Counter,
    /// Publishes that found the ring full and had to wait (`Block`). Writer: the publisher.
    pub(crate) waited: Counter,
    /// Messages published after the subscriber was gone, or given up by a `Block` wait at a
    /// stop. Never put into the ring. Writer: the publisher.
    pub(crate) lost: Counter,
}

/// The subscriber's side of an edge's counters.
#[derive(Debug, Default)]
pub(crate) struct SubscriberCounters {
    /// Messages whose handler returned. Writer: the subscriber.
    pub(crate) handled: Counter,
    /// Messages whose handler panicked. Writer: the subscriber.
    pub(crate) panicked: Counter,
    /// Messages that were in the ring or slot when the subscriber stopped for good, plus what
    /// the last end of the edge to go found still unaccounted for (see
    /// [`EdgeCounters::end_dropped`]), plus what a tokio adapter took but never delivered.
    /// Writers: the subscriber's end as it goes, a publisher that finds it gone, the last end,
    /// and the adapter's undelivered values as they are dropped; all with `add_shared`.
    pub(crate) lost: Counter,
    /// The highest queue depth the subscriber saw. Writer: the subscriber.
    pub(crate) max_depth: Counter,
    /// 1 once the subscriber's end is gone: nothing more will be handled. Writer: subscriber.
    pub(crate) gone: Counter,
}

/// Both sides of one edge's counters, each on its own cache lines.
///
/// Invariant (the balance): `sent == handled + panicked + conflated + subscriber.lost +
/// in_flight` with `in_flight >= 0` in every snapshot, and `in_flight == 0` once both ends are
/// dropped.
#[derive(Debug)]
pub(crate) struct EdgeCounters {
    pub(crate) publisher: CachePadded<PublisherCounters>,
    pub(crate) subscriber: CachePadded<SubscriberCounters>,
    /// Ends of the edge still alive (2, 1, 0): the one that takes it to 0 settles the edge.
    ends: AtomicUsize,
}

impl Default for EdgeCounters {
    fn default() -> Self {
        EdgeCounters {
            publisher: CachePadded::default(),
            subscriber: CachePadded::default(),
            ends: AtomicUsize::new(2),
        }
    }
}

/// One consistent reading of an edge's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EdgeSnapshot {
    pub(crate) sent: u64,
    pub(crate) dropped: u64,
    pub(crate) conflated: u64,
    pub(crate) waited: u64,
    pub(crate) publisher_lost: u64,
    pub(crate) handled: u64,
    pub(crate) panicked: u64,
    pub(crate) subscriber_lost: u64,
    pub(crate) max_depth: u64,
    pub(crate) gone: bool,
}

impl EdgeSnapshot {
    /// Every publish: what entered the ring, what was dropped, and what was lost at once.
    pub(crate) fn published(&self) -> u64 {
        self.sent + self.dropped + self.publisher_lost
    }

    /// Messages in the ring or slot, neither handled nor counted otherwise yet.
    pub(crate) fn in_flight(&self) -> i128 {
        i128::from(self.sent)
            - i128::from(self.conflated)
            - i128::from(self.handled)
            - i128::from(self.panicked)
            - i128::from(self.subscriber_lost)
    }
}

impl EdgeCounters {
    /// Reads every counter. The subscriber's side is read first and, on the publisher's,
    /// `conflated` before `sent`: each subscriber count and each conflation of a message is
    /// stored after that message's `sent` (Release stores, Acquire loads, and the ring's own
    /// Release/Acquire pair in between), so the reading never shows a negative `in_flight`.
    pub(crate) fn snapshot(&self) -> EdgeSnapshot {
        let s = &self.subscriber;
        let p = &self.publisher;
        let (gone, handled, panicked, subscriber_lost, max_depth) = (
            s.gone.get() != 0,
            s.handled.get(),
            s.panicked.get(),
            s.lost.get(),
            s.max_depth.get(),
        );
        let (conflated, publisher_lost, dropped, waited) = (
            p.conflated.get(),
            p.lost.get(),
            p.dropped.get(),
            p.waited.get(),
        );
        let sent = p.sent.get();
        let snap = EdgeSnapshot {
            sent,
            dropped,
            conflated,
            waited,
            publisher_lost,
            handled,
            panicked,
            subscriber_lost,
            max_depth,
            gone,
        };
        debug_assert!(snap.in_flight() >= 0, "negative in-flight: {snap:?}");
        snap
    }

    /// Messages accepted but neither handled, conflated nor counted lost: zero when the edge is
    /// quiet, and for good once the subscriber is gone.
    pub(crate) fn in_flight(&self) -> i128 {
        let snap = self.snapshot();
        if snap.gone {
            // Whatever a racing publish left in a ring nobody reads is settled when the
            // publisher's end goes; it can no longer be handled, so the drain need not wait.
            0
        } else {
            snap.in_flight()
        }
    }

    /// Called by each end of the edge when it is dropped, after its own counting. The last end
    /// to go (both are gone, so every counter is final) counts what is still unaccounted for
    /// as lost: values a publisher pushed while its subscriber was leaving, between the
    /// subscriber counting what was queued and the publisher seeing it gone.
    pub(crate) fn end_dropped(&self) {
        if self.ends.fetch_sub(1, Ordering::AcqRel) == 1 {
            let left = self.snapshot().in_flight();
            debug_assert!(left >= 0);
            if left > 0 {
                self.subscriber.lost.add_shared(left as u64);
            }
        }
    }
}

/// One actor's counters. Writer: the thread that runs the actor.
#[derive(Debug, Default)]
pub(crate) struct ActorCounters {
    pub(crate) handled: Counter,
    pub(crate) ticks: Counter,
    pub(crate) idle_rounds: Counter,
    pub(crate) restarts: Counter,
    pub(crate) panics: Counter,
    /// Named metrics the actor registered in its factory. Locked only to register (in a
    /// factory) and to read a report, never on the message path.
    pub(crate) named: std::sync::Mutex<Vec<(String, Metric)>>,
}

impl ActorCounters {
    /// The metric called `name`, registering it on first use (a restarted actor gets the same
    /// one back, so its figures carry on).
    pub(crate) fn metric(&self, name: &str) -> Metric {
        let mut named = self
            .named
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, m)) = named.iter().find(|(n, _)| n == name) {
            return m.clone();
        }
        let m = Metric::default();
        named.push((name.to_owned(), m.clone()));
        m
    }

    pub(crate) fn named_snapshot(&self) -> Vec<(String, u64)> {
        self.named
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(n, m)| (n.clone(), m.get()))
            .collect()
    }
}

/// The counts of one caller's calls of one service. Writer: the caller's thread (the actor's
/// runner, or the thread that holds the handle), with plain stores.
///
/// Every call is counted once in `calls` as it starts and once more as it ends, in `replies` or
/// in one error's count, so `calls == replies + errors + in_flight` with `in_flight >= 0` in
/// every snapshot (each end is counted after its call; a snapshot reads the ends first).
#[derive(Debug, Default)]
pub(crate) struct CallCounters {
    pub(crate) calls: Counter,
    pub(crate) replies: Counter,
    pub(crate) timeouts: Counter,
    pub(crate) dropped: Counter,
    pub(crate) server_panicked: Counter,
    pub(crate) stopped: Counter,
    pub(crate) queue_full: Counter,
    pub(crate) refused: Counter,
    /// Replies that came after their call had ended (not calls: counted apart).
    pub(crate) late: Counter,
}

/// One reading of a caller's [`CallCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallSnapshot {
    pub(crate) calls: u64,
    pub(crate) replies: u64,
    pub(crate) timeouts: u64,
    pub(crate) dropped: u64,
    pub(crate) server_panicked: u64,
    pub(crate) stopped: u64,
    pub(crate) queue_full: u64,
    pub(crate) refused: u64,
    pub(crate) late: u64,
}

impl CallSnapshot {
    /// The calls that ended with an error, of every kind.
    pub(crate) fn errors(&self) -> u64 {
        self.timeouts
            + self.dropped
            + self.server_panicked
            + self.stopped
            + self.queue_full
            + self.refused
    }

    /// The calls that have not ended yet.
    pub(crate) fn in_flight(&self) -> i128 {
        i128::from(self.calls) - i128::from(self.replies) - i128::from(self.errors())
    }
}

impl CallCounters {
    /// Counts the end of a call: its reply, or its error.
    #[inline]
    pub(crate) fn end(&self, end: Result<(), crate::service::CallError>) {
        use crate::service::CallError;
        match end {
            Ok(()) => &self.replies,
            Err(CallError::Timeout) => &self.timeouts,
            Err(CallError::Dropped) => &self.dropped,
            Err(CallError::ServerPanicked) => &self.server_panicked,
            Err(CallError::Stopped) => &self.stopped,
            Err(CallError::QueueFull) => &self.queue_full,
            Err(CallError::Refused) => &self.refused,
        }
        .add(1);
    }

    /// Reads every count: the ends before the calls (each end is stored after its call's
    /// count, by the one writer), so the reading never shows a negative `in_flight`.
    pub(crate) fn snapshot(&self) -> CallSnapshot {
        let (replies, timeouts, dropped, server_panicked, stopped, queue_full, refused, late) = (
            self.replies.get(),
            self.timeouts.get(),
            self.dropped.get(),
            self.server_panicked.get(),
            self.stopped.get(),
            self.queue_full.get(),
            self.refused.get(),
            self.late.get(),
        );
        let snap = CallSnapshot {
            calls: self.calls.get(),
            replies,
            timeouts,
            dropped,
            server_panicked,
            stopped,
            queue_full,
            refused,
            late,
        };
        debug_assert!(snap.in_flight() >= 0, "negative calls in flight: {snap:?}");
        snap
    }
}

/// A named figure of an actor's own (datagrams sent, bytes received, a gauge of subscribers),
/// registered in its factory with `Setup::metric` and shown in the bus's [`Report`].
///
/// Updates are atomic read-modify-writes on a cache line of its own: no lock, and no
/// increment is lost when clones are updated from several threads. Cloning shares the same
/// figure.
#[derive(Clone, Debug, Default)]
pub struct Metric(std::sync::Arc<CachePadded<std::sync::atomic::AtomicU64>>);

impl Metric {
    /// Adds `n` (wrapping). Safe from any thread: concurrent adds are never lost.
    // NB: an uncontended `fetch_add` costs a few ns more than a load and a store, which would
    // lose increments when clones are updated from several threads; metrics count datagrams
    // and events, not ring operations.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the value (for gauges).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, std::sync::atomic::Ordering::Release);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Figures for one publisher-subscriber edge of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeReport {
    /// The topic name.
    pub topic: TopicName,
    /// The publishing actor.
    pub publisher: String,
    /// The subscribing actor.
    pub subscriber: String,
    /// The subscription's backpressure policy.
    pub policy: crate::runtime::Backpressure,
    /// Every message published on this edge: `handled + panicked + dropped + conflated + lost
    /// + in_flight`, exactly, in every report.
    pub published: u64,
    /// Messages whose handler returned.
    pub handled: u64,
    /// Messages whose handler panicked (each one is handled by the subscriber's supervision
    /// policy, and not counted as handled).
    pub panicked: u64,
    /// Messages refused because the ring was full (`DropNewest`).
    pub dropped: u64,
    /// Values overwritten before the subscriber read them (`Latest`).
    pub conflated: u64,
    /// Publishes that had to wait for room (`Block`).
    pub waited: u64,
    /// Messages lost: published after the subscriber was gone (its `Stop` policy, an
    /// escalation), still queued when it went, or given up by a `Block` wait when a stop ran
    /// past its drain phase (the stop timeout).
    pub lost: u64,
    /// Messages in the ring or slot, not yet handled. Always 0 in the report `join` returns
    /// (unless `join` reports a thread that did not exit), but for an edge into an external
    /// `Subscription`, whose unread messages stay there for its reader.
    pub in_flight: u64,
    /// The highest number of queued messages the subscriber saw.
    pub max_depth: u64,
}

/// Figures for one actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorReport {
    /// The actor's name.
    pub name: String,
    /// The thread it ran on: its own name, or its group's.
    pub thread: String,
    /// Messages handled.
    pub handled: u64,
    /// Ticks run.
    pub ticks: u64,
    /// Turns in which it found nothing to do.
    pub idle_rounds: u64,
    /// Times a panicking instance was replaced (`Restart`).
    pub restarts: u64,
    /// Panics caught in its hooks and handlers.
    pub panics: u64,
    /// The actor's own named metrics (`Setup::metric`), in registration order.
    pub metrics: Vec<(String, u64)>,
}

impl ActorReport {
    /// The named metric `name`, if the actor registered it.
    pub fn metric(&self, name: &str) -> Option<u64> {
        self.metrics
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// Figures for one caller's calls of one service.
///
/// Every call is counted in `calls` when it starts and ends once, with its reply or an error:
/// `calls == replies + errors + in_flight`, exactly, in every report, with `in_flight == 0` in
/// the report of `join` (the stop ends every call still open, `Stopped`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallReport {
    /// The service (its name as it runs).
    pub service: TopicName,
    /// The calling actor or handle.
    pub caller: String,
    /// The serving actor.
    pub server: String,
    /// Calls made, refused ones included.
    pub calls: u64,
    /// Calls that ended with the server's reply (`Ok`, or an error the server chose to send).
    pub replies: u64,
    /// Calls that ended with a [`CallError`](crate::CallError) of the bus's: the sum of the
    /// six counts below.
    pub errors: u64,
    /// Calls that ended [`Timeout`](crate::CallError::Timeout).
    pub timeouts: u64,
    /// Calls that ended [`Dropped`](crate::CallError::Dropped).
    pub dropped: u64,
    /// Calls that ended [`ServerPanicked`](crate::CallError::ServerPanicked).
    pub server_panicked: u64,
    /// Calls that ended [`Stopped`](crate::CallError::Stopped).
    pub stopped: u64,
    /// Calls refused [`QueueFull`](crate::CallError::QueueFull).
    pub queue_full: u64,
    /// Calls that ended [`Refused`](crate::CallError::Refused) (a remote server's bridge
    /// refused the service).
    pub refused: u64,
    /// Calls not ended yet.
    pub in_flight: u64,
    /// Replies that came after their call had ended (its timeout, or the stop): dropped, and
    /// not calls, so outside the balance.
    pub late: u64,
}

/// A snapshot of every edge and actor: taken while running, and returned by `join`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One entry per publisher-subscriber edge.
    pub edges: Vec<EdgeReport>,
    /// One entry per actor.
    pub actors: Vec<ActorReport>,
    /// One entry per caller of each service (actors that call and [`Caller`](crate::Caller)
    /// handles).
    pub services: Vec<CallReport>,
    /// How the stop went: `None` while the bus runs, set in the report of
    /// [`RunningBus::join`](crate::RunningBus::join).
    pub stop: Option<StopReport>,
}

/// How a bus's stop went, in the report of [`RunningBus::join`](crate::RunningBus::join).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Every edge drained before the stop timeout: nothing was given up. When false, `Block`
    /// waits gave up at the timeout and what they held is counted lost on their edges.
    pub drained: bool,
    /// Threads whose actors' `on_stop` hooks had not run when the stop moved on without them
    /// (a hook, or a handler before it, that took longer than the stop allowed).
    pub late_hooks: Vec<String>,
    /// Threads that had not exited when the stop ended; `join` returns
    /// [`BusError::Unresponsive`](crate::BusError::Unresponsive) for them.
    pub unresponsive: Vec<String>,
    /// From the stop request to the end of the stop.
    pub took: std::time::Duration,
}

impl Report {
    /// The edge from `publisher` to `subscriber` on `topic`, if there is one.
    pub fn edge(&self, topic: &str, publisher: &str, subscriber: &str) -> Option<&EdgeReport> {
        self.edges
            .iter()
            .find(|e| e.topic == topic && e.publisher == publisher && e.subscriber == subscriber)
    }

    /// The actor called `name`, if there is one.
    pub fn actor(&self, name: &str) -> Option<&ActorReport> {
        self.actors.iter().find(|a| a.name == name)
    }

    /// The calls of `service` by `caller`, if it calls it.
    pub fn service(&self, service: &str, caller: &str) -> Option<&CallReport> {
        self.services
            .iter()
            .find(|c| c.service == service && c.caller == caller)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<14} {:<12} {:<12} {:<10} {:>10} {:>10} {:>8} {:>8} {:>9} {:>8} {:>6} {:>9} {:>6}",
            "topic",
            "publisher",
            "subscriber",
            "policy",
            "published",
            "handled",
            "panicked",
            "dropped",
            "conflated",
            "waited",
            "lost",
            "in_flight",
            "depth"
        )?;
        for e in &self.edges {
            writeln!(
                f,
                "{:<14} {:<12} {:<12} {:<10} {:>10} {:>10} {:>8} {:>8} {:>9} {:>8} {:>6} {:>9} {:>6}",
                e.topic,
                e.publisher,
                e.subscriber,
                format!("{:?}", e.policy),
                e.published,
                e.handled,
                e.panicked,
                e.dropped,
                e.conflated,
                e.waited,
                e.lost,
                e.in_flight,
                e.max_depth
            )?;
        }
        if !self.services.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "{:<14} {:<12} {:<12} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>6} {:>9}",
                "service",
                "caller",
                "server",
                "calls",
                "replies",
                "errors",
                "timeout",
                "dropped",
                "panicked",
                "stopped",
                "full",
                "refused",
                "late",
                "in_flight"
            )?;
            for c in &self.services {
                writeln!(
                    f,
                    "{:<14} {:<12} {:<12} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>6} {:>9}",
                    c.service,
                    c.caller,
                    c.server,
                    c.calls,
                    c.replies,
                    c.errors,
                    c.timeouts,
                    c.dropped,
                    c.server_panicked,
                    c.stopped,
                    c.queue_full,
                    c.refused,
                    c.late,
                    c.in_flight
                )?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<14} {:<12} {:>10} {:>8} {:>12} {:>8} {:>6}",
            "actor", "thread", "handled", "ticks", "idle_rounds", "restarts", "panics"
        )?;
        for a in &self.actors {
            writeln!(
                f,
                "{:<14} {:<12} {:>10} {:>8} {:>12} {:>8} {:>6}",
                a.name, a.thread, a.handled, a.ticks, a.idle_rounds, a.restarts, a.panics
            )?;
        }
        for a in self
            .actors
            .iter()
            .filter(|a| a.metrics.iter().any(|(_, v)| *v != 0))
        {
            writeln!(f)?;
            writeln!(f, "{} metrics (non-zero):", a.name)?;
            for (name, v) in a.metrics.iter().filter(|(_, v)| *v != 0) {
                writeln!(f, "  {name:<40} {v:>12}")?;
            }
        }
        if let Some(stop) = &self.stop {
            writeln!(f)?;
            write!(
                f,
                "stop: {} in {:?}",
                if stop.drained {
                    "drained"
                } else {
                    "gave up at its timeout"
                },
                stop.took
            )?;
            if !stop.late_hooks.is_empty() {
                write!(f, "; on_stop late on {}", stop.late_hooks.join(", "))?;
            }
            if !stop.unresponsive.is_empty() {
                write!(f, "; left running: {}", stop.unresponsive.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{EdgeCounters, Metric};

    /// Clones of one metric updated from several threads lose no increment (the load-and-store
    /// it replaced lost most of them).
    #[test]
    fn a_metric_updated_from_several_threads_loses_nothing() {
        let metric = Metric::default();
        let per_thread = if cfg!(miri) { 1_000 } else { 200_000 };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = metric.clone();
                std::thread::spawn(move || {
                    for _ in 0..per_thread {
                        m.add(1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("adder panicked");
        }
        assert_eq!(metric.get(), 4 * per_thread);
    }

    /// The last end of an edge to go counts what is still unaccounted for as lost, once.
    #[test]
    fn the_last_end_settles_the_edge() {
        let c = EdgeCounters::default();
        c.publisher.sent.add(5);
        c.subscriber.handled.add(2);
        c.end_dropped();
        assert_eq!(
            c.snapshot().in_flight(),
            3,
            "one end left: nothing settled yet"
        );
        c.end_dropped();
        let s = c.snapshot();
        assert_eq!((s.in_flight(), s.subscriber_lost), (0, 3));
    }
}
