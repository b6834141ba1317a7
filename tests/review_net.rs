//! Adversarial review of the network bridge's promises (README's network section, SECURITY.md,
//! docs/PROTOCOL.md, `Endpoint`'s API docs), driving the sans-IO `llbus_net::Endpoint` directly:
//! a publisher endpoint, a subscriber endpoint and an attacker that is an allowed host (it
//! subscribes itself, so it knows the publisher's session id, its own cookie and token) and
//! forges any source address. Time is simulated, so every bound is checked exactly.

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Duration;

use llbus_net::{
    decode_payload, parse_datagram, BatchEncoder, BridgeConfig, Control, Cookie, DataMeta,
    DropReason, Endpoint, Event, ExportSpec, ImportSpec, Kind, Nak, RefuseReason, Sink, Wire,
    DEFAULT_MAX_DATAGRAM, HEADER_LEN, VERSION,
};

// ---------------------------------------------------------------------------------------------
// An allocation counter for this thread only (tests of other threads run in parallel).

struct Counting;

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls on this thread.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

fn note_alloc() {
    let _ = COUNT_HERE.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|n| n.set(0));
    COUNT_HERE.with(|on| on.set(true));
    f();
    COUNT_HERE.with(|on| on.set(false));
    ALLOCS.with(|n| n.get())
}

// ---------------------------------------------------------------------------------------------
// The harness: endpoints on a simulated network.

const TOPIC: u64 = 0x5eed_0001;
const FP: u64 = 0xf00d_0001;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const PUB_SESSION: u64 = 0x1111_2222_3333_4444;
const SUB_SESSION: u64 = 0x5555_6666_7777_8888;
const MAX: usize = DEFAULT_MAX_DATAGRAM;

fn addr(host: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, host], port))
}

fn pub_addr() -> SocketAddr {
    addr(1, 7000)
}

fn sub_addr() -> SocketAddr {
    addr(1, 7001)
}

/// Datagrams sent, `(from, to, bytes)`, in buffers kept from call to call so that sending
/// allocates nothing once warm.
struct Net {
    from: SocketAddr,
    sent: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    len: usize,
}

impl Net {
    fn new() -> Self {
        Net {
            from: pub_addr(),
            sent: (0..64)
                .map(|_| (pub_addr(), pub_addr(), Vec::with_capacity(MAX + 64)))
                .collect(),
            len: 0,
        }
    }

    fn from(&mut self, from: SocketAddr) -> &mut Self {
        self.from = from;
        self
    }

    fn drain(&mut self) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        let out = self.sent[..self.len]
            .iter()
            .map(|(f, t, b)| (*f, *t, b.clone()))
            .collect();
        self.len = 0;
        out
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Bytes sent to `to` since the last clear.
    fn to_addr(&self, to: SocketAddr) -> usize {
        self.sent[..self.len]
            .iter()
            .filter(|(_, t, _)| *t == to)
            .map(|(_, _, d)| d.len())
            .sum()
    }

    /// Datagrams and bytes sent to host `ip` (any port) since the last clear.
    fn to_host(&self, host: u8) -> (usize, usize) {
        self.sent[..self.len]
            .iter()
            .filter(|(_, t, _)| t.ip() == addr(host, 1).ip())
            .fold((0, 0), |(n, b), (_, _, d)| (n + 1, b + d.len()))
    }
}

impl Wire for Net {
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        for &(to, suffix) in dests {
            if self.len == self.sent.len() {
                self.sent.push((to, to, Vec::with_capacity(MAX + 64)));
            }
            let from = self.from;
            let slot = &mut self.sent[self.len];
            slot.0 = from;
            slot.1 = to;
            slot.2.clear();
            slot.2.extend_from_slice(bytes);
            if suffixed {
                slot.2.extend_from_slice(&suffix.to_le_bytes());
            }
            self.len += 1;
        }
        dests.len()
    }
}

/// Counts deliveries without decoding (decoding a `Vec` allocates).
struct Counted(u64);

impl Sink for Counted {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        self.0 += 1;
        Ok(())
    }
}

/// What an endpoint delivered: the `u64` at the start of each message.
#[derive(Default)]
struct Got(Vec<u64>);

impl Sink for Got {
    fn deliver(&mut self, _import: usize, payload: &[u8]) -> Result<(), DropReason> {
        let (n, _pad): (u64, Vec<u8>) = decode_payload(payload)?;
        self.0.push(n);
        Ok(())
    }
}

fn export(reliable: bool, late_join: usize) -> ExportSpec {
    ExportSpec {
        topic: "review",
        topic_id: TOPIC,
        fingerprint: FP,
        allow: None,
        reliable,
        late_join,
        group: None,
    }
}

fn import(reliable: bool) -> ImportSpec {
    ImportSpec {
        topic: "review",
        topic_id: TOPIC,
        fingerprint: FP,
        publisher: pub_addr(),
        reliable,
    }
}

fn publisher(config: &BridgeConfig, exports: Vec<ExportSpec>) -> Endpoint {
    Endpoint::new(config, MAX, PUB_SESSION, [7; 32], exports, Vec::new())
}

fn subscriber(config: &BridgeConfig, imports: Vec<ImportSpec>) -> Endpoint {
    Endpoint::new(config, MAX, SUB_SESSION, [9; 32], Vec::new(), imports)
}

/// A publisher and a subscriber joined by a lossless network; the attacker's datagrams are
/// handed in by the test.
struct World {
    now: u64,
    publ: Endpoint,
    sub: Endpoint,
    net: Net,
    got: Got,
    /// Datagrams that went to anyone else (the attacker's addresses).
    elsewhere: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
}

impl World {
    fn new(config: &BridgeConfig, exp: ExportSpec, imp: ImportSpec) -> World {
        let mut w = World {
            now: MS,
            publ: publisher(config, vec![exp]),
            sub: subscriber(config, vec![imp]),
            net: Net::new(),
            got: Got::default(),
            elsewhere: Vec::new(),
        };
        for _ in 0..50 {
            w.tick(MS);
        }
        assert!(
            matches!(
                w.sub.import_state(0),
                Some(llbus_net::ImportState::Established { .. })
            ),
            "the subscriber did not establish: {:?}",
            w.sub.import_state(0)
        );
        w
    }

    /// Delivers everything in flight between publisher and subscriber until quiet.
    fn pump(&mut self) {
        for _ in 0..100 {
            let batch = self.net.drain();
            if batch.is_empty() {
                return;
            }
            for (from, to, bytes) in batch {
                if to == pub_addr() {
                    let mut n = std::mem::replace(&mut self.net, Net::new());
                    self.publ
                        .handle(&bytes, from, self.now, n.from(pub_addr()), &mut self.got);
                    self.net = n;
                } else if to == sub_addr() {
                    let mut n = std::mem::replace(&mut self.net, Net::new());
                    self.sub
                        .handle(&bytes, from, self.now, n.from(sub_addr()), &mut self.got);
                    self.net = n;
                } else {
                    self.elsewhere.push((from, to, bytes));
                }
            }
        }
    }

    fn tick(&mut self, step: u64) {
        self.now += step;
        self.publ
            .on_timer(self.now, self.net.from(pub_addr()), &mut self.got);
        self.pump();
        self.sub
            .on_timer(self.now, self.net.from(sub_addr()), &mut self.got);
        self.pump();
    }

    /// Publishes messages `range` (each with a `pad`-byte body) and delivers them.
    fn publish(&mut self, range: std::ops::RangeInclusive<u64>, pad: usize) {
        for n in range {
            let mut batch = self
                .publ
                .export(0, self.net.from(pub_addr()))
                .expect("export 0");
            batch.push(&(n, vec![0xabu8; pad]));
            drop(batch);
            self.pump();
        }
    }

    /// Hands the subscriber a datagram from `src`.
    fn send_to_sub(&mut self, bytes: &[u8], src: SocketAddr) {
        self.sub.handle(
            bytes,
            src,
            self.now,
            self.net.from(sub_addr()),
            &mut self.got,
        );
        self.pump();
    }
}

