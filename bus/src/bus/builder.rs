//! Declaring a bus, checking the declaration, and starting it.
//!
//! The builder only records declarations. `start()` validates them as a whole (a pure function
//! of the declarations, [`validate`]), then makes every ring, wires each one to its publisher's
//! output and its subscriber's inbox, spawns and pins the threads, runs every factory on its
//! actor's thread, and only when all of that succeeded lets the actors start.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::actor::{Actor, Setup};
use super::control::{Control, DRAINING, EXIT, GO_ABORT, GO_RUN, STOPPING};
use super::edge::{make_edge, AnyOutput, Output, Wiring};
use super::error::{panic_message, BusError, StartError};
use super::metrics::{ActorCounters, ActorReport, EdgeCounters, EdgeReport, Report};
use super::runner::{run_thread, ActorSlot, Slot, ThreadPlan};
use super::{Backpressure, Idle, Supervision};
use crate::message::{Inbox, Message, TopicSpec};
use crate::ring::Notify;

/// The default ring capacity of a subscription.
pub const DEFAULT_CAPACITY: usize = 1024;

/// Makes both ends of one edge of a topic: `(OutEdge<M>, InEdge<M>)`, type-erased.
type EdgeMaker = fn(
    Backpressure,
    usize,
    Arc<EdgeCounters>,
    Option<Arc<dyn Notify>>,
    Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Box<dyn Any + Send>);

fn edge_maker<M: Message>(
    policy: Backpressure,
    capacity: usize,
    counters: Arc<EdgeCounters>,
    wake_subscriber: Option<Arc<dyn Notify>>,
    wake_publisher: Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Box<dyn Any + Send>) {
    let (mut tx, mut rx) = make_edge::<M>(policy, capacity, counters);
    if let Some(n) = wake_subscriber {
        tx.notify_subscriber(n);
    }
    if let Some(n) = wake_publisher {
        rx.notify_publisher(n);
    }
    (Box::new(tx), Box::new(rx))
}

/// One declared output.
struct OutputDecl {
    spec: TopicSpec,
    new_output: fn() -> Box<dyn AnyOutput>,
    make_edge: EdgeMaker,
}

/// Turns an actor declaration into a runnable slot once its rings exist.
type SlotMaker = Box<dyn FnOnce(SlotParts) -> Box<dyn Slot>>;

struct SlotParts {
    wiring: Wiring,
    outputs: Vec<Box<dyn AnyOutput>>,
    output_types: Vec<TypeId>,
    output_topics: Vec<&'static str>,
    counters: Arc<ActorCounters>,
    supervision: Supervision,
    tick: Option<Duration>,
}

/// Per-topic subscription settings.
#[derive(Clone, Copy, Debug)]
struct SubscriptionDecl {
    policy: Backpressure,
    capacity: usize,
}

struct ActorDecl {
    name: String,
    group: Option<String>,
    core: Option<usize>,
    idle: Option<Idle>,
    tick: Option<Duration>,
    supervision: Supervision,
    inbox: Vec<TopicSpec>,
    inbox_name: &'static str,
    subscribed: bool,
    settings: HashMap<TypeId, SubscriptionDecl>,
    default_capacity: usize,
    outputs: Vec<OutputDecl>,
    make_slot: SlotMaker,
    errors: Vec<String>,
}

#[derive(Default)]
struct GroupDecl {
    core: Option<usize>,
    idle: Option<Idle>,
}

/// Where llbus starts: `Bus::builder()`.
#[derive(Debug)]
pub struct Bus;

impl Bus {
    /// An empty bus declaration.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }
}

/// A bus being declared: actors, what each publishes and subscribes to, and where each runs.
#[derive(Default)]
pub struct BusBuilder {
    actors: Vec<ActorDecl>,
    groups: HashMap<String, GroupDecl>,
    stop_timeout: Option<Duration>,
}

