//! Multicast data with unicast fallback (`docs/PROTOCOL.md`, "Multicast data"), in the manner
//! of LCM's and Aeron's multicast channels, with the subscription handshake kept.
//!
//! Publisher: an export with a group sends each datagram once to the group for every
//! subscriber that says it receives the group ([`Flags::GROUP`](crate::Flags::GROUP) on its
//! `Subscribe`), and by unicast to the others, as before. Subscribers still subscribe and
//! renew by unicast, so the publisher knows and counts them; each admitted or renewed one is
//! told the group and the group token in a `Group` frame (to it alone, with its own token).
//! Heartbeats go to every subscriber and to the group.
//!
//! Subscriber: told a group, an import asks its driver to join it ([`Event::JoinGroup`]) and
//! accepts the group token beside its own. It says it receives the group only while datagrams
//! of its stream arrive by the group (heartbeats at least: three heartbeat periods at most
//! apart); when they stop (a network that drops multicast, a left group) its next renewal, due
//! at once, says so, and the publisher serves it by unicast again. Duplicates during a switch
//! are dropped by the sequence tracker.

use std::net::SocketAddr;

use super::{push_event, Endpoint, Event, Sink, Wire};
use crate::{BatchEncoder, Control, DropReason, Flags, Frame, GroupOffer};

/// Heartbeat periods within which a group datagram must arrive for the group to count as
/// received.
const GROUP_HEALTH_PERIODS: u32 = 3;

impl Endpoint {
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
        self.by_group = true;
        self.handle(datagram, src, now_ns, wire, sink);
        self.by_group = false;
    }

    /// A `Group` frame from a publisher an import follows: the import accepts the group
    /// token, and its driver is asked to join the group.
    pub(crate) fn on_group_offer(
        &mut self,
        frame: &Frame<'_>,
        src: SocketAddr,
        token: Option<u64>,
        now_ns: u64,
    ) -> Result<(), DropReason> {
        let offer = GroupOffer::from_frame(frame)?;
        let Some(i) = self.import_of(src, offer.topic_id) else {
            return Err(DropReason::UnknownSender);
        };
        let Some(im) = self.imports.get_mut(i) else {
            return Err(DropReason::UnknownSender);
        };
        // Only with this subscription's own token, from the session it follows.
        if !im
            .session
            .follows_reliable(offer.fingerprint, offer.session, token, now_ns)?
        {
            return Err(DropReason::UnknownSender);
        }
        if !self.config.multicast.receive {
            return Ok(()); // Asked for unicast: the group is never joined nor claimed.
        }
        im.session.set_group_token(offer.token);
        if im.group != Some(offer.group) {
            im.group = Some(offer.group);
            push_event(
                &mut self.events,
                Event::JoinGroup {
                    import: i,
                    group: offer.group,
                },
            );
        }
        Ok(())
    }

    /// After a `Subscribe` was handled: records whether the subscriber receives the topic's
    /// group, and if it is subscribed to an export with a group, queues the `Group` frame
    /// that tells it the group.
    pub(crate) fn on_subscribe_group(&mut self, control: &Control, src: SocketAddr, group: bool) {
        let Control::Subscribe { topic_id, .. } = *control else {
            return;
        };
        let has_group = self
            .exports
            .iter()
            .any(|e| e.spec.topic_id == topic_id && e.spec.group.is_some());
        if !has_group {
            return;
        }
        let subscribed = self
            .publisher
            .subscribers_mut()
            .set_via_group(src, topic_id, group);
        if subscribed && self.offers.len() < self.offers.capacity() {
            self.offers.push((topic_id, src));
        }
    }

    /// Sends each queued `Group` frame to its subscriber alone, protected as any downstream
    /// datagram (with its token, or sealed).
    pub(crate) fn send_group_offers(&mut self, wire: &mut dyn Wire) {
        let room = self.control_room();
        while let Some((topic_id, dest)) = self.offers.pop() {
            let Some(export) = self.exports.iter().find(|e| e.spec.topic_id == topic_id) else {
                continue;
            };
            let Some(group) = export.spec.group else {
                continue;
            };
            let offer = GroupOffer {
                topic_id,
                fingerprint: export.spec.fingerprint,
                session: self.session,
                group,
                token: export.group_token,
            };
            let Some(token) = self
                .publisher
                .subscribers()
                .destinations(topic_id)
                .find(|&(addr, _)| addr == dest)
                .map(|(_, t)| t)
            else {
                continue;
            };
            let tokened = self.egress.mac.is_none();
            let mut enc = BatchEncoder::new(&mut self.control_buf[..room]).with_token(tokened);
            if enc.push_group_offer(&offer).is_err() {
                continue;
            }
            let (datagrams, bytes) =
                self.egress
                    .send(wire, enc.as_bytes(), true, std::iter::once((dest, token)));
            self.metrics.sent(datagrams, bytes);
        }
    }

    /// Whether import `i` receives its group now (a datagram of its stream arrived by the
    /// group within three heartbeat periods). When that changes, its next renewal is made due
    /// at once, to tell the publisher.
    pub(crate) fn group_health(&mut self, i: usize, now_ns: u64) -> bool {
        let every = self
            .config
            .heartbeat_every
            .saturating_mul(GROUP_HEALTH_PERIODS);
        let window = u64::try_from(every.as_nanos()).unwrap_or(u64::MAX);
        let Some(im) = self.imports.get_mut(i) else {
            return false;
        };
        let healthy = im.group.is_some()
            && im.group_seen_ns > 0
            && now_ns < im.group_seen_ns.saturating_add(window);
        if healthy != im.via_group {
            im.via_group = healthy;
            im.session.renew_soon(now_ns);
        }
        healthy
    }

    /// Sends a request of an import to its publisher, saying whether it receives the topic's
    /// group (a `Subscribe` only).
    pub(crate) fn send_request(
        &mut self,
        wire: &mut dyn Wire,
        control: &Control,
        dest: SocketAddr,
        group: bool,
    ) {
        let room = self.control_room();
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(control).is_err() {
            return; // Cannot happen: `max_datagram` holds a control frame (checked at bind).
        }
        let len = enc.len();
        if group && matches!(control, Control::Subscribe { .. }) {
            if let Some(flags) = self.control_buf.get_mut(5) {
                *flags |= Flags::GROUP;
            }
        }
        self.send_control_buf(wire, len, dest, None);
    }
}
