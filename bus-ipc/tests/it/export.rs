//! `ShmExport` and `ShmImport` joining two buses of this process: an export with no importer
//! attached fills its ring and then drops, counted, without holding its bus back; a writer
//! whose stamp goes stale is dead even while its process lives; `park_on_futex` puts an idle
//! import to sleep; and `start()` refuses an import or export on one thread with a `Block`
//! edge of its topic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Out, Setup};
use llbus_ipc::{ChannelConfig, Pod, ShmExport, ShmImport};

use crate::fixtures::{Dir, Tick};

const COUNT: u64 = 10_000;

/// Publishes `COUNT` ticks, as fast as the edge lets it, then nothing.
struct Source {
    out: Out<Tick>,
    published: Arc<AtomicU64>,
}

impl Actor for Source {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let mut n = 0;
        while n < 64 && self.published.load(Ordering::Relaxed) < COUNT {
            let seq = self.published.load(Ordering::Relaxed);
            ctx.publish(self.out, Tick::new(seq));
            self.published.store(seq + 1, Ordering::Relaxed);
            n += 1;
        }
        n
    }
}

/// docs/IPC.md "Liveness": "While no importer is attached, the export fills the ring and then
/// drops (counted): an absent process never stalls the local bus."
#[test]
fn an_export_without_an_importer_fills_its_ring_then_drops_and_counts() {
    let dir = Dir::new("no-importer");
    let cfg = ChannelConfig {
        dir: dir.0.clone(),
        capacity: 64,
        ..ChannelConfig::default()
    };
    let published = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    let p = published.clone();
    bus.actor("source", move |s: &mut Setup<'_>| Source {
        out: s.output(),
        published: p.clone(),
    })
    .publishes::<Tick>();
    let export = ShmExport::<Tick, Pod>::new("no-importer", &cfg).expect("export");
    let status = export.status();
    bus.add(export);
    let bus = bus.start().expect("start");

    // Every message is published (Block edges: a stalled export would stop the source) and
    // accounted for: at most a ring's worth moved into the ring, the rest dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while published.load(Ordering::Relaxed) < COUNT || status.moved() + status.dropped() < COUNT {
        assert!(
            Instant::now() < deadline,
            "the bus stalled without an importer: published {} of {COUNT}, moved {}, dropped {}",
            published.load(Ordering::Relaxed),
            status.moved(),
            status.dropped()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (moved, dropped) = (status.moved(), status.dropped());
    assert!(!status.is_connected());
    assert_eq!(moved + dropped, COUNT, "moved {moved}, dropped {dropped}");
    assert!(
        moved <= 64,
        "moved {moved} into a 64-slot ring nobody reads"
    );
    assert!(dropped >= COUNT - 64, "dropped only {dropped}");
    bus.stop();
    bus.join().expect("the bus stops");
}

/// Does nothing but, once `stall` is set, blocks its thread (and so the export beside it) for
/// `STALL` in one tick.
struct Staller {
    stall: Arc<std::sync::atomic::AtomicBool>,
    done: bool,
}

const STALL: Duration = Duration::from_secs(3);

impl Actor for Staller {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        if !self.done && self.stall.load(Ordering::Acquire) {
            self.done = true;
            std::thread::sleep(STALL);
        }
    }
}

/// docs/IPC.md, "Liveness": "a side is dead when its process is gone ... or its stamp is older
/// than `stale_after`". Both ends live in this process, so the pid check always finds the
/// writer alive: only its stale stamp can tell.
#[test]
fn a_writer_whose_stamp_goes_stale_is_dead_though_its_process_lives() {
    let dir = Dir::new("stale");
    let stale_after = Duration::from_millis(300);
    let cfg = ChannelConfig {
        dir: dir.0.clone(),
        stale_after,
        ..ChannelConfig::default()
    };
    let stall = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut a = Bus::builder();
    let _feed = a.publisher::<Tick>("feed");
    a.add(ShmExport::<Tick, Pod>::new("stale", &cfg).expect("export"))
        .group("stuck");
    let s = stall.clone();
    a.actor("staller", move |_: &mut Setup<'_>| Staller {
        stall: s.clone(),
        done: false,
    })
    .group("stuck")
    .tick_every(Duration::from_millis(5));
    let mut b = Bus::builder();
    let import = ShmImport::<Tick, Pod>::new("stale", &cfg).expect("import");
    let status = import.status();
    b.add(import);
    b.actor("sink", tests::readme::sink::<Tick>())
        .subscribes::<Tick>();
    let (a, b) = (a.start().expect("a"), b.start().expect("b"));
    tests::wait_for("the import to attach", 30, || status.is_connected());
    let deaths = status.peer_deaths();
    let stalled = Instant::now();
    stall.store(true, Ordering::Release);
    tests::wait_for("the stale writer noticed", 30, || {
        status.peer_deaths() > deaths
    });
    let noticed = stalled.elapsed();
    assert!(
        noticed >= stale_after - Duration::from_millis(50),
        "declared dead after {noticed:?}, before its stamp could be {stale_after:?} old"
    );
    a.stop();
    b.stop();
    a.join().expect("a");
    b.join().expect("b");
}

