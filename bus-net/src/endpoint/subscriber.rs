//! The subscriber side of the endpoint: every import (its session machine, reliable receiver,
//! reassembler and NAK nonces: an [`ImportSlot`]), the figures of removed imports, and the
//! schema fetches.
//!
//! Inputs: the frames a publisher sends an import (data and fragments, `Unavailable`, the
//! handshake's answers, heartbeats, `Group`), each with its datagram's facts ([`Incoming`]:
//! source, token, whether it came by a group, now); `SchemaReply` frames; the timer.
//! Outputs: messages to the [`Sink`]; requests, renewals and NAKs through the egress; answers
//! queued in the datagram's [`Replies`]; [`Event`]s.
//!
//! Algorithm: a frame goes to the live import of its (source, topic). An import is keyed by its
//! publisher's address, so a frame from anywhere else reaches none. The import's session
//! machine (`session/subscriber.rs`) decides whether the frame is of the session it follows
//! and carries its token; a best-effort import then delivers what its sequence tracker lets
//! through, a reliable one hands the frame to its reorder buffer (`session/reliable.rs`),
//! which delivers in order and NAKs gaps on the timer. A fragment goes through the import's
//! reassembler first. A removed import's slot is reused by the next import added; its figures
//! stay counted ([`RetiredFigures`]).

use std::net::SocketAddr;

use super::common::Common;
use super::event::Event;
use super::import::{deliver_frame, ImportSlot, ImportSpec, InOrder, Origin, RetiredFigures, Sink};
use super::metrics::{add_loss, NetMetrics};
use super::multicast::group_health;
use super::schema::SchemaFetches;
use super::{Incoming, Via, Wire};
use crate::session::Replies;
use crate::{
    BatchEncoder, Control, DropReason, DropReason::UnknownSender, Frame, GroupOffer, ImportState,
    LossCounts, Nak, Refusal, SubscriberCounts, SubscriberEvent, Unavailable,
};

/// The subscriber side (see the module docs).
pub(crate) struct SubscriberSide {
    /// The imports, given at start then added by discovery; indices are stable (events and
    /// the sink name them).
    pub(crate) imports: Vec<ImportSlot>,
    /// The figures of removed imports whose slots were reused.
    retired: RetiredFigures,
    pub(crate) fetches: SchemaFetches,
}

impl SubscriberSide {
    /// The imports of `specs`, each delivering to its own index. Draws each import's secrets
    /// from `common`'s entropy, in order.
    pub(crate) fn new(specs: Vec<ImportSpec>, common: &mut Common) -> Self {
        let reliable = common.reliable_config();
        let imports = specs
            .into_iter()
            .enumerate()
            .map(|(port, spec)| {
                ImportSlot::new(
                    spec,
                    port,
                    common.session,
                    &common.config,
                    &reliable,
                    &mut common.entropy,
                )
            })
            .collect();
        SubscriberSide {
            imports,
            retired: RetiredFigures::default(),
            fetches: SchemaFetches::default(),
        }
    }

    /// Adds an import of `spec` delivering to `port`; returns its index, reusing a removed
    /// import's slot if there is one. Allocates its receiver and reassembler.
    pub(crate) fn add_import(
        &mut self,
        spec: ImportSpec,
        port: usize,
        common: &mut Common,
    ) -> usize {
        let reliable = common.reliable_config();
        let slot = ImportSlot::new(
            spec,
            port,
            common.session,
            &common.config,
            &reliable,
            &mut common.entropy,
        );
        match self.imports.iter().position(|i| i.retired) {
            Some(i) => {
                if let Some(old) = self.imports.get_mut(i) {
                    self.retired.absorb(old);
                    *old = slot;
                }
                i
            }
            None => {
                self.imports.push(slot);
                self.imports.len() - 1
            }
        }
    }

    /// Removes import `i`: unsubscribes (best effort, through `wire`) and stops sending and
    /// accepting anything for it. Its figures stay counted.
    pub(crate) fn remove_import(&mut self, i: usize, wire: &mut dyn Wire, common: &mut Common) {
        let Some(import) = self.imports.get_mut(i) else {
            return;
        };
        if import.retired {
            return;
        }
        import.retired = true;
        let dest = import.spec.publisher;
        if let Some(unsubscribe) = import.session.unsubscribe() {
            common.send_control(wire, &unsubscribe, dest);
        }
    }

    /// The live import of `topic_id` from `publisher`, if any.
    #[inline]
    pub(crate) fn import_of(&self, publisher: SocketAddr, topic_id: u64) -> Option<usize> {
        self.imports.iter().position(|i| {
            !i.retired && i.spec.publisher == publisher && i.spec.topic_id == topic_id
        })
    }

