//! Reliable topics: the publisher's bounded history and retransmission budget, and the
//! subscriber's gap detection, NAKs and in-order delivery. Sans-IO like the handshake: every
//! method takes the time and returns (or calls back with) what to send and what happened.
//!
//! The algorithm is NAK-based recovery in the manner of Aeron and PGM (RFC 3208), with the
//! stall Aeron's users complain of ruled out by a deadline:
//!
//! - The publisher keeps the last `history` data frames of each reliable topic, byte for byte,
//!   in storage allocated once ([`History`]). Retransmission copies a frame out of it.
//! - The subscriber delivers in sequence order. A message that arrives early waits in a
//!   reorder buffer of `reorder` slots, allocated once ([`ReliableReceiver`]). A gap (a number
//!   missing below the highest number known, from data or a heartbeat, so a gap at the tail
//!   is found too) is NAKed once it is `nak_delay` old, again at most every `nak_interval`,
//!   as at most `max_nak_ranges` coalesced ranges per round.
//! - A NAK is accepted only from an admitted subscriber: the source address is in the
//!   subscriber table for the topic under the NAK's session id, and the NAK carries a cookie
//!   that proves that address ([`PublisherSession::admit_nak`]). An unproven source gets
//!   nothing back at all. An admitted one gets at most `retransmit_per_nak` messages per NAK
//!   frame and at most its host's byte budget (a token bucket per IP address, shared by all
//!   its ports and topics and by late-join bursts: [`HostBudgets`]), so a NAK flood cannot
//!   turn the publisher into a flood; the part of a range that left history
//!   is answered by one `Unavailable`, shorter than the NAK.
//! - A gap is given up, and reported as unrecovered with its range, when the publisher says
//!   it left history (`Unavailable` echoing one of our NAK nonces), when it is older than
//!   `gap_deadline`, or when a message arrives that is `reorder` or more numbers ahead (the
//!   buffer must move). Delivery then goes on: the stream never stalls longer than the
//!   deadline.
//!
//! [`PublisherSession::admit_nak`]: super::publisher::PublisherSession::admit_nak

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::{DropReason, JumpGuard, Kind, Nak, Unavailable};

/// The knobs of reliable topics, shared by both sides (each uses its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReliableConfig {
    /// Publisher: data frames kept per reliable topic.
    pub history: usize,
    /// Both: the largest frame kept (publisher, whole data frame) or payload buffered
    /// (subscriber); the maximum datagram size.
    pub max_frame: usize,
    /// Subscriber: the reorder buffer, in messages.
    pub reorder: usize,
    /// Subscriber: how old a gap must be before it is NAKed (lets reordering settle).
    pub nak_delay: Duration,
    /// Subscriber: the least time between two NAK rounds of one topic.
    pub nak_interval: Duration,
    /// Subscriber: how long a gap may hold up delivery before it is reported unrecovered.
    pub gap_deadline: Duration,
    /// Subscriber: ranges per NAK round at most.
    pub max_nak_ranges: usize,
    /// Publisher: messages retransmitted per NAK frame at most.
    pub retransmit_per_nak: usize,
    /// Publisher: retransmitted bytes per second per subscriber host (IP address, all its
    /// ports and topics together), and the burst, at most: late-join bursts included.
    pub retransmit_rate: (u64, u64),
    /// Publisher: the least time between two late-join bursts of one topic to one host.
    pub join_period: Duration,
}

