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

use super::metrics::EdgeCounters;
use super::Backpressure;
use crate::message::Message;
use crate::ring::{Consumer, LatestReader, LatestWriter, Producer};
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
        policy: Backpressure,
        counters: Arc<EdgeCounters>,
    },
    Latest {
        tx: LatestWriter<M>,
        counters: Arc<EdgeCounters>,
    },
}

/// The subscriber's end of one edge.
pub(crate) enum InEdge<M> {
    Ring {
        rx: Consumer<M>,
        counters: Arc<EdgeCounters>,
    },
    Latest {
        rx: LatestReader<M>,
        counters: Arc<EdgeCounters>,
    },
}

/// Everything an actor publishes on one topic: one edge per subscriber.
pub(crate) struct Output<M> {
    edges: Vec<OutEdge<M>>,
}

/// An output with its type erased, so an actor's outputs fit in one `Vec`.
pub(crate) trait AnyOutput: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn add_edge(&mut self, edge: Box<dyn Any + Send>);
}

impl<M: Message> AnyOutput for Output<M> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn add_edge(&mut self, edge: Box<dyn Any + Send>) {
        match edge.downcast::<OutEdge<M>>() {
            Ok(edge) => self.edges.push(*edge),
            Err(_) => debug_assert!(false, "wiring paired an edge with the wrong output type"),
        }
    }
}

impl<M: Message + Clone> Output<M> {
    pub(crate) fn new_erased() -> Box<dyn AnyOutput> {
        Box::new(Output::<M> { edges: Vec::new() })
    }

    /// Publishes `msg` to every subscriber. Allocates nothing; waits only on a full `Block`
    /// ring whose subscriber is still there.
    #[inline]
    pub(crate) fn publish(&mut self, msg: M, idle: &mut dyn IdleStrategy) {
        let Some((last, rest)) = self.edges.split_last_mut() else {
            return;
        };
        for edge in rest {
            edge.send(msg.clone(), idle);
        }
        last.send(msg, idle);
    }
}

impl<M> OutEdge<M> {
    #[inline]
    fn send(&mut self, msg: M, idle: &mut dyn IdleStrategy) {
        match self {
            OutEdge::Ring {
                tx,
                policy,
                counters,
            } => {
                let p = &counters.publisher;
                let msg = match tx.try_push(msg) {
                    Ok(()) => {
                        p.sent.add(1);
                        return;
                    }
                    Err(e) => e.into_inner(),
                };
                if tx.is_abandoned() {
                    p.lost.add(1);
                    return;
                }
                match policy {
                    Backpressure::DropNewest | Backpressure::Latest => p.dropped.add(1),
                    Backpressure::Block => {
                        p.waited.add(1);
                        match tx.push(msg, idle) {
                            Ok(()) => p.sent.add(1),
                            Err(_) => p.lost.add(1),
                        }
                    }
                }
            }
            OutEdge::Latest { tx, counters } => {
                let p = &counters.publisher;
                if tx.is_abandoned() {
                    p.lost.add(1);
                    return;
                }
                let conflated = tx.write(msg);
                p.sent.add(1);
                if conflated {
                    p.conflated.add(1);
                }
            }
        }
    }
}

/// Counts one message as handled when dropped: after the handler returns, or while a panic in
/// it unwinds, so that every message taken out of a ring is accounted for either way.
struct HandledGuard<'a> {
    counters: &'a EdgeCounters,
}

impl Drop for HandledGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.counters.subscriber.handled.add(1);
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
                    let n = rx.pop_batch(budget, |m| {
                        let _handled = HandledGuard { counters };
                        handler(m);
                    });
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
                        let _handled = HandledGuard { counters };
                        counters.subscriber.max_depth.raise_to(1);
                        handler(m);
                        total += 1;
                    }
                }
            }
        }
        total
    }

    /// True when every ring is empty and every publisher is gone.
    pub fn is_finished(&self) -> bool {
        self.edges.iter().all(|edge| match edge {
            InEdge::Ring { rx, .. } => rx.is_abandoned() && rx.is_empty(),
            InEdge::Latest { rx, .. } => rx.is_abandoned() && !rx.has_fresh(),
        })
    }
}

impl<M> Drop for Inputs<M> {
    fn drop(&mut self) {
        // The subscriber is going for good: what is still queued will never be handled.
        for edge in &self.edges {
            match edge {
                InEdge::Ring { rx, counters } => counters.subscriber.lost.add(rx.len() as u64),
                InEdge::Latest { rx, counters } => {
                    if rx.has_fresh() {
                        counters.subscriber.lost.add(1);
                    }
                }
            }
        }
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

/// Makes the two ends of one edge of topic `M`, type-erased for the wiring.
pub(crate) fn make_edge<M: Message>(
    policy: Backpressure,
    capacity: usize,
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
            let (tx, rx) = crate::ring::Ring::new(capacity);
            (
                OutEdge::Ring {
                    tx,
                    policy,
                    counters: Arc::clone(&counters),
                },
                InEdge::Ring { rx, counters },
            )
        }
    }
}

impl<M> OutEdge<M> {
    /// Makes `notify` ring after every push: the subscriber's thread sleeps on it.
    pub(crate) fn notify_subscriber(&mut self, notify: Arc<dyn crate::ring::Notify>) {
        match self {
            OutEdge::Ring { tx, .. } => tx.notify_on_push(Some(notify)),
            OutEdge::Latest { tx, .. } => tx.notify_on_write(Some(notify)),
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
