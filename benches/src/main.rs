//! The llbus comparison harness: `cargo run --release -p benches -- [ring|bus|udp|all]`.
//!
//! Each suite is one module (`ring`, and later `bus` and `udp`) built on the shared pieces in
//! `harness` (arguments, pinning, rounds, statistics, output) and `drive` (the round-trip and
//! throughput loops). See `--help` for the options, and each module's docs for what it
//! measures and how.

mod drive;
mod harness;
mod ring;

use harness::{Args, Command, Pinning, Suite, USAGE};

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(Command::Run(args)) => args,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let pinning = Pinning::probe();
    if args.suite.includes(Suite::Ring) {
        ring::run(&args, &pinning);
    }
    for (suite, name) in [(Suite::Bus, "bus"), (Suite::Udp, "udp")] {
        if args.suite.includes(suite) {
            eprintln!("{name}: suite not written yet; skipped");
        }
    }
}
