//! The gateway: exports and imports declared on a bus's builder, started on the running bus
//! with a zenoh session of their own.
//!
//! Declaring adds external handles to the bus (an export is a `DropNewest` subscription named
//! `zenoh-export:<topic>`, an import a publisher named `zenoh-import:<topic>`, each followed by
//! `@<key>` if it was given a key of its own), so that
//! `start()` wires, checks and counts them like any edge. [`GatewayBuilder::start`] opens the
//! zenoh session, redeems the handles, spawns one thread per export and declares one zenoh
//! subscriber per import, whose callback (on zenoh's own threads) publishes into the bus.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use llbus::{
    Backpressure, BusBuilder, Message, Metric, PublishError, Publisher, PublisherKey,
    RecvTimeoutError, RunningBus, Subscription, SubscriptionKey,
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use zenoh::bytes::Encoding;
use zenoh::qos::CongestionControl;
use zenoh::sample::Sample;
use zenoh::{Session, Wait};

use crate::attachment::Attachment;
use crate::errors::{ErrorKind, ErrorTable};
use crate::import::{Verdict, Verdicts};

/// The key prefix of every topic unless [`GatewayBuilder::prefix`] says otherwise: topic `t`
/// goes on key `llbus/t`.
pub const DEFAULT_PREFIX: &str = "llbus";

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

/// How long `Gateway::close` waits for an import's callbacks still running (each only decodes
/// and `try_publish`es, so it waits microseconds unless the machine is starved).
const CALLBACK_WAIT: Duration = Duration::from_secs(5);

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
    key: Option<String>,
    capacity: usize,
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

/// How one topic is imported: [`Import::new`] then its setters.
#[derive(Clone, Debug, Default)]
pub struct Import {
    key: Option<String>,
}

impl Import {
    /// From key `<prefix>/<topic>`.
    pub fn new() -> Self {
        Import::default()
    }

    /// The key expression to subscribe to, instead of `<prefix>/<topic>`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }
}

/// Why a gateway did not start.
#[derive(Debug)]
pub enum GatewayError {
    /// A handle of the gateway's was declared on another bus.
    Handle(llbus::HandleError),
    /// Zenoh refused: the session, a key expression, a publisher or a subscriber.
    Zenoh(zenoh::Error),
    /// An export's thread could not be spawned.
    Spawn(std::io::Error),
    /// This topic would be both exported and imported on the bus (by this gateway, or by it
    /// and another gateway's handle there): the import would feed the local topic, which the
    /// export would put again, without end.
    Echo(&'static str),
    /// Two exports (or two imports) of this topic resolve to one key: every message would be
    /// put (or published) twice.
    Duplicate {
        /// The topic.
        topic: &'static str,
        /// The key both resolve to.
        key: String,
        /// Exports (else imports).
        export: bool,
    },
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayError::Handle(e) => write!(
                f,
                "the gateway was declared on another bus ({e}): start it on the bus it was declared on"
            ),
            GatewayError::Zenoh(e) => write!(f, "zenoh refused the gateway: {e}"),
            GatewayError::Spawn(e) => write!(f, "cannot spawn a gateway thread: {e}"),
            GatewayError::Echo(topic) => write!(
                f,
                "topic '{topic}' would be both exported and imported on this bus (by this \
                 gateway, or by it and another gateway's handle): the import would feed the \
                 local topic, which the export would put again, without end; export it from one \
                 process and import it in another"
            ),
            GatewayError::Duplicate { topic, key, export } => {
                let what = if *export { "exports" } else { "imports" };
                write!(
                    f,
                    "the gateway {what} topic '{topic}' twice on key '{key}' (one on the default \
                     key, one given it?): each message would go twice; declare it once per key"
                )
            }
        }
    }
}

impl std::error::Error for GatewayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GatewayError::Handle(e) => Some(e),
            GatewayError::Zenoh(e) => Some(&**e),
            GatewayError::Spawn(e) => Some(e),
            GatewayError::Echo(_) | GatewayError::Duplicate { .. } => None,
        }
    }
}

impl From<zenoh::Error> for GatewayError {
    fn from(e: zenoh::Error) -> Self {
        GatewayError::Zenoh(e)
    }
}

