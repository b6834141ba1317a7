//! Services through a lossy path: a relay between a caller's bridge and a server's bridge
//! loses a fifth of the `Request` and `Reply` datagrams each way (the handshake passes). The
//! caller's bridge resends until its deadline and the server's keeps each call by (source,
//! session, call id): every call ends exactly once, with its reply (or, once the server forgot
//! an answered call whose reply was lost, a timeout), the server runs each call at most once,
//! and no reply reaches a handle twice (`late` stays 0). With every request lost, a caller's
//! bridge stops sending a call when its local caller stops waiting (counted on the wire, not
//! by the bridge).

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fixtures::loopback;
use llbus::{Actor, Bus, Context, Message, Replies, Request, Service, Setup};
use llbus_net::{Bridge, Kind};
use serde::{Deserialize, Serialize};
use tests::{bounded, metric};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "lossy.ask")]
pub struct Ask(u64);

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "lossy.echo")]
pub struct Echo(u64);

fn service() -> Service<Ask, Echo> {
    Service::named("lossy.echo").expect("name")
}

/// Kept unanswered.
const HOLD: u64 = u64::MAX;

/// Echoes each call (but `HOLD`, kept), counting how often it ran each number.
struct Counter {
    replies: Replies<Echo>,
    runs: Arc<Mutex<HashMap<u64, u32>>>,
    held: Vec<llbus::Responder<Echo>>,
}

impl Actor for Counter {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (Ask(n), responder) = self.replies.accept(request);
        *(self.runs.lock().unwrap_or_else(PoisonError::into_inner))
            .entry(n)
            .or_default() += 1;
        if n == HOLD {
            self.held.push(responder);
        } else {
            ctx.reply(responder, Ok(Echo(n)));
        }
    }
}

