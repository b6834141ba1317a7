//! README "Examples": the subscriber "exits non-zero on timeout (`--timeout-s`, default 10)".

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
    assert!(err.contains("timed out"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a 1 s timeout took {:?}",
        started.elapsed()
    );
}
