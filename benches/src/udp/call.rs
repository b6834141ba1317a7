//! The `udp` suite's call case (`llbus-call`): the round trip of a service call through two
//! bridges, beside the `llbus` pub/sub ping-pong in the same run.
//!
//! Bus A: a caller actor that `.calls` the service `bench.udp.call` (request `Ping`, reply
//! `Pong`) and bridge A, which imports the service from bridge B (the bridge's actor serves it
//! on A: `serves_taken`). Bus B: bridge B, which exports the service (its actor calls it on B:
//! `calls_taken`), and a server actor that `.serves` it, answering `Ping(n)` with `Pong(n)`.
//! Placed as `llbus`: each host one thread, its bridge and its actor in a group pinned to core
//! 0 (A) or 1 (B) with `Idle::BusySpin`; the edges from an actor to its own thread's bridge are
//! `DropNewest` (a `Block` edge within one thread is refused), which one call in flight never
//! fills (checked). Each call: one `Instant::now()` before `Context::call`, one when its reply
//! is settled; warm-up and window as the pinger's. The first call waits for the handshake of
//! bridge A's import (the warm-up covers it). Figures: `rtt_p50` .. `rtt_max`, ns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use hdrhistogram::Histogram;
use llbus::{
    Actor, Backpressure, Bus, CallOut, Context, Idle, Replies, Reply, Request, Service, Setup,
};
use llbus_net::{Bridge, BridgeConfig};

use super::{loopback, start_both, stop_both, Ping, Pong};
use crate::drive::{Failure, RttOutcome, RttPlan};
use crate::harness::{latency_histogram, secs, Pinning};
use crate::onbus::{place_group, Counter, RttResult, DRAIN_LIMIT, LOST_AFTER};

/// `impl` name.
pub const CALL: &str = "llbus-call";

fn service() -> Service<Ping, Pong> {
    // A constant, valid name.
    Service::named("bench.udp.call").unwrap_or_else(|_| Service::of())
}

/// Calls `Ping(n)`, times the call until its reply `Pong(n)` is settled, and calls the next,
/// as `onbus::Pinger` publishes and times: round trips of the warm-up not recorded, then every
/// one of the window. Starts in the first `poll` after `go` is set.
struct CallPinger {
    out: CallOut<Ping, Pong>,
    plan: RttPlan,
    go: Arc<AtomicBool>,
    started: bool,
    n: u64,
    warm_end: Instant,
    window_end: Option<Instant>,
    t0: Instant,
    /// `None` once the result is sent.
    histogram: Option<Histogram<u64>>,
    result: mpsc::Sender<RttResult>,
}

impl CallPinger {
    fn call_next(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        self.t0 = Instant::now();
        if ctx.call(self.out, Ping::with(self.n), LOST_AFTER).is_err() {
            self.finish(Err(Failure::Stuck("call actor: a call was refused")), ctx);
        }
    }

    fn finish(&mut self, result: RttResult, ctx: &mut Context<'_>) {
        self.histogram = None;
        let _ = self.result.send(result);
        ctx.request_stop();
    }
}

impl Actor for CallPinger {
    type In = Reply<Pong>;

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.started || !self.go.load(Ordering::Acquire) {
            return 0;
        }
        self.started = true;
        self.warm_end = Instant::now() + self.plan.warmup;
        self.call_next(ctx);
        1
    }

    fn on_message(&mut self, reply: Reply<Pong>, ctx: &mut Context<'_>) {
        let t1 = Instant::now();
        let Some((_, result)) = ctx.settle(reply) else {
            return; // Late: its call ended already.
        };
        if self.histogram.is_none() {
            return; // Done already; the bus is stopping.
        }
        let v = match result {
            Ok(pong) => pong.n(),
            Err(_) => {
                let failed = Failure::Stuck("call actor: a call ended without its reply");
                return self.finish(Err(failed), ctx);
            }
        };
        if v != self.n {
            let corrupt = Failure::Corrupt {
                side: "call actor",
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
        self.call_next(ctx);
    }
}

/// Answers every `Ping(n)` with `Pong(n)`.
struct Server {
    replies: Replies<Pong>,
}

impl Actor for Server {
    type In = Request<Ping>;

    fn on_message(&mut self, request: Request<Ping>, ctx: &mut Context<'_>) {
        let (ping, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Pong::with(ping.n())));
    }
}

/// One round trip measurement of calls through two bridges on two fresh buses (see the
/// module docs).
pub(super) fn round_trip(pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let bind = |name| {
        Bridge::bind_with(loopback(), BridgeConfig::default())
            .map(|b| b.name(name))
            .map_err(|e| format!("cannot bind a bridge: {e}"))
    };
    let (bridge_a, bridge_b) = (bind("bridge-a")?, bind("bridge-b")?);
    let addr_b = bridge_b.local_addr();
    let bridge_a = bridge_a.import_service(&service(), addr_b);
    let bridge_b = bridge_b.export_service(&service());

    let go = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut a = Bus::builder();
    a.stop_timeout(DRAIN_LIMIT);
    a.add(bridge_a)
        .backpressure_on(&service().requests(), Backpressure::DropNewest)
        .group("host-a");
    let g = Arc::clone(&go);
    a.actor("call", move |s: &mut Setup<'_>| {
        let now = Instant::now();
        CallPinger {
            out: s.caller(&service()),
            plan,
            go: Arc::clone(&g),
            started: false,
            n: 0,
            warm_end: now,
            window_end: None,
            t0: now,
            histogram: Some(latency_histogram()),
            result: tx.clone(),
        }
    })
    .calls(&service())
    .group("host-a");
    place_group(a.group("host-a").idle(Idle::BusySpin), pinning, 0);

    let mut b = Bus::builder();
    b.stop_timeout(DRAIN_LIMIT);
    b.add(bridge_b).group("host-b");
    b.actor("server", |s: &mut Setup<'_>| Server {
        replies: s.replies(&service()),
    })
    .serves(&service())
    .group("host-b");
    place_group(b.group("host-b").idle(Idle::BusySpin), pinning, 1);

    let (ra, rb) = start_both(a, b)?;
    go.store(true, Ordering::Release);
    let got = rx
        .recv_timeout(plan.hard_cap)
        .map_err(|_| format!("no result within {} (stuck)", secs(plan.hard_cap)));
    let (report_a, _) = stop_both(ra, rb)?;
    let outcome = got?.map_err(|e| e.to_string())?;
    // With one call in flight the DropNewest edges never fill; check it.
    if let Some(e) =
        (report_a.edge(service().name().as_str(), "call", "bridge-a")).filter(|e| e.dropped > 0)
    {
        return Err(format!("call -> bridge-a dropped {} requests", e.dropped));
    }
    Ok(outcome)
}
