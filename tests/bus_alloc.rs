//! After `start()`, publishing and handling allocate nothing: a source, a relay with fan-out
//! to two subscribers (one `Latest`), and a sink, counted by a global allocator in steady state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, Context, Out, Setup};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

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
