//! Forged sequence numbers against an import's `MAX_JUMP` rule: a forger skews a stream's
//! figures by a bounded amount, never what is delivered, and never makes a figure overflow. The
//! rule is pure code (`Verdicts`), attacked directly, and once through a gateway.

use llbus::{Backpressure, Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Gateway, Import, Verdict, Verdicts, MAX_JUMP};

use crate::fixtures::*;

/// SECURITY.md: "anything malformed is counted and dropped, never a panic"; the crate's rustdoc:
/// "It never panics on what the network sends". A hostile client forges a stream's sequence
/// numbers to jump to 2^64-1 on two imported topics: `Gateway::counts` sums the two `lost`
/// figures and must not overflow.
#[test]
fn forged_sequence_jumps_cannot_make_the_gateway_figures_panic() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let quotes = bus.subscription_with::<Quote>("quotes", Backpressure::DropNewest, 64);
    let ticks = bus.subscription_with::<Tick>("ticks", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let quotes = running.subscription(quotes).expect("the handle");
    let ticks = running.subscription(ticks).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/test.quote");
    let t = matched_publisher(&client, "llbus/test.tick");
    for sequence in [0, u64::MAX] {
        q.put(bincode_of(&quote(1)))
            .encoding(bincode_encoding::<Quote>())
            .attachment(attachment::<Quote>(0, 99, sequence).to_vec())
            .wait()
            .expect("the put");
        t.put(bincode_of(&Tick { n: 1 }))
            .encoding(bincode_encoding::<Tick>())
            .attachment(attachment::<Tick>(0, 99, sequence).to_vec())
            .wait()
            .expect("the put");
    }
    let counts = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        counts_when(&gateway, |c| c.received == 4)
    }));
    let report = running.snapshot();
    let lost_each = report
        .actor("zenoh-import:test.quote")
        .and_then(|r| r.metric("zenoh.lost"));
    drop((quotes, ticks));
    running.stop();
    running.join().expect("the bus joins");
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gateway.close()));
    client.close().wait().expect("the client closes");
    let counts = counts.expect("Gateway::counts panicked on figures a hostile peer chose");
    assert!(closed.is_ok(), "Gateway::close panicked too");
    assert_eq!(counts.received, 4, "{counts:?}");
    assert!(
        counts.lost <= counts.received,
        "two forged samples per topic count {:?} lost per topic: a peer chooses the figure",
        lost_each
    );
}

/// Lost and late as an import's checks count them over `sequences` of stream 1 (`None`: a
/// forged sample of the same stream, counted apart), genuine ones only.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    genuine_lost: u64,
    genuine_late: u64,
    forged_lost: u64,
}

fn tally(samples: &[(u64, bool)]) -> Tally {
    let mut v = Verdicts::new(Tick::TOPIC, Tick::TOPIC_ID, Tick::FINGERPRINT, "llbus/t");
    let mut t = Tally::default();
    for &(sequence, forged) in samples {
        let Verdict::Accept { lost, late } = v.check(Some(&attachment::<Tick>(0, 1, sequence)))
        else {
            panic!("a well-formed sample of the topic was not accepted");
        };
        if forged {
            t.forged_lost += lost;
        } else {
            t.genuine_lost += lost;
            t.genuine_late += u64::from(late);
        }
    }
    t
}

/// A forged number within `MAX_JUMP` counts as a gap and moves the stream, so the genuine
/// samples after it count late: docs/ZENOH.md says so ("a peer that can put on the key can skew
/// the stream's figures, never what is delivered"). Pinned: every genuine sample is still
/// delivered (`tally` panics otherwise), the forged one adds at most `MAX_JUMP` lost, and the
/// genuine samples behind it count late (the documented limit).
#[test]
fn one_forged_sample_within_max_jump_skews_the_figures_not_the_delivery() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    samples.push((100 + MAX_JUMP, true));
    samples.extend((100..1100).map(|s| (s, false)));
    let t = tally(&samples);
    assert!(t.forged_lost <= MAX_JUMP, "{t:?}");
    assert_eq!(t.genuine_late, 1000, "the documented skew: {t:?}");
}

/// A forged confirmation pair moves the stream far ahead as a new stream would: the genuine
/// samples after it are still delivered, counted late, and their gaps go uncounted (the
/// documented limit without a way to tell a forger from the exporter); nothing is counted lost
/// for the forged jump.
#[test]
fn a_forged_confirmation_pair_skews_the_figures_not_the_delivery() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let far = 1u64 << 40;
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    samples.push((far, true));
    samples.push((far + 1, true));
    samples.extend((100..1100).filter(|s| s % 100 != 50).map(|s| (s, false)));
    let t = tally(&samples);
    assert_eq!(t.forged_lost, 0, "{t:?}");
    assert_eq!(t.genuine_late, 990, "the documented skew: {t:?}");
}

/// SECURITY.md: "a forged sequence number adds at most 2^16 to `zenoh.lost` (a larger jump
/// counts nothing)". A forger alternating claims far apart (none confirms another) adds nothing
/// lost, and the genuine samples in between keep their gaps counted and are never late.
#[test]
fn a_forger_alternating_far_claims_counts_nothing_and_the_genuine_stream_is_unharmed() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let claims = [1u64 << 40, 1 << 50, u64::MAX, 3 * MAX_JUMP + 1_000_000];
    let mut samples = Vec::new();
    for s in 0..2000u64 {
        if s % 100 != 7 {
            samples.push((s, false));
        }
        let claim = claims[(s % 4) as usize];
        samples.push((claim, true));
    }
    let t = tally(&samples);
    assert_eq!(
        t,
        Tally {
            genuine_lost: 20,
            genuine_late: 0,
            forged_lost: 0
        }
    );
}

/// A forger interleaving far claims between the samples of a genuine stream that jumped keeps
/// the jump unconfirmed: every sample is still delivered and nothing is counted lost for the
/// claims, but the genuine gaps after the jump go uncounted (the documented limit).
#[test]
fn forged_claims_after_a_genuine_jump_skew_the_figures_not_the_delivery() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let jump = 10 * MAX_JUMP;
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    for s in (jump..jump + 1000).filter(|s| s % 100 != 50) {
        samples.push((s, false));
        samples.push((u64::MAX - (s % 2) * (1 << 40), true));
    }
    let t = tally(&samples);
    assert_eq!((t.forged_lost, t.genuine_late), (0, 0), "{t:?}");
    assert_eq!(t.genuine_lost, 0, "the documented skew: {t:?}");
}

/// How far a forger can push `zenoh.lost` with samples each inside the rule: each one counts
/// up to `MAX_JUMP`, so n forged samples add n x 2^16. The promise is per sample; this pins the
/// figure so that a change to the rule shows here.
#[test]
fn each_forged_sample_adds_at_most_max_jump_lost() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let mut samples = vec![(0u64, false)];
    let mut next = 1u64;
    for _ in 0..1000 {
        samples.push((next + MAX_JUMP, true));
        next += MAX_JUMP + 1;
    }
    let t = tally(&samples);
    assert!(t.forged_lost <= 1000 * MAX_JUMP, "{t:?}");
}
