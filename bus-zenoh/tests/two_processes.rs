//! A binary of its own because the process is the fixture: it runs itself again as the other
//! process. Two llbus processes that talk only through zenoh: peer to peer on loopback with
//! scouting off, through a zenoh session in router mode (both ends clients), a stop in the
//! middle at either end, a mismatched fingerprint, and a router that goes away and comes back;
//! and an export whose only zenoh peer, a process of its own, is killed mid-stream.
//!
//! Each llbus process is this test binary run again as a child (`child_process` below, chosen
//! by `LLBUS_ZENOH_CHILD`; the killed peer is `killed_peer_child_process`, chosen by
//! `LLBUS_ZENOH_PEER_CHILD`), so the tests need no other build. A child prints `READY` once its
//! gateway runs and `BOOKS k=v ...` at the end; the test adds the books of both ends up:
//! every message the publishing app published is delivered to the subscribing app or counted
//! by one of the two buses or gateways. The importer ends when its gateway has received or
//! counted lost every sample the exporter put (the test writes `END put=N` to its stdin once the
//! exporter's books are in), or after a time without messages.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Message, RecvTimeoutError};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Export, Gateway, Import, PayloadEncoding};
use serde::{Deserialize, Serialize};

#[path = "it/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;
use fixtures::{assert_edge_balances, export_edge, within, Tick, LIMIT};

/// The topic of `fixtures::Tick` with another shape: another fingerprint.
#[derive(Message, Clone, Debug, Serialize, Deserialize)]
#[message(topic = "test.tick")]
struct TickV2 {
    n: u64,
    extra: u32,
}

/// The longest any child runs.
const CHILD_DEADLINE: Duration = Duration::from_secs(45);

/// A free TCP port on loopback (bound, then released for zenoh to take).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("its address").port()
}

fn endpoint(port: u16) -> String {
    format!("tcp/127.0.0.1:{port}")
}

/// A zenoh config in JSON5: `mode`, listen and connect endpoints, no scouting.
fn config(mode: &str, listen: &[String], connect: &[String]) -> String {
    format!(
        r#"{{
            mode: "{mode}",
            listen: {{ endpoints: {listen:?} }},
            connect: {{ endpoints: {connect:?} }},
            scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }},
        }}"#
    )
}

/// What a child does, from its environment.
struct Role {
    role: String,
    config: String,
    count: u64,
    interval: Duration,
    stop_after: u64,
    v2: bool,
    encoding: PayloadEncoding,
    idle: Duration,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The entry of a child process; does nothing in the test run itself.
#[test]
fn child_process() {
    let Ok(role) = std::env::var("LLBUS_ZENOH_CHILD") else {
        return;
    };
    let role = Role {
        role,
        config: std::env::var("LLBUS_ZENOH_CONFIG").expect("config"),
        count: env_u64("LLBUS_ZENOH_COUNT", 1000),
        interval: Duration::from_micros(env_u64("LLBUS_ZENOH_INTERVAL_US", 0)),
        stop_after: env_u64("LLBUS_ZENOH_STOP_AFTER", u64::MAX),
        v2: std::env::var("LLBUS_ZENOH_V2").is_ok(),
        encoding: std::env::var("LLBUS_ZENOH_ENCODING")
            .ok()
            .and_then(|e| e.parse().ok())
            .unwrap_or_default(),
        idle: Duration::from_millis(env_u64("LLBUS_ZENOH_IDLE_MS", 2000)),
    };
    let config = zenoh::Config::from_json5(&role.config).expect("a valid zenoh config");
    match role.role.as_str() {
        "export" if role.v2 => export::<TickV2>(&role, config, |n| TickV2 { n, extra: 1 }),
        "export" => export::<Tick>(&role, config, |n| Tick { n }),
        "import" => import(&role, config),
        other => panic!("unknown child role {other}"),
    }
}

/// Publishes `count` messages through a gateway export, stopping the bus after `stop_after`.
fn export<T: Message + Clone + Serialize>(role: &Role, config: zenoh::Config, make: fn(u64) -> T) {
    let mut bus = Bus::builder();
    let app = bus.publisher::<T>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<T>(&mut bus, Export::new().encoding(role.encoding));
    let mut running = bus.start().expect("bus starts");
    let gateway = gateway.start(&mut running, config).expect("gateway starts");
    let matched = gateway.wait_matched(Duration::from_secs(20));
    println!("READY matched={matched}");
    let mut app = running.publisher(app).expect("handle");
    let mut refused = 0u64;
    for n in 0..role.count {
        if n == role.stop_after {
            running.stop();
        }
        if app.publish(make(n)).is_err() {
            refused += 1;
        }
        if !role.interval.is_zero() {
            std::thread::sleep(role.interval);
        }
    }
    drop(app);
    running.stop();
    let report = running.join().expect("bus joins");
    // Zenoh sends what was put in the background: give it time before the session closes.
    std::thread::sleep(Duration::from_millis(300));
    let counts = gateway.close();
    let edge = report
        .edge(T::TOPIC, "app", &format!("zenoh-export:{}", T::TOPIC))
        .expect("the export's edge");
    println!(
        "BOOKS sent={} refused_by_stop={} dropped={} lost={} put={} put_failed={}",
        edge.published, refused, edge.dropped, edge.lost, counts.put, counts.put_failed
    );
}

/// How many samples the exporter put, once the test says so on stdin (`END put=N`).
fn expected_from_stdin() -> Arc<AtomicU64> {
    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let told = Arc::clone(&expected);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("END put=").and_then(|n| n.parse().ok()) {
                told.store(n, Ordering::Relaxed);
            }
        }
    });
    expected
}

