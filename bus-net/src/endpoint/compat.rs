//! Compatibility mode (ll-udp-pubsub v0.1): one socket per topic, no header, no session or
//! sequence. A compat export keeps a table of the sources that sent its 4-byte `Subscribe`
//! (from the allowlist, within the per-source rate limit, under the table's caps) and sends
//! each message to them as a `Packet<T>`; a compat import takes datagrams from its publisher
//! alone and sends `Subscribe` once a second. The format has no room for a MAC or a token.

use std::net::SocketAddr;

use serde::Serialize;

use super::egress::Wire;
use super::import::Sink;
use super::metrics::NetMetrics;
use crate::session::{canonical, is_answerable};
use crate::{
    encode_compat_packet, Allowlist, CompatControl, DropReason, PublisherSession, SubscriberTable,
};

/// A topic served in the ll-udp-pubsub v0.1 format on a socket of its own.
pub(crate) struct CompatExport {
    pub(crate) topic: &'static str,
    pub(crate) topic_id: u64,
    /// Its subscribers, all under topic id 0 (the socket has one topic).
    pub(crate) table: SubscriberTable<SocketAddr>,
    logged: bool,
}

/// A topic imported in the ll-udp-pubsub v0.1 format on a socket of its own.
pub(crate) struct CompatImport {
    pub(crate) publisher: SocketAddr,
}

impl CompatExport {
    pub(crate) fn new(
        topic: &'static str,
        topic_id: u64,
        table: SubscriberTable<SocketAddr>,
    ) -> Self {
        CompatExport {
            topic,
            topic_id,
            table,
            logged: false,
        }
    }

    /// A control datagram from `src`: `Subscribe` adds or renews it, `Unsubscribe` removes it.
    /// Only from answerable sources of `allow`, within `publisher`'s per-source rate limit.
    pub(crate) fn on_datagram(
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
    pub(crate) fn send<T: Serialize + ?Sized>(
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
    pub(crate) fn on_datagram(
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
    pub(crate) fn request(&self, control: CompatControl, wire: &mut dyn Wire) {
        wire.send(&control.encode(), &[(self.publisher, 0)], false);
    }
}