/// A datagram of one data frame, followed by `token` (if any).
fn forged_data(session: u64, seq: u64, token: Option<u64>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(token.is_some());
    let meta = DataMeta {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        seq,
        timestamp_ns: 1,
    };
    enc.push_data(meta, &(0xdead_u64, vec![1u8; 4]))
        .expect("encode");
    let mut d = enc.as_bytes().to_vec();
    if let Some(t) = token {
        d.extend_from_slice(&t.to_le_bytes());
    }
    d
}

/// A datagram of one heartbeat, followed by `token` (if any).
fn forged_heartbeat(session: u64, last_seq: u64, token: Option<u64>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(token.is_some());
    enc.push_control(&Control::Heartbeat {
        topic_id: TOPIC,
        fingerprint: FP,
        session,
        last_seq,
        timestamp_ns: 1,
    })
    .expect("encode");
    let mut d = enc.as_bytes().to_vec();
    if let Some(t) = token {
        d.extend_from_slice(&t.to_le_bytes());
    }
    d
}

/// A datagram of `controls`.
fn controls(list: &[Control]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..]);
    for c in list {
        enc.push_control(c).expect("encode");
    }
    enc.as_bytes().to_vec()
}

fn subscribe(topic_id: u64, session: u64, nonce: u64, cookie: Option<Cookie>) -> Control {
    Control::Subscribe {
        topic_id,
        fingerprint: FP,
        session,
        nonce,
        cookie,
    }
}

/// Every control frame of the datagrams in `sent` to `to`.
fn answers(sent: &[(SocketAddr, SocketAddr, Vec<u8>)], to: SocketAddr) -> Vec<Control> {
    sent.iter()
        .filter(|(_, t, _)| *t == to)
        .flat_map(|(_, _, d)| {
            parse_datagram(d, MAX + 64)
                .map(|frames| {
                    frames
                        .filter_map(|f| Control::from_frame(&f).ok())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// What an allowed host learns by subscribing to `topic_id` from `src` itself.
#[derive(Clone, Copy, Debug)]
struct Learned {
    session: u64,
    cookie: Cookie,
    token: u64,
    /// Bytes the handshake's answers (and any late-join burst it earned) took to `src`.
    bytes: usize,
}

/// Subscribes `src` (an allowed host's address) to `topic_id` of `publ`, as a raw attacker:
/// Subscribe, CookieChallenge, Subscribe with the cookie, SubscribeAck. `None` if refused.
fn handshake(
    publ: &mut Endpoint,
    src: SocketAddr,
    topic_id: u64,
    session: u64,
    now: u64,
    refusal: &mut Option<RefuseReason>,
) -> Option<Learned> {
    let mut net = Net::new();
    let mut got = Got::default();
    let d = controls(&[subscribe(topic_id, session, 1, None)]);
    publ.handle(&d, src, now, &mut net, &mut got);
    let mut bytes = net.to_addr(src);
    let cookie = answers(&net.drain(), src)
        .into_iter()
        .find_map(|c| match c {
            Control::CookieChallenge { cookie, .. } => Some(cookie),
            _ => None,
        })?;
    let d = controls(&[subscribe(topic_id, session, 2, Some(cookie))]);
    publ.handle(&d, src, now, &mut net, &mut got);
    bytes += net.to_addr(src);
    let mut learned = None;
    for c in answers(&net.drain(), src) {
        match c {
            Control::SubscribeAck {
                session,
                cookie,
                token,
                ..
            } => {
                learned = Some(Learned {
                    session,
                    cookie,
                    token,
                    bytes,
                })
            }
            Control::Refuse(r) => *refusal = Some(r.reason),
            _ => {}
        }
    }
    learned
}

// ---------------------------------------------------------------------------------------------
// Injection and silencing by an allowed host (SECURITY.md, threat table; README).

/// An allowed host that subscribed itself forges Data (sequence 2^40) and a Heartbeat (last
/// sequence 2^40) under the publisher's address to another host's import, with its own token,
/// with none, and from another port of the publisher's host: nothing is delivered, `lost`
/// stays exact, and every genuine message still arrives.
#[test]
fn allowed_host_cannot_inject_or_silence_a_best_effort_import() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(false, 0), import(false));
    let mut none = None;
    let attacker = addr(2, 9000);
    let learned =
        handshake(&mut w.publ, attacker, TOPIC, 0xaaaa, w.now, &mut none).expect("admitted");
    assert_eq!(learned.session, PUB_SESSION, "the session id is no secret");
    w.publish(1..=10, 4);
    let forgeries = [
        forged_data(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_data(PUB_SESSION, 11, Some(learned.token)),
        forged_data(PUB_SESSION, 11, Some(0)),
        forged_heartbeat(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
    ];
    for f in &forgeries {
        w.send_to_sub(f, pub_addr());
        // Another port of the publisher's host.
        w.send_to_sub(f, addr(1, 7002));
    }
    w.publish(11..=20, 4);
    w.tick(200 * MS);
    assert_eq!(w.got.0, (1..=20).collect::<Vec<_>>(), "delivered");
    let loss = w.sub.loss();
    assert_eq!(loss.lost, 0, "lost moved: {loss:?}");
    assert_eq!(loss.stale, 0, "genuine messages stale: {loss:?}");
}

/// The same against a reliable import: the genuine messages are not duplicates of a forged
/// jump, and nothing is reported unrecovered.
#[test]
fn allowed_host_cannot_inject_or_silence_a_reliable_import() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(true, 0), import(true));
    let mut none = None;
    let learned =
        handshake(&mut w.publ, addr(2, 9000), TOPIC, 0xaaaa, w.now, &mut none).expect("admitted");
    w.publish(1..=10, 4);
    for f in [
        forged_data(PUB_SESSION, 1 << 40, Some(learned.token)),
        forged_data(PUB_SESSION, 12, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, Some(learned.token)),
    ] {
        w.send_to_sub(&f, pub_addr());
    }
    w.publish(11..=20, 4);
    for _ in 0..20 {
        w.tick(10 * MS);
    }
    assert_eq!(w.got.0, (1..=20).collect::<Vec<_>>(), "delivered");
    while let Some(e) = w.sub.poll_event() {
        assert!(!matches!(e, Event::Unrecovered { .. }), "{e:?}");
    }
}

/// Even with the import's own token (what an on-path host or a bug could give), one frame far
/// ahead is not believed on its own word: a data frame or a heartbeat more than 65,536 numbers
/// ahead is not delivered and `lost` does not jump (SECURITY.md: "no single frame is believed
/// far ahead"). Each forgery is tried alone, in a world of its own.
#[test]
fn one_frame_far_ahead_is_not_believed_even_with_the_token() {
    let far = [
        forged_data(PUB_SESSION, 10 + 65_537, None),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, u64::MAX, None),
    ];
    for (k, forged) in far.iter().enumerate() {
        let config = BridgeConfig::default();
        let mut w = World::new(&config, export(false, 0), import(false));
        let token = w
            .publ
            .destinations(TOPIC)
            .find(|&(a, _)| a == sub_addr())
            .map(|(_, t)| t)
            .expect("subscribed");
        // The same frame, now marked and followed by the import's real token.
        let with_token = retoken(forged, token);
        w.publish(1..=10, 4);
        w.send_to_sub(&with_token, pub_addr());
        w.publish(11..=20, 4);
        assert_eq!(
            w.got.0,
            (1..=20).collect::<Vec<_>>(),
            "forgery {k}: delivered"
        );
        let loss = w.sub.loss();
        assert_eq!(loss.lost, 0, "forgery {k}: {loss:?}");
        assert_eq!(
            loss.unconfirmed, 1,
            "forgery {k}: not counted unconfirmed: {loss:?}"
        );
    }
}

/// `forged` (one frame, no token) re-encoded with the token flag and followed by `token`.
fn retoken(forged: &[u8], token: u64) -> Vec<u8> {
    let frame = parse_datagram(forged, MAX)
        .expect("parses")
        .next()
        .expect("one frame");
    match frame.header.kind {
        Kind::Heartbeat => match Control::from_frame(&frame).expect("heartbeat") {
            Control::Heartbeat {
                session, last_seq, ..
            } => forged_heartbeat(session, last_seq, Some(token)),
            _ => unreachable!(),
        },
        _ => forged_data(frame.header.session, frame.header.seq, Some(token)),
    }
}

// ---------------------------------------------------------------------------------------------
// Squatting (SECURITY.md: subscribers_per_host, HostFull, renewals rate-limited).

/// One host gets at most `subscribers_per_host` (4) slots of a topic, whatever its ports; the
/// next is refused `HostFull`; another host still subscribes.
#[test]
fn one_host_holds_at_most_four_slots_and_another_host_still_subscribes() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut admitted = 0;
    let mut refusal = None;
    for port in 0..10u16 {
        let mut r = None;
        if handshake(&mut publ, addr(2, 9000 + port), TOPIC, 7, MS, &mut r).is_some() {
            admitted += 1;
        }
        refusal = refusal.or(r);
    }
    assert_eq!(admitted, 4, "slots of one host");
    assert_eq!(refusal, Some(RefuseReason::HostFull));
    let mut r = None;
    assert!(
        handshake(&mut publ, addr(3, 9000), TOPIC, 7, MS, &mut r).is_some(),
        "another host refused: {r:?}"
    );
}

/// A subscriber endpoint refused for a full host learns why: a `Retrying` event naming
/// `HostFull`, and it stays unestablished.
#[test]
fn refused_subscriber_endpoint_learns_host_full() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut subs: Vec<(SocketAddr, Endpoint)> = (0..5u16)
        .map(|i| {
            (
                addr(2, 9100 + i),
                Endpoint::new(
                    &config,
                    MAX,
                    100 + u64::from(i),
                    [i as u8; 32],
                    Vec::new(),
                    vec![import(false)],
                ),
            )
        })
        .collect();
    let mut got = Got::default();
    let mut now = MS;
    for _ in 0..100 {
        now += MS;
        for i in 0..subs.len() {
            let mut net = Net::new();
            let (a, ep) = &mut subs[i];
            ep.on_timer(now, net.from(*a), &mut got);
            let mut queue = net.drain();
            for _ in 0..10 {
                let mut next = Vec::new();
                for (from, to, d) in queue {
                    let mut n = Net::new();
                    if to == pub_addr() {
                        publ.handle(&d, from, now, n.from(pub_addr()), &mut got);
                    } else if let Some((a, ep)) = subs.iter_mut().find(|(a, _)| *a == to) {
                        ep.handle(&d, from, now, n.from(*a), &mut got);
                    }
                    next.extend(n.drain());
                }
                queue = next;
            }
        }
    }
    let established = subs
        .iter()
        .filter(|(_, ep)| {
            matches!(
                ep.import_state(0),
                Some(llbus_net::ImportState::Established { .. })
            )
        })
        .count();
    assert_eq!(established, 4);
    let (_, last) = &mut subs[4];
    let mut reasons = Vec::new();
    while let Some(e) = last.poll_event() {
        if let Event::Retrying { refusal, .. } = e {
            reasons.push(refusal.reason);
        }
    }
    assert_eq!(
        reasons,
        [RefuseReason::HostFull],
        "events of the refused one"
    );
}

