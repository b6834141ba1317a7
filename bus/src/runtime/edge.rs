//! Edges: the typed ends of one publisher-subscriber ring, made in `start()`.
//!
//! An actor's output for topic `M` is an [`Output<M>`] holding one [`OutEdge`] per subscriber;
//! a publish goes into each (a clone for all but the last, which gets the value moved). A
//! subscriber's input for `M` is an [`Inputs<M>`] holding one [`InEdge`] per publisher, polled
//! in turn with a budget so that one busy publisher cannot starve another.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::control::Control;
use super::metrics::EdgeCounters;
use super::Backpressure;
use crate::message::Message;
use crate::ring::{
    Broadcast, BroadcastProducer, BroadcastReader, Consumer, LatestReader, LatestWriter, Notify,
    Producer,
};
use crate::wait::IdleStrategy;

/// A typed handle to one of an actor's declared outputs, from `Setup::output`. `Copy`.
pub struct Out<M> {
    pub(crate) index: usize,
    _m: PhantomData<fn(M) -> M>,
}

impl<M> Out<M> {
    pub(crate) fn new(index: usize) -> Self {
        Out {
            index,
            _m: PhantomData,
        }
    }
}

impl<M> Clone for Out<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for Out<M> {}

impl<M> std::fmt::Debug for Out<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Out<{}>({})", std::any::type_name::<M>(), self.index)
    }
}

/// The publisher's end of one edge.
pub(crate) enum OutEdge<M> {
    Ring {
        tx: Producer<M>,
        /// A full ring makes the publisher wait: `Block`, and the publisher did not promise
        /// `never_waits`. Otherwise a publish that finds it full is dropped and counted.
        wait: bool,
        /// The subscriber is an external subscription, whose reader may be the very thread
        /// that waits for the bus to stop: once a stop is requested, a full ring is not waited
        /// on (the message is counted lost).
        to_handle: bool,
        counters: Arc<EdgeCounters>,
    },
    Latest {
        tx: LatestWriter<M>,
        counters: Arc<EdgeCounters>,
    },
    /// Two or more `Block` subscribers (of a publisher that may wait) behind one broadcast
    /// ring: each message goes into every subscriber's slot of its position (a clone each),
    /// the ring's index is stored once per run ([`Output::commit`], after each hook), and the
    /// slowest subscriber gates the publisher. Each subscriber keeps its own counters.
    Broadcast {
        tx: BroadcastProducer<M>,
        /// One per reader of the ring, in the ring's reader order.
        edges: Vec<CachePadded<BroadcastEdge>>,
    },
}

/// One subscriber of a broadcast ring, as its publisher sees it.
pub(crate) struct BroadcastEdge {
    counters: Arc<EdgeCounters>,
    /// The subscriber is gone (its reader settled): what is published is counted lost.
    gone: bool,
}

/// The reading end of a ring edge: a ring of its own, or one reader of a broadcast ring.
pub(crate) enum ReadEnd<M> {
    Spsc(Consumer<M>),
    Broadcast(BroadcastReader<M>),
}

/// [`BroadcastReader::pop_batch`], out of line so that the subscriber's poll loop keeps the
/// size it has for `Ring` edges.
#[inline(never)]
fn pop_broadcast<M, F: FnMut(M)>(rx: &mut BroadcastReader<M>, max: usize, f: F) -> usize {
    rx.pop_batch(max, f)
}

impl<M> ReadEnd<M> {
    #[inline(always)]
    fn pop_batch<F: FnMut(M)>(&mut self, max: usize, f: F) -> usize {
        match self {
            ReadEnd::Spsc(rx) => rx.pop_batch(max, f),
            ReadEnd::Broadcast(rx) => pop_broadcast(rx, max, f),
        }
    }

    #[inline(always)]
    fn cached_len(&self) -> usize {
        match self {
            ReadEnd::Spsc(rx) => rx.cached_len(),
            ReadEnd::Broadcast(rx) => rx.cached_len(),
        }
    }

    fn len(&self) -> usize {
        match self {
            ReadEnd::Spsc(rx) => rx.len(),
            ReadEnd::Broadcast(rx) => rx.len(),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            ReadEnd::Spsc(rx) => rx.is_empty(),
            ReadEnd::Broadcast(rx) => rx.is_empty(),
        }
    }

    fn is_abandoned(&self) -> bool {
        match self {
            ReadEnd::Spsc(rx) => rx.is_abandoned(),
            ReadEnd::Broadcast(rx) => rx.is_abandoned(),
        }
    }

    fn notify_on_pop(&mut self, notify: Option<Arc<dyn Notify>>) {
        match self {
            ReadEnd::Spsc(rx) => rx.notify_on_pop(notify),
            ReadEnd::Broadcast(rx) => rx.notify_on_pop(notify),
        }
    }
}

/// The subscriber's end of one edge.
pub(crate) enum InEdge<M> {
    Ring {
        rx: ReadEnd<M>,
        counters: Arc<EdgeCounters>,
    },
    Latest {
        rx: LatestReader<M>,
        counters: Arc<EdgeCounters>,
    },
}

/// What a publish may wait with on a full `Block` ring: the thread's idle strategy, and the
/// bus's control, whose stop protocol can call every wait off.
pub(crate) struct Wait<'a> {
    pub(crate) idle: &'a mut (dyn IdleStrategy + 'static),
    pub(crate) control: &'a Control,
}

/// Everything an actor publishes on one topic: one edge per subscriber.
pub(crate) struct Output<M> {
    edges: Vec<OutEdge<M>>,
}

