//! What the gateway's tests share: the message types, two peer configurations, a hostile
//! client's samples and publishers, the export's edge and its balance, bounded waits.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, EdgeReport, Message, Report, RunningBus, Subscription};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Counts, Gateway, Import, BINCODE_ENCODING};
use serde::{Deserialize, Serialize};

/// The longest any wait in these tests takes.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Two peer configurations on a free loopback port, no scouting: the first listens, the
/// second connects.
pub fn peers() -> (zenoh::Config, zenoh::Config) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let config = |side: &str| {
        zenoh::Config::from_json5(&format!(
            r#"{{ mode: "peer", {side}: {{ endpoints: ["tcp/127.0.0.1:{port}"] }},
                 scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }} }}"#
        ))
        .expect("a valid zenoh config")
    };
    (config("listen"), config("connect"))
}

/// The 40-byte attachment of a sample of topic `T` on `stream` numbered `sequence`, its
/// fingerprint xor-ed with `fingerprint_xor` (0: the right one).
pub fn attachment<T: Message>(fingerprint_xor: u64, stream: u64, sequence: u64) -> [u8; 40] {
    Attachment {
        topic_id: T::TOPIC_ID,
        fingerprint: T::FINGERPRINT ^ fingerprint_xor,
        stream,
        sequence,
        sent_ns: 0,
    }
    .encode()
}

/// The gateway's bincode encoding of topic `T`.
pub fn bincode_encoding<T: Message>() -> zenoh::bytes::Encoding {
    zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema(T::TOPIC)
}

/// A publisher of a (hostile) client on `key`, once something subscribes to it. `Block`
/// congestion control, so that what it sends reaches the import instead of being dropped in
/// its own queue under load: the figures the tests check are the import's.
pub fn matched_publisher<'a>(
    session: &'a zenoh::Session,
    key: &'static str,
) -> zenoh::pubsub::Publisher<'a> {
    let publisher = session
        .declare_publisher(key)
        .congestion_control(zenoh::qos::CongestionControl::Block)
        .wait()
        .expect("a publisher");
    let deadline = Instant::now() + LIMIT;
    while !publisher
        .matching_status()
        .wait()
        .is_ok_and(|s| s.matching())
    {
        assert!(
            Instant::now() < deadline,
            "nothing ever subscribed to {key}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    publisher
}

/// The gateway's figures once `done` holds on them, or after `LIMIT`.
pub fn counts_when(gateway: &Gateway, done: impl Fn(&Counts) -> bool) -> Counts {
    let deadline = Instant::now() + LIMIT;
    loop {
        let c = gateway.counts();
        if done(&c) || Instant::now() >= deadline {
            return c;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `f` on a thread of its own, waited for at most `timeout`: `Err` hands back the receiver,
/// to wait again once whatever held it up was released.
pub fn within<R: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, mpsc::Receiver<R>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(timeout).map_err(|_| rx)
}

/// A message with a float, an integer and a string: what a JSON client reads.
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.quote")]
pub struct Quote {
    pub px: f64,
    pub qty: u32,
    pub venue: String,
}

/// A numbered message, the topic most tests carry.
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.tick")]
pub struct Tick {
    pub n: u64,
}

/// A second topic of the same shape as [`Tick`].
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.tock")]
pub struct Tock {
    pub n: u64,
}

/// A numbered payload of any size, to fill a slow peer's queues.
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.blob")]
pub struct Blob {
    pub n: u64,
    pub data: Vec<u8>,
}

/// Quote number `n`.
pub fn quote(n: u32) -> Quote {
    Quote {
        px: 100.0 + f64::from(n),
        qty: n,
        venue: "XPAR".to_owned(),
    }
}

/// `msg` in the gateway's bincode (bincode 1 layout).
pub fn bincode_of<T: Serialize>(msg: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(msg, bincode::config::legacy()).expect("bincode")
}

/// The gateway's JSON encoding of topic `T`.
pub fn json_encoding<T: Message>() -> zenoh::bytes::Encoding {
    zenoh::bytes::Encoding::APPLICATION_JSON.with_schema(T::TOPIC)
}

/// The export edge of topic `T` from the app publisher `app`.
pub fn export_edge<'a, T: Message>(report: &'a Report, app: &str) -> &'a EdgeReport {
    report
        .edge(T::TOPIC, app, &format!("zenoh-export:{}", T::TOPIC))
        .expect("the export's edge")
}

/// An edge balances: everything published is handled, dropped, conflated, lost or in flight.
pub fn assert_edge_balances(edge: &EdgeReport) {
    assert_eq!(
        edge.published,
        edge.handled + edge.panicked + edge.dropped + edge.conflated + edge.lost + edge.in_flight,
        "the edge does not balance: {edge:?}"
    );
}

/// A put of `Tick { n }` in the gateway's bincode, as a hostile client would make it.
pub fn put_tick(
    publisher: &zenoh::pubsub::Publisher<'_>,
    n: u64,
    attachment: Option<[u8; 40]>,
    encoding: zenoh::bytes::Encoding,
) {
    let payload =
        bincode::serde::encode_to_vec(Tick { n }, bincode::config::legacy()).expect("bincode");
    let put = publisher.put(payload).encoding(encoding);
    match attachment {
        Some(a) => put.attachment(a.to_vec()).wait(),
        None => put.wait(),
    }
    .expect("the hostile put");
}

/// Zenoh runs every session's callbacks on runtimes shared by the whole process, so a test that
/// holds a callback (a stalled peer) slows every other session of this binary. Such a test takes
/// this lock alone (`holds_callbacks: true`); the others share it, and run beside each other.
pub fn zenoh_threads(holds_callbacks: bool) -> ZenohThreads {
    static LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());
    if holds_callbacks {
        ZenohThreads::Alone(
            LOCK.write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    } else {
        ZenohThreads::Shared(
            LOCK.read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The guard [`zenoh_threads`] returns: held for the test's length.
#[allow(dead_code)]
pub enum ZenohThreads {
    /// A test that holds zenoh's callbacks.
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
    /// Any other test.
    Shared(std::sync::RwLockReadGuard<'static, ()>),
}

/// A bus whose app takes `Tick` (`DropNewest`, 64) from a gateway import, and a zenoh client
/// session peered with the gateway: what a hostile or ordinary client sends to an import.
pub struct TickImport {
    pub running: RunningBus,
    pub gateway: Gateway,
    pub app: Subscription<Tick>,
    pub client: zenoh::Session,
}

/// See [`TickImport`].
pub fn tick_import() -> TickImport {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client session opens");
    TickImport {
        running,
        gateway,
        app,
        client,
    }
}
