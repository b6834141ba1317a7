//! Schema frames under attack and against their promises (docs/PROTOCOL.md "Schema frames",
//! SECURITY.md): an attacker with a plain or source-forging UDP socket on loopback, a hostile
//! publisher that serves the shapes and payloads it likes, forged replies to a requester, and
//! the generic decoder's memory bound. The commands built on these frames (`llbus echo`,
//! `spy --decode`, `llbus play`, `llbus record`) are checked as processes in the workspace's
//! `tests/it/net/schema_cli.rs`.
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::schema::{decode, Fields, Primitive, Shape};
use llbus_net::{
    parse_datagram, Allowlist, BatchEncoder, BridgeConfig, Endpoint, Event, ExportSpec,
    SchemaFailure, SchemaReply, SchemaRequest, Wire, DEFAULT_MAX_DATAGRAM, HEADER_LEN,
};
use tests::bridges::{export, long_names, HostilePub, NoData};
use tests::spoof::RawSender;

const MS: u64 = 1_000_000;

/// What an endpoint sent, in memory.
#[derive(Default)]
struct Captured(Vec<(SocketAddr, Vec<u8>)>);

impl Wire for Captured {
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        for (to, suffix) in dests {
            let mut d = bytes.to_vec();
            if suffixed {
                d.extend_from_slice(&suffix.to_le_bytes());
            }
            self.0.push((*to, d));
        }
        dests.len()
    }
}

/// A SchemaRequest datagram for `topic` with `room` bytes of padding.
fn request(topic_id: u64, nonce: u64, offset: u32, room: usize) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_schema_request(&SchemaRequest {
        topic_id,
        session: 0x5eed,
        nonce,
        offset,
        room,
    })
    .expect("fits");
    enc.as_bytes().to_vec()
}

/// Everything `socket` receives within `wait`.
fn drain(socket: &UdpSocket, wait: Duration) -> Vec<Vec<u8>> {
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout set");
    let until = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = [0u8; 70_000];
    while Instant::now() < until {
        if let Ok(n) = socket.recv(&mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

/// A wide struct: a shape of several pages.
fn wide(n: usize) -> Shape {
    let names: Vec<String> = (0..n).map(|i| format!("a_long_field_name_{i}")).collect();
    Shape::structure(
        "Wide",
        Fields::named(
            names
                .iter()
                .map(|f| (f.as_str(), Shape::Primitive(Primitive::U32))),
        ),
    )
}

fn attacker() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("binds")
}

// ---------------------------------------------------------------------------------------------
// Amplification and access (PROTOCOL.md "Schema frames", SECURITY.md "Amplification or forgery
// through schema frames").
#[test]
fn requests_of_every_size_are_answered_with_no_more_bytes_than_they_carried() {
    let _cpu = crate::fixtures::cpu_shared();
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.wide", &shape, None)],
        Vec::new(),
    );
    let topic = llbus::topic_id("schema.wide");
    let s = attacker();
    let mut answered = 0;
    // Unpadded (room 0), tiny, a datagram's worth, and past the shape's end (offset == total).
    for (i, room) in [0usize, 1, 7, 100, 1000, 1472 - HEADER_LEN - 16]
        .into_iter()
        .enumerate()
    {
        let d = request(topic, 100 + i as u64, 0, room);
        s.send_to(&d, publ.addr).expect("sent");
        let got = drain(&s, Duration::from_millis(150));
        assert!(got.len() <= 1, "{} answers to one request", got.len());
        for a in &got {
            assert!(a.len() <= d.len(), "{} bytes answered {}", a.len(), d.len());
            answered += 1;
        }
    }
    assert!(
        answered >= 5,
        "the publisher answered only {answered} of 6 requests"
    );
    // Two requests in one datagram: not answered at all.
    let mut two = request(topic, 7, 0, 100);
    two.extend(request(topic, 8, 0, 100));
    s.send_to(&two, publ.addr).expect("sent");
    assert!(drain(&s, Duration::from_millis(200)).is_empty());
}

#[test]
fn a_request_flood_from_one_source_gets_no_more_answers_than_the_rate_limit() {
    let _cpu = crate::fixtures::cpu_shared();
    let shape = wide(10);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.flood", &shape, None)],
        Vec::new(),
    );
    let topic = llbus::topic_id("schema.flood");
    let s = attacker();
    let started = Instant::now();
    for i in 0..400u64 {
        s.send_to(&request(topic, i + 1, 0, 64), publ.addr)
            .expect("sent");
    }
    let got = drain(&s, Duration::from_millis(300));
    let secs = started.elapsed().as_secs_f64();
    // Burst 40, 20 a second (the defaults).
    let allowed = 40.0 + 20.0 * secs + 2.0;
    assert!(
        (got.len() as f64) <= allowed,
        "{} answers in {secs:.2} s, the limit allows {allowed:.0}",
        got.len()
    );
    assert!(
        got.len() >= 20,
        "only {} answers: is the publisher there?",
        got.len()
    );
}

