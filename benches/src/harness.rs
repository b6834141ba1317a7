//! Shared pieces of the comparison harness: argument parsing, pinning the two benchmark
//! threads, bounded spinning, round alternation, statistics and the two output formats.
//!
//! How a suite uses it:
//! - [`Args::parse`] turns the command line into a [`Command`].
//! - [`Pinning::probe`] checks once that threads can be pinned to cores 0 and 1; every
//!   measurement then runs on two fresh threads started by [`run_pair`], the first pinned to
//!   core 0 and the second to core 1, each with an explicit `CoreId { id }` and a checked
//!   return value (on this machine `core_affinity::get_core_ids()` from a pinned thread lists
//!   only that thread's core, so it must not be used to pick the second core). If pinning
//!   fails the run goes on unpinned and says so in its output.
//! - [`run_rounds`] runs the rounds: each runs every implementation once per measurement
//!   (phase), in a fresh random order per round and phase ([`shuffled`], from a seed printed
//!   in the output and taken back with `--seed`), so that no implementation always follows the
//!   same neighbour (the floor's hot cores, a blocking channel's parked threads): slow drifts
//!   and after-effects of a noisy machine then spread over all of them.
//! - [`Spin`] bounds every wait loop: it checks the clock every few thousand spins and gives
//!   up with [`Stuck`] past its deadline, so a broken implementation ends with an error
//!   instead of hanging the run.
//! - [`Collector`] keeps one value per (implementation, case) per round, and each
//!   implementation's round-trip histograms merged over rounds (for the pictures of `plot`);
//!   [`Collector::figures`] reduces the values to the median, min and max over rounds, which
//!   [`print_figures`] prints as a table ([`render_table`]) or as JSON lines ([`json_line`]).

use std::fmt;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Usage text printed by `--help` and after an argument error.
pub const USAGE: &str = "\
llbus comparison benchmarks

USAGE:
    cargo run --release -p benches -- [SUITE] [OPTIONS]

SUITES:
    ring    SPSC queues between two pinned threads: round-trip latency
            (p50/p99/p99.9/max) and one-way throughput (single item and batch)
            for the llbus ring, rtrb, crossbeam, std mpsc, disruptor and the
            cache-line floor
    bus     the bus against its bare ring (impls llbus-bus, llbus-ring): round
            trip between two actors on two pinned busy-spinning threads
            (rtt_p50, rtt_p99, rtt_p999, rtt_max), and messages/s per
            subscriber of one publisher fanning out to 1 and to 3 subscriber
            actors (throughput_fanout1, throughput_fanout3); the ring's
            throughput_fanout1 is a plain one-item-at-a-time stream, for
            reference. Target: rtt p50 llbus-bus / llbus-ring <= 1.10
    udp     UDP over loopback (impls llbus, raw-spin, raw-blocking,
            llbus-mac, the same with the pre-shared-key MAC on, and
            llbus-park, both hosts Idle::Park, sleeping in epoll):
            round trip of 32-byte messages (rtt_p50, rtt_p99, rtt_p999,
            rtt_max) through two bridges on two buses, against raw
            non-blocking (spinning) and blocking UDP sockets; and llbus
            messages/s delivered from bridge A to bridge B with batching
            (throughput_batch) and with one message per datagram
            (throughput_single), each with the loss in % (loss_batch,
            loss_single) and the messages per datagram sent
            (msgs_per_datagram_batch, msgs_per_datagram_single). Targets:
            rtt p50 llbus - raw-spin <= +1000 ns; llbus / raw-spin <= 1.25;
            llbus-park / raw-blocking <= 1.25; batch / single >= 5
    ipc     llbus-ipc's shared-memory ring (impls shm-threads: both ends in
            this process; shm-process: echo in a second process) against the
            in-process ring and udp-loopback: round trip (rtt_p50, rtt_p99,
            rtt_p999) and values/s one at a time and in batches of 64
            (throughput_single, throughput_batch). Targets: rtt p50
            shm-process / ring <= 1.3; batch shm-process / ring >= 0.5
    all     every suite above, in turn (the default)

OPTIONS:
    --json         print one JSON object per figure on its own line on stdout;
                   the table and progress go to stderr
    --markdown     print the tables as Markdown tables and the targets in a
                   code block, ready to paste into README.md
    --rounds N     number of rounds (each runs every implementation once per
                   measurement, in a fresh random order); figures are medians over
                   rounds, with their min and max [default: 15, and no new round
                   starts after the suite's time budget, so `all` stays under 4
                   minutes]
    --seed N       seed of the rounds' random order [default: from the clock];
                   printed in the output, so a run's order can be repeated
    --plot DIR     also write pictures into DIR, per suite: a round-trip
                   latency percentile plot (SUITE-latency) and a throughput bar
                   chart (SUITE-throughput), each as .svg and .png
    --quick        short windows and few rounds: a smoke test, not a measurement
    -v, --verbose  print every round's figures on stderr as they come
    -h, --help     print this text

Run on an otherwise idle machine with at least two cores: threads spin.
";

/// Which suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// SPSC ring comparison.
    Ring,
    /// Bus round trip against the bare ring.
    Bus,
    /// UDP loopback round trip.
    Udp,
    /// Shared-memory IPC (llbus-ipc) against the in-process ring and UDP.
    Ipc,
    /// Every suite.
    All,
}

