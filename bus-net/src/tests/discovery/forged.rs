//! An off-path adversary forges announcements under any source address, replays a departed
//! publisher's, and sends unsealed ones to a keyed subscriber: none redirects an import,
//! feeds it, or grows its tables or its traffic past the caps.

use std::net::SocketAddr;

use super::super::fleet::{
    addr, discovery, forged_data, publisher, publisher_with, sub_addr, subscriber, subscriber_with,
    Net, FP, TOPIC,
};
use super::super::world::MAX;
use crate::{AnnounceHead, BatchEncoder, BridgeConfig};

/// An announcement as the adversary forges it, under session `session`, pointing at
/// `data`.
fn forged_announce(session: u64, data: SocketAddr) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut scratch = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf);
    let head = AnnounceHead {
        session,
        seq: 1,
        timestamp_ns: 0,
        period_ms: 3_600_000,
        uptime_ms: 0,
        data,
        group: None,
    };
    let topics = [(TOPIC, FP, 0, "sim.quote")];
    enc.push_announce(&head, 0, 1, topics.iter().copied(), &mut scratch)
        .unwrap();
    enc.as_bytes().to_vec()
}

#[test]
fn forged_announcements_cannot_redirect_feed_or_flood() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    let mut rng = fastrand::Rng::with_seed(24);
    let config = discovery();
    let imports_before = net.w.hosts[0].ep.imports().count();
    // A flood: every millisecond, ten announcements from forged sources (other hosts,
    // random ports and sessions), one claiming the real publisher's address under a new
    // session, and one pointing at a host other than its source.
    for _ in 0..3000 {
        for _ in 0..10 {
            let src = SocketAddr::from(([127, 0, 0, rng.u8(10..250)], rng.u16(1..)));
            let bytes = forged_announce(rng.u64(..), SocketAddr::from(([0, 0, 0, 0], src.port())));
            net.w.inject(src, sub_addr(), bytes);
        }
        net.w
            .inject(addr(1), sub_addr(), forged_announce(0xbad, addr(1)));
        let elsewhere = forged_announce(0xbad, SocketAddr::from(([127, 0, 0, 1], 9)));
        net.w.inject(
            SocketAddr::from(([127, 0, 0, 66], 5)),
            sub_addr(),
            elsewhere,
        );
        // And data from a forged publisher it may be trying, with a guessed token.
        let seq = 1;
        let data = forged_data(0xbad, seq, rng.u64(..));
        let tried: Vec<SocketAddr> = net.discovered().iter().map(|d| d.0).collect();
        if let Some(&src) = tried.get(rng.usize(..tried.len())) {
            net.w.inject(src, sub_addr(), data);
        }
        net.step();
        // Bounded at every moment: the real publisher plus at most `max_tries` tries.
        let followed = net.discovered();
        assert!(followed.len() <= 1 + config.max_tries, "{followed:?}");
        assert!(net.w.hosts[0].ep.imports().count() <= imports_before + config.max_tries);
    }
    // Never redirected: the real publisher is still followed at its address, and fed.
    assert!(net.discovered().iter().any(|d| d.0 == addr(1)));
    let mark = net.mark(0);
    net.run(200);
    assert!(net.from(0xa1, mark) >= 15);
    // Nothing forged was ever delivered.
    assert!(net.got(0).iter().all(|(_, v)| v >> 32 == 0xa1));
    // Tries are few and each costs a bounded number of requests: 3 s of flood with at most
    // 4 tries in flight, each given up after 1.5 s, is at most 8 tries (and the real
    // publisher); a try sends a request per renewal, or per resubscribe gap (20 ms) while
    // forged data claims to come from it, and one unsubscribe when given up.
    let counts = net.w.hosts[0].ep.discovery_counts().unwrap();
    assert!(counts.ignored > 25_000, "{counts:?}");
    assert!(counts.found <= 1 + 4 * 2, "{counts:?}");
    let per_try = 1500 / 20 + 3;
    assert!(
        net.to_nowhere() <= (counts.found - 1) * per_try,
        "{} requests to forged addresses, {counts:?}",
        net.to_nowhere()
    );
    // Once the flood stops, the tries are given up.
    net.run(2000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
}

#[test]
fn with_a_key_announcements_are_sealed_and_forged_ones_dropped() {
    let config = BridgeConfig {
        psk: Some([5; 32]),
        ..BridgeConfig::default()
    };
    let mut net = Net::new(vec![
        subscriber_with(&config, &discovery()),
        publisher_with(1, 0xa1, &config, &discovery()),
    ]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    let mark = net.mark(0);
    // Unsealed announcements, however plausible, are dropped before they are read.
    for host in 10..60 {
        let src = SocketAddr::from(([127, 0, 0, host], 7100));
        net.w
            .inject(src, sub_addr(), forged_announce(u64::from(host), src));
    }
    net.run(500);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    assert!(net.from(0xa1, mark) >= 45);
    let counts = net.w.hosts[0].ep.discovery_counts().unwrap();
    assert_eq!((counts.found, counts.ignored), (1, 0), "{counts:?}");
}

#[test]
fn replayed_announcements_cannot_keep_a_publisher_that_left_followed() {
    let mut net = Net::new(vec![subscriber(), publisher(1, 0xa1)]);
    net.run(1000);
    assert_eq!(net.discovered(), [(addr(1), 0xa1)]);
    net.w.hosts[1].up = false;
    // The publisher is gone, but its announcements are replayed (without a key, a replay is
    // the same bytes under the same source) every 100 ms.
    let replayed = forged_announce(0xa1, addr(1));
    let mut given_up_at = None;
    for ms in 0..6000u64 {
        if ms % 100 == 0 {
            net.w.inject(addr(1), sub_addr(), replayed.clone());
        }
        net.step();
        let counts = net.w.hosts[0].ep.discovery_counts().unwrap();
        if counts.given_up > 0 && given_up_at.is_none() {
            given_up_at = Some(ms);
        }
    }
    // Given up once the try timeout (1.5 s) passed without an answer, and tried again at
    // most once per timeout after: requests to the dead address stay few.
    let given_up_at = given_up_at.expect("never given up");
    assert!(given_up_at <= 1500 + 1200, "{given_up_at}");
    let counts = net.w.hosts[0].ep.discovery_counts().unwrap();
    assert!(counts.given_up <= 3, "{counts:?}");
    assert!(
        net.to_nowhere() <= 60,
        "{} requests to the dead address",
        net.to_nowhere()
    );
}
