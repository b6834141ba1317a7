//! Supervision you can rely on: restart limits and delays, panics in every hook and in the
//! factory counted toward them, escalation reaching `join`, `never_waits` enforced, panicking
//! `Drop`s contained, and durations that would overflow refused. Every bus runs on a thread of
//! its own with a deadline, and every report must balance.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, BusError, Context, Out, RestartLimit, Setup, Supervision};
use tests::bounded;

use crate::fixtures::{start_err, Gated, Nothing, Num};

/// Where a `Faulty` actor panics.
#[derive(Clone, Copy, Debug)]
enum Fault {
    OnStart,
    OnTick,
    Poll,
    /// The factory panics on every call after the first.
    Factory,
}

struct Faulty {
    fault: Fault,
}

impl Actor for Faulty {
    type In = ();
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        if let Fault::OnStart = self.fault {
            panic!("on_start fails");
        }
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        if let Fault::OnTick = self.fault {
            panic!("on_tick fails");
        }
    }
    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        match self.fault {
            Fault::Poll | Fault::Factory => panic!("poll fails"),
            _ => 0,
        }
    }
}

/// A bus of one faulty actor restarted at most twice within a minute, 50 ms apart at first.
/// Returns what `join` said, how many instances the factory made, and how long it all took.
fn run_faulty(fault: Fault) -> (Result<llbus::Report, BusError>, u64, Duration) {
    bounded("a faulty actor's bus", 30, move || {
        let made = Arc::new(AtomicU64::new(0));
        let m = Arc::clone(&made);
        let mut bus = Bus::builder();
        bus.actor("faulty", move |_: &mut Setup<'_>| {
            if m.fetch_add(1, Ordering::Relaxed) > 0 {
                if let Fault::Factory = fault {
                    panic!("the factory fails");
                }
            }
            Faulty { fault }
        })
        .tick_every(Duration::from_millis(1))
        .supervision(Supervision::Restart(
            RestartLimit::new(2, Duration::from_secs(60)).with_delay(Duration::from_millis(50)),
        ));
        let t0 = Instant::now();
        let result = bus.start().expect("starts").join();
        (result, made.load(Ordering::Relaxed), t0.elapsed())
    })
}

/// An actor that panics in any hook or in its factory is not remade on every turn forever:
/// each kind of panic counts toward the limit, restarts wait (50 ms, then 100 ms), and the
/// third failure escalates to `join`.
#[test]
fn restarts_are_limited_delayed_and_then_escalate_whatever_hook_panics() {
    for fault in [Fault::OnStart, Fault::OnTick, Fault::Poll, Fault::Factory] {
        let (result, made, took) = run_faulty(fault);
        match result {
            Err(BusError::ActorPanicked {
                actor,
                message,
                report,
            }) => {
                assert_eq!(actor, "faulty", "{fault:?}");
                assert!(
                    message.contains("restarted 2 times"),
                    "{fault:?}: {message}"
                );
                let a = report.actor("faulty").expect("actor");
                assert_eq!((a.restarts, a.panics), (2, 3), "{fault:?}: {a:?}");
                tests::assert_balanced(&report);
            }
            other => panic!("{fault:?}: expected an escalation, got {other:?}"),
        }
        // The first instance, then one per restart (whose factory may have failed).
        assert_eq!(made, 3, "{fault:?}");
        // A lower bound only (a loaded machine is slower, never faster): the two delays.
        assert!(
            took >= Duration::from_millis(150),
            "{fault:?}: restarts did not wait ({took:?})"
        );
    }
}

/// Publishes 0..count as fast as it can from `poll`, then asks the bus to stop.
struct Flood {
    out: Out<Num>,
    next: u64,
    count: u64,
}

impl Actor for Flood {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.next == self.count {
            return 0;
        }
        ctx.publish(self.out, Num(self.next));
        self.next += 1;
        1
    }
}

/// Panics on message `at`; counts what it handled.
struct PanicsAt {
    at: u64,
}

impl Actor for PanicsAt {
    type In = Num;
    fn on_message(&mut self, n: Num, _ctx: &mut Context<'_>) {
        if n.0 == self.at {
            panic!("escalating on {}", n.0);
        }
    }
}