/// Renewals count against the per-source rate limit (20/s, bursts of 40): an admitted source
/// that renews 400 times in one instant, 20 Subscribes per datagram, gets at most the burst
/// answered.
#[test]
fn renewals_are_rate_limited() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let src = addr(2, 9000);
    let mut none = None;
    let learned = handshake(&mut publ, src, TOPIC, 7, MS, &mut none).expect("admitted");
    let renewals: Vec<Control> = (0..20)
        .map(|n| subscribe(TOPIC, 7, 100 + n, Some(learned.cookie)))
        .collect();
    let d = controls(&renewals);
    let mut net = Net::new();
    let mut acks = 0;
    for _ in 0..20 {
        publ.handle(&d, src, MS, &mut net, &mut Got::default());
        acks += answers(&net.drain(), src).len();
    }
    assert!(acks > 0, "renewals never answered");
    assert!(acks <= 40, "{acks} renewals answered in one instant");
}

// ---------------------------------------------------------------------------------------------
// Bounded answers (README: "the answers to one datagram go back in one datagram, never
// larger"; SECURITY.md "Reflection and amplification").

/// Datagrams of 1 to 20 Subscribes of every kind (no cookie, good cookie, wrong cookie, unknown
/// topic, other fingerprint), from proven and unproven sources: the answers to each go back in
/// at most one datagram, never longer than it.
#[test]
fn answers_to_one_datagram_are_one_datagram_no_larger() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let proven = addr(2, 9000);
    let mut none = None;
    let learned = handshake(&mut publ, proven, TOPIC, 7, MS, &mut none).expect("admitted");
    let mut now = 2 * MS;
    let mut rng = fastrand::Rng::with_seed(22);
    let mut net = Net::new();
    for round in 0..300u64 {
        let n = rng.usize(1..=20);
        let list: Vec<Control> = (0..n)
            .map(|i| {
                let nonce = round * 100 + i as u64;
                match rng.u8(..5) {
                    0 => subscribe(TOPIC, 7, nonce, None),
                    1 => subscribe(TOPIC, 7, nonce, Some(learned.cookie)),
                    2 => subscribe(TOPIC, 7, nonce, Some(Cookie([rng.u8(..); 16]))),
                    3 => subscribe(0x9999, 7, nonce, Some(learned.cookie)),
                    _ => Control::Subscribe {
                        topic_id: TOPIC,
                        fingerprint: 0xbad,
                        session: 7,
                        nonce,
                        cookie: Some(learned.cookie),
                    },
                }
            })
            .collect();
        let d = controls(&list);
        let src = if rng.bool() {
            proven
        } else {
            addr(rng.u8(2..9), rng.u16(1..))
        };
        publ.handle(&d, src, now, &mut net, &mut Got::default());
        let sent = net.drain();
        assert!(sent.len() <= 1, "{} datagrams answer one", sent.len());
        for (_, to, bytes) in &sent {
            assert_eq!(*to, src, "answer to someone else");
            assert!(
                bytes.len() <= d.len(),
                "{} bytes answer {}",
                bytes.len(),
                d.len()
            );
        }
        now += 10 * MS;
    }
}

/// A Subscribe shorter than 72 bytes (its padding cut off) is not answered.
#[test]
fn short_subscribe_is_not_answered() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let full = controls(&[subscribe(TOPIC, 7, 1, None)]);
    assert_eq!(full.len(), 72);
    let mut net = Net::new();
    for cut in 1..=16 {
        let mut d = full[..72 - cut].to_vec();
        // The payload length (header bytes 6..8) told to match, so the frame parses if allowed.
        let len = u16::from_le_bytes([d[6], d[7]]).saturating_sub(cut as u16);
        d[6..8].copy_from_slice(&len.to_le_bytes());
        publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
        assert_eq!(
            net.drain().len(),
            0,
            "a {}-byte Subscribe answered",
            d.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Amplification by an admitted subscriber (SECURITY.md: 64 MiB/s per host, bursts of 4 MiB).

/// Four exports of reliable topics with full histories of ~1.4 KB messages.
fn reliable_publisher(config: &BridgeConfig, topics: u64, late_join: usize) -> Endpoint {
    let exports = (0..topics)
        .map(|k| ExportSpec {
            topic_id: TOPIC + k,
            ..export(true, late_join)
        })
        .collect();
    Endpoint::new(config, MAX, PUB_SESSION, [7; 32], exports, Vec::new())
}

fn fill_history(publ: &mut Endpoint, topics: u64, count: u64, subscriber: SocketAddr) {
    // Someone must be subscribed for messages to be sent (and kept).
    for k in 0..topics {
        let mut none = None;
        handshake(publ, subscriber, TOPIC + k, 42, MS, &mut none).expect("admitted");
    }
    let mut net = Net::new();
    for k in 0..topics {
        for n in 1..=count {
            let mut b = publ.export(k as usize, &mut net).expect("export");
            b.push(&(n, vec![0x5au8; 1380]));
            drop(b);
            net.clear();
        }
    }
}

fn nak_datagram(topics: &[u64], cookie: Cookie, session: u64, nonce: u64) -> Vec<u8> {
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..]);
    for i in 0..16 {
        let topic_id = topics[i % topics.len()];
        let first = 1 + (i as u64 * 64) % 960;
        enc.push_nak(&Nak {
            topic_id,
            fingerprint: FP,
            session,
            cookie,
            nonce: nonce + i as u64,
            first,
            last: first + 63,
        })
        .expect("16 NAKs fit");
    }
    enc.as_bytes().to_vec()
}

