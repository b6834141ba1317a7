//! README "Examples": the subscriber exits non-zero when no message comes for `--timeout-s`,
//! and with `--reliable` exits 4 when a message arrives corrupted.

use std::process::Command;
use std::time::{Duration, Instant};

use tests::example_bins::{example, free_udp_port, Running};

#[test]
fn the_subscriber_exits_non_zero_when_its_publisher_never_answers() {
    // Nobody listens at the publisher's port: no refusal, no data, only the timeout.
    let mut cmd = Command::new(example("subscriber"));
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--publisher",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--count",
        "10",
        "--timeout-s",
        "1",
    ]);
    let started = Instant::now();
    let (status, out, err) = Running::spawn("subscriber", cmd).finish(Duration::from_secs(30));
    let code = status.and_then(|s| s.code());
    assert_eq!(code, Some(1), "exit status {status:?}\n{out}\n{err}");
    assert!(
        err.contains("no message for 1s (0 of 10 received) from the publisher at"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a 1 s timeout took {:?}",
        started.elapsed()
    );
}

/// README "Examples": with `--reliable` the subscriber "exits 4 if a message was unrecovered,
/// out of order or corrupted". Told to expect 100-byte payloads from a publisher that sends 64,
/// it finds every message corrupt.
#[test]
fn the_reliable_subscriber_exits_4_when_messages_arrive_corrupted() {
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let mut publisher = Command::new(example("publisher"));
    publisher.args([
        "--bind",
        &format!("127.0.0.1:{pub_port}"),
        "--reliable",
        "--size",
        "64",
        "--rate",
        "1000",
        "--count",
        "100000",
        "--wait-subscriber",
    ]);
    let publisher = Running::spawn("publisher", publisher);
    let mut subscriber = Command::new(example("subscriber"));
    subscriber.args([
        "--bind",
        &format!("127.0.0.1:{sub_port}"),
        "--publisher",
        &format!("127.0.0.1:{pub_port}"),
        "--reliable",
        "--size",
        "100",
        "--count",
        "50",
        "--timeout-s",
        "30",
    ]);
    let (status, out, err) =
        Running::spawn("subscriber", subscriber).finish(Duration::from_secs(90));
    publisher.kill();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(4),
        "exit status {status:?}\n{out}\n{err}"
    );
    let result = tests::example_bins::Fields::find(&out, "RESULT ")
        .unwrap_or_else(|| panic!("no RESULT line:\n{out}\n{err}"));
    assert!(result.u64("corrupt") > 0, "{out}");
}

/// README "Examples": the subscriber gives up when no message comes for `--timeout-s`, so a
/// stream that keeps coming runs as long as it takes: 1500 messages at 1000 a second against a
/// one-second timeout.
#[test]
fn a_stream_longer_than_the_timeout_that_keeps_coming_does_not_time_out() {
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let mut publ = Command::new(example("publisher"));
    publ.args(["--bind", &format!("127.0.0.1:{pub_port}")])
        .args([
            "--count",
            "1500",
            "--rate",
            "1000",
            "--wait-subscriber",
            "--idle",
            "park",
        ]);
    let publ = Running::spawn("publisher", publ);
    let mut sub = Command::new(example("subscriber"));
    sub.args(["--bind", &format!("127.0.0.1:{sub_port}")])
        .args(["--publisher", &format!("127.0.0.1:{pub_port}")])
        .args(["--count", "1500", "--timeout-s", "1", "--idle", "park"]);
    let started = Instant::now();
    let (status, out, err) = Running::spawn("subscriber", sub).finish(Duration::from_secs(60));
    let took = started.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    assert!(out.contains("received=1500 "), "{out}");
    assert!(
        took > Duration::from_secs(1),
        "the stream took only {took:?}: no test of the timeout"
    );
    let (status, out, err) = publ.finish(Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
}

/// SIGTERM to the publisher example (`RunningBus::stop_on_signals`): its bus stops
/// gracefully, the example prints its report and exits 0, and its counters file is gone.
#[test]
fn sigterm_stops_the_publisher_with_its_report_and_no_counters_file_left() {
    let dir = tests::cli::CountersDir::new("sigterm");
    let mut cmd = Command::new(example("publisher"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path());
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--rate",
        "1000",
    ]);
    let mut publisher = Running::spawn("publisher", cmd);
    publisher
        .wait_line(Duration::from_secs(30), |l| l.starts_with("published "))
        .expect("the publisher runs");
    assert_eq!(dir.files().len(), 1, "its counters file while it runs");
    let pid = publisher.pid().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let (status, out, err) = publisher.finish(Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "exit status {status:?}\n{out}\n{err}"
    );
    assert!(out.contains("PUBLISHED published="), "no report:\n{out}");
    assert!(out.contains("stop:"), "no stop in the report:\n{out}");
    assert!(dir.files().is_empty(), "left behind: {:?}", dir.files());
}
