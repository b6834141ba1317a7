//! Byte-for-byte compatibility with ll-udp-pubsub v0.1 (`/work/shared/NOTES.md`,
//! `docs/PROTOCOL.md`), with a raw socket playing the other side: an ll-udp-pubsub subscriber
//! against our `export_compat`, an ll-udp-pubsub publisher against our `import_compat`.
//!
//! The wire: data is bincode 1 of `Packet<T> { data: T, sent_ts: i64 }` (for `i64`, 16 bytes:
//! the value LE, then `CLOCK_REALTIME` ns LE); control, subscriber to publisher, is a `u32` LE,
//! `0` Subscribe, `1` Unsubscribe, sent once a second from the socket that receives the data.
//! `limits` checks its control under the allowlist, the cap and the rate limit.

mod limits;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use llbus::{Actor, Bus, Context, Idle, Message, Out, Report, RunningBus, Setup};
use llbus_net::{Bridge, DropReason};
use serde::{Deserialize, Serialize};
use tests::example_bins::free_udp_addr;
use tests::{metric, wait_for};

use crate::fixtures::drop_count;
use crate::fixtures::COMPAT_SUBSCRIBE;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(transparent)]
#[message(topic = "compat.count")]
struct Count(i64);

const UNSUBSCRIBE: [u8; 4] = [1, 0, 0, 0];

/// Publishes `Count(1)`, `Count(2)`, ... one per tick once `ready`.
struct Counter {
    out: Out<Count>,
    n: i64,
    ready: Arc<AtomicBool>,
}

impl Actor for Counter {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.ready.load(Ordering::Acquire) {
            self.n += 1;
            ctx.publish(self.out, Count(self.n));
        }
    }
}

struct Collect {
    seen: Arc<Mutex<Vec<i64>>>,
}

impl Actor for Collect {
    type In = Count;
    fn on_message(&mut self, c: Count, _ctx: &mut Context<'_>) {
        self.seen.lock().unwrap().push(c.0);
    }
}

fn stop(bus: RunningBus) -> Report {
    bus.stop();
    let report = bus.join().expect("the bus stops cleanly");
    println!("{report}");
    report
}

fn realtime_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A raw socket on loopback with a short receive timeout.
fn raw_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    s
}

/// Receives what arrives on `s` within `within`, with the sender and the time of arrival.
fn drain(s: &UdpSocket, within: Duration) -> Vec<(Vec<u8>, SocketAddr, i64)> {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 2048];
    let mut got = Vec::new();
    while Instant::now() < deadline {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            got.push((buf[..n].to_vec(), from, realtime_ns()));
        }
    }
    got
}

#[test]
#[cfg_attr(miri, ignore)]
fn export_compat_serves_a_raw_ll_udp_pubsub_subscriber_byte_for_byte() {
    let _cpu = crate::fixtures::cpu_shared();
    let compat = free_udp_addr();
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .export_compat::<Count>(compat)
        .unwrap();
    let ready = Arc::new(AtomicBool::new(true));
    let mut a = Bus::builder();
    let r = Arc::clone(&ready);
    a.actor("counter", move |s: &mut Setup<'_>| Counter {
        out: s.output(),
        n: 0,
        ready: Arc::clone(&r),
    })
    .tick_every(Duration::from_millis(2))
    .idle(Idle::Park)
    .publishes::<Count>();
    a.add(bridge).idle(Idle::Park);
    let a = a.start().expect("bus starts");
    let raw = raw_socket();

    // Malformed control, where ll-udp-pubsub's control thread panicked: counted, dropped.
    // (Trailing bytes after a valid value are allowed, as bincode 1 allowed them, so a 5-byte
    // datagram is malformed only by its value.)
    raw.send_to(&[0, 0, 0], compat).unwrap(); // 3 bytes: truncated
    raw.send_to(&[7, 0, 0, 0], compat).unwrap(); // value 7: bad control
    raw.send_to(&[7, 0, 0, 0, 0], compat).unwrap(); // 5 bytes, value 7: bad control
    wait_for("the malformed control counted", 10, || {
        let r = a.report();
        drop_count(&r, "pub", DropReason::Truncated) == 1
            && drop_count(&r, "pub", DropReason::BadControl) == 2
    });
    assert!(
        drain(&raw, Duration::from_millis(100)).is_empty(),
        "nothing sent before a subscribe"
    );
    wait_for("messages taken without a subscriber", 10, || {
        metric(&a.report(), "pub", "no_subscriber") > 0
    });

    // Subscribe: 16-byte packets, the counter then the send time, both i64 LE.
    raw.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    let got = drain(&raw, Duration::from_millis(500));
    assert!(got.len() >= 20, "only {} packets in 500 ms", got.len());
    let mut values = Vec::new();
    let mut last_ts = 0;
    for (bytes, from, arrived) in &got {
        assert_eq!(*from, compat, "sent from the compat socket");
        assert_eq!(bytes.len(), 16, "{bytes:?}");
        let value = i64::from_le_bytes(bytes[..8].try_into().unwrap());
        let sent_ts = i64::from_le_bytes(bytes[8..].try_into().unwrap());
        // CLOCK_REALTIME ns, taken just before sending: at most a little before its arrival.
        assert!(
            sent_ts <= *arrived && *arrived - sent_ts < 5_000_000_000,
            "sent_ts {sent_ts} vs arrival {arrived}"
        );
        assert!(sent_ts >= last_ts, "send times go forward");
        last_ts = sent_ts;
        values.push(value);
    }
    assert!(
        values.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive counters: {values:?}"
    );

    // Unsubscribe: after what was in flight, nothing more.
    raw.send_to(&UNSUBSCRIBE, compat).unwrap();
    let _in_flight = drain(&raw, Duration::from_millis(200));
    let no_sub = metric(&a.report(), "pub", "no_subscriber");
    let after = drain(&raw, Duration::from_millis(500));
    assert!(
        after.is_empty(),
        "{} packets after Unsubscribe",
        after.len()
    );
    assert!(metric(&a.report(), "pub", "no_subscriber") > no_sub);

    let r = stop(a);
    assert_eq!(drop_count(&r, "pub", DropReason::Truncated), 1);
    assert_eq!(drop_count(&r, "pub", DropReason::BadControl), 2);
    let total: u64 = DropReason::ALL
        .iter()
        .map(|&d| drop_count(&r, "pub", d))
        .sum();
    assert_eq!(total, 3);
}

