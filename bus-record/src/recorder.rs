//! The in-process recorder: an actor that takes the rings of the topics it records, encodes
//! each message once into a reusable batch, and hands full batches to its writer thread.
//!
//! # Contract
//!
//! - A publisher never waits for the recorder: its rings drop the newest message when full
//!   (`Backpressure::DropNewest`, counted in the bus report's `dropped` column of the edge),
//!   and the actor drops a whole batch when the writer thread is behind (counted in
//!   [`RecorderStats::dropped`] and the actor's `recorder_dropped` metric, and visible in the
//!   file as a gap in the topic's sequence numbers).
//! - The actor allocates nothing per message once running: the batches are made at start and
//!   come back from the writer emptied (a message larger than any before grows a batch once).
//! - On a graceful stop the actor drains its rings, hands over the last batch and waits for the
//!   writer to finish the file (summary and footer included).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use llbus::{
    Actor, ActorBuilder, Backpressure, BusBuilder, Component, Context, Inputs, Message, Metric,
    Setup, Topic, TopicName, TopicSpec,
};
use serde::Serialize;

use crate::writer::{Batch, Channel, Entry, Writer};

/// What the writer thread needs to know of the files to write.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub path: PathBuf,
    pub chunk_size: u64,
    pub zstd: bool,
    pub zstd_level: u32,
    pub flush_every: Option<Duration>,
    pub rotate_size: Option<u64>,
    pub rotate_every: Option<Duration>,
}

impl Settings {
    pub(crate) fn rotates(&self) -> bool {
        self.rotate_size.is_some() || self.rotate_every.is_some()
    }
}

/// Counters shared by the recorder's two threads; each field has one writer.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Written by the writer thread.
    pub recorded: AtomicU64,
    /// Written by the actor: batches dropped because the writer was behind.
    pub dropped_handoff: AtomicU64,
    /// Written by the writer thread: messages that arrived after an I/O error.
    pub dropped_io: AtomicU64,
    /// Written by the writer thread.
    pub files: AtomicU64,
    /// Written by the writer thread: the error that stopped the recording.
    pub error: Mutex<Option<String>>,
}

/// What a recorder has done so far: a cheap handle, readable from any thread.
#[derive(Clone, Debug, Default)]
pub struct RecorderStats {
    inner: Arc<Stats>,
}

impl RecorderStats {
    /// Messages written into a file.
    pub fn recorded(&self) -> u64 {
        self.inner.recorded.load(Ordering::Relaxed)
    }

    /// Messages the recorder took from its rings but did not write: the writer was behind, or
    /// had failed. (Messages its rings dropped are in the bus report's edges.)
    pub fn dropped(&self) -> u64 {
        self.inner.dropped_handoff.load(Ordering::Relaxed)
            + self.inner.dropped_io.load(Ordering::Relaxed)
    }

    /// Files opened so far.
    pub fn files(&self) -> u64 {
        self.inner.files.load(Ordering::Relaxed)
    }

    /// The I/O error that stopped the recording, if one did.
    pub fn error(&self) -> Option<String> {
        self.inner.error.lock().ok().and_then(|e| e.clone())
    }
}

