//! Running an llbus bus inside a measurement, bounded in time: the `bus` and `udp` suites build
//! a fresh bus (or two) per measurement, wait for their actors' results with a deadline, then
//! stop and join them with a deadline too.
//!
//! A bus that does not stop is an error, never a hang: [`stop_and_join`] joins on a helper
//! thread and, if the bus is still running [`STOP_LIMIT`] after it was asked to stop, prints
//! why and ends the process (its threads would still spin on the benchmark cores, so no later
//! figure of the run could be trusted).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use llbus::{
    Actor, ActorBuilder, Bus, BusBuilder, CallOut, Context, GroupBuilder, Idle, Message, Out,
    Replies, Reply, Report, Request, RunningBus, Setup,
};

use crate::drive::{Failure, RttOutcome, RttPlan};
use crate::harness::{latency_histogram, secs, Pinning, CORES};

/// How long a bus may take to stop once asked, before the run gives up on it.
pub const STOP_LIMIT: Duration = Duration::from_secs(15);

/// How long each bus may take to drain on a graceful stop (`BusBuilder::stop_timeout`).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Exit status when a bus does not stop.
const EXIT_BUS_HUNG: i32 = 3;

/// Asks `running` to stop and joins it, waiting at most [`STOP_LIMIT`].
///
/// # Errors
///
/// The bus's own error (an actor panicked), as text.
pub fn stop_and_join(running: RunningBus, what: &str) -> Result<Report, String> {
    running.stop();
    let (tx, rx) = mpsc::channel();
    let joiner = std::thread::Builder::new()
        .name("bench-join".into())
        .spawn(move || {
            let _ = tx.send(running.join());
        })
        .map_err(|e| format!("{what}: cannot spawn a thread to join the bus: {e}"))?;
    match rx.recv_timeout(STOP_LIMIT) {
        Ok(result) => {
            let _ = joiner.join();
            result.map_err(|e| format!("{what}: the bus failed: {e}"))
        }
        Err(_) => {
            eprintln!(
                "FATAL: {what}: the bus did not stop within {} of being asked; its threads \
                 still spin on the benchmark cores, so no later figure would be fair: exiting",
                secs(STOP_LIMIT)
            );
            std::process::exit(EXIT_BUS_HUNG);
        }
    }
}

/// Polls `ready` every millisecond until it holds (`true`) or `deadline` passes (`false`).
pub fn wait_until(deadline: Instant, mut ready: impl FnMut() -> bool) -> bool {
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Named metric `name` of actor `actor` in `report`, 0 if absent.
pub fn metric(report: &Report, actor: &str, name: &str) -> u64 {
    report
        .actor(actor)
        .and_then(|a| a.metric(name))
        .unwrap_or(0)
}

/// Pins an actor's own thread to benchmark core `which` (0 or 1) when pinning is on.
pub fn place<'b, A: Actor>(
    builder: ActorBuilder<'b, A>,
    pinning: &Pinning,
    which: usize,
) -> ActorBuilder<'b, A> {
    if pinning.enabled() {
        builder.on_core(CORES[which])
    } else {
        builder
    }
}

/// Pins a group's thread to benchmark core `which` (0 or 1) when pinning is on.
pub fn place_group<'b>(
    builder: GroupBuilder<'b>,
    pinning: &Pinning,
    which: usize,
) -> GroupBuilder<'b> {
    if pinning.enabled() {
        builder.on_core(CORES[which])
    } else {
        builder
    }
}

// ---------------------------------------------------------------------------------------------
// The round-trip actors, shared by the `bus` and `udp` suites.

/// A message that carries a counter: what the round-trip actors bounce.
pub trait Counter: Message + Clone {
    /// The message carrying `n`.
    fn with(n: u64) -> Self;
    /// The counter it carries.
    fn n(&self) -> u64;
}

/// Defines a message `$name(u64)` on topic `$topic` that is a [`Counter`] (and `Serialize`, so
/// it can be exported or recorded): the round-trip suites' ping and pong.
macro_rules! newtype_counter {
    ($name:ident, $topic:tt) => {
        #[derive(llbus::Message, serde::Serialize, Clone, Copy, Debug)]
        #[message(topic = $topic)]
        struct $name(u64);

        impl $crate::onbus::Counter for $name {
            fn with(n: u64) -> Self {
                $name(n)
            }
            fn n(&self) -> u64 {
                self.0
            }
        }
    };
}
pub(crate) use newtype_counter;