/// Receives through a gateway import until its gateway has received or counted lost every
/// sample the exporter put (told on stdin) and the app has read what arrived, or until `idle`
/// passes without a message (after the first); stops the bus after `stop_after` received.
fn import(role: &Role, config: zenoh::Config) {
    let expected = expected_from_stdin();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::Block, 1 << 16);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("bus starts");
    let gateway = gateway.start(&mut running, config).expect("gateway starts");
    println!("READY");
    let mut app = running.subscription(app).expect("handle");
    let deadline = Instant::now() + CHILD_DEADLINE - Duration::from_secs(5);
    let mut delivered = 0u64;
    let mut last = 0u64;
    let mut last_activity = Instant::now();
    let mut seen_any = false;
    let mut last_counts = gateway.counts();
    loop {
        match app.recv_timeout(Duration::from_millis(20)) {
            Ok(tick) => {
                delivered += 1;
                last = last.max(tick.n);
                seen_any = true;
                last_activity = Instant::now();
                if delivered == role.stop_after {
                    running.stop();
                }
            }
            Err(RecvTimeoutError::Closed) | Err(RecvTimeoutError::Timeout) => {
                // Refusals and samples after the stop are activity too.
                let counts = gateway.counts();
                if counts.received + counts.lost >= expected.load(Ordering::Relaxed) {
                    break;
                }
                if counts != last_counts {
                    last_counts = counts;
                    seen_any = true;
                    last_activity = Instant::now();
                }
            }
        }
        if (seen_any && last_activity.elapsed() > role.idle) || Instant::now() > deadline {
            break;
        }
    }
    // Whatever the app did not read counts lost on its edge at the drop.
    drop(app);
    running.stop();
    let report = running.join().expect("bus joins");
    let errors = gateway.errors();
    let counts = gateway.close();
    let edge = report
        .edge(Tick::TOPIC, "zenoh-import:test.tick", "app")
        .expect("the import's edge");
    for e in errors {
        println!("ERROR {e}");
    }
    println!(
        "BOOKS delivered={delivered} last={last} received={} published={} refused={} malformed={} \
         lost={} stopped={} late={} edge_dropped={} edge_lost={} edge_handled={}",
        counts.received,
        counts.published,
        counts.refused,
        counts.malformed,
        counts.lost,
        counts.stopped,
        counts.late,
        edge.dropped,
        edge.lost,
        edge.handled,
    );
}

