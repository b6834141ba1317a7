//! Broadcast edges under attack: two or more `Block` subscribers of one output share
//! one broadcast ring, and a hook's publishes reach it when the hook returns. Each test checks
//! a promise of docs/CONTRACT.md ("Backpressure and waiting"), `Context::publish`'s docs or
//! `EdgeReport::published`'s books, under a stop, a panic or a slow reader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, BusBuilder, Context, EdgeReport, Out, Report, Setup, Supervision,
};

#[derive(Clone, Debug, PartialEq)]
struct Seq(u64);
tests::message!(Seq, "bcast.seq");

/// How the feed publishes: `count` messages in bursts of `burst` per `poll`, with
/// `publish_slice` or one `publish` each; or all in `on_start`, then a panic after
/// `panic_after` of them.
#[derive(Clone, Copy)]
struct FeedPlan {
    count: u64,
    burst: u64,
    slice: bool,
    panic_in_on_start: bool,
}

struct Feed {
    plan: FeedPlan,
    next: u64,
    out: Out<Seq>,
}

impl Actor for Feed {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        if self.plan.panic_in_on_start {
            for n in 0..self.plan.count {
                ctx.publish(self.out, Seq(n));
            }
            panic!("feed panics after its burst");
        }
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.plan.panic_in_on_start || self.next >= self.plan.count {
            return 0;
        }
        let end = (self.next + self.plan.burst).min(self.plan.count);
        if self.plan.slice {
            let burst: Vec<Seq> = (self.next..end).map(Seq).collect();
            ctx.publish_slice(self.out, &burst);
        } else {
            for n in self.next..end {
                ctx.publish(self.out, Seq(n));
            }
        }
        let done = (end - self.next) as usize;
        self.next = end;
        done
    }
}

/// A subscriber that records what it handled, optionally sleeping per message and panicking
/// once (shared flag, so a restarted instance does not panic again) at message `panic_at`.
#[derive(Clone, Default)]
struct SinkPlan {
    panic_at: Option<u64>,
    sleep: Duration,
}

struct Sink {
    plan: SinkPlan,
    seen: Arc<Mutex<Vec<u64>>>,
    panicked: Arc<AtomicBool>,
}

impl Actor for Sink {
    type In = Seq;
    fn on_message(&mut self, msg: Seq, _ctx: &mut Context<'_>) {
        if self.plan.panic_at == Some(msg.0) && !self.panicked.swap(true, Ordering::Relaxed) {
            panic!("sink panics at {}", msg.0);
        }
        if !self.plan.sleep.is_zero() {
            std::thread::sleep(self.plan.sleep);
        }
        self.seen.lock().unwrap().push(msg.0);
    }
}

struct SinkSpec {
    plan: SinkPlan,
    policy: Backpressure,
    supervision: Supervision,
}

fn block(plan: SinkPlan, supervision: Supervision) -> SinkSpec {
    SinkSpec {
        plan,
        policy: Backpressure::Block,
        supervision,
    }
}

/// Wires a feed and `sinks` (each on a thread of its own, so the `Block` ones share one
/// broadcast ring of `capacity`), waits (bounded) until `done` says so from a live report, then
/// stops and joins. Returns the report and what each sink handled.
fn run(
    feed: FeedPlan,
    feed_supervision: Supervision,
    sinks: Vec<SinkSpec>,
    capacity: usize,
    done: impl Fn(&Report) -> bool,
) -> (Report, Vec<Vec<u64>>) {
    let mut bus: BusBuilder = Bus::builder();
    bus.stop_timeout(Duration::from_secs(5));
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        plan: feed,
        next: 0,
        out: s.output(),
    })
    .publishes::<Seq>()
    .supervision(feed_supervision);
    let mut seen = Vec::new();
    for (i, spec) in sinks.into_iter().enumerate() {
        let log: Arc<Mutex<Vec<u64>>> = Arc::default();
        seen.push(Arc::clone(&log));
        let panicked = Arc::new(AtomicBool::new(false));
        let plan = spec.plan.clone();
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            plan: plan.clone(),
            seen: Arc::clone(&log),
            panicked: Arc::clone(&panicked),
        })
        .subscribes::<Seq>()
        .capacity::<Seq>(capacity)
        .backpressure::<Seq>(spec.policy)
        .supervision(spec.supervision);
    }
    let running = bus.start().expect("valid wiring");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !done(&running.report()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop();
    let report = running.join().expect("no escalation");
    let seen = seen.iter().map(|l| l.lock().unwrap().clone()).collect();
    (report, seen)
}