impl Default for ReliableConfig {
    fn default() -> Self {
        ReliableConfig {
            history: 1024,
            max_frame: crate::DEFAULT_MAX_DATAGRAM,
            reorder: 1024,
            nak_delay: Duration::from_millis(1),
            nak_interval: Duration::from_millis(5),
            gap_deadline: Duration::from_millis(500),
            max_nak_ranges: 16,
            retransmit_per_nak: 64,
            retransmit_rate: (64 << 20, 4 << 20),
            join_period: Duration::from_secs(1),
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Fixed-size slots of bytes indexed by sequence number modulo their count. Allocated once.
#[derive(Debug)]
struct Slots {
    bytes: Box<[u8]>,
    lens: Box<[usize]>,
    /// What each slot holds: a whole message or a fragment (receiver side).
    kinds: Box<[Kind]>,
    /// The sequence number in each slot; 0 for none (sequence numbers start at 1).
    seqs: Box<[u64]>,
    size: usize,
}

impl Slots {
    fn new(count: usize, size: usize) -> Self {
        let count = count.max(1);
        Slots {
            bytes: vec![0; count.saturating_mul(size)].into_boxed_slice(),
            lens: vec![0; count].into_boxed_slice(),
            kinds: vec![Kind::Data; count].into_boxed_slice(),
            seqs: vec![0; count].into_boxed_slice(),
            size,
        }
    }

    fn count(&self) -> u64 {
        self.seqs.len() as u64
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.count()) as usize
    }

    /// Stores `data` under `seq`, evicting what the slot held; `false` if it is too large.
    fn put(&mut self, seq: u64, kind: Kind, data: &[u8]) -> bool {
        let i = self.index(seq);
        let at = i * self.size;
        match self.bytes.get_mut(at..at + data.len()) {
            Some(dst) if data.len() <= self.size => {
                dst.copy_from_slice(data);
                self.lens[i] = data.len();
                self.kinds[i] = kind;
                self.seqs[i] = seq;
                true
            }
            _ => false,
        }
    }

    fn has(&self, seq: u64) -> bool {
        seq != 0 && self.seqs[self.index(seq)] == seq
    }

    fn get(&self, seq: u64) -> Option<&[u8]> {
        self.get_kind(seq).map(|(_, b)| b)
    }

    fn get_kind(&self, seq: u64) -> Option<(Kind, &[u8])> {
        let i = self.index(seq);
        if seq == 0 || self.seqs[i] != seq {
            return None;
        }
        let at = i * self.size;
        Some((self.kinds[i], self.bytes.get(at..at + self.lens[i])?))
    }

    fn clear(&mut self, seq: u64) {
        let i = self.index(seq);
        if self.seqs[i] == seq {
            self.seqs[i] = 0;
        }
    }
}

/// The publisher's history of one reliable topic: the last `capacity` data frames.
#[derive(Debug)]
pub struct History {
    slots: Slots,
    /// The newest sequence number recorded (0: none).
    newest: u64,
}

impl History {
    /// Room for `capacity` frames of up to `max_frame` bytes, allocated now.
    pub fn new(capacity: usize, max_frame: usize) -> Self {
        History {
            slots: Slots::new(capacity, max_frame),
            newest: 0,
        }
    }

    /// Keeps `frame` (a whole encoded data frame) as message `seq`, evicting the oldest.
    /// `false` (nothing kept) for a frame larger than the slots.
    pub fn record(&mut self, seq: u64, frame: &[u8]) -> bool {
        if seq == 0 || !self.slots.put(seq, Kind::Data, frame) {
            return false;
        }
        self.newest = self.newest.max(seq);
        true
    }

    /// The frame of message `seq`, if still kept.
    pub fn get(&self, seq: u64) -> Option<&[u8]> {
        self.slots.get(seq)
    }

    /// The newest sequence number recorded (0: none).
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// The oldest sequence number that may still be kept.
    pub fn oldest(&self) -> u64 {
        self.newest.saturating_sub(self.slots.count() - 1).max(1)
    }
}

/// A token bucket of retransmitted bytes for one host.
#[derive(Clone, Copy, Debug)]
struct HostBudget {
    host: IpAddr,
    tokens: u64,
    last_ns: u64,
}

/// The retransmission budgets of a publisher, one token bucket per subscriber *host* (IP
/// address, whatever its ports and topics): every retransmission and late-join burst of every
/// reliable export of the bridge comes out of the bucket of the host it goes to, so a host
/// cannot multiply its budget by ports or topics, and a new port of a known host starts with
/// what the host has left. A host not seen before starts with a full burst; when all slots
/// are taken, the host heard from longest ago gives up its slot. Allocated once.
#[derive(Debug)]
pub struct HostBudgets {
    /// Invariant: `entries.len() <= entries.capacity()`, no two entries share a host.
    entries: Vec<HostBudget>,
    /// Bytes per second, and the burst.
    rate: (u64, u64),
}

impl HostBudgets {
    /// Budgets for up to `hosts` hosts at `rate` (bytes per second, burst), allocated now.
    pub fn new(hosts: usize, rate: (u64, u64)) -> Self {
        HostBudgets {
            entries: Vec::with_capacity(hosts.max(1)),
            rate,
        }
    }

    /// The bytes `host` may be sent now.
    fn refill(&mut self, host: IpAddr, now_ns: u64) -> &mut HostBudget {
        let (per_second, burst) = self.rate;
        let host = host.to_canonical();
        let i = match self.entries.iter().position(|b| b.host == host) {
            Some(i) => i,
            None => {
                let fresh = HostBudget {
                    host,
                    tokens: burst,
                    last_ns: now_ns,
                };
                // The host heard from longest ago makes room.
                push_evicting(&mut self.entries, fresh, |b| b.last_ns)
            }
        };
        let len = self.entries.len();
        // `i < len` by construction; the fallback keeps this total.
        let b = &mut self.entries[i.min(len - 1)];
        let elapsed = now_ns.saturating_sub(b.last_ns);
        let earned = (u128::from(elapsed) * u128::from(per_second) / 1_000_000_000) as u64;
        b.tokens = b.tokens.saturating_add(earned).min(burst);
        b.last_ns = b.last_ns.max(now_ns);
        b
    }

    /// The bytes `host` has left at `now_ns`.
    pub fn available(&mut self, host: IpAddr, now_ns: u64) -> u64 {
        self.refill(host, now_ns).tokens
    }

    /// Takes `bytes` from `host`'s budget if it has them; `false` (and nothing taken) if not.
    pub(crate) fn take(&mut self, host: IpAddr, bytes: u64, now_ns: u64) -> bool {
        let b = self.refill(host, now_ns);
        if bytes <= b.tokens {
            b.tokens -= bytes;
            true
        } else {
            false
        }
    }
}

/// Pushes `item` onto `v` without growing it past its capacity: when full, the entry of
/// lowest `rank` makes room first. Returns where `item` is. Allocates nothing once `v` has its
/// capacity.
fn push_evicting<T>(v: &mut Vec<T>, item: T, rank: impl Fn(&T) -> u64) -> usize {
    if v.len() == v.capacity() {
        if let Some(i) = v
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| rank(e))
            .map(|(i, _)| i)
        {
            v.swap_remove(i);
        }
    }
    v.push(item);
    v.len() - 1
}

/// What one NAK frame earned: the messages to retransmit from history (in order) and, for the
/// part of the range that left history, an `Unavailable` answer.
#[derive(Debug)]
pub struct Retransmit {
    seqs: Vec<u64>,
    unavailable: Option<Unavailable>,
}

impl Retransmit {
    /// Room for `per_nak` messages, allocated now.
    pub fn with_capacity(per_nak: usize) -> Self {
        Retransmit {
            seqs: Vec::with_capacity(per_nak.max(1)),
            unavailable: None,
        }
    }

    /// The messages to retransmit.
    pub fn seqs(&self) -> &[u64] {
        &self.seqs
    }

    /// The answer for the part that left history.
    pub fn unavailable(&self) -> Option<&Unavailable> {
        self.unavailable.as_ref()
    }

