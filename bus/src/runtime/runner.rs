//! The runner: one OS thread driving one actor or a group of them (Agrona's composite agent).
//!
//! Each round, every live actor gets one turn: its inbox is polled with a budget per ring, then
//! its `poll` hook, then its tick if due. The thread's idle strategy is told how much work the
//! round did. An actor that always has work therefore still yields the thread to its group
//! mates after each turn. Panics are caught per turn (and around every factory call and every
//! drop of an actor) and handled by the actor's supervision policy. A panic anywhere else in a
//! bus thread (a bug in llbus) is not lost either: the thread's guard stops the bus, marks the
//! thread's stop hooks done so that the stop protocol does not wait for it, and `join` reports
//! the thread.

use std::any::{Any, TypeId};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::actor::{Actor, Context, Setup};
use super::control::{Control, EXIT, GO_ABORT, GO_RUN, GO_WAIT, RUNNING, STOPPING};
use super::decl::{OutputKey, SlotParts};
use super::edge::{AnyOutput, Committer, Wiring};
use super::error::{panic_message, StartError};
use super::metrics::ActorCounters;
use super::names::Renames;
use super::{RestartLimit, Supervision};
use crate::message::Inbox;
use crate::service::{Orphan, Orphans, PendingCalls};
use crate::topic::{TopicName, TopicPattern};
use crate::wait::IdleStrategy;

/// Messages taken from one ring in one turn: bounds a turn's length, so group mates and other
/// rings get their share.
const BUDGET: usize = 64;

/// An actor with its type erased, as its thread sees it.
pub(crate) trait Slot: Send {
    /// Runs the factory; returns setup errors.
    fn create(&mut self) -> Result<(), StartError>;
    fn start(&mut self, env: &mut Env<'_>);
    fn turn(&mut self, env: &mut Env<'_>) -> usize;
    /// Runs the current instance's `on_stop` unless it ran already (an instance remade during
    /// the stop gets its own); returns 1 if it ran.
    fn stop(&mut self, env: &mut Env<'_>) -> usize;
    /// When the actor next needs a turn without any message: its next tick, or a restart
    /// that waits out its delay.
    fn next_deadline(&self) -> Option<Instant>;
    /// Whether the actor can ever have such a deadline (it ticks, or it may be restarted).
    fn has_deadlines(&self) -> bool;
    /// Drops the actor instance as its thread leaves, catching a panic in its `Drop`: the
    /// calls it held answer `Stopped`, and its own calls still open are counted ended.
    fn drop_actor(&mut self);
}

/// What a turn needs from its thread.
pub(crate) struct Env<'a> {
    pub(crate) idle: &'a mut (dyn IdleStrategy + 'static),
    pub(crate) control: &'a Control,
    /// The time of the current round, read from the clock at most once per round, when first
    /// needed. NB: a clock read costs several times what publishing and handling a message
    /// does (docs/PERFORMANCE.md, "Reading the clock"); a thread without ticks whose actors
    /// never ask pays nothing.
    pub(crate) now: std::cell::Cell<Option<Instant>>,
    pub(crate) phase: usize,
}

impl Env<'_> {
    /// The time of the current round (read from the clock on first use).
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        read_clock(&self.now)
    }
}

/// The round's time from `cell`, reading the clock if this round has not yet.
#[inline]
pub(crate) fn read_clock(cell: &std::cell::Cell<Option<Instant>>) -> Instant {
    match cell.get() {
        Some(now) => now,
        None => {
            let now = Instant::now();
            cell.set(Some(now));
            now
        }
    }
}

enum State {
    Alive,
    /// Needs a fresh instance from the factory, at `at` (`Restart`) or at once once the bus
    /// is stopping.
    Restarting {
        at: Instant,
    },
    /// Gone for good (`Stop`, `Escalate`).
    Dead,
}

/// Restarts counted against a [`RestartLimit`]: the current window and how many it holds.
#[derive(Default)]
struct RestartWindow {
    start: Option<Instant>,
    count: u32,
}

