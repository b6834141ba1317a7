//! The session machines under arbitrary input: the publisher side (`PublisherSession`) and the
//! subscriber side of one import (`SubscriberSession`), joined by an honest loop, while the
//! fuzzer's datagrams arrive at either from any of a few source addresses (the honest peers'
//! included: a forged source). The input is a sequence of chunks `[ms, src, len_lo, len_hi,
//! bytes..]`; each chunk's bytes are parsed as a datagram and its frames handed to the machine
//! they are for.
//!
//! The fuzzer's datagrams end with whatever 8 bytes it chose when their frames carry the token
//! flag; it does not know the honest subscriber's token (it could guess it, as it can guess a
//! nonce, by the comparison libFuzzer learns).
//!
//! Crashes: any panic; answers to one datagram that are more frames or more bytes than it; a
//! subscriber entry for a source that never received a cookie; more entries of one host for
//! the topic than its cap; and, after the fuzzer's input,
//! an honest exchange of a few renewal periods that does not leave the import following the
//! real publisher session (or, if the fuzzer guessed a nonce, refused) with data delivered.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llbus_net::{
    parse_datagram, Allowlist, BatchEncoder, Control, CookieJar, ExportedTopic, Flags, Header,
    ImportState, Kind, LatePolicy, PublisherSession, RateLimit, RateLimiter, Replies,
    SubscriberSession, SubscriberTable, DEFAULT_MAX_DATAGRAM, DEFAULT_SUBSCRIBER_TIMEOUT,
};

const TOPIC: u64 = 0x7070;
const FP: u64 = 0xf0f0;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def0;
const SUB_SESSION: u64 = 0x0fed_cba9_8765_4321;
const MS: u64 = 1_000_000;
/// Subscriber slots of the topic per host.
const HOST_CAP: usize = 2;

fn sources() -> [SocketAddr; 4] {
    [
        SocketAddr::from(([127, 0, 0, 1], 7001)), // the honest subscriber
        SocketAddr::from(([127, 0, 0, 1], 7000)), // the honest publisher
        SocketAddr::from(([127, 0, 0, 9], 9)),
        SocketAddr::from(([10, 0, 0, 1], 1)),
    ]
}

struct World {
    publisher: PublisherSession,
    subscriber: SubscriberSession,
    replies: Replies,
    seq: u64,
    delivered: u64,
}

impl World {
    fn new() -> World {
        World {
            publisher: PublisherSession::new(
                PUB_SESSION,
                CookieJar::new([5; 32], Duration::from_secs(30)),
                RateLimiter::new(RateLimit { per_second: 20, burst: 40 }, 16),
                Allowlist::any(),
                vec![ExportedTopic {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    allow: None,
                }],
                SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 8)
                    .with_topic_cap(4)
                    .with_host_cap(HOST_CAP),
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
            replies: Replies::with_capacity(DEFAULT_MAX_DATAGRAM / 48 + 1),
            seq: 0,
            delivered: 0,
        }
    }

    /// Control to the publisher from `src`; its answers to the honest subscriber if that is
    /// where they go. Returns the answers' count and encoded bytes.
    fn to_publisher(&mut self, c: &Control, src: SocketAddr, now: u64) {
        self.replies.clear(src);
        let seq = self.seq;
        let _ = self
            .publisher
            .on_control(c, src, now, |_| seq, &mut self.replies);
        let answers = self.replies.frames().to_vec();
        if src == sources()[0] {
            for a in answers {
                self.to_subscriber(&a, now);
            }
        }
    }

    fn to_subscriber(&mut self, c: &Control, now: u64) {
        let mut r = Replies::with_capacity(4);
        r.clear(sources()[1]);
        let _ = self.subscriber.on_control(c, None, now, &mut r);
        for a in r.frames().to_vec() {
            self.to_publisher(&a, sources()[0], now);
        }
    }

