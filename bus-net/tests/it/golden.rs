//! Golden bytes of both dialects, encode and decode. Every vector here is also written out in
//! `docs/PROTOCOL.md` (a line `vector NAME` followed by hex lines); the test reads the document
//! and checks each one verbatim, so the specification and the code cannot drift apart.

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, encode_payload, encode_reply,
    encode_request, parse_datagram, split_fragments, Announce, AnnounceHead, BatchEncoder,
    CallMeta, CallStatus, CompatControl, Control, Cookie, DataMeta, Flags, FrameMac, GroupOffer,
    Header, Kind, Nak, Query, Reassembled, Reassembler, ReassemblyConfig, Refusal, RefuseReason,
    ReplyFrame, RequestFrame, SchemaReply, SchemaRequest, Unavailable, DEFAULT_MAX_DATAGRAM,
    DEFAULT_MAX_MESSAGE, MAC_TAG_LEN, TOKEN_LEN,
};
use serde::{Deserialize, Serialize};

const PROTOCOL_MD: &str = include_str!("../../../docs/PROTOCOL.md");

/// The example message of the vectors: a quote.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Quote {
    px: i64,
    qty: u32,
}

const TOPIC: u64 = 0x1122_3344_5566_7788;
const FP: u64 = 0x0102_0304_0506_0708;
const SESSION: u64 = 0xa1a2_a3a4_a5a6_a7a8;
const SUB_SESSION: u64 = 0xb1b2_b3b4_b5b6_b7b8;
const TS: i64 = 1_700_000_000_000_000_000;
/// The example cookie: bytes `c0` to `cf`.
const COOKIE: Cookie = Cookie([
    0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
]);

/// The example nonce of the subscribe, echoed by its answers.
const NONCE: u64 = 0xd1d2_d3d4_d5d6_d7d8;

/// The example subscription token.
const TOKEN: u64 = 0xe1e2_e3e4_e5e6_e7e8;

/// The example pre-shared key: bytes `00` to `1f`.
fn psk() -> [u8; 32] {
    core::array::from_fn(|i| i as u8)
}

fn heartbeat() -> Control {
    Control::Heartbeat {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SESSION,
        last_seq: 2,
        timestamp_ns: TS,
    }
}

/// The heartbeat, sealed with the example key.
fn sealed_heartbeat() -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
    enc.push_control(&heartbeat()).unwrap();
    let len = enc.len();
    let len = FrameMac::new(&psk()).seal(&mut buf, len).unwrap();
    buf[..len].to_vec()
}

fn meta(seq: u64) -> DataMeta {
    DataMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SESSION,
        seq,
        timestamp_ns: TS,
    }
}

fn encode(f: impl FnOnce(&mut BatchEncoder<'_>)) -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    f(&mut enc);
    enc.as_bytes().to_vec()
}

fn nak() -> Nak {
    Nak {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SUB_SESSION,
        cookie: COOKIE,
        nonce: NONCE,
        first: 5,
        last: 9,
    }
}

fn unavailable() -> Unavailable {
    Unavailable {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SESSION,
        nonce: NONCE,
        first: 5,
        last: 6,
    }
}

/// Fragment `index` of the example quote cut for 72-byte datagrams (8-byte pieces), as
/// sequence number 7 + index.
fn fragment(index: usize) -> Vec<u8> {
    let mut scratch = Vec::new();
    let quote = Quote { px: 100, qty: 5 };
    let payload = encode_payload(TOPIC, &quote, &mut scratch, DEFAULT_MAX_MESSAGE).unwrap();
    let (h, piece) = split_fragments(payload, 72).unwrap().nth(index).unwrap();
    encode(|e| e.push_fragment(meta(7 + index as u64), &h, piece).unwrap())
}

/// What a publisher without a key sends a subscriber: `f`'s frames, marked
/// [`Flags::TOKEN`], then the subscription token.
fn encode_tokened(f: impl FnOnce(&mut BatchEncoder<'_>)) -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - TOKEN_LEN]).with_token(true);
    f(&mut enc);
    let mut bytes = enc.as_bytes().to_vec();
    bytes.extend(TOKEN.to_le_bytes());
    bytes
}

/// A frame of a service (`f` writes it into the room before the token), then the token.
fn service_frame(f: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM - TOKEN_LEN];
    let n = f(&mut buf);
    let mut bytes = buf[..n].to_vec();
    bytes.extend(TOKEN.to_le_bytes());
    bytes
}

fn call_meta(session: u64) -> CallMeta {
    CallMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
    }
}

