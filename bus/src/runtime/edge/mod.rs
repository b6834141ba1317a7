//! Edges: the typed ends of one publisher-subscriber ring, made in `start()`.
//!
//! An actor's output for topic `M` is an [`Output<M>`] holding one [`OutEdge`] per subscriber;
//! a publish goes into each (a clone for all but the last, which gets the value moved). A
//! subscriber's input for `M` is an [`Inputs<M>`] holding one [`InEdge`] per publisher, polled
//! in turn with a budget so that one busy publisher cannot starve another. Every message is
//! counted exactly once on each of its edges: by the publisher's end as sent, dropped,
//! conflated or lost, and once sent, by the subscriber's end as handled, panicked or lost.
//!
//! An edge is one of three rings (`crate::ring`): an SPSC ring of its own (`Block` or
//! `DropNewest`), a one-value slot (`Latest`), or one reader of a broadcast ring shared by two
//! or more `Block` subscribers of one publisher that may wait. This module defines the two
//! ends; the files beside it hold what each side does with them:
//! - `write`: the publisher's side: [`Output`], fan-out of each publish, counting, and the
//!   wait on a full ring that the stop protocol can call off.
//! - `read`: the subscriber's side: [`Inputs`], budgeted polling in batches, the handled and
//!   panicked counts, and what a subscriber that goes leaves counted.
//! - `wire`: making both ends of each edge for `start()`, and the [`Wiring`] that carries the
//!   input ends to each actor's inbox.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::ring::{
    BroadcastProducer, BroadcastReader, Consumer, LatestReader, LatestWriter, Producer,
};
use crate::runtime::metrics::EdgeCounters;

mod read;
#[cfg(all(test, not(loom)))]
mod tests;
mod wire;
mod write;

pub use read::Inputs;
#[cfg(all(test, loom))]
pub(crate) use wire::single_edge;
pub use wire::Wiring;
pub(crate) use wire::{broadcast_maker, edge_maker, BroadcastMaker, EdgeMaker};
pub use write::Out;
pub(crate) use write::{AnyOutput, Committer, Offered, Output, Until, Wait};

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
