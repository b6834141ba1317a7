//! How remote calls end at the bridges' own actors, which serve and call directly (no proxy
//! actors), over loopback:
//! - a local server that panics holding remote calls, under `Restart` and under `Stop`: each
//!   held call ends at once at its remote caller with the server's error (never its timeout),
//!   and later calls are served again (`Restart`) or end `Stopped` at once (`Stop`);
//! - a server that never answers: each remote call ends `Timeout` by its deadline, the calls
//!   past the served calls' table end `QueueFull` at once, and the bridge's tables are given
//!   back (rounds of 300 such calls, more in all than its tables hold, are each served the
//!   same, and a genuine call after them gets its reply);
//! - the importing bus stopping with calls open: each ends `Stopped`, once, and the caller's
//!   counts balance;
//! - 400 calls at once through an importing bridge of 256 calls in flight: 256 end with their
//!   own replies, 144 `QueueFull` at once, none twice, and a later call is served;
//! - a mix of ends through an importing bridge (reply, timeout, `QueueFull` past its calls in
//!   flight, a panic, `Refused` for a service the server does not export, the stop): each
//!   counted once by its kind, `calls == replies + errors + in_flight` in the snapshot and the
//!   counters file alike while a call is open, and in the report after.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use crate::fixtures::loopback;
use llbus::{
    Actor, Bus, CallError, Context, Message, Replies, Request, Responder, RestartLimit, Service,
    Setup, Supervision,
};
use llbus_net::{
    encode_request, parse_datagram, Bridge, CallMeta, CallStatus, Kind, ReplyFrame,
    DEFAULT_MAX_DATAGRAM,
};
use serde::{Deserialize, Serialize};
use tests::{bounded, metric};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "ends.ask")]
pub struct Ask(u64);

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "ends.echo")]
pub struct Echo(u64);

fn service() -> Service<Ask, Echo> {
    Service::named("ends.echo").expect("name")
}

/// Kept unanswered (until the server ends).
const HOLD: u64 = u64::MAX;
/// Panics, holding what it holds.
const PANIC: u64 = u64::MAX - 1;

/// At and above it: answered `n - LATER` 200 ms later (at a tick of the server).
const LATER: u64 = 1 << 40;

/// Echoes each call, except `HOLD` (kept), `PANIC`, and `LATER + n` (echoed later).
struct Echoer {
    replies: Replies<Echo>,
    held: Vec<Responder<Echo>>,
    later: Vec<(Instant, Responder<Echo>, u64)>,
}

impl Actor for Echoer {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (Ask(n), responder) = self.replies.accept(request);
        match n {
            HOLD => self.held.push(responder),
            PANIC => panic!("asked to panic, holding {} calls", self.held.len()),
            n if n >= LATER => {
                let at = Instant::now() + Duration::from_millis(200);
                self.later.push((at, responder, n - LATER));
            }
            n => ctx.reply(responder, Ok(Echo(n))),
        }
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let now = Instant::now();
        while let Some(i) = self.later.iter().position(|(at, _, _)| *at <= now) {
            let (_, responder, n) = self.later.swap_remove(i);
            ctx.reply(responder, Ok(Echo(n)));
        }
    }
}

/// A bus serving the echo under `supervision`, and its bridge exporting it as `name`.
fn server_bus(name: &str, supervision: Supervision) -> (llbus::BusBuilder, std::net::SocketAddr) {
    let mut bus = Bus::builder();
    bus.actor("echo", |setup: &mut Setup<'_>| Echoer {
        replies: setup.replies(&service()),
        held: Vec::with_capacity(1024),
        later: Vec::with_capacity(1024),
    })
    .serves(&service())
    .tick_every(Duration::from_millis(10))
    .supervision(supervision);
    let bridge = Bridge::bind(loopback())
        .expect("bind")
        .name(name)
        .export_service(&service());
    let addr = bridge.local_addr();
    bus.add(bridge);
    (bus, addr)
}