impl std::fmt::Debug for BusBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusBuilder")
            .field(
                "actors",
                &self.actors.iter().map(|a| &a.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl BusBuilder {
    /// Declares an actor called `name`, made by `factory` on its own thread in `start()` (and
    /// again after each restart). Configure it with the returned builder.
    pub fn actor<A, F>(&mut self, name: &str, factory: F) -> ActorBuilder<'_, A>
    where
        A: Actor,
        F: FnMut(&mut Setup<'_>) -> A + Send + 'static,
    {
        let mut inbox = Vec::new();
        <A::In as Inbox>::topics(&mut inbox);
        let actor_name = name.to_owned();
        let make_slot: SlotMaker = Box::new(move |mut parts: SlotParts| {
            let rx = <A::In as Inbox>::receivers(&mut parts.wiring);
            Box::new(ActorSlot::<A, F>::new(
                actor_name,
                factory,
                rx,
                parts.outputs,
                parts.output_types,
                parts.output_topics,
                parts.counters,
                parts.supervision,
                parts.tick,
            )) as Box<dyn Slot>
        });
        self.actors.push(ActorDecl {
            name: name.to_owned(),
            group: None,
            core: None,
            idle: None,
            tick: None,
            supervision: Supervision::default(),
            subscribed: inbox.is_empty(),
            inbox,
            inbox_name: super::actor::short_type_name::<A::In>(),
            settings: HashMap::new(),
            default_capacity: DEFAULT_CAPACITY,
            outputs: Vec::new(),
            make_slot,
            errors: Vec::new(),
        });
        let index = self.actors.len() - 1;
        ActorBuilder {
            bus: self,
            index,
            _a: std::marker::PhantomData,
        }
    }

    /// Configures the thread of group `name`, shared by the actors that join it with
    /// [`ActorBuilder::group`].
    pub fn group(&mut self, name: &str) -> GroupBuilder<'_> {
        let decl = self.groups.entry(name.to_owned()).or_default();
        GroupBuilder { decl }
    }

    /// How long a graceful stop may take to drain every ring before what is left is counted as
    /// lost (default 10 s). Bounds the stop of a bus whose actors keep messages circulating.
    pub fn stop_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.stop_timeout = Some(timeout);
        self
    }

    /// Checks the declaration, makes every ring, spawns and pins the threads, makes every actor,
    /// and lets them run.
    ///
    /// # Errors
    /// Every wiring mistake and every failure to pin, spawn or make an actor, naming the actor,
    /// topic or core at fault (see [`StartError`]). On error nothing is left running.
    pub fn start(self) -> Result<RunningBus, StartError> {
        start(self)
    }
}

/// Configures one actor; every method returns the builder for chaining.
pub struct ActorBuilder<'b, A> {
    bus: &'b mut BusBuilder,
    index: usize,
    _a: std::marker::PhantomData<fn() -> A>,
}

impl<A> std::fmt::Debug for ActorBuilder<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorBuilder")
            .field("actor", &self.bus.actors[self.index].name)
            .finish()
    }
}

impl<A: Actor> ActorBuilder<'_, A> {
    fn decl(&mut self) -> &mut ActorDecl {
        &mut self.bus.actors[self.index]
    }

    /// Runs the actor on a thread of its own pinned to `core`.
    pub fn on_core(mut self, core: usize) -> Self {
        self.decl().core = Some(core);
        self
    }

    /// Runs the actor on the shared thread of group `group` (configured with
    /// [`BusBuilder::group`]), in turns with the group's other actors.
    pub fn group(mut self, group: &str) -> Self {
        self.decl().group = Some(group.to_owned());
        self.bus.groups.entry(group.to_owned()).or_default();
        self
    }

    /// The idle strategy of the actor's own thread (default [`Idle::Backoff`]).
    pub fn idle(mut self, idle: Idle) -> Self {
        self.decl().idle = Some(idle);
        self
    }

    /// Calls `on_tick` every `interval`.
    pub fn tick_every(mut self, interval: Duration) -> Self {
        self.decl().tick = Some(interval);
        self
    }

    /// What happens when a hook panics (default [`Supervision::Escalate`]).
    pub fn supervision(mut self, policy: Supervision) -> Self {
        self.decl().supervision = policy;
        self
    }

    /// Subscribes the actor to every topic of its inbox `I` (which must be the actor's `In`).
    pub fn subscribes<I: Inbox>(mut self) -> Self
    where
        A: Actor<In = I>,
    {
        self.decl().subscribed = true;
        self
    }

    /// Sets the backpressure of the actor's subscription to topic `M` (default `Block`).
    pub fn backpressure<M: Message>(mut self, policy: Backpressure) -> Self {
        let capacity = self.decl().default_capacity;
        self.decl()
            .settings
            .entry(TypeId::of::<M>())
            .or_insert(SubscriptionDecl { policy, capacity })
            .policy = policy;
        self
    }

    /// Sets the ring capacity of the actor's subscription to topic `M` (default 1024, rounded
    /// up to a power of two).
    pub fn capacity<M: Message>(mut self, capacity: usize) -> Self {
        self.decl()
            .settings
            .entry(TypeId::of::<M>())
            .or_insert(SubscriptionDecl {
                policy: Backpressure::Block,
                capacity,
            })
            .capacity = capacity;
        self
    }

    /// Sets the ring capacity of every subscription of this actor that has no capacity of its
    /// own.
    pub fn default_capacity(mut self, capacity: usize) -> Self {
        self.decl().default_capacity = capacity;
        self
    }

    /// Declares that the actor publishes topic `M`; its factory gets the handle with
    /// `setup.output::<M>()`.
    pub fn publishes<M: Message + Clone>(mut self) -> Self {
        let spec = TopicSpec::of::<M>();
        let decl = self.decl();
        if decl.outputs.iter().any(|o| o.spec.type_id == spec.type_id) {
            decl.errors.push(format!(
                "actor '{}' declares .publishes::<{}>() twice",
                decl.name, spec.type_name
            ));
        } else {
            decl.outputs.push(OutputDecl {
                spec,
                new_output: Output::<M>::new_erased,
                make_edge: edge_maker::<M>,
            });
        }
        self
    }
}

