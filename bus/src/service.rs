//! Services: ask and answer on one bus.
//!
//! A [`Service`] is named like a topic and carries a request type and a reply type. One actor
//! serves it ([`ActorBuilder::serves`](crate::ActorBuilder::serves)): it receives each
//! [`Request`] in its inbox, splits it into the request and a [`Responder`]
//! ([`Replies::accept`]), and answers exactly once, at once or later, from any of its hooks
//! ([`Context::reply`](crate::Context::reply)). A responder dropped unanswered answers by
//! itself, with [`CallError::Dropped`] (or [`CallError::ServerPanicked`] if it was dropped by a
//! panic), right after the hook that dropped it. Code outside the bus calls through a
//! [`Caller`](crate::Caller) ([`BusBuilder::caller`](crate::BusBuilder::caller)): each call
//! ends exactly once, with the reply or a [`CallError`].
//!
//! Every call is counted per caller and service ([`Report::services`](crate::Report::services)):
//! `calls == replies + errors + in_flight`. The stop ends every call still open: an actor's
//! open calls end [`CallError::Stopped`] in its inbox once the bus has drained (or are counted
//! so if the actor is gone), a handle's call returns `Stopped` once the bus has stopped, and a
//! call whose server is gone for good ends `Stopped` too.
//!
//! Underneath, a service is topics: the requests go on the service's name, as `Request<Req>`,
//! from every caller to the server; each caller has a reply topic of its own (named after the
//! service, with a `#`, which no user topic can have), which only the server publishes. So the
//! wiring, backpressure, counting and stopping rules of topics hold for calls, and a reply is
//! written into one ring, its caller's, whatever the number of callers.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::message::{fnv1a64, Message};
use crate::runtime::{CallCounters, Offered, Output};
use crate::schema::Shape;
use crate::topic::{Topic, TopicName, TopicNameError};
use crate::wait::Doorbell;
use crate::Out;

/// A service: a name, a request type and a reply type.
pub struct Service<Req, Rep> {
    name: TopicName,
    _t: PhantomData<fn(Req) -> Rep>,
}

impl<Req: Message, Rep: Message> Service<Req, Rep> {
    /// The service called `name` (a topic name: the rule of [`TopicName`]).
    ///
    /// # Errors
    /// If `name` breaks the rule, saying how.
    pub fn named(name: &str) -> Result<Self, TopicNameError> {
        Ok(Service {
            name: TopicName::new(name)?,
            _t: PhantomData,
        })
    }

    /// The service named after its request type's topic (`Req::TOPIC`).
    pub fn of() -> Self {
        Service {
            name: TopicName::of::<Req>(),
            _t: PhantomData,
        }
    }
}

impl<Req, Rep> Service<Req, Rep> {
    /// The service's name: the topic its requests go on.
    pub fn name(&self) -> &TopicName {
        &self.name
    }

    /// The topic its requests go on, for the server's subscription settings:
    /// `.backpressure_on(&service.requests(), Backpressure::DropNewest)` makes a call that finds
    /// the server's ring full fail at once with [`CallError::QueueFull`] (under the default,
    /// `Block`, the call waits for room within its timeout), and `.capacity_on(&service.requests(),
    /// n)` sizes that ring.
    pub fn requests(&self) -> Topic<Request<Req>>
    where
        Req: Message,
    {
        Topic::with_name(self.name.clone())
    }

    /// The name of the reply topic of caller number `caller` of this service.
    pub(crate) fn reply_name(name: &TopicName, caller: usize) -> TopicName {
        TopicName::internal(format!("{name}#reply.{caller}"))
    }
}

impl<Req, Rep> Clone for Service<Req, Rep> {
    fn clone(&self) -> Self {
        Service {
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl<Req, Rep> std::fmt::Debug for Service<Req, Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Service<{}, {}>({})",
            std::any::type_name::<Req>(),
            std::any::type_name::<Rep>(),
            self.name
        )
    }
}

/// One call's id, unique per caller: what a reply is matched to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub(crate) u64);

