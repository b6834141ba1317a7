//! A binary of its own because the process is the fixture: a global allocator
//! (`tests::CountingAlloc`) counts allocations, to show that the hot paths allocate nothing once
//! set up. The ring after construction (a million single pushes and pops, batches, the
//! latest-value slot, a doorbell ring); the bus after `start()` (a source, a relay with fan-out
//! to two subscribers, one `Latest`, and a sink, in steady state; two named topics of one type,
//! one remapped, into one actor that asks each message's topic); the external handles
//! (a `Publisher` fanning out to a ring and a `Latest` slot, then into a full `DropNewest` ring,
//! and a `Subscription` receiving), and the counters file's snapshotter.
//!
//! Some windows count every thread, so the tests run one at a time ([`one_at_a_time`]): while
//! one counts, no other test allocates.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, Context, Doorbell, Latest, Out, Ring, Setup};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Held by each test for its whole run (a failed test's poison is ignored: the next one still
/// runs alone).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The ring.

#[test]
fn a_million_pushes_and_pops_allocate_nothing() {
    let _alone = one_at_a_time();
    let (mut tx, mut rx) = Ring::<u64>::new(1024);
    let (mut latest_tx, mut latest_rx) = Latest::<u64>::new();
    let bell = std::sync::Arc::new(Doorbell::new());
    tx.notify_on_push(Some(bell.clone() as _));
    let batch: Vec<u64> = (0..64).collect();
    let mut sum = 0u64;

    // Counted on this thread only: the ring runs entirely on it.
    let before = ALLOC.thread_allocations();
    for i in 0..1_000_000u64 {
        tx.try_push(i).expect("room for one");
        sum = sum.wrapping_add(rx.try_pop().expect("one to pop"));
        latest_tx.write(i);
        if let Some(v) = latest_rx.read() {
            sum = sum.wrapping_add(v);
        }
    }
    for _ in 0..10_000 {
        assert_eq!(tx.push_slice(&batch), 64);
        assert_eq!(rx.pop_batch(64, |v| sum = sum.wrapping_add(v)), 64);
    }
    let after = ALLOC.thread_allocations();

    assert_eq!(after - before, 0, "the ring allocated on its hot path");
    assert!(sum > 0);
}

// ---------------------------------------------------------------------------------------------
// The bus: actors and their edges.

#[derive(Clone, Debug)]
struct Tick(u64);
tests::message!(Tick, "alloc.tick");

#[derive(Clone, Debug)]
struct Fill(#[allow(dead_code)] [u64; 4]);
tests::message!(Fill, "alloc.fill");

struct Source {
    n: u64,
    out: Out<Tick>,
}
impl Actor for Source {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        for _ in 0..16 {
            self.n += 1;
            ctx.publish(self.out, Tick(self.n));
        }
        16
    }
}

struct Relay {
    out: Out<Fill>,
}
impl Actor for Relay {
    type In = Tick;
    fn on_message(&mut self, t: Tick, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Fill([t.0; 4]));
    }
}

struct Sink {
    handled: Arc<AtomicU64>,
}
impl Actor for Sink {
    type In = Fill;
    fn on_message(&mut self, _f: Fill, _ctx: &mut Context<'_>) {
        self.handled.fetch_add(1, Ordering::Relaxed);
    }
}

fn wait_until(handled: &AtomicU64, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled.load(Ordering::Relaxed) < at_least {
        assert!(Instant::now() < deadline, "the bus made no progress");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn publishing_and_handling_allocate_nothing_after_start() {
    let _alone = one_at_a_time();
    let handled = Arc::new(AtomicU64::new(0));
    let latest = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    bus.actor("source", |s: &mut Setup<'_>| Source {
        n: 0,
        out: s.output(),
    })
    .publishes::<Tick>();
    bus.actor("relay", |s: &mut Setup<'_>| Relay { out: s.output() })
        .subscribes::<Tick>()
        .publishes::<Fill>();
    let h = Arc::clone(&handled);
    bus.actor("sink", move |_: &mut Setup<'_>| Sink {
        handled: Arc::clone(&h),
    })
    .subscribes::<Fill>();
    let l = Arc::clone(&latest);
    bus.actor("dashboard", move |_: &mut Setup<'_>| Sink {
        handled: Arc::clone(&l),
    })
    .group("ui")
    .subscribes::<Fill>()
    .backpressure::<Fill>(Backpressure::Latest);
    let running = bus.start().expect("valid");

    wait_until(&handled, 20_000); // warm-up: every thread has run its loop many times
    let before = ALLOC.allocations();
    let from = handled.load(Ordering::Relaxed);
    wait_until(&handled, from + 200_000);
    let after = ALLOC.allocations();

    running.stop();
    let report = running.join().expect("clean stop");
    assert_eq!(after - before, 0, "the bus allocated while messages flowed");
    assert!(report.edge("alloc.fill", "relay", "dashboard").is_some());
    assert!(latest.load(Ordering::Relaxed) > 0);
}

