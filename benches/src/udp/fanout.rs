//! Fan-out to 1 and to 8 subscribers: `llbus` (one unicast datagram per subscriber per
//! batch) against `llbus-multicast` (`Bridge::export_multicast`: one datagram to the group for
//! every subscriber that receives it), in one process.
//!
//! Where the process may make network namespaces (root, `ip`, `/dev/net/tun`), the publisher
//! and each subscriber are hosts of their own on a wire (`tests::netns::Hosts`: a namespace
//! each, a TUN device, and a thread that forwards packets between them as a switch would),
//! as on a LAN: the publisher's kernel sends each datagram once onto its device and the
//! receiving hosts' kernels deliver it. On loopback instead (`LLBUS_BENCH_FANOUT=loopback`, or
//! when namespaces cannot be made; the run says so), the receivers' kernel work happens in the
//! sender's system call: a datagram sent to the group is delivered to every member socket, and
//! every parked subscriber thread is woken, within the publisher thread's `sendto`, so its CPU
//! time counts the receivers' delivery too (docs/PERFORMANCE.md, "Multicast on one host").
//!
//! A publisher bus (a feed actor publishing [`RATE`] 32-byte messages a second, every
//! millisecond, and the bridge, in one group thread that parks when idle) serves `n`
//! subscriber buses (a bridge and a sink each, one parked group thread each). Once every
//! subscription shows and [`SETTLE`] passed (multicast subscribers have said they receive the
//! group by then), a window of the plan's length is measured:
//! - `publisher_ns_per_msg_N`: the publisher thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`,
//!   read by the feed on that thread every tick) over the window / messages published in it;
//! - `datagrams_per_msg_N`: datagrams the publisher's bridge sent / messages it sent, in the
//!   window (heartbeats and handshake answers included);
//! - `oneway_p50` (1 subscriber only): publish to delivery at the sink, `CLOCK_REALTIME` on
//!   both sides (one process, so one clock), median over the window.
//!
//! The two implementations are measured back to back in the same phase, in an order that
//! alternates from round to round.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use llbus::{Actor, Backpressure, Bus, Context, Idle, Message, Out, RunningBus, Setup};
use llbus_net::{realtime_ns, Allowlist, Bridge};
use serde::{Deserialize, Serialize};

use super::{Collector, Pinning, Plan, LLBUS};
use crate::onbus::{metric, stop_and_join, wait_until};

/// The `impl` name of the multicast export.
pub const MULTICAST: &str = "llbus-multicast";

/// Messages a second the feed publishes.
const RATE: u64 = 20_000;

/// After every subscription shows, how long before the window opens.
const SETTLE: Duration = Duration::from_millis(300);

/// How long the subscriptions may take to show.
const SUBSCRIBE_LIMIT: Duration = Duration::from_secs(5);

/// The subscriber counts measured.
const FANOUT: [usize; 2] = [1, 8];

/// A 32-byte message with its publish time.
#[derive(Message, Serialize, Deserialize, Clone, Copy, Debug)]
#[message(topic = "bench.udp.fanout")]
struct Tick {
    n: u64,
    sent_ns: i64,
    a: u64,
    b: u64,
}

/// The calling thread's CPU time, ns (0 if the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable `timespec`; `clock_gettime` only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// What the feed tells the measuring thread: its thread's CPU time and messages published,
/// as of its last tick.
#[derive(Default)]
struct FeedState {
    cpu_ns: AtomicU64,
    published: AtomicU64,
}

struct Feed {
    out: Out<Tick>,
    n: u64,
    per_tick: u64,
    state: Arc<FeedState>,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        for _ in 0..self.per_tick {
            self.n += 1;
            let tick = Tick {
                n: self.n,
                sent_ns: realtime_ns(),
                a: 0,
                b: 0,
            };
            ctx.publish(self.out, tick);
        }
        self.state.published.store(self.n, Ordering::Relaxed);
        self.state.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
}

/// A subscriber's sink: counts, and (the first one, while `recording`) times each message.
struct Sink {
    got: Arc<AtomicU64>,
    latency: Option<Arc<Mutex<Histogram<u64>>>>,
    recording: Arc<AtomicBool>,
}

impl Actor for Sink {
    type In = Tick;
    fn on_message(&mut self, t: Tick, _ctx: &mut Context<'_>) {
        self.got.fetch_add(1, Ordering::Relaxed);
        if let (Some(h), true) = (&self.latency, self.recording.load(Ordering::Relaxed)) {
            let ns = u64::try_from(realtime_ns().saturating_sub(t.sent_ns)).unwrap_or(0);
            let _ = h
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(ns.max(1));
        }
    }
}

/// One measurement's figures.
struct Fanout {
    ns_per_msg: f64,
    datagrams_per_msg: f64,
    oneway_p50: Option<f64>,
}

