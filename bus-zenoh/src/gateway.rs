//! The gateway handle and its builder: exports and imports declared on a bus's builder,
//! started on the running bus with a zenoh session of their own, closed after the bus.
//!
//! Declaring adds external handles to the bus (an export is a `DropNewest` subscription named
//! `zenoh-export:<topic>`, an import a publisher named `zenoh-import:<topic>`, each followed by
//! `@<key>` if it was given a key of its own), so that `start()` wires, checks and counts them
//! like any edge. [`GatewayBuilder::start`] refuses a topic both exported and imported on the
//! bus (an echo) and two exports or imports of a topic on one key, before zenoh is opened; then
//! it opens the zenoh session and starts each declaration: an export's thread
//! (`crate::export`), an import's zenoh subscriber (`crate::import`). [`Gateway::close`] stops
//! the imports, lets each export put what its subscription holds, and returns the final
//! figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Backpressure, BusBuilder, Message, RunningBus, Service, Topic, TopicName};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use zenoh::{Session, Wait};

use crate::errors::{ErrorKind, ErrorTable};
use crate::export::{Export, PendingExport, RunningExport};
use crate::import::{Import, PendingImport, RunningImport};
use crate::service::{
    PendingServiceExport, PendingServiceImport, RunningService, ServiceExport, ServiceImport,
};

/// The key prefix of every topic unless [`GatewayBuilder::prefix`] says otherwise: topic `t`
/// goes on key `llbus/t`.
pub const DEFAULT_PREFIX: &str = "llbus";

