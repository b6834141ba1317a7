//! `llbus topics` against the `publisher` example announcing on loopback multicast, and the
//! `subscriber` example finding that publisher with no address given: separate processes.

use std::process::Command;
use std::time::Duration;

use tests::cli::{llbus, llbus_bin, CountersDir};
use tests::example_bins::{example, free_udp_port, Running};

/// The `publisher` example on loopback port `port` with `announce` (its `--announce` flag and
/// value), once it says it announces.
fn announcing(dir: &CountersDir, port: u16, announce: &[&str]) -> Running {
    let mut cmd = Command::new(example("publisher"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path());
    cmd.args(["--bind", &format!("127.0.0.1:{port}"), "--rate", "1000"])
        .args(["--count", "600000"])
        .args(announce);
    let mut publisher = Running::spawn("publisher", cmd);
    publisher
        .wait_line(Duration::from_secs(30), |l| l.contains("announced on"))
        .expect("the publisher starts");
    publisher
}

/// `llbus topics` lists what a `publisher --announce` announces, and `subscriber --discover`
/// finds that publisher with no address given, as separate processes over loopback multicast.
#[test]
fn topics_lists_an_announced_publisher_that_a_subscriber_discovers() {
    let group = format!("239.255.76.79:{}", free_udp_port());
    if !tests::loopback_group_or_skip(group.parse().unwrap()) {
        return;
    }
    let port = free_udp_port();
    let dir = CountersDir::new("topics");
    // Both built before the publisher starts, so that it is still running when asked.
    let _ = (llbus_bin(), example("subscriber"));
    let publisher = announcing(&dir, port, &["--announce", &group]);
    let out = llbus(
        &dir,
        &[
            "topics",
            "--group",
            &group,
            // No --interface: by default the command hears this host's loopback bridges too
            // (the examples bind loopback).
            "--listen-ms",
            "1500",
            "--json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    let topic = &listed["topics"][0];
    assert_eq!(topic["topic"], "demo.counter", "{text}");
    assert_eq!(topic["fingerprint_mismatch"], false);
    assert_eq!(
        topic["publishers"][0]["address"],
        format!("127.0.0.1:{port}"),
        "{text}"
    );

    let mut cmd = Command::new(example("subscriber"));
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{}", free_udp_port()),
        "--discover",
        &group,
        "--count",
        "200",
        "--timeout-s",
        "20",
    ]);
    let (status, out, err) = Running::spawn("subscriber", cmd).finish(Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{out}\n{err}");
    assert!(
        out.contains(&format!("discovered: publisher 127.0.0.1:{port}")),
        "{out}"
    );
    publisher.kill();
}

/// `llbus topics` with no flag at all (the default group, every interface and loopback) lists
/// a `publisher --announce` of this host (its default group, bound to loopback).
#[test]
fn topics_with_no_flag_finds_a_local_announcing_publisher() {
    if !tests::loopback_group_or_skip(llbus_net::DEFAULT_DISCOVERY_GROUP) {
        return;
    }
    let port = free_udp_port();
    let dir = CountersDir::new("topics-default");
    let _ = llbus_bin();
    // `--announce` alone: the default group.
    let publisher = announcing(&dir, port, &["--announce"]);
    let out = llbus(&dir, &["topics", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    let address = format!("127.0.0.1:{port}");
    // Other bridges of this host may announce on the default group too: ours is among them.
    let ours = listed["topics"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|t| t["topic"] == "demo.counter")
        .flat_map(|t| t["publishers"].as_array().cloned().unwrap_or_default())
        .any(|p| p["address"] == address.as_str());
    assert!(ours, "{address} not listed: {text}");
    publisher.kill();
}

/// `llbus topics` with no flag lists the `service` example's risk check, announced with
/// `--announce`, as a service.
#[test]
fn topics_lists_the_service_example_announcing_as_a_service() {
    if !tests::loopback_group_or_skip(llbus_net::DEFAULT_DISCOVERY_GROUP) {
        return;
    }
    let port = free_udp_port();
    let dir = CountersDir::new("topics-service");
    let _ = llbus_bin();
    let mut cmd = Command::new(example("service"));
    cmd.env("LLBUS_COUNTERS_DIR", dir.path());
    cmd.args(["--bind", &format!("127.0.0.1:{port}"), "--duration-s", "30"])
        .arg("--announce");
    let mut service = Running::spawn("service", cmd);
    service
        .wait_line(Duration::from_secs(30), |l| l.contains("announced on"))
        .expect("the service starts");
    let out = llbus(&dir, &["topics", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    let address = format!("127.0.0.1:{port}");
    let risk = listed["topics"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|t| {
            t["topic"] == "demo.risk"
                && (t["publishers"].as_array().cloned().unwrap_or_default())
                    .iter()
                    .any(|p| p["address"] == address.as_str())
        })
        .unwrap_or_else(|| panic!("{address} not listed: {text}"));
    assert_eq!(risk["service"], true, "{text}");
    service.kill();
}
