//! The sans-IO endpoint, in the manner of quinn-proto's `Endpoint`: every piece of a bridge's
//! protocol state in one value, driven by `(datagram, source, now)` in and `(datagrams to send,
//! messages to deliver, events, next deadline)` out. No sockets, threads or clocks: datagrams
//! leave through a [`Wire`], messages through a [`Sink`], events are polled
//! ([`Endpoint::poll_event`]), and "now" is passed in. The bridge's actor moves bytes between
//! its sockets, rings and an `Endpoint`; the simulator (`sim.rs`, tests) drives two of them over
//! a faulty network with an adversary, and the `session` fuzz target drives one with arbitrary
//! datagrams: what they check is the code that ships.
//!
//! It owns:
//! - the publisher side ([`PublisherSession`]: allowlist, rate limit, cookies, the subscriber
//!   table with its caps, subscription tokens, the per-host retransmission budgets), every
//!   exported topic (its sequence and, if reliable, its history: `export`), the control plane
//!   of the direct topics, and the compat exports' tables (`compat`);
//! - every import (`import`: its [`SubscriberSession`], reliable receiver, reassembler and NAK
//!   nonces) and the compat imports;
//! - the one egress (`egress`): every datagram is sealed with the pre-shared key, or followed
//!   by its destination's subscription token, there.
//!
//! The rules it keeps (`SECURITY.md`, `docs/PROTOCOL.md`): an unanswerable source is dropped
//! first; the answers to one datagram go back to its source in one datagram no larger than it
//! ([`Endpoint::handle`]); retransmissions and late-join bursts come out of the host's budget;
//! data and heartbeats reach an import only from its publisher, with its token.

mod compat;
mod discovery;
mod egress;
mod export;
mod import;
pub(crate) mod metrics;
mod multicast;
mod schema;

use std::collections::VecDeque;
use std::net::SocketAddr;

pub use discovery::{DiscoverSpec, DiscoveryCounts};
pub use egress::Wire;
pub(crate) use egress::{mac_of, protect_and_send, Egress};
pub(crate) use export::{DirectShared, DirectTopic};
pub use export::{ExportBatch, ExportSpec};
pub use import::{ImportSpec, Origin, Sink};
pub use multicast::GroupRepairCounts;
pub use schema::{
    EncodedShape, SchemaFailure, MAX_SCHEMA_FETCHES, SCHEMA_ATTEMPTS, SCHEMA_RETRY_NS,
};

use self::compat::{CompatExport, CompatImport};
use self::export::ExportState;
use self::import::{deliver_frame, ImportSlot, InOrder};
use self::metrics::{add_loss, NetMetrics};
use crate::session::{canonical, is_answerable, Replies};
use crate::{
    parse_datagram, BatchEncoder, BridgeConfig, CompatControl, Control, CookieJar, DropReason,
    ExportedTopic, Frame, HostBudgets, ImportState, Kind, LossCounts, Nak, PublisherEvent,
    PublisherSession, RateLimiter, Refusal, ReliableConfig, ReliableExport, ReplayGuard,
    Retransmit, SubscriberEvent, SubscriberTable, Unavailable, DEFAULT_MAX_DATAGRAM, HEADER_LEN,
    MAC_TAG_LEN,
};

/// Senders (session, lane) whose replay windows an endpoint keeps at once.
const REPLAY_SENDERS: usize = 256;

/// How often subscribers are expired, metrics summed and the cookie secret's window checked.
const HOUSEKEEPING_NS: u64 = 1_000_000_000;

/// What happened that the application may want to know: polled with
/// [`Endpoint::poll_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The subscribers of an exported topic changed (admitted, removed or expired).
    SubscribersChanged {
        /// The topic.
        topic_id: u64,
    },
    /// An import follows a publisher session (a new one if `changed`: the publisher
    /// restarted).
    Established {
        /// The import's index.
        import: usize,
        /// The publisher session it follows.
        session: u64,
        /// Whether it followed another before.
        changed: bool,
    },
    /// An import was refused for good (wrong fingerprint, not allowed, ...).
    Refused {
        /// The import's index.
        import: usize,
        /// Why.
        refusal: Refusal,
    },
    /// An import was refused for now (a full table); it retries with backoff. Once per
    /// episode, until it is established again.
    Retrying {
        /// The import's index.
        import: usize,
        /// Why.
        refusal: Refusal,
    },
    /// A reliable import gave up on messages `first..=last` (they left the publisher's history
    /// or their deadline passed); delivery goes on after them.
    Unrecovered {
        /// The import's index.
        import: usize,
        /// The first message given up.
        first: u64,
        /// The last.
        last: u64,
    },
    /// A schema fetch ([`Endpoint::request_schema`]) ended with the topic's shape, which
    /// decoded and hashes to `fingerprint`.
    SchemaReceived {
        /// The topic.
        topic_id: u64,
        /// The publisher asked.
        publisher: SocketAddr,
        /// The fingerprint the publisher's data frames carry.
        fingerprint: u64,
        /// The shape.
        shape: llbus::schema::Shape,
    },
    /// A schema fetch ended without a shape.
    SchemaFailed {
        /// The topic.
        topic_id: u64,
        /// The publisher asked.
        publisher: SocketAddr,
        /// Why.
        reason: SchemaFailure,
    },
    /// Discovery follows a publisher of a discovered topic: import `import` subscribes to it.
    Discovered {
        /// The import added.
        import: usize,
        /// The topic.
        topic_id: u64,
        /// The publisher's data address.
        publisher: SocketAddr,
        /// The session it announced.
        session: u64,
    },
    /// A publisher told import `import` that its topic's data also goes to multicast group
    /// `group`: the driver joins it (and hands what arrives there to
    /// [`Endpoint::handle_multicast`]); until group datagrams arrive, data comes by unicast.
    JoinGroup {
        /// The import.
        import: usize,
        /// The group to join.
        group: SocketAddr,
    },
    /// Discovery stopped following a publisher (it stopped announcing, refused, or did not
    /// answer in time): import `import` was removed.
    Lost {
        /// The import removed.
        import: usize,
        /// The topic.
        topic_id: u64,
        /// The publisher's data address.
        publisher: SocketAddr,
    },
}

/// Events an endpoint holds for its driver at most: the queue never grows past them.
pub const EVENT_QUEUE: usize = 64;

