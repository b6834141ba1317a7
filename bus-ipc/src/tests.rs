//! The shared ring's unit tests: heap regions, so that they run under miri.

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;

use crate::codec::{Bincode, Pod, SlotCodec};
use crate::layout::{Geometry, Kind, LayoutError, HEADER_LEN};
use crate::region::Region;
use crate::ring::{RingError, RingReader, RingWriter};

fn geo(capacity: usize) -> Geometry {
    Geometry {
        kind: Kind::Pod,
        slot_size: 8,
        capacity,
        fingerprint: 0xfeed,
        topic_id: 9,
    }
}

fn pair(capacity: usize) -> (RingWriter, RingReader) {
    let g = geo(capacity);
    let region = Arc::new(Region::heap(g.mapping_len()));
    let tx = RingWriter::create(region.clone(), g).unwrap();
    let rx = RingReader::attach(region).unwrap();
    (tx, rx)
}

fn push(tx: &mut RingWriter, v: u64) -> bool {
    tx.write_batch(1, |s| Pod::encode(&v, s, &mut []).is_ok())
        .unwrap()
        == 1
}

fn pop_all(rx: &mut RingReader, max: usize) -> Vec<u64> {
    let mut out = Vec::new();
    rx.read_batch(max, |s| {
        out.push(<Pod as SlotCodec<u64>>::decode(s, &mut []).unwrap())
    })
    .unwrap();
    out
}

#[test]
fn fifo_full_and_wrap() {
    let (mut tx, mut rx) = pair(4);
    for v in 0..4 {
        assert!(push(&mut tx, v));
    }
    assert!(!push(&mut tx, 99), "a full ring takes nothing");
    assert_eq!(pop_all(&mut rx, 3), [0, 1, 2]);
    for v in 4..7 {
        assert!(push(&mut tx, v));
    }
    assert_eq!(pop_all(&mut rx, 100), [3, 4, 5, 6]);
    assert_eq!(rx.available().unwrap(), 0);
}

#[test]
fn header_is_checked_at_attach() {
    let g = geo(4);
    let region = Arc::new(Region::heap(g.mapping_len()));
    assert_eq!(
        RingReader::attach(region.clone()).unwrap_err(),
        LayoutError::NotReady
    );
    let _tx = RingWriter::create(region.clone(), g).unwrap();
    let poke = |at: usize, b: &[u8]| {
        // SAFETY: the halves are idle while we scribble.
        unsafe { region.poke(at, b) }
    };
    poke(8, &[2]); // version
    assert_eq!(
        RingReader::attach(region.clone()).unwrap_err(),
        LayoutError::Version(2)
    );
    poke(8, &[1]);
    poke(20, &3u32.to_le_bytes()); // capacity 3: not a power of two
    assert_eq!(
        RingReader::attach(region.clone()).unwrap_err(),
        LayoutError::Corrupt("capacity")
    );
    poke(20, &8u32.to_le_bytes()); // bigger than the mapping
    assert_eq!(
        RingReader::attach(region.clone()).unwrap_err(),
        LayoutError::Corrupt("mapping length")
    );
    poke(20, &4u32.to_le_bytes());
    poke(12, &7u32.to_le_bytes()); // unknown kind
    assert_eq!(
        RingReader::attach(region.clone()).unwrap_err(),
        LayoutError::Corrupt("kind")
    );
}

#[test]
fn forged_tail_poisons_the_reader() {
    let (mut tx, mut rx) = pair(4);
    assert!(push(&mut tx, 1));
    let region = rx.region().clone();
    let tail_at = 384;
    for forged in [5u64, u64::MAX, 1 << 40] {
        let (_, mut rx2) = (0, RingReader::attach(region.clone()).unwrap());
        // SAFETY: the halves are idle while we scribble.
        unsafe { region.poke(tail_at, &forged.to_le_bytes()) };
        assert!(matches!(
            rx2.read_batch(8, |_| ()),
            Err(RingError::Corrupt(_))
        ));
        // Poisoned for good, even once the value looks right again.
        // SAFETY: as above.
        unsafe { region.poke(tail_at, &1u64.to_le_bytes()) };
        assert!(rx2.available().is_err());
    }
    // A tail that moves backwards is refused too.
    assert_eq!(pop_all(&mut rx, 8), [1]);
    // SAFETY: as above.
    unsafe { region.poke(tail_at, &0u64.to_le_bytes()) };
    assert!(rx.available().is_err());
}

