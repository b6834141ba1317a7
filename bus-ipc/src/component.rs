//! The bus side: [`ShmExport`] serves a topic of the local bus to one importing process,
//! [`ShmImport`] publishes on the local bus what another process exports. Each is a
//! [`Component`] with an actor of its own (as the network bridge is), placed like any actor.
//!
//! The export actor takes the topic's rings (`ActorBuilder::takes`) and moves messages from
//! them into free slots of the shared ring, many under one `Release` store; it takes nothing
//! while the shared ring is full and its reader alive, so a slow importer holds the local
//! publishers back exactly as a slow local subscriber would (`Backpressure::Block`). While no
//! importer is attached, messages queue in the shared ring and, once it is full, are dropped
//! and counted (`ipc.dropped`): an absent process never stalls the local bus.
//!
//! The import actor attaches (retrying every tick until the exporter's file appears), reads
//! batches from the shared ring and publishes them with `Context::publish`, so the local bus's
//! backpressure reaches the exporter through the shared ring. Every tick both stamp their
//! liveness and look at the peer's; a dead, closed or corrupt peer is counted and reported,
//! its file reclaimed, and the import reconnects when a new exporter appears.
//!
//! Named topics (`ShmExport::on`, `ShmImport::on`): the channel is [`topic_channel`] of the
//! name the topic runs under, resolved in the actor's factory (`Setup::topic`), and the header's
//! topic id is that name's; nothing on the message path looks the name up.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{
    Actor, ActorBuilder, BusBuilder, Component, Context, Inputs, Message, Out, Setup, Topic,
};

use crate::channel::{topic_channel, ChannelConfig, OpenError, PeerState, Receiver, Sender};
use crate::codec::SlotCodec;

/// What an export or import reports while it runs: counters and the last error, readable from
/// any thread.
#[derive(Clone, Debug, Default)]
pub struct IpcStatus(Arc<StatusInner>);

