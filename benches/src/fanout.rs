//! The `bus` suite's peers: what a user would pick instead of the bus to stream one feed to one
//! or three consumers, run in the bus's own placement (see `bus`'s module docs).
//!
//! - `disruptor`: the `disruptor` crate's single-producer ring broadcasting to 1 or 3
//!   consumers, each an `EventPoller` (so that the three can share one thread, as the bus's
//!   three subscribers do, instead of the crate's thread per handler: four spinning threads on
//!   two vCPUs would measure the scheduler). The publisher publishes one event at a time
//!   (`try_publish`, spinning while full); each poll takes every event published so far.
//! - `crossbeam-channel`: a pipeline of bounded `crossbeam_channel`s, one per consumer, the
//!   publisher sending each item into each (`try_send`, spinning while full) and the consumers'
//!   thread taking up to [`BUDGET`] per channel in turn with `try_recv`.
//!
//! The publisher runs on core 0 and the consumers' thread on core 1; each consumer checks the
//! sequence. The consumers' thread times the window itself: it reads the clock every
//! [`CLOCK_EVERY`] items of the first consumer, opens the window after the warm-up, and closes
//! it a window later; the figure is the slowest consumer's items in the window per second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::drive::{Failure, StreamPlan};
use crate::harness::{run_pair, Pinning};

/// Items a consumer takes from one channel per turn (the bus runner's budget per ring).
const BUDGET: usize = 64;

/// How often (in items of the first consumer) the consumers' thread reads the clock.
const CLOCK_EVERY: u64 = 4096;

/// One peer: a publisher end and one consumer end per subscriber.
pub trait Broadcast {
    /// The publisher's end.
    type Tx: Send;
    /// One consumer's end.
    type Rx: Send;
    /// A feed of `capacity` slots to `subscribers` consumers.
    fn make(subscribers: usize, capacity: usize) -> (Self::Tx, Vec<Self::Rx>);
    /// Publishes `v` to every consumer, or returns false if it could not (full: try again).
    /// Called again with the same `v` after a false, until it returns true; a peer that
    /// publishes to several queues remembers how far it got.
    fn send(tx: &mut Self::Tx, v: u64) -> bool;
    /// Hands what is ready (up to about [`BUDGET`]) to `f`; returns how many.
    fn poll(rx: &mut Self::Rx, f: impl FnMut(u64)) -> usize;
}

/// The `disruptor` crate's broadcast (see the module docs).
#[derive(Debug)]
pub struct Disruptor;

/// The disruptor's publishing end: one for 1 consumer, another for 3 (the barrier type differs).
pub enum DisruptorTx {
    /// Publishing to one consumer.
    One(disruptor::SingleProducer<u64, disruptor::SingleConsumerBarrier>),
    /// Publishing to several.
    Many(disruptor::SingleProducer<u64, disruptor::MultiConsumerBarrier>),
}

/// One consumer of the disruptor's broadcast.
pub struct DisruptorRx(disruptor::EventPoller<u64, disruptor::SingleProducerBarrier>);

impl Broadcast for Disruptor {
    type Tx = DisruptorTx;
    type Rx = DisruptorRx;

    fn make(subscribers: usize, capacity: usize) -> (Self::Tx, Vec<Self::Rx>) {
        let (first, builder) =
            disruptor::build_single_producer(capacity, || 0u64, disruptor::BusySpin).event_poller();
        if subscribers == 1 {
            return (DisruptorTx::One(builder.build()), vec![DisruptorRx(first)]);
        }
        let (second, mut builder) = builder.event_poller();
        let mut rxs = vec![DisruptorRx(first), DisruptorRx(second)];
        for _ in 2..subscribers {
            let (next, b) = builder.event_poller();
            rxs.push(DisruptorRx(next));
            builder = b;
        }
        (DisruptorTx::Many(builder.build()), rxs)
    }

    #[inline]
    fn send(tx: &mut Self::Tx, v: u64) -> bool {
        use disruptor::Producer as _;
        match tx {
            DisruptorTx::One(p) => p.try_publish(|slot| *slot = v).is_ok(),
            DisruptorTx::Many(p) => p.try_publish(|slot| *slot = v).is_ok(),
        }
    }