/// An output with its type erased, so an actor's outputs fit in one `Vec`.
pub(crate) trait AnyOutput: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn add_edge(&mut self, edge: Box<dyn Any + Send>);
    /// The output as `Any` for good, once wired: a publish then finds it with one dynamic
    /// call (`Any::type_id`) instead of two.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// What publishes the runs an actor's hooks wrote into this output's broadcast rings
    /// (called by the runner after every hook), or `None` when it has none.
    fn committer(&self) -> Option<Committer>;
}

/// Commits an output's broadcast rings, given the output as `Any` (see
/// [`AnyOutput::committer`]).
pub(crate) type Committer = fn(&mut (dyn Any + Send));

/// A [`Committer`] for outputs of topic `M`.
fn commit_output<M: 'static>(output: &mut (dyn Any + Send)) {
    if let Some(output) = output.downcast_mut::<Output<M>>() {
        output.commit();
    }
}

impl<M: Message> AnyOutput for Output<M> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }

    fn add_edge(&mut self, edge: Box<dyn Any + Send>) {
        match edge.downcast::<OutEdge<M>>() {
            Ok(edge) => self.edges.push(*edge),
            Err(_) => debug_assert!(false, "wiring paired an edge with the wrong output type"),
        }
    }

    fn committer(&self) -> Option<Committer> {
        let broadcasts = self
            .edges
            .iter()
            .any(|e| matches!(e, OutEdge::Broadcast { .. }));
        broadcasts.then_some(commit_output::<M> as Committer)
    }
}

impl<M> Output<M> {
    /// An output with no edges (a publish goes nowhere).
    pub(crate) fn empty() -> Self {
        Output { edges: Vec::new() }
    }
}

impl<M> Output<M> {
    /// Counts `msg` lost on every edge without offering it: the bus no longer handles
    /// anything (its stop reached `Exit`), so nothing more goes into its rings.
    #[cfg(feature = "tokio")]
    #[cold]
    pub(crate) fn lose(&mut self, msg: M) {
        drop(msg);
        for edge in &self.edges {
            edge.for_each_counters(|c| c.publisher.lost.add(1));
        }
    }

    /// Publishes what was written into this output's broadcast rings: one store of each
    /// ring's index.
    #[inline]
    pub(crate) fn commit(&mut self) {
        for edge in &mut self.edges {
            if let OutEdge::Broadcast { tx, .. } = edge {
                tx.commit();
            }
        }
    }
}

impl<M: Message + Clone> Output<M> {
    pub(crate) fn new_erased() -> Box<dyn AnyOutput> {
        Box::new(Output::<M> { edges: Vec::new() })
    }

    /// Publishes `msg` to every subscriber. Allocates nothing; waits only on a full ring of an
    /// edge that may wait, whose subscriber is still there, and only if `wait` is given and
    /// the stop protocol has not called waits off (otherwise such a message is dropped and
    /// counted, as `DropNewest` would, or counted lost once waits are off).
    #[inline]
    pub(crate) fn publish(&mut self, msg: M, wait: Option<&mut Wait<'_>>) {
        self.publish_uncommitted(msg, wait);
        self.commit();
    }

    /// Publishes `msg` as [`publish`](Self::publish) does, counted at once, but leaves it in
    /// its broadcast rings unpublished until [`commit`](Self::commit): the runner commits
    /// after each hook, so a hook's publishes reach each broadcast ring as one run.
    #[inline]
    pub(crate) fn publish_uncommitted(&mut self, msg: M, mut wait: Option<&mut Wait<'_>>) {
        let Some((last, rest)) = self.edges.split_last_mut() else {
            return;
        };
        for edge in rest {
            edge.send(msg.clone(), wait.as_deref_mut());
        }
        last.send(msg, wait);
    }

    /// Publishes clones of `msgs`, in order, to every subscriber, as `publish` would one at a
    /// time, but into each ring as one batch: one store of the ring's index and one of each
    /// counter per batch. Allocates nothing; waits as `publish` does.
    #[inline]
    pub(crate) fn publish_slice(&mut self, msgs: &[M], mut wait: Option<&mut Wait<'_>>) {
        if msgs.is_empty() {
            return;
        }
        for edge in &mut self.edges {
            edge.send_slice(msgs, wait.as_deref_mut());
        }
        self.commit();
    }
}

impl<M> OutEdge<M> {
    /// Calls `f` with the counters of every subscriber behind this edge.
    fn for_each_counters(&self, mut f: impl FnMut(&EdgeCounters)) {
        match self {
            OutEdge::Ring { counters, .. } | OutEdge::Latest { counters, .. } => f(counters),
            OutEdge::Broadcast { edges, .. } => edges.iter().for_each(|e| f(&e.counters)),
        }
    }
}

impl<M: Clone> OutEdge<M> {
    /// Offers `msg` to this edge; it is counted exactly once: sent, dropped or lost.
    // NB: inlined whole into `publish`, with the full ring and the `Latest` slot out of line.
    // A feed and a sink sharing one thread (no cross-core traffic, so only the instructions
    // count; docs/PERFORMANCE.md) went from 221 to 235 M msgs/s, 4 alternating runs.
    #[inline(always)]
    fn send(&mut self, msg: M, wait: Option<&mut Wait<'_>>) {
        match self {
            OutEdge::Ring {
                tx,
                wait: may_wait,
                to_handle,
                counters,
            } => {
                // NB: one load of a line that only changes when the subscriber goes; without it
                // a publish into an abandoned ring would sit there uncounted. It costs nothing
                // the `bus` suite's round trip can tell from noise.
                if tx.is_abandoned() {
                    abandoned(counters);
                    return;
                }
                let p = &counters.publisher;
                // Counted before the push, so that no reader sees it handled before it is sent.
                p.sent.add(1);
                if let Err(e) = tx.try_push(msg) {
                    p.sent.sub(1);
                    full(tx, e.into_inner(), p, *may_wait, *to_handle, wait);
                }
            }
            OutEdge::Latest { tx, counters } => send_latest(tx, msg, counters),
            OutEdge::Broadcast { tx, edges } => send_broadcast(tx, edges, msg, wait),
        }
    }
}

