//! A publisher ([`PUB`]) and a subscriber ([`SUB`]) of one topic on a lossless [`World`], and
//! what an attacker needs: forged data and heartbeats, control datagrams, and the raw
//! handshake by which an allowed host subscribes itself and learns the publisher's session, a
//! cookie and a token of its own. Time moves only when a test says so, so every bound is
//! checked exactly. Messages are `(n, padding)`; what the subscriber got is read as the `n`s.

use std::net::SocketAddr;

use super::world::{ip, Got, Outbox, World, MAX, MS};
use crate::{
    parse_datagram, BatchEncoder, BridgeConfig, Control, Cookie, DataMeta, Endpoint, ExportSpec,
    ImportSpec, ImportState, Nak, RefuseReason,
};

pub(crate) const TOPIC: u64 = 0x5eed_0001;
pub(crate) const FP: u64 = 0xf00d_0001;
pub(crate) const PUB_SESSION: u64 = 0x1111_2222_3333_4444;
pub(crate) const SUB_SESSION: u64 = 0x5555_6666_7777_8888;

pub(crate) const PUB: usize = 0;
pub(crate) const SUB: usize = 1;

/// The loopback address `127.0.0.host:port`.
pub(crate) fn addr(host: u8, port: u16) -> SocketAddr {
    ip(host, port)
}

pub(crate) fn pub_addr() -> SocketAddr {
    addr(1, 7000)
}

pub(crate) fn sub_addr() -> SocketAddr {
    addr(1, 7001)
}

pub(crate) fn export(reliable: bool, late_join: usize) -> ExportSpec {
    ExportSpec {
        topic: "pair.quote".into(),
        topic_id: TOPIC,
        fingerprint: FP,
        allow: None,
        reliable,
        late_join,
        shape: None,
        group: None,
    }
}

pub(crate) fn import(reliable: bool) -> ImportSpec {
    ImportSpec {
        topic: "pair.quote".into(),
        topic_id: TOPIC,
        fingerprint: FP,
        publisher: pub_addr(),
        reliable,
    }
}

pub(crate) fn publisher(config: &BridgeConfig, exports: Vec<ExportSpec>) -> Endpoint {
    Endpoint::new(config, MAX, PUB_SESSION, [7; 32], exports, Vec::new())
}

pub(crate) fn subscriber(config: &BridgeConfig, imports: Vec<ImportSpec>) -> Endpoint {
    Endpoint::new(config, MAX, SUB_SESSION, [9; 32], Vec::new(), imports)
}

/// A configuration with a pre-shared key.
pub(crate) fn psk_config() -> BridgeConfig {
    BridgeConfig {
        psk: Some([0x42; 32]),
        ..BridgeConfig::default()
    }
}

/// The publisher (exporting `exp`) and the subscriber (importing `imp`), subscribed: 50 ms of
/// timers on the lossless link.
pub(crate) fn pair(config: &BridgeConfig, exp: ExportSpec, imp: ImportSpec) -> World {
    let mut w = World::new(1);
    w.now = MS;
    w.add(pub_addr(), publisher(config, vec![exp]));
    w.add(sub_addr(), subscriber(config, vec![imp]));
    for _ in 0..50 {
        tick(&mut w, MS);
    }
    assert!(
        matches!(
            w.hosts[SUB].ep.import_state(0),
            Some(ImportState::Established { .. })
        ),
        "the subscriber did not establish: {:?}",
        w.hosts[SUB].ep.import_state(0)
    );
    w
}

/// `step` later: every timer, and what they send delivered.
pub(crate) fn tick(w: &mut World, step: u64) {
    w.now += step;
    w.tick();
}

/// Publishes messages `range` (each with a `pad`-byte body) and delivers them.
pub(crate) fn publish(w: &mut World, range: std::ops::RangeInclusive<u64>, pad: usize) {
    for n in range {
        w.publish(PUB, 0, &(n, vec![0xabu8; pad]));
        w.deliver();
    }
}

/// Hands the subscriber a datagram from `src`, and delivers what follows.
pub(crate) fn send_to_sub(w: &mut World, bytes: &[u8], src: SocketAddr) {
    w.handle(SUB, bytes, src);
    w.deliver();
}

/// The number of each message the subscriber got, in order.
pub(crate) fn got(w: &World) -> Vec<u64> {
    numbers(&w.hosts[SUB].got)
}

