//! Backpressure and supervision policies, with exact counts, and group threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, BusError, Context, Out, RestartLimit, Setup, Supervision};

use crate::fixtures::Num;

/// Waits (bounded) until `flag` is set.
fn wait_for(flag: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !flag.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "gate never opened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Publishes 0..count in `on_start`, then opens `done` and asks the bus to stop.
struct Burst {
    count: u64,
    out: Out<Num>,
    done: Arc<AtomicBool>,
}

impl Actor for Burst {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for n in 0..self.count {
            ctx.publish(self.out, Num(n));
        }
        self.done.store(true, Ordering::Release);
        ctx.request_stop();
    }
}

/// Records what it receives; its `on_start` can wait for a gate or sleep first; it can panic
/// on one value.
struct Recorder {
    seen: Arc<Mutex<Vec<u64>>>,
    gate: Option<Arc<AtomicBool>>,
    sleep: Duration,
    panic_on: Option<u64>,
}

impl Actor for Recorder {
    type In = Num;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        if let Some(gate) = &self.gate {
            wait_for(gate);
        }
        std::thread::sleep(self.sleep);
    }
    fn on_message(&mut self, msg: Num, _ctx: &mut Context<'_>) {
        if Some(msg.0) == self.panic_on {
            panic!("boom on {}", msg.0);
        }
        self.seen.lock().unwrap().push(msg.0);
    }
}

struct Fixture {
    seen: Arc<Mutex<Vec<u64>>>,
    done: Arc<AtomicBool>,
}

/// A burst publisher and one recorder with the given policy and capacity 8.
fn burst_bus(
    count: u64,
    policy: Backpressure,
    gated: bool,
    sleep: Duration,
) -> (llbus::BusBuilder, Fixture) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    let d = Arc::clone(&done);
    bus.actor("burst", move |s: &mut Setup<'_>| Burst {
        count,
        out: s.output(),
        done: Arc::clone(&d),
    })
    .publishes::<Num>();
    let (s2, gate) = (Arc::clone(&seen), gated.then(|| Arc::clone(&done)));
    bus.actor("recorder", move |_: &mut Setup<'_>| Recorder {
        seen: Arc::clone(&s2),
        gate: gate.clone(),
        sleep,
        panic_on: None,
    })
    .subscribes::<Num>()
    .capacity::<Num>(8)
    .backpressure::<Num>(policy);
    (bus, Fixture { seen, done })
}

#[test]
fn block_waits_and_delivers_everything() {
    let (bus, f) = burst_bus(100, Backpressure::Block, false, Duration::from_millis(50));
    let report = bus.start().unwrap().join().unwrap();
    let e = report.edge("test.num", "burst", "recorder").unwrap();
    assert_eq!(
        (e.published, e.handled, e.dropped, e.lost),
        (100, 100, 0, 0)
    );
    assert!(
        e.waited >= 1,
        "the publisher must have found the ring full: {e:?}"
    );
    tests::assert_balanced(&report);
    assert_eq!(*f.seen.lock().unwrap(), (0..100).collect::<Vec<_>>());
}

#[test]
fn drop_newest_keeps_the_first_capacity_messages_and_counts_the_rest() {
    let (bus, f) = burst_bus(100, Backpressure::DropNewest, true, Duration::ZERO);
    let report = bus.start().unwrap().join().unwrap();
    let e = report.edge("test.num", "burst", "recorder").unwrap();
    assert_eq!(
        (e.published, e.handled, e.dropped, e.waited, e.lost),
        (100, 8, 92, 0, 0),
        "every publish is counted: 8 handled, 92 dropped"
    );
    tests::assert_balanced(&report);
    assert_eq!(*f.seen.lock().unwrap(), (0..8).collect::<Vec<_>>());
    assert!(f.done.load(Ordering::Relaxed));
}

#[test]
fn latest_delivers_only_the_final_value_and_counts_conflations() {
    let (bus, f) = burst_bus(100, Backpressure::Latest, true, Duration::ZERO);
    let report = bus.start().unwrap().join().unwrap();
    let e = report.edge("test.num", "burst", "recorder").unwrap();
    assert_eq!(
        (e.published, e.handled, e.conflated, e.dropped, e.lost),
        (100, 1, 99, 0, 0)
    );
    tests::assert_balanced(&report);
    assert_eq!(*f.seen.lock().unwrap(), [99]);
}