/// A bus whose bridge `name` imports the service from `server`, with `callers` handles.
fn caller_bus(
    name: &str,
    server: std::net::SocketAddr,
    callers: usize,
) -> (llbus::BusBuilder, Vec<llbus::CallerKey<Ask, Echo>>) {
    let mut bus = Bus::builder();
    bus.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name(name)
            .import_service(&service(), server),
    );
    let keys = (0..callers)
        .map(|i| bus.caller(&service(), &format!("client{i}")))
        .collect();
    (bus, keys)
}

/// Held calls, then a panic, under `supervision`: what each held call, the panicking call
/// and a later call end with, and how long the held calls took.
#[allow(clippy::type_complexity)]
fn panic_holding_calls(
    supervision: Supervision,
    tag: &str,
) -> (
    Vec<(Result<Echo, CallError>, Duration)>,
    Result<Echo, CallError>,
    Result<Echo, CallError>,
    llbus::Report,
) {
    let (bus, addr) = server_bus(&format!("{tag}-server"), supervision);
    let server = bus.start().expect("server starts");
    let (bus, keys) = caller_bus(&format!("{tag}-caller"), addr, 5);
    let mut caller = bus.start().expect("caller starts");
    let mut clients: Vec<_> = (keys.into_iter())
        .map(|k| caller.caller(k).expect("caller"))
        .collect();
    let mut last = clients.pop().expect("five");
    // Established first, so that every held call reaches the server at once.
    assert_eq!(last.call(Ask(1), Duration::from_secs(5)), Ok(Echo(1)));
    let held: Vec<_> = (clients.into_iter())
        .map(|mut c| {
            std::thread::spawn(move || {
                let started = Instant::now();
                let r = c.call(Ask(HOLD), Duration::from_secs(8));
                (c, r, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let panicked = last.call(Ask(PANIC), Duration::from_secs(5));
    let held: Vec<_> = (held.into_iter())
        .map(|t| {
            let (c, r, took) = t.join().expect("a held call's thread");
            drop(c);
            (r, took)
        })
        .collect();
    // The restarted server (after its 1 ms delay) answers; a stopped one is gone for good.
    std::thread::sleep(Duration::from_millis(100));
    let after = last.call(Ask(2), Duration::from_secs(3));
    drop(last);
    caller.stop();
    let report = caller.join().expect("caller joins");
    server.stop();
    server.join().expect("server joins");
    (held, panicked, after, report)
}

/// How it would fail: a held call ending `Timeout` at its caller's deadline (the panic's end
/// of it never crossed the bridges), or hanging; the panicking call not ending
/// `ServerPanicked`; the restarted server not answering a later call.
#[test]
fn calls_held_by_a_server_that_panics_end_at_once_and_the_restarted_server_answers() {
    bounded("a server that panics under Restart", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let restart = Supervision::Restart(RestartLimit {
            max_restarts: 5,
            within: Duration::from_secs(60),
            delay: Duration::from_millis(1),
        });
        let (held, panicked, after, report) = panic_holding_calls(restart, "ends-restart");
        for (r, took) in &held {
            assert!(
                matches!(r, Err(CallError::Dropped | CallError::ServerPanicked)),
                "a held call ended {r:?} after {took:?}"
            );
            assert!(*took < Duration::from_secs(3), "{r:?} after {took:?}");
        }
        assert_eq!(panicked, Err(CallError::ServerPanicked));
        assert_eq!(after, Ok(Echo(2)), "the restarted server is not reached");
        tests::assert_balanced(&report);
    });
}

/// How it would fail: as above, and a call of the stopped server ending `Timeout` (the
/// bridge's call waited for a server that is gone) instead of `Stopped` at once.
#[test]
fn calls_held_by_a_server_that_panics_under_stop_end_at_once_and_later_calls_end_stopped() {
    bounded("a server that panics under Stop", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (held, panicked, after, report) = panic_holding_calls(Supervision::Stop, "ends-stop");
        for (r, took) in &held {
            assert!(
                matches!(
                    r,
                    Err(CallError::Dropped | CallError::ServerPanicked | CallError::Stopped)
                ),
                "a held call ended {r:?} after {took:?}"
            );
            assert!(*took < Duration::from_secs(3), "{r:?} after {took:?}");
        }
        assert_eq!(panicked, Err(CallError::ServerPanicked));
        assert_eq!(
            after,
            Err(CallError::Stopped),
            "a call of a server gone for good"
        );
        tests::assert_balanced(&report);
    });
}

/// The handshake of a raw caller (session 7): its token.
fn handshake(raw: &UdpSocket, topic_id: u64) -> u64 {
    let fingerprint = <Request<Ask> as Message>::FINGERPRINT;
    crate::fixtures::raw_subscribe(raw, topic_id, fingerprint, 7).0
}

/// Sends calls `ids` (each `HOLD`, `budget_ms`) from `raw` and collects the replies until
/// `quiet` passes with none: each call's statuses, in order.
fn hold_round(
    raw: &UdpSocket,
    token: u64,
    ids: std::ops::Range<u64>,
    budget_ms: u32,
    quiet: Duration,
) -> HashMap<u64, Vec<CallStatus>> {
    let meta = CallMeta {
        topic_id: service().name().id(),
        fingerprint: <Request<Ask> as Message>::FINGERPRINT,
        session: 7,
    };
    let mut buf = [0u8; 256];
    for call in ids {
        let n = encode_request(&mut buf, meta, true, call, budget_ms, &Ask(HOLD)).expect("fits");
        buf[n..n + 8].copy_from_slice(&token.to_le_bytes());
        raw.send(&buf[..n + 8]).expect("send");
    }
    raw.set_read_timeout(Some(quiet)).expect("timeout");
    let mut ends: HashMap<u64, Vec<CallStatus>> = HashMap::new();
    let mut back = [0u8; 2048];
    while let Ok(n) = raw.recv(&mut back) {
        let Ok(frames) = parse_datagram(&back[..n], DEFAULT_MAX_DATAGRAM) else {
            continue;
        };
        for frame in frames {
            if frame.header.kind == Kind::Reply {
                let r = ReplyFrame::from_frame(&frame).expect("the server's reply decodes");
                ends.entry(r.call).or_default().push(r.status);
            }
        }
    }
    ends
}

/// How it would fail: a held call not answered `Timeout` (the bridge's call of its server
/// never ends, or its end never leaves), a call answered twice, or the bridge's key table
/// leaking: the second round (or the genuine call after it) ends `QueueFull` for want of keys.
#[test]
fn a_server_that_never_answers_ends_each_remote_call_by_its_deadline_and_leaks_no_slot() {
    bounded("a server that never answers", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (bus, addr) = server_bus("ends-silent", Supervision::default());
        let server = bus.start().expect("server starts");
        let raw = UdpSocket::bind(loopback()).expect("bind");
        raw.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        raw.connect(addr).expect("connect");
        let token = handshake(&raw, service().name().id());
        // Three rounds: more calls than the bridge's keys (`MAX_CALLS_IN_FLIGHT`, 512) and its
        // served calls' table (256) hold, so that a table that leaks runs out.
        for round in 0..3u64 {
            let first = 1 + round * 300;
            let ends = hold_round(
                &raw,
                token,
                first..first + 300,
                100,
                Duration::from_millis(1200),
            );
            let (mut timeouts, mut full) = (0, 0);
            for call in first..first + 300 {
                match ends.get(&call).map(Vec::as_slice) {
                    Some([CallStatus::Timeout]) => timeouts += 1,
                    Some([CallStatus::QueueFull]) => full += 1,
                    other => panic!("round {round}: call {call} ended {other:?}"),
                }
            }
            // 256 served calls at once at most (the bridge's table, and the bus's calls in
            // flight): the rest are told so at once.
            assert!(
                (200..=256).contains(&timeouts),
                "round {round}: {timeouts} timeouts, {full} QueueFull"
            );
        }
        // A genuine caller is served after all that.
        let (bus, keys) = caller_bus("ends-silent-caller", addr, 1);
        let mut caller = bus.start().expect("caller starts");
        let mut client = caller
            .caller(keys.into_iter().next().expect("one"))
            .expect("caller");
        assert_eq!(client.call(Ask(5), Duration::from_secs(5)), Ok(Echo(5)));
        drop(client);
        caller.stop();
        caller.join().expect("caller joins");
        server.stop();
        let report = server.join().expect("server joins");
        tests::assert_balanced(&report);
        assert_eq!(metric(&report, "ends-silent", "service.requests"), 901);
    });
}

/// How it would fail: an open call ending `Timeout` or `Dropped` (the importing bridge's held
/// responders dropped unanswered) instead of `Stopped`, ending late, or the counts of the
/// caller not balancing.
#[test]
fn the_importing_bus_stopping_ends_each_open_call_stopped_once() {
    bounded("an importing bus that stops", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (bus, addr) = server_bus("ends-held", Supervision::default());
        let server = bus.start().expect("server starts");
        let (bus, keys) = caller_bus("ends-stopping", addr, 4);
        let mut caller = bus.start().expect("caller starts");
        let mut clients: Vec<_> = (keys.into_iter())
            .map(|k| caller.caller(k).expect("caller"))
            .collect();
        assert_eq!(clients[0].call(Ask(1), Duration::from_secs(5)), Ok(Echo(1)));
        let calls: Vec<_> = (clients.into_iter())
            .map(|mut c| {
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let r = c.call(Ask(HOLD), Duration::from_secs(8));
                    (c, r, started.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(400));
        caller.stop();
        let ends: Vec<_> = (calls.into_iter())
            .map(|t| {
                let (c, r, took) = t.join().expect("a call's thread");
                drop(c);
                (r, took)
            })
            .collect();
        let report = caller.join().expect("caller joins");
        server.stop();
        server.join().expect("server joins");
        for (r, took) in &ends {
            assert_eq!(*r, Err(CallError::Stopped), "after {took:?}");
            assert!(*took < Duration::from_secs(3), "{took:?}");
        }
        tests::assert_balanced(&report);
        let stopped: u64 = (report.services.iter())
            .filter(|c| c.caller.starts_with("client"))
            .map(|c| c.stopped)
            .sum();
        assert_eq!(stopped, 4);
    });
}

/// A service the server's bridge does not export.
fn unexported() -> Service<Ask, Echo> {
    Service::named("ends.unexported").expect("name")
}

/// A caller's figures as the counters file shows them: calls, replies, errors, timeouts,
/// dropped, panicked, stopped, queue full, refused, in flight.
fn file_rows(path: &std::path::Path) -> HashMap<String, [u64; 10]> {
    let snapshot = llbus::read_counters_file(path).expect("the counters file reads");
    let mut rows = HashMap::new();
    for actor in &snapshot.actors {
        for c in &actor.calls {
            rows.insert(
                format!("{}/{}", actor.name, c.service),
                [
                    c.calls,
                    c.replies,
                    c.errors,
                    c.timeouts,
                    c.dropped,
                    c.server_panicked,
                    c.stopped,
                    c.queue_full,
                    c.refused,
                    c.in_flight,
                ],
            );
        }
    }
    rows
}

/// A report's caller rows, as [`file_rows`].
fn report_rows(report: &llbus::Report) -> HashMap<String, [u64; 10]> {
    (report.services.iter())
        .map(|c| {
            (
                format!("{}/{}", c.caller, c.service),
                [
                    c.calls,
                    c.replies,
                    c.errors,
                    c.timeouts,
                    c.dropped,
                    c.server_panicked,
                    c.stopped,
                    c.queue_full,
                    c.refused,
                    c.in_flight,
                ],
            )
        })
        .collect()
}

/// `calls == replies + errors + in_flight`, `errors` the sum of its six kinds.
fn balanced(row: &[u64; 10]) -> bool {
    let [calls, replies, errors, t, d, p, s, q, r, in_flight] = *row;
    calls == replies + errors + in_flight && errors == t + d + p + s + q + r
}

/// How it would fail: a call through the importing bridge counted twice or not at all, under
/// the wrong kind of end, or the counters file disagreeing with the bus's snapshot or not
/// balancing while a call is in flight.
#[test]
fn the_counts_of_calls_across_bridges_balance_after_every_kind_of_end() {
    bounded("counts across bridges", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let restart = Supervision::Restart(RestartLimit {
            max_restarts: 5,
            within: Duration::from_secs(60),
            delay: Duration::from_millis(1),
        });
        let (bus, addr) = server_bus("ends-counts-server", restart);
        let server = bus.start().expect("server starts");
        let mut bus = Bus::builder();
        bus.name("ends-counts");
        // One call in flight at a time through the bridge: a second is refused `QueueFull`.
        let config = llbus_net::BridgeConfig {
            services: llbus_net::ServiceConfig {
                calls_in_flight: 1,
                ..llbus_net::ServiceConfig::default()
            },
            ..llbus_net::BridgeConfig::default()
        };
        bus.add(
            Bridge::bind_with(loopback(), config)
                .expect("bind")
                .name("ends-counts-caller")
                .import_service(&service(), addr)
                .import_service(&unexported(), addr),
        );
        let keys: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|n| bus.caller(&service(), n))
            .collect();
        let refused_key = bus.caller(&unexported(), "r");
        let mut caller = bus.start().expect("caller starts");
        let path = caller.counters_path().expect("a counters file").to_owned();
        let mut clients: Vec<_> = (keys.into_iter())
            .map(|k| caller.caller(k).expect("caller"))
            .collect();
        let mut r = caller.caller(refused_key).expect("caller");
        let mut c = clients.pop().expect("c");
        let mut b = clients.pop().expect("b");
        let mut a = clients.pop().expect("a");
        let t = Duration::from_secs(5);
        assert_eq!(b.call(Ask(1), t), Ok(Echo(1)));
        // a's call holds the one slot until its timeout; b's meanwhile is refused.
        let held = std::thread::spawn(move || {
            let r = a.call(Ask(HOLD), Duration::from_millis(600));
            (a, r)
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(b.call(Ask(2), t), Err(CallError::QueueFull));
        let (a, timed_out) = held.join().expect("a's thread");
        assert_eq!(timed_out, Err(CallError::Timeout));
        // The bridge frees a's slot by its own timer at the same deadline: a tick or so after
        // a stopped waiting.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(b.call(Ask(PANIC), t), Err(CallError::ServerPanicked));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(b.call(Ask(3), t), Ok(Echo(3)));
        assert_eq!(r.call(Ask(4), t), Err(CallError::Refused));
        // c's call is open when the bus stops.
        let open = std::thread::spawn(move || {
            let r = c.call(Ask(HOLD), Duration::from_secs(8));
            (c, r)
        });
        let name =
            |caller: &str, service: &Service<Ask, Echo>| format!("{caller}/{}", service.name());
        let (sa, sb, sc, sr) = (
            name("a", &service()),
            name("b", &service()),
            name("c", &service()),
            name("r", &unexported()),
        );
        // calls, replies, errors, timeouts, dropped, panicked, stopped, full, refused, in flight
        let live = [
            (sa.clone(), [1, 0, 1, 1, 0, 0, 0, 0, 0, 0]),
            (sb.clone(), [4, 2, 2, 0, 0, 1, 0, 1, 0, 0]),
            (sc.clone(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            (sr.clone(), [1, 0, 1, 0, 0, 0, 0, 0, 1, 0]),
        ];
        tests::wait_for("the counters file to show every call", 10, || {
            let (file, snapshot) = (file_rows(&path), report_rows(&caller.snapshot()));
            for row in file.values().chain(snapshot.values()) {
                assert!(balanced(row), "a row does not balance: {row:?}");
            }
            live.iter()
                .all(|(k, row)| file.get(k) == Some(row) && snapshot.get(k) == Some(row))
        });
        caller.stop();
        let (c, stopped) = open.join().expect("c's thread");
        assert_eq!(stopped, Err(CallError::Stopped));
        drop((a, b, c, r));
        let report = caller.join().expect("caller joins");
        server.stop();
        let served = server.join().expect("server joins");
        tests::assert_balanced(&report);
        tests::assert_balanced(&served);
        let rows = report_rows(&report);
        assert_eq!(rows.get(&sc), Some(&[1, 0, 1, 0, 0, 0, 1, 0, 0, 0]));
        for (k, row) in &live[..2] {
            assert_eq!(rows.get(k), Some(row), "{k}");
        }
        assert_eq!(rows.get(&sr), Some(&live[3].1));
    });
}

/// Makes `count` calls at once (each answered 200 ms later) as it starts, and records how
/// each ends: `(n asked, end)`.
struct Burst {
    out: llbus::CallOut<Ask, Echo>,
    count: u64,
    asked: HashMap<llbus::CallId, u64>,
    ends: std::sync::mpsc::Sender<(u64, Result<Echo, CallError>)>,
}

impl Actor for Burst {
    type In = llbus::Reply<Echo>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for n in 0..self.count {
            match ctx.call(self.out, Ask(LATER + n), Duration::from_secs(4)) {
                Ok(call) => {
                    self.asked.insert(call, n);
                }
                Err(e) => {
                    let _ = self.ends.send((n, Err(e)));
                }
            }
        }
    }
    fn on_message(&mut self, reply: llbus::Reply<Echo>, ctx: &mut Context<'_>) {
        if let Some((call, end)) = ctx.settle(reply) {
            let n = self
                .asked
                .remove(&call)
                .expect("a call of this actor's, ended once");
            let _ = self.ends.send((n, end));
        }
    }
}

/// How it would fail: calls past the importing bridge's calls in flight (256) waiting, timing
/// out or lost instead of ending `QueueFull` at once, a call ending twice or with another
/// call's reply, or the bridge's tables not given back (a later call not served).
#[test]
fn calls_past_the_importing_bridges_calls_in_flight_end_queue_full_and_the_rest_their_reply() {
    bounded("more calls than the bridge holds", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let (bus, addr) = server_bus("ends-burst-server", Supervision::default());
        let server = bus.start().expect("server starts");
        let (mut bus, keys) = caller_bus("ends-burst-caller", addr, 1);
        let (tx, rx) = std::sync::mpsc::channel();
        let count = 400;
        bus.actor("burst", move |setup: &mut Setup<'_>| Burst {
            out: setup.caller(&service()),
            count,
            asked: HashMap::with_capacity(512),
            ends: tx.clone(),
        })
        .calls(&service());
        let mut caller = bus.start().expect("caller starts");
        let mut ends = HashMap::new();
        for _ in 0..count {
            let (n, end) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("every call ends");
            assert!(ends.insert(n, end).is_none(), "call {n} ended twice");
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(rx.try_recv().is_err(), "a call ended twice");
        let (mut replies, mut full) = (0, 0);
        for (n, end) in &ends {
            match end {
                Ok(Echo(m)) => {
                    assert_eq!(m, n, "call {n} got another call's reply");
                    replies += 1;
                }
                Err(CallError::QueueFull) => full += 1,
                other => panic!("call {n} ended {other:?}"),
            }
        }
        assert_eq!(
            (replies, full),
            (256, 144),
            "{replies} replies, {full} QueueFull"
        );
        let mut client = caller
            .caller(keys.into_iter().next().expect("one"))
            .expect("caller");
        assert_eq!(client.call(Ask(9), Duration::from_secs(5)), Ok(Echo(9)));
        drop(client);
        caller.stop();
        let report = caller.join().expect("caller joins");
        server.stop();
        server.join().expect("server joins");
        tests::assert_balanced(&report);
        let row = report
            .service("ends.echo", "burst")
            .expect("the burst's row");
        assert_eq!(
            (row.calls, row.replies, row.queue_full, row.timeouts),
            (400, 256, 144, 0)
        );
    });
}
