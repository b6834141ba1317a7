//! The bridge's settings, each with a documented default.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::{
    Allowlist, LatePolicy, RateLimit, SocketConfig, DEFAULT_COOKIE_WINDOW, DEFAULT_MAX_DATAGRAM,
    DEFAULT_MAX_DATAGRAM_V6, DEFAULT_RATE_LIMIT, DEFAULT_RATE_LIMIT_SOURCES,
    DEFAULT_SUBSCRIBERS_PER_HOST, DEFAULT_SUBSCRIBERS_PER_TOPIC, DEFAULT_SUBSCRIBER_TIMEOUT,
    HANDSHAKE_PAYLOAD_LEN, HEADER_LEN, MAC_TAG_LEN, MAX_DATAGRAM_LIMIT,
};

/// Settings of a bridge; each has a documented default.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// The largest datagram sent or accepted. `None` (the default) chooses by the address
    /// family of the bridge's socket: 1472 bytes for IPv4 (a 1500-byte MTU less 20 bytes of IP
    /// and 8 of UDP header), 1452 for IPv6 and dual stack (40 bytes of IPv6 header). Over a
    /// tunnel set it from the tunnel's MTU ([`BridgeConfig::for_mtu`]: WireGuard's 1420 gives
    /// 1372). A message that cannot fit is sent as fragments of this size by an export (a
    /// direct sender refuses it and counts it `too_large`); nothing is ever cut.
    /// Received datagrams are accepted up to this size or 1472 bytes, whichever is larger, so a
    /// dual-stack bridge takes what an IPv4 peer with the IPv4 default sends it.
    pub max_datagram: Option<usize>,
    /// How long a subscriber lasts without renewing (default 60 s).
    pub subscriber_timeout: Duration,
    /// How many (subscriber, topic) entries one bridge serves at most (default 1024).
    pub subscriber_capacity: usize,
    /// How often imports renew their subscriptions (default 1 s).
    pub renew_every: Duration,
    /// How often exports send a heartbeat with their last sequence number (default 100 ms).
    pub heartbeat_every: Duration,
    /// What imports do with a message that arrives after a later one (default deliver).
    pub late: LatePolicy,
    /// Reliable topics (`Bridge::export_reliable`, `Bridge::import_reliable`): history,
    /// reorder buffer, NAK timing and retransmit budgets. `max_frame` is replaced by the
    /// bridge's datagram size.
    pub reliable: crate::ReliableConfig,
    /// Large messages: the maximum message size (default 16 MiB; an export refuses a larger
    /// one and counts it `too_large`, an import drops fragments that claim one), reassemblies
    /// in flight per import (default 4, the oldest evicted) and their timeout (default 1 s).
    /// A message that does not fit in one datagram is sent as fragments (`docs/PROTOCOL.md`,
    /// "Large messages"); an import holds at most `in_flight * max_message` bytes for them.
    pub reassembly: crate::ReassemblyConfig,
    /// Datagrams per `recvmmsg`/`sendmmsg` call (default 32).
    pub batch: usize,
    /// Socket buffer sizes.
    pub socket: SocketConfig,
    /// Which addresses may subscribe to this bridge's exports (native and compat). Default:
    /// loopback only; name your subscribers' networks (`"10.0.0.0/8".parse()?`) to serve them.
    pub allow: Allowlist,
    /// Control messages per second (and burst) accepted per source IP address (default 20/s,
    /// burst 40): every `Subscribe` and `Unsubscribe`, renewals included, so a host renewing
    /// more than 20 subscriptions to one bridge needs a higher limit.
    pub rate_limit: RateLimit,
    /// How many sources the rate limiter tracks at once (default 4096).
    pub rate_limit_sources: usize,
    /// Subscribers one topic serves at most (default 64).
    pub subscribers_per_topic: usize,
    /// Subscriber slots of one topic one host (IP address, whatever its ports) may hold
    /// (default 4): a host cannot take every slot of a topic. A subscriber refused for it is
    /// told why (a `HostFull` refusal, in its warning) and retries with backoff.
    pub subscribers_per_host: usize,
    /// How long an address-proving cookie stays valid: one to two windows (default 30 s).
    pub cookie_window: Duration,
    /// A pre-shared key: control datagrams carry a MAC and those without a valid one are
    /// dropped (`drop.bad_mac`), replayed ones too (`drop.replayed`). Off by default. Both
    /// sides need the same key.
    pub psk: Option<[u8; 32]>,
    /// The id of `psk` on the wire (default 0). To rotate keys without a gap: give every host
    /// the new key in `psk_accept`, then make it `psk` (with a new id) host by host, then drop
    /// the old one from `psk_accept`.
    pub psk_id: u8,
    /// Further keys accepted (not used to seal), by id: the old key during a rotation. At most
    /// three.
    pub psk_accept: Vec<(u8, [u8; 32])>,
    /// With a key: seal data datagrams too (default), or only control. With control only,
    /// data and heartbeats are authenticated by nothing (no MAC, and no subscription token:
    /// the key replaces it): a host on the path or holding the key can inject them.
    pub mac_data: bool,
    /// Discovery: announce the exports and find the publishers of `Bridge::discover`'s topics
    /// (`docs/PROTOCOL.md`, "Discovery"). Off (`None`) by default; `Bridge::announce` and
    /// `Bridge::discover` turn it on with [`DiscoveryConfig::default`].
    pub discovery: Option<DiscoveryConfig>,
    /// Multicast data: the TTL and interface of exports' group datagrams
    /// (`Bridge::export_multicast`), and whether imports receive groups at all.
    pub multicast: MulticastConfig,
    /// Services across hosts (`Bridge::export_service`, `Bridge::import_service`): the
    /// request rate and reply byte budget per caller host, and the tables of calls.
    pub services: ServiceConfig,
}