impl CallId {
    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// How a call ended without a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallError {
    /// No reply within the call's timeout. A reply that comes later is counted (`late`) and
    /// dropped: a call ends once.
    Timeout,
    /// The server panicked while it held the call's responder (its supervision policy applies).
    ServerPanicked,
    /// The server dropped the call's responder without answering.
    Dropped,
    /// The bus is stopping or stopped, or the server is gone for good (its supervision
    /// stopped it), before the call was answered.
    Stopped,
    /// The request could not be queued: the server's request ring is full and its policy is
    /// not to wait (`DropNewest`, or a caller declared `never_waits`), or the caller has
    /// [`MAX_CALLS_IN_FLIGHT`] calls open.
    QueueFull,
    /// The service is refused or absent where the call went: a remote server's bridge does
    /// not serve it (unknown there, or of other types) or does not let this host call it.
    /// On one bus a caller without a server is refused at `start()` instead.
    Refused,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallError::Timeout => "no reply within the call's timeout",
            CallError::ServerPanicked => "the server panicked before it answered",
            CallError::Dropped => "the server dropped the call without answering",
            CallError::Stopped => "the bus stopped before the call was answered",
            CallError::QueueFull => "the server's request queue is full",
            CallError::Refused => {
                "the service is refused or absent where the call went (check that its server \
                 exports it with the same types, and lets this host call it)"
            }
        })
    }
}

impl std::error::Error for CallError {}

/// A request as the server receives it: the caller's request with what routes its answer.
/// Split it with [`Replies::accept`].
#[derive(Clone, Debug)]
pub struct Request<Req> {
    pub(crate) call: CallId,
    /// The id of the caller's reply topic.
    pub(crate) reply_to: u64,
    /// When the caller stops waiting (`None`: past the clock's range).
    pub(crate) deadline: Option<std::time::Instant>,
    pub(crate) body: Req,
}

impl<Req> Request<Req> {
    /// When the caller stops waiting for the answer: the call's timeout counted from the
    /// call (`None` for a timeout past the clock's range). A server that passes the call on
    /// (a network bridge) gives up then too; one that answers later is counted late.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// The request.
    pub fn body(&self) -> &Req {
        &self.body
    }

    /// The call's id.
    pub fn call(&self) -> CallId {
        self.call
    }
}

/// Mixes a type's fingerprint with what wraps it, so a request or reply topic never matches a
/// plain topic of the same type.
const fn wrapped(fingerprint: u64, wrapper: &[u8]) -> u64 {
    fnv1a64(fingerprint, wrapper)
}

// Not offered as a suggestion where a type is not a message (they wrap one).
#[diagnostic::do_not_recommend]
impl<Req: Message> Message for Request<Req> {
    const TOPIC: &'static str = Req::TOPIC;
    const TOPIC_ID: u64 = Req::TOPIC_ID;
    const FINGERPRINT: u64 = wrapped(Req::FINGERPRINT, b"llbus.request");

    fn schema() -> Shape {
        Shape::Opaque(Self::FINGERPRINT)
    }
}

/// A reply as the caller receives it.
#[derive(Clone, Debug)]
pub struct Reply<Rep> {
    pub(crate) call: CallId,
    pub(crate) result: Result<Rep, CallError>,
    /// Posted by the caller's own runner (the call's timeout, or its end at the stop), not by
    /// the server: once the runner has posted a call's end, only that end settles it.
    pub(crate) own: bool,
}

impl<Rep> Reply<Rep> {
    /// The call it answers.
    pub fn call(&self) -> CallId {
        self.call
    }

    /// The reply, or why there is none.
    pub fn into_result(self) -> Result<Rep, CallError> {
        self.result
    }
}

#[diagnostic::do_not_recommend]
impl<Rep: Message> Message for Reply<Rep> {
    const TOPIC: &'static str = Rep::TOPIC;
    const TOPIC_ID: u64 = Rep::TOPIC_ID;
    const FINGERPRINT: u64 = wrapped(Rep::FINGERPRINT, b"llbus.reply");

    fn schema() -> Shape {
        Shape::Opaque(Self::FINGERPRINT)
    }
}

/// `Request<Req>`'s fingerprint from `Req`'s (`Req::FINGERPRINT`, or the fingerprint of its
/// shape): what a served service's requests carry, and its topic is exported with. For a tool
/// that has the request's shape but not its type.
///
/// ```
/// use llbus::{Message, Request};
///
/// #[derive(Message, Clone)]
/// #[message(topic = "risk.ask")]
/// struct Ask { n: u32 }
///
/// let fingerprint = llbus::request_fingerprint(Ask::schema().fingerprint());
/// assert_eq!(fingerprint, <Request<Ask> as Message>::FINGERPRINT);
/// ```
pub const fn request_fingerprint(req: u64) -> u64 {
    wrapped(req, b"llbus.request")
}

/// `Reply<Rep>`'s fingerprint from `Rep`'s: what a served service's replies carry (as
/// [`request_fingerprint`]).
pub const fn reply_fingerprint(rep: u64) -> u64 {
    wrapped(rep, b"llbus.reply")
}

