//! The `bus` suite: what the bus adds on top of its own ring.
//!
//! Measured in one process, round after round (each round runs both implementations once per
//! measurement, in rotating order; figures are medians over rounds):
//! - round trip (`rtt_p50`, `rtt_p99`, `rtt_p999`, `rtt_max`, ns): a counter bounced between
//!   two threads pinned to cores 0 and 1, timed on the first thread (one `Instant::now()`
//!   before sending, one after the echo came back) into an HDR histogram:
//!   - `llbus-bus`: two actors of one bus, each on its own thread with `Idle::BusySpin`, like
//!     `examples/pingpong.rs`: `ping` (core 0) publishes `Ping(n)` and records the round trip
//!     when `Pong(n)` comes back; `echo` (core 1) answers each `Ping` with a `Pong`. The
//!     histogram is allocated in `ping`'s factory; warm-up, samples and time caps are the
//!     ring suite's.
//!   - `llbus-ring`: two bare `llbus::Ring`s with the ring suite's driver (`drive::round_trip`)
//!     on two threads pinned the same way, spinning on `try_pop`.
//! - fan-out throughput (`throughput_fanout1`, `throughput_fanout3`, msgs/s per subscriber):
//!   one publisher actor (core 0, `BusySpin`) publishes `0, 1, 2, ...` as fast as it can,
//!   [`PER_POLL`] per `poll` call, to 1 or 3 subscriber actors; each subscriber checks the
//!   sequence. The figure is the items each subscriber received divided by the time from the
//!   first publish to the last subscriber's last message (every subscriber gets every item:
//!   the subscriptions are `Block`). With one subscriber it runs on its own thread (core 1,
//!   `BusySpin`); with three, the subscribers share one thread, a group on core 1 with
//!   `BusySpin` (4 spinning threads would oversubscribe the 2 vCPUs), which the table's
//!   footnote says. For reference, `llbus-ring` `throughput_fanout1` is a bare ring streamed
//!   one item at a time with the ring suite's driver (`drive::stream`).
//!
//! Every bus run is bounded: results are awaited with the hard cap, and a bus that does not
//! stop ends the run with an error (see `onbus`).

use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, Setup, DEFAULT_CAPACITY};

use crate::drive::{round_trip, stream, Failure, RttOutcome, RttPlan, StreamPlan};
use crate::harness::{
    clock_cost_ns, human, print_figures, render_targets, run_rounds, secs, Args, Bound, Collector,
    Percentiles, Pinning, Target,
};
use crate::onbus::{place, place_group, stop_and_join, Counter, Echo, Pinger, DRAIN_LIMIT};

/// Suite name in the output.
const SUITE: &str = "bus";

/// `impl` name of the bus.
pub const BUS: &str = "llbus-bus";

/// `impl` name of the bare ring.
pub const RING: &str = "llbus-ring";

/// Items the fan-out publisher publishes per `poll` call.
pub const PER_POLL: u64 = 256;

/// Marks the end of a fan-out stream; never a data value.
const END: u64 = u64::MAX;

/// Footnote of the three-subscriber case.
const FANOUT3_NOTE: &str = "publisher on its own thread (core 0, BusySpin); the 3 subscribers share one thread: a group on core 1 with BusySpin (not 4 spinning threads on 2 vCPUs)";

/// Footnote of the bare ring's fan-out-1 reference.
const RING_FANOUT1_NOTE: &str =
    "reference: a bare llbus::Ring streamed one item at a time (the ring suite's throughput_single)";

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "bench.bus.ping")]
struct Ping(u64);

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "bench.bus.pong")]
struct Pong(u64);

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "bench.bus.seq")]
struct Seq(u64);

impl Counter for Ping {
    fn with(n: u64) -> Self {
        Ping(n)
    }
    fn n(&self) -> u64 {
        self.0
    }
}

impl Counter for Pong {
    fn with(n: u64) -> Self {
        Pong(n)
    }
    fn n(&self) -> u64 {
        self.0
    }
}

/// Sizes for one run of the suite.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    rtt: RttPlan,
    fanout: StreamPlan,
    budget: Duration,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let hard_cap = Duration::from_secs(20);
        // The ring suite's sizes, so the bare ring here runs as it does there.
        let (rounds, warmup, samples, items, rtt_cap, stream_cap) = if args.quick {
            (3, 1_000, 10_000, 200_000, 200, 100)
        } else {
            (7, 20_000, 200_000, 10_000_000, 1000, 500)
        };
        Self {
            rounds: args.rounds.unwrap_or(rounds),
            rtt: RttPlan {
                warmup,
                samples,
                soft_cap: Duration::from_millis(rtt_cap),
                hard_cap,
            },
            fanout: StreamPlan {
                items,
                batch: None,
                soft_cap: Duration::from_millis(stream_cap),
                hard_cap,
            },
            budget: match args.rounds {
                Some(_) => Duration::MAX,
                None => Duration::from_secs(150),
            },
        }
    }
}

/// The target.
const TARGETS: [Target; 1] = [Target {
    what: "rtt p50 llbus-bus / llbus-ring",
    num: (BUS, "rtt_p50"),
    den: (RING, "rtt_p50"),
    bound: Bound::RatioAtMost(1.10),
}];

