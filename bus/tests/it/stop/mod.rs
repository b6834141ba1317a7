//! The stop contract as an application meets it: a stop acts at once whoever asks for it (no
//! one has to call `join`), subscriptions close once the bus stops publishing into them, a
//! publisher never waits on a reader outside the bus, `join` reports late hooks and
//! unresponsive threads. `hostile` attacks the same promises; the tokio adapter across a stop
//! is `tokio_edges`'s subject.
//!
//! Every test ends by itself in bounded time (`bounded`), and asserts the balance of every edge.

mod hostile;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, BusError, Context, Out, RecvTimeoutError, Setup, Supervision,
};
use tests::{assert_balanced, bounded, wait_for};

use crate::fixtures::{Nothing, Tick};

/// Publishes a number every tick; records each tick that starts once a stop was requested.
struct Feed {
    out: Out<Tick>,
    next: u64,
    ticks_after_stop: Arc<AtomicU64>,
    stop_returned: Arc<AtomicBool>,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.stop_returned.load(Ordering::SeqCst) {
            self.ticks_after_stop.fetch_add(1, Ordering::SeqCst);
        }
        ctx.publish(self.out, Tick(self.next));
        self.next += 1;
    }
}

/// Declares "feed", a [`Feed`] ticking every 50 µs, on `bus`.
fn add_feed(
    bus: &mut llbus::BusBuilder,
    ticks_after_stop: &Arc<AtomicU64>,
    stop_returned: &Arc<AtomicBool>,
) {
    let (t, s) = (Arc::clone(ticks_after_stop), Arc::clone(stop_returned));
    bus.actor("feed", move |setup: &mut Setup<'_>| Feed {
        out: setup.output(),
        next: 0,
        ticks_after_stop: Arc::clone(&t),
        stop_returned: Arc::clone(&s),
    })
    .publishes::<Tick>()
    .tick_every(Duration::from_micros(50));
}

/// A bus with a feed ticking every 50 µs into a subscription called "tap".
struct TickingBus {
    running: llbus::RunningBus,
    tap: llbus::Subscription<Tick>,
    ticks_after_stop: Arc<AtomicU64>,
    stop_returned: Arc<AtomicBool>,
}

fn ticking_bus(stop_timeout: Duration) -> TickingBus {
    let ticks_after_stop = Arc::new(AtomicU64::new(0));
    let stop_returned = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    bus.stop_timeout(stop_timeout);
    add_feed(&mut bus, &ticks_after_stop, &stop_returned);
    let tap = bus.subscription::<Tick>("tap");
    let mut running = bus.start().expect("start");
    let tap = running.subscription(tap).expect("tap");
    TickingBus {
        running,
        tap,
        ticks_after_stop,
        stop_returned,
    }
}

/// Reads `tap` until it closes; returns how many it read. Bounded by the caller.
fn read_until_closed(tap: &mut llbus::Subscription<Tick>) -> u64 {
    let mut n = 0;
    loop {
        match tap.recv_timeout(Duration::from_secs(20)) {
            Ok(_) => n += 1,
            Err(RecvTimeoutError::Closed) => return n,
            Err(RecvTimeoutError::Timeout) => panic!("the subscription neither closed nor fed"),
        }
    }
}

#[test]
fn stop_then_reading_a_subscription_to_its_end_then_join_ends() {
    bounded("stop; iter; join", 60, || {
        let mut b = ticking_bus(Duration::from_secs(10));
        // Let the feed run.
        for _ in 0..100 {
            b.tap.recv().expect("a tick");
        }
        b.running.stop();
        b.stop_returned.store(true, Ordering::SeqCst);
        let requested = Instant::now();
        // The loop every user writes: it must end, without anyone calling join first.
        let after = b.tap.iter().count();
        let closed_after = requested.elapsed();
        // At most the tick already past its check when the request landed can still run.
        assert!(
            b.ticks_after_stop.load(Ordering::SeqCst) <= 1,
            "on_tick ran {} times after stop() returned",
            b.ticks_after_stop.load(Ordering::SeqCst)
        );
        assert!(
            closed_after < Duration::from_secs(10),
            "the subscription closed only after the stop timeout ({closed_after:?})"
        );
        let report = b.running.join().expect("join");
        let stop = report.stop.clone().expect("join reports the stop");
        assert!(stop.drained && stop.late_hooks.is_empty(), "{stop:?}");
        let e = report.edge("test.tick", "feed", "tap").unwrap();
        // Everything published was read here: 100 before, `after` after.
        assert_eq!(e.handled, 100 + after as u64, "{e:?}");
        assert_balanced(&report);
    });
}

