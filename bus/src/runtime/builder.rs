//! Declaring a bus: [`Bus::builder`], actors, groups, external handles and their settings.
//! Every public method of the builders is here.
//!
//! The builder only records declarations (`decl`); nothing is checked or made here. `start()`
//! hands them to `validate` (a pure check of the whole declaration) and then to `start`
//! (rings, threads, actors); the running bus lives in `running`, its stop protocol in `stop`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::actor::{Actor, Setup};
use super::decl::{
    ActorDecl, CallDecl, GroupDecl, HandleDecl, OutputDecl, PatternDecl, ServeDecl, SlotMaker,
    SlotParts, SubscriptionDecl,
};
use super::error::StartError;
use super::handle::{
    make_caller, make_publisher, make_subscription, CallerKey, HandleParts, PublisherKey,
    SubscriptionKey,
};
use super::runner::{ActorSlot, Slot};
use super::running::RunningBus;
use super::{Backpressure, Idle, Supervision};
use crate::message::{Inbox, Message, TopicSpec};
use crate::service::{Reply, Request, Service};
use crate::topic::{Topic, TopicPattern};

/// The default ring capacity of a subscription.
pub const DEFAULT_CAPACITY: usize = 1024;

/// Numbers buses that declare handles, so a key is only redeemed on its own bus.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

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
    pub(super) actors: Vec<ActorDecl>,
    pub(super) groups: HashMap<String, GroupDecl>,
    pub(super) stop_timeout: Option<Duration>,
    /// Identifies this declaration to its handle keys (0 until a handle is declared).
    pub(super) serial: u64,
    /// External handles declared so far.
    pub(super) handles: usize,
    /// The bus's name (for its counters file), and whether to write that file.
    pub(super) name: Option<String>,
    pub(super) counters_file: Option<bool>,
    /// Topic renamings (`remap`), applied in `start()`, in the order given.
    pub(super) remaps: Vec<(String, String)>,
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
        let make_slot: SlotMaker = Box::new(move |parts: SlotParts| {
            Box::new(ActorSlot::<A, F>::new(actor_name, factory, parts)) as Box<dyn Slot>
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
            named: Vec::new(),
            taken: Vec::new(),
            never_waits: false,
            watches_fds: false,
            inbox_name: super::actor::short_type_name::<A::In>(),
            settings: HashMap::new(),
            topic_settings: HashMap::new(),
            default_capacity: DEFAULT_CAPACITY,
            outputs: Vec::new(),
            matching: Vec::new(),
            serves: Vec::new(),
            calls: Vec::new(),
            make_slot,
            errors: Vec::new(),
            handle: None,
        });
        let index = self.actors.len() - 1;
        ActorBuilder {
            bus: self,
            index,
            _a: std::marker::PhantomData,
        }
    }

    /// Adds a component that brings its own actor (the network bridge, for one), and returns
    /// that actor's builder so it can be placed like any other (`.on_core(2)`, `.group("io")`).
    pub fn add<C: Component>(&mut self, component: C) -> ActorBuilder<'_, C::Actor> {
        component.attach(self)
    }

    /// Configures the thread of group `name`, shared by the actors that join it with
    /// [`ActorBuilder::group`].
    pub fn group(&mut self, name: &str) -> GroupBuilder<'_> {
        let decl = self.groups.entry(name.to_owned()).or_default();
        GroupBuilder { decl }
    }

    /// How long a graceful stop may take (default 10 s), from the stop request: draining every
    /// ring, the `on_stop` hooks and what they publish. Past it every `Block` wait gives up and
    /// what is left is counted as lost; the stop ends within it plus under a second. `start()`
    /// refuses zero and a timeout over a year.
    pub fn stop_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.stop_timeout = Some(timeout);
        self
    }

    /// Declares an external publisher of topic `T` called `name`: code outside the bus (a
    /// vendor's callback, a `main` reading a file, a test) publishes through the [`Publisher`](crate::Publisher)
    /// that [`RunningBus::publisher`] gives for the returned key after `start()`. It is wired,
    /// checked and reported like an actor that publishes `T` (its name must not clash with an
    /// actor's). It publishes on `T`'s default topic; [`publisher_on`](Self::publisher_on)
    /// names one.
    pub fn publisher<T: Message + Clone>(&mut self, name: &str) -> PublisherKey<T> {
        self.publisher_on(&Topic::of(), name)
    }

    /// As [`publisher`](Self::publisher), publishing on `topic`.
    pub fn publisher_on<T: Message + Clone>(
        &mut self,
        topic: &Topic<T>,
        name: &str,
    ) -> PublisherKey<T> {
        let index = self.declare_handle(name, make_publisher::<T>);
        let decl = self.actors.last_mut();
        if let Some(decl) = decl {
            decl.outputs.push(OutputDecl::on::<T>(topic.name().clone()));
        }
        PublisherKey {
            serial: self.serial,
            index,
            _t: PhantomData,
        }
    }

    /// Declares an external subscription to topic `T` called `name`, with `Block`
    /// backpressure and the default capacity: see [`subscription_with`](Self::subscription_with).
    pub fn subscription<T: Message>(&mut self, name: &str) -> SubscriptionKey<T> {
        self.subscription_with(name, Backpressure::Block, super::DEFAULT_CAPACITY)
    }

    /// Declares an external subscription to topic `T` called `name`: code outside the bus reads
    /// what every publisher of `T` publishes through the [`Subscription`](crate::Subscription) that
    /// [`RunningBus::subscription`] gives for the returned key after `start()`. One ring of
    /// `capacity` per publisher, under `policy`, as for an actor's subscription; `start()`
    /// refuses it if nothing publishes `T`. It reads `T`'s default topic;
    /// [`subscription_on`](Self::subscription_on) names one.
    pub fn subscription_with<T: Message>(
        &mut self,
        name: &str,
        policy: Backpressure,
        capacity: usize,
    ) -> SubscriptionKey<T> {
        self.subscription_on(&Topic::of(), name, policy, capacity)
    }

    /// As [`subscription_with`](Self::subscription_with), reading `topic`.
    pub fn subscription_on<T: Message>(
        &mut self,
        topic: &Topic<T>,
        name: &str,
        policy: Backpressure,
        capacity: usize,
    ) -> SubscriptionKey<T> {
        let index = self.declare_handle(name, make_subscription::<T>);
        if let Some(decl) = self.actors.last_mut() {
            decl.taken.push(TopicSpec::named::<T>(topic.name().clone()));
            decl.settings.insert(
                TypeId::of::<T>(),
                SubscriptionDecl {
                    policy: Some(policy),
                    capacity: Some(capacity),
                },
            );
        }
        SubscriptionKey {
            serial: self.serial,
            index,
            _t: PhantomData,
        }
    }

    /// Declares an external caller of `service` called `name`: code outside the bus calls the
    /// service through the [`Caller`](crate::Caller) that [`RunningBus::caller`] gives for the
    /// returned key after `start()`, each call blocking until its reply, an error or its
    /// timeout. Its requests queue in a ring to the server (under the server's `Block`, the
    /// default, a call waits for room within its timeout; under `DropNewest` it fails
    /// `QueueFull` at once); its replies come back on a ring of its own. `start()` refuses a
    /// caller of a service no actor serves, naming both.
    pub fn caller<Req: Message + Clone, Rep: Message + Clone>(
        &mut self,
        service: &Service<Req, Rep>,
        name: &str,
    ) -> CallerKey<Req, Rep> {
        let number: usize = self.actors.iter().map(|a| a.calls.len()).sum();
        let reply = Service::<Req, Rep>::reply_name(service.name(), number);
        let index = self.declare_handle(name, make_caller::<Req, Rep>);
        if let Some(decl) = self.actors.last_mut() {
            decl.outputs
                .push(OutputDecl::on::<Request<Req>>(service.name().clone()));
            decl.taken
                .push(TopicSpec::named::<Reply<Rep>>(reply.clone()));
            decl.calls
                .push(CallDecl::of::<Req, Rep>(service.name().clone(), reply));
        }
        CallerKey {
            serial: self.serial,
            index,
            _t: PhantomData,
        }
    }

    /// Renames topic `from` to `to` for everything on this bus that publishes or receives it,
    /// as ROS 2's remapping does: a program's topics are renamed at deployment without a change
    /// to its code. Applied in `start()`, to default and named topics alike, once (a name
    /// renamed to is not renamed again); the renamed topic's id is that of `to`. `start()`
    /// refuses an invalid name and a name renamed twice, naming both.
    ///
    /// ```
    /// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, llbus::Message)]
    /// # #[message(topic = "md.quote")]
    /// # struct Quote { px: f64 }
    /// use llbus::{Backpressure, Bus, Topic};
    ///
    /// let mut bus = Bus::builder();
    /// // The feed's code publishes `Quote` on its default topic, `md.quote`; this deployment
    /// // is the NYSE one.
    /// bus.remap("md.quote", "md.quote.nyse");
    /// let feed = bus.publisher::<Quote>("feed");
    /// let nyse = Topic::<Quote>::named("md.quote.nyse").unwrap();
    /// let reader = bus.subscription_on(&nyse, "reader", Backpressure::Block, 16);
    /// let mut running = bus.start().unwrap();
    /// let mut feed = running.publisher(feed).unwrap();
    /// let mut reader = running.subscription(reader).unwrap();
    /// feed.publish(Quote { px: 1.5 }).unwrap();
    /// assert_eq!(reader.recv().unwrap().px, 1.5);
    /// assert!(running.report().edge("md.quote.nyse", "feed", "reader").is_some());
    /// # drop((feed, reader));
    /// # running.stop();
    /// ```
    pub fn remap(&mut self, from: &str, to: &str) -> &mut Self {
        self.remaps.push((from.to_owned(), to.to_owned()));
        self
    }

    /// Adds the declaration of a handle: an actor that no thread runs, on a "thread" of its own
    /// (which `start()` does not spawn; the handle takes its idle strategy).
    fn declare_handle(
        &mut self,
        name: &str,
        make: fn(HandleParts) -> Box<dyn Any + Send>,
    ) -> usize {
        if self.serial == 0 {
            self.serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        }
        let index = self.handles;
        self.handles += 1;
        let make_slot: SlotMaker = Box::new(|_| unreachable!("no thread runs a handle"));
        self.actors.push(ActorDecl {
            name: name.to_owned(),
            group: None,
            core: None,
            idle: Some(Idle::Park),
            tick: None,
            supervision: Supervision::Stop,
            inbox: Vec::new(),
            named: Vec::new(),
            taken: Vec::new(),
            never_waits: false,
            watches_fds: false,
            inbox_name: "()",
            subscribed: true,
            settings: HashMap::new(),
            topic_settings: HashMap::new(),
            default_capacity: super::DEFAULT_CAPACITY,
            outputs: Vec::new(),
            matching: Vec::new(),
            serves: Vec::new(),
            calls: Vec::new(),
            make_slot,
            errors: Vec::new(),
            handle: Some(HandleDecl { index, make }),
        });
        index
    }

    /// Checks the declaration, makes every ring, spawns and pins the threads, makes every actor,
    /// and lets them run.
    ///
    /// # Errors
    /// Every wiring mistake and every failure to pin, spawn or make an actor, naming the actor,
    /// topic or core at fault (see [`StartError`]). On error nothing is left running.
    pub fn start(self) -> Result<RunningBus, StartError> {
        super::start::start(self)
    }
}

