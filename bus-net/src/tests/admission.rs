//! Who gets a subscription, and for how long: one host holds at most `subscribers_per_host`
//! slots of a topic (the next is refused `HostFull`, and its endpoint learns why), renewals
//! count against the per-source rate limit (per IP, whatever the port), slots are released by
//! unsubscribe and expiry, a subscriber that never renews expires, and another port of the
//! same host cannot unsubscribe a subscriber.

use super::pair::{
    addr, answers, controls, export, got, handshake, import, pair, pub_addr, publish, publisher,
    sub_addr, subscribe, FP, PUB, SUB_SESSION, TOPIC,
};
use super::world::{Got, Outbox, World, MAX, MS, SEC};
use crate::{BridgeConfig, Control, Endpoint, Event, RefuseReason};

/// One host gets at most `subscribers_per_host` (4) slots of a topic, whatever its ports; the
/// next is refused `HostFull`; another host still subscribes.
#[test]
fn one_host_holds_at_most_four_slots_and_another_host_still_subscribes() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut admitted = 0;
    let mut refusal = None;
    for port in 0..10u16 {
        let mut r = None;
        if handshake(&mut publ, addr(2, 9000 + port), TOPIC, 7, MS, &mut r).is_some() {
            admitted += 1;
        }
        refusal = refusal.or(r);
    }
    assert_eq!(admitted, 4, "slots of one host");
    assert_eq!(refusal, Some(RefuseReason::HostFull));
    let mut r = None;
    assert!(
        handshake(&mut publ, addr(3, 9000), TOPIC, 7, MS, &mut r).is_some(),
        "another host refused: {r:?}"
    );
}

/// A subscriber endpoint refused for a full host learns why: a `Retrying` event naming
/// `HostFull`, and it stays unestablished.
#[test]
fn refused_subscriber_endpoint_learns_host_full() {
    let config = BridgeConfig::default();
    let mut w = World::new(1);
    w.now = MS;
    w.add(pub_addr(), publisher(&config, vec![export(false, 0)]));
    for i in 0..5u16 {
        let ep = Endpoint::new(
            &config,
            MAX,
            100 + u64::from(i),
            [i as u8; 32],
            Vec::new(),
            vec![import(false)],
        );
        w.add(addr(2, 9100 + i), ep);
    }
    w.run(100);
    let established = (1..=5)
        .filter(|&i| {
            matches!(
                w.hosts[i].ep.import_state(0),
                Some(crate::ImportState::Established { .. })
            )
        })
        .count();
    assert_eq!(established, 4);
    let reasons: Vec<RefuseReason> = w.hosts[5]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Retrying { refusal, .. } => Some(refusal.reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [RefuseReason::HostFull],
        "events of the refused one"
    );
}

/// Renewals count against the per-source rate limit (20/s, bursts of 40): an admitted source
/// that renews 400 times in one instant, 20 Subscribes per datagram, gets at most the burst
/// answered.
#[test]
fn renewals_are_rate_limited() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let src = addr(2, 9000);
    let mut none = None;
    let learned = handshake(&mut publ, src, TOPIC, 7, MS, &mut none).expect("admitted");
    let renewals: Vec<Control> = (0..20)
        .map(|n| subscribe(TOPIC, 7, 100 + n, Some(learned.cookie)))
        .collect();
    let d = controls(&renewals);
    let mut net = Outbox::new();
    let mut acks = 0;
    for _ in 0..20 {
        publ.handle(&d, src, MS, &mut net, &mut Got::default());
        acks += answers(&net.drain(), src).len();
    }
    assert!(acks > 0, "renewals never answered");
    assert!(acks <= 40, "{acks} renewals answered in one instant");
}

