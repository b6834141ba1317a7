//! The `publisher` and `subscriber` examples as two processes on loopback: every message the
//! publisher sends is received or counted lost, in llbus's own format and in the ll-udp-pubsub
//! v0.1 format; a publisher that restarts is noticed through its session id without a false gap
//! storm; a subscriber that disappears without a word is expired.
//!
//! The examples are built first (`cargo build --release -p examples --examples`, once per run;
//! see `tests::example_bins`). Every child is killed if the test fails, and every wait is
//! bounded.

use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, free_udp_port, Fields, Running};

/// Bus threads of the children sleep when idle: the tests share two cores with each other.
const IDLE: &str = "park";

fn publisher(port: u16, extra: &[&str]) -> Running {
    let mut cmd = Command::new(example("publisher"));
    cmd.args(["--bind", &format!("127.0.0.1:{port}"), "--idle", IDLE])
        .args(extra);
    Running::spawn("publisher", cmd)
}

fn subscriber(port: u16, publisher_port: u16, extra: &[&str]) -> Running {
    let mut cmd = Command::new(example("subscriber"));
    cmd.args([
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--publisher",
        &format!("127.0.0.1:{publisher_port}"),
        "--idle",
        IDLE,
    ])
    .args(extra);
    Running::spawn("subscriber", cmd)
}

/// Waits for the subscriber to exit 0 and returns its RESULT fields.
fn subscriber_result(sub: Running, timeout: Duration) -> Fields {
    let (status, out, err) = sub.finish(timeout);
    assert!(
        status.is_some_and(|s| s.success()),
        "subscriber failed ({status:?}):\n{out}\n{err}"
    );
    Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT line:\n{out}\n{err}"))
}

/// Waits for the publisher to exit 0 and returns its PUBLISHED fields.
fn publisher_result(publ: Running, timeout: Duration) -> Fields {
    let (status, out, err) = publ.finish(timeout);
    assert!(
        status.is_some_and(|s| s.success()),
        "publisher failed ({status:?}):\n{out}\n{err}"
    );
    Fields::find(&out, "PUBLISHED ").unwrap_or_else(|| panic!("no PUBLISHED line:\n{out}\n{err}"))
}

