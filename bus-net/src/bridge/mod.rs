//! The bridge: an actor that makes topics of one bus appear on another bus on another host.
//!
//! - this module: [`Bridge`], the builder, and what it hands the actor.
//! - `config`: [`BridgeConfig`], every setting with its default.
//! - `actor`: [`BridgeActor`], the thin actor: moves bytes between its sockets, the bus's
//!   rings and the sans-IO [`Endpoint`](crate::Endpoint), which makes every protocol decision.
//! - `ports`: one typed port per exported or imported topic (native and compat).
//! - `direct`: a topic sent from the publishing actor's own thread.
//! - `services`: each exported or imported service's port: the bridge's actor calls or
//!   serves it on the local bus itself.
//! - `wire`: a UDP socket as the endpoint's [`Wire`](crate::Wire).
//!
//! The bridge joins the two lower layers to the bus. Exports take the rings the bus made for
//! their topics (`ActorBuilder::takes`) and are pumped every round into datagrams, several
//! messages to a datagram when several are queued (never waiting to fill one), fanned out with
//! one `sendmmsg` per datagram. Imports are fed from `recvmmsg` batches: each frame is checked
//! (fingerprint, sequence), decoded once and published on the local bus. Timers on the bridge's
//! tick (every millisecond) renew subscriptions, send heartbeats and expire subscribers.

mod actor;
mod config;
mod direct;
mod ports;
mod services;
mod wire;

pub use actor::BridgeActor;
pub use config::{
    BridgeConfig, DiscoveryConfig, MulticastConfig, ServiceConfig, DEFAULT_CACHED_PER_SOURCE,
    DEFAULT_CALLS_IN_FLIGHT, DEFAULT_DISCOVERY_GROUP, DEFAULT_REPLY_RATE, DEFAULT_REQUEST_LIMIT,
    DEFAULT_SERVED_CALLS,
};
use direct::DirectPort;
pub use direct::{DirectError, DirectSender};
pub use wire::SocketWire;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use llbus::{
    ActorBuilder, BusBuilder, Component, Message, Service, Setup, Topic, TopicName, TopicPattern,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use self::ports::{
    CompatExport, CompatExportPort, CompatImport, CompatImportPort, Export, ExportPort, Import,
    ImportPort,
};
use self::services::{DeclareService, MakeImported, MakeServed};
use crate::endpoint::{mac_of, EncodedShape};
use crate::session::canonical;
use crate::{new_session_id, Allowlist, UdpEndpoint};
use crate::{ServiceImportSpec, ServiceSpec};

/// What a running bridge reports outside the bus: errors a user must see (a subscription
/// refused for good names the topic and both fingerprints; a socket that failed names the
/// bridge), and warnings about conditions it retries by itself (a subscription refused for
/// now because the publisher's table or topic is full). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct BridgeStatus {
    errors: Arc<Mutex<Vec<String>>>,
    warnings: Arc<Mutex<Vec<String>>>,
    missed: Arc<Mutex<Vec<Missed>>>,
    discovered: Arc<Mutex<Vec<Discovered>>>,
}

/// A publisher that discovery follows for a topic of [`Bridge::discover`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// The topic.
    pub topic: Arc<str>,
    /// The publisher's data address.
    pub publisher: SocketAddr,
    /// Its session: the one the subscription follows once established, the announced one
    /// before.
    pub session: u64,
    /// Whether the subscription is established (the handshake completed).
    pub established: bool,
}

/// What one subscriber of a reliable export missed: sequence numbers it asked for after they
/// had left history. Counted for that subscriber alone (the others are not slowed or charged);
/// see `docs/PROTOCOL.md`, "Flow control".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missed {
    /// The exported topic.
    pub topic: Arc<str>,
    /// The subscriber's address.
    pub subscriber: std::net::SocketAddr,
    /// Sequence numbers it asked for that had left history.
    pub missed: u64,
}

impl BridgeStatus {
    /// Every error reported so far, oldest first: a subscription refused for good, a
    /// publisher of a subscribed or discovered topic whose fingerprint is not the local
    /// type's (also a warning, once per topic: with only that publisher nothing arrives), a
    /// socket that failed.
    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every warning reported so far, oldest first: transient conditions the bridge retries.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn report(&self, error: String) {
        log::error!("{error}");
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(error);
    }

