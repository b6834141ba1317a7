//! Services across hosts against hostile frames, over loopback with raw sockets:
//! - a host that did the handshake (so it is proven, with its own token) sends the server's
//!   bridge malformed `Request` frames (truncated, another fingerprint, a body that does not
//!   decode, call ids 0 and `u64::MAX`, the largest deadline budget): each is counted and
//!   dropped or answered with an error, never a panic, and a genuine caller is still served;
//! - a raw socket plays a hostile server to a caller's bridge (it acknowledges the handshake
//!   itself) and answers with malformed, misaddressed, duplicate and unknown-status `Reply`
//!   frames: every call still ends exactly once, the bad frames are counted by reason, the
//!   stray replies are counted `late`, and the caller's counts balance.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fixtures::loopback;
use llbus::{Actor, Bus, CallError, Context, Message, Replies, Reply, Request, Service, Setup};
use llbus_net::{
    encode_reply, encode_request, parse_datagram, BatchEncoder, Bridge, CallMeta, CallStatus,
    Control, Cookie, Flags, Header, Kind, ReplyFrame, RequestFrame, DEFAULT_MAX_DATAGRAM,
    HEADER_LEN,
};
use serde::{Deserialize, Serialize};
use tests::{bounded, metric};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "frames.ask")]
pub struct Ask {
    n: u64,
    delta: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "frames.sum")]
pub struct Sum(u64);

fn service() -> Service<Ask, Sum> {
    Service::named("frames.add").expect("name")
}

struct Adder {
    replies: Replies<Sum>,
}

impl Actor for Adder {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Sum(ask.n.wrapping_add(ask.delta))));
    }
}

/// A frame of `kind` with `payload`, built by hand (so its length may lie about nothing but
/// be anything), followed by `token`.
fn raw_frame(kind: Kind, meta: CallMeta, payload: &[u8], token: u64) -> Vec<u8> {
    let header = Header {
        kind,
        flags: Flags(Flags::TOKEN),
        payload_len: u16::try_from(payload.len()).expect("small"),
        topic_id: meta.topic_id,
        fingerprint: meta.fingerprint,
        session: meta.session,
        seq: 0,
        timestamp_ns: 0,
    };
    let mut head = [0u8; HEADER_LEN];
    header.write(&mut head);
    let mut d = head.to_vec();
    d.extend_from_slice(payload);
    d.extend_from_slice(&token.to_le_bytes());
    d
}

/// A well-formed Request of call `call` with `budget_ms`, ending with `token`.
fn request(meta: CallMeta, call: u64, budget_ms: u32, ask: &Ask, token: u64) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let n = encode_request(&mut buf, meta, true, call, budget_ms, ask).expect("fits");
    let mut d = buf[..n].to_vec();
    d.extend_from_slice(&token.to_le_bytes());
    d
}

/// The first frame of the next datagram `raw` receives within its read timeout, as a Reply:
/// `(call, status, body)`; `None` if nothing came.
fn next_reply(raw: &UdpSocket) -> Option<(u64, CallStatus, Vec<u8>)> {
    let mut buf = [0u8; 2048];
    loop {
        let n = raw.recv(&mut buf).ok()?;
        let Ok(mut frames) = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM) else {
            continue;
        };
        let Some(frame) = frames.next() else { continue };
        if frame.header.kind != Kind::Reply {
            continue;
        }
        let r = ReplyFrame::from_frame(&frame).expect("the server's reply decodes");
        return Some((r.call, r.status, r.body.to_vec()));
    }
}

/// Subscribes `raw` (connected to a server's bridge) to the service by the handshake, as any
/// caller does, under session 7: returns its token.
fn handshake(raw: &UdpSocket, topic_id: u64) -> u64 {
    let fingerprint = <Request<Ask> as Message>::FINGERPRINT;
    crate::fixtures::raw_subscribe(raw, topic_id, fingerprint, 7).0
}

