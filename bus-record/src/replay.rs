//! The in-process replay source: an actor that publishes the messages of a recording, in the
//! order they were recorded, into the bus.
//!
//! # Order
//!
//! One actor publishes every replayed topic, in file order, with `Block` publishes: each
//! subscriber sees each topic's messages exactly in recorded order, none lost. Across topics,
//! a subscriber's inbox polls its rings in turn, so the interleaving it sees depends on timing
//! unless the replay is in [`lockstep`](Replay::lockstep) and shares a thread group with its
//! subscribers: then each round publishes one message, which the subscribers handle before the
//! next, and the whole sequence is the recorded one, every run. Lockstep is for that setting
//! only: it never waits on a full ring, so a subscriber on another thread may lose messages.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{
    Actor, ActorBuilder, BusBuilder, Component, Context, Message, Metric, Out, Setup, Topic,
    TopicName,
};
use serde::de::DeserializeOwned;

use crate::mapping::{read, Recording};

/// How fast a replay publishes.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Pace {
    /// As fast as the subscribers take the messages.
    #[default]
    AsFast,
    /// At the recorded pace (by log time) scaled by `speed`: `2.0` is twice as fast.
    Recorded {
        /// The speed-up, more than zero.
        speed: f64,
    },
}

/// Why a replay cannot be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// The file could not be read.
    Io(std::io::Error),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Io(error) => write!(f, "cannot read the recording: {error}"),
        }
    }
}

impl std::error::Error for ReplayError {}

/// One replayed topic: how to declare it and how to make its feed.
struct FeedDecl {
    declare: for<'b> fn(ActorBuilder<'b, ReplayActor>, &TopicName) -> ActorBuilder<'b, ReplayActor>,
    make: fn(&mut Setup<'_>, &TopicName) -> Box<dyn Feed>,
    /// The topic published into.
    name: TopicName,
    /// Index of the topic in the recording.
    topic: usize,
}

/// Replays a recording into the bus: `bus.add(Replay::open("run.mcap")?.topic::<Quote>())`,
/// or named topics, several of one type: `.topic_on(&nyse).topic_on(&nasdaq)`.
///
/// Each recorded channel is published into the topic of its name. Channels not asked for with
/// [`topic`](Self::topic) or [`topic_on`](Self::topic_on) are skipped. A topic that the
/// recording lacks, or records with another fingerprint (another type, or the type changed),
/// makes `start()` fail with the reason. By default the replay publishes as fast as its subscribers take messages
/// and asks the bus to stop when it has published the last one.
pub struct Replay {
    name: String,
    recording: Arc<Recording>,
    feeds: Vec<FeedDecl>,
    errors: Vec<String>,
    pace: Pace,
    per_round: usize,
    stop_at_end: bool,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("name", &self.name)
            .field("frames", &self.recording.frames.len())
            .field("pace", &self.pace)
            .finish_non_exhaustive()
    }
}

impl Replay {
    /// Reads the recording at `path` (into memory; a file cut off mid-write is read up to its
    /// last complete chunk, with a warning).
    ///
    /// # Errors
    /// [`ReplayError::Io`] if the file cannot be read.
    pub fn open(path: impl AsRef<Path>) -> Result<Replay, ReplayError> {
        let bytes = std::fs::read(path.as_ref()).map_err(ReplayError::Io)?;
        let recording = read(&bytes);
        if let Some(why) = &recording.cut_off {
            log::warn!(
                "replay: {} ends early ({why}); replaying its {} complete messages",
                path.as_ref().display(),
                recording.frames.len()
            );
        }
        Ok(Replay::from_recording(recording))
    }

    /// Replays a recording already read with [`read`](crate::read).
    pub fn from_recording(recording: Recording) -> Replay {
        Replay {
            name: "replay".to_owned(),
            recording: Arc::new(recording),
            feeds: Vec::new(),
            errors: Vec::new(),
            pace: Pace::AsFast,
            per_round: 64,
            stop_at_end: true,
        }
    }

