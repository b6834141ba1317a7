//! Reassembly of fragmented messages (`docs/PROTOCOL.md`, "Large messages"), with bounded
//! memory. Sans-IO: fragments and the time go in, whole messages come out.
//!
//! The algorithm is the one of IP reassembly (RFC 815), with the limits that RFC 791 leaves to
//! implementations made explicit and the overlap rules of RFC 5722 (overlap is forbidden):
//!
//! - A message is identified by its publisher session and the sequence number of its first
//!   fragment (`seq - index`). Its fragments must agree on total length, chunk and count
//!   (else [`DropReason::BadFragment`]); the fragment header's own rules
//!   ([`FragmentHeader::parse`]) already make the pieces tile the message with no gap and no
//!   overlap, so a bitmap of the indices received says when it is complete, and a repeated
//!   index is a duplicate (counted, ignored).
//! - At most `max_message` bytes per message (else [`DropReason::TooLarge`]) and at most
//!   `in_flight` messages at once. A fragment of a new message when all are taken evicts the
//!   reassembly started longest ago; a reassembly older than `timeout` is given up. Either is
//!   counted once per message as [`DropReason::Incomplete`], and nothing of it is delivered.
//! - Buffers are reused: each of the `in_flight` slots keeps its buffer and bitmap between
//!   messages, growing only to the largest message it has held (at most `max_message`), so a
//!   steady stream of messages of one size allocates nothing, and the memory held is at most
//!   `in_flight * max_message` plus the bitmaps.
//! - A fragment of a message given up (or of one older than the last given up) is not the
//!   start of a new reassembly: it is counted late and dropped, so a straggler cannot make a
//!   message be counted incomplete twice.

use std::time::Duration;

use crate::protocol::fragment::{FragmentHeader, DEFAULT_MAX_MESSAGE};
use crate::DropReason;

/// The limits of reassembly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// The largest message accepted, in payload bytes (default 16 MiB). The publisher refuses
    /// to send a larger one; a receiver drops fragments that claim one.
    pub max_message: usize,
    /// Messages reassembled at once per import (default 4).
    pub in_flight: usize,
    /// How long a message may take to complete before it is given up (default 1 s).
    pub timeout: Duration,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig {
            max_message: DEFAULT_MAX_MESSAGE,
            in_flight: 4,
            timeout: Duration::from_secs(1),
        }
    }
}

/// The counters of one reassembler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReassemblyCounts {
    /// Messages completed and handed on.
    pub completed: u64,
    /// Messages given up before they were complete (evicted or timed out).
    pub incomplete: u64,
    /// Of those, evicted by a newer message while all reassemblies were in flight.
    pub evicted: u64,
    /// Fragments received twice.
    pub duplicates: u64,
    /// Fragments of a message already given up.
    pub late: u64,
    /// Fragments dropped as inconsistent.
    pub bad: u64,
    /// Fragments dropped for claiming a message over the maximum size.
    pub too_large: u64,
}

/// One message being reassembled. Its buffer and bitmap are kept for the next message.
#[derive(Debug, Default)]
struct Slot {
    active: bool,
    session: u64,
    /// The sequence number of the message's first fragment.
    first: u64,
    total: u32,
    chunk: u32,
    count: u32,
    received: u32,
    started_ns: u64,
    /// Bit `i` set: fragment `i` is in `buf`. Invariant: `received` bits set, all `< count`.
    bits: Vec<u64>,
    /// `buf[..total]` is the message; grown, never shrunk.
    buf: Vec<u8>,
}

/// What [`Reassembler::on_fragment`] made of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Reassembled<'a> {
    /// The message is now complete: its payload.
    Complete(&'a [u8]),
    /// Kept; the message is not complete yet (or the fragment was a duplicate or late,
    /// counted).
    Pending,
}

/// The reassembler of one import. See the module docs.
#[derive(Debug)]
pub struct Reassembler {
    slots: Box<[Slot]>,
    max_message: usize,
    timeout_ns: u64,
    /// The session and first sequence number of the newest message given up.
    given_up: Option<(u64, u64)>,
    counts: ReassemblyCounts,
}

