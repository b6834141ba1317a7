//! Ways in and out of a running bus for code that is not an actor: the external
//! [`Publisher`] and [`Subscription`] handles.
//!
//! A handle is declared on the builder like an actor ([`BusBuilder::publisher`],
//! [`BusBuilder::subscription`]) and is wired by `start()` exactly as one: a publisher handle
//! gets one SPSC ring per subscriber of its topic, a subscription one ring per publisher, with
//! the usual backpressure, counters and report rows. What differs is who drives it: no bus
//! thread runs a handle; the thread that holds it does (any one thread at a time: a handle is
//! `Send`, not `Sync`). Each handle waits with its own [`Park`](crate::Park) strategy, whose
//! doorbell the other end of its rings rings: a `recv` or a `Block` publish spins, then yields
//! for up to [`BACKOFF_YIELD`](crate::BACKOFF_YIELD) (as [`Idle::Backoff`](crate::Idle::Backoff)
//! does on a thread that watches descriptors), then sleeps; so messages that come more often
//! than that are taken in microseconds, a longer silence costs no CPU, and a push or pop costs
//! the other side no syscall unless the handle sleeps.
//!
//! Stop protocol: once a stop is requested, [`Publisher::publish`] hands the message back
//! ([`PublishError::Stopped`]); what was published before is drained like any actor's. The
//! stop never waits for subscriptions (the thread that reads one may be the one calling
//! `join`): a publisher blocked on a full one gives up at the request (counted lost), what they
//! have not read yet stays readable and shows as `in_flight` on their edges, and `recv` reports
//! [`RecvError`] once the bus has exited (which the stop driver brings about without `join`)
//! and the rings are empty. A dropped subscription counts what it left unread as lost.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::Control;
#[cfg(feature = "tokio")]
use super::control::EXIT;
use super::edge::{AnyOutput, Inputs, Offered, Output, Until, Wait, Wiring};
#[cfg(feature = "tokio")]
use super::metrics::EdgeCounters;
use super::metrics::{ActorCounters, CallCounters, Metric};
use super::running::RunningBus;

use crate::message::Message;
use crate::service::{CallError, CallId, Reply, Request};
use crate::wait::IdleStrategy;

/// The longest a handle sleeps without being rung, so that it notices a publisher that went
/// away without a last push.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// What `start()` hands a handle's maker.
pub(super) struct HandleParts {
    pub(super) name: String,
    pub(super) wiring: Wiring,
    pub(super) outputs: Vec<Box<dyn AnyOutput>>,
    pub(super) counters: Arc<ActorCounters>,
    pub(super) idle: Box<dyn IdleStrategy>,
    pub(super) control: Arc<Control>,
    /// The counts of each service the handle calls (a `Caller`: one).
    pub(super) calls: Vec<Arc<CallCounters>>,
}

/// The idle strategy of every handle: the bus's default waiting (spin, then yield), sleeping
/// after [`BACKOFF_YIELD`](crate::BACKOFF_YIELD) of yielding. NB: sleeping at once after the
/// spin would make each hand-off to a handle thread a futex wake-up at a message every 200 us,
/// and a gateway's one-way latency carries two hand-offs (docs/PERFORMANCE.md, "A parked
/// bridge wakes on its socket").
pub(super) fn handle_idle() -> Box<dyn IdleStrategy> {
    Box::new(
        crate::wait::Park::new()
            .with_yield_for(crate::BACKOFF_YIELD)
            .with_max_sleep(MAX_SLEEP),
    )
}

/// The key to a [`Publisher`] declared with [`BusBuilder::publisher`](crate::BusBuilder::publisher): redeem it once, on the
/// bus it was declared on, with [`RunningBus::publisher`].
#[must_use = "redeem the key with RunningBus::publisher after start()"]
#[derive(Debug)]
pub struct PublisherKey<T> {
    pub(super) serial: u64,
    pub(super) index: usize,
    pub(super) _t: PhantomData<fn() -> T>,
}

