//! The runner: one OS thread driving one actor or a group of them (Agrona's composite agent).
//!
//! Each round, every live actor gets one turn: its inbox is polled with a budget per ring, then
//! its `poll` hook, then its tick if due. The thread's idle strategy is told how much work the
//! round did. An actor that always has work therefore still yields the thread to its group
//! mates after each turn. Panics are caught per turn and handled by the actor's supervision
//! policy.

use std::any::TypeId;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::actor::{Actor, Context, Setup};
use super::control::{Control, EXIT, GO_ABORT, GO_RUN, GO_WAIT, RUNNING, STOPPING};
use super::edge::{AnyOutput, Wiring};
use super::error::{panic_message, StartError};
use super::metrics::ActorCounters;
use super::Supervision;
use crate::message::Inbox;
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
    fn stop(&mut self, env: &mut Env<'_>);
    fn next_tick(&self) -> Option<Instant>;
    /// Whether the actor has a tick interval at all.
    fn ticks(&self) -> bool;
}

/// What a turn needs from its thread.
pub(crate) struct Env<'a> {
    pub(crate) idle: &'a mut (dyn IdleStrategy + 'static),
    pub(crate) control: &'a Control,
    /// The time of the current round, read from the clock at most once per round, when first
    /// needed. NB: reading it costs ~29 ns here (the `bus` benchmark's profile); a thread
    /// without ticks whose actors never ask pays nothing.
    pub(crate) now: std::cell::Cell<Option<Instant>>,
    pub(crate) phase: u8,
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
    /// Needs a fresh instance from the factory before its next turn (`Restart`).
    Restarting,
    /// Gone for good (`Stop`, `Escalate`).
    Dead,
}

pub(crate) struct ActorSlot<A: Actor, F> {
    name: String,
    factory: F,
    actor: Option<A>,
    rx: Option<<A::In as Inbox>::Receivers>,
    /// The rings of topics subscribed with `takes`, until the factory takes them.
    taken: Wiring,
    outputs: Vec<Box<dyn AnyOutput>>,
    output_types: Vec<TypeId>,
    output_topics: Vec<&'static str>,
    counters: Arc<ActorCounters>,
    supervision: Supervision,
    tick: Option<Duration>,
    next_tick: Instant,
    state: State,
}

