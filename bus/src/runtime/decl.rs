//! A bus's declaration as plain data: what the builder records and `start()` reads. No logic
//! lives here; `builder` fills these, `validate` checks them, `start` turns them into rings,
//! threads and actors.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::edge::{
    broadcast_maker, edge_maker, AnyOutput, BroadcastMaker, EdgeMaker, Output, Wiring,
};
use super::handle::HandleParts;
use super::metrics::ActorCounters;
use super::names::Renames;
use super::runner::Slot;
use super::{Backpressure, Idle, Supervision};
use crate::message::{Message, TopicSpec};
use crate::topic::{TopicName, TopicPattern};

/// One declared output.
pub(super) struct OutputDecl {
    /// The topic it publishes: as declared until `start()` remaps it, then as it runs.
    pub(super) spec: TopicSpec,
    /// The name the actor's code declared it under, which `Setup::output` looks up.
    pub(super) declared: TopicName,
    pub(super) new_output: fn() -> Box<dyn AnyOutput>,
    pub(super) make_edge: EdgeMaker,
    pub(super) make_broadcast: BroadcastMaker,
    /// The pattern this output was added for by `start()` (`publishes_matching`).
    pub(super) matched: Option<TopicPattern>,
    /// The service whose replies it carries, to one caller (`serves`).
    pub(super) serving: Option<TopicName>,
    /// The service whose timeouts it carries, into the caller's own reply ring (`calls`).
    pub(super) calling: Option<TopicName>,
}

impl OutputDecl {
    /// The declaration of an output of type `M` on topic `name`.
    pub(super) fn on<M: Message + Clone>(name: TopicName) -> Self {
        OutputDecl {
            spec: TopicSpec::named::<M>(name.clone()),
            declared: name,
            new_output: Output::<M>::new_erased,
            make_edge: edge_maker::<M>,
            make_broadcast: broadcast_maker::<M>,
            matched: None,
            serving: None,
            calling: None,
        }
    }
}

/// A service an actor or a handle calls: its name (as declared until `start()` remaps it), its
/// caller's reply topic, and how the runner posts a call's end and tells its server is gone.
pub(super) struct CallDecl {
    pub(super) service: TopicName,
    pub(super) reply: TopicName,
    pub(super) post: crate::service::PostEnd,
    pub(super) gone: crate::service::ServerGone,
}

impl CallDecl {
    /// The declaration of a call of `service`, whose replies come on `reply`.
    pub(super) fn of<Req: Message + Clone, Rep: Message + Clone>(
        service: TopicName,
        reply: TopicName,
    ) -> Self {
        CallDecl {
            service,
            reply,
            post: crate::service::post_end::<Rep>,
            gone: crate::service::server_gone::<Req>,
        }
    }
}

/// A service an actor serves: its name (as declared until `start()` remaps it) and how to make
/// a reply output to one caller.
pub(super) struct ServeDecl {
    pub(super) service: TopicName,
    pub(super) reply: fn(TopicName) -> OutputDecl,
}

/// Outputs declared by pattern (`publishes_matching`): `start()` adds one output for every
/// topic of the type that another actor or handle subscribes to and whose running name
/// matches.
pub(super) struct PatternDecl {
    pub(super) pattern: TopicPattern,
    pub(super) type_id: TypeId,
    pub(super) output: fn(TopicName) -> OutputDecl,
}

/// Turns an actor declaration into a runnable slot once its rings exist.
pub(super) type SlotMaker = Box<dyn FnOnce(SlotParts) -> Box<dyn Slot>>;

pub(super) struct SlotParts {
    pub(super) wiring: Wiring,
    pub(super) outputs: Vec<Box<dyn AnyOutput>>,
    pub(super) output_keys: Vec<OutputKey>,
    /// The patterns the actor publishes by (`publishes_matching`), for `Setup`.
    pub(super) patterns: Vec<(TypeId, TopicPattern)>,
    /// Where its responders' unanswered calls go (services).
    pub(super) orphans: Arc<crate::service::Orphans>,
    /// The services it serves, as they run (for `Setup::replies`).
    pub(super) serves: Vec<TopicName>,
    /// Its calls in flight (an actor that calls services; empty otherwise).
    pub(super) pending: crate::service::PendingCalls,
    /// The topics the actor receives (inbox and taken), as they run: what `Context::topic`
    /// names.
    pub(super) topics: Vec<TopicName>,
    /// The bus's renamings, for `Setup::topic`.
    pub(super) renames: Arc<Renames>,
    pub(super) counters: Arc<ActorCounters>,
    pub(super) supervision: Supervision,
    pub(super) tick: Option<Duration>,
}