/// Something that adds an actor of its own to a bus: `bus.add(component)`.
pub trait Component {
    /// The actor it adds.
    type Actor: Actor;

    /// Declares the actor on `bus` (with `bus.actor(..)`) and returns its builder.
    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, Self::Actor>;
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

    /// Runs the actor on a thread of its own pinned to `core`, which must be one of the cores
    /// the process may run on ([`allowed_cores`](crate::allowed_cores)); `start()` refuses
    /// another, naming the allowed set.
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

    /// Declares that the actor watches file descriptors with
    /// [`Context::wake_on_readable`](crate::Context::wake_on_readable) (a network bridge does).
    /// Its thread's [`Idle::Backoff`] then ends, like [`Idle::Park`], in a sleep in `epoll` on
    /// those descriptors and the thread's doorbell, instead of yielding for ever; publishers
    /// to that thread pay the doorbell's fence and load (no system call unless it sleeps).
    /// Without this declaration, `Backoff` never sleeps, and its publishers pay nothing.
    pub fn watches_fds(mut self) -> Self {
        self.decl().watches_fds = true;
        self
    }

    /// Calls `on_tick` every `interval` (more than zero and at most a year: `start()` refuses
    /// others).
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

    /// Subscribes the actor to `topic`, one of the topics of a message type its inbox takes,
    /// instead of that type's default topic. Call it once per topic: an actor may receive
    /// several topics of one type (two venues' quotes), and [`Context::topic`](crate::Context::topic)
    /// tells which one each message came on. A type of the inbox that no `subscribes_to` names
    /// keeps its default topic. `start()` refuses a topic whose type the inbox does not take,
    /// and a topic named twice.
    pub fn subscribes_to<M: Message>(mut self, topic: &Topic<M>) -> Self {
        let decl = self.decl();
        decl.subscribed = true;
        decl.named.push(TopicSpec::named::<M>(topic.name().clone()));
        self
    }