    /// Per subscriber of a reliable export that missed anything beyond history, what it
    /// missed (refreshed once a second).
    pub fn missed(&self) -> Vec<Missed> {
        self.missed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records that `subscriber` of `topic` has now missed `missed` in all; `true` if that is
    /// news.
    pub(crate) fn set_missed(
        &self,
        topic: &Arc<str>,
        subscriber: std::net::SocketAddr,
        missed: u64,
    ) -> bool {
        let mut all = self.missed.lock().unwrap_or_else(PoisonError::into_inner);
        match all
            .iter_mut()
            .find(|m| m.topic == *topic && m.subscriber == subscriber)
        {
            Some(m) if m.missed == missed => false,
            Some(m) => {
                m.missed = missed;
                true
            }
            None => {
                all.push(Missed {
                    topic: topic.clone(),
                    subscriber,
                    missed,
                });
                true
            }
        }
    }

    /// The publishers discovery follows now (updated as they are found, established and lost).
    pub fn discovered(&self) -> Vec<Discovered> {
        self.discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_discovered(&self, found: Vec<Discovered>) {
        *self
            .discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = found;
    }

    /// A publisher whose fingerprint differs from the local type's (discovered, or
    /// subscribed and refused): logged at warn, and kept both as a warning and as an error,
    /// since a subscriber with only that publisher receives nothing and must be told why. The
    /// caller reports each topic once (the endpoint's `Event::Mismatched` comes once per
    /// topic).
    pub(crate) fn mismatch(&self, message: String) {
        self.warn(message.clone());
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message);
    }

    pub(crate) fn warn(&self, warning: String) {
        log::warn!("{warning}");
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(warning);
    }
}

type PatternDeclare =
    for<'a> fn(ActorBuilder<'a, BridgeActor>, &TopicPattern) -> ActorBuilder<'a, BridgeActor>;

/// Declares what the bridge's actor takes or publishes for one named topic.
type DeclareOn =
    for<'a> fn(ActorBuilder<'a, BridgeActor>, &TopicName) -> ActorBuilder<'a, BridgeActor>;