    /// Whether any import (live or removed) is of `topic_id`.
    pub(crate) fn imports_topic(&self, topic_id: u64) -> bool {
        self.imports.iter().any(|i| i.spec.topic_id == topic_id)
    }

    /// The state of import `i`'s subscription.
    pub(crate) fn import_state(&self, i: usize) -> Option<ImportState> {
        self.imports.get(i).map(|im| im.session.state())
    }

    /// A data frame or fragment for import `index` (the live import of the frame's source and
    /// topic): taken if its session machine says the frame is of the session it follows with
    /// its token, then delivered (best effort) or put in order (reliable).
    #[inline]
    pub(crate) fn on_data(
        &mut self,
        index: usize,
        frame: &Frame<'_>,
        incoming: &Incoming,
        common: &mut Common,
        sink: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let h = &frame.header;
        let (token, now_ns) = (incoming.token, incoming.now_ns);
        let by_group = incoming.via == Via::Group;
        let Some(ImportSlot {
            session,
            reliable,
            reassembly,
            port,
            group_seen_ns,
            ..
        }) = self.imports.get_mut(index)
        else {
            return Err(UnknownSender);
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
                    metrics: &common.metrics,
                    events: &mut common.events,
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
                &common.metrics,
            )?;
        }
        Ok(())
    }

    /// An `Unavailable` for a reliable import: the range left the publisher's history.
    pub(crate) fn on_unavailable(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        common: &mut Common,
        sink: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let u = Unavailable::from_frame(frame)?;
        let (token, now_ns) = (incoming.token, incoming.now_ns);
        let Some(index) = self.import_of(incoming.src, u.topic_id) else {
            return Err(UnknownSender);
        };
        let Some(ImportSlot {
            session,
            reliable,
            reassembly,
            port,
            ..
        }) = self.imports.get_mut(index)
        else {
            return Err(UnknownSender);
        };
        let Some(receiver) = reliable.as_mut() else {
            return Err(DropReason::BadControl);
        };
        if !session.follows_reliable(u.fingerprint, u.session, token, now_ns)? {
            return Err(UnknownSender);
        }
        let mut in_order = InOrder {
            sink,
            import: index,
            port: *port,
            reassembly,
            metrics: &common.metrics,
            events: &mut common.events,
            session: u.session,
            now_ns,
        };
        receiver.on_unavailable(&u, now_ns, &mut in_order)
    }

    /// A publisher's answer or heartbeat (`CookieChallenge`, `SubscribeAck`, `Heartbeat`,
    /// `Refuse`): only from a publisher an import subscribes to, handed to that import's
    /// machine (which may queue an answer in `replies`); an acknowledgement that establishes
    /// a session restarts a reliable receiver there, a heartbeat of the session followed tells
    /// it what was sent.
    pub(crate) fn on_control(
        &mut self,
        control: &Control,
        topic_id: u64,
        incoming: &Incoming,
        replies: &mut Replies,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let now_ns = incoming.now_ns;
        let Some(i) = self.import_of(incoming.src, topic_id) else {
            // Only publishers we subscribe to may answer us.
            return Err(UnknownSender);
        };
        let Some(im) = self.imports.get_mut(i) else {
            return Err(UnknownSender);
        };
        let event = im
            .session
            .on_control(control, incoming.token, now_ns, replies)?;
        im.heard_ns = now_ns;
        if incoming.via == Via::Group {
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
        self.on_import_event(i, event, common);
        Ok(())
    }

    fn on_import_event(&mut self, i: usize, event: SubscriberEvent, common: &mut Common) {
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
                common.push_event(Event::Established {
                    import: i,
                    session,
                    changed,
                });
            }
            SubscriberEvent::Refused(refusal) => {
                common.metrics.refused.add(1);
                common.push_event(Event::Refused { import: i, refusal });
            }
            SubscriberEvent::Retrying(refusal) => {
                common.metrics.refused.add(1);
                if !import.warned {
                    import.warned = true;
                    common.push_event(Event::Retrying { import: i, refusal });
                }
            }
        }
    }

    /// A `Group` frame from a publisher an import follows: the import accepts the group
    /// token, and its driver is asked to join the group ([`Event::JoinGroup`]).
    pub(crate) fn on_group_offer(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let offer = GroupOffer::from_frame(frame)?;
        let Some(i) = self.import_of(incoming.src, offer.topic_id) else {
            return Err(UnknownSender);
        };
        let Some(im) = self.imports.get_mut(i) else {
            return Err(UnknownSender);
        };
        // Only with this subscription's own token, from the session it follows.
        if !im.session.follows_reliable(
            offer.fingerprint,
            offer.session,
            incoming.token,
            incoming.now_ns,
        )? {
            return Err(UnknownSender);
        }
        if !common.config.multicast.receive {
            return Ok(()); // Asked for unicast: the group is never joined nor claimed.
        }
        im.session.set_group_token(offer.token);
        if im.group != Some(offer.group) {
            im.group = Some(offer.group);
            common.push_event(Event::JoinGroup {
                import: i,
                group: offer.group,
            });
        }
        Ok(())
    }

    /// Each live import's request that is due (first subscribe, renewal, retry, resubscribe;
    /// a `Subscribe` says whether the import receives its group), then the reliable imports'
    /// timers.
    pub(crate) fn poll(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
        common: &mut Common,
    ) {
        let heartbeat_every = common.config.heartbeat_every;
        for import in self.imports.iter_mut().filter(|im| !im.retired) {
            let dest = import.spec.publisher;
            let group = group_health(import, now_ns, heartbeat_every);
            if let Some(request) = import.session.poll(now_ns) {
                common.send_request(wire, &request, dest, group);
            }
        }
        self.poll_reliable(now_ns, wire, sink, common);
    }

    /// The reliable imports' timers: gaps past their deadline are given up, due NAKs sent.
    fn poll_reliable(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        sink: &mut dyn Sink,
        common: &mut Common,
    ) {
        let room = common.control_room();
        let own_session = common.session;
        for (index, import) in self.imports.iter_mut().enumerate() {
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
                metrics: &common.metrics,
                events: &mut common.events,
                session: publisher_session,
                now_ns,
            };
            let mut enc = BatchEncoder::new(&mut common.control_buf[..room]);
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
                common.send_control_buf(wire, len, dest, None);
            }
        }
    }

    /// Unsubscribes every live import (said once, best effort: an import that never
    /// subscribed says nothing).
    pub(crate) fn close(&mut self, wire: &mut dyn Wire, common: &mut Common) {
        for import in self.imports.iter_mut().filter(|im| !im.retired) {
            let dest = import.spec.publisher;
            if let Some(unsubscribe) = import.session.unsubscribe() {
                common.send_control(wire, &unsubscribe, dest);
            }
        }
    }

    /// The data groups the live imports were told of.
    pub(crate) fn import_groups(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.imports
            .iter()
            .filter(|im| !im.retired)
            .filter_map(|im| im.group)
    }

    /// The loss figures summed over every import: a best-effort import's tracker, a reliable
    /// one's `unconfirmed` (what it could not recover is `unrecovered`).
    pub(crate) fn loss(&self) -> LossCounts {
        let mut loss = self.retired.loss;
        for import in self.imports.iter().filter(|i| i.reliable.is_none()) {
            add_loss(&mut loss, import.session.loss());
        }
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            loss.unconfirmed = loss.unconfirmed.saturating_add(r.counts().unconfirmed);
        }
        loss
    }

    /// Sets the figures that are sums over the imports (loss, NAKs, unrecovered messages,
    /// incomplete reassemblies) in `m`.
    pub(crate) fn refresh_metrics(&self, m: &NetMetrics) {
        m.set_loss(&self.loss());
        let (mut nak_sent, mut unrecovered) = (self.retired.naks_sent, self.retired.unrecovered);
        for r in self.imports.iter().filter_map(|i| i.reliable.as_ref()) {
            nak_sent = nak_sent.saturating_add(r.counts().naks_sent);
            unrecovered = unrecovered.saturating_add(r.counts().unrecovered);
        }
        let incomplete = self.imports.iter().fold(self.retired.incomplete, |a, i| {
            a.saturating_add(i.reassembly.counts().incomplete)
        });
        m.set_drop(DropReason::Incomplete, incomplete);
        m.nak_sent.set(nak_sent);
        m.unrecovered.set(unrecovered);
    }

    /// The handshake figures of every import, the removed ones' together.
    pub(crate) fn session_counts(&self) -> impl Iterator<Item = &SubscriberCounts> + '_ {
        self.imports
            .iter()
            .map(|i| i.session.counts())
            .chain(std::iter::once(&self.retired.sessions))
    }
}

/// The topic a publisher's control frame concerns, if it is one the subscriber side takes.
pub(crate) fn answer_topic(control: &Control) -> Option<u64> {
    match control {
        Control::CookieChallenge { topic_id, .. }
        | Control::SubscribeAck { topic_id, .. }
        | Control::Heartbeat { topic_id, .. }
        | Control::Refuse(Refusal { topic_id, .. }) => Some(*topic_id),
        _ => None,
    }
}
