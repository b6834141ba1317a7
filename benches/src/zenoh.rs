//! The `zenoh` suite: what the llbus-zenoh gateways add to zenoh itself.
//!
//! Two zenoh sessions in this process, peers on loopback TCP (one listens on a free port, the
//! other connects; scouting off), fresh for every measurement. Implementations:
//! - `llbus-zenoh`: llbus -> gateway -> zenoh -> gateway -> llbus. Bus A's external publisher
//!   `app` publishes [`Stamp`]s; its gateway exports them (the gateway's thread takes them from
//!   a `DropNewest` subscription and `put`s them with its default `Block` congestion control);
//!   bus B's gateway imports them (zenoh's callback publishes into bus B), and bus B's external
//!   subscription `app`, read by a thread of its own (`recv_timeout`, parking), takes them.
//! - `zenoh`: a plain zenoh publisher (`Block` congestion control, as the export's) puts the
//!   same 16 bincode bytes, and a plain zenoh subscriber's callback takes them.
//!
//! Cases, one measurement each per round (every round runs both implementations in a fresh
//! random order):
//! - `oneway_p50`, `oneway_p99` (ns): one message every [`INTERVAL`], timed from the sender's
//!   publish (or put) to the receiver's take, with the monotonic clock of this one process; the
//!   percentiles of every message after a warm-up.
//! - `throughput` (msgs/s): the sender publishes as fast as it can, the messages taken by the
//!   receiver during the window, per second. Zenoh's `Block` congestion control holds a plain
//!   sender back; the llbus publisher holds itself back to [`AHEAD`] messages beyond the
//!   export's puts, as a blocking ring would (the export's `DropNewest` ring would otherwise
//!   make it spin on drops, on the core the gateway's thread needs).
//!
//! - `call_p50`, `call_p99` (ns): a service's round trip, one call at a time after a warm-up,
//!   for as many calls as fit in the window: `llbus-zenoh` is a handle's `Caller::call` on bus
//!   B, whose gateway imports the service (an actor sends a zenoh `get`), bus A's gateway
//!   exporting it as a queryable that calls bus A's echo actor; `zenoh` is a plain `get` against
//!   a plain queryable that echoes the payload.
//!
//! Nothing is pinned: zenoh's runtime threads go where the scheduler puts them, as in an
//! application. Every wait is bounded; every bus is stopped with `onbus`'s deadlines.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use llbus::{Bus, Message, RecvTimeoutError};
use llbus_zenoh::zenoh::qos::CongestionControl;
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Export, Gateway, Import};
use serde::{Deserialize, Serialize};

use crate::harness::{
    human, latency_histogram, run_suite, secs, short, Args, Bound, Collector, Percentiles, Target,
};
use crate::onbus::{stop_and_join, DRAIN_LIMIT};

/// Suite name in the output.
const SUITE: &str = "zenoh";

/// `impl` name of llbus through two gateways.
const GATEWAY: &str = "llbus-zenoh";
/// `impl` name of plain zenoh.
const PLAIN: &str = "zenoh";

/// The pace of the one-way measurement: 5000 messages a second, well below either's limit, so
/// the figure is a message's latency, not a queue's.
const INTERVAL: Duration = Duration::from_micros(200);

/// The plain key; the gateway's is `llbus/<topic>`.
const PLAIN_KEY: &str = "bench/zenoh/plain";

/// How far the llbus publisher may run ahead of the export's puts (below the export's ring of
/// 1024, so that it never drops).
const AHEAD: u64 = 512;

/// How long a session pair may take to find each other.
const MATCH_LIMIT: Duration = Duration::from_secs(10);

/// How long the receiver may take to see the last messages before the pair is torn down.
const SETTLE: Duration = Duration::from_millis(100);

/// The suite's target (printed in its `targets` block).
const TARGETS: [Target; 1] = [Target {
    what: "oneway p50 llbus-zenoh / zenoh",
    num: (GATEWAY, "oneway_p50"),
    den: (PLAIN, "oneway_p50"),
    bound: Bound::RatioAtMost(1.20),
}];

/// The plain queryable's key; the gateway's is `llbus/<service>`.
const PLAIN_SERVICE_KEY: &str = "bench/zenoh/echo";

/// What both implementations carry: a sequence number and the send time in ns since the
/// suite's clock base (16 bytes in bincode).
#[derive(Message, Serialize, Deserialize, Clone, Copy, Debug)]
#[message(topic = "bench.zenoh.stamp")]
struct Stamp {
    seq: u64,
    sent_ns: u64,
}

