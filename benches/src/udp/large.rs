//! The `udp` suite's large-message case: 1 MiB messages from bus A to bus B through the bridges
//! (a reliable topic: each message goes as about 745 fragment datagrams of at most 1472 bytes),
//! against raw UDP sending the same bytes in the same number and sizes of datagrams, in the
//! same run. Figures: delivered message bytes per second (`throughput_large`, MB/s, 10^6 bytes).
//!
//! - `llbus-1mib`: a feeder actor in A's group publishes `Blob { n, body }` (a 1 MiB body,
//!   cloned from one made at start: the allocation and copy a user's publish would make) and
//!   keeps at most [`IN_FLIGHT`] messages ahead of what the sink in B's group has received
//!   (application-level flow control, so the figure is the transport's, not a loss rate); the
//!   bridges use the defaults but for a history and reorder buffer of 4096 frames.
//! - `raw-1mib`: a sender thread and a receiver thread, each with the bridge's own socket
//!   (`UdpEndpoint`, the same 4 MiB buffers; the receiver uses its `recvmmsg` batches), the
//!   sender sending each message as the same datagrams (745 of them, 1472 bytes but the last)
//!   and keeping at most [`IN_FLIGHT`] messages ahead of the receiver; a message is counted
//!   when all its bytes have arrived. It neither encodes, seals nor reassembles: the floor.
//!
//! Both threads pinned like the other cases (cores 0 and 1) when pinning is on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, Context, Idle, Inputs, Message, Out, Setup};
use llbus_net::{
    fragment_room, Bridge, BridgeConfig, RecvBatch, ReliableConfig, SocketConfig, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM, FRAGMENT_HEADER_LEN, HEADER_LEN,
};
use serde::{Deserialize, Serialize};

use super::{loopback, start_both, stop_both, wait_subscribed};
use crate::drive::Plan;
use crate::harness::{Collector, Pinning, CORES};
use crate::onbus::{metric, place_group, wait_until, DRAIN_LIMIT};

/// `impl` names.
pub const LLBUS_LARGE: &str = "llbus-1mib";
pub const RAW_LARGE: &str = "raw-1mib";

/// The body of every large message.
const BODY: usize = 1 << 20;

/// Messages the sender may be ahead of the receiver.
const IN_FLIGHT: u64 = 4;

/// A large message: its number and a 1 MiB body.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "bench.udp.blob")]
struct Blob {
    n: u64,
    body: Vec<u8>,
}

/// The encoded payload length of a `Blob`: `n`, the body's length prefix, the body.
const PAYLOAD: usize = 8 + 8 + BODY;

/// The `llbus-1mib` measurement (phase 1 of a round).
pub fn llbus_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 1 {
        record(LLBUS_LARGE, llbus_large(pinning, plan), out);
    }
}

/// The `raw-1mib` measurement (phase 1 of a round).
pub fn raw_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 1 {
        record(RAW_LARGE, raw_large(pinning, plan), out);
    }
}

fn record(name: &'static str, result: Result<f64, String>, out: &mut Collector) {
    match result {
        Ok(mb_per_s) => out.add(name, "throughput_large", "MB/s", mb_per_s),
        Err(e) => {
            eprintln!("ERROR: {name} throughput_large: {e}");
            out.note(name, "throughput_large", "MB/s", format!("FAILED: {e}"));
        }
    }
}

/// What the feeder and the sink share with the measuring thread.
#[derive(Default)]
struct Shared {
    go: AtomicBool,
    stop: AtomicBool,
    received: AtomicU64,
    corrupt: AtomicU64,
}

struct Feeder {
    out: Out<Blob>,
    body: Vec<u8>,
    next: u64,
    shared: Arc<Shared>,
}

impl Actor for Feeder {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let s = &self.shared;
        if !s.go.load(Ordering::Relaxed)
            || s.stop.load(Ordering::Relaxed)
            || self.next >= s.received.load(Ordering::Acquire) + IN_FLIGHT
        {
            return 0;
        }
        ctx.publish(
            self.out,
            Blob {
                n: self.next,
                body: self.body.clone(),
            },
        );
        self.next += 1;
        1
    }
}