/// A call's right to answer: answer it with [`Context::reply`](crate::Context::reply), once.
/// Dropped unanswered, it answers [`CallError::Dropped`] by itself (or
/// [`CallError::ServerPanicked`] when a panic drops it).
#[must_use = "a call is answered through its responder; dropped, it answers CallError::Dropped"]
pub struct Responder<Rep: Message + Clone> {
    pub(crate) call: CallId,
    pub(crate) out: Out<Reply<Rep>>,
    orphans: Option<Arc<Orphans>>,
}

impl<Rep: Message + Clone> Responder<Rep> {
    /// The call it answers.
    pub fn call(&self) -> CallId {
        self.call
    }

    /// Marks it answered (its answer is being sent): nothing happens when it drops.
    pub(crate) fn answered(mut self) -> (CallId, Out<Reply<Rep>>) {
        self.orphans = None;
        (self.call, self.out)
    }

    /// Whether it belongs to the actor whose orphaned calls go to `orphans` (its server): only
    /// that actor's context holds its reply output.
    #[inline]
    pub(crate) fn belongs_to(&self, orphans: &Arc<Orphans>) -> bool {
        self.orphans
            .as_ref()
            .is_some_and(|o| Arc::ptr_eq(o, orphans))
    }

    /// Answers through its server's orphan queue, carrying `result`: it was answered through
    /// the context of actor `through`, which does not hold its reply output. Warns once per
    /// server.
    #[cold]
    pub(crate) fn misrouted(mut self, through: &str, result: Result<Rep, CallError>) {
        let Some(orphans) = self.orphans.take() else {
            return;
        };
        if !orphans.warned.swap(true, Ordering::Relaxed) {
            log::warn!(
                "actor '{through}' answered call {} of actor '{}' through its own context: the \
                 answer goes out through '{}' (answer each call from the actor that accepted it)",
                self.call.0,
                orphans.owner,
                orphans.owner
            );
        }
        orphans.push(Orphan {
            call: self.call,
            out: self.out.index,
            end: End::Reply(Box::new(result)),
            answer: answer_orphan::<Rep>,
        });
    }
}

impl<Rep: Message + Clone> std::fmt::Debug for Responder<Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

impl<Rep: Message + Clone> Drop for Responder<Rep> {
    fn drop(&mut self) {
        if let Some(orphans) = self.orphans.take() {
            let error = if std::thread::panicking() || orphans.failing.load(Ordering::Relaxed) {
                CallError::ServerPanicked
            } else if orphans.stopped.load(Ordering::Relaxed) {
                CallError::Stopped
            } else {
                CallError::Dropped
            };
            orphans.push(Orphan {
                call: self.call,
                out: self.out.index,
                end: End::Error(error),
                answer: answer_orphan::<Rep>,
            });
        }
    }
}

/// How an orphaned call ends: with an error, or with the answer it was given through another
/// actor's context (a boxed `Result<Rep, CallError>`).
pub(crate) enum End {
    Error(CallError),
    Reply(Box<dyn Any + Send>),
}

/// Answers an orphaned call on the output at `output` (an `Output<Reply<Rep>>` as `Any`),
/// never waiting.
pub(crate) type AnswerOrphan = fn(&mut (dyn Any + Send), CallId, End);

fn answer_orphan<Rep: Message + Clone>(output: &mut (dyn Any + Send), call: CallId, end: End) {
    let result = match end {
        End::Error(error) => Err(error),
        End::Reply(reply) => match reply.downcast::<Result<Rep, CallError>>() {
            Ok(result) => *result,
            Err(_) => Err(CallError::Dropped),
        },
    };
    if let Some(output) = output.downcast_mut::<Output<Reply<Rep>>>() {
        output.publish(
            Reply {
                call,
                result,
                own: false,
            },
            None,
        );
    }
}

/// A call whose responder was dropped unanswered (or answered through another actor's
/// context), waiting for its server's runner to answer it.
pub(crate) struct Orphan {
    pub(crate) call: CallId,
    pub(crate) out: usize,
    pub(crate) end: End,
    pub(crate) answer: AnswerOrphan,
}

/// An actor's orphaned calls: pushed by a responder's `Drop` (the error path, under a lock),
/// answered by the runner after each hook (one atomic load when there are none).
#[derive(Default)]
pub(crate) struct Orphans {
    /// The actor's name, for the warning about a misrouted answer.
    owner: String,
    /// Its thread's doorbell, if it sleeps on one: a push from another thread wakes it.
    bell: Option<Arc<Doorbell>>,
    waiting: AtomicUsize,
    calls: std::sync::Mutex<Vec<Orphan>>,
    /// Set by the runner while it drops an instance that panicked: what it held answers
    /// `ServerPanicked`.
    pub(crate) failing: AtomicBool,
    /// Set by the runner as the bus's stop drops the last instance: what it held answers
    /// `Stopped`.
    pub(crate) stopped: AtomicBool,
    /// A misrouted answer was warned about.
    warned: AtomicBool,
}

