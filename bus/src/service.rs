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
//! Underneath, a service is topics: the requests go on the service's name, as `Request<Req>`,
//! from every caller to the server; each caller has a reply topic of its own (named after the
//! service, with a `#`, which no user topic can have), which only the server publishes. So the
//! wiring, backpressure, counting and stopping rules of topics hold for calls, and a reply is
//! written into one ring, its caller's, whatever the number of callers.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::message::{fnv1a64, Message};
use crate::schema::Shape;
use crate::topic::{TopicName, TopicNameError};
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
    /// The bus stopped (or the server's thread is gone) before the call was answered.
    Stopped,
    /// The request could not be queued: the server's request ring is full and its policy is
    /// not to wait.
    QueueFull,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallError::Timeout => "no reply within the call's timeout",
            CallError::ServerPanicked => "the server panicked before it answered",
            CallError::Dropped => "the server dropped the call without answering",
            CallError::Stopped => "the bus stopped before the call was answered",
            CallError::QueueFull => "the server's request queue is full",
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
    pub(crate) body: Req,
}

impl<Req> Request<Req> {
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
            orphans.push(Orphan {
                call: self.call,
                out: self.out.index,
                error: if std::thread::panicking() || orphans.failing.load(Ordering::Relaxed) {
                    CallError::ServerPanicked
                } else {
                    CallError::Dropped
                },
                answer: answer_orphan::<Rep>,
            });
        }
    }
}

/// Answers an orphaned call with its error on the output at `output` (an `Output<Reply<Rep>>`
/// as `Any`), never waiting.
pub(crate) type AnswerOrphan = fn(&mut (dyn std::any::Any + Send), CallId, CallError);

pub(crate) fn answer_with<Rep: Message + Clone>(
    output: &mut (dyn std::any::Any + Send),
    call: CallId,
    error: CallError,
) {
    answer_orphan::<Rep>(output, call, error);
}

fn answer_orphan<Rep: Message + Clone>(
    output: &mut (dyn std::any::Any + Send),
    call: CallId,
    error: CallError,
) {
    if let Some(output) = output.downcast_mut::<crate::runtime::Output<Reply<Rep>>>() {
        output.publish(
            Reply {
                call,
                result: Err(error),
            },
            None,
        );
    }
}

/// A call whose responder was dropped unanswered, waiting for the runner to answer it.
pub(crate) struct Orphan {
    pub(crate) call: CallId,
    pub(crate) out: usize,
    pub(crate) error: CallError,
    pub(crate) answer: AnswerOrphan,
}

/// An actor's orphaned calls: pushed by a responder's `Drop` (the error path, under a lock),
/// answered by the runner after each hook (one atomic load when there are none).
#[derive(Default)]
pub(crate) struct Orphans {
    waiting: AtomicUsize,
    calls: std::sync::Mutex<Vec<Orphan>>,
    /// Set by the runner while it drops an instance that panicked: what it held answers
    /// `ServerPanicked`.
    pub(crate) failing: std::sync::atomic::AtomicBool,
}

impl Orphans {
    fn push(&self, orphan: Orphan) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(orphan);
        self.waiting.fetch_add(1, Ordering::Release);
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
/// caller's reply ring has room for every reply and every timeout of its calls in flight.
pub const MAX_CALLS_IN_FLIGHT: usize = crate::runtime::DEFAULT_CAPACITY / 2;

/// An actor's calls in flight: a slot per call (by id, modulo the capacity) and their
/// deadlines, earliest first. Allocated when the actor is made; a call and its end allocate
/// nothing.
pub(crate) struct PendingCalls {
    /// The last call id given.
    last: u64,
    /// `(call id, timed out)` per slot; id 0: free.
    slots: Vec<(u64, bool)>,
    /// `(deadline, call id, loopback output, answer)`, earliest first.
    deadlines: std::collections::BinaryHeap<std::cmp::Reverse<Deadline>>,
    /// Calls opened since the runner last read the clock, with their timeouts: their
    /// deadlines count from that read (a call reads no clock; the runner reads it when the
    /// actor has nothing to do, and every 64 turns).
    unstamped: Vec<(std::time::Duration, u64, usize, AnswerOrphan)>,
}

/// A call's deadline and how to answer its timeout.
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    at: std::time::Instant,
    call: u64,
    out: usize,
    answer: AnswerOrphan,
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.call) == (other.at, other.call)
    }
}
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.call).cmp(&(other.at, other.call))
    }
}

impl PendingCalls {
    /// A table for an actor that calls (`capacity` calls in flight), or an empty one.
    pub(crate) fn new(capacity: usize) -> Self {
        PendingCalls {
            last: 0,
            slots: vec![(0, false); capacity],
            // Twice the calls: a settled call's deadline stays until it comes up or a purge.
            deadlines: std::collections::BinaryHeap::with_capacity(2 * capacity),
            unstamped: Vec::with_capacity(capacity),
        }
    }