/// A child process of this binary in `role`, with its output read line by line.
struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl ChildProc {
    fn spawn(role: &str, config: &str, env: &[(&str, String)]) -> ChildProc {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
        cmd.args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LLBUS_ZENOH_CHILD", role)
        .env("LLBUS_ZENOH_CONFIG", config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn a child");
        let stdout: ChildStdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProc {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line with `prefix`, at most `timeout`, and returns it from there.
    fn expect_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    // libtest's "test child_process ... " may stand before it.
                    if let Some(at) = line.find(prefix) {
                        return line[at..].to_owned();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "no '{prefix}' line in time; the child said: {:#?}",
                        self.seen
                    );
                }
            }
        }
    }

    /// Tells an importer how many samples the exporter put: it ends once all are accounted for.
    fn expect_put(&mut self, put: u64) {
        if let Some(stdin) = &mut self.stdin {
            // A child that has already ended does not need to be told.
            let _ = writeln!(stdin, "END put={put}");
        }
    }

    /// Its `BOOKS` line as numbers, and every line it printed; waits for it to exit.
    fn books(mut self) -> (HashMap<String, u64>, Vec<String>) {
        let line = self.expect_line("BOOKS", CHILD_DEADLINE);
        let books = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap_or(u64::MAX)))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        (books, std::mem::take(&mut self.seen))
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs an importer and then an exporter with `env`, and returns both ends' books.
fn run_pair(
    import_config: &str,
    export_config: &str,
    import_env: &[(&str, String)],
    export_env: &[(&str, String)],
) -> (HashMap<String, u64>, HashMap<String, u64>, Vec<String>) {
    let mut importer = ChildProc::spawn("import", import_config, import_env);
    importer.expect_line("READY", Duration::from_secs(20));
    let mut exporter = ChildProc::spawn("export", export_config, export_env);
    let ready = exporter.expect_line("READY", Duration::from_secs(30));
    assert_eq!(
        ready, "READY matched=true",
        "the exporter never saw the importer"
    );
    let (out, _) = exporter.books();
    importer.expect_put(out["put"]);
    let (inn, said) = importer.books();
    (out, inn, said)
}

/// Every message the exporting app published is delivered or counted somewhere.
fn assert_books_balance(out: &HashMap<String, u64>, inn: &HashMap<String, u64>) {
    let o = |k: &str| out[k];
    let i = |k: &str| inn[k];
    assert_eq!(
        o("sent"),
        o("put") + o("put_failed") + o("dropped") + o("lost"),
        "the exporting process's books: {out:?}"
    );
    assert_eq!(
        o("put"),
        i("received") + i("lost"),
        "every sample put is received or counted lost by sequence: {out:?} {inn:?}"
    );
    assert_eq!(
        i("received"),
        i("published") + i("refused") + i("malformed") + i("stopped"),
        "the importing gateway's books: {inn:?}"
    );
    assert_eq!(
        i("published"),
        i("delivered") + i("edge_dropped") + i("edge_lost"),
        "the importing process's books: {inn:?}"
    );
}

fn peer_configs() -> (String, String) {
    let port = free_port();
    (
        config("peer", &[endpoint(port)], &[]),
        config("peer", &[], &[endpoint(port)]),
    )
}

#[test]
fn peers_carry_every_message_and_the_books_balance() {
    let (import_config, export_config) = peer_configs();
    let env = [
        ("LLBUS_ZENOH_COUNT", "2000".to_owned()),
        ("LLBUS_ZENOH_INTERVAL_US", "100".to_owned()),
    ];
    let (out, inn, _) = run_pair(&import_config, &export_config, &[], &env);
    assert_books_balance(&out, &inn);
    assert_eq!(out["sent"], 2000);
    assert!(inn["delivered"] > 0, "{inn:?}");
    assert_eq!(inn["refused"] + inn["malformed"], 0, "{inn:?}");
}

#[test]
fn json_samples_are_imported_too() {
    let (import_config, export_config) = peer_configs();
    let env = [
        ("LLBUS_ZENOH_COUNT", "500".to_owned()),
        ("LLBUS_ZENOH_INTERVAL_US", "100".to_owned()),
        ("LLBUS_ZENOH_ENCODING", "json".to_owned()),
    ];
    let (out, inn, _) = run_pair(&import_config, &export_config, &[], &env);
    assert_books_balance(&out, &inn);
    assert_eq!(inn["malformed"], 0, "{inn:?}");
    assert!(inn["delivered"] > 0, "{inn:?}");
}

