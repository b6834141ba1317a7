//! A simulated network for discovery, driving the endpoints that ship: publishers that
//! announce on a multicast group (every endpoint on the network hears it, the sender too),
//! a subscriber that discovers their topic, and an off-path adversary that forges
//! announcements under any source address. Publishers join, restart (a new session at the
//! same address) and leave; the subscriber must follow each, fan in from several at once, and
//! never let a forged announcement redirect an import, feed it, or grow its tables or its
//! traffic past the caps.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use super::{DiscoverSpec, Endpoint, Event, ExportSpec, Sink, Wire};
use crate::{
    AnnounceHead, BatchEncoder, BridgeConfig, DataMeta, DiscoveryConfig, DropReason, ImportState,
    DEFAULT_MAX_DATAGRAM,
};

const TOPIC: u64 = 0x7171;
const FP: u64 = 0xf1f1;
const MS: u64 = 1_000_000;
const MAX: usize = DEFAULT_MAX_DATAGRAM;
const SUB_SESSION: u64 = 0x5b5b;

fn group() -> SocketAddr {
    SocketAddr::from(([239, 255, 76, 76], 7476))
}

fn addr(host: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, host], 7100))
}

fn sub_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 9], 7101))
}

fn discovery() -> DiscoveryConfig {
    DiscoveryConfig {
        group: Some(group()),
        announce_every: Duration::from_millis(200),
        try_timeout: Duration::from_millis(1500),
        ..DiscoveryConfig::default()
    }
}

#[derive(Default)]
struct Sent(Vec<(SocketAddr, Vec<u8>)>);

impl Wire for Sent {
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        for &(addr, suffix) in dests {
            let mut d = bytes.to_vec();
            if suffixed {
                d.extend_from_slice(&suffix.to_le_bytes());
            }
            self.0.push((addr, d));
        }
        dests.len()
    }
}

/// What an endpoint delivered: `(port, value)`.
#[derive(Default)]
struct Got(Vec<(usize, u64)>);

impl Sink for Got {
    fn deliver(&mut self, port: usize, payload: &[u8]) -> Result<(), DropReason> {
        let value: u64 = crate::decode_payload(payload).map_err(|_| DropReason::PayloadDecode)?;
        self.0.push((port, value));
        Ok(())
    }
}

struct Node {
    /// Multicast data groups it joined (`Event::JoinGroup`).
    joined: Vec<SocketAddr>,
    /// Its network drops multicast data (the discovery group aside).
    deaf: bool,
    addr: SocketAddr,
    ep: Endpoint,
    got: Got,
    /// Publishers: the value of their messages is `id << 32 | n`.
    id: u64,
    published: u64,
    alive: bool,
}

fn node(addr: SocketAddr, ep: Endpoint, id: u64) -> Node {
    Node {
        joined: Vec::new(),
        deaf: false,
        addr,
        ep,
        got: Got::default(),
        id,
        published: 0,
        alive: true,
    }
}

fn publisher(host: u8, session: u64) -> Node {
    publisher_with(host, session, &BridgeConfig::default(), &discovery())
}

/// The endpoint of a publisher of the topic (to `group` too, if any).
fn exporter(
    host: u8,
    session: u64,
    config: &BridgeConfig,
    group: Option<SocketAddr>,
    reliable: bool,
) -> Endpoint {
    Endpoint::new(
        config,
        MAX,
        session,
        [host; 32],
        vec![ExportSpec {
            topic: "sim.quote",
            topic_id: TOPIC,
            fingerprint: FP,
            allow: None,
            reliable,
            late_join: 0,
            group,
            shape: None,
        }],
        Vec::new(),
    )
}

fn publisher_with(host: u8, session: u64, config: &BridgeConfig, d: &DiscoveryConfig) -> Node {
    let ep = exporter(host, session, config, None, false).with_discovery(d, addr(host), Vec::new());
    node(addr(host), ep, session)
}

fn subscriber() -> Node {
    subscriber_with(&BridgeConfig::default(), &discovery())
}