/// How it would fail: a malformed request that panics the bridge or its proxy (the server
/// stops answering, `join` fails), one answered as if it were sound, a drop not counted by its
/// reason, or a genuine caller no longer served afterwards.
#[test]
fn malformed_requests_from_a_proven_host_are_counted_and_dropped_and_the_bridge_keeps_serving() {
    bounded("malformed requests", 60, || {
        let mut bus = Bus::builder();
        bus.actor("adder", |setup: &mut Setup<'_>| Adder {
            replies: setup.replies(&service()),
        })
        .serves(&service());
        let bridge = Bridge::bind(loopback())
            .expect("bind")
            .name("frames-server")
            .export_service(&service());
        let addr = bridge.local_addr();
        bus.add(bridge);
        let server = bus.start().expect("server starts");

        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let topic_id = service().name().id();
        let token = handshake(&raw, topic_id);
        let meta = CallMeta {
            topic_id,
            fingerprint: <Request<Ask> as Message>::FINGERPRINT,
            session: 7,
        };
        let ask = Ask { n: 40, delta: 2 };

        // A sound call first: the raw host is a caller like any other.
        raw.send(&request(meta, 1, 1000, &ask, token))
            .expect("send");
        let (call, status, _) = next_reply(&raw).expect("call 1 answered");
        assert_eq!((call, status), (1, CallStatus::Ok));

        // Truncated: 5 payload bytes (a request's fixed part is 12).
        raw.send(&raw_frame(Kind::Request, meta, &[2, 0, 0, 0, 0], token))
            .expect("send");
        // Another request type's fingerprint.
        let other = CallMeta {
            fingerprint: meta.fingerprint ^ 1,
            ..meta
        };
        raw.send(&request(other, 3, 1000, &ask, token))
            .expect("send");
        // A Reply sent to the server (a frame only a server sends).
        let mut buf = [0u8; 256];
        let reply_meta = CallMeta {
            fingerprint: <Reply<Sum> as Message>::FINGERPRINT,
            ..meta
        };
        let n = encode_reply(&mut buf, reply_meta, true, 4, Ok(&Sum(1))).expect("fits");
        let mut d = buf[..n].to_vec();
        d.extend_from_slice(&token.to_le_bytes());
        raw.send(&d).expect("send");
        // None of these is answered.
        raw.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        assert_eq!(next_reply(&raw), None, "a malformed request was answered");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");

        // A body that does not decode: the call ends with an error, not a reply.
        let mut fixed = [0u8; 12];
        fixed[..8].copy_from_slice(&5u64.to_le_bytes());
        fixed[8..].copy_from_slice(&1000u32.to_le_bytes());
        raw.send(&raw_frame(Kind::Request, meta, &fixed, token))
            .expect("send");
        let (call, status, body) = next_reply(&raw).expect("call 5 answered");
        assert_eq!((call, status, body.len()), (5, CallStatus::Dropped, 0));

        // Call id 0, and the largest budget: a call like any other.
        raw.send(&request(meta, 0, u32::MAX, &ask, token))
            .expect("send");
        let (call, status, body) = next_reply(&raw).expect("call 0 answered");
        assert_eq!((call, status), (0, CallStatus::Ok));
        assert_eq!(llbus_net::decode_payload::<Sum>(&body), Ok(Sum(42)));

        // Call id u64::MAX (the arithmetic's edge), with a budget of 0 and then u32::MAX.
        raw.send(&request(meta, u64::MAX, u32::MAX, &ask, token))
            .expect("send");
        let (call, status, _) = next_reply(&raw).expect("call u64::MAX answered");
        assert_eq!((call, status), (u64::MAX, CallStatus::Ok));
        // Its duplicate is answered from the kept reply, not run again.
        raw.send(&request(meta, u64::MAX, u32::MAX, &ask, token))
            .expect("send");
        let (call, status, _) = next_reply(&raw).expect("its duplicate answered");
        assert_eq!((call, status), (u64::MAX, CallStatus::Ok));
        // The host's session has now seen u64::MAX: a lower id is 1024 or more below it, so
        // never run (the host spoiled only its own session).
        raw.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        raw.send(&request(meta, 6, 1000, &ask, token))
            .expect("send");
        assert_eq!(next_reply(&raw), None, "a call below the window was run");

        // A genuine caller's bridge is still served.
        let mut bus = Bus::builder();
        bus.add(
            Bridge::bind(loopback())
                .expect("bind")
                .name("frames-caller")
                .import_service(&service(), addr),
        );
        let key = bus.caller(&service(), "client");
        let mut caller = bus.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        for n in 0..20 {
            assert_eq!(
                client.call(Ask { n, delta: 1 }, Duration::from_secs(10)),
                Ok(Sum(n + 1))
            );
        }
        drop(client);
        caller.stop();
        caller.join().expect("caller joins");
        server.stop();
        let report = server.join().expect("server joins: nothing panicked");
        tests::assert_balanced(&report);
        assert_eq!(metric(&report, "frames-server", "drop.bad_length"), 1);
        assert_eq!(
            metric(&report, "frames-server", "drop.fingerprint_mismatch"),
            1
        );
        // Calls 1, 5, 0, u64::MAX and the caller's 20 ran; nothing else.
        assert_eq!(metric(&report, "frames-server", "service.requests"), 24);
        // The raw host's two (its duplicate of u64::MAX, and call 6 below the window); the
        // genuine caller's resends may add some.
        assert!(metric(&report, "frames-server", "service.duplicates") >= 2);
        assert_eq!(report.actor("adder").map(|a| a.handled), Some(23));
    });
}

