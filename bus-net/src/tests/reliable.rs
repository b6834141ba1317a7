//! Reliable topics over the simulated network: a link that drops, duplicates and reorders
//! datagrams (the handshake included, tokens and all), and an off-path adversary that injects
//! forged NAKs (under the subscriber's address and others) and forged `Unavailable` answers,
//! guessing the cookies, nonces and tokens it cannot read.
//!
//! What must hold: every message is delivered exactly once, in order, with its payload intact,
//! nothing is reported unrecovered while history covers the loss; a forged NAK never gets a
//! byte back; when history cannot cover an outage, the lost range is reported unrecovered and
//! delivery goes on in order.

use std::net::SocketAddr;

use proptest::prelude::*;

use super::stream::{
    payload, pub_addr, sub_addr, Stream, ADV, FP, PUB, PUB_SESSION, SUB, SUB_SESSION, TOPIC,
};
use super::world::{ip, Faults, MAX};
use crate::{BatchEncoder, Cookie, DataMeta, Nak, ReliableConfig, Unavailable, TOKEN_LEN};

/// One forged datagram.
#[derive(Clone, Debug)]
pub(crate) enum Forged {
    /// A NAK to the publisher from `src` (the subscriber's address or another), with a guessed
    /// cookie, under the real subscriber session or a guessed one.
    Nak {
        src: SocketAddr,
        cookie: [u8; 16],
        real_session: bool,
        first: u64,
        len: u64,
    },
    /// An `Unavailable` to the subscriber from the publisher's address, under the real
    /// publisher session (the worst case) with a guessed nonce and token.
    Unavailable {
        nonce: u64,
        token: u64,
        first: u64,
        len: u64,
    },
}

fn forged() -> impl Strategy<Value = Forged> {
    let src = prop_oneof![
        Just(sub_addr()),
        any::<(u8, u16)>().prop_map(|(h, p)| ip(h, p.max(1)))
    ];
    prop_oneof![
        (
            src,
            any::<[u8; 16]>(),
            any::<bool>(),
            1u64..5000,
            1u64..5000
        )
            .prop_map(|(src, cookie, real_session, first, len)| Forged::Nak {
                src,
                cookie,
                real_session,
                first,
                len
            }),
        (any::<u64>(), any::<u64>(), 1u64..5000, 1u64..5000).prop_map(
            |(nonce, token, first, len)| Forged::Unavailable {
                nonce,
                token,
                first,
                len
            }
        ),
    ]
}

/// Sends `f`; returns the bytes the publisher sent in answer to it.
fn forge(s: &mut Stream, f: &Forged) -> usize {
    let mut buf = vec![0u8; MAX];
    let enc = BatchEncoder::new(&mut buf);
    match *f {
        Forged::Nak {
            src,
            cookie,
            real_session,
            first,
            len,
        } => {
            let mut enc = enc;
            let nak = Nak {
                topic_id: TOPIC,
                fingerprint: FP,
                session: if real_session { SUB_SESSION } else { 99 },
                cookie: Cookie(cookie),
                nonce: 1,
                first,
                last: first + len,
            };
            if enc.push_nak(&nak).is_err() {
                return 0;
            }
            let d = enc.as_bytes().to_vec();
            let answers = s.w.handle(PUB, &d, src);
            answers.iter().map(|(_, _, d)| d.len()).sum()
        }
        Forged::Unavailable {
            nonce,
            token,
            first,
            len,
        } => {
            let u = Unavailable {
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB_SESSION,
                nonce: nonce.wrapping_add(1 << 40), // never one of the few real ones
                first,
                last: first + len,
            };
            let mut enc = enc.with_token(true);
            if enc.push_unavailable(&u).is_err() {
                return 0;
            }
            let mut d = enc.as_bytes().to_vec();
            d.extend_from_slice(&token.to_le_bytes()[..TOKEN_LEN]);
            s.w.handle(SUB, &d, pub_addr());
            0
        }
    }
}

