//! What a subscription token protects: an allowed host that subscribed itself (so it knows the
//! publisher's session id, its own cookie and token) forges data, heartbeats and handshake
//! answers under the publisher's address to another host's import, best effort and reliable.
//! Nothing is delivered, `lost` stays exact, no single frame far ahead is believed (not even
//! with the import's own token), the import stays on its session, and every genuine message
//! still arrives.

use std::net::SocketAddr;

use proptest::prelude::*;

use super::pair::{
    addr, controls, export, forged_data, forged_heartbeat, got, handshake, import, pair, pub_addr,
    publish, send_to_sub, sub_addr, sub_token, tick, FP, PUB, PUB_SESSION, SUB, SUB_SESSION, TOPIC,
};
use super::world::{World, MAX, MS};
use crate::{
    parse_datagram, BatchEncoder, BridgeConfig, Control, Cookie, Event, ImportState, Kind,
    RefuseReason,
};

/// An allowed host that subscribed itself forges Data (sequence 2^40) and a Heartbeat (last
/// sequence 2^40) under the publisher's address to another host's import, with its own token,
/// with none, and from another port of the publisher's host: nothing is delivered, `lost`
/// stays exact, and every genuine message still arrives.
#[test]
fn allowed_host_cannot_inject_or_silence_a_best_effort_import() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(false, 0), import(false));
    let mut none = None;
    let attacker = addr(2, 9000);
    let learned = handshake(
        &mut w.hosts[PUB].ep,
        attacker,
        TOPIC,
        0xaaaa,
        w.now,
        &mut none,
    )
    .expect("admitted");
    assert_eq!(learned.session, PUB_SESSION, "the session id is no secret");
    publish(&mut w, 1..=10, 4);
    let forgeries = [
        forged_data(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_data(PUB_SESSION, 11, Some(learned.token)),
        forged_data(PUB_SESSION, 11, Some(0)),
        forged_heartbeat(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
    ];
    for f in &forgeries {
        send_to_sub(&mut w, f, pub_addr());
        // Another port of the publisher's host.
        send_to_sub(&mut w, f, addr(1, 7002));
    }
    publish(&mut w, 11..=20, 4);
    tick(&mut w, 200 * MS);
    assert_eq!(got(&w), (1..=20).collect::<Vec<_>>(), "delivered");
    let loss = w.hosts[SUB].ep.loss();
    assert_eq!(loss.lost, 0, "lost moved: {loss:?}");
    assert_eq!(loss.stale, 0, "genuine messages stale: {loss:?}");
}

/// The same against a reliable import: the genuine messages are not duplicates of a forged
/// jump, and nothing is reported unrecovered.
#[test]
fn allowed_host_cannot_inject_or_silence_a_reliable_import() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(true, 0), import(true));
    let mut none = None;
    let learned = handshake(
        &mut w.hosts[PUB].ep,
        addr(2, 9000),
        TOPIC,
        0xaaaa,
        w.now,
        &mut none,
    )
    .expect("admitted");
    publish(&mut w, 1..=10, 4);
    for f in [
        forged_data(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_data(PUB_SESSION, 12, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, Some(learned.token)),
    ] {
        send_to_sub(&mut w, &f, pub_addr());
    }
    publish(&mut w, 11..=20, 4);
    for _ in 0..20 {
        tick(&mut w, 10 * MS);
    }
    assert_eq!(got(&w), (1..=20).collect::<Vec<_>>(), "delivered");
    for e in std::mem::take(&mut w.hosts[SUB].events) {
        assert!(!matches!(e, Event::Unrecovered { .. }), "{e:?}");
    }
}

/// Even with the import's own token (what an on-path host or a bug could give), one frame far
/// ahead is not believed on its own word: a data frame or a heartbeat more than 65,536 numbers
/// ahead is not delivered and `lost` does not jump (SECURITY.md: "no single frame is believed
/// far ahead"). Each forgery is tried alone, in a world of its own.
#[test]
fn one_frame_far_ahead_is_not_believed_even_with_the_token() {
    let far = [
        forged_data(PUB_SESSION, 10 + 65_537, None),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, u64::MAX, None),
    ];
    for (k, forged) in far.iter().enumerate() {
        let config = BridgeConfig::default();
        let mut w = pair(&config, export(false, 0), import(false));
        let token = w.hosts[PUB]
            .ep
            .destinations(TOPIC)
            .find(|&(a, _)| a == sub_addr())
            .map(|(_, t)| t)
            .expect("subscribed");
        // The same frame, now marked and followed by the import's real token.
        let with_token = retoken(forged, token);
        publish(&mut w, 1..=10, 4);
        send_to_sub(&mut w, &with_token, pub_addr());
        publish(&mut w, 11..=20, 4);
        assert_eq!(
            got(&w),
            (1..=20).collect::<Vec<_>>(),
            "forgery {k}: delivered"
        );
        let loss = w.hosts[SUB].ep.loss();
        assert_eq!(loss.lost, 0, "forgery {k}: {loss:?}");
        assert_eq!(
            loss.unconfirmed, 1,
            "forgery {k}: not counted unconfirmed: {loss:?}"
        );
    }
}