struct Sink {
    inputs: Inputs<Blob>,
    next: u64,
    shared: Arc<Shared>,
}

impl Actor for Sink {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        let (next, shared) = (&mut self.next, &self.shared);
        self.inputs.poll(16, |b| {
            if b.n != *next || b.body.len() != BODY {
                shared.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            *next = b.n + 1;
            shared.received.store(*next, Ordering::Release);
        })
    }
}

/// Reads `(time, messages received)` after the warm-up and a window later.
fn window(plan: &Plan, received: &AtomicU64) -> ((Instant, u64), (Instant, u64)) {
    let read = || (Instant::now(), received.load(Ordering::Acquire));
    std::thread::sleep(plan.warmup);
    let opened = read();
    std::thread::sleep(plan.window);
    (opened, read())
}

/// Message bytes per second, in MB/s, over a window.
fn mb_per_s(((t0, n0), (t1, n1)): ((Instant, u64), (Instant, u64))) -> Result<f64, String> {
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    if n1 == n0 || secs <= 0.0 {
        return Err("no message arrived within the window".into());
    }
    Ok((n1 - n0) as f64 * BODY as f64 / secs / 1e6)
}

fn llbus_large(pinning: &Pinning, plan: &Plan) -> Result<f64, String> {
    let config = BridgeConfig {
        reliable: ReliableConfig {
            history: 4096,
            reorder: 4096,
            ..ReliableConfig::default()
        },
        ..BridgeConfig::default()
    };
    let bridge_a = Bridge::bind_with(loopback(), config.clone())
        .map_err(|e| format!("cannot bind bridge A: {e}"))?
        .name("bridge-a");
    let bridge_b = Bridge::bind_with(loopback(), config)
        .map_err(|e| format!("cannot bind bridge B: {e}"))?
        .name("bridge-b");
    let addr_a = bridge_a.local_addr();
    let (bridge_a, bridge_b) = (
        bridge_a.export_reliable::<Blob>(),
        bridge_b.import_reliable::<Blob>(addr_a),
    );
    let shared = Arc::new(Shared::default());
    let mut a = Bus::builder();
    a.stop_timeout(DRAIN_LIMIT);
    a.add(bridge_a)
        .backpressure::<Blob>(Backpressure::DropNewest)
        .group("host-a");
    let f = Arc::clone(&shared);
    a.actor("feed", move |s: &mut Setup<'_>| Feeder {
        out: s.output(),
        body: (0..BODY).map(|i| i as u8).collect(),
        next: 0,
        shared: Arc::clone(&f),
    })
    .publishes::<Blob>()
    .group("host-a");
    place_group(a.group("host-a").idle(Idle::BusySpin), pinning, 0);
    let mut b = Bus::builder();
    b.stop_timeout(DRAIN_LIMIT);
    b.add(bridge_b).group("host-b");
    let k = Arc::clone(&shared);
    b.actor("sink", move |s: &mut Setup<'_>| Sink {
        inputs: s.inputs::<Blob>(),
        next: 0,
        shared: Arc::clone(&k),
    })
    .takes::<Blob>()
    .group("host-b");
    place_group(b.group("host-b").idle(Idle::BusySpin), pinning, 1);
    let (ra, rb) = start_both(a, b)?;
    let run = wait_subscribed(&ra, "bridge-a", Blob::TOPIC).map(|()| {
        shared.go.store(true, Ordering::Release);
        let started = wait_until(Instant::now() + plan.hard_cap, || {
            shared.received.load(Ordering::Acquire) > 0
        });
        let w = started.then(|| window(plan, &shared.received));
        shared.stop.store(true, Ordering::Release);
        w
    });
    let (report_a, report_b) = stop_both(ra, rb)?;
    let w = run?.ok_or("nothing arrived within the hard cap")?;
    let corrupt = shared.corrupt.load(Ordering::Relaxed);
    if corrupt > 0 {
        return Err(format!(
            "{corrupt} messages out of order or of the wrong size"
        ));
    }
    let unrecovered = metric(&report_b, "bridge-b", "unrecovered");
    if unrecovered > 0 {
        return Err(format!(
            "{unrecovered} fragments unrecovered (retransmitted {})",
            metric(&report_a, "bridge-a", "retransmitted")
        ));
    }
    mb_per_s(w)
}

