//! Issue 10's attacks, made with forged source addresses (raw sockets, root) against the real
//! `publisher` and `subscriber` examples running as processes on loopback: each attack is shown
//! to fail, and the real stream is still complete (the subscriber's RESULT line).
//!
//! - unanswerable sources (port 0, unspecified, multicast, broadcast): a v1 Subscribe, and a
//!   4-byte compat Subscribe, once stopped the publisher's bridge (`EINVAL` on the reply);
//! - one datagram of many Subscribe frames under a victim's address: the victim gets at most one
//!   datagram, no larger than the request;
//! - under the publisher's address, to a subscribed importer: a forged Refuse (transient and
//!   final), CookieChallenge, SubscribeAck of another session, data and heartbeat of another
//!   session: none is taken; the import goes on;
//! - with a pre-shared key, datagrams captured on the wire (a packet socket) and replayed
//!   under their original addresses, both ways: dropped as `replayed`, and no replayed
//!   message reaches the subscriber.
//!
//! Without `CAP_NET_RAW` the tests print a loud SKIPPED line (and fail under `CI=true`); their
//! names end in `_requires_root`.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_net::{BatchEncoder, Control, Cookie, DataMeta, Refusal, RefuseReason};
use serde::{Deserialize, Serialize};
use tests::example_bins::{example, free_udp_port, Fields, Running};
use tests::spoof::{RawSender, Sniffer};

/// The examples' counter, declared alike so its topic id and fingerprint are the examples'.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "demo.counter")]
struct Counter {
    n: u64,
    sent_ns: i64,
}

const IDLE: &str = "park";
const COUNT: u64 = 6_000;
const WANT: u64 = 5_900;
const RATE: &str = "2000";

fn loopback(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port)
}

fn v4(s: &str) -> SocketAddrV4 {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The publisher and subscriber examples, streaming `COUNT` messages at `RATE`.
struct Pair {
    publ: Running,
    sub: Running,
    pub_port: u16,
    sub_port: u16,
}

impl Pair {
    fn start(compat: bool) -> Pair {
        Pair::start_with(compat, &[])
    }

    /// As `start`, with `extra` arguments for both examples.
    fn start_with(compat: bool, extra: &[&str]) -> Pair {
        let (pub_port, sub_port) = (free_udp_port(), free_udp_port());
        let mode: &[&str] = if compat { &["--compat", "ll-udp"] } else { &[] };
        let mut cmd = Command::new(example("publisher"));
        cmd.args(["--bind", &format!("127.0.0.1:{pub_port}"), "--idle", IDLE])
            .args([
                "--count",
                &COUNT.to_string(),
                "--rate",
                RATE,
                "--wait-subscriber",
            ])
            .args(mode)
            .args(extra);
        let mut publ = Running::spawn("publisher", cmd);
        let mut cmd = Command::new(example("subscriber"));
        cmd.args(["--bind", &format!("127.0.0.1:{sub_port}")])
            .args(["--publisher", &format!("127.0.0.1:{pub_port}")])
            .args([
                "--idle",
                IDLE,
                "--count",
                &WANT.to_string(),
                "--timeout-s",
                "40",
            ])
            .args(mode)
            .args(extra);
        let sub = Running::spawn("subscriber", cmd);
        assert!(
            publ.wait_line(Duration::from_secs(30), |l| l
                .contains("admitted; counting"))
                .is_some(),
            "the subscriber was never admitted"
        );
        Pair {
            publ,
            sub,
            pub_port,
            sub_port,
        }
    }

    /// Waits for both to finish; asserts they exited 0 and the real stream is complete.
    fn finish(self) -> (Fields, Fields) {
        let (status, out, err) = self.sub.finish(Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.success()),
            "subscriber failed ({status:?}):\n{out}\n{err}"
        );
        let r = Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT:\n{out}\n{err}"));
        let (status, pout, perr) = self.publ.finish(Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "publisher failed ({status:?}):\n{pout}\n{perr}"
        );
        let p = Fields::find(&pout, "PUBLISHED ")
            .unwrap_or_else(|| panic!("no PUBLISHED:\n{pout}\n{perr}"));
        println!("publisher: {p}\nsubscriber: {r}");
        assert_eq!(p.u64("published"), COUNT, "{p}");
        assert_eq!(p.u64("socket_failed"), 0, "{p}");
        assert!(r.u64("received") >= WANT, "{r}");
        assert!(
            r.u64("highest") < COUNT,
            "a forged counter value was delivered: {r}"
        );
        assert!(r.u64("lost") * 100 <= COUNT, "more than 1% lost: {r}");
        assert_eq!(r.u64("duplicates"), 0, "{r}");
        assert_eq!(r.u64("publisher_restarts"), 0, "{r}");
        (p, r)
    }
}

