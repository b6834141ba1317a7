//! A simulated network between one publisher machine and one subscriber machine, with an
//! off-path adversary that injects arbitrary frames under arbitrary source addresses
//! (the subscriber's and the publisher's included). It cannot read the traffic, so it does not
//! know the session ids, cookies or nonces; it can guess. The honest stream must still be
//! delivered whole and in order, and the import must follow the real publisher session.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use super::publisher::{ExportedTopic, PublisherSession};
use super::subscriber::{ImportState, SubscriberSession};
use super::Replies;
use crate::{
    Allowlist, Control, Cookie, CookieJar, Flags, Header, Kind, LatePolicy, RateLimit, RateLimiter,
    Refusal, RefuseReason, SubscriberTable, Verdict, DEFAULT_SUBSCRIBER_TIMEOUT,
};

const TOPIC: u64 = 0x7070;
const FP: u64 = 0xf0f0;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def0;
const SUB_SESSION: u64 = 0x0fed_cba9_8765_4321;
const MS: u64 = 1_000_000;

fn pub_addr() -> SocketAddr {
    "127.0.0.1:7000"
        .parse()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7000)))
}

fn sub_addr() -> SocketAddr {
    "127.0.0.1:7001"
        .parse()
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7001)))
}

/// One forged frame: to the subscriber (as if from the publisher) or to the publisher (from
/// any address).
#[derive(Clone, Debug)]
enum Forged {
    ToSubscriber(Control),
    DataToSubscriber { session: u64, seq: u64 },
    ToPublisher(Control, SocketAddr),
}

fn any_cookie() -> impl Strategy<Value = Cookie> {
    any::<[u8; 16]>().prop_map(Cookie)
}

fn topic() -> impl Strategy<Value = u64> {
    prop_oneof![Just(TOPIC), any::<u64>()]
}

/// A session id the adversary guesses: anything but the real ones (64 random bits it cannot
/// see off-path).
fn session() -> impl Strategy<Value = u64> {
    any::<u64>().prop_filter("the real session", |s| {
        *s != PUB_SESSION && *s != SUB_SESSION
    })
}

fn control() -> impl Strategy<Value = Control> {
    let reason = prop_oneof![
        Just(RefuseReason::UnknownTopic),
        Just(RefuseReason::FingerprintMismatch),
        Just(RefuseReason::TableFull),
        Just(RefuseReason::TopicFull),
    ];
    prop_oneof![
        (
            topic(),
            session(),
            any::<u64>(),
            proptest::option::of(any_cookie())
        )
            .prop_map(|(topic_id, session, nonce, cookie)| Control::Subscribe {
                topic_id,
                fingerprint: FP,
                session,
                nonce,
                cookie
            }),
        (
            topic(),
            session(),
            any::<u64>(),
            proptest::option::of(any_cookie())
        )
            .prop_map(|(topic_id, session, nonce, cookie)| Control::Unsubscribe {
                topic_id,
                fingerprint: FP,
                session,
                nonce,
                cookie
            }),
        (topic(), session(), any::<u64>(), any_cookie()).prop_map(
            |(topic_id, session, nonce, cookie)| Control::CookieChallenge {
                topic_id,
                fingerprint: FP,
                session,
                nonce,
                cookie
            }
        ),
        (topic(), session(), any::<u64>(), any::<u64>(), any_cookie()).prop_map(
            |(topic_id, session, last_seq, nonce, cookie)| Control::SubscribeAck {
                topic_id,
                fingerprint: FP,
                session,
                last_seq,
                nonce,
                cookie
            }
        ),
        (topic(), session(), any::<u64>(), reason).prop_map(
            |(topic_id, session, nonce, reason)| {
                Control::Refuse(Refusal {
                    topic_id,
                    requested: FP,
                    offered: FP,
                    session,
                    reason,
                    nonce,
                })
            }
        ),
        (topic(), session(), any::<u64>()).prop_map(|(topic_id, session, last_seq)| {
            Control::Heartbeat {
                topic_id,
                fingerprint: FP,
                session,
                last_seq,
                timestamp_ns: 0,
            }
        }),
    ]
}

fn source() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        Just(sub_addr()),
        Just(pub_addr()),
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

fn forged() -> impl Strategy<Value = Forged> {
    prop_oneof![
        control().prop_map(Forged::ToSubscriber),
        (session(), any::<u64>())
            .prop_map(|(session, seq)| Forged::DataToSubscriber { session, seq }),
        (control(), source()).prop_map(|(c, s)| Forged::ToPublisher(c, s)),
    ]
}

fn data_header(session: u64, seq: u64) -> Header {
    Header {
        kind: Kind::Data,
        flags: Flags::NONE,
        payload_len: 0,
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        seq,
        timestamp_ns: 0,
    }
}

struct World {
    publisher: PublisherSession,
    subscriber: SubscriberSession,
    replies: Replies,
    /// Honest messages published (sequence numbers 1..=published) while subscribed.
    published: u64,
    delivered: Vec<u64>,
}