fn subscriber_with(config: &BridgeConfig, d: &DiscoveryConfig) -> Node {
    let ep = Endpoint::new(config, MAX, SUB_SESSION, [7; 32], Vec::new(), Vec::new())
        .with_discovery(
            d,
            sub_addr(),
            vec![DiscoverSpec {
                topic: "sim.quote",
                topic_id: TOPIC,
                fingerprint: FP,
                reliable: false,
                port: 0,
            }],
        );
    node(sub_addr(), ep, 0)
}

struct Net {
    now: u64,
    nodes: Vec<Node>,
    flight: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Datagrams the subscriber sent to an address where no endpoint lives.
    to_nowhere: u64,
    /// Datagrams node 1 (a publisher) sent to a data group.
    to_group: u64,
    /// Loss of data-group datagrams (permille): at the sender (every member loses it) and
    /// on each member's link.
    uplink_loss: u64,
    link_loss: u64,
    /// Data messages members lost that way, in all.
    lost_seen: u64,
    /// `Group` frames to this address are dropped until this time (ns).
    drop_group_frames: Option<(SocketAddr, u64)>,
    /// Every datagram delivered to this address, as an eavesdropper on its path records it.
    capture: Option<SocketAddr>,
    captured: Vec<(SocketAddr, Vec<u8>)>,
    rng: fastrand::Rng,
    events: Vec<Event>,
}

impl Net {
    fn new(nodes: Vec<Node>) -> Net {
        Net {
            now: 0,
            nodes,
            flight: VecDeque::new(),
            to_nowhere: 0,
            to_group: 0,
            uplink_loss: 0,
            link_loss: 0,
            lost_seen: 0,
            drop_group_frames: None,
            capture: None,
            captured: Vec::new(),
            rng: fastrand::Rng::with_seed(5),
            events: Vec::new(),
        }
    }

    /// Puts what `src` sent in flight.
    fn send(&mut self, src: SocketAddr, sent: Sent) {
        for (dst, bytes) in sent.0 {
            self.flight.push_back((src, dst, bytes));
        }
    }

    /// One millisecond: timers, a message from each live publisher every 10 ms, and every
    /// datagram delivered (the answers too, within the millisecond).
    fn step(&mut self) {
        self.now += MS;
        let now = self.now;
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            if !node.alive {
                continue;
            }
            let mut sent = Sent::default();
            node.ep.on_timer(now, &mut sent, &mut node.got);
            if node.id != 0 && now % (10 * MS) == 0 {
                node.published += 1;
                let value = node.id << 32 | node.published;
                if let Some(mut batch) = node.ep.export(0, &mut sent) {
                    batch.push(&value);
                }
            }
            Self::events(i, node, &mut self.events);
            let src = node.addr;
            self.send(src, sent);
        }
        let mut hops = 0;
        while let Some((src, dst, bytes)) = self.flight.pop_front() {
            hops += 1;
            assert!(hops < 100_000, "a datagram storm");
            if let Some((to, until)) = self.drop_group_frames {
                let is_group_frame = crate::parse_datagram(&bytes, MAX)
                    .is_ok_and(|mut f| f.any(|f| f.header.kind == crate::Kind::Group));
                if dst == to && now < until && is_group_frame {
                    continue;
                }
            }
            if self.capture == Some(dst) {
                self.captured.push((src, bytes.clone()));
            }
            let data_group = dst.ip().is_multicast() && dst != group();
            if data_group && src == self.nodes.get(1).map_or(src, |n| n.addr) {
                self.to_group += 1;
            }
            let mut targets: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| {
                    let n = &self.nodes[i];
                    n.alive
                        && (dst == group()
                            || n.addr == dst
                            || (data_group && !n.deaf && n.joined.contains(&dst)))
                })
                .collect();
            if data_group && (self.uplink_loss > 0 || self.link_loss > 0) {
                let messages = crate::parse_datagram(&bytes, MAX)
                    .map(|f| f.filter(|f| f.header.kind.is_data()).count() as u64)
                    .unwrap_or(0);
                if self.rng.u64(..1000) < self.uplink_loss {
                    self.lost_seen += messages * targets.len() as u64;
                    targets.clear();
                }
                let (rng, loss) = (&mut self.rng, self.link_loss);
                let before = targets.len() as u64;
                targets.retain(|_| rng.u64(..1000) >= loss);
                self.lost_seen += messages * (before - targets.len() as u64);
            }
            if targets.is_empty() && src == sub_addr() {
                self.to_nowhere += 1;
            }
            for i in targets {
                let node = &mut self.nodes[i];
                let mut sent = Sent::default();
                if data_group {
                    node.ep
                        .handle_multicast(&bytes, src, now, &mut sent, &mut node.got);
                } else {
                    node.ep.handle(&bytes, src, now, &mut sent, &mut node.got);
                }
                Self::events(i, node, &mut self.events);
                let from = node.addr;
                self.send(from, sent);
            }
        }
    }

    /// Takes node `i`'s events: joins the groups it is told of, keeps the subscriber's.
    fn events(i: usize, node: &mut Node, events: &mut Vec<Event>) {
        while let Some(event) = node.ep.poll_event() {
            if let Event::JoinGroup { group, .. } = event {
                if !node.joined.contains(&group) {
                    node.joined.push(group);
                }
            }
            if i == 0 {
                events.push(event);
            }
        }
    }

    fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }

    /// Values the subscriber received from publisher session `id` since index `from`.
    fn from(&self, id: u64, from: usize) -> usize {
        self.nodes[0].got.0[from..]
            .iter()
            .filter(|(port, v)| *port == 0 && v >> 32 == id)
            .count()
    }

    fn discovered(&self) -> Vec<(SocketAddr, u64)> {
        let mut d: Vec<_> = self.nodes[0]
            .ep
            .discovered()
            .map(|(_, a, s, _)| (a, s))
            .collect();
        d.sort();
        d
    }
}

