//! llbus: a low-latency typed message bus.
//!
//! Actors run on OS threads (optionally pinned to cores) and exchange typed messages over
//! single-producer single-consumer rings, one ring per publisher-subscriber edge.
//!
//! # Contract
//!
//! - **What allocates, and when.** Everything is allocated in [`BusBuilder::start`]: every ring,
//!   every thread, every actor (factories run then, on their own threads). After `start()`,
//!   publishing ([`Context::publish`]), the rings, and dispatching to handlers allocate nothing
//!   (a counting-allocator test proves it); a handler allocates only what it allocates itself.
//!   [`Ring::new`] and [`Latest::new`] allocate once; their operations never do.
//! - **What is lock-free.** The rings ([`Ring`], [`Latest`]) are wait-free on both sides. The
//!   publish path takes no lock. A lock is taken only to wake a thread that sleeps with the
//!   [`Park`] strategy, and only when it has announced that it sleeps (a parked thread that
//!   watches file descriptors, [`Context::wake_on_readable`], is woken by an eventfd write
//!   instead of a lock).
//! - **When a queue is full.** Per subscription ([`Backpressure`]): `Block` makes the publisher
//!   wait with its thread's idle strategy (nothing lost; but an actor declared
//!   [`never_waits`](ActorBuilder::never_waits) never waits, and its message is counted
//!   dropped), `DropNewest` drops the new message and counts it, `Latest` keeps only the newest
//!   value and counts what it overwrote. On a bare ring,
//!   [`Producer::try_push`] hands the value back in [`TryPushError::Full`]. A service call
//!   ([`Context::call`], [`Caller::call`]) whose request finds its server's ring full waits for
//!   room within the call's timeout under `Block`, and fails [`CallError::QueueFull`] at once
//!   under `DropNewest`.
//! - **What is lost on a crash.** In-process the bus loses nothing on a graceful stop: every
//!   message published before it is handled (unless the stop runs past its timeout, below). A
//!   panicking actor is handled by its [`Supervision`] policy: `Restart` remakes it on the same
//!   rings, after a delay, at most [`RestartLimit::max_restarts`] times per window (then it
//!   escalates); `Stop` ends it and counts what was queued for it, and what is published to it
//!   afterwards, as lost; `Escalate` stops the bus and [`RunningBus::join`] returns
//!   [`BusError::ActorPanicked`]. A panic in any hook, the factory or the actor's `Drop` is
//!   supervised; one anywhere else in a bus thread stops the bus and `join` returns
//!   [`BusError::ThreadPanicked`]. An actor reports an error it cannot recover from without
//!   panicking with [`Context::fail`]: the bus stops gracefully and `join` returns
//!   [`BusError::ActorFailed`]. If the process dies, what is in the rings is gone.
//! - **Accounting.** Every edge balances, in every [`RunningBus::report`] and in the report of
//!   `join`: `published == handled + panicked + dropped + conflated + lost + in_flight`
//!   ([`EdgeReport`]), with `in_flight == 0` after `join` (but for what an external
//!   [`Subscription`] has not read yet). A message whose handler panicked is `panicked`, not
//!   handled; a publish to a subscriber that is gone is `lost` at once. Every caller's calls of
//!   a service balance too: `calls == replies + errors + in_flight` ([`CallReport`]), with
//!   `in_flight == 0` after `join`: the stop ends every call still open ([`CallError::Stopped`]).
//! - **Stopping acts at once and is bounded.** Whoever requests a stop ([`RunningBus::stop`], a
//!   [`StopHandle`], [`Context::request_stop`], [`Context::fail`], an escalated panic, or
//!   dropping the [`RunningBus`]), no tick or `poll` starts after the request, and the bus's own
//!   stop driver runs the whole stop (drain, `on_stop` hooks, exit, subscriptions closed)
//!   without anyone calling `join`, within the stop timeout ([`BusBuilder::stop_timeout`],
//!   default 10 s) plus under a second, whatever the actors do: past the timeout every `Block`
//!   wait gives up (counted lost), and a thread that still does not exit (a handler that never
//!   returns) is left running and reported ([`BusError::Unresponsive`]). The stop never waits
//!   for a reader outside the bus: a publisher blocked on a full [`Subscription`] gives up at
//!   the request (counted lost). `join` waits for the stop and reports how it went
//!   ([`Report::stop`]). Durations and capacities that cannot work are refused by `start()`.
//! - **Running as a service.** [`RunningBus::stop_on_signals`] makes the process's SIGINT and
//!   SIGTERM request that same stop (a thread of signal-hook's takes them; no handler runs on
//!   the bus's threads), so `join` returns the final report and the counters file is removed;
//!   a second signal ends the process as it would have. [`RunningBus::join_timeout`] waits at
//!   most a deadline and hands the bus back, still running, if it has not ended; it never
//!   stops the bus itself.
//! - **Ways in and out.** Code that is not an actor publishes through a [`Publisher`] and reads
//!   through a [`Subscription`], declared on the builder ([`BusBuilder::publisher`],
//!   [`BusBuilder::subscription`]) and wired, counted and stopped like actors' edges; their
//!   `publish` and `try_recv` allocate nothing and take no lock. With the `tokio` feature they
//!   turn into tokio channels at the bus's edge that lose nothing uncounted: every message an
//!   async sender accepted is published, and what an `AsyncSubscription` never received is
//!   counted lost, not handled.
//! - **Live counters.** [`RunningBus::snapshot`] reads every figure while the bus runs; each
//!   bus also publishes them for other processes (the `llbus` command) in a shared-memory file
//!   that a sleeping thread refreshes 10 times a second ([`counters_dir`],
//!   [`read_counters_file`]; the layout is documented on [`COUNTERS_VERSION`]). No hot path
//!   does any work for either.
//! - **Where threads run.** `start()` reads the process's allowed cores once
//!   ([`allowed_cores`]: the affinity the process started with, within its cgroup cpuset, not
//!   the mask of the thread calling `start()`); [`ActorBuilder::on_core`] outside them is a
//!   [`StartError`], and unpinned threads run on all of them.
//!
//! # Example
//!
//! ```
//! use llbus::{Actor, Bus, Context, Message, Out, Setup};
//!
//! #[derive(Message, Clone, Debug)]
//! #[message(topic = "demo.n")]
//! struct N(u64);
//!
//! struct Counter { out: Out<N>, next: u64 }
//! impl Actor for Counter {
//!     type In = ();
//!     fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
//!     fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
//!         if self.next == 1000 {
//!             ctx.request_stop();
//!             return 0;
//!         }
//!         ctx.publish(self.out, N(self.next));
//!         self.next += 1;
//!         1
//!     }
//! }
//!
//! struct Sum(u64);
//! impl Actor for Sum {
//!     type In = N;
//!     fn on_message(&mut self, N(n): N, _ctx: &mut Context<'_>) {
//!         self.0 += n;
//!     }
//! }
//!
//! let mut bus = Bus::builder();
//! bus.actor("counter", |s: &mut Setup<'_>| Counter { out: s.output(), next: 0 })
//!     .publishes::<N>();
//! bus.actor("sum", |_: &mut Setup<'_>| Sum(0)).subscribes::<N>();
//! let report = bus.start()?.join()?;
//! assert_eq!(report.edge("demo.n", "counter", "sum").map(|e| e.handled), Some(1000));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layers
//!
//! The ring ([`Ring`], [`Latest`]) knows nothing of messages or threads; the idle strategies
//! ([`IdleStrategy`]: [`BusySpin`], [`Backoff`], [`Park`]) and [`pin_to_core`] know nothing of
//! rings; the bus ([`Bus`], [`Actor`]) uses both. `#[derive(Message)]` and `#[derive(Inbox)]`
//! come from `llbus-macros`, re-exported here.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod blocking;
#[cfg(unix)]
mod counters;
mod message;
mod payload;
mod ring;
mod runtime;
pub mod schema;
mod service;
mod sync;
mod topic;
mod wait;

