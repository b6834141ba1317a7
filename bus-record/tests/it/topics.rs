//! Named topics through the recorder and the replay: several topics of one type are recorded as
//! one channel each, named as the topic runs on the bus (a remapped topic under its new name)
//! with that name's id, and replayed each into the topic of its name; a channel replayed as
//! another type, a name the recording lacks and a topic recorded twice are refused at `start()`.

use std::time::Duration;

use crate::fixtures::{quote, Quote, TempDir, Trade};
use llbus::{topic_id, Backpressure, Bus, Message, StartError, Topic};
use llbus_record::{read, Recorder, Recording, Replay};

const N: u64 = 1000;

fn topic<T: Message>(name: &str) -> Topic<T> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The `i`th quote of venue `venue`'s stream: the venue is in the message, so a message that
/// reaches the wrong topic shows.
fn venue_quote(venue: &str, i: u64) -> Quote {
    Quote {
        venue: venue.to_owned(),
        ..quote(i)
    }
}

fn decode<T: serde::de::DeserializeOwned>(data: &[u8]) -> T {
    bincode::serde::decode_from_slice(data, bincode::config::legacy())
        .unwrap_or_else(|e| panic!("decodes: {e}"))
        .0
}

/// The messages of the channel named `name`, decoded, with their sequence numbers.
fn channel<T: serde::de::DeserializeOwned>(recording: &Recording, name: &str) -> Vec<(u32, T)> {
    let index = recording
        .topics
        .iter()
        .position(|t| t.topic == name)
        .unwrap_or_else(|| panic!("no channel '{name}' in {:?}", recording.topics));
    recording
        .frames
        .iter()
        .filter(|f| f.topic == index)
        .map(|f| (f.sequence, decode(&f.data)))
        .collect()
}

