//! The llbus comparison harness: `cargo run --release -p benches -- [ring|bus|udp|ipc|record|zenoh|all]`.
//!
//! Each suite is one module (`ring`, `bus`, `udp`, `ipc`, `record`, `zenoh`) built on the shared pieces in
//! `harness` (arguments, pinning, rounds, statistics, output), `drive` (the round-trip and
//! throughput loops) and `onbus` (running a bus with deadlines); `plot` draws a suite's
//! pictures (`--plot DIR`). See `--help` for the options, and each module's docs for what it
//! measures and how.

mod bus;
mod drive;
mod fanout;
mod harness;
mod ipc;
mod onbus;
mod plot;
mod record;
mod ring;
mod udp;
mod zenoh;

use harness::{human, machine, seed, Args, Pinning, Suite};

fn main() {
    // The `ipc` suite re-executes this binary as its echo process.
    if let Ok(base) = std::env::var(ipc::ECHO_VAR) {
        std::process::exit(ipc::echo_main(&base));
    }
    let args = <Args as clap::Parser>::parse();
    let pinning = Pinning::probe();
    let seed = seed(&args);
    let machine = machine();
    human(
        &args,
        &format!("llbus benchmarks on {machine}; seed {seed} (--seed {seed} repeats the rounds' orders)\n\n"),
    );
    let mut collected = Vec::new();
    if args.suite.includes(Suite::Ring) {
        collected.push(ring::run(&args, &pinning, seed));
    }
    if args.suite.includes(Suite::Bus) {
        collected.push(bus::run(&args, &pinning, seed));
    }
    if args.suite.includes(Suite::Udp) {
        collected.push(udp::run(&args, &pinning, seed));
    }
    if args.suite.includes(Suite::Ipc) {
        collected.push(ipc::run(&args, &pinning, seed));
    }
    if args.suite.includes(Suite::Record) {
        collected.push(record::run(&args, &pinning, seed));
    }
    if args.suite.includes(Suite::Zenoh) {
        collected.push(zenoh::run(&args, seed));
    }
    if let Some(dir) = &args.plot {
        for out in &collected {
            match plot::suite(dir, out, &machine) {
                Ok(files) => {
                    for f in files {
                        eprintln!("wrote {}", f.display());
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
