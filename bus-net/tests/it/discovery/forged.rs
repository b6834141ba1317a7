//! Discovery's promises under attack: `docs/PROTOCOL.md` ("Discovery"), `SECURITY.md`
//! ("Forged announcements" and the caps table), the doc comments of
//! `bus-net/src/endpoint/discovery.rs` and `Bridge::discover`, attacked from an ordinary UDP
//! socket on loopback (forged announcements and queries, floods, amplification), beside the
//! promises they attack (restarts followed, IPv6 groups). On loopback every host is 127.0.0.1
//! (or another 127/8 address), so an attacker here needs no raw socket to send "from the
//! publisher's IP"; off loopback the same datagrams need a forged source address.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, RunningBus, Setup};
use llbus_net::{
    Allowlist, BatchEncoder, Bridge, Cidr, Control, DiscoveryConfig, SocketConfig, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM, HEADER_LEN,
};
use tests::bridges::discovery::{
    announce_quote, ask_group, discovery, drain, followed, group, publisher, socket, subscriber,
    Feed, Followed, Quote, LO, SUBSCRIBE,
};
use tests::{metric, wait_for};

/// PROTOCOL.md: "an announcement for an address already followed ... changes nothing but
/// the session shown"; SECURITY.md: a forged announcement cannot disturb a publisher "already
/// followed"; `Bridge::discover`: "one that stops announcing is dropped after three of its
/// periods". A forged announcement naming a followed publisher's address with a short period
/// must not make the subscriber drop that live publisher (a forged "leave").
#[test]
#[cfg_attr(miri, ignore)]
fn a_forged_short_period_announcement_cannot_drop_a_live_publisher() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(0) else { return };
    // The real publisher announces every 2 s: followed for 6 s without hearing it.
    let Followed {
        publisher,
        pub_addr,
        status,
        sub_addr,
        sub,
    } = followed(group, Duration::from_secs(2));
    // The forger, on the publisher's IP (any host with a forged source IP elsewhere): one
    // announcement of the publisher's data port, claiming a 100 ms period.
    let attacker = socket([127, 0, 0, 1]);
    attacker
        .send_to(&announce_quote(0x0bad, 100, pub_addr.port()), sub_addr)
        .unwrap();
    // A claimed 100 ms period would expire it 300 ms after the forgery; watched for 1 s.
    let until = Instant::now() + Duration::from_secs(1);
    let mut dropped_after = None;
    let start = Instant::now();
    while Instant::now() < until {
        if !status.discovered().iter().any(|d| d.publisher == pub_addr) {
            dropped_after.get_or_insert(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    println!(
        "dropped after {dropped_after:?}; discovery.lost {} found {}",
        metric(&report, "sub", "discovery.lost"),
        metric(&report, "sub", "discovery.found")
    );
    assert_eq!(
        dropped_after, None,
        "one forged announcement made the subscriber drop a live publisher it followed"
    );
    assert_eq!(metric(&report, "sub", "discovery.lost"), 0);
}

/// SECURITY.md: "a try not established in try_timeout (5 s) ... is unsubscribed and its
/// address left alone as long", and a replay can make the subscriber "try its address again
/// once per try_timeout". Forged announcements pointing at a third party (here a socket that
/// counts what it receives) with a short period must not make the subscriber try it more
/// often than that: with a try timeout of 1.5 s, within 1.2 s (less than the claimed
/// period's expiry, 300 ms, and one try timeout) one try at most, though the try expires
/// and is announced again twice.
#[test]
#[cfg_attr(miri, ignore)]
fn short_period_announcements_do_not_retry_a_third_party_before_the_try_timeout() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(1) else { return };
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(DiscoveryConfig {
            try_timeout: Duration::from_millis(1500),
            ..discovery(group, Duration::from_secs(1))
        })
        .discover::<Quote>();
    let sub_addr = bridge.local_addr();
    let sub = subscriber(bridge);
    let victim = socket([127, 0, 0, 1]);
    let victim_port = victim.local_addr().unwrap().port();
    let attacker = socket([127, 0, 0, 1]);
    let counter = std::thread::spawn(move || drain(&victim, Duration::from_millis(1400)));
    let until = Instant::now() + Duration::from_millis(1200);
    let mut session = 1u64;
    while Instant::now() < until {
        session += 1;
        attacker
            .send_to(&announce_quote(session, 100, victim_port), sub_addr)
            .unwrap();
        // Silent long enough for the claimed period to run out (three of them).
        std::thread::sleep(Duration::from_millis(450));
    }
    let received = counter.join().unwrap();
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    let subscribes = received.iter().filter(|r| r.1 == SUBSCRIBE).count();
    let tries = metric(&report, "sub", "discovery.found");
    println!(
        "the third party received {} datagrams ({subscribes} Subscribes); tries {tries}, lost {}, \
         given up {}",
        received.len(),
        metric(&report, "sub", "discovery.lost"),
        metric(&report, "sub", "discovery.given_up")
    );
    assert!(tries >= 1, "the premise: the forged announcement was tried");
    assert!(
        tries <= 1,
        "{tries} tries of one third-party address within one try timeout"
    );
}

/// SECURITY.md ("Reflection and amplification"): "an unproven source never gets more bytes
/// than it sent", "never more datagrams nor bytes than the request"; PROTOCOL.md: a query is
/// answered "in no more bytes than the query datagram". A datagram carrying a Subscribe and a
/// Query must not draw more bytes (nor datagrams) than it has.
#[test]
#[cfg_attr(miri, ignore)]
fn a_subscribe_and_a_query_in_one_datagram_draw_no_more_than_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(2) else { return };
    let (publisher, pub_addr) = publisher(discovery(group, Duration::from_secs(1)));
    let asker = socket([127, 0, 0, 1]);
    // The publisher's answer to a query for everything: one entry, ours.
    let answer_len = HEADER_LEN + 52 + 18 + Quote::TOPIC.len();
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_control(&Control::Subscribe {
        topic_id: Quote::TOPIC_ID,
        fingerprint: Quote::FINGERPRINT,
        session: 0x5eed,
        nonce: 0x1234,
        cookie: None,
    })
    .unwrap();
    // Padded so that the whole datagram is just large enough for the announcement and its
    // token trailer.
    let padding = answer_len + 8 - 72 - HEADER_LEN;
    enc.push_query(0x5eed, 0, padding).unwrap();
    let request = enc.as_bytes().to_vec();
    asker.send_to(&request, pub_addr).unwrap();
    let got = drain(&asker, Duration::from_millis(700));
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    let bytes: usize = got.iter().map(|g| g.0).sum();
    println!(
        "sent one datagram of {} bytes, got back {got:?} ({bytes} bytes)",
        request.len()
    );
    assert!(!got.is_empty(), "the premise: the publisher answered");
    assert!(got.len() <= 1, "{} datagrams for one", got.len());
    assert!(
        bytes <= request.len(),
        "{bytes} bytes back for {}",
        request.len()
    );
}

