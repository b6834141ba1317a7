//! A typeless remote subscriber: llbus-net's sans-IO [`Endpoint`] driven over one UDP socket,
//! what `llbus echo` (and any command that decodes a remote topic) uses.
//!
//! It first fetches each topic's shape from the publisher (the schema frames,
//! `Endpoint::request_schema`: checked against the fingerprint the publisher states), then
//! subscribes with that fingerprint like any remote subscriber (cookie handshake, token, and
//! the pre-shared key if one is given), and hands what arrives to a [`Sink`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use llbus::schema::Shape;

use crate::pattern::TopicArg;
use llbus_net::{
    canonical, BridgeConfig, CallStatus, DropReason, Endpoint, Event, ImportSpec, LatePolicy,
    RecvBatch, SchemaFailure, SendBatch, ServiceImportSpec, Sink, SocketConfig, SocketWire,
    UdpEndpoint, DEFAULT_MAX_DATAGRAM, DEFAULT_MAX_DATAGRAM_V6,
};

/// What every command that subscribes is told: where, with which key, for how long.
#[derive(Debug, clap::Args)]
pub(crate) struct Subscription {
    /// The publisher's bridge address (with a `--topic` pattern, also asked which topics it
    /// serves). Without it, the publisher is found by discovery: the one that announces the
    /// topic (see --group, --interface; with several, the first, and the others named).
    #[arg(long)]
    publisher: Option<SocketAddr>,
    #[command(flatten)]
    lookup: crate::topics::Lookup,
    /// The publisher's pre-shared key: a file of 64 hex digits (or 32 bytes).
    #[arg(long)]
    psk_file: Option<std::path::PathBuf>,
    /// Stops after this many seconds.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Gives up if the schemas or the subscriptions have not come within this many seconds.
    #[arg(long, default_value_t = 10.0)]
    setup_timeout_s: f64,
}

/// A [`Subscription`]'s link, when it ends, and how long its setup may take.
pub(crate) struct Opened {
    pub(crate) link: Link,
    pub(crate) until: Option<Instant>,
    pub(crate) setup_timeout: Duration,
    /// Found by discovery: what the publisher announces that `--topic` takes (else empty).
    pub(crate) announced: Vec<crate::topics::Announced>,
}

impl Subscription {
    /// Reads the key, finds the publisher of `topics` if none was given, and binds the
    /// socket.
    ///
    /// # Errors
    /// An unreadable key file, a bad duration, no publisher found, no socket.
    pub(crate) fn open(&self, topics: &[TopicArg]) -> Result<Opened, String> {
        let psk = self.psk_file.as_deref().map(read_psk).transpose()?;
        let until = match self.duration_s {
            Some(s) => Some(Instant::now() + crate::seconds(s, "--duration-s")?),
            None => None,
        };
        let setup_timeout = crate::seconds(self.setup_timeout_s, "--setup-timeout-s")?;
        let (publisher, announced) = match self.publisher {
            Some(publisher) => (publisher, Vec::new()),
            None => {
                let what = topics
                    .iter()
                    .map(|t| format!("'{}'", crate::text::clean(t.as_str())))
                    .collect::<Vec<_>>()
                    .join(", ");
                let wanted = |name: &str| topics.iter().any(|t| t.takes(name));
                let found = crate::topics::find(&self.lookup, psk, &what, &wanted, setup_timeout)?;
                let publisher = one_publisher(&found, &what)?;
                let announced = found
                    .into_iter()
                    .filter(|a| a.publisher == publisher)
                    .collect();
                (publisher, announced)
            }
        };
        Ok(Opened {
            link: Link::bind(publisher, psk)?,
            until,
            setup_timeout,
            announced,
        })
    }
}

/// The publisher to use of those `found` announcing `what`: the first (they come in address
/// order); the others are named on stderr.
///
/// # Errors
/// None found.
pub(crate) fn one_publisher(
    found: &[crate::topics::Announced],
    what: &str,
) -> Result<SocketAddr, String> {
    let mut publishers: Vec<SocketAddr> = found.iter().map(|a| a.publisher).collect();
    publishers.dedup();
    let Some(&first) = publishers.first() else {
        return Err(format!("no publisher of {what} found"));
    };
    if publishers.len() > 1 {
        let others: Vec<String> = publishers[1..].iter().map(ToString::to_string).collect();
        eprintln!(
            "llbus: {} publishers announce {what}: using {first} (also: {}; name one with \
             --publisher)",
            publishers.len(),
            others.join(", ")
        );
    } else {
        eprintln!("llbus: found the publisher of {what} at {first}");
    }
    Ok(first)
}

