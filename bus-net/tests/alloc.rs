//! Zero allocation per message in the steady state: a counting global allocator (per thread,
//! so the test harness's own threads do not interfere) around encode of a batch, decode
//! iteration, payload decode, control frames, sequence tracking, the subscriber table, the
//! compat format, cookie issue and verify, MAC seal and open, allowlist and rate-limit checks,
//! and batched socket send and receive over loopback, each after a warm-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus_net::{
    decode_compat_packet, decode_payload, encode_compat_packet, parse_datagram, Allowlist,
    BatchEncoder, Control, CookieJar, DataMeta, DropCounts, DropReason, EncodeError, FrameMac,
    LatePolicy, RateLimiter, RecvBatch, ReplayGuard, SendBatch, SeqTracker, SocketConfig,
    SubscriberTable, UdpEndpoint, DEFAULT_COOKIE_WINDOW, DEFAULT_MAX_DATAGRAM,
    DEFAULT_SUBSCRIBER_TIMEOUT, MAC_TAG_LEN,
};
use serde::{Deserialize, Serialize};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: during thread teardown the slot may be gone; that allocation is not ours.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the same arguments; counting touches only a
// thread-local `Cell` with a const initialiser and no destructor, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`; `ptr` came from this allocator, that is from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (ALLOCATIONS.with(Cell::get) - before, r)
}