impl Suite {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "ring" => Some(Self::Ring),
            "bus" => Some(Self::Bus),
            "udp" => Some(Self::Udp),
            "ipc" => Some(Self::Ipc),
            "all" => Some(Self::All),
            _ => None,
        }
    }

    /// Whether running `self` includes `other`.
    pub fn includes(self, other: Suite) -> bool {
        self == Suite::All || self == other
    }
}

/// Parsed command-line options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// Suite to run.
    pub suite: Suite,
    /// Print JSON lines instead of the table on stdout.
    pub json: bool,
    /// Print the tables as Markdown.
    pub markdown: bool,
    /// Number of rounds; `None` lets the suite choose.
    pub rounds: Option<usize>,
    /// Smaller sizes for a smoke test.
    pub quick: bool,
    /// Print every round's figures on stderr as they come.
    pub verbose: bool,
    /// Seed of the rounds' order; `None` takes one from the clock.
    pub seed: Option<u64>,
    /// Directory to write pictures into.
    pub plot: Option<std::path::PathBuf>,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Print [`USAGE`] and exit.
    Help,
    /// Run the benchmarks.
    Run(Args),
}

/// A command-line error, with a message that says what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Args {
    /// Parses the arguments after the program name.
    ///
    /// # Errors
    ///
    /// An unknown option, a second suite, or a missing or invalid `--rounds` value.
    pub fn parse<I, S>(args: I) -> Result<Command, ArgError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut suite = None;
        let mut json = false;
        let mut markdown = false;
        let mut rounds = None;
        let mut quick = false;
        let mut verbose = false;
        let mut seed = None;
        let mut plot = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg = arg.as_ref();
            match arg {
                "-h" | "--help" => return Ok(Command::Help),
                "--json" => json = true,
                "--markdown" => markdown = true,
                "--quick" => quick = true,
                "-v" | "--verbose" => verbose = true,
                "--rounds" => {
                    let value = args
                        .next()
                        .ok_or_else(|| ArgError("--rounds needs a number".into()))?;
                    rounds = Some(parse_rounds(value.as_ref())?);
                }
                _ if arg.starts_with("--rounds=") => {
                    rounds = Some(parse_rounds(&arg["--rounds=".len()..])?);
                }
                "--seed" => {
                    let value = args
                        .next()
                        .ok_or_else(|| ArgError("--seed needs a number".into()))?;
                    seed = Some(parse_seed(value.as_ref())?);
                }
                "--plot" => {
                    let value = args
                        .next()
                        .ok_or_else(|| ArgError("--plot needs a directory".into()))?;
                    plot = Some(value.as_ref().into());
                }
                _ if arg.starts_with('-') => {
                    return Err(ArgError(format!("unknown option `{arg}`; see --help")));
                }
                _ => {
                    let s = Suite::from_name(arg).ok_or_else(|| {
                        ArgError(format!(
                            "unknown suite `{arg}`; expected ring, bus, udp, ipc or all"
                        ))
                    })?;
                    if suite.replace(s).is_some() {
                        return Err(ArgError("give one suite (or `all`), not several".into()));
                    }
                }
            }
        }
        Ok(Command::Run(Args {
            suite: suite.unwrap_or(Suite::All),
            json,
            markdown,
            rounds,
            quick,
            verbose,
            seed,
            plot,
        }))
    }
}

fn parse_seed(value: &str) -> Result<u64, ArgError> {
    value
        .parse::<u64>()
        .map_err(|_| ArgError(format!("--seed takes a whole number, not `{value}`")))
}

fn parse_rounds(value: &str) -> Result<usize, ArgError> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ArgError(format!(
            "--rounds takes a whole number of at least 1, not `{value}`"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Pinning and threads.

/// Cores the two benchmark threads are pinned to.
pub const CORES: [usize; 2] = [0, 1];

/// Whether the benchmark threads are pinned, decided once by [`Pinning::probe`].
#[derive(Debug)]
pub struct Pinning {
    enabled: bool,
    /// Why pinning is off, when it is.
    reason: Option<String>,
    /// Set when a thread failed to pin after a successful probe.
    failed_later: AtomicBool,
}

impl Pinning {
    /// Tries to pin a scratch thread to each of [`CORES`] and prints a warning to stderr if
    /// that fails; the run then goes on unpinned.
    pub fn probe() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut reason = None;
        if cores < 2 {
            reason = Some(format!(
                "only {cores} core available; the two threads share it"
            ));
        } else {
            for id in CORES {
                // A fresh thread per core: the probing thread's own mask must stay wide.
                let ok = std::thread::spawn(move || pin_current(id))
                    .join()
                    .unwrap_or(false);
                if !ok {
                    reason = Some(format!("could not pin a thread to core {id}"));
                    break;
                }
            }
        }
        if let Some(why) = &reason {
            eprintln!("WARNING: {why}; running UNPINNED, figures are less stable");
        }
        Self {
            enabled: reason.is_none(),
            reason,
            failed_later: AtomicBool::new(false),
        }
    }

    /// Whether threads are pinned: suites that place their own threads (a bus's) pin them to
    /// [`CORES`] only then.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Pinning switched off, for tests.
    #[cfg(test)]
    pub fn disabled(reason: &str) -> Self {
        Self {
            enabled: false,
            reason: Some(reason.into()),
            failed_later: AtomicBool::new(false),
        }
    }

    /// One line for the output header.
    pub fn describe(&self) -> String {
        match (&self.reason, self.failed_later.load(Ordering::Relaxed)) {
            (Some(why), _) => format!("UNPINNED ({why})"),
            (None, true) => format!(
                "pinned to cores {} and {}, but some threads FAILED to pin (see warnings)",
                CORES[0], CORES[1]
            ),
            (None, false) => format!("pinned to cores {} and {}", CORES[0], CORES[1]),
        }
    }

    fn pin(&self, which: usize) {
        if self.enabled
            && !pin_current(CORES[which])
            && !self.failed_later.swap(true, Ordering::Relaxed)
        {
            eprintln!(
                "WARNING: could not pin a thread to core {}; it runs unpinned",
                CORES[which]
            );
        }
    }
}

/// Pins the calling thread to core `id`, by explicit id (see the module docs).
fn pin_current(id: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id })
}

