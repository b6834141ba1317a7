//! ll-udp-pubsub v0.1 compatibility format: `decode_compat_packet` for `i64` (the common case),
//! a struct with strings, vectors and an enum, and `CompatControl::decode`. Any panic or
//! sanitizer report is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llbus_net::{decode_compat_packet, CompatControl, DEFAULT_MAX_DATAGRAM, MAX_DATAGRAM_LIMIT};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Reading {
    sensor: String,
    values: Vec<f32>,
    unit: Unit,
    seq: u64,
    ok: bool,
    extra: Option<Vec<(i16, String)>>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum Unit {
    Celsius,
    Pascal(u8),
    Other { name: String },
}

fuzz_target!(|data: &[u8]| {
    for max in [DEFAULT_MAX_DATAGRAM, MAX_DATAGRAM_LIMIT] {
        let _ = decode_compat_packet::<i64>(data, max);
        let _ = decode_compat_packet::<Reading>(data, max);
        let _ = decode_compat_packet::<String>(data, max);
    }
    if let Ok(c) = CompatControl::decode(data) {
        assert_eq!(Ok(c), CompatControl::decode(&c.encode()));
    }
});