/// The key to a [`Subscription`] declared with [`BusBuilder::subscription`](crate::BusBuilder::subscription): redeem it once, on
/// the bus it was declared on, with [`RunningBus::subscription`].
#[must_use = "redeem the key with RunningBus::subscription after start()"]
#[derive(Debug)]
pub struct SubscriptionKey<T> {
    pub(super) serial: u64,
    pub(super) index: usize,
    pub(super) _t: PhantomData<fn() -> T>,
}

pub(super) fn make_publisher<T: Message + Clone>(mut parts: HandleParts) -> Box<dyn Any + Send> {
    let output = parts
        .outputs
        .pop()
        .and_then(|mut o| {
            o.as_any_mut()
                .downcast_mut::<Output<T>>()
                .map(|o| std::mem::replace(o, Output::empty()))
        })
        .unwrap_or_else(Output::empty);
    Box::new(Publisher {
        name: parts.name,
        output,
        idle: parts.idle,
        control: parts.control,
        counters: parts.counters,
    })
}

pub(super) fn make_subscription<T: Message>(mut parts: HandleParts) -> Box<dyn Any + Send> {
    Box::new(Subscription {
        name: parts.name,
        inputs: Inputs::<T>::take(&mut parts.wiring),
        next: 0,
        closed: false,
        idle: parts.idle,
        control: parts.control,
        counters: parts.counters,
    })
}

impl RunningBus {
    /// The publisher declared with `key`.
    ///
    /// # Errors
    /// [`HandleError`] if `key` was declared on another bus.
    pub fn publisher<T: Message + Clone>(
        &mut self,
        key: PublisherKey<T>,
    ) -> Result<Publisher<T>, HandleError> {
        self.redeem(key.serial, key.index)
    }

    /// The subscription declared with `key`.
    ///
    /// # Errors
    /// [`HandleError`] if `key` was declared on another bus.
    pub fn subscription<T: Message>(
        &mut self,
        key: SubscriptionKey<T>,
    ) -> Result<Subscription<T>, HandleError> {
        self.redeem(key.serial, key.index)
    }

    fn redeem<H: Any>(&mut self, serial: u64, index: usize) -> Result<H, HandleError> {
        if serial != self.serial {
            return Err(HandleError);
        }
        let slot = self.handles.get_mut(index).ok_or(HandleError)?;
        match slot.take().map(|b| b.downcast::<H>()) {
            Some(Ok(h)) => Ok(*h),
            Some(Err(other)) => {
                *slot = Some(other);
                Err(HandleError)
            }
            None => Err(HandleError),
        }
    }
}

/// A handle key redeemed on a bus other than the one it was declared on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleError;

impl std::fmt::Display for HandleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "this handle key belongs to another bus: redeem it on the bus it was declared on",
        )
    }
}

impl std::error::Error for HandleError {}

/// A way into a running bus for code that is not an actor: publishes topic `T` to every
/// subscriber of it, from whichever one thread holds it.
///
/// Made by [`RunningBus::publisher`]. Publishing allocates nothing and takes no lock (a
/// counting-allocator test proves it). Dropping it ends its rings, as an actor's end does.
pub struct Publisher<T> {
    name: String,
    output: Output<T>,
    idle: Box<dyn IdleStrategy>,
    control: Arc<Control>,
    /// The handle's report row, kept alive with it.
    counters: Arc<ActorCounters>,
}

impl<T> std::fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.name)
            .field("topic_type", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

/// A publish refused by a [`Publisher`]; the message is handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishError<T> {
    /// The bus is stopping or stopped: nothing is published any more.
    Stopped(T),
}

impl<T> PublishError<T> {
    /// The message that was not published.
    pub fn into_inner(self) -> T {
        match self {
            PublishError::Stopped(m) => m,
        }
    }
}

impl<T> std::fmt::Display for PublishError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the bus is stopping, so the message was not published: stop publishing")
    }
}

impl<T: std::fmt::Debug> std::error::Error for PublishError<T> {}