/// PROTOCOL.md/SECURITY.md: a query is answered to its source alone, with no more bytes than
/// the query, not at all when the answer would not fit, and at most 5/s per source (bursts of
/// 10).
#[test]
#[cfg_attr(miri, ignore)]
fn queries_are_answered_within_their_size_and_rate_limited() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(3) else { return };
    let (publisher, pub_addr) = publisher(discovery(group, Duration::from_secs(1)));
    let asker = socket([127, 0, 0, 1]);
    let query = |padding: usize| {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_query(0x5eed, 0, padding).unwrap();
        enc.as_bytes().to_vec()
    };
    // Too short for any answer: none.
    asker.send_to(&query(16), pub_addr).unwrap();
    let short = drain(&asker, Duration::from_millis(500));
    assert!(short.is_empty(), "a 64-byte query was answered: {short:?}");
    // A burst of 40 full queries: at most the burst (10), plus what refills meanwhile, each
    // answer no larger than its query.
    let full = query(512 - HEADER_LEN);
    for _ in 0..40 {
        asker.send_to(&full, pub_addr).unwrap();
    }
    let got = drain(&asker, Duration::from_millis(600));
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    println!("40 queries of {} bytes: {} answers", full.len(), got.len());
    assert!(!got.is_empty(), "the premise: queries are answered");
    assert!(got.len() <= 14, "{} answers to a burst of 40", got.len());
    assert!(got.iter().all(|g| g.0 <= full.len()), "{got:?}");
}