#[test]
fn fans_in_from_two_publishers_found_by_announcement() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1), publisher(2, 0xa2)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1), (addr(2), 0xa2)]);
    let mark = net.nodes[0].got.0.len();
    net.run(500);
    // Both feed the one port, each tracked by its own import and session.
    assert!(net.from(0xa1, mark) >= 45, "{}", net.from(0xa1, mark));
    assert!(net.from(0xa2, mark) >= 45, "{}", net.from(0xa2, mark));
    let found = net
        .events
        .iter()
        .filter(|e| matches!(e, Event::Discovered { .. }))
        .count();
    assert_eq!(found, 2);
    for (_, _, _, import) in net.nodes[0].ep.discovered() {
        assert!(matches!(
            net.nodes[0].ep.import_state(import),
            Some(ImportState::Established { .. })
        ));
    }
    let counts = net.nodes[0].ep.discovery_counts().unwrap();
    assert!(counts.announcements_in > 0 && counts.ignored == 0);
}

#[test]
fn follows_a_publisher_that_restarts_and_forgets_one_that_leaves() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1), publisher(2, 0xa2)]);
    net.run(1000);
    assert_eq!(net.discovered().len(), 2);
    // Publisher 1 restarts: a new session at the same address.
    net.nodes[1] = publisher(1, 0xb1);
    // Publisher 2 leaves.
    net.nodes[2].alive = false;
    net.run(3000);
    assert_eq!(net.discovered(), [(addr(1), 0xb1)]);
    let mark = net.nodes[0].got.0.len();
    net.run(500);
    assert!(
        net.from(0xb1, mark) >= 45,
        "the restarted publisher is followed"
    );
    assert_eq!(net.from(0xa2, mark), 0);
    assert!(net.events.iter().any(|e| matches!(
        e,
        Event::Lost { publisher, .. } if *publisher == addr(2)
    )));
    assert_eq!(net.nodes[0].ep.discovery_counts().unwrap().lost, 1);
    // It comes back: found again.
    net.nodes[2] = publisher(2, 0xc2);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xb1), (addr(2), 0xc2)]);
}

