//! Loss, duplication and reordering between two bridges, injected by a deterministic
//! fault-injecting UDP proxy on loopback, with exact counts at the subscriber.
//!
//! ```text
//!  bus A: feed -> bridge "pub"  <==>  proxy (pub side | sub side)  <==>  bridge "sub" -> sink: bus B
//! ```
//!
//! The subscriber imports from the proxy's subscriber-side address; the publisher sees the
//! proxy's publisher-side socket as its subscriber. The proxy relays control frames untouched
//! and applies a plan to data frames by sequence number. Every frame is relayed in a datagram of
//! its own (a datagram that carries several frames is split), so the plan applies per message
//! whatever batching the publisher did.
//!
//! Beside it, through a lossy relay (`tests::relay`): NAKs to a publisher that exports nothing
//! reliably are ignored, and the subscriber's gaps run into their deadline, are reported
//! unrecovered, and delivery goes on (PROTOCOL.md, "Reliable topics").

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Idle, Message, Out, Report, Setup};
use llbus_net::{parse_datagram, Bridge, BridgeConfig, Header, Kind, LatePolicy, HEADER_LEN};
use serde::{Deserialize, Serialize};
use tests::readme::ticker;
use tests::relay::{Loss, LossyRelay};
use tests::{metric, wait_for};

use crate::fixtures::loopback;
use crate::fixtures::Beat;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.fault.tick")]
struct Tick {
    /// 1, 2, 3, ...: equal to the sequence number of its frame (the feed starts only once the
    /// subscription is in place, so no message is taken without a subscriber).
    n: u64,
}

const TOPIC: &str = "net.fault.tick";

/// What the proxy does to data frames, by sequence number.
#[derive(Clone, Debug, Default)]
struct Plan {
    drop: Vec<u64>,
    duplicate: Vec<u64>,
    /// `(held, after)`: hold `held` back and release it right after `after` is relayed.
    hold: Option<(u64, u64)>,
    /// The plan applies to the first copy of each sequence number only (a retransmission
    /// passes), so that a reliable topic can recover it.
    first_copy_only: bool,
    /// Besides the plan: drop this many per mille of all data frames (retransmissions too),
    /// chosen by a fixed-seed generator.
    loss_permille: u64,
}

/// What the proxy saw and did.
#[derive(Debug, Default)]
struct ProxyLog {
    /// Data sequence numbers received from the publisher, in arrival order.
    data: Vec<u64>,
    dropped: Vec<u64>,
    duplicated: Vec<u64>,
    released: Vec<u64>,
    /// Heartbeat `last_seq` values relayed / blocked.
    heartbeats_passed: Vec<u64>,
    heartbeats_blocked: Vec<u64>,
    /// SubscribeAck `last_seq` values relayed / blocked.
    acks_passed: Vec<u64>,
    acks_blocked: Vec<u64>,
    /// Data frames dropped at random (`Plan::loss_permille`).
    random_drops: u64,
}