impl RestartWindow {
    /// Counts a failure at `now`: `Some(delay)` before the restart, or `None` when the limit is
    /// spent and the failure must escalate.
    fn admit(&mut self, limit: &RestartLimit, now: Instant) -> Option<Duration> {
        let fresh = match self.start {
            Some(start) => now.saturating_duration_since(start) > limit.within,
            None => true,
        };
        if fresh {
            self.start = Some(now);
            self.count = 0;
        }
        if self.count >= limit.max_restarts {
            return None;
        }
        self.count += 1;
        let doublings = (self.count - 1).min(20);
        Some(
            limit
                .delay
                .saturating_mul(1 << doublings)
                .min(RestartLimit::MAX_DELAY),
        )
    }
}

pub(crate) struct ActorSlot<A: Actor, F> {
    name: String,
    factory: F,
    actor: Option<A>,
    rx: Option<<A::In as Inbox>::Receivers>,
    /// The rings of topics subscribed with `takes`, until the factory takes them.
    taken: Wiring,
    /// The actor's outputs (`Output<M>`s), wired, as `Any`.
    outputs: Vec<Box<dyn Any + Send>>,
    /// The outputs with broadcast rings, by index, and what commits each: run after every
    /// hook, so that what a hook published reaches each broadcast ring as one run.
    committers: Vec<(usize, Committer)>,
    output_keys: Vec<OutputKey>,
    patterns: Vec<(TypeId, TopicPattern)>,
    /// The calls this actor's responders were dropped unanswered with (services).
    orphans: Arc<Orphans>,
    /// Where they are taken to be answered (reused).
    orphaned: Vec<Orphan>,
    /// Its calls in flight, if it calls services.
    pending: PendingCalls,
    /// The services it serves, as they run.
    serves: Vec<TopicName>,
    /// Turns since the deadlines of its calls were last looked at.
    deadline_turns: u32,
    /// Whether the actor serves or calls services: only then does a turn look for orphaned
    /// calls and deadlines (every other actor's turn is as it was before services).
    services: bool,
    /// The topics the actor receives, as they run: what `Context::topic` looks up.
    topics: Vec<TopicName>,
    renames: Arc<Renames>,
    counters: Arc<ActorCounters>,
    supervision: Supervision,
    tick: Option<Duration>,
    next_tick: Instant,
    state: State,
    restarts: RestartWindow,
    /// The current instance's `on_stop` has run.
    stopped: bool,
}

