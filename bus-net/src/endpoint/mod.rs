//! The sans-IO endpoint, in the manner of quinn-proto's `Endpoint`: every piece of a bridge's
//! protocol state, driven by `(datagram, source, now)` in and `(datagrams to send, messages
//! to deliver, events, next deadline)` out. No sockets, threads or clocks: datagrams leave
//! through a [`Wire`], messages through a [`Sink`], events are polled
//! ([`Endpoint::poll_event`]), and "now" is passed in. The bridge's actor moves bytes between
//! its sockets, rings and an `Endpoint`; the simulator (tests) drives two of them over a
//! faulty network with an adversary, and the `session` fuzz target drives one with arbitrary
//! datagrams: what they check is the code that ships.
//!
//! The `Endpoint` is a router over parts that each own their state, one file each:
//! - `publisher.rs` ([`PublisherSide`]): the handshake machine (allowlist, rate limit,
//!   cookies, the subscriber table with its caps, subscription tokens, the per-host
//!   retransmission budgets), every exported topic (`export.rs`: its sequence and, if
//!   reliable, its history), the control plane of the direct topics, the schemas served;
//! - `subscriber.rs` ([`SubscriberSide`]): every import (`import.rs`: its session machine,
//!   reliable receiver, reassembler and NAK nonces) and the schema fetches (`schema.rs`);
//! - `discovery.rs` ([`Discovery`]): announcements, queries, and the imports it adds;
//! - `service.rs` ([`Services`]): services across hosts: the calls of served services
//!   (admitted from proven subscribers, run once, answered out of a per-host reply budget)
//!   and of imported ones (resent until their deadline, each ending once);
//! - `compat.rs` ([`Compat`]): the ll-udp-pubsub v0.1 sockets, an endpoint of its own;
//! - `multicast.rs`: the rules of multicast data and group retransmission, over one export or
//!   one import;
//! - `common.rs` ([`Common`]): what they all use: identity, configuration, entropy, the one
//!   egress (`egress.rs`: every datagram is sealed with the pre-shared key, or followed by its
//!   destination's subscription token, there), the figures (`metrics.rs`) and the event queue
//!   (`event.rs`).
//!
//! Routing ([`Endpoint::handle`], [`Endpoint::on_timer`]): an unanswerable source is dropped
//! first; the datagram is opened (MAC) or parsed; its facts (source, token, the socket it came
//! by, now) become one [`Incoming`] value that travels with each frame to the part its kind
//! names, with the [`Common`] context lent for the call; a group's socket takes only what is
//! sent to that group ([`Via::takes`]). The parts' answers to one datagram go back to its
//! source in one datagram no larger than it, then the late-join bursts it earned. A timer
//! polls each part in turn.
//!
//! The rules it keeps (`SECURITY.md`, `docs/PROTOCOL.md`): an unanswerable source is dropped
//! first; the answers to one datagram go back to its source in one datagram no larger than it;
//! retransmissions and late-join bursts come out of the host's budget; data and heartbeats
//! reach an import only from its publisher, with its token.

mod common;
mod compat;
mod discovery;
mod egress;
mod event;
mod export;
mod import;
pub(crate) mod metrics;
mod multicast;
mod publisher;
mod schema;
mod service;
mod subscriber;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

pub use discovery::{DiscoverPattern, DiscoverSpec, DiscoveryCounts};
pub use egress::Wire;
pub(crate) use egress::{mac_of, protect_and_send, Egress};
pub use event::{Event, EVENT_QUEUE};
pub(crate) use export::{DirectShared, DirectTopic};
pub use export::{ExportBatch, ExportSpec};
pub use import::{ImportSpec, Origin, Sink};
pub use multicast::GroupRepairCounts;
pub use schema::{
    EncodedShape, SchemaFailure, MAX_SCHEMA_FETCHES, SCHEMA_ATTEMPTS, SCHEMA_RETRY_NS,
};
pub use service::{ServiceImportSpec, ServiceSpec, RESEND_FIRST_NS, RESEND_MAX_NS, SEEN_WINDOW};

