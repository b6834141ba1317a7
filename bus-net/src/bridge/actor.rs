//! The bridge's actor: a thin shell that moves bytes between its sockets, the bus's rings and
//! the [`Endpoint`], which owns every protocol decision. Every round: pump the exports (send
//! first), then receive; every tick: the endpoint's timers; every second: the figures.
//!
//! Nothing from the network stops the bridge: a send that fails for one destination is
//! counted; a socket that fails for good is not used again and is reported once, within its
//! next metrics refresh (a second): through the bus (`Context::fail`, which stops the bus with
//! `BusError::ActorFailed` naming the bridge and the socket), [`BridgeStatus`] and the
//! `socket_failed` metric.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus::{Actor, Context, LatestWriter, Setup};

use super::direct::Destinations;
use super::ports::{CompatExportPort, CompatImportPort, ExportPort, ImportPort};
use super::services::{ImportedPort, ServedPort};
use super::wire::SocketWire;
use super::{BridgeStatus, Parts};
use crate::endpoint::metrics::NetMetrics;
use crate::endpoint::{
    DirectTopic, DiscoverPattern, DiscoverSpec, DiscoveryCounts, Endpoint, Event, ExportSpec,
    ImportSpec, Sink,
};
use crate::{
    random_secret, CompatControl, DropReason, RecvBatch, SendBatch, SocketConfig, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM,
};

/// Messages taken from one ring per poll of an export.
const BUDGET: usize = 256;

/// Data groups a bridge joins at most (one per publisher's group, usually one).
const MAX_DATA_GROUPS: usize = 16;

/// Reads one of discovery's figures.
type Figure = fn(&DiscoveryCounts) -> u64;

/// Discovery's figures, as metrics `discovery.NAME` of a bridge with discovery on.
const DISCOVERY_METRICS: [(&str, Figure); 10] = [
    ("announcements_sent", |c| c.announcements_sent),
    ("announcements_in", |c| c.announcements_in),
    ("queries_answered", |c| c.queries_answered),
    ("found", |c| c.found),
    ("lost", |c| c.lost),
    ("given_up", |c| c.given_up),
    ("ignored", |c| c.ignored),
    ("mismatched", |c| c.mismatched),
    ("unsubscribed", |c| c.unsubscribed),
    ("unannounced", |c| c.unannounced),
];

/// A socket of the bridge and its health.
struct Socket {
    endpoint: UdpEndpoint,
    /// Set once it failed for good; it is not used again.
    failed: Option<std::io::Error>,
    reported: bool,
}

impl Socket {
    fn new(endpoint: UdpEndpoint) -> Self {
        Socket {
            endpoint,
            failed: None,
            reported: false,
        }
    }

    fn wire<'a>(&'a mut self, batch: &'a mut SendBatch) -> SocketWire<'a> {
        SocketWire {
            socket: &mut self.endpoint,
            batch,
            failed: &mut self.failed,
        }
    }

    /// Receives a batch (unless the socket failed) and counts what the socket dropped.
    /// Returns the datagrams received.
    fn receive(&mut self, recv: &mut RecvBatch, metrics: &NetMetrics) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        let before = *self.endpoint.stats();
        match self.endpoint.recv_batch(recv) {
            Ok(n) => {
                metrics.count_io_drops(&before, self.endpoint.stats());
                n
            }
            Err(e) => {
                self.failed = Some(e);
                0
            }
        }
    }
}

/// Where the endpoint's messages go: decoded by their import's port and published; the
/// services' requests and call ends, to their ports, which call or answer on the local bus.
struct BusSink<'a, 'b> {
    imports: &'a mut [Box<dyn ImportPort>],
    compat: &'a mut [(Box<dyn CompatImportPort>, Socket)],
    served: &'a mut [Box<dyn ServedPort>],
    imported: &'a mut [Box<dyn ImportedPort>],
    ctx: &'a mut Context<'b>,
    recv_max: usize,
}

impl Sink for BusSink<'_, '_> {
    #[inline]
    fn deliver(&mut self, import: usize, payload: &[u8]) -> Result<(), DropReason> {
        match self.imports.get_mut(import) {
            Some(port) => port.deliver(payload, self.ctx),
            None => Err(DropReason::UnknownTopic),
        }
    }

