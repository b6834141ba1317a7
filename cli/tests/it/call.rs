//! `llbus call` and `llbus topics` against a service a bridge of this process serves, the
//! command as a separate process: the reply printed as one line of JSON, fields in declaration
//! order; JSON that departs from the request's type refused before anything is sent, naming
//! where (exit 2); an unknown service and a server that is not there ended in words within the
//! timeout (exit 1); the service listed as one by `llbus topics`. Against hostile servers (an
//! endpoint of this process serving a service shape of its choosing and answering with bytes
//! of its choosing, a socket that answers garbage, one that never answers the call) and a
//! request nested 100,000 deep: the command ends in words within its timeout, never with a
//! panic or an overflowed stack.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Replies, Request, RunningBus, Service, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::cli::CountersDir;

use crate::llbus;

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
enum Side {
    Buy,
    Sell,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "call.quote")]
struct Ask {
    account: u32,
    qty: i64,
    side: Side,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
struct Verdict {
    approved: bool,
    account: u32,
    reason: Option<String>,
}

fn quote_service() -> Service<Ask, Verdict> {
    Service::of()
}

/// Approves what is under 100, for its account.
struct Desk {
    replies: Replies<Verdict>,
}

impl Actor for Desk {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        let approved = ask.qty.abs() < 100;
        let verdict = Verdict {
            approved,
            account: ask.account,
            reason: (!approved).then(|| format!("{:?} of {} is too many", ask.side, ask.qty)),
        };
        ctx.reply(responder, Ok(verdict));
    }
}

/// A bus that serves the quote service on a bridge that announces it; the bridge's address.
fn serve() -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind("127.0.0.1:0").expect("binds");
    let addr = bridge.local_addr();
    let mut b = Bus::builder();
    b.actor("desk", |s: &mut Setup<'_>| Desk {
        replies: s.replies(&quote_service()),
    })
    .serves(&quote_service());
    b.add(bridge.export_service(&quote_service()).announce());
    (b.start().expect("starts"), addr)
}