/// How a bridge serves and calls services across hosts (`docs/PROTOCOL.md`, "Services").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Requests per second (and burst) accepted per source IP address, duplicates included
    /// (default [`DEFAULT_REQUEST_LIMIT`]: 10,000/s, burst 1,000).
    pub request_limit: RateLimit,
    /// Reply bytes per second, and the burst, sent per caller host (IP address), resends
    /// included (default [`DEFAULT_REPLY_RATE`]: 4 MiB/s, burst 1 MiB). A reply over it is
    /// not sent: the call ends with an `OverBudget` error frame if that fits, else times out.
    pub reply_rate: (u64, u64),
    /// Calls served at once, in progress or answered and kept for a resend (default
    /// [`DEFAULT_SERVED_CALLS`]); one datagram of memory each, allocated at start.
    pub served_calls: usize,
    /// Answered calls kept per caller session (address and session) for its resends (default
    /// [`DEFAULT_CACHED_PER_SOURCE`], 64); the oldest goes first. A caller whose reply was
    /// lost and whose call was forgotten before its resend came gets no reply (the call is
    /// never run twice): it times out. So this should cover the calls one caller has
    /// answered within its resend backoff.
    pub cached_per_source: usize,
    /// Calls of imported services in flight at once (default [`DEFAULT_CALLS_IN_FLIGHT`]);
    /// one datagram of memory each, allocated at start.
    pub calls_in_flight: usize,
    /// How long a call of an imported service is resent for at most (default 5 s): its
    /// deadline across the network is its local caller's (`llbus::Request::deadline`) when
    /// that is sooner.
    pub call_timeout: Duration,
}

/// The default request limit per source IP: 10,000 requests per second, bursts of 1,000.
pub const DEFAULT_REQUEST_LIMIT: RateLimit = RateLimit {
    per_second: 10_000,
    burst: 1_000,
};

/// The default reply byte budget per caller host: 4 MiB per second, bursts of 1 MiB.
pub const DEFAULT_REPLY_RATE: (u64, u64) = (4 << 20, 1 << 20);