fn edge(report: &Report, sink: usize) -> &EdgeReport {
    let name = format!("sink-{sink}");
    report
        .edges
        .iter()
        .find(|e| e.subscriber == name)
        .expect("edge")
}

/// `EdgeReport::published`: `handled + panicked + dropped + conflated + lost + in_flight`,
/// exactly, and `in_flight == 0` after `join`.
fn assert_books_balance(report: &Report) {
    for e in &report.edges {
        assert_eq!(
            e.published,
            e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight,
            "books do not balance: {e:?}"
        );
        assert_eq!(e.in_flight, 0, "{e:?}");
    }
}

fn in_order(seen: &[u64], count: u64) {
    assert_eq!(seen.len() as u64, count, "count");
    assert!(
        seen.iter().copied().eq(0..count),
        "not every message in order"
    );
}

fn handled_all(count: u64, sinks: &[usize]) -> impl Fn(&Report) -> bool + '_ {
    move |r: &Report| sinks.iter().all(|&i| edge(r, i).handled >= count)
}

const POLL_BURSTS: FeedPlan = FeedPlan {
    count: 20_000,
    burst: 50,
    slice: false,
    panic_in_on_start: false,
};

/// Three `Block` subscribers of a ring of 8, one slow: every one gets every message in order,
/// and the books balance.
#[test]
fn three_block_subscribers_with_a_slow_one_get_every_message_in_order() {
    let count = 3_000;
    let feed = FeedPlan {
        count,
        ..POLL_BURSTS
    };
    let slow = SinkPlan {
        sleep: Duration::from_micros(200),
        ..SinkPlan::default()
    };
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(slow, Supervision::Stop),
        block(SinkPlan::default(), Supervision::Stop),
    ];
    let (report, seen) = run(
        feed,
        Supervision::Stop,
        sinks,
        8,
        handled_all(count, &[0, 1, 2]),
    );
    assert_books_balance(&report);
    for s in &seen {
        in_order(s, count);
    }
}

/// `publish_slice` of bursts larger than the ring (100 into 8) reaches both subscribers whole.
#[test]
fn publish_slice_larger_than_the_ring_reaches_every_subscriber() {
    let feed = FeedPlan {
        count: 10_000,
        burst: 100,
        slice: true,
        ..POLL_BURSTS
    };
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(SinkPlan::default(), Supervision::Stop),
    ];
    let (report, seen) = run(
        feed,
        Supervision::Stop,
        sinks,
        8,
        handled_all(10_000, &[0, 1]),
    );
    assert_books_balance(&report);
    for s in &seen {
        in_order(s, 10_000);
    }
}

/// A subscriber that panics (policy `Stop`) while the feed is gated on it: the feed must not
/// wait for it for good (its messages are counted lost), the other keeps getting everything in
/// order, and the books balance.
#[test]
fn a_subscriber_that_panics_and_stops_mid_stream_does_not_gate_the_others() {
    let count = POLL_BURSTS.count;
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(
            SinkPlan {
                panic_at: Some(500),
                ..SinkPlan::default()
            },
            Supervision::Stop,
        ),
    ];
    let (report, seen) = run(
        POLL_BURSTS,
        Supervision::Stop,
        sinks,
        8,
        handled_all(count, &[0]),
    );
    assert_books_balance(&report);
    in_order(&seen[0], count);
    in_order(&seen[1], 500);
    let dead = edge(&report, 1);
    assert_eq!((dead.handled, dead.panicked), (500, 1), "{dead:?}");
    assert_eq!(dead.published, count, "{dead:?}");
}