    /// Forgets the planned messages (sent another way: to a multicast group), keeping the
    /// `Unavailable`.
    pub fn clear_seqs(&mut self) {
        self.seqs.clear();
    }
}

/// The counters of a reliable export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReliableSendCounts {
    /// NAK frames accepted (from admitted subscribers).
    pub naks: u64,
    /// Messages retransmitted.
    pub retransmitted: u64,
    /// Bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Messages asked for that had left history (answered `Unavailable`).
    pub unavailable: u64,
    /// Messages asked for but not retransmitted now: over the per-NAK cap or the subscriber's
    /// byte budget (it asks again).
    pub throttled: u64,
}

/// The publisher side of one reliable topic: history and per-subscriber retransmit budgets.
#[derive(Debug)]
pub struct ReliableExport {
    topic_id: u64,
    fingerprint: u64,
    session: u64,
    history: History,
    /// Per subscriber address, the sequence numbers it asked for after they had left
    /// history. Invariant: at most its capacity, allocated once.
    missed: Vec<(SocketAddr, u64)>,
    /// Per host, when it was last sent a late-join burst of this topic. Invariant: at most
    /// its capacity, allocated once.
    joined: Vec<(IpAddr, u64)>,
    per_nak: usize,
    /// Messages sent to a subscriber when it is admitted (late joiners start with state).
    late_join: usize,
    /// The least time between two late-join bursts of this topic to one host.
    join_period_ns: u64,
    /// Bytes a datagram carries beyond its frames (the subscription token, or the MAC
    /// trailer with a key), charged with every frame retransmitted, so that what leaves the
    /// socket towards a host, not only its frames, stays within the host's budget.
    overhead: u64,
    counts: ReliableSendCounts,
}

impl ReliableExport {
    /// Topic `topic_id` of the publisher session `session`, with budgets for up to
    /// `subscribers` addresses; everything allocated now.
    pub fn new(
        topic_id: u64,
        fingerprint: u64,
        session: u64,
        subscribers: usize,
        config: &ReliableConfig,
    ) -> Self {
        ReliableExport {
            topic_id,
            fingerprint,
            session,
            history: History::new(config.history, config.max_frame),
            missed: Vec::with_capacity(subscribers.max(1)),
            joined: Vec::with_capacity(subscribers.max(1)),
            per_nak: config.retransmit_per_nak.max(1),
            late_join: 0,
            join_period_ns: ns(config.join_period),
            overhead: 0,
            counts: ReliableSendCounts::default(),
        }
    }

    /// Charges `bytes` more per frame retransmitted (and per `Unavailable`): what each
    /// datagram carries beyond its frames (a subscription token, a MAC trailer). A datagram
    /// holds one frame or more, so the budget bounds the bytes sent, trailers included.
    pub fn with_datagram_overhead(mut self, bytes: usize) -> Self {
        self.overhead = bytes as u64;
        self
    }

    /// Sends the last `k` messages (at most the history) to each newly admitted subscriber;
    /// 0 (the default): none.
    pub fn with_late_join(mut self, k: usize) -> Self {
        self.late_join = k.min(self.history.slots.seqs.len());
        self
    }

    /// How many messages a late joiner is sent.
    pub fn late_join(&self) -> usize {
        self.late_join
    }

    /// The `last_seq` to acknowledge a subscription with: the newest sequence number, less the
    /// messages a late joiner is sent (so that it expects them, NAKs them if lost, and a
    /// best-effort import counts them like any other message).
    pub fn ack_seq(&self) -> u64 {
        let newest = self.history.newest();
        let kept = newest
            .saturating_sub(self.history.oldest())
            .saturating_add(1);
        let k = (self.late_join as u64).min(kept).min(newest);
        newest - k
    }

    /// Plans what a newly admitted subscriber `src` is sent: the messages after
    /// [`ack_seq`](Self::ack_seq), within the per-NAK cap and the byte budget of its host
    /// (what does not fit, it NAKs). A host is sent at most one such burst of the topic per
    /// join period (`ReliableConfig::join_period`), whatever its ports and sessions: a
    /// subscriber that joins again sooner NAKs what it lacks, from the same budget.
    pub fn on_join(
        &mut self,
        src: SocketAddr,
        now_ns: u64,
        budgets: &mut HostBudgets,
        out: &mut Retransmit,
    ) {
        out.seqs.clear();
        out.unavailable = None;
        let (first, last) = (self.ack_seq() + 1, self.history.newest());
        if self.late_join == 0 || first > last || !self.join_due(src.ip(), now_ns) {
            return;
        }
        self.plan(first, last, src, now_ns, budgets, out);
    }

    /// Whether `host` may be sent a late-join burst at `now_ns` (and if so, it is recorded).
    fn join_due(&mut self, host: IpAddr, now_ns: u64) -> bool {
        let host = host.to_canonical();
        let period = self.join_period_ns;
        match self.joined.iter_mut().find(|(h, _)| *h == host) {
            Some((_, last)) if now_ns.saturating_sub(*last) < period => false,
            Some((_, last)) => {
                *last = now_ns;
                true
            }
            None => {
                // The host that joined longest ago makes room.
                push_evicting(&mut self.joined, (host, now_ns), |&(_, t)| t);
                true
            }
        }
    }

    /// The topic id.
    pub fn topic_id(&self) -> u64 {
        self.topic_id
    }

    /// The history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Keeps a sent data frame (see [`History::record`]).
    pub fn record(&mut self, seq: u64, frame: &[u8]) -> bool {
        self.history.record(seq, frame)
    }

    /// The counters.
    pub fn counts(&self) -> &ReliableSendCounts {
        &self.counts
    }

