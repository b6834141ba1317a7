//! Services through zenoh: a service exported as a queryable answers a JSON client and a
//! second llbus bus that imports it; every ending of a call crosses (reply, the server's
//! error, a server that panics, no server, a timeout) and hostile queries are answered with an
//! error and counted, the figures balancing (`queries == answered + failed`): not JSON, nested
//! 100,000 deep, 8 MiB, of an unknown encoding, empty, out of range, short bincode (each
//! `malformed`, the export answering sound queries after them); a server gone for good
//! (`Supervision::Stop` after a panic) is answered `stopped` at once.

use std::time::{Duration, Instant};

use llbus::{Actor, Bus, CallError, Context, Message, Replies, Request, Service, Setup};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{
    Attachment, Gateway, GatewayError, PayloadEncoding, ServiceExport, ServiceImport,
    BINCODE_ENCODING,
};
use serde::{Deserialize, Serialize};

use crate::fixtures::*;

/// A question: `n == DROP` drops the call, `n == PANIC` panics holding it, `n == HOLD` never
/// answers; any other `n` is answered `n * 2`.
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.double")]
pub struct Ask {
    pub n: u64,
}

/// The answer.
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.doubled")]
pub struct Doubled {
    pub n: u64,
}

const DROP: u64 = 1_000_001;
const PANIC: u64 = 1_000_002;
const HOLD: u64 = 1_000_003;

fn service() -> Service<Ask, Doubled> {
    Service::named("test.double").expect("a valid name")
}

struct Doubler {
    replies: Replies<Doubled>,
    held: Vec<llbus::Responder<Doubled>>,
}

impl Actor for Doubler {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        match ask.n {
            DROP => drop(responder),
            PANIC => panic!("asked to panic, holding the call"),
            HOLD => self.held.push(responder),
            n => ctx.reply(responder, Ok(Doubled { n: n * 2 })),
        }
    }
}

/// A bus serving the doubler, exported on zenoh with `export`, and its gateway on `config`.
fn server(config: zenoh::Config, export: ServiceExport) -> (llbus::RunningBus, Gateway) {
    let mut bus = Bus::builder();
    bus.actor("doubler", |setup: &mut Setup<'_>| Doubler {
        replies: setup.replies(&service()),
        held: Vec::new(),
    })
    .serves(&service())
    .supervision(llbus::Supervision::Restart(llbus::RestartLimit {
        max_restarts: 10,
        within: Duration::from_secs(60),
        delay: Duration::from_millis(1),
    }));
    let mut gateway = Gateway::builder();
    gateway.export_service_on(&mut bus, &service(), export);
    let mut running = bus.start().expect("the server's bus starts");
    let gateway = gateway
        .start(&mut running, config)
        .expect("the server's gateway starts");
    (running, gateway)
}

/// The first reply to a `get` on `key` with `payload` (and `attachment`), within the limit.
fn get(
    session: &zenoh::Session,
    key: &str,
    payload: Vec<u8>,
    encoding: zenoh::bytes::Encoding,
    attachment: Option<Vec<u8>>,
) -> Result<zenoh::sample::Sample, serde_json::Value> {
    let mut builder = session
        .get(key)
        .payload(payload)
        .encoding(encoding)
        .timeout(LIMIT);
    if let Some(a) = attachment {
        builder = builder.attachment(a);
    }
    let replies = builder.wait().expect("a query");
    let reply = replies
        .recv_timeout(LIMIT)
        .expect("the query is open")
        .expect("a reply within the limit");
    reply.into_result().map_err(|e| {
        serde_json::from_slice(&e.payload().to_bytes()).expect("an error reply's payload is JSON")
    })
}

/// Waits until the queryable on `key` answers (zenoh routes a query only once its peer knows
/// of the queryable).
fn wait_queryable(session: &zenoh::Session, key: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let replies = session
            .get(format!("{key}/@schema"))
            .timeout(Duration::from_millis(500))
            .wait()
            .expect("a query");
        if replies
            .recv_timeout(Duration::from_secs(1))
            .ok()
            .flatten()
            .is_some()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the queryable {key} never answered"
        );
    }
}

