//! Schema fetching over a simulated network, driving the endpoints that ship: a publisher
//! [`Endpoint`] that exports a topic with a shape of many pages, a requester [`Endpoint`] that
//! fetches it over a link that drops and delays datagrams, and adversaries that forge replies
//! under the publisher's address and requests under a victim's.
//!
//! What must hold: the shape arrives whole and checked, with or without a pre-shared key,
//! whatever the link drops; no datagram the publisher sends in answer is larger than the one
//! it answers, or goes anywhere but to its source; a reply nobody asked for is dropped and
//! counted, never accepted; a fetch that cannot succeed says why.

use std::net::SocketAddr;

use llbus::schema::{Fields, Primitive, Shape};

use super::sim::Sent;
use super::{EncodedShape, Endpoint, Event, ExportSpec, SchemaFailure, Sink};
use crate::{
    BatchEncoder, BridgeConfig, DropReason, RateLimit, SchemaReply, SchemaRequest,
    DEFAULT_MAX_DATAGRAM, SCHEMA_ATTEMPTS, SCHEMA_RETRY_NS,
};

const TOPIC: u64 = 0x7272;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def2;
const REQ_SESSION: u64 = 0x0fed_cba9_8765_4323;
const MS: u64 = 1_000_000;
const MAX: usize = DEFAULT_MAX_DATAGRAM;

fn pub_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7300))
}

fn req_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7301))
}

/// A loopback host that asked for nothing: what a forged request's answer would flood.
fn victim_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 3], 7400))
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

/// Nothing is imported here: a delivery is a bug.
struct NoData;

impl Sink for NoData {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        panic!("a schema exchange delivered a message");
    }
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
        topic: "wide",
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

/// Hands `datagram` from `src` to the publisher and checks the anti-amplification rule:
/// whatever it answers goes to `src` alone, in one datagram no larger than this one. Returns
/// the answers.
fn at_publisher(publ: &mut Endpoint, datagram: &[u8], src: SocketAddr, now: u64) -> Sent {
    let mut out = Sent::default();
    publ.handle(datagram, src, now, &mut out, &mut NoData);
    assert!(out.0.len() <= 1, "{} datagrams answered one", out.0.len());
    for (to, d) in &out.0 {
        assert_eq!(*to, src, "an answer to someone else");
        assert!(
            d.len() <= datagram.len(),
            "{} bytes answered {}",
            d.len(),
            datagram.len()
        );
    }
    out
}

/// A publisher and a requester joined by a link that loses `loss_pct` percent of datagrams
/// and delays the rest by 0 to 3 ms (so reorders them).
struct World {
    publisher: Endpoint,
    requester: Endpoint,
    rng: fastrand::Rng,
    loss_pct: u32,
    /// `(arrival ms, from, to, bytes)`.
    in_flight: Vec<(u64, SocketAddr, SocketAddr, Vec<u8>)>,
    events: Vec<Event>,
}

impl World {
    fn new(publisher: Endpoint, requester_config: &BridgeConfig, seed: u64, loss: u32) -> World {
        let requester = Endpoint::new(
            requester_config,
            MAX,
            REQ_SESSION,
            [9; 32],
            Vec::new(),
            Vec::new(),
        );
        World {
            publisher,
            requester,
            rng: fastrand::Rng::with_seed(seed),
            loss_pct: loss,
            in_flight: Vec::new(),
            events: Vec::new(),
        }
    }

    fn transmit(&mut self, now_ms: u64, from: SocketAddr, sent: Sent) {
        for (to, d) in sent.0 {
            if self.rng.u32(0..100) >= self.loss_pct {
                let at = now_ms + self.rng.u64(0..=3);
                self.in_flight.push((at, from, to, d));
            }
        }
    }

