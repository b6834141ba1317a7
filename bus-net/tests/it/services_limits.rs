//! The server's bridge's limits on services, as numbers and at its end, over loopback:
//! - a proven host's request flood is admitted at most at the request rate limit (10,000/s,
//!   bursts of 1,000 by default), the rest counted `rate_limited` and unanswered;
//! - a call held by a server whose bus stops ends at its caller with the server's `Stopped`
//!   (status `04`), not with the caller's timeout.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use crate::fixtures::loopback;
use llbus::{Actor, Bus, CallError, Context, Message, Replies, Request, Responder, Service, Setup};
use llbus_net::{
    encode_request, parse_datagram, BatchEncoder, Bridge, CallMeta, Control, DEFAULT_MAX_DATAGRAM,
    DEFAULT_REQUEST_LIMIT,
};
use serde::{Deserialize, Serialize};
use tests::{bounded, metric};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "limits.ask")]
pub struct Ask(u64);

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "limits.echo")]
pub struct Echo(u64);

fn service() -> Service<Ask, Echo> {
    Service::named("limits.echo").expect("name")
}

/// Echoes each call, except `HOLD`, which it keeps unanswered.
struct Echoer {
    replies: Replies<Echo>,
    held: Vec<Responder<Echo>>,
}

const HOLD: u64 = u64::MAX;

impl Actor for Echoer {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (Ask(n), responder) = self.replies.accept(request);
        if n == HOLD {
            self.held.push(responder);
        } else {
            ctx.reply(responder, Ok(Echo(n)));
        }
    }
}

fn server_bus(name: &str) -> (llbus::BusBuilder, std::net::SocketAddr) {
    let mut bus = Bus::builder();
    bus.actor("echo", |setup: &mut Setup<'_>| Echoer {
        replies: setup.replies(&service()),
        held: Vec::with_capacity(8),
    })
    .serves(&service());
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .name(name)
        .export_service(&service());
    let addr = bridge.local_addr();
    bus.add(bridge);
    (bus, addr)
}

/// The handshake of a raw caller (session 7): its token.
fn handshake(raw: &UdpSocket, topic_id: u64) -> u64 {
    let subscribe = |nonce, cookie| {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&Control::Subscribe {
            topic_id,
            fingerprint: <Request<Ask> as Message>::FINGERPRINT,
            session: 7,
            nonce,
            cookie,
        })
        .expect("fits");
        enc.as_bytes().to_vec()
    };
    let answer = || {
        let mut buf = [0u8; 2048];
        let n = raw.recv(&mut buf).expect("an answer");
        let frame = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM)
            .expect("parses")
            .next()
            .expect("a frame");
        Control::from_frame(&frame).expect("a control frame")
    };
    raw.send(&subscribe(1, None)).expect("send");
    let Control::CookieChallenge { cookie, .. } = answer() else {
        panic!("no challenge");
    };
    raw.send(&subscribe(2, Some(cookie))).expect("send");
    let Control::SubscribeAck { token, .. } = answer() else {
        panic!("not admitted");
    };
    token
}

/// How it would fail: more requests admitted (`service.requests`, or the echo's handled
/// count) than the burst and the rate over the flood's time, or none refused
/// `rate_limited` (the limit never reached).
#[test]
fn a_proven_hosts_request_flood_is_admitted_at_most_at_the_request_rate_limit() {
    bounded("a request flood", 60, || {
        let _cpu = crate::fixtures::cpu_hungry();
        let (bus, addr) = server_bus("limits-server");
        let server = bus.start().expect("server starts");
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let topic_id = service().name().id();
        let token = handshake(&raw, topic_id);
        raw.set_nonblocking(true).expect("non-blocking");
        let meta = CallMeta {
            topic_id,
            fingerprint: <Request<Ask> as Message>::FINGERPRINT,
            session: 7,
        };
        let mut buf = [0u8; 256];
        let mut back = [0u8; 2048];
        let started = Instant::now();
        for call in 1..=4000u64 {
            let n = encode_request(&mut buf, meta, true, call, 5000, &Ask(call)).expect("fits");
            buf[n..n + 8].copy_from_slice(&token.to_le_bytes());
            let _ = raw.send(&buf[..n + 8]);
            while raw.recv(&mut back).is_ok() {}
        }
        let flood = started.elapsed();
        std::thread::sleep(Duration::from_millis(300));
        server.stop();
        let report = server.join().expect("server joins");
        let rate = DEFAULT_REQUEST_LIMIT;
        let bound = u64::from(rate.burst)
            + (u128::from(rate.per_second) * (flood + Duration::from_millis(300)).as_nanos()
                / 1_000_000_000) as u64;
        let admitted = metric(&report, "limits-server", "service.requests");
        let limited = metric(&report, "limits-server", "drop.rate_limited");
        assert!(
            admitted <= bound,
            "{admitted} requests admitted in {flood:?}: over the limit's {bound}"
        );
        assert!(
            limited > 0,
            "the flood never reached the limit ({admitted} admitted in {flood:?})"
        );
        assert!(metric(&report, "limits-server", "service.refused") >= limited);
    });
}

/// How it would fail: the caller's call ending `Timeout` at its own deadline (the server's
/// bridge sent nothing as its bus stopped), or never ending.
#[test]
fn a_call_held_by_a_server_whose_bus_stops_ends_stopped_at_its_caller() {
    bounded("a server that stops", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (bus, addr) = server_bus("limits-stopping");
        let server = bus.start().expect("server starts");
        let mut bus = Bus::builder();
        bus.add(
            Bridge::bind(loopback())
                .expect("bind")
                .name("limits-caller")
                .import_service(&service(), addr),
        );
        let key = bus.caller(&service(), "client");
        let mut caller = bus.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        assert_eq!(client.call(Ask(1), Duration::from_secs(5)), Ok(Echo(1)));
        let call = std::thread::spawn(move || {
            let started = Instant::now();
            let r = client.call(Ask(HOLD), Duration::from_secs(4));
            (client, r, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(300));
        server.stop();
        server.join().expect("server joins");
        let (client, r, took) = call.join().expect("the call's thread");
        drop(client);
        caller.stop();
        let report = caller.join().expect("caller joins");
        tests::assert_balanced(&report);
        assert_eq!(
            r,
            Err(CallError::Stopped),
            "the held call ended after {took:?}: the server's stop did not reach its caller"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
    });
}