impl<A, F> ActorSlot<A, F>
where
    A: Actor,
    F: FnMut(&mut Setup<'_>) -> A + Send + 'static,
{
    /// The slot of actor `name`, made by `factory` from the parts `start()` wired for it: its
    /// inbox takes its rings from the wiring, and what it leaves are the `takes` topics, for
    /// the factory.
    pub(crate) fn new(name: String, factory: F, mut parts: SlotParts) -> Self {
        let rx = <A::In as Inbox>::receivers(&mut parts.wiring);
        let committers = (parts.outputs.iter().enumerate())
            .filter_map(|(i, o)| o.committer().map(|c| (i, c)))
            .collect();
        let services = !parts.serves.is_empty() || parts.pending.is_used();
        ActorSlot {
            services,
            committers,
            name,
            factory,
            actor: None,
            rx: Some(rx),
            taken: parts.wiring,
            // NB: stored as `Any`, so that a publish finds its output with one dynamic call
            // (`Any::type_id`), not two (`as_any_mut`, then that): the two are a large part of a
            // one-thread feed-and-sink's profile (`benches/examples/one_thread_fanout.rs`;
            // docs/PERFORMANCE.md, "Where the time went (before)").
            outputs: parts.outputs.into_iter().map(AnyOutput::into_any).collect(),
            output_keys: parts.output_keys,
            patterns: parts.patterns,
            orphans: parts.orphans,
            orphaned: Vec::new(),
            pending: parts.pending,
            serves: parts.serves,
            deadline_turns: 0,
            topics: parts.topics,
            renames: parts.renames,
            counters: parts.counters,
            supervision: parts.supervision,
            tick: parts.tick,
            next_tick: Instant::now(),
            state: State::Restarting { at: Instant::now() },
            restarts: RestartWindow::default(),
            stopped: false,
        }
    }

    /// Publishes what the last hook wrote into the outputs' broadcast rings (one index store
    /// per ring), given the hook's `Context::published`. Runs after every hook, whether it
    /// returned or panicked, so nothing a hook published waits past it: not for a wait, a
    /// stop step, a park or the thread's exit.
    #[inline]
    fn commit(&mut self, published: u64) {
        if published == 0 {
            return;
        }
        for &(i, commit) in &self.committers {
            if published & (1 << i.min(63)) != 0 {
                if let Some(output) = self.outputs.get_mut(i) {
                    commit(&mut **output);
                }
            }
        }
    }

    /// Answers the calls whose responders were dropped unanswered (after each hook, and when a
    /// failed instance is dropped): one atomic load when there are none.
    #[inline]
    fn answer_orphans(&mut self) {
        if self.services {
            self.answer_orphans_now();
        }
    }

    #[inline(never)]
    fn answer_orphans_now(&mut self) {
        self.orphans.take(&mut self.orphaned);
        if self.orphaned.is_empty() {
            return;
        }
        for orphan in self.orphaned.drain(..) {
            if let Some(output) = self.outputs.get_mut(orphan.out) {
                (orphan.answer)(&mut **output, orphan.call, orphan.end);
            }
        }
    }

    /// Ends the calls past their deadline, and those of a server gone for good: their ends
    /// (`Timeout`, `Stopped`) go into the actor's own reply rings, handled next turn. Looked at
    /// after a turn that found nothing to do (`work == 0`), and every 64 turns of a busy
    /// actor: never before handling (a clock read there would delay every reply).
    #[inline(never)]
    fn expire_calls(&mut self, work: usize, env: &mut Env<'_>) -> usize {
        if !self.pending.in_flight() {
            return 0;
        }
        self.deadline_turns = self.deadline_turns.wrapping_add(1);
        if work == 0 || self.deadline_turns % 64 == 0 {
            let now = env.now();
            return self.pending.expire(now, work == 0, &mut self.outputs);
        }
        0
    }

    /// Runs the factory, catching a panic.
    fn make(&mut self) -> Result<A, StartError> {
        let mut errors = Vec::new();
        let mut setup = Setup {
            actor: &self.name,
            outputs: &self.output_keys,
            patterns: &self.patterns,
            orphans: &self.orphans,
            serves: &self.serves,
            renames: &self.renames,
            errors: &mut errors,
            taken: &mut self.taken,
            counters: &self.counters,
        };
        let factory = &mut self.factory;
        let made = catch_unwind(AssertUnwindSafe(|| factory(&mut setup)));
        match made {
            Err(payload) => Err(StartError::FactoryPanicked {
                actor: self.name.clone(),
                message: panic_message(&*payload),
            }),
            Ok(_) if !errors.is_empty() => Err(StartError::Setup(errors.join("; "))),
            Ok(actor) => Ok(actor),
        }
    }

    /// Handles a panic caught in a hook or the factory according to the supervision policy.
    fn failed(&mut self, message: String, control: &Control) {
        self.counters.panics.add(1);
        // The calls the failed instance held answer `ServerPanicked` as it drops.
        self.orphans.failing.store(true, Ordering::Relaxed);
        self.drop_instance();
        self.orphans.failing.store(false, Ordering::Relaxed);
        self.answer_orphans();
        match self.supervision {
            Supervision::Restart(limit) => {
                let now = Instant::now();
                match self.restarts.admit(&limit, now) {
                    Some(delay) => {
                        log::warn!(
                            "actor '{}' panicked and will be restarted in {delay:?}: {message}",
                            self.name
                        );
                        self.state = State::Restarting {
                            at: now.checked_add(delay).unwrap_or(now),
                        };
                    }
                    None => {
                        let message = format!(
                            "restarted {} times within {:?}, then panicked again: {message}",
                            limit.max_restarts, limit.within
                        );
                        log::error!("actor '{}' {message}; stopping the bus", self.name);
                        self.retire();
                        control.escalate(&self.name, &message);
                    }
                }
            }
            Supervision::Stop => {
                log::error!("actor '{}' panicked and stops: {message}", self.name);
                self.retire();
            }
            Supervision::Escalate => {
                log::error!(
                    "actor '{}' panicked; stopping the bus: {message}",
                    self.name
                );
                self.retire();
                control.escalate(&self.name, &message);
            }
        }
    }

    /// Drops the current instance, if any, catching (and counting) a panic in its `Drop`.
    fn drop_instance(&mut self) {
        if let Some(actor) = self.actor.take() {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(actor))) {
                self.counters.panics.add(1);
                log::error!(
                    "actor '{}' panicked while being dropped: {}",
                    self.name,
                    panic_message(&*payload)
                );
            }
        }
    }

    /// Ends the actor for good: its inputs go (what is queued is counted lost; publishers see
    /// the rings abandoned, and the callers of a service it served end their calls
    /// `Stopped`), its calls still open are counted ended (`Stopped`: nobody will settle
    /// them), and its outputs go (subscribers see the rings abandoned).
    fn retire(&mut self) {
        self.state = State::Dead;
        self.drop_instance();
        self.rx = None;
        self.pending.close();
        self.outputs.clear();
    }

    /// Makes a fresh instance after a panic (`Restart`) and runs its `on_start`. A factory that
    /// panics counts toward the restart limit; one that reports setup errors cannot be fixed
    /// by retrying, and escalates.
    fn revive(&mut self, env: &mut Env<'_>) {
        self.counters.restarts.add(1);
        match self.make() {
            Ok(actor) => {
                self.actor = Some(actor);
                Slot::start(self, env);
            }
            Err(StartError::FactoryPanicked { message, .. }) => {
                self.failed(format!("(in its factory) {message}"), env.control);
            }
            Err(e) => {
                let message = e.to_string();
                log::error!(
                    "actor '{}' could not be remade; stopping the bus: {message}",
                    self.name
                );
                self.retire();
                env.control.escalate(&self.name, &message);
            }
        }
    }
}

