//! The two measurements every suite makes, generic over the queue or channel under test:
//! a round trip (ping-pong) and a one-way stream (throughput).
//!
//! A suite wraps each implementation's two ends in [`Sender`] and [`Receiver`]; the drivers
//! here are generic over them, so each implementation gets its own monomorphised, inlined
//! loop and they all run exactly the same code around the queue calls.
//!
//! - [`round_trip`]: thread A (core 0) takes a timestamp, sends a counter to thread B
//!   (core 1) over the first queue, B echoes it over the second, A reads the clock again and
//!   records the difference in an HDR histogram made before the loop. The first
//!   `warmup` round trips (at most a tenth of the time cap) are not recorded. A checks that
//!   the echo is the value it sent.
//! - [`stream`]: thread A sends `0, 1, 2, ...` one at a time (or in batches), thread B
//!   receives them and checks the sequence; throughput is items received divided by the time
//!   from A's first send to B's last receive.
//!
//! Both stop early at a soft time cap (so that a slow implementation, such as a blocking
//! channel that parks on every message, cannot blow the suite's time budget) and report how
//! many samples or items they got. Every wait is bounded by a hard deadline ([`Spin`]);
//! blocking receives are bounded because the other side either sends or, once it gives up,
//! drops its end, which disconnects the channel.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::harness::{latency_histogram, run_pair, spin_until, Pinning, Spin, Stuck};

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

/// Sizes and time limits of one round trip measurement.
#[derive(Debug, Clone, Copy)]
pub struct RttPlan {
    /// Round trips run first and not recorded (stopping early at a tenth of `soft_cap`).
    pub warmup: u64,
    /// Round trips recorded.
    pub samples: u64,
    /// Stop recording after this long, counted from the end of the warm-up (the result says
    /// so).
    pub soft_cap: Duration,
    /// Give up with [`Failure::Stuck`] after this long.
    pub hard_cap: Duration,
}

/// What a round trip measurement produced.
#[derive(Debug)]
pub struct RttOutcome {
    /// Round-trip times in ns, one per sample.
    pub histogram: Histogram<u64>,
    /// Whether the soft cap cut the run short.
    pub capped: bool,
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
            let (mut tx, mut rx) = ping;
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
            // Warm-up, limited to a tenth of the time cap so a slow channel keeps its samples.
            let warm_end = Instant::now() + plan.soft_cap / 10;
            while i < plan.warmup {
                i += 1;
                tx.send(i, &mut spin).map_err(stuck)?;
                let v = rx.recv(&mut spin).map_err(stuck)?;
                if v != i {
                    return Err(corrupt(i, v));
                }
                // The clock is cheap next to a round trip, and a slow one needs the check.
                if Instant::now() >= warm_end {
                    break;
                }
            }
            let soft = Instant::now() + plan.soft_cap;
            let mut capped = false;
            for n in 1..=plan.samples {
                i += 1;
                let t0 = Instant::now();
                tx.send(i, &mut spin).map_err(stuck)?;
                let v = rx.recv(&mut spin).map_err(stuck)?;
                let t1 = Instant::now();
                if v != i {
                    return Err(corrupt(i, v));
                }
                histogram.saturating_record(t1.saturating_duration_since(t0).as_nanos() as u64);
                if t1 >= soft && n < plan.samples {
                    capped = true;
                    break;
                }
            }
            tx.send(STOP, &mut spin).map_err(stuck)?;
            Ok(RttOutcome { histogram, capped })
        },
        || -> Result<(), Failure> {
            let (mut rx, mut tx) = echo;
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

/// Sizes and time limits of one stream measurement.
#[derive(Debug, Clone, Copy)]
pub struct StreamPlan {
    /// Items to send.
    pub items: u64,
    /// Items per batch; `None` sends and receives one at a time.
    pub batch: Option<usize>,
    /// Stop sending after this long (the result says so).
    pub soft_cap: Duration,
    /// Give up with [`Failure::Stuck`] after this long.
    pub hard_cap: Duration,
}

/// What a stream measurement produced.
#[derive(Debug, Clone, Copy)]
pub struct StreamOutcome {
    /// Items received per second.
    pub per_sec: f64,
    /// Items received.
    pub items: u64,
    /// Whether the soft cap cut the run short.
    pub capped: bool,
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
    assert!(plan.items < STOP, "item values must stay below STOP");
    let start = Instant::now();
    let hard = start + plan.hard_cap;
    let ready = AtomicUsize::new(0);
    let (a, b) = run_pair(
        pinning,
        || -> Result<(Instant, bool), Failure> {
            let mut tx = tx;
            let mut spin = Spin::until(hard);
            let stuck = |_| Failure::Stuck("sending thread");
            start_together(&ready, hard).map_err(|_| Failure::Stuck("sending thread at start"))?;
            let t0 = Instant::now();
            let soft = t0 + plan.soft_cap;
            let mut capped = false;
            match plan.batch {
                None => {
                    for i in 0..plan.items {
                        tx.send(i, &mut spin).map_err(stuck)?;
                        if i % 4096 == 0 && i + 1 < plan.items && Instant::now() >= soft {
                            capped = true;
                            break;
                        }
                    }
                }
                Some(size) => {
                    let mut buf = vec![0u64; size];
                    let mut next = 0u64;
                    let mut batches = 0u64;
                    while next < plan.items {
                        let n = (plan.items - next).min(size as u64) as usize;
                        for (slot, v) in buf[..n].iter_mut().zip(next..) {
                            *slot = v;
                        }
                        let mut off = 0;
                        while off < n {
                            let k = tx.send_batch(&buf[off..n]);
                            if k == 0 {
                                spin.tick().map_err(stuck)?;
                            }
                            off += k;
                        }
                        next += n as u64;
                        batches += 1;
                        if batches % 64 == 0 && next < plan.items && Instant::now() >= soft {
                            capped = true;
                            break;
                        }
                    }
                }
            }
            if capped {
                tx.send(STOP, &mut spin).map_err(stuck)?;
            }
            Ok((t0, capped))
        },
        || -> Result<(Instant, u64), Failure> {
            let mut rx = rx;
            let mut spin = Spin::until(hard);
            let stuck = |_| Failure::Stuck("receiving thread");
            start_together(&ready, hard)
                .map_err(|_| Failure::Stuck("receiving thread at start"))?;
            let mut expected = 0u64;
            match plan.batch {
                None => {
                    while expected < plan.items {
                        let v = rx.recv(&mut spin).map_err(stuck)?;
                        if v == expected {
                            expected += 1;
                        } else if v == STOP {
                            break;
                        } else {
                            return Err(Failure::Corrupt {
                                side: "receiving thread",
                                expected,
                                got: v,
                            });
                        }
                    }
                }
                Some(size) => {
                    let mut stop = false;
                    let mut bad = None;
                    while expected < plan.items && !stop {
                        let n = rx.recv_batch(size, |v| {
                            if v == expected {
                                expected += 1;
                            } else if v == STOP {
                                stop = true;
                            } else if bad.is_none() {
                                bad = Some((expected, v));
                            }
                        });
                        if let Some((expected, got)) = bad {
                            return Err(Failure::Corrupt {
                                side: "receiving thread",
                                expected,
                                got,
                            });
                        }
                        if n == 0 {
                            spin.tick().map_err(stuck)?;
                        }
                    }
                }
            }
            Ok((Instant::now(), expected))
        },
    );
    let (t0, capped) = a?;
    let (t1, items) = b?;
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    Ok(StreamOutcome {
        per_sec: if secs > 0.0 {
            items as f64 / secs
        } else {
            f64::NAN
        },
        items,
        capped,
    })
}