/// Declares the recording of one topic: wires its ring, finds the name it runs under, and
/// makes its type's tap in the factory.
struct TopicDecl {
    /// The topic as the recorder was asked for it (its name before the bus's remapping).
    spec: TopicSpec,
    declare: for<'b> fn(
        ActorBuilder<'b, RecorderActor>,
        &TopicName,
        usize,
    ) -> ActorBuilder<'b, RecorderActor>,
    /// The name the topic runs under on the bus (`Setup::topic`).
    running: fn(&Setup<'_>, &TopicName) -> TopicName,
    /// Makes the one tap of the recorded topics of this type.
    make: fn(&mut Setup<'_>, Vec<TapTopic>) -> Box<dyn Tap>,
}

/// One recorded topic as its type's tap knows it.
#[derive(Clone, Copy, Debug)]
struct TapTopic {
    /// The id of the name the topic runs under: the id its rings come with.
    id: u64,
    /// Its channel's index in the recorder's list.
    channel: u16,
}

/// Records topics of the bus to MCAP: `bus.add(Recorder::new("run.mcap").record::<Quote>())`,
/// or named topics, several of one type: `.record_on(&nyse).record_on(&nasdaq)`.
///
/// Each recorded topic becomes a Channel with the name the topic runs under on the bus (after
/// [`BusBuilder::remap`]), the `llbus-bincode` message encoding and that name's topic id and
/// the type's fingerprint in its metadata, with a Schema record holding the type's
/// [`Shape`](llbus::schema::Shape); see docs/RECORDING.md. The returned
/// [`ActorBuilder`] places the recorder like any actor (`.group(..)`, `.on_core(..)`).
pub struct Recorder {
    name: String,
    settings: Settings,
    topics: Vec<TopicDecl>,
    ring_capacity: usize,
    batches: usize,
    batch_messages: usize,
    stats: RecorderStats,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("name", &self.name)
            .field("settings", &self.settings)
            .field(
                "topics",
                &self
                    .topics
                    .iter()
                    .map(|t| t.spec.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing to `path` (with rotation, `STEM-0000.EXT`, `STEM-0001.EXT`, ...),
    /// with zstd (level 1) chunks of 1 MiB finished at least once a second.
    pub fn new(path: impl Into<PathBuf>) -> Recorder {
        Recorder {
            name: "recorder".to_owned(),
            settings: Settings {
                path: path.into(),
                chunk_size: 1 << 20,
                // NB: level 1 records 64-byte ticks faster than zstd's default (3) in the
                // benches' `record` suite, where compression is the writer thread's main cost.
                zstd: true,
                zstd_level: 1,
                flush_every: Some(Duration::from_secs(1)),
                rotate_size: None,
                rotate_every: None,
            },
            topics: Vec::new(),
            ring_capacity: 1 << 14,
            batches: 16,
            batch_messages: 4096,
            stats: RecorderStats::default(),
        }
    }

    /// Records `T`'s default topic (`T::TOPIC`).
    pub fn record<T: Message + Serialize>(self) -> Recorder {
        self.record_on(&Topic::<T>::of())
    }

    /// Records `topic`, as its own channel: several topics of one type (two venues' quotes)
    /// are several channels. The channel is named as the topic runs on the bus, so a topic the
    /// bus remaps is recorded under its new name. `start()` refuses a topic recorded twice.
    ///
    /// ```
    /// use llbus::{Bus, Topic};
    /// use llbus_record::{read, Recorder};
    /// # #[derive(llbus::Message, serde::Serialize, serde::Deserialize, Clone, Debug)]
    /// # #[message(topic = "md.quote")]
    /// # struct Quote { px: f64 }
    ///
    /// let path = std::env::temp_dir().join(format!("llbus-doc-on-{}.mcap", std::process::id()));
    /// let nyse = Topic::<Quote>::named("md.quote.nyse")?;
    /// let nasdaq = Topic::<Quote>::named("md.quote.nasdaq")?;
    /// let mut bus = Bus::builder();
    /// let keys = [
    ///     bus.publisher_on(&nyse, "nyse-feed"),
    ///     bus.publisher_on(&nasdaq, "nasdaq-feed"),
    /// ];
    /// bus.add(Recorder::new(&path).record_on(&nyse).record_on(&nasdaq));
    /// let mut running = bus.start()?;
    /// for (key, px) in keys.into_iter().zip([1.5, 2.5]) {
    ///     running.publisher(key)?.publish(Quote { px })?;
    /// }
    /// running.stop();
    /// running.join()?;
    ///
    /// let recording = read(&std::fs::read(&path)?);
    /// let channels: Vec<_> = recording.topics.iter().map(|t| t.topic.as_str()).collect();
    /// assert_eq!(channels, ["md.quote.nyse", "md.quote.nasdaq"]);
    /// assert_eq!(recording.topics[0].topic_id, Some(nyse.id()));
    /// assert_eq!(recording.frames.len(), 2);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_on<T: Message + Serialize>(mut self, topic: &Topic<T>) -> Recorder {
        self.topics.push(TopicDecl {
            spec: TopicSpec::named::<T>(topic.name().clone()),
            declare: |builder, name, capacity| {
                let topic = Topic::<T>::with_name(name.clone());
                builder
                    .takes_on(&topic)
                    .backpressure_on(&topic, Backpressure::DropNewest)
                    .capacity_on(&topic, capacity)
            },
            running: |setup, name| {
                setup
                    .topic(&Topic::<T>::with_name(name.clone()))
                    .name()
                    .clone()
            },
            make: |setup, topics| Box::new(TopicTap::<T>::new(setup, topics)),
        });
        self
    }

    /// Names the recorder's actor (default `recorder`).
    pub fn name(mut self, name: &str) -> Recorder {
        self.name = name.to_owned();
        self
    }

    /// The uncompressed size at which a chunk is finished (default 1 MiB).
    pub fn chunk_size(mut self, bytes: u64) -> Recorder {
        self.settings.chunk_size = bytes;
        self
    }

    /// The zstd level (default 1: the fastest of zstd's positive levels; higher levels make
    /// smaller files and a slower writer).
    pub fn zstd_level(mut self, level: u32) -> Recorder {
        self.settings.zstd_level = level;
        self
    }

    /// Writes chunks uncompressed instead of with zstd.
    pub fn uncompressed(mut self) -> Recorder {
        self.settings.zstd = false;
        self
    }

    /// Finishes the current chunk at least this often (default 1 s; `None`: only when full), so
    /// that a crash or kill loses at most this much: a file cut off mid-write is readable up to
    /// its last complete chunk.
    pub fn flush_every(mut self, every: Option<Duration>) -> Recorder {
        self.settings.flush_every = every;
        self
    }

    /// Starts a new file once this many bytes of messages (uncompressed) are in the current one.
    pub fn rotate_size(mut self, bytes: u64) -> Recorder {
        self.settings.rotate_size = Some(bytes);
        self
    }

    /// Starts a new file once the current one is this old.
    pub fn rotate_every(mut self, every: Duration) -> Recorder {
        self.settings.rotate_every = Some(every);
        self
    }

    /// The capacity of each recorded topic's ring (default 16 Ki messages).
    pub fn ring_capacity(mut self, capacity: usize) -> Recorder {
        self.ring_capacity = capacity;
        self
    }

    /// How much the hand-off to the writer thread holds: `batches` batches of up to
    /// `messages` messages (default 16 of 4096). When all are with the writer, the recorder
    /// drops what it takes until one comes back.
    pub fn queue(mut self, batches: usize, messages: usize) -> Recorder {
        self.batches = batches.max(2);
        self.batch_messages = messages.max(1);
        self
    }

    /// A handle on what this recorder has recorded and dropped.
    pub fn stats(&self) -> RecorderStats {
        self.stats.clone()
    }
}

impl Component for Recorder {
    type Actor = RecorderActor;

    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, RecorderActor> {
        let Recorder {
            name,
            settings,
            topics,
            ring_capacity,
            batches,
            batch_messages,
            stats,
        } = self;
        let declares: Vec<_> = topics
            .iter()
            .map(|t| (t.declare, t.spec.name.clone()))
            .collect();
        let too_many = topics.len() > usize::from(u16::MAX);
        let mut parts = Some((settings, topics, batches, batch_messages, stats));
        let mut builder = bus
            .actor(&name, move |setup: &mut Setup<'_>| match parts.take() {
                Some((settings, topics, batches, messages, stats)) => {
                    RecorderActor::new(setup, settings, topics, batches, messages, stats)
                }
                // The bus never remakes an actor that takes its own rings (no Restart).
                None => panic!("a recorder's actor cannot be made twice"),
            })
            .tick_every(Duration::from_millis(10))
            .never_waits();
        for (declare, topic) in declares {
            builder = declare(builder, &topic, ring_capacity);
        }
        if too_many {
            builder = builder.invalid(format!(
                "recorder '{name}' records more than {} topics",
                u16::MAX
            ));
        }
        builder
    }
}

/// The rings of the recorded topics of one type, as the actor polls them.
trait Tap: Send {
    /// Encodes up to `budget` messages of each ring into the batch, stamping each; returns how
    /// many it took.
    fn poll(&mut self, budget: usize, out: &mut Hand) -> usize;
}

/// Every recorded topic of type `T`: the rings of all of them come in one [`Inputs`], each
/// ring with the id of the topic it carries.
struct TopicTap<T: Message> {
    inputs: Inputs<T>,
    /// The running id of each recorded topic of this type...
    ids: Vec<u64>,
    /// ...and, at the same place, its channel index and its next sequence number.
    channels: Vec<(u16, u32)>,
}

impl<T: Message> TopicTap<T> {
    fn new(setup: &mut Setup<'_>, topics: Vec<TapTopic>) -> TopicTap<T> {
        TopicTap {
            inputs: setup.inputs::<T>(),
            ids: topics.iter().map(|t| t.id).collect(),
            channels: topics.iter().map(|t| (t.channel, 0)).collect(),
        }
    }
}

impl<T: Message + Serialize> Tap for TopicTap<T> {
    fn poll(&mut self, budget: usize, out: &mut Hand) -> usize {
        let (ids, channels) = (&self.ids, &mut self.channels);
        // NB: the topic is found once a ring, among this type's few ids, not once a message;
        // no name is looked up and nothing is hashed.
        let current = std::cell::Cell::new(0);
        self.inputs.poll_edges(
            budget,
            |id| current.set(ids.iter().position(|&t| t == id).unwrap_or(usize::MAX)),
            |message| match channels.get_mut(current.get()) {
                Some((channel, sequence)) => {
                    out.push(*channel, *sequence, &message);
                    *sequence = sequence.wrapping_add(1);
                }
                // A ring of a topic the recorder did not declare: the wiring never makes one.
                None => out.count_dropped(1),
            },
        )
    }
}

/// The actor's side of the hand-off: the batch being filled and the channels to the writer.
struct Hand {
    current: Batch,
    batch_messages: usize,
    full: Option<Sender<Batch>>,
    empty: Receiver<Batch>,
    dropped: u64,
    dropped_metric: Metric,
    stats: Arc<Stats>,
}

impl Hand {
    fn push<T: Serialize>(&mut self, topic: u16, sequence: u32, message: &T) {
        if self.current.entries.len() >= self.batch_messages {
            self.ship();
        }
        let time = now_ns();
        let start = self.current.bytes.len();
        let config = bincode::config::legacy();
        if bincode::serde::encode_into_std_write(message, &mut self.current.bytes, config).is_err()
        {
            // A Serialize impl that fails cannot be recorded; count it rather than write half.
            self.current.bytes.truncate(start);
            self.count_dropped(1);
            return;
        }
        self.current.entries.push(Entry {
            topic,
            sequence,
            log_time: time,
            publish_time: time,
            end: self.current.bytes.len(),
        });
    }

    /// Hands the current batch to the writer and takes a free one; with none free (the writer
    /// is behind), drops the current batch's messages and fills it again.
    fn ship(&mut self) {
        if self.current.entries.is_empty() {
            return;
        }
        let Ok(mut next) = self.empty.try_recv() else {
            let n = self.current.entries.len() as u64;
            self.current.clear();
            self.count_dropped(n);
            return;
        };
        std::mem::swap(&mut self.current, &mut next);
        let sent = match &self.full {
            // There are as many batches as the channel holds, so it is never full; a writer
            // that is gone frees the batch.
            Some(full) => full.try_send(next).map_err(TrySendError::into_inner),
            None => Err(next),
        };
        if let Err(batch) = sent {
            self.count_dropped(batch.entries.len() as u64);
        }
    }

    fn count_dropped(&mut self, n: u64) {
        self.dropped += n;
        self.stats
            .dropped_handoff
            .store(self.dropped, Ordering::Relaxed);
        self.dropped_metric.set(self.dropped);
    }
}

/// Nanoseconds since the UNIX epoch (0 if the clock is before it).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The recorder's actor (made by [`Recorder`]'s component).
pub struct RecorderActor {
    taps: Vec<Box<dyn Tap>>,
    hand: Hand,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RecorderActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecorderActor")
            .field("topics", &self.taps.len())
            .finish_non_exhaustive()
    }
}

