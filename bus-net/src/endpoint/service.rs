//! Services across hosts: the server's side (calls of the services this bridge serves, from
//! remote callers) and the caller's side (calls of the services it imports, to their servers).
//!
//! Inputs: `Request` and `Reply` frames with their datagram's facts ([`Incoming`]); the local
//! calls of imported services ([`Services::call`]) and the local answers of served ones
//! ([`Services::answer`]); the timer. Outputs: requests, replies and resends through the
//! egress (each one datagram, sealed with the key or followed by the caller's token);
//! requests and call ends through the [`Sink`]; the `service.*` figures.
//!
//! Algorithm (`docs/PROTOCOL.md`, "Services"):
//! - **Admission rides on the handshake.** A served service is an exported topic of the
//!   publisher machine (its name's id, `Request<Req>`'s fingerprint), so a caller subscribes to
//!   it by the ordinary handshake (allowlist, rate limit, cookie, nonce, caps) and gets a
//!   subscription token. A request counts only from a source in the subscriber table under the
//!   request's session, ending with that entry's token (without a key); it is also charged to
//!   the source's request rate limit and the service's allowlist. Anything else is dropped and
//!   counted (`service.refused`): nothing is ever sent to an unproven source.
//! - **Each call runs once.** A served call is kept by (source, session, call id) from its
//!   first request until the caller's deadline (the request's budget) has passed: a duplicate
//!   of a call in progress is ignored, of an answered one is answered with the cached reply
//!   frame (`service.duplicates`). Answered calls are kept at most `cached_per_source` per
//!   source: the oldest is forgotten first (`service.evicted`). The ids each caller session
//!   had run are remembered apart, in a sliding window of [`SEEN_WINDOW`] ids below its
//!   highest (as IPsec's anti-replay window), so a resend of a forgotten call is dropped,
//!   never run again; so is a call that many calls older than its caller's newest.
//! - **Replies come out of the caller host's byte budget** (a token bucket per host, resends
//!   included). A reply over it is not sent: the call ends with an `OverBudget` error frame if
//!   that fits (it replaces the cached reply), else the caller times out
//!   (`service.over_budget`).
//! - **The caller resends until its deadline.** A call's request frame is kept in its slot and
//!   sent once the import is established, then again (same call id, the budget left rewritten)
//!   after 10 ms, doubling to at most 200 ms, until its reply or its deadline. A reply counts
//!   only from the server's address, under the session the import follows, with the import's
//!   token, for a call in flight: it ends the call and frees its slot; any other is dropped
//!   (`service.late` for a call not in flight). So a call ends exactly once.
//!
//! Memory: one datagram per served slot and per call slot, allocated when the services are
//! given; a call, a request, a reply and a resend allocate nothing.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use serde::Serialize;

use super::common::Common;
use super::subscriber::SubscriberSide;
use super::{Incoming, Sink, Wire};
use crate::protocol::service::set_budget;
use crate::{
    encode_reply, encode_request, Allowlist, CallMeta, CallStatus, DropReason, EncodeError,
    ExportedTopic, Frame, HostBudgets, ImportSpec, ImportState, PublisherSession, RateLimiter,
    ReplyFrame, RequestFrame, HEADER_LEN, REPLY_FIXED,
};

/// The first wait before a request is sent again.
pub const RESEND_FIRST_NS: u64 = 10_000_000;
/// The longest wait between two sends of a request.
pub const RESEND_MAX_NS: u64 = 200_000_000;
/// How long a served call in progress outlives its caller's deadline before its slot is
/// taken back (its local answer never came).
const IN_PROGRESS_GRACE_NS: u64 = 1_000_000_000;

/// A service this bridge serves to remote callers.
#[derive(Clone, Debug)]
pub struct ServiceSpec {
    /// Its name.
    pub service: Arc<str>,
    /// Its name's topic id: what callers subscribe to and requests carry.
    pub topic_id: u64,
    /// `Request<Req>`'s fingerprint.
    pub request_fingerprint: u64,
    /// `Reply<Rep>`'s fingerprint.
    pub reply_fingerprint: u64,
    /// The shape served for its topic id: `Shape::service(Req's shape, Rep's shape)`, from
    /// which a tool without the types calls it (`llbus call`); `None`: none served.
    pub shape: Option<super::EncodedShape>,
    /// Who may call it; `None`: the bridge's allowlist.
    pub allow: Option<Allowlist>,
}

/// A service of a remote bridge this bridge calls.
#[derive(Clone, Debug)]
pub struct ServiceImportSpec {
    /// Its name.
    pub service: Arc<str>,
    /// Its name's topic id.
    pub topic_id: u64,
    /// `Request<Req>`'s fingerprint.
    pub request_fingerprint: u64,
    /// `Reply<Rep>`'s fingerprint.
    pub reply_fingerprint: u64,
    /// The server's bridge.
    pub server: SocketAddr,
}

