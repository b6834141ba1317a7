//! What the gateway's test files share: two peer configurations, a hostile client's samples,
//! bounded waits. Each test file uses part of it.
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Counts, Gateway, BINCODE_ENCODING};

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
