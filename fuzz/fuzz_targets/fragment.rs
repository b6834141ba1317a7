//! Reassembly under arbitrary fragments: a `Reassembler` with small limits fed genuine
//! fragments of a few messages interleaved with forged ones (any sequence number, session and
//! payload bytes) and timer polls, in any order; and `FragmentHeader::parse` on the input's
//! bytes.
//!
//! The input is a sequence of operations `[op, a (8 bytes LE), len (1), payload (len bytes)]`.
//!
//! Crashes: any panic; a completed message whose length is not the total its fragments
//! claimed or larger than the maximum; a genuine message (no forged fragment of its own in the
//! input) completed with other bytes than it had; more reassemblies in flight than the bound,
//! or more memory held than `in_flight * (max_message + bitmap)`.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llbus_net::{FragmentHeader, Reassembled, Reassembler, ReassemblyConfig};

const MAX_MESSAGE: usize = 4096;
const IN_FLIGHT: usize = 3;
const MS: u64 = 1_000_000;

/// The bytes of genuine message `k` (`len` bytes).
fn message(k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k as usize * 31 + i) as u8).collect()
}

fuzz_target!(|data: &[u8]| {
    let _ = FragmentHeader::parse(data);
    let config = ReassemblyConfig {
        max_message: MAX_MESSAGE,
        in_flight: IN_FLIGHT,
        timeout: Duration::from_millis(20),
    };
    let mut r = Reassembler::new(&config);
    let mut now = 0u64;
    // Sessions 1..=3 carry genuine messages at first sequence numbers 1000 * k; forged
    // fragments use session 9 unless the op says otherwise (then the genuine check is off).
    let mut tainted = false;
    let mut rest = data;
    while let [op, tail @ ..] = rest {
        let Some((a, tail)) = tail.split_first_chunk::<8>() else {
            break;
        };
        let a = u64::from_le_bytes(*a);
        let Some((&len, tail)) = tail.split_first() else {
            break;
        };
        let len = (len as usize).min(tail.len());
        let (payload, tail) = tail.split_at(len);
        rest = tail;
        now = now.saturating_add(u64::from(op >> 5) * MS);
        let result = match op % 4 {
            0 | 1 => {
                // A genuine fragment: message k of a size from a, cut in chunks from a.
                let k = 1 + a % 4;
                let size = (a >> 8) as usize % MAX_MESSAGE + 1;
                let chunk = 1 + (a >> 24) as usize % 600;
                let msg = message(k, size);
                let Some((total, chunk, count)) = FragmentHeader::plan(size, chunk) else {
                    continue;
                };
                let index = (a >> 40) as u32 % count;
                let h = FragmentHeader {
                    total,
                    chunk,
                    index,
                    count,
                };
                let mut p = [0u8; 16];
                h.write(&mut p);
                let mut p = p.to_vec();
                p.extend_from_slice(&msg[h.offset()..h.offset() + h.piece_len()]);
                // Different sizes of the same message number are different messages: key on
                // the size too.
                let first = 1000 * k + 1_000_000 * size as u64 + 7 * chunk as u64;
                let out = r.on_fragment(1, first + u64::from(index), &p, now);
                if let (Ok(Reassembled::Complete(m)), false) = (&out, tainted) {
                    assert_eq!(*m, &msg[..], "genuine message {k} corrupted");
                }
                out.map(|o| matches!(o, Reassembled::Complete(_)))
            }
            2 => {
                if op & 0x10 != 0 {
                    tainted = true;
                }
                let session = if op & 0x10 != 0 { 1 } else { 9 };
                r.on_fragment(session, a, payload, now).map(|o| {
                    if let Reassembled::Complete(m) = o {
                        assert!(m.len() <= MAX_MESSAGE);
                        if let Ok((h, _)) = FragmentHeader::parse(payload) {
                            assert_eq!(m.len(), h.total as usize);
                        }
                        true
                    } else {
                        false
                    }
                })
            }
            _ => Ok(r.poll(now) > 0),
        };
        let _ = result;
        assert!(r.in_flight() <= IN_FLIGHT);
        assert!(
            r.held_bytes() <= IN_FLIGHT * (MAX_MESSAGE + 8 * MAX_MESSAGE.div_ceil(64)),
            "{} bytes held",
            r.held_bytes()
        );
    }
});
