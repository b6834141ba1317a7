//! Discovery between real bridges over loopback multicast: a subscriber that names a topic,
//! not a host, finds two publishers by their announcements on the group, fans in from both,
//! and forgets one that stops; forged announcements from raw sockets (root) redirect nothing
//! and feed nothing; and more discovery peers than the subscriber cap fail the start.
//! `forged` holds the attacks on discovery's other promises.

mod forged;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup};
use llbus_net::{
    AnnounceHead, BatchEncoder, Bridge, DataMeta, DiscoveryConfig, DEFAULT_MAX_DATAGRAM,
};
use serde::{Deserialize, Serialize};
use tests::spoof::RawSender;
use tests::{metric, wait_for};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.quote")]
pub(crate) struct Quote {
    pub(crate) source: u64,
    pub(crate) n: u64,
}

/// Publishes a quote of `source` every tick.
pub(crate) struct Feed {
    pub(crate) out: Out<Quote>,
    pub(crate) source: u64,
    pub(crate) n: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        ctx.publish(
            self.out,
            Quote {
                source: self.source,
                n: self.n,
            },
        );
    }
}

pub(crate) struct Seen {
    pub(crate) by_source: Arc<Mutex<[u64; 3]>>,
}

impl Actor for Seen {
    type In = Quote;
    fn on_message(&mut self, q: Quote, _ctx: &mut Context<'_>) {
        if let Some(count) = self.by_source.lock().unwrap().get_mut(q.source as usize) {
            *count += 1;
        }
    }
}

/// Test `test`'s group: its own address, and a port of this run's own (from the process id),
/// so that tests and runs in parallel on one machine do not hear each other.
pub(crate) fn group(test: u8) -> SocketAddr {
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    SocketAddr::from(([239, 255, 76, 80 + test], port))
}

pub(crate) fn discovery(test: u8) -> DiscoveryConfig {
    DiscoveryConfig {
        group: Some(group(test)),
        announce_every: Duration::from_millis(100),
        ..DiscoveryConfig::default()
    }
}

fn publisher(test: u8, source: u64) -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name(&format!("pub-{source}"))
        .discovery(discovery(test))
        .export::<Quote>();
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        source,
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    (bus.start().expect("publisher starts"), addr)
}