#[test]
fn forged_head_poisons_the_writer() {
    let (mut tx, _rx) = pair(4);
    for v in 0..4 {
        assert!(push(&mut tx, v));
    }
    let region = tx.region().clone();
    // A head past the tail would claim more free slots than exist.
    // SAFETY: the halves are idle while we scribble.
    unsafe { region.poke(512, &9u64.to_le_bytes()) };
    assert!(matches!(tx.free(), Err(RingError::Corrupt(_))));
    assert!(tx.write_batch(1, |_| true).is_err());
}

/// A heap region of one header and `slot` bytes of slot: the slot as [`Slots`].
fn one_slot(slot: usize) -> Region {
    Region::heap(HEADER_LEN + slot)
}

#[test]
fn bincode_slots_check_their_length() {
    let size = <Bincode as SlotCodec<String>>::slot_size(32);
    let region = one_slot(size);
    let mut scratch = vec![0u8; size];
    let mut slot = region.slots(HEADER_LEN, size).unwrap();
    Bincode::encode(&"hello".to_string(), &mut slot, &mut scratch).unwrap();
    assert_eq!(
        <Bincode as SlotCodec<String>>::decode(&slot, &mut scratch).unwrap(),
        "hello"
    );
    assert!(Bincode::encode(&"x".repeat(64), &mut slot, &mut scratch).is_err());
    // SAFETY: nothing else uses the region.
    unsafe { region.poke(HEADER_LEN, &u32::MAX.to_le_bytes()) };
    assert!(<Bincode as SlotCodec<String>>::decode(&slot, &mut scratch).is_err());
    // A length prefix inside the value that claims a huge string fails without allocating it.
    // SAFETY: as above.
    unsafe {
        region.poke(HEADER_LEN, &8u32.to_le_bytes());
        region.poke(HEADER_LEN + 8, &(1u64 << 62).to_le_bytes());
    }
    assert!(<Bincode as SlotCodec<String>>::decode(&slot, &mut scratch).is_err());
}