/// Writes `msg` for every subscriber of a broadcast ring, counted sent on each edge before
/// the write (so before the commit that makes it visible), lost on edges whose subscriber is
/// gone; waits for room as `wait_and_push` does when the ring is full.
// NB: out of line, so that `send`, inlined into every publish, stays the size it was for the
// other edges (whose publishes measured up to 8% slower on one thread with it inlined, within
// that program's noise under load).
#[inline(never)]
fn send_broadcast<M: Clone>(
    tx: &mut BroadcastProducer<M>,
    edges: &mut [CachePadded<BroadcastEdge>],
    msg: M,
    wait: Option<&mut Wait<'_>>,
) {
    if tx.readers_changed() {
        settle_gone(tx, edges, false);
    }
    count_sent(edges, 1);
    if let Err(msg) = tx.write(msg) {
        broadcast_full(tx, edges, msg, wait);
    }
}

/// Writes clones of as many of `msgs` as the broadcast ring has room for, and counts them
/// sent on every edge with one update each (lost where the subscriber is gone); returns those
/// that did not fit. They are counted before the commit that makes them visible, also when a
/// `Clone` unwinds (then only the ones written).
#[inline]
fn write_counted<'m, M: Clone>(
    tx: &mut BroadcastProducer<M>,
    edges: &mut [CachePadded<BroadcastEdge>],
    msgs: &'m [M],
) -> &'m [M] {
    /// Counts what was written, when the run ends or a `Clone` unwinds.
    struct Written<'a> {
        edges: &'a [CachePadded<BroadcastEdge>],
        n: u64,
    }
    impl Drop for Written<'_> {
        fn drop(&mut self) {
            count_sent(self.edges, self.n);
        }
    }
    if tx.readers_changed() {
        settle_gone(tx, edges, false);
    }
    let fit = tx.slots().min(msgs.len());
    let mut written = Written { edges, n: 0 };
    for m in &msgs[..fit] {
        if tx.write(m.clone()).is_err() {
            debug_assert!(false, "the room counted was there");
            return &msgs[written.n as usize..];
        }
        written.n += 1;
    }
    &msgs[fit..]
}

/// Counts `n` messages sent on every edge whose subscriber is still there, and lost on the
/// others.
#[inline(always)]
fn count_sent(edges: &[CachePadded<BroadcastEdge>], n: u64) {
    for e in edges {
        if e.gone {
            for _ in 0..n {
                abandoned(&e.counters);
            }
        } else {
            e.counters.publisher.sent.add(n);
        }
    }
}

/// Settles the subscribers of a broadcast ring that went: their edges count what is published
/// next as lost, and what a racing publish left for them is settled as `abandoned` does. With
/// `waiting`, a message counted sent on every live edge is waiting for room: on the edges that
/// went, it is counted lost instead.
#[cold]
fn settle_gone<M>(
    tx: &mut BroadcastProducer<M>,
    edges: &mut [CachePadded<BroadcastEdge>],
    waiting: bool,
) {
    tx.refresh_readers();
    for (r, e) in edges.iter_mut().enumerate() {
        if !e.gone && !tx.is_live(r) {
            e.gone = true;
            if waiting {
                e.counters.publisher.sent.sub(1);
                e.counters.publisher.lost.add(1);
            }
            settle_in_flight(&e.counters);
        }
    }
}

/// A broadcast ring with no room for `msg` (already counted sent on the live edges): commits
/// what was written, so that the subscribers can make room, then waits for room if the caller
/// allows (giving up as `wait_and_push` does, counting it lost), else counts it dropped.
#[cold]
#[inline(never)]
fn broadcast_full<M: Clone>(
    tx: &mut BroadcastProducer<M>,
    edges: &mut [CachePadded<BroadcastEdge>],
    mut msg: M,
    wait: Option<&mut Wait<'_>>,
) {
    tx.commit();
    let Some(wait) = wait else {
        for e in edges.iter().filter(|e| !e.gone) {
            e.counters.publisher.sent.sub(1);
            e.counters.publisher.dropped.add(1);
        }
        return;
    };
    for e in edges.iter().filter(|e| !e.gone) {
        e.counters.publisher.waited.add(1);
    }
    loop {
        // As in `wait_and_push`: these checks run between arming and sleeping.
        if tx.readers_changed() {
            settle_gone(tx, edges, true);
        }
        if tx.is_abandoned() || wait.control.waits_over() {
            for e in edges.iter().filter(|e| !e.gone) {
                e.counters.publisher.sent.sub(1);
                e.counters.publisher.lost.add(1);
            }
            wait.idle.reset();
            return;
        }
        match tx.write(msg) {
            Ok(()) => {
                tx.commit();
                wait.idle.reset();
                return;
            }
            Err(m) => msg = m,
        }
        wait.idle.idle(0);
    }
}

/// A publish that found its ring full: waits for room if the edge and the caller allow
/// (`wait_and_push`), else counts it dropped.
#[cold]
#[inline(never)]
fn full<M>(
    tx: &mut Producer<M>,
    msg: M,
    p: &super::metrics::PublisherCounters,
    may_wait: bool,
    to_handle: bool,
    wait: Option<&mut Wait<'_>>,
) {
    match wait {
        Some(wait) if may_wait => wait_and_push(tx, msg, p, to_handle, wait),
        _ => {
            drop(msg);
            p.dropped.add(1);
        }
    }
}