pub(crate) fn faults() -> impl Strategy<Value = Faults> {
    (
        prop_oneof![Just(10u64), Just(50), Just(200)],
        0u64..100,
        0u64..20,
    )
        .prop_map(|(loss, dup, max_delay)| Faults {
            loss,
            dup,
            max_delay,
            ..Faults::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// At 1%, 5% and 20% loss with duplication and reordering, and forged NAKs and
    /// `Unavailable`s injected: every message delivered once, in order, intact; nothing
    /// unrecovered; no forged datagram answered with a single byte.
    #[test]
    fn reliable_delivers_everything_in_order_under_faults_and_forgeries(
        seed in any::<u64>(),
        faults in faults(),
        attacks in proptest::collection::vec((0u64..3000, forged()), 0..100),
    ) {
        let mut attacks = attacks;
        attacks.sort_by_key(|(t, _)| *t);
        let mut next = 0;
        let mut answered = 0;
        let mut s = Stream::new(seed, faults, ReliableConfig::default());
        s.run(2000, 1500, |s| {
            let now = s.now_ms();
            while next < attacks.len() && attacks[next].0 <= now {
                answered += forge(s, &attacks[next].1);
                next += 1;
            }
        });
        // The handshake completes early (at 20% loss it can take a few retries of its four
        // datagrams): within the first tenth of the stream.
        prop_assert!(s.expected().len() > 1800, "joined after {:?}", s.joined_after());
        prop_assert_eq!(s.lost(), Vec::<(u64, u64)>::new());
        prop_assert_eq!(s.delivered(), s.expected());
        prop_assert_eq!(answered, 0);
        prop_assert_eq!(s.figure(SUB, |ep| ep.metrics().unrecovered.get()), 0);
        if faults.loss >= 50 {
            prop_assert!(s.figure(PUB, |ep| ep.metrics().retransmitted.get()) > 0);
            prop_assert!(s.figure(SUB, |ep| ep.metrics().nak_sent.get()) > 0);
        }
    }
}

/// An outage longer than history covers: the range that left history is reported unrecovered
/// (by the publisher's `Unavailable` or the deadline), each message is delivered or reported
/// exactly once, in order, and delivery goes on after it.
#[test]
fn an_outage_beyond_history_is_reported_and_the_stream_goes_on() {
    let reliable = ReliableConfig {
        history: 32,
        ..ReliableConfig::default()
    };
    let faults = Faults {
        loss: 20,
        dup: 20,
        max_delay: 3,
        outage: (1000, 1300),
        ..Faults::default()
    };
    let mut s = Stream::new(42, faults, reliable);
    s.run(3000, 1500, |_| {});
    let expected = s.expected();
    let lost_ranges = s.lost();
    assert!(!lost_ranges.is_empty());
    let unavailable = s.figure(PUB, |ep| ep.metrics().unavailable.get());
    assert!(unavailable > 0, "unavailable {unavailable}");
    // Delivered and unrecovered together are every number exactly once, in order.
    let got = s.delivered();
    let mut accounted: Vec<u64> = got.clone();
    for &(first, last) in &lost_ranges {
        accounted.extend(first..=last);
    }
    accounted.sort_unstable();
    assert_eq!(accounted, expected);
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    // The stream went on: the last message arrived.
    assert_eq!(got.last(), expected.last());
    let lost: u64 = lost_ranges.iter().map(|(a, b)| b - a + 1).sum();
    assert_eq!(lost, s.figure(SUB, |ep| ep.metrics().unrecovered.get()));
    // Roughly the outage (300 messages) less what history still held.
    assert!((200..=300).contains(&lost), "lost {lost}");
}

/// An allowed host, subscribed itself (it knows the publisher's session and has a cookie and
/// a token of its own), forges data with sequence numbers near 2^40 and heartbeats claiming
/// them, under the publisher's address, with its own token and with none, to a best-effort
/// and to a reliable import: the import gets every genuine message, nothing is counted lost
/// or stale, nothing unrecovered.
#[test]
fn an_allowed_host_cannot_inject_into_or_silence_another_hosts_import() {
    for reliable in [false, true] {
        let mut s = Stream::build(11, Faults::default(), ReliableConfig::default(), reliable)
            .with_adversary();
        assert_eq!(s.w.hosts[ADV].addr, super::stream::adversary_addr());
        let huge = 1u64 << 40;
        let mut forged = 0;
        for ms in 0..2500u64 {
            let publish = s.published < 2000;
            s.step(publish);
            let Some(token) = s.adversary_token() else {
                continue;
            };
            if ms % 50 != 25 {
                continue;
            }
            for own_token in [Some(token), None] {
                for heartbeat in [false, true] {
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf).with_token(own_token.is_some());
                    let pushed = if heartbeat {
                        enc.push_control(&crate::Control::Heartbeat {
                            topic_id: TOPIC,
                            fingerprint: FP,
                            session: PUB_SESSION,
                            last_seq: huge + ms,
                            timestamp_ns: 0,
                        })
                    } else {
                        let meta = DataMeta {
                            topic_id: TOPIC,
                            fingerprint: FP,
                            session: PUB_SESSION,
                            seq: huge + ms,
                            timestamp_ns: 0,
                        };
                        enc.push_data(meta, &payload(huge + ms))
                    };
                    assert!(pushed.is_ok());
                    let mut d = enc.as_bytes().to_vec();
                    if let Some(t) = own_token {
                        d.extend_from_slice(&t.to_le_bytes());
                    }
                    s.w.handle(SUB, &d, pub_addr());
                    forged += 1;
                }
            }
        }
        assert!(forged > 100, "the adversary never subscribed");
        let expected = s.expected();
        assert!(expected.len() > 1900, "joined after {:?}", s.joined_after());
        assert_eq!(s.delivered(), expected, "reliable: {reliable}");
        let loss = s.w.hosts[SUB].ep.loss();
        assert_eq!(
            (loss.lost, loss.stale),
            (0, 0),
            "reliable: {reliable}: {loss:?}"
        );
        assert_eq!(s.figure(SUB, |ep| ep.metrics().unrecovered.get()), 0);
        assert!(s.lost().is_empty());
    }
}

/// A seed at 20% loss whose handshake takes retries: the subscriber still joins within the
/// first tenth of the stream and gets every message from then on.
#[test]
fn a_handshake_under_heavy_loss_joins_within_the_first_tenth() {
    let faults = Faults {
        loss: 200,
        dup: 50,
        max_delay: 10,
        ..Faults::default()
    };
    let mut s = Stream::new(7, faults, ReliableConfig::default());
    s.run(2000, 1500, |_| {});
    assert!(
        s.expected().len() > 1800,
        "joined after {:?}",
        s.joined_after()
    );
    assert_eq!(s.delivered(), s.expected());
}
