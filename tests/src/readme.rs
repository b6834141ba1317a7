//! Actors that README.md's snippets take as given (in hidden doctest lines), so that each
//! snippet shows only what it is about: a source of messages and a sink that stops its bus.

use llbus::{Actor, Context, Message, Out, Setup};

/// Publishes `make(0)`, `make(1)`, ... from its `poll` (as fast as the ring takes them), or one
/// per tick when given `tick_every`, and after `count` of them asks the bus to stop.
pub struct Source<T: Message + Clone> {
    out: Out<T>,
    make: fn(u64) -> T,
    next: u64,
    count: u64,
    from_poll: bool,
}

impl<T: Message + Clone> std::fmt::Debug for Source<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("next", &self.next)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl<T: Message + Clone> Source<T> {
    fn publish_next(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.next == self.count {
            ctx.request_stop();
            return 0;
        }
        ctx.publish(self.out, (self.make)(self.next));
        self.next += 1;
        1
    }
}

impl<T: Message + Clone> Actor for Source<T> {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.from_poll {
            self.publish_next(ctx)
        } else {
            0
        }
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        self.publish_next(ctx);
    }
}

/// A factory of a [`Source`] that publishes `count` messages as fast as it can, then stops the
/// bus.
pub fn source<T: Message + Clone>(
    count: u64,
    make: fn(u64) -> T,
) -> impl FnMut(&mut Setup<'_>) -> Source<T> + Send + 'static {
    move |s: &mut Setup<'_>| Source {
        out: s.output(),
        make,
        next: 0,
        count,
        from_poll: true,
    }
}

/// A factory of a [`Source`] that publishes one message per tick (declare `tick_every`) and never
/// stops the bus itself.
pub fn ticker<T: Message + Clone>(
    make: fn(u64) -> T,
) -> impl FnMut(&mut Setup<'_>) -> Source<T> + Send + 'static {
    move |s: &mut Setup<'_>| Source {
        out: s.output(),
        make,
        next: 0,
        count: u64::MAX,
        from_poll: false,
    }
}

/// Receives messages of `T` and asks its bus to stop after `stop_after` of them.
#[derive(Debug)]
pub struct StopAfter<T> {
    seen: u64,
    stop_after: u64,
    _topic: std::marker::PhantomData<fn(T)>,
}

impl<T: Message> Actor for StopAfter<T> {
    type In = T;
    fn on_message(&mut self, _m: T, ctx: &mut Context<'_>) {
        self.seen += 1;
        if self.seen == self.stop_after {
            ctx.request_stop();
        }
    }
}

/// A factory of a [`StopAfter`].
pub fn stop_after<T: Message>(
    n: u64,
) -> impl FnMut(&mut Setup<'_>) -> StopAfter<T> + Send + 'static {
    move |_: &mut Setup<'_>| StopAfter {
        seen: 0,
        stop_after: n,
        _topic: std::marker::PhantomData,
    }
}

/// A sink of `T` that does nothing with what it receives.
pub fn sink<T: Message>() -> impl FnMut(&mut Setup<'_>) -> StopAfter<T> + Send + 'static {
    stop_after(0)
}
