//! Two actors bounce a timestamp back and forth and print the round-trip percentiles, the way
//! sleeping-vs-spinning comparisons are usually shown: over the bus (two threads), or over UDP
//! through two network bridges on loopback (two buses in one process, as if on two hosts).
//!
//! ```text
//! cargo run --release --example pingpong -- [--strategy spin|backoff|park] [--count N] [--transport bus|udp|shm] [--split]
//! cargo run --release --example pingpong -- --help
//! ```
//!
//! `spin` burns both cores (pin them: the example pins ping to core 0 and pong to core 1 when
//! the machine has two); `backoff` spins then yields; `park` sleeps until rung.
//!
//! `--transport udp` (default `bus`): ping and its bridge share one thread of bus A (core 0),
//! pong and its bridge one thread of bus B (core 1); each round trip crosses loopback twice
//! (`--split` puts every actor and bridge on a thread of its own instead: four threads).
//! A ping that gets no answer within 100 ms (UDP may lose it, and the first ones leave before
//! the subscriptions are in place) is sent again and counted as a retry.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use examples::cli::{self, IdleArg};
use hdrhistogram::Histogram;
use llbus::{Actor, Backpressure, Bus, Context, Idle, Message, Out, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};

#[path = "ipc/pingpong_shm.rs"]
mod shm;

/// A ping: its number and when it left (this process's monotonic clock).
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "pingpong.ping")]
struct Ping {
    id: u64,
    sent: u64,
}

/// The answer to a ping, carrying it back.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "pingpong.pong")]
struct Pong {
    id: u64,
    sent: u64,
}

fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A ping without an answer after this long is sent again (UDP only; the bus loses nothing).
const RETRY: Duration = Duration::from_millis(100);
/// The pinger gives up after this long without a single answer.
const GIVE_UP: Duration = Duration::from_secs(10);

/// What the pinger hands to `main`.
struct Outcome {
    rtt: Histogram<u64>,
    retries: u64,
}

struct Pinger {
    out: Out<Ping>,
    left: u64,
    warmup: u64,
    /// The ping in flight: its id and when it left.
    in_flight: Option<(u64, Instant)>,
    next_id: u64,
    retries: u64,
    last_answer: Option<Instant>,
    rtt: Histogram<u64>,
    result: Arc<Mutex<Option<Outcome>>>,
}

impl Pinger {
    fn send(&mut self, ctx: &mut Context<'_>) {
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight = Some((id, ctx.now()));
        ctx.publish(self.out, Ping { id, sent: now_ns() });
    }

    fn finish(&mut self, ctx: &mut Context<'_>) {
        if let Ok(mut slot) = self.result.lock() {
            *slot = Some(Outcome {
                rtt: self.rtt.clone(),
                retries: self.retries,
            });
        }
        ctx.request_stop();
    }
}

impl Actor for Pinger {
    type In = Pong;

    fn on_start(&mut self, ctx: &mut Context<'_>) {
        self.last_answer = Some(ctx.now());
        self.send(ctx);
    }

    fn on_message(&mut self, pong: Pong, ctx: &mut Context<'_>) {
        let rtt = now_ns().saturating_sub(pong.sent).max(1);
        if self.in_flight.map(|(id, _)| id) != Some(pong.id) {
            return; // the late answer to a ping sent again since
        }
        self.last_answer = Some(ctx.now());
        if self.warmup > 0 {
            self.warmup -= 1;
        } else {
            let _ = self.rtt.record(rtt);
            self.left -= 1;
        }
        if self.left == 0 {
            self.finish(ctx);
        } else {
            self.send(ctx);
        }
    }

    /// UDP only (the bus transport has no tick): sends a lost ping again.
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let Some((_, sent)) = self.in_flight else {
            return;
        };
        if self.last_answer.is_some_and(|t| ctx.now() - t > GIVE_UP) {
            eprintln!("pingpong: no answer for {GIVE_UP:?}; giving up");
            self.finish(ctx);
        } else if ctx.now() - sent > RETRY {
            self.retries += 1;
            self.send(ctx);
        }
    }
}

struct Ponger {
    out: Out<Pong>,
}

impl Actor for Ponger {
    type In = Ping;

    fn on_message(&mut self, Ping { id, sent }: Ping, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Pong { id, sent });
    }
}

/// Bounces a timestamp between two actors and prints the round-trip percentiles.
#[derive(Parser, Debug)]
#[command(name = "pingpong", version, about, allow_negative_numbers = true)]
struct Args {
    /// How the threads wait for the next message.
    #[arg(long, visible_alias = "idle", value_enum, default_value_t = IdleArg::Backoff)]
    strategy: IdleArg,
    /// Round trips to measure (a tenth as many more warm up first).
    #[arg(long, default_value_t = 100_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// bus: two threads of one bus; udp: two buses bridged over loopback UDP; shm: a second
    /// process through shared memory.
    #[arg(long, value_enum, default_value_t = PingTransport::Bus)]
    transport: PingTransport,
    /// udp only: every actor and bridge on a thread of its own (four threads) instead of each
    /// bridge taking turns with its actor on one.
    #[arg(long)]
    split: bool,
}

/// `--transport`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PingTransport {
    /// Two threads of one bus.
    Bus,
    /// Two buses, each with a network bridge, over loopback UDP.
    Udp,
    /// A second process, through shared memory (llbus-ipc).
    Shm,
}

fn pinger(
    count: u64,
    result: &Arc<Mutex<Option<Outcome>>>,
) -> impl FnMut(&mut Setup<'_>) -> Pinger {
    let result = Arc::clone(result);
    move |s: &mut Setup<'_>| Pinger {
        out: s.output(),
        left: count,
        warmup: count / 10,
        in_flight: None,
        next_id: 0,
        retries: 0,
        last_answer: None,
        rtt: Histogram::new_with_bounds(1, 60_000_000_000, 3)
            .expect("static histogram bounds are valid"),
        result: Arc::clone(&result),
    }
}