/// Where a served call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Free,
    /// Handed to the sink; its answer has not come.
    InProgress,
    /// Answered; the reply frame is kept for resends.
    Answered,
}

/// One served call. Its key (what the sink is given) is `generation << 32 | index`.
struct Served {
    stage: Stage,
    generation: u32,
    service: usize,
    src: SocketAddr,
    session: u64,
    call: u64,
    token: u64,
    /// When the caller's deadline has passed (no resend comes after it): the slot frees.
    expires_ns: u64,
    /// The reply frame, kept for resends: `buf[..len]`.
    len: usize,
    buf: Box<[u8]>,
}

/// One call of an imported service in flight.
struct Calling {
    live: bool,
    service: usize,
    call: u64,
    key: u64,
    deadline_ns: u64,
    next_send_ns: u64,
    backoff_ns: u64,
    /// Times its request went out.
    sent: u32,
    /// The request frame: `buf[..len]`.
    len: usize,
    buf: Box<[u8]>,
}

/// An imported service: its spec and the import whose handshake proves this bridge to the
/// server.
struct Imported {
    spec: ServiceImportSpec,
    import: usize,
}

/// The services of one endpoint (see the module docs).
pub(crate) struct Services {
    served: Vec<ServiceSpec>,
    slots: Vec<Served>,
    /// The calls kept (in progress, or answered) by (source, session, call id): their slot.
    kept: HashMap<(SocketAddr, u64, u64), usize>,
    /// The free slots.
    free: Vec<usize>,
    /// The answered slots in the order answered, each with its generation then (an entry
    /// whose slot has moved on since is skipped): the oldest answered goes first when a slot
    /// is needed. Compacted when full, so it never grows past its capacity (twice the slots).
    answered: VecDeque<(usize, u32)>,
    /// `seen`'s entries by (source, session).
    seen_at: HashMap<(SocketAddr, u64), usize>,
    /// Per caller (address, session): the call ids seen, so that a resend of a call no
    /// longer kept is never run again. Bounded, and an entry goes only once the deadline of
    /// every call it saw has passed (no resend of them can come any more).
    seen: Vec<Seen>,
    /// Live entries of `seen` one caller host (IP address) may hold.
    seen_per_host: usize,
    limiter: RateLimiter,
    budgets: HostBudgets,
    cached_per_source: usize,
    imported: Vec<Imported>,
    calls: Vec<Calling>,
    live_calls: usize,
    /// The last call id given (ids are unique per session of this endpoint).
    last_call: u64,
}

impl Services {
    /// No services.
    pub(crate) fn none() -> Self {
        Services {
            served: Vec::new(),
            slots: Vec::new(),
            kept: HashMap::new(),
            free: Vec::new(),
            answered: VecDeque::new(),
            seen_at: HashMap::new(),
            seen: Vec::new(),
            seen_per_host: 0,
            limiter: RateLimiter::new(crate::DEFAULT_REQUEST_LIMIT, 1),
            budgets: HostBudgets::new(1, (0, 0)),
            cached_per_source: 0,
            imported: Vec::new(),
            calls: Vec::new(),
            live_calls: 0,
            last_call: 0,
        }
    }