struct ExportDecl {
    /// Who may subscribe to this export; `None` means the bridge's `allow`.
    allow: Option<Allowlist>,
    /// The multicast group its data goes to (`export_multicast`).
    group: Option<SocketAddr>,
    /// Kept in history and retransmitted on NAK (`export_reliable`).
    reliable: bool,
    /// Messages sent to a newly admitted subscriber (`export_reliable_last`).
    late_join: usize,
    /// The type's shape, served on request (`None` if it could not be encoded: refused at
    /// start).
    shape: Option<EncodedShape>,
    /// The topic, as the program names it (the bus may run it under another name).
    topic: TopicName,
    declare: DeclareOn,
    make: fn(&mut Setup<'_>, &TopicName) -> Box<dyn ExportPort>,
}

struct ImportDecl {
    /// The topic, as the program names it (the bus may run it under another name).
    topic: TopicName,
    declare: DeclareOn,
    /// The publisher; `None`: whichever publishers announce the topic (`discover`).
    publisher: Option<SocketAddr>,
    /// Delivered in order, gaps NAKed (`import_reliable`).
    reliable: bool,
    make: fn(&mut Setup<'_>, &TopicName) -> Box<dyn ImportPort>,
}

/// Topics imported by pattern (`discover_matching`).
struct PatternImportDecl {
    pattern: TopicPattern,
    fingerprint: u64,
    reliable: bool,
    declare: PatternDeclare,
    /// One port per local topic the pattern matched (`Setup::outputs_matching`).
    make: fn(&mut Setup<'_>, &TopicPattern) -> Vec<Box<dyn ImportPort>>,
}

struct CompatExportDecl {
    topic: TopicName,
    declare: DeclareOn,
    endpoint: UdpEndpoint,
    make: fn(&mut Setup<'_>, &TopicName) -> Box<dyn CompatExportPort>,
}

struct CompatImportDecl {
    topic: TopicName,
    declare: DeclareOn,
    endpoint: UdpEndpoint,
    publisher: SocketAddr,
    make: fn(&mut Setup<'_>, &TopicName) -> Box<dyn CompatImportPort>,
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
    /// Imports whose publisher this socket cannot reach (the other address family): refused
    /// when the bus is built, each naming the import.
    family_errors: Vec<String>,
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
    /// Binds the bridge's native socket to `addr` now, so a port in use is an error here.
    /// `[::]` serves IPv4 and IPv6 peers alike (dual stack).
    ///
    /// # Errors
    /// If `addr` does not resolve or cannot be bound.
    pub fn bind(addr: impl ToSocketAddrs) -> std::io::Result<Bridge> {
        Self::bind_with(addr, BridgeConfig::default())
    }

    /// Like [`bind`](Self::bind), with settings.
    ///
    /// # Errors
    /// If `addr` does not resolve or cannot be bound, or `config.max_datagram` is too small
    /// for a control frame (72 bytes, 88 with a key) or larger than 65507 bytes.
    pub fn bind_with(addr: impl ToSocketAddrs, config: BridgeConfig) -> std::io::Result<Bridge> {
        config.check()?;
        let endpoint = UdpEndpoint::bind(resolve(addr)?, &config.socket)?;
        let max_datagram = config.max_datagram_for(endpoint.local_addr());
        Ok(Bridge {
            name: format!("bridge-{}", endpoint.local_addr().port()),
            family_errors: Vec::new(),
            parts: Parts {
                endpoint,
                config,
                exports: Vec::new(),
                imports: Vec::new(),
                matching: Vec::new(),
                compat_exports: Vec::new(),
                compat_imports: Vec::new(),
                directs: Vec::new(),
                served: Vec::new(),
                imported: Vec::new(),
                declare_services: Vec::new(),
                session: new_session_id(),
                status: BridgeStatus::default(),
                group: None,
                max_datagram,
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
        self.direct_on(&Topic::<T>::of())
    }

    /// [`direct`](Self::direct) for a named topic. The sender does not go through the bus, so
    /// the bus's [`remap`](llbus::BusBuilder::remap) does not reach it: the name given is the
    /// one on the wire.
    ///
    /// # Errors
    /// If the bridge's socket cannot be duplicated for the sender.
    pub fn direct_on<T: Message + Serialize>(
        &mut self,
        topic: &Topic<T>,
    ) -> std::io::Result<DirectSender<T>> {
        let endpoint = self.parts.endpoint.try_clone()?;
        let (sender, port) = DirectSender::<T>::new(
            topic.name(),
            endpoint,
            self.parts.max_datagram,
            self.parts.config.batch,
            self.parts.session,
            // Each direct sender seals on a lane of its own (the bridge's is 0), so the packet
            // numbers of one session never collide in a receiver's replay window.
            mac_of(&self.parts.config).map(|m| {
                let lane = u8::try_from(self.parts.directs.len() + 1).unwrap_or(u8::MAX);
                m.for_lane(lane)
            }),
        );
        if port.shape.is_none() {
            self.family_errors.push(format!(
                "bridge '{}': the direct topic '{}' cannot serve its schema: {}; simplify the type",
                self.name,
                topic.name(),
                EncodedShape::new(&T::schema())
                    .err()
                    .map_or_else(String::new, |e| e.to_string()),
            ));
        }
        self.parts.directs.push(port);
        Ok(sender)
    }

    /// Checks what can be checked before the bus starts: every import's publisher must be
    /// reachable from the bridge's socket (same address family, or a dual-stack `[::]`).
    ///
    /// # Errors
    /// A message naming the bridge, the topic, the publisher and the bound address.
    pub fn check(&self) -> Result<(), String> {
        match self.family_errors.first() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
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

    /// The address the native socket is bound to (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.parts.endpoint.local_addr()
    }

    /// A handle on the errors the bridge reports while it runs.
    pub fn status(&self) -> BridgeStatus {
        self.parts.status.clone()
    }

    /// Lets remote callers call `service`, which an actor of the local bus serves: a bridge
    /// elsewhere that [`import_service`](Self::import_service)s it subscribes to it by the
    /// handshake (this bridge's allowlist and limits apply) and each of its calls is made on
    /// the local bus, once, by the bridge's actor itself (as any actor calls a service), with
    /// the caller's remaining time as its timeout. Replies go
    /// back out of the caller host's reply budget ([`ServiceConfig`]); see
    /// `docs/PROTOCOL.md`, "Services".
    pub fn export_service<Req, Rep>(mut self, service: &Service<Req, Rep>) -> Self
    where
        Req: Message + DeserializeOwned + Clone,
        Rep: Message + Serialize + Clone,
    {
        let (port, declare) = services::export(service);
        // Served for the service's topic id, so a tool without the types calls it.
        let shape =
            match EncodedShape::new(&llbus::schema::Shape::service(Req::schema(), Rep::schema())) {
                Ok(shape) => Some(shape),
                Err(e) => {
                    self.family_errors.push(format!(
                        "bridge '{}': the service '{}' cannot serve its schema: {e}; simplify its \
                     types",
                        self.name,
                        service.name(),
                    ));
                    None
                }
            };
        self.parts.served.push((
            ServiceSpec {
                service: Arc::from(service.name().as_str()),
                topic_id: service.name().id(),
                request_fingerprint: <llbus::Request<Req> as Message>::FINGERPRINT,
                reply_fingerprint: <llbus::Reply<Rep> as Message>::FINGERPRINT,
                shape,
                allow: None,
            },
            port,
        ));
        self.parts.declare_services.push(declare);
        self
    }

    /// Serves `service` on the local bus by calling it at the bridge at `server`, which
    /// [`export_service`](Self::export_service)s it: the bridge's actor itself serves it (as
    /// any actor serves a service), and each call goes to the server as a request, resent on a
    /// backoff until its reply or the local caller's deadline ([`llbus::Request::deadline`]),
    /// at most [`ServiceConfig::call_timeout`]. A call ends with the remote reply, or with
    /// the remote error; `CallError::Timeout` when no reply came in time,
    /// `CallError::Refused` when the server refuses the service (unknown there, of other
    /// types, or this host may not call it), `CallError::Stopped` when this bus stops with the
    /// call open, `CallError::QueueFull`
    /// when the server (or this bridge) has too many calls in flight, or the reply was over
    /// this host's reply budget there, `CallError::Dropped` when the request or the reply does
    /// not fit in one datagram. The bridge gives up with its local caller.
    pub fn import_service<Req, Rep>(
        mut self,
        service: &Service<Req, Rep>,
        server: SocketAddr,
    ) -> Self
    where
        Req: Message + Serialize + Clone,
        Rep: Message + DeserializeOwned + Clone,
    {
        let server = canonical(server);
        let local = self.parts.endpoint.local_addr();
        if !reachable(local, server) {
            self.family_errors.push(format!(
                "bridge '{}': the import of service '{}' from {server} cannot work: the bridge \
                 is bound to {local}, which cannot reach that address family; bind the bridge \
                 to [::] or to an address of the server's family",
                self.name,
                service.name(),
            ));
        }
        let (port, declare) = services::import(service, self.parts.config.services.call_timeout);
        self.parts.imported.push((
            ServiceImportSpec {
                service: Arc::from(service.name().as_str()),
                topic_id: service.name().id(),
                request_fingerprint: <llbus::Request<Req> as Message>::FINGERPRINT,
                reply_fingerprint: <llbus::Reply<Rep> as Message>::FINGERPRINT,
                server,
            },
            port,
        ));
        self.parts.declare_services.push(declare);
        self
    }

    /// Serves topic `T` of the local bus to remote subscribers.
    pub fn export<T: Message + Serialize + Clone>(self) -> Self {
        self.export_on(&Topic::<T>::of())
    }

    /// Serves `topic` of the local bus to remote subscribers, under the name it runs under on
    /// the bus (after the bus's remapping): its id is the one on the wire and in announcements.
    /// The other `export_*` methods each have an `_on` form for a named topic too; two topics
    /// of one type are two exports.
    pub fn export_on<T: Message + Serialize + Clone>(mut self, topic: &Topic<T>) -> Self {
        let shape = match EncodedShape::new(&T::schema()) {
            Ok(shape) => Some(shape),
            Err(e) => {
                self.family_errors.push(format!(
                    "bridge '{}': the export of topic '{}' cannot serve its schema: {e}; \
                     simplify the type",
                    self.name,
                    topic.name(),
                ));
                None
            }
        };
        self.parts.exports.push(ExportDecl {
            allow: None,
            group: None,
            reliable: false,
            late_join: 0,
            shape,
            topic: topic.name().clone(),
            declare: |b, name| b.takes_on(&Topic::<T>::with_name(name.clone())),
            make: Export::<T>::make,
        });
        self
    }

    /// [`export_reliable`](Self::export_reliable) of a named topic.
    pub fn export_reliable_on<T: Message + Serialize + Clone>(mut self, topic: &Topic<T>) -> Self {
        self = self.export_on(topic);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// [`export_multicast`](Self::export_multicast) of a named topic.
    pub fn export_multicast_on<T: Message + Serialize + Clone>(
        mut self,
        topic: &Topic<T>,
        group: SocketAddr,
    ) -> Self {
        self = self.export_on(topic);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.group = Some(group);
        }
        self
    }

    /// [`import`](Self::import) of a named topic: subscribes to `topic` at `publisher` (by its
    /// id: the publisher's name for it must be the same) and publishes what arrives on the
    /// local bus under that topic.
    pub fn import_on<T: Message + DeserializeOwned + Clone>(
        mut self,
        topic: &Topic<T>,
        publisher: SocketAddr,
    ) -> Self {
        let publisher = canonical(publisher);
        let local = self.parts.endpoint.local_addr();
        if !reachable(local, publisher) {
            self.family_errors.push(format!(
                "bridge '{}': the import of topic '{}' from {publisher} cannot work: the bridge is \
                 bound to {local}, an IPv{} socket, which cannot reach an IPv{} address; bind \
                 the bridge to [::] (both families) or to an address of the publisher's family",
                self.name,
                topic.name(),
                if local.is_ipv4() { 4 } else { 6 },
                if publisher.is_ipv4() { 4 } else { 6 },
            ));
        }
        self.push_import(topic, Some(publisher));
        self
    }

    /// [`import_reliable`](Self::import_reliable) of a named topic.
    pub fn import_reliable_on<T: Message + DeserializeOwned + Clone>(
        mut self,
        topic: &Topic<T>,
        publisher: SocketAddr,
    ) -> Self {
        self = self.import_on(topic, publisher);
        if let Some(decl) = self.parts.imports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// [`discover`](Self::discover) of a named topic: follows every publisher that announces
    /// `topic` (by its id).
    pub fn discover_on<T: Message + DeserializeOwned + Clone>(mut self, topic: &Topic<T>) -> Self {
        self = self.announce();
        self.push_import(topic, None);
        self
    }

    /// [`discover_reliable`](Self::discover_reliable) of a named topic.
    pub fn discover_reliable_on<T: Message + DeserializeOwned + Clone>(
        mut self,
        topic: &Topic<T>,
    ) -> Self {
        self = self.discover_on(topic);
        if let Some(decl) = self.parts.imports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// [`export_reliable_last`](Self::export_reliable_last) of a named topic.
    pub fn export_reliable_last_on<T: Message + Serialize + Clone>(
        mut self,
        topic: &Topic<T>,
        k: usize,
    ) -> Self {
        self = self.export_reliable_on(topic);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.late_join = k;
        }
        self
    }

    /// [`export_reliable_multicast`](Self::export_reliable_multicast) of a named topic.
    pub fn export_reliable_multicast_on<T: Message + Serialize + Clone>(
        mut self,
        topic: &Topic<T>,
        group: SocketAddr,
    ) -> Self {
        self = self.export_multicast_on(topic, group);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// [`export_to`](Self::export_to) of a named topic.
    pub fn export_to_on<T: Message + Serialize + Clone>(
        mut self,
        topic: &Topic<T>,
        allow: Allowlist,
    ) -> Self {
        self = self.export_on(topic);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.allow = Some(allow);
        }
        self
    }

    /// Follows every publisher, of every topic of type `T` whose name matches `pattern`, that
    /// a local actor or handle subscribes to, as [`discover_on`](Self::discover_on) does for
    /// one topic: `Bridge::bind(addr)?.discover_matching::<Quote>(&TopicPattern::new("md.quote.*")?)`
    /// with local subscriptions to `md.quote.nyse` and `md.quote.nasdaq` imports both, each
    /// under its own name (so `Context::topic` tells them apart), from whichever publishers
    /// announce them, as they appear and leave.
    ///
    /// The local names are fixed when the bus starts (the bus wires each subscription then):
    /// the bridge publishes every topic the pattern matches among the bus's subscriptions,
    /// after remapping (never its own exports). Announced names the pattern matches and no
    /// local subscriber takes are not subscribed to; they are counted in the
    /// `discovery.unsubscribed` metric. One of another type (another fingerprint) is never
    /// delivered: it is counted in `discovery.mismatched` and reported, once per topic, in
    /// [`BridgeStatus::warnings`]. A pattern that matches no local subscription is reported
    /// there too when the bridge starts.
    pub fn discover_matching<T: Message + DeserializeOwned + Clone>(
        mut self,
        pattern: &TopicPattern,
    ) -> Self {
        self = self.announce();
        self.parts.matching.push(PatternImportDecl {
            pattern: pattern.clone(),
            fingerprint: T::FINGERPRINT,
            reliable: false,
            declare: |b, p| b.publishes_matching::<T>(p),
            make: Import::<T>::make_matching,
        });
        self
    }

    /// Like [`discover_matching`](Self::discover_matching), reliably (see
    /// [`import_reliable`](Self::import_reliable)).
    pub fn discover_reliable_matching<T: Message + DeserializeOwned + Clone>(
        mut self,
        pattern: &TopicPattern,
    ) -> Self {
        self = self.discover_matching::<T>(pattern);
        if let Some(decl) = self.parts.matching.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// Serves topic `T` like [`export`](Self::export), reliably: the last
    /// [`ReliableConfig::history`](crate::ReliableConfig::history) messages are kept (memory
    /// allocated at start) and retransmitted to an admitted subscriber that NAKs them. A
    /// subscriber that imports it with [`import_reliable`](Self::import_reliable) gets every
    /// message in order, or a report of the range that could not be recovered. A plain
    /// [`import`](Self::import) of it works as for a best-effort export.
    pub fn export_reliable<T: Message + Serialize + Clone>(mut self) -> Self {
        self = self.export::<T>();
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// Serves topic `T` like [`export_reliable`](Self::export_reliable), and sends a newly
    /// admitted subscriber the last `k` messages (at most the history; `1`: the last value),
    /// so a late joiner starts with state. Messages are kept even while nobody subscribes.
    /// The subscription is acknowledged with the sequence number before them, so the
    /// subscriber expects them (a reliable one NAKs any it misses).
    pub fn export_reliable_last<T: Message + Serialize + Clone>(mut self, k: usize) -> Self {
        self = self.export_reliable::<T>();
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.late_join = k;
        }
        self
    }

    /// Subscribes to topic `T` like [`import`](Self::import), reliably: messages are
    /// delivered in sequence order; a gap is NAKed to the publisher (which must export the
    /// topic with [`export_reliable`](Self::export_reliable)) and waits at most
    /// [`ReliableConfig::gap_deadline`](crate::ReliableConfig::gap_deadline); what cannot be
    /// recovered is counted in the `unrecovered` metric and delivery goes on.
    pub fn import_reliable<T: Message + DeserializeOwned + Clone>(
        mut self,
        publisher: SocketAddr,
    ) -> Self {
        self = self.import::<T>(publisher);
        if let Some(decl) = self.parts.imports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// Serves topic `T` like [`export`](Self::export), sending its data to multicast group
    /// `group` (address and port): one datagram per batch for every subscriber that receives
    /// the group, by unicast to the others. Subscribers subscribe, renew and are counted as
    /// for any export (`docs/PROTOCOL.md`, "Multicast data"); one that stops receiving the
    /// group is served by unicast again within a few heartbeats. The TTL and interface of
    /// multicast sends are [`BridgeConfig::multicast`]'s.
    pub fn export_multicast<T: Message + Serialize + Clone>(mut self, group: SocketAddr) -> Self {
        self = self.export::<T>();
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.group = Some(group);
        }
        self
    }

    /// Serves topic `T` like [`export_reliable`](Self::export_reliable), sending its data to
    /// multicast group `group` as [`export_multicast`](Self::export_multicast) does; NAKs come
    /// by unicast, and what members that receive the group lost is retransmitted to the group,
    /// once for all of them (`docs/PROTOCOL.md`, "Multicast data").
    pub fn export_reliable_multicast<T: Message + Serialize + Clone>(
        mut self,
        group: SocketAddr,
    ) -> Self {
        self = self.export_multicast::<T>(group);
        if let Some(decl) = self.parts.exports.last_mut() {
            decl.reliable = true;
        }
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
    ///
    /// If `publisher` is of an address family the bridge's socket cannot reach (an IPv6
    /// publisher from a bridge bound to an IPv4 address), the bus refuses to start
    /// (`StartError::Invalid`, naming the bridge) with a message that names the topic,
    /// the publisher and the bound address. Bind `[::]` (dual stack) to reach both.
    /// [`Bridge::check`] reports the same before the bus is built.
    pub fn import<T: Message + DeserializeOwned + Clone>(self, publisher: SocketAddr) -> Self {
        self.import_on(&Topic::<T>::of(), publisher)
    }

    fn push_import<T: Message + DeserializeOwned + Clone>(
        &mut self,
        topic: &Topic<T>,
        publisher: Option<SocketAddr>,
    ) {
        // Imports of one topic from several publishers publish through one output.
        let declared = self.parts.imports.iter().any(|i| i.topic == *topic.name());
        self.parts.imports.push(ImportDecl {
            topic: topic.name().clone(),
            declare: if declared {
                |b, _| b
            } else {
                |b, name| b.publishes_to(&Topic::<T>::with_name(name.clone()))
            },
            publisher,
            reliable: false,
            make: Import::<T>::make,
        });
    }

    /// Subscribes to topic `T` from every publisher that announces it (discovery, which this
    /// turns on with [`DiscoveryConfig::default`] unless [`discovery`](Self::discovery) set
    /// it), several at once, and publishes what arrives on the local bus. Publishers that
    /// appear are subscribed to, one that restarts is followed, one that stops announcing is
    /// dropped after three of its periods. An announcement only proposes: each subscription
    /// is made by the ordinary handshake (`SECURITY.md`, "Discovery").
    pub fn discover<T: Message + DeserializeOwned + Clone>(self) -> Self {
        self.discover_on(&Topic::<T>::of())
    }

    /// Like [`discover`](Self::discover), reliably (see [`import_reliable`](Self::import_reliable)).
    pub fn discover_reliable<T: Message + DeserializeOwned + Clone>(mut self) -> Self {
        self = self.discover::<T>();
        if let Some(decl) = self.parts.imports.last_mut() {
            decl.reliable = true;
        }
        self
    }

    /// Announces this bridge's exports (turning discovery on with
    /// [`DiscoveryConfig::default`] unless [`discovery`](Self::discovery) set it), so that
    /// bridges that [`discover`](Self::discover) their topics find it.
    pub fn announce(mut self) -> Self {
        if self.parts.config.discovery.is_none() {
            self.parts.config.discovery = Some(DiscoveryConfig::default());
        }
        self
    }

    /// Turns discovery on with `config` (group, peers, period, caps).
    pub fn discovery(mut self, config: DiscoveryConfig) -> Self {
        self.parts.config.discovery = Some(config);
        self
    }

    /// Serves topic `T` in the ll-udp-pubsub v0.1 format on a socket of its own bound to
    /// `bind`: subscribers send its 4-byte `Subscribe` once a second, and receive every message
    /// as a `Packet<T> { data, sent_ts }`. No topic, sequence or type check exists in that format.
    ///
    /// # Errors
    /// If `bind` does not resolve or cannot be bound.
    pub fn export_compat<T: Message + Serialize + Clone>(
        self,
        bind: impl ToSocketAddrs,
    ) -> std::io::Result<Self> {
        self.export_compat_on(&Topic::<T>::of(), bind)
    }

    /// [`export_compat`](Self::export_compat) of a named topic (the format carries no topic:
    /// the name chooses which of the bus's topics the socket serves).
    ///
    /// # Errors
    /// If `bind` does not resolve or cannot be bound.
    pub fn export_compat_on<T: Message + Serialize + Clone>(
        mut self,
        topic: &Topic<T>,
        bind: impl ToSocketAddrs,
    ) -> std::io::Result<Self> {
        let endpoint = UdpEndpoint::bind(resolve(bind)?, &self.parts.config.socket)?;
        self.parts.compat_exports.push(CompatExportDecl {
            topic: topic.name().clone(),
            declare: |b, name| b.takes_on(&Topic::<T>::with_name(name.clone())),
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
        self,
        bind: impl ToSocketAddrs,
        publisher: SocketAddr,
    ) -> std::io::Result<Self> {
        self.import_compat_on(&Topic::<T>::of(), bind, publisher)
    }

    /// [`import_compat`](Self::import_compat) into a named topic of the local bus.
    ///
    /// # Errors
    /// If `bind` does not resolve or cannot be bound.
    pub fn import_compat_on<T: Message + DeserializeOwned + Clone>(
        mut self,
        topic: &Topic<T>,
        bind: impl ToSocketAddrs,
        publisher: SocketAddr,
    ) -> std::io::Result<Self> {
        let endpoint = UdpEndpoint::bind(resolve(bind)?, &self.parts.config.socket)?;
        // Compat imports into one topic publish through one output.
        let declared = (self.parts.compat_imports.iter()).any(|i| i.topic == *topic.name());
        self.parts.compat_imports.push(CompatImportDecl {
            topic: topic.name().clone(),
            declare: if declared {
                |b, _| b
            } else {
                |b, name| b.publishes_to(&Topic::<T>::with_name(name.clone()))
            },
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
        let Bridge {
            name,
            mut parts,
            mut family_errors,
        } = self;
        if let Err(e) = parts.join_group() {
            family_errors.push(format!("bridge '{name}': {e}"));
        }
        let named: Vec<(DeclareOn, TopicName)> = (parts.exports.iter())
            .map(|e| (e.declare, e.topic.clone()))
            .chain((parts.imports.iter()).map(|i| (i.declare, i.topic.clone())))
            .chain((parts.compat_exports.iter()).map(|e| (e.declare, e.topic.clone())))
            .chain((parts.compat_imports.iter()).map(|i| (i.declare, i.topic.clone())))
            .collect();
        let patterns: Vec<(PatternDeclare, TopicPattern)> = (parts.matching.iter())
            .map(|m| (m.declare, m.pattern.clone()))
            .collect();
        let declare_services = std::mem::take(&mut parts.declare_services);
        let mut parts = Some(parts);
        let actor_name = name.clone();
        let tick = Duration::from_millis(1);
        let mut builder = bus
            .actor(&name, move |setup: &mut Setup<'_>| match parts.take() {
                Some(parts) => BridgeActor::new(setup, &actor_name, parts),
                // The bus never remakes an actor that takes its own rings (no Restart).
                None => panic!("a bridge's actor cannot be made twice"),
            })
            .tick_every(tick)
            // Imports use `try_publish`: the bridge never waits on the local bus.
            .never_waits()
            // It sleeps on its sockets (`on_start`), with `Backoff` too.
            .watches_fds();
        for (declare, topic) in named {
            builder = declare(builder, &topic);
        }
        for (declare, pattern) in patterns {
            builder = declare(builder, &pattern);
        }
        for declare in declare_services {
            builder = declare(builder);
        }
        // Configuration errors: the bus's `start()` refuses with them, naming the bridge.
        for error in family_errors {
            builder = builder.invalid(error);
        }
        builder
    }
}

/// Whether a socket bound to `local` can send to `peer`: same family, or a dual-stack `[::]`
/// socket (which reaches IPv4 peers as `::ffff:a.b.c.d`).
fn reachable(local: SocketAddr, peer: SocketAddr) -> bool {
    match (local, peer) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => true,
        (SocketAddr::V6(l), SocketAddr::V4(_)) => l.ip().is_unspecified(),
        (SocketAddr::V4(_), SocketAddr::V6(_)) => false,
    }
}

/// Everything the bridge's factory consumes.
struct Parts {
    /// The largest datagram, resolved for the socket's address family.
    max_datagram: usize,
    endpoint: UdpEndpoint,
    config: BridgeConfig,
    exports: Vec<ExportDecl>,
    imports: Vec<ImportDecl>,
    matching: Vec<PatternImportDecl>,
    compat_exports: Vec<CompatExportDecl>,
    compat_imports: Vec<CompatImportDecl>,
    directs: Vec<DirectPort>,
    /// Exported services: the endpoint's spec and how to make the service's port.
    served: Vec<(ServiceSpec, MakeServed)>,
    /// Imported services, likewise.
    imported: Vec<(ServiceImportSpec, MakeImported)>,
    /// What the bridge's actor declares for each service (it calls or serves it).
    declare_services: Vec<DeclareService>,
    session: u64,
    status: BridgeStatus,
    /// The socket the discovery group is heard on, if discovery has a group.
    group: Option<UdpEndpoint>,
}

impl Parts {
    /// With discovery on: joins its group (on the interface configured, else the one of the
    /// bridge's bound address if it names one) and sets the native socket's multicast
    /// options, from which announcements leave.
    fn join_group(&mut self) -> Result<(), String> {
        let local = self.endpoint.local_addr();
        let multicast = &self.config.multicast;
        let interface = multicast
            .interface
            .or_else(|| (!local.ip().is_unspecified()).then(|| local.ip()));
        // Every export's group, not only the first: a second one that is not a multicast
        // address would have its data and heartbeats sent to a host that never asked.
        for group in self.exports.iter().filter_map(|e| e.group) {
            if !group.ip().is_multicast() || !reachable(local, group) {
                return Err(format!(
                    "{group} cannot be an export's multicast group from {local}: give a \
                     multicast address (224.0.0.0/4, ff00::/8) of the bridge's family"
                ));
            }
        }
        if let Some(group) = self.exports.iter().find_map(|e| e.group) {
            self.endpoint
                .set_multicast(group.is_ipv4(), multicast.ttl, interface)
                .map_err(|e| format!("cannot send to the multicast group {group}: {e}"))?;
            self.check_v6_multicast(group, interface, "multicast data");
        }
        let Some(discovery) = &self.config.discovery else {
            return Ok(());
        };
        // Every announcement goes to every peer: the list is bounded as a topic's
        // subscribers are.
        let cap = self.config.subscribers_per_topic;
        if discovery.peers.len() > cap {
            return Err(format!(
                "{} discovery peers: at most {cap} (`subscribers_per_topic`); use a \
                 discovery group, or raise the cap",
                discovery.peers.len()
            ));
        }
        let Some(group) = discovery.group else {
            return Ok(());
        };
        let interface = discovery
            .interface
            .or_else(|| (!local.ip().is_unspecified()).then(|| local.ip()));
        if !reachable(local, group) {
            return Err(format!(
                "the discovery group {group} cannot be reached from {local}: bind the bridge to \
                 an address of the group's family or to [::]"
            ));
        }
        self.endpoint
            .set_multicast(group.is_ipv4(), discovery.ttl, interface)
            .map_err(|e| format!("cannot send to the discovery group {group} from {local}: {e}"))?;
        let socket =
            UdpEndpoint::bind_group(group, interface, &self.config.socket).map_err(|e| {
                format!(
                "cannot join the discovery group {group}{} ({e}); set `DiscoveryConfig::group` \
                 to None and name peers where multicast does not work",
                interface.map(|i| format!(" on {i}")).unwrap_or_default()
            )
            })?;
        self.group = Some(socket);
        self.check_v6_multicast(group, interface, "discovery");
        Ok(())
    }

    /// Reports (in the status: the bridge still starts, and its unicast peers still work)
    /// an IPv6 `group` whose datagrams would go nowhere, silently: its interface (the one
    /// with address `interface`) carries no multicast, as Linux's `lo` by default.
    fn check_v6_multicast(&self, group: SocketAddr, interface: Option<IpAddr>, what: &str) {
        let Some(IpAddr::V6(address)) = interface.filter(|_| group.is_ipv6()) else {
            return;
        };
        if let Some((_, false)) = crate::io::v6_interface(address) {
            self.status.report(format!(
                "{what} on the IPv6 group {group} cannot work from {address}: its interface \
                 carries no multicast (Linux's loopback interface does not); bind the bridge \
                 to another interface's address or to [::], or name unicast peers"
            ));
        }
    }
}
