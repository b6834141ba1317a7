//! The tokio adapter (feature `tokio`): an external handle turned into a tokio channel, for
//! async code that feeds a bus or reads from one.
//!
//! The bus itself stays on its pinned threads; the adapter sits at its edge. Each adapter is one
//! plain thread that moves messages between a bounded `tokio::sync::mpsc` channel and the
//! handle: the channel's bound and the edge's backpressure both hold (a full `Block` ring
//! stops the forwarding, the channel fills, and `send(..).await` waits). The cost is one hop
//! through the channel (which allocates a block per 32 messages) and one thread per adapter:
//! use the handles directly where every microsecond counts.
//!
//! # Nothing is lost uncounted
//!
//! - **Into the bus.** A message the async sender's `send` accepted is published and counted
//!   on the bus's edges, even if a stop comes before the forwarding thread took it: the adapter
//!   is part of the stop protocol. The stop request closes the channel itself (every later
//!   `send` fails at once and hands the message back) and wakes the forwarding thread, which
//!   publishes everything the channel had accepted; the bus's drain waits for it
//!   ([`Control::begin_flush`]). Nothing is published once the stop has reached `Exit`: a
//!   message that comes later (through a permit held across the stop) is counted lost.
//! - **Out of the bus.** A message counts as handled on its edge when the async side receives
//!   it from the [`AsyncSubscription`], not when the forwarding thread takes it from the ring:
//!   until then it is in flight, and if the [`AsyncSubscription`] is dropped with it still in
//!   the channel it counts as lost. The rings stay in place (and publishers see the
//!   subscription alive) until the last of those values is accounted for.
//! - **Calls.** An [`AsyncCaller`]'s forwarding thread makes each call with the
//!   [`Caller`](crate::Caller) it holds, which counts it: every call ends once, with its reply or
//!   a [`CallError`], as a blocking call does.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::control::Control;
use super::handle::{Caller, Publisher, RecvTimeoutError, Subscription, TryRecvError};
use super::metrics::{ActorCounters, EdgeCounters};
use crate::message::Message;
use crate::service::CallError;

/// How long a forwarding thread sleeps before it looks again whether the other side is
/// still there (it is woken sooner by a message or a stop request).
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// The largest channel capacity asked of tokio (its semaphore's limit); larger ones are
/// clamped to it.
const MAX_CAPACITY: usize = tokio::sync::Semaphore::MAX_PERMITS;

impl<T: Message + Clone> Publisher<T> {
    /// Turns this publisher into the sending half of a tokio channel of `capacity` (at least
    /// 1, at most tokio's limit): what is sent on it is published, in order, by a forwarding
    /// thread.
    ///
    /// Every message a `send` accepted is published and counted, a stop included: the stop
    /// request itself closes the channel, so a `send` that starts after the request fails at
    /// once and hands the message back (`SendError`), and the bus's drain waits until the
    /// forwarding thread has published everything the channel accepted before. A message sent
    /// later through a `Permit` reserved before the stop is published if the bus is still
    /// draining, and counted lost once it has stopped handling. Once every sender is dropped
    /// the thread publishes what is left and ends, ending the publisher's edges.
    ///
    /// # Errors
    /// If the forwarding thread cannot be spawned.
    pub fn into_async(self, capacity: usize) -> std::io::Result<mpsc::Sender<T>> {
        let (tx, rx) = mpsc::channel::<T>(capacity.clamp(1, MAX_CAPACITY));
        let rx = Arc::new(Mutex::new(rx));
        let control = Arc::clone(self.control());
        // Until the thread has handed over what it accepted, the drain waits for it.
        control.begin_flush();
        let thread_rx = Arc::clone(&rx);
        let spawned = std::thread::Builder::new()
            .name(format!("llbus-async-{}", self.name()))
            .spawn(move || forward_into_bus(self, thread_rx));
        let thread = match spawned {
            Ok(handle) => handle.thread().clone(),
            Err(e) => {
                // Nothing was accepted: the channel's receiver went with the closure.
                control.flushed();
                return Err(e);
            }
        };
        // The stop closes the channel at once, on the requesting thread, then wakes the
        // forwarding thread to publish what was accepted (at once if the bus is stopping
        // already).
        control.on_stop_request(Box::new(move || {
            rx.lock().close();
            thread.unpark();
        }));
        Ok(tx)
    }
}

