//! The two measurements every suite makes, generic over the queue or channel under test:
//! a round trip (ping-pong) and a one-way stream (throughput).
//!
//! A suite wraps each implementation's two ends in [`Sender`] and [`Receiver`]; the drivers
//! here are generic over them, so each implementation gets its own monomorphised, inlined
//! loop and they all run exactly the same code around the queue calls.
//!
//! - [`round_trip`]: thread A (core 0) takes a timestamp, sends a counter to thread B
//!   (core 1) over the first queue, B echoes it over the second, A reads the clock again and
//!   records the difference in an HDR histogram made before the loop. Round trips during the
//!   first `warmup` are not recorded; then every round trip of the next `window` is. A checks
//!   that the echo is the value it sent.
//! - [`stream`]: thread A sends `0, 1, 2, ...` one at a time (or in batches) until told to stop,
//!   thread B receives them and checks the sequence. B reads the clock every [`CLOCK_EVERY`]
//!   items: the first read past `warmup` opens the measured window, the first read `window`
//!   later closes it and tells A to stop. Throughput is the items received inside the window
//!   divided by its length, so every implementation is measured over the same time span
//!   (long enough that one preemption of a few ms moves a figure by a few % at most),
//!   whatever its speed, and after the same warm-up.
//!
//! Each thread holds its queue ends in [`CachePadded`] cells, so no end shares a cache line with
//! anything else: otherwise where an end's fields land (fields written on every operation, next
//! to the other thread's captures or the loop's locals) depends on each implementation's sizes,
//! and that alone tilts one queue's round trip against another's (docs/PERFORMANCE.md, "The
//! ring: lazy frees").
//!
//! Every wait is bounded by a hard deadline ([`Spin`]); blocking receives are bounded because
//! the other side either sends or, once it gives up, drops its end, which disconnects the
//! channel.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::harness::{latency_histogram, run_pair, spin_until, Args, Pinning, Spin, Stuck};

/// Sent to make the receiving thread stop before the planned count; never a data value.
pub const STOP: u64 = u64::MAX;

/// The sending end of a queue under test.
pub trait Sender: Send {
    /// Sends `v`, waiting (spinning with `spin`, or blocking) while the queue is full.
    ///
    /// # Errors
    ///
    /// [`Stuck`] when `spin` runs out or the channel is disconnected.
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck>;

    /// Sends as many leading items of `items` as fit, with one publication, and returns how
    /// many. Only called on implementations that have a batch API.
    fn send_batch(&mut self, items: &[u64]) -> usize {
        let _ = items;
        unreachable!("send_batch called on an implementation without a batch API")
    }
}

/// The receiving end of a queue under test.
pub trait Receiver: Send {
    /// Receives one value, waiting (spinning with `spin`, or blocking) while the queue is empty.
    ///
    /// # Errors
    ///
    /// [`Stuck`] when `spin` runs out or the channel is disconnected.
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck>;

    /// Receives at least one value, waiting (spinning with `spin`, or blocking) while the queue
    /// is empty, and passes each to `f`: the way the implementation's own documentation has a
    /// consumer take one-at-a-time traffic. One [`recv`](Self::recv) unless overridden (the
    /// disruptor's consumer takes everything published so far in one poll).
    ///
    /// # Errors
    ///
    /// [`Stuck`] when `spin` runs out or the channel is disconnected.
    #[inline]
    fn recv_some(&mut self, spin: &mut Spin, mut f: impl FnMut(u64)) -> Result<usize, Stuck> {
        f(self.recv(spin)?);
        Ok(1)
    }

    /// Passes up to `max` available values to `f`, releasing them with one store, and returns
    /// how many (0 when empty). Only called on implementations that have a batch API.
    fn recv_batch(&mut self, max: usize, f: impl FnMut(u64)) -> usize {
        let _ = (max, f);
        unreachable!("recv_batch called on an implementation without a batch API")
    }
}

/// Why a measurement failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A thread waited past the hard deadline.
    Stuck(&'static str),
    /// A value arrived out of order or altered.
    Corrupt {
        /// Which thread saw it.
        side: &'static str,
        /// What it expected.
        expected: u64,
        /// What it got.
        got: u64,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stuck(side) => write!(f, "{side}: {Stuck}"),
            Self::Corrupt {
                side,
                expected,
                got,
            } => write!(f, "{side}: expected value {expected}, received {got}"),
        }
    }
}

