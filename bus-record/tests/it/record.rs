//! Recording through files: what the recorder writes is read back by the `mcap` crate's own
//! reader, message by message, with every sequence number and timestamp checked; the
//! generic decoder reads the messages from the recorded schema alone; a file cut off anywhere
//! reads as a prefix of the whole; rotation splits without losing a message; a disk error is
//! counted and leaves the bus running.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fixtures::{bincode_of, now_ns, quote, trade, Quote, TempDir, Trade};
use llbus::schema::{decode, Shape};
use llbus::{Bus, Message, Schema};
use llbus_record::{read, Recorder, RecorderStats, MESSAGE_ENCODING, SCHEMA_ENCODING};

const N: u64 = 3000;

/// Publishes `N` quotes and `N` trades, interleaved, through a bus recording both; returns
/// the recorder's stats and the wall-clock window around the run.
fn record(recorder: Recorder) -> (RecorderStats, u64, u64) {
    let stats = recorder.stats();
    let mut bus = Bus::builder();
    let quotes = bus.publisher::<Quote>("quotes");
    let trades = bus.publisher::<Trade>("trades");
    bus.add(
        recorder
            .record::<Quote>()
            .record::<Trade>()
            .ring_capacity(N as usize * 2),
    );
    let before = now_ns();
    let mut running = bus.start().unwrap_or_else(|e| panic!("starts: {e}"));
    let mut q = running.publisher(quotes).unwrap_or_else(|e| panic!("{e}"));
    let mut t = running.publisher(trades).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..N {
        q.publish(quote(i)).unwrap_or_else(|e| panic!("{e}"));
        t.publish(trade(i)).unwrap_or_else(|e| panic!("{e}"));
    }
    drop((q, t));
    running.stop();
    let report = running.join().unwrap_or_else(|e| panic!("joins: {e}"));
    let after = now_ns();
    for edge in &report.edges {
        assert_eq!(edge.dropped, 0, "{edge:?}");
    }
    (stats, before, after)
}

#[test]
fn every_message_sequence_and_timestamp_reads_back_with_the_mcap_reader() {
    let dir = TempDir::new("round-trip");
    let path = dir.join("run.mcap");
    let (stats, before, after) = record(Recorder::new(&path).chunk_size(64 * 1024));
    assert_eq!(stats.recorded(), 2 * N);
    assert_eq!(stats.dropped(), 0);
    assert_eq!(stats.files(), 1);
    assert_eq!(stats.error(), None);

    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reads: {e}"));
    // The mcap crate's reader, with the end magic required: the file is complete.
    let stream = mcap::MessageStream::new(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_log_time = 0;
    for message in stream {
        let message = message.unwrap_or_else(|e| panic!("every record parses: {e}"));
        let channel = &message.channel;
        assert_eq!(channel.message_encoding, MESSAGE_ENCODING);
        let schema = channel
            .schema
            .as_ref()
            .unwrap_or_else(|| panic!("a schema"));
        assert_eq!(schema.encoding, SCHEMA_ENCODING);
        let shape = Shape::from_bytes(&schema.data).unwrap_or_else(|e| panic!("{e}"));
        let (expected, fingerprint, topic_id, expected_shape) = {
            let i = next.entry(channel.topic.clone()).or_default();
            assert_eq!(u64::from(message.sequence), *i, "no gap, in order");
            let expected = match channel.topic.as_str() {
                Quote::TOPIC => (
                    bincode_of(&quote(*i)),
                    Quote::FINGERPRINT,
                    Quote::TOPIC_ID,
                    Quote::shape(),
                ),
                Trade::TOPIC => (
                    bincode_of(&trade(*i)),
                    Trade::FINGERPRINT,
                    Trade::TOPIC_ID,
                    Trade::shape(),
                ),
                other => panic!("unexpected topic {other}"),
            };
            *i += 1;
            expected
        };
        assert_eq!(message.data.as_ref(), expected.as_slice());
        assert_eq!(shape, expected_shape);
        assert_eq!(shape.fingerprint(), fingerprint);
        assert_eq!(
            channel.metadata.get("llbus.fingerprint"),
            Some(&format!("{fingerprint:#018x}"))
        );
        assert_eq!(
            channel.metadata.get("llbus.topic_id"),
            Some(&format!("{topic_id:#018x}"))
        );
        assert!(
            (before..=after).contains(&message.log_time),
            "log time {} within the run [{before}, {after}]",
            message.log_time
        );
        assert_eq!(message.publish_time, message.log_time);
        assert!(
            message.log_time >= last_log_time,
            "file order is time order"
        );
        last_log_time = message.log_time;
    }
    assert_eq!(next.get(Quote::TOPIC), Some(&N));
    assert_eq!(next.get(Trade::TOPIC), Some(&N));

    // The summary is there (readers can seek): it counts every message per channel.
    let summary = mcap::Summary::read(&bytes)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("a summary"));
    let stats = summary.stats.unwrap_or_else(|| panic!("statistics"));
    assert_eq!(stats.message_count, 2 * N);
    assert!(summary.chunk_indexes.len() > 1, "several chunks");
    assert!(summary
        .chunk_indexes
        .iter()
        .all(|c| c.compression == "zstd"));
}

