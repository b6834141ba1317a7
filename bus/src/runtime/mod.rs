//! The actor runtime: actors declared once, wired with one SPSC ring per publisher-subscriber
//! edge, run on pinned threads, stopped by a driver of its own.
//!
//! Declaring, in the order `start()` reads it:
//! - `decl`: a declaration as plain data (actors, groups, outputs, subscriptions, handles).
//! - `builder`: every public method of the builders, which fill `decl`.
//! - `validate`: the pure check of a whole declaration as named passes, planning threads and
//!   edges.
//! - `start`: the named steps that make rings, slots, handles and threads from the plan.
//!
//! Running:
//! - `running`: the running bus (`stop`, `report`, `join`).
//! - `stop`: the stop protocol and the stop driver that runs it.
//! - `actor`: the `Actor` trait, `Setup` (for factories) and `Context` (for hooks).
//! - `handle`: external publishers and subscriptions, for code that is not an actor.
//! - `counters_file`: the bus's side of its live counters file (the file: `crate::counters`).
//! - `tokio_adapter`: tokio channels at the edge of the handles (feature `tokio`).
//! - `edge`: the typed ends of each ring: fan-out on publish, fair polling on receive.
//! - `runner`: one thread driving one actor or a group, with supervision.
//! - `control`: the stop phases shared by all threads.
//! - `metrics`: per-edge and per-actor counters and the report.
//! - `error`: what `start()` and `join()` return when things go wrong.

mod actor;
mod builder;
mod control;
#[cfg(unix)]
mod counters_file;
mod decl;
mod edge;
mod error;
mod handle;
#[cfg(all(test, loom))]
mod loom_models;
mod metrics;
mod names;
mod runner;
mod running;
mod start;
mod stop;
#[cfg(feature = "tokio")]
mod tokio_adapter;
mod validate;

pub(crate) use actor::short_type_name;
pub use actor::{Actor, Context, Setup};
pub use builder::{ActorBuilder, Bus, BusBuilder, Component, GroupBuilder, DEFAULT_CAPACITY};
pub use edge::{Inputs, Out, Wiring};
pub(crate) use edge::{Offered, Output};
pub use error::{BusError, StartError};
pub use handle::{
    Caller, CallerKey, HandleError, Iter, PublishError, Publisher, PublisherKey, RecvError,
    RecvTimeoutError, Subscription, SubscriptionKey, TryRecvError,
};
pub(crate) use metrics::CallCounters;
pub use metrics::{ActorReport, CallReport, EdgeReport, Metric, Report, StopReport};
pub use running::{RunningBus, StopHandle};
#[cfg(feature = "tokio")]
pub use tokio_adapter::{AsyncCaller, AsyncSubscription};

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

/// What happens when an actor's hook (`on_start`, `on_message`, `poll`, `drain`, `on_tick`)
/// or its factory panics, or its `Drop` does. Set per actor.
///
/// The message whose handler panicked is counted in its edge's `panicked` column, never as
/// handled. Whatever the policy, the panic is counted in the actor's `panics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Supervision {
    /// A fresh actor from the factory takes over the same rings (what was queued for the old
    /// one is handled by the new one), after a delay, and its `on_start` runs. At most
    /// [`RestartLimit::max_restarts`] restarts within [`RestartLimit::within`]; the next
    /// failure escalates, as [`Escalate`](Self::Escalate) would. A panic in the factory
    /// counts toward the limit too; a factory that returns setup errors escalates at once.
    Restart(RestartLimit),
    /// The actor ends; messages queued for it, and published to it afterwards, are counted as
    /// lost; the rest of the bus runs on.
    Stop,
    /// The whole bus stops (gracefully, within its stop timeout) and `join` returns
    /// [`BusError::ActorPanicked`] with the actor's name and the panic message. The default.
    #[default]
    Escalate,
}

/// How often [`Supervision::Restart`] may restart an actor, and how long it waits first.
///
/// Restarts are counted in windows of `within`, each starting at the first restart after the
/// previous window ended; the `max_restarts + 1`-th failure within one window escalates. The
/// n-th restart of a window waits `delay * 2^(n-1)` (capped at one second) before the factory
/// runs; the actor's thread keeps serving its other actors meanwhile. Once the bus is stopping
/// a restart runs at once, so that the new instance can drain its inbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RestartLimit {
    /// Restarts allowed within one window.
    pub max_restarts: u32,
    /// The window's length.
    pub within: std::time::Duration,
    /// The wait before the first restart of a window (doubling for each further one).
    pub delay: std::time::Duration,
}

impl RestartLimit {
    /// At most `max_restarts` restarts within `within`, the first after 10 ms.
    pub const fn new(max_restarts: u32, within: std::time::Duration) -> Self {
        RestartLimit {
            max_restarts,
            within,
            delay: std::time::Duration::from_millis(10),
        }
    }

    /// Waits `delay` before the first restart of a window (doubling for each further one).
    pub const fn with_delay(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The longest wait before a restart, however many came before.
    pub(crate) const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);
}

impl Default for RestartLimit {
    /// 3 restarts within 10 s, the first after 10 ms.
    fn default() -> Self {
        RestartLimit::new(3, std::time::Duration::from_secs(10))
    }
}

/// How a bus thread waits when it has nothing to do. Set per thread (an actor's own, or a
/// group's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Idle {
    /// Spin with `spin_loop` hints: the lowest latency, one core burnt. Pin the thread.
    BusySpin,
    /// Spin, then yield. The default. On a thread with an actor that watches file descriptors
    /// ([`ActorBuilder::watches_fds`](crate::ActorBuilder::watches_fds), a network bridge), it
    /// yields for up to [`BACKOFF_YIELD`](crate::BACKOFF_YIELD) and then sleeps as
    /// [`Idle::Park`] does, woken by a datagram or a publisher: work that comes more often
    /// than that finds the thread awake (microseconds), a longer silence costs no CPU.
    #[default]
    Backoff,
    /// Spin, then yield, then sleep until a publisher rings (no syscall on the publisher's side
    /// unless the thread sleeps).
    Park,
}

impl Idle {
    /// The strategy of a thread; `watches_fds` if one of its actors declared
    /// [`ActorBuilder::watches_fds`](crate::ActorBuilder::watches_fds).
    pub(crate) fn make(self, watches_fds: bool) -> Box<dyn crate::wait::IdleStrategy> {
        match self {
            Idle::BusySpin => Box::new(crate::wait::BusySpin),
            // Its last stage sleeps as `Park` does, on the watched descriptors and the doorbell,
            // after yielding for a while longer than `Park` does.
            Idle::Backoff if watches_fds => {
                Box::new(crate::wait::Park::new().with_yield_for(crate::BACKOFF_YIELD))
            }
            Idle::Backoff => Box::new(crate::wait::Backoff::new()),
            Idle::Park => Box::new(crate::wait::Park::new()),
        }
    }
}
