//! Discovery over the simulated network: publishers announce on a multicast group (every
//! host hears it, the sender too), a subscriber discovers their topic, and publishers join,
//! restart (a new session at the same address) and leave; the subscriber follows each and
//! fans in from several at once. Queries are answered alone, no larger and rate limited;
//! what an announcement cannot carry is counted. Forged and replayed announcements:
//! `forged`.

mod forged;
mod patterns;

use std::net::SocketAddr;

use super::fleet::{
    addr, data_group, discovery, publisher, publisher_with, sub_addr, subscriber, subscriber_with,
    Net, FP, TOPIC,
};
use super::world::{Got, Outbox, MAX, MS};
use crate::{
    BatchEncoder, BridgeConfig, DiscoveryConfig, Endpoint, Event, ExportSpec, ImportState,
};

#[test]
fn fans_in_from_two_publishers_found_by_announcement() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1), publisher(2, 0xa2)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1), (addr(2), 0xa2)]);
    let mark = net.mark(0);
    net.run(500);
    // Both feed the one port, each tracked by its own import and session.
    assert!(net.from(0xa1, mark) >= 45, "{}", net.from(0xa1, mark));
    assert!(net.from(0xa2, mark) >= 45, "{}", net.from(0xa2, mark));
    let found = net.w.hosts[0]
        .events
        .iter()
        .filter(|e| matches!(e, Event::Discovered { .. }))
        .count();
    assert_eq!(found, 2);
    for (_, _, _, import) in net.w.hosts[0].ep.discovered() {
        assert!(matches!(
            net.w.hosts[0].ep.import_state(import),
            Some(ImportState::Established { .. })
        ));
    }
    let counts = net.w.hosts[0].ep.discovery_counts().unwrap();
    assert!(counts.announcements_in > 0 && counts.ignored == 0);
}

#[test]
fn follows_a_publisher_that_restarts_and_forgets_one_that_leaves() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1), publisher(2, 0xa2)]);
    net.run(1000);
    assert_eq!(net.discovered().len(), 2);
    // Publisher 1 restarts: a new session at the same address.
    net.replace(1, publisher(1, 0xb1));
    // Publisher 2 leaves.
    net.w.hosts[2].up = false;
    net.run(3000);
    assert_eq!(net.discovered(), [(addr(1), 0xb1)]);
    let mark = net.mark(0);
    net.run(500);
    assert!(
        net.from(0xb1, mark) >= 45,
        "the restarted publisher is followed"
    );
    assert_eq!(net.from(0xa2, mark), 0);
    assert!(net.w.hosts[0].events.iter().any(|e| matches!(
        e,
        Event::Lost { publisher, .. } if *publisher == addr(2)
    )));
    assert_eq!(net.w.hosts[0].ep.discovery_counts().unwrap().lost, 1);
    // It comes back: found again.
    net.replace(2, publisher(2, 0xc2));
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xb1), (addr(2), 0xc2)]);
}

