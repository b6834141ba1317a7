//! Multicast data with unicast fallback (`docs/PROTOCOL.md`, "Multicast data"), in the manner
//! of LCM's and Aeron's multicast channels, with the subscription handshake kept.
//!
//! Publisher: an export with a group sends each datagram once to the group for every
//! subscriber that says it receives the group ([`Flags::GROUP`](crate::Flags::GROUP) on its
//! `Subscribe`), and by unicast to the others, as before. Subscribers still subscribe and
//! renew by unicast, so the publisher knows and counts them; each admitted or renewed one is
//! told the group and the group token in a `Group` frame in its unicast heartbeats (with its
//! own token) until it says it receives the group. Heartbeats go to every subscriber and to the
//! group.
//!
//! Subscriber: told a group, an import asks its driver to join it ([`Event::JoinGroup`]) and
//! accepts the group token beside its own. It says it receives the group only while datagrams
//! of its stream arrive by the group (heartbeats at least: three heartbeat periods at most
//! apart); when they stop (a network that drops multicast, a left group) its next renewal, due
//! at once, says so, and the publisher serves it by unicast again. Duplicates during a switch
//! are dropped by the sequence tracker.

use std::net::SocketAddr;

use super::export::REPAIRS;
use super::{push_event, Endpoint, Event, Sink, Wire};
use crate::{BatchEncoder, Control, DropReason, Flags, Frame, GroupOffer, Nak};

/// Heartbeat periods within which a group datagram must arrive for the group to count as
/// received.
const GROUP_HEALTH_PERIODS: u32 = 3;

/// A reliable export with a group retransmits to the group after a random delay of up to
/// this (ns), so that the NAKs of every subscriber that lost the same messages arrive
/// meanwhile and are answered once, as PGM and Aeron do.
const REPAIR_DELAY_NS: u64 = 2_000_000;

/// For this long after a message was retransmitted to the group, a NAK for it is suppressed
/// (it is on its way); shorter than the subscribers' NAK interval (5 ms by default), so one
/// that still missed it is answered at its next round.
const REPAIR_HOLD_NS: u64 = 4_000_000;

