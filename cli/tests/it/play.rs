//! `llbus play` announces the recording's topics on the discovery group: a bridge of this
//! process that discovers the topic, and names no address, receives the played messages.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Message, Setup};
use llbus_net::Bridge;
use llbus_record::{
    Channel, ChannelSchema, FileOptions, FileWriter, MESSAGE_ENCODING, META_FINGERPRINT,
    META_TOPIC_ID, SCHEMA_ENCODING,
};
use serde::{Deserialize, Serialize};
use tests::example_bins::{free_udp_port, Running};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "play.beat")]
struct Beat {
    n: u64,
}

/// Counts the beats it takes.
struct Count(Arc<AtomicU64>);

impl Actor for Count {
    type In = Beat;
    fn on_message(&mut self, _beat: Beat, _ctx: &mut Context<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A recording of `n` beats 2 ms apart, as `llbus record` writes one.
fn recording(path: &std::path::Path, n: u64) {
    let channel = Channel {
        topic: Beat::TOPIC.to_owned(),
        message_encoding: MESSAGE_ENCODING.to_owned(),
        metadata: BTreeMap::from([
            (
                META_TOPIC_ID.to_owned(),
                format!("{:#018x}", Beat::TOPIC_ID),
            ),
            (
                META_FINGERPRINT.to_owned(),
                format!("{:#018x}", Beat::FINGERPRINT),
            ),
        ]),
        schema: Some(ChannelSchema {
            name: "Beat".to_owned(),
            encoding: SCHEMA_ENCODING.to_owned(),
            data: Beat::schema().to_bytes().expect("the shape encodes"),
        }),
    };
    let mut file =
        FileWriter::create(path, vec![channel], &FileOptions::default()).expect("creates");
    for i in 0..n {
        let t = 1_000_000_000 + i * 2_000_000;
        // bincode of `Beat { n }`: the u64, little-endian.
        file.write(0, i as u32 + 1, t, t, &i.to_le_bytes())
            .expect("writes");
    }
    file.finish().expect("finishes");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_played_recording_is_found_by_a_discovering_subscriber() {
    let Some(group) = tests::bridges::discovery::group(21) else {
        return;
    };
    let path = std::env::temp_dir().join(format!("llbus-play-beat-{}.mcap", std::process::id()));
    recording(&path, 5000);

    let bind = format!("127.0.0.1:{}", free_udp_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llbus"));
    cmd.args([
        "play",
        path.to_str().expect("a UTF-8 path"),
        "--bind",
        &bind,
    ])
    .args(["--group", &group.to_string(), "--loop"]);
    let player = Running::spawn("llbus play", cmd);

    let taken = Arc::new(AtomicU64::new(0));
    let bridge = Bridge::bind("127.0.0.1:0")
        .expect("binds")
        .name("sub")
        .discovery(tests::bridges::discovery::discovery(
            group,
            Duration::from_millis(200),
        ))
        .discover::<Beat>();
    let status = bridge.status();
    let mut b = Bus::builder();
    let count = Arc::clone(&taken);
    b.actor("count", move |_: &mut Setup<'_>| Count(Arc::clone(&count)))
        .subscribes::<Beat>();
    b.add(bridge);
    let bus = b.start().expect("starts");
    tests::wait_for("beats from the discovered player", 30, || {
        taken.load(Ordering::Relaxed) >= 100
    });
    let found = status.discovered();
    assert!(
        found.iter().any(|d| d.publisher.to_string() == bind),
        "{found:?}"
    );
    assert!(status.errors().is_empty(), "{:?}", status.errors());
    bus.stop();
    bus.join().expect("stops cleanly");
    player.kill();
    let _ = std::fs::remove_file(&path);
}
