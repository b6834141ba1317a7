//! The bridge's control plane under hostile input: the allowlist, the address-proving cookie
//! handshake (no data and no larger reply to an unproven address; a cookie does not work from
//! another address), the per-source rate limit, the per-topic subscriber cap, and the
//! pre-shared-key MAC, whose replay windows cover 256 senders and evict the least recently
//! seen (SECURITY.md, "Limits and their defaults").

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, RunningBus, Setup};
use llbus_net::{
    parse_datagram, Allowlist, BatchEncoder, Bridge, BridgeConfig, Control, Cookie, Kind,
    RateLimit, DEFAULT_MAX_DATAGRAM,
};
use llbus_net::{FrameMac, MAC_TAG_LEN};
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

use crate::fixtures::loopback;
use crate::fixtures::Beat;
use crate::fixtures::{Feed, Sink, Tick};

/// A publisher bus exporting `Tick` every millisecond through a bridge made with `config`.
fn publisher(config: BridgeConfig) -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind_with(loopback(), config).unwrap().name("pub");
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(1))
    .publishes::<Tick>();
    bus.add(bridge.export::<Tick>());
    (bus.start().unwrap(), addr)
}

/// A subscriber bus importing `Tick` from `publisher` through a bridge made with `config`.
fn subscriber(
    config: BridgeConfig,
    publisher: SocketAddr,
    name: &str,
) -> (RunningBus, Arc<AtomicU64>, llbus_net::BridgeStatus) {
    let bridge = Bridge::bind_with(loopback(), config)
        .unwrap()
        .name(name)
        .import::<Tick>(publisher);
    let status = bridge.status();
    let got = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    let g = Arc::clone(&got);
    bus.actor(&format!("{name}-sink"), move |_: &mut Setup<'_>| Sink {
        got: Arc::clone(&g),
    })
    .subscribes::<Tick>();
    bus.add(bridge);
    (bus.start().unwrap(), got, status)
}