/// The number of each message in `got`.
pub(crate) fn numbers(got: &Got) -> Vec<u64> {
    got.values::<(u64, Vec<u8>)>()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// The subscriber's subscription token, as the publisher holds it.
pub(crate) fn sub_token(w: &World) -> Option<u64> {
    w.hosts[PUB]
        .ep
        .destinations(TOPIC)
        .find(|&(a, _)| a == sub_addr())
        .map(|(_, t)| t)
}

/// A datagram of one data frame, followed by `token` (if any).
pub(crate) fn forged_data(session: u64, seq: u64, token: Option<u64>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(token.is_some());
    let meta = DataMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        seq,
        timestamp_ns: 1,
    };
    enc.push_data(meta, &(0xdead_u64, vec![1u8; 4]))
        .expect("encode");
    let mut d = enc.as_bytes().to_vec();
    if let Some(t) = token {
        d.extend_from_slice(&t.to_le_bytes());
    }
    d
}

/// A datagram of one heartbeat, followed by `token` (if any).
pub(crate) fn forged_heartbeat(session: u64, last_seq: u64, token: Option<u64>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(token.is_some());
    enc.push_control(&Control::Heartbeat {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        last_seq,
        timestamp_ns: 1,
    })
    .expect("encode");
    let mut d = enc.as_bytes().to_vec();
    if let Some(t) = token {
        d.extend_from_slice(&t.to_le_bytes());
    }
    d
}

/// A datagram of `controls`.
pub(crate) fn controls(list: &[Control]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..]);
    for c in list {
        enc.push_control(c).expect("encode");
    }
    enc.as_bytes().to_vec()
}

pub(crate) fn subscribe(
    topic_id: u64,
    session: u64,
    nonce: u64,
    cookie: Option<Cookie>,
) -> Control {
    Control::Subscribe {
        topic_id,
        fingerprint: FP,
        session,
        nonce,
        cookie,
    }
}

/// Every control frame of the datagrams in `sent` to `to`.
pub(crate) fn answers(sent: &[(SocketAddr, SocketAddr, Vec<u8>)], to: SocketAddr) -> Vec<Control> {
    sent.iter()
        .filter(|(_, t, _)| *t == to)
        .flat_map(|(_, _, d)| {
            parse_datagram(d, MAX + 64)
                .map(|frames| {
                    frames
                        .filter_map(|f| Control::from_frame(&f).ok())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// What an allowed host learns by subscribing to `topic_id` from `src` itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Learned {
    pub(crate) session: u64,
    pub(crate) cookie: Cookie,
    pub(crate) token: u64,
    /// Bytes the handshake's answers (and any late-join burst it earned) took to `src`.
    pub(crate) bytes: usize,
}

/// Subscribes `src` (an allowed host's address) to `topic_id` of `publ`, as a raw attacker:
/// Subscribe, CookieChallenge, Subscribe with the cookie, SubscribeAck. `None` if refused.
pub(crate) fn handshake(
    publ: &mut Endpoint,
    src: SocketAddr,
    topic_id: u64,
    session: u64,
    now: u64,
    refusal: &mut Option<RefuseReason>,
) -> Option<Learned> {
    handshake_as(publ, src, (topic_id, FP), session, now, refusal)
}

/// [`handshake`] to `topic`: `(topic id, fingerprint)`.
pub(crate) fn handshake_as(
    publ: &mut Endpoint,
    src: SocketAddr,
    topic: (u64, u64),
    session: u64,
    now: u64,
    refusal: &mut Option<RefuseReason>,
) -> Option<Learned> {
    let (topic_id, fingerprint) = topic;
    let subscribe = |nonce, cookie| Control::Subscribe {
        topic_id,
        fingerprint,
        session,
        nonce,
        cookie,
    };
    let mut net = Outbox::new();
    let mut got = Got::default();
    let d = controls(&[subscribe(1, None)]);
    publ.handle(&d, src, now, &mut net, &mut got);
    let mut bytes = net.to_addr(src);
    let cookie = answers(&net.drain(), src)
        .into_iter()
        .find_map(|c| match c {
            Control::CookieChallenge { cookie, .. } => Some(cookie),
            _ => None,
        })?;
    let d = controls(&[subscribe(2, Some(cookie))]);
    publ.handle(&d, src, now, &mut net, &mut got);
    bytes += net.to_addr(src);
    let mut learned = None;
    for c in answers(&net.drain(), src) {
        match c {
            Control::SubscribeAck {
                session,
                cookie,
                token,
                ..
            } => {
                learned = Some(Learned {
                    session,
                    cookie,
                    token,
                    bytes,
                })
            }
            Control::Refuse(r) => *refusal = Some(r.reason),
            _ => {}
        }
    }
    learned
}

pub(crate) fn nak_datagram(topics: &[u64], cookie: Cookie, session: u64, nonce: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..]);
    for i in 0..16 {
        let topic_id = topics[i % topics.len()];
        let first = 1 + (i as u64 * 64) % 960;
        enc.push_nak(&Nak {
            topic_id,
            fingerprint: FP,
            session,
            cookie,
            nonce: nonce + i as u64,
            first,
            last: first + 63,
        })
        .expect("16 NAKs fit");
    }
    enc.as_bytes().to_vec()
}