impl World {
    fn new() -> Self {
        World {
            publisher: PublisherSession::new(
                PUB_SESSION,
                CookieJar::new([5; 32], Duration::from_secs(30)),
                RateLimiter::new(
                    RateLimit {
                        per_second: 20,
                        burst: 40,
                    },
                    64,
                ),
                Allowlist::any(),
                vec![ExportedTopic {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    allow: None,
                }],
                SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 64).with_topic_cap(8),
            ),
            subscriber: SubscriberSession::new(
                TOPIC,
                FP,
                SUB_SESSION,
                [6; 32],
                Duration::from_secs(1),
                LatePolicy::Deliver,
            ),
            replies: Replies::with_capacity(8),
            published: 0,
            delivered: Vec::new(),
        }
    }

    /// Delivers `control` to the publisher from `src`, and its answers to the subscriber if
    /// they are addressed to it.
    fn deliver_to_publisher(&mut self, control: &Control, src: SocketAddr, now: u64) {
        self.replies.clear(src);
        let published = self.published;
        let _ = self
            .publisher
            .on_control(control, src, now, |_| published, &mut self.replies);
        if src == sub_addr() {
            let answers: Vec<Control> = self.replies.frames().to_vec();
            for answer in answers {
                self.deliver_to_subscriber(&answer, now);
            }
        }
    }

    /// Delivers `control` to the subscriber as if from the publisher, and its answers (a
    /// `Subscribe` after a challenge) to the publisher.
    fn deliver_to_subscriber(&mut self, control: &Control, now: u64) {
        let mut replies = Replies::with_capacity(4);
        replies.clear(pub_addr());
        let _ = self.subscriber.on_control(control, now, &mut replies);
        for answer in replies.frames().to_vec() {
            self.deliver_to_publisher(&answer, sub_addr(), now);
        }
    }

    fn deliver_data(&mut self, session: u64, seq: u64, now: u64, honest: bool) {
        let verdict = self.subscriber.on_data(&data_header(session, seq), now);
        if let Ok(Verdict::Deliver | Verdict::DeliverLate) = verdict {
            assert!(
                honest,
                "forged data of session {session:#x} seq {seq} delivered"
            );
            self.delivered.push(seq);
        }
    }

    /// One millisecond: timers, then the publisher sends a message if subscribed, then the
    /// adversary's frames.
    fn step(&mut self, now: u64, forged: &[Forged]) {
        if let Some(request) = self.subscriber.poll(now) {
            self.deliver_to_publisher(&request, sub_addr(), now);
        }
        if self
            .publisher
            .subscribers()
            .subscribers(TOPIC)
            .any(|a| a == sub_addr())
        {
            self.published += 1;
            let seq = self.published;
            self.deliver_data(PUB_SESSION, seq, now, true);
        }
        for f in forged {
            match f {
                Forged::ToSubscriber(c) => self.deliver_to_subscriber(c, now),
                Forged::DataToSubscriber { session, seq } => {
                    self.deliver_data(*session, *seq, now, false)
                }
                Forged::ToPublisher(c, src) => self.deliver_to_publisher(c, *src, now),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the adversary injects, from wherever, the honest stream is delivered whole and
    /// in order once established, the import follows the real publisher, and the subscriber
    /// stays subscribed.
    #[test]
    fn adversary_cannot_hijack_or_stop_the_stream(
        attacks in proptest::collection::vec((0u64..3000, forged()), 0..200)
    ) {
        let mut world = World::new();
        let mut attacks = attacks;
        attacks.sort_by_key(|(t, _)| *t);
        let mut next = 0;
        for ms in 0..3000u64 {
            let mut now_forged = Vec::new();
            while next < attacks.len() && attacks[next].0 == ms {
                now_forged.push(attacks[next].1.clone());
                next += 1;
            }
            world.step(ms * MS, &now_forged);
        }
        prop_assert!(world.published > 2900, "published only {} messages", world.published);
        let expected: Vec<u64> = (1..=world.published).collect();
        prop_assert_eq!(&world.delivered, &expected);
        let following = matches!(
            world.subscriber.state(),
            ImportState::Established { session: PUB_SESSION, .. }
        );
        prop_assert!(following, "import state {:?}", world.subscriber.state());
        prop_assert_eq!(world.subscriber.loss().lost, 0);
        prop_assert_eq!(world.subscriber.loss().session_changes, 0);
    }
}

/// The same world without an adversary, over a network that duplicates every handshake answer
/// and delivers late copies of old ones: nothing counts as invalid, the duplicates and late
/// frames are counted by name (issue 15).
#[test]
fn duplicated_and_late_handshake_frames_are_not_invalid() {
    let mut world = World::new();
    let mut history: Vec<Control> = Vec::new();
    for ms in 0..5000u64 {
        let now = ms * MS;
        if let Some(request) = world.subscriber.poll(now) {
            world.replies.clear(sub_addr());
            let published = world.published;
            world
                .publisher
                .on_control(&request, sub_addr(), now, |_| published, &mut world.replies)
                .ok();
            let answers = world.replies.frames().to_vec();
            for a in answers {
                // Each answer arrives twice, and again a second later.
                for _ in 0..2 {
                    let mut r = Replies::with_capacity(4);
                    r.clear(pub_addr());
                    assert!(
                        world.subscriber.on_control(&a, now, &mut r).is_ok(),
                        "{a:?}"
                    );
                    for again in r.frames().to_vec() {
                        world.deliver_to_publisher(&again, sub_addr(), now);
                    }
                }
                history.push(a);
            }
        }
        if ms % 1000 == 999 {
            // The answers to the last few requests (older ones are forgotten: BadNonce).
            for old in history.iter().rev().take(4).copied().collect::<Vec<_>>() {
                let mut r = Replies::with_capacity(4);
                r.clear(pub_addr());
                assert!(
                    world.subscriber.on_control(&old, now, &mut r).is_ok(),
                    "{old:?}"
                );
                assert!(r.is_empty(), "a late frame was answered");
            }
        }
    }
    let counts = world.subscriber.counts();
    assert!(counts.control_duplicates > 0, "{counts:?}");
    assert!(matches!(
        world.subscriber.state(),
        ImportState::Established {
            session: PUB_SESSION,
            ..
        }
    ));
}
