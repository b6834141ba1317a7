//! The `ipc` suite: llbus-ipc's shared-memory ring against the in-process ring, raw UDP
//! loopback and the UDP bridges, in one run.
//!
//! - `ring`: llbus's in-process `Ring`, two threads (the floor the suite's targets refer to).
//! - `shm-threads`: a llbus-ipc channel in `/dev/shm`, both ends in this process (two threads):
//!   the shared ring's own cost, validation and all.
//! - `shm-process`: the same channel with its other end in a second process (this binary
//!   re-executed with `LLBUS_BENCH_IPC_ECHO` set): the user's setting. Round trip: the echo
//!   process returns every ping. Throughput: the very loops every other stream runs
//!   (`drive::stream_send` here, `drive::stream_receive` in the echo process, which times the
//!   window and checks every value's order), with the window's closing and the rate sent back
//!   over the return channel.
//! - `udp-loopback`: two non-blocking UDP sockets on 127.0.0.1, spinning (raw UDP).
//! - `udp-bridge`: the round trip through two llbus bridges over loopback (the transport llbus
//!   offered between processes before llbus-ipc; the `udp` suite's `llbus` case).
//!
//! Every measurement runs a warm-up and then a fixed window, in a fresh random order per round
//! (the harness's `run_rounds`). All ends busy-spin (pinned to cores 0 and 1 when pinning
//! works). Values are u64 counters.

use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_ipc::{ChannelConfig, Pod, Receiver as ShmRx, Sender as ShmTx};

use crossbeam_utils::CachePadded;

use crate::drive::{
    round_trip, stream, stream_receive, stream_send, Plan, Receiver, RttPlan, Sender, StreamPlan,
    STOP,
};
use crate::harness::{
    human, latency_histogram, run_suite, secs, short, Args, Bound, Collector, Pinning, Spin, Stuck,
    Target, CORES,
};
use crate::ring::{WARMUP, WINDOW};

const SUITE: &str = "ipc";
const RING: &str = "ring";
const SHM_THREADS: &str = "shm-threads";
const SHM_PROCESS: &str = "shm-process";
const UDP: &str = "udp-loopback";
const BRIDGE: &str = "udp-bridge";
/// Slots per ring (every contender).
const CAPACITY: usize = 1024;
/// Items per batch in the batch throughput case.
const BATCH: usize = 64;
/// The variable that makes this binary the echo process, holding the channels' base name.
pub const ECHO_VAR: &str = "LLBUS_BENCH_IPC_ECHO";
/// Round-trip pings carry this bit; the echo returns them as they are.
const PING: u64 = 1 << 62;
/// Asks the echo to receive a stream (the drivers' receiving half); the low bits carry its
/// plan ([`stream_command`]). The echo answers [`READY`], then [`CLOSED`] when its window
/// closes, then, after the stream's `STOP`, [`RESULT`] followed by the rate's `f64` bits (or
/// [`FAILED`]).
const STREAM: u64 = 1 << 61;
/// Makes the echo process exit.
const QUIT: u64 = 1 << 60;
/// The echo's answers in a stream.
const READY: u64 = 1 << 59;
const CLOSED: u64 = 1 << 58;
const RESULT: u64 = 1 << 57;
const FAILED: u64 = 1 << 56;

/// One u64 per slot.
#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "bench.ipc")]
#[repr(transparent)]
struct Val(u64);

// SAFETY: a transparent u64: no padding, no pointers, every bit pattern valid.
unsafe impl llbus_ipc::bytemuck::Zeroable for Val {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Val {}

const TARGETS: [Target; 2] = [
    Target {
        what: "rtt p50 shm-process / ring",
        num: (SHM_PROCESS, "rtt_p50"),
        den: (RING, "rtt_p50"),
        bound: Bound::RatioAtMost(1.3),
    },
    Target {
        what: "throughput batch shm-process / ring",
        num: (SHM_PROCESS, "throughput_batch"),
        den: (RING, "throughput_batch"),
        bound: Bound::RatioAtLeast(0.5),
    },
];

/// This suite's sizes: 9 rounds of the ring suite's windows within 90 s.
fn plan(args: &Args) -> Plan {
    Plan::new(args, 9, WARMUP, WINDOW, Duration::from_secs(90))
}

// ---------------------------------------------------------------------------------------------
// The shared-memory ends as the drivers' Sender and Receiver.

impl Sender for ShmTx<Val, Pod> {
    #[inline]
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        loop {
            match self.try_send(&Val(v)) {
                Ok(true) => return Ok(()),
                Ok(false) => spin.tick()?,
                Err(_) => return Err(Stuck),
            }
        }
    }