/// What a NAK flood drew: at one instant, then one second later (bytes, datagrams).
struct Flood {
    instant: (usize, usize),
    later: (usize, usize),
    one_datagram_max: usize,
}

/// A host that proved 4 ports on each of 4 reliable topics floods NAKs (16 per datagram, 64
/// messages each) from all of them, at one instant and again a second later.
fn nak_flood(config: &BridgeConfig) -> Flood {
    let topics = 4u64;
    let mut publ = reliable_publisher(config, topics, 0);
    fill_history(&mut publ, topics, 1024, addr(3, 5000));
    let now = 2 * MS;
    let mut proven = Vec::new();
    for port in 0..4u16 {
        for k in 0..topics {
            let src = addr(2, 9000 + port);
            let mut r = None;
            let l = handshake(&mut publ, src, TOPIC + k, 7, now, &mut r)
                .unwrap_or_else(|| panic!("port {port} topic {k} refused: {r:?}"));
            // A NAK names the subscriber's session.
            proven.push((src, TOPIC + k, Learned { session: 7, ..l }));
        }
    }
    let mut net = Net::new();
    let mut flood = Flood {
        instant: (0, 0),
        later: (0, 0),
        one_datagram_max: 0,
    };
    for (at, rounds) in [(now, 40u64), (now + SEC, 200)] {
        let mut total = (0, 0);
        for round in 0..rounds {
            for &(src, topic, l) in &proven {
                let d = nak_datagram(&[topic], l.cookie, l.session, at + round * 1000);
                publ.handle(&d, src, at, &mut net, &mut Got::default());
                let (n, bytes) = net.to_host(2);
                flood.one_datagram_max = flood.one_datagram_max.max(bytes);
                total = (total.0 + bytes, total.1 + n);
                net.clear();
            }
        }
        if at == now {
            flood.instant = total;
        } else {
            flood.later = total;
        }
    }
    flood
}

const BURST: usize = 4 << 20;

/// The per-host budget holds across ports and topics: at one instant a host draws one 4 MiB
/// burst, a second later no more than refilled (counting the retransmitted frames; the
/// per-datagram trailer is allowed for here, see the strict test below), and one datagram
/// draws at most 16 x 64 messages.
#[test]
fn nak_flood_from_many_ports_and_topics_stays_within_the_host_budget() {
    let f = nak_flood(&BridgeConfig::default());
    let trailer = 8;
    let (bytes, datagrams) = f.instant;
    assert!(bytes > BURST / 2, "the burst was not served: {bytes}");
    assert!(
        bytes <= BURST + datagrams * trailer + 2 * MAX,
        "{bytes} bytes in {datagrams} datagrams to one host in an instant (burst {BURST})"
    );
    let (again, datagrams) = f.later;
    assert!(
        again <= BURST + datagrams * trailer + 2 * MAX,
        "{again} bytes one second after the burst (bucket {BURST})"
    );
    assert!(f.one_datagram_max <= 16 * 64 * (MAX + trailer));
}

/// SECURITY.md states the bound in bytes: "64 MiB/s, bursts of 4 MiB" of retransmitted bytes
/// per host. What leaves the socket towards the host is more: the budget is charged each
/// frame's length, not the datagram's (the 8-byte token, or the 32-byte MAC trailer with a
/// key, is free; `Unavailable` answers are free too).
#[test]
fn nak_flood_bytes_on_the_wire_stay_within_4_mib() {
    let f = nak_flood(&BridgeConfig::default());
    let (bytes, datagrams) = f.instant;
    assert!(
        bytes <= BURST + MAX,
        "{bytes} bytes in {datagrams} datagrams to one host in an instant (burst {BURST})"
    );
}

/// A new port of a known host gets no fresh burst: once a host's bucket is empty, a port that
/// proves itself afterwards draws nothing at the same instant.
#[test]
fn new_port_of_a_drained_host_gets_no_fresh_burst() {
    let config = BridgeConfig::default();
    let mut publ = reliable_publisher(&config, 1, 0);
    fill_history(&mut publ, 1, 1024, addr(3, 5000));
    let now = 2 * MS;
    let mut none = None;
    let first = handshake(&mut publ, addr(2, 9000), TOPIC, 7, now, &mut none).expect("admitted");
    let first = Learned {
        session: 7,
        ..first
    };
    let mut net = Net::new();
    let mut drained = 0;
    for round in 0..200u64 {
        let d = nak_datagram(&[TOPIC], first.cookie, first.session, round * 100);
        publ.handle(&d, addr(2, 9000), now, &mut net, &mut Got::default());
        drained += net.to_host(2).1;
        net.clear();
    }
    assert!(
        drained > (4 << 20) / 2,
        "the first port drew only {drained}"
    );
    let fresh = handshake(&mut publ, addr(2, 9001), TOPIC, 8, now, &mut none).expect("admitted");
    let fresh = Learned {
        session: 8,
        ..fresh
    };
    let d = nak_datagram(&[TOPIC], fresh.cookie, fresh.session, 1);
    publ.handle(&d, addr(2, 9001), now, &mut net, &mut Got::default());
    let (_, bytes) = net.to_host(2);
    assert!(
        bytes <= MAX + 8,
        "a new port of a drained host drew {bytes} bytes"
    );
}

/// Late-join bursts: a host gets at most one per topic per second, whatever its sessions and
/// ports; Subscribes with changing session ids in one datagram do not multiply them.
#[test]
fn late_join_bursts_are_one_per_host_per_topic_per_second() {
    let config = BridgeConfig::default();
    let mut publ = reliable_publisher(&config, 1, 1024);
    fill_history(&mut publ, 1, 1024, addr(3, 5000));
    let now = 5 * MS;
    let mut net = Net::new();
    let mut none = None;
    let mut total = 0usize;
    for port in 0..4u16 {
        let src = addr(2, 9000 + port);
        let l = handshake(&mut publ, src, TOPIC, 1000, now, &mut none).expect("admitted");
        total += l.bytes;
        // Five per port: the rate limit (bursts of 40 per IP) must not be what stops them.
        let list: Vec<Control> = (0..5)
            .map(|s| {
                subscribe(
                    TOPIC,
                    2000 + 10 * u64::from(port) + s,
                    50 + s,
                    Some(l.cookie),
                )
            })
            .collect();
        publ.handle(&controls(&list), src, now, &mut net, &mut Got::default());
        total += net.to_host(2).1;
        net.clear();
    }
    // One burst (at most 64 messages of one datagram each, the per-request cap) and the
    // handshake answers (six 72-byte ones per port).
    assert!(total > 50_000, "no late-join burst at all: {total}");
    let one_burst = 64 * (MAX + 8) + 4 * 6 * 72;
    assert!(
        total <= one_burst,
        "{total} bytes of late-join bursts to one host in one second (one burst <= {one_burst})"
    );
}

// ---------------------------------------------------------------------------------------------
// Expiry, the MAC, malformed input, allocation, deadlines, the wire version.