impl<T: Message + Clone> Publisher<T> {
    /// Publishes `msg` to every subscriber of `T`, as an actor's `Context::publish` does:
    /// `Block` subscriptions make it wait (sleeping on its doorbell) while their ring is full,
    /// `DropNewest` ones drop and count, `Latest` ones overwrite and count. A `Block` wait gives
    /// up, counting the message lost on that edge, if the bus's stop runs past its drain phase,
    /// or at once when a stop is requested if the subscriber is an external subscription (the
    /// call still returns `Ok`: the message was accepted, and the edge counts it).
    ///
    /// # Errors
    /// [`PublishError::Stopped`] with the message once a stop has been requested.
    #[inline]
    pub fn publish(&mut self, msg: T) -> Result<(), PublishError<T>> {
        if self.control.is_stopping() {
            return Err(PublishError::Stopped(msg));
        }
        self.publish_waiting(msg);
        Ok(())
    }

    /// Publishes `msg` like [`publish`](Self::publish) but never waits: a subscriber whose
    /// `Block` ring is full does not get it, and it is counted as dropped on that edge.
    ///
    /// # Errors
    /// [`PublishError::Stopped`] with the message once a stop has been requested.
    #[inline]
    pub fn try_publish(&mut self, msg: T) -> Result<(), PublishError<T>> {
        if self.control.is_stopping() {
            return Err(PublishError::Stopped(msg));
        }
        self.output.publish(msg, None);
        Ok(())
    }

    /// The name it was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A named metric of this handle's own (what a gateway at the bus's edge refused or lost),
    /// shown under the handle's name in the bus's report and live counters, as an actor's
    /// `Setup::metric`. Registering locks a mutex; updating the metric does not.
    pub fn metric(&self, name: &str) -> Metric {
        self.counters.metric(name)
    }

    /// Publishes a message that was accepted before a stop was requested (into the tokio
    /// adapter's channel): as [`publish`](Self::publish), but also while the bus drains, so
    /// that it is published and counted like any other. Once the bus's stop has reached `Exit`
    /// nothing is published any more: the message is counted lost on every edge instead.
    #[cfg(feature = "tokio")]
    pub(super) fn publish_accepted(&mut self, msg: T) {
        if self.control.phase() == EXIT {
            self.output.lose(msg);
            return;
        }
        self.publish_waiting(msg);
    }

    /// Publishes `msg`, waiting on full `Block` rings with this handle's idle strategy.
    #[inline]
    fn publish_waiting(&mut self, msg: T) {
        let control: &Control = &self.control;
        self.output.publish(
            msg,
            Some(&mut Wait {
                idle: &mut *self.idle,
                control,
                deadline: None,
            }),
        );
    }

    /// Publishes `msg` as [`publish_waiting`](Self::publish_waiting) does, but waits for room
    /// until `deadline` at most (then the message is counted lost on the edges it did not
    /// enter), and says what became of it.
    fn offer_until(&mut self, msg: T, deadline: Option<Instant>) -> Offered {
        let control: &Control = &self.control;
        self.output.offer(
            msg,
            Some(&mut Wait {
                idle: &mut *self.idle,
                control,
                deadline: deadline.map(Until::At),
            }),
        )
    }

    /// The bus's control, for the tokio adapter.
    #[cfg(feature = "tokio")]
    pub(super) fn control(&self) -> &Arc<Control> {
        &self.control
    }
}

/// A way out of a running bus for code that is not an actor: receives topic `T` from every
/// publisher of it, in each publisher's order (rings are taken in turn), on whichever one thread
/// holds it.
///
/// Made by [`RunningBus::subscription`]. Receiving allocates nothing and takes no lock; a
/// message received counts as handled on its edge. Waiting (`recv`, `recv_timeout`) spins,
/// yields, then sleeps until a publisher pushes.
pub struct Subscription<T> {
    name: String,
    inputs: Inputs<T>,
    next: usize,
    /// It has reported closed: it stays closed.
    closed: bool,
    idle: Box<dyn IdleStrategy>,
    control: Arc<Control>,
    counters: Arc<ActorCounters>,
}

