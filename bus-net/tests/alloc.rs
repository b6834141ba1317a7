//! Zero allocation per message in the steady state, in a binary of its own: the process is the
//! fixture (a counting global allocator). Two parts:
//!
//! - the protocol's pieces, counted per thread (so the test harness's own threads do not
//!   interfere): encode of a batch, decode iteration, payload decode, control frames, sequence
//!   tracking, the subscriber table, the compat format, cookie issue and verify, MAC seal and
//!   open, allowlist and rate-limit checks, and batched socket send and receive over loopback,
//!   each after a warm-up;
//! - whole bridges (module `bridges`), counted on every thread: two buses joined by bridges over
//!   loopback exchange a tick-paced stream, and no allocation happens while at least 200k
//!   messages (20k on a slow machine) cross, timers included (heartbeats every 100 ms, renewals
//!   and expiry every second, metric refreshes). The same holds for a reliable topic whose
//!   datagrams a relay drops 1 in 100 of: NAKs, retransmissions from history and the reorder
//!   buffer allocate nothing either. And for large messages (6 KiB, five fragments each) on a
//!   reliable topic through the same relay: fragmenting, history, retransmission and reassembly
//!   allocate nothing once the buffers have grown.
//!
//! Every test holds [`serial`] throughout: the bridge tests count every thread's allocations,
//! so no other test may run (and allocate) beside them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, parse_datagram, Allowlist,
    BatchEncoder, Control, CookieJar, DataMeta, DropCounts, DropReason, EncodeError, FrameMac,
    LatePolicy, RateLimiter, RecvBatch, ReplayGuard, SendBatch, SeqTracker, SocketConfig,
    SubscriberTable, UdpEndpoint, DEFAULT_COOKIE_WINDOW, DEFAULT_MAX_DATAGRAM,
    DEFAULT_SUBSCRIBER_TIMEOUT, MAC_TAG_LEN,
};
use serde::{Deserialize, Serialize};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// One test at a time: the bridge tests count the allocations of every thread, and a test
/// starting or stopping its buses beside another's measurement would be counted in it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary to the calling test until the guard drops.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Allocations made by this thread while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOC.thread_allocations();
    let r = f();
    (ALLOC.thread_allocations() - before, r)
}

