//! The external handles' hot path allocates nothing: after `start()`, a `Publisher` publishing
//! (fan-out to a ring and a `Latest` slot, then a full `DropNewest` ring) and a `Subscription`
//! receiving, counted by a global allocator on the calling thread; and the counters file's
//! snapshotter, counted on every thread.

use llbus::{Backpressure, Bus};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[derive(Clone, Debug)]
struct Quote(#[allow(dead_code)] [u64; 4]);
tests::message!(Quote, "alloc.quote");

#[test]
fn publishing_and_receiving_through_handles_allocate_nothing() {
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