/// The server's session, as the hostile server says it.
const SERVER_SESSION: u64 = 0x5e55;
/// The token the hostile server gives the caller's bridge.
const TOKEN: u64 = 0x7070_7070;

/// What the hostile server does with each call, by call id.
fn misbehave(raw: &UdpSocket, to: SocketAddr, call: u64) {
    let meta = CallMeta {
        topic_id: service().name().id(),
        fingerprint: <Reply<Sum> as Message>::FINGERPRINT,
        session: SERVER_SESSION,
    };
    let ok = |call: u64, sum: u64, meta: CallMeta, token: u64| {
        let mut buf = [0u8; 256];
        let n = encode_reply(&mut buf, meta, true, call, Ok(&Sum(sum))).expect("fits");
        let mut d = buf[..n].to_vec();
        d.extend_from_slice(&token.to_le_bytes());
        d
    };
    let status = |call: u64, code: u8, body: &[u8]| {
        let mut p = call.to_le_bytes().to_vec();
        p.push(code);
        p.extend_from_slice(body);
        raw_frame(Kind::Reply, meta, &p, TOKEN)
    };
    let send = |d: &[u8]| {
        raw.send_to(d, to).expect("send");
    };
    match call {
        1 => {
            // Truncated (4 payload bytes), an error status with a body: bad_length.
            send(&raw_frame(Kind::Reply, meta, &[1, 0, 0, 0], TOKEN));
            send(&status(1, 3, &[9]));
            // Another fingerprint, another token, another session.
            let other = CallMeta {
                fingerprint: meta.fingerprint ^ 1,
                ..meta
            };
            send(&ok(1, 100, other, TOKEN));
            send(&ok(1, 101, meta, TOKEN ^ 1));
            let stranger = CallMeta {
                session: SERVER_SESSION ^ 1,
                ..meta
            };
            send(&ok(1, 102, stranger, TOKEN));
            // Calls never made: 0 and u64::MAX (late).
            send(&ok(0, 103, meta, TOKEN));
            send(&ok(u64::MAX, 104, meta, TOKEN));
            // A status this version does not know ends the call (Dropped); a reply after it
            // is late.
            send(&status(1, 0x99, &[]));
            send(&ok(1, 105, meta, TOKEN));
        }
        // Ok, with a body that does not decode: the call ends Dropped.
        2 => send(&status(2, 0, &[])),
        // Status 08 (refused), which no frame should carry: an error all the same.
        3 => send(&status(3, 8, &[])),
        // Answered, then twice more (late).
        4 => {
            send(&ok(4, 44, meta, TOKEN));
            send(&ok(4, 45, meta, TOKEN));
            send(&ok(4, 46, meta, TOKEN));
        }
        // Never answered: the call times out.
        5 => {}
        n => send(&ok(n, n, meta, TOKEN)),
    }
}

