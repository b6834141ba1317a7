//! Schema fetching over the simulated network: a publisher that exports a topic with a shape
//! of many pages, a requester that fetches it over a link that drops and delays datagrams,
//! and adversaries that forge replies under the publisher's address and requests under a
//! victim's.
//!
//! What must hold: the shape arrives whole and checked, with or without a pre-shared key,
//! whatever the link drops; no datagram the publisher sends in answer is larger than the one
//! it answers, or goes anywhere but to its source; a reply nobody asked for is dropped and
//! counted, never accepted; a fetch that cannot succeed says why.

use std::net::SocketAddr;

use llbus::schema::{Fields, Primitive, Shape};

use super::world::{ip, Faults, Got, Outbox, World, MAX, MS};
use crate::{
    BatchEncoder, BridgeConfig, DropReason, EncodedShape, Endpoint, Event, ExportSpec, RateLimit,
    SchemaFailure, SchemaReply, SchemaRequest, SCHEMA_ATTEMPTS, SCHEMA_RETRY_NS,
};

const TOPIC: u64 = 0x7272;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def2;
const REQ_SESSION: u64 = 0x0fed_cba9_8765_4323;

/// The hosts.
const PUBLISHER: usize = 0;
const REQUESTER: usize = 1;

fn pub_addr() -> SocketAddr {
    ip(1, 7300)
}

fn req_addr() -> SocketAddr {
    ip(1, 7301)
}

/// A loopback host that asked for nothing: what a forged request's answer would flood.
fn victim_addr() -> SocketAddr {
    ip(3, 7400)
}

/// A struct of `n` fields with long names: an encoding of several pages for large `n`.
fn wide(name: &str, n: usize) -> Shape {
    let names: Vec<String> = (0..n)
        .map(|i| format!("field_with_a_long_name_{i}"))
        .collect();
    let fields = names
        .iter()
        .map(|f| (f.as_str(), Shape::Primitive(Primitive::U32)));
    Shape::structure(name, Fields::named(fields))
}

fn bridge_config(psk: Option<[u8; 32]>) -> BridgeConfig {
    BridgeConfig {
        psk,
        rate_limit: RateLimit {
            per_second: 20,
            burst: 40,
        },
        ..BridgeConfig::default()
    }
}

fn publisher(config: &BridgeConfig, shape: Option<&Shape>, fingerprint: u64) -> Endpoint {
    let export = ExportSpec {
        topic: "wide".into(),
        topic_id: TOPIC,
        fingerprint,
        allow: None,
        reliable: false,
        late_join: 0,
        shape: shape.map(|s| EncodedShape::new(s).expect("encodable")),
        group: None,
    };
    Endpoint::new(config, MAX, PUB_SESSION, [8; 32], vec![export], Vec::new()).with_wall_clock(|| 0)
}

/// The anti-amplification rule: whatever the publisher answers a datagram from `src` goes to
/// `src` alone, in one datagram no larger than the one it answers.
fn check_answers(src: SocketAddr, len: usize, answers: &[(SocketAddr, SocketAddr, Vec<u8>)]) {
    assert!(
        answers.len() <= 1,
        "{} datagrams answered one",
        answers.len()
    );
    for (_, to, d) in answers {
        assert_eq!(*to, src, "an answer to someone else");
        assert!(d.len() <= len, "{} bytes answered {len}", d.len());
    }
}

/// Hands `datagram` from `src` to the publisher, checks its answers and returns them.
fn at_publisher(publ: &mut Endpoint, datagram: &[u8], src: SocketAddr, now: u64) -> Outbox {
    let mut out = Outbox::new();
    let mut got = Got::default();
    publ.handle(datagram, src, now, &mut out, &mut got);
    assert_eq!(got.len(), 0, "a schema exchange delivered a message");
    check_answers(src, datagram.len(), out.sent());
    out
}

/// A publisher and a requester joined by a link that loses `loss_pct` percent of datagrams
/// and delays the rest by 1 to 3 ms (so reorders them); every answer the publisher sends is
/// checked, and the requester answers nothing.
fn world(publisher: Endpoint, requester_config: &BridgeConfig, seed: u64, loss_pct: u64) -> World {
    let requester = Endpoint::new(
        requester_config,
        MAX,
        REQ_SESSION,
        [9; 32],
        Vec::new(),
        Vec::new(),
    );
    let mut w = World::new(seed);
    w.faults = Faults {
        loss: loss_pct * 10,
        min_delay: 1,
        max_delay: 3,
        ..Faults::default()
    };
    w.add(pub_addr(), publisher);
    w.add(req_addr(), requester);
    w.check = Some(Box::new(|host, d, answers| match host {
        PUBLISHER => check_answers(d.src, d.bytes.len(), answers),
        _ => assert!(answers.is_empty(), "the requester answered a reply"),
    }));
    w
}

