//! Multicast data between real bridges over loopback: an export to a group sends each batch
//! once whatever the number of subscribers, and a bridge leaves a data group once no import
//! uses it. `membership` follows groups across publisher restarts; `forged` holds the attacks
//! through groups (injection, amplification, NAK floods).

mod forged;
mod membership;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llbus::{Bus, Setup};
use llbus_net::Bridge;
use tests::{loopback_members, metric, wait_for};

use crate::discovery::{discovery, group, Feed, Quote, Seen};

/// Multicast data between real bridges over loopback: a publisher exports to a group, two
/// subscribers import it (by address) and are told the group; each batch leaves the publisher
/// once, whatever the number of subscribers.
#[test]
#[cfg_attr(miri, ignore)]
fn a_multicast_export_sends_each_batch_once_for_every_subscriber() {
    let _cpu = crate::fixtures::cpu_shared();
    let data = group(2);
    if !tests::loopback_group_or_skip(data) {
        return;
    }
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .export_multicast::<Quote>(data);
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        source: 1,
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    let subscriber = |name: &str| {
        let by_source = Arc::new(Mutex::new([0u64; 3]));
        let bridge = Bridge::bind("127.0.0.1:0")
            .unwrap()
            .name(name)
            .import::<Quote>(addr);
        let mut bus = Bus::builder();
        let seen = Arc::clone(&by_source);
        bus.actor("seen", move |_: &mut Setup<'_>| Seen {
            by_source: Arc::clone(&seen),
        })
        .subscribes::<Quote>();
        bus.add(bridge);
        (bus.start().expect("subscriber starts"), by_source)
    };
    let (one, seen_one) = subscriber("sub-1");
    let (two, seen_two) = subscriber("sub-2");
    wait_for("both subscribers receive quotes", 20, || {
        seen_one.lock().unwrap()[1] > 100 && seen_two.lock().unwrap()[1] > 100
    });
    // Once both say they receive the group, a second of quotes (about 500, in batches) costs
    // the publisher about one datagram per batch, not two.
    std::thread::sleep(Duration::from_millis(500));
    let before = (
        metric(&publisher.report(), "pub", "datagrams_out"),
        metric(&publisher.report(), "pub", "messages_out"),
        seen_one.lock().unwrap()[1],
        seen_two.lock().unwrap()[1],
    );
    std::thread::sleep(Duration::from_secs(1));
    let report = publisher.report();
    let datagrams = metric(&report, "pub", "datagrams_out") - before.0;
    let messages = metric(&report, "pub", "messages_out") - before.1;
    let got = (
        seen_one.lock().unwrap()[1] - before.2,
        seen_two.lock().unwrap()[1] - before.3,
    );
    println!("multicast: {messages} messages, {datagrams} datagrams out, received {got:?}");
    assert!(messages > 100, "{messages}");
    // Heartbeats (10/s to each subscriber and to the group) and renewals' answers aside.
    assert!(
        datagrams <= messages + 40,
        "{datagrams} datagrams for {messages} messages to two subscribers"
    );
    assert!(got.0 > 100 && got.1 > 100, "{got:?}");
    for running in [one, two, publisher] {
        running.stop();
        running.join().expect("stops cleanly");
    }
}

/// A discovering subscriber joins the data group of a multicast publisher it follows, and
/// leaves it when that publisher is gone: publishers that come and go do not make a bridge
/// hold groups (and their sockets) forever.
#[test]
#[cfg_attr(miri, ignore)]
fn a_bridge_leaves_a_data_group_once_no_import_uses_it() {
    let _cpu = crate::fixtures::cpu_shared();
    let data = group(4);
    if !tests::loopback_group_or_skip(data) || loopback_members(data).is_none() {
        return;
    }
    let subscriber = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(discovery(3))
        .discover::<Quote>();
    let status = subscriber.status();
    let by_source = Arc::new(Mutex::new([0u64; 3]));
    let mut bus = Bus::builder();
    let seen = Arc::clone(&by_source);
    bus.actor("seen", move |_: &mut Setup<'_>| Seen {
        by_source: Arc::clone(&seen),
    })
    .subscribes::<Quote>();
    bus.add(subscriber);
    let sub = bus.start().expect("subscriber starts");

    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .discovery(discovery(3))
        .export_multicast::<Quote>(data);
    let mut bus = Bus::builder();
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        source: 1,
        n: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Quote>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    wait_for(
        "the subscriber joins the publisher's data group",
        20,
        || loopback_members(data) == Some(1) && by_source.lock().unwrap()[1] > 50,
    );
    publisher.stop();
    publisher.join().expect("the publisher stops cleanly");
    wait_for("the publisher forgotten", 20, || {
        status.discovered().is_empty()
    });
    wait_for("the data group left", 10, || {
        loopback_members(data) == Some(0)
    });
    sub.stop();
    let report = sub.join().expect("the subscriber stops cleanly");
    assert_eq!(metric(&report, "sub", "discovery.lost"), 1);
}
