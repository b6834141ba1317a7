//! One import's state (its session machine, reliable receiver, reassembler and NAK nonces),
//! and how what it lets through reaches the application: the [`Sink`], directly for a
//! best-effort import, in order through [`InOrder`] for a reliable one. The subscriber side
//! (`subscriber.rs`) keeps the imports and routes frames to them.

use std::net::SocketAddr;
use std::sync::Arc;

use super::common::Entropy;
use super::event::{push_event, Event};
use super::metrics::NetMetrics;
use crate::session::canonical;
use crate::{
    BridgeConfig, Delivery, DropReason, Kind, LossCounts, Reassembled, Reassembler, ReliableConfig,
    ReliableReceiver, SubscriberCounts, SubscriberSession,
};

/// A topic an endpoint subscribes to.
#[derive(Clone, Debug)]
pub struct ImportSpec {
    /// The topic's name (for logs and reports).
    pub topic: Arc<str>,
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

    /// A call of served service `service` (its index in the endpoint's served services) that
    /// a proven caller made: `body` is the bincode of the request, `budget_ms` the time its
    /// caller has left. Call the service locally and hand its answer to
    /// [`Endpoint::answer`](super::Endpoint::answer) with `key`, once. An error answers the
    /// caller at once with that status.
    ///
    /// # Errors
    /// How the call ends without a local call (`QueueFull`, say).
    fn request(
        &mut self,
        service: usize,
        key: u64,
        budget_ms: u32,
        body: &[u8],
    ) -> Result<(), crate::CallStatus> {
        let _ = (service, key, budget_ms, body);
        Err(crate::CallStatus::Refused)
    }

    /// How call `key` of imported service `service` (its index in the endpoint's imported
    /// services) ended: the bincode of the reply, or why there is none. Exactly once per call
    /// [`Endpoint::call`](super::Endpoint::call) accepted.
    fn reply(&mut self, service: usize, key: u64, result: Result<&[u8], crate::CallStatus>) {
        let _ = (service, key, result);
    }
}

/// The figures of removed imports whose slots were reused by new ones: they stay counted.
#[derive(Default)]
pub(crate) struct RetiredFigures {
    /// A best-effort import's tracker; a reliable one's `unconfirmed`.
    pub(crate) loss: LossCounts,
    pub(crate) naks_sent: u64,
    pub(crate) unrecovered: u64,
    pub(crate) incomplete: u64,
    pub(crate) sessions: SubscriberCounts,
}

impl RetiredFigures {
    /// Adds the figures of `slot`, about to be reused.
    pub(crate) fn absorb(&mut self, slot: &ImportSlot) {
        match &slot.reliable {
            None => super::metrics::add_loss(&mut self.loss, slot.session.loss()),
            Some(r) => {
                let c = r.counts();
                self.loss.unconfirmed = self.loss.unconfirmed.saturating_add(c.unconfirmed);
                self.naks_sent = self.naks_sent.saturating_add(c.naks_sent);
                self.unrecovered = self.unrecovered.saturating_add(c.unrecovered);
            }
        }
        let incomplete = slot.reassembly.counts().incomplete;
        self.incomplete = self.incomplete.saturating_add(incomplete);
        self.sessions.add(slot.session.counts());
    }
}

/// One import.
pub(crate) struct ImportSlot {
    pub(crate) spec: ImportSpec,
    /// Where its messages go: the index [`Sink::deliver`] is given (its own index for an
    /// import given at start; the discovering import's for one added by discovery, so that
    /// several publishers of a topic feed one port).
    pub(crate) port: usize,
    /// Removed ([`Endpoint::remove_import`](super::Endpoint::remove_import)): it sends and
    /// accepts nothing, and its slot is reused by the next import added.
    pub(crate) retired: bool,
    pub(crate) session: SubscriberSession,
    /// Whether a transient refusal was reported since the import was last established.
    pub(crate) warned: bool,
    /// When its publisher last answered it (an acknowledgement, a heartbeat, ...).
    pub(crate) heard_ns: u64,
    /// The multicast group its publisher sends the topic's data to, once told (`Group`).
    pub(crate) group: Option<SocketAddr>,
    /// When a datagram of its stream last arrived by the group.
    pub(crate) group_seen_ns: u64,
    /// Whether its requests say that it receives the group (so the publisher does not
    /// unicast it the data).
    pub(crate) via_group: bool,
    /// The reorder buffer and NAK state of a reliable import.
    pub(crate) reliable: Option<ReliableReceiver>,
    /// Messages arriving in fragments, put back together (bounded, buffers reused).
    pub(crate) reassembly: Reassembler,
    /// The state of this import's NAK nonces (splitmix64 from a random seed: an off-path host
    /// does not see them).
    pub(crate) nonce: u64,
}

impl ImportSlot {
    /// A new import of `spec` delivering to `port`, for an endpoint of session `session`.
    pub(crate) fn new(
        spec: ImportSpec,
        port: usize,
        session: u64,
        config: &BridgeConfig,
        reliable: &ReliableConfig,
        entropy: &mut Entropy,
    ) -> ImportSlot {
        let machine = SubscriberSession::new(
            spec.topic_id,
            spec.fingerprint,
            session,
            entropy.next(),
            config.renew_every,
            config.late,
        );
        // With a pre-shared key the MAC authenticates the stream; without, the subscription
        // token does.
        let machine = if config.psk.is_some() {
            machine.without_token()
        } else {
            machine
        };
        ImportSlot {
            spec: ImportSpec {
                publisher: canonical(spec.publisher),
                ..spec
            },
            port,
            retired: false,
            session: machine,
            warned: false,
            heard_ns: 0,
            group: None,
            group_seen_ns: 0,
            via_group: false,
            reliable: spec.reliable.then(|| ReliableReceiver::new(reliable)),
            reassembly: Reassembler::new(&config.reassembly),
            nonce: entropy.next_u64(),
        }
    }

    /// The next NAK nonce (never 0).
    pub(crate) fn next_nonce(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)).max(1)
    }
}

/// Hands a data frame's payload to `sink` (as port `port`'s), or a fragment's to `reassembly`
/// and the message to `sink` once it is complete. Counts what is delivered.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_frame(
    sink: &mut dyn Sink,
    port: usize,
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
    sink.deliver_from(port, origin, message)?;
    metrics.messages_in.add(1);
    Ok(())
}

/// What a reliable receiver delivers, in order, on its way to the sink: a message as it is, a
/// fragment through the reassembler first.
pub(crate) struct InOrder<'a> {
    pub(crate) sink: &'a mut dyn Sink,
    /// The import's index (its events name it).
    pub(crate) import: usize,
    /// Where its messages go ([`ImportSlot::port`]).
    pub(crate) port: usize,
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
            self.port,
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
        push_event(
            self.events,
            Event::Unrecovered {
                import: self.import,
                first,
                last,
            },
        );
    }
}
