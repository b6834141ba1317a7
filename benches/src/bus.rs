//! The `bus` suite: what the bus adds on top of its own ring.
//!
//! Measured in one process, round after round (each round runs both implementations once per
//! measurement, in a fresh random order; figures are medians over rounds, with min and max):
//! - round trip (`rtt_p50`, `rtt_p99`, `rtt_p999`, `rtt_max`, ns): a counter bounced between
//!   two threads pinned to cores 0 and 1, timed on the first thread (one `Instant::now()`
//!   before sending, one after the echo came back) into an HDR histogram:
//!   - `llbus-bus`: two actors of one bus, each on its own thread with `Idle::BusySpin`, like
//!     `examples/pingpong.rs`: `ping` (core 0) publishes `Ping(n)` and records the round trip
//!     when `Pong(n)` comes back; `echo` (core 1) answers each `Ping` with a `Pong`. The
//!     histogram is allocated in `ping`'s factory; warm-up and window are the ring suite's.
//!   - `llbus-ring`: two bare `llbus::Ring`s with the ring suite's driver (`drive::round_trip`)
//!     on two threads pinned the same way, spinning on `try_pop`.
//! - fan-out throughput (`throughput_fanout1`, `throughput_fanout3`, msgs/s per subscriber):
//!   one publisher actor (core 0, `BusySpin`) publishes `0, 1, 2, ...` as fast as it can,
//!   [`PER_POLL`] per `poll` call, to 1 or 3 subscriber actors; each subscriber checks the
//!   sequence and keeps its count in an atomic. The measuring thread reads the counts after the
//!   ring suite's warm-up and again a window later; the figure is the slowest subscriber's
//!   items in the window divided by its length (every subscriber gets every item: the
//!   subscriptions are `Block`). With one subscriber it runs on its own thread (core 1,
//!   `BusySpin`); with three, the subscribers share one thread, a group on core 1 with
//!   `BusySpin` (4 spinning threads would oversubscribe the 2 vCPUs), which the table's
//!   footnote says. For reference, `llbus-ring` `throughput_fanout1` is a bare ring streamed
//!   one item at a time with the ring suite's driver (`drive::stream`).
//! - the same in bursts (`throughput_fanout1_batch`, `throughput_fanout3_batch`): the publisher
//!   publishes each poll's [`PER_POLL`] items with one `Context::publish_slice`; for reference,
//!   `llbus-ring` streams batches of [`PER_POLL`] (`push_slice`/`pop_batch`).
//! - peers (`disruptor`, `crossbeam-channel`: see `fanout`), what a user would pick instead,
//!   at fan-out 1 and 3 in the same placement: publisher on core 0, the consumers polled by
//!   one thread on core 1.
//!
//! Every bus run is bounded: results are awaited with the hard cap, and a bus that does not
//! stop ends the run with an error (see `onbus`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, Setup, DEFAULT_CAPACITY};

use crate::drive::{round_trip, stream, Failure, Plan, RttOutcome, RttPlan, StreamPlan};
use crate::fanout;
use crate::harness::{
    clock_cost_ns, human, run_suite, secs, short, Args, Bound, Collector, Pinning, Target,
};
use crate::onbus::{
    bus_with_pinger, newtype_counter, place, place_group, stop_and_join, wait_until, CallEcho,
    Called, Echo, Pinger, DRAIN_LIMIT,
};
use crate::ring::{WARMUP, WINDOW};

/// Suite name in the output.
const SUITE: &str = "bus";

/// `impl` name of the bus.
pub const BUS: &str = "llbus-bus";

/// `impl` name of a service call between two actors of one bus.
pub const CALL: &str = "llbus-call";

/// `impl` name of the bare ring.
pub const RING: &str = "llbus-ring";

/// `impl` name of the disruptor's broadcast (a peer; see `fanout`).
pub const DISRUPTOR: &str = "disruptor";

/// `impl` name of the crossbeam-channel pipeline (a peer; see `fanout`).
pub const CROSSBEAM: &str = "crossbeam-channel";

/// Items the fan-out publisher publishes per `poll` call.
pub const PER_POLL: u64 = 256;

/// Marks the end of a fan-out stream; never a data value.
const END: u64 = u64::MAX;

/// Footnote of the three-subscriber case.
const FANOUT3_NOTE: &str = "publisher on its own thread (core 0, BusySpin); the 3 subscribers share one thread: a group on core 1 with BusySpin (not 4 spinning threads on 2 vCPUs)";