/// Runs `a` on a thread pinned to core 0 and `b` on a thread pinned to core 1, concurrently,
/// and returns both results. A panic in either thread is re-raised here.
pub fn run_pair<RA, RB>(
    pinning: &Pinning,
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB)
where
    RA: Send,
    RB: Send,
{
    std::thread::scope(|s| {
        let ha = s.spawn(|| {
            pinning.pin(0);
            a()
        });
        let hb = s.spawn(|| {
            pinning.pin(1);
            b()
        });
        let rb = hb.join();
        let ra = ha.join();
        match (ra, rb) {
            (Ok(ra), Ok(rb)) => (ra, rb),
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Bounded waiting.

/// A wait loop gave up: the other side did not answer before the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stuck;

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timed out waiting for the other thread (stuck or disconnected)")
    }
}

/// A bounded spin: call [`Spin::tick`] once per failed attempt.
#[derive(Debug, Clone, Copy)]
pub struct Spin {
    deadline: Instant,
    spins: u32,
}

impl Spin {
    /// Clock is read once every this many ticks.
    const CHECK_EVERY: u32 = 4096;

    /// A spin that gives up at `deadline`.
    #[inline]
    pub fn until(deadline: Instant) -> Self {
        Self { deadline, spins: 0 }
    }

    /// Records one failed attempt; returns [`Stuck`] once past the deadline.
    ///
    /// # Errors
    ///
    /// [`Stuck`] when the deadline has passed.
    #[inline]
    pub fn tick(&mut self) -> Result<(), Stuck> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % Self::CHECK_EVERY == 0 && Instant::now() >= self.deadline {
            return Err(Stuck);
        }
        // NB: a pause in every implementation's wait loop, so that all of them are treated
        // alike; it also leaves the pipeline to a sibling hyperthread of a shared vCPU.
        std::hint::spin_loop();
        Ok(())
    }
}

/// Spins until `ready()` holds or `deadline` passes.
///
/// # Errors
///
/// [`Stuck`] when the deadline passes first.
pub fn spin_until(deadline: Instant, mut ready: impl FnMut() -> bool) -> Result<(), Stuck> {
    let mut spin = Spin::until(deadline);
    while !ready() {
        spin.tick()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Rounds and statistics.

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

/// Median of `values` (mean of the two middle values for an even count); `None` if empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// A fresh latency histogram in nanoseconds: 1 ns to 60 s, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("constant bounds are valid")
}

/// Percentiles of one round-trip histogram, in the histogram's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest recorded value.
    pub max: u64,
}

impl Percentiles {
    /// Reads the percentiles out of `h`.
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// Measures the cost of one `Instant::now()`, in ns (median of several batches). Every
/// round-trip sample includes one such read.
pub fn clock_cost_ns() -> f64 {
    let mut batches = Vec::new();
    for _ in 0..9 {
        let n = 20_000u32;
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(Instant::now());
        }
        batches.push(start.elapsed().as_nanos() as f64 / f64::from(n));
    }
    median(&batches).unwrap_or(f64::NAN)
}

/// The step `Instant::now()` advances by, in ns, estimated as the gap between the two
/// commonest differences of back-to-back reads (on this VM they are 20 and 30 ns: the clock
/// moves in 10 ns steps). Every round-trip sample is a multiple of it, give or take 1 ns.
pub fn clock_step_ns() -> u64 {
    let mut counts = std::collections::HashMap::<u64, u32>::new();
    for _ in 0..100_000 {
        let t0 = Instant::now();
        let t1 = Instant::now();
        let d = t1.saturating_duration_since(t0).as_nanos() as u64;
        *counts.entry(d).or_default() += 1;
    }
    let mut by_count: Vec<(u64, u32)> = counts.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    match by_count.as_slice() {
        [(a, _), (b, _), ..] if a != b => a.abs_diff(*b),
        [(a, _), ..] => *a,
        [] => 0,
    }
}

/// One reported figure: the median over rounds, with the smallest and largest round.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Suite name (`ring`, `bus`, `udp`).
    pub suite: &'static str,
    /// Case name (`rtt_p50`, `throughput_single`, ...).
    pub case: &'static str,
    /// Implementation name.
    pub implementation: &'static str,
    /// The median over rounds; `None` when the case is skipped for this implementation.
    pub value: Option<f64>,
    /// The smallest round's value.
    pub min: Option<f64>,
    /// The largest round's value.
    pub max: Option<f64>,
    /// Unit (`ns`, `msgs/s`).
    pub unit: &'static str,
    /// Why the case is skipped or incomplete, if it is.
    pub note: Option<String>,
    /// How many rounds produced a value.
    pub rounds: usize,
}