/// Plays the server's bridge on `raw` until `done`: acknowledges every Subscribe at once (no
/// cookie round), and treats each call's first Request as [`misbehave`] says (resends are
/// ignored).
fn hostile_server(raw: UdpSocket, done: Arc<AtomicBool>) {
    raw.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut answered = std::collections::HashSet::new();
    let mut buf = [0u8; 2048];
    while !done.load(Ordering::Relaxed) {
        let Ok((n, from)) = raw.recv_from(&mut buf) else {
            continue;
        };
        let Ok(frames) = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM) else {
            continue;
        };
        for frame in frames {
            match frame.header.kind {
                Kind::Subscribe => {
                    let Ok(Control::Subscribe {
                        topic_id,
                        fingerprint,
                        nonce,
                        ..
                    }) = Control::from_frame(&frame)
                    else {
                        continue;
                    };
                    let mut out = [0u8; 256];
                    let mut enc = BatchEncoder::new(&mut out);
                    enc.push_control(&Control::SubscribeAck {
                        topic_id,
                        fingerprint,
                        session: SERVER_SESSION,
                        last_seq: 0,
                        nonce,
                        cookie: Cookie([3; 16]),
                        token: TOKEN,
                    })
                    .expect("fits");
                    raw.send_to(enc.as_bytes(), from).expect("send");
                }
                Kind::Request => {
                    let Ok(r) = RequestFrame::from_frame(&frame) else {
                        continue;
                    };
                    if answered.insert(r.call) {
                        misbehave(&raw, from, r.call);
                    }
                }
                _ => {}
            }
        }
    }
}

/// How it would fail: a malformed or misaddressed reply that ends a call (or a second reply
/// that ends it twice), a panic (the caller's `join` fails), a bad frame not counted by its
/// reason, or counts that do not balance.
#[test]
fn a_hostile_servers_bad_and_stray_replies_end_each_call_once() {
    bounded("a hostile server", 60, || {
        let raw = UdpSocket::bind(loopback()).expect("bind");
        let server = raw.local_addr().expect("addr");
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        let hostile = std::thread::spawn(move || hostile_server(raw, d));

        let mut bus = Bus::builder();
        bus.add(
            Bridge::bind(loopback())
                .expect("bind")
                .name("frames-caller")
                .import_service(&service(), server),
        );
        let key = bus.caller(&service(), "client");
        let mut caller = bus.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        let t = Duration::from_secs(5);
        let ask = |n| Ask { n, delta: 0 };
        assert_eq!(client.call(ask(1), t), Err(CallError::Dropped), "call 1");
        assert_eq!(client.call(ask(2), t), Err(CallError::Dropped), "call 2");
        assert!(client.call(ask(3), t).is_err(), "call 3 (status 08)");
        assert_eq!(client.call(ask(4), t), Ok(Sum(44)), "call 4");
        let started = Instant::now();
        assert_eq!(
            client.call(ask(5), Duration::from_millis(300)),
            Err(CallError::Timeout),
            "call 5"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(client.call(ask(6), t), Ok(Sum(6)), "call 6");
        // The stray replies of call 4 may come after its end: give them time to be counted.
        std::thread::sleep(Duration::from_millis(200));
        drop(client);
        caller.stop();
        let report = caller.join().expect("caller joins: nothing panicked");
        done.store(true, Ordering::Relaxed);
        hostile.join().expect("the hostile server's thread");

        tests::assert_balanced(&report);
        let calls = report
            .service("frames.add", "client")
            .expect("the client's calls");
        assert_eq!(calls.calls, 6, "{calls:?}");
        assert_eq!(calls.in_flight, 0, "{calls:?}");
        assert_eq!(calls.calls, calls.replies + calls.errors, "{calls:?}");
        let m = |name: &str| metric(&report, "frames-caller", name);
        assert_eq!(
            m("drop.bad_length"),
            2,
            "truncated, and an error with a body"
        );
        assert_eq!(m("drop.fingerprint_mismatch"), 1);
        assert_eq!(m("drop.bad_token"), 1);
        assert_eq!(m("drop.unknown_sender"), 1, "another session");
        // Calls 0 and u64::MAX, call 1 after its end, call 4's two duplicates.
        assert_eq!(m("service.late"), 5);
    });
}