#[test]
fn a_json_client_calls_an_exported_service_and_reads_its_schemas() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let (running, gateway) = server(a, ServiceExport::new());
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");

    let json = zenoh::bytes::Encoding::APPLICATION_JSON;
    let reply = get(
        &client,
        "llbus/test.double",
        br#"{"n": 21}"#.to_vec(),
        json.clone(),
        None,
    )
    .expect("the reply, not an error");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&reply.payload().to_bytes()).expect("JSON"),
        serde_json::json!({"n": 42})
    );
    assert!(
        reply.encoding().to_string().starts_with("application/json"),
        "a JSON query is answered in JSON: {}",
        reply.encoding()
    );

    // The server's endings cross as error replies with a code.
    let dropped = get(
        &client,
        "llbus/test.double",
        br#"{"n": 1000001}"#.to_vec(),
        json.clone(),
        None,
    )
    .expect_err("a dropped call is an error reply");
    assert_eq!(dropped["error"], "dropped", "{dropped}");
    let panicked = get(
        &client,
        "llbus/test.double",
        br#"{"n": 1000002}"#.to_vec(),
        json.clone(),
        None,
    )
    .expect_err("a server that panics is an error reply");
    assert_eq!(panicked["error"], "panicked", "{panicked}");
    // A request that is not the service's request is refused, not a panic or a hang.
    let malformed = get(
        &client,
        "llbus/test.double",
        br#"{"x": "y"}"#.to_vec(),
        json,
        None,
    )
    .expect_err("a malformed request is an error reply");
    assert_eq!(malformed["error"], "malformed", "{malformed}");

    let schema = get(
        &client,
        "llbus/test.double/@schema",
        Vec::new(),
        zenoh::bytes::Encoding::APPLICATION_JSON,
        None,
    )
    .expect("the schemas");
    let schema: serde_json::Value =
        serde_json::from_slice(&schema.payload().to_bytes()).expect("the schemas are JSON");
    assert_eq!(
        schema["request"]["properties"]["n"]["type"], "integer",
        "{schema}"
    );
    assert_eq!(
        schema["reply"]["properties"]["n"]["type"], "integer",
        "{schema}"
    );

    let counts = gateway.counts();
    assert_eq!(
        (counts.queries, counts.answered, counts.failed),
        (4, 1, 3),
        "{counts:?}"
    );
    drop(client);
    running.stop();
    running.join().expect("the server joins");
    gateway.close();
}

#[test]
fn a_bincode_query_of_another_fingerprint_or_without_attachment_is_refused() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let (running, gateway) = server(a, ServiceExport::new());
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");
    let bincode = zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema("test.double");
    let body = bincode_of(&Ask { n: 5 });
    let id = service().name().id();
    let attach = |fingerprint: u64| {
        Attachment {
            topic_id: id,
            fingerprint,
            stream: 0,
            sequence: 0,
            sent_ns: 0,
        }
        .encode()
        .to_vec()
    };
    let right = Request::<Ask>::FINGERPRINT;
    let ok = get(
        &client,
        "llbus/test.double",
        body.clone(),
        bincode.clone(),
        Some(attach(right)),
    )
    .expect("a well-formed bincode query is answered");
    let reply = Attachment::decode(&ok.attachment().expect("an attachment").to_bytes())
        .expect("the gateway's attachment");
    assert_eq!(reply.fingerprint, llbus::Reply::<Doubled>::FINGERPRINT);
    assert_eq!(
        llbus::decode_bounded::<Doubled>(&ok.payload().to_bytes()).map(|(d, _)| d),
        Ok(Doubled { n: 10 })
    );
    let other = get(
        &client,
        "llbus/test.double",
        body.clone(),
        bincode.clone(),
        Some(attach(right ^ 1)),
    )
    .expect_err("another fingerprint is refused");
    assert_eq!(other["error"], "refused", "{other}");
    let bare = get(&client, "llbus/test.double", body, bincode, None)
        .expect_err("no attachment is refused");
    assert_eq!(bare["error"], "malformed", "{bare}");
    let counts = gateway.counts();
    assert_eq!(
        (counts.queries, counts.answered, counts.failed),
        (3, 1, 2),
        "{counts:?}"
    );
    assert!(
        gateway.errors().iter().any(|e| e.contains("fingerprint")),
        "the refusal is reported: {:?}",
        gateway.errors()
    );
    drop(client);
    running.stop();
    running.join().expect("the server joins");
    gateway.close();
}

