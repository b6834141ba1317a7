//! The bridge's actor: a thin loop that moves datagrams between its sockets and the session
//! machines (`crate::session`) and ports, and drives their timers from the bus's tick.
//!
//! Every round: pump the exports (send first), then receive. A received datagram's source is
//! canonicalised and checked (an unanswerable source is dropped, `drop.bad_source`), the
//! datagram opened (MAC) or parsed, and each frame routed: data to the import of its (source,
//! topic), which asks its session machine whether to deliver; subscribe and unsubscribe to the
//! publisher machine; challenge, acknowledgement, refusal and heartbeat to the import of its
//! (source, topic). The machines' answers to one datagram are packed into as few datagrams as
//! they fit in and sent back to its source: never more datagrams nor bytes than it.
//!
//! Nothing from the network stops the bridge: a send that fails for one destination is
//! counted; a socket that fails for good is not used again and is reported once, within its
//! next metrics refresh (a second): through the bus (`Context::fail`, which stops the bus with
//! `BusError::ActorFailed` naming the bridge and the socket), [`BridgeStatus`] and the
//! `socket_failed` metric.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus::{Actor, Context, Setup};

use super::config::mac_of;
use super::direct::DirectPort;
use super::egress::Protect;
use super::metrics::{add_loss, NetMetrics};
use super::ports::{fan_out, CompatExportPort, CompatImportPort, ExportPort, ImportPort, SendSide};
use super::{BridgeConfig, BridgeStatus, Parts};
use crate::session::{canonical, is_answerable, Replies};
use crate::{
    parse_datagram, random_secret, BatchEncoder, CompatControl, Control, CookieJar, DropReason,
    ExportedTopic, FrameMac, Kind, LossCounts, PublisherEvent, PublisherSession, RateLimiter,
    RecvBatch, ReplayGuard, SendBatch, SubscriberEvent, SubscriberSession, SubscriberTable,
    UdpEndpoint, DEFAULT_MAX_DATAGRAM, HEADER_LEN, MAC_TAG_LEN, TOKEN_LEN,
};
use crate::{
    Delivery, HostBudgets, ImportState, Nak, Reassembled, Reassembler, ReliableConfig,
    ReliableExport, ReliableReceiver, Retransmit, Unavailable,
};

/// Messages taken from one ring per poll of an export.
const BUDGET: usize = 256;

/// Senders (session, lane) whose replay windows a bridge keeps at once.
const REPLAY_SENDERS: usize = 256;

/// One import: its typed port, its publisher and its session machine.
struct ImportSlot {
    port: Box<dyn ImportPort>,
    publisher: SocketAddr,
    session: SubscriberSession,
    /// Whether a transient refusal was reported since the import was last established.
    warned: bool,
    /// The reorder buffer and NAK state of a reliable import.
    reliable: Option<ReliableReceiver>,
    /// Messages arriving in fragments, put back together (bounded, buffers reused).
    reassembly: Reassembler,
    /// The state of this import's NAK nonces (splitmix64 from a random seed: an off-path host
    /// does not see them).
    nonce: u64,
}

/// Hands what a reliable import delivers, in order, to its port: a message as it is, a
/// fragment to the reassembler first.
struct PortSink<'a, 'b> {
    port: &'a mut dyn ImportPort,
    reassembly: &'a mut Reassembler,
    ctx: &'a mut Context<'b>,
    metrics: &'a NetMetrics,
    topic: &'static str,
    /// The publisher session the frames are of.
    session: u64,
    now_ns: u64,
}

impl<'a, 'b> PortSink<'a, 'b> {
    fn new(
        port: &'a mut dyn ImportPort,
        reassembly: &'a mut Reassembler,
        ctx: &'a mut Context<'b>,
        metrics: &'a NetMetrics,
        session: u64,
        now_ns: u64,
    ) -> Self {
        PortSink {
            topic: port.topic(),
            port,
            reassembly,
            ctx,
            metrics,
            session,
            now_ns,
        }
    }
}

/// Hands a data frame's payload to `port`, or a fragment's to `reassembly` and the message to
/// `port` once it is complete.
#[inline]
#[allow(clippy::too_many_arguments)]
fn deliver_frame(
    port: &mut dyn ImportPort,
    reassembly: &mut Reassembler,
    kind: Kind,
    session: u64,
    seq: u64,
    payload: &[u8],
    now_ns: u64,
    ctx: &mut Context<'_>,
    metrics: &NetMetrics,
) -> Result<(), DropReason> {
    if kind != Kind::Fragment {
        return port.deliver(payload, ctx, metrics);
    }
    match reassembly.on_fragment(session, seq, payload, now_ns)? {
        Reassembled::Complete(message) => port.deliver(message, ctx, metrics),
        Reassembled::Pending => Ok(()),
    }
}

impl Delivery for PortSink<'_, '_> {
    #[inline]
    fn deliver(&mut self, seq: u64, kind: Kind, payload: &[u8]) {
        let delivered = deliver_frame(
            self.port,
            self.reassembly,
            kind,
            self.session,
            seq,
            payload,
            self.now_ns,
            self.ctx,
            self.metrics,
        );
        if let Err(reason) = delivered {
            self.metrics.drop(reason);
        }
    }

