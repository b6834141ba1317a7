//! A simulated network for reliable topics: one publisher machine with a reliable export and
//! one subscriber machine with a reliable import, joined by a link that drops, duplicates and
//! reorders datagrams (everything, handshake included, goes over it as encoded bytes), and an
//! off-path adversary that injects forged NAKs (under the subscriber's address and others) and
//! forged `Unavailable` answers. It cannot read the traffic, so it guesses cookies and nonces.
//!
//! What must hold: every message is delivered exactly once, in order, with its payload intact,
//! nothing is reported unrecovered while history covers the loss; a forged NAK never gets a
//! byte back; when history cannot cover an outage, the lost range is reported unrecovered and
//! delivery goes on in order.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use super::publisher::{ExportedTopic, PublisherSession};
use super::reassembly::{Reassembled, Reassembler, ReassemblyConfig};
use super::reliable::{
    Delivery, HostBudgets, ReliableConfig, ReliableExport, ReliableReceiver, Retransmit,
};
use super::subscriber::{SubscriberEvent, SubscriberSession};
use super::Replies;
use crate::{
    encode_payload, parse_datagram, split_fragments, Allowlist, BatchEncoder, Control, Cookie,
    CookieJar, DataMeta, Kind, LatePolicy, Nak, RateLimit, RateLimiter, SeqTracker,
    SubscriberTable, Unavailable, DEFAULT_MAX_DATAGRAM, DEFAULT_MAX_MESSAGE,
    DEFAULT_SUBSCRIBER_TIMEOUT,
};

const TOPIC: u64 = 0x7171;
const FP: u64 = 0xf1f1;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def1;
const SUB_SESSION: u64 = 0x0fed_cba9_8765_4322;
const MS: u64 = 1_000_000;
const MAX: usize = DEFAULT_MAX_DATAGRAM;

fn pub_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7100))
}

fn sub_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7101))
}

/// xorshift64*: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `permille / 1000`.
    fn chance(&mut self, permille: u64) -> bool {
        self.next() % 1000 < permille
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Loss, duplication (both in permille) and the largest delay (ms, so reordering).
#[derive(Clone, Copy, Debug)]
struct Faults {
    loss: u64,
    dup: u64,
    max_delay: u64,
}

struct InFlight {
    due: u64,
    src: SocketAddr,
    to_publisher: bool,
    bytes: Vec<u8>,
}

/// The header fields of the publisher's data frame (or fragment) `seq`.
fn meta(seq: u64) -> DataMeta {
    DataMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session: PUB_SESSION,
        seq,
        timestamp_ns: 0,
    }
}

/// The payload of message `seq`: its number, then a pattern derived from it.
fn payload(seq: u64) -> (u64, [u8; 24]) {
    (seq, [(seq % 251) as u8; 24])
}