impl Orphans {
    /// The queue of actor `owner`, whose thread sleeps on `bell` (if it does).
    pub(crate) fn new(owner: &str, bell: Option<Arc<Doorbell>>) -> Self {
        Orphans {
            owner: owner.to_owned(),
            bell,
            ..Orphans::default()
        }
    }

    fn push(&self, orphan: Orphan) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(orphan);
        self.waiting.fetch_add(1, Ordering::Release);
        if let Some(bell) = &self.bell {
            bell.ring();
        }
    }

    /// Takes the orphaned calls, if any.
    #[inline]
    pub(crate) fn take(&self, into: &mut Vec<Orphan>) {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.waiting.fetch_sub(calls.len(), Ordering::Release);
        into.append(&mut calls);
    }
}

/// What a server answers with: its reply outputs, one per caller, by the caller's reply topic
/// id (from [`Setup::replies`](crate::Setup::replies)).
pub struct Replies<Rep> {
    pub(crate) outs: Vec<(u64, Out<Reply<Rep>>)>,
    pub(crate) orphans: Arc<Orphans>,
}

impl<Rep> std::fmt::Debug for Replies<Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies")
            .field("callers", &self.outs.len())
            .finish_non_exhaustive()
    }
}

impl<Rep: Message + Clone> Replies<Rep> {
    /// Splits `request` into the caller's request and the responder that answers it.
    /// Allocates nothing.
    pub fn accept<Req>(&self, request: Request<Req>) -> (Req, Responder<Rep>) {
        let out = (self.outs.iter())
            .find(|(id, _)| *id == request.reply_to)
            .map_or(Out::new(usize::MAX), |(_, out)| *out);
        let responder = Responder {
            call: request.call,
            out,
            orphans: Some(Arc::clone(&self.orphans)),
        };
        (request.body, responder)
    }
}

/// The most calls one actor has in flight at once (each of its services together): a further
/// call fails at once with [`CallError::QueueFull`]. Half the default ring capacity, so a
/// caller's own reply ring (where its runner posts timeouts and the stop's ends, one per call at
/// most) always has room for them.
pub const MAX_CALLS_IN_FLIGHT: usize = crate::runtime::DEFAULT_CAPACITY / 2;

/// The low bits of an actor's call id number the call; the bits above them name the service
/// (its [`Book`]), so that a reply, even a late one, is counted for its service.
const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// Posts a call's end into the caller's own reply ring (its loopback output, an
/// `Output<Reply<Rep>>` as `Any`), never waiting; `false` if the ring had no room.
pub(crate) type PostEnd = fn(&mut (dyn Any + Send), CallId, CallError) -> bool;

/// Whether the server behind a request output (an `Output<Request<Req>>` as `Any`) is gone for
/// good: every ring of the output is abandoned.
pub(crate) type ServerGone = fn(&(dyn Any + Send)) -> bool;

/// A [`PostEnd`] for replies of type `Rep`.
pub(crate) fn post_end<Rep: Message + Clone>(
    output: &mut (dyn Any + Send),
    call: CallId,
    error: CallError,
) -> bool {
    let Some(output) = output.downcast_mut::<Output<Reply<Rep>>>() else {
        return false;
    };
    let reply = Reply {
        call,
        result: Err(error),
        own: true,
    };
    output.offer(reply, None) == Offered::Sent
}

/// A [`ServerGone`] for requests of type `Req`.
pub(crate) fn server_gone<Req: Message + Clone>(output: &(dyn Any + Send)) -> bool {
    output
        .downcast_ref::<Output<Request<Req>>>()
        .is_some_and(Output::is_abandoned)
}

/// One service an actor calls, as its table of calls sees it: where the runner posts its calls'
/// ends, how to tell its server is gone, and its counts.
pub(crate) struct Book {
    /// The index of its loopback output (into the caller's own reply ring).
    pub(crate) loopback: usize,
    /// The index of its request output.
    pub(crate) requests: usize,
    pub(crate) post: PostEnd,
    pub(crate) gone: ServerGone,
    pub(crate) counters: Arc<CallCounters>,
    /// Its server was seen gone for good (its request rings abandoned): its open calls end
    /// `Stopped` at the next look after a turn that found the inbox empty, so that every
    /// answer the server gave before it went is settled first.
    gone_seen: bool,
    /// Each of its open calls has had `Stopped` posted: a new call is refused `Stopped` at
    /// once.
    server_gone: bool,
}