/// Runs the suite and prints its figures.
pub fn run(args: &Args, pinning: &Pinning) {
    let plan = Plan::new(args);
    let started = Instant::now();
    human(
        args,
        &format!(
            "== bus: round trip through the bus against the bare ring; fan-out throughput ==\n\
             threads: {}\n\
             clock: Instant::now() costs {:.0} ns, included once in every round trip\n\
             plan: {} rounds; per round and impl: {} round trips (+{} warm-up), {} items per \
             fan-out case ({} per poll); ring capacity {}; time caps {} per round trip case, \
             {} per throughput case\n",
            pinning.describe(),
            clock_cost_ns(),
            plan.rounds,
            plan.rtt.samples,
            plan.rtt.warmup,
            plan.fanout.items,
            PER_POLL,
            DEFAULT_CAPACITY,
            secs(plan.rtt.soft_cap),
            secs(plan.fanout.soft_cap),
        ),
    );
    let mut out = Collector::new(SUITE, args.verbose);
    let rounds_done = run_rounds(
        &mut out,
        3,
        2,
        plan.rounds,
        plan.budget,
        |out, phase, i| match (phase, i) {
            (0, 0) => bus_rtt_case(pinning, &plan, out),
            (0, _) => ring_rtt_case(pinning, &plan, out),
            (1, 0) => fanout_case(1, pinning, &plan, out),
            (1, _) => ring_fanout1_case(pinning, &plan, out),
            (_, 0) => fanout_case(3, pinning, &plan, out),
            (_, _) => out.note(
                RING,
                "throughput_fanout3",
                "msgs/s",
                "skipped: a ring has one consumer",
            ),
        },
    );
    let figures = out.figures();
    print_figures(args, &figures);
    human(args, &render_targets(&TARGETS, &figures, &out));
    human(
        args,
        &format!(
            "bus: {rounds_done} rounds in {}; figures are medians over rounds\n\n",
            secs(started.elapsed())
        ),
    );
}

pub const RTT_CASES: [&str; 4] = ["rtt_p50", "rtt_p99", "rtt_p999", "rtt_max"];

/// Records a round trip's percentiles, or its failure.
pub fn record_rtt(name: &'static str, result: Result<RttOutcome, String>, out: &mut Collector) {
    match result {
        Ok(o) if o.histogram.is_empty() => out.note(name, "rtt_p50", "ns", "no samples"),
        Ok(o) => {
            let p = Percentiles::of(&o.histogram);
            for (case, v) in RTT_CASES.iter().zip([p.p50, p.p99, p.p999, p.max]) {
                out.add(name, case, "ns", v as f64);
            }
            if o.capped {
                out.cut_short(name, "rtt_p50", "ns", o.histogram.len(), "round trips");
            }
        }
        Err(e) => {
            eprintln!("ERROR: {name} round trip: {e}");
            for case in RTT_CASES {
                out.note(name, case, "ns", format!("FAILED: {e}"));
            }
        }
    }
}

fn ring_rtt_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let (ping_tx, echo_rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    let (echo_tx, ping_rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    let result = round_trip(pinning, (ping_tx, ping_rx), (echo_rx, echo_tx), plan.rtt)
        .map_err(|e| e.to_string());
    record_rtt(RING, result, out);
}

fn bus_rtt_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    record_rtt(BUS, bus_round_trip(pinning, plan.rtt), out);
}

/// One bus round trip measurement: a fresh bus with `ping` on core 0 and `echo` on core 1.
fn bus_round_trip(pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let (tx, rx) = mpsc::channel();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    let ping = bus
        .actor("ping", move |s: &mut Setup<'_>| {
            Pinger::<Ping, Pong>::new(s.output(), plan, None, tx.clone())
        })
        .idle(Idle::BusySpin)
        .subscribes::<Pong>()
        .publishes::<Ping>();
    place(ping, pinning, 0);
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

