//! The actor trait and what an actor sees: its [`Setup`] when it is made, its [`Context`] while
//! it runs.

use std::time::Instant;

use super::control::Control;
use super::decl::OutputKey;
use super::edge::{Inputs, Offered, Out, Output, Until, Wait, Wiring};
use super::metrics::{ActorCounters, Metric};
use super::names::Renames;
use crate::message::{Inbox, Message};
use crate::topic::{Topic, TopicName, TopicPattern};
use crate::wait::IdleStrategy;

/// A unit of work on the bus: it handles the messages of its inbox and publishes its outputs.
///
/// Every hook gets a [`Context`] for publishing, the time, and stopping the bus. Hooks run on the
/// actor's thread, one at a time; an actor that shares a thread with others (a group) must
/// return promptly so that they get their turn.
pub trait Actor: Send + 'static {
    /// What this actor receives: a [`Message`] type, an enum deriving `Inbox`, or `()`.
    type In: Inbox;

    /// Runs once on the actor's thread before any other hook (and again after a restart).
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        let _ = ctx;
    }

    /// Handles one message.
    fn on_message(&mut self, msg: Self::In, ctx: &mut Context<'_>);

    /// Runs every round of the actor's thread, for actors that poll something other than their
    /// inbox (a socket, a device). Returns how much work it did: `0` lets the thread idle.
    /// Not called once the bus is stopping ([`drain`](Self::drain) is, instead).
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let _ = ctx;
        0
    }

    /// Runs instead of [`poll`](Self::poll) once the bus is stopping, every round until the
    /// stop completes: handle what is still queued in rings the actor took for itself
    /// (`ActorBuilder::takes`), but take no new input from outside. Returns how much work it did.
    fn drain(&mut self, ctx: &mut Context<'_>) -> usize {
        let _ = ctx;
        0
    }

    /// Runs every tick interval (`ActorBuilder::tick_every`). Not called once the bus is
    /// stopping.
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let _ = ctx;
    }

    /// Runs once when the bus stops gracefully, after every message published before the stop
    /// was handled. It may still publish; those messages are handled too.
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        let _ = ctx;
    }
}

/// What an actor's factory gets: its name and its output handles.
pub struct Setup<'a> {
    pub(crate) actor: &'a str,
    pub(crate) outputs: &'a [OutputKey],
    /// The patterns the actor publishes by (`publishes_matching`).
    pub(crate) patterns: &'a [(std::any::TypeId, TopicPattern)],
    /// Where the actor's responders' unanswered calls go.
    pub(crate) orphans: &'a std::sync::Arc<crate::service::Orphans>,
    /// The services the actor serves, as they run.
    pub(crate) serves: &'a [TopicName],
    pub(crate) renames: &'a Renames,
    pub(crate) errors: &'a mut Vec<String>,
    pub(crate) taken: &'a mut Wiring,
    pub(crate) counters: &'a ActorCounters,
}

impl std::fmt::Debug for Setup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("actor", &self.actor)
            .field(
                "outputs",
                &self.outputs.iter().map(|o| &o.declared).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Setup<'_> {
    /// The actor's name.
    pub fn name(&self) -> &str {
        self.actor
    }

    /// The name `topic` runs under on this bus: itself, or what [`BusBuilder::remap`](crate::BusBuilder::remap)
    /// renamed it to. The bus routes by the running name; a component that puts topic ids on a
    /// wire or in a file (a network bridge, a recorder) uses it too, so that a renamed topic is
    /// renamed everywhere.
    pub fn topic<M: Message>(&self, topic: &Topic<M>) -> Topic<M> {
        match self.renames.get(topic.name().as_str()) {
            Some(to) => Topic::with_name(to.clone()),
            None => topic.clone(),
        }
    }

    /// The handle for publishing `M` on its default topic, which the actor must declare with
    /// `.publishes::<M>()`. An undeclared output makes `start()` fail, naming the actor and the
    /// topic.
    pub fn output<M: Message + Clone>(&mut self) -> Out<M> {
        self.output_on(&Topic::<M>::of())
    }

    /// The handle for publishing on `topic`, which the actor must declare with
    /// `.publishes_to(&topic)` (or `.publishes::<M>()` for the type's default topic). The topic
    /// is the one the actor's code names: if the bus remaps it, the handle publishes under the
    /// new name.
    pub fn output_on<M: Message + Clone>(&mut self, topic: &Topic<M>) -> Out<M> {
        let id = std::any::TypeId::of::<M>();
        match self
            .outputs
            .iter()
            .position(|o| o.type_id == id && o.declared == *topic.name())
        {
            Some(index) => Out::new(index),
            None => {
                self.errors.push(format!(
                    "actor '{}' asks for an output of topic '{}' ({}) but does not declare it: add .publishes_to(&topic) (or .publishes::<{}>() for the type's own topic) to its builder",
                    self.actor,
                    topic.name(),
                    std::any::type_name::<M>(),
                    short_type_name::<M>(),
                ));
                Out::new(usize::MAX)
            }
        }
    }
}

