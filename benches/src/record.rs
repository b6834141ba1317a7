//! The `record` suite: what recording costs (llbus-record, in process).
//!
//! Measured in one process, round after round (each round runs every implementation once per
//! measurement, in a fresh random order; figures are medians over rounds, with min and max):
//! - sustained rate (`recorded_64b`, msgs/s): 64-byte messages (`Tick`: a `u64` and seven
//!   `f64`, 64 bytes in bincode) written to a file in the system's temporary directory for the
//!   suite's window after a warm-up, counted by what reached the writer:
//!   - `llbus-record`: a publisher actor and the recorder's actor share one thread (a group on
//!     core 0, `BusySpin`): the publisher publishes [`PER_POLL`] ticks per poll, the recorder
//!     takes them, encodes them into batches and hands those to its writer thread (core 1 is
//!     left to it), which writes MCAP with 1 MiB zstd chunks. The figure is the recorder's
//!     `recorded` count over the window; what the recorder dropped because its writer was
//!     behind is `dropped_64b` (msgs/s), so the figure is the writer's sustained rate, not the
//!     publisher's.
//!   - `llbus-record-z3`: the same at zstd's default level 3 instead of the recorder's 1.
//!   - `raw-file`: the disk's limit in the same run: one thread (core 1) encodes the same ticks
//!     with bincode into a 64 KiB `BufWriter` over a file, with no MCAP, no chunks, no
//!     compression, no bus.
//! - the publisher's round trip with a recorder attached (`rtt_p50`, `rtt_p99`, ns): the `bus`
//!   suite's ping-pong (`ping` on core 0, `echo` in a group on core 1, both `BusySpin`, timed
//!   by `ping`):
//!   - `rtt-plain`: no recorder.
//!   - `rtt-recorded`: a recorder records both `Ping` and `Pong`: each publish pushes into
//!     one more ring (the recorder's, `DropNewest`), and the recorder's actor takes its turn
//!     in `echo`'s group (a thread of its own would be a third spinning thread on two cores,
//!     which starves whole rounds: docs/PERFORMANCE.md, "Recording"). Its writer thread is
//!     unpinned: it shares the cores with the spinning pair, which this figure includes. The
//!     ping-pong publishes millions of messages a second, more than the writer keeps up with,
//!     so the recorder drops (and counts) most of them.
//!
//! Every bus run is bounded (see `onbus`); every file is removed after its measurement.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, Setup};
use llbus_record::{Recorder, RecorderStats};
use serde::Serialize;

use crate::drive::{Plan, RttOutcome, RttPlan};
use crate::harness::{
    human, run_suite, secs, short, Args, Bound, Collector, Pinning, Target, CORES,
};
use crate::onbus::{
    bus_with_pinger, newtype_counter, place_group, stop_and_join, Echo, DRAIN_LIMIT,
};
use crate::ring::{WARMUP, WINDOW};

/// Suite name in the output.
const SUITE: &str = "record";

/// `impl` name of the in-process recorder.
const RECORD: &str = "llbus-record";
/// `impl` name of the in-process recorder at zstd's default level (3), for the level choice.
const RECORD_Z3: &str = "llbus-record-z3";
/// `impl` name of the plain file writer (the disk's limit).
const RAW: &str = "raw-file";
/// `impl` name of the round trip without a recorder.
const RTT_PLAIN: &str = "rtt-plain";
/// `impl` name of the round trip with a recorder attached.
const RTT_RECORDED: &str = "rtt-recorded";

/// Ticks the publisher publishes per `poll`.
const PER_POLL: u64 = 256;

/// The suite's targets (printed in its `targets` block).
const TARGETS: [Target; 2] = [
    Target {
        what: "llbus-record msgs/s (| raw-file)",
        num: (RECORD, "recorded_64b"),
        den: (RAW, "recorded_64b"),
        bound: Bound::AtLeast(1e6, "msgs/s"),
    },
    Target {
        what: "rtt p50 rtt-recorded / rtt-plain",
        num: (RTT_RECORDED, "rtt_p50"),
        den: (RTT_PLAIN, "rtt_p50"),
        bound: Bound::RatioAtMost(1.10),
    },
];

