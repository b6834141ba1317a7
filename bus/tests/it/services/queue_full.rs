//! A call whose request finds the server's ring full: under the server's `DropNewest` it fails
//! `QueueFull` at once, leaving nothing in flight; under `Block` (the default) it waits for room
//! within its timeout; a caller that never waits is refused at once either way.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, BusBuilder, CallError, CallOut, Context, Replies, Reply, Request,
    Setup,
};
use tests::{assert_balanced, bounded, wait_for};

use super::{service, Ask, Sum, T};

/// Answers each call once let through: tells `entered` the call's `n` as it takes it, then
/// waits for a release (or for the release's sender to go) before answering `n + delta`.
struct Gate {
    replies: Replies<Sum>,
    entered: Sender<u64>,
    release: Arc<Mutex<Receiver<()>>>,
}

impl Actor for Gate {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        let _ = self.entered.send(ask.n);
        let _ = (self.release.lock().expect("release")).recv_timeout(Duration::from_secs(20));
        ctx.reply(responder, Ok(Sum(ask.n + ask.delta)));
    }
}

/// A bus whose server, "gate", takes its requests through rings of 2 under `policy`; with what
/// tells when it takes a call and what lets it answer (dropped: every call at once).
fn gate_bus(policy: Backpressure) -> (BusBuilder, Receiver<u64>, Sender<()>) {
    let (entered, took) = std::sync::mpsc::channel();
    let (release, hold) = std::sync::mpsc::channel();
    let hold = Arc::new(Mutex::new(hold));
    let mut bus = Bus::builder();
    bus.actor("gate", move |s: &mut Setup<'_>| Gate {
        replies: s.replies(&service()),
        entered: entered.clone(),
        release: Arc::clone(&hold),
    })
    .serves(&service())
    .backpressure_on(&service().requests(), policy)
    .capacity_on(&service().requests(), 2);
    (bus, took, release)
}

/// What a [`Burst`] saw.
#[derive(Debug)]
enum Seen {
    /// Its burst of calls: how many opened, and how the first refused one failed and how long
    /// it took to.
    Refused(usize, Option<(CallError, Duration)>),
    /// A call ended (`None`: a late reply).
    Ended(Option<Result<Sum, CallError>>),
}

/// Calls as many times as it can in `on_start` (each with `timeout`), until one is refused.
struct Burst {
    out: CallOut<Ask, Sum>,
    timeout: Duration,
    seen: Sender<Seen>,
}

impl Actor for Burst {
    type In = Reply<Sum>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        let mut opened = 0;
        for n in 0..16 {
            let t0 = Instant::now();
            if let Err(e) = ctx.call(self.out, Ask { n, delta: 100 }, self.timeout) {
                let _ = self
                    .seen
                    .send(Seen::Refused(opened, Some((e, t0.elapsed()))));
                return;
            }
            opened += 1;
        }
        let _ = self.seen.send(Seen::Refused(opened, None));
    }
    fn on_message(&mut self, reply: Reply<Sum>, ctx: &mut Context<'_>) {
        let _ = self
            .seen
            .send(Seen::Ended(ctx.settle(reply).map(|(_, end)| end)));
    }
}

/// Adds a [`Burst`] called "burst" to `bus`; returns what it sees.
fn burst(bus: &mut BusBuilder, timeout: Duration, never_waits: bool) -> Receiver<Seen> {
    let (seen, saw) = std::sync::mpsc::channel();
    let caller = bus
        .actor("burst", move |s: &mut Setup<'_>| Burst {
            out: s.caller(&service()),
            timeout,
            seen: seen.clone(),
        })
        .calls(&service());
    if never_waits {
        let _ = caller.never_waits();
    }
    saw
}

/// The burst's report: how many calls it opened, and the first refusal.
fn refusal(saw: &Receiver<Seen>) -> (usize, CallError, Duration) {
    match saw.recv_timeout(T).expect("the burst's report") {
        Seen::Refused(opened, Some((error, took))) => (opened, error, took),
        other => panic!("no call refused: {other:?}"),
    }
}

/// The ends of `n` calls, each once.
fn ends(saw: &Receiver<Seen>, n: usize) -> Vec<Result<Sum, CallError>> {
    let mut ends = Vec::new();
    while ends.len() < n {
        match saw.recv_timeout(T).expect("the calls end") {
            Seen::Ended(Some(end)) => ends.push(end),
            Seen::Ended(None) => {}
            other => panic!("{other:?}"),
        }
    }
    ends
}

