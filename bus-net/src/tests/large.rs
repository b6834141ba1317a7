//! Large messages (fragmented across datagrams) over a link that loses, duplicates and
//! reorders: a reliable topic delivers each whole, once, in order; a best-effort one counts
//! exactly what it lost and delivers every message whose fragments all arrived.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;

use super::reliable::faults;
use super::stream::{
    body, check_large, pub_addr, sub_addr, Stream, FP, PUB, PUB_SESSION, SUB, SUB_SESSION, TOPIC,
};
use super::world::{Faults, World, MAX};
use crate::{
    parse_datagram, BridgeConfig, DropReason, Endpoint, ExportSpec, ImportSpec, LatePolicy,
    ReassemblyConfig, ReliableConfig,
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
        prop_assert_eq!(s.figure(SUB, |ep| ep.metrics().dropped(DropReason::Incomplete)), 0);
        prop_assert_eq!(s.figure(SUB, |ep| ep.metrics().dropped(DropReason::BadFragment)), 0);
        if faults.loss >= 50 {
            prop_assert!(s.figure(PUB, |ep| ep.metrics().retransmitted.get()) > 0);
        }
    }
}

/// Best-effort large and small messages through a link that loses, duplicates and reorders:
/// the subscriber counts exactly the frames that never arrived (`lost`), delivers every
/// message whose frames all arrived once and intact, and counts every fragmented message that
/// lost some but not all of its fragments once as incomplete, never delivering it.
#[test]
fn best_effort_large_messages_count_exactly_what_they_lost() {
    for (seed, loss) in [(1u64, 10u64), (2, 50), (3, 200)] {
        let config = BridgeConfig {
            reassembly: ReassemblyConfig {
                in_flight: 64,
                timeout: Duration::from_millis(50),
                ..ReassemblyConfig::default()
            },
            late: LatePolicy::Deliver,
            ..BridgeConfig::default()
        };
        let export = ExportSpec {
            topic: "sim".into(),
            topic_id: TOPIC,
            fingerprint: FP,
            allow: None,
            reliable: false,
            late_join: 0,
            shape: None,
            group: None,
        };
        let import = ImportSpec {
            topic: "sim".into(),
            topic_id: TOPIC,
            fingerprint: FP,
            publisher: pub_addr(),
            reliable: false,
        };
        let mut w = World::new(seed);
        let publ = Endpoint::new(&config, MAX, PUB_SESSION, [1; 32], vec![export], Vec::new());
        let sub = Endpoint::new(&config, MAX, SUB_SESSION, [2; 32], Vec::new(), vec![import]);
        w.add(pub_addr(), publ.with_wall_clock(|| 0));
        w.add(sub_addr(), sub.with_wall_clock(|| 0));
        // Subscribed over a clean link: the stream starts at sequence number 1.
        w.run(50);
        assert_eq!(w.hosts[SUB].starts.first(), Some(&(0, Some(0))));
        // Every data frame and fragment that reaches the subscriber.
        let arrived = Rc::new(RefCell::new(BTreeSet::new()));
        let seen = Rc::clone(&arrived);
        w.path = Some(Box::new(move |_, d| {
            if d.dst == sub_addr() {
                if let Ok(frames) = parse_datagram(&d.bytes, MAX + 64) {
                    let mut seen = seen.borrow_mut();
                    seen.extend(
                        frames
                            .filter(|f| f.header.kind.is_data())
                            .map(|f| f.header.seq),
                    );
                }
            }
            true
        }));
        // The link: loss, 3% duplication, delays of up to 8 ms with a message each
        // millisecond (reordering).
        w.faults = Faults {
            loss,
            dup: 30,
            max_delay: 8,
            ..Faults::default()
        };
        // Messages 1..=N: every third empty, the others 1000..9000 bytes (a data frame up to
        // about 1400, fragments above); each one's first sequence number.
        const N: u64 = 600;
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut firsts = Vec::new();
        for n in 1..=N {
            let size = if n % 3 == 0 {
                0
            } else {
                1000 + rng.usize(..8000)
            };
            firsts.push(w.publish(PUB, 0, &(n, body(n, size))).expect("sent"));
            w.step();
        }
        // What is in flight arrives; then a last message over a clean link shows where the
        // stream ends, and the incomplete reassemblies time out.
        w.faults = Faults::default();
        w.run(20);
        let end = w.publish(PUB, 0, &(N + 1, Vec::<u8>::new())).expect("sent");
        firsts.push(end);
        w.run(200);
        let arrived: BTreeSet<u64> = arrived.borrow().range(..end).copied().collect();
        let frames_of = |n: u64| firsts[n as usize - 1]..firsts[n as usize];
        let whole: Vec<u64> = (1..=N)
            .filter(|&n| frames_of(n).all(|s| arrived.contains(&s)))
            .collect();
        let partial = (1..=N)
            .filter(|&n| {
                let got = frames_of(n).filter(|s| arrived.contains(s)).count();
                got > 0 && got < frames_of(n).count()
            })
            .count() as u64;
        let mut delivered: Vec<u64> = w.hosts[SUB]
            .got
            .0
            .iter()
            .map(|(_, m)| check_large(m))
            .filter(|&n| n <= N)
            .collect();
        delivered.sort_unstable();
        assert_eq!(
            delivered, whole,
            "loss {loss}: delivered exactly the whole messages, once"
        );
        let sub = &w.hosts[SUB].ep;
        assert_eq!(
            sub.loss().lost,
            end - 1 - arrived.len() as u64,
            "loss {loss}: lost counts exactly the frames that never arrived"
        );
        sub.refresh_metrics();
        let incomplete = sub.metrics().dropped(DropReason::Incomplete);
        assert_eq!(incomplete, partial, "loss {loss}");
        let counts = sub.reassembly_counts(0).expect("the import's reassembler");
        assert_eq!(
            counts.evicted, 0,
            "loss {loss}: no reassembly was evicted, so every incomplete one timed out"
        );
        assert!(
            partial > 0 && whole.len() < N as usize,
            "loss {loss}: the link lost nothing?"
        );
    }
}