/// A bus whose bridge `sub` discovers [`Quote`] on test `test`'s group, its status, and the
/// quotes it took by source.
fn subscriber(test: u8) -> (RunningBus, llbus_net::BridgeStatus, Arc<Mutex<[u64; 3]>>) {
    let by_source = Arc::new(Mutex::new([0u64; 3]));
    let subscriber = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(discovery(test))
        .discover::<Quote>();
    let status = subscriber.status();
    let mut bus = Bus::builder();
    let seen = Arc::clone(&by_source);
    bus.actor("seen", move |_: &mut Setup<'_>| Seen {
        by_source: Arc::clone(&seen),
    })
    .subscribes::<Quote>();
    bus.add(subscriber);
    (bus.start().expect("subscriber starts"), status, by_source)
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_subscriber_discovers_two_publishers_and_forgets_one_that_stops() {
    let _cpu = crate::fixtures::cpu_shared();
    // Multicast on loopback needs no route but the loopback interface itself.
    if !tests::loopback_group_or_skip(group(0)) {
        return;
    }
    let (sub, status, by_source) = subscriber(0);

    let (one, addr_one) = publisher(0, 1);
    let (two, addr_two) = publisher(0, 2);
    wait_for("both publishers discovered and established", 20, || {
        let found = status.discovered();
        found.len() == 2 && found.iter().all(|d| d.established)
    });
    let mut found: Vec<SocketAddr> = status.discovered().iter().map(|d| d.publisher).collect();
    found.sort();
    let mut want = vec![addr_one, addr_two];
    want.sort();
    assert_eq!(found, want, "the announced data addresses");
    let counts = *by_source.lock().unwrap();
    wait_for("quotes from both publishers", 20, || {
        let now = *by_source.lock().unwrap();
        now[1] > counts[1] + 50 && now[2] > counts[2] + 50
    });

    // Publisher one stops (its bridge unsubscribes nothing: it exports): forgotten after
    // three of its periods without an announcement.
    one.stop();
    one.join().expect("publisher one stops cleanly");
    wait_for("publisher one forgotten", 20, || {
        status.discovered().iter().all(|d| d.publisher != addr_one)
    });
    assert!(status.discovered().iter().any(|d| d.publisher == addr_two));
    let before = *by_source.lock().unwrap();
    wait_for("publisher two still feeding", 20, || {
        by_source.lock().unwrap()[2] > before[2] + 50
    });
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    two.stop();
    two.join().expect("publisher two stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    println!("{report}");
    assert_eq!(metric(&report, "sub", "discovery.found"), 2);
    assert_eq!(metric(&report, "sub", "discovery.lost"), 1);
    assert!(metric(&report, "sub", "discovery.announcements_in") > 0);
    // Every quote counted came from a publisher the subscriber was told of.
    let seen = *by_source.lock().unwrap();
    assert_eq!(seen[0], 0);
}

/// An announcement as a forger makes it: `session`, data at port `port` of its source.
fn forged_announce(session: u64, port: u16) -> Vec<u8> {
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut scratch = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    let head = AnnounceHead {
        session,
        seq: 1,
        timestamp_ns: 0,
        period_ms: 3_600_000,
        uptime_ms: 0,
        data: SocketAddr::from(([0, 0, 0, 0], port)),
        group: None,
    };
    let topics = [(Quote::TOPIC_ID, Quote::FINGERPRINT, 0, Quote::TOPIC)];
    enc.push_announce(&head, 0, 1, topics.iter().copied(), &mut scratch)
        .unwrap();
    enc.as_bytes().to_vec()
}

/// Forged announcements from raw sockets, to a subscriber that follows a real publisher:
/// under the publisher's own address (pointing at another of its ports, and under other
/// sessions), and from hundreds of other hosts, with data forged from the addresses it may
/// try. Nothing is redirected, nothing forged is delivered, and the tries stay within the caps.
#[test]
#[cfg_attr(miri, ignore)]
fn forged_announcements_from_raw_sockets_redirect_nothing_requires_root() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(mut raw) = RawSender::for_test("forged_announcements_from_raw_sockets") else {
        return;
    };
    if !tests::loopback_group_or_skip(group(1)) {
        return;
    }
    let by_source = Arc::new(Mutex::new([0u64; 3]));
    let config = DiscoveryConfig {
        try_timeout: Duration::from_millis(400),
        ..discovery(1)
    };
    let subscriber = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(config.clone())
        .discover::<Quote>();
    let sub_addr = match subscriber.local_addr() {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!("bound to 127.0.0.1"),
    };
    let status = subscriber.status();
    let mut bus = Bus::builder();
    let seen = Arc::clone(&by_source);
    bus.actor("seen", move |_: &mut Setup<'_>| Seen {
        by_source: Arc::clone(&seen),
    })
    .subscribes::<Quote>();
    bus.add(subscriber);
    let sub = bus.start().expect("subscriber starts");
    let (one, addr_one) = publisher(1, 1);
    wait_for("the publisher discovered and established", 20, || {
        status.discovered().iter().any(|d| d.established)
    });
    let SocketAddr::V4(pub_v4) = addr_one else {
        unreachable!("bound to 127.0.0.1")
    };
    let nowhere = 1 + (pub_v4.port() % 1000);
    let mut rng = 0x2424_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Longer than two try timeouts: tries are given up and others made while it lasts.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        // Under the publisher's address: another session, pointing at a port of its host
        // where nothing listens.
        let redirect = forged_announce(next(), nowhere);
        raw.send(pub_v4, sub_addr, &redirect).unwrap();
        // From other hosts, each pointing at itself.
        let host = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2 + (next() % 250) as u8), 7000);
        raw.send(host, sub_addr, &forged_announce(next(), 7000))
            .unwrap();
        // Data from an address it may be trying, with a guessed token.
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        let meta = DataMeta {
            topic_id: Quote::TOPIC_ID,
            fingerprint: Quote::FINGERPRINT,
            session: next(),
            seq: 1,
            timestamp_ns: 0,
        };
        enc.push_data(meta, &Quote { source: 0, n: 0 }).unwrap();
        let mut data = enc.as_bytes().to_vec();
        data.extend_from_slice(&next().to_le_bytes());
        raw.send(host, sub_addr, &data).unwrap();
        let found = status.discovered();
        assert!(found.len() <= 1 + config.max_tries, "{found:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The real publisher is followed where it is, and still feeds the subscriber.
    let before = *by_source.lock().unwrap();
    wait_for("the publisher still feeding", 20, || {
        by_source.lock().unwrap()[1] > before[1] + 50
    });
    wait_for("the forged tries given up", 20, || {
        status
            .discovered()
            .iter()
            .map(|d| d.publisher)
            .collect::<Vec<_>>()
            == [addr_one]
    });
    one.stop();
    one.join().expect("the publisher stops cleanly");
    sub.stop();
    let report = sub.join().expect("the subscriber stops cleanly");
    assert_eq!(
        by_source.lock().unwrap()[0],
        0,
        "a forged quote was delivered"
    );
    assert!(metric(&report, "sub", "discovery.ignored") > 0);
    assert!(metric(&report, "sub", "discovery.given_up") > 0);
    assert!(status.errors().is_empty(), "{:?}", status.errors());
}

