//! The `udp` suite: the network bridge over loopback against raw UDP loops.
//!
//! Everything runs over 127.0.0.1 with ephemeral ports, in one process, round after round
//! (each round runs every implementation once per measurement, in a fresh random order;
//! figures are medians over rounds, with min and max). Every measurement runs a warm-up, then
//! a measured window ([`WARMUP`], [`WINDOW`]).
//!
//! Round trip (`rtt_p50`, `rtt_p99`, `rtt_p999`, `rtt_max`, ns) of a 32-byte message carrying a
//! counter, timed on the first side (one `Instant::now()` before sending, one after the echo
//! came back) into an HDR histogram:
//! - `raw-spin`: two threads pinned to cores 0 and 1 (the ring suite's driver,
//!   `drive::round_trip`), each with a non-blocking `std::net::UdpSocket` connected to the
//!   other (`send`/`recv`, the cheapest calls: the floor for the bridge), spinning on `recv`
//!   and echoing 32-byte datagrams;
//! - `raw-blocking`: the same with blocking sockets (the thread sleeps in `recv`);
//! - `raw-unconnected`: `raw-spin` with unconnected sockets (`send_to`/`recv_from`, the calls
//!   the bridge makes for a single datagram), so `raw-unconnected - raw-spin` is what a
//!   connected socket saves and `llbus - raw-unconnected` the bus's and the bridge's own work;
//! - `llbus`: two buses, each with a bridge: A exports `Ping` and imports `Pong` from B; B
//!   imports `Ping` from A and exports `Pong`. A pinger actor on A and an echo actor on B, as
//!   in `examples/pingpong.rs`. Each host is one thread: its bridge and its actor in a group
//!   pinned to core 0 (A) or 1 (B) with `Idle::BusySpin`, so the bridges' busy polling is what
//!   spins. The edges from an actor to its own thread's bridge are `DropNewest` (a `Block` edge
//!   within one thread is refused by the bus; with one message in flight nothing is dropped,
//!   which is checked). Timing starts once each bridge's `subscribers.<topic>` gauge shows the
//!   other's subscription. A datagram on the wire is the 48-byte frame header and the 32-byte
//!   payload.
//! - `llbus-park`: `llbus` with both hosts' threads `Idle::Park`: between messages they sleep
//!   in `epoll` on their bridge's socket and their doorbell's eventfd, the bus's counterpart
//!   of `raw-blocking`'s thread sleeping in `recv`.
//! - `llbus-mac`: the optional pre-shared-key MAC's cost: the `llbus` round trip and batched
//!   throughput with both bridges sealing control and data (`BridgeConfig::psk`, a keyed BLAKE3
//!   tag of 16 bytes per datagram), beside `llbus` without it in the same run.
//! - `llbus-call`: a service call instead of the ping-pong: a caller actor on A calls a server
//!   actor on B through the bridges (A imports the service, B exports it), placed as `llbus`;
//!   the request and the reply are each one datagram. See [`call`].
//!
//! Throughput of 32-byte messages from bus A through bridge A to bridge B (`llbus` only): a
//! publisher actor in A's group publishes `0, 1, 2, ...` as fast as its thread allows,
//! [`PER_POLL`] per `poll` (the bridge takes up to 256 per poll), until the window has closed,
//! and a sink actor in B's group takes its ring itself (`takes`, so it keeps up with whole
//! `recvmmsg` batches) and keeps its count in an atomic. The measuring thread reads that count
//! after the warm-up and again a window later: delivered messages per second = the messages
//! the sink got in between / the time in between. UDP drops under overload, so the loss is
//! reported too
//! (`loss_*`, % of the messages bridge A sent that bridge B did not receive: its
//! `messages_out` against B's `messages_in`), and the average messages per datagram bridge A
//! sent (`msgs_per_datagram_*`).
//! - `throughput_batch`: default bridge settings: bridge A packs what is queued into datagrams
//!   of up to 1472 bytes (18 frames of 80 bytes);
//! - `throughput_single`: the same with bridge A's `max_datagram` set to 88 bytes, the 48-byte
//!   header plus the 32-byte payload plus the 8-byte subscription token, so exactly one
//!   message fits in a datagram: one message per datagram, everything else equal (B's
//!   settings are the defaults in both cases).
//!
//! Large messages (`throughput_large`, MB/s): 1 MiB messages through the bridges in fragments
//! (`llbus-1mib`) beside raw UDP sending the same datagrams (`raw-1mib`); see [`large`].
//!
//! Fan-out (`publisher_ns_per_msg_1`, `publisher_ns_per_msg_8`, `datagrams_per_msg_1`,
//! `datagrams_per_msg_8`, `oneway_p50`): one publisher to 1 and to 8 subscribers, `llbus`
//! (unicast) against `llbus-multicast` (a multicast group); see [`fanout`].
//!
//! Every bus run is bounded: subscriptions and results are awaited with deadlines, and a bus
//! that does not stop ends the run with an error (see `onbus`).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, Context, Idle, Inputs, Message, Out, Report, RunningBus, Setup,
};
use llbus_net::{
    Bridge, BridgeConfig, RecvBatch, SendBatch, SocketConfig, UdpEndpoint, HEADER_LEN, TOKEN_LEN,
};
use serde::{Deserialize, Serialize};

