//! The `ring` suite: the llbus SPSC ring against other single-producer single-consumer
//! queues and channels, between two threads pinned to cores 0 and 1.
//!
//! Measured for every implementation, in one process, round after round (each round runs
//! every implementation once, in rotating order, one measurement at a time: all round trips,
//! then all single-item streams, then all batches; figures are medians over rounds):
//! - round-trip latency (ping-pong through two queues, one each way): p50, p99, p99.9 and max
//!   of an HDR histogram of every round trip, in ns, including one `Instant::now()` read;
//! - one-way throughput in messages per second, sending and receiving one item at a time;
//! - one-way throughput with batches of [`BATCH`] items, for the implementations with a batch
//!   API (the llbus ring's `push_slice`/`pop_batch`, rtrb's chunks, the disruptor's batch
//!   publish and poll); the others are listed as skipped.
//!
//! Implementations (`impl` names in the output):
//! - `llbus`: the llbus ring (`llbus::Ring`), spinning on `try_push`/`try_pop`;
//! - `rtrb`: `rtrb::RingBuffer`, spinning on `push`/`pop`;
//! - `crossbeam-arrayqueue`: `crossbeam_queue::ArrayQueue` (MPMC), spinning;
//! - `crossbeam-channel-spin`: `crossbeam_channel::bounded`, spinning on `try_send`/`try_recv`;
//! - `crossbeam-channel`: the same channel with blocking `send`/`recv`;
//! - `std-mpsc`: `std::sync::mpsc::sync_channel` with blocking `send`/`recv`;
//! - `disruptor`: the `disruptor` crate's single-producer ring read with its `EventPoller`,
//!   spinning on `try_publish`/`poll_take` (batch: `try_batch_publish`, all or nothing);
//! - `floor`: the physical floor, one `CachePadded<AtomicU64>` each way carrying a counter
//!   (a single slot, not a queue: round trip only).
//!
//! Every queue holds [`CAPACITY`] `u64` values. Every spinning wait executes one
//! `spin_loop` hint per failed attempt, the same for all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::drive::{round_trip, stream, Receiver, RttPlan, Sender, StreamPlan};
use crate::harness::{
    clock_cost_ns, clock_step_ns, find, human, print_figures, render_targets, run_rounds, secs,
    Args, Bound, Collector, Percentiles, Pinning, Spin, Stuck, Target,
};

/// Slots in every queue.
pub const CAPACITY: usize = 1024;

/// Items per batch in the batch throughput case.
pub const BATCH: usize = 64;

/// Suite name in the output.
const SUITE: &str = "ring";

/// Sizes for one run of the suite.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    rtt: RttPlan,
    single: StreamPlan,
    batch: StreamPlan,
    /// No new round starts once this much time has gone, so the suite stays under 3 minutes
    /// even on a loaded machine. Unlimited when `--rounds` is given.
    budget: Duration,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let hard_cap = Duration::from_secs(20);
        // NB: sized so that a default run took 27-71 s on the 2-vCPU VM, idle to loaded (only
        // std-mpsc's round trip hits its cap when idle); the caps and the budget bound the rest.
        let (rounds, warmup, samples, items, rtt_cap, stream_cap) = if args.quick {
            (3, 1_000, 10_000, 200_000, 200, 100)
        } else {
            (7, 20_000, 200_000, 10_000_000, 1000, 500)
        };
        let (rtt_cap, stream_cap) = (
            Duration::from_millis(rtt_cap),
            Duration::from_millis(stream_cap),
        );
        Self {
            rounds: args.rounds.unwrap_or(rounds),
            rtt: RttPlan {
                warmup,
                samples,
                soft_cap: rtt_cap,
                hard_cap,
            },
            single: StreamPlan {
                items,
                batch: None,
                soft_cap: stream_cap,
                hard_cap,
            },
            batch: StreamPlan {
                items: 2 * items,
                batch: Some(BATCH),
                soft_cap: stream_cap,
                hard_cap,
            },
            budget: match args.rounds {
                Some(_) => Duration::MAX,
                None => Duration::from_secs(150),
            },
        }
    }
}