impl<A, F> Slot for ActorSlot<A, F>
where
    A: Actor,
    F: FnMut(&mut Setup<'_>) -> A + Send + 'static,
{
    fn create(&mut self) -> Result<(), StartError> {
        let actor = self.make()?;
        self.actor = Some(actor);
        Ok(())
    }

    fn start(&mut self, env: &mut Env<'_>) {
        if let Some(tick) = self.tick {
            // Declared intervals are checked in `start()`; saturate all the same.
            let now = env.now();
            self.next_tick = now.checked_add(tick).unwrap_or(now);
        }
        let Some(actor) = self.actor.as_mut() else {
            return;
        };
        self.state = State::Alive;
        self.stopped = false;
        let mut ctx = context(
            &self.name,
            &mut self.outputs,
            &self.topics,
            &mut self.pending,
            &self.orphans,
            env,
        );
        let started = catch_unwind(AssertUnwindSafe(|| actor.on_start(&mut ctx)));
        let published = ctx.published;
        self.commit(published);
        self.answer_orphans();
        if let Err(payload) = started {
            self.failed(panic_message(&*payload), env.control);
        }
    }

    #[inline]
    fn turn(&mut self, env: &mut Env<'_>) -> usize {
        match self.state {
            State::Alive => {}
            State::Restarting { at } => {
                if env.phase == RUNNING && env.now() < at {
                    return 0;
                }
                self.revive(env);
                return 1;
            }
            State::Dead => return 0,
        }
        let (Some(actor), Some(rx)) = (self.actor.as_mut(), self.rx.as_mut()) else {
            return 0;
        };
        let env_running = env.phase == RUNNING;
        let control: &Control = env.control;
        let tick = self.tick.is_some();
        let next_tick = self.next_tick;
        // The topic of the ring being handled: set once a ring by the inbox, read by
        // `Context::topic`, cleared before the other hooks.
        let current_topic = std::cell::Cell::new(None);
        let mut ctx = context(
            &self.name,
            &mut self.outputs,
            &self.topics,
            &mut self.pending,
            &self.orphans,
            env,
        );
        ctx.topic = Some(&current_topic);
        let counters = &self.counters;
        // Messages whose handler returned, counted as they go so that a panic later in the
        // turn does not take the earlier ones out of the actor's figure (its edges count each
        // message as it is handled).
        let mut handled = 0u64;
        let mut tick_due = false;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let on_topic = &mut |topic| current_topic.set(Some(topic));
            let taken = <A::In as Inbox>::poll(rx, BUDGET, on_topic, &mut |msg| {
                actor.on_message(msg, &mut ctx);
                handled += 1;
            });
            current_topic.set(None);
            // A stop request moves the phase at once, and a handler may just have made one (or
            // another thread, meanwhile): after handling anything, look again (one load), so
            // that no `poll` or tick starts after the request.
            let running = env_running && (taken == 0 || control.phase() == RUNNING);
            let mut work = taken;
            work += if running {
                actor.poll(&mut ctx)
            } else {
                actor.drain(&mut ctx)
            };
            // `poll` may have asked for a stop too: a due tick looks once more.
            tick_due = running && tick && ctx.now() >= next_tick && control.phase() == RUNNING;
            if tick_due {
                actor.on_tick(&mut ctx);
                counters.ticks.add(1);
                work += 1;
            }
            work
        }));
        let published = ctx.published;
        self.commit(published);
        self.answer_orphans();
        if handled > 0 {
            self.counters.handled.add(handled);
        }
        match outcome {
            Ok(work) => {
                if tick_due {
                    if let Some(interval) = self.tick {
                        let now = env.now();
                        self.next_tick = match self.next_tick.checked_add(interval) {
                            Some(next) if next >= now => next,
                            // Fell behind (a slow handler): skip missed ticks, keep the phase.
                            _ => now.checked_add(interval).unwrap_or(now),
                        };
                    }
                }
                if work == 0 {
                    self.counters.idle_rounds.add(1);
                }
                if self.services {
                    return work + self.expire_calls(work, env);
                }
                work
            }
            Err(payload) => {
                self.failed(panic_message(&*payload), env.control);
                1
            }
        }
    }

    fn stop(&mut self, env: &mut Env<'_>) -> usize {
        if self.stopped {
            return 0;
        }
        let Some(actor) = self.actor.as_mut() else {
            return 0;
        };
        self.stopped = true;
        let mut ctx = context(
            &self.name,
            &mut self.outputs,
            &self.topics,
            &mut self.pending,
            &self.orphans,
            env,
        );
        let stopped = catch_unwind(AssertUnwindSafe(|| actor.on_stop(&mut ctx)));
        let published = ctx.published;
        self.commit(published);
        self.answer_orphans();
        // The bus has drained: a call still open now is held by its server (or lost), and
        // ends `Stopped` in the actor's inbox, which the stop drains before the threads exit.
        if self.pending.is_used() {
            self.pending.end_all(&mut self.outputs);
        }
        if let Err(payload) = stopped {
            let message = panic_message(&*payload);
            self.counters.panics.add(1);
            log::error!("actor '{}' panicked in on_stop: {message}", self.name);
        }
        1
    }

    fn has_deadlines(&self) -> bool {
        self.tick.is_some()
            || matches!(self.supervision, Supervision::Restart(_))
            || self.pending.is_used()
    }

    fn next_deadline(&self) -> Option<Instant> {
        let own = match (self.tick, &self.state) {
            (_, State::Restarting { at }) => Some(*at),
            (Some(_), State::Alive) => Some(self.next_tick),
            _ => None,
        };
        match (own, self.pending.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drop_actor(&mut self) {
        // The calls its instance still holds answer `Stopped`, before its reply rings go.
        self.orphans.stopped.store(true, Ordering::Relaxed);
        self.drop_instance();
        if self.services {
            self.answer_orphans_now();
        }
        self.pending.close();
    }
}

/// The context of one hook call of the actor called `name`.
fn context<'a>(
    name: &'a str,
    outputs: &'a mut [Box<dyn Any + Send>],
    topics: &'a [TopicName],
    pending: &'a mut PendingCalls,
    orphans: &'a Arc<Orphans>,
    env: &'a mut Env<'_>,
) -> Context<'a> {
    Context {
        actor: name,
        outputs,
        topics,
        pending,
        orphans,
        topic: None,
        idle: &mut *env.idle,
        now: &env.now,
        control: env.control,
        published: 0,
    }
}