/// Footnote of the peers' three-consumer case.
const PEER_FANOUT3_NOTE: &str = "publisher on core 0; the 3 consumers polled in turn by one thread on core 1, as the bus's group";

/// Footnote of the bare ring's batch reference.
const RING_BATCH_NOTE: &str =
    "reference: a bare llbus::Ring streamed in batches of 256 (push_slice/pop_batch)";

/// Footnote of the bare ring's fan-out-1 reference.
const RING_FANOUT1_NOTE: &str =
    "reference: a bare llbus::Ring streamed one item at a time (the ring suite's throughput_single)";

newtype_counter!(Ping, "bench.bus.ping");
newtype_counter!(Pong, "bench.bus.pong");

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "bench.bus.seq")]
struct Seq(u64);

/// This suite's sizes: 15 rounds of the ring suite's windows (so the bare ring here runs as it
/// does there) within 40 s.
fn plan(args: &Args) -> Plan {
    Plan::new(args, 15, WARMUP, WINDOW, Duration::from_secs(40))
}

/// The suite's targets (printed in its `targets` block).
const TARGETS: [Target; 5] = [
    Target {
        what: "rtt p50 llbus-call / llbus-bus",
        num: (CALL, "rtt_p50"),
        den: (BUS, "rtt_p50"),
        bound: Bound::RatioAtMost(1.20),
    },
    Target {
        what: "rtt p50 llbus-bus / llbus-ring",
        num: (BUS, "rtt_p50"),
        den: (RING, "rtt_p50"),
        bound: Bound::RatioAtMost(1.10),
    },
    Target {
        what: "fan-out 1 llbus-bus / llbus-ring",
        num: (BUS, "throughput_fanout1"),
        den: (RING, "throughput_fanout1"),
        bound: Bound::RatioAtLeast(0.5),
    },
    Target {
        what: "llbus-bus fan-out 3 / fan-out 1",
        num: (BUS, "throughput_fanout3"),
        den: (BUS, "throughput_fanout1"),
        bound: Bound::RatioAtLeast(0.5),
    },
    Target {
        what: "fan-out 3 llbus-bus / disruptor",
        num: (BUS, "throughput_fanout3"),
        den: (DISRUPTOR, "throughput_fanout3"),
        bound: Bound::RatioAtLeast(1.0),
    },
];

/// The fan-out cases: one item per publish, and bursts of [`PER_POLL`] per publish.
const FANOUT_CASES: [(usize, bool, &str); 4] = [
    (1, false, "throughput_fanout1"),
    (3, false, "throughput_fanout3"),
    (1, true, "throughput_fanout1_batch"),
    (3, true, "throughput_fanout3_batch"),
];

/// Footnote of the peers' round trip.
const PEER_RTT_NOTE: &str = "skipped: peers are measured for fan-out only";