impl<T> std::fmt::Debug for Subscription<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .field("topic_type", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

/// Why [`Subscription::try_recv`] returned nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing is queued now.
    Empty,
    /// Nothing is queued and nothing will be: every publisher is gone or the bus has exited.
    Closed,
}

/// [`Subscription::recv`] found the subscription closed: every publisher is gone (or the bus
/// has exited) and everything queued was received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvError;

/// Why [`Subscription::recv_timeout`] returned nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTimeoutError {
    /// Nothing arrived in time.
    Timeout,
    /// The subscription is closed (see [`RecvError`]).
    Closed,
}

impl std::fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "nothing is queued yet: try again later",
            TryRecvError::Closed => "the subscription is closed: every publisher is gone",
        })
    }
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the subscription is closed: every publisher is gone")
    }
}

impl std::fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecvTimeoutError::Timeout => "nothing arrived within the timeout",
            RecvTimeoutError::Closed => "the subscription is closed: every publisher is gone",
        })
    }
}

impl std::error::Error for TryRecvError {}
impl std::error::Error for RecvError {}
impl std::error::Error for RecvTimeoutError {}

impl<T: Send + 'static> Subscription<T> {
    /// The next message, if one is queued.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] if nothing is queued now; [`TryRecvError::Closed`] if nothing
    /// ever will be.
    #[inline]
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        if self.closed {
            return Err(TryRecvError::Closed);
        }
        if let Some(m) = self.inputs.next_one(&mut self.next) {
            self.counters.handled.add(1);
            return Ok(m);
        }
        if self.is_closed() {
            Err(TryRecvError::Closed)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    /// Waits for the next message.
    ///
    /// # Errors
    /// [`RecvError`] once the subscription is closed and everything queued was received.
    pub fn recv(&mut self) -> Result<T, RecvError> {
        self.wait(None).map_err(|_| RecvError)
    }

    /// Waits at most `timeout` for the next message.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`] if none came in time; [`RecvTimeoutError::Closed`] once
    /// the subscription is closed and everything queued was received.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.wait(deadline_after(timeout))
    }

    /// The messages as they come, until the subscription is closed.
    pub fn iter(&mut self) -> Iter<'_, T> {
        Iter { sub: self }
    }

    /// The name it was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A named metric of this handle's own: see [`Publisher::metric`].
    pub fn metric(&self, name: &str) -> Metric {
        self.counters.metric(name)
    }

    /// Closed once every publisher is gone, or the bus's threads have left, and everything
    /// queued was received; and closed for good from the first time it says so (a message a
    /// late publish leaves in a ring is counted lost when the subscription is dropped).
    fn is_closed(&mut self) -> bool {
        if !self.closed
            && (self.inputs.is_finished() || (self.control.has_exited() && self.inputs.is_empty()))
        {
            self.closed = true;
        }
        self.closed
    }

    fn wait(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        self.wait_with(deadline, Self::try_recv)
    }

    /// Waits for what `take` takes, until `deadline` if there is one.
    fn wait_with<R>(
        &mut self,
        deadline: Option<Instant>,
        mut take: impl FnMut(&mut Self) -> Result<R, TryRecvError>,
    ) -> Result<R, RecvTimeoutError> {
        loop {
            match take(self) {
                Ok(m) => {
                    self.idle.reset();
                    return Ok(m);
                }
                Err(TryRecvError::Closed) => {
                    self.idle.reset();
                    return Err(RecvTimeoutError::Closed);
                }
                Err(TryRecvError::Empty) => {}
            }
            match deadline {
                Some(deadline) => {
                    if Instant::now() >= deadline {
                        self.idle.reset();
                        return Err(RecvTimeoutError::Timeout);
                    }
                    self.idle.idle_until(0, deadline);
                }
                None => self.idle.idle(0),
            }
        }
    }
}