/// How a thread reports that its actors are made (or why not).
pub(crate) type Ready = mpsc::Sender<Result<(), StartError>>;

/// Everything one bus thread owns.
pub(crate) struct ThreadPlan {
    /// The thread's place in the bus's list (its stop-hook flag in `Control`).
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) core: Option<usize>,
    /// The cores an unpinned thread runs on: the process's allowed set, read in `start()`.
    pub(crate) cpus: Vec<usize>,
    pub(crate) idle: Box<dyn IdleStrategy>,
    pub(crate) slots: Vec<Box<dyn Slot>>,
}

/// Stops the bus if its thread unwinds: a panic outside the per-turn `catch_unwind` (a bug
/// in llbus) must reach `join`, not leave it waiting for a thread that is gone.
struct ThreadGuard<'a> {
    control: &'a Control,
    index: usize,
    name: &'a str,
    /// Whether this thread has counted its stop hooks as done.
    hooks_counted: bool,
}

impl Drop for ThreadGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            log::error!(
                "bus thread '{}' panicked outside an actor's hooks; stopping the bus",
                self.name
            );
            self.control.hooks_ran(self.index);
            self.control.request_stop();
        }
    }
}

/// A thread's part of the stop protocol, after every actor's turn in a round: once the phase
/// reaches `Stopping`, runs the stop hooks of every instance that has not run them
/// (`run_hooks`, each round: an instance remade during the stop gets its own) and, the first
/// time, marks thread `thread`'s hooks done. Returns the work that made (for the idle strategy)
/// and whether the thread must leave its loop (`Exit`).
pub(crate) fn end_of_round(
    control: &Control,
    thread: usize,
    phase: usize,
    hooks_counted: &mut bool,
    run_hooks: impl FnOnce() -> usize,
) -> (usize, bool) {
    let mut work = 0;
    if phase >= STOPPING {
        work = run_hooks();
        if !*hooks_counted {
            *hooks_counted = true;
            control.hooks_ran(thread);
            work += 1;
        }
    }
    (work, phase == EXIT)
}

