//! Large messages (fragmented across datagrams) over a link that loses, duplicates and
//! reorders: a reliable topic delivers each whole, once, in order; a best-effort one counts
//! exactly what it lost and delivers every message whose fragments all arrived.

use std::time::Duration;

use proptest::prelude::*;

use super::reliable::faults;
use super::stream::{body, check_large, Stream, FP, PUB, PUB_SESSION, TOPIC};
use super::world::{MAX, MS};
use crate::{
    encode_payload, parse_datagram, split_fragments, BatchEncoder, DataMeta, Kind, LatePolicy,
    Reassembled, Reassembler, ReassemblyConfig, ReliableConfig, SeqTracker, DEFAULT_MAX_MESSAGE,
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Large messages (5000 bytes: four fragments each) on a reliable topic at 1%, 5% and 20%
    /// loss with duplication and reordering: every message from the subscriber's join on is
    /// delivered once, in order and intact; no fragment is unrecovered and no message is
    /// incomplete; the lost fragments were retransmitted.
    #[test]
    fn reliable_large_messages_arrive_whole_in_order_under_faults(
        seed in any::<u64>(),
        faults in faults(),
    ) {
        let mut s = Stream::new(seed, faults, ReliableConfig::default()).with_large(5000);
        s.run(400, 1500, |_| {});
        let expected = s.expected_large();
        prop_assert!(expected.len() >= 200, "joined after {:?}", s.joined_after());
        prop_assert_eq!(s.lost(), Vec::<(u64, u64)>::new());
        prop_assert_eq!(s.delivered(), expected);
        prop_assert_eq!(s.figure(super::stream::SUB, "incomplete"), 0);
        prop_assert_eq!(s.figure(super::stream::SUB, "bad_fragment"), 0);
        if faults.loss >= 50 {
            prop_assert!(s.figure(PUB, "retransmitted") > 0);
        }
    }
}

/// Best-effort large and small messages through a link that loses, duplicates and reorders:
/// the sequence tracker counts exactly the frames that never arrived (`lost`), every message
/// whose frames all arrived is delivered once and intact, and every fragmented message that lost
/// some but not all of its fragments is counted once as incomplete and never delivered.
#[test]
fn best_effort_large_messages_count_exactly_what_they_lost() {
    for (seed, loss) in [(1u64, 10u64), (2, 50), (3, 200)] {
        let mut rng = fastrand::Rng::with_seed(seed);
        // Messages 1..=N: every third empty, the others 1000..9000 bytes (a data frame up to
        // about 1400, fragments above).
        const N: u64 = 600;
        let mut datagrams: Vec<(u64, Vec<u8>)> = Vec::new(); // (message, datagram)
        let mut frames_of: Vec<Vec<u64>> = vec![Vec::new(); N as usize + 1];
        let mut seq = 0u64;
        let mut scratch = Vec::new();
        let meta = |seq| DataMeta {
            topic_id: TOPIC,
            fingerprint: FP,
            session: PUB_SESSION,
            seq,
            timestamp_ns: 0,
        };
        for n in 1..=N {
            let size = if n % 3 == 0 {
                0
            } else {
                1000 + rng.usize(..8000)
            };
            let value = (n, body(n, size));
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            seq += 1;
            if enc.push_data(meta(seq), &value).is_ok() {
                frames_of[n as usize].push(seq);
                datagrams.push((n, enc.as_bytes().to_vec()));
                continue;
            }
            seq -= 1;
            let payload = encode_payload(TOPIC, &value, &mut scratch, DEFAULT_MAX_MESSAGE).unwrap();
            for (fragment, piece) in split_fragments(payload, MAX).unwrap() {
                seq += 1;
                enc.clear();
                enc.push_fragment(meta(seq), &fragment, piece).unwrap();
                frames_of[n as usize].push(seq);
                datagrams.push((n, enc.as_bytes().to_vec()));
            }
        }
        // The link: loss, 3% duplication, delays of up to 8 datagrams (reordering).
        let mut arrivals: Vec<(u64, usize)> = Vec::new(); // (due ms, index)
        for i in 0..datagrams.len() {
            if rng.u64(..1000) < loss {
                continue;
            }
            let copies = if rng.u64(..1000) < 30 { 2 } else { 1 };
            for _ in 0..copies {
                arrivals.push((i as u64 + rng.u64(..9), i));
            }
        }
        arrivals.sort_by_key(|&(due, i)| (due, i));
        let mut tracker = SeqTracker::new(LatePolicy::Deliver);
        tracker.observe_last_seq(PUB_SESSION, 0);
        let mut reassembly = Reassembler::new(&ReassemblyConfig {
            in_flight: 64,
            timeout: Duration::from_millis(50),
            ..ReassemblyConfig::default()
        });
        let mut delivered = Vec::new();
        let mut arrived = std::collections::BTreeSet::new();
        for &(due, i) in &arrivals {
            let now = due * MS;
            reassembly.poll(now);
            let frame = parse_datagram(&datagrams[i].1, MAX)
                .unwrap()
                .next()
                .unwrap();
            let h = frame.header;
            arrived.insert(h.seq);
            if !tracker.observe(h.session, h.seq).is_deliver() {
                continue;
            }
            if h.kind == Kind::Data {
                let (n, b): (u64, Vec<u8>) = crate::decode_payload(frame.payload).unwrap();
                assert!(b == body(n, b.len()), "message {n} corrupt");
                delivered.push(n);
            } else if let Ok(Reassembled::Complete(m)) =
                reassembly.on_fragment(h.session, h.seq, frame.payload, now)
            {
                delivered.push(check_large(m));
            }
        }
        tracker.observe_last_seq(PUB_SESSION, seq);
        reassembly.poll(u64::MAX / 2);
        let whole: Vec<u64> = (1..=N)
            .filter(|&n| frames_of[n as usize].iter().all(|s| arrived.contains(s)))
            .collect();
        let partial = (1..=N)
            .filter(|&n| {
                let f = &frames_of[n as usize];
                let got = f.iter().filter(|s| arrived.contains(s)).count();
                got > 0 && got < f.len()
            })
            .count() as u64;
        delivered.sort_unstable();
        assert_eq!(
            delivered, whole,
            "loss {loss}: delivered exactly the whole messages, once"
        );
        assert_eq!(
            tracker.counts().lost,
            seq - arrived.len() as u64,
            "loss {loss}: lost counts exactly the frames that never arrived"
        );
        let counts = reassembly.counts();
        assert_eq!(counts.incomplete, partial, "loss {loss}: {counts:?}");
        assert_eq!(counts.evicted, 0);
        assert!(
            partial > 0 && whole.len() < N as usize,
            "loss {loss}: the link lost nothing?"
        );
    }
}