#[derive(Debug, Default)]
struct StatusInner {
    connected: AtomicBool,
    moved: AtomicU64,
    dropped: AtomicU64,
    malformed: AtomicU64,
    corrupt: AtomicU64,
    peer_deaths: AtomicU64,
    connects: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl IpcStatus {
    /// Whether a live peer is attached now.
    pub fn is_connected(&self) -> bool {
        self.0.connected.load(Ordering::Acquire)
    }
    /// Messages moved through the shared ring (sent or received).
    pub fn moved(&self) -> u64 {
        self.0.moved.load(Ordering::Relaxed)
    }
    /// Messages dropped: no importer and a full ring (export), or too large for a slot.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }
    /// Slots that held no valid message (import).
    pub fn malformed(&self) -> u64 {
        self.0.malformed.load(Ordering::Relaxed)
    }
    /// Times the peer broke the ring's invariants (each followed by a reconnect).
    pub fn corrupt(&self) -> u64 {
        self.0.corrupt.load(Ordering::Relaxed)
    }
    /// Times the peer was found dead (process gone or stamp stale).
    pub fn peer_deaths(&self) -> u64 {
        self.0.peer_deaths.load(Ordering::Relaxed)
    }
    /// Times a peer attached (import: connections made).
    pub fn connects(&self) -> u64 {
        self.0.connects.load(Ordering::Relaxed)
    }
    /// The last error, if any (a fingerprint mismatch names the topic).
    pub fn last_error(&self) -> Option<String> {
        match self.0.last_error.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
    fn error(&self, e: String) {
        let mut g = match self.0.last_error.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.as_deref() != Some(e.as_str()) {
            log::error!("llbus-ipc: {e}");
            *g = Some(e);
        }
    }
}

/// How often the components stamp liveness and check the peer.
const TICK: Duration = Duration::from_millis(1);
/// How often they also ask the kernel whether the peer's process exists.
const PID_CHECK: Duration = Duration::from_millis(20);

/// Serves a topic of the local bus to one importing process through a channel: `T`'s default
/// topic through channel `name` ([`new`](Self::new)), or a named topic through the channel its
/// running name derives ([`on`](Self::on)).
///
/// `C` is [`Pod`](crate::Pod) for plain data or [`Bincode`](crate::Bincode) for serde types.
#[derive(Debug)]
pub struct ShmExport<T, C> {
    channel: ExportChannel<T, C>,
    topic: Topic<T>,
    status: IpcStatus,
    name: String,
}

/// The channel of an export: made already, or to make in the factory once the topic's running
/// name is known.
#[derive(Debug)]
enum ExportChannel<T, C> {
    Made(Sender<T, C>),
    OnTopic(ChannelConfig),
}

impl<T: Message + Clone, C: SlotCodec<T>> ShmExport<T, C> {
    /// Creates channel `name` of `T`'s default topic now (replacing a stale one).
    ///
    /// # Errors
    /// See [`Sender::create`].
    pub fn new(name: &str, config: &ChannelConfig) -> Result<Self, OpenError> {
        Ok(ShmExport {
            channel: ExportChannel::Made(Sender::create(name, config)?),
            topic: Topic::of(),
            status: IpcStatus::default(),
            name: format!("ipc-export-{name}"),
        })
    }

    /// Serves `topic` (its actor, `ipc-export-<name>`, takes the topic's rings): the channel is
    /// [`topic_channel`] of the name the topic runs under on the bus (after its `remap`s), and
    /// its header carries that name's id, so an import of another name is refused. The
    /// channel is created when the bus starts, by the actor's factory: a channel that cannot be
    /// created (a live writer holds it, an unsafe directory) makes `start()` fail with
    /// [`StartError::FactoryPanicked`](llbus::StartError::FactoryPanicked), whose message is the
    /// [`OpenError`]'s.
    pub fn on(topic: &Topic<T>, config: &ChannelConfig) -> Self {
        ShmExport {
            channel: ExportChannel::OnTopic(config.clone()),
            topic: topic.clone(),
            status: IpcStatus::default(),
            name: format!("ipc-export-{}", topic.name()),
        }
    }

    /// A handle on the export's counters and errors.
    pub fn status(&self) -> IpcStatus {
        self.status.clone()
    }
}

impl<T: Message + Clone, C: SlotCodec<T>> Component for ShmExport<T, C> {
    type Actor = ExportActor<T, C>;

    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, Self::Actor> {
        let ShmExport {
            channel,
            topic,
            status,
            name,
        } = self;
        let declared = topic.clone();
        let mut parts = Some((channel, status));
        bus.actor(&name, move |setup: &mut Setup<'_>| match parts.take() {
            Some((channel, status)) => {
                let sender = match channel {
                    ExportChannel::Made(sender) => sender,
                    ExportChannel::OnTopic(config) => {
                        let running = setup.topic(&topic);
                        let channel = topic_channel(running.name());
                        match Sender::create_on(&channel, &running, &config) {
                            Ok(sender) => sender,
                            Err(e) => panic!(
                                "cannot create the channel '{channel}' of topic '{}': {e}",
                                running.name()
                            ),
                        }
                    }
                };
                ExportActor {
                    inputs: setup.inputs::<T>(),
                    sender,
                    status,
                    pending: VecDeque::with_capacity(64),
                    reader: PeerState::Absent,
                    last_pid_check: Instant::now(),
                }
            }
            // An actor that takes its rings is never remade (no Restart).
            None => panic!("an ipc export's actor cannot be made twice"),
        })
        .takes_on(&declared)
        .tick_every(TICK)
    }
}

/// The actor of a [`ShmExport`].
#[derive(Debug)]
pub struct ExportActor<T, C> {
    inputs: Inputs<T>,
    sender: Sender<T, C>,
    status: IpcStatus,
    /// Messages taken from the bus that did not fit the batch (several publishers' rings give
    /// one each). Bounded by the number of local publishers.
    pending: VecDeque<T>,
    reader: PeerState,
    last_pid_check: Instant,
}

impl<T: Message + Clone, C: SlotCodec<T>> ExportActor<T, C> {
    /// Moves what it can from the bus into the shared ring; returns how many.
    fn pump(&mut self, budget: usize) -> usize {
        let free = match self.sender.free() {
            Ok(f) => f,
            Err(e) => {
                self.corrupt(e.to_string());
                return 0;
            }
        };
        if free == 0 {
            if matches!(self.reader, PeerState::Alive(_)) {
                return 0; // backpressure: leave the messages in the bus's rings
            }
            // Nobody reads: drop rather than stall the local bus.
            let mut dropped = self.pending.len();
            self.pending.clear();
            dropped += self.inputs.poll(budget, |_| ());
            self.status
                .0
                .dropped
                .fetch_add(dropped as u64, Ordering::Relaxed);
            return dropped;
        }
        let inputs = &mut self.inputs;
        let pending = &mut self.pending;
        let result = self.sender.send_batch(free.min(budget), || {
            if pending.is_empty() {
                inputs.poll(1, |m| pending.push_back(m));
            }
            pending.pop_front()
        });
        match result {
            Ok((n, skipped)) => {
                self.status.0.moved.fetch_add(n as u64, Ordering::Relaxed);
                if skipped > 0 {
                    self.status
                        .0
                        .dropped
                        .fetch_add(skipped as u64, Ordering::Relaxed);
                    self.status.error(format!(
                        "topic '{}': {skipped} message(s) too large for a slot",
                        self.sender.topic()
                    ));
                }
                n + skipped
            }
            Err(e) => {
                self.corrupt(e.to_string());
                0
            }
        }
    }

