//! The subscriber side: one import's state (its session machine, reliable receiver,
//! reassembler and NAK nonces), and how what it lets through reaches the application.

use std::net::SocketAddr;

use super::metrics::NetMetrics;
use super::Event;
use crate::{
    Delivery, DropReason, Kind, Reassembled, Reassembler, ReliableReceiver, SubscriberSession,
};

/// A topic an endpoint subscribes to.
#[derive(Clone, Debug)]
pub struct ImportSpec {
    /// The topic's name (for logs and reports).
    pub topic: &'static str,
    /// The topic id carried in every frame.
    pub topic_id: u64,
    /// The schema fingerprint the publisher must match.
    pub fingerprint: u64,
    /// The publisher's address.
    pub publisher: SocketAddr,
    /// Delivered in order, gaps NAKed.
    pub reliable: bool,
}

/// Where a delivered message comes from: the publisher session, the sequence number of its
/// frame (of its last fragment, for a message sent in fragments) and the frame's send time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The publisher session.
    pub session: u64,
    /// The frame's sequence number.
    pub seq: u64,
    /// The frame's send time, ns since the UNIX epoch; 0 when not known (a reliable import
    /// delivers out of its reorder buffer, which keeps payloads, not headers).
    pub timestamp_ns: i64,
}

/// Where the messages an [`Endpoint`](super::Endpoint) lets through go: the bridge decodes
/// and publishes them on the bus; a tool prints them; the simulator checks them.
pub trait Sink {
    /// Message `payload` (bincode, as the publisher encoded it) of import `import` (its index
    /// in the endpoint's imports). An error drops it and is counted under its reason.
    ///
    /// # Errors
    /// Why the payload was refused (it does not decode as the topic's type, say).
    fn deliver(&mut self, import: usize, payload: &[u8]) -> Result<(), DropReason>;

    /// [`deliver`](Self::deliver), told where the message comes from (a recorder keeps the
    /// sequence number and send time). What the endpoint calls; the default forgets `origin`.
    ///
    /// # Errors
    /// As [`deliver`](Self::deliver).
    #[inline]
    fn deliver_from(
        &mut self,
        import: usize,
        origin: Origin,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        let _ = origin;
        self.deliver(import, payload)
    }

    /// A datagram of compat import `import`, from its publisher (an ll-udp-pubsub v0.1
    /// `Packet`). An error drops it and is counted under its reason.
    ///
    /// # Errors
    /// Why the datagram was refused.
    fn deliver_compat(&mut self, import: usize, datagram: &[u8]) -> Result<(), DropReason> {
        let _ = (import, datagram);
        Err(DropReason::UnknownTopic)
    }
}

/// One import.
pub(crate) struct ImportSlot {
    pub(crate) spec: ImportSpec,
    pub(crate) session: SubscriberSession,
    /// Whether a transient refusal was reported since the import was last established.
    pub(crate) warned: bool,
    /// The reorder buffer and NAK state of a reliable import.
    pub(crate) reliable: Option<ReliableReceiver>,
    /// Messages arriving in fragments, put back together (bounded, buffers reused).
    pub(crate) reassembly: Reassembler,
    /// The state of this import's NAK nonces (splitmix64 from a random seed: an off-path host
    /// does not see them).
    pub(crate) nonce: u64,
}

impl ImportSlot {
    /// The next NAK nonce (never 0).
    pub(crate) fn next_nonce(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)).max(1)
    }
}

/// Hands a data frame's payload to `sink`, or a fragment's to `reassembly` and the message to
/// `sink` once it is complete. Counts what is delivered.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_frame(
    sink: &mut dyn Sink,
    import: usize,
    reassembly: &mut Reassembler,
    kind: Kind,
    origin: Origin,
    payload: &[u8],
    now_ns: u64,
    metrics: &NetMetrics,
) -> Result<(), DropReason> {
    let message = if kind == Kind::Fragment {
        match reassembly.on_fragment(origin.session, origin.seq, payload, now_ns)? {
            Reassembled::Complete(message) => message,
            Reassembled::Pending => return Ok(()),
        }
    } else {
        payload
    };
    sink.deliver_from(import, origin, message)?;
    metrics.messages_in.add(1);
    Ok(())
}

/// What a reliable receiver delivers, in order, on its way to the sink: a message as it is, a
/// fragment through the reassembler first.
pub(crate) struct InOrder<'a> {
    pub(crate) sink: &'a mut dyn Sink,
    pub(crate) import: usize,
    pub(crate) reassembly: &'a mut Reassembler,
    pub(crate) metrics: &'a NetMetrics,
    pub(crate) events: &'a mut std::collections::VecDeque<Event>,
    /// The publisher session the frames are of.
    pub(crate) session: u64,
    pub(crate) now_ns: u64,
}

impl Delivery for InOrder<'_> {
    #[inline]
    fn deliver(&mut self, seq: u64, kind: Kind, payload: &[u8]) {
        let delivered = deliver_frame(
            &mut *self.sink,
            self.import,
            self.reassembly,
            kind,
            Origin {
                session: self.session,
                seq,
                timestamp_ns: 0,
            },
            payload,
            self.now_ns,
            self.metrics,
        );
        if let Err(reason) = delivered {
            self.metrics.drop(reason);
        }
    }

    fn unrecovered(&mut self, first: u64, last: u64) {
        // Delivery is in order: a message in flight is missing a fragment of this range.
        self.reassembly.abandon();
        super::push_event(
            self.events,
            Event::Unrecovered {
                import: self.import,
                first,
                last,
            },
        );
    }
}
