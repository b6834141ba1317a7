//! The subscriber's side of the edges: an actor's [`Inputs`] for one topic, one edge per
//! publisher, and what a subscriber that goes leaves counted.
//!
//! [`Inputs::poll`] visits every edge in turn and pops at most a budget from each, so one busy
//! publisher cannot starve another; `next_one` (for external subscriptions) takes one message
//! at a time, starting after the edge the last one came from. A message is counted handled
//! when its handler returns (one store per batch) and panicked if the handler unwinds (a guard
//! dropped only then); the batch's count survives the unwinding. A subscriber's end that drops
//! counts what is still queued lost, and its ring then tells the publisher the edge is
//! abandoned.

use std::any::TypeId;
use std::sync::Arc;

use super::{InEdge, ReadEnd, Wiring};
use crate::ring::{BroadcastReader, Notify};
use crate::runtime::metrics::EdgeCounters;

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

    pub(super) fn notify_on_pop(&mut self, notify: Option<Arc<dyn Notify>>) {
        match self {
            ReadEnd::Spsc(rx) => rx.notify_on_pop(notify),
            ReadEnd::Broadcast(rx) => rx.notify_on_pop(notify),
        }
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

/// The rings of one message type that feed one actor: one per publisher of each topic of that
/// type the actor receives. Made by the wiring in `start()` and polled by the actor's inbox.
pub struct Inputs<M> {
    /// Each edge with the id of the topic it carries.
    pub(super) edges: Vec<(u64, InEdge<M>)>,
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
            .filter_map(|(topic, b)| b.downcast::<InEdge<M>>().ok().map(|e| (topic, *e)))
            .collect();
        Inputs { edges }
    }

    /// Takes the rings of one topic (by its running id) out of the wiring, leaving the rings of
    /// the type's other topics for another taker.
    pub(crate) fn take_topic(wiring: &mut Wiring, id: u64) -> Self {
        let mut edges = Vec::new();
        if let Some(all) = wiring.inputs.get_mut(&TypeId::of::<M>()) {
            let (mine, rest): (Vec<_>, Vec<_>) =
                std::mem::take(all).into_iter().partition(|(t, _)| *t == id);
            *all = rest;
            edges = mine
                .into_iter()
                .filter_map(|(topic, b)| b.downcast::<InEdge<M>>().ok().map(|e| (topic, *e)))
                .collect();
        }
        Inputs { edges }
    }

    /// The ids of the topics of its rings, one per ring.
    pub(crate) fn topic_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.edges.iter().map(|(topic, _)| *topic)
    }

    /// How many rings feed this input: one per publisher of each of its topics.
    pub(crate) fn rings(&self) -> usize {
        self.edges.len()
    }

    /// Hands at most `budget` messages from each ring to `handler`, in each ring's order, and
    /// returns how many it handed over. Allocates nothing.
    #[inline]
    pub fn poll<F: FnMut(M)>(&mut self, budget: usize, handler: F) -> usize {
        self.poll_edges(budget, |_| {}, handler)
    }

    /// As [`poll`](Self::poll), handing `handler` each message with the id of the topic it
    /// came on ([`Topic::id`](crate::Topic::id)), for an actor that receives several topics of
    /// one type.
    #[inline]
    pub fn poll_topics<F: FnMut(M, u64)>(&mut self, budget: usize, mut handler: F) -> usize {
        let current = std::cell::Cell::new(0);
        self.poll_edges(budget, |t| current.set(t), |m| handler(m, current.get()))
    }

    /// As [`poll`](Self::poll), telling `on_edge` the topic id of each ring before handing its
    /// messages to `handler`: one call a ring, none a message (how an inbox tells the runner
    /// which topic the messages it hands over came on).
    #[inline]
    pub fn poll_edges<T: FnMut(u64), F: FnMut(M)>(
        &mut self,
        budget: usize,
        mut on_edge: T,
        mut handler: F,
    ) -> usize {
        let mut total = 0;
        for (topic, edge) in &mut self.edges {
            on_edge(*topic);
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
            .map(|(_, edge)| match edge {
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
            let (depth, counters) = match &mut self.edges[at].1 {
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
        self.edges.iter().all(|(_, edge)| match edge {
            InEdge::Ring { rx, .. } => rx.is_empty(),
            InEdge::Latest { rx, .. } => !rx.has_fresh(),
        })
    }

    /// True when every ring is empty and every publisher is gone.
    pub fn is_finished(&self) -> bool {
        self.edges.iter().all(|(_, edge)| match edge {
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
