//! The network decoders are bounded by the payload's bytes, zero-size elements included: a
//! datagram whose payload nests sequences of zero-size elements, each claiming as many as the
//! bytes left, is refused after at most one element per payload byte plus a fixed spare
//! (`SPARE_ELEMENTS`). Counted by a zero-size type that counts its own decodes, not timed: a
//! decoder that only checked each length against the bytes left would take about `bytes^2 / 8`
//! steps here.

use std::cell::Cell;

use llbus_net::{
    decode_compat_packet, decode_payload, parse_datagram, BatchEncoder, DataMeta,
    DEFAULT_MAX_DATAGRAM,
};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The zero-size elements a payload may hold beyond one element per byte (`SPARE_ELEMENTS` in
/// `bus/src/payload.rs`).
const SPARE_ELEMENTS: usize = 4096;

thread_local! {
    /// Decodes of [`Tick`] on this thread.
    static STEPS: Cell<usize> = const { Cell::new(0) };
}

/// A zero-size element that counts how often it is decoded.
#[derive(Debug)]
struct Tick;

impl<'de> Deserialize<'de> for Tick {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tick, D::Error> {
        STEPS.with(|s| s.set(s.get() + 1));
        <()>::deserialize(d).map(|()| Tick)
    }
}

/// Raw little-endian words with no length prefix (a tuple in the bincode layout).
struct Words(Vec<u64>);

impl Serialize for Words {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(self.0.len())?;
        for w in &self.0 {
            t.serialize_element(w)?;
        }
        t.end()
    }
}

/// `outer` sequences, each claiming `inner` zero-size elements, then `pad` words of padding
/// that keep every claim within the bytes left: a `Vec<Vec<Tick>>` in the bincode layout.
fn nested(outer: u64, inner: u64, pad: usize) -> Words {
    let mut w = vec![outer];
    w.extend(std::iter::repeat_n(inner, outer as usize));
    w.extend(std::iter::repeat_n(0, pad));
    Words(w)
}

/// Runs `decode`, returning whether it succeeded and how many elements it decoded.
fn counted(decode: impl FnOnce() -> bool) -> (bool, usize) {
    STEPS.with(|s| s.set(0));
    let ok = decode();
    (ok, STEPS.with(Cell::get))
}

/// A native datagram of one data frame carrying `value`, then decodes that frame's payload as
/// `T` in `counted`: (whether it decoded, element decodes, payload bytes).
fn through_a_datagram<T: for<'de> Deserialize<'de>>(
    value: &impl Serialize,
) -> (bool, usize, usize) {
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
    let mut enc = BatchEncoder::new(&mut buf);
    let meta = DataMeta {
        topic_id: 7,
        fingerprint: 9,
        session: 1,
        seq: 1,
        timestamp_ns: 0,
    };
    assert!(enc.push_data(meta, value).is_ok(), "the payload fits");
    let datagram = enc.as_bytes().to_vec();
    let frame = parse_datagram(&datagram, DEFAULT_MAX_DATAGRAM)
        .ok()
        .and_then(|mut frames| frames.next());
    let Some(frame) = frame else {
        panic!("the datagram parses, with one data frame");
    };
    let (ok, steps) = counted(|| decode_payload::<T>(frame.payload).is_ok());
    (ok, steps, frame.payload.len())
}

#[test]
fn nested_zero_size_sequences_in_a_datagram_are_refused_in_bounded_steps() {
    // 64 inner sequences of 700 claimed elements each in a 1224-byte payload. Each claim is
    // within the bytes left when it is read (the last one's, 704), so only a budget over all
    // the elements refuses it: without one this would be 64 * 700 = 44,800 steps.
    let (ok, steps, len) = through_a_datagram::<Vec<Vec<Tick>>>(&nested(64, 700, 88));
    assert_eq!(len, 1224);
    assert!(!ok, "refused");
    assert!(
        steps <= len + SPARE_ELEMENTS,
        "{steps} element decodes for a {len}-byte payload"
    );
    // A value that claims no more elements than the budget decodes, zero-size elements with no
    // bytes after their length prefix included (what bincode writes for them).
    let (ok, steps, _) = through_a_datagram::<(Vec<Vec<Tick>>, u64)>(&nested(2, 3, 1));
    assert!(ok && steps == 6, "decoded {ok}, {steps} elements");
    let (ok, steps, _) = through_a_datagram::<Vec<Vec<Tick>>>(&nested(2, 1000, 0));
    assert!(ok && steps == 2000, "decoded {ok}, {steps} elements");
}

#[test]
fn nested_zero_size_sequences_in_a_compat_datagram_are_refused_in_bounded_steps() {
    // ll-udp-pubsub v0.1: `Packet { data, sent_ts }`, bincode 1 with trailing bytes allowed.
    let mut words = nested(64, 700, 88).0;
    words.push(0); // sent_ts
    let datagram: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (ok, steps) =
        counted(|| decode_compat_packet::<Vec<Vec<Tick>>>(&datagram, DEFAULT_MAX_DATAGRAM).is_ok());
    assert!(!ok, "refused");
    assert!(
        steps <= datagram.len() + SPARE_ELEMENTS,
        "{steps} element decodes for a {}-byte datagram",
        datagram.len()
    );
}

/// A recursive type: `Node` as deep as the payload allows.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum Tree {
    Leaf,
    Node(Box<Tree>),
}

#[test]
fn a_payload_nested_deeper_than_the_limit_is_refused_without_overflowing_the_stack() {
    // `Node` 16,383 times then `Leaf`: a 64 KiB payload, one enum level per 4 bytes. Decoded on
    // a small stack, which a decoder that recursed once per level would overflow.
    let chain = |depth: usize| -> Vec<u8> {
        let mut payload: Vec<u8> = std::iter::repeat_n(1u32, depth)
            .flat_map(u32::to_le_bytes)
            .collect();
        payload.extend_from_slice(&0u32.to_le_bytes());
        payload
    };
    let deep = chain((1 << 14) - 1);
    let refused = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || decode_payload::<Tree>(&deep).is_err())
        .map(|t| t.join());
    assert!(matches!(refused, Ok(Ok(true))), "{refused:?}");
    // A shallow chain decodes.
    assert!(decode_payload::<Tree>(&chain(8)).is_ok());
}
