//! The bus under failure, as a new user would meet it: a panicking worker beside a fast feed,
//! a stop in the middle, a Block cycle, panics outside the handlers, runaway restarts.
//! Every test runs its bus on a thread of its own with a deadline, so a hang fails the test
//! instead of hanging the binary, and every report must balance on every edge.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Actor, Bus, BusError, Context, Out, Setup, Supervision};
use tests::bounded;

use crate::fixtures::{Tick, Ticker};

/// Panics on its `panic_at`-th message (1-based).
struct Fragile {
    seen: u64,
    panic_at: u64,
}

impl Actor for Fragile {
    type In = Tick;
    fn on_message(&mut self, _t: Tick, _ctx: &mut Context<'_>) {
        self.seen += 1;
        if self.seen == self.panic_at {
            panic!("fragile gives up on message {}", self.seen);
        }
    }
}

/// A bus with a `feed` actor that publishes a `Tick` every `tick`.
fn feed_bus(tick: Duration) -> llbus::BusBuilder {
    let mut bus = Bus::builder();
    bus.actor("feed", Ticker::new)
        .publishes::<Tick>()
        .tick_every(tick);
    bus
}

/// A 20 us feed into a `Stop` worker that panics on its 10th message; stop after 0.5 s: the
/// edge never counts more lost than published, and `join` comes back promptly.
#[test]
fn a_stopped_worker_beside_a_fast_feed_balances_and_stops_promptly() {
    let (report, took) = bounded("stop and join", 30, || {
        let mut bus = feed_bus(Duration::from_micros(20));
        bus.actor("worker", |_: &mut Setup<'_>| Fragile {
            seen: 0,
            panic_at: 10,
        })
        .subscribes::<Tick>()
        .supervision(Supervision::Stop);
        let running = bus.start().expect("starts");
        std::thread::sleep(Duration::from_millis(500));
        // Live: the worker is gone, so every publish to it is counted lost at once; nothing
        // sits in its ring.
        tests::wait_for("the worker's edge to settle", 20, || {
            let live = running.report();
            let e = live.edge("test.tick", "feed", "worker").expect("edge");
            e.panicked == 1 && e.in_flight == 0 && e.lost > 0
        });
        running.stop();
        let t0 = std::time::Instant::now();
        let report = running.join().expect("Stop does not fail the bus");
        (report, t0.elapsed())
    });
    let e = report.edge("test.tick", "feed", "worker").expect("edge");
    assert!(e.lost <= e.published, "lost > published: {e:?}");
    assert_eq!(
        (e.handled, e.panicked),
        (9, 1),
        "nine handled, the tenth panicked: {e:?}"
    );
    assert!(e.lost > 0, "publishes after the panic are lost: {e:?}");
    tests::assert_balanced(&report);
    // Nothing is left to drain, so the stop must not wait for its timeout (10 s by default).
    assert!(took < Duration::from_secs(5), "join took {took:?}");
}

#[derive(Clone, Debug, PartialEq)]
struct Ping(u64);
tests::message!(Ping, "fail.ping");

#[derive(Clone, Debug, PartialEq)]
struct Pong(u64);
tests::message!(Pong, "fail.pong");

/// Answers every ping with two pongs: with its partner doing the same, the Block rings of the
/// cycle fill and both threads wait on each other.
struct Doubler<I, O> {
    out: Out<O>,
    first: bool,
    make: fn(u64) -> O,
    _i: std::marker::PhantomData<fn(I)>,
}

impl<I: llbus::Message + llbus::Inbox + Clone, O: llbus::Message + Clone> Actor for Doubler<I, O>
where
    I: Into<u64>,
{
    type In = I;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        if self.first {
            ctx.publish(self.out, (self.make)(0));
        }
    }
    fn on_message(&mut self, msg: I, ctx: &mut Context<'_>) {
        let n: u64 = msg.into();
        ctx.publish(self.out, (self.make)(n + 1));
        ctx.publish(self.out, (self.make)(n + 1));
    }
}

impl From<Ping> for u64 {
    fn from(p: Ping) -> u64 {
        p.0
    }
}

