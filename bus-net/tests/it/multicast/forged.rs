//! Multicast data under attack (SECURITY.md "Forged multicast data", "Reflection and
//! amplification"): a host that only joins a keyed export's group cannot inject, a subscriber
//! asking for unicast is served beside a group member and gets nothing forged, Subscribes to a
//! multicast export or to the data group draw no more than they carry, and an admitted
//! subscriber's NAK flood cannot starve the others.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, RunningBus, Setup};
use llbus_net::{BatchEncoder, Bridge, BridgeConfig, DEFAULT_MAX_DATAGRAM};
use tests::bridges::discovery::{
    ask_group, drain, group, socket, subscribes, Counter, Feed, Quote,
};
use tests::{le, metric, overhear_data, wait_for};

/// The quote an injector sends: no feed publishes it.
const FORGED: u64 = 0xdead_beef_0bad_f00d;

/// Counts the quotes it takes, and the forged ones apart.
struct Marks {
    all: std::sync::Arc<std::sync::atomic::AtomicU64>,
    forged: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Actor for Marks {
    type In = Quote;
    fn on_message(&mut self, q: Quote, _ctx: &mut Context<'_>) {
        self.all.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if q.n == FORGED {
            self.forged
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A bridge importing `Quote` from `publisher` (receiving its group unless `unicast`), with
/// counters of all the quotes it takes and of the forged ones.
fn importer(publisher: SocketAddr, unicast: bool) -> (RunningBus, Counter, Counter) {
    importer_keyed(publisher, unicast, None)
}

/// As [`importer`], with pre-shared key `key` (sealing data too) if any.
fn importer_keyed(
    publisher: SocketAddr,
    unicast: bool,
    key: Option<[u8; 32]>,
) -> (RunningBus, Counter, Counter) {
    let mut config = llbus_net::BridgeConfig::default();
    config.multicast.receive = !unicast;
    let mut bridge = Bridge::bind_with(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .unwrap()
        .name("sub");
    if let Some(key) = key {
        bridge = bridge.psk(key, true);
    }
    let bridge = bridge.import::<Quote>(publisher);
    let all = Counter::default();
    let forged = Counter::default();
    let mut bus = Bus::builder();
    let (a, f) = (Counter::clone(&all), Counter::clone(&forged));
    bus.actor("marks", move |_: &mut Setup<'_>| Marks {
        all: Counter::clone(&a),
        forged: Counter::clone(&f),
    })
    .subscribes::<Quote>();
    bus.add(bridge);
    (bus.start().expect("subscriber starts"), all, forged)
}

/// A bridge exporting `Quote` to multicast group `group` (and by unicast to subscribers that
/// do not receive it), fed every 2 ms.
fn multicast_publisher(group: SocketAddr) -> (RunningBus, SocketAddr) {
    multicast_publisher_keyed(group, None)
}

/// As [`multicast_publisher`], with pre-shared key `key` (sealing data too) if any.
fn multicast_publisher_keyed(group: SocketAddr, key: Option<[u8; 32]>) -> (RunningBus, SocketAddr) {
    let mut bridge = Bridge::bind("127.0.0.1:0").unwrap().name("pub");
    if let Some(key) = key {
        bridge = bridge.psk(key, true);
    }
    let bridge = bridge.export_multicast::<Quote>(group);
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    (bus.start().expect("publisher starts"), addr)
}

/// SECURITY.md ("Forged multicast data"): without a key, multicast data is as open as the
/// group (its group token travels in clear, so a host that joins the group can read it and
/// inject); with a key, group datagrams are sealed, so an off-path forger sending to the
/// group with the publisher's source address cannot inject. A host that merely joins the
/// group of a keyed export (no subscription, no key) must not be able to inject quotes into a
/// subscriber by replaying what it overhears with its own payload.
#[test]
#[cfg_attr(miri, ignore)]
fn a_host_that_only_joins_the_group_cannot_inject_requires_root() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(mut raw) = tests::spoof::RawSender::for_test("a_host_that_only_joins_the_group")
    else {
        return;
    };
    raw.multicast_via(Ipv4Addr::LOCALHOST).unwrap();
    let Some(data_group) = group(14) else { return };
    let key = Some([0x4b; 32]);
    let (publisher, pub_addr) = multicast_publisher_keyed(data_group, key);
    let (sub, all, forged) = importer_keyed(pub_addr, false, key);
    wait_for("quotes arriving", 20, || {
        all.load(std::sync::atomic::Ordering::Relaxed) > 100
    });
    let heard = overhear_data(data_group).expect("data on the group (a subscriber receives it)");
    // The header: session at 24, sequence number at 32; the token is the last 8 bytes.
    let session = le(&heard, 24);
    let seq = le(&heard, 32);
    let token = le(&heard, heard.len() - 8);
    let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (pub_addr, data_group) else {
        unreachable!("IPv4 addresses")
    };
    for k in 1..=50u64 {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        let meta = llbus_net::DataMeta {
            topic_id: Quote::TOPIC_ID,
            fingerprint: Quote::FINGERPRINT,
            session,
            seq: seq + 10 * k,
            timestamp_ns: 0,
        };
        enc.push_data(meta, &Quote { n: FORGED }).unwrap();
        let mut datagram = enc.as_bytes().to_vec();
        datagram.extend_from_slice(&token.to_le_bytes());
        raw.send(src, dst, &datagram).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let injected = forged.load(std::sync::atomic::Ordering::Relaxed);
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    println!(
        "overheard token {token:#018x} (session {session:#x}, seq {seq}); {injected} of 50 \
         forged quotes delivered; drop.bad_mac {}",
        metric(&report, "sub", "drop.bad_mac")
    );
    assert!(
        metric(&report, "sub", "drop.bad_mac") > 0,
        "the premise: the forged datagrams arrived"
    );
    assert_eq!(injected, 0, "a group listener injected {injected} quotes");
}

/// PROTOCOL.md ("Multicast data"): a subscriber can ask for unicast explicitly
/// (`MulticastConfig::receive = false`); beside one that receives the group, it still gets
/// every message, and nothing forged.
#[test]
#[cfg_attr(miri, ignore)]
fn a_subscriber_asking_for_unicast_is_served_beside_a_group_member() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(data_group) = group(15) else { return };
    let (publisher, pub_addr) = multicast_publisher(data_group);
    let (member, m_all, m_forged) = importer(pub_addr, false);
    let (uni, u_all, u_forged) = importer(pub_addr, true);
    wait_for("quotes at both", 20, || {
        m_all.load(std::sync::atomic::Ordering::Relaxed) > 300
            && u_all.load(std::sync::atomic::Ordering::Relaxed) > 300
    });
    let on_group = overhear_data(data_group).is_some();
    publisher.stop();
    let report = publisher.join().expect("publisher stops cleanly");
    member.stop();
    let m = member.join().expect("member stops cleanly");
    uni.stop();
    let u = uni.join().expect("unicast subscriber stops cleanly");
    println!("{report}");
    assert!(on_group, "the premise: data went to the group");
    assert_eq!(m_forged.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(u_forged.load(std::sync::atomic::Ordering::Relaxed), 0);
    // Neither lost anything while both ran (gaps are counted as lost).
    assert_eq!(metric(&m, "sub", "lost"), 0);
    assert_eq!(metric(&u, "sub", "lost"), 0);
}

/// SECURITY.md ("Reflection and amplification"): "The handshake answers to one datagram are
/// packed into one datagram: never more datagrams nor bytes than the request (a 20-frame
/// request gets one datagram back, not 20)". A subscriber of a multicast export renewing with
/// 20 Subscribe frames in one datagram must not draw 20 `Group` datagrams besides the answers.
#[test]
#[cfg_attr(miri, ignore)]
fn a_renewal_of_twenty_frames_to_a_multicast_export_draws_one_datagram() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(data_group) = group(16) else { return };
    let (publisher, pub_addr) = multicast_publisher(data_group);
    let me = socket([127, 0, 0, 1]);
    me.send_to(&subscribes(1, None), pub_addr).unwrap();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(5);
    let cookie = loop {
        assert!(Instant::now() < deadline, "no challenge");
        if let Ok((n, _)) = me.recv_from(&mut buf) {
            if n >= 72 && buf[4] == 0x20 {
                let mut c = [0u8; 16];
                c.copy_from_slice(&buf[56..72]);
                break llbus_net::Cookie(c);
            }
        }
    };
    me.send_to(&subscribes(1, Some(cookie)), pub_addr).unwrap();
    // Admitted: let the first answers and data pass, then renew with 20 frames at once.
    let _ = drain(&me, Duration::from_millis(300));
    let request = subscribes(20, Some(cookie));
    me.send_to(&request, pub_addr).unwrap();
    let answers: Vec<(usize, u8)> = drain(&me, Duration::from_millis(300))
        .into_iter()
        .filter(|&(_, kind)| kind != 0x01 && kind != 0x02)
        .collect();
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    let bytes: usize = answers.iter().map(|a| a.0).sum();
    println!(
        "a request of {} bytes drew {} datagrams ({bytes} bytes): {answers:?}",
        request.len(),
        answers.len()
    );
    assert!(!answers.is_empty(), "the premise: the renewal was answered");
    assert!(answers.len() <= 1, "{} datagrams for one", answers.len());
    assert!(
        bytes <= request.len(),
        "{bytes} bytes for {}",
        request.len()
    );
}

/// SECURITY.md ("Reflection and amplification"): "never more datagrams nor bytes than the
/// request". The data group's socket of a subscriber is for the publisher's data; a Subscribe
/// (or a Query) sent to the data group must not draw an answer from every subscriber on it.
#[test]
#[cfg_attr(miri, ignore)]
fn a_subscribe_to_the_data_group_draws_no_more_bytes_than_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(data_group) = group(17) else { return };
    let (publisher, pub_addr) = multicast_publisher(data_group);
    let subs: Vec<_> = (0..3).map(|_| importer(pub_addr, false)).collect();
    for (_, all, _) in &subs {
        wait_for("quotes arriving", 20, || {
            all.load(std::sync::atomic::Ordering::Relaxed) > 100
        });
    }
    // Let them see the group (all three join it) and say so (they renew at once).
    wait_for("the subscribers on the group", 20, || {
        tests::loopback_members(data_group).is_none_or(|n| n >= 3)
    });
    std::thread::sleep(Duration::from_millis(100));
    let request = subscribes(1, None);
    let got = ask_group(data_group, &request);
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    for (sub, _, _) in subs {
        sub.stop();
        sub.join().expect("subscriber stops cleanly");
    }
    let bytes: usize = got.iter().map(|g| g.0).sum();
    println!(
        "one Subscribe of {} bytes to the data group: {got:?} ({bytes} bytes)",
        request.len()
    );
    assert!(
        bytes <= request.len(),
        "{bytes} bytes back for {}",
        request.len()
    );
}

/// A subscription of `Quote` made by hand from a plain socket (an allowed host can do this):
/// the handshake, saying it receives the group if `group`. Returns the socket and the cookie
/// its NAKs carry.
fn subscribe_by_hand(publisher: SocketAddr, group: bool) -> (UdpSocket, llbus_net::Cookie) {
    let me = socket([127, 0, 0, 1]);
    let mut cookie = None;
    let mut buf = [0u8; 2048];
    for want in [0x20u8, 0x11] {
        let mut request = subscribes(1, cookie);
        if group && cookie.is_some() {
            request[5] |= 0x08;
        }
        me.send_to(&request, publisher).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline, "no answer of kind {want:#x}");
            if let Ok((n, _)) = me.recv_from(&mut buf) {
                if n >= 72 && buf[4] == want {
                    let mut c = [0u8; 16];
                    c.copy_from_slice(&buf[56..72]);
                    cookie = Some(llbus_net::Cookie(c));
                    break;
                }
            }
        }
    }
    (me, cookie.unwrap_or(llbus_net::Cookie([0; 16])))
}

