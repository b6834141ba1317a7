//! Discovery by pattern (`discover_matching`) under hostile announcements: names the pattern
//! matches with another fingerprint are counted and reported once per topic, within a bound,
//! and a flood of them hides neither the mismatch of a topic subscribed to locally nor counts
//! a name another pattern takes as mismatched.

use std::net::SocketAddr;

use super::super::fleet::{discovery, node, sub_addr, Net, FP};
use super::super::world::{ip, Got, Outbox, MAX, MS};
use crate::{
    AnnounceHead, BatchEncoder, BridgeConfig, DiscoverPattern, DiscoverSpec, Endpoint, Event,
};

/// The name a local subscription takes (a want made from the pattern).
const SUBSCRIBED: &str = "md.quote.nyse";

/// An announcement from session `session` of `topics` (`(name, fingerprint)`), its data at
/// `data`.
fn announce(session: u64, data: SocketAddr, topics: &[(String, u64)]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut scratch = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let head = AnnounceHead {
        session,
        seq: 1,
        timestamp_ns: 0,
        period_ms: 3_600_000,
        uptime_ms: 0,
        data,
        group: None,
    };
    let entries: Vec<(u64, u64, u8, &str)> = (topics.iter())
        .map(|(name, fp)| (llbus::topic_id(name), *fp, 0, name.as_str()))
        .collect();
    enc.push_announce(&head, 0, 1, entries.iter().copied(), &mut scratch)
        .expect("an announcement that fits");
    enc.as_bytes().to_vec()
}

/// A subscriber that discovers `SUBSCRIBED` and counts the other names `patterns` match.
fn pattern_subscriber(patterns: &[(&str, u64)]) -> Net {
    let wants = vec![DiscoverSpec {
        topic: SUBSCRIBED.into(),
        topic_id: llbus::topic_id(SUBSCRIBED),
        fingerprint: FP,
        reliable: false,
        port: 0,
    }];
    let patterns = (patterns.iter())
        .map(|(p, fingerprint)| DiscoverPattern {
            pattern: llbus::TopicPattern::new(p).expect("pattern"),
            fingerprint: *fingerprint,
        })
        .collect();
    let ep = Endpoint::new(&BridgeConfig::default(), MAX, 0x5b, [7; 32], vec![], vec![])
        .with_discovery(&discovery(), sub_addr(), wants)
        .with_discovery_patterns(patterns);
    Net::new(vec![node(sub_addr(), ep, 0)])
}

/// The topic ids of the `Mismatched` events the subscriber raised.
fn mismatched(net: &Net) -> Vec<u64> {
    (net.w.hosts[0].events.iter())
        .filter_map(|e| match e {
            Event::Mismatched { topic_id, .. } => Some(*topic_id),
            _ => None,
        })
        .collect()
}

#[test]
fn a_flood_of_mismatched_names_hides_no_mismatch_of_a_subscribed_topic() {
    let mut net = pattern_subscriber(&[("md.quote.*", FP)]);
    // 200 matching names of another type, from forged sources, ten to an announcement.
    for source in 0..20u8 {
        let names: Vec<(String, u64)> = (0..10)
            .map(|i| (format!("md.quote.f{source}x{i}"), 0xbad))
            .collect();
        let src = ip(100 + source, 7100);
        net.w.inject(
            src,
            sub_addr(),
            announce(u64::from(source) + 1, src, &names),
        );
        net.step();
    }
    // Then a real publisher of the subscribed topic, of another version of the type.
    let real = ip(1, 7100);
    net.w.inject(
        real,
        sub_addr(),
        announce(0xa1, real, &[(SUBSCRIBED.to_owned(), 0xdead)]),
    );
    net.step();
    let counts = net.w.hosts[0].ep.discovery_counts().expect("discovery");
    assert_eq!(counts.mismatched, 201, "{counts:?}");
    let reported = mismatched(&net);
    // Reports are bounded whatever the flood...
    assert!(reported.len() <= 65, "{} reports", reported.len());
    // ...and the subscribed topic's mismatch is among them.
    assert!(
        reported.contains(&llbus::topic_id(SUBSCRIBED)),
        "the flood hid the mismatch of the subscribed topic ({} reports)",
        reported.len()
    );
}

