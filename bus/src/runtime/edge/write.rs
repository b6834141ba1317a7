//! The publisher's side of the edges: an actor's [`Output`] for one topic, and what a publish
//! does on each of its edges.
//!
//! A publish offers the message to every edge, a clone each but the last, which gets the value
//! moved; a burst (`publish_slice`) goes into each ring as one batch. On every edge the message
//! is counted exactly once, before it becomes visible to the subscriber: sent, dropped (a full
//! ring that may not wait), lost (the subscriber is gone, or a wait was called off), or
//! conflated (a `Latest` slot overwritten unread). A full `Block` ring makes the publisher wait
//! with its thread's idle strategy; each wait re-checks, between arming its doorbell and
//! sleeping, whether the subscriber went or the stop protocol called waits off, so no wait
//! outlives the bus. A broadcast ring's writes become visible in one store per run
//! ([`Output::commit`], after each hook).
//!
//! The common path (`OutEdge::send` on a ring with room) is inlined into each publish; the full
//! ring, the `Latest` slot and the broadcast ring are out of line so that it stays small.

use std::any::Any;
use std::marker::PhantomData;

use crossbeam_utils::CachePadded;

use super::{BroadcastEdge, OutEdge};
use crate::message::Message;
use crate::ring::{BroadcastProducer, LatestWriter, Producer};
use crate::runtime::control::Control;
use crate::runtime::metrics::{Counter, EdgeCounters, PublisherCounters};
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

/// What a publish may wait with on a full `Block` ring: the thread's idle strategy, and the
/// bus's control, whose stop protocol can call every wait off.
pub(crate) struct Wait<'a> {
    pub(crate) idle: &'a mut (dyn IdleStrategy + 'static),
    pub(crate) control: &'a Control,
    /// When the publisher gives up waiting, counting the message lost (a call, whose request
    /// waits for room only within the call's timeout); `None`: never.
    pub(crate) deadline: Option<Until>,
}

/// The end of a wait for room.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Until {
    /// At this time.
    At(std::time::Instant),
    /// This long after the wait begins: for a publisher that reads no clock unless it must
    /// wait (an actor's call).
    After(std::time::Duration),
}

impl Wait<'_> {
    /// Starts waiting: a deadline given as a duration counts from now (one clock read; only
    /// on the way into a wait).
    fn begin(&mut self) {
        if let Some(Until::After(timeout)) = self.deadline {
            // A timeout past the clock's range: no deadline.
            self.deadline = std::time::Instant::now()
                .checked_add(timeout)
                .map(Until::At);
        }
    }

    /// Whether the publisher's own deadline has passed (one clock read; only while waiting).
    fn past_deadline(&self) -> bool {
        matches!(self.deadline, Some(Until::At(at)) if std::time::Instant::now() >= at)
    }

    /// Waits one idle round, never past the deadline.
    fn sleep(&mut self) {
        match self.deadline {
            Some(Until::At(at)) => self.idle.idle_until(0, at),
            _ => self.idle.idle(0),
        }
    }
}

/// What became of a message offered to an output ([`Output::offer`]): a call's request, whose
/// caller must know whether its server got it. Ordered from worst to best: with several
/// subscribers, the best outcome of any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Offered {
    /// Every subscriber is gone, or the stop called the wait for room off: counted lost.
    Stopped,
    /// The wait for room gave up at its deadline: counted lost.
    TimedOut,
    /// The ring was full and the edge or the publisher does not wait: counted dropped.
    Full,
    /// In the ring.
    Sent,
}

/// Everything an actor publishes on one topic: one edge per subscriber.
pub(crate) struct Output<M> {
    pub(super) edges: Vec<OutEdge<M>>,
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

