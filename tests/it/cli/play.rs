//! `llbus record` then `llbus play`, as processes, between the `publisher` and `subscriber`
//! examples: the subscriber, which knows nothing of the player, subscribes to the replayed
//! recording as to the original publisher (same topic, fingerprint and shape) and its RESULT
//! checks pass: every counter value from the first to the last, in order, payloads intact.

use std::process::Command;
use std::time::Duration;

use tests::cli::{llbus, llbus_bin, CountersDir};
use tests::example_bins::{example, free_udp_port, Fields, Running};

const COUNT: u64 = 500;

#[test]
#[cfg_attr(miri, ignore)]
fn the_subscriber_example_receives_a_replayed_recording_of_the_publisher_example() {
    let _ = llbus_bin();
    let dir = CountersDir::new("play");
    let path = std::env::temp_dir().join(format!("llbus-play-{}.mcap", std::process::id()));
    let file = path.to_string_lossy().into_owned();
    let count = COUNT.to_string();
    // Both examples: the count, 40-byte payloads the subscriber checks, sleeping threads.
    let both = ["--count", &count, "--size", "40", "--idle", "park"];

    // Record the publisher example's counters (40-byte payloads the subscriber checks).
    let pub_port = free_udp_port();
    let mut cmd = Command::new(example("publisher"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path())
        .args([
            "--bind",
            &format!("127.0.0.1:{pub_port}"),
            "--rate",
            "1000",
            "--wait-subscriber",
        ])
        .args(both);
    let publisher = Running::spawn("publisher", cmd);
    let publisher_addr = format!("127.0.0.1:{pub_port}");
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &publisher_addr,
            "--topic",
            "demo.counter",
            "--count",
            &count,
            "--output",
            &file,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {err}\n{text}");
    assert!(
        text.contains(&format!("RECORDED messages={COUNT} gaps=0 ")),
        "{text}"
    );
    drop(publisher.finish(Duration::from_secs(30)));

    // Play it to the subscriber example.
    let play_port = free_udp_port();
    let mut cmd = Command::new(llbus_bin());
    cmd.env("LLBUS_COUNTERS_DIR", dir.path()).args([
        "play",
        &file,
        "--bind",
        &format!("127.0.0.1:{play_port}"),
        "--wait-subscriber",
    ]);
    let player = Running::spawn("llbus play", cmd);
    let mut cmd = Command::new(example("subscriber"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path())
        .args([
            "--bind",
            &format!("127.0.0.1:{}", free_udp_port()),
            "--publisher",
            &format!("127.0.0.1:{play_port}"),
            "--timeout-s",
            "30",
        ])
        .args(both);
    let subscriber = Running::spawn("subscriber", cmd);
    let (status, out, err) = subscriber.finish(Duration::from_secs(40));
    assert!(
        status.is_some_and(|s| s.success()),
        "subscriber failed ({status:?}):\n{out}\n{err}"
    );
    let r = Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT:\n{out}\n{err}"));
    let (status, played, _) = player.finish(Duration::from_secs(30));
    let _ = std::fs::remove_file(&path);
    assert!(status.is_some_and(|s| s.success()), "play failed: {played}");
    assert!(
        played.contains(&format!("PLAYED messages={COUNT} topics=1 ")),
        "{played}"
    );
    assert_eq!(r.u64("received"), COUNT, "{r}");
    assert_eq!(r.u64("first"), 0, "{r}");
    assert_eq!(r.u64("highest"), COUNT - 1, "{r}");
    for zero in [
        "lost",
        "duplicates",
        "invalid",
        "corrupt",
        "out_of_order",
        "errors",
    ] {
        assert_eq!(r.u64(zero), 0, "{zero}: {r}");
    }
}
