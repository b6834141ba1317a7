//! llbus-ipc: arbitrary mapping contents fed to the reader. The input is the whole mapping
//! (header and slots, as a faulty or hostile writer could leave it), followed by tail values
//! the writer "publishes" between reads. The reader must attach or refuse, and read or report
//! corruption: any panic or sanitizer report is a crash.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use llbus_ipc::{Bincode, Geometry, Kind, Pod, Region, RingReader, SlotCodec, HEADER_LEN};

/// Two geometries the fuzzer can reach: bincode slots and plain-data slots.
const GEOMETRIES: [Geometry; 2] = [
    Geometry { kind: Kind::Bytes, slot_size: 64, capacity: 4, fingerprint: 0, topic_id: 0 },
    Geometry { kind: Kind::Pod, slot_size: 16, capacity: 8, fingerprint: 0, topic_id: 0 },
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, data)) = data.split_first() else { return };
    let geo = GEOMETRIES[(pick & 1) as usize];
    let len = geo.mapping_len();
    let region = Arc::new(Region::heap(len));
    let (mapping, tails) = data.split_at(data.len().min(len));
    // With the top bit set, start from a well-formed header so the fuzzer reaches the slots.
    if pick & 0x80 != 0 {
        let mut header = [0u8; 24];
        header[..8].copy_from_slice(&llbus_ipc::MAGIC.to_le_bytes());
        header[8..12].copy_from_slice(&llbus_ipc::VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(geo.kind as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(geo.slot_size as u32).to_le_bytes());
        header[20..24].copy_from_slice(&(geo.capacity as u32).to_le_bytes());
        // SAFETY: nothing else holds the region.
        unsafe {
            region.poke(0, mapping);
            region.poke(0, &header);
        }
    } else {
        // SAFETY: nothing else holds the region.
        unsafe { region.poke(0, mapping) };
    }
    let Ok(mut rx) = RingReader::attach(region.clone()) else { return };
    let mut scratch = vec![0u8; geo.slot_size];
    for tail in tails.chunks(8) {
        let mut t = [0u8; 8];
        t[..tail.len()].copy_from_slice(tail);
        // SAFETY: the reader is idle between calls; nothing else holds the region.
        unsafe { region.poke(384, &t) };
        let r = rx.read_batch(16, |slot| {
            let _ = <Bincode as SlotCodec<(String, Vec<u16>, Option<u64>, Vec<()>)>>::decode(
                slot,
                &mut scratch,
            );
            let _ = <Pod as SlotCodec<[u64; 2]>>::decode(slot, &mut scratch);
        });
        if r.is_err() {
            return;
        }
    }
    assert!(HEADER_LEN <= len);
});
