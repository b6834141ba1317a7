//! `llbus hz` and `llbus spy`: a typeless subscriber of one remote topic over the ll-udp wire
//! protocol (version 2), built on llbus-net's pure `SubscriberSession` and frame parser.
//!
//! Without the Rust type there is no schema fingerprint to subscribe with, so the tap first
//! subscribes with fingerprint 0: the publisher's answer, after the usual address-proving
//! cookie exchange, is a refusal for a fingerprint mismatch that names the fingerprint it
//! exports. The tap then subscribes with that one, like any subscriber, and reads every data
//! frame's header (sequence, session, timestamp) and payload bytes without decoding them.
//! (`--fingerprint` skips the probe.) With the publisher's pre-shared key (`--psk-file`) the
//! tap seals what it sends and opens what it receives with it (`FrameMac`), as a bridge with
//! that key does; without it such a publisher never answers, and the tap says so.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use llbus_net::{
    canonical, parse_datagram, BatchEncoder, Control, FrameMac, Header, Kind, LatePolicy,
    LossCounts, RecvBatch, RefuseReason, Replies, SocketConfig, SubscriberEvent, SubscriberSession,
    UdpEndpoint, DEFAULT_MAX_DATAGRAM_V6, MAC_TAG_LEN,
};

/// What to tap.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) publisher: SocketAddr,
    pub(crate) topic: String,
    pub(crate) fingerprint: Option<u64>,
    /// Give up if the publisher has not admitted us by then.
    pub(crate) setup_timeout: Duration,
    /// The publisher's pre-shared key.
    pub(crate) psk: Option<[u8; 32]>,
}

/// Counts of what the tap saw that was not a delivered data frame.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TapCounts {
    pub(crate) malformed: u64,
    pub(crate) foreign: u64,
    pub(crate) dropped_frames: u64,
}

/// One tap on one topic of one publisher.
pub(crate) struct Tap {
    target: Target,
    endpoint: UdpEndpoint,
    session: SubscriberSession,
    probing: bool,
    established: bool,
    recv: RecvBatch,
    replies: Replies,
    out: Vec<u8>,
    /// With a key: seals the control frames sent, opens what comes (sealed, or data alone
    /// from a publisher that seals only control).
    mac: Option<FrameMac>,
    started: Instant,
    pub(crate) counts: TapCounts,
    /// The fingerprint subscribed with (learned from the publisher when probing).
    pub(crate) fingerprint: u64,
}

fn session_for(topic_id: u64, fingerprint: u64, keyed: bool) -> Result<SubscriberSession, String> {
    let secret = llbus_net::random_secret()
        .map_err(|e| format!("cannot read the system's random source: {e}"))?;
    let session = SubscriberSession::new(
        topic_id,
        fingerprint,
        llbus_net::new_session_id(),
        secret,
        Duration::from_secs(1),
        LatePolicy::Deliver,
    );
    // With a key, the MAC authenticates downstream frames: they carry no token.
    Ok(if keyed {
        session.without_token()
    } else {
        session
    })
}

