//! The bridge: an actor that makes topics of one bus appear on another bus on another host.
//!
//! - `ports`: one typed port per exported or imported topic (v1 and compat).
//! - `metrics`: the bridge's figures, shown in the bus's report.
//!
//! The bridge joins the two lower layers to the bus. Exports take the rings the bus made for
//! their topics (`ActorBuilder::takes`) and are pumped every round into datagrams, several
//! messages to a datagram when several are queued (never waiting to fill one), fanned out with
//! one `sendmmsg` per datagram. Imports are fed from `recvmmsg` batches: each frame is checked
//! (fingerprint, sequence), decoded once and published on the local bus. Timers on the bridge's
//! tick (every millisecond) renew subscriptions, send heartbeats and expire subscribers.

mod direct;
mod metrics;
mod ports;

use direct::DirectPort;
pub use direct::{DirectError, DirectSender};

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use llbus::{Actor, ActorBuilder, BusBuilder, Component, Context, Message, Setup};
use serde::de::DeserializeOwned;
use serde::Serialize;

use self::metrics::{add_loss, NetMetrics};
use self::ports::{
    fan_out, fatal_socket_error, CompatExport, CompatExportPort, CompatImport, CompatImportPort,
    Export, ExportPort, Import, ImportPort, SendSide,
};
use crate::{
    new_session_id, parse_datagram, random_secret, Allowlist, BatchEncoder, CompatControl, Control,
    Cookie, CookieJar, DropReason, FrameMac, Kind, LatePolicy, LossCounts, RateLimit, RateLimiter,
    RecvBatch, Refusal, RefuseReason, SendBatch, SocketConfig, SubscriberTable, UdpEndpoint,
    DEFAULT_COOKIE_WINDOW, DEFAULT_MAX_DATAGRAM, DEFAULT_RATE_LIMIT, DEFAULT_RATE_LIMIT_SOURCES,
    DEFAULT_SUBSCRIBERS_PER_TOPIC, DEFAULT_SUBSCRIBER_TIMEOUT, MAC_TAG_LEN, MAX_DATAGRAM_LIMIT,
};

/// Messages taken from one ring per poll of an export.
const BUDGET: usize = 256;

/// Settings of a bridge; each has a documented default.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// The largest datagram sent or accepted (default 1472: a 1500-byte MTU less IP and UDP
    /// headers). A message that cannot fit is refused and counted (`too_large`), never cut.
    pub max_datagram: usize,
    /// How long a subscriber lasts without renewing (default 60 s).
    pub subscriber_timeout: Duration,
    /// How many (subscriber, topic) entries one bridge serves at most (default 1024).
    pub subscriber_capacity: usize,
    /// How often imports renew their subscriptions (default 1 s).
    pub renew_every: Duration,
    /// How often exports send a heartbeat with their last sequence number (default 100 ms).
    pub heartbeat_every: Duration,
    /// What imports do with a message that arrives after a later one (default deliver).
    pub late: LatePolicy,
    /// Datagrams per `recvmmsg`/`sendmmsg` call (default 32).
    pub batch: usize,
    /// Socket buffer sizes.
    pub socket: SocketConfig,
    /// Which addresses may subscribe to this bridge's exports (v1 and compat). Default:
    /// loopback only; name your subscribers' networks (`"10.0.0.0/8".parse()?`) to serve them.
    pub allow: Allowlist,
    /// Control messages per second (and burst) accepted per source address before it has
    /// proved its address (default 20/s, burst 40).
    pub rate_limit: RateLimit,
    /// How many sources the rate limiter tracks at once (default 4096).
    pub rate_limit_sources: usize,
    /// Subscribers one topic serves at most (default 64).
    pub subscribers_per_topic: usize,
    /// How long an address-proving cookie stays valid: one to two windows (default 30 s).
    pub cookie_window: Duration,
    /// A pre-shared key: control datagrams carry a MAC and those without a valid one are
    /// dropped (`drop.bad_mac`). Off by default. Both sides need the same key.
    pub psk: Option<[u8; 32]>,
    /// With a key: seal data datagrams too (default), or only control.
    pub mac_data: bool,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            max_datagram: DEFAULT_MAX_DATAGRAM,
            subscriber_timeout: DEFAULT_SUBSCRIBER_TIMEOUT,
            subscriber_capacity: 1024,
            renew_every: Duration::from_secs(1),
            heartbeat_every: Duration::from_millis(100),
            late: LatePolicy::Deliver,
            batch: 32,
            socket: SocketConfig::default(),
            allow: Allowlist::loopback(),
            rate_limit: DEFAULT_RATE_LIMIT,
            rate_limit_sources: DEFAULT_RATE_LIMIT_SOURCES,
            subscribers_per_topic: DEFAULT_SUBSCRIBERS_PER_TOPIC,
            cookie_window: DEFAULT_COOKIE_WINDOW,
            psk: None,
            mac_data: true,
        }
    }
}

/// What a running bridge reports outside the bus: errors a user must see (a refused
/// subscription names the topic and both fingerprints). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct BridgeStatus {
    errors: Arc<Mutex<Vec<String>>>,
}