impl Book {
    /// The book of a service whose outputs are at `loopback` and `requests`.
    pub(crate) fn new(
        loopback: usize,
        requests: usize,
        post: PostEnd,
        gone: ServerGone,
        counters: Arc<CallCounters>,
    ) -> Self {
        Book {
            loopback,
            requests,
            post,
            gone,
            counters,
            gone_seen: false,
            server_gone: false,
        }
    }
}

/// One slot of the table: the call it holds (0: free), and the end its runner posted for it,
/// if any (then only that end settles it).
#[derive(Clone, Copy, Debug, Default)]
struct Open {
    call: u64,
    posted: Option<CallError>,
}

/// An actor's calls in flight: a slot per call (by its number, modulo the capacity), their
/// deadlines, earliest first, and each service's counts. Allocated when the actor is made; a
/// call and its end allocate nothing.
///
/// Every call that [`open`](Self::open) counts ends exactly once, counted: settled by the
/// actor ([`settle`](Self::settle)), refused at once ([`refuse`](Self::refuse)), or closed
/// with the actor's end ([`close`](Self::close)).
pub(crate) struct PendingCalls {
    /// The last call number given (the low bits of the last id).
    last: u64,
    /// Invariant: a slot's call, if any, has its number's slot (`number % slots.len()`).
    slots: Vec<Open>,
    /// `(deadline, call id)`, earliest first; a settled call's entry stays until it comes up
    /// or a purge.
    deadlines: std::collections::BinaryHeap<std::cmp::Reverse<Deadline>>,
    /// Calls opened since the runner last read the clock, with their timeouts: their
    /// deadlines count from that read (a call reads no clock; the runner reads it when the
    /// actor has nothing to do, and every 64 turns).
    unstamped: Vec<(std::time::Duration, u64)>,
    /// The services the actor calls, by the high bits of a call id.
    books: Vec<Book>,
    /// The actor's calls are over (the bus's stop, or the actor is gone): a call is refused
    /// `Stopped`.
    closed: bool,
}

/// A call's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Deadline {
    at: std::time::Instant,
    call: u64,
}

impl PendingCalls {
    /// A table of `capacity` calls in flight for an actor that calls the services of `books`
    /// (empty for an actor that calls none).
    pub(crate) fn new(capacity: usize, books: Vec<Book>) -> Self {
        debug_assert!(
            books.len() < 1 << (64 - SEQ_BITS),
            "too many services for a call id"
        );
        debug_assert!(books.is_empty() || capacity > 0);
        PendingCalls {
            last: 0,
            slots: vec![Open::default(); capacity],
            // Twice the calls: a settled call's deadline stays until it comes up or a purge.
            deadlines: std::collections::BinaryHeap::with_capacity(2 * capacity),
            unstamped: Vec::with_capacity(capacity),
            books,
            closed: false,
        }
    }

    /// Whether any call is waiting for its deadline (stamped or not).
    #[inline]
    pub(crate) fn in_flight(&self) -> bool {
        !self.deadlines.is_empty() || !self.unstamped.is_empty()
    }

    /// Whether the actor calls at all.
    pub(crate) fn is_used(&self) -> bool {
        !self.books.is_empty()
    }

    /// The slot of call `call`.
    fn slot_mut(&mut self, call: u64) -> Option<&mut Open> {
        let n = self.slots.len() as u64;
        if n == 0 {
            return None;
        }
        self.slots.get_mut(((call & SEQ_MASK) % n) as usize)
    }

    /// The book of call `call`.
    fn book_of(&self, call: u64) -> Option<&Book> {
        self.books.get((call >> SEQ_BITS) as usize)
    }

