//! A timeout is never lost: a server that floods its caller with late replies (more than the
//! caller's ring holds, while the caller is busy) does not keep any call from ending, once.

use std::collections::HashSet;
use std::sync::mpsc::Sender;
use std::time::Duration;

use llbus::{
    Actor, Bus, CallError, CallId, CallOut, Context, Replies, Reply, Request, Responder, Setup,
};
use tests::{assert_balanced, bounded};

use super::{service, Ask, Sum, T};

/// Holds every call and answers all it holds on each tick: to a caller whose calls time out
/// in a millisecond, a flood of late replies.
struct Flood {
    replies: Replies<Sum>,
    held: Vec<Responder<Sum>>,
}

impl Actor for Flood {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, _ctx: &mut Context<'_>) {
        let (_, responder) = self.replies.accept(request);
        self.held.push(responder);
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        for responder in self.held.drain(..) {
            ctx.reply(responder, Ok(Sum(0)));
        }
    }
}

/// How a [`Drowning`] caller's calls went.
#[derive(Debug, Default)]
struct Tally {
    calls: u64,
    timeouts: u64,
    replies: u64,
    late: u64,
}

/// Keeps `MAX_CALLS_IN_FLIGHT` calls of 1 ms open until it has made `first` calls; at the
/// first late reply it stays busy for a while (the flood fills its ring meanwhile), then goes
/// on until it has made `second` more; reports once every call has ended.
struct Drowning {
    out: CallOut<Ask, Sum>,
    first: u64,
    second: u64,
    open: HashSet<CallId>,
    tally: Tally,
    busied: bool,
    done: Sender<Tally>,
}

impl Drowning {
    const TIMEOUT: Duration = Duration::from_millis(1);

    fn call(&mut self, ctx: &mut Context<'_>) {
        let call = ctx
            .call(self.out, Ask { n: 0, delta: 0 }, Self::TIMEOUT)
            .expect("room for the call");
        assert!(self.open.insert(call), "a call id open twice");
        self.tally.calls += 1;
    }
}

impl Actor for Drowning {
    type In = Reply<Sum>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for _ in 0..llbus::MAX_CALLS_IN_FLIGHT {
            self.call(ctx);
        }
    }
    fn on_message(&mut self, reply: Reply<Sum>, ctx: &mut Context<'_>) {
        let Some((call, end)) = ctx.settle(reply) else {
            self.tally.late += 1;
            if !self.busied {
                // Busy while the server answers everything it holds: its ring overflows.
                self.busied = true;
                std::thread::sleep(Duration::from_millis(200));
                // Calls whose timeouts come while that ring is full of late replies.
                while self.open.len() < llbus::MAX_CALLS_IN_FLIGHT
                    && self.tally.calls < self.first + self.second
                {
                    self.call(ctx);
                }
            }
            return;
        };
        assert!(self.open.remove(&call), "call {call:?} ended twice");
        match end {
            Ok(_) => self.tally.replies += 1,
            Err(CallError::Timeout) => self.tally.timeouts += 1,
            Err(e) => panic!("call {call:?} ended {e:?}"),
        }
        let limit = if self.busied {
            self.first + self.second
        } else {
            self.first
        };
        if self.tally.calls < limit {
            self.call(ctx);
        }
        if self.open.is_empty() && self.tally.calls == self.first + self.second {
            let _ = self.done.send(std::mem::take(&mut self.tally));
        }
    }
}

#[test]
fn a_server_flooding_its_caller_with_late_replies_loses_none_of_its_timeouts() {
    bounded("a flood of late replies", 60, || {
        let mut bus = Bus::builder();
        bus.actor("flood", |s: &mut Setup<'_>| Flood {
            replies: s.replies(&service()),
            held: Vec::new(),
        })
        .serves(&service())
        .tick_every(Duration::from_millis(30));
        let (done, tally) = std::sync::mpsc::channel();
        let (first, second) = (3000, 200);
        bus.actor("drowning", move |s: &mut Setup<'_>| Drowning {
            out: s.caller(&service()),
            first,
            second,
            open: HashSet::new(),
            tally: Tally::default(),
            busied: false,
            done: done.clone(),
        })
        .calls(&service());
        let running = bus.start().expect("start");
        let tally = tally.recv_timeout(T).expect("every call ends");
        assert_eq!(tally.calls, first + second);
        assert_eq!(tally.replies + tally.timeouts, tally.calls, "{tally:?}");
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        // The flood overflowed the caller's ring from the server...
        let flood = report
            .edge("calc.add#reply.0", "flood", "drowning")
            .expect("the reply edge");
        assert!(flood.dropped > 0, "no flood: {flood:?}");
        // ...and every call still ended, counted as the caller saw it.
        let calls = report.service("calc.add", "drowning").expect("its row");
        assert_eq!(
            (calls.calls, calls.replies, calls.timeouts, calls.in_flight),
            (tally.calls, tally.replies, tally.timeouts, 0)
        );
    });
}
