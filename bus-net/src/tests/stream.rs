//! One publisher's stream to one subscriber on the [`World`]: host [`PUB`] exports topic
//! [`TOPIC`] (reliable), host [`SUB`] imports it (reliably or not), and an allowed host
//! [`ADV`] may subscribe too. Each step publishes one message while the subscriber is
//! subscribed; small messages carry their number and a pattern derived from it, large ones
//! their number and bytes drawn from a generator seeded with it, so a misplaced, stale or
//! corrupt piece shows.

use std::net::SocketAddr;
use std::time::Duration;

use super::world::{ip, Faults, World, MAX, MS};
use crate::{
    parse_datagram, BridgeConfig, Endpoint, Event, ExportSpec, ImportSpec, LatePolicy, RateLimit,
    ReliableConfig,
};

pub(crate) const TOPIC: u64 = 0x7171;
pub(crate) const FP: u64 = 0xf1f1;
pub(crate) const PUB_SESSION: u64 = 0x1234_5678_9abc_def1;
pub(crate) const SUB_SESSION: u64 = 0x0fed_cba9_8765_4322;

pub(crate) const PUB: usize = 0;
pub(crate) const SUB: usize = 1;
pub(crate) const ADV: usize = 2;

pub(crate) fn pub_addr() -> SocketAddr {
    ip(1, 7100)
}

pub(crate) fn sub_addr() -> SocketAddr {
    ip(1, 7101)
}

/// An allowed host: a subscriber of the same topic, so it knows the publisher's session, its
/// own cookie and its own token.
pub(crate) fn adversary_addr() -> SocketAddr {
    ip(2, 7200)
}

/// The payload of small message `n`: its number, then a pattern derived from it.
pub(crate) fn payload(n: u64) -> (u64, [u8; 24]) {
    (n, [(n % 251) as u8; 24])
}

/// The body of large message `n`: `len` bytes drawn from a generator seeded with `n`.
pub(crate) fn body(n: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(n);
    (0..len).map(|_| rng.u8(..)).collect()
}

/// Decodes and checks a large message; returns its number.
pub(crate) fn check_large(bytes: &[u8]) -> u64 {
    let (n, b): (u64, Vec<u8>) = match crate::decode_payload(bytes) {
        Ok(v) => v,
        Err(e) => panic!("large message corrupt: {e}"),
    };
    assert!(b == body(n, b.len()), "large message {n} corrupt");
    n
}

fn config(reliable: ReliableConfig) -> BridgeConfig {
    BridgeConfig {
        renew_every: Duration::from_millis(200),
        heartbeat_every: Duration::from_millis(5),
        rate_limit: RateLimit {
            per_second: 50,
            burst: 50,
        },
        subscriber_capacity: 64,
        subscribers_per_topic: 8,
        late: LatePolicy::Deliver,
        reliable,
        ..BridgeConfig::default()
    }
}

/// The stream and what it published.
pub(crate) struct Stream {
    pub(crate) w: World,
    /// Messages published.
    pub(crate) published: u64,
    /// Large messages: their size (0: small ones), and each one's number and first sequence
    /// number.
    pub(crate) size: usize,
    pub(crate) large: Vec<(u64, u64)>,
}

impl Stream {
    /// A stream over a link with `faults` (drawn from `seed`); the import is reliable.
    pub(crate) fn new(seed: u64, faults: Faults, reliable: ReliableConfig) -> Self {
        Self::build(seed, faults, reliable, true)
    }

    /// A stream whose subscriber imports reliably or not (the export is reliable either way).
    pub(crate) fn build(
        seed: u64,
        faults: Faults,
        reliable: ReliableConfig,
        reliable_import: bool,
    ) -> Self {
        let config = config(reliable);
        let mut seeds = fastrand::Rng::with_seed(seed);
        let mut key = || {
            let mut k = [0u8; 32];
            k.iter_mut().for_each(|b| *b = seeds.u8(..));
            k
        };
        let publisher = Endpoint::new(
            &config,
            MAX,
            PUB_SESSION,
            key(),
            vec![ExportSpec {
                topic: "sim".into(),
                topic_id: TOPIC,
                fingerprint: FP,
                allow: None,
                reliable: true,
                late_join: 0,
                shape: None,
                group: None,
            }],
            Vec::new(),
        )
        .with_wall_clock(|| 0);
        let subscriber = Endpoint::new(
            &config,
            MAX,
            SUB_SESSION,
            key(),
            Vec::new(),
            vec![ImportSpec {
                topic: "sim".into(),
                topic_id: TOPIC,
                fingerprint: FP,
                publisher: pub_addr(),
                reliable: reliable_import,
            }],
        )
        .with_wall_clock(|| 0);
        let mut w = World::new(seed);
        // What is sent in one step arrives in the next at the earliest.
        w.faults = Faults {
            min_delay: 1,
            ..faults
        };
        w.add(pub_addr(), publisher);
        w.add(sub_addr(), subscriber);
        Stream {
            w,
            published: 0,
            size: 0,
            large: Vec::new(),
        }
    }

