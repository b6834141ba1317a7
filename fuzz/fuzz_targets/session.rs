//! The endpoint under arbitrary input: a publisher `Endpoint` (one best-effort export) and a
//! subscriber `Endpoint` (one import of it), joined by an honest, lossless loop, while the
//! fuzzer's datagrams arrive at both from any of a few source addresses (the honest peers'
//! included: a forged source). The input is a sequence of chunks `[ms, src, len_lo, len_hi,
//! bytes..]`; each chunk's bytes are handed whole to both endpoints, as a socket would.
//!
//! The fuzzer does not know the honest subscriber's token or cookie (it could guess them, as
//! it can guess a nonce, by the comparisons libFuzzer learns). The export serves a shape and
//! the subscriber fetches it (`SchemaRequest`, `SchemaReply`) alongside its subscription.
//!
//! Crashes: any panic; answers to one datagram that are more than one datagram or more bytes
//! than it; a schema received that does not hash to its fingerprint; a subscriber entry for a source that never received a cookie; more entries of one
//! host for the topic than its cap; and, after the fuzzer's input, an honest exchange of a few
//! renewal periods that does not leave the import following the real publisher session (or,
//! if the fuzzer guessed a nonce, refused) with data delivered and the export's shape fetched.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llbus::schema::{Fields, Primitive, Shape};
use llbus_net::{
    parse_datagram, Allowlist, BridgeConfig, DropReason, EncodedShape, Endpoint, Event,
    ExportSpec, ImportSpec, ImportState, Kind, RateLimit, Sink, Wire, DEFAULT_MAX_DATAGRAM,
};

const TOPIC: u64 = 0x7070;
const PUB_SESSION: u64 = 0x1234_5678_9abc_def0;
const SUB_SESSION: u64 = 0x0fed_cba9_8765_4321;
const MS: u64 = 1_000_000;
/// Subscriber slots of the topic per host.
const HOST_CAP: usize = 2;

/// The export's shape; the export states its fingerprint.
fn shape() -> Shape {
    Shape::structure("Fuzz", Fields::named([("v", Shape::Primitive(Primitive::U64))]))
}

fn sources() -> [SocketAddr; 4] {
    [
        SocketAddr::from(([127, 0, 0, 1], 7001)), // the honest subscriber
        SocketAddr::from(([127, 0, 0, 1], 7000)), // the honest publisher
        SocketAddr::from(([127, 0, 0, 9], 9)),
        SocketAddr::from(([10, 0, 0, 1], 1)),
    ]
}

/// What an endpoint sent during one call: `(destination, datagram)`.
#[derive(Default)]
struct Sent(Vec<(SocketAddr, Vec<u8>)>);

impl Wire for Sent {
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        for &(addr, suffix) in dests {
            let mut d = bytes.to_vec();
            if suffixed {
                d.extend_from_slice(&suffix.to_le_bytes());
            }
            self.0.push((addr, d));
        }
        dests.len()
    }
}

/// Counts what the subscriber delivers.
#[derive(Default)]
struct Count(u64);

impl Sink for Count {
    fn deliver(&mut self, _import: usize, payload: &[u8]) -> Result<(), DropReason> {
        llbus_net::decode_payload::<u64>(payload).map_err(|_| DropReason::PayloadDecode)?;
        self.0 += 1;
        Ok(())
    }
}

struct World {
    publisher: Endpoint,
    subscriber: Endpoint,
    delivered: Count,
    /// Whether the import was refused (the fuzzer guessed a nonce).
    refused: bool,
    /// Which sources the publisher sent a cookie to (a challenge or an acknowledgement).
    cookies_sent_to: [bool; 4],
    /// Shapes the subscriber received (each checked against its fingerprint).
    shapes: Vec<Shape>,
    /// Whether a schema fetch failed since this was last cleared.
    fetch_failed: bool,
}

impl World {
    fn new() -> World {
        let config = BridgeConfig {
            allow: Allowlist::any(),
            rate_limit: RateLimit {
                per_second: 20,
                burst: 40,
            },
            rate_limit_sources: 16,
            subscriber_capacity: 8,
            subscribers_per_topic: 4,
            subscribers_per_host: HOST_CAP,
            cookie_window: Duration::from_secs(30),
            ..BridgeConfig::default()
        };
        let publisher = Endpoint::new(
            &config,
            DEFAULT_MAX_DATAGRAM,
            PUB_SESSION,
            [5; 32],
            vec![ExportSpec {
                topic: "fuzz".into(),
                topic_id: TOPIC,
                fingerprint: shape().fingerprint(),
                allow: None,
                reliable: false,
                late_join: 0,
                shape: EncodedShape::new(&shape()).ok(),
                group: None,
            }],
            Vec::new(),
        )
        .with_wall_clock(|| 0);
        let subscriber = Endpoint::new(
            &config,
            DEFAULT_MAX_DATAGRAM,
            SUB_SESSION,
            [6; 32],
            Vec::new(),
            vec![ImportSpec {
                topic: "fuzz".into(),
                topic_id: TOPIC,
                fingerprint: shape().fingerprint(),
                publisher: sources()[1],
                reliable: false,
            }],
        )
        .with_wall_clock(|| 0);
        let mut subscriber = subscriber;
        subscriber.request_schema(TOPIC, sources()[1]);
        World {
            publisher,
            subscriber,
            delivered: Count::default(),
            refused: false,
            cookies_sent_to: [false; 4],
            shapes: Vec::new(),
            fetch_failed: false,
        }
    }