/// Time limits of one round trip measurement.
#[derive(Debug, Clone, Copy)]
pub struct RttPlan {
    /// Round trips run first for this long and not recorded.
    pub warmup: Duration,
    /// Then every round trip is recorded for this long.
    pub window: Duration,
    /// Give up with [`Failure::Stuck`] after this long.
    pub hard_cap: Duration,
}

/// One run's sizes, shared by the suites that measure in windows: how many rounds, each
/// measurement's warm-up, window and hard cap (`--quick` shrinks them to a smoke test), and the
/// time after which no new round starts (unlimited when `--rounds` is given).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub rounds: usize,
    /// The round trips' warm-up, window and cap (the same as the streams').
    pub rtt: RttPlan,
    pub warmup: Duration,
    pub window: Duration,
    pub hard_cap: Duration,
    pub budget: Duration,
}

impl Plan {
    /// `rounds`, `warmup`, `window` and `budget` are the suite's own full-run sizes.
    pub fn new(
        args: &Args,
        rounds: usize,
        warmup: Duration,
        window: Duration,
        budget: Duration,
    ) -> Self {
        let hard_cap = Duration::from_secs(20);
        let (rounds, warmup, window) = if args.quick {
            (2, Duration::from_millis(5), Duration::from_millis(20))
        } else {
            (rounds, warmup, window)
        };
        Plan {
            rounds: args.rounds.unwrap_or(rounds),
            rtt: RttPlan {
                warmup,
                window,
                hard_cap,
            },
            warmup,
            window,
            hard_cap,
            budget: match args.rounds {
                Some(_) => Duration::MAX,
                None => budget,
            },
        }
    }

    /// A stream of single items (`batch` None) or of batches, with this plan's windows.
    pub fn stream(&self, batch: Option<usize>) -> StreamPlan {
        StreamPlan {
            batch,
            warmup: self.warmup,
            window: self.window,
            hard_cap: self.hard_cap,
        }
    }
}

/// What a round trip measurement produced.
#[derive(Debug)]
pub struct RttOutcome {
    /// Round-trip times in ns, one per sample.
    pub histogram: Histogram<u64>,
}

/// Two threads start together: each calls this, and both go once both have.
fn start_together(ready: &AtomicUsize, deadline: Instant) -> Result<(), Stuck> {
    ready.fetch_add(1, Ordering::AcqRel);
    spin_until(deadline, || ready.load(Ordering::Acquire) >= 2)
}

/// Measures round trips: see the module docs. `ping` is thread A's pair (send to B, receive
/// from B), `echo` is thread B's pair (receive from A, send to A).
///
/// # Errors
///
/// A [`Failure`] if a thread got stuck or saw a wrong value.
pub fn round_trip<AT, AR, BR, BT>(
    pinning: &Pinning,
    ping: (AT, AR),
    echo: (BR, BT),
    plan: RttPlan,
) -> Result<RttOutcome, Failure>
where
    AT: Sender,
    AR: Receiver,
    BR: Receiver,
    BT: Sender,
{
    let start = Instant::now();
    let hard = start + plan.hard_cap;
    let ready = AtomicUsize::new(0);
    let (a, b) = run_pair(
        pinning,
        || -> Result<RttOutcome, Failure> {
            let (tx, rx) = ping;
            let (mut tx, mut rx) = (CachePadded::new(tx), CachePadded::new(rx));
            let mut histogram = latency_histogram();
            let mut spin = Spin::until(hard);
            start_together(&ready, hard).map_err(|_| Failure::Stuck("ping thread at start"))?;
            let stuck = |_| Failure::Stuck("ping thread");
            let corrupt = |expected, got| Failure::Corrupt {
                side: "ping thread",
                expected,
                got,
            };
            // Values start at 1: the floor's one-slot "queue" reads 0 as empty.
            let mut i = 0u64;
            let warm_end = Instant::now() + plan.warmup;
            let mut window_end = None;
            loop {
                i += 1;
                let t0 = Instant::now();
                tx.send(i, &mut spin).map_err(stuck)?;
                let v = rx.recv(&mut spin).map_err(stuck)?;
                let t1 = Instant::now();
                if v != i {
                    return Err(corrupt(i, v));
                }
                match window_end {
                    Some(end) => {
                        histogram
                            .saturating_record(t1.saturating_duration_since(t0).as_nanos() as u64);
                        if t1 >= end {
                            break;
                        }
                    }
                    None if t1 >= warm_end => window_end = Some(t1 + plan.window),
                    None => {}
                }
            }
            tx.send(STOP, &mut spin).map_err(stuck)?;
            Ok(RttOutcome { histogram })
        },
        || -> Result<(), Failure> {
            let (rx, tx) = echo;
            let (mut rx, mut tx) = (CachePadded::new(rx), CachePadded::new(tx));
            let mut spin = Spin::until(hard);
            start_together(&ready, hard).map_err(|_| Failure::Stuck("echo thread at start"))?;
            let stuck = |_| Failure::Stuck("echo thread");
            loop {
                let v = rx.recv(&mut spin).map_err(stuck)?;
                if v == STOP {
                    return Ok(());
                }
                tx.send(v, &mut spin).map_err(stuck)?;
            }
        },
    );
    // The ping side's error is the cause when both fail.
    let outcome = a?;
    b?;
    Ok(outcome)
}