/// What group retransmission did, counted since the endpoint was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupRepairCounts {
    /// Messages retransmitted to a group.
    pub sent: u64,
    /// NAKs not answered because all they asked for was being, or had just been,
    /// retransmitted to the group.
    pub suppressed: u64,
}

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

    /// After a `Subscribe` from `src` was acknowledged (its address proven, the subscriber
    /// admitted or renewed): records whether the subscriber receives the topic's group. One
    /// that does not is told the group by the `Group` frame in each heartbeat it gets
    /// ([`group_offer`](Self::group_offer)), never in answer to its `Subscribe`.
    pub(crate) fn on_subscribe_group(&mut self, topic_id: u64, src: SocketAddr, group: bool) {
        let has_group = self
            .exports
            .iter()
            .any(|e| e.spec.topic_id == topic_id && e.spec.group.is_some());
        if has_group {
            self.publisher
                .subscribers_mut()
                .set_via_group(src, topic_id, group);
        }
    }

    /// The `Group` frame that tells a subscriber of `topic_id` the topic's group, if its
    /// export has one: it rides in the unicast heartbeats to each subscriber that does not
    /// say it receives the group (protected as they are: its own token, or sealed). So a new
    /// subscriber learns the group within a heartbeat period, one that lost the frame at the
    /// next heartbeat, and one that knows the group and does not receive it (or asked for
    /// unicast) ignores the repeat; a flood of `Subscribe`s draws no more of them.
    pub(crate) fn group_offer(&self, topic_id: u64) -> Option<GroupOffer> {
        let export = self.exports.iter().find(|e| e.spec.topic_id == topic_id)?;
        Some(GroupOffer {
            topic_id,
            fingerprint: export.spec.fingerprint,
            session: self.session,
            group: export.spec.group?,
            token: export.group_token,
        })
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

    /// The data groups the live imports were told of: a driver keeps these joined and
    /// leaves any other (an import removed, or told another group by its publisher).
    pub fn import_groups(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.imports
            .iter()
            .filter(|im| !im.retired)
            .filter_map(|im| im.group)
    }

    /// What group retransmission did.
    pub fn group_repairs(&self) -> GroupRepairCounts {
        self.group_repair_counts
    }

    /// Whether the answer to `nak` from `src` goes to export `i`'s group: the export has one
    /// and `src` receives it.
    pub(crate) fn repairs_by_group(&self, i: usize, nak: &Nak, src: SocketAddr) -> bool {
        let has_group = self
            .exports
            .get(i)
            .is_some_and(|e| e.spec.group.is_some() && e.reliable.is_some());
        has_group
            && self
                .publisher
                .subscribers()
                .iter()
                .any(|s| s.addr == src && s.topic_id == nak.topic_id && s.via_group)
    }

    /// Whether every message `nak` asks for is pending on export `i`'s group, or was sent
    /// there within [`REPAIR_HOLD_NS`]: then the NAK is suppressed (counted).
    pub(crate) fn repair_pending(&mut self, i: usize, nak: &Nak, now_ns: u64) -> bool {
        let Some(export) = self.exports.get(i) else {
            return false;
        };
        // A range longer than a NAK's answer is never wholly pending.
        if nak.len() > REPAIRS as u64 {
            return false;
        }
        // One pass over the pending and recent repairs, marking the range's messages in a
        // bitmap: linear, so that a NAK repeated as fast as it can be sent costs little.
        let mut marked = [0u64; REPAIRS.div_ceil(64)];
        let recent = export
            .repaired
            .iter()
            .filter(|&&(_, at)| now_ns < at.saturating_add(REPAIR_HOLD_NS))
            .map(|&(s, _)| s);
        for seq in export.repairs.iter().map(|&(_, s)| s).chain(recent) {
            if let Some(bit) = seq.checked_sub(nak.first).filter(|_| seq <= nak.last) {
                if let Some(word) = marked.get_mut((bit / 64) as usize) {
                    *word |= 1 << (bit % 64);
                }
            }
        }
        let count: u64 = marked.iter().map(|w| u64::from(w.count_ones())).sum();
        let covered = count == nak.len();
        if covered {
            self.group_repair_counts.suppressed += 1;
        }
        covered
    }

    /// Queues the messages `self.retransmit` planned for export `i` for the group, after a
    /// random delay (those already queued are not queued twice).
    pub(crate) fn queue_group_repair(&mut self, i: usize, now_ns: u64) {
        let due = now_ns.saturating_add(self.entropy.next_u64() % (REPAIR_DELAY_NS + 1));
        let Some(export) = self.exports.get_mut(i) else {
            return;
        };
        for &seq in self.retransmit.seqs() {
            if export.repairs.len() == REPAIRS {
                break; // The rest is asked for again at the next NAK round.
            }
            if !export.repairs.iter().any(|&(_, s)| s == seq) {
                export.repairs.push((due, seq));
            }
        }
    }

    /// When the first queued group retransmission falls due (`u64::MAX`: none queued).
    pub(crate) fn group_repair_deadline(&self) -> u64 {
        self.exports
            .iter()
            .flat_map(|e| e.repairs.iter().map(|&(due, _)| due))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Sends the group retransmissions that are due, packed into as few datagrams as they fit
    /// in, to each export's group.
    pub(crate) fn poll_group_repairs(&mut self, now_ns: u64, wire: &mut dyn Wire) {
        let room = self.control_room();
        for i in 0..self.exports.len() {
            let Some(export) = self.exports.get_mut(i) else {
                continue;
            };
            if !export.repairs.iter().any(|&(due, _)| due <= now_ns) {
                continue;
            }
            let (Some(group), Some(history)) = (export.spec.group, export.reliable.as_ref()) else {
                export.repairs.clear();
                continue;
            };
            // In sequence order, so that a subscriber's reorder buffer drains as they come.
            export
                .repairs
                .sort_unstable_by_key(|&(due, seq)| (due > now_ns, seq));
            let dest = std::iter::once((group, export.group_token));
            let (egress, metrics) = (&mut self.egress, &self.metrics);
            let buf = &mut self.control_buf[..room];
            let mut len = 0usize;
            let mut sent = 0u64;
            let mut taken = 0usize;
            for &(due, seq) in &export.repairs {
                if due > now_ns {
                    break;
                }
                taken += 1;
                let Some(frame) = history.frame(seq) else {
                    continue;
                };
                if len + frame.len() > room {
                    let (d, b) = egress.send(
                        &mut *wire,
                        buf.get(..len).unwrap_or_default(),
                        true,
                        dest.clone(),
                    );
                    metrics.sent(d, b);
                    len = 0;
                }
                if let Some(dst) = buf.get_mut(len..len + frame.len()) {
                    dst.copy_from_slice(frame);
                    len += frame.len();
                    sent += 1;
                }
                if export.repaired.len() == REPAIRS {
                    export.repaired.pop_front();
                }
                export.repaired.push_back((seq, now_ns));
            }
            let (d, b) = egress.send(&mut *wire, buf.get(..len).unwrap_or_default(), true, dest);
            metrics.sent(d, b);
            export.repairs.drain(..taken);
            self.group_repair_counts.sent += sent;
        }
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
