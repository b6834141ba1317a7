//! Attacks made with forged source addresses (raw sockets, root) against the real
//! `publisher` and `subscriber` examples running as processes on loopback: each attack is shown
//! to fail, and the real stream is still complete (the subscriber's RESULT line).
//!
//! - unanswerable sources (port 0, unspecified, multicast, broadcast): a native Subscribe, and a
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
//! And attacks by an *allowed* host (another loopback address, which the default
//! allowlist admits) that subscribed itself and so knows the publisher's session id, a cookie
//! and a subscription token of its own:
//!
//! - forged Data and Heartbeat under the publisher's address to the subscriber, with the
//!   learned session and sequence numbers near 2^40, with its own token and with none: the
//!   subscriber gets every genuine message and `lost` stays exact;
//! - a NAK flood from every port it may hold (a fifth is refused, `HostFull`): the bytes it is
//!   sent stay within one host's retransmission budget, not four;
//! - squatting a topic from many ports of one host: a second host still subscribes.
//!
//! Without `CAP_NET_RAW` the tests print a loud SKIPPED line (and fail under `CI=true`); their
//! names end in `_requires_root`.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_net::{
    parse_datagram, BatchEncoder, Control, Cookie, DataMeta, Kind, Nak, Refusal, RefuseReason,
    DEFAULT_MAX_DATAGRAM, TOKEN_LEN,
};
use serde::{Deserialize, Serialize};
use tests::example_bins::{example, free_udp_port, Fields, Running};
use tests::spoof::{RawSender, Sniffer};

/// The examples' counter, declared alike so its topic id and fingerprint are the examples'.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "demo.counter")]
struct Counter {
    n: u64,
    sent_ns: i64,
    payload: Vec<u8>,
}

const IDLE: &str = "park";
const COUNT: u64 = 6_000;
const WANT: u64 = 5_900;
/// Fast enough that a case is short, slow enough that the stream outlasts each attack (at most
/// a second and a half after the subscriber's admission).
const RATE: &str = "3000";

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
        Pair::start_args(compat, extra, extra)
    }

    /// As `start`, with `pub_extra` arguments for the publisher and `sub_extra` for the
    /// subscriber.
    fn start_args(compat: bool, pub_extra: &[&str], sub_extra: &[&str]) -> Pair {
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
                // The subscriber stops short of the count: no grace after the last message.
                "--grace-ms",
                "0",
            ])
            .args(mode)
            .args(pub_extra);
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
            .args(sub_extra);
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
            // A native Subscribe (the publisher would challenge it), a 4-byte compat Subscribe, and
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
                payload: Vec::new(),
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
                token: round,
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
    // Data and heartbeats without the subscription's token: dropped before anything else,
    // counted (they cannot even trigger a resubscribe any more).
    assert!(r.u64("bad_token") >= rounds, "{r}");
    assert_eq!(r.u64("unknown_session"), 0, "{r}");
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

/// A subscriber the test runs itself, from an allowed host: what an attacker who may subscribe
/// knows after subscribing.
struct Member {
    sock: UdpSocket,
    /// Its own session id (what its NAKs must carry).
    session: u64,
    /// The publisher's session id, learned from the acknowledgement.
    publisher_session: u64,
    /// Its own subscription token and latest cookie.
    token: u64,
    cookie: Cookie,
    /// The highest data sequence number it has seen.
    newest: u64,
}

/// Subscribes to the examples' counter at `publisher` from `local` (a handshake over a plain
/// UDP socket). `Err` carries the refusal.
fn join(local: SocketAddr, publisher: SocketAddr, session: u64) -> Result<Member, Refusal> {
    let sock = UdpSocket::bind(local).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut cookie = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut nonce = session;
    loop {
        assert!(
            Instant::now() < deadline,
            "no answer to {local}'s Subscribe"
        );
        nonce += 1;
        let request = Control::Subscribe {
            topic_id: Counter::TOPIC_ID,
            fingerprint: Counter::FINGERPRINT,
            session,
            nonce,
            cookie,
        };
        sock.send_to(&control(&request), publisher).unwrap();
        let mut buf = [0u8; 2048];
        let answer_deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < answer_deadline {
            let Ok((n, _)) = sock.recv_from(&mut buf) else {
                break;
            };
            let Ok(frames) = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM) else {
                continue;
            };
            for frame in frames {
                match Control::from_frame(&frame) {
                    Ok(Control::CookieChallenge {
                        cookie: c,
                        nonce: n,
                        ..
                    }) if n == nonce => {
                        cookie = Some(c);
                    }
                    Ok(Control::SubscribeAck {
                        session: publisher_session,
                        token,
                        cookie: c,
                        nonce: n,
                        ..
                    }) if n == nonce => {
                        sock.set_nonblocking(true).unwrap();
                        return Ok(Member {
                            sock,
                            session,
                            publisher_session,
                            token,
                            cookie: c,
                            newest: 0,
                        });
                    }
                    Ok(Control::Refuse(r)) if r.nonce == nonce => return Err(r),
                    _ => {}
                }
            }
            if cookie.is_some() {
                break; // answer the challenge now
            }
        }
    }
}