/// `forged` (one frame, no token) re-encoded with the token flag and followed by `token`.
fn retoken(forged: &[u8], token: u64) -> Vec<u8> {
    let frame = parse_datagram(forged, MAX)
        .expect("parses")
        .next()
        .expect("one frame");
    match frame.header.kind {
        Kind::Heartbeat => match Control::from_frame(&frame).expect("heartbeat") {
            Control::Heartbeat {
                session, last_seq, ..
            } => forged_heartbeat(session, last_seq, Some(token)),
            _ => unreachable!(),
        },
        _ => forged_data(frame.header.session, frame.header.seq, Some(token)),
    }
}

/// The same for a reliable import: one data frame or heartbeat far ahead, with the import's
/// real token, makes it neither deliver, nor give anything up (`Unrecovered`), nor NAK the
/// claimed range; the genuine stream goes on.
#[test]
fn one_frame_far_ahead_does_not_move_a_reliable_import() {
    let far = [
        forged_data(PUB_SESSION, 10 + 65_537, None),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
    ];
    for (k, forged) in far.iter().enumerate() {
        let config = BridgeConfig::default();
        let mut w = pair(&config, export(true, 0), import(true));
        let token = w.hosts[PUB]
            .ep
            .destinations(TOPIC)
            .find(|&(a, _)| a == sub_addr())
            .map(|(_, t)| t)
            .expect("subscribed");
        publish(&mut w, 1..=10, 4);
        w.hosts[SUB].events.clear();
        send_to_sub(&mut w, &retoken(forged, token), pub_addr());
        for _ in 0..100 {
            tick(&mut w, 10 * MS);
        }
        publish(&mut w, 11..=20, 4);
        for _ in 0..10 {
            tick(&mut w, 10 * MS);
        }
        assert_eq!(
            got(&w),
            (1..=20).collect::<Vec<_>>(),
            "forgery {k}: delivered"
        );
        for e in std::mem::take(&mut w.hosts[SUB].events) {
            assert!(
                !matches!(e, Event::Unrecovered { .. }),
                "forgery {k}: {e:?}"
            );
        }
        let loss = w.hosts[SUB].ep.loss();
        assert_eq!(
            loss.unconfirmed, 1,
            "forgery {k}: the token was not taken: {loss:?}"
        );
        assert_eq!(loss.lost, 0, "forgery {k}: {loss:?}");
    }
}

/// Forged answers to a subscriber from the publisher's address by an allowed host that knows
/// the session id and its own token: a SubscribeAck switching to another session, a final
/// Refuse, a CookieChallenge, an `Unavailable` with its own token. The import stays on its
/// session (no new `Established`, no `Refused`) and gets every genuine message.
#[test]
fn forged_answers_do_not_move_an_import() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(true, 0), import(true));
    w.hosts[SUB].events.clear();
    let mut none = None;
    let l = handshake(
        &mut w.hosts[PUB].ep,
        addr(2, 9000),
        TOPIC,
        7,
        w.now,
        &mut none,
    )
    .expect("admitted");
    publish(&mut w, 1..=5, 4);
    for nonce in [0u64, 1, 2, 3, u64::MAX] {
        let forged = controls(&[
            Control::SubscribeAck {
                topic_id: TOPIC,
                fingerprint: FP,
                session: 0xbad5e55,
                last_seq: 1 << 40,
                nonce,
                cookie: l.cookie,
                token: l.token,
            },
            Control::CookieChallenge {
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB_SESSION,
                nonce,
                cookie: l.cookie,
            },
            Control::Refuse(crate::Refusal {
                topic_id: TOPIC,
                requested: FP,
                offered: 0xbad,
                session: PUB_SESSION,
                reason: RefuseReason::FingerprintMismatch,
                nonce,
            }),
        ]);
        send_to_sub(&mut w, &forged, pub_addr());
        send_to_sub(&mut w, &forged, addr(1, 7002));
    }
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(true);
    enc.push_unavailable(&crate::Unavailable {
        topic_id: TOPIC,
        fingerprint: FP,
        session: PUB_SESSION,
        nonce: 0,
        first: 6,
        last: 1 << 30,
    })
    .expect("encode");
    let mut u = enc.as_bytes().to_vec();
    u.extend_from_slice(&l.token.to_le_bytes());
    send_to_sub(&mut w, &u, pub_addr());
    publish(&mut w, 6..=10, 4);
    for _ in 0..10 {
        tick(&mut w, 10 * MS);
    }
    assert_eq!(got(&w), (1..=10).collect::<Vec<_>>());
    assert_eq!(
        w.hosts[SUB].ep.import_state(0),
        Some(crate::ImportState::Established {
            session: PUB_SESSION,
            by: match w.hosts[SUB].ep.import_state(0) {
                Some(crate::ImportState::Established { by, .. }) => by,
                other => panic!("not established: {other:?}"),
            }
        })
    );
    for e in std::mem::take(&mut w.hosts[SUB].events) {
        assert!(
            !matches!(
                e,
                Event::Established { .. } | Event::Refused { .. } | Event::Unrecovered { .. }
            ),
            "forged answer moved the import: {e:?}"
        );
    }
}

