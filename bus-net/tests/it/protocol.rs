//! The bridge's protocol behaviour end to end, two buses (or a bus and a raw socket) over
//! loopback: a fingerprint mismatch, subscription expiry and unsubscribe, a publisher restart,
//! malformed datagrams counted by reason, a publisher that is not there (ICMP), and a message
//! too large for a datagram; and a socket that breaks, reported through `BridgeStatus` as an
//! error naming the bridge while the bus stops with it (SECURITY.md, "Stopping the bridge from
//! the network").

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::BusError;
use llbus::{Actor, Bus, BusBuilder, Context, Idle, Message, Out, Report, RunningBus, Setup};
use llbus_net::{
    parse_datagram, BatchEncoder, Bridge, BridgeConfig, Control, DataMeta, DropReason, Kind,
    ReassemblyConfig, DEFAULT_MAX_DATAGRAM, HEADER_LEN, VERSION,
};
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

use crate::fixtures::drop_count;
use crate::fixtures::loopback;
use crate::fixtures::Beat;

// ---------------------------------------------------------------------------------------------
// Helpers

/// Publishes `make(1)`, `make(2)`, ... one per tick once `ready`, until `make` says `None`.
struct Feed<T> {
    out: Out<T>,
    n: u64,
    ready: Arc<AtomicBool>,
    make: fn(u64) -> Option<T>,
}

impl<T: Message + Clone> Actor for Feed<T> {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if !self.ready.load(Ordering::Acquire) {
            return;
        }
        if let Some(msg) = (self.make)(self.n + 1) {
            self.n += 1;
            ctx.publish(self.out, msg);
        }
    }
}

/// Adds a feed called `name` of `make` to `bus`, ticking every `every`; returns its switch.
fn add_feed<T: Message + Clone>(
    bus: &mut BusBuilder,
    name: &str,
    every: Duration,
    make: fn(u64) -> Option<T>,
) -> Arc<AtomicBool> {
    let ready = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&ready);
    bus.actor(name, move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
        ready: Arc::clone(&r),
        make,
    })
    .tick_every(every)
    .idle(Idle::Park)
    .publishes::<T>();
    ready
}

/// Collects every message it receives.
struct Collect<T> {
    seen: Arc<Mutex<Vec<T>>>,
}

impl<T: Message + Clone> Actor for Collect<T> {
    type In = T;
    fn on_message(&mut self, m: T, _ctx: &mut Context<'_>) {
        self.seen.lock().unwrap().push(m);
    }
}

/// Adds a collector called `name` of topic `T` to `bus`.
fn add_collect<T: Message + Clone>(bus: &mut BusBuilder, name: &str) -> Arc<Mutex<Vec<T>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    bus.actor(name, move |_: &mut Setup<'_>| Collect {
        seen: Arc::clone(&s),
    })
    .idle(Idle::Park)
    .subscribes::<T>();
    seen
}

fn len<T>(seen: &Mutex<Vec<T>>) -> usize {
    seen.lock().unwrap().len()
}

fn stop(bus: RunningBus, what: &str) -> Report {
    bus.stop();
    let report = bus
        .join()
        .unwrap_or_else(|e| panic!("{what} stops cleanly: {e}"));
    println!("{report}");
    report
}

/// A raw ll-udp v1 frame with every header field given, valid or not.
#[allow(clippy::too_many_arguments)]
fn raw_frame(
    magic: &[u8; 3],
    version: u8,
    kind: u8,
    flags: u8,
    payload_len: u16,
    topic_id: u64,
    fingerprint: u64,
    seq: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(magic);
    v.extend_from_slice(&[version, kind, flags]);
    v.extend_from_slice(&payload_len.to_le_bytes());
    v.extend_from_slice(&topic_id.to_le_bytes());
    v.extend_from_slice(&fingerprint.to_le_bytes());
    v.extend_from_slice(&0x5eed_5eed_u64.to_le_bytes()); // session
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&0i64.to_le_bytes()); // timestamp
    v.extend_from_slice(payload);
    v
}