/// A 64-byte message (in bincode).
#[derive(Message, Serialize, Clone, Copy, Debug)]
#[message(topic = "bench.record.tick")]
struct Tick {
    seq: u64,
    px: [f64; 7],
}

impl Tick {
    fn new(seq: u64) -> Tick {
        let base = seq as f64;
        Tick {
            seq,
            px: std::array::from_fn(|i| base * 0.01 + i as f64),
        }
    }
}

newtype_counter!(Ping, "bench.record.ping");
newtype_counter!(Pong, "bench.record.pong");

/// This suite's sizes: 9 rounds of the ring suite's windows within 60 s.
fn plan(args: &Args) -> Plan {
    Plan::new(args, 9, WARMUP, WINDOW, Duration::from_secs(60))
}

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, pinning: &Pinning, seed: u64) -> Collector {
    let plan = plan(args);
    let started = Instant::now();
    human(
        args,
        &format!(
            "== record: the in-process recorder's sustained rate against a plain file; the \
             publisher's round trip with and without a recorder ==\n\
             threads: {}\n\
             files in: {}\n\
             plan: {} rounds in random order (seed {seed}); per round and impl: {} of warm-up \
             then {} measured\n",
            pinning.describe(),
            std::env::temp_dir().display(),
            plan.rounds,
            short(plan.rtt.warmup),
            short(plan.rtt.window),
        ),
    );
    let (out, rounds_done, _) = run_suite(
        args,
        SUITE,
        seed,
        2,
        &[RECORD, RECORD_Z3, RAW, RTT_PLAIN, RTT_RECORDED],
        (plan.rounds, plan.budget),
        &TARGETS,
        |out, phase, i| match (phase, i) {
            (0, 0) => record_case(RECORD, 1, pinning, &plan, out),
            (0, 1) => record_case(RECORD_Z3, 3, pinning, &plan, out),
            (0, 2) => raw_case(pinning, &plan, out),
            (0, _) => {}
            (_, 3) => rtt_case(RTT_PLAIN, false, pinning, &plan, out),
            (_, 4) => rtt_case(RTT_RECORDED, true, pinning, &plan, out),
            _ => {}
        },
    );
    human(
        args,
        &format!(
            "record: {rounds_done} rounds in {}; figures are medians over rounds (min..max)\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

/// A fresh file path for one measurement.
fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("llbus-bench-{tag}-{}.mcap", std::process::id()))
}

/// Publishes ticks, [`PER_POLL`] per poll, until the bus stops.
struct Ticker {
    out: Out<Tick>,
    next: u64,
}

impl Actor for Ticker {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        for _ in 0..PER_POLL {
            ctx.publish(self.out, Tick::new(self.next));
            self.next += 1;
        }
        PER_POLL as usize
    }
}

