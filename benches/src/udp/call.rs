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
//! fills (checked). The server's per-source request limit and reply budget are raised above
//! the pinger's rate (see [`config`]). Each call: one `Instant::now()` before `Context::call`, one when its reply
//! is settled; warm-up and window as the pinger's. The first call waits for the handshake of
//! bridge A's import (the warm-up covers it). Figures: `rtt_p50` .. `rtt_max`, ns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use llbus::{Backpressure, Bus, Idle, Service, Setup};
use llbus_net::{Bridge, BridgeConfig, RateLimit, ServiceConfig};

use super::{loopback, start_both, stop_both, Ping, Pong};
use crate::drive::{RttOutcome, RttPlan};
use crate::harness::{secs, Pinning};
use crate::onbus::{place_group, CallEcho, Called, Pinger, DRAIN_LIMIT, LOST_AFTER};

/// `impl` name.
pub const CALL: &str = "llbus-call";

fn service() -> Service<Ping, Pong> {
    // A constant, valid name.
    Service::named("bench.udp.call").unwrap_or_else(|_| Service::of())
}

/// The bridges' configuration: the defaults, with the server's per-source limits set above
/// what the pinger asks. One call at a time is some 130,000 calls a second; the default
/// request limit (10,000/s, bursts of 1,000 per source IP) would drop the excess unanswered
/// and the caller's bridge would resend each 10 ms later, and the default reply budget
/// (4 MiB/s per caller host) would answer the excess `OverBudget`: that measures the limits,
/// not the call.
fn config() -> BridgeConfig {
    BridgeConfig {
        services: ServiceConfig {
            request_limit: RateLimit {
                per_second: 10_000_000,
                burst: 1_000_000,
            },
            reply_rate: (1 << 30, 1 << 30),
            ..ServiceConfig::default()
        },
        ..BridgeConfig::default()
    }
}

/// One round trip measurement of calls through two bridges on two fresh buses (see the
/// module docs).
pub(super) fn round_trip(pinning: &Pinning, plan: RttPlan) -> Result<RttOutcome, String> {
    let bind = |name| {
        Bridge::bind_with(loopback(), config())
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
        let calls = Called::<Ping, Pong>::new(s.caller(&service()), LOST_AFTER);
        Pinger::new(calls, plan, Some(Arc::clone(&g)), tx.clone())
    })
    .calls(&service())
    .group("host-a");
    place_group(a.group("host-a").idle(Idle::BusySpin), pinning, 0);

    let mut b = Bus::builder();
    b.stop_timeout(DRAIN_LIMIT);
    b.add(bridge_b).group("host-b");
    b.actor("server", |s: &mut Setup<'_>| {
        CallEcho::<Ping, Pong>::new(s.replies(&service()))
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