/// SECURITY.md/PROTOCOL.md: "its source must be in the allowlist (`not_allowed`)"; "Queries
/// are answered to their source only ... never to a source outside the allowlist". A host
/// outside the subscriber's allowlist (127.0.0.2 against 127.0.0.1/32) can neither make it
/// try a subscription nor draw an answer to a query.
#[test]
#[cfg_attr(miri, ignore)]
fn announcements_and_queries_from_outside_the_allowlist_do_nothing() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(4) else { return };
    let only_one: Cidr = "127.0.0.1/32".parse().unwrap();
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .allow(Allowlist::new([only_one]))
        .discovery(discovery(group, Duration::from_secs(1)))
        .discover::<Quote>()
        .export::<Quote>();
    let status = bridge.status();
    let sub_addr = bridge.local_addr();
    let sub = subscriber(bridge);
    let outsider = socket([127, 0, 0, 2]);
    let outsider_port = outsider.local_addr().unwrap().port();
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_query(0x5eed, 0, 512 - HEADER_LEN).unwrap();
    let query = enc.as_bytes().to_vec();
    for session in 1..20u64 {
        outsider
            .send_to(&announce_quote(session, 1000, outsider_port), sub_addr)
            .unwrap();
        outsider.send_to(&query, sub_addr).unwrap();
        // Also on the group, as another host on it would.
        outsider
            .send_to(&announce_quote(session, 1000, outsider_port), group)
            .ok();
    }
    // A try or an answer would come within a round trip on loopback.
    let got = drain(&outsider, Duration::from_millis(500));
    let found = status.discovered();
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    assert!(got.is_empty(), "the outsider got {got:?}");
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(metric(&report, "sub", "discovery.found"), 0);
    assert_eq!(metric(&report, "sub", "discovery.queries_answered"), 0);
}

/// SECURITY.md: "With a key, announcements and queries are sealed and replays dropped". An
/// unsealed announcement (pointing at the sender) and an unsealed query to a bridge with a key
/// do nothing.
#[test]
#[cfg_attr(miri, ignore)]
fn with_a_key_unsealed_announcements_and_queries_do_nothing() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(5) else { return };
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .psk([7; 32], true)
        .discovery(discovery(group, Duration::from_secs(1)))
        .discover::<Quote>()
        .export::<Quote>();
    let status = bridge.status();
    let sub_addr = bridge.local_addr();
    let sub = subscriber(bridge);
    let attacker = socket([127, 0, 0, 1]);
    let port = attacker.local_addr().unwrap().port();
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_query(0x5eed, 0, 512 - HEADER_LEN).unwrap();
    let query = enc.as_bytes().to_vec();
    for session in 1..20u64 {
        attacker
            .send_to(&announce_quote(session, 1000, port), sub_addr)
            .unwrap();
        attacker
            .send_to(&announce_quote(session, 1000, port), group)
            .ok();
        attacker.send_to(&query, sub_addr).unwrap();
    }
    // A try or an answer would come within a round trip on loopback.
    let got = drain(&attacker, Duration::from_millis(500));
    let found = status.discovered();
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    assert!(got.is_empty(), "the unsealed sender got {got:?}");
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(metric(&report, "sub", "discovery.found"), 0);
    assert_eq!(metric(&report, "sub", "discovery.announcements_in"), 0);
}