#[cfg(feature = "tokio")]
impl<T: Send + 'static> Subscription<T> {
    /// Waits at most `timeout` for the next message, as [`recv_timeout`](Self::recv_timeout),
    /// but counts nothing: returns the message with the index of its edge in
    /// [`edge_counters`](Self::edge_counters), for the tokio adapter to count when it is
    /// delivered or dropped.
    pub(super) fn recv_uncounted_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<(T, usize), RecvTimeoutError> {
        self.wait_with(deadline_after(timeout), |sub| {
            if sub.closed {
                return Err(TryRecvError::Closed);
            }
            match sub.inputs.next_uncounted(&mut sub.next) {
                Some(got) => Ok(got),
                None if sub.is_closed() => Err(TryRecvError::Closed),
                None => Err(TryRecvError::Empty),
            }
        })
    }

    /// The counters of each edge into this subscription, and of the subscription itself.
    pub(super) fn books(&self) -> (Vec<Arc<EdgeCounters>>, Arc<ActorCounters>) {
        (self.inputs.edge_counters(), Arc::clone(&self.counters))
    }
}

/// The messages of a [`Subscription`] as they come ([`Subscription::iter`]); ends when it is
/// closed.
#[derive(Debug)]
pub struct Iter<'a, T> {
    sub: &'a mut Subscription<T>,
}

impl<T: Send + 'static> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.sub.recv().ok()
    }
}

impl<'a, T: Send + 'static> IntoIterator for &'a mut Subscription<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// The deadline `timeout` from now; `None` (no deadline) for a timeout past what an `Instant`
/// can hold, so that `Duration::MAX` waits as long as it takes.
fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    #[test]
    fn the_longest_timeout_has_no_deadline_and_a_short_one_has_its_own() {
        assert_eq!(deadline_after(Duration::MAX), None);
        let before = Instant::now();
        let at = deadline_after(Duration::from_secs(5)).expect("a deadline");
        assert!(
            at >= before + Duration::from_secs(5) && at <= Instant::now() + Duration::from_secs(5)
        );
    }
}

/// The key to a [`Caller`] declared with [`BusBuilder::caller`](crate::BusBuilder::caller):
/// redeem it once, on the bus it was declared on, with [`RunningBus::caller`].
#[must_use = "redeem the key with RunningBus::caller after start()"]
#[derive(Debug)]
pub struct CallerKey<Req, Rep> {
    pub(super) serial: u64,
    pub(super) index: usize,
    pub(super) _t: PhantomData<fn(Req) -> Rep>,
}

/// A way for code outside the bus to call a [`Service`](crate::Service): each
/// [`call`](Self::call) sends one request and blocks until its reply, an error or its timeout,
/// and ends exactly once. Made by [`RunningBus::caller`]. A call allocates nothing and takes no
/// lock. Its calls are counted in the bus's report ([`Report::service`](crate::Report::service)).
pub struct Caller<Req, Rep> {
    requests: Publisher<Request<Req>>,
    replies: Subscription<Reply<Rep>>,
    /// The id of this caller's reply topic, which the server answers on.
    reply_to: u64,
    /// The last call's id.
    last: u64,
    /// Replies that came after their call ended (a timeout): counted, dropped.
    late: Metric,
    /// Its calls' counts. Writer: the thread that holds it.
    counts: Arc<CallCounters>,
}

impl<Req, Rep> std::fmt::Debug for Caller<Req, Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("name", &self.requests.name)
            .field("calls", &self.last)
            .finish_non_exhaustive()
    }
}

