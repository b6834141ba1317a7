//! Property tests: arbitrary bytes into every decoder never panic, and arbitrary messages,
//! headers and control frames survive a round trip in both dialects. Sequence tracking is
//! checked against a set-based model; cookies, the MAC, the allowlist and the rate limiter
//! against their definitions.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, parse_datagram, Allowlist,
    BatchEncoder, Cidr, CompatControl, Control, Cookie, CookieJar, DataMeta, EncodeError, Flags,
    FrameMac, Header, Kind, LatePolicy, RateLimit, RateLimiter, Refusal, RefuseReason, SeqTracker,
    DEFAULT_COOKIE_WINDOW, HEADER_LEN, MAC_TAG_LEN, MAX_DATAGRAM_LIMIT,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Msg {
    a: u64,
    b: i32,
    s: String,
    v: Vec<u16>,
    o: Option<bool>,
    e: Side,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Side {
    Bid,
    Ask(u8),
}

fn msg() -> impl Strategy<Value = Msg> {
    (
        any::<u64>(),
        any::<i32>(),
        ".{0,40}",
        prop::collection::vec(any::<u16>(), 0..40),
        any::<Option<bool>>(),
        prop_oneof![Just(Side::Bid), any::<u8>().prop_map(Side::Ask)],
    )
        .prop_map(|(a, b, s, v, o, e)| Msg { a, b, s, v, o, e })
}

fn meta() -> impl Strategy<Value = DataMeta> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<i64>(),
    )
        .prop_map(
            |(topic_id, fingerprint, session, seq, timestamp_ns)| DataMeta {
                topic_id,
                fingerprint,
                session,
                seq,
                timestamp_ns,
            },
        )
}

fn cookie() -> impl Strategy<Value = Cookie> {
    any::<[u8; 16]>().prop_map(Cookie)
}

