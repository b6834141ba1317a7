//! Property tests: arbitrary bytes into every decoder never panic, and arbitrary messages,
//! headers and control frames survive a round trip in both dialects. Sequence tracking is
//! checked against a set-based model.

use std::collections::BTreeSet;

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, parse_datagram, BatchEncoder,
    CompatControl, Control, DataMeta, EncodeError, Flags, Header, Kind, LatePolicy, Refusal,
    RefuseReason, SeqTracker, HEADER_LEN, MAX_DATAGRAM_LIMIT,
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

fn control() -> impl Strategy<Value = Control> {
    let ids = (any::<u64>(), any::<u64>(), any::<u64>());
    prop_oneof![
        ids.prop_map(|(topic_id, fingerprint, session)| Control::Subscribe {
            topic_id,
            fingerprint,
            session
        }),
        ids.prop_map(|(topic_id, fingerprint, session)| Control::Unsubscribe {
            topic_id,
            fingerprint,
            session
        }),
        (ids, any::<u64>()).prop_map(|((topic_id, fingerprint, session), last_seq)| {
            Control::SubscribeAck {
                topic_id,
                fingerprint,
                session,
                last_seq,
            }
        }),
        (ids, any::<u64>(), any::<i64>()).prop_map(
            |((topic_id, fingerprint, session), last_seq, timestamp_ns)| Control::Heartbeat {
                topic_id,
                fingerprint,
                session,
                last_seq,
                timestamp_ns
            }
        ),
        (ids, any::<u64>(), 0..3usize).prop_map(|((topic_id, requested, session), offered, r)| {
            let reason = [
                RefuseReason::UnknownTopic,
                RefuseReason::FingerprintMismatch,
                RefuseReason::TableFull,
            ][r];
            Control::Refuse(Refusal {
                topic_id,
                requested,
                offered,
                session,
                reason,
            })
        }),
    ]
}

/// Runs every decoder over `bytes`; only panics would fail.
fn decode_everything(bytes: &[u8]) {
    for max in [1472, MAX_DATAGRAM_LIMIT] {
        if let Ok(frames) = parse_datagram(bytes, max) {
            let n = frames.remaining();
            let mut seen = 0;
            for frame in frames {
                seen += 1;
                let _ = Control::from_frame(&frame);
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
}