    /// Per subscriber address, the sequence numbers it asked for after they had left history
    /// (answered `Unavailable`): what a slow or lossy subscriber missed, counted for it alone.
    /// Only addresses that missed something; an address not heard from while the table of
    /// budgets was full may have been replaced (its count starts again).
    pub fn missed(&self) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
        self.missed.iter().copied()
    }

    /// Counts `gone` more numbers `addr` asked for after they had left history.
    fn add_missed(&mut self, addr: SocketAddr, gone: u64) {
        if let Some((_, n)) = self.missed.iter_mut().find(|(a, _)| *a == addr) {
            *n = n.saturating_add(gone);
            return;
        }
        // The smallest count makes room: the subscribers that miss the most stay named.
        push_evicting(&mut self.missed, (addr, gone), |&(_, n)| n);
    }

    /// Plans the answer to `nak` from `src`, which [`admit_nak`] accepted: into `out`, the
    /// messages to retransmit (at most the per-NAK cap and the budget of `src`'s host in
    /// `budgets`) and the `Unavailable` for what left history.
    ///
    /// [`admit_nak`]: super::publisher::PublisherSession::admit_nak
    pub fn on_nak(
        &mut self,
        nak: &Nak,
        src: SocketAddr,
        now_ns: u64,
        budgets: &mut HostBudgets,
        out: &mut Retransmit,
    ) {
        out.seqs.clear();
        out.unavailable = None;
        self.counts.naks = self.counts.naks.saturating_add(1);
        let newest = self.history.newest();
        // Numbers never sent are not answered at all.
        let last = nak.last.min(newest);
        if nak.first > last {
            return;
        }
        let oldest = self.history.oldest();
        if nak.first < oldest {
            let gone_last = last.min(oldest - 1);
            // The answer comes out of the host's budget too (none left: the subscriber's gap
            // deadline gives the range up instead).
            let cost = (crate::HEADER_LEN + crate::UNAVAILABLE_PAYLOAD_LEN) as u64 + self.overhead;
            let answered = budgets.take(src.ip(), cost, now_ns);
            out.unavailable = answered.then_some(Unavailable {
                topic_id: self.topic_id,
                fingerprint: self.fingerprint,
                session: self.session,
                nonce: nak.nonce,
                first: nak.first,
                last: gone_last,
            });
            let gone = gone_last - nak.first + 1;
            self.counts.unavailable = self.counts.unavailable.saturating_add(gone);
            self.add_missed(src, gone);
        }
        let first = nak.first.max(oldest);
        if first > last {
            return;
        }
        self.plan(first, last, src, now_ns, budgets, out);
    }

    /// Plans the retransmission of `first..=last` (all in history) to `src`, each frame
    /// taken from the budget of its host.
    fn plan(
        &mut self,
        first: u64,
        last: u64,
        src: SocketAddr,
        now_ns: u64,
        budgets: &mut HostBudgets,
        out: &mut Retransmit,
    ) {
        let per_nak = self.per_nak;
        let host = src.ip();
        let mut seq = first;
        while seq <= last && out.seqs.len() < per_nak {
            match self.history.get(seq) {
                Some(frame) if budgets.take(host, frame.len() as u64 + self.overhead, now_ns) => {
                    out.seqs.push(seq);
                    self.counts.retransmitted_bytes = self
                        .counts
                        .retransmitted_bytes
                        .saturating_add(frame.len() as u64);
                }
                Some(_) => break,
                // A frame too large to keep: never retransmittable.
                None => {}
            }
            seq += 1;
        }
        self.counts.retransmitted = self
            .counts
            .retransmitted
            .saturating_add(out.seqs.len() as u64);
        if seq <= last {
            self.counts.throttled = self.counts.throttled.saturating_add(last - seq + 1);
        }
    }

    /// The history frame of message `seq` (to copy into a datagram after [`on_nak`]).
    ///
    /// [`on_nak`]: ReliableExport::on_nak
    pub fn frame(&self, seq: u64) -> Option<&[u8]> {
        self.history.get(seq)
    }
}

/// What a reliable subscriber hands on: messages in order, and the ranges given up.
pub trait Delivery {
    /// Frame `seq` of `kind` ([`Kind::Data`]: a whole message, [`Kind::Fragment`]: a piece of
    /// one) with its payload, in sequence order.
    fn deliver(&mut self, seq: u64, kind: Kind, payload: &[u8]);
    /// Messages `first..=last` will never be delivered.
    fn unrecovered(&mut self, first: u64, last: u64);
}

/// The counters of a reliable import.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReliableRecvCounts {
    /// Messages delivered (in order).
    pub delivered: u64,
    /// Messages that arrived out of order and waited in the reorder buffer.
    pub buffered: u64,
    /// Copies of messages already delivered or buffered.
    pub duplicates: u64,
    /// NAK frames sent.
    pub naks_sent: u64,
    /// Messages given up, and in how many ranges.
    pub unrecovered: u64,
    /// Ranges given up.
    pub unrecovered_ranges: u64,
    /// Messages whose payload was larger than a reorder slot (given up if not in order).
    pub oversized: u64,
    /// Data frames and heartbeats not believed: too far ahead, unconfirmed ([`JumpGuard`]).
    pub unconfirmed: u64,
}

/// Sequence numbers above this are never genuine (a publisher sending a million messages a
/// second takes 290,000 years to reach it): frames that claim one are ignored, so no
/// arithmetic on them can overflow.
pub const MAX_SEQ: u64 = u64::MAX / 2;

/// How many NAK nonces are remembered for `Unavailable` answers: two full NAK rounds (16
/// ranges each by default), so the answer to any range of the last round is recognised.
const NONCES: usize = 32;

/// The subscriber side of one reliable topic. See the module docs.
#[derive(Debug)]
pub struct ReliableReceiver {
    /// The next sequence number to deliver; 0 before the first message or acknowledgement.
    /// Invariant (after every public method): `next` is not in the buffer.
    next: u64,
    /// The highest sequence number known to exist (data or heartbeat).
    highest: u64,
    buffer: Slots,
    gap_since: Option<u64>,
    /// The value of `next` when `gap_since` was taken.
    gap_at: u64,
    last_nak: Option<u64>,
    nonces: [u64; NONCES],
    nonce_at: usize,
    nak_delay: u64,
    nak_interval: u64,
    deadline: u64,
    max_ranges: usize,
    /// Holds a number far ahead of `highest` until a second frame confirms it.
    guard: JumpGuard,
    counts: ReliableRecvCounts,
}