impl BridgeStatus {
    /// Every error reported so far, oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn report(&self, error: String) {
        log::error!("{error}");
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(error);
    }
}

type Declare = fn(ActorBuilder<'_, BridgeActor>) -> ActorBuilder<'_, BridgeActor>;

struct ExportDecl {
    /// Who may subscribe to this export; `None` means the bridge's `allow`.
    allow: Option<Allowlist>,
    declare: Declare,
    make: fn(&mut Setup<'_>) -> Box<dyn ExportPort>,
}

struct ImportDecl {
    type_id: std::any::TypeId,
    declare: Declare,
    publisher: SocketAddr,
    make: fn(&mut Setup<'_>, SocketAddr, LatePolicy) -> Box<dyn ImportPort>,
}

struct CompatExportDecl {
    declare: Declare,
    endpoint: UdpEndpoint,
    make: fn(&mut Setup<'_>, UdpEndpoint) -> Box<dyn CompatExportPort>,
}

struct CompatImportDecl {
    declare: Declare,
    endpoint: UdpEndpoint,
    publisher: SocketAddr,
    make: fn(&mut Setup<'_>, UdpEndpoint, SocketAddr) -> Box<dyn CompatImportPort>,
}

/// A bridge being configured: `Bridge::bind(addr)?.export::<Quote>().import::<Order>(peer)`,
/// then `bus.add(bridge)`. It runs as an actor of its own, placed like any other.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use llbus::{Bus, Message};
/// use llbus_net::Bridge;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Message, Serialize, Deserialize, Clone, Debug)]
/// #[message(topic = "md.quote")]
/// struct Quote { px: f64 }
///
/// #[derive(Message, Serialize, Deserialize, Clone, Debug)]
/// #[message(topic = "ex.order")]
/// struct Order { px: f64 }
///
/// let bridge = Bridge::bind("127.0.0.1:7000")?
///     .export::<Quote>()                               // serve local quotes to subscribers
///     .import::<Order>("127.0.0.1:7001".parse()?);     // subscribe to orders published there
/// let mut bus = Bus::builder();
/// bus.add(bridge).group("io");
/// # Ok(()) }
/// ```
pub struct Bridge {
    name: String,
    /// Everything the bridge's actor will own, gathered as the bridge is configured.
    parts: Parts,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("name", &self.name)
            .field("local_addr", &self.parts.endpoint.local_addr())
            .field("exports", &self.parts.exports.len())
            .field("imports", &self.parts.imports.len())
            .finish_non_exhaustive()
    }
}

/// Resolves `addr` to its first socket address.
fn resolve(addr: impl ToSocketAddrs) -> std::io::Result<SocketAddr> {
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolved to nothing: give an IP address and port such as 127.0.0.1:7000",
        )
    })
}

impl Bridge {
    /// Binds the bridge's ll-udp v1 socket to `addr` now, so a port in use is an error here.
    ///
    /// # Errors
    /// If `addr` does not resolve or cannot be bound.
    pub fn bind(addr: impl ToSocketAddrs) -> std::io::Result<Bridge> {
        Self::bind_with(addr, BridgeConfig::default())
    }

    /// Like [`bind`](Self::bind), with settings.
    ///
    /// # Errors
    /// If `addr` does not resolve or cannot be bound, or `config.max_datagram` is not between
    /// 64 and 65507 bytes.
    pub fn bind_with(addr: impl ToSocketAddrs, config: BridgeConfig) -> std::io::Result<Bridge> {
        if !(64..=MAX_DATAGRAM_LIMIT).contains(&config.max_datagram) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "max_datagram {} is out of range: use 64..={MAX_DATAGRAM_LIMIT} bytes (1472 for a 1500-byte MTU)",
                    config.max_datagram
                ),
            ));
        }
        let endpoint = UdpEndpoint::bind(resolve(addr)?, &config.socket)?;
        Ok(Bridge {
            name: format!("bridge-{}", endpoint.local_addr().port()),
            parts: Parts {
                endpoint,
                config,
                exports: Vec::new(),
                imports: Vec::new(),
                compat_exports: Vec::new(),
                compat_imports: Vec::new(),
                directs: Vec::new(),
                session: new_session_id(),
                status: BridgeStatus::default(),
            },
        })
    }

    /// Exports topic `T` with sends made from the publishing actor's own thread: the returned
    /// [`DirectSender`] encodes and sends each message as it is given, skipping the hop through
    /// the bus ring and the bridge's thread. The bridge keeps the topic's control plane
    /// (subscriptions, heartbeats, expiry). Move the sender into the publishing actor.
    ///
    /// # Errors
    /// If the bridge's socket cannot be duplicated for the sender.
    pub fn direct<T: Message + Serialize>(&mut self) -> std::io::Result<DirectSender<T>> {
        let endpoint = self.parts.endpoint.try_clone()?;
        let (sender, port) = DirectSender::<T>::new(
            endpoint,
            self.parts.config.max_datagram,
            self.parts.config.batch,
            self.parts.session,
            mac_of(&self.parts.config),
        );
        self.parts.directs.push(port);
        Ok(sender)
    }

    /// Lets the addresses of `allow` subscribe (replacing the default: loopback only).
    pub fn allow(mut self, allow: Allowlist) -> Self {
        self.parts.config.allow = allow;
        self
    }

    /// Sets a pre-shared key (see [`BridgeConfig::psk`]); `mac_data` also seals data. Call it
    /// before [`direct`](Self::direct), whose sender seals with the same key.
    pub fn psk(mut self, key: [u8; 32], mac_data: bool) -> Self {
        self.parts.config.psk = Some(key);
        self.parts.config.mac_data = mac_data;
        self
    }

    /// Names the bridge's actor (default `bridge-PORT`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The address the v1 socket is bound to (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.parts.endpoint.local_addr()
    }

    /// A handle on the errors the bridge reports while it runs.
    pub fn status(&self) -> BridgeStatus {
        self.parts.status.clone()
    }

    /// Serves topic `T` of the local bus to remote subscribers.
    pub fn export<T: Message + Serialize + Clone>(mut self) -> Self {
        self.parts.exports.push(ExportDecl {
            allow: None,
            declare: |b| b.takes::<T>(),
            make: Export::<T>::make,
        });
        self
    }

    /// Serves topic `T` like [`export`](Self::export), but only to the networks of `allow`
    /// (instead of the bridge's allowlist, [`BridgeConfig::allow`]).
    pub fn export_to<T: Message + Serialize + Clone>(mut self, allow: Allowlist) -> Self {
        self = self.export::<T>();
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.allow = Some(allow);
        }
        self
    }

    /// Subscribes to topic `T` published by the bridge at `publisher`, and publishes what
    /// arrives on the local bus.
    pub fn import<T: Message + DeserializeOwned + Clone>(mut self, publisher: SocketAddr) -> Self {
        let type_id = std::any::TypeId::of::<T>();
        let declared = self.parts.imports.iter().any(|i| i.type_id == type_id);
        self.parts.imports.push(ImportDecl {
            type_id,
            declare: if declared {
                |b| b
            } else {
                |b| b.publishes::<T>()
            },
            publisher,
            make: Import::<T>::make,
        });
        self
    }

    /// Serves topic `T` in the ll-udp-pubsub v0.1 format on a socket of its own bound to
    /// `bind`: subscribers send its 4-byte `Subscribe` once a second, and receive every message
    /// as a `Packet<T> { data, sent_ts }`. No topic, sequence or type check exists in that format.
    ///
    /// # Errors
    /// If `bind` does not resolve or cannot be bound.
    pub fn export_compat<T: Message + Serialize + Clone>(
        mut self,
        bind: impl ToSocketAddrs,
    ) -> std::io::Result<Self> {
        let endpoint = UdpEndpoint::bind(resolve(bind)?, &self.parts.config.socket)?;
        self.parts.compat_exports.push(CompatExportDecl {
            declare: |b| b.takes::<T>(),
            endpoint,
            make: CompatExport::<T>::make,
        });
        Ok(self)
    }

    /// Subscribes, in the ll-udp-pubsub v0.1 format, to the publisher at `publisher` from a
    /// socket of its own bound to `bind` (sending `Subscribe` once a second), and publishes what
    /// arrives as topic `T` on the local bus.
    ///
    /// # Errors
    /// If `bind` does not resolve or cannot be bound.
    pub fn import_compat<T: Message + DeserializeOwned + Clone>(
        mut self,
        bind: impl ToSocketAddrs,
        publisher: SocketAddr,
    ) -> std::io::Result<Self> {
        let endpoint = UdpEndpoint::bind(resolve(bind)?, &self.parts.config.socket)?;
        self.parts.compat_imports.push(CompatImportDecl {
            declare: |b| b.publishes::<T>(),
            endpoint,
            publisher,
            make: CompatImport::<T>::make,
        });
        Ok(self)
    }
}

