//! The bridge's ports: one per exported or imported topic, each typed, behind a small trait so
//! the bridge can hold a list of them. A port is called once per poll, not once per message.

use std::net::SocketAddr;

use llbus::{Context, Inputs, Message, Out, Setup};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::egress::{send_frames, Protect};
use super::metrics::NetMetrics;
use crate::{
    decode_compat_packet, decode_payload, encode_compat_packet, encode_payload_sized, realtime_ns,
    split_fragments, BatchEncoder, DataMeta, DropReason, EncodeError, FrameMac, IoStats,
    ReliableExport, SendBatch, SubscriberTable, UdpEndpoint, HEADER_LEN,
};

/// What an export needs to send: the socket, the batch, a buffer of one datagram, and who
/// subscribes.
pub(crate) struct SendSide<'a> {
    pub(crate) endpoint: &'a mut UdpEndpoint,
    pub(crate) batch: &'a mut SendBatch,
    pub(crate) buf: &'a mut [u8],
    pub(crate) subscribers: &'a SubscriberTable<SocketAddr>,
    pub(crate) session: u64,
    pub(crate) metrics: &'a NetMetrics,
    /// The pre-shared key's MAC, if any.
    pub(crate) mac: Option<&'a FrameMac>,
    /// A buffer of one datagram, where a copy is sealed (with a key) or put together with its
    /// token (without).
    pub(crate) scratch: &'a mut [u8],
    /// Set when the socket fails for good (the bridge reports it and stops using the socket).
    pub(crate) failed: &'a mut Option<std::io::Error>,
    /// The largest message sent, in payload bytes (`ReassemblyConfig::max_message`).
    pub(crate) max_message: usize,
}

impl SendSide<'_> {
    /// Sends `enc`'s datagram to the subscribers of `topic` and empties it.
    fn flush(&mut self, enc: &mut BatchEncoder<'_>, topic: u64) {
        fan_out(
            enc.as_bytes(),
            self.subscribers.destinations(topic),
            self.endpoint,
            self.batch,
            Protect::of(self.mac, self.scratch, true),
            self.metrics,
            self.failed,
        );
        enc.clear();
    }

    /// Appends a frame with `push`; if the datagram is full, sends it and pushes again into
    /// the empty one. Returns where the frame starts in the datagram.
    fn push(
        &mut self,
        enc: &mut BatchEncoder<'_>,
        topic: u64,
        mut push: impl FnMut(&mut BatchEncoder<'_>) -> Result<(), EncodeError>,
    ) -> Result<usize, EncodeError> {
        let start = enc.len();
        match push(enc) {
            Err(EncodeError::Full { .. }) => {
                self.flush(enc, topic);
                push(enc).map(|()| 0)
            }
            other => other.map(|()| start),
        }
    }
}

/// Sends one datagram of frames to `dests` (addresses with their subscription tokens) through
/// the bridge's one egress ([`send_frames`]), counting what happens. A send that fails for
/// one destination is counted by the endpoint and the others go on; a socket that fails for
/// good is recorded in `failed` (and nothing more is sent on it).
pub(crate) fn fan_out(
    frames: &[u8],
    dests: impl Iterator<Item = (SocketAddr, u64)>,
    endpoint: &mut UdpEndpoint,
    batch: &mut SendBatch,
    protect: Protect<'_>,
    metrics: &NetMetrics,
    failed: &mut Option<std::io::Error>,
) {
    if failed.is_some() {
        return;
    }
    match send_frames(endpoint, batch, frames, protect, dests) {
        Ok(sent) => {
            metrics.datagrams_out.add(sent.datagrams as u64);
            metrics.bytes_out.add(sent.bytes as u64);
        }
        Err(e) => *failed = Some(e),
    }
}

/// Counts a message the encoder refused, logging the first of each topic.
fn refused(metrics: &NetMetrics, logged: &mut bool, topic: &'static str, e: &EncodeError) {
    metrics.too_large.add(1);
    if !*logged {
        *logged = true;
        log::error!("bridge refused a message of topic '{topic}': {e}");
    }
}

