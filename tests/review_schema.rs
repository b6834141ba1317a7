//! Adversarial review of the schema frames and the commands built on them (`llbus echo`,
//! `spy --decode`, `llbus play`): an attacker with a plain or source-forging UDP socket on
//! loopback, a hostile publisher that serves the shapes and payloads it likes, and hostile
//! recordings. Each test asserts a promise of docs/PROTOCOL.md ("Schema frames"), SECURITY.md,
//! docs/RECORDING.md or the modules' docs; the ones that fail today are ignored with the
//! finding.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use llbus::schema::{decode, Fields, Primitive, Shape, Variant};
use llbus_net::{
    parse_datagram, Allowlist, BatchEncoder, BridgeConfig, DropReason, EncodedShape, Endpoint,
    Event, ExportSpec, RecvBatch, SchemaFailure, SchemaReply, SchemaRequest, SendBatch, Sink,
    SocketConfig, SocketWire, UdpEndpoint, Wire, DEFAULT_MAX_DATAGRAM, HEADER_LEN,
};
use tests::cli::{llbus, llbus_bin, CountersDir};
use tests::spoof::RawSender;

const MS: u64 = 1_000_000;

/// A payload written as is (bincode writes a tuple's elements without a length).
struct Raw<'a>(&'a [u8]);

impl serde::Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(self.0.len())?;
        for b in self.0 {
            t.serialize_element(b)?;
        }
        t.end()
    }
}

/// Takes nothing.
struct NoData;

impl Sink for NoData {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        Err(DropReason::UnknownTopic)
    }
}

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

fn export(topic: &'static str, shape: &Shape, allow: Option<Allowlist>) -> ExportSpec {
    ExportSpec {
        topic,
        topic_id: llbus::topic_id(topic),
        fingerprint: shape.fingerprint(),
        allow,
        reliable: false,
        late_join: 0,
        shape: Some(EncodedShape::new(shape).expect("encodable")),
        group: None,
    }
}

/// A publisher that serves what it is told: an `Endpoint` on a loopback socket, driven by a
/// thread of its own, publishing `payloads` (in turn, as they are, every 5 ms) on its first
/// export whenever it has a subscriber. Stopped when dropped.
struct HostilePub {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostilePub {
    fn start(config: BridgeConfig, exports: Vec<ExportSpec>, payloads: Vec<Vec<u8>>) -> HostilePub {
        Self::start_with(config, exports, payloads, None, 1)
    }

