//! The builder means what it says: per-topic settings resolve at `start()` against the final
//! defaults whatever the order of the calls, every setting that cannot work is a `StartError`
//! naming it (never a panic), and an actor's figures agree with its edges after a panic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Actor, Backpressure, Bus, Context, RestartLimit, Setup, StartError, Supervision};
use tests::{assert_balanced, bounded, wait_for};

use crate::fixtures::{Gated, Ignores, Nothing, Num, Tick, Ticker};

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
    report.edge("test.num", "feed", "gated").unwrap().dropped
}

#[test]
fn a_default_capacity_applies_whether_set_before_or_after_the_backpressure() {
    bounded("builder order", 60, || {
        assert_eq!(dropped_with(true), 96);
        assert_eq!(dropped_with(false), 96);
    });
}

/// `start()`'s error for a bus with a feed and one subscriber configured by `configure`.
fn refused(
    configure: impl FnOnce(&mut llbus::BusBuilder),
    subscriber: impl FnOnce(
        llbus::ActorBuilder<'_, Ignores<Num>>,
    ) -> llbus::ActorBuilder<'_, Ignores<Num>>,
) -> String {
    let mut bus = Bus::builder();
    configure(&mut bus);
    let _feed = bus.publisher::<Num>("feed");
    let actor = bus.actor("quiet", Ignores::<Num>::new).subscribes::<Num>();
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
        why.contains("capacity") && why.contains("test.num"),
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
                .edge("test.num", "feed", "panicky")
                .is_some_and(|e| e.handled + e.panicked == 20)
        });
        running.stop();
        drop(feed);
        let report = running.join().expect("join");
        let e = report.edge("test.num", "feed", "panicky").unwrap();
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

/// What `start()` makes of a bus declared by `f`: "invalid: ..." for a refusal naming the
/// setting, otherwise "panicked", "started" or "other: ...".
fn outcome_of(f: impl FnOnce(&mut llbus::BusBuilder) + std::panic::UnwindSafe) -> String {
    let got = std::panic::catch_unwind(move || {
        let mut bus = Bus::builder();
        f(&mut bus);
        bus.start().map(drop)
    });
    match got {
        Err(_) => "panicked".to_owned(),
        Ok(Ok(())) => "started".to_owned(),
        Ok(Err(StartError::Invalid(m))) => format!("invalid: {m}"),
        Ok(Err(e)) => format!("other: {e}"),
    }
}

/// Declares something on a builder (a case of the test below).
type Declare = Box<dyn FnOnce(&mut llbus::BusBuilder) + std::panic::UnwindSafe>;

#[test]
fn capacities_and_durations_that_cannot_work_are_invalid_not_panics() {
    bounded("builder limits", 60, || {
        let cases: Vec<(&str, Declare)> = vec![
            (
                "capacity usize::MAX",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", Ignores::<Tick>::new)
                        .subscribes::<Tick>()
                        .capacity::<Tick>(usize::MAX);
                    b.actor("p", Ticker::new).publishes::<Tick>();
                }),
            ),
            (
                "capacity 2^62",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", Ignores::<Tick>::new)
                        .subscribes::<Tick>()
                        .capacity::<Tick>(1 << 62);
                    b.actor("p", Ticker::new).publishes::<Tick>();
                }),
            ),
            (
                "capacity 2^40 (beyond memory)",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", Ignores::<Tick>::new)
                        .subscribes::<Tick>()
                        .capacity::<Tick>(1 << 40);
                    b.actor("p", Ticker::new).publishes::<Tick>();
                }),
            ),
            (
                "default_capacity 0 after backpressure",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", Ignores::<Tick>::new)
                        .subscribes::<Tick>()
                        .backpressure::<Tick>(Backpressure::DropNewest)
                        .default_capacity(0);
                    b.actor("p", Ticker::new).publishes::<Tick>();
                }),
            ),
            (
                "handle capacity usize::MAX",
                Box::new(|b: &mut llbus::BusBuilder| {
                    let _ = b.publisher::<Tick>("p");
                    let _ = b.subscription_with::<Tick>("s", Backpressure::Block, usize::MAX);
                }),
            ),
            (
                "handle capacity 0",
                Box::new(|b: &mut llbus::BusBuilder| {
                    let _ = b.publisher::<Tick>("p");
                    let _ = b.subscription_with::<Tick>("s", Backpressure::Block, 0);
                }),
            ),
            (
                "stop_timeout 0",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.stop_timeout(Duration::ZERO);
                    b.actor("a", |_: &mut Setup<'_>| Nothing);
                }),
            ),
            (
                "stop_timeout MAX",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.stop_timeout(Duration::MAX);
                    b.actor("a", |_: &mut Setup<'_>| Nothing);
                }),
            ),
            (
                "tick MAX",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", |_: &mut Setup<'_>| Nothing)
                        .tick_every(Duration::MAX);
                }),
            ),
            (
                "restart window 0",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", |_: &mut Setup<'_>| Nothing)
                        .supervision(Supervision::Restart(RestartLimit {
                            max_restarts: 3,
                            within: Duration::ZERO,
                            delay: Duration::from_millis(1),
                        }));
                }),
            ),
            (
                "restart delay MAX",
                Box::new(|b: &mut llbus::BusBuilder| {
                    b.actor("a", |_: &mut Setup<'_>| Nothing)
                        .supervision(Supervision::Restart(RestartLimit {
                            max_restarts: 3,
                            within: Duration::from_secs(1),
                            delay: Duration::MAX,
                        }));
                }),
            ),
        ];
        let mut bad = Vec::new();
        for (name, f) in cases {
            let got = outcome_of(f);
            if !got.starts_with("invalid") {
                bad.push(format!("{name}: {got}"));
            }
        }
        assert!(bad.is_empty(), "not refused as Invalid: {bad:#?}");
    });
}