/// Asks the bus to stop from inside, on its `n`th message: by request, by failure or by an
/// escalated panic.
#[derive(Clone, Copy, Debug)]
enum Inside {
    Request,
    Fail,
    Panic,
}

struct Stopper {
    how: Inside,
    seen: u64,
}

impl Actor for Stopper {
    type In = Tick;
    fn on_message(&mut self, _: Tick, ctx: &mut Context<'_>) {
        self.seen += 1;
        if self.seen == 50 {
            match self.how {
                Inside::Request => ctx.request_stop(),
                Inside::Fail => ctx.fail("the stopper failed on purpose"),
                Inside::Panic => panic!("the stopper panicked on purpose"),
            }
        }
    }
}

fn stop_from_inside_while_main_reads(how: Inside) {
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(10));
    add_feed(&mut bus, &Arc::default(), &Arc::default());
    bus.actor("stopper", move |_: &mut Setup<'_>| Stopper { how, seen: 0 })
        .subscribes::<Tick>()
        .supervision(Supervision::Escalate);
    let tap = bus.subscription::<Tick>("tap");
    let mut running = bus.start().expect("start");
    let mut tap = running.subscription(tap).expect("tap");
    // Main reads without knowing a stop came: the subscription must close by itself.
    let read = read_until_closed(&mut tap);
    assert!(read >= 50, "read {read}");
    let report = match (how, running.join()) {
        (Inside::Request, Ok(report)) => report,
        (Inside::Fail, Err(BusError::ActorFailed { actor, report, .. }))
        | (Inside::Panic, Err(BusError::ActorPanicked { actor, report, .. })) => {
            assert_eq!(actor, "stopper");
            *report
        }
        (how, other) => panic!("{how:?}: unexpected {other:?}"),
    };
    let e = report.edge("test.tick", "feed", "tap").unwrap();
    assert_eq!(e.handled, read, "{e:?}");
    assert_balanced(&report);
}

#[test]
fn a_stop_requested_by_an_actor_closes_the_subscription_main_reads() {
    bounded("request_stop while main reads", 60, || {
        stop_from_inside_while_main_reads(Inside::Request)
    });
}

#[test]
fn a_failing_actor_closes_the_subscription_main_reads() {
    bounded("fail while main reads", 60, || {
        stop_from_inside_while_main_reads(Inside::Fail)
    });
}

#[test]
fn an_escalated_panic_closes_the_subscription_main_reads() {
    bounded("escalate while main reads", 60, || {
        stop_from_inside_while_main_reads(Inside::Panic)
    });
}

#[test]
fn a_stop_handle_used_from_another_thread_stops_the_bus_without_join() {
    bounded("stop handle", 60, || {
        let mut b = ticking_bus(Duration::from_secs(10));
        let handle = b.running.stop_handle();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            handle.stop();
        });
        let read = read_until_closed(&mut b.tap);
        stopper.join().unwrap();
        let report = b.running.join().expect("join");
        assert_eq!(
            report.edge("test.tick", "feed", "tap").unwrap().handled,
            read
        );
        assert_balanced(&report);
    });
}

#[test]
fn a_full_block_subscription_nobody_reads_does_not_hold_the_stop() {
    bounded("unread subscription", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(20));
        add_feed(&mut bus, &Arc::default(), &Arc::default());
        let tap = bus.subscription_with::<Tick>("tap", Backpressure::Block, 4);
        let mut running = bus.start().expect("start");
        let mut tap = running.subscription(tap).expect("tap");
        wait_for("the feed to wait on the full tap", 30, || {
            running
                .snapshot()
                .edge("test.tick", "feed", "tap")
                .is_some_and(|e| e.waited > 0)
        });
        running.stop();
        let report = running.join().expect("join");
        let stop = report.stop.clone().unwrap();
        assert!(stop.drained, "{stop:?}");
        assert!(
            stop.took < Duration::from_secs(20),
            "the stop waited out its timeout for a reader: {stop:?}"
        );
        let e = report.edge("test.tick", "feed", "tap").unwrap();
        assert_eq!(e.lost, 1, "the publish given up is counted lost: {e:?}");
        assert_eq!(e.in_flight, 4, "{e:?}");
        // What the ring holds stays readable, then the subscription is closed.
        assert_eq!(tap.iter().count(), 4);
    });
}

/// An actor whose `on_stop` blocks until released (or 10 s pass).
struct SlowStop {
    release: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

impl Actor for SlowStop {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.release.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.done.store(true, Ordering::SeqCst);
    }
}

