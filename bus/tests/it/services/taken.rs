//! An actor that takes its rings itself (inbox `()`, as a network bridge's) serves a service
//! (`serves_taken`) and calls one (`calls_taken`): its calls end once each, with the reply,
//! the server's error or the timeout posted by its runner, counted as any caller's; the
//! start-time checks hold for it; and each request carries its caller's deadline.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, CallError, CallOut, Context, Inputs, Replies, Reply, Request, Setup};
use tests::{assert_balanced, bounded};

use super::{service, Adder, Ask, Sum, HOLD, T};
use crate::fixtures::start_err;

/// Serves the adder's service from rings it polls itself: `n + delta`, `HOLD` held until it
/// drops. Sends each request's deadline, with the time it polled it, to `deadlines`.
struct TakenServer {
    requests: Inputs<Request<Ask>>,
    replies: Replies<Sum>,
    held: Vec<llbus::Responder<Sum>>,
    deadlines: Sender<(Option<Instant>, Instant)>,
}

impl TakenServer {
    fn new(setup: &mut Setup<'_>, deadlines: Sender<(Option<Instant>, Instant)>) -> Self {
        TakenServer {
            requests: setup.inputs_on(&service().requests()),
            replies: setup.replies(&service()),
            held: Vec::new(),
            deadlines,
        }
    }
}

impl Actor for TakenServer {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let (replies, held, deadlines) = (&self.replies, &mut self.held, &self.deadlines);
        self.requests.poll(64, |request| {
            let _ = deadlines.send((request.deadline(), Instant::now()));
            let (ask, responder) = replies.accept(request);
            if ask.n == HOLD {
                held.push(responder);
            } else {
                ctx.reply(responder, Ok(Sum(ask.n + ask.delta)));
            }
        })
    }
}

/// Calls from rings it polls itself: each of `asks` (with its timeout) once the one before
/// has ended; what each call ended with goes to `ends`.
struct TakenCaller {
    out: CallOut<Ask, Sum>,
    replies: Inputs<Reply<Sum>>,
    asks: std::vec::IntoIter<(Ask, Duration)>,
    open: bool,
    ends: Sender<Result<Sum, CallError>>,
}

impl TakenCaller {
    fn new(
        setup: &mut Setup<'_>,
        asks: Vec<(Ask, Duration)>,
        ends: Sender<Result<Sum, CallError>>,
    ) -> Self {
        TakenCaller {
            out: setup.caller(&service()),
            replies: setup.call_replies(&service()),
            asks: asks.into_iter(),
            open: false,
            ends,
        }
    }
}

impl Actor for TakenCaller {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let (open, ends) = (&mut self.open, &self.ends);
        let mut work = self.replies.poll(64, |reply| {
            if let Some((_, result)) = ctx.settle(reply) {
                *open = false;
                let _ = ends.send(result);
            }
        });
        if !self.open {
            if let Some((ask, timeout)) = self.asks.next() {
                match ctx.call(self.out, ask, timeout) {
                    Ok(_) => self.open = true,
                    Err(e) => {
                        let _ = self.ends.send(Err(e));
                    }
                }
                work += 1;
            }
        }
        work
    }
    fn drain(&mut self, ctx: &mut Context<'_>) -> usize {
        let ends = &self.ends;
        self.replies.poll(64, |reply| {
            if let Some((_, result)) = ctx.settle(reply) {
                let _ = ends.send(result);
            }
        })
    }
}

/// Receives `n` call ends.
fn ends(
    rx: &std::sync::mpsc::Receiver<Result<Sum, CallError>>,
    n: usize,
) -> Vec<Result<Sum, CallError>> {
    (0..n)
        .map(|_| rx.recv_timeout(T).expect("the call ends"))
        .collect()
}

#[test]
fn an_actor_that_takes_its_rings_serves_and_calls_and_its_calls_are_counted() {
    bounded("taken rings serve and call", 60, || {
        let mut bus = Bus::builder();
        let (deadlines, _seen) = std::sync::mpsc::channel();
        bus.actor("server", move |s: &mut Setup<'_>| {
            TakenServer::new(s, deadlines.clone())
        })
        .serves_taken(&service());
        let (tx, rx) = std::sync::mpsc::channel();
        let mut asks: Vec<_> = (0..100).map(|n| (Ask { n, delta: 1 }, T)).collect();
        // Held by the server: the caller's runner posts its timeout into the taken ring.
        asks.push((Ask { n: HOLD, delta: 0 }, Duration::from_millis(20)));
        asks.push((Ask { n: 7, delta: 1 }, T));
        bus.actor("caller", move |s: &mut Setup<'_>| {
            TakenCaller::new(s, asks.clone(), tx.clone())
        })
        .calls_taken(&service());
        let running = bus.start().expect("start");
        let got = ends(&rx, 102);
        let mut want: Vec<_> = (0..100).map(|n| Ok(Sum(n + 1))).collect();
        want.push(Err(CallError::Timeout));
        want.push(Ok(Sum(8)));
        assert_eq!(got, want);
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let row = (report.services.iter())
            .find(|c| c.caller == "caller")
            .expect("the caller's row");
        assert_eq!(
            (row.server.as_str(), row.calls, row.replies, row.timeouts),
            ("server", 102, 101, 1)
        );
    });
}

