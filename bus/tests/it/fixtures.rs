//! The message types and small actors that several modules of this binary use.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use llbus::{Actor, Context, Inbox, Out, Setup, StartError};

/// A number: what most tests publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Num(pub u64);
tests::message!(Num, "test.num");

/// A counter, as a [`Ticker`] publishes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick(pub u64);
tests::message!(Tick, "test.tick");

/// What a [`Doubler`] publishes: twice the [`Num`] it got.
#[derive(Clone, Debug, PartialEq)]
pub struct Doubled(pub u64);
tests::message!(Doubled, "test.doubled");

/// Publishes 0, 1, 2, ... as [`Tick`]s, one on every tick (the caller sets `tick_every`).
pub struct Ticker {
    out: Out<Tick>,
    next: u64,
}

impl Ticker {
    /// A ticker that starts from 0, for `bus.actor(name, Ticker::new)`.
    pub fn new(setup: &mut Setup<'_>) -> Ticker {
        Ticker {
            out: setup.output(),
            next: 0,
        }
    }
}

impl Actor for Ticker {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Tick(self.next));
        self.next += 1;
    }
}

/// Publishes twice every number it gets (wrapping), for `bus.actor(name, Doubler::new)`.
pub struct Doubler {
    out: Out<Doubled>,
}

impl Doubler {
    /// A doubler publishing on its declared output.
    pub fn new(setup: &mut Setup<'_>) -> Doubler {
        Doubler {
            out: setup.output(),
        }
    }
}

impl Actor for Doubler {
    type In = Num;
    fn on_message(&mut self, Num(n): Num, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Doubled(n.wrapping_mul(2)));
    }
}

/// Subscribes to `M` and ignores every message, for `bus.actor(name, Ignores::<M>::new)`.
pub struct Ignores<M>(PhantomData<fn() -> M>);

impl<M> Ignores<M> {
    /// A subscriber that handles every message by doing nothing.
    pub fn new(_: &mut Setup<'_>) -> Ignores<M> {
        Ignores(PhantomData)
    }
}

impl<M: Inbox + 'static> Actor for Ignores<M> {
    type In = M;
    fn on_message(&mut self, _: M, _ctx: &mut Context<'_>) {}
}

/// Subscribes to [`Num`] and reads none until `gate` opens: its `on_start` waits for it (and
/// fails the test after 20 s), so that what is published meanwhile queues up.
pub struct Gated {
    /// Opened by the test when the actor may start reading.
    pub gate: Arc<AtomicBool>,
}

impl Actor for Gated {
    type In = Num;
    fn on_start(&mut self, _ctx: &mut Context<'_>) {
        tests::wait_for("the gate", 20, || self.gate.load(Ordering::Acquire));
    }
    fn on_message(&mut self, _: Num, _ctx: &mut Context<'_>) {}
}

/// Does nothing: an actor that only has to be there.
pub struct Nothing;

impl Actor for Nothing {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}

/// Asserts that every edge of `report` balances, counting what is still in flight (edges into
/// external subscriptions, or a report taken while running); see `tests::assert_balanced` for
/// a report from `join` with nothing in flight.
pub fn assert_equation(report: &llbus::Report) {
    for e in &report.edges {
        assert_eq!(
            e.published,
            e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight,
            "edge {} -> {} on {} does not balance: {e:?}",
            e.publisher,
            e.subscriber,
            e.topic
        );
    }
}

/// `start()`'s error for `bus`; panics if the bus starts (after stopping it).
pub fn start_err(bus: llbus::BusBuilder) -> StartError {
    match bus.start() {
        Ok(running) => {
            running.stop();
            panic!("start() accepted the bus: {:?}", running.join());
        }
        Err(e) => e,
    }
}