/// The body of large message `n`: `len` bytes derived from `n` (xorshift), so a misplaced or
/// stale piece shows.
fn body(n: u64, len: usize) -> Vec<u8> {
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Decodes and checks a large message; returns its number.
fn check_large(bytes: &[u8], size: usize) -> u64 {
    let (n, b): (u64, Vec<u8>) = match crate::decode_payload(bytes) {
        Ok(v) => v,
        Err(e) => panic!("large message corrupt: {e}"),
    };
    assert!(b == body(n, size), "large message {n} corrupt");
    n
}

#[derive(Default)]
struct Sink {
    got: Vec<u64>,
    lost: Vec<(u64, u64)>,
    /// Large messages: their size, the reassembler, and the message numbers delivered.
    size: usize,
    reassembly: Option<Reassembler>,
    messages: Vec<u64>,
}

impl Delivery for Sink {
    fn deliver(&mut self, seq: u64, kind: Kind, bytes: &[u8]) {
        if kind == Kind::Fragment {
            let Some(r) = self.reassembly.as_mut() else {
                panic!("fragment {seq} with no reassembler");
            };
            match r.on_fragment(PUB_SESSION, seq, bytes, 0) {
                Ok(Reassembled::Complete(m)) => self.messages.push(check_large(m, self.size)),
                Ok(Reassembled::Pending) => {}
                Err(e) => panic!("fragment {seq} refused: {e}"),
            }
            self.got.push(seq);
            return;
        }
        let value: (u64, [u8; 24]) = match crate::decode_payload(bytes) {
            Ok(v) => v,
            Err(e) => panic!("message {seq} corrupt: {e}"),
        };
        assert_eq!(value, payload(seq), "message {seq} corrupt");
        self.got.push(seq);
    }
    fn unrecovered(&mut self, first: u64, last: u64) {
        if let Some(r) = self.reassembly.as_mut() {
            r.abandon();
        }
        self.lost.push((first, last));
    }
}

/// One forged datagram.
#[derive(Clone, Debug)]
enum Forged {
    /// A NAK to the publisher from `src` (the subscriber's address or another), with a guessed
    /// cookie, under the real subscriber session or a guessed one.
    Nak {
        src: SocketAddr,
        cookie: [u8; 16],
        real_session: bool,
        first: u64,
        len: u64,
    },
    /// An `Unavailable` to the subscriber from the publisher's address, under the real
    /// publisher session (the worst case) with a guessed nonce.
    Unavailable { nonce: u64, first: u64, len: u64 },
}

fn forged() -> impl Strategy<Value = Forged> {
    let src = prop_oneof![
        Just(sub_addr()),
        any::<(u8, u16)>().prop_map(|(h, p)| SocketAddr::from(([127, 0, 0, h], p.max(1))))
    ];
    prop_oneof![
        (
            src,
            any::<[u8; 16]>(),
            any::<bool>(),
            1u64..5000,
            1u64..5000
        )
            .prop_map(|(src, cookie, real_session, first, len)| Forged::Nak {
                src,
                cookie,
                real_session,
                first,
                len
            }),
        (any::<u64>(), 1u64..5000, 1u64..5000)
            .prop_map(|(nonce, first, len)| Forged::Unavailable { nonce, first, len }),
    ]
}

struct World {
    rng: Rng,
    faults: Faults,
    /// From `outage.0` to `outage.1` ms the link drops everything.
    outage: (u64, u64),
    flight: Vec<InFlight>,
    publisher: PublisherSession,
    export: ReliableExport,
    retransmit: Retransmit,
    subscriber: SubscriberSession,
    receiver: ReliableReceiver,
    sink: Sink,
    /// Sequence numbers sent (frames: a large message takes one per fragment).
    published: u64,
    /// Large messages: each one's number and first sequence number, and the encoding buffer.
    large: Vec<(u64, u64)>,
    scratch: Vec<u8>,
    /// The last sequence number sent before the subscriber was first acknowledged.
    joined_after: Option<u64>,
    nonces: u64,
    /// Bytes the publisher sent in answer to forged datagrams.
    answered_forgeries: usize,
}

impl World {
    fn new(seed: u64, faults: Faults, config: ReliableConfig) -> Self {
        World {
            rng: Rng(seed | 1),
            faults,
            outage: (0, 0),
            flight: Vec::new(),
            publisher: PublisherSession::new(
                PUB_SESSION,
                CookieJar::new([7; 32], Duration::from_secs(30)),
                RateLimiter::new(
                    RateLimit {
                        per_second: 50,
                        burst: 50,
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
                [6; 32],
            )
            .with_budgets(HostBudgets::new(64, config.retransmit_rate)),
            export: ReliableExport::new(TOPIC, FP, PUB_SESSION, 8, &config),
            retransmit: Retransmit::with_capacity(config.retransmit_per_nak),
            subscriber: SubscriberSession::new(
                TOPIC,
                FP,
                SUB_SESSION,
                [8; 32],
                Duration::from_millis(200),
                LatePolicy::Deliver,
            )
            // This world tests recovery under faults; tokens are `sim`'s business.
            .without_token(),
            receiver: ReliableReceiver::new(&config),
            sink: Sink::default(),
            published: 0,
            large: Vec::new(),
            scratch: Vec::new(),
            joined_after: None,
            nonces: 0,
            answered_forgeries: 0,
        }
    }

    fn send(&mut self, now_ms: u64, src: SocketAddr, to_publisher: bool, bytes: Vec<u8>) {
        if (self.outage.0..self.outage.1).contains(&now_ms) || self.rng.chance(self.faults.loss) {
            return;
        }
        let copies = if self.rng.chance(self.faults.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let due = now_ms + self.rng.below(self.faults.max_delay + 1);
            self.flight.push(InFlight {
                due,
                src,
                to_publisher,
                bytes: bytes.clone(),
            });
        }
    }

    /// The publisher handles one datagram from `src`; what it sends back goes over the link.
    /// Returns the bytes it sent back.
    fn at_publisher(&mut self, bytes: &[u8], src: SocketAddr, now_ms: u64) -> usize {
        let now = now_ms * MS;
        let Ok(frames) = parse_datagram(bytes, MAX) else {
            return 0;
        };
        let mut out: Vec<Vec<u8>> = Vec::new();
        for frame in frames {
            match frame.header.kind {
                Kind::Nak => {
                    let Ok(nak) = Nak::from_frame(&frame) else {
                        continue;
                    };
                    if self.publisher.admit_nak(&nak, src, now).is_err() {
                        continue;
                    }
                    self.export.on_nak(
                        &nak,
                        src,
                        now,
                        self.publisher.budgets_mut(),
                        &mut self.retransmit,
                    );
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf);
                    if let Some(u) = self.retransmit.unavailable() {
                        enc.push_unavailable(u).unwrap();
                    }
                    let mut datagrams = Vec::new();
                    for &seq in self.retransmit.seqs() {
                        let f = self.export.frame(seq).unwrap();
                        if enc.len() + f.len() > MAX {
                            datagrams.push(enc.as_bytes().to_vec());
                            enc.clear();
                        }
                        datagrams.push(f.to_vec()); // one frame per datagram, as sent first
                    }
                    if !enc.is_empty() {
                        datagrams.push(enc.as_bytes().to_vec());
                    }
                    out.extend(datagrams);
                }
                _ => {
                    let Ok(control) = Control::from_frame(&frame) else {
                        continue;
                    };
                    let mut replies = Replies::with_capacity(4);
                    replies.clear(src);
                    let newest = self.export.history().newest();
                    let _ = self
                        .publisher
                        .on_control(&control, src, now, |_| newest, &mut replies);
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf);
                    for r in replies.frames() {
                        enc.push_control(r).unwrap();
                    }
                    if !enc.is_empty() {
                        out.push(enc.as_bytes().to_vec());
                    }
                }
            }
        }
        let total = out.iter().map(Vec::len).sum();
        for d in out {
            if src == sub_addr() {
                self.send(now_ms, pub_addr(), false, d);
            }
        }
        total
    }

    /// The subscriber handles one datagram from the publisher's address.
    fn at_subscriber(&mut self, bytes: &[u8], now_ms: u64) {
        let now = now_ms * MS;
        let Ok(frames) = parse_datagram(bytes, MAX) else {
            return;
        };
        for frame in frames {
            let h = frame.header;
            match h.kind {
                Kind::Data | Kind::Fragment => {
                    if self
                        .subscriber
                        .follows_reliable(h.fingerprint, h.session, None, now)
                        == Ok(true)
                    {
                        self.receiver
                            .on_data(h.seq, h.kind, frame.payload, now, &mut self.sink);
                    }
                }
                Kind::Unavailable => {
                    let Ok(u) = Unavailable::from_frame(&frame) else {
                        continue;
                    };
                    if self
                        .subscriber
                        .follows_reliable(h.fingerprint, h.session, None, now)
                        == Ok(true)
                    {
                        let _ = self.receiver.on_unavailable(&u, now, &mut self.sink);
                    }
                }
                _ => {
                    let Ok(control) = Control::from_frame(&frame) else {
                        continue;
                    };
                    let mut replies = Replies::with_capacity(4);
                    replies.clear(pub_addr());
                    let event = self
                        .subscriber
                        .on_control(&control, None, now, &mut replies);
                    match (control, event) {
                        (
                            Control::SubscribeAck { last_seq, .. },
                            Ok(SubscriberEvent::Established { .. }),
                        ) => {
                            self.receiver.reset();
                            self.receiver.start(last_seq);
                            self.joined_after.get_or_insert(last_seq);
                        }
                        (
                            Control::Heartbeat {
                                session, last_seq, ..
                            },
                            Ok(_),
                        ) if self.subscriber.follows_reliable(FP, session, None, now)
                            == Ok(true) =>
                        {
                            self.receiver.on_heartbeat(last_seq, now);
                        }
                        _ => {}
                    }
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf);
                    for r in replies.frames() {
                        enc.push_control(r).unwrap();
                    }
                    if !enc.is_empty() {
                        let d = enc.as_bytes().to_vec();
                        self.send(now_ms, sub_addr(), true, d);
                    }
                }
            }
        }
    }

    /// One millisecond: deliveries due, timers, one message if `publish`, a heartbeat every
    /// 5 ms, then the adversary's datagrams.
    fn step(&mut self, now_ms: u64, publish: bool, forged: &[Forged]) {
        let now = now_ms * MS;
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.flight.len() {
            if self.flight[i].due <= now_ms {
                due.push(self.flight.remove(i));
            } else {
                i += 1;
            }
        }
        for d in due {
            if d.to_publisher {
                self.at_publisher(&d.bytes, d.src, now_ms);
            } else {
                self.at_subscriber(&d.bytes, now_ms);
            }
        }
        if let Some(request) = self.subscriber.poll(now) {
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_control(&request).unwrap();
            let d = enc.as_bytes().to_vec();
            self.send(now_ms, sub_addr(), true, d);
        }
        let mut naks = Vec::new();
        let nonces = &mut self.nonces;
        self.receiver.poll(
            now,
            &mut self.sink,
            || {
                *nonces += 1;
                *nonces
            },
            |first, last, nonce| naks.push((first, last, nonce)),
        );
        if let (false, Some(cookie)) = (naks.is_empty(), self.subscriber.cookie()) {
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            for (first, last, nonce) in naks {
                enc.push_nak(&Nak {
                    topic_id: TOPIC,
                    fingerprint: FP,
                    session: SUB_SESSION,
                    cookie,
                    nonce,
                    first,
                    last,
                })
                .unwrap();
            }
            let d = enc.as_bytes().to_vec();
            self.send(now_ms, sub_addr(), true, d);
        }
        let subscribed = self
            .publisher
            .subscribers()
            .subscribers(TOPIC)
            .any(|a| a == sub_addr());
        if publish && subscribed && self.sink.size > 0 {
            self.publish_large(now_ms);
        } else if publish && subscribed {
            self.published += 1;
            let seq = self.published;
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_data(meta(seq), &payload(seq)).unwrap();
            let d = enc.as_bytes().to_vec();
            assert!(self.export.record(seq, &d));
            self.send(now_ms, pub_addr(), false, d);
        }
        if now_ms % 5 == 0 && subscribed {
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_control(&Control::Heartbeat {
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB_SESSION,
                last_seq: self.published,
                timestamp_ns: 0,
            })
            .unwrap();
            let d = enc.as_bytes().to_vec();
            self.send(now_ms, pub_addr(), false, d);
        }
        for f in forged {
            match *f {
                Forged::Nak {
                    src,
                    cookie,
                    real_session,
                    first,
                    len,
                } => {
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf);
                    enc.push_nak(&Nak {
                        topic_id: TOPIC,
                        fingerprint: FP,
                        session: if real_session { SUB_SESSION } else { 99 },
                        cookie: Cookie(cookie),
                        nonce: 1,
                        first,
                        last: first + len,
                    })
                    .unwrap();
                    let d = enc.as_bytes().to_vec();
                    self.answered_forgeries += self.at_publisher(&d, src, now_ms);
                }
                Forged::Unavailable { nonce, first, len } => {
                    let mut buf = vec![0u8; MAX];
                    let mut enc = BatchEncoder::new(&mut buf);
                    enc.push_unavailable(&Unavailable {
                        topic_id: TOPIC,
                        fingerprint: FP,
                        session: PUB_SESSION,
                        nonce: nonce.wrapping_add(1 << 40), // never one of the few real ones
                        first,
                        last: first + len,
                    })
                    .unwrap();
                    let d = enc.as_bytes().to_vec();
                    self.at_subscriber(&d, now_ms);
                }
            }
        }
    }

    /// Large messages of `size` bytes instead of the small ones, reassembled at the sink.
    fn with_large(mut self, size: usize) -> Self {
        self.sink.size = size;
        self.sink.reassembly = Some(Reassembler::new(&ReassemblyConfig::default()));
        self
    }

    /// Publishes the next large message: its fragments, each a datagram of its own with a
    /// sequence number of its own, kept in history.
    fn publish_large(&mut self, now_ms: u64) {
        let n = self.large.len() as u64 + 1;
        let value = (n, body(n, self.sink.size));
        let payload = encode_payload(TOPIC, &value, &mut self.scratch, DEFAULT_MAX_MESSAGE)
            .unwrap()
            .to_vec();
        self.large.push((n, self.published + 1));
        for (fragment, piece) in split_fragments(&payload, MAX).unwrap() {
            self.published += 1;
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_fragment(meta(self.published), &fragment, piece)
                .unwrap();
            let d = enc.as_bytes().to_vec();
            assert!(self.export.record(self.published, &d));
            self.send(now_ms, pub_addr(), false, d);
        }
    }

    /// The large messages the subscriber should see: those sent after its first
    /// acknowledgement.
    fn expected_large(&self) -> Vec<u64> {
        let joined = self.joined_after.unwrap_or(0);
        self.large
            .iter()
            .filter(|&&(_, first)| first > joined)
            .map(|&(n, _)| n)
            .collect()
    }

    /// Runs until `count` messages are published and `tail_ms` after.
    fn run(&mut self, count: u64, tail_ms: u64, forged: Vec<(u64, Forged)>) {
        self.run_until(|w| w.published >= count, tail_ms, forged);
    }

    /// Runs until `count` large messages are published and `tail_ms` after.
    fn run_large(&mut self, count: u64, tail_ms: u64) {
        self.run_until(|w| w.large.len() as u64 >= count, tail_ms, Vec::new());
    }

    fn run_until(
        &mut self,
        done: impl Fn(&World) -> bool,
        tail_ms: u64,
        mut forged: Vec<(u64, Forged)>,
    ) {
        forged.sort_by_key(|(t, _)| *t);
        let mut next = 0;
        let mut done_at = None;
        for ms in 0..60_000u64 {
            let mut now_forged = Vec::new();
            while next < forged.len() && forged[next].0 <= ms {
                now_forged.push(forged[next].1.clone());
                next += 1;
            }
            let publish = !done(self);
            self.step(ms, publish, &now_forged);
            if done(self) {
                let end = *done_at.get_or_insert(ms + tail_ms);
                if ms >= end {
                    return;
                }
            }
        }
        panic!("published only {} sequence numbers", self.published);
    }

    /// The messages the subscriber should see: from its first acknowledgement on.
    fn expected(&self) -> Vec<u64> {
        (self.joined_after.unwrap_or(0) + 1..=self.published).collect()
    }
}