/// One publisher, one subscriber, `count` messages at `rate`; checks the accounting.
fn one_stream(compat: bool) {
    const COUNT: u64 = 5_000;
    // The subscriber stops a little short of the total, so a lost datagram or two on a busy
    // machine does not leave it waiting for messages that will never come.
    const WANT: u64 = 4_900;
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let mode: &[&str] = if compat { &["--compat", "ll-udp"] } else { &[] };
    let count = COUNT.to_string();
    let want = WANT.to_string();
    // The subscriber stops short of the count: no grace period after the last message.
    let mut pub_args = vec![
        "--count",
        &count,
        "--rate",
        "5000",
        "--wait-subscriber",
        "--grace-ms",
        "0",
    ];
    pub_args.extend_from_slice(mode);
    let publ = publisher(pub_port, &pub_args);
    let mut sub_args = vec!["--count", &want, "--timeout-s", "30"];
    sub_args.extend_from_slice(mode);
    let sub = subscriber(sub_port, pub_port, &sub_args);

    let r = subscriber_result(sub, Duration::from_secs(40));
    let p = publisher_result(publ, Duration::from_secs(30));
    println!("publisher: {p}\nsubscriber: {r}");

    let (received, lost) = (r.u64("received"), r.u64("lost"));
    let (first, highest) = (r.u64("first"), r.u64("highest"));
    assert_eq!(p.u64("published"), COUNT, "{p}");
    assert!(received >= WANT, "{r}");
    // The publisher starts at the subscription, so the subscriber sees the stream from 0 (or
    // from just after it, if the very first datagram was lost).
    assert!(
        first <= 5,
        "the stream did not start at the subscription: {r}"
    );
    assert!(highest < COUNT, "{r}");
    // Every number in the subscriber's window arrived or is counted lost (a heartbeat may have
    // announced a few more, lost at the tail).
    let span = highest - first + 1;
    let accounted = received + r.u64("ring_dropped") + lost;
    if compat {
        assert_eq!(
            accounted, span,
            "received + lost != span of counter values: {r}"
        );
    } else {
        assert!(
            (span..=span + 50).contains(&accounted),
            "received + lost = {accounted}, span of counter values = {span}: {r}"
        );
    }
    assert!(lost * 100 <= COUNT, "more than 1% lost over loopback: {r}");
    assert_eq!(r.u64("duplicates"), 0, "{r}");
    assert_eq!(r.u64("invalid"), 0, "{r}");
    assert_eq!(r.u64("publisher_restarts"), 0, "{r}");
    if compat {
        assert_eq!(
            r.get("p50_us"),
            Some("na"),
            "compat carries no latency: {r}"
        );
    } else {
        let (p50, p99) = (r.u64("p50_us"), r.u64("p99_us"));
        assert!(p50 <= p99, "{r}");
        println!("one-way latency over loopback: p50 {p50} us, p99 {p99} us");
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn publisher_to_subscriber_in_two_processes() {
    one_stream(false);
}

#[test]
#[cfg_attr(miri, ignore)]
fn publisher_to_subscriber_in_the_ll_udp_pubsub_format() {
    one_stream(true);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_restarted_publisher_is_noticed_without_a_gap_storm() {
    const WANT: u64 = 6_000;
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let args = ["--rate", "4000", "--wait-subscriber"];
    let first = publisher(pub_port, &args);
    let want = WANT.to_string();
    let mut sub = subscriber(sub_port, pub_port, &["--count", &want, "--timeout-s", "40"]);
    // Kill the first publisher (SIGKILL: no goodbye) once the subscriber has a third of it.
    let progress = sub.wait_line(Duration::from_secs(30), |l| {
        l.strip_prefix("received ")
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= WANT / 3)
    });
    assert!(
        progress.is_some(),
        "the subscriber never got {} messages from the first publisher",
        WANT / 3
    );
    first.kill();
    // A new process on the same port: a new session id, counting from 0 again. It starts at the
    // subscriber's next renewal (within a second).
    let second = publisher(pub_port, &args);

    let r = subscriber_result(sub, Duration::from_secs(50));
    second.kill();
    println!("subscriber: {r}");
    assert!(r.u64("received") >= WANT, "{r}");
    assert!(
        r.u64("publisher_restarts") >= 1,
        "the restart was not noticed: {r}"
    );
    // A new session starts over: no gap between the old counter and the new one.
    assert!(
        r.u64("lost") * 20 < WANT,
        "gap storm: {} lost of {WANT} after a restart: {r}",
        r.u64("lost")
    );
    assert!(
        r.u64("first") <= 5,
        "the second run's stream did not start at its subscription: {r}"
    );
    assert_eq!(r.u64("duplicates"), 0, "{r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_subscriber_that_disappears_is_expired() {
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let mut publ = publisher(pub_port, &["--rate", "1000", "--subscriber-timeout-s", "2"]);
    let mut sub = subscriber(
        sub_port,
        pub_port,
        &["--count", "1000000", "--timeout-s", "60"],
    );
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l.contains("subscribers 1"))
            .is_some(),
        "the subscription never reached the publisher"
    );
    assert!(
        sub.wait_line(Duration::from_secs(20), |l| l.starts_with("received "))
            .is_some(),
        "the subscriber printed no progress"
    );
    // SIGKILL: no Unsubscribe. The publisher must forget it after its 2 s timeout.
    sub.kill();
    let expired = publ.wait_line(Duration::from_secs(10), |l| l.contains("subscribers 0"));
    assert!(
        expired.is_some(),
        "the vanished subscriber was not expired within 10 s"
    );
    // With nobody subscribed the publisher sends nothing: its "sent" figure stands still.
    let sent = |l: &str| -> Option<u64> {
        l.split(", ")
            .find_map(|f| f.strip_prefix("sent "))
            .and_then(|n| n.parse().ok())
    };
    let before = expired.as_deref().and_then(sent);
    let after = publ
        .wait_line(Duration::from_secs(5), |l| l.contains("subscribers 0"))
        .as_deref()
        .and_then(sent);
    assert!(
        before.is_some() && before == after,
        "the publisher kept sending after the expiry: sent {before:?} then {after:?}"
    );
    publ.kill();
}

/// The same topic name as the examples' counter, with another shape: its fingerprint differs.
#[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
#[message(topic = "demo.counter")]
struct NotTheCounter {
    n: f64,
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_refused_subscription_fails_the_subscriber_with_the_reason() {
    use llbus::{Actor, Bus, Context, Out, Setup};

    /// Publishes nothing; only declares the topic so the bridge can export it.
    struct Silent {
        _out: Out<NotTheCounter>,
    }
    impl Actor for Silent {
        type In = ();
        fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    }

    let bridge = llbus_net::Bridge::bind("127.0.0.1:0")
        .expect("bind loopback")
        .name("wrong-shape")
        .export::<NotTheCounter>();
    let pub_port = bridge.local_addr().port();
    let mut bus = Bus::builder();
    bus.actor("silent", |s: &mut Setup<'_>| Silent { _out: s.output() })
        .publishes::<NotTheCounter>();
    bus.add(bridge).idle(llbus::Idle::Park);
    let running = bus.start().expect("the bus starts");

    let sub = subscriber(
        free_udp_port(),
        pub_port,
        &["--count", "10", "--timeout-s", "20"],
    );
    let (status, out, err) = sub.finish(Duration::from_secs(30));
    running.stop();
    running.join().expect("the bus stops");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(3),
        "the subscriber should exit 3 on a refusal:\n{out}\n{err}"
    );
    assert!(
        err.contains("refused") && err.contains("demo.counter"),
        "the reason should name the refusal and the topic:\n{err}"
    );
    println!("{err}");
}

/// A UDP relay on loopback that drops `permille` of the datagrams in each direction (chosen
/// by a fixed-seed generator), control and data alike. Returns its subscriber-side port and a
/// stop flag; the thread ends when the flag is set.
fn lossy_relay(
    subscriber: u16,
    publisher: u16,
    permille: u64,
) -> (
    u16,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u64>,
) {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sub_side = UdpSocket::bind("127.0.0.1:0").unwrap();
    let pub_side = UdpSocket::bind("127.0.0.1:0").unwrap();
    sub_side.set_nonblocking(true).unwrap();
    pub_side.set_nonblocking(true).unwrap();
    let port = sub_side.local_addr().unwrap().port();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let st = std::sync::Arc::clone(&stop);
    let sub_addr = std::net::SocketAddr::from(([127, 0, 0, 1], subscriber));
    let pub_addr = std::net::SocketAddr::from(([127, 0, 0, 1], publisher));
    let thread = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
        let mut dropped = 0u64;
        let lose = |rng: &mut u64| {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            *rng % 1000 < permille
        };
        while !st.load(Ordering::Acquire) {
            let mut idle = true;
            while let Ok((n, from)) = sub_side.recv_from(&mut buf) {
                idle = false;
                if from != sub_addr {
                    continue;
                }
                if lose(&mut rng) {
                    dropped += 1;
                } else {
                    let _ = pub_side.send_to(&buf[..n], pub_addr);
                }
            }
            while let Ok((n, from)) = pub_side.recv_from(&mut buf) {
                idle = false;
                if from != pub_addr {
                    continue;
                }
                if lose(&mut rng) {
                    dropped += 1;
                } else {
                    let _ = sub_side.send_to(&buf[..n], sub_addr);
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        dropped
    });
    (port, stop, thread)
}

/// `publisher --reliable` and `subscriber --reliable` through a relay that drops 5% of all
/// datagrams both ways: the subscriber gets every message from the one it joined at, in
/// order, none unrecovered (it exits non-zero otherwise), and NAKs were needed.
#[test]
#[cfg_attr(miri, ignore)]
fn reliable_examples_deliver_everything_in_order_through_5_percent_loss() {
    reliable_through_loss(&[]);
}

/// The same with the pre-shared-key MAC: NAKs go sealed under the subscriber's key,
/// retransmissions sealed afresh under the publisher's (a replayed packet number would be
/// dropped as `replayed`, and nothing would be recovered).
#[test]
#[cfg_attr(miri, ignore)]
fn reliable_examples_with_the_psk_mac_through_5_percent_loss() {
    let key = "5a".repeat(32);
    let r = reliable_through_loss(&["--psk", &key]);
    assert_eq!(r.u64("bad_mac"), 0, "{r}");
    assert_eq!(r.u64("replayed"), 0, "{r}");
}

/// `publisher --reliable` and `subscriber --reliable` (plus `extra` for both) through a relay
/// dropping 5% of datagrams both ways; returns the subscriber's RESULT fields.
fn reliable_through_loss(extra: &[&str]) -> Fields {
    // About one message a datagram at this rate: thousands of datagrams through the relay, so
    // that its drops (the premise checked below) are many. The publisher sends past what the
    // subscriber waits for by more than a stalled subscriber lags on a busy machine, so the
    // subscriber finishes while the stream, and the publisher's answers to its NAKs, still
    // flow.
    const COUNT: u64 = 2_600;
    const WANT: u64 = 2_000;
    let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
    let (relay_port, stop, relay) = lossy_relay(sub_port, pub_port, 50);
    let count = COUNT.to_string();
    let mut pub_args = vec![
        "--count",
        &count,
        "--rate",
        "500",
        "--wait-subscriber",
        "--reliable",
        // The subscriber may still need retransmissions after the count: the publisher serves
        // until it leaves (a clean stop unsubscribes), at most a minute; if the relay loses the
        // unsubscribe, until the subscription expires, 5 s after the last renewal.
        "--grace-ms",
        "60000",
        "--subscriber-timeout-s",
        "5",
    ];
    pub_args.extend_from_slice(extra);
    let publ = publisher(pub_port, &pub_args);
    let want = WANT.to_string();
    let mut sub_args = vec!["--count", &want, "--timeout-s", "30", "--reliable"];
    sub_args.extend_from_slice(extra);
    let sub = subscriber(sub_port, relay_port, &sub_args);
    let r = subscriber_result(sub, Duration::from_secs(40));
    let p = publisher_result(publ, Duration::from_secs(30));
    stop.store(true, std::sync::atomic::Ordering::Release);
    let dropped = relay.join().unwrap();
    println!("publisher: {p}\nsubscriber: {r}\nrelay dropped {dropped}");
    // The sink may take one or two more while the bus stops.
    let received = r.u64("received");
    assert!((WANT..=WANT + 5).contains(&received), "{r}");
    assert_eq!(r.u64("unrecovered"), 0, "{r}");
    assert_eq!(r.u64("out_of_order"), 0, "{r}");
    assert_eq!(r.u64("lost"), 0, "{r}");
    // No gap in the counter values: every one from the first to the last arrived.
    assert_eq!(r.u64("highest") - r.u64("first") + 1, received, "{r}");
    assert!(r.u64("nak_sent") > 0, "5% loss and no NAK: {r}");
    assert!(dropped > 50, "the relay dropped only {dropped}");
    r
}

/// `--topic NAME` renames the counter everywhere (the bus's remap): a publisher and a
/// subscriber given the same name meet under it and its id; a subscriber of the default name
/// is refused by that publisher, saying so.
#[test]
#[cfg_attr(miri, ignore)]
fn the_examples_topic_flag_renames_the_counter_and_another_name_is_refused() {
    let pub_port = free_udp_port();
    let publ = publisher(
        pub_port,
        &[
            "--topic",
            "site2.counter",
            "--count",
            "300",
            "--rate",
            "1000",
        ]
        .into_iter()
        .chain(["--wait-subscriber", "--grace-ms", "3000"])
        .collect::<Vec<_>>(),
    );
    // A subscriber of the default name first: refused, with the reason.
    let wrong = subscriber(
        free_udp_port(),
        pub_port,
        &["--count", "10", "--timeout-s", "20"],
    );
    let (status, out, err) = wrong.finish(Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(3), "{out}\n{err}");
    assert!(
        err.contains("'demo.counter'") && err.contains("does not export that topic"),
        "{err}"
    );
    let sub = subscriber(
        free_udp_port(),
        pub_port,
        &[
            "--topic",
            "site2.counter",
            "--count",
            "300",
            "--timeout-s",
            "20",
        ],
    );
    let r = subscriber_result(sub, Duration::from_secs(40));
    assert_eq!(r.u64("received"), 300, "{r}");
    let (status, out, err) = publ.finish(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{out}\n{err}");
    assert!(out.contains("publisher: topic 'site2.counter'"), "{out}");
}