/// Per-round values of every (implementation, case), in first-seen order, and each
/// implementation's round-trip histogram merged over rounds.
#[derive(Debug)]
pub struct Collector {
    suite: &'static str,
    verbose: bool,
    /// The round being run, set by [`run_rounds`].
    round: usize,
    /// The implementations in table order, set by [`run_rounds`]: rows and pictures follow it
    /// rather than the first round's random order.
    order: Vec<&'static str>,
    entries: Vec<Entry>,
    histograms: Vec<(&'static str, Histogram<u64>)>,
}

#[derive(Debug)]
struct Entry {
    implementation: &'static str,
    case: &'static str,
    unit: &'static str,
    /// (round, value) pairs.
    values: Vec<(usize, f64)>,
    notes: Vec<String>,
}

/// The round-trip cases, from one histogram per round.
pub const RTT_CASES: [&str; 4] = ["rtt_p50", "rtt_p99", "rtt_p999", "rtt_max"];

impl Collector {
    /// An empty collector for `suite`; `verbose` prints each value on stderr as it comes.
    pub fn new(suite: &'static str, verbose: bool) -> Self {
        Self {
            suite,
            verbose,
            round: 0,
            order: Vec::new(),
            entries: Vec::new(),
            histograms: Vec::new(),
        }
    }

    /// Where `implementation` comes in table order (unknown ones last, in first-seen order).
    fn rank(&self, implementation: &str) -> usize {
        self.order
            .iter()
            .position(|n| *n == implementation)
            .unwrap_or(self.order.len())
    }

    /// The suite's name.
    pub fn suite(&self) -> &'static str {
        self.suite
    }

    fn entry(
        &mut self,
        implementation: &'static str,
        case: &'static str,
        unit: &'static str,
    ) -> &mut Entry {
        let i = match self
            .entries
            .iter()
            .position(|e| e.implementation == implementation && e.case == case)
        {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    implementation,
                    case,
                    unit,
                    values: Vec::new(),
                    notes: Vec::new(),
                });
                self.entries.len() - 1
            }
        };
        &mut self.entries[i]
    }

    /// Records one round's value.
    pub fn add(
        &mut self,
        implementation: &'static str,
        case: &'static str,
        unit: &'static str,
        value: f64,
    ) {
        if self.verbose {
            eprintln!("  {implementation:<24} {case:<18} {value:>14.1} {unit}");
        }
        let round = self.round;
        self.entry(implementation, case, unit)
            .values
            .push((round, value));
    }

    /// Records a note (a skip reason or an error); repeated notes are kept once.
    pub fn note(
        &mut self,
        implementation: &'static str,
        case: &'static str,
        unit: &'static str,
        note: impl Into<String>,
    ) {
        let note = note.into();
        let e = self.entry(implementation, case, unit);
        if !e.notes.contains(&note) {
            e.notes.push(note);
        }
    }

    /// Records one round trip measurement of `name`: its percentiles as this round's
    /// [`RTT_CASES`], its histogram into `name`'s merged one; or its failure.
    pub fn add_rtt<E: fmt::Display>(
        &mut self,
        name: &'static str,
        result: Result<&Histogram<u64>, E>,
    ) {
        match result {
            Ok(h) if h.is_empty() => self.note(name, "rtt_p50", "ns", "no samples"),
            Ok(h) => {
                let p = Percentiles::of(h);
                for (case, v) in RTT_CASES.iter().zip([p.p50, p.p99, p.p999, p.max]) {
                    self.add(name, case, "ns", v as f64);
                }
                match self.histograms.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, merged)) => {
                        // Same bounds, so adding cannot fail; a failure would only lose the
                        // picture's samples, never a figure.
                        let _ = merged.add(h);
                    }
                    None => self.histograms.push((name, h.clone())),
                }
            }
            Err(e) => {
                eprintln!("ERROR: {name} round trip: {e}");
                for case in RTT_CASES {
                    self.note(name, case, "ns", format!("FAILED: {e}"));
                }
            }
        }
    }

    /// Each implementation's round-trip histogram, merged over rounds, in table order.
    pub fn histograms(&self) -> Vec<&(&'static str, Histogram<u64>)> {
        let mut h: Vec<_> = self.histograms.iter().collect();
        h.sort_by_key(|(name, _)| self.rank(name));
        h
    }

    /// The median, min and max of each (implementation, case) over its rounds, in table order.
    pub fn figures(&self) -> Vec<Figure> {
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by_key(|e| self.rank(e.implementation));
        entries
            .into_iter()
            .map(|e| {
                let values: Vec<f64> = e.values.iter().map(|&(_, v)| v).collect();
                Figure {
                    suite: self.suite,
                    case: e.case,
                    implementation: e.implementation,
                    value: median(&values),
                    min: values.iter().copied().reduce(f64::min),
                    max: values.iter().copied().reduce(f64::max),
                    unit: e.unit,
                    note: (!e.notes.is_empty()).then(|| e.notes.join("; ")),
                    rounds: values.len(),
                }
            })
            .collect()
    }
}