impl From<Pong> for u64 {
    fn from(p: Pong) -> u64 {
        p.0
    }
}

/// Two actors on two threads that answer each message with two, joined by Block rings of
/// `capacity`: once started, the cycle fills and both wait on each other. Returns the running
/// bus once both edges have waited.
fn deadlocked_cycle(capacity: usize, idle: llbus::Idle, timeout: Duration) -> llbus::RunningBus {
    let mut bus = Bus::builder();
    bus.stop_timeout(timeout);
    bus.actor("ping", |s: &mut Setup<'_>| Doubler::<Pong, Ping> {
        out: s.output(),
        first: true,
        make: Ping,
        _i: std::marker::PhantomData,
    })
    .publishes::<Ping>()
    .subscribes::<Pong>()
    .capacity::<Pong>(capacity)
    .idle(idle);
    bus.actor("pong", |s: &mut Setup<'_>| Doubler::<Ping, Pong> {
        out: s.output(),
        first: false,
        make: Pong,
        _i: std::marker::PhantomData,
    })
    .publishes::<Pong>()
    .subscribes::<Ping>()
    .capacity::<Ping>(capacity)
    .idle(idle);
    let running = bus
        .start()
        .expect("a Block cycle is allowed, with a warning");
    assert!(
        running.warnings().iter().any(|w| w.contains("cycle")),
        "{:?}",
        running.warnings()
    );
    tests::wait_for("the cycle to fill", 20, || {
        running.report().edges.iter().all(|e| e.waited > 0)
    });
    running
}

/// A Block cycle across two threads that fills up: `join` (and the bus's `Drop`) do not hang;
/// the stop gives the waits up at its timeout, counting them lost.
#[test]
fn a_full_block_cycle_across_threads_stops_within_the_timeout() {
    for idle in [llbus::Idle::Backoff, llbus::Idle::Park] {
        let (report, took) = bounded("a deadlocked Block cycle", 30, move || {
            let running = deadlocked_cycle(4, idle, Duration::from_millis(300));
            running.stop();
            let t0 = std::time::Instant::now();
            let report = running
                .join()
                .expect("a stop that timed out is not an error");
            (report, t0.elapsed())
        });
        tests::assert_balanced(&report);
        assert!(
            report.edges.iter().any(|e| e.lost > 0),
            "the waits that were given up are counted lost: {report}"
        );
        // 300 ms of stop timeout plus the margin; generous for a loaded machine.
        assert!(
            took < Duration::from_secs(5),
            "join took {took:?} ({idle:?})"
        );
    }
}

/// The same cycle, dropped without `stop`/`join`: `Drop for RunningBus` is bounded too.
#[test]
fn dropping_a_deadlocked_bus_returns() {
    bounded("dropping a deadlocked bus", 30, || {
        let running = deadlocked_cycle(2, llbus::Idle::Backoff, Duration::from_millis(200));
        drop(running);
    });
}

/// A message whose `Drop` panics if it is the fourth one (id 3) and armed.
#[derive(Clone, Debug)]
struct Bomb {
    id: u64,
    armed: Arc<AtomicBool>,
}
tests::message!(Bomb, "fail.bomb");

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.id == 3 && self.armed.swap(false, Ordering::AcqRel) {
            panic!("a message's Drop panicked");
        }
    }
}

/// Publishes bombs 0..4 in `on_start`, arms them, then panics (`Stop`): its end of the ring
/// goes.
struct Bomber {
    out: Out<Bomb>,
    armed: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

impl Actor for Bomber {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for id in 0..4 {
            let armed = Arc::clone(&self.armed);
            ctx.publish(self.out, Bomb { id, armed });
        }
        self.armed.store(true, Ordering::Release);
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        panic!("the bomber leaves");
    }
}

impl Drop for Bomber {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Release);
    }
}

/// Waits for the bomber to be gone, then panics on its first message (`Stop`): retiring it
/// drops the last end of the ring, and the bombs still in it, outside any `catch_unwind` of a
/// hook.
struct Victim {
    bomber_dropped: Arc<AtomicBool>,
}