/// An implementation under test: how to make one queue, and which cases it can run.
trait Contender {
    /// `impl` name in the output.
    const NAME: &'static str;
    /// Why it cannot carry a stream of items (no throughput cases), if it cannot.
    const NO_STREAM: Option<&'static str> = None;
    /// Why it has no batch case, if it has none.
    const NO_BATCH: Option<&'static str>;
    /// Sending end.
    type Tx: Sender;
    /// Receiving end.
    type Rx: Receiver;
    /// A queue holding `capacity` items.
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx);
}

const NO_BATCH_API: &str = "skipped: no batch API";

/// The three measurements, run as phases of a round: all implementations run one phase
/// before the next starts, so that two implementations' figures of one case are taken close
/// together in time (the machine's speed shifts over seconds).
const PHASES: usize = 3;

/// Runs measurement `phase` (round trip, single throughput, batch throughput) of `C` once and
/// records its results for this round.
fn run_case<C: Contender>(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    match phase {
        0 => round_trip_case::<C>(pinning, plan, out),
        1 => stream_case::<C>("throughput_single", plan.single, None, pinning, out),
        _ => stream_case::<C>("throughput_batch", plan.batch, C::NO_BATCH, pinning, out),
    }
}

/// The round-trip phase.
fn round_trip_case<C: Contender>(pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let name = C::NAME;
    let (ping_tx, echo_rx) = C::queue(CAPACITY);
    let (echo_tx, ping_rx) = C::queue(CAPACITY);
    let cases = ["rtt_p50", "rtt_p99", "rtt_p999", "rtt_max"];
    match round_trip(pinning, (ping_tx, ping_rx), (echo_rx, echo_tx), plan.rtt) {
        Ok(o) if o.histogram.is_empty() => out.note(name, "rtt_p50", "ns", "no samples"),
        Ok(o) => {
            let p = Percentiles::of(&o.histogram);
            for (case, v) in cases.iter().zip([p.p50, p.p99, p.p999, p.max]) {
                out.add(name, case, "ns", v as f64);
            }
            if o.capped {
                // One footnote for the four figures of the one histogram.
                let n = o.histogram.len();
                out.cut_short(name, "rtt_p50", "ns", n, "round trips");
            }
        }
        Err(e) => {
            eprintln!("ERROR: {name} round trip: {e}");
            for case in cases {
                out.note(name, case, "ns", format!("FAILED: {e}"));
            }
        }
    }
}