impl Collector {
    /// The median over rounds of `num / den`, each pair taken from the same round: steadier
    /// than a ratio of medians when the machine's speed shifts from round to round.
    pub fn paired_ratio(&self, num: (&str, &str), den: (&str, &str)) -> Option<f64> {
        self.paired(num, den, |n, d| (d > 0.0).then_some(n / d))
    }

    /// The median over rounds of `num - den`, each pair taken from the same round.
    pub fn paired_difference(&self, num: (&str, &str), den: (&str, &str)) -> Option<f64> {
        self.paired(num, den, |n, d| Some(n - d))
    }

    /// The median over rounds of `combine(num, den)`, each pair taken from the same round.
    fn paired(
        &self,
        num: (&str, &str),
        den: (&str, &str),
        combine: impl Fn(f64, f64) -> Option<f64>,
    ) -> Option<f64> {
        let values = |(imp, case): (&str, &str)| {
            self.entries
                .iter()
                .find(|e| e.implementation == imp && e.case == case)
                .map(|e| e.values.as_slice())
        };
        let (num, den) = (values(num)?, values(den)?);
        let combined: Vec<f64> = num
            .iter()
            .filter_map(|&(r, n)| {
                let &(_, d) = den.iter().find(|&&(rd, _)| rd == r)?;
                combine(n, d)
            })
            .collect();
        median(&combined)
    }
}

// ---------------------------------------------------------------------------------------------
// Targets.

/// How a [`Target`] compares its two figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// `num / den <= limit`.
    RatioAtMost(f64),
    /// `num / den >= limit`.
    RatioAtLeast(f64),
    /// `num - den <= limit`, in the figures' unit.
    ExcessAtMost(f64, &'static str),
}

/// One of an issue's targets: figure `num` compared with figure `den` of the same run.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// What is compared, for the output.
    pub what: &'static str,
    /// (implementation, case) of the figure compared.
    pub num: (&'static str, &'static str),
    /// (implementation, case) of the figure it is compared with.
    pub den: (&'static str, &'static str),
    /// The comparison and its limit.
    pub bound: Bound,
}

/// The targets checked against `figures`, one line each: the value from the medians, and the
/// median of the values of each round (steadier when the machine's speed shifts between
/// rounds); the verdict goes by the latter when both exist.
pub fn render_targets(targets: &[Target], figures: &[Figure], out: &Collector) -> String {
    let mut s =
        String::from("targets (within this run: from the medians | median of per-round values):\n");
    for t in targets {
        let num = find(figures, t.num.0, t.num.1);
        let den = find(figures, t.den.0, t.den.1);
        let (of_medians, paired) = match t.bound {
            Bound::RatioAtMost(_) | Bound::RatioAtLeast(_) => (
                match (num, den) {
                    (Some(n), Some(d)) if d > 0.0 => Some(n / d),
                    _ => None,
                },
                out.paired_ratio(t.num, t.den),
            ),
            Bound::ExcessAtMost(..) => (
                num.zip(den).map(|(n, d)| n - d),
                out.paired_difference(t.num, t.den),
            ),
        };
        let (show, limit_text, met): (fn(f64) -> String, String, bool) = match t.bound {
            Bound::RatioAtMost(l) => (
                |r| format!("{r:.3}"),
                format!("<= {l:.2}"),
                paired.or(of_medians).is_some_and(|r| r <= l),
            ),
            Bound::RatioAtLeast(l) => (
                |r| format!("{r:.3}"),
                format!(">= {l:.2}"),
                paired.or(of_medians).is_some_and(|r| r >= l),
            ),
            Bound::ExcessAtMost(l, unit) => (
                |d| format!("{d:+.0}"),
                format!("<= +{l:.0} {unit}"),
                paired.or(of_medians).is_some_and(|d| d <= l),
            ),
        };
        let show = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), show);
        let verdict = match (paired.or(of_medians), met) {
            (None, _) => "figure missing",
            (Some(_), true) => "met",
            (Some(_), false) => "MISSED",
        };
        s.push_str(&format!(
            "  {:<38} {:>6} | {:>6}  (target {limit_text})  {verdict}\n",
            t.what,
            show(of_medians),
            show(paired),
        ));
    }
    s
}

/// Looks up the value of `case` for `implementation`.
pub fn find(figures: &[Figure], implementation: &str, case: &str) -> Option<f64> {
    figures
        .iter()
        .find(|f| f.implementation == implementation && f.case == case)
        .and_then(|f| f.value)
}

// ---------------------------------------------------------------------------------------------
// Output.

/// One figure as a JSON object on one line, e.g.
/// `{"suite":"ring","case":"rtt_p50","impl":"rtrb","value":123.0,"unit":"ns"}`;
/// `None` for a skipped figure, which is not printed.
pub fn json_line(f: &Figure) -> Option<String> {
    let value = f.value.filter(|v| v.is_finite())?;
    let mut s = String::with_capacity(96);
    s.push_str("{\"suite\":");
    push_json_str(&mut s, f.suite);
    s.push_str(",\"case\":");
    push_json_str(&mut s, f.case);
    s.push_str(",\"impl\":");
    push_json_str(&mut s, f.implementation);
    let _ = write!(s, ",\"value\":{value:.1}");
    for (key, v) in [("min", f.min), ("max", f.max)] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let _ = write!(s, ",\"{key}\":{v:.1}");
        }
    }
    let _ = write!(s, ",\"rounds\":{},\"unit\":", f.rounds);
    push_json_str(&mut s, f.unit);
    s.push('}');
    Some(s)
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Formats a value for the table: ns as whole numbers, msgs/s in millions, percentages and
/// averages with decimals.
fn table_cell(value: f64, unit: &str) -> String {
    match unit {
        "msgs/s" => format!("{:.2}", value / 1e6),
        "%" => format!("{value:.2}"),
        "msgs" => format!("{value:.1}"),
        _ => format!("{value:.0}"),
    }
}