#[test]
fn a_call_the_server_never_answers_ends_with_a_timeout_reply() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let (running, gateway) = server(a, ServiceExport::new().timeout(Duration::from_millis(200)));
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");
    let json = zenoh::bytes::Encoding::APPLICATION_JSON;
    let held = get(
        &client,
        "llbus/test.double",
        br#"{"n": 1000003}"#.to_vec(),
        json,
        None,
    )
    .expect_err("an unanswered call is an error reply");
    assert_eq!(held["error"], "timeout", "{held}");
    drop(client);
    running.stop();
    running.join().expect("the server joins");
    let counts = gateway.close();
    assert_eq!((counts.queries, counts.failed), (1, 1), "{counts:?}");
}

/// A bus whose actors call the service through an imported one, on `config`.
fn client_bus(
    config: zenoh::Config,
    import: ServiceImport,
) -> (llbus::RunningBus, llbus::Caller<Ask, Doubled>, Gateway) {
    let mut bus = Bus::builder();
    let mut gateway = Gateway::builder();
    gateway.import_service_on(&mut bus, &service(), import);
    let key = bus.caller(&service(), "app");
    let mut running = bus.start().expect("the client's bus starts");
    let caller = running.caller(key).expect("the caller");
    let gateway = gateway
        .start(&mut running, config)
        .expect("the client's gateway starts");
    (running, caller, gateway)
}

#[test]
fn a_bus_calls_another_bus_through_zenoh_and_every_ending_crosses() {
    let _zenoh = zenoh_threads(false);
    for encoding in [PayloadEncoding::Bincode, PayloadEncoding::Json] {
        let (a, b) = peers();
        let (server_bus, server_gateway) = server(a, ServiceExport::new());
        let (client, mut caller, client_gateway) =
            client_bus(b, ServiceImport::new().encoding(encoding).timeout(LIMIT));
        wait_queryable(client_gateway.session(), "llbus/test.double");
        for n in 0..20 {
            assert_eq!(
                caller.call(Ask { n }, LIMIT),
                Ok(Doubled { n: 2 * n }),
                "{encoding:?}"
            );
        }
        assert_eq!(caller.call(Ask { n: DROP }, LIMIT), Err(CallError::Dropped));
        assert_eq!(
            caller.call(Ask { n: PANIC }, LIMIT),
            Err(CallError::ServerPanicked)
        );
        assert_eq!(
            caller.call(Ask { n: 3 }, LIMIT),
            Ok(Doubled { n: 6 }),
            "after a restart"
        );
        drop(caller);
        client.stop();
        let report = client.join().expect("the client joins");
        let actor = report
            .actor("zenoh-call:test.double")
            .expect("the import's actor");
        assert_eq!(actor.metric("zenoh.calls"), Some(23), "{report}");
        assert_eq!(actor.metric("zenoh.answered"), Some(21), "{report}");
        assert_eq!(actor.metric("zenoh.failed"), Some(2), "{report}");
        client_gateway.close();
        server_bus.stop();
        server_bus.join().expect("the server joins");
        let counts = server_gateway.close();
        assert_eq!(
            (counts.queries, counts.answered, counts.failed),
            (23, 21, 2),
            "{counts:?}"
        );
    }
}

#[test]
fn an_imported_service_with_no_queryable_answers_stopped_before_its_timeout() {
    let _zenoh = zenoh_threads(false);
    let (a, _) = peers();
    let (client, mut caller, gateway) =
        client_bus(a, ServiceImport::new().timeout(Duration::from_secs(10)));
    let started = Instant::now();
    assert_eq!(caller.call(Ask { n: 1 }, LIMIT), Err(CallError::Stopped));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no queryable is known at once, not after the timeout ({:?})",
        started.elapsed()
    );
    drop(caller);
    client.stop();
    client.join().expect("the client joins");
    gateway.close();
}

#[test]
fn an_imported_service_whose_server_is_silent_times_out() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let (server_bus, server_gateway) = server(a, ServiceExport::new().timeout(LIMIT));
    let (client, mut caller, client_gateway) =
        client_bus(b, ServiceImport::new().timeout(Duration::from_millis(300)));
    wait_queryable(client_gateway.session(), "llbus/test.double");
    assert_eq!(caller.call(Ask { n: HOLD }, LIMIT), Err(CallError::Timeout));
    drop(caller);
    client.stop();
    client.join().expect("the client joins");
    client_gateway.close();
    server_bus.stop();
    server_bus.join().expect("the server joins");
    server_gateway.close();
}