#[test]
fn the_generic_decoder_reads_a_recording_from_its_schema_alone() {
    let dir = TempDir::new("generic");
    let path = dir.join("run.mcap");
    record(Recorder::new(&path));
    let recording = read(&std::fs::read(&path).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(recording.cut_off, None);
    assert_eq!(recording.frames.len() as u64, 2 * N);
    let mut seen = [0u64; 2];
    for frame in &recording.frames {
        let topic = &recording.topics[frame.topic];
        let shape = topic.shape.as_ref().unwrap_or_else(|| panic!("a shape"));
        let value = decode(&frame.data, shape).unwrap_or_else(|e| panic!("{e}"));
        let json = serde_json::to_value(&value).unwrap_or_else(|e| panic!("{e}"));
        let k = usize::from(topic.topic == Trade::TOPIC);
        let expected = if k == 0 {
            serde_json::to_value(quote(seen[0]))
        } else {
            serde_json::to_value(trade(seen[1]))
        };
        assert_eq!(Some(json), expected.ok());
        assert_eq!(u64::from(frame.sequence), seen[k]);
        seen[k] += 1;
    }
}

#[test]
fn a_file_cut_off_anywhere_reads_as_a_prefix_of_the_whole() {
    let dir = TempDir::new("cut");
    let path = dir.join("run.mcap");
    record(Recorder::new(&path).chunk_size(8 * 1024));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let whole = read(&bytes);
    assert_eq!(whole.frames.len() as u64, 2 * N);
    let mut last = 0;
    let mut cuts: Vec<usize> = (0..bytes.len()).step_by(bytes.len() / 97 + 1).collect();
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        let part = read(&bytes[..cut]);
        assert!(part.cut_off.is_some(), "cut at {cut} of {}", bytes.len());
        let n = part.frames.len();
        assert_eq!(part.frames[..], whole.frames[..n], "cut at {cut}");
        assert!(n >= last, "a longer prefix never reads fewer messages");
        last = n;
    }
    assert!(
        last as u64 > N,
        "most of the file reads back cut one byte short: {last}"
    );
}

#[test]
fn rotation_splits_the_recording_into_files_that_each_read_alone() {
    let dir = TempDir::new("rotate");
    let path = dir.join("run.mcap");
    let recorder = Recorder::new(&path).rotate_size(32 * 1024);
    let (stats, ..) = record(recorder);
    assert!(stats.files() > 1, "{} files", stats.files());
    let mut quotes = 0;
    let mut trades = 0;
    for index in 0..stats.files() {
        let file = dir.join(&format!("run-{index:04}.mcap"));
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let recording = read(&bytes);
        assert_eq!(recording.cut_off, None, "{file:?} is complete");
        for frame in &recording.frames {
            if recording.topics[frame.topic].topic == Quote::TOPIC {
                assert_eq!(u64::from(frame.sequence), quotes);
                assert_eq!(frame.data, bincode_of(&quote(quotes)));
                quotes += 1;
            } else {
                assert_eq!(u64::from(frame.sequence), trades);
                trades += 1;
            }
        }
    }
    assert_eq!((quotes, trades), (N, N));
}

#[test]
fn a_disk_error_is_counted_and_the_bus_runs_on() {
    let dir = TempDir::new("no-dir");
    let path = dir.join("missing/dir/run.mcap");
    let (stats, ..) = record(Recorder::new(&path));
    assert_eq!(stats.recorded(), 0);
    assert_eq!(stats.dropped(), 2 * N);
    let error = stats.error().unwrap_or_default();
    assert!(error.contains("cannot create"), "{error}");
}

#[test]
fn a_quiet_topic_reaches_the_file_within_the_flush_interval() {
    let dir = TempDir::new("quiet");
    let path = dir.join("run.mcap");
    let recorder = Recorder::new(&path)
        .flush_every(Some(Duration::from_millis(20)))
        .record::<Trade>();
    let stats = recorder.stats();
    let mut bus = Bus::builder();
    let trades = bus.publisher::<Trade>("trades");
    bus.add(recorder);
    let mut running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    let mut t = running.publisher(trades).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..5 {
        t.publish(trade(i)).unwrap_or_else(|e| panic!("{e}"));
    }
    // Bounded: the bus's tick hands the batch over within 10 ms and the writer finishes the
    // chunk within 20 ms more; ten seconds is far beyond both.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut on_disk = 0;
    while std::time::Instant::now() < deadline {
        let bytes = std::fs::read(&path).unwrap_or_default();
        on_disk = read(&bytes).frames.len();
        if on_disk == 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        on_disk, 5,
        "the open file holds every message before the stop"
    );
    assert_eq!(stats.recorded(), 5);
    drop(t);
    running.stop();
    running.join().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_recording_without_messages_is_a_complete_file_with_its_channels() {
    let dir = TempDir::new("empty");
    let path = dir.join("empty.mcap");
    let mut bus = Bus::builder();
    let _trades = bus.publisher::<Trade>("trades");
    bus.add(Recorder::new(&path).record::<Trade>());
    let running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    running.stop();
    running.join().unwrap_or_else(|e| panic!("{e}"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("the file exists: {e}"));
    let summary = mcap::Summary::read(&bytes)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("a summary"));
    let topics: Vec<_> = summary.channels.values().map(|c| c.topic.clone()).collect();
    assert_eq!(topics, vec![Trade::TOPIC.to_owned()]);
    assert_eq!(read(&bytes).frames.len(), 0);
}