mod call;
mod fanout;
mod large;

use crate::drive::{round_trip, Plan, Receiver, RttOutcome, RttPlan, Sender};
use crate::harness::{
    human, median, run_suite, secs, short, Args, Bound, Collector, Pinning, Spin, Stuck, Target,
};
use crate::onbus::{
    metric, place_group, stop_and_join, wait_until, Counter, Echo, Pinger, Published, DRAIN_LIMIT,
};

/// Suite name in the output.
const SUITE: &str = "udp";

/// `impl` names.
const LLBUS: &str = "llbus";
const RAW_SPIN: &str = "raw-spin";
const RAW_BLOCKING: &str = "raw-blocking";
const MAC: &str = "llbus-mac";
const RELIABLE: &str = "llbus-reliable";
const PARK: &str = "llbus-park";
const RAW_UNCONNECTED: &str = "raw-unconnected";

/// Every measurement runs unrecorded this long first.
pub const WARMUP: Duration = Duration::from_millis(50);

/// Then it is recorded for this long.
pub const WINDOW: Duration = Duration::from_millis(250);

/// Payload bytes of every message and raw datagram.
pub const PAYLOAD: usize = 32;

/// Bridge A's `max_datagram` in the single case: exactly one frame, and the subscription
/// token that ends every datagram to a subscriber (no key here).
pub const ONE_FRAME: usize = HEADER_LEN + PAYLOAD + TOKEN_LEN;

/// Messages the throughput publisher publishes per `poll` (the bridge's export budget).
pub const PER_POLL: u64 = 256;

/// Ring capacity of the throughput sink's subscription, and what it takes per `poll`: more
/// than a whole `recvmmsg` batch of full datagrams (32 x 18).
const SINK_CAPACITY: usize = 8192;
const SINK_BUDGET: usize = 4096;

/// After the publisher's last message, how long the sink may go without receiving anything
/// before the rest counts as lost.
const SETTLE: Duration = Duration::from_millis(200);

/// How long the subscriptions may take to show in the bridges' gauges (refreshed every
/// second).
const SUBSCRIBE_LIMIT: Duration = Duration::from_secs(5);

/// A 32-byte message with a counter: `n` and 24 bytes of padding (bincode, fixed-width).
macro_rules! counter_message {
    ($name:ident, $topic:tt) => {
        #[derive(Message, Serialize, Deserialize, Clone, Copy, Debug)]
        #[message(topic = $topic)]
        struct $name {
            n: u64,
            a: u64,
            b: u64,
            c: u64,
        }

        impl Counter for $name {
            fn with(n: u64) -> Self {
                Self {
                    n,
                    a: 0,
                    b: 0,
                    c: 0,
                }
            }
            fn n(&self) -> u64 {
                self.n
            }
        }
    };
}

counter_message!(Ping, "bench.udp.ping");
counter_message!(Pong, "bench.udp.pong");
counter_message!(Data, "bench.udp.data");

/// This suite's sizes: 15 rounds of 250 ms windows within a minute.
fn plan(args: &Args) -> Plan {
    Plan::new(args, 15, WARMUP, WINDOW, Duration::from_secs(60))
}

/// The suite's targets (printed in its `targets` block).
const TARGETS: [Target; 7] = [
    Target {
        what: "rtt p50 llbus - raw-spin",
        num: (LLBUS, "rtt_p50"),
        den: (RAW_SPIN, "rtt_p50"),
        bound: Bound::ExcessAtMost(1000.0, "ns"),
    },
    Target {
        what: "rtt p50 llbus / raw-spin",
        num: (LLBUS, "rtt_p50"),
        den: (RAW_SPIN, "rtt_p50"),
        bound: Bound::RatioAtMost(1.25),
    },
    Target {
        what: "rtt p50 llbus-park / raw-blocking",
        num: (PARK, "rtt_p50"),
        den: (RAW_BLOCKING, "rtt_p50"),
        bound: Bound::RatioAtMost(1.25),
    },
    Target {
        what: "call p50 / llbus p50",
        num: (call::CALL, "rtt_p50"),
        den: (LLBUS, "rtt_p50"),
        bound: Bound::RatioAtMost(1.10),
    },
    Target {
        what: "throughput llbus batch / single",
        num: (LLBUS, "throughput_batch"),
        den: (LLBUS, "throughput_single"),
        bound: Bound::RatioAtLeast(5.0),
    },
    Target {
        what: "publisher cost llbus-multicast 8 / 1 subscribers",
        num: (fanout::MULTICAST, "publisher_ns_per_msg_8"),
        den: (fanout::MULTICAST, "publisher_ns_per_msg_1"),
        bound: Bound::RatioAtMost(1.5),
    },
    Target {
        what: "oneway p50 llbus-multicast / llbus",
        num: (fanout::MULTICAST, "oneway_p50"),
        den: (LLBUS, "oneway_p50"),
        bound: Bound::RatioAtMost(1.1),
    },
];