/// A publish into a `Latest` slot: counted sent, and conflated if it overwrote an unread value.
#[inline(never)]
fn send_latest<M>(tx: &mut LatestWriter<M>, msg: M, counters: &EdgeCounters) {
    let p = &counters.publisher;
    if tx.is_abandoned() {
        abandoned(counters);
        return;
    }
    p.sent.add(1);
    if tx.write(msg) {
        p.conflated.add(1);
    }
}

impl<M: Clone> OutEdge<M> {
    /// Offers clones of `msgs` to this edge, in order; each is counted exactly once: sent,
    /// dropped or lost (or conflated, on a `Latest` edge, as one `send` each would).
    #[inline]
    fn send_slice(&mut self, msgs: &[M], mut wait: Option<&mut Wait<'_>>) {
        let OutEdge::Ring {
            tx,
            wait: may_wait,
            to_handle,
            counters,
        } = self
        else {
            if let OutEdge::Broadcast { tx, edges } = self {
                let rest = write_counted(tx, edges, msgs);
                for m in rest {
                    send_broadcast(tx, edges, m.clone(), wait.as_deref_mut());
                }
                return;
            }
            for m in msgs {
                self.send(m.clone(), wait.as_deref_mut());
            }
            return;
        };
        if tx.is_abandoned() {
            for _ in msgs {
                abandoned(counters);
            }
            return;
        }
        let p = &counters.publisher;
        let rest = push_counted(tx, msgs, p);
        if rest.is_empty() {
            return;
        }
        match wait {
            Some(wait) if *may_wait => wait_and_push_slice(tx, rest, p, *to_handle, wait),
            _ => p.dropped.add(rest.len() as u64),
        }
    }
}

/// Pushes clones of as many of `msgs` as fit, as one batch, counting them sent before they
/// enter the ring; returns those that did not fit. A `Clone` that panics leaves the clones
/// made before it pushed, and only those counted sent.
#[inline]
fn push_counted<'m, M: Clone>(
    tx: &mut Producer<M>,
    msgs: &'m [M],
    p: &super::metrics::PublisherCounters,
) -> &'m [M] {
    /// Takes back, while a `Clone` unwinds, the count of the items that never got made.
    struct Unmade<'a> {
        sent: &'a super::metrics::Counter,
        counted: usize,
        made: &'a std::cell::Cell<usize>,
    }
    impl Drop for Unmade<'_> {
        fn drop(&mut self) {
            let unmade = self.counted - self.made.get();
            if unmade > 0 {
                self.sent.sub(unmade as u64);
            }
        }
    }
    let k = tx.slots_for(msgs.len()).min(msgs.len());
    if k == 0 {
        return msgs;
    }
    // Counted before the push, so that no reader sees them handled before they are sent.
    p.sent.add(k as u64);
    let made = std::cell::Cell::new(0);
    let unmade = Unmade {
        sent: &p.sent,
        counted: k,
        made: &made,
    };
    let mut clones = msgs[..k].iter().map(|m| {
        let c = m.clone();
        made.set(made.get() + 1);
        c
    });
    let pushed = tx.push_iter(&mut clones);
    debug_assert_eq!(pushed, k, "the ring had room for the whole batch");
    // What was made was pushed (`push_iter` takes an item only for a free slot): the rest, if
    // any, is handed back with its count taken back.
    let made = made.get();
    drop(unmade);
    &msgs[made..]
}

/// Waits for room in a full `Block` ring and pushes what is left of a batch, in pieces as room
/// appears; gives up as `wait_and_push` does, counting what is left lost.
#[cold]
fn wait_and_push_slice<M: Clone>(
    tx: &mut Producer<M>,
    mut rest: &[M],
    p: &super::metrics::PublisherCounters,
    to_handle: bool,
    wait: &mut Wait<'_>,
) {
    p.waited.add(rest.len() as u64);
    loop {
        // As in `wait_and_push`: these checks run between arming and sleeping.
        if tx.is_abandoned()
            || wait.control.waits_over()
            || (to_handle && wait.control.is_stopping())
        {
            p.lost.add(rest.len() as u64);
            wait.idle.reset();
            return;
        }
        let before = rest.len();
        rest = push_counted(tx, rest, p);
        if rest.is_empty() {
            wait.idle.reset();
            return;
        }
        if rest.len() < before {
            wait.idle.reset();
        }
        wait.idle.idle(0);
    }
}

/// Counts a publish into an edge whose subscriber is gone as lost, and settles what a publish
/// racing with the subscriber's going left in the ring (the subscriber had already counted
/// what was queued): once the subscriber's end is dropped this publisher is the only writer of
/// the edge's counters (its `Release` store of the ring's `closed` flag, which `is_abandoned`
/// loaded with `Acquire`, comes after its last count), so nothing stays in flight.
#[cold]
fn abandoned(counters: &EdgeCounters) {
    counters.publisher.lost.add(1);
    settle_in_flight(counters);
}

/// Counts lost what is still in flight on an edge whose subscriber is gone (see `abandoned`).
#[cold]
fn settle_in_flight(counters: &EdgeCounters) {
    let left = counters.snapshot().in_flight();
    if left > 0 {
        counters.subscriber.lost.add_shared(left as u64);
    }
}

/// Waits for room in a full `Block` ring, then pushes. Gives up, counting the message lost,
/// when the subscriber goes or the stop protocol calls waits off (a stop past its drain
/// phase), so that no wait outlives the bus; and, on an edge into an external subscription
/// (`to_handle`), as soon as a stop is requested: the stop never waits for a reader outside
/// the bus.
#[cold]
fn wait_and_push<M>(
    tx: &mut Producer<M>,
    mut msg: M,
    p: &super::metrics::PublisherCounters,
    to_handle: bool,
    wait: &mut Wait<'_>,
) {
    p.waited.add(1);
    loop {
        // With `Park` the first idle round only arms the doorbell and the second sleeps, so
        // these checks always run between arming and sleeping: a pop, `Control::end_waits` or
        // a stop request (which rings every doorbell) after them rings the bell.
        if tx.is_abandoned()
            || wait.control.waits_over()
            || (to_handle && wait.control.is_stopping())
        {
            p.lost.add(1);
            wait.idle.reset();
            return;
        }
        p.sent.add(1);
        match tx.try_push(msg) {
            Ok(()) => {
                wait.idle.reset();
                return;
            }
            Err(e) => {
                p.sent.sub(1);
                msg = e.into_inner();
            }
        }
        wait.idle.idle(0);
    }
}

