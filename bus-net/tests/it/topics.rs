//! Named topics across the bridge: two topics of one type exported and imported as two, each
//! subscriber getting only its own; a remapped topic goes on the wire under its running name.

use std::time::Duration;

use llbus::{Backpressure, Bus, Message, Topic};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};

use crate::fixtures::loopback;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.venue.quote")]
struct Quote {
    px: u64,
}

fn topic(name: &str) -> Topic<Quote> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn two_topics_of_one_type_cross_the_bridge_as_two() {
    let (nyse, nasdaq) = (topic("md.quote.nyse"), topic("md.quote.nasdaq"));
    let mut a = Bus::builder();
    let feeds = [
        a.publisher_on(&nyse, "nyse-feed"),
        a.publisher_on(&nasdaq, "nasdaq-feed"),
    ];
    let exporter = Bridge::bind(loopback()).expect("bind");
    let addr = exporter.local_addr();
    a.add(exporter.export_on(&nyse).export_on(&nasdaq));
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .import_on(&nyse, addr)
            .import_on(&nasdaq, addr),
    );
    let nyse_tap = b.subscription_on(&nyse, "nyse-tap", Backpressure::Block, 4096);
    let nasdaq_tap = b.subscription_on(&nasdaq, "nasdaq-tap", Backpressure::Block, 4096);
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let [nyse_feed, nasdaq_feed] = feeds;
    let mut nyse_feed = a.publisher(nyse_feed).expect("feed");
    let mut nasdaq_feed = a.publisher(nasdaq_feed).expect("feed");
    let mut nyse_tap = b.subscription(nyse_tap).expect("tap");
    let mut nasdaq_tap = b.subscription(nasdaq_tap).expect("tap");
    // Until both subscriptions are admitted, quotes go nowhere: publish until one of each
    // arrives, then a numbered run of each.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut got_nyse, mut got_nasdaq) = (false, false);
    while !(got_nyse && got_nasdaq) {
        assert!(
            std::time::Instant::now() < deadline,
            "no quote crossed in 30 s"
        );
        nyse_feed.publish(Quote { px: 0 }).expect("publish");
        nasdaq_feed
            .publish(Quote { px: 1_000_000 })
            .expect("publish");
        std::thread::sleep(Duration::from_millis(5));
        got_nyse |= nyse_tap.try_recv().is_ok();
        got_nasdaq |= nasdaq_tap.try_recv().is_ok();
    }
    for i in 1..=100 {
        nyse_feed.publish(Quote { px: i }).expect("publish");
        nasdaq_feed
            .publish(Quote { px: 1_000_000 + i })
            .expect("publish");
    }
    let take = |tap: &mut llbus::Subscription<Quote>, last: u64| {
        let mut got = Vec::new();
        loop {
            let q = tap
                .recv_timeout(Duration::from_secs(30))
                .expect("a quote within 30 s");
            got.push(q.px);
            if q.px == last {
                return got;
            }
        }
    };
    let nyse_got = take(&mut nyse_tap, 100);
    let nasdaq_got = take(&mut nasdaq_tap, 1_000_100);
    assert!(
        nyse_got.iter().all(|px| *px <= 100),
        "a NASDAQ quote on NYSE: {nyse_got:?}"
    );
    assert!(
        nasdaq_got.iter().all(|px| *px >= 1_000_000),
        "a NYSE quote on NASDAQ: {nasdaq_got:?}"
    );
    let tail = |got: &[u64], from: u64| got.iter().filter(|px| **px >= from).count();
    assert_eq!(tail(&nyse_got, 1), 100, "{nyse_got:?}");
    assert_eq!(tail(&nasdaq_got, 1_000_001), 100, "{nasdaq_got:?}");
    drop((nyse_feed, nasdaq_feed));
    a.stop();
    b.stop();
    let (ra, rb) = (a.join().expect("join a"), b.join().expect("join b"));
    // Each topic crossed under its own id: each import published into its own topic only.
    assert!(rb
        .edges
        .iter()
        .any(|e| e.topic == "md.quote.nyse" && e.subscriber == "nyse-tap"));
    assert!(rb
        .edges
        .iter()
        .any(|e| e.topic == "md.quote.nasdaq" && e.subscriber == "nasdaq-tap"));
    assert!(ra.edges.iter().all(|e| e.topic != Quote::TOPIC));
}