fn table_unit(unit: &str) -> &str {
    match unit {
        "msgs/s" => "M msgs/s",
        u => u,
    }
}

/// Renders `figures` as a table: one row per implementation, one column per case, each cell
/// the median over rounds followed by the smallest and largest round's value in parentheses
/// (`median (min..max)`), then one footnote per skipped or incomplete cell. `markdown` makes
/// it a Markdown table with the footnotes as a list.
pub fn render_table(figures: &[Figure], markdown: bool) -> String {
    let mut impls: Vec<&str> = Vec::new();
    let mut cases: Vec<(&str, &str)> = Vec::new();
    for f in figures {
        if !impls.contains(&f.implementation) {
            impls.push(f.implementation);
        }
        if !cases.iter().any(|(c, _)| *c == f.case) {
            cases.push((f.case, f.unit));
        }
    }
    let header: Vec<String> = cases
        .iter()
        .map(|(c, u)| format!("{c} ({})", table_unit(u)))
        .collect();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    for imp in &impls {
        let mut row = vec![imp.to_string()];
        for (case, _) in &cases {
            let f = figures
                .iter()
                .find(|f| f.implementation == *imp && f.case == *case);
            let mut cell = match f.and_then(|f| f.value.map(|v| (v, f))) {
                Some((v, f)) => match (f.min, f.max) {
                    (Some(lo), Some(hi)) if f.rounds > 1 => format!(
                        "{} ({}..{})",
                        table_cell(v, f.unit),
                        table_cell(lo, f.unit),
                        table_cell(hi, f.unit)
                    ),
                    _ => table_cell(v, f.unit),
                },
                None => "-".into(),
            };
            if let Some(note) = f.and_then(|f| f.note.as_ref()) {
                notes.push(format!("{imp} {case}: {note}"));
                cell.push_str(&format!(" [{}]", notes.len()));
            }
            row.push(cell);
        }
        rows.push(row);
    }
    let mut widths: Vec<usize> = std::iter::once("impl".len())
        .chain(header.iter().map(String::len))
        .collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let head: Vec<&str> = std::iter::once("impl")
        .chain(header.iter().map(String::as_str))
        .collect();
    let push = |out: &mut String, cells: &[&str]| push_row(out, cells, &widths, markdown);
    push(&mut out, &head);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, w)| match (markdown, i) {
            (false, _) => "-".repeat(*w),
            (true, 0) => format!("{:-<w$}", ":"),
            (true, _) => format!("{:->w$}", ":"),
        })
        .collect();
    push(
        &mut out,
        &rule.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for row in &rows {
        push(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    if markdown && !notes.is_empty() {
        out.push('\n');
    }
    for (i, note) in notes.iter().enumerate() {
        let bullet = if markdown { "- " } else { "" };
        let _ = writeln!(out, "{bullet}[{}] {note}", i + 1);
    }
    out
}

fn push_row(out: &mut String, cells: &[&str], widths: &[usize], markdown: bool) {
    let sep = if markdown { " | " } else { "  " };
    if markdown {
        out.push_str("| ");
    }
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        if i == 0 {
            let _ = write!(out, "{cell:<w$}");
        } else {
            let _ = write!(out, "{sep}{cell:>w$}");
        }
    }
    if markdown {
        out.push_str(" |");
    }
    out.push('\n');
}

/// Where the human-readable output goes: stdout normally, stderr under `--json` so that
/// stdout holds nothing but JSON lines.
pub fn human(args: &Args, text: &str) {
    if args.json {
        eprint!("{text}");
    } else {
        print!("{text}");
        // Keep the order with the progress lines on stderr.
        let _ = std::io::stdout().flush();
    }
}

/// Prints `figures`: as JSON lines on stdout under `--json`, and as a table (on stderr under
/// `--json`, stdout otherwise).
pub fn print_figures(args: &Args, figures: &[Figure]) {
    if args.json {
        for line in figures.iter().filter_map(json_line) {
            println!("{line}");
        }
    }
    human(args, &render_table(figures, args.markdown));
}

/// Prints the targets checked against `figures` ([`render_targets`]), in a code block under
/// `--markdown`.
pub fn print_targets(args: &Args, targets: &[Target], figures: &[Figure], out: &Collector) {
    let text = render_targets(targets, figures, out);
    if args.markdown {
        human(args, &format!("\n```text\n{text}```\n\n"));
    } else {
        human(args, &text);
    }
}

/// A short duration, for the plan lines: `50ms`, `1.5s`.
pub fn short(d: Duration) -> String {
    format!("{d:?}")
}

/// A duration in seconds, for progress messages.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, ArgError> {
        Args::parse(args.iter().copied())
    }

    #[test]
    fn parse_defaults_to_all() {
        assert_eq!(
            run(&[]),
            Ok(Command::Run(Args {
                suite: Suite::All,
                json: false,
                markdown: false,
                rounds: None,
                quick: false,
                verbose: false,
                seed: None,
                plot: None,
            }))
        );
    }

    #[test]
    fn parse_full_command_line() {
        assert_eq!(
            run(&[
                "ring",
                "--json",
                "--rounds",
                "5",
                "--quick",
                "-v",
                "--seed",
                "42",
                "--plot",
                "out",
                "--markdown"
            ]),
            Ok(Command::Run(Args {
                suite: Suite::Ring,
                json: true,
                markdown: true,
                rounds: Some(5),
                quick: true,
                verbose: true,
                seed: Some(42),
                plot: Some("out".into()),
            }))
        );
        let Ok(Command::Run(a)) = run(&["--rounds=3", "udp"]) else {
            panic!("should parse")
        };
        assert_eq!((a.suite, a.rounds), (Suite::Udp, Some(3)));
        assert_eq!(run(&["bus", "--help"]), Ok(Command::Help));
        assert_eq!(run(&["-h"]), Ok(Command::Help));
    }

    #[test]
    fn parse_rejects_bad_input() {
        assert!(run(&["rings"]).is_err());
        assert!(run(&["ring", "bus"]).is_err());
        assert!(run(&["--rounds"]).is_err());
        assert!(run(&["--rounds", "0"]).is_err());
        assert!(run(&["--rounds", "x"]).is_err());
        assert!(run(&["--fast"]).is_err());
        assert!(run(&["--seed"]).is_err());
        assert!(run(&["--seed", "-1"]).is_err());
        assert!(run(&["--plot"]).is_err());
    }

    #[test]
    fn suite_inclusion() {
        assert!(Suite::All.includes(Suite::Ring));
        assert!(Suite::Ring.includes(Suite::Ring));
        assert!(!Suite::Bus.includes(Suite::Ring));
    }

    #[test]
    fn rounds_run_everyone_and_stop_at_budget() {
        let mut out = Collector::new("t", false);
        let mut runs = Vec::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let names = ["a", "b", "c"];
        let done = run_rounds(
            &mut out,
            1,
            &names,
            2,
            Duration::from_secs(60),
            &mut rng,
            |out, _, i| {
                runs.push(i);
                out.add(names[i], "x", "ns", (out.round * 10 + i + 1) as f64);
            },
        );
        assert_eq!(done, 2);
        // Each round runs everyone once.
        for round in runs.chunks(3) {
            let mut r = round.to_vec();
            r.sort_unstable();
            assert_eq!(r, [0, 1, 2]);
        }
        // The same seed gives the same orders.
        let mut again = fastrand::Rng::with_seed(7);
        assert_eq!(shuffled(3, &mut again), runs[..3]);
        assert_eq!(shuffled(3, &mut again), runs[3..]);
        // Round 0: b/a = 2/1; round 1: b/a = 12/11.
        let r = out.paired_ratio(("b", "x"), ("a", "x")).unwrap();
        assert!((r - (2.0 + 12.0 / 11.0) / 2.0).abs() < 1e-9, "{r}");
        assert_eq!(out.paired_ratio(("b", "x"), ("z", "x")), None);
        let mut phases = Vec::new();
        let done = run_rounds(
            &mut out,
            2,
            &names[..2],
            5,
            Duration::ZERO,
            &mut rng,
            |_, phase, i| phases.push((phase, i)),
        );
        assert_eq!(done, 1);
        assert_eq!(phases.len(), 4);
        assert!(phases[..2].iter().all(|&(p, _)| p == 0));
        assert!(phases[2..].iter().all(|&(p, _)| p == 1));
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn shuffles_are_permutations_and_vary() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut o = shuffled(8, &mut rng);
            firsts.insert(o[0]);
            o.sort_unstable();
            assert_eq!(o, (0..8).collect::<Vec<_>>());
        }
        // A fixed rotation would start with each in turn; a shuffle starts with many, at random.
        assert!(firsts.len() >= 4, "{firsts:?}");
    }

    #[test]
    fn percentiles_from_histogram() {
        let mut h = latency_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        h.record(1_000_000).unwrap();
        let p = Percentiles::of(&h);
        // 3 significant digits: values are exact below 2048.
        assert_eq!(p.p50, 501);
        assert_eq!(p.p99, 991);
        assert_eq!(p.p999, 1000);
        assert!((1_000_000..=1_001_000).contains(&p.max), "{}", p.max);
    }

    fn figure(value: Option<f64>) -> Figure {
        Figure {
            suite: "ring",
            case: "rtt_p50",
            implementation: "rtrb",
            value,
            min: value,
            max: value,
            unit: "ns",
            note: None,
            rounds: 1,
        }
    }

    #[test]
    fn json_line_format() {
        assert_eq!(
            json_line(&figure(Some(123.0))).as_deref(),
            Some(
                r#"{"suite":"ring","case":"rtt_p50","impl":"rtrb","value":123.0,"min":123.0,"max":123.0,"rounds":1,"unit":"ns"}"#
            )
        );
        let mut f = figure(Some(12_345_678.25));
        f.case = "throughput_single";
        f.unit = "msgs/s";
        f.min = Some(1e6);
        f.max = None;
        assert_eq!(
            json_line(&f).as_deref(),
            Some(
                r#"{"suite":"ring","case":"throughput_single","impl":"rtrb","value":12345678.2,"min":1000000.0,"rounds":1,"unit":"msgs/s"}"#
            )
        );
        assert_eq!(json_line(&figure(None)), None);
        assert_eq!(json_line(&figure(Some(f64::NAN))), None);
        let mut s = String::new();
        push_json_str(&mut s, "a\"b\\c\n");
        assert_eq!(s, r#""a\"b\\c\u000a""#);
    }

    #[test]
    fn collector_medians_spread_notes_and_histograms() {
        let mut c = Collector::new("ring", false);
        for v in [30e6, 10e6, 20e6] {
            c.add("rtrb", "throughput_single", "msgs/s", v);
        }
        c.note("std-mpsc", "throughput_batch", "msgs/s", "no batch API");
        c.note("std-mpsc", "throughput_batch", "msgs/s", "no batch API");
        let mut h = latency_histogram();
        for v in [100u64, 200, 300] {
            h.record(v).unwrap();
        }
        c.add_rtt::<String>("llbus", Ok(&h));
        c.add_rtt::<String>("llbus", Ok(&h));
        c.add_rtt("floor", Err("stuck"));
        let figs = c.figures();
        assert_eq!(figs[0].value, Some(20e6));
        assert_eq!((figs[0].min, figs[0].max), (Some(10e6), Some(30e6)));
        assert_eq!(figs[0].rounds, 3);
        assert_eq!(figs[1].value, None);
        assert_eq!(figs[1].note.as_deref(), Some("no batch API"));
        assert_eq!(find(&figs, "llbus", "rtt_p50"), Some(200.0));
        assert_eq!(find(&figs, "llbus", "rtt_max"), Some(300.0));
        assert!(figs
            .iter()
            .any(|f| f.implementation == "floor" && f.note.as_deref() == Some("FAILED: stuck")));
        // Histograms are merged over rounds, one per implementation that produced one.
        assert_eq!(c.histograms().len(), 1);
        assert_eq!(c.histograms()[0].1.len(), 6);
        let table = render_table(&figs, false);
        let md = render_table(&figs, true);
        assert!(md.contains("| rtrb "), "{md}");
        assert!(
            md.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("| :--") && l.ends_with(": |")),
            "{md}"
        );
        assert!(
            md.contains("- [1] std-mpsc throughput_batch: no batch API"),
            "{md}"
        );
        assert!(table.contains("throughput_single (M msgs/s)"), "{table}");
        assert!(table.contains("20.00 (10.00..30.00)"), "{table}");
        assert!(table.contains("200 (200..200)"), "{table}");
        assert!(
            table.contains("std-mpsc throughput_batch: no batch API"),
            "{table}"
        );
    }

    #[test]
    fn targets_ratios_and_excess() {
        let mut c = Collector::new("udp", false);
        for (round, (a, b)) in [(5000.0, 4500.0), (6000.0, 4000.0), (5200.0, 5000.0)]
            .into_iter()
            .enumerate()
        {
            c.round = round;
            c.add("llbus", "rtt_p50", "ns", a);
            c.add("raw", "rtt_p50", "ns", b);
        }
        // Per-round differences 500, 2000, 200: median 500; of the medians 5200 - 4500 = 700.
        assert_eq!(
            c.paired_difference(("llbus", "rtt_p50"), ("raw", "rtt_p50")),
            Some(500.0)
        );
        let figs = c.figures();
        let t = |bound| Target {
            what: "x",
            num: ("llbus", "rtt_p50"),
            den: ("raw", "rtt_p50"),
            bound,
        };
        let text = render_targets(
            &[
                t(Bound::ExcessAtMost(1000.0, "ns")),
                t(Bound::ExcessAtMost(100.0, "ns")),
                t(Bound::RatioAtMost(1.10)),
                t(Bound::RatioAtLeast(5.0)),
            ],
            &figs,
            &c,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].contains("+700 |   +500  (target <= +1000 ns)  met"),
            "{text}"
        );
        assert!(lines[2].ends_with("MISSED"), "{text}");
        assert!(lines[3].contains("(target <= 1.10)  MISSED"), "{text}");
        assert!(lines[4].contains("(target >= 5.00)  MISSED"), "{text}");
        let missing = render_targets(
            &[Target {
                num: ("nobody", "rtt_p50"),
                ..t(Bound::RatioAtMost(1.0))
            }],
            &figs,
            &c,
        );
        assert!(missing.contains("n/a |    n/a"), "{missing}");
        assert!(missing.trim_end().ends_with("figure missing"), "{missing}");
    }

    #[test]
    fn spin_gives_up_after_deadline() {
        let mut spin = Spin::until(Instant::now());
        let mut ticks = 0u32;
        while spin.tick().is_ok() {
            ticks += 1;
            assert!(ticks < 1_000_000, "spin never gave up");
        }
        assert!(spin_until(Instant::now() + Duration::from_secs(1), || true).is_ok());
    }

    #[test]
    fn run_pair_runs_both_sides() {
        let pinning = Pinning::disabled("test");
        let (a, b) = run_pair(&pinning, || 1, || 2);
        assert_eq!((a, b), (1, 2));
        assert!(pinning.describe().starts_with("UNPINNED"));
    }
}