impl<Req: Message + Clone, Rep: Message + Clone> Caller<Req, Rep> {
    /// Sends `request` and waits at most `timeout` for its reply. If the server's request ring
    /// is full, the request waits for room within the same timeout under the server's `Block`
    /// policy (the default), and fails at once under `DropNewest`.
    ///
    /// # Errors
    /// [`CallError::Timeout`] if no reply came in time (a reply that comes later is counted
    /// in this handle's `late` metric and dropped); [`CallError::QueueFull`] at once if the
    /// server's request ring is full and its policy is `DropNewest`; [`CallError::Stopped`]
    /// once the bus is stopping, when it has stopped while the call waited (at most the stop's
    /// own time after the stop request, whatever `timeout` is), or if the server is gone;
    /// [`CallError::ServerPanicked`] or [`CallError::Dropped`] if the server could not or did
    /// not answer.
    pub fn call(&mut self, request: Req, timeout: Duration) -> Result<Rep, CallError> {
        self.counts.calls.add(1);
        let result = self.call_once(request, timeout);
        self.counts.end(result.as_ref().map(|_| ()).map_err(|e| *e));
        result
    }

    fn call_once(&mut self, request: Req, timeout: Duration) -> Result<Rep, CallError> {
        let deadline = deadline_after(timeout);
        self.last += 1;
        let call = CallId(self.last);
        let request = Request {
            call,
            reply_to: self.reply_to,
            deadline,
            body: request,
        };
        if self.requests.control.is_stopping() {
            return Err(CallError::Stopped);
        }
        // Waits for room in the server's ring (`Block`) only within the call's timeout.
        match self.requests.offer_until(request, deadline) {
            Offered::Sent => {}
            Offered::Full => return Err(CallError::QueueFull),
            Offered::TimedOut => return Err(CallError::Timeout),
            Offered::Stopped => return Err(CallError::Stopped),
        }
        loop {
            let left = match deadline {
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            match self.replies.recv_timeout(left) {
                Ok(reply) if reply.call == call => return reply.result,
                // An earlier call's, which ended (timed out) before it came.
                Ok(_) => {
                    self.late.add(1);
                    self.counts.late.add(1);
                }
                Err(RecvTimeoutError::Timeout) => return Err(CallError::Timeout),
                Err(RecvTimeoutError::Closed) => return Err(CallError::Stopped),
            }
        }
    }

    /// The name it was declared with.
    pub fn name(&self) -> &str {
        &self.requests.name
    }

    /// A named metric of this caller's own (what a gateway calling on others' behalf refused),
    /// shown under its name in the bus's report and live counters, as a publisher's
    /// [`metric`](Publisher::metric).
    pub fn metric(&self, name: &str) -> Metric {
        self.requests.metric(name)
    }
}

pub(super) fn make_caller<Req: Message + Clone, Rep: Message + Clone>(
    mut parts: HandleParts,
) -> Box<dyn Any + Send> {
    let output = parts
        .outputs
        .pop()
        .and_then(|mut o| {
            o.as_any_mut()
                .downcast_mut::<Output<Request<Req>>>()
                .map(|o| std::mem::replace(o, Output::empty()))
        })
        .unwrap_or_else(Output::empty);
    let inputs = Inputs::<Reply<Rep>>::take(&mut parts.wiring);
    let reply_to = inputs.topic_ids().next().unwrap_or(0);
    let late = parts.counters.metric("late");
    let counts = parts.calls.pop().unwrap_or_default();
    Box::new(Caller {
        requests: Publisher {
            name: parts.name.clone(),
            output,
            idle: parts.idle,
            control: Arc::clone(&parts.control),
            counters: Arc::clone(&parts.counters),
        },
        replies: Subscription {
            name: parts.name,
            inputs,
            next: 0,
            closed: false,
            idle: handle_idle(),
            control: parts.control,
            counters: parts.counters,
        },
        reply_to,
        last: 0,
        late,
        counts,
    })
}

impl RunningBus {
    /// The caller declared with `key`.
    ///
    /// # Errors
    /// [`HandleError`] if `key` was declared on another bus.
    pub fn caller<Req: Message + Clone, Rep: Message + Clone>(
        &mut self,
        key: CallerKey<Req, Rep>,
    ) -> Result<Caller<Req, Rep>, HandleError> {
        self.redeem(key.serial, key.index)
    }
}
