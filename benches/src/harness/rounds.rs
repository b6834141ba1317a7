//! Rounds: every implementation once per measurement, in a fresh seeded order each round,
//! until the rounds asked for or the suite's time budget.

use std::time::{Duration, Instant};

use super::*;

/// A fresh random order of `n` implementations (a permutation of `0..n`).
pub fn shuffled(n: usize, rng: &mut fastrand::Rng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    order
}

/// The machine, for the output and the pictures: CPU model, logical CPUs and kernel, e.g.
/// `AMD EPYC 7B13, 2 vCPUs, Linux 6.1.0` (from `/proc`; less where it is not there).
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!(", {} {}", std::env::consts::OS, r.trim()))
        .unwrap_or_default();
    format!("{model}, {cpus} vCPUs{kernel}")
}

/// The seed of the rounds' order: `--seed`, or one from the clock.
pub fn seed(args: &Args) -> u64 {
    args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            % 1_000_000
    })
}

/// A suite's whole measurement: [`run_rounds`] into a fresh [`Collector`] with a generator
/// seeded by `seed`, then the figures and the targets printed. Returns the collector, the
/// rounds run and the figures.
#[allow(clippy::too_many_arguments)]
pub fn run_suite(
    args: &Args,
    suite: &'static str,
    seed: u64,
    phases: usize,
    names: &[&'static str],
    (rounds, budget): (usize, Duration),
    targets: &[Target],
    run_one: impl FnMut(&mut Collector, usize, usize),
) -> (Collector, usize, Vec<Figure>) {
    let mut out = Collector::new(suite, args.verbose);
    let mut rng = fastrand::Rng::with_seed(seed);
    let rounds_done = run_rounds(&mut out, phases, names, rounds, budget, &mut rng, run_one);
    let figures = out.figures();
    print_figures(args, &figures);
    print_targets(args, targets, &figures, &out);
    (out, rounds_done, figures)
}

/// Runs up to `rounds` rounds of the implementations `names`. A round has `phases` phases (one
/// per measurement); in each, `run_one(out, phase, i)` runs implementation `i` once and records
/// into `out`, in an order freshly shuffled by `rng` for each phase of each round ([`shuffled`]),
/// printed on stderr with the progress. Starts no new round once the time used plus the last
/// round's time would pass `budget`. Returns the number of rounds run.
pub fn run_rounds(
    out: &mut Collector,
    phases: usize,
    names: &[&'static str],
    rounds: usize,
    budget: Duration,
    rng: &mut fastrand::Rng,
    mut run_one: impl FnMut(&mut Collector, usize, usize),
) -> usize {
    let started = Instant::now();
    let suite = out.suite;
    out.order = names.to_vec();
    for round in 0..rounds {
        out.round = round;
        let round_start = Instant::now();
        let mut orders = Vec::with_capacity(phases);
        for phase in 0..phases {
            let order = shuffled(names.len(), rng);
            for &i in &order {
                run_one(out, phase, i);
            }
            orders.push(
                order
                    .iter()
                    .map(|&i| names[i])
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        let took = round_start.elapsed();
        let elapsed = started.elapsed();
        eprintln!(
            "{suite}: round {}/{rounds} done in {} ({} total); orders: {}",
            round + 1,
            secs(took),
            secs(elapsed),
            orders.join(" | ")
        );
        if round + 1 < rounds && elapsed + took > budget {
            eprintln!(
                "{suite}: stopping after {} rounds: another would pass the {} budget",
                round + 1,
                secs(budget)
            );
            return round + 1;
        }
    }
    rounds
}
