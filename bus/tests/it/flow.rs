//! Messages through the bus: per-edge order under fan-out and fan-in, group threads, and a
//! graceful stop that loses nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Out, Setup};

#[derive(Clone, Debug, PartialEq)]
struct Seq {
    source: u32,
    n: u64,
}
tests::message!(Seq, "test.seq");

#[derive(Clone, Debug, PartialEq)]
struct Echo(u64);
tests::message!(Echo, "test.echo");

/// Publishes `count` sequence numbers, a batch per tick, then asks the bus to stop when `stop`.
struct Source {
    id: u32,
    next: u64,
    count: u64,
    stop: bool,
    out: Out<Seq>,
}

impl Source {
    fn new(setup: &mut Setup<'_>, id: u32, count: u64, stop: bool) -> Self {
        Source {
            id,
            next: 0,
            count,
            stop,
            out: setup.output(),
        }
    }
}

impl Actor for Source {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.next == self.count {
            if self.stop {
                ctx.request_stop();
            }
            return 0;
        }
        let end = (self.next + 100).min(self.count);
        for n in self.next..end {
            ctx.publish(self.out, Seq { source: self.id, n });
        }
        let did = (end - self.next) as usize;
        self.next = end;
        did
    }
}

/// Checks per-source order and counts.
#[derive(Default)]
struct Tally {
    next: std::collections::HashMap<u32, u64>,
    total: u64,
}

struct Sink {
    tally: Arc<Mutex<Tally>>,
}

impl Actor for Sink {
    type In = Seq;
    fn on_message(&mut self, msg: Seq, _ctx: &mut Context<'_>) {
        let mut t = self.tally.lock().unwrap();
        let next = t.next.entry(msg.source).or_insert(0);
        assert_eq!(msg.n, *next, "source {} out of order", msg.source);
        *next += 1;
        t.total += 1;
    }
}

#[test]
fn fan_out_and_fan_in_keep_per_edge_order_and_lose_nothing() {
    const COUNT: u64 = 50_000;
    let mut bus = Bus::builder();
    bus.actor("src-a", |s: &mut Setup<'_>| Source::new(s, 1, COUNT, false))
        .publishes::<Seq>();
    bus.actor("src-b", |s: &mut Setup<'_>| Source::new(s, 2, COUNT, false))
        .publishes::<Seq>();
    let tallies: Vec<Arc<Mutex<Tally>>> = (0..3).map(|_| Arc::default()).collect();
    for (i, tally) in tallies.iter().enumerate() {
        let tally = Arc::clone(tally);
        bus.actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
            tally: Arc::clone(&tally),
        })
        .subscribes::<Seq>()
        .capacity::<Seq>(64);
    }
    let running = bus.start().expect("wiring is valid");
    // Stop once everything was published; the stop must still deliver everything queued.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = running.report();
        let published: u64 = r.edges.iter().map(|e| e.published).sum();
        if published == 2 * 3 * COUNT || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    running.stop();
    let report = running.join().expect("no actor failed");
    for tally in &tallies {
        let t = tally.lock().unwrap();
        assert_eq!(t.total, 2 * COUNT);
        assert_eq!(t.next.get(&1), Some(&COUNT));
        assert_eq!(t.next.get(&2), Some(&COUNT));
    }
    assert_eq!(report.edges.len(), 6);
    for e in &report.edges {
        assert_eq!(
            (e.published, e.handled, e.lost, e.dropped),
            (COUNT, COUNT, 0, 0),
            "{e:?}"
        );
        // Every edge carried messages, so its depth metric was raised; it cannot pass the
        // capacity of 64 set above.
        assert!((1..=64).contains(&e.max_depth), "{e:?}");
    }
    assert_eq!(report.actor("sink-0").map(|a| a.handled), Some(2 * COUNT));
}

/// Relays every message on, after a stop too, to check cascades drain.
struct Relay {
    out: Out<Echo>,
}

impl Actor for Relay {
    type In = Seq;
    fn on_message(&mut self, msg: Seq, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Echo(msg.n));
    }
}

struct Counter {
    seen: Arc<AtomicU64>,
    stopped: Arc<AtomicU64>,
    /// The first message is held until this is set (bounded by [`HOLD_LIMIT`]).
    release: Arc<AtomicBool>,
}

/// How long the counter holds its first message at most, if the test never releases it.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