impl Setup<'_> {
    /// The outputs `start()` made for `pattern`, which the actor must declare with
    /// `.publishes_matching::<M>(&pattern)`: one per topic of type `M` that another actor or
    /// handle subscribes to and whose running name matches, with that topic (its running
    /// name). Empty when nothing matched. An undeclared pattern makes `start()` fail, naming
    /// the actor and the pattern.
    pub fn outputs_matching<M: Message + Clone>(
        &mut self,
        pattern: &TopicPattern,
    ) -> Vec<(Topic<M>, Out<M>)> {
        let id = std::any::TypeId::of::<M>();
        if !self.patterns.iter().any(|(t, p)| *t == id && p == pattern) {
            self.errors.push(format!(
                "actor '{}' asks for the outputs of topics matching '{pattern}' ({}) but does not declare them: add .publishes_matching::<{}>(&pattern) to its builder",
                self.actor,
                std::any::type_name::<M>(),
                short_type_name::<M>(),
            ));
            return Vec::new();
        }
        (self.outputs.iter().enumerate())
            .filter(|(_, o)| o.type_id == id && o.matched.as_ref() == Some(pattern))
            .map(|(index, o)| (Topic::with_name(o.declared.clone()), Out::new(index)))
            .collect()
    }

    /// How the actor answers `service`, which it must declare with `.serves(&service)`: one
    /// reply output per caller (none when nobody calls), found from each request's caller by
    /// [`Replies::accept`](crate::Replies::accept). An undeclared service makes `start()` fail,
    /// naming the actor and the service.
    pub fn replies<Req: Message, Rep: Message + Clone>(
        &mut self,
        service: &crate::Service<Req, Rep>,
    ) -> crate::Replies<Rep> {
        let running = self.topic(&Topic::<Req>::with_name(service.name().clone()));
        if !self.serves.contains(running.name()) {
            self.errors.push(format!(
                "actor '{}' asks for the replies of service '{}' but does not serve it: add .serves(&service) to its builder",
                self.actor,
                service.name(),
            ));
        }
        let id = std::any::TypeId::of::<crate::Reply<Rep>>();
        let outs: Vec<_> = (self.outputs.iter().enumerate())
            .filter(|(_, o)| o.type_id == id && o.serving.as_ref() == Some(running.name()))
            .map(|(index, o)| (o.declared.id(), Out::new(index)))
            .collect();
        crate::Replies {
            outs,
            orphans: std::sync::Arc::clone(self.orphans),
        }
    }

    /// How the actor calls `service`, which it must declare with `.calls(&service)`. An
    /// undeclared service makes `start()` fail, naming the actor and the service.
    pub fn caller<Req: Message + Clone, Rep: Message + Clone>(
        &mut self,
        service: &crate::Service<Req, Rep>,
    ) -> crate::CallOut<Req, Rep> {
        let (req, rep) = (
            std::any::TypeId::of::<crate::Request<Req>>(),
            std::any::TypeId::of::<crate::Reply<Rep>>(),
        );
        let requests =
            (self.outputs.iter()).position(|o| o.type_id == req && o.declared == *service.name());
        let loopback = (self.outputs.iter().enumerate())
            .find(|(_, o)| o.type_id == rep && o.calling.as_ref() == Some(service.name()));
        match (requests, loopback) {
            (Some(requests), Some((index, o))) => crate::CallOut {
                requests: Out::new(requests),
                loopback: Out::new(index),
                reply_to: o.declared.id(),
            },
            _ => {
                self.errors.push(format!(
                    "actor '{}' asks to call service '{}' but does not declare it: add .calls(&service) to its builder",
                    self.actor,
                    service.name(),
                ));
                crate::CallOut {
                    requests: Out::new(usize::MAX),
                    loopback: Out::new(usize::MAX),
                    reply_to: 0,
                }
            }
        }
    }

    /// The rings of the replies to the actor's calls of `service`, which it must declare with
    /// `.calls_taken(&service)`, for it to poll itself and open each reply with
    /// [`Context::settle`](crate::Context::settle): the server's replies, the timeouts and the
    /// stop's ends all come there. Asking for a service not declared so (or twice) makes
    /// `start()` fail, naming the actor and the service.
    pub fn call_replies<Req: Message + Clone, Rep: Message + Clone>(
        &mut self,
        service: &crate::Service<Req, Rep>,
    ) -> Inputs<crate::Reply<Rep>> {
        let rep = std::any::TypeId::of::<crate::Reply<Rep>>();
        let reply = (self.outputs.iter())
            .find(|o| o.type_id == rep && o.calling.as_ref() == Some(service.name()))
            .map(|o| o.declared.id());
        let inputs = match reply {
            Some(id) => Inputs::take_topic(self.taken, id),
            None => Inputs::take_topic(self.taken, 0),
        };
        if reply.is_none() || inputs.rings() == 0 {
            self.errors.push(format!(
                "actor '{}' asks for the replies of its calls of service '{}' but did not declare .calls_taken(&service) for it (or took them already)",
                self.actor,
                service.name(),
            ));
        }
        inputs
    }

    /// The rings of topic `M`, which the actor subscribed to with `.takes::<M>()`, for it to
    /// poll itself. Each topic's rings can be taken once; asking again (or for a topic not
    /// declared with `takes`) makes `start()` fail, naming the actor and the topic.
    pub fn inputs<M: Message>(&mut self) -> Inputs<M> {
        let id = std::any::TypeId::of::<M>();
        if !self.taken.inputs.contains_key(&id) {
            self.errors.push(format!(
                "actor '{}' asks for the rings of topic '{}' but did not declare .takes::<{}>() (or took them already)",
                self.actor,
                M::TOPIC,
                short_type_name::<M>(),
            ));
        }
        Inputs::take(self.taken)
    }

    /// The rings of `topic` only, which the actor subscribed to with `.takes_on(&topic)`: for
    /// an actor that takes several topics of one type and keeps them apart (a network bridge
    /// exporting two venues). The rings of the type's other topics stay for
    /// [`inputs`](Self::inputs) or another `inputs_on`. Asking for a topic not taken makes
    /// `start()` fail, naming the actor and the topic.
    pub fn inputs_on<M: Message>(&mut self, topic: &Topic<M>) -> Inputs<M> {
        let running = self.topic(topic);
        let inputs = Inputs::take_topic(self.taken, running.id());
        // Every topic subscribed to has a publisher (`start()` checks), so no ring means that
        // the topic was not taken, or was taken already.
        if inputs.rings() == 0 {
            self.errors.push(format!(
                "actor '{}' asks for the rings of topic '{}' but did not declare .takes_on(&topic) for it (or took them already)",
                self.actor,
                running.name(),
            ));
        }
        inputs
    }

    /// A named metric of this actor's own, shown in the bus's report under the actor. Register
    /// it here, in the factory; update it from the actor's hooks.
    pub fn metric(&mut self, name: &str) -> Metric {
        self.counters.metric(name)
    }
}

