//! An endpoint's figures. The bridge registers them as named metrics of its actor so they
//! appear in the bus's report (`Report::actor(name).metric("datagrams_in")`); elsewhere (the
//! simulator, a tool) they are plain counters.

use llbus::Metric;

use crate::{DropReason, IoStats, LossCounts, PublisherCounts, SubscriberCounts};

/// Every figure of one bridge. Written only by the bridge's thread (clones share the figures).
#[derive(Clone)]
pub(crate) struct NetMetrics {
    pub(crate) datagrams_in: Metric,
    pub(crate) datagrams_out: Metric,
    pub(crate) messages_in: Metric,
    pub(crate) messages_out: Metric,
    pub(crate) bytes_in: Metric,
    pub(crate) bytes_out: Metric,
    /// Messages a publisher sent that never arrived (sequence gaps), all imports together.
    pub(crate) lost: Metric,
    pub(crate) duplicates: Metric,
    pub(crate) reordered: Metric,
    pub(crate) late_dropped: Metric,
    pub(crate) stale: Metric,
    pub(crate) publisher_restarts: Metric,
    /// Data frames and heartbeats too far ahead to believe on one frame's word.
    pub(crate) unconfirmed: Metric,
    /// Messages refused because they cannot fit in a datagram.
    pub(crate) too_large: Metric,
    /// Exported messages taken while nobody subscribed to their topic.
    pub(crate) no_subscriber: Metric,
    /// Subscriptions a publisher refused (our imports) or we refused (our exports).
    pub(crate) refused: Metric,
    pub(crate) icmp_errors: Metric,
    /// Datagrams dropped at send: full buffer, refused by the kernel, unsendable destination.
    pub(crate) send_dropped: Metric,
    /// Of those, refused for their destination (an answer to a forged source, say).
    pub(crate) send_bad_destination: Metric,
    /// Handshake answers the network duplicated (counted, ignored; not invalid).
    pub(crate) control_duplicates: Metric,
    /// Handshake answers overtaken by the answer to a later request (counted, ignored).
    pub(crate) control_stale: Metric,
    /// Data and heartbeats of a publisher session no acknowledgement established: dropped.
    pub(crate) unknown_session: Metric,
    /// Resubscribes triggered by those.
    pub(crate) resubscribes: Metric,
    /// Cookie challenges sent (publisher side).
    pub(crate) challenges: Metric,
    /// 1 once one of the bridge's sockets failed for good (the error is in `BridgeStatus`).
    pub(crate) socket_failed: Metric,
    pub(crate) nak_sent: Metric,
    pub(crate) retransmitted: Metric,
    pub(crate) unrecovered: Metric,
    pub(crate) unavailable: Metric,
    /// Subscribers of reliable exports that missed anything beyond history (per subscriber:
    /// `BridgeStatus::missed`).
    pub(crate) missed_subscribers: Metric,
    /// What services across hosts did (`service.*`): see [`ServiceMetrics`].
    pub(crate) service: ServiceMetrics,
    drops: Vec<Metric>,
    /// Datagrams from an address family the socket does not understand.
    bad_address: Metric,
}

/// The figures of services across hosts: the caller's side, then the server's.
#[derive(Clone)]
pub(crate) struct ServiceMetrics {
    /// Calls of imported services accepted (each ends once: a reply, an error or a timeout).
    pub(crate) calls: Metric,
    /// Requests sent again (same call id) because no reply came within the backoff.
    pub(crate) resent: Metric,
    /// Calls ended by their deadline with no reply.
    pub(crate) timeouts: Metric,
    /// Replies for no call in flight (answered already, timed out, or never made): dropped.
    pub(crate) late: Metric,
    /// Requests of served services accepted from proven callers (duplicates aside).
    pub(crate) requests: Metric,
    /// Replies sent (first sends; resends are counted in `duplicates`).
    pub(crate) replies: Metric,
    /// Requests seen again: ignored while the call is in progress, else its reply resent.
    pub(crate) duplicates: Metric,
    /// Requests refused: from an unproven source (no subscription, wrong token or session),
    /// outside the allowlist, over the rate limit, with every served slot taken, or from a
    /// new caller session when every session remembered may still resend (those two answered
    /// `QueueFull`).
    pub(crate) refused: Metric,
    /// Replies (or resends) not sent because the caller's host had used its reply budget.
    pub(crate) over_budget: Metric,
    /// Answered calls forgotten before their deadline to make room (a resend of one is
    /// then served again as a new call).
    pub(crate) evicted: Metric,
}

impl NetMetrics {
    /// The figures, each made by `metric` from its name.
    pub(crate) fn register(mut metric: impl FnMut(&str) -> Metric) -> Self {
        NetMetrics {
            datagrams_in: metric("datagrams_in"),
            datagrams_out: metric("datagrams_out"),
            messages_in: metric("messages_in"),
            messages_out: metric("messages_out"),
            bytes_in: metric("bytes_in"),
            bytes_out: metric("bytes_out"),
            lost: metric("lost"),
            duplicates: metric("duplicates"),
            reordered: metric("reordered"),
            late_dropped: metric("late_dropped"),
            stale: metric("stale"),
            publisher_restarts: metric("publisher_restarts"),
            unconfirmed: metric("unconfirmed"),
            too_large: metric("too_large"),
            no_subscriber: metric("no_subscriber"),
            refused: metric("refused"),
            icmp_errors: metric("icmp_errors"),
            send_dropped: metric("send_dropped"),
            send_bad_destination: metric("send_bad_destination"),
            control_duplicates: metric("control_duplicates"),
            control_stale: metric("control_stale"),
            unknown_session: metric("unknown_session"),
            resubscribes: metric("resubscribes"),
            challenges: metric("challenges"),
            socket_failed: metric("socket_failed"),
            nak_sent: metric("nak_sent"),
            retransmitted: metric("retransmitted"),
            unrecovered: metric("unrecovered"),
            unavailable: metric("unavailable"),
            missed_subscribers: metric("missed_subscribers"),
            service: ServiceMetrics {
                calls: metric("service.calls"),
                resent: metric("service.resent"),
                timeouts: metric("service.timeouts"),
                late: metric("service.late"),
                requests: metric("service.requests"),
                replies: metric("service.replies"),
                duplicates: metric("service.duplicates"),
                refused: metric("service.refused"),
                over_budget: metric("service.over_budget"),
                evicted: metric("service.evicted"),
            },
            drops: DropReason::ALL
                .iter()
                .map(|r| metric(&format!("drop.{}", r.name())))
                .collect(),
            bad_address: metric("drop.bad_address"),
        }
    }

