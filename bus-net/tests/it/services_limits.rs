//! The server's bridge's limits on services, as numbers and at its end, over loopback:
//! - a proven host's request flood is admitted at most at the request rate limit (set to
//!   1,000/s, bursts of 100), the rest counted `rate_limited` and unanswered;
//! - a call held by a server whose bus stops ends at its caller with the server's `Stopped`
//!   (status `04`), not with the caller's timeout;
//! - a proven host's flood of requests (each sent twice) drawing replies 20 times their size
//!   draws at most the default reply budget (1 MiB + 4 MiB/s over the flood), counted at the
//!   host's socket and by the bridge;
//! - requests from a proven host's address with another token draw no byte;
//! - a resend of an answered call whose reply was lost is never run again, however other
//!   proven callers churn the seen windows' table (`subscriber_capacity` sessions) and the
//!   served calls' table: a window goes only once its calls' deadlines have passed, and a new
//!   session that finds none gone is answered `QueueFull`, not run.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use crate::fixtures::loopback;
use llbus::{Actor, Bus, CallError, Context, Message, Replies, Request, Responder, Service, Setup};
use llbus_net::{encode_request, BatchEncoder, Bridge, CallMeta, Control};
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
    server_bus_with(name, llbus_net::BridgeConfig::default())
}

/// `server_bus` with the bridge's `config`.
fn server_bus_with(
    name: &str,
    config: llbus_net::BridgeConfig,
) -> (llbus::BusBuilder, std::net::SocketAddr) {
    let mut bus = Bus::builder();
    bus.actor("echo", |setup: &mut Setup<'_>| Echoer {
        replies: setup.replies(&service()),
        held: Vec::with_capacity(8),
    })
    .serves(&service());
    let bridge = Bridge::bind_with(loopback(), config)
        .expect("bind")
        .name(name)
        .export_service(&service());
    let addr = bridge.local_addr();
    bus.add(bridge);
    (bus, addr)
}

/// The handshake of a raw caller (session 7): its token.
fn handshake(raw: &UdpSocket, topic_id: u64) -> u64 {
    let fingerprint = <Request<Ask> as Message>::FINGERPRINT;
    crate::fixtures::raw_subscribe(raw, topic_id, fingerprint, 7).0
}

