//! Statistics: medians over rounds, latency histograms and percentiles, the clock's cost, and
//! the collector of every round's figures.

use std::fmt;
use std::time::Instant;

use hdrhistogram::Histogram;

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
/// commonest differences of back-to-back reads (on a VM whose clock moves in 10 ns steps,
/// 20 and 30 ns). Every round-trip sample is a multiple of it, give or take 1 ns.
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
    pub(super) suite: &'static str,
    pub(super) verbose: bool,
    /// The round being run, set by [`run_rounds`](super::run_rounds).
    pub(super) round: usize,
    /// The implementations in table order, set by [`run_rounds`](super::run_rounds): rows and pictures follow it
    /// rather than the first round's random order.
    pub(super) order: Vec<&'static str>,
    pub(super) entries: Vec<Entry>,
    pub(super) histograms: Vec<(&'static str, Histogram<u64>)>,
}

#[derive(Debug)]
pub(super) struct Entry {
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
    pub(super) fn rank(&self, implementation: &str) -> usize {
        self.order
            .iter()
            .position(|n| *n == implementation)
            .unwrap_or(self.order.len())
    }

    /// The suite's name.
    pub fn suite(&self) -> &'static str {
        self.suite
    }

    pub(super) fn entry(
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
    pub(super) fn paired(
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