/// Footnote of the peers' batch cases.
const PEER_BATCH_NOTE: &str = "skipped: one item per publish only";

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, pinning: &Pinning, seed: u64) -> Collector {
    let plan = plan(args);
    let started = Instant::now();
    human(
        args,
        &format!(
            "== bus: round trip through the bus against the bare ring; fan-out throughput ==\n\
             threads: {}\n\
             clock: Instant::now() costs {:.0} ns, included once in every round trip\n\
             plan: {} rounds in random order (seed {seed}); per round and impl: round trips \
             and fan-out streams ({} per poll), each {} of warm-up then {} measured; ring \
             capacity {}\n",
            pinning.describe(),
            clock_cost_ns(),
            plan.rounds,
            PER_POLL,
            short(plan.rtt.warmup),
            short(plan.rtt.window),
            DEFAULT_CAPACITY,
        ),
    );
    let (out, rounds_done, _) = run_suite(
        args,
        SUITE,
        seed,
        1 + FANOUT_CASES.len(),
        &[BUS, RING, DISRUPTOR, CROSSBEAM, CALL],
        (plan.rounds, plan.budget),
        &TARGETS,
        |out, phase, i| match (phase, i) {
            (0, 0) => bus_rtt_case(pinning, &plan, out),
            (0, 1) => ring_rtt_case(pinning, &plan, out),
            (0, 2) => out.note(DISRUPTOR, "rtt_p50", "ns", PEER_RTT_NOTE),
            (0, 3) => out.note(CROSSBEAM, "rtt_p50", "ns", PEER_RTT_NOTE),
            (0, _) => call_rtt_case(pinning, &plan, out),
            (phase, i) => {
                let (subscribers, batch, case) = FANOUT_CASES[phase - 1];
                match i {
                    4 => out.note(
                        CALL,
                        case,
                        "msgs/s",
                        "skipped: a call is measured for its round trip",
                    ),
                    0 => fanout_case(subscribers, batch, case, pinning, &plan, out),
                    1 if subscribers == 1 => ring_fanout1_case(batch, case, pinning, &plan, out),
                    1 => out.note(RING, case, "msgs/s", "skipped: a ring has one consumer"),
                    _ if batch => out.note(
                        [DISRUPTOR, CROSSBEAM][i - 2],
                        case,
                        "msgs/s",
                        PEER_BATCH_NOTE,
                    ),
                    2 => peer_case::<fanout::Disruptor>(
                        DISRUPTOR,
                        subscribers,
                        case,
                        pinning,
                        &plan,
                        out,
                    ),
                    _ => peer_case::<fanout::Crossbeam>(
                        CROSSBEAM,
                        subscribers,
                        case,
                        pinning,
                        &plan,
                        out,
                    ),
                }
            }
        },
    );
    human(
        args,
        &format!(
            "bus: {rounds_done} rounds in {}; figures are medians over rounds (min..max)\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

fn ring_rtt_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let (ping_tx, echo_rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    let (echo_tx, ping_rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    let result = round_trip(pinning, (ping_tx, ping_rx), (echo_rx, echo_tx), plan.rtt);
    out.add_rtt(RING, result.as_ref().map(|o| &o.histogram));
}

fn bus_rtt_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let result = bus_round_trip(pinning, plan.rtt);
    out.add_rtt(BUS, result.as_ref().map(|o| &o.histogram));
}

fn call_rtt_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let result = call_round_trip(pinning, plan.rtt);
    out.add_rtt(CALL, result.as_ref().map(|o| &o.histogram));
}

/// One call round trip measurement: a fresh bus with `caller` on core 0 calling `server` on
/// core 1 (`Context::call`, `Context::reply`), timed as the bus's round trip is.
fn call_round_trip(pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let service =
        llbus::Service::<Ping, Pong>::named("bench.bus.call").map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    let s = service.clone();
    let caller = bus
        .actor("caller", move |setup: &mut Setup<'_>| {
            let calls = Called::<Ping, Pong>::new(setup.caller(&s), Duration::from_secs(10));
            Pinger::new(calls, plan, None, tx.clone())
        })
        .idle(Idle::BusySpin)
        .calls(&service);
    place(caller, pinning, 0);
    let s = service.clone();
    let server = bus
        .actor("server", move |setup: &mut Setup<'_>| {
            CallEcho::<Ping, Pong>::new(setup.replies(&s))
        })
        .idle(Idle::BusySpin)
        .serves(&service);
    place(server, pinning, 1);
    let running = bus
        .start()
        .map_err(|e| format!("the bus did not start: {e}"))?;
    let got = rx.recv_timeout(plan.hard_cap);
    stop_and_join(running, "call round trip")?;
    match got {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no result within {} (stuck)", secs(plan.hard_cap))),
    }
}