/// SECURITY.md: "Tries are bounded: ... `max_tries` (4) not yet established at once ... every
/// table has a fixed capacity"; "holding max_tries try slots while the flood lasts ... never
/// disturbing one already followed". Thousands of announcements of distinct sessions and
/// ports (each a would-be publisher on this host) make at most `max_tries` tries, at most that
/// many Subscribes a renewal apart, and the genuine publisher stays followed and feeding.
#[test]
#[cfg_attr(miri, ignore)]
fn a_flood_of_distinct_announcements_stays_within_the_caps() {
    let _cpu = crate::fixtures::cpu_hungry();
    let Some(group) = group(6) else { return };
    let Followed {
        publisher,
        pub_addr,
        status,
        sub_addr,
        sub,
    } = followed(group, Duration::from_millis(200));
    // Sinks at 16 ports, counting what the subscriber sends them; announcements name those
    // ports and thousands of others where nothing listens.
    let sinks: Vec<UdpSocket> = (0..16).map(|_| socket([127, 0, 0, 1])).collect();
    let ports: Vec<u16> = sinks
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    let counters: Vec<_> = sinks
        .into_iter()
        .map(|s| std::thread::spawn(move || drain(&s, Duration::from_millis(1700))))
        .collect();
    let attacker = socket([127, 0, 0, 1]);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut most = 0usize;
    while start.elapsed() < Duration::from_millis(1500) {
        for i in 0..50u64 {
            sent += 1;
            let port = match ports.get((sent % 64) as usize) {
                Some(&p) => p,
                None => 40_000 + (sent % 20_000) as u16,
            };
            let datagram = announce_quote(sent, 3_600_000, port);
            let _ = attacker.send_to(&datagram, sub_addr);
            if i % 10 == 0 {
                let _ = attacker.send_to(&datagram, group);
            }
        }
        most = most.max(status.discovered().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    let received: usize = counters
        .into_iter()
        .map(|c| {
            c.join()
                .unwrap()
                .iter()
                .filter(|r| r.1 == SUBSCRIBE)
                .count()
        })
        .sum();
    let followed = status
        .discovered()
        .iter()
        .any(|d| d.publisher == pub_addr && d.established);
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    let tries = metric(&report, "sub", "discovery.found");
    println!(
        "{sent} forged announcements: followed at most {most} at once, {tries} tries, \
         {received} Subscribes at the sinks, ignored {}",
        metric(&report, "sub", "discovery.ignored")
    );
    assert!(
        followed,
        "the genuine publisher was dropped during the flood"
    );
    assert!(most <= 1 + 4, "{most} publishers followed at once");
    // 4 slots, each held for the 5 s try timeout: within 1.5 s, 4 tries (and the genuine one).
    assert!(tries <= 1 + 4, "{tries} tries");
    // Each try sends a Subscribe now and one per renewal (1 s): at most 2 each in 1.7 s.
    assert!(
        received <= 4 * 2,
        "{received} Subscribes to the flood's addresses"
    );
    assert!(metric(&report, "sub", "discovery.ignored") > 0);
}

/// Three publishers announcing on one group.
fn three_publishers(group: SocketAddr) -> Vec<RunningBus> {
    (0..3)
        .map(|_| publisher(discovery(group, Duration::from_secs(1))).0)
        .collect()
}

/// SECURITY.md: "Queries are answered to their source only, never with more bytes than the
/// query", and only when they come by unicast: a query heard on the discovery group brings
/// the next announcement to the group forward instead. A query sent to the group (its source
/// forged to a victim's, off loopback) is heard by every bridge on it: the victim must get
/// nothing back, and the group hears an announcement long before the next periodic one.
#[test]
#[cfg_attr(miri, ignore)]
fn a_query_to_the_group_draws_no_more_bytes_than_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(9) else { return };
    // Announcing every 30 s: after the first announcements, only a query brings one forward.
    let publishers: Vec<_> = (0..3)
        .map(|_| publisher(discovery(group, Duration::from_secs(30))).0)
        .collect();
    // Their first announcements go at their first timer, at once.
    std::thread::sleep(Duration::from_millis(200));
    let mut member = UdpEndpoint::bind_group(group, LO, &SocketConfig::default()).unwrap();
    let answer_len = HEADER_LEN + 52 + 18 + Quote::TOPIC.len();
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_query(0x5eed, 0, answer_len + 8 - HEADER_LEN)
        .unwrap();
    let query = enc.as_bytes().to_vec();
    let got = ask_group(group, &query);
    let mut batch = llbus_net::RecvBatch::new(16, DEFAULT_MAX_DATAGRAM);
    let mut announced = 0;
    let n = member.recv_batch(&mut batch).unwrap_or(0);
    for (bytes, _) in batch.iter().take(n) {
        announced += usize::from(bytes.get(4) == Some(&0x18));
    }
    for p in publishers {
        p.stop();
        p.join().expect("publisher stops cleanly");
    }
    let bytes: usize = got.iter().map(|g| g.0).sum();
    println!(
        "one query of {} bytes to the group: {got:?} ({bytes} bytes) to its source, \
         {announced} announcements to the group",
        query.len()
    );
    assert!(
        got.is_empty(),
        "a query to the group answered to its source"
    );
    assert!(
        announced >= 1,
        "the query to the group brought no announcement"
    );
}

/// SECURITY.md ("Reflection and amplification"): every answer to a Subscribe is as long as
/// it, "never more datagrams nor bytes than the request". The discovery group's socket is for
/// announcements and queries; a Subscribe sent to the group must not draw an answer from
/// every bridge on it.
#[test]
#[cfg_attr(miri, ignore)]
fn a_subscribe_to_the_group_draws_no_more_bytes_than_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(10) else { return };
    let publishers = three_publishers(group);
    std::thread::sleep(Duration::from_millis(200));
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_control(&Control::Subscribe {
        topic_id: Quote::TOPIC_ID,
        fingerprint: Quote::FINGERPRINT,
        session: 0x5eed,
        nonce: 0x1234,
        cookie: None,
    })
    .unwrap();
    let subscribe = enc.as_bytes().to_vec();
    let got = ask_group(group, &subscribe);
    for p in publishers {
        p.stop();
        p.join().expect("publisher stops cleanly");
    }
    let bytes: usize = got.iter().map(|g| g.0).sum();
    println!(
        "one Subscribe of {} bytes to the group: {got:?} ({bytes} bytes)",
        subscribe.len()
    );
    assert!(
        bytes <= subscribe.len(),
        "{bytes} bytes back for {}",
        subscribe.len()
    );
}

