//! The errors of building, starting and joining a bus.

use std::fmt;

use super::metrics::Report;
use crate::topic::TopicName;
use crate::wait::PinError;

/// Why `start()` refused to run the bus. Each names the actor, topic or core at fault.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// Two actors have the same name.
    DuplicateActor(String),
    /// An actor subscribes to a topic that no actor publishes.
    NoPublisher {
        /// The subscribing actor.
        actor: String,
        /// The topic.
        topic: TopicName,
    },
    /// An actor's handler receives messages but its builder declares no subscription.
    NotSubscribed {
        /// The actor.
        actor: String,
        /// The inbox type it receives.
        inbox: &'static str,
    },
    /// Two different Rust types claim the same topic name.
    TopicClash {
        /// The topic name.
        topic: TopicName,
        /// One type.
        first: &'static str,
        /// The other type.
        second: &'static str,
        /// The names [`remap`](crate::BusBuilder::remap) renamed to `topic`, sorted (empty if
        /// none): a renaming, not a declaration, may have put one type on the other's name.
        remapped_from: Vec<String>,
    },
    /// Two topic names whose ids ([`topic_id`](crate::topic_id)) are equal: the bus and the
    /// wire route by id, so one of them must be renamed.
    TopicIdCollision {
        /// The id both names have.
        id: u64,
        /// One name.
        first: TopicName,
        /// The other name.
        second: TopicName,
    },
    /// A core that exists but that this process may not use (outside its affinity mask, as set
    /// by `taskset` or a cpuset).
    CoreNotAllowed {
        /// The actor or group asking for it.
        thread: String,
        /// The core.
        core: usize,
        /// The cores the process may use, read with `sched_getaffinity` in `start()`.
        allowed: Vec<usize>,
    },
    /// A core id that this machine does not have.
    NoSuchCore {
        /// The actor or group asking for it.
        thread: String,
        /// The core.
        core: usize,
        /// Online cores.
        online: usize,
    },
    /// Two busy-spinning threads pinned to one core would starve each other.
    SharedBusyCore {
        /// The core.
        core: usize,
        /// The first thread.
        first: String,
        /// The second thread.
        second: String,
    },
    /// A `Block` subscription between two actors on the same thread would deadlock when the
    /// ring fills.
    SameThreadBlock {
        /// The topic.
        topic: TopicName,
        /// The publisher.
        publisher: String,
        /// The subscriber.
        subscriber: String,
        /// The thread they share.
        thread: String,
    },
    /// A setting that does not fit: an option on a grouped actor that belongs to its group, a
    /// backpressure option for a topic the actor does not receive, a zero capacity, and the like.
    Invalid(String),
    /// A factory asked for something it did not declare.
    Setup(String),
    /// A thread could not be pinned.
    Pin {
        /// The thread.
        thread: String,
        /// Why.
        error: PinError,
    },
    /// A factory panicked.
    FactoryPanicked {
        /// The actor.
        actor: String,
        /// The panic message.
        message: String,
    },
    /// The OS would not spawn a thread.
    Spawn(std::io::Error),
}

