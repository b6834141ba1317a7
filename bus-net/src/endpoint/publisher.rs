//! The publisher side of the endpoint: the handshake machine ([`PublisherSession`]: allowlist,
//! rate limit, cookies, the subscriber table with its caps, subscription tokens, the per-host
//! retransmission budgets), every exported topic (its sequence and, if reliable, its history
//! and group repairs: [`ExportState`]), the control plane of the direct topics, and the schemas
//! served.
//!
//! Inputs: `Subscribe`/`Unsubscribe`, `Nak` and `SchemaRequest` frames, each with its
//! datagram's facts ([`Incoming`]); messages to export ([`PublisherSide::export`]); the timer.
//! Outputs: answers queued in the datagram's [`Replies`] (sent by the router, in one datagram
//! no larger than the request); data, heartbeats, retransmissions and late-join bursts through
//! the egress; [`Event::SubscribersChanged`].
//!
//! Algorithm (`docs/PROTOCOL.md`, "Handshake", "Reliable topics", "Multicast data"):
//! - A `Subscribe` goes to the machine (`session/publisher.rs`), which admits, renews,
//!   challenges or refuses it; one carrying this endpoint's own session is dropped (it would
//!   loop our messages back into our bus). An admitted subscriber of a late-join export gets the
//!   export's last messages once its acknowledgement has gone ([`PublisherSide::send_joins`]).
//! - A NAK is answered only for a reliable export, from an admitted subscriber whose cookie
//!   proves its address; the retransmissions come out of its host's byte budget and go to it
//!   alone, or, for a subscriber that receives the export's group, to the group after a random
//!   delay (`multicast.rs`).
//! - Heartbeats carry each topic's last sequence number to its subscribers (and the group, and
//!   the `Group` offer to those not on it) every heartbeat period; housekeeping expires
//!   subscribers and rotates the cookie secret.

use std::net::SocketAddr;
use std::sync::Arc;

use super::common::Common;
use super::event::Event;
use super::export::{DirectTopic, ExportBatch, ExportSpec, ExportState};
use super::metrics::NetMetrics;
use super::multicast::{self, GroupRepairCounts};
use super::schema::EncodedShape;
use super::{Incoming, Wire};
use crate::session::Replies;
use crate::{
    BatchEncoder, Control, CookieJar, DropReason, ExportedTopic, Frame, HostBudgets, Nak,
    PublisherCounts, PublisherEvent, PublisherSession, RateLimiter, ReliableExport, Retransmit,
    SchemaReply, SchemaRequest, SubscriberTable, HEADER_LEN, MAC_TAG_LEN, SCHEMA_REPLY_FIXED,
};

/// The publisher side (see the module docs).
pub(crate) struct PublisherSide {
    /// The handshake machine and the subscriber table.
    pub(crate) machine: PublisherSession,
    /// The ring-fed exports, in the order given.
    pub(crate) exports: Vec<ExportState>,
    /// The direct topics (sent from threads of their own; their control plane is here).
    pub(crate) directs: Vec<DirectTopic>,
    /// The plan of the answer to one NAK (preallocated).
    retransmit: Retransmit,
    /// Subscribers admitted by the datagram being handled, to send the last messages of a
    /// late-join export once the acknowledgement has gone (preallocated, bounded).
    joins: Vec<(u64, SocketAddr)>,
    /// One datagram being built by an export.
    buf: Vec<u8>,
    next_heartbeat: u64,
    /// When the cookie secret is next rotated.
    next_reseed: u64,
    repair_counts: GroupRepairCounts,
}