/// An exported topic: reads the rings the bus made for it and sends datagrams.
pub(crate) trait ExportPort: Send {
    fn topic(&self) -> &'static str;
    fn topic_id(&self) -> u64;
    fn fingerprint(&self) -> u64;
    fn last_seq(&self) -> u64;
    /// Makes the export reliable: every message sent is kept in `history`.
    fn set_reliable(&mut self, history: ReliableExport);
    /// The history of a reliable export.
    fn reliable(&self) -> Option<&ReliableExport>;
    /// The history of a reliable export, to answer a NAK.
    fn reliable_mut(&mut self) -> Option<&mut ReliableExport>;
    /// Moves up to `budget` queued messages per ring into datagrams for the topic's
    /// subscribers, several per datagram when several are queued. Returns how many it took.
    fn pump(&mut self, out: &mut SendSide<'_>, budget: usize) -> usize;
}

pub(crate) struct Export<T> {
    inputs: Inputs<T>,
    seq: u64,
    logged: bool,
    reliable: Option<ReliableExport>,
    /// A message too large for one datagram is encoded here, then sent as fragments; grows to
    /// the largest such message (at most the maximum message size) and is reused.
    large: Vec<u8>,
}

impl<T: Message + Serialize> Export<T> {
    pub(crate) fn make(setup: &mut Setup<'_>) -> Box<dyn ExportPort> {
        Box::new(Export::<T> {
            inputs: setup.inputs(),
            seq: 0,
            logged: false,
            reliable: None,
            large: Vec::new(),
        })
    }
}

impl<T: Message + Serialize> ExportPort for Export<T> {
    fn topic(&self) -> &'static str {
        T::TOPIC
    }
    fn topic_id(&self) -> u64 {
        T::TOPIC_ID
    }
    fn fingerprint(&self) -> u64 {
        T::FINGERPRINT
    }
    fn last_seq(&self) -> u64 {
        self.seq
    }
    fn set_reliable(&mut self, history: ReliableExport) {
        self.reliable = Some(history);
    }
    fn reliable(&self) -> Option<&ReliableExport> {
        self.reliable.as_ref()
    }
    fn reliable_mut(&mut self) -> Option<&mut ReliableExport> {
        self.reliable.as_mut()
    }

    fn pump(&mut self, out: &mut SendSide<'_>, budget: usize) -> usize {
        // A late-join history keeps messages even while nobody subscribes.
        let subscribed = out.subscribers.subscribers(T::TOPIC_ID).next().is_some()
            || self.reliable.as_ref().is_some_and(|r| r.late_join() > 0);
        // The encoder borrows the datagram buffer; `out` keeps the rest, to send with.
        let mut enc = BatchEncoder::new(std::mem::take(&mut out.buf)).with_token(out.mac.is_none());
        // Read once per pump, and only if there is something to stamp.
        let mut timestamp_ns = None;
        let (seq, logged, reliable, large) = (
            &mut self.seq,
            &mut self.logged,
            &mut self.reliable,
            &mut self.large,
        );
        let taken = self.inputs.poll(budget, |msg| {
            if !subscribed {
                out.metrics.no_subscriber.add(1);
                return;
            }
            let meta = DataMeta {
                topic_id: T::TOPIC_ID,
                fingerprint: T::FINGERPRINT,
                session: out.session,
                seq: *seq + 1,
                timestamp_ns: *timestamp_ns.get_or_insert_with(realtime_ns),
            };
            let sent = match out.push(&mut enc, T::TOPIC_ID, |enc| enc.push_data(meta, &msg)) {
                Ok(start) => {
                    *seq += 1;
                    keep(reliable, *seq, &enc, start);
                    Ok(())
                }
                // Larger than a datagram: in fragments, each with a sequence number of its own.
                Err(EncodeError::TooLarge { size, .. }) => {
                    let size = size.saturating_sub(HEADER_LEN);
                    encode_payload_sized(T::TOPIC_ID, &msg, size, large, out.max_message).and_then(
                        |payload| {
                            let fragments = split_fragments(payload, enc.capacity()).ok_or(
                                EncodeError::MessageTooLarge {
                                    topic: T::TOPIC_ID,
                                    size: payload.len(),
                                    max: out.max_message,
                                },
                            )?;
                            for (fragment, piece) in fragments {
                                let meta = DataMeta {
                                    seq: *seq + 1,
                                    ..meta
                                };
                                let start = out.push(&mut enc, T::TOPIC_ID, |enc| {
                                    enc.push_fragment(meta, &fragment, piece)
                                })?;
                                *seq += 1;
                                keep(reliable, *seq, &enc, start);
                            }
                            Ok(())
                        },
                    )
                }
                Err(e) => Err(e),
            };
            match sent {
                Ok(()) => out.metrics.messages_out.add(1),
                Err(e) => refused(out.metrics, logged, T::TOPIC, &e),
            }
        });
        if !enc.is_empty() {
            out.flush(&mut enc, T::TOPIC_ID);
        }
        out.buf = enc.into_inner();
        taken
    }
}

/// Keeps the frame at `start` of `enc`'s datagram (just pushed, unsealed: a retransmission is
/// sealed as a datagram of its own) as message `seq` in a reliable export's history.
#[inline]
fn keep(reliable: &mut Option<ReliableExport>, seq: u64, enc: &BatchEncoder<'_>, start: usize) {
    if let (Some(history), Some(frame)) = (reliable.as_mut(), enc.as_bytes().get(start..)) {
        history.record(seq, frame);
    }
}

/// An imported topic: decodes the payloads its session machine lets through and publishes
/// them on the local bus.
pub(crate) trait ImportPort: Send {
    fn topic(&self) -> &'static str;
    fn topic_id(&self) -> u64;
    fn fingerprint(&self) -> u64;
    /// Decodes one payload and publishes it (never waiting on the bus).
    fn deliver(
        &mut self,
        payload: &[u8],
        ctx: &mut Context<'_>,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason>;
}

pub(crate) struct Import<T> {
    out: Out<T>,
}

impl<T: Message + DeserializeOwned + Clone> Import<T> {
    pub(crate) fn make(setup: &mut Setup<'_>) -> Box<dyn ImportPort> {
        Box::new(Import::<T> {
            out: setup.output(),
        })
    }
}

impl<T: Message + DeserializeOwned + Clone> ImportPort for Import<T> {
    fn topic(&self) -> &'static str {
        T::TOPIC
    }
    fn topic_id(&self) -> u64 {
        T::TOPIC_ID
    }
    fn fingerprint(&self) -> u64 {
        T::FINGERPRINT
    }