use self::common::{Common, Entropy};
use self::compat::Compat;
use self::discovery::Discovery;
use self::metrics::NetMetrics;
use self::publisher::PublisherSide;
use self::service::Services;
use self::subscriber::{answer_topic, SubscriberSide};
use crate::session::{canonical, is_answerable, Replies};
use crate::{
    parse_datagram, BatchEncoder, BridgeConfig, CompatControl, Control, DiscoveryConfig,
    DropReason, ImportState, Kind, LossCounts, PublisherSession, Query, ReplayGuard,
    DEFAULT_MAX_DATAGRAM, HEADER_LEN, MAC_TAG_LEN,
};

/// Senders (session, lane) whose replay windows an endpoint keeps at once.
const REPLAY_SENDERS: usize = 256;

/// How often subscribers are expired, metrics summed and the cookie secret's window checked.
const HOUSEKEEPING_NS: u64 = 1_000_000_000;

/// The socket a datagram came by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// The native socket: anything.
    Unicast,
    /// A multicast data group's socket.
    Group,
    /// The discovery group's socket.
    DiscoveryGroup,
}

impl Via {
    /// Whether a frame of `kind` is taken from this socket. A group's socket takes only what
    /// is sent to that group (announcements and queries on the discovery group, a
    /// publisher's stream on a data group), so that nothing sent to a group draws an answer
    /// from every member.
    #[inline]
    fn takes(self, kind: Kind) -> bool {
        match self {
            Via::Unicast => true,
            Via::Group => matches!(
                kind,
                Kind::Data | Kind::Fragment | Kind::Heartbeat | Kind::Unavailable
            ),
            Via::DiscoveryGroup => matches!(kind, Kind::Announce | Kind::Query),
        }
    }
}

/// The facts of one datagram, which travel with each of its frames to the part that takes
/// it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incoming {
    /// Its source (canonical: an IPv4-mapped address as IPv4).
    pub(crate) src: SocketAddr,
    /// The subscription token it ends with, if its frames are downstream and there is no key.
    pub(crate) token: Option<u64>,
    /// The socket it came by.
    pub(crate) via: Via,
    pub(crate) now_ns: u64,
}

