//! The stop contract under hostile use: stops from every side and at every moment (from many
//! threads at once, from `on_start`, mid-drain, with a 1 ns timeout), taps dropped or left full
//! mid-stop, restarts and panics during the drain. Each test states the promise it attacks; a
//! correct bus passes every one, and each ends by itself in bounded time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, BusError, Context, Out, RecvTimeoutError, RestartLimit, Setup,
    Supervision,
};
use tests::{assert_balanced, bounded, wait_for};

use crate::fixtures::{assert_equation, Doubled, Doubler, Ignores, Nothing, Num, Tick, Ticker};

// ---------------------------------------------------------------------------------------------
// "No on_tick / poll starts after the stop request."

/// Requests the stop on its first message; counts every tick and poll that starts after.
struct StopsThenCounts {
    requested: Arc<AtomicBool>,
    ticks_after: Arc<AtomicU64>,
    polls_after: Arc<AtomicU64>,
}

impl Actor for StopsThenCounts {
    type In = Num;
    fn on_message(&mut self, _: Num, ctx: &mut Context<'_>) {
        if !self.requested.swap(true, Ordering::SeqCst) {
            ctx.request_stop();
        }
    }
    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        if self.requested.load(Ordering::SeqCst) {
            self.polls_after.fetch_add(1, Ordering::SeqCst);
        }
        0
    }
    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        if self.requested.load(Ordering::SeqCst) {
            self.ticks_after.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// `ctx.request_stop()` inside `on_message`: the same turn still calls `poll` and a due
/// `on_tick` (the turn decided both before the handler ran). Deterministic.
#[test]
fn no_poll_or_tick_starts_after_a_stop_requested_in_on_message() {
    bounded("stop in on_message, then poll/tick", 30, || {
        let requested = Arc::new(AtomicBool::new(false));
        let ticks_after = Arc::new(AtomicU64::new(0));
        let polls_after = Arc::new(AtomicU64::new(0));
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(2));
        let feed = bus.publisher::<Num>("feed");
        let (r, t, p) = (
            Arc::clone(&requested),
            Arc::clone(&ticks_after),
            Arc::clone(&polls_after),
        );
        bus.actor("stopper", move |_: &mut Setup<'_>| StopsThenCounts {
            requested: Arc::clone(&r),
            ticks_after: Arc::clone(&t),
            polls_after: Arc::clone(&p),
        })
        .subscribes::<Num>()
        // A tick that is always due (and a tiny interval: must be accepted and not spin
        // forever past the stop).
        .tick_every(Duration::from_nanos(1));
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        feed.publish(Num(1)).unwrap();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let (polls, ticks) = (
            polls_after.load(Ordering::SeqCst),
            ticks_after.load(Ordering::SeqCst),
        );
        assert!(
            polls == 0 && ticks == 0,
            "after ctx.request_stop() in on_message: {polls} poll(s) and {ticks} tick(s) started"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Stop requests from everywhere.

#[test]
fn stop_from_many_threads_at_once_and_twice_then_join() {
    bounded("many stops", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("relay", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>();
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::DropNewest, 4096);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        for i in 0..500 {
            feed.publish(Num(i)).unwrap();
        }
        let barrier = Arc::new(Barrier::new(8));
        let stoppers: Vec<_> = (0..8)
            .map(|_| {
                let h = running.stop_handle();
                let b = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    b.wait();
                    h.stop();
                    h.stop();
                })
            })
            .collect();
        for s in stoppers {
            s.join().unwrap();
        }
        running.stop();
        // Everything published before the stop comes out, then the tap closes.
        let read = tap.iter().count();
        let report = running.join().expect("join");
        assert_eq!(read, 500, "{report:?}");
        assert_balanced(&report);
        assert!(feed.publish(Num(1)).is_err());
    });
}

/// Requests the stop from `on_start`, and again (and fails) from `on_stop`, publishing there.
struct StopsEarly {
    out: Out<Tick>,
    stops: Arc<AtomicU64>,
}

impl Actor for StopsEarly {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Tick(0));
        ctx.request_stop();
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        self.stops.fetch_add(1, Ordering::SeqCst);
        ctx.request_stop();
        ctx.publish(self.out, Tick(1));
        ctx.fail("failed in on_stop");
    }
}