    fn deliver_compat(&mut self, import: usize, datagram: &[u8]) -> Result<(), DropReason> {
        match self.compat.get_mut(import) {
            Some((port, _)) => port.deliver(datagram, self.recv_max, self.ctx),
            None => Err(DropReason::UnknownTopic),
        }
    }

    fn request(
        &mut self,
        service: usize,
        key: u64,
        budget_ms: u32,
        body: &[u8],
    ) -> Result<(), crate::CallStatus> {
        match self.served.get_mut(service) {
            Some(port) => port.deliver(key, budget_ms, body, self.ctx),
            None => Err(crate::CallStatus::Refused),
        }
    }

    fn reply(&mut self, service: usize, key: u64, result: Result<&[u8], crate::CallStatus>) {
        if let Some(port) = self.imported.get_mut(service) {
            port.ended(key, result, self.ctx);
        }
    }
}

/// The bridge running as an actor. Made by `bus.add(bridge)`; see [`Bridge`](super::Bridge).
pub struct BridgeActor {
    name: String,
    endpoint: Endpoint,
    socket: Socket,
    /// The discovery group's socket (receives only; announcements leave by `socket`).
    group: Option<Socket>,
    /// The sockets of the data groups imports were told of (receive only), at most
    /// [`MAX_DATA_GROUPS`].
    data_groups: Vec<(SocketAddr, Socket)>,
    /// Groups to join, from the endpoint's events.
    to_join: Vec<SocketAddr>,
    /// An import was told a group or removed since the joined groups were last checked.
    groups_changed: bool,
    /// The interface groups are joined on.
    multicast_interface: Option<std::net::IpAddr>,
    receive_multicast: bool,
    /// The largest datagram accepted (see `Endpoint`).
    recv_max: usize,
    /// The receive batch, shared by every socket.
    recv: RecvBatch,
    send: SendBatch,
    /// The ports, in the endpoint's order of exports and imports.
    exports: Vec<Box<dyn ExportPort>>,
    imports: Vec<Box<dyn ImportPort>>,
    compat_exports: Vec<(Box<dyn CompatExportPort>, Socket)>,
    compat_imports: Vec<(Box<dyn CompatImportPort>, Socket)>,
    /// The services' ports, in the endpoint's order of served and imported services.
    served: Vec<Box<dyn ServedPort>>,
    imported: Vec<Box<dyn ImportedPort>>,
    /// Each direct topic's list of subscribers, in the endpoint's order of directs.
    direct_lists: Vec<LatestWriter<Destinations>>,
    metrics: NetMetrics,
    subscriber_gauges: Vec<llbus::Metric>,
    /// Discovery's figures (`discovery.*`), registered only when discovery is on.
    discovery_metrics: Vec<(Figure, llbus::Metric)>,
    status: BridgeStatus,
    epoch: Instant,
    next_refresh: Instant,
}

impl std::fmt::Debug for BridgeActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeActor")
            .field("name", &self.name)
            .field("local_addr", &self.socket.endpoint.local_addr())
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// 32 random bytes from the OS, or (it is almost never missing; the bridge must not stop for
/// it) bytes derived from `fallback` and the clock, said in the log.
fn seed_or(fallback: u64) -> [u8; 32] {
    match random_secret() {
        Ok(secret) => secret,
        Err(e) => {
            log::error!("no OS randomness for the bridge's secrets ({e}); deriving them from the session id");
            let mut input = [0u8; 24];
            input[..8].copy_from_slice(&fallback.to_le_bytes());
            input[8..].copy_from_slice(&crate::realtime_ns().to_le_bytes());
            *blake3::hash(&input).as_bytes()
        }
    }
}

