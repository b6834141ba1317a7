//! Counters per edge and per actor, and the report built from them.
//!
//! Every counter has exactly one writer thread (noted beside it), which updates it with a plain
//! load and `Release` store (no read-modify-write); any thread may read a snapshot. Each block
//! of counters sits on cache lines of its own (`CachePadded`), so the publisher's and the
//! subscriber's counters never share a line with each other or with the ring.

use std::fmt;

use crossbeam_utils::CachePadded;

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter with one writer: increments are a load and a store, not an atomic RMW.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    pub(crate) fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Release);
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
    /// Messages published after the subscriber was gone. Writer: the publisher.
    pub(crate) lost: Counter,
}

/// The subscriber's side of an edge's counters.
#[derive(Debug, Default)]
pub(crate) struct SubscriberCounters {
    /// Messages handed to the handler (counted when it returns or panics). Writer: subscriber.
    pub(crate) handled: Counter,
    /// Messages still queued when the subscriber stopped for good. Writer: the subscriber.
    pub(crate) lost: Counter,
    /// The highest queue depth the subscriber saw. Writer: the subscriber.
    pub(crate) max_depth: Counter,
}

/// Both sides of one edge's counters, each on its own cache lines.
#[derive(Debug, Default)]
pub(crate) struct EdgeCounters {
    pub(crate) publisher: CachePadded<PublisherCounters>,
    pub(crate) subscriber: CachePadded<SubscriberCounters>,
}

impl EdgeCounters {
    /// Messages accepted but neither handled, conflated nor counted lost: zero when the edge is
    /// quiet. Negative values are transient (a handler finished before `sent` was stored).
    pub(crate) fn in_flight(&self) -> i128 {
        let s = &self.subscriber;
        let p = &self.publisher;
        // Read the subscriber's side first: it trails the publisher's.
        let done = i128::from(s.handled.get()) + i128::from(s.lost.get());
        i128::from(p.sent.get()) - i128::from(p.conflated.get()) - done
    }

    /// Every counter, for the stability check of the stop protocol.
    pub(crate) fn raw(&self) -> [u64; 5] {
        [
            self.subscriber.handled.get(),
            self.subscriber.lost.get(),
            self.publisher.sent.get(),
            self.publisher.conflated.get(),
            self.publisher.lost.get(),
        ]
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
}

/// Figures for one publisher-subscriber edge of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeReport {
    /// The topic name.
    pub topic: &'static str,
    /// The publishing actor.
    pub publisher: String,
    /// The subscribing actor.
    pub subscriber: String,
    /// The subscription's backpressure policy.
    pub policy: crate::bus::Backpressure,
    /// Messages put into the ring (or latest slot).
    pub published: u64,
    /// Messages the subscriber's handler received.
    pub handled: u64,
    /// Messages refused because the ring was full (`DropNewest`).
    pub dropped: u64,
    /// Values overwritten before the subscriber read them (`Latest`).
    pub conflated: u64,
    /// Publishes that had to wait for room (`Block`).
    pub waited: u64,
    /// Messages lost because the subscriber stopped (its `Stop` policy, or a stop timeout).
    pub lost: u64,
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
}

/// A snapshot of every edge and actor: taken while running, and returned by `join`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One entry per publisher-subscriber edge.
    pub edges: Vec<EdgeReport>,
    /// One entry per actor.
    pub actors: Vec<ActorReport>,
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
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<14} {:<12} {:<12} {:<10} {:>10} {:>10} {:>8} {:>9} {:>8} {:>6} {:>6}",
            "topic",
            "publisher",
            "subscriber",
            "policy",
            "published",
            "handled",
            "dropped",
            "conflated",
            "waited",
            "lost",
            "depth"
        )?;
        for e in &self.edges {
            writeln!(
                f,
                "{:<14} {:<12} {:<12} {:<10} {:>10} {:>10} {:>8} {:>9} {:>8} {:>6} {:>6}",
                e.topic,
                e.publisher,
                e.subscriber,
                format!("{:?}", e.policy),
                e.published,
                e.handled,
                e.dropped,
                e.conflated,
                e.waited,
                e.lost,
                e.max_depth
            )?;
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
        Ok(())
    }
}