    /// The ring cannot be trusted (our reader's indices, or its own report): count it and
    /// replace the channel's file; the importer attaches to the new one.
    fn corrupt(&mut self, e: String) {
        self.status.0.corrupt.fetch_add(1, Ordering::Relaxed);
        self.status
            .error(format!("topic '{}': {e}", self.sender.topic()));
        match self.sender.reset() {
            Ok(lost) => {
                self.status.0.dropped.fetch_add(lost, Ordering::Relaxed);
            }
            Err(e) => self.status.error(format!(
                "topic '{}': cannot remake the channel: {e}",
                self.sender.topic()
            )),
        }
        self.reader = PeerState::Absent;
        self.status.0.connected.store(false, Ordering::Release);
    }
}

impl<T: Message + Clone, C: SlotCodec<T>> Actor for ExportActor<T, C> {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, _ctx: &mut Context<'_>) -> usize {
        self.pump(256)
    }

    fn drain(&mut self, _ctx: &mut Context<'_>) -> usize {
        self.pump(256)
    }

    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        let check_pid = self.last_pid_check.elapsed() >= PID_CHECK;
        if check_pid {
            self.last_pid_check = Instant::now();
        }
        let state = self.sender.heartbeat(check_pid);
        if state == PeerState::Broken {
            self.corrupt("the importer found the shared ring corrupt".to_owned());
            return;
        }
        if state != self.reader {
            if let PeerState::Dead(pid) = state {
                self.status.0.peer_deaths.fetch_add(1, Ordering::Relaxed);
                self.status.error(format!(
                    "topic '{}': importing process {pid} died; its side is reclaimed for a new one",
                    self.sender.topic()
                ));
            }
            if let PeerState::Alive(_) = state {
                self.status.0.connects.fetch_add(1, Ordering::Relaxed);
            }
            self.status
                .0
                .connected
                .store(matches!(state, PeerState::Alive(_)), Ordering::Release);
            self.reader = state;
        }
    }
}

/// Publishes on the local bus what another process exports: as `T`'s default topic from
/// channel `name` ([`new`](Self::new)), or as a named topic from the channel its running name
/// derives ([`on`](Self::on)).
#[derive(Debug)]
pub struct ShmImport<T, C> {
    /// The channel; `None`: the channel of the topic's running name, known in the factory.
    channel: Option<String>,
    topic: Topic<T>,
    config: ChannelConfig,
    status: IpcStatus,
    name: String,
    park: Option<Duration>,
    _t: PhantomData<fn() -> (T, C)>,
}