/// A recorder bus where the recorder panics on 3, with the given policy; also a second, healthy
/// recorder on the same topic.
fn panicking_bus(
    policy: Supervision,
    made: Arc<AtomicU64>,
) -> (llbus::BusBuilder, Fixture, Arc<Mutex<Vec<u64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let healthy = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    let d = Arc::clone(&done);
    bus.actor("burst", move |s: &mut Setup<'_>| Burst {
        count: 10,
        out: s.output(),
        done: Arc::clone(&d),
    })
    .publishes::<Num>();
    let s2 = Arc::clone(&seen);
    bus.actor("fragile", move |_: &mut Setup<'_>| {
        made.fetch_add(1, Ordering::Relaxed);
        Recorder {
            seen: Arc::clone(&s2),
            gate: None,
            sleep: Duration::ZERO,
            panic_on: Some(3),
        }
    })
    .subscribes::<Num>()
    .supervision(policy);
    let h2 = Arc::clone(&healthy);
    bus.actor("healthy", move |_: &mut Setup<'_>| Recorder {
        seen: Arc::clone(&h2),
        gate: None,
        sleep: Duration::ZERO,
        panic_on: None,
    })
    .subscribes::<Num>();
    (bus, Fixture { seen, done }, healthy)
}

#[test]
fn restart_replaces_the_actor_on_the_same_rings() {
    let made = Arc::new(AtomicU64::new(0));
    let (bus, f, healthy) = panicking_bus(
        Supervision::Restart(RestartLimit::default()),
        Arc::clone(&made),
    );
    let report = bus.start().unwrap().join().unwrap();
    assert_eq!(made.load(Ordering::Relaxed), 2, "made once, remade once");
    assert_eq!(*f.seen.lock().unwrap(), [0, 1, 2, 4, 5, 6, 7, 8, 9]);
    let a = report.actor("fragile").unwrap();
    assert_eq!((a.restarts, a.panics), (1, 1));
    let e = report.edge("test.num", "burst", "fragile").unwrap();
    assert_eq!(
        (e.published, e.handled, e.panicked, e.lost),
        (10, 9, 1, 0),
        "3 panicked, the rest handled by the old or the new instance"
    );
    tests::assert_balanced(&report);
    assert_eq!(healthy.lock().unwrap().len(), 10);
}

#[test]
fn stop_ends_the_actor_counts_its_queue_as_lost_and_the_rest_runs_on() {
    let made = Arc::new(AtomicU64::new(0));
    let (bus, f, healthy) = panicking_bus(Supervision::Stop, Arc::clone(&made));
    let report = bus
        .start()
        .unwrap()
        .join()
        .expect("Stop does not fail the bus");
    let seen = f.seen.lock().unwrap().clone();
    assert_eq!(seen, [0, 1, 2]);
    let e = report.edge("test.num", "burst", "fragile").unwrap();
    // 0..=2 were handled, 3 panicked; everything else was lost, queued or published late.
    assert_eq!((e.handled, e.panicked, e.lost), (3, 1, 6), "{e:?}");
    tests::assert_balanced(&report);
    assert_eq!(report.actor("fragile").unwrap().panics, 1);
    assert_eq!(*healthy.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert!(f.done.load(Ordering::Relaxed));
}

#[test]
fn escalate_stops_the_bus_and_join_names_the_actor_and_the_panic() {
    let made = Arc::new(AtomicU64::new(0));
    let (bus, _f, _healthy) = panicking_bus(Supervision::Escalate, made);
    match bus.start().unwrap().join() {
        Err(BusError::ActorPanicked {
            actor,
            message,
            report,
        }) => {
            assert_eq!(actor, "fragile");
            assert_eq!(message, "boom on 3");
            assert_eq!(report.actor("fragile").unwrap().panics, 1);
        }
        other => panic!("expected an escalated panic, got {other:?}"),
    }
}

/// Always has work: never lets its thread idle.
struct Busy;
impl Actor for Busy {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        1
    }
}

#[test]
fn an_always_busy_actor_does_not_starve_its_group_mates() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    let d = Arc::clone(&done);
    bus.actor("burst", move |s: &mut Setup<'_>| Burst {
        count: 1000,
        out: s.output(),
        done: Arc::clone(&d),
    })
    .publishes::<Num>();
    bus.actor("busy", |_: &mut Setup<'_>| Busy).group("shared");
    let s2 = Arc::clone(&seen);
    bus.actor("mate", move |_: &mut Setup<'_>| Recorder {
        seen: Arc::clone(&s2),
        gate: None,
        sleep: Duration::ZERO,
        panic_on: None,
    })
    .group("shared")
    .subscribes::<Num>()
    .capacity::<Num>(16);
    let report = bus.start().unwrap().join().unwrap();
    assert_eq!(*seen.lock().unwrap(), (0..1000).collect::<Vec<_>>());
    assert_eq!(report.actor("busy").unwrap().thread, "shared");
    assert_eq!(report.actor("mate").unwrap().thread, "shared");
}
