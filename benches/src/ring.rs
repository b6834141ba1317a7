//! The `ring` suite: the llbus SPSC ring against other single-producer single-consumer
//! queues and channels, between two threads pinned to cores 0 and 1.
//!
//! Measured for every implementation, in one process, round after round (each round runs
//! every implementation once per measurement, in a fresh random order: all round trips, then
//! all single-item streams, then all batches; figures are medians over rounds, with their min
//! and max):
//! - round-trip latency (ping-pong through two queues, one each way): p50, p99, p99.9 and max
//!   of an HDR histogram of every round trip of a [`WINDOW`] after a [`WARMUP`], in ns,
//!   including one `Instant::now()` read;
//! - one-way throughput in messages per second over a [`WINDOW`] after a [`WARMUP`] of the same
//!   stream, sending one item at a time (received one at a time, except by the disruptor,
//!   whose documented consumer takes every published event in one poll);
//! - one-way throughput with batches of [`BATCH`] items, for the implementations with a batch
//!   API (the llbus ring's `push_slice`/`pop_batch`, rtrb's chunks, the disruptor's batch
//!   publish and poll); the others are listed as skipped.
//!
//! Implementations (`impl` names in the output):
//! - `llbus`: the llbus ring (`llbus::Ring`) with its defaults (the consumer frees a quarter
//!   ring at a time, or all it took once it has taken everything it knew of), spinning on
//!   `try_push`/`try_pop`;
//! - `llbus-slotted`: `llbus::SlotRing`, the ring whose cache lines carry their own header (a hop
//!   moves one cache line), with the same defaults and the same calls;
//! - `rtrb`: `rtrb::RingBuffer`, spinning on `push`/`pop`; batches with its chunk API as its
//!   docs show it (`push_partial_slice`, and `read_chunk` of what its cached index says is
//!   there, re-reading the producer's index only when that is less than a batch);
//! - `crossbeam-arrayqueue`: `crossbeam_queue::ArrayQueue` (MPMC), spinning;
//! - `crossbeam-channel-spin`: `crossbeam_channel::bounded`, spinning on `try_send`/`try_recv`;
//! - `crossbeam-channel`: the same channel with blocking `send`/`recv`;
//! - `std-mpsc`: `std::sync::mpsc::sync_channel` with blocking `send`/`recv`;
//! - `disruptor`: the `disruptor` crate's single-producer ring read with its `EventPoller`
//!   the way its README does (`poll()`: every event published so far, in one guard), spinning
//!   on `try_publish`/`poll` (batch: `try_batch_publish`, all or nothing);
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
    clock_cost_ns, clock_step_ns, find, human, run_suite, secs, short, Args, Bound, Collector,
    Pinning, Spin, Stuck, Target,
};

/// Slots in every queue.
pub const CAPACITY: usize = 1024;

/// Items per batch in the batch throughput case.
pub const BATCH: usize = 64;

/// Every measurement runs unrecorded this long first.
pub const WARMUP: Duration = Duration::from_millis(50);

/// Then it is recorded for this long: long enough that one preemption (a few ms on a shared
/// VM) moves a round's figure by a few % at most.
pub const WINDOW: Duration = Duration::from_millis(200);

/// Suite name in the output.
const SUITE: &str = "ring";