/// Configures a thread group.
#[derive(Debug)]
pub struct GroupBuilder<'b> {
    decl: &'b mut GroupDecl,
}

impl std::fmt::Debug for GroupDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupDecl")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

impl GroupBuilder<'_> {
    /// Pins the group's thread to `core`.
    pub fn on_core(self, core: usize) -> Self {
        self.decl.core = Some(core);
        self
    }

    /// The idle strategy of the group's thread (default [`Idle::Backoff`]).
    pub fn idle(self, idle: Idle) -> Self {
        self.decl.idle = Some(idle);
        self
    }
}

/// The result of validation: which thread each actor runs on, and every edge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Thread names, in order; `thread_of[actor]` indexes this.
    pub(crate) threads: Vec<String>,
    pub(crate) thread_core: Vec<Option<usize>>,
    pub(crate) thread_idle: Vec<Idle>,
    pub(crate) thread_of: Vec<usize>,
    /// (publisher, output index, subscriber, policy, capacity).
    pub(crate) edges: Vec<PlannedEdge>,
    pub(crate) warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlannedEdge {
    pub(crate) publisher: usize,
    pub(crate) output: usize,
    pub(crate) subscriber: usize,
    pub(crate) policy: Backpressure,
    pub(crate) capacity: usize,
}

/// Checks a declaration and plans threads and edges. Pure: no rings, no threads.
fn validate(bus: &BusBuilder, online: usize) -> Result<Plan, StartError> {
    let actors = &bus.actors;
    // Names.
    let mut seen = HashMap::new();
    for (i, a) in actors.iter().enumerate() {
        if seen.insert(a.name.as_str(), i).is_some() {
            return Err(StartError::DuplicateActor(a.name.clone()));
        }
        if let Some(e) = a.errors.first() {
            return Err(StartError::Invalid(e.clone()));
        }
        if !a.subscribed {
            return Err(StartError::NotSubscribed {
                actor: a.name.clone(),
                inbox: a.inbox_name,
            });
        }
        if a.group.is_some() && (a.core.is_some() || a.idle.is_some()) {
            return Err(StartError::Invalid(format!(
                "actor '{}' is in group '{}': set its core and idle strategy on the group, with bus.group(\"{}\")",
                a.name,
                a.group.as_deref().unwrap_or_default(),
                a.group.as_deref().unwrap_or_default()
            )));
        }
        for (type_id, s) in &a.settings {
            if !a.inbox.iter().any(|t| t.type_id == *type_id) {
                return Err(StartError::Invalid(format!(
                    "actor '{}' sets backpressure or capacity for a topic it does not receive",
                    a.name
                )));
            }
            if s.capacity == 0 {
                return Err(StartError::Invalid(format!(
                    "actor '{}' asks for a ring capacity of 0: use at least 1",
                    a.name
                )));
            }
        }
        if a.default_capacity == 0 {
            return Err(StartError::Invalid(format!(
                "actor '{}' asks for a default ring capacity of 0: use at least 1",
                a.name
            )));
        }
    }
    // Topic names: one type per name.
    let mut by_name: HashMap<&str, TopicSpec> = HashMap::new();
    for spec in actors
        .iter()
        .flat_map(|a| a.outputs.iter().map(|o| &o.spec).chain(a.inbox.iter()))
    {
        match by_name.get(spec.name) {
            Some(other) if other.type_id != spec.type_id => {
                return Err(StartError::TopicClash {
                    topic: spec.name,
                    first: other.type_name,
                    second: spec.type_name,
                })
            }
            _ => {
                by_name.insert(spec.name, *spec);
            }
        }
    }
    // Threads.
    let mut threads: Vec<String> = Vec::new();
    let mut thread_core: Vec<Option<usize>> = Vec::new();
    let mut thread_idle: Vec<Idle> = Vec::new();
    let mut thread_of = Vec::with_capacity(actors.len());
    let mut group_thread: HashMap<&str, usize> = HashMap::new();
    for a in actors {
        let t = match &a.group {
            Some(g) => *group_thread.entry(g.as_str()).or_insert_with(|| {
                let decl = bus.groups.get(g.as_str());
                threads.push(g.clone());
                thread_core.push(decl.and_then(|d| d.core));
                thread_idle.push(decl.and_then(|d| d.idle).unwrap_or_default());
                threads.len() - 1
            }),
            None => {
                threads.push(a.name.clone());
                thread_core.push(a.core);
                thread_idle.push(a.idle.unwrap_or_default());
                threads.len() - 1
            }
        };
        thread_of.push(t);
    }
    for (t, core) in thread_core.iter().enumerate() {
        if let Some(core) = *core {
            if core >= online {
                return Err(StartError::NoSuchCore {
                    thread: threads[t].clone(),
                    core,
                    online,
                });
            }
            let spins = |i: usize| thread_idle[i] == Idle::BusySpin;
            if let Some(u) = (0..t).find(|&u| thread_core[u] == Some(core) && spins(u) && spins(t))
            {
                return Err(StartError::SharedBusyCore {
                    core,
                    first: threads[u].clone(),
                    second: threads[t].clone(),
                });
            }
        }
    }
    // Edges.
    let mut edges = Vec::new();
    let mut warnings = Vec::new();
    for (s, sub) in actors.iter().enumerate() {
        for topic in &sub.inbox {
            let setting = sub.settings.get(&topic.type_id).copied();
            let policy = setting.map_or(Backpressure::Block, |x| x.policy);
            let capacity = setting.map_or(sub.default_capacity, |x| x.capacity);
            let mut found = false;
            for (p, publisher) in actors.iter().enumerate() {
                let Some(output) = publisher
                    .outputs
                    .iter()
                    .position(|o| o.spec.type_id == topic.type_id)
                else {
                    continue;
                };
                found = true;
                if policy == Backpressure::Block && thread_of[p] == thread_of[s] {
                    return Err(StartError::SameThreadBlock {
                        topic: topic.name,
                        publisher: publisher.name.clone(),
                        subscriber: sub.name.clone(),
                        thread: threads[thread_of[s]].clone(),
                    });
                }
                edges.push(PlannedEdge {
                    publisher: p,
                    output,
                    subscriber: s,
                    policy,
                    capacity,
                });
            }
            if !found {
                return Err(StartError::NoPublisher {
                    actor: sub.name.clone(),
                    topic: topic.name,
                });
            }
        }
    }
    for (p, publisher) in actors.iter().enumerate() {
        for (o, out) in publisher.outputs.iter().enumerate() {
            if !edges.iter().any(|e| e.publisher == p && e.output == o) {
                warnings.push(format!(
                    "actor '{}' publishes topic '{}' but no actor subscribes to it: its messages go nowhere",
                    publisher.name, out.spec.name
                ));
            }
        }
    }
    Ok(Plan {
        threads,
        thread_core,
        thread_idle,
        thread_of,
        edges,
        warnings,
    })
}