/// One bus round trip measurement: a fresh bus with `ping` on core 0 and `echo` on core 1.
fn bus_round_trip(pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let (mut bus, rx) = bus_with_pinger::<Ping, Pong>(pinning, plan);
    let echo = bus
        .actor("echo", |s: &mut Setup<'_>| {
            Echo::<Ping, Pong>::new(s.output())
        })
        .idle(Idle::BusySpin)
        .subscribes::<Ping>()
        .publishes::<Pong>();
    place(echo, pinning, 1);
    let running = bus
        .start()
        .map_err(|e| format!("the bus did not start: {e}"))?;
    let got = rx.recv_timeout(plan.hard_cap);
    let report = stop_and_join(running, "bus round trip")?;
    let edges = || {
        report
            .edges
            .iter()
            .map(|e| {
                format!(
                    "{} -> {}: published {}, handled {}",
                    e.publisher, e.subscriber, e.published, e.handled
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    match got {
        Ok(result) => result.map_err(|e| format!("{e} ({})", edges())),
        Err(_) => Err(format!(
            "no result within {} (stuck; {})",
            secs(plan.hard_cap),
            edges()
        )),
    }
}

fn ring_fanout1_case(
    batch: bool,
    case: &'static str,
    pinning: &Pinning,
    plan: &Plan,
    out: &mut Collector,
) {
    out.note(
        RING,
        case,
        "msgs/s",
        if batch {
            RING_BATCH_NOTE
        } else {
            RING_FANOUT1_NOTE
        },
    );
    let (tx, rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    let batch = batch.then_some(PER_POLL as usize);
    match stream(pinning, tx, rx, plan.stream(batch)) {
        Ok(o) => out.add(RING, case, "msgs/s", o.per_sec),
        Err(e) => {
            eprintln!("ERROR: {RING} {case}: {e}");
            out.note(RING, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One fan-out measurement of a peer, recorded as `name`.
fn peer_case<B: fanout::Broadcast>(
    name: &'static str,
    subscribers: usize,
    case: &'static str,
    pinning: &Pinning,
    plan: &Plan,
    out: &mut Collector,
) {
    if subscribers > 1 {
        out.note(name, case, "msgs/s", PEER_FANOUT3_NOTE);
    }
    match fanout::fanout::<B>(subscribers, DEFAULT_CAPACITY, pinning, plan.stream(None)) {
        Ok(per_sec) => out.add(name, case, "msgs/s", per_sec),
        Err(e) => {
            eprintln!("ERROR: {name} {case}: {e}");
            out.note(name, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// What the fan-out publisher shares with the measuring thread.
#[derive(Debug, Default)]
struct FeedShared {
    /// When the first item was published.
    t0: OnceLock<Instant>,
    /// Set by the measuring thread once the window has closed: publish [`END`] and stop.
    stop: AtomicBool,
}

/// Publishes `0, 1, ..` [`PER_POLL`] per poll until told to stop, then [`END`].
struct Feeder {
    out: Out<Seq>,
    next: u64,
    done: bool,
    /// Publish each poll's items as one burst (`publish_slice`), not one at a time.
    batch: bool,
    shared: Arc<FeedShared>,
}

impl Actor for Feeder {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.done {
            return 0;
        }
        if self.next == 0 {
            let _ = self.shared.t0.set(Instant::now());
        }
        if self.batch {
            let burst: [Seq; PER_POLL as usize] =
                std::array::from_fn(|i| Seq(self.next + i as u64));
            ctx.publish_slice(self.out, &burst);
        } else {
            for v in self.next..self.next + PER_POLL {
                ctx.publish(self.out, Seq(v));
            }
        }
        self.next += PER_POLL;
        if self.shared.stop.load(Ordering::Relaxed) {
            ctx.publish(self.out, Seq(END));
            self.done = true;
        }
        PER_POLL as usize
    }
}

/// What one subscriber reports at [`END`]: how many items came before it.
type SinkResult = Result<u64, Failure>;

/// Receives the stream, checks its sequence and keeps its count where the measuring thread
/// reads it.
struct Sink {
    expected: u64,
    failed: bool,
    count: Arc<AtomicU64>,
    result: mpsc::Sender<SinkResult>,
}

impl Actor for Sink {
    type In = Seq;

    fn on_message(&mut self, Seq(v): Seq, _ctx: &mut Context<'_>) {
        if self.failed {
            return;
        }
        if v == self.expected {
            self.expected += 1;
            // Published every 256 items, not every item: the sink's per-message work stays a
            // check and an increment, and the window's edges are still exact to 256 items of
            // millions.
            if self.expected % 256 == 0 {
                self.count.store(self.expected, Ordering::Relaxed);
            }
        } else if v == END {
            let _ = self.result.send(Ok(self.expected));
        } else {
            self.failed = true;
            let _ = self.result.send(Err(Failure::Corrupt {
                side: "subscriber actor",
                expected: self.expected,
                got: v,
            }));
        }
    }
}

fn fanout_case(
    subscribers: usize,
    batch: bool,
    case: &'static str,
    pinning: &Pinning,
    plan: &Plan,
    out: &mut Collector,
) {
    if subscribers > 1 {
        out.note(BUS, case, "msgs/s", FANOUT3_NOTE);
    }
    match fanout(subscribers, batch, pinning, plan.stream(None)) {
        Ok(per_sec) => out.add(BUS, case, "msgs/s", per_sec),
        Err(e) => {
            eprintln!("ERROR: {BUS} {case}: {e}");
            out.note(BUS, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One fan-out measurement on a fresh bus (see the module docs): the slowest subscriber's
/// messages per second in the window.
fn fanout(
    subscribers: usize,
    batch: bool,
    pinning: &Pinning,
    plan: StreamPlan,
) -> Result<f64, String> {
    let shared = Arc::new(FeedShared::default());
    let counts: Vec<Arc<AtomicU64>> = (0..subscribers).map(|_| Arc::default()).collect();
    let (tx, rx) = mpsc::channel();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    let feed_shared = Arc::clone(&shared);
    let feed = bus
        .actor("feed", move |s: &mut Setup<'_>| Feeder {
            out: s.output(),
            next: 0,
            done: false,
            batch,
            shared: Arc::clone(&feed_shared),
        })
        .idle(Idle::BusySpin)
        .publishes::<Seq>();
    place(feed, pinning, 0);
    for (i, count) in counts.iter().enumerate() {
        let (tx, count) = (tx.clone(), Arc::clone(count));
        let sink = bus
            .actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
                expected: 0,
                failed: false,
                count: Arc::clone(&count),
                result: tx.clone(),
            })
            .subscribes::<Seq>();
        if subscribers == 1 {
            place(sink.idle(Idle::BusySpin), pinning, 1);
        } else {
            sink.group("sinks");
        }
    }
    if subscribers > 1 {
        place_group(bus.group("sinks").idle(Idle::BusySpin), pinning, 1);
    }
    drop(tx);
    let running = bus
        .start()
        .map_err(|e| format!("the bus did not start: {e}"))?;
    let deadline = Instant::now() + plan.hard_cap;
    let read = || -> (Instant, Vec<u64>) {
        let now = Instant::now();
        (
            now,
            counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        )
    };
    let window = if wait_until(deadline, || shared.t0.get().is_some()) {
        std::thread::sleep(plan.warmup);
        let opened = read();
        std::thread::sleep(plan.window);
        let closed = read();
        Ok((opened, closed))
    } else {
        Err(format!(
            "the publisher did not start within {}",
            secs(plan.hard_cap)
        ))
    };
    shared.stop.store(true, Ordering::Relaxed);
    let mut ends = Vec::with_capacity(subscribers);
    let mut failure = window.as_ref().err().cloned();
    while ends.len() < subscribers && failure.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Ok(end)) => ends.push(end),
            Ok(Err(e)) => failure = Some(e.to_string()),
            Err(_) => {
                failure = Some(format!(
                    "{} of {subscribers} subscribers finished within {} (stuck)",
                    ends.len(),
                    secs(plan.hard_cap)
                ))
            }
        }
    }
    let report = stop_and_join(running, "bus fan-out")?;
    if let Some(e) = failure {
        return Err(e);
    }
    if ends.iter().any(|&n| n != ends[0]) {
        return Err(format!("subscribers received different counts: {ends:?}"));
    }
    if let Some(e) = report.edges.iter().find(|e| e.dropped + e.lost > 0) {
        return Err(format!(
            "edge {} -> {} dropped {} and lost {} messages",
            e.publisher, e.subscriber, e.dropped, e.lost
        ));
    }
    let ((t0, n0), (t1, n1)) = window?;
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    let slowest = n0.iter().zip(&n1).map(|(a, b)| b - a).min().unwrap_or(0);
    Ok(if secs > 0.0 {
        slowest as f64 / secs
    } else {
        f64::NAN
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt_plan() -> RttPlan {
        RttPlan {
            warmup: Duration::from_millis(5),
            window: Duration::from_millis(20),
            hard_cap: Duration::from_secs(20),
        }
    }

    #[test]
    fn bus_round_trip_records_samples() {
        let pinning = Pinning::disabled("test");
        let o = bus_round_trip(&pinning, rtt_plan()).expect("round trip");
        assert!(!o.histogram.is_empty());
    }

    #[test]
    fn fanout_delivers_everything_to_every_subscriber() {
        let pinning = Pinning::disabled("test");
        let plan = StreamPlan {
            batch: None,
            warmup: Duration::from_millis(5),
            window: Duration::from_millis(20),
            hard_cap: Duration::from_secs(20),
        };
        for (subscribers, batch) in [(1, false), (3, false), (1, true), (3, true)] {
            // Every subscriber got the same count, in order, with nothing dropped or lost, or
            // this is an error. A loaded machine can deschedule the sinks for a whole 20 ms
            // window (a rate of 0): some window within 20 s must see them move.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut rates: Vec<f64> = Vec::new();
            while rates.iter().all(|&r| r == 0.0) && std::time::Instant::now() < deadline {
                rates.push(fanout(subscribers, batch, &pinning, plan).expect("fan-out"));
            }
            assert!(rates.iter().any(|&r| r > 0.0), "{rates:?}");
            assert!(
                rates.iter().all(|r| r.is_finite() && *r >= 0.0),
                "{rates:?}"
            );
        }
    }
}