/// Sizes for one run of the suite.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    rtt: RttPlan,
    single: StreamPlan,
    batch: StreamPlan,
    /// No new round starts once this much time has gone, so that `all` stays under 4 minutes
    /// even on a loaded machine. Unlimited when `--rounds` is given.
    budget: Duration,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let hard_cap = Duration::from_secs(20);
        // NB: a round is 8 round trips and 9 streams of 0.25 s each, so 15 rounds keep the
        // whole `all` run near 2 minutes; `--quick` is a smoke test.
        let (rounds, warmup, window) = if args.quick {
            (2, Duration::from_millis(5), Duration::from_millis(20))
        } else {
            (15, WARMUP, WINDOW)
        };
        let stream = |batch| StreamPlan {
            batch,
            warmup,
            window,
            hard_cap,
        };
        Self {
            rounds: args.rounds.unwrap_or(rounds),
            rtt: RttPlan {
                warmup,
                window,
                hard_cap,
            },
            single: stream(None),
            batch: stream(Some(BATCH)),
            budget: match args.rounds {
                Some(_) => Duration::MAX,
                None => Duration::from_secs(90),
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
    let (ping_tx, echo_rx) = C::queue(CAPACITY);
    let (echo_tx, ping_rx) = C::queue(CAPACITY);
    let result = round_trip(pinning, (ping_tx, ping_rx), (echo_rx, echo_tx), plan.rtt);
    out.add_rtt(C::NAME, result.as_ref().map(|o| &o.histogram));
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
        Ok(o) => out.add(name, case, "msgs/s", o.per_sec),
        Err(e) => {
            eprintln!("ERROR: {name} {case}: {e}");
            out.note(name, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

type CaseFn = fn(usize, &Pinning, &Plan, &mut Collector);

/// Every implementation, in table order (each round runs them in a fresh random order).
const CONTENDERS: &[CaseFn] = &[
    run_case::<Llbus>,
    run_case::<Slotted>,
    run_case::<Rtrb>,
    run_case::<ArrayQueue>,
    run_case::<ChannelSpin>,
    run_case::<ChannelBlocking>,
    run_case::<StdMpsc>,
    run_case::<Disruptor>,
    run_case::<Floor>,
];

/// Their names, in the same order.
const NAMES: &[&str] = &[
    Llbus::NAME,
    Slotted::NAME,
    Rtrb::NAME,
    ArrayQueue::NAME,
    ChannelSpin::NAME,
    ChannelBlocking::NAME,
    StdMpsc::NAME,
    Disruptor::NAME,
    Floor::NAME,
];

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, pinning: &Pinning, seed: u64) -> Collector {
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
             plan: {} rounds in random order (seed {seed}); per round and impl: round trips \
             and streams of one item and of batches of {}, each {} of warm-up then {} \
             measured; capacity {}\n",
            pinning.describe(),
            clock_cost_ns(),
            clock_step,
            plan.rounds,
            BATCH,
            short(plan.rtt.warmup),
            short(plan.rtt.window),
            CAPACITY,
        ),
    );
    let (out, rounds_done, figures) = run_suite(
        args,
        SUITE,
        seed,
        PHASES,
        NAMES,
        (plan.rounds, plan.budget),
        &TARGETS,
        |out, phase, i| CONTENDERS[i](phase, pinning, &plan, out),
    );
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
            "ring: {rounds_done} rounds in {}; figures are medians over rounds (min..max)\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

/// The suite's targets, as ratios of figures of this run.
const TARGETS: [Target; 10] = [
    Target {
        what: "rtt p50 llbus-slotted / floor",
        num: ("llbus-slotted", "rtt_p50"),
        den: ("floor", "rtt_p50"),
        bound: Bound::RatioAtMost(1.15),
    },
    Target {
        what: "rtt p50 llbus-slotted / rtrb",
        num: ("llbus-slotted", "rtt_p50"),
        den: ("rtrb", "rtt_p50"),
        bound: Bound::RatioAtMost(0.9),
    },
    Target {
        what: "throughput single slotted / llbus",
        num: ("llbus-slotted", "throughput_single"),
        den: ("llbus", "throughput_single"),
        bound: Bound::RatioAtLeast(1.0),
    },
    Target {
        what: "throughput batch slotted / llbus",
        num: ("llbus-slotted", "throughput_batch"),
        den: ("llbus", "throughput_batch"),
        bound: Bound::RatioAtLeast(1.0),
    },
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
        what: "throughput batch llbus / rtrb (chunks)",
        num: ("llbus", "throughput_batch"),
        den: ("rtrb", "throughput_batch"),
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

/// The llbus ring with a header in each cache line of slots (`llbus::SlotRing`).
#[derive(Debug)]
struct Slotted;

impl Contender for Slotted {
    const NAME: &'static str = "llbus-slotted";
    const NO_BATCH: Option<&'static str> = None;
    type Tx = llbus::SlotProducer<u64>;
    type Rx = llbus::SlotConsumer<u64>;
    fn queue(capacity: usize) -> (Self::Tx, Self::Rx) {
        llbus::SlotRing::new(capacity)
    }
}

impl Sender for llbus::SlotProducer<u64> {
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

impl Receiver for llbus::SlotConsumer<u64> {
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
        // `read_chunk` re-reads the producer's index only when its cached one shows fewer than
        // `max`; with fewer ready it says how many, and those are taken (rtrb's docs).
        let chunk = match self.read_chunk(max) {
            Ok(chunk) => chunk,
            Err(rtrb::chunks::ChunkError::TooFewSlots(0)) => return 0,
            Err(rtrb::chunks::ChunkError::TooFewSlots(n)) => match self.read_chunk(n) {
                Ok(chunk) => chunk,
                Err(_) => return 0,
            },
        };
        let (first, second) = chunk.as_slices();
        first.iter().chain(second).for_each(|&v| f(v));
        let n = chunk.len();
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

/// Polling end of a disruptor, and whether it has seen the producer shut down.
struct DisruptorRx(
    disruptor::EventPoller<u64, disruptor::SingleProducerBarrier>,
    bool,
);

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
        (DisruptorTx(builder.build()), DisruptorRx(poller, false))
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
        // One event is in flight in a round trip: `poll` hands over exactly that one.
        let mut got = None;
        self.recv_some(spin, |v| got = Some(v))?;
        got.ok_or(Stuck)
    }

    #[inline]
    fn recv_some(&mut self, spin: &mut Spin, mut f: impl FnMut(u64)) -> Result<usize, Stuck> {
        loop {
            let n = self.recv_batch(usize::MAX, &mut f);
            if n > 0 {
                return Ok(n);
            }
            if self.1 {
                return Err(Stuck);
            }
            spin.tick()?;
        }
    }

    /// Everything published so far (the README's `poll`), not at most `max`: the disruptor's
    /// consumer takes what is there.
    #[inline]
    fn recv_batch(&mut self, _max: usize, mut f: impl FnMut(u64)) -> usize {
        match self.0.poll() {
            Ok(mut guard) => {
                let mut n = 0;
                for &v in &mut guard {
                    f(v);
                    n += 1;
                }
                n
            }
            Err(disruptor::Polling::NoEvents) => 0,
            Err(disruptor::Polling::Shutdown) => {
                self.1 = true;
                0
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(batch: Option<usize>) -> StreamPlan {
        StreamPlan {
            batch,
            warmup: Duration::from_millis(2),
            window: Duration::from_millis(10),
            hard_cap: Duration::from_secs(20),
        }
    }

    /// Streams through `C` one at a time and in batches (if it has them), and bounces round
    /// trips: every adapter delivers the sequence in order (or the driver reports corruption).
    fn exercise<C: Contender>() {
        let pinning = Pinning::disabled("test");
        if C::NO_STREAM.is_none() {
            let (tx, rx) = C::queue(CAPACITY);
            let o = stream(&pinning, tx, rx, plan(None)).expect(C::NAME);
            assert!(o.per_sec > 0.0, "{}: {o:?}", C::NAME);
            if C::NO_BATCH.is_none() {
                // A small ring, so batches wrap and fill it.
                let (tx, rx) = C::queue(2 * BATCH);
                let o = stream(&pinning, tx, rx, plan(Some(BATCH))).expect(C::NAME);
                assert!(o.per_sec > 0.0, "{}: {o:?}", C::NAME);
            }
        }
        let (ping_tx, echo_rx) = C::queue(CAPACITY);
        let (echo_tx, ping_rx) = C::queue(CAPACITY);
        let rtt = RttPlan {
            warmup: Duration::from_millis(2),
            window: Duration::from_millis(10),
            hard_cap: Duration::from_secs(20),
        };
        let o = round_trip(&pinning, (ping_tx, ping_rx), (echo_rx, echo_tx), rtt).expect(C::NAME);
        assert!(!o.histogram.is_empty(), "{}", C::NAME);
    }

    #[test]
    fn every_adapter_streams_in_order_and_round_trips() {
        exercise::<Llbus>();
        exercise::<Rtrb>();
        exercise::<Disruptor>();
        exercise::<ArrayQueue>();
        exercise::<ChannelSpin>();
        exercise::<ChannelBlocking>();
        exercise::<StdMpsc>();
        exercise::<Floor>();
    }

    #[test]
    fn rtrb_batches_take_what_is_there_when_less_than_asked() {
        let (mut tx, mut rx) = Rtrb::queue(16);
        assert_eq!(tx.send_batch(&[1, 2, 3]), 3);
        let mut got = Vec::new();
        assert_eq!(rx.recv_batch(8, |v| got.push(v)), 3);
        assert_eq!(rx.recv_batch(8, |v| got.push(v)), 0);
        assert_eq!(got, [1, 2, 3]);
    }
}