fn ring_fanout1_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let case = "throughput_fanout1";
    out.note(RING, case, "msgs/s", RING_FANOUT1_NOTE);
    let (tx, rx) = llbus::Ring::<u64>::new(DEFAULT_CAPACITY);
    match stream(pinning, tx, rx, plan.fanout) {
        Ok(o) => {
            out.add(RING, case, "msgs/s", o.per_sec);
            if o.capped {
                out.cut_short(RING, case, "msgs/s", o.items, "items");
            }
        }
        Err(e) => {
            eprintln!("ERROR: {RING} {case}: {e}");
            out.note(RING, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// What the fan-out publisher shares with the measuring thread.
#[derive(Debug, Default)]
struct FeedShared {
    /// When the first item was published.
    t0: OnceLock<Instant>,
    /// Whether the time cap cut the stream short.
    capped: OnceLock<bool>,
}

/// Publishes `0, 1, ..` up to `items` (or until the time cap), [`PER_POLL`] per poll, then
/// [`END`].
struct Feeder {
    out: Out<Seq>,
    next: u64,
    items: u64,
    soft_cap: Duration,
    soft_end: Option<Instant>,
    done: bool,
    shared: Arc<FeedShared>,
}

impl Actor for Feeder {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.done {
            return 0;
        }
        let soft_end = match self.soft_end {
            Some(t) => t,
            None => {
                let t0 = Instant::now();
                let _ = self.shared.t0.set(t0);
                *self.soft_end.insert(t0 + self.soft_cap)
            }
        };
        let end = (self.next + PER_POLL).min(self.items);
        for v in self.next..end {
            ctx.publish(self.out, Seq(v));
        }
        let n = (end - self.next) as usize;
        self.next = end;
        // `ctx.now()` is the start of this round: no extra clock read.
        let capped = self.next < self.items && ctx.now() >= soft_end;
        if self.next == self.items || capped {
            ctx.publish(self.out, Seq(END));
            let _ = self.shared.capped.set(capped);
            self.done = true;
        }
        n
    }
}

/// What one subscriber reports: when it saw [`END`] and how many items came before it.
type SinkResult = Result<(Instant, u64), Failure>;

/// Receives the stream and checks its sequence.
struct Sink {
    expected: u64,
    failed: bool,
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
        } else if v == END {
            let _ = self.result.send(Ok((Instant::now(), self.expected)));
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

/// The outcome of one fan-out measurement.
struct FanoutOutcome {
    per_sec: f64,
    items: u64,
    capped: bool,
}

fn fanout_case(subscribers: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let case = if subscribers == 1 {
        "throughput_fanout1"
    } else {
        out.note(BUS, "throughput_fanout3", "msgs/s", FANOUT3_NOTE);
        "throughput_fanout3"
    };
    match fanout(subscribers, pinning, plan.fanout) {
        Ok(o) => {
            out.add(BUS, case, "msgs/s", o.per_sec);
            if o.capped {
                out.cut_short(BUS, case, "msgs/s", o.items, "items");
            }
        }
        Err(e) => {
            eprintln!("ERROR: {BUS} {case}: {e}");
            out.note(BUS, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One fan-out measurement on a fresh bus; see the module docs.
fn fanout(
    subscribers: usize,
    pinning: &Pinning,
    plan: StreamPlan,
) -> Result<FanoutOutcome, String> {
    let shared = Arc::new(FeedShared::default());
    let (tx, rx) = mpsc::channel();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    let feed_shared = Arc::clone(&shared);
    let feed = bus
        .actor("feed", move |s: &mut Setup<'_>| Feeder {
            out: s.output(),
            next: 0,
            items: plan.items,
            soft_cap: plan.soft_cap,
            soft_end: None,
            done: false,
            shared: Arc::clone(&feed_shared),
        })
        .idle(Idle::BusySpin)
        .publishes::<Seq>();
    place(feed, pinning, 0);
    for i in 0..subscribers {
        let tx = tx.clone();
        let sink = bus
            .actor(&format!("sink-{i}"), move |_: &mut Setup<'_>| Sink {
                expected: 0,
                failed: false,
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
    let mut ends = Vec::with_capacity(subscribers);
    let mut failure = None;
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
    let t0 = *shared.t0.get().ok_or("the publisher never started")?;
    let capped = shared.capped.get().copied().unwrap_or(false);
    let items = ends[0].1;
    if ends.iter().any(|&(_, n)| n != items) {
        return Err(format!("subscribers received different counts: {ends:?}"));
    }
    if let Some(e) = report.edges.iter().find(|e| e.dropped + e.lost > 0) {
        return Err(format!(
            "edge {} -> {} dropped {} and lost {} messages",
            e.publisher, e.subscriber, e.dropped, e.lost
        ));
    }
    let last = ends.iter().map(|&(t, _)| t).max().unwrap_or(t0);
    let secs = last.saturating_duration_since(t0).as_secs_f64();
    Ok(FanoutOutcome {
        per_sec: if secs > 0.0 {
            items as f64 / secs
        } else {
            f64::NAN
        },
        items,
        capped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt_plan(samples: u64) -> RttPlan {
        RttPlan {
            warmup: 10,
            samples,
            soft_cap: Duration::from_secs(5),
            hard_cap: Duration::from_secs(20),
        }
    }

    #[test]
    fn bus_round_trip_records_every_sample() {
        let pinning = Pinning::disabled("test");
        let o = bus_round_trip(&pinning, rtt_plan(200)).expect("round trip");
        // Every sample, or fewer with the time cap's flag (a loaded machine).
        let n = o.histogram.len();
        assert!(n == 200 || (n > 0 && o.capped), "{n} samples");
    }

    #[test]
    fn fanout_delivers_everything_to_every_subscriber() {
        let pinning = Pinning::disabled("test");
        let plan = StreamPlan {
            items: 5_000,
            batch: None,
            soft_cap: Duration::from_secs(5),
            hard_cap: Duration::from_secs(20),
        };
        for subscribers in [1, 3] {
            let o = fanout(subscribers, &pinning, plan).expect("fan-out");
            assert!(o.items == 5_000 || (o.items > 0 && o.capped));
            assert!(o.per_sec > 0.0);
        }
    }
}