#[test]
fn a_name_another_pattern_of_its_fingerprint_matches_is_not_mismatched() {
    // Two patterns of two types; `md.trade.x` matches both, and has the second's fingerprint.
    let mut net = pattern_subscriber(&[("md.**", FP), ("md.trade.*", 0x7777)]);
    let src = ip(1, 7100);
    let names = [("md.trade.x".to_owned(), 0x7777)];
    net.w.inject(src, sub_addr(), announce(0xa1, src, &names));
    net.step();
    let counts = net.w.hosts[0].ep.discovery_counts().expect("discovery");
    assert_eq!(
        (counts.mismatched, counts.unsubscribed),
        (0, 1),
        "a name of the second pattern's type is called mismatched: {counts:?}"
    );
    assert!(mismatched(&net).is_empty());
}

#[test]
fn a_forged_name_whose_id_is_not_its_names_is_neither_counted_nor_reported() {
    let mut net = pattern_subscriber(&[("md.quote.*", FP)]);
    let mut buf = vec![0u8; MAX];
    let mut scratch = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let src = ip(1, 7100);
    let head = AnnounceHead {
        session: 0xa1,
        seq: 1,
        timestamp_ns: 0,
        period_ms: 3_600_000,
        uptime_ms: 0,
        data: src,
        group: None,
    };
    // A matching name under another name's id, and a name that breaks the rule.
    let topics = [
        (llbus::topic_id("x.y"), 0xbad, 0, "md.quote.forged"),
        (llbus::topic_id("md.quote.é"), 0xbad, 0, "md.quote.é"),
        (llbus::topic_id("md.quote..x"), FP, 0, "md.quote..x"),
    ];
    enc.push_announce(&head, 0, 1, topics.iter().copied(), &mut scratch)
        .expect("fits");
    net.w.inject(src, sub_addr(), enc.as_bytes().to_vec());
    net.step();
    let counts = net.w.hosts[0].ep.discovery_counts().expect("discovery");
    assert_eq!(
        (counts.mismatched, counts.unsubscribed, counts.found),
        (0, 0, 0),
        "{counts:?}"
    );
    assert!(mismatched(&net).is_empty());
}

/// A driver polls events after a batch of datagrams: within one batch, announcements full of
/// mismatched names must not push out what came before them (here, the publisher of the
/// subscribed topic found; a group to join or a refusal would be lost the same way).
#[test]
fn mismatched_names_never_push_out_the_drivers_other_events() {
    let ep = Endpoint::new(&BridgeConfig::default(), MAX, 0x5b, [7; 32], vec![], vec![])
        .with_discovery(
            &discovery(),
            sub_addr(),
            vec![DiscoverSpec {
                topic: SUBSCRIBED.into(),
                topic_id: llbus::topic_id(SUBSCRIBED),
                fingerprint: FP,
                reliable: false,
                port: 0,
            }],
        )
        .with_discovery_patterns(vec![DiscoverPattern {
            pattern: llbus::TopicPattern::new("md.quote.*").expect("pattern"),
            fingerprint: FP,
        }]);
    let mut ep = ep;
    let mut out = Outbox::new();
    let mut got = Got::default();
    let real = ip(1, 7100);
    let first = announce(0xa1, real, &[(SUBSCRIBED.to_owned(), FP)]);
    ep.handle(&first, real, MS, out.from(sub_addr()), &mut got);
    // Then, before the driver polls, 4 announcements of 30 mismatched names each.
    for source in 0..4u8 {
        let names: Vec<(String, u64)> = (0..30)
            .map(|i| (format!("md.quote.f{source}x{i}"), 0xbad))
            .collect();
        let src = ip(100 + source, 7100);
        let d = announce(u64::from(source) + 1, src, &names);
        ep.handle(&d, src, MS, out.from(sub_addr()), &mut got);
    }
    let events: Vec<Event> = std::iter::from_fn(|| ep.poll_event()).collect();
    assert!(
        events.iter().any(|e| matches!(e, Event::Discovered { .. })),
        "the publisher found was pushed out by {} events",
        events.len()
    );
    let counts = ep.discovery_counts().expect("discovery");
    assert_eq!(counts.mismatched, 120, "{counts:?}");
}