impl BridgeActor {
    pub(super) fn new(setup: &mut Setup<'_>, name: &str, parts: Parts) -> Self {
        let Parts {
            max_datagram,
            endpoint: socket,
            config,
            exports,
            imports,
            matching,
            compat_exports,
            compat_imports,
            directs,
            served,
            imported,
            declare_services: _,
            session,
            status,
            group,
        } = parts;
        let (served_specs, served): (Vec<_>, Vec<_>) = (served.into_iter())
            .map(|(spec, make)| (spec, make(setup)))
            .unzip();
        let (imported_specs, imported): (Vec<_>, Vec<_>) = (imported.into_iter())
            .map(|(spec, make)| (spec, make(setup)))
            .unzip();
        let mut export_specs = Vec::with_capacity(exports.len());
        let export_ports: Vec<Box<dyn ExportPort>> = exports
            .into_iter()
            .map(|decl| {
                let port = (decl.make)(setup, &decl.topic);
                export_specs.push(ExportSpec {
                    topic: port.topic(),
                    topic_id: port.topic_id(),
                    fingerprint: port.fingerprint(),
                    allow: decl.allow,
                    reliable: decl.reliable,
                    late_join: decl.late_join,
                    shape: decl.shape,
                    group: decl.group,
                });
                port
            })
            .collect();
        // Ports of imports from one publisher first (import `i` delivers to port `i`), then
        // those of discovered topics (each publisher's import delivers to its topic's port).
        let (fixed, discovered): (Vec<_>, Vec<_>) =
            imports.into_iter().partition(|d| d.publisher.is_some());
        let mut import_specs = Vec::with_capacity(fixed.len());
        let mut discover_specs = Vec::with_capacity(discovered.len());
        let mut import_ports: Vec<Box<dyn ImportPort>> = Vec::with_capacity(fixed.len());
        for decl in fixed.into_iter().chain(discovered) {
            let port = (decl.make)(setup, &decl.topic);
            match decl.publisher {
                Some(publisher) => import_specs.push(ImportSpec {
                    topic: port.topic(),
                    topic_id: port.topic_id(),
                    fingerprint: port.fingerprint(),
                    publisher,
                    reliable: decl.reliable,
                }),
                None => discover_specs.push(DiscoverSpec {
                    topic: port.topic(),
                    topic_id: port.topic_id(),
                    fingerprint: port.fingerprint(),
                    reliable: decl.reliable,
                    port: import_ports.len(),
                }),
            }
            import_ports.push(port);
        }
        // Then those of the topics matched by pattern: each a discovered topic of its own.
        let mut patterns = Vec::with_capacity(matching.len());
        for decl in matching {
            let ports = (decl.make)(setup, &decl.pattern);
            if ports.is_empty() {
                status.warn(format!(
                    "bridge '{name}': discover_matching('{}') matches no topic the bus \
                     subscribes to: nothing will be imported by it (subscribe to the names \
                     wanted, as they run after remapping)",
                    decl.pattern
                ));
            }
            for port in ports {
                discover_specs.push(DiscoverSpec {
                    topic: port.topic(),
                    topic_id: port.topic_id(),
                    fingerprint: port.fingerprint(),
                    reliable: decl.reliable,
                    port: import_ports.len(),
                });
                import_ports.push(port);
            }
            patterns.push(DiscoverPattern {
                pattern: decl.pattern,
                fingerprint: decl.fingerprint,
            });
        }
        let mut direct_lists = Vec::with_capacity(directs.len());
        let direct_topics = directs
            .into_iter()
            .map(|d| {
                direct_lists.push(d.subscribers);
                DirectTopic {
                    topic: d.topic,
                    topic_id: d.topic_id,
                    fingerprint: d.fingerprint,
                    shape: d.shape,
                    shared: d.shared,
                }
            })
            .collect();
        let mut endpoint = Endpoint::with_directs(
            &config,
            max_datagram,
            session,
            seed_or(session),
            export_specs,
            import_specs,
            direct_topics,
        )
        .with_metrics(|name| setup.metric(name))
        .with_services(served_specs, imported_specs);
        if let Some(discovery) = &config.discovery {
            endpoint = endpoint
                .with_discovery(discovery, socket.local_addr(), discover_specs)
                .with_discovery_patterns(patterns);
        }
        let compat_exports = compat_exports
            .into_iter()
            .map(|decl| {
                let port = (decl.make)(setup, &decl.topic);
                endpoint.add_compat_export(port.topic(), port.topic_id());
                (port, Socket::new(decl.endpoint))
            })
            .collect();
        let compat_imports = compat_imports
            .into_iter()
            .map(|decl| {
                endpoint.add_compat_import(decl.publisher);
                ((decl.make)(setup, &decl.topic), Socket::new(decl.endpoint))
            })
            .collect();
        let subscriber_gauges = endpoint
            .exported_topics()
            .map(|(topic, _)| setup.metric(&format!("subscribers.{topic}")))
            .collect();
        let discovery_metrics = if config.discovery.is_some() {
            DISCOVERY_METRICS
                .iter()
                .map(|&(name, get)| (get, setup.metric(&format!("discovery.{name}"))))
                .collect()
        } else {
            Vec::new()
        };
        let recv_max = max_datagram.max(DEFAULT_MAX_DATAGRAM);
        let socket_ip = socket.local_addr().ip();
        let now = Instant::now();
        BridgeActor {
            name: name.to_owned(),
            metrics: endpoint.metrics().clone(),
            endpoint,
            socket: Socket::new(socket),
            group: group.map(Socket::new),
            data_groups: Vec::new(),
            to_join: Vec::new(),
            groups_changed: false,
            multicast_interface: config.multicast.interface.or_else(|| {
                let ip = socket_ip;
                (!ip.is_unspecified()).then_some(ip)
            }),
            receive_multicast: config.multicast.receive,
            recv_max,
            recv: RecvBatch::new(config.batch, recv_max),
            send: SendBatch::new(config.batch),
            exports: export_ports,
            imports: import_ports,
            compat_exports,
            compat_imports,
            served,
            imported,
            direct_lists,
            subscriber_gauges,
            discovery_metrics,
            status,
            epoch: now,
            next_refresh: now + Duration::from_secs(1),
        }
    }