/// Counts the quotes it takes.
struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Actor for Count {
    type In = Quote;
    fn on_message(&mut self, _q: Quote, _ctx: &mut Context<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// SECURITY.md: "a forged announcement can make a bridge try a subscription, never ... inject
/// into one"; "a subscriber's own announcements are ignored". A bridge that exports a topic
/// and discovers it too (a relay) must not be made to subscribe to itself by an announcement
/// naming its own address: that would feed its bus a second copy of everything it publishes.
#[test]
#[cfg_attr(miri, ignore)]
fn a_forged_announcement_cannot_make_a_bridge_subscribe_to_itself() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(11) else { return };
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("relay")
        .discovery(discovery(group, Duration::from_secs(1)))
        .export::<Quote>()
        .discover::<Quote>();
    let status = bridge.status();
    let addr = bridge.local_addr();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(5))
    .publishes::<Quote>();
    let c = std::sync::Arc::clone(&counted);
    bus.actor("count", move |_: &mut Setup<'_>| {
        Count(std::sync::Arc::clone(&c))
    })
    .subscribes::<Quote>();
    bus.add(bridge);
    let running = match bus.start() {
        Ok(r) => r,
        Err(e) => {
            println!("a bridge cannot export and discover one topic: {e}");
            return;
        }
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = counted.load(std::sync::atomic::Ordering::Relaxed);
    let attacker = socket([127, 0, 0, 1]);
    for session in 1..5u64 {
        attacker
            .send_to(&announce_quote(session, 1000, addr.port()), addr)
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    // A try is made at once and established in a round trip; its quotes would follow within
    // milliseconds (the feed publishes every 5 ms), and the final report counts them.
    std::thread::sleep(Duration::from_millis(500));
    let found = status.discovered();
    running.stop();
    let report = running.join().expect("relay stops cleanly");
    let published = metric(&report, "relay", "messages_in");
    println!(
        "followed {found:?}; counted {before} quotes in the first 0.2 s, {} in all (1.1 s); \
         relay messages_in {published}",
        counted.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        found.iter().all(|d| d.publisher != addr),
        "the relay follows itself: {found:?}"
    );
    assert_eq!(published, 0, "the relay received its own quotes back");
}

/// A bridge exporting `Quote` at `addr`, announcing every `every`, fed every 2 ms.
fn publisher_at(group: SocketAddr, addr: SocketAddr, every: Duration) -> RunningBus {
    let bridge = Bridge::bind(addr)
        .unwrap()
        .name("pub")
        .discovery(discovery(group, every))
        .export::<Quote>();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    bus.start().expect("publisher starts")
}

/// `Bridge::discover`: "one that restarts is followed, one that stops announcing is dropped
/// after three of its periods". A publisher restarted on its address (a new session) is
/// followed under the new session and feeds again; one that stops is dropped after about
/// three of its periods (here 150 ms each), not before.
#[test]
#[cfg_attr(miri, ignore)]
fn a_restarted_publisher_is_followed_and_a_stopped_one_dropped_in_time() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(12) else { return };
    let addr = SocketAddr::from(([127, 0, 0, 1], tests::example_bins::free_udp_port()));
    let every = Duration::from_millis(150);
    let first = publisher_at(group, addr, every);
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(discovery(group, every))
        .discover::<Quote>();
    let status = bridge.status();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut bus = Bus::builder();
    let c = std::sync::Arc::clone(&counted);
    bus.actor("count", move |_: &mut Setup<'_>| {
        Count(std::sync::Arc::clone(&c))
    })
    .subscribes::<Quote>();
    bus.add(bridge);
    let sub = bus.start().expect("subscriber starts");
    let established = || {
        status
            .discovered()
            .iter()
            .find(|d| d.publisher == addr && d.established)
            .map(|d| d.session)
    };
    wait_for("the first publisher followed", 20, || {
        established().is_some()
    });
    let old = established().unwrap_or(0);
    first.stop();
    first.join().expect("first publisher stops");
    let second = publisher_at(group, addr, every);
    wait_for("the restarted publisher followed", 20, || {
        established().is_some_and(|s| s != old)
    });
    let before = counted.load(std::sync::atomic::Ordering::Relaxed);
    wait_for("quotes from the restarted publisher", 20, || {
        counted.load(std::sync::atomic::Ordering::Relaxed) > before + 100
    });
    let stopped = Instant::now();
    second.stop();
    second.join().expect("second publisher stops");
    wait_for("the stopped publisher dropped", 20, || {
        status.discovered().iter().all(|d| d.publisher != addr)
    });
    let after = stopped.elapsed();
    sub.stop();
    sub.join().expect("subscriber stops cleanly");
    println!(
        "dropped {after:?} after it stopped (3 periods: {:?})",
        every * 3
    );
    // Three periods after its last announcement (which came up to one period before the
    // stop), with slack for a loaded machine.
    assert!(after >= every * 2, "dropped after {after:?}: too early");
    assert!(
        after <= every * 3 + Duration::from_millis(1500),
        "dropped after {after:?}"
    );
}