/// A program that exports its type's default topic, deployed with a remap: the bridge exports
/// the running name (its id on the wire), so a subscriber of the new name gets the quotes.
#[test]
fn a_remapped_topic_crosses_under_its_running_name() {
    let renamed = topic("site2.quote");
    let mut a = Bus::builder();
    a.remap(Quote::TOPIC, "site2.quote");
    let feed = a.publisher::<Quote>("feed");
    let exporter = Bridge::bind(loopback()).expect("bind");
    let addr = exporter.local_addr();
    let status = exporter.status();
    a.add(exporter.export::<Quote>());
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .import_on(&renamed, addr),
    );
    let tap = b.subscription_on(&renamed, "tap", Backpressure::Block, 1024);
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let mut feed = a.publisher(feed).expect("feed");
    let mut tap = b.subscription(tap).expect("tap");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no quote crossed in 30 s"
        );
        feed.publish(Quote { px: 7 }).expect("publish");
        std::thread::sleep(Duration::from_millis(5));
        if let Ok(q) = tap.try_recv() {
            assert_eq!(q.px, 7);
            break;
        }
    }
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    drop(feed);
    a.stop();
    b.stop();
    let ra = a.join().expect("join a");
    assert!(ra.edges.iter().any(|e| e.topic == "site2.quote"), "{ra}");
    b.join().expect("join b");
}

/// Discovery by name: a subscriber that discovers one of two announced topics of one type
/// follows that one only.
#[test]
#[cfg_attr(miri, ignore)]
fn discovery_of_a_named_topic_follows_that_topic_only() {
    let _cpu = crate::fixtures::cpu_shared();
    if !tests::loopback_group_or_skip(crate::discovery::group(30)) {
        return;
    }
    let (nyse, nasdaq) = (topic("md.quote.nyse"), topic("md.quote.nasdaq"));
    let mut a = Bus::builder();
    let feeds = [
        a.publisher_on(&nyse, "nyse-feed"),
        a.publisher_on(&nasdaq, "nasdaq-feed"),
    ];
    a.add(
        Bridge::bind(loopback())
            .expect("bind")
            .discovery(crate::discovery::discovery(30))
            .export_on(&nyse)
            .export_on(&nasdaq),
    );
    let subscriber = Bridge::bind(loopback())
        .expect("bind")
        .discovery(crate::discovery::discovery(30))
        .discover_on(&nasdaq);
    let status = subscriber.status();
    let mut b = Bus::builder();
    b.add(subscriber);
    let tap = b.subscription_on(&nasdaq, "tap", Backpressure::Block, 4096);
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let [nyse_feed, nasdaq_feed] = feeds;
    let (mut nyse_feed, mut nasdaq_feed) = (
        a.publisher(nyse_feed).expect("feed"),
        a.publisher(nasdaq_feed).expect("feed"),
    );
    let mut tap = b.subscription(tap).expect("tap");
    tests::wait_for("the NASDAQ topic discovered and established", 20, || {
        status.discovered().iter().any(|d| d.established)
    });
    let found = status.discovered();
    assert!(
        found.iter().all(|d| &*d.topic == "md.quote.nasdaq"),
        "{found:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < 20 {
        assert!(std::time::Instant::now() < deadline, "got only {got:?}");
        nyse_feed.publish(Quote { px: 1 }).expect("publish");
        nasdaq_feed.publish(Quote { px: 2 }).expect("publish");
        std::thread::sleep(Duration::from_millis(2));
        while let Ok(q) = tap.try_recv() {
            got.push(q.px);
        }
    }
    assert!(
        got.iter().all(|px| *px == 2),
        "a NYSE quote arrived: {got:?}"
    );
    drop((nyse_feed, nasdaq_feed));
    a.stop();
    b.stop();
    a.join().expect("join a");
    b.join().expect("join b");
}

/// Another type, announced under a name that `md.quote.*` matches.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "md.quote.odd")]
struct Odd {
    text: String,
}