/// The figures of a gateway, summed over its exports and imports (each is also a named metric
/// of its handle in the bus's report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Samples put by the exports.
    pub put: u64,
    /// Messages an export took but zenoh refused to put (or that did not encode).
    pub put_failed: u64,
    /// Samples the imports received: `published + refused + malformed + stopped`.
    pub received: u64,
    /// Samples the imports published into the bus (what the bus then counts on its edges).
    pub published: u64,
    /// Samples of another topic or fingerprint.
    pub refused: u64,
    /// Samples that were not the gateway's or did not decode.
    pub malformed: u64,
    /// Samples missing from a stream's sequence numbers.
    pub lost: u64,
    /// Samples that came after an import's bus began to stop.
    pub stopped: u64,
    /// Samples older than one of their stream already received (delivered anyway).
    pub late: u64,
}

/// Exports and imports declared on a bus's builder, to start once the bus runs.
#[derive(Default)]
pub struct GatewayBuilder {
    prefix: Option<String>,
    pending: Vec<Box<dyn Pending>>,
}

impl std::fmt::Debug for GatewayBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayBuilder")
            .field("prefix", &self.prefix)
            .field("topics", &self.pending.len())
            .finish()
    }
}

/// A running gateway: its zenoh session, export threads and import subscribers.
pub struct Gateway {
    session: Session,
    exports: Vec<RunningExport>,
    imports: Vec<RunningImport>,
    queryables: Vec<zenoh::query::Queryable<()>>,
    closing: Arc<AtomicBool>,
    errors: Arc<Mutex<ErrorTable>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("exports", &self.exports.len())
            .field("imports", &self.imports.len())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// An empty gateway builder, with the default key prefix ([`DEFAULT_PREFIX`]).
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder::default()
    }

    /// The gateway's figures so far.
    pub fn counts(&self) -> Counts {
        // Saturating: the figures count what the network sent, and a sum must not panic or
        // wrap whatever a peer sends.
        let mut c = Counts::default();
        for e in &self.exports {
            c.put = c.put.saturating_add(e.metrics.put.get());
            c.put_failed = c.put_failed.saturating_add(e.metrics.put_failed.get());
        }
        for i in &self.imports {
            let m = &i.metrics;
            c.published = c.published.saturating_add(m.published.get());
            c.refused = c.refused.saturating_add(m.refused.get());
            c.malformed = c.malformed.saturating_add(m.malformed.get());
            c.lost = c.lost.saturating_add(m.lost.get());
            c.stopped = c.stopped.saturating_add(m.stopped.get());
            c.late = c.late.saturating_add(m.late.get());
        }
        // `received` as the sum of its outcomes, so that these figures balance even while
        // samples arrive.
        c.received = c
            .published
            .saturating_add(c.refused)
            .saturating_add(c.malformed)
            .saturating_add(c.stopped);
        c
    }

    /// The errors reported so far, oldest first: one line per topic and kind of error (a
    /// sample of another topic, of another fingerprint, a malformed sample, a failed put), with
    /// the first message, and if it came again, how many times and the latest message. At most
    /// (topics of the gateway) x 4 lines, so that a flood of one kind hides no other.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().lines()
    }

    /// Waits until every export's key has a matching zenoh subscriber (through any route), or
    /// `timeout` passes; true if they all have. Zenoh sends a put to the subscribers it knows
    /// of when it is made, so a publisher that must not start before its readers (a test, a
    /// benchmark) waits here first.
    pub fn wait_matched(&self, timeout: Duration) -> bool {
        // A timeout past what an `Instant` can hold waits without a deadline.
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut probes = Vec::new();
        for e in &self.exports {
            match self.session.declare_publisher(e.key.clone()).wait() {
                Ok(p) => probes.push(p),
                Err(e) => {
                    log::warn!("cannot probe zenoh for subscribers: {e}");
                    return false;
                }
            }
        }
        loop {
            let matched = probes.iter().all(|p| {
                p.matching_status()
                    .wait()
                    .map(|s| s.matching())
                    .unwrap_or(false)
            });
            if matched {
                return true;
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The zenoh session, to declare more of zenoh's own (a liveliness token, a queryable).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Closes the gateway: the imports stop taking samples (a sample that reaches one from here
    /// on is not counted, and callbacks still running are waited for, so the figures returned
    /// are final and balance), each export puts what its
    /// subscription still holds (everything, once the bus has exited; if it still runs, what
    /// is queued now, for at most a second, the rest then counted `lost` on its edges by the
    /// bus), and the zenoh session closes. Returns the final figures. It returns while
    /// publishers keep sending.
    pub fn close(self) -> Counts {
        self.closing.store(true, Ordering::Release);
        let Gateway {
            session,
            mut exports,
            imports,
            queryables,
            closing,
            errors,
        } = self;
        for i in &imports {
            i.subscriber_closed();
        }
        for e in &mut exports {
            if let Some(t) = e.thread.take() {
                if t.join().is_err() {
                    log::error!("a zenoh gateway export thread panicked");
                }
            }
        }
        let closed = Gateway {
            session,
            exports,
            imports,
            queryables,
            closing,
            errors,
        };
        let counts = closed.counts();
        if let Err(e) = closed.session.close().wait() {
            log::warn!("zenoh session did not close cleanly: {e}");
        }
        counts
    }
}

impl GatewayBuilder {
    /// The key prefix: topic `t` goes on `<prefix>/t`.
    pub fn prefix(&mut self, prefix: &str) -> &mut Self {
        self.prefix = Some(prefix.trim_end_matches('/').to_owned());
        self
    }

    /// Exports topic `T` from `bus`: declares a `DropNewest` subscription
    /// `zenoh-export:<topic>`, or `zenoh-export:<topic>@<key>` with an [`Export::key`] (so one
    /// topic can be exported on several keys, in bincode and in JSON), which `start()` refuses
    /// if nothing publishes `T`.
    pub fn export<T>(&mut self, bus: &mut BusBuilder, export: Export) -> &mut Self
    where
        T: Message + Serialize,
    {
        let name = handle_name("zenoh-export", T::TOPIC, export.key.as_deref());
        let key = bus.subscription_with::<T>(&name, Backpressure::DropNewest, export.capacity);
        self.pending.push(Box::new(PendingExport { key, export }));
        self
    }

    /// Imports topic `T` into `bus`: declares a publisher `zenoh-import:<topic>`, or
    /// `zenoh-import:<topic>@<key>` with an [`Import::key`].
    pub fn import<T>(&mut self, bus: &mut BusBuilder, import: Import) -> &mut Self
    where
        T: Message + Clone + DeserializeOwned,
    {
        let name = handle_name("zenoh-import", T::TOPIC, import.key.as_deref());
        let key = bus.publisher::<T>(&name);
        self.pending.push(Box::new(PendingImport { key, import }));
        self
    }

    /// Opens a zenoh session with `config` and starts every export and import on `bus` (the
    /// bus the builder's handles were declared on).
    ///
    /// # Errors
    /// [`GatewayError`] if zenoh refuses the session or a declaration, a handle belongs to
    /// another bus, or a thread cannot be spawned; what was started is closed again.
    /// [`GatewayError::Echo`], before zenoh is opened, if a topic is both exported and
    /// imported; [`GatewayError::Duplicate`] if two exports (or imports) of a topic resolve to
    /// one key.
    pub fn start(
        self,
        bus: &mut RunningBus,
        config: zenoh::Config,
    ) -> Result<Gateway, GatewayError> {
        // The bus's handles are this gateway's and any other's: one gateway exporting a topic
        // that another imports loops as surely as one gateway doing both.
        let on_bus: Vec<String> = bus.report().actors.into_iter().map(|a| a.name).collect();
        let declared = |kind: &str, topic: &str| {
            on_bus.iter().any(|n| {
                n.strip_prefix(kind)
                    .and_then(|rest| rest.strip_prefix(topic))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'))
            })
        };
        for p in &self.pending {
            let (topic, export) = p.topic();
            let other = if export {
                "zenoh-import:"
            } else {
                "zenoh-export:"
            };
            if declared(other, topic) {
                return Err(GatewayError::Echo(topic));
            }
        }
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        for (i, p) in self.pending.iter().enumerate() {
            let (topic, export) = p.topic();
            let key = key_of(p.given_key(), &prefix, topic);
            let twice = self.pending.get(..i).into_iter().flatten().any(|q| {
                q.topic() == (topic, export) && key_of(q.given_key(), &prefix, topic) == key
            });
            if twice {
                return Err(GatewayError::Duplicate { topic, key, export });
            }
        }
        let session = zenoh::open(config).wait()?;
        let mut gateway = Gateway {
            session,
            exports: Vec::new(),
            imports: Vec::new(),
            queryables: Vec::new(),
            closing: Arc::new(AtomicBool::new(false)),
            errors: Arc::new(Mutex::new(ErrorTable::default())),
        };
        for pending in self.pending {
            if let Err(e) = pending.start(bus, &prefix, &mut gateway) {
                gateway.close();
                return Err(e);
            }
        }
        Ok(gateway)
    }
}

/// An export or import declared, waiting for the bus and the session.
trait Pending: Send {
    /// The topic, and whether it is an export.
    fn topic(&self) -> (&'static str, bool);

    /// The key it was given, if any.
    fn given_key(&self) -> Option<&str>;

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError>;
}

struct PendingExport<T> {
    key: SubscriptionKey<T>,
    export: Export,
}

struct PendingImport<T> {
    key: PublisherKey<T>,
    import: Import,
}

struct RunningExport {
    key: String,
    metrics: ExportMetrics,
    thread: Option<JoinHandle<()>>,
}

struct RunningImport {
    metrics: ImportMetrics,
    subscriber: Mutex<Option<zenoh::pubsub::Subscriber<()>>>,
    gate: Arc<CallbackGate>,
}

impl RunningImport {
    /// Stops taking samples: from here on a callback that starts counts nothing; undeclares the
    /// zenoh subscriber (which does not wait for a callback already running), then waits for
    /// the callbacks still running, for at most [`CALLBACK_WAIT`], so that the figures read
    /// after this are final.
    fn subscriber_closed(&self) {
        self.gate.closed.store(true, Ordering::SeqCst);
        if let Some(s) = self.subscriber.lock().take() {
            if let Err(e) = s.undeclare().wait() {
                log::warn!("zenoh subscriber did not undeclare cleanly: {e}");
            }
        }
        let deadline = std::time::Instant::now() + CALLBACK_WAIT;
        while self.gate.in_flight.load(Ordering::SeqCst) > 0 {
            if std::time::Instant::now() >= deadline {
                log::warn!(
                    "a zenoh import callback still runs after {CALLBACK_WAIT:?}: the gateway's \
                     figures may still change"
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Which of an import's callbacks may count, and how many are running: zenoh's undeclare does
/// not wait for a callback in progress, so close waits here.
#[derive(Default)]
struct CallbackGate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
}

impl CallbackGate {
    /// Runs `f` unless the import is closed. The count goes up before the flag is read, and the
    /// close sets the flag before it reads the count (both sequentially consistent): a
    /// callback either sees the flag, or is waited for.
    fn run(&self, f: impl FnOnce()) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if !self.closed.load(Ordering::SeqCst) {
            f();
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct ExportMetrics {
    put: Metric,
    put_failed: Metric,
}

#[derive(Clone)]
struct ImportMetrics {
    received: Metric,
    published: Metric,
    refused: Metric,
    malformed: Metric,
    lost: Metric,
    stopped: Metric,
    late: Metric,
}

/// The name of an export's or import's handle: `<kind>:<topic>`, and `@<key>` if a key was
/// given, so that one topic can go on several keys.
fn handle_name(kind: &str, topic: &str, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("{kind}:{topic}@{k}"),
        None => format!("{kind}:{topic}"),
    }
}

/// The key of `topic` under `prefix`, unless one was given.
fn key_of(given: Option<&str>, prefix: &str, topic: &str) -> String {
    match given {
        Some(k) => k.to_owned(),
        None if prefix.is_empty() => topic.to_owned(),
        None => format!("{prefix}/{topic}"),
    }
}

/// The zenoh encoding of `encoding`'s samples of `topic`.
fn zenoh_encoding(encoding: PayloadEncoding, topic: &str) -> Encoding {
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
    fn topic(&self) -> (&'static str, bool) {
        (T::TOPIC, true)
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
        let key = key_of(self.export.key.as_deref(), prefix, T::TOPIC);
        let encoding = zenoh_encoding(self.export.encoding, T::TOPIC);
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
            .name(format!("llbus-zenoh-{}", T::TOPIC))
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
                self.failed(format!("cannot encode a message of '{}': {e}", T::TOPIC));
                return;
            }
        };
        let attachment = Attachment {
            topic_id: T::TOPIC_ID,
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
            Err(e) => self.failed(format!("zenoh refused a put of '{}': {e}", T::TOPIC)),
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
        report(&self.errors, T::TOPIC, ErrorKind::PutFailed, error);
    }
}

impl<T: Message + Clone + DeserializeOwned> Pending for PendingImport<T> {
    fn topic(&self) -> (&'static str, bool) {
        (T::TOPIC, false)
    }

    fn given_key(&self) -> Option<&str> {
        self.import.key.as_deref()
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError> {
        let publisher = bus.publisher(self.key).map_err(GatewayError::Handle)?;
        let key = key_of(self.import.key.as_deref(), prefix, T::TOPIC);
        let metrics = ImportMetrics {
            received: publisher.metric("zenoh.received"),
            published: publisher.metric("zenoh.published"),
            refused: publisher.metric("zenoh.refused"),
            malformed: publisher.metric("zenoh.malformed"),
            lost: publisher.metric("zenoh.lost"),
            stopped: publisher.metric("zenoh.stopped"),
            late: publisher.metric("zenoh.late"),
        };
        let state = Mutex::new(ImportRun {
            publisher,
            verdicts: Verdicts::new(T::TOPIC, T::TOPIC_ID, T::FINGERPRINT, &key),
            bincode: zenoh_encoding(PayloadEncoding::Bincode, T::TOPIC),
            json: zenoh_encoding(PayloadEncoding::Json, T::TOPIC),
            metrics: metrics.clone(),
            errors: Arc::clone(&gateway.errors),
            received: 0,
        });
        let gate = Arc::new(CallbackGate::default());
        let subscriber = {
            let gate = Arc::clone(&gate);
            gateway
                .session
                .declare_subscriber(key)
                .callback(move |sample| gate.run(|| state.lock().take(&sample)))
                .wait()?
        };
        gateway.imports.push(RunningImport {
            metrics,
            subscriber: Mutex::new(Some(subscriber)),
            gate,
        });
        Ok(())
    }
}

/// One import's state, behind the lock its zenoh callback takes (never held while waiting:
/// `try_publish` does not wait).
struct ImportRun<T> {
    publisher: Publisher<T>,
    verdicts: Verdicts,
    bincode: Encoding,
    json: Encoding,
    metrics: ImportMetrics,
    errors: Arc<Mutex<ErrorTable>>,
    /// Samples taken so far, whose outcome is counted: what `zenoh.received` shows.
    received: u64,
}

impl<T: Message + Clone + DeserializeOwned> ImportRun<T> {
    /// Takes one sample, counting its outcome first and `zenoh.received` after it, with a
    /// release store: a report reads `zenoh.received` before the outcomes (the order they were
    /// registered in), so in every live snapshot `received` never runs ahead of the outcomes.
    fn take(&mut self, sample: &Sample) {
        self.decide(sample);
        self.received = self.received.saturating_add(1);
        self.metrics.received.set(self.received);
    }

    /// Counts one sample's outcome: published, refused, malformed or stopped.
    fn decide(&mut self, sample: &Sample) {
        let attachment = sample.attachment().map(|a| a.to_bytes());
        match self.verdicts.check(attachment.as_deref()) {
            Verdict::Accept { lost, late } => {
                self.metrics.lost.add(lost);
                if late {
                    self.metrics.late.add(1);
                }
            }
            Verdict::Refused { error, other_topic } => {
                self.metrics.refused.add(1);
                if let Some(e) = error {
                    let kind = if other_topic {
                        ErrorKind::OtherTopic
                    } else {
                        ErrorKind::Fingerprint
                    };
                    report(&self.errors, T::TOPIC, kind, e);
                }
                return;
            }
            Verdict::Malformed => {
                self.malformed("a sample without the gateway's attachment");
                return;
            }
        }
        let payload: Cow<'_, [u8]> = sample.payload().to_bytes();
        let decoded = if sample.encoding() == &self.bincode {
            llbus::decode_bounded::<T>(&payload)
                .map(|(m, _)| m)
                .map_err(|e| e.to_string())
        } else if sample.encoding() == &self.json {
            serde_json::from_slice::<T>(&payload).map_err(|e| e.to_string())
        } else {
            Err(format!("unknown encoding {}", sample.encoding()))
        };
        match decoded {
            Ok(msg) => match self.publisher.try_publish(msg) {
                Ok(()) => self.metrics.published.add(1),
                Err(PublishError::Stopped(_)) => self.metrics.stopped.add(1),
            },
            Err(e) => self.malformed(&e),
        }
    }

    fn malformed(&mut self, why: &str) {
        self.metrics.malformed.add(1);
        report(
            &self.errors,
            T::TOPIC,
            ErrorKind::Malformed,
            format!(
                "zenoh gateway dropped a malformed sample of topic '{}': {why}",
                T::TOPIC
            ),
        );
    }
}

/// Keeps `error` in the gateway's table, and logs it if it is the first of its topic and kind
/// (the rest are counted there, the latest kept): a flood of refused streams or malformed
/// samples is one log line.
fn report(errors: &Mutex<ErrorTable>, topic: &'static str, kind: ErrorKind, error: String) {
    if let Some(first) = errors.lock().record(topic, kind, error) {
        log::error!("{first} (further errors of this kind are counted in Gateway::errors)");
    }
}