impl<M> Drop for OutEdge<M> {
    fn drop(&mut self) {
        // A broadcast ring's producer commits what it wrote as it drops, after this body: its
        // values are counted sent already, and stay readable as a ring's do.
        self.for_each_counters(EdgeCounters::end_dropped);
    }
}

/// Counts one message as panicked if dropped, which happens only while a panic in its handler
/// unwinds; a handler that returns forgets it and counts the message handled.
struct PanicGuard<'a> {
    counters: &'a EdgeCounters,
}

impl Drop for PanicGuard<'_> {
    #[cold]
    fn drop(&mut self) {
        self.counters.subscriber.panicked.add(1);
    }
}

/// Hands `m` to `handler`, counting it handled when the handler returns and panicked if it
/// unwinds.
#[inline(always)]
fn handle<M>(counters: &EdgeCounters, m: M, handler: &mut impl FnMut(M)) {
    let guard = PanicGuard { counters };
    handler(m);
    std::mem::forget(guard);
    counters.subscriber.handled.add(1);
}

/// The messages of one batch whose handler returned, counted handled with one store when the
/// batch ends: normally, or while a panic in a later handler unwinds (that message is counted
/// panicked by its [`PanicGuard`]), so that none is dropped from the books.
struct HandledBatch<'a> {
    counters: &'a EdgeCounters,
    n: u64,
}

impl Drop for HandledBatch<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.n > 0 {
            self.counters.subscriber.handled.add(self.n);
        }
    }
}

/// The rings of one topic that feed one actor: one per publisher. Made by the wiring in
/// `start()` and polled by the actor's inbox.
pub struct Inputs<M> {
    edges: Vec<InEdge<M>>,
}

impl<M> std::fmt::Debug for Inputs<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("topic_type", &std::any::type_name::<M>())
            .field("edges", &self.edges.len())
            .finish()
    }
}

impl<M: Send + 'static> Inputs<M> {
    /// Takes this topic's rings out of the wiring (called by an inbox in `start()`).
    pub fn take(wiring: &mut Wiring) -> Self {
        let boxes = wiring.inputs.remove(&TypeId::of::<M>()).unwrap_or_default();
        let edges = boxes
            .into_iter()
            .filter_map(|b| b.downcast::<InEdge<M>>().ok().map(|e| *e))
            .collect();
        Inputs { edges }
    }

    /// Hands at most `budget` messages from each ring to `handler`, in each ring's order, and
    /// returns how many it handed over. Allocates nothing.
    #[inline]
    pub fn poll<F: FnMut(M)>(&mut self, budget: usize, mut handler: F) -> usize {
        let mut total = 0;
        for edge in &mut self.edges {
            match edge {
                InEdge::Ring { rx, counters } => {
                    let counters: &EdgeCounters = counters;
                    // NB: one store of `handled` per batch of up to `budget`, not a load and a
                    // store per message; the count survives a panicking handler (the guard).
                    let mut batch = HandledBatch { counters, n: 0 };
                    let n = rx.pop_batch(budget, |m| {
                        let guard = PanicGuard { counters };
                        handler(m);
                        std::mem::forget(guard);
                        batch.n += 1;
                    });
                    drop(batch);
                    if n > 0 {
                        counters
                            .subscriber
                            .max_depth
                            .raise_to((n + rx.cached_len()) as u64);
                    }
                    total += n;
                }
                InEdge::Latest { rx, counters } => {
                    if let Some(m) = rx.read() {
                        counters.subscriber.max_depth.raise_to(1);
                        handle(counters, m, &mut handler);
                        total += 1;
                    }
                }
            }
        }
        total
    }

    /// Takes one message, trying the rings in turn from `*next` (which moves past the ring it
    /// came from, so that one busy publisher cannot starve another), counted handled on its
    /// edge. Allocates nothing. For the external [`Subscription`](crate::Subscription).
    #[inline]
    pub(crate) fn next_one(&mut self, next: &mut usize) -> Option<M> {
        self.next_from(next, true).map(|(m, _)| m)
    }

    /// Takes one message as [`next_one`](Self::next_one) does, but leaves counting it to the
    /// caller, with the index of the edge it came from ([`edge_counters`](Self::edge_counters)):
    /// for the tokio adapter, which counts it when it is delivered or dropped.
    #[cfg(feature = "tokio")]
    pub(crate) fn next_uncounted(&mut self, next: &mut usize) -> Option<(M, usize)> {
        self.next_from(next, false)
    }

    /// The counters of each edge, in the order of the indexes `next_uncounted` returns.
    #[cfg(feature = "tokio")]
    pub(crate) fn edge_counters(&self) -> Vec<Arc<EdgeCounters>> {
        self.edges
            .iter()
            .map(|edge| match edge {
                InEdge::Ring { counters, .. } | InEdge::Latest { counters, .. } => {
                    Arc::clone(counters)
                }
            })
            .collect()
    }

    #[inline]
    fn next_from(&mut self, next: &mut usize, count: bool) -> Option<(M, usize)> {
        let n = self.edges.len();
        for i in 0..n {
            let at = (*next + i) % n;
            let mut got = None;
            let (depth, counters) = match &mut self.edges[at] {
                InEdge::Ring { rx, counters } => {
                    rx.pop_batch(1, |m| got = Some(m));
                    (1 + rx.cached_len(), &**counters)
                }
                InEdge::Latest { rx, counters } => {
                    got = rx.read();
                    (1, &**counters)
                }
            };
            if let Some(m) = got {
                counters.subscriber.max_depth.raise_to(depth as u64);
                if count {
                    counters.subscriber.handled.add(1);
                }
                *next = (at + 1) % n;
                return Some((m, at));
            }
        }
        None
    }

    /// True when nothing is queued on any ring.
    pub(crate) fn is_empty(&self) -> bool {
        self.edges.iter().all(|edge| match edge {
            InEdge::Ring { rx, .. } => rx.is_empty(),
            InEdge::Latest { rx, .. } => !rx.has_fresh(),
        })
    }

    /// True when every ring is empty and every publisher is gone.
    pub fn is_finished(&self) -> bool {
        self.edges.iter().all(|edge| match edge {
            InEdge::Ring { rx, .. } => rx.is_abandoned() && rx.is_empty(),
            InEdge::Latest { rx, .. } => rx.is_abandoned() && !rx.has_fresh(),
        })
    }
}

