//! Multicast data with unicast fallback (`docs/PROTOCOL.md`, "Multicast data"), in the manner
//! of LCM's and Aeron's multicast channels, with the subscription handshake kept.
//!
//! Publisher: an export with a group sends each datagram once to the group for every
//! subscriber that says it receives the group ([`Flags::GROUP`](crate::Flags::GROUP) on its
//! `Subscribe`), and by unicast to the others, as it would without a group. Subscribers still
//! subscribe and renew by unicast, so the publisher knows and counts them; each admitted or
//! renewed one is told the group and the group token in a `Group` frame in its unicast
//! heartbeats (with its own token) until it says it receives the group. Heartbeats go to every
//! subscriber and to the group.
//!
//! Subscriber: told a group, an import asks its driver to join it
//! ([`Event::JoinGroup`](super::Event::JoinGroup)) and accepts the group token beside its own.
//! It says it receives the group only while datagrams of its stream arrive by the group
//! (heartbeats at least: three heartbeat periods at most apart); when they stop (a network that
//! drops multicast, a left group) its next renewal, due at once, says so, and the publisher
//! serves it by unicast again. Duplicates during a switch are dropped by the sequence tracker.
//!
//! Group retransmission (a reliable export with a group): a NAK from a subscriber that
//! receives the group is answered on the group after a random delay of up to
//! [`REPAIR_DELAY_NS`], so that the NAKs of every subscriber that lost the same messages arrive
//! meanwhile and are answered once (PGM, Aeron); a NAK for messages all pending or sent there
//! within [`REPAIR_HOLD_NS`] is suppressed.
//!
//! This file holds the rules, as functions over one export ([`ExportState`]) or one import
//! ([`ImportSlot`]); the publisher side and the subscriber side call them with the state they
//! own.

use std::time::Duration;

use super::common::{Common, Entropy};
use super::export::{ExportState, REPAIRS};
use super::import::ImportSlot;
use super::Wire;
use crate::{GroupOffer, Nak};

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

/// The `Group` frame that tells a subscriber of `export`'s topic the topic's group, if the
/// export has one: it rides in the unicast heartbeats to each subscriber that does not say it
/// receives the group (protected as they are: its own token, or sealed). So a new subscriber
/// learns the group within a heartbeat period, one that lost the frame at the next heartbeat,
/// and one that knows the group and does not receive it (or asked for unicast) ignores the
/// repeat; a flood of `Subscribe`s draws no more of them.
pub(crate) fn group_offer(export: &ExportState, session: u64) -> Option<GroupOffer> {
    Some(GroupOffer {
        topic_id: export.spec.topic_id,
        fingerprint: export.spec.fingerprint,
        session,
        group: export.spec.group?,
        token: export.group_token,
    })
}

/// Whether `im` receives its group now (a datagram of its stream arrived by the group within
/// three heartbeat periods). When that changes, its next renewal is made due at once, to tell
/// the publisher.
pub(crate) fn group_health(im: &mut ImportSlot, now_ns: u64, heartbeat_every: Duration) -> bool {
    let every = heartbeat_every.saturating_mul(GROUP_HEALTH_PERIODS);
    let window = u64::try_from(every.as_nanos()).unwrap_or(u64::MAX);
    let healthy = im.group.is_some()
        && im.group_seen_ns > 0
        && now_ns < im.group_seen_ns.saturating_add(window);
    if healthy != im.via_group {
        im.via_group = healthy;
        im.session.renew_soon(now_ns);
    }
    healthy
}

/// Whether every message `nak` asks for is pending on `export`'s group, or was sent there
/// within [`REPAIR_HOLD_NS`]: then the NAK is suppressed (the caller counts it).
pub(crate) fn repair_pending(export: &ExportState, nak: &Nak, now_ns: u64) -> bool {
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
    count == nak.len()
}

/// Queues messages `seqs` of `export` for its group, after a random delay drawn from
/// `entropy` (those already queued are not queued twice).
pub(crate) fn queue_repair(
    export: &mut ExportState,
    seqs: &[u64],
    now_ns: u64,
    entropy: &mut Entropy,
) {
    let due = now_ns.saturating_add(entropy.next_u64() % (REPAIR_DELAY_NS + 1));
    for &seq in seqs {
        if export.repairs.len() == REPAIRS {
            break; // The rest is asked for again at the next NAK round.
        }
        if !export.repairs.iter().any(|&(_, s)| s == seq) {
            export.repairs.push((due, seq));
        }
    }
}

/// When `export`'s first queued group retransmission falls due (`u64::MAX`: none queued).
pub(crate) fn repair_deadline(export: &ExportState) -> u64 {
    export
        .repairs
        .iter()
        .map(|&(due, _)| due)
        .min()
        .unwrap_or(u64::MAX)
}

/// Sends `export`'s group retransmissions that are due, packed into as few datagrams as they
/// fit in, to its group. Returns how many messages were sent.
pub(crate) fn send_due_repairs(
    export: &mut ExportState,
    now_ns: u64,
    wire: &mut dyn Wire,
    common: &mut Common,
) -> u64 {
    if !export.repairs.iter().any(|&(due, _)| due <= now_ns) {
        return 0;
    }
    let (Some(group), Some(history)) = (export.spec.group, export.reliable.as_ref()) else {
        export.repairs.clear();
        return 0;
    };
    let room = common.control_room();
    // In sequence order, so that a subscriber's reorder buffer drains as they come.
    export
        .repairs
        .sort_unstable_by_key(|&(due, seq)| (due > now_ns, seq));
    let dest = std::iter::once((group, export.group_token));
    let (egress, metrics) = (&mut common.egress, &common.metrics);
    let buf = &mut common.control_buf[..room];
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
    sent
}
