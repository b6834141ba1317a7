//! Two actors on two threads bounce a timestamp through the bus and print the round-trip
//! percentiles, the way sleeping-vs-spinning comparisons are usually shown.
//!
//! ```text
//! cargo run --release --example pingpong -- --strategy spin|backoff|park [--count N]
//! ```
//!
//! `spin` burns both cores (pin them: the example pins ping to core 0 and pong to core 1 when
//! the machine has two); `backoff` spins then yields; `park` sleeps until rung.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use llbus::{Actor, Bus, Context, Idle, Message, Out, Setup};
use serde::{Deserialize, Serialize};

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "pingpong.ping")]
struct Ping(u64);

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "pingpong.pong")]
struct Pong(u64);

fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

struct Pinger {
    out: Out<Ping>,
    left: u64,
    warmup: u64,
    rtt: Histogram<u64>,
    result: Arc<Mutex<Option<Histogram<u64>>>>,
}

impl Actor for Pinger {
    type In = Pong;

    fn on_start(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Ping(now_ns()));
    }

    fn on_message(&mut self, Pong(sent): Pong, ctx: &mut Context<'_>) {
        let rtt = now_ns().saturating_sub(sent).max(1);
        if self.warmup > 0 {
            self.warmup -= 1;
        } else {
            let _ = self.rtt.record(rtt);
            self.left -= 1;
        }
        if self.left == 0 {
            if let Ok(mut slot) = self.result.lock() {
                *slot = Some(self.rtt.clone());
            }
            ctx.request_stop();
        } else {
            ctx.publish(self.out, Ping(now_ns()));
        }
    }
}

struct Ponger {
    out: Out<Pong>,
}

impl Actor for Ponger {
    type In = Ping;

    fn on_message(&mut self, Ping(sent): Ping, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Pong(sent));
    }
}

fn usage() -> ! {
    eprintln!("usage: pingpong [--strategy spin|backoff|park] [--count N]");
    std::process::exit(2);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut idle = Idle::Backoff;
    let mut name = "backoff";
    let mut count: u64 = 100_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--strategy" => {
                (idle, name) = match args.next().as_deref() {
                    Some("spin") => (Idle::BusySpin, "spin"),
                    Some("backoff") => (Idle::Backoff, "backoff"),
                    Some("park") => (Idle::Park, "park"),
                    _ => usage(),
                }
            }
            "--count" => {
                count = match args.next().and_then(|n| n.parse().ok()) {
                    Some(n) if n > 0 => n,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }

    let result = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&result);
    let two_cores = llbus::online_cores() >= 2;
    let mut bus = Bus::builder();
    let ping = bus
        .actor("ping", move |s: &mut Setup<'_>| Pinger {
            out: s.output(),
            left: count,
            warmup: count / 10,
            rtt: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("static histogram bounds are valid"),
            result: Arc::clone(&slot),
        })
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

    let h = result
        .lock()
        .ok()
        .and_then(|mut h| h.take())
        .ok_or("the pinger never finished")?;
    println!(
        "pingpong over the bus, strategy {name}, {} round trips: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
        h.len(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
    Ok(())
}
