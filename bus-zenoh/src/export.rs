//! Exports: a local topic put on a zenoh key by a thread of the gateway's own.
//!
//! An export is an external `DropNewest` subscription of the bus: a publisher never waits for
//! zenoh, and what the export's thread cannot take in time is counted `dropped` on that edge by
//! the bus. The thread takes each message, encodes it (bincode or JSON, [`PayloadEncoding`]),
//! and puts it with the gateway's attachment ([`Attachment`]: topic id, fingerprint, a random
//! stream id per run, the sequence number of the put, the send time); a message that does not
//! encode or that zenoh refuses is counted `zenoh.put_failed` and numbered nothing, so it
//! leaves no gap. It runs until the subscription closes (the bus has exited and its rings are
//! empty), or the gateway closes: then it puts what is queued, for at most [`CLOSE_DRAIN`].
//! Each export also answers queries for its topic's JSON Schema on `<key>/@schema`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use llbus::{
    Message, Metric, RecvTimeoutError, RunningBus, Subscription, SubscriptionKey, Topic, TopicName,
};
use parking_lot::Mutex;
use serde::Serialize;
use zenoh::bytes::Encoding;
use zenoh::qos::CongestionControl;
use zenoh::Wait;

use crate::attachment::Attachment;
use crate::errors::{ErrorKind, ErrorTable};
use crate::gateway::{key_of, report, Gateway, GatewayError, Pending};

/// The suffix of the key on which an export serves its topic's JSON Schema (a queryable):
/// `llbus/t/@schema`. A verbatim chunk (`@`), so that no wildcard subscription matches it.
pub const SCHEMA_SUFFIX: &str = "@schema";

/// The zenoh encoding of a bincode payload (bincode 1 layout, llbus's own); the topic name is
/// the encoding's schema: `application/x-llbus-bincode;md.quote`.
pub const BINCODE_ENCODING: &str = "application/x-llbus-bincode";

/// How long an export thread waits for a message before it looks whether it should leave.
const CHECK_EVERY: Duration = Duration::from_millis(20);

/// How long a closing export keeps putting what its subscription holds: what is left then is
/// counted lost on the edges by the bus when the subscription is dropped.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// The payload encoding of an export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PayloadEncoding {
    /// llbus's bincode (what the UDP bridge carries): compact, for llbus on both ends.
    #[default]
    Bincode,
    /// `serde_json` of the message, for zenoh clients in any language; the topic's JSON Schema
    /// is served on `<key>/@schema`. JSON has no NaN or infinity: such a float is written
    /// `null`, which an llbus import counts malformed, so use bincode between llbus processes.
    Json,
}

impl std::str::FromStr for PayloadEncoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bincode" => Ok(PayloadEncoding::Bincode),
            "json" => Ok(PayloadEncoding::Json),
            other => Err(format!(
                "unknown zenoh encoding '{other}': use 'bincode' or 'json'"
            )),
        }
    }
}

/// How one topic is exported: [`Export::new`] then its setters.
#[derive(Clone, Debug)]
pub struct Export {
    encoding: PayloadEncoding,
    pub(crate) key: Option<String>,
    pub(crate) capacity: usize,
    congestion: CongestionControl,
    express: bool,
}

impl Default for Export {
    fn default() -> Self {
        Export::new()
    }
}

impl Export {
    /// Bincode on key `<prefix>/<topic>`, a ring of 1024 messages into the gateway, zenoh's
    /// `Block` congestion control (a slow zenoh link makes the gateway's ring fill, where the
    /// bus counts what it drops, instead of zenoh dropping unseen).
    pub fn new() -> Self {
        Export {
            encoding: PayloadEncoding::Bincode,
            key: None,
            capacity: 1024,
            congestion: CongestionControl::Block,
            express: false,
        }
    }

    /// The payload encoding.
    pub fn encoding(mut self, encoding: PayloadEncoding) -> Self {
        self.encoding = encoding;
        self
    }

    /// The key expression to put on, instead of `<prefix>/<topic>`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The capacity of the ring from each publisher into the gateway.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Zenoh's congestion control for the puts.
    pub fn congestion_control(mut self, congestion: CongestionControl) -> Self {
        self.congestion = congestion;
        self
    }

    /// Zenoh's express flag: each put leaves at once instead of waiting to be batched (lower
    /// latency, lower throughput).
    pub fn express(mut self, express: bool) -> Self {
        self.express = express;
        self
    }
}

pub(crate) struct PendingExport<T> {
    pub(crate) key: SubscriptionKey<T>,
    pub(crate) export: Export,
    /// The topic as declared; it runs under `RunningBus::topic` of it.
    pub(crate) topic: Topic<T>,
}

pub(crate) struct RunningExport {
    pub(crate) key: String,
    pub(crate) metrics: ExportMetrics,
    pub(crate) thread: Option<JoinHandle<()>>,
}

#[derive(Clone)]
pub(crate) struct ExportMetrics {
    pub(crate) put: Metric,
    pub(crate) put_failed: Metric,
}

/// The zenoh encoding of `encoding`'s samples of `topic`.
pub(crate) fn zenoh_encoding(encoding: PayloadEncoding, topic: &str) -> Encoding {
    match encoding {
        PayloadEncoding::Bincode => Encoding::from(BINCODE_ENCODING).with_schema(topic),
        PayloadEncoding::Json => Encoding::APPLICATION_JSON.with_schema(topic),
    }
}

/// A random 64-bit stream id: the process id, the time and a counter, mixed (no cryptographic
/// need: it only has to differ between an export's runs).
fn stream_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::now_ns());
    h.write_u32(std::process::id());
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

