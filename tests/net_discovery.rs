//! Discovery between real bridges over loopback multicast: a subscriber that names a topic,
//! not a host, finds two publishers by their announcements on the group, fans in from both,
//! and forgets one that stops.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup};
use llbus_net::{Bridge, DiscoveryConfig, SocketConfig, UdpEndpoint};
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.quote")]
struct Quote {
    source: u64,
    n: u64,
}

/// Publishes a quote of `source` every tick.
struct Feed {
    out: Out<Quote>,
    source: u64,
    n: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        ctx.publish(
            self.out,
            Quote {
                source: self.source,
                n: self.n,
            },
        );
    }
}

struct Seen {
    by_source: Arc<Mutex<[u64; 3]>>,
}

impl Actor for Seen {
    type In = Quote;
    fn on_message(&mut self, q: Quote, _ctx: &mut Context<'_>) {
        if let Some(count) = self.by_source.lock().unwrap().get_mut(q.source as usize) {
            *count += 1;
        }
    }
}

/// A group of this test run's own (a port from the process id), so that runs in parallel on
/// one machine do not hear each other.
fn group() -> SocketAddr {
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    SocketAddr::from(([239, 255, 76, 78], port))
}

fn discovery() -> DiscoveryConfig {
    DiscoveryConfig {
        group: Some(group()),
        announce_every: Duration::from_millis(100),
        ..DiscoveryConfig::default()
    }
}

fn publisher(source: u64) -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name(&format!("pub-{source}"))
        .discovery(discovery())
        .export::<Quote>();
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        source,
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    (bus.start().expect("publisher starts"), addr)
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_subscriber_discovers_two_publishers_and_forgets_one_that_stops() {
    // Multicast on loopback needs no route but the loopback interface itself; say so loudly
    // where even that is missing.
    let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if let Err(e) = UdpEndpoint::bind_group(group(), lo, &SocketConfig::default()) {
        eprintln!(
            "SKIPPED: this machine cannot join {} on loopback ({e})",
            group()
        );
        return;
    }
    let by_source = Arc::new(Mutex::new([0u64; 3]));
    let subscriber = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(discovery())
        .discover::<Quote>();
    let status = subscriber.status();
    let mut bus = Bus::builder();
    let seen = Arc::clone(&by_source);
    bus.actor("seen", move |_: &mut Setup<'_>| Seen {
        by_source: Arc::clone(&seen),
    })
    .subscribes::<Quote>();
    bus.add(subscriber);
    let sub = bus.start().expect("subscriber starts");

    let (one, addr_one) = publisher(1);
    let (two, addr_two) = publisher(2);
    wait_for("both publishers discovered and established", 20, || {
        let found = status.discovered();
        found.len() == 2 && found.iter().all(|d| d.established)
    });
    let mut found: Vec<SocketAddr> = status.discovered().iter().map(|d| d.publisher).collect();
    found.sort();
    let mut want = vec![addr_one, addr_two];
    want.sort();
    assert_eq!(found, want, "the announced data addresses");
    let counts = *by_source.lock().unwrap();
    wait_for("quotes from both publishers", 20, || {
        let now = *by_source.lock().unwrap();
        now[1] > counts[1] + 50 && now[2] > counts[2] + 50
    });

    // Publisher one stops (its bridge unsubscribes nothing: it exports): forgotten after
    // three of its periods without an announcement.
    one.stop();
    one.join().expect("publisher one stops cleanly");
    wait_for("publisher one forgotten", 20, || {
        status.discovered().iter().all(|d| d.publisher != addr_one)
    });
    assert!(status.discovered().iter().any(|d| d.publisher == addr_two));
    let before = *by_source.lock().unwrap();
    wait_for("publisher two still feeding", 20, || {
        by_source.lock().unwrap()[2] > before[2] + 50
    });
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    two.stop();
    two.join().expect("publisher two stops cleanly");
    sub.stop();
    let report = sub.join().expect("subscriber stops cleanly");
    println!("{report}");
    assert_eq!(metric(&report, "sub", "discovery.found"), 2);
    assert_eq!(metric(&report, "sub", "discovery.lost"), 1);
    assert!(metric(&report, "sub", "discovery.announcements_in") > 0);
    // Every quote counted came from a publisher the subscriber was told of.
    let seen = *by_source.lock().unwrap();
    assert_eq!(seen[0], 0);
}