impl ReliableReceiver {
    /// A receiver with the reorder buffer of `config`, allocated now.
    pub fn new(config: &ReliableConfig) -> Self {
        ReliableReceiver {
            next: 0,
            highest: 0,
            buffer: Slots::new(config.reorder, config.max_frame),
            gap_since: None,
            gap_at: 0,
            last_nak: None,
            nonces: [0; NONCES],
            nonce_at: 0,
            nak_delay: ns(config.nak_delay),
            nak_interval: ns(config.nak_interval).max(1),
            deadline: ns(config.gap_deadline),
            max_ranges: config.max_nak_ranges.max(1),
            guard: JumpGuard::default(),
            counts: ReliableRecvCounts::default(),
        }
    }

    /// The counters.
    pub fn counts(&self) -> &ReliableRecvCounts {
        &self.counts
    }

    /// The next sequence number to deliver (0: not started).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Forgets the stream (a new publisher session): the next acknowledgement or message
    /// starts it again.
    pub fn reset(&mut self) {
        for s in self.buffer.seqs.iter_mut() {
            *s = 0;
        }
        self.next = 0;
        self.highest = 0;
        self.gap_since = None;
        self.last_nak = None;
        self.guard.reset();
    }

    /// The publisher acknowledged the subscription with `last_seq` sent so far: delivery starts
    /// after it (a late joiner does not NAK what was sent before it joined).
    pub fn start(&mut self, last_seq: u64) {
        if self.next == 0 && last_seq < MAX_SEQ {
            self.next = last_seq.saturating_add(1);
            self.highest = last_seq;
        }
    }

    fn window(&self) -> u64 {
        self.buffer.count()
    }

    /// Whether a gap holds up delivery, and keeps its age: the age of the gap at the head,
    /// so a stream that always has some gap somewhere (steady loss) gives up none of them
    /// while it makes progress.
    fn update_gap(&mut self, now_ns: u64) {
        if self.next != 0 && self.highest >= self.next {
            if self.gap_at != self.next {
                self.gap_at = self.next;
                self.gap_since = Some(now_ns);
            }
            self.gap_since.get_or_insert(now_ns);
        } else {
            self.gap_since = None;
            self.last_nak = None;
        }
    }

    fn give_up(counts: &mut ReliableRecvCounts, first: u64, last: u64, sink: &mut impl Delivery) {
        counts.unrecovered = counts
            .unrecovered
            .saturating_add((last - first).saturating_add(1));
        counts.unrecovered_ranges = counts.unrecovered_ranges.saturating_add(1);
        sink.unrecovered(first, last);
    }

    /// Delivers the buffered messages that follow `next` without a gap.
    fn drain(&mut self, sink: &mut impl Delivery) {
        while let Some((kind, payload)) = self.buffer.get_kind(self.next) {
            sink.deliver(self.next, kind, payload);
            self.counts.delivered = self.counts.delivered.saturating_add(1);
            self.buffer.clear(self.next);
            self.next += 1;
        }
    }

    /// Moves `next` to `target`: buffered messages below it are delivered, missing ones given
    /// up as ranges. Bounded by the buffer's size whatever `target` is.
    fn advance_to(&mut self, target: u64, sink: &mut impl Delivery) {
        let mut missing: Option<u64> = None;
        let end = target.min(self.next.saturating_add(self.window()));
        while self.next < end {
            let seq = self.next;
            if let Some((kind, payload)) = self.buffer.get_kind(seq) {
                if let Some(first) = missing.take() {
                    Self::give_up(&mut self.counts, first, seq - 1, sink);
                }
                sink.deliver(seq, kind, payload);
                self.counts.delivered = self.counts.delivered.saturating_add(1);
                self.buffer.clear(seq);
            } else {
                missing.get_or_insert(seq);
            }
            self.next += 1;
        }
        if target > self.next {
            missing.get_or_insert(self.next);
            self.next = target;
        }
        if let Some(first) = missing {
            Self::give_up(&mut self.counts, first, self.next - 1, sink);
        }
        self.drain(sink);
    }

    /// Frame `seq` of `kind` (data or fragment) with `payload` arrived (its header already
    /// checked by the import's session machine). Delivers what is now in order.
    pub fn on_data(
        &mut self,
        seq: u64,
        kind: Kind,
        payload: &[u8],
        now_ns: u64,
        sink: &mut impl Delivery,
    ) {
        if seq == 0 || seq > MAX_SEQ {
            return;
        }
        if self.next == 0 {
            self.next = seq;
            self.highest = seq.saturating_sub(1);
        }
        if seq < self.next || self.buffer.has(seq) {
            self.counts.duplicates = self.counts.duplicates.saturating_add(1);
            return;
        }
        if !self.guard.believe(self.highest.max(self.next - 1), seq) {
            self.counts.unconfirmed = self.counts.unconfirmed.saturating_add(1);
            return;
        }
        let window = self.window();
        if seq >= self.next.saturating_add(window) {
            // The buffer must move: what is missing below the new window is given up.
            self.advance_to(seq - window + 1, sink);
        }
        self.highest = self.highest.max(seq);
        if seq == self.next {
            sink.deliver(seq, kind, payload);
            self.counts.delivered = self.counts.delivered.saturating_add(1);
            self.next += 1;
            self.drain(sink);
        } else if self.buffer.put(seq, kind, payload) {
            self.counts.buffered = self.counts.buffered.saturating_add(1);
        } else {
            self.counts.oversized = self.counts.oversized.saturating_add(1);
        }
        self.update_gap(now_ns);
    }