    #[inline]
    fn poll(rx: &mut Self::Rx, mut f: impl FnMut(u64)) -> usize {
        match rx.0.poll() {
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

/// A pipeline of `crossbeam_channel`s (see the module docs).
#[derive(Debug)]
pub struct Crossbeam;

/// The senders, one per consumer, and how many of them already have the item being sent.
pub struct CrossbeamTx {
    senders: Vec<crossbeam_channel::Sender<u64>>,
    done: usize,
}

impl Broadcast for Crossbeam {
    type Tx = CrossbeamTx;
    type Rx = crossbeam_channel::Receiver<u64>;

    fn make(subscribers: usize, capacity: usize) -> (Self::Tx, Vec<Self::Rx>) {
        let (senders, rxs) = (0..subscribers)
            .map(|_| crossbeam_channel::bounded(capacity))
            .unzip();
        (CrossbeamTx { senders, done: 0 }, rxs)
    }

    #[inline]
    fn send(tx: &mut Self::Tx, v: u64) -> bool {
        while let Some(s) = tx.senders.get(tx.done) {
            if s.try_send(v).is_err() {
                return false;
            }
            tx.done += 1;
        }
        tx.done = 0;
        true
    }

    #[inline]
    fn poll(rx: &mut Self::Rx, mut f: impl FnMut(u64)) -> usize {
        let mut n = 0;
        while n < BUDGET {
            match rx.try_recv() {
                Ok(v) => {
                    f(v);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
    }
}

/// One fan-out measurement of peer `B` to `subscribers` consumers (see the module docs): the
/// slowest consumer's items per second in the window.
///
/// # Errors
///
/// A [`Failure`] if a thread got stuck or a consumer saw a value out of sequence.
pub fn fanout<B: Broadcast>(
    subscribers: usize,
    capacity: usize,
    pinning: &Pinning,
    plan: StreamPlan,
) -> Result<f64, Failure> {
    let (mut tx, mut rxs) = B::make(subscribers, capacity);
    let hard = Instant::now() + plan.hard_cap;
    let stop = AtomicBool::new(false);
    let (sent, got) = run_pair(
        pinning,
        || -> Result<(), Failure> {
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    while !B::send(&mut tx, next) {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        if Instant::now() > hard {
                            return Err(Failure::Stuck("publishing thread"));
                        }
                        std::hint::spin_loop();
                    }
                    next += 1;
                }
            }
            Ok(())
        },
        || -> Result<f64, Failure> {
            let result = consume::<B>(&mut rxs, plan, hard);
            stop.store(true, Ordering::Relaxed);
            result
        },
    );
    sent?;
    got
}

/// The consumers' thread of [`fanout`]: polls every consumer in turn, checks each sequence,
/// and times the window.
fn consume<B: Broadcast>(
    rxs: &mut [B::Rx],
    plan: StreamPlan,
    hard: Instant,
) -> Result<f64, Failure> {
    let mut expected = vec![0u64; rxs.len()];
    let mut bad = None;
    let mut started: Option<Instant> = None;
    let mut opened: Option<(Instant, Vec<u64>)> = None;
    let mut next_clock = 0u64;
    loop {
        let mut work = 0;
        for (rx, want) in rxs.iter_mut().zip(expected.iter_mut()) {
            work += B::poll(rx, |v| {
                if v == *want {
                    *want += 1;
                } else if bad.is_none() {
                    bad = Some((*want, v));
                }
            });
        }
        if let Some((expected, got)) = bad {
            return Err(Failure::Corrupt {
                side: "consumer",
                expected,
                got,
            });
        }
        if work == 0 {
            if Instant::now() > hard {
                return Err(Failure::Stuck("consumers' thread"));
            }
            std::hint::spin_loop();
            continue;
        }
        if expected[0] < next_clock {
            continue;
        }
        next_clock = expected[0] + CLOCK_EVERY;
        let now = Instant::now();
        let t0 = *started.get_or_insert(now);
        match &opened {
            None if now.saturating_duration_since(t0) >= plan.warmup => {
                opened = Some((now, expected.clone()));
            }
            Some((t1, n1)) if now.saturating_duration_since(*t1) >= plan.window => {
                let slowest = n1
                    .iter()
                    .zip(&expected)
                    .map(|(a, b)| b - a)
                    .min()
                    .unwrap_or(0);
                let secs = now.saturating_duration_since(*t1).as_secs_f64();
                return Ok(slowest as f64 / secs);
            }
            _ if now > hard => return Err(Failure::Stuck("consumers' thread")),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn plan() -> StreamPlan {
        StreamPlan {
            batch: None,
            warmup: Duration::from_millis(5),
            window: Duration::from_millis(20),
            hard_cap: Duration::from_secs(20),
        }
    }

    /// Each peer delivers every item, in order, to every consumer, and reports a rate.
    #[test]
    fn peers_deliver_in_order_to_every_consumer() {
        let pinning = Pinning::disabled("test");
        for subscribers in [1, 3] {
            let d = fanout::<Disruptor>(subscribers, 1024, &pinning, plan()).expect("disruptor");
            let c = fanout::<Crossbeam>(subscribers, 1024, &pinning, plan()).expect("crossbeam");
            assert!(d.is_finite() && d >= 0.0 && c.is_finite() && c >= 0.0);
        }
    }
}