/// The suite's sizes.
struct Plan {
    rounds: usize,
    warmup: Duration,
    window: Duration,
    budget: Duration,
}

impl Plan {
    fn new(args: &Args) -> Plan {
        let (rounds, warmup, window) = if args.quick {
            (2, Duration::from_millis(100), Duration::from_millis(300))
        } else {
            (9, Duration::from_millis(300), Duration::from_secs(1))
        };
        Plan {
            rounds: args.rounds.unwrap_or(rounds),
            warmup,
            window,
            budget: Duration::from_secs(60),
        }
    }
}

/// Which measurement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Paced at [`INTERVAL`]; the latency of every message after the warm-up.
    OneWay,
    /// Flat out; messages taken per second over the window.
    Throughput,
}

/// The receiving end's books, shared by the receiver (a zenoh callback or a thread) and the
/// driver.
struct Sink {
    base: Instant,
    /// Messages with a sequence number from here on are timed (none in throughput mode).
    timed_from: u64,
    histogram: Mutex<Histogram<u64>>,
    taken: AtomicU64,
}

impl Sink {
    fn new(base: Instant, timed_from: u64) -> Arc<Sink> {
        Arc::new(Sink {
            base,
            timed_from,
            histogram: Mutex::new(latency_histogram()),
            taken: AtomicU64::new(0),
        })
    }

    fn take(&self, stamp: Stamp) {
        self.taken.fetch_add(1, Ordering::Relaxed);
        if stamp.seq >= self.timed_from {
            let now = ns_since(self.base);
            let one_way = now.saturating_sub(stamp.sent_ns).max(1);
            // Out of the histogram's range only if a clock is broken: such a sample is left
            // out rather than stopping the run.
            let _ = self
                .histogram
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(one_way);
        }
    }
}

fn ns_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// What a sender does with each stamp: publish it, or put it; false if it was refused.
type SendFn<'a> = &'a mut dyn FnMut(Stamp) -> bool;