fn control() -> impl Strategy<Value = Control> {
    let ids = (any::<u64>(), any::<u64>(), any::<u64>());
    let nonce = any::<u64>();
    prop_oneof![
        (ids, nonce, prop::option::of(cookie())).prop_map(
            |((topic_id, fingerprint, session), nonce, cookie)| {
                Control::Subscribe {
                    topic_id,
                    fingerprint,
                    session,
                    nonce,
                    cookie,
                }
            }
        ),
        (ids, nonce, prop::option::of(cookie())).prop_map(
            |((topic_id, fingerprint, session), nonce, cookie)| {
                Control::Unsubscribe {
                    topic_id,
                    fingerprint,
                    session,
                    nonce,
                    cookie,
                }
            }
        ),
        (ids, nonce, cookie()).prop_map(|((topic_id, fingerprint, session), nonce, cookie)| {
            Control::CookieChallenge {
                topic_id,
                fingerprint,
                session,
                nonce,
                cookie,
            }
        }),
        (ids, any::<u64>(), nonce, cookie(), any::<u64>()).prop_map(
            |((topic_id, fingerprint, session), last_seq, nonce, cookie, token)| {
                Control::SubscribeAck {
                    topic_id,
                    fingerprint,
                    session,
                    last_seq,
                    nonce,
                    cookie,
                    token,
                }
            }
        ),
        (ids, any::<u64>(), any::<i64>()).prop_map(
            |((topic_id, fingerprint, session), last_seq, timestamp_ns)| Control::Heartbeat {
                topic_id,
                fingerprint,
                session,
                last_seq,
                timestamp_ns
            }
        ),
        (ids, any::<u64>(), nonce, 0..4usize).prop_map(
            |((topic_id, requested, session), offered, nonce, r)| {
                let reason = [
                    RefuseReason::UnknownTopic,
                    RefuseReason::FingerprintMismatch,
                    RefuseReason::TableFull,
                    RefuseReason::TopicFull,
                ][r];
                Control::Refuse(Refusal {
                    topic_id,
                    requested,
                    offered,
                    session,
                    reason,
                    nonce,
                })
            }
        ),
    ]
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

/// Runs every decoder over `bytes`; only panics would fail.
fn decode_everything(bytes: &[u8]) {
    let from: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let mut jar = CookieJar::new([1; 32], DEFAULT_COOKIE_WINDOW);
    for mac in [
        FrameMac::new(&[2; 32]),
        FrameMac::new(&[2; 32]).control_only(),
    ] {
        if let Ok(frames) = mac.open(bytes, MAX_DATAGRAM_LIMIT) {
            for frame in frames {
                let _ = Control::from_frame(&frame);
                let _ = decode_payload::<Msg>(frame.payload);
            }
        }
    }
    for max in [1472, MAX_DATAGRAM_LIMIT] {
        if let Ok(frames) = parse_datagram(bytes, max) {
            let n = frames.remaining();
            let mut seen = 0;
            for frame in frames {
                seen += 1;
                if let Ok(Control::Subscribe {
                    cookie: Some(c), ..
                }) = Control::from_frame(&frame)
                {
                    // A cookie out of thin air does not verify (2^-128 chance of a false pass).
                    assert!(!jar.verify(from, &c, 0));
                }
                let _ = decode_payload::<Msg>(frame.payload);
                let _ = decode_payload::<String>(frame.payload);
                let _ = decode_payload::<Vec<Vec<u64>>>(frame.payload);
                let _ = decode_payload::<(Option<u8>, bool, char, f64)>(frame.payload);
            }
            assert_eq!(seen, n);
        }
    }
    let _ = decode_payload::<Msg>(bytes);
    let _ = decode_payload::<Vec<String>>(bytes);
    let _ = decode_compat_packet::<i64>(bytes, 1472);
    let _ = decode_compat_packet::<Msg>(bytes, 1472);
    let _ = decode_compat_packet::<Vec<String>>(bytes, MAX_DATAGRAM_LIMIT);
    let _ = CompatControl::decode(bytes);
    if let Some(head) = bytes.first_chunk::<HEADER_LEN>() {
        let _ = Header::read(head);
    }
    let text = String::from_utf8_lossy(bytes);
    let _ = text.parse::<Allowlist>();
    let _ = text.parse::<Cidr>();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        decode_everything(&bytes);
    }

    /// Valid datagrams with a few bytes changed and an arbitrary cut: reaches far deeper into
    /// the decoders than random bytes, which rarely start with the magic.
    #[test]
    fn mutated_datagrams_never_panic(
        msgs in prop::collection::vec((meta(), msg()), 1..6),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; MAX_DATAGRAM_LIMIT];
        let mut enc = BatchEncoder::new(&mut buf);
        for (m, v) in &msgs {
            let _ = enc.push_data(*m, v);
        }
        let mut bytes = enc.as_bytes().to_vec();
        for (at, value) in edits {
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
        }
        decode_everything(&bytes);
        let keep = cut.index(bytes.len() + 1);
        decode_everything(&bytes[..keep]);
    }

    #[test]
    fn data_round_trips_in_batches(
        msgs in prop::collection::vec((meta(), msg()), 0..40),
        max in 100usize..=1472,
    ) {
        let mut buf = vec![0u8; max];
        let mut datagrams: Vec<Vec<u8>> = Vec::new();
        let mut expected = Vec::new();
        let mut enc = BatchEncoder::new(&mut buf);
        for (m, v) in &msgs {
            match enc.push_data(*m, v) {
                Ok(()) => expected.push((*m, v.clone())),
                Err(EncodeError::Full { .. }) => {
                    datagrams.push(enc.as_bytes().to_vec());
                    enc.clear();
                    match enc.push_data(*m, v) {
                        Ok(()) => expected.push((*m, v.clone())),
                        Err(EncodeError::TooLarge { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                Err(EncodeError::TooLarge { size, max: m_max, .. }) => {
                    prop_assert!(size > m_max);
                    prop_assert!(llbus_net::check_fits(m.topic_id, v, max).is_err());
                }
                Err(e) => panic!("{e}"),
            }
        }
        if !enc.is_empty() {
            datagrams.push(enc.as_bytes().to_vec());
        }
        let mut decoded = Vec::new();
        for d in &datagrams {
            prop_assert!(d.len() <= max);
            for f in parse_datagram(d, max).unwrap() {
                prop_assert_eq!(f.header.kind, Kind::Data);
                prop_assert_eq!(f.header.flags, Flags::NONE);
                let m = DataMeta {
                    topic_id: f.header.topic_id,
                    fingerprint: f.header.fingerprint,
                    session: f.header.session,
                    seq: f.header.seq,
                    timestamp_ns: f.header.timestamp_ns,
                };
                decoded.push((m, decode_payload::<Msg>(f.payload).unwrap()));
            }
        }
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn control_round_trips(controls in prop::collection::vec(control(), 1..20)) {
        let mut buf = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        for c in &controls {
            enc.push_control(c).unwrap();
        }
        let back: Vec<Control> = parse_datagram(enc.as_bytes(), 1472)
            .unwrap()
            .map(|f| Control::from_frame(&f).unwrap())
            .collect();
        prop_assert_eq!(back, controls);
    }

    #[test]
    fn header_round_trips(m in meta(), kind in 0u8..=255, len in any::<u16>()) {
        if let Ok(kind) = Kind::from_u8(kind) {
            let h = Header {
                kind,
                flags: Flags::NONE,
                payload_len: len,
                topic_id: m.topic_id,
                fingerprint: m.fingerprint,
                session: m.session,
                seq: m.seq,
                timestamp_ns: m.timestamp_ns,
            };
            let mut bytes = [0u8; HEADER_LEN];
            h.write(&mut bytes);
            prop_assert_eq!(Header::read(&bytes), Ok(h));
        }
    }

    #[test]
    fn compat_round_trips(v in msg(), ts in any::<i64>(), x in any::<i64>()) {
        let mut buf = [0u8; 1472];
        let n = encode_compat_packet(&mut buf, 0, &v, ts).unwrap();
        prop_assert_eq!(decode_compat_packet::<Msg>(&buf[..n], 1472), Ok((v, ts)));
        let n = encode_compat_packet(&mut buf, 0, &x, ts).unwrap();
        prop_assert_eq!(n, 16);
        prop_assert_eq!(decode_compat_packet::<i64>(&buf[..n], 1472), Ok((x, ts)));
    }

    /// Against a model: within one session and a range narrower than the window, `lost` is the
    /// number of sequence numbers between the first one seen and the highest that never arrived,
    /// and every number is delivered at most once.
    #[test]
    fn seq_tracker_matches_model(
        seqs in prop::collection::vec(1u64..100, 1..200),
        drop_late in any::<bool>(),
    ) {
        let policy = if drop_late { LatePolicy::Drop } else { LatePolicy::Deliver };
        let mut t = SeqTracker::new(policy);
        let floor = seqs[0] - 1;
        let mut arrived = BTreeSet::new();
        let mut delivered = BTreeSet::new();
        let mut highest = 0;
        for &s in &seqs {
            let verdict = t.observe(1, s);
            if verdict.is_deliver() {
                prop_assert!(delivered.insert(s), "{s} delivered twice");
                prop_assert!(s > floor);
                if drop_late {
                    prop_assert!(s > highest, "late {s} delivered under Drop");
                }
            }
            if s > floor {
                arrived.insert(s);
            }
            highest = highest.max(s);
        }
        let c = *t.counts();
        let lost = (floor + 1..=highest).filter(|n| !arrived.contains(n)).count() as u64;
        prop_assert_eq!(c.lost, lost);
        prop_assert_eq!(c.received, seqs.len() as u64);
        prop_assert_eq!(c.received, c.delivered + c.duplicates + c.late_dropped + c.stale);
        prop_assert_eq!(c.delivered, delivered.len() as u64);
        prop_assert_eq!(c.session_changes, 0);
    }

    /// A cookie verifies for the address it was issued to, in its window and the next, and for
    /// no other address.
    #[test]
    fn cookies_prove_one_address(
        secret in any::<[u8; 32]>(),
        a in socket_addr(),
        b in socket_addr(),
        t in 0u64..1u64 << 62,
        later in 0u64..60_000_000_000,
    ) {
        let mut jar = CookieJar::new(secret, DEFAULT_COOKIE_WINDOW);
        let w = DEFAULT_COOKIE_WINDOW.as_nanos() as u64;
        let c = jar.issue(a, t);
        let then = t + later;
        let same = a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical();
        prop_assert!(jar.verify(a, &c, t));
        prop_assert_eq!(jar.verify(b, &c, t), same);
        prop_assert_eq!(jar.verify(a, &c, then), then / w <= t / w + 1);
    }

    /// A sealed datagram opens with its key; any single bit flipped, or another key, does not.
    #[test]
    fn mac_round_trip_and_flips(
        psk in any::<[u8; 32]>(),
        msgs in prop::collection::vec((meta(), msg()), 1..5),
        controls in prop::collection::vec(control(), 0..3),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mac = FrameMac::new(&psk);
        let mut buf = vec![0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf[..1472 - MAC_TAG_LEN]);
        // A sealed datagram is of one sender session and one direction: data and heartbeats
        // of the first message's session (other control frames cannot be sealed with them).
        let session = msgs[0].0.session;
        for (m, v) in &msgs {
            let _ = enc.push_data(DataMeta { session, ..*m }, v);
        }
        for c in &controls {
            if let Control::Heartbeat { topic_id, fingerprint, last_seq, timestamp_ns, .. } = *c {
                let hb = Control::Heartbeat { topic_id, fingerprint, session, last_seq, timestamp_ns };
                let _ = enc.push_control(&hb);
            }
        }
        let (len, frames) = (enc.len(), enc.frames());
        prop_assume!(frames > 0);
        let sealed = mac.seal(&mut buf, len).unwrap();
        let opened = mac.open(&buf[..sealed], 1472).unwrap();
        prop_assert_eq!(opened.count(), frames);
        let mut bad = buf[..sealed].to_vec();
        let i = flip.index(bad.len());
        bad[i] ^= 1 << bit;
        prop_assert!(mac.open(&bad, 1472).is_err());
        let mut other = psk;
        other[0] ^= 1;
        prop_assert!(FrameMac::new(&other).open(&buf[..sealed], 1472).is_err());
    }

    /// CIDR matching against the definition: the first `prefix` bits are equal.
    #[test]
    fn cidr_matches_its_definition(net in any::<u32>(), prefix in 0u8..=32, ip in any::<u32>(),
                                   net6 in any::<u128>(), prefix6 in 0u8..=128, ip6 in any::<u128>()) {
        let bits = |x: u32, n: u8| if n == 0 { 0 } else { x >> (32 - u32::from(n)) };
        let masked = if prefix == 0 { 0 } else { net & (u32::MAX << (32 - u32::from(prefix))) };
        let c = Cidr::new(IpAddr::V4(Ipv4Addr::from(masked)), prefix).unwrap();
        prop_assert_eq!(c.contains(IpAddr::V4(Ipv4Addr::from(ip))), bits(ip, prefix) == bits(masked, prefix));
        prop_assert_eq!(c.to_string().parse::<Cidr>().unwrap(), c);
        let bits6 = |x: u128, n: u8| if n == 0 { 0 } else { x >> (128 - u32::from(n)) };
        let masked6 = if prefix6 == 0 { 0 } else { net6 & (u128::MAX << (128 - u32::from(prefix6))) };
        let c6 = Cidr::new(IpAddr::V6(Ipv6Addr::from(masked6)), prefix6).unwrap();
        prop_assert_eq!(c6.contains(IpAddr::V6(Ipv6Addr::from(ip6))), bits6(ip6, prefix6) == bits6(masked6, prefix6));
        prop_assert_eq!(c6.to_string().parse::<Cidr>().unwrap(), c6);
    }

    /// One source never gets more than `burst + rate * elapsed` messages through, and a source
    /// that keeps to the rate is never refused.
    #[test]
    fn rate_limiter_bound(
        per_second in 1u32..1000,
        burst in 1u32..100,
        gaps in prop::collection::vec(0u64..200_000_000, 1..300),
    ) {
        let mut l = RateLimiter::new(RateLimit { per_second, burst }, 8);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        let mut now = 0u64;
        let mut allowed = 0u64;
        for g in gaps {
            now += g;
            if l.allow(ip, now) {
                allowed += 1;
            }
            let bound = u128::from(burst) + u128::from(now) * u128::from(per_second) / 1_000_000_000;
            prop_assert!(u128::from(allowed) <= bound, "{} > {}", allowed, bound);
        }
        let mut polite = RateLimiter::new(RateLimit { per_second, burst }, 8);
        let step = 1_000_000_000 / u64::from(per_second) + 1;
        for i in 0..50 {
            prop_assert!(polite.allow(ip, i * step));
        }
    }
}

proptest! {
    /// Arbitrary bytes as a fragment payload never panic the parser; what it accepts tiles a
    /// message (the piece fits at its offset within the total).
    #[test]
    fn fragment_parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok((h, piece)) = llbus_net::FragmentHeader::parse(&bytes) {
            prop_assert!(h.index < h.count);
            prop_assert!(h.offset() + piece.len() <= h.total as usize);
        }
    }

    /// Any message split into fragments and fed in any order, with duplicates and forged
    /// fragments of another session mixed in (fewer than the reassemblies in flight, so they
    /// cannot evict it), comes back byte for byte.
    #[test]
    fn fragments_round_trip_in_any_order(
        msg in prop::collection::vec(any::<u8>(), 0..5000),
        room in 65usize..600,
        order in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        forged in prop::collection::vec((any::<u64>(), prop::collection::vec(any::<u8>(), 0..40)), 0..10),
    ) {
        let mut frags: Vec<(u64, Vec<u8>)> = llbus_net::split_fragments(&msg, room)
            .unwrap()
            .enumerate()
            .map(|(i, (h, piece))| {
                let mut p = [0u8; llbus_net::FRAGMENT_HEADER_LEN];
                h.write(&mut p);
                let mut p = p.to_vec();
                p.extend_from_slice(piece);
                (100 + i as u64, p)
            })
            .collect();
        let n = frags.len();
        for ix in &order {
            let a = ix.index(n);
            frags.swap(a, n - 1 - a.min(n - 1));
            frags.push(frags[a].clone());
        }
        let mut r = llbus_net::Reassembler::new(&llbus_net::ReassemblyConfig {
            in_flight: 16,
            ..llbus_net::ReassemblyConfig::default()
        });
        let mut done = Vec::new();
        for (i, (seq, p)) in frags.iter().enumerate() {
            if let Some((fseq, fp)) = forged.get(i) {
                let _ = r.on_fragment(2, *fseq, fp, 0);
            }
            if let Ok(llbus_net::Reassembled::Complete(m)) = r.on_fragment(1, *seq, p, 0) {
                done.push(m.to_vec());
            }
        }
        prop_assert_eq!(done.first(), Some(&msg));
    }
}