impl Component for Bridge {
    type Actor = BridgeActor;

    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, BridgeActor> {
        let Bridge { name, parts } = self;
        let declares: Vec<Declare> = parts
            .exports
            .iter()
            .map(|e| e.declare)
            .chain(parts.imports.iter().map(|i| i.declare))
            .chain(parts.compat_exports.iter().map(|e| e.declare))
            .chain(parts.compat_imports.iter().map(|i| i.declare))
            .collect();
        let mut parts = Some(parts);
        let tick = Duration::from_millis(1);
        let mut builder = bus
            .actor(&name, move |setup: &mut Setup<'_>| match parts.take() {
                Some(parts) => BridgeActor::new(setup, parts),
                // The bus never remakes an actor that takes its own rings (no Restart).
                None => panic!("a bridge's actor cannot be made twice"),
            })
            .tick_every(tick)
            // Imports use `try_publish`: the bridge never waits on the local bus.
            .never_waits();
        for declare in declares {
            builder = declare(builder);
        }
        builder
    }
}

/// Everything the bridge's factory consumes.
struct Parts {
    endpoint: UdpEndpoint,
    config: BridgeConfig,
    exports: Vec<ExportDecl>,
    imports: Vec<ImportDecl>,
    compat_exports: Vec<CompatExportDecl>,
    compat_imports: Vec<CompatImportDecl>,
    directs: Vec<DirectPort>,
    session: u64,
    status: BridgeStatus,
}

