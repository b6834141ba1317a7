//! SECURITY.md and docs/PROTOCOL.md: the ll-udp-pubsub v0.1 compatibility mode has no
//! handshake, so its publisher "honours the allowlist, the per-topic cap and the rate limit"
//! on its control datagrams like on native ones. Each is checked here with a raw
//! ll-udp-pubsub subscriber (a 4-byte Subscribe) against a bridge's compat export.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, RunningBus, Setup};
use llbus_net::{Allowlist, Bridge, BridgeConfig, DropReason, RateLimit};
use serde::{Deserialize, Serialize};
use tests::example_bins::free_udp_addr;
use tests::{metric, wait_for};

use super::raw_socket;
use crate::fixtures::COMPAT_SUBSCRIBE;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(transparent)]
#[message(topic = "compat.limits.count")]
struct Count(i64);

struct Counter {
    out: Out<Count>,
    n: i64,
}

impl Actor for Counter {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        ctx.publish(self.out, Count(self.n));
    }
}

/// A bus publishing a counter every 2 ms through a compat export on its own socket.
fn publisher(config: BridgeConfig) -> (RunningBus, SocketAddr) {
    let compat = free_udp_addr();
    let bridge = Bridge::bind_with("127.0.0.1:0", config)
        .unwrap()
        .name("pub")
        .export_compat::<Count>(compat)
        .unwrap();
    let mut bus = Bus::builder();
    bus.actor("counter", |s: &mut Setup<'_>| Counter {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .idle(Idle::Park)
    .publishes::<Count>();
    bus.add(bridge).idle(Idle::Park);
    (bus.start().expect("bus starts"), compat)
}

/// Datagrams `s` receives within `within`.
fn received(s: &UdpSocket, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while Instant::now() < deadline {
        if s.recv_from(&mut buf).is_ok() {
            n += 1;
        }
    }
    n
}

fn drops(bus: &RunningBus, reason: DropReason) -> u64 {
    metric(&bus.report(), "pub", &format!("drop.{}", reason.name()))
}

fn stop(bus: RunningBus) {
    bus.stop();
    bus.join().expect("the bus stops cleanly");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_compat_subscribe_from_outside_the_allowlist_gets_nothing() {
    let _cpu = crate::fixtures::cpu_shared();
    let (bus, compat) = publisher(BridgeConfig {
        allow: Allowlist::parse(["10.0.0.0/8"]).unwrap(),
        ..BridgeConfig::default()
    });
    let raw = raw_socket();
    for _ in 0..3 {
        raw.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    }
    wait_for("the refused subscribes counted", 10, || {
        drops(&bus, DropReason::NotAllowed) == 3
    });
    assert_eq!(received(&raw, Duration::from_millis(300)), 0);
    stop(bus);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_compat_topic_serves_at_most_its_cap() {
    let _cpu = crate::fixtures::cpu_shared();
    let (bus, compat) = publisher(BridgeConfig {
        subscribers_per_topic: 1,
        ..BridgeConfig::default()
    });
    let first = raw_socket();
    first.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    assert!(
        received(&first, Duration::from_millis(500)) > 10,
        "the first subscriber gets the counter"
    );
    let second = raw_socket();
    second.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    // Counted as a full table: compat mode has no Refuse to give the reason in.
    wait_for("the second subscribe refused", 10, || {
        drops(&bus, DropReason::TopicFull) + drops(&bus, DropReason::TableFull) >= 1
    });
    assert_eq!(
        received(&second, Duration::from_millis(300)),
        0,
        "a subscriber over the cap got data"
    );
    stop(bus);
}

#[test]
#[cfg_attr(miri, ignore)]
fn compat_control_is_rate_limited_per_source() {
    let _cpu = crate::fixtures::cpu_shared();
    let (bus, compat) = publisher(BridgeConfig {
        rate_limit: RateLimit {
            per_second: 1,
            burst: 2,
        },
        ..BridgeConfig::default()
    });
    let raw = raw_socket();
    for _ in 0..10 {
        raw.send_to(&COMPAT_SUBSCRIBE, compat).unwrap();
    }
    // At most the burst and what one second refills pass; the rest is counted.
    wait_for("the subscribes over the limit counted", 10, || {
        drops(&bus, DropReason::RateLimited) >= 6
    });
    assert!(drops(&bus, DropReason::RateLimited) <= 8);
    stop(bus);
}