fn call(dir: &CountersDir, addr: &str, service: &str, request: &str) -> std::process::Output {
    llbus(
        dir,
        &[
            "call",
            "--publisher",
            addr,
            "--service",
            service,
            "--timeout-s",
            "2",
            request,
        ],
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_call_prints_its_reply_as_json_and_a_bad_request_names_its_field() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-reply");
    let addr = addr.to_string();
    let name = quote_service().name().to_string();

    let out = call(
        &dir,
        &addr,
        &name,
        r#"{"account": 7, "qty": 250, "side": "Sell"}"#,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout, "{\"approved\":false,\"account\":7,\"reason\":\"Sell of 250 is too many\"}\n",
        "{stderr}"
    );

    // --count: one line per call.
    let out = llbus(
        &dir,
        &[
            "call",
            "--publisher",
            &addr,
            "--service",
            &name,
            "--count",
            "3",
            r#"{"account": 1, "qty": 5, "side": "Buy"}"#,
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(
            value,
            serde_json::json!({"approved": true, "account": 1, "reason": null})
        );
    }

    // A field of the wrong type, a missing field, an unknown variant: refused, named.
    for (request, names) in [
        (r#"{"account": -1, "qty": 5, "side": "Buy"}"#, ".account"),
        (r#"{"account": 1, "side": "Buy"}"#, "qty"),
        (r#"{"account": 1, "qty": 5, "side": "Hold"}"#, "Hold"),
        (r#"{"account": 1, "#, "not JSON"),
    ] {
        let out = call(&dir, &addr, &name, request);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{request}: {stderr}");
        assert!(stderr.contains(names), "{request}: names {names}: {stderr}");
        assert!(out.stdout.is_empty(), "{request}");
    }
    bus.stop();
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_unknown_service_and_no_server_end_in_words_within_the_timeout() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-errors");
    let request = r#"{"account": 1, "qty": 5, "side": "Buy"}"#;

    let started = Instant::now();
    let out = call(&dir, &addr.to_string(), "call.nothing", request);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no service 'call.nothing'") && stderr.contains(&addr.to_string()),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at once"
    );
    bus.stop();

    // Nobody at the address: the fetch gives up at the timeout.
    let nowhere = tests::example_bins::free_udp_addr().to_string();
    let started = Instant::now();
    let out = call(&dir, &nowhere, quote_service().name().as_str(), request);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no answer from") && stderr.contains(&nowhere),
        "{stderr}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "within the timeout: {took:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn topics_lists_a_served_service_as_one() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-topics");
    let out = llbus(
        &dir,
        &[
            "topics",
            "--no-group",
            "--peer",
            &addr.to_string(),
            "--listen-ms",
            "1500",
            "--json",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let name = quote_service().name().to_string();
    let topics = value["topics"].as_array().expect("topics");
    let service = topics
        .iter()
        .find(|t| t["topic"] == name.as_str())
        .unwrap_or_else(|| panic!("the service is listed: {stdout}"));
    assert_eq!(service["service"], true, "{stdout}");
    let fingerprint = format!("{:#018x}", <Request<Ask> as Message>::FINGERPRINT);
    assert_eq!(service["fingerprints"][0], fingerprint.as_str(), "{stdout}");
    bus.stop();
}

/// A hostile server of service `name`: an endpoint on a loopback socket, driven by a thread of
/// its own, that serves the service shape `Shape::service(request, reply)` (so its
/// fingerprints are the ones a tool derives from it) and answers every call with `body` as
/// it is, whatever the shapes say (`None`: never answers). Stopped when dropped.
struct HostileServer {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The calls a [`HostileServer`] was asked, by key.
#[derive(Default)]
struct Asked(Vec<u64>);

impl llbus_net::Sink for Asked {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), llbus_net::DropReason> {
        Err(llbus_net::DropReason::UnknownTopic)
    }
    fn request(
        &mut self,
        _service: usize,
        key: u64,
        _budget_ms: u32,
        _body: &[u8],
    ) -> Result<(), llbus_net::CallStatus> {
        self.0.push(key);
        Ok(())
    }
}

impl HostileServer {
    fn start(
        name: &'static str,
        request: llbus::schema::Shape,
        reply: llbus::schema::Shape,
        body: Option<Vec<u8>>,
    ) -> HostileServer {
        use llbus_net::{
            BridgeConfig, EncodedShape, Endpoint, RecvBatch, SendBatch, ServiceSpec, SocketConfig,
            SocketWire, UdpEndpoint, DEFAULT_MAX_DATAGRAM,
        };
        use std::sync::atomic::Ordering;
        let mut socket = UdpEndpoint::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &SocketConfig::default(),
        )
        .expect("binds");
        let addr = socket.local_addr();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let spec = ServiceSpec {
            service: name.into(),
            topic_id: llbus::topic_id(name),
            request_fingerprint: llbus::request_fingerprint(request.fingerprint()),
            reply_fingerprint: llbus::reply_fingerprint(reply.fingerprint()),
            shape: Some(
                EncodedShape::new(&llbus::schema::Shape::service(request, reply))
                    .expect("encodable"),
            ),
            allow: None,
        };
        let thread = std::thread::spawn(move || {
            let mut endpoint = Endpoint::new(
                &BridgeConfig::default(),
                DEFAULT_MAX_DATAGRAM,
                llbus_net::new_session_id(),
                [7; 32],
                Vec::new(),
                Vec::new(),
            )
            .with_services(vec![spec], Vec::new());
            let (mut send, mut recv) = (SendBatch::new(16), RecvBatch::new(32, 65_536));
            let mut failed = None;
            let started = Instant::now();
            let mut asked = Asked::default();
            // Bounded: the test stops it; 60 s at most whatever happens.
            while !stopped.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
                let now = started.elapsed().as_nanos() as u64 + 1;
                let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                endpoint.on_timer(now, &mut wire, &mut asked);
                let n = socket.recv_batch(&mut recv).unwrap_or(0);
                for (datagram, from) in recv.iter() {
                    let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                    endpoint.handle(datagram, from, now, &mut wire, &mut asked);
                }
                for key in asked.0.drain(..) {
                    if let Some(body) = &body {
                        let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                        endpoint.answer(key, Ok(&tests::bridges::Raw(body)), now, &mut wire);
                    }
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        HostileServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How it would fail: the command panicking (exit 101), overflowing its stack (a signal),
/// printing something that is not the reply, hanging past its timeout, or exiting 0.
#[test]
#[cfg_attr(miri, ignore)]
fn a_hostile_servers_replies_end_the_call_in_words_without_a_panic() {
    use llbus::schema::{Fields, Primitive, Shape};
    let dir = CountersDir::new("call-hostile");
    let u64_shape = Shape::Primitive(Primitive::U64);
    // The deepest shape a schema may nest (64 levels), request and reply.
    let mut deep = u64_shape.clone();
    for _ in 0..62 {
        deep = Shape::Option(Box::new(deep));
    }
    let cases: Vec<(&'static str, Shape, Vec<u8>, &str, &str)> = vec![
        // A reply whose bytes do not decode as its shape (a u64 from 3 bytes).
        ("hostile.short", u64_shape.clone(), vec![1, 2, 3], "0", ""),
        // A reply whose shape makes 2^40 values of no bytes at all.
        (
            "hostile.huge",
            tests::bridges::long_names(1 << 40, 32),
            Vec::new(),
            "0",
            "",
        ),
        // A struct whose string field claims 2^60 bytes.
        (
            "hostile.string",
            Shape::structure("S", Fields::named([("s", Shape::Str)])),
            (1u64 << 60).to_le_bytes().to_vec(),
            "0",
            "",
        ),
        // The deepest shape, as request and reply, with a sound reply: it is printed.
        (
            "hostile.deep",
            deep.clone(),
            vec![1; 62].into_iter().chain(7u64.to_le_bytes()).collect(),
            "deep",
            "7",
        ),
    ];
    for (name, reply, body, request, printed) in cases {
        let request_shape = if request == "deep" {
            deep.clone()
        } else {
            u64_shape.clone()
        };
        let request = if request == "deep" { "5" } else { request };
        let server = HostileServer::start(name, request_shape, reply, Some(body));
        let started = Instant::now();
        let out = call(&dir, &server.addr.to_string(), name, request);
        let took = started.elapsed();
        drop(server);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(took < Duration::from_secs(8), "{name}: took {took:?}");
        if printed.is_empty() {
            assert_eq!(out.status.code(), Some(1), "{name}: {stdout}\n{stderr}");
            assert!(stdout.is_empty(), "{name}: printed {stdout}");
            assert!(
                stderr.contains("does not fit") && stderr.contains(name),
                "{name}: {stderr}"
            );
        } else {
            assert_eq!(out.status.code(), Some(0), "{name}: {stdout}\n{stderr}");
            assert_eq!(stdout.trim(), printed, "{name}: {stderr}");
        }
    }
}

/// How it would fail: the command panicking or hanging on datagrams that are not the
/// protocol's (garbage, a header that lies about its length), instead of giving up at its
/// timeout with the reason in words.
#[test]
#[cfg_attr(miri, ignore)]
fn a_server_that_sends_garbage_is_given_up_on_at_the_timeout() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let addr = socket.local_addr().expect("addr");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let garbage = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut answered = 0u64;
        let started = Instant::now();
        while !stopped.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            answered += 1;
            // The datagram back with its kind and lengths scrambled, then bytes of every value.
            let mut back = buf[..n].to_vec();
            for (i, b) in back.iter_mut().enumerate().skip(4) {
                *b = b.wrapping_mul(31).wrapping_add(i as u8);
            }
            let _ = socket.send_to(&back, from);
            let _ = socket.send_to(&(0..=255u8).collect::<Vec<_>>(), from);
            let mut lying = buf[..n.min(48)].to_vec();
            if lying.len() >= 8 {
                lying[6] = 0xff;
                lying[7] = 0xff;
            }
            let _ = socket.send_to(&lying, from);
        }
        answered
    });
    let dir = CountersDir::new("call-garbage");
    let started = Instant::now();
    let out = call(&dir, &addr.to_string(), "hostile.garbage", "1");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let answered = garbage.join().expect("the garbage thread");
    let stderr = text(&out.stderr);
    assert!(answered > 0, "the command sent nothing");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no answer from"), "{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

/// How it would fail: a request nested past any sane depth overflowing the command's stack
/// or hanging it (it must be refused as JSON, exit 2, before anything is sent); a server that
/// never answers the call holding it past its timeout, or the end not said in words.
#[test]
#[cfg_attr(miri, ignore)]
fn a_deeply_nested_request_is_refused_and_a_silent_server_times_out_in_words() {
    use llbus::schema::{Primitive, Shape};
    let dir = CountersDir::new("call-silent");
    let u64_shape = Shape::Primitive(Primitive::U64);
    let server = HostileServer::start("hostile.silent", u64_shape.clone(), u64_shape, None);
    let addr = server.addr.to_string();
    for (request, names) in [
        ("[".repeat(100_000), "not JSON"),
        (
            format!("{}1{}", "[".repeat(100), "]".repeat(100)),
            "hostile.silent",
        ),
    ] {
        let out = call(&dir, &addr, "hostile.silent", &request);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(names), "names {names}: {stderr}");
    }
    let started = Instant::now();
    let out = call(&dir, &addr, "hostile.silent", "5");
    let took = started.elapsed();
    drop(server);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no reply within"), "{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
}