#[cfg(unix)]
pub use counters::{
    counters_dir, counters_files, decode as decode_counters, find_counters_files,
    read_counters_file, read_counters_file_of, read_counters_file_until, ActorCounts, CallCounts,
    CountersFileError, CountersLocation, CountersSnapshot, EdgeCounts, COUNTERS_BUSY_RETRY,
    COUNTERS_MAGIC, COUNTERS_VERSION, MAX_FILE_LEN, MAX_RECORDS, RECORD_ACTOR, RECORD_CALL,
    RECORD_EDGE, RECORD_METRIC, SNAPSHOT_INTERVAL,
};
pub use message::{topic_id, Inbox, Message, TopicSpec};
/// The bounded bincode payload decoder that `llbus-net` and `llbus-ipc` share. Hidden, and not
/// part of the public API: it may change in any release.
#[doc(hidden)]
pub use payload::{decode_bounded, PayloadError};
pub use ring::{
    Broadcast, BroadcastProducer, BroadcastReader, Consumer, Latest, LatestReader, LatestWriter,
    Notify, PopError, Producer, PushError, Ring, SlotConsumer, SlotProducer, SlotRing,
    TryPushError,
};
pub use runtime::{
    Actor, ActorBuilder, ActorReport, Backpressure, Bus, BusBuilder, BusError, CallReport, Caller,
    CallerKey, Component, Context, EdgeReport, GroupBuilder, HandleError, Idle, Inputs, Iter,
    Metric, Out, PublishError, Publisher, PublisherKey, RecvError, RecvTimeoutError, Report,
    RestartLimit, RunningBus, Setup, StartError, StopHandle, StopReport, Subscription,
    SubscriptionKey, Supervision, TryRecvError, Wiring, DEFAULT_CAPACITY,
};
#[cfg(feature = "tokio")]
pub use runtime::{AsyncCaller, AsyncSubscription};
pub use schema::{Schema, ShapeHasher};
pub use service::{
    reply_fingerprint, request_fingerprint, CallError, CallId, CallOut, Replies, Reply, Request,
    Responder, Service, MAX_CALLS_IN_FLIGHT,
};
pub use topic::{Topic, TopicName, TopicNameError, TopicPattern, TOPIC_NAME_MAX_LEN};
pub use wait::{
    allowed_cores, online_cores, pin_to_core, run_on_cores, Backoff, BusySpin, Doorbell,
    IdleStrategy, Park, PinError, BACKOFF_YIELD,
};

// The derives carry their own docs (topic rule, accepted shapes).
pub use llbus_macros::{Inbox, Message};

// Lets the derives' `::llbus::...` paths resolve inside this crate's own tests.
#[cfg(test)]
extern crate self as llbus;

/// Items the derives' generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use std::vec::Vec;
}