impl<A, F> ActorSlot<A, F>
where
    A: Actor,
    F: FnMut(&mut Setup<'_>) -> A + Send + 'static,
{
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: String,
        factory: F,
        rx: <A::In as Inbox>::Receivers,
        taken: Wiring,
        outputs: Vec<Box<dyn AnyOutput>>,
        output_types: Vec<TypeId>,
        output_topics: Vec<&'static str>,
        counters: Arc<ActorCounters>,
        supervision: Supervision,
        tick: Option<Duration>,
    ) -> Self {
        ActorSlot {
            name,
            factory,
            actor: None,
            rx: Some(rx),
            taken,
            outputs,
            output_types,
            output_topics,
            counters,
            supervision,
            tick,
            next_tick: Instant::now(),
            state: State::Restarting,
        }
    }

    /// Runs the factory, catching a panic.
    fn make(&mut self) -> Result<A, StartError> {
        let mut errors = Vec::new();
        let mut setup = Setup {
            actor: &self.name,
            outputs: &self.output_types,
            output_topics: &self.output_topics,
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

    /// Handles a panic caught in a hook according to the supervision policy.
    fn failed(&mut self, message: String, control: &Control) {
        self.counters.panics.add(1);
        self.actor = None;
        match self.supervision {
            Supervision::Restart => {
                log::warn!(
                    "actor '{}' panicked and will be restarted: {message}",
                    self.name
                );
                self.state = State::Restarting;
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

    /// Ends the actor for good: its inputs go (what is queued is counted lost; publishers see
    /// the rings abandoned) and its outputs go (subscribers see the rings abandoned).
    fn retire(&mut self) {
        self.state = State::Dead;
        self.actor = None;
        self.rx = None;
        self.outputs.clear();
    }

    /// Makes a fresh instance after a panic (`Restart`) and runs its `on_start`. If the
    /// factory itself fails now, the actor cannot go on: the failure escalates.
    fn revive(&mut self, env: &mut Env<'_>) {
        match self.make() {
            Ok(actor) => {
                self.actor = Some(actor);
                Slot::start(self, env);
            }
            Err(e) => {
                let message = e.to_string();
                self.counters.panics.add(1);
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
            self.next_tick = env.now() + tick;
        }
        let Some(actor) = self.actor.as_mut() else {
            return;
        };
        self.state = State::Alive;
        let mut ctx = context(&self.name, &mut self.outputs, env);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| actor.on_start(&mut ctx))) {
            self.failed(panic_message(&*payload), env.control);
        }
    }

    #[inline]
    fn turn(&mut self, env: &mut Env<'_>) -> usize {
        match self.state {
            State::Alive => {}
            State::Restarting => {
                self.counters.restarts.add(1);
                self.revive(env);
                return 1;
            }
            State::Dead => return 0,
        }
        let (Some(actor), Some(rx)) = (self.actor.as_mut(), self.rx.as_mut()) else {
            return 0;
        };
        let running = env.phase == RUNNING;
        let tick_due = running && self.tick.is_some() && env.now() >= self.next_tick;
        let mut ctx = context(&self.name, &mut self.outputs, env);
        let counters = &self.counters;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let handled = <A::In as Inbox>::poll(rx, BUDGET, &mut |msg| {
                actor.on_message(msg, &mut ctx);
            });
            if handled > 0 {
                counters.handled.add(handled as u64);
            }
            let mut work = handled;
            work += if running {
                actor.poll(&mut ctx)
            } else {
                actor.drain(&mut ctx)
            };
            if tick_due {
                actor.on_tick(&mut ctx);
                counters.ticks.add(1);
                work += 1;
            }
            work
        }));
        match outcome {
            Ok(work) => {
                if tick_due {
                    if let Some(interval) = self.tick {
                        self.next_tick += interval;
                        let now = env.now();
                        if self.next_tick < now {
                            // Fell behind (a slow handler): skip missed ticks, keep the phase.
                            self.next_tick = now + interval;
                        }
                    }
                }
                if work == 0 {
                    self.counters.idle_rounds.add(1);
                }
                work
            }
            Err(payload) => {
                self.failed(panic_message(&*payload), env.control);
                1
            }
        }
    }

    fn stop(&mut self, env: &mut Env<'_>) {
        let Some(actor) = self.actor.as_mut() else {
            return;
        };
        let mut ctx = context(&self.name, &mut self.outputs, env);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| actor.on_stop(&mut ctx))) {
            let message = panic_message(&*payload);
            self.counters.panics.add(1);
            log::error!("actor '{}' panicked in on_stop: {message}", self.name);
        }
    }

    fn ticks(&self) -> bool {
        self.tick.is_some()
    }

    fn next_tick(&self) -> Option<Instant> {
        match (self.tick, &self.state) {
            (Some(_), State::Alive) => Some(self.next_tick),
            _ => None,
        }
    }
}

/// The context of one hook call of the actor called `name`.
fn context<'a>(
    name: &'a str,
    outputs: &'a mut [Box<dyn AnyOutput>],
    env: &'a mut Env<'_>,
) -> Context<'a> {
    Context {
        actor: name,
        outputs,
        idle: &mut *env.idle,
        now: &env.now,
        control: env.control,
    }
}

/// How a thread reports that its actors are made (or why not).
pub(crate) type Ready = mpsc::Sender<Result<(), StartError>>;

/// Everything one bus thread owns.
pub(crate) struct ThreadPlan {
    pub(crate) name: String,
    pub(crate) core: Option<usize>,
    pub(crate) idle: Box<dyn IdleStrategy>,
    pub(crate) slots: Vec<Box<dyn Slot>>,
}

/// The body of a bus thread.
pub(crate) fn run_thread(mut plan: ThreadPlan, control: Arc<Control>, ready: Ready) {
    if let Some(core) = plan.core {
        if let Err(error) = crate::wait::pin_to_core(core) {
            let _ = ready.send(Err(StartError::Pin {
                thread: plan.name.clone(),
                error,
            }));
            return;
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
    let mut stop_hooks_run = false;
    // Whether any actor of this thread ticks: only then is the next tick looked for each round.
    let ticking = plan.slots.iter().any(|s| s.ticks());
    loop {
        env.phase = control.phase();
        env.now.set(None);
        let mut work = 0;
        for slot in &mut plan.slots {
            work += slot.turn(&mut env);
        }
        if env.phase >= STOPPING && !stop_hooks_run {
            for slot in &mut plan.slots {
                slot.stop(&mut env);
            }
            stop_hooks_run = true;
            control.stop_hooks_done.fetch_add(1, Ordering::AcqRel);
            work += 1;
        }
        if env.phase == EXIT {
            break;
        }
        let deadline = if ticking {
            plan.slots.iter().filter_map(|s| s.next_tick()).min()
        } else {
            None
        };
        match deadline {
            Some(deadline) => env.idle.idle_until(work, deadline),
            None => env.idle.idle(work),
        }
    }
    // Dropping the slots drops their inputs (counting what is left as lost) and outputs.
}