/// The default number of calls a bridge serves at once.
pub const DEFAULT_SERVED_CALLS: usize = 256;

/// The default number of answered calls kept per caller session.
pub const DEFAULT_CACHED_PER_SOURCE: usize = 64;

/// The default number of calls of imported services in flight at once.
pub const DEFAULT_CALLS_IN_FLIGHT: usize = 256;

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            request_limit: DEFAULT_REQUEST_LIMIT,
            reply_rate: DEFAULT_REPLY_RATE,
            served_calls: DEFAULT_SERVED_CALLS,
            cached_per_source: DEFAULT_CACHED_PER_SOURCE,
            calls_in_flight: DEFAULT_CALLS_IN_FLIGHT,
            call_timeout: Duration::from_secs(5),
        }
    }
}

/// How a bridge sends and receives multicast data (`docs/PROTOCOL.md`, "Multicast data").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MulticastConfig {
    /// The TTL (IPv6: hop limit) of group datagrams (default 1: the local network).
    pub ttl: u32,
    /// The interface groups are sent by and joined on, named by one of its IPv4 addresses
    /// (IPv6: the system's choice). Default: the bridge's bound address if it names one,
    /// else the system's choice.
    pub interface: Option<IpAddr>,
    /// Whether imports join the group a publisher tells them of (default yes). `false` asks
    /// every publisher for unicast: the subscriber never says it receives a group.
    pub receive: bool,
}

impl Default for MulticastConfig {
    fn default() -> Self {
        MulticastConfig {
            ttl: 1,
            interface: None,
            receive: true,
        }
    }
}

/// The default discovery group: administratively scoped IPv4 multicast (RFC 2365), a port
/// beside LCM's 7667 but not on it.
pub const DEFAULT_DISCOVERY_GROUP: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(239, 255, 76, 76), 7476));

/// Where and how often a bridge announces its exports, and how far it follows what others
/// announce. Each setting has a documented default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// The multicast group announcements go to and are heard on (default
    /// [`DEFAULT_DISCOVERY_GROUP`], `239.255.76.76:7476`; an IPv6 group such as
    /// `[ff15::7476]:7476` needs an IPv6 or dual-stack bridge). `None`: unicast peers only. The
    /// group's port is shared (`SO_REUSEADDR`/`SO_REUSEPORT`) by the bridges of one host.
    pub group: Option<SocketAddr>,
    /// Bridges announced to (and queried) by unicast, for networks multicast does not reach:
    /// their bound addresses (default none; at most `subscribers_per_topic`, checked at
    /// start).
    pub peers: Vec<SocketAddr>,
    /// How often the exports are announced (default 1 s). A publisher is forgotten after three
    /// of its own periods without an announcement.
    pub announce_every: Duration,
    /// The interface an IPv4 group is joined on and multicast leaves by, named by one of its
    /// addresses (IPv6 groups use the system's choice). Default: the bridge's bound address if
    /// it names one (`127.0.0.1`: loopback), else the system's choice.
    pub interface: Option<IpAddr>,
    /// The multicast TTL, or IPv6 hop limit (default 1: the local network).
    pub ttl: u32,
    /// Publishers of one discovered topic followed at once (default 8): more are counted
    /// (`discovery.ignored`) and not tried.
    pub max_publishers: usize,
    /// Subscriptions tried and not yet established at once, over every topic (default 4): a
    /// flood of announcements makes no more tries than this.
    pub max_tries: usize,
    /// How long a tried subscription may take to be established before it is given up and
    /// its publisher not tried again for as long (default 5 s).
    pub try_timeout: Duration,
    /// Queries answered per second (and burst) per source address (default 5/s, burst 10).
    pub query_limit: RateLimit,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            group: Some(DEFAULT_DISCOVERY_GROUP),
            peers: Vec::new(),
            announce_every: Duration::from_secs(1),
            interface: None,
            ttl: 1,
            max_publishers: 8,
            max_tries: 4,
            try_timeout: Duration::from_secs(5),
            query_limit: RateLimit {
                per_second: 5,
                burst: 10,
            },
        }
    }
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            max_datagram: None,
            subscriber_timeout: DEFAULT_SUBSCRIBER_TIMEOUT,
            subscriber_capacity: 1024,
            renew_every: Duration::from_secs(1),
            heartbeat_every: Duration::from_millis(100),
            late: LatePolicy::Deliver,
            reliable: crate::ReliableConfig::default(),
            reassembly: crate::ReassemblyConfig::default(),
            batch: 32,
            socket: SocketConfig::default(),
            allow: Allowlist::loopback(),
            rate_limit: DEFAULT_RATE_LIMIT,
            rate_limit_sources: DEFAULT_RATE_LIMIT_SOURCES,
            subscribers_per_topic: DEFAULT_SUBSCRIBERS_PER_TOPIC,
            subscribers_per_host: DEFAULT_SUBSCRIBERS_PER_HOST,
            cookie_window: DEFAULT_COOKIE_WINDOW,
            psk: None,
            psk_id: 0,
            psk_accept: Vec::new(),
            mac_data: true,
            discovery: None,
            multicast: MulticastConfig::default(),
            services: ServiceConfig::default(),
        }
    }
}

