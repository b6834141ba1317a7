//! The llbus comparison harness: `cargo run --release -p benches -- [ring|bus|udp|ipc|all]`.
//!
//! Each suite is one module (`ring`, `bus`, `udp`) built on the shared pieces in
//! `harness` (arguments, pinning, rounds, statistics, output), `drive` (the round-trip and
//! throughput loops) and `onbus` (running a bus with deadlines). See `--help` for the options, and each module's docs for what it
//! measures and how.

mod bus;
mod drive;
mod harness;
mod ipc;
mod onbus;
mod ring;
mod udp;

use harness::{Args, Command, Pinning, Suite, USAGE};

fn main() {
    // The `ipc` suite re-executes this binary as its echo process.
    if let Ok(base) = std::env::var(ipc::ECHO_VAR) {
        std::process::exit(ipc::echo_main(&base));
    }
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
    if args.suite.includes(Suite::Bus) {
        bus::run(&args, &pinning);
    }
    if args.suite.includes(Suite::Udp) {
        udp::run(&args, &pinning);
    }
    if args.suite.includes(Suite::Ipc) {
        ipc::run(&args, &pinning);
    }
}