/// A datagram of 16 NAK frames of `Quote` from session 0x5eed, for `ranges`.
fn naks(cookie: llbus_net::Cookie, ranges: impl Iterator<Item = (u64, u64)>) -> Vec<u8> {
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    for (k, (first, last)) in ranges.enumerate() {
        enc.push_nak(&llbus_net::Nak {
            topic_id: Quote::TOPIC_ID,
            fingerprint: Quote::FINGERPRINT,
            session: 0x5eed,
            cookie,
            nonce: k as u64 + 1,
            first,
            last,
        })
        .unwrap();
    }
    enc.as_bytes().to_vec()
}

/// Quotes a reliable importer of `publisher` received in `window`, while `during` runs.
fn rate_while(all: &Counter, window: Duration, during: &mut dyn FnMut(Instant)) -> u64 {
    let before = all.load(std::sync::atomic::Ordering::Relaxed);
    let until = Instant::now() + window;
    during(until);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    all.load(std::sync::atomic::Ordering::Relaxed) - before
}

/// Publishes two quotes every tick: a reliable export's history (1024 messages) fills in half
/// a second at a 1 ms tick.
struct PairFeed {
    out: llbus::Out<Quote>,
    n: u64,
}

impl Actor for PairFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        for _ in 0..2 {
            self.n += 1;
            ctx.publish(self.out, Quote { n: self.n });
        }
    }
}