/// The receiving thread reads the clock once per this many items.
pub const CLOCK_EVERY: u64 = 4096;

/// Sizes and time limits of one stream measurement.
#[derive(Debug, Clone, Copy)]
pub struct StreamPlan {
    /// Items per batch; `None` sends one at a time.
    pub batch: Option<usize>,
    /// Items flow for this long before the window opens.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
    /// Give up with [`Failure::Stuck`] after this long.
    pub hard_cap: Duration,
}

/// What a stream measurement produced.
#[derive(Debug, Clone, Copy)]
pub struct StreamOutcome {
    /// Items received per second inside the window.
    pub per_sec: f64,
}

/// The receiving side's clock: opens the window after the warm-up and closes it a window
/// later, reading the clock only when the count passed another [`CLOCK_EVERY`] items.
#[derive(Debug)]
struct Windowed {
    warm_end: Instant,
    window: Duration,
    next_check: u64,
    opened: Option<(Instant, u64)>,
    closed: Option<(Instant, u64)>,
}

impl Windowed {
    fn new(plan: &StreamPlan) -> Self {
        Self {
            warm_end: Instant::now() + plan.warmup,
            window: plan.window,
            next_check: CLOCK_EVERY,
            opened: None,
            closed: None,
        }
    }

    /// Notes that `received` items arrived; true once the window has closed.
    #[inline]
    fn at(&mut self, received: u64) -> bool {
        if received < self.next_check {
            return false;
        }
        self.next_check = received + CLOCK_EVERY;
        let now = Instant::now();
        match self.opened {
            None if now >= self.warm_end => self.opened = Some((now, received)),
            Some((t0, _)) if now >= t0 + self.window => {
                self.closed = Some((now, received));
                return true;
            }
            _ => {}
        }
        false
    }

    fn outcome(&self) -> Option<StreamOutcome> {
        let ((t0, n0), (t1, n1)) = (self.opened?, self.closed?);
        let secs = t1.saturating_duration_since(t0).as_secs_f64();
        let items = n1 - n0;
        Some(StreamOutcome {
            per_sec: if secs > 0.0 {
                items as f64 / secs
            } else {
                f64::NAN
            },
        })
    }
}

/// The receiving side's check of the sequence `0, 1, 2, ...` ended by [`STOP`].
#[derive(Debug, Default)]
struct Sequence {
    expected: u64,
    done: bool,
    /// The first wrong value, and what was expected instead.
    bad: Option<(u64, u64)>,
}

impl Sequence {
    #[inline(always)]
    fn see(&mut self, v: u64) {
        if v == self.expected {
            self.expected += 1;
        } else if v == STOP {
            self.done = true;
        } else if self.bad.is_none() {
            self.bad = Some((self.expected, v));
        }
    }
}

