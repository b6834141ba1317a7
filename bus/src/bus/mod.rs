//! The typed bus: actors declared once, wired with one SPSC ring per publisher-subscriber edge,
//! run on pinned threads.
//!
//! - `builder`: declaring actors, groups and their subscriptions (the public builder API).
//! - `validate`: the pure check of a whole declaration, planning threads and edges.
//! - `start`: making the rings, spawning and pinning threads, running the factories.
//! - `stop`: the running bus and the stop protocol (`join`, drain, the stop timeout).
//! - `actor`: the `Actor` trait, `Setup` (for factories) and `Context` (for hooks).
//! - `edge`: the typed ends of each ring: fan-out on publish, fair polling on receive.
//! - `runner`: one thread driving one actor or a group, with supervision.
//! - `control`: the stop phases shared by all threads.
//! - `metrics`: per-edge and per-actor counters and the report.
//! - `error`: what `start()` and `join()` return when things go wrong.

mod actor;
mod builder;
mod control;
mod edge;
mod error;
mod metrics;
mod runner;
mod start;
mod stop;
mod validate;

pub use actor::{Actor, Context, Setup};
pub use builder::{ActorBuilder, Bus, BusBuilder, Component, GroupBuilder, DEFAULT_CAPACITY};
pub use edge::{Inputs, Out, Wiring};
pub use error::{BusError, StartError};
pub use metrics::{ActorReport, EdgeReport, Metric, Report};
pub use stop::{RunningBus, StopHandle};

/// What a publisher does when a subscriber's ring is full. Set per subscription.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backpressure {
    /// The publisher waits, with its thread's idle strategy, until there is room. Nothing is
    /// lost; a slow subscriber slows its publisher. The default.
    #[default]
    Block,
    /// The new message is dropped and counted; the publisher never waits.
    DropNewest,
    /// The subscriber only ever sees the newest value: a one-value slot, overwritten on each
    /// publish, with overwritten values counted as conflated. For market data and state.
    Latest,
}

/// What happens when an actor's hook panics. Set per actor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Supervision {
    /// A fresh actor from the factory takes over the same rings; its `on_start` runs.
    Restart,
    /// The actor ends; messages queued for it are counted as lost; the rest of the bus runs on.
    Stop,
    /// The whole bus stops and `join` returns the error with the actor's name and the panic
    /// message. The default.
    #[default]
    Escalate,
}

/// How a bus thread waits when it has nothing to do. Set per thread (an actor's own, or a
/// group's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Idle {
    /// Spin with `spin_loop` hints: the lowest latency, one core burnt. Pin the thread.
    BusySpin,
    /// Spin, then yield. The default.
    #[default]
    Backoff,
    /// Spin, then yield, then sleep until a publisher rings (no syscall on the publisher's side
    /// unless the thread sleeps).
    Park,
}

impl Idle {
    pub(crate) fn make(self) -> Box<dyn crate::wait::IdleStrategy> {
        match self {
            Idle::BusySpin => Box::new(crate::wait::BusySpin),
            Idle::Backoff => Box::new(crate::wait::Backoff::new()),
            Idle::Park => Box::new(crate::wait::Park::new()),
        }
    }
}
