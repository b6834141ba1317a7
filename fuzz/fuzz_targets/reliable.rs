//! The reliable-topic machines under arbitrary input: a subscriber's `ReliableReceiver` fed
//! data, heartbeats, `Unavailable` answers and timer polls in any order with any numbers, and a
//! publisher's `ReliableExport` fed NAKs for any range from any of a few addresses; and the
//! `Nak` / `Unavailable` decoders on the input's bytes as a datagram.
//!
//! The input is a sequence of 17-byte operations `[op, a (8 bytes LE), b (8 bytes LE)]`.
//!
//! Crashes: any panic; a message delivered twice or out of order; a message both delivered and
//! reported unrecovered, or unrecovered ranges that overlap or go backwards; a retransmission
//! plan longer than the per-NAK cap, of a number outside the NAK's range, or of a frame not in
//! history; an `Unavailable` larger than the NAK it answers or for numbers still in history.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llbus_net::{
    parse_datagram, Cookie, Delivery, HostBudgets, Kind, Nak, ReliableConfig, ReliableExport,
    ReliableReceiver, Retransmit, Unavailable, DEFAULT_MAX_DATAGRAM,
};

const MS: u64 = 1_000_000;

#[derive(Default)]
struct Sink {
    /// The last number delivered or given up.
    last: u64,
}

impl Delivery for Sink {
    fn deliver(&mut self, seq: u64, _kind: Kind, payload: &[u8]) {
        assert!(seq > self.last, "{seq} delivered after {}", self.last);
        assert_eq!(payload, &seq.to_le_bytes()[..payload.len().min(8)]);
        self.last = seq;
    }
    fn unrecovered(&mut self, first: u64, last: u64) {
        assert!(first <= last, "range {first}..={last}");
        assert!(
            first > self.last,
            "{first}..={last} given up after {}",
            self.last
        );
        self.last = last;
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

fuzz_target!(|data: &[u8]| {
    // The decoders on the raw bytes.
    if let Ok(frames) = parse_datagram(data, DEFAULT_MAX_DATAGRAM) {
        for f in frames {
            if let Ok(n) = Nak::from_frame(&f) {
                assert!(n.first >= 1 && n.first <= n.last);
            }
            if let Ok(u) = Unavailable::from_frame(&f) {
                assert!(u.first >= 1 && u.first <= u.last);
            }
        }
    }
    let config = ReliableConfig {
        history: 16,
        reorder: 16,
        max_frame: 64,
        retransmit_per_nak: 8,
        gap_deadline: Duration::from_millis(50),
        ..ReliableConfig::default()
    };
    let mut rx = ReliableReceiver::new(&config);
    let mut export = ReliableExport::new(1, 2, 3, 2, &config).with_late_join(4);
    let mut plan = Retransmit::with_capacity(8);
    // One budget per host: the sources share it by IP address.
    let mut budgets = HostBudgets::new(2, config.retransmit_rate);
    let mut sink = Sink::default();
    let mut now = 0u64;
    let mut sent = 0u64;
    let mut nonces = 0u64;
    let srcs = [
        SocketAddr::from(([127, 0, 0, 1], 1)),
        SocketAddr::from(([127, 0, 0, 2], 2)),
        SocketAddr::from(([10, 0, 0, 1], 3)),
    ];
    for op in data.chunks_exact(17) {
        let (a, b) = (u64_at(op, 1), u64_at(op, 9));
        now = now.saturating_add((b % 8) * MS);
        match op[0] % 7 {
            0 | 1 => {
                // Data near the stream (or anywhere, sometimes).
                let seq = if op[0] & 0x80 != 0 {
                    a
                } else {
                    sink.last.saturating_add(a % 40)
                };
                let len = (b % 9) as usize;
                rx.on_data(seq, Kind::Data, &seq.to_le_bytes()[..len], now, &mut sink);
            }
            2 => rx.on_heartbeat(a, now),
            3 => {
                let u = Unavailable {
                    topic_id: 1,
                    fingerprint: 2,
                    session: 3,
                    nonce: if op[0] & 0x80 != 0 { nonces } else { b },
                    first: a.max(1),
                    last: a.max(1).saturating_add(b % 64),
                };
                let _ = rx.on_unavailable(&u, now, &mut sink);
            }
            4 => {
                rx.poll(
                    now,
                    &mut sink,
                    || {
                        nonces += 1;
                        nonces
                    },
                    |first, last, _| assert!(first <= last),
                );
            }
            5 => {
                // The publisher sends one more (frames of 1..64 bytes).
                sent += 1;
                let len = 1 + (a % 64) as usize;
                assert!(export.record(sent, &vec![sent as u8; len]));
            }
            _ => {
                let first = a.max(1);
                let nak = Nak {
                    topic_id: 1,
                    fingerprint: 2,
                    session: 4,
                    cookie: Cookie([0; 16]),
                    nonce: b,
                    first,
                    last: first.saturating_add(b % 100),
                };
                let src = srcs[(op[0] as usize / 7) % srcs.len()];
                if op[0] & 0x40 != 0 {
                    export.on_join(src, now, &mut budgets, &mut plan);
                    assert!(plan.seqs().iter().all(|&s| s > export.ack_seq()));
                } else {
                    export.on_nak(&nak, src, now, &mut budgets, &mut plan);
                    assert!(plan.seqs().iter().all(|&s| s >= nak.first && s <= nak.last));
                    if let Some(u) = plan.unavailable() {
                        assert!(u.first == nak.first && u.last < export.history().oldest());
                        assert_eq!(u.nonce, nak.nonce);
                    }
                }
                assert!(plan.seqs().len() <= 8);
                assert!(plan.seqs().windows(2).all(|w| w[0] < w[1]));
                for &s in plan.seqs() {
                    assert!(export.frame(s).is_some(), "{s} planned, not in history");
                }
            }
        }
    }
});
