//! One simulated network for the endpoint's tests: hosts at addresses, each an [`Endpoint`]
//! driven only through the calls a bridge makes (`handle`, `handle_multicast`, `on_timer`,
//! `export`, `poll_event`); a clock in nanoseconds that moves only when a test says so; a link
//! that loses, duplicates and delays (so reorders) datagrams and can go down for a while;
//! multicast groups (a discovery group every host hears, data groups their members join); and
//! an off-path adversary that puts any datagram on the link under any source address
//! ([`World::inject`]) or hands it straight to a host ([`World::handle`]). An allowed host is
//! one more host whose endpoint subscribes like any other, so it learns what a subscriber
//! learns.
//!
//! A step ([`World::step`]) is one millisecond: what is due arrives (and what it causes, when
//! the link adds no delay), then every live host's timer runs and what that sends is
//! delivered likewise. Every datagram a host sends goes through [`Outbox`], the [`Wire`] a
//! test may also pass to an endpoint itself: its buffers are reused, so a warm endpoint's
//! sends allocate nothing.

use std::net::SocketAddr;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{
    parse_datagram, Control, DropReason, Endpoint, Event, Kind, Sink, Wire, DEFAULT_MAX_DATAGRAM,
};

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const SEC: u64 = 1_000_000_000;
pub(crate) const MAX: usize = DEFAULT_MAX_DATAGRAM;

/// The loopback address `127.0.0.host:port`.
pub(crate) fn ip(host: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, host], port))
}

/// What endpoints sent: `(from, to, datagram)`, the suffix (token) appended, in slots whose
/// buffers are kept from call to call.
pub(crate) struct Outbox {
    from: SocketAddr,
    slots: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    len: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox::new()
    }
}

impl Outbox {
    pub(crate) fn new() -> Self {
        let any = ip(1, 1);
        Outbox {
            from: any,
            slots: (0..64)
                .map(|_| (any, any, Vec::with_capacity(MAX + 64)))
                .collect(),
            len: 0,
        }
    }

    /// Sends what follows as `from`.
    pub(crate) fn from(&mut self, from: SocketAddr) -> &mut Self {
        self.from = from;
        self
    }

    /// What was sent since the last clear.
    pub(crate) fn sent(&self) -> &[(SocketAddr, SocketAddr, Vec<u8>)] {
        &self.slots[..self.len]
    }

    /// What was sent since the last clear, taken out.
    pub(crate) fn drain(&mut self) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        let out = self.sent().to_vec();
        self.len = 0;
        out
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes sent to `to` since the last clear.
    pub(crate) fn to_addr(&self, to: SocketAddr) -> usize {
        self.sent()
            .iter()
            .filter(|(_, t, _)| *t == to)
            .map(|(_, _, d)| d.len())
            .sum()
    }

    /// Datagrams and bytes sent to host `127.0.0.host` (any port) since the last clear.
    pub(crate) fn to_host(&self, host: u8) -> (usize, usize) {
        self.sent()
            .iter()
            .filter(|(_, t, _)| t.ip() == ip(host, 1).ip())
            .fold((0, 0), |(n, b), (_, _, d)| (n + 1, b + d.len()))
    }
}