/// One datagram the adversary forges: to the subscriber under the publisher's address (a
/// control frame, or data of a session and sequence number it picks), or a control frame to
/// the publisher under any source address.
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
                Control::Refuse(crate::Refusal {
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

/// A datagram of `control` alone, followed by `token` (if any); `None` if it cannot be
/// encoded.
fn control_datagram(control: &Control, token: Option<u64>) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(token.is_some());
    enc.push_control(control).ok()?;
    let mut d = enc.as_bytes().to_vec();
    if let Some(t) = token {
        d.extend_from_slice(&t.to_le_bytes());
    }
    Some(d)
}

/// The pair, and an adversary at an allowed host that subscribed itself: its token.
fn with_allowed_adversary() -> (World, u64) {
    let mut w = pair(&BridgeConfig::default(), export(false, 0), import(false));
    let mut none = None;
    let learned = handshake(
        &mut w.hosts[PUB].ep,
        attacker_addr(),
        TOPIC,
        0xa77ac,
        w.now,
        &mut none,
    );
    let Some(learned) = learned else {
        panic!("the adversary was not admitted: {none:?}");
    };
    assert_eq!(learned.session, PUB_SESSION);
    (w, learned.token)
}

/// The allowed host the adversary sends from (and subscribed from).
fn attacker_addr() -> SocketAddr {
    addr(9, 7002)
}

/// Sends `f` as the adversary with token `own` of its own subscription.
fn forge(w: &mut World, f: &Forged, own: u64) {
    let token = |t: Token| match t {
        Token::None => None,
        Token::Own => Some(own),
        Token::Guess(g) => Some(g),
    };
    match *f {
        Forged::ToSubscriber(ref c, t) => {
            if let Some(d) = control_datagram(c, token(t)) {
                send_to_sub(w, &d, pub_addr());
            }
        }
        Forged::DataToSubscriber {
            session,
            seq,
            token: t,
        } => send_to_sub(w, &forged_data(session, seq, token(t)), pub_addr()),
        Forged::ToPublisher(ref c, src) => {
            if let Some(d) = control_datagram(c, None) {
                w.handle(PUB, &d, src);
                w.deliver();
            }
        }
    }
}

/// One millisecond of the stream: timers and deliveries, then one message (its number) if
/// the subscriber is subscribed; returns whether it published.
fn stream_step(w: &mut World, published: &mut u64) {
    tick(w, MS);
    if sub_token(w).is_some() {
        *published += 1;
        publish(w, *published..=*published, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the adversary injects, from wherever, the honest stream is delivered whole and
    /// in order once established, the import follows the real publisher, and the subscriber
    /// stays subscribed.
    #[test]
    fn adversary_cannot_hijack_or_stop_the_stream(
        attacks in proptest::collection::vec((0u64..3000, forged()), 0..200)
    ) {
        let (mut w, own) = with_allowed_adversary();
        let mut attacks = attacks;
        attacks.sort_by_key(|(t, _)| *t);
        let mut next = 0;
        let mut published = 0;
        for ms in 0..3000u64 {
            stream_step(&mut w, &mut published);
            while next < attacks.len() && attacks[next].0 == ms {
                forge(&mut w, &attacks[next].1, own);
                next += 1;
            }
        }
        prop_assert!(published > 2900, "published only {} messages", published);
        let expected: Vec<u64> = (1..=published).collect();
        prop_assert_eq!(got(&w), expected);
        let state = w.hosts[SUB].ep.import_state(0);
        let following = matches!(
            state,
            Some(ImportState::Established { session: PUB_SESSION, .. })
        );
        prop_assert!(following, "import state {:?}", state);
        let loss = w.hosts[SUB].ep.loss();
        prop_assert_eq!(loss.lost, 0);
        prop_assert_eq!(loss.session_changes, 0);
    }
}

/// The attack of the issue, replayed: an allowed host that learned the publisher's session
/// forges one data frame and one heartbeat with sequence number 2^40, with its own token and
/// with none. The subscriber gets every genuine message and counts nothing lost.
#[test]
fn an_allowed_host_cannot_inject_or_silence_with_the_learned_session() {
    let (mut w, own) = with_allowed_adversary();
    let huge = 1u64 << 40;
    let heartbeat = Control::Heartbeat {
        topic_id: TOPIC,
        fingerprint: FP,
        session: PUB_SESSION,
        last_seq: huge,
        timestamp_ns: 0,
    };
    let mut published = 0;
    for ms in 0..2000u64 {
        stream_step(&mut w, &mut published);
        if ms % 100 == 50 {
            let forged = [
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
            ];
            for f in &forged {
                forge(&mut w, f, own);
            }
        }
    }
    let expected: Vec<u64> = (1..=published).collect();
    assert!(published > 1900);
    assert_eq!(got(&w), expected);
    assert_eq!(w.hosts[SUB].ep.loss().lost, 0);
    assert_eq!(w.hosts[SUB].ep.loss().stale, 0);
}