    /// Subscribes the actor to topic `M` outside its inbox: one ring per publisher, as usual,
    /// but the rings are handed to its factory (`setup.inputs::<M>()`) for the actor to poll
    /// itself, in `poll`. For actors whose topics are known only at run time, such as the
    /// network bridge. Such an actor owns its rings, so it cannot use `Supervision::Restart`.
    pub fn takes<M: Message>(self) -> Self {
        self.takes_on(&Topic::<M>::of())
    }

    /// As [`takes`](Self::takes), for `topic`. Several topics of one type can be taken: their
    /// rings all come with `setup.inputs::<M>()`, and
    /// [`Inputs::poll_topics`](crate::Inputs::poll_topics) tells them apart.
    pub fn takes_on<M: Message>(mut self, topic: &Topic<M>) -> Self {
        let spec = TopicSpec::named::<M>(topic.name().clone());
        let decl = self.decl();
        if decl
            .taken
            .iter()
            .chain(&decl.inbox)
            .any(|t| t.name == spec.name)
        {
            decl.errors.push(format!(
                "actor '{}' subscribes to topic '{}' twice (its inbox or .takes::<{}>())",
                decl.name, spec.name, spec.type_name
            ));
        } else {
            decl.taken.push(spec);
        }
        self
    }

    /// Records a mistake in this actor's declaration that only its component can see (a
    /// network bridge importing from an address its socket cannot reach, for one): `start()`
    /// then refuses the bus with [`StartError::Invalid`] carrying `reason`, which should name
    /// the actor and what to change.
    pub fn invalid(mut self, reason: impl Into<String>) -> Self {
        self.decl().errors.push(reason.into());
        self
    }