    /// Whether any call is in flight (stamped or not).
    #[inline]
    pub(crate) fn in_flight(&self) -> bool {
        !self.deadlines.is_empty() || !self.unstamped.is_empty()
    }

    /// Whether the actor calls at all.
    pub(crate) fn is_used(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Registers a call that times out at `at` (its timeout answered through `out` with
    /// `answer`), or says that too many are in flight.
    pub(crate) fn open(
        &mut self,
        timeout: std::time::Duration,
        out: usize,
        answer: AnswerOrphan,
    ) -> Result<CallId, CallError> {
        let n = self.slots.len() as u64;
        if n == 0 {
            return Err(CallError::QueueFull);
        }
        if self.deadlines.len() >= 2 * self.slots.len() {
            // Drop the deadlines of settled calls (in place: no allocation); at most half of
            // the entries are of calls still open.
            let slots = &self.slots;
            self.deadlines.retain(|d| {
                slots
                    .get((d.0.call % n) as usize)
                    .is_some_and(|s| s.0 == d.0.call)
            });
        }
        // The next id whose slot is free: a call held long keeps its slot, and the ids of the
        // calls after it step over it (ids stay unique, so a slot never holds two calls).
        let Some(call) = (1..=n)
            .map(|k| self.last + k)
            .find(|c| self.slots.get((c % n) as usize).is_some_and(|s| s.0 == 0))
        else {
            return Err(CallError::QueueFull);
        };
        if let Some(slot) = self.slots.get_mut((call % n) as usize) {
            *slot = (call, false);
        }
        self.last = call;
        // Stamped with the runner's next clock read (never more calls than slots are open).
        self.unstamped.push((timeout, call, out, answer));
        Ok(CallId(call))
    }

    /// Ends `call` as `reply` says, if it is still open: a reply before its timeout, or its
    /// own timeout. `false`: the call had ended (a late reply, or a timeout after the reply).
    pub(crate) fn settle(&mut self, call: CallId, is_timeout: bool) -> bool {
        let n = self.slots.len() as u64;
        if n == 0 {
            return false;
        }
        let Some(slot) = self.slots.get_mut((call.0 % n) as usize) else {
            return false;
        };
        if slot.0 != call.0 || slot.1 != is_timeout {
            return false;
        }
        *slot = (0, false);
        if let Some(i) = self.unstamped.iter().position(|u| u.1 == call.0) {
            self.unstamped.swap_remove(i);
            return true;
        }
        // The deadlines of settled calls at the top go now (one call at a time, the usual
        // case, keeps one deadline at most); the others when they come up, or in a purge.
        while let Some(std::cmp::Reverse(top)) = self.deadlines.peek() {
            match self.slots.get((top.call % n) as usize) {
                Some(s) if s.0 == top.call => break,
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
    /// timeouts), then times out every open call whose deadline is at or before `now`: marks
    /// it and answers `Timeout` into the caller's own reply ring (through `outputs`). Returns
    /// how many it timed out.
    pub(crate) fn expire(
        &mut self,
        now: std::time::Instant,
        outputs: &mut [Box<dyn std::any::Any + Send>],
    ) -> usize {
        for (timeout, call, out, answer) in self.unstamped.drain(..) {
            // A timeout past the clock's range: a year (it never comes).
            let at = (now.checked_add(timeout))
                .unwrap_or(now + std::time::Duration::from_secs(86_400 * 365));
            self.deadlines.push(std::cmp::Reverse(Deadline {
                at,
                call,
                out,
                answer,
            }));
        }
        let mut expired = 0;
        let n = self.slots.len() as u64;
        while let Some(std::cmp::Reverse(d)) = self.deadlines.peek().copied() {
            if d.at > now {
                return expired;
            }
            self.deadlines.pop();
            let Some(slot) = self.slots.get_mut((d.call % n.max(1)) as usize) else {
                continue;
            };
            if slot.0 == d.call && !slot.1 {
                slot.1 = true;
                if let Some(output) = outputs.get_mut(d.out) {
                    (d.answer)(&mut **output, CallId(d.call), CallError::Timeout);
                }
                expired += 1;
            }
        }
        expired
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

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &mut (dyn std::any::Any + Send), _: CallId, _: CallError) {}

    #[test]
    fn a_call_held_open_neither_blocks_the_calls_after_it_nor_shares_their_slot() {
        let mut calls = PendingCalls::new(8);
        let t = std::time::Duration::from_secs(60);
        let held = calls.open(t, 0, never).expect("room");
        for _ in 0..100 {
            let call = calls
                .open(t, 0, never)
                .expect("room past the held call's slot");
            assert_ne!(call.0 % 8, held.0 % 8, "a call in the held call's slot");
            assert!(calls.settle(call, false));
        }
        assert!(calls.settle(held, false), "the held call ends once");
        assert!(!calls.settle(held, false));
        // Full: every slot open, the next refused.
        for _ in 0..8 {
            calls.open(t, 0, never).expect("room");
        }
        assert_eq!(calls.open(t, 0, never), Err(CallError::QueueFull));
    }
}