fn faults() -> impl Strategy<Value = Faults> {
    (
        prop_oneof![Just(10u64), Just(50), Just(200)],
        0u64..100,
        0u64..20,
    )
        .prop_map(|(loss, dup, max_delay)| Faults {
            loss,
            dup,
            max_delay,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// At 1%, 5% and 20% loss with duplication and reordering, and forged NAKs and
    /// `Unavailable`s injected: every message delivered once, in order, intact; nothing
    /// unrecovered; no forged datagram answered with a single byte.
    #[test]
    fn reliable_delivers_everything_in_order_under_faults_and_forgeries(
        seed in any::<u64>(),
        faults in faults(),
        attacks in proptest::collection::vec((0u64..3000, forged()), 0..100),
    ) {
        let mut world = World::new(seed, faults, ReliableConfig::default());
        world.run(2000, 1500, attacks);
        // The handshake completes early (at 20% loss it can take a few retries of its four
        // datagrams): within the first tenth of the stream.
        prop_assert!(world.expected().len() > 1800, "joined after {:?}", world.joined_after);
        prop_assert_eq!(&world.sink.lost, &Vec::<(u64, u64)>::new());
        prop_assert_eq!(&world.sink.got, &world.expected());
        prop_assert_eq!(world.answered_forgeries, 0);
        prop_assert_eq!(world.receiver.counts().unrecovered, 0);
        if faults.loss >= 50 {
            prop_assert!(world.export.counts().retransmitted > 0);
            prop_assert!(world.receiver.counts().naks_sent > 0);
        }
    }
}

/// An outage longer than history covers: the range that left history is reported unrecovered
/// (by the publisher's `Unavailable` or the deadline), each message is delivered or reported
/// exactly once, in order, and delivery goes on after it.
#[test]
fn an_outage_beyond_history_is_reported_and_the_stream_goes_on() {
    let config = ReliableConfig {
        history: 32,
        ..ReliableConfig::default()
    };
    let faults = Faults {
        loss: 20,
        dup: 20,
        max_delay: 3,
    };
    let mut world = World::new(42, faults, config);
    world.outage = (1000, 1300);
    world.run(3000, 1500, Vec::new());
    let expected = world.expected();
    assert!(!world.sink.lost.is_empty());
    assert!(
        world.export.counts().unavailable > 0,
        "{:?}",
        world.export.counts()
    );
    // Delivered and unrecovered together are every number exactly once, in order.
    let mut accounted: Vec<u64> = world.sink.got.clone();
    for &(first, last) in &world.sink.lost {
        accounted.extend(first..=last);
    }
    accounted.sort_unstable();
    assert_eq!(accounted, expected);
    assert!(world.sink.got.windows(2).all(|w| w[0] < w[1]));
    // The stream went on: the last message arrived.
    assert_eq!(world.sink.got.last(), expected.last());
    let lost: u64 = world.sink.lost.iter().map(|(a, b)| b - a + 1).sum();
    assert_eq!(lost, world.receiver.counts().unrecovered);
    // Roughly the outage (300 messages) less what history still held.
    assert!((200..=300).contains(&lost), "lost {lost}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Large messages (5000 bytes: four fragments each) on a reliable topic at 1%, 5% and 20%
    /// loss with duplication and reordering: every message from the subscriber's join on is
    /// delivered once, in order and intact; no fragment is unrecovered and no message is
    /// incomplete; the lost fragments were retransmitted (each alone: history holds frames).
    #[test]
    fn reliable_large_messages_arrive_whole_in_order_under_faults(
        seed in any::<u64>(),
        faults in faults(),
    ) {
        let mut world = World::new(seed, faults, ReliableConfig::default()).with_large(5000);
        world.run_large(400, 1500);
        let expected = world.expected_large();
        prop_assert!(expected.len() >= 200, "joined after {:?}", world.joined_after);
        prop_assert_eq!(&world.sink.lost, &Vec::<(u64, u64)>::new());
        prop_assert_eq!(&world.sink.messages, &expected);
        let r = world.sink.reassembly.as_ref().map(|r| *r.counts()).unwrap_or_default();
        prop_assert_eq!(r.incomplete, 0);
        prop_assert_eq!(r.bad, 0);
        if faults.loss >= 50 {
            prop_assert!(world.export.counts().retransmitted > 0);
        }
    }
}

/// Best-effort large and small messages through a link that loses, duplicates and reorders:
/// the sequence tracker counts exactly the frames that never arrived (`lost`), every message
/// whose frames all arrived is delivered once and intact, and every fragmented message that lost
/// some but not all of its fragments is counted once as incomplete and never delivered.
#[test]
fn best_effort_large_messages_count_exactly_what_they_lost() {
    for (seed, loss) in [(1u64, 10u64), (2, 50), (3, 200)] {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        // Messages 1..=N: every third empty, the others 1000..9000 bytes (a data frame up to
        // about 1400, fragments above).
        const N: u64 = 600;
        let mut datagrams: Vec<(u64, Vec<u8>)> = Vec::new(); // (message, datagram)
        let mut frames_of: Vec<Vec<u64>> = vec![Vec::new(); N as usize + 1];
        let mut seq = 0u64;
        let mut scratch = Vec::new();
        for n in 1..=N {
            let size = if n % 3 == 0 {
                0
            } else {
                1000 + rng.below(8000) as usize
            };
            let value = (n, body(n, size));
            let mut buf = vec![0u8; MAX];
            let mut enc = BatchEncoder::new(&mut buf);
            seq += 1;
            if enc.push_data(meta(seq), &value).is_ok() {
                frames_of[n as usize].push(seq);
                datagrams.push((n, enc.as_bytes().to_vec()));
                continue;
            }
            seq -= 1;
            let payload = encode_payload(TOPIC, &value, &mut scratch, DEFAULT_MAX_MESSAGE).unwrap();
            for (fragment, piece) in split_fragments(payload, MAX).unwrap() {
                seq += 1;
                enc.clear();
                enc.push_fragment(meta(seq), &fragment, piece).unwrap();
                frames_of[n as usize].push(seq);
                datagrams.push((n, enc.as_bytes().to_vec()));
            }
        }
        // The link: loss, 3% duplication, delays of up to 8 datagrams (reordering).
        let mut arrivals: Vec<(u64, usize)> = Vec::new(); // (due ms, index)
        for i in 0..datagrams.len() {
            if rng.chance(loss) {
                continue;
            }
            let copies = if rng.chance(30) { 2 } else { 1 };
            for _ in 0..copies {
                arrivals.push((i as u64 + rng.below(9), i));
            }
        }
        arrivals.sort_by_key(|&(due, i)| (due, i));
        let mut tracker = SeqTracker::new(LatePolicy::Deliver);
        tracker.observe_last_seq(PUB_SESSION, 0);
        let mut reassembly = Reassembler::new(&ReassemblyConfig {
            in_flight: 64,
            timeout: Duration::from_millis(50),
            ..ReassemblyConfig::default()
        });
        let mut delivered = Vec::new();
        let mut arrived = std::collections::BTreeSet::new();
        for &(due, i) in &arrivals {
            let now = due * MS;
            reassembly.poll(now);
            let frame = parse_datagram(&datagrams[i].1, MAX)
                .unwrap()
                .next()
                .unwrap();
            let h = frame.header;
            arrived.insert(h.seq);
            if !tracker.observe(h.session, h.seq).is_deliver() {
                continue;
            }
            if h.kind == Kind::Data {
                let (n, b): (u64, Vec<u8>) = crate::decode_payload(frame.payload).unwrap();
                assert!(b == body(n, b.len()), "message {n} corrupt");
                delivered.push(n);
            } else if let Ok(Reassembled::Complete(m)) =
                reassembly.on_fragment(h.session, h.seq, frame.payload, now)
            {
                delivered.push(check_large(m, m.len() - 16));
            }
        }
        tracker.observe_last_seq(PUB_SESSION, seq);
        reassembly.poll(u64::MAX / 2);
        let whole: Vec<u64> = (1..=N)
            .filter(|&n| frames_of[n as usize].iter().all(|s| arrived.contains(s)))
            .collect();
        let partial = (1..=N)
            .filter(|&n| {
                let f = &frames_of[n as usize];
                let got = f.iter().filter(|s| arrived.contains(s)).count();
                got > 0 && got < f.len()
            })
            .count() as u64;
        delivered.sort_unstable();
        assert_eq!(
            delivered, whole,
            "loss {loss}: delivered exactly the whole messages, once"
        );
        assert_eq!(
            tracker.counts().lost,
            seq - arrived.len() as u64,
            "loss {loss}: lost counts exactly the frames that never arrived"
        );
        let counts = reassembly.counts();
        assert_eq!(counts.incomplete, partial, "loss {loss}: {counts:?}");
        assert_eq!(counts.evicted, 0);
        assert!(
            partial > 0 && whole.len() < N as usize,
            "loss {loss}: the link lost nothing?"
        );
    }
}
