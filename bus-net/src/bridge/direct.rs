//! Direct export: a topic sent from the publishing actor's own thread, skipping the hop
//! through the bridge's ring and thread. The lowest latency the bridge offers.
//!
//! The bridge still owns the topic's control plane: it answers subscriptions, renews and
//! expires subscribers, and sends heartbeats. What it shares with the [`DirectSender`] is the
//! list of subscribers with their subscription tokens (a [`Latest`](llbus::Latest) slot the
//! bridge writes only when the list changes, a new `Arc<[(SocketAddr, u64)]>` each time) and the last sequence number sent (an
//! atomic the sender stores after each send). Sending allocates nothing and takes no lock.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use llbus::{LatestReader, LatestWriter, Message};
use serde::Serialize;

use super::wire::SocketWire;
use crate::endpoint::{protect_and_send, DirectShared};
use crate::{
    realtime_ns, BatchEncoder, DataMeta, EncodeError, FrameMac, IoStats, SendBatch, UdpEndpoint,
    MAC_TAG_LEN, TOKEN_LEN,
};

/// The subscribers of a direct topic, each with its subscription token.
pub(crate) type Destinations = Arc<[(SocketAddr, u64)]>;

/// The bridge's end of a direct topic.
pub(crate) struct DirectPort {
    pub(crate) topic: Arc<str>,
    pub(crate) topic_id: u64,
    pub(crate) fingerprint: u64,
    /// The type's shape, served on request (`None` if it does not encode).
    pub(crate) shape: Option<crate::EncodedShape>,
    pub(crate) shared: Arc<DirectShared>,
    pub(crate) subscribers: LatestWriter<Destinations>,
}

/// Why a direct send did not happen.
#[derive(Debug)]
#[non_exhaustive]
pub enum DirectError {
    /// The message was refused: too large for a datagram, or not encodable.
    Refused(EncodeError),
    /// The socket failed for good (closed, invalid): nothing more can be sent.
    Socket(std::io::Error),
}

impl std::fmt::Display for DirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectError::Refused(e) => write!(f, "message refused: {e}"),
            DirectError::Socket(e) => write!(f, "the direct sender's socket failed: {e}"),
        }
    }
}

impl std::error::Error for DirectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DirectError::Refused(e) => Some(e),
            DirectError::Socket(e) => Some(e),
        }
    }
}

/// Sends one topic from the caller's thread. Made by [`Bridge::direct`](super::Bridge::direct);
/// move it into the publishing actor. `Send`, not `Clone` (it owns the topic's sequence).
pub struct DirectSender<T> {
    endpoint: UdpEndpoint,
    batch: SendBatch,
    buf: Vec<u8>,
    /// Where a datagram is sealed (with a pre-shared key) or put together with its token.
    seal_buf: Vec<u8>,
    session: u64,
    /// The topic's id on the wire (of its name).
    topic_id: u64,
    seq: u64,
    shared: Arc<DirectShared>,
    updates: LatestReader<Destinations>,
    subscribers: Destinations,
    mac: Option<FrameMac>,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T> std::fmt::Debug for DirectSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSender")
            .field("topic", &std::any::type_name::<T>())
            .field("subscribers", &self.subscribers.len())
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl<T: Message + Serialize> DirectSender<T> {
    pub(crate) fn new(
        topic: &llbus::TopicName,
        endpoint: UdpEndpoint,
        max_datagram: usize,
        batch: usize,
        session: u64,
        mac: Option<FrameMac>,
    ) -> (Self, DirectPort) {
        let shared = Arc::new(DirectShared::default());
        let (writer, reader) = llbus::Latest::new();
        let sender = DirectSender {
            endpoint,
            batch: SendBatch::new(batch),
            buf: vec![0; max_datagram],
            seal_buf: vec![0; max_datagram + TOKEN_LEN],
            session,
            topic_id: topic.id(),
            seq: 0,
            shared: Arc::clone(&shared),
            updates: reader,
            subscribers: Arc::from(Vec::new()),
            mac,
            _t: std::marker::PhantomData,
        };
        let port = DirectPort {
            topic: std::sync::Arc::from(topic.as_str()),
            topic_id: topic.id(),
            fingerprint: T::FINGERPRINT,
            shape: crate::EncodedShape::new(&T::schema()).ok(),
            shared,
            subscribers: writer,
        };
        (sender, port)
    }

    /// Encodes `msg` into one datagram and sends it to every current subscriber, now, from this
    /// thread. Returns how many subscribers the kernel took it for (a full send buffer drops
    /// and counts, in [`DirectSender::stats`]). Allocates nothing.
    ///
    /// # Errors
    /// [`DirectError::Refused`] if the message cannot fit in a datagram (or cannot be
    /// encoded): it is refused here, at publish, and nothing is sent.
    /// [`DirectError::Socket`] if the socket failed for good.
    pub fn send(&mut self, msg: &T) -> Result<usize, DirectError> {
        self.refresh();
        if self.subscribers.is_empty() {
            return Ok(0);
        }
        let trailer = if self.mac.is_some() {
            MAC_TAG_LEN
        } else {
            TOKEN_LEN
        };
        let max = self.buf.len();
        let mut enc =
            BatchEncoder::new(&mut self.buf[..max - trailer]).with_token(self.mac.is_none());
        let meta = DataMeta {
            topic_id: self.topic_id,
            fingerprint: T::FINGERPRINT,
            session: self.session,
            seq: self.seq + 1,
            timestamp_ns: realtime_ns(),
        };
        enc.push_data(meta, msg).map_err(|e| {
            // Said in datagram bytes: the trailer (MAC or token) is part of the datagram.
            DirectError::Refused(match e {
                EncodeError::TooLarge { topic, size, .. } => EncodeError::TooLarge {
                    topic,
                    size: size + trailer,
                    max,
                },
                other => other,
            })
        })?;
        self.seq += 1;
        self.shared.last_seq.store(self.seq, Ordering::Release);
        let len = enc.len();
        let frames = self.buf.get(..len).unwrap_or_default();
        let mut failed = None;
        let mut wire = SocketWire {
            socket: &mut self.endpoint,
            batch: &mut self.batch,
            failed: &mut failed,
        };
        let (datagrams, _) = protect_and_send(
            &mut wire,
            self.mac.as_ref(),
            &mut self.seal_buf,
            frames,
            true,
            &self.subscribers,
        );
        match failed {
            Some(e) => Err(DirectError::Socket(e)),
            None => Ok(datagrams),
        }
    }

    /// How many subscribers the topic has now (takes the bridge's latest list).
    pub fn subscribers(&mut self) -> usize {
        self.refresh();
        self.subscribers.len()
    }

    #[inline]
    fn refresh(&mut self) {
        if let Some(update) = self.updates.read() {
            self.subscribers = update;
        }
    }

    /// The socket counters of this sender (datagrams sent, dropped for a full buffer, ...).
    pub fn stats(&self) -> &IoStats {
        self.endpoint.stats()
    }
}