pub(crate) fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

/// What an actor's hooks get: publishing, the time, and stopping the bus.
pub struct Context<'a> {
    pub(crate) actor: &'a str,
    pub(crate) outputs: &'a mut [Box<dyn std::any::Any + Send>],
    /// The topics the actor receives, as they run.
    pub(crate) topics: &'a [TopicName],
    /// The actor's calls in flight.
    pub(crate) pending: &'a mut crate::service::PendingCalls,
    /// Where the actor's own responders' orphaned calls go: tells its responders from another
    /// actor's.
    pub(crate) orphans: &'a std::sync::Arc<crate::service::Orphans>,
    /// The id of the topic the messages being handled came on, set by the inbox once a ring
    /// (`on_message` only; `None` in the other hooks).
    pub(crate) topic: Option<&'a std::cell::Cell<Option<u64>>>,
    pub(crate) idle: &'a mut (dyn IdleStrategy + 'static),
    pub(crate) now: &'a std::cell::Cell<Option<Instant>>,
    pub(crate) control: &'a Control,
    /// The outputs published on in this hook, a bit per output index (the last bit standing
    /// for it and every later one): the runner commits their broadcast rings after the hook.
    pub(crate) published: u64,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("actor", &self.actor)
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

impl Context<'_> {
    /// Publishes `msg` on `out` to every subscriber of its topic.
    ///
    /// Allocates nothing and takes no lock. What happens when a subscriber's ring is full
    /// depends on that subscription's backpressure: `Block` waits with this thread's idle
    /// strategy, `DropNewest` drops and counts, `Latest` overwrites and counts. A message for a
    /// subscriber that has stopped is counted as lost at once. A `Block` wait gives up, and
    /// counts the message lost, if a stop runs past its drain phase (the stop timeout), and at
    /// once when a stop is requested if the subscriber is an external
    /// [`Subscription`](crate::Subscription) (the stop never waits for a reader outside the
    /// bus). An
    /// actor declared `never_waits` never waits: its publishes to a full ring are dropped and
    /// counted, as with [`try_publish`](Self::try_publish).
    ///
    /// Two or more `Block` subscribers of one output that are actors of this bus, at one
    /// capacity, share a broadcast ring (unless this actor is declared `never_waits`): each
    /// gets every message, and the slowest of them paces the publisher for all. They see what
    /// a hook publishes when the hook returns, or sooner when a publish waits for their room:
    /// the hook's publishes reach their ring as one run, with one store of its index (an
    /// implicit burst). The counts are made as each message is published.
    ///
    /// # Panics
    /// If `out` is not one of this actor's outputs (a handle taken by another actor).
    #[inline]
    pub fn publish<M: Message + Clone>(&mut self, out: Out<M>, msg: M) {
        let control = self.control;
        let (output, idle) = self.output(out);
        // The runner commits after the hook: the hook's publishes go out as one run.
        output.publish_uncommitted(
            msg,
            Some(&mut Wait {
                idle,
                control,
                deadline: None,
            }),
        );
    }

    /// Publishes `msg` like [`publish`](Self::publish), but never waits: a subscriber whose
    /// `Block` ring is full does not get it, and it is counted as dropped on that edge. For
    /// actors that must keep going whatever the bus does, such as a network bridge (the remote
    /// side cannot be slowed down anyway, and waiting could close a cycle of full rings).
    ///
    /// `Block` subscribers that share a broadcast ring (see [`publish`](Self::publish)) have
    /// room only when the slowest of them has: when it is full, none of them gets `msg`, and it
    /// is counted dropped on each of their edges. An actor that must not let one stuck
    /// subscriber starve the others declares [`never_waits`](crate::ActorBuilder::never_waits):
    /// its edges are never shared.
    ///
    /// # Panics
    /// If `out` is not one of this actor's outputs.
    #[inline]
    pub fn try_publish<M: Message + Clone>(&mut self, out: Out<M>, msg: M) {
        self.output(out).0.publish_uncommitted(msg, None);
    }

    /// Publishes clones of `msgs`, in order, on `out` to every subscriber of its topic: what
    /// calling [`publish`](Self::publish) for each would do (the same order, backpressure and
    /// counting), but each subscriber's ring takes the burst as one batch, with one store of
    /// its index and of each counter, and the output is looked up once. When a `Block` ring
    /// has room for part of the burst, that part goes in at once and the rest waits for room.
    ///
    /// Allocates nothing and takes no lock.
    ///
    /// ```
    /// use llbus::{Actor, Context, Out};
    /// # #[derive(llbus::Message, Clone)]
    /// # #[message(topic = "doc.tick")]
    /// # struct Tick(u64);
    /// struct Feed {
    ///     out: Out<Tick>,
    ///     next: u64,
    /// }
    ///
    /// impl Actor for Feed {
    ///     type In = ();
    ///     fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    ///     fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
    ///         let burst: [Tick; 4] = std::array::from_fn(|i| Tick(self.next + i as u64));
    ///         self.next += 4;
    ///         ctx.publish_slice(self.out, &burst);
    ///         burst.len()
    ///     }
    /// }
    /// ```
    ///
    /// # Panics
    /// If `out` is not one of this actor's outputs. A `Clone` of `M` that panics leaves the
    /// clones made before it published and counted, and nothing after it.
    #[inline]
    pub fn publish_slice<M: Message + Clone>(&mut self, out: Out<M>, msgs: &[M]) {
        let control = self.control;
        let (output, idle) = self.output(out);
        output.publish_slice(
            msgs,
            Some(&mut Wait {
                idle,
                control,
                deadline: None,
            }),
        );
    }

    /// Publishes clones of `msgs` like [`publish_slice`](Self::publish_slice), but never
    /// waits, as [`try_publish`](Self::try_publish): what does not fit in a subscriber's ring
    /// is counted dropped on that edge.
    ///
    /// # Panics
    /// If `out` is not one of this actor's outputs.
    #[inline]
    pub fn try_publish_slice<M: Message + Clone>(&mut self, out: Out<M>, msgs: &[M]) {
        self.output(out).0.publish_slice(msgs, None);
    }

    /// The typed output behind `out`, and this thread's idle strategy to wait with.
    #[inline]
    fn output<M: Message + Clone>(
        &mut self,
        out: Out<M>,
    ) -> (&mut Output<M>, &mut (dyn IdleStrategy + 'static)) {
        self.published |= 1 << out.index.min(63);
        let output = self
            .outputs
            .get_mut(out.index)
            .and_then(|o| o.downcast_mut::<Output<M>>());
        match output {
            Some(output) => (output, &mut *self.idle),
            None => panic!(
                "actor '{}' published on {:?}, which is not one of its outputs",
                self.actor, out
            ),
        }
    }

    /// Answers a call of a service this actor serves (see [`Replies::accept`](crate::Replies::accept)):
    /// `Ok(reply)`, or an error the caller receives as it is. Never waits: the reply goes into
    /// the caller's own ring, and is dropped and counted there if the caller lets it fill.
    ///
    /// A responder is answered from the actor that accepted it. One handed to another actor
    /// and answered through that actor's context still reaches its caller: the answer goes
    /// out through its server (after the server's next hook, as an unanswered responder's
    /// does), and a warning is logged once per server.
    #[inline]
    pub fn reply<Rep: Message + Clone>(
        &mut self,
        responder: crate::Responder<Rep>,
        result: Result<Rep, crate::CallError>,
    ) {
        if !responder.belongs_to(self.orphans) {
            responder.misrouted(self.actor, result);
            return;
        }
        let (call, out) = responder.answered();
        self.published |= 1 << out.index.min(63);
        if let Some(output) = (self.outputs.get_mut(out.index))
            .and_then(|o| o.downcast_mut::<Output<crate::Reply<Rep>>>())
        {
            let reply = crate::Reply {
                call,
                result,
                own: false,
            };
            output.publish(reply, None);
        }
    }

    /// Calls a service through `out` (from [`Setup::caller`]): sends `request` and returns the
    /// call's id. The call ends exactly once, with a [`Reply`](crate::Reply) in the actor's
    /// inbox carrying this id: the server's answer, or [`CallError::Timeout`](crate::CallError::Timeout)
    /// once `timeout` has passed, or the server's error, or [`CallError::Stopped`](crate::CallError::Stopped)
    /// when the bus stops with the call still open (after the bus has drained, so the server
    /// answered everything it could) or the server is gone for good; open it with
    /// [`settle`](Self::settle), which counts it.
    ///
    /// Does not wait unless the server's request ring is full: then, under the server's
    /// `Block` policy (the default), the call waits for room as [`publish`](Self::publish)
    /// does, at most `timeout`; under `DropNewest` (set with
    /// `.backpressure_on(&service.requests(), ..)`), or for an actor declared `never_waits`,
    /// it fails at once. A call that fails leaves nothing in flight: no reply comes for it.
    ///
    /// # Errors
    /// [`CallError::QueueFull`](crate::CallError::QueueFull) when [`MAX_CALLS_IN_FLIGHT`](crate::MAX_CALLS_IN_FLIGHT) calls
    /// are in flight, or the server's ring is full and the call may not wait;
    /// [`CallError::Timeout`](crate::CallError::Timeout) when it waited for room for all of
    /// `timeout`; [`CallError::Stopped`](crate::CallError::Stopped) when the server is gone
    /// for good or the bus is stopping (its open calls have ended).
    pub fn call<Req: Message + Clone, Rep: Message + Clone>(
        &mut self,
        out: crate::CallOut<Req, Rep>,
        request: Req,
        timeout: std::time::Duration,
    ) -> Result<crate::CallId, crate::CallError> {
        let call = self.pending.open(out.loopback.index, timeout)?;
        let request = crate::Request {
            call,
            reply_to: out.reply_to,
            // The round's time: at most the round's age before the call's own deadline,
            // which counts from the runner's next clock read.
            deadline: self.now().checked_add(timeout),
            body: request,
        };
        let control = self.control;
        let (output, idle) = self.output(out.requests);
        let offered = output.offer(
            request,
            Some(&mut Wait {
                idle,
                control,
                deadline: Some(Until::After(timeout)),
            }),
        );
        let refused = match offered {
            Offered::Sent => return Ok(call),
            Offered::Full => crate::CallError::QueueFull,
            Offered::TimedOut => crate::CallError::Timeout,
            Offered::Stopped => crate::CallError::Stopped,
        };
        self.pending.refuse(call, refused);
        Err(refused)
    }

    /// Opens a reply to one of this actor's calls: its call's id and its end, or `None` if
    /// the call had already ended (a reply that came after the call's timeout, which was the
    /// call's end; or that timeout, after the reply). Each call yields `Some` exactly once,
    /// and is counted then ([`Report::services`](crate::Report::services)): a call stays in
    /// flight until its reply is settled.
    pub fn settle<Rep>(
        &mut self,
        reply: crate::Reply<Rep>,
    ) -> Option<(crate::CallId, Result<Rep, crate::CallError>)> {
        let end = reply.result.as_ref().map(|_| ()).map_err(|e| *e);
        self.pending
            .settle(reply.call, reply.own, end)
            .then_some((reply.call, reply.result))
    }

    /// The topic the message being handled came on, in `on_message` (`None` in the other
    /// hooks): for an actor that subscribes to several topics of one type
    /// (`.subscribes_to(&nyse).subscribes_to(&nasdaq)`). Compare its id with
    /// [`Topic::id`] to branch without comparing names. Costs nothing on the message path: the
    /// runner stores the id, and this looks the name up among the actor's few topics.
    pub fn topic(&self) -> Option<&TopicName> {
        let id = self.topic?.get()?;
        self.topics.iter().find(|t| t.id() == id)
    }

    /// The time of the current round of this actor's thread: read from the clock the first
    /// time it is asked for in a round (or by the runner, for ticks), then the same all round.
    pub fn now(&self) -> Instant {
        super::runner::read_clock(self.now)
    }

    /// The actor's name.
    pub fn name(&self) -> &str {
        self.actor
    }

    /// Reports an error this actor cannot recover from (a network bridge whose socket broke,
    /// for one) and stops the bus gracefully, whatever the actor's supervision policy: `join`
    /// then returns [`BusError::ActorFailed`](crate::BusError::ActorFailed) with the actor's
    /// name and `error`. An error, not a panic: nothing unwinds, and the actor keeps running
    /// until the stop reaches it. The first failure (or escalated panic) of the bus is the one
    /// reported.
    pub fn fail(&self, error: impl std::fmt::Display) {
        let error = error.to_string();
        log::error!("actor '{}' failed: {error}", self.actor);
        self.control.fail(self.actor, &error);
    }

    /// Makes this thread wake as soon as `fd` (a socket the actor polls, say) becomes readable,
    /// if its idle strategy sleeps: with [`Idle::Park`](crate::Idle::Park) the thread then
    /// sleeps in `epoll` on its watched descriptors and its doorbell together, so a datagram
    /// ends the sleep at once instead of at the next tick. Returns `Ok(false)` for strategies
    /// that never sleep (they poll often anyway), `Ok(true)` otherwise. Call it from
    /// [`Actor::on_start`], once per descriptor; calling it again for the same one is harmless.
    /// Keep the descriptor open while the actor runs: a closed file leaves the set by itself.
    ///
    /// # Errors
    /// The operating system's, from creating the `epoll` set or adding `fd`; the thread then
    /// still wakes when a publisher rings it and at its next tick.
    #[cfg(unix)]
    pub fn wake_on_readable(&mut self, fd: &impl std::os::fd::AsFd) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        self.idle.wake_on_readable(fd.as_fd().as_raw_fd())
    }

    /// Asks the whole bus to stop gracefully; `join` then returns.
    pub fn request_stop(&self) {
        self.control.request_stop();
    }

    /// True once a stop has been requested.
    pub fn is_stopping(&self) -> bool {
        self.control.is_stopping()
    }
}