/// A fresh bus (stop timeout [`DRAIN_LIMIT`]) with the round-trip pinger `ping` on its own
/// thread on benchmark core 0 (`BusySpin`), publishing `P` and timing the `Q` that answers;
/// its result comes on the returned receiver.
pub fn bus_with_pinger<P: Counter, Q: Counter>(
    pinning: &Pinning,
    plan: RttPlan,
) -> (BusBuilder, mpsc::Receiver<RttResult>) {
    let (tx, rx) = mpsc::channel();
    let mut bus = Bus::builder();
    bus.stop_timeout(DRAIN_LIMIT);
    let ping = bus
        .actor("ping", move |s: &mut Setup<'_>| {
            Pinger::new(Published::<P, Q>::new(s.output()), plan, None, tx.clone())
        })
        .idle(Idle::BusySpin)
        .subscribes::<Q>()
        .publishes::<P>();
    place(ping, pinning, 0);
    (bus, rx)
}

/// What the pinger hands back when it is done.
pub type RttResult = Result<RttOutcome, Failure>;

/// How a round-trip actor sends its ping and reads what answers it: a publish answered by a
/// message ([`Published`]) or a service call answered by its reply ([`Called`]).
pub trait Bounce: Send + 'static {
    /// What answers a ping.
    type In: Message;
    /// Sends ping `n`.
    ///
    /// # Errors
    /// Why it could not be sent.
    fn send(&mut self, n: u64, ctx: &mut Context<'_>) -> Result<(), Failure>;
    /// The counter `answer` carries; `None` for an answer to pass over (a late reply).
    fn open(&mut self, answer: Self::In, ctx: &mut Context<'_>) -> Option<Result<u64, Failure>>;
}

/// Publishes `P(n)` on an output; `Q(n)` answers.
pub struct Published<P, Q> {
    out: Out<P>,
    _answer: PhantomData<fn(Q)>,
}

impl<P, Q> Published<P, Q> {
    /// Publishing on `out`.
    pub fn new(out: Out<P>) -> Self {
        Published {
            out,
            _answer: PhantomData,
        }
    }
}

impl<P: Counter, Q: Counter> Bounce for Published<P, Q> {
    type In = Q;

    #[inline]
    fn send(&mut self, n: u64, ctx: &mut Context<'_>) -> Result<(), Failure> {
        ctx.publish(self.out, P::with(n));
        Ok(())
    }

    #[inline]
    fn open(&mut self, answer: Q, _: &mut Context<'_>) -> Option<Result<u64, Failure>> {
        Some(Ok(answer.n()))
    }
}

/// Calls a service with `P(n)` (`Context::call`, with `timeout`); its reply `Q(n)` answers.
pub struct Called<P, Q> {
    out: CallOut<P, Q>,
    timeout: Duration,
}

impl<P, Q> Called<P, Q> {
    /// Calling through `out`, each call with `timeout`.
    pub fn new(out: CallOut<P, Q>, timeout: Duration) -> Self {
        Called { out, timeout }
    }
}

impl<P: Counter, Q: Counter> Bounce for Called<P, Q> {
    type In = Reply<Q>;

    #[inline]
    fn send(&mut self, n: u64, ctx: &mut Context<'_>) -> Result<(), Failure> {
        (ctx.call(self.out, P::with(n), self.timeout))
            .map(|_| ())
            .map_err(|_| Failure::Stuck("caller: a call was refused"))
    }

    #[inline]
    fn open(&mut self, reply: Reply<Q>, ctx: &mut Context<'_>) -> Option<Result<u64, Failure>> {
        match ctx.settle(reply)? {
            (_, Ok(q)) => Some(Ok(q.n())),
            (_, Err(_)) => Some(Err(Failure::Stuck(
                "caller: a call ended without its reply",
            ))),
        }
    }
}

/// Sends ping `n` (a publish of `P(n)` or a call), times the `Q(n)` that answers it, and sends
/// the next, like `examples/pingpong.rs`. Mirrors `drive::round_trip`'s loop: one
/// `Instant::now()` before sending and one when the answer is handled; round trips of the
/// plan's warm-up not recorded, then every round trip of its window; the answer must carry
/// the counter sent. The histogram is allocated when the actor is made (in its factory).
///
/// It starts in `on_start`, or, given a `go` flag, in the first `poll` after the flag is set
/// (once the network subscriptions exist). Given a `go` flag (over the network), it also gives
/// up when no answer came [`LOST_AFTER`] after a ping (a datagram was lost); within one bus
/// nothing can be lost, and the measuring thread's hard cap bounds a stuck run.
pub struct Pinger<B> {
    bounce: B,
    plan: RttPlan,
    go: Option<Arc<AtomicBool>>,
    started: bool,
    /// The counter of the ping in flight.
    n: u64,
    warm_end: Instant,
    /// Set when the warm-up ends.
    window_end: Option<Instant>,
    t0: Instant,
    /// `None` once the result is sent.
    histogram: Option<Histogram<u64>>,
    result: mpsc::Sender<RttResult>,
}

/// How long the pinger waits for an answer over the network before it gives up.
///
/// Loopback does not lose a lone datagram; what this catches in practice is a starved thread:
/// on a shared VM a pinned thread can be runnable yet get no CPU for over a second
/// (docs/PERFORMANCE.md, "How the suites measure"). Long enough not to call that a loss,
/// shorter than the hard cap.
pub const LOST_AFTER: Duration = Duration::from_secs(10);

impl<B: Bounce> Pinger<B> {
    /// A pinger sending through `bounce`; see the type's docs.
    pub fn new(
        bounce: B,
        plan: RttPlan,
        go: Option<Arc<AtomicBool>>,
        result: mpsc::Sender<RttResult>,
    ) -> Self {
        let now = Instant::now();
        Self {
            bounce,
            plan,
            go,
            started: false,
            n: 0,
            warm_end: now,
            window_end: None,
            t0: now,
            histogram: Some(latency_histogram()),
            result,
        }
    }

    fn begin(&mut self, ctx: &mut Context<'_>) {
        self.started = true;
        self.warm_end = Instant::now() + self.plan.warmup;
        self.send_next(ctx);
    }

    #[inline]
    fn send_next(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        self.t0 = Instant::now();
        if let Err(failed) = self.bounce.send(self.n, ctx) {
            self.finish(Err(failed), ctx);
        }
    }

    fn finish(&mut self, result: RttResult, ctx: &mut Context<'_>) {
        self.histogram = None;
        let _ = self.result.send(result);
        ctx.request_stop();
    }
}

impl<B: Bounce> Actor for Pinger<B> {
    type In = B::In;

    fn on_start(&mut self, ctx: &mut Context<'_>) {
        if self.go.is_none() {
            self.begin(ctx);
        }
    }

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if !self.started {
            if self.go.as_ref().is_some_and(|g| g.load(Ordering::Acquire)) {
                self.begin(ctx);
                return 1;
            }
        } else if self.go.is_some()
            && self.histogram.is_some()
            && ctx.now().saturating_duration_since(self.t0) > LOST_AFTER
        {
            let lost =
                Failure::Stuck("ping actor: no answer 10 s after its ping (a datagram lost?)");
            self.finish(Err(lost), ctx);
        }
        0
    }

    fn on_message(&mut self, answer: B::In, ctx: &mut Context<'_>) {
        let t1 = Instant::now();
        if self.histogram.is_none() {
            return; // Done already; the bus is stopping.
        }
        let v = match self.bounce.open(answer, ctx) {
            None => return,
            Some(Ok(v)) => v,
            Some(Err(failed)) => return self.finish(Err(failed), ctx),
        };
        if v != self.n {
            let corrupt = Failure::Corrupt {
                side: "ping actor",
                expected: self.n,
                got: v,
            };
            return self.finish(Err(corrupt), ctx);
        }
        match self.window_end {
            None if t1 >= self.warm_end => self.window_end = Some(t1 + self.plan.window),
            None => {}
            Some(end) => {
                if let Some(h) = self.histogram.as_mut() {
                    h.saturating_record(t1.saturating_duration_since(self.t0).as_nanos() as u64);
                }
                if t1 >= end {
                    if let Some(histogram) = self.histogram.take() {
                        self.finish(Ok(RttOutcome { histogram }), ctx);
                    }
                    return;
                }
            }
        }
        self.send_next(ctx);
    }
}

/// Answers every call `P(n)` with `Q(n)`.
pub struct CallEcho<P, Q> {
    replies: Replies<Q>,
    _request: PhantomData<fn(P)>,
}

impl<P, Q> CallEcho<P, Q> {
    /// Answering through `replies`.
    pub fn new(replies: Replies<Q>) -> Self {
        CallEcho {
            replies,
            _request: PhantomData,
        }
    }
}

impl<P: Counter, Q: Counter> Actor for CallEcho<P, Q> {
    type In = Request<P>;

    fn on_message(&mut self, request: Request<P>, ctx: &mut Context<'_>) {
        let (p, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Q::with(p.n())));
    }
}

/// Answers every `P(n)` with `Q(n)`.
pub struct Echo<P, Q> {
    out: Out<Q>,
    _ping: PhantomData<fn(P)>,
}

impl<P, Q> Echo<P, Q> {
    /// An echo publishing on `out`.
    pub fn new(out: Out<Q>) -> Self {
        Self {
            out,
            _ping: PhantomData,
        }
    }
}

impl<P: Counter, Q: Counter> Actor for Echo<P, Q> {
    type In = P;

    fn on_message(&mut self, ping: P, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Q::with(ping.n()));
    }
}