fn start(mut bus: BusBuilder) -> Result<RunningBus, StartError> {
    let plan = validate(&bus, crate::wait::online_cores())?;
    for w in &plan.warnings {
        log::warn!("{w}");
    }

    // Idle strategies first: their doorbells are wired into the rings.
    let idles: Vec<Box<dyn crate::wait::IdleStrategy>> =
        plan.thread_idle.iter().map(|i| i.make()).collect();
    let bells: Vec<Option<Arc<crate::wait::Doorbell>>> =
        idles.iter().map(|i| i.doorbell()).collect();

    // Rings.
    let mut outputs: Vec<Vec<Box<dyn AnyOutput>>> = bus
        .actors
        .iter()
        .map(|a| a.outputs.iter().map(|o| (o.new_output)()).collect())
        .collect();
    let mut wirings: Vec<Wiring> = bus.actors.iter().map(|_| Wiring::default()).collect();
    let mut edge_reports = Vec::new();
    for e in &plan.edges {
        let counters = Arc::new(EdgeCounters::default());
        let out = &bus.actors[e.publisher].outputs[e.output];
        let wake_sub = bells[plan.thread_of[e.subscriber]]
            .clone()
            .map(|b| b as Arc<dyn Notify>);
        let wake_pub = match e.policy {
            Backpressure::Block => bells[plan.thread_of[e.publisher]]
                .clone()
                .map(|b| b as Arc<dyn Notify>),
            _ => None,
        };
        let (tx, rx) = (out.make_edge)(
            e.policy,
            e.capacity,
            Arc::clone(&counters),
            wake_sub,
            wake_pub,
        );
        outputs[e.publisher][e.output].add_edge(tx);
        wirings[e.subscriber]
            .inputs
            .entry(out.spec.type_id)
            .or_default()
            .push(rx);
        edge_reports.push(EdgeInfo {
            topic: out.spec.name,
            publisher: bus.actors[e.publisher].name.clone(),
            subscriber: bus.actors[e.subscriber].name.clone(),
            policy: e.policy,
            counters,
        });
    }

    // Slots, grouped by thread.
    let mut plans: Vec<ThreadPlan> = plan
        .threads
        .iter()
        .zip(idles)
        .zip(&plan.thread_core)
        .map(|((name, idle), core)| ThreadPlan {
            name: name.clone(),
            core: *core,
            idle,
            slots: Vec::new(),
        })
        .collect();
    let mut actor_infos = Vec::new();
    let decls = std::mem::take(&mut bus.actors);
    for (i, ((decl, wiring), outs)) in decls.into_iter().zip(wirings).zip(outputs).enumerate() {
        let counters = Arc::new(ActorCounters::default());
        actor_infos.push(ActorInfo {
            name: decl.name.clone(),
            thread: plan.threads[plan.thread_of[i]].clone(),
            counters: Arc::clone(&counters),
        });
        let slot = (decl.make_slot)(SlotParts {
            wiring,
            outputs: outs,
            output_types: decl.outputs.iter().map(|o| o.spec.type_id).collect(),
            output_topics: decl.outputs.iter().map(|o| o.spec.name).collect(),
            counters,
            supervision: decl.supervision,
            tick: decl.tick,
        });
        plans[plan.thread_of[i]].slots.push(slot);
    }

    // Threads.
    let control = Arc::new(Control::new(bells.into_iter().flatten().collect()));
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::new();
    let mut failure = None;
    for thread_plan in plans {
        let name = thread_plan.name.clone();
        let control = Arc::clone(&control);
        let ready = ready_tx.clone();
        match std::thread::Builder::new()
            .name(format!("llbus-{name}"))
            .spawn(move || run_thread(thread_plan, control, ready))
        {
            Ok(h) => handles.push((name, h)),
            Err(e) => {
                failure = Some(StartError::Spawn(e));
                break;
            }
        }
    }
    drop(ready_tx);
    if failure.is_none() {
        for _ in 0..handles.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => {
                    failure = Some(StartError::Invalid(
                        "a bus thread ended before reporting ready".to_owned(),
                    ));
                    break;
                }
            }
        }
    }
    if let Some(e) = failure {
        control.set_go(GO_ABORT);
        for (_, h) in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    control.set_go(GO_RUN);
    Ok(RunningBus {
        control,
        threads: handles,
        edges: edge_reports,
        actors: actor_infos,
        warnings: plan.warnings,
        stop_timeout: bus.stop_timeout.unwrap_or(Duration::from_secs(10)),
        joined: false,
    })
}