/// How long the genuine subscriber's quotes are counted without, then with, the NAKs.
const STORM_WINDOW: Duration = Duration::from_millis(500);

/// One run: a reliable export (to `group` if any) fed two quotes every 1 ms, a genuine
/// reliable subscriber, and an admitted subscriber that NAKs 1024 messages with 16 frames at
/// once, then repeats the same NAKs as fast as it can. Returns the genuine subscriber's quotes
/// in [`STORM_WINDOW`] without, then with, the NAKs.
fn nak_storm(group: Option<SocketAddr>) -> (u64, u64, u64) {
    // A host budget of 1 MiB/s (1 MiB bursts) instead of 64 MiB/s: the storm spends it
    // whatever the machine's load (a suppressed NAK of 16 x 1024 messages is charged 768 KiB),
    // so the assertion on its charging does not depend on how many NAKs a loaded host sends.
    let mut config = BridgeConfig::default();
    config.reliable.retransmit_rate = (1 << 20, 1 << 20);
    let bridge = Bridge::bind_with("127.0.0.1:0", config)
        .unwrap()
        .name("pub");
    let bridge = match group {
        Some(g) => bridge.export_reliable_multicast::<Quote>(g),
        None => bridge.export_reliable::<Quote>(),
    };
    let pub_addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| PairFeed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(1))
    .publishes::<Quote>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    let genuine = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .import_reliable::<Quote>(pub_addr);
    let all = Counter::default();
    let mut bus = Bus::builder();
    let a = Counter::clone(&all);
    bus.actor("marks", move |_: &mut Setup<'_>| Marks {
        all: Counter::clone(&a),
        forged: Counter::default(),
    })
    .subscribes::<Quote>();
    bus.add(genuine);
    let sub = bus.start().expect("subscriber starts");
    // History full (1024 messages) before measuring.
    wait_for("history filled", 30, || {
        all.load(std::sync::atomic::Ordering::Relaxed) > 1300
    });
    let (attacker, cookie) = subscribe_by_hand(pub_addr, group.is_some());
    let quiet = rate_while(&all, STORM_WINDOW, &mut |_| {});
    let mut sent = 0u64;
    let stormy = rate_while(&all, STORM_WINDOW, &mut |until| {
        let mut renewed = Instant::now();
        while Instant::now() < until {
            // Messages surely still in history: the genuine subscriber's count is the
            // publisher's sequence number, near enough, and the 1024 from 800 back reach
            // beyond it.
            let top = all.load(std::sync::atomic::Ordering::Relaxed);
            let base = top.saturating_sub(800).max(1);
            let primer = naks(cookie, (0..16).map(|k| (base + 64 * k, base + 64 * k + 63)));
            let _ = attacker.send_to(&primer, pub_addr);
            let same = naks(cookie, (0..16).map(|_| (base, base + 1023)));
            for _ in 0..64 {
                let _ = attacker.send_to(&same, pub_addr);
                sent += 1;
            }
            if renewed.elapsed() > Duration::from_millis(500) {
                let mut renewal = subscribes(1, Some(cookie));
                if group.is_some() {
                    renewal[5] |= 0x08;
                }
                let _ = attacker.send_to(&renewal, pub_addr);
                renewed = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    publisher.stop();
    let report = publisher.join().expect("publisher stops cleanly");
    sub.stop();
    sub.join().expect("subscriber stops cleanly");
    println!(
        "group {group:?}: {quiet} quotes in {STORM_WINDOW:?} quiet, {stormy} under {sent} NAK \
         datagrams; \
         publisher retransmitted {}",
        metric(&report, "pub", "retransmitted")
    );
    (quiet, stormy, metric(&report, "pub", "drop.rate_limited"))
}

/// SECURITY.md: an admitted subscriber's NAKs are bounded by its host's budget, suppressed
/// ones too, and checked in one linear pass, so NAK suppression cannot be used against the
/// other subscribers. An admitted subscriber repeats one NAK of 1024 messages as
/// fast as it can: the genuine subscriber is still served (it keeps receiving), and the
/// publisher charges the suppressed NAKs to the NAKer's host until its budget is spent, then
/// drops them (`drop.rate_limited`). The rates are printed, not asserted: timing on a shared
/// machine says nothing a test may rely on (the `udp` suite measures).
#[test]
#[cfg_attr(miri, ignore)]
fn suppressed_naks_cannot_starve_the_publisher() {
    let _cpu = crate::fixtures::cpu_hungry();
    let Some(data_group) = group(19) else { return };
    // The unicast and the multicast export, each with its own subscribers, at once.
    let ((quiet_u, stormy_u, _), (quiet_m, stormy_m, limited_m)) = std::thread::scope(|scope| {
        let unicast = scope.spawn(|| nak_storm(None));
        let multicast = scope.spawn(|| nak_storm(Some(data_group)));
        (unicast.join().unwrap(), multicast.join().unwrap())
    });
    println!(
        "unicast: {stormy_u}/{quiet_u} = {:.2}; multicast: {stormy_m}/{quiet_m} = {:.2}, \
         {limited_m} NAKs over the host's budget",
        stormy_u as f64 / quiet_u.max(1) as f64,
        stormy_m as f64 / quiet_m.max(1) as f64
    );
    assert!(quiet_m > 0 && quiet_u > 0);
    assert!(
        stormy_m > 0 && stormy_u > 0,
        "the genuine subscriber starved under the NAKs"
    );
    assert!(
        limited_m > 0,
        "suppressed NAKs were never charged to the NAKer's host budget"
    );
}