impl Wire for Outbox {
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        for &(to, suffix) in dests {
            if self.len == self.slots.len() {
                self.slots.push((to, to, Vec::with_capacity(MAX + 64)));
            }
            let from = self.from;
            let slot = &mut self.slots[self.len];
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

/// What an endpoint delivered: `(import's port, payload)`, and what its services did.
#[derive(Default)]
pub(crate) struct Got(pub(crate) Vec<(usize, Vec<u8>)>, pub(crate) Calls);

/// What an endpoint's services handed its sink: the requests of served services to answer,
/// and the ends of calls of imported ones.
#[derive(Default)]
pub(crate) struct Calls {
    /// `(service, key, budget_ms, body)`, oldest first; a test answers and drains them.
    pub(crate) requests: Vec<(usize, u64, u32, Vec<u8>)>,
    /// `(service, key, reply body or status)`, in the order the calls ended.
    pub(crate) ends: Vec<(usize, u64, Result<Vec<u8>, crate::CallStatus>)>,
}

impl Got {
    /// Every payload, decoded as `T`; panics on one that does not decode (corrupt).
    pub(crate) fn values<T: DeserializeOwned>(&self) -> Vec<T> {
        self.values_from(0)
    }

    /// The payloads from index `from` on, decoded as `T`.
    pub(crate) fn values_from<T: DeserializeOwned>(&self, from: usize) -> Vec<T> {
        self.0[from.min(self.0.len())..]
            .iter()
            .map(|(_, p)| match crate::decode_payload(p) {
                Ok(v) => v,
                Err(e) => panic!("a delivered message is corrupt: {e}"),
            })
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Sink for Got {
    fn deliver(&mut self, port: usize, payload: &[u8]) -> Result<(), DropReason> {
        self.0.push((port, payload.to_vec()));
        Ok(())
    }

    fn request(
        &mut self,
        service: usize,
        key: u64,
        budget_ms: u32,
        body: &[u8],
    ) -> Result<(), crate::CallStatus> {
        self.1
            .requests
            .push((service, key, budget_ms, body.to_vec()));
        Ok(())
    }

    fn reply(&mut self, service: usize, key: u64, result: Result<&[u8], crate::CallStatus>) {
        self.1.ends.push((service, key, result.map(<[u8]>::to_vec)));
    }
}

/// Counts deliveries without keeping them (keeping allocates).
pub(crate) struct Counted(pub(crate) u64);

impl Sink for Counted {
    fn deliver(&mut self, _port: usize, _payload: &[u8]) -> Result<(), DropReason> {
        self.0 += 1;
        Ok(())
    }
}

/// One host: an endpoint at an address, and what happened to it.
pub(crate) struct Host {
    pub(crate) addr: SocketAddr,
    pub(crate) ep: Endpoint,
    pub(crate) got: Got,
    /// Every event it gave, in order.
    pub(crate) events: Vec<Event>,
    /// Where each establishment's stream starts: `(import, last_seq)` of the acknowledgement
    /// that established it (`None`: the datagram did not parse, a sealed one say).
    pub(crate) starts: Vec<(usize, Option<u64>)>,
    /// Data groups it joined (told by `Event::JoinGroup`).
    pub(crate) joined: Vec<SocketAddr>,
    /// Its network drops multicast data (the discovery group aside).
    pub(crate) deaf: bool,
    /// A host that is down sends nothing, receives nothing and its timers do not run.
    pub(crate) up: bool,
    /// Datagrams it sent to data groups.
    pub(crate) to_groups: u64,
}

impl Host {
    fn new(addr: SocketAddr, ep: Endpoint) -> Host {
        Host {
            addr,
            ep,
            got: Got::default(),
            events: Vec::new(),
            starts: Vec::new(),
            joined: Vec::new(),
            deaf: false,
            up: true,
            to_groups: 0,
        }
    }
}

/// The link's faults, in permille and milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    /// Datagrams lost.
    pub(crate) loss: u64,
    /// Datagrams delivered twice.
    pub(crate) dup: u64,
    /// Each datagram's delay is drawn from `0..=max_delay`, then raised to `min_delay`.
    pub(crate) min_delay: u64,
    pub(crate) max_delay: u64,
    /// From `outage.0` to `outage.1` (ms) the link drops everything sent.
    pub(crate) outage: (u64, u64),
}

/// A datagram on the link.
#[derive(Clone, Debug)]
pub(crate) struct Datagram {
    /// When it arrives (ns).
    pub(crate) due: u64,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) bytes: Vec<u8>,
}

/// Decides on the path whether a datagram goes on (`true`) or is dropped, at `now`.
pub(crate) type PathFilter = Box<dyn FnMut(u64, &Datagram) -> bool>;

/// A rule every answer keeps: called with the host, the datagram it handled and what it sent
/// in answer, `(from, to, datagram)`.
pub(crate) type AnswerCheck =
    Box<dyn FnMut(usize, &Datagram, &[(SocketAddr, SocketAddr, Vec<u8>)])>;

/// The network. See the module docs.
pub(crate) struct World {
    /// The clock (ns).
    pub(crate) now: u64,
    pub(crate) hosts: Vec<Host>,
    flight: Vec<Datagram>,
    pub(crate) faults: Faults,
    /// Loss of data-group datagrams (permille): at the sender (every member loses it) and on
    /// each member's own link.
    pub(crate) group_loss: (u64, u64),
    /// Data messages the members lost that way, counted per member.
    pub(crate) group_lost: u64,
    /// The group every host hears (discovery's).
    pub(crate) discovery_group: Option<SocketAddr>,
    /// Datagrams to an address where no host lives (or a host that is down).
    pub(crate) nowhere: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Every datagram delivered to this address, as an eavesdropper on its path records it.
    pub(crate) capture: Option<SocketAddr>,
    pub(crate) captured: Vec<(SocketAddr, Vec<u8>)>,
    /// An on-path filter, asked about each datagram as it arrives.
    pub(crate) path: Option<PathFilter>,
    /// Checks what each host sends in answer to each datagram that arrives.
    pub(crate) check: Option<AnswerCheck>,
    rng: fastrand::Rng,
    out: Outbox,
}

impl World {
    /// An empty network whose faults are drawn from `seed`.
    pub(crate) fn new(seed: u64) -> World {
        World {
            now: 0,
            hosts: Vec::new(),
            flight: Vec::new(),
            faults: Faults::default(),
            group_loss: (0, 0),
            group_lost: 0,
            discovery_group: None,
            nowhere: Vec::new(),
            capture: None,
            captured: Vec::new(),
            path: None,
            check: None,
            rng: fastrand::Rng::with_seed(seed),
            out: Outbox::new(),
        }
    }

    /// Adds a host at `addr`; returns its index.
    pub(crate) fn add(&mut self, addr: SocketAddr, ep: Endpoint) -> usize {
        self.hosts.push(Host::new(addr, ep));
        self.hosts.len() - 1
    }

    /// Host `i` restarts as `ep` at the same address (and on the same network): what it got,
    /// its events and its groups are forgotten.
    pub(crate) fn restart(&mut self, i: usize, ep: Endpoint) {
        let old = &self.hosts[i];
        let deaf = old.deaf;
        self.hosts[i] = Host {
            deaf,
            ..Host::new(old.addr, ep)
        };
    }

    /// Host `i`'s endpoint.
    pub(crate) fn ep(&mut self, i: usize) -> &mut Endpoint {
        &mut self.hosts[i].ep
    }

    /// True with probability `permille / 1000`.
    fn chance(&mut self, permille: u64) -> bool {
        permille > 0 && self.rng.u64(..1000) < permille
    }

    /// The world's generator (what the faults draw from).
    pub(crate) fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.rng
    }

    /// Puts what host `from` sent (in `self.out`) on the link, through the faults.
    fn transmit(&mut self, from: usize) {
        let sent = self.out.drain();
        let now_ms = self.now / MS;
        for (_, dst, bytes) in sent {
            if dst.ip().is_multicast() && Some(dst) != self.discovery_group {
                self.hosts[from].to_groups += 1;
            }
            let f = self.faults;
            if (f.outage.0..f.outage.1).contains(&now_ms) || self.chance(f.loss) {
                continue;
            }
            let copies = if self.chance(f.dup) { 2 } else { 1 };
            for _ in 0..copies {
                let delay = self.rng.u64(..=f.max_delay).max(f.min_delay);
                self.flight.push(Datagram {
                    due: self.now + delay * MS,
                    src: self.hosts[from].addr,
                    dst,
                    bytes: bytes.clone(),
                });
            }
        }
    }

    /// The adversary (or a test) puts `bytes` on the link from `src` to `dst`: it arrives
    /// now, past the faults.
    pub(crate) fn inject(&mut self, src: SocketAddr, dst: SocketAddr, bytes: Vec<u8>) {
        self.flight.push(Datagram {
            due: self.now,
            src,
            dst,
            bytes,
        });
    }

    /// Hands `bytes` from `src` straight to host `i`, puts its answers on the link and
    /// returns them: `(from, to, datagram)`.
    pub(crate) fn handle(
        &mut self,
        i: usize,
        bytes: &[u8],
        src: SocketAddr,
    ) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        self.arrive_at(i, bytes, src, false);
        let sent = self.out.sent().to_vec();
        self.transmit(i);
        sent
    }