/// Every piece of a bridge's protocol state. See the module docs.
pub struct Endpoint {
    common: Common,
    /// The replay windows of the senders whose sealed datagrams arrive.
    replay: ReplayGuard,
    /// The answers to the datagram being handled, sent to its source when it is done.
    replies: Replies,
    publisher: PublisherSide,
    subscriber: SubscriberSide,
    /// The services served and called (empty tables when there are none).
    services: Services,
    /// `None` when off.
    discovery: Option<Box<Discovery>>,
    compat: Compat,
    next_housekeeping: u64,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("session", &self.common.session)
            .field("exports", &self.publisher.exports.len())
            .field("imports", &self.subscriber.imports.len())
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
        let recv_max = max_datagram.max(DEFAULT_MAX_DATAGRAM);
        let mut common = Common {
            session,
            max_datagram,
            recv_max,
            egress: Egress::new(mac_of(config), recv_max, config.subscribers_per_topic),
            entropy: Entropy::new(seed),
            wall: crate::realtime_ns,
            // Answers to a received datagram are packed into as much as it held.
            control_buf: vec![0; recv_max],
            metrics: NetMetrics::register(|_| llbus::Metric::default()),
            events: VecDeque::with_capacity(EVENT_QUEUE),
            config: config.clone(),
        };
        // The secrets are drawn in this order: the exports' group tokens, the imports'
        // secrets, then the publisher side's cookie and token secrets.
        let exports = PublisherSide::export_states(exports, &mut common);
        let subscriber = SubscriberSide::new(imports, &mut common);
        let publisher = PublisherSide::new(exports, directs, &mut common);
        Endpoint {
            replay: ReplayGuard::new(session, REPLAY_SENDERS),
            replies: Replies::with_capacity(recv_max / HEADER_LEN + 1),
            publisher,
            subscriber,
            services: Services::none(),
            discovery: None,
            compat: Compat::default(),
            next_housekeeping: HOUSEKEEPING_NS,
            common,
        }
    }

    /// Counts into the metrics `metric` makes from each name (the bridge registers them with
    /// the bus) instead of plain counters.
    pub(crate) fn with_metrics(mut self, metric: impl FnMut(&str) -> llbus::Metric) -> Self {
        self.common.metrics = NetMetrics::register(metric);
        self
    }

    /// Reads the wall clock (the timestamps in data frames and heartbeats) with `wall`
    /// instead of the system's realtime clock (a simulation's clock, say).
    pub fn with_wall_clock(mut self, wall: fn() -> i64) -> Self {
        self.common.wall = wall;
        self
    }

    /// Serves `served` to remote callers and calls `imported` (`docs/PROTOCOL.md`,
    /// "Services"): each served service is exported as a topic callers subscribe to, each
    /// imported one is an import (after the imports given to [`new`](Self::new)) that proves
    /// this endpoint to its server. Requests of served services reach [`Sink::request`]; the
    /// ends of calls made with [`call`](Self::call) reach [`Sink::reply`]. Allocates every
    /// table of calls now.
    pub fn with_services(
        mut self,
        served: Vec<ServiceSpec>,
        imported: Vec<ServiceImportSpec>,
    ) -> Self {
        self.services = Services::new(
            served,
            imported,
            &mut self.publisher.machine,
            &mut self.subscriber,
            &mut self.common,
        );
        self
    }

    /// The served services, in the order given.
    pub fn served_services(&self) -> &[ServiceSpec] {
        self.services.served()
    }

    /// The imported services, each with the index of the import that proves this endpoint
    /// to its server (events name it).
    pub fn imported_services(&self) -> impl Iterator<Item = (&ServiceImportSpec, usize)> + '_ {
        self.services.imported()
    }

    /// Calls imported service `service` (its index among the imported services) with
    /// `body`, until `deadline_ns` (in the nanoseconds of `now_ns`): its request goes now
    /// through `wire` if the service's subscription is established, else once it is, and
    /// again on a backoff (10 ms doubling to 200 ms) until its reply or its deadline. The
    /// call ends exactly once, through the sink of a later [`handle`](Self::handle) or
    /// [`on_timer`](Self::on_timer): [`Sink::reply`] with `key`. Allocates nothing.
    ///
    /// # Errors
    /// [`CallStatus::Refused`](crate::CallStatus::Refused) (no such service, or its server refused it),
    /// [`CallStatus::QueueFull`](crate::CallStatus::QueueFull) (every call slot is in flight: `ServiceConfig::calls_in_flight`),
    /// [`CallStatus::TooLarge`](crate::CallStatus::TooLarge) (the request does not fit in one datagram), or
    /// [`CallStatus::Dropped`](crate::CallStatus::Dropped) (it cannot be encoded): the call was not made.
    pub fn call<T: serde::Serialize + ?Sized>(
        &mut self,
        service: usize,
        key: u64,
        body: &T,
        deadline_ns: u64,
        now_ns: u64,
        wire: &mut dyn Wire,
    ) -> Result<(), crate::CallStatus> {
        self.services.call(
            service,
            key,
            body,
            deadline_ns,
            now_ns,
            wire,
            &self.subscriber,
            &mut self.common,
        )
    }

    /// Answers served call `key` (from [`Sink::request`]) with `result`: the reply goes to
    /// its caller now, out of its host's reply budget, and is kept for the caller's resends
    /// until its deadline. A second answer, or one for a call forgotten, is ignored.
    pub fn answer<T: serde::Serialize + ?Sized>(
        &mut self,
        key: u64,
        result: Result<&T, crate::CallStatus>,
        now_ns: u64,
        wire: &mut dyn Wire,
    ) {
        self.services
            .answer(key, result, now_ns, wire, &mut self.common);
    }

    /// Turns discovery on: announces the exports (data address `local`; an unspecified IP
    /// means the announcements' source) as `config` says, and imports each topic of `wants`
    /// from whichever publishers announce it. Allocates its tables now.
    pub fn with_discovery(
        mut self,
        config: &DiscoveryConfig,
        local: SocketAddr,
        wants: Vec<DiscoverSpec>,
    ) -> Self {
        self.discovery = Some(Box::new(Discovery::new(
            config,
            local,
            wants,
            self.common.config.rate_limit_sources,
            self.common.max_datagram,
        )));
        self
    }

    /// With discovery on: counts (and reports, [`Event::Mismatched`]) the announced names that
    /// `patterns` match and that no topic of [`with_discovery`](Self::with_discovery)'s
    /// `wants` imports.
    pub fn with_discovery_patterns(mut self, patterns: Vec<DiscoverPattern>) -> Self {
        if let Some(discovery) = &mut self.discovery {
            discovery.set_patterns(patterns);
        }
        self
    }

    /// Serves `topic` in the compat format (its socket's datagrams go to
    /// [`handle_compat_export`](Self::handle_compat_export)). Returns its index.
    pub(crate) fn add_compat_export(&mut self, topic: Arc<str>, topic_id: u64) -> usize {
        let c = &self.common;
        self.compat
            .add_export(topic, topic_id, &c.config, c.max_datagram)
    }

    /// Imports from `publisher` in the compat format. Returns its index.
    pub(crate) fn add_compat_import(&mut self, publisher: SocketAddr) -> usize {
        self.compat.add_import(publisher)
    }

    /// The endpoint's session id (the publisher session its exports carry).
    pub fn session(&self) -> u64 {
        self.common.session
    }

    /// The imports, in the order given.
    pub fn imports(&self) -> impl Iterator<Item = &ImportSpec> {
        self.subscriber.imports.iter().map(|i| &i.spec)
    }

    /// The exports, in the order given.
    pub fn exports(&self) -> impl Iterator<Item = &ExportSpec> {
        self.publisher.exports.iter().map(|e| &e.spec)
    }

    /// The state of import `i`'s subscription.
    pub fn import_state(&self, i: usize) -> Option<ImportState> {
        self.subscriber.import_state(i)
    }

    /// The publisher side (its subscriber table, counts and topics).
    pub fn publisher(&self) -> &PublisherSession {
        &self.publisher.machine
    }

    pub(crate) fn metrics(&self) -> &NetMetrics {
        &self.common.metrics
    }

    /// The subscribers of `topic_id` with their subscription tokens.
    pub fn destinations(&self, topic_id: u64) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
        self.publisher.machine.subscribers().destinations(topic_id)
    }

    /// The next event, oldest first. Poll until `None` after each call that takes a datagram
    /// or a timer: at most [`EVENT_QUEUE`] events are held, the oldest dropped beyond that.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.common.events.pop_front()
    }

    /// When [`on_timer`](Self::on_timer) next has something to do at the latest, in the
    /// nanoseconds of `now_ns`. Imports' renewals and reliable receivers' NAKs are checked on
    /// every call: a driver that has imports calls it at least every millisecond.
    pub fn next_deadline(&self) -> u64 {
        let discovery = self
            .discovery
            .as_ref()
            .map_or(u64::MAX, |d| d.deadline(self.next_housekeeping));
        self.publisher
            .deadline()
            .min(self.next_housekeeping)
            .min(self.subscriber.fetches.deadline())
            .min(self.services.deadline())
            .min(discovery)
    }

    /// Handles one datagram that arrived on the native socket from `src` at `now_ns`: opens
    /// it (MAC) or parses it, hands each frame to the part it is for, delivers what the
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
        self.route(datagram, src, Via::Unicast, now_ns, wire, sink);
    }

    /// Handles a datagram that arrived on a multicast group's socket, as
    /// [`handle`](Self::handle), noting that it came by the group.
    pub fn handle_multicast(
        &mut self,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
    ) {
        self.route(datagram, src, Via::Group, now_ns, wire, sink);
    }

    /// Handles a datagram heard on the discovery group: as [`handle`](Self::handle), except
    /// that this endpoint's own announcements and queries, which the group loops back, are
    /// ignored before anything is counted (sealed, they would count as replayed).
    pub fn handle_group(
        &mut self,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
    ) {
        // The first frame's session field (its header is checked by `route` if it goes on).
        let session = datagram
            .get(24..32)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if session == Some(self.common.session) {
            return;
        }
        self.route(datagram, src, Via::DiscoveryGroup, now_ns, wire, sink);
    }

    /// The router: see the module docs.
    #[inline]
    fn route(
        &mut self,
        datagram: &[u8],
        src: SocketAddr,
        via: Via,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
    ) {
        let common = &mut self.common;
        common.metrics.datagrams_in.add(1);
        common.metrics.bytes_in.add(datagram.len() as u64);
        let src = canonical(src);
        if !is_answerable(src) {
            common.metrics.drop(DropReason::BadSource);
            return;
        }
        let parsed = match &common.egress.mac {
            Some(mac) => mac.open_once(datagram, common.recv_max, &mut self.replay),
            None => parse_datagram(datagram, common.recv_max),
        };
        let frames = match parsed {
            Ok(frames) => frames,
            Err(reason) => {
                common.metrics.drop(reason);
                return;
            }
        };
        self.replies.clear(src);
        let incoming = Incoming {
            src,
            token: frames.token(),
            via,
            now_ns,
        };
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
            if !via.takes(frame.header.kind) {
                dropped.get_or_insert(DropReason::UnknownSender);
                continue;
            }
            let (common, publisher, subscriber) =
                (&mut self.common, &mut self.publisher, &mut self.subscriber);
            let result = match frame.header.kind {
                Kind::Data | Kind::Fragment => {
                    let topic_id = frame.header.topic_id;
                    match subscriber.import_of(src, topic_id) {
                        Some(i) => subscriber.on_data(i, &frame, &incoming, common, sink),
                        // A frame of a topic this endpoint imports from someone else, or
                        // exports, is `UnknownSender`; of another topic, `UnknownTopic`.
                        None if subscriber.imports_topic(topic_id)
                            || publisher.exports_topic(topic_id) =>
                        {
                            Err(DropReason::UnknownSender)
                        }
                        None => Err(DropReason::UnknownTopic),
                    }
                }
                Kind::Nak => publisher.on_nak(&frame, &incoming, wire, common),
                Kind::Unavailable => subscriber.on_unavailable(&frame, &incoming, common, sink),
                Kind::SchemaRequest => {
                    let served = self.services.served();
                    publisher.on_schema_request(&frame, &incoming, lone, served, wire, common)
                }
                Kind::SchemaReply => subscriber.fetches.on_reply(&frame, src, now_ns, common),
                Kind::Announce => match self.discovery.as_mut() {
                    Some(d) => d.on_announce(&frame, &incoming, subscriber, common),
                    None => Err(DropReason::UnknownTopic),
                },
                Kind::Query => match self.discovery.as_mut() {
                    Some(d) => d.on_query(
                        &frame,
                        &incoming,
                        &mut query_budget,
                        discovery::Offered::new(publisher, self.services.served()),
                        wire,
                        common,
                    ),
                    None => Query::from_frame(&frame).and(Err(DropReason::UnknownTopic)),
                },
                Kind::Group => subscriber.on_group_offer(&frame, &incoming, common),
                Kind::Request => self.services.on_request(
                    &frame,
                    &incoming,
                    &publisher.machine,
                    wire,
                    sink,
                    common,
                ),
                Kind::Reply => self
                    .services
                    .on_reply(&frame, &incoming, subscriber, sink, common),
                _ => match Control::from_frame(&frame) {
                    Ok(control) => match answer_topic(&control) {
                        Some(topic_id) => subscriber.on_control(
                            &control,
                            topic_id,
                            &incoming,
                            &mut self.replies,
                            common,
                        ),
                        None => publisher.on_subscription(
                            &control,
                            frame.header.flags.group(),
                            &incoming,
                            &mut self.replies,
                            common,
                        ),
                    },
                    Err(reason) => Err(reason),
                },
            };
            if let Err(reason) = result {
                dropped.get_or_insert(reason);
            }
        }
        if let Some(reason) = dropped {
            self.common.metrics.drop(reason);
        }
        self.send_replies(wire, datagram.len());
        self.publisher.send_joins(wire, now_ns, &mut self.common);
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
        let common = &mut self.common;
        let tag = if common.egress.mac.is_some() {
            MAC_TAG_LEN
        } else {
            0
        };
        let room = common.recv_max - tag;
        let mut sent_bytes = 0usize;
        let mut datagrams = 0usize;
        let mut i = 0;
        let count = self.replies.frames().len();
        while i < count {
            let mut enc = BatchEncoder::new(&mut common.control_buf[..room]);
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
                common.metrics.drop(DropReason::TooLarge);
                return;
            }
            common.send_control_buf(wire, len, dest, None);
        }
    }

    /// Starts a batch of messages of export `i` (its index in the exports given to
    /// [`new`](Self::new)), sent through `wire` as datagrams fill and when the batch is
    /// dropped. `None` if there is no such export.
    #[inline]
    pub fn export<'a>(&'a mut self, i: usize, wire: &'a mut dyn Wire) -> Option<ExportBatch<'a>> {
        self.publisher.export(i, wire, &mut self.common)
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
        let common = &mut self.common;
        common.metrics.datagrams_in.add(1);
        common.metrics.bytes_in.add(datagram.len() as u64);
        let result = self.compat.on_export_datagram(
            k,
            datagram,
            src,
            now_ns,
            &common.config.allow,
            &mut self.publisher.machine,
        );
        if let Err(reason) = result {
            common.metrics.drop(reason);
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
        let metrics = &self.common.metrics;
        metrics.datagrams_in.add(1);
        metrics.bytes_in.add(datagram.len() as u64);
        let result = self
            .compat
            .on_import_datagram(k, datagram, src, sink, metrics);
        if let Err(reason) = result {
            metrics.drop(reason);
        }
    }

    /// Sends `msg` to compat export `k`'s subscribers through `wire` (its socket).
    pub(crate) fn compat_send<T: serde::Serialize + ?Sized>(
        &mut self,
        k: usize,
        msg: &T,
        wire: &mut dyn Wire,
    ) {
        let wall_ns = (self.common.wall)();
        self.compat
            .send(k, msg, wall_ns, wire, &self.common.metrics);
    }

    /// Whether the compat imports' once-a-second `Subscribe` is due at `now_ns` (then not
    /// again for a renewal period).
    pub(crate) fn compat_renew_due(&mut self, now_ns: u64) -> bool {
        let every = u64::try_from(self.common.config.renew_every.as_nanos()).unwrap_or(u64::MAX);
        self.compat.renew_due(now_ns, every)
    }

    /// Sends `control` from compat import `k` to its publisher through `wire` (its socket).
    pub(crate) fn compat_request(&self, k: usize, control: CompatControl, wire: &mut dyn Wire) {
        self.compat.request(k, control, wire);
    }

    /// Does what is due at `now_ns`: each import's request (first subscribe, renewal, retry,
    /// resubscribe), the reliable imports' NAKs and deadlines (what they give up is
    /// delivered past, through `sink`), the schema fetches, group retransmissions,
    /// discovery, heartbeats, subscriber expiry and the cookie secret's reseed. Call it at
    /// least every millisecond while there are imports, else by
    /// [`next_deadline`](Self::next_deadline).
    pub fn on_timer(&mut self, now_ns: u64, wire: &mut dyn Wire, sink: &mut dyn Sink) {
        let common = &mut self.common;
        self.subscriber.poll(now_ns, wire, sink, common);
        self.subscriber.fetches.poll(now_ns, wire, common);
        self.publisher.poll_group_repairs(now_ns, wire, common);
        if let Some(d) = self.discovery.as_mut() {
            let offered = discovery::Offered::new(&self.publisher, self.services.served());
            d.poll(now_ns, wire, &mut self.subscriber, offered, common);
        }
        self.publisher.poll_heartbeat(now_ns, wire, common);
        self.services
            .poll(now_ns, wire, sink, &self.subscriber, common);
        if now_ns >= self.next_housekeeping {
            self.next_housekeeping = now_ns.saturating_add(HOUSEKEEPING_NS);
            self.publisher.housekeeping(now_ns, common);
            self.compat.expire(now_ns);
            self.publisher.reseed(now_ns, common);
        }
    }

    /// Unsubscribes every import (said once, best effort: an import that never subscribed
    /// says nothing), as a bridge does when it stops.
    pub fn close(&mut self, wire: &mut dyn Wire) {
        self.subscriber.close(wire, &mut self.common);
    }

    /// Adds an import of `spec` while the endpoint runs, delivering to `port` (the index its
    /// messages reach [`Sink::deliver`] with). Returns its index (events name it), reusing a
    /// removed import's slot if there is one. Allocates its receiver and reassembler.
    pub fn add_import(&mut self, spec: ImportSpec, port: usize) -> usize {
        self.subscriber.add_import(spec, port, &mut self.common)
    }

    /// Removes import `i`: unsubscribes (best effort, through `wire`) and stops sending and
    /// accepting anything for it. Its figures stay counted.
    pub fn remove_import(&mut self, i: usize, wire: &mut dyn Wire) {
        self.subscriber.remove_import(i, wire, &mut self.common);
    }

    /// The data groups the live imports were told of: a driver keeps these joined and
    /// leaves any other (an import removed, or told another group by its publisher).
    pub fn import_groups(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.subscriber.import_groups()
    }

    /// What group retransmission did.
    pub fn group_repairs(&self) -> GroupRepairCounts {
        self.publisher.group_repairs()
    }

    /// When the first queued group retransmission falls due (`u64::MAX`: none queued).
    #[cfg(test)]
    pub(crate) fn group_repair_deadline(&self) -> u64 {
        self.publisher.repair_deadline()
    }

    /// Starts fetching the shape of topic `topic_id` from the publisher at `publisher`: the
    /// requests go out from [`on_timer`](Self::on_timer) (due at once: see
    /// [`next_deadline`](Self::next_deadline)), and the fetch ends with
    /// [`Event::SchemaReceived`] or [`Event::SchemaFailed`]. Asking again for a fetch under
    /// way does nothing. Returns `false` (and starts nothing) when [`MAX_SCHEMA_FETCHES`] are
    /// under way.
    pub fn request_schema(&mut self, topic_id: u64, publisher: SocketAddr) -> bool {
        self.subscriber
            .fetches
            .request(topic_id, publisher, &mut self.common)
    }

    /// What discovery did; `None` if it is off.
    pub fn discovery_counts(&self) -> Option<DiscoveryCounts> {
        self.discovery.as_ref().map(|d| d.counts())
    }

    /// The publishers discovery follows: `(topic, data address, session, import)`; the
    /// session is the one the import follows once established (the announced one before).
    pub fn discovered(&self) -> impl Iterator<Item = (&Arc<str>, SocketAddr, u64, usize)> + '_ {
        let subscriber = &self.subscriber;
        self.discovery
            .iter()
            .flat_map(move |d| d.discovered(subscriber))
    }

    /// What each subscriber of a reliable export missed beyond history: `(topic, subscriber,
    /// missed)`.
    pub fn missed(&self) -> impl Iterator<Item = (&Arc<str>, SocketAddr, u64)> + '_ {
        self.publisher.missed()
    }

    /// The loss figures summed over every import: a best-effort import's tracker, a reliable
    /// one's `unconfirmed` (what it could not recover is `unrecovered`).
    pub fn loss(&self) -> LossCounts {
        self.subscriber.loss()
    }

    /// Sets the figures that are sums over the machines (loss, NAKs, retransmissions,
    /// handshakes, incomplete reassemblies).
    pub(crate) fn refresh_metrics(&self) {
        let m = &self.common.metrics;
        self.subscriber.refresh_metrics(m);
        self.publisher.refresh_metrics(m);
        m.set_sessions(self.publisher.counts(), self.subscriber.session_counts());
    }

    /// The direct topics (for the bridge's lists of their subscribers).
    pub(crate) fn directs(&self) -> &[DirectTopic] {
        &self.publisher.directs
    }

    /// Every exported topic's id, ring-fed then direct.
    pub(crate) fn exported_topics(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.publisher.exported_topics()
    }
}

/// What the tests read of the parts' state that no figure or event shows.
#[cfg(test)]
impl Endpoint {
    /// What import `i`'s reassembler counted.
    pub(crate) fn reassembly_counts(&self, i: usize) -> Option<crate::ReassemblyCounts> {
        Some(*self.subscriber.imports.get(i)?.reassembly.counts())
    }
}