impl Member {
    /// Drains its socket: `(bytes of retransmitted datagrams, data frames)`. A datagram is a
    /// retransmission if its data frames are at or below the newest one seen before it, or if
    /// it answers a NAK (`Unavailable`).
    fn drain(&mut self) -> (usize, usize) {
        let (mut retransmitted, mut frames) = (0, 0);
        let mut buf = [0u8; 2048];
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            let Ok(parsed) = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM) else {
                continue;
            };
            let mut old = false;
            for f in parsed {
                match f.header.kind {
                    Kind::Data => {
                        frames += 1;
                        old |= f.header.seq <= self.newest;
                        self.newest = self.newest.max(f.header.seq);
                    }
                    Kind::Unavailable => old = true,
                    _ => {}
                }
            }
            if old {
                retransmitted += n;
            }
        }
        (retransmitted, frames)
    }

    /// One datagram of 16 NAKs, each for the 64 oldest numbers it can expect history to hold.
    fn nak_flood(&self, publisher: SocketAddr, nonce: &mut u64) {
        let mut buf = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        let first = self.newest.saturating_sub(900).max(1);
        for i in 0..16 {
            *nonce += 1;
            let _ = enc.push_nak(&Nak {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session: self.session,
                cookie: self.cookie,
                nonce: *nonce,
                first: first + i * 8,
                last: first + i * 8 + 63,
            });
        }
        let _ = self.sock.send_to(enc.as_bytes(), publisher);
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
#[cfg_attr(miri, ignore)]
fn spoof_allowed_host_cannot_inject_or_silence_with_the_learned_session_requires_root() {
    let Some(mut raw) = RawSender::for_test("spoof_allowed_host_cannot_inject_or_silence") else {
        return;
    };
    let pair = Pair::start(false);
    let (from, to) = (loopback(pair.pub_port), loopback(pair.sub_port));
    // Another loopback host, allowed by default: it subscribes and learns the session.
    let member = join(addr("127.0.0.7:0"), SocketAddr::V4(from), 0xa77ac).unwrap();
    let session = member.publisher_session;
    println!("learned the publisher session {session:#x} and a token of our own");
    let huge = 1u64 << 40;
    // A datagram as the publisher sends the subscriber, with `token` after it (or none).
    let forge = |seq: u64, heartbeat: bool, token: Option<u64>| {
        let mut buf = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf[..1472 - TOKEN_LEN]).with_token(token.is_some());
        if heartbeat {
            enc.push_control(&Control::Heartbeat {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session,
                last_seq: seq,
                timestamp_ns: 0,
            })
            .unwrap();
        } else {
            let meta = DataMeta {
                topic_id: Counter::TOPIC_ID,
                fingerprint: Counter::FINGERPRINT,
                session,
                seq,
                timestamp_ns: 0,
            };
            enc.push_data(
                meta,
                &Counter {
                    n: 1_000_000_000 + seq % 1000,
                    sent_ns: 0,
                    payload: Vec::new(),
                },
            )
            .unwrap();
        }
        let mut v = enc.as_bytes().to_vec();
        v.extend(token.map(u64::to_le_bytes).into_iter().flatten());
        v
    };
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut round = 0u64;
    while Instant::now() < deadline {
        for token in [Some(member.token), None, Some(round ^ 0x5eed)] {
            for heartbeat in [false, true] {
                raw.send(from, to, &forge(huge + round, heartbeat, token))
                    .unwrap();
            }
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_p, r) = pair.finish();
    // Every forged frame was refused by the token (two of the three kinds carry a flag the
    // parser accepts; the third, no token, too): none reached the sequence window.
    assert!(r.u64("bad_token") >= 6 * round, "{r} after {round} rounds");
    assert_eq!(r.u64("unconfirmed"), 0, "{r}");
    assert_eq!(r.u64("stale"), 0, "{r}");
    // `lost` is exact: what the bridge counts is what the counter values show.
    assert_eq!(r.u64("lost"), r.u64("counter_lost"), "{r}");
}

/// The publisher example with a reliable counter and a small per-host retransmission budget.
const BUDGET: u64 = 1_000_000;

#[test]
#[cfg_attr(miri, ignore)]
fn allowed_host_nak_flood_from_every_port_stays_within_one_host_budget() {
    let extra = ["--reliable", "--retransmit-rate", &BUDGET.to_string()];
    let pair = Pair::start_args(false, &extra, &[]);
    let publisher = SocketAddr::V4(loopback(pair.pub_port));
    // One host (127.0.0.5) takes every slot of the topic it may hold; a fifth port is refused
    // and told why.
    let mut ports: Vec<Member> = (0..4)
        .map(|i| join(addr("127.0.0.5:0"), publisher, 0xf100d + i).unwrap())
        .collect();
    let refused = join(addr("127.0.0.5:0"), publisher, 0xf100d + 9)
        .err()
        .expect("a fifth port of the same host is refused");
    assert_eq!(refused.reason, RefuseReason::HostFull, "{refused}");
    println!("fifth port: {refused}");
    // Let data arrive so each port knows what history holds.
    std::thread::sleep(Duration::from_millis(300));
    for m in &mut ports {
        m.drain();
    }
    let started = Instant::now();
    let mut nonce = 0u64;
    let mut received = 0usize;
    let mut naks = 0u64;
    while started.elapsed() < Duration::from_millis(1500) {
        for m in &mut ports {
            m.nak_flood(publisher, &mut nonce);
            naks += 16;
            received += m.drain().0;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(200));
    for m in &mut ports {
        received += m.drain().0;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The stated bound: the burst plus the rate over the time, for the host as a whole (the
    // budget of one address per topic would have allowed four times this), and one datagram
    // of slack for the answer in flight when the bucket emptied.
    let bound = BUDGET / 16 + (BUDGET as f64 * elapsed) as u64 + 1472;
    println!(
        "{naks} NAK frames from 4 ports in {elapsed:.2} s drew {received} bytes of \
         retransmissions (bound for one host {bound})"
    );
    assert!(
        received > 0,
        "the flood was never answered: the test proves nothing"
    );
    assert!(received as u64 <= bound, "{received} > {bound}");
    let (p, _r) = pair.finish();
    assert!(p.u64("retransmitted") > 0, "{p}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn allowed_host_cannot_squat_a_topic_and_another_host_still_subscribes() {
    let pub_port = free_udp_port();
    let publisher = SocketAddr::V4(loopback(pub_port));
    let mut cmd = Command::new(example("publisher"));
    // Counting from the start (the squatters would be its first subscribers), long enough for
    // the second host to take its share.
    cmd.args(["--bind", &publisher.to_string(), "--idle", IDLE])
        .args(["--count", "6000", "--rate", RATE])
        .args([
            "--subscribers-per-topic",
            "4",
            "--subscribers-per-host",
            "2",
        ]);
    let mut publ = Running::spawn("publisher", cmd);
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "the publisher did not start"
    );
    // One host tries six ports: two are admitted, the others refused with the reason.
    let mut admitted = Vec::new();
    let mut refusals = Vec::new();
    for i in 0..6 {
        match join(addr("127.0.0.9:0"), publisher, 0x5900 + i) {
            Ok(m) => admitted.push(m),
            Err(r) => refusals.push(r),
        }
    }
    assert_eq!(admitted.len(), 2, "{refusals:?}");
    assert!(
        refusals.iter().all(|r| r.reason == RefuseReason::HostFull),
        "{refusals:?}"
    );
    assert!(
        refusals[0].to_string().contains("this host"),
        "{}",
        refusals[0]
    );
    // Another host still gets a slot: the subscriber example, end to end.
    let sub_port = free_udp_port();
    let mut cmd = Command::new(example("subscriber"));
    cmd.args(["--bind", &format!("127.0.0.1:{sub_port}")])
        .args(["--publisher", &publisher.to_string()])
        .args(["--idle", IDLE, "--count", "1000", "--timeout-s", "20"]);
    let sub = Running::spawn("subscriber", cmd);
    let (status, out, err) = sub.finish(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "subscriber failed ({status:?}):\n{out}\n{err}"
    );
    let r = Fields::find(&out, "RESULT ").unwrap_or_else(|| panic!("no RESULT:\n{out}"));
    assert!(r.u64("received") >= 1000, "{r}");
    drop(admitted);
    let (status, pout, perr) = publ.finish(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "publisher failed ({status:?}):\n{pout}\n{perr}"
    );
}