#[test]
#[cfg_attr(miri, ignore)]
fn import_compat_subscribes_to_a_raw_ll_udp_pubsub_publisher_and_republishes() {
    let _cpu = crate::fixtures::cpu_shared();
    let raw = raw_socket();
    let publisher = raw.local_addr().unwrap();
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .import_compat::<Count>("127.0.0.1:0", publisher)
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Bus::builder();
    let s = Arc::clone(&seen);
    b.actor("sink", move |_: &mut Setup<'_>| Collect {
        seen: Arc::clone(&s),
    })
    .idle(Idle::Park)
    .subscribes::<Count>();
    b.add(bridge).idle(Idle::Park);
    let b = b.start().expect("bus starts");

    // Subscribe, exactly the 4 bytes, once a second from one socket.
    let next_control = |secs: u64| -> (Vec<u8>, SocketAddr, Instant) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut buf = [0u8; 64];
        loop {
            assert!(Instant::now() < deadline, "no control datagram");
            if let Ok((n, from)) = raw.recv_from(&mut buf) {
                return (buf[..n].to_vec(), from, Instant::now());
            }
        }
    };
    let (first, subscriber, t1) = next_control(5);
    assert_eq!(first, COMPAT_SUBSCRIBE);
    let (second, from, t2) = next_control(5);
    assert_eq!(second, COMPAT_SUBSCRIBE);
    assert_eq!(from, subscriber, "renewed from the same socket");
    let interval = t2 - t1;
    assert!(
        interval > Duration::from_millis(500) && interval < Duration::from_millis(2500),
        "renewed after {interval:?}"
    );

    // Data, as ll-udp-pubsub sends it, to the address the subscribe came from.
    for n in 1..=50i64 {
        let mut packet = [0u8; 16];
        packet[..8].copy_from_slice(&n.to_le_bytes());
        packet[8..].copy_from_slice(&realtime_ns().to_le_bytes());
        raw.send_to(&packet, subscriber).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for("the 50 values on the bus", 10, || {
        seen.lock().unwrap().len() == 50
    });
    assert_eq!(*seen.lock().unwrap(), (1..=50).collect::<Vec<i64>>());

    // A short packet from the publisher, and a packet from a stranger: counted, dropped.
    raw.send_to(&[1; 15], subscriber).unwrap();
    let stranger = raw_socket();
    let mut packet = [0u8; 16];
    packet[..8].copy_from_slice(&99i64.to_le_bytes());
    stranger.send_to(&packet, subscriber).unwrap();
    wait_for("the bad packets counted", 10, || {
        let r = b.report();
        drop_count(&r, "sub", DropReason::Truncated) == 1
            && drop_count(&r, "sub", DropReason::UnknownSender) == 1
    });

    // A graceful stop unsubscribes.
    let r = stop(b);
    let (last, from, _) = loop {
        let c = next_control(5);
        if c.0 != COMPAT_SUBSCRIBE {
            break c;
        }
    };
    assert_eq!(last, UNSUBSCRIBE);
    assert_eq!(from, subscriber);
    assert_eq!(metric(&r, "sub", "messages_in"), 50);
    assert_eq!(*seen.lock().unwrap(), (1..=50).collect::<Vec<i64>>());
}
