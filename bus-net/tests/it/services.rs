//! Services across two bridges over loopback: a handle on one bus calls an actor of another;
//! each call ends once with its reply, the server's error, a panic, or a timeout when nobody
//! serves. Raw sockets of an allowed host: replies forged to the caller's bridge (from the
//! host's own address, and spoofing the server's with the host's own token) end nothing;
//! against the server's bridge, requests without the
//! handshake are sent nothing; a flood of requests after it draws no more reply bytes than the
//! host's budget (here 64 KiB at once, 256 KiB/s after, so that any machine's flood reaches
//! it; the default's 1 MiB and 4 MiB/s are checked exactly on the simulated network,
//! `bus-net/src/tests/services.rs`).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use crate::fixtures::loopback;
use llbus::{
    Actor, Bus, CallError, Context, Message, Replies, Request, RestartLimit, Service, Setup,
    Supervision,
};
use llbus_net::{
    encode_reply, encode_request, parse_datagram, BatchEncoder, Bridge, BridgeConfig, CallMeta,
    Control, Cookie, ServiceConfig, DEFAULT_MAX_DATAGRAM,
};
use serde::{Deserialize, Serialize};
use tests::{bounded, metric};

/// Add `delta` to `n`; `n == DROP` drops the call, `n == PANIC` panics holding it.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "calc.ask")]
pub struct Ask {
    n: u64,
    delta: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "calc.sum")]
pub struct Sum(u64);

const DROP: u64 = u64::MAX;
const PANIC: u64 = u64::MAX - 1;
/// Answered 300 ms later (the server's next tick after that), by `delta`.
const LATER: u64 = u64::MAX - 2;
/// Held unanswered until the server stops.
const HOLD: u64 = u64::MAX - 3;

fn service() -> Service<Ask, Sum> {
    Service::named("calc.add").expect("name")
}

struct Adder {
    replies: Replies<Sum>,
    later: Vec<(std::time::Instant, llbus::Responder<Sum>, u64)>,
    held: Vec<llbus::Responder<Sum>>,
}

impl Actor for Adder {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        match ask.n {
            DROP => drop(responder),
            PANIC => panic!("asked to panic, holding the call"),
            LATER => {
                let at = std::time::Instant::now() + Duration::from_millis(300);
                self.later.push((at, responder, ask.delta));
            }
            HOLD => self.held.push(responder),
            n => ctx.reply(responder, Ok(Sum(n + ask.delta))),
        }
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let now = std::time::Instant::now();
        while let Some(i) = self.later.iter().position(|(at, _, _)| *at <= now) {
            let (_, responder, delta) = self.later.swap_remove(i);
            ctx.reply(responder, Ok(Sum(delta)));
        }
    }
}

/// The server's bus: the adder and a bridge exporting its service. Returns the bus and the
/// bridge's address.
fn server_bus() -> (llbus::BusBuilder, SocketAddr) {
    let mut bus = Bus::builder();
    bus.actor("adder", |setup: &mut Setup<'_>| Adder {
        replies: setup.replies(&service()),
        later: Vec::new(),
        held: Vec::new(),
    })
    .serves(&service())
    .tick_every(Duration::from_millis(10))
    .supervision(Supervision::Restart(RestartLimit {
        max_restarts: 10,
        within: Duration::from_secs(60),
        delay: Duration::from_millis(1),
    }));
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .name("svc-server")
        .export_service(&service());
    let addr = bridge.local_addr();
    bus.add(bridge);
    (bus, addr)
}

/// The caller's bus: a bridge importing the service from `server`, and a handle calling it.
fn caller_bus(server: SocketAddr) -> (llbus::BusBuilder, llbus::CallerKey<Ask, Sum>) {
    caller_bus_at(server).0
}

/// [`caller_bus`], and the caller's bridge's address.
#[allow(clippy::type_complexity)]
fn caller_bus_at(
    server: SocketAddr,
) -> ((llbus::BusBuilder, llbus::CallerKey<Ask, Sum>), SocketAddr) {
    let mut bus = Bus::builder();
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .name("svc-caller")
        .import_service(&service(), server);
    let addr = bridge.local_addr();
    bus.add(bridge);
    let key = bus.caller(&service(), "client");
    ((bus, key), addr)
}