#[test]
fn an_actor_call_that_finds_a_drop_newest_server_full_is_refused_queue_full_at_once() {
    bounded("queue full, actor", 60, || {
        let (mut bus, took, release) = gate_bus(Backpressure::DropNewest);
        let saw = burst(&mut bus, T, false);
        let running = bus.start().expect("start");
        let (opened, error, waited) = refusal(&saw);
        assert_eq!(error, CallError::QueueFull);
        assert!(waited < Duration::from_secs(1), "refused after {waited:?}");
        // One call in the gate's hands (if it took it already) and two in its ring.
        assert!((2..=3).contains(&opened), "{opened} calls opened");
        took.recv_timeout(T).expect("the gate takes a call");
        drop(release);
        let mut got = ends(&saw, opened);
        got.sort_by_key(|end| end.as_ref().map(|s| s.0).unwrap_or(u64::MAX));
        let want: Vec<_> = (0..opened as u64).map(|n| Ok(Sum(n + 100))).collect();
        assert_eq!(got, want, "each opened call answered, the refused one not");
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "burst").expect("burst's row");
        assert_eq!(
            (calls.calls, calls.replies, calls.queue_full, calls.errors),
            (opened as u64 + 1, opened as u64, 1, 1)
        );
        let edge = report.edge("calc.add", "burst", "gate").expect("the edge");
        assert_eq!(edge.dropped, 1, "{edge:?}");
    });
}

#[test]
fn an_actor_call_that_finds_a_blocking_server_full_waits_for_room_within_its_timeout() {
    bounded("queue full, actor, Block", 60, || {
        let (mut bus, took, release) = gate_bus(Backpressure::Block);
        let timeout = Duration::from_millis(300);
        let saw = burst(&mut bus, timeout, false);
        let running = bus.start().expect("start");
        let (opened, error, waited) = refusal(&saw);
        assert_eq!(
            error,
            CallError::Timeout,
            "it waited for room, then gave up"
        );
        assert!(
            waited >= timeout - Duration::from_millis(20) && waited < Duration::from_secs(5),
            "waited {waited:?}"
        );
        assert!((2..=3).contains(&opened), "{opened} calls opened");
        took.recv_timeout(T).expect("the gate takes a call");
        drop(release);
        // Each opened call ends once, answered or timed out; the refused one leaves nothing.
        for end in ends(&saw, opened) {
            assert!(
                matches!(end, Ok(Sum(n)) if n >= 100) || end == Err(CallError::Timeout),
                "{end:?}"
            );
        }
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "burst").expect("burst's row");
        assert_eq!(calls.calls, opened as u64 + 1);
        assert!(calls.timeouts >= 1 && calls.queue_full == 0, "{calls:?}");
        let edge = report.edge("calc.add", "burst", "gate").expect("the edge");
        assert!(edge.waited >= 1 && edge.lost == 1, "{edge:?}");
    });
}

#[test]
fn an_actor_that_never_waits_is_refused_queue_full_at_once_by_a_full_blocking_server() {
    bounded("queue full, never_waits", 60, || {
        let (mut bus, _took, release) = gate_bus(Backpressure::Block);
        let saw = burst(&mut bus, T, true);
        let running = bus.start().expect("start");
        let (opened, error, waited) = refusal(&saw);
        assert_eq!(error, CallError::QueueFull);
        assert!(waited < Duration::from_secs(1), "refused after {waited:?}");
        drop(release);
        assert_eq!(ends(&saw, opened).len(), opened);
        running.stop();
        assert_balanced(&running.join().expect("join"));
    });
}

#[test]
fn a_handle_call_that_finds_a_drop_newest_server_full_is_refused_queue_full_at_once() {
    bounded("queue full, handle", 60, || {
        let (mut bus, took, release) = gate_bus(Backpressure::DropNewest);
        let key = bus.caller(&service(), "client");
        let mut running = bus.start().expect("start");
        let mut client = running.caller(key).expect("caller");
        let short = Duration::from_millis(20);
        // The first call holds the gate; the next wait in its ring of 2 (timing out) until
        // it is full.
        assert_eq!(
            client.call(Ask { n: 0, delta: 0 }, short),
            Err(CallError::Timeout)
        );
        assert_eq!(took.recv_timeout(T), Ok(0));
        let mut timed_out = 1;
        let refused = loop {
            let t0 = Instant::now();
            match client.call(
                Ask {
                    n: timed_out,
                    delta: 0,
                },
                T.min(short),
            ) {
                Err(CallError::Timeout) => timed_out += 1,
                Err(CallError::QueueFull) => break t0.elapsed(),
                other => panic!("{other:?}"),
            }
            assert!(timed_out <= 3, "a ring of 2 took {timed_out} calls");
        };
        assert!(
            refused < Duration::from_secs(1),
            "refused after {refused:?}"
        );
        drop(release);
        wait_for("the gate to answer what it queued", 30, || {
            let report = running.snapshot();
            report
                .edge("calc.add", "client", "gate")
                .is_some_and(|e| e.handled == timed_out)
        });
        // The late answers are counted and dropped; the next call gets its own.
        assert_eq!(client.call(Ask { n: 4, delta: 1 }, T), Ok(Sum(5)));
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "client").expect("client's row");
        assert_eq!(
            (
                calls.calls,
                calls.replies,
                calls.timeouts,
                calls.queue_full,
                calls.late
            ),
            (timed_out + 2, 1, timed_out, 1, timed_out)
        );
    });
}