/// A throughput phase; `skip` says why `C` has no such case, if it has none.
fn stream_case<C: Contender>(
    case: &'static str,
    plan: StreamPlan,
    skip: Option<&'static str>,
    pinning: &Pinning,
    out: &mut Collector,
) {
    let name = C::NAME;
    if let Some(why) = C::NO_STREAM.or(skip) {
        out.note(name, case, "msgs/s", why);
        return;
    }
    let (tx, rx) = C::queue(CAPACITY);
    match stream(pinning, tx, rx, plan) {
        Ok(o) => {
            out.add(name, case, "msgs/s", o.per_sec);
            if o.capped {
                out.cut_short(name, case, "msgs/s", o.items, "items");
            }
        }
        Err(e) => {
            eprintln!("ERROR: {name} {case}: {e}");
            out.note(name, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

type CaseFn = fn(usize, &Pinning, &Plan, &mut Collector);

/// Every implementation, in table order. The rotation keeps cyclic neighbours together, so
/// the floor runs just before llbus, and rtrb just after it, in every round but the first.
const CONTENDERS: &[CaseFn] = &[
    run_case::<Llbus>,
    run_case::<Rtrb>,
    run_case::<ArrayQueue>,
    run_case::<ChannelSpin>,
    run_case::<ChannelBlocking>,
    run_case::<StdMpsc>,
    run_case::<Disruptor>,
    run_case::<Floor>,
];

/// Runs the suite and prints its figures.
pub fn run(args: &Args, pinning: &Pinning) {
    let plan = Plan::new(args);
    let started = Instant::now();
    let clock_step = clock_step_ns();
    human(
        args,
        &format!(
            "== ring: SPSC round trip and throughput ==\n\
             threads: {}\n\
             clock: Instant::now() costs {:.0} ns, included once in every round trip; \
             it advances in steps of about {} ns\n\
             plan: {} rounds; per round and impl: {} round trips (+{} warm-up), {} items \
             single, {} items in batches of {}; capacity {}; time caps {} per round trip case, {} per throughput case\n",
            pinning.describe(),
            clock_cost_ns(),
            clock_step,
            plan.rounds,
            plan.rtt.samples,
            plan.rtt.warmup,
            plan.single.items,
            plan.batch.items,
            BATCH,
            CAPACITY,
            secs(plan.rtt.soft_cap),
            secs(plan.single.soft_cap),
        ),
    );
    let mut out = Collector::new(SUITE, args.verbose);
    let rounds_done = run_rounds(
        &mut out,
        PHASES,
        CONTENDERS.len(),
        plan.rounds,
        plan.budget,
        |out, phase, i| CONTENDERS[i](phase, pinning, &plan, out),
    );
    let figures = out.figures();
    print_figures(args, &figures);
    human(args, &render_targets(&TARGETS, &figures, &out));
    if let Some(floor) = find(&figures, "floor", "rtt_p50").filter(|f| *f > 0.0) {
        human(
            args,
            &format!(
                "  (one clock step, {clock_step} ns, is {:.1}% of the floor's p50 round trip)\n",
                100.0 * clock_step as f64 / floor
            ),
        );
    }
    human(
        args,
        &format!(
            "ring: {rounds_done} rounds in {}; figures are medians over rounds\n\n",
            secs(started.elapsed())
        ),
    );
}

/// The targets, as ratios of figures of this run.
const TARGETS: [Target; 5] = [
    Target {
        what: "rtt p50 llbus / floor",
        num: ("llbus", "rtt_p50"),
        den: ("floor", "rtt_p50"),
        bound: Bound::RatioAtMost(1.05),
    },
    Target {
        what: "rtt p50 llbus / rtrb",
        num: ("llbus", "rtt_p50"),
        den: ("rtrb", "rtt_p50"),
        bound: Bound::RatioAtMost(1.0),
    },
    Target {
        what: "rtt p99.9 llbus / rtrb",
        num: ("llbus", "rtt_p999"),
        den: ("rtrb", "rtt_p999"),
        bound: Bound::RatioAtMost(1.0),
    },
    Target {
        what: "throughput single llbus / rtrb",
        num: ("llbus", "throughput_single"),
        den: ("rtrb", "throughput_single"),
        bound: Bound::RatioAtLeast(1.0),
    },
    Target {
        what: "throughput batch llbus / rtrb single",
        num: ("llbus", "throughput_batch"),
        den: ("rtrb", "throughput_single"),
        bound: Bound::RatioAtLeast(1.5),
    },
];

// ---------------------------------------------------------------------------------------------
// Adapters. Spinning waits call `spin.tick()` after each failed attempt.

/// The llbus SPSC ring.
#[derive(Debug)]
struct Llbus;

impl Contender for Llbus {
    const NAME: &'static str = "llbus";
    const NO_BATCH: Option<&'static str> = None;
    type Tx = llbus::Producer<u64>;
    type Rx = llbus::Consumer<u64>;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        llbus::Ring::new(capacity)
    }
}

impl Sender for llbus::Producer<u64> {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        while self.try_push(v).is_err() {
            spin.tick()?;
        }
        Ok(())
    }

    #[inline]
    fn send_batch(&mut self, items: &[u64]) -> usize {
        self.push_slice(items)
    }
}

impl Receiver for llbus::Consumer<u64> {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            if let Some(v) = self.try_pop() {
                return Ok(v);
            }
            spin.tick()?;
        }
    }

    #[inline]
    fn recv_batch(&mut self, max: usize, f: impl FnMut(u64)) -> usize {
        self.pop_batch(max, f)
    }
}

/// rtrb's ring buffer.
#[derive(Debug)]
struct Rtrb;

impl Contender for Rtrb {
    const NAME: &'static str = "rtrb";
    const NO_BATCH: Option<&'static str> = None;
    type Tx = rtrb::Producer<u64>;
    type Rx = rtrb::Consumer<u64>;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        rtrb::RingBuffer::new(capacity)
    }
}

impl Sender for rtrb::Producer<u64> {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        while self.push(v).is_err() {
            spin.tick()?;
        }
        Ok(())
    }

    #[inline]
    fn send_batch(&mut self, items: &[u64]) -> usize {
        // One `write_chunk_uninit` and one commit for the part that fits.
        self.push_partial_slice(items).0.len()
    }
}

