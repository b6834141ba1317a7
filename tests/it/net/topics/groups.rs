//! `llbus topics` lists the multicast group of each export of a bridge, not the first one's for
//! all (PROTOCOL.md "Discovery").

use std::net::SocketAddr;
use std::time::Duration;

use llbus::{Bus, Message, RunningBus, Setup};
use llbus_net::{Bridge, DiscoveryConfig};
use serde::{Deserialize, Serialize};
use tests::TickFeed;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "multicast.quote")]
struct Quote {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "multicast.other")]
struct Other {
    n: u64,
}

/// Test `test`'s data group: an address of its own and a port of this run's. `None` (and a
/// loud message) where this machine cannot join a group on loopback.
fn group(test: u8) -> Option<SocketAddr> {
    let port = 21_000 + (std::process::id() % 20_000) as u16;
    let group = SocketAddr::from(([239, 255, 78, 100 + test], port));
    tests::loopback_group_or_skip(group).then_some(group)
}

/// Stops `bus` and waits for it; a publisher's port is free again afterwards.
fn stop(bus: RunningBus) -> llbus::Report {
    bus.stop();
    bus.join().expect("stops cleanly")
}

/// PROTOCOL.md ("Discovery"): an announcement carries "the multicast group the topics' data
/// goes to", and `llbus topics` lists each publisher's topics with it (reliable or not,
/// multicast group). A bridge serving one topic by a group and another by unicast only must not be
/// listed as sending the second to the first's group (a subscriber or operator reading it
/// would look for that topic's data on a group that never carries it).
#[test]
#[cfg_attr(miri, ignore)]
fn topics_lists_the_group_of_each_export_not_of_the_first() {
    let (Some(disc), Some(data)) = (group(8), group(9)) else {
        return;
    };
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .discovery(DiscoveryConfig {
            group: Some(disc),
            announce_every: Duration::from_millis(200),
            ..DiscoveryConfig::default()
        })
        .export_multicast::<Quote>(data)
        .export::<Other>();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| {
        TickFeed::new(s.output(), |n| Quote { n })
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.actor("other", |s: &mut Setup<'_>| {
        TickFeed::new(s.output(), |n| Other { n })
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Other>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    let mut cmd = std::process::Command::new(tests::cli::llbus_bin());
    cmd.args([
        "topics",
        "--group",
        &disc.to_string(),
        "--interface",
        "127.0.0.1",
        "--listen-ms",
        "1500",
        "--json",
    ]);
    let out = tests::netns::output_with_timeout(&mut cmd, Duration::from_secs(30))
        .expect("llbus topics runs");
    stop(publisher);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let listed: serde_json::Value = serde_json::from_str(text.trim()).expect("valid JSON");
    let group_of = |name: &str| {
        listed["topics"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["topic"] == name))
            .map(|t| t["publishers"][0]["group"].clone())
    };
    println!("{text}");
    assert_eq!(
        group_of("multicast.quote"),
        Some(serde_json::Value::from(data.to_string())),
        "the premise: the multicast topic is listed with its group"
    );
    assert_eq!(
        group_of("multicast.other"),
        Some(serde_json::Value::Null),
        "a topic served by unicast only is listed with another topic's group"
    );
}
