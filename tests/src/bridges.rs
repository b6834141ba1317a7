//! Bridge set-ups shared by the network tests of several binaries (`llbus-net`'s own and the
//! cross-crate ones that run the `llbus` command against a bridge).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use llbus::schema::{Fields, Shape};
use llbus_net::{
    Allowlist, BridgeConfig, DropReason, EncodedShape, Endpoint, ExportSpec, RecvBatch, SendBatch,
    Sink, SocketConfig, SocketWire, UdpEndpoint, DEFAULT_MAX_DATAGRAM,
};

/// A millisecond in the endpoint's clock (nanoseconds).
const MS: u64 = 1_000_000;

/// A payload written as is (bincode writes a tuple's elements without a length).
#[derive(Debug)]
pub struct Raw<'a>(pub &'a [u8]);

impl serde::Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(self.0.len())?;
        for b in self.0 {
            t.serialize_element(b)?;
        }
        t.end()
    }
}

/// Takes nothing.
#[derive(Debug)]
pub struct NoData;

impl Sink for NoData {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        Err(DropReason::UnknownTopic)
    }
}

/// An export of `topic` with shape `shape` (served on request), best-effort, admitting `allow`.
pub fn export(topic: &'static str, shape: &Shape, allow: Option<Allowlist>) -> ExportSpec {
    ExportSpec {
        topic: topic.into(),
        topic_id: llbus::topic_id(topic),
        fingerprint: shape.fingerprint(),
        allow,
        reliable: false,
        late_join: 0,
        shape: Some(EncodedShape::new(shape).expect("encodable")),
        group: None,
    }
}

/// A publisher that serves what it is told: an `Endpoint` on a loopback socket, driven by a
/// thread of its own, publishing `payloads` (in turn, as they are, every 5 ms) on its first
/// export whenever it has a subscriber. Stopped when dropped.
#[derive(Debug)]
pub struct HostilePub {
    /// Where it listens and sends from.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostilePub {
    /// Starts it: `exports` served under `config`, `payloads` published in turn.
    pub fn start(
        config: BridgeConfig,
        exports: Vec<ExportSpec>,
        payloads: Vec<Vec<u8>>,
    ) -> HostilePub {
        Self::start_with(config, exports, payloads, None, 1)
    }

    /// [`start`](Self::start), never admitting a subscriber of topic `withhold` (its
    /// Subscribes are ignored), and publishing `burst` payloads every 5 ms.
    pub fn start_with(
        config: BridgeConfig,
        exports: Vec<ExportSpec>,
        payloads: Vec<Vec<u8>>,
        withhold: Option<u64>,
        burst: usize,
    ) -> HostilePub {
        let mut socket = UdpEndpoint::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &SocketConfig::default(),
        )
        .expect("binds");
        let addr = socket.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let topic_id = exports.first().map_or(0, |e| e.topic_id);
            let mut endpoint = Endpoint::new(
                &config,
                DEFAULT_MAX_DATAGRAM,
                llbus_net::new_session_id(),
                [7; 32],
                exports,
                Vec::new(),
            );
            let mut send = SendBatch::new(16);
            let mut recv = RecvBatch::new(32, 65_536);
            let mut failed = None;
            let started = Instant::now();
            let mut next_publish = 0u64;
            let mut k = 0usize;
            // Bounded: the test that started it stops it; 60 s at most whatever happens.
            while !stopped.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
                let now = started.elapsed().as_nanos() as u64 + 1;
                let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                endpoint.on_timer(now, &mut wire, &mut NoData);
                let n = socket.recv_batch(&mut recv).unwrap_or(0);
                for (datagram, from) in recv.iter() {
                    let topic = datagram
                        .get(8..16)
                        .map(|t| u64::from_le_bytes(t.try_into().unwrap_or_default()));
                    if datagram.get(4) == Some(&0x10) && topic.is_some() && topic == withhold {
                        continue;
                    }
                    let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                    endpoint.handle(datagram, from, now, &mut wire, &mut NoData);
                }
                if now >= next_publish
                    && !payloads.is_empty()
                    && endpoint.destinations(topic_id).next().is_some()
                {
                    next_publish = now + 5 * MS;
                    let mut wire = SocketWire::new(&mut socket, &mut send, &mut failed);
                    if let Some(mut batch) = endpoint.export(0, &mut wire) {
                        for _ in 0..burst {
                            batch.push(&Raw(&payloads[k % payloads.len()]));
                            k += 1;
                        }
                    };
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        HostilePub {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HostilePub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An array of `n` unit-field structs whose one field has a name of `name_len` bytes: a shape
/// under 64 KiB whose values take no input bytes at all.
pub fn long_names(n: u64, name_len: usize) -> Shape {
    let name = "n".repeat(name_len);
    Shape::Array {
        len: n,
        item: Box::new(Shape::structure(
            "S",
            Fields::named([(name.as_str(), Shape::Tuple(Vec::new()))]),
        )),
    }
}

/// Discovery on loopback: a quote topic, its publishers and subscribers, and the datagrams a
/// forger makes (announcements, queries, Subscribes), for the tests that attack discovery and
/// multicast and for those that run `llbus topics` against it.
pub mod discovery {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};

    use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup};
    use llbus_net::{
        AnnounceHead, BatchEncoder, Bridge, BridgeStatus, Control, DiscoveryConfig, SocketConfig,
        UdpEndpoint, DEFAULT_MAX_DATAGRAM,
    };
    use serde::{Deserialize, Serialize};

    #[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[message(topic = "discovery.quote")]
    /// A numbered quote.
    pub struct Quote {
        /// Its number.
        pub n: u64,
    }

    /// Publishes a quote every tick.
    #[derive(Debug)]
    pub struct Feed {
        /// Where the quotes go.
        pub out: Out<Quote>,
        /// The last quote's number.
        pub n: u64,
    }

    impl Actor for Feed {
        type In = ();
        fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
        fn on_tick(&mut self, ctx: &mut Context<'_>) {
            self.n += 1;
            ctx.publish(self.out, Quote { n: self.n });
        }
    }

    /// Takes quotes and drops them.
    #[derive(Debug)]
    pub struct Drain;

    impl Actor for Drain {
        type In = Quote;
        fn on_message(&mut self, _q: Quote, _ctx: &mut Context<'_>) {}
    }

    /// The loopback interface, for multicast sent from loopback sockets.
    pub const LO: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));