    fn unrecovered(&mut self, first: u64, last: u64) {
        // Delivery is in order: a message in flight is missing a fragment of this range.
        self.reassembly.abandon();
        log::warn!(
            "reliable import of topic '{}': messages {first}..={last} could not be recovered",
            self.topic
        );
    }
}

/// The next NAK nonce of an import (splitmix64; never 0).
fn next_nonce(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

/// Sends the frames `buf[..len]` to `dest` alone through the bridge's one egress: sealed with
/// `mac` if there is a key, else followed by `token` (the destination's subscription token)
/// for downstream frames (`token` is `Some`), else as they are. Counts it; a socket that fails
/// for good is recorded in `failed`.
#[allow(clippy::too_many_arguments)]
fn send_one(
    endpoint: &mut UdpEndpoint,
    batch: &mut SendBatch,
    mac: Option<&FrameMac>,
    seal_buf: &mut [u8],
    frames: &[u8],
    dest: SocketAddr,
    token: Option<u64>,
    metrics: &NetMetrics,
    failed: &mut Option<std::io::Error>,
) {
    fan_out(
        frames,
        std::iter::once((dest, token.unwrap_or(0))),
        endpoint,
        batch,
        Protect::of(mac, seal_buf, token.is_some()),
        metrics,
        failed,
    );
}

/// A compat export's socket, subscribers and health.
struct CompatExportSlot {
    port: Box<dyn CompatExportPort>,
    table: SubscriberTable<SocketAddr>,
    failed: Option<std::io::Error>,
    reported: bool,
}

/// A compat import's socket and health.
struct CompatImportSlot {
    port: Box<dyn CompatImportPort>,
    failed: Option<std::io::Error>,
    reported: bool,
}

/// The bridge running as an actor. Made by `bus.add(bridge)`; see [`Bridge`](super::Bridge).
pub struct BridgeActor {
    name: String,
    session: u64,
    config: BridgeConfig,
    max_datagram: usize,
    /// The largest datagram accepted: `max_datagram`, but never less than the IPv4 default, so
    /// a dual-stack bridge (1452 by default) takes what an IPv4 peer (1472) sends it.
    recv_max: usize,
    endpoint: UdpEndpoint,
    /// Set once the native socket failed for good; it is not used again.
    failed: Option<std::io::Error>,
    failure_reported: bool,
    /// The receive batch; `None` only while `receive` holds it.
    recv: Option<RecvBatch>,
    send: SendBatch,
    /// One datagram being built by an export.
    buf: Vec<u8>,
    /// Control frames being built (answers, renewals, heartbeats): one datagram.
    control_buf: Vec<u8>,
    /// Where a datagram is copied to be sealed (with a pre-shared key) or put together with
    /// its subscription token (without).
    seal_buf: Vec<u8>,
    mac: Option<FrameMac>,
    /// The replay windows of the senders whose sealed datagrams arrive.
    replay: ReplayGuard,
    publisher: PublisherSession,
    replies: Replies,
    /// The plan of the answer to one NAK (preallocated).
    retransmit: Retransmit,
    /// Subscribers admitted by the datagram being handled, to send the last messages of a
    /// late-join export once the acknowledgement has gone (preallocated, bounded).
    joins: Vec<(u64, SocketAddr)>,
    exports: Vec<Box<dyn ExportPort>>,
    imports: Vec<ImportSlot>,
    compat_exports: Vec<CompatExportSlot>,
    compat_imports: Vec<CompatImportSlot>,
    directs: Vec<DirectPort>,
    metrics: NetMetrics,
    subscriber_gauges: Vec<llbus::Metric>,
    status: BridgeStatus,
    epoch: Instant,
    next_renew: Instant,
    next_heartbeat: Instant,
    next_expire: Instant,
    next_reseed: Instant,
}

impl std::fmt::Debug for BridgeActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeActor")
            .field("name", &self.name)
            .field("local_addr", &self.endpoint.local_addr())
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// 32 random bytes from the OS, or (it is almost never missing; the bridge must not stop for
/// it) bytes derived from `fallback` and the clock, said in the log.
fn secret_or(fallback: u64, what: &str) -> [u8; 32] {
    match random_secret() {
        Ok(secret) => secret,
        Err(e) => {
            log::error!("no OS randomness for the {what} ({e}); deriving it from the session id");
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
        let export_allow: Vec<_> = exports.iter().map(|e| e.allow.clone()).collect();
        let reliable_config = ReliableConfig {
            max_frame: max_datagram,
            ..config.reliable
        };
        let exports: Vec<Box<dyn ExportPort>> = exports
            .iter()
            .map(|e| {
                let mut port = (e.make)(setup);
                if e.reliable {
                    port.set_reliable(
                        ReliableExport::new(
                            port.topic_id(),
                            port.fingerprint(),
                            session,
                            config.subscribers_per_topic,
                            &reliable_config,
                        )
                        .with_late_join(e.late_join),
                    );
                }
                port
            })
            .collect();
        let mut topics = Vec::with_capacity(exports.len() + directs.len());
        for (e, allow) in exports.iter().zip(export_allow) {
            topics.push(ExportedTopic {
                topic_id: e.topic_id(),
                fingerprint: e.fingerprint(),
                allow,
            });
        }
        for d in &directs {
            topics.push(ExportedTopic {
                topic_id: d.topic_id,
                fingerprint: d.fingerprint,
                allow: None,
            });
        }
        let subscriber_gauges = exports
            .iter()
            .map(|e| e.topic())
            .chain(directs.iter().map(|d| d.topic))
            .map(|topic| setup.metric(&format!("subscribers.{topic}")))
            .collect();
        let imports = imports
            .iter()
            .map(|decl| {
                let port = (decl.make)(setup);
                let seed = secret_or(session, "NAK nonces");
                let session = SubscriberSession::new(
                    port.topic_id(),
                    port.fingerprint(),
                    session,
                    secret_or(session, "subscribe nonces"),
                    config.renew_every,
                    config.late,
                );
                // With a pre-shared key the MAC authenticates the stream; without, the
                // subscription token does.
                let session = if config.psk.is_some() {
                    session.without_token()
                } else {
                    session
                };
                let mut nonce = [0u8; 8];
                nonce.copy_from_slice(&seed[..8]);
                ImportSlot {
                    port,
                    publisher: decl.publisher,
                    session,
                    warned: false,
                    reliable: decl
                        .reliable
                        .then(|| ReliableReceiver::new(&reliable_config)),
                    reassembly: Reassembler::new(&config.reassembly),
                    nonce: u64::from_le_bytes(nonce),
                }
            })
            .collect();
        let capacity = config.subscriber_capacity;
        let timeout = config.subscriber_timeout;
        let table = || {
            SubscriberTable::new(timeout, capacity)
                .with_topic_cap(config.subscribers_per_topic)
                .with_host_cap(config.subscribers_per_host)
        };
        let compat_exports = compat_exports
            .into_iter()
            .map(|e| CompatExportSlot {
                port: (e.make)(setup, e.endpoint),
                table: table(),
                failed: None,
                reported: false,
            })
            .collect();
        let compat_imports = compat_imports
            .into_iter()
            .map(|i| CompatImportSlot {
                port: (i.make)(setup, i.endpoint, canonical(i.publisher)),
                failed: None,
                reported: false,
            })
            .collect();
        let recv_max = max_datagram.max(DEFAULT_MAX_DATAGRAM);
        let now = Instant::now();
        let jar = CookieJar::new(secret_or(session, "cookie secret"), config.cookie_window);
        let publisher = PublisherSession::new(
            session,
            jar,
            RateLimiter::new(config.rate_limit, config.rate_limit_sources),
            config.allow.clone(),
            topics,
            table(),
            secret_or(session, "subscription tokens"),
        )
        .with_budgets(HostBudgets::new(capacity, config.reliable.retransmit_rate));
        BridgeActor {
            name: name.to_owned(),
            seal_buf: vec![0; recv_max],
            mac: mac_of(&config),
            replay: ReplayGuard::new(session, REPLAY_SENDERS),
            publisher,
            replies: Replies::with_capacity(recv_max / HEADER_LEN + 1),
            retransmit: Retransmit::with_capacity(config.reliable.retransmit_per_nak),
            joins: Vec::with_capacity(recv_max / HEADER_LEN + 1),
            next_reseed: now + config.cookie_window,
            session,
            directs,
            recv: Some(RecvBatch::new(config.batch, recv_max)),
            send: SendBatch::new(config.batch),
            buf: vec![0; max_datagram],
            // Answers to a received datagram are packed into as much as it held.
            control_buf: vec![0; recv_max],
            metrics: NetMetrics::register(setup),
            subscriber_gauges,
            exports,
            imports,
            compat_exports,
            compat_imports,
            endpoint,
            failed: None,
            failure_reported: false,
            max_datagram,
            recv_max,
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

    /// Reports each socket that failed for good, once: through the bus (`Context::fail`: the
    /// bus stops and `join` returns `BusError::ActorFailed` naming the bridge and the socket),
    /// the status, the log and the `socket_failed` metric.
    fn report_failures(&mut self, ctx: &Context<'_>) {
        let name = &self.name;
        let report = |what: &str, addr: SocketAddr, e: &std::io::Error| {
            let error = format!(
                "bridge '{name}': its {what} socket {addr} failed ({e}); it is no longer used"
            );
            self.status.report(error.clone());
            self.metrics.socket_failed.set(1);
            ctx.fail(error);
        };
        if let (Some(e), false) = (&self.failed, self.failure_reported) {
            report("native", self.endpoint.local_addr(), e);
            self.failure_reported = true;
        }
        for slot in &mut self.compat_exports {
            if let (Some(e), false) = (&slot.failed, slot.reported) {
                report("compat export", slot.port.endpoint().local_addr(), e);
                slot.reported = true;
            }
        }
        for slot in &mut self.compat_imports {
            if let (Some(e), false) = (&slot.failed, slot.reported) {
                report("compat import", slot.port.endpoint().local_addr(), e);
                slot.reported = true;
            }
        }
    }

    /// Sends `len` bytes of `control_buf` to `dest` (see [`send_one`]).
    fn send_control_buf(&mut self, len: usize, dest: SocketAddr, token: Option<u64>) {
        send_one(
            &mut self.endpoint,
            &mut self.send,
            self.mac.as_ref(),
            &mut self.seal_buf,
            self.control_buf.get(..len).unwrap_or_default(),
            dest,
            token,
            &self.metrics,
            &mut self.failed,
        );
    }

    /// The room for frames in a datagram: what the MAC trailer (with a key) or the
    /// subscription token (without) leaves.
    fn control_room(&self) -> usize {
        self.max_datagram - self.trailer_len()
    }

    /// The bytes after the last frame of a downstream datagram: the MAC trailer with a key,
    /// the subscription token without.
    fn trailer_len(&self) -> usize {
        if self.mac.is_some() {
            MAC_TAG_LEN
        } else {
            TOKEN_LEN
        }
    }

    /// The subscription token of `dest`'s subscription to `topic_id`, if it is subscribed.
    fn token_of(&self, topic_id: u64, dest: SocketAddr) -> Option<u64> {
        self.publisher
            .subscribers()
            .destinations(topic_id)
            .find(|&(addr, _)| addr == dest)
            .map(|(_, token)| token)
    }

    /// Sends one control frame to `dest` from the native socket.
    fn send_control(&mut self, control: &Control, dest: SocketAddr) {
        let room = self.control_room();
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(control).is_err() {
            return; // Cannot happen: `max_datagram` holds a control frame (checked at bind).
        }
        let len = enc.len();
        self.send_control_buf(len, dest, None);
    }

    /// Sends the answers to one datagram of `request_len` bytes, packed into as few datagrams
    /// as they fit in. Each answer is as long as the request frame it answers, so they never
    /// exceed the request; if they somehow would, they are not sent (and counted).
    fn send_replies(&mut self, request_len: usize) {
        let Some(dest) = self.replies.to() else {
            return;
        };
        if self.replies.is_empty() {
            return;
        }
        let room = self.recv_max - if self.mac.is_some() { MAC_TAG_LEN } else { 0 };
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
            let tag = if self.mac.is_some() { MAC_TAG_LEN } else { 0 };
            sent_bytes += len + tag;
            datagrams += 1;
            if sent_bytes > request_len || datagrams > 1 {
                // NB: unreachable by construction (answers are as long as their requests and
                // all of one datagram's fit in one); kept as the anti-amplification guard.
                debug_assert!(false, "answers larger than the request");
                self.metrics.drop(DropReason::TooLarge);
                return;
            }
            self.send_control_buf(len, dest, None);
        }
    }

    /// Receives and handles what waits on the native socket. Returns datagrams handled.
    fn receive(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        // Held outside `self` while its datagrams are handled, which needs `&mut self`.
        let Some(mut recv) = self.recv.take() else {
            return 0;
        };
        let n = self.receive_from(&mut recv, ctx);
        self.recv = Some(recv);
        n
    }

    fn receive_from(&mut self, recv: &mut RecvBatch, ctx: &mut Context<'_>) -> usize {
        let n = receive_counted(&mut self.endpoint, recv, &self.metrics, &mut self.failed);
        let now_ns = self.now_ns(ctx.now());
        for (bytes, src) in recv.iter().take(n) {
            let src = canonical(src);
            if !is_answerable(src) {
                self.metrics.drop(DropReason::BadSource);
                continue;
            }
            let parsed = match &self.mac {
                Some(mac) => mac.open_once(bytes, self.recv_max, &mut self.replay),
                None => parse_datagram(bytes, self.recv_max),
            };
            let frames = match parsed {
                Ok(frames) => frames,
                Err(reason) => {
                    self.metrics.drop(reason);
                    continue;
                }
            };
            self.replies.clear(src);
            let token = frames.token();
            // A datagram is counted under one drop reason at most: its first.
            let mut dropped = None;
            for frame in frames {
                let result = match frame.header.kind {
                    Kind::Data | Kind::Fragment => self.on_data(&frame, src, token, now_ns, ctx),
                    Kind::Nak => self.on_nak(&frame, src, now_ns),
                    Kind::Unavailable => self.on_unavailable(&frame, src, token, now_ns, ctx),
                    _ => match Control::from_frame(&frame) {
                        Ok(control) => self.on_control(&control, src, token, now_ns),
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
            self.send_replies(bytes.len());
            self.send_joins(now_ns);
        }
        n
    }

    /// Sends each subscriber admitted by the last datagram the last messages of a late-join
    /// export (after its acknowledgement, so it follows the session already).
    fn send_joins(&mut self, now_ns: u64) {
        while let Some((topic_id, dest)) = self.joins.pop() {
            let Some(i) = self.exports.iter().position(|e| e.topic_id() == topic_id) else {
                continue;
            };
            if let Some(history) = self.exports.get_mut(i).and_then(|e| e.reliable_mut()) {
                let budgets = self.publisher.budgets_mut();
                history.on_join(dest, now_ns, budgets, &mut self.retransmit);
            }
            self.send_retransmit(i, dest);
        }
    }

    /// Sends what `self.retransmit` planned for export `i` to `dest`: the `Unavailable`, then
    /// the history frames packed into as few datagrams as they fit in, each protected like
    /// any downstream datagram (sealed, or followed by `dest`'s subscription token).
    fn send_retransmit(&mut self, i: usize, dest: SocketAddr) {
        let room = self.control_room();
        let token = self.mac.is_none().then_some(());
        let Some(history) = self.exports.get(i).and_then(|e| e.reliable()) else {
            return;
        };
        let token = match token {
            Some(()) => match self.token_of(history.topic_id(), dest) {
                Some(t) => Some(t),
                // No longer subscribed (unsubscribed by the datagram that asked): nothing.
                None => return,
            },
            None => None,
        };
        let (endpoint, batch, mac) = (&mut self.endpoint, &mut self.send, self.mac.as_ref());
        let (seal_buf, metrics, failed) = (&mut self.seal_buf, &self.metrics, &mut self.failed);
        let mut flush = |frames: &[u8]| {
            if !frames.is_empty() {
                send_one(
                    endpoint, batch, mac, seal_buf, frames, dest, token, metrics, failed,
                );
            }
        };
        let buf = &mut self.control_buf[..room];
        if let Some(u) = self.retransmit.unavailable() {
            let mut enc = BatchEncoder::new(&mut *buf).with_token(token.is_some());
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

    /// Hands a data frame to the import of its (source, topic). A frame of a topic this bridge
    /// imports from someone else, or exports, is `UnknownSender`; of another topic,
    /// `UnknownTopic`.
    #[inline]
    fn on_data(
        &mut self,
        frame: &crate::Frame<'_>,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
        ctx: &mut Context<'_>,
    ) -> Result<(), DropReason> {
        let topic_id = frame.header.topic_id;
        let found = self
            .imports
            .iter_mut()
            .find(|i| i.publisher == src && i.session.topic_id() == topic_id);
        let Some(import) = found else {
            let known = self
                .imports
                .iter()
                .any(|i| i.session.topic_id() == topic_id)
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
        let ImportSlot {
            port,
            session,
            reliable,
            reassembly,
            ..
        } = import;
        if let Some(receiver) = reliable.as_mut() {
            if session.follows_reliable(h.fingerprint, h.session, token, now_ns)? {
                let mut sink = PortSink::new(
                    &mut **port,
                    reassembly,
                    ctx,
                    &self.metrics,
                    h.session,
                    now_ns,
                );
                receiver.on_data(h.seq, h.kind, frame.payload, now_ns, &mut sink);
            }
            return Ok(());
        }
        if session.on_data(h, token, now_ns)?.is_deliver() {
            deliver_frame(
                &mut **port,
                reassembly,
                h.kind,
                h.session,
                h.seq,
                frame.payload,
                now_ns,
                ctx,
                &self.metrics,
            )?;
        }
        Ok(())
    }

    /// A NAK: answered only for a reliable export, from an admitted subscriber whose cookie
    /// proves its address ([`PublisherSession::admit_nak`]); the retransmissions (within the
    /// per-NAK cap and the subscriber's byte budget) and the `Unavailable` for what left
    /// history go to it alone.
    fn on_nak(
        &mut self,
        frame: &crate::Frame<'_>,
        src: SocketAddr,
        now_ns: u64,
    ) -> Result<(), DropReason> {
        let nak = Nak::from_frame(frame)?;
        let Some(i) = self
            .exports
            .iter()
            .position(|e| e.topic_id() == nak.topic_id && e.reliable().is_some())
        else {
            return Err(DropReason::UnknownTopic);
        };
        self.publisher.admit_nak(&nak, src, now_ns)?;
        let Some(history) = self.exports.get_mut(i).and_then(|e| e.reliable_mut()) else {
            return Err(DropReason::UnknownTopic);
        };
        let budgets = self.publisher.budgets_mut();
        history.on_nak(&nak, src, now_ns, budgets, &mut self.retransmit);
        self.send_retransmit(i, src);
        Ok(())
    }

    /// An `Unavailable` for a reliable import: the range left the publisher's history.
    fn on_unavailable(
        &mut self,
        frame: &crate::Frame<'_>,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
        ctx: &mut Context<'_>,
    ) -> Result<(), DropReason> {
        let u = Unavailable::from_frame(frame)?;
        let Some(import) = self
            .imports
            .iter_mut()
            .find(|i| i.publisher == src && i.session.topic_id() == u.topic_id)
        else {
            return Err(DropReason::UnknownSender);
        };
        let ImportSlot {
            port,
            session,
            reliable,
            reassembly,
            ..
        } = import;
        let Some(receiver) = reliable.as_mut() else {
            return Err(DropReason::BadControl);
        };
        if !session.follows_reliable(u.fingerprint, u.session, token, now_ns)? {
            return Err(DropReason::UnknownSender);
        }
        let mut sink = PortSink::new(
            &mut **port,
            reassembly,
            ctx,
            &self.metrics,
            u.session,
            now_ns,
        );
        receiver.on_unavailable(&u, now_ns, &mut sink)
    }

    /// The reliable imports' timers: gaps past their deadline are given up, due NAKs sent.
    fn poll_reliable(&mut self, now_ns: u64, ctx: &mut Context<'_>) {
        let room = self.control_room();
        for i in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(i) else {
                continue;
            };
            // Fragmented messages that have waited too long are given up (counted).
            import.reassembly.poll(now_ns);
            let ImportSlot {
                port,
                session,
                reliable,
                reassembly,
                nonce,
                publisher,
                ..
            } = import;
            let Some(receiver) = reliable.as_mut() else {
                continue;
            };
            let cookie = session.cookie();
            let (topic_id, dest) = (session.topic_id(), *publisher);
            let publisher_session = match session.state() {
                ImportState::Established { session, .. } => session,
                _ => 0,
            };
            let fingerprint = port.fingerprint();
            let own_session = self.session;
            let mut sink = PortSink::new(
                &mut **port,
                reassembly,
                ctx,
                &self.metrics,
                publisher_session,
                now_ns,
            );
            let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
            receiver.poll(
                now_ns,
                &mut sink,
                || next_nonce(nonce),
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
                self.send_control_buf(len, dest, None);
            }
        }
    }

    fn on_control(
        &mut self,
        control: &Control,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
    ) -> Result<(), DropReason> {
        match control {
            Control::Subscribe { .. } | Control::Unsubscribe { .. } => {
                let (exports, directs) = (&self.exports, &self.directs);
                let last_seq = |topic_id: u64| ack_seq_of(exports, directs, topic_id);
                let queued = self.replies.frames().len();
                let event =
                    self.publisher
                        .on_control(control, src, now_ns, last_seq, &mut self.replies);
                if let Some(Control::Refuse(_)) = self.replies.frames().get(queued) {
                    self.metrics.refused.add(1);
                }
                if let Ok(PublisherEvent::SubscribersChanged(topic_id)) = event {
                    self.refresh_direct(topic_id);
                    let late_join = self.exports.iter().any(|e| {
                        e.topic_id() == topic_id && e.reliable().is_some_and(|r| r.late_join() > 0)
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
            | Control::Refuse(crate::Refusal { topic_id, .. }) => {
                let topic_id = *topic_id;
                let Some(i) = self
                    .imports
                    .iter()
                    .position(|im| im.publisher == src && im.session.topic_id() == topic_id)
                else {
                    // Only publishers we subscribe to may answer us.
                    return Err(DropReason::UnknownSender);
                };
                let event = self.imports[i].session.on_control(
                    control,
                    token,
                    now_ns,
                    &mut self.replies,
                )?;
                if let Some(im) = self.imports.get_mut(i) {
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
                }
                self.on_import_event(i, event);
                Ok(())
            }
        }
    }

    fn on_import_event(&mut self, i: usize, event: SubscriberEvent) {
        let Some(import) = self.imports.get(i) else {
            return;
        };
        let topic = import.port.topic();
        let publisher = import.publisher;
        match event {
            SubscriberEvent::None => {}
            SubscriberEvent::Established { session, changed } => {
                if let Some(im) = self.imports.get_mut(i) {
                    im.warned = false;
                }
                log::info!(
                    "import of topic '{topic}' from {publisher}: following publisher session \
                     {session:#018x}{}",
                    if changed {
                        " (the publisher restarted)"
                    } else {
                        ""
                    }
                );
            }
            SubscriberEvent::Refused(refusal) => {
                self.metrics.refused.add(1);
                self.status.report(format!(
                    "import of topic '{topic}' from {publisher} refused: {refusal}"
                ));
            }
            SubscriberEvent::Retrying(refusal) => {
                self.metrics.refused.add(1);
                // Once per episode (until the import is established again).
                if !self.imports.get(i).is_some_and(|im| im.warned) {
                    self.status.warn(format!(
                        "import of topic '{topic}' from {publisher} refused for now: {refusal}; \
                         retrying with backoff"
                    ));
                }
                if let Some(im) = self.imports.get_mut(i) {
                    im.warned = true;
                }
            }
        }
    }

    /// Hands the direct sender of `topic_id`, if any, its new list of subscribers. Allocates
    /// one list: subscriptions change seldom, never per message.
    fn refresh_direct(&mut self, topic_id: u64) {
        if let Some(d) = self.directs.iter_mut().find(|d| d.topic_id == topic_id) {
            let list: super::direct::Destinations = self
                .publisher
                .subscribers()
                .destinations(topic_id)
                .collect();
            d.subscribers.write(list);
        }
        self.refresh_gauges();
    }

    /// Sets the subscribers-per-topic gauges (at once when the table changes, so that a test
    /// or an operator waiting for a subscription sees it without waiting for the next second).
    fn refresh_gauges(&self) {
        let topics = self.exports.iter().map(|e| e.topic_id());
        let topics = topics.chain(self.directs.iter().map(|d| d.topic_id));
        let table = self.publisher.subscribers();
        for (topic_id, gauge) in topics.zip(&self.subscriber_gauges) {
            gauge.set(table.subscribers(topic_id).count() as u64);
        }
    }

    /// Pumps every export. Returns messages taken.
    fn pump(&mut self) -> usize {
        let mut work = 0;
        let room = self.buf.len() - self.trailer_len();
        let mut side = SendSide {
            endpoint: &mut self.endpoint,
            batch: &mut self.send,
            buf: &mut self.buf[..room],
            subscribers: self.publisher.subscribers(),
            session: self.session,
            metrics: &self.metrics,
            mac: self.mac.as_ref(),
            scratch: &mut self.seal_buf,
            failed: &mut self.failed,
            max_message: self.config.reassembly.max_message,
        };
        for export in &mut self.exports {
            work += export.pump(&mut side, BUDGET);
        }
        for slot in &mut self.compat_exports {
            work += slot.port.pump(
                &mut self.send,
                &mut self.buf,
                &slot.table,
                &self.metrics,
                BUDGET,
                &mut slot.failed,
            );
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
        for slot in &mut self.compat_exports {
            let n = receive_counted(slot.port.endpoint(), recv, &self.metrics, &mut slot.failed);
            for (bytes, src) in recv.iter().take(n) {
                let src = canonical(src);
                if !is_answerable(src) {
                    self.metrics.drop(DropReason::BadSource);
                    continue;
                }
                if !self.config.allow.contains(src.ip()) {
                    self.metrics.drop(DropReason::NotAllowed);
                    continue;
                }
                if !self.publisher.rate_ok(src, now_ns) {
                    self.metrics.drop(DropReason::RateLimited);
                    continue;
                }
                match CompatControl::decode(bytes) {
                    Ok(CompatControl::Subscribe) => {
                        if slot.table.renew(src, 0, 0, 0, now_ns).is_err() {
                            self.metrics.drop(DropReason::TableFull);
                        }
                    }
                    Ok(CompatControl::Unsubscribe) => {
                        slot.table.remove(src, 0);
                    }
                    Err(reason) => self.metrics.drop(reason),
                }
            }
            work += n;
        }
        for slot in &mut self.compat_imports {
            let n = receive_counted(slot.port.endpoint(), recv, &self.metrics, &mut slot.failed);
            let port = &mut slot.port;
            for (bytes, src) in recv.iter().take(n) {
                if canonical(src) != port.publisher() {
                    self.metrics.drop(DropReason::UnknownSender);
                    continue;
                }
                if let Err(reason) = port.deliver(bytes, self.recv_max, ctx, &self.metrics) {
                    self.metrics.drop(reason);
                }
            }
            work += n;
        }
        work
    }

    /// Sends what each import's machine has due (first subscribe, renewal, retry, resubscribe),
    /// and the compat imports' once-a-second `Subscribe`.
    fn renew(&mut self, now_ns: u64, compat_due: bool) {
        for i in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(i) else {
                continue;
            };
            let dest = import.publisher;
            if let Some(request) = import.session.poll(now_ns) {
                self.send_control(&request, dest);
            }
        }
        if compat_due {
            for slot in &mut self.compat_imports {
                if slot.failed.is_some() {
                    continue;
                }
                let dest = slot.port.publisher();
                if let Err(e) = slot
                    .port
                    .endpoint()
                    .send_to(&CompatControl::Subscribe.encode(), dest)
                {
                    slot.failed = Some(e);
                }
            }
        }
    }

    /// Sends each export's last sequence number to its subscribers.
    fn heartbeat(&mut self) {
        let timestamp_ns = crate::realtime_ns();
        for i in 0..self.exports.len() + self.directs.len() {
            let topic_id = match self.exports.get(i) {
                Some(e) => e.topic_id(),
                None => match self.directs.get(i - self.exports.len()) {
                    Some(d) => d.topic_id,
                    None => continue,
                },
            };
            self.heartbeat_topic(topic_id, timestamp_ns);
        }
    }

    fn heartbeat_topic(&mut self, topic_id: u64, timestamp_ns: i64) {
        let table = self.publisher.subscribers();
        if table.subscribers(topic_id).next().is_none() {
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
            last_seq: last_seq_of(&self.exports, &self.directs, topic_id),
            timestamp_ns,
        };
        let room = self.control_room();
        let mut enc =
            BatchEncoder::new(&mut self.control_buf[..room]).with_token(self.mac.is_none());
        if enc.push_control(&control).is_ok() {
            fan_out(
                enc.as_bytes(),
                self.publisher.subscribers().destinations(topic_id),
                &mut self.endpoint,
                &mut self.send,
                Protect::of(self.mac.as_ref(), &mut self.seal_buf, true),
                &self.metrics,
                &mut self.failed,
            );
        }
    }

    /// Refreshes the figures that are sums or gauges.
    fn refresh_metrics(&mut self, ctx: &Context<'_>) {
        let mut loss = LossCounts::default();
        // A reliable import's loss is what it could not recover (`unrecovered`); its loss
        // tracker sees heartbeats only.
        for import in self.imports.iter().filter(|i| i.reliable.is_none()) {
            add_loss(&mut loss, import.session.loss());
        }
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            loss.unconfirmed = loss.unconfirmed.saturating_add(r.counts().unconfirmed);
        }
        self.metrics.set_loss(&loss);
        let (mut nak_sent, mut unrecovered) = (0u64, 0u64);
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            nak_sent = nak_sent.saturating_add(r.counts().naks_sent);
            unrecovered = unrecovered.saturating_add(r.counts().unrecovered);
        }
        let (mut retransmitted, mut unavailable, mut missing) = (0u64, 0u64, 0u64);
        for e in &self.exports {
            let Some(r) = e.reliable() else {
                continue;
            };
            retransmitted = retransmitted.saturating_add(r.counts().retransmitted);
            unavailable = unavailable.saturating_add(r.counts().unavailable);
            // What each subscriber missed beyond history, for it alone.
            for (subscriber, missed) in r.missed() {
                missing += 1;
                if self.status.set_missed(e.topic(), subscriber, missed) {
                    log::warn!(
                        "bridge '{}': subscriber {subscriber} of reliable topic '{}' has missed \
                         {missed} messages beyond history in all (it is slower or lossier than \
                         history covers; the other subscribers are not affected): raise \
                         `reliable.history` to cover it",
                        self.name,
                        e.topic()
                    );
                }
            }
        }
        self.metrics.missed_subscribers.set(missing);
        let incomplete = self.imports.iter().fold(0u64, |a, i| {
            a.saturating_add(i.reassembly.counts().incomplete)
        });
        self.metrics.set_drop(DropReason::Incomplete, incomplete);
        self.metrics.nak_sent.set(nak_sent);
        self.metrics.unrecovered.set(unrecovered);
        self.metrics.retransmitted.set(retransmitted);
        self.metrics.unavailable.set(unavailable);
        self.metrics.set_sessions(
            self.publisher.counts(),
            self.imports.iter().map(|i| i.session.counts()),
        );
        self.metrics.set_io(
            std::iter::once(self.endpoint.stats())
                .chain(self.compat_exports.iter().map(|s| s.port.stats()))
                .chain(self.compat_imports.iter().map(|s| s.port.stats())),
        );
        self.refresh_gauges();
        self.report_failures(ctx);
    }
}

/// Receives a batch on `endpoint` (unless it failed before) and counts it: datagrams and bytes
/// in, and what the socket dropped. A socket that fails for good is recorded in `failed`.
/// Returns the datagrams received.
fn receive_counted(
    endpoint: &mut UdpEndpoint,
    recv: &mut RecvBatch,
    metrics: &NetMetrics,
    failed: &mut Option<std::io::Error>,
) -> usize {
    if failed.is_some() {
        return 0;
    }
    let before = *endpoint.stats();
    let n = match endpoint.recv_batch(recv) {
        Ok(n) => n,
        Err(e) => {
            *failed = Some(e);
            return 0;
        }
    };
    metrics.count_io_drops(&before, endpoint.stats());
    for (bytes, _) in recv.iter().take(n) {
        metrics.datagrams_in.add(1);
        metrics.bytes_in.add(bytes.len() as u64);
    }
    n
}

/// The `last_seq` a subscription to `topic_id` is acknowledged with: the last sequence number
/// sent, less the messages a late-join export sends a new subscriber.
fn ack_seq_of(exports: &[Box<dyn ExportPort>], directs: &[DirectPort], topic_id: u64) -> u64 {
    let last = last_seq_of(exports, directs, topic_id);
    match exports
        .iter()
        .find(|e| e.topic_id() == topic_id)
        .and_then(|e| e.reliable())
    {
        Some(r) => last.saturating_sub(r.history().newest().saturating_sub(r.ack_seq())),
        None => last,
    }
}

/// The last sequence number sent on an exported topic (ring-fed or direct); 0 if none.
fn last_seq_of(exports: &[Box<dyn ExportPort>], directs: &[DirectPort], topic_id: u64) -> u64 {
    if let Some(e) = exports.iter().find(|e| e.topic_id() == topic_id) {
        return e.last_seq();
    }
    directs
        .iter()
        .find(|d| d.topic_id == topic_id)
        .map_or(0, |d| {
            d.shared.last_seq.load(std::sync::atomic::Ordering::Acquire)
        })
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
            watch(&self.endpoint);
            for slot in &mut self.compat_exports {
                watch(slot.port.endpoint());
            }
            for slot in &mut self.compat_imports {
                watch(slot.port.endpoint());
            }
        }
        #[cfg(not(unix))]
        let _ = ctx;
    }

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
        let now_ns = self.now_ns(now);
        let compat_due = now >= self.next_renew;
        if compat_due {
            self.next_renew = now + self.config.renew_every;
        }
        // The machines know when their requests are due (renewals, retries, resubscribes).
        self.renew(now_ns, compat_due);
        self.poll_reliable(now_ns, ctx);
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.config.heartbeat_every;
            self.heartbeat();
        }
        if now >= self.next_expire {
            self.next_expire = now + Duration::from_secs(1);
            let expired = self.publisher.expire(now_ns, |s| {
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
                    Ok(entropy) => self.publisher.reseed(entropy),
                    Err(e) => log::warn!("no OS randomness to reseed the cookie secret: {e}"),
                }
            }
            for slot in &mut self.compat_exports {
                slot.table.expire(now_ns, |s| {
                    log::info!("compat subscriber {} expired", s.addr)
                });
            }
            self.refresh_metrics(ctx);
        }
    }

    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        for i in 0..self.imports.len() {
            let Some(import) = self.imports.get_mut(i) else {
                continue;
            };
            let dest = import.publisher;
            if let Some(unsubscribe) = import.session.unsubscribe() {
                self.send_control(&unsubscribe, dest);
            }
        }
        for slot in &mut self.compat_imports {
            if slot.failed.is_some() {
                continue;
            }
            let dest = slot.port.publisher();
            let _ = slot
                .port
                .endpoint()
                .send_to(&CompatControl::Unsubscribe.encode(), dest);
        }
        self.refresh_metrics(ctx);
    }
}