#[test]
fn a_router_between_two_clients() {
    let port = free_port();
    let router = zenoh::open(
        zenoh::Config::from_json5(&config("router", &[endpoint(port)], &[])).expect("config"),
    )
    .wait()
    .expect("the router session opens");
    let client = config("client", &[], &[endpoint(port)]);
    let env = [
        ("LLBUS_ZENOH_COUNT", "1000".to_owned()),
        ("LLBUS_ZENOH_INTERVAL_US", "100".to_owned()),
    ];
    let (out, inn, _) = run_pair(&client, &client, &[], &env);
    assert_books_balance(&out, &inn);
    assert!(inn["delivered"] > 0, "{inn:?}");
    router.close().wait().expect("the router closes");
}

#[test]
fn a_stop_in_the_middle_of_the_publishing_bus_loses_nothing_uncounted() {
    let (import_config, export_config) = peer_configs();
    // As fast as it can: the gateway's ring drops (counted) while zenoh catches up.
    let env = [
        ("LLBUS_ZENOH_COUNT", "40000".to_owned()),
        ("LLBUS_ZENOH_STOP_AFTER", "20000".to_owned()),
    ];
    let (out, inn, _) = run_pair(&import_config, &export_config, &[], &env);
    assert_books_balance(&out, &inn);
    assert_eq!(out["sent"] + out["refused_by_stop"], 40000, "{out:?}");
    assert!(out["refused_by_stop"] >= 20000, "{out:?}");
}

#[test]
fn a_stop_in_the_middle_of_the_subscribing_bus_loses_nothing_uncounted() {
    let (import_config, export_config) = peer_configs();
    let import_env = [("LLBUS_ZENOH_STOP_AFTER", "500".to_owned())];
    let env = [
        ("LLBUS_ZENOH_COUNT", "3000".to_owned()),
        ("LLBUS_ZENOH_INTERVAL_US", "100".to_owned()),
    ];
    let (out, inn, _) = run_pair(&import_config, &export_config, &import_env, &env);
    assert_books_balance(&out, &inn);
    assert!(
        inn["stopped"] > 0,
        "samples after the stop are counted: {inn:?}"
    );
}

#[test]
fn a_mismatched_fingerprint_is_refused_naming_both() {
    let (import_config, export_config) = peer_configs();
    let env = [
        ("LLBUS_ZENOH_COUNT", "200".to_owned()),
        ("LLBUS_ZENOH_INTERVAL_US", "200".to_owned()),
        ("LLBUS_ZENOH_V2", "1".to_owned()),
    ];
    let (out, inn, said) = run_pair(&import_config, &export_config, &[], &env);
    assert_books_balance(&out, &inn);
    assert_eq!(inn["delivered"], 0, "{inn:?}");
    assert_eq!(inn["refused"], inn["received"], "{inn:?}");
    let ours = format!("{:#018x}", Tick::FINGERPRINT);
    let theirs = format!("{:#018x}", TickV2::FINGERPRINT);
    let refusals: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("schema fingerprint mismatch"))
        .collect();
    assert_eq!(refusals.len(), 1, "reported once, then counted: {said:#?}");
    let e = refusals[0];
    assert!(
        e.contains("'test.tick'") && e.contains(&ours) && e.contains(&theirs),
        "{e}"
    );
}

#[test]
fn a_router_that_goes_away_and_comes_back_messages_flow_again_and_losses_are_counted() {
    let port = free_port();
    let router_config = config("router", &[endpoint(port)], &[]);
    let open_router = || {
        zenoh::open(zenoh::Config::from_json5(&router_config).expect("config"))
            .wait()
            .expect("the router session opens")
    };
    let router = open_router();
    // Clients retry their router every 100-500 ms instead of zenoh's 1-4 s (the export runs
    // 2.5 s past the router's return), and the importer waits up to 10 s without a message
    // through the outage: the router's return is seen in time even on a loaded machine.
    let client = config("client", &[], &[endpoint(port)]).replacen(
        "connect: {",
        "connect: { retry: { period_init_ms: 100, period_max_ms: 500, period_increase_factor: 2 },",
        1,
    );
    let mut importer = ChildProc::spawn(
        "import",
        &client,
        &[("LLBUS_ZENOH_IDLE_MS", "10000".to_owned())],
    );
    importer.expect_line("READY", Duration::from_secs(20));
    let mut exporter = ChildProc::spawn(
        "export",
        &client,
        &[
            ("LLBUS_ZENOH_COUNT", "5000".to_owned()),
            ("LLBUS_ZENOH_INTERVAL_US", "1000".to_owned()),
        ],
    );
    let ready = exporter.expect_line("READY", Duration::from_secs(30));
    assert_eq!(ready, "READY matched=true");
    // Let messages flow, take the router away for a while, and bring it back.
    std::thread::sleep(Duration::from_millis(1500));
    router.close().wait().expect("the router closes");
    std::thread::sleep(Duration::from_millis(1000));
    let router = open_router();
    let (out, _) = exporter.books();
    importer.expect_put(out["put"]);
    let (inn, _) = importer.books();
    router.close().wait().expect("the router closes");
    assert_books_balance(&out, &inn);
    assert!(inn["lost"] > 0, "the outage shows as a gap: {inn:?}");
    assert_eq!(
        inn["last"], 4999,
        "messages flow again after the outage, to the last: {inn:?} {out:?}"
    );
}