impl Actor for Counter {
    type In = Echo;
    fn on_message(&mut self, _msg: Echo, _ctx: &mut Context<'_>) {
        if self.seen.fetch_add(1, Ordering::Relaxed) == 0 {
            let deadline = Instant::now() + HOLD_LIMIT;
            while !self.release.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        self.stopped.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_stop_requested_mid_stream_handles_everything_published_and_runs_stop_hooks() {
    const COUNT: u64 = 20_000;
    let seen = Arc::new(AtomicU64::new(0));
    let stopped = Arc::new(AtomicU64::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let mut bus = Bus::builder();
    // The source stops the bus itself as soon as it has published its last message.
    bus.actor("source", |s: &mut Setup<'_>| Source::new(s, 1, COUNT, true))
        .publishes::<Seq>();
    bus.actor("relay", |s: &mut Setup<'_>| Relay { out: s.output() })
        .subscribes::<Seq>()
        .publishes::<Echo>()
        .capacity::<Seq>(16);
    let (s2, st2, r2) = (
        Arc::clone(&seen),
        Arc::clone(&stopped),
        Arc::clone(&release),
    );
    bus.actor("counter", move |_: &mut Setup<'_>| Counter {
        seen: Arc::clone(&s2),
        stopped: Arc::clone(&st2),
        release: Arc::clone(&r2),
    })
    .group("slow")
    .subscribes::<Echo>()
    .capacity::<Echo>(16);
    let running = bus.start().expect("valid");
    // The counter holds its first message, so the relay fills the counter's ring and must
    // wait (Block): see it do so in the live report, then let the counter go.
    let deadline = Instant::now() + Duration::from_secs(30);
    let waited = |r: &llbus::Report| {
        r.edge("test.echo", "relay", "counter")
            .map_or(0, |e| e.waited)
    };
    while waited(&running.report()) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    release.store(true, Ordering::Release);
    let report = running.join().expect("no failure");
    assert_eq!(seen.load(Ordering::Relaxed), COUNT);
    assert_eq!(stopped.load(Ordering::Relaxed), 1);
    let e = report
        .edge("test.echo", "relay", "counter")
        .expect("edge exists");
    assert_eq!(
        (e.published, e.handled, e.lost, e.dropped),
        (COUNT, COUNT, 0, 0),
        "{e:?}"
    );
    // The relay waited for room instead of dropping, and the ring it filled held no more than
    // the capacity of 16 set above (with the default capacity it would have taken hundreds);
    // the depth metric saw the backlog.
    assert!(e.waited > 0, "{e:?}");
    assert!((2..=16).contains(&e.max_depth), "{e:?}");
}

#[test]
fn no_thread_is_left_behind() {
    /// Threads of this process whose name starts with `prefix` (Linux: /proc/self/task).
    fn threads_named(prefix: &str) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        dir.filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .map(|c| c.starts_with(prefix))
                    .unwrap_or(false)
            })
            .count()
    }
    let mut bus = Bus::builder();
    bus.actor("leak-src", |s: &mut Setup<'_>| Source::new(s, 1, 100, true))
        .publishes::<Seq>();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let t = Arc::clone(&tally);
    bus.actor("leak-sink", move |_: &mut Setup<'_>| Sink {
        tally: Arc::clone(&t),
    })
    .subscribes::<Seq>();
    bus.actor("leak-grouped", move |_: &mut Setup<'_>| Sink {
        tally: Arc::default(),
    })
    .group("leak-group")
    .subscribes::<Seq>();
    let running = bus.start().expect("valid");
    // Thread names are "llbus-" + the actor or group name, cut to 15 bytes by Linux.
    let during = threads_named("llbus-leak-");
    running.join().expect("no failure");
    let after = threads_named("llbus-leak-");
    if cfg!(target_os = "linux") {
        assert_eq!(during, 3, "one thread per actor, one for the group");
    }
    assert_eq!(after, 0, "bus threads outlived join");
    assert_eq!(tally.lock().unwrap().total, 100);
}

/// Polls the rings it took in its factory itself, and counts in a named metric.
struct Poller {
    inputs: llbus::Inputs<Seq>,
    received: llbus::Metric,
    total: Arc<AtomicU64>,
}

impl Actor for Poller {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        self.drain(ctx)
    }
    fn drain(&mut self, _ctx: &mut Context<'_>) -> usize {
        let received = &self.received;
        let total = &self.total;
        self.inputs.poll(64, |_m| {
            received.add(1);
            total.fetch_add(1, Ordering::Relaxed);
        })
    }
}