/// A topic whose shape the publisher served.
#[derive(Clone, Debug)]
pub(crate) struct Topic {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) topic_id: u64,
    pub(crate) fingerprint: u64,
    pub(crate) shape: Shape,
    /// Subscribed reliably (the export is reliable: in order, gaps NAKed and repaired).
    pub(crate) reliable: bool,
}

/// The 32-byte pre-shared key in file `path`: 64 hex digits (whitespace around them
/// ignored) or 32 raw bytes.
pub(crate) fn read_psk(path: &Path) -> Result<[u8; 32], String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read the key file {}: {e}", crate::text::path(path)))?;
    if let Ok(raw) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    let text = String::from_utf8_lossy(&bytes);
    let hex = text.trim();
    let mut key = [0u8; 32];
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(format!(
            "the key file {} holds neither 64 hex digits nor 32 bytes",
            crate::text::path(path)
        ));
    }
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|e| format!("the key file's digit pair {}: {e}", i + 1))?;
    }
    Ok(key)
}

/// A payload already encoded (bincode, as recorded): serialized as a tuple of its bytes,
/// which bincode writes as the bytes themselves, with no length.
struct Encoded<'a>(&'a [u8]);

impl serde::Serialize for Encoded<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(self.0.len())?;
        for b in self.0 {
            t.serialize_element(b)?;
        }
        t.end()
    }
}

/// Why a schema fetch gave no shape.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// No answer at all within `timeout`.
    NoAnswer {
        publisher: SocketAddr,
        timeout: Duration,
    },
    /// The publisher answered, without a shape for `name` (or with a bad one).
    Failed {
        name: String,
        publisher: SocketAddr,
        reason: SchemaFailure,
    },
    /// The socket, the random source, or too many names.
    Socket(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::NoAnswer { publisher, timeout } => write!(
                f,
                "no schema from {publisher} within {timeout:?}: is the publisher running there, \
                 and does its allowlist admit this host?"
            ),
            FetchError::Failed {
                name,
                publisher,
                reason,
            } => write!(
                f,
                "topic '{}' at {publisher}: {reason}",
                crate::text::clean(name)
            ),
            FetchError::Socket(e) => f.write_str(e),
        }
    }
}

/// Takes nothing: schema fetching delivers no message.
pub(crate) struct NoMessages;

impl Sink for NoMessages {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        Err(DropReason::UnknownTopic)
    }
}

/// One socket towards one publisher, and the buffers to drive endpoints over it.
pub(crate) struct Link {
    publisher: SocketAddr,
    socket: UdpEndpoint,
    send: SendBatch,
    recv: RecvBatch,
    failed: Option<std::io::Error>,
    config: BridgeConfig,
    max_datagram: usize,
    started: Instant,
}

impl Link {
    /// Binds a socket of `publisher`'s address family; `psk`: the publisher's key.
    pub(crate) fn bind(publisher: SocketAddr, psk: Option<[u8; 32]>) -> Result<Link, String> {
        let publisher = canonical(publisher);
        let (local, max_datagram) = if publisher.is_ipv4() {
            (
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                DEFAULT_MAX_DATAGRAM,
            )
        } else {
            (
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
                DEFAULT_MAX_DATAGRAM_V6,
            )
        };
        let socket = UdpEndpoint::bind(local, &SocketConfig::default())
            .map_err(|e| format!("cannot bind a UDP socket: {e}"))?;
        Ok(Link {
            publisher,
            socket,
            send: SendBatch::new(16),
            recv: RecvBatch::new(32, DEFAULT_MAX_DATAGRAM),
            failed: None,
            // Late (reordered) messages are dropped: what is delivered is in order, so a
            // number skipped is a number lost.
            config: BridgeConfig {
                psk,
                late: LatePolicy::Drop,
                ..BridgeConfig::default()
            },
            max_datagram,
            started: Instant::now(),
        })
    }