/// A raw socket on loopback with a receive timeout.
fn raw_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// Receives what arrives on `s` within `within`.
fn drain(s: &UdpSocket, within: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 2048];
    let mut got = Vec::new();
    while Instant::now() < deadline {
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.proto.tick")]
struct Tick {
    n: u64,
}

fn tick(n: u64) -> Option<Tick> {
    Some(Tick { n })
}

// ---------------------------------------------------------------------------------------------
// (a) Fingerprint mismatch

mod ours {
    #[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
    #[message(topic = "net.mismatch")]
    pub struct Quote {
        pub px: f64,
    }
}

mod theirs {
    #[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
    #[message(topic = "net.mismatch")]
    pub struct Quote {
        pub px: f64,
        pub qty: u32,
    }
}

/// How often the mismatch tests' subscriber renews (the default is every second).
const MISMATCH_RENEW: Duration = Duration::from_millis(100);

/// A publisher exporting `theirs::Quote` and a subscriber importing `ours::Quote` (renewing
/// every [`MISMATCH_RENEW`]), running.
struct Mismatch {
    a: RunningBus,
    b: RunningBus,
    status: llbus_net::BridgeStatus,
    seen: Arc<Mutex<Vec<ours::Quote>>>,
}

fn start_mismatch() -> Mismatch {
    let publisher = Bridge::bind(loopback()).unwrap().name("pub");
    let config = BridgeConfig {
        renew_every: MISMATCH_RENEW,
        ..BridgeConfig::default()
    };
    let subscriber = Bridge::bind_with(loopback(), config)
        .unwrap()
        .name("sub")
        .import::<ours::Quote>(publisher.local_addr());
    let status = subscriber.status();
    let mut a = Bus::builder();
    let ready = add_feed(&mut a, "feed", Duration::from_millis(5), |n| {
        Some(theirs::Quote {
            px: n as f64,
            qty: 1,
        })
    });
    ready.store(true, Ordering::Release); // published all along; nobody may receive them
    a.add(publisher.export::<theirs::Quote>()).idle(Idle::Park);
    let mut b = Bus::builder();
    let seen = add_collect::<ours::Quote>(&mut b, "sink");
    b.add(subscriber).idle(Idle::Park);
    let a = a.start().expect("bus a starts");
    let b = b.start().expect("bus b starts");
    Mismatch { a, b, status, seen }
}

#[test]
#[cfg_attr(miri, ignore)]
fn fingerprint_mismatch_is_refused_and_reported_naming_topic_and_both_fingerprints() {
    let _cpu = crate::fixtures::cpu_shared();
    assert_eq!(ours::Quote::TOPIC_ID, theirs::Quote::TOPIC_ID);
    assert_ne!(ours::Quote::FINGERPRINT, theirs::Quote::FINGERPRINT);
    let m = start_mismatch();
    wait_for("the subscriber to report the refusal", 10, || {
        !m.status.errors().is_empty()
    });
    wait_for("refusals counted on both sides", 10, || {
        metric(&m.a.report(), "pub", "refused") >= 1 && metric(&m.b.report(), "sub", "refused") >= 1
    });
    // Renewals would come every 100 ms; the error is reported once.
    std::thread::sleep(MISMATCH_RENEW * 5);
    let ra = stop(m.a, "publisher");
    let rb = stop(m.b, "subscriber");
    let errors = m.status.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    // A warning too, once, in the same words.
    assert_eq!(m.status.warnings(), errors);
    let e = &errors[0];
    let hex = |fp: u64| format!("{fp:#018x}");
    for needle in [
        "net.mismatch".to_owned(),
        hex(ours::Quote::TOPIC_ID),
        hex(ours::Quote::FINGERPRINT),
        hex(theirs::Quote::FINGERPRINT),
    ] {
        assert!(e.contains(&needle), "{e:?} does not name {needle}");
    }
    assert!(e.contains("fingerprint mismatch"), "{e}");
    assert!(metric(&ra, "pub", "refused") >= 1);
    assert!(metric(&rb, "sub", "refused") >= 1);
    assert_eq!(metric(&ra, "pub", "messages_out"), 0);
    assert!(metric(&ra, "pub", "no_subscriber") > 0);
    assert_eq!(metric(&ra, "pub", "subscribers.net.mismatch"), 0);
    assert_eq!(metric(&rb, "sub", "messages_in"), 0);
    assert!(m.seen.lock().unwrap().is_empty());
}

/// docs/PROTOCOL.md: "A Refuse is final for that configuration: the subscriber reports the
/// `Refusal` as an error and stops renewing that topic."
#[test]
#[cfg_attr(miri, ignore)]
fn a_refused_import_stops_renewing() {
    let _cpu = crate::fixtures::cpu_shared();
    let m = start_mismatch();
    wait_for("the refusal", 10, || !m.status.errors().is_empty());
    // Several renewal periods later, the publisher has refused exactly once.
    std::thread::sleep(MISMATCH_RENEW * 5);
    let ra = stop(m.a, "publisher");
    let rb = stop(m.b, "subscriber");
    assert_eq!(metric(&ra, "pub", "refused"), 1, "renewed after a refusal");
    assert_eq!(metric(&rb, "sub", "refused"), 1);
}

// ---------------------------------------------------------------------------------------------
// (b) Subscription expiry and unsubscribe

#[test]
#[cfg_attr(miri, ignore)]
fn a_subscription_that_is_not_renewed_expires() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        subscriber_timeout: Duration::from_secs(1),
        ..BridgeConfig::default()
    };
    let publisher = Bridge::bind_with(loopback(), config).unwrap().name("pub");
    let addr = publisher.local_addr();
    let mut a = Bus::builder();
    let ready = add_feed(&mut a, "feed", Duration::from_millis(10), tick);
    ready.store(true, Ordering::Release);
    a.add(publisher.export::<Tick>()).idle(Idle::Park);
    let a = a.start().expect("bus a starts");
    let gauge = || metric(&a.report(), "pub", "subscribers.net.proto.tick");

    // One subscription, never renewed: a subscriber that died without unsubscribing. It
    // proves its address first: the publisher answers an unproven Subscribe with a cookie
    // challenge no larger than the request, and sends it nothing else.
    let raw = raw_socket();
    let subscribe = |cookie| {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&Control::Subscribe {
            topic_id: Tick::TOPIC_ID,
            fingerprint: Tick::FINGERPRINT,
            session: 0xdead,
            nonce: 0xd1ed,
            cookie,
        })
        .unwrap();
        enc.as_bytes().to_vec()
    };
    let request = subscribe(None);
    raw.send_to(&request, addr).unwrap();
    let challenge = drain(&raw, Duration::from_millis(200));
    assert_eq!(
        challenge.len(),
        1,
        "one challenge and nothing else before the proof"
    );
    assert!(
        challenge[0].len() <= request.len(),
        "the challenge amplifies"
    );
    let frame = parse_datagram(&challenge[0], DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    let cookie = match Control::from_frame(&frame).unwrap() {
        Control::CookieChallenge { cookie, .. } => cookie,
        other => panic!("expected a cookie challenge, got {other:?}"),
    };
    let subscribed_at = Instant::now();
    raw.send_to(&subscribe(Some(cookie)), addr).unwrap();

    // Acknowledged, then fed data and heartbeats.
    let got = drain(&raw, Duration::from_millis(500));
    let kinds: Vec<Kind> = got
        .iter()
        .flat_map(|d| parse_datagram(d, DEFAULT_MAX_DATAGRAM).unwrap())
        .map(|f| f.header.kind)
        .collect();
    assert_eq!(kinds.first(), Some(&Kind::SubscribeAck), "{kinds:?}");
    assert!(kinds.contains(&Kind::Data), "{kinds:?}");
    wait_for("the gauge to show the subscriber", 5, || gauge() == 1);
    // Still there before the 1 s timeout...
    while subscribed_at.elapsed() < Duration::from_millis(850) {
        assert_eq!(gauge(), 1, "expired early at {:?}", subscribed_at.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...gone within the timeout plus one expiry period (1 s) and some slack.
    wait_for("the subscriber to expire", 6, || gauge() == 0);
    let expired_after = subscribed_at.elapsed();
    assert!(
        expired_after >= Duration::from_secs(1) && expired_after < Duration::from_secs(4),
        "expired after {expired_after:?}"
    );
    // And nothing more is sent to it (data or heartbeats, every 100 ms while subscribed).
    let _ = drain(&raw, Duration::from_millis(100));
    let after = drain(&raw, Duration::from_millis(300));
    assert!(after.is_empty(), "{} datagrams after expiry", after.len());
    let ra = stop(a, "publisher");
    assert_eq!(metric(&ra, "pub", "subscribers.net.proto.tick"), 0);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_graceful_stop_unsubscribes() {
    let _cpu = crate::fixtures::cpu_shared();
    let publisher = Bridge::bind(loopback()).unwrap().name("pub"); // timeout 60 s
    let subscriber = Bridge::bind(loopback())
        .unwrap()
        .name("sub")
        .import::<Tick>(publisher.local_addr());
    let mut a = Bus::builder();
    let ready = add_feed(&mut a, "feed", Duration::from_millis(10), tick);
    ready.store(true, Ordering::Release);
    a.add(publisher.export::<Tick>()).idle(Idle::Park);
    let mut b = Bus::builder();
    let seen = add_collect::<Tick>(&mut b, "sink");
    b.add(subscriber).idle(Idle::Park);
    let a = a.start().expect("bus a starts");
    let b = b.start().expect("bus b starts");
    let gauge = || metric(&a.report(), "pub", "subscribers.net.proto.tick");
    wait_for("the subscription", 10, || gauge() == 1 && len(&seen) > 0);
    stop(b, "subscriber");
    // Far sooner than the 60 s timeout (the gauge is refreshed once a second).
    wait_for("the unsubscribe", 10, || gauge() == 0);
    stop(a, "publisher");
}

// ---------------------------------------------------------------------------------------------
// (c) Publisher restart

/// Starts a publisher bus on `addr` that publishes `Tick { n }` for n in `from..from + 100`.
fn start_publisher(addr: SocketAddr, from: u64) -> RunningBus {
    // The previous publisher's socket was just closed; binding again is immediate for UDP, but
    // allow a moment in case the old bus thread is still letting go of it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let bridge = loop {
        match Bridge::bind(addr) {
            Ok(b) => break b,
            Err(e) if Instant::now() < deadline => {
                eprintln!("rebinding {addr}: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot bind {addr} again: {e}"),
        }
    };
    let mut a = Bus::builder();
    let ready = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&ready);
    a.actor("feed", move |s: &mut Setup<'_>| RangeFeed {
        out: s.output(),
        next: from,
        end: from + 100,
        ready: Arc::clone(&r),
    })
    .tick_every(Duration::from_millis(2))
    .idle(Idle::Park)
    .publishes::<Tick>();
    a.add(bridge.name("pub").export::<Tick>()).idle(Idle::Park);
    let a = a.start().expect("publisher starts");
    wait_for("the subscriber to (re)subscribe", 10, || {
        metric(&a.report(), "pub", "subscribers.net.proto.tick") == 1
    });
    ready.store(true, Ordering::Release);
    a
}

struct RangeFeed {
    out: Out<Tick>,
    next: u64,
    end: u64,
    ready: Arc<AtomicBool>,
}

impl Actor for RangeFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.ready.load(Ordering::Acquire) && self.next < self.end {
            ctx.publish(self.out, Tick { n: self.next });
            self.next += 1;
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_publisher_restart_is_noticed_without_a_false_gap() {
    let _cpu = crate::fixtures::cpu_shared();
    // A fixed port, chosen by the system once and reused by the second publisher.
    let addr = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let subscriber = Bridge::bind(loopback())
        .unwrap()
        .name("sub")
        .import::<Tick>(addr);
    let status = subscriber.status();
    let mut b = Bus::builder();
    let seen = add_collect::<Tick>(&mut b, "sink");
    b.add(subscriber).idle(Idle::Park);

    // The subscriber first: it subscribes before anyone listens, then renews every second.
    let b = b.start().expect("subscriber starts");
    let a1 = start_publisher(addr, 1);
    wait_for("the first publisher's 100", 20, || len(&seen) == 100);
    let r1 = stop(a1, "first publisher");
    assert_eq!(metric(&r1, "pub", "messages_out"), 100);

    let a2 = start_publisher(addr, 101);
    wait_for("the second publisher's 100", 20, || len(&seen) == 200);
    let r2 = stop(a2, "second publisher");
    assert_eq!(metric(&r2, "pub", "messages_out"), 100);
    let rb = stop(b, "subscriber");

    assert_eq!(metric(&rb, "sub", "publisher_restarts"), 1);
    assert_eq!(metric(&rb, "sub", "lost"), 0, "no false gap storm");
    assert_eq!(metric(&rb, "sub", "stale"), 0);
    assert_eq!(metric(&rb, "sub", "duplicates"), 0);
    assert_eq!(metric(&rb, "sub", "messages_in"), 200);
    let ns: Vec<u64> = seen.lock().unwrap().iter().map(|t| t.n).collect();
    assert_eq!(ns, (1..=200).collect::<Vec<_>>());
    assert!(status.errors().is_empty(), "{:?}", status.errors());
}

// ---------------------------------------------------------------------------------------------
// (d) Malformed datagrams

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.garbage.quote")]
struct Quote {
    n: u64,
}

/// Imported by the subscriber from the raw socket, which thus is a publisher it knows: frames
/// from it get as far as the fingerprint check and the payload decoding.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.garbage.probe")]
struct Probe {
    x: u64,
}

/// Publisher "pub" exports `Quote` (fed continuously); subscriber "sub" imports it from "pub"
/// and `Probe` from `probe_publisher`.
struct Garbage {
    a: RunningBus,
    b: RunningBus,
    pub_addr: SocketAddr,
    sub_addr: SocketAddr,
    quotes: Arc<Mutex<Vec<Quote>>>,
    probes: Arc<Mutex<Vec<Probe>>>,
}

fn start_garbage(probe_publisher: SocketAddr) -> Garbage {
    let publisher = Bridge::bind(loopback()).unwrap().name("pub");
    let subscriber = Bridge::bind(loopback()).unwrap().name("sub");
    let (pub_addr, sub_addr) = (publisher.local_addr(), subscriber.local_addr());
    let mut a = Bus::builder();
    let ready = add_feed(&mut a, "feed", Duration::from_millis(2), |n| {
        Some(Quote { n })
    });
    a.add(publisher.export::<Quote>()).idle(Idle::Park);
    let mut b = Bus::builder();
    let quotes = add_collect::<Quote>(&mut b, "quotes");
    let probes = add_collect::<Probe>(&mut b, "probes");
    b.add(
        subscriber
            .import::<Quote>(pub_addr)
            .import::<Probe>(probe_publisher),
    )
    .idle(Idle::Park);
    let a = a.start().expect("bus a starts");
    let b = b.start().expect("bus b starts");
    wait_for("the subscription", 10, || {
        metric(&a.report(), "pub", "subscribers.net.garbage.quote") == 1
    });
    ready.store(true, Ordering::Release);
    wait_for("real traffic", 10, || len(&quotes) >= 20);
    Garbage {
        a,
        b,
        pub_addr,
        sub_addr,
        quotes,
        probes,
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_malformed_datagram_is_dropped_and_counted_by_reason_while_traffic_flows() {
    let _cpu = crate::fixtures::cpu_shared();
    use DropReason::*;
    let raw = raw_socket();
    let g = start_garbage(raw.local_addr().unwrap());
    let (q, qfp) = (Quote::TOPIC_ID, Quote::FINGERPRINT);
    let (p, pfp) = (Probe::TOPIC_ID, Probe::FINGERPRINT);
    let nobody = llbus::topic_id("net.garbage.nobody");
    let ok = *b"LLU";
    let heartbeat = raw_frame(&ok, VERSION, 0x02, 0, 0, q, qfp, 1, &[]);
    let data = Probe { x: 7 };
    let mut probe_payload = [0u8; 8];
    probe_payload.copy_from_slice(&data.x.to_le_bytes());
    // (what, datagram, reason at the subscriber, reason at the publisher)
    let cases: Vec<(&str, Vec<u8>, DropReason, DropReason)> = vec![
        ("truncated", heartbeat[..20].to_vec(), Truncated, Truncated),
        (
            "wrong magic",
            raw_frame(b"LLX", VERSION, 0x02, 0, 0, q, qfp, 1, &[]),
            BadMagic,
            BadMagic,
        ),
        (
            "wrong version",
            raw_frame(&ok, VERSION - 1, 0x02, 0, 0, q, qfp, 1, &[]),
            BadVersion,
            BadVersion,
        ),
        (
            "unknown kind",
            raw_frame(&ok, VERSION, 0x05, 0, 0, q, qfp, 1, &[]),
            UnknownKind,
            UnknownKind,
        ),
        (
            "reserved kind (0x21)",
            raw_frame(&ok, VERSION, 0x21, 0, 0, q, qfp, 1, &[]),
            ReservedKind,
            ReservedKind,
        ),
        (
            "token flag on a subscribe",
            raw_frame(&ok, VERSION, 0x10, 0x04, 0, q, qfp, 0, &[]),
            UnsupportedFlags,
            UnsupportedFlags,
        ),
        (
            "payload length past the end",
            raw_frame(&ok, VERSION, 0x01, 0, 1000, p, pfp, 1, &probe_payload),
            BadLength,
            BadLength,
        ),
        (
            "unknown topic",
            raw_frame(&ok, VERSION, 0x01, 0, 8, nobody, pfp, 1, &probe_payload),
            UnknownTopic,
            UnknownTopic,
        ),
        (
            // The publisher neither exports nor imports Probe.
            "wrong fingerprint on a data frame",
            raw_frame(&ok, VERSION, 0x01, 0, 8, p, pfp ^ 1, 1, &probe_payload),
            FingerprintMismatch,
            UnknownTopic,
        ),
        (
            // From the Probe import's own publisher address, but answering no Subscribe the
            // subscriber sent: the nonce is not one of its own.
            "acknowledgement with a forged nonce",
            raw_frame(&ok, VERSION, 0x11, 0, 24, p, pfp, 0, &[7; 24]),
            BadNonce,
            UnknownSender,
        ),
        (
            "unknown refuse reason",
            raw_frame(&ok, VERSION, 0x12, 0, 24, q, qfp, 0, &[9; 24]),
            BadControl,
            BadControl,
        ),
        (
            // The subscriber imports Quote from "pub", not from here; the publisher imports
            // nothing.
            "heartbeat from a stranger",
            heartbeat.clone(),
            UnknownSender,
            UnknownSender,
        ),
    ];
    let before = (g.a.report(), g.b.report());
    for reason in DropReason::ALL {
        assert_eq!(drop_count(&before.0, "pub", reason), 0, "{reason:?}");
        assert_eq!(drop_count(&before.1, "sub", reason), 0, "{reason:?}");
    }
    let quotes_before = len(&g.quotes);
    for (what, datagram, _, _) in &cases {
        for to in [g.sub_addr, g.pub_addr] {
            raw.send_to(datagram, to)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
    let expected = |bridge: &str| -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|&r| {
                let n = cases
                    .iter()
                    .filter(|c| if bridge == "sub" { c.2 == r } else { c.3 == r })
                    .count();
                (r, n as u64)
            })
            .collect()
    };
    let actual = |r: &Report, bridge: &str| -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|&d| (d, drop_count(r, bridge, d)))
            .collect()
    };
    let settled = wait_until(Duration::from_secs(10), || {
        actual(&g.b.report(), "sub") == expected("sub")
            && actual(&g.a.report(), "pub") == expected("pub")
    });
    let differ = |r: &Report, bridge: &str| -> Vec<_> {
        actual(r, bridge)
            .into_iter()
            .zip(expected(bridge))
            .filter(|(a, e)| a != e)
            .collect()
    };
    assert!(
        settled,
        "not every bad datagram counted as expected: subscriber (actual, expected) {:?}, \
         publisher {:?}",
        differ(&g.b.report(), "sub"),
        differ(&g.a.report(), "pub")
    );
    // Real traffic still flows, in order.
    wait_for("traffic after the garbage", 10, || {
        len(&g.quotes) >= quotes_before + 50
    });
    let ra = stop(g.a, "publisher");
    let rb = stop(g.b, "subscriber");
    assert_eq!(actual(&rb, "sub"), expected("sub"));
    assert_eq!(actual(&ra, "pub"), expected("pub"));
    // Every kind at the subscriber once; the publisher sees three as unknown topics. The
    // admission reasons (MAC, cookie, rate, allowlist, caps) have tests of their own.
    let elsewhere = [
        // Data without the token is never decoded (`bad_token`), nor data of a session no
        // acknowledgement established (`unknown_session`); undecodable payloads are covered by
        // the decoder's tests.
        PayloadDecode,
        // Tests of their own: tests/it/net/spoof.rs, and the MAC's replay window (bus-net).
        BadSource,
        // Needs an import that holds its token (here the raw socket never acknowledges):
        // tests/it/net/spoof.rs, and the session machines' and simulator's tests in bus-net.
        BadToken,
        Replayed,
        TooLarge,
        TableFull,
        BadMac,
        BadCookie,
        RateLimited,
        NotAllowed,
        TopicFull,
        // Fragments reach reassembly only in the session the import follows: tests of their
        // own (`large`, the reassembler's and the simulation's in bus-net, fuzz).
        BadFragment,
        Incomplete,
    ];
    assert!(expected("sub")
        .iter()
        .all(|&(r, n)| n == u64::from(!elsewhere.contains(&r))));
    let ns: Vec<u64> = g.quotes.lock().unwrap().iter().map(|q| q.n).collect();
    assert!(ns.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(metric(&rb, "sub", "duplicates"), 0);
}

/// Sends one datagram of 2000 bytes (a data frame whose header claims that length) to both
/// bridges, then lets real traffic flow for a while; returns the final reports and the probes
/// the subscriber delivered.
fn send_oversized() -> (Report, Report, Vec<Probe>) {
    let raw = raw_socket();
    let g = start_garbage(raw.local_addr().unwrap());
    let mut big = raw_frame(
        b"LLU",
        VERSION,
        0x01,
        0,
        2000 - HEADER_LEN as u16,
        Probe::TOPIC_ID,
        Probe::FINGERPRINT,
        1,
        &[],
    );
    big.resize(2000, 0);
    assert!(big.len() > DEFAULT_MAX_DATAGRAM);
    let quotes_before = len(&g.quotes);
    raw.send_to(&big, g.sub_addr).unwrap();
    raw.send_to(&big, g.pub_addr).unwrap();
    // Quotes sent after it arrive after it (one socket, in order); the reports at stop are
    // refreshed with everything counted until then.
    wait_for("traffic after the big datagram", 10, || {
        len(&g.quotes) >= quotes_before + 50
    });
    let ra = stop(g.a, "publisher");
    let rb = stop(g.b, "subscriber");
    let probes = std::mem::take(&mut *g.probes.lock().unwrap());
    (ra, rb, probes)
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_oversized_datagram_is_dropped_whole_and_harmless() {
    let _cpu = crate::fixtures::cpu_shared();
    let (ra, rb, probes) = send_oversized();
    assert!(
        probes.is_empty(),
        "nothing of it was delivered, not even cut"
    );
    assert_eq!(metric(&rb, "sub", "messages_in"), len_of(&rb, "quotes"));
    for reason in DropReason::ALL {
        if reason != DropReason::TooLarge {
            assert_eq!(drop_count(&rb, "sub", reason), 0, "{reason:?}");
            assert_eq!(drop_count(&ra, "pub", reason), 0, "{reason:?}");
        }
    }
}

/// The spec: "Any datagram at all (..., too large) is dropped and counted by reason." A
/// datagram longer than `max_datagram` is dropped at the socket (the receive slot has one
/// spare byte, so the kernel flags it `MSG_TRUNC`) and counted in `IoStats::recv_too_large`,
/// which no metric of the bridge shows: it must appear in the report, under `drop.too_large`.
#[test]
#[cfg_attr(miri, ignore)]
fn an_oversized_datagram_is_counted() {
    let _cpu = crate::fixtures::cpu_shared();
    let (ra, rb, _) = send_oversized();
    assert_eq!(drop_count(&rb, "sub", DropReason::TooLarge), 1);
    assert_eq!(drop_count(&ra, "pub", DropReason::TooLarge), 1);
}

/// `DropReason::UnknownTopic` is "a frame for a topic this side neither exports nor imports";
/// `UnknownSender` "a frame from an address this side has no business with (data from a host it
/// did not subscribe to ...)". A data frame of a topic the publisher *exports* is the latter.
#[test]
#[cfg_attr(miri, ignore)]
fn data_for_an_exported_topic_sent_to_its_publisher_is_an_unknown_sender() {
    let _cpu = crate::fixtures::cpu_shared();
    let raw = raw_socket();
    let g = start_garbage(raw.local_addr().unwrap());
    let frame = raw_frame(
        b"LLU",
        VERSION,
        0x01,
        0,
        8,
        Quote::TOPIC_ID,
        Quote::FINGERPRINT,
        1,
        &7u64.to_le_bytes(),
    );
    raw.send_to(&frame, g.pub_addr).unwrap();
    wait_for("the frame counted", 10, || {
        DropReason::ALL
            .iter()
            .map(|&d| drop_count(&g.a.report(), "pub", d))
            .sum::<u64>()
            == 1
    });
    let ra = stop(g.a, "publisher");
    stop(g.b, "subscriber");
    assert_eq!(drop_count(&ra, "pub", DropReason::UnknownTopic), 0);
    assert_eq!(drop_count(&ra, "pub", DropReason::UnknownSender), 1);
}

/// Messages the subscriber's bridge handed to actor `sink` (published on the edge; dropped
/// ones included).
fn len_of(r: &Report, sink: &str) -> u64 {
    r.edge("net.garbage.quote", "sub", sink)
        .map_or(0, |e| e.published)
}

// ---------------------------------------------------------------------------------------------
// (e) A publisher that is not there

#[test]
#[cfg_attr(miri, ignore)]
fn importing_from_a_closed_port_is_not_fatal() {
    let _cpu = crate::fixtures::cpu_shared();
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound, then closed: nothing listens there now
    let config = BridgeConfig {
        renew_every: Duration::from_millis(100),
        ..BridgeConfig::default()
    };
    let subscriber = Bridge::bind_with(loopback(), config)
        .unwrap()
        .name("sub")
        .import::<Tick>(closed);
    let status = subscriber.status();
    let mut b = Bus::builder();
    let seen = add_collect::<Tick>(&mut b, "sink");
    b.add(subscriber).idle(Idle::Park);
    let b = b.start().expect("bus starts");
    // Renewals at start and every 100 ms: each is answered by an ICMP port unreachable. The
    // report that shows three of them is taken after a metrics refresh, while the bus runs.
    let mut r = b.report();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&r, "sub", "datagrams_out") < 3 {
        assert!(
            Instant::now() < deadline,
            "three subscribe attempts in 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
        r = b.report();
    }
    let rb = stop(b, "subscriber"); // stops cleanly: join is Ok
    assert!(metric(&rb, "sub", "datagrams_out") >= 3);
    assert_eq!(metric(&rb, "sub", "messages_in"), 0);
    assert!(seen.lock().unwrap().is_empty());
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    // The bridge's socket is not connected, and Linux reports ICMP errors to an unconnected UDP
    // socket only with IP_RECVERR (udp(7)), which the bridge does not set: the ECONNREFUSED
    // never surfaces, so nothing is counted. (A connected socket counts it: see
    // `io::tests::connection_refused_is_counted_not_fatal` in llbus-net.) Elsewhere the platform
    // may surface it, and then it must be counted, not fatal.
    #[cfg(target_os = "linux")]
    {
        assert_eq!(metric(&r, "sub", "icmp_errors"), 0);
        assert_eq!(metric(&rb, "sub", "icmp_errors"), 0);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = r;
}

// ---------------------------------------------------------------------------------------------
// (f) A message too large for a datagram

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.blob")]
struct Blob {
    n: u64,
    data: Vec<u8>,
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_message_too_large_is_refused_and_nothing_truncated_arrives() {
    let _cpu = crate::fixtures::cpu_shared();
    // Larger than a datagram goes in fragments (`large`); larger than the maximum
    // message size is refused.
    let config = BridgeConfig {
        reassembly: ReassemblyConfig {
            max_message: 2000,
            ..ReassemblyConfig::default()
        },
        ..BridgeConfig::default()
    };
    let publisher = Bridge::bind_with(loopback(), config).unwrap().name("pub");
    let subscriber = Bridge::bind(loopback())
        .unwrap()
        .name("sub")
        .import::<Blob>(publisher.local_addr());
    let mut a = Bus::builder();
    // 1: 4000 bytes, more than the maximum message of 2000; 2: 10 bytes.
    let ready = add_feed(&mut a, "feed", Duration::from_millis(5), |n| match n {
        1 => Some(Blob {
            n,
            data: vec![0xab; 4000],
        }),
        2 => Some(Blob {
            n,
            data: vec![0xcd; 10],
        }),
        _ => None,
    });
    a.add(publisher.export::<Blob>()).idle(Idle::Park);
    let mut b = Bus::builder();
    let seen = add_collect::<Blob>(&mut b, "sink");
    b.add(subscriber).idle(Idle::Park);
    let a = a.start().expect("bus a starts");
    let b = b.start().expect("bus b starts");
    wait_for("the subscription", 10, || {
        metric(&a.report(), "pub", "subscribers.net.blob") == 1
    });
    ready.store(true, Ordering::Release);
    wait_for("the small message", 10, || len(&seen) == 1);
    // Three heartbeats (every 100 ms) show the subscriber the last sequence number; the
    // reports at stop are refreshed.
    std::thread::sleep(Duration::from_millis(300));
    let ra = stop(a, "publisher");
    let rb = stop(b, "subscriber");
    assert_eq!(metric(&ra, "pub", "too_large"), 1);
    assert_eq!(metric(&ra, "pub", "messages_out"), 1);
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        [Blob {
            n: 2,
            data: vec![0xcd; 10]
        }]
    );
    // The refused message took no sequence number: no false loss.
    assert_eq!(metric(&rb, "sub", "lost"), 0);
    assert_eq!(metric(&rb, "sub", "messages_in"), 1);
    let dropped: u64 = DropReason::ALL
        .iter()
        .map(|&d| drop_count(&rb, "sub", d))
        .sum();
    assert_eq!(dropped, 0);
}

/// The garbage test's frames differ from valid ones only where they mean to: the same helper
/// with valid fields makes frames that parse, byte for byte like the public encoder's.
#[test]
fn raw_frames_with_valid_fields_match_the_encoder() {
    let _cpu = crate::fixtures::cpu_shared();
    let valid = raw_frame(
        b"LLU",
        VERSION,
        0x01,
        0,
        8,
        Tick::TOPIC_ID,
        Tick::FINGERPRINT,
        3,
        &5u64.to_le_bytes(),
    );
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    let meta = DataMeta {
        topic_id: Tick::TOPIC_ID,
        fingerprint: Tick::FINGERPRINT,
        session: 0x5eed_5eed,
        seq: 3,
        timestamp_ns: 0,
    };
    enc.push_data(meta, &Tick { n: 5 }).unwrap();
    assert_eq!(enc.as_bytes(), &valid[..]);
    let frames: Vec<_> = parse_datagram(&valid, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .collect();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].header.kind, Kind::Data);
    let heartbeat = raw_frame(b"LLU", VERSION, 0x02, 0, 0, 1, 2, 3, &[]);
    let frame = parse_datagram(&heartbeat, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert!(matches!(
        Control::from_frame(&frame),
        Ok(Control::Heartbeat { last_seq: 3, .. })
    ));
}

/// Polls `ready` every 10 ms until it holds (true) or `timeout` passes (false).
fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Every descriptor of this process that is a UDP socket bound to `addr`.
fn socket_fds(addr: SocketAddr) -> Vec<i32> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Some(fd) = entry
            .ok()
            .and_then(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        else {
            continue;
        };
        // SAFETY: an all-zero `sockaddr_in` is a valid value of that plain C struct.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `sa` and `len` are valid for writes of `len` bytes; a descriptor that is not
        // a socket (or is closed meanwhile) only makes the call fail.
        let rc = unsafe { libc::getsockname(fd, (&raw mut sa).cast(), &mut len) };
        if rc == 0
            && i32::from(sa.sin_family) == libc::AF_INET
            && u16::from_be(sa.sin_port) == addr.port()
        {
            fds.push(fd);
        }
    }
    fds
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_broken_socket_is_reported_through_the_bridge_status_and_stops_the_bus() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        renew_every: Duration::from_millis(20),
        ..BridgeConfig::default()
    };
    let bridge = Bridge::bind_with(loopback(), config)
        .expect("bind")
        .name("breaks")
        .export::<Beat>()
        // Nobody there: the import only makes the bridge send renewals through its socket.
        .import::<Beat>(SocketAddr::from(([127, 0, 0, 1], 9)));
    let (addr, status) = (bridge.local_addr(), bridge.status());
    let mut bus = Bus::builder();
    bus.add(bridge);
    let running = bus.start().expect("start");
    wait_for("the bridge to run", 30, || {
        metric(&running.report(), "breaks", "datagrams_out") > 0
    });
    let fds = socket_fds(addr);
    assert!(!fds.is_empty(), "no descriptor is bound to {addr}");
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    for fd in fds {
        use std::os::fd::AsRawFd;
        // SAFETY: `fd` is the bridge's socket, which stays open (as /dev/null) for as long as
        // the bridge owns it; dup2 replaces it atomically, so no other file lands on that number.
        let rc = unsafe { libc::dup2(null.as_raw_fd(), fd) };
        assert_eq!(rc, fd, "dup2: {}", std::io::Error::last_os_error());
    }
    let outcome = tests::bounded("the broken bridge's bus", 60, move || running.join());
    match outcome {
        Err(BusError::ActorFailed { actor, error, .. }) => {
            assert_eq!(actor, "breaks");
            assert!(error.contains("bridge 'breaks'"), "{error}");
        }
        other => panic!("the bus did not stop with the bridge's error: {other:?}"),
    }
    let errors = status.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("bridge 'breaks'") && e.contains("failed")),
        "{errors:?}"
    );
}