fn native_vectors() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "native-request-token",
            service_frame(|b| {
                let quote = Quote { px: 100, qty: 5 };
                encode_request(b, call_meta(SUB_SESSION), true, 42, 1500, &quote).unwrap()
            }),
        ),
        (
            "native-reply-token",
            service_frame(|b| {
                let quote = Quote { px: 100, qty: 5 };
                encode_reply(b, call_meta(SESSION), true, 42, Ok(&quote)).unwrap()
            }),
        ),
        (
            "native-reply-over-budget",
            service_frame(|b| {
                let over = Err(CallStatus::OverBudget);
                encode_reply::<Quote>(b, call_meta(SESSION), true, 42, over).unwrap()
            }),
        ),
        (
            "native-data-token",
            encode_tokened(|e| e.push_data(meta(1), &Quote { px: 100, qty: 5 }).unwrap()),
        ),
        (
            "native-heartbeat-token",
            encode_tokened(|e| e.push_control(&heartbeat()).unwrap()),
        ),
        (
            "native-refuse-host-full",
            encode(|e| {
                let c = Control::Refuse(Refusal {
                    topic_id: TOPIC,
                    requested: FP,
                    offered: FP,
                    session: SESSION,
                    reason: RefuseReason::HostFull,
                    nonce: NONCE,
                });
                e.push_control(&c).unwrap()
            }),
        ),
        ("native-fragment-0", fragment(0)),
        ("native-fragment-1", fragment(1)),
        ("native-nak", encode(|e| e.push_nak(&nak()).unwrap())),
        ("native-announce", encode(push_announce)),
        (
            "native-group-token",
            encode_tokened(|e| e.push_group_offer(&group_offer()).unwrap()),
        ),
        (
            "native-query",
            encode(|e| e.push_query(SUB_SESSION, TOPIC, 8).unwrap()),
        ),
        (
            "native-unavailable",
            encode(|e| e.push_unavailable(&unavailable()).unwrap()),
        ),
        (
            "native-data",
            encode(|e| e.push_data(meta(1), &Quote { px: 100, qty: 5 }).unwrap()),
        ),
        (
            "native-data-batch",
            encode(|e| {
                e.push_data(meta(1), &Quote { px: 100, qty: 5 }).unwrap();
                e.push_data(meta(2), &Quote { px: -1, qty: 7 }).unwrap();
            }),
        ),
        (
            "native-subscribe",
            encode(|e| {
                let c = Control::Subscribe {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SUB_SESSION,
                    nonce: NONCE,
                    cookie: None,
                };
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-cookie-challenge",
            encode(|e| {
                let c = Control::CookieChallenge {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SESSION,
                    nonce: NONCE,
                    cookie: COOKIE,
                };
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-subscribe-cookie",
            encode(|e| {
                let c = Control::Subscribe {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SUB_SESSION,
                    nonce: NONCE,
                    cookie: Some(COOKIE),
                };
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-subscribe-ack",
            encode(|e| {
                let c = Control::SubscribeAck {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SESSION,
                    nonce: NONCE,
                    last_seq: 41,
                    cookie: COOKIE,
                    token: TOKEN,
                };
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-refuse-mismatch",
            encode(|e| {
                let c = Control::Refuse(Refusal {
                    topic_id: TOPIC,
                    requested: FP,
                    offered: 0xf1f2_f3f4_f5f6_f7f8,
                    session: SESSION,
                    nonce: NONCE,
                    reason: RefuseReason::FingerprintMismatch,
                });
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-unsubscribe",
            encode(|e| {
                let c = Control::Unsubscribe {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SUB_SESSION,
                    nonce: NONCE,
                    cookie: Some(COOKIE),
                };
                e.push_control(&c).unwrap()
            }),
        ),
        (
            "native-heartbeat",
            encode(|e| e.push_control(&heartbeat()).unwrap()),
        ),
        ("native-heartbeat-mac", sealed_heartbeat()),
        (
            "native-schema-request",
            encode(|e| e.push_schema_request(&schema_request()).unwrap()),
        ),
        (
            "native-schema-reply",
            encode(|e| e.push_schema_reply(&schema_reply(&U64_SHAPE)).unwrap()),
        ),
    ]
}

/// The encoded shape of a `u64`: one node (a `u64` count), variant 0, primitive 3.
const U64_SHAPE: [u8; 16] = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0];

fn schema_request() -> SchemaRequest {
    SchemaRequest {
        topic_id: TOPIC,
        session: SUB_SESSION,
        nonce: NONCE,
        offset: 0,
        room: 16,
    }
}

fn schema_reply(page: &[u8]) -> SchemaReply<'_> {
    SchemaReply {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SESSION,
        nonce: NONCE,
        total: 16,
        offset: 0,
        page,
    }
}

fn compat_vectors() -> Vec<(&'static str, Vec<u8>)> {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let n = encode_compat_packet(&mut buf, 0, &42i64, TS).unwrap();
    let i64_packet = buf[..n].to_vec();
    let n = encode_compat_packet(&mut buf, 0, &Quote { px: 100, qty: 5 }, TS).unwrap();
    let quote_packet = buf[..n].to_vec();
    let n = encode_compat_packet(&mut buf, 0, "hi", TS).unwrap();
    let str_packet = buf[..n].to_vec();
    vec![
        ("compat-data-i64", i64_packet),
        ("compat-data-quote", quote_packet),
        ("compat-data-string", str_packet),
        (
            "compat-subscribe",
            CompatControl::Subscribe.encode().to_vec(),
        ),
        (
            "compat-unsubscribe",
            CompatControl::Unsubscribe.encode().to_vec(),
        ),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex of vector `name` in PROTOCOL.md, whitespace removed.
fn documented(name: &str) -> Option<String> {
    let marker = format!("vector {name}");
    let mut lines = PROTOCOL_MD.lines().skip_while(|l| l.trim() != marker);
    lines.next()?;
    let hex: String = lines
        .take_while(|l| {
            !l.trim().is_empty()
                && !l.trim_start().starts_with("```")
                && !l.trim_start().starts_with("vector ")
        })
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    Some(hex)
}

#[test]
fn every_vector_is_documented_verbatim() {
    let mut missing = Vec::new();
    for (name, bytes) in native_vectors().into_iter().chain(compat_vectors()) {
        match documented(name) {
            Some(doc) if doc == hex(&bytes) => {}
            Some(doc) => missing.push(format!("{name}: doc {doc}\n  code {}", hex(&bytes))),
            None => missing.push(format!("{name}: not in PROTOCOL.md; code {}", hex(&bytes))),
        }
    }
    assert!(missing.is_empty(), "\n{}", missing.join("\n"));
}

/// The bytes of vector `name`, from the document (not from the encoder).
fn doc_bytes(name: &str) -> Vec<u8> {
    let hex = documented(name).unwrap_or_else(|| panic!("vector {name} missing"));
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn header(kind: Kind, payload_len: u16, session: u64, seq: u64, timestamp_ns: i64) -> Header {
    Header {
        kind,
        flags: Flags::NONE,
        payload_len,
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        seq,
        timestamp_ns,
    }
}

#[test]
fn tokened_data_and_heartbeat_decode_with_their_token() {
    for name in ["native-data-token", "native-heartbeat-token"] {
        let bytes = doc_bytes(name);
        let frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
        assert_eq!(frames.token(), Some(TOKEN), "{name}");
        let frames: Vec<_> = frames.collect();
        assert_eq!(frames.len(), 1);
        assert!(frames[0].header.flags.token(), "{name}");
    }
    let data = doc_bytes("native-data-token");
    assert_eq!(data.len(), 60 + TOKEN_LEN);
    let frame = parse_datagram(&data, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(
        decode_payload::<Quote>(frame.payload),
        Ok(Quote { px: 100, qty: 5 })
    );
    match Control::from_frame(&one_frame("native-subscribe-ack")) {
        Ok(Control::SubscribeAck { token, .. }) => assert_eq!(token, TOKEN),
        other => panic!("{other:?}"),
    }
    match Control::from_frame(&one_frame("native-refuse-host-full")) {
        Ok(Control::Refuse(r)) => assert_eq!(r.reason, RefuseReason::HostFull),
        other => panic!("{other:?}"),
    }
}

/// The one frame of vector `name`, owned (its payload leaked for the test's lifetime).
fn one_frame(name: &str) -> llbus_net::Frame<'static> {
    let bytes: &'static [u8] = Vec::leak(doc_bytes(name));
    parse_datagram(bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap()
}

#[test]
fn native_data_decodes() {
    let bytes = doc_bytes("native-data");
    assert_eq!(bytes.len(), 60);
    let frames: Vec<_> = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .collect();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].header, header(Kind::Data, 12, SESSION, 1, TS));
    assert_eq!(
        decode_payload::<Quote>(frames[0].payload),
        Ok(Quote { px: 100, qty: 5 })
    );
}

#[test]
fn native_batch_decodes() {
    let bytes = doc_bytes("native-data-batch");
    let frames: Vec<_> = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .collect();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].header, header(Kind::Data, 12, SESSION, 2, TS));
    let quotes: Vec<Quote> = frames
        .iter()
        .map(|f| decode_payload(f.payload).unwrap())
        .collect();
    assert_eq!(
        quotes,
        [Quote { px: 100, qty: 5 }, Quote { px: -1, qty: 7 }]
    );
}

#[test]
fn native_control_decodes() {
    let one = |name: &str| {
        let bytes = doc_bytes(name);
        let mut frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
        assert_eq!(frames.remaining(), 1);
        Control::from_frame(&frames.next().unwrap()).unwrap()
    };
    assert_eq!(
        one("native-subscribe"),
        Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: None,
        }
    );
    assert_eq!(
        one("native-cookie-challenge"),
        Control::CookieChallenge {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SESSION,
            nonce: NONCE,
            cookie: COOKIE,
        }
    );
    assert_eq!(
        one("native-subscribe-cookie"),
        Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: Some(COOKIE),
        }
    );
    assert_eq!(
        one("native-subscribe-ack"),
        Control::SubscribeAck {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SESSION,
            nonce: NONCE,
            last_seq: 41,
            cookie: COOKIE,
            token: TOKEN,
        }
    );
    assert_eq!(
        one("native-unsubscribe"),
        Control::Unsubscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: Some(COOKIE),
        }
    );
    // Every answer to a subscribe is exactly as long as the subscribe: no amplification.
    let hello = doc_bytes("native-subscribe").len();
    for answer in [
        "native-cookie-challenge",
        "native-subscribe-ack",
        "native-refuse-mismatch",
    ] {
        assert_eq!(doc_bytes(answer).len(), hello, "{answer}");
    }
    // The sealed heartbeat opens with the key, and only with it.
    let sealed = doc_bytes("native-heartbeat-mac");
    let mut frames = FrameMac::new(&psk())
        .open(&sealed, DEFAULT_MAX_DATAGRAM)
        .unwrap();
    let frame = frames.next().unwrap();
    assert!(frame.header.flags.mac());
    assert_eq!(Control::from_frame(&frame), Ok(heartbeat()));
    assert!(parse_datagram(&sealed, DEFAULT_MAX_DATAGRAM).is_err());
    assert_eq!(
        one("native-heartbeat"),
        Control::Heartbeat {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SESSION,
            last_seq: 2,
            timestamp_ns: TS
        }
    );
    let Control::Refuse(refusal) = one("native-refuse-mismatch") else {
        panic!("not a refusal")
    };
    assert_eq!(
        refusal,
        Refusal {
            topic_id: TOPIC,
            requested: FP,
            offered: 0xf1f2_f3f4_f5f6_f7f8,
            session: SESSION,
            nonce: NONCE,
            reason: RefuseReason::FingerprintMismatch
        }
    );
    assert_eq!(
        refusal.to_string(),
        "publisher refused topic 0x1122334455667788: schema fingerprint mismatch (ours \
         0x0102030405060708, theirs 0xf1f2f3f4f5f6f7f8); build both sides with the same message type"
    );
}

#[test]
fn compat_decodes() {
    let bytes = doc_bytes("compat-data-i64");
    assert_eq!(bytes.len(), 16);
    assert_eq!(
        decode_compat_packet::<i64>(&bytes, DEFAULT_MAX_DATAGRAM),
        Ok((42, TS))
    );
    let bytes = doc_bytes("compat-data-quote");
    assert_eq!(
        decode_compat_packet::<Quote>(&bytes, DEFAULT_MAX_DATAGRAM),
        Ok((Quote { px: 100, qty: 5 }, TS))
    );
    let bytes = doc_bytes("compat-data-string");
    assert_eq!(
        decode_compat_packet::<String>(&bytes, DEFAULT_MAX_DATAGRAM),
        Ok(("hi".to_owned(), TS))
    );
    // Trailing bytes are allowed, as bincode 1 allowed them.
    let mut long = doc_bytes("compat-data-i64");
    long.extend_from_slice(&[0xee; 5]);
    assert_eq!(
        decode_compat_packet::<i64>(&long, DEFAULT_MAX_DATAGRAM),
        Ok((42, TS))
    );
    assert_eq!(
        CompatControl::decode(&doc_bytes("compat-subscribe")),
        Ok(CompatControl::Subscribe)
    );
    assert_eq!(
        CompatControl::decode(&doc_bytes("compat-unsubscribe")),
        Ok(CompatControl::Unsubscribe)
    );
}

/// The example announcement: the publisher session's first, announcing the quote topic
/// (reliable, named `md.quote`) at port 7000 of the datagram's source, no data group, every
/// second, after 5 s of uptime.
fn push_announce(e: &mut BatchEncoder<'_>) {
    let head = AnnounceHead {
        session: SESSION,
        seq: 1,
        timestamp_ns: TS,
        period_ms: 1000,
        uptime_ms: 5000,
        data: "0.0.0.0:7000".parse().unwrap(),
        group: None,
    };
    let mut scratch = [0u8; 256];
    let topics = [(TOPIC, FP, llbus_net::ENTRY_RELIABLE, "md.quote")];
    e.push_announce(&head, 0, 1, topics.iter().copied(), &mut scratch)
        .unwrap();
}

/// The example group offer: data of the quote topic also goes to `239.255.0.1:7600`, with
/// group token `0x0f0e0d0c0b0a0908`.
fn group_offer() -> GroupOffer {
    GroupOffer {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SESSION,
        group: "239.255.0.1:7600".parse().unwrap(),
        token: 0x0f0e_0d0c_0b0a_0908,
    }
}

#[test]
fn native_group_offer_decodes_with_its_token() {
    let bytes = doc_bytes("native-group-token");
    let frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
    assert_eq!(frames.token(), Some(TOKEN));
    let frame = frames.into_iter().next().unwrap();
    assert_eq!(GroupOffer::from_frame(&frame), Ok(group_offer()));
}

#[test]
fn native_discovery_frames_decode() {
    let frame = one_frame("native-announce");
    let announce = Announce::from_frame(&frame).unwrap();
    assert_eq!((announce.session, announce.seq), (SESSION, 1));
    assert_eq!((announce.period_ms, announce.uptime_ms), (1000, 5000));
    let src = "10.1.2.3:40000".parse().unwrap();
    assert_eq!(
        announce.data_from(src),
        Some("10.1.2.3:7000".parse().unwrap())
    );
    let topics: Vec<_> = announce
        .topics()
        .map(|t| (t.topic_id, t.fingerprint, t.reliable, t.name.to_vec()))
        .collect();
    assert_eq!(topics, [(TOPIC, FP, true, b"md.quote".to_vec())]);
    let query = Query::from_frame(&one_frame("native-query")).unwrap();
    assert_eq!((query.session, query.topic_id), (SUB_SESSION, TOPIC));
}

#[test]
fn native_reliable_frames_decode() {
    let bytes = doc_bytes("native-nak");
    let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(frame.header.kind, Kind::Nak);
    assert_eq!(Nak::from_frame(&frame), Ok(nak()));
    let answer = doc_bytes("native-unavailable");
    let frame = parse_datagram(&answer, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(Unavailable::from_frame(&frame), Ok(unavailable()));
    // The answer is shorter than the NAK: no amplification.
    assert!(answer.len() < bytes.len());
}

#[test]
fn native_schema_frames_decode_and_the_reply_is_no_larger() {
    let request = doc_bytes("native-schema-request");
    let frame = parse_datagram(&request, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(SchemaRequest::from_frame(&frame), Ok(schema_request()));
    let reply = doc_bytes("native-schema-reply");
    let frame = parse_datagram(&reply, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(
        SchemaReply::from_frame(&frame),
        Ok(schema_reply(&U64_SHAPE))
    );
    assert_eq!(
        llbus::schema::Shape::from_bytes(&U64_SHAPE),
        Ok(llbus::schema::Shape::Primitive(
            llbus::schema::Primitive::U64
        ))
    );
    assert!(reply.len() <= request.len());
}

#[test]
fn native_fragments_reassemble() {
    let mut r = Reassembler::new(&ReassemblyConfig::default());
    let mut out = None;
    // In either order.
    for name in ["native-fragment-1", "native-fragment-0"] {
        let bytes = doc_bytes(name);
        let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
            .unwrap()
            .next()
            .unwrap();
        assert_eq!(frame.header.kind, Kind::Fragment);
        if let Reassembled::Complete(m) = r
            .on_fragment(frame.header.session, frame.header.seq, frame.payload, 0)
            .unwrap()
        {
            out = Some(decode_payload::<Quote>(m).unwrap());
        }
    }
    assert_eq!(out, Some(Quote { px: 100, qty: 5 }));
}

#[test]
fn native_service_frames_decode_with_their_token() {
    let bytes = doc_bytes("native-request-token");
    let mut frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
    assert_eq!(frames.token(), Some(TOKEN));
    let frame = frames.next().unwrap();
    assert_eq!(frame.header.kind, Kind::Request);
    assert_eq!(frame.header.session, SUB_SESSION);
    let request = RequestFrame::from_frame(&frame).unwrap();
    assert_eq!((request.call, request.budget_ms), (42, 1500));
    assert_eq!(
        decode_payload::<Quote>(request.body).unwrap(),
        Quote { px: 100, qty: 5 }
    );

    let bytes = doc_bytes("native-reply-token");
    let mut frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
    assert_eq!(frames.token(), Some(TOKEN));
    let reply = ReplyFrame::from_frame(&frames.next().unwrap()).unwrap();
    assert_eq!((reply.call, reply.status), (42, CallStatus::Ok));
    assert_eq!(
        decode_payload::<Quote>(reply.body).unwrap(),
        Quote { px: 100, qty: 5 }
    );

    let bytes = doc_bytes("native-reply-over-budget");
    assert_eq!(bytes.len(), 65);
    let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    let reply = ReplyFrame::from_frame(&frame).unwrap();
    assert_eq!(
        (reply.call, reply.status, reply.body.len()),
        (42, CallStatus::OverBudget, 0)
    );
}
