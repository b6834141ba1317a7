//! `llbus record` as a process, recording a bridge of this process through a proxy that loses
//! 5% of the data datagrams: the file holds every message that arrived (bincode as sent, its
//! frame's sequence number and send time), the topic's shape and ids, and on `llbus.gaps`
//! exactly the sequence numbers missing, the proxy's drops among them.

use std::collections::BTreeSet;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Message, Out, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::cli::CountersDir;

use crate::llbus;
use tests::relay::{Loss, LossyRelay};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "rec.tick")]
struct Tick {
    n: u64,
    px: f64,
}

struct Feed {
    out: Out<Tick>,
    next: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let n = self.next;
        ctx.publish(
            self.out,
            Tick {
                n,
                px: n as f64 / 4.0,
            },
        );
        self.next += 1;
    }
}

/// What `llbus record` of 600 ticks wrote through a proxy losing 5% of the data.
struct Recorded {
    /// Its standard output (the summary).
    text: String,
    /// The sequence numbers the proxy dropped.
    dropped: BTreeSet<u64>,
    recording: llbus_record::Recording,
}

/// Serves ticks every 2 ms from `bridge` (`export` makes its export), records 600 of them with
/// `llbus record` through a proxy that loses 5% of the data (seeded with `seed`), and reads
/// the file back.
fn record_through_loss(
    bridge: Bridge,
    export: fn(Bridge) -> Bridge,
    seed: u64,
    test: &str,
) -> Recorded {
    let addr = bridge.local_addr();
    let mut b = Bus::builder();
    b.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        next: 0,
    })
    .tick_every(Duration::from_millis(2))
    .publishes::<Tick>();
    b.add(export(bridge));
    let bus = b.start().expect("starts");
    let proxy = LossyRelay::start(addr, Loss::Permille { permille: 50, seed });

    let dir = CountersDir::new(test);
    let path = std::env::temp_dir().join(format!("llbus-{test}-{}.mcap", std::process::id()));
    let (proxy_addr, out_path) = (proxy.addr.to_string(), path.to_string_lossy().into_owned());
    let args = [
        "record",
        "--publisher",
        &proxy_addr,
        "--topic",
        "rec.tick",
        "--count",
        "600",
        "--output",
        &out_path,
    ];
    let out = llbus(&dir, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {err}\n{text}");
    let dropped = proxy.dropped_seqs();
    drop(proxy);
    bus.stop();
    bus.join().expect("stops cleanly");

    let bytes = std::fs::read(&path).expect("the recording");
    let _ = std::fs::remove_file(&path);
    Recorded {
        text,
        dropped,
        recording: llbus_record::read(&bytes),
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_recording_at_5_percent_loss_marks_exactly_the_gaps() {
    let bridge = Bridge::bind("127.0.0.1:0").expect("binds");
    let Recorded {
        text,
        dropped,
        recording,
    } = record_through_loss(bridge, |b| b.export::<Tick>(), 25, "record");
    assert_eq!(recording.cut_off, None);
    let tick = recording
        .topics
        .iter()
        .position(|t| t.topic == "rec.tick")
        .expect("the topic's channel");
    let t = &recording.topics[tick];
    assert_eq!(t.topic_id, Some(Tick::TOPIC_ID));
    assert_eq!(t.fingerprint, Some(Tick::FINGERPRINT));
    assert_eq!(t.shape, Some(Tick::schema()));
    assert_eq!(t.encoding, llbus_record::MESSAGE_ENCODING);

    // Every message as sent: n and the sequence number move together; sent before received.
    let frames: Vec<_> = recording
        .frames
        .iter()
        .filter(|f| f.topic == tick)
        .collect();
    assert_eq!(frames.len(), 600, "{text}");
    let first = frames[0];
    let first_n = llbus_net::decode_payload::<Tick>(&first.data)
        .expect("decodes")
        .n;
    let mut seqs = Vec::new();
    for f in &frames {
        let m: Tick = llbus_net::decode_payload(&f.data).expect("decodes");
        let seq = u64::from(f.sequence);
        assert_eq!(
            m.n - first_n,
            seq - u64::from(first.sequence),
            "message {m:?}"
        );
        assert_eq!(m.px, m.n as f64 / 4.0);
        assert!(f.publish_time > 0 && f.publish_time <= f.log_time);
        seqs.push(seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "out of order");

    // The gaps: exactly the numbers missing between the first and last recorded, among them
    // every one the proxy dropped (a busy machine's socket buffers may lose more).
    let (lo, hi) = (seqs[0], seqs[seqs.len() - 1]);
    let recorded: BTreeSet<u64> = seqs.iter().copied().collect();
    let lost: BTreeSet<u64> = (lo..=hi).filter(|s| !recorded.contains(s)).collect();
    let dropped: BTreeSet<u64> = dropped.range(lo..=hi).copied().collect();
    assert!(
        !dropped.is_empty(),
        "5% of 600 lost nothing: the proxy does not drop"
    );
    assert!(dropped.is_subset(&lost), "a dropped message was recorded");
    let mut marked = BTreeSet::new();
    for f in recording
        .frames
        .iter()
        .filter(|f| recording.topics[f.topic].topic == llbus_record::GAPS_TOPIC)
    {
        let gap: serde_json::Value = serde_json::from_slice(&f.data).expect("JSON");
        assert_eq!(gap["topic"], "rec.tick");
        assert_eq!(gap["topic_id"], format!("{:#018x}", Tick::TOPIC_ID));
        let (a, b) = (
            gap["first"].as_u64().expect("first"),
            gap["last"].as_u64().expect("last"),
        );
        assert!(a <= b);
        marked.extend(a..=b);
    }
    assert_eq!(marked, lost, "gaps marked vs numbers missing");
    let summary = text
        .lines()
        .find(|l| l.starts_with("RECORDED "))
        .expect("summary");
    assert!(
        summary.contains(&format!(" lost={} ", lost.len())),
        "{summary}"
    );
}

/// A reliable export (its answer to the discovery query says so) is recorded through a
/// reliable import: through the same lossy proxy, every message is in the file, in order,
/// with no gap, the proxy's drops repaired.
#[test]
#[cfg_attr(miri, ignore)]
fn a_reliable_export_recorded_through_loss_has_no_gaps() {
    // Discovery on, unicast only: the bridge answers the command's query for its topics.
    let bridge =
        Bridge::bind("127.0.0.1:0")
            .expect("binds")
            .discovery(llbus_net::DiscoveryConfig {
                group: None,
                ..llbus_net::DiscoveryConfig::default()
            });
    let Recorded {
        text,
        dropped,
        recording,
    } = record_through_loss(
        bridge,
        |b| b.export_reliable::<Tick>(),
        38,
        "record-reliable",
    );
    let tick = recording
        .topics
        .iter()
        .position(|t| t.topic == "rec.tick")
        .expect("the topic's channel");
    let seqs: Vec<u64> = recording
        .frames
        .iter()
        .filter(|f| f.topic == tick)
        .map(|f| {
            let m: Tick = llbus_net::decode_payload(&f.data).expect("decodes");
            assert_eq!(m.px, m.n as f64 / 4.0);
            u64::from(f.sequence)
        })
        .collect();
    assert_eq!(seqs.len(), 600, "{text}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "a number missing or out of order: {seqs:?}"
    );
    let (lo, hi) = (seqs[0], seqs[seqs.len() - 1]);
    assert!(
        dropped.range(lo..=hi).next().is_some(),
        "5% of 600 lost nothing: the proxy does not drop"
    );
    let gaps = recording
        .frames
        .iter()
        .filter(|f| recording.topics[f.topic].topic == llbus_record::GAPS_TOPIC)
        .count();
    assert_eq!(gaps, 0, "{text}");
    assert!(
        text.contains("RECORDED messages=600 gaps=0 lost=0 "),
        "{text}"
    );
}
