//! IPv6 and dual stack: a bridge bound to `[::]` serves and reaches IPv4
//! peers (their addresses canonicalised from `::ffff:a.b.c.d`), two bridges talk over `::1`,
//! and an import of an address family the bridge's socket cannot reach is refused when the bus
//! starts, with an error naming the bridge, the topic and both addresses.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup, StartError};
use llbus_net::{Bridge, BridgeConfig};
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

use crate::fixtures::{Feed, Sink, Tick};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A publisher bus exporting `Tick` from a bridge bound to `bind`; its address to subscribe to
/// (`connect_ip` with the bound port).
fn publisher(bind: &str, connect_ip: &str) -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind_with(addr(bind), BridgeConfig::default())
        .unwrap()
        .allow("127.0.0.0/8, ::1/128".parse().unwrap())
        .name("pub");
    let port = bridge.local_addr().port();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Tick>();
    bus.add(bridge.export::<Tick>());
    (
        bus.start().unwrap(),
        SocketAddr::new(connect_ip.parse().unwrap(), port),
    )
}

fn subscriber(bind: &str, publisher: SocketAddr) -> (RunningBus, Arc<AtomicU64>) {
    let bridge = Bridge::bind(addr(bind))
        .unwrap()
        .name("sub")
        .import::<Tick>(publisher);
    assert!(bridge.check().is_ok());
    let got = Arc::new(AtomicU64::new(0));
    let g = Arc::clone(&got);
    let mut bus = Bus::builder();
    bus.actor("sink", move |_: &mut Setup<'_>| Sink {
        got: Arc::clone(&g),
    })
    .subscribes::<Tick>();
    bus.add(bridge);
    (bus.start().unwrap(), got)
}

/// Streams between the two and checks nothing was dropped as from an unknown sender.
fn stream(pub_bind: &str, pub_ip: &str, sub_bind: &str) {
    let (p, publisher_addr) = publisher(pub_bind, pub_ip);
    let (s, got) = subscriber(sub_bind, publisher_addr);
    wait_for(&format!("ticks from {pub_bind} to {sub_bind}"), 10, || {
        got.load(Ordering::Relaxed) > 50
    });
    assert_eq!(metric(&p.report(), "pub", "subscribers.net.tick"), 1);
    s.stop();
    p.stop();
    let rs = s.join().unwrap();
    let rp = p.join().unwrap();
    for (r, who) in [(&rs, "sub"), (&rp, "pub")] {
        assert_eq!(metric(r, who, "drop.unknown_sender"), 0, "{who}");
        assert_eq!(metric(r, who, "drop.bad_cookie"), 0, "{who}");
        assert_eq!(metric(r, who, "send_dropped"), 0, "{who}");
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_dual_stack_publisher_serves_an_ipv4_subscriber() {
    let _cpu = crate::fixtures::cpu_shared();
    stream("[::]:0", "127.0.0.1", "127.0.0.1:0");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_dual_stack_subscriber_imports_from_an_ipv4_publisher() {
    let _cpu = crate::fixtures::cpu_shared();
    // Its socket reports the publisher as ::ffff:127.0.0.1; the import names 127.0.0.1.
    stream("127.0.0.1:0", "127.0.0.1", "[::]:0");
}

#[test]
#[cfg_attr(miri, ignore)]
fn two_bridges_over_ipv6_loopback() {
    let _cpu = crate::fixtures::cpu_shared();
    stream("[::1]:0", "::1", "[::1]:0");
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_import_of_the_other_family_is_refused_at_start_naming_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let bridge = Bridge::bind(addr("127.0.0.1:0"))
        .unwrap()
        .name("v4only")
        .import::<Tick>(addr("[::1]:7000"));
    let e = bridge.check().unwrap_err();
    for needle in ["v4only", "net.tick", "[::1]:7000", "127.0.0.1", "[::]"] {
        assert!(e.contains(needle), "{e:?} does not name {needle}");
    }
    let mut bus = Bus::builder();
    bus.actor("sink", |_: &mut Setup<'_>| Sink {
        got: Arc::default(),
    })
    .subscribes::<Tick>();
    bus.add(bridge);
    match bus.start() {
        Err(StartError::Invalid(message)) => {
            for needle in ["v4only", "net.tick", "[::1]:7000"] {
                assert!(
                    message.contains(needle),
                    "{message:?} does not name {needle}"
                );
            }
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("a bridge bound to IPv4 started with an IPv6 import");
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn the_default_datagram_size_follows_the_family() {
    let _cpu = crate::fixtures::cpu_shared();
    let c = BridgeConfig::default();
    assert_eq!(c.max_datagram_for(addr("127.0.0.1:1")), 1472);
    assert_eq!(c.max_datagram_for(addr("[::1]:1")), 1452);
    assert_eq!(BridgeConfig::for_mtu(1420).max_datagram, Some(1372));
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "dual.big")]
struct Big {
    data: Vec<u8>,
}

struct BigFeed {
    out: Out<Big>,
}

impl Actor for BigFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        // 48 (header) + 8 (length) + 1404 = a 1460-byte datagram: fits IPv4's 1472, not the
        // 1452 a dual-stack bridge sends at most.
        ctx.publish(
            self.out,
            Big {
                data: vec![7; 1404],
            },
        );
    }
}

struct BigSink {
    got: Arc<AtomicU64>,
}

impl Actor for BigSink {
    type In = Big;
    fn on_message(&mut self, b: Big, _ctx: &mut Context<'_>) {
        assert_eq!(b.data.len(), 1404);
        self.got.fetch_add(1, Ordering::Relaxed);
    }
}

/// An IPv4 publisher sends datagrams up to its default 1472 bytes; a dual-stack subscriber,
/// which sends at most 1452, still accepts them.
#[test]
#[cfg_attr(miri, ignore)]
fn a_dual_stack_subscriber_accepts_what_an_ipv4_publisher_sends() {
    let _cpu = crate::fixtures::cpu_shared();
    let publisher = Bridge::bind(addr("127.0.0.1:0")).unwrap().name("pub");
    let pub_addr = publisher.local_addr();
    let mut a = Bus::builder();
    a.actor("feed", |s: &mut Setup<'_>| BigFeed { out: s.output() })
        .tick_every(Duration::from_millis(2))
        .publishes::<Big>();
    a.add(publisher.export::<Big>());
    let a = a.start().unwrap();
    let subscriber = Bridge::bind(addr("[::]:0"))
        .unwrap()
        .name("sub")
        .import::<Big>(pub_addr);
    let got = Arc::new(AtomicU64::new(0));
    let g = Arc::clone(&got);
    let mut b = Bus::builder();
    b.actor("sink", move |_: &mut Setup<'_>| BigSink {
        got: Arc::clone(&g),
    })
    .subscribes::<Big>();
    b.add(subscriber);
    let b = b.start().unwrap();
    wait_for(
        "1460-byte datagrams at the dual-stack subscriber",
        10,
        || got.load(Ordering::Relaxed) > 20,
    );
    b.stop();
    a.stop();
    let rb = b.join().unwrap();
    a.join().unwrap();
    assert_eq!(metric(&rb, "sub", "drop.too_large"), 0);
}