    /// One millisecond of the honest loop: renewals due, and one message if subscribed.
    fn honest(&mut self, now: u64) {
        if let Some(request) = self.subscriber.poll(now) {
            self.to_publisher(&request, sources()[0], now);
        }
        if self
            .publisher
            .subscribers()
            .subscribers(TOPIC)
            .any(|a| a == sources()[0])
        {
            self.seq += 1;
            let h = Header {
                kind: Kind::Data,
                flags: Flags::NONE,
                payload_len: 0,
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB_SESSION,
                seq: self.seq,
                timestamp_ns: 0,
            };
            let token = self.publisher.token(sources()[0], TOPIC, SUB_SESSION);
            if let Ok(v) = self.subscriber.on_data(&h, Some(token), now) {
                if v.is_deliver() {
                    self.delivered += 1;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut now = 0u64;
    let mut rest = data;
    let mut cookies_sent_to = [false; 4];
    cookies_sent_to[0] = true; // the honest subscriber receives its own challenges
    while let [ms, src, lo, hi, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        now += u64::from(*ms) * MS;
        w.honest(now);
        let src_index = usize::from(*src) % 4;
        let from = sources()[src_index];
        let Ok(frames) = parse_datagram(bytes, DEFAULT_MAX_DATAGRAM) else {
            continue;
        };
        let count = frames.len();
        let token = frames.token();
        w.replies.clear(from);
        for frame in frames {
            if frame.header.kind == Kind::Data {
                if from == sources()[1] {
                    if let Ok(v) = w.subscriber.on_data(&frame.header, token, now) {
                        let _ = v;
                    }
                }
                continue;
            }
            let Ok(c) = Control::from_frame(&frame) else {
                continue;
            };
            match c {
                Control::Subscribe { .. } | Control::Unsubscribe { .. } => {
                    let seq = w.seq;
                    let _ = w
                        .publisher
                        .on_control(&c, from, now, |_| seq, &mut w.replies);
                }
                _ if from == sources()[1] => {
                    let _ = w.subscriber.on_control(&c, token, now, &mut w.replies);
                }
                _ => {}
            }
        }
        // No amplification: at most one answer per frame, and no more bytes.
        let answers = w.replies.frames().to_vec();
        assert!(answers.len() <= count, "{} answers to {count} frames", answers.len());
        let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        for a in &answers {
            assert!(enc.push_control(a).is_ok(), "answers do not fit one datagram");
        }
        assert!(enc.len() <= bytes.len(), "{} bytes of answers to {}", enc.len(), bytes.len());
        for a in &answers {
            if let Control::CookieChallenge { .. } | Control::SubscribeAck { .. } = a {
                cookies_sent_to[src_index] = true;
            }
        }
        // Answers addressed to the honest subscriber reach it (a forged source: it must cope).
        if from == sources()[0] {
            for a in answers {
                w.to_subscriber(&a, now);
            }
        }
        // No host holds more of the topic than its cap.
        for host in [[127, 0, 0, 1], [127, 0, 0, 9], [10, 0, 0, 1]] {
            let held = w
                .publisher
                .subscribers()
                .iter()
                .filter(|s| s.addr.ip() == std::net::IpAddr::from(host))
                .count();
            assert!(held <= HOST_CAP, "{host:?} holds {held} slots");
        }
        // Nobody is subscribed who never received a cookie.
        for s in w.publisher.subscribers().iter() {
            let i = sources().iter().position(|&a| a == s.addr);
            assert!(
                i.is_some_and(|i| cookies_sent_to[i]),
                "{} subscribed without a cookie",
                s.addr
            );
        }
    }
    // The honest exchange, for a few renewal periods, must recover whatever the fuzzer did.
    let before = w.delivered;
    for _ in 0..2500 {
        now += MS;
        w.honest(now);
    }
    if w.subscriber.counts().refused > 0 {
        // The fuzzer guessed a nonce (libFuzzer learns compared constants, as an on-path
        // attacker would see them) and sent a transient refusal: the import backs off.
        return;
    }
    match w.subscriber.state() {
        ImportState::Refused(_) => {} // the same, with a final refusal
        state => {
            assert!(
                matches!(state, ImportState::Established { session: PUB_SESSION, .. }),
                "the import follows {state:?}"
            );
            assert!(w.delivered > before + 500, "the honest stream stalled");
        }
    }
});
