//! The harness's unit tests.

use std::time::{Duration, Instant};

use super::output::push_json_str;
use super::*;

fn run(args: &[&str]) -> Result<Args, clap::Error> {
    <Args as clap::Parser>::try_parse_from(std::iter::once("benches").chain(args.iter().copied()))
}

#[test]
fn parse_defaults_to_all() {
    assert_eq!(
        run(&[]).unwrap(),
        Args {
            suite: Suite::All,
            json: false,
            markdown: false,
            rounds: None,
            quick: false,
            verbose: false,
            seed: None,
            plot: None,
        }
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
        ])
        .unwrap(),
        Args {
            suite: Suite::Ring,
            json: true,
            markdown: true,
            rounds: Some(5),
            quick: true,
            verbose: true,
            seed: Some(42),
            plot: Some("out".into()),
        }
    );
    let a = run(&["--rounds=3", "udp"]).unwrap();
    assert_eq!((a.suite, a.rounds), (Suite::Udp, Some(3)));
    for help in [&["bus", "--help"][..], &["-h"]] {
        let e = run(help).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
    }
    let long = run(&["--help"]).unwrap_err().to_string();
    assert!(
        long.contains("SUITES:") && long.contains("rtt p50 llbus-bus / llbus-ring"),
        "{long}"
    );
}

#[test]
fn parse_rejects_bad_input() {
    for bad in [
        &["rings"][..],
        &["ring", "bus"],
        &["--rounds"],
        &["--rounds", "0"],
        &["--rounds", "x"],
        &["--fast"],
        &["--seed"],
        &["--seed", "-1"],
        &["--plot"],
    ] {
        assert!(run(bad).is_err(), "{bad:?} was accepted");
    }
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