#[test]
fn a_service_both_exported_and_imported_on_one_bus_is_refused() {
    let _zenoh = zenoh_threads(false);
    let (a, _) = peers();
    let mut bus = Bus::builder();
    let mut gateway = Gateway::builder();
    gateway.import_service_on(&mut bus, &service(), ServiceImport::new());
    gateway.export_service_on(&mut bus, &service(), ServiceExport::new());
    let mut running = bus.start().expect("the bus starts");
    match gateway.start(&mut running, a) {
        Err(GatewayError::Echo(name)) => assert_eq!(name, "test.double"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a service that would call itself through zenoh was started"),
    }
    running.stop();
    running.join().expect("the bus joins");
}

#[test]
fn queries_past_the_export_queue_are_answered_busy_at_once() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let export = ServiceExport::new()
        .queue(1)
        .timeout(Duration::from_secs(2));
    let (running, gateway) = server(a, export);
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");
    let held = || {
        client
            .get("llbus/test.double")
            .payload(br#"{"n": 1000003}"#.to_vec())
            .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
            .timeout(LIMIT)
            .wait()
            .expect("a query")
    };
    // The first is taken by the export's thread (and held by the server), the second waits in
    // the queue of one, the third finds it full.
    let first = held();
    std::thread::sleep(Duration::from_millis(300));
    let second = held();
    std::thread::sleep(Duration::from_millis(100));
    let third = held();
    let started = Instant::now();
    let busy = third
        .recv_timeout(LIMIT)
        .expect("open")
        .expect("a reply")
        .into_result()
        .expect_err("an error reply");
    let busy: serde_json::Value = serde_json::from_slice(&busy.payload().to_bytes()).expect("JSON");
    assert_eq!(busy["error"], "busy", "{busy}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "busy is answered at once, not after the held calls ({:?})",
        started.elapsed()
    );
    for (name, replies) in [("first", first), ("second", second)] {
        let error = replies
            .recv_timeout(LIMIT)
            .expect("open")
            .expect("a reply")
            .into_result()
            .expect_err("the held call's error reply");
        let error: serde_json::Value =
            serde_json::from_slice(&error.payload().to_bytes()).expect("JSON");
        assert_eq!(error["error"], "timeout", "{name}: {error}");
    }
    let counts = gateway.counts();
    assert_eq!(
        (counts.queries, counts.answered, counts.failed),
        (3, 0, 3),
        "{counts:?}"
    );
    drop(client);
    running.stop();
    running.join().expect("the server joins");
    gateway.close();
}

/// The reply to a `get` on the double service with `payload` in `encoding`: `Ok(n)` for a
/// reply (its JSON `n`), `Err(code)` for an error reply, within the limit.
fn code_of(
    client: &zenoh::Session,
    payload: Vec<u8>,
    encoding: zenoh::bytes::Encoding,
    attachment: Option<Vec<u8>>,
) -> Result<u64, String> {
    match get(client, "llbus/test.double", payload, encoding, attachment) {
        Ok(sample) => {
            let bytes = sample.payload().to_bytes();
            let reply = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["n"].as_u64())
                .or_else(|| {
                    llbus::decode_bounded::<Doubled>(&bytes)
                        .ok()
                        .map(|(d, _)| d.n)
                });
            Ok(reply.expect("a reply of the service's type"))
        }
        Err(error) => {
            let code = error["error"].as_str().expect("a code").to_owned();
            assert!(
                llbus_zenoh::ERROR_CODES.contains(&code.as_str()),
                "an undocumented code: {error}"
            );
            assert!(error["message"].is_string(), "{error}");
            Err(code)
        }
    }
}

