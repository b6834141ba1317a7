//! The builder means what it says: per-topic settings resolve at `start()` against the final
//! defaults whatever the order of the calls, every setting that cannot work is a `StartError`
//! naming it (never a panic), and an actor's figures agree with its edges after a panic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Actor, Backpressure, Bus, Context, RestartLimit, Setup, StartError, Supervision};
use tests::{assert_balanced, bounded, wait_for};

#[derive(Clone, Debug, PartialEq)]
struct Num(u64);
tests::message!(Num, "builder.num");

/// Takes no message until released: its `on_start` waits (at most 20 s).
struct Gated {
    gate: Arc<AtomicBool>,
}

impl Actor for Gated {
    type In = Num;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while !self.gate.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {}
}

/// Publishes 100 numbers into a `DropNewest` subscription with a default capacity of 4, set
/// before or after the backpressure; returns how many were dropped.
fn dropped_with(default_capacity_first: bool) -> u64 {
    let gate = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    let feed = bus.publisher::<Num>("feed");
    let g = Arc::clone(&gate);
    let actor = bus
        .actor("gated", move |_: &mut Setup<'_>| Gated {
            gate: Arc::clone(&g),
        })
        .subscribes::<Num>();
    let _ = if default_capacity_first {
        actor
            .default_capacity(4)
            .backpressure::<Num>(Backpressure::DropNewest)
    } else {
        actor
            .backpressure::<Num>(Backpressure::DropNewest)
            .default_capacity(4)
    };
    let mut running = bus.start().expect("start");
    let mut feed = running.publisher(feed).unwrap();
    for i in 0..100 {
        feed.publish(Num(i)).unwrap();
    }
    gate.store(true, Ordering::SeqCst);
    running.stop();
    drop(feed);
    let report = running.join().expect("join");
    assert_balanced(&report);
    report.edge("builder.num", "feed", "gated").unwrap().dropped
}

#[test]
fn a_default_capacity_applies_whether_set_before_or_after_the_backpressure() {
    bounded("builder order", 60, || {
        assert_eq!(dropped_with(true), 96);
        assert_eq!(dropped_with(false), 96);
    });
}

/// Does nothing.
struct Quiet;

impl Actor for Quiet {
    type In = Num;
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {}
}

/// `start()`'s error for a bus with a feed and one subscriber configured by `configure`.
fn refused(
    configure: impl FnOnce(&mut llbus::BusBuilder),
    subscriber: impl FnOnce(llbus::ActorBuilder<'_, Quiet>) -> llbus::ActorBuilder<'_, Quiet>,
) -> String {
    let mut bus = Bus::builder();
    configure(&mut bus);
    let _feed = bus.publisher::<Num>("feed");
    let actor = bus
        .actor("quiet", |_: &mut Setup<'_>| Quiet)
        .subscribes::<Num>();
    let _ = subscriber(actor);
    match bus.start() {
        Err(StartError::Invalid(why)) => why,
        Err(other) => panic!("expected Invalid, got {other}"),
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("start() accepted a setting that cannot work");
        }
    }
}

#[test]
fn settings_that_cannot_work_are_start_errors_naming_them() {
    let why = refused(
        |bus| {
            bus.stop_timeout(Duration::ZERO);
        },
        |a| a,
    );
    assert!(why.contains("stop timeout"), "{why}");
    // Overflows the ring's power of two: an error, not a panic inside start().
    let why = refused(|_| {}, |a| a.capacity::<Num>(usize::MAX));
    assert!(
        why.contains("capacity") && why.contains("builder.num"),
        "{why}"
    );
    // A ring larger than any memory.
    let why = refused(|_| {}, |a| a.capacity::<Num>(1 << 60));
    assert!(why.contains("memory"), "{why}");
    let why = refused(|_| {}, |a| a.default_capacity(0));
    assert!(why.contains("capacity of 0"), "{why}");
    let why = refused(
        |_| {},
        |a| a.supervision(Supervision::Restart(RestartLimit::new(3, Duration::ZERO))),
    );
    assert!(why.contains("restart window"), "{why}");
}

#[test]
fn an_actor_s_handled_agrees_with_its_edges_after_a_panic_mid_turn() {
    bounded("figures after a panic", 60, || {
        let gate = Arc::new(AtomicBool::new(false));
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let g = Arc::clone(&gate);
        // The gate holds the first instance before it polls, so 20 messages wait in its ring
        // and its first turn takes them in one batch: the panic comes mid-turn.
        let mut first = true;
        bus.actor("panicky", move |_: &mut Setup<'_>| {
            let gated = first;
            first = false;
            GatedThenPanicky {
                gate: gated.then(|| Arc::clone(&g)),
                seen: 0,
            }
        })
        .subscribes::<Num>()
        .supervision(Supervision::Restart(RestartLimit::new(
            3,
            Duration::from_secs(10),
        )));
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        for i in 0..20 {
            feed.publish(Num(i)).unwrap();
        }
        gate.store(true, Ordering::SeqCst);
        wait_for("every message handled or panicked", 30, || {
            running
                .snapshot()
                .edge("builder.num", "feed", "panicky")
                .is_some_and(|e| e.handled + e.panicked == 20)
        });
        running.stop();
        drop(feed);
        let report = running.join().expect("join");
        let e = report.edge("builder.num", "feed", "panicky").unwrap();
        assert_eq!((e.handled, e.panicked), (19, 1), "{e:?}");
        let a = report.actor("panicky").unwrap();
        assert_eq!(a.handled, e.handled, "actor {a:?} against edge {e:?}");
        assert_balanced(&report);
    });
}

/// The first instance waits at a gate before it takes any message, then panics on its tenth;
/// the instances that replace it never panic.
struct GatedThenPanicky {
    gate: Option<Arc<AtomicBool>>,
    seen: u64,
}

impl Actor for GatedThenPanicky {
    type In = Num;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        if let Some(gate) = &self.gate {
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while !gate.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {
        self.seen += 1;
        if self.seen == 10 && self.gate.is_some() {
            panic!("the tenth message");
        }
    }
}