/// Whether a datagram forged from `src` reaches a plain UDP socket at all (the kernel may drop
/// some martian sources, or rewrite 0.0.0.0 to the interface's address).
fn arrives(raw: &mut RawSender, src: SocketAddrV4) -> Option<SocketAddr> {
    let probe = UdpSocket::bind("127.0.0.1:0").ok()?;
    probe
        .set_read_timeout(Some(Duration::from_millis(300)))
        .ok()?;
    let SocketAddr::V4(dst) = probe.local_addr().ok()? else {
        return None;
    };
    raw.send(src, dst, b"probe").ok()?;
    let mut buf = [0u8; 16];
    probe.recv_from(&mut buf).ok().map(|(_, from)| from)
}

fn control(c: &Control) -> Vec<u8> {
    let mut buf = [0u8; 1472];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_control(c).unwrap();
    enc.as_bytes().to_vec()
}

fn subscribe(nonce: u64) -> Control {
    Control::Subscribe {
        topic_id: Counter::TOPIC_ID,
        fingerprint: Counter::FINGERPRINT,
        session: 0x5900f,
        nonce,
        cookie: None,
    }
}

/// Sources no host can be answered at, and which of them the kernel delivers.
fn unanswerable(raw: &mut RawSender) -> Vec<SocketAddrV4> {
    let candidates = [
        v4("127.0.0.1:0"),
        v4("0.0.0.0:0"),
        v4("0.0.0.0:7000"),
        v4("224.0.0.1:7000"),
        v4("255.255.255.255:7000"),
    ];
    let mut delivered = Vec::new();
    for src in candidates {
        match arrives(raw, src) {
            Some(from) => {
                println!("forged source {src} arrives as {from}");
                delivered.push(src);
            }
            None => println!("forged source {src} is dropped by the kernel on loopback"),
        }
    }
    assert!(
        delivered.contains(&v4("127.0.0.1:0")),
        "a port-0 source must arrive for this test to prove anything: {delivered:?}"
    );
    delivered
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_unanswerable_sources_do_not_stop_the_bridge_requires_root() {
    let Some(mut raw) = RawSender::for_test("spoof_unanswerable_sources_do_not_stop_the_bridge")
    else {
        return;
    };
    let sources = unanswerable(&mut raw);
    let pair = Pair::start(false);
    let (publisher, subscriber) = (loopback(pair.pub_port), loopback(pair.sub_port));
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut sent = 0u64;
    while Instant::now() < deadline {
        for &src in &sources {
            // A v1 Subscribe (the publisher would challenge it), a 4-byte compat Subscribe, and
            // the same at the subscriber's socket.
            for payload in [control(&subscribe(sent)), vec![0, 0, 0, 0]] {
                for dst in [publisher, subscriber] {
                    raw.send(src, dst, &payload).unwrap();
                    sent += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (p, r) = pair.finish();
    assert!(
        p.u64("bad_source") > 0,
        "the publisher counted no bad source: {p}"
    );
    assert!(
        r.u64("bad_source") > 0,
        "the subscriber counted no bad source: {r}"
    );
    assert!(p.u64("bad_source") + r.u64("bad_source") <= sent, "{p} {r}");
    assert_eq!(r.u64("errors"), 0, "{r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_unanswerable_compat_subscribe_does_not_stop_the_publisher_requires_root() {
    let Some(mut raw) =
        RawSender::for_test("spoof_unanswerable_compat_subscribe_does_not_stop_the_publisher")
    else {
        return;
    };
    let sources = unanswerable(&mut raw);
    let pair = Pair::start(true);
    let publisher = loopback(pair.pub_port);
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        for &src in &sources {
            raw.send(src, publisher, &[0, 0, 0, 0]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (p, _r) = pair.finish();
    assert!(p.u64("bad_source") > 0, "{p}");
    assert_eq!(
        p.u64("send_bad_destination"),
        0,
        "nothing was sent to a forged source: {p}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_no_amplification_toward_a_victim_requires_root() {
    let Some(mut raw) = RawSender::for_test("spoof_no_amplification_toward_a_victim") else {
        return;
    };
    let pair = Pair::start(false);
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let Ok(SocketAddr::V4(victim_addr)) = victim.local_addr() else {
        panic!("no IPv4 victim address");
    };
    // 20 Subscribe frames in one datagram (1440 bytes), under the victim's address.
    let mut request = Vec::new();
    for i in 0..20 {
        request.extend_from_slice(&control(&subscribe(1000 + i)));
    }
    assert!(request.len() <= 1472);
    raw.send(victim_addr, loopback(pair.pub_port), &request)
        .unwrap();
    let until = Instant::now() + Duration::from_millis(800);
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while Instant::now() < until {
        if let Ok(n) = victim.recv(&mut buf) {
            got.push(n);
        }
    }
    assert!(
        got.len() <= 1,
        "the victim got {} datagrams for one: {got:?}",
        got.len()
    );
    let bytes: usize = got.iter().sum();
    assert!(
        bytes <= request.len(),
        "the victim got {bytes} bytes for a {}-byte request",
        request.len()
    );
    assert_eq!(
        got.len(),
        1,
        "the challenges were not packed into one datagram"
    );
    pair.finish();
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_forged_publisher_frames_do_not_hijack_or_end_the_import_requires_root() {
    let Some(mut raw) = RawSender::for_test("spoof_forged_publisher_frames_do_not_hijack") else {
        return;
    };
    let pair = Pair::start(false);
    let (from, to) = (loopback(pair.pub_port), loopback(pair.sub_port));
    let forged_session = 0xf0f0_f0f0_dead_beef;
    let refuse = |reason, nonce| {
        Control::Refuse(Refusal {
            topic_id: Counter::TOPIC_ID,
            requested: Counter::FINGERPRINT,
            offered: Counter::FINGERPRINT ^ 1,
            session: forged_session,
            reason,
            nonce,
        })
    };
    let data = |seq: u64| {
        let mut buf = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        let meta = DataMeta {
            topic_id: Counter::TOPIC_ID,
            fingerprint: Counter::FINGERPRINT,
            session: forged_session,
            seq,
            timestamp_ns: 0,
        };
        enc.push_data(
            meta,
            &Counter {
                n: 1_000_000_000 + seq,
                sent_ns: 0,
            },
        )
        .unwrap();
        enc.as_bytes().to_vec()
    };
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut round = 0u64;
    while Instant::now() < deadline {
        let forged = [
            control(&refuse(RefuseReason::TableFull, round)),
            control(&refuse(RefuseReason::FingerprintMismatch, round + 1)),
            control(&Control::CookieChallenge {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session: forged_session,
                nonce: round + 2,
                cookie: Cookie([0xee; 16]),
            }),
            control(&Control::SubscribeAck {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session: forged_session,
                last_seq: 1 << 40,
                nonce: round + 3,
                cookie: Cookie([0xee; 16]),
            }),
            control(&Control::Heartbeat {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session: forged_session,
                last_seq: 1 << 40,
                timestamp_ns: 0,
            }),
            data(round + 1),
        ];
        for payload in &forged {
            raw.send(from, to, payload).unwrap();
        }
        round += 10;
        std::thread::sleep(Duration::from_millis(20));
    }
    let rounds = round / 10;
    let (_p, r) = pair.finish();
    // Four answers with nonces the subscriber never sent, per round: all refused by nonce.
    assert!(r.u64("bad_nonce") >= rounds, "{r} after {rounds} rounds");
    // Data and heartbeats of a session no acknowledgement established: dropped, counted.
    assert!(r.u64("unknown_session") >= rounds, "{r}");
    // The refusals did not end the import (it would exit 3 with an error), and nothing switched.
    assert_eq!(r.u64("errors"), 0, "{r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_captured_sealed_datagrams_replayed_are_dropped_requires_root() {
    let Some(mut raw) = RawSender::for_test("spoof_captured_sealed_datagrams_replayed_are_dropped")
    else {
        return;
    };
    let sniffer = Sniffer::open().expect("a packet socket (the raw socket opened, so root)");
    let key = "a5".repeat(32);
    let pair = Pair::start_with(false, &["--psk", &key]);
    let (p_port, s_port) = (pair.pub_port, pair.sub_port);
    // Capture both directions for a renewal period and more.
    let captured = sniffer.capture(Duration::from_millis(1200), |src, dst| {
        (src.port(), dst.port()) == (p_port, s_port) || (src.port(), dst.port()) == (s_port, p_port)
    });
    let up = captured.iter().filter(|c| c.src.port() == s_port).count();
    let down = captured.len() - up;
    assert!(up >= 1 && down >= 100, "captured {up} up, {down} down");
    for c in &captured {
        raw.send(c.src, c.dst, &c.payload).unwrap();
    }
    let (p, r) = pair.finish();
    assert!(p.u64("replayed") >= up as u64, "{p}");
    // Loopback may show a datagram twice to the sniffer, so at least the distinct ones.
    assert!(r.u64("replayed") >= down as u64 / 2, "{r}");
    assert_eq!(r.u64("bad_mac"), 0, "{r}");
    assert_eq!(r.u64("errors"), 0, "{r}");
}