    /// Runs `f` on host `i`'s endpoint with its wire and the time (a call, an answer);
    /// what it sends goes on the link.
    pub(crate) fn act<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Endpoint, &mut Outbox, u64) -> R,
    ) -> R {
        let now = self.now;
        let addr = self.hosts[i].addr;
        self.out.clear();
        let r = f(&mut self.hosts[i].ep, self.out.from(addr), now);
        self.transmit(i);
        r
    }

    /// Host `i`'s timer; what it sends goes on the link.
    pub(crate) fn timer(&mut self, i: usize) {
        if !self.hosts[i].up {
            return;
        }
        let now = self.now;
        let addr = self.hosts[i].addr;
        let host = &mut self.hosts[i];
        host.ep.on_timer(now, self.out.from(addr), &mut host.got);
        self.events(i, None);
        self.transmit(i);
    }

    /// One message `value` through host `i`'s export `export`; what it sends goes on the
    /// link. Returns the sequence number of its first frame, if it sent any.
    pub(crate) fn publish<T: Serialize + ?Sized>(
        &mut self,
        i: usize,
        export: usize,
        value: &T,
    ) -> Option<u64> {
        let addr = self.hosts[i].addr;
        if let Some(mut batch) = self.hosts[i].ep.export(export, self.out.from(addr)) {
            batch.push(value);
        }
        let first = self.out.sent().iter().find_map(|(_, _, d)| {
            parse_datagram(d, MAX + 64)
                .ok()?
                .find(|f| f.header.kind.is_data())
                .map(|f| f.header.seq)
        });
        self.transmit(i);
        first
    }

    /// Delivers what is due, and what that causes if due too, until nothing due is left.
    pub(crate) fn deliver(&mut self) {
        let mut hops = 0usize;
        loop {
            let now = self.now;
            if !self.flight.iter().any(|d| d.due <= now) {
                return;
            }
            let (due, later): (Vec<Datagram>, Vec<Datagram>) = std::mem::take(&mut self.flight)
                .into_iter()
                .partition(|d| d.due <= now);
            self.flight = later;
            for d in due {
                hops += 1;
                assert!(hops < 1_000_000, "a datagram storm");
                self.arrive(d);
            }
        }
    }

    /// One datagram arrives: to its host, every host (the discovery group) or a data group's
    /// members.
    fn arrive(&mut self, d: Datagram) {
        if let Some(path) = self.path.as_mut() {
            if !path(self.now, &d) {
                return;
            }
        }
        if self.capture == Some(d.dst) {
            self.captured.push((d.src, d.bytes.clone()));
        }
        let data_group = d.dst.ip().is_multicast() && Some(d.dst) != self.discovery_group;
        let mut targets: Vec<usize> = (0..self.hosts.len())
            .filter(|&i| {
                let h = &self.hosts[i];
                h.up && (Some(d.dst) == self.discovery_group
                    || h.addr == d.dst
                    || (data_group && !h.deaf && h.joined.contains(&d.dst)))
            })
            .collect();
        if data_group && self.group_loss != (0, 0) {
            let messages = parse_datagram(&d.bytes, MAX + 64)
                .map(|f| f.filter(|f| f.header.kind.is_data()).count() as u64)
                .unwrap_or(0);
            let (uplink, link) = self.group_loss;
            if self.chance(uplink) {
                self.group_lost += messages * targets.len() as u64;
                targets.clear();
            }
            let before = targets.len() as u64;
            let rng = &mut self.rng;
            targets.retain(|_| rng.u64(..1000) >= link);
            self.group_lost += messages * (before - targets.len() as u64);
        }
        if targets.is_empty() {
            self.nowhere.push((d.src, d.dst, d.bytes));
            return;
        }
        for i in targets {
            self.arrive_at(i, &d.bytes, d.src, data_group);
            if let Some(check) = self.check.as_mut() {
                check(i, &d, self.out.sent());
            }
            self.transmit(i);
        }
    }

    /// Host `i` handles `bytes` from `src` (its answers left in `self.out`).
    fn arrive_at(&mut self, i: usize, bytes: &[u8], src: SocketAddr, data_group: bool) {
        let now = self.now;
        let addr = self.hosts[i].addr;
        let host = &mut self.hosts[i];
        self.out.clear();
        if data_group {
            host.ep
                .handle_multicast(bytes, src, now, self.out.from(addr), &mut host.got);
        } else {
            host.ep
                .handle(bytes, src, now, self.out.from(addr), &mut host.got);
        }
        self.events(i, Some(bytes));
    }

    /// Takes host `i`'s events: joins the groups it is told of, notes where each
    /// establishment starts (from the acknowledgement in `datagram`, the one just handled).
    fn events(&mut self, i: usize, datagram: Option<&[u8]>) {
        let host = &mut self.hosts[i];
        while let Some(event) = host.ep.poll_event() {
            match event {
                Event::JoinGroup { group, .. } if !host.joined.contains(&group) => {
                    host.joined.push(group);
                }
                Event::Established { import, .. } => {
                    let acked = datagram.and_then(|d| {
                        parse_datagram(d, MAX + 64).ok()?.find_map(|f| {
                            if f.header.kind != Kind::SubscribeAck {
                                return None;
                            }
                            match Control::from_frame(&f) {
                                Ok(Control::SubscribeAck { last_seq, .. }) => Some(last_seq),
                                _ => None,
                            }
                        })
                    });
                    host.starts.push((import, acked));
                }
                _ => {}
            }
            host.events.push(event);
        }
    }

    /// Every live host's timer, then what is due.
    pub(crate) fn tick(&mut self) {
        for i in 0..self.hosts.len() {
            self.timer(i);
        }
        self.deliver();
    }

    /// One millisecond: what is due arrives, the timers run, what is due arrives.
    pub(crate) fn step(&mut self) {
        self.now += MS;
        self.deliver();
        self.tick();
    }

    /// `ms` steps.
    pub(crate) fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            self.step();
        }
    }
}
