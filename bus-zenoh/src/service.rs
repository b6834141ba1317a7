//! Services through zenoh: a local service answered to zenoh's `get` as a queryable
//! ([`GatewayBuilder::export_service_on`](crate::GatewayBuilder::export_service_on)), and a
//! zenoh queryable served on the bus as a local service
//! ([`GatewayBuilder::import_service_on`](crate::GatewayBuilder::import_service_on)).
//!
//! **An exported service** is an external [`Caller`] of the bus. Zenoh's queryable callback
//! only hands each query to the export's thread through a bounded queue (a full queue is
//! answered `busy` at once and counted): the thread decodes the request (bincode with the
//! gateway's attachment, or JSON from any client), calls the service with the export's
//! timeout, and replies in the request's encoding. A call that ends without a reply, or a
//! request refused, is answered with a zenoh error reply whose payload is JSON:
//! `{"error": CODE, "message": TEXT}`, `CODE` one of [`ERROR_CODES`]. Calls are answered one at
//! a time, in order.
//!
//! **An imported service** is an actor of the bus (`zenoh-call:<name>`) that serves the
//! service: it takes each request, hands it to a thread of the gateway's own which sends a
//! zenoh `get` (zenoh never runs on the bus's threads), and answers each call from what comes
//! back: the first reply, decoded (a payload that does not decode answers
//! [`CallError::Dropped`] and is counted malformed), or the queryable's error mapped back to
//! its [`CallError`] (`timeout`, `panicked`, `dropped`, `stopped`, `queue_full`, `refused`;
//! `busy` is `QueueFull`, any other code `Dropped`), or, once the import's timeout passes with
//! no reply, `Timeout`; when no queryable answers at all before the timeout, `Stopped` (the
//! server is not there). At most
//! [`ServiceImport::in_flight`] calls are open at once; more are answered `QueueFull`.
//!
//! Both carry the gateway's 40-byte attachment on bincode payloads: the service's name id, and
//! the fingerprint of [`Request<Req>`](llbus::Request) on queries and of
//! [`Reply<Rep>`](llbus::Reply) on replies; a bincode query with a wrong or missing attachment is
//! refused. JSON queries need none (other languages), and the export serves the request's and
//! the reply's JSON Schemas on `<key>/@schema`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{self as channel, Receiver, Sender, TryRecvError, TrySendError};
use llbus::{
    Actor, BusBuilder, CallError, Caller, CallerKey, Context, Message, Metric, Replies, Reply,
    Request, Responder, RunningBus, Service, Setup, TopicName,
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use zenoh::bytes::Encoding;
use zenoh::query::Query;
use zenoh::Wait;

use crate::attachment::Attachment;
use crate::errors::{ErrorKind, ErrorTable};
use crate::export::{zenoh_encoding, PayloadEncoding, SCHEMA_SUFFIX};
use crate::gateway::{key_of, report, Gateway, GatewayError, Pending};

/// How long an exported service's call waits for the local server, and how long an imported
/// service's `get` waits for a queryable, unless set.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// The codes of a service's error replies, in [`CallError`]'s order, then the gateway's own:
/// `refused` (another service or fingerprint), `malformed` (a request that does not decode),
/// `busy` (the export's queue is full).
pub const ERROR_CODES: [&str; 8] = [
    "timeout",
    "panicked",
    "dropped",
    "stopped",
    "queue_full",
    "refused",
    "malformed",
    "busy",
];

/// How long the export's thread waits for a query before it looks whether it should leave.
const CHECK_EVERY: Duration = Duration::from_millis(20);

/// How one service is exported: [`ServiceExport::new`] then its setters.
#[derive(Clone, Debug)]
pub struct ServiceExport {
    pub(crate) key: Option<String>,
    timeout: Duration,
    queue: usize,
}

impl Default for ServiceExport {
    fn default() -> Self {
        ServiceExport::new()
    }
}

impl ServiceExport {
    /// On key `<prefix>/<service>`, each call waiting [`DEFAULT_CALL_TIMEOUT`] for the server,
    /// at most 256 queries queued for the export's thread.
    pub fn new() -> Self {
        ServiceExport {
            key: None,
            timeout: DEFAULT_CALL_TIMEOUT,
            queue: 256,
        }
    }

    /// The key expression of the queryable, instead of `<prefix>/<service>`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// How long each call waits for the local server.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many queries wait for the export's thread before more are answered `busy`.
    pub fn queue(mut self, queue: usize) -> Self {
        self.queue = queue.max(1);
        self
    }
}

/// How one service is imported: [`ServiceImport::new`] then its setters.
#[derive(Clone, Debug)]
pub struct ServiceImport {
    pub(crate) key: Option<String>,
    encoding: PayloadEncoding,
    timeout: Duration,
    in_flight: usize,
}

impl Default for ServiceImport {
    fn default() -> Self {
        ServiceImport::new()
    }
}

impl ServiceImport {
    /// From key `<prefix>/<service>`, in bincode, each `get` waiting [`DEFAULT_CALL_TIMEOUT`],
    /// at most 256 calls open.
    pub fn new() -> Self {
        ServiceImport {
            key: None,
            encoding: PayloadEncoding::Bincode,
            timeout: DEFAULT_CALL_TIMEOUT,
            in_flight: 256,
        }
    }

    /// The key expression to query, instead of `<prefix>/<service>`.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// The payload encoding of the queries (JSON reaches a queryable written in another
    /// language).
    pub fn encoding(mut self, encoding: PayloadEncoding) -> Self {
        self.encoding = encoding;
        self
    }

    /// How long each `get` waits for a reply.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many calls may be open at once (more are answered `QueueFull`).
    pub fn in_flight(mut self, in_flight: usize) -> Self {
        self.in_flight = in_flight.max(1);
        self
    }
}

/// The code of `error` in an error reply.
fn error_code(error: CallError) -> &'static str {
    match error {
        CallError::Timeout => ERROR_CODES[0],
        CallError::ServerPanicked => ERROR_CODES[1],
        CallError::Stopped => ERROR_CODES[3],
        CallError::QueueFull => ERROR_CODES[4],
        CallError::Refused => ERROR_CODES[5],
        _ => ERROR_CODES[2],
    }
}