/// One implementation's part of a round: `(phase, pinning, plan, out)`.
type CaseFn = fn(usize, &Pinning, &Plan, &mut Collector);

/// Every implementation, in table order (each round runs them in a fresh random order).
const CONTENDERS: &[CaseFn] = &[
    llbus_case,
    raw_spin_case,
    raw_blocking_case,
    mac_case,
    reliable_case,
    park_case,
    raw_unconnected_case,
    call_case,
    large::llbus_case,
    large::raw_case,
    fanout::case,
];

/// Their names, in the same order.
const NAMES: &[&str] = &[
    LLBUS,
    RAW_SPIN,
    RAW_BLOCKING,
    MAC,
    RELIABLE,
    PARK,
    RAW_UNCONNECTED,
    call::CALL,
    large::LLBUS_LARGE,
    large::RAW_LARGE,
    fanout::MULTICAST,
];

/// Measurements per round: round trip, batched throughput, one message per datagram.
const PHASES: usize = 3;

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, pinning: &Pinning, seed: u64) -> Collector {
    let plan = plan(args);
    let started = Instant::now();
    let empty = match empty_receive_ns() {
        Ok((raw, batch)) => (format!("{raw:.0} ns"), format!("{batch:.0} ns")),
        Err(e) => (format!("? ({e})"), "?".to_string()),
    };
    let send = match send_ns() {
        Ok((c, u, b)) => format!(
            "{c:.0} ns connected (send), {u:.0} ns unconnected (send_to), {b:.0} ns the bridge's"
        ),
        Err(e) => format!("? ({e})"),
    };
    human(
        args,
        &format!(
            "== udp: loopback round trip through the bridges against raw UDP; batching ==\n\
             threads: {} (llbus: one group thread per bus, bridge and actor together)\n\
             plan: {} rounds in random order (seed {seed}); per round and impl: round trips \
             of {}-byte messages and throughput streams, each {} of warm-up then {} \
             measured\n\
             an empty non-blocking receive costs {} (recv, as raw-spin polls) and {} \
             (the bridge's, of up to {} datagrams); ll-udp-pubsub claims 1-2 us over \
             raw UDP\n\
             sending one {}-byte datagram costs {send}\n",
            pinning.describe(),
            plan.rounds,
            PAYLOAD,
            short(plan.warmup),
            short(plan.window),
            empty.0,
            empty.1,
            BridgeConfig::default().batch,
            PAYLOAD,
        ),
    );
    let (out, rounds_done, _) = run_suite(
        args,
        SUITE,
        seed,
        PHASES,
        NAMES,
        (plan.rounds, plan.budget),
        &TARGETS,
        |out, phase, i| CONTENDERS[i](phase, pinning, &plan, out),
    );
    human(
        args,
        &format!(
            "udp: {rounds_done} rounds in {}; figures are medians over rounds (min..max)\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

/// Records a round trip measurement (its error as text).
fn record_rtt(name: &'static str, result: Result<RttOutcome, String>, out: &mut Collector) {
    out.add_rtt(name, result.as_ref().map(|o| &o.histogram));
}

// ---------------------------------------------------------------------------------------------
// The cases.

fn llbus_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    match phase {
        0 => record_rtt(
            LLBUS,
            llbus_round_trip(
                pinning,
                plan.rtt,
                &BridgeConfig::default(),
                false,
                Idle::BusySpin,
            ),
            out,
        ),
        1 => throughput_case(false, pinning, plan, out),
        _ => throughput_case(true, pinning, plan, out),
    }
}

fn raw_spin_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        record_rtt(
            RAW_SPIN,
            raw_round_trip(false, false, pinning, plan.rtt),
            out,
        );
    }
}

fn raw_blocking_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        record_rtt(
            RAW_BLOCKING,
            raw_round_trip(true, false, pinning, plan.rtt),
            out,
        );
    }
}

/// `raw-spin` with unconnected sockets (`send_to`/`recv_from`): what the bridge's system calls
/// cost for one datagram, against the connected floor.
fn raw_unconnected_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        record_rtt(
            RAW_UNCONNECTED,
            raw_round_trip(false, true, pinning, plan.rtt),
            out,
        );
    }
}

/// A service call's round trip through the bridges (`llbus-call`).
fn call_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        record_rtt(call::CALL, call::round_trip(pinning, plan.rtt), out);
    }
}

/// The key both bridges share in the MAC case.
const MAC_KEY: [u8; 32] = [0x5a; 32];

/// The `llbus` round trip and batched throughput with the pre-shared-key MAC on.
fn mac_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    match phase {
        0 => {
            let config = BridgeConfig {
                psk: Some(MAC_KEY),
                ..BridgeConfig::default()
            };
            record_rtt(
                MAC,
                llbus_round_trip(pinning, plan.rtt, &config, false, Idle::BusySpin),
                out,
            );
        }
        1 => {}
        _ => match throughput(false, true, false, pinning, plan) {
            Ok(o) => {
                out.add(MAC, "throughput_batch", "msgs/s", o.per_sec);
                out.add(MAC, "loss_batch", "%", o.loss_pct);
            }
            Err(e) => {
                eprintln!("ERROR: {MAC} throughput_batch: {e}");
                out.note(MAC, "throughput_batch", "msgs/s", format!("FAILED: {e}"));
            }
        },
    }
}