fn record_case(
    name: &'static str,
    level: u32,
    pinning: &Pinning,
    plan: &Plan,
    out: &mut Collector,
) {
    match record_rate(level, pinning, plan) {
        Ok((recorded, dropped)) => {
            out.add(name, "recorded_64b", "msgs/s", recorded);
            out.add(name, "dropped_64b", "msgs/s", dropped);
        }
        Err(e) => {
            eprintln!("ERROR: {name}: {e}");
            out.note(name, "recorded_64b", "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One recorder measurement at zstd level `level`: `(recorded, dropped)` per second over the
/// window.
fn record_rate(level: u32, pinning: &Pinning, plan: &Plan) -> Result<(f64, f64), String> {
    let path = scratch("record");
    let recorder = Recorder::new(&path).zstd_level(level).record::<Tick>();
    let stats = recorder.stats();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    place_group(bus.group("rec"), pinning, 0).idle(Idle::BusySpin);
    bus.actor("ticker", |s: &mut Setup<'_>| Ticker {
        out: s.output(),
        next: 0,
    })
    .publishes::<Tick>()
    .group("rec");
    bus.add(recorder).group("rec");
    let running = bus
        .start()
        .map_err(|e| format!("the bus did not start: {e}"))?;
    let window = measure_window(plan, &stats);
    let joined = stop_and_join(running, "recorder");
    let _ = std::fs::remove_file(&path);
    joined?;
    if let Some(error) = stats.error() {
        return Err(format!("the recorder failed: {error}"));
    }
    Ok(window)
}

/// Counts the recorder's recorded and dropped messages over the plan's window, after its
/// warm-up; per second.
fn measure_window(plan: &Plan, stats: &RecorderStats) -> (f64, f64) {
    std::thread::sleep(plan.rtt.warmup);
    let (r0, d0, t0) = (stats.recorded(), stats.dropped(), Instant::now());
    std::thread::sleep(plan.rtt.window);
    let (r1, d1, t1) = (stats.recorded(), stats.dropped(), Instant::now());
    let s = (t1 - t0).as_secs_f64();
    ((r1 - r0) as f64 / s, (d1 - d0) as f64 / s)
}

fn raw_case(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    match raw_rate(pinning, plan) {
        Ok(rate) => out.add(RAW, "recorded_64b", "msgs/s", rate),
        Err(e) => {
            eprintln!("ERROR: {RAW}: {e}");
            out.note(RAW, "recorded_64b", "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One plain-file measurement on a thread pinned to core 1: ticks per second written.
fn raw_rate(pinning: &Pinning, plan: &Plan) -> Result<f64, String> {
    let path = scratch("raw");
    let (warmup, window) = (plan.rtt.warmup, plan.rtt.window);
    let pin = pinning.enabled();
    let file_path = path.clone();
    let writer = std::thread::Builder::new()
        .name("raw-file".into())
        .spawn(move || -> Result<f64, String> {
            if pin && !core_affinity::set_for_current(core_affinity::CoreId { id: CORES[1] }) {
                return Err("cannot pin to core 1".into());
            }
            let file = std::fs::File::create(&file_path).map_err(|e| e.to_string())?;
            let mut w = std::io::BufWriter::with_capacity(1 << 16, file);
            let config = bincode::config::legacy();
            let mut seq = 0u64;
            let start = Instant::now();
            let mut counted: Option<(u64, Instant)> = None;
            loop {
                for _ in 0..PER_POLL {
                    bincode::serde::encode_into_std_write(Tick::new(seq), &mut w, config)
                        .map_err(|e| e.to_string())?;
                    seq += 1;
                }
                let now = Instant::now();
                match counted {
                    None if now - start >= warmup => counted = Some((seq, now)),
                    Some((s0, t0)) if now - t0 >= window => {
                        w.flush().map_err(|e| e.to_string())?;
                        return Ok((seq - s0) as f64 / (now - t0).as_secs_f64());
                    }
                    _ => {}
                }
            }
        })
        .map_err(|e| format!("cannot spawn: {e}"))?;
    let result = writer
        .join()
        .map_err(|_| "the writer thread panicked".to_owned())?;
    let _ = std::fs::remove_file(&path);
    result
}

fn rtt_case(
    name: &'static str,
    recorded: bool,
    pinning: &Pinning,
    plan: &Plan,
    out: &mut Collector,
) {
    let result = round_trip(recorded, pinning, plan.rtt);
    out.add_rtt(name, result.as_ref().map(|o| &o.histogram));
}

/// One round trip measurement, with or without a recorder of both topics.
fn round_trip(recorded: bool, pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let (mut bus, rx) = bus_with_pinger::<Ping, Pong>(pinning, plan);
    // The echo runs in a group in both cases, so that the only difference is the recorder.
    place_group(bus.group("echo"), pinning, 1).idle(Idle::BusySpin);
    bus.actor("echo", |s: &mut Setup<'_>| {
        Echo::<Ping, Pong>::new(s.output())
    })
    .subscribes::<Ping>()
    .publishes::<Pong>()
    .group("echo");
    let path = scratch("rtt");
    if recorded {
        bus.add(Recorder::new(&path).record::<Ping>().record::<Pong>())
            .group("echo");
    }
    let running = bus
        .start()
        .map_err(|e| format!("the bus did not start: {e}"))?;
    let got = rx.recv_timeout(plan.hard_cap);
    let joined = stop_and_join(running, "record round trip");
    let _ = std::fs::remove_file(&path);
    joined?;
    match got {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no result within {} (stuck)", secs(plan.hard_cap))),
    }
}