impl Receiver for rtrb::Consumer<u64> {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            if let Ok(v) = self.pop() {
                return Ok(v);
            }
            spin.tick()?;
        }
    }

    #[inline]
    fn recv_batch(&mut self, max: usize, mut f: impl FnMut(u64)) -> usize {
        let n = self.slots().min(max);
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = self.read_chunk(n) else {
            return 0;
        };
        let (first, second) = chunk.as_slices();
        first.iter().chain(second).for_each(|&v| f(v));
        chunk.commit_all();
        n
    }
}

/// crossbeam's bounded MPMC array queue, shared by both threads.
#[derive(Debug)]
struct ArrayQueue;

/// One end of a shared [`crossbeam_queue::ArrayQueue`].
#[derive(Debug)]
struct SharedQueue(Arc<crossbeam_queue::ArrayQueue<u64>>);

impl Contender for ArrayQueue {
    const NAME: &'static str = "crossbeam-arrayqueue";
    const NO_BATCH: Option<&'static str> = Some(NO_BATCH_API);
    type Tx = SharedQueue;
    type Rx = SharedQueue;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        let q = Arc::new(crossbeam_queue::ArrayQueue::new(capacity));
        (SharedQueue(Arc::clone(&q)), SharedQueue(q))
    }
}

impl Sender for SharedQueue {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        while self.0.push(v).is_err() {
            spin.tick()?;
        }
        Ok(())
    }
}

impl Receiver for SharedQueue {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            if let Some(v) = self.0.pop() {
                return Ok(v);
            }
            spin.tick()?;
        }
    }
}

/// crossbeam-channel's bounded channel, polled with `try_send`/`try_recv`.
#[derive(Debug)]
struct ChannelSpin;

/// Sending end of a crossbeam channel, polled.
#[derive(Debug)]
struct SpinTx(crossbeam_channel::Sender<u64>);

/// Receiving end of a crossbeam channel, polled.
#[derive(Debug)]
struct SpinRx(crossbeam_channel::Receiver<u64>);

impl Contender for ChannelSpin {
    const NAME: &'static str = "crossbeam-channel-spin";
    const NO_BATCH: Option<&'static str> = Some(NO_BATCH_API);
    type Tx = SpinTx;
    type Rx = SpinRx;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        (SpinTx(tx), SpinRx(rx))
    }
}

impl Sender for SpinTx {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        loop {
            match self.0.try_send(v) {
                Ok(()) => return Ok(()),
                Err(crossbeam_channel::TrySendError::Full(_)) => spin.tick()?,
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => return Err(Stuck),
            }
        }
    }
}

impl Receiver for SpinRx {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            match self.0.try_recv() {
                Ok(v) => return Ok(v),
                Err(crossbeam_channel::TryRecvError::Empty) => spin.tick()?,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Err(Stuck),
            }
        }
    }
}

/// crossbeam-channel's bounded channel with blocking `send`/`recv`.
#[derive(Debug)]
struct ChannelBlocking;

impl Contender for ChannelBlocking {
    const NAME: &'static str = "crossbeam-channel";
    const NO_BATCH: Option<&'static str> = Some(NO_BATCH_API);
    type Tx = crossbeam_channel::Sender<u64>;
    type Rx = crossbeam_channel::Receiver<u64>;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        crossbeam_channel::bounded(capacity)
    }
}

// Blocking ends ignore `spin`: they return when the other side sends or drops its end, and
// every other side's wait is bounded (see `drive`).
impl Sender for crossbeam_channel::Sender<u64> {
    #[inline]
    fn send(&mut self, v: u64, _: &mut Spin) -> Result<(), Stuck> {
        crossbeam_channel::Sender::send(self, v).map_err(|_| Stuck)
    }
}

impl Receiver for crossbeam_channel::Receiver<u64> {
    #[inline]
    fn recv(&mut self, _: &mut Spin) -> Result<u64, Stuck> {
        crossbeam_channel::Receiver::recv(self).map_err(|_| Stuck)
    }
}

/// `std::sync::mpsc::sync_channel` with blocking `send`/`recv`.
#[derive(Debug)]
struct StdMpsc;

impl Contender for StdMpsc {
    const NAME: &'static str = "std-mpsc";
    const NO_BATCH: Option<&'static str> = Some(NO_BATCH_API);
    type Tx = std::sync::mpsc::SyncSender<u64>;
    type Rx = std::sync::mpsc::Receiver<u64>;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        std::sync::mpsc::sync_channel(capacity)
    }
}