/// An escalating panic reaches `join` promptly, with a publisher still flooding a Block edge
/// into the dead actor (its waits see the ring abandoned and count the rest lost).
#[test]
fn escalate_reaches_join_promptly_with_a_publisher_blocked_on_the_dead_actor() {
    let (result, took) = bounded("join after an escalation", 30, || {
        let mut bus = Bus::builder();
        bus.actor("flood", |s: &mut Setup<'_>| Flood {
            out: s.output(),
            next: 0,
            count: u64::MAX,
        })
        .publishes::<Num>();
        bus.actor("fragile", |_: &mut Setup<'_>| PanicsAt { at: 100 })
            .subscribes::<Num>()
            .capacity::<Num>(8);
        let running = bus.start().expect("starts");
        let t0 = Instant::now();
        (running.join(), t0.elapsed())
    });
    match result {
        Err(BusError::ActorPanicked {
            actor,
            message,
            report,
        }) => {
            assert_eq!(
                (actor.as_str(), message.as_str()),
                ("fragile", "escalating on 100")
            );
            let e = report.edge("test.num", "flood", "fragile").expect("edge");
            assert_eq!((e.handled, e.panicked), (100, 1), "{e:?}");
            tests::assert_balanced(&report);
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
    // Nothing is left to drain: the stop must not sit out its 10 s timeout.
    assert!(took < Duration::from_secs(5), "join took {took:?}");
}

/// Publishes `count` messages with `publish` (not `try_publish`) in `on_start`, then opens
/// `done`.
struct Eager {
    out: Out<Num>,
    count: u64,
    done: Arc<AtomicBool>,
}

impl Actor for Eager {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for n in 0..self.count {
            ctx.publish(self.out, Num(n));
        }
        self.done.store(true, Ordering::Release);
        ctx.request_stop();
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}

/// A bus with an `Eager` publisher of `count` messages (promising `never_waits` if asked),
/// and the flag it opens when done.
fn eager_bus(count: u64, never_waits: bool) -> (llbus::BusBuilder, Arc<AtomicBool>) {
    let done = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    let d = Arc::clone(&done);
    let eager = bus
        .actor("eager", move |s: &mut Setup<'_>| Eager {
            out: s.output(),
            count,
            done: Arc::clone(&d),
        })
        .publishes::<Num>();
    if never_waits {
        eager.never_waits();
    }
    (bus, done)
}

/// `never_waits` is a promise the bus keeps: even `publish` to a full Block edge does not wait
/// (were it to wait, the gate below would open only after the subscriber drained). What does
/// not fit is counted as dropped.
#[test]
fn a_never_waits_actor_does_not_wait_on_a_full_block_edge() {
    let report = bounded("a never-waits publisher", 30, || {
        let (mut bus, done) = eager_bus(100, true);
        bus.actor("gated", move |_: &mut Setup<'_>| Gated {
            gate: Arc::clone(&done),
        })
        .subscribes::<Num>()
        .capacity::<Num>(8)
        .backpressure::<Num>(Backpressure::Block);
        bus.start().expect("starts").join().expect("joins")
    });
    let e = report.edge("test.num", "eager", "gated").expect("edge");
    assert_eq!(
        (e.published, e.handled, e.dropped, e.waited),
        (100, 8, 92, 0),
        "{e:?}"
    );
    tests::assert_balanced(&report);
}

/// Panics in `Drop`.
struct Brittle;

impl Actor for Brittle {
    type In = Num;
    fn on_message(&mut self, n: Num, _ctx: &mut Context<'_>) {
        if n.0 == 3 {
            panic!("brittle fails on 3");
        }
    }
}

impl Drop for Brittle {
    fn drop(&mut self) {
        panic!("brittle's Drop panics");
    }
}

/// An actor whose `Drop` panics, when it is replaced after a panic and when the bus ends: each
/// is caught and counted, and `join` returns normally.
#[test]
fn a_panicking_drop_is_contained_and_counted() {
    let report = bounded("a panicking Drop", 30, || {
        let (mut bus, _done) = eager_bus(10, false);
        bus.actor("brittle", |_: &mut Setup<'_>| Brittle)
            .subscribes::<Num>()
            .supervision(Supervision::Restart(RestartLimit::default()));
        bus.start().expect("starts").join().expect("joins")
    });
    let a = report.actor("brittle").expect("actor");
    // The handler's panic, the Drop of the replaced instance, the Drop at the end.
    assert_eq!((a.restarts, a.panics), (1, 3), "{a:?}");
    let e = report.edge("test.num", "eager", "brittle").expect("edge");
    assert_eq!((e.handled, e.panicked, e.lost), (9, 1, 0), "{e:?}");
    tests::assert_balanced(&report);
}

/// Durations that would overflow the clock (or tick every round) are refused at `start()`,
/// naming the setting, rather than `tick_every(Duration::MAX)` panicking the actor's thread or
/// `stop_timeout(Duration::MAX)` panicking `join`.
#[test]
fn durations_that_would_overflow_are_refused_at_start() {
    let mut bus = Bus::builder();
    bus.actor("ticker", |_: &mut Setup<'_>| Nothing)
        .tick_every(Duration::MAX);
    let e = start_err(bus).to_string();
    assert!(e.contains("tick interval of actor 'ticker'"), "{e}");

    let mut bus = Bus::builder();
    bus.actor("ticker", |_: &mut Setup<'_>| Nothing)
        .tick_every(Duration::ZERO);
    let e = start_err(bus).to_string();
    assert!(e.contains("'ticker' asks for a tick every 0 s"), "{e}");

    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::MAX);
    bus.actor("idle", |_: &mut Setup<'_>| Nothing);
    let e = start_err(bus).to_string();
    assert!(e.contains("stop timeout"), "{e}");

    let mut bus = Bus::builder();
    bus.actor("idle", |_: &mut Setup<'_>| Nothing)
        .supervision(Supervision::Restart(RestartLimit::new(1, Duration::MAX)));
    let e = start_err(bus).to_string();
    assert!(e.contains("restart window of actor 'idle'"), "{e}");
}