impl<M> Drop for InEdge<M> {
    fn drop(&mut self) {
        // The subscriber is going for good: what is still queued will never be handled.
        let counters = match self {
            InEdge::Ring { rx, counters } => {
                counters.subscriber.lost.add_shared(rx.len() as u64);
                counters
            }
            InEdge::Latest { rx, counters } => {
                // Taken, not just looked at: a write racing with this drop then either finds
                // the value taken (and does not count it conflated) or overwrites it first (and
                // this takes the new one), so each value is counted once.
                if rx.read().is_some() {
                    counters.subscriber.lost.add_shared(1);
                }
                counters
            }
        };
        counters.subscriber.gone.add(1);
        counters.end_dropped();
        // The ring half drops after this body: its publisher then sees the edge abandoned.
    }
}

/// The input rings made by `start()` for one actor, waiting to be taken by its inbox
/// ([`Inputs::take`]).
#[derive(Default)]
pub struct Wiring {
    pub(crate) inputs: HashMap<TypeId, Vec<Box<dyn Any + Send>>>,
}

impl std::fmt::Debug for Wiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring")
            .field("topics", &self.inputs.len())
            .finish()
    }
}

/// Makes both ends of one edge of a topic: `(OutEdge<M>, InEdge<M>)`, type-erased.
pub(crate) type EdgeMaker = fn(
    Backpressure,
    usize,
    bool,
    bool,
    Arc<EdgeCounters>,
    Option<Arc<dyn Notify>>,
    Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Box<dyn Any + Send>);

pub(crate) fn edge_maker<M: Message>(
    policy: Backpressure,
    capacity: usize,
    may_wait: bool,
    to_handle: bool,
    counters: Arc<EdgeCounters>,
    wake_subscriber: Option<Arc<dyn Notify>>,
    wake_publisher: Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Box<dyn Any + Send>) {
    let (mut tx, mut rx) = make_edge::<M>(policy, capacity, may_wait, to_handle, counters);
    if let Some(n) = wake_subscriber {
        tx.notify_subscriber(n);
    }
    if let Some(n) = wake_publisher {
        rx.notify_publisher(n);
    }
    (Box::new(tx), Box::new(rx))
}

/// Makes the two ends of one edge of topic `M`, type-erased for the wiring.
pub(crate) fn make_edge<M: Message>(
    policy: Backpressure,
    capacity: usize,
    may_wait: bool,
    to_handle: bool,
    counters: Arc<EdgeCounters>,
) -> (OutEdge<M>, InEdge<M>) {
    match policy {
        Backpressure::Latest => {
            let (tx, rx) = crate::ring::Latest::new();
            (
                OutEdge::Latest {
                    tx,
                    counters: Arc::clone(&counters),
                },
                InEdge::Latest { rx, counters },
            )
        }
        Backpressure::Block | Backpressure::DropNewest => {
            let (tx, mut rx) = crate::ring::Ring::new(capacity);
            // NB: the bus frees every slot at once. `DropNewest` counts drops against the
            // edge's whole capacity, and a `Block` publisher waiting on a subscriber that is
            // itself waiting (a cycle) must see every slot it could use; gathering frees would
            // shrink both by up to a quarter ring while the subscriber is busy.
            rx.set_release_every(1);
            (
                OutEdge::Ring {
                    tx,
                    wait: may_wait && policy == Backpressure::Block,
                    to_handle,
                    counters: Arc::clone(&counters),
                },
                InEdge::Ring {
                    rx: ReadEnd::Spsc(rx),
                    counters,
                },
            )
        }
    }
}

/// One subscriber of a broadcast edge being made: its counters and its thread's doorbell.
pub(crate) type BroadcastSubscriber = (Arc<EdgeCounters>, Option<Arc<dyn Notify>>);

/// Makes one broadcast edge of a topic: its publisher's end and one subscriber's end per
/// subscriber (each with its counters and its thread's doorbell), type-erased.
pub(crate) type BroadcastMaker = fn(
    usize,
    Vec<BroadcastSubscriber>,
    Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Vec<Box<dyn Any + Send>>);

/// A [`BroadcastMaker`] for topic `M`: one ring of `capacity` for every subscriber in
/// `subscribers`, whose doorbells are rung after each commit (each once), and whose pops ring
/// `wake_publisher`.
pub(crate) fn broadcast_maker<M: Message + Clone>(
    capacity: usize,
    subscribers: Vec<BroadcastSubscriber>,
    wake_publisher: Option<Arc<dyn Notify>>,
) -> (Box<dyn Any + Send>, Vec<Box<dyn Any + Send>>) {
    let (tx, rx) = make_broadcast::<M>(capacity, subscribers, wake_publisher);
    let rx = rx
        .into_iter()
        .map(|e| Box::new(e) as Box<dyn Any + Send>)
        .collect();
    (Box::new(tx), rx)
}

