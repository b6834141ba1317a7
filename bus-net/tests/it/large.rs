//! Large messages between two bridges on loopback: messages larger than a datagram go as
//! fragments, each in a datagram of its own, through a relay that drops (by sequence number or
//! at random), duplicates and reorders datagrams.
//!
//! ```text
//!  bus A: feed -> bridge "pub"  <==>  relay (pub side | sub side)  <==>  bridge "sub" -> sink: bus B
//! ```
//!
//! - reliable, with the pre-shared-key MAC: 1 MiB messages at 30 a second under 1% random
//!   loss (retransmissions included), duplication and reordering all arrive, in order, intact;
//! - best-effort: a message missing a fragment is dropped and counted once (`incomplete`),
//!   never delivered in part, and `lost` counts exactly the frames that never arrived;
//! - a message over the maximum message size is refused at the publisher and counted.
//! - a slow subscriber (a relay that never passes a run of 301 frames to it) slows neither the
//!   publisher nor another subscriber of the same reliable export, and what it misses beyond
//!   history is counted for it alone.

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Idle, Message, Out, Report, Setup};
use llbus_net::{parse_datagram, Bridge, BridgeConfig, Kind, ReassemblyConfig, ReliableConfig};
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.large.blob")]
struct Blob {
    n: u64,
    body: Vec<u8>,
}

const TOPIC: &str = "net.large.blob";

/// The body of message `n`: `len` bytes derived from `n`, so any misplaced or stale piece shows.
fn body(n: u64, len: usize) -> Vec<u8> {
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What the relay does to publisher -> subscriber datagrams.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// Drop the datagrams holding a data or fragment frame of these sequence numbers (first
    /// copy only).
    drop_seqs: BTreeSet<u64>,
    /// Drop every copy of `drop_seqs`, retransmissions too, not only the first.
    every_copy: bool,
    /// Drop, duplicate, and hold back (released after the next one) this many per mille of all
    /// publisher datagrams, retransmissions included.
    loss: u64,
    dup: u64,
    reorder: u64,
}

#[derive(Debug, Default)]
struct RelayLog {
    /// Sequence numbers of data and fragment frames dropped by `drop_seqs`.
    dropped: Vec<u64>,
    random_drops: u64,
    duplicated: u64,
    reordered: u64,
    /// Subscription acknowledgements seen in unsealed datagrams.
    acks: u64,
}

