//! Zero allocation per message in the steady state, in a binary of its own: the process is the
//! fixture (a counting global allocator). Two parts:
//!
//! - the protocol's pieces, counted per thread (so the test harness's own threads do not
//!   interfere): encode of a batch, decode iteration, payload decode, control frames, sequence
//!   tracking, the subscriber table, the compat format, cookie issue and verify, MAC seal and
//!   open, allowlist and rate-limit checks, and batched socket send and receive over loopback,
//!   each after a warm-up;
//! - whole bridges (module `bridges`), counted on every thread: two buses joined by bridges over
//!   loopback exchange a tick-paced stream, and no allocation happens while thousands of
//!   messages cross over more than a second, timers included (heartbeats every 100 ms, renewals
//!   and expiry every second, metric refreshes). The same holds for a reliable topic whose
//!   datagrams a relay drops 1 in 100 of: NAKs, retransmissions from history and the reorder
//!   buffer allocate nothing either. And for large messages (6 KiB, five fragments each) on a
//!   reliable topic through the same relay: fragmenting, history, retransmission and reassembly
//!   allocate nothing once the buffers have grown. The three run at once and are measured over
//!   one window (the first of their tests to run measures; each checks its own run), since
//!   every timer must fire before and inside it.
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

    /// Waits (sleeping, allocating nothing) until `done` and `min` has passed, or `limit`
    /// passes.
    fn wait_until(mut done: impl FnMut() -> bool, min: Duration, limit: Duration) {
        let start = Instant::now();
        while !((start.elapsed() >= min && done()) || start.elapsed() >= limit) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A relay on loopback that forwards both ways and drops every 100th datagram from the
    /// publisher, counting them in `dropped`; its buffer is allocated before the measurement,
    /// and it allocates nothing after. Its thread returns the allocations it made.
    fn relay(
        subscriber: SocketAddr,
        publisher: SocketAddr,
        stop: Arc<AtomicBool>,
        dropped: Arc<AtomicU64>,
    ) -> (SocketAddr, std::thread::JoinHandle<u64>) {
        let sub_side = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let pub_side = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sub_side.set_nonblocking(true).unwrap();
        pub_side.set_nonblocking(true).unwrap();
        let addr = sub_side.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut n_from_pub = 0u64;
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
                        dropped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let _ = sub_side.send_to(&buf[..n], subscriber);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            super::ALLOC.thread_allocations() - allocations_before
        });
        (addr, thread)
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn messages_cross_bridges_without_allocating() {
        measured().check(Run::Plain);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn reliable_recovery_allocates_nothing_either() {
        measured().check(Run::Reliable);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn large_messages_in_fragments_allocate_nothing_either() {
        measured().check(Run::Large);
    }

    /// The three runs, measured together.
    #[derive(Clone, Copy, Debug)]
    enum Run {
        /// Quotes, best effort, 2 every 200 us tick.
        Plain,
        /// Quotes on a reliable topic through a relay that drops 1 datagram in 100, 1 every
        /// 200 us tick: a recovered gap is delivered in one burst, and a slower feed keeps the
        /// sink's ring from overflowing, so every message is counted as crossed.
        Reliable,
        /// `Big` (five fragments each) on a reliable topic through the same relay, 1 every
        /// 1 ms tick: 5000 fragments a second, which history (8192 frames) covers for 1.6 s.
        Large,
    }

    impl Run {
        const ALL: [Run; 3] = [Run::Plain, Run::Reliable, Run::Large];

        /// Messages that must cross in the measured window: far fewer than the feed sends in
        /// it, so that a loaded machine still passes. One allocation per message, or per
        /// hundred, shows at once.
        fn least(self) -> u64 {
            match self {
                Run::Plain => 1_000,
                Run::Reliable => 500,
                Run::Large => 100,
            }
        }
    }

    /// What one run's rig did in the window, and its final reports.
    struct Outcome {
        crossed: u64,
        to: u64,
        report_a: llbus::Report,
        report_b: llbus::Report,
        /// The relay's drops and its own allocations, for the reliable runs.
        relay: Option<(u64, u64)>,
    }

    /// The three runs' rigs started together and measured over one window: what each did, and
    /// the allocations of every thread but the harness's over the window.
    struct Measured {
        outcomes: Vec<Outcome>,
        allocations: u64,
        elapsed: Duration,
    }

    impl Measured {
        /// Asserts that nothing allocated while `run`'s messages (and the others') crossed,
        /// that enough of them did, and, for a reliable run, that the relay's drops were
        /// recovered.
        fn check(&self, run: Run) {
            let o = &self.outcomes[run as usize];
            let elapsed = self.elapsed;
            println!("{}\n{}", o.report_a, o.report_b);
            println!(
                "{run:?}: {} messages crossed in {elapsed:?}; {} allocations in the three runs",
                o.crossed, self.allocations
            );
            assert!(
                o.crossed >= run.least(),
                "only {} messages crossed in {elapsed:?}",
                o.crossed
            );
            assert_eq!(
                self.allocations, 0,
                "allocations while the three runs' messages crossed (this one's {} among them) \
                 in {elapsed:?}",
                o.crossed
            );
            assert!(metric(&o.report_b, "sub", "messages_in") >= o.to);
            if let Some((dropped, relay_allocations)) = o.relay {
                println!("relay dropped {dropped} datagrams");
                assert_eq!(relay_allocations, 0, "the relay allocated");
                assert!(dropped > 10, "the relay dropped only {dropped}");
                assert_eq!(metric(&o.report_b, "sub", "unrecovered"), 0);
                assert!(metric(&o.report_b, "sub", "nak_sent") > 0);
                assert!(metric(&o.report_a, "pub", "retransmitted") > 0);
            }
        }
    }

    /// The runs' measurement, made once (under [`serial`]) by the first test that asks.
    fn measured() -> &'static Measured {
        static MEASURED: std::sync::OnceLock<Measured> = std::sync::OnceLock::new();
        let _serial = serial();
        MEASURED.get_or_init(measure)
    }

    /// One run's buses, relay and sink count.
    struct Rig {
        a: llbus::RunningBus,
        b: llbus::RunningBus,
        ready: Arc<AtomicBool>,
        count: Arc<AtomicU64>,
        stop_relay: Arc<AtomicBool>,
        /// The relay's drops so far, for a reliable run.
        dropped: Option<Arc<AtomicU64>>,
        relay: Option<std::thread::JoinHandle<u64>>,
    }

    impl Rig {
        fn start(run: Run) -> Rig {
            match run {
                Run::Plain => Rig::start_with::<Quote>(false, 2, Duration::from_micros(200)),
                Run::Reliable => Rig::start_with::<Quote>(true, 1, Duration::from_micros(200)),
                Run::Large => Rig::start_with::<Big>(true, 1, Duration::from_millis(1)),
            }
        }

        /// Two buses joined by bridges, `M` at `per_tick` messages every `tick` once ready,
        /// reliably through a lossy relay or not.
        fn start_with<M: Numbered>(reliable: bool, per_tick: u64, tick: Duration) -> Rig {
            // A history and a gap deadline that outlast a loaded machine's stalls (a thread
            // not run for a few hundred ms): recovery is what is measured here, not the
            // default's margins.
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
            let dropped = reliable.then(|| Arc::new(AtomicU64::new(0)));
            let (subscriber, relay) = match &dropped {
                Some(dropped) => {
                    let (addr, thread) = relay(
                        subscriber.local_addr(),
                        publisher.local_addr(),
                        Arc::clone(&stop_relay),
                        Arc::clone(dropped),
                    );
                    (subscriber.import_reliable::<M>(addr), Some(thread))
                }
                None => (subscriber.import::<M>(publisher.local_addr()), None),
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

            Rig {
                a: a.start().expect("bus a starts"),
                b: b.start().expect("bus b starts"),
                ready,
                count,
                stop_relay,
                dropped,
                relay,
            }
        }

        fn subscribed(&self, topic: &str) -> bool {
            metric(&self.a.report(), "pub", &format!("subscribers.{topic}")) == 1
        }

        fn crossed(&self) -> u64 {
            self.count.load(Ordering::Relaxed)
        }

        /// Whether the relay, if any, has dropped enough datagrams for recovery to be shown.
        fn dropped_enough(&self) -> bool {
            self.dropped
                .as_ref()
                .is_none_or(|d| d.load(Ordering::Relaxed) > 10)
        }

        /// Stops both buses and the relay: the publisher's and the subscriber's reports, and
        /// the relay's drops and allocations.
        fn stop(self) -> (llbus::Report, llbus::Report, Option<(u64, u64)>) {
            self.a.stop();
            self.b.stop();
            let ra = self.a.join().expect("bus a stops cleanly");
            let rb = self.b.join().expect("bus b stops cleanly");
            self.stop_relay.store(true, Ordering::Release);
            let allocations = self.relay.map(|r| r.join().expect("the relay ends"));
            let dropped = self.dropped.map(|d| d.load(Ordering::Relaxed));
            (ra, rb, dropped.zip(allocations))
        }
    }

    /// Starts the three runs, warms them up and measures them over one window. Every timer
    /// (heartbeats every 100 ms; renewals, expiry and metric refreshes every second) has fired
    /// before the window (the warm-up lasts 1.1 s from the subscription) and fires again
    /// inside it (1.1 s at least), while every run's messages cross.
    fn measure() -> Measured {
        let rigs: Vec<Rig> = Run::ALL.into_iter().map(Rig::start).collect();
        let topics = [Quote::TOPIC, Quote::TOPIC, Big::TOPIC];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !rigs.iter().zip(topics).all(|(r, t)| r.subscribed(t)) {
            assert!(Instant::now() < deadline, "no subscription");
            std::thread::sleep(Duration::from_millis(10));
        }
        for rig in &rigs {
            rig.ready.store(true, Ordering::Release);
        }
        let least = |i: usize| Run::ALL[i].least();
        let all_past = |base: &[u64]| {
            rigs.iter()
                .enumerate()
                .all(|(i, r)| r.crossed() >= base[i] + least(i) && r.dropped_enough())
        };
        // Warm-up: every thread has run its loop many times and every buffer has grown.
        let zero = vec![0; rigs.len()];
        wait_until(
            || all_past(&zero),
            Duration::from_millis(1100),
            Duration::from_secs(60),
        );
        assert!(all_past(&zero), "too few messages crossed in a minute");

        let from: Vec<u64> = rigs.iter().map(Rig::crossed).collect();
        let before = super::ALLOC.allocations();
        let started = Instant::now();
        wait_until(
            || all_past(&from),
            Duration::from_millis(1100),
            Duration::from_secs(30),
        );
        let elapsed = started.elapsed();
        let after = super::ALLOC.allocations();
        let to: Vec<u64> = rigs.iter().map(Rig::crossed).collect();

        let outcomes = rigs
            .into_iter()
            .enumerate()
            .map(|(i, rig)| {
                let (report_a, report_b, relay) = rig.stop();
                Outcome {
                    crossed: to[i] - from[i],
                    to: to[i],
                    report_a,
                    report_b,
                    relay,
                }
            })
            .collect();
        Measured {
            outcomes,
            allocations: after - before,
            elapsed,
        }
    }
}