    /// Opens a call of the service whose loopback output is `loopback`, timing out `timeout`
    /// after the runner's next clock read, and counts it; or refuses it, counted as a call that
    /// ended at once: [`CallError::QueueFull`] when every slot is open,
    /// [`CallError::Stopped`] once the actor's calls are over or the service's server is gone.
    pub(crate) fn open(
        &mut self,
        loopback: usize,
        timeout: std::time::Duration,
    ) -> Result<CallId, CallError> {
        let Some(b) = self.books.iter().position(|b| b.loopback == loopback) else {
            // Not one of the actor's services (`Setup::caller` refused it at start).
            return Err(CallError::Stopped);
        };
        let book = &self.books[b];
        book.counters.calls.add(1);
        if self.closed || book.server_gone {
            book.counters.end(Err(CallError::Stopped));
            return Err(CallError::Stopped);
        }
        let n = self.slots.len() as u64;
        if self.deadlines.len() >= 2 * self.slots.len() {
            // Drop the deadlines of settled calls (in place: no allocation); at most half of
            // the entries are of calls still open.
            let slots = &self.slots;
            self.deadlines.retain(|d| {
                slots
                    .get(((d.0.call & SEQ_MASK) % n) as usize)
                    .is_some_and(|s| s.call == d.0.call)
            });
        }
        // The next number whose slot is free: a call held long keeps its slot, and the numbers
        // of the calls after it step over it (ids stay unique, so a slot never holds two calls).
        let mut number = self.last;
        let mut free = None;
        for _ in 0..n {
            number = if number >= SEQ_MASK { 1 } else { number + 1 };
            if self
                .slots
                .get((number % n) as usize)
                .is_some_and(|s| s.call == 0)
            {
                free = Some(number);
                break;
            }
        }
        let Some(number) = free else {
            self.books[b].counters.end(Err(CallError::QueueFull));
            return Err(CallError::QueueFull);
        };
        let call = (b as u64) << SEQ_BITS | number;
        if let Some(slot) = self.slot_mut(call) {
            *slot = Open { call, posted: None };
        }
        self.last = number;
        // Stamped with the runner's next clock read (never more calls than slots are open).
        self.unstamped.push((timeout, call));
        Ok(CallId(call))
    }

    /// Ends `call`, just opened, with `error`: its request could not be sent.
    pub(crate) fn refuse(&mut self, call: CallId, error: CallError) {
        if self.forget(call.0) {
            if let Some(book) = self.book_of(call.0) {
                book.counters.end(Err(error));
            }
        }
    }

    /// Frees `call`'s slot; `false` if it did not hold the call.
    fn forget(&mut self, call: u64) -> bool {
        match self.slot_mut(call) {
            Some(slot) if slot.call == call => *slot = Open::default(),
            _ => return false,
        }
        if let Some(i) = self.unstamped.iter().position(|u| u.1 == call) {
            self.unstamped.swap_remove(i);
        }
        true
    }

    /// Ends `call` with `end`, if it is still open and `end` is the one that settles it: the
    /// server's reply while the runner has posted nothing (`own` false), or the end the runner
    /// posted (`own`). `false`, counted late: the call had ended (a reply after its timeout,
    /// or that timeout after the reply).
    pub(crate) fn settle(&mut self, call: CallId, own: bool, end: Result<(), CallError>) -> bool {
        let settles = match self.slot_mut(call.0) {
            Some(slot) if slot.call == call.0 => slot.posted.is_some() == own,
            _ => false,
        };
        let Some(book) = self.book_of(call.0) else {
            return false;
        };
        if !settles {
            book.counters.late.add(1);
            return false;
        }
        book.counters.end(end);
        self.forget(call.0);
        // The deadlines of settled calls at the top go now (one call at a time, the usual
        // case, keeps one deadline at most); the others when they come up, or in a purge.
        while let Some(std::cmp::Reverse(top)) = self.deadlines.peek() {
            let call = top.call;
            match self.slot_mut(call) {
                Some(s) if s.call == call => break,
                _ => {
                    self.deadlines.pop();
                }
            }
        }
        true
    }

    /// The earliest deadline of a call in flight.
    pub(crate) fn next_deadline(&self) -> Option<std::time::Instant> {
        self.deadlines.peek().map(|d| d.0.at)
    }

    /// Gives the calls opened since the last clock read their deadlines (`now` plus their
    /// timeouts); ends `Stopped` the open calls of a service whose server is gone (once a turn
    /// found the inbox empty since it was seen gone: `idle` says this one did); then times out
    /// every open call whose deadline is at or before `now`. Each end is posted into the
    /// caller's own reply ring (through `outputs`); one that finds no room stays due, and is
    /// posted at the next look. Returns how many it posted.
    pub(crate) fn expire(
        &mut self,
        now: std::time::Instant,
        idle: bool,
        outputs: &mut [Box<dyn Any + Send>],
    ) -> usize {
        for (timeout, call) in self.unstamped.drain(..) {
            // A timeout past the clock's range: a year (it never comes).
            let at = (now.checked_add(timeout))
                .unwrap_or(now + std::time::Duration::from_secs(86_400 * 365));
            self.deadlines
                .push(std::cmp::Reverse(Deadline { at, call }));
        }
        let mut posted = self.end_calls_of_servers_gone(idle, outputs);
        while let Some(std::cmp::Reverse(d)) = self.deadlines.peek().copied() {
            if d.at > now {
                break;
            }
            let open = self
                .slot_mut(d.call)
                .is_some_and(|s| s.call == d.call && s.posted.is_none());
            if open && !self.post(d.call, CallError::Timeout, outputs) {
                // No room in the caller's own ring: the deadline stays due, for the next look.
                break;
            }
            self.deadlines.pop();
            posted += usize::from(open);
        }
        posted
    }