/// A subscriber that never renews is expired after 60 s and gets nothing more.
#[test]
fn subscriber_that_never_renews_expires() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    handshake(&mut publ, addr(2, 9000), TOPIC, 7, MS, &mut none).expect("admitted");
    let mut net = Net::new();
    let mut got = Got::default();
    let mut now = MS;
    while now < 62 * SEC {
        now += 100 * MS;
        publ.on_timer(now, &mut net, &mut got);
        net.clear();
    }
    assert_eq!(publ.destinations(TOPIC).count(), 0, "still subscribed");
    let mut b = publ.export(0, &mut net).expect("export");
    b.push(&(1u64, vec![0u8; 4]));
    drop(b);
    assert_eq!(net.to_host(2).0, 0, "data to an expired subscriber");
}

fn psk_config() -> BridgeConfig {
    BridgeConfig {
        psk: Some([0x42; 32]),
        ..BridgeConfig::default()
    }
}

/// With a pre-shared key: an allowed host without the key is not even answered; an altered
/// sealed datagram is not delivered; a replayed one is dropped before the sequence tracker
/// (no duplicate counted).
#[test]
fn psk_mac_refuses_keyless_hosts_alterations_and_replays() {
    let config = psk_config();
    let mut w = World::new(&config, export(false, 0), import(false));
    let mut none = None;
    assert!(
        handshake(&mut w.publ, addr(2, 9000), TOPIC, 7, w.now, &mut none).is_none(),
        "a keyless host was admitted"
    );
    // Capture a sealed data datagram on its way.
    let mut batch = w.publ.export(0, w.net.from(pub_addr())).expect("export");
    batch.push(&(1u64, vec![0u8; 4]));
    drop(batch);
    let sealed = w.net.drain();
    assert_eq!(sealed.len(), 1);
    let genuine = sealed[0].2.clone();
    for i in [0, 10, HEADER_LEN + 2, genuine.len() - 1] {
        let mut altered = genuine.clone();
        altered[i] ^= 0x01;
        w.send_to_sub(&altered, pub_addr());
    }
    w.send_to_sub(&forged_data(PUB_SESSION, 1, None), pub_addr());
    assert!(w.got.0.is_empty(), "altered or unsealed data delivered");
    w.send_to_sub(&genuine, pub_addr());
    w.send_to_sub(&genuine, pub_addr());
    w.publish(2..=3, 4);
    w.send_to_sub(&genuine, pub_addr());
    assert_eq!(w.got.0, [1, 2, 3]);
    let loss = w.sub.loss();
    assert_eq!(loss.duplicates, 0, "a replay reached the tracker: {loss:?}");
}

/// Arbitrary bytes and mutations of genuine datagrams, from any source, to both sides: nothing
/// panics ("a malformed datagram is counted and dropped; nothing here fails"), and the stream
/// still flows afterwards.
#[test]
fn hostile_datagrams_never_fail_the_endpoint() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(true, 8), import(true));
    let mut rng = fastrand::Rng::with_seed(0x22);
    let mut samples: Vec<Vec<u8>> = Vec::new();
    let mut net = Net::new();
    for n in 1..=5u64 {
        let mut b = w.publ.export(0, net.from(pub_addr())).expect("export");
        b.push(&(n, vec![0u8; 40]));
        drop(b);
    }
    samples.extend(net.drain().into_iter().map(|(_, _, d)| d));
    samples.push(controls(&[subscribe(TOPIC, 7, 1, None)]));
    samples.push(forged_heartbeat(PUB_SESSION, 3, Some(0)));
    samples.push(nak_datagram(&[TOPIC], Cookie([0; 16]), PUB_SESSION, 1));
    let mut got = Got::default();
    for i in 0..20_000u32 {
        let d: Vec<u8> = if rng.u8(..4) == 0 {
            (0..rng.usize(..1600)).map(|_| rng.u8(..)).collect()
        } else {
            let mut d = samples[rng.usize(..samples.len())].clone();
            for _ in 0..rng.usize(1..4) {
                if d.is_empty() {
                    break;
                }
                let at = rng.usize(..d.len());
                match rng.u8(..3) {
                    0 => d[at] = rng.u8(..),
                    1 => d.truncate(at),
                    _ => d.insert(at, rng.u8(..)),
                }
            }
            d
        };
        let src = if rng.bool() {
            pub_addr()
        } else {
            addr(rng.u8(..), rng.u16(..))
        };
        let now = w.now + u64::from(i);
        w.sub.handle(&d, src, now, &mut net, &mut got);
        w.publ.handle(&d, src, now, &mut net, &mut got);
        net.clear();
    }
    assert!(matches!(
        w.sub.import_state(0),
        Some(llbus_net::ImportState::Established { .. })
    ));
}

/// "Handling datagrams allocates nothing": genuine data, handshakes, renewals, NAKs answered
/// with retransmissions, forgeries and garbage, once the endpoints are warm.
#[test]
fn handling_datagrams_allocates_nothing() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(true, 0), import(true));
    let mut none = None;
    let attacker = addr(2, 9000);
    let l = handshake(&mut w.publ, attacker, TOPIC, 7, w.now, &mut none).expect("admitted");
    let mut net = Net::new();
    let mut data = Vec::new();
    for n in 1..=50u64 {
        let mut b = w.publ.export(0, net.from(pub_addr())).expect("export");
        b.push(&(n, vec![0u8; 1000]));
        drop(b);
        data.extend(
            net.drain()
                .into_iter()
                .filter(|(_, t, _)| *t == sub_addr())
                .map(|(_, _, d)| d),
        );
    }
    let hostile = [
        controls(&[subscribe(TOPIC, 7, 5, None)]),
        controls(&[subscribe(TOPIC, 7, 6, Some(l.cookie))]),
        controls(&[subscribe(TOPIC, 7, 6, Some(Cookie([3; 16])))]),
        nak_datagram(&[TOPIC], l.cookie, 7, 9),
        forged_data(PUB_SESSION, 1 << 40, Some(l.token)),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
        vec![0xff; 300],
        Vec::new(),
    ];
    // Warm: every path once.
    let mut got = Counted(0);
    for d in &hostile {
        w.publ.handle(d, attacker, w.now, &mut net, &mut got);
        w.sub.handle(d, pub_addr(), w.now, &mut net, &mut got);
        net.clear();
    }
    let now = w.now;
    let n = allocations_in(|| {
        for (i, d) in data.iter().enumerate() {
            // Every other one, so the receiver sees gaps, reorders and NAKs.
            if i % 3 != 1 {
                w.sub.handle(d, pub_addr(), now, &mut net, &mut got);
            }
            net.clear();
        }
        for d in &hostile {
            w.publ.handle(d, attacker, now, &mut net, &mut got);
            w.sub.handle(d, pub_addr(), now, &mut net, &mut got);
            net.clear();
        }
    });
    assert!(got.0 > 0);
    assert_eq!(n, 0, "{n} allocations handling datagrams");
}

/// `next_deadline`: "when on_timer next has something to do at the latest". A publisher with
/// a subscriber, called every millisecond for 3 s: whenever `on_timer` sends something, the
/// deadline it announced beforehand was not later.
#[test]
fn next_deadline_is_never_after_due_work() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    handshake(&mut publ, addr(2, 9000), TOPIC, 7, MS, &mut none).expect("admitted");
    let mut net = Net::new();
    let mut got = Got::default();
    let mut sends = 0;
    let mut now = 2 * MS;
    while now < 3 * SEC {
        let deadline = publ.next_deadline();
        publ.on_timer(now, &mut net, &mut got);
        if net.to_host(2).0 > 0 {
            sends += 1;
            assert!(
                deadline <= now,
                "work at {now} after a deadline of {deadline}"
            );
        }
        net.clear();
        now += MS;
    }
    assert!(sends >= 10, "heartbeats: {sends}");
}