/// The body of a bus thread.
pub(crate) fn run_thread(mut plan: ThreadPlan, control: Arc<Control>, ready: Ready) {
    let name = plan.name.clone();
    let mut guard = ThreadGuard {
        control: &control,
        index: plan.index,
        name: &name,
        hooks_counted: false,
    };
    match plan.core {
        Some(core) => {
            if let Err(error) = crate::wait::pin_to_core(core) {
                let _ = ready.send(Err(StartError::Pin {
                    thread: plan.name.clone(),
                    error,
                }));
                return;
            }
        }
        None => {
            if let Err(error) = crate::wait::run_on_cores(&plan.cpus) {
                log::warn!(
                    "bus thread '{}' could not be set to run on cores {:?}: {error}",
                    plan.name,
                    plan.cpus
                );
            }
        }
    }
    for slot in &mut plan.slots {
        if let Err(e) = slot.create() {
            let _ = ready.send(Err(e));
            return;
        }
    }
    if ready.send(Ok(())).is_err() {
        return;
    }
    drop(ready);
    // Wait for every thread to be ready before any actor starts.
    let backoff = crossbeam_utils::Backoff::new();
    loop {
        match control.go() {
            GO_WAIT => {
                if backoff.is_completed() {
                    std::thread::sleep(Duration::from_micros(100));
                } else {
                    backoff.snooze();
                }
            }
            GO_RUN => break,
            _ => return, // GO_ABORT: start() failed elsewhere.
        }
    }
    debug_assert_ne!(control.go(), GO_ABORT);

    let idle: &mut (dyn IdleStrategy + 'static) = &mut *plan.idle;
    let mut env = Env {
        idle,
        control: &control,
        now: std::cell::Cell::new(None),
        phase: RUNNING,
    };
    for slot in &mut plan.slots {
        slot.start(&mut env);
    }
    // Whether any actor of this thread has deadlines (ticks, delayed restarts): only then is
    // the next one looked for each round.
    let deadlines = plan.slots.iter().any(|s| s.has_deadlines());
    loop {
        env.phase = control.phase();
        env.now.set(None);
        let mut work = 0;
        // Once the stop has reached `Exit` nothing more is handled: what is still queued is
        // counted lost as the inputs drop, and subscriptions that report closed stay closed.
        if env.phase != EXIT {
            for slot in &mut plan.slots {
                work += slot.turn(&mut env);
            }
        }
        let phase = env.phase;
        let (more, exit) = end_of_round(
            &control,
            plan.index,
            phase,
            &mut guard.hooks_counted,
            || plan.slots.iter_mut().map(|slot| slot.stop(&mut env)).sum(),
        );
        work += more;
        if exit {
            break;
        }
        let deadline = if deadlines {
            plan.slots.iter().filter_map(|s| s.next_deadline()).min()
        } else {
            None
        };
        match deadline {
            Some(deadline) => env.idle.idle_until(work, deadline),
            None => env.idle.idle(work),
        }
    }
    for slot in &mut plan.slots {
        slot.drop_actor();
    }
    // Dropping the slots drops their inputs (counting what is left as lost) and outputs.
    drop(plan);
    drop(guard);
}