#[test]
#[cfg_attr(miri, ignore)]
fn discovery_by_pattern_imports_each_matching_venue_under_its_own_name() {
    let _cpu = crate::fixtures::cpu_shared();
    if !tests::loopback_group_or_skip(crate::discovery::group(31)) {
        return;
    }
    let venues = [
        topic("md.quote.nyse"),
        topic("md.quote.nasdaq"),
        topic("md.quote.lse"),
    ];
    let mut a = Bus::builder();
    let feeds = venues
        .each_ref()
        .map(|t| a.publisher_on(t, &format!("{}-feed", t.name())));
    let odd_feed = a.publisher::<Odd>("odd-feed");
    a.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("pub")
            .discovery(crate::discovery::discovery(31))
            .export_on(&venues[0])
            .export_on(&venues[1])
            .export_on(&venues[2])
            .export::<Odd>(),
    );
    let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
    let subscriber = Bridge::bind(loopback())
        .expect("bind")
        .name("sub")
        .discovery(crate::discovery::discovery(31))
        .discover_matching::<Quote>(&pattern);
    let status = subscriber.status();
    let mut b = Bus::builder();
    b.add(subscriber);
    // Subscribed here: two of the three venues (LSE is announced and left alone).
    let taps = [&venues[0], &venues[1]]
        .map(|t| b.subscription_on(t, &format!("{}-tap", t.name()), Backpressure::Block, 4096));
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let mut feeds = feeds.map(|f| a.publisher(f).expect("feed"));
    let mut odd_feed = a.publisher(odd_feed).expect("odd feed");
    let mut taps = taps.map(|t| b.subscription(t).expect("tap"));
    tests::wait_for("both venues discovered and established", 20, || {
        let found = status.discovered();
        ["md.quote.nyse", "md.quote.nasdaq"]
            .iter()
            .all(|v| found.iter().any(|d| &*d.topic == *v && d.established))
    });
    let got = collect(&mut taps, || {
        for (px, feed) in (1..).zip(&mut feeds) {
            feed.publish(Quote { px }).expect("publish");
        }
        odd_feed.publish(Odd { text: "x".into() }).expect("publish");
    });
    // Each venue's subscription gets its own venue's quotes only.
    assert!(got[0].iter().all(|px| *px == 1), "NYSE tap: {got:?}");
    assert!(got[1].iter().all(|px| *px == 2), "NASDAQ tap: {got:?}");
    let found = status.discovered();
    assert!(
        found.iter().all(|d| &*d.topic != "md.quote.lse"),
        "LSE has no local subscriber and is followed: {found:?}"
    );
    // The other type under a matching name is reported, once.
    tests::wait_for("the mismatched topic reported", 20, || {
        status.warnings().iter().any(|w| w.contains("md.quote.odd"))
    });
    let reports = status.warnings();
    assert_eq!(
        reports
            .iter()
            .filter(|w| w.contains("md.quote.odd"))
            .count(),
        1,
        "{reports:?}"
    );
    drop((feeds, odd_feed, taps));
    a.stop();
    b.stop();
    a.join().expect("join a");
    let report = b.join().expect("join b");
    assert!(tests::metric(&report, "sub", "discovery.mismatched") >= 1);
    assert!(tests::metric(&report, "sub", "discovery.unsubscribed") >= 1);
}

#[test]
fn a_pattern_that_matches_no_local_subscription_is_reported_at_start() {
    let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
    let subscriber = Bridge::bind(loopback())
        .expect("bind")
        .discovery(llbus_net::DiscoveryConfig {
            group: None,
            ..Default::default()
        })
        .discover_matching::<Quote>(&pattern);
    let status = subscriber.status();
    let mut b = Bus::builder();
    b.add(subscriber);
    // A subscription of the type under a name the pattern does not match.
    let other = topic("md.quotes");
    let _feed = b.publisher_on(&other, "feed");
    let _tap = b.subscription_on(&other, "tap", Backpressure::Block, 16);
    let b = b.start().expect("start");
    b.stop();
    b.join().expect("join");
    let warnings = status.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("md.quote.*") && w.contains("matches no topic")),
        "{warnings:?}"
    );
}

/// Calls `publish` and collects each tap's quotes until every tap has 20, within 30 s.
fn collect(taps: &mut [llbus::Subscription<Quote>], mut publish: impl FnMut()) -> Vec<Vec<u64>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut got = vec![Vec::new(); taps.len()];
    while got.iter().any(|g| g.len() < 20) {
        assert!(std::time::Instant::now() < deadline, "got only {got:?}");
        publish();
        std::thread::sleep(Duration::from_millis(2));
        for (tap, got) in taps.iter_mut().zip(&mut got) {
            while let Ok(q) = tap.try_recv() {
                got.push(q.px);
            }
        }
    }
    got
}

