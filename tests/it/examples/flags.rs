//! The network examples' command lines, as a new user meets them: `--help` describes every
//! flag, a mistake is refused in words (never a `Debug` dump of an OS error), and by default
//! each process runs its bridge and its actor on one thread, `--split` on two; the publisher
//! keeps serving for `--grace-ms` after its `--count`.

use std::process::Command;
use std::time::{Duration, Instant};

use tests::example_bins::{example, free_udp_port, Running};

/// Runs example `name` with `args` to the end: (exit code, stdout, stderr).
fn run(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(example(name));
    cmd.args(args);
    let (status, out, err) = Running::spawn(name, cmd).finish(Duration::from_secs(60));
    (status.and_then(|s| s.code()), out, err)
}

#[test]
fn help_describes_every_flag() {
    let cases: [(&str, &[&str]); 3] = [
        (
            "publisher",
            &[
                "--bind",
                "--rate",
                "--count",
                "--compat",
                "--allow",
                "--wait-subscriber",
                "--grace-ms",
                "--subscriber-timeout-s",
                "--idle",
                "--split",
                "--psk",
                "--reliable",
                "--transport",
            ],
        ),
        (
            "subscriber",
            &[
                "--bind",
                "--publisher",
                "--count",
                "--timeout-s",
                "--compat",
                "--idle",
                "--split",
                "--psk",
                "--reliable",
                "--transport",
            ],
        ),
        (
            "pingpong",
            &["--strategy", "--count", "--transport", "--split"],
        ),
    ];
    for (name, flags) in cases {
        let (code, out, err) = run(name, &["--help"]);
        assert_eq!(code, Some(0), "{name} --help failed:\n{out}\n{err}");
        for flag in flags {
            // Each flag's line is followed by its description.
            let declares = |l: &str| {
                let l = l.trim_start();
                l == *flag || l.starts_with(&format!("{flag} "))
            };
            let described = out.lines().skip_while(|l| !declares(l)).nth(1);
            assert!(
                described.is_some_and(|d| d.trim().len() > 10),
                "{name} --help does not describe {flag}:\n{out}"
            );
        }
    }
}

#[test]
fn an_address_that_cannot_be_bound_is_refused_in_words() {
    // 192.0.2.1 (TEST-NET-1) is never an address of this host.
    let (code, out, err) = run("publisher", &["--bind", "192.0.2.1:7000", "--count", "1"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("cannot bind")
            && err.contains("192.0.2.1:7000")
            && err.contains("no network interface of this host has that address"),
        "the error should name the address and the reason:\n{err}"
    );
    assert!(!err.contains("Os {"), "a Debug dump, not words:\n{err}");

    // A port another socket holds.
    let held = std::net::UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
    let addr = held.local_addr().expect("its address").to_string();
    let (code, _, err) = run("subscriber", &["--bind", &addr, "--count", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&addr) && err.contains("another socket already has that port"),
        "{err}"
    );
}

#[test]
fn a_bad_flag_value_is_a_usage_error_naming_the_flag() {
    for (name, args, flag) in [
        ("publisher", &["--psk", "abc"][..], "--psk"),
        ("subscriber", &["--idle", "sleepy"][..], "--idle"),
        ("subscriber", &["--count", "0"][..], "--count"),
        (
            "pingpong",
            &["--transport", "carrier-pigeon"][..],
            "--transport",
        ),
        (
            "subscriber",
            &["--reliable", "--compat", "ll-udp"][..],
            "--reliable",
        ),
    ] {
        let (code, out, err) = run(name, args);
        assert_eq!(code, Some(2), "{name} {args:?}:\n{out}\n{err}");
        assert!(
            err.contains(flag),
            "{name} {args:?} should name {flag}:\n{err}"
        );
    }
}

/// The thread column of actor `actor` in the report's actor table.
fn thread_of(report: &str, actor: &str) -> Option<String> {
    report.lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        (cols.next() == Some(actor)).then(|| cols.next().map(str::to_owned))?
    })
}