impl Actor for Victim {
    type In = Bomb;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        tests::wait_for("the bomber to go", 20, || {
            self.bomber_dropped.load(Ordering::Acquire)
        });
        // Its rings go right after the instance.
        std::thread::sleep(Duration::from_millis(50));
    }
    fn on_message(&mut self, b: Bomb, _ctx: &mut Context<'_>) {
        panic!("the victim gives up on bomb {}", b.id);
    }
}

/// A panic in a bus thread outside the per-turn `catch_unwind` (here: a message's `Drop` as
/// the last end of its ring goes) must reach `join` although nobody asked the bus to stop,
/// rather than the thread vanishing and `join` waiting forever.
#[test]
fn a_thread_that_panics_outside_a_hook_stops_the_bus() {
    let result = bounded("join after a thread panic", 30, || {
        let armed = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicBool::new(false));
        let mut bus = Bus::builder();
        let (a, d) = (Arc::clone(&armed), Arc::clone(&dropped));
        bus.actor("bomber", move |s: &mut Setup<'_>| Bomber {
            out: s.output(),
            armed: Arc::clone(&a),
            dropped: Arc::clone(&d),
        })
        .publishes::<Bomb>()
        .supervision(Supervision::Stop);
        bus.actor("victim", move |_: &mut Setup<'_>| Victim {
            bomber_dropped: Arc::clone(&dropped),
        })
        .subscribes::<Bomb>()
        .supervision(Supervision::Stop);
        let running = bus.start().expect("starts");
        // Nobody calls stop(): the failure itself must end the bus.
        running.join()
    });
    match result {
        Err(BusError::ThreadPanicked {
            thread,
            message,
            report,
        }) => {
            assert_eq!(thread, "victim");
            assert!(message.contains("Drop panicked"), "{message}");
            let e = report.edge("fail.bomb", "bomber", "victim").expect("edge");
            assert_eq!((e.published, e.panicked, e.lost), (4, 1, 3), "{e:?}");
            tests::assert_balanced(&report);
        }
        other => panic!("expected a thread panic, got {other:?}"),
    }
}

/// Its `on_stop` does not return for 5 s.
struct Stuck;