    /// Serves `served` (each an exported topic of `machine`) and imports `imported` (each an
    /// import of `subscriber`, never delivering data). Allocates every table now.
    pub(crate) fn new(
        served: Vec<ServiceSpec>,
        imported: Vec<ServiceImportSpec>,
        machine: &mut PublisherSession,
        subscriber: &mut SubscriberSide,
        common: &mut Common,
    ) -> Self {
        let config = common.config.services;
        let datagram = common.max_datagram;
        for s in &served {
            machine.add_topic(ExportedTopic {
                topic_id: s.topic_id,
                fingerprint: s.request_fingerprint,
                allow: s.allow.clone(),
            });
        }
        let imported = imported
            .into_iter()
            .map(|spec| {
                let import = subscriber.add_import(
                    ImportSpec {
                        topic: spec.service.clone(),
                        topic_id: spec.topic_id,
                        fingerprint: spec.request_fingerprint,
                        publisher: spec.server,
                        reliable: false,
                    },
                    usize::MAX,
                    common,
                );
                Imported { spec, import }
            })
            .collect::<Vec<_>>();
        let served_slots = if served.is_empty() {
            0
        } else {
            config.served_calls
        };
        let call_slots = if imported.is_empty() {
            0
        } else {
            config.calls_in_flight
        };
        let any = SocketAddr::from(([0, 0, 0, 0], 0));
        let sessions = if served_slots == 0 {
            0
        } else {
            common.config.subscriber_capacity
        };
        // The maps hold at most half their capacity, so their deletions are rehashed in
        // place: nothing allocates after this.
        Services {
            kept: HashMap::with_capacity(2 * served_slots),
            free: (0..served_slots).rev().collect(),
            answered: VecDeque::with_capacity(2 * served_slots),
            seen_at: HashMap::with_capacity(2 * sessions),
            slots: (0..served_slots)
                .map(|_| Served {
                    stage: Stage::Free,
                    generation: 0,
                    service: 0,
                    src: any,
                    session: 0,
                    call: 0,
                    token: 0,
                    expires_ns: 0,
                    len: 0,
                    buf: vec![0; datagram].into_boxed_slice(),
                })
                .collect(),
            seen: Vec::with_capacity(sessions),
            seen_per_host: common.config.subscribers_per_host.saturating_mul(2).max(1),
            served,
            limiter: RateLimiter::new(config.request_limit, common.config.rate_limit_sources),
            budgets: HostBudgets::new(common.config.subscriber_capacity, config.reply_rate),
            cached_per_source: config.cached_per_source.max(1),
            imported,
            calls: (0..call_slots)
                .map(|_| Calling {
                    live: false,
                    service: 0,
                    call: 0,
                    key: 0,
                    deadline_ns: 0,
                    next_send_ns: 0,
                    backoff_ns: 0,
                    sent: 0,
                    len: 0,
                    buf: vec![0; datagram].into_boxed_slice(),
                })
                .collect(),
            live_calls: 0,
            last_call: 0,
        }
    }

    /// The served services, in the order given.
    pub(crate) fn served(&self) -> &[ServiceSpec] {
        &self.served
    }

