//! Replaying a recording into a bus: the actors see exactly the recorded messages, per topic
//! in recorded order, and in lockstep within one thread group the whole recorded sequence
//! across topics, the same on every run; a replay for a type that changed since the
//! recording is refused at `start()`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fixtures::{quote, trade, Quote, TempDir, Trade};
use llbus::{Actor, Bus, Context, Inbox, Message, Setup, StartError};
use llbus_record::{read, Pace, Recorder, Replay};

const N: u64 = 500;

#[derive(Inbox, Debug, Clone, PartialEq)]
enum Market {
    Quote(Quote),
    Trade(Trade),
}

/// Records `N` quotes and trades interleaved in an order that is not round-robin (two quotes,
/// then a trade), and returns the recorded sequence.
fn make_recording(dir: &TempDir) -> (std::path::PathBuf, Vec<Market>) {
    let path = dir.join("market.mcap");
    let mut bus = Bus::builder();
    let quotes = bus.publisher::<Quote>("quotes");
    let trades = bus.publisher::<Trade>("trades");
    bus.add(
        Recorder::new(&path)
            .record::<Quote>()
            .record::<Trade>()
            .ring_capacity(4 * N as usize),
    );
    let mut running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    let mut q = running.publisher(quotes).unwrap_or_else(|e| panic!("{e}"));
    let mut t = running.publisher(trades).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..N {
        q.publish(quote(i)).unwrap_or_else(|e| panic!("{e}"));
        if i % 2 == 1 {
            t.publish(trade(i)).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    drop((q, t));
    running.stop();
    running.join().unwrap_or_else(|e| panic!("{e}"));

    // What the file holds, in file order, decoded: the expected replay.
    let recording = read(&std::fs::read(&path).unwrap_or_else(|e| panic!("{e}")));
    let config = bincode::config::legacy();
    let order = recording
        .frames
        .iter()
        .map(|f| match recording.topics[f.topic].topic.as_str() {
            Quote::TOPIC => Market::Quote(
                bincode::serde::decode_from_slice(&f.data, config)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .0,
            ),
            _ => Market::Trade(
                bincode::serde::decode_from_slice(&f.data, config)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .0,
            ),
        })
        .collect();
    (path, order)
}

/// Collects what it receives.
struct Strategy {
    seen: Arc<Mutex<Vec<Market>>>,
}

impl Actor for Strategy {
    type In = Market;

    fn on_message(&mut self, msg: Market, _ctx: &mut Context<'_>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(msg);
        }
    }
}

/// Replays `path` into a `Strategy` and returns what it saw; the replay stops the bus.
fn replay_into_strategy(replay: Replay, same_group: bool) -> Vec<Market> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut bus = Bus::builder();
    let r = bus.add(replay.topic::<Quote>().topic::<Trade>());
    if same_group {
        r.group("sim");
    }
    let collected = Arc::clone(&seen);
    let s = bus
        .actor("strategy", move |_: &mut Setup<'_>| Strategy {
            seen: Arc::clone(&collected),
        })
        .subscribes::<Market>();
    if same_group {
        s.group("sim");
    }
    let running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    running.join().unwrap_or_else(|e| panic!("{e}"));
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    seen
}

#[test]
fn lockstep_replay_in_one_group_delivers_the_recorded_sequence_every_run() {
    let dir = TempDir::new("lockstep");
    let (path, recorded) = make_recording(&dir);
    assert_eq!(recorded.len() as u64, N + N / 2);
    for _ in 0..2 {
        let replay = Replay::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let seen = replay_into_strategy(replay.lockstep(), true);
        assert_eq!(seen, recorded);
    }
}

#[test]
fn a_free_running_replay_keeps_each_topics_recorded_order() {
    let dir = TempDir::new("free");
    let (path, recorded) = make_recording(&dir);
    let replay = Replay::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let seen = replay_into_strategy(replay, false);
    let only = |v: &[Market], quotes: bool| -> Vec<Market> {
        v.iter()
            .filter(|m| matches!(m, Market::Quote(_)) == quotes)
            .cloned()
            .collect()
    };
    assert_eq!(only(&seen, true), only(&recorded, true));
    assert_eq!(only(&seen, false), only(&recorded, false));
}

#[test]
fn a_paced_replay_takes_the_recorded_time_scaled() {
    let dir = TempDir::new("paced");
    let path = dir.join("paced.mcap");
    // Two trades 200 ms apart.
    let mut bus = Bus::builder();
    let trades = bus.publisher::<Trade>("trades");
    bus.add(Recorder::new(&path).record::<Trade>());
    let mut running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    let mut t = running.publisher(trades).unwrap_or_else(|e| panic!("{e}"));
    t.publish(trade(0)).unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(200));
    t.publish(trade(1)).unwrap_or_else(|e| panic!("{e}"));
    drop(t);
    running.stop();
    running.join().unwrap_or_else(|e| panic!("{e}"));
    let recording = read(&std::fs::read(&path).unwrap_or_else(|e| panic!("{e}")));
    let gap = recording.frames[1].log_time - recording.frames[0].log_time;
    assert!(gap >= 150_000_000, "recorded {gap} ns apart");

    // At speed 2 the replay takes at least half the recorded gap.
    let replay = Replay::from_recording(recording).pace(Pace::Recorded { speed: 2.0 });
    let mut bus = Bus::builder();
    bus.add(replay.topic::<Trade>());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let collected = Arc::clone(&seen);
    bus.actor("sink", move |_: &mut Setup<'_>| {
        TradeSink(Arc::clone(&collected))
    })
    .subscribes::<Trade>();
    let began = Instant::now();
    let running = bus.start().unwrap_or_else(|e| panic!("{e}"));
    running.join().unwrap_or_else(|e| panic!("{e}"));
    let took = began.elapsed();
    assert!(
        took >= Duration::from_nanos(gap / 2),
        "{took:?} for a recorded gap of {gap} ns at speed 2"
    );
    assert_eq!(
        seen.lock().map(|s| s.clone()).unwrap_or_default(),
        vec![trade(0), trade(1)]
    );
}

struct TradeSink(Arc<Mutex<Vec<Trade>>>);

impl Actor for TradeSink {
    type In = Trade;

    fn on_message(&mut self, msg: Trade, _ctx: &mut Context<'_>) {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(msg);
        }
    }
}

/// A type with the same topic as `Trade` but another shape.
#[derive(Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
#[message(topic = "md.trade")]
struct TradeV2(u64, i64, u8);

/// Why `start()` refuses a bus that replays `path` as topic `T`.
fn refusal<T: Message + serde::de::DeserializeOwned + Clone>(path: &std::path::Path) -> String {
    let mut bus = Bus::builder();
    let replay = Replay::open(path).unwrap_or_else(|e| panic!("{e}"));
    bus.add(replay.topic::<T>());
    match bus.start() {
        Err(StartError::Invalid(reason)) => reason,
        other => panic!("refused, not {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_replay_of_a_changed_type_or_a_missing_topic_is_refused_at_start() {
    let dir = TempDir::new("changed");
    let (path, _) = make_recording(&dir);
    let reason = refusal::<TradeV2>(&path);
    assert!(reason.contains("fingerprint"), "{reason}");

    #[derive(Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
    #[message(topic = "md.absent")]
    struct Absent;
    let reason = refusal::<Absent>(&path);
    assert!(reason.contains("md.absent"), "{reason}");
}