/// How it would fail: a hostile query (not JSON, nested past any sane depth, 8 MiB, of an
/// unknown encoding, empty, of numbers the type cannot hold, bincode claiming a huge length)
/// crashing the export's thread, hanging (no reply within the limit), being answered as if it
/// were sound, or answered with an undocumented code; the export no longer answering a sound
/// query after them; the figures not balancing.
#[test]
fn hostile_queries_are_answered_malformed_and_the_export_keeps_answering() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let (running, gateway) = server(a, ServiceExport::new());
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");
    let json = zenoh::bytes::Encoding::APPLICATION_JSON;
    let bincode = zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema("test.double");
    let attach = Attachment {
        topic_id: service().name().id(),
        fingerprint: Request::<Ask>::FINGERPRINT,
        stream: 0,
        sequence: 0,
        sent_ns: 0,
    }
    .encode()
    .to_vec();
    let huge = {
        let mut s = br#"{"n": "#.to_vec();
        s.extend(std::iter::repeat_n(b'9', 8 << 20));
        s.push(b'}');
        s
    };
    #[allow(clippy::type_complexity)]
    let hostile: Vec<(&str, Vec<u8>, zenoh::bytes::Encoding, Option<Vec<u8>>)> = vec![
        ("not JSON", br#"{"n": "#.to_vec(), json.clone(), None),
        (
            "nested",
            "[".repeat(100_000).into_bytes(),
            json.clone(),
            None,
        ),
        ("8 MiB of digits", huge, json.clone(), None),
        ("empty", Vec::new(), json.clone(), None),
        ("negative", br#"{"n": -1}"#.to_vec(), json.clone(), None),
        (
            "past u64",
            br#"{"n": 18446744073709551616}"#.to_vec(),
            json.clone(),
            None,
        ),
        (
            "unknown encoding",
            br#"{"n": 1}"#.to_vec(),
            zenoh::bytes::Encoding::TEXT_PLAIN,
            None,
        ),
        // A bincode body of 3 bytes (a u64 takes 8).
        (
            "short bincode",
            vec![1, 2, 3],
            bincode.clone(),
            Some(attach.clone()),
        ),
    ];
    let count = hostile.len() as u64;
    for (what, payload, encoding, attachment) in hostile {
        let started = Instant::now();
        let end = code_of(&client, payload, encoding, attachment);
        assert_eq!(end, Err("malformed".to_owned()), "{what}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: answered after {:?}",
            started.elapsed()
        );
    }
    // Still answering, in both encodings.
    assert_eq!(code_of(&client, br#"{"n": 4}"#.to_vec(), json, None), Ok(8));
    assert_eq!(
        code_of(&client, bincode_of(&Ask { n: 5 }), bincode, Some(attach)),
        Ok(10)
    );
    let counts = gateway.counts();
    assert_eq!(
        (counts.queries, counts.answered, counts.failed),
        (count + 2, 2, count),
        "{counts:?}"
    );
    drop(client);
    running.stop();
    running.join().expect("the server joins: nothing panicked");
    gateway.close();
}

/// How it would fail: after the server panics under `Supervision::Stop` (gone for good), a
/// query hanging until the export's timeout or the client's, or answered with something other
/// than `stopped`.
#[test]
fn a_query_of_a_server_gone_for_good_is_answered_stopped_at_once() {
    let _zenoh = zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    bus.actor("doubler", |setup: &mut Setup<'_>| Doubler {
        replies: setup.replies(&service()),
        held: Vec::new(),
    })
    .serves(&service())
    .supervision(llbus::Supervision::Stop);
    let mut gateway = Gateway::builder();
    gateway.export_service_on(
        &mut bus,
        &service(),
        ServiceExport::new().timeout(Duration::from_secs(3)),
    );
    let mut running = bus.start().expect("the server's bus starts");
    let gateway = gateway
        .start(&mut running, a)
        .expect("the server's gateway starts");
    let client = zenoh::open(b).wait().expect("the client session opens");
    wait_queryable(&client, "llbus/test.double");
    let json = zenoh::bytes::Encoding::APPLICATION_JSON;
    assert_eq!(
        code_of(&client, br#"{"n": 2}"#.to_vec(), json.clone(), None),
        Ok(4)
    );
    assert_eq!(
        code_of(&client, br#"{"n": 1000002}"#.to_vec(), json.clone(), None),
        Err("panicked".to_owned())
    );
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(
            code_of(&client, br#"{"n": 3}"#.to_vec(), json.clone(), None),
            Err("stopped".to_owned())
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered after {:?}, not at once",
            started.elapsed()
        );
    }
    let counts = gateway.counts();
    assert_eq!(
        (counts.queries, counts.answered, counts.failed),
        (5, 1, 4),
        "{counts:?}"
    );
    drop(client);
    running.stop();
    let _ = running.join();
    gateway.close();
}