    /// Counts `datagrams` sent, `bytes` in all.
    #[inline]
    pub(crate) fn sent(&self, datagrams: usize, bytes: usize) {
        self.datagrams_out.add(datagrams as u64);
        self.bytes_out.add(bytes as u64);
    }

    /// Counts one dropped datagram or frame under its reason.
    #[inline]
    pub(crate) fn drop(&self, reason: DropReason) {
        if let Some(m) = self.drops.get(reason.index()) {
            m.add(1);
        }
    }

    /// How many were dropped for `reason`.
    #[cfg(test)]
    pub(crate) fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.index()).map_or(0, Metric::get)
    }

    /// Sets the count of a reason that one owner counts in total (`Incomplete`: the
    /// reassemblers).
    pub(crate) fn set_drop(&self, reason: DropReason, total: u64) {
        if let Some(m) = self.drops.get(reason.index()) {
            m.set(total);
        }
    }

    /// Counts the datagrams a receive dropped at the socket (larger than the maximum datagram
    /// size, or from an address family it does not understand), from its counters before and
    /// after the receive.
    #[inline]
    pub(crate) fn count_io_drops(&self, before: &IoStats, after: &IoStats) {
        let too_large = after.recv_too_large.saturating_sub(before.recv_too_large);
        if too_large > 0 {
            if let Some(m) = self.drops.get(DropReason::TooLarge.index()) {
                m.add(too_large);
            }
        }
        let bad_address = after
            .recv_bad_address
            .saturating_sub(before.recv_bad_address);
        if bad_address > 0 {
            self.bad_address.add(bad_address);
        }
    }

    /// Sets the loss figures from the sum of every import's tracker.
    pub(crate) fn set_loss(&self, total: &LossCounts) {
        self.lost.set(total.lost);
        self.duplicates.set(total.duplicates);
        self.reordered.set(total.reordered);
        self.late_dropped.set(total.late_dropped);
        self.stale.set(total.stale);
        self.publisher_restarts.set(total.session_changes);
        self.unconfirmed.set(total.unconfirmed);
    }

    /// Sets the socket figures from every endpoint's counters (sums saturate).
    pub(crate) fn set_io<'a>(&self, stats: impl Iterator<Item = &'a IoStats>) {
        let (mut icmp, mut dropped, mut bad_dest) = (0u64, 0u64, 0u64);
        for s in stats {
            icmp = sum(&[icmp, s.recv_icmp_errors, s.send_icmp_errors]);
            dropped = sum(&[
                dropped,
                s.send_would_block,
                s.send_refused,
                s.send_bad_destination,
                s.send_other_errors,
            ]);
            bad_dest = bad_dest.saturating_add(s.send_bad_destination);
        }
        self.icmp_errors.set(icmp);
        self.send_dropped.set(dropped);
        self.send_bad_destination.set(bad_dest);
    }

    /// Sets the session machines' figures from their counters.
    pub(crate) fn set_sessions<'a>(
        &self,
        publisher: &PublisherCounts,
        imports: impl Iterator<Item = &'a SubscriberCounts>,
    ) {
        let mut total = SubscriberCounts::default();
        for c in imports {
            total.add(c);
        }
        self.control_duplicates.set(total.control_duplicates);
        self.control_stale.set(total.control_stale);
        self.unknown_session.set(total.unknown_session);
        self.resubscribes.set(total.resubscribes);
        self.challenges.set(publisher.challenges);
    }
}

/// The saturating sum of `values`.
fn sum(values: &[u64]) -> u64 {
    values.iter().fold(0u64, |a, &v| a.saturating_add(v))
}

/// Adds `b` into `a`, field by field, saturating: two trackers' saturated `lost` counters sum
/// to `u64::MAX`, not an overflow.
pub(crate) fn add_loss(a: &mut LossCounts, b: &LossCounts) {
    a.received = a.received.saturating_add(b.received);
    a.delivered = a.delivered.saturating_add(b.delivered);
    a.lost = a.lost.saturating_add(b.lost);
    a.duplicates = a.duplicates.saturating_add(b.duplicates);
    a.reordered = a.reordered.saturating_add(b.reordered);
    a.late_dropped = a.late_dropped.saturating_add(b.late_dropped);
    a.stale = a.stale.saturating_add(b.stale);
    a.session_changes = a.session_changes.saturating_add(b.session_changes);
    a.unconfirmed = a.unconfirmed.saturating_add(b.unconfirmed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturated_loss_counters_sum_without_overflow() {
        let full = LossCounts {
            lost: u64::MAX,
            received: u64::MAX,
            ..LossCounts::default()
        };
        let mut total = LossCounts::default();
        add_loss(&mut total, &full);
        add_loss(&mut total, &full);
        assert_eq!(total.lost, u64::MAX);
        assert_eq!(total.received, u64::MAX);
        assert_eq!(sum(&[u64::MAX, 1, 2]), u64::MAX);
    }
}