/// A subscriber that panics once and is restarted: it misses only the message it panicked on,
/// and the books balance.
#[test]
fn a_restarted_subscriber_misses_only_the_message_it_panicked_on() {
    let count = POLL_BURSTS.count;
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(
            SinkPlan {
                panic_at: Some(700),
                ..SinkPlan::default()
            },
            Supervision::Restart(llbus::RestartLimit::default()),
        ),
    ];
    let done = |r: &Report| edge(r, 0).handled >= count && edge(r, 1).handled >= count - 1;
    let (report, seen) = run(POLL_BURSTS, Supervision::Stop, sinks, 8, done);
    assert_books_balance(&report);
    in_order(&seen[0], count);
    let expect: Vec<u64> = (0..count).filter(|&n| n != 700).collect();
    assert_eq!(seen[1].len(), expect.len());
    assert!(seen[1] == expect, "restarted subscriber's sequence differs");
    let e = edge(&report, 1);
    assert_eq!((e.handled, e.panicked, e.lost), (count - 1, 1, 0), "{e:?}");
}

/// A feed that publishes in `on_start` and then panics: what it published before the panic
/// reaches every subscriber (the runner commits after a hook "whether it returned or
/// panicked").
#[test]
fn what_a_hook_published_before_it_panicked_reaches_every_subscriber() {
    let feed = FeedPlan {
        count: 5,
        burst: 5,
        slice: false,
        panic_in_on_start: true,
    };
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(SinkPlan::default(), Supervision::Stop),
    ];
    let (report, seen) = run(feed, Supervision::Stop, sinks, 64, handled_all(5, &[0, 1]));
    assert_books_balance(&report);
    for s in &seen {
        in_order(s, 5);
    }
}

/// Two `Block` subscribers (one broadcast ring) and a `DropNewest` one (a ring of its own) on
/// one output: the `Block` ones get everything; the `DropNewest` one's drops are counted and
/// what it got is in order; the books balance.
#[test]
fn block_and_drop_newest_subscribers_mixed_on_one_output() {
    let count = POLL_BURSTS.count;
    let sinks = vec![
        block(SinkPlan::default(), Supervision::Stop),
        block(SinkPlan::default(), Supervision::Stop),
        SinkSpec {
            plan: SinkPlan {
                sleep: Duration::from_micros(50),
                ..SinkPlan::default()
            },
            policy: Backpressure::DropNewest,
            supervision: Supervision::Stop,
        },
    ];
    let done = |r: &Report| {
        let d = edge(r, 2);
        handled_all(count, &[0, 1])(r) && d.handled + d.dropped >= count
    };
    let (report, seen) = run(POLL_BURSTS, Supervision::Stop, sinks, 8, done);
    assert_books_balance(&report);
    in_order(&seen[0], count);
    in_order(&seen[1], count);
    assert!(
        seen[2].windows(2).all(|w| w[0] < w[1]),
        "DropNewest out of order"
    );
    let d = edge(&report, 2);
    assert_eq!(d.handled, seen[2].len() as u64, "{d:?}");
}

/// A stop in the middle of a long stream into two slow `Block` subscribers, and the bus
/// dropped without `join`: the drop returns within the stop timeout plus a second, and the
/// subscribers' sequences are gap-free prefixes.
#[test]
fn a_stop_mid_burst_without_join_ends_in_bounded_time_with_prefixes() {
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(2));
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        plan: FeedPlan {
            count: u64::MAX,
            burst: 1_000,
            slice: false,
            panic_in_on_start: false,
        },
        next: 0,
        out: s.output(),
    })
    .publishes::<Seq>();
    let mut logs = Vec::new();
    for i in 0..2 {
        let log: Arc<Mutex<Vec<u64>>> = Arc::default();
        logs.push(Arc::clone(&log));
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            plan: SinkPlan {
                sleep: Duration::from_micros(20),
                ..SinkPlan::default()
            },
            seen: Arc::clone(&log),
            panicked: Arc::default(),
        })
        .subscribes::<Seq>()
        .capacity::<Seq>(16);
    }
    let running = bus.start().expect("valid");
    std::thread::sleep(Duration::from_millis(300));
    running.stop();
    let t0 = Instant::now();
    drop(running);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(4), "drop took {took:?}");
    for log in &logs {
        let s = log.lock().unwrap();
        assert!(!s.is_empty());
        assert!(
            s.iter().copied().eq(0..s.len() as u64),
            "not a gap-free prefix"
        );
    }
}