/// Queues `event` without ever growing the queue past [`EVENT_QUEUE`]: a `SubscribersChanged`
/// already queued for its topic is not queued again, and when the queue is full the oldest
/// event is dropped (a driver that polls after every call never loses one; one that does not
/// poll loses the oldest news, never memory).
pub(crate) fn push_event(events: &mut VecDeque<Event>, event: Event) {
    if matches!(event, Event::SubscribersChanged { .. }) && events.contains(&event) {
        return;
    }
    if events.len() >= EVENT_QUEUE {
        events.pop_front();
    }
    events.push_back(event);
}

/// Randomness for the endpoint's secrets: a keyed BLAKE3 stream from one seed, so that a
/// simulation is deterministic and a bridge (seeded from the OS) unpredictable.
struct Entropy {
    key: [u8; 32],
    counter: u64,
}

impl Entropy {
    fn next(&mut self) -> [u8; 32] {
        self.counter += 1;
        *blake3::keyed_hash(&self.key, &self.counter.to_le_bytes()).as_bytes()
    }

    fn next_u64(&mut self) -> u64 {
        let bytes = self.next();
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(word)
    }
}

/// Every piece of a bridge's protocol state. See the module docs.
pub struct Endpoint {
    session: u64,
    max_datagram: usize,
    /// The largest datagram accepted: `max_datagram`, but never less than the IPv4 default, so
    /// a dual-stack bridge (1452 by default) takes what an IPv4 peer (1472) sends it.
    recv_max: usize,
    config: BridgeConfig,
    entropy: Entropy,
    wall: fn() -> i64,
    egress: Egress,
    /// The replay windows of the senders whose sealed datagrams arrive.
    replay: ReplayGuard,
    publisher: PublisherSession,
    replies: Replies,
    /// The plan of the answer to one NAK (preallocated).
    retransmit: Retransmit,
    /// Subscribers admitted by the datagram being handled, to send the last messages of a
    /// late-join export once the acknowledgement has gone (preallocated, bounded).
    joins: Vec<(u64, SocketAddr)>,
    exports: Vec<ExportState>,
    directs: Vec<DirectTopic>,
    imports: Vec<ImportSlot>,
    /// The figures of removed imports whose slots were reused.
    retired: import::RetiredFigures,
    compat_exports: Vec<CompatExport>,
    compat_imports: Vec<CompatImport>,
    /// Destinations of a compat datagram (capacity: a topic's subscribers).
    compat_dests: Vec<(SocketAddr, u64)>,
    /// One datagram being built by an export.
    buf: Vec<u8>,
    /// Control frames being built (answers, renewals, heartbeats, NAKs, retransmissions).
    control_buf: Vec<u8>,
    metrics: NetMetrics,
    events: VecDeque<Event>,
    /// The schema fetches under way (at most `MAX_SCHEMA_FETCHES`).
    fetches: Vec<schema::Fetch>,
    next_heartbeat: u64,
    next_housekeeping: u64,
    next_reseed: u64,
    next_compat_renew: u64,
    /// Announcements and the discovered imports (`discovery`); `None` when off.
    discovery: Option<Box<discovery::Discovery>>,
    /// Whether the datagram being handled arrived on a multicast group's socket.
    by_group: bool,
    /// Whether the datagram being handled arrived on the discovery group's socket.
    by_discovery_group: bool,
    group_repair_counts: multicast::GroupRepairCounts,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("session", &self.session)
            .field("exports", &self.exports.len())
            .field("imports", &self.imports.len())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint with session id `session`, sending datagrams of at most `max_datagram`
    /// bytes, set up as `config` says (its socket settings aside), serving `exports` and
    /// subscribing to `imports`. Every secret (cookies, subscription tokens, nonces) is drawn
    /// from `seed`: give it 32 random bytes (`random_secret`), or fixed ones for a
    /// reproducible simulation. Allocates every buffer and table now; handling datagrams
    /// allocates nothing.
    pub fn new(
        config: &BridgeConfig,
        max_datagram: usize,
        session: u64,
        seed: [u8; 32],
        exports: Vec<ExportSpec>,
        imports: Vec<ImportSpec>,
    ) -> Endpoint {
        Self::with_directs(
            config,
            max_datagram,
            session,
            seed,
            exports,
            imports,
            Vec::new(),
        )
    }