/// PROTOCOL.md: "IPv6 groups work from an IPv6 or dual-stack bridge". Two bridges bound to
/// `[::1]` on an IPv6 group: the subscriber discovers the publisher, or a bridge reports why it
/// cannot. (On Linux `lo` has no MULTICAST flag by default, so IPv6 multicast cannot use it;
/// IPv4 can, with `IP_MULTICAST_IF`, which the bridge sets; for IPv6 it takes "the system's
/// choice", here the default route's interface, where a `::1` source goes nowhere.)
#[test]
#[cfg_attr(miri, ignore)]
fn discovery_works_on_an_ipv6_group() {
    let _cpu = crate::fixtures::cpu_shared();
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let group = SocketAddr::from((
        std::net::Ipv6Addr::new(0xff15, 0, 0, 0, 0, 0, 0x7476, 0x24),
        port,
    ));
    if let Err(e) = UdpEndpoint::bind_group(group, None, &SocketConfig::default()) {
        eprintln!("SKIPPED: this machine cannot join {group} ({e})");
        return;
    }
    let config = DiscoveryConfig {
        group: Some(group),
        announce_every: Duration::from_millis(200),
        ..DiscoveryConfig::default()
    };
    let bridge = Bridge::bind("[::1]:0")
        .unwrap()
        .name("pub")
        .allow(Allowlist::any())
        .discovery(config.clone())
        .export::<Quote>();
    let pub_addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    let bridge = Bridge::bind("[::1]:0")
        .unwrap()
        .name("sub")
        .allow(Allowlist::any())
        .discovery(config)
        .discover::<Quote>();
    let status = bridge.status();
    let sub = subscriber(bridge);
    // Found, or a bridge says why not (at its first failed send), within 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && status.discovered().is_empty() && status.errors().is_empty()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let found = status.discovered();
    publisher.stop();
    if let Ok(report) = publisher.join() {
        println!("{report}");
    }
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    println!(
        "found {found:?}; announcements_in {}",
        metric(&report, "sub", "discovery.announcements_in")
    );
    assert!(
        found.iter().any(|d| d.publisher == pub_addr) || !status.errors().is_empty(),
        "the IPv6 publisher {pub_addr} was not discovered, and nothing says why: {found:?}"
    );
}

