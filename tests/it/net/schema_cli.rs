//! The commands built on the schema frames, run as processes (`llbus echo`, `spy --decode`,
//! `llbus play`, `llbus record`): fed by a hostile publisher that serves the shapes and payloads
//! it likes, and given hostile recordings. Each test asserts a promise of docs/PROTOCOL.md
//! ("Schema frames"), SECURITY.md, docs/RECORDING.md or the modules' docs. The frames
//! themselves are checked in `bus-net/tests/it/schema.rs`.
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use llbus::schema::{decode, Fields, Primitive, Shape, Variant};
use llbus_net::{
    BridgeConfig, Endpoint, Event, RecvBatch, SendBatch, SocketConfig, SocketWire, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM,
};
use tests::bridges::{export, long_names, HostilePub, NoData};
use tests::cli::{llbus, llbus_bin, CountersDir};

// ---------------------------------------------------------------------------------------------
// A hostile publisher feeding `llbus echo` and `llbus spy --decode`.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn str_bytes(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_escapes_hostile_names_and_strings_and_skips_what_does_not_fit() {
    let _ = llbus_bin();
    let evil = "\u{1b}]0;pwned\u{7}\u{9b}2J\u{202e}\u{2066}\u{85}\u{7f}";
    let shape = Shape::structure(
        &format!("T{evil}"),
        Fields::named([
            (
                format!("f{evil}").as_str(),
                Shape::enumeration(
                    &format!("E{evil}"),
                    [Variant::new(&format!("V{evil}"), Fields::Unit)],
                ),
            ),
            ("s", Shape::Str),
        ]),
    );
    let mut good = 0u32.to_le_bytes().to_vec();
    good.extend(str_bytes(evil));
    // A variant index out of range, a string length of 2^63, a short one.
    let mut bad_variant = 5u32.to_le_bytes().to_vec();
    bad_variant.extend(str_bytes("x"));
    let mut huge = 0u32.to_le_bytes().to_vec();
    huge.extend_from_slice(&(1u64 << 63).to_le_bytes());
    let payloads = vec![bad_variant, huge, vec![0, 0], good.clone()];
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.evil", &shape, None)],
        payloads,
    );
    let dir = CountersDir::new("schema-echo-evil");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "schema.evil",
            "--count",
            "3",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "echo failed: {err}\n{text}");
    assert!(
        !text.chars().any(|c| unsafe_char(c) && c != '\n'),
        "{text:?}"
    );
    assert!(!err.chars().any(|c| unsafe_char(c) && c != '\n'), "{err:?}");
    let expected = serde_json::json!({ format!("f{evil}"): format!("V{evil}"), "s": evil });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert_eq!(v, expected);
    }

    // spy --decode: the same, beside each header.
    let out = llbus(
        &dir,
        &[
            "spy",
            "--publisher",
            &addr,
            "--topic",
            "schema.evil",
            "--count",
            "8",
            "--decode",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.chars().any(|c| unsafe_char(c) && c != '\n'),
        "{text:?}"
    );
    assert!(text.contains("undecodable"), "{text}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_prints_a_map_with_tuple_keys() {
    let _ = llbus_bin();
    // struct Grid { cells: HashMap<(u8, u8), u32> }
    let shape = Shape::structure(
        "Grid",
        Fields::named([(
            "cells",
            Shape::Map {
                key: Box::new(Shape::Tuple(vec![
                    Shape::Primitive(Primitive::U8),
                    Shape::Primitive(Primitive::U8),
                ])),
                value: Box::new(Shape::Primitive(Primitive::U32)),
            },
        )]),
    );
    let mut payload = 1u64.to_le_bytes().to_vec();
    payload.extend_from_slice(&[1, 2]);
    payload.extend_from_slice(&7u32.to_le_bytes());
    assert!(decode(&payload, &shape).is_ok(), "the decoder takes it");
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.grid", &shape, None)],
        vec![payload],
    );
    let dir = CountersDir::new("schema-echo-grid");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "schema.grid",
            "--count",
            "1",
            "--duration-s",
            "3",
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "stdout: {text}\nstderr: {err}");
}

// ---------------------------------------------------------------------------------------------
// Hostile recordings given to `llbus play` (RECORDING.md "Replay", play.rs: "one cut off by a
// crash plays up to its last chunk").
/// An MCAP record: opcode, u64 length, content.
fn record(op: u8, content: &[u8]) -> Vec<u8> {
    let mut r = vec![op];
    r.extend_from_slice(&(content.len() as u64).to_le_bytes());
    r.extend_from_slice(content);
    r
}

fn mcap_str(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u32).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

