//! A server and callers that misuse services on one bus: a responder smuggled out of the bus
//! and dropped after the bus has gone, timeouts at the edge of the clock's range
//! (`Duration::MAX`, zero), and a flood of calls past what the server's ring holds. Every call
//! still ends exactly once, nothing panics, and the counts balance.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{service, Ask, Sum};
use llbus::{Actor, Bus, CallError, CallOut, Context, Replies, Reply, Request, Responder, Setup};
use tests::bounded;

/// Hands every responder to the test, through `smuggled`, unanswered.
struct Smuggler {
    replies: Replies<Sum>,
    smuggled: Arc<Mutex<Vec<Responder<Sum>>>>,
}

impl Actor for Smuggler {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, _ctx: &mut Context<'_>) {
        let (_, responder) = self.replies.accept(request);
        self.smuggled.lock().expect("lock").push(responder);
    }
}

/// How it would fail: a panic when the responders drop after the bus is gone (their server's
/// queue and doorbell outlive nothing), a call that does not end, or counts that do not
/// balance.
#[test]
fn responders_smuggled_out_and_dropped_after_the_bus_is_gone_end_nothing_twice() {
    bounded("smuggled responders", 60, || {
        let smuggled = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&smuggled);
        let mut bus = Bus::builder();
        bus.actor("smuggler", move |setup: &mut Setup<'_>| Smuggler {
            replies: setup.replies(&service()),
            smuggled: Arc::clone(&s),
        })
        .serves(&service());
        let key = bus.caller(&service(), "client");
        let mut running = bus.start().expect("start");
        let mut client = running.caller(key).expect("caller");
        for n in 0..3 {
            assert_eq!(
                client.call(Ask { n, delta: 0 }, Duration::from_millis(50)),
                Err(CallError::Timeout)
            );
        }
        // One is dropped on another thread while the bus runs: its caller has moved on (late).
        let one = smuggled.lock().expect("lock").pop().expect("a responder");
        std::thread::spawn(move || drop(one))
            .join()
            .expect("dropped");
        std::thread::sleep(Duration::from_millis(50));
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        tests::assert_balanced(&report);
        let calls = report.service("calc.add", "client").expect("counted");
        assert_eq!(
            (calls.calls, calls.timeouts, calls.in_flight),
            (3, 3, 0),
            "{calls:?}"
        );
        // The rest outlive the bus: dropping them now must not panic.
        let rest = std::mem::take(&mut *smuggled.lock().expect("lock"));
        assert_eq!(rest.len(), 2);
        std::thread::spawn(move || drop(rest))
            .join()
            .expect("responders dropped after the bus is gone do not panic");
    });
}

/// How each call ended: `(n, result)`.
type Ended = Arc<Mutex<Vec<(u64, Result<Sum, CallError>)>>>;

/// Calls with the longest and the shortest timeouts, from an actor.
struct Edges {
    out: CallOut<Ask, Sum>,
    ended: Ended,
    started: bool,
}

impl Actor for Edges {
    type In = Reply<Sum>;
    fn on_message(&mut self, reply: Reply<Sum>, ctx: &mut Context<'_>) {
        if let Some((call, result)) = ctx.settle(reply) {
            self.ended.lock().expect("lock").push((call.get(), result));
        }
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        for (n, timeout) in [
            (1, Duration::MAX),
            (2, Duration::ZERO),
            (3, Duration::from_nanos(1)),
            (super::HOLD, Duration::MAX),
        ] {
            let _ = ctx.call(self.out, Ask { n, delta: 0 }, timeout);
        }
    }
}

/// How it would fail: `Duration::MAX` overflowing a deadline (a panic, or a call that times
/// out at once), a zero timeout that never ends, a held call with no deadline that the stop
/// does not end, or counts that do not balance.
#[test]
fn calls_with_the_longest_and_shortest_timeouts_end_once_each() {
    bounded("edge timeouts", 60, || {
        let ended = Arc::new(Mutex::new(Vec::new()));
        let e = Arc::clone(&ended);
        let (mut bus, keys) = super::adder_bus(&["handle"]);
        bus.actor("edges", move |setup: &mut Setup<'_>| Edges {
            out: setup.caller(&service()),
            ended: Arc::clone(&e),
            started: false,
        })
        .calls(&service())
        .tick_every(Duration::from_millis(5));
        let mut running = bus.start().expect("start");
        let mut handle = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        assert_eq!(
            handle.call(Ask { n: 5, delta: 1 }, Duration::MAX),
            Ok(Sum(6))
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ended.lock().expect("lock").len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(handle);
        running.stop();
        let report = running.join().expect("join");
        tests::assert_balanced(&report);
        let ended = ended.lock().expect("lock").clone();
        assert_eq!(ended.len(), 4, "each call ends once: {ended:?}");
        // The held call (no deadline in range) ends with the stop.
        assert!(
            ended.iter().any(|(_, r)| *r == Err(CallError::Stopped)),
            "{ended:?}"
        );
        assert!(ended.iter().any(|(_, r)| *r == Ok(Sum(1))), "{ended:?}");
        let calls = report.service("calc.add", "edges").expect("counted");
        assert_eq!((calls.calls, calls.in_flight), (4, 0), "{calls:?}");
    });
}