/// How it would fail: more requests admitted (`service.requests`, or the echo's handled
/// count) than the burst and the rate over the flood's time, or none refused
/// `rate_limited` (the limit never reached).
#[test]
fn a_proven_hosts_request_flood_is_admitted_at_most_at_the_request_rate_limit() {
    bounded("a request flood", 60, || {
        let _cpu = crate::fixtures::cpu_hungry();
        // A limit the paced flood below passes many times over whatever the machine's load
        // (the default's 10,000/s would be the flood's own pace on a loaded machine).
        let rate = llbus_net::RateLimit {
            per_second: 1_000,
            burst: 100,
        };
        let config = llbus_net::BridgeConfig {
            services: llbus_net::ServiceConfig {
                request_limit: rate,
                ..llbus_net::ServiceConfig::default()
            },
            ..llbus_net::BridgeConfig::default()
        };
        let (bus, addr) = server_bus_with("limits-server", config);
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
        // 4,000 requests in bursts of 100 (each fits the socket's buffer) 2 ms apart: 50,000/s
        // on a quiet machine, and still several times the limit if the sleeps stretch tenfold.
        for call in 1..=4000u64 {
            let n = encode_request(&mut buf, meta, true, call, 5000, &Ask(call)).expect("fits");
            buf[n..n + 8].copy_from_slice(&token.to_le_bytes());
            let _ = raw.send(&buf[..n + 8]);
            while raw.recv(&mut back).is_ok() {}
            if call % 100 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let flood = started.elapsed();
        std::thread::sleep(Duration::from_millis(300));
        server.stop();
        let report = server.join().expect("server joins");
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
/// calls included; or, when the calls admitted demanded more than the budget, none refused
/// `over_budget`.
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
        // 64 calls, answered (and kept: 64 per caller), then about a second of their resends,
        // each answered from the kept reply (no call of the bus, so the bridge keeps up on any
        // machine) out of the same budget: replies 20 times the requests' size.
        let mut sent_requests = 0u64;
        for call in 1..=64 {
            let n = page_request(&mut buf, call, token);
            let _ = raw.send(&buf[..n]);
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut call = 0u64;
        while started.elapsed() < Duration::from_millis(1000) {
            call = call % 64 + 1;
            let n = page_request(&mut buf, call, token);
            let _ = raw.send(&buf[..n]);
            sent_requests += 1;
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
            "{received} reply bytes received ({sent} sent) for {sent_requests} resends in \
             {elapsed:?}: \
             over the budget of {budget}"
        );
        // What the bridge would have sent without the budget: a reply to each admitted call
        // and resend. A debug build on a loaded machine
        // may not admit calls fast enough to reach 4 MiB/s: then the bound proved nothing,
        // and the test says so (and fails under CI, whose machine reaches it; the lower
        // budget of `services::a_request_flood_draws_no_more_reply_bytes_than_its_hosts_budget`
        // is reached anywhere).
        let answered = metric(&report, "limits-pages", "service.replies")
            + metric(&report, "limits-pages", "service.duplicates");
        let demand = answered * 1300;
        if demand > budget + slack {
            assert!(
                metric(&report, "limits-pages", "service.over_budget") > 0,
                "{demand} reply bytes demanded, over the budget, and none refused"
            );
        } else {
            eprintln!(
                "NOT REACHED: the bridge admitted calls for only {demand} reply bytes in \
                 {elapsed:?} (budget {budget}): this machine is too slow to test the default \
                 reply budget"
            );
            assert!(
                std::env::var_os("CI").is_none(),
                "the default budget was not reached"
            );
        }
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

/// Echoes each call, counting how often it ran each number.
struct RunCounter {
    replies: Replies<Echo>,
    runs: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, u32>>>,
}

impl Actor for RunCounter {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (Ask(n), responder) = self.replies.accept(request);
        *(self.runs.lock())
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(n)
            .or_default() += 1;
        ctx.reply(responder, Ok(Echo(n)));
    }
}

/// The handshake of a raw caller under `session`: its token and the cookie that proves it
/// (for its Unsubscribe).
fn handshake_as(raw: &UdpSocket, topic_id: u64, session: u64) -> (u64, llbus_net::Cookie) {
    let fingerprint = <Request<Ask> as Message>::FINGERPRINT;
    crate::fixtures::raw_subscribe(raw, topic_id, fingerprint, session)
}

/// A request of call `call` for `Ask(n)` under `session`, with a budget of `budget_ms`,
/// ending with `token`.
fn request_of(session: u64, call: u64, n: u64, budget_ms: u32, token: u64) -> Vec<u8> {
    let meta = CallMeta {
        topic_id: service().name().id(),
        fingerprint: <Request<Ask> as Message>::FINGERPRINT,
        session,
    };
    let mut buf = [0u8; 256];
    let len = encode_request(&mut buf, meta, true, call, budget_ms, &Ask(n)).expect("fits");
    buf[len..len + 8].copy_from_slice(&token.to_le_bytes());
    buf[..len + 8].to_vec()
}

/// How it would fail: a caller's call answered, its reply lost, then its resend within its
/// deadline runs the call a second time, because other proven callers pushed both its kept
/// reply (the served calls' table) and its seen window (a table of `subscriber_capacity`
/// caller sessions) out first. Shown with small
/// tables (4 served calls, 8 sessions) and 12 callers of their own loopback addresses; the
/// defaults (256 and 1024) take more callers, not another attack: ~1,024 sessions within
/// the victim's deadline (5 s by default), each a handshake, a request and an Unsubscribe,
/// at the control limit of 20/s (burst 40) per address: a few dozen addresses.
#[test]
fn a_resend_of_an_answered_call_never_runs_it_twice_whatever_other_callers_do() {
    bounded("a call run twice", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let runs = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let mut bus = Bus::builder();
        let r = std::sync::Arc::clone(&runs);
        bus.actor("counter", move |setup: &mut Setup<'_>| RunCounter {
            replies: setup.replies(&service()),
            runs: std::sync::Arc::clone(&r),
        })
        .serves(&service());
        let config = llbus_net::BridgeConfig {
            subscriber_capacity: 8,
            services: llbus_net::ServiceConfig {
                served_calls: 4,
                ..llbus_net::ServiceConfig::default()
            },
            ..llbus_net::BridgeConfig::default()
        };
        let bridge = Bridge::bind_with(loopback(), config)
            .expect("bind")
            .name("limits-once")
            .export_service(&service());
        let addr = bridge.local_addr();
        bus.add(bridge);
        let server = bus.start().expect("server starts");
        let topic_id = service().name().id();
        let connect = |ip: [u8; 4]| {
            let raw = UdpSocket::bind(std::net::SocketAddr::from((ip, 0))).expect("bind");
            raw.set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            raw.connect(addr).expect("connect");
            raw
        };
        // The victim's call 1 (of 42) is answered; say the reply is lost.
        let victim = connect([127, 0, 0, 1]);
        let (token, _) = handshake_as(&victim, topic_id, 7);
        let call = request_of(7, 1, 42, 5000, token);
        victim.send(&call).expect("send");
        let mut back = [0u8; 2048];
        victim
            .recv(&mut back)
            .expect("the reply (lost, as far as the victim knows)");
        // Twelve other callers, each of an address of its own: a handshake, a call kept as
        // long as it may be, and an Unsubscribe (so the subscriber table never fills).
        for k in 0..12u8 {
            let raw = connect([127, 0, 1, 10 + k]);
            let session = 100 + u64::from(k);
            let (token, cookie) = handshake_as(&raw, topic_id, session);
            raw.send(&request_of(
                session,
                1,
                1000 + u64::from(k),
                u32::MAX,
                token,
            ))
            .expect("send");
            let _ = raw.recv(&mut back);
            let mut buf = [0u8; 256];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_control(&Control::Unsubscribe {
                topic_id,
                fingerprint: <Request<Ask> as Message>::FINGERPRINT,
                session,
                nonce: 3,
                cookie: Some(cookie),
            })
            .expect("fits");
            raw.send(enc.as_bytes()).expect("send");
        }
        // The victim's bridge resends call 1, well within its 5 s.
        victim.send(&call).expect("send");
        victim
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let _ = victim.recv(&mut back);
        server.stop();
        let report = server.join().expect("server joins");
        let ran = runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&42)
            .copied();
        assert_eq!(ran, Some(1), "the victim's call ran {ran:?} times");
        // The table remembers 8 sessions, each of a call that may still be resent: the
        // victim's and 7 others' ran; the last 5 callers' were answered QueueFull, not run.
        assert_eq!(
            metric(&report, "limits-once", "service.requests"),
            8,
            "calls admitted as new"
        );
        assert_eq!(
            metric(&report, "limits-once", "service.refused"),
            5,
            "new sessions refused for want of room to remember them"
        );
    });
}