    /// [`new`](Self::new), keeping the control plane of `directs` too: topics sent from
    /// threads of their own.
    pub(crate) fn with_directs(
        config: &BridgeConfig,
        max_datagram: usize,
        session: u64,
        seed: [u8; 32],
        exports: Vec<ExportSpec>,
        imports: Vec<ImportSpec>,
        directs: Vec<DirectTopic>,
    ) -> Endpoint {
        let mut entropy = Entropy {
            key: seed,
            counter: 0,
        };
        let reliable_config = ReliableConfig {
            max_frame: max_datagram,
            ..config.reliable
        };
        // What a downstream datagram carries beyond its frames: charged to retransmit budgets.
        let trailer = if config.psk.is_some() {
            MAC_TAG_LEN
        } else {
            crate::TOKEN_LEN
        };
        let table = || {
            SubscriberTable::new(config.subscriber_timeout, config.subscriber_capacity)
                .with_topic_cap(config.subscribers_per_topic)
                .with_host_cap(config.subscribers_per_host)
        };
        let topics = exports
            .iter()
            .map(|e| ExportedTopic {
                topic_id: e.topic_id,
                fingerprint: e.fingerprint,
                allow: e.allow.clone(),
            })
            .chain(directs.iter().map(|d| ExportedTopic {
                topic_id: d.topic_id,
                fingerprint: d.fingerprint,
                allow: None,
            }))
            .collect();
        let exports = exports
            .into_iter()
            .map(|spec| {
                let history = spec.reliable.then(|| {
                    ReliableExport::new(
                        spec.topic_id,
                        spec.fingerprint,
                        session,
                        config.subscribers_per_topic,
                        &reliable_config,
                    )
                    .with_late_join(spec.late_join)
                    .with_datagram_overhead(trailer)
                });
                ExportState::new(spec, history, entropy.next_u64())
            })
            .collect();
        let imports = imports
            .into_iter()
            .enumerate()
            .map(|(port, spec)| {
                ImportSlot::new(spec, port, session, config, &reliable_config, &mut entropy)
            })
            .collect();
        let recv_max = max_datagram.max(DEFAULT_MAX_DATAGRAM);
        let jar = CookieJar::new(entropy.next(), config.cookie_window);
        let publisher = PublisherSession::new(
            session,
            jar,
            RateLimiter::new(config.rate_limit, config.rate_limit_sources),
            config.allow.clone(),
            topics,
            table(),
            entropy.next(),
        )
        .with_budgets(HostBudgets::new(
            config.subscriber_capacity,
            config.reliable.retransmit_rate,
        ));
        Endpoint {
            session,
            max_datagram,
            recv_max,
            egress: Egress::new(mac_of(config), recv_max, config.subscribers_per_topic),
            replay: ReplayGuard::new(session, REPLAY_SENDERS),
            publisher,
            replies: Replies::with_capacity(recv_max / HEADER_LEN + 1),
            retransmit: Retransmit::with_capacity(config.reliable.retransmit_per_nak),
            joins: Vec::with_capacity(recv_max / HEADER_LEN + 1),
            exports,
            directs,
            imports,
            retired: import::RetiredFigures::default(),
            compat_exports: Vec::new(),
            compat_imports: Vec::new(),
            compat_dests: Vec::with_capacity(config.subscribers_per_topic.max(1)),
            buf: vec![0; max_datagram],
            // Answers to a received datagram are packed into as much as it held.
            control_buf: vec![0; recv_max],
            metrics: NetMetrics::register(|_| llbus::Metric::default()),
            events: VecDeque::with_capacity(EVENT_QUEUE),
            fetches: Vec::new(),
            next_heartbeat: 0,
            next_housekeeping: HOUSEKEEPING_NS,
            next_reseed: u64::try_from(config.cookie_window.as_nanos()).unwrap_or(u64::MAX),
            next_compat_renew: 0,
            discovery: None,
            by_group: false,
            by_discovery_group: false,
            group_repair_counts: multicast::GroupRepairCounts::default(),
            entropy,
            wall: crate::realtime_ns,
            config: config.clone(),
        }
    }

    /// Counts into the metrics `metric` makes from each name (the bridge registers them with
    /// the bus) instead of plain counters.
    pub(crate) fn with_metrics(mut self, metric: impl FnMut(&str) -> llbus::Metric) -> Self {
        self.metrics = NetMetrics::register(metric);
        self
    }

    /// Reads the wall clock (the timestamps in data frames and heartbeats) with `wall`
    /// instead of the system's realtime clock (a simulation's clock, say).
    pub fn with_wall_clock(mut self, wall: fn() -> i64) -> Self {
        self.wall = wall;
        self
    }

    /// Serves `topic` in the compat format (its socket's datagrams go to
    /// [`handle_compat_export`](Self::handle_compat_export)). Returns its index.
    pub(crate) fn add_compat_export(&mut self, topic: &'static str, topic_id: u64) -> usize {
        let table = SubscriberTable::new(
            self.config.subscriber_timeout,
            self.config.subscriber_capacity,
        )
        .with_topic_cap(self.config.subscribers_per_topic)
        .with_host_cap(self.config.subscribers_per_host);
        self.compat_exports
            .push(CompatExport::new(topic, topic_id, table));
        self.compat_exports.len() - 1
    }

    /// Imports from `publisher` in the compat format. Returns its index.
    pub(crate) fn add_compat_import(&mut self, publisher: SocketAddr) -> usize {
        self.compat_imports.push(CompatImport {
            publisher: canonical(publisher),
        });
        self.compat_imports.len() - 1
    }

    /// The endpoint's session id (the publisher session its exports carry).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The imports, in the order given.
    pub fn imports(&self) -> impl Iterator<Item = &ImportSpec> {
        self.imports.iter().map(|i| &i.spec)
    }

    /// The exports, in the order given.
    pub fn exports(&self) -> impl Iterator<Item = &ExportSpec> {
        self.exports.iter().map(|e| &e.spec)
    }

    /// The state of import `i`'s subscription.
    pub fn import_state(&self, i: usize) -> Option<ImportState> {
        self.imports.get(i).map(|im| im.session.state())
    }

    /// The publisher side (its subscriber table, counts and topics).
    pub fn publisher(&self) -> &PublisherSession {
        &self.publisher
    }

    pub(crate) fn metrics(&self) -> &NetMetrics {
        &self.metrics
    }