impl Sender for std::sync::mpsc::SyncSender<u64> {
    #[inline]
    fn send(&mut self, v: u64, _: &mut Spin) -> Result<(), Stuck> {
        std::sync::mpsc::SyncSender::send(self, v).map_err(|_| Stuck)
    }
}

impl Receiver for std::sync::mpsc::Receiver<u64> {
    #[inline]
    fn recv(&mut self, _: &mut Spin) -> Result<u64, Stuck> {
        std::sync::mpsc::Receiver::recv(self).map_err(|_| Stuck)
    }
}

/// The disruptor crate: single producer, one `EventPoller` on the caller's thread.
#[derive(Debug)]
struct Disruptor;

/// Publishing end of a disruptor.
struct DisruptorTx(disruptor::SingleProducer<u64, disruptor::SingleConsumerBarrier>);

/// Polling end of a disruptor.
struct DisruptorRx(disruptor::EventPoller<u64, disruptor::SingleProducerBarrier>);

impl std::fmt::Debug for DisruptorTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DisruptorTx")
    }
}

impl std::fmt::Debug for DisruptorRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DisruptorRx")
    }
}

impl Contender for Disruptor {
    const NAME: &'static str = "disruptor";
    const NO_BATCH: Option<&'static str> = None;
    type Tx = DisruptorTx;
    type Rx = DisruptorRx;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        let (poller, builder) =
            disruptor::build_single_producer(capacity, || 0u64, disruptor::BusySpin).event_poller();
        (DisruptorTx(builder.build()), DisruptorRx(poller))
    }
}

impl Sender for DisruptorTx {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        use disruptor::Producer as _;
        while self.0.try_publish(|slot| *slot = v).is_err() {
            spin.tick()?;
        }
        Ok(())
    }

    #[inline]
    fn send_batch(&mut self, items: &[u64]) -> usize {
        use disruptor::Producer as _;
        // All or nothing: the disruptor claims exactly `n` slots or none.
        let published = self.0.try_batch_publish(items.len(), |slots| {
            slots.zip(items).for_each(|(slot, &v)| *slot = v);
        });
        if published.is_ok() {
            items.len()
        } else {
            0
        }
    }
}

impl Receiver for DisruptorRx {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            match self.0.poll_take(1) {
                Ok(mut guard) => {
                    if let Some(&v) = (&mut guard).next() {
                        return Ok(v);
                    }
                }
                Err(disruptor::Polling::NoEvents) => {}
                Err(disruptor::Polling::Shutdown) => return Err(Stuck),
            }
            spin.tick()?;
        }
    }

    #[inline]
    fn recv_batch(&mut self, max: usize, mut f: impl FnMut(u64)) -> usize {
        match self.0.poll_take(max as u64) {
            Ok(mut guard) => {
                let mut n = 0;
                for &v in &mut guard {
                    f(v);
                    n += 1;
                }
                n
            }
            Err(_) => 0,
        }
    }
}

/// The physical floor: one cache-padded atomic per direction carrying a counter.
#[derive(Debug)]
struct Floor;

/// Writes the next counter value into the shared line.
#[derive(Debug)]
struct FloorTx(Arc<CachePadded<AtomicU64>>);

/// Waits for the shared line to hold a value it has not seen.
#[derive(Debug)]
struct FloorRx {
    line: Arc<CachePadded<AtomicU64>>,
    last: u64,
}

impl Contender for Floor {
    const NAME: &'static str = "floor";
    const NO_STREAM: Option<&'static str> =
        Some("skipped: a single slot, not a queue (round trip only)");
    const NO_BATCH: Option<&'static str> = None;
    type Tx = FloorTx;
    type Rx = FloorRx;
    fn queue(_capacity: usize) -> (Self::Tx, Self::Rx) {
        let line = Arc::new(CachePadded::new(AtomicU64::new(0)));
        (FloorTx(Arc::clone(&line)), FloorRx { line, last: 0 })
    }
}

impl Sender for FloorTx {
    #[inline]
    fn send(&mut self, v: u64, _: &mut Spin) -> Result<(), Stuck> {
        // Overwrites: correct only with one value in flight, as in a round trip.
        self.0.store(v, Ordering::Release);
        Ok(())
    }
}

impl Receiver for FloorRx {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            let v = self.line.load(Ordering::Acquire);
            if v != self.last {
                self.last = v;
                return Ok(v);
            }
            spin.tick()?;
        }
    }
}
