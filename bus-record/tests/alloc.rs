//! A binary of its own because the process is the fixture: a global allocator
//! (`tests::CountingAlloc`) counts allocations per thread. Once running, the recorder's actor
//! allocates nothing per message: it encodes into batches made at start and gets them back from
//! its writer thread, and tells its topics apart by the ids their rings come with (named
//! topics, several of one type, a remapped one among them). Counted on the bus thread the recorder shares with a probe actor that
//! reads that thread's count (the writer thread, which the mcap crate allocates on, is not
//! counted).

#[path = "it/fixtures.rs"]
mod fixtures;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixtures::{trade, TempDir, Trade};
use llbus::{Actor, Bus, Context, Setup, Topic};
use llbus_record::{Recorder, RecorderStats};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Publishes its thread's allocation count where the test reads it, every round.
struct Probe(Arc<AtomicU64>);

impl Actor for Probe {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        let n = ALLOC.thread_allocations();
        self.0.store(n, Ordering::Relaxed);
        0
    }
}

/// Waits until the recorder has written or dropped `at_least` messages.
fn wait_recorded(stats: &RecorderStats, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while stats.recorded() + stats.dropped() < at_least {
        assert!(
            Instant::now() < deadline,
            "the recorder made no progress: {} recorded, {} dropped, {} expected, error {:?}",
            stats.recorded(),
            stats.dropped(),
            at_least,
            stats.error()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How many allocations the recorder's thread made while recording 200 000 trades published
/// round-robin on `topics` (after a warm-up), recorded by `record`, on a bus with `remaps`.
fn allocations_while_recording(
    tag: &str,
    remaps: &[(&str, &str)],
    topics: &[Topic<Trade>],
    record: impl FnOnce(Recorder) -> Recorder,
) -> u64 {
    let dir = TempDir::new(tag);
    let recorder = record(
        Recorder::new(dir.join("alloc.mcap"))
            .queue(16, 1024)
            .ring_capacity(1 << 16),
    );
    let stats = recorder.stats();
    let seen = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    for (from, to) in remaps {
        bus.remap(from, to);
    }
    let keys: Vec<_> = topics
        .iter()
        .map(|t| bus.publisher_on(t, &format!("trades-{}", t.name())))
        .collect();
    bus.add(recorder).group("rec");
    let probe = Arc::clone(&seen);
    bus.actor("probe", move |_: &mut Setup<'_>| Probe(Arc::clone(&probe)))
        .group("rec");
    let mut running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    let mut publishers: Vec<_> = keys
        .into_iter()
        .map(|k| running.publisher(k).unwrap_or_else(|e| panic!("{e}")))
        .collect();

    // In steps the ring always has room for (the recorder's ring drops what does not fit,
    // which the stats would never see), each waited for.
    let mut i = 0;
    let mut publish = |n: u64| {
        for _ in 0..n / 1000 {
            for _ in 0..1000 {
                let k = (i % publishers.len() as u64) as usize;
                publishers[k]
                    .publish(trade(i))
                    .unwrap_or_else(|e| panic!("{e}"));
                i += 1;
            }
            wait_recorded(&stats, i);
        }
    };
    // Warm-up: every batch has been filled, shipped and returned at least once.
    publish(40_000);
    std::thread::sleep(Duration::from_millis(50));
    let before = seen.load(Ordering::Relaxed);
    publish(200_000);
    std::thread::sleep(Duration::from_millis(50));
    let after = seen.load(Ordering::Relaxed);
    drop(publishers);
    running.stop();
    running.join().unwrap_or_else(|e| panic!("{e}"));
    assert!(before > 0, "the probe ran and saw the start's allocations");
    assert_eq!(stats.dropped(), 0, "the recorder dropped messages");
    after - before
}

#[test]
fn the_recorders_actor_allocates_nothing_per_message() {
    let n = allocations_while_recording("alloc", &[], &[Topic::of()], |r| r.record::<Trade>());
    assert_eq!(n, 0, "the recorder's thread allocated while recording");
}

#[test]
fn recording_named_topics_of_one_type_allocates_nothing_per_message() {
    let named = |name: &str| Topic::<Trade>::named(name).unwrap_or_else(|e| panic!("{e}"));
    // Three topics of one type: two named, one of them remapped, and the default.
    let (a, b) = (named("md.trade.a"), named("md.trade.b"));
    let n = allocations_while_recording(
        "alloc-named",
        &[("md.trade.b", "site2.md.trade.b")],
        &[a.clone(), b.clone(), Topic::of()],
        |r| r.record_on(&a).record_on(&b).record::<Trade>(),
    );
    assert_eq!(
        n, 0,
        "the recorder's thread allocated while recording named topics"
    );
}
