//! Zero allocation per message on send and receive in the steady state: two buses joined by
//! bridges over loopback exchange a tick-paced stream, and a counting global allocator sees no
//! allocation while at least 200k messages (20k on a slow machine) cross, timers included
//! (heartbeats every 100 ms, renewals and expiry every second, metric refreshes). The same
//! holds for a reliable topic whose datagrams a relay drops 1 in 100 of: NAKs, retransmissions
//! from history and the reorder buffer allocate nothing either. And for large messages (6 KiB,
//! five fragments each) on a reliable topic through the same relay: fragmenting, history,
//! retransmission and reassembly allocate nothing once the buffers have grown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::metric;
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

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
        let allocations_before = ALLOC.thread_allocations();
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
            ALLOC.thread_allocations(),
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

/// One run at a time: the allocation counter is global, and a test starting or stopping its
/// buses beside another's measurement would be counted in it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `M` at `per_tick` messages per `tick`, reliably or not, and measures while `target`
/// cross (a tenth of it on a slow machine).
fn run<M: Numbered>(reliable: bool, per_tick: u64, tick: Duration, target: u64) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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

    let before = ALLOC.allocations();
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
    let after = ALLOC.allocations();

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