/// A zstd frame holding `data` in one raw block.
fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let mut f = 0xFD2F_B528u32.to_le_bytes().to_vec();
    // Single segment, 1-byte content size.
    f.push(0x20);
    f.push(data.len() as u8);
    let block = 1 | ((data.len() as u32) << 3);
    f.extend_from_slice(&block.to_le_bytes()[..3]);
    f.extend_from_slice(data);
    f
}

/// A recording of 9 bytes of zstd-compressed chunk that claims a record of 1 TiB inside.
fn chunk_bomb() -> Vec<u8> {
    let magic = b"\x89MCAP0\r\n";
    let mut file = magic.to_vec();
    let mut header = mcap_str("llbus");
    header.extend(mcap_str("test"));
    file.extend(record(0x01, &header));
    // Inside the chunk: a Message record (0x05) whose length says 1 TiB.
    let mut inner = vec![0x05];
    inner.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let compressed = zstd_raw(&inner);
    let mut chunk = Vec::new();
    chunk.extend_from_slice(&0u64.to_le_bytes());
    chunk.extend_from_slice(&0u64.to_le_bytes());
    chunk.extend_from_slice(&(inner.len() as u64).to_le_bytes());
    chunk.extend_from_slice(&0u32.to_le_bytes());
    chunk.extend(mcap_str("zstd"));
    chunk.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
    chunk.extend(compressed);
    file.extend(record(0x06, &chunk));
    file
}

/// A file removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("llbus-play-{name}-{}.mcap", std::process::id()));
        std::fs::write(&path, bytes).expect("written");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `llbus play FILE` must end with an error message of its own: no signal, no panic.