    /// One millisecond: timers, then what arrives.
    fn step(&mut self, now_ms: u64) {
        let now = now_ms * MS;
        let mut out = Sent::default();
        self.requester.on_timer(now, &mut out, &mut NoData);
        self.transmit(now_ms, req_addr(), out);
        let mut out = Sent::default();
        self.publisher.on_timer(now, &mut out, &mut NoData);
        self.transmit(now_ms, pub_addr(), out);
        let (due, later) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|d| d.0 <= now_ms);
        self.in_flight = later;
        for (_, from, to, d) in due {
            if to == pub_addr() {
                let out = at_publisher(&mut self.publisher, &d, from, now);
                self.transmit(now_ms, pub_addr(), out);
            } else if to == req_addr() {
                let mut out = Sent::default();
                self.requester.handle(&d, from, now, &mut out, &mut NoData);
                assert!(out.0.is_empty(), "the requester answered a reply");
            }
        }
        while let Some(e) = self.requester.poll_event() {
            self.events.push(e);
        }
    }

    /// Fetches topic `topic`'s schema; the event that ends the fetch, and when (ms).
    fn fetch(&mut self, topic: u64, forge: impl Fn(&mut World, u64)) -> (Event, u64) {
        assert!(self.requester.request_schema(topic, pub_addr()));
        let limit = u64::from(SCHEMA_ATTEMPTS + 2) * SCHEMA_RETRY_NS / MS * 64;
        for now_ms in 1..limit {
            forge(self, now_ms);
            self.step(now_ms);
            if let Some(e) = self.events.pop() {
                assert!(
                    self.events.is_empty(),
                    "more than one end: {:?}",
                    self.events
                );
                return (e, now_ms);
            }
        }
        panic!("the fetch never ended");
    }
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
        let mut world = World::new(publ, &config, seed, 20);
        let (event, _) = world.fetch(TOPIC, |_, _| {});
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
    let mut world = World::new(publ, &config, 7, 10);
    // Every millisecond, a reply under the publisher's address with a guessed nonce: the
    // first page of another shape that hashes to the fingerprint it states.
    let forge = |w: &mut World, now_ms: u64| {
        let d = forged_reply(&evil, w.rng.u64(1..));
        w.in_flight.push((now_ms, pub_addr(), req_addr(), d));
    };
    let (event, _) = world.fetch(TOPIC, forge);
    let (_, got) = received(event);
    assert!(got == shape, "a forged shape was accepted");
    let refused = world.requester.metrics().dropped(DropReason::BadNonce);
    assert!(refused > 10, "forged replies counted: {refused}");

    // A requester that asked for nothing takes nothing and says nothing.
    let mut idle = Endpoint::new(&config, MAX, REQ_SESSION, [3; 32], Vec::new(), Vec::new());
    let mut out = Sent::default();
    idle.handle(
        &forged_reply(&evil, 1),
        pub_addr(),
        MS,
        &mut out,
        &mut NoData,
    );
    assert!(out.0.is_empty() && idle.poll_event().is_none());
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
        answered += at_publisher(&mut publ, &d, victim_addr(), ms * MS).0.len();
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
    assert!(at_publisher(&mut publ, enc.as_bytes(), victim_addr(), now)
        .0
        .is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::BadControl), 1);

    // From outside the allowlist (loopback): nothing.
    let outsider = SocketAddr::from(([10, 0, 0, 1], 7500));
    let d = request(500, 0, 3);
    assert!(at_publisher(&mut publ, &d, outsider, now).0.is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::NotAllowed), 1);

    // Padding that is not zero: nothing.
    let mut d = request(500, 0, 4);
    if let Some(b) = d.last_mut() {
        *b = 1;
    }
    assert!(at_publisher(&mut publ, &d, victim_addr(), now).0.is_empty());
    assert_eq!(publ.metrics().dropped(DropReason::BadControl), 2);

    // A request with room for a page gets it, cut to that room.
    let d = request(100, 0, 5);
    let answer = at_publisher(&mut publ, &d, victim_addr(), now);
    assert_eq!(answer.0.first().map(|(_, a)| a.len()), Some(d.len()));
}

#[test]
fn fetches_that_cannot_succeed_say_why() {
    let shape = wide("Wide", 10);
    let config = bridge_config(None);

    // A topic the publisher does not export: at once.
    let publ = publisher(&config, Some(&shape), shape.fingerprint());
    let mut world = World::new(publ, &config, 1, 0);
    let (event, at) = world.fetch(TOPIC + 1, |_, _| {});
    assert_eq!(failed(event), SchemaFailure::NotServed);
    assert!(at < 10, "took {at} ms");

    // An export without a shape: the same.
    let publ = publisher(&config, None, shape.fingerprint());
    let mut world = World::new(publ, &config, 1, 0);
    assert_eq!(
        failed(world.fetch(TOPIC, |_, _| {}).0),
        SchemaFailure::NotServed
    );

    // A shape that does not hash to the fingerprint its publisher states: refused.
    let publ = publisher(&config, Some(&shape), 0xbad);
    let mut world = World::new(publ, &config, 1, 0);
    let reason = failed(world.fetch(TOPIC, |_, _| {}).0);
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
    let mut world = World::new(publ, &bridge_config(Some([2; 32])), 1, 0);
    let (event, at) = world.fetch(TOPIC, |_, _| {});
    assert_eq!(failed(event), SchemaFailure::TimedOut);
    let expected = u64::from(SCHEMA_ATTEMPTS) * SCHEMA_RETRY_NS / MS;
    assert!((expected..expected + 5).contains(&at), "gave up at {at} ms");
    assert_eq!(
        world.publisher.metrics().dropped(DropReason::BadMac),
        u64::from(SCHEMA_ATTEMPTS)
    );
}