    /// A heartbeat says `last_seq` was sent: a gap at the tail is now known.
    pub fn on_heartbeat(&mut self, last_seq: u64, now_ns: u64) {
        if last_seq > MAX_SEQ {
            return;
        }
        if self.next == 0 {
            self.start(last_seq);
            return;
        }
        if !self
            .guard
            .believe(self.highest.max(self.next - 1), last_seq)
        {
            self.counts.unconfirmed = self.counts.unconfirmed.saturating_add(1);
            return;
        }
        self.highest = self.highest.max(last_seq);
        self.update_gap(now_ns);
    }

    /// The publisher says a range left its history. Accepted only if it echoes one of our
    /// recent NAK nonces; everything up to its end is then given up (history drops the oldest
    /// first, so nothing older can come back either).
    ///
    /// # Errors
    /// [`DropReason::BadNonce`] when it answers no NAK of ours.
    pub fn on_unavailable(
        &mut self,
        u: &Unavailable,
        now_ns: u64,
        sink: &mut impl Delivery,
    ) -> Result<(), DropReason> {
        if u.nonce == 0 || !self.nonces.contains(&u.nonce) {
            return Err(DropReason::BadNonce);
        }
        if self.next != 0 && u.last >= self.next && u.last <= self.highest && u.last < MAX_SEQ {
            self.advance_to(u.last + 1, sink);
            self.gap_since = None;
            self.update_gap(now_ns);
        }
        Ok(())
    }

    /// Timers: gives up the gap at the head once past its deadline, then, when due, asks for
    /// the missing ranges: `nak(first, last, nonce)` once per range, each with a fresh nonce
    /// from `nonce()`. Returns how many NAK frames were asked for.
    pub fn poll(
        &mut self,
        now_ns: u64,
        sink: &mut impl Delivery,
        mut nonce: impl FnMut() -> u64,
        mut nak: impl FnMut(u64, u64, u64),
    ) -> usize {
        let Some(since) = self.gap_since else {
            return 0;
        };
        if now_ns.saturating_sub(since) >= self.deadline {
            // Give up the missing run at the head, up to the first message present.
            let end = self
                .highest
                .min(self.next.saturating_add(self.window() - 1));
            let mut to = self.next;
            while to <= end && !self.buffer.has(to) {
                to += 1;
            }
            self.advance_to(to, sink);
            self.gap_since = None;
            self.update_gap(now_ns);
            return 0;
        }
        if now_ns.saturating_sub(since) < self.nak_delay
            || self
                .last_nak
                .is_some_and(|t| now_ns.saturating_sub(t) < self.nak_interval)
        {
            return 0;
        }
        let end = self
            .highest
            .min(self.next.saturating_add(self.window() - 1));
        let mut sent = 0;
        let mut seq = self.next;
        while seq <= end && sent < self.max_ranges {
            if self.buffer.has(seq) {
                seq += 1;
                continue;
            }
            let first = seq;
            while seq <= end && !self.buffer.has(seq) {
                seq += 1;
            }
            let n = nonce().max(1);
            self.nonces[self.nonce_at % NONCES] = n;
            self.nonce_at = self.nonce_at.wrapping_add(1);
            nak(first, seq - 1, n);
            sent += 1;
        }
        self.last_nak = Some(now_ns);
        self.counts.naks_sent = self.counts.naks_sent.saturating_add(sent as u64);
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[derive(Default)]
    struct Sink {
        got: Vec<u64>,
        lost: Vec<(u64, u64)>,
    }

    impl Delivery for Sink {
        fn deliver(&mut self, seq: u64, kind: Kind, payload: &[u8]) {
            assert_eq!(kind, Kind::Data);
            assert_eq!(payload, seq.to_le_bytes(), "payload of {seq}");
            self.got.push(seq);
        }
        fn unrecovered(&mut self, first: u64, last: u64) {
            self.lost.push((first, last));
        }
    }

    fn config(reorder: usize) -> ReliableConfig {
        ReliableConfig {
            reorder,
            history: 8,
            max_frame: 64,
            ..ReliableConfig::default()
        }
    }

    fn naks(r: &mut ReliableReceiver, now: u64, sink: &mut Sink) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut n = 0;
        r.poll(
            now,
            sink,
            || {
                n += 1;
                n
            },
            |a, b, _| out.push((a, b)),
        );
        out
    }

    #[test]
    fn in_order_reorder_and_duplicates() {
        let mut r = ReliableReceiver::new(&config(8));
        let mut s = Sink::default();
        r.start(0);
        for seq in [1, 3, 2, 2, 5, 4, 1] {
            r.on_data(seq, Kind::Data, &seq.to_le_bytes(), 0, &mut s);
        }
        assert_eq!(s.got, [1, 2, 3, 4, 5]);
        assert_eq!(r.counts().duplicates, 2);
        assert!(s.lost.is_empty());
        assert!(naks(&mut r, 10 * MS, &mut s).is_empty());
    }

    #[test]
    fn one_frame_far_ahead_is_not_believed() {
        let mut r = ReliableReceiver::new(&config(8));
        let mut s = Sink::default();
        r.start(0);
        r.on_data(1, Kind::Data, &1u64.to_le_bytes(), 0, &mut s);
        // A data frame and a heartbeat 2^40 ahead: neither moves the stream.
        let far = 1u64 << 40;
        r.on_data(far, Kind::Data, &far.to_le_bytes(), 0, &mut s);
        r.on_heartbeat(far + crate::MAX_JUMP + 1, 0);
        for seq in 2..=5u64 {
            r.on_data(seq, Kind::Data, &seq.to_le_bytes(), MS, &mut s);
        }
        assert_eq!(s.got, [1, 2, 3, 4, 5]);
        assert!(s.lost.is_empty());
        assert!(naks(&mut r, 10 * MS, &mut s).is_empty(), "no gap believed");
        assert_eq!(r.counts().unconfirmed, 2);
    }