    /// Notes the cookies in what the publisher sent.
    fn note_cookies(&mut self, sent: &Sent) {
        for (to, d) in &sent.0 {
            let Some(i) = sources().iter().position(|s| s == to) else {
                continue;
            };
            let Ok(frames) = parse_datagram(d, DEFAULT_MAX_DATAGRAM) else {
                continue;
            };
            for f in frames {
                if matches!(f.header.kind, Kind::CookieChallenge | Kind::SubscribeAck) {
                    self.cookies_sent_to[i] = true;
                }
            }
        }
    }

    fn subscriber_events(&mut self) {
        while let Some(e) = self.subscriber.poll_event() {
            match e {
                Event::Refused { .. } | Event::Retrying { .. } => self.refused = true,
                Event::SchemaReceived {
                    fingerprint, shape, ..
                } => {
                    assert_eq!(shape.fingerprint(), fingerprint, "an unchecked schema");
                    self.shapes.push(shape);
                }
                Event::SchemaFailed { .. } => self.fetch_failed = true,
                _ => {}
            }
        }
    }

    /// Carries what was sent between the honest peers until nothing more is.
    fn exchange(&mut self, mut from_publisher: Sent, mut from_subscriber: Sent, now: u64) {
        for _ in 0..16 {
            if from_publisher.0.is_empty() && from_subscriber.0.is_empty() {
                return;
            }
            self.note_cookies(&from_publisher);
            let mut next_sub = Sent::default();
            for (to, d) in std::mem::take(&mut from_publisher.0) {
                if to == sources()[0] {
                    self.subscriber
                        .handle(&d, sources()[1], now, &mut next_sub, &mut self.delivered);
                }
            }
            self.subscriber_events();
            let mut next_pub = Sent::default();
            for (to, d) in std::mem::take(&mut from_subscriber.0) {
                if to == sources()[1] {
                    self.publisher
                        .handle(&d, sources()[0], now, &mut next_pub, &mut Count::default());
                }
            }
            from_publisher = next_pub;
            from_subscriber = next_sub;
        }
    }

    /// One millisecond of the honest loop: both endpoints' timers, and one message.
    fn honest(&mut self, now: u64) {
        let mut from_sub = Sent::default();
        self.subscriber
            .on_timer(now, &mut from_sub, &mut self.delivered);
        self.subscriber_events();
        let mut from_pub = Sent::default();
        self.publisher
            .on_timer(now, &mut from_pub, &mut Count::default());
        if let Some(mut batch) = self.publisher.export(0, &mut from_pub) {
            batch.push(&now);
        }
        self.exchange(from_pub, from_sub, now);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut now = 0u64;
    let mut rest = data;
    while let [ms, src, lo, hi, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        now += u64::from(*ms) * MS;
        w.honest(now);
        let from = sources()[usize::from(*src) % 4];
        // At the publisher: its answers go to `from` alone, in one datagram no larger than
        // the request.
        let mut answers = Sent::default();
        w.publisher
            .handle(bytes, from, now, &mut answers, &mut Count::default());
        let to_from: Vec<usize> = answers.0.iter().map(|(_, d)| d.len()).collect();
        assert!(
            answers.0.iter().all(|(to, _)| *to == from),
            "answers to someone else"
        );
        assert!(to_from.len() <= 1, "{} datagrams answered one", to_from.len());
        assert!(
            to_from.iter().sum::<usize>() <= bytes.len(),
            "{to_from:?} bytes answered {}",
            bytes.len()
        );
        w.note_cookies(&answers);
        // At the subscriber: the same bound.
        let mut requests = Sent::default();
        w.subscriber
            .handle(bytes, from, now, &mut requests, &mut w.delivered);
        w.subscriber_events();
        let sent: usize = requests.0.iter().map(|(_, d)| d.len()).sum();
        assert!(requests.0.len() <= 1 && sent <= bytes.len(), "the subscriber amplified");
        // Answers addressed to the honest peers reach them (a forged source: they must cope).
        if from == sources()[0] {
            w.exchange(answers, Sent::default(), now);
        } else if from == sources()[1] {
            w.exchange(Sent::default(), requests, now);
        }
        // No host holds more of the topic than its cap.
        for host in [[127, 0, 0, 1], [127, 0, 0, 9], [10, 0, 0, 1]] {
            let held = w
                .publisher
                .publisher()
                .subscribers()
                .iter()
                .filter(|s| s.addr.ip() == std::net::IpAddr::from(host))
                .count();
            assert!(held <= HOST_CAP, "{host:?} holds {held} slots");
        }
        // Nobody is subscribed who never received a cookie.
        for s in w.publisher.publisher().subscribers().iter() {
            let i = sources().iter().position(|&a| a == s.addr);
            assert!(
                i.is_some_and(|i| w.cookies_sent_to[i]),
                "{} subscribed without a cookie",
                s.addr
            );
        }
    }
    // The honest exchange, for a few renewal periods, must recover whatever the fuzzer did
    // (the rate limit it may have drained refills, a fetch it may have failed is asked again).
    let before = w.delivered.0;
    w.shapes.clear();
    w.subscriber.request_schema(TOPIC, sources()[1]);
    for _ in 0..2500 {
        now += MS;
        if std::mem::take(&mut w.fetch_failed) {
            w.subscriber.request_schema(TOPIC, sources()[1]);
        }
        w.honest(now);
    }
    if w.refused {
        // The fuzzer guessed a nonce (libFuzzer learns compared constants, as an on-path
        // attacker would see them) and sent a refusal: the import backs off or stops.
        return;
    }
    let state = w.subscriber.import_state(0);
    assert!(
        matches!(state, Some(ImportState::Established { session: PUB_SESSION, .. })),
        "the import follows {state:?}"
    );
    assert!(w.delivered.0 > before + 500, "the honest stream stalled");
    assert!(w.shapes.contains(&shape()), "the honest fetch failed");
});