    /// Adds an allowed host that subscribes to the topic like any subscriber; what arrives
    /// there is captured (so its token can be read).
    pub(crate) fn with_adversary(mut self) -> Self {
        let adversary = Endpoint::new(
            &config(ReliableConfig::default()),
            MAX,
            0xbad,
            [9; 32],
            Vec::new(),
            vec![ImportSpec {
                topic: "sim".into(),
                topic_id: TOPIC,
                fingerprint: FP,
                publisher: pub_addr(),
                reliable: false,
            }],
        );
        self.w.add(adversary_addr(), adversary);
        self.w.capture = Some(adversary_addr());
        self
    }

    /// Large messages of `size` bytes instead of the small ones.
    pub(crate) fn with_large(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// The adversary's subscription token, from the last datagram it got that carried one.
    pub(crate) fn adversary_token(&self) -> Option<u64> {
        self.w.captured.iter().rev().find_map(|(_, d)| {
            parse_datagram(d, MAX)
                .ok()
                .and_then(|frames| frames.token())
        })
    }

    pub(crate) fn subscribed(&self) -> bool {
        self.w.hosts[PUB]
            .ep
            .publisher()
            .subscribers()
            .subscribers(TOPIC)
            .any(|a| a == sub_addr())
    }

    /// One millisecond: deliveries and timers, then one message if `publish` and the
    /// subscriber is subscribed.
    pub(crate) fn step(&mut self, publish: bool) {
        self.w.step();
        if publish && self.subscribed() {
            self.published += 1;
            let n = self.published;
            let first = if self.size > 0 {
                self.w.publish(PUB, 0, &(n, body(n, self.size)))
            } else {
                self.w.publish(PUB, 0, &payload(n))
            };
            if self.size > 0 {
                self.large.push((n, first.unwrap_or(0)));
            }
        }
    }

    /// Runs until `count` messages are published and `tail_ms` after; `forge` runs after
    /// each step (the adversary's turn).
    pub(crate) fn run(&mut self, count: u64, tail_ms: u64, mut forge: impl FnMut(&mut Stream)) {
        let mut done_at = None;
        for ms in 0..60_000u64 {
            let publish = self.published < count;
            self.step(publish);
            forge(self);
            if self.published >= count {
                let end = *done_at.get_or_insert(ms + tail_ms);
                if ms >= end {
                    return;
                }
            }
        }
        panic!("published only {} messages", self.published);
    }

    /// The sequence number before the first the subscriber expects: its first
    /// acknowledgement's.
    pub(crate) fn joined_after(&self) -> Option<u64> {
        self.w.hosts[SUB].starts.first().and_then(|&(_, s)| s)
    }

    /// The numbers of the messages the subscriber got, each checked.
    pub(crate) fn delivered(&self) -> Vec<u64> {
        let got = &self.w.hosts[SUB].got.0;
        got.iter()
            .map(|(import, bytes)| {
                assert_eq!(*import, 0);
                if self.size > 0 {
                    return check_large(bytes);
                }
                let value: (u64, [u8; 24]) = match crate::decode_payload(bytes) {
                    Ok(v) => v,
                    Err(e) => panic!("message corrupt: {e}"),
                };
                assert_eq!(value, payload(value.0), "message {} corrupt", value.0);
                value.0
            })
            .collect()
    }

    /// The ranges the subscriber gave up (`Event::Unrecovered`).
    pub(crate) fn lost(&self) -> Vec<(u64, u64)> {
        self.w.hosts[SUB]
            .events
            .iter()
            .filter_map(|e| match *e {
                Event::Unrecovered { first, last, .. } => Some((first, last)),
                _ => None,
            })
            .collect()
    }

    /// The small messages the subscriber should see: from its first acknowledgement on.
    pub(crate) fn expected(&self) -> Vec<u64> {
        (self.joined_after().unwrap_or(0) + 1..=self.published).collect()
    }

    /// The large messages the subscriber should see: those sent after its first
    /// acknowledgement.
    pub(crate) fn expected_large(&self) -> Vec<u64> {
        let joined = self.joined_after().unwrap_or(0);
        self.large
            .iter()
            .filter(|&&(_, first)| first > joined)
            .map(|&(n, _)| n)
            .collect()
    }

    /// What `read` reads from host `i`'s endpoint once its figures (sums over its machines)
    /// are brought up to date.
    pub(crate) fn figure(&self, i: usize, read: impl FnOnce(&Endpoint) -> u64) -> u64 {
        let ep = &self.w.hosts[i].ep;
        ep.refresh_metrics();
        read(ep)
    }

    /// Now, in milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        self.w.now / MS
    }
}