#[test]
fn a_stop_from_on_start_runs_on_stop_once_and_closes_the_tap_without_join() {
    bounded("stop from on_start", 30, || {
        let stops = Arc::new(AtomicU64::new(0));
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let s = Arc::clone(&stops);
        bus.actor("early", move |setup: &mut Setup<'_>| StopsEarly {
            out: setup.output(),
            stops: Arc::clone(&s),
        })
        .publishes::<Tick>();
        bus.actor("other", |_: &mut Setup<'_>| Nothing);
        let tap = bus.subscription_with::<Tick>("tap", Backpressure::Block, 8);
        let mut running = bus.start().expect("start");
        let mut tap = running.subscription(tap).unwrap();
        let mut got = Vec::new();
        loop {
            match tap.recv_timeout(Duration::from_secs(10)) {
                Ok(Tick(n)) => got.push(n),
                Err(RecvTimeoutError::Closed) => break,
                Err(RecvTimeoutError::Timeout) => panic!("the tap never closed"),
            }
        }
        assert_eq!(got, [0, 1]);
        match running.join() {
            Err(BusError::ActorFailed { actor, report, .. }) => {
                assert_eq!(actor, "early");
                assert_balanced(&report);
            }
            other => panic!("expected the failure in on_stop to be reported: {other:?}"),
        }
        assert_eq!(stops.load(Ordering::SeqCst), 1);
    });
}

/// A bus dropped on one thread while another blocks in `Subscription::recv` (no timeout): the
/// recv must return closed.
#[test]
fn dropping_the_bus_wakes_a_thread_blocked_in_recv() {
    bounded("drop vs recv", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let _feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription::<Num>("tap");
        let mut running = bus.start().expect("start");
        let mut tap = running.subscription(tap).unwrap();
        let reader = std::thread::spawn(move || tap.recv());
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        drop(running);
        let dropped_in = started.elapsed();
        let got = reader.join().unwrap();
        assert!(got.is_err(), "{got:?}");
        assert!(
            dropped_in < Duration::from_secs(2),
            "drop took {dropped_in:?}"
        );
    });
}

/// Reads the subscription on the same thread that then joins, with `Latest` and `DropNewest`
/// taps fed by a fast ticker: both close after the stop, and what was read balances.
#[test]
fn latest_and_drop_newest_taps_close_after_stop_and_balance() {
    bounded("latest/dropnewest", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        bus.actor("ticker", Ticker::new)
            .publishes::<Tick>()
            .tick_every(Duration::from_micros(20));
        let latest = bus.subscription_with::<Tick>("latest", Backpressure::Latest, 1);
        let dropn = bus.subscription_with::<Tick>("dropn", Backpressure::DropNewest, 4);
        let mut running = bus.start().expect("start");
        let mut latest = running.subscription(latest).unwrap();
        let mut dropn = running.subscription(dropn).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        running.stop();
        let mut a = 0u64;
        let mut b = 0u64;
        loop {
            match latest.recv_timeout(Duration::from_secs(10)) {
                Ok(_) => a += 1,
                Err(RecvTimeoutError::Closed) => break,
                Err(RecvTimeoutError::Timeout) => panic!("latest never closed"),
            }
        }
        loop {
            match dropn.recv_timeout(Duration::from_secs(10)) {
                Ok(_) => b += 1,
                Err(RecvTimeoutError::Closed) => break,
                Err(RecvTimeoutError::Timeout) => panic!("dropnewest never closed"),
            }
        }
        let report = running.join().expect("join");
        assert_balanced(&report);
        assert_eq!(
            report
                .edge("test.tick", "ticker", "latest")
                .unwrap()
                .handled,
            a
        );
        assert_eq!(
            report.edge("test.tick", "ticker", "dropn").unwrap().handled,
            b
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Publishing into a full Block subscription from on_stop; subscription dropped mid-stop.

struct FloodOnStop {
    out: Out<Tick>,
}

impl Actor for FloodOnStop {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        for i in 0..100 {
            ctx.publish(self.out, Tick(i));
        }
    }
}

#[test]
fn on_stop_publishing_into_a_full_unread_block_tap_does_not_hold_the_stop() {
    bounded("flood on stop", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(10));
        bus.actor("flood", |s: &mut Setup<'_>| FloodOnStop { out: s.output() })
            .publishes::<Tick>();
        let tap = bus.subscription_with::<Tick>("tap", Backpressure::Block, 4);
        let mut running = bus.start().expect("start");
        let mut tap = running.subscription(tap).unwrap();
        running.stop();
        let started = Instant::now();
        let report = running.join().expect("join");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "join took {took:?}");
        let stop = report.stop.clone().unwrap();
        assert!(stop.late_hooks.is_empty(), "{stop:?}");
        let e = report.edge("test.tick", "flood", "tap").unwrap();
        assert_eq!(e.published, 100, "{e:?}");
        assert_eq!(e.in_flight, 4, "{e:?}");
        assert_eq!(e.lost, 96, "{e:?}");
        assert_equation(&report);
        let read: Vec<u64> = tap.iter().map(|Tick(n)| n).collect();
        assert_eq!(read, [0, 1, 2, 3]);
    });
}