/// docs/PROTOCOL.md: the native format is wire version 3; every frame the endpoint sends says
/// so in byte 3 of its header.
#[test]
fn frames_say_wire_version_3() {
    assert_eq!(VERSION, 3);
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut net = Net::new();
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
    let sent = net.drain();
    assert_eq!(sent.len(), 1);
    let frames = parse_datagram(&sent[0].2, MAX).expect("parses");
    for f in frames {
        assert_eq!(f.header.kind, Kind::CookieChallenge);
    }
    assert_eq!(sent[0].2[3], 3);
    let _ = Duration::ZERO;
}

/// Forged answers to a subscriber from the publisher's address by an allowed host that knows
/// the session id and its own token: a SubscribeAck switching to another session, a final
/// Refuse, a CookieChallenge, an `Unavailable` with its own token. The import stays on its
/// session (no new `Established`, no `Refused`) and gets every genuine message.
#[test]
fn forged_answers_do_not_move_an_import() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(true, 0), import(true));
    while w.sub.poll_event().is_some() {}
    let mut none = None;
    let l = handshake(&mut w.publ, addr(2, 9000), TOPIC, 7, w.now, &mut none).expect("admitted");
    w.publish(1..=5, 4);
    for nonce in [0u64, 1, 2, 3, u64::MAX] {
        let forged = controls(&[
            Control::SubscribeAck {
                topic_id: TOPIC,
                fingerprint: FP,
                session: 0xbad5e55,
                last_seq: 1 << 40,
                nonce,
                cookie: l.cookie,
                token: l.token,
            },
            Control::CookieChallenge {
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB_SESSION,
                nonce,
                cookie: l.cookie,
            },
            Control::Refuse(llbus_net::Refusal {
                topic_id: TOPIC,
                requested: FP,
                offered: 0xbad,
                session: PUB_SESSION,
                reason: RefuseReason::FingerprintMismatch,
                nonce,
            }),
        ]);
        w.send_to_sub(&forged, pub_addr());
        w.send_to_sub(&forged, addr(1, 7002));
    }
    let mut buf = vec![0u8; MAX];
    let mut enc = BatchEncoder::new(&mut buf[..MAX - 8]).with_token(true);
    enc.push_unavailable(&llbus_net::Unavailable {
        topic_id: TOPIC,
        fingerprint: FP,
        session: PUB_SESSION,
        nonce: 0,
        first: 6,
        last: 1 << 30,
    })
    .expect("encode");
    let mut u = enc.as_bytes().to_vec();
    u.extend_from_slice(&l.token.to_le_bytes());
    w.send_to_sub(&u, pub_addr());
    w.publish(6..=10, 4);
    for _ in 0..10 {
        w.tick(10 * MS);
    }
    assert_eq!(w.got.0, (1..=10).collect::<Vec<_>>());
    assert_eq!(
        w.sub.import_state(0),
        Some(llbus_net::ImportState::Established {
            session: PUB_SESSION,
            by: match w.sub.import_state(0) {
                Some(llbus_net::ImportState::Established { by, .. }) => by,
                other => panic!("not established: {other:?}"),
            }
        })
    );
    while let Some(e) = w.sub.poll_event() {
        assert!(
            !matches!(
                e,
                Event::Established { .. } | Event::Refused { .. } | Event::Unrecovered { .. }
            ),
            "forged answer moved the import: {e:?}"
        );
    }
}

/// Another port of the subscriber's own host (which has a cookie of its own) cannot
/// unsubscribe the subscriber: its cookie does not prove the subscriber's address.
#[test]
fn another_port_of_the_host_cannot_unsubscribe_the_subscriber() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(false, 0), import(false));
    let mut none = None;
    let neighbour = addr(1, 7009);
    let l = handshake(&mut w.publ, neighbour, TOPIC, 7, w.now, &mut none).expect("admitted");
    let unsub = controls(&[Control::Unsubscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session: SUB_SESSION,
        nonce: 3,
        cookie: Some(l.cookie),
    }]);
    let mut net = Net::new();
    w.publ
        .handle(&unsub, sub_addr(), w.now, &mut net, &mut Got::default());
    assert!(
        w.publ.destinations(TOPIC).any(|(a, _)| a == sub_addr()),
        "a neighbour's cookie unsubscribed the subscriber"
    );
    w.publish(1..=3, 4);
    assert_eq!(w.got.0, [1, 2, 3]);
}

/// A NAK under an address that is not subscribed (a victim's, spoofed, carrying the
/// attacker's own valid cookie and session) gets nothing back, to anyone.
#[test]
fn nak_for_a_victim_address_gets_nothing() {
    let config = BridgeConfig::default();
    let mut publ = reliable_publisher(&config, 1, 0);
    fill_history(&mut publ, 1, 100, addr(3, 5000));
    let mut none = None;
    let l = handshake(&mut publ, addr(2, 9000), TOPIC, 7, 2 * MS, &mut none).expect("admitted");
    let mut net = Net::new();
    let d = nak_datagram(&[TOPIC], l.cookie, 7, 1);
    for victim in [addr(9, 80), addr(2, 9001), addr(3, 5001)] {
        publ.handle(&d, victim, 2 * MS, &mut net, &mut Got::default());
        assert_eq!(net.drain().len(), 0, "a NAK under {victim} was answered");
    }
    // The attacker's own address is answered (so the NAK itself is well-formed).
    publ.handle(&d, addr(2, 9000), 2 * MS, &mut net, &mut Got::default());
    assert!(!net.drain().is_empty(), "the genuine NAK was not answered");
}

/// A publisher that dies mid-stream and restarts (a new session id, the same address): the
/// import's requests while it is gone stay few, and once it is back the import follows the
/// new session (an `Established { changed: true }`) and gets its messages from 1 again.
#[test]
fn publisher_restart_mid_stream_is_followed() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(false, 0), import(false));
    w.publish(1..=5, 4);
    while w.sub.poll_event().is_some() {}
    // Dead for 10 s: count what the subscriber sends into the void.
    let mut sent = 0;
    for _ in 0..10_000 {
        w.now += MS;
        w.sub.on_timer(w.now, w.net.from(sub_addr()), &mut w.got);
        sent += w.net.drain().len();
    }
    assert!(sent <= 30, "{sent} datagrams to a dead publisher in 10 s");
    w.publ = Endpoint::new(
        &config,
        MAX,
        PUB_SESSION + 1,
        [8; 32],
        vec![export(false, 0)],
        Vec::new(),
    );
    for _ in 0..5000 {
        w.tick(MS);
        if w.publ.destinations(TOPIC).count() > 0 {
            break;
        }
    }
    w.publish(1..=5, 4);
    assert_eq!(w.got.0, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]);
    let mut changed = false;
    while let Some(e) = w.sub.poll_event() {
        if let Event::Established {
            changed: c,
            session,
            ..
        } = e
        {
            assert_eq!(session, PUB_SESSION + 1);
            changed |= c;
        }
    }
    assert!(changed, "no Established {{ changed: true }}");
}