/// A message whose `Clone` panics at one chosen clone call, and that counts its live values
/// (made minus dropped), so a test sees leaks and double drops.
macro_rules! fragile {
    ($ty:ident, $topic:literal, $panic_at:expr) => {
        #[derive(Debug)]
        struct $ty(u64);
        tests::message!($ty, $topic);
        impl $ty {
            fn live() -> &'static std::sync::atomic::AtomicI64 {
                static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
                &LIVE
            }
            fn clones() -> &'static std::sync::atomic::AtomicU64 {
                static CLONES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                &CLONES
            }
            fn new(n: u64) -> Self {
                Self::live().fetch_add(1, Ordering::SeqCst);
                $ty(n)
            }
        }
        impl Clone for $ty {
            fn clone(&self) -> Self {
                if Self::clones().fetch_add(1, Ordering::SeqCst) == $panic_at {
                    panic!("Clone panics");
                }
                Self::new(self.0)
            }
        }
        impl Drop for $ty {
            fn drop(&mut self) {
                Self::live().fetch_sub(1, Ordering::SeqCst);
            }
        }
    };
}

/// Runs a feed that publishes 100 `M`s in `on_start` (one `publish` each, or one
/// `publish_slice`) into three `Block` subscribers sharing a broadcast ring (so a `Clone`
/// can unwind after another reader's copy is in its slot), with a `Clone`
/// that panics on the way (the feed's policy `Stop`); returns the report and the values
/// still live after the bus is gone.
fn run_fragile<M: llbus::Message + Clone + Send + 'static>(
    make: fn(u64) -> M,
    slice: bool,
    policy: Backpressure,
    live: fn() -> i64,
) -> (Report, i64) {
    struct FragileFeed<M> {
        make: fn(u64) -> M,
        slice: bool,
        out: Out<M>,
    }
    impl<M: llbus::Message + Clone + Send + 'static> Actor for FragileFeed<M> {
        type In = ();
        fn on_start(&mut self, ctx: &mut Context<'_>) {
            if self.slice {
                let all: Vec<M> = (0..100).map(self.make).collect();
                ctx.publish_slice(self.out, &all);
            } else {
                for n in 0..100 {
                    ctx.publish(self.out, (self.make)(n));
                }
            }
        }
        fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    }
    struct Drain<M>(std::marker::PhantomData<M>);
    impl<M: llbus::Message + Clone + Send + 'static> Actor for Drain<M> {
        type In = M;
        fn on_message(&mut self, _msg: M, _ctx: &mut Context<'_>) {}
    }
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(3));
    bus.actor("feed", move |s: &mut Setup<'_>| FragileFeed {
        make,
        slice,
        out: s.output(),
    })
    .publishes::<M>()
    .supervision(Supervision::Stop);
    for i in 0..3 {
        bus.actor(&format!("sink-{i}"), |_: &mut Setup<'_>| {
            Drain::<M>(std::marker::PhantomData)
        })
        .subscribes::<M>()
        .backpressure::<M>(policy)
        .capacity::<M>(256);
    }
    let running = bus.start().expect("valid");
    std::thread::sleep(Duration::from_millis(300));
    running.stop();
    let report = running.join().expect("no escalation");
    (report, live())
}

// The clone call that panics: mid-stream, so some messages went before it, and the second
// reader's copy of its message (`publish` clones twice per message for three readers, the
// slice path three times), so the first reader's copy is already in its slot.
fragile!(FragileOne, "bcast.fragile.one", 21);
fragile!(FragileControl, "bcast.fragile.control", 21);
fragile!(FragileSlice, "bcast.fragile.slice", 23);

