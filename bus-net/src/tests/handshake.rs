//! The handshake's answers and restarts: the answers to one datagram go back in one datagram
//! no larger than it, a short Subscribe and unanswerable sources get nothing, duplicated and
//! late handshake answers are counted by name (not invalid), and a publisher or a subscriber
//! that restarts mid-stream (a new session at the same address) is followed or served.

use std::net::SocketAddr;

use super::pair::{
    addr, controls, export, got, handshake, import, pair, pub_addr, publish, publisher, sub_addr,
    subscribe, subscriber, tick, PUB, PUB_SESSION, SUB, SUB_SESSION, TOPIC,
};
use super::world::{Got, Outbox, World, MAX, MS};
use crate::{BridgeConfig, Control, Cookie, DropReason, Endpoint, Event, ImportState, Kind};

/// Datagrams of 1 to 20 Subscribes of every kind (no cookie, good cookie, wrong cookie, unknown
/// topic, other fingerprint), from proven and unproven sources: the answers to each go back in
/// at most one datagram, never longer than it.
#[test]
fn answers_to_one_datagram_are_one_datagram_no_larger() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let proven = addr(2, 9000);
    let mut none = None;
    let learned = handshake(&mut publ, proven, TOPIC, 7, MS, &mut none).expect("admitted");
    let mut now = 2 * MS;
    let mut rng = fastrand::Rng::with_seed(22);
    let mut net = Outbox::new();
    for round in 0..300u64 {
        let n = rng.usize(1..=20);
        let list: Vec<Control> = (0..n)
            .map(|i| {
                let nonce = round * 100 + i as u64;
                match rng.u8(..5) {
                    0 => subscribe(TOPIC, 7, nonce, None),
                    1 => subscribe(TOPIC, 7, nonce, Some(learned.cookie)),
                    2 => subscribe(TOPIC, 7, nonce, Some(Cookie([rng.u8(..); 16]))),
                    3 => subscribe(0x9999, 7, nonce, Some(learned.cookie)),
                    _ => Control::Subscribe {
                        topic_id: TOPIC,
                        fingerprint: 0xbad,
                        session: 7,
                        nonce,
                        cookie: Some(learned.cookie),
                    },
                }
            })
            .collect();
        let d = controls(&list);
        let src = if rng.bool() {
            proven
        } else {
            addr(rng.u8(2..9), rng.u16(1..))
        };
        publ.handle(&d, src, now, &mut net, &mut Got::default());
        let sent = net.drain();
        assert!(sent.len() <= 1, "{} datagrams answer one", sent.len());
        for (_, to, bytes) in &sent {
            assert_eq!(*to, src, "answer to someone else");
            assert!(
                bytes.len() <= d.len(),
                "{} bytes answer {}",
                bytes.len(),
                d.len()
            );
        }
        now += 10 * MS;
    }
}

/// A Subscribe shorter than 72 bytes (its padding cut off) is not answered.
#[test]
fn short_subscribe_is_not_answered() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let full = controls(&[subscribe(TOPIC, 7, 1, None)]);
    assert_eq!(full.len(), 72);
    let mut net = Outbox::new();
    for cut in 1..=16 {
        let mut d = full[..72 - cut].to_vec();
        // The payload length (header bytes 6..8) told to match, so the frame parses if allowed.
        let len = u16::from_le_bytes([d[6], d[7]]).saturating_sub(cut as u16);
        d[6..8].copy_from_slice(&len.to_le_bytes());
        publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
        assert_eq!(
            net.drain().len(),
            0,
            "a {}-byte Subscribe answered",
            d.len()
        );
    }
}

/// Sources that cannot be answered (port 0, unspecified, multicast, broadcast, in either
/// spelling) get nothing, and nothing fails.
#[test]
fn unanswerable_sources_get_nothing() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    let mut net = Outbox::new();
    let bad: [SocketAddr; 7] = [
        "0.0.0.0:0".parse().expect("addr"),
        "127.0.0.1:0".parse().expect("addr"),
        "0.0.0.0:9000".parse().expect("addr"),
        "224.0.0.1:9000".parse().expect("addr"),
        "255.255.255.255:9000".parse().expect("addr"),
        "[::ffff:224.0.0.1]:9000".parse().expect("addr"),
        "[ff02::1]:9000".parse().expect("addr"),
    ];
    for src in bad {
        publ.handle(&d, src, MS, &mut net, &mut Got::default());
        assert_eq!(net.drain().len(), 0, "answered {src}");
    }
    // A good one is answered (the request is valid).
    publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 1);
}