#[test]
fn a_call_across_two_bridges_gets_its_reply_or_the_servers_error() {
    bounded("calls across bridges", 60, || {
        let (server, addr) = server_bus();
        let server = server.start().expect("server starts");
        let (caller, key) = caller_bus(addr);
        let mut caller = caller.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        let t = Duration::from_secs(10);
        for n in 0..200 {
            assert_eq!(client.call(Ask { n, delta: 7 }, t), Ok(Sum(n + 7)));
        }
        assert_eq!(
            client.call(Ask { n: DROP, delta: 0 }, t),
            Err(CallError::Dropped)
        );
        assert_eq!(
            client.call(Ask { n: PANIC, delta: 0 }, t),
            Err(CallError::ServerPanicked)
        );
        // The server restarted: it answers again.
        assert_eq!(client.call(Ask { n: 1, delta: 1 }, t), Ok(Sum(2)));
        drop(client);
        caller.stop();
        let caller = caller.join().expect("caller joins");
        server.stop();
        let server = server.join().expect("server joins");
        assert_eq!(metric(&server, "svc-server", "service.requests"), 203);
        assert_eq!(metric(&server, "svc-server", "service.replies"), 203);
        assert_eq!(metric(&caller, "svc-caller", "service.calls"), 203);
        assert_eq!(metric(&caller, "svc-caller", "service.timeouts"), 0);
    });
}

#[test]
fn a_call_with_no_server_times_out() {
    bounded("a call with no server", 30, || {
        // A socket nobody answers on.
        let silent = UdpSocket::bind(loopback()).expect("bind");
        let (caller, key) = caller_bus(silent.local_addr().expect("addr"));
        let mut caller = caller.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        let started = std::time::Instant::now();
        assert_eq!(
            client.call(Ask { n: 1, delta: 1 }, Duration::from_millis(300)),
            Err(CallError::Timeout)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(client);
        caller.stop();
        caller.join().expect("caller joins");
    });
}

#[test]
fn the_callers_bridge_resends_for_its_local_callers_time_only() {
    bounded("a call's deadline across bridges", 60, || {
        let (server, addr) = server_bus();
        let server = server.start().expect("server starts");
        let (caller, key) = caller_bus(addr);
        let mut caller = caller.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        // Established first: the held call's sends all go out.
        assert_eq!(
            client.call(Ask { n: 1, delta: 1 }, Duration::from_secs(10)),
            Ok(Sum(2))
        );
        let started = std::time::Instant::now();
        assert_eq!(
            client.call(Ask { n: HOLD, delta: 0 }, Duration::from_millis(300)),
            Err(CallError::Timeout)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Past the local deadline, a bridge bound by `call_timeout` (5 s) would go on
        // resending every 200 ms at most.
        std::thread::sleep(Duration::from_millis(1200));
        drop(client);
        caller.stop();
        let caller = caller.join().expect("caller joins");
        server.stop();
        let server = server.join().expect("server joins");
        assert_eq!(metric(&server, "svc-server", "service.replies"), 2);
        // Sent at 0, 10, 30, 70 and 150 ms (a resend at 310 ms is past the deadline): four
        // resends, five with a late round; by 1.5 s a 5 s bound would have sent about ten.
        let resent = metric(&caller, "svc-caller", "service.resent");
        assert!((1..=5).contains(&resent), "{resent} resends");
        // Ended by the bridge's deadline, or by the server's bridge, whose own call of the
        // adder had the same time left and answered `Timeout`: by 1.5 s either way.
        assert_eq!(metric(&caller, "svc-caller", "service.calls"), 2);
    });
}

#[test]
fn a_call_of_a_service_the_server_does_not_export_is_refused() {
    bounded("a refused service", 60, || {
        let mut server = Bus::builder();
        let bridge = Bridge::bind(loopback()).expect("bind").name("svc-none");
        let addr = bridge.local_addr();
        server.add(bridge);
        let server = server.start().expect("server starts");
        let (caller, key) = caller_bus(addr);
        let mut caller = caller.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        assert_eq!(
            client.call(Ask { n: 1, delta: 1 }, Duration::from_secs(10)),
            Err(CallError::Refused)
        );
        drop(client);
        caller.stop();
        let caller = caller.join().expect("caller joins");
        server.stop();
        server.join().expect("server joins");
        tests::assert_balanced(&caller);
        let row = (caller.services.iter())
            .find(|c| c.caller == "client")
            .expect("the client's row");
        assert_eq!((row.calls, row.refused), (1, 1));
    });
}

#[test]
fn a_request_without_a_handshake_is_sent_nothing() {
    bounded("a request without a handshake", 30, || {
        let (server, addr) = server_bus();
        let server = server.start().expect("server starts");
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let meta = CallMeta {
            topic_id: service().name().id(),
            fingerprint: <Request<Ask> as Message>::FINGERPRINT,
            session: 7,
        };
        let mut buf = [0u8; 256];
        for call in 1..=20u64 {
            let n = encode_request(&mut buf, meta, true, call, 1000, &Ask { n: 1, delta: 1 })
                .expect("fits");
            // Any token: the raw host has none.
            buf[n..n + 8].copy_from_slice(&call.to_le_bytes());
            raw.send_to(&buf[..n + 8], addr).expect("send");
        }
        let mut back = [0u8; 2048];
        assert!(
            raw.recv_from(&mut back).is_err(),
            "an unproven source was answered"
        );
        server.stop();
        let report = server.join().expect("server joins");
        assert_eq!(metric(&report, "svc-server", "service.refused"), 20);
        assert_eq!(metric(&report, "svc-server", "service.requests"), 0);
    });
}

/// A page of bytes: a reply that fills most of a datagram.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "calc.page")]
pub struct Page(Vec<u8>);

fn pages() -> Service<Ask, Page> {
    Service::named("calc.page").expect("name")
}

/// Answers every call with a 1300-byte page.
struct Pager {
    replies: Replies<Page>,
    page: Vec<u8>,
}

impl Actor for Pager {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (_, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Page(self.page.clone())));
    }
}