    /// A socket bound to `bind` that serves topics (`publisher_endpoint`) to the subscribers
    /// `allow` admits; `psk`: the key they must hold; `announce`: the discovery group its
    /// exports are announced on (as a bridge's `Bridge::announce` does; queries sent to the
    /// group are not heard, unicast ones are answered).
    pub(crate) fn serve(
        bind: SocketAddr,
        psk: Option<[u8; 32]>,
        allow: Option<llbus_net::Allowlist>,
        announce: Option<SocketAddr>,
    ) -> Result<Link, String> {
        let max_datagram = if bind.is_ipv4() {
            DEFAULT_MAX_DATAGRAM
        } else {
            DEFAULT_MAX_DATAGRAM_V6
        };
        let socket = UdpEndpoint::bind(bind, &SocketConfig::default())
            .map_err(|e| format!("cannot bind {bind}: {e}"))?;
        let mut config = BridgeConfig {
            psk,
            ..BridgeConfig::default()
        };
        if let Some(allow) = allow {
            config.allow = allow;
        }
        if let Some(group) = announce {
            let discovery = llbus_net::DiscoveryConfig {
                group: Some(group),
                ..llbus_net::DiscoveryConfig::default()
            };
            // From the interface of the bound address, as a bridge announces.
            let interface = (!bind.ip().is_unspecified()).then(|| bind.ip());
            socket
                .set_multicast(group.is_ipv4(), discovery.ttl, interface)
                .map_err(|e| {
                    format!(
                        "cannot announce on the discovery group {group} from {bind} ({e}); \
                         --no-announce plays without"
                    )
                })?;
            config.discovery = Some(discovery);
        }
        Ok(Link {
            publisher: socket.local_addr(),
            socket,
            send: SendBatch::new(16),
            recv: RecvBatch::new(32, DEFAULT_MAX_DATAGRAM),
            failed: None,
            config,
            max_datagram,
            started: Instant::now(),
        })
    }

    /// An endpoint that serves `exports` on this link's socket.
    ///
    /// # Errors
    /// No randomness for its secrets.
    pub(crate) fn publisher_endpoint(
        &self,
        exports: Vec<llbus_net::ExportSpec>,
    ) -> Result<Endpoint, String> {
        let seed = llbus_net::random_secret()
            .map_err(|e| format!("cannot read the system's random source: {e}"))?;
        let endpoint = Endpoint::new(
            &self.config,
            self.max_datagram,
            llbus_net::new_session_id(),
            seed,
            exports,
            Vec::new(),
        );
        Ok(match &self.config.discovery {
            Some(discovery) => {
                endpoint.with_discovery(discovery, self.socket.local_addr(), Vec::new())
            }
            None => endpoint,
        })
    }