#[test]
fn bridge_and_actor_share_a_thread_unless_split() {
    let bind = format!("127.0.0.1:{}", free_udp_port());
    let (code, out, err) = run("publisher", &["--bind", &bind, "--count", "3"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (bridge, feed) = (thread_of(&out, "bridge"), thread_of(&out, "feed"));
    assert!(
        bridge.is_some() && bridge == feed,
        "one thread by default:\n{out}"
    );

    let (code, out, err) = run("publisher", &["--bind", &bind, "--count", "3", "--split"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (bridge, feed) = (thread_of(&out, "bridge"), thread_of(&out, "feed"));
    assert!(
        bridge.is_some() && feed.is_some() && bridge != feed,
        "--split gives each its own thread:\n{out}"
    );
}

/// `publisher --help`: "With --count, how long the bridge keeps running after the last
/// message: its heartbeats (ten a second) tell subscribers the last sequence number and NAKs
/// are still answered". After its count the publisher still admits a subscriber (its bridge
/// serves), for `--grace-ms`, then exits 0 having published every message; by default for
/// 1000 ms.
#[test]
fn the_publisher_keeps_serving_for_its_grace_period_after_the_count() {
    // A subscriber that arrives after the count is admitted during the grace.
    let port = free_udp_port();
    let mut cmd = Command::new(example("publisher"));
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--count",
        "5",
        "--rate",
        "1000",
    ])
    .args(["--idle", "park", "--grace-ms", "3000"]);
    let mut publ = Running::spawn("publisher", cmd);
    assert!(
        publ.wait_line(Duration::from_secs(30), |l| l.contains("all 5 published"))
            .is_some(),
        "the publisher never finished its count"
    );
    let mut cmd = Command::new(example("subscriber"));
    cmd.args(["--bind", &format!("127.0.0.1:{}", free_udp_port())])
        .args(["--publisher", &format!("127.0.0.1:{port}")])
        .args(["--count", "1", "--timeout-s", "5", "--idle", "park"]);
    let sub = Running::spawn("subscriber", cmd);
    let admitted = publ.wait_line(Duration::from_secs(30), |l| l.contains("subscribers 1"));
    drop(sub);
    let (status, out, err) = publ.finish(Duration::from_secs(30));
    assert!(
        admitted.is_some(),
        "no subscriber was admitted after the count, during the grace:\n{out}\n{err}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    assert!(
        out.contains("PUBLISHED published=5 "),
        "every message published:\n{out}"
    );

    // By default the grace is a second: from the end of the count to the exit.
    let mut cmd = Command::new(example("publisher"));
    cmd.args(["--bind", &format!("127.0.0.1:{}", free_udp_port())])
        .args(["--count", "5", "--rate", "1000", "--idle", "park"]);
    let mut publ = Running::spawn("publisher", cmd);
    let line = publ.wait_line(Duration::from_secs(30), |l| l.contains("all 5 published"));
    let counted = Instant::now();
    let (status, out, err) = publ.finish(Duration::from_secs(30));
    let grace = counted.elapsed();
    assert!(
        line.is_some_and(|l| l.contains("serving for 1000 ms")),
        "{out}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    assert!(
        grace >= Duration::from_millis(900),
        "exited {grace:?} after its count, before its default 1 s grace:\n{out}"
    );
}

/// docs/CONTRACT.md, "The examples": "a bad flag value is a usage error naming the flag". A
/// negative number is a bad value of each numeric flag, and the error names that flag (not only
/// "unexpected argument '-1'").
#[test]
fn a_negative_number_is_a_usage_error_naming_its_flag() {
    for (name, flag) in [
        ("publisher", "--grace-ms"),
        ("publisher", "--count"),
        ("publisher", "--rate"),
        ("subscriber", "--count"),
        ("subscriber", "--timeout-s"),
    ] {
        let (code, out, err) = run(name, &[flag, "-1"]);
        assert_eq!(code, Some(2), "{name} {flag} -1:\n{out}\n{err}");
        assert!(
            err.contains(flag),
            "{name} {flag} -1 should name {flag}:\n{err}"
        );
    }
}

/// README "Examples": "Each takes `--help`". Asked for it, each example prints how to run it
/// and exits 0, without running.
#[test]
fn every_example_takes_help() {
    for name in ["quickstart", "soak", "watched"] {
        let (code, out, err) = run(name, &["--help"]);
        assert!(
            code == Some(0) && out.to_lowercase().contains("usage"),
            "{name} --help exited {code:?}:\n{out}\n{err}"
        );
    }
}
