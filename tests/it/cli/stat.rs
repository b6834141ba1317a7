//! `llbus list` and `llbus stat` against the `watched` example, both as separate processes:
//! what the command reports while the bus runs (quiet) must equal the example's own final
//! report, edge by edge and actor by actor; the file goes when the example exits; a crashed
//! example leaves a file that `list` calls stale and `--prune` removes.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tests::cli::{llbus, CountersDir, Watched};
use tests::example_bins::Fields;

const COUNT: u64 = 50_000;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "llbus failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("llbus printed JSON")
}

fn field(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("no number {k} in {v}"))
}

#[test]
fn stat_reports_what_the_example_reports_and_the_file_goes_with_it() {
    let dir = CountersDir::new("stat");
    let count = COUNT.to_string();
    let mut w = Watched::spawn(&dir, &["--name", "clitest", "--count", &count]);
    let ready = w.wait_for("READY", Duration::from_secs(180));
    let pid = Fields::find(&ready, "READY ").expect("fields").u64("pid");

    let list = json(&llbus(&dir, &["list", "--json"]));
    let rows = list.as_array().expect("an array");
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["bus"], "clitest");
    assert_eq!(rows[0]["live"], true);
    assert_eq!(field(&rows[0], "pid"), pid);
    assert!(stdout(&llbus(&dir, &["list"])).contains("clitest"));

    // The example is quiet, so a snapshot that shows every price published is final.
    let mut stat = Value::Null;
    tests::wait_for("the counters file to show every price", 60, || {
        stat = json(&llbus(&dir, &["stat", "clitest", "--json"]));
        stat["edges"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e["topic"] == "demo.fill" && field(e, "handled") == COUNT)
        })
    });
    assert_eq!(field(&stat, "pid"), pid);
    assert_eq!(stat["live"], true);
    // The same bus is found by its process id, and the table and OpenMetrics forms agree.
    let by_pid = json(&llbus(&dir, &["stat", &pid.to_string(), "--json"]));
    assert_eq!(by_pid["edges"], stat["edges"]);
    let table = stdout(&llbus(&dir, &["stat"]));
    assert!(
        table.contains("feed -> scale") && table.contains("scale -> fills"),
        "{table}"
    );
    let om = stdout(&llbus(&dir, &["stat", "--openmetrics"]));
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains(&format!(
        "llbus_edge_handled_total{{bus=\"clitest\",topic=\"demo.fill\",publisher=\"scale\",subscriber=\"fills\",policy=\"Block\"}} {COUNT}\n"
    )), "{om}");
    let watch = stdout(&llbus(
        &dir,
        &["stat", "--watch", "--count", "2", "--interval-ms", "100"],
    ));
    assert_eq!(watch.matches("bus clitest").count(), 2, "{watch}");
    assert!(
        watch.contains("RATE/S"),
        "the second print has interval rates: {watch}"
    );

    let file = dir.files();
    assert_eq!(file.len(), 1);
    let output = w.stop(Duration::from_secs(60));
    let output = output.join("\n");

    // Edge by edge, the command saw exactly the final report.
    let mut seen: HashMap<(String, String, String), &Value> = HashMap::new();
    for e in stat["edges"].as_array().expect("edges") {
        let key = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
        seen.insert((key("topic"), key("publisher"), key("subscriber")), e);
    }
    let edge_lines: Vec<&str> = output.lines().filter(|l| l.starts_with("EDGE ")).collect();
    assert_eq!(edge_lines.len(), 3, "{output}");
    assert_eq!(seen.len(), 3);
    for line in edge_lines {
        let f = Fields::find(line, "EDGE ").expect("fields");
        let key = (
            f.get("topic").unwrap_or_default().to_owned(),
            f.get("publisher").unwrap_or_default().to_owned(),
            f.get("subscriber").unwrap_or_default().to_owned(),
        );
        let e = seen
            .get(&key)
            .unwrap_or_else(|| panic!("llbus did not show {key:?}"));
        for k in [
            "published",
            "handled",
            "panicked",
            "dropped",
            "conflated",
            "waited",
            "lost",
            "in_flight",
            "max_depth",
        ] {
            assert_eq!(
                field(e, k),
                f.u64(k),
                "{k} of {key:?}: llbus {e} vs example {line}"
            );
        }
    }
    let actors: HashMap<String, &Value> = stat["actors"]
        .as_array()
        .expect("actors")
        .iter()
        .map(|a| (a["name"].as_str().unwrap_or_default().to_owned(), a))
        .collect();
    let actor_lines: Vec<&str> = output.lines().filter(|l| l.starts_with("ACTOR ")).collect();
    assert_eq!(actor_lines.len(), 4, "{output}");
    for line in actor_lines {
        let f = Fields::find(line, "ACTOR ").expect("fields");
        let name = f.get("name").unwrap_or_default();
        let a = actors
            .get(name)
            .unwrap_or_else(|| panic!("llbus did not show actor {name}"));
        for k in ["handled", "ticks", "restarts", "panics"] {
            assert_eq!(field(a, k), f.u64(k), "{k} of {name}");
        }
        assert_eq!(a["thread"].as_str(), f.get("thread"));
    }

    // The bus is gone, and so is its file.
    assert!(!file[0].exists(), "the counters file outlived the example");
    let list = json(&llbus(&dir, &["list", "--json"]));
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    let gone = llbus(&dir, &["stat", "clitest"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("no running bus is called 'clitest'"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
}

#[test]
fn a_crashed_bus_leaves_a_stale_file_that_list_recognises_and_prune_removes() {
    let dir = CountersDir::new("stale");
    let mut w = Watched::spawn(&dir, &["--name", "crashy", "--count", "100"]);
    w.wait_for("READY", Duration::from_secs(180));
    w.kill();
    assert_eq!(dir.files().len(), 1, "SIGKILL leaves the file behind");
    let list = json(&llbus(&dir, &["list", "--json"]));
    assert_eq!(list[0]["bus"], "crashy");
    assert_eq!(list[0]["live"], false, "{list}");
    assert!(stdout(&llbus(&dir, &["list"])).contains("stale"));
    // A stale bus is not a running one.
    let stat = llbus(&dir, &["stat"]);
    assert!(!stat.status.success());
    assert!(String::from_utf8_lossy(&stat.stderr).contains("no llbus bus is running"));
    let pruned = llbus(&dir, &["list", "--prune"]);
    assert!(pruned.status.success());
    assert!(dir.files().is_empty(), "prune left {:?}", dir.files());
}

#[test]
fn a_broken_file_is_reported_not_fatal() {
    let dir = CountersDir::new("broken");
    std::fs::write(
        dir.path().join("llbus-junk-1-0.cnc"),
        b"not a counters file at all",
    )
    .unwrap();
    let out = llbus(&dir, &["list"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("broken"), "{}", stdout(&out));
    let stat = llbus(
        &dir,
        &[
            "stat",
            &dir.path().join("llbus-junk-1-0.cnc").display().to_string(),
        ],
    );
    assert!(!stat.status.success());
    assert!(String::from_utf8_lossy(&stat.stderr).contains("not a valid llbus counters file"));
}