/// The `llbus` round trip and batched throughput on reliable topics (history kept, gaps NAKed;
/// with no loss on loopback, this is the cost of keeping history and the reorder check).
fn reliable_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    match phase {
        0 => record_rtt(
            RELIABLE,
            llbus_round_trip(
                pinning,
                plan.rtt,
                &BridgeConfig::default(),
                true,
                Idle::BusySpin,
            ),
            out,
        ),
        1 => {}
        _ => match throughput(false, false, true, pinning, plan) {
            Ok(o) => {
                out.add(RELIABLE, "throughput_batch", "msgs/s", o.per_sec);
                out.add(RELIABLE, "loss_batch", "%", o.loss_pct);
            }
            Err(e) => {
                eprintln!("ERROR: {RELIABLE} throughput_batch: {e}");
                out.note(
                    RELIABLE,
                    "throughput_batch",
                    "msgs/s",
                    format!("FAILED: {e}"),
                );
            }
        },
    }
}

/// The `llbus` round trip with both hosts' threads parked when idle (`Idle::Park`): they sleep
/// in `epoll` on their bridge's socket and doorbell, as `raw-blocking` sleeps in `recv`.
fn park_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        record_rtt(
            PARK,
            llbus_round_trip(
                pinning,
                plan.rtt,
                &BridgeConfig::default(),
                false,
                Idle::Park,
            ),
            out,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Raw UDP.

/// The cost of one receive on an empty non-blocking socket, in ns (median of several batches):
/// a plain `recv` (what `raw-spin` polls with) and the bridge's receive
/// (`UdpEndpoint::recv_batch`: on Linux `recvmmsg`, or `recvfrom` while traffic is light, as
/// it is on an empty socket). The spinning loops pay one per turn.
fn empty_receive_ns() -> io::Result<(f64, f64)> {
    let socket = UdpSocket::bind(loopback())?;
    socket.set_nonblocking(true)?;
    let mut endpoint = UdpEndpoint::bind(loopback(), &SocketConfig::default())?;
    let config = BridgeConfig::default();
    let mut batch = RecvBatch::new(config.batch, config.max_datagram_for(loopback()));
    let mut buf = [0u8; PAYLOAD];
    let n = 2_000u32;
    let (mut raw, mut batched) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..n {
            let _ = std::hint::black_box(socket.recv(&mut buf));
        }
        raw.push(start.elapsed().as_nanos() as f64 / f64::from(n));
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(endpoint.recv_batch(&mut batch)?);
        }
        batched.push(start.elapsed().as_nanos() as f64 / f64::from(n));
    }
    Ok((
        median(&raw).unwrap_or(f64::NAN),
        median(&batched).unwrap_or(f64::NAN),
    ))
}

/// The cost of sending one 32-byte datagram over loopback, in ns (median of several batches;
/// the kernel delivers it into the receiver's buffer within the call): connected `send` (what
/// `raw-spin` sends with), unconnected `send_to` (`raw-unconnected`), and the bridge's
/// `UdpEndpoint::send_batch` of one datagram. Each batch's datagrams are drained, untimed.
fn send_ns() -> io::Result<(f64, f64, f64)> {
    const N: u32 = 200;
    let rx = UdpSocket::bind(loopback())?;
    rx.set_nonblocking(true)?;
    let dest = rx.local_addr()?;
    let connected = UdpSocket::bind(loopback())?;
    connected.connect(dest)?;
    let unconnected = UdpSocket::bind(loopback())?;
    let mut endpoint = UdpEndpoint::bind(loopback(), &SocketConfig::default())?;
    let mut batch = SendBatch::new(BridgeConfig::default().batch);
    let payload = [0u8; PAYLOAD];
    let mut sink = [0u8; 64];
    let mut drain = || while rx.recv(&mut sink).is_ok() {};
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..9 {
        let start = Instant::now();
        for _ in 0..N {
            connected.send(&payload)?;
        }
        a.push(start.elapsed().as_nanos() as f64 / f64::from(N));
        drain();
        let start = Instant::now();
        for _ in 0..N {
            unconnected.send_to(&payload, dest)?;
        }
        b.push(start.elapsed().as_nanos() as f64 / f64::from(N));
        drain();
        let start = Instant::now();
        for _ in 0..N {
            endpoint.send_batch(&mut batch, [(&payload[..], dest)])?;
        }
        c.push(start.elapsed().as_nanos() as f64 / f64::from(N));
        drain();
    }
    let m = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    Ok((m(&a), m(&b), m(&c)))
}

/// One end of a loopback UDP socket pair, sending and receiving 32-byte datagrams whose first
/// 8 bytes are the counter (little-endian): connected (`send`/`recv`), or, with `peer` set,
/// unconnected (`send_to`/`recv_from`, the calls the bridge makes for one datagram).
#[derive(Debug)]
struct RawUdp {
    socket: UdpSocket,
    blocking: bool,
    peer: Option<SocketAddr>,
    buf: [u8; PAYLOAD],
}