/// The entry of the child process of `a_killed_zenoh_peer_mid_stream_never_blocks_the_publisher`
/// (this test binary run again, chosen by `LLBUS_ZENOH_PEER_CHILD`): a zenoh peer that
/// subscribes to the export's key and waits to be killed. Does nothing in the test run itself.
#[test]
fn killed_peer_child_process() {
    let Ok(config) = std::env::var("LLBUS_ZENOH_PEER_CHILD") else {
        return;
    };
    let config = zenoh::Config::from_json5(&config).expect("a valid zenoh config");
    let session = zenoh::open(config)
        .wait()
        .expect("the child's session opens");
    let _subscriber = session
        .declare_subscriber("llbus/test.tick")
        .callback(|_| {})
        .wait()
        .expect("a subscriber");
    println!("READY");
    std::thread::sleep(LIMIT);
}

/// docs/ZENOH.md "Export": a publisher never waits for zenoh, and a stop loses nothing
/// uncounted. The export's only zenoh peer is a process killed mid-stream (no goodbye, its TCP
/// connection reset): the app's publishes never wait, the gateway closes in bounded time, and
/// sent = put + put failed + dropped + lost.
#[cfg(unix)]
#[test]
fn a_killed_zenoh_peer_mid_stream_never_blocks_the_publisher() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let config = |side: &str| {
        format!(
            r#"{{ mode: "peer", {side}: {{ endpoints: ["tcp/127.0.0.1:{port}"] }},
                 scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }} }}"#
        )
    };
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new().capacity(64));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway
        .start(
            &mut running,
            zenoh::Config::from_json5(&config("listen")).expect("a valid zenoh config"),
        )
        .expect("the gateway starts");
    let mut child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "killed_peer_child_process", "--nocapture"])
        .env("LLBUS_ZENOH_PEER_CHILD", config("connect"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("its stdout");
    let ready = within(LIMIT, move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("READY"))
    });
    if !matches!(ready, Ok(true)) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child peer never became ready");
    }
    assert!(
        gateway.wait_matched(LIMIT),
        "the child's subscriber never matched"
    );
    let mut app = running.publisher(app).expect("the handle");
    let mut sent = 0u64;
    let mut slowest = Duration::ZERO;
    let mut killed = false;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(1500) {
        if !killed && start.elapsed() > Duration::from_millis(500) {
            child.kill().expect("the child is killed");
            killed = true;
        }
        let t = Instant::now();
        if app.publish(Tick { n }).is_ok() {
            sent += 1;
        }
        slowest = slowest.max(t.elapsed());
        n += 1;
        if n % 64 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let _ = child.wait();
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let counts = within(LIMIT, move || gateway.close())
        .unwrap_or_else(|_| panic!("Gateway::close did not return after the peer was killed"));
    let edge = export_edge::<Tick>(&report, "app");
    assert_edge_balances(edge);
    assert_eq!(edge.published, sent, "{edge:?}");
    assert_eq!(
        sent,
        counts.put + counts.put_failed + edge.dropped + edge.lost,
        "{edge:?} {counts:?}"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a publish waited {slowest:?} while the peer died"
    );
    assert!(counts.put > 0, "nothing put before the kill: {counts:?}");
}