/// The feed panicked once, the books balance after `join`, and no value leaked or was dropped
/// twice (`live`, the values alive once the bus is gone).
fn assert_one_panic_balanced_and_nothing_leaked(report: &Report, live: i64) {
    assert_eq!(
        report.actor("feed").map(|a| a.panics),
        Some(1),
        "{report:?}"
    );
    assert_books_balance(report);
    assert_eq!(live, 0, "values leaked (>0) or dropped twice (<0)");
}

/// `publish` whose `Clone` unwinds in the middle of a fan-out into three rings of their own
/// (`DropNewest`, never full here): the control for the broadcast case below.
#[test]
fn control_a_clone_that_panics_mid_publish_into_separate_rings_leaks_nothing() {
    let (report, live) = run_fragile(FragileControl::new, false, Backpressure::DropNewest, || {
        FragileControl::live().load(Ordering::SeqCst)
    });
    assert_one_panic_balanced_and_nothing_leaked(&report, live);
}

/// `publish` whose `Clone` unwinds in the middle of a broadcast write: the books balance after
/// `join` (`published` is every message published, `in_flight == 0`), and no value leaks or is
/// dropped twice once the bus is gone.
#[test]
fn a_clone_that_panics_mid_publish_leaves_the_books_balanced_and_nothing_leaked() {
    let (report, live) = run_fragile(FragileOne::new, false, Backpressure::Block, || {
        FragileOne::live().load(Ordering::SeqCst)
    });
    assert_one_panic_balanced_and_nothing_leaked(&report, live);
}

/// The same through `publish_slice`, whose docs promise "the clones made before it published
/// and counted, and nothing after it".
#[test]
fn a_clone_that_panics_mid_publish_slice_leaves_the_books_balanced_and_nothing_leaked() {
    let (report, live) = run_fragile(FragileSlice::new, true, Backpressure::Block, || {
        FragileSlice::live().load(Ordering::SeqCst)
    });
    assert_one_panic_balanced_and_nothing_leaked(&report, live);
}

/// A feed that `try_publish`es (or, declared `never_waits`, `publish`es) one message per
/// `poll`, a millisecond apart.
struct TryFeed {
    never_waits: bool,
    next: u64,
    count: u64,
    out: Out<Seq>,
    done: Arc<AtomicBool>,
}

impl Actor for TryFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.next >= self.count {
            self.done.store(true, Ordering::Release);
            return 0;
        }
        if self.never_waits {
            ctx.publish(self.out, Seq(self.next));
        } else {
            ctx.try_publish(self.out, Seq(self.next));
        }
        self.next += 1;
        std::thread::sleep(Duration::from_millis(1));
        1
    }
}

/// A subscriber that holds its first message until the feed is done (at most 10 s), so its
/// ring fills and stays full meanwhile.
struct Stuck {
    done: Arc<AtomicBool>,
}

impl Actor for Stuck {
    type In = Seq;
    fn on_message(&mut self, _msg: Seq, _ctx: &mut Context<'_>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// `try_publish` into a fast `Block` subscriber and a stuck one of `stuck_policy`: returns what
/// the fast one handled, of 200 published a millisecond apart.
fn try_publish_past_a_stuck_subscriber(
    stuck_policy: Backpressure,
    never_waits: bool,
) -> (u64, Report) {
    let count = 200;
    let done = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(3));
    let d = Arc::clone(&done);
    let feed = bus
        .actor("feed", move |s: &mut Setup<'_>| TryFeed {
            never_waits,
            next: 0,
            count,
            out: s.output(),
            done: Arc::clone(&d),
        })
        .publishes::<Seq>();
    if never_waits {
        feed.never_waits();
    }
    let log: Arc<Mutex<Vec<u64>>> = Arc::default();
    let l = Arc::clone(&log);
    bus.actor("sink-0", move |_: &mut Setup<'_>| Sink {
        plan: SinkPlan::default(),
        seen: Arc::clone(&l),
        panicked: Arc::default(),
    })
    .subscribes::<Seq>()
    .capacity::<Seq>(8);
    let d = Arc::clone(&done);
    bus.actor("sink-1", move |_: &mut Setup<'_>| Stuck {
        done: Arc::clone(&d),
    })
    .subscribes::<Seq>()
    .backpressure::<Seq>(stuck_policy)
    .capacity::<Seq>(8);
    let running = bus.start().expect("valid");
    tests::wait_for("the feed to finish", 20, || done.load(Ordering::Acquire));
    std::thread::sleep(Duration::from_millis(50));
    running.stop();
    let report = running.join().expect("no escalation");
    let handled = log.lock().unwrap().len() as u64;
    (handled, report)
}