#[test]
fn join_reports_a_late_on_stop_hook_and_a_trivial_thread_still_gets_time_to_leave() {
    bounded("late hook", 60, || {
        let release = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_millis(100));
        let (r, d) = (Arc::clone(&release), Arc::clone(&done));
        bus.actor("slow", move |_: &mut Setup<'_>| SlowStop {
            release: Arc::clone(&r),
            done: Arc::clone(&d),
        });
        bus.actor("trivial", |_: &mut Setup<'_>| Nothing);
        let running = bus.start().expect("start");
        running.stop();
        let started = Instant::now();
        let outcome = running.join();
        let took = started.elapsed();
        release.store(true, Ordering::SeqCst);
        let report = match outcome {
            Err(BusError::Unresponsive { threads, report }) => {
                assert_eq!(threads, ["slow"]);
                *report
            }
            other => panic!("expected the slow thread unresponsive, got {other:?}"),
        };
        let stop = report.stop.clone().unwrap();
        assert_eq!(stop.late_hooks, ["slow"], "{stop:?}");
        assert_eq!(stop.unresponsive, ["slow"], "{stop:?}");
        // Stop timeout plus the three grace periods at most (plus scheduling slack).
        assert!(took < Duration::from_secs(5), "join took {took:?}");
        wait_for("the slow hook to finish", 20, || {
            done.load(Ordering::SeqCst)
        });
    });
}

/// `join_timeout` hands the bus back while it runs (no stop asked) and while its stop waits
/// for a stuck hook, without stopping it or losing anything; once the stop ends it returns
/// what `join` would (here: the stuck thread unresponsive), and a bus that stops cleanly joins
/// within the deadline with its report.
#[test]
fn join_timeout_hands_back_a_bus_still_running_or_stuck_and_joins_one_that_ended() {
    bounded("join_timeout", 60, || {
        let release = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_millis(1500));
        let (r, d) = (Arc::clone(&release), Arc::clone(&done));
        bus.actor("slow", move |_: &mut Setup<'_>| SlowStop {
            release: Arc::clone(&r),
            done: Arc::clone(&d),
        });
        let running = bus.start().expect("start");
        // No stop asked: the deadline passes, the bus comes back running.
        let started = Instant::now();
        let running = match running.join_timeout(Duration::from_millis(100)) {
            Err(bus) => bus,
            Ok(outcome) => panic!("joined a bus nobody stopped: {outcome:?}"),
        };
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(!done.load(Ordering::SeqCst), "the bus was stopped");
        // Stopping: the hook is stuck, the stop is not over within 200 ms.
        running.stop();
        let running = match running.join_timeout(Duration::from_millis(200)) {
            Err(bus) => bus,
            Ok(outcome) => panic!("joined while a hook was stuck: {outcome:?}"),
        };
        // The stop gives up on the stuck hook within its timeout: Ok(Err(Unresponsive)).
        let started = Instant::now();
        match running.join_timeout(Duration::from_secs(20)) {
            Ok(Err(BusError::Unresponsive { threads, report })) => {
                assert_eq!(threads, ["slow"]);
                assert!(report.stop.is_some(), "{report:?}");
            }
            Ok(other) => panic!("expected the slow thread unresponsive, got {other:?}"),
            Err(_) => panic!("the stop did not end within its timeout"),
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        release.store(true, Ordering::SeqCst);
        wait_for("the slow hook to finish", 20, || {
            done.load(Ordering::SeqCst)
        });

        // A bus that stops cleanly: its report, well before the deadline.
        let mut bus = Bus::builder();
        bus.actor("trivial", |_: &mut Setup<'_>| Nothing);
        let running = bus.start().expect("start");
        running.stop();
        let started = Instant::now();
        let report = match running.join_timeout(Duration::from_secs(20)) {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => panic!("a clean stop did not end"),
        };
        assert!(report.stop.is_some_and(|s| s.drained));
        assert!(started.elapsed() < Duration::from_secs(10));
    });
}

#[test]
fn dropping_a_running_bus_stops_and_joins_it() {
    bounded("drop", 60, || {
        let mut b = ticking_bus(Duration::from_secs(10));
        b.tap.recv().expect("a tick");
        drop(b.running);
        // The bus is gone: the subscription drains and closes.
        read_until_closed(&mut b.tap);
        assert_eq!(
            b.tap.try_recv(),
            Err(llbus::TryRecvError::Closed),
            "the subscription outlived its bus open"
        );
    });
}