/// Measures one-way throughput: see the module docs.
///
/// # Errors
///
/// A [`Failure`] if a thread got stuck or saw a wrong value.
pub fn stream<T: Sender, R: Receiver>(
    pinning: &Pinning,
    tx: T,
    rx: R,
    plan: StreamPlan,
) -> Result<StreamOutcome, Failure> {
    let start = Instant::now();
    let hard = start + plan.hard_cap;
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (a, b) = run_pair(
        pinning,
        || -> Result<(), Failure> {
            let mut tx = CachePadded::new(tx);
            start_together(&ready, hard).map_err(|_| Failure::Stuck("sending thread at start"))?;
            stream_send(&mut *tx, &plan, hard, || stop.load(Ordering::Relaxed))
        },
        || -> Result<Option<StreamOutcome>, Failure> {
            let mut rx = CachePadded::new(rx);
            start_together(&ready, hard)
                .map_err(|_| Failure::Stuck("receiving thread at start"))?;
            stream_receive(&mut *rx, &plan, hard, || {
                stop.store(true, Ordering::Relaxed)
            })
        },
    );
    a?;
    b?.ok_or(Failure::Stuck("receiving thread: the window never closed"))
}

/// The sending half of [`stream`]: sends `0, 1, 2, ...` one at a time or in batches until
/// `stop()` says the receiver closed its window (asked once per [`CLOCK_EVERY`] items, or per
/// 64 batches), then [`STOP`]. Public so that a stream whose receiver lives in another process
/// runs this very loop (the `ipc` suite).
///
/// # Errors
///
/// [`Failure::Stuck`] past `hard`.
#[inline]
pub fn stream_send<T: Sender>(
    tx: &mut T,
    plan: &StreamPlan,
    hard: Instant,
    mut stop: impl FnMut() -> bool,
) -> Result<(), Failure> {
    let mut spin = Spin::until(hard);
    let stuck = |_| Failure::Stuck("sending thread");
    let mut next = 0u64;
    match plan.batch {
        None => loop {
            for _ in 0..CLOCK_EVERY {
                tx.send(next, &mut spin).map_err(stuck)?;
                next += 1;
            }
            if stop() {
                break;
            }
        },
        Some(size) => {
            let mut buf = vec![0u64; size];
            let mut batches = 0u64;
            loop {
                for (slot, v) in buf.iter_mut().zip(next..) {
                    *slot = v;
                }
                let mut off = 0;
                while off < size {
                    let k = tx.send_batch(&buf[off..]);
                    if k == 0 {
                        spin.tick().map_err(stuck)?;
                    }
                    off += k;
                }
                next += size as u64;
                batches += 1;
                if batches % 64 == 0 && stop() {
                    break;
                }
            }
        }
    }
    tx.send(STOP, &mut spin).map_err(stuck)
}

/// The receiving half of [`stream`]: receives and checks the sequence until [`STOP`], timing
/// the window ([`Windowed`]) and calling `closed()` once when it closes. Returns the rate, or
/// `None` if the window never closed.
///
/// # Errors
///
/// [`Failure::Stuck`] past `hard`, [`Failure::Corrupt`] on a value out of sequence.
#[inline]
pub fn stream_receive<R: Receiver>(
    rx: &mut R,
    plan: &StreamPlan,
    hard: Instant,
    mut closed: impl FnMut(),
) -> Result<Option<StreamOutcome>, Failure> {
    let mut spin = Spin::until(hard);
    let stuck = |_| Failure::Stuck("receiving thread");
    let mut clock = Windowed::new(plan);
    let mut seq = Sequence::default();
    while !seq.done {
        let n = match plan.batch {
            None => rx.recv_some(&mut spin, |v| seq.see(v)).map_err(stuck)?,
            Some(size) => rx.recv_batch(size, |v| seq.see(v)),
        };
        if let Some((expected, got)) = seq.bad {
            return Err(Failure::Corrupt {
                side: "receiving thread",
                expected,
                got,
            });
        }
        if n == 0 {
            spin.tick().map_err(stuck)?;
        } else if clock.closed.is_none() && clock.at(seq.expected) {
            closed();
        }
    }
    Ok(clock.outcome())
}