/// PROTOCOL.md: "an announcement for an address already followed (a restart: a new session)
/// changes nothing but the session shown". Announcements naming the live publisher's address
/// under made-up sessions (with its own, long period) leave the established import on the
/// publisher's real session, feeding, and drop nothing.
#[test]
#[cfg_attr(miri, ignore)]
fn a_forged_new_session_at_a_followed_address_changes_no_import() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(group) = group(13) else { return };
    let (publisher, pub_addr) = publisher(discovery(group, Duration::from_secs(1)));
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(discovery(group, Duration::from_secs(1)))
        .discover::<Quote>();
    let status = bridge.status();
    let sub_addr = bridge.local_addr();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut bus = Bus::builder();
    let c = std::sync::Arc::clone(&counted);
    bus.actor("count", move |_: &mut Setup<'_>| {
        Count(std::sync::Arc::clone(&c))
    })
    .subscribes::<Quote>();
    bus.add(bridge);
    let sub = bus.start().expect("subscriber starts");
    let established = || {
        status
            .discovered()
            .iter()
            .find(|d| d.publisher == pub_addr && d.established)
            .map(|d| d.session)
    };
    wait_for("the publisher followed", 20, || established().is_some());
    let real = established().unwrap_or(0);
    let attacker = socket([127, 0, 0, 1]);
    for session in 1..200u64 {
        attacker
            .send_to(&announce_quote(session, 1000, pub_addr.port()), sub_addr)
            .unwrap();
        if session % 20 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Quotes keep arriving after the forgeries: 300 more (0.6 s of the feed) within 20 s, and
    // not before 600 ms, so that the forged announcements had their time to act (an
    // announcement is acted on when it arrives, a try at the next timer, within a
    // millisecond).
    let before = counted.load(std::sync::atomic::Ordering::Relaxed);
    let forged = Instant::now();
    wait_for("quotes after the forgeries", 20, || {
        forged.elapsed() >= Duration::from_millis(600)
            && counted.load(std::sync::atomic::Ordering::Relaxed) > before + 300
    });
    let after = counted.load(std::sync::atomic::Ordering::Relaxed);
    let now = established();
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    assert_eq!(now, Some(real), "the import's session after the forgeries");
    assert!(after > before + 300, "quotes stopped: {before} -> {after}");
    assert_eq!(metric(&report, "sub", "discovery.lost"), 0);
    assert_eq!(metric(&report, "sub", "discovery.found"), 1);
}