    /// Promises that the actor never waits on a full ring, and makes the bus keep it: its
    /// `Context::publish` behaves as `Context::try_publish` (a message for a full `Block` ring
    /// is dropped and counted). Its `Block` edges cannot deadlock, so `start()` does not warn
    /// about cycles through them or refuse them within one thread. The network bridge makes
    /// this promise.
    pub fn never_waits(mut self) -> Self {
        self.decl().never_waits = true;
        self
    }

    /// Sets the backpressure of the actor's subscription to topic `M` (default `Block`).
    pub fn backpressure<M: Message>(mut self, policy: Backpressure) -> Self {
        self.decl()
            .settings
            .entry(TypeId::of::<M>())
            .or_default()
            .policy = Some(policy);
        self
    }

    /// Sets the ring capacity of the actor's subscription to topic `M` (default: the actor's
    /// [`default_capacity`](Self::default_capacity), rounded up to a power of two). `start()`
    /// refuses 0 and a ring larger than the machine's memory.
    pub fn capacity<M: Message>(mut self, capacity: usize) -> Self {
        self.decl()
            .settings
            .entry(TypeId::of::<M>())
            .or_default()
            .capacity = Some(capacity);
        self
    }

    /// Sets the backpressure of the actor's subscription to `topic`, over its type's setting.
    pub fn backpressure_on<M: Message>(mut self, topic: &Topic<M>, policy: Backpressure) -> Self {
        self.decl()
            .topic_settings
            .entry(topic.name().clone())
            .or_default()
            .policy = Some(policy);
        self
    }

