//! A small market-data pipeline on llbus: a feed publishes quotes, a strategy turns some of them
//! into orders, and a gateway (on a shared "io" thread) receives the orders and measures how
//! long each took from the feed's tick to the gateway's handler. It runs about three seconds,
//! stops itself gracefully, and prints the per-edge and per-actor report and the latency
//! percentiles.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use llbus::{Actor, Bus, Context, Message, Out, Setup};
use serde::{Deserialize, Serialize};

/// Where a quote comes from.
#[derive(Message, Serialize, Deserialize, Clone, Copy, Debug)]
enum Venue {
    Xnas,
    Xnys,
}

/// A top-of-book quote, stamped with the feed's clock.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "md.quote")]
struct Quote {
    px: f64,
    qty: u32,
    venue: Venue,
    stamp_ns: u64,
}

/// An order the strategy sends, carrying the quote's stamp along.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "ex.order")]
struct Order {
    px: f64,
    qty: u32,
    quote_stamp_ns: u64,
}

/// Nanoseconds since the process's first call: one monotonic clock for every thread.
fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

const RUN_FOR: Duration = Duration::from_secs(3);

/// Publishes a quote every tick (20 µs) for `RUN_FOR`, then asks the bus to stop.
struct Feed {
    quotes: Out<Quote>,
    started: Option<Instant>,
    n: u64,
}

impl Feed {
    fn new(setup: &mut Setup<'_>) -> Self {
        Feed {
            quotes: setup.output(),
            started: None,
            n: 0,
        }
    }
}

impl Actor for Feed {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let started = *self.started.get_or_insert(ctx.now());
        if ctx.now() - started > RUN_FOR {
            ctx.request_stop();
            return;
        }
        self.n += 1;
        let venue = if self.n % 3 == 0 {
            Venue::Xnys
        } else {
            Venue::Xnas
        };
        let px = 100.0 + (self.n % 50) as f64 * 0.01;
        ctx.publish(
            self.quotes,
            Quote {
                px,
                qty: 100,
                venue,
                stamp_ns: now_ns(),
            },
        );
    }
}

/// Buys every quote below 100.25 on XNAS.
struct Strategy {
    orders: Out<Order>,
}

impl Strategy {
    fn new(setup: &mut Setup<'_>) -> Self {
        Strategy {
            orders: setup.output(),
        }
    }
}

impl Actor for Strategy {
    type In = Quote;

    fn on_message(&mut self, q: Quote, ctx: &mut Context<'_>) {
        if matches!(q.venue, Venue::Xnas) && q.px < 100.25 {
            let order = Order {
                px: q.px,
                qty: q.qty,
                quote_stamp_ns: q.stamp_ns,
            };
            ctx.publish(self.orders, order);
        }
    }
}

/// Receives orders and records their tick-to-gateway latency.
struct Gateway {
    latency: Histogram<u64>,
    result: Arc<Mutex<Option<Histogram<u64>>>>,
}

impl Actor for Gateway {
    type In = Order;

    fn on_message(&mut self, order: Order, _ctx: &mut Context<'_>) {
        let _ = self
            .latency
            .record(now_ns().saturating_sub(order.quote_stamp_ns).max(1));
    }

    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        if let Ok(mut slot) = self.result.lock() {
            *slot = Some(self.latency.clone());
        }
    }
}

/// A small market-data pipeline: a feed, a strategy and a gateway, for about three seconds,
/// then the report and the feed-to-gateway latency percentiles.
#[derive(clap::Parser, Debug)]
#[command(name = "quickstart", about)]
struct Args {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::logger();
    let Args {} = <Args as clap::Parser>::parse();
    let result = Arc::new(Mutex::new(None));
    let two_cores = llbus::online_cores() >= 2;

    let mut bus = Bus::builder();
    let feed = bus
        .actor("feed", Feed::new)
        .tick_every(Duration::from_micros(20))
        .publishes::<Quote>();
    if two_cores {
        feed.on_core(0);
    }
    let strategy = bus
        .actor("strategy", Strategy::new)
        .subscribes::<Quote>()
        .publishes::<Order>();
    if two_cores {
        strategy.on_core(1);
    }
    let slot = Arc::clone(&result);
    bus.actor("gateway", move |_: &mut Setup<'_>| Gateway {
        latency: Histogram::new_with_bounds(1, 10_000_000_000, 3)
            .expect("static histogram bounds are valid"),
        result: Arc::clone(&slot),
    })
    .group("io")
    .subscribes::<Order>();

    println!("llbus quickstart: feed -> strategy -> gateway for {RUN_FOR:?} ...");
    let running = bus.start()?;
    let report = running.join()?;

    println!("\n{report}");
    match result.lock().ok().and_then(|mut h| h.take()) {
        Some(h) if !h.is_empty() => println!(
            "tick-to-gateway latency over {} orders: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
            h.len(),
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        ),
        _ => println!("no orders reached the gateway"),
    }
    Ok(())
}