/// An announcement as the adversary forges it, under session `session`, pointing at
/// `data`.
fn forged_announce(session: u64, data: SocketAddr) -> Vec<u8> {
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
    let topics = [(TOPIC, FP, false, "sim.quote")];
    enc.push_announce(&head, 0, 1, topics.iter().copied(), &mut scratch)
        .unwrap();
    enc.as_bytes().to_vec()
}

#[test]
fn forged_announcements_cannot_redirect_feed_or_flood() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    let mut rng = fastrand::Rng::with_seed(24);
    let config = discovery();
    let imports_before = net.nodes[0].ep.import_slots();
    // A flood: every millisecond, ten announcements from forged sources (other hosts,
    // random ports and sessions), one claiming the real publisher's address under a new
    // session, and one pointing at a host other than its source.
    for _ in 0..3000 {
        for _ in 0..10 {
            let src = SocketAddr::from(([127, 0, 0, rng.u8(10..250)], rng.u16(1..)));
            let bytes = forged_announce(rng.u64(..), SocketAddr::from(([0, 0, 0, 0], src.port())));
            net.flight.push_back((src, sub_addr(), bytes));
        }
        net.flight
            .push_back((addr(1), sub_addr(), forged_announce(0xbad, addr(1))));
        let elsewhere = forged_announce(0xbad, SocketAddr::from(([127, 0, 0, 1], 9)));
        net.flight.push_back((
            SocketAddr::from(([127, 0, 0, 66], 5)),
            sub_addr(),
            elsewhere,
        ));
        // And data from a forged publisher it may be trying, with a guessed token.
        let mut buf = vec![0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        let meta = DataMeta {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 0xbad,
            seq: 1,
            timestamp_ns: 0,
        };
        enc.push_data(meta, &(0xbadu64 << 32)).unwrap();
        let mut data = enc.as_bytes().to_vec();
        data.extend_from_slice(&rng.u64(..).to_le_bytes());
        let tried: Vec<SocketAddr> = net.discovered().iter().map(|d| d.0).collect();
        if let Some(&src) = tried.get(rng.usize(..tried.len())) {
            net.flight.push_back((src, sub_addr(), data));
        }
        net.step();
        // Bounded at every moment: the real publisher plus at most `max_tries` tries.
        let followed = net.discovered();
        assert!(followed.len() <= 1 + config.max_tries, "{followed:?}");
        assert!(net.nodes[0].ep.import_slots() <= imports_before + config.max_tries);
    }
    // Never redirected: the real publisher is still followed at its address, and fed.
    assert!(net.discovered().iter().any(|d| d.0 == addr(1)));
    let mark = net.nodes[0].got.0.len();
    net.run(200);
    assert!(net.from(0xa1, mark) >= 15);
    // Nothing forged was ever delivered.
    assert!(net.nodes[0].got.0.iter().all(|(_, v)| v >> 32 == 0xa1));
    // Tries are few and each costs a bounded number of requests: 3 s of flood with at most
    // 4 tries in flight, each given up after 1.5 s, is at most 8 tries (and the real
    // publisher); a try sends a request per renewal, or per resubscribe gap (20 ms) while
    // forged data claims to come from it, and one unsubscribe when given up.
    let counts = net.nodes[0].ep.discovery_counts().unwrap();
    assert!(counts.ignored > 25_000, "{counts:?}");
    assert!(counts.found <= 1 + 4 * 2, "{counts:?}");
    let per_try = 1500 / 20 + 3;
    assert!(
        net.to_nowhere <= (counts.found - 1) * per_try,
        "{} requests to forged addresses, {counts:?}",
        net.to_nowhere
    );
    // Once the flood stops, the tries are given up.
    net.run(2000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
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
        let mut sent = Sent::default();
        node.ep
            .handle(bytes, asker, now, &mut sent, &mut Got::default());
        sent.0
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
        topic,
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
        let mut sent = Sent::default();
        ep.handle(enc.as_bytes(), asker, now, &mut sent, &mut Got::default());
        assert_eq!(sent.0.len(), 1, "one answer for topic {topic_id:#x}");
        let (to, bytes) = &sent.0[0];
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
fn with_a_key_announcements_are_sealed_and_forged_ones_dropped() {
    let config = BridgeConfig {
        psk: Some([5; 32]),
        ..BridgeConfig::default()
    };
    let mut net = Net::new(vec![
        subscriber_with(&config, &discovery()),
        publisher_with(1, 0xa1, &config, &discovery()),
    ]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    let mark = net.nodes[0].got.0.len();
    // Unsealed announcements, however plausible, are dropped before they are read.
    for host in 10..60 {
        let src = SocketAddr::from(([127, 0, 0, host], 7100));
        net.flight
            .push_back((src, sub_addr(), forged_announce(u64::from(host), src)));
    }
    net.run(500);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    assert!(net.from(0xa1, mark) >= 45);
    let counts = net.nodes[0].ep.discovery_counts().unwrap();
    assert_eq!((counts.found, counts.ignored), (1, 0), "{counts:?}");
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
    let mark = net.nodes[0].got.0.len();
    net.run(200);
    assert!(net.from(0xa1, mark) >= 15);
}

#[test]
fn replayed_announcements_cannot_keep_a_publisher_that_left_followed() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    net.nodes[1].alive = false;
    // The publisher is gone, but its announcements are replayed (without a key, a replay is
    // the same bytes under the same source) every 100 ms.
    let replayed = forged_announce(0xa1, addr(1));
    let mut given_up_at = None;
    for ms in 0..6000u64 {
        if ms % 100 == 0 {
            net.flight
                .push_back((addr(1), sub_addr(), replayed.clone()));
        }
        net.step();
        let counts = net.nodes[0].ep.discovery_counts().unwrap();
        if counts.given_up > 0 && given_up_at.is_none() {
            given_up_at = Some(ms);
        }
    }
    // Given up once the try timeout (1.5 s) passed without an answer, and tried again at
    // most once per timeout after: requests to the dead address stay few.
    let given_up_at = given_up_at.expect("never given up");
    assert!(given_up_at <= 1500 + 1200, "{given_up_at}");
    let counts = net.nodes[0].ep.discovery_counts().unwrap();
    assert!(counts.given_up <= 3, "{counts:?}");
    assert!(
        net.to_nowhere <= 60,
        "{} requests to the dead address",
        net.to_nowhere
    );
}

fn data_group() -> SocketAddr {
    SocketAddr::from(([239, 1, 2, 3], 7600))
}

/// A publisher exporting the topic to `data_group()` too (no discovery).
fn multicast_publisher(host: u8, session: u64) -> Node {
    let ep = exporter(
        host,
        session,
        &BridgeConfig::default(),
        Some(data_group()),
        false,
    );
    node(addr(host), ep, session)
}

/// A subscriber at 127.0.0.`host`:7101 importing the topic from the publisher at `addr(1)`.
fn importer(host: u8) -> Node {
    importer_with(host, false)
}

fn importer_with(host: u8, reliable: bool) -> Node {
    importer_configured(host, reliable, &BridgeConfig::default())
}

fn importer_configured(host: u8, reliable: bool, config: &BridgeConfig) -> Node {
    let ep = Endpoint::new(
        config,
        MAX,
        0x500 + u64::from(host),
        [host; 32],
        Vec::new(),
        vec![super::ImportSpec {
            topic: "sim.quote",
            topic_id: TOPIC,
            fingerprint: FP,
            publisher: addr(1),
            reliable,
        }],
    );
    node(SocketAddr::from(([127, 0, 0, host], 7101)), ep, 0)
}

/// Node `i`'s messages from publisher `id` since index `from` of what it got.
fn got_from(net: &Net, i: usize, id: u64, from: usize) -> usize {
    net.nodes[i].got.0[from..]
        .iter()
        .filter(|(_, v)| v >> 32 == id)
        .count()
}

fn marks(net: &Net) -> Vec<usize> {
    net.nodes.iter().map(|n| n.got.0.len()).collect()
}

#[test]
fn a_group_serves_its_members_with_one_datagram_and_the_deaf_by_unicast() {
    // Subscribers 0 and 2 receive the group; 3 is on a network that drops multicast.
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
        importer(11),
    ]);
    net.nodes[3].deaf = true;
    net.run(2000);
    for i in [0, 2, 3] {
        assert_eq!(net.nodes[i].joined, [data_group()], "node {i}");
    }
    let table = net.nodes[1].ep.publisher().subscribers();
    let via: Vec<bool> = table.iter().map(|s| s.via_group).collect();
    assert_eq!(via.iter().filter(|&&v| v).count(), 2, "{via:?}");
    let (mark, to_group, out) = (
        marks(&net),
        net.to_group,
        net.nodes[1].ep.metrics().datagrams_out.get(),
    );
    net.run(1000);
    // Every subscriber got every message of the second (100), the deaf one included.
    for i in [0, 2, 3] {
        let n = got_from(&net, i, 0xa1, mark[i]);
        assert!((99..=101).contains(&n), "node {i}: {n}");
    }
    // 100 data datagrams and 10 heartbeats to the group; by unicast, the deaf subscriber's
    // 100 and every subscriber's heartbeats, acknowledgements and group frames.
    let to_group = net.to_group - to_group;
    let unicast = net.nodes[1].ep.metrics().datagrams_out.get() - out - to_group;
    assert!((105..=115).contains(&to_group), "{to_group}");
    assert!(unicast <= 100 + 3 * 10 + 3 * 3, "{unicast}");
    // No duplicates: a member is not also sent the data by unicast.
    assert_eq!(net.nodes[0].ep.loss().duplicates, 0);
}