/// Fetches topic `topic`'s schema; the event that ends the fetch, and when (ms).
fn fetch(w: &mut World, topic: u64, mut forge: impl FnMut(&mut World, u64)) -> (Event, u64) {
    assert!(w.ep(REQUESTER).request_schema(topic, pub_addr()));
    let limit = u64::from(SCHEMA_ATTEMPTS + 2) * SCHEMA_RETRY_NS / MS * 64;
    for now_ms in 1..limit {
        forge(w, now_ms);
        w.step();
        for h in &w.hosts {
            assert!(h.got.0.is_empty(), "a schema exchange delivered a message");
        }
        let events = &mut w.hosts[REQUESTER].events;
        if let Some(e) = events.pop() {
            assert!(events.is_empty(), "more than one end: {events:?}");
            return (e, now_ms);
        }
    }
    panic!("the fetch never ended");
}

fn received(event: Event) -> (u64, Shape) {
    match event {
        Event::SchemaReceived {
            topic_id,
            publisher,
            fingerprint,
            shape,
        } => {
            assert_eq!((topic_id, publisher), (TOPIC, pub_addr()));
            (fingerprint, shape)
        }
        other => panic!("the fetch failed: {other:?}"),
    }
}

fn failed(event: Event) -> SchemaFailure {
    match event {
        Event::SchemaFailed { reason, .. } => reason,
        other => panic!("the fetch did not fail: {other:?}"),
    }
}

#[test]
fn a_schema_of_many_pages_arrives_whole_over_a_lossy_link() {
    let shape = wide("Wide", 200);
    let len = shape.to_bytes().expect("encodable").len();
    assert!(len > 5 * MAX, "{len} bytes: too few pages to test paging");
    for seed in 0..12 {
        let psk = (seed % 2 == 1).then_some([seed as u8; 32]);
        let config = bridge_config(psk);
        let publ = publisher(&config, Some(&shape), shape.fingerprint());
        let mut w = world(publ, &config, seed, 20);
        let (event, _) = fetch(&mut w, TOPIC, |_, _| {});
        let (fingerprint, got) = received(event);
        assert_eq!(fingerprint, shape.fingerprint());
        assert!(got == shape, "seed {seed}: another shape arrived");
    }
}

/// A reply under the publisher's session with nonce `nonce`: all of `shape`, which hashes
/// to the fingerprint it states.
fn forged_reply(shape: &Shape, nonce: u64) -> Vec<u8> {
    let bytes = shape.to_bytes().expect("encodable");
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let reply = SchemaReply {
        topic_id: TOPIC,
        fingerprint: shape.fingerprint(),
        session: PUB_SESSION,
        nonce,
        total: bytes.len() as u32,
        offset: 0,
        page: &bytes,
    };
    enc.push_schema_reply(&reply).expect("fits");
    enc.as_bytes().to_vec()
}

#[test]
fn forged_replies_are_dropped_and_counted_never_accepted() {
    let shape = wide("Wide", 100);
    let evil = wide("Evil", 3);
    let config = bridge_config(None);
    let publ = publisher(&config, Some(&shape), shape.fingerprint());
    let mut w = world(publ, &config, 7, 10);
    // Every millisecond, a reply under the publisher's address with a guessed nonce: the
    // first page of another shape that hashes to the fingerprint it states.
    let forge = |w: &mut World, _now_ms: u64| {
        let d = forged_reply(&evil, w.rng().u64(1..));
        w.inject(pub_addr(), req_addr(), d);
    };
    let (event, _) = fetch(&mut w, TOPIC, forge);
    let (_, got) = received(event);
    assert!(got == shape, "a forged shape was accepted");
    let refused = w.ep(REQUESTER).metrics().dropped(DropReason::BadNonce);
    assert!(refused > 10, "forged replies counted: {refused}");

    // A requester that asked for nothing takes nothing and says nothing.
    let mut idle = Endpoint::new(&config, MAX, REQ_SESSION, [3; 32], Vec::new(), Vec::new());
    let mut out = Outbox::new();
    let mut got = Got::default();
    idle.handle(&forged_reply(&evil, 1), pub_addr(), MS, &mut out, &mut got);
    assert!(out.is_empty() && idle.poll_event().is_none() && got.len() == 0);
    assert_eq!(idle.metrics().dropped(DropReason::BadNonce), 1);
}