/// Why a gateway did not start.
#[derive(Debug)]
pub enum GatewayError {
    /// A handle of the gateway's was declared on another bus.
    Handle(llbus::HandleError),
    /// Zenoh refused: the session, a key expression, a publisher or a subscriber.
    Zenoh(zenoh::Error),
    /// An export's thread could not be spawned.
    Spawn(std::io::Error),
    /// This topic (by the name it runs under on the bus) would be both exported and imported
    /// on the bus (by this gateway, or by it and another gateway's handle there): the import
    /// would feed the local topic, which the export would put again, without end.
    Echo(String),
    /// Two exports (or two imports) of this topic (by the name it runs under) resolve to one
    /// key: every message would be put (or published) twice.
    Duplicate {
        /// The topic.
        topic: String,
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
    /// Queries the exported services took: `answered + failed` once none is in flight.
    pub queries: u64,
    /// Queries answered with the service's reply.
    pub answered: u64,
    /// Queries answered with an error (the call's, or the gateway's: refused, malformed,
    /// busy).
    pub failed: u64,
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
    pub(crate) session: Session,
    pub(crate) exports: Vec<RunningExport>,
    pub(crate) imports: Vec<RunningImport>,
    pub(crate) queryables: Vec<zenoh::query::Queryable<()>>,
    /// Exported services' threads and figures.
    pub(crate) services: Vec<RunningService>,
    /// Imported services' threads (their figures are their actors').
    pub(crate) getters: Vec<std::thread::JoinHandle<()>>,
    pub(crate) closing: Arc<AtomicBool>,
    pub(crate) errors: Arc<Mutex<ErrorTable>>,
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
        for s in &self.services {
            c.queries = c.queries.saturating_add(s.metrics.queries.get());
            c.answered = c.answered.saturating_add(s.metrics.answered.get());
            c.failed = c.failed.saturating_add(s.metrics.failed.get());
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
            mut services,
            getters,
            closing,
            errors,
        } = self;
        for i in &imports {
            i.subscriber_closed();
        }
        // The queryables go first, so that no query reaches an exported service's queue once
        // its thread has answered what was queued.
        drop(queryables);
        for thread in services
            .iter_mut()
            .filter_map(|s| s.thread.take())
            .chain(getters)
        {
            if thread.join().is_err() {
                log::error!("a zenoh gateway service thread panicked");
            }
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
            queryables: Vec::new(),
            services,
            getters: Vec::new(),
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

    /// Exports `T`'s default topic from `bus`: [`export_on`](Self::export_on) of
    /// [`Topic::of`].
    pub fn export<T>(&mut self, bus: &mut BusBuilder, export: Export) -> &mut Self
    where
        T: Message + Serialize,
    {
        self.export_on(bus, &Topic::<T>::of(), export)
    }

    /// Exports `topic` from `bus`: declares a `DropNewest` subscription to it named
    /// `zenoh-export:<name>`, or `zenoh-export:<name>@<key>` with an [`Export::key`] (so one
    /// topic can be exported on several keys, in bincode and in JSON), which `start()` refuses
    /// if nothing publishes the topic. Its samples go on key `<prefix>/<running name>` (the
    /// name the topic runs under once the bus's `remap`s apply), carrying that name's id.
    /// Several topics of one type are several exports, one key each.
    pub fn export_on<T>(
        &mut self,
        bus: &mut BusBuilder,
        topic: &Topic<T>,
        export: Export,
    ) -> &mut Self
    where
        T: Message + Serialize,
    {
        let name = handle_name("zenoh-export", topic.name(), export.key.as_deref());
        let key = bus.subscription_on(topic, &name, Backpressure::DropNewest, export.capacity);
        self.pending.push(Box::new(PendingExport {
            key,
            export,
            topic: topic.clone(),
        }));
        self
    }

    /// Imports `T`'s default topic into `bus`: [`import_on`](Self::import_on) of
    /// [`Topic::of`].
    pub fn import<T>(&mut self, bus: &mut BusBuilder, import: Import) -> &mut Self
    where
        T: Message + Clone + DeserializeOwned,
    {
        self.import_on(bus, &Topic::<T>::of(), import)
    }

    /// Imports `topic` into `bus`: declares a publisher on it named `zenoh-import:<name>`, or
    /// `zenoh-import:<name>@<key>` with an [`Import::key`]. It takes the samples of key
    /// `<prefix>/<running name>` whose attachment carries the running name's id and `T`'s
    /// fingerprint; any other is refused and counted.
    pub fn import_on<T>(
        &mut self,
        bus: &mut BusBuilder,
        topic: &Topic<T>,
        import: Import,
    ) -> &mut Self
    where
        T: Message + Clone + DeserializeOwned,
    {
        let name = handle_name("zenoh-import", topic.name(), import.key.as_deref());
        let key = bus.publisher_on(topic, &name);
        self.pending.push(Box::new(PendingImport {
            key,
            import,
            topic: topic.clone(),
        }));
        self
    }

    /// Answers zenoh queries of `Req`'s default service: [`export_service_on`](Self::export_service_on)
    /// of [`Service::of`].
    pub fn export_service<Req, Rep>(
        &mut self,
        bus: &mut BusBuilder,
        export: ServiceExport,
    ) -> &mut Self
    where
        Req: Message + Clone + DeserializeOwned,
        Rep: Message + Clone + Serialize,
    {
        self.export_service_on(bus, &Service::<Req, Rep>::of(), export)
    }

    /// Answers zenoh queries on key `<prefix>/<running name>` by calling `service` on `bus`:
    /// declares an external caller named `zenoh-serve:<name>` (so `start()` refuses it if no
    /// actor serves the service), and serves the request's and reply's JSON Schemas on
    /// `<key>/@schema`. A query is answered with the reply in the query's encoding (bincode
    /// with the gateway's attachment, or JSON), or with an error reply (see [`ERROR_CODES`](crate::ERROR_CODES)).
    pub fn export_service_on<Req, Rep>(
        &mut self,
        bus: &mut BusBuilder,
        service: &Service<Req, Rep>,
        export: ServiceExport,
    ) -> &mut Self
    where
        Req: Message + Clone + DeserializeOwned,
        Rep: Message + Clone + Serialize,
    {
        let key = bus.caller(service, &format!("zenoh-serve:{}", service.name()));
        self.pending.push(Box::new(PendingServiceExport {
            key,
            export,
            service: service.clone(),
        }));
        self
    }

    /// Serves `Req`'s default service from zenoh: [`import_service_on`](Self::import_service_on)
    /// of [`Service::of`].
    pub fn import_service<Req, Rep>(
        &mut self,
        bus: &mut BusBuilder,
        import: ServiceImport,
    ) -> &mut Self
    where
        Req: Message + Clone + Serialize,
        Rep: Message + Clone + DeserializeOwned,
    {
        self.import_service_on(bus, &Service::<Req, Rep>::of(), import)
    }

    /// Serves `service` on `bus` from a zenoh queryable on key `<prefix>/<running name>`: an
    /// actor named `zenoh-call:<name>` serves it (so `start()` refuses a second server), and
    /// each call is a zenoh `get`, sent by a thread of the gateway's, whose first reply answers
    /// it (see the [`service`](crate::service) module for how each ending maps to a
    /// [`CallError`](llbus::CallError)). Calls made before the gateway starts wait in a queue
    /// for it.
    pub fn import_service_on<Req, Rep>(
        &mut self,
        bus: &mut BusBuilder,
        service: &Service<Req, Rep>,
        import: ServiceImport,
    ) -> &mut Self
    where
        Req: Message + Clone + Serialize,
        Rep: Message + Clone + DeserializeOwned,
    {
        let pending = PendingServiceImport::declare(bus, service, import);
        self.pending.push(Box::new(pending));
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
        // that another imports loops as surely as one gateway doing both. Topics are compared
        // by the names they run under (a handle's name holds the declared one).
        let on_bus: Vec<(bool, bool, String)> = bus
            .report()
            .actors
            .into_iter()
            .filter_map(|a| {
                let (export, service, rest) = [
                    ("zenoh-export:", true, false),
                    ("zenoh-import:", false, false),
                    ("zenoh-serve:", true, true),
                    ("zenoh-call:", false, true),
                ]
                .into_iter()
                .find_map(|(prefix, export, service)| {
                    Some((export, service, a.name.strip_prefix(prefix)?))
                })?;
                let declared = rest.split('@').next().unwrap_or(rest);
                let running = match TopicName::new(declared) {
                    Ok(name) => bus.topic_name(&name).as_str().to_owned(),
                    Err(_) => declared.to_owned(),
                };
                Some((export, service, running))
            })
            .collect();
        let running: Vec<(TopicName, bool)> = self
            .pending
            .iter()
            .map(|p| {
                let (declared, export) = p.topic();
                (bus.topic_name(declared), export)
            })
            .collect();
        for ((topic, export), p) in running.iter().zip(&self.pending) {
            if on_bus.iter().any(|(e, service, name)| {
                *e != *export && *service == p.is_service() && name == topic.as_str()
            }) {
                return Err(GatewayError::Echo(topic.as_str().to_owned()));
            }
        }
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        for (i, p) in self.pending.iter().enumerate() {
            let (topic, export) = &running[i];
            let key = key_of(p.given_key(), &prefix, topic.as_str());
            let twice = self.pending[..i].iter().zip(&running).any(|(q, r)| {
                r == &running[i] && key_of(q.given_key(), &prefix, r.0.as_str()) == key
            });
            if twice {
                return Err(GatewayError::Duplicate {
                    topic: topic.as_str().to_owned(),
                    key,
                    export: *export,
                });
            }
        }
        let session = zenoh::open(config).wait()?;
        let mut gateway = Gateway {
            session,
            exports: Vec::new(),
            imports: Vec::new(),
            queryables: Vec::new(),
            services: Vec::new(),
            getters: Vec::new(),
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
pub(crate) trait Pending: Send {
    /// The topic as declared (before the bus's renamings), and whether it is an export.
    fn topic(&self) -> (&TopicName, bool);

    /// The key it was given, if any.
    fn given_key(&self) -> Option<&str>;

    /// Whether it is a service (exported: answered to queries; imported: served by `get`).
    fn is_service(&self) -> bool {
        false
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError>;
}

/// The name of an export's or import's handle: `<kind>:<topic>`, and `@<key>` if a key was
/// given, so that one topic can go on several keys.
fn handle_name(kind: &str, topic: &TopicName, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("{kind}:{topic}@{k}"),
        None => format!("{kind}:{topic}"),
    }
}

/// The key of `topic` under `prefix`, unless one was given.
pub(crate) fn key_of(given: Option<&str>, prefix: &str, topic: &str) -> String {
    match given {
        Some(k) => k.to_owned(),
        None if prefix.is_empty() => topic.to_owned(),
        None => format!("{prefix}/{topic}"),
    }
}

/// Keeps `error` in the gateway's table, and logs it if it is the first of its topic and kind
/// (the rest are counted there, the latest kept): a flood of refused streams or malformed
/// samples is one log line.
pub(crate) fn report(errors: &Mutex<ErrorTable>, topic: &str, kind: ErrorKind, error: String) {
    if let Some(first) = errors.lock().record(topic, kind, error) {
        log::error!("{first} (further errors of this kind are counted in Gateway::errors)");
    }
}