/// A 16-byte slot claiming a `Vec<()>` of 2^40 elements: refused at once (bincode's own
/// decoder counted bytes only, and would iterate 2^40 times), and so are nested zero-size
/// sequences that claim more than the slot's bytes plus a fixed spare. Bounded in time: the test would hang
/// otherwise.
#[test]
fn zero_size_elements_cannot_claim_more_than_the_slot() {
    let region = one_slot(16);
    let slot = region.slots(HEADER_LEN, 16).unwrap();
    let mut scratch = [0u8; 16];
    // SAFETY: nothing else uses the region.
    unsafe {
        region.poke(HEADER_LEN, &8u32.to_le_bytes());
        region.poke(HEADER_LEN + 8, &(1u64 << 40).to_le_bytes());
    }
    let started = std::time::Instant::now();
    assert_eq!(
        <Bincode as SlotCodec<Vec<()>>>::decode(&slot, &mut scratch),
        Err(crate::CodecError::Malformed)
    );
    assert!(<Bincode as SlotCodec<Vec<Vec<()>>>>::decode(&slot, &mut scratch).is_err());
    assert!(
        <Bincode as SlotCodec<std::collections::BTreeMap<(), ()>>>::decode(&slot, &mut scratch)
            .is_err()
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // What the slot can back still decodes: an empty one, and as many units as bytes left.
    // SAFETY: nothing else uses the region.
    unsafe { region.poke(HEADER_LEN + 8, &0u64.to_le_bytes()) };
    assert_eq!(
        <Bincode as SlotCodec<Vec<()>>>::decode(&slot, &mut scratch),
        Ok(Vec::new())
    );
    let big = <Bincode as SlotCodec<Vec<()>>>::slot_size(64);
    let region = one_slot(big);
    let mut slot = region.slots(HEADER_LEN, big).unwrap();
    let mut scratch = vec![0u8; big];
    Bincode::encode(&vec![(); 3], &mut slot, &mut scratch).unwrap();
    // 8 bytes of prefix and no element bytes: a genuine vector of zero-size elements, within
    // the decoder's spare allowance, decodes.
    assert_eq!(
        <Bincode as SlotCodec<Vec<()>>>::decode(&slot, &mut scratch),
        Ok(vec![(); 3])
    );
}

/// Shared bytes are only copied, in whole words, inside the run: a read or write that would
/// leave it, or start off a word, copies nothing.
#[test]
fn slots_copy_whole_words_inside_the_run_only() {
    let region = one_slot(16);
    let mut s = region.slots(HEADER_LEN, 16).unwrap();
    assert!(region.slots(HEADER_LEN + 1, 8).is_none());
    assert!(region.slots(HEADER_LEN, 24).is_none());
    assert!(s.write(0, b"0123456789abc"));
    let mut out = [0u8; 16];
    assert!(s.read(0, &mut out));
    assert_eq!(
        &out, b"0123456789abc\0\0\0",
        "a partial last word is padded with zeros"
    );
    assert!(!s.write(4, b"x"), "off a word");
    assert!(!s.write(8, &[1; 9]), "past the end");
    let mut nine = [0u8; 9];
    assert!(!s.read(8, &mut nine));
    assert_eq!(
        s.read_pod::<u64>(8),
        Some(u64::from_ne_bytes(*b"89abc\0\0\0"))
    );
    assert_eq!(s.read_pod::<[u64; 3]>(0), None);
}

#[test]
fn arbitrary_mappings_never_panic() {
    // The fuzz target's property, on a few fixed patterns (miri runs this one too).
    let g = geo(4);
    for fill in [0u8, 0xff, 0x01, 0x80] {
        let region = Arc::new(Region::heap(g.mapping_len()));
        let mut bytes = vec![fill; region.len()];
        bytes[..8].copy_from_slice(&crate::MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        bytes[12..16].copy_from_slice(&2u32.to_le_bytes());
        bytes[16..20].copy_from_slice(&8u32.to_le_bytes());
        bytes[20..24].copy_from_slice(&4u32.to_le_bytes());
        // SAFETY: nothing else holds the region yet.
        unsafe { region.poke(0, &bytes) };
        if let Ok(mut rx) = RingReader::attach(region) {
            let mut scratch = [0u8; 8];
            for _ in 0..3 {
                let _ = rx.read_batch(8, |s| {
                    let _ = <Bincode as SlotCodec<Vec<u8>>>::decode(s, &mut scratch);
                });
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    PushN(u8),
    Pop(u8),
    /// `write_runs` of up to n values, filling at most `stop` slots in total.
    PushRuns(u8, u8),
    PopRuns(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::Push),
        (0u8..12).prop_map(Op::PushN),
        (0u8..12).prop_map(Op::Pop),
        (0u8..12, 0u8..12).prop_map(|(n, stop)| Op::PushRuns(n, stop)),
        (0u8..12).prop_map(Op::PopRuns),
    ]
}

proptest! {
    // Under miri: few cases and no failure file (miri isolates the file system).
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        failure_persistence: if cfg!(miri) { None } else { ProptestConfig::default().failure_persistence },
        ..ProptestConfig::default()
    })]

    /// The shared ring against a `VecDeque` model of the same capacity.
    #[test]
    fn matches_vecdeque(cap_log in 0u32..4, ops in proptest::collection::vec(op(), 0..64)) {
        let cap = 1usize << cap_log;
        let (mut tx, mut rx) = pair(cap);
        let mut model = VecDeque::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Push(v) => {
                    let ok = push(&mut tx, v);
                    prop_assert_eq!(ok, model.len() < cap);
                    if ok { model.push_back(v); }
                }
                Op::PushN(n) => {
                    let before = next;
                    let wrote = tx.write_batch(n as usize, |s| {
                        let v = next;
                        next += 1;
                        Pod::encode(&v, s, &mut []).is_ok()
                    }).unwrap();
                    prop_assert_eq!(wrote, (n as usize).min(cap - model.len()));
                    model.extend(before..before + wrote as u64);
                }
                Op::PushRuns(n, stop) => {
                    let before = next;
                    let mut room = stop as usize;
                    let wrote = tx.write_runs(n as usize, |run, slots| {
                        assert_eq!(run.len(), slots * 8);
                        let k = slots.min(room);
                        for i in 0..k {
                            assert!(run.write(i * 8, &next.to_le_bytes()));
                            next += 1;
                        }
                        room -= k;
                        k
                    }).unwrap();
                    prop_assert_eq!(wrote, (n as usize).min(cap - model.len()).min(stop as usize));
                    model.extend(before..before + wrote as u64);
                }
                Op::PopRuns(n) => {
                    let mut got = Vec::new();
                    let read = rx.read_runs(n as usize, |run, slots| {
                        assert_eq!(run.len(), slots * 8);
                        let mut bytes = vec![0u8; run.len()];
                        assert!(run.read(0, &mut bytes));
                        got.extend(bytes.chunks_exact(8).map(|b| {
                            u64::from_le_bytes(b.try_into().unwrap())
                        }));
                    }).unwrap();
                    prop_assert_eq!(read, got.len());
                    let want: Vec<u64> = (0..(n as usize).min(model.len()))
                        .filter_map(|_| model.pop_front())
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Op::Pop(n) => {
                    let got = pop_all(&mut rx, n as usize);
                    let want: Vec<u64> = (0..(n as usize).min(model.len()))
                        .filter_map(|_| model.pop_front())
                        .collect();
                    prop_assert_eq!(got, want);
                }
            }
            prop_assert_eq!(rx.available().unwrap(), model.len());
            prop_assert_eq!(tx.free().unwrap(), cap - model.len());
        }
    }

    /// Whatever bytes a peer leaves in the mapping, the reader returns values or errors.
    #[test]
    fn reader_survives_any_mapping(bytes in proptest::collection::vec(any::<u8>(), 0..256), tail in any::<u64>(), head in any::<u64>()) {
        let g = Geometry { kind: Kind::Bytes, slot_size: 64, capacity: 2, fingerprint: 0, topic_id: 0 };
        let region = Arc::new(Region::heap(g.mapping_len()));
        let _tx = RingWriter::create(region.clone(), g).unwrap();
        // SAFETY: the halves are idle while we scribble.
        unsafe {
            region.poke(HEADER_LEN, &bytes);
            region.poke(512, &head.to_le_bytes());
            region.poke(384, &tail.to_le_bytes());
        }
        match RingReader::attach(region) {
            Ok(mut rx) => {
                let mut scratch = [0u8; 64];
                let r = rx.read_batch(8, |s| { let _ = <Bincode as SlotCodec<String>>::decode(s, &mut scratch); });
                prop_assert!(r.is_ok() == (tail.wrapping_sub(head) <= 2));
            }
            Err(e) => prop_assert!(matches!(e, LayoutError::Corrupt(_)), "{:?}", e),
        }
    }
}

