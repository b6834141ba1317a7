//! Making edges: both ends of each publisher-subscriber edge, for `start()`, and the
//! [`Wiring`] that carries an actor's input ends to its inbox.
//!
//! `start()` knows topics only as type-erased declarations, so each topic's declaration holds
//! an [`EdgeMaker`] and a [`BroadcastMaker`] (`edge_maker::<M>`, `broadcast_maker::<M>`) that
//! make the typed ends and hand them back boxed: the output end is added to the publisher's
//! `Output<M>`, the input end to the subscriber's `Wiring`, from which `Inputs::take` takes it
//! back typed. A `Block` or `DropNewest` edge is an SPSC ring, a `Latest` edge a one-value
//! slot, and two or more `Block` subscribers of a publisher that may wait share one broadcast
//! ring. Each end rings the other side's doorbell: a push wakes the subscriber's thread, a pop
//! a publisher waiting for room.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::{BroadcastEdge, InEdge, OutEdge, ReadEnd};
#[cfg(all(test, loom))]
use super::{Inputs, Output};
use crate::message::Message;
use crate::ring::{Broadcast, Notify};
use crate::runtime::metrics::EdgeCounters;
use crate::runtime::Backpressure;

/// The input rings made by `start()` for one actor, waiting to be taken by its inbox
/// ([`Inputs::take`](super::Inputs::take)): by message type, each ring with the id of the topic
/// it carries.
#[derive(Default)]
pub struct Wiring {
    pub(crate) inputs: HashMap<TypeId, Vec<TopicRing>>,
}

/// One input ring, type-erased, with the id of the topic it carries.
pub(crate) type TopicRing = (u64, Box<dyn Any + Send>);

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
    (
        Output { edges: vec![tx] },
        Inputs {
            edges: vec![(0, rx)],
        },
    )
}
