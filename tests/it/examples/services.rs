//! The `service` and `caller` examples as a user runs them, two processes over UDP: every call
//! is answered and both sides' figures agree; a caller with no service exits 1 saying where it
//! looked.

use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, free_udp_port, Fields, Running};

#[test]
fn the_caller_gets_every_verdict_from_the_service_and_both_count_them() {
    let port = free_udp_port();
    let server = format!("127.0.0.1:{port}");
    let mut service = Command::new(example("service"));
    service.args(["--bind", &server, "--calls", "300"]);
    let mut service = Running::spawn("service", service);
    assert!(
        service
            .wait_line(Duration::from_secs(60), |l| l
                .starts_with("service: serving"))
            .is_some(),
        "the service never said it was serving"
    );
    let mut caller = Command::new(example("caller"));
    caller.args([
        "--server",
        &server,
        "--count",
        "300",
        "--timeout-ms",
        "5000",
    ]);
    let (status, out, err) = Running::spawn("caller", caller).finish(Duration::from_secs(120));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    let calls = Fields::find(&out, "RESULT ").expect("the caller's RESULT line");
    assert_eq!(calls.u64("calls"), 300, "{out}");
    assert_eq!(calls.u64("timeouts") + calls.u64("errors"), 0, "{out}");
    let (status, out, err) = service.finish(Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    let served = Fields::find(&out, "RESULT ").expect("the service's RESULT line");
    assert_eq!(served.u64("served"), 300, "each call run once: {out}");
    assert_eq!(served.u64("approved"), calls.u64("approved"), "{out}");
    assert_eq!(served.u64("refused"), calls.u64("refused"), "{out}");
}

#[test]
fn a_caller_with_no_service_times_out_and_exits_1_naming_the_server() {
    let server = format!("127.0.0.1:{}", free_udp_port());
    let mut caller = Command::new(example("caller"));
    caller.args(["--server", &server, "--count", "2", "--timeout-ms", "300"]);
    let (status, out, err) = Running::spawn("caller", caller).finish(Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{out}\n{err}");
    let calls = Fields::find(&out, "RESULT ").expect("the caller's RESULT line");
    assert_eq!(calls.u64("timeouts"), 2, "{out}");
    assert!(
        err.contains(&server),
        "the error names where it looked: {err}"
    );
}