/// The ends of one broadcast edge of topic `M` (see [`broadcast_maker`]).
pub(crate) fn make_broadcast<M: Message + Clone>(
    capacity: usize,
    subscribers: Vec<BroadcastSubscriber>,
    wake_publisher: Option<Arc<dyn Notify>>,
) -> (OutEdge<M>, Vec<InEdge<M>>) {
    let (mut tx, readers) = Broadcast::new(capacity, subscribers.len());
    let mut bells: Vec<Arc<dyn Notify>> = Vec::new();
    let mut edges = Vec::new();
    let mut ins = Vec::new();
    for ((counters, bell), mut rx) in subscribers.into_iter().zip(readers) {
        if let Some(bell) = bell {
            if !bells
                .iter()
                .any(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&bell)))
            {
                bells.push(bell);
            }
        }
        rx.notify_on_pop(wake_publisher.clone());
        edges.push(CachePadded::new(BroadcastEdge {
            counters: Arc::clone(&counters),
            gone: false,
        }));
        ins.push(InEdge::Ring {
            rx: ReadEnd::Broadcast(rx),
            counters,
        });
    }
    tx.notify_on_commit(bells);
    (OutEdge::Broadcast { tx, edges }, ins)
}

impl<M> OutEdge<M> {
    /// Makes `notify` ring after every push: the subscriber's thread sleeps on it.
    pub(crate) fn notify_subscriber(&mut self, notify: Arc<dyn crate::ring::Notify>) {
        match self {
            OutEdge::Ring { tx, .. } => tx.notify_on_push(Some(notify)),
            OutEdge::Latest { tx, .. } => tx.notify_on_write(Some(notify)),
            OutEdge::Broadcast { .. } => {
                debug_assert!(false, "a broadcast edge gets its doorbells when it is made");
            }
        }
    }
}

impl<M> InEdge<M> {
    /// Makes `notify` ring after every pop: the publisher's thread sleeps on it when full.
    pub(crate) fn notify_publisher(&mut self, notify: Arc<dyn crate::ring::Notify>) {
        // A latest slot never makes its writer wait, so only rings need this.
        if let InEdge::Ring { rx, .. } = self {
            rx.notify_on_pop(Some(notify));
        }
    }
}