#[test]
fn the_counter_counts() {
    let (n, v) = allocations_in(|| vec![1u8; 10]);
    assert_eq!((n, v.len()), (1, 10));
    // A payload type that owns heap memory allocates its own bytes on decode, as documented.
    let mut buf = [0u8; 64];
    let mut enc = BatchEncoder::new(&mut buf);
    enc.push_data(meta(1), "owned").unwrap();
    let len = enc.len();
    let frame = parse_datagram(&buf[..len], 64).unwrap().next().unwrap();
    let (n, s) = allocations_in(|| decode_payload::<String>(frame.payload).unwrap());
    assert_eq!((n, s.as_str()), (1, "owned"));
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Quote {
    px: i64,
    qty: u32,
    side: bool,
}

fn meta(seq: u64) -> DataMeta {
    DataMeta {
        topic_id: 11,
        fingerprint: 22,
        session: 33,
        seq,
        timestamp_ns: 44,
    }
}

/// Encodes quotes into `buf` until it is full; returns the datagram length and frame count.
fn fill(buf: &mut [u8], first_seq: u64) -> (usize, usize) {
    let mut enc = BatchEncoder::new(buf);
    let mut seq = first_seq;
    loop {
        let q = Quote {
            px: seq as i64,
            qty: 1,
            side: seq % 2 == 0,
        };
        match enc.push_data(meta(seq), &q) {
            Ok(()) => seq += 1,
            Err(EncodeError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    enc.push_control(&Control::Heartbeat {
        topic_id: 11,
        fingerprint: 22,
        session: 33,
        last_seq: seq,
        timestamp_ns: 0,
    })
    .ok();
    (enc.len(), enc.frames())
}

/// Decodes every frame of `datagram`; returns the sum of prices, so nothing is optimised away.
fn drain(datagram: &[u8], tracker: &mut SeqTracker, drops: &mut DropCounts) -> i64 {
    let mut sum = 0;
    match parse_datagram(datagram, DEFAULT_MAX_DATAGRAM) {
        Ok(frames) => {
            for f in frames {
                if f.header.kind == llbus_net::Kind::Data {
                    if tracker.observe(f.header.session, f.header.seq).is_deliver() {
                        match decode_payload::<Quote>(f.payload) {
                            Ok(q) => sum += q.px,
                            Err(r) => drops.record(r),
                        }
                    }
                } else if let Ok(Control::Heartbeat {
                    session, last_seq, ..
                }) = Control::from_frame(&f)
                {
                    tracker.observe_last_seq(session, last_seq);
                }
            }
        }
        Err(r) => drops.record(r),
    }
    sum
}

#[test]
fn protocol_steady_state_allocates_nothing() {
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let mut tracker = SeqTracker::new(LatePolicy::Deliver);
    let mut drops = DropCounts::new();
    let mut table = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 64);
    let addrs: Vec<SocketAddr> = (0..8)
        .map(|p| SocketAddr::from(([127, 0, 0, 1 + p as u8], 9000 + p)))
        .collect();
    let garbage = [0x4cu8; 100];

    let mut round = |seq: u64, now: u64| {
        let (len, frames) = fill(&mut buf, seq);
        assert!(frames > 10);
        let sum = drain(&buf[..len], &mut tracker, &mut drops);
        // A duplicate datagram and garbage: counted, not allocated for.
        drain(&buf[..len], &mut tracker, &mut drops);
        drain(&garbage, &mut tracker, &mut drops);
        for &a in &addrs {
            table.renew(a, 11, 1, 7, now).unwrap();
        }
        let fanout = table.subscribers(11).count();
        table.expire(now, |_| {});
        let n = encode_compat_packet(&mut buf, 11, &(seq as i64), 5).unwrap();
        let back = decode_compat_packet::<i64>(&buf[..n], DEFAULT_MAX_DATAGRAM).unwrap();
        (frames as u64, sum, fanout, back)
    };

    // Warm-up: first inserts into the subscriber table allocate (by design).
    let mut seq = 1;
    for i in 0..3 {
        let (frames, ..) = round(seq, i);
        seq += frames - 1;
    }
    let (allocs, ()) = allocations_in(|| {
        for i in 3..1000 {
            let (frames, sum, fanout, back) = round(seq, i);
            assert!(sum > 0);
            assert_eq!(fanout, 8);
            assert_eq!(back, (seq as i64, 5));
            seq += frames - 1;
        }
    });
    assert_eq!(allocs, 0, "protocol hot path allocated");
    assert!(tracker.counts().duplicates > 0);
    assert!(drops.total() > 0);
}

#[test]
fn hardening_checks_allocate_nothing() {
    // Construction allocates (the allowlist's vector, the limiter's table); checks do not.
    let mut jar = CookieJar::new([3; 32], DEFAULT_COOKIE_WINDOW);
    let mac = FrameMac::new(&[4; 32]);
    let data_plain = FrameMac::new(&[4; 32]).control_only();
    let allow: Allowlist = "10.0.0.0/8, fd00::/8".parse().unwrap();
    let mut limiter = RateLimiter::default();
    let mut guard = ReplayGuard::new(0x0bad, 16);
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let addrs: Vec<SocketAddr> = (0..64u16)
        .map(|p| SocketAddr::from(([10, 0, (p >> 8) as u8, p as u8], 9000 + p)))
        .collect();
    const W: u64 = 30_000_000_000;

    let mut round = |i: u64| {
        let now = i * W / 7; // crosses windows: rotation must not allocate either
        let mut proven = 0;
        for &a in &addrs {
            let c = jar.issue(a, now);
            proven += usize::from(jar.verify(a, &c, now + W / 2));
            proven += usize::from(allow.contains(a.ip()));
            proven += usize::from(limiter.allow(a.ip(), now));
        }
        let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
        // A sealed datagram holds one direction and one session: a heartbeat and data.
        let _cookie = jar.issue(addrs[0], now);
        enc.push_control(&Control::Heartbeat {
            topic_id: 1,
            fingerprint: 2,
            session: meta(i).session,
            last_seq: i,
            timestamp_ns: 0,
        })
        .unwrap();
        enc.push_data(
            meta(i),
            &Quote {
                px: 1,
                qty: 2,
                side: true,
            },
        )
        .unwrap();
        let len = enc.len();
        let must = data_plain.must_seal(&buf[..len]);
        let sealed = mac.seal(&mut buf, len).unwrap();
        let frames = mac
            .open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard)
            .unwrap()
            .count();
        // Replayed: refused by the window, without allocating.
        let replayed = mac.open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard);
        assert_eq!(replayed.err(), Some(DropReason::Replayed));
        // A corrupted copy is refused, without allocating for it.
        buf[10] ^= 1;
        let refused = mac.open(&buf[..sealed], DEFAULT_MAX_DATAGRAM).is_err();
        (proven, must, frames, refused)
    };

    for i in 0..3 {
        round(i);
    }
    let (allocs, ()) = allocations_in(|| {
        for i in 3..300 {
            let (proven, must, frames, refused) = round(i);
            assert!(proven >= 2 * addrs.len());
            assert!(must && refused);
            assert_eq!(frames, 2);
        }
    });
    assert_eq!(allocs, 0, "hardening checks allocated");
}

#[test]
#[cfg_attr(miri, ignore)]
fn io_batches_allocate_nothing() {
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let config = SocketConfig::default();
    let mut sender = UdpEndpoint::bind(local, &config).unwrap();
    let mut receivers: Vec<UdpEndpoint> = (0..3)
        .map(|_| UdpEndpoint::bind(local, &config).unwrap())
        .collect();
    let dests: Vec<SocketAddr> = receivers.iter().map(|r| r.local_addr()).collect();
    let mut send = SendBatch::new(32);
    let mut recv = RecvBatch::new(32, DEFAULT_MAX_DATAGRAM);
    let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
    let (len, _) = fill(&mut buf, 1);
    let datagram = &buf[..len];
    const PER_ROUND: usize = 8;

    let mut round = |send: &mut SendBatch, recv: &mut RecvBatch| {
        // Fan-out: PER_ROUND copies of the datagram to every destination.
        let list = (0..PER_ROUND).flat_map(|_| dests.iter().map(|&d| (datagram, d)));
        let sent = sender.send_batch(send, list).unwrap();
        assert_eq!(sent, PER_ROUND * dests.len());
        for r in receivers.iter_mut() {
            let mut got = 0;
            let deadline = Instant::now() + Duration::from_secs(5);
            while got < PER_ROUND && Instant::now() < deadline {
                if r.recv_batch(recv).unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                for (bytes, from) in recv.iter() {
                    assert_eq!(bytes.len(), len);
                    assert_eq!(from, sender.local_addr());
                    got += 1;
                }
            }
            assert_eq!(got, PER_ROUND);
        }
    };

    for _ in 0..3 {
        round(&mut send, &mut recv);
    }
    let (allocs, ()) = allocations_in(|| {
        for _ in 0..100 {
            round(&mut send, &mut recv);
        }
    });
    assert_eq!(allocs, 0, "socket batches allocated");
}

/// A claimed length never allocates more than the bytes that carry it. A
/// 9-byte payload claiming 2^40 elements (bincode's decoder, with serde's pre-allocation,
/// allocated 1 MiB for it) allocates nothing; a payload whose `Vec` claims more elements than
/// its bytes plus the decoder's spare for zero-size elements (4096) allocates nothing either;
/// one within them, or an honest one, allocates only as it decodes.
#[test]
fn claimed_lengths_allocate_nothing_beyond_their_bytes() {
    let mut nine = (1u64 << 40).to_le_bytes().to_vec();
    nine.push(0);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&nine));
    assert!(r.is_err());
    assert_eq!(n, 0, "a 9-byte payload allocated");
    let (n, r) = allocations_in(|| decode_payload::<String>(&nine));
    assert!(r.is_err());
    assert_eq!(n, 0);
    // 10,000 elements claimed, 16 bytes present: beyond the bytes and the spare.
    let mut short = 10_000u64.to_le_bytes().to_vec();
    short.extend_from_slice(&[0; 16]);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&short));
    assert!(r.is_err());
    assert_eq!(n, 0);
    // 1000 claimed, 16 bytes present: within the spare (zero-size elements could be genuine),
    // so the two elements present decode (one allocation) before the third fails.
    short[..8].copy_from_slice(&1000u64.to_le_bytes());
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&short));
    assert!(r.is_err());
    assert!(n <= 1, "{n} allocations for two decoded elements");
    // Two elements claimed where each needs 8 bytes but only 9 are left: the first decodes
    // (one allocation, for its element), the second fails.
    let mut two = 2u64.to_le_bytes().to_vec();
    two.extend_from_slice(&[1; 9]);
    let (n, r) = allocations_in(|| decode_payload::<Vec<u64>>(&two));
    assert!(r.is_err());
    assert!(n <= 1, "{n} allocations for one decoded element");
}