/// The bridge running as an actor. Made by `bus.add(bridge)`; see [`Bridge`].
pub struct BridgeActor {
    session: u64,
    config: BridgeConfig,
    endpoint: UdpEndpoint,
    /// The receive batch; `None` only while `receive` holds it.
    recv: Option<RecvBatch>,
    send: SendBatch,
    /// One datagram being built by an export.
    buf: Vec<u8>,
    /// One control reply being built.
    control_buf: Vec<u8>,
    /// Where a datagram is copied to be sealed, when a pre-shared key is set.
    seal_buf: Vec<u8>,
    mac: Option<FrameMac>,
    jar: CookieJar,
    limiter: RateLimiter,
    /// The latest cookie each import's publisher gave us, echoed in every Subscribe.
    import_cookies: Vec<Option<Cookie>>,
    /// When each import last answered a challenge: at most once per renewal period.
    challenge_answered: Vec<Option<Instant>>,
    next_reseed: Instant,
    exports: Vec<Box<dyn ExportPort>>,
    /// Per export, its own allowlist if it has one (else the bridge's).
    export_allow: Vec<Option<Allowlist>>,
    imports: Vec<Box<dyn ImportPort>>,
    compat_exports: Vec<(Box<dyn CompatExportPort>, SubscriberTable<SocketAddr>)>,
    compat_imports: Vec<Box<dyn CompatImportPort>>,
    directs: Vec<DirectPort>,
    subscribers: SubscriberTable<SocketAddr>,
    /// Whether each import was refused. A refusal is final: the import stops renewing (and
    /// its error was reported once).
    refused: Vec<bool>,
    metrics: NetMetrics,
    subscriber_gauges: Vec<llbus::Metric>,
    status: BridgeStatus,
    epoch: Instant,
    next_renew: Instant,
    next_heartbeat: Instant,
    next_expire: Instant,
}