/// A Subscribe to the service of id `topic_id` (session 7), with `cookie` if it has one.
fn subscribe_to(topic_id: u64, nonce: u64, cookie: Option<Cookie>) -> Vec<u8> {
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
}

/// Subscribes `raw` (connected to a server's bridge) to the service of id `topic_id` by the
/// handshake, as any caller does: returns the server's session and `raw`'s token.
fn handshake(raw: &UdpSocket, topic_id: u64) -> (u64, u64) {
    raw.send(&subscribe_to(topic_id, 1, None)).expect("send");
    let Control::CookieChallenge { cookie, .. } = answer(raw) else {
        panic!("no challenge");
    };
    raw.send(&subscribe_to(topic_id, 2, Some(cookie)))
        .expect("send");
    let Control::SubscribeAck { session, token, .. } = answer(raw) else {
        panic!("not admitted");
    };
    (session, token)
}

/// The control frame `raw` receives next.
fn answer(raw: &UdpSocket) -> Control {
    let mut buf = [0u8; 2048];
    let n = raw.recv(&mut buf).expect("an answer");
    let frame = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM)
        .expect("parses")
        .next()
        .expect("a frame");
    Control::from_frame(&frame).expect("a control frame")
}

#[test]
fn a_request_flood_draws_no_more_reply_bytes_than_its_hosts_budget() {
    bounded("a request flood", 60, || {
        let mut bus = Bus::builder();
        bus.actor("pager", |setup: &mut Setup<'_>| Pager {
            replies: setup.replies(&pages()),
            page: vec![0xab; 1300],
        })
        .serves(&pages());
        let (per_second, burst) = (256usize << 10, 64usize << 10);
        let config = BridgeConfig {
            services: ServiceConfig {
                reply_rate: (per_second as u64, burst as u64),
                ..ServiceConfig::default()
            },
            ..BridgeConfig::default()
        };
        let bridge = Bridge::bind_with(loopback(), config)
            .expect("bind")
            .name("svc-pages")
            .export_service(&pages());
        let addr = bridge.local_addr();
        bus.add(bridge);
        let server = bus.start().expect("server starts");

        // The raw host proves its address and learns its token, as any caller does.
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let (_, token) = handshake(&raw, pages().name().id());
        raw.set_nonblocking(true).expect("non-blocking");

        let meta = CallMeta {
            topic_id: pages().name().id(),
            fingerprint: <Request<Ask> as Message>::FINGERPRINT,
            session: 7,
        };
        let started = std::time::Instant::now();
        let mut received = 0usize;
        let mut buf = [0u8; 256];
        let mut back = [0u8; 2048];
        for call in 1..=4000u64 {
            let n = encode_request(&mut buf, meta, true, call, 5000, &Ask { n: call, delta: 0 })
                .expect("fits");
            buf[n..n + 8].copy_from_slice(&token.to_le_bytes());
            let _ = raw.send(&buf[..n + 8]);
            while let Ok(n) = raw.recv(&mut back) {
                received += n;
            }
        }
        let quiet = std::time::Instant::now() + Duration::from_millis(500);
        while std::time::Instant::now() < quiet {
            match raw.recv(&mut back) {
                Ok(n) => received += n,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        server.stop();
        let report = server.join().expect("server joins");
        let elapsed = started.elapsed();
        // The bound: the burst, and the rate over everything the flood and its answers took.
        let budget = burst + (per_second as u128 * elapsed.as_nanos() / 1_000_000_000) as usize;
        let sent = metric(&report, "svc-pages", "bytes_out") as usize;
        assert!(
            received <= budget && sent <= budget + 1024,
            "{received} reply bytes received ({sent} sent) in {elapsed:?}: over the budget of {budget}"
        );
        assert!(
            metric(&report, "svc-pages", "service.over_budget") > 0,
            "the flood never reached the budget ({sent} bytes sent in {elapsed:?})"
        );
    });
}

/// A Reply of the service to call `call`, under `session`, ending with `token`.
fn forged_reply(session: u64, call: u64, token: u64) -> Vec<u8> {
    let meta = CallMeta {
        topic_id: service().name().id(),
        fingerprint: <llbus::Reply<Sum> as Message>::FINGERPRINT,
        session,
    };
    let mut buf = [0u8; 256];
    let n = encode_reply(&mut buf, meta, true, call, Ok(&Sum(666))).expect("fits");
    let mut d = buf[..n].to_vec();
    d.extend_from_slice(&token.to_le_bytes());
    d
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_forged_reply_to_another_callers_call_ends_nothing_requires_root() {
    let Some(mut spoofer) = tests::spoof::RawSender::for_test("a_forged_reply") else {
        return;
    };
    bounded("a forged reply", 30, move || {
        let (server, server_addr) = server_bus();
        let server = server.start().expect("server starts");
        let ((caller, key), caller_addr) = caller_bus_at(server_addr);
        let mut caller = caller.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        let t = Duration::from_secs(10);
        assert_eq!(client.call(Ask { n: 1, delta: 1 }, t), Ok(Sum(2)), "call 1");
        // Call 2 is held 300 ms by the server; meanwhile an allowed host that did its own
        // handshake (so knows the server's session, and a token: its own) forges replies to
        // calls 1 to 8, from its own address and from the server's.
        let call = std::thread::spawn(move || {
            let r = client.call(
                Ask {
                    n: LATER,
                    delta: 40,
                },
                t,
            );
            (client, r)
        });
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(server_addr).expect("connect");
        let (session, token) = handshake(&raw, service().name().id());
        let (SocketAddr::V4(from_server), SocketAddr::V4(to_caller)) = (server_addr, caller_addr)
        else {
            panic!("loopback is IPv4");
        };
        std::thread::sleep(Duration::from_millis(50));
        for call_id in 1..=8 {
            let d = forged_reply(session, call_id, token);
            raw.send_to(&d, caller_addr).expect("send");
            spoofer.send(from_server, to_caller, &d).expect("spoof");
        }
        let (client, r) = call.join().expect("the call's thread");
        assert_eq!(r, Ok(Sum(40)), "the genuine reply, not a forged one");
        drop(client);
        caller.stop();
        let report = caller.join().expect("caller joins");
        server.stop();
        server.join().expect("server joins");
        assert_eq!(metric(&report, "svc-caller", "drop.unknown_sender"), 8);
        // (Genuine replies resent to a caller that resent under load are counted `late`:
        // not asserted here.)
        assert_eq!(metric(&report, "svc-caller", "drop.bad_token"), 8);
    });
}