#[test]
#[cfg_attr(miri, ignore)]
fn named_topics_cross_by_multicast_and_reliably_each_under_its_name() {
    let _cpu = crate::fixtures::cpu_shared();
    let port = 22_000 + (std::process::id() % 20_000) as u16;
    let group = std::net::SocketAddr::from(([239, 255, 79, 1], port));
    if !tests::loopback_group_or_skip(group) {
        return;
    }
    let (nyse, nasdaq) = (topic("md.quote.nyse"), topic("md.quote.nasdaq"));
    let mut a = Bus::builder();
    let feeds = [
        a.publisher_on(&nyse, "nyse-feed"),
        a.publisher_on(&nasdaq, "nasdaq-feed"),
    ];
    let config = llbus_net::BridgeConfig {
        multicast: llbus_net::MulticastConfig {
            interface: Some(std::net::Ipv4Addr::LOCALHOST.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let exporter = Bridge::bind_with(loopback(), config.clone())
        .expect("bind")
        .name("pub")
        .export_multicast_on(&nyse, group)
        .export_reliable_on(&nasdaq);
    let at = exporter.local_addr();
    a.add(exporter);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind_with(loopback(), config)
            .expect("bind")
            .name("sub")
            .import_on(&nyse, at)
            .import_reliable_on(&nasdaq, at),
    );
    let taps = [&nyse, &nasdaq]
        .map(|t| b.subscription_on(t, &format!("{}-tap", t.name()), Backpressure::Block, 4096));
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let mut feeds = feeds.map(|f| a.publisher(f).expect("feed"));
    let mut taps = taps.map(|t| b.subscription(t).expect("tap"));
    // A member of the group hears the NYSE data there (for up to 5 s).
    let listener = std::thread::spawn(move || tests::overhear_data(group));
    let got = collect(&mut taps, || {
        for (px, feed) in (1..).zip(&mut feeds) {
            // A full ring (nobody subscribed yet) only drops.
            let _ = feed.try_publish(Quote { px });
        }
    });
    assert!(got[0].iter().all(|px| *px == 1), "NYSE tap: {got:?}");
    assert!(got[1].iter().all(|px| *px == 2), "NASDAQ tap: {got:?}");
    while !listener.is_finished() {
        let _ = feeds[0].try_publish(Quote { px: 1 });
        std::thread::sleep(Duration::from_millis(2));
    }
    let heard = listener.join().expect("listener");
    assert!(heard.is_some(), "no NYSE data on the group {group}");
    drop((feeds, taps));
    a.stop();
    b.stop();
    a.join().expect("join a");
    b.join().expect("join b");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_named_direct_sender_and_a_named_compat_pair_carry_their_own_topics() {
    let _cpu = crate::fixtures::cpu_shared();
    let (nyse, nasdaq) = (topic("md.quote.nyse"), topic("md.quote.nasdaq"));
    let compat = tests::example_bins::free_udp_addr();
    let mut a = Bus::builder();
    let nasdaq_feed = a.publisher_on(&nasdaq, "nasdaq-feed");
    let mut exporter = Bridge::bind(loopback())
        .expect("bind")
        .name("pub")
        .export_compat_on(&nasdaq, compat)
        .expect("compat socket");
    let mut direct = exporter.direct_on(&nyse).expect("direct sender");
    let at = exporter.local_addr();
    a.add(exporter);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("sub")
            .import_on(&nyse, at)
            .import_compat_on(&nasdaq, "127.0.0.1:0", compat)
            .expect("compat socket"),
    );
    let taps = [&nyse, &nasdaq]
        .map(|t| b.subscription_on(t, &format!("{}-tap", t.name()), Backpressure::Block, 4096));
    let mut a = a.start().expect("publisher bus");
    let mut b = b.start().expect("subscriber bus");
    let mut nasdaq_feed = a.publisher(nasdaq_feed).expect("feed");
    let mut taps = taps.map(|t| b.subscription(t).expect("tap"));
    let got = collect(&mut taps, || {
        direct.send(&Quote { px: 1 }).expect("direct send");
        let _ = nasdaq_feed.try_publish(Quote { px: 2 });
    });
    assert!(got[0].iter().all(|px| *px == 1), "NYSE tap: {got:?}");
    assert!(got[1].iter().all(|px| *px == 2), "NASDAQ tap: {got:?}");
    drop((nasdaq_feed, taps, direct));
    a.stop();
    b.stop();
    a.join().expect("join a");
    b.join().expect("join b");
}

/// A bridge that exports a topic and discovers a pattern matching it never imports that
/// topic into the bus (it would feed its own export), even when another local actor
/// subscribes to it.
#[test]
fn a_pattern_never_imports_the_bridges_own_export_that_another_actor_subscribes_to() {
    let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
    let (nyse, nasdaq) = (topic("md.quote.nyse"), topic("md.quote.nasdaq"));
    let mut b = Bus::builder();
    let _feed = b.publisher_on(&nyse, "nyse-feed");
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("bridge")
            .discovery(llbus_net::DiscoveryConfig {
                group: None,
                ..Default::default()
            })
            .export_on(&nyse)
            .discover_matching::<Quote>(&pattern),
    );
    let _nyse_tap = b.subscription_on(&nyse, "nyse-tap", Backpressure::Block, 16);
    let _nasdaq_tap = b.subscription_on(&nasdaq, "nasdaq-tap", Backpressure::Block, 16);
    let b = b.start().expect("start");
    let report = b.report();
    assert!(
        report.edge("md.quote.nyse", "bridge", "bridge").is_none(),
        "the bridge is wired to its own export"
    );
    assert!(
        report.edge("md.quote.nyse", "bridge", "nyse-tap").is_none(),
        "the bridge imports the topic it exports"
    );
    assert!(report
        .edge("md.quote.nasdaq", "bridge", "nasdaq-tap")
        .is_some());
    b.stop();
    b.join().expect("join");
}