    /// Whether every subscriber of this output is gone for good (and it has any): a server
    /// whose supervision stopped it, seen from a caller's request output.
    pub(crate) fn is_abandoned(&self) -> bool {
        !self.edges.is_empty()
            && self.edges.iter().all(|edge| match edge {
                OutEdge::Ring { tx, .. } => tx.is_abandoned(),
                OutEdge::Latest { tx, .. } => tx.is_abandoned(),
                OutEdge::Broadcast { tx, .. } => tx.is_abandoned(),
            })
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

    /// Publishes `msg` as [`publish`](Self::publish) does, counted the same way, and says
    /// what became of it: for a call's request, whose caller ends the call at once when no
    /// subscriber got it. Not on the publish path.
    pub(crate) fn offer(&mut self, msg: M, mut wait: Option<&mut Wait<'_>>) -> Offered {
        let Some((last, rest)) = self.edges.split_last_mut() else {
            return Offered::Stopped;
        };
        let mut best = Offered::Stopped;
        for edge in rest {
            best = best.max(edge.offer(msg.clone(), wait.as_deref_mut()));
        }
        best = best.max(last.offer(msg, wait));
        self.commit();
        best
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
    // NB: inlined whole into `publish`, with the full ring and the `Latest` slot out of line:
    // a feed and a sink sharing one thread (no cross-core traffic, so only the instructions
    // count) publish faster with it inlined; see docs/PERFORMANCE.md.
    #[inline(always)]
    pub(super) fn send(&mut self, msg: M, wait: Option<&mut Wait<'_>>) {
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
            OutEdge::Broadcast { tx, edges } => {
                send_broadcast(tx, edges, msg, wait);
            }
        }
    }

    /// Offers `msg` to this edge as [`send`](Self::send) does, and says what became of it.
    fn offer(&mut self, msg: M, wait: Option<&mut Wait<'_>>) -> Offered {
        match self {
            OutEdge::Ring {
                tx,
                wait: may_wait,
                to_handle,
                counters,
            } => {
                if tx.is_abandoned() {
                    abandoned(counters);
                    return Offered::Stopped;
                }
                let p = &counters.publisher;
                p.sent.add(1);
                match tx.try_push(msg) {
                    Ok(()) => Offered::Sent,
                    Err(e) => {
                        p.sent.sub(1);
                        full(tx, e.into_inner(), p, *may_wait, *to_handle, wait)
                    }
                }
            }
            OutEdge::Latest { tx, counters } => {
                if tx.is_abandoned() {
                    abandoned(counters);
                    return Offered::Stopped;
                }
                send_latest(tx, msg, counters);
                Offered::Sent
            }
            OutEdge::Broadcast { tx, edges } => {
                let offered = send_broadcast(tx, edges, msg, wait);
                if edges.iter().all(|e| e.gone) {
                    Offered::Stopped
                } else {
                    offered
                }
            }
        }
    }
}

/// Writes `msg` for every subscriber of a broadcast ring, counted sent on each edge before
/// the write (so before the commit that makes it visible), lost on edges whose subscriber is
/// gone; waits for room as `wait_and_push` does when the ring is full.
// NB: out of line, so that `send`, inlined into every publish, keeps its size for the other
// edges, whose publishes on one thread slow down with it inlined; see docs/PERFORMANCE.md.
#[inline(never)]
fn send_broadcast<M: Clone>(
    tx: &mut BroadcastProducer<M>,
    edges: &mut [CachePadded<BroadcastEdge>],
    msg: M,
    wait: Option<&mut Wait<'_>>,
) -> Offered {
    if tx.readers_changed() {
        settle_gone(tx, edges, false);
    }
    count_sent(edges, 1);
    match tx.write(msg) {
        Ok(()) => Offered::Sent,
        Err(msg) => broadcast_full(tx, edges, msg, wait),
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
) -> Offered {
    tx.commit();
    let Some(wait) = wait else {
        for e in edges.iter().filter(|e| !e.gone) {
            e.counters.publisher.sent.sub(1);
            e.counters.publisher.dropped.add(1);
        }
        return Offered::Full;
    };
    wait.begin();
    for e in edges.iter().filter(|e| !e.gone) {
        e.counters.publisher.waited.add(1);
    }
    loop {
        // As in `wait_and_push`: these checks run between arming and sleeping.
        if tx.readers_changed() {
            settle_gone(tx, edges, true);
        }
        let late = wait.past_deadline();
        if tx.is_abandoned() || wait.control.waits_over() || late {
            for e in edges.iter().filter(|e| !e.gone) {
                e.counters.publisher.sent.sub(1);
                e.counters.publisher.lost.add(1);
            }
            wait.idle.reset();
            return gave_up(late && !tx.is_abandoned() && !wait.control.waits_over());
        }
        match tx.write(msg) {
            Ok(()) => {
                tx.commit();
                wait.idle.reset();
                return Offered::Sent;
            }
            Err(m) => msg = m,
        }
        wait.sleep();
    }
}

/// How a wait for room that gave up ended: at its own deadline, or called off (the subscriber
/// went, or the stop).
fn gave_up(at_deadline: bool) -> Offered {
    if at_deadline {
        Offered::TimedOut
    } else {
        Offered::Stopped
    }
}

/// A publish that found its ring full: waits for room if the edge and the caller allow
/// (`wait_and_push`), else counts it dropped.
#[cold]
#[inline(never)]
fn full<M>(
    tx: &mut Producer<M>,
    msg: M,
    p: &PublisherCounters,
    may_wait: bool,
    to_handle: bool,
    wait: Option<&mut Wait<'_>>,
) -> Offered {
    match wait {
        Some(wait) if may_wait => wait_and_push(tx, msg, p, to_handle, wait),
        _ => {
            drop(msg);
            p.dropped.add(1);
            Offered::Full
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
    p: &PublisherCounters,
) -> &'m [M] {
    /// Takes back, while a `Clone` unwinds, the count of the items that never got made.
    struct Unmade<'a> {
        sent: &'a Counter,
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
    p: &PublisherCounters,
    to_handle: bool,
    wait: &mut Wait<'_>,
) {
    wait.begin();
    p.waited.add(rest.len() as u64);
    loop {
        // As in `wait_and_push`: these checks run between arming and sleeping.
        if tx.is_abandoned()
            || wait.control.waits_over()
            || (to_handle && wait.control.is_stopping())
            || wait.past_deadline()
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
        wait.sleep();
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
    p: &PublisherCounters,
    to_handle: bool,
    wait: &mut Wait<'_>,
) -> Offered {
    wait.begin();
    p.waited.add(1);
    loop {
        // With `Park` the first idle round only arms the doorbell and the second sleeps, so
        // these checks always run between arming and sleeping: a pop, `Control::end_waits` or
        // a stop request (which rings every doorbell) after them rings the bell.
        let called_off = tx.is_abandoned()
            || wait.control.waits_over()
            || (to_handle && wait.control.is_stopping());
        let late = wait.past_deadline();
        if called_off || late {
            p.lost.add(1);
            wait.idle.reset();
            return gave_up(!called_off);
        }
        p.sent.add(1);
        match tx.try_push(msg) {
            Ok(()) => {
                wait.idle.reset();
                return Offered::Sent;
            }
            Err(e) => {
                p.sent.sub(1);
                msg = e.into_inner();
            }
        }
        wait.sleep();
    }
}

impl<M> Drop for OutEdge<M> {
    fn drop(&mut self) {
        // A broadcast ring's producer commits what it wrote as it drops, after this body: its
        // values are counted sent already, and stay readable as a ring's do.
        self.for_each_counters(EdgeCounters::end_dropped);
    }
}