impl Sender for RawUdp {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        self.buf[..8].copy_from_slice(&v.to_le_bytes());
        loop {
            let sent = match self.peer {
                Some(peer) => self.socket.send_to(&self.buf, peer),
                None => self.socket.send(&self.buf),
            };
            match sent {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => spin.tick()?,
                Err(_) => return Err(Stuck),
            }
        }
    }
}

impl Receiver for RawUdp {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            let got = match self.peer {
                Some(_) => self.socket.recv_from(&mut self.buf).map(|(n, _)| n),
                None => self.socket.recv(&mut self.buf),
            };
            match got {
                Ok(n) if n >= 8 => {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(&self.buf[..8]);
                    return Ok(u64::from_le_bytes(v));
                }
                Ok(_) => {} // A runt: not ours.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Non-blocking: nothing yet. Blocking: the read timeout (the hard cap) passed.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !self.blocking => {
                    spin.tick()?;
                }
                Err(_) => return Err(Stuck),
            }
        }
    }
}

/// Two loopback sockets, connected to each other unless `unconnected`, as (ping side's
/// (tx, rx), echo side's (rx, tx)).
#[allow(clippy::type_complexity)]
fn raw_pair(
    blocking: bool,
    unconnected: bool,
    hard_cap: Duration,
) -> io::Result<((RawUdp, RawUdp), (RawUdp, RawUdp))> {
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let a = UdpSocket::bind(loopback)?;
    let b = UdpSocket::bind(loopback)?;
    let (addr_a, addr_b) = (a.local_addr()?, b.local_addr()?);
    if !unconnected {
        a.connect(addr_b)?;
        b.connect(addr_a)?;
    }
    for s in [&a, &b] {
        if blocking {
            // Bounds every blocking wait by the hard cap.
            s.set_read_timeout(Some(hard_cap))?;
        } else {
            s.set_nonblocking(true)?;
        }
    }
    let end = |socket, peer: SocketAddr| RawUdp {
        socket,
        blocking,
        peer: unconnected.then_some(peer),
        buf: [0; PAYLOAD],
    };
    Ok((
        (end(a.try_clone()?, addr_b), end(a, addr_b)),
        (end(b.try_clone()?, addr_a), end(b, addr_a)),
    ))
}