impl Reassembler {
    /// A reassembler with `config`'s limits. The slots are made now; their buffers grow on
    /// first use and are then reused.
    pub fn new(config: &ReassemblyConfig) -> Self {
        Reassembler {
            slots: (0..config.in_flight.max(1))
                .map(|_| Slot::default())
                .collect(),
            max_message: config.max_message,
            timeout_ns: u64::try_from(config.timeout.as_nanos()).unwrap_or(u64::MAX),
            given_up: None,
            counts: ReassemblyCounts::default(),
        }
    }

    /// The counters.
    pub fn counts(&self) -> &ReassemblyCounts {
        &self.counts
    }

    /// Messages being reassembled.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.active).count()
    }

    /// Bytes held by the buffers (for the memory bound's tests).
    pub fn held_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.buf.capacity() + s.bits.capacity() * 8)
            .sum()
    }

    fn give_up(&mut self, i: usize) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        slot.active = false;
        self.counts.incomplete = self.counts.incomplete.saturating_add(1);
        let key = (slot.session, slot.first);
        self.given_up = Some(match self.given_up {
            Some(g) if g.0 == key.0 && g.1 > key.1 => g,
            _ => key,
        });
    }

    /// Gives up every reassembly older than the timeout. Returns how many.
    pub fn poll(&mut self, now_ns: u64) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.active && now_ns.saturating_sub(slot.started_ns) >= self.timeout_ns {
                self.give_up(i);
                n += 1;
            }
        }
        n
    }

    /// Gives up every reassembly in flight (the stream moved past them: a range unrecovered on
    /// a reliable topic, a new publisher session). Returns how many.
    pub fn abandon(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() {
            if self.slots[i].active {
                self.give_up(i);
                n += 1;
            }
        }
        n
    }

    /// Fragment frame `seq` of publisher session `session` with `payload` arrived (its header
    /// already checked, and for a best-effort import, not a duplicate per the sequence
    /// tracker).
    ///
    /// # Errors
    /// [`DropReason::BadFragment`] for a fragment inconsistent in itself or with its message
    /// (the message's reassembly goes on: a forger cannot cancel it);
    /// [`DropReason::TooLarge`] for one of a message over the maximum size.
    pub fn on_fragment(
        &mut self,
        session: u64,
        seq: u64,
        payload: &[u8],
        now_ns: u64,
    ) -> Result<Reassembled<'_>, DropReason> {
        let (h, piece) = FragmentHeader::parse(payload).inspect_err(|_| {
            self.counts.bad = self.counts.bad.saturating_add(1);
        })?;
        if h.total as usize > self.max_message {
            self.counts.too_large = self.counts.too_large.saturating_add(1);
            return Err(DropReason::TooLarge);
        }
        let Some(first) = seq.checked_sub(u64::from(h.index)).filter(|&f| f > 0) else {
            self.counts.bad = self.counts.bad.saturating_add(1);
            return Err(DropReason::BadFragment);
        };
        let i = match self
            .slots
            .iter()
            .position(|s| s.active && s.session == session && s.first == first)
        {
            Some(i) => {
                let s = &self.slots[i];
                if (s.total, s.chunk, s.count) != (h.total, h.chunk, h.count) {
                    self.counts.bad = self.counts.bad.saturating_add(1);
                    return Err(DropReason::BadFragment);
                }
                i
            }
            None => {
                if self
                    .given_up
                    .is_some_and(|(s, f)| s == session && first <= f)
                {
                    self.counts.late = self.counts.late.saturating_add(1);
                    return Ok(Reassembled::Pending);
                }
                self.start(session, first, &h, now_ns)
            }
        };
        let slot = &mut self.slots[i];
        let (word, bit) = ((h.index / 64) as usize, 1u64 << (h.index % 64));
        let Some(w) = slot.bits.get_mut(word) else {
            return Err(DropReason::BadFragment); // Cannot happen: sized by `count`.
        };
        if *w & bit != 0 {
            self.counts.duplicates = self.counts.duplicates.saturating_add(1);
            return Ok(Reassembled::Pending);
        }
        let at = h.offset();
        let Some(dst) = slot.buf.get_mut(at..at + piece.len()) else {
            return Err(DropReason::BadFragment); // Cannot happen: sized by `total`.
        };
        dst.copy_from_slice(piece);
        *w |= bit;
        slot.received += 1;
        debug_assert!(slot.received <= slot.count);
        if slot.received < slot.count {
            return Ok(Reassembled::Pending);
        }
        slot.active = false;
        self.counts.completed = self.counts.completed.saturating_add(1);
        Ok(Reassembled::Complete(
            slot.buf.get(..slot.total as usize).unwrap_or_default(),
        ))
    }

    /// Takes a slot for a new message (a free one, else the oldest, given up) and sizes it.
    fn start(&mut self, session: u64, first: u64, h: &FragmentHeader, now_ns: u64) -> usize {
        let i = match self.slots.iter().position(|s| !s.active) {
            Some(i) => i,
            None => {
                let oldest = self
                    .slots
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| (s.started_ns, s.first))
                    .map_or(0, |(i, _)| i);
                self.give_up(oldest);
                self.counts.evicted = self.counts.evicted.saturating_add(1);
                oldest
            }
        };
        let total = h.total as usize;
        if self.slots[i].buf.len() < total {
            // Another free slot's buffer may be large enough already: take it (the pool keeps
            // its largest buffers in use, and grows only when more are needed at once).
            if let Some(j) = (0..self.slots.len())
                .find(|&j| j != i && !self.slots[j].active && self.slots[j].buf.len() >= total)
            {
                let (bits, buf) = (
                    std::mem::take(&mut self.slots[j].bits),
                    std::mem::take(&mut self.slots[j].buf),
                );
                self.slots[j].bits = std::mem::replace(&mut self.slots[i].bits, bits);
                self.slots[j].buf = std::mem::replace(&mut self.slots[i].buf, buf);
            }
        }
        let slot = &mut self.slots[i];
        if slot.buf.len() < total {
            // Grows to the largest message this slot has held (at most `max_message`), exactly.
            slot.buf.reserve_exact(total - slot.buf.len());
            slot.buf.resize(total, 0);
        }
        let words = (h.count as usize).div_ceil(64);
        if slot.bits.len() < words {
            slot.bits.reserve_exact(words - slot.bits.len());
            slot.bits.resize(words, 0);
        }
        slot.bits[..words].fill(0);
        *slot = Slot {
            active: true,
            session,
            first,
            total: h.total,
            chunk: h.chunk,
            count: h.count,
            received: 0,
            started_ns: now_ns,
            bits: std::mem::take(&mut slot.bits),
            buf: std::mem::take(&mut slot.buf),
        };
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fragments of `msg` cut in `chunk`-byte pieces, numbered from `first`.
    pub(crate) fn fragments(msg: &[u8], chunk: usize, first: u64) -> Vec<(u64, Vec<u8>)> {
        let (total, chunk32, count) = FragmentHeader::plan(msg.len(), chunk).unwrap();
        (0..count)
            .map(|index| {
                let h = FragmentHeader {
                    total,
                    chunk: chunk32,
                    index,
                    count,
                };
                let mut p = [0u8; 16];
                h.write(&mut p);
                let mut p = p.to_vec();
                let at = h.offset();
                p.extend_from_slice(&msg[at..at + h.piece_len()]);
                (first + u64::from(index), p)
            })
            .collect()
    }

    fn config(in_flight: usize, max_message: usize) -> ReassemblyConfig {
        ReassemblyConfig {
            max_message,
            in_flight,
            timeout: Duration::from_millis(100),
        }
    }

    fn feed(r: &mut Reassembler, frags: &[(u64, Vec<u8>)], now: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (seq, p) in frags {
            if let Ok(Reassembled::Complete(m)) = r.on_fragment(1, *seq, p, now) {
                out.push(m.to_vec());
            }
        }
        out
    }

    #[test]
    fn any_order_with_duplicates_completes_once() {
        let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut frags = fragments(&msg, 64, 10);
        frags.reverse();
        frags.push(frags[3].clone());
        let mut r = Reassembler::new(&config(2, 4096));
        let got = feed(&mut r, &frags, 0);
        assert_eq!(got, [msg]);
        assert_eq!(r.counts().completed, 1);
        // The duplicate came after completion: a new reassembly of that message would never
        // complete; it is one, counted incomplete when it times out.
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn interleaved_messages_and_reuse_without_growth() {
        let a = vec![1u8; 300];
        let b = vec![2u8; 300];
        let mut r = Reassembler::new(&config(2, 4096));
        let fa = fragments(&a, 100, 1);
        let fb = fragments(&b, 100, 4);
        let mut mixed = Vec::new();
        for (x, y) in fa.iter().zip(&fb) {
            mixed.push(x.clone());
            mixed.push(y.clone());
        }
        assert_eq!(feed(&mut r, &mixed, 0), [a.clone(), b.clone()]);
        let held = r.held_bytes();
        for k in 0..10 {
            let first = 7 + 3 * k;
            assert_eq!(feed(&mut r, &fragments(&a, 100, first), 0), vec![a.clone()]);
        }
        assert_eq!(r.held_bytes(), held, "buffers are reused");
    }

    #[test]
    fn eviction_and_timeout_count_once_and_stragglers_are_late() {
        let m = vec![9u8; 200];
        let mut r = Reassembler::new(&config(2, 4096));
        // Three messages, each missing its last fragment: the third evicts the first.
        for first in [1u64, 3, 5] {
            let f = fragments(&m, 100, first);
            assert!(feed(&mut r, &f[..1], first).is_empty());
        }
        assert_eq!((r.counts().incomplete, r.counts().evicted), (1, 1));
        // The first message's straggler does not restart it.
        let f1 = fragments(&m, 100, 1);
        assert!(feed(&mut r, &f1[1..], 10).is_empty());
        assert_eq!(r.counts().late, 1);
        assert_eq!(r.in_flight(), 2);
        // Timeout gives up the others, each once.
        assert_eq!(r.poll(50 * 1_000_000), 0);
        assert_eq!(r.poll(200 * 1_000_000), 2);
        assert_eq!(r.poll(400 * 1_000_000), 0);
        assert_eq!(r.counts().incomplete, 3);
        // A newer message still goes through.
        assert_eq!(feed(&mut r, &fragments(&m, 100, 7), 0), [m]);
    }

    #[test]
    fn forged_fragments_are_refused_and_cannot_cancel_a_message() {
        let m: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
        let mut r = Reassembler::new(&config(2, 1000));
        let f = fragments(&m, 100, 1);
        assert!(feed(&mut r, &f[..1], 0).is_empty());
        // The same message claiming another total / chunk: refused, the real one goes on.
        let other = fragments(&[0u8; 150], 100, 1);
        assert_eq!(
            r.on_fragment(1, other[1].0, &other[1].1, 0),
            Err(DropReason::BadFragment)
        );
        // Over the maximum message: refused before any memory is taken.
        let huge = fragments(&vec![0u8; 1001], 1000, 50);
        assert_eq!(
            r.on_fragment(1, huge[0].0, &huge[0].1, 0),
            Err(DropReason::TooLarge)
        );
        // An index above its sequence number (first fragment would be number 0 or less).
        let low = fragments(&m, 100, 1);
        assert_eq!(
            r.on_fragment(1, 1, &low[2].1, 0),
            Err(DropReason::BadFragment)
        );
        // Garbage.
        assert_eq!(
            r.on_fragment(1, 9, &[1, 2, 3], 0),
            Err(DropReason::BadFragment)
        );
        assert_eq!(feed(&mut r, &f[1..], 0), [m]);
        assert_eq!(r.counts().bad, 3);
        assert_eq!(r.counts().too_large, 1);
        assert!(r.held_bytes() < 2 * 1000 + 64);
    }

    #[test]
    fn memory_is_bounded_by_in_flight_times_max_message() {
        // Every fragment claims a new, maximal message: the slots are reused, never more.
        let mut r = Reassembler::new(&config(3, 10_000));
        for first in 1..200u64 {
            let f = fragments(&vec![0u8; 10_000], 100, first * 200);
            let _ = r.on_fragment(1, f[5].0, &f[5].1, first);
        }
        assert_eq!(r.in_flight(), 3);
        assert!(r.held_bytes() <= 3 * (10_000 + 8 * 2), "{}", r.held_bytes());
        assert_eq!(r.counts().incomplete, 196);
    }
}