    /// Publishes the recorded messages of `T`'s default topic (`T::TOPIC`) into it.
    pub fn topic<T: Message + DeserializeOwned + Clone>(self) -> Replay {
        self.topic_on(&Topic::<T>::of())
    }

    /// Publishes the messages recorded on the channel named as `topic` into `topic`: two
    /// channels of one type replay into two topics, each getting only its own. The bus
    /// publishes it under its running name if it remaps it. `start()` fails, naming the topic,
    /// if the recording has no such channel or recorded it with another type's fingerprint.
    pub fn topic_on<T: Message + DeserializeOwned + Clone>(mut self, topic: &Topic<T>) -> Replay {
        let name = topic.name();
        let found = self
            .recording
            .topics
            .iter()
            .position(|t| t.topic == name.as_str());
        match found {
            None => self.errors.push(format!(
                "replay '{}': the recording has no message of topic '{name}'",
                self.name,
            )),
            Some(i) if self.recording.topics[i].fingerprint != Some(T::FINGERPRINT) => {
                let recorded = &self.recording.topics[i];
                self.errors.push(format!(
                    "replay '{}': topic '{name}' was recorded as {} with fingerprint {}, but is                      replayed as {} with {:#018x}: another type, or the type changed since the                      recording",
                    self.name,
                    recorded.type_name.as_deref().unwrap_or("an unnamed type"),
                    recorded
                        .fingerprint
                        .map_or_else(|| "none".to_owned(), |f| format!("{f:#018x}")),
                    std::any::type_name::<T>(),
                    T::FINGERPRINT
                ))
            }
            Some(i) => self.feeds.push(FeedDecl {
                declare: |builder, name| builder.publishes_to(&Topic::<T>::with_name(name.clone())),
                make: |setup, name| {
                    Box::new(TopicFeed::<T> {
                        out: setup.output_on(&Topic::<T>::with_name(name.clone())),
                    })
                },
                name: name.clone(),
                topic: i,
            }),
        }
        self
    }

    /// Names the replay's actor (default `replay`).
    pub fn name(mut self, name: &str) -> Replay {
        self.name = name.to_owned();
        self
    }

    /// Sets the pace (default [`Pace::AsFast`]).
    pub fn pace(mut self, pace: Pace) -> Replay {
        self.pace = pace;
        self
    }

    /// Publishes one message per round of the actor's thread, so that subscribers in the same
    /// thread group handle each before the next is published: the recorded order across
    /// topics, deterministically (see the module docs). The replay then never waits on a full
    /// ring (the bus requires it of an actor that shares a thread with its subscribers): a
    /// subscriber on another thread that falls behind loses messages, counted in the report.
    pub fn lockstep(mut self) -> Replay {
        self.per_round = 1;
        self
    }

    /// Keeps the bus running after the last message (by default the replay asks it to stop).
    pub fn keep_running(mut self) -> Replay {
        self.stop_at_end = false;
        self
    }
}

impl Component for Replay {
    type Actor = ReplayActor;

    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, ReplayActor> {
        let Replay {
            name,
            recording,
            feeds,
            mut errors,
            pace,
            per_round,
            stop_at_end,
        } = self;
        if let Pace::Recorded { speed } = pace {
            if !(speed.is_finite() && speed > 0.0) {
                errors.push(format!(
                    "replay '{name}': the speed must be a finite number above zero, not {speed}"
                ));
            }
        }
        let declares: Vec<_> = feeds.iter().map(|f| (f.declare, f.name.clone())).collect();
        let mut parts = Some(feeds);
        let mut builder = bus.actor(&name, move |setup: &mut Setup<'_>| {
            let feeds = parts.take().unwrap_or_default();
            ReplayActor::new(
                setup,
                Arc::clone(&recording),
                feeds,
                pace,
                per_round,
                stop_at_end,
            )
        });
        if per_round == 1 {
            // In lockstep the replay shares a thread with its subscribers, which the bus allows
            // only to an actor that never waits: one message per round never fills a ring of a
            // subscriber on that thread (one elsewhere that falls behind loses messages,
            // counted in the report's `dropped`).
            builder = builder.never_waits();
        }
        for (declare, topic) in declares {
            builder = declare(builder, &topic);
        }
        for error in errors {
            builder = builder.invalid(error);
        }
        builder
    }
}