    /// Sets the ring capacity of the actor's subscription to `topic`, over its type's setting.
    pub fn capacity_on<M: Message>(mut self, topic: &Topic<M>, capacity: usize) -> Self {
        self.decl()
            .topic_settings
            .entry(topic.name().clone())
            .or_default()
            .capacity = Some(capacity);
        self
    }

    /// Sets the ring capacity of every subscription of this actor that has no capacity of its
    /// own (default [`DEFAULT_CAPACITY`]), whether those were declared before or after this.
    pub fn default_capacity(mut self, capacity: usize) -> Self {
        self.decl().default_capacity = capacity;
        self
    }

    /// Declares that the actor publishes topic `M` (its default topic); its factory gets the
    /// handle with `setup.output::<M>()`.
    pub fn publishes<M: Message + Clone>(self) -> Self {
        self.publishes_to(&Topic::<M>::of())
    }

    /// Declares that the actor publishes `topic`; its factory gets the handle with
    /// `setup.output_on(&topic)`. An actor may publish several topics of one type.
    pub fn publishes_to<M: Message + Clone>(mut self, topic: &Topic<M>) -> Self {
        let decl = self.decl();
        if decl.outputs.iter().any(|o| o.declared == *topic.name()) {
            decl.errors.push(format!(
                "actor '{}' declares that it publishes topic '{}' ({}) twice",
                decl.name,
                topic.name(),
                std::any::type_name::<M>()
            ));
        } else {
            decl.outputs.push(OutputDecl::on::<M>(topic.name().clone()));
        }
        self
    }