/// A publisher that dies mid-stream and restarts (a new session id, the same address): the
/// import's requests while it is gone stay few, and once it is back the import follows the
/// new session (an `Established { changed: true }`) and gets its messages from 1 again.
#[test]
fn publisher_restart_mid_stream_is_followed() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(false, 0), import(false));
    publish(&mut w, 1..=5, 4);
    w.hosts[SUB].events.clear();
    // Dead for 10 s: count what the subscriber sends into the void.
    w.hosts[PUB].up = false;
    w.nowhere.clear();
    for _ in 0..10_000 {
        tick(&mut w, MS);
    }
    let sent = w
        .nowhere
        .iter()
        .filter(|(src, _, _)| *src == sub_addr())
        .count();
    assert!(sent <= 30, "{sent} datagrams to a dead publisher in 10 s");
    w.restart(
        PUB,
        Endpoint::new(
            &config,
            MAX,
            PUB_SESSION + 1,
            [8; 32],
            vec![export(false, 0)],
            Vec::new(),
        ),
    );
    for _ in 0..5000 {
        tick(&mut w, MS);
        if w.hosts[PUB].ep.destinations(TOPIC).count() > 0 {
            break;
        }
    }
    publish(&mut w, 1..=5, 4);
    assert_eq!(got(&w), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]);
    let mut changed = false;
    for e in std::mem::take(&mut w.hosts[SUB].events) {
        if let Event::Established {
            changed: c,
            session,
            ..
        } = e
        {
            assert_eq!(session, PUB_SESSION + 1);
            changed |= c;
        }
    }
    assert!(changed, "no Established {{ changed: true }}");
}

/// A subscriber that dies mid-stream and restarts at the same address (a new session):
/// the publisher follows it (a new token), and it gets the messages published after it is
/// back, every one once.
#[test]
fn subscriber_restart_mid_stream_is_served() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(false, 0), import(false));
    publish(&mut w, 1..=5, 4);
    assert_eq!(got(&w), (1..=5).collect::<Vec<_>>());
    let old_token = w.hosts[PUB]
        .ep
        .destinations(TOPIC)
        .find(|&(a, _)| a == sub_addr())
        .map(|(_, t)| t);
    w.restart(
        SUB,
        Endpoint::new(
            &config,
            MAX,
            SUB_SESSION + 1,
            [10; 32],
            Vec::new(),
            vec![import(false)],
        ),
    );
    for _ in 0..100 {
        tick(&mut w, MS);
    }
    assert!(matches!(
        w.hosts[SUB].ep.import_state(0),
        Some(crate::ImportState::Established { .. })
    ));
    let new_token = w.hosts[PUB]
        .ep
        .destinations(TOPIC)
        .find(|&(a, _)| a == sub_addr())
        .map(|(_, t)| t);
    assert_ne!(
        old_token, new_token,
        "the token did not change with the session"
    );
    assert_eq!(
        w.hosts[PUB].ep.destinations(TOPIC).count(),
        1,
        "two entries for one address"
    );
    publish(&mut w, 6..=10, 4);
    // The restarted subscriber's deliveries: every message since it is back, once.
    assert_eq!(got(&w), (6..=10).collect::<Vec<_>>());
}

/// The pair over a network that duplicates every datagram (each handshake answer arrives
/// twice) and, every second, delivers late copies of the last few handshake answers again:
/// nothing counts as invalid (no drop of any reason), no late frame is answered, the
/// duplicates are counted by name, and the import stays on its session.
#[test]
fn duplicated_and_late_handshake_frames_are_not_invalid() {
    let mut w = World::new(3);
    w.add(
        pub_addr(),
        publisher(&BridgeConfig::default(), vec![export(false, 0)]),
    );
    w.add(
        sub_addr(),
        subscriber(&BridgeConfig::default(), vec![import(false)]),
    );
    w.faults.dup = 1000;
    w.capture = Some(sub_addr());
    for ms in 0..5000u64 {
        w.step();
        if ms % 1000 == 999 {
            // The last few answers (older ones are forgotten: they would be `BadNonce`).
            let answers: Vec<Vec<u8>> = w
                .captured
                .iter()
                .filter(|(_, d)| is_handshake_answer(d))
                .map(|(_, d)| d.clone())
                .collect();
            let mut late: Vec<Vec<u8>> = answers.into_iter().rev().collect();
            late.dedup();
            for old in late.into_iter().take(4) {
                let answered = w.handle(SUB, &old, pub_addr());
                assert!(answered.is_empty(), "a late frame was answered");
            }
        }
    }
    let sub = &w.hosts[SUB].ep;
    sub.refresh_metrics();
    for reason in DropReason::ALL {
        assert_eq!(sub.metrics().dropped(reason), 0, "{reason:?}");
    }
    let duplicates = sub.metrics().control_duplicates.get();
    assert!(duplicates > 0, "{duplicates}");
    assert!(matches!(
        sub.import_state(0),
        Some(ImportState::Established {
            session: PUB_SESSION,
            ..
        })
    ));
}

/// Whether `d` holds a cookie challenge or an acknowledgement.
fn is_handshake_answer(d: &[u8]) -> bool {
    crate::parse_datagram(d, MAX + 64).is_ok_and(|mut frames| {
        frames.any(|f| matches!(f.header.kind, Kind::CookieChallenge | Kind::SubscribeAck))
    })
}