fn assert_play_refuses(dir: &CountersDir, file: &TempFile) {
    let out = llbus(
        dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{:?}: {err}", out.status);
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_refuses_garbage_and_truncated_files_with_a_message() {
    let _ = llbus_bin();
    let dir = CountersDir::new("schema-play-garbage");
    let empty = TempFile::new("empty", b"");
    let noise = TempFile::new("noise", &[0xa5; 4096]);
    let magic_only = TempFile::new("magic", b"\x89MCAP0\r\n");
    let mut bomb = chunk_bomb();
    bomb.truncate(30);
    let cut = TempFile::new("cut", &bomb);
    for f in [&empty, &noise, &magic_only, &cut] {
        assert_play_refuses(&dir, f);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_refuses_a_chunk_that_claims_a_terabyte() {
    let _ = llbus_bin();
    let dir = CountersDir::new("schema-play-bomb");
    let bomb = TempFile::new("bomb", &chunk_bomb());
    assert_play_refuses(&dir, &bomb);
}

// ---------------------------------------------------------------------------------------------
// `llbus record` and `llbus play` against what they are promised (RECORDING.md).
/// A recording of `n` messages of `shape` (`payload` each), `spacing` apart, on topic
/// `rv.play`, whose channel states `fingerprint`.
fn recording(
    name: &str,
    shape: &Shape,
    fingerprint: u64,
    payload: &[u8],
    n: u32,
    spacing: Duration,
) -> TempFile {
    use llbus_record::{Channel, ChannelSchema, FileOptions, FileWriter};
    let file = TempFile::new(name, b"");
    let metadata = std::collections::BTreeMap::from([
        (
            llbus_record::META_TOPIC_ID.to_owned(),
            format!("{:#018x}", llbus::topic_id("schema.play")),
        ),
        (
            llbus_record::META_FINGERPRINT.to_owned(),
            format!("{fingerprint:#018x}"),
        ),
    ]);
    let channel = Channel {
        topic: "schema.play".to_owned(),
        message_encoding: llbus_record::MESSAGE_ENCODING.to_owned(),
        metadata,
        schema: Some(ChannelSchema {
            name: "Px".to_owned(),
            encoding: llbus_record::SCHEMA_ENCODING.to_owned(),
            data: shape.to_bytes().expect("encodes"),
        }),
    };
    let mut w =
        FileWriter::create(&file.0, vec![channel], &FileOptions::default()).expect("creates");
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..n {
        let t = t0 + u64::from(i) * spacing.as_nanos() as u64;
        w.write(0, i + 1, t, t, payload).expect("writes");
    }
    w.finish().expect("finishes");
    file
}

fn px() -> Shape {
    Shape::structure(
        "Px",
        Fields::named([("v", Shape::Primitive(Primitive::U32))]),
    )
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_at_speed_0_plays_everything_at_once() {
    let _ = llbus_bin();
    let dir = CountersDir::new("schema-play-fast");
    let shape = px();
    let file = recording(
        "fast",
        &shape,
        shape.fingerprint(),
        &7u32.to_le_bytes(),
        50,
        Duration::from_millis(200),
    );
    let started = Instant::now();
    let out = llbus(
        &dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("PLAYED messages=50 "), "{text}");
    // 10 s recorded; played at once, then the second of heartbeats.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Neither a negative nor a non-number pace is taken.
    for speed in ["--speed=-1", "--speed=NaN", "--speed=inf"] {
        let out = llbus(&dir, &["play", file.path(), "--bind", "127.0.0.1:0", speed]);
        assert_eq!(out.status.code(), Some(1), "--speed {speed}");
    }
}

/// Fetches topic `topic`'s shape from `publisher` over a real socket (5 s at most).
fn fetch(publisher: SocketAddr, topic: &str) -> Option<Event> {
    let mut socket = UdpEndpoint::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &SocketConfig::default(),
    )
    .expect("binds");
    let mut ep = Endpoint::new(
        &BridgeConfig::default(),
        DEFAULT_MAX_DATAGRAM,
        0x31,
        [2; 32],
        Vec::new(),
        Vec::new(),
    );
    ep.request_schema(llbus::topic_id(topic), publisher);
    let (mut send, mut recv, mut failed) = (SendBatch::new(4), RecvBatch::new(8, 65_536), None);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let now = started.elapsed().as_nanos() as u64 + 1;
        ep.on_timer(
            now,
            &mut SocketWire::new(&mut socket, &mut send, &mut failed),
            &mut NoData,
        );
        let _ = socket.recv_batch(&mut recv);
        for (d, from) in recv.iter() {
            ep.handle(
                d,
                from,
                now,
                &mut SocketWire::new(&mut socket, &mut send, &mut failed),
                &mut NoData,
            );
        }
        if let Some(e) = ep.poll_event() {
            return Some(e);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_never_serves_a_shape_that_fails_its_own_fingerprint() {
    let _ = llbus_bin();
    let shape = px();
    let file = recording(
        "liar",
        &shape,
        shape.fingerprint() ^ 1,
        &7u32.to_le_bytes(),
        5,
        Duration::from_millis(10),
    );
    let port = UdpSocket::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("addr")
        .port();
    let bind = format!("127.0.0.1:{port}");
    let child = std::process::Command::new(llbus_bin())
        .args(["play", file.path(), "--bind", &bind, "--wait-subscriber"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut child = tests::netns::KillOnDrop::new(child);
    std::thread::sleep(Duration::from_millis(300));
    if let Ok(Some(status)) = child.child_mut().try_wait() {
        // Refused at start: what is asked.
        assert_eq!(status.code(), Some(1));
        return;
    }
    let got = fetch(bind.parse().expect("addr"), "schema.play");
    assert!(
        matches!(got, Some(Event::SchemaReceived { .. })),
        "play serves a shape that its fingerprint refuses: {got:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_json_marks_no_gap_for_a_message_that_arrived_but_did_not_decode() {
    let _ = llbus_bin();
    let shape = px();
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.half", &shape, None)],
        vec![7u32.to_le_bytes().to_vec(), vec![1, 2, 3]],
    );
    let dir = CountersDir::new("schema-record-json");
    let out_file = TempFile::new("half", b"");
    let addr = publ.addr.to_string();
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &addr,
            "--topic",
            "schema.half",
            "--encoding",
            "json",
            "--count",
            "6",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "5",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recording = llbus_record::read(&std::fs::read(&out_file.0).expect("reads"));
    let gaps: Vec<String> = recording
        .frames
        .iter()
        .filter(|f| recording.topics[f.topic].topic == llbus_record::GAPS_TOPIC)
        .map(|f| String::from_utf8_lossy(&f.data).into_owned())
        .collect();
    assert!(text.contains(" lost=0 "), "{text}\ngaps: {gaps:?}");
    assert!(gaps.is_empty(), "{text}\ngaps: {gaps:?}");
}

/// A channel of topic `topic` with `shape`, stating its own fingerprint.
fn channel(topic: &str, shape: &Shape) -> llbus_record::Channel {
    llbus_record::Channel {
        topic: topic.to_owned(),
        message_encoding: llbus_record::MESSAGE_ENCODING.to_owned(),
        metadata: std::collections::BTreeMap::from([(
            llbus_record::META_FINGERPRINT.to_owned(),
            format!("{:#018x}", shape.fingerprint()),
        )]),
        schema: Some(llbus_record::ChannelSchema {
            name: "X".to_owned(),
            encoding: llbus_record::SCHEMA_ENCODING.to_owned(),
            data: shape.to_bytes().expect("encodes"),
        }),
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn play_of_a_recording_with_one_topic_on_two_channels_and_an_oversized_message_does_not_crash() {
    use llbus_record::{FileOptions, FileWriter};
    let _ = llbus_bin();
    let dir = CountersDir::new("schema-play-dup");
    let file = TempFile::new("dup", b"");
    let a = px();
    let b = Shape::Str;
    let mut w = FileWriter::create(
        &file.0,
        vec![channel("schema.dup", &a), channel("schema.dup", &b)],
        &FileOptions::default(),
    )
    .expect("creates");
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..20u32 {
        let t = t0 + u64::from(i) * 1_000_000;
        w.write(0, i, t, t, &i.to_le_bytes()).expect("writes");
        w.write(1, i, t, t, &[1, 0, 0, 0, 0, 0, 0, 0, b'x'])
            .expect("writes");
    }
    // 20 MiB: more than a publisher may send (16 MiB).
    w.write(
        0,
        99,
        t0 + 30_000_000,
        t0 + 30_000_000,
        &vec![0u8; 20 << 20],
    )
    .expect("writes");
    w.finish().expect("finishes");
    let out = llbus(
        &dir,
        &["play", file.path(), "--bind", "127.0.0.1:0", "--speed", "0"],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("status {:?}\nstdout {text}\nstderr {err}", out.status);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_output_of_an_empty_message_stays_small() {
    let _ = llbus_bin();
    let shape = long_names(30_000, 2_000);
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.bomb", &shape, None)],
        vec![Vec::new()],
    );
    let dir = CountersDir::new("schema-echo-bomb");
    let addr = publ.addr.to_string();
    // The publisher sends a message every 5 ms: `echo` refuses each (it does not fit the
    // schema within the decoder's bound), so `--count 1` is not reached and the command runs
    // its `--duration-s`, long enough for hundreds of them.
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            "schema.bomb",
            "--count",
            "1",
            "--duration-s",
            "2",
            "--setup-timeout-s",
            "5",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.len() < 1 << 20,
        "one empty message printed as {} bytes",
        out.stdout.len()
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_of_a_topic_named_twice_records_it_or_says_why() {
    let _ = llbus_bin();
    let shape = px();
    let publ = HostilePub::start(
        BridgeConfig::default(),
        vec![export("schema.twice", &shape, None)],
        vec![7u32.to_le_bytes().to_vec()],
    );
    let dir = CountersDir::new("schema-record-twice");
    let out_file = TempFile::new("twice", b"");
    let addr = publ.addr.to_string();
    let started = Instant::now();
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &addr,
            "--topic",
            "schema.twice",
            "--topic",
            "schema.twice",
            "--count",
            "4",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "4",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // Recorded once, or refused for what it is (not blamed on the allowlist).
    if out.status.success() {
        assert!(text.contains("RECORDED messages=4 "), "{text}");
    } else {
        assert!(!err.contains("allowlist"), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// The resident memory of process `pid`, in bytes (0 if it is gone).
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_holds_bounded_memory_while_a_publisher_withholds_one_subscription() {
    let _ = llbus_bin();
    let shape = Shape::structure(
        "Blob",
        Fields::named([("b", Shape::Vec(Box::new(Shape::Primitive(Primitive::U8))))]),
    );
    let mut blob = 60_000u64.to_le_bytes().to_vec();
    blob.resize(8 + 60_000, 0x42);
    let publ = HostilePub::start_with(
        BridgeConfig::default(),
        vec![
            export("schema.mem.a", &shape, None),
            export("schema.mem.b", &shape, None),
        ],
        vec![blob],
        Some(llbus::topic_id("schema.mem.b")),
        32,
    );
    let out_file = TempFile::new("mem", b"");
    let addr = publ.addr.to_string();
    // The withheld subscription keeps `record` in its setup until the timeout, while the other
    // topic floods it with a burst of 60 KB messages every 5 ms: past the byte bound within
    // a fraction of a second, so the whole timeout is spent over it.
    let child = std::process::Command::new(llbus_bin())
        .args([
            "record",
            "--publisher",
            &addr,
            "--topic",
            "schema.mem.a",
            "--topic",
            "schema.mem.b",
            "--output",
            out_file.path(),
            "--setup-timeout-s",
            "3",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let mut child = tests::netns::KillOnDrop::new(child);
    let mut peak = 0u64;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(12) {
        peak = peak.max(rss(pid));
        if let Ok(Some(_)) = child.child_mut().try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What arrives before every subscription is up is held for the file, up to 65536
    // messages of up to 16 MiB each: a bound in bytes is what keeps a hostile publisher from
    // filling the memory during the setup timeout.
    assert!(peak < 64 << 20, "llbus record grew to {} MiB", peak >> 20);
}