    #[inline]
    fn send_batch(&mut self, items: &[u64]) -> usize {
        // A slice of plain data: one copy per run of slots (`Val` is a transparent u64).
        self.send_slice(llbus_ipc::bytemuck::cast_slice(items))
            .unwrap_or(0)
    }
}

impl Receiver for ShmRx<Val, Pod> {
    #[inline]
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        loop {
            let mut got = None;
            match self.recv_each(1, |v| got = Some(v.0)) {
                Ok(_) => {
                    if let Some(v) = got {
                        return Ok(v);
                    }
                    spin.tick()?;
                }
                Err(_) => return Err(Stuck),
            }
        }
    }

    #[inline]
    fn recv_batch(&mut self, max: usize, mut f: impl FnMut(u64)) -> usize {
        // Read straight from the slots, a run at a time, as the in-process ring's `pop_batch`.
        self.recv_each(max, |v| f(v.0)).unwrap_or(0)
    }
}

/// A UDP socket connected to its peer on loopback, non-blocking.
struct Udp(UdpSocket);

impl Udp {
    fn pair() -> std::io::Result<(Udp, Udp)> {
        let a = UdpSocket::bind("127.0.0.1:0")?;
        let b = UdpSocket::bind("127.0.0.1:0")?;
        a.connect(b.local_addr()?)?;
        b.connect(a.local_addr()?)?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        Ok((Udp(a), Udp(b)))
    }

    fn try_clone(&self) -> std::io::Result<Udp> {
        self.0.try_clone().map(Udp)
    }
}

impl Sender for Udp {
    fn send(&mut self, v: u64, spin: &mut Spin) -> Result<(), Stuck> {
        while self.0.send(&v.to_le_bytes()).is_err() {
            spin.tick()?;
        }
        Ok(())
    }
}