    #[test]
    fn gaps_are_nakked_coalesced_and_rate_limited() {
        let mut r = ReliableReceiver::new(&config(16));
        let mut s = Sink::default();
        r.start(0);
        for seq in [1, 4, 5, 8] {
            r.on_data(seq, Kind::Data, &seq.to_le_bytes(), 0, &mut s);
        }
        // Too young to NAK (reordering may still fill it).
        assert!(naks(&mut r, 0, &mut s).is_empty());
        assert_eq!(naks(&mut r, MS, &mut s), [(2, 3), (6, 7)]);
        // Not again within the interval.
        assert!(naks(&mut r, 2 * MS, &mut s).is_empty());
        assert_eq!(naks(&mut r, 7 * MS, &mut s), [(2, 3), (6, 7)]);
        // A tail gap, known only from a heartbeat.
        for seq in [2, 3, 6, 7] {
            r.on_data(seq, Kind::Data, &seq.to_le_bytes(), 8 * MS, &mut s);
        }
        assert_eq!(s.got, (1..=8).collect::<Vec<_>>());
        r.on_heartbeat(10, 8 * MS);
        assert_eq!(naks(&mut r, 9 * MS, &mut s), [(9, 10)]);
        assert_eq!(r.counts().naks_sent, 5);
    }

    #[test]
    fn deadline_gives_up_and_delivery_goes_on() {
        let mut r = ReliableReceiver::new(&config(16));
        let mut s = Sink::default();
        r.start(0);
        for seq in [1, 4, 5] {
            r.on_data(seq, Kind::Data, &seq.to_le_bytes(), 0, &mut s);
        }
        naks(&mut r, 499 * MS, &mut s);
        assert_eq!(s.got, [1]);
        naks(&mut r, 500 * MS, &mut s);
        assert_eq!(s.got, [1, 4, 5]);
        assert_eq!(s.lost, [(2, 3)]);
        assert_eq!(r.counts().unrecovered, 2);
        // The late retransmission is a duplicate now, not a second delivery.
        r.on_data(2, Kind::Data, &2u64.to_le_bytes(), 501 * MS, &mut s);
        assert_eq!(s.got, [1, 4, 5]);
    }

    #[test]
    fn far_ahead_moves_the_window_in_bounded_work() {
        let mut r = ReliableReceiver::new(&config(4));
        let mut s = Sink::default();
        r.start(0);
        r.on_data(2, Kind::Data, &2u64.to_le_bytes(), 0, &mut s);
        // One frame that far ahead is not believed; a second one near it confirms the jump.
        let claim = MAX_SEQ - 1;
        r.on_data(claim, Kind::Data, &claim.to_le_bytes(), 0, &mut s);
        assert!(s.got.is_empty());
        r.on_data(MAX_SEQ, Kind::Data, &MAX_SEQ.to_le_bytes(), 0, &mut s);
        assert_eq!(s.got, [2]);
        assert_eq!(s.lost, [(1, 1), (3, MAX_SEQ - 4)]);
        assert_eq!(r.next(), MAX_SEQ - 3);
        // Numbers above the ceiling are ignored: nothing can overflow.
        r.on_data(u64::MAX, Kind::Data, &u64::MAX.to_le_bytes(), 0, &mut s);
        r.on_heartbeat(u64::MAX, 0);
        assert_eq!(s.got, [2]);
        assert_eq!(r.next(), MAX_SEQ - 3);
    }

