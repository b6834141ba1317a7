//! The shared ring's read path alone, on one thread: what copying values out of the slots
//! costs in instructions, with no cross-core traffic (the `ipc` suite's figures mix it with
//! cache-line transfers and swing with the host). A heap region holds a llbus-ipc ring of 1024
//! slots; each step writes a batch with `write_runs` and reads it back, as the `ipc` suite's
//! batched stream does, checking the sequence `0, 1, 2, ...` of every value it reads. Cases:
//!
//! - `fill-only`: the batch written and freed unread: the part of every case below that is not
//!   the read path.
//! - `each-u64`: 64 u64 values per batch through `read_runs` + `read_each` (what
//!   `Receiver::recv_each` does; the `ipc` suite's batched stream).
//! - `one-u64`: one u64 per read (`read_batch` of one slot, then the `Pod` codec's decode).
//! - `slice-u64`: 64 u64 values copied out with `Slots::read` into a private array, then checked
//!   (what `Receiver::recv_slice` does).
//! - `each-32b`: 64 values of 32 bytes (four u64s) through `read_each`.
//! - `private`: 64 u64 values built and checked in a private array (no ring at all).
//!
//! Prints each case's median ns per value over `ROUNDS` rounds (cases alternate within a round).
//!
//! `cargo run --release -p benches --example ipc_read -- [ROUNDS]`
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus_ipc::{Geometry, Kind, Pod, Region, RingReader, RingWriter, SlotCodec};

const CAPACITY: usize = 1024;
const BATCH: usize = 64;
const WINDOW: Duration = Duration::from_millis(200);

/// Four words: a value wider than one atomic load.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Wide([u64; 4]);

// SAFETY: four u64s: no padding, no pointers, every bit pattern valid.
unsafe impl llbus_ipc::bytemuck::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Wide {}

fn ring(slot_size: usize) -> (RingWriter, RingReader) {
    let geo = Geometry {
        kind: Kind::Pod,
        slot_size,
        capacity: CAPACITY,
        fingerprint: 1,
        topic_id: 1,
    };
    let region = Arc::new(Region::heap(geo.mapping_len()));
    let tx = match RingWriter::create(Arc::clone(&region), geo) {
        Ok(tx) => tx,
        Err(e) => panic!("ring: {e}"),
    };
    let rx = match RingReader::attach(region) {
        Ok(rx) => rx,
        Err(e) => panic!("ring: {e}"),
    };
    (tx, rx)
}

/// The receiving side's check, as the `ipc` suite's stream makes it.
#[derive(Default)]
struct Seq {
    expected: u64,
    bad: bool,
}

impl Seq {
    #[inline(always)]
    fn see(&mut self, v: u64) {
        if v == self.expected {
            self.expected += 1;
        } else {
            self.bad = true;
        }
    }
}

/// Lets the checker's state escape between batches, as a receiver's state does in a real
/// program (kept in a struct, read by the caller): the compiler must keep it in memory across
/// calls, and may keep it in a register within a batch only if nothing in the loop could
/// observe it.
#[inline(never)]
fn escape(seq: &mut Seq) {
    black_box(seq);
}

/// Writes `BATCH` values of the sequence from `next` as plain words, `words` per value, built
/// in `vals` (`BATCH * words` long, zero but for each value's first word).
fn fill(tx: &mut RingWriter, next: &mut u64, vals: &mut [u64], words: usize) {
    for (i, v) in vals.chunks_exact_mut(words).enumerate() {
        v[0] = *next + i as u64;
    }
    let mut at = 0;
    let wrote = tx.write_runs(BATCH, |run, slots| {
        let bytes: &[u8] = llbus_ipc::bytemuck::cast_slice(&vals[at * words..(at + slots) * words]);
        at += slots;
        if run.write(0, bytes) {
            slots
        } else {
            0
        }
    });
    assert_eq!(wrote, Ok(BATCH));
    *next += BATCH as u64;
}

/// Runs `step` (one batch) for the window; ns per value.
fn timed(mut step: impl FnMut() -> usize) -> f64 {
    let start = Instant::now();
    let mut values = 0usize;
    while start.elapsed() < WINDOW {
        for _ in 0..64 {
            values += step();
        }
    }
    start.elapsed().as_nanos() as f64 / values as f64
}