#[test]
fn a_taken_caller_of_an_inbox_server_gets_the_stops_end_and_the_counts_balance() {
    bounded("taken caller at the stop", 60, || {
        let mut bus = Bus::builder();
        bus.actor("adder", Adder::new).serves(&service());
        let (tx, rx) = std::sync::mpsc::channel();
        let asks = vec![(Ask { n: 1, delta: 2 }, T), (Ask { n: HOLD, delta: 0 }, T)];
        bus.actor("caller", move |s: &mut Setup<'_>| {
            TakenCaller::new(s, asks.clone(), tx.clone())
        })
        .calls_taken(&service());
        let running = bus.start().expect("start");
        assert_eq!(ends(&rx, 1), [Ok(Sum(3))]);
        // The held call is open: the stop ends it.
        std::thread::sleep(Duration::from_millis(50));
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let row = (report.services.iter())
            .find(|c| c.caller == "caller")
            .expect("the caller's row");
        assert_eq!((row.calls, row.replies, row.stopped), (2, 1, 1));
    });
}

#[test]
fn start_refuses_a_taken_caller_without_a_server_and_a_taken_second_server() {
    let mut bus = Bus::builder();
    let (tx, _rx) = std::sync::mpsc::channel();
    bus.actor("lonely", move |s: &mut Setup<'_>| {
        TakenCaller::new(s, Vec::new(), tx.clone())
    })
    .calls_taken(&service());
    let e = start_err(bus).to_string();
    assert!(e.contains("lonely") && e.contains("calc.add"), "{e}");

    let mut bus = Bus::builder();
    bus.actor("adder", Adder::new).serves(&service());
    let (deadlines, _seen) = std::sync::mpsc::channel();
    bus.actor("taken", move |s: &mut Setup<'_>| {
        TakenServer::new(s, deadlines.clone())
    })
    .serves_taken(&service());
    let _key = bus.caller(&service(), "client");
    let e = start_err(bus).to_string();
    assert!(
        e.contains("adder") && e.contains("taken") && e.contains("calc.add"),
        "{e}"
    );
}

#[test]
fn a_request_carries_its_callers_deadline() {
    bounded("a request's deadline", 60, || {
        let mut bus = Bus::builder();
        let (deadlines, seen) = std::sync::mpsc::channel();
        bus.actor("server", move |s: &mut Setup<'_>| {
            TakenServer::new(s, deadlines.clone())
        })
        .serves_taken(&service());
        let key = bus.caller(&service(), "handle");
        let (tx, rx) = std::sync::mpsc::channel();
        let timeout = Duration::from_millis(300);
        bus.actor("caller", move |s: &mut Setup<'_>| {
            TakenCaller::new(s, vec![(Ask { n: 1, delta: 1 }, timeout)], tx.clone())
        })
        .calls_taken(&service());
        let mut running = bus.start().expect("start");
        let started = Instant::now();
        assert_eq!(ends(&rx, 1), [Ok(Sum(2))]);
        let (deadline, polled) = seen.recv_timeout(T).expect("the actor's request");
        let deadline = deadline.expect("a deadline within the clock's range");
        // Counted from the caller's round, which began at most a little before its call.
        assert!(
            deadline <= polled + timeout && deadline + Duration::from_secs(5) > polled + timeout,
            "the actor's call's deadline is not its timeout from the call"
        );
        let mut handle = running.caller(key).expect("caller");
        let before = Instant::now();
        assert_eq!(handle.call(Ask { n: 2, delta: 2 }, T), Ok(Sum(4)));
        let (deadline, _) = seen.recv_timeout(T).expect("the handle's request");
        let deadline = deadline.expect("a deadline within the clock's range");
        assert!(deadline >= before + T && deadline <= Instant::now() + T);
        assert_eq!(
            handle.call(Ask { n: 3, delta: 3 }, Duration::MAX),
            Ok(Sum(6))
        );
        let (deadline, _) = seen.recv_timeout(T).expect("the unbounded request");
        assert_eq!(
            deadline, None,
            "a timeout past the clock's range has no deadline"
        );
        assert!(started.elapsed() < T);
        drop(handle);
        running.stop();
        assert_balanced(&running.join().expect("join"));
    });
}