/// One edge of topic `M` between a publisher's output and a subscriber's inputs, for the loom
/// models.
#[cfg(all(test, loom))]
pub(crate) fn single_edge<M: Message + Clone>(
    policy: Backpressure,
    capacity: usize,
    to_handle: bool,
    counters: Arc<EdgeCounters>,
    wake_publisher: Option<Arc<dyn crate::ring::Notify>>,
) -> (Output<M>, Inputs<M>) {
    let (tx, mut rx) = make_edge::<M>(policy, capacity, true, to_handle, counters);
    if let Some(n) = wake_publisher {
        rx.notify_publisher(n);
    }
    (Output { edges: vec![tx] }, Inputs { edges: vec![rx] })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct V(u64);

    impl crate::Message for V {
        const TOPIC: &'static str = "edge.v";
        const TOPIC_ID: u64 = crate::topic_id("edge.v");
        const FINGERPRINT: u64 = 1;
    }

    /// The interleaving a racing publisher can produce on a `Latest` edge: it passes its
    /// "subscriber gone?" check, the subscriber leaves with an unread value, then the write
    /// lands. Each value must be counted once: the unread one lost (the leaving subscriber took
    /// it), the late one lost when the edge settles, nothing conflated.
    #[test]
    fn a_latest_value_is_counted_once_when_the_subscriber_leaves_under_a_write() {
        let counters = Arc::new(EdgeCounters::default());
        let (mut tx, rx) =
            make_edge::<V>(Backpressure::Latest, 1, true, false, Arc::clone(&counters));
        tx.send(V(1), None);
        drop(rx);
        // The publisher's side of `send` after its abandonment check, as it runs when the
        // subscriber leaves between the two.
        let OutEdge::Latest {
            tx: writer,
            counters: c,
        } = &mut tx
        else {
            panic!("a Latest edge");
        };
        c.publisher.sent.add(1);
        if writer.write(V(2)) {
            c.publisher.conflated.add(1);
        }
        drop(tx);
        let s = counters.snapshot();
        assert_eq!((s.sent, s.conflated, s.subscriber_lost), (2, 0, 2), "{s:?}");
        assert_eq!(s.in_flight(), 0, "{s:?}");
    }

    /// One output over `edges` edges of `policy`, each of `capacity`, with their counters.
    fn fan_out(
        policy: Backpressure,
        capacity: usize,
        edges: usize,
    ) -> (Output<V>, Vec<Inputs<V>>, Vec<Arc<EdgeCounters>>) {
        let mut out = Output::empty();
        let (mut inputs, mut all) = (Vec::new(), Vec::new());
        for _ in 0..edges {
            let counters = Arc::new(EdgeCounters::default());
            let (tx, rx) = make_edge::<V>(policy, capacity, true, false, Arc::clone(&counters));
            out.edges.push(tx);
            inputs.push(Inputs { edges: vec![rx] });
            all.push(counters);
        }
        (out, inputs, all)
    }

    fn values(range: std::ops::Range<u64>) -> Vec<V> {
        range.map(V).collect()
    }

    /// A burst goes to every subscriber in order; what does not fit a `DropNewest` ring is
    /// counted dropped, per edge, and the books balance.
    #[test]
    fn a_burst_fills_each_ring_and_counts_the_rest_dropped() {
        let (mut out, mut inputs, counters) = fan_out(Backpressure::DropNewest, 4, 3);
        // The second subscriber already holds one message: it has room for three.
        out.edges[1].send(V(100), None);
        out.publish_slice(&values(0..6), None);
        let mut got = vec![Vec::new(); 3];
        for (i, rx) in inputs.iter_mut().enumerate() {
            rx.poll(64, |V(v)| got[i].push(v));
        }
        assert_eq!(
            got,
            [vec![0, 1, 2, 3], vec![100, 0, 1, 2], vec![0, 1, 2, 3]]
        );
        for (i, c) in counters.iter().enumerate() {
            let s = c.snapshot();
            let (sent, dropped) = if i == 1 { (4, 3) } else { (4, 2) };
            assert_eq!(
                (s.sent, s.dropped, s.handled),
                (sent, dropped, sent),
                "{i}: {s:?}"
            );
            assert_eq!(s.in_flight(), 0, "{i}: {s:?}");
        }
    }

    /// A burst into a `Block` ring without a wait (`try_publish_slice`) drops what does not
    /// fit; into a ring whose subscriber is gone, it is lost, every message of it.
    #[test]
    fn a_burst_that_cannot_wait_is_dropped_and_one_to_a_gone_subscriber_is_lost() {
        let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 4, 2);
        drop(inputs.pop());
        out.publish_slice(&values(0..7), None);
        let s = counters[0].snapshot();
        assert_eq!((s.sent, s.dropped, s.publisher_lost), (4, 3, 0), "{s:?}");
        let s = counters[1].snapshot();
        assert_eq!((s.published(), s.publisher_lost), (7, 7), "{s:?}");
        assert_eq!(s.in_flight(), 0, "{s:?}");
    }

    /// A burst larger than a `Block` ring waits for room and arrives whole and in order, every
    /// message counted sent once (and those that found the ring full, waited).
    #[test]
    fn a_burst_larger_than_a_block_ring_waits_and_arrives_whole() {
        let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 4, 1);
        let mut rx = inputs.pop().expect("one input");
        let n = if cfg!(miri) { 40 } else { 10_000 };
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while (got.len() as u64) < n && std::time::Instant::now() < deadline {
                if rx.poll(3, |V(v)| got.push(v)) == 0 {
                    std::thread::yield_now();
                }
            }
            got
        });
        let control = Control::new(1, Vec::new());
        let mut idle = crate::wait::Backoff::new();
        for chunk in values(0..n).chunks(7) {
            let idle: &mut (dyn IdleStrategy + 'static) = &mut idle;
            let control = &control;
            out.publish_slice(chunk, Some(&mut Wait { idle, control }));
        }
        let got = reader.join().expect("reader");
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        let s = counters[0].snapshot();
        assert_eq!(
            (s.sent, s.handled, s.dropped, s.publisher_lost),
            (n, n, 0, 0),
            "{s:?}"
        );
        assert!(s.waited <= n, "{s:?}");
    }

    /// A handler that panics in the middle of a batch: the messages before it are counted
    /// handled (their count is stored once per batch, so it must survive the unwinding), the one
    /// it panicked on panicked, and the rest stay in the ring, in flight.
    #[test]
    fn a_panic_in_a_batch_keeps_the_handled_count_of_the_messages_before_it() {
        let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 8, 1);
        out.publish_slice(&values(0..6), None);
        let rx = &mut inputs[0];
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rx.poll(64, |V(v)| assert_ne!(v, 2, "the third message"));
        }));
        assert!(unwound.is_err());
        let s = counters[0].snapshot();
        assert_eq!((s.sent, s.handled, s.panicked), (6, 2, 1), "{s:?}");
        assert_eq!(s.in_flight(), 3, "{s:?}");
        let mut rest = Vec::new();
        rx.poll(64, |V(v)| rest.push(v));
        assert_eq!(rest, [3, 4, 5]);
        assert_eq!(counters[0].snapshot().in_flight(), 0);
    }

    /// A message whose `Clone` panics on the third copy.
    #[derive(Debug)]
    struct Fragile(u64);

    thread_local! {
        static CLONES_LEFT: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
    }

    impl Clone for Fragile {
        fn clone(&self) -> Self {
            let left = CLONES_LEFT.with(|c| c.replace(c.get().saturating_sub(1)));
            assert!(left > 0, "clone refused");
            Fragile(self.0)
        }
    }

    impl crate::Message for Fragile {
        const TOPIC: &'static str = "edge.fragile";
        const TOPIC_ID: u64 = crate::topic_id("edge.fragile");
        const FINGERPRINT: u64 = 2;
    }

    /// A `Clone` that panics part way through a burst: the clones made before it are in the
    /// ring and counted sent, nothing else is, and the books balance once they are handled.
    #[test]
    fn a_clone_that_panics_in_a_burst_leaves_only_the_clones_made_counted() {
        let counters = Arc::new(EdgeCounters::default());
        let (tx, rx) =
            make_edge::<Fragile>(Backpressure::Block, 8, true, false, Arc::clone(&counters));
        let mut out = Output { edges: vec![tx] };
        let mut rx = Inputs { edges: vec![rx] };
        let burst: Vec<Fragile> = (0..5).map(Fragile).collect();
        CLONES_LEFT.with(|c| c.set(2));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            out.publish_slice(&burst, None);
        }));
        CLONES_LEFT.with(|c| c.set(u32::MAX));
        assert!(unwound.is_err());
        let s = counters.snapshot();
        assert_eq!((s.sent, s.dropped, s.publisher_lost), (2, 0, 0), "{s:?}");
        let mut got = Vec::new();
        rx.poll(64, |Fragile(v)| got.push(v));
        assert_eq!(got, [0, 1]);
        assert_eq!(counters.snapshot().in_flight(), 0);
    }
}