/// How a factory finds one of its actor's outputs: the type and the name the actor's code
/// declared it under (it may run under another, remapped).
#[derive(Clone, Debug)]
pub(crate) struct OutputKey {
    pub(crate) type_id: TypeId,
    pub(crate) declared: TopicName,
    /// The pattern `start()` added it for (`publishes_matching`).
    pub(crate) matched: Option<TopicPattern>,
    /// The service whose replies it carries (`serves`).
    pub(crate) serving: Option<TopicName>,
    /// The service whose timeouts it carries (`calls`).
    pub(crate) calling: Option<TopicName>,
}

/// Per-topic subscription settings, as declared: what is not set resolves in `start()`
/// against the final defaults (`Block`, the actor's default capacity), whatever the order of
/// the builder's calls.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SubscriptionDecl {
    pub(super) policy: Option<Backpressure>,
    pub(super) capacity: Option<usize>,
}

pub(super) struct ActorDecl {
    pub(super) name: String,
    pub(super) group: Option<String>,
    pub(super) core: Option<usize>,
    pub(super) idle: Option<Idle>,
    pub(super) tick: Option<Duration>,
    pub(super) supervision: Supervision,
    /// The inbox's topics: each inbox type's default topic until `start()` replaces a type's
    /// default with the topics named for it (`subscribes_to`) and applies the remapping.
    pub(super) inbox: Vec<TopicSpec>,
    /// Topics named for inbox types with `subscribes_to`, until `start()` merges them.
    pub(super) named: Vec<TopicSpec>,
    /// Topics subscribed with `takes`: their rings go to the factory, not the inbox.
    pub(super) taken: Vec<TopicSpec>,
    /// Publishes only with `try_publish`: its edges can never make it wait.
    pub(super) never_waits: bool,
    /// Watches file descriptors (`Context::wake_on_readable`): a `Backoff` thread running it
    /// sleeps on them (and its doorbell) once yielding is done.
    pub(super) watches_fds: bool,
    pub(super) inbox_name: &'static str,
    pub(super) subscribed: bool,
    pub(super) settings: HashMap<TypeId, SubscriptionDecl>,
    /// Settings for one named topic (`backpressure_on`, `capacity_on`), over the type's.
    pub(super) topic_settings: HashMap<TopicName, SubscriptionDecl>,
    pub(super) default_capacity: usize,
    pub(super) outputs: Vec<OutputDecl>,
    /// Outputs by pattern, until `start()` adds an output for each topic matched.
    pub(super) matching: Vec<PatternDecl>,
    /// Services the actor serves (`serves`): `start()` adds a reply output per caller.
    pub(super) serves: Vec<ServeDecl>,
    /// Services the actor or handle calls (`calls`, `BusBuilder::caller`).
    pub(super) calls: Vec<CallDecl>,
    pub(super) make_slot: SlotMaker,
    pub(super) errors: Vec<String>,
    /// Set for an external handle (`publisher`, `subscription`): no thread runs it.
    pub(super) handle: Option<HandleDecl>,
}

#[derive(Default)]
pub(super) struct GroupDecl {
    pub(super) core: Option<usize>,
    pub(super) idle: Option<Idle>,
}

impl std::fmt::Debug for GroupDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupDecl")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

/// A declared handle: its place in the running bus's list and how to make it.
pub(super) struct HandleDecl {
    pub(super) index: usize,
    pub(super) make: fn(HandleParts) -> Box<dyn std::any::Any + Send>,
}

impl ActorDecl {
    /// The subscription settings of `topic` as declared: the topic's own over its type's.
    pub(super) fn setting(&self, topic: &TopicSpec) -> SubscriptionDecl {
        let of_type = self
            .settings
            .get(&topic.type_id)
            .copied()
            .unwrap_or_default();
        let of_topic = self
            .topic_settings
            .get(&topic.name)
            .copied()
            .unwrap_or_default();
        SubscriptionDecl {
            policy: of_topic.policy.or(of_type.policy),
            capacity: of_topic.capacity.or(of_type.capacity),
        }
    }
}