/// The error an error reply's code stands for.
fn error_of(code: &str) -> CallError {
    match code {
        "timeout" => CallError::Timeout,
        "panicked" => CallError::ServerPanicked,
        "stopped" => CallError::Stopped,
        "queue_full" | "busy" => CallError::QueueFull,
        "refused" => CallError::Refused,
        _ => CallError::Dropped,
    }
}

/// An error reply's JSON payload.
fn error_payload(code: &str, message: &str) -> String {
    serde_json::json!({ "error": code, "message": message }).to_string()
}

/// Whether `encoding` is JSON (with any schema).
fn is_json(encoding: &Encoding) -> bool {
    encoding.to_string().starts_with("application/json")
}

/// `value` in `encoding`.
fn encode<T: Serialize>(value: &T, encoding: PayloadEncoding) -> Result<Vec<u8>, String> {
    match encoding {
        PayloadEncoding::Bincode => bincode::serde::encode_to_vec(value, bincode::config::legacy())
            .map_err(|e| e.to_string()),
        PayloadEncoding::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
    }
}

/// A payload in `encoding` decoded (bincode through [`llbus::decode_bounded`]: a hostile
/// length allocates nothing).
fn decode<T: DeserializeOwned>(bytes: &[u8], encoding: PayloadEncoding) -> Result<T, String> {
    match encoding {
        PayloadEncoding::Bincode => llbus::decode_bounded::<T>(bytes)
            .map(|(v, _)| v)
            .map_err(|e| e.to_string()),
        PayloadEncoding::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
    }
}

/// The attachment of a query or reply of service `id` with `fingerprint`.
fn attachment(id: u64, fingerprint: u64, sequence: u64) -> Vec<u8> {
    Attachment {
        topic_id: id,
        fingerprint,
        stream: 0,
        sequence,
        sent_ns: crate::now_ns(),
    }
    .encode()
    .to_vec()
}

// ---------------------------------------------------------------------------------------------
// Export: a local service answered to zenoh queries.
// ---------------------------------------------------------------------------------------------

