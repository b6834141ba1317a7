//! Calls the `service` example's risk check over UDP: `--count` calls, one at a time, each
//! waiting at most `--timeout-ms` for its verdict, through a network bridge that imports service
//! `demo.risk` from `--server`. Prints the round trip's percentiles and a last line,
//! machine-readable: `RESULT calls=.. approved=.. refused=.. timeouts=.. errors=.. p50_us=..
//! p99_us=.. max_us=..`; exits 0 when every call was answered (approved or refused), 1 if any
//! timed out or failed.
//!
//! ```text
//! cargo run --release --example service      # first, in another terminal
//! cargo run --release --example caller -- [--server ADDR] [--count N] [--timeout-ms MS]
//! ```
//!
//! Each call ends exactly once: with the verdict, or `Timeout` when none came in time (the
//! bridge resends a lost request until then, and the server runs it once), or the error the
//! server's side gave (`Dropped`, `ServerPanicked`, `QueueFull`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::cli::report_errors;
use examples::messages::{risk_service, RiskCheck};
use hdrhistogram::Histogram;
use llbus::{Bus, CallError};
use llbus_net::Bridge;

/// Calls the demo's risk check over UDP.
#[derive(Parser, Debug)]
#[command(
    about,
    long_about = None,
    after_help = "Start the service first, in another terminal:\n  cargo run --release --example service\n  cargo run --release --example caller -- --count 1000"
)]
struct Args {
    /// The server's bridge (the `service` example's `--bind`).
    #[arg(long, default_value = "127.0.0.1:7100")]
    server: SocketAddr,
    /// This bridge's address (port 0: any free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// How many calls to make.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// How long each call waits for its verdict.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// The account the orders are for.
    #[arg(long, default_value_t = 7)]
    account: u32,
}

fn main() -> std::process::ExitCode {
    examples::logger();
    report_errors("caller", run)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut bus = Bus::builder();
    let bridge = Bridge::bind(args.bind)?
        .name("bridge")
        .import_service(&risk_service(), args.server);
    let status = bridge.status();
    bus.add(bridge);
    let key = bus.caller(&risk_service(), "caller");
    let mut running = bus.start()?;
    let mut caller = running.caller(key)?;
    println!(
        "caller: {} calls of '{}' at {}, each waiting at most {} ms",
        args.count,
        risk_service().name(),
        args.server,
        args.timeout_ms
    );
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut approved, mut refused, mut timeouts, mut errors) = (0u64, 0u64, 0u64, 0u64);
    for n in 0..args.count {
        let check = RiskCheck {
            account: args.account,
            qty: 1 + (n % 10) as i64,
            px: 100.0 + (n % 7) as f64,
        };
        let t = Instant::now();
        match caller.call(check, timeout) {
            Ok(verdict) => {
                latency.saturating_record(t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
                if verdict.approved {
                    approved += 1;
                } else {
                    refused += 1;
                }
            }
            Err(CallError::Timeout) => timeouts += 1,
            Err(e) => {
                if errors == 0 {
                    eprintln!("caller: call {n} failed: {e}");
                }
                errors += 1;
            }
        }
    }
    drop(caller);
    running.stop();
    running.join()?;
    for error in status.errors() {
        eprintln!("caller: bridge error: {error}");
    }
    let us = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "RESULT calls={} approved={approved} refused={refused} timeouts={timeouts} errors={errors} \
         p50_us={:.1} p99_us={:.1} max_us={:.1}",
        args.count,
        us(0.5),
        us(0.99),
        latency.max() as f64 / 1000.0
    );
    if timeouts + errors > 0 {
        return Err(format!(
            "{timeouts} calls timed out and {errors} failed (is the service example running at {}?)",
            args.server
        )
        .into());
    }
    Ok(())
}
