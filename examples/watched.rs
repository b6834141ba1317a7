//! A bus to watch with the `llbus` command, and the external handles at work: `main` feeds
//! prices into the bus through a `Publisher`, a `scale` actor turns them into fills, and `main`
//! reads the fills back through a `Subscription`; an `audit` actor with a small `DropNewest`
//! ring samples the prices beside it.
//!
//! ```text
//! cargo run --release --example watched -- [--name NAME] [--count N | --rate HZ]
//! ```
//!
//! With `--count N` (default 100000) it publishes N prices as fast as the bus takes them,
//! waits until every edge is quiet, prints `READY pid=.. file=..`, and keeps the bus running
//! (for `llbus stat`, `llbus top`) until its standard input ends or reads `stop`. With
//! `--rate HZ` it publishes HZ prices a second until then. Then it stops the bus and prints the
//! final report, also as one `EDGE ...` line per edge and one `ACTOR ...` line per actor.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Backpressure, Bus, Context, Idle, Message, Out, Setup};

/// A price from outside the bus.
#[derive(Message, Clone, Debug)]
#[message(topic = "demo.price")]
struct Price(u64);

/// A fill the bus sends back out.
#[derive(Message, Clone, Debug)]
#[message(topic = "demo.fill")]
struct Fill(u64);

/// Turns every price into a fill.
struct Scale {
    out: Out<Fill>,
}

impl Actor for Scale {
    type In = Price;
    fn on_message(&mut self, Price(p): Price, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Fill(p * 2));
    }
}

/// Looks at the prices it gets (a slow reader: its small ring drops what it cannot take).
struct Audit {
    seen: u64,
}

impl Actor for Audit {
    type In = Price;
    fn on_message(&mut self, Price(p): Price, _ctx: &mut Context<'_>) {
        self.seen = self.seen.wrapping_add(p);
    }
}

/// A bus that runs for a while under a name, for `llbus list`, `stat` and `top` to watch.
#[derive(clap::Parser, Debug)]
#[command(name = "watched", about, allow_negative_numbers = true)]
struct Args {
    /// The bus's name, as `llbus list` shows it.
    #[arg(long, default_value = "watched")]
    name: String,
    /// How many prices to publish.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    count: u64,
    /// Prices a second [default: as fast as the bus takes them].
    #[arg(long, value_name = "HZ")]
    rate: Option<u64>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::logger();
    let args = <Args as clap::Parser>::parse();
    let mut bus = Bus::builder();
    bus.name(&args.name);
    bus.group("work").idle(Idle::Park);
    let feed = bus.publisher::<Price>("feed");
    bus.actor("scale", |s: &mut Setup<'_>| Scale { out: s.output() })
        .group("work")
        .subscribes::<Price>()
        .publishes::<Fill>();
    bus.actor("audit", |_: &mut Setup<'_>| Audit { seen: 0 })
        .group("work")
        .subscribes::<Price>()
        .backpressure::<Price>(Backpressure::DropNewest)
        .capacity::<Price>(16);
    let fills = bus.subscription::<Fill>("fills");
    let mut running = bus.start()?;
    let mut feed = running.publisher(feed)?;
    let mut fills = running.subscription(fills)?;

    // The reader of the fills: until the subscription closes (after the bus stops).
    let received = Arc::new(AtomicU64::new(0));
    let r = Arc::clone(&received);
    let reader = std::thread::spawn(move || {
        let mut sum = 0u64;
        for Fill(f) in fills.iter() {
            sum = sum.wrapping_add(f);
            r.fetch_add(1, Ordering::Relaxed);
        }
        sum
    });

    // The feed, on a thread of its own.
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    let (count, rate) = (args.count, args.rate);
    let feeder = std::thread::spawn(move || {
        let start = Instant::now();
        let mut n = 0u64;
        while !d.load(Ordering::Relaxed) {
            match rate {
                None if n == count => break,
                None => {}
                Some(hz) => {
                    // Paced: sleep until the next price is due.
                    let due = start + Duration::from_secs_f64(n as f64 / hz.max(1) as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait.min(Duration::from_millis(50)));
                        continue;
                    }
                }
            }
            if feed.publish(Price(n)).is_err() {
                break;
            }
            n += 1;
        }
        n
    });

    if rate.is_none() {
        // Wait until everything published was received and every edge is quiet.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let quiet = running.snapshot().edges.iter().all(|e| e.in_flight == 0);
            if received.load(Ordering::Relaxed) == count && quiet {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    println!(
        "READY pid={} file={}",
        std::process::id(),
        running
            .counters_path()
            .map_or("none".to_owned(), |p| p.display().to_string())
    );
    // Hold until standard input ends or says stop.
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(l) if l.trim() == "stop" => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    done.store(true, Ordering::Relaxed);
    let published = feeder.join().map_err(|_| "the feed thread panicked")?;
    running.stop();
    let report = running.join()?;
    let sum = reader.join().map_err(|_| "the reader thread panicked")?;
    println!("{report}");
    for e in &report.edges {
        println!(
            "EDGE topic={} publisher={} subscriber={} published={} handled={} panicked={} dropped={} conflated={} waited={} lost={} in_flight={} max_depth={}",
            e.topic, e.publisher, e.subscriber, e.published, e.handled, e.panicked, e.dropped,
            e.conflated, e.waited, e.lost, e.in_flight, e.max_depth
        );
    }
    for a in &report.actors {
        println!(
            "ACTOR name={} thread={} handled={} ticks={} restarts={} panics={}",
            a.name, a.thread, a.handled, a.ticks, a.restarts, a.panics
        );
    }
    println!(
        "DONE published={published} received={} sum={sum}",
        received.load(Ordering::Relaxed)
    );
    Ok(())
}