/// Ping and pong on two threads of one bus.
fn over_the_bus(
    idle: Idle,
    count: u64,
    result: &Arc<Mutex<Option<Outcome>>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let two_cores = llbus::online_cores() >= 2;
    let mut bus = Bus::builder();
    let ping = bus
        .actor("ping", pinger(count, result))
        .idle(idle)
        .subscribes::<Pong>()
        .publishes::<Ping>();
    if two_cores {
        ping.on_core(0);
    }
    let pong = bus
        .actor("pong", |s: &mut Setup<'_>| Ponger { out: s.output() })
        .idle(idle)
        .subscribes::<Ping>()
        .publishes::<Pong>();
    if two_cores {
        pong.on_core(1);
    }
    bus.start()?.join()?;
    Ok(())
}

/// Ping on bus A, pong on bus B, each sharing a thread with its bridge; the bridges talk UDP
/// over loopback.
fn over_udp(
    idle: Idle,
    split: bool,
    count: u64,
    result: &Arc<Mutex<Option<Outcome>>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let loopback: SocketAddr = "127.0.0.1:0".parse()?;
    let bridge_a = Bridge::bind(loopback)?.name("bridge-a");
    let bridge_b = Bridge::bind(loopback)?.name("bridge-b");
    let (addr_a, addr_b) = (bridge_a.local_addr(), bridge_b.local_addr());
    let bridge_a = bridge_a.export::<Ping>().import::<Pong>(addr_b);
    let bridge_b = bridge_b.import::<Ping>(addr_a).export::<Pong>();
    let (status_a, status_b) = (bridge_a.status(), bridge_b.status());

    let two_cores = llbus::online_cores() >= 2 && !split;
    let mut a = Bus::builder();
    let mut b = Bus::builder();
    if split {
        a.actor("ping", pinger(count, result))
            .idle(idle)
            .tick_every(Duration::from_millis(10))
            .subscribes::<Pong>()
            .publishes::<Ping>();
        a.add(bridge_a).idle(idle);
        b.actor("pong", |s: &mut Setup<'_>| Ponger { out: s.output() })
            .idle(idle)
            .subscribes::<Ping>()
            .publishes::<Pong>();
        b.add(bridge_b).idle(idle);
    } else {
        let group_a = a.group("host-a").idle(idle);
        if two_cores {
            group_a.on_core(0);
        }
        a.actor("ping", pinger(count, result))
            .group("host-a")
            .tick_every(Duration::from_millis(10))
            .subscribes::<Pong>()
            .publishes::<Ping>();
        // The bridge shares ping's thread, so that edge must never wait (one ping is in
        // flight).
        a.add(bridge_a)
            .group("host-a")
            .backpressure::<Ping>(Backpressure::DropNewest);
        let group_b = b.group("host-b").idle(idle);
        if two_cores {
            group_b.on_core(1);
        }
        b.actor("pong", |s: &mut Setup<'_>| Ponger { out: s.output() })
            .group("host-b")
            .subscribes::<Ping>()
            .publishes::<Pong>();
        b.add(bridge_b)
            .group("host-b")
            .backpressure::<Pong>(Backpressure::DropNewest);
    }

    let running_b = b.start()?;
    let running_a = a.start()?;
    let report_a = running_a.join()?;
    running_b.stop();
    let report_b = running_b.join()?;
    for (name, report) in [("bridge-a", &report_a), ("bridge-b", &report_b)] {
        let m = |k: &str| report.actor(name).and_then(|a| a.metric(k)).unwrap_or(0);
        println!(
            "{name}: datagrams in {} out {}, lost {}, no subscriber {}",
            m("datagrams_in"),
            m("datagrams_out"),
            m("lost"),
            m("no_subscriber")
        );
    }
    for e in status_a.errors().into_iter().chain(status_b.errors()) {
        eprintln!("bridge error: {e}");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    examples::logger();
    if let Some(echo) = shm::echo_if_asked() {
        return cli::report_errors("pingpong", || echo);
    }
    let args = Args::parse();
    cli::report_errors("pingpong", || run(&args))
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let (idle, count) = (Idle::from(args.strategy), args.count);
    let name = match args.strategy {
        IdleArg::Spin => "spin",
        IdleArg::Backoff => "backoff",
        IdleArg::Park => "park",
    };
    let shm = args.transport == PingTransport::Shm;
    let udp = args.transport == PingTransport::Udp;
    let result = Arc::new(Mutex::new(None));
    if shm {
        shm::run(idle, count, &result)?;
    } else if udp {
        over_udp(idle, args.split, count, &result)?;
    } else {
        over_the_bus(idle, count, &result)?;
    }

    let Outcome { rtt: h, retries } = result
        .lock()
        .ok()
        .and_then(|mut h| h.take())
        .ok_or("the pinger never finished")?;
    if h.len() < count {
        return Err(format!("only {} of {count} round trips completed", h.len()).into());
    }
    let transport = if shm {
        "shared memory to a second process"
    } else if udp {
        "UDP through two bridges on loopback"
    } else {
        "the bus"
    };
    println!(
        "pingpong over {transport}, strategy {name}, {} round trips ({retries} retries): p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
        h.len(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
    println!(
        "RESULT transport={} strategy={name} count={} p50_ns={} p99_ns={} p999_ns={}",
        if shm {
            "shm"
        } else if udp {
            "udp"
        } else {
            "bus"
        },
        h.len(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999)
    );
    Ok(())
}