impl PublisherSide {
    /// The state of each export of `specs`, its group token drawn from `common`'s entropy.
    pub(crate) fn export_states(specs: Vec<ExportSpec>, common: &mut Common) -> Vec<ExportState> {
        let reliable_config = common.reliable_config();
        let config = &common.config;
        // What a downstream datagram carries beyond its frames: charged to retransmit budgets.
        let trailer = if config.psk.is_some() {
            MAC_TAG_LEN
        } else {
            crate::TOKEN_LEN
        };
        specs
            .into_iter()
            .map(|spec| {
                let history = spec.reliable.then(|| {
                    ReliableExport::new(
                        spec.topic_id,
                        spec.fingerprint,
                        common.session,
                        config.subscribers_per_topic,
                        &reliable_config,
                    )
                    .with_late_join(spec.late_join)
                    .with_datagram_overhead(trailer)
                });
                ExportState::new(spec, history, common.entropy.next_u64())
            })
            .collect()
    }

    /// The publisher side of `exports` and `directs`; its cookie and token secrets drawn
    /// from `common`'s entropy. Allocates every buffer and table now.
    pub(crate) fn new(
        exports: Vec<ExportState>,
        directs: Vec<DirectTopic>,
        common: &mut Common,
    ) -> Self {
        let config = &common.config;
        let topics = exports
            .iter()
            .map(|e| ExportedTopic {
                topic_id: e.spec.topic_id,
                fingerprint: e.spec.fingerprint,
                allow: e.spec.allow.clone(),
            })
            .chain(directs.iter().map(|d| ExportedTopic {
                topic_id: d.topic_id,
                fingerprint: d.fingerprint,
                allow: None,
            }))
            .collect();
        let table = SubscriberTable::new(config.subscriber_timeout, config.subscriber_capacity)
            .with_topic_cap(config.subscribers_per_topic)
            .with_host_cap(config.subscribers_per_host);
        let jar = CookieJar::new(common.entropy.next(), config.cookie_window);
        let machine = PublisherSession::new(
            common.session,
            jar,
            RateLimiter::new(config.rate_limit, config.rate_limit_sources),
            config.allow.clone(),
            topics,
            table,
            common.entropy.next(),
        )
        .with_budgets(HostBudgets::new(
            config.subscriber_capacity,
            config.reliable.retransmit_rate,
        ));
        PublisherSide {
            machine,
            exports,
            directs,
            retransmit: Retransmit::with_capacity(config.reliable.retransmit_per_nak),
            joins: Vec::with_capacity(common.recv_max / HEADER_LEN + 1),
            buf: vec![0; common.max_datagram],
            next_heartbeat: 0,
            next_reseed: u64::try_from(config.cookie_window.as_nanos()).unwrap_or(u64::MAX),
            repair_counts: GroupRepairCounts::default(),
        }
    }

    /// Whether `topic_id` is exported (ring-fed or direct).
    pub(crate) fn exports_topic(&self, topic_id: u64) -> bool {
        self.machine.topics().iter().any(|t| t.topic_id == topic_id)
    }

    /// Every exported topic's name and id, ring-fed then direct.
    pub(crate) fn exported_topics(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        let exports = (self.exports.iter()).map(|e| (&*e.spec.topic, e.spec.topic_id));
        exports.chain((self.directs.iter()).map(|d| (&*d.topic, d.topic_id)))
    }