#[test]
fn two_threads_keep_order() {
    let (mut tx, mut rx) = pair(8);
    let n: u64 = if cfg!(miri) { 200 } else { 100_000 };
    let writer = std::thread::spawn(move || {
        let mut v = 0;
        while v < n {
            let wrote = tx
                .write_batch(4, |s| {
                    let ok = v < n && Pod::encode(&v, s, &mut []).is_ok();
                    v += ok as u64;
                    ok
                })
                .unwrap();
            if wrote == 0 {
                tx.park(std::time::Duration::from_millis(1)).unwrap();
            }
        }
    });
    let mut expect = 0u64;
    while expect < n {
        let got = rx
            .read_batch(16, |s| {
                let v: u64 = Pod::decode(s, &mut []).unwrap();
                assert_eq!(v, expect);
                expect += 1;
            })
            .unwrap();
        if got == 0 {
            rx.park(std::time::Duration::from_millis(1)).unwrap();
        }
    }
    writer.join().unwrap();
}

/// The fence mode this host gives (printed: CI machines differ), and that a reader parked on an
/// empty ring is woken by a publish from another thread long before its timeout, in either mode.
#[test]
#[cfg_attr(miri, ignore)] // real futexes and membarrier
fn a_parked_reader_wakes_at_a_publish() {
    println!("asymmetric fences: {}", crate::sys::asymmetric_fences());
    let (mut tx, mut rx) = pair(4);
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        push(&mut tx, 7);
        tx
    });
    let started = std::time::Instant::now();
    // A 10 s timeout: only a wake-up ends the park early.
    while rx.available().unwrap() == 0 {
        rx.park(std::time::Duration::from_secs(10)).unwrap();
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "woken late"
    );
    assert_eq!(pop_all(&mut rx, 4), [7]);
    drop(writer.join());
}

