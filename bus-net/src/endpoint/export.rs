//! The publisher side's per-topic state: an exported topic's sequence, its reliable history,
//! and the batch that turns queued messages into datagrams for its subscribers; and what the
//! endpoint shares with a direct sender.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::egress::{Egress, Wire};
use super::metrics::NetMetrics;
use crate::{
    encode_payload_sized, split_fragments, Allowlist, BatchEncoder, DataMeta, EncodeError,
    ReliableExport, SubscriberTable, HEADER_LEN,
};

/// A topic an endpoint serves to remote subscribers.
#[derive(Clone, Debug)]
pub struct ExportSpec {
    /// The topic's name (for logs and reports).
    pub topic: Arc<str>,
    /// The topic id carried in every frame.
    pub topic_id: u64,
    /// The schema fingerprint subscribers must match.
    pub fingerprint: u64,
    /// Who may subscribe; `None`: the endpoint's allowlist.
    pub allow: Option<Allowlist>,
    /// Kept in history and retransmitted on NAK.
    pub reliable: bool,
    /// Messages sent to a newly admitted subscriber (reliable exports only).
    pub late_join: usize,
    /// The type's shape, served to whoever asks (`SchemaRequest`); `None`: none is served.
    pub shape: Option<super::EncodedShape>,
    /// The multicast group its data also goes to (one datagram for every subscriber that
    /// receives the group; the others are served by unicast), if any.
    pub group: Option<SocketAddr>,
}

/// What the endpoint and a direct sender share about one topic: the last sequence number
/// the sender used (for heartbeats and acknowledgements).
#[derive(Debug, Default)]
pub(crate) struct DirectShared {
    pub(crate) last_seq: AtomicU64,
}

/// A topic sent from a publishing thread of its own ([`Bridge::direct`]): the endpoint keeps
/// its control plane.
///
/// [`Bridge::direct`]: crate::Bridge::direct
#[derive(Debug)]
pub(crate) struct DirectTopic {
    pub(crate) topic: Arc<str>,
    pub(crate) topic_id: u64,
    pub(crate) fingerprint: u64,
    /// The type's shape, served on request.
    pub(crate) shape: Option<super::EncodedShape>,
    pub(crate) shared: Arc<DirectShared>,
}

impl DirectTopic {
    pub(crate) fn last_seq(&self) -> u64 {
        self.shared.last_seq.load(Ordering::Acquire)
    }
}

/// One exported topic's state.
pub(crate) struct ExportState {
    pub(crate) spec: ExportSpec,
    /// The last sequence number sent.
    pub(crate) seq: u64,
    /// Whether a refused message was logged (once per topic).
    logged: bool,
    pub(crate) reliable: Option<ReliableExport>,
    /// A message too large for one datagram is encoded here, then sent as fragments; grows to
    /// the largest such message (at most the maximum message size) and is reused.
    large: Vec<u8>,
    /// What its group datagrams end with without a key (random per session; told to each
    /// admitted subscriber in a `Group` frame).
    pub(crate) group_token: u64,
    /// A reliable export with a group: `(due, seq)` of the retransmissions to send to the
    /// group (at most [`REPAIRS`]), and `(seq, sent)` of the last ones sent.
    pub(crate) repairs: Vec<(u64, u64)>,
    pub(crate) repaired: std::collections::VecDeque<(u64, u64)>,
}

/// Group retransmissions an export holds at most, pending and recent each.
pub(crate) const REPAIRS: usize = 1024;

impl ExportState {
    pub(crate) fn new(
        spec: ExportSpec,
        reliable: Option<ReliableExport>,
        group_token: u64,
    ) -> Self {
        let repairable = spec.group.is_some() && reliable.is_some();
        ExportState {
            spec,
            seq: 0,
            logged: false,
            reliable,
            large: Vec::new(),
            group_token,
            repairs: Vec::with_capacity(if repairable { REPAIRS } else { 0 }),
            repaired: std::collections::VecDeque::with_capacity(if repairable {
                REPAIRS
            } else {
                0
            }),
        }
    }

    /// The `last_seq` a subscription is acknowledged with: the last sequence number sent,
    /// less the messages a late-join export sends a new subscriber.
    pub(crate) fn ack_seq(&self) -> u64 {
        match &self.reliable {
            Some(r) => self
                .seq
                .saturating_sub(r.history().newest().saturating_sub(r.ack_seq())),
            None => self.seq,
        }
    }
}

/// Messages of one exported topic on their way into datagrams: made by
/// [`Endpoint::export`](super::Endpoint::export), fed with [`push`](Self::push), sent when a
/// datagram is full and, for the rest, when the batch is dropped. Several messages share a
/// datagram when several are pushed; nothing waits to fill one.
pub struct ExportBatch<'a> {
    pub(super) enc: BatchEncoder<'a>,
    pub(super) export: &'a mut ExportState,
    pub(super) egress: &'a mut Egress,
    pub(super) wire: &'a mut dyn Wire,
    pub(super) subscribers: &'a SubscriberTable<SocketAddr>,
    pub(super) metrics: &'a NetMetrics,
    pub(super) session: u64,
    pub(super) max_message: usize,
    pub(super) wall: fn() -> i64,
    /// Read once per batch, and only if there is something to stamp.
    pub(super) timestamp_ns: Option<i64>,
    /// Whether anyone will get the messages (a late-join history keeps them regardless).
    pub(super) subscribed: bool,
}