/// A relay between one caller (whoever sends to `addr` first) and `server`, losing
/// `permille` of the datagrams whose first frame is a Request or a Reply, each way, by a
/// fixed-seed generator.
struct LossyServices {
    addr: SocketAddr,
    lost: Arc<AtomicU64>,
    /// Request datagrams from the caller, lost or relayed.
    requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LossyServices {
    fn start(server: SocketAddr, permille: u32) -> Self {
        let facing_caller = UdpSocket::bind(loopback()).expect("bind");
        let facing_server = UdpSocket::bind(loopback()).expect("bind");
        for s in [&facing_caller, &facing_server] {
            s.set_read_timeout(Some(Duration::from_millis(1)))
                .expect("timeout");
        }
        let addr = facing_caller.local_addr().expect("addr");
        let (lost, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let requests = Arc::new(AtomicU64::new(0));
        let (l, s, r) = (Arc::clone(&lost), Arc::clone(&stop), Arc::clone(&requests));
        let thread = std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(0x05e4_1ce5);
            let mut caller = None;
            let mut buf = vec![0u8; 65_536];
            let service_frame = |d: &[u8]| {
                d.len() > 4 && (d[4] == Kind::Request as u8 || d[4] == Kind::Reply as u8)
            };
            while !s.load(Ordering::Relaxed) {
                while let Ok((n, from)) = facing_caller.recv_from(&mut buf) {
                    caller = Some(from);
                    if n > 4 && buf[4] == Kind::Request as u8 {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    if service_frame(&buf[..n]) && rng.u32(0..1000) < permille {
                        l.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let _ = facing_server.send_to(&buf[..n], server);
                }
                while let Ok((n, _)) = facing_server.recv_from(&mut buf) {
                    if service_frame(&buf[..n]) && rng.u32(0..1000) < permille {
                        l.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Some(c) = caller {
                        let _ = facing_caller.send_to(&buf[..n], c);
                    }
                }
            }
        });
        LossyServices {
            addr,
            lost,
            requests,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for LossyServices {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How it would fail: a call ending `Timeout` (the resends or the kept replies did not cover
/// the loss), a call run twice by the server (a resend run again), a call answered twice to
/// its handle (counted `late`), or the counts not balancing.
#[test]
fn calls_through_a_path_losing_a_fifth_each_way_end_once_and_run_at_most_once() {
    bounded("calls through a lossy path", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let runs = Arc::new(Mutex::new(HashMap::new()));
        let mut bus = Bus::builder();
        let r = Arc::clone(&runs);
        bus.actor("counter", move |setup: &mut Setup<'_>| Counter {
            replies: setup.replies(&service()),
            runs: Arc::clone(&r),
            held: Vec::with_capacity(8),
        })
        .serves(&service());
        let bridge = Bridge::bind(loopback())
            .expect("bind")
            .name("lossy-server")
            .export_service(&service());
        let server_addr = bridge.local_addr();
        bus.add(bridge);
        let server = bus.start().expect("server starts");
        let relay = LossyServices::start(server_addr, 200);

        let mut bus = Bus::builder();
        bus.add(
            Bridge::bind(loopback())
                .expect("bind")
                .name("lossy-caller")
                .import_service(&service(), relay.addr),
        );
        let keys: Vec<_> = (0..4)
            .map(|i| bus.caller(&service(), &format!("client{i}")))
            .collect();
        let mut caller = bus.start().expect("caller starts");
        let threads: Vec<_> = (keys.into_iter().enumerate())
            .map(|(i, key)| {
                let mut client = caller.caller(key).expect("caller");
                std::thread::spawn(move || {
                    let mut ends = Vec::with_capacity(50);
                    for k in 0..50u64 {
                        let n = i as u64 * 1000 + k;
                        ends.push((n, client.call(Ask(n), Duration::from_secs(4))));
                    }
                    drop(client);
                    ends
                })
            })
            .collect();
        let ends: Vec<_> = (threads.into_iter())
            .flat_map(|t| t.join().expect("a client's thread"))
            .collect();
        // Resends still on their way land on answered calls, not new ones.
        std::thread::sleep(Duration::from_millis(300));
        caller.stop();
        let report = caller.join().expect("caller joins");
        server.stop();
        let served = server.join().expect("server joins");
        let lost = relay.lost.load(Ordering::Relaxed);
        drop(relay);

        // A call whose reply was lost ends with its reply from a resend, unless the server
        // forgot it first (64 answered calls kept per caller: the other clients' calls
        // within the resend backoff push it out, `service.evicted`): then its resends are
        // dropped, never run again, and it times out (`ServiceConfig::cached_per_source`).
        let runs = runs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut timeouts = 0;
        for (n, r) in &ends {
            match r {
                Ok(Echo(m)) => assert_eq!(m, n, "call {n} got another call's reply"),
                Err(llbus::CallError::Timeout) => timeouts += 1,
                other => panic!("call {n} ended {other:?} ({lost} datagrams lost)"),
            }
        }
        let twice: Vec<_> = runs.iter().filter(|(_, &k)| k != 1).collect();
        assert!(twice.is_empty(), "calls run more than once: {twice:?}");
        let evicted = metric(&served, "lossy-server", "service.evicted");
        assert!(
            timeouts == 0 || evicted > 0,
            "{timeouts} calls timed out with none forgotten ({lost} datagrams lost)"
        );
        assert!(
            timeouts <= 20,
            "{timeouts} of 200 calls timed out ({evicted} forgotten)"
        );
        assert!(lost >= 20, "the relay lost only {lost} datagrams");
        tests::assert_balanced(&report);
        for row in report
            .services
            .iter()
            .filter(|c| c.caller.starts_with("client"))
        {
            assert_eq!((row.calls, row.late), (50, 0), "{row:?}");
        }
        assert_eq!(metric(&report, "lossy-caller", "service.calls"), 200);
        assert!(metric(&report, "lossy-caller", "service.resent") > 0);
        assert_eq!(metric(&served, "lossy-server", "service.requests"), 200);
        assert_eq!(metric(&served, "lossy-server", "service.replies"), 200);
    });
}

/// How it would fail: the caller's bridge resending a call after its local caller stopped
/// waiting, as long as `call_timeout` (5 s) allows: the requests counted on the wire by the
/// relay (not by the bridge's own figures) go on growing past the caller's 150 ms.
#[test]
fn a_callers_bridge_stops_sending_a_call_when_its_caller_stops_waiting() {
    bounded("resends past the caller's deadline", 60, || {
        let _cpu = crate::fixtures::cpu_shared();
        let mut bus = Bus::builder();
        bus.actor("counter", |setup: &mut Setup<'_>| Counter {
            replies: setup.replies(&service()),
            runs: Arc::new(Mutex::new(HashMap::new())),
            held: Vec::with_capacity(8),
        })
        .serves(&service());
        let bridge = Bridge::bind(loopback())
            .expect("bind")
            .name("resend-server")
            .export_service(&service());
        let server_addr = bridge.local_addr();
        bus.add(bridge);
        let server = bus.start().expect("server starts");
        // Every request is lost: the caller's bridge would resend until its deadline.
        let relay = LossyServices::start(server_addr, 1000);
        let mut bus = Bus::builder();
        bus.add(
            Bridge::bind(loopback())
                .expect("bind")
                .name("resend-caller")
                .import_service(&service(), relay.addr),
        );
        let key = bus.caller(&service(), "client");
        let mut caller = bus.start().expect("caller starts");
        let mut client = caller.caller(key).expect("caller");
        let started = std::time::Instant::now();
        assert_eq!(
            client.call(Ask(HOLD), Duration::from_millis(150)),
            Err(llbus::CallError::Timeout)
        );
        let at_deadline = relay.requests.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1500));
        let after = relay.requests.load(Ordering::Relaxed);
        let took = started.elapsed();
        drop(client);
        caller.stop();
        caller.join().expect("caller joins");
        server.stop();
        server.join().expect("server joins");
        drop(relay);
        // Sent at 0, 10, 30, 70 ms (and 150 ms at the edge): five at most, all by the
        // deadline; a bridge bound by call_timeout would have sent about eight more by now.
        assert!(
            (1..=5).contains(&at_deadline),
            "{at_deadline} requests by the deadline"
        );
        assert!(
            after <= at_deadline + 1,
            "{} requests sent in the {took:?} after the caller stopped waiting",
            after - at_deadline
        );
    });
}