/// One replayed topic's output.
trait Feed: Send {
    /// Decodes `data` and publishes it; `false` if it does not decode.
    fn publish(&mut self, data: &[u8], ctx: &mut Context<'_>) -> bool;
}

struct TopicFeed<T: Message> {
    out: Out<T>,
}

impl<T: Message + DeserializeOwned + Clone> Feed for TopicFeed<T> {
    fn publish(&mut self, data: &[u8], ctx: &mut Context<'_>) -> bool {
        let config = bincode::config::legacy();
        match bincode::serde::decode_from_slice::<T, _>(data, config) {
            Ok((message, read)) if read == data.len() => {
                ctx.publish(self.out, message);
                true
            }
            _ => false,
        }
    }
}

/// The replay's actor (made by [`Replay`]'s component).
pub struct ReplayActor {
    recording: Arc<Recording>,
    /// The feed of each topic of the recording, `None` for topics not replayed.
    feeds: Vec<Option<Box<dyn Feed>>>,
    next: usize,
    pace: Pace,
    per_round: usize,
    stop_at_end: bool,
    /// When the first message was published, and its log time.
    started: Option<(Instant, u64)>,
    done: bool,
    undecodable: Metric,
    replayed: Metric,
}

impl std::fmt::Debug for ReplayActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayActor")
            .field("next", &self.next)
            .field("frames", &self.recording.frames.len())
            .finish_non_exhaustive()
    }
}

impl ReplayActor {
    fn new(
        setup: &mut Setup<'_>,
        recording: Arc<Recording>,
        decls: Vec<FeedDecl>,
        pace: Pace,
        per_round: usize,
        stop_at_end: bool,
    ) -> ReplayActor {
        let mut feeds: Vec<Option<Box<dyn Feed>>> = recording.topics.iter().map(|_| None).collect();
        for decl in decls {
            if let Some(slot) = feeds.get_mut(decl.topic) {
                *slot = Some((decl.make)(setup, &decl.name));
            }
        }
        ReplayActor {
            recording,
            feeds,
            next: 0,
            pace,
            per_round,
            stop_at_end,
            started: None,
            done: false,
            undecodable: setup.metric("replay_undecodable"),
            replayed: setup.metric("replayed"),
        }
    }

    /// Whether frame `log_time` is due at `now` under the pace.
    fn due(&mut self, log_time: u64, now: Instant) -> bool {
        let Pace::Recorded { speed } = self.pace else {
            return true;
        };
        let (start, first) = *self.started.get_or_insert((now, log_time));
        let offset = log_time.saturating_sub(first) as f64 / speed;
        let offset = Duration::try_from_secs_f64(offset / 1e9).unwrap_or(Duration::MAX);
        now.saturating_duration_since(start) >= offset
    }
}

impl Actor for ReplayActor {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.done {
            return 0;
        }
        let recording = Arc::clone(&self.recording);
        let now = ctx.now();
        let mut n = 0;
        while n < self.per_round {
            let Some(frame) = recording.frames.get(self.next) else {
                break;
            };
            if !self.due(frame.log_time, now) {
                break;
            }
            self.next += 1;
            if let Some(Some(feed)) = self.feeds.get_mut(frame.topic) {
                n += 1;
                if feed.publish(&frame.data, ctx) {
                    self.replayed.add(1);
                } else {
                    self.undecodable.add(1);
                }
            }
        }
        if self.next >= recording.frames.len() {
            self.done = true;
            if self.stop_at_end {
                ctx.request_stop();
            }
        }
        n
    }
}