    #[inline]
    fn deliver(
        &mut self,
        payload: &[u8],
        ctx: &mut Context<'_>,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason> {
        let msg: T = decode_payload(payload)?;
        metrics.messages_in.add(1);
        ctx.try_publish(self.out, msg);
        Ok(())
    }
}

/// A topic exported in the ll-udp-pubsub v0.1 format on a socket of its own.
pub(crate) trait CompatExportPort: Send {
    fn endpoint(&mut self) -> &mut UdpEndpoint;
    fn stats(&self) -> &IoStats;
    /// Sends up to `budget` queued messages per ring, one datagram each, to `subscribers`.
    fn pump(
        &mut self,
        batch: &mut SendBatch,
        buf: &mut [u8],
        subscribers: &SubscriberTable<SocketAddr>,
        metrics: &NetMetrics,
        budget: usize,
        failed: &mut Option<std::io::Error>,
    ) -> usize;
}

pub(crate) struct CompatExport<T> {
    inputs: Inputs<T>,
    endpoint: UdpEndpoint,
    logged: bool,
}

impl<T: Message + Serialize> CompatExport<T> {
    pub(crate) fn make(setup: &mut Setup<'_>, endpoint: UdpEndpoint) -> Box<dyn CompatExportPort> {
        Box::new(CompatExport::<T> {
            inputs: setup.inputs(),
            endpoint,
            logged: false,
        })
    }
}

impl<T: Message + Serialize> CompatExportPort for CompatExport<T> {
    fn endpoint(&mut self) -> &mut UdpEndpoint {
        &mut self.endpoint
    }
    fn stats(&self) -> &IoStats {
        self.endpoint.stats()
    }

    fn pump(
        &mut self,
        batch: &mut SendBatch,
        buf: &mut [u8],
        subscribers: &SubscriberTable<SocketAddr>,
        metrics: &NetMetrics,
        budget: usize,
        failed: &mut Option<std::io::Error>,
    ) -> usize {
        let (endpoint, logged) = (&mut self.endpoint, &mut self.logged);
        let subscribed = !subscribers.is_empty();
        self.inputs.poll(budget, |msg| {
            if !subscribed {
                metrics.no_subscriber.add(1);
                return;
            }
            match encode_compat_packet(buf, T::TOPIC_ID, &msg, realtime_ns()) {
                Ok(n) => {
                    metrics.messages_out.add(1);
                    // In compat mode the one topic of the socket has id 0 in the table; the
                    // format has no room for a MAC or a token.
                    fan_out(
                        &buf[..n],
                        subscribers.destinations(0),
                        endpoint,
                        batch,
                        Protect::Plain,
                        metrics,
                        failed,
                    );
                }
                Err(e) => refused(metrics, logged, T::TOPIC, &e),
            }
        })
    }
}

/// A topic imported in the ll-udp-pubsub v0.1 format on a socket of its own.
pub(crate) trait CompatImportPort: Send {
    fn publisher(&self) -> SocketAddr;
    fn endpoint(&mut self) -> &mut UdpEndpoint;
    fn stats(&self) -> &IoStats;
    /// Decodes one datagram and publishes it.
    fn deliver(
        &mut self,
        datagram: &[u8],
        max_datagram: usize,
        ctx: &mut Context<'_>,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason>;
}

pub(crate) struct CompatImport<T> {
    out: Out<T>,
    endpoint: UdpEndpoint,
    publisher: SocketAddr,
}

impl<T: Message + DeserializeOwned + Clone> CompatImport<T> {
    pub(crate) fn make(
        setup: &mut Setup<'_>,
        endpoint: UdpEndpoint,
        publisher: SocketAddr,
    ) -> Box<dyn CompatImportPort> {
        Box::new(CompatImport::<T> {
            out: setup.output(),
            endpoint,
            publisher,
        })
    }
}

impl<T: Message + DeserializeOwned + Clone> CompatImportPort for CompatImport<T> {
    fn publisher(&self) -> SocketAddr {
        self.publisher
    }
    fn endpoint(&mut self) -> &mut UdpEndpoint {
        &mut self.endpoint
    }
    fn stats(&self) -> &IoStats {
        self.endpoint.stats()
    }

    fn deliver(
        &mut self,
        datagram: &[u8],
        max_datagram: usize,
        ctx: &mut Context<'_>,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason> {
        let (msg, _sent_ts): (T, i64) = decode_compat_packet(datagram, max_datagram)?;
        metrics.messages_in.add(1);
        ctx.try_publish(self.out, msg);
        Ok(())
    }
}
