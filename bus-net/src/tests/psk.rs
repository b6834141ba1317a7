//! With a pre-shared key: an allowed host without the key is not even answered; an altered
//! sealed datagram is not delivered; a replayed one is dropped before the sequence tracker.

use super::pair::{
    addr, export, forged_data, got, handshake, import, pair, psk_config, pub_addr, publish,
    send_to_sub, PUB, PUB_SESSION, SUB, TOPIC,
};
use super::world::Outbox;
use crate::HEADER_LEN;

/// With a pre-shared key: an allowed host without the key is not even answered; an altered
/// sealed datagram is not delivered; a replayed one is dropped before the sequence tracker
/// (no duplicate counted).
#[test]
fn psk_mac_refuses_keyless_hosts_alterations_and_replays() {
    let config = psk_config();
    let mut w = pair(&config, export(false, 0), import(false));
    let mut none = None;
    assert!(
        handshake(
            &mut w.hosts[PUB].ep,
            addr(2, 9000),
            TOPIC,
            7,
            w.now,
            &mut none
        )
        .is_none(),
        "a keyless host was admitted"
    );
    // Capture a sealed data datagram on its way.
    let mut net = Outbox::new();
    let mut batch = w.hosts[PUB]
        .ep
        .export(0, net.from(pub_addr()))
        .expect("export");
    batch.push(&(1u64, vec![0u8; 4]));
    drop(batch);
    let sealed = net.drain();
    assert_eq!(sealed.len(), 1);
    let genuine = sealed[0].2.clone();
    for i in [0, 10, HEADER_LEN + 2, genuine.len() - 1] {
        let mut altered = genuine.clone();
        altered[i] ^= 0x01;
        send_to_sub(&mut w, &altered, pub_addr());
    }
    send_to_sub(&mut w, &forged_data(PUB_SESSION, 1, None), pub_addr());
    assert!(got(&w).is_empty(), "altered or unsealed data delivered");
    send_to_sub(&mut w, &genuine, pub_addr());
    send_to_sub(&mut w, &genuine, pub_addr());
    publish(&mut w, 2..=3, 4);
    send_to_sub(&mut w, &genuine, pub_addr());
    assert_eq!(got(&w), [1, 2, 3]);
    let loss = w.hosts[SUB].ep.loss();
    assert_eq!(loss.duplicates, 0, "a replay reached the tracker: {loss:?}");
}