impl RecorderActor {
    fn new(
        setup: &mut Setup<'_>,
        settings: Settings,
        topics: Vec<TopicDecl>,
        batches: usize,
        batch_messages: usize,
        stats: RecorderStats,
    ) -> RecorderActor {
        // Each topic's channel is named as the topic runs on this bus, with that name's id.
        let running: Vec<TopicName> = topics
            .iter()
            .map(|t| (t.running)(setup, &t.spec.name))
            .collect();
        let infos = topics
            .iter()
            .zip(&running)
            .map(|(t, name)| {
                Channel::of(&TopicSpec {
                    name: name.clone(),
                    ..t.spec.clone()
                })
            })
            .collect();
        // One tap per type, for the rings of all its recorded topics (the bus hands a type's
        // taken rings over at once).
        let mut taps = Vec::new();
        for (i, topic) in topics.iter().enumerate() {
            let type_id = topic.spec.type_id;
            if topics[..i].iter().any(|t| t.spec.type_id == type_id) {
                continue;
            }
            let of_type = topics
                .iter()
                .zip(&running)
                .enumerate()
                .filter(|(_, (t, _))| t.spec.type_id == type_id)
                .map(|(j, (_, name))| TapTopic {
                    id: name.id(),
                    channel: u16::try_from(j).unwrap_or(u16::MAX),
                })
                .collect();
            taps.push((topic.make)(setup, of_type));
        }
        let (full_tx, full_rx) = crossbeam_channel::bounded(batches);
        let (empty_tx, empty_rx) = crossbeam_channel::bounded(batches);
        let new_batch = || Batch {
            bytes: Vec::with_capacity(batch_messages * 64),
            entries: Vec::with_capacity(batch_messages),
        };
        // One batch is being filled; the others wait in the free list.
        for _ in 1..batches {
            let _ = empty_tx.send(new_batch());
        }
        let inner = Arc::clone(&stats.inner);
        let writer = Writer::new(settings, infos, inner);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-writer", setup.name()))
            .spawn(move || writer.run(full_rx, empty_tx));
        let (writer, full) = match spawned {
            Ok(handle) => (Some(handle), Some(full_tx)),
            Err(error) => {
                log::error!("recorder '{}': no writer thread: {error}", setup.name());
                if let Ok(mut slot) = stats.inner.error.lock() {
                    *slot = Some(format!("no writer thread: {error}"));
                }
                (None, None)
            }
        };
        RecorderActor {
            taps,
            hand: Hand {
                current: new_batch(),
                batch_messages,
                full,
                empty: empty_rx,
                dropped: 0,
                dropped_metric: setup.metric("recorder_dropped"),
                stats: stats.inner,
            },
            writer,
        }
    }

    fn poll_taps(&mut self) -> usize {
        let mut n = 0;
        for tap in &mut self.taps {
            n += tap.poll(256, &mut self.hand);
        }
        n
    }

    /// Hands over what is left and waits for the writer to finish the file.
    fn finish(&mut self) {
        self.hand.ship();
        self.hand.full = None;
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                log::error!(
                    "recorder: the writer thread panicked; the file ends at its last chunk"
                );
            }
        }
    }
}

impl Actor for RecorderActor {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        self.poll_taps()
    }

    fn drain(&mut self, _ctx: &mut Context<'_>) -> usize {
        self.poll_taps()
    }

    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        // A quiet topic's messages reach the file within a tick plus the writer's flush.
        self.hand.ship();
    }

    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        self.finish();
    }
}

impl Drop for RecorderActor {
    fn drop(&mut self) {
        self.finish();
    }
}