    /// Posts `error` as the end of `call` into its caller's own reply ring and marks the call;
    /// `false` if the ring had no room.
    fn post(&mut self, call: u64, error: CallError, outputs: &mut [Box<dyn Any + Send>]) -> bool {
        let Some(book) = self.book_of(call) else {
            return false;
        };
        let (post, loopback) = (book.post, book.loopback);
        let posted = outputs
            .get_mut(loopback)
            .is_some_and(|output| post(&mut **output, CallId(call), error));
        if posted {
            if let Some(slot) = self.slot_mut(call) {
                slot.posted = Some(error);
            }
        }
        posted
    }

    /// Posts `error` for every open call of book `b` (every book if `None`) that has no end
    /// posted yet; returns how many it posted and whether every one of them got in.
    fn post_all(
        &mut self,
        b: Option<usize>,
        error: CallError,
        outputs: &mut [Box<dyn Any + Send>],
    ) -> (usize, bool) {
        let (mut posted, mut all) = (0, true);
        for i in 0..self.slots.len() {
            let Open { call, posted: done } = self.slots[i];
            let of_book = b.is_none_or(|b| (call >> SEQ_BITS) as usize == b);
            if call == 0 || done.is_some() || !of_book {
                continue;
            }
            if self.post(call, error, outputs) {
                posted += 1;
            } else {
                all = false;
            }
        }
        (posted, all)
    }

    /// Ends `Stopped` the open calls of each service whose server is gone for good (its
    /// request rings abandoned: the server's supervision stopped it): no reply can come. A
    /// server answers (or orphans) what it holds before its rings go, so once a turn has found
    /// the inbox empty (`idle`) after the server was seen gone, every answer it gave is
    /// settled, and what is still open was lost with it.
    fn end_calls_of_servers_gone(
        &mut self,
        idle: bool,
        outputs: &mut [Box<dyn Any + Send>],
    ) -> usize {
        let mut posted = 0;
        for b in 0..self.books.len() {
            let book = &self.books[b];
            if book.server_gone {
                continue;
            }
            if !book.gone_seen {
                let gone = outputs
                    .get(book.requests)
                    .is_some_and(|output| (book.gone)(&**output));
                self.books[b].gone_seen = gone;
            } else if idle {
                let (n, all) = self.post_all(Some(b), CallError::Stopped, outputs);
                posted += n;
                self.books[b].server_gone = all;
            }
        }
        posted
    }

    /// Ends every open call `Stopped`, posted into the caller's own reply rings for the actor
    /// to settle while the bus drains, and refuses calls from now on (the bus is stopping).
    /// Returns how many it posted.
    pub(crate) fn end_all(&mut self, outputs: &mut [Box<dyn Any + Send>]) -> usize {
        self.closed = true;
        self.post_all(None, CallError::Stopped, outputs).0
    }

    /// Closes the table for good (the actor is gone): every call still open is counted ended,
    /// with the end posted for it (which the actor will not settle now), or `Stopped`.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        for i in 0..self.slots.len() {
            let Open { call, posted } = self.slots[i];
            if call == 0 {
                continue;
            }
            if let Some(book) = self.book_of(call) {
                book.counters.end(Err(posted.unwrap_or(CallError::Stopped)));
            }
            self.slots[i] = Open::default();
        }
        self.unstamped.clear();
        self.deadlines.clear();
    }
}

/// An actor's way to call a service (from [`Setup::caller`](crate::Setup::caller)): `Copy`.
pub struct CallOut<Req, Rep> {
    pub(crate) requests: Out<Request<Req>>,
    pub(crate) loopback: Out<Reply<Rep>>,
    pub(crate) reply_to: u64,
}

impl<Req, Rep> Clone for CallOut<Req, Rep> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Req, Rep> Copy for CallOut<Req, Rep> {}