impl<T: Message + Clone, C: SlotCodec<T>> ShmImport<T, C> {
    /// Declares the import of `T`'s default topic from channel `channel` and, if the
    /// exporter's file exists already, checks it now.
    ///
    /// # Errors
    /// [`OpenError::Fingerprint`] naming the topic if the exporter's type differs,
    /// [`OpenError::Topic`] if it carries another topic, [`OpenError::BadName`], or
    /// [`OpenError::Layout`]/[`OpenError::Io`] for a file that is there but unusable. A missing
    /// file is not an error: the actor attaches when it appears.
    pub fn new(channel: &str, config: &ChannelConfig) -> Result<Self, OpenError> {
        match Receiver::<T, C>::open(channel, config) {
            Ok(_probe) => {} // dropped: released again; the actor attaches for good
            Err(OpenError::NotReady | OpenError::InUse { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(ShmImport {
            channel: Some(channel.to_owned()),
            topic: Topic::of(),
            config: config.clone(),
            status: IpcStatus::default(),
            name: format!("ipc-import-{channel}"),
            park: None,
            _t: PhantomData,
        })
    }

    /// Declares the import of `topic` (its actor, `ipc-import-<name>`, publishes it): from the
    /// channel [`topic_channel`] of the name the topic runs under on the bus (after its
    /// `remap`s), whose header must carry that name's id and `T`'s fingerprint. The channel is
    /// looked for once the bus runs, and every tick until it appears; a channel of another
    /// topic or type is refused, its error kept in [`status`](Self::status)'s
    /// [`last_error`](IpcStatus::last_error), and looked at again on later ticks.
    pub fn on(topic: &Topic<T>, config: &ChannelConfig) -> Self {
        ShmImport {
            channel: None,
            topic: topic.clone(),
            config: config.clone(),
            status: IpcStatus::default(),
            name: format!("ipc-import-{}", topic.name()),
            park: None,
            _t: PhantomData,
        }
    }

    /// When the shared ring is empty, sleep in `poll` on the mapping's futex up to `max`
    /// (capped at 1 ms; the exporter wakes it in microseconds) instead of returning to the
    /// bus's idle strategy at once. For an import actor alone on its thread, with
    /// `Idle::Backoff` (with `Idle::Park` the thread would then sleep on the bus's doorbell,
    /// which the other process cannot ring, until the next tick). Default off.
    pub fn park_on_futex(mut self, max: Duration) -> Self {
        self.park = Some(max);
        self
    }

    /// A handle on the import's counters and errors.
    pub fn status(&self) -> IpcStatus {
        self.status.clone()
    }
}

impl<T: Message + Clone, C: SlotCodec<T>> Component for ShmImport<T, C> {
    type Actor = ImportActor<T, C>;

    fn attach(self, bus: &mut BusBuilder) -> ActorBuilder<'_, Self::Actor> {
        let ShmImport {
            channel,
            topic,
            config,
            status,
            name,
            park,
            _t,
        } = self;
        let declared = topic.clone();
        bus.actor(&name, move |setup: &mut Setup<'_>| {
            // A channel given by name carries the type's default topic as the exporter made
            // it; a named topic's channel and id are its running name's.
            let (channel, running) = match &channel {
                Some(channel) => (channel.clone(), topic.clone()),
                None => {
                    let running = setup.topic(&topic);
                    (topic_channel(running.name()), running)
                }
            };
            ImportActor {
                out: setup.output_on(&topic),
                channel,
                topic: running,
                config: config.clone(),
                status: status.clone(),
                park,
                rx: None,
                last_pid_check: Instant::now(),
            }
        })
        .publishes_to(&declared)
        .tick_every(TICK)
    }
}

/// The actor of a [`ShmImport`].
#[derive(Debug)]
pub struct ImportActor<T, C> {
    out: Out<T>,
    channel: String,
    /// The topic the channel must carry (its running name and id).
    topic: Topic<T>,
    config: ChannelConfig,
    status: IpcStatus,
    park: Option<Duration>,
    rx: Option<Receiver<T, C>>,
    last_pid_check: Instant,
}

impl<T: Message + Clone, C: SlotCodec<T>> ImportActor<T, C> {
    fn read(&mut self, ctx: &mut Context<'_>, budget: usize) -> usize {
        let Some(rx) = self.rx.as_mut() else { return 0 };
        let out = self.out;
        match rx.recv_batch(budget, |m| ctx.publish(out, m)) {
            Ok((n, malformed)) => {
                self.status
                    .0
                    .moved
                    .fetch_add((n - malformed) as u64, Ordering::Relaxed);
                if malformed > 0 {
                    self.status
                        .0
                        .malformed
                        .fetch_add(malformed as u64, Ordering::Relaxed);
                }
                n
            }
            Err(e) => {
                self.status.0.corrupt.fetch_add(1, Ordering::Relaxed);
                self.status
                    .error(format!("topic '{}': {e}", self.topic.name()));
                self.disconnect();
                0
            }
        }
    }

    fn disconnect(&mut self) {
        self.rx = None; // drops the mapping; reclaims the file if its writer is gone
        self.status.0.connected.store(false, Ordering::Release);
    }
}

impl<T: Message + Clone, C: SlotCodec<T>> Actor for ImportActor<T, C> {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let n = self.read(ctx, 256);
        if n == 0 {
            if let (Some(max), Some(rx)) = (self.park, self.rx.as_mut()) {
                // Bounded by `max`, so ticks and stops are still seen.
                if rx.park(max.min(TICK)).is_err() {
                    self.status.0.corrupt.fetch_add(1, Ordering::Relaxed);
                    self.disconnect();
                }
            }
        }
        n
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let check_pid = self.last_pid_check.elapsed() >= PID_CHECK;
        if check_pid {
            self.last_pid_check = Instant::now();
        }
        match self.rx.as_mut() {
            None => match Receiver::<T, C>::open_on(&self.channel, &self.topic, &self.config) {
                Ok(rx) => {
                    self.rx = Some(rx);
                    self.status.0.connects.fetch_add(1, Ordering::Relaxed);
                    self.status.0.connected.store(true, Ordering::Release);
                }
                Err(OpenError::NotReady) => {}
                Err(e) => self.status.error(e.to_string()),
            },
            Some(rx) => match rx.heartbeat(check_pid) {
                PeerState::Alive(_) => {}
                state => {
                    // Take what the writer published before it went, then let go.
                    while self.read(ctx, 1024) > 0 {}
                    if let PeerState::Dead(pid) = state {
                        self.status.0.peer_deaths.fetch_add(1, Ordering::Relaxed);
                        self.status.error(format!(
                            "topic '{}': exporting process {pid} died; its file is reclaimed, waiting for a new one",
                            self.topic.name()
                        ));
                    }
                    self.disconnect();
                }
            },
        }
    }
}