impl StartError {
    /// Names, in a clash, the renamings that lead to the clashing name (`renames`: from each
    /// renamed name to the name it runs under).
    pub(super) fn with_renames(mut self, renames: &super::names::Renames) -> Self {
        if let StartError::TopicClash {
            topic,
            remapped_from,
            ..
        } = &mut self
        {
            *remapped_from = (renames.iter())
                .filter(|(_, to)| *to == topic)
                .map(|(from, _)| from.clone())
                .collect();
            remapped_from.sort();
        }
        self
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::DuplicateActor(name) => write!(f, "two actors are named '{name}': give each actor a unique name"),
            StartError::NoPublisher { actor, topic } => write!(f, "actor '{actor}' subscribes to topic '{topic}', but no actor publishes it: add .publishes::<..>() to a publisher or drop the subscription"),
            StartError::NotSubscribed { actor, inbox } => write!(f, "actor '{actor}' receives {inbox} but its builder does not subscribe: add .subscribes::<{inbox}>()"),
            StartError::TopicClash { topic, first, second, remapped_from } if !remapped_from.is_empty() => write!(f, "topic '{topic}' (the name remap gives {}) is claimed by two types, {first} and {second}: change the remap, or give one of them another topic name", remapped_from.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")),
            StartError::TopicClash { topic, first, second, .. } => write!(f, "topic '{topic}' is claimed by two types, {first} and {second}: give one of them another topic name"),
            StartError::TopicIdCollision { id, first, second } => write!(f, "topics '{first}' and '{second}' have the same id {id:#018x}: the bus routes by id, so rename one of them"),
            StartError::CoreNotAllowed { thread, core, allowed } => write!(f, "'{thread}' asks for core {core}, but this process may only run on cores {allowed:?} (its affinity mask): pick one of those, or widen the mask"),
            StartError::NoSuchCore { thread, core, online } => write!(f, "'{thread}' asks for core {core}, but this machine has {online} online cores (0..{online})"),
            StartError::SharedBusyCore { core, first, second } => write!(f, "'{first}' and '{second}' both busy-spin on core {core} and would starve each other: move one, or give one the Backoff or Park idle strategy"),
            StartError::SameThreadBlock { topic, publisher, subscriber, thread } => write!(f, "'{publisher}' publishes '{topic}' to '{subscriber}' with Block backpressure, but both run on thread '{thread}': a full ring would deadlock; use Backpressure::DropNewest or Latest, or separate threads"),
            StartError::Invalid(msg) | StartError::Setup(msg) => f.write_str(msg),
            StartError::Pin { thread, error } => write!(f, "thread '{thread}': {error}"),
            StartError::FactoryPanicked { actor, message } => write!(f, "the factory of actor '{actor}' panicked: {message}"),
            StartError::Spawn(e) => write!(f, "could not spawn a bus thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Pin { error, .. } => Some(error),
            StartError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a bus stopped with an error; the final report comes along.
#[derive(Debug)]
#[non_exhaustive]
pub enum BusError {
    /// An actor with the `Escalate` policy panicked, and the whole bus stopped.
    ActorPanicked {
        /// The actor.
        actor: String,
        /// Its panic message.
        message: String,
        /// The figures at the end.
        report: Box<Report>,
    },
    /// An actor reported an error it cannot recover from ([`Context::fail`]: a network
    /// bridge whose socket broke, for one), and the whole bus stopped.
    ///
    /// [`Context::fail`]: crate::Context::fail
    ActorFailed {
        /// The actor.
        actor: String,
        /// The error it reported.
        error: String,
        /// The figures at the end.
        report: Box<Report>,
    },
    /// A bus thread itself panicked (a bug in llbus).
    ThreadPanicked {
        /// The thread.
        thread: String,
        /// Its panic message.
        message: String,
        /// The figures at the end.
        report: Box<Report>,
    },
    /// Threads that had not exited when the stop timeout and its margin ran out (a handler or
    /// hook that does not return). They are left running, detached; `join` does not wait.
    Unresponsive {
        /// The threads.
        threads: Vec<String>,
        /// The figures at the end (edges into or out of those threads may show messages in
        /// flight).
        report: Box<Report>,
    },
}

impl BusError {
    /// The figures at the end.
    pub fn report(&self) -> &Report {
        match self {
            BusError::ActorPanicked { report, .. }
            | BusError::ActorFailed { report, .. }
            | BusError::ThreadPanicked { report, .. }
            | BusError::Unresponsive { report, .. } => report,
        }
    }
}

impl fmt::Display for BusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusError::ActorPanicked { actor, message, .. } => write!(f, "actor '{actor}' panicked and its policy is Escalate, so the bus stopped: {message}"),
            BusError::ActorFailed { actor, error, .. } => write!(f, "actor '{actor}' failed, so the bus stopped: {error}"),
            BusError::ThreadPanicked { thread, message, .. } => write!(f, "bus thread '{thread}' panicked (please report this llbus bug): {message}"),
            BusError::Unresponsive { threads, .. } => write!(f, "bus threads {threads:?} did not exit within the stop timeout (a handler or hook that does not return); they are left running"),
        }
    }
}

impl std::error::Error for BusError {}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic payload that is not a string)".to_owned()
    }
}