#[test]
fn with_a_key_unsealed_requests_and_hosts_outside_the_allowlist_get_nothing() {
    let _cpu = crate::fixtures::cpu_shared();
    let shape = wide(10);
    let keyed = HostilePub::start(
        BridgeConfig {
            psk: Some([3; 32]),
            ..BridgeConfig::default()
        },
        vec![export("schema.keyed", &shape, None)],
        Vec::new(),
    );
    // A key on control only (data unsealed): a schema request is control.
    let control_only = HostilePub::start(
        BridgeConfig {
            psk: Some([3; 32]),
            mac_data: false,
            ..BridgeConfig::default()
        },
        vec![export("schema.keyed", &shape, None)],
        Vec::new(),
    );
    let fenced = HostilePub::start(
        BridgeConfig::default(),
        vec![export(
            "schema.fenced",
            &shape,
            Some(Allowlist::parse(["127.0.0.2/32"]).expect("cidr")),
        )],
        Vec::new(),
    );
    let s = attacker();
    for room in [0, 200, 1400] {
        let d = request(llbus::topic_id("schema.keyed"), 9, 0, room);
        s.send_to(&d, keyed.addr).expect("sent");
        s.send_to(&d, control_only.addr).expect("sent");
        let d = request(llbus::topic_id("schema.fenced"), 9, 0, room);
        s.send_to(&d, fenced.addr).expect("sent");
    }
    let got = drain(&s, Duration::from_millis(300));
    assert!(got.is_empty(), "{} answers", got.len());
    // The host the allowlist names is answered.
    let inside = UdpSocket::bind("127.0.0.2:0").expect("binds");
    let d = request(llbus::topic_id("schema.fenced"), 9, 0, 200);
    inside.send_to(&d, fenced.addr).expect("sent");
    assert_eq!(drain(&inside, Duration::from_millis(300)).len(), 1);
}

#[test]
fn a_spoofed_request_earns_its_victim_no_more_than_the_forger_sent_requires_root() {
    let _cpu = crate::fixtures::cpu_shared();
    let Some(mut raw) = RawSender::for_test("schema_spoof") else {
        return;
    };
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.spoof", &shape, None)],
        Vec::new(),
    );
    let victim = UdpSocket::bind("127.0.0.9:0").expect("binds");
    let SocketAddr::V4(victim_addr) = victim.local_addr().expect("addr") else {
        unreachable!("v4");
    };
    let SocketAddr::V4(publ_addr) = publ.addr else {
        unreachable!("v4");
    };
    let mut sent = 0usize;
    for (i, room) in [0usize, 10, 500, 1400].into_iter().enumerate() {
        for offset in [0u32, 1, 100] {
            let d = request(llbus::topic_id("schema.spoof"), 50 + i as u64, offset, room);
            sent += d.len();
            raw.send(victim_addr, publ_addr, &d).expect("forged");
        }
    }
    let got = drain(&victim, Duration::from_millis(300));
    let received: usize = got.iter().map(Vec::len).sum();
    assert!(
        !got.is_empty(),
        "the forged requests were not answered: test broken?"
    );
    assert!(
        received <= sent,
        "victim got {received} bytes, the forger sent {sent}"
    );
    // The answers went to the forged source, so they are the requester's to refuse: the
    // victim's own endpoint takes none of them.
    let mut victim_ep = Endpoint::new(
        &BridgeConfig::default(),
        DEFAULT_MAX_DATAGRAM,
        1,
        [1; 32],
        Vec::new(),
        Vec::new(),
    );
    for d in &got {
        victim_ep.handle(d, publ.addr, 1, &mut Captured::default(), &mut NoData);
    }
    assert!(victim_ep.poll_event().is_none());
}