    /// A `Subscribe` or `Unsubscribe` from the datagram's source; `group`: the `Subscribe`'s
    /// GROUP flag. The machine's answer is queued in `replies`.
    pub(crate) fn on_subscription(
        &mut self,
        control: &Control,
        group: bool,
        incoming: &Incoming,
        replies: &mut Replies,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (src, now_ns) = (incoming.src, incoming.now_ns);
        if let Control::Subscribe { session, .. } = control {
            if *session == common.session {
                // Our own Subscribe, sent to ourselves (an announcement naming one of our
                // addresses): answering would loop our own messages back into our bus.
                return Err(DropReason::Replayed);
            }
        }
        let (exports, directs) = (&self.exports, &self.directs);
        let last_seq = |topic_id: u64| match exports.iter().find(|e| e.spec.topic_id == topic_id) {
            Some(e) => e.ack_seq(),
            None => directs
                .iter()
                .find(|d| d.topic_id == topic_id)
                .map_or(0, DirectTopic::last_seq),
        };
        let queued = replies.frames().len();
        let event = self
            .machine
            .on_control(control, src, now_ns, last_seq, replies);
        match replies.frames().get(queued) {
            Some(Control::Refuse(_)) => common.metrics.refused.add(1),
            // Only a Subscribe that proved its address and was admitted or renewed says
            // anything about its subscriber's group: an unproven one is answered by a
            // challenge and changes nothing.
            Some(&Control::SubscribeAck { topic_id, .. }) => {
                self.on_subscribe_group(topic_id, src, group);
            }
            _ => {}
        }
        if let Ok(PublisherEvent::SubscribersChanged(topic_id)) = event {
            common.push_event(Event::SubscribersChanged { topic_id });
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

    /// After a `Subscribe` from `src` was acknowledged (its address proven, the subscriber
    /// admitted or renewed): records whether the subscriber receives the topic's group. One
    /// that does not is told the group by the `Group` frame in each heartbeat it gets
    /// ([`multicast::group_offer`]), never in answer to its `Subscribe`.
    fn on_subscribe_group(&mut self, topic_id: u64, src: SocketAddr, group: bool) {
        let has_group = self
            .exports
            .iter()
            .any(|e| e.spec.topic_id == topic_id && e.spec.group.is_some());
        if has_group {
            self.machine
                .subscribers_mut()
                .set_via_group(src, topic_id, group);
        }
    }

    /// A NAK: answered only for a reliable export, from an admitted subscriber whose cookie
    /// proves its address ([`PublisherSession::admit_nak`]); the retransmissions (within the
    /// per-NAK cap and its host's byte budget) and the `Unavailable` for what left history go
    /// to it alone, or to the group for a subscriber that receives it.
    pub(crate) fn on_nak(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (src, now_ns) = (incoming.src, incoming.now_ns);
        let nak = Nak::from_frame(frame)?;
        let Some(i) = self
            .exports
            .iter()
            .position(|e| e.spec.topic_id == nak.topic_id && e.reliable.is_some())
        else {
            return Err(DropReason::UnknownTopic);
        };
        self.machine.admit_nak(&nak, src, now_ns)?;
        let by_group = self.repairs_by_group(i, &nak, src);
        if by_group
            && self
                .exports
                .get(i)
                .is_some_and(|e| multicast::repair_pending(e, &nak, now_ns))
        {
            self.repair_counts.suppressed += 1;
            // Already being repaired on the group: suppressed, but charged to the NAKer's
            // host as a header per message, so that repeating it is not free.
            let cost = nak.len().saturating_mul(HEADER_LEN as u64);
            let budgets = self.machine.budgets_mut();
            if !budgets.take(src.ip(), cost, now_ns) {
                return Err(DropReason::RateLimited);
            }
            return Ok(());
        }
        let Some(export) = self.exports.get_mut(i) else {
            return Err(DropReason::UnknownTopic);
        };
        let Some(history) = export.reliable.as_mut() else {
            return Err(DropReason::UnknownTopic);
        };
        let budgets = self.machine.budgets_mut();
        history.on_nak(&nak, src, now_ns, budgets, &mut self.retransmit);
        if by_group {
            let seqs = self.retransmit.seqs();
            multicast::queue_repair(export, seqs, now_ns, &mut common.entropy);
            self.retransmit.clear_seqs();
        }
        self.send_retransmit(wire, i, src, common);
        Ok(())
    }

    /// Whether the answer to `nak` from `src` goes to export `i`'s group: the export has one
    /// and `src` receives it.
    fn repairs_by_group(&self, i: usize, nak: &Nak, src: SocketAddr) -> bool {
        let has_group = self
            .exports
            .get(i)
            .is_some_and(|e| e.spec.group.is_some() && e.reliable.is_some());
        has_group
            && self
                .machine
                .subscribers()
                .iter()
                .any(|s| s.addr == src && s.topic_id == nak.topic_id && s.via_group)
    }

    /// Sends each subscriber admitted by the last datagram the last messages of a late-join
    /// export (after its acknowledgement, so it follows the session already).
    pub(crate) fn send_joins(&mut self, wire: &mut dyn Wire, now_ns: u64, common: &mut Common) {
        while let Some((topic_id, dest)) = self.joins.pop() {
            let Some(i) = self
                .exports
                .iter()
                .position(|e| e.spec.topic_id == topic_id)
            else {
                continue;
            };
            if let Some(history) = self.exports.get_mut(i).and_then(|e| e.reliable.as_mut()) {
                let budgets = self.machine.budgets_mut();
                history.on_join(dest, now_ns, budgets, &mut self.retransmit);
            }
            self.send_retransmit(wire, i, dest, common);
        }
    }

    /// Sends what `self.retransmit` planned for export `i` to `dest`: the `Unavailable`, then
    /// the history frames packed into as few datagrams as they fit in, each protected like
    /// any downstream datagram (sealed, or followed by `dest`'s subscription token).
    fn send_retransmit(
        &mut self,
        wire: &mut dyn Wire,
        i: usize,
        dest: SocketAddr,
        common: &mut Common,
    ) {
        let room = common.control_room();
        let Some(history) = self.exports.get(i).and_then(|e| e.reliable.as_ref()) else {
            return;
        };
        let tokened = common.egress.mac.is_none();
        let token = if tokened {
            match self
                .machine
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
        let (egress, metrics) = (&mut common.egress, &common.metrics);
        let mut flush = |frames: &[u8]| {
            let (datagrams, bytes) =
                egress.send(&mut *wire, frames, true, std::iter::once((dest, token)));
            metrics.sent(datagrams, bytes);
        };
        let buf = &mut common.control_buf[..room];
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

    /// A `SchemaRequest` from the datagram's source, in a datagram of `datagram_len` bytes if
    /// it is the only frame there (`None` otherwise: not answered, `BadControl`). Answered
    /// (`schema.rs`) with one page of the export's shape (or of the service shape of one of
    /// `services`, under that shape's fingerprint), no larger than the request, under the
    /// topic's allowlist and the per-source rate limit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_schema_request(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        datagram_len: Option<usize>,
        services: &[super::ServiceSpec],
        wire: &mut dyn Wire,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (src, now_ns) = (incoming.src, incoming.now_ns);
        let request = SchemaRequest::from_frame(frame)?;
        let datagram_len = datagram_len.ok_or(DropReason::BadControl)?;
        if !self.machine.allowed(request.topic_id, src) {
            return Err(DropReason::NotAllowed);
        }
        if !self.machine.rate_ok(src, now_ns) {
            return Err(DropReason::RateLimited);
        }
        let exported = self.exports.iter().map(|e| {
            let s = &e.spec;
            (s.topic_id, s.fingerprint, s.shape.as_ref())
        });
        let direct = self
            .directs
            .iter()
            .map(|d| (d.topic_id, d.fingerprint, d.shape.as_ref()));
        let service = services.iter().map(|s| {
            let fingerprint = s.shape.as_ref().map_or(0, EncodedShape::fingerprint);
            (s.topic_id, fingerprint, s.shape.as_ref())
        });
        let served = exported
            .chain(direct)
            .chain(service)
            .find(|&(topic_id, ..)| topic_id == request.topic_id);
        let fingerprint = served.map_or(0, |(_, fingerprint, _)| fingerprint);
        let bytes = served
            .and_then(|(.., shape)| shape)
            .map_or(&[][..], EncodedShape::as_bytes);
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        let rest = bytes.get(offset..).ok_or(DropReason::BadControl)?;
        // The answer, sealed or not, is at most the request's length: the request's padding
        // bounds the page, and the request carried the same trailer.
        let tag = common.seal_len();
        let fits = datagram_len.saturating_sub(tag + HEADER_LEN + SCHEMA_REPLY_FIXED);
        let page = rest
            .get(..rest.len().min(request.room).min(fits))
            .unwrap_or_default();
        let reply = SchemaReply {
            topic_id: request.topic_id,
            fingerprint,
            session: common.session,
            nonce: request.nonce,
            total: u32::try_from(bytes.len()).unwrap_or(0),
            offset: request.offset,
            page,
        };
        let room = (datagram_len - tag.min(datagram_len)).min(common.control_buf.len());
        let mut enc = BatchEncoder::new(&mut common.control_buf[..room]);
        if enc.push_schema_reply(&reply).is_err() {
            // Cannot happen: the reply is no longer than the request, which fit.
            return Err(DropReason::TooLarge);
        }
        let len = enc.len();
        debug_assert!(
            len + tag <= datagram_len,
            "a schema reply larger than its request"
        );
        common.send_control_buf(wire, len, src, None);
        Ok(())
    }

    /// Starts a batch of messages of export `i`, sent through `wire` as datagrams fill and
    /// when the batch is dropped. `None` if there is no such export.
    #[inline]
    pub(crate) fn export<'a>(
        &'a mut self,
        i: usize,
        wire: &'a mut dyn Wire,
        common: &'a mut Common,
    ) -> Option<ExportBatch<'a>> {
        let room = self.buf.len() - common.egress.trailer_len();
        let export = self.exports.get_mut(i)?;
        let subscribers = self.machine.subscribers();
        // A late-join history keeps messages even while nobody subscribes.
        let subscribed = subscribers
            .subscribers(export.spec.topic_id)
            .next()
            .is_some()
            || export.reliable.as_ref().is_some_and(|r| r.late_join() > 0);
        Some(ExportBatch {
            enc: BatchEncoder::new(&mut self.buf[..room]).with_token(common.egress.mac.is_none()),
            export,
            egress: &mut common.egress,
            wire,
            subscribers,
            metrics: &common.metrics,
            session: common.session,
            max_message: common.config.reassembly.max_message,
            wall: common.wall,
            timestamp_ns: None,
            subscribed,
        })
    }

    /// When the publisher side's timers next have something to do: the heartbeat, the cookie
    /// secret's rotation, the first group retransmission due.
    pub(crate) fn deadline(&self) -> u64 {
        self.next_heartbeat
            .min(self.next_reseed)
            .min(self.repair_deadline())
    }

    /// When the first queued group retransmission falls due (`u64::MAX`: none queued).
    pub(crate) fn repair_deadline(&self) -> u64 {
        self.exports
            .iter()
            .map(multicast::repair_deadline)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Sends the group retransmissions that are due, to each export's group.
    pub(crate) fn poll_group_repairs(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) {
        for export in &mut self.exports {
            self.repair_counts.sent += multicast::send_due_repairs(export, now_ns, wire, common);
        }
    }

    /// Sends the heartbeats, if they are due at `now_ns`.
    pub(crate) fn poll_heartbeat(&mut self, now_ns: u64, wire: &mut dyn Wire, common: &mut Common) {
        if now_ns < self.next_heartbeat {
            return;
        }
        let every = u64::try_from(common.config.heartbeat_every.as_nanos()).unwrap_or(u64::MAX);
        self.next_heartbeat = now_ns.saturating_add(every);
        let timestamp_ns = (common.wall)();
        for i in 0..self.exports.len() + self.directs.len() {
            let topic_id = match self.exports.get(i) {
                Some(e) => e.spec.topic_id,
                None => match self.directs.get(i - self.exports.len()) {
                    Some(d) => d.topic_id,
                    None => continue,
                },
            };
            self.heartbeat_topic(wire, topic_id, timestamp_ns, common);
        }
    }

    /// Sends `topic_id`'s last sequence number to its subscribers (and, for an export with a
    /// group, to the group, with the `Group` offer to the subscribers not on it).
    fn heartbeat_topic(
        &mut self,
        wire: &mut dyn Wire,
        topic_id: u64,
        timestamp_ns: i64,
        common: &mut Common,
    ) {
        if self
            .machine
            .subscribers()
            .subscribers(topic_id)
            .next()
            .is_none()
        {
            return;
        }
        let Some(fingerprint) = self
            .machine
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
            session: common.session,
            last_seq: self.last_seq(topic_id),
            timestamp_ns,
        };
        let offer = self
            .exports
            .iter()
            .find(|e| e.spec.topic_id == topic_id)
            .and_then(|e| multicast::group_offer(e, common.session));
        let room = common.control_room();
        let tokened = common.egress.mac.is_none();
        let mut enc = BatchEncoder::new(&mut common.control_buf[..room]).with_token(tokened);
        if enc.push_control(&control).is_err() {
            return;
        }
        let (egress, metrics) = (&mut common.egress, &common.metrics);
        let subscribers = self.machine.subscribers();
        let Some(offer) = offer else {
            let (datagrams, bytes) = egress.send(
                wire,
                enc.as_bytes(),
                true,
                subscribers.destinations(topic_id),
            );
            metrics.sent(datagrams, bytes);
            return;
        };
        // The heartbeat alone to the group, so that its members see it is working even when
        // idle, and to the subscribers that receive the group.
        let via_group = subscribers.group_destinations(topic_id);
        let (datagrams, bytes) = egress.send(wire, enc.as_bytes(), true, via_group);
        metrics.sent(datagrams, bytes);
        let group = (offer.group, offer.token);
        let (datagrams, bytes) = egress.send(wire, enc.as_bytes(), true, std::iter::once(group));
        metrics.sent(datagrams, bytes);
        // With the group told to the others.
        if enc.push_group_offer(&offer).is_ok() {
            let (datagrams, bytes) = egress.send(
                wire,
                enc.as_bytes(),
                true,
                subscribers.unicast_destinations(topic_id),
            );
            metrics.sent(datagrams, bytes);
        }
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

    /// The periodic chores: subscribers that did not renew expire (a `SubscribersChanged` for
    /// every topic if any did), and the cookie secret is rotated once per cookie window.
    pub(crate) fn housekeeping(&mut self, now_ns: u64, common: &mut Common) {
        let expired = self.machine.expire(now_ns, |s| {
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
                common.push_event(Event::SubscribersChanged { topic_id });
            }
        }
    }

    /// Rotates the cookie secret if its window is over at `now_ns`.
    pub(crate) fn reseed(&mut self, now_ns: u64, common: &mut Common) {
        if now_ns >= self.next_reseed {
            let window = u64::try_from(common.config.cookie_window.as_nanos()).unwrap_or(u64::MAX);
            self.next_reseed = now_ns.saturating_add(window);
            let entropy = common.entropy.next();
            self.machine.reseed(entropy);
        }
    }

    /// What each subscriber of a reliable export missed beyond history: `(topic, subscriber,
    /// missed)`.
    pub(crate) fn missed(&self) -> impl Iterator<Item = (&Arc<str>, SocketAddr, u64)> + '_ {
        self.exports.iter().flat_map(|e| {
            e.reliable
                .iter()
                .flat_map(move |r| r.missed().map(move |(addr, n)| (&e.spec.topic, addr, n)))
        })
    }

    /// What group retransmission did.
    pub(crate) fn group_repairs(&self) -> GroupRepairCounts {
        self.repair_counts
    }

    /// The handshake figures.
    pub(crate) fn counts(&self) -> &PublisherCounts {
        self.machine.counts()
    }

    /// Sets the figures that are sums over the exports (retransmissions, `Unavailable`s,
    /// subscribers that missed messages) in `m`.
    pub(crate) fn refresh_metrics(&self, m: &NetMetrics) {
        let (mut retransmitted, mut unavailable, mut missing) = (0u64, 0u64, 0u64);
        for r in self.exports.iter().filter_map(|e| e.reliable.as_ref()) {
            retransmitted = retransmitted.saturating_add(r.counts().retransmitted);
            unavailable = unavailable.saturating_add(r.counts().unavailable);
            missing += r.missed().count() as u64;
        }
        m.missed_subscribers.set(missing);
        m.retransmitted.set(retransmitted);
        m.unavailable.set(unavailable);
    }
}