/// The crate's contract: encoding a batch, renewing and expiring subscribers, sealing and
/// opening allocate nothing. Once warm, a second of a bridge's life driven through the
/// endpoint (exports pushed, datagrams delivered, heartbeats, renewals, NAK timers, with and
/// without a key) allocates nothing.
#[test]
fn a_warm_endpoints_second_allocates_nothing() {
    for config in [BridgeConfig::default(), psk_config()] {
        let key = config.psk.is_some();
        let mut w = World::new(&config, export(true, 0), import(true));
        let mut got = Counted(0);
        let mut queue: Vec<(SocketAddr, SocketAddr, Vec<u8>)> = (0..256)
            .map(|_| (pub_addr(), pub_addr(), Vec::with_capacity(MAX + 64)))
            .collect();
        let mut run = |w: &mut World, got: &mut Counted, from: u64, to: u64| {
            for n in from..to {
                let now = w.now + n * MS;
                let mut b = w.publ.export(0, w.net.from(pub_addr())).expect("export");
                b.push(&(n, [7u8; 32]));
                drop(b);
                w.publ.on_timer(now, w.net.from(pub_addr()), got);
                w.sub.on_timer(now, w.net.from(sub_addr()), got);
                // Deliver what was sent, dropping every seventh datagram to make NAKs.
                for round in 0..4 {
                    let len = w.net.len;
                    for i in 0..len.min(queue.len()) {
                        let (f, t, d) = &w.net.sent[i];
                        queue[i].0 = *f;
                        queue[i].1 = *t;
                        queue[i].2.clear();
                        queue[i].2.extend_from_slice(d);
                    }
                    w.net.clear();
                    for (i, (f, t, d)) in queue.iter().take(len).enumerate() {
                        if round == 0 && (n as usize + i) % 7 == 0 {
                            continue;
                        }
                        if *t == pub_addr() {
                            w.publ.handle(d, *f, now, w.net.from(pub_addr()), got);
                        } else if *t == sub_addr() {
                            w.sub.handle(d, *f, now, w.net.from(sub_addr()), got);
                        }
                    }
                }
                w.net.clear();
            }
        };
        run(&mut w, &mut got, 1, 1500);
        let before = got.0;
        let n = allocations_in(|| run(&mut w, &mut got, 1500, 2500));
        assert!(
            got.0 > before + 500,
            "key {key}: delivered {}",
            got.0 - before
        );
        assert_eq!(n, 0, "key {key}: {n} allocations in a warm second");
    }
}

/// Sources that cannot be answered (port 0, unspecified, multicast, broadcast, in either
/// spelling) get nothing, and nothing fails.
#[test]
fn unanswerable_sources_get_nothing() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    let mut net = Net::new();
    let bad: [SocketAddr; 7] = [
        "0.0.0.0:0".parse().expect("addr"),
        "127.0.0.1:0".parse().expect("addr"),
        "0.0.0.0:9000".parse().expect("addr"),
        "224.0.0.1:9000".parse().expect("addr"),
        "255.255.255.255:9000".parse().expect("addr"),
        "[::ffff:224.0.0.1]:9000".parse().expect("addr"),
        "[ff02::1]:9000".parse().expect("addr"),
    ];
    for src in bad {
        publ.handle(&d, src, MS, &mut net, &mut Got::default());
        assert_eq!(net.drain().len(), 0, "answered {src}");
    }
    // A good one is answered (the request is valid).
    publ.handle(&d, addr(2, 9000), MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 1);
}

/// A host's slots come back: after one of its four subscribers unsubscribes (with its
/// cookie), or all stop renewing and expire, another port of that host is admitted.
#[test]
fn host_slots_are_released_by_unsubscribe_and_expiry() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut none = None;
    let mut learned = Vec::new();
    for port in 0..4u16 {
        let l =
            handshake(&mut publ, addr(2, 9000 + port), TOPIC, 7, MS, &mut none).expect("admitted");
        learned.push(l);
    }
    let mut r = None;
    assert!(handshake(&mut publ, addr(2, 9100), TOPIC, 7, MS, &mut r).is_none());
    assert_eq!(r, Some(RefuseReason::HostFull));
    let unsub = controls(&[Control::Unsubscribe {
        topic_id: TOPIC,
        fingerprint: FP,
        session: 7,
        nonce: 9,
        cookie: Some(learned[0].cookie),
    }]);
    let mut net = Net::new();
    publ.handle(&unsub, addr(2, 9000), 2 * MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 0, "an Unsubscribe is not answered");
    let mut r = None;
    assert!(
        handshake(&mut publ, addr(2, 9100), TOPIC, 7, 3 * MS, &mut r).is_some(),
        "slot not released by Unsubscribe: {r:?}"
    );
    // Nobody renews: after the timeout every slot is free again.
    let mut now = 3 * MS;
    while now < 62 * SEC {
        now += 100 * MS;
        publ.on_timer(now, &mut net, &mut Got::default());
        net.clear();
    }
    for port in 0..4u16 {
        let mut r = None;
        assert!(
            handshake(&mut publ, addr(2, 9200 + port), TOPIC, 7, now, &mut r).is_some(),
            "slot {port} not released by expiry: {r:?}"
        );
    }
}

/// The same for a reliable import: one data frame or heartbeat far ahead, with the import's
/// real token, makes it neither deliver, nor give anything up (`Unrecovered`), nor NAK the
/// claimed range; the genuine stream goes on.
#[test]
fn one_frame_far_ahead_does_not_move_a_reliable_import() {
    let far = [
        forged_data(PUB_SESSION, 10 + 65_537, None),
        forged_data(PUB_SESSION, 1 << 40, None),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
    ];
    for (k, forged) in far.iter().enumerate() {
        let config = BridgeConfig::default();
        let mut w = World::new(&config, export(true, 0), import(true));
        let token = w
            .publ
            .destinations(TOPIC)
            .find(|&(a, _)| a == sub_addr())
            .map(|(_, t)| t)
            .expect("subscribed");
        w.publish(1..=10, 4);
        while w.sub.poll_event().is_some() {}
        w.send_to_sub(&retoken(forged, token), pub_addr());
        for _ in 0..100 {
            w.tick(10 * MS);
        }
        w.publish(11..=20, 4);
        for _ in 0..10 {
            w.tick(10 * MS);
        }
        assert_eq!(
            w.got.0,
            (1..=20).collect::<Vec<_>>(),
            "forgery {k}: delivered"
        );
        while let Some(e) = w.sub.poll_event() {
            assert!(
                !matches!(e, Event::Unrecovered { .. }),
                "forgery {k}: {e:?}"
            );
        }
        let loss = w.sub.loss();
        assert_eq!(
            loss.unconfirmed, 1,
            "forgery {k}: the token was not taken: {loss:?}"
        );
        assert_eq!(loss.lost, 0, "forgery {k}: {loss:?}");
    }
}

/// The control rate limit is per source IP, not per address: 200 ports of one host, each
/// sending one Subscribe at the same instant, get at most the burst (40) of challenges; a
/// second host is still answered.
#[test]
fn rate_limit_is_per_ip_whatever_the_port() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let mut net = Net::new();
    let mut answered = 0;
    for port in 0..200u16 {
        let d = controls(&[subscribe(TOPIC, 7, u64::from(port), None)]);
        publ.handle(
            &d,
            addr(2, 10_000 + port),
            MS,
            &mut net,
            &mut Got::default(),
        );
        answered += net.drain().len();
    }
    assert!(
        answered >= 20,
        "{answered}: the limit is not 20/s, bursts of 40"
    );
    assert!(
        answered <= 40,
        "{answered} answers to one host in an instant"
    );
    let d = controls(&[subscribe(TOPIC, 7, 1, None)]);
    publ.handle(&d, addr(3, 10_000), MS, &mut net, &mut Got::default());
    assert_eq!(net.drain().len(), 1, "another host starved");
}