/// Publishes `N` quotes on each of `topics` (interleaved) through a bus that records them with
/// `recorder` after applying `remaps`; returns what the file holds.
fn record_venues(
    path: &std::path::Path,
    remaps: &[(&str, &str)],
    topics: &[Topic<Quote>],
    recorder: Recorder,
) -> Recording {
    let mut bus = Bus::builder();
    for (from, to) in remaps {
        bus.remap(from, to);
    }
    let keys: Vec<_> = topics
        .iter()
        .map(|t| bus.publisher_on(t, &format!("feed-{}", t.name())))
        .collect();
    bus.add(recorder.ring_capacity(2 * N as usize));
    let mut running = bus.start().unwrap_or_else(|e| panic!("starts: {e}"));
    let mut publishers: Vec<_> = keys
        .into_iter()
        .map(|k| running.publisher(k).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for i in 0..N {
        for (p, t) in publishers.iter_mut().zip(topics) {
            p.publish(venue_quote(t.name().as_str(), i))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    drop(publishers);
    running.stop();
    let report = running.join().unwrap_or_else(|e| panic!("joins: {e}"));
    for edge in &report.edges {
        assert_eq!(edge.dropped, 0, "{edge:?}");
    }
    read(&std::fs::read(path).unwrap_or_else(|e| panic!("{e}")))
}

/// Replays `topics` of the recording at `path` into one subscription each; returns what each
/// received: up to `N` messages each, and anything more that came by then.
fn replay_into_subscriptions(path: &std::path::Path, topics: &[Topic<Quote>]) -> Vec<Vec<Quote>> {
    let mut bus = Bus::builder();
    let keys: Vec<_> = topics
        .iter()
        .map(|t| {
            let name = format!("reader-{}", t.name());
            bus.subscription_on(t, &name, Backpressure::Block, 2 * N as usize)
        })
        .collect();
    let mut replay = Replay::open(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .keep_running();
    for t in topics {
        replay = replay.topic_on(t);
    }
    bus.add(replay);
    let mut running = bus.start().unwrap_or_else(|e| panic!("starts: {e}"));
    let mut subscriptions: Vec<_> = keys
        .into_iter()
        .map(|k| running.subscription(k).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let mut received: Vec<Vec<Quote>> = vec![Vec::new(); subscriptions.len()];
    for (s, got) in subscriptions.iter_mut().zip(&mut received) {
        while got.len() < N as usize {
            match s.recv_timeout(Duration::from_secs(10)) {
                Ok(q) => got.push(q),
                Err(_) => break,
            }
        }
    }
    // Whatever else arrives (nothing, once each has its `N`) is kept, to be seen.
    std::thread::sleep(Duration::from_millis(20));
    for (s, got) in subscriptions.iter_mut().zip(&mut received) {
        while let Ok(q) = s.try_recv() {
            got.push(q);
        }
    }
    drop(subscriptions);
    running.stop();
    running.join().unwrap_or_else(|e| panic!("joins: {e}"));
    received
}

#[test]
fn two_venues_of_one_type_record_as_two_channels_and_replay_each_into_its_own_topic() {
    let dir = TempDir::new("venues");
    let path = dir.join("venues.mcap");
    let (nyse, nasdaq) = (
        topic::<Quote>("md.quote.nyse"),
        topic::<Quote>("md.quote.nasdaq"),
    );
    let venues = [nyse.clone(), nasdaq.clone()];
    let recorder = Recorder::new(&path).record_on(&nyse).record_on(&nasdaq);
    let stats = recorder.stats();
    let recording = record_venues(&path, &[], &venues, recorder);
    assert!(recording.cut_off.is_none(), "{:?}", recording.cut_off);
    assert_eq!(stats.recorded(), 2 * N);

    // Two channels, each named by its topic with that name's id, one type's fingerprint.
    let names: Vec<_> = recording.topics.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(names, ["md.quote.nyse", "md.quote.nasdaq"]);
    for t in &recording.topics {
        assert_eq!(t.topic_id, Some(topic_id(&t.topic)), "{t:?}");
        assert_eq!(t.fingerprint, Some(Quote::FINGERPRINT), "{t:?}");
        assert_eq!(t.type_name.as_deref(), Some(std::any::type_name::<Quote>()));
    }
    assert_ne!(recording.topics[0].topic_id, recording.topics[1].topic_id);
    // Each channel holds its venue's stream alone, numbered from 0 on its own.
    for venue in ["md.quote.nyse", "md.quote.nasdaq"] {
        let expected: Vec<_> = (0..N).map(|i| (i as u32, venue_quote(venue, i))).collect();
        assert_eq!(channel::<Quote>(&recording, venue), expected, "{venue}");
    }

    // Replayed, each channel reaches the subscription of its name, and only it.
    let received = replay_into_subscriptions(&path, &venues);
    for (got, venue) in received.iter().zip(["md.quote.nyse", "md.quote.nasdaq"]) {
        let expected: Vec<_> = (0..N).map(|i| venue_quote(venue, i)).collect();
        assert_eq!(got.len(), expected.len(), "{venue}");
        assert!(*got == expected, "{venue} received another stream");
    }
    // One venue replayed alone: the other channel is skipped.
    let received = replay_into_subscriptions(&path, &[nasdaq]);
    assert_eq!(received.len(), 1);
    assert!(received[0].iter().all(|q| q.venue == "md.quote.nasdaq"));
    assert_eq!(received[0].len(), N as usize);
}

#[test]
fn a_remapped_topic_is_recorded_under_its_running_name() {
    let dir = TempDir::new("remapped");
    let path = dir.join("remapped.mcap");
    // The program records its default topic and a named one; this deployment renames both.
    let nyse = topic::<Quote>("md.quote.nyse");
    let remaps = [
        ("md.quote", "site2.md.quote"),
        ("md.quote.nyse", "site2.md.quote.nyse"),
    ];
    let recorder = Recorder::new(&path).record::<Quote>().record_on(&nyse);
    let recording = record_venues(&path, &remaps, &[Topic::of(), nyse.clone()], recorder);

    let names: Vec<_> = recording.topics.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(names, ["site2.md.quote", "site2.md.quote.nyse"]);
    for t in &recording.topics {
        assert_eq!(t.topic_id, Some(topic_id(&t.topic)), "{t:?}");
    }
    // The messages are those published under the declared names.
    for (running, declared) in [
        ("site2.md.quote", "md.quote"),
        ("site2.md.quote.nyse", "md.quote.nyse"),
    ] {
        let expected: Vec<_> = (0..N)
            .map(|i| (i as u32, venue_quote(declared, i)))
            .collect();
        assert_eq!(channel::<Quote>(&recording, running), expected, "{running}");
    }

    // The recording replays under the running name; the declared one is not in it.
    let running = topic::<Quote>("site2.md.quote.nyse");
    let received = replay_into_subscriptions(&path, &[running]);
    let expected: Vec<_> = (0..N).map(|i| venue_quote("md.quote.nyse", i)).collect();
    assert!(received[0] == expected, "{} received", received[0].len());
    let reason = refusal(&path, |r| r.topic_on(&nyse));
    assert!(
        reason.contains("no message of topic 'md.quote.nyse'"),
        "{reason}"
    );
}

/// Why `start()` refuses a bus that replays the recording at `path` as `replay` asks.
fn refusal(path: &std::path::Path, replay: impl FnOnce(Replay) -> Replay) -> String {
    let mut bus = Bus::builder();
    bus.add(replay(Replay::open(path).unwrap_or_else(|e| panic!("{e}"))));
    match bus.start() {
        Err(StartError::Invalid(reason)) => reason,
        other => panic!("refused, not {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_channel_replayed_as_another_type_or_a_name_not_recorded_is_refused_at_start() {
    let dir = TempDir::new("mismatch");
    let path = dir.join("mismatch.mcap");
    let nyse = topic::<Quote>("md.quote.nyse");
    let recorder = Recorder::new(&path).record_on(&nyse);
    record_venues(&path, &[], &[nyse], recorder);

    // The name is recorded, as a Quote: replayed as a Trade, the start says so.
    let reason = refusal(&path, |r| r.topic_on(&topic::<Trade>("md.quote.nyse")));
    for says in [
        "md.quote.nyse",
        "fingerprint",
        std::any::type_name::<Quote>(),
        std::any::type_name::<Trade>(),
    ] {
        assert!(reason.contains(says), "{says:?} not in: {reason}");
    }
    // A venue of the right type that was not recorded.
    let reason = refusal(&path, |r| r.topic_on(&topic::<Quote>("md.quote.lse")));
    assert!(reason.contains("'md.quote.lse'"), "{reason}");
    // A right channel beside a wrong one does not hide it.
    let reason = refusal(&path, |r| {
        r.topic_on(&topic::<Quote>("md.quote.nyse"))
            .topic_on(&topic::<Trade>("md.trade.nyse"))
    });
    assert!(reason.contains("'md.trade.nyse'"), "{reason}");
}

#[test]
fn a_topic_recorded_twice_is_refused_at_start() {
    let dir = TempDir::new("twice");
    let nyse = topic::<Quote>("md.quote.nyse");
    for recorder in [
        Recorder::new(dir.join("a.mcap"))
            .record_on(&nyse)
            .record_on(&nyse),
        Recorder::new(dir.join("b.mcap"))
            .record::<Quote>()
            .record_on(&Topic::<Quote>::of()),
    ] {
        let mut bus = Bus::builder();
        bus.add(recorder);
        match bus.start() {
            Err(StartError::Invalid(reason)) => assert!(reason.contains("twice"), "{reason}"),
            other => panic!("refused, not {:?}", other.map(|_| ())),
        }
    }
}