impl Receiver for Udp {
    fn recv(&mut self, spin: &mut Spin) -> Result<u64, Stuck> {
        let mut buf = [0u8; 8];
        loop {
            if let Ok(8) = self.0.recv(&mut buf) {
                return Ok(u64::from_le_bytes(buf));
            }
            spin.tick()?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Channels.

fn config() -> ChannelConfig {
    ChannelConfig {
        capacity: CAPACITY,
        ..ChannelConfig::default()
    }
}

/// Removes a channel's file on drop.
struct FileGuard(std::path::PathBuf);

impl Drop for FileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Both ends of one channel, and the guard that removes its file.
type ShmPair = (ShmTx<Val, Pod>, ShmRx<Val, Pod>, FileGuard);

fn shm_pair(name: &str) -> Result<ShmPair, String> {
    let guard = FileGuard(config().path(name));
    let tx = ShmTx::<Val, Pod>::create(name, &config()).map_err(|e| e.to_string())?;
    let rx = ShmRx::<Val, Pod>::open(name, &config()).map_err(|e| e.to_string())?;
    Ok((tx, rx, guard))
}

/// Opens channel `name` for reading, retrying until `deadline`.
fn open_until(name: &str, deadline: Instant) -> Result<ShmRx<Val, Pod>, String> {
    loop {
        match ShmRx::<Val, Pod>::open(name, &config()) {
            Ok(rx) => return Ok(rx),
            Err(e) if Instant::now() > deadline => return Err(format!("{name}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// The echo process, killed and its files removed on drop.
struct Echo {
    child: Child,
    tx: ShmTx<Val, Pod>,
    rx: ShmRx<Val, Pod>,
    _files: [FileGuard; 2],
}

impl Echo {
    fn start(pinning: &Pinning) -> Result<Echo, String> {
        let base = format!("bench-{}", std::process::id());
        let ping = format!("{base}-ping");
        let files = [
            FileGuard(config().path(&ping)),
            FileGuard(config().path(&format!("{base}-pong"))),
        ];
        let tx = ShmTx::<Val, Pod>::create(&ping, &config()).map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.env(ECHO_VAR, &base)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if pinning.enabled() {
            cmd.env("LLBUS_BENCH_IPC_CORE", CORES[1].to_string());
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn the echo process: {e}"))?;
        let mut echo = Echo {
            child,
            tx,
            rx: open_until(
                &format!("{base}-pong"),
                Instant::now() + Duration::from_secs(10),
            )?,
            _files: files,
        };
        if pinning.enabled() && llbus::pin_to_core(CORES[0]).is_err() {
            eprintln!("ipc: could not pin to core {}", CORES[0]);
        }
        // Wait until the echo answers.
        let mut spin = Spin::until(Instant::now() + Duration::from_secs(10));
        echo.tx.send(PING, &mut spin).map_err(|e| e.to_string())?;
        let v = echo.rx.recv(&mut spin).map_err(|e| e.to_string())?;
        if v != PING {
            return Err(format!("echo answered {v:#x}"));
        }
        Ok(echo)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let mut spin = Spin::until(Instant::now() + Duration::from_millis(100));
        let _ = Sender::send(&mut self.tx, QUIT, &mut spin);
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The echo process's main: returns the exit code. Spins on the ping channel; answers pings,
/// receives streams with the drivers' own receiving loop, and quits on `QUIT`, when its parent
/// is gone, or after 10 min.
pub fn echo_main(base: &str) -> i32 {
    if let Some(core) = std::env::var("LLBUS_BENCH_IPC_CORE")
        .ok()
        .and_then(|c| c.parse().ok())
    {
        let _ = llbus::pin_to_core(core);
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let Ok(rx) = open_until(&format!("{base}-ping"), deadline) else {
        return 2;
    };
    let Ok(tx) = ShmTx::<Val, Pod>::create(&format!("{base}-pong"), &config()) else {
        return 2;
    };
    // Each end on cache lines of its own, as in the drivers.
    let (mut rx, mut tx) = (CachePadded::new(rx), CachePadded::new(tx));
    let (mut idle, mut turns, mut served) = (0u64, 0u64, 0u64);
    let mut buf = [Val(0); BATCH];
    // NB: the clock is read every 1024 turns, not every turn: a read costs more than a turn
    // that finds the ring empty (docs/PERFORMANCE.md, "Reading the clock").
    while turns % 1024 != 0 || Instant::now() < deadline {
        turns += 1;
        let got = match rx.recv_slice(&mut buf) {
            Ok(n) => n,
            Err(_) => return 4,
        };
        if got == 0 {
            idle += 1;
            if idle % (1 << 20) == 0
                && !matches!(rx.heartbeat(true), llbus_ipc::PeerState::Alive(_))
            {
                return 3;
            }
            std::hint::spin_loop();
            continue;
        }
        idle = 0;
        served += 1;
        if served % 1024 == 0 {
            tx.heartbeat(false);
        }
        // Commands come one at a time: the parent waits for each answer.
        let v = buf[got - 1].0;
        if v == STOP {
            // The end of a stream whose receiving loop had already given up.
            continue;
        }
        let answer = |tx: &mut ShmTx<Val, Pod>, v: u64| {
            let mut spin = Spin::until(Instant::now() + Duration::from_secs(10));
            Sender::send(tx, v, &mut spin).is_ok()
        };
        if v & PING != 0 {
            // The round trip's hot path: no clock read, as in the drivers' echo.
            loop {
                match tx.try_send(&Val(v)) {
                    Ok(true) => break,
                    Ok(false) => std::hint::spin_loop(),
                    Err(_) => return 5,
                }
            }
        } else if v & STREAM != 0 {
            let plan = stream_plan_of(v);
            let hard = Instant::now() + plan.hard_cap;
            if !answer(&mut tx, READY) {
                return 5;
            }
            let mut sent_closed = true;
            let outcome = stream_receive(&mut *rx, &plan, hard, || {
                sent_closed = answer(&mut tx, CLOSED);
            });
            let ok = match outcome {
                Ok(Some(o)) if sent_closed => {
                    answer(&mut tx, RESULT) && answer(&mut tx, o.per_sec.to_bits())
                }
                _ => answer(&mut tx, FAILED),
            };
            if !ok {
                return 5;
            }
        } else if v & QUIT != 0 {
            return 0;
        }
    }
    0
}

/// The command that asks the echo for a stream of `plan`: batch size, milliseconds of warm-up
/// and window, and whole seconds of hard cap (rounded up), 14 bits each (every plan of the
/// suites fits).
fn stream_command(plan: &StreamPlan) -> u64 {
    let field = |v: u64| v.min(0x3fff);
    STREAM
        | field(plan.batch.map_or(0, |b| b as u64))
        | field(plan.warmup.as_millis() as u64) << 14
        | field(plan.window.as_millis() as u64) << 28
        | field(plan.hard_cap.as_secs_f64().ceil() as u64) << 42
}

/// The plan a [`stream_command`] carries.
fn stream_plan_of(command: u64) -> StreamPlan {
    let field = |shift: u32| (command >> shift) & 0x3fff;
    StreamPlan {
        batch: match field(0) {
            0 => None,
            b => Some(b as usize),
        },
        warmup: Duration::from_millis(field(14)),
        window: Duration::from_millis(field(28)),
        hard_cap: Duration::from_secs(field(42)),
    }
}

// ---------------------------------------------------------------------------------------------
// The cases.

/// Records a round trip in the collector (percentiles, and the histogram for the picture).
fn record_rtt(
    name: &'static str,
    r: Result<crate::drive::RttOutcome, String>,
    out: &mut Collector,
) {
    out.add_rtt(name, r.as_ref().map(|o| &o.histogram));
}

fn record_stream(
    name: &'static str,
    case: &'static str,
    r: Result<crate::drive::StreamOutcome, String>,
    out: &mut Collector,
) {
    match r {
        Ok(o) => out.add(name, case, "msgs/s", o.per_sec),
        Err(e) => {
            eprintln!("ERROR: {name} {case}: {e}");
            out.note(name, case, "msgs/s", format!("FAILED: {e}"));
        }
    }
}

fn stream_plan(plan: &Plan, batch: bool) -> StreamPlan {
    plan.stream(batch.then_some(BATCH))
}

const PHASES: usize = 3;

fn ring_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase == 0 {
        let (a_tx, b_rx) = llbus::Ring::<u64>::new(CAPACITY);
        let (b_tx, a_rx) = llbus::Ring::<u64>::new(CAPACITY);
        let r = round_trip(pinning, (a_tx, a_rx), (b_rx, b_tx), plan.rtt);
        record_rtt(RING, r.map_err(|e| e.to_string()), out);
    } else {
        let batch = phase == 2;
        let (tx, rx) = llbus::Ring::<u64>::new(CAPACITY);
        let r = stream(pinning, tx, rx, stream_plan(plan, batch));
        record_stream(
            RING,
            stream_case_name(batch),
            r.map_err(|e| e.to_string()),
            out,
        );
    }
}

fn stream_case_name(batch: bool) -> &'static str {
    if batch {
        "throughput_batch"
    } else {
        "throughput_single"
    }
}

fn shm_threads_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let base = format!("bench-{}-threads", std::process::id());
    let r = (|| -> Result<(), String> {
        if phase == 0 {
            let (a_tx, b_rx, _g1) = shm_pair(&format!("{base}-a"))?;
            let (b_tx, a_rx, _g2) = shm_pair(&format!("{base}-b"))?;
            let r = round_trip(pinning, (a_tx, a_rx), (b_rx, b_tx), plan.rtt);
            record_rtt(SHM_THREADS, r.map_err(|e| e.to_string()), out);
        } else {
            let batch = phase == 2;
            let (tx, rx, _g) = shm_pair(&format!("{base}-s"))?;
            let r = stream(pinning, tx, rx, stream_plan(plan, batch));
            record_stream(
                SHM_THREADS,
                stream_case_name(batch),
                r.map_err(|e| e.to_string()),
                out,
            );
        }
        Ok(())
    })();
    if let Err(e) = r {
        eprintln!("ERROR: {SHM_THREADS}: {e}");
        out.note(SHM_THREADS, "rtt_p50", "ns", format!("FAILED: {e}"));
    }
}

/// The round trip to the echo process, timed here.
fn process_rtt(echo: &mut Echo, plan: RttPlan) -> Result<crate::drive::RttOutcome, String> {
    let mut histogram = latency_histogram();
    let hard = Instant::now() + plan.hard_cap;
    let mut spin = Spin::until(hard);
    let warm_until = Instant::now() + plan.warmup;
    let mut i = 0u64;
    while Instant::now() < warm_until {
        echo.tx
            .send(PING | i, &mut spin)
            .map_err(|e| e.to_string())?;
        echo.rx.recv(&mut spin).map_err(|e| e.to_string())?;
        i += 1;
    }
    let window_end = Instant::now() + plan.window;
    loop {
        let t0 = Instant::now();
        if t0 >= window_end {
            break;
        }
        i += 1;
        echo.tx
            .send(PING | i, &mut spin)
            .map_err(|e| e.to_string())?;
        let v = echo.rx.recv(&mut spin).map_err(|e| e.to_string())?;
        let rtt = t0.elapsed().as_nanos() as u64;
        if v != PING | i {
            return Err(format!("echo {v:#x}, sent {:#x}", PING | i));
        }
        let _ = histogram.record(rtt.max(1));
    }
    Ok(crate::drive::RttOutcome { histogram })
}

/// A stream to the echo process: this thread runs the drivers' sending loop
/// ([`stream_send`]), the echo process their receiving loop ([`stream_receive`]), which times
/// the window and checks every value's order, exactly as in [`stream`] between two threads; the
/// window's closing and the rate come back over the pong channel.
fn process_stream(
    echo: &mut Echo,
    plan: StreamPlan,
) -> Result<crate::drive::StreamOutcome, String> {
    let hard = Instant::now() + plan.hard_cap;
    let mut spin = Spin::until(hard);
    let Echo { tx, rx, .. } = echo;
    Sender::send(tx, stream_command(&plan), &mut spin).map_err(|e| e.to_string())?;
    let v = rx.recv(&mut spin).map_err(|e| e.to_string())?;
    if v != READY {
        return Err(format!("echo answered {v:#x} to a stream request"));
    }
    let (mut tx, mut rx) = (CachePadded::new(tx), CachePadded::new(rx));
    // Asked once per 4096 values or 64 batches, as the in-process stop flag is. Any answer
    // stops the stream: `CLOSED`, or `FAILED` from a receiving loop that gave up.
    let mut answer = None;
    stream_send(&mut **tx, &plan, hard, || {
        if answer.is_none() {
            let mut got = [Val(0); 1];
            if let Ok(1) = rx.recv_slice(&mut got) {
                answer = Some(got[0].0);
            }
        }
        answer.is_some()
    })
    .map_err(|e| e.to_string())?;
    if answer != Some(CLOSED) {
        return Err(format!(
            "the echo process's receiving loop failed (answered {:#x})",
            answer.unwrap_or_default()
        ));
    }
    match rx.recv(&mut spin).map_err(|e| e.to_string())? {
        RESULT => {
            let bits = rx.recv(&mut spin).map_err(|e| e.to_string())?;
            Ok(crate::drive::StreamOutcome {
                per_sec: f64::from_bits(bits),
            })
        }
        v => Err(format!(
            "the echo process's receiving loop failed (answered {v:#x})"
        )),
    }
}

fn shm_process_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    // The echo process is started per measurement, so each round pays the same setup and
    // nothing stays running between them; pinning of this thread is undone at the end.
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let mut echo = Echo::start(pinning)?;
            match phase {
                0 => record_rtt(SHM_PROCESS, process_rtt(&mut echo, plan.rtt), out),
                p => {
                    let batch = p == 2;
                    let r = process_stream(&mut echo, stream_plan(plan, batch));
                    record_stream(SHM_PROCESS, stream_case_name(batch), r, out);
                }
            }
            Ok::<(), String>(())
        })
        .join()
        .unwrap_or_else(|_| Err("the measuring thread panicked".to_owned()))
    });
    if let Err(e) = r {
        eprintln!("ERROR: {SHM_PROCESS}: {e}");
        out.note(SHM_PROCESS, "rtt_p50", "ns", format!("FAILED: {e}"));
    }
}

fn udp_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase != 0 {
        return;
    }
    let r = (|| -> Result<crate::drive::RttOutcome, String> {
        let (a, b) = Udp::pair().map_err(|e| e.to_string())?;
        let (a2, b2) = (
            a.try_clone().map_err(|e| e.to_string())?,
            b.try_clone().map_err(|e| e.to_string())?,
        );
        round_trip(pinning, (a, a2), (b, b2), plan.rtt).map_err(|e| e.to_string())
    })();
    record_rtt(UDP, r, out);
}

/// The round trip through two llbus bridges over loopback (the `udp` suite's `llbus`).
fn bridge_case(phase: usize, pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    if phase != 0 {
        return;
    }
    let config = llbus_net::BridgeConfig::default();
    record_rtt(
        BRIDGE,
        crate::udp::llbus_round_trip(pinning, plan.rtt, &config, false, llbus::Idle::BusySpin),
        out,
    );
}

type CaseFn = fn(usize, &Pinning, &Plan, &mut Collector);

const CONTENDERS: &[CaseFn] = &[
    ring_case,
    shm_threads_case,
    shm_process_case,
    udp_case,
    bridge_case,
];

/// The contenders' names, in [`CONTENDERS`]' order.
const NAMES: &[&str] = &[RING, SHM_THREADS, SHM_PROCESS, UDP, BRIDGE];

/// Runs the suite, prints its figures and returns what it collected.
pub fn run(args: &Args, pinning: &Pinning, seed: u64) -> Collector {
    let plan = plan(args);
    let started = Instant::now();
    human(
        args,
        &format!(
            "== ipc: shared-memory ring (threads; a second process) against the in-process \
             ring, raw UDP loopback and the UDP bridges ==\n\
             threads: {}\n\
             plan: {} rounds in random order (seed {seed}); per round and impl: round trips \
             and throughput streams (single values; batches of {BATCH}), each {} of warm-up \
             then {} measured\n",
            pinning.describe(),
            plan.rounds,
            short(plan.warmup),
            short(plan.window),
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
            "ipc: {rounds_done} rounds in {}; figures are medians over rounds\n\n",
            secs(started.elapsed())
        ),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_command_carries_its_plan() {
        for batch in [None, Some(1), Some(64), Some(0x3fff)] {
            let plan = StreamPlan {
                batch,
                warmup: Duration::from_millis(50),
                window: Duration::from_millis(200),
                hard_cap: Duration::from_secs(20),
            };
            let command = stream_command(&plan);
            assert_ne!(command & STREAM, 0);
            assert_eq!(
                command & (PING | QUIT),
                0,
                "not mistaken for another command"
            );
            let back = stream_plan_of(command);
            assert_eq!(back.batch, batch);
            assert_eq!(
                (back.warmup, back.window, back.hard_cap),
                (plan.warmup, plan.window, plan.hard_cap)
            );
        }
    }

    /// The echo loop in a thread of this test (a test binary cannot re-execute itself as the
    /// echo process), and an [`Echo`] whose child is a stand-in `sleep`.
    fn echo_in_a_thread(test: &str) -> (Echo, std::thread::JoinHandle<i32>) {
        let base = format!("bench-test-{}-{test}", std::process::id());
        let ping = format!("{base}-ping");
        let files = [
            FileGuard(config().path(&ping)),
            FileGuard(config().path(&format!("{base}-pong"))),
        ];
        let tx = ShmTx::<Val, Pod>::create(&ping, &config()).expect("ping channel");
        let thread = std::thread::spawn({
            let base = base.clone();
            move || echo_main(&base)
        });
        let rx = open_until(
            &format!("{base}-pong"),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("the echo opens its return channel");
        let child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let echo = Echo {
            child,
            tx,
            rx,
            _files: files,
        };
        (echo, thread)
    }

    fn quick(batch: Option<usize>) -> StreamPlan {
        StreamPlan {
            batch,
            warmup: Duration::from_millis(5),
            window: Duration::from_millis(20),
            hard_cap: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_echo_receives_streams_with_the_drivers_loop_and_returns_pings() {
        let (mut echo, thread) = echo_in_a_thread("streams");
        for batch in [None, Some(BATCH)] {
            let o = process_stream(&mut echo, quick(batch)).expect("the stream is measured");
            assert!(o.per_sec.is_finite() && o.per_sec > 0.0, "{batch:?}: {o:?}");
        }
        let rtt = process_rtt(
            &mut echo,
            RttPlan {
                warmup: Duration::from_millis(2),
                window: Duration::from_millis(10),
                hard_cap: Duration::from_secs(10),
            },
        )
        .expect("round trips");
        assert!(!rtt.histogram.is_empty());
        drop(echo); // sends QUIT
        assert_eq!(thread.join().expect("the echo loop returns"), 0);
    }

    #[test]
    fn a_value_out_of_order_fails_the_echo_s_stream_and_it_says_so() {
        let (mut echo, thread) = echo_in_a_thread("order");
        let mut spin = Spin::until(Instant::now() + Duration::from_secs(10));
        let plan = StreamPlan {
            hard_cap: Duration::from_secs(10),
            ..quick(Some(4))
        };
        Sender::send(&mut echo.tx, stream_command(&plan), &mut spin).expect("command");
        assert_eq!(echo.rx.recv(&mut spin), Ok(READY));
        assert_eq!(Sender::send_batch(&mut echo.tx, &[0, 1, 5, 6]), 4);
        // At once, long before the echo's own 10 s cap would end its stream.
        let mut soon = Spin::until(Instant::now() + Duration::from_secs(2));
        assert_eq!(echo.rx.recv(&mut soon), Ok(FAILED));
        // And it serves the next request.
        let o = process_stream(&mut echo, quick(Some(BATCH))).expect("a sound stream after");
        assert!(o.per_sec > 0.0);
        drop(echo);
        assert_eq!(thread.join().expect("the echo loop returns"), 0);
    }
}
