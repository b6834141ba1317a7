//! Publishers and subscribers of one topic on the [`World`], for the discovery and multicast
//! tests: every host hears the discovery group; each publisher sends message
//! `session << 32 | n` every 10 ms; what is sent arrives within the millisecond it is sent.

use std::net::SocketAddr;
use std::time::Duration;

use super::world::{ip, World, MAX, MS};
use crate::{
    BatchEncoder, BridgeConfig, DataMeta, DiscoverSpec, DiscoveryConfig, Endpoint, ExportSpec,
    ImportSpec,
};

pub(crate) const TOPIC: u64 = 0x7171;
pub(crate) const FP: u64 = 0xf1f1;
pub(crate) const SUB_SESSION: u64 = 0x5b5b;

/// The discovery group.
pub(crate) fn group() -> SocketAddr {
    SocketAddr::from(([239, 255, 76, 76], 7476))
}

/// A data group.
pub(crate) fn data_group() -> SocketAddr {
    SocketAddr::from(([239, 1, 2, 3], 7600))
}

/// Publisher `host`'s data address.
pub(crate) fn addr(host: u8) -> SocketAddr {
    ip(host, 7100)
}

/// The discovering subscriber's address.
pub(crate) fn sub_addr() -> SocketAddr {
    ip(9, 7101)
}

pub(crate) fn discovery() -> DiscoveryConfig {
    DiscoveryConfig {
        group: Some(group()),
        announce_every: Duration::from_millis(200),
        try_timeout: Duration::from_millis(1500),
        ..DiscoveryConfig::default()
    }
}

/// A host to be: its address, its endpoint, and the session its messages carry (0: it
/// publishes nothing).
pub(crate) struct Node {
    pub(crate) addr: SocketAddr,
    pub(crate) ep: Endpoint,
    pub(crate) id: u64,
}

pub(crate) fn node(addr: SocketAddr, ep: Endpoint, id: u64) -> Node {
    Node { addr, ep, id }
}

/// The endpoint of a publisher of the topic (to `group` too, if any).
pub(crate) fn exporter(
    host: u8,
    session: u64,
    config: &BridgeConfig,
    group: Option<SocketAddr>,
    reliable: bool,
) -> Endpoint {
    Endpoint::new(
        config,
        MAX,
        session,
        [host; 32],
        vec![ExportSpec {
            topic: "sim.quote".into(),
            topic_id: TOPIC,
            fingerprint: FP,
            allow: None,
            reliable,
            late_join: 0,
            group,
            shape: None,
        }],
        Vec::new(),
    )
}

pub(crate) fn publisher(host: u8, session: u64) -> Node {
    publisher_with(host, session, &BridgeConfig::default(), &discovery())
}

/// A publisher announcing its topic as `d` says.
pub(crate) fn publisher_with(
    host: u8,
    session: u64,
    config: &BridgeConfig,
    d: &DiscoveryConfig,
) -> Node {
    let ep = exporter(host, session, config, None, false).with_discovery(d, addr(host), Vec::new());
    node(addr(host), ep, session)
}

pub(crate) fn subscriber() -> Node {
    subscriber_with(&BridgeConfig::default(), &discovery())
}

/// A subscriber that discovers the topic as `d` says.
pub(crate) fn subscriber_with(config: &BridgeConfig, d: &DiscoveryConfig) -> Node {
    let ep = Endpoint::new(config, MAX, SUB_SESSION, [7; 32], Vec::new(), Vec::new())
        .with_discovery(
            d,
            sub_addr(),
            vec![DiscoverSpec {
                topic: "sim.quote".into(),
                topic_id: TOPIC,
                fingerprint: FP,
                reliable: false,
                port: 0,
            }],
        );
    node(sub_addr(), ep, 0)
}

/// A publisher exporting the topic to `data_group()` too (no discovery).
pub(crate) fn multicast_publisher(host: u8, session: u64) -> Node {
    let ep = exporter(
        host,
        session,
        &BridgeConfig::default(),
        Some(data_group()),
        false,
    );
    node(addr(host), ep, session)
}

/// A subscriber at 127.0.0.`host`:7101 importing the topic from the publisher at `addr(1)`.
pub(crate) fn importer(host: u8) -> Node {
    importer_with(host, false)
}

pub(crate) fn importer_with(host: u8, reliable: bool) -> Node {
    importer_configured(host, reliable, &BridgeConfig::default())
}