    fn now_ns(&self, now: Instant) -> u64 {
        u64::try_from(now.duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Pumps every export, and the services' calls and answers (`stopping`: local calls of
    /// imported services are answered `Stopped`). Returns messages taken.
    fn pump(&mut self, ctx: &mut Context<'_>, stopping: bool) -> usize {
        let mut work = 0;
        let now = ctx.now();
        let now_ns = self.now_ns(now);
        let mut wire = self.socket.wire(&mut self.send);
        for (i, port) in self.exports.iter_mut().enumerate() {
            if let Some(mut batch) = self.endpoint.export(i, &mut wire) {
                work += port.pump(&mut batch, BUDGET);
            }
        }
        for port in &mut self.served {
            work += port.pump(&mut self.endpoint, now_ns, &mut wire, ctx);
        }
        for (i, port) in self.imported.iter_mut().enumerate() {
            work += port.pump(i, &mut self.endpoint, now, now_ns, &mut wire, ctx, stopping);
        }
        for (k, (port, socket)) in self.compat_exports.iter_mut().enumerate() {
            let mut wire = socket.wire(&mut self.send);
            work += port.pump(&mut self.endpoint, k, &mut wire, BUDGET);
        }
        work
    }

    /// Receives and handles what waits on the sockets. Returns datagrams handled.
    fn receive(&mut self, ctx: &mut Context<'_>) -> usize {
        let now_ns = self.now_ns(ctx.now());
        let n = self.socket.receive(&mut self.recv, &self.metrics);
        let mut sink = BusSink {
            imports: &mut self.imports,
            compat: &mut self.compat_imports,
            served: &mut self.served,
            imported: &mut self.imported,
            ctx,
            recv_max: self.recv_max,
        };
        let mut wire = self.socket.wire(&mut self.send);
        for (bytes, src) in self.recv.iter().take(n) {
            self.endpoint
                .handle(bytes, src, now_ns, &mut wire, &mut sink);
        }
        let mut work = n;
        if let Some(group) = self.group.as_mut() {
            let n = group.receive(&mut self.recv, &self.metrics);
            for (bytes, src) in self.recv.iter().take(n) {
                self.endpoint
                    .handle_group(bytes, src, now_ns, &mut wire, &mut sink);
            }
            work += n;
        }
        for (_, socket) in &mut self.data_groups {
            let n = socket.receive(&mut self.recv, &self.metrics);
            for (bytes, src) in self.recv.iter().take(n) {
                self.endpoint
                    .handle_multicast(bytes, src, now_ns, &mut wire, &mut sink);
            }
            work += n;
        }
        if !self.compat_exports.is_empty() || !self.compat_imports.is_empty() {
            work += self.receive_compat(now_ns, ctx);
        }
        self.on_events();
        self.join_groups(ctx);
        work
    }

    /// Receives on the compat sockets: control on exports, data on imports.
    fn receive_compat(&mut self, now_ns: u64, ctx: &mut Context<'_>) -> usize {
        let mut work = 0;
        for (k, (_, socket)) in self.compat_exports.iter_mut().enumerate() {
            let n = socket.receive(&mut self.recv, &self.metrics);
            for (bytes, src) in self.recv.iter().take(n) {
                self.endpoint.handle_compat_export(k, bytes, src, now_ns);
            }
            work += n;
        }
        for k in 0..self.compat_imports.len() {
            let Some((_, socket)) = self.compat_imports.get_mut(k) else {
                continue;
            };
            let n = socket.receive(&mut self.recv, &self.metrics);
            let mut sink = BusSink {
                imports: &mut self.imports,
                compat: &mut self.compat_imports,
                served: &mut self.served,
                imported: &mut self.imported,
                ctx: &mut *ctx,
                recv_max: self.recv_max,
            };
            for (bytes, src) in self.recv.iter().take(n) {
                self.endpoint.handle_compat_import(k, bytes, src, &mut sink);
            }
            work += n;
        }
        work
    }

    /// Acts on what the endpoint reports: new subscriber lists for the direct senders and the
    /// gauges, and the imports' news for the log and the status.
    fn on_events(&mut self) {
        while let Some(event) = self.endpoint.poll_event() {
            match event {
                Event::SubscribersChanged { topic_id } => self.refresh_direct(topic_id),
                Event::Established {
                    import,
                    session,
                    changed,
                } => {
                    // A restarted publisher's old group is no longer this import's.
                    self.groups_changed |= changed;
                    let (topic, publisher) = self.import_names(import);
                    log::info!(
                        "import of topic '{topic}' from {publisher}: following publisher \
                         session {session:#018x}{}",
                        if changed {
                            " (the publisher restarted)"
                        } else {
                            ""
                        }
                    );
                    self.refresh_discovered();
                }
                Event::Refused { import, refusal } => {
                    let (topic, publisher) = self.import_names(import);
                    let message =
                        format!("import of topic '{topic}' from {publisher} refused: {refusal}");
                    // A refusal is final (the import stops renewing): reported once.
                    if refusal.reason == crate::RefuseReason::FingerprintMismatch {
                        self.status.mismatch(message);
                    } else {
                        self.status.report(message);
                    }
                }
                Event::Retrying { import, refusal } => {
                    let (topic, publisher) = self.import_names(import);
                    self.status.warn(format!(
                        "import of topic '{topic}' from {publisher} refused for now: {refusal}; \
                         retrying with backoff"
                    ));
                }
                Event::Unrecovered {
                    import,
                    first,
                    last,
                } => {
                    let (topic, _) = self.import_names(import);
                    log::warn!(
                        "reliable import of topic '{topic}': messages {first}..={last} could \
                         not be recovered"
                    );
                }
                // The bridge fetches no schemas.
                Event::SchemaReceived { .. } | Event::SchemaFailed { .. } => {}
                Event::Discovered {
                    import,
                    publisher,
                    session,
                    ..
                } => {
                    let (topic, _) = self.import_names(import);
                    log::info!(
                        "discovered publisher {publisher} (session {session:#018x}) of topic \
                         '{topic}': subscribing"
                    );
                    self.refresh_discovered();
                }
                Event::Mismatched {
                    topic,
                    publisher,
                    fingerprint,
                    ..
                } => {
                    // The name comes from the network: `{:?}` escapes it.
                    self.status.mismatch(format!(
                        "bridge '{}': publisher {publisher} announces topic {topic:?} with \
                         fingerprint {fingerprint:#018x}, not the local type's: not subscribed \
                         (counted in discovery.mismatched)",
                        self.name
                    ));
                }
                Event::JoinGroup { group, .. } => {
                    self.groups_changed = true;
                    if self.receive_multicast
                        && !self.to_join.contains(&group)
                        && !self.data_groups.iter().any(|(g, _)| *g == group)
                    {
                        self.to_join.push(group);
                    }
                }
                Event::Lost {
                    import, publisher, ..
                } => {
                    self.groups_changed = true;
                    let (topic, _) = self.import_names(import);
                    log::info!("publisher {publisher} of topic '{topic}' is gone: unsubscribed");
                    self.refresh_discovered();
                }
            }
        }
    }

    /// Joins the data groups the endpoint asked for (a socket each, woken on like the
    /// others); one that cannot be joined is reported as a warning, and its imports are served
    /// by unicast.
    fn join_groups(&mut self, ctx: &mut Context<'_>) {
        if std::mem::take(&mut self.groups_changed) {
            // Leave the groups no live import is told of any more (closing the socket leaves
            // the group and the thread's wake set), so that publishers that come and go, or
            // move their topic to another group, cannot make the bridge hold groups forever.
            let (endpoint, name) = (&self.endpoint, &self.name);
            self.data_groups.retain(|(group, _)| {
                let kept = endpoint.import_groups().any(|g| g == *group);
                if !kept {
                    log::info!("bridge '{name}': left multicast group {group} (no import uses it)");
                }
                kept
            });
        }
        while let Some(group) = self.to_join.pop() {
            if self.data_groups.len() >= MAX_DATA_GROUPS {
                self.status.warn(format!(
                    "bridge '{}': not joining multicast group {group}: {MAX_DATA_GROUPS} groups \
                     joined already; its topics come by unicast",
                    self.name
                ));
                continue;
            }
            match UdpEndpoint::bind_group(group, self.multicast_interface, &SocketConfig::default())
            {
                Ok(endpoint) => {
                    #[cfg(unix)]
                    if let Err(e) = ctx.wake_on_readable(endpoint.socket()) {
                        log::warn!("group socket {group} cannot wake the bridge ({e})");
                    }
                    #[cfg(not(unix))]
                    let _ = ctx;
                    log::info!("bridge '{}': joined multicast group {group}", self.name);
                    self.data_groups.push((group, Socket::new(endpoint)));
                }
                Err(e) => self.status.warn(format!(
                    "bridge '{}': cannot join multicast group {group} ({e}); its topics come \
                     by unicast",
                    self.name
                )),
            }
        }
    }

    /// Hands the status the publishers discovery follows (on a change only).
    fn refresh_discovered(&self) {
        let found = self
            .endpoint
            .discovered()
            .map(|(topic, publisher, session, import)| super::Discovered {
                topic: topic.clone(),
                publisher,
                session,
                established: matches!(
                    self.endpoint.import_state(import),
                    Some(crate::ImportState::Established { .. })
                ),
            })
            .collect();
        self.status.set_discovered(found);
    }

    /// Import `i`'s topic name and publisher.
    fn import_names(&self, i: usize) -> (String, String) {
        match self.endpoint.imports().nth(i) {
            Some(spec) => (spec.topic.to_string(), spec.publisher.to_string()),
            None => (String::from("?"), String::from("?")),
        }
    }

    /// Hands the direct sender of `topic_id`, if any, its new list of subscribers. Allocates
    /// one list: subscriptions change seldom, never per message.
    fn refresh_direct(&mut self, topic_id: u64) {
        let directs = self.endpoint.directs();
        if let Some(i) = directs.iter().position(|d| d.topic_id == topic_id) {
            let list: Destinations = self.endpoint.destinations(topic_id).collect();
            if let Some(writer) = self.direct_lists.get_mut(i) {
                writer.write(list);
            }
        }
        self.refresh_gauges();
    }

    /// Sets the subscribers-per-topic gauges (at once when the table changes, so that a test
    /// or an operator waiting for a subscription sees it without waiting for the next second).
    fn refresh_gauges(&self) {
        let table = self.endpoint.publisher().subscribers();
        for ((_, topic_id), gauge) in self.endpoint.exported_topics().zip(&self.subscriber_gauges) {
            gauge.set(table.subscribers(topic_id).count() as u64);
        }
    }

    /// Refreshes the figures that are sums or gauges, the subscribers that missed messages,
    /// and reports failed sockets.
    fn refresh_metrics(&mut self, ctx: &Context<'_>) {
        self.endpoint.refresh_metrics();
        for (topic, subscriber, missed) in self.endpoint.missed() {
            if self.status.set_missed(topic, subscriber, missed) {
                log::warn!(
                    "bridge '{}': subscriber {subscriber} of reliable topic '{topic}' has missed \
                     {missed} messages beyond history in all (it is slower or lossier than \
                     history covers; the other subscribers are not affected): raise \
                     `reliable.history` to cover it",
                    self.name,
                );
            }
        }
        self.metrics.set_io(
            std::iter::once(self.socket.endpoint.stats())
                .chain(self.compat_exports.iter().map(|(_, s)| s.endpoint.stats()))
                .chain(self.compat_imports.iter().map(|(_, s)| s.endpoint.stats())),
        );
        self.refresh_gauges();
        if let Some(counts) = self.endpoint.discovery_counts() {
            for (get, metric) in &self.discovery_metrics {
                metric.set(get(&counts));
            }
        }
        self.report_failures(ctx);
    }

    /// Reports each socket that failed for good, once: through the bus (`Context::fail`: the
    /// bus stops and `join` returns `BusError::ActorFailed` naming the bridge and the socket),
    /// the status, the log and the `socket_failed` metric.
    fn report_failures(&mut self, ctx: &Context<'_>) {
        let name = &self.name;
        let (status, metrics) = (&self.status, &self.metrics);
        let report = |what: &str, socket: &mut Socket| {
            if let (Some(e), false) = (&socket.failed, socket.reported) {
                let addr: SocketAddr = socket.endpoint.local_addr();
                let error = format!(
                    "bridge '{name}': its {what} socket {addr} failed ({e}); it is no longer used"
                );
                status.report(error.clone());
                metrics.socket_failed.set(1);
                ctx.fail(error);
                socket.reported = true;
            }
        };
        report("native", &mut self.socket);
        for (_, socket) in &mut self.compat_exports {
            report("compat export", socket);
        }
        for (_, socket) in &mut self.compat_imports {
            report("compat import", socket);
        }
    }

    /// Sends `control` from every compat import to its publisher.
    fn compat_requests(&mut self, control: CompatControl) {
        for (k, (_, socket)) in self.compat_imports.iter_mut().enumerate() {
            let mut wire = socket.wire(&mut self.send);
            self.endpoint.compat_request(k, control, &mut wire);
        }
    }
}

impl Actor for BridgeActor {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn on_start(&mut self, ctx: &mut Context<'_>) {
        // A parked bridge sleeps in the kernel on its sockets (and its doorbell), so that a
        // datagram wakes it at once rather than at its next tick.
        #[cfg(unix)]
        {
            let mut watch = |endpoint: &UdpEndpoint| {
                if let Err(e) = ctx.wake_on_readable(endpoint.socket()) {
                    log::warn!(
                        "bridge socket {} cannot wake its parked thread ({e}): it is polled on the tick",
                        endpoint.local_addr()
                    );
                }
            };
            watch(&self.socket.endpoint);
            if let Some(group) = &self.group {
                watch(&group.endpoint);
            }
            for (_, socket) in &self.compat_exports {
                watch(&socket.endpoint);
            }
            for (_, socket) in &self.compat_imports {
                watch(&socket.endpoint);
            }
        }
        #[cfg(not(unix))]
        let _ = ctx;
    }

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        // Send first: what the bus queued since the last round (a reply, say) leaves before
        // this round's receive system calls. NB: receiving first would add an empty receive
        // system call to every same-thread round trip (the `udp` suite; docs/PERFORMANCE.md,
        // "Where the round trip goes").
        let mut work = self.pump(ctx, false);
        work += self.receive(ctx);
        work
    }

    fn drain(&mut self, ctx: &mut Context<'_>) -> usize {
        // Stopping: send what the bus still holds for us, take nothing new from the network.
        self.pump(ctx, true)
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let now_ns = self.now_ns(now);
        let mut sink = BusSink {
            imports: &mut self.imports,
            compat: &mut self.compat_imports,
            served: &mut self.served,
            imported: &mut self.imported,
            ctx: &mut *ctx,
            recv_max: self.recv_max,
        };
        let mut wire = self.socket.wire(&mut self.send);
        self.endpoint.on_timer(now_ns, &mut wire, &mut sink);
        if self.endpoint.compat_renew_due(now_ns) {
            self.compat_requests(CompatControl::Subscribe);
        }
        self.on_events();
        self.join_groups(ctx);
        if now >= self.next_refresh {
            self.next_refresh = now + Duration::from_secs(1);
            self.refresh_metrics(ctx);
        }
    }

    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        let mut wire = self.socket.wire(&mut self.send);
        self.endpoint.close(&mut wire);
        self.compat_requests(CompatControl::Unsubscribe);
        self.refresh_metrics(ctx);
    }
}