/// Where the publisher and the subscribers run.
enum Net {
    /// Host 0 publishes, host `k + 1` is subscriber `k`.
    Wire(tests::netns::Hosts),
    /// All on loopback, subscriber `k` at `127.0.0.(10 + k)`.
    Loopback,
}

impl Net {
    /// Hosts on a wire for a publisher and `n` subscribers, unless `LLBUS_BENCH_FANOUT` is
    /// `loopback` or namespaces cannot be made (said once, on stderr).
    fn for_subscribers(n: usize) -> Net {
        static SAID: AtomicBool = AtomicBool::new(false);
        let say = |what: String| {
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!("udp fan-out: {what}");
            }
        };
        if std::env::var("LLBUS_BENCH_FANOUT").is_ok_and(|v| v == "loopback") {
            say("on loopback (LLBUS_BENCH_FANOUT=loopback): the publisher's time includes the receivers' kernel delivery".into());
            return Net::Loopback;
        }
        match tests::netns::Hosts::create(n + 1) {
            Ok(hosts) => {
                say("publisher and subscribers on hosts of their own (network namespaces on a forwarding wire)".into());
                Net::Wire(hosts)
            }
            Err(e) => {
                say(format!("on loopback, network namespaces unavailable ({e}): the publisher's time includes the receivers' kernel delivery"));
                Net::Loopback
            }
        }
    }

    /// The publisher's address (port 0: any).
    fn publisher(&self) -> SocketAddr {
        match self {
            Net::Wire(hosts) => SocketAddr::from((hosts.addr(0), 0)),
            Net::Loopback => SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// Subscriber `k`'s address (port 0). On loopback an address each: a publisher admits
    /// at most 4 subscribers of a topic per host.
    fn subscriber(&self, k: usize) -> SocketAddr {
        match self {
            Net::Wire(hosts) => SocketAddr::from((hosts.addr(k + 1), 0)),
            Net::Loopback => {
                let host = u8::try_from(10 + k).unwrap_or(u8::MAX);
                SocketAddr::from(([127, 0, 0, host], 0))
            }
        }
    }

    /// Runs `f` (which binds sockets and starts a bus, whose threads inherit the namespace)
    /// on a thread inside host `i`'s namespace; on loopback, here.
    fn on_host<R: Send>(
        &self,
        i: usize,
        f: impl FnOnce() -> Result<R, String> + Send,
    ) -> Result<R, String> {
        let Net::Wire(hosts) = self else {
            return f();
        };
        let path = format!("/run/netns/{}", hosts.ns_name(i));
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
                // SAFETY: `ns` is an open namespace file; setns moves only this thread (and
                // the threads it spawns) into it.
                let rc = unsafe {
                    libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET)
                };
                if rc != 0 {
                    return Err(format!(
                        "setns into {path}: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                f()
            })
            .join()
            .map_err(|_| format!("the thread starting host {i} panicked"))?
        })
    }
}

/// A multicast group of this measurement's own (a free port).
fn fresh_group() -> Result<SocketAddr, String> {
    let probe = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    let port = probe
        .local_addr()
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    Ok(SocketAddr::from(([239, 255, 77, 1], port)))
}

fn start_publisher(
    multicast: bool,
    state: &Arc<FeedState>,
    at: SocketAddr,
) -> Result<(RunningBus, SocketAddr), String> {
    // The subscribers are on other hosts of the wire (or on loopback).
    let bridge = Bridge::bind(at)
        .map_err(|e| format!("bind: {e}"))?
        .name("pub")
        .allow(Allowlist::any());
    let bridge = if multicast {
        bridge.export_multicast::<Tick>(fresh_group()?)
    } else {
        bridge.export::<Tick>()
    };
    let addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.group("pub").idle(Idle::Park);
    let state = Arc::clone(state);
    bus.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
        per_tick: RATE / 1000,
        state: Arc::clone(&state),
    })
    .group("pub")
    .tick_every(Duration::from_millis(1))
    .publishes::<Tick>();
    // The bridge shares the feed's thread: a full ring drops (never at this rate) rather than
    // waiting on itself.
    bus.add(bridge)
        .backpressure::<Tick>(Backpressure::DropNewest)
        .group("pub");
    let running = bus.start().map_err(|e| format!("publisher: {e}"))?;
    Ok((running, addr))
}

