//! The bridge's figures, registered as named metrics of its actor so they appear in the bus's
//! report (`Report::actor(name).metric("datagrams_in")`).

use llbus::{Metric, Setup};

use crate::{DropReason, IoStats, LossCounts};

/// Every figure of one bridge. Written only by the bridge's thread.
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
    /// Messages refused because they cannot fit in a datagram.
    pub(crate) too_large: Metric,
    /// Exported messages taken while nobody subscribed to their topic.
    pub(crate) no_subscriber: Metric,
    /// Subscriptions a publisher refused (our imports) or we refused (our exports).
    pub(crate) refused: Metric,
    pub(crate) icmp_errors: Metric,
    pub(crate) send_dropped: Metric,
    drops: Vec<Metric>,
    /// Datagrams from an address family the socket does not understand.
    bad_address: Metric,
}

impl NetMetrics {
    pub(crate) fn register(setup: &mut Setup<'_>) -> Self {
        NetMetrics {
            datagrams_in: setup.metric("datagrams_in"),
            datagrams_out: setup.metric("datagrams_out"),
            messages_in: setup.metric("messages_in"),
            messages_out: setup.metric("messages_out"),
            bytes_in: setup.metric("bytes_in"),
            bytes_out: setup.metric("bytes_out"),
            lost: setup.metric("lost"),
            duplicates: setup.metric("duplicates"),
            reordered: setup.metric("reordered"),
            late_dropped: setup.metric("late_dropped"),
            stale: setup.metric("stale"),
            publisher_restarts: setup.metric("publisher_restarts"),
            too_large: setup.metric("too_large"),
            no_subscriber: setup.metric("no_subscriber"),
            refused: setup.metric("refused"),
            icmp_errors: setup.metric("icmp_errors"),
            send_dropped: setup.metric("send_dropped"),
            drops: DropReason::ALL
                .iter()
                .map(|r| setup.metric(&format!("drop.{}", r.name())))
                .collect(),
            bad_address: setup.metric("drop.bad_address"),
        }
    }

    /// Counts one dropped datagram or frame under its reason.
    #[inline]
    pub(crate) fn drop(&self, reason: DropReason) {
        if let Some(m) = self.drops.get(reason.index()) {
            m.add(1);
        }
    }

    /// Counts the datagrams a receive dropped at the socket (larger than the maximum datagram
    /// size, or from an address family it does not understand), from its counters before and
    /// after the receive.
    #[inline]
    pub(crate) fn count_io_drops(&self, before: &IoStats, after: &IoStats) {
        let too_large = after.recv_too_large - before.recv_too_large;
        if too_large > 0 {
            if let Some(m) = self.drops.get(DropReason::TooLarge.index()) {
                m.add(too_large);
            }
        }
        let bad_address = after.recv_bad_address - before.recv_bad_address;
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
    }

    /// Sets the socket figures from every endpoint's counters.
    pub(crate) fn set_io<'a>(&self, stats: impl Iterator<Item = &'a IoStats>) {
        let (mut icmp, mut dropped) = (0, 0);
        for s in stats {
            icmp += s.recv_icmp_errors + s.send_icmp_errors;
            dropped += s.send_would_block + s.send_refused;
        }
        self.icmp_errors.set(icmp);
        self.send_dropped.set(dropped);
    }
}

/// Adds `b` into `a`, field by field.
pub(crate) fn add_loss(a: &mut LossCounts, b: &LossCounts) {
    a.received += b.received;
    a.delivered += b.delivered;
    a.lost += b.lost;
    a.duplicates += b.duplicates;
    a.reordered += b.reordered;
    a.late_dropped += b.late_dropped;
    a.stale += b.stale;
    a.session_changes += b.session_changes;
}