fn raw_round_trip(
    blocking: bool,
    unconnected: bool,
    pinning: &Pinning,
    plan: RttPlan,
) -> Result<RttOutcome, String> {
    let (ping, echo) = raw_pair(blocking, unconnected, plan.hard_cap)
        .map_err(|e| format!("cannot set up sockets: {e}"))?;
    round_trip(pinning, ping, echo, plan).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Through the bridges.

fn loopback() -> SocketAddr {
    ([127, 0, 0, 1], 0).into()
}

/// Starts a bus, with the error as text.
fn start(bus: llbus::BusBuilder, what: &str) -> Result<RunningBus, String> {
    bus.start()
        .map_err(|e| format!("{what}: the bus did not start: {e}"))
}

/// Starts bus A, then bus B; if B does not start, stops A again and returns B's error (the
/// cause, whatever stopping A says).
fn start_both(
    a: llbus::BusBuilder,
    b: llbus::BusBuilder,
) -> Result<(RunningBus, RunningBus), String> {
    let ra = start(a, "bus A")?;
    match start(b, "bus B") {
        Ok(rb) => Ok((ra, rb)),
        Err(e) => {
            let _ = stop_and_join(ra, "bus A");
            Err(e)
        }
    }
}

/// Stops and joins both buses (B first: it is the one that subscribes), keeping the first
/// error.
fn stop_both(a: RunningBus, b: RunningBus) -> Result<(Report, Report), String> {
    let rb = stop_and_join(b, "bus B");
    let ra = stop_and_join(a, "bus A");
    Ok((ra?, rb?))
}

/// Waits until the bridge `actor` of `bus` counts a subscriber of `topic` (the gauge is
/// refreshed once a second).
fn wait_subscribed(bus: &RunningBus, actor: &str, topic: &str) -> Result<(), String> {
    let gauge = format!("subscribers.{topic}");
    if wait_until(Instant::now() + SUBSCRIBE_LIMIT, || {
        metric(&bus.report(), actor, &gauge) >= 1
    }) {
        Ok(())
    } else {
        Err(format!(
            "{actor} had no subscriber of '{topic}' after {}",
            secs(SUBSCRIBE_LIMIT)
        ))
    }
}

/// One round trip measurement through two bridges on two fresh buses (see the module docs);
/// `config` is both bridges' settings, `idle` both host threads' idle strategy. The `ipc`
/// suite measures it beside shared memory too.
pub(crate) fn llbus_round_trip(
    pinning: &Pinning,
    plan: RttPlan,
    config: &BridgeConfig,
    reliable: bool,
    idle: Idle,
) -> Result<RttOutcome, String> {
    let bind = |name| {
        Bridge::bind_with(loopback(), config.clone())
            .map(|b| b.name(name))
            .map_err(|e| format!("cannot bind a bridge: {e}"))
    };
    let (bridge_a, bridge_b) = (bind("bridge-a")?, bind("bridge-b")?);
    let (addr_a, addr_b) = (bridge_a.local_addr(), bridge_b.local_addr());
    let (bridge_a, bridge_b) = if reliable {
        (
            bridge_a
                .export_reliable::<Ping>()
                .import_reliable::<Pong>(addr_b),
            bridge_b
                .import_reliable::<Ping>(addr_a)
                .export_reliable::<Pong>(),
        )
    } else {
        (
            bridge_a.export::<Ping>().import::<Pong>(addr_b),
            bridge_b.import::<Ping>(addr_a).export::<Pong>(),
        )
    };

    let go = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut a = Bus::builder();
    a.stop_timeout(DRAIN_LIMIT);
    a.add(bridge_a)
        .backpressure::<Ping>(Backpressure::DropNewest)
        .group("host-a");
    let g = Arc::clone(&go);
    a.actor("ping", move |s: &mut Setup<'_>| {
        let pings = Published::<Ping, Pong>::new(s.output());
        Pinger::new(pings, plan, Some(Arc::clone(&g)), tx.clone())
    })
    .subscribes::<Pong>()
    .publishes::<Ping>()
    .group("host-a");
    place_group(a.group("host-a").idle(idle), pinning, 0);

    let mut b = Bus::builder();
    b.stop_timeout(DRAIN_LIMIT);
    b.add(bridge_b)
        .backpressure::<Pong>(Backpressure::DropNewest)
        .group("host-b");
    b.actor("echo", |s: &mut Setup<'_>| {
        Echo::<Ping, Pong>::new(s.output())
    })
    .subscribes::<Ping>()
    .publishes::<Pong>()
    .group("host-b");
    place_group(b.group("host-b").idle(idle), pinning, 1);

    let (ra, rb) = start_both(a, b)?;
    let ready = wait_subscribed(&ra, "bridge-a", Ping::TOPIC)
        .and_then(|()| wait_subscribed(&rb, "bridge-b", Pong::TOPIC));
    let got = match ready {
        Ok(()) => {
            go.store(true, Ordering::Release);
            rx.recv_timeout(plan.hard_cap)
                .map_err(|_| format!("no result within {} (stuck)", secs(plan.hard_cap)))
        }
        Err(e) => Err(e),
    };
    let (report_a, report_b) = stop_both(ra, rb)?;
    let outcome = got?.map_err(|e| e.to_string())?;
    // With one message in flight the DropNewest edges never fill; check it.
    for (report, topic, from, to) in [
        (&report_a, Ping::TOPIC, "ping", "bridge-a"),
        (&report_b, Pong::TOPIC, "echo", "bridge-b"),
    ] {
        if let Some(e) = report.edge(topic, from, to).filter(|e| e.dropped > 0) {
            return Err(format!("{from} -> {to} dropped {} messages", e.dropped));
        }
    }
    Ok(outcome)
}

/// What the throughput publisher shares with the measuring thread.
#[derive(Debug, Default)]
struct FeedShared {
    t0: OnceLock<Instant>,
    /// Set by the measuring thread once the window has closed.
    stop: AtomicBool,
    /// Set once it has published its last message; then `published` holds.
    done: AtomicBool,
    published: AtomicU64,
}

/// Publishes `0, 1, ..` [`PER_POLL`] per poll, once `go` is set, until told to stop.
struct Feeder {
    out: Out<Data>,
    go: Arc<AtomicBool>,
    next: u64,
    done: bool,
    shared: Arc<FeedShared>,
}

impl Actor for Feeder {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.done || !self.go.load(Ordering::Relaxed) {
            return 0;
        }
        if self.next == 0 {
            let _ = self.shared.t0.set(Instant::now());
        }
        for n in self.next..self.next + PER_POLL {
            ctx.publish(self.out, Data::with(n));
        }
        self.next += PER_POLL;
        if self.shared.stop.load(Ordering::Relaxed) {
            self.done = true;
            self.shared.published.store(self.next, Ordering::Relaxed);
            self.shared.done.store(true, Ordering::Release);
        }
        PER_POLL as usize
    }
}

/// What the throughput sink shares with the measuring thread.
#[derive(Debug)]
struct SinkShared {
    received: AtomicU64,
    /// Messages that came with a counter not above the previous one (loopback should not
    /// reorder or duplicate).
    out_of_order: AtomicU64,
}

/// Takes its ring itself, a few thousand messages per poll, and counts.
struct Sink {
    inputs: Inputs<Data>,
    next: u64,
    received: u64,
    out_of_order: u64,
    shared: Arc<SinkShared>,
}

impl Actor for Sink {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        let (next, bad) = (&mut self.next, &mut self.out_of_order);
        let n = self.inputs.poll(SINK_BUDGET, |m| {
            if m.n >= *next {
                *next = m.n + 1;
            } else {
                *bad += 1;
            }
        });
        if n > 0 {
            self.received += n as u64;
            self.shared
                .out_of_order
                .store(self.out_of_order, Ordering::Relaxed);
            self.shared.received.store(self.received, Ordering::Release);
        }
        n
    }
}