/// Control: with the stuck subscriber on `DropNewest`, the fast `Block` one has a ring of its
/// own and gets all 200.
#[test]
fn control_try_publish_reaches_a_fast_block_subscriber_past_a_stuck_drop_newest_one() {
    let (handled, report) = try_publish_past_a_stuck_subscriber(Backpressure::DropNewest, false);
    assert_books_balance(&report);
    assert_eq!(handled, 200, "{:?}", edge(&report, 0));
}

/// `Context::try_publish` into a shared ring: "a full ring is the slowest subscriber's: it is
/// then dropped for each of them" (where separate rings would give the fast subscriber every
/// message). This pins that contract: the fast one gets only what the stuck one had room for,
/// every other message is counted dropped on its edge, and the books balance.
#[test]
fn try_publish_on_a_shared_ring_drops_for_every_subscriber_when_the_slowest_is_full() {
    let (handled, report) = try_publish_past_a_stuck_subscriber(Backpressure::Block, false);
    assert_books_balance(&report);
    let fast = edge(&report, 0);
    assert!(
        handled < 200,
        "the stuck subscriber gates the fast one: {fast:?}"
    );
    assert_eq!(fast.handled, handled, "{fast:?}");
    assert_eq!(fast.handled + fast.dropped, 200, "{fast:?}");
    assert!(fast.dropped > 0, "{fast:?}");
}

/// The same for an actor declared `never_waits` (as the network bridge is), whose `publish`
/// "behaves as `Context::try_publish`".
#[test]
fn a_never_waits_publisher_reaches_a_fast_block_subscriber_past_a_stuck_block_one() {
    let (handled, report) = try_publish_past_a_stuck_subscriber(Backpressure::Block, true);
    assert_books_balance(&report);
    assert_eq!(handled, 200, "{:?}", edge(&report, 0));
}

/// A stop while an endless feed is gated on a slow `Block` subscriber whose queue cannot drain
/// within the stop timeout: `join` returns within the timeout plus about a second
/// (`RunningBus::stop`), the books balance (what was given up is counted lost), and the fast
/// subscriber got a gap-free prefix.
#[test]
fn a_stop_past_its_drain_phase_while_gated_on_a_slow_subscriber_keeps_the_books() {
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_millis(500));
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        plan: FeedPlan {
            count: u64::MAX,
            burst: 1_000,
            slice: false,
            panic_in_on_start: false,
        },
        next: 0,
        out: s.output(),
    })
    .publishes::<Seq>();
    let mut logs = Vec::new();
    for (i, sleep) in [Duration::ZERO, Duration::from_millis(5)]
        .into_iter()
        .enumerate()
    {
        let log: Arc<Mutex<Vec<u64>>> = Arc::default();
        logs.push(Arc::clone(&log));
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            plan: SinkPlan {
                sleep,
                ..SinkPlan::default()
            },
            seen: Arc::clone(&log),
            panicked: Arc::default(),
        })
        .subscribes::<Seq>()
        .capacity::<Seq>(16);
    }
    let running = bus.start().expect("valid");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    running.stop();
    let report = running.join().expect("no escalation");
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(2_500), "join took {took:?}");
    assert_books_balance(&report);
    for (i, log) in logs.iter().enumerate() {
        let s = log.lock().unwrap();
        assert!(
            s.iter().copied().eq(0..s.len() as u64),
            "sink-{i}: not a gap-free prefix"
        );
        assert_eq!(edge(&report, i).handled, s.len() as u64);
    }
}

