//! The bus under failure, as a new user would meet it: a panicking worker beside a fast feed,
//! a stop in the middle, a Block cycle, panics outside the handlers, runaway restarts.
//! Every test runs its bus on a thread of its own with a deadline, so a hang fails the test
//! instead of hanging the binary, and every report must balance on every edge.

use std::time::Duration;

use llbus::{Actor, Bus, Context, Out, Setup, Supervision};
use tests::bounded;

#[derive(Clone, Debug, PartialEq)]
struct Tick(u64);
tests::message!(Tick, "fail.tick");

/// Publishes a counter on every tick.
struct Feed {
    out: Out<Tick>,
    next: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Tick(self.next));
        self.next += 1;
    }
}

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

/// The first scenario: a 20 us feed into a `Stop` worker that panics on its 10th
/// message; stop after 0.5 s. Before the fix: lost > published, and join sometimes took 20 s.
#[test]
fn a_stopped_worker_beside_a_fast_feed_balances_and_stops_promptly() {
    let (report, took) = bounded("stop and join", 30, || {
        let mut bus = Bus::builder();
        bus.actor("feed", |s: &mut Setup<'_>| Feed {
            out: s.output(),
            next: 0,
        })
        .publishes::<Tick>()
        .tick_every(Duration::from_micros(20));
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
            let e = live.edge("fail.tick", "feed", "worker").expect("edge");
            e.panicked == 1 && e.in_flight == 0 && e.lost > 0
        });
        running.stop();
        let t0 = std::time::Instant::now();
        let report = running.join().expect("Stop does not fail the bus");
        (report, t0.elapsed())
    });
    let e = report.edge("fail.tick", "feed", "worker").expect("edge");
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