impl<Req, Rep> std::fmt::Debug for CallOut<Req, Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOut")
            .field("reply_to", &self.reply_to)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A stand-in for a caller's own reply ring: room for `room` ends, which it keeps.
    struct Ring {
        room: usize,
        ends: Vec<(CallId, CallError)>,
    }

    fn post(output: &mut (dyn Any + Send), call: CallId, error: CallError) -> bool {
        let Some(ring) = output.downcast_mut::<Ring>() else {
            return false;
        };
        if ring.room == 0 {
            return false;
        }
        ring.room -= 1;
        ring.ends.push((call, error));
        true
    }

    fn never_gone(_: &(dyn Any + Send)) -> bool {
        false
    }

    /// A table of `capacity` calls of one service, whose loopback output is output 0 of the
    /// returned outputs: a ring with room for `room` ends.
    fn table(
        capacity: usize,
        room: usize,
    ) -> (PendingCalls, Vec<Box<dyn Any + Send>>, Arc<CallCounters>) {
        let counters = Arc::new(CallCounters::default());
        let book = Book::new(0, 1, post, never_gone, Arc::clone(&counters));
        let outputs: Vec<Box<dyn Any + Send>> = vec![
            Box::new(Ring {
                room,
                ends: Vec::new(),
            }),
            Box::new(()),
        ];
        (PendingCalls::new(capacity, vec![book]), outputs, counters)
    }

    fn ends(outputs: &[Box<dyn Any + Send>]) -> &[(CallId, CallError)] {
        outputs[0]
            .downcast_ref::<Ring>()
            .map_or(&[], |r| r.ends.as_slice())
    }

    #[test]
    fn a_call_held_open_neither_blocks_the_calls_after_it_nor_shares_their_slot() {
        let (mut calls, _outputs, counters) = table(8, 0);
        let t = std::time::Duration::from_secs(60);
        let held = calls.open(0, t).expect("room");
        for _ in 0..100 {
            let call = calls.open(0, t).expect("room past the held call's slot");
            assert_ne!(call.0 % 8, held.0 % 8, "a call in the held call's slot");
            assert!(calls.settle(call, false, Ok(())));
        }
        assert!(calls.settle(held, false, Ok(())), "the held call ends once");
        assert!(!calls.settle(held, false, Ok(())));
        // Full: every slot open, the next refused.
        for _ in 0..8 {
            calls.open(0, t).expect("room");
        }
        assert_eq!(calls.open(0, t), Err(CallError::QueueFull));
        let c = counters.snapshot();
        assert_eq!(
            (c.calls, c.replies, c.queue_full, c.late, c.in_flight()),
            (110, 101, 1, 1, 8)
        );
    }

    /// A timeout that finds the caller's own ring full is not lost: it stays due and is posted
    /// at the next look, and then only it settles the call.
    #[test]
    fn a_timeout_that_finds_no_room_is_posted_at_the_next_look() {
        let (mut calls, mut outputs, counters) = table(8, 0);
        let call = calls.open(0, std::time::Duration::ZERO).expect("room");
        let now = std::time::Instant::now();
        assert_eq!(
            calls.expire(now, true, &mut outputs),
            0,
            "no room: nothing posted"
        );
        assert_eq!(calls.next_deadline(), Some(now), "the timeout is still due");
        if let Some(ring) = outputs[0].downcast_mut::<Ring>() {
            ring.room = 1;
        }
        assert_eq!(calls.expire(now, true, &mut outputs), 1);
        assert_eq!(ends(&outputs), [(call, CallError::Timeout)]);
        assert_eq!(calls.expire(now, true, &mut outputs), 0, "posted once");
        // The server's reply, after the timeout was posted, is late; the timeout settles it.
        assert!(!calls.settle(call, false, Ok(())));
        assert!(calls.settle(call, true, Err(CallError::Timeout)));
        let c = counters.snapshot();
        assert_eq!((c.calls, c.timeouts, c.late, c.in_flight()), (1, 1, 1, 0));
    }

    /// The stop ends every open call `Stopped` (posted once each), refuses calls after it, and
    /// closing the table counts whatever was never settled.
    #[test]
    fn the_stop_ends_every_open_call_and_closing_counts_the_rest() {
        let (mut calls, mut outputs, counters) = table(8, 8);
        let t = std::time::Duration::from_secs(60);
        let a = calls.open(0, t).expect("room");
        let b = calls.open(0, t).expect("room");
        assert!(calls.settle(a, false, Ok(())));
        assert_eq!(calls.end_all(&mut outputs), 1);
        assert_eq!(ends(&outputs), [(b, CallError::Stopped)]);
        assert_eq!(calls.open(0, t), Err(CallError::Stopped));
        assert_eq!(counters.snapshot().in_flight(), 1, "b until it is settled");
        calls.close();
        let c = counters.snapshot();
        assert_eq!((c.calls, c.replies, c.stopped, c.in_flight()), (3, 1, 2, 0));
        assert!(
            !calls.settle(b, true, Err(CallError::Stopped)),
            "closed: late"
        );
    }
}