    /// The imported services with their imports, in the order given.
    pub(crate) fn imported(&self) -> impl Iterator<Item = (&ServiceImportSpec, usize)> + '_ {
        self.imported.iter().map(|i| (&i.spec, i.import))
    }

    /// Whether `topic_id` is a served or imported service.
    pub(crate) fn has_topic(&self, topic_id: u64) -> bool {
        self.served.iter().any(|s| s.topic_id == topic_id)
            || self.imported.iter().any(|i| i.spec.topic_id == topic_id)
    }

    // ---- The server's side ----

    /// A `Request` frame: admitted, run once (through `sink`), or answered from the cache.
    pub(crate) fn on_request(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        machine: &PublisherSession,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (h, src, now_ns) = (frame.header, incoming.src, incoming.now_ns);
        let Some(service) = self.served.iter().position(|s| s.topic_id == h.topic_id) else {
            return Err(DropReason::UnknownTopic);
        };
        let refused = |reason| {
            common.metrics.service.refused.add(1);
            Err(reason)
        };
        if !machine.allowed(h.topic_id, src) {
            return refused(DropReason::NotAllowed);
        }
        if !self.limiter.allow(src.ip(), now_ns) {
            return refused(DropReason::RateLimited);
        }
        // Proven: subscribed to the service under this session, and (without a key) the
        // datagram ends with that subscription's token.
        let Some(token) = (machine.subscribers().iter())
            .find(|s| s.addr == src && s.topic_id == h.topic_id && s.session == h.session)
            .map(|s| s.token)
        else {
            return refused(DropReason::UnknownSender);
        };
        if common.egress.mac.is_none() && incoming.token != Some(token) {
            return refused(DropReason::BadToken);
        }
        if self.served.get(service).map(|s| s.request_fingerprint) != Some(h.fingerprint) {
            return Err(DropReason::FingerprintMismatch);
        }
        let request = RequestFrame::from_frame(frame)?;
        if let Some(&i) = self.kept.get(&(src, h.session, request.call)) {
            common.metrics.service.duplicates.add(1);
            if self
                .slots
                .get(i)
                .is_some_and(|s| s.stage == Stage::Answered)
            {
                self.send_kept(i, now_ns, wire, common);
            }
            return Ok(());
        }
        let budget_ns = u64::from(request.budget_ms).saturating_mul(1_000_000);
        let until_ns = now_ns.saturating_add(budget_ns);
        match self.first_time(src, h.session, request.call, now_ns, until_ns) {
            Novelty::New => {}
            Novelty::Seen => {
                // A resend of a call answered and no longer kept, or too old to tell: never
                // run twice.
                common.metrics.service.duplicates.add(1);
                return Ok(());
            }
            Novelty::Full => {
                // No room to remember this caller's calls without forgetting another's that
                // may still be resent: not run, and the caller hears so at once.
                common.metrics.service.refused.add(1);
                let meta = self.reply_meta(service, common);
                self.refuse_busy(meta, src, token, request.call, now_ns, wire, common);
                return Ok(());
            }
        }
        common.metrics.service.requests.add(1);
        let Some(i) = self.free_slot(now_ns, &common.metrics) else {
            // Every slot holds a call still in progress: the caller hears so at once.
            common.metrics.service.refused.add(1);
            let meta = self.reply_meta(service, common);
            self.refuse_busy(meta, src, token, request.call, now_ns, wire, common);
            return Ok(());
        };
        let Some(slot) = self.slots.get_mut(i) else {
            return Ok(());
        };
        slot.stage = Stage::InProgress;
        slot.generation = slot.generation.wrapping_add(1);
        slot.service = service;
        slot.src = src;
        slot.session = h.session;
        slot.call = request.call;
        slot.token = token;
        slot.expires_ns = now_ns.saturating_add(budget_ns);
        slot.len = 0;
        let key = (u64::from(slot.generation) << 32) | i as u64;
        self.kept.insert((src, h.session, request.call), i);
        if let Err(status) = sink.request(service, key, request.budget_ms, request.body) {
            self.answer::<()>(key, Err(status), now_ns, wire, common);
        }
        Ok(())
    }

    /// Answers call `call` of `src` with `QueueFull` at once (out of its host's budget).
    #[allow(clippy::too_many_arguments)]
    fn refuse_busy(
        &mut self,
        meta: CallMeta,
        src: SocketAddr,
        token: u64,
        call: u64,
        now_ns: u64,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) {
        let frame = &mut common.control_buf[..];
        let room = common
            .max_datagram
            .saturating_sub(common.egress.trailer_len());
        if let Ok(len) = encode_reply::<()>(
            frame.get_mut(..room).unwrap_or_default(),
            meta,
            common.egress.mac.is_none(),
            call,
            Err(CallStatus::QueueFull),
        ) {
            self.send_budgeted(src, token, len, now_ns, wire, common);
        }
    }

    /// The header of `service`'s replies.
    fn reply_meta(&self, service: usize, common: &Common) -> CallMeta {
        let s = self.served.get(service);
        CallMeta {
            topic_id: s.map_or(0, |s| s.topic_id),
            fingerprint: s.map_or(0, |s| s.reply_fingerprint),
            session: common.session,
        }
    }

    /// A free slot: a free one, else the one answered longest ago (counted `evicted` if its
    /// caller's deadline has not passed), else none (every slot is in progress). Slots whose
    /// deadline passed are freed by `poll`.
    fn free_slot(&mut self, now_ns: u64, metrics: &super::metrics::NetMetrics) -> Option<usize> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        while let Some((i, generation)) = self.answered.pop_front() {
            let Some(slot) = self.slots.get(i) else {
                continue;
            };
            if slot.stage != Stage::Answered || slot.generation != generation {
                continue; // Freed, or answered again since: its newer entry is further on.
            }
            if slot.expires_ns > now_ns {
                metrics.service.evicted.add(1);
            }
            self.release(i);
            return self.free.pop();
        }
        None
    }

    /// Frees slot `i`: its call is forgotten (its id stays seen).
    fn release(&mut self, i: usize) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.stage == Stage::Free {
            return;
        }
        if slot.stage == Stage::Answered {
            let seen =
                (self.seen_at.get(&(slot.src, slot.session))).and_then(|&k| self.seen.get_mut(k));
            if let Some(seen) = seen {
                seen.answered = seen.answered.saturating_sub(1);
            }
        }
        slot.stage = Stage::Free;
        self.kept.remove(&(slot.src, slot.session, slot.call));
        self.free.push(i);
    }

    /// Notes slot `i` answered (at `generation`), last in the order answered.
    fn push_answered(&mut self, i: usize, generation: u32) {
        if self.answered.len() == self.answered.capacity() {
            let slots = &self.slots;
            self.answered.retain(|&(j, g)| {
                slots
                    .get(j)
                    .is_some_and(|s| s.stage == Stage::Answered && s.generation == g)
            });
        }
        self.answered.push_back((i, generation));
    }

    /// Whether call `call` of caller (`src`, `session`), whose deadline is `until_ns`, is
    /// new (then it is marked seen). `Full` when it is of a new caller session and every
    /// entry of the table, or as many as its host may hold, is of a session whose calls may
    /// still be resent.
    fn first_time(
        &mut self,
        src: SocketAddr,
        session: u64,
        call: u64,
        now_ns: u64,
        until_ns: u64,
    ) -> Novelty {
        let i = match self.seen_at.get(&(src, session)) {
            Some(&i) => i,
            None => {
                let host_live = (self.seen.iter())
                    .filter(|s| s.src.ip() == src.ip() && s.until_ns > now_ns)
                    .count();
                if host_live >= self.seen_per_host {
                    return Novelty::Full;
                }
                let fresh = Seen {
                    src,
                    session,
                    highest: 0,
                    bits: [0; SEEN_WORDS],
                    until_ns,
                    answered: 0,
                };
                let i = if self.seen.len() < self.seen.capacity() {
                    self.seen.push(fresh);
                    self.seen.len() - 1
                } else {
                    // Only an entry whose every call is past its deadline may go.
                    let Some(done) = (self.seen.iter()).position(|s| s.until_ns <= now_ns) else {
                        return Novelty::Full;
                    };
                    if let Some(old) = self.seen.get_mut(done) {
                        self.seen_at.remove(&(old.src, old.session));
                        *old = fresh;
                    }
                    done
                };
                self.seen_at.insert((src, session), i);
                i
            }
        };
        match self.seen.get_mut(i) {
            Some(s) => {
                s.until_ns = s.until_ns.max(until_ns);
                if s.mark(call) {
                    Novelty::New
                } else {
                    Novelty::Seen
                }
            }
            None => Novelty::Full,
        }
    }

    /// The local answer to served call `key`: encoded once, kept for resends, and sent out of
    /// the caller host's budget. An answer for a call no longer in progress is ignored.
    pub(crate) fn answer<T: Serialize + ?Sized>(
        &mut self,
        key: u64,
        result: Result<&T, CallStatus>,
        now_ns: u64,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) {
        let i = (key & u64::from(u32::MAX)) as usize;
        let meta = match self.slots.get(i) {
            Some(s) if s.stage == Stage::InProgress && u64::from(s.generation) == key >> 32 => {
                self.reply_meta(s.service, common)
            }
            _ => return,
        };
        let token = common.egress.mac.is_none();
        let room = common
            .max_datagram
            .saturating_sub(common.egress.trailer_len());
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let buf = slot.buf.get_mut(..room).unwrap_or_default();
        slot.len = match encode_reply(buf, meta, token, slot.call, result) {
            Ok(len) => len,
            Err(EncodeError::TooLarge { .. }) => {
                common.metrics.too_large.add(1);
                encode_reply::<()>(buf, meta, token, slot.call, Err(CallStatus::TooLarge))
                    .unwrap_or(0)
            }
            Err(_) => encode_reply::<()>(buf, meta, token, slot.call, Err(CallStatus::Dropped))
                .unwrap_or(0),
        };
        slot.stage = Stage::Answered;
        let (src, session, generation) = (slot.src, slot.session, slot.generation);
        common.metrics.service.replies.add(1);
        self.send_kept(i, now_ns, wire, common);
        self.push_answered(i, generation);
        // At most `cached_per_source` answered calls of one caller session are kept: over
        // it, its oldest goes.
        let seen = (self.seen_at.get(&(src, session))).and_then(|&k| self.seen.get_mut(k));
        let over = seen.is_some_and(|seen| {
            seen.answered += 1;
            seen.answered > self.cached_per_source
        });
        if over {
            let slots = &self.slots;
            let oldest = (self.answered.iter()).find_map(|&(j, g)| {
                slots
                    .get(j)
                    .filter(|s| {
                        s.stage == Stage::Answered
                            && s.generation == g
                            && s.src == src
                            && s.session == session
                    })
                    .map(|_| j)
            });
            if let Some(oldest) = oldest {
                common.metrics.service.evicted.add(1);
                self.release(oldest);
            }
        }
    }

    /// Sends answered call `i`'s kept reply to its caller, out of its host's budget; over
    /// budget, its reply becomes an `OverBudget` error frame, sent if that fits the budget.
    fn send_kept(&mut self, i: usize, now_ns: u64, wire: &mut dyn Wire, common: &mut Common) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let (src, token, len) = (slot.src, slot.token, slot.len);
        let trailer = common.egress.trailer_len() as u64;
        if self.budgets.take(src.ip(), len as u64 + trailer, now_ns) {
            let frames = slot.buf.get(..len).unwrap_or_default();
            let (datagrams, bytes) =
                common
                    .egress
                    .send(wire, frames, true, std::iter::once((src, token)));
            common.metrics.sent(datagrams, bytes);
            return;
        }
        common.metrics.service.over_budget.add(1);
        if len == HEADER_LEN + REPLY_FIXED {
            return; // An error frame already, and over budget: the caller times out.
        }
        let error = HEADER_LEN + REPLY_FIXED;
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(slot.buf.get(..HEADER_LEN).unwrap_or(&[0; HEADER_LEN]));
        let meta = CallMeta {
            topic_id: u64::from_le_bytes(header_word(&header, 8)),
            fingerprint: u64::from_le_bytes(header_word(&header, 16)),
            session: common.session,
        };
        let buf = slot.buf.get_mut(..error).unwrap_or_default();
        if let Ok(n) = encode_reply::<()>(
            buf,
            meta,
            common.egress.mac.is_none(),
            slot.call,
            Err(CallStatus::OverBudget),
        ) {
            slot.len = n;
            if self.budgets.take(src.ip(), n as u64 + trailer, now_ns) {
                let frames = slot.buf.get(..n).unwrap_or_default();
                let (datagrams, bytes) =
                    common
                        .egress
                        .send(wire, frames, true, std::iter::once((src, token)));
                common.metrics.sent(datagrams, bytes);
            }
        }
    }

    /// Sends `common.control_buf[..len]` (an error reply not kept) to `src` with `token`, out
    /// of its host's budget.
    fn send_budgeted(
        &mut self,
        src: SocketAddr,
        token: u64,
        len: usize,
        now_ns: u64,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) {
        let trailer = common.egress.trailer_len() as u64;
        if self.budgets.take(src.ip(), len as u64 + trailer, now_ns) {
            common.send_control_buf(wire, len, src, Some(token));
        } else {
            common.metrics.service.over_budget.add(1);
        }
    }

    // ---- The caller's side ----

    /// Calls imported service `service` with `body` until `deadline_ns`: the call's end
    /// reaches `sink` once, as [`Sink::reply`] with `key`. Its request is sent now if the
    /// service's import is established, else once it is.
    ///
    /// # Errors
    /// `Refused` (no such service, or its server refused the subscription), `QueueFull`
    /// (every call slot in flight), `TooLarge` (the request does not fit in one datagram):
    /// the call was not made and nothing reaches the sink.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call<T: Serialize + ?Sized>(
        &mut self,
        service: usize,
        key: u64,
        body: &T,
        deadline_ns: u64,
        now_ns: u64,
        wire: &mut dyn Wire,
        subscriber: &SubscriberSide,
        common: &mut Common,
    ) -> Result<(), CallStatus> {
        let Some(imported) = self.imported.get(service) else {
            return Err(CallStatus::Refused);
        };
        if matches!(
            subscriber.import_state(imported.import),
            Some(ImportState::Refused(_)) | None
        ) {
            return Err(CallStatus::Refused);
        }
        let meta = CallMeta {
            topic_id: imported.spec.topic_id,
            fingerprint: imported.spec.request_fingerprint,
            session: common.session,
        };
        let Some(i) = self.calls.iter().position(|c| !c.live) else {
            return Err(CallStatus::QueueFull);
        };
        let call = self.last_call + 1;
        let room = common
            .max_datagram
            .saturating_sub(common.egress.trailer_len());
        let Some(slot) = self.calls.get_mut(i) else {
            return Err(CallStatus::QueueFull);
        };
        let buf = slot.buf.get_mut(..room).unwrap_or_default();
        let budget = budget_ms(deadline_ns, now_ns);
        slot.len = match encode_request(buf, meta, common.egress.mac.is_none(), call, budget, body)
        {
            Ok(len) => len,
            Err(EncodeError::TooLarge { .. }) => {
                common.metrics.too_large.add(1);
                return Err(CallStatus::TooLarge);
            }
            Err(_) => return Err(CallStatus::Dropped),
        };
        self.last_call = call;
        slot.live = true;
        slot.service = service;
        slot.call = call;
        slot.key = key;
        slot.deadline_ns = deadline_ns;
        slot.next_send_ns = now_ns;
        slot.backoff_ns = RESEND_FIRST_NS;
        slot.sent = 0;
        self.live_calls += 1;
        common.metrics.service.calls.add(1);
        self.send_call(i, now_ns, wire, subscriber, common);
        Ok(())
    }

    /// Sends call `i`'s request if its import is established (with its token, without a
    /// key), and schedules the next send.
    fn send_call(
        &mut self,
        i: usize,
        now_ns: u64,
        wire: &mut dyn Wire,
        subscriber: &SubscriberSide,
        common: &mut Common,
    ) {
        let Some(slot) = self.calls.get_mut(i) else {
            return;
        };
        let Some(imported) = self.imported.get(slot.service) else {
            return;
        };
        let Some(import) = subscriber.imports.get(imported.import) else {
            return;
        };
        let established = matches!(import.session.state(), ImportState::Established { .. });
        let token = import.session.token();
        if !established || (common.egress.mac.is_none() && token.is_none()) {
            return; // Sent once the handshake is done (the timer looks every tick).
        }
        let len = slot.len;
        let frame = slot.buf.get_mut(..len).unwrap_or_default();
        set_budget(frame, budget_ms(slot.deadline_ns, now_ns));
        let (datagrams, bytes) = common.egress.send(
            wire,
            frame,
            true,
            std::iter::once((imported.spec.server, token.unwrap_or(0))),
        );
        common.metrics.sent(datagrams, bytes);
        if slot.sent > 0 {
            common.metrics.service.resent.add(1);
        }
        slot.sent = slot.sent.saturating_add(1);
        slot.next_send_ns = now_ns.saturating_add(slot.backoff_ns);
        slot.backoff_ns = slot.backoff_ns.saturating_mul(2).min(RESEND_MAX_NS);
    }

    /// Ends call `i` with `result` through `sink`, and frees its slot.
    fn end(&mut self, i: usize, result: Result<&[u8], CallStatus>, sink: &mut dyn Sink) {
        if let Some(slot) = self.calls.get_mut(i) {
            if slot.live {
                slot.live = false;
                self.live_calls -= 1;
                sink.reply(slot.service, slot.key, result);
            }
        }
    }

    /// A `Reply` frame: ends its call if it is the server's, under the session and token the
    /// import follows, for a call in flight.
    pub(crate) fn on_reply(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        subscriber: &SubscriberSide,
        sink: &mut dyn Sink,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (h, src) = (frame.header, incoming.src);
        let Some(service) = (self.imported.iter())
            .position(|i| i.spec.topic_id == h.topic_id && i.spec.server == src)
        else {
            return Err(if self.has_topic(h.topic_id) {
                DropReason::UnknownSender
            } else {
                DropReason::UnknownTopic
            });
        };
        let Some(imported) = self.imported.get(service) else {
            return Err(DropReason::UnknownTopic);
        };
        let Some(import) = subscriber.imports.get(imported.import) else {
            return Err(DropReason::UnknownTopic);
        };
        match import.session.state() {
            ImportState::Established { session, .. } if session == h.session => {}
            _ => return Err(DropReason::UnknownSender),
        }
        if common.egress.mac.is_none() && incoming.token != import.session.token() {
            return Err(DropReason::BadToken);
        }
        if h.fingerprint != imported.spec.reply_fingerprint {
            return Err(DropReason::FingerprintMismatch);
        }
        let reply = ReplyFrame::from_frame(frame)?;
        let Some(i) = (self.calls.iter())
            .position(|c| c.live && c.service == service && c.call == reply.call)
        else {
            common.metrics.service.late.add(1);
            return Ok(());
        };
        let result = match reply.status {
            CallStatus::Ok => Ok(reply.body),
            status => Err(status),
        };
        self.end(i, result, sink);
        Ok(())
    }

    /// Resends what is due, ends the calls whose deadline passed (`Timeout`) or whose
    /// service was refused (`Refused`), and frees the served slots whose deadline passed.
    pub(crate) fn poll(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
        subscriber: &SubscriberSide,
        common: &mut Common,
    ) {
        if self.live_calls > 0 {
            for i in 0..self.calls.len() {
                let Some(c) = self.calls.get(i).filter(|c| c.live) else {
                    continue;
                };
                let refused = (self.imported.get(c.service))
                    .and_then(|imp| subscriber.import_state(imp.import))
                    .is_some_and(|s| matches!(s, ImportState::Refused(_)));
                if refused {
                    self.end(i, Err(CallStatus::Refused), sink);
                } else if now_ns >= c.deadline_ns {
                    common.metrics.service.timeouts.add(1);
                    self.end(i, Err(CallStatus::Timeout), sink);
                } else if now_ns >= c.next_send_ns {
                    self.send_call(i, now_ns, wire, subscriber, common);
                }
            }
        }
        // Frees the slots past their caller's deadline: answered, or in progress a grace
        // after it (the local answer never came; a late one is ignored).
        for i in 0..self.slots.len() {
            let due = self.slots.get(i).is_some_and(|s| match s.stage {
                Stage::Answered => s.expires_ns <= now_ns,
                Stage::InProgress => s.expires_ns.saturating_add(IN_PROGRESS_GRACE_NS) <= now_ns,
                Stage::Free => false,
            });
            if due {
                self.release(i);
            }
        }
    }

    /// When [`poll`](Self::poll) next has something to do (`u64::MAX`: nothing).
    pub(crate) fn deadline(&self) -> u64 {
        if self.live_calls == 0 {
            return u64::MAX;
        }
        (self.calls.iter().filter(|c| c.live))
            .map(|c| c.next_send_ns.min(c.deadline_ns))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The call ids of one caller seen in a window below the highest: 64-bit words of it.
const SEEN_WORDS: usize = 16;
/// How far below the highest call id seen a call is still told new from seen: a call this
/// many calls older than the caller's newest is refused (it times out at its caller).
pub const SEEN_WINDOW: u64 = 64 * SEEN_WORDS as u64;

/// The call ids one caller's session has had run, as a sliding window below the highest (the
/// anti-replay window of IPsec, RFC 4303 §3.4.3, over call ids): ids are given in order by
/// the caller, so a window covers every call it can still have in flight.
struct Seen {
    src: SocketAddr,
    session: u64,
    /// The highest call id seen (0: none).
    highest: u64,
    /// Bit `k` (word `k / 64`, bit `k % 64`): call `highest - k` was seen.
    bits: [u64; SEEN_WORDS],
    /// The latest deadline of the calls seen: until then, one of them may be resent.
    until_ns: u64,
    /// Its answered calls kept (`Services::answered`).
    answered: usize,
}

/// What `Services::first_time` tells of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Novelty {
    /// Not seen before: run it (it is marked seen).
    New,
    /// Seen before, or too old to tell: never run it.
    Seen,
    /// Of a new caller session, with no room to remember it without forgetting a session
    /// whose calls may still be resent: not run.
    Full,
}