pub(crate) struct PendingServiceExport<Req, Rep> {
    pub(crate) key: CallerKey<Req, Rep>,
    pub(crate) export: ServiceExport,
    pub(crate) service: Service<Req, Rep>,
}

/// A running exported service: its thread and figures.
pub(crate) struct RunningService {
    pub(crate) thread: Option<JoinHandle<()>>,
    pub(crate) metrics: ServiceMetrics,
}

/// The figures of one exported or imported service: `queries == answered + failed` once
/// nothing is in flight (an export: queries received; an import: calls sent).
#[derive(Clone)]
pub(crate) struct ServiceMetrics {
    pub(crate) queries: Metric,
    pub(crate) answered: Metric,
    pub(crate) failed: Metric,
}

impl<Req, Rep> Pending for PendingServiceExport<Req, Rep>
where
    Req: Message + Clone + DeserializeOwned,
    Rep: Message + Clone + Serialize,
{
    fn topic(&self) -> (&TopicName, bool) {
        (self.service.name(), true)
    }

    fn given_key(&self) -> Option<&str> {
        self.export.key.as_deref()
    }

    fn is_service(&self) -> bool {
        true
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError> {
        let caller = bus.caller(self.key).map_err(GatewayError::Handle)?;
        let name = bus.topic_name(self.service.name());
        let key = key_of(self.export.key.as_deref(), prefix, name.as_str());
        let metrics = ServiceMetrics {
            queries: caller.metric("zenoh.queries"),
            answered: caller.metric("zenoh.answered"),
            failed: caller.metric("zenoh.failed"),
        };
        let schema = serde_json::json!({
            "request": llbus::schema::json_schema(&Req::schema()),
            "reply": llbus::schema::json_schema(&Rep::schema()),
        })
        .to_string();
        let schema_queryable = gateway
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
        gateway.queryables.push(schema_queryable);
        let (tx, rx) = channel::bounded::<Query>(self.export.queue);
        let busy = {
            let metrics = metrics.clone();
            move |query: Query| {
                metrics.queries.add(1);
                metrics.failed.add(1);
                let payload = error_payload("busy", "the service's queue is full");
                if let Err(e) = query
                    .reply_err(payload)
                    .encoding(Encoding::APPLICATION_JSON)
                    .wait()
                {
                    log::warn!("cannot answer a query: {e}");
                }
            }
        };
        let queryable = gateway
            .session
            .declare_queryable(key.clone())
            .callback(move |query| match tx.try_send(query) {
                Ok(()) => {}
                Err(TrySendError::Full(q) | TrySendError::Disconnected(q)) => busy(q),
            })
            .wait()?;
        gateway.queryables.push(queryable);
        let run = ServeRun {
            caller,
            queries: rx,
            timeout: self.export.timeout,
            id: name.id(),
            bincode: zenoh_encoding(PayloadEncoding::Bincode, name.as_str()),
            name,
            metrics: metrics.clone(),
            closing: Arc::clone(&gateway.closing),
            errors: Arc::clone(&gateway.errors),
            answered: 0,
        };
        let thread = std::thread::Builder::new()
            .name(format!("llbus-zenoh-serve-{}", run.name))
            .spawn(move || run.run())
            .map_err(GatewayError::Spawn)?;
        gateway.services.push(RunningService {
            thread: Some(thread),
            metrics,
        });
        Ok(())
    }
}

/// An exported service's thread: takes each query, calls the service, replies.
struct ServeRun<Req, Rep> {
    caller: Caller<Req, Rep>,
    queries: Receiver<Query>,
    timeout: Duration,
    /// The service's running name (for errors and the encoding's schema) and its id.
    name: TopicName,
    id: u64,
    bincode: Encoding,
    metrics: ServiceMetrics,
    closing: Arc<AtomicBool>,
    errors: Arc<Mutex<ErrorTable>>,
    /// Replies sent so far: the attachments' sequence numbers.
    answered: u64,
}

impl<Req, Rep> ServeRun<Req, Rep>
where
    Req: Message + Clone + DeserializeOwned,
    Rep: Message + Clone + Serialize,
{
    /// Until the gateway closes (queries still queued then are answered `stopped`).
    fn run(mut self) {
        while !self.closing.load(Ordering::Acquire) {
            match self.queries.recv_timeout(CHECK_EVERY) {
                Ok(query) => self.answer(&query),
                Err(channel::RecvTimeoutError::Timeout) => {}
                Err(channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(query) = self.queries.try_recv() {
            self.metrics.queries.add(1);
            self.fail(&query, "stopped", "the gateway is closing");
        }
    }

    fn answer(&mut self, query: &Query) {
        self.metrics.queries.add(1);
        let json = query.encoding().is_some_and(is_json);
        let encoding = if json {
            PayloadEncoding::Json
        } else {
            PayloadEncoding::Bincode
        };
        if !json {
            if query.encoding().is_some_and(|e| *e != self.bincode) {
                let message = format!(
                    "a query of service '{}' in an unknown encoding {}",
                    self.name,
                    query
                        .encoding()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                );
                self.refuse(query, "malformed", ErrorKind::Malformed, message);
                return;
            }
            let attached = query
                .attachment()
                .and_then(|a| Attachment::decode(&a.to_bytes()));
            let expected = Request::<Req>::FINGERPRINT;
            match attached {
                Some(a) if a.topic_id == self.id && a.fingerprint == expected => {}
                Some(a) if a.topic_id != self.id => {
                    let message = format!(
                        "a query of service '{}' carries another topic id ({:#x})",
                        self.name, a.topic_id
                    );
                    self.refuse(query, "refused", ErrorKind::OtherTopic, message);
                    return;
                }
                Some(a) => {
                    let message = format!(
                        "a query of service '{}' has fingerprint {:#018x}, not {expected:#018x}: \
                         the caller's request type differs from the server's",
                        self.name, a.fingerprint
                    );
                    self.refuse(query, "refused", ErrorKind::Fingerprint, message);
                    return;
                }
                None => {
                    let message = format!(
                        "a bincode query of service '{}' without the gateway's attachment",
                        self.name
                    );
                    self.refuse(query, "malformed", ErrorKind::Malformed, message);
                    return;
                }
            }
        }
        let payload = query.payload().map(|p| p.to_bytes()).unwrap_or_default();
        let request = match decode::<Req>(&payload, encoding) {
            Ok(r) => r,
            Err(e) => {
                let message = format!("a request of service '{}' does not decode: {e}", self.name);
                self.refuse(query, "malformed", ErrorKind::Malformed, message);
                return;
            }
        };
        match self.caller.call(request, self.timeout) {
            Ok(reply) => self.reply(query, &reply, encoding),
            Err(e) => self.fail(query, error_code(e), &e.to_string()),
        }
    }

    fn reply(&mut self, query: &Query, reply: &Rep, encoding: PayloadEncoding) {
        let payload = match encode(reply, encoding) {
            Ok(p) => p,
            Err(e) => {
                let message = format!("a reply of service '{}' does not encode: {e}", self.name);
                report(
                    &self.errors,
                    self.name.as_str(),
                    ErrorKind::PutFailed,
                    message.clone(),
                );
                self.fail(query, "dropped", &message);
                return;
            }
        };
        let builder = query
            .reply(query.key_expr().clone(), payload)
            .encoding(zenoh_encoding(encoding, self.name.as_str()));
        let sent = if encoding == PayloadEncoding::Bincode {
            let a = attachment(self.id, Reply::<Rep>::FINGERPRINT, self.answered);
            builder.attachment(a).wait()
        } else {
            builder.wait()
        };
        self.answered += 1;
        match sent {
            Ok(()) => self.metrics.answered.add(1),
            Err(e) => {
                self.metrics.failed.add(1);
                let message = format!("zenoh refused a reply of service '{}': {e}", self.name);
                report(
                    &self.errors,
                    self.name.as_str(),
                    ErrorKind::PutFailed,
                    message,
                );
            }
        }
    }

    /// Answers `query` with an error reply (and counts it failed).
    fn fail(&self, query: &Query, code: &str, message: &str) {
        self.metrics.failed.add(1);
        if let Err(e) = query
            .reply_err(error_payload(code, message))
            .encoding(Encoding::APPLICATION_JSON)
            .wait()
        {
            log::warn!("cannot answer a query of service '{}': {e}", self.name);
        }
    }

    /// Refuses `query` (and reports why, once per kind).
    fn refuse(&self, query: &Query, code: &str, kind: ErrorKind, message: String) {
        self.fail(query, code, &message);
        report(&self.errors, self.name.as_str(), kind, message);
    }
}

// ---------------------------------------------------------------------------------------------
// Import: a zenoh queryable served on the bus.
// ---------------------------------------------------------------------------------------------

/// A call on its way to zenoh: its slot in the actor's table and its encoded request.
struct Outgoing {
    slot: usize,
    payload: Vec<u8>,
}

/// A call's end, back from zenoh: its slot and its result.
struct Incoming<Rep> {
    slot: usize,
    result: Result<Rep, CallError>,
}

/// The channels between an imported service's actor and the gateway's thread, made when the
/// service is declared and taken when the gateway starts.
pub(crate) struct ImportLink<Rep> {
    outgoing: Receiver<Outgoing>,
    incoming: Sender<Incoming<Rep>>,
}

pub(crate) struct PendingServiceImport<Req, Rep> {
    pub(crate) import: ServiceImport,
    pub(crate) service: Service<Req, Rep>,
    pub(crate) link: Arc<Mutex<Option<ImportLink<Rep>>>>,
}

/// The actor that serves an imported service on the bus.
struct CallActor<Req, Rep: Message + Clone> {
    replies: Replies<Rep>,
    outgoing: Sender<Outgoing>,
    incoming: Receiver<Incoming<Rep>>,
    /// The open calls' responders, by slot; `free` lists the empty slots.
    open: Vec<Option<Responder<Rep>>>,
    free: Vec<usize>,
    encoding: PayloadEncoding,
    metrics: ServiceMetrics,
    late: Metric,
    _req: std::marker::PhantomData<fn(Req)>,
}

impl<Req, Rep> Actor for CallActor<Req, Rep>
where
    Req: Message + Clone + Serialize,
    Rep: Message + Clone,
{
    type In = Request<Req>;

    fn on_message(&mut self, request: Request<Req>, ctx: &mut Context<'_>) {
        let a = self;
        let (request, responder) = a.replies.accept(request);
        a.metrics.queries.add(1);
        let Some(slot) = a.free.pop() else {
            a.metrics.failed.add(1);
            ctx.reply(responder, Err(CallError::QueueFull));
            return;
        };
        let payload = match encode(&request, a.encoding) {
            Ok(p) => p,
            Err(e) => {
                log::error!("a request does not encode: {e}");
                a.free.push(slot);
                a.metrics.failed.add(1);
                ctx.reply(responder, Err(CallError::Dropped));
                return;
            }
        };
        match a.outgoing.try_send(Outgoing { slot, payload }) {
            Ok(()) => a.open[slot] = Some(responder),
            Err(e) => {
                a.free.push(slot);
                a.metrics.failed.add(1);
                let error = match e {
                    TrySendError::Full(_) => CallError::QueueFull,
                    TrySendError::Disconnected(_) => CallError::Stopped,
                };
                ctx.reply(responder, Err(error));
            }
        }
    }

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let a = self;
        let mut work = 0;
        loop {
            match a.incoming.try_recv() {
                Ok(Incoming { slot, result }) => {
                    work += 1;
                    match a.open.get_mut(slot).and_then(Option::take) {
                        Some(responder) => {
                            a.free.push(slot);
                            if result.is_ok() {
                                a.metrics.answered.add(1);
                            } else {
                                a.metrics.failed.add(1);
                            }
                            ctx.reply(responder, result);
                        }
                        None => a.late.add(1),
                    }
                }
                Err(TryRecvError::Empty) => break,
                // The gateway's thread is gone (closed): every open call ends.
                Err(TryRecvError::Disconnected) => {
                    for slot in 0..a.open.len() {
                        if let Some(responder) = a.open[slot].take() {
                            a.free.push(slot);
                            a.metrics.failed.add(1);
                            ctx.reply(responder, Err(CallError::Stopped));
                            work += 1;
                        }
                    }
                    break;
                }
            }
        }
        work
    }
}

impl<Req, Rep> PendingServiceImport<Req, Rep>
where
    Req: Message + Clone + Serialize,
    Rep: Message + Clone + DeserializeOwned,
{
    /// Declares the actor that serves the service on `bus`, linked to the gateway's thread
    /// through bounded channels.
    pub(crate) fn declare(
        bus: &mut BusBuilder,
        service: &Service<Req, Rep>,
        import: ServiceImport,
    ) -> Self {
        let (out_tx, out_rx) = channel::bounded::<Outgoing>(import.in_flight);
        let (in_tx, in_rx) = channel::bounded::<Incoming<Rep>>(import.in_flight);
        let link = Arc::new(Mutex::new(Some(ImportLink {
            outgoing: out_rx,
            incoming: in_tx,
        })));
        let (in_flight, encoding, svc) = (import.in_flight, import.encoding, service.clone());
        bus.actor(
            &format!("zenoh-call:{}", service.name()),
            move |setup: &mut Setup<'_>| {
                let metrics = ServiceMetrics {
                    queries: setup.metric("zenoh.calls"),
                    answered: setup.metric("zenoh.answered"),
                    failed: setup.metric("zenoh.failed"),
                };
                CallActor::<Req, Rep> {
                    replies: setup.replies(&svc),
                    outgoing: out_tx.clone(),
                    incoming: in_rx.clone(),
                    open: (0..in_flight).map(|_| None).collect(),
                    free: (0..in_flight).rev().collect(),
                    encoding,
                    metrics,
                    late: setup.metric("zenoh.late"),
                    _req: std::marker::PhantomData,
                }
            },
        )
        .serves(service);
        PendingServiceImport {
            import,
            service: service.clone(),
            link,
        }
    }
}

impl<Req, Rep> Pending for PendingServiceImport<Req, Rep>
where
    Req: Message + Clone + Serialize,
    Rep: Message + Clone + DeserializeOwned,
{
    fn topic(&self) -> (&TopicName, bool) {
        (self.service.name(), false)
    }

    fn given_key(&self) -> Option<&str> {
        self.import.key.as_deref()
    }

    fn is_service(&self) -> bool {
        true
    }

    fn start(
        self: Box<Self>,
        bus: &mut RunningBus,
        prefix: &str,
        gateway: &mut Gateway,
    ) -> Result<(), GatewayError> {
        let name = bus.topic_name(self.service.name());
        let key = key_of(self.import.key.as_deref(), prefix, name.as_str());
        let Some(link) = self.link.lock().take() else {
            return Err(GatewayError::Duplicate {
                topic: name.as_str().to_owned(),
                key,
                export: false,
            });
        };
        let run = GetRun {
            session: gateway.session.clone(),
            key,
            id: name.id(),
            encoding: self.import.encoding,
            zenoh_encoding: zenoh_encoding(self.import.encoding, name.as_str()),
            timeout: self.import.timeout,
            link,
            closing: Arc::clone(&gateway.closing),
            sent: 0,
            _t: std::marker::PhantomData::<fn(Req)>,
        };
        let thread = std::thread::Builder::new()
            .name(format!("llbus-zenoh-get-{name}"))
            .spawn(move || run.run())
            .map_err(GatewayError::Spawn)?;
        gateway.getters.push(thread);
        Ok(())
    }
}

/// An imported service's thread: sends each call as a zenoh `get` whose callback sends back
/// the call's end.
struct GetRun<Req, Rep> {
    session: zenoh::Session,
    key: String,
    id: u64,
    encoding: PayloadEncoding,
    zenoh_encoding: Encoding,
    timeout: Duration,
    link: ImportLink<Rep>,
    closing: Arc<AtomicBool>,
    sent: u64,
    _t: std::marker::PhantomData<fn(Req)>,
}

/// Sends a call's end once: the first reply, or, when zenoh drops the query's callback, what
/// its silence means.
struct Ending<Rep> {
    slot: usize,
    incoming: Sender<Incoming<Rep>>,
    sent_at: Instant,
    timeout: Duration,
    done: bool,
}

impl<Rep> Ending<Rep> {
    fn end(&mut self, result: Result<Rep, CallError>) {
        if !self.done {
            self.done = true;
            // The actor may be gone (the bus stopped): nothing is left to answer.
            let _ = self.incoming.send(Incoming {
                slot: self.slot,
                result,
            });
        }
    }
}

impl<Rep> Drop for Ending<Rep> {
    fn drop(&mut self) {
        let error = if self.sent_at.elapsed() >= self.timeout {
            CallError::Timeout
        } else {
            CallError::Stopped
        };
        self.end(Err(error));
    }
}

impl<Req, Rep> GetRun<Req, Rep>
where
    Req: Message,
    Rep: Message + DeserializeOwned,
{
    fn run(mut self) {
        while !self.closing.load(Ordering::Acquire) {
            match self.link.outgoing.recv_timeout(CHECK_EVERY) {
                Ok(call) => self.get(call),
                Err(channel::RecvTimeoutError::Timeout) => {}
                Err(channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        // Dropping the link ends the calls still queued: the actor sees the channel closed.
    }

    fn get(&mut self, call: Outgoing) {
        let ending = Ending {
            slot: call.slot,
            incoming: self.link.incoming.clone(),
            sent_at: Instant::now(),
            timeout: self.timeout,
            done: false,
        };
        let (encoding, id) = (self.encoding, self.id);
        let mut builder = self
            .session
            .get(self.key.as_str())
            .payload(call.payload)
            .encoding(self.zenoh_encoding.clone())
            .timeout(self.timeout);
        if encoding == PayloadEncoding::Bincode {
            builder = builder.attachment(attachment(id, Request::<Req>::FINGERPRINT, self.sent));
        }
        self.sent += 1;
        let ending = Mutex::new(Some(ending));
        let sent = builder
            .callback(move |reply| {
                let mut guard = ending.lock();
                let Some(ending) = guard.as_mut() else {
                    return;
                };
                let result = match reply.result() {
                    Ok(sample) => {
                        let json = is_json(sample.encoding());
                        let checked = json || {
                            let a = sample
                                .attachment()
                                .and_then(|a| Attachment::decode(&a.to_bytes()));
                            a.is_some_and(|a| {
                                a.topic_id == id && a.fingerprint == Reply::<Rep>::FINGERPRINT
                            })
                        };
                        let decoded = if checked {
                            let encoding = if json {
                                PayloadEncoding::Json
                            } else {
                                PayloadEncoding::Bincode
                            };
                            decode::<Rep>(&sample.payload().to_bytes(), encoding)
                        } else {
                            Err("a reply without the gateway's attachment or of another \
                                 fingerprint"
                                .to_owned())
                        };
                        decoded.map_err(|e| {
                            log::warn!("a reply of '{}' refused: {e}", sample.key_expr());
                            CallError::Dropped
                        })
                    }
                    Err(error) => {
                        let value: Option<serde_json::Value> =
                            serde_json::from_slice(&error.payload().to_bytes()).ok();
                        let code = value
                            .as_ref()
                            .and_then(|v| v.get("error"))
                            .and_then(|c| c.as_str());
                        Err(match code {
                            Some(code) => error_of(code),
                            // Zenoh's own error: its timeout, or a failure of its own.
                            None if ending.sent_at.elapsed() >= ending.timeout => {
                                CallError::Timeout
                            }
                            None => CallError::Dropped,
                        })
                    }
                };
                ending.end(result);
            })
            .wait();
        if let Err(e) = sent {
            log::warn!("zenoh refused a query on '{}': {e}", self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error of the bus goes out as its own code and comes back as itself.
    #[test]
    fn each_call_error_round_trips_through_its_code() {
        for error in [
            CallError::Timeout,
            CallError::ServerPanicked,
            CallError::Dropped,
            CallError::Stopped,
            CallError::QueueFull,
            CallError::Refused,
        ] {
            let code = error_code(error);
            assert!(ERROR_CODES.contains(&code), "{code}");
            assert_eq!(error_of(code), error, "{code}");
        }
        assert_eq!(error_of("busy"), CallError::QueueFull);
        assert_eq!(error_of("malformed"), CallError::Dropped);
    }
}