impl std::fmt::Debug for ExportBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportBatch")
            .field("topic", &self.export.spec.topic)
            .field("pending", &self.enc.len())
            .finish_non_exhaustive()
    }
}

impl ExportBatch<'_> {
    /// Sends the datagram being built to the topic's subscribers and empties it.
    fn flush(&mut self) {
        if self.enc.is_empty() {
            return;
        }
        let topic = self.export.spec.topic_id;
        let (datagrams, bytes) = match self.export.spec.group {
            // One datagram for the group's members, one per subscriber for the others.
            Some(group) if self.subscribers.any_via_group(topic) => {
                let token = self.export.group_token;
                let (d, b) = self.egress.send(
                    &mut *self.wire,
                    self.enc.as_bytes(),
                    true,
                    std::iter::once((group, token)),
                );
                let (d2, b2) = self.egress.send(
                    &mut *self.wire,
                    self.enc.as_bytes(),
                    true,
                    self.subscribers.unicast_destinations(topic),
                );
                (d + d2, b + b2)
            }
            _ => self.egress.send(
                &mut *self.wire,
                self.enc.as_bytes(),
                true,
                self.subscribers.destinations(topic),
            ),
        };
        self.metrics.sent(datagrams, bytes);
        self.enc.clear();
    }

    /// Appends a frame with `push`; if the datagram is full, sends it and pushes again into
    /// the empty one. Returns where the frame starts in the datagram.
    fn push_frame(
        &mut self,
        mut push: impl FnMut(&mut BatchEncoder<'_>) -> Result<(), EncodeError>,
    ) -> Result<usize, EncodeError> {
        let start = self.enc.len();
        match push(&mut self.enc) {
            Err(EncodeError::Full { .. }) => {
                self.flush();
                push(&mut self.enc).map(|()| 0)
            }
            other => other.map(|()| start),
        }
    }

    /// Keeps the frame at `start` of the datagram (just pushed, unsealed: a retransmission is
    /// sealed as a datagram of its own) as message `seq` in a reliable export's history.
    #[inline]
    fn keep(&mut self, seq: u64, start: usize) {
        if let (Some(history), Some(frame)) = (
            self.export.reliable.as_mut(),
            self.enc.as_bytes().get(start..),
        ) {
            history.record(seq, frame);
        }
    }

    /// Encodes `msg` as the topic's next message (in fragments, each with a sequence number
    /// of its own, if it does not fit in a datagram). A message nobody will get is counted
    /// `no_subscriber`; one that cannot be encoded or is larger than the maximum message
    /// size is counted `too_large` (the first logged) and not sent.
    pub fn push<T: Serialize + ?Sized>(&mut self, msg: &T) {
        if !self.subscribed {
            self.metrics.no_subscriber.add(1);
            return;
        }
        let topic_id = self.export.spec.topic_id;
        let wall = self.wall;
        let meta = DataMeta {
            topic_id,
            fingerprint: self.export.spec.fingerprint,
            session: self.session,
            seq: self.export.seq + 1,
            timestamp_ns: *self.timestamp_ns.get_or_insert_with(wall),
        };
        let sent = match self.push_frame(|enc| enc.push_data(meta, msg)) {
            Ok(start) => {
                self.export.seq += 1;
                self.keep(self.export.seq, start);
                Ok(())
            }
            Err(EncodeError::TooLarge { size, .. }) => {
                self.push_fragments(meta, msg, size.saturating_sub(HEADER_LEN))
            }
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => self.metrics.messages_out.add(1),
            Err(e) => {
                self.metrics.too_large.add(1);
                if !self.export.logged {
                    self.export.logged = true;
                    log::error!(
                        "bridge refused a message of topic '{}': {e}",
                        self.export.spec.topic
                    );
                }
            }
        }
    }

    /// Sends `msg` (its payload `size` bytes) as fragments.
    fn push_fragments<T: Serialize + ?Sized>(
        &mut self,
        meta: DataMeta,
        msg: &T,
        size: usize,
    ) -> Result<(), EncodeError> {
        let mut large = std::mem::take(&mut self.export.large);
        let result = (|| {
            let payload =
                encode_payload_sized(meta.topic_id, msg, size, &mut large, self.max_message)?;
            let fragments = split_fragments(payload, self.enc.capacity()).ok_or(
                EncodeError::MessageTooLarge {
                    topic: meta.topic_id,
                    size: payload.len(),
                    max: self.max_message,
                },
            )?;
            for (fragment, piece) in fragments {
                let meta = DataMeta {
                    seq: self.export.seq + 1,
                    ..meta
                };
                let start = self.push_frame(|enc| enc.push_fragment(meta, &fragment, piece))?;
                self.export.seq += 1;
                self.keep(self.export.seq, start);
            }
            Ok(())
        })();
        self.export.large = large;
        result
    }
}

impl Drop for ExportBatch<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