struct EdgeInfo {
    topic: &'static str,
    publisher: String,
    subscriber: String,
    policy: Backpressure,
    counters: Arc<EdgeCounters>,
}

struct ActorInfo {
    name: String,
    thread: String,
    counters: Arc<ActorCounters>,
}

/// A started bus. Stop it with [`stop`](Self::stop) (or from an actor with
/// `ctx.request_stop()`), then [`join`](Self::join) for the final figures. Dropping it stops and
/// joins it.
pub struct RunningBus {
    control: Arc<Control>,
    threads: Vec<(String, std::thread::JoinHandle<()>)>,
    edges: Vec<EdgeInfo>,
    actors: Vec<ActorInfo>,
    warnings: Vec<String>,
    stop_timeout: Duration,
    joined: bool,
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

    /// The figures now, taken while the bus runs.
    pub fn report(&self) -> Report {
        Report {
            edges: self
                .edges
                .iter()
                .map(|e| {
                    let p = &e.counters.publisher;
                    let s = &e.counters.subscriber;
                    EdgeReport {
                        topic: e.topic,
                        publisher: e.publisher.clone(),
                        subscriber: e.subscriber.clone(),
                        policy: e.policy,
                        published: p.sent.get(),
                        handled: s.handled.get(),
                        dropped: p.dropped.get(),
                        conflated: p.conflated.get(),
                        waited: p.waited.get(),
                        lost: p.lost.get() + s.lost.get(),
                        max_depth: s.max_depth.get(),
                    }
                })
                .collect(),
            actors: self
                .actors
                .iter()
                .map(|a| ActorReport {
                    name: a.name.clone(),
                    thread: a.thread.clone(),
                    handled: a.counters.handled.get(),
                    ticks: a.counters.ticks.get(),
                    idle_rounds: a.counters.idle_rounds.get(),
                    restarts: a.counters.restarts.get(),
                    panics: a.counters.panics.get(),
                })
                .collect(),
        }
    }