impl std::fmt::Debug for BridgeActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeActor")
            .field("local_addr", &self.endpoint.local_addr())
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl BridgeActor {
    fn new(setup: &mut Setup<'_>, parts: Parts) -> Self {
        let Parts {
            endpoint,
            config,
            exports,
            imports,
            compat_exports,
            compat_imports,
            directs,
            session,
            status,
        } = parts;
        let export_allow: Vec<Option<Allowlist>> =
            exports.iter().map(|e| e.allow.clone()).collect();
        let exports: Vec<Box<dyn ExportPort>> = exports.iter().map(|e| (e.make)(setup)).collect();
        let subscriber_gauges = exports
            .iter()
            .map(|e| e.topic())
            .chain(directs.iter().map(|d| d.topic))
            .map(|topic| setup.metric(&format!("subscribers.{topic}")))
            .collect();
        let imports: Vec<Box<dyn ImportPort>> = imports
            .iter()
            .map(|i| (i.make)(setup, i.publisher, config.late))
            .collect();
        let capacity = config.subscriber_capacity;
        let timeout = config.subscriber_timeout;
        let compat_exports = compat_exports
            .into_iter()
            .map(|e| {
                let port = (e.make)(setup, e.endpoint);
                let table = SubscriberTable::new(timeout, capacity)
                    .with_topic_cap(config.subscribers_per_topic);
                (port, table)
            })
            .collect();
        let compat_imports = compat_imports
            .into_iter()
            .map(|i| (i.make)(setup, i.endpoint, i.publisher))
            .collect();
        let now = Instant::now();
        let jar = match random_secret() {
            Ok(secret) => CookieJar::new(secret, config.cookie_window),
            // The OS random source is (almost) never missing; the bridge must not stop for it,
            // so it seeds from what it has (the session id, itself random) and says so.
            Err(e) => {
                log::error!(
                    "no OS randomness for the cookie secret ({e}); seeding from the session id"
                );
                let mut secret = [0u8; 32];
                secret[..8].copy_from_slice(&session.to_le_bytes());
                CookieJar::new(secret, config.cookie_window)
            }
        };
        BridgeActor {
            seal_buf: vec![0; config.max_datagram],
            mac: mac_of(&config),
            jar,
            limiter: RateLimiter::new(config.rate_limit, config.rate_limit_sources),
            import_cookies: vec![None; imports.len()],
            challenge_answered: vec![None; imports.len()],
            next_reseed: now + config.cookie_window,
            session,
            export_allow,
            directs,
            recv: Some(RecvBatch::new(config.batch, config.max_datagram)),
            send: SendBatch::new(config.batch),
            buf: vec![0; config.max_datagram],
            control_buf: vec![0; 256],
            refused: vec![false; imports.len()],
            subscribers: SubscriberTable::new(timeout, capacity)
                .with_topic_cap(config.subscribers_per_topic),
            metrics: NetMetrics::register(setup),
            subscriber_gauges,
            exports,
            imports,
            compat_exports,
            compat_imports,
            endpoint,
            config,
            status,
            epoch: now,
            next_renew: now,
            next_heartbeat: now,
            next_expire: now,
        }
    }

    fn now_ns(&self, now: Instant) -> u64 {
        u64::try_from(now.duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Sends one control frame to `dest` from the v1 socket.
    fn send_control(&mut self, control: &Control, dest: SocketAddr) {
        let room = self.control_buf.len() - MAC_TAG_LEN;
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(control).is_err() {
            return; // A control frame always fits in 256 bytes; nothing to send otherwise.
        }
        let mut len = enc.len();
        if let Some(mac) = &self.mac {
            match mac.seal(&mut self.control_buf, len) {
                Ok(sealed) => len = sealed,
                Err(_) => return, // Cannot happen: room was kept and the frame is whole.
            }
        }
        match self.endpoint.send_to(&self.control_buf[..len], dest) {
            Ok(true) => {
                self.metrics.datagrams_out.add(1);
                self.metrics.bytes_out.add(len as u64);
            }
            Ok(false) => {}
            Err(e) => fatal_socket_error("send", &self.endpoint, &e),
        }
    }

    /// Receives and handles what waits on the v1 socket. Returns datagrams handled.
    fn receive(&mut self, ctx: &mut Context<'_>) -> usize {
        // Held outside `self` while its datagrams are handled, which needs `&mut self`.
        let Some(mut recv) = self.recv.take() else {
            return 0;
        };
        let n = self.receive_from(&mut recv, ctx);
        self.recv = Some(recv);
        n
    }

    fn receive_from(&mut self, recv: &mut RecvBatch, ctx: &mut Context<'_>) -> usize {
        let before = *self.endpoint.stats();
        let n = match self.endpoint.recv_batch(recv) {
            Ok(n) => n,
            Err(e) => fatal_socket_error("receive", &self.endpoint, &e),
        };
        self.metrics.count_io_drops(&before, self.endpoint.stats());
        let now_ns = self.now_ns(ctx.now());
        for (bytes, src) in recv.iter().take(n) {
            self.metrics.datagrams_in.add(1);
            self.metrics.bytes_in.add(bytes.len() as u64);
            let parsed = match &self.mac {
                Some(mac) => mac.open(bytes, self.config.max_datagram),
                None => parse_datagram(bytes, self.config.max_datagram),
            };
            let frames = match parsed {
                Ok(frames) => frames,
                Err(reason) => {
                    self.metrics.drop(reason);
                    continue;
                }
            };
            // A datagram is one kind of traffic in practice; handle frame by frame.
            for frame in frames {
                let result = if frame.header.kind == Kind::Data {
                    match deliver(&mut self.imports, &self.metrics, &frame, src, ctx) {
                        // Only a frame no import takes pays for the export lookup: a topic we
                        // export, sent to us by someone, is a stranger's, not an unknown topic.
                        Err(DropReason::UnknownTopic)
                            if self.exported(frame.header.topic_id).is_some() =>
                        {
                            Err(DropReason::UnknownSender)
                        }
                        other => other,
                    }
                } else {
                    match Control::from_frame(&frame) {
                        Ok(control) => {
                            self.on_control(control, src, now_ns);
                            Ok(())
                        }
                        Err(reason) => Err(reason),
                    }
                };
                if let Err(reason) = result {
                    self.metrics.drop(reason);
                }
            }
        }
        n
    }

    fn on_control(&mut self, control: Control, src: SocketAddr, now_ns: u64) {
        match control {
            Control::Subscribe {
                topic_id,
                fingerprint,
                session,
                cookie,
            } => {
                if !self.allowed(topic_id, src) {
                    self.metrics.drop(DropReason::NotAllowed);
                    return;
                }
                if !self.proven(src, cookie, now_ns) {
                    // Unproven address: the only answer is a challenge, no larger than the
                    // request, and rate-limited per source. A datagram is counted under one
                    // reason only: a bad cookie was counted already, so its refused challenge
                    // is not counted again.
                    if !self.limiter.allow(src.ip(), now_ns) {
                        if cookie.is_none() {
                            self.metrics.drop(DropReason::RateLimited);
                        }
                        return;
                    }
                    let challenge = Control::CookieChallenge {
                        topic_id,
                        fingerprint,
                        session: self.session,
                        cookie: self.jar.issue(src, now_ns),
                    };
                    self.send_control(&challenge, src);
                    return;
                }
                let exported = self.exported(topic_id);
                let refuse = |reason, offered| {
                    Control::Refuse(Refusal {
                        topic_id,
                        requested: fingerprint,
                        offered,
                        session: self.session,
                        reason,
                    })
                };
                let reply = match exported {
                    None => refuse(RefuseReason::UnknownTopic, 0),
                    Some((offered, _)) if offered != fingerprint => {
                        refuse(RefuseReason::FingerprintMismatch, offered)
                    }
                    Some((offered, last_seq)) => {
                        match self.subscribers.renew(src, topic_id, session, now_ns) {
                            Ok(renewal) => {
                                if renewal != crate::Renewal::Renewed {
                                    self.refresh_direct(topic_id);
                                }
                                Control::SubscribeAck {
                                    topic_id,
                                    fingerprint: offered,
                                    session: self.session,
                                    last_seq,
                                    cookie: self.jar.issue(src, now_ns),
                                }
                            }
                            Err(DropReason::TopicFull) => refuse(RefuseReason::TopicFull, offered),
                            Err(_) => refuse(RefuseReason::TableFull, offered),
                        }
                    }
                };
                if let Control::Refuse(_) = reply {
                    self.metrics.refused.add(1);
                }
                self.send_control(&reply, src);
            }
            Control::Unsubscribe {
                topic_id, cookie, ..
            } => {
                // Only the subscriber itself may end its subscription: it proves its address.
                if !self.proven(src, cookie, now_ns) {
                    return;
                }
                if self.subscribers.remove(src, topic_id) {
                    self.refresh_direct(topic_id);
                }
            }
            Control::CookieChallenge {
                topic_id, cookie, ..
            } => {
                let Some(i) = self
                    .imports
                    .iter()
                    .position(|im| im.publisher() == src && im.topic_id() == topic_id)
                else {
                    // Only publishers we subscribe to may challenge us.
                    self.metrics.drop(DropReason::UnknownSender);
                    return;
                };
                let now = self.epoch + Duration::from_nanos(now_ns);
                let recently = self.challenge_answered[i]
                    .is_some_and(|t| now.duration_since(t) < self.config.renew_every);
                if recently || self.refused[i] {
                    self.metrics.drop(DropReason::RateLimited);
                    return;
                }
                self.challenge_answered[i] = Some(now);
                self.import_cookies[i] = Some(cookie);
                let answer = Control::Subscribe {
                    topic_id,
                    fingerprint: self.imports[i].fingerprint(),
                    session: self.session,
                    cookie: Some(cookie),
                };
                self.send_control(&answer, src);
            }
            Control::SubscribeAck {
                topic_id,
                session,
                last_seq,
                cookie,
                ..
            } => match self
                .imports
                .iter()
                .position(|im| im.publisher() == src && im.topic_id() == topic_id)
            {
                Some(i) => {
                    self.import_cookies[i] = Some(cookie);
                    self.imports[i].last_seq(session, last_seq);
                }
                None => self.metrics.drop(DropReason::UnknownSender),
            },
            Control::Heartbeat {
                topic_id,
                session,
                last_seq,
                ..
            } => match find_import(&mut self.imports, src, topic_id) {
                Some(import) => import.last_seq(session, last_seq),
                None => self.metrics.drop(DropReason::UnknownSender),
            },
            Control::Refuse(refusal) => {
                let Some(i) = self
                    .imports
                    .iter()
                    .position(|im| im.publisher() == src && im.topic_id() == refusal.topic_id)
                else {
                    self.metrics.drop(DropReason::UnknownSender);
                    return;
                };
                self.metrics.refused.add(1);
                if !self.refused[i] {
                    self.refused[i] = true;
                    let topic = self.imports[i].topic();
                    self.status.report(format!(
                        "import of topic '{topic}' from {src} refused: {refusal}"
                    ));
                }
            }
        }
    }

    /// Whether `src` may subscribe to `topic_id`: the export's own allowlist, or the bridge's.
    fn allowed(&self, topic_id: u64, src: SocketAddr) -> bool {
        let own = self
            .exports
            .iter()
            .position(|e| e.topic_id() == topic_id)
            .and_then(|i| self.export_allow.get(i)?.as_ref());
        own.unwrap_or(&self.config.allow).contains(src.ip())
    }

    /// Whether `cookie` proves that `src` receives what we send it. A wrong cookie is counted.
    fn proven(&mut self, src: SocketAddr, cookie: Option<Cookie>, now_ns: u64) -> bool {
        match cookie {
            Some(c) if self.jar.verify(src, &c, now_ns) => true,
            Some(_) => {
                self.metrics.drop(DropReason::BadCookie);
                false
            }
            None => false,
        }
    }

    /// The fingerprint and last sequence number of an exported topic (ring-fed or direct).
    fn exported(&self, topic_id: u64) -> Option<(u64, u64)> {
        let ring = self.exports.iter().find(|e| e.topic_id() == topic_id);
        ring.map(|e| (e.fingerprint(), e.last_seq())).or_else(|| {
            self.directs
                .iter()
                .find(|d| d.topic_id == topic_id)
                .map(|d| {
                    let last = d.shared.last_seq.load(std::sync::atomic::Ordering::Acquire);
                    (d.fingerprint, last)
                })
        })
    }

    /// Hands the direct sender of `topic_id`, if any, its new list of subscribers. Allocates
    /// one list: subscriptions change seldom, never per message.
    fn refresh_direct(&mut self, topic_id: u64) {
        if let Some(d) = self.directs.iter_mut().find(|d| d.topic_id == topic_id) {
            let list: Arc<[SocketAddr]> = self.subscribers.subscribers(topic_id).collect();
            d.subscribers.write(list);
        }
        self.refresh_gauges();
    }

    /// Sets the subscribers-per-topic gauges (at once when the table changes, so that a test
    /// or an operator waiting for a subscription sees it without waiting for the next second).
    fn refresh_gauges(&self) {
        let topics = self.exports.iter().map(|e| e.topic_id());
        let topics = topics.chain(self.directs.iter().map(|d| d.topic_id));
        for (topic_id, gauge) in topics.zip(&self.subscriber_gauges) {
            gauge.set(self.subscribers.subscribers(topic_id).count() as u64);
        }
    }

    /// Pumps every export. Returns messages taken.
    fn pump(&mut self) -> usize {
        let mut work = 0;
        let room = self.buf.len() - if self.mac.is_some() { MAC_TAG_LEN } else { 0 };
        let mut side = SendSide {
            endpoint: &mut self.endpoint,
            batch: &mut self.send,
            buf: &mut self.buf[..room],
            subscribers: &self.subscribers,
            session: self.session,
            metrics: &self.metrics,
            seal: self.mac.as_ref().map(|mac| (mac, &mut self.seal_buf[..])),
        };
        for export in &mut self.exports {
            work += export.pump(&mut side, BUDGET);
        }
        for (port, table) in &mut self.compat_exports {
            work += port.pump(&mut self.send, &mut self.buf, table, &self.metrics, BUDGET);
        }
        work
    }

    /// Receives on the compat sockets: control on exports, data on imports.
    fn receive_compat(&mut self, ctx: &mut Context<'_>) -> usize {
        let mut work = 0;
        let now_ns = self.now_ns(ctx.now());
        let Some(recv) = self.recv.as_mut() else {
            return 0;
        };
        for (port, table) in &mut self.compat_exports {
            let before = *port.stats();
            let n = match port.endpoint().recv_batch(recv) {
                Ok(n) => n,
                Err(e) => fatal_socket_error("receive", port.endpoint(), &e),
            };
            self.metrics.count_io_drops(&before, port.stats());
            for (bytes, src) in recv.iter().take(n) {
                self.metrics.datagrams_in.add(1);
                self.metrics.bytes_in.add(bytes.len() as u64);
                if !self.config.allow.contains(src.ip()) {
                    self.metrics.drop(DropReason::NotAllowed);
                    continue;
                }
                if !self.limiter.allow(src.ip(), now_ns) {
                    self.metrics.drop(DropReason::RateLimited);
                    continue;
                }
                match CompatControl::decode(bytes) {
                    Ok(CompatControl::Subscribe) => {
                        if table.renew(src, 0, 0, now_ns).is_err() {
                            self.metrics.drop(DropReason::TableFull);
                        }
                    }
                    Ok(CompatControl::Unsubscribe) => {
                        table.remove(src, 0);
                    }
                    Err(reason) => self.metrics.drop(reason),
                }
            }
            work += n;
        }
        for port in &mut self.compat_imports {
            let before = *port.stats();
            let n = match port.endpoint().recv_batch(recv) {
                Ok(n) => n,
                Err(e) => fatal_socket_error("receive", port.endpoint(), &e),
            };
            self.metrics.count_io_drops(&before, port.stats());
            for (bytes, src) in recv.iter().take(n) {
                self.metrics.datagrams_in.add(1);
                self.metrics.bytes_in.add(bytes.len() as u64);
                if src != port.publisher() {
                    self.metrics.drop(DropReason::UnknownSender);
                    continue;
                }
                if let Err(reason) =
                    port.deliver(bytes, self.config.max_datagram, ctx, &self.metrics)
                {
                    self.metrics.drop(reason);
                }
            }
            work += n;
        }
        work
    }

    /// Sends `Subscribe` for every import (v1 and compat).
    fn renew(&mut self) {
        for i in 0..self.imports.len() {
            if self.refused[i] {
                continue;
            }
            let import = &self.imports[i];
            let control = Control::Subscribe {
                topic_id: import.topic_id(),
                fingerprint: import.fingerprint(),
                session: self.session,
                cookie: self.import_cookies[i],
            };
            let dest = import.publisher();
            self.send_control(&control, dest);
        }
        for port in &mut self.compat_imports {
            let dest = port.publisher();
            let _ = port
                .endpoint()
                .send_to(&CompatControl::Subscribe.encode(), dest);
        }
    }

    /// Sends each export's last sequence number to its subscribers.
    fn heartbeat(&mut self) {
        let timestamp_ns = crate::realtime_ns();
        for i in 0..self.exports.len() {
            let topic_id = self.exports[i].topic_id();
            self.heartbeat_topic(topic_id, timestamp_ns);
        }
        for i in 0..self.directs.len() {
            let topic_id = self.directs[i].topic_id;
            self.heartbeat_topic(topic_id, timestamp_ns);
        }
    }

    fn heartbeat_topic(&mut self, topic_id: u64, timestamp_ns: i64) {
        if self.subscribers.subscribers(topic_id).next().is_none() {
            return;
        }
        let Some((fingerprint, last_seq)) = self.exported(topic_id) else {
            return;
        };
        let control = Control::Heartbeat {
            topic_id,
            fingerprint,
            session: self.session,
            last_seq,
            timestamp_ns,
        };
        let room = self.control_buf.len() - MAC_TAG_LEN;
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(&control).is_ok() {
            fan_out(
                enc.as_bytes(),
                topic_id,
                &mut self.endpoint,
                &mut self.send,
                &self.subscribers,
                &self.metrics,
                self.mac.as_ref().map(|mac| (mac, &mut self.seal_buf[..])),
            );
        }
    }

    /// Refreshes the figures that are sums or gauges.
    fn refresh_metrics(&mut self) {
        let mut loss = LossCounts::default();
        for import in &self.imports {
            add_loss(&mut loss, &import.counts());
        }
        self.metrics.set_loss(&loss);
        self.metrics.set_io(
            std::iter::once(self.endpoint.stats())
                .chain(self.compat_exports.iter().map(|(p, _)| p.stats()))
                .chain(self.compat_imports.iter().map(|p| p.stats())),
        );
        self.refresh_gauges();
    }
}

/// The MAC of a configuration with a pre-shared key.
fn mac_of(config: &BridgeConfig) -> Option<FrameMac> {
    config.psk.as_ref().map(|key| {
        let mac = FrameMac::new(key);
        if config.mac_data {
            mac
        } else {
            mac.control_only()
        }
    })
}

fn find_import(
    imports: &mut [Box<dyn ImportPort>],
    src: SocketAddr,
    topic_id: u64,
) -> Option<&mut Box<dyn ImportPort>> {
    imports
        .iter_mut()
        .find(|i| i.topic_id() == topic_id && i.publisher() == src)
}

/// Hands a data frame to the import it belongs to. A frame of a topic this bridge imports from
/// someone else is `UnknownSender`; of a topic it does not import, `UnknownTopic`.
fn deliver(
    imports: &mut [Box<dyn ImportPort>],
    metrics: &NetMetrics,
    frame: &crate::Frame<'_>,
    src: SocketAddr,
    ctx: &mut Context<'_>,
) -> Result<(), DropReason> {
    let topic_id = frame.header.topic_id;
    let found = imports
        .iter()
        .position(|i| i.topic_id() == topic_id && i.publisher() == src);
    match found {
        Some(i) => imports[i].deliver(frame, ctx, metrics),
        None if imports.iter().any(|i| i.topic_id() == topic_id) => Err(DropReason::UnknownSender),
        None => Err(DropReason::UnknownTopic),
    }
}

impl Actor for BridgeActor {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        // Send first: what the bus queued since the last round (a reply, say) leaves before
        // this round's receive system calls. NB: an empty `recvmmsg` costs ~0.5 us here (the
        // `udp` benchmark), which receiving first added to every same-thread round trip.
        let mut work = self.pump();
        work += self.receive(ctx);
        if !self.compat_exports.is_empty() || !self.compat_imports.is_empty() {
            work += self.receive_compat(ctx);
        }
        work
    }

    fn drain(&mut self, _ctx: &mut Context<'_>) -> usize {
        // Stopping: send what the bus still holds for us, take nothing new from the network.
        self.pump()
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        if now >= self.next_renew {
            self.next_renew = now + self.config.renew_every;
            self.renew();
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.config.heartbeat_every;
            self.heartbeat();
        }
        if now >= self.next_expire {
            self.next_expire = now + Duration::from_secs(1);
            let now_ns = self.now_ns(now);
            let expired = self.subscribers.expire(now_ns, |s| {
                log::info!(
                    "subscriber {} of topic {:#018x} expired",
                    s.addr,
                    s.topic_id
                );
            });
            if expired > 0 {
                for i in 0..self.directs.len() {
                    let topic_id = self.directs[i].topic_id;
                    self.refresh_direct(topic_id);
                }
            }
            if now >= self.next_reseed {
                self.next_reseed = now + self.config.cookie_window;
                match random_secret() {
                    Ok(entropy) => self.jar.reseed(entropy),
                    Err(e) => log::warn!("no OS randomness to reseed the cookie secret: {e}"),
                }
            }
            for (_, table) in &mut self.compat_exports {
                table.expire(now_ns, |s| {
                    log::info!("compat subscriber {} expired", s.addr)
                });
            }
            self.refresh_metrics();
        }
    }

    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        for i in 0..self.imports.len() {
            if self.refused[i] {
                continue;
            }
            let import = &self.imports[i];
            let Some(cookie) = self.import_cookies[i] else {
                continue; // Never admitted: nothing to end.
            };
            let control = Control::Unsubscribe {
                topic_id: import.topic_id(),
                fingerprint: import.fingerprint(),
                session: self.session,
                cookie: Some(cookie),
            };
            let dest = import.publisher();
            self.send_control(&control, dest);
        }
        for port in &mut self.compat_imports {
            let dest = port.publisher();
            let _ = port
                .endpoint()
                .send_to(&CompatControl::Unsubscribe.encode(), dest);
        }
        self.refresh_metrics();
    }
}