impl Actor for Stuck {
    type In = Tick;
    fn on_message(&mut self, _t: Tick, _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// A hook that does not return cannot hold `join` past the stop timeout and its margin: the
/// thread is left running and reported, and the report still balances.
#[test]
fn a_hook_that_does_not_return_is_reported_not_waited_for() {
    let (result, took) = bounded("join with a stuck hook", 30, || {
        let mut bus = feed_bus(Duration::from_millis(1));
        bus.stop_timeout(Duration::from_millis(200));
        bus.actor("stuck", |_: &mut Setup<'_>| Stuck)
            .subscribes::<Tick>();
        let running = bus.start().expect("starts");
        std::thread::sleep(Duration::from_millis(50));
        running.stop();
        let t0 = std::time::Instant::now();
        (running.join(), t0.elapsed())
    });
    match result {
        Err(BusError::Unresponsive { threads, report }) => {
            assert_eq!(threads, ["stuck"]);
            let e = report.edge("test.tick", "feed", "stuck").expect("edge");
            assert_eq!(
                e.published,
                e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight,
                "{e:?}"
            );
        }
        other => panic!("expected the stuck thread to be reported, got {other:?}"),
    }
    // 200 ms of timeout and under a second of margin; well before the hook's 5 s.
    assert!(took < Duration::from_secs(4), "join took {took:?}");
}

/// Live snapshots balance too, while messages flow and subscribers fail: a fast feed into a
/// `Block` worker, a `Latest` worker and a `DropNewest` worker, two of which panic (`Stop`).
/// Every snapshot satisfies the equation with a non-negative `in_flight` (in debug builds a
/// negative one trips an assertion inside the snapshot itself), and the final report has
/// nothing in flight.
#[test]
fn live_snapshots_balance_while_subscribers_fail() {
    let (snapshots, report) = bounded("live snapshots", 60, || {
        let mut bus = feed_bus(Duration::from_micros(20));
        for (name, policy, panic_at) in [
            ("block", llbus::Backpressure::Block, 100),
            ("latest", llbus::Backpressure::Latest, 20),
            ("drop", llbus::Backpressure::DropNewest, u64::MAX),
        ] {
            bus.actor(name, move |_: &mut Setup<'_>| Fragile { seen: 0, panic_at })
                .subscribes::<Tick>()
                .backpressure::<Tick>(policy)
                .capacity::<Tick>(16)
                .supervision(Supervision::Stop);
        }
        let running = bus.start().expect("starts");
        // Sample for at least 300 ms, and until both fragile workers have failed and a publish
        // after the failure has been counted lost on each (a slow, loaded machine takes longer
        // to get there, and a failure can land just as 300 ms pass; 30 s at most).
        let t0 = std::time::Instant::now();
        let mut snapshots = 0;
        loop {
            let live = running.report();
            for e in &live.edges {
                assert_eq!(
                    e.published,
                    e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight,
                    "{e:?}"
                );
            }
            snapshots += 1;
            let failed = live
                .edges
                .iter()
                .filter(|e| e.panicked == 1 && e.lost > 0)
                .count();
            let elapsed = t0.elapsed();
            if (failed == 2 && elapsed > Duration::from_millis(300))
                || elapsed > Duration::from_secs(30)
            {
                break;
            }
        }
        running.stop();
        (
            snapshots,
            running.join().expect("Stop does not fail the bus"),
        )
    });
    assert!(snapshots > 10, "only {snapshots} snapshots");
    tests::assert_balanced(&report);
    for name in ["block", "latest"] {
        let e = report.edge("test.tick", "feed", name).expect("edge");
        assert_eq!(e.panicked, 1, "{e:?}");
        assert!(e.lost > 0, "{e:?}");
    }
}

/// Fails with an error (not a panic) on its `fail_at`-th message.
struct Failing {
    seen: u64,
    fail_at: u64,
}

impl Actor for Failing {
    type In = Tick;
    fn on_message(&mut self, _t: Tick, ctx: &mut Context<'_>) {
        self.seen += 1;
        if self.seen == self.fail_at {
            ctx.fail(format!("the disk is gone after {} ticks", self.seen));
        }
    }
}

/// `Context::fail` stops the bus by itself (nobody calls `stop()`), whatever the actor's
/// supervision, and `join` names the actor and its error as a failure, not a panic.
#[test]
#[cfg_attr(miri, ignore)]
fn an_actor_that_fails_stops_the_bus_with_its_error() {
    let report = bounded("fail stops the bus", 20, || {
        let mut bus = feed_bus(Duration::from_micros(50));
        bus.actor("worker", |_: &mut Setup<'_>| Failing {
            seen: 0,
            fail_at: 5,
        })
        .subscribes::<Tick>()
        .supervision(Supervision::Stop);
        bus.stop_timeout(Duration::from_secs(2));
        match bus.start().expect("start").join() {
            Err(BusError::ActorFailed {
                actor,
                error,
                report,
            }) => {
                assert_eq!(actor, "worker");
                assert_eq!(error, "the disk is gone after 5 ticks");
                *report
            }
            other => panic!("expected ActorFailed, got {other:?}"),
        }
    });
    tests::assert_balanced(&report);
    let edge = report.edge("test.tick", "feed", "worker").expect("edge");
    assert!(edge.handled >= 5, "{edge:?}");
    assert_eq!(edge.panicked, 0, "a failure is not a panic: {edge:?}");
}

/// A component's declaration error (`ActorBuilder::invalid`) makes `start()` refuse the bus
/// with that reason; no thread is started.
#[test]
#[cfg_attr(miri, ignore)]
fn a_declaration_marked_invalid_is_refused_at_start() {
    let mut bus = feed_bus(Duration::from_millis(1));
    bus.actor("worker", |_: &mut Setup<'_>| Failing {
        seen: 0,
        fail_at: u64::MAX,
    })
    .subscribes::<Tick>()
    .invalid("worker 'worker': its device /dev/null9 does not exist");
    match bus.start() {
        Err(llbus::StartError::Invalid(reason)) => {
            assert_eq!(
                reason,
                "worker 'worker': its device /dev/null9 does not exist"
            )
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("an invalid declaration started");
        }
    }
}