    /// [`start`](Self::start), never admitting a subscriber of topic `withhold` (its
    /// Subscribes are ignored), and publishing `burst` payloads every 5 ms.
    fn start_with(
        config: BridgeConfig,
        exports: Vec<ExportSpec>,
        payloads: Vec<Vec<u8>>,
        withhold: Option<u64>,
        burst: usize,
    ) -> HostilePub {
        let mut socket = UdpEndpoint::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &SocketConfig::default(),
        )
        .expect("binds");
        let addr = socket.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let topic_id = exports.first().map_or(0, |e| e.topic_id);
            let mut endpoint = Endpoint::new(
                &config,
                DEFAULT_MAX_DATAGRAM,
                llbus_net::new_session_id(),
                [7; 32],
                exports,
                Vec::new(),
            );
            let mut send = SendBatch::new(16);
            let mut recv = RecvBatch::new(32, 65_536);
            let mut failed = None;
            let started = Instant::now();
            let mut next_publish = 0u64;
            let mut k = 0usize;
            // Bounded: the test that started it stops it; 60 s at most whatever happens.
            while !stopped.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
                let now = started.elapsed().as_nanos() as u64 + 1;
                let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                endpoint.on_timer(now, &mut wire, &mut NoData);
                let n = socket.recv_batch(&mut recv).unwrap_or(0);
                for (datagram, from) in recv.iter() {
                    let topic = datagram
                        .get(8..16)
                        .map(|t| u64::from_le_bytes(t.try_into().unwrap_or_default()));
                    if datagram.get(4) == Some(&0x10) && topic.is_some() && topic == withhold {
                        continue;
                    }
                    let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                    endpoint.handle(datagram, from, now, &mut wire, &mut NoData);
                }
                if now >= next_publish
                    && !payloads.is_empty()
                    && endpoint.destinations(topic_id).next().is_some()
                {
                    next_publish = now + 5 * MS;
                    let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                    if let Some(mut batch) = endpoint.export(0, &mut wire) {
                        for _ in 0..burst {
                            batch.push(&Raw(&payloads[k % payloads.len()]));
                            k += 1;
                        }
                    };
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        HostilePub {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HostilePub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.wide", &shape, None)],
        Vec::new(),
    );
    let topic = llbus::topic_id("rv.wide");
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
    let shape = wide(10);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.flood", &shape, None)],
        Vec::new(),
    );
    let topic = llbus::topic_id("rv.flood");
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
    let shape = wide(10);
    let keyed = HostilePub::start(
        BridgeConfig {
            psk: Some([3; 32]),
            ..BridgeConfig::default()
        },
        vec![export("rv.keyed", &shape, None)],
        Vec::new(),
    );
    // A key on control only (data unsealed): a schema request is control.
    let control_only = HostilePub::start(
        BridgeConfig {
            psk: Some([3; 32]),
            mac_data: false,
            ..BridgeConfig::default()
        },
        vec![export("rv.keyed", &shape, None)],
        Vec::new(),
    );
    let fenced = HostilePub::start(
        BridgeConfig::default(),
        vec![export(
            "rv.fenced",
            &shape,
            Some(Allowlist::parse(["127.0.0.2/32"]).expect("cidr")),
        )],
        Vec::new(),
    );
    let s = attacker();
    for room in [0, 200, 1400] {
        let d = request(llbus::topic_id("rv.keyed"), 9, 0, room);
        s.send_to(&d, keyed.addr).expect("sent");
        s.send_to(&d, control_only.addr).expect("sent");
        let d = request(llbus::topic_id("rv.fenced"), 9, 0, room);
        s.send_to(&d, fenced.addr).expect("sent");
    }
    let got = drain(&s, Duration::from_millis(300));
    assert!(got.is_empty(), "{} answers", got.len());
    // The host the allowlist names is answered.
    let inside = UdpSocket::bind("127.0.0.2:0").expect("binds");
    let d = request(llbus::topic_id("rv.fenced"), 9, 0, 200);
    inside.send_to(&d, fenced.addr).expect("sent");
    assert_eq!(drain(&inside, Duration::from_millis(300)).len(), 1);
}

#[test]
fn a_spoofed_request_earns_its_victim_no_more_than_the_forger_sent_requires_root() {
    let Some(mut raw) = RawSender::for_test("schema_spoof") else {
        return;
    };
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.spoof", &shape, None)],
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
            let d = request(llbus::topic_id("rv.spoof"), 50 + i as u64, offset, room);
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
            ..export("rv.jumbo", &shape, None)
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
    let got = fetch_in_memory(9000);
    assert!(
        matches!(got.as_slice(), [Event::SchemaReceived { .. }]),
        "{got:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The generic decoder's memory bound (bus/src/schema/value.rs module docs, RECORDING.md
// "Decoding a message without its type": "allocates in proportion to its input").

/// An array of `n` unit-field structs whose one field has a name of `name_len` bytes: a shape
/// under 64 KiB whose values take no input bytes at all.
fn long_names(n: u64, name_len: usize) -> Shape {
    let name = "n".repeat(name_len);
    Shape::Array {
        len: n,
        item: Box::new(Shape::structure(
            "S",
            Fields::named([(name.as_str(), Shape::Tuple(Vec::new()))]),
        )),
    }
}

#[test]
fn a_message_of_no_bytes_cannot_decode_into_megabytes() {
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

// ---------------------------------------------------------------------------------------------
// A hostile publisher feeding `llbus echo` and `llbus spy --decode`.

fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn str_bytes(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_escapes_hostile_names_and_strings_and_skips_what_does_not_fit() {
    let _ = llbus_bin();
    let evil = "\u{1b}]0;pwned\u{7}\u{9b}2J\u{202e}\u{2066}\u{85}\u{7f}";
    let shape = Shape::structure(
        &format!("T{evil}"),
        Fields::named([
            (
                format!("f{evil}").as_str(),
                Shape::enumeration(
                    &format!("E{evil}"),
                    [Variant::new(&format!("V{evil}"), Fields::Unit)],
                ),
            ),
            ("s", Shape::Str),
        ]),
    );
    let mut good = 0u32.to_le_bytes().to_vec();
    good.extend(str_bytes(evil));
    // A variant index out of range, a string length of 2^63, a short one.
    let mut bad_variant = 5u32.to_le_bytes().to_vec();
    bad_variant.extend(str_bytes("x"));
    let mut huge = 0u32.to_le_bytes().to_vec();
    huge.extend_from_slice(&(1u64 << 63).to_le_bytes());
    let payloads = vec![bad_variant, huge, vec![0, 0], good.clone()];
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.evil", &shape, None)],
        payloads,
    );
    let dir = CountersDir::new("rv-echo-evil");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "rv.evil",
            "--count",
            "3",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "echo failed: {err}\n{text}");
    assert!(
        !text.chars().any(|c| unsafe_char(c) && c != '\n'),
        "{text:?}"
    );
    assert!(!err.chars().any(|c| unsafe_char(c) && c != '\n'), "{err:?}");
    let expected = serde_json::json!({ format!("f{evil}"): format!("V{evil}"), "s": evil });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert_eq!(v, expected);
    }

    // spy --decode: the same, beside each header.
    let out = llbus(
        &dir,
        &[
            "spy",
            "--publisher",
            &addr,
            "--topic",
            "rv.evil",
            "--count",
            "8",
            "--decode",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.chars().any(|c| unsafe_char(c) && c != '\n'),
        "{text:?}"
    );
    assert!(text.contains("undecodable"), "{text}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_prints_a_map_with_tuple_keys() {
    let _ = llbus_bin();
    // struct Grid { cells: HashMap<(u8, u8), u32> }
    let shape = Shape::structure(
        "Grid",
        Fields::named([(
            "cells",
            Shape::Map {
                key: Box::new(Shape::Tuple(vec![
                    Shape::Primitive(Primitive::U8),
                    Shape::Primitive(Primitive::U8),
                ])),
                value: Box::new(Shape::Primitive(Primitive::U32)),
            },
        )]),
    );
    let mut payload = 1u64.to_le_bytes().to_vec();
    payload.extend_from_slice(&[1, 2]);
    payload.extend_from_slice(&7u32.to_le_bytes());
    assert!(decode(&payload, &shape).is_ok(), "the decoder takes it");
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.grid", &shape, None)],
        vec![payload],
    );
    let dir = CountersDir::new("rv-echo-grid");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "rv.grid",
            "--count",
            "1",
            "--duration-s",
            "3",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "stdout: {text}\nstderr: {err}");
}

// ---------------------------------------------------------------------------------------------
// Hostile recordings given to `llbus play` (RECORDING.md "Replay", play.rs: "one cut off by a
// crash plays up to its last chunk").

/// An MCAP record: opcode, u64 length, content.
fn record(op: u8, content: &[u8]) -> Vec<u8> {
    let mut r = vec![op];
    r.extend_from_slice(&(content.len() as u64).to_le_bytes());
    r.extend_from_slice(content);
    r
}

fn mcap_str(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u32).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

/// A zstd frame holding `data` in one raw block.
fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let mut f = 0xFD2F_B528u32.to_le_bytes().to_vec();
    // Single segment, 1-byte content size.
    f.push(0x20);
    f.push(data.len() as u8);
    let block = 1 | ((data.len() as u32) << 3);
    f.extend_from_slice(&block.to_le_bytes()[..3]);
    f.extend_from_slice(data);
    f
}

/// A recording of 9 bytes of zstd-compressed chunk that claims a record of 1 TiB inside.
fn chunk_bomb() -> Vec<u8> {
    let magic = b"\x89MCAP0\r\n";
    let mut file = magic.to_vec();
    let mut header = mcap_str("llbus");
    header.extend(mcap_str("rv"));
    file.extend(record(0x01, &header));
    // Inside the chunk: a Message record (0x05) whose length says 1 TiB.
    let mut inner = vec![0x05];
    inner.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let compressed = zstd_raw(&inner);
    let mut chunk = Vec::new();
    chunk.extend_from_slice(&0u64.to_le_bytes());
    chunk.extend_from_slice(&0u64.to_le_bytes());
    chunk.extend_from_slice(&(inner.len() as u64).to_le_bytes());
    chunk.extend_from_slice(&0u32.to_le_bytes());
    chunk.extend(mcap_str("zstd"));
    chunk.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
    chunk.extend(compressed);
    file.extend(record(0x06, &chunk));
    file
}

/// A file removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!("rv25-{name}-{}.mcap", std::process::id()));
        std::fs::write(&path, bytes).expect("written");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `llbus play FILE` must end with an error message of its own: no signal, no panic.
fn assert_play_refuses(dir: &CountersDir, file: &TempFile) {
    let out = llbus(
        dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{:?}: {err}", out.status);
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_refuses_garbage_and_truncated_files_with_a_message() {
    let _ = llbus_bin();
    let dir = CountersDir::new("rv-play-garbage");
    let empty = TempFile::new("empty", b"");
    let noise = TempFile::new("noise", &[0xa5; 4096]);
    let magic_only = TempFile::new("magic", b"\x89MCAP0\r\n");
    let mut bomb = chunk_bomb();
    bomb.truncate(30);
    let cut = TempFile::new("cut", &bomb);
    for f in [&empty, &noise, &magic_only, &cut] {
        assert_play_refuses(&dir, f);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_refuses_a_chunk_that_claims_a_terabyte() {
    let _ = llbus_bin();
    let dir = CountersDir::new("rv-play-bomb");
    let bomb = TempFile::new("bomb", &chunk_bomb());
    assert_play_refuses(&dir, &bomb);
}

// ---------------------------------------------------------------------------------------------
// `llbus record` and `llbus play` against what they are promised (RECORDING.md).

/// A recording of `n` messages of `shape` (`payload` each), `spacing` apart, on topic
/// `rv.play`, whose channel states `fingerprint`.
fn recording(
    name: &str,
    shape: &Shape,
    fingerprint: u64,
    payload: &[u8],
    n: u32,
    spacing: Duration,
) -> TempFile {
    use llbus_record::{Channel, ChannelSchema, FileOptions, FileWriter};
    let file = TempFile::new(name, b"");
    let metadata = std::collections::BTreeMap::from([
        (
            llbus_record::META_TOPIC_ID.to_owned(),
            format!("{:#018x}", llbus::topic_id("rv.play")),
        ),
        (
            llbus_record::META_FINGERPRINT.to_owned(),
            format!("{fingerprint:#018x}"),
        ),
    ]);
    let channel = Channel {
        topic: "rv.play".to_owned(),
        message_encoding: llbus_record::MESSAGE_ENCODING.to_owned(),
        metadata,
        schema: Some(ChannelSchema {
            name: "Px".to_owned(),
            encoding: llbus_record::SCHEMA_ENCODING.to_owned(),
            data: shape.to_bytes().expect("encodes"),
        }),
    };
    let mut w =
        FileWriter::create(&file.0, vec![channel], &FileOptions::default()).expect("creates");
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..n {
        let t = t0 + u64::from(i) * spacing.as_nanos() as u64;
        w.write(0, i + 1, t, t, payload).expect("writes");
    }
    w.finish().expect("finishes");
    file
}

fn px() -> Shape {
    Shape::structure(
        "Px",
        Fields::named([("v", Shape::Primitive(Primitive::U32))]),
    )
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_at_speed_0_plays_everything_at_once() {
    let _ = llbus_bin();
    let dir = CountersDir::new("rv-play-fast");
    let shape = px();
    let file = recording(
        "fast",
        &shape,
        shape.fingerprint(),
        &7u32.to_le_bytes(),
        50,
        Duration::from_millis(200),
    );
    let started = Instant::now();
    let out = llbus(
        &dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("PLAYED messages=50 "), "{text}");
    // 10 s recorded; played at once, then the second of heartbeats.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Neither a negative nor a non-number pace is taken.
    for speed in ["--speed=-1", "--speed=NaN", "--speed=inf"] {
        let out = llbus(&dir, &["play", file.path(), "--bind", "127.0.0.1:0", speed]);
        assert_eq!(out.status.code(), Some(1), "--speed {speed}");
    }
}

/// Fetches topic `topic`'s shape from `publisher` over a real socket (5 s at most).
fn fetch(publisher: SocketAddr, topic: &str) -> Option<Event> {
    let mut socket = UdpEndpoint::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &SocketConfig::default(),
    )
    .expect("binds");
    let mut ep = Endpoint::new(
        &BridgeConfig::default(),
        DEFAULT_MAX_DATAGRAM,
        0x31,
        [2; 32],
        Vec::new(),
        Vec::new(),
    );
    ep.request_schema(llbus::topic_id(topic), publisher);
    let (mut send, mut recv, mut failed) = (SendBatch::new(4), RecvBatch::new(8, 65_536), None);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let now = started.elapsed().as_nanos() as u64 + 1;
        ep.on_timer(
            now,
            &mut SocketWire::new(&mut socket, &mut send, &mut failed),
            &mut NoData,
        );
        let _ = socket.recv_batch(&mut recv);
        for (d, from) in recv.iter() {
            ep.handle(
                d,
                from,
                now,
                &mut SocketWire::new(&mut socket, &mut send, &mut failed),
                &mut NoData,
            );
        }
        if let Some(e) = ep.poll_event() {
            return Some(e);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_never_serves_a_shape_that_fails_its_own_fingerprint() {
    let _ = llbus_bin();
    let shape = px();
    let file = recording(
        "liar",
        &shape,
        shape.fingerprint() ^ 1,
        &7u32.to_le_bytes(),
        5,
        Duration::from_millis(10),
    );
    let port = UdpSocket::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("addr")
        .port();
    let bind = format!("127.0.0.1:{port}");
    let child = std::process::Command::new(llbus_bin())
        .args(["play", file.path(), "--bind", &bind, "--wait-subscriber"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut child = tests::netns::KillOnDrop::new(child);
    std::thread::sleep(Duration::from_millis(300));
    if let Ok(Some(status)) = child.child_mut().try_wait() {
        // Refused at start: what is asked.
        assert_eq!(status.code(), Some(1));
        return;
    }
    let got = fetch(bind.parse().expect("addr"), "rv.play");
    assert!(
        matches!(got, Some(Event::SchemaReceived { .. })),
        "play serves a shape that its fingerprint refuses: {got:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_json_marks_no_gap_for_a_message_that_arrived_but_did_not_decode() {
    let _ = llbus_bin();
    let shape = px();
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.half", &shape, None)],
        vec![7u32.to_le_bytes().to_vec(), vec![1, 2, 3]],
    );
    let dir = CountersDir::new("rv-record-json");
    let out_file = TempFile::new("half", b"");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &addr,
            "--topic",
            "rv.half",
            "--encoding",
            "json",
            "--count",
            "6",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recording = llbus_record::read(&std::fs::read(&out_file.0).expect("reads"));
    let gaps: Vec<String> = recording
        .frames
        .iter()
        .filter(|f| recording.topics[f.topic].topic == llbus_record::GAPS_TOPIC)
        .map(|f| String::from_utf8_lossy(&f.data).into_owned())
        .collect();
    assert!(text.contains(" lost=0 "), "{text}\ngaps: {gaps:?}");
    assert!(gaps.is_empty(), "{text}\ngaps: {gaps:?}");
}

#[test]
fn with_a_key_sealed_requests_get_sealed_answers_no_larger_and_a_replay_gets_nothing() {
    let key = [4; 32];
    let shape = wide(200);
    let publ = HostilePub::start(
        BridgeConfig {
            psk: Some(key),
            ..BridgeConfig::default()
        },
        vec![export("rv.sealed", &shape, None)],
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
    let topic = llbus::topic_id("rv.sealed");
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

/// A channel of topic `topic` with `shape`, stating its own fingerprint.
fn channel(topic: &str, shape: &Shape) -> llbus_record::Channel {
    llbus_record::Channel {
        topic: topic.to_owned(),
        message_encoding: llbus_record::MESSAGE_ENCODING.to_owned(),
        metadata: std::collections::BTreeMap::from([(
            llbus_record::META_FINGERPRINT.to_owned(),
            format!("{:#018x}", shape.fingerprint()),
        )]),
        schema: Some(llbus_record::ChannelSchema {
            name: "X".to_owned(),
            encoding: llbus_record::SCHEMA_ENCODING.to_owned(),
            data: shape.to_bytes().expect("encodes"),
        }),
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_of_a_recording_with_one_topic_on_two_channels_and_an_oversized_message_does_not_crash() {
    use llbus_record::{FileOptions, FileWriter};
    let _ = llbus_bin();
    let dir = CountersDir::new("rv-play-dup");
    let file = TempFile::new("dup", b"");
    let a = px();
    let b = Shape::Str;
    let mut w = FileWriter::create(
        &file.0,
        vec![channel("rv.dup", &a), channel("rv.dup", &b)],
        &FileOptions::default(),
    )
    .expect("creates");
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..20u32 {
        let t = t0 + u64::from(i) * 1_000_000;
        w.write(0, i, t, t, &i.to_le_bytes()).expect("writes");
        w.write(1, i, t, t, &[1, 0, 0, 0, 0, 0, 0, 0, b'x'])
            .expect("writes");
    }
    // 20 MiB: more than a publisher may send (16 MiB).
    w.write(
        0,
        99,
        t0 + 30_000_000,
        t0 + 30_000_000,
        &vec![0u8; 20 << 20],
    )
    .expect("writes");
    w.finish().expect("finishes");
    let out = llbus(
        &dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("status {:?}\nstdout {text}\nstderr {err}", out.status);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn fetches_are_bounded_and_an_unanswered_one_asks_ten_times_then_fails() {
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

#[test]
#[cfg_attr(miri, ignore)]
fn echo_output_of_an_empty_message_stays_small() {
    let _ = llbus_bin();
    let shape = long_names(30_000, 2_000);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.bomb", &shape, None)],
        vec![Vec::new()],
    );
    let dir = CountersDir::new("rv-echo-bomb");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "rv.bomb",
            "--count",
            "1",
            "--duration-s",
            "5",
            "--setup-timeout-s",
            "5",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.len() < 1 << 20,
        "one empty message printed as {} bytes",
        out.stdout.len()
    );
}

/// A type nested 71 levels deep: its shape cannot be served.
#[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
#[message(topic = "rv.deep")]
#[allow(clippy::type_complexity)] // The point: a type nested too deep.
struct Deep {
    v: Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<Option<u8>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>,
}

#[test]
fn a_bridge_refuses_at_start_a_type_too_deep_to_describe() {
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

#[test]
#[cfg_attr(miri, ignore)]
fn record_of_a_topic_named_twice_records_it_or_says_why() {
    let _ = llbus_bin();
    let shape = px();
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("rv.twice", &shape, None)],
        vec![7u32.to_le_bytes().to_vec()],
    );
    let dir = CountersDir::new("rv-record-twice");
    let out_file = TempFile::new("twice", b"");
    let addr = publ.addr.to_string();
    let started = Instant::now();
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &addr,
            "--topic",
            "rv.twice",
            "--topic",
            "rv.twice",
            "--count",
            "4",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "4",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // Recorded once, or refused for what it is (not blamed on the allowlist).
    if out.status.success() {
        assert!(text.contains("RECORDED messages=4 "), "{text}");
    } else {
        assert!(!err.contains("allowlist"), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// The resident memory of process `pid`, in bytes (0 if it is gone).
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_holds_bounded_memory_while_a_publisher_withholds_one_subscription() {
    let _ = llbus_bin();
    let shape = Shape::structure(
        "Blob",
        Fields::named([("b", Shape::Vec(Box::new(Shape::Primitive(Primitive::U8))))]),
    );
    let mut blob = 60_000u64.to_le_bytes().to_vec();
    blob.resize(8 + 60_000, 0x42);
    let publ = HostilePub::start_with(
        BridgeConfig::default(),
        vec![
            export("rv.mem.a", &shape, None),
            export("rv.mem.b", &shape, None),
        ],
        vec![blob],
        Some(llbus::topic_id("rv.mem.b")),
        32,
    );
    let out_file = TempFile::new("mem", b"");
    let addr = publ.addr.to_string();
    let child = std::process::Command::new(llbus_bin())
        .args([
            "record",
            "--publisher",
            &addr,
            "--topic",
            "rv.mem.a",
            "--topic",
            "rv.mem.b",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "8",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let mut child = tests::netns::KillOnDrop::new(child);
    let mut peak = 0u64;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(12) {
        peak = peak.max(rss(pid));
        if let Ok(Some(_)) = child.child_mut().try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What arrives before every subscription is up is held for the file, up to 65536
    // messages of up to 16 MiB each: a bound in bytes is what keeps a hostile publisher from
    // filling the memory during the setup timeout.
    assert!(peak < 64 << 20, "llbus record grew to {} MiB", peak >> 20);
}