    /// Waits for a stop to be requested, stops the bus gracefully, joins every thread and
    /// returns the final figures.
    ///
    /// The stop drains: every message published before it (and every message those cause) is
    /// handled, then each actor's `on_stop` runs, then what they publish is handled, then the
    /// threads exit. If draining takes longer than the stop timeout, what is left is counted as
    /// lost.
    ///
    /// # Errors
    /// [`BusError::ActorPanicked`] if an actor with the `Escalate` policy panicked (the first
    /// one); [`BusError::ThreadPanicked`] if a bus thread itself failed.
    pub fn join(mut self) -> Result<Report, BusError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Report, BusError> {
        self.joined = true;
        self.control.wait_for_stop_request();
        self.control.set_phase(DRAINING);
        let deadline = Instant::now() + self.stop_timeout;
        if !self.quiesce(deadline) {
            log::warn!(
                "the bus did not drain within {:?}; what is left is counted as lost",
                self.stop_timeout
            );
        }
        self.control.set_phase(STOPPING);
        let threads = self.threads.len();
        while self.control.stop_hooks_done.load(Ordering::Acquire) < threads
            && Instant::now() < deadline + self.stop_timeout
            && !self.threads.iter().any(|(_, h)| h.is_finished())
        {
            std::thread::sleep(Duration::from_micros(200));
            self.control.ring_all();
        }
        self.quiesce(Instant::now() + self.stop_timeout);
        self.control.set_phase(EXIT);
        let mut thread_failure = None;
        for (name, handle) in std::mem::take(&mut self.threads) {
            if let Err(payload) = handle.join() {
                thread_failure.get_or_insert((name, panic_message(&*payload)));
            }
        }
        let report = self.report();
        if let Some((thread, message)) = thread_failure {
            return Err(BusError::ThreadPanicked {
                thread,
                message,
                report: Box::new(report),
            });
        }
        match self.control.escalation() {
            Some(e) => Err(BusError::ActorPanicked {
                actor: e.actor,
                message: e.message,
                report: Box::new(report),
            }),
            None => Ok(report),
        }
    }

    /// Waits until every edge is quiet (nothing in flight) in two sweeps with no counter moving
    /// between them, or until `deadline`. Returns whether it got quiet.
    ///
    /// A handler's publishes are counted before its own message counts as handled, so a message
    /// in the middle of a cascade always shows on some edge; and counters only grow, so two equal
    /// sweeps mean nothing moved between them.
    fn quiesce(&self, deadline: Instant) -> bool {
        let sweep = || -> Option<Vec<[u64; 5]>> {
            let mut raw = Vec::with_capacity(self.edges.len());
            for e in &self.edges {
                if e.counters.in_flight() != 0 {
                    return None;
                }
                raw.push(e.counters.raw());
            }
            Some(raw)
        };
        loop {
            if let Some(first) = sweep() {
                std::thread::sleep(Duration::from_micros(200));
                if sweep().as_ref() == Some(&first) {
                    return true;
                }
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.control.ring_all();
        }
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