/// Wakes the thread it was made on: a task waker for a plain thread that polls a channel.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The forwarding thread of an async publisher: publishes what the channel brings; once a stop
/// is requested (the stop closed the channel), publishes what the channel had accepted and
/// lets the drain go on; ends when every sender and permit is gone.
fn forward_into_bus<T: Message + Clone>(
    mut publisher: Publisher<T>,
    rx: Arc<Mutex<mpsc::Receiver<T>>>,
) {
    let control: Arc<Control> = Arc::clone(publisher.control());
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut flushed = false;
    loop {
        if !flushed && control.is_stopping() {
            // Everything accepted before the close is buffered (a permit held across the stop
            // is not waited for: what it sends later is published or counted as it comes).
            loop {
                let next = rx.lock().try_recv();
                match next {
                    Ok(m) => publisher.publish_accepted(m),
                    Err(_) => break,
                }
            }
            control.flushed();
            flushed = true;
        }
        let polled = rx.lock().poll_recv(&mut cx);
        match polled {
            Poll::Ready(Some(m)) => publisher.publish_accepted(m),
            // Every sender and permit is gone and the channel is empty.
            Poll::Ready(None) => break,
            Poll::Pending => std::thread::park_timeout(CHECK_EVERY),
        }
    }
    if !flushed {
        control.flushed();
    }
}

impl<T: Message> Subscription<T> {
    /// Turns this subscription into an [`AsyncSubscription`] of `capacity` (at least 1, at most
    /// tokio's limit), filled
    /// in order by a forwarding thread. It ends (`recv` returns `None`) once the subscription
    /// is closed and everything was received.
    ///
    /// A message counts as handled on its edge when the async side receives it; one still in
    /// the channel when the [`AsyncSubscription`] is dropped counts as lost, as does what is
    /// still in the rings.
    ///
    /// # Errors
    /// If the forwarding thread cannot be spawned.
    pub fn into_async(self, capacity: usize) -> std::io::Result<AsyncSubscription<T>> {
        let (tx, rx) = mpsc::channel::<Tracked<T>>(capacity.clamp(1, MAX_CAPACITY));
        let (edges, actor) = self.books();
        let books = Arc::new(Books {
            edges,
            actor,
            rings: Mutex::new(None),
        });
        let thread_books = Arc::clone(&books);
        std::thread::Builder::new()
            .name(format!("llbus-async-{}", self.name()))
            .spawn(move || forward_out_of_bus(self, tx, thread_books))?;
        Ok(AsyncSubscription { rx, _books: books })
    }
}

/// What the values of one async subscription count on, and its rings once the forwarding
/// thread is done with them: they go when the last value is accounted for, so that the edges'
/// last end settles nothing that may still be delivered.
struct Books<T> {
    edges: Vec<Arc<EdgeCounters>>,
    actor: Arc<ActorCounters>,
    rings: Mutex<Option<Subscription<T>>>,
}

/// A message on its way to the async side; counted handled when received, lost if dropped.
struct Tracked<T> {
    value: Option<T>,
    edge: usize,
    books: Arc<Books<T>>,
}

impl<T> Tracked<T> {
    /// The message, counted handled on its edge and for the subscription.
    fn deliver(mut self) -> Option<T> {
        let value = self.value.take();
        if value.is_some() {
            if let Some(edge) = self.books.edges.get(self.edge) {
                edge.subscriber.handled.add(1);
            }
            self.books.actor.handled.add(1);
        }
        value
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        if self.value.is_some() {
            if let Some(edge) = self.books.edges.get(self.edge) {
                edge.subscriber.lost.add_shared(1);
            }
        }
    }
}

/// The forwarding thread of an async subscription: takes each message from the rings (leaving
/// its counting to the async side) and sends it on, until the subscription closes or the async
/// side goes; then parks the rings with the books.
fn forward_out_of_bus<T: Message>(
    mut sub: Subscription<T>,
    tx: mpsc::Sender<Tracked<T>>,
    books: Arc<Books<T>>,
) {
    loop {
        match sub.recv_uncounted_timeout(CHECK_EVERY) {
            Ok((value, edge)) => {
                let tracked = Tracked {
                    value: Some(value),
                    edge,
                    books: Arc::clone(&books),
                };
                // A failed send hands the value back, and dropping it counts it lost.
                if tx.blocking_send(tracked).is_err() {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if tx.is_closed() {
                    break;
                }
            }
            Err(RecvTimeoutError::Closed) => break,
        }
    }
    *books.rings.lock() = Some(sub);
}

/// The receiving end of a subscription turned async ([`Subscription::into_async`]): messages in
/// order, each counted handled on its edge when received here.
pub struct AsyncSubscription<T> {
    rx: mpsc::Receiver<Tracked<T>>,
    /// Keeps the rings in place until every value sent here is accounted for.
    _books: Arc<Books<T>>,
}

impl<T> std::fmt::Debug for AsyncSubscription<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSubscription")
            .field("topic_type", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

impl<T> AsyncSubscription<T> {
    /// The next message, waiting for it; `None` once the subscription is closed and everything
    /// was received.
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message (for hand-written futures and streams).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(tracked)) => match tracked.deliver() {
                Some(value) => Poll::Ready(Some(value)),
                // A tracked value always holds its message until delivered; end all the same.
                None => Poll::Ready(None),
            },
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next message if one is waiting.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] if none is waiting now; [`TryRecvError::Closed`] once the
    /// subscription is closed and everything was received.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        match self.rx.try_recv() {
            Ok(tracked) => tracked.deliver().ok_or(TryRecvError::Closed),
            Err(mpsc::error::TryRecvError::Empty) => Err(TryRecvError::Empty),
            Err(mpsc::error::TryRecvError::Disconnected) => Err(TryRecvError::Closed),
        }
    }

    /// The next message, blocking this (non-async) thread until it comes; `None` once the
    /// subscription is closed and everything was received.
    ///
    /// # Panics
    /// If called inside an async runtime (tokio's rule for `blocking_recv`).
    pub fn blocking_recv(&mut self) -> Option<T> {
        self.rx.blocking_recv().and_then(Tracked::deliver)
    }
}

