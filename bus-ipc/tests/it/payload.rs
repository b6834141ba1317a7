//! Bincode payloads through a channel and the bounded decoder under them: a slot rewritten to
//! claim 2^40 zero-size elements or a length far beyond the slot is counted malformed at once,
//! a claim of zero-size elements in any container is refused at once, and a genuine vector of
//! zero-size elements arrives.

use std::time::{Duration, Instant};

use llbus::Message;
use llbus_ipc::{ChannelConfig, Receiver, Sender};

use crate::fixtures::{config_in, Dir};

/// docs/IPC.md "Bounded decoding": every element of every sequence or map, at any depth, is
/// charged against a budget of the payload's bytes, so zero-size elements cannot claim more
/// than the slot holds; strings may not claim more than the bytes left. Sets and maps of unit
/// values, nested and optional sequences, and a 2^40-byte string are refused at once.
#[test]
fn claims_of_zero_size_elements_in_any_container_are_refused_at_once() {
    use llbus::decode_bounded;
    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
    let huge = (1u64 << 40).to_le_bytes();
    let mut nested = huge.to_vec();
    nested.extend_from_slice(&huge);
    let mut optional = vec![1u8];
    optional.extend_from_slice(&huge);
    let mut padded = huge.to_vec();
    padded.extend_from_slice(&[0u8; 8]);
    let started = Instant::now();
    assert!(decode_bounded::<Vec<()>>(&padded).is_err(), "Vec<()>");
    assert!(
        decode_bounded::<VecDeque<()>>(&padded).is_err(),
        "VecDeque<()>"
    );
    assert!(
        decode_bounded::<BTreeSet<()>>(&padded).is_err(),
        "BTreeSet<()>"
    );
    assert!(
        decode_bounded::<HashSet<()>>(&padded).is_err(),
        "HashSet<()>"
    );
    assert!(
        decode_bounded::<BTreeMap<(), ()>>(&padded).is_err(),
        "BTreeMap<(), ()>"
    );
    assert!(
        decode_bounded::<HashMap<(), ()>>(&padded).is_err(),
        "HashMap<(), ()>"
    );
    assert!(
        decode_bounded::<Vec<Vec<()>>>(&nested).is_err(),
        "Vec<Vec<()>>"
    );
    assert!(
        decode_bounded::<Option<Vec<()>>>(&optional).is_err(),
        "Option<Vec<()>>"
    );
    assert!(
        decode_bounded::<(u8, Vec<()>)>(&optional).is_err(),
        "(u8, Vec<()>)"
    );
    assert!(decode_bounded::<String>(&padded).is_err(), "String");
    assert!(decode_bounded::<Vec<u8>>(&padded).is_err(), "Vec<u8>");
    // Within the budget, one element per byte of payload: 16 bytes hold a Vec<()> of 8.
    let mut fits = 8u64.to_le_bytes().to_vec();
    fits.extend_from_slice(&[0u8; 8]);
    let (v, left) = decode_bounded::<Vec<()>>(&fits).expect("8 units in 16 bytes");
    assert_eq!((v.len(), left), (8, 8));
    // A million-byte payload of nested unit vectors: bounded work, far under a second.
    let mut wide = vec![0u8; 1 << 20];
    wide[..8].copy_from_slice(&((1u64 << 20) / 8 - 1).to_le_bytes());
    let _ = decode_bounded::<Vec<Vec<()>>>(&wide);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "decoding took {:?}",
        started.elapsed()
    );
}

/// A zero-size element type with a hand-written schema.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Unit;

impl llbus::Schema for Unit {
    const SHAPE: u64 = llbus::ShapeHasher::new().name("Unit").finish();
}

#[derive(Message, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "ipc.units")]
struct Units {
    items: Vec<Unit>,
}

/// docs/IPC.md: "a 16-byte slot claiming a `Vec<()>` of 2^40 elements is refused at once"; "a
/// bincode length prefix is checked against the slot"; "a slot that does not decode is counted
/// (`malformed`) and skipped". Through a live bincode channel: slots rewritten (through
/// `/proc`, as a peer would) to claim 2^40 zero-size elements, and to a length prefix far
/// beyond the slot, are each counted malformed, promptly; the next genuine message arrives.
#[test]
fn scribbled_bincode_slots_are_counted_malformed_at_once() {
    use std::os::unix::fs::FileExt;
    let dir = Dir::new("bincode");
    let cfg = ChannelConfig {
        max_message: 64,
        ..config_in(&dir.0)
    };
    let mut tx = Sender::<Units, llbus_ipc::Bincode>::create("bz", &cfg).expect("create");
    let mut rx = Receiver::<Units, llbus_ipc::Bincode>::open("bz", &cfg).expect("open");
    let memory = tests::local::memfds_of(std::process::id())
        .into_iter()
        .find(|p| std::fs::read_link(p).is_ok_and(|t| t.to_string_lossy().contains("llbus-ipc-bz")))
        .expect("the channel's memory in /proc/self/fd");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&memory)
        .expect("open the memory");
    let slot = 64 + 8;
    for _ in 0..3 {
        assert!(tx.try_send(&Units { items: vec![] }).expect("send"));
    }
    // Slot 0: 8 bytes claiming 2^40 units. Slot 1: a length prefix of 4 GiB.
    let mut claim = 8u32.to_le_bytes().to_vec();
    claim.extend_from_slice(&[0; 4]);
    claim.extend_from_slice(&(1u64 << 40).to_le_bytes());
    file.write_at(&claim, 1024).expect("scribble");
    file.write_at(&u32::MAX.to_le_bytes(), 1024 + slot)
        .expect("scribble");
    let started = Instant::now();
    let mut got = Vec::new();
    let (n, malformed) = rx.recv_batch(8, |m| got.push(m)).expect("recv");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "decoding took {:?}",
        started.elapsed()
    );
    assert_eq!((n, malformed), (3, 2), "read and malformed");
    assert_eq!(got, vec![Units { items: vec![] }]);
}

/// docs/IPC.md and bus/src/payload.rs: the element budget refuses only claims "the payload
/// could [not] hold"; "no valid value is refused". A genuine message whose last field is a
/// non-empty vector of zero-size elements (here one `Unit`: 8 bytes, the length prefix, and
/// nothing after it) must arrive, not be counted malformed; the bounded decoder must accept
/// what bincode wrote.
#[test]
fn a_genuine_vector_of_zero_size_elements_arrives() {
    let dir = Dir::new("zst");
    let cfg = ChannelConfig {
        max_message: 64,
        ..config_in(&dir.0)
    };
    let mut tx = Sender::<Units, llbus_ipc::Bincode>::create("zst", &cfg).expect("create");
    let mut rx = Receiver::<Units, llbus_ipc::Bincode>::open("zst", &cfg).expect("open");
    let sent = Units {
        items: vec![Unit, Unit, Unit],
    };
    assert!(tx.try_send(&sent).expect("send"));
    let mut got = Vec::new();
    let (n, malformed) = rx.recv_batch(8, |m| got.push(m)).expect("recv");
    assert_eq!((n, malformed), (1, 0), "read and malformed");
    assert_eq!(got, vec![sent]);
    // The decoder alone: a `Vec<()>` of one, as bincode writes it.
    assert!(
        llbus::decode_bounded::<Vec<()>>(&1u64.to_le_bytes()).is_ok(),
        "decode_bounded refuses vec![()]"
    );
}
