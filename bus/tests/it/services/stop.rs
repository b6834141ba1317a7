//! The stop ends every call: an actor's open calls end `Stopped` in its inbox while the bus
//! still drains (and a call after that is refused), a caller that is gone has its calls counted
//! ended, a handle blocked in a call returns `Stopped` with the stop, and the calls queued to a
//! server that is gone for good end `Stopped`.

use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use llbus::{
    Actor, Bus, CallError, CallId, CallOut, Context, Reply, Setup, StopReport, Supervision,
};
use tests::{assert_balanced, bounded, wait_for};

use super::{adder_bus, service, Adder, Ask, Sum, HOLD, PANIC, T};

/// What a [`Script`] saw.
#[derive(Debug, PartialEq)]
enum Seen {
    /// Call number `i` (in the script's order) ended.
    Ended(usize, Result<Sum, CallError>),
    /// A reply that settled nothing (late).
    Late,
    /// What its call after the script's ends returned.
    Again(Result<(), CallError>),
}

/// Makes each call of `asks` in `on_start` (then panics if `panics`); reports each call's end
/// and, once all have ended, what one more call returns.
struct Script {
    out: CallOut<Ask, Sum>,
    asks: Vec<(Ask, Duration)>,
    /// Each call's id, until it ends.
    ids: Vec<Option<CallId>>,
    panics: bool,
    seen: Sender<Seen>,
}

impl Actor for Script {
    type In = Reply<Sum>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        for (ask, timeout) in self.asks.clone() {
            let call = ctx.call(self.out, ask, timeout).expect("room for the call");
            self.ids.push(Some(call));
        }
        assert!(!self.panics, "the caller panics with its calls open");
    }
    fn on_message(&mut self, reply: Reply<Sum>, ctx: &mut Context<'_>) {
        let Some((call, end)) = ctx.settle(reply) else {
            let _ = self.seen.send(Seen::Late);
            return;
        };
        let i = (self.ids.iter())
            .position(|c| *c == Some(call))
            .expect("its call");
        let _ = self.seen.send(Seen::Ended(i, end));
        self.ids[i] = None;
        if self.ids.iter().all(Option::is_none) {
            let again = ctx.call(self.out, Ask { n: 1, delta: 1 }, T);
            let _ = self.seen.send(Seen::Again(again.map(|_| ())));
        }
    }
}

/// Adds a [`Script`] called `name` that calls `asks`; returns what it sees.
fn script(
    bus: &mut llbus::BusBuilder,
    name: &str,
    asks: Vec<(Ask, Duration)>,
    panics: bool,
) -> Receiver<Seen> {
    let (seen, saw) = std::sync::mpsc::channel();
    bus.actor(name, move |s: &mut Setup<'_>| Script {
        out: s.caller(&service()),
        asks: asks.clone(),
        ids: Vec::new(),
        panics,
        seen: seen.clone(),
    })
    .calls(&service())
    .supervision(Supervision::Stop);
    saw
}

/// The next thing `saw` reports that is not a late reply.
fn next(saw: &Receiver<Seen>) -> Seen {
    loop {
        match saw.recv_timeout(T).expect("a report") {
            Seen::Late => {}
            seen => return seen,
        }
    }
}

#[test]
fn an_actor_s_call_held_by_its_server_ends_stopped_in_its_inbox_as_the_bus_stops() {
    bounded("an actor's held call at the stop", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        bus.stop_timeout(Duration::from_secs(30));
        let long = Duration::from_secs(600);
        let saw = script(
            &mut bus,
            "asker",
            vec![(Ask { n: HOLD, delta: 0 }, long)],
            false,
        );
        let running = bus.start().expect("start");
        wait_for("the adder to hold the call", 30, || {
            let report = running.snapshot();
            report
                .edge("calc.add", "asker", "adder")
                .is_some_and(|e| e.handled == 1)
        });
        let t0 = Instant::now();
        running.stop();
        // The call ends in the inbox while the bus drains; a call after it is refused.
        assert_eq!(next(&saw), Seen::Ended(0, Err(CallError::Stopped)));
        assert_eq!(next(&saw), Seen::Again(Err(CallError::Stopped)));
        let report = running.join().expect("join");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the stop took {:?}",
            t0.elapsed()
        );
        assert!(matches!(
            report.stop,
            Some(StopReport { drained: true, .. })
        ));
        assert_balanced(&report);
        let calls = report.service("calc.add", "asker").expect("asker's row");
        assert_eq!((calls.calls, calls.stopped, calls.in_flight), (2, 2, 0));
    });
}