/// docs/IPC.md: "`ShmImport::park_on_futex` lets an import actor alone on its thread sleep on
/// the futex in `poll`": idle, its thread runs about one round per millisecond (the park's cap)
/// instead of spinning and yielding, and a publish still reaches it.
#[test]
fn an_idle_import_parked_on_the_futex_sleeps_and_still_receives() {
    let dir = Dir::new("futex");
    let cfg = ChannelConfig {
        dir: dir.0.clone(),
        ..ChannelConfig::default()
    };
    let mut a = Bus::builder();
    let feed = a.publisher::<Tick>("feed");
    a.add(ShmExport::<Tick, Pod>::new("futex", &cfg).expect("export"));
    let mut b = Bus::builder();
    let import = ShmImport::<Tick, Pod>::new("futex", &cfg)
        .expect("import")
        .park_on_futex(Duration::from_millis(1));
    let status = import.status();
    b.add(import);
    let tap = b.subscription_with::<Tick>("tap", llbus::Backpressure::Block, 64);
    let (mut a, mut b) = (a.start().expect("a"), b.start().expect("b"));
    let mut feed = a.publisher(feed).expect("feed");
    let mut tap = b.subscription(tap).expect("tap");
    tests::wait_for("the import to attach", 30, || status.is_connected());
    let rounds = |b: &llbus::RunningBus| {
        b.snapshot()
            .actor("ipc-import-futex")
            .map(|r| r.idle_rounds)
            .unwrap_or(0)
    };
    let (from, started) = (rounds(&b), Instant::now());
    std::thread::sleep(Duration::from_millis(500));
    let (idle, took) = (rounds(&b) - from, started.elapsed());
    let most = 2 * took.as_millis() as u64 + 200;
    assert!(
        idle <= most,
        "{idle} idle rounds in {took:?}: the import did not sleep on the futex"
    );
    for seq in 0..10 {
        feed.publish(Tick::new(seq)).expect("publish");
    }
    for seq in 0..10 {
        let got = tap.recv_timeout(Duration::from_secs(10)).expect("a tick");
        assert_eq!(got.seq, seq);
    }
    a.stop();
    b.stop();
    a.join().expect("a");
    b.join().expect("b");
}

/// docs/IPC.md, "Limits": an import cannot share a thread with a `Block` subscriber of its
/// topic, nor an export with a `Block` publisher of its topic: `start()` refuses such wiring;
/// on threads of their own they start.
#[test]
fn an_import_or_export_sharing_a_thread_with_a_block_edge_of_its_topic_is_refused() {
    let dir = Dir::new("wiring");
    let cfg = ChannelConfig {
        dir: dir.0.clone(),
        ..ChannelConfig::default()
    };
    let import_bus = |shared: bool| {
        let mut b = Bus::builder();
        let import = b.add(ShmImport::<Tick, Pod>::new("wiring-in", &cfg).expect("import"));
        if shared {
            import.group("io");
        }
        b.actor("sink", tests::readme::sink::<Tick>())
            .group("io")
            .subscribes::<Tick>();
        b.start()
    };
    let export_bus = |shared: bool| {
        let mut b = Bus::builder();
        let export = b.add(ShmExport::<Tick, Pod>::new("wiring-out", &cfg).expect("export"));
        if shared {
            export.group("io");
        }
        b.actor("feed", tests::readme::ticker(Tick::new))
            .group("io")
            .tick_every(Duration::from_millis(10))
            .publishes::<Tick>();
        b.start()
    };
    for (what, refused) in [("import", import_bus(true)), ("export", export_bus(true))] {
        let e = refused.err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("ipc.tick")),
            "an {what} sharing a thread with a Block edge of its topic: {e:?}"
        );
    }
    for (what, started) in [("import", import_bus(false)), ("export", export_bus(false))] {
        let running = started.unwrap_or_else(|e| panic!("an {what} on its own thread: {e}"));
        running.stop();
        running.join().expect("join");
    }
}