/// The datagrams of one message as the bridge sends them: lengths only (the bytes are zero).
fn datagram_lengths() -> Vec<usize> {
    let chunk = fragment_room(DEFAULT_MAX_DATAGRAM);
    (0..PAYLOAD.div_ceil(chunk))
        .map(|i| HEADER_LEN + FRAGMENT_HEADER_LEN + (PAYLOAD - i * chunk).min(chunk))
        .collect()
}

fn raw_large(pinning: &Pinning, plan: &Plan) -> Result<f64, String> {
    let config = SocketConfig::default();
    let mut tx = UdpEndpoint::bind(loopback(), &config).map_err(|e| e.to_string())?;
    let mut rx = UdpEndpoint::bind(loopback(), &config).map_err(|e| e.to_string())?;
    let dest: SocketAddr = rx.local_addr();
    let lengths = datagram_lengths();
    let per_message: usize = lengths
        .iter()
        .map(|l| l - HEADER_LEN - FRAGMENT_HEADER_LEN)
        .sum();
    debug_assert_eq!(per_message, PAYLOAD);
    let shared = Arc::new(Shared::default());
    let (s_rx, s_tx) = (Arc::clone(&shared), Arc::clone(&shared));
    let pinned = pinning.enabled();
    let receiver = std::thread::spawn(move || {
        if pinned {
            core_affinity::set_for_current(core_affinity::CoreId { id: CORES[1] });
        }
        receive(&s_rx, &mut rx, per_message);
    });
    let sender = std::thread::spawn(move || -> Result<(), String> {
        if pinned {
            core_affinity::set_for_current(core_affinity::CoreId { id: CORES[0] });
        }
        let buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut sent = 0u64;
        let mut stalled_since: Option<Instant> = None;
        while !s_tx.stop.load(Ordering::Relaxed) {
            let received = s_tx.received.load(Ordering::Acquire);
            if sent >= received + IN_FLIGHT {
                // Waiting for the receiver; a message it lost for good is skipped after 50 ms.
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(50) {
                    s_tx.corrupt.fetch_add(1, Ordering::Relaxed);
                    s_tx.received.fetch_add(1, Ordering::AcqRel);
                }
                std::hint::spin_loop();
                continue;
            }
            stalled_since = None;
            for &len in &lengths {
                // The bridge's own send: Ok(false) is a full buffer; retry, never drop.
                while !tx.send_to(&buf[..len], dest).map_err(|e| e.to_string())? {
                    std::hint::spin_loop();
                }
            }
            sent += 1;
        }
        Ok(())
    });
    let started = wait_until(Instant::now() + plan.hard_cap, || {
        shared.received.load(Ordering::Acquire) > 0
    });
    let w = started.then(|| window(plan, &shared.received));
    shared.stop.store(true, Ordering::Release);
    let sent = sender.join().map_err(|_| "the raw sender panicked")?;
    receiver.join().map_err(|_| "the raw receiver panicked")?;
    sent?;
    let skipped = shared.corrupt.load(Ordering::Relaxed);
    let mb = mb_per_s(w.ok_or("nothing arrived within the hard cap")?)?;
    if skipped > 0 {
        eprintln!("note: {RAW_LARGE}: {skipped} messages lost by UDP and skipped");
    }
    Ok(mb)
}

/// The raw receiver: counts message bytes (datagram lengths less the fragment headers) and
/// publishes whole messages received, until told to stop.
fn receive(shared: &Shared, rx: &mut UdpEndpoint, per_message: usize) {
    let mut batch = RecvBatch::new(BridgeConfig::default().batch, DEFAULT_MAX_DATAGRAM);
    let mut bytes = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        let Ok(n) = rx.recv_batch(&mut batch) else {
            return;
        };
        for (d, _) in batch.iter().take(n) {
            bytes += d.len() - HEADER_LEN - FRAGMENT_HEADER_LEN;
        }
        if bytes >= per_message {
            let whole = (bytes / per_message) as u64;
            bytes %= per_message;
            shared.received.fetch_add(whole, Ordering::AcqRel);
        }
        if n == 0 {
            std::hint::spin_loop();
        }
    }
}
