//! The examples with `--transport shm`, as a user runs them: `pingpong` with its echo in a
//! second process prints a `RESULT` line with the round-trip percentiles, and `publisher` and
//! `subscriber` in two processes deliver every message in order. Both leave nothing behind in
//! the channel directory (this user's: `ChannelConfig::default().dir`). Children are killed if
//! a test fails; every wait is bounded.

use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, free_udp_port, Fields, Running};

/// Channel sockets in this user's channel directory whose name contains `needle`.
fn shm_files(needle: &str) -> Vec<String> {
    std::fs::read_dir(llbus_ipc::ChannelConfig::default().dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("llbus-ipc-") && n.contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for `run` to exit 0 within `timeout` and returns its stdout and its RESULT fields.
fn result(run: Running, timeout: Duration) -> (String, Option<Fields>) {
    let name = run.name().to_owned();
    let (status, out, err) = run.finish(timeout);
    assert!(
        status.is_some_and(|s| s.success()),
        "{name} failed ({status:?}):\n{out}\n{err}"
    );
    let fields = Fields::find(&out, "RESULT ");
    (out, fields)
}

#[test]
fn pingpong_over_shm_prints_percentiles_from_two_processes() {
    let mut cmd = Command::new(example("pingpong"));
    // Backoff, not spin: the tests share two cores with each other.
    cmd.args([
        "--transport",
        "shm",
        "--strategy",
        "backoff",
        "--count",
        "2000",
    ]);
    let (out, r) = result(Running::spawn("pingpong", cmd), Duration::from_secs(60));
    let r = r.unwrap_or_else(|| panic!("no RESULT line:\n{out}"));
    assert_eq!(r.get("transport"), Some("shm"));
    assert_eq!(r.u64("count"), 2000);
    let (p50, p99, p999) = (r.u64("p50_ns"), r.u64("p99_ns"), r.u64("p999_ns"));
    assert!(0 < p50 && p50 <= p99 && p99 <= p999, "{r}");
    let leftovers = shm_files("pingpong-");
    assert!(
        leftovers.is_empty(),
        "left in the channel directory: {leftovers:?}"
    );
}

#[test]
fn publisher_and_subscriber_over_shm_deliver_everything() {
    const COUNT: &str = "3000";
    let mut publ = Command::new(example("publisher"));
    publ.args([
        "--transport",
        "shm",
        "--bind",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--count",
        COUNT,
        "--rate",
        "5000",
        "--wait-subscriber",
        "--idle",
        "park",
    ]);
    let publ = Running::spawn("publisher", publ);
    let mut sub = Command::new(example("subscriber"));
    sub.args([
        "--transport",
        "shm",
        "--bind",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--count",
        COUNT,
        "--timeout-s",
        "30",
        "--idle",
        "park",
    ]);
    let (out, r) = result(Running::spawn("subscriber", sub), Duration::from_secs(45));
    let r = r.unwrap_or_else(|| panic!("no RESULT line:\n{out}"));
    assert_eq!(r.u64("received"), 3000, "{r}");
    assert_eq!(
        r.u64("lost") + r.u64("duplicates") + r.u64("reordered"),
        0,
        "{r}"
    );
    let (out, _) = result(publ, Duration::from_secs(20));
    assert!(out.contains("SHM moved=3000 dropped=0"), "{out}");
    let leftovers = shm_files("demo.counter");
    assert!(
        leftovers.is_empty(),
        "left in the channel directory: {leftovers:?}"
    );
}