fn fill_only() -> f64 {
    let (mut tx, mut rx) = ring(8);
    let (mut next, mut vals) = (0, [0u64; BATCH]);
    timed(|| {
        fill(&mut tx, &mut next, &mut vals, 1);
        rx.read_runs(BATCH, |run, _| {
            black_box(run);
        })
        .unwrap_or(0)
    })
}

fn each_u64() -> f64 {
    let (mut tx, mut rx) = ring(8);
    let (mut next, mut seq, mut vals) = (0, Seq::default(), [0u64; BATCH]);
    let ns = timed(|| {
        fill(&mut tx, &mut next, &mut vals, 1);
        let got = rx.read_runs(BATCH, |run, slots| {
            run.read_each::<u64>(slots, 8, |v| seq.see(v));
        });
        escape(&mut seq);
        got.unwrap_or(0)
    });
    assert!(
        !seq.bad && seq.expected == next,
        "each-u64 lost the sequence"
    );
    ns
}

fn one_u64() -> f64 {
    let (mut tx, mut rx) = ring(8);
    let (mut next, mut seq, mut vals) = (0, Seq::default(), [0u64; BATCH]);
    let ns = timed(|| {
        fill(&mut tx, &mut next, &mut vals, 1);
        let mut n = 0;
        for _ in 0..BATCH {
            n += rx
                .read_batch(1, |slot| {
                    if let Ok(v) = <Pod as SlotCodec<u64>>::decode(slot, &mut []) {
                        seq.see(v);
                    }
                })
                .unwrap_or(0);
        }
        n
    });
    assert!(
        !seq.bad && seq.expected == next,
        "one-u64 lost the sequence"
    );
    ns
}

fn slice_u64() -> f64 {
    let (mut tx, mut rx) = ring(8);
    let (mut next, mut seq, mut vals) = (0, Seq::default(), [0u64; BATCH]);
    let mut out = [0u64; BATCH];
    let ns = timed(|| {
        fill(&mut tx, &mut next, &mut vals, 1);
        let mut at = 0;
        let got = rx.read_runs(BATCH, |run, slots| {
            let dst: &mut [u8] = llbus_ipc::bytemuck::cast_slice_mut(&mut out[at..at + slots]);
            run.read(0, dst);
            at += slots;
        });
        out[..at].iter().for_each(|&v| seq.see(v));
        escape(&mut seq);
        got.unwrap_or(0)
    });
    assert!(
        !seq.bad && seq.expected == next,
        "slice-u64 lost the sequence"
    );
    ns
}

fn each_wide() -> f64 {
    let (mut tx, mut rx) = ring(32);
    let (mut next, mut seq, mut vals) = (0, Seq::default(), [0u64; BATCH * 4]);
    let ns = timed(|| {
        fill(&mut tx, &mut next, &mut vals, 4);
        let got = rx.read_runs(BATCH, |run, slots| {
            run.read_each::<Wide>(slots, 32, |v| seq.see(v.0[0] + v.0[1] + v.0[2] + v.0[3]));
        });
        escape(&mut seq);
        got.unwrap_or(0)
    });
    assert!(
        !seq.bad && seq.expected == next,
        "each-32b lost the sequence"
    );
    ns
}

fn private() -> f64 {
    let mut vals = [0u64; BATCH];
    let (mut next, mut seq) = (0, Seq::default());
    let ns = timed(|| {
        for (i, v) in vals.iter_mut().enumerate() {
            *v = next + i as u64;
        }
        next += BATCH as u64;
        black_box(&mut vals).iter().for_each(|&v| seq.see(v));
        escape(&mut seq);
        BATCH
    });
    assert!(
        !seq.bad && seq.expected == next,
        "private lost the sequence"
    );
    ns
}

/// A case's name and its measurement (ns per value).
type Case = (&'static str, fn() -> f64);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let cases: [Case; 6] = [
        ("fill-only", fill_only),
        ("each-u64", each_u64),
        ("one-u64", one_u64),
        ("slice-u64", slice_u64),
        ("each-32b", each_wide),
        ("private", private),
    ];
    let mut results = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (i, (_, case)) in cases.iter().enumerate() {
            results[i].push(case());
        }
    }
    for ((name, _), r) in cases.iter().zip(&mut results) {
        println!("{name:>10} {:7.3} ns/value (median of {rounds})", median(r));
    }
}