// ---------------------------------------------------------------------------------------------
// The requester (Endpoint::request_schema) against forged and hostile replies.
/// A requester endpoint and the request it sent first (nonce, room).
fn requester(max_datagram: usize) -> (Endpoint, SchemaRequest, Vec<u8>) {
    let mut ep = Endpoint::new(
        &BridgeConfig::default(),
        max_datagram,
        0x4242,
        [5; 32],
        Vec::new(),
        Vec::new(),
    );
    assert!(ep.request_schema(0x77, publisher_addr()));
    let mut out = Captured::default();
    ep.on_timer(MS, &mut out, &mut NoData);
    let (to, d) = out.0.pop().expect("a request went out");
    assert_eq!(to, publisher_addr());
    let frame = parse_datagram(&d, 70_000)
        .expect("valid")
        .next()
        .expect("one frame");
    let req = SchemaRequest::from_frame(&frame).expect("a schema request");
    (ep, req, d)
}

fn publisher_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7555))
}

fn reply(
    topic: u64,
    fingerprint: u64,
    nonce: u64,
    total: u32,
    offset: u32,
    page: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_schema_reply(&SchemaReply {
        topic_id: topic,
        fingerprint,
        session: 0x9999,
        nonce,
        total,
        offset,
        page,
    })
    .expect("fits");
    enc.as_bytes().to_vec()
}

fn events(ep: &mut Endpoint) -> Vec<Event> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

#[test]
fn forged_replies_are_never_accepted() {
    let _cpu = crate::fixtures::cpu_shared();
    let good = Shape::structure(
        "Px",
        Fields::named([("v", Shape::Primitive(Primitive::F64))]),
    );
    let bytes = good.to_bytes().expect("encodes");
    let fp = good.fingerprint();
    let (mut ep, req, _) = requester(DEFAULT_MAX_DATAGRAM);
    let total = bytes.len() as u32;
    let other = SocketAddr::from(([127, 0, 0, 1], 7556));
    let forged = [
        // Wrong nonce, another source, another topic.
        (
            reply(0x77, fp, req.nonce ^ 1, total, 0, &bytes),
            publisher_addr(),
        ),
        (reply(0x77, fp, req.nonce, total, 0, &bytes), other),
        (
            reply(0x78, fp, req.nonce, total, 0, &bytes),
            publisher_addr(),
        ),
        // A total of 4 GiB, a page past the total.
        (
            reply(0x77, fp, req.nonce, u32::MAX, 0, &bytes),
            publisher_addr(),
        ),
        (reply(0x77, fp, req.nonce, 2, 0, &bytes), publisher_addr()),
    ];
    for (d, from) in &forged {
        ep.handle(d, *from, 2 * MS, &mut Captured::default(), &mut NoData);
        let got = events(&mut ep);
        assert!(got.is_empty(), "accepted a forged reply: {got:?}");
    }
    // A consistent shape that does not hash to the stated fingerprint: refused.
    let d = reply(0x77, fp ^ 1, req.nonce, total, 0, &bytes);
    ep.handle(
        &d,
        publisher_addr(),
        3 * MS,
        &mut Captured::default(),
        &mut NoData,
    );
    let got = events(&mut ep);
    assert!(
        matches!(
            got.as_slice(),
            [Event::SchemaFailed {
                reason: SchemaFailure::Mismatch { .. },
                ..
            }]
        ),
        "{got:?}"
    );
    // The right bytes at the wrong offset, then the real page: the real one is taken.
    let (mut ep, req, _) = requester(DEFAULT_MAX_DATAGRAM);
    let d = reply(0x77, fp, req.nonce, total, 5, &bytes[5..]);
    ep.handle(
        &d,
        publisher_addr(),
        2 * MS,
        &mut Captured::default(),
        &mut NoData,
    );
    assert!(events(&mut ep).is_empty());
    let d = reply(0x77, fp, req.nonce, total, 0, &bytes);
    ep.handle(
        &d,
        publisher_addr(),
        3 * MS,
        &mut Captured::default(),
        &mut NoData,
    );
    let got = events(&mut ep);
    assert!(
        matches!(got.as_slice(), [Event::SchemaReceived { .. }]),
        "{got:?}"
    );
}