impl<T: Message + Serialize> Pending for PendingExport<T> {
    fn topic(&self) -> (&TopicName, bool) {
        (self.topic.name(), true)
    }

    fn given_key(&self) -> Option<&str> {
        self.export.key.as_deref()
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError> {
        let sub = bus.subscription(self.key).map_err(GatewayError::Handle)?;
        // Resolved once, here: the thread puts the running name's id and never looks it up.
        let topic = bus.topic(&self.topic).name().clone();
        let key = key_of(self.export.key.as_deref(), prefix, topic.as_str());
        let encoding = zenoh_encoding(self.export.encoding, topic.as_str());
        let publisher = gateway
            .session
            .declare_publisher(key.clone())
            .encoding(encoding)
            .congestion_control(self.export.congestion)
            .express(self.export.express)
            .wait()?;
        let schema = llbus::schema::json_schema(&T::schema()).to_string();
        let queryable = gateway
            .session
            .declare_queryable(format!("{key}/{SCHEMA_SUFFIX}"))
            .callback(move |query| {
                let reply = query
                    .reply(query.key_expr().clone(), schema.clone())
                    .encoding(Encoding::APPLICATION_JSON.with_schema("jsonschema"))
                    .wait();
                if let Err(e) = reply {
                    log::warn!("cannot answer a schema query: {e}");
                }
            })
            .wait()?;
        gateway.queryables.push(queryable);
        let metrics = ExportMetrics {
            put: sub.metric("zenoh.put"),
            put_failed: sub.metric("zenoh.put_failed"),
        };
        let run = ExportRun {
            topic_id: topic.id(),
            topic: topic.clone(),
            sub,
            publisher,
            encoding: self.export.encoding,
            stream: stream_id(),
            sequence: 0,
            metrics: metrics.clone(),
            closing: Arc::clone(&gateway.closing),
            last_len: 64,
            errors: Arc::clone(&gateway.errors),
        };
        let thread = std::thread::Builder::new()
            .name(format!("llbus-zenoh-{topic}"))
            .spawn(move || run.run())
            .map_err(GatewayError::Spawn)?;
        gateway.exports.push(RunningExport {
            key,
            metrics,
            thread: Some(thread),
        });
        Ok(())
    }
}

/// One export's thread: takes each message from the subscription and puts it.
struct ExportRun<T> {
    /// The topic's running name (for errors) and its id (in every attachment).
    topic: TopicName,
    topic_id: u64,
    sub: Subscription<T>,
    publisher: zenoh::pubsub::Publisher<'static>,
    encoding: PayloadEncoding,
    stream: u64,
    /// The next sample's sequence number: samples put so far.
    sequence: u64,
    metrics: ExportMetrics,
    closing: Arc<AtomicBool>,
    /// The last payload's length, to size the next one's buffer (zenoh takes each payload's
    /// buffer: one allocation per put, on this thread, off the bus's).
    last_len: usize,
    errors: Arc<Mutex<ErrorTable>>,
}

impl<T: Message + Serialize> ExportRun<T> {
    /// Until the subscription closes (the bus has exited and its rings are empty), or the
    /// gateway closes: then what is queued is put first, for at most [`CLOSE_DRAIN`]. The
    /// closing request is looked at on every turn, not only when the ring is idle, so a
    /// publisher that keeps sending cannot hold a close up.
    fn run(mut self) {
        loop {
            if self.closing.load(Ordering::Acquire) {
                self.drain();
                break;
            }
            match self.sub.recv_timeout(CHECK_EVERY) {
                Ok(msg) => self.put(&msg),
                Err(RecvTimeoutError::Closed) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        // What a still-running bus publishes from here on is counted lost on the edges when
        // the subscription is dropped, here.
    }

    /// Puts what the subscription holds until it is empty or [`CLOSE_DRAIN`] has passed (a
    /// publisher faster than zenoh would otherwise keep it busy for ever).
    fn drain(&mut self) {
        let deadline = std::time::Instant::now() + CLOSE_DRAIN;
        while let Ok(msg) = self.sub.try_recv() {
            self.put(&msg);
            if std::time::Instant::now() >= deadline {
                break;
            }
        }
    }

    fn put(&mut self, msg: &T) {
        let payload = match self.encode(msg) {
            Ok(p) => p,
            Err(e) => {
                self.failed(format!("cannot encode a message of '{}': {e}", self.topic));
                return;
            }
        };
        let attachment = Attachment {
            topic_id: self.topic_id,
            fingerprint: T::FINGERPRINT,
            stream: self.stream,
            sequence: self.sequence,
            sent_ns: crate::now_ns(),
        };
        match self
            .publisher
            .put(payload)
            .attachment(attachment.encode().to_vec())
            .wait()
        {
            Ok(()) => {
                self.sequence += 1;
                self.metrics.put.add(1);
            }
            Err(e) => {
                let error = format!("zenoh refused a put of '{}': {e}", self.topic);
                self.failed(error);
            }
        }
    }

    fn encode(&mut self, msg: &T) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(self.last_len);
        match self.encoding {
            PayloadEncoding::Bincode => {
                bincode::serde::encode_into_std_write(msg, &mut out, bincode::config::legacy())
                    .map_err(|e| e.to_string())?;
            }
            PayloadEncoding::Json => {
                serde_json::to_writer(&mut out, msg).map_err(|e| e.to_string())?;
            }
        }
        self.last_len = out.len().max(16);
        Ok(out)
    }

    fn failed(&mut self, error: String) {
        self.metrics.put_failed.add(1);
        report(
            &self.errors,
            self.topic.as_str(),
            ErrorKind::PutFailed,
            error,
        );
    }
}