impl<Req: Message + Clone, Rep: Message + Clone> Caller<Req, Rep> {
    /// Turns this caller into an [`AsyncCaller`], whose [`call`](AsyncCaller::call) an async
    /// task awaits without blocking its runtime's thread: a forwarding thread makes each call
    /// with this caller, one at a time, and hands its end back.
    ///
    /// # Errors
    /// If the forwarding thread cannot be spawned.
    pub fn into_async(self) -> std::io::Result<AsyncCaller<Req, Rep>> {
        let (jobs, rx) = mpsc::channel::<Job<Req, Rep>>(1);
        let name = self.name().to_owned();
        std::thread::Builder::new()
            .name(format!("llbus-async-{name}"))
            .spawn(move || forward_calls(self, rx))?;
        Ok(AsyncCaller { jobs, name })
    }
}

/// One call for the forwarding thread: the request, when the call times out, and where its end
/// goes.
struct Job<Req, Rep> {
    request: Req,
    deadline: Option<std::time::Instant>,
    end: tokio::sync::oneshot::Sender<Result<Rep, CallError>>,
}

/// The forwarding thread of an async caller: makes each call it is handed, within what is left
/// of its timeout, and hands its end back (to nobody if the caller's future was dropped); ends
/// when the [`AsyncCaller`] is dropped.
fn forward_calls<Req: Message + Clone, Rep: Message + Clone>(
    mut caller: Caller<Req, Rep>,
    mut jobs: mpsc::Receiver<Job<Req, Rep>>,
) {
    while let Some(job) = jobs.blocking_recv() {
        let left = job.deadline.map_or(std::time::Duration::MAX, |at| {
            at.saturating_duration_since(std::time::Instant::now())
        });
        let end = caller.call(job.request, left);
        let _ = job.end.send(end);
    }
}

/// A [`Caller`](crate::Caller) for async code ([`Caller::into_async`]): each
/// [`call`](Self::call) is awaited without blocking the runtime's thread.
///
/// The calls are made one at a time by a forwarding thread, with the caller's counts and
/// errors. Each call allocates its one-shot reply channel. A call whose future is dropped
/// before it ends still runs to its end on the forwarding thread (its reply, an error, or its
/// timeout at the latest), and the next call waits for it.
pub struct AsyncCaller<Req, Rep> {
    jobs: mpsc::Sender<Job<Req, Rep>>,
    name: String,
}

impl<Req, Rep> std::fmt::Debug for AsyncCaller<Req, Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCaller")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<Req: Message + Clone, Rep: Message + Clone> AsyncCaller<Req, Rep> {
    /// Sends `request` and waits, without blocking this thread, at most `timeout` (counted
    /// from now) for its reply: [`Caller::call`](crate::Caller::call), awaited.
    ///
    /// # Errors
    /// As [`Caller::call`](crate::Caller::call)'s; [`CallError::Stopped`] if the forwarding
    /// thread is gone.
    pub async fn call(
        &mut self,
        request: Req,
        timeout: std::time::Duration,
    ) -> Result<Rep, CallError> {
        let (end, ended) = tokio::sync::oneshot::channel();
        let job = Job {
            request,
            deadline: std::time::Instant::now().checked_add(timeout),
            end,
        };
        if self.jobs.send(job).await.is_err() {
            return Err(CallError::Stopped);
        }
        ended.await.unwrap_or(Err(CallError::Stopped))
    }

    /// The name its caller was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }
}
