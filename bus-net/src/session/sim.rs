//! A simulated network between one publisher machine and one subscriber machine, with an
//! adversary that injects arbitrary frames under arbitrary source addresses (the
//! subscriber's and the publisher's included). It is an *allowed host*: it subscribed itself,
//! so it knows everything a subscriber knows (the publisher's session id, its own cookie and
//! subscription token), and it can guess the rest; it cannot read the victim's traffic, so it
//! does not know the victim's nonces or token. The honest stream must still be delivered
//! whole and in order, `lost` must stay 0, and the import must follow the real publisher
//! session.

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
    ToSubscriber(Control, Token),
    DataToSubscriber {
        session: u64,
        seq: u64,
        token: Token,
    },
    ToPublisher(Control, SocketAddr),
}

/// What the adversary ends a forged downstream datagram with.
#[derive(Clone, Copy, Debug)]
enum Token {
    /// No token.
    None,
    /// The token of its own subscription (it knows it).
    Own,
    /// A guess.
    Guess(u64),
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        Just(Token::None),
        Just(Token::Own),
        any::<u64>().prop_map(Token::Guess)
    ]
}

/// The allowed host the adversary sends from (and subscribed from).
fn attacker_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 9], 7002))
}

fn any_cookie() -> impl Strategy<Value = Cookie> {
    any::<[u8; 16]>().prop_map(Cookie)
}

fn topic() -> impl Strategy<Value = u64> {
    prop_oneof![Just(TOPIC), any::<u64>()]
}

/// A session id the adversary uses: the publisher's (it learned it by subscribing) or a
/// guess (it cannot see the subscriber's).
fn session() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(PUB_SESSION),
        any::<u64>().prop_filter("the subscriber's session", |s| *s != SUB_SESSION),
    ]
}

/// A sequence number: near the stream, or far ahead of it.
fn seq() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..4000, any::<u64>(), Just(1 << 40)]
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
        (
            topic(),
            session(),
            seq(),
            any::<u64>(),
            any_cookie(),
            any::<u64>()
        )
            .prop_map(|(topic_id, session, last_seq, nonce, cookie, token)| {
                Control::SubscribeAck {
                    topic_id,
                    fingerprint: FP,
                    session,
                    last_seq,
                    nonce,
                    cookie,
                    token,
                }
            }),
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
        (topic(), session(), seq()).prop_map(|(topic_id, session, last_seq)| {
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
        (control(), token()).prop_map(|(c, t)| Forged::ToSubscriber(c, t)),
        (session(), seq(), token()).prop_map(|(session, seq, token)| Forged::DataToSubscriber {
            session,
            seq,
            token
        }),
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
    /// The token of the adversary's own subscription.
    attacker_token: u64,
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
                [4; 32],
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
            attacker_token: 0,
        }
    }

    /// The world after the adversary subscribed from its allowed host: it holds the
    /// publisher's session id, a cookie and a token of its own.
    fn with_allowed_adversary() -> Self {
        let mut world = World::new();
        let mut request = Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 0xa77ac,
            nonce: 1,
            cookie: None,
        };
        for _ in 0..2 {
            world.replies.clear(attacker_addr());
            let _ =
                world
                    .publisher
                    .on_control(&request, attacker_addr(), 0, |_| 0, &mut world.replies);
            match world.replies.frames().first() {
                Some(&Control::CookieChallenge { cookie, .. }) => {
                    if let Control::Subscribe { cookie: c, .. } = &mut request {
                        *c = Some(cookie);
                    }
                }
                Some(&Control::SubscribeAck { session, token, .. }) => {
                    assert_eq!(session, PUB_SESSION);
                    world.attacker_token = token;
                }
                other => panic!("unexpected answer {other:?}"),
            }
        }
        assert_ne!(world.attacker_token, 0);
        world
    }

    /// The token the adversary ends a forged datagram with.
    fn forged_token(&self, t: Token) -> Option<u64> {
        match t {
            Token::None => None,
            Token::Own => Some(self.attacker_token),
            Token::Guess(g) => Some(g),
        }
    }

    /// The token of the honest subscriber's subscription (what honest datagrams end with).
    fn honest_token(&self) -> Option<u64> {
        self.publisher
            .subscribers()
            .destinations(TOPIC)
            .find(|&(a, _)| a == sub_addr())
            .map(|(_, t)| t)
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
                self.deliver_to_subscriber(&answer, None, now);
            }
        }
    }

    /// Delivers `control` to the subscriber as if from the publisher, and its answers (a
    /// `Subscribe` after a challenge) to the publisher.
    fn deliver_to_subscriber(&mut self, control: &Control, token: Option<u64>, now: u64) {
        let mut replies = Replies::with_capacity(4);
        replies.clear(pub_addr());
        let _ = self
            .subscriber
            .on_control(control, token, now, &mut replies);
        for answer in replies.frames().to_vec() {
            self.deliver_to_publisher(&answer, sub_addr(), now);
        }
    }

    fn deliver_data(&mut self, session: u64, seq: u64, token: Option<u64>, now: u64, honest: bool) {
        let verdict = self
            .subscriber
            .on_data(&data_header(session, seq), token, now);
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
            let token = self.honest_token();
            self.deliver_data(PUB_SESSION, seq, token, now, true);
        }
        for f in forged {
            match f {
                Forged::ToSubscriber(c, t) => {
                    self.deliver_to_subscriber(c, self.forged_token(*t), now)
                }
                Forged::DataToSubscriber {
                    session,
                    seq,
                    token,
                } => self.deliver_data(*session, *seq, self.forged_token(*token), now, false),
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
        let mut world = World::with_allowed_adversary();
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

/// The attack of the issue, replayed: an allowed host that learned the publisher's session
/// forges one data frame and one heartbeat with sequence number 2^40, with its own token and
/// with none. The subscriber gets every genuine message and counts nothing lost.
#[test]
fn an_allowed_host_cannot_inject_or_silence_with_the_learned_session() {
    let mut world = World::with_allowed_adversary();
    let huge = 1u64 << 40;
    let heartbeat = Control::Heartbeat {
        topic_id: TOPIC,
        fingerprint: FP,
        session: PUB_SESSION,
        last_seq: huge,
        timestamp_ns: 0,
    };
    for ms in 0..2000u64 {
        let forged = if ms % 100 == 50 {
            vec![
                Forged::DataToSubscriber {
                    session: PUB_SESSION,
                    seq: huge + ms,
                    token: Token::Own,
                },
                Forged::DataToSubscriber {
                    session: PUB_SESSION,
                    seq: huge + ms,
                    token: Token::None,
                },
                Forged::ToSubscriber(heartbeat, Token::Own),
                Forged::ToSubscriber(heartbeat, Token::None),
            ]
        } else {
            Vec::new()
        };
        world.step(ms * MS, &forged);
    }
    let expected: Vec<u64> = (1..=world.published).collect();
    assert!(world.published > 1900);
    assert_eq!(world.delivered, expected);
    assert_eq!(world.subscriber.loss().lost, 0);
    assert_eq!(world.subscriber.loss().stale, 0);
}

/// The same world without an adversary, over a network that duplicates every handshake answer
/// and delivers late copies of old ones: nothing counts as invalid, the duplicates and late
/// frames are counted by name.
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
                        world.subscriber.on_control(&a, None, now, &mut r).is_ok(),
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
                    world.subscriber.on_control(&old, None, now, &mut r).is_ok(),
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