#[test]
fn a_member_whose_network_stops_multicast_falls_back_to_unicast() {
    let mut net = Net::new(vec![importer(9), multicast_publisher(1, 0xa1)]);
    net.run(2000);
    assert!(net.nodes[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
    net.nodes[0].deaf = true;
    net.run(1000);
    assert!(!net.nodes[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
    let mark = marks(&net);
    net.run(500);
    let n = got_from(&net, 0, 0xa1, mark[0]);
    assert!((49..=51).contains(&n), "{n}");
    // And back to the group once it works again.
    net.nodes[0].deaf = false;
    net.run(1000);
    assert!(net.nodes[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
}

#[test]
fn a_member_that_lost_the_group_frame_learns_the_group_at_the_next_heartbeat() {
    let mut net = Net::new(vec![importer(9), multicast_publisher(1, 0xa1)]);
    let member = net.nodes[0].addr;
    net.drop_group_frames = Some((member, 1500 * MS));
    net.run(1400);
    // Subscribed and served, by unicast: it was never told the group.
    assert!(net.nodes[0].joined.is_empty());
    let table = net.nodes[1].ep.publisher().subscribers();
    assert_eq!(table.iter().count(), 1);
    assert!(!table.any_via_group(TOPIC));
    // Every heartbeat to it (each 5 ms here) carries the frame: the first to get through
    // tells it the group, well before its next renewal (each second).
    net.run(300);
    assert_eq!(net.nodes[0].joined, [data_group()]);
    assert!(net.nodes[1]
        .ep
        .publisher()
        .subscribers()
        .any_via_group(TOPIC));
}

/// With a key, a Subscribe an eavesdropper captured and replays under its subscriber's address
/// (from the same source, with its valid cookie) is dropped as a replay: it moves no member off
/// the group (which would double its data) and no member that fell back onto it (which would
/// silence it). Without a key it is accepted (see `SECURITY.md`, "Forged multicast data").
#[test]
fn with_a_key_replayed_subscribes_cannot_move_a_subscriber_onto_or_off_the_group() {
    let config = BridgeConfig {
        psk: Some([5; 32]),
        ..BridgeConfig::default()
    };
    let publisher = exporter(1, 0xa1, &config, Some(data_group()), false);
    let mut net = Net::new(vec![
        importer_configured(9, false, &config),
        node(addr(1), publisher, 0xa1),
        importer_configured(10, false, &config),
    ]);
    net.capture = Some(addr(1));
    net.run(2000);
    let via = |net: &Net, i: usize| {
        let addr = net.nodes[i].addr;
        net.nodes[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .find(|s| s.addr == addr)
            .map(|s| s.via_group)
    };
    assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(true)));
    // What member 0 sent its publisher: Subscribes with its cookie (72 bytes of frame), with
    // and without flag GROUP (the header is authenticated, not hidden).
    let member = net.nodes[0].addr;
    let subscribes = |group: bool| {
        net.captured
            .iter()
            .rev()
            .filter(|(src, b)| *src == member && b.get(4) == Some(&0x10))
            .filter(|(_, b)| {
                b.get(5)
                    .is_some_and(|f| (f & crate::Flags::GROUP != 0) == group)
            })
            .map(|(_, b)| b.clone())
            .next()
    };
    let (unicast_claim, group_claim) = (subscribes(false), subscribes(true));
    let (Some(unicast_claim), Some(group_claim)) = (unicast_claim, group_claim) else {
        panic!("the premise: member 0 said both");
    };
    let replay = |net: &mut Net, bytes: &[u8], publisher: SocketAddr| {
        for ms in 0..1000 {
            if ms % 50 == 0 {
                net.flight.push_back((member, publisher, bytes.to_vec()));
            }
            net.step();
        }
    };
    // Replays of its handshake Subscribe (no GROUP) while it receives the group.
    let (mark, duplicates) = (marks(&net), net.nodes[0].ep.loss().duplicates);
    let to_group = net.to_group;
    replay(&mut net, &unicast_claim, addr(1));
    assert_eq!(via(&net, 0), Some(true));
    assert_eq!(net.nodes[0].ep.loss().duplicates, duplicates);
    assert!(net.to_group > to_group);
    let n = got_from(&net, 0, 0xa1, mark[0]);
    assert!((99..=101).contains(&n), "{n}");
    // Its network stops carrying the group: it falls back to unicast, and replays of a
    // Subscribe that claimed the group do not silence it.
    net.nodes[0].deaf = true;
    net.run(1000);
    assert_eq!(via(&net, 0), Some(false));
    let mark = marks(&net);
    replay(&mut net, &group_claim, addr(1));
    assert_eq!(via(&net, 0), Some(false));
    let n = got_from(&net, 0, 0xa1, mark[0]);
    assert!((99..=101).contains(&n), "{n}");
}

/// A `Subscribe` of the simulated topic as an off-path host forges it under `session`, without
/// the cookie that proves its source address, with flag GROUP when `group`.
fn forged_subscribe(session: u64, group: bool) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let subscribe = crate::Control::Subscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        nonce: 1,
        cookie: None,
    };
    enc.push_control(&subscribe).unwrap();
    let mut bytes = enc.as_bytes().to_vec();
    if group {
        bytes[5] |= crate::Flags::GROUP;
    }
    bytes
}

#[test]
fn forged_subscribes_cannot_move_a_subscriber_onto_or_off_the_group() {
    // Node 0 receives the group; node 2 is on a network that drops multicast.
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
    ]);
    net.nodes[2].deaf = true;
    net.run(2000);
    let via = |net: &Net, i: usize| {
        let addr = net.nodes[i].addr;
        net.nodes[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .find(|s| s.addr == addr)
            .map(|s| s.via_group)
    };
    assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(false)));
    let mark = marks(&net);
    let duplicates = net.nodes[0].ep.loss().duplicates;
    // For a second, five times a second (inside the sources' rate limit), an off-path host
    // claims under each subscriber's address the opposite of what it says: the deaf one
    // "receives the group" (its data would stop), the member "does not" (it would be sent
    // every message twice).
    for ms in 0..1000 {
        if ms % 200 == 0 {
            let (member, deaf) = (net.nodes[0].addr, net.nodes[2].addr);
            let publisher = net.nodes[1].addr;
            let claims = [
                (deaf, forged_subscribe(0x5ab, true)),
                (member, forged_subscribe(0x5ac, false)),
            ];
            for (src, bytes) in claims {
                net.flight.push_back((src, publisher, bytes));
            }
        }
        net.step();
        assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(false)));
    }
    for i in [0, 2] {
        let n = got_from(&net, i, 0xa1, mark[i]);
        assert!((99..=101).contains(&n), "node {i}: {n}");
    }
    assert_eq!(net.nodes[0].ep.loss().duplicates, duplicates);
}

