//! The sans-IO session machines, in the manner of quinn-proto: plain structs whose methods take
//! `(frame, source, now)` and return what to send and what happened. No sockets, threads or
//! clocks: the bridge actor owns those and only moves bytes between them and these machines,
//! so every attack and fault can be replayed in a unit test.
//!
//! - [`publisher`]: the publisher side of the handshake: allowlist, per-source rate limit,
//!   address-proving cookies, the subscriber table; answers every `Subscribe` with one frame
//!   that echoes its nonce and is no longer than it.
//! - [`reassembly`]: fragmented messages put back together, with bounded memory (a maximum
//!   message size, a bound on reassemblies in flight, a timeout, reused buffers).
//! - [`reliable`]: reliable topics: the publisher's history and the retransmission budgets
//!   of its subscriber hosts, the subscriber's gap detection, NAKs, reorder buffer and
//!   in-order delivery.
//! - [`subscriber`]: the subscriber side of one import: fresh nonces, which answers are its
//!   own, which publisher session the import follows (changed only by an echoing
//!   `SubscribeAck`), renewal, backoff after a transient refusal, and the sequence tracker.
//!
//! The rules both follow (`docs/PROTOCOL.md`, "Handshake"): every `Subscribe` carries a fresh
//! random nonce; a `CookieChallenge`, `SubscribeAck` or `Refuse` that does not echo the nonce
//! of a request still outstanding is dropped and counted ([`DropReason::BadNonce`]); a
//! duplicate or late answer to a request that was answered already is counted under its own
//! name (duplicate or stale control), not as invalid. Without a pre-shared key, data and
//! heartbeats count only if their datagram ends with the subscription token of the
//! acknowledgement the import follows; others change nothing. Data or heartbeats of a session
//! no acknowledgement established never switch the import: they trigger a resubscribe
//! (counted).
//!
//! [`DropReason::BadNonce`]: crate::DropReason::BadNonce

pub(crate) mod publisher;
pub(crate) mod reassembly;
pub(crate) mod reliable;
pub(crate) mod subscriber;

use std::net::SocketAddr;

use crate::Control;

/// The frames a session machine wants sent in answer to one received datagram, all to its
/// source, in order. Preallocated once; [`Replies::clear`] keeps the allocation, so handling a
/// datagram allocates nothing.
///
/// The bridge encodes them into as few datagrams as they fit in: since every answer is exactly
/// as long as the request frame it answers, the replies to one datagram are never more bytes
/// (nor, packed, more datagrams) than the datagram itself.
#[derive(Debug)]
pub struct Replies {
    frames: Vec<Control>,
    /// Where they go (the source of the datagram being handled).
    to: Option<SocketAddr>,
}

impl Replies {
    /// Room for `capacity` frames (one datagram's worth: `max_datagram / HEADER_LEN`).
    pub fn with_capacity(capacity: usize) -> Self {
        Replies {
            frames: Vec::with_capacity(capacity.max(1)),
            to: None,
        }
    }

    /// Forgets the frames (keeps the allocation) and addresses the next ones to `to`.
    pub fn clear(&mut self, to: SocketAddr) {
        self.frames.clear();
        self.to = Some(to);
    }

    /// Queues `frame`; `false` (and nothing queued) when the capacity is reached, which cannot
    /// happen for answers to one datagram (at most one per frame received).
    pub fn push(&mut self, frame: Control) -> bool {
        if self.frames.len() == self.frames.capacity() {
            return false;
        }
        self.frames.push(frame);
        true
    }

    /// The frames queued, in order.
    pub fn frames(&self) -> &[Control] {
        &self.frames
    }

    /// Where they go.
    pub fn to(&self) -> Option<SocketAddr> {
        self.to
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// Whether a source address can be answered at all. Port 0, the unspecified address, multicast
/// and the IPv4 broadcast address are never the source of a genuine datagram (a reply to them
/// fails or floods a group): such a datagram is forged and is dropped before anything else
/// ([`DropReason::BadSource`](crate::DropReason::BadSource)). IPv4-mapped IPv6 addresses are
/// judged as the IPv4 address they map.
pub fn is_answerable(src: SocketAddr) -> bool {
    if src.port() == 0 {
        return false;
    }
    match src.ip().to_canonical() {
        std::net::IpAddr::V4(ip) => {
            !(ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast())
        }
        std::net::IpAddr::V6(ip) => !(ip.is_unspecified() || ip.is_multicast()),
    }
}

/// `addr` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a dual-stack socket reports
/// IPv4 peers) turned into the IPv4 address it maps, so that one host has one spelling in
/// every table and comparison.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unanswerable_sources() {
        for bad in [
            "0.0.0.0:0",
            "0.0.0.0:7000",
            "127.0.0.1:0",
            "224.0.0.1:7000",
            "255.255.255.255:7000",
            "[::]:7000",
            "[ff02::1]:7000",
            "[::ffff:255.255.255.255]:7000",
            "[::ffff:0.0.0.0]:9",
        ] {
            assert!(!is_answerable(bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "127.0.0.1:7000",
            "10.1.2.3:1",
            "[::1]:7000",
            "[::ffff:10.0.0.1]:5",
        ] {
            assert!(is_answerable(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn canonical_maps_v4_mapped() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:5".parse().unwrap();
        assert_eq!(
            canonical(mapped),
            "10.0.0.1:5".parse::<SocketAddr>().unwrap()
        );
        let v6: SocketAddr = "[::1]:5".parse().unwrap();
        assert_eq!(canonical(v6), v6);
    }

    #[test]
    fn replies_keep_their_allocation() {
        let mut r = Replies::with_capacity(2);
        let to: SocketAddr = "127.0.0.1:1".parse().unwrap();
        r.clear(to);
        let hb = Control::Heartbeat {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            last_seq: 4,
            timestamp_ns: 5,
        };
        assert!(r.push(hb) && r.push(hb));
        assert!(!r.push(hb));
        assert_eq!(r.frames().len(), 2);
        r.clear(to);
        assert!(r.is_empty());
        assert_eq!(r.to(), Some(to));
    }
}