fn raw_socket() -> UdpSocket {
    let s = UdpSocket::bind(loopback()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// Everything `raw` receives for `window`.
fn drain(raw: &UdpSocket, window: Duration) -> Vec<Vec<u8>> {
    let until = Instant::now() + window;
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while Instant::now() < until {
        if let Ok(n) = raw.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

fn subscribe(cookie: Option<Cookie>) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_control(&Control::Subscribe {
        topic_id: Tick::TOPIC_ID,
        fingerprint: Tick::FINGERPRINT,
        session: 7,
        nonce: 0x5eed,
        cookie,
    })
    .unwrap();
    enc.as_bytes().to_vec()
}

fn kinds(datagrams: &[Vec<u8>]) -> Vec<Kind> {
    datagrams
        .iter()
        .flat_map(|d| parse_datagram(d, DEFAULT_MAX_DATAGRAM).unwrap())
        .map(|f| f.header.kind)
        .collect()
}

fn challenge_cookie(datagram: &[u8]) -> Cookie {
    let frame = parse_datagram(datagram, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    match Control::from_frame(&frame).unwrap() {
        Control::CookieChallenge { cookie, .. } => cookie,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_address_outside_the_allowlist_gets_no_answer_at_all() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        allow: Allowlist::parse(["10.0.0.0/8"]).unwrap(),
        ..BridgeConfig::default()
    };
    let (bus, addr) = publisher(config);
    let raw = raw_socket();
    for _ in 0..5 {
        raw.send_to(&subscribe(None), addr).unwrap();
    }
    assert!(drain(&raw, Duration::from_millis(500)).is_empty());
    // Every refusal counted: the report at stop is refreshed.
    bus.stop();
    let report = bus.join().unwrap();
    assert_eq!(metric(&report, "pub", "drop.not_allowed"), 5);
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_unproven_address_gets_one_small_challenge_and_no_data_and_a_cookie_is_bound_to_its_address() {
    let _cpu = crate::fixtures::cpu_shared();
    let (bus, addr) = publisher(BridgeConfig::default());
    let victim = raw_socket();
    let request = subscribe(None);
    victim.send_to(&request, addr).unwrap();
    let got = drain(&victim, Duration::from_millis(300));
    assert_eq!(
        kinds(&got),
        [Kind::CookieChallenge],
        "only a challenge before the proof"
    );
    assert!(
        got[0].len() <= request.len(),
        "no reply is larger than its request"
    );
    let cookie = challenge_cookie(&got[0]);

    // The cookie is worthless from another address: refused as a bad cookie, and that address
    // too only gets a challenge.
    let thief = raw_socket();
    thief.send_to(&subscribe(Some(cookie)), addr).unwrap();
    let stolen = drain(&thief, Duration::from_millis(300));
    assert_eq!(kinds(&stolen), [Kind::CookieChallenge]);

    // Echoed from its own address, it admits the subscriber: an ack, then data.
    victim.send_to(&subscribe(Some(cookie)), addr).unwrap();
    let admitted = kinds(&drain(&victim, Duration::from_millis(300)));
    assert_eq!(admitted.first(), Some(&Kind::SubscribeAck), "{admitted:?}");
    assert!(admitted.contains(&Kind::Data));
    // And the thief never received data.
    assert!(!kinds(&drain(&thief, Duration::from_millis(100))).contains(&Kind::Data));
    // The stolen cookie was counted, and nothing else as a bad cookie (the report at stop is
    // refreshed).
    bus.stop();
    let report = bus.join().unwrap();
    assert_eq!(metric(&report, "pub", "drop.bad_cookie"), 1);
}

#[test]
#[cfg_attr(miri, ignore)]
fn unproven_control_messages_are_rate_limited_per_source() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        rate_limit: RateLimit {
            per_second: 10,
            burst: 5,
        },
        ..BridgeConfig::default()
    };
    let (bus, addr) = publisher(config);
    let raw = raw_socket();
    let started = Instant::now();
    for _ in 0..100 {
        raw.send_to(&subscribe(None), addr).unwrap();
    }
    let answered = drain(&raw, Duration::from_millis(300)).len() as u64;
    let elapsed = started.elapsed().as_secs_f64();
    // At most the burst plus what the rate refilled meanwhile (generously rounded up).
    let allowed = 5 + (10.0 * elapsed).ceil() as u64 + 1;
    assert!(
        answered >= 5 && answered <= allowed,
        "answered {answered}, allowed {allowed}"
    );
    // Every unanswered request counted: the report at stop is refreshed.
    bus.stop();
    let report = bus.join().unwrap();
    assert_eq!(metric(&report, "pub", "drop.rate_limited"), 100 - answered);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_topic_serves_at_most_its_cap_and_the_next_subscriber_is_told_why() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        subscribers_per_topic: 1,
        ..BridgeConfig::default()
    };
    let (pub_bus, addr) = publisher(config);
    let (first, first_got, _) = subscriber(BridgeConfig::default(), addr, "first");
    wait_for("the first subscriber fed", 10, || {
        first_got.load(Ordering::Relaxed) > 10
    });
    let (second, second_got, second_status) = subscriber(BridgeConfig::default(), addr, "second");
    // A full topic is a transient refusal: told as a warning, retried with backoff, never an
    // error that ends the import.
    wait_for("the second subscriber refused", 10, || {
        !second_status.warnings().is_empty()
    });
    let warnings = second_status.warnings();
    assert!(warnings[0].contains("net.tick"), "{warnings:?}");
    assert!(warnings[0].contains("retrying"), "{warnings:?}");
    assert!(second_status.errors().is_empty());
    assert_eq!(second_got.load(Ordering::Relaxed), 0);
    // Once the first subscriber leaves, the second gets in by itself (backoff 1 s, 2 s, ...).
    first.stop();
    first.join().unwrap();
    wait_for(
        "the second subscriber admitted after the first left",
        20,
        || second_got.load(Ordering::Relaxed) > 10,
    );
    for bus in [second, pub_bus] {
        bus.stop();
        bus.join().unwrap();
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_pre_shared_key_admits_its_holders_and_drops_everyone_else() {
    let _cpu = crate::fixtures::cpu_shared();
    let key = [42u8; 32];
    let with_key = BridgeConfig {
        psk: Some(key),
        ..BridgeConfig::default()
    };
    let (pub_bus, addr) = publisher(with_key.clone());
    // Same key: traffic flows.
    let (good, good_got, _) = subscriber(with_key, addr, "keyed");
    wait_for("the keyed subscriber fed", 10, || {
        good_got.load(Ordering::Relaxed) > 20
    });
    // Wrong key: everything it sends is dropped as a bad MAC, and it receives nothing usable.
    // The strangers renew every 100 ms, so that each has sent two Subscribes at once.
    let wrong = BridgeConfig {
        psk: Some([7u8; 32]),
        renew_every: Duration::from_millis(100),
        ..BridgeConfig::default()
    };
    let (bad, bad_got, _) = subscriber(wrong, addr, "wrongkey");
    // No key: same.
    let no_key = BridgeConfig {
        renew_every: Duration::from_millis(100),
        ..BridgeConfig::default()
    };
    let (none, none_got, _) = subscriber(no_key, addr, "nokey");
    wait_for("the strangers' datagrams dropped", 10, || {
        metric(&pub_bus.report(), "pub", "drop.bad_mac") >= 4
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(bad_got.load(Ordering::Relaxed), 0);
    assert_eq!(none_got.load(Ordering::Relaxed), 0);
    for bus in [none, bad, good, pub_bus] {
        bus.stop();
        bus.join().unwrap();
    }
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "sec.private")]
struct Private {
    n: u64,
}

#[test]
#[cfg_attr(miri, ignore)]
fn each_export_can_have_its_own_allowlist() {
    let _cpu = crate::fixtures::cpu_shared();
    // "net.tick" follows the bridge's allowlist (loopback); "sec.private" only 10.0.0.0/8.
    let bridge = Bridge::bind(loopback())
        .unwrap()
        .name("pub")
        .export::<Tick>()
        .export_to::<Private>(Allowlist::parse(["10.0.0.0/8"]).unwrap());
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(1))
    .publishes::<Tick>();
    bus.actor("private", |_: &mut Setup<'_>| Silent)
        .publishes::<Private>();
    bus.add(bridge);
    let bus = bus.start().unwrap();
    let raw = raw_socket();
    let private = {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&Control::Subscribe {
            topic_id: Private::TOPIC_ID,
            fingerprint: Private::FINGERPRINT,
            session: 7,
            nonce: 0x5eed,
            cookie: None,
        })
        .unwrap();
        enc.as_bytes().to_vec()
    };
    raw.send_to(&private, addr).unwrap();
    assert!(
        drain(&raw, Duration::from_millis(300)).is_empty(),
        "not even a challenge"
    );
    raw.send_to(&subscribe(None), addr).unwrap();
    assert_eq!(
        kinds(&drain(&raw, Duration::from_millis(300))),
        [Kind::CookieChallenge]
    );
    wait_for("the private refusal counted", 5, || {
        metric(&bus.report(), "pub", "drop.not_allowed") == 1
    });
    bus.stop();
    bus.join().unwrap();
}

struct Silent;
impl Actor for Silent {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}

/// A UDP relay between one subscriber and one publisher that records every datagram it
/// passes, so a test can replay them later from the relay's own addresses: the position of an
/// on-path eavesdropper who cannot forge a MAC but can capture and resend.
struct Recorder {
    /// Datagrams from the subscriber (to the publisher), and from the publisher.
    up: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    down: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    /// The subscriber's address, once it sent something.
    subscriber: Arc<std::sync::Mutex<Option<SocketAddr>>>,
    /// The relay's socket facing the subscriber (the subscriber's "publisher"), and the one
    /// facing the publisher (the publisher's "subscriber").
    sub_side: UdpSocket,
    pub_side: UdpSocket,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(publisher: SocketAddr) -> Recorder {
        let sub_side = UdpSocket::bind(loopback()).unwrap();
        let pub_side = UdpSocket::bind(loopback()).unwrap();
        for s in [&sub_side, &pub_side] {
            s.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        }
        type Log = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;
        let (up, down): (Log, Log) = (Arc::default(), Arc::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, b) = (sub_side.try_clone().unwrap(), pub_side.try_clone().unwrap());
        let subscriber = Arc::new(std::sync::Mutex::new(None));
        let (u, d, st) = (Arc::clone(&up), Arc::clone(&down), Arc::clone(&stop));
        let who = Arc::clone(&subscriber);
        let thread = std::thread::spawn(move || {
            let mut subscriber = None;
            let mut buf = [0u8; 2048];
            while !st.load(Ordering::Acquire) {
                if let Ok((n, from)) = a.recv_from(&mut buf) {
                    subscriber = Some(from);
                    *who.lock().unwrap() = Some(from);
                    u.lock().unwrap().push(buf[..n].to_vec());
                    let _ = b.send_to(&buf[..n], publisher);
                }
                if let (Ok((n, _)), Some(s)) = (b.recv_from(&mut buf), subscriber) {
                    d.lock().unwrap().push(buf[..n].to_vec());
                    let _ = a.send_to(&buf[..n], s);
                }
            }
        });
        Recorder {
            up,
            down,
            subscriber,
            sub_side,
            pub_side,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// With a key, a captured datagram replayed (from the address it came from)
/// is dropped as `replayed` at both ends, and the stream goes on.
#[test]
#[cfg_attr(miri, ignore)]
fn captured_sealed_datagrams_replayed_are_dropped() {
    let _cpu = crate::fixtures::cpu_shared();
    let keyed = BridgeConfig {
        psk: Some([9u8; 32]),
        ..BridgeConfig::default()
    };
    let (pub_bus, addr) = publisher(keyed.clone());
    let relay = Recorder::start(addr);
    let (sub_bus, got, status) =
        subscriber(keyed, relay.sub_side.local_addr().unwrap(), "replayed");
    // Fifty datagrams down, not fifty messages: a loaded publisher packs several messages into
    // one datagram.
    wait_for("the keyed subscriber fed by 50 datagrams", 20, || {
        got.load(Ordering::Relaxed) > 0 && relay.down.lock().unwrap().len() >= 50
    });
    let up: Vec<Vec<u8>> = relay.up.lock().unwrap().clone();
    let down: Vec<Vec<u8>> = relay
        .down
        .lock()
        .unwrap()
        .iter()
        .take(50)
        .cloned()
        .collect();
    assert!(!up.is_empty() && down.len() == 50);
    // Replay what the subscriber sent (its Subscribes, sealed) to the publisher, and what the
    // publisher sent (data, acknowledgements) to the subscriber, from the same addresses.
    for d in &up {
        relay.pub_side.send_to(d, addr).unwrap();
    }
    let subscriber_addr = relay
        .subscriber
        .lock()
        .unwrap()
        .expect("the subscriber's address");
    for d in &down {
        relay.sub_side.send_to(d, subscriber_addr).unwrap();
    }
    wait_for("the replays counted at both ends", 10, || {
        metric(&pub_bus.report(), "pub", "drop.replayed") >= up.len() as u64
            && metric(&sub_bus.report(), "replayed", "drop.replayed") >= down.len() as u64
    });
    let before = got.load(Ordering::Relaxed);
    wait_for("the stream goes on", 10, || {
        got.load(Ordering::Relaxed) > before + 50
    });
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    drop(relay);
    for bus in [sub_bus, pub_bus] {
        bus.stop();
        bus.join().unwrap();
    }
}

/// A heartbeat datagram of sender session `session`, sealed with `mac` (each seal takes the
/// next packet number of `mac`'s lane).
fn sealed_heartbeat(mac: &FrameMac, session: u64) -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
    enc.push_control(&Control::Heartbeat {
        topic_id: Beat::TOPIC_ID,
        fingerprint: Beat::FINGERPRINT,
        session,
        last_seq: 0,
        timestamp_ns: 0,
    })
    .expect("a heartbeat fits a datagram");
    let len = enc.len();
    let sealed = mac.seal(&mut buf, len).expect("room for the trailer");
    buf[..sealed].to_vec()
}

#[test]
#[cfg_attr(miri, ignore)]
fn the_bridge_tracks_256_replay_senders_and_evicts_the_least_recently_seen() {
    let _cpu = crate::fixtures::cpu_shared();
    let key = [5u8; 32];
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .psk(key, true)
        .name("replay")
        .export::<Beat>();
    let target = bridge.local_addr();
    let mut bus = Bus::builder();
    let _feed = bus.publisher::<Beat>("feed"); // the export's publisher, never used
    bus.add(bridge);
    let running = bus.start().expect("start");
    let sock = UdpSocket::bind(loopback()).expect("bind the sender");
    let mac = FrameMac::new(&key);
    // Paced: never more than 32 datagrams ahead of the bridge, so none overflows its socket.
    let sent = std::cell::Cell::new(0u64);
    let send = |d: &[u8]| {
        sock.send_to(d, target).expect("send");
        sent.set(sent.get() + 1);
        if sent.get() % 32 == 0 {
            wait_for("the bridge to take what was sent", 30, || {
                metric(&running.report(), "replay", "datagrams_in") >= sent.get()
            });
        }
    };
    let replayed = || metric(&running.report(), "replay", "drop.replayed");
    let wait_replayed = |n: u64| wait_for(&format!("drop.replayed == {n}"), 30, || replayed() >= n);

    // The first sender, then 255 others: 256 windows, the first still among them.
    let first = sealed_heartbeat(&mac, 1_000_000);
    send(&first);
    for s in 1..=255 {
        send(&sealed_heartbeat(&mac, s));
    }
    send(&first);
    wait_replayed(1);
    // Its replay made it the most recently seen: a 257th sender evicts sender 1 instead.
    send(&sealed_heartbeat(&mac, 256));
    send(&first);
    wait_replayed(2);
    // 256 more senders since it was last seen: now it is evicted, its window forgotten, and its
    // replay passes the guard (the MAC still holds: only a key holder can send it). A replay of
    // the newest sender, sent after it, shows that it was handled.
    for s in 257..=511 {
        send(&sealed_heartbeat(&mac, s));
    }
    let newest = sealed_heartbeat(&mac, 512);
    send(&newest);
    send(&first);
    send(&newest);
    wait_replayed(3);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        replayed(),
        3,
        "the first sender's window outlived 256 newer senders"
    );
    running.stop();
    running.join().expect("join");
}
