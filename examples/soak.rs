//! A soak run of the network bridge: two buses joined by two bridges over loopback, a feed
//! publishing at a sustained rate, printing resident memory and the bridges' counters each
//! minute, and failing (exit 1) if resident memory grows by more than 8 MiB after the first
//! minute or if messages stop arriving. Not run in CI: it is meant to run for ten minutes.
//!
//! ```text
//! cargo run --release --example soak -- [--minutes 10] [--rate 50000]
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, Report, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "soak.quote")]
struct Quote {
    n: u64,
    px: f64,
    qty: u32,
}

/// Publishes `per_tick` quotes every millisecond.
struct Feed {
    out: Out<Quote>,
    n: u64,
    per_tick: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        for _ in 0..self.per_tick {
            self.n += 1;
            let px = 100.0 + (self.n % 100) as f64 * 0.01;
            ctx.publish(
                self.out,
                Quote {
                    n: self.n,
                    px,
                    qty: 100,
                },
            );
        }
    }
}

struct Sink {
    got: Arc<AtomicU64>,
}

impl Actor for Sink {
    type In = Quote;
    fn on_message(&mut self, _q: Quote, _ctx: &mut Context<'_>) {
        self.got.fetch_add(1, Ordering::Relaxed);
    }
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

fn metric(r: &Report, actor: &str, name: &str) -> u64 {
    r.actor(actor).and_then(|a| a.metric(name)).unwrap_or(0)
}

/// Two buses joined by a network bridge on loopback, run for minutes: memory and counters
/// printed as they go.
#[derive(clap::Parser, Debug)]
#[command(name = "soak", about, allow_negative_numbers = true)]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    minutes: u64,
    /// Messages a second (at least 1000: the feed publishes rate/1000 each millisecond).
    #[arg(long, default_value_t = 50_000, value_name = "MSGS_PER_S",
          value_parser = clap::value_parser!(u64).range(1000..))]
    rate: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::logger();
    let Args { minutes, rate } = <Args as clap::Parser>::parse();

    let publisher = Bridge::bind("127.0.0.1:0")?.name("net-pub");
    let subscriber = Bridge::bind("127.0.0.1:0")?.name("net-sub");
    let publisher_addr = publisher.local_addr();
    let publisher = publisher.export::<Quote>();
    let subscriber = subscriber.import::<Quote>(publisher_addr);

    let mut a = Bus::builder();
    a.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
        per_tick: rate / 1000,
    })
    .tick_every(Duration::from_millis(1))
    .publishes::<Quote>();
    a.add(publisher);
    let got = Arc::new(AtomicU64::new(0));
    let mut b = Bus::builder();
    let g = Arc::clone(&got);
    b.actor("sink", move |_: &mut Setup<'_>| Sink {
        got: Arc::clone(&g),
    })
    .subscribes::<Quote>();
    b.add(subscriber);
    let running_a = a.start()?;
    let running_b = b.start()?;

    println!(
        "soak: {minutes} min, aiming at {rate} msgs/s over loopback (the feed ticks every ms)"
    );
    println!(
        "{:>4} {:>10} {:>12} {:>12} {:>10} {:>10} {:>12} {:>10}",
        "min", "rss_kib", "sent", "received", "lost", "dups", "datagrams", "msgs/s"
    );
    let started = Instant::now();
    let mut baseline_rss = 0;
    let mut last_got = 0;
    let mut failure = None;
    for minute in 1..=minutes {
        let until = started + Duration::from_secs(60 * minute);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(200));
        }
        let (ra, rb) = (running_a.report(), running_b.report());
        let rss = resident_kib();
        let received = got.load(Ordering::Relaxed);
        println!(
            "{:>4} {:>10} {:>12} {:>12} {:>10} {:>10} {:>12} {:>10}",
            minute,
            rss,
            metric(&ra, "net-pub", "messages_out"),
            received,
            metric(&rb, "net-sub", "lost"),
            metric(&rb, "net-sub", "duplicates"),
            metric(&ra, "net-pub", "datagrams_out"),
            (received - last_got) / 60,
        );
        if minute == 1 {
            baseline_rss = rss;
        } else if rss > baseline_rss + 8 * 1024 {
            failure = Some(format!(
                "resident memory grew from {baseline_rss} KiB to {rss} KiB"
            ));
        }
        if received == last_got {
            failure = Some(format!("no message arrived during minute {minute}"));
        }
        last_got = received;
    }
    running_a.stop();
    running_b.stop();
    let (ra, rb) = (running_a.join()?, running_b.join()?);
    println!("\n{ra}\n{rb}");
    match failure {
        Some(f) => {
            eprintln!("soak FAILED: {f}");
            std::process::exit(1);
        }
        None => {
            println!("soak passed: memory flat, messages flowing every minute");
            Ok(())
        }
    }
}