    /// Declares that the actor serves `service`: it receives each call's [`Request`] in its
    /// inbox (which must take `Request<Req>`: `type In = Request<Req>`, or a derived inbox with
    /// such a variant), splits it with [`Replies::accept`](crate::Replies::accept) (the [`Replies`](crate::Replies) come from
    /// [`Setup::replies`]) and answers once with [`Context::reply`](crate::Context::reply).
    /// One actor serves a service: `start()` refuses a second, naming both. Its request
    /// subscription is set like any other, on [`Service::requests`]:
    /// `.backpressure_on(&service.requests(), Backpressure::DropNewest)` refuses a call at once
    /// ([`CallError::QueueFull`](crate::CallError::QueueFull)) when the caller's ring to it is
    /// full, instead of making the call wait for room.
    pub fn serves<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
    ) -> Self {
        self = self.subscribes_to(&service.requests());
        self.serving(service)
    }

    /// As [`serves`](Self::serves), for an actor that takes its rings itself
    /// ([`takes`](Self::takes): a network bridge): the request rings are not in its inbox but
    /// handed to its factory, as `setup.inputs_on(&service.requests())` (or with
    /// [`Setup::inputs`] of `Request<Req>`), for it to poll. Everything else is as for
    /// `serves`: [`Setup::replies`], [`Replies::accept`](crate::Replies::accept),
    /// [`Context::reply`](crate::Context::reply), one server per service, and the counts.
    pub fn serves_taken<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
    ) -> Self {
        self = self.takes_on(&service.requests());
        self.serving(service)
    }

    /// Records that the actor serves `service` (its request subscription is declared).
    fn serving<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
    ) -> Self {
        self.decl().serves.push(ServeDecl {
            service: service.name().clone(),
            reply: OutputDecl::on::<Reply<Rep>>,
        });
        self
    }

    /// Declares that the actor calls `service`: its factory gets the [`CallOut`](crate::CallOut)
    /// with [`Setup::caller`], a hook calls with [`Context::call`](crate::Context::call), which
    /// returns at once (unless the server's ring is full: see there), and each call's end (the
    /// reply, or [`CallError`](crate::CallError)) comes into the inbox as a [`Reply`] (which
    /// must be one of its types: `type In = Reply<Rep>`, or a derived inbox with such a
    /// variant), opened with [`Context::settle`](crate::Context::settle). At most
    /// [`MAX_CALLS_IN_FLIGHT`](crate::MAX_CALLS_IN_FLIGHT) calls are in flight at once. The
    /// calls still open when the bus stops end [`CallError::Stopped`](crate::CallError::Stopped)
    /// in the inbox, after the bus has drained.
    pub fn calls<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
    ) -> Self {
        let reply = self.reply_topic(service);
        self = self.subscribes_to(&reply);
        self.calling(service, reply)
    }

    /// As [`calls`](Self::calls), for an actor that takes its rings itself
    /// ([`takes`](Self::takes): a network bridge): its reply ring (where the server's replies,
    /// the timeouts and the stop's ends come) is not in its inbox but handed to its factory,
    /// as [`Setup::call_replies`], for it to poll and open each reply with
    /// [`Context::settle`](crate::Context::settle). Everything else is as for `calls`:
    /// [`Setup::caller`], [`Context::call`](crate::Context::call), the timeouts, the stop's
    /// ends, and the counts. At the stop, the actor's [`drain`](super::Actor::drain) settles
    /// what comes into that ring.
    pub fn calls_taken<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
    ) -> Self {
        let reply = self.reply_topic(service);
        self = self.takes_on(&reply);
        self.calling(service, reply)
    }

    /// The reply topic of this actor's call of `service`: the next caller's.
    fn reply_topic<Req: Message + Clone, Rep: Message + Clone>(
        &self,
        service: &Service<Req, Rep>,
    ) -> Topic<Reply<Rep>> {
        let number: usize = self.bus.actors.iter().map(|a| a.calls.len()).sum();
        Topic::with_name(Service::<Req, Rep>::reply_name(service.name(), number))
    }

    /// Records that the actor calls `service`, its replies coming on `reply` (whose
    /// subscription is declared): its request and loopback outputs, and the reply ring's
    /// settings.
    fn calling<Req: Message + Clone, Rep: Message + Clone>(
        mut self,
        service: &Service<Req, Rep>,
        reply: Topic<Reply<Rep>>,
    ) -> Self {
        let reply = reply.name().clone();
        let decl = self.decl();
        decl.outputs
            .push(OutputDecl::on::<Request<Req>>(service.name().clone()));
        // Timeouts go into its own reply ring, as the server's replies do.
        let mut loopback = OutputDecl::on::<Reply<Rep>>(reply.clone());
        loopback.calling = Some(service.name().clone());
        decl.outputs.push(loopback);
        // Nothing ever waits on it (the server answers without waiting; the timeouts are
        // published by the caller's own thread): a reply or timeout that found it full would
        // be dropped, which its capacity (twice the calls in flight) rules out.
        decl.topic_settings.insert(
            reply.clone(),
            SubscriptionDecl {
                policy: Some(Backpressure::DropNewest),
                capacity: Some(2 * crate::service::MAX_CALLS_IN_FLIGHT),
            },
        );
        decl.calls
            .push(CallDecl::of::<Req, Rep>(service.name().clone(), reply));
        self
    }

    /// Declares that the actor publishes every topic of type `M` whose running name (after
    /// [`BusBuilder::remap`]) matches `pattern` and that another actor or handle subscribes
    /// to: `start()` adds one output for each, and the factory gets them with
    /// [`Setup::outputs_matching`]. The topics are fixed at start; a topic nobody subscribes to
    /// has no output (nobody would receive it). This is how a component that learns names at
    /// run time (a network bridge's `discover_matching`) feeds the named subscriptions of the
    /// bus.
    pub fn publishes_matching<M: Message + Clone>(mut self, pattern: &TopicPattern) -> Self {
        let decl = self.decl();
        let type_id = TypeId::of::<M>();
        if decl
            .matching
            .iter()
            .any(|p| p.type_id == type_id && p.pattern == *pattern)
        {
            decl.errors.push(format!(
                "actor '{}' declares that it publishes topics matching '{pattern}' ({}) twice",
                decl.name,
                std::any::type_name::<M>()
            ));
        } else {
            decl.matching.push(PatternDecl {
                pattern: pattern.clone(),
                type_id,
                output: OutputDecl::on::<M>,
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
