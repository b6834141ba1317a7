//! A risk check served over UDP: each `RiskCheck` (an account's order) is answered with a
//! `RiskVerdict` (approved or not, and the limit left), by an actor that keeps each account's
//! exposure, exported as service `demo.risk` through a network bridge. Run the `caller` example
//! against it.
//!
//! ```text
//! cargo run --release --example service -- [--bind ADDR] [--limit N] [--calls N] [--duration-s S] [--announce]
//! cargo run --release --example caller -- [--server ADDR] [--count N] [--timeout-ms MS]
//! ```
//!
//! With `--announce` its bridge announces the service on the discovery group, so that
//! `llbus topics` lists it (marked `SERVICE`).
//!
//! It serves until `--calls` calls have been answered, `--duration-s` has passed, or it is
//! interrupted, then prints its last line, machine-readable: `RESULT served=.. approved=..
//! refused=.. requests_refused=.. duplicates=..` (`requests_refused`: requests the bridge dropped
//! because their source had not done the handshake or was not allowed; `duplicates`: resent
//! requests answered again from the bridge's cache, never run twice).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::cli::{parse_secs, report_errors};
use examples::messages::{risk_service, RiskCheck, RiskVerdict};
use llbus::{Actor, Bus, Context, Replies, Request, Setup};
use llbus_net::Bridge;

/// Serves the demo's risk check over UDP.
#[derive(Parser, Debug)]
#[command(
    about,
    long_about = None,
    after_help = "Run it, then call it from another terminal:\n  cargo run --release --example service\n  cargo run --release --example caller -- --count 1000"
)]
struct Args {
    /// The bridge's address: where callers send their requests.
    #[arg(long, default_value = "127.0.0.1:7100")]
    bind: SocketAddr,
    /// Each account's limit: the sum of |qty x px| of its approved orders.
    #[arg(long, default_value_t = 1_000_000.0)]
    limit: f64,
    /// Exits once this many calls have been answered.
    #[arg(long)]
    calls: Option<u64>,
    /// Exits after this many seconds.
    #[arg(long, value_parser = parse_secs)]
    duration_s: Option<Duration>,
    /// Announce the service on the discovery group GROUP:PORT (so that `llbus topics` lists
    /// it) [default group: 239.255.76.76:7476].
    #[arg(long, value_name = "GROUP:PORT", num_args = 0..=1,
          default_missing_value = "239.255.76.76:7476")]
    announce: Option<SocketAddr>,
}

/// Keeps each account's exposure and answers each check.
struct Risk {
    replies: Replies<RiskVerdict>,
    limit: f64,
    exposure: std::collections::HashMap<u32, f64>,
    served: Arc<AtomicU64>,
    approved: Arc<AtomicU64>,
}

impl Actor for Risk {
    type In = Request<RiskCheck>;
    fn on_message(&mut self, request: Request<RiskCheck>, ctx: &mut Context<'_>) {
        let (check, responder) = self.replies.accept(request);
        let used = self.exposure.entry(check.account).or_insert(0.0);
        let notional = (check.qty as f64 * check.px).abs();
        let verdict = if !notional.is_finite() || check.qty == 0 {
            RiskVerdict {
                approved: false,
                limit_left: self.limit - *used,
                reason: "an order of no or unbounded size".to_owned(),
            }
        } else if *used + notional > self.limit {
            RiskVerdict {
                approved: false,
                limit_left: self.limit - *used,
                reason: format!("over the account's limit of {}", self.limit),
            }
        } else {
            *used += notional;
            self.approved.fetch_add(1, Ordering::Relaxed);
            RiskVerdict {
                approved: true,
                limit_left: self.limit - *used,
                reason: String::new(),
            }
        };
        ctx.reply(responder, Ok(verdict));
        self.served.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> std::process::ExitCode {
    examples::logger();
    report_errors("service", run)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let served = Arc::new(AtomicU64::new(0));
    let approved = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    let (s, a, limit) = (Arc::clone(&served), Arc::clone(&approved), args.limit);
    bus.actor("risk", move |setup: &mut Setup<'_>| Risk {
        replies: setup.replies(&risk_service()),
        limit,
        exposure: std::collections::HashMap::new(),
        served: Arc::clone(&s),
        approved: Arc::clone(&a),
    })
    .serves(&risk_service());
    let mut config = llbus_net::BridgeConfig::default();
    if let Some(group) = args.announce {
        config.discovery = Some(llbus_net::DiscoveryConfig {
            group: Some(group),
            ..llbus_net::DiscoveryConfig::default()
        });
    }
    let bridge = Bridge::bind_with(args.bind, config)?
        .name("bridge")
        .export_service(&risk_service());
    let status = bridge.status();
    bus.add(bridge);
    let running = bus.start()?;
    println!(
        "service: serving '{}' on {}{} (call it with: cargo run --release --example caller -- --server {})",
        risk_service().name(),
        args.bind,
        args.announce
            .map(|g| format!(", announced on {g}"))
            .unwrap_or_default(),
        args.bind
    );
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if args
            .calls
            .is_some_and(|n| served.load(Ordering::Relaxed) >= n)
            || args.duration_s.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
    }
    running.stop();
    let report = running.join()?;
    let metric = |name: &str| {
        report
            .actor("bridge")
            .and_then(|a| a.metric(name))
            .unwrap_or(0)
    };
    for error in status.errors() {
        eprintln!("service: bridge error: {error}");
    }
    let served = served.load(Ordering::Relaxed);
    let approved = approved.load(Ordering::Relaxed);
    println!(
        "RESULT served={served} approved={approved} refused={} requests_refused={} duplicates={}",
        served - approved,
        metric("service.refused"),
        metric("service.duplicates"),
    );
    Ok(())
}
