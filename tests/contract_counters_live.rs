//! README "Live counters": the counters file is "read by other processes under a sequence
//! lock, so every snapshot balances". A bus whose figures change all the time (a publisher
//! and a reader on threads of their own) is read from its file over and over: every edge of
//! every snapshot read balances, and the snapshots move.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{read_counters_file, Backpressure, Bus};
use tests::cli::CountersDir;

#[derive(Clone, Debug)]
struct Num(u64);
tests::message!(Num, "contract.counters.live");

#[test]
fn every_snapshot_read_from_a_busy_bus_s_file_balances() {
    let dir = CountersDir::new("contract-live");
    std::env::set_var("LLBUS_COUNTERS_DIR", dir.path());
    let mut bus = Bus::builder();
    bus.name("live");
    let feed = bus.publisher::<Num>("feed");
    let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 64);
    let mut running = bus.start().expect("start");
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    let mut feed = running.publisher(feed).unwrap();
    let mut tap = running.subscription(tap).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let publisher = std::thread::spawn(move || {
        let mut i = 0;
        while !d.load(Ordering::Relaxed) {
            let _ = feed.publish(Num(i));
            i += 1;
        }
    });
    let d = done.clone();
    let reader = std::thread::spawn(move || {
        let mut sum = 0u64;
        while !d.load(Ordering::Relaxed) {
            if let Ok(n) = tap.try_recv() {
                sum = sum.wrapping_add(n.0);
            }
        }
        sum
    });

    let mut generations = BTreeSet::new();
    let mut published = BTreeSet::new();
    let mut reads = 0u64;
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        // A read that meets the writer mid-write retries or fails cleanly; one that returns
        // must be whole.
        if let Ok(s) = read_counters_file(&path) {
            reads += 1;
            generations.insert(s.generation);
            for e in &s.edges {
                let out = e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight;
                assert_eq!(
                    e.published, out,
                    "a torn snapshot (generation {}): {e:?}",
                    s.generation
                );
                published.insert(e.published);
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    reader.join().unwrap();
    running.stop();
    running.join().expect("join");
    assert!(reads > 100, "only {reads} whole reads in 1.5 s");
    assert!(
        generations.len() >= 5 && published.len() >= 5,
        "the file did not move: {} generations, {} published figures",
        generations.len(),
        published.len()
    );
}