#[test]
fn the_counter_counts() {
    let _serial = serial();
    let (n, v) = allocations_in(|| vec![1u8; 10]);
    assert_eq!((n, v.len()), (1, 10));
    // A payload type that owns heap memory allocates its own bytes on decode, as documented.
    let mut buf = [0u8; 64];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_data(meta(1), "owned").unwrap();
    let len = enc.len();
    let frame = parse_datagram(&buf[..len], 64).unwrap().next().unwrap();
    let (n, s) = allocations_in(|| decode_payload::<String>(frame.payload).unwrap());
    assert_eq!((n, s.as_str()), (1, "owned"));
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Quote {
    px: i64,
    qty: u32,
    side: bool,
}

fn meta(seq: u64) -> DataMeta {
    DataMeta {
        topic_id: 11,
        fingerprint: 22,
        session: 33,
        seq,
        timestamp_ns: 44,
    }
}

/// Encodes quotes into `buf` until it is full; returns the datagram length and frame count.
fn fill(buf: &mut [u8], first_seq: u64) -> (usize, usize) {
    let mut enc = BatchEncoder::new(buf);
    let mut seq = first_seq;
    loop {
        let q = Quote {
            px: seq as i64,
            qty: 1,
            side: seq % 2 == 0,
        };
        match enc.push_data(meta(seq), &q) {
            Ok(()) => seq += 1,
            Err(EncodeError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    enc.push_control(&Control::Heartbeat {
        topic_id: 11,
        fingerprint: 22,
        session: 33,
        last_seq: seq,
        timestamp_ns: 0,
    })
    .ok();
    (enc.len(), enc.frames())
}

/// Decodes every frame of `datagram`; returns the sum of prices, so nothing is optimised away.
fn drain(datagram: &[u8], tracker: &mut SeqTracker, drops: &mut DropCounts) -> i64 {
    let mut sum = 0;
    match parse_datagram(datagram, DEFAULT_MAX_DATAGRAM) {
        Ok(frames) => {
            for f in frames {
                if f.header.kind == llbus_net::Kind::Data {
                    if tracker.observe(f.header.session, f.header.seq).is_deliver() {
                        match decode_payload::<Quote>(f.payload) {
                            Ok(q) => sum += q.px,
                            Err(r) => drops.record(r),
                        }
                    }
                } else if let Ok(Control::Heartbeat {
                    session, last_seq, ..
                }) = Control::from_frame(&f)
                {
                    tracker.observe_last_seq(session, last_seq);
                }
            }
        }
        Err(r) => drops.record(r),
    }
    sum
}

#[test]
fn protocol_steady_state_allocates_nothing() {
    let _serial = serial();
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut tracker = SeqTracker::new(LatePolicy::Deliver);
    let mut drops = DropCounts::new();
    let mut table = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 64);
    let addrs: Vec<SocketAddr> = (0..8)
        .map(|p| SocketAddr::from(([127, 0, 0, 1 + p as u8], 9000 + p)))
        .collect();
    let garbage = [0x4cu8; 100];

    let mut round = |seq: u64, now: u64| {
        let (len, frames) = fill(&mut buf, seq);
        assert!(frames > 10);
        let sum = drain(&buf[..len], &mut tracker, &mut drops);
        // A duplicate datagram and garbage: counted, not allocated for.
        drain(&buf[..len], &mut tracker, &mut drops);
        drain(&garbage, &mut tracker, &mut drops);
        for &a in &addrs {
            table.renew(a, 11, 1, 7, now).unwrap();
        }
        let fanout = table.subscribers(11).count();
        table.expire(now, |_| {});
        let n = encode_compat_packet(&mut buf, 11, &(seq as i64), 5).unwrap();
        let back = decode_compat_packet::<i64>(&buf[..n], DEFAULT_MAX_DATAGRAM).unwrap();
        (frames as u64, sum, fanout, back)
    };

    // Warm-up: first inserts into the subscriber table allocate (by design).
    let mut seq = 1;
    for i in 0..3 {
        let (frames, ..) = round(seq, i);
        seq += frames - 1;
    }
    let (allocs, ()) = allocations_in(|| {
        for i in 3..1000 {
            let (frames, sum, fanout, back) = round(seq, i);
            assert!(sum > 0);
            assert_eq!(fanout, 8);
            assert_eq!(back, (seq as i64, 5));
            seq += frames - 1;
        }
    });
    assert_eq!(allocs, 0, "protocol hot path allocated");
    assert!(tracker.counts().duplicates > 0);
    assert!(drops.total() > 0);
}

#[test]
fn hardening_checks_allocate_nothing() {
    let _serial = serial();
    // Construction allocates (the allowlist's vector, the limiter's table); checks do not.
    let mut jar = CookieJar::new([3; 32], DEFAULT_COOKIE_WINDOW);
    let mac = FrameMac::new(&[4; 32]);
    let data_plain = FrameMac::new(&[4; 32]).control_only();
    let allow: Allowlist = "10.0.0.0/8, fd00::/8".parse().unwrap();
    let mut limiter = RateLimiter::default();
    let mut guard = ReplayGuard::new(0x0bad, 16);
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let addrs: Vec<SocketAddr> = (0..64u16)
        .map(|p| SocketAddr::from(([10, 0, (p >> 8) as u8, p as u8], 9000 + p)))
        .collect();
    const W: u64 = 30_000_000_000;

    let mut round = |i: u64| {
        let now = i * W / 7; // crosses windows: rotation must not allocate either
        let mut proven = 0;
        for &a in &addrs {
            let c = jar.issue(a, now);
            proven += usize::from(jar.verify(a, &c, now + W / 2));
            proven += usize::from(allow.contains(a.ip()));
            proven += usize::from(limiter.allow(a.ip(), now));
        }
        let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
        // A sealed datagram holds one direction and one session: a heartbeat and data.
        let _cookie = jar.issue(addrs[0], now);
        enc.push_control(&Control::Heartbeat {
            topic_id: 1,
            fingerprint: 2,
            session: meta(i).session,
            last_seq: i,
            timestamp_ns: 0,
        })
        .unwrap();
        enc.push_data(
            meta(i),
            &Quote {
                px: 1,
                qty: 2,
                side: true,
            },
        )
        .unwrap();
        let len = enc.len();
        let must = data_plain.must_seal(&buf[..len]);
        let sealed = mac.seal(&mut buf, len).unwrap();
        let frames = mac
            .open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard)
            .unwrap()
            .count();
        // Replayed: refused by the window, without allocating.
        let replayed = mac.open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard);
        assert_eq!(replayed.err(), Some(DropReason::Replayed));
        // A corrupted copy is refused, without allocating for it.
        buf[10] ^= 1;
        let refused = mac.open(&buf[..sealed], DEFAULT_MAX_DATAGRAM).is_err();
        (proven, must, frames, refused)
    };

    for i in 0..3 {
        round(i);
    }
    let (allocs, ()) = allocations_in(|| {
        for i in 3..300 {
            let (proven, must, frames, refused) = round(i);
            assert!(proven >= 2 * addrs.len());
            assert!(must && refused);
            assert_eq!(frames, 2);
        }
    });
    assert_eq!(allocs, 0, "hardening checks allocated");
}

#[test]
#[cfg_attr(miri, ignore)]
fn io_batches_allocate_nothing() {
    let _serial = serial();
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let config = SocketConfig::default();
    let mut sender = UdpEndpoint::bind(local, &config).unwrap();
    let mut receivers: Vec<UdpEndpoint> = (0..3)
        .map(|_| UdpEndpoint::bind(local, &config).unwrap())
        .collect();
    let dests: Vec<SocketAddr> = receivers.iter().map(|r| r.local_addr()).collect();
    let mut send = SendBatch::new(32);
    let mut recv = RecvBatch::new(32, DEFAULT_MAX_DATAGRAM);
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let (len, _) = fill(&mut buf, 1);
    let datagram = &buf[..len];
    const PER_ROUND: usize = 8;

    let mut round = |send: &mut SendBatch, recv: &mut RecvBatch| {
        // Fan-out: PER_ROUND copies of the datagram to every destination.
        let list = (0..PER_ROUND).flat_map(|_| dests.iter().map(|&d| (datagram, d)));
        let sent = sender.send_batch(send, list).unwrap();
        assert_eq!(sent, PER_ROUND * dests.len());
        for r in receivers.iter_mut() {
            let mut got = 0;
            let deadline = Instant::now() + Duration::from_secs(5);
            while got < PER_ROUND && Instant::now() < deadline {
                if r.recv_batch(recv).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                for (bytes, from) in recv.iter() {
                    assert_eq!(bytes.len(), len);
                    assert_eq!(from, sender.local_addr());
                    got += 1;
                }
            }
            assert_eq!(got, PER_ROUND);
        }
    };

    for _ in 0..3 {
        round(&mut send, &mut recv);
    }
    let (allocs, ()) = allocations_in(|| {
        for _ in 0..100 {
            round(&mut send, &mut recv);
        }
    });
    assert_eq!(allocs, 0, "socket batches allocated");
}

/// A claimed length never allocates more than the bytes that carry it. A
/// 9-byte payload claiming 2^40 elements (bincode's decoder, with serde's pre-allocation,
/// allocated 1 MiB for it) allocates nothing; a payload whose `Vec` claims more elements than
/// its bytes plus the decoder's spare for zero-size elements (4096) allocates nothing either;
/// one within them, or an honest one, allocates only as it decodes.
#[test]
fn claimed_lengths_allocate_nothing_beyond_their_bytes() {
    let _serial = serial();
    let mut nine = (1u64 << 40).to_le_bytes().to_vec();
    nine.push(0);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&nine));
    assert!(r.is_err());
    assert_eq!(n, 0, "a 9-byte payload allocated");
    let (n, r) = allocations_in(|| decode_payload::<String>(&nine));
    assert!(r.is_err());
    assert_eq!(n, 0);
    // 10,000 elements claimed, 16 bytes present: beyond the bytes and the spare.
    let mut short = 10_000u64.to_le_bytes().to_vec();
    short.extend_from_slice(&[0; 16]);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&short));
    assert!(r.is_err());
    assert_eq!(n, 0);
    // 1000 claimed, 16 bytes present: within the spare (zero-size elements could be genuine),
    // so the two elements present decode (one allocation) before the third fails.
    short[..8].copy_from_slice(&1000u64.to_le_bytes());
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&short));
    assert!(r.is_err());
    assert!(n <= 1, "{n} allocations for two decoded elements");
    // Two elements claimed where each needs 8 bytes but only 9 are left: the first decodes
    // (one allocation, for its element), the second fails.
    let mut two = 2u64.to_le_bytes().to_vec();
    two.extend_from_slice(&[1; 9]);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&two));
    assert!(r.is_err());
    assert!(n <= 1, "{n} allocations for one decoded element");
}