#[test]
fn a_caller_that_is_gone_has_its_open_calls_counted_stopped() {
    bounded("a caller gone", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let asks = vec![(Ask { n: HOLD, delta: 0 }, Duration::from_secs(600))];
        let _saw = script(&mut bus, "doomed", asks, true);
        let running = bus.start().expect("start");
        // Its supervision stops it for good as it panics: nobody will settle its call.
        wait_for("the doomed caller's call to be counted ended", 30, || {
            let report = running.snapshot();
            report
                .service("calc.add", "doomed")
                .is_some_and(|c| (c.calls, c.stopped, c.in_flight) == (1, 1, 0))
        });
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        assert_eq!(report.actor("doomed").map(|a| a.panics), Some(1));
    });
}

#[test]
fn a_handle_blocked_in_a_call_the_server_never_answers_returns_stopped_with_the_stop() {
    bounded("a handle's held call at the stop", 60, || {
        let (mut bus, keys) = adder_bus(&["client"]);
        bus.stop_timeout(Duration::from_secs(30));
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        let (stopped_tx, stopped_rx) = std::sync::mpsc::channel::<Instant>();
        let waiting = std::thread::spawn(move || {
            let got = client.call(Ask { n: HOLD, delta: 0 }, Duration::from_secs(600));
            let stopped = stopped_rx.recv().expect("the stop's time");
            (got, stopped.elapsed())
        });
        wait_for("the adder to hold the call", 30, || {
            let report = running.snapshot();
            report
                .edge("calc.add", "client", "adder")
                .is_some_and(|e| e.handled == 1)
        });
        stopped_tx.send(Instant::now()).expect("send");
        running.stop();
        let (got, after_stop) = waiting.join().expect("the call");
        assert_eq!(got, Err(CallError::Stopped));
        assert!(after_stop < Duration::from_secs(5), "{after_stop:?}");
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "client").expect("client's row");
        assert_eq!((calls.calls, calls.stopped), (1, 1));
    });
}

#[test]
fn calls_queued_to_a_server_that_is_gone_for_good_end_stopped() {
    bounded("a server gone", 60, || {
        let mut bus = Bus::builder();
        bus.actor("adder", Adder::new)
            .serves(&service())
            .supervision(Supervision::Stop);
        let asks = vec![
            (Ask { n: PANIC, delta: 0 }, T),
            (Ask { n: 1, delta: 1 }, T),
            (Ask { n: 2, delta: 1 }, T),
        ];
        let saw = script(&mut bus, "asker", asks, false);
        let running = bus.start().expect("start");
        let mut ends: Vec<Seen> = (0..3).map(|_| next(&saw)).collect();
        ends.sort_by_key(|seen| match seen {
            Seen::Ended(i, _) => *i,
            _ => usize::MAX,
        });
        // The call the server held as it panicked ends so; those still queued end `Stopped`,
        // long before their timeouts; and a call to the server gone is refused at once.
        assert_eq!(
            ends,
            [
                Seen::Ended(0, Err(CallError::ServerPanicked)),
                Seen::Ended(1, Err(CallError::Stopped)),
                Seen::Ended(2, Err(CallError::Stopped)),
            ]
        );
        assert_eq!(next(&saw), Seen::Again(Err(CallError::Stopped)));
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "asker").expect("asker's row");
        assert_eq!(
            (calls.calls, calls.server_panicked, calls.stopped),
            (4, 1, 3)
        );
    });
}