#[test]
fn an_actor_can_take_rings_in_its_factory_and_report_named_metrics() {
    let total = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    bus.actor("source", |s: &mut Setup<'_>| {
        Source::new(s, 1, 10_000, true)
    })
    .publishes::<Seq>();
    let t = Arc::clone(&total);
    bus.actor("poller", move |s: &mut Setup<'_>| Poller {
        inputs: s.inputs(),
        received: s.metric("received"),
        total: Arc::clone(&t),
    })
    .takes::<Seq>()
    .capacity::<Seq>(32);
    let report = bus.start().expect("valid").join().expect("no failure");
    assert_eq!(total.load(Ordering::Relaxed), 10_000);
    assert_eq!(
        report.actor("poller").and_then(|a| a.metric("received")),
        Some(10_000)
    );
    let e = report.edge("test.seq", "source", "poller").expect("edge");
    assert_eq!((e.published, e.handled, e.lost), (10_000, 10_000, 0));
}

/// Publishes `count` sequence numbers in one hook: all of them in `on_start` and then asks
/// for the stop, or all of them in `on_stop`.
struct HookBurst {
    count: u64,
    in_on_stop: bool,
    out: Out<Seq>,
}

impl HookBurst {
    fn publish_all(&self, ctx: &mut Context<'_>) {
        for n in 0..self.count {
            ctx.publish(self.out, Seq { source: 1, n });
        }
    }
}

impl Actor for HookBurst {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        if !self.in_on_stop {
            self.publish_all(ctx);
            ctx.request_stop();
        }
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_stop(&mut self, ctx: &mut Context<'_>) {
        if self.in_on_stop {
            self.publish_all(ctx);
        }
    }
}

/// Runs a `HookBurst` of `count` into two `Block` subscribers of `capacity` on a thread of
/// their own (so they share one ring), stopped from here when it publishes in `on_stop`, and
/// checks that each subscriber handled every message, in order, with nothing lost and the stop
/// drained.
fn hook_burst_reaches_every_subscriber(count: u64, capacity: usize, in_on_stop: bool) {
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(5));
    bus.actor("burst", move |s: &mut Setup<'_>| HookBurst {
        count,
        in_on_stop,
        out: s.output(),
    })
    .publishes::<Seq>();
    let tallies: Vec<Arc<Mutex<Tally>>> = (0..2).map(|_| Arc::default()).collect();
    for (i, tally) in tallies.iter().enumerate() {
        let tally = Arc::clone(tally);
        bus.actor(&format!("burst-sink-{i}"), move |_: &mut Setup<'_>| Sink {
            tally: Arc::clone(&tally),
        })
        .group("burst-sinks")
        .subscribes::<Seq>()
        .capacity::<Seq>(capacity);
    }
    let running = bus.start().expect("valid");
    // `on_start` asks for the stop itself once it has published; a publisher stuck in it
    // would never get there, so the stop comes from here too after a while (a second request
    // changes nothing).
    let deadline = Instant::now() + Duration::from_secs(if in_on_stop { 0 } else { 30 });
    while Instant::now() < deadline && !running.report().edges.iter().all(|e| e.handled == count) {
        std::thread::sleep(Duration::from_millis(2));
    }
    running.stop();
    let report = running.join().expect("no failure");
    assert!(
        report.stop.as_ref().is_some_and(|s| s.drained),
        "{:?}",
        report.stop
    );
    for tally in &tallies {
        let t = tally.lock().unwrap();
        assert_eq!((t.total, t.next.get(&1)), (count, Some(&count)));
    }
    assert_eq!(report.edges.len(), 2);
    for e in &report.edges {
        assert_eq!(
            (e.published, e.handled, e.lost, e.dropped),
            (count, count, 0, 0),
            "{e:?}"
        );
    }
}

/// A hook's publishes reach the subscribers when the hook returns at the latest; one that
/// publishes more than the ring holds lets them read what it wrote so far while it waits (or
/// it would wait for good, and the stop would give the rest up).
#[test]
fn a_hook_that_publishes_more_than_the_ring_holds_delivers_it_all() {
    hook_burst_reaches_every_subscriber(1000, 8, false);
}

#[test]
fn what_on_start_publishes_just_before_it_requests_the_stop_is_handled_by_every_subscriber() {
    hook_burst_reaches_every_subscriber(5, 64, false);
}

#[test]
fn what_on_stop_publishes_is_handled_by_every_subscriber() {
    hook_burst_reaches_every_subscriber(100, 16, true);
}