/// SECURITY.md "maximum datagram": no datagram an endpoint sends is larger than its
/// `max_datagram` (tokens and MAC trailers included), whatever it sends: data of every size
/// (fragments too), heartbeats, retransmissions, late-join bursts, handshake answers to a
/// full-size request from an IPv4 peer to a dual-stack (1452-byte) publisher.
#[test]
fn no_datagram_exceeds_max_datagram() {
    for key in [false, true] {
        let config = if key {
            psk_config()
        } else {
            BridgeConfig::default()
        };
        let small = llbus_net::DEFAULT_MAX_DATAGRAM_V6;
        let mut w = World::new(&config, export(true, 64), import(true));
        w.publ = Endpoint::new(
            &config,
            small,
            PUB_SESSION + 1,
            [5; 32],
            vec![export(true, 64)],
            Vec::new(),
        );
        let mut largest = 0usize;
        let mut rng = fastrand::Rng::with_seed(3);
        for step in 0..3000u64 {
            w.now += MS;
            if step % 3 == 0 {
                let pad = rng.usize(..4000);
                let mut b = w.publ.export(0, w.net.from(pub_addr())).expect("export");
                b.push(&(step, vec![1u8; pad]));
            }
            w.publ.on_timer(w.now, w.net.from(pub_addr()), &mut w.got);
            w.sub.on_timer(w.now, w.net.from(sub_addr()), &mut w.got);
            for round in 0..4 {
                let batch = w.net.drain();
                for (i, (from, to, d)) in batch.into_iter().enumerate() {
                    if from == pub_addr() {
                        largest = largest.max(d.len());
                        assert!(d.len() <= small, "key {key}: a {}-byte datagram", d.len());
                    }
                    // Drop some downstream datagrams so that NAKs and retransmissions happen.
                    if round == 0 && from == pub_addr() && (step as usize + i) % 5 == 0 {
                        continue;
                    }
                    if to == pub_addr() {
                        w.publ
                            .handle(&d, from, w.now, w.net.from(pub_addr()), &mut w.got);
                    } else if to == sub_addr() {
                        w.sub
                            .handle(&d, from, w.now, w.net.from(sub_addr()), &mut w.got);
                    }
                }
            }
        }
        assert!(
            w.got.0.len() > 500,
            "key {key}: delivered {}",
            w.got.0.len()
        );
        assert!(largest > small - 100, "key {key}: largest only {largest}");
        // A full-size request from an IPv4 peer (1472 bytes of Subscribes) is answered in one
        // datagram the publisher may send.
        let list: Vec<Control> = (0..20).map(|n| subscribe(TOPIC, 9, n, None)).collect();
        let d = controls(&list);
        if !key {
            assert!(d.len() > small - 72, "request of {}", d.len());
            let mut net = Net::new();
            w.publ
                .handle(&d, addr(4, 9000), w.now, &mut net, &mut Got::default());
            for (_, _, a) in net.drain() {
                assert!(a.len() <= small, "an answer of {}", a.len());
            }
        }
    }
}

/// A subscriber that dies mid-stream and restarts at the same address (a new session):
/// the publisher follows it (a new token), and it gets the messages published after it is
/// back, every one once.
#[test]
fn subscriber_restart_mid_stream_is_served() {
    let config = BridgeConfig::default();
    let mut w = World::new(&config, export(false, 0), import(false));
    w.publish(1..=5, 4);
    let old_token = w
        .publ
        .destinations(TOPIC)
        .find(|&(a, _)| a == sub_addr())
        .map(|(_, t)| t);
    w.sub = Endpoint::new(
        &config,
        MAX,
        SUB_SESSION + 1,
        [10; 32],
        Vec::new(),
        vec![import(false)],
    );
    for _ in 0..100 {
        w.tick(MS);
    }
    assert!(matches!(
        w.sub.import_state(0),
        Some(llbus_net::ImportState::Established { .. })
    ));
    let new_token = w
        .publ
        .destinations(TOPIC)
        .find(|&(a, _)| a == sub_addr())
        .map(|(_, t)| t);
    assert_ne!(
        old_token, new_token,
        "the token did not change with the session"
    );
    assert_eq!(
        w.publ.destinations(TOPIC).count(),
        1,
        "two entries for one address"
    );
    w.publish(6..=10, 4);
    assert_eq!(w.got.0, (1..=10).collect::<Vec<_>>());
}

/// The first cookie or acknowledgement in what `net` holds (parsed in place: no allocation).
fn first_answer(net: &Net) -> Option<Control> {
    let (_, _, d) = net.sent.first().filter(|_| net.len > 0)?;
    let mut frames = parse_datagram(d, MAX + 64).ok()?;
    frames.next().and_then(|f| Control::from_frame(&f).ok())
}

/// `Endpoint::new`: "handling datagrams allocates nothing". An allowed host that subscribes
/// and unsubscribes again and again (within the rate limit) makes a `SubscribersChanged`
/// event each time; a driver that does not poll events (nothing says it must) sees `handle`
/// allocate as the event queue grows past its capacity, and the queue grows without bound
/// at the remote host's pace.
#[test]
fn churn_of_an_allowed_host_allocates_nothing_in_handle() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let src = addr(2, 9000);
    let mut net = Net::new();
    let mut got = Got::default();
    let mut now = MS;
    let mut cycle = |publ: &mut Endpoint, net: &mut Net, now: u64, n: u64| -> bool {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&subscribe(TOPIC, n, 2 * n, None));
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        let Some(Control::CookieChallenge { cookie, .. }) = first_answer(net) else {
            return false;
        };
        net.clear();
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&subscribe(TOPIC, n, 2 * n + 1, Some(cookie)));
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        let Some(Control::SubscribeAck { cookie, .. }) = first_answer(net) else {
            return false;
        };
        net.clear();
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&Control::Unsubscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: n,
            nonce: 0,
            cookie: Some(cookie),
        });
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        net.clear();
        true
    };
    for n in 0..4 {
        now += 200 * MS;
        assert!(cycle(&mut publ, &mut net, now, n), "warm-up cycle {n}");
    }
    let mut ok = 0;
    let allocs = allocations_in(|| {
        for n in 4..400 {
            now += 200 * MS;
            if cycle(&mut publ, &mut net, now, n) {
                ok += 1;
            }
        }
    });
    assert!(ok > 300, "only {ok} cycles went through");
    let mut queued = 0;
    while publ.poll_event().is_some() {
        queued += 1;
    }
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in handle; {queued} events queued"
    );
}

/// Late-join bursts come out of the host's budget: once a host drained it with NAKs, a new
/// port of that host that subscribes at the same instant gets its acknowledgement and no
/// burst.
#[test]
fn late_join_burst_of_a_drained_host_is_empty() {
    let config = BridgeConfig::default();
    let mut publ = reliable_publisher(&config, 1, 1024);
    fill_history(&mut publ, 1, 1024, addr(3, 5000));
    let now = 5 * SEC;
    let mut none = None;
    let mut net = Net::new();
    let first = handshake(&mut publ, addr(2, 9000), TOPIC, 7, now, &mut none).expect("admitted");
    let mut drained = 0;
    for round in 0..200u64 {
        let d = nak_datagram(&[TOPIC], first.cookie, 7, round * 100);
        publ.handle(&d, addr(2, 9000), now, &mut net, &mut Got::default());
        drained += net.to_host(2).1;
        net.clear();
    }
    assert!(drained > (4 << 20) / 2, "drained only {drained}");
    // The new port's handshake, by hand, so that every byte sent to the host is counted.
    let src = addr(2, 9001);
    let d = controls(&[subscribe(TOPIC, 8, 1, None)]);
    publ.handle(&d, src, now, &mut net, &mut Got::default());
    let cookie = answers(&net.drain(), src)
        .into_iter()
        .find_map(|c| match c {
            Control::CookieChallenge { cookie, .. } => Some(cookie),
            _ => None,
        })
        .expect("challenge");
    let d = controls(&[subscribe(TOPIC, 8, 2, Some(cookie))]);
    publ.handle(&d, src, now, &mut net, &mut Got::default());
    let (datagrams, bytes) = net.to_host(2);
    assert!(
        bytes <= 72 + MAX,
        "a drained host's new port got {bytes} bytes in {datagrams} datagrams on joining"
    );
    // A fresh host joining at the same instant does get a burst (so the bound above bites).
    net.clear();
    let fresh = addr(4, 9000);
    let d = controls(&[subscribe(TOPIC, 9, 1, None)]);
    publ.handle(&d, fresh, now, &mut net, &mut Got::default());
    let cookie = answers(&net.drain(), fresh)
        .into_iter()
        .find_map(|c| match c {
            Control::CookieChallenge { cookie, .. } => Some(cookie),
            _ => None,
        })
        .expect("challenge");
    let d = controls(&[subscribe(TOPIC, 9, 2, Some(cookie))]);
    publ.handle(&d, fresh, now, &mut net, &mut Got::default());
    let (_, burst) = net.to_host(4);
    assert!(
        burst > 50_000,
        "a fresh host's late-join burst was {burst} bytes"
    );
}
