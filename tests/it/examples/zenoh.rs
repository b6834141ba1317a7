//! The publisher and subscriber examples with `--transport zenoh`, as a user runs them in two
//! processes: peers on loopback with scouting off deliver every message in order, with the same
//! `RESULT` line as over UDP, in bincode and in JSON. `cargo test --workspace` builds the
//! examples with their feature `zenoh` (this package's dev-dependency on `examples` asks for it);
//! children are killed if a test fails; every wait is bounded.

use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, free_udp_port, Fields, Running};

const COUNT: u64 = 2000;

/// A loopback TCP port that was free a moment ago, for zenoh to listen on.
fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Waits for `run` to exit 0 within `timeout` and returns its stdout.
fn finished(run: Running, timeout: Duration) -> String {
    let name = run.name().to_owned();
    let (status, out, err) = run.finish(timeout);
    assert!(
        status.is_some_and(|s| s.success()),
        "{name} failed ({status:?}):\n{out}\n{err}"
    );
    out
}

/// Starts the publisher through zenoh (listening on a free loopback port) with `pub_args`,
/// then the subscriber (connecting to it) with `sub_args`; each on a free UDP port of its own.
fn spawn_pair(pub_args: &[&str], sub_args: &[&str]) -> (Running, Running) {
    let endpoint = format!("tcp/127.0.0.1:{}", free_tcp_port());
    let mut publ = Command::new(example("publisher"));
    publ.args(["--transport", "zenoh", "--zenoh-listen", &endpoint])
        .args(["--bind", &format!("127.0.0.1:{}", free_udp_port())])
        .args(pub_args);
    let publ = Running::spawn("publisher", publ);
    let mut sub = Command::new(example("subscriber"));
    sub.args(["--transport", "zenoh", "--zenoh-connect", &endpoint])
        .args(["--bind", &format!("127.0.0.1:{}", free_udp_port())])
        .args(sub_args);
    (publ, Running::spawn("subscriber", sub))
}

/// Runs the pair through zenoh in `encoding` and checks the subscriber's RESULT and the
/// publisher's ZENOH line.
fn pair_delivers_everything(encoding: &str) {
    let count = COUNT.to_string();
    let (publ, sub) = spawn_pair(
        &[
            "--zenoh-encoding",
            encoding,
            "--count",
            &count,
            "--rate",
            "5000",
        ]
        .into_iter()
        .chain(["--wait-subscriber", "--idle", "park"])
        .collect::<Vec<_>>(),
        &["--count", &count, "--timeout-s", "40", "--idle", "park"],
    );
    let out = finished(sub, Duration::from_secs(50));
    let r = Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT line:\n{out}"));
    assert_eq!(r.u64("received"), COUNT, "{r}");
    assert_eq!(r.u64("datagrams_in"), COUNT, "every sample arrived: {r}");
    assert_eq!((r.u64("first"), r.u64("highest")), (0, COUNT - 1), "{r}");
    assert_eq!(
        r.u64("lost") + r.u64("duplicates") + r.u64("reordered") + r.u64("invalid"),
        0,
        "{r}"
    );
    assert_eq!(r.u64("errors") + r.u64("ring_dropped"), 0, "{r}");
    let out = finished(publ, Duration::from_secs(20));
    assert!(
        out.contains(&format!("ZENOH put={COUNT} put_failed=0 ring_dropped=0")),
        "{out}"
    );
}

#[test]
fn publisher_and_subscriber_over_zenoh_deliver_everything_in_bincode() {
    pair_delivers_everything("bincode");
}

#[test]
fn publisher_and_subscriber_over_zenoh_deliver_everything_in_json() {
    pair_delivers_everything("json");
}

/// README "Examples" shows this pair through zenoh: the publisher with `--count 2000
/// --wait-subscriber` and the subscriber with `--count 2000`, every other flag at its default
/// (here only the ports are this test's own). The subscriber receives its count and exits 0.
#[test]
fn the_readme_pair_through_zenoh_delivers_its_count_with_the_readme_flags() {
    let (publ, sub) = spawn_pair(
        &["--count", "2000", "--wait-subscriber"],
        &["--count", "2000"],
    );
    let out = finished(sub, Duration::from_secs(60));
    let r = Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT line:\n{out}"));
    assert_eq!(r.u64("received"), 2000, "{r}");
    finished(publ, Duration::from_secs(30));
}