/// The control rate limit is per source IP, not per address: 200 ports of one host, each
/// sending one Subscribe at the same instant, get at most the burst (40) of challenges; a
/// second host is still answered.
#[test]
fn rate_limit_is_per_ip_whatever_the_port() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut net = Outbox::new();
    let mut answered = 0;
    for port in 0..200u16 {
        let d = controls(&[subscribe(TOPIC, 7, u64::from(port), None)]);
        publ.handle(
            &d,
            addr(2, 10_000 + port),
            MS,
            &mut net,
            &mut Got::default(),
        );
        answered += net.drain().len();
    }
    assert!(
        answered >= 20,
        "{answered}: the limit is not 20/s, bursts of 40"
    );
    assert!(
        answered <= 40,
        "{answered} answers to one host in an instant"
    );
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    publ.handle(&d, addr(3, 10_000), MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 1, "another host starved");
}

/// A subscriber that never renews is expired after 60 s and gets nothing more.
#[test]
fn subscriber_that_never_renews_expires() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    handshake(&mut publ, addr(2, 9000), TOPIC, 7, MS, &mut none).expect("admitted");
    let mut net = Outbox::new();
    let mut got = Got::default();
    let mut now = MS;
    while now < 62 * SEC {
        now += 100 * MS;
        publ.on_timer(now, &mut net, &mut got);
        net.clear();
    }
    assert_eq!(publ.destinations(TOPIC).count(), 0, "still subscribed");
    let mut b = publ.export(0, &mut net).expect("export");
    b.push(&(1u64, vec![0u8; 4]));
    drop(b);
    assert_eq!(net.to_host(2).0, 0, "data to an expired subscriber");
}

/// A host's slots come back: after one of its four subscribers unsubscribes (with its
/// cookie), or all stop renewing and expire, another port of that host is admitted.
#[test]
fn host_slots_are_released_by_unsubscribe_and_expiry() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    let mut learned = Vec::new();
    for port in 0..4u16 {
        let l =
            handshake(&mut publ, addr(2, 9000 + port), TOPIC, 7, MS, &mut none).expect("admitted");
        learned.push(l);
    }
    let mut r = None;
    assert!(handshake(&mut publ, addr(2, 9100), TOPIC, 7, MS, &mut r).is_none());
    assert_eq!(r, Some(RefuseReason::HostFull));
    let unsub = controls(&[Control::Unsubscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session: 7,
        nonce: 9,
        cookie: Some(learned[0].cookie),
    }]);
    let mut net = Outbox::new();
    publ.handle(&unsub, addr(2, 9000), 2 * MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 0, "an Unsubscribe is not answered");
    let mut r = None;
    assert!(
        handshake(&mut publ, addr(2, 9100), TOPIC, 7, 3 * MS, &mut r).is_some(),
        "slot not released by Unsubscribe: {r:?}"
    );
    // Nobody renews: after the timeout every slot is free again.
    let mut now = 3 * MS;
    while now < 62 * SEC {
        now += 100 * MS;
        publ.on_timer(now, &mut net, &mut Got::default());
        net.clear();
    }
    for port in 0..4u16 {
        let mut r = None;
        assert!(
            handshake(&mut publ, addr(2, 9200 + port), TOPIC, 7, now, &mut r).is_some(),
            "slot {port} not released by expiry: {r:?}"
        );
    }
}

/// Another port of the subscriber's own host (which has a cookie of its own) cannot
/// unsubscribe the subscriber: its cookie does not prove the subscriber's address.
#[test]
fn another_port_of_the_host_cannot_unsubscribe_the_subscriber() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(false, 0), import(false));
    let mut none = None;
    let neighbour = addr(1, 7009);
    let l =
        handshake(&mut w.hosts[PUB].ep, neighbour, TOPIC, 7, w.now, &mut none).expect("admitted");
    let unsub = controls(&[Control::Unsubscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SUB_SESSION,
        nonce: 3,
        cookie: Some(l.cookie),
    }]);
    let mut net = Outbox::new();
    w.hosts[PUB]
        .ep
        .handle(&unsub, sub_addr(), w.now, &mut net, &mut Got::default());
    assert!(
        w.hosts[PUB]
            .ep
            .destinations(TOPIC)
            .any(|(a, _)| a == sub_addr()),
        "a neighbour's cookie unsubscribed the subscriber"
    );
    publish(&mut w, 1..=3, 4);
    assert_eq!(got(&w), [1, 2, 3]);
}