/// Whole bridges on loopback, counted on every thread but the harness's own.
mod bridges {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use llbus::{Actor, Bus, Context, Message, Out, Setup};
    use llbus_net::Bridge;
    use serde::{Deserialize, Serialize};
    use tests::metric;

    use super::serial;

    #[derive(Message, Serialize, Deserialize, Clone, Debug)]
    #[message(topic = "net.alloc.quote")]
    struct Quote {
        n: u64,
        px: f64,
        qty: u32,
    }

    /// A message larger than a datagram with no heap part: 8 + 6144 bytes, five fragments.
    #[derive(Message, Serialize, Deserialize, Clone, Debug)]
    #[message(topic = "net.alloc.big")]
    struct Big {
        n: u64,
        words: [[u64; 32]; 24],
    }

    /// A test message made from its number.
    trait Numbered: Message + Serialize + serde::de::DeserializeOwned + Clone + Send + 'static {
        fn make(n: u64) -> Self;
        fn n(&self) -> u64;
    }

    impl Numbered for Quote {
        fn make(n: u64) -> Self {
            Quote {
                n,
                px: 100.0 + n as f64,
                qty: 1,
            }
        }
        fn n(&self) -> u64 {
            self.n
        }
    }

    impl Numbered for Big {
        fn make(n: u64) -> Self {
            Big {
                n,
                words: [[n; 32]; 24],
            }
        }
        fn n(&self) -> u64 {
            assert!(self.words.iter().flatten().all(|&w| w == self.n), "corrupt");
            self.n
        }
    }

    /// Publishes `per_tick` messages every tick once `ready`.
    struct Feed<M> {
        out: Out<M>,
        n: u64,
        per_tick: u64,
        ready: Arc<AtomicBool>,
    }

    impl<M: Numbered> Actor for Feed<M> {
        type In = ();
        fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
        fn on_tick(&mut self, ctx: &mut Context<'_>) {
            if !self.ready.load(Ordering::Acquire) {
                return;
            }
            for _ in 0..self.per_tick {
                self.n += 1;
                ctx.publish(self.out, M::make(self.n));
            }
        }
    }

    struct Sink<M> {
        count: Arc<AtomicU64>,
        _m: std::marker::PhantomData<M>,
    }

    impl<M: Numbered> Actor for Sink<M> {
        type In = M;
        fn on_message(&mut self, q: M, _ctx: &mut Context<'_>) {
            assert!(q.n() > 0);
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    /// Waits (sleeping, allocating nothing) until `count` reaches `at_least` and `min` has passed,
    /// or `limit` passes.
    fn wait_until(count: &AtomicU64, at_least: u64, min: Duration, limit: Duration) -> u64 {
        let start = Instant::now();
        loop {
            let n = count.load(Ordering::Relaxed);
            if (n >= at_least && start.elapsed() >= min) || start.elapsed() >= limit {
                return n;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A relay on loopback that forwards both ways and drops every 100th datagram from the
    /// publisher; its buffer is allocated before the measurement, and it allocates nothing after.
    fn relay(
        subscriber: SocketAddr,
        publisher: SocketAddr,
        stop: Arc<AtomicBool>,
    ) -> (SocketAddr, std::thread::JoinHandle<u64>) {
        let sub_side = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let pub_side = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sub_side.set_nonblocking(true).unwrap();
        pub_side.set_nonblocking(true).unwrap();
        let addr = sub_side.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let (mut n_from_pub, mut dropped) = (0u64, 0u64);
            let allocations_before = super::ALLOC.thread_allocations();
            while !stop.load(Ordering::Acquire) {
                let mut idle = true;
                while let Ok((n, from)) = sub_side.recv_from(&mut buf) {
                    idle = false;
                    if from == subscriber {
                        let _ = pub_side.send_to(&buf[..n], publisher);
                    }
                }
                while let Ok((n, from)) = pub_side.recv_from(&mut buf) {
                    idle = false;
                    if from != publisher {
                        continue;
                    }
                    n_from_pub += 1;
                    if n_from_pub % 100 == 0 {
                        dropped += 1;
                    } else {
                        let _ = sub_side.send_to(&buf[..n], subscriber);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            assert_eq!(
                super::ALLOC.thread_allocations(),
                allocations_before,
                "the relay allocated"
            );
            dropped
        });
        (addr, thread)
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn messages_cross_bridges_without_allocating() {
        run::<Quote>(false, 20, Duration::from_micros(200), 200_000);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn reliable_recovery_allocates_nothing_either() {
        // The reliable run delivers a recovered gap in one burst: a slower feed keeps the sink's
        // ring from overflowing, so every message is counted as crossed.
        run::<Quote>(true, 5, Duration::from_micros(200), 200_000);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn large_messages_in_fragments_allocate_nothing_either() {
        // 1000 messages (5000 fragments) a second: history (8192 frames) covers 1.6 s.
        run::<Big>(true, 1, Duration::from_millis(1), 5_000);
    }

    /// Runs `M` at `per_tick` messages per `tick`, reliably or not, and measures while `target`
    /// cross (a tenth of it on a slow machine).
    fn run<M: Numbered>(reliable: bool, per_tick: u64, tick: Duration, target: u64) {
        let _serial = serial();
        // A history and a gap deadline that outlast a loaded machine's stalls (a thread not run
        // for a few hundred ms): recovery is what is measured here, not the default's margins.
        let config = || llbus_net::BridgeConfig {
            reliable: llbus_net::ReliableConfig {
                history: 8192,
                reorder: 8192,
                gap_deadline: Duration::from_secs(2),
                ..llbus_net::ReliableConfig::default()
            },
            ..llbus_net::BridgeConfig::default()
        };
        let publisher = Bridge::bind_with(loopback(), config()).unwrap().name("pub");
        let subscriber = Bridge::bind_with(loopback(), config()).unwrap().name("sub");
        let stop_relay = Arc::new(AtomicBool::new(false));
        let (subscriber, relay) = if reliable {
            let (addr, thread) = relay(
                subscriber.local_addr(),
                publisher.local_addr(),
                Arc::clone(&stop_relay),
            );
            (subscriber.import_reliable::<M>(addr), Some(thread))
        } else {
            (subscriber.import::<M>(publisher.local_addr()), None)
        };
        let publisher = if reliable {
            publisher.export_reliable::<M>()
        } else {
            publisher.export::<M>()
        };
        let ready = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));

        let mut a = Bus::builder();
        let r = Arc::clone(&ready);
        a.actor("feed", move |s: &mut Setup<'_>| Feed::<M> {
            out: s.output(),
            n: 0,
            per_tick,
            ready: Arc::clone(&r),
        })
        .tick_every(tick)
        .publishes::<M>();
        a.add(publisher);

        let mut b = Bus::builder();
        let c = Arc::clone(&count);
        b.actor("sink", move |_: &mut Setup<'_>| Sink::<M> {
            count: Arc::clone(&c),
            _m: std::marker::PhantomData,
        })
        .subscribes::<M>();
        b.add(subscriber);

        let a = a.start().expect("bus a starts");
        let b = b.start().expect("bus b starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let gauge = format!("subscribers.{}", M::TOPIC);
        while metric(&a.report(), "pub", &gauge) != 1 {
            assert!(Instant::now() < deadline, "no subscription");
            std::thread::sleep(Duration::from_millis(10));
        }
        ready.store(true, Ordering::Release);

        // Warm-up: every thread has run its loop many times and every timer (1 s) has fired twice.
        let warmed = wait_until(
            &count,
            target / 10,
            Duration::from_millis(2100),
            Duration::from_secs(60),
        );
        assert!(
            warmed >= target / 10,
            "only {warmed} messages crossed in a minute"
        );

        let before = super::ALLOC.allocations();
        let from = count.load(Ordering::Relaxed);
        let started = Instant::now();
        // At least 2.5 s, so that every timer fires inside the window too.
        let to = wait_until(
            &count,
            from + target,
            Duration::from_millis(2500),
            Duration::from_secs(30),
        );
        let elapsed = started.elapsed();
        let after = super::ALLOC.allocations();

        a.stop();
        b.stop();
        let ra = a.join().expect("bus a stops cleanly");
        let rb = b.join().expect("bus b stops cleanly");
        println!("{ra}\n{rb}");
        let crossed = to - from;
        println!(
            "{crossed} messages crossed in {elapsed:?}; {} allocations",
            after - before
        );
        assert!(
            crossed >= target / 10,
            "only {crossed} messages crossed in {elapsed:?}"
        );
        assert_eq!(
            after - before,
            0,
            "allocations while {crossed} messages crossed in {elapsed:?}"
        );
        assert!(metric(&rb, "sub", "messages_in") >= to);
        stop_relay.store(true, Ordering::Release);
        if let Some(relay) = relay {
            let dropped = relay.join().unwrap();
            println!("relay dropped {dropped} datagrams");
            assert!(dropped > 10, "the relay dropped only {dropped}");
            assert_eq!(metric(&rb, "sub", "unrecovered"), 0);
            assert!(metric(&rb, "sub", "nak_sent") > 0);
            assert!(metric(&ra, "pub", "retransmitted") > 0);
        }
    }
}