    #[test]
    fn unavailable_needs_our_nonce() {
        let mut r = ReliableReceiver::new(&config(16));
        let mut s = Sink::default();
        r.start(0);
        r.on_data(5, Kind::Data, &5u64.to_le_bytes(), 0, &mut s);
        let u = |nonce| Unavailable {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            nonce,
            first: 1,
            last: 3,
        };
        assert_eq!(
            r.on_unavailable(&u(1), MS, &mut s),
            Err(DropReason::BadNonce)
        );
        assert!(s.lost.is_empty());
        assert_eq!(naks(&mut r, MS, &mut s), [(1, 4)]);
        assert_eq!(r.on_unavailable(&u(1), MS, &mut s), Ok(()));
        assert_eq!(s.lost, [(1, 3)]);
        assert!(s.got.is_empty());
        r.on_data(4, Kind::Data, &4u64.to_le_bytes(), MS, &mut s);
        assert_eq!(s.got, [4, 5]);
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn nak(first: u64, last: u64) -> Nak {
        Nak {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            cookie: crate::Cookie([0; 16]),
            nonce: 77,
            first,
            last,
        }
    }

    #[test]
    fn history_retransmits_what_it_has_and_says_what_it_lost() {
        let cfg = ReliableConfig {
            retransmit_per_nak: 4,
            ..config(8)
        };
        let mut e = ReliableExport::new(1, 2, 9, 2, &cfg);
        for seq in 1..=20u64 {
            assert!(e.record(seq, &[seq as u8; 10]));
        }
        assert!(!e.record(21, &[0; 65]), "larger than a slot");
        assert_eq!(e.history().oldest(), 13);
        let mut out = Retransmit::with_capacity(4);
        let mut budgets = HostBudgets::new(4, ReliableConfig::default().retransmit_rate);
        e.on_nak(&nak(10, 30), addr("127.0.0.1:1"), 0, &mut budgets, &mut out);
        let u = out.unavailable().copied().unwrap();
        assert_eq!((u.first, u.last, u.nonce, u.session), (10, 12, 77, 9));
        assert_eq!(out.seqs(), [13, 14, 15, 16], "capped per NAK");
        assert_eq!(e.frame(13), Some(&[13u8; 10][..]));
        assert_eq!(e.counts().throttled, 4);
        // Numbers never sent get nothing.
        e.on_nak(&nak(25, 30), addr("127.0.0.1:1"), 0, &mut budgets, &mut out);
        assert!(out.seqs().is_empty() && out.unavailable().is_none());
    }

    #[test]
    fn what_a_slow_subscriber_misses_is_counted_for_it_alone() {
        let mut e = ReliableExport::new(1, 2, 9, 4, &config(8));
        for seq in 1..=20u64 {
            e.record(seq, &[0; 10]);
        }
        let (slow, fast) = (addr("127.0.0.1:1"), addr("127.0.0.2:1"));
        let mut out = Retransmit::with_capacity(64);
        let mut budgets = HostBudgets::new(4, ReliableConfig::default().retransmit_rate);
        // The slow one asks for 1..=15: 1..=12 left history (8 kept: 13..=20).
        e.on_nak(&nak(1, 15), slow, 0, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [13, 14, 15]);
        e.on_nak(&nak(5, 6), slow, 0, &mut budgets, &mut out);
        // The fast one asks only for what history holds.
        e.on_nak(&nak(18, 20), fast, 0, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [18, 19, 20]);
        assert_eq!(e.missed().collect::<Vec<_>>(), [(slow, 14)]);
        assert_eq!(e.counts().unavailable, 14);
    }

    #[test]
    fn late_joiners_are_acknowledged_before_the_last_k_and_sent_them() {
        let mut e = ReliableExport::new(1, 2, 9, 2, &config(8)).with_late_join(3);
        let src = addr("127.0.0.1:1");
        let mut out = Retransmit::with_capacity(64);
        let mut budgets = HostBudgets::new(4, ReliableConfig::default().retransmit_rate);
        // Nothing sent yet: nothing to join with.
        assert_eq!(e.ack_seq(), 0);
        e.on_join(src, 0, &mut budgets, &mut out);
        assert!(out.seqs().is_empty());
        e.record(1, &[1; 10]);
        e.record(2, &[2; 10]);
        assert_eq!(e.ack_seq(), 0);
        e.on_join(src, 0, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [1, 2]);
        for seq in 3..=20u64 {
            e.record(seq, &[seq as u8; 10]);
        }
        assert_eq!(e.ack_seq(), 17);
        e.on_join(src, 2_000 * MS, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [18, 19, 20]);
        // Without late join: acknowledged at the newest, sent nothing.
        let plain = ReliableExport::new(1, 2, 9, 2, &config(8));
        assert_eq!(plain.late_join(), 0);
        // K larger than history is capped by it.
        let big = ReliableExport::new(1, 2, 9, 2, &config(8)).with_late_join(100);
        assert_eq!(big.late_join(), 8);
    }

    #[test]
    fn the_byte_budget_bounds_a_nak_flood() {
        let cfg = ReliableConfig {
            retransmit_rate: (1000, 100),
            ..config(8)
        };
        let mut e = ReliableExport::new(1, 2, 9, 2, &cfg);
        for seq in 1..=8u64 {
            e.record(seq, &[0; 30]);
        }
        let src = addr("127.0.0.1:1");
        let mut out = Retransmit::with_capacity(64);
        let mut budgets = HostBudgets::new(4, cfg.retransmit_rate);
        let mut total = 0;
        for _ in 0..1000 {
            e.on_nak(&nak(1, 8), src, 0, &mut budgets, &mut out);
            total += out.seqs().len();
        }
        assert_eq!(total, 3, "burst of 100 bytes: three 30-byte frames");
        // A second later the bucket refilled (1000 B/s, capped at the burst).
        e.on_nak(&nak(1, 8), src, 1_000 * MS, &mut budgets, &mut out);
        assert_eq!(out.seqs().len(), 3);
        // Another host has its own budget.
        e.on_nak(
            &nak(1, 8),
            addr("127.0.0.2:1"),
            1_000 * MS,
            &mut budgets,
            &mut out,
        );
        assert_eq!(out.seqs().len(), 3);
        // Another port of a known host, or another topic, does not: the host's budget is spent.
        e.on_nak(
            &nak(1, 8),
            addr("127.0.0.1:2"),
            1_000 * MS,
            &mut budgets,
            &mut out,
        );
        assert!(out.seqs().is_empty());
        let mut other = ReliableExport::new(3, 2, 9, 2, &cfg);
        other.record(1, &[0; 30]);
        other.on_nak(
            &nak(1, 1),
            addr("127.0.0.1:3"),
            1_000 * MS,
            &mut budgets,
            &mut out,
        );
        assert!(out.seqs().is_empty());
    }

    #[test]
    fn a_host_gets_one_late_join_burst_per_period_whatever_its_ports() {
        let cfg = config(8);
        let mut e = ReliableExport::new(1, 2, 9, 4, &cfg).with_late_join(2);
        for seq in 1..=8u64 {
            e.record(seq, &[0; 10]);
        }
        let mut out = Retransmit::with_capacity(64);
        let mut budgets = HostBudgets::new(4, cfg.retransmit_rate);
        e.on_join(addr("127.0.0.1:1"), 0, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [7, 8]);
        // A new port (or a restarted session) of the same host within the period: nothing.
        e.on_join(addr("127.0.0.1:2"), 500 * MS, &mut budgets, &mut out);
        assert!(out.seqs().is_empty());
        e.on_join(addr("127.0.0.1:1"), 900 * MS, &mut budgets, &mut out);
        assert!(out.seqs().is_empty());
        // Another host, or the same one a period later: a burst.
        e.on_join(addr("127.0.0.2:1"), 900 * MS, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [7, 8]);
        e.on_join(addr("127.0.0.1:2"), 1_000 * MS, &mut budgets, &mut out);
        assert_eq!(out.seqs(), [7, 8]);
    }
}