/// A peer that scribbles on every slot and on `tail` while the reader reads: wrong values or
/// `Corrupt`, never a panic; and under miri, no data race either, because the reader reaches
/// slot bytes only through atomic copies, never a reference (which this test, run under miri,
/// would report as a race). The peer thread stands in for another process, whose writes reach
/// us as whole aligned words: it stores atomic words (`Slots::scribble`).
#[test]
fn a_peer_scribbling_while_we_read_is_no_data_race() {
    let g = Geometry {
        kind: Kind::Bytes,
        slot_size: 32,
        capacity: 4,
        fingerprint: 0,
        topic_id: 0,
    };
    let region = Arc::new(Region::heap(g.mapping_len()));
    let _tx = RingWriter::create(region.clone(), g).unwrap();
    let mut rx = RingReader::attach(region.clone()).unwrap();
    let rounds: u64 = if cfg!(miri) { 40 } else { 2_000 };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peer = {
        let (region, done) = (region.clone(), done.clone());
        std::thread::spawn(move || {
            let slots = region.slots(HEADER_LEN, 4 * 32).unwrap();
            let mut i = 0u64;
            // Until the reader is done, whatever it does: the writes overlap its reads.
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let word = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                for at in (0..4 * 32).step_by(8) {
                    slots.scribble(at, word.rotate_left(at as u32));
                }
                region
                    .header()
                    .tail
                    .0
                    .store(i % 6, std::sync::atomic::Ordering::Release);
                i += 1;
                std::thread::yield_now();
            }
        })
    };
    let mut scratch = [0u8; 32];
    let (mut read, mut corrupt, mut turns) = (0u64, 0u64, 0u64);
    // Until some slots were read while the peer writes (bounded: it must end regardless).
    while read < rounds / 4 && turns < rounds * 100 {
        turns += 1;
        match rx.read_batch(4, |s| {
            let _ = <Bincode as SlotCodec<Vec<u8>>>::decode(s, &mut scratch);
            let _ = <Pod as SlotCodec<[u64; 4]>>::decode(s, &mut scratch);
        }) {
            Ok(n) => read += n as u64,
            Err(_) => {
                corrupt += 1;
                rx = RingReader::attach(region.clone()).unwrap_or(rx);
            }
        }
        std::thread::yield_now();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    peer.join().unwrap();
    // What matters is that it ended without UB or a panic, having read while the peer wrote.
    assert!(read > 0, "never read a slot (corrupt {corrupt} times)");
}

/// Only ordinary shared memory is adopted: a channel's own memory file passes the file-system
/// check, a file elsewhere (procfs here, never tmpfs) is refused by it, as a huge-page memory
/// file is (`a_writer_handing_over_huge_pages_cannot_kill_the_reader`).
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore)]
fn only_shared_memory_files_are_adopted() {
    use crate::file::{check_shmem, create_region, AdoptError};
    let (fd, _region) = create_region("shmem-check", HEADER_LEN + 4096).expect("memory file");
    assert!(check_shmem(&fd).is_ok(), "a memfd is shared memory");
    let other: std::os::fd::OwnedFd = std::fs::File::open("/proc/self/status")
        .expect("procfs")
        .into();
    match check_shmem(&other) {
        Err(AdoptError::Shape(why)) => assert!(why.contains("not ordinary shared memory"), "{why}"),
        r => panic!("a procfs file passed the shared-memory check: {r:?}"),
    }
}
