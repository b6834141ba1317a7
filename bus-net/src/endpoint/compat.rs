//! Compatibility mode (ll-udp-pubsub v0.1): one socket per topic, no header, no session or
//! sequence. A compat export keeps a table of the sources that sent its 4-byte `Subscribe`
//! (from the allowlist, within the per-source rate limit, under the table's caps) and sends
//! each message to them as a `Packet<T>`; a compat import takes datagrams from its publisher
//! alone and sends `Subscribe` once a second. The format has no room for a MAC or a token.
//!
//! [`Compat`] is an endpoint of its own beside the native one: its sockets are not the native
//! socket, its datagrams share nothing with native frames, and it keeps its own subscriber
//! tables. Inputs: a datagram on a compat export's or import's socket (with its source and the
//! time), a message to send, the renewal timer. Outputs: `Packet`s to a compat export's
//! subscribers, `Subscribe`/`Unsubscribe` to a compat import's publisher, datagrams delivered
//! to the [`Sink`]. It borrows from the native endpoint only the allowlist and the per-source
//! rate limit (one limit per source, whichever socket it uses) and the figures.

use std::net::SocketAddr;
use std::sync::Arc;

use serde::Serialize;

use super::egress::Wire;
use super::import::Sink;
use super::metrics::NetMetrics;
use crate::session::{canonical, is_answerable};
use crate::{
    encode_compat_packet, Allowlist, BridgeConfig, CompatControl, DropReason, PublisherSession,
    SubscriberTable,
};

/// Every compat export and import of an endpoint (see the module docs).
#[derive(Default)]
pub(crate) struct Compat {
    exports: Vec<CompatExport>,
    imports: Vec<CompatImport>,
    /// Destinations of a compat datagram (capacity: a topic's subscribers).
    dests: Vec<(SocketAddr, u64)>,
    /// One `Packet` being built (a datagram long, allocated with the first export).
    buf: Vec<u8>,
    /// When the imports' next `Subscribe` is due.
    next_renew: u64,
}

impl Compat {
    /// Serves `topic` in the compat format, with a subscriber table made as `config` says and
    /// packets of at most `max_datagram` bytes. Returns its index. Allocates.
    pub(crate) fn add_export(
        &mut self,
        topic: Arc<str>,
        topic_id: u64,
        config: &BridgeConfig,
        max_datagram: usize,
    ) -> usize {
        let table = SubscriberTable::new(config.subscriber_timeout, config.subscriber_capacity)
            .with_topic_cap(config.subscribers_per_topic)
            .with_host_cap(config.subscribers_per_host);
        if self.buf.len() < max_datagram {
            self.buf = vec![0; max_datagram];
        }
        let fan_out = config.subscribers_per_topic.max(1);
        if self.dests.capacity() < fan_out {
            self.dests = Vec::with_capacity(fan_out);
        }
        self.exports.push(CompatExport::new(topic, topic_id, table));
        self.exports.len() - 1
    }

    /// Imports from `publisher` in the compat format. Returns its index.
    pub(crate) fn add_import(&mut self, publisher: SocketAddr) -> usize {
        self.imports.push(CompatImport {
            publisher: canonical(publisher),
        });
        self.imports.len() - 1
    }

    /// A datagram on compat export `k`'s socket from `src`: a `Subscribe` or `Unsubscribe`
    /// (anything else is an error, the caller counts it).
    pub(crate) fn on_export_datagram(
        &mut self,
        k: usize,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
        allow: &Allowlist,
        publisher: &mut PublisherSession,
    ) -> Result<(), DropReason> {
        match self.exports.get_mut(k) {
            Some(export) => export.on_datagram(datagram, src, now_ns, allow, publisher),
            None => Ok(()),
        }
    }

