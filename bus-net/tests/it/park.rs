//! A parked bridge (`Idle::Park`, and `Idle::Backoff`, whose last stage sleeps the same way on
//! a thread that watches sockets) sleeps in the kernel on its sockets and its doorbell together:
//! a datagram and a local message each wake it at once, not at its next tick. The bridges here
//! tick once an hour, so a bridge that only woke on its tick (or whose doorbell rang a condvar
//! it no longer sleeps on) would never deliver within the tests' bounded waits; each test also
//! checks that no tick ran, and that the idle bridge sleeps (its idle rounds stop). No timing
//! is asserted.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, RunningBus, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::example_bins::free_udp_addr;
use tests::wait_for;

use crate::fixtures::COMPAT_SUBSCRIBE;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(transparent)]
#[message(topic = "park.count")]
struct Count(i64);

/// Far beyond every wait in these tests: a bridge woken only by its tick never delivers.
const TICK: Duration = Duration::from_secs(3600);

/// Long enough for an idle bridge to spin, yield and go to sleep (microseconds unloaded; the
/// yield stage, `llbus::BACKOFF_YIELD`, is a millisecond).
const SETTLE: Duration = Duration::from_millis(100);

/// How long an idle bridge is watched for rounds: one asleep runs none, one that spins or
/// yields runs thousands.
const WATCH: Duration = Duration::from_millis(250);

/// A compat data packet (`Packet<i64>`: the value, then a timestamp; both LE).
fn packet(n: i64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&n.to_le_bytes());
    p[8..].copy_from_slice(&1i64.to_le_bytes());
    p
}

/// The value of a compat data packet from `from` arriving on `raw` within its read timeout.
fn try_recv(raw: &UdpSocket, from: SocketAddr) -> Option<i64> {
    let mut buf = [0u8; 64];
    let (len, src) = raw.recv_from(&mut buf).ok()?;
    assert_eq!((src, len), (from, 16), "a 16-byte packet from the export");
    Some(i64::from_le_bytes(buf[..8].try_into().ok()?))
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

/// Publishes `Count(n)` for each request the test adds to `pending`, checking on its tick.
struct OnRequest {
    out: Out<Count>,
    n: i64,
    pending: Arc<AtomicU64>,
}

impl Actor for OnRequest {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        while self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(1))
            .is_ok()
        {
            self.n += 1;
            ctx.publish(self.out, Count(self.n));
        }
    }
}

/// Asserts that the bridge `actor` of `bus` is asleep: over [`WATCH`] it runs (almost) no
/// round, fewer than 100 a second. A thread that spins or yields runs thousands; one asleep
/// in `epoll` with its tick an hour away runs none.
fn assert_asleep(bus: &RunningBus, actor: &str) {
    let rounds = || {
        bus.report()
            .actor(actor)
            .map(|a| a.idle_rounds)
            .expect("the bridge is in the report")
    };
    std::thread::sleep(SETTLE);
    let before = rounds();
    std::thread::sleep(WATCH);
    let ran = rounds() - before;
    assert!(
        ran < 25,
        "the idle bridge ran {ran} rounds in {WATCH:?}: not asleep"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_parked_bridge_wakes_for_a_datagram_before_its_tick() {
    let _cpu = crate::fixtures::cpu_shared();
    datagram_wakes(Idle::Park);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_backoff_bridge_sleeps_on_its_socket_and_wakes_for_a_datagram() {
    let _cpu = crate::fixtures::cpu_shared();
    datagram_wakes(Idle::Backoff);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_local_publish_wakes_a_bridge_parked_on_its_sockets() {
    let _cpu = crate::fixtures::cpu_shared();
    local_publish_wakes(Idle::Park);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_local_publish_wakes_a_backoff_bridge_asleep_on_its_sockets() {
    let _cpu = crate::fixtures::cpu_shared();
    local_publish_wakes(Idle::Backoff);
}

fn datagram_wakes(idle: Idle) {
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let import = free_udp_addr();
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .import_compat::<Count>(import, raw.local_addr().unwrap())
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut bus = Bus::builder();
    let s = Arc::clone(&seen);
    bus.actor("sink", move |_: &mut Setup<'_>| Collect {
        seen: Arc::clone(&s),
    })
    .idle(Idle::Park)
    .subscribes::<Count>();
    bus.add(bridge).idle(idle).tick_every(TICK);
    let bus = bus.start().expect("bus starts");
    assert_asleep(&bus, "sub");

    // Twice: the second checks that a bridge woken by a datagram goes back to a sleep that a
    // datagram ends again.
    for n in 1..=2i64 {
        std::thread::sleep(SETTLE);
        raw.send_to(&packet(n), import).unwrap();
        wait_for(&format!("datagram {n} delivered"), 30, || {
            seen.lock().unwrap().len() as i64 == n
        });
    }
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    let report = bus.report();
    let sub = report.actor("sub").expect("the bridge is in the report");
    assert_eq!(sub.ticks, 0, "delivered without a tick");
    assert!(
        sub.idle_rounds > 0,
        "the bridge idled between the datagrams"
    );
    bus.stop();
    bus.join().expect("the bus stops cleanly");
}

fn local_publish_wakes(idle: Idle) {
    let compat = free_udp_addr();
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .export_compat::<Count>(compat)
        .unwrap();
    let pending = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    let p = Arc::clone(&pending);
    bus.actor("source", move |s: &mut Setup<'_>| OnRequest {
        out: s.output(),
        n: 0,
        pending: Arc::clone(&p),
    })
    .tick_every(Duration::from_millis(2))
    .idle(Idle::Park)
    .publishes::<Count>();
    bus.add(bridge).idle(idle).tick_every(TICK);
    let bus = bus.start().expect("bus starts");
    assert_asleep(&bus, "pub");

    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    // The subscribe is a datagram: it wakes the parked bridge, which adds the subscriber. A
    // message published before that is dropped (no subscriber), so ask until one arrives.
    std::thread::sleep(SETTLE);
    raw.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while last.is_none() {
        pending.fetch_add(1, Ordering::AcqRel);
        let wait = (Instant::now() + Duration::from_secs(1)).min(give_up);
        while Instant::now() < wait && last.is_none() {
            last = try_recv(&raw, compat);
        }
        assert!(Instant::now() < give_up, "the subscriber was never served");
    }
    let mut last = last.unwrap_or_default();
    // Now only the local publish can wake the bridge: its doorbell writes the eventfd.
    for _ in 0..2 {
        std::thread::sleep(SETTLE);
        pending.fetch_add(1, Ordering::AcqRel);
        let deadline = Instant::now() + Duration::from_secs(30);
        let n = loop {
            assert!(Instant::now() < deadline, "a local publish sent nothing");
            if let Some(n) = try_recv(&raw, compat) {
                break n;
            }
        };
        assert_eq!(n, last + 1, "the next message, alone");
        last = n;
    }
    let report = bus.report();
    let bridge = report.actor("pub").expect("the bridge is in the report");
    assert_eq!(bridge.ticks, 0, "sent without a tick");
    bus.stop();
    bus.join().expect("the bus stops cleanly");
}