/// Sends stamps as the mode says and returns what the receiver took: in one-way mode, the
/// histogram (after `warmup`'s messages); in throughput mode, messages per second over the
/// window.
fn drive(plan: &Plan, mode: Mode, sink: &Sink, send: SendFn<'_>) -> Outcome {
    let base = sink.base;
    let mut seq = 0u64;
    let mut refused = 0u64;
    let mut stamp = |seq: u64| {
        if !send(Stamp {
            seq,
            sent_ns: ns_since(base),
        }) {
            refused += 1;
        }
    };
    match mode {
        Mode::OneWay => {
            let total = warm_count(plan) + (plan.window.as_nanos() / INTERVAL.as_nanos()) as u64;
            let start = Instant::now();
            while seq < total {
                let due = start + INTERVAL * u32::try_from(seq).unwrap_or(u32::MAX);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                stamp(seq);
                seq += 1;
            }
            std::thread::sleep(SETTLE);
            let h = sink
                .histogram
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            Outcome::OneWay(h, refused)
        }
        Mode::Throughput => {
            let start = Instant::now();
            let mut opened: Option<(u64, Instant)> = None;
            loop {
                for _ in 0..64 {
                    stamp(seq);
                    seq += 1;
                }
                let now = Instant::now();
                match opened {
                    None if now - start >= plan.warmup => {
                        opened = Some((sink.taken.load(Ordering::Relaxed), now));
                    }
                    Some((taken0, t0)) if now - t0 >= plan.window => {
                        let taken = sink.taken.load(Ordering::Relaxed) - taken0;
                        return Outcome::Rate(taken as f64 / (now - t0).as_secs_f64());
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The messages of the one-way warm-up.
fn warm_count(plan: &Plan) -> u64 {
    (plan.warmup.as_nanos() / INTERVAL.as_nanos()) as u64
}

/// One measurement's result: the one-way histogram with the sends the sender's side refused,
/// or the rate taken.
enum Outcome {
    OneWay(Histogram<u64>, u64),
    Rate(f64),
}

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, seed: u64) -> Collector {
    let plan = Plan::new(args);
    let started = Instant::now();
    human(
        args,
        &format!(
            "== zenoh: llbus through two llbus-zenoh gateways against plain zenoh, two peer \
             sessions on loopback TCP in this process ==\n\
             threads: unpinned (zenoh's runtime, the gateway's export thread, the receiver)\n\
             plan: {} rounds in random order (seed {seed}); per round and impl: one-way at \
             {}/s for {} of warm-up then {}; throughput for {} of warm-up then {}\n",
            plan.rounds,
            Duration::from_secs(1).as_nanos() / INTERVAL.as_nanos(),
            short(plan.warmup),
            short(plan.window),
            short(plan.warmup),
            short(plan.window),
        ),
    );
    let (out, rounds_done, _) = run_suite(
        args,
        SUITE,
        seed,
        3,
        &[GATEWAY, PLAIN],
        (plan.rounds, plan.budget),
        &TARGETS,
        |out, phase, i| {
            let name = [GATEWAY, PLAIN][i];
            if phase == 2 {
                let calls = if i == 0 {
                    calls_through_gateways(&plan)
                } else {
                    plain_calls(&plan)
                };
                record_calls(out, name, calls);
                return;
            }
            let mode = if phase == 0 {
                Mode::OneWay
            } else {
                Mode::Throughput
            };
            let result = if i == 0 {
                through_gateways(&plan, mode)
            } else {
                plain(&plan, mode)
            };
            record(out, name, mode, result);
        },
    );
    human(
        args,
        &format!(
            "zenoh: {rounds_done} rounds in {}; figures are medians over rounds (min..max)\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

fn record(out: &mut Collector, name: &'static str, mode: Mode, result: Result<Outcome, String>) {
    match result {
        Ok(Outcome::OneWay(h, _)) if h.is_empty() => {
            out.note(name, "oneway_p50", "ns", "no samples");
        }
        Ok(Outcome::OneWay(h, refused)) => {
            let p = Percentiles::of(&h);
            out.add(name, "oneway_p50", "ns", p.p50 as f64);
            out.add(name, "oneway_p99", "ns", p.p99 as f64);
            if refused > 0 {
                out.note(name, "oneway_p50", "ns", format!("{refused} sends refused"));
            }
        }
        Ok(Outcome::Rate(rate)) => out.add(name, "throughput", "msgs/s", rate),
        Err(e) => {
            eprintln!("ERROR: {name}: {e}");
            let case = match mode {
                Mode::OneWay => "oneway_p50",
                Mode::Throughput => "throughput",
            };
            out.note(name, case, "", format!("FAILED: {e}"));
        }
    }
}

/// Two peer configurations on a free loopback port: the first listens, the second connects.
fn peer_pair() -> Result<(zenoh::Config, zenoh::Config), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    let config = |side: &str| {
        zenoh::Config::from_json5(&format!(
            r#"{{ mode: "peer", {side}: {{ endpoints: ["tcp/127.0.0.1:{port}"] }},
                 scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }} }}"#
        ))
        .map_err(|e| format!("zenoh config: {e}"))
    };
    Ok((config("listen")?, config("connect")?))
}

/// One measurement of plain zenoh.
fn plain(plan: &Plan, mode: Mode) -> Result<Outcome, String> {
    let (a, b) = peer_pair()?;
    let sender = zenoh::open(a).wait().map_err(|e| e.to_string())?;
    let receiver = zenoh::open(b).wait().map_err(|e| e.to_string())?;
    let sink = Sink::new(Instant::now(), timed_from(plan, mode));
    let taker = Arc::clone(&sink);
    let subscriber = receiver
        .declare_subscriber(PLAIN_KEY)
        .callback(move |sample| {
            let bytes = sample.payload().to_bytes();
            if let Ok((stamp, _)) = llbus::decode_bounded::<Stamp>(&bytes) {
                taker.take(stamp);
            }
        })
        .wait()
        .map_err(|e| e.to_string())?;
    let publisher = sender
        .declare_publisher(PLAIN_KEY)
        .congestion_control(CongestionControl::Block)
        .wait()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + MATCH_LIMIT;
    while !publisher
        .matching_status()
        .wait()
        .is_ok_and(|s| s.matching())
    {
        if Instant::now() >= deadline {
            return Err(format!(
                "the sessions did not match within {}",
                secs(MATCH_LIMIT)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut buf = Vec::with_capacity(16);
    let outcome = drive(plan, mode, &sink, &mut |stamp| {
        buf.clear();
        bincode::serde::encode_into_std_write(stamp, &mut buf, bincode::config::legacy()).is_ok()
            && publisher.put(buf.clone()).wait().is_ok()
    });
    let _ = subscriber.undeclare().wait();
    let _ = publisher.undeclare().wait();
    let _ = sender.close().wait();
    let _ = receiver.close().wait();
    Ok(outcome)
}

fn timed_from(plan: &Plan, mode: Mode) -> u64 {
    match mode {
        Mode::OneWay => warm_count(plan),
        Mode::Throughput => u64::MAX,
    }
}

/// One measurement of llbus through two gateways.
fn through_gateways(plan: &Plan, mode: Mode) -> Result<Outcome, String> {
    let (a, b) = peer_pair()?;
    let mut bus_b = Bus::builder();
    bus_b.stop_timeout(DRAIN_LIMIT);
    let app_b = bus_b.subscription::<Stamp>("app");
    let mut gateway_b = Gateway::builder();
    gateway_b.import::<Stamp>(&mut bus_b, Import::new());
    let mut running_b = bus_b.start().map_err(|e| e.to_string())?;
    let gateway_b = gateway_b
        .start(&mut running_b, b)
        .map_err(|e| e.to_string())?;
    let mut app_b = running_b.subscription(app_b).map_err(|e| e.to_string())?;

    let mut bus_a = Bus::builder();
    bus_a.stop_timeout(DRAIN_LIMIT);
    let app_a = bus_a.publisher::<Stamp>("app");
    let mut gateway_a = Gateway::builder();
    gateway_a.export::<Stamp>(&mut bus_a, Export::new());
    let mut running_a = bus_a.start().map_err(|e| e.to_string())?;
    let gateway_a = gateway_a
        .start(&mut running_a, a)
        .map_err(|e| e.to_string())?;
    let mut app_a = running_a.publisher(app_a).map_err(|e| e.to_string())?;

    let sink = Sink::new(Instant::now(), timed_from(plan, mode));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (sink, done) = (Arc::clone(&sink), Arc::clone(&done));
        std::thread::Builder::new()
            .name("zenoh-bench-rx".into())
            .spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    match app_b.recv_timeout(Duration::from_millis(10)) {
                        Ok(stamp) => sink.take(stamp),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Closed) => break,
                    }
                }
            })
            .map_err(|e| format!("cannot spawn the receiver: {e}"))?
    };
    let outcome = if gateway_a.wait_matched(MATCH_LIMIT) {
        // Flat out, the publisher keeps at most AHEAD messages ahead of the gateway's puts
        // (the credit a blocking ring would give): otherwise it spins on a full DropNewest
        // ring, taking the core the gateway's thread needs, and the figure is the scheduler's.
        let put = || gateway_a.counts().put;
        Ok(drive(plan, mode, &sink, &mut |stamp| {
            while stamp.seq.saturating_sub(put()) >= AHEAD {
                std::thread::yield_now();
            }
            app_a.publish(stamp).is_ok()
        }))
    } else {
        Err(format!(
            "the gateways did not match within {}",
            secs(MATCH_LIMIT)
        ))
    };
    drop(app_a);
    let stopped_a = stop_and_join(running_a, "zenoh export bus");
    gateway_a.close();
    done.store(true, Ordering::Relaxed);
    let _ = receiver.join();
    let stopped_b = stop_and_join(running_b, "zenoh import bus");
    gateway_b.close();
    stopped_a?;
    stopped_b?;
    outcome
}

/// Times `call` one call at a time: the warm-up's calls, then as many as fit in the window.
fn time_calls(
    plan: &Plan,
    call: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Histogram<u64>, String> {
    let mut h = latency_histogram();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < plan.warmup {
        call(n)?;
        n += 1;
    }
    let window = Instant::now();
    while window.elapsed() < plan.window {
        let t = Instant::now();
        call(n)?;
        let _ = h.record(
            u64::try_from(t.elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        n += 1;
    }
    Ok(h)
}

fn record_calls(out: &mut Collector, name: &'static str, result: Result<Histogram<u64>, String>) {
    match result {
        Ok(h) if h.is_empty() => out.note(name, "call_p50", "ns", "no samples"),
        Ok(h) => {
            let p = Percentiles::of(&h);
            out.add(name, "call_p50", "ns", p.p50 as f64);
            out.add(name, "call_p99", "ns", p.p99 as f64);
        }
        Err(e) => {
            eprintln!("ERROR: {name}: {e}");
            out.note(name, "call_p50", "", format!("FAILED: {e}"));
        }
    }
}

/// One measurement of plain zenoh calls: a `get` against a queryable that echoes its payload.
fn plain_calls(plan: &Plan) -> Result<Histogram<u64>, String> {
    let (a, b) = peer_pair()?;
    let server = zenoh::open(a).wait().map_err(|e| e.to_string())?;
    let client = zenoh::open(b).wait().map_err(|e| e.to_string())?;
    let queryable = server
        .declare_queryable(PLAIN_SERVICE_KEY)
        .callback(|query| {
            let payload = query
                .payload()
                .map(|p| p.to_bytes().into_owned())
                .unwrap_or_default();
            let _ = query.reply(query.key_expr().clone(), payload).wait();
        })
        .wait()
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(16);
    let mut call = |n: u64| -> Result<(), String> {
        buf.clear();
        let stamp = Stamp { seq: n, sent_ns: 0 };
        bincode::serde::encode_into_std_write(stamp, &mut buf, bincode::config::legacy())
            .map_err(|e| e.to_string())?;
        let replies = client
            .get(PLAIN_SERVICE_KEY)
            .payload(buf.clone())
            .timeout(MATCH_LIMIT)
            .wait()
            .map_err(|e| e.to_string())?;
        match replies.recv() {
            Ok(reply) if reply.result().is_ok() => Ok(()),
            Ok(_) => Err("an error reply".to_owned()),
            Err(e) => Err(format!("no reply: {e}")),
        }
    };
    wait_answered(&mut call)?;
    let h = time_calls(plan, &mut call);
    let _ = queryable.undeclare().wait();
    let _ = server.close().wait();
    let _ = client.close().wait();
    h
}

/// Calls until one is answered (the sessions must find each other's queryables first), for at
/// most [`MATCH_LIMIT`].
fn wait_answered(call: &mut dyn FnMut(u64) -> Result<(), String>) -> Result<(), String> {
    let deadline = Instant::now() + MATCH_LIMIT;
    loop {
        match call(0) {
            Ok(()) => return Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(format!(
                    "no call answered within {}: {e}",
                    secs(MATCH_LIMIT)
                ))
            }
        }
    }
}

/// The echo service both buses run.
fn echo_service() -> llbus::Service<Stamp, Stamp> {
    llbus::Service::of()
}

/// Answers each call with its request.
struct Echo {
    replies: llbus::Replies<Stamp>,
}

impl llbus::Actor for Echo {
    type In = llbus::Request<Stamp>;
    fn on_message(&mut self, request: llbus::Request<Stamp>, ctx: &mut llbus::Context<'_>) {
        let (stamp, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(stamp));
    }
}

/// One measurement of llbus calls through two gateways.
fn calls_through_gateways(plan: &Plan) -> Result<Histogram<u64>, String> {
    let (a, b) = peer_pair()?;
    let mut bus_a = Bus::builder();
    bus_a.stop_timeout(DRAIN_LIMIT);
    bus_a
        .actor("echo", |setup: &mut llbus::Setup<'_>| Echo {
            replies: setup.replies(&echo_service()),
        })
        .serves(&echo_service());
    let mut gateway_a = Gateway::builder();
    gateway_a.export_service_on(
        &mut bus_a,
        &echo_service(),
        llbus_zenoh::ServiceExport::new(),
    );
    let mut running_a = bus_a.start().map_err(|e| e.to_string())?;
    let gateway_a = gateway_a
        .start(&mut running_a, a)
        .map_err(|e| e.to_string())?;

    let mut bus_b = Bus::builder();
    bus_b.stop_timeout(DRAIN_LIMIT);
    let mut gateway_b = Gateway::builder();
    gateway_b.import_service_on(
        &mut bus_b,
        &echo_service(),
        llbus_zenoh::ServiceImport::new().timeout(MATCH_LIMIT),
    );
    let caller = bus_b.caller(&echo_service(), "app");
    let mut running_b = bus_b.start().map_err(|e| e.to_string())?;
    let mut caller = running_b.caller(caller).map_err(|e| e.to_string())?;
    let gateway_b = gateway_b
        .start(&mut running_b, b)
        .map_err(|e| e.to_string())?;
    let mut call = |n: u64| -> Result<(), String> {
        match caller.call(Stamp { seq: n, sent_ns: 0 }, MATCH_LIMIT) {
            Ok(reply) if reply.seq == n => Ok(()),
            Ok(reply) => Err(format!("the reply of call {} to call {n}", reply.seq)),
            Err(e) => Err(e.to_string()),
        }
    };
    let outcome = wait_answered(&mut call).and_then(|()| time_calls(plan, &mut call));
    drop(caller);
    let stopped_b = stop_and_join(running_b, "zenoh caller bus");
    gateway_b.close();
    let stopped_a = stop_and_join(running_a, "zenoh service bus");
    gateway_a.close();
    stopped_a?;
    stopped_b?;
    outcome
}