impl Seen {
    /// Marks `call` seen; `true` if it was not seen before and is within the window.
    fn mark(&mut self, call: u64) -> bool {
        if call > self.highest {
            let shift = call - self.highest;
            self.shift(shift);
            self.highest = call;
            self.set(0);
            return true;
        }
        let k = self.highest - call;
        if k >= SEEN_WINDOW || self.get(k) {
            return false;
        }
        self.set(k);
        true
    }

    /// Moves the window up by `n` ids.
    fn shift(&mut self, n: u64) {
        if n >= SEEN_WINDOW {
            self.bits = [0; SEEN_WORDS];
            return;
        }
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        for w in (0..SEEN_WORDS).rev() {
            let from = w.checked_sub(words);
            let hi = from.and_then(|f| self.bits.get(f)).copied().unwrap_or(0);
            let lo = from
                .and_then(|f| f.checked_sub(1))
                .and_then(|f| self.bits.get(f))
                .copied()
                .unwrap_or(0);
            let word = if bits == 0 {
                hi
            } else {
                (hi << bits) | (lo >> (64 - bits))
            };
            if let Some(slot) = self.bits.get_mut(w) {
                *slot = word;
            }
        }
    }

    fn get(&self, k: u64) -> bool {
        (self.bits.get((k / 64) as usize)).is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    fn set(&mut self, k: u64) {
        if let Some(w) = self.bits.get_mut((k / 64) as usize) {
            *w |= 1 << (k % 64);
        }
    }
}

/// The milliseconds from `now_ns` to `deadline_ns`, at most `u32::MAX`.
fn budget_ms(deadline_ns: u64, now_ns: u64) -> u32 {
    u32::try_from(deadline_ns.saturating_sub(now_ns) / 1_000_000).unwrap_or(u32::MAX)
}

/// The little-endian word at `at` of a frame header.
fn header_word(header: &[u8; HEADER_LEN], at: usize) -> [u8; 8] {
    let mut word = [0u8; 8];
    if let Some(src) = header.get(at..at + 8) {
        word.copy_from_slice(src);
    }
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Seen {
            src: SocketAddr::from(([127, 0, 0, 1], 1)),
            session: 1,
            highest: 0,
            bits: [0; SEEN_WORDS],
            until_ns: 0,
            answered: 0,
        }
    }

    /// The window against a set of every id marked.
    #[test]
    fn the_seen_window_runs_each_call_once_and_refuses_what_it_cannot_tell() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut s = seen();
        let mut marked = std::collections::HashSet::new();
        let mut newest = 0u64;
        for _ in 0..20_000 {
            // Mostly new ids in order, some resends, some far behind, some far ahead.
            let call = match rng.u8(..10) {
                0..=5 => newest + 1,
                6 | 7 => newest.saturating_sub(rng.u64(..SEEN_WINDOW + 50)),
                8 => newest + rng.u64(1..3 * SEEN_WINDOW),
                _ => newest.saturating_sub(rng.u64(..8)),
            }
            .max(1);
            let first = s.mark(call);
            let expected = !marked.contains(&call) && call + SEEN_WINDOW > newest.max(call);
            assert_eq!(first, expected, "call {call}, newest {newest}");
            if first {
                marked.insert(call);
            }
            newest = newest.max(call);
        }
    }
}
