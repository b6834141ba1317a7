//! `llbus hz` and `llbus spy` against the `publisher` example, as separate processes: the
//! typeless tap learns the topic's fingerprint from the publisher, subscribes over the ll-udp
//! wire protocol (version 2, with its cookie handshake), and accounts for every message the
//! publisher's own final report says it sent.

use std::process::Command;
use std::time::Duration;

use tests::cli::{llbus, llbus_bin, CountersDir};
use tests::example_bins::{example, free_udp_port, Fields, Running};

/// The publisher example; its counters file goes to `dir` (removed by the test), not to the
/// host's, since a test may kill it.
fn publisher(dir: &CountersDir, port: u16, rate: &str, count: &str) -> Running {
    let mut cmd = Command::new(example("publisher"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path());
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--rate",
        rate,
        "--count",
        count,
        "--wait-subscriber",
    ]);
    Running::spawn("publisher", cmd)
}

#[test]
fn hz_accounts_for_every_message_the_publisher_sent() {
    let port = free_udp_port();
    let dir = CountersDir::new("hz");
    let publisher = publisher(&dir, port, "5000", "3000");
    let _ = llbus_bin();
    let addr = format!("127.0.0.1:{port}");
    // Long enough for the publisher to count 3000 at 5000/s after admitting us, and its grace
    // of a second, with room for a slow start on a busy machine.
    let out = llbus(
        &dir,
        &[
            "hz",
            "demo.counter",
            "--publisher",
            &addr,
            "--duration-s",
            "3",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "hz failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, pub_out, pub_err) = publisher.finish(Duration::from_secs(60));
    let sent = Fields::find(&pub_out, "PUBLISHED ")
        .unwrap_or_else(|| panic!("no PUBLISHED line:\n{pub_out}\n{pub_err}"));
    let hz = Fields::find(&text, "HZ ").unwrap_or_else(|| panic!("no HZ line:\n{text}"));
    assert_eq!(sent.u64("published"), 3000, "{sent}");
    assert!(hz.u64("messages") > 0, "{text}");
    assert_eq!(
        hz.u64("messages") + hz.u64("lost"),
        sent.u64("messages_out"),
        "hz: {hz}\npublisher: {sent}"
    );
    // A counter is `n`, `sent_ns` and the `--size` payload: here empty, its 8-byte length.
    assert_eq!(
        hz.u64("bytes"),
        24 * hz.u64("messages"),
        "24-byte counters: {hz}"
    );
    assert!(
        text.contains("demo.counter: "),
        "no per-second line:\n{text}"
    );
}

#[test]
fn spy_shows_each_frames_header_and_payload() {
    let port = free_udp_port();
    let dir = CountersDir::new("spy");
    let publisher = publisher(&dir, port, "200", "5");
    let addr = format!("127.0.0.1:{port}");
    let out = llbus(
        &dir,
        &[
            "spy",
            "--publisher",
            &addr,
            "--topic",
            "demo.counter",
            "--count",
            "5",
            "--hex",
            "--duration-s",
            "30",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<Fields> = text
        .lines()
        .filter(|l| l.starts_with("FRAME "))
        .filter_map(|l| Fields::find(l, "FRAME "))
        .collect();
    assert_eq!(frames.len(), 5, "{text}");
    let seqs: Vec<u64> = frames.iter().map(|f| f.u64("seq")).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(frames.iter().all(|f| f.u64("len") == 24), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("0000: "))
            .count(),
        5
    );
    let spy = Fields::find(&text, "SPY ").expect("summary");
    assert_eq!(spy.u64("messages"), 5);
    assert_eq!(spy.get("fingerprint"), frames[0].get("fingerprint"));
    drop(publisher);
}

#[test]
fn a_topic_the_publisher_does_not_export_is_a_clear_error() {
    let port = free_udp_port();
    let dir = CountersDir::new("hzbad");
    let publisher = publisher(&dir, port, "100", "100000");
    let addr = format!("127.0.0.1:{port}");
    let out = llbus(
        &dir,
        &[
            "hz",
            "no.such.topic",
            "--publisher",
            &addr,
            "--duration-s",
            "20",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not export that topic"), "{err}");
    drop(publisher);
    // Nobody there at all: a bounded wait, then a clear error.
    let nobody = format!("127.0.0.1:{}", free_udp_port());
    let out = llbus(
        &dir,
        &[
            "hz",
            "demo.counter",
            "--publisher",
            &nobody,
            "--setup-timeout-s",
            "1",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no subscription to topic"));
}