fn start_subscriber(
    k: usize,
    at: SocketAddr,
    publisher: SocketAddr,
    got: &Arc<AtomicU64>,
    latency: Option<&Arc<Mutex<Histogram<u64>>>>,
    recording: &Arc<AtomicBool>,
) -> Result<RunningBus, String> {
    let bridge = Bridge::bind(at)
        .map_err(|e| format!("bind: {e}"))?
        .name("sub")
        .import::<Tick>(publisher);
    let mut bus = Bus::builder();
    bus.group("sub").idle(Idle::Park);
    let (got, latency, recording) = (
        Arc::clone(got),
        latency.map(Arc::clone),
        Arc::clone(recording),
    );
    bus.actor("sink", move |_: &mut Setup<'_>| Sink {
        got: Arc::clone(&got),
        latency: latency.clone(),
        recording: Arc::clone(&recording),
    })
    .group("sub")
    .subscribes::<Tick>();
    bus.add(bridge).group("sub");
    bus.start().map_err(|e| format!("subscriber {k}: {e}"))
}

/// Publishes to `n` subscribers, by unicast or to a group, and measures the window.
fn fanout(multicast: bool, n: usize, net: &Net, plan: &Plan) -> Result<Fanout, String> {
    let state = Arc::new(FeedState::default());
    let (publisher, addr) =
        net.on_host(0, || start_publisher(multicast, &state, net.publisher()))?;
    let recording = Arc::new(AtomicBool::new(false));
    let latency = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?,
    ));
    let mut subscribers = Vec::with_capacity(n);
    let got = Arc::new(AtomicU64::new(0));
    let result = (|| {
        for k in 0..n {
            let timed = (k == 0).then_some(&latency);
            subscribers.push(net.on_host(k + 1, || {
                start_subscriber(k, net.subscriber(k), addr, &got, timed, &recording)
            })?);
        }
        let gauge = "subscribers.bench.udp.fanout";
        let subscribed = wait_until(Instant::now() + SUBSCRIBE_LIMIT, || {
            metric(&publisher.report(), "pub", gauge) == n as u64
        });
        if !subscribed {
            return Err(format!(
                "{n} subscriptions did not show within {SUBSCRIBE_LIMIT:?}"
            ));
        }
        std::thread::sleep(SETTLE);
        let read = || {
            let r = publisher.report();
            (
                state.cpu_ns.load(Ordering::Relaxed),
                state.published.load(Ordering::Relaxed),
                metric(&r, "pub", "datagrams_out"),
                metric(&r, "pub", "messages_out"),
            )
        };
        let before = read();
        recording.store(true, Ordering::Relaxed);
        std::thread::sleep(plan.window);
        recording.store(false, Ordering::Relaxed);
        let after = read();
        let published = after.1.saturating_sub(before.1);
        let sent = after.3.saturating_sub(before.3);
        if published == 0 || sent == 0 {
            return Err("nothing published in the window".into());
        }
        let h = latency.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(Fanout {
            ns_per_msg: after.0.saturating_sub(before.0) as f64 / published as f64,
            datagrams_per_msg: after.2.saturating_sub(before.2) as f64 / sent as f64,
            oneway_p50: (!h.is_empty()).then(|| h.value_at_quantile(0.5) as f64),
        })
    })();
    for s in subscribers {
        stop_and_join(s, "fan-out subscriber")?;
    }
    stop_and_join(publisher, "fan-out publisher")?;
    result
}

/// Records one measurement under `name`.
fn record(name: &'static str, n: usize, result: Result<Fanout, String>, out: &mut Collector) {
    let (ns, dg): (&'static str, &'static str) = if n == 1 {
        ("publisher_ns_per_msg_1", "datagrams_per_msg_1")
    } else {
        ("publisher_ns_per_msg_8", "datagrams_per_msg_8")
    };
    match result {
        Ok(f) => {
            out.add(name, ns, "ns", f.ns_per_msg);
            out.add(name, dg, "dgrams/msg", f.datagrams_per_msg);
            if let (1, Some(p50)) = (n, f.oneway_p50) {
                out.add(name, "oneway_p50", "ns", p50);
            }
        }
        Err(e) => {
            eprintln!("ERROR: {name} fan-out to {n}: {e}");
            out.note(name, ns, "ns", format!("FAILED: {e}"));
        }
    }
}

/// Which of the two went first last time (alternated call by call).
static MULTICAST_FIRST: AtomicBool = AtomicBool::new(false);

/// The contender: in phase 1 fan-out to 1 subscriber, in phase 2 to 8, unicast and multicast
/// back to back (which goes first alternates from call to call).
pub fn case(phase: usize, _pinning: &Pinning, plan: &Plan, out: &mut Collector) {
    let Some(&n) = phase.checked_sub(1).and_then(|p| FANOUT.get(p)) else {
        return;
    };
    let first = MULTICAST_FIRST.fetch_xor(true, Ordering::Relaxed);
    let order = [first, !first];
    let net = Net::for_subscribers(n);
    for multicast in order {
        let name = if multicast { MULTICAST } else { LLBUS };
        record(name, n, fanout(multicast, n, &net, plan), out);
    }
}