#[test]
fn a_tap_dropped_mid_stop_leaves_nothing_in_flight() {
    bounded("tap dropped mid stop", 30, || {
        for round in 0..5 {
            let mut bus = Bus::builder();
            bus.stop_timeout(Duration::from_secs(5));
            bus.actor("ticker", Ticker::new)
                .publishes::<Tick>()
                .tick_every(Duration::from_micros(20));
            let tap = bus.subscription_with::<Tick>("tap", Backpressure::Block, 8);
            let mut running = bus.start().expect("start");
            let tap = running.subscription(tap).unwrap();
            wait_for("the ticker to wait", 10, || {
                running
                    .snapshot()
                    .edge("test.tick", "ticker", "tap")
                    .is_some_and(|e| e.waited > 0)
            });
            let stop = running.stop_handle();
            let go = Arc::new(Barrier::new(2));
            let g = Arc::clone(&go);
            let stopper = std::thread::spawn(move || {
                g.wait();
                stop.stop();
            });
            go.wait();
            drop(tap);
            stopper.join().unwrap();
            let report = running.join().expect("join");
            let e = report.edge("test.tick", "ticker", "tap").unwrap();
            assert_eq!(e.handled, 0, "round {round}: {e:?}");
            assert_balanced(&report);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Panics during the drain; figures agree.

/// Sleeps a little per message and panics on every 7th.
struct Flaky {
    out: Out<Tick>,
}

impl Actor for Flaky {
    type In = Num;
    fn on_message(&mut self, Num(n): Num, ctx: &mut Context<'_>) {
        std::thread::sleep(Duration::from_micros(200));
        if n % 7 == 3 {
            panic!("flaky on {n}");
        }
        ctx.publish(self.out, Tick(n));
    }
}

#[test]
fn a_handler_panicking_during_the_drain_under_restart_balances_and_figures_agree() {
    bounded("panic in drain", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(10));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("flaky", |s: &mut Setup<'_>| Flaky { out: s.output() })
            .subscribes::<Num>()
            .publishes::<Tick>()
            .capacity::<Num>(1024)
            .supervision(Supervision::Restart(RestartLimit {
                max_restarts: 1000,
                within: Duration::from_secs(60),
                delay: Duration::from_millis(1),
            }));
        bus.actor("sink", Ignores::<Tick>::new)
            .subscribes::<Tick>()
            .capacity::<Tick>(1024);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        for i in 0..400 {
            feed.publish(Num(i)).unwrap();
        }
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let e = report.edge("test.num", "feed", "flaky").unwrap();
        let a = report.actor("flaky").unwrap();
        assert_eq!(e.published, 400, "{e:?}");
        assert_eq!(a.handled, e.handled, "actor {a:?} vs edge {e:?}");
        assert_eq!(
            e.handled + e.panicked,
            400,
            "the graceful stop handles everything published before it: {e:?}"
        );
        assert_eq!(a.panics, e.panicked, "{a:?} {e:?}");
    });
}

/// Escalate during the drain: join returns the panic, and the report balances.
#[test]
fn an_escalated_panic_during_the_drain_is_reported_and_balances() {
    bounded("escalate in drain", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("flaky", |s: &mut Setup<'_>| Flaky { out: s.output() })
            .subscribes::<Num>()
            .publishes::<Tick>()
            .capacity::<Num>(1024)
            .supervision(Supervision::Escalate);
        bus.actor("sink", Ignores::<Tick>::new).subscribes::<Tick>();
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        for i in 0..300 {
            feed.publish(Num(i)).unwrap();
        }
        running.stop();
        let started = Instant::now();
        match running.join() {
            Err(BusError::ActorPanicked { actor, report, .. }) => {
                assert_eq!(actor, "flaky");
                assert_balanced(&report);
                let e = report.edge("test.num", "feed", "flaky").unwrap();
                assert_eq!(e.handled, 3, "{e:?}");
                assert_eq!(e.panicked, 1, "{e:?}");
                assert_eq!(e.lost, 296, "{e:?}");
            }
            other => panic!("expected the escalated panic: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(6));
    });
}

// ---------------------------------------------------------------------------------------------
// Stop timeouts: 1 ns, and join within the timeout plus under a second.

/// Slow relay into an external tap that main reads until closed: with a 1 ns stop timeout the
/// stop gives up at once; join must still come back quickly, balanced, and a tap that said
/// "closed" must stay closed (no message may arrive after it).
#[test]
fn a_one_nanosecond_stop_timeout_is_bounded_and_closed_stays_closed() {
    bounded("1ns stop timeout", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_nanos(1));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("slow", |s: &mut Setup<'_>| SlowRelay { out: s.output() })
            .subscribes::<Num>()
            .publishes::<Tick>()
            .capacity::<Num>(1024);
        let tap = bus.subscription_with::<Tick>("tap", Backpressure::DropNewest, 4096);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        for i in 0..1000 {
            feed.publish(Num(i)).unwrap();
        }
        running.stop();
        let requested = Instant::now();
        let mut read = 0u64;
        loop {
            match tap.recv_timeout(Duration::from_secs(10)) {
                Ok(_) => read += 1,
                Err(RecvTimeoutError::Closed) => break,
                Err(RecvTimeoutError::Timeout) => panic!("never closed"),
            }
        }
        let closed_at = requested.elapsed();
        let outcome = running.join();
        let took = requested.elapsed();
        let report = match outcome {
            Ok(r) => r,
            Err(e) => e.report().clone(),
        };
        // Give a thread left running time to publish more.
        std::thread::sleep(Duration::from_millis(500));
        let mut late = 0u64;
        while tap.try_recv().is_ok() {
            late += 1;
        }
        assert!(took < Duration::from_secs(1), "join took {took:?}");
        assert_equation(&report);
        assert_eq!(
            late, 0,
            "the tap said closed after {closed_at:?} ({read} read), then delivered {late} more; stop: {:?}",
            report.stop
        );
    });
}

struct SlowRelay {
    out: Out<Tick>,
}

impl Actor for SlowRelay {
    type In = Num;
    fn on_message(&mut self, Num(n): Num, ctx: &mut Context<'_>) {
        std::thread::sleep(Duration::from_millis(2));
        ctx.publish(self.out, Tick(n));
    }
}

/// A handler that blocks for 3 s: join must return `Unresponsive` within the stop timeout
/// plus under a second, and the report must balance.
#[test]
fn join_returns_within_timeout_plus_a_second_with_a_stuck_handler() {
    bounded("stuck handler", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_millis(300));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("stuck", |_: &mut Setup<'_>| Stuck)
            .subscribes::<Num>();
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        feed.publish(Num(1)).unwrap();
        feed.publish(Num(2)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        running.stop();
        let started = Instant::now();
        let outcome = running.join();
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1300), "join took {took:?}");
        match outcome {
            Err(BusError::Unresponsive { threads, report }) => {
                assert_eq!(threads, ["stuck"]);
                assert_equation(&report);
            }
            other => panic!("expected Unresponsive: {other:?}"),
        }
    });
}

struct Stuck;

impl Actor for Stuck {
    type In = Num;
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {
        std::thread::sleep(Duration::from_secs(3));
    }
}

/// Panics on its first message; restarted after a long delay. A stop requested while it waits
/// for the restart must not wait out the delay, and what was queued is handled by the new
/// instance; actor and edge figures agree.
struct PanicsOnce {
    seen: Arc<AtomicU64>,
}

impl Actor for PanicsOnce {
    type In = Num;
    fn on_message(&mut self, Num(n): Num, _ctx: &mut Context<'_>) {
        self.seen.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            panic!("first message");
        }
    }
}

#[test]
fn a_stop_while_an_actor_waits_for_its_restart_is_prompt_and_handles_the_queue() {
    bounded("restart mid stop", 30, || {
        let seen = Arc::new(AtomicU64::new(0));
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(10));
        let feed = bus.publisher::<Num>("feed");
        let s = Arc::clone(&seen);
        bus.actor("once", move |_: &mut Setup<'_>| PanicsOnce {
            seen: Arc::clone(&s),
        })
        .subscribes::<Num>()
        .supervision(Supervision::Restart(RestartLimit {
            max_restarts: 5,
            within: Duration::from_secs(60),
            delay: Duration::from_secs(5),
        }));
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        feed.publish(Num(0)).unwrap();
        wait_for("the first panic", 10, || seen.load(Ordering::SeqCst) == 1);
        for i in 1..=50 {
            feed.publish(Num(i)).unwrap();
        }
        running.stop();
        let started = Instant::now();
        let report = running.join().expect("join");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_balanced(&report);
        let e = report.edge("test.num", "feed", "once").unwrap();
        let a = report.actor("once").unwrap();
        assert_eq!((e.handled, e.panicked), (50, 1), "{e:?}");
        assert_eq!(a.handled, 50, "{a:?}");
        assert_eq!(a.restarts, 1, "{a:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// `Report::stop.drained` must not say "nothing was given up" when the stop gave up on what
// `on_stop` published.

struct PublishesOnStop {
    out: Out<Num>,
}

impl Actor for PublishesOnStop {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        for i in 0..300 {
            ctx.publish(self.out, Num(i));
        }
    }
}

struct SlowSink;

impl Actor for SlowSink {
    type In = Num;
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {
        std::thread::sleep(Duration::from_millis(3));
    }
}

#[test]
fn drained_is_false_when_what_on_stop_published_was_given_up() {
    bounded("drained after hooks", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_millis(200));
        bus.actor("hook", |s: &mut Setup<'_>| PublishesOnStop {
            out: s.output(),
        })
        .publishes::<Num>();
        bus.actor("slow", |_: &mut Setup<'_>| SlowSink)
            .subscribes::<Num>()
            .capacity::<Num>(1024);
        let running = bus.start().expect("start");
        running.stop();
        let started = Instant::now();
        let report = match running.join() {
            Ok(r) => r,
            Err(e) => e.report().clone(),
        };
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1200), "join took {took:?}");
        assert_equation(&report);
        let e = report.edge("test.num", "hook", "slow").unwrap();
        let stop = report.stop.clone().unwrap();
        assert!(
            e.lost + e.in_flight == 0 || !stop.drained,
            "the stop gave up {} message(s) ({e:?}) yet reports drained: {stop:?}",
            e.lost + e.in_flight
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Restart supervision mid-stop: an instance remade during the stop runs `on_start`; it must
// also get its `on_stop` (the instance alive at the end is stopped; one that panicked before
// its `on_stop` is gone without it, like any panicked instance).

struct PokesOnStop {
    out: Out<Num>,
}

impl Actor for PokesOnStop {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Num(0));
    }
}

