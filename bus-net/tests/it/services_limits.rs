//! The server's bridge's limits on services, as numbers and at its end, over loopback:
//! - a proven host's request flood is admitted at most at the request rate limit (10,000/s,
//!   bursts of 1,000 by default), the rest counted `rate_limited` and unanswered;
//! - a call held by a server whose bus stops ends at its caller with the server's `Stopped`
//!   (status `04`), not with the caller's timeout;
//! - a proven host's flood of requests (each sent twice) drawing replies 20 times their size
//!   draws at most the default reply budget (1 MiB + 4 MiB/s over the flood), counted at the
//!   host's socket and by the bridge;
//! - requests from a proven host's address with another token draw no byte.

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

/// A page of bytes: a reply twenty times its request.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "limits.page")]
pub struct Page(Vec<u8>);

fn pages() -> Service<Ask, Page> {
    Service::named("limits.page").expect("name")
}

/// Answers every call with a 1300-byte page.
struct Pager {
    replies: Replies<Page>,
}

impl Actor for Pager {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (_, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Page(vec![0x5a; 1300])));
    }
}

/// A bus serving pages through a bridge with the default limits, named `name`.
fn pager_bus(name: &str) -> (llbus::RunningBus, std::net::SocketAddr) {
    let mut bus = Bus::builder();
    bus.actor("pager", |setup: &mut Setup<'_>| Pager {
        replies: setup.replies(&pages()),
    })
    .serves(&pages());
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .name(name)
        .export_service(&pages());
    let addr = bridge.local_addr();
    bus.add(bridge);
    (bus.start().expect("server starts"), addr)
}

/// A Request of the page service for call `call` (session 7, a 5 s budget) ending with
/// `token`, in `buf`: its length.
fn page_request(buf: &mut [u8; 256], call: u64, token: u64) -> usize {
    let meta = CallMeta {
        topic_id: pages().name().id(),
        fingerprint: <Request<Ask> as Message>::FINGERPRINT,
        session: 7,
    };
    let n = encode_request(buf, meta, true, call, 5000, &Ask(call)).expect("fits");
    buf[n..n + 8].copy_from_slice(&token.to_le_bytes());
    n + 8
}

/// How it would fail: more reply bytes received (or sent, by the bridge's own count) than
/// the default budget's burst (1 MiB) and rate (4 MiB/s) over the flood, resends of answered
/// calls included; or the flood never reaching the budget (`over_budget` 0: it proved
/// nothing).
#[test]
fn a_proven_hosts_flood_draws_at_most_the_default_reply_budget() {
    bounded("a flood against the default reply budget", 60, || {
        let _cpu = crate::fixtures::cpu_hungry();
        let (server, addr) = pager_bus("limits-pages");
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let token = handshake(&raw, pages().name().id());
        raw.set_nonblocking(true).expect("non-blocking");
        let (mut buf, mut back) = ([0u8; 256], [0u8; 2048]);
        let mut received = 0usize;
        let started = Instant::now();
        let mut call = 0u64;
        // About a second of requests, each sent twice (the second answered from the kept
        // reply, out of the same budget), drawing replies 20 times their size.
        while started.elapsed() < Duration::from_millis(1000) {
            call += 1;
            let n = page_request(&mut buf, call, token);
            let _ = raw.send(&buf[..n]);
            let _ = raw.send(&buf[..n]);
            while let Ok(n) = raw.recv(&mut back) {
                received += n;
            }
        }
        let quiet = Instant::now() + Duration::from_millis(300);
        while Instant::now() < quiet {
            match raw.recv(&mut back) {
                Ok(n) => received += n,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        server.stop();
        let report = server.join().expect("server joins");
        let elapsed = started.elapsed();
        let (per_second, burst) = llbus_net::DEFAULT_REPLY_RATE;
        let budget = burst + (u128::from(per_second) * elapsed.as_nanos() / 1_000_000_000) as u64;
        // The handshake's answers, and the bucket's refill between the bridge's clock reads.
        let slack = 4096;
        let sent = metric(&report, "limits-pages", "bytes_out");
        assert!(
            received as u64 <= budget + slack && sent <= budget + slack,
            "{received} reply bytes received ({sent} sent) for {call} calls in {elapsed:?}: \
             over the budget of {budget}"
        );
        assert!(
            metric(&report, "limits-pages", "service.over_budget") > 0,
            "the flood never reached the budget ({sent} bytes sent for {call} calls in {elapsed:?})"
        );
    });
}

/// How it would fail: any byte sent back to requests from a proven host that carry another
/// token than its own (a source that spoofs its address without seeing its traffic), or the
/// requests not counted `bad_token`.
#[test]
fn requests_with_a_wrong_token_from_a_proven_source_draw_no_byte() {
    bounded("requests with a wrong token", 30, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (server, addr) = pager_bus("limits-token");
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let token = handshake(&raw, pages().name().id());
        let mut buf = [0u8; 256];
        for call in 1..=200u64 {
            let n = page_request(&mut buf, call, token ^ call.rotate_left(17));
            raw.send(&buf[..n]).expect("send");
        }
        raw.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut back = [0u8; 2048];
        let answered = raw.recv(&mut back).ok();
        // Its own token still works: the bridge was listening.
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let n = page_request(&mut buf, 1000, token);
        raw.send(&buf[..n]).expect("send");
        let genuine = raw.recv(&mut back).expect("the genuine call's reply");
        server.stop();
        let report = server.join().expect("server joins");
        assert_eq!(answered, None, "a request with a wrong token was answered");
        assert!(genuine > 1300, "{genuine} bytes");
        assert_eq!(metric(&report, "limits-token", "drop.bad_token"), 200);
        assert_eq!(metric(&report, "limits-token", "service.refused"), 200);
        assert_eq!(metric(&report, "limits-token", "service.requests"), 1);
    });
}