#[test]
fn a_query_is_answered_alone_no_larger_and_rate_limited() {
    let mut node = publisher(1, 0xa1);
    let asker = SocketAddr::from(([127, 0, 0, 5], 4000));
    let query = |topic_id: u64, padding: usize| {
        let mut buf = vec![0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_query(0x5e, topic_id, padding).unwrap();
        enc.as_bytes().to_vec()
    };
    let mut ask = |bytes: &[u8], now: u64| {
        let mut sent = Outbox::new();
        node.ep
            .handle(bytes, asker, now, &mut sent, &mut Got::default());
        sent.drain()
            .into_iter()
            .map(|(_, to, d)| (to, d))
            .collect::<Vec<_>>()
    };
    // Padded: one answer, to the asker alone, no larger than the query, naming the topic.
    let answer = ask(&query(TOPIC, crate::QUERY_LEN - 48), MS);
    assert_eq!(answer.len(), 1);
    let (to, bytes) = &answer[0];
    assert_eq!(*to, asker);
    assert!(bytes.len() <= crate::QUERY_LEN);
    let frame = crate::parse_datagram(bytes, MAX).unwrap().next().unwrap();
    let announce = crate::Announce::from_frame(&frame).unwrap();
    assert_eq!(announce.topics().next().map(|t| t.topic_id), Some(TOPIC));
    // Unpadded: the answer would be larger, so there is none.
    assert!(ask(&query(TOPIC, 0), 2 * MS).is_empty());
    // A topic not exported: silence.
    assert!(ask(&query(0x999, crate::QUERY_LEN - 48), 3 * MS).is_empty());
    // A burst from one source: answered up to the limit's burst, then dropped.
    let config = discovery();
    let answered: usize = (0..100)
        .map(|_| ask(&query(0, crate::QUERY_LEN - 48), 4 * MS).len())
        .sum();
    assert!(answered <= config.query_limit.burst as usize, "{answered}");
    assert!(answered > 0);
}

/// A publisher whose topics go to different places (one by unicast only, one to a group)
/// answers a query with one part naming one of them: a query for every topic gets the
/// unicast topic (named with no group), one for the group's topic gets that topic with its
/// group; never a topic under another topic's group.
#[test]
fn a_query_answer_names_one_group_and_carries_only_its_topics() {
    const OTHER: u64 = 0x7272;
    let spec = |topic: &'static str, topic_id: u64, group: Option<SocketAddr>| ExportSpec {
        topic: topic.into(),
        topic_id,
        fingerprint: FP,
        allow: None,
        reliable: false,
        late_join: 0,
        group,
        shape: None,
    };
    let mut ep = Endpoint::new(
        &BridgeConfig::default(),
        MAX,
        0xa1,
        [1; 32],
        vec![
            spec("sim.quote", TOPIC, None),
            spec("sim.trade", OTHER, Some(data_group())),
        ],
        Vec::new(),
    )
    .with_discovery(&discovery(), addr(1), Vec::new());
    let asker = SocketAddr::from(([127, 0, 0, 5], 4000));
    let mut ask = |topic_id: u64, now: u64| {
        let mut buf = vec![0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_query(0x5e, topic_id, crate::QUERY_LEN - 48)
            .unwrap();
        let mut sent = Outbox::new();
        ep.handle(enc.as_bytes(), asker, now, &mut sent, &mut Got::default());
        assert_eq!(sent.len(), 1, "one answer for topic {topic_id:#x}");
        let (_, to, bytes) = &sent.sent()[0];
        assert_eq!(*to, asker);
        let frame = crate::parse_datagram(bytes, MAX).unwrap().next().unwrap();
        let announce = crate::Announce::from_frame(&frame).unwrap();
        let topics: Vec<u64> = announce.topics().map(|t| t.topic_id).collect();
        (announce.group, topics)
    };
    assert_eq!(ask(0, MS), (None, vec![TOPIC]));
    assert_eq!(ask(OTHER, 200 * MS), (Some(data_group()), vec![OTHER]));
    assert_eq!(ask(TOPIC, 400 * MS), (None, vec![TOPIC]));
}

#[test]
fn unicast_peers_find_each_other_without_a_group() {
    let peers_only = DiscoveryConfig {
        group: None,
        peers: vec![sub_addr()],
        ..discovery()
    };
    let mut net = Net::new(vec![
        subscriber_with(
            &BridgeConfig::default(),
            &DiscoveryConfig {
                group: None,
                ..discovery()
            },
        ),
        publisher_with(1, 0xa1, &BridgeConfig::default(), &peers_only),
    ]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    let mark = net.mark(0);
    net.run(200);
    assert!(net.from(0xa1, mark) >= 15);
}

/// A publisher of `names` (topic ids from 1), announcing on the group.
fn announcer(names: &[&'static str]) -> Endpoint {
    let exports = names
        .iter()
        .zip(1u64..)
        .map(|(&topic, id)| ExportSpec {
            topic: topic.into(),
            topic_id: id,
            fingerprint: FP,
            allow: None,
            reliable: false,
            late_join: 0,
            group: None,
            shape: None,
        })
        .collect();
    Endpoint::new(
        &BridgeConfig::default(),
        MAX,
        0xa1,
        [1; 32],
        exports,
        Vec::new(),
    )
    .with_discovery(&discovery(), addr(1), Vec::new())
}

/// The topics announced in what `ep` sends at its first timer.
fn announced(ep: &mut Endpoint) -> (usize, Vec<u64>) {
    let mut sent = Outbox::new();
    ep.on_timer(MS, &mut sent, &mut Got::default());
    let mut topics = Vec::new();
    for (_, _, bytes) in sent.sent() {
        for frame in crate::parse_datagram(bytes, MAX).unwrap() {
            let announce = crate::Announce::from_frame(&frame).unwrap();
            topics.extend(announce.topics().map(|t| t.topic_id));
        }
    }
    (sent.len(), topics)
}

#[test]
fn what_an_announcement_cannot_carry_is_counted_not_hidden() {
    // A name longer than an announcement carries.
    let long: &'static str = Box::leak("n".repeat(crate::MAX_ANNOUNCED_NAME + 1).into_boxed_str());
    let mut ep = announcer(&["a.one", long, "a.two"]);
    let (_, topics) = announced(&mut ep);
    assert_eq!(topics, [1, 3]);
    assert_eq!(ep.discovery_counts().unwrap().unannounced, 1);
    // More exports than 255 parts hold: the first 255 parts go out, the rest are counted.
    let names: Vec<&'static str> = (0..2000)
        .map(|i| &*Box::leak(format!("{i:0>200}").into_boxed_str()))
        .collect();
    let mut ep = announcer(&names);
    let (datagrams, topics) = announced(&mut ep);
    assert_eq!(datagrams, 255);
    let want: Vec<u64> = (1..=topics.len() as u64).collect();
    assert_eq!(topics, want);
    let unannounced = ep.discovery_counts().unwrap().unannounced;
    assert!(unannounced > 0);
    assert_eq!(topics.len() as u64 + unannounced, 2000);
}