/// A fault-injecting relay between one subscriber bridge and one publisher bridge.
struct Proxy {
    /// The address the subscriber imports from.
    sub_side: SocketAddr,
    /// Whether heartbeats and acknowledgements are relayed (they are unless a test says not).
    pass_heartbeats: Arc<AtomicBool>,
    pass_acks: Arc<AtomicBool>,
    log: Arc<Mutex<ProxyLog>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(plan: Plan, subscriber: SocketAddr, publisher: SocketAddr) -> Proxy {
        let sub_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let pub_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sub_sock.set_nonblocking(true).unwrap();
        pub_sock.set_nonblocking(true).unwrap();
        let sub_side = sub_sock.local_addr().unwrap();
        let pass_heartbeats = Arc::new(AtomicBool::new(true));
        let pass_acks = Arc::new(AtomicBool::new(true));
        let log = Arc::new(Mutex::new(ProxyLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ph, pa, lg, st) = (
            Arc::clone(&pass_heartbeats),
            Arc::clone(&pass_acks),
            Arc::clone(&log),
            Arc::clone(&stop),
        );
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut held: Option<Vec<u8>> = None;
            let mut copies: std::collections::HashMap<u64, u32> = Default::default();
            let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
            while !st.load(Ordering::Acquire) {
                let mut idle = true;
                // Subscriber -> publisher (Subscribe, Unsubscribe): untouched.
                while let Ok((n, from)) = sub_sock.recv_from(&mut buf) {
                    idle = false;
                    if from == subscriber {
                        let _ = pub_sock.send_to(&buf[..n], publisher);
                    }
                }
                // Publisher -> subscriber: data by plan, control untouched (unless blocked).
                while let Ok((n, from)) = pub_sock.recv_from(&mut buf) {
                    idle = false;
                    if from != publisher {
                        continue;
                    }
                    let mut out: Vec<Vec<u8>> = Vec::new();
                    let mut log = lg.lock().unwrap();
                    match parse_datagram(&buf[..n], buf.len()) {
                        Err(_) => out.push(buf[..n].to_vec()),
                        Ok(frames) => {
                            let token = frames.token();
                            for frame in frames {
                                let bytes = frame_bytes(&frame.header, frame.payload, token);
                                let seq = frame.header.seq;
                                match frame.header.kind {
                                    Kind::Data => {
                                        log.data.push(seq);
                                        let copy = copies.entry(seq).or_insert(0);
                                        *copy += 1;
                                        let planned = !plan.first_copy_only || *copy == 1;
                                        rng ^= rng << 13;
                                        rng ^= rng >> 7;
                                        rng ^= rng << 17;
                                        // The plan's drops come first, so that the random
                                        // loss never takes a planned one's place.
                                        if planned && plan.drop.contains(&seq) {
                                            log.dropped.push(seq);
                                        } else if rng % 1000 < plan.loss_permille {
                                            log.random_drops += 1;
                                        } else if !planned {
                                            out.push(bytes);
                                        } else if plan.hold.is_some_and(|(h, _)| h == seq) {
                                            held = Some(bytes);
                                        } else {
                                            out.push(bytes.clone());
                                            if plan.duplicate.contains(&seq) {
                                                log.duplicated.push(seq);
                                                out.push(bytes);
                                            }
                                            if plan.hold.is_some_and(|(_, after)| after == seq) {
                                                if let Some(h) = held.take() {
                                                    log.released.push(plan.hold.unwrap().0);
                                                    out.push(h);
                                                }
                                            }
                                        }
                                    }
                                    Kind::Heartbeat => {
                                        if ph.load(Ordering::Acquire) {
                                            log.heartbeats_passed.push(seq);
                                            out.push(bytes);
                                        } else {
                                            log.heartbeats_blocked.push(seq);
                                        }
                                    }
                                    Kind::SubscribeAck => {
                                        // An acknowledgement before any data (last_seq 0)
                                        // always passes: it establishes the session the
                                        // import follows, and reveals nothing.
                                        if pa.load(Ordering::Acquire) || seq == 0 {
                                            log.acks_passed.push(seq);
                                            out.push(bytes);
                                        } else {
                                            log.acks_blocked.push(seq);
                                        }
                                    }
                                    _ => out.push(bytes),
                                }
                            }
                        }
                    }
                    drop(log);
                    for datagram in &out {
                        let _ = sub_sock.send_to(datagram, subscriber);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        Proxy {
            sub_side,
            pass_heartbeats,
            pass_acks,
            log,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One frame as a datagram: its header, rewritten, its payload, and the subscription token
/// its datagram ended with (a frame relayed alone keeps its token).
fn frame_bytes(header: &Header, payload: &[u8], token: Option<u64>) -> Vec<u8> {
    let mut head = [0u8; HEADER_LEN];
    header.write(&mut head);
    let mut v = head.to_vec();
    v.extend_from_slice(payload);
    v.extend(token.map(u64::to_le_bytes).into_iter().flatten());
    v
}

/// Publishes `Tick { n }` for n in 1..=count, one per tick, once `ready`.
struct Feed {
    out: Out<Tick>,
    next: u64,
    count: u64,
    ready: Arc<AtomicBool>,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.ready.load(Ordering::Acquire) && self.next <= self.count {
            ctx.publish(self.out, Tick { n: self.next });
            self.next += 1;
        }
    }
}

struct Sink {
    seen: Arc<Mutex<Vec<u64>>>,
    count: Arc<AtomicU64>,
}

impl Actor for Sink {
    type In = Tick;
    fn on_message(&mut self, t: Tick, _ctx: &mut Context<'_>) {
        self.seen.lock().unwrap().push(t.n);
        self.count.fetch_add(1, Ordering::Release);
    }
}

/// Every drop reason of a bridge, summed.
fn drops(r: &Report, actor: &str) -> u64 {
    llbus_net::DropReason::ALL
        .iter()
        .map(|d| metric(r, actor, &format!("drop.{}", d.name())))
        .sum()
}

/// A running publisher bus and subscriber bus joined through a proxy.
struct Rig {
    a: llbus::RunningBus,
    b: llbus::RunningBus,
    proxy: Proxy,
    ready: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<u64>>>,
    count: Arc<AtomicU64>,
}

impl Rig {
    fn start(plan: Plan, late: LatePolicy, count: u64, pass_last_seq: bool) -> Rig {
        Rig::start_with(plan, late, count, pass_last_seq, false)
    }

    /// As `start`; with `reliable`, the topic is exported and imported reliably.
    fn start_with(
        plan: Plan,
        late: LatePolicy,
        count: u64,
        pass_last_seq: bool,
        reliable: bool,
    ) -> Rig {
        let config = BridgeConfig {
            late,
            ..BridgeConfig::default()
        };
        let publisher = Bridge::bind_with(loopback(), config.clone())
            .unwrap()
            .name("pub");
        let subscriber = Bridge::bind_with(loopback(), config).unwrap().name("sub");
        let proxy = Proxy::start(plan, subscriber.local_addr(), publisher.local_addr());
        proxy
            .pass_heartbeats
            .store(pass_last_seq, Ordering::Release);
        proxy.pass_acks.store(pass_last_seq, Ordering::Release);
        let (publisher, subscriber) = if reliable {
            (
                publisher.export_reliable::<Tick>(),
                subscriber.import_reliable::<Tick>(proxy.sub_side),
            )
        } else {
            (
                publisher.export::<Tick>(),
                subscriber.import::<Tick>(proxy.sub_side),
            )
        };

        let ready = Arc::new(AtomicBool::new(false));
        let mut a = Bus::builder();
        let r = Arc::clone(&ready);
        a.actor("feed", move |s: &mut Setup<'_>| Feed {
            out: s.output(),
            next: 1,
            count,
            ready: Arc::clone(&r),
        })
        .tick_every(Duration::from_millis(2))
        .idle(Idle::Park)
        .publishes::<Tick>();
        a.add(publisher).idle(Idle::Park);

        let seen = Arc::new(Mutex::new(Vec::new()));
        let counter = Arc::new(AtomicU64::new(0));
        let mut b = Bus::builder();
        let (s2, c2) = (Arc::clone(&seen), Arc::clone(&counter));
        b.actor("sink", move |_: &mut Setup<'_>| Sink {
            seen: Arc::clone(&s2),
            count: Arc::clone(&c2),
        })
        .idle(Idle::Park)
        .subscribes::<Tick>();
        b.add(subscriber).idle(Idle::Park);

        let a = a.start().expect("bus a starts");
        let b = b.start().expect("bus b starts");
        // The publisher acknowledges a subscriber once it has added it.
        wait_for("the subscription to reach the publisher", 20, || {
            let log = proxy.log.lock().unwrap();
            !log.acks_passed.is_empty() || !log.acks_blocked.is_empty()
        });
        ready.store(true, Ordering::Release);
        Rig {
            a,
            b,
            proxy,
            ready,
            seen,
            count: counter,
        }
    }

    fn delivered(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Stops both buses; returns the subscriber's final report and what the sink saw.
    fn stop(self) -> (Report, Vec<u64>, ProxyLog) {
        let (_, report_b, seen, log) = self.stop_both();
        (report_b, seen, log)
    }

    /// Stops both buses; returns the publisher's and the subscriber's final reports and what
    /// the sink saw.
    fn stop_both(self) -> (Report, Report, Vec<u64>, ProxyLog) {
        assert!(self.ready.load(Ordering::Acquire));
        self.b.stop();
        self.a.stop();
        let report_b = self.b.join().expect("bus b stops cleanly");
        let report_a = self.a.join().expect("bus a stops cleanly");
        println!("{report_a}\n{report_b}");
        let log = std::mem::take(&mut *self.proxy.log.lock().unwrap());
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        (report_a, report_b, seen, log)
    }
}

fn fault_plan() -> Plan {
    Plan {
        drop: vec![5, 6, 50],
        duplicate: vec![10, 70],
        hold: Some((20, 25)),
        ..Plan::default()
    }
}

/// Runs the scripted faults over `N` messages under `late`; returns the subscriber's final
/// report, what the sink saw, and the proxy's log.
fn run_faults(late: LatePolicy, expect_delivered: u64) -> (Report, Vec<u64>, ProxyLog) {
    const N: u64 = 100;
    let rig = Rig::start(fault_plan(), late, N, true);
    // The losses and the late message are counted as the messages after them arrive, so by
    // the last delivery; the report at stop is refreshed with them, and the callers check it.
    wait_for("every message delivered", 30, || {
        rig.delivered() == expect_delivered
    });
    // Several heartbeats (every 100 ms) later, nothing has moved.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rig.delivered(), expect_delivered);
    let (report, seen, log) = rig.stop();
    assert_eq!(log.dropped, [5, 6, 50], "{log:?}");
    assert_eq!(log.duplicated, [10, 70], "{log:?}");
    assert_eq!(log.released, [20], "{log:?}");
    assert_eq!(
        log.data.iter().copied().collect::<BTreeSet<_>>(),
        (1..=N).collect::<BTreeSet<_>>(),
        "the publisher sent each of 1..={N} (once: it never retransmits)"
    );
    assert_eq!(log.data.len() as u64, N);
    (report, seen, log)
}

/// Asserts the counts every fault run shares.
fn assert_common(r: &Report) {
    assert_eq!(metric(r, "sub", "lost"), 3, "seq 5, 6 and 50 never arrived");
    assert_eq!(metric(r, "sub", "duplicates"), 2, "seq 10 and 70 twice");
    assert_eq!(metric(r, "sub", "reordered"), 1, "seq 20 after 25");
    assert_eq!(metric(r, "sub", "stale"), 0);
    assert_eq!(metric(r, "sub", "publisher_restarts"), 0);
    assert_eq!(drops(r, "sub"), 0, "no datagram was malformed");
}

#[test]
#[cfg_attr(miri, ignore)]
fn loss_duplicates_and_reordering_are_counted_exactly_late_delivered() {
    let _cpu = crate::fixtures::cpu_shared();
    // Delivered: 100 sent, 5, 6 and 50 lost, duplicates dropped, 20 delivered late.
    let (r, seen, _log) = run_faults(LatePolicy::Deliver, 97);
    assert_common(&r);
    assert_eq!(metric(&r, "sub", "late_dropped"), 0);
    assert_eq!(metric(&r, "sub", "messages_in"), 97);
    let expected: BTreeSet<u64> = (1..=100).filter(|n| ![5, 6, 50].contains(n)).collect();
    assert_eq!(seen.len(), 97, "each message once: {seen:?}");
    assert_eq!(seen.iter().copied().collect::<BTreeSet<_>>(), expected);
    // 20 arrived after 25, everything else in order.
    let pos = |n: u64| seen.iter().position(|&m| m == n).unwrap();
    assert!(pos(20) > pos(25), "{seen:?}");
    let without_20: Vec<u64> = seen.iter().copied().filter(|&n| n != 20).collect();
    assert!(without_20.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let edge = r.edge(TOPIC, "sub", "sink").unwrap();
    assert_eq!((edge.published, edge.dropped, edge.handled), (97, 0, 97));
}

#[test]
#[cfg_attr(miri, ignore)]
fn loss_duplicates_and_reordering_are_counted_exactly_late_dropped() {
    let _cpu = crate::fixtures::cpu_shared();
    // Delivered: as above, less 20, which arrives late and is dropped by the policy.
    let (r, seen, _log) = run_faults(LatePolicy::Drop, 96);
    assert_common(&r);
    assert_eq!(metric(&r, "sub", "late_dropped"), 1);
    assert_eq!(metric(&r, "sub", "messages_in"), 96);
    let expected: Vec<u64> = (1..=100).filter(|n| ![5, 6, 20, 50].contains(n)).collect();
    assert_eq!(seen, expected, "in order, without the late one");
}

#[test]
#[cfg_attr(miri, ignore)]
fn loss_at_the_end_of_a_burst_is_noticed_thanks_to_heartbeats() {
    let _cpu = crate::fixtures::cpu_shared();
    const N: u64 = 30;
    let plan = Plan {
        drop: vec![28, 29, 30],
        ..Plan::default()
    };
    // Heartbeats and acknowledgements (which also carry the last sequence number) blocked,
    // but for the acknowledgements sent before any message (last_seq 0), which establish the
    // publisher session the import follows.
    let rig = Rig::start(plan, LatePolicy::Deliver, N, false);
    wait_for("the first 27 messages", 30, || rig.delivered() == 27);
    wait_for("the proxy to see the last three", 30, || {
        rig.proxy.log.lock().unwrap().dropped.len() == 3
    });
    // Without a heartbeat the subscriber cannot know 28..=30 were ever sent: three heartbeats
    // with last_seq 30 blocked and a metrics refresh later, nothing is lost. A refresh shows
    // as the subscriber's own datagrams (a renewal a second) moving in its metrics.
    wait_for("three heartbeats of the tail blocked", 10, || {
        let log = rig.proxy.log.lock().unwrap();
        log.heartbeats_blocked.iter().filter(|&&s| s == N).count() >= 3
    });
    let out = || metric(&rig.b.report(), "sub", "datagrams_out");
    let before = out();
    wait_for("a metrics refresh", 10, || out() != before);
    assert_eq!(metric(&rig.b.report(), "sub", "lost"), 0);
    assert!(
        rig.proxy
            .log
            .lock()
            .unwrap()
            .heartbeats_blocked
            .contains(&N),
        "the publisher did send heartbeats with last_seq {N}"
    );
    // Let heartbeats through (acknowledgements stay blocked): the tail loss is counted.
    // The subscriber counts the loss as a heartbeat arrives (two passed: the first had a
    // heartbeat period to arrive); the report at stop is refreshed.
    rig.proxy.pass_heartbeats.store(true, Ordering::Release);
    wait_for("two heartbeats of the tail passed", 10, || {
        let log = rig.proxy.log.lock().unwrap();
        log.heartbeats_passed.iter().filter(|&&s| s == N).count() >= 2
    });
    let (r, seen, log) = rig.stop();
    assert!(log.heartbeats_passed.contains(&N), "{log:?}");
    assert!(log.acks_passed.iter().all(|&s| s == 0), "{log:?}");
    assert_eq!(metric(&r, "sub", "lost"), 3);
    assert_eq!(metric(&r, "sub", "duplicates"), 0);
    assert_eq!(metric(&r, "sub", "reordered"), 0);
    assert_eq!(seen, (1..=27).collect::<Vec<_>>());
}

/// A reliable topic through the same faults, plus 5% of all data frames (retransmissions
/// included) dropped at random and the last two messages' first copies lost (only a heartbeat
/// reveals them): every message arrives, once, in order; nothing is unrecovered; the
/// publisher retransmitted what was NAKed.
#[test]
#[cfg_attr(miri, ignore)]
fn reliable_topic_delivers_every_message_in_order_at_5_percent_loss() {
    let _cpu = crate::fixtures::cpu_shared();
    const N: u64 = 300;
    let plan = Plan {
        drop: vec![5, 6, 50, N - 1, N],
        duplicate: vec![10, 70],
        hold: Some((20, 25)),
        first_copy_only: true,
        loss_permille: 50,
    };
    let rig = Rig::start_with(plan, LatePolicy::Deliver, N, true, true);
    wait_for("every message delivered", 60, || rig.delivered() == N);
    // A gap deadline (500 ms) later, nothing more arrived and nothing was given up; the
    // reports at stop are refreshed.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rig.delivered(), N);
    let (report_a, r, seen, log) = rig.stop_both();
    assert_eq!(
        seen,
        (1..=N).collect::<Vec<_>>(),
        "every message once, in order"
    );
    assert!(log.random_drops > 0, "{log:?}");
    assert_eq!(log.dropped, [5, 6, 50, N - 1, N], "{log:?}");
    assert_eq!(metric(&r, "sub", "unrecovered"), 0);
    assert_eq!(metric(&r, "sub", "lost"), 0);
    assert!(metric(&r, "sub", "nak_sent") > 0);
    let retransmitted = metric(&report_a, "pub", "retransmitted");
    assert!(
        retransmitted >= log.random_drops.min(N) / 2 && retransmitted > 5,
        "retransmitted {retransmitted}, random drops {}",
        log.random_drops
    );
    assert_eq!(drops(&r, "sub"), 0, "no datagram was malformed or refused");
    assert_eq!(metric(&r, "sub", "messages_in"), N);
}

#[test]
#[cfg_attr(miri, ignore)]
fn naks_to_a_best_effort_export_are_ignored_and_the_gaps_end_unrecovered() {
    let _cpu = crate::fixtures::cpu_shared();
    let served = Bridge::bind(loopback())
        .expect("bind")
        .name("be-pub")
        .export::<Beat>();
    let relay = LossyRelay::start(served.local_addr(), Loss::EveryNth(10));
    let mut a = Bus::builder();
    a.actor("feed", ticker(Beat))
        .tick_every(Duration::from_millis(1))
        .publishes::<Beat>();
    a.add(served);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("rel-sub")
            .import_reliable::<Beat>(relay.addr),
    );
    b.actor("sink", tests::readme::sink::<Beat>())
        .subscribes::<Beat>();
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