/// A feed whose `poll` publishes bursts of 50 from a shared counter and panics once in the
/// middle of one (after message `PANIC_AFTER`); restarted, it goes on from the counter.
struct RestartFeed {
    next: Arc<std::sync::atomic::AtomicU64>,
    panicked: Arc<AtomicBool>,
    out: Out<Seq>,
}

const RESTART_COUNT: u64 = 5_000;
const PANIC_AFTER: u64 = 1_024;

impl Actor for RestartFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let mut done = 0;
        for _ in 0..50 {
            let n = self.next.load(Ordering::Relaxed);
            if n >= RESTART_COUNT {
                break;
            }
            ctx.publish(self.out, Seq(n));
            self.next.store(n + 1, Ordering::Relaxed);
            done += 1;
            if n == PANIC_AFTER && !self.panicked.swap(true, Ordering::Relaxed) {
                panic!("feed panics mid-burst");
            }
        }
        done
    }
}

/// A publisher that panics mid-burst and is restarted: what it published before the panic
/// (written, not yet committed) reaches both subscribers, then the restarted instance's, all in
/// order with nothing lost, and the books balance.
#[test]
fn a_publisher_restarted_after_a_panic_mid_burst_loses_nothing() {
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(5));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let panicked = Arc::new(AtomicBool::new(false));
    bus.actor("feed", move |s: &mut Setup<'_>| RestartFeed {
        next: Arc::clone(&next),
        panicked: Arc::clone(&panicked),
        out: s.output(),
    })
    .publishes::<Seq>()
    .supervision(Supervision::Restart(llbus::RestartLimit::default()));
    let mut logs = Vec::new();
    for i in 0..2 {
        let log: Arc<Mutex<Vec<u64>>> = Arc::default();
        logs.push(Arc::clone(&log));
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            plan: SinkPlan::default(),
            seen: Arc::clone(&log),
            panicked: Arc::default(),
        })
        .subscribes::<Seq>()
        .capacity::<Seq>(16);
    }
    let running = bus.start().expect("valid");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !handled_all(RESTART_COUNT, &[0, 1])(&running.report()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop();
    let report = running.join().expect("no escalation");
    assert_eq!(
        report.actor("feed").map(|a| a.restarts),
        Some(1),
        "{report:?}"
    );
    assert_books_balance(&report);
    for log in &logs {
        in_order(&log.lock().unwrap(), RESTART_COUNT);
    }
}

/// Two broadcast subscribers on one group thread, one of which panics (policy `Stop`) while the
/// feed is gated on the ring: the other, its group mate, still gets every message in order,
/// and the books balance.
#[test]
fn a_group_mate_that_panics_and_stops_does_not_gate_the_other() {
    let count = 10_000;
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(5));
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        plan: FeedPlan {
            count,
            ..POLL_BURSTS
        },
        next: 0,
        out: s.output(),
    })
    .publishes::<Seq>();
    let mut logs = Vec::new();
    for (i, panic_at) in [None, Some(300)].into_iter().enumerate() {
        let log: Arc<Mutex<Vec<u64>>> = Arc::default();
        logs.push(Arc::clone(&log));
        let panicked = Arc::new(AtomicBool::new(false));
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            plan: SinkPlan {
                panic_at,
                ..SinkPlan::default()
            },
            seen: Arc::clone(&log),
            panicked: Arc::clone(&panicked),
        })
        .group("sinks")
        .subscribes::<Seq>()
        .capacity::<Seq>(8)
        .supervision(Supervision::Stop);
    }
    let running = bus.start().expect("valid");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && edge(&running.report(), 0).handled < count {
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop();
    let report = running.join().expect("no escalation");
    assert_books_balance(&report);
    in_order(&logs[0].lock().unwrap(), count);
    in_order(&logs[1].lock().unwrap(), 300);
    let dead = edge(&report, 1);
    assert_eq!(
        (dead.published, dead.handled, dead.panicked),
        (count, 300, 1),
        "{dead:?}"
    );
}