    /// Sends `messages` (encoded payloads) as the next messages of export `i`, batched.
    pub(crate) fn publish<'a>(
        &mut self,
        endpoint: &mut Endpoint,
        i: usize,
        messages: impl Iterator<Item = &'a [u8]>,
    ) {
        let mut wire = SocketWire::new(&mut self.socket, &mut self.send, &mut self.failed);
        if let Some(mut batch) = endpoint.export(i, &mut wire) {
            for m in messages {
                batch.push(&Encoded(m));
            }
        };
    }

    /// The publisher's address (serving: the bound address).
    pub(crate) fn publisher(&self) -> SocketAddr {
        self.publisher
    }

    /// The publisher's pre-shared key, if it has one.
    pub(crate) fn psk(&self) -> Option<[u8; 32]> {
        self.config.psk
    }

    /// The largest datagram this link sends.
    pub(crate) fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// An endpoint that subscribes to `topics` (none: one that only fetches schemas).
    fn endpoint(&self, topics: &[Topic]) -> Result<Endpoint, String> {
        let seed = llbus_net::random_secret()
            .map_err(|e| format!("cannot read the system's random source: {e}"))?;
        let imports = topics
            .iter()
            .map(|t| ImportSpec {
                topic: t.name.clone(),
                topic_id: t.topic_id,
                fingerprint: t.fingerprint,
                publisher: self.publisher,
                reliable: t.reliable,
            })
            .collect();
        Ok(Endpoint::new(
            &self.config,
            self.max_datagram,
            llbus_net::new_session_id(),
            seed,
            Vec::new(),
            imports,
        ))
    }

    /// One round: the endpoint's timers, then every datagram waiting (a millisecond's sleep
    /// if there was none), what it lets through handed to `sink`.
    ///
    /// # Errors
    /// The socket failed for good.
    pub(crate) fn drive(
        &mut self,
        endpoint: &mut Endpoint,
        sink: &mut dyn Sink,
    ) -> Result<(), String> {
        let now = self.now_ns();
        let mut wire = SocketWire::new(&mut self.socket, &mut self.send, &mut self.failed);
        endpoint.on_timer(now, &mut wire, sink);
        let n = self
            .socket
            .recv_batch(&mut self.recv)
            .map_err(|e| format!("the UDP socket failed: {e}"))?;
        for (datagram, from) in self.recv.iter() {
            let mut wire = SocketWire::new(&mut self.socket, &mut self.send, &mut self.failed);
            endpoint.handle(datagram, from, now, &mut wire, sink);
        }
        if let Some(e) = self.failed.take() {
            return Err(format!("the UDP socket failed: {e}"));
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Fetches the shapes of `names` from the publisher, in that order, at most
    /// [`MAX_SCHEMA_FETCHES`](llbus_net::MAX_SCHEMA_FETCHES) at once.
    ///
    /// # Errors
    /// A topic the publisher serves no schema for, a schema refused (see `SchemaFailure`), or
    /// no answer within `timeout` (for each batch).
    pub(crate) fn schemas(
        &mut self,
        names: &[String],
        timeout: Duration,
    ) -> Result<Vec<Topic>, String> {
        let mut topics = Vec::with_capacity(names.len());
        for batch in names.chunks(llbus_net::MAX_SCHEMA_FETCHES) {
            let fetched = self.schemas_at_once(batch, timeout);
            topics.extend(fetched.map_err(|e| e.to_string())?);
        }
        Ok(topics)
    }

    /// The shape of `name` from the publisher.
    ///
    /// # Errors
    /// As [`schemas`](Self::schemas), told apart.
    pub(crate) fn schema(&mut self, name: &str, timeout: Duration) -> Result<Topic, FetchError> {
        let mut topics = self.schemas_at_once(&[name.to_owned()], timeout)?;
        topics
            .pop()
            .ok_or(FetchError::Socket("no schema".to_owned()))
    }

    /// [`schemas`](Self::schemas) of at most `MAX_SCHEMA_FETCHES` names.
    fn schemas_at_once(
        &mut self,
        names: &[String],
        timeout: Duration,
    ) -> Result<Vec<Topic>, FetchError> {
        let mut endpoint = self.endpoint(&[]).map_err(FetchError::Socket)?;
        let mut found: Vec<Option<Topic>> = vec![None; names.len()];
        for name in names {
            if !endpoint.request_schema(llbus::topic_id(name), self.publisher) {
                return Err(FetchError::Socket(format!(
                    "at most {} topics at once",
                    llbus_net::MAX_SCHEMA_FETCHES
                )));
            }
        }
        let deadline = Instant::now() + timeout;
        while found.iter().any(Option::is_none) {
            if Instant::now() >= deadline {
                return Err(FetchError::NoAnswer {
                    publisher: self.publisher,
                    timeout,
                });
            }
            self.drive(&mut endpoint, &mut NoMessages)
                .map_err(FetchError::Socket)?;
            while let Some(event) = endpoint.poll_event() {
                match event {
                    Event::SchemaReceived {
                        topic_id,
                        fingerprint,
                        shape,
                        ..
                    } => {
                        for (slot, name) in found.iter_mut().zip(names) {
                            if llbus::topic_id(name) == topic_id {
                                *slot = Some(Topic {
                                    name: name.as_str().into(),
                                    topic_id,
                                    fingerprint,
                                    shape: shape.clone(),
                                    reliable: false,
                                });
                            }
                        }
                    }
                    Event::SchemaFailed {
                        topic_id, reason, ..
                    } => {
                        let name = names
                            .iter()
                            .find(|n| llbus::topic_id(n) == topic_id)
                            .map_or("?", String::as_str);
                        return Err(FetchError::Failed {
                            name: name.to_owned(),
                            publisher: self.publisher,
                            reason,
                        });
                    }
                    _ => {}
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// An endpoint subscribed to `topics` at the publisher (the subscriptions go out as it is
    /// driven).
    ///
    /// # Errors
    /// No randomness for its secrets.
    pub(crate) fn subscribe(&self, topics: &[Topic]) -> Result<Endpoint, String> {
        self.endpoint(topics)
    }

    /// An endpoint that calls `service` at the publisher (its subscription to the service goes
    /// out as it is driven).
    ///
    /// # Errors
    /// No randomness for its secrets.
    pub(crate) fn caller(&self, service: ServiceImportSpec) -> Result<Endpoint, String> {
        Ok(self.endpoint(&[])?.with_services(Vec::new(), vec![service]))
    }

    /// Calls `endpoint`'s first imported service with `body` (an encoded request) for at
    /// most `timeout`; the call ends through the sink of a later [`drive`](Self::drive), as
    /// `Sink::reply` with `key`.
    ///
    /// # Errors
    /// The call was not made (see `Endpoint::call`).
    pub(crate) fn call(
        &mut self,
        endpoint: &mut Endpoint,
        key: u64,
        body: &[u8],
        timeout: Duration,
    ) -> Result<(), CallStatus> {
        let now = self.now_ns();
        let deadline = now.saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        let mut wire = SocketWire::new(&mut self.socket, &mut self.send, &mut self.failed);
        endpoint.call(0, key, &Encoded(body), deadline, now, &mut wire)
    }

    /// Unsubscribes `endpoint`'s imports (best effort).
    pub(crate) fn close(&mut self, endpoint: &mut Endpoint) {
        let mut wire = SocketWire::new(&mut self.socket, &mut self.send, &mut self.failed);
        endpoint.close(&mut wire);
    }
}
