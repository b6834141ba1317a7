//! The native format's data path: `parse_datagram` then `decode_payload` of every frame into message
//! types with strings, vectors, options, enums and nesting, as a bridge's import does. Any
//! panic, overflow or sanitizer report is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llbus_net::{decode_payload, parse_datagram, Kind, DEFAULT_MAX_DATAGRAM, MAX_DATAGRAM_LIMIT};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Order {
    id: u64,
    px: i64,
    qty: u32,
    side: Side,
    venue: String,
    tags: Vec<String>,
    legs: Vec<(u16, f64)>,
    note: Option<String>,
    flags: [bool; 3],
    ch: char,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum Side {
    Bid,
    Ask(u8),
    Cross { min: i32, max: i32 },
}

fuzz_target!(|data: &[u8]| {
    for max in [DEFAULT_MAX_DATAGRAM, MAX_DATAGRAM_LIMIT] {
        let Ok(frames) = parse_datagram(data, max) else {
            continue;
        };
        let n = frames.remaining();
        let mut seen = 0;
        for frame in frames {
            seen += 1;
            assert!(frame.payload.len() == usize::from(frame.header.payload_len));
            if frame.header.kind == Kind::Data {
                let _ = decode_payload::<Order>(frame.payload);
                let _ = decode_payload::<Vec<Order>>(frame.payload);
                let _ = decode_payload::<(u64, String)>(frame.payload);
                let _ = decode_payload::<Vec<Vec<u8>>>(frame.payload);
            }
        }
        assert_eq!(
            seen, n,
            "frame count changed between validation and iteration"
        );
    }
    // Payload decoding on raw bytes too, where the header would have stopped it.
    let _ = decode_payload::<Order>(data);
});