    /// The subscribers of `topic_id` with their subscription tokens.
    pub fn destinations(&self, topic_id: u64) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
        self.publisher.subscribers().destinations(topic_id)
    }

    /// The next event, oldest first. Poll until `None` after each call that takes a datagram
    /// or a timer: at most [`EVENT_QUEUE`] events are held, the oldest dropped beyond that.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`on_timer`](Self::on_timer) next has something to do at the latest, in the
    /// nanoseconds of `now_ns`. Imports' renewals and reliable receivers' NAKs are checked on
    /// every call: a driver that has imports calls it at least every millisecond.
    pub fn next_deadline(&self) -> u64 {
        self.next_heartbeat
            .min(self.next_housekeeping)
            .min(self.next_reseed)
            .min(self.schema_deadline())
            .min(self.discovery_deadline())
            .min(self.group_repair_deadline())
    }

    /// The room for frames in a downstream datagram: what the MAC trailer (with a key) or the
    /// subscription token (without) leaves.
    fn control_room(&self) -> usize {
        self.max_datagram - self.egress.trailer_len()
    }

    /// Sends `control_buf[..len]` to `dest` alone; `token`: downstream frames to a
    /// subscriber with that token.
    fn send_control_buf(
        &mut self,
        wire: &mut dyn Wire,
        len: usize,
        dest: SocketAddr,
        token: Option<u64>,
    ) {
        let frames = self.control_buf.get(..len).unwrap_or_default();
        let (datagrams, bytes) = self.egress.send(
            wire,
            frames,
            token.is_some(),
            std::iter::once((dest, token.unwrap_or(0))),
        );
        self.metrics.sent(datagrams, bytes);
    }

    /// Sends one control frame (a request) to `dest`.
    fn send_control(&mut self, wire: &mut dyn Wire, control: &Control, dest: SocketAddr) {
        let room = self.control_room();
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(control).is_err() {
            return; // Cannot happen: `max_datagram` holds a control frame (checked at bind).
        }
        let len = enc.len();
        self.send_control_buf(wire, len, dest, None);
    }

    /// Handles one datagram that arrived on the native socket from `src` at `now_ns`: opens
    /// it (MAC) or parses it, hands each frame to the machine it is for, delivers what the
    /// imports let through to `sink`, and sends the answers to `src` (one datagram, never
    /// larger than this one) and any retransmissions or late-join messages it earned (out of
    /// its host's budget) through `wire`. A malformed datagram is counted under one
    /// [`DropReason`] and dropped; nothing here fails.
    pub fn handle(
        &mut self,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
    ) {
        self.metrics.datagrams_in.add(1);
        self.metrics.bytes_in.add(datagram.len() as u64);
        let src = canonical(src);
        if !is_answerable(src) {
            self.metrics.drop(DropReason::BadSource);
            return;
        }
        let parsed = match &self.egress.mac {
            Some(mac) => mac.open_once(datagram, self.recv_max, &mut self.replay),
            None => parse_datagram(datagram, self.recv_max),
        };
        let frames = match parsed {
            Ok(frames) => frames,
            Err(reason) => {
                self.metrics.drop(reason);
                return;
            }
        };
        self.replies.clear(src);
        let token = frames.token();
        // A schema request is answered only alone in its datagram: its answer is one datagram.
        let lone = (frames.len() == 1).then_some(datagram.len());
        // A datagram is counted under one drop reason at most: its first.
        let mut dropped = None;
        // A query is answered only alone in its datagram: beside other frames, its answer
        // and theirs would be two datagrams for one.
        let mut query_budget = if frames.remaining() == 1 {
            datagram.len()
        } else {
            0
        };
        for frame in frames {
            if !self.takes(frame.header.kind) {
                dropped.get_or_insert(DropReason::UnknownSender);
                continue;
            }
            let result = match frame.header.kind {
                Kind::Data | Kind::Fragment => self.on_data(&frame, src, token, now_ns, sink),
                Kind::Nak => self.on_nak(&frame, src, now_ns, wire),
                Kind::Unavailable => self.on_unavailable(&frame, src, token, now_ns, sink),
                Kind::SchemaRequest => self.on_schema_request(&frame, src, now_ns, lone, wire),
                Kind::SchemaReply => self.on_schema_reply(&frame, src, now_ns),
                Kind::Announce => self.on_announce(&frame, src, now_ns),
                Kind::Query => self.on_query(&frame, src, &mut query_budget, now_ns, wire),
                Kind::Group => self.on_group_offer(&frame, src, token, now_ns),
                _ => match Control::from_frame(&frame) {
                    Ok(control) => {
                        let group = frame.header.flags.group();
                        self.on_control(&control, src, token, group, now_ns)
                    }
                    Err(reason) => Err(reason),
                },
            };
            if let Err(reason) = result {
                dropped.get_or_insert(reason);
            }
        }
        if let Some(reason) = dropped {
            self.metrics.drop(reason);
        }
        self.send_replies(wire, datagram.len());
        self.send_joins(wire, now_ns);
    }

    /// Whether a frame of `kind` is taken from the socket the datagram being handled came by.
    /// A group's socket takes only what is sent to that group (announcements and queries on
    /// the discovery group, a publisher's stream on a data group), so that nothing sent to a
    /// group draws an answer from every member.
    fn takes(&self, kind: Kind) -> bool {
        if self.by_discovery_group {
            matches!(kind, Kind::Announce | Kind::Query)
        } else if self.by_group {
            matches!(
                kind,
                Kind::Data | Kind::Fragment | Kind::Heartbeat | Kind::Unavailable
            )
        } else {
            true
        }
    }

    /// Sends the answers to one datagram of `request_len` bytes, packed into as few datagrams
    /// as they fit in. Each answer is as long as the request frame it answers, so they never
    /// exceed the request; if they somehow would, they are not sent (and counted).
    fn send_replies(&mut self, wire: &mut dyn Wire, request_len: usize) {
        let Some(dest) = self.replies.to() else {
            return;
        };
        if self.replies.is_empty() {
            return;
        }
        let tag = if self.egress.mac.is_some() {
            MAC_TAG_LEN
        } else {
            0
        };
        let room = self.recv_max - tag;
        let mut sent_bytes = 0usize;
        let mut datagrams = 0usize;
        let mut i = 0;
        let count = self.replies.frames().len();
        while i < count {
            let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
            while i < count {
                match enc.push_control(&self.replies.frames()[i]) {
                    Ok(()) => i += 1,
                    Err(_) if !enc.is_empty() => break,
                    Err(_) => return, // A frame that fits no datagram: cannot happen.
                }
            }
            let len = enc.len();
            sent_bytes += len + tag;
            datagrams += 1;
            if sent_bytes > request_len || datagrams > 1 {
                // NB: unreachable by construction (answers are as long as their requests and
                // all of one datagram's fit in one); kept as the anti-amplification guard.
                debug_assert!(false, "answers larger than the request");
                self.metrics.drop(DropReason::TooLarge);
                return;
            }
            self.send_control_buf(wire, len, dest, None);
        }
    }

    /// Sends each subscriber admitted by the last datagram the last messages of a late-join
    /// export (after its acknowledgement, so it follows the session already).
    fn send_joins(&mut self, wire: &mut dyn Wire, now_ns: u64) {
        while let Some((topic_id, dest)) = self.joins.pop() {
            let Some(i) = self
                .exports
                .iter()
                .position(|e| e.spec.topic_id == topic_id)
            else {
                continue;
            };
            if let Some(history) = self.exports.get_mut(i).and_then(|e| e.reliable.as_mut()) {
                let budgets = self.publisher.budgets_mut();
                history.on_join(dest, now_ns, budgets, &mut self.retransmit);
            }
            self.send_retransmit(wire, i, dest);
        }
    }

    /// Sends what `self.retransmit` planned for export `i` to `dest`: the `Unavailable`, then
    /// the history frames packed into as few datagrams as they fit in, each protected like
    /// any downstream datagram (sealed, or followed by `dest`'s subscription token).
    fn send_retransmit(&mut self, wire: &mut dyn Wire, i: usize, dest: SocketAddr) {
        let room = self.control_room();
        let Some(history) = self.exports.get(i).and_then(|e| e.reliable.as_ref()) else {
            return;
        };
        let token = if self.egress.mac.is_none() {
            match self
                .publisher
                .subscribers()
                .destinations(history.topic_id())
                .find(|&(addr, _)| addr == dest)
            {
                Some((_, t)) => t,
                // No longer subscribed (unsubscribed by the datagram that asked): nothing.
                None => return,
            }
        } else {
            0
        };
        let tokened = self.egress.mac.is_none();
        let (egress, metrics) = (&mut self.egress, &self.metrics);
        let mut flush = |frames: &[u8]| {
            let (datagrams, bytes) =
                egress.send(&mut *wire, frames, true, std::iter::once((dest, token)));
            metrics.sent(datagrams, bytes);
        };
        let buf = &mut self.control_buf[..room];
        if let Some(u) = self.retransmit.unavailable() {
            let mut enc = BatchEncoder::new(&mut *buf).with_token(tokened);
            if enc.push_unavailable(u).is_ok() {
                flush(enc.as_bytes());
            }
        }
        let mut len = 0usize;
        for &seq in self.retransmit.seqs() {
            let Some(frame) = history.frame(seq) else {
                continue;
            };
            if len + frame.len() > room {
                flush(buf.get(..len).unwrap_or_default());
                len = 0;
            }
            if let Some(dst) = buf.get_mut(len..len + frame.len()) {
                dst.copy_from_slice(frame);
                len += frame.len();
            }
        }
        flush(buf.get(..len).unwrap_or_default());
    }

    /// Hands a data frame to the import of its (source, topic). A frame of a topic this
    /// endpoint imports from someone else, or exports, is `UnknownSender`; of another topic,
    /// `UnknownTopic`.
    #[inline]
    fn on_data(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
        sink: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let topic_id = frame.header.topic_id;
        let Some(index) = self.import_of(src, topic_id) else {
            let known = self.imports.iter().any(|i| i.spec.topic_id == topic_id)
                || self
                    .publisher
                    .topics()
                    .iter()
                    .any(|t| t.topic_id == topic_id);
            return Err(if known {
                DropReason::UnknownSender
            } else {
                DropReason::UnknownTopic
            });
        };
        let h = &frame.header;
        let by_group = self.by_group;
        let Some(ImportSlot {
            session,
            reliable,
            reassembly,
            port,
            group_seen_ns,
            ..
        }) = self.imports.get_mut(index)
        else {
            return Err(DropReason::UnknownSender);
        };
        if let Some(receiver) = reliable.as_mut() {
            if session.follows_reliable(h.fingerprint, h.session, token, now_ns)? {
                if by_group {
                    *group_seen_ns = now_ns;
                }
                let mut in_order = InOrder {
                    sink,
                    import: index,
                    port: *port,
                    reassembly,
                    metrics: &self.metrics,
                    events: &mut self.events,
                    session: h.session,
                    now_ns,
                };
                receiver.on_data(h.seq, h.kind, frame.payload, now_ns, &mut in_order);
            }
            return Ok(());
        }
        let verdict = session.on_data(h, token, now_ns)?;
        if by_group {
            *group_seen_ns = now_ns;
        }
        if verdict.is_deliver() {
            deliver_frame(
                sink,
                *port,
                reassembly,
                h.kind,
                Origin {
                    session: h.session,
                    seq: h.seq,
                    timestamp_ns: h.timestamp_ns,
                },
                frame.payload,
                now_ns,
                &self.metrics,
            )?;
        }
        Ok(())
    }

    /// A NAK: answered only for a reliable export, from an admitted subscriber whose cookie
    /// proves its address ([`PublisherSession::admit_nak`]); the retransmissions (within the
    /// per-NAK cap and its host's byte budget) and the `Unavailable` for what left history go
    /// to it alone.
    fn on_nak(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        now_ns: u64,
        wire: &mut dyn Wire,
    ) -> Result<(), DropReason> {
        let nak = Nak::from_frame(frame)?;
        let Some(i) = self
            .exports
            .iter()
            .position(|e| e.spec.topic_id == nak.topic_id && e.reliable.is_some())
        else {
            return Err(DropReason::UnknownTopic);
        };
        self.publisher.admit_nak(&nak, src, now_ns)?;
        let by_group = self.repairs_by_group(i, &nak, src);
        if by_group && self.repair_pending(i, &nak, now_ns) {
            // Already being repaired on the group: suppressed, but charged to the NAKer's
            // host as a header per message, so that repeating it is not free.
            let cost = nak.len().saturating_mul(HEADER_LEN as u64);
            let budgets = self.publisher.budgets_mut();
            if !budgets.take(src.ip(), cost, now_ns) {
                return Err(DropReason::RateLimited);
            }
            return Ok(());
        }
        let Some(history) = self.exports.get_mut(i).and_then(|e| e.reliable.as_mut()) else {
            return Err(DropReason::UnknownTopic);
        };
        let budgets = self.publisher.budgets_mut();
        history.on_nak(&nak, src, now_ns, budgets, &mut self.retransmit);
        if by_group {
            self.queue_group_repair(i, now_ns);
            self.retransmit.clear_seqs();
        }
        self.send_retransmit(wire, i, src);
        Ok(())
    }

    /// An `Unavailable` for a reliable import: the range left the publisher's history.
    fn on_unavailable(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
        sink: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let u = Unavailable::from_frame(frame)?;
        let Some(index) = self.import_of(src, u.topic_id) else {
            return Err(DropReason::UnknownSender);
        };
        let Some(ImportSlot {
            session,
            reliable,
            reassembly,
            port,
            ..
        }) = self.imports.get_mut(index)
        else {
            return Err(DropReason::UnknownSender);
        };
        let Some(receiver) = reliable.as_mut() else {
            return Err(DropReason::BadControl);
        };
        if !session.follows_reliable(u.fingerprint, u.session, token, now_ns)? {
            return Err(DropReason::UnknownSender);
        }
        let mut in_order = InOrder {
            sink,
            import: index,
            port: *port,
            reassembly,
            metrics: &self.metrics,
            events: &mut self.events,
            session: u.session,
            now_ns,
        };
        receiver.on_unavailable(&u, now_ns, &mut in_order)
    }

    /// The last sequence number sent on an exported topic (ring-fed or direct); 0 if none.
    fn last_seq(&self, topic_id: u64) -> u64 {
        if let Some(e) = self.exports.iter().find(|e| e.spec.topic_id == topic_id) {
            return e.seq;
        }
        self.directs
            .iter()
            .find(|d| d.topic_id == topic_id)
            .map_or(0, DirectTopic::last_seq)
    }

    /// Handles a control frame; `group` is a `Subscribe`'s GROUP flag.
    fn on_control(
        &mut self,
        control: &Control,
        src: SocketAddr,
        token: Option<u64>,
        group: bool,
        now_ns: u64,
    ) -> Result<(), DropReason> {
        match control {
            // Our own Subscribe, sent to ourselves (an announcement naming one of our
            // addresses): answering would loop our own messages back into our bus.
            Control::Subscribe { session, .. } if *session == self.session => {
                Err(DropReason::Replayed)
            }
            Control::Subscribe { .. } | Control::Unsubscribe { .. } => {
                let (exports, directs) = (&self.exports, &self.directs);
                let last_seq =
                    |topic_id: u64| match exports.iter().find(|e| e.spec.topic_id == topic_id) {
                        Some(e) => e.ack_seq(),
                        None => directs
                            .iter()
                            .find(|d| d.topic_id == topic_id)
                            .map_or(0, DirectTopic::last_seq),
                    };
                let queued = self.replies.frames().len();
                let event =
                    self.publisher
                        .on_control(control, src, now_ns, last_seq, &mut self.replies);
                match self.replies.frames().get(queued) {
                    Some(Control::Refuse(_)) => self.metrics.refused.add(1),
                    // Only a Subscribe that proved its address and was admitted or renewed
                    // says anything about its subscriber's group: an unproven one is answered
                    // by a challenge and changes nothing.
                    Some(&Control::SubscribeAck { topic_id, .. }) => {
                        self.on_subscribe_group(topic_id, src, group);
                    }
                    _ => {}
                }
                if let Ok(PublisherEvent::SubscribersChanged(topic_id)) = event {
                    push_event(&mut self.events, Event::SubscribersChanged { topic_id });
                    let late_join = self.exports.iter().any(|e| {
                        e.spec.topic_id == topic_id
                            && e.reliable.as_ref().is_some_and(|r| r.late_join() > 0)
                    });
                    let joined = matches!(control, Control::Subscribe { .. }) && late_join;
                    if joined && self.joins.len() < self.joins.capacity() {
                        self.joins.push((topic_id, src));
                    }
                }
                event.map(|_| ())
            }
            Control::CookieChallenge { topic_id, .. }
            | Control::SubscribeAck { topic_id, .. }
            | Control::Heartbeat { topic_id, .. }
            | Control::Refuse(Refusal { topic_id, .. }) => {
                let topic_id = *topic_id;
                let Some(i) = self.import_of(src, topic_id) else {
                    // Only publishers we subscribe to may answer us.
                    return Err(DropReason::UnknownSender);
                };
                let Some(im) = self.imports.get_mut(i) else {
                    return Err(DropReason::UnknownSender);
                };
                let event = im
                    .session
                    .on_control(control, token, now_ns, &mut self.replies)?;
                im.heard_ns = now_ns;
                if self.by_group {
                    im.group_seen_ns = now_ns;
                }
                let following = match im.session.state() {
                    ImportState::Established { session, .. } => Some(session),
                    _ => None,
                };
                match (im.reliable.as_mut(), *control, event) {
                    (
                        Some(r),
                        Control::SubscribeAck { last_seq, .. },
                        SubscriberEvent::Established { .. },
                    ) => {
                        r.reset();
                        r.start(last_seq);
                    }
                    (
                        Some(r),
                        Control::Heartbeat {
                            session, last_seq, ..
                        },
                        _,
                    ) if following == Some(session) => r.on_heartbeat(last_seq, now_ns),
                    _ => {}
                }
                self.on_import_event(i, event);
                Ok(())
            }
        }
    }

    fn on_import_event(&mut self, i: usize, event: SubscriberEvent) {
        let Some(import) = self.imports.get_mut(i) else {
            return;
        };
        match event {
            SubscriberEvent::None => {}
            SubscriberEvent::Established { session, changed } => {
                import.warned = false;
                if changed {
                    // Told again by the new session if it has a group (its `Group` frame);
                    // until then its data comes by unicast.
                    import.group = None;
                    import.group_seen_ns = 0;
                }
                push_event(
                    &mut self.events,
                    Event::Established {
                        import: i,
                        session,
                        changed,
                    },
                );
            }
            SubscriberEvent::Refused(refusal) => {
                self.metrics.refused.add(1);
                push_event(&mut self.events, Event::Refused { import: i, refusal });
            }
            SubscriberEvent::Retrying(refusal) => {
                self.metrics.refused.add(1);
                if !import.warned {
                    import.warned = true;
                    push_event(&mut self.events, Event::Retrying { import: i, refusal });
                }
            }
        }
    }

    /// Starts a batch of messages of export `i` (its index in the exports given to
    /// [`new`](Self::new)), sent through `wire` as datagrams fill and when the batch is
    /// dropped. `None` if there is no such export.
    pub fn export<'a>(&'a mut self, i: usize, wire: &'a mut dyn Wire) -> Option<ExportBatch<'a>> {
        let room = self.buf.len() - self.egress.trailer_len();
        let export = self.exports.get_mut(i)?;
        let subscribers = self.publisher.subscribers();
        // A late-join history keeps messages even while nobody subscribes.
        let subscribed = subscribers
            .subscribers(export.spec.topic_id)
            .next()
            .is_some()
            || export.reliable.as_ref().is_some_and(|r| r.late_join() > 0);
        Some(ExportBatch {
            enc: BatchEncoder::new(&mut self.buf[..room]).with_token(self.egress.mac.is_none()),
            export,
            egress: &mut self.egress,
            wire,
            subscribers,
            metrics: &self.metrics,
            session: self.session,
            max_message: self.config.reassembly.max_message,
            wall: self.wall,
            timestamp_ns: None,
            subscribed,
        })
    }

    /// Handles a datagram that arrived on compat export `k`'s socket from `src`: a
    /// `Subscribe` or `Unsubscribe` (dropped and counted otherwise).
    pub(crate) fn handle_compat_export(
        &mut self,
        k: usize,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
    ) {
        self.metrics.datagrams_in.add(1);
        self.metrics.bytes_in.add(datagram.len() as u64);
        let Some(export) = self.compat_exports.get_mut(k) else {
            return;
        };
        let result = export.on_datagram(
            datagram,
            src,
            now_ns,
            &self.config.allow,
            &mut self.publisher,
        );
        if let Err(reason) = result {
            self.metrics.drop(reason);
        }
    }

    /// Handles a datagram that arrived on compat import `k`'s socket from `src`.
    pub(crate) fn handle_compat_import(
        &mut self,
        k: usize,
        datagram: &[u8],
        src: SocketAddr,
        sink: &mut dyn Sink,
    ) {
        self.metrics.datagrams_in.add(1);
        self.metrics.bytes_in.add(datagram.len() as u64);
        let Some(import) = self.compat_imports.get(k) else {
            return;
        };
        if let Err(reason) = import.on_datagram(k, datagram, src, sink, &self.metrics) {
            self.metrics.drop(reason);
        }
    }

    /// Sends `msg` to compat export `k`'s subscribers through `wire` (its socket).
    pub(crate) fn compat_send<T: serde::Serialize + ?Sized>(
        &mut self,
        k: usize,
        msg: &T,
        wire: &mut dyn Wire,
    ) {
        let wall_ns = (self.wall)();
        if let Some(export) = self.compat_exports.get_mut(k) {
            export.send(
                msg,
                wall_ns,
                &mut self.buf,
                &mut self.compat_dests,
                wire,
                &self.metrics,
            );
        }
    }

    /// Whether the compat imports' once-a-second `Subscribe` is due at `now_ns` (then not
    /// again for a renewal period).
    pub(crate) fn compat_renew_due(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_compat_renew {
            return false;
        }
        let every = u64::try_from(self.config.renew_every.as_nanos()).unwrap_or(u64::MAX);
        self.next_compat_renew = now_ns.saturating_add(every);
        true
    }

    /// Sends `control` from compat import `k` to its publisher through `wire` (its socket).
    pub(crate) fn compat_request(&self, k: usize, control: CompatControl, wire: &mut dyn Wire) {
        if let Some(import) = self.compat_imports.get(k) {
            import.request(control, wire);
        }
    }

    /// Does what is due at `now_ns`: each import's request (first subscribe, renewal, retry,
    /// resubscribe), the reliable imports' NAKs and deadlines (what they give up is
    /// delivered past, through `sink`), heartbeats, subscriber expiry and the cookie
    /// secret's reseed. Call it at least every millisecond while there are imports, else by
    /// [`next_deadline`](Self::next_deadline).
    pub fn on_timer(&mut self, now_ns: u64, wire: &mut dyn Wire, sink: &mut dyn Sink) {
        for i in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(i).filter(|im| !im.retired) else {
                continue;
            };
            let dest = import.spec.publisher;
            let group = self.group_health(i, now_ns);
            let Some(import) = self.imports.get_mut(i) else {
                continue;
            };
            if let Some(request) = import.session.poll(now_ns) {
                self.send_request(wire, &request, dest, group);
            }
        }
        self.poll_reliable(now_ns, wire, sink);
        self.poll_schema(now_ns, wire);
        self.poll_group_repairs(now_ns, wire);
        self.poll_discovery(now_ns, wire);
        if now_ns >= self.next_heartbeat {
            let every = u64::try_from(self.config.heartbeat_every.as_nanos()).unwrap_or(u64::MAX);
            self.next_heartbeat = now_ns.saturating_add(every);
            self.heartbeat(wire);
        }
        if now_ns >= self.next_housekeeping {
            self.next_housekeeping = now_ns.saturating_add(HOUSEKEEPING_NS);
            let expired = self.publisher.expire(now_ns, |s| {
                log::info!(
                    "subscriber {} of topic {:#018x} expired",
                    s.addr,
                    s.topic_id
                );
            });
            if expired > 0 {
                let topics = self.exports.iter().map(|e| e.spec.topic_id);
                let topics = topics.chain(self.directs.iter().map(|d| d.topic_id));
                for topic_id in topics {
                    push_event(&mut self.events, Event::SubscribersChanged { topic_id });
                }
            }
            for export in &mut self.compat_exports {
                export.table.expire(now_ns, |s| {
                    log::info!("compat subscriber {} expired", s.addr);
                });
            }
            if now_ns >= self.next_reseed {
                let window =
                    u64::try_from(self.config.cookie_window.as_nanos()).unwrap_or(u64::MAX);
                self.next_reseed = now_ns.saturating_add(window);
                let entropy = self.entropy.next();
                self.publisher.reseed(entropy);
            }
        }
    }

    /// The reliable imports' timers: gaps past their deadline are given up, due NAKs sent.
    fn poll_reliable(&mut self, now_ns: u64, wire: &mut dyn Wire, sink: &mut dyn Sink) {
        let room = self.control_room();
        let own_session = self.session;
        for index in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(index) else {
                continue;
            };
            // Fragmented messages that have waited too long are given up (counted).
            import.reassembly.poll(now_ns);
            if import.retired {
                continue;
            }
            let ImportSlot {
                spec,
                session,
                reliable,
                reassembly,
                nonce,
                port,
                ..
            } = import;
            let Some(receiver) = reliable.as_mut() else {
                continue;
            };
            let cookie = session.cookie();
            let (topic_id, dest, fingerprint) = (spec.topic_id, spec.publisher, spec.fingerprint);
            let publisher_session = match session.state() {
                ImportState::Established { session, .. } => session,
                _ => 0,
            };
            let mut in_order = InOrder {
                sink: &mut *sink,
                import: index,
                port: *port,
                reassembly,
                metrics: &self.metrics,
                events: &mut self.events,
                session: publisher_session,
                now_ns,
            };
            let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
            receiver.poll(
                now_ns,
                &mut in_order,
                || ImportSlot::next_nonce(nonce),
                |first, last, nonce| {
                    if let Some(cookie) = cookie {
                        // A round is at most `max_nak_ranges` frames: one datagram holds them
                        // (else the rest waits for the next round).
                        let _ = enc.push_nak(&Nak {
                            topic_id,
                            fingerprint,
                            session: own_session,
                            cookie,
                            nonce,
                            first,
                            last,
                        });
                    }
                },
            );
            let len = enc.len();
            if len > 0 {
                self.send_control_buf(wire, len, dest, None);
            }
        }
    }

    /// Sends each exported topic's last sequence number to its subscribers.
    fn heartbeat(&mut self, wire: &mut dyn Wire) {
        let timestamp_ns = (self.wall)();
        for i in 0..self.exports.len() + self.directs.len() {
            let topic_id = match self.exports.get(i) {
                Some(e) => e.spec.topic_id,
                None => match self.directs.get(i - self.exports.len()) {
                    Some(d) => d.topic_id,
                    None => continue,
                },
            };
            self.heartbeat_topic(wire, topic_id, timestamp_ns);
        }
    }

    fn heartbeat_topic(&mut self, wire: &mut dyn Wire, topic_id: u64, timestamp_ns: i64) {
        if self
            .publisher
            .subscribers()
            .subscribers(topic_id)
            .next()
            .is_none()
        {
            return;
        }
        let Some(fingerprint) = self
            .publisher
            .topics()
            .iter()
            .find(|t| t.topic_id == topic_id)
            .map(|t| t.fingerprint)
        else {
            return;
        };
        let control = Control::Heartbeat {
            topic_id,
            fingerprint,
            session: self.session,
            last_seq: self.last_seq(topic_id),
            timestamp_ns,
        };
        let offer = self.group_offer(topic_id);
        let room = self.control_room();
        let mut enc =
            BatchEncoder::new(&mut self.control_buf[..room]).with_token(self.egress.mac.is_none());
        if enc.push_control(&control).is_err() {
            return;
        }
        let subscribers = self.publisher.subscribers();
        let Some(offer) = offer else {
            let (datagrams, bytes) = self.egress.send(
                wire,
                enc.as_bytes(),
                true,
                subscribers.destinations(topic_id),
            );
            self.metrics.sent(datagrams, bytes);
            return;
        };
        // The heartbeat alone to the group, so that its members see it is working even when
        // idle, and to the subscribers that receive the group.
        let via_group = subscribers.group_destinations(topic_id);
        let (datagrams, bytes) = self.egress.send(wire, enc.as_bytes(), true, via_group);
        self.metrics.sent(datagrams, bytes);
        let group = (offer.group, offer.token);
        let (datagrams, bytes) =
            self.egress
                .send(wire, enc.as_bytes(), true, std::iter::once(group));
        self.metrics.sent(datagrams, bytes);
        // With the group told to the others.
        if enc.push_group_offer(&offer).is_ok() {
            let (datagrams, bytes) = self.egress.send(
                wire,
                enc.as_bytes(),
                true,
                subscribers.unicast_destinations(topic_id),
            );
            self.metrics.sent(datagrams, bytes);
        }
    }

    /// Unsubscribes every import (said once, best effort: an import that never subscribed
    /// says nothing), as a bridge does when it stops.
    pub fn close(&mut self, wire: &mut dyn Wire) {
        for i in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(i).filter(|im| !im.retired) else {
                continue;
            };
            let dest = import.spec.publisher;
            if let Some(unsubscribe) = import.session.unsubscribe() {
                self.send_control(wire, &unsubscribe, dest);
            }
        }
    }

    /// What each subscriber of a reliable export missed beyond history: `(topic, subscriber,
    /// missed)`.
    pub fn missed(&self) -> impl Iterator<Item = (&'static str, SocketAddr, u64)> + '_ {
        self.exports.iter().flat_map(|e| {
            e.reliable
                .iter()
                .flat_map(move |r| r.missed().map(move |(addr, n)| (e.spec.topic, addr, n)))
        })
    }

    /// The loss figures summed over every import: a best-effort import's tracker, a reliable
    /// one's `unconfirmed` (what it could not recover is `unrecovered`).
    pub fn loss(&self) -> LossCounts {
        let mut loss = self.retired.loss;
        for import in self.imports.iter().filter(|i| i.reliable.is_none()) {
            add_loss(&mut loss, import.session.loss());
        }
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            loss.unconfirmed = loss.unconfirmed.saturating_add(r.counts().unconfirmed);
        }
        loss
    }

    /// Sets the figures that are sums over the machines (loss, NAKs, retransmissions,
    /// handshakes, incomplete reassemblies).
    pub(crate) fn refresh_metrics(&self) {
        let m = &self.metrics;
        m.set_loss(&self.loss());
        let (mut nak_sent, mut unrecovered) = (self.retired.naks_sent, self.retired.unrecovered);
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            nak_sent = nak_sent.saturating_add(r.counts().naks_sent);
            unrecovered = unrecovered.saturating_add(r.counts().unrecovered);
        }
        let (mut retransmitted, mut unavailable, mut missing) = (0u64, 0u64, 0u64);
        for r in self.exports.iter().filter_map(|e| e.reliable.as_ref()) {
            retransmitted = retransmitted.saturating_add(r.counts().retransmitted);
            unavailable = unavailable.saturating_add(r.counts().unavailable);
            missing += r.missed().count() as u64;
        }
        m.missed_subscribers.set(missing);
        let incomplete = self.imports.iter().fold(self.retired.incomplete, |a, i| {
            a.saturating_add(i.reassembly.counts().incomplete)
        });
        m.set_drop(DropReason::Incomplete, incomplete);
        m.nak_sent.set(nak_sent);
        m.unrecovered.set(unrecovered);
        m.retransmitted.set(retransmitted);
        m.unavailable.set(unavailable);
        m.set_sessions(
            self.publisher.counts(),
            self.imports
                .iter()
                .map(|i| i.session.counts())
                .chain(std::iter::once(&self.retired.sessions)),
        );
    }

    /// The direct topics (for the bridge's lists of their subscribers).
    pub(crate) fn directs(&self) -> &[DirectTopic] {
        &self.directs
    }

    /// Every exported topic's id, ring-fed then direct.
    pub(crate) fn exported_topics(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let exports = self.exports.iter().map(|e| (e.spec.topic, e.spec.topic_id));
        exports.chain(self.directs.iter().map(|d| (d.topic, d.topic_id)))
    }
}