/// A request of `room` bytes of padding for `offset`, from nobody's endpoint.
fn request(room: usize, offset: u32, nonce: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let r = SchemaRequest {
        topic_id: TOPIC,
        session: 0x5151,
        nonce,
        offset,
        room,
    };
    enc.push_schema_request(&r).expect("fits");
    enc.as_bytes().to_vec()
}

#[test]
fn a_spoofed_requester_earns_its_victim_no_more_than_it_sent() {
    let shape = wide("Wide", 200);
    let total = shape.to_bytes().expect("encodable").len();
    let config = bridge_config(None);
    let mut publ = publisher(&config, Some(&shape), shape.fingerprint());
    let mut rng = fastrand::Rng::with_seed(11);
    let mut answered = 0usize;
    // One request a millisecond for a second, of every size, for every offset: each answer
    // is checked by `at_publisher`; the rate limit bounds how many there are.
    for ms in 1..=1000u64 {
        let room = rng.usize(0..=SchemaRequest::room_in(MAX, 0));
        let offset = rng.u32(0..=total as u32);
        let d = request(room, offset, rng.u64(1..));
        answered += at_publisher(&mut publ, &d, victim_addr(), ms * MS).len();
    }
    let cap = 40 + 20 + 1;
    assert!(
        answered > 0 && answered <= cap,
        "{answered} answers, at most {cap}"
    );

    // Two requests in one datagram: neither is answered.
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    for nonce in [1, 2] {
        let r = SchemaRequest {
            topic_id: TOPIC,
            session: 0x5151,
            nonce,
            offset: 0,
            room: 100,
        };
        enc.push_schema_request(&r).expect("fits");
    }
    let now = 10_000 * MS;
    assert!(at_publisher(&mut publ, enc.as_bytes(), victim_addr(), now).is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::BadControl), 1);

    // From outside the allowlist (loopback): nothing.
    let outsider = SocketAddr::from(([10, 0, 0, 1], 7500));
    let d = request(500, 0, 3);
    assert!(at_publisher(&mut publ, &d, outsider, now).is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::NotAllowed), 1);

    // Padding that is not zero: nothing.
    let mut d = request(500, 0, 4);
    if let Some(b) = d.last_mut() {
        *b = 1;
    }
    assert!(at_publisher(&mut publ, &d, victim_addr(), now).is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::BadControl), 2);

    // A request with room for a page gets it, cut to that room.
    let d = request(100, 0, 5);
    let answer = at_publisher(&mut publ, &d, victim_addr(), now);
    assert_eq!(
        answer.sent().first().map(|(_, _, a)| a.len()),
        Some(d.len())
    );
}

#[test]
fn fetches_that_cannot_succeed_say_why() {
    let shape = wide("Wide", 10);
    let config = bridge_config(None);

    // A topic the publisher does not export: at once.
    let publ = publisher(&config, Some(&shape), shape.fingerprint());
    let mut w = world(publ, &config, 1, 0);
    let (event, at) = fetch(&mut w, TOPIC + 1, |_, _| {});
    assert_eq!(failed(event), SchemaFailure::NotServed);
    assert!(at < 10, "took {at} ms");

    // An export without a shape: the same.
    let publ = publisher(&config, None, shape.fingerprint());
    let mut w = world(publ, &config, 1, 0);
    assert_eq!(
        failed(fetch(&mut w, TOPIC, |_, _| {}).0),
        SchemaFailure::NotServed
    );

    // A shape that does not hash to the fingerprint its publisher states: refused.
    let publ = publisher(&config, Some(&shape), 0xbad);
    let mut w = world(publ, &config, 1, 0);
    let reason = failed(fetch(&mut w, TOPIC, |_, _| {}).0);
    assert_eq!(
        reason,
        SchemaFailure::Mismatch {
            fingerprint: 0xbad,
            computed: shape.fingerprint()
        }
    );

    // Another key: the publisher drops every request; the fetch gives up after its attempts.
    let publ = publisher(
        &bridge_config(Some([1; 32])),
        Some(&shape),
        shape.fingerprint(),
    );
    let mut w = world(publ, &bridge_config(Some([2; 32])), 1, 0);
    let (event, at) = fetch(&mut w, TOPIC, |_, _| {});
    assert_eq!(failed(event), SchemaFailure::TimedOut);
    let expected = u64::from(SCHEMA_ATTEMPTS) * SCHEMA_RETRY_NS / MS;
    assert!((expected..expected + 5).contains(&at), "gave up at {at} ms");
    assert_eq!(
        w.ep(PUBLISHER).metrics().dropped(DropReason::BadMac),
        u64::from(SCHEMA_ATTEMPTS)
    );
}
