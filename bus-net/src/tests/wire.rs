//! What every datagram in and out obeys: hostile bytes never fail the endpoint, no datagram
//! exceeds the maximum datagram size, frames say wire version 3, and `next_deadline` is never
//! after due work.

use super::pair::{
    addr, controls, export, forged_heartbeat, handshake, import, nak_datagram, pair, psk_config,
    pub_addr, publisher, subscribe, PUB, PUB_SESSION, SUB, TOPIC,
};
use super::world::{Got, Outbox, MAX, MS, SEC};
use crate::{parse_datagram, BridgeConfig, Control, Cookie, Endpoint, Kind, VERSION};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// Arbitrary bytes and mutations of genuine datagrams, from any source, to both sides: nothing
/// panics ("a malformed datagram is counted and dropped; nothing here fails"), and the stream
/// still flows afterwards.
#[test]
fn hostile_datagrams_never_fail_the_endpoint() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(true, 8), import(true));
    let mut rng = fastrand::Rng::with_seed(0x22);
    let mut samples: Vec<Vec<u8>> = Vec::new();
    let mut net = Outbox::new();
    for n in 1..=5u64 {
        let mut b = w.hosts[PUB]
            .ep
            .export(0, net.from(pub_addr()))
            .expect("export");
        b.push(&(n, vec![0u8; 40]));
        drop(b);
    }
    samples.extend(net.drain().into_iter().map(|(_, _, d)| d));
    samples.push(controls(&[subscribe(TOPIC, 7, 1, None)]));
    samples.push(forged_heartbeat(PUB_SESSION, 3, Some(0)));
    samples.push(nak_datagram(&[TOPIC], Cookie([0; 16]), PUB_SESSION, 1));
    let mut got = Got::default();
    for i in 0..20_000u32 {
        let d: Vec<u8> = if rng.u8(..4) == 0 {
            (0..rng.usize(..1600)).map(|_| rng.u8(..)).collect()
        } else {
            let mut d = samples[rng.usize(..samples.len())].clone();
            for _ in 0..rng.usize(1..4) {
                if d.is_empty() {
                    break;
                }
                let at = rng.usize(..d.len());
                match rng.u8(..3) {
                    0 => d[at] = rng.u8(..),
                    1 => d.truncate(at),
                    _ => d.insert(at, rng.u8(..)),
                }
            }
            d
        };
        let src = if rng.bool() {
            pub_addr()
        } else {
            addr(rng.u8(..), rng.u16(..))
        };
        let now = w.now + u64::from(i);
        w.hosts[SUB].ep.handle(&d, src, now, &mut net, &mut got);
        w.hosts[PUB].ep.handle(&d, src, now, &mut net, &mut got);
        net.clear();
    }
    assert!(matches!(
        w.hosts[SUB].ep.import_state(0),
        Some(crate::ImportState::Established { .. })
    ));
}

/// SECURITY.md "maximum datagram": no datagram an endpoint sends is larger than its
/// `max_datagram` (tokens and MAC trailers included), whatever it sends: data of every size
/// (fragments too), heartbeats, retransmissions, late-join bursts, handshake answers to a
/// full-size request from an IPv4 peer to a dual-stack (1452-byte) publisher.
#[test]
fn no_datagram_exceeds_max_datagram() {
    for key in [false, true] {
        let config = if key {
            psk_config()
        } else {
            BridgeConfig::default()
        };
        let small = crate::DEFAULT_MAX_DATAGRAM_V6;
        let mut w = pair(&config, export(true, 64), import(true));
        w.restart(
            PUB,
            Endpoint::new(
                &config,
                small,
                PUB_SESSION + 1,
                [5; 32],
                vec![export(true, 64)],
                Vec::new(),
            ),
        );
        // Every datagram from the publisher is checked on its way; every fifth is lost, so
        // that NAKs and retransmissions happen.
        let largest = Rc::new(Cell::new(0usize));
        let seen = Rc::clone(&largest);
        let mut n = 0usize;
        w.path = Some(Box::new(move |_, d| {
            if d.src != pub_addr() {
                return true;
            }
            let len = d.bytes.len();
            assert!(len <= small, "key {key}: a {len}-byte datagram");
            seen.set(seen.get().max(len));
            n += 1;
            n % 5 != 0
        }));
        let mut rng = fastrand::Rng::with_seed(3);
        for step in 0..3000u64 {
            w.now += MS;
            if step % 3 == 0 {
                let pad = rng.usize(..4000);
                w.publish(PUB, 0, &(step, vec![1u8; pad]));
            }
            w.tick();
        }
        let delivered = w.hosts[SUB].got.len();
        assert!(delivered > 500, "key {key}: delivered {delivered}");
        let largest = largest.get();
        assert!(largest > small - 100, "key {key}: largest only {largest}");
        // A full-size request from an IPv4 peer (1472 bytes of Subscribes) is answered in one
        // datagram the publisher may send.
        let list: Vec<Control> = (0..20).map(|n| subscribe(TOPIC, 9, n, None)).collect();
        let d = controls(&list);
        if !key {
            assert!(d.len() > small - 72, "request of {}", d.len());
            let mut net = Outbox::new();
            w.hosts[PUB]
                .ep
                .handle(&d, addr(4, 9000), w.now, &mut net, &mut Got::default());
            for (_, _, a) in net.drain() {
                assert!(a.len() <= small, "an answer of {}", a.len());
            }
        }
    }
}

/// docs/PROTOCOL.md: the native format is wire version 3; every frame the endpoint sends says
/// so in byte 3 of its header.
#[test]
fn frames_say_wire_version_3() {
    assert_eq!(VERSION, 3);
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut net = Outbox::new();
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
    let sent = net.drain();
    assert_eq!(sent.len(), 1);
    let frames = parse_datagram(&sent[0].2, MAX).expect("parses");
    for f in frames {
        assert_eq!(f.header.kind, Kind::CookieChallenge);
    }
    assert_eq!(sent[0].2[3], 3);
    let _ = Duration::ZERO;
}

/// `next_deadline`: "when on_timer next has something to do at the latest". A publisher with
/// a subscriber, called every millisecond for 3 s: whenever `on_timer` sends something, the
/// deadline it announced beforehand was not later.
#[test]
fn next_deadline_is_never_after_due_work() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    handshake(&mut publ, addr(2, 9000), TOPIC, 7, MS, &mut none).expect("admitted");
    let mut net = Outbox::new();
    let mut got = Got::default();
    let mut sends = 0;
    let mut now = 2 * MS;
    while now < 3 * SEC {
        let deadline = publ.next_deadline();
        publ.on_timer(now, &mut net, &mut got);
        if net.to_host(2).0 > 0 {
            sends += 1;
            assert!(
                deadline <= now,
                "work at {now} after a deadline of {deadline}"
            );
        }
        net.clear();
        now += MS;
    }
    assert!(sends >= 10, "heartbeats: {sends}");
}