pub(crate) fn importer_configured(host: u8, reliable: bool, config: &BridgeConfig) -> Node {
    let ep = Endpoint::new(
        config,
        MAX,
        0x500 + u64::from(host),
        [host; 32],
        Vec::new(),
        vec![ImportSpec {
            topic: "sim.quote".into(),
            topic_id: TOPIC,
            fingerprint: FP,
            publisher: addr(1),
            reliable,
        }],
    );
    node(ip(host, 7101), ep, 0)
}

/// A data frame of the topic under `session`, followed by a guessed `token`.
pub(crate) fn forged_data(session: u64, seq: u64, token: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf).with_token(true);
    let meta = DataMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        seq,
        timestamp_ns: 0,
    };
    enc.push_data(meta, &(0xbadu64 << 32)).unwrap();
    let mut data = enc.as_bytes().to_vec();
    data.extend_from_slice(&token.to_le_bytes());
    data
}

/// The hosts (host `i` is `nodes[i]`) and what each publishes.
pub(crate) struct Net {
    pub(crate) w: World,
    ids: Vec<u64>,
    published: Vec<u64>,
}

impl Net {
    pub(crate) fn new(nodes: Vec<Node>) -> Net {
        let mut w = World::new(5);
        w.discovery_group = Some(group());
        let mut ids = Vec::new();
        for n in nodes {
            w.add(n.addr, n.ep);
            ids.push(n.id);
        }
        let published = vec![0; ids.len()];
        Net { w, ids, published }
    }

    /// Host `i` restarts as `n` (a new session at the same address, say).
    pub(crate) fn replace(&mut self, i: usize, n: Node) {
        self.w.restart(i, n.ep);
        self.ids[i] = n.id;
        self.published[i] = 0;
    }

    /// Messages host `i` published.
    pub(crate) fn published(&self, i: usize) -> u64 {
        self.published[i]
    }

    /// One millisecond: what is due arrives, then each live host's timer and (every 10 ms)
    /// message, then everything sent arrives.
    pub(crate) fn step(&mut self) {
        self.w.now += MS;
        self.w.deliver();
        for i in 0..self.w.hosts.len() {
            if !self.w.hosts[i].up {
                continue;
            }
            self.w.timer(i);
            if self.ids[i] != 0 && self.w.now % (10 * MS) == 0 {
                self.published[i] += 1;
                let value = self.ids[i] << 32 | self.published[i];
                self.w.publish(i, 0, &value);
            }
        }
        self.w.deliver();
    }

    pub(crate) fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }

    /// What host `i` got: `(port, value)`.
    pub(crate) fn got(&self, i: usize) -> Vec<(usize, u64)> {
        let values: Vec<u64> = self.w.hosts[i].got.values();
        self.w.hosts[i]
            .got
            .0
            .iter()
            .map(|(port, _)| *port)
            .zip(values)
            .collect()
    }

    /// How many messages host `i` got so far.
    pub(crate) fn mark(&self, i: usize) -> usize {
        self.w.hosts[i].got.len()
    }

    /// Every host's [`mark`](Self::mark).
    pub(crate) fn marks(&self) -> Vec<usize> {
        (0..self.w.hosts.len()).map(|i| self.mark(i)).collect()
    }

    /// Values the subscriber (host 0) received on port 0 from publisher session `id` since
    /// index `from`.
    pub(crate) fn from(&self, id: u64, from: usize) -> usize {
        self.got(0)[from..]
            .iter()
            .filter(|(port, v)| *port == 0 && v >> 32 == id)
            .count()
    }

    /// Host `i`'s messages from publisher `id` since index `from` of what it got.
    pub(crate) fn got_from(&self, i: usize, id: u64, from: usize) -> usize {
        self.got(i)[from..]
            .iter()
            .filter(|(_, v)| v >> 32 == id)
            .count()
    }

    /// The publishers the subscriber (host 0) follows: `(address, session)`, sorted.
    pub(crate) fn discovered(&self) -> Vec<(SocketAddr, u64)> {
        let mut d: Vec<_> = self.w.hosts[0]
            .ep
            .discovered()
            .map(|(_, a, s, _)| (a, s))
            .collect();
        d.sort();
        d
    }

    /// Datagrams the subscriber sent to an address where no endpoint lives.
    pub(crate) fn to_nowhere(&self) -> u64 {
        self.w
            .nowhere
            .iter()
            .filter(|(src, _, _)| *src == sub_addr())
            .count() as u64
    }

    /// Datagrams host 1 (a publisher) sent to a data group.
    pub(crate) fn to_group(&self) -> u64 {
        self.w.hosts.get(1).map_or(0, |h| h.to_groups)
    }
}