    /// Test `test`'s discovery group: an address of its own and a port of this run's, so that
    /// tests and runs beside it do not hear each other. `None` (and a loud message) where this
    /// machine cannot join a group on loopback.
    pub fn group(test: u8) -> Option<SocketAddr> {
        let port = 20_000 + (std::process::id() % 20_000) as u16;
        let group = SocketAddr::from(([239, 255, 77, 100 + test], port));
        crate::loopback_group_or_skip(group).then_some(group)
    }

    /// Discovery on `group`, announcing every `every`.
    pub fn discovery(group: SocketAddr, every: Duration) -> DiscoveryConfig {
        DiscoveryConfig {
            group: Some(group),
            announce_every: every,
            ..DiscoveryConfig::default()
        }
    }

    /// A bridge exporting (and announcing) `Quote`, fed every 2 ms.
    pub fn publisher(config: DiscoveryConfig) -> (RunningBus, SocketAddr) {
        let bridge = Bridge::bind("127.0.0.1:0")
            .unwrap()
            .name("pub")
            .discovery(config)
            .export::<Quote>();
        let addr = bridge.local_addr();
        let mut bus = Bus::builder();
        bus.actor("feed", |s: &mut Setup<'_>| Feed {
            out: s.output(),
            n: 0,
        })
        .tick_every(Duration::from_millis(2))
        .publishes::<Quote>();
        bus.add(bridge);
        (bus.start().expect("publisher starts"), addr)
    }

    /// A bus around `bridge`, which discovers `Quote`, with an actor taking the quotes.
    pub fn subscriber(bridge: Bridge) -> RunningBus {
        let mut bus = Bus::builder();
        bus.actor("drain", |_: &mut Setup<'_>| Drain)
            .subscribes::<Quote>();
        bus.add(bridge);
        bus.start().expect("subscriber starts")
    }

    /// A publisher announcing `Quote` on `group` every `every`, and a subscriber bus around a
    /// bridge named `sub` that discovers it there: returned once the subscriber follows the
    /// publisher and its subscription is established.
    #[derive(Debug)]
    pub struct Followed {
        /// The publishing bus (its bridge is named `pub`).
        pub publisher: RunningBus,
        /// The publisher's bridge address.
        pub pub_addr: SocketAddr,
        /// The subscriber bridge's status: what it discovered.
        pub status: BridgeStatus,
        /// The subscriber bridge's address.
        pub sub_addr: SocketAddr,
        /// The subscribing bus.
        pub sub: RunningBus,
    }

    /// See [`Followed`].
    ///
    /// # Panics
    /// If the publisher is not followed and established within 20 s.
    pub fn followed(group: SocketAddr, every: Duration) -> Followed {
        let (publisher, pub_addr) = publisher(discovery(group, every));
        let bridge = Bridge::bind("127.0.0.1:0")
            .expect("a loopback bridge")
            .name("sub")
            .discovery(discovery(group, every))
            .discover::<Quote>();
        let status = bridge.status();
        let sub_addr = bridge.local_addr();
        let sub = subscriber(bridge);
        crate::wait_for("the publisher discovered and established", 20, || {
            status
                .discovered()
                .iter()
                .any(|d| d.publisher == pub_addr && d.established)
        });
        Followed {
            publisher,
            pub_addr,
            status,
            sub_addr,
            sub,
        }
    }

    /// An announcement as a forger makes it: `session`, announcing every `period_ms`, data at
    /// port `port` of the datagram's source, announcing `topics`.
    pub fn announce<'a>(
        session: u64,
        period_ms: u32,
        port: u16,
        topics: impl Iterator<Item = (u64, u64, u8, &'a str)> + Clone,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut scratch = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        let head = AnnounceHead {
            session,
            seq: 1,
            timestamp_ns: 0,
            period_ms,
            uptime_ms: 0,
            data: SocketAddr::from(([0, 0, 0, 0], port)),
            group: None,
        };
        enc.push_announce(&head, 0, 1, topics, &mut scratch)
            .expect("the forged announcement fits");
        enc.as_bytes().to_vec()
    }

    /// An announcement of `Quote` alone.
    pub fn announce_quote(session: u64, period_ms: u32, port: u16) -> Vec<u8> {
        let topics = [(Quote::TOPIC_ID, Quote::FINGERPRINT, 0, Quote::TOPIC)];
        announce(session, period_ms, port, topics.iter().copied())
    }

    /// A socket at `ip` (a 127/8 address), reading with a 20 ms timeout.
    pub fn socket(ip: [u8; 4]) -> UdpSocket {
        let s = UdpSocket::bind(SocketAddr::from((ip, 0))).expect("bind a loopback socket");
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        s
    }

    /// Every datagram `s` receives until `for_` has passed: `(length, first bytes' kind)`.
    pub fn drain(s: &UdpSocket, for_: Duration) -> Vec<(usize, u8)> {
        let until = Instant::now() + for_;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while Instant::now() < until {
            if let Ok((n, _)) = s.recv_from(&mut buf) {
                got.push((n, buf.get(4).copied().unwrap_or(0)));
            }
        }
        got
    }

    /// The `Kind` byte of a Subscribe (`docs/PROTOCOL.md`).
    pub const SUBSCRIBE: u8 = 0x10;

    /// A sender on loopback whose datagrams to a group loop back to this host's members.
    pub fn group_sender() -> UdpEndpoint {
        let s =
            UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default()).unwrap();
        s.set_multicast(true, 1, LO).unwrap();
        s
    }

    /// Sends `request` to `group` from a loopback socket and returns what comes back to that
    /// socket within 700 ms: `(length, kind byte)` of each datagram.
    pub fn ask_group(group: SocketAddr, request: &[u8]) -> Vec<(usize, u8)> {
        let mut asker = group_sender();
        asker.send_to(request, group).unwrap();
        let mut batch = llbus_net::RecvBatch::new(16, DEFAULT_MAX_DATAGRAM);
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_millis(700);
        while Instant::now() < until {
            let n = asker.recv_batch(&mut batch).unwrap_or(0);
            for (bytes, _) in batch.iter().take(n) {
                got.push((bytes.len(), bytes.get(4).copied().unwrap_or(0)));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        got
    }

    /// A count shared with an actor.
    pub type Counter = std::sync::Arc<std::sync::atomic::AtomicU64>;

    /// A datagram of `n` Subscribes of `Quote` from session 0x5eed, with `cookie` if any.
    pub fn subscribes(n: u64, cookie: Option<llbus_net::Cookie>) -> Vec<u8> {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        for nonce in 1..=n {
            enc.push_control(&Control::Subscribe {
                topic_id: Quote::TOPIC_ID,
                fingerprint: Quote::FINGERPRINT,
                session: 0x5eed,
                nonce,
                cookie,
            })
            .unwrap();
        }
        enc.as_bytes().to_vec()
    }

    /// Publishes nothing.
    #[derive(Debug)]
    pub struct Silent;

    impl Actor for Silent {
        type In = ();
        fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    }
}