/// Publishes each tick on one of two topics of one type, by parity.
struct TwoVenues {
    n: u64,
    a: Out<Tick>,
    b: Out<Tick>,
}
impl Actor for TwoVenues {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        for _ in 0..16 {
            self.n += 1;
            let out = if self.n % 2 == 0 { self.a } else { self.b };
            ctx.publish(out, Tick(self.n));
        }
        16
    }
}

/// Counts the ticks that came on topic `a`, asking the context for each message's topic.
struct ByVenue {
    a: u64,
    on_a: Arc<AtomicU64>,
    handled: Arc<AtomicU64>,
}
impl Actor for ByVenue {
    type In = Tick;
    fn on_message(&mut self, _t: Tick, ctx: &mut Context<'_>) {
        if ctx.topic().map(|t| t.id()) == Some(self.a) {
            self.on_a.fetch_add(1, Ordering::Relaxed);
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn named_topics_and_the_topic_of_each_message_allocate_nothing_after_start() {
    let _alone = one_at_a_time();
    let a = llbus::Topic::<Tick>::named("alloc.tick.a").expect("name");
    let b = llbus::Topic::<Tick>::named("alloc.tick.b").expect("name");
    let (handled, on_a) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut bus = Bus::builder();
    bus.remap("alloc.tick.b", "alloc.tick.b2");
    let (a2, b2) = (a.clone(), b.clone());
    bus.actor("venues", move |s: &mut Setup<'_>| TwoVenues {
        n: 0,
        a: s.output_on(&a2),
        b: s.output_on(&b2),
    })
    .publishes_to(&a)
    .publishes_to(&b);
    let (h, o, id) = (Arc::clone(&handled), Arc::clone(&on_a), a.id());
    bus.actor("strategy", move |_: &mut Setup<'_>| ByVenue {
        a: id,
        on_a: Arc::clone(&o),
        handled: Arc::clone(&h),
    })
    .subscribes_to(&a)
    .subscribes_to(&llbus::Topic::<Tick>::named("alloc.tick.b2").expect("name"));
    let running = bus.start().expect("valid");

    wait_until(&handled, 20_000);
    let before = ALLOC.allocations();
    let from = handled.load(Ordering::Relaxed);
    wait_until(&handled, from + 200_000);
    let after = ALLOC.allocations();

    running.stop();
    let report = running.join().expect("clean stop");
    assert_eq!(
        after - before,
        0,
        "named topics allocated while messages flowed"
    );
    let total = handled.load(Ordering::Relaxed);
    let a_count = on_a.load(Ordering::Relaxed);
    // Half of the ticks came on each topic, and the handler told them apart.
    assert!(
        a_count * 2 >= total - 1 && a_count * 2 <= total + 1,
        "{a_count} of {total}"
    );
    assert!(report.edge("alloc.tick.b2", "venues", "strategy").is_some());
}

// ---------------------------------------------------------------------------------------------
// The external handles and the counters file.

#[derive(Clone, Debug)]
struct Quote(#[allow(dead_code)] [u64; 4]);
tests::message!(Quote, "alloc.quote");

#[test]
fn publishing_and_receiving_through_handles_allocate_nothing() {
    let _alone = one_at_a_time();
    let mut bus = Bus::builder();
    let feed = bus.publisher::<Quote>("feed");
    let ring = bus.subscription_with::<Quote>("ring", Backpressure::Block, 64);
    let latest = bus.subscription_with::<Quote>("latest", Backpressure::Latest, 1);
    let full = bus.subscription_with::<Quote>("full", Backpressure::DropNewest, 1);
    let mut running = bus.start().expect("start");
    let mut feed = running.publisher(feed).expect("feed");
    let mut ring = running.subscription(ring).expect("ring");
    let mut latest = running.subscription(latest).expect("latest");
    let _full = running.subscription(full).expect("full");
    // Warm up (first touches of lazily set up state, if any).
    for i in 0..100u64 {
        feed.publish(Quote([i; 4])).expect("publish");
        feed.try_publish(Quote([i; 4])).expect("try_publish");
        while ring.try_recv().is_ok() {}
        let _ = latest.try_recv();
    }
    let before = ALLOC.thread_allocations();
    let mut received = 0u64;
    for i in 0..100_000u64 {
        feed.publish(Quote([i; 4])).expect("publish");
        feed.try_publish(Quote([i; 4])).expect("try_publish");
        while ring.try_recv().is_ok() {
            received += 1;
        }
        if latest.try_recv().is_ok() {
            received += 1;
        }
    }
    let after = ALLOC.thread_allocations();
    assert_eq!(after - before, 0, "the handles' hot path allocated");
    // The loop really moved messages: every publish reached the ring, each pair reached the
    // latest slot at least once per round.
    assert!(received >= 300_000, "received only {received}");
    // The counters file's snapshotter runs beside the bus, 10 times a second: in steady state
    // it allocates nothing either (counted on every thread while this one only sleeps).
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    let first = llbus::read_counters_file(&path).expect("read").generation;
    let before = ALLOC.allocations();
    std::thread::sleep(std::time::Duration::from_millis(450));
    let after = ALLOC.allocations();
    let later = llbus::read_counters_file(&path).expect("read").generation;
    assert!(
        later >= first + 2,
        "the snapshotter did not run: {first} -> {later}"
    );
    assert_eq!(after - before, 0, "the counters snapshotter allocated");
    running.stop();
    drop(feed);
    let report = running.join().expect("join");
    let full = report.edge("alloc.quote", "feed", "full").expect("edge");
    assert!(
        full.dropped > 100_000,
        "the DropNewest ring never filled: {full:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Services: a handle's call and the server's answer.

#[derive(Clone, Debug)]
struct Ask(u64);
tests::message!(Ask, "alloc.ask");

#[derive(Clone, Debug, PartialEq)]
struct Answer(u64);
tests::message!(Answer, "alloc.answer");

struct Doubler {
    replies: llbus::Replies<Answer>,
}

impl Actor for Doubler {
    type In = llbus::Request<Ask>;
    fn on_message(&mut self, request: llbus::Request<Ask>, ctx: &mut Context<'_>) {
        let (Ask(n), responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Answer(2 * n)));
    }
}

#[test]
fn a_call_and_its_answer_allocate_nothing_after_start() {
    let _alone = one_at_a_time();
    let service = llbus::Service::<Ask, Answer>::named("alloc.double").expect("name");
    let mut bus = Bus::builder();
    // Every thread counts: no counters file, whose snapshotter's first rounds may fall in
    // the window (its steady state is checked above).
    bus.counters_file(false);
    let s2 = service.clone();
    bus.actor("doubler", move |s: &mut Setup<'_>| Doubler {
        replies: s.replies(&s2),
    })
    .serves(&service);
    let key = bus.caller(&service, "client");
    let mut running = bus.start().expect("start");
    let mut client = running.caller(key).expect("caller");
    let timeout = Duration::from_secs(30);
    for n in 0..1000 {
        assert_eq!(client.call(Ask(n), timeout), Ok(Answer(2 * n)));
    }
    // Every thread counts: the caller's and the server's.
    let before = ALLOC.allocations();
    for n in 0..20_000 {
        assert_eq!(client.call(Ask(n), timeout), Ok(Answer(2 * n)));
    }
    let after = ALLOC.allocations();
    drop(client);
    running.stop();
    running.join().expect("join");
    assert_eq!(after - before, 0, "a call or its answer allocated");
}
