//! The limits and defaults SECURITY.md, docs/PROTOCOL.md and docs/IPC.md document are the ones
//! the code uses: each figure of their tables, asserted against the configuration's defaults
//! and the public constants, so a changed default fails here until the documents follow.

use std::net::IpAddr;
use std::time::Duration;

use llbus_net::{
    Allowlist, BridgeConfig, ReassemblyConfig, ReliableConfig, COOKIE_LEN, DEFAULT_COOKIE_WINDOW,
    DEFAULT_MAX_DATAGRAM, DEFAULT_MAX_DATAGRAM_V6, DEFAULT_MAX_MESSAGE, DEFAULT_RATE_LIMIT,
    DEFAULT_RATE_LIMIT_SOURCES, DEFAULT_SUBSCRIBERS_PER_HOST, DEFAULT_SUBSCRIBERS_PER_TOPIC,
    DEFAULT_SUBSCRIBER_TIMEOUT, MAC_TAG_LEN, MAX_BACKOFF_NS, MAX_DATAGRAM_LIMIT, MAX_JUMP,
    MAX_KEYS, OUTSTANDING, REPLAY_WINDOW, RESUBSCRIBE_GAP_NS, TOKEN_LEN,
};

const MIB: u64 = 1 << 20;

/// SECURITY.md "Limits and their defaults", row by row, and the bridge's configuration.
#[test]
fn the_documented_network_limits_are_the_defaults() {
    // Cookies: 30 s windows, 16 bytes.
    assert_eq!(DEFAULT_COOKIE_WINDOW, Duration::from_secs(30));
    assert_eq!(COOKIE_LEN, 16);
    // MAC: a 32-byte trailer, a 128-number replay window, up to 4 keys accepted at once.
    assert_eq!(MAC_TAG_LEN, 32);
    assert_eq!(REPLAY_WINDOW, 128);
    assert_eq!(MAX_KEYS, 4);
    // Handshake: answers must echo one of the last 8 nonces; one resubscribe per 20 ms on an
    // unknown session; transient refusals back off to at most 30 s.
    assert_eq!(OUTSTANDING, 8);
    assert_eq!(RESUBSCRIBE_GAP_NS, 20_000_000);
    assert_eq!(MAX_BACKOFF_NS, 30_000_000_000);
    // Control rate limit: 20 per second, bursts of 40, 4096 sources tracked.
    assert_eq!(
        (DEFAULT_RATE_LIMIT.per_second, DEFAULT_RATE_LIMIT.burst),
        (20, 40)
    );
    assert_eq!(DEFAULT_RATE_LIMIT_SOURCES, 4096);
    // Subscribers: 64 per topic, 4 per host per topic, 60 s without renewal.
    assert_eq!(DEFAULT_SUBSCRIBERS_PER_TOPIC, 64);
    assert_eq!(DEFAULT_SUBSCRIBERS_PER_HOST, 4);
    assert_eq!(DEFAULT_SUBSCRIBER_TIMEOUT, Duration::from_secs(60));
    // Tokens are 64 bits; no single frame is believed more than 65,536 numbers ahead.
    assert_eq!(TOKEN_LEN, 8);
    assert_eq!(MAX_JUMP, 65_536);
    // Datagrams: 1472 bytes over IPv4, 1452 over IPv6, never more than 65,507.
    assert_eq!(DEFAULT_MAX_DATAGRAM, 1472);
    assert_eq!(DEFAULT_MAX_DATAGRAM_V6, 1452);
    assert_eq!(MAX_DATAGRAM_LIMIT, 65_507);

    // The bridge's configuration uses exactly these.
    let c = BridgeConfig::default();
    assert_eq!(c.cookie_window, DEFAULT_COOKIE_WINDOW);
    assert_eq!(
        (c.rate_limit.per_second, c.rate_limit.burst),
        (DEFAULT_RATE_LIMIT.per_second, DEFAULT_RATE_LIMIT.burst)
    );
    assert_eq!(c.rate_limit_sources, DEFAULT_RATE_LIMIT_SOURCES);
    assert_eq!(c.subscribers_per_topic, DEFAULT_SUBSCRIBERS_PER_TOPIC);
    assert_eq!(c.subscribers_per_host, DEFAULT_SUBSCRIBERS_PER_HOST);
    assert_eq!(c.subscriber_timeout, DEFAULT_SUBSCRIBER_TIMEOUT);
    // No key by default: the MAC is off; when set, data is sealed by default.
    assert!(c.psk.is_none());
    assert!(c.mac_data);
    // Heartbeats every 100 ms (docs/PROTOCOL.md: a lost tail is found within one).
    assert_eq!(c.heartbeat_every, Duration::from_millis(100));

    // Reliable topics.
    let r = ReliableConfig::default();
    assert_eq!(r.history, 1024);
    assert_eq!(r.reorder, 1024);
    assert_eq!(r.nak_delay, Duration::from_millis(1));
    assert_eq!(r.nak_interval, Duration::from_millis(5));
    assert_eq!(r.max_nak_ranges, 16);
    assert_eq!(r.gap_deadline, Duration::from_millis(500));
    assert_eq!(r.retransmit_per_nak, 64);
    assert_eq!(r.retransmit_rate, (64 * MIB, 4 * MIB));
    assert_eq!(r.join_period, Duration::from_secs(1));
    assert_eq!(c.reliable.history, r.history);
    assert_eq!(c.reliable.retransmit_rate, r.retransmit_rate);

    // Large messages: 16 MiB, 4 in flight, 1 s.
    let m = ReassemblyConfig::default();
    assert_eq!(DEFAULT_MAX_MESSAGE as u64, 16 * MIB);
    assert_eq!(m.max_message, DEFAULT_MAX_MESSAGE);
    assert_eq!(m.in_flight, 4);
    assert_eq!(m.timeout, Duration::from_secs(1));
    assert_eq!(c.reassembly.max_message, m.max_message);
    assert_eq!(c.reassembly.in_flight, m.in_flight);
}

/// SECURITY.md: the subscriber allowlist is loopback only by default (`127.0.0.0/8`, `::1`);
/// everything else must be listed, and `Allowlist::any()` admits all.
#[test]
fn the_default_allowlist_is_loopback_only() {
    let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
    for allowlist in [Allowlist::default(), BridgeConfig::default().allow] {
        for inside in ["127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1"] {
            assert!(allowlist.contains(ip(inside)), "{inside} refused");
        }
        for outside in [
            "10.0.0.1",
            "192.168.1.1",
            "0.0.0.0",
            "128.0.0.1",
            "::",
            "::2",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!allowlist.contains(ip(outside)), "{outside} admitted");
        }
    }
    assert!(Allowlist::any().contains(ip("203.0.113.9")));
    assert!(Allowlist::any().contains(ip("2001:db8::1")));
}