/// The bincode node list of `n` nested `Vec`s around a `u8`: 4 bytes a level.
fn nested_vecs(n: u64) -> Vec<u8> {
    let mut b = (n + 1).to_le_bytes().to_vec();
    for _ in 0..n {
        b.extend_from_slice(&3u32.to_le_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b
}

#[test]
fn a_hostile_shape_of_deep_nesting_or_huge_claims_is_refused_without_harm() {
    let _cpu = crate::fixtures::cpu_shared();
    // 16 000 levels (64 KiB), and a node list claiming 2^60 nodes.
    let deep = nested_vecs(16_000);
    let mut claims = (1u64 << 60).to_le_bytes().to_vec();
    claims.extend_from_slice(&[3, 0, 0, 0]);
    for bytes in [deep, claims] {
        let (mut ep, req, _) = requester(DEFAULT_MAX_DATAGRAM);
        let total = bytes.len() as u32;
        let mut offset = 0usize;
        let mut nonce = req.nonce;
        let mut now = 2 * MS;
        let mut got = Vec::new();
        while got.is_empty() && offset < bytes.len() {
            let page = &bytes[offset..(offset + 1400).min(bytes.len())];
            let d = reply(0x77, 0x1234, nonce, total, offset as u32, page);
            ep.handle(
                &d,
                publisher_addr(),
                now,
                &mut Captured::default(),
                &mut NoData,
            );
            offset += page.len();
            got = events(&mut ep);
            // The next page's request, with its fresh nonce.
            let mut out = Captured::default();
            now += MS;
            ep.on_timer(now, &mut out, &mut NoData);
            if let Some((_, d)) = out.0.pop() {
                let f = parse_datagram(&d, 70_000)
                    .expect("valid")
                    .next()
                    .expect("frame");
                nonce = SchemaRequest::from_frame(&f).expect("request").nonce;
            }
        }
        assert!(
            matches!(
                got.as_slice(),
                [Event::SchemaFailed {
                    reason: SchemaFailure::Malformed(_),
                    ..
                }]
            ),
            "{got:?}"
        );
    }
}

/// A whole fetch in memory between a default publisher and a requester of `max_datagram`.
fn fetch_in_memory(max_datagram: usize) -> Vec<Event> {
    let shape = wide(200);
    let mut publ = Endpoint::new(
        &BridgeConfig::default(),
        DEFAULT_MAX_DATAGRAM,
        0x9999,
        [6; 32],
        vec![ExportSpec {
            topic_id: 0x77,
            ..export("schema.jumbo", &shape, None)
        }],
        Vec::new(),
    );
    let (mut req_ep, _, first) = requester(max_datagram);
    let me = SocketAddr::from(([127, 0, 0, 1], 7557));
    let mut to_publisher = vec![first];
    let mut now = 2 * MS;
    let mut got = Vec::new();
    while got.is_empty() && now < 5_000 * MS {
        for d in std::mem::take(&mut to_publisher) {
            let mut out = Captured::default();
            publ.handle(&d, me, now, &mut out, &mut NoData);
            for (_, a) in out.0 {
                assert!(a.len() <= d.len(), "{} bytes answered {}", a.len(), d.len());
                req_ep.handle(
                    &a,
                    publisher_addr(),
                    now,
                    &mut Captured::default(),
                    &mut NoData,
                );
            }
        }
        got = events(&mut req_ep);
        now += 50 * MS;
        let mut out = Captured::default();
        req_ep.on_timer(now, &mut out, &mut NoData);
        to_publisher.extend(out.0.into_iter().map(|(_, d)| d));
    }
    got
}

#[test]
fn requesters_of_the_default_or_a_smaller_datagram_get_a_shape_of_many_pages() {
    let _cpu = crate::fixtures::cpu_shared();
    for max in [DEFAULT_MAX_DATAGRAM, 1200, 200] {
        let got = fetch_in_memory(max);
        assert!(
            matches!(got.as_slice(), [Event::SchemaReceived { .. }]),
            "{max}: {got:?}"
        );
    }
}

#[test]
fn a_requester_with_a_larger_datagram_than_the_publisher_still_gets_the_schema() {
    let _cpu = crate::fixtures::cpu_shared();
    let got = fetch_in_memory(9000);
    assert!(
        matches!(got.as_slice(), [Event::SchemaReceived { .. }]),
        "{got:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The generic decoder's memory bound (bus/src/schema/value.rs module docs, RECORDING.md
// "Decoding a message without its type": "allocates in proportion to its input").
#[test]
fn a_message_of_no_bytes_cannot_decode_into_megabytes() {
    let _cpu = crate::fixtures::cpu_shared();
    let shape = long_names(30_000, 2_000);
    let encoded = shape.to_bytes().expect("a shape a publisher may serve");
    assert!(encoded.len() < 64 * 1024);
    if let Ok(value) = decode(&[], &shape) {
        let json = serde_json::to_string(&value).expect("serializes");
        assert!(
            json.len() < 8 << 20,
            "0 input bytes decoded to {} bytes of JSON",
            json.len()
        );
    }
}

#[test]
fn with_a_key_sealed_requests_get_sealed_answers_no_larger_and_a_replay_gets_nothing() {
    let _cpu = crate::fixtures::cpu_shared();
    let key = [4; 32];
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig {
            psk: Some(key),
            ..BridgeConfig::default()
        },
        vec![export("schema.sealed", &shape, None)],
        Vec::new(),
    );
    let mac = llbus_net::FrameMac::with_key_id(0, &key);
    let s = attacker();
    let seal = |d: Vec<u8>| {
        let len = d.len();
        let mut buf = d;
        buf.resize(len + llbus_net::MAC_TAG_LEN, 0);
        let n = mac.seal(&mut buf, len).expect("seals");
        buf.truncate(n);
        buf
    };
    let topic = llbus::topic_id("schema.sealed");
    let mut last = Vec::new();
    for (i, room) in [0usize, 1, 300, 1472 - HEADER_LEN - 16 - 32]
        .into_iter()
        .enumerate()
    {
        let d = seal(request(topic, 200 + i as u64, 0, room));
        s.send_to(&d, publ.addr).expect("sent");
        let got = drain(&s, Duration::from_millis(150));
        assert_eq!(got.len(), 1, "room {room}: {} answers", got.len());
        assert!(
            got[0].len() <= d.len(),
            "{} bytes answered {}",
            got[0].len(),
            d.len()
        );
        let frames = mac.open(&got[0], 70_000).expect("a sealed answer");
        let frame = frames.into_iter().next().expect("a frame");
        let r = SchemaReply::from_frame(&frame).expect("a schema reply");
        assert_eq!(r.nonce, 200 + i as u64);
        last = d;
    }
    // The same sealed datagram again, from this source or (forged) from a victim's.
    s.send_to(&last, publ.addr).expect("sent");
    assert!(
        drain(&s, Duration::from_millis(200)).is_empty(),
        "a replay was answered"
    );
    if let Some(mut raw) = RawSender::for_test("schema_sealed_replay") {
        let victim = UdpSocket::bind("127.0.0.10:0").expect("binds");
        let (SocketAddr::V4(v), SocketAddr::V4(p)) =
            (victim.local_addr().expect("addr"), publ.addr)
        else {
            unreachable!("v4");
        };
        raw.send(v, p, &last).expect("forged");
        assert!(
            drain(&victim, Duration::from_millis(200)).is_empty(),
            "a replay was answered"
        );
    }
}

#[test]
fn fetches_are_bounded_and_an_unanswered_one_asks_ten_times_then_fails() {
    let _cpu = crate::fixtures::cpu_shared();
    let mut ep = Endpoint::new(
        &BridgeConfig::default(),
        DEFAULT_MAX_DATAGRAM,
        0x4243,
        [5; 32],
        Vec::new(),
        Vec::new(),
    );
    for t in 0..llbus_net::MAX_SCHEMA_FETCHES as u64 {
        assert!(ep.request_schema(t, publisher_addr()));
    }
    // The same again: nothing new; one more: refused.
    assert!(ep.request_schema(0, publisher_addr()));
    assert!(!ep.request_schema(999, publisher_addr()));
    let mut sent = 0usize;
    let mut failed = 0usize;
    let mut now = MS;
    while now < 3_000 * MS {
        let mut out = Captured::default();
        ep.on_timer(now, &mut out, &mut NoData);
        sent += out.0.len();
        for e in events(&mut ep) {
            assert!(
                matches!(
                    e,
                    Event::SchemaFailed {
                        reason: SchemaFailure::TimedOut,
                        ..
                    }
                ),
                "{e:?}"
            );
            failed += 1;
        }
        now += 10 * MS;
    }
    let n = llbus_net::MAX_SCHEMA_FETCHES;
    assert_eq!(failed, n);
    assert_eq!(sent, n * llbus_net::SCHEMA_ATTEMPTS as usize);
    // Room again.
    assert!(ep.request_schema(999, publisher_addr()));
}

/// A type nested 71 levels deep: its shape cannot be served.
#[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
#[message(topic = "schema.deep")]
#[allow(clippy::type_complexity)] // The point: a type nested too deep.
struct Deep {
    v: Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<u8>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>,
}

#[test]
fn a_bridge_refuses_at_start_a_type_too_deep_to_describe() {
    let _cpu = crate::fixtures::cpu_shared();
    let bridge = llbus_net::Bridge::bind("127.0.0.1:0").expect("binds");
    let mut b = llbus::Bus::builder();
    b.add(bridge.export::<Deep>());
    match b.start() {
        Ok(bus) => {
            bus.stop();
            let _ = bus.join();
            panic!("a bus started serving a shape no requester accepts");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("deeper than 64"), "{msg}");
        }
    }
}

#[test]
fn a_direct_topic_too_deep_to_describe_is_refused_at_start_too() {
    let _cpu = crate::fixtures::cpu_shared();
    let mut bridge = llbus_net::Bridge::bind("127.0.0.1:0").expect("binds");
    let _sender = bridge.direct::<Deep>().expect("a direct sender");
    let mut b = llbus::Bus::builder();
    b.add(bridge);
    match b.start() {
        Ok(bus) => {
            bus.stop();
            let _ = bus.join();
            panic!("a bus started with a direct topic whose shape cannot be served");
        }
        Err(e) => assert!(e.to_string().contains("deeper than 64"), "{e}"),
    }
}