    /// A datagram on compat import `k`'s socket from `src`: delivered to `sink` if it comes
    /// from the import's publisher.
    pub(crate) fn on_import_datagram(
        &self,
        k: usize,
        datagram: &[u8],
        src: SocketAddr,
        sink: &mut dyn Sink,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason> {
        match self.imports.get(k) {
            Some(import) => import.on_datagram(k, datagram, src, sink, metrics),
            None => Ok(()),
        }
    }

    /// Sends `msg` (stamped `wall_ns`) to compat export `k`'s subscribers through `wire`.
    pub(crate) fn send<T: Serialize + ?Sized>(
        &mut self,
        k: usize,
        msg: &T,
        wall_ns: i64,
        wire: &mut dyn Wire,
        metrics: &NetMetrics,
    ) {
        if let Some(export) = self.exports.get_mut(k) {
            export.send(msg, wall_ns, &mut self.buf, &mut self.dests, wire, metrics);
        }
    }

    /// Whether the imports' `Subscribe` is due at `now_ns` (then not again for `every_ns`).
    pub(crate) fn renew_due(&mut self, now_ns: u64, every_ns: u64) -> bool {
        if now_ns < self.next_renew {
            return false;
        }
        self.next_renew = now_ns.saturating_add(every_ns);
        true
    }

    /// Sends `control` from compat import `k` to its publisher through `wire`.
    pub(crate) fn request(&self, k: usize, control: CompatControl, wire: &mut dyn Wire) {
        if let Some(import) = self.imports.get(k) {
            import.request(control, wire);
        }
    }

    /// Forgets the subscribers that did not renew in time.
    pub(crate) fn expire(&mut self, now_ns: u64) {
        for export in &mut self.exports {
            export.table.expire(now_ns, |s| {
                log::info!("compat subscriber {} expired", s.addr);
            });
        }
    }
}

/// A topic served in the ll-udp-pubsub v0.1 format on a socket of its own.
struct CompatExport {
    topic: Arc<str>,
    topic_id: u64,
    /// Its subscribers, all under topic id 0 (the socket has one topic).
    table: SubscriberTable<SocketAddr>,
    logged: bool,
}

/// A topic imported in the ll-udp-pubsub v0.1 format on a socket of its own.
struct CompatImport {
    publisher: SocketAddr,
}

impl CompatExport {
    fn new(topic: Arc<str>, topic_id: u64, table: SubscriberTable<SocketAddr>) -> Self {
        CompatExport {
            topic,
            topic_id,
            table,
            logged: false,
        }
    }

    /// A control datagram from `src`: `Subscribe` adds or renews it, `Unsubscribe` removes it.
    /// Only from answerable sources of `allow`, within `publisher`'s per-source rate limit.
    fn on_datagram(
        &mut self,
        datagram: &[u8],
        src: SocketAddr,
        now_ns: u64,
        allow: &Allowlist,
        publisher: &mut PublisherSession,
    ) -> Result<(), DropReason> {
        let src = canonical(src);
        if !is_answerable(src) {
            return Err(DropReason::BadSource);
        }
        if !allow.contains(src.ip()) {
            return Err(DropReason::NotAllowed);
        }
        if !publisher.rate_ok(src, now_ns) {
            return Err(DropReason::RateLimited);
        }
        match CompatControl::decode(datagram)? {
            CompatControl::Subscribe => self.table.renew(src, 0, 0, 0, now_ns).map(|_| ()),
            CompatControl::Unsubscribe => {
                self.table.remove(src, 0);
                Ok(())
            }
        }
    }

    /// Sends `msg` as one `Packet` datagram (stamped `wall_ns`) to every subscriber, built in
    /// `buf` (one datagram long). A message nobody subscribes to is counted `no_subscriber`;
    /// one that does not fit is counted `too_large` (the first logged).
    fn send<T: Serialize + ?Sized>(
        &mut self,
        msg: &T,
        wall_ns: i64,
        buf: &mut [u8],
        dests: &mut Vec<(SocketAddr, u64)>,
        wire: &mut dyn Wire,
        metrics: &NetMetrics,
    ) {
        if self.table.is_empty() {
            metrics.no_subscriber.add(1);
            return;
        }
        match encode_compat_packet(buf, self.topic_id, msg, wall_ns) {
            Ok(n) => {
                metrics.messages_out.add(1);
                dests.clear();
                dests.extend(self.table.destinations(0));
                let bytes = buf.get(..n).unwrap_or_default();
                let taken = wire.send(bytes, dests, false);
                metrics.sent(taken, taken * n);
            }
            Err(e) => {
                metrics.too_large.add(1);
                if !self.logged {
                    self.logged = true;
                    log::error!("bridge refused a message of topic '{}': {e}", self.topic);
                }
            }
        }
    }
}

impl CompatImport {
    /// A datagram from `src`: delivered (as import `index`) if it comes from the publisher.
    fn on_datagram(
        &self,
        index: usize,
        datagram: &[u8],
        src: SocketAddr,
        sink: &mut dyn Sink,
        metrics: &NetMetrics,
    ) -> Result<(), DropReason> {
        if canonical(src) != self.publisher {
            return Err(DropReason::UnknownSender);
        }
        sink.deliver_compat(index, datagram)?;
        metrics.messages_in.add(1);
        Ok(())
    }

    /// Sends `control` (`Subscribe` or `Unsubscribe`) to the publisher.
    fn request(&self, control: CompatControl, wire: &mut dyn Wire) {
        wire.send(&control.encode(), &[(self.publisher, 0)], false);
    }
}
