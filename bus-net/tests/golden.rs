//! Golden bytes of both dialects, encode and decode. Every vector here is also written out in
//! `docs/PROTOCOL.md` (a line `vector NAME` followed by hex lines); the test reads the document
//! and checks each one verbatim, so the specification and the code cannot drift apart.

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, encode_payload, parse_datagram,
    split_fragments, BatchEncoder, CompatControl, Control, Cookie, DataMeta, Flags, FrameMac,
    Header, Kind, Nak, Reassembled, Reassembler, ReassemblyConfig, Refusal, RefuseReason,
    Unavailable, DEFAULT_MAX_DATAGRAM, DEFAULT_MAX_MESSAGE, MAC_TAG_LEN,
};
use serde::{Deserialize, Serialize};

const PROTOCOL_MD: &str = include_str!("../../docs/PROTOCOL.md");

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

fn v1_vectors() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("v2-fragment-0", fragment(0)),
        ("v2-fragment-1", fragment(1)),
        ("v2-nak", encode(|e| e.push_nak(&nak()).unwrap())),
        (
            "v2-unavailable",
            encode(|e| e.push_unavailable(&unavailable()).unwrap()),
        ),
        (
            "v1-data",
            encode(|e| e.push_data(meta(1), &Quote { px: 100, qty: 5 }).unwrap()),
        ),
        (
            "v1-data-batch",
            encode(|e| {
                e.push_data(meta(1), &Quote { px: 100, qty: 5 }).unwrap();
                e.push_data(meta(2), &Quote { px: -1, qty: 7 }).unwrap();
            }),
        ),
        (
            "v1-subscribe",
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
            "v1-cookie-challenge",
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
            "v1-subscribe-cookie",
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
            "v1-subscribe-ack",
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
            "v1-refuse-mismatch",
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
            "v1-unsubscribe",
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
            "v1-heartbeat",
            encode(|e| e.push_control(&heartbeat()).unwrap()),
        ),
        ("v1-heartbeat-mac", sealed_heartbeat()),
    ]
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
    for (name, bytes) in v1_vectors().into_iter().chain(compat_vectors()) {
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
fn v1_data_decodes() {
    let bytes = doc_bytes("v1-data");
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
fn v1_batch_decodes() {
    let bytes = doc_bytes("v1-data-batch");
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
fn v1_control_decodes() {
    let one = |name: &str| {
        let bytes = doc_bytes(name);
        let mut frames = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM).unwrap();
        assert_eq!(frames.remaining(), 1);
        Control::from_frame(&frames.next().unwrap()).unwrap()
    };
    assert_eq!(
        one("v1-subscribe"),
        Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: None,
        }
    );
    assert_eq!(
        one("v1-cookie-challenge"),
        Control::CookieChallenge {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SESSION,
            nonce: NONCE,
            cookie: COOKIE,
        }
    );
    assert_eq!(
        one("v1-subscribe-cookie"),
        Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: Some(COOKIE),
        }
    );
    assert_eq!(
        one("v1-subscribe-ack"),
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
        one("v1-unsubscribe"),
        Control::Unsubscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SUB_SESSION,
            nonce: NONCE,
            cookie: Some(COOKIE),
        }
    );
    // Every answer to a subscribe is exactly as long as the subscribe: no amplification.
    let hello = doc_bytes("v1-subscribe").len();
    for answer in [
        "v1-cookie-challenge",
        "v1-subscribe-ack",
        "v1-refuse-mismatch",
    ] {
        assert_eq!(doc_bytes(answer).len(), hello, "{answer}");
    }
    // The sealed heartbeat opens with the key, and only with it.
    let sealed = doc_bytes("v1-heartbeat-mac");
    let mut frames = FrameMac::new(&psk())
        .open(&sealed, DEFAULT_MAX_DATAGRAM)
        .unwrap();
    let frame = frames.next().unwrap();
    assert!(frame.header.flags.mac());
    assert_eq!(Control::from_frame(&frame), Ok(heartbeat()));
    assert!(parse_datagram(&sealed, DEFAULT_MAX_DATAGRAM).is_err());
    assert_eq!(
        one("v1-heartbeat"),
        Control::Heartbeat {
            topic_id: TOPIC,
            fingerprint: FP,
            session: SESSION,
            last_seq: 2,
            timestamp_ns: TS
        }
    );
    let Control::Refuse(refusal) = one("v1-refuse-mismatch") else {
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

#[test]
fn v2_reliable_frames_decode() {
    let bytes = doc_bytes("v2-nak");
    let frame = parse_datagram(&bytes, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(frame.header.kind, Kind::Nak);
    assert_eq!(Nak::from_frame(&frame), Ok(nak()));
    let answer = doc_bytes("v2-unavailable");
    let frame = parse_datagram(&answer, DEFAULT_MAX_DATAGRAM)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(Unavailable::from_frame(&frame), Ok(unavailable()));
    // The answer is shorter than the NAK: no amplification.
    assert!(answer.len() < bytes.len());
}

#[test]
fn v2_fragments_reassemble() {
    let mut r = Reassembler::new(&ReassemblyConfig::default());
    let mut out = None;
    // In either order.
    for name in ["v2-fragment-1", "v2-fragment-0"] {
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
