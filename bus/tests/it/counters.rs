//! The live counters file: a running bus publishes every figure of its report there, another
//! reader gets the same figures as `RunningBus::snapshot()`, and the file goes with the bus.

use llbus::{read_counters_file, Backpressure, Bus};
use tests::{assert_balanced, wait_for};

use crate::fixtures::Num;

#[test]
fn a_running_bus_publishes_its_counters_and_removes_the_file_on_join() {
    let mut bus = Bus::builder();
    bus.name("counters test");
    let feed = bus.publisher::<Num>("feed");
    let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 8);
    let mut running = bus.start().expect("start");
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    assert!(
        path.starts_with(llbus::counters_dir()),
        "{}",
        path.display()
    );
    assert!(llbus::counters_files().unwrap().contains(&path));
    let mut feed = running.publisher(feed).unwrap();
    let mut tap = running.subscription(tap).unwrap();
    for i in 0..20 {
        feed.publish(Num(i)).unwrap();
    }
    for _ in 0..3 {
        tap.try_recv().unwrap();
    }
    // The bus is quiet now: the file's next snapshots show exactly the live figures.
    let live = running.snapshot();
    wait_for("the counters file to catch up", 30, || {
        let s = read_counters_file(&path).expect("read");
        s.edges
            .first()
            .map(|e| (e.published, e.handled, e.dropped, e.in_flight))
            == Some((20, 3, 12, 5))
    });
    let s = read_counters_file(&path).unwrap();
    assert_eq!(s.bus, "counters test");
    assert_eq!(s.pid, u64::from(std::process::id()));
    assert!(s.is_live());
    let (e, l) = (&s.edges[0], &live.edges[0]);
    assert_eq!(
        (
            e.topic.as_str(),
            e.publisher.as_str(),
            e.subscriber.as_str(),
            e.policy.as_str()
        ),
        (
            l.topic.as_str(),
            l.publisher.as_str(),
            l.subscriber.as_str(),
            "DropNewest"
        )
    );
    assert_eq!(
        [
            e.published,
            e.handled,
            e.dropped,
            e.lost,
            e.in_flight,
            e.max_depth
        ],
        [
            l.published,
            l.handled,
            l.dropped,
            l.lost,
            l.in_flight,
            l.max_depth
        ]
    );
    let tap_row = s.actors.iter().find(|a| a.name == "tap").expect("tap row");
    assert_eq!((tap_row.handled, tap_row.thread.as_str()), (3, "(handle)"));
    // The heartbeat moves while the bus runs.
    let first = s.heartbeat_unix_ns;
    wait_for("a newer heartbeat", 30, || {
        read_counters_file(&path).unwrap().heartbeat_unix_ns > first
    });
    running.stop();
    drop(feed);
    let report = running.join().unwrap();
    drop(tap);
    assert_eq!(report.edges[0].published, 20);
    assert!(!path.exists(), "the counters file outlived its bus");
}

#[test]
fn a_bus_can_run_without_a_counters_file() {
    let mut bus = Bus::builder();
    bus.counters_file(false);
    let _feed = bus.publisher::<Num>("feed");
    let _tap = bus.subscription::<Num>("tap");
    let running = bus.start().unwrap();
    assert!(running.counters_path().is_none());
    running.stop();
    assert_balanced(&running.join().unwrap());
}

#[test]
fn the_counters_file_names_each_topic_as_it_runs() {
    let mut bus = Bus::builder();
    bus.name("named counters test");
    bus.remap("venue.b", "md.num.b");
    let (a, b) = (
        llbus::Topic::<Num>::named("md.num.a").expect("name"),
        llbus::Topic::<Num>::named("venue.b").expect("name"),
    );
    let _feeds = [
        bus.publisher_on(&a, "feed-a"),
        bus.publisher_on(&b, "feed-b"),
    ];
    let _taps = [
        bus.subscription_on(&a, "tap-a", Backpressure::DropNewest, 8),
        bus.subscription_on(&b, "tap-b", Backpressure::DropNewest, 8),
    ];
    let running = bus.start().expect("start");
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    let s = read_counters_file(&path).expect("read");
    let mut edges: Vec<(&str, &str)> = (s.edges.iter())
        .map(|e| (e.topic.as_str(), e.subscriber.as_str()))
        .collect();
    edges.sort_unstable();
    assert_eq!(edges, [("md.num.a", "tap-a"), ("md.num.b", "tap-b")]);
    running.stop();
    assert_balanced(&running.join().expect("join"));
}