/// Every announcement goes to every unicast peer, so their list is bounded as a topic's
/// subscribers are: a longer one fails the start, naming the cap.
#[test]
#[cfg_attr(miri, ignore)]
fn more_discovery_peers_than_the_subscriber_cap_fail_the_start() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = llbus_net::BridgeConfig {
        subscribers_per_topic: 2,
        ..llbus_net::BridgeConfig::default()
    };
    let peers: Vec<SocketAddr> = (1..=3)
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
        .collect();
    let bridge = Bridge::bind_with("127.0.0.1:0", config)
        .unwrap()
        .name("peers")
        .discovery(DiscoveryConfig {
            group: None,
            peers,
            ..DiscoveryConfig::default()
        })
        .export::<Quote>();
    let mut bus = Bus::builder();
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        source: 1,
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    let error = match bus.start() {
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("a bridge with 3 discovery peers and a cap of 2 started");
        }
        Err(e) => e.to_string(),
    };
    assert!(error.contains("3 discovery peers: at most 2"), "{error}");
}

/// `disc.quote` of another type: its fingerprint is not [`Quote`]'s.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.quote")]
struct OtherQuote {
    px: f64,
}

/// Publishes an [`OtherQuote`] every tick.
struct OtherFeed {
    out: Out<OtherQuote>,
}

impl Actor for OtherFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, OtherQuote { px: 1.0 });
    }
}

/// A subscriber that discovers a topic whose only publisher announces another fingerprint
/// receives nothing, and says why once: a warning in the log and in
/// `BridgeStatus::warnings`, and an error in `BridgeStatus::errors`, naming the publisher and
/// its fingerprint, however many announcements follow.
#[test]
#[cfg_attr(miri, ignore)]
fn a_discovered_publisher_of_another_fingerprint_is_reported_once() {
    let _cpu = crate::fixtures::cpu_shared();
    if !tests::loopback_group_or_skip(group(40)) {
        return;
    }
    assert_eq!(OtherQuote::TOPIC_ID, Quote::TOPIC_ID);
    assert_ne!(OtherQuote::FINGERPRINT, Quote::FINGERPRINT);
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("other")
        .discovery(discovery(40))
        .export::<OtherQuote>();
    let pub_addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| OtherFeed { out: s.output() })
        .tick_every(Duration::from_millis(5))
        .publishes::<OtherQuote>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");

    let (sub, status, by_source) = subscriber(40);

    wait_for("the mismatch reported", 20, || !status.errors().is_empty());
    // Announcements come every 100 ms: ten more of them report nothing new.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1000) {
        std::thread::sleep(Duration::from_millis(100));
    }
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    let errors = status.errors();
    let warnings = status.warnings();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(warnings, errors, "the same words, once, in both");
    let e = &errors[0];
    for needle in [
        pub_addr.to_string(),
        format!("{:#018x}", OtherQuote::FINGERPRINT),
        "disc.quote".to_owned(),
        "not subscribed".to_owned(),
    ] {
        assert!(e.contains(&needle), "{e:?} does not name {needle}");
    }
    assert!(metric(&report, "sub", "discovery.mismatched") >= 1);
    assert_eq!(metric(&report, "sub", "discovery.found"), 0);
    assert_eq!(*by_source.lock().unwrap(), [0; 3]);
}