/// Relays datagrams between one subscriber bridge and one publisher bridge, whole (sealed
/// datagrams stay sealed).
struct Relay {
    sub_side: SocketAddr,
    log: Arc<Mutex<RelayLog>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn big_buffers(s: &UdpSocket) {
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: a valid socket, a c_int option value of the size given.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

impl Relay {
    fn start(faults: Faults, subscriber: SocketAddr, publisher: SocketAddr) -> Relay {
        let sub_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let pub_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        big_buffers(&sub_sock);
        big_buffers(&pub_sock);
        sub_sock
            .set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        pub_sock.set_nonblocking(true).unwrap();
        let sub_side = sub_sock.local_addr().unwrap();
        let log = Arc::new(Mutex::new(RelayLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (lg, st) = (Arc::clone(&log), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
            let mut chance = |permille: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % 1000 < permille
            };
            let mut seen = BTreeSet::new();
            let mut held: Option<Vec<u8>> = None;
            while !st.load(Ordering::Acquire) {
                // Subscriber -> publisher: untouched (waits up to 1 ms: the relay's idle).
                if let Ok((n, from)) = sub_sock.recv_from(&mut buf) {
                    if from == subscriber {
                        let _ = pub_sock.send_to(&buf[..n], publisher);
                    }
                }
                while let Ok((n, from)) = pub_sock.recv_from(&mut buf) {
                    if from != publisher {
                        continue;
                    }
                    let d = &buf[..n];
                    let mut log = lg.lock().unwrap();
                    // Unsealed datagrams: drop by sequence number, first copy only.
                    let mut planned = false;
                    if let Ok(frames) = parse_datagram(d, d.len()) {
                        for f in frames {
                            if f.header.kind == Kind::SubscribeAck {
                                log.acks += 1;
                            }
                            let seq = f.header.seq;
                            if matches!(f.header.kind, Kind::Data | Kind::Fragment)
                                && (seen.insert(seq) || faults.every_copy)
                                && faults.drop_seqs.contains(&seq)
                            {
                                log.dropped.push(seq);
                                planned = true;
                            }
                        }
                    }
                    if planned {
                        continue;
                    }
                    if chance(faults.loss) {
                        log.random_drops += 1;
                        continue;
                    }
                    let _ = sub_sock.send_to(d, subscriber);
                    if chance(faults.dup) {
                        log.duplicated += 1;
                        let _ = sub_sock.send_to(d, subscriber);
                    }
                    if let Some(h) = held.take() {
                        let _ = sub_sock.send_to(&h, subscriber);
                    }
                    if chance(faults.reorder) {
                        // The next datagram overtakes this copy.
                        log.reordered += 1;
                        held = Some(d.to_vec());
                    }
                }
                if let Some(h) = held.take() {
                    let _ = sub_sock.send_to(&h, subscriber);
                }
            }
        });
        Relay {
            sub_side,
            log,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Publishes `Blob { n, body(n, size) }` for n in 1..=count, one per tick, once `ready`.
struct Feed {
    out: Out<Blob>,
    next: u64,
    count: u64,
    sizes: fn(u64) -> usize,
    ready: Arc<AtomicBool>,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.ready.load(Ordering::Acquire) && self.next <= self.count {
            let n = self.next;
            ctx.publish(
                self.out,
                Blob {
                    n,
                    body: body(n, (self.sizes)(n)),
                },
            );
            self.next += 1;
        }
    }
}

/// Records each message's number; counts a corrupt one.
struct Sink {
    sizes: fn(u64) -> usize,
    seen: Arc<Mutex<Vec<u64>>>,
    count: Arc<AtomicU64>,
    corrupt: Arc<AtomicU64>,
}

impl Actor for Sink {
    type In = Blob;
    fn on_message(&mut self, b: Blob, _ctx: &mut Context<'_>) {
        if b.body != body(b.n, (self.sizes)(b.n)) {
            self.corrupt.fetch_add(1, Ordering::Release);
        }
        self.seen.lock().unwrap().push(b.n);
        self.count.fetch_add(1, Ordering::Release);
    }
}

struct Rig {
    a: llbus::RunningBus,
    b: llbus::RunningBus,
    relay: Relay,
    seen: Arc<Mutex<Vec<u64>>>,
    count: Arc<AtomicU64>,
    corrupt: Arc<AtomicU64>,
}

impl Rig {
    fn start(
        config: BridgeConfig,
        faults: Faults,
        reliable: bool,
        count: u64,
        tick: Duration,
        sizes: fn(u64) -> usize,
    ) -> Rig {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let publisher = Bridge::bind_with(loopback, config.clone())
            .unwrap()
            .name("pub");
        let subscriber = Bridge::bind_with(loopback, config).unwrap().name("sub");
        let relay = Relay::start(faults, subscriber.local_addr(), publisher.local_addr());
        let (publisher, subscriber) = if reliable {
            (
                publisher.export_reliable::<Blob>(),
                subscriber.import_reliable::<Blob>(relay.sub_side),
            )
        } else {
            (
                publisher.export::<Blob>(),
                subscriber.import::<Blob>(relay.sub_side),
            )
        };
        let ready = Arc::new(AtomicBool::new(false));
        let a = feed_bus(publisher, count, tick, sizes, &ready);
        let (
            b,
            Sunk {
                seen,
                count,
                corrupt,
            },
        ) = sink_bus(subscriber, sizes, 1 << 10);
        // The publisher acknowledges a subscriber once it has added it; sealed, the
        // acknowledgement is not seen and the gauge (refreshed every second) tells.
        wait_for("the subscription to reach the publisher", 20, || {
            relay.log.lock().unwrap().acks > 0
                || metric(&a.report(), "pub", &format!("subscribers.{TOPIC}")) == 1
        });
        ready.store(true, Ordering::Release);
        Rig {
            a,
            b,
            relay,
            seen,
            count,
            corrupt,
        }
    }

    fn delivered(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Waits up to `secs` for `n` deliveries; on timeout, fails with both bridges' figures.
    fn wait_delivered(&self, n: u64, secs: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        while self.delivered() < n {
            if std::time::Instant::now() > deadline {
                let (ra, rb) = (self.a.report(), self.b.report());
                let figures = |r: &Report, actor: &str, names: &[&str]| {
                    names
                        .iter()
                        .map(|m| format!("{m}={}", metric(r, actor, m)))
                        .chain(llbus_net::DropReason::ALL.iter().filter_map(|d| {
                            let m = format!("drop.{}", d.name());
                            let v = metric(r, actor, &m);
                            (v > 0).then(|| format!("{m}={v}"))
                        }))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                panic!(
                    "timed out after {secs} s: {} of {n} delivered\npub: {}\nsub: {}\nrelay: {:?}",
                    self.delivered(),
                    figures(
                        &ra,
                        "pub",
                        &[
                            "messages_out",
                            "datagrams_out",
                            "datagrams_in",
                            "retransmitted",
                            "unavailable",
                            "send_dropped"
                        ]
                    ),
                    figures(
                        &rb,
                        "sub",
                        &["messages_in", "datagrams_in", "nak_sent", "unrecovered"]
                    ),
                    self.relay.log.lock().unwrap(),
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops both buses: the publisher's and the subscriber's final reports, what the sink saw.
    fn stop(self) -> (Report, Report, Vec<u64>, RelayLog) {
        self.b.stop();
        self.a.stop();
        let rb = self.b.join().expect("bus b stops cleanly");
        let ra = self.a.join().expect("bus a stops cleanly");
        println!("{ra}\n{rb}");
        let log = std::mem::take(&mut *self.relay.log.lock().unwrap());
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        (ra, rb, seen, log)
    }
}

/// The large message size of the reliable test: 1 MiB in a release build. NB: an unoptimised
/// build serialises a `Vec<u8>` byte by byte through serde at about 1 MB/s per pass, so one
/// 1 MiB message takes the publisher's bridge about a second; `cargo test` (debug) therefore
/// uses 64 KiB messages at the same rate. The 1 MiB-at-30/s proof in the user's setting is
/// `tests/it/net/netns.rs::reliable_1mb_messages_at_30_per_second_under_1pct_loss` (release examples, two
/// namespaces), and this test at 1 MiB with `cargo test --release`.
const LARGE: usize = if cfg!(debug_assertions) {
    64 << 10
} else {
    1 << 20
};

/// Large messages (see [`LARGE`]) at 30 a second for 1 s on a reliable topic with the
/// pre-shared-key MAC, through 1% random loss (retransmissions included), 1% duplication and
/// 1% reordering: every message arrives once, in order, intact; nothing is unrecovered or
/// incomplete; nothing fails the MAC.
#[test]
#[cfg_attr(miri, ignore)]
fn reliable_large_messages_at_30_per_second_with_mac_through_1_percent_loss() {
    let _cpu = crate::fixtures::cpu_hungry();
    const N: u64 = 30;
    // History and reorder buffer sized for a few messages: 4096 frames, 5.75 MiB each side.
    let config = BridgeConfig {
        psk: Some([0x5a; 32]),
        reliable: ReliableConfig {
            history: 4096,
            reorder: 4096,
            ..ReliableConfig::default()
        },
        ..BridgeConfig::default()
    };
    let faults = Faults {
        loss: 10,
        dup: 10,
        reorder: 10,
        ..Faults::default()
    };
    let rig = Rig::start(config, faults, true, N, Duration::from_millis(33), |_| {
        LARGE
    });
    rig.wait_delivered(N, 60);
    let corrupt = rig.corrupt.load(Ordering::Acquire);
    let (ra, rb, seen, log) = rig.stop();
    assert_eq!(corrupt, 0, "every body intact");
    assert_eq!(
        seen,
        (1..=N).collect::<Vec<_>>(),
        "every message once, in order"
    );
    assert!(log.random_drops > 0 && log.duplicated > 0, "{log:?}");
    assert_eq!(metric(&rb, "sub", "unrecovered"), 0);
    assert_eq!(metric(&rb, "sub", "drop.incomplete"), 0);
    assert_eq!(metric(&rb, "sub", "drop.bad_fragment"), 0);
    assert_eq!(metric(&rb, "sub", "drop.bad_mac"), 0);
    assert!(metric(&rb, "sub", "nak_sent") > 0);
    assert!(metric(&ra, "pub", "retransmitted") > 0);
    assert_eq!(metric(&rb, "sub", "messages_in"), N);
    // Each message went as datagrams of at most 1472 bytes (sealed): no IP fragmentation.
    let per_message = (LARGE / 1472) as u64;
    assert!(metric(&ra, "pub", "datagrams_out") > N * per_message);
}

/// Best-effort 20 KiB messages (15 fragments each) with planned losses: message 3 loses one
/// fragment, message 5 all of them, message 8 two. Exactly those are not delivered; 3 and 8 are
/// counted `incomplete` (5 left nothing to reassemble), and `lost` is exactly the frames dropped.
/// A reassembly is given up after 300 ms (default 1 s), so that the incomplete ones are
/// counted soon.
#[test]
#[cfg_attr(miri, ignore)]
fn best_effort_drops_and_counts_a_message_missing_a_fragment() {
    let _cpu = crate::fixtures::cpu_shared();
    const N: u64 = 12;
    const FRAGMENTS: u64 = 15;
    let size = |_| 20 * 1024;
    // Message n takes sequence numbers (n - 1) * 15 + 1 ..= n * 15.
    let frag = |n: u64, i: u64| (n - 1) * FRAGMENTS + 1 + i;
    let mut drop_seqs: BTreeSet<u64> = [frag(3, 7), frag(8, 0), frag(8, 14)].into();
    drop_seqs.extend((0..FRAGMENTS).map(|i| frag(5, i)));
    let faults = Faults {
        drop_seqs: drop_seqs.clone(),
        ..Faults::default()
    };
    let config = BridgeConfig {
        reassembly: ReassemblyConfig {
            timeout: Duration::from_millis(300),
            ..ReassemblyConfig::default()
        },
        ..BridgeConfig::default()
    };
    let rig = Rig::start(config, faults, false, N, Duration::from_millis(20), size);
    wait_for("the delivered and the incomplete", 30, || {
        let r = rig.b.report();
        rig.delivered() == N - 3 && metric(&r, "sub", "drop.incomplete") == 2
    });
    // Heartbeats (every 100 ms) later, nothing moved; the reports at stop are refreshed.
    std::thread::sleep(Duration::from_millis(300));
    let corrupt = rig.corrupt.load(Ordering::Acquire);
    let (ra, rb, seen, log) = rig.stop();
    assert_eq!(corrupt, 0);
    assert_eq!(log.dropped, drop_seqs.iter().copied().collect::<Vec<_>>());
    assert_eq!(seen, [1, 2, 4, 6, 7, 9, 10, 11, 12]);
    assert_eq!(metric(&rb, "sub", "drop.incomplete"), 2);
    assert_eq!(metric(&rb, "sub", "lost"), drop_seqs.len() as u64);
    assert_eq!(metric(&rb, "sub", "messages_in"), N - 3);
    assert_eq!(metric(&ra, "pub", "messages_out"), N);
    assert_eq!(metric(&ra, "pub", "too_large"), 0);
}

/// A message over the maximum message size is refused at the publisher (counted, logged) and
/// the next ones still go; a small and a fragmented message round the refused one arrive.
#[test]
#[cfg_attr(miri, ignore)]
fn a_message_over_the_maximum_size_is_refused_and_counted() {
    let _cpu = crate::fixtures::cpu_shared();
    let config = BridgeConfig {
        reassembly: ReassemblyConfig {
            max_message: 64 * 1024,
            ..ReassemblyConfig::default()
        },
        ..BridgeConfig::default()
    };
    let sizes = |n| match n {
        1 => 10,
        2 => 100 * 1024,
        _ => 60 * 1024,
    };
    let rig = Rig::start(
        config,
        Faults::default(),
        true,
        3,
        Duration::from_millis(20),
        sizes,
    );
    wait_for("messages 1 and 3", 20, || rig.delivered() == 2);
    let (ra, rb, seen, _) = rig.stop();
    assert_eq!(seen, [1, 3]);
    assert_eq!(metric(&ra, "pub", "too_large"), 1);
    assert_eq!(metric(&ra, "pub", "messages_out"), 2);
    assert_eq!(metric(&rb, "sub", "unrecovered"), 0);
}

/// A bus with a feed of `count` `Blob`s (one per `tick` once `ready`, `sizes(n)` bytes each)
/// and `bridge` (an export), parked.
fn feed_bus(
    bridge: Bridge,
    count: u64,
    tick: Duration,
    sizes: fn(u64) -> usize,
    ready: &Arc<AtomicBool>,
) -> llbus::RunningBus {
    let mut a = Bus::builder();
    let r = Arc::clone(ready);
    a.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        next: 1,
        count,
        sizes,
        ready: Arc::clone(&r),
    })
    .tick_every(tick)
    .idle(Idle::Park)
    .publishes::<Blob>();
    a.add(bridge).idle(Idle::Park);
    a.start().expect("the publisher's bus starts")
}

/// What a sink records: the numbers seen in order, how many, how many were corrupt.
struct Sunk {
    seen: Arc<Mutex<Vec<u64>>>,
    count: Arc<AtomicU64>,
    corrupt: Arc<AtomicU64>,
}

/// A bus with a sink of `Blob`s (`sizes(n)` bytes each, ring `capacity`) and `bridge` (an
/// import), parked.
fn sink_bus(bridge: Bridge, sizes: fn(u64) -> usize, capacity: usize) -> (llbus::RunningBus, Sunk) {
    let sunk = Sunk {
        seen: Arc::new(Mutex::new(Vec::new())),
        count: Arc::new(AtomicU64::new(0)),
        corrupt: Arc::new(AtomicU64::new(0)),
    };
    let (s2, c2, k2) = (
        Arc::clone(&sunk.seen),
        Arc::clone(&sunk.count),
        Arc::clone(&sunk.corrupt),
    );
    let mut b = Bus::builder();
    b.actor("sink", move |_: &mut Setup<'_>| Sink {
        sizes,
        seen: Arc::clone(&s2),
        count: Arc::clone(&c2),
        corrupt: Arc::clone(&k2),
    })
    .idle(Idle::Park)
    .default_capacity(capacity)
    .subscribes::<Blob>();
    b.add(bridge).idle(Idle::Park);
    (b.start().expect("a subscriber's bus starts"), sunk)
}

/// A slow subscriber (behind a relay that loses a run of datagrams far longer than the
/// publisher's history) slows neither the publisher nor the other subscriber: the fast one gets
/// every message in order, the publisher's feed never finds its ring full, and what the slow
/// one asked for after it had left history is counted for it alone (`BridgeStatus::missed`
/// names one subscriber, not the fast one), while it still gets the rest in order.
#[test]
fn a_slow_subscriber_slows_no_one_and_its_misses_are_counted_for_it_alone() {
    let _cpu = crate::fixtures::cpu_hungry();
    const COUNT: u64 = 2000;
    let config = BridgeConfig {
        reliable: ReliableConfig {
            history: 64,
            ..ReliableConfig::default()
        },
        ..BridgeConfig::default()
    };
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let publisher = Bridge::bind_with(loopback, config.clone())
        .unwrap()
        .name("pub");
    let fast = Bridge::bind_with(loopback, config.clone())
        .unwrap()
        .name("fast");
    let slow = Bridge::bind_with(loopback, config).unwrap().name("slow");
    let fast_addr = fast.local_addr();
    // Sequence numbers 500..=800 never reach the slow subscriber, retransmitted or not: it
    // NAKs them until they leave the publisher's history (64 frames) and its gap deadline.
    let faults = Faults {
        drop_seqs: (500..=800).collect(),
        every_copy: true,
        ..Faults::default()
    };
    let relay = Relay::start(faults, slow.local_addr(), publisher.local_addr());
    let publisher = publisher.export_reliable::<Blob>();
    let status = publisher.status();
    let pub_addr = publisher.local_addr();
    let fast = fast.import_reliable::<Blob>(pub_addr);
    let slow = slow.import_reliable::<Blob>(relay.sub_side);

    let ready = Arc::new(AtomicBool::new(false));
    let a = feed_bus(
        publisher,
        COUNT,
        Duration::from_micros(200),
        |_| 100,
        &ready,
    );
    let (fast_bus, fast) = sink_bus(fast, |_| 100, 1 << 14);
    let (slow_bus, slow) = sink_bus(slow, |_| 100, 1 << 14);
    let (fast_seen, fast_corrupt) = (fast.seen, fast.corrupt);
    let (slow_seen, slow_corrupt) = (slow.seen, slow.corrupt);
    wait_for("both subscriptions to reach the publisher", 20, || {
        metric(&a.report(), "pub", &format!("subscribers.{TOPIC}")) == 2
    });
    ready.store(true, Ordering::Release);

    wait_for("the fast subscriber to get every message", 60, || {
        fast_seen.lock().unwrap().len() as u64 >= COUNT
    });
    // The slow one gets the tail too (heartbeats show it the last sequence number).
    wait_for("the slow subscriber to reach the last message", 60, || {
        slow_seen.lock().unwrap().last() == Some(&COUNT)
    });
    // The bridges publish their figures once a second.
    wait_for(
        "the slow subscriber's bridge to report the hole",
        20,
        || metric(&slow_bus.report(), "slow", "unrecovered") >= 301,
    );
    wait_for(
        "the publisher's bridge to count what the slow one missed",
        20,
        || !status.missed().is_empty(),
    );
    let (fast_report, slow_report) = (fast_bus.report(), slow_bus.report());
    let pub_report = a.report();
    drop(relay);
    for bus in [a, fast_bus, slow_bus] {
        bus.stop();
        bus.join().expect("a bus stops cleanly");
    }

    // The fast subscriber: everything, in order, intact, nothing unrecovered.
    let fast_seen = fast_seen.lock().unwrap().clone();
    assert_eq!(fast_seen, (1..=COUNT).collect::<Vec<_>>());
    assert_eq!(fast_corrupt.load(Ordering::Acquire), 0);
    assert_eq!(metric(&fast_report, "fast", "unrecovered"), 0);
    // The publisher: its feed never waited for room or dropped (the bridge never waits).
    let edge = pub_report
        .edges
        .iter()
        .find(|e| e.publisher == "feed")
        .expect("the feed's edge");
    assert_eq!((edge.waited, edge.dropped), (0, 0), "{edge:?}");
    // The slow subscriber: in order, intact, with a hole it was told about.
    let slow_seen = slow_seen.lock().unwrap().clone();
    assert!(slow_seen.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(slow_corrupt.load(Ordering::Acquire), 0);
    // The run it never got is reported; on a loaded machine a frame or two beside it can also
    // leave the publisher's 64-frame history before the NAK for it arrives (a CI run saw 302),
    // so the count is at least the run, at most a history more, and it accounts for exactly
    // what did not arrive.
    let unrecovered = metric(&slow_report, "slow", "unrecovered");
    assert!(
        (301..=301 + 64).contains(&unrecovered),
        "the run it never got is reported: {unrecovered}"
    );
    assert_eq!(slow_seen.len() as u64 + unrecovered, COUNT);
    assert!(!slow_seen.iter().any(|n| (500..=800).contains(n)));
    // Counted for it alone.
    let missed = status.missed();
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_ne!(missed[0].subscriber, fast_addr);
    assert_eq!(&*missed[0].topic, TOPIC);
    assert!(missed[0].missed > 0, "{missed:?}");
}
