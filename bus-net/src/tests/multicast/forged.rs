//! Attacks on a multicast group: a Subscribe an eavesdropper captured and replays (with a
//! key: dropped), Subscribes an off-path host forges under members' addresses, and data it
//! forges to the group with a guessed token. No member is moved onto or off the group, sent
//! its data twice, silenced or fed.

use std::net::SocketAddr;

use super::super::fleet::{
    addr, data_group, exporter, forged_data, importer, importer_configured, multicast_publisher,
    node, Net, FP, TOPIC,
};
use super::super::world::MAX;
use crate::{BatchEncoder, BridgeConfig};

/// With a key, a Subscribe an eavesdropper captured and replays under its subscriber's address
/// (from the same source, with its valid cookie) is dropped as a replay: it moves no member off
/// the group (which would double its data) and no member that fell back onto it (which would
/// silence it). Without a key it is accepted (see `SECURITY.md`, "Forged multicast data").
#[test]
fn with_a_key_replayed_subscribes_cannot_move_a_subscriber_onto_or_off_the_group() {
    let config = BridgeConfig {
        psk: Some([5; 32]),
        ..BridgeConfig::default()
    };
    let publisher = exporter(1, 0xa1, &config, Some(data_group()), false);
    let mut net = Net::new(vec![
        importer_configured(9, false, &config),
        node(addr(1), publisher, 0xa1),
        importer_configured(10, false, &config),
    ]);
    net.w.capture = Some(addr(1));
    net.run(2000);
    let via = |net: &Net, i: usize| {
        let addr = net.w.hosts[i].addr;
        net.w.hosts[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .find(|s| s.addr == addr)
            .map(|s| s.via_group)
    };
    assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(true)));
    // What member 0 sent its publisher: Subscribes with its cookie (72 bytes of frame), with
    // and without flag GROUP (the header is authenticated, not hidden).
    let member = net.w.hosts[0].addr;
    let subscribes = |group: bool| {
        net.w
            .captured
            .iter()
            .rev()
            .filter(|(src, b)| *src == member && b.get(4) == Some(&0x10))
            .filter(|(_, b)| {
                b.get(5)
                    .is_some_and(|f| (f & crate::Flags::GROUP != 0) == group)
            })
            .map(|(_, b)| b.clone())
            .next()
    };
    let (unicast_claim, group_claim) = (subscribes(false), subscribes(true));
    let (Some(unicast_claim), Some(group_claim)) = (unicast_claim, group_claim) else {
        panic!("the premise: member 0 said both");
    };
    let replay = |net: &mut Net, bytes: &[u8], publisher: SocketAddr| {
        for ms in 0..1000 {
            if ms % 50 == 0 {
                net.w.inject(member, publisher, bytes.to_vec());
            }
            net.step();
        }
    };
    // Replays of its handshake Subscribe (no GROUP) while it receives the group.
    let (mark, duplicates) = (net.marks(), net.w.hosts[0].ep.loss().duplicates);
    let to_group = net.to_group();
    replay(&mut net, &unicast_claim, addr(1));
    assert_eq!(via(&net, 0), Some(true));
    assert_eq!(net.w.hosts[0].ep.loss().duplicates, duplicates);
    assert!(net.to_group() > to_group);
    let n = net.got_from(0, 0xa1, mark[0]);
    assert!((99..=101).contains(&n), "{n}");
    // Its network stops carrying the group: it falls back to unicast, and replays of a
    // Subscribe that claimed the group do not silence it.
    net.w.hosts[0].deaf = true;
    net.run(1000);
    assert_eq!(via(&net, 0), Some(false));
    let mark = net.marks();
    replay(&mut net, &group_claim, addr(1));
    assert_eq!(via(&net, 0), Some(false));
    let n = net.got_from(0, 0xa1, mark[0]);
    assert!((99..=101).contains(&n), "{n}");
}

/// A `Subscribe` of the simulated topic as an off-path host forges it under `session`, without
/// the cookie that proves its source address, with flag GROUP when `group`.
fn forged_subscribe(session: u64, group: bool) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let subscribe = crate::Control::Subscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        nonce: 1,
        cookie: None,
    };
    enc.push_control(&subscribe).unwrap();
    let mut bytes = enc.as_bytes().to_vec();
    if group {
        bytes[5] |= crate::Flags::GROUP;
    }
    bytes
}

#[test]
fn forged_subscribes_cannot_move_a_subscriber_onto_or_off_the_group() {
    // Node 0 receives the group; node 2 is on a network that drops multicast.
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
    ]);
    net.w.hosts[2].deaf = true;
    net.run(2000);
    let via = |net: &Net, i: usize| {
        let addr = net.w.hosts[i].addr;
        net.w.hosts[1]
            .ep
            .publisher()
            .subscribers()
            .iter()
            .find(|s| s.addr == addr)
            .map(|s| s.via_group)
    };
    assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(false)));
    let mark = net.marks();
    let duplicates = net.w.hosts[0].ep.loss().duplicates;
    // For a second, five times a second (inside the sources' rate limit), an off-path host
    // claims under each subscriber's address the opposite of what it says: the deaf one
    // "receives the group" (its data would stop), the member "does not" (it would be sent
    // every message twice).
    for ms in 0..1000 {
        if ms % 200 == 0 {
            let (member, deaf) = (net.w.hosts[0].addr, net.w.hosts[2].addr);
            let publisher = net.w.hosts[1].addr;
            let claims = [
                (deaf, forged_subscribe(0x5ab, true)),
                (member, forged_subscribe(0x5ac, false)),
            ];
            for (src, bytes) in claims {
                net.w.inject(src, publisher, bytes);
            }
        }
        net.step();
        assert_eq!((via(&net, 0), via(&net, 2)), (Some(true), Some(false)));
    }
    for i in [0, 2] {
        let n = net.got_from(i, 0xa1, mark[i]);
        assert!((99..=101).contains(&n), "node {i}: {n}");
    }
    assert_eq!(net.w.hosts[0].ep.loss().duplicates, duplicates);
}

#[test]
fn an_off_path_forger_cannot_feed_a_group_without_its_token() {
    let mut net = Net::new(vec![
        importer(9),
        multicast_publisher(1, 0xa1),
        importer(10),
    ]);
    net.run(2000);
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..1000 {
        // Under the publisher's address and session (both public), a guessed group token.
        let seq = rng.u64(1..1 << 40);
        let data = forged_data(0xa1, seq, rng.u64(..));
        net.w.inject(addr(1), data_group(), data);
        net.step();
    }
    for i in [0, 2] {
        assert!(net.got(i).iter().all(|(_, v)| v >> 32 == 0xa1), "node {i}");
        assert_eq!(net.w.hosts[i].ep.loss().lost, 0, "node {i}");
    }
}