/// Numbers its instances as they start; records which ones ran `on_stop`. Panics on every
/// message.
struct CountsHooks {
    starts: Arc<AtomicU64>,
    stopped: Arc<std::sync::Mutex<Vec<u64>>>,
    me: u64,
}

impl Actor for CountsHooks {
    type In = Num;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        self.me = self.starts.fetch_add(1, Ordering::SeqCst) + 1;
    }
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {
        panic!("panics on what on_stop sent");
    }
    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        self.stopped.lock().unwrap().push(self.me);
    }
}

#[test]
fn an_instance_restarted_during_the_stop_gets_its_on_stop() {
    bounded("restart during stop", 30, || {
        for _ in 0..5 {
            let starts = Arc::new(AtomicU64::new(0));
            let stopped = Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut bus = Bus::builder();
            bus.stop_timeout(Duration::from_secs(2));
            bus.actor("poker", |s: &mut Setup<'_>| PokesOnStop { out: s.output() })
                .publishes::<Num>();
            let (a, b) = (Arc::clone(&starts), Arc::clone(&stopped));
            bus.actor("victim", move |_: &mut Setup<'_>| CountsHooks {
                starts: Arc::clone(&a),
                stopped: Arc::clone(&b),
                me: 0,
            })
            .subscribes::<Num>()
            .supervision(Supervision::Restart(RestartLimit {
                max_restarts: 10,
                within: Duration::from_secs(60),
                delay: Duration::from_millis(1),
            }));
            let running = bus.start().expect("start");
            running.stop();
            let report = running.join().expect("join");
            assert_balanced(&report);
            assert_eq!(report.actor("victim").unwrap().restarts, 1);
            let last = starts.load(Ordering::SeqCst);
            let stopped = stopped.lock().unwrap().clone();
            assert_eq!(last, 2, "two instances started");
            assert!(
                stopped.contains(&last),
                "the instance remade during the stop never ran on_stop (stopped: {stopped:?})"
            );
            assert!(stopped.windows(2).all(|w| w[0] < w[1]), "{stopped:?}");
        }
    });
}