impl BridgeConfig {
    /// The defaults, with the largest datagram that fits a link (or tunnel) of MTU `mtu` in
    /// either address family: `mtu` less 48 bytes (IPv6 and UDP headers). WireGuard's 1420
    /// gives 1372; a 1500-byte Ethernet gives 1452.
    pub fn for_mtu(mtu: usize) -> Self {
        BridgeConfig {
            max_datagram: Some(mtu.saturating_sub(48)),
            ..BridgeConfig::default()
        }
    }

    /// The largest datagram of a bridge bound to `local`: the setting, or the default of the
    /// address family.
    pub fn max_datagram_for(&self, local: SocketAddr) -> usize {
        self.max_datagram.unwrap_or(if local.is_ipv4() {
            DEFAULT_MAX_DATAGRAM
        } else {
            DEFAULT_MAX_DATAGRAM_V6
        })
    }

    /// Checks the datagram size and maximum message settings.
    pub(crate) fn check(&self) -> std::io::Result<()> {
        // One control frame (and the MAC tag, with a key) must fit: the handshake needs it.
        let tag = if self.psk.is_some() { MAC_TAG_LEN } else { 0 };
        let lowest = HEADER_LEN + HANDSHAKE_PAYLOAD_LEN + tag;
        match self.max_datagram {
            Some(n) if !(lowest..=MAX_DATAGRAM_LIMIT).contains(&n) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "max_datagram {n} is out of range: use {lowest}..={MAX_DATAGRAM_LIMIT} bytes \
                     (1472 for a 1500-byte MTU over IPv4, 1452 over IPv6)"
                ),
            )),
            _ if self.reassembly.max_message > u32::MAX as usize => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "reassembly.max_message {} is out of range: at most {} bytes (the fragment \
                     header's total is a u32)",
                    self.reassembly.max_message,
                    u32::MAX
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_size_by_family_and_tunnel() {
        let c = BridgeConfig::default();
        assert_eq!(c.max_datagram_for("127.0.0.1:1".parse().unwrap()), 1472);
        assert_eq!(c.max_datagram_for("[::]:1".parse().unwrap()), 1452);
        let wg = BridgeConfig::for_mtu(1420);
        assert_eq!(wg.max_datagram_for("127.0.0.1:1".parse().unwrap()), 1372);
        assert!(wg.check().is_ok());
        assert!(BridgeConfig {
            max_datagram: Some(71),
            ..BridgeConfig::default()
        }
        .check()
        .is_err());
    }
}
