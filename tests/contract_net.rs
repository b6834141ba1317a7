//! Promises of SECURITY.md and docs/PROTOCOL.md about the network bridge, kept through its public
//! API and raw sockets only:
//!
//! - With a pre-shared key, the bridge keeps replay windows for 256 senders and evicts the least
//!   recently seen (SECURITY.md, "Limits and their defaults").
//! - A socket that breaks is reported through `BridgeStatus` as an error naming the bridge, and
//!   the bus stops with that error (SECURITY.md, "Stopping the bridge from the network").
//! - The bridge never waits for more messages to fill a datagram: a lone message goes out at
//!   once (PROTOCOL.md, "Batching").
//! - A publisher that exports nothing reliably ignores NAKs; the subscriber's gaps run into their
//!   deadline, are reported unrecovered, and delivery goes on (PROTOCOL.md, "Reliable topics").

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, BusError, Message};
use llbus_net::{
    BatchEncoder, Bridge, BridgeConfig, Control, FrameMac, DEFAULT_MAX_DATAGRAM, MAC_TAG_LEN,
};
use serde::{Deserialize, Serialize};
use tests::readme::ticker;
use tests::relay::{Loss, LossyRelay};
use tests::{metric, wait_for};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "contract.net.tick")]
struct Tick(u64);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A heartbeat datagram of sender session `session`, sealed with `mac` (each seal takes the
/// next packet number of `mac`'s lane).
fn sealed_heartbeat(mac: &FrameMac, session: u64) -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
    enc.push_control(&Control::Heartbeat {
        topic_id: Tick::TOPIC_ID,
        fingerprint: Tick::FINGERPRINT,
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
    let key = [5u8; 32];
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .psk(key, true)
        .name("replay")
        .export::<Tick>();
    let target = bridge.local_addr();
    let mut bus = Bus::builder();
    let _feed = bus.publisher::<Tick>("feed"); // the export's publisher, never used
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
    let config = BridgeConfig {
        renew_every: Duration::from_millis(20),
        ..BridgeConfig::default()
    };
    let bridge = Bridge::bind_with(loopback(), config)
        .expect("bind")
        .name("breaks")
        .export::<Tick>()
        // Nobody there: the import only makes the bridge send renewals through its socket.
        .import::<Tick>(SocketAddr::from(([127, 0, 0, 1], 9)));
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

#[test]
#[cfg_attr(miri, ignore)]
fn a_lone_message_goes_out_at_once_without_waiting_to_fill_a_datagram() {
    // Heartbeats once an hour: nothing but the message itself could carry it out.
    let config = BridgeConfig {
        heartbeat_every: Duration::from_secs(3600),
        ..BridgeConfig::default()
    };
    let served = Bridge::bind_with(loopback(), config)
        .expect("bind")
        .name("lone-pub")
        .export::<Tick>();
    let there = served.local_addr();
    let mut a = Bus::builder();
    let feed = a.publisher::<Tick>("feed");
    a.add(served);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("lone-sub")
            .import::<Tick>(there),
    );
    let tap = b.subscription_with::<Tick>("tap", Backpressure::Block, 16);
    let (mut a, mut b) = (a.start().expect("a"), b.start().expect("b"));
    let mut feed = a.publisher(feed).expect("feed");
    let mut tap = b.subscription(tap).expect("tap");
    wait_for("the subscription", 30, || {
        metric(&a.report(), "lone-pub", "subscribers.contract.net.tick") == 1
    });
    let sent = Instant::now();
    feed.publish(Tick(7)).expect("publish");
    let got = tap.recv_timeout(Duration::from_secs(2));
    let took = sent.elapsed();
    assert_eq!(got.ok(), Some(Tick(7)), "a lone message waited {took:?}");
    assert_eq!(metric(&a.report(), "lone-pub", "messages_out"), 1);
    a.stop();
    b.stop();
    a.join().expect("a");
    b.join().expect("b");
}

#[test]
#[cfg_attr(miri, ignore)]
fn naks_to_a_best_effort_export_are_ignored_and_the_gaps_end_unrecovered() {
    let served = Bridge::bind(loopback())
        .expect("bind")
        .name("be-pub")
        .export::<Tick>();
    let relay = LossyRelay::start(served.local_addr(), Loss::EveryNth(10));
    let mut a = Bus::builder();
    a.actor("feed", ticker(Tick))
        .tick_every(Duration::from_millis(1))
        .publishes::<Tick>();
    a.add(served);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("rel-sub")
            .import_reliable::<Tick>(relay.addr),
    );
    b.actor("sink", tests::readme::sink::<Tick>())
        .subscribes::<Tick>();
    let (a, b) = (a.start().expect("a"), b.start().expect("b"));
    wait_for("NAKs sent and gaps given up", 60, || {
        let r = b.report();
        metric(&r, "rel-sub", "nak_sent") > 0 && metric(&r, "rel-sub", "unrecovered") > 0
    });
    // Delivery goes on past the unrecovered gaps.
    let before = metric(&b.report(), "rel-sub", "messages_in");
    wait_for("delivery after an unrecovered gap", 60, || {
        metric(&b.report(), "rel-sub", "messages_in") > before + 50
    });
    a.stop();
    b.stop();
    let (ra, rb) = (a.join().expect("a"), b.join().expect("b"));
    assert!(relay.dropped() > 0);
    assert_eq!(
        metric(&ra, "be-pub", "retransmitted"),
        0,
        "a best-effort export retransmitted"
    );
    assert_eq!(
        metric(&ra, "be-pub", "unavailable"),
        0,
        "a best-effort export answered a NAK"
    );
    assert!(
        metric(&ra, "be-pub", "drop.unknown_topic") > 0,
        "the NAKs were not counted as for a topic not exported reliably"
    );
    assert!(metric(&rb, "rel-sub", "unrecovered") > 0);
}