impl Tap {
    /// Binds a socket of the publisher's address family and prepares the subscription.
    pub(crate) fn new(target: Target) -> Result<Tap, String> {
        let publisher = canonical(target.publisher);
        let local = if publisher.is_ipv4() {
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
        } else {
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
        };
        let endpoint = UdpEndpoint::bind(local, &SocketConfig::default())
            .map_err(|e| format!("cannot bind a UDP socket: {e}"))?;
        let topic_id = llbus::topic_id(&target.topic);
        let fingerprint = target.fingerprint.unwrap_or(0);
        Ok(Tap {
            session: session_for(topic_id, fingerprint, target.psk.is_some())?,
            mac: target.psk.map(|key| FrameMac::new(&key).control_only()),
            probing: target.fingerprint.is_none(),
            established: false,
            endpoint,
            recv: RecvBatch::new(32, DEFAULT_MAX_DATAGRAM_V6 + MAC_TAG_LEN),
            replies: Replies::with_capacity(DEFAULT_MAX_DATAGRAM_V6 / llbus_net::HEADER_LEN),
            out: vec![0u8; DEFAULT_MAX_DATAGRAM_V6],
            started: Instant::now(),
            counts: TapCounts::default(),
            fingerprint,
            target: Target {
                publisher,
                ..target
            },
        })
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// The sequence tracker's counts (lost, duplicates, reordered, ...).
    pub(crate) fn loss(&self) -> &LossCounts {
        self.session.loss()
    }

    fn send(&mut self, frames: &[Control]) -> Result<(), String> {
        let mut enc = BatchEncoder::new(&mut self.out);
        for c in frames {
            enc.push_control(c)
                .map_err(|e| format!("cannot encode a control frame: {e}"))?;
        }
        if enc.is_empty() {
            return Ok(());
        }
        let mut len = enc.as_bytes().len();
        if let Some(mac) = &self.mac {
            len = mac
                .seal(&mut self.out, len)
                .map_err(|e| format!("cannot seal a control frame: {e:?}"))?;
        }
        let datagram = self.out.get(..len).unwrap_or_default();
        // A failed send (an ICMP error, a full buffer) is retried at the next renewal.
        let _ = self.endpoint.send_to(datagram, self.target.publisher);
        Ok(())
    }

    /// Runs until `until` passes or `on_data` returns `false`, handing it every data frame
    /// delivered (header, payload bytes). Errors: a final refusal, a broken socket, or no
    /// admission within the setup timeout.
    pub(crate) fn run(
        &mut self,
        until: Option<Instant>,
        mut on_data: impl FnMut(&Header, &[u8]) -> bool,
        mut on_idle: impl FnMut(&Tap),
    ) -> Result<(), String> {
        let setup_deadline = Instant::now() + self.target.setup_timeout;
        loop {
            if until.is_some_and(|u| Instant::now() >= u) {
                break;
            }
            if !self.established && Instant::now() >= setup_deadline {
                return Err(format!(
                    "no subscription to topic '{}' at {} within {:?}: is the publisher running, does it export the topic, does its allowlist admit this host, and {}?",
                    self.target.topic,
                    self.target.publisher,
                    self.target.setup_timeout,
                    if self.mac.is_some() {
                        "is --psk-file its key"
                    } else {
                        "does it use a pre-shared key (give it with --psk-file)"
                    }
                ));
            }
            let now = self.now_ns();
            if let Some(c) = self.session.poll(now) {
                self.send(&[c])?;
            }
            let n = self
                .endpoint
                .recv_batch(&mut self.recv)
                .map_err(|e| format!("the UDP socket failed: {e}"))?;
            if n == 0 {
                on_idle(self);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut stop = false;
            let mut answers: Vec<Control> = Vec::new();
            let mut learned = None;
            for (datagram, from) in self.recv.iter() {
                if stop {
                    break;
                }
                if canonical(from) != self.target.publisher {
                    self.counts.foreign += 1;
                    continue;
                }
                let parsed = match &self.mac {
                    Some(mac) => mac.open(datagram, DEFAULT_MAX_DATAGRAM_V6 + MAC_TAG_LEN),
                    None => parse_datagram(datagram, DEFAULT_MAX_DATAGRAM_V6),
                };
                let Ok(frames) = parsed else {
                    self.counts.malformed += 1;
                    continue;
                };
                self.replies.clear(from);
                let token = frames.token();
                for frame in frames {
                    if frame.header.kind == Kind::Data {
                        if stop {
                            continue;
                        }
                        match self.session.on_data(&frame.header, token, now) {
                            Ok(v) if v.is_deliver() => {
                                if !on_data(&frame.header, frame.payload) {
                                    stop = true;
                                }
                            }
                            Ok(_) => {}
                            Err(_) => self.counts.dropped_frames += 1,
                        }
                        continue;
                    }
                    let event = Control::from_frame(&frame)
                        .and_then(|c| self.session.on_control(&c, token, now, &mut self.replies));
                    match event {
                        Ok(SubscriberEvent::Established { .. }) => self.established = true,
                        Ok(SubscriberEvent::Refused(r)) => {
                            if self.probing
                                && r.reason == RefuseReason::FingerprintMismatch
                                && r.offered != 0
                            {
                                learned = Some(r.offered);
                            } else {
                                return Err(format!(
                                    "topic '{}' at {}: {r}",
                                    self.target.topic, self.target.publisher
                                ));
                            }
                        }
                        Ok(_) => {}
                        Err(_) => self.counts.dropped_frames += 1,
                    }
                }
                answers.extend_from_slice(self.replies.frames());
            }
            self.send(&answers)?;
            if let Some(fp) = learned {
                // Subscribe for real, with the type the publisher exports.
                self.probing = false;
                self.fingerprint = fp;
                self.session =
                    session_for(llbus::topic_id(&self.target.topic), fp, self.mac.is_some())?;
            }
            if stop {
                break;
            }
        }
        if let Some(bye) = self.session.unsubscribe() {
            self.send(&[bye])?;
        }
        Ok(())
    }
}

/// `bytes` as hex, 16 bytes a line, indented.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let line: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&format!("    {:04x}: {}\n", i * 16, line.join(" ")));
    }
    out
}