/// The outcome of one throughput measurement.
#[derive(Debug)]
struct ThroughputOutcome {
    per_sec: f64,
    loss_pct: f64,
    msgs_per_datagram: f64,
}

fn throughput_case(single: bool, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let (case, loss, fill) = if single {
        (
            "throughput_single",
            "loss_single",
            "msgs_per_datagram_single",
        )
    } else {
        ("throughput_batch", "loss_batch", "msgs_per_datagram_batch")
    };
    match throughput(single, false, false, pinning, plan) {
        Ok(o) => {
            out.add(LLBUS, case, "msgs/s", o.per_sec);
            out.add(LLBUS, loss, "%", o.loss_pct);
            out.add(LLBUS, fill, "msgs", o.msgs_per_datagram);
        }
        Err(e) => {
            eprintln!("ERROR: {LLBUS} {case}: {e}");
            out.note(LLBUS, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

/// One throughput measurement on two fresh buses; see the module docs.
fn throughput(
    single: bool,
    mac: bool,
    reliable: bool,
    pinning: &Pinning,
    plan: &Plan,
) -> Result<ThroughputOutcome, String> {
    let psk = mac.then_some(MAC_KEY);
    let config_a = BridgeConfig {
        max_datagram: if single {
            Some(ONE_FRAME)
        } else {
            BridgeConfig::default().max_datagram
        },
        psk,
        ..BridgeConfig::default()
    };
    let bridge_a = Bridge::bind_with(loopback(), config_a)
        .map_err(|e| format!("cannot bind bridge A: {e}"))?
        .name("bridge-a");
    let config_b = BridgeConfig {
        psk,
        ..BridgeConfig::default()
    };
    let bridge_b = Bridge::bind_with(loopback(), config_b)
        .map_err(|e| format!("cannot bind bridge B: {e}"))?
        .name("bridge-b");
    let addr_a = bridge_a.local_addr();
    let (bridge_a, bridge_b) = if reliable {
        (
            bridge_a.export_reliable::<Data>(),
            bridge_b.import_reliable::<Data>(addr_a),
        )
    } else {
        (bridge_a.export::<Data>(), bridge_b.import::<Data>(addr_a))
    };

    let go = Arc::new(AtomicBool::new(false));
    let feed = Arc::new(FeedShared::default());
    let sink = Arc::new(SinkShared {
        received: AtomicU64::new(0),
        out_of_order: AtomicU64::new(0),
    });

    let mut a = Bus::builder();
    a.stop_timeout(DRAIN_LIMIT);
    // Declared first: each round the bridge sends what the feeder published the round before
    // (at most PER_POLL, within the bridge's budget), so its ring never overflows.
    a.add(bridge_a)
        .backpressure::<Data>(Backpressure::DropNewest)
        .group("host-a");
    let (g, f) = (Arc::clone(&go), Arc::clone(&feed));
    a.actor("feed", move |s: &mut Setup<'_>| Feeder {
        out: s.output(),
        go: Arc::clone(&g),
        next: 0,
        done: false,
        shared: Arc::clone(&f),
    })
    .publishes::<Data>()
    .group("host-a");
    place_group(a.group("host-a").idle(Idle::BusySpin), pinning, 0);

    let mut b = Bus::builder();
    b.stop_timeout(DRAIN_LIMIT);
    b.add(bridge_b).group("host-b");
    let k = Arc::clone(&sink);
    b.actor("sink", move |s: &mut Setup<'_>| Sink {
        inputs: s.inputs::<Data>(),
        next: 0,
        received: 0,
        out_of_order: 0,
        shared: Arc::clone(&k),
    })
    .takes::<Data>()
    .capacity::<Data>(SINK_CAPACITY)
    .group("host-b");
    place_group(b.group("host-b").idle(Idle::BusySpin), pinning, 1);

    let (ra, rb) = start_both(a, b)?;
    let run = wait_subscribed(&ra, "bridge-a", Data::TOPIC).and_then(|()| {
        go.store(true, Ordering::Release);
        let deadline = Instant::now() + plan.hard_cap;
        let started = wait_until(deadline, || feed.t0.get().is_some());
        // The window: the sink's count after the warm-up and a window later.
        let read = || (Instant::now(), sink.received.load(Ordering::Acquire));
        let window = started.then(|| {
            std::thread::sleep(plan.warmup);
            let opened = read();
            std::thread::sleep(plan.window);
            (opened, read())
        });
        feed.stop.store(true, Ordering::Relaxed);
        if !wait_until(deadline, || feed.done.load(Ordering::Acquire)) {
            return Err(format!(
                "the publisher did not finish within {}",
                secs(plan.hard_cap)
            ));
        }
        // Then until everything arrived, or nothing more arrived for SETTLE after something
        // did (what UDP lost). Nothing at all yet means bridge B's thread has not run (a
        // starved core on a shared VM): wait for it, up to the hard cap.
        let published = feed.published.load(Ordering::Relaxed);
        let mut seen = sink.received.load(Ordering::Acquire);
        let mut moved = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(2));
            let now = sink.received.load(Ordering::Acquire);
            if now != seen {
                (seen, moved) = (now, Instant::now());
            }
            let settled = now > 0 && moved.elapsed() >= SETTLE;
            if now >= published || settled || Instant::now() >= deadline {
                return Ok(window);
            }
        }
    });
    let (report_a, report_b) = stop_both(ra, rb)?;
    let window = run?;
    let ((t0, n0), (t1, n1)) = window.ok_or("the publisher never started")?;
    let received = sink.received.load(Ordering::Acquire);
    let out_of_order = sink.out_of_order.load(Ordering::Relaxed);
    if out_of_order > 0 {
        return Err(format!(
            "{out_of_order} messages arrived out of order or twice over loopback"
        ));
    }
    if let Some(e) = report_a
        .edge(Data::TOPIC, "feed", "bridge-a")
        .filter(|e| e.dropped > 0)
    {
        return Err(format!(
            "the publisher's ring to bridge A dropped {} messages",
            e.dropped
        ));
    }
    let sent = metric(&report_a, "bridge-a", "messages_out");
    let datagrams = metric(&report_a, "bridge-a", "datagrams_out");
    let arrived = metric(&report_b, "bridge-b", "messages_in");
    let published = feed.published.load(Ordering::Relaxed);
    if sent != published {
        return Err(format!(
            "bridge A sent {sent} of the {published} messages published"
        ));
    }
    if received == 0 {
        let nonzero = |r: &Report, actor: &str| {
            r.actor(actor)
                .map(|a| {
                    a.metrics
                        .iter()
                        .filter(|(_, v)| *v > 0)
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        return Err(format!(
            "nothing arrived at the sink within the hard cap: was bridge B's thread starved? ({arrived} messages in at bridge B, {sent} sent by bridge A; A: {}; B: {})",
            nonzero(&report_a, "bridge-a"),
            nonzero(&report_b, "bridge-b")
        ));
    }
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    Ok(ThroughputOutcome {
        per_sec: if secs > 0.0 {
            (n1 - n0) as f64 / secs
        } else {
            f64::NAN
        },
        loss_pct: if sent > 0 {
            100.0 * sent.saturating_sub(arrived) as f64 / sent as f64
        } else {
            f64::NAN
        },
        // Data datagrams only: the few control datagrams (acks, heartbeats) are not worth
        // subtracting at these counts.
        msgs_per_datagram: if datagrams > 0 {
            sent as f64 / datagrams as f64
        } else {
            f64::NAN
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt_plan() -> RttPlan {
        RttPlan {
            warmup: Duration::from_millis(5),
            window: Duration::from_millis(20),
            hard_cap: Duration::from_secs(20),
        }
    }

    #[test]
    fn raw_round_trips_spinning_and_blocking() {
        let pinning = Pinning::disabled("test");
        for blocking in [false, true] {
            for unconnected in [false, true] {
                let o = raw_round_trip(blocking, unconnected, &pinning, rtt_plan())
                    .expect("round trip");
                assert!(!o.histogram.is_empty());
            }
        }
    }

    #[test]
    fn bridges_round_trip_and_stream() {
        let pinning = Pinning::disabled("test");
        for (reliable, idle) in [
            (false, Idle::BusySpin),
            (true, Idle::BusySpin),
            (false, Idle::Park),
        ] {
            let o = llbus_round_trip(
                &pinning,
                rtt_plan(),
                &BridgeConfig::default(),
                reliable,
                idle,
            )
            .expect("round trip through the bridges");
            assert!(!o.histogram.is_empty());
        }
        let args = Args {
            suite: crate::harness::Suite::Udp,
            json: false,
            markdown: false,
            rounds: Some(1),
            quick: true,
            verbose: false,
            seed: None,
            plot: None,
        };
        let plan = plan(&args);
        // A loaded machine can deschedule the receiver for a whole quick window (a rate of 0):
        // some window within 20 s must see the messages move.
        let moving = |reliable: bool, single: bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let o = throughput(single, false, reliable, &pinning, &plan).expect("throughput");
                if o.per_sec > 0.0 || std::time::Instant::now() > deadline {
                    return o;
                }
            }
        };
        for single in [false, true] {
            let o = moving(false, single);
            assert!(o.per_sec > 0.0, "{o:?}");
            let per_datagram = o.msgs_per_datagram;
            if !single {
                let r = moving(true, single);
                assert!(r.per_sec > 0.0, "{r:?}");
            }
            if single {
                // One per data datagram; the few control datagrams pull the mean a little lower.
                assert!((0.9..=1.0).contains(&per_datagram), "{o:?}");
            } else {
                assert!(per_datagram > 1.0, "{o:?}");
            }
        }
    }

    #[test]
    fn one_frame_is_header_payload_and_token() {
        assert_eq!(ONE_FRAME, 88);
        let payload = llbus_net::payload_size(Data::TOPIC_ID, &Data::with(u64::MAX)).unwrap();
        assert_eq!(payload, PAYLOAD);
    }
}