#[test]
fn an_off_path_forger_cannot_feed_a_group_without_its_token() {
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
    ]);
    net.run(2000);
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..1000 {
        // Under the publisher's address and session (both public), a guessed group token.
        let mut buf = vec![0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        let meta = DataMeta {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 0xa1,
            seq: rng.u64(1..1 << 40),
            timestamp_ns: 0,
        };
        enc.push_data(meta, &(0xbadu64 << 32)).unwrap();
        let mut data = enc.as_bytes().to_vec();
        data.extend_from_slice(&rng.u64(..).to_le_bytes());
        net.flight.push_back((addr(1), data_group(), data));
        net.step();
    }
    for i in [0, 2] {
        assert!(
            net.nodes[i].got.0.iter().all(|(_, v)| v >> 32 == 0xa1),
            "node {i}"
        );
        assert_eq!(net.nodes[i].ep.loss().lost, 0, "node {i}");
    }
}

#[test]
fn a_reliable_group_repairs_each_loss_once_for_every_member_that_saw_it() {
    let publisher = {
        let ep = exporter(1, 0xa1, &BridgeConfig::default(), Some(data_group()), true);
        node(addr(1), ep, 0xa1)
    };
    let mut net = Net::new(vec![
        importer_with(9, true),
        publisher,
        importer_with(10, true),
        importer_with(11, true),
        importer_with(12, true),
    ]);
    net.run(1000);
    assert_eq!(
        net.nodes[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .filter(|s| s.via_group)
            .count(),
        4
    );
    // About 5% loss per member: half at the sender (all lose it), half on each link.
    (net.uplink_loss, net.link_loss) = (25, 25);
    // A driver that sleeps until `next_deadline` must wake for a queued group repair.
    let mut queued = 0;
    for _ in 0..5000 {
        net.step();
        let ep = &net.nodes[1].ep;
        let due = ep.group_repair_deadline();
        if due != u64::MAX {
            queued += 1;
            assert!(
                ep.next_deadline() <= due,
                "a repair due at {due} is not a deadline"
            );
        }
    }
    assert!(queued > 0, "no repair was ever queued");
    (net.uplink_loss, net.link_loss) = (0, 0);
    net.run(1000);
    let published = net.nodes[1].published;
    for i in [0, 2, 3, 4] {
        let values: Vec<u64> = net.nodes[i]
            .got
            .0
            .iter()
            .map(|(_, v)| v & 0xffff_ffff)
            .collect();
        let first = values[0];
        assert!(
            values.iter().copied().eq(first..=published),
            "node {i}: not every message in order ({} of {})",
            values.len(),
            published - first + 1
        );
    }
    assert!(!net
        .events
        .iter()
        .any(|e| matches!(e, Event::Unrecovered { .. })));
    let repairs = net.nodes[1].ep.group_repairs();
    println!(
        "losses seen {} by 4 members; retransmitted {} to the group, {} NAKs suppressed",
        net.lost_seen, repairs.sent, repairs.suppressed
    );
    assert!(net.lost_seen > 50, "{}", net.lost_seen);
    assert!(
        repairs.sent < net.lost_seen,
        "{repairs:?} for {}",
        net.lost_seen
    );
    assert!(repairs.suppressed > 0, "{repairs:?}");
}

/// A publisher of `names` (topic ids from 1), announcing on the group.
fn announcer(names: &[&'static str]) -> Endpoint {
    let exports = names
        .iter()
        .zip(1u64..)
        .map(|(&topic, id)| ExportSpec {
            topic,
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
    let mut sent = Sent::default();
    ep.on_timer(MS, &mut sent, &mut Got::default());
    let mut topics = Vec::new();
    for (_, bytes) in &sent.0 {
        for frame in crate::parse_datagram(bytes, MAX).unwrap() {
            let announce = crate::Announce::from_frame(&frame).unwrap();
            topics.extend(announce.topics().map(|t| t.topic_id));
        }
    }
    (sent.0.len(), topics)
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
