//! Services on one bus: a handle calls an actor that serves, and every call ends exactly once,
//! with its reply or a typed error (late, dropped, panicked, stopped), whatever the server does.

use std::time::Duration;

use llbus::{
    Actor, Bus, CallError, Context, Replies, Request, Responder, RestartLimit, Service, Setup,
    StartError, Supervision,
};
use tests::bounded;

/// A question: add `delta` to `n`; `n == DROP` drops the call, `n == PANIC` panics holding it,
/// `n == LATER` answers on the next tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    n: u64,
    delta: u64,
}
tests::message!(Ask, "calc.add");

/// The answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Sum(u64);
tests::message!(Sum, "calc.sum");

const DROP: u64 = u64::MAX;
const PANIC: u64 = u64::MAX - 1;
const LATER: u64 = u64::MAX - 2;

fn service() -> Service<Ask, Sum> {
    Service::named("calc.add").expect("name")
}

struct Adder {
    replies: Replies<Sum>,
    later: Vec<(Responder<Sum>, u64)>,
}

impl Adder {
    fn new(setup: &mut Setup<'_>) -> Self {
        Adder {
            replies: setup.replies(&service()),
            later: Vec::with_capacity(16),
        }
    }
}

impl Actor for Adder {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        match ask.n {
            DROP => drop(responder),
            PANIC => panic!("asked to panic, holding the call"),
            LATER => self.later.push((responder, ask.delta)),
            n => ctx.reply(responder, Ok(Sum(n + ask.delta))),
        }
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        for (responder, delta) in self.later.drain(..) {
            ctx.reply(responder, Ok(Sum(delta)));
        }
    }
}

/// A bus with the adder serving and `callers` handles calling.
fn adder_bus(callers: &[&str]) -> (llbus::BusBuilder, Vec<llbus::CallerKey<Ask, Sum>>) {
    let mut bus = Bus::builder();
    bus.actor("adder", Adder::new)
        .serves(&service())
        .tick_every(Duration::from_millis(50))
        .supervision(Supervision::Restart(RestartLimit {
            max_restarts: 10,
            within: Duration::from_secs(60),
            delay: Duration::from_millis(1),
        }));
    let keys = callers
        .iter()
        .map(|name| bus.caller(&service(), name))
        .collect();
    (bus, keys)
}

const T: Duration = Duration::from_secs(30);

#[test]
fn a_handle_calls_an_actor_and_gets_each_reply() {
    bounded("calls", 60, || {
        let (bus, keys) = adder_bus(&["client"]);
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        for n in 0..1000 {
            assert_eq!(client.call(Ask { n, delta: 7 }, T), Ok(Sum(n + 7)));
        }
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        tests::assert_balanced(&report);
        assert_eq!(report.actor("adder").map(|a| a.handled), Some(1000));
    });
}

#[test]
fn two_callers_each_get_their_own_replies() {
    bounded("two callers", 60, || {
        let (bus, keys) = adder_bus(&["a", "b"]);
        let mut running = bus.start().expect("start");
        let mut callers: Vec<_> = (keys.into_iter())
            .map(|k| running.caller(k).expect("caller"))
            .collect();
        let mut b = callers.pop().expect("b");
        let mut a = callers.pop().expect("a");
        let other = std::thread::spawn(move || {
            for n in 0..500 {
                assert_eq!(
                    b.call(
                        Ask {
                            n,
                            delta: 1_000_000
                        },
                        T
                    ),
                    Ok(Sum(n + 1_000_000))
                );
            }
        });
        for n in 0..500 {
            assert_eq!(a.call(Ask { n, delta: 1 }, T), Ok(Sum(n + 1)));
        }
        other.join().expect("b's calls");
        drop(a);
        running.stop();
        tests::assert_balanced(&running.join().expect("join"));
    });
}

#[test]
fn a_call_answered_too_late_times_out_once_and_the_next_call_gets_its_own_reply() {
    bounded("late reply", 60, || {
        let (bus, keys) = adder_bus(&["client"]);
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        // Answered at the next tick (every 50 ms), after the call gave up.
        let late = client.call(
            Ask {
                n: LATER,
                delta: 99,
            },
            Duration::from_millis(1),
        );
        assert_eq!(late, Err(CallError::Timeout));
        std::thread::sleep(Duration::from_millis(200));
        // The late answer (99) is not taken for this call's.
        assert_eq!(client.call(Ask { n: 1, delta: 2 }, T), Ok(Sum(3)));
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        assert_eq!(tests::metric(&report, "client", "late"), 1);
    });
}

#[test]
fn a_dropped_responder_answers_dropped_and_a_panic_answers_server_panicked() {
    bounded("dropped and panicked", 60, || {
        let (bus, keys) = adder_bus(&["client"]);
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        assert_eq!(
            client.call(Ask { n: DROP, delta: 0 }, T),
            Err(CallError::Dropped)
        );
        assert_eq!(
            client.call(Ask { n: PANIC, delta: 0 }, T),
            Err(CallError::ServerPanicked)
        );
        // The server restarted: calls go on.
        assert_eq!(client.call(Ask { n: 2, delta: 2 }, T), Ok(Sum(4)));
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        assert_eq!(report.actor("adder").map(|a| a.restarts), Some(1));
    });
}

#[test]
fn calls_held_by_a_server_that_panics_answer_server_panicked() {
    bounded("held calls of a panicking server", 60, || {
        let (bus, keys) = adder_bus(&["held", "panics"]);
        let mut running = bus.start().expect("start");
        let mut callers: Vec<_> = (keys.into_iter())
            .map(|k| running.caller(k).expect("caller"))
            .collect();
        let mut panics = callers.pop().expect("panics");
        let mut held = callers.pop().expect("held");
        // `held`'s call waits in the server's state for a tick that the panic comes before.
        let waiting = std::thread::spawn(move || held.call(Ask { n: LATER, delta: 1 }, T));
        std::thread::sleep(Duration::from_millis(5));
        let _ = panics.call(Ask { n: PANIC, delta: 0 }, T);
        let got = waiting.join().expect("held call");
        // Answered by the tick if it came first, else by the panic: never both, never neither.
        assert!(
            got == Err(CallError::ServerPanicked) || got == Ok(Sum(1)),
            "{got:?}"
        );
        drop(panics);
        running.stop();
        running.join().expect("join");
    });
}

#[test]
fn a_call_after_the_stop_ends_stopped() {
    bounded("stopped", 60, || {
        let (bus, keys) = adder_bus(&["client"]);
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        running.stop();
        assert_eq!(
            client.call(Ask { n: 1, delta: 1 }, T),
            Err(CallError::Stopped)
        );
        drop(client);
        running.join().expect("join");
    });
}

/// The start error of `bus`, which must be refused.
fn refused(bus: llbus::BusBuilder) -> StartError {
    match bus.start() {
        Err(e) => e,
        Ok(running) => {
            running.stop();
            panic!("the bus started")
        }
    }
}

#[test]
fn start_refuses_a_caller_without_a_server_and_two_servers_naming_them() {
    let mut bus = Bus::builder();
    let _key = bus.caller(&service(), "lonely");
    let e = refused(bus).to_string();
    assert!(e.contains("lonely") && e.contains("calc.add"), "{e}");

    let mut bus = Bus::builder();
    bus.actor("adder-1", Adder::new).serves(&service());
    bus.actor("adder-2", Adder::new).serves(&service());
    let _key = bus.caller(&service(), "client");
    let e = refused(bus).to_string();
    assert!(
        e.contains("adder-1") && e.contains("adder-2") && e.contains("calc.add"),
        "{e}"
    );
}

#[test]
fn a_remapped_service_is_served_and_called_under_its_running_name() {
    bounded("remapped service", 60, || {
        let (mut bus, keys) = adder_bus(&["client"]);
        bus.remap("calc.add", "site2.calc.add");
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        assert_eq!(client.call(Ask { n: 1, delta: 1 }, T), Ok(Sum(2)));
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        assert!(report.edge("site2.calc.add", "client", "adder").is_some());
    });
}

/// An actor that calls the adder: each tick, the next of `asks` (with its timeout); what each
/// call ended with goes to `ends` (late replies, which `settle` refuses, as `None`).
struct Client {
    out: llbus::CallOut<Ask, Sum>,
    asks: std::vec::IntoIter<(Ask, Duration)>,
    ends: std::sync::mpsc::Sender<Option<(u64, Result<Sum, CallError>)>>,
    ids: Vec<llbus::CallId>,
}

impl Actor for Client {
    type In = llbus::Reply<Sum>;
    fn on_message(&mut self, reply: llbus::Reply<Sum>, ctx: &mut Context<'_>) {
        let end = ctx.settle(reply).map(|(call, result)| {
            let index = self
                .ids
                .iter()
                .position(|c| *c == call)
                .expect("one of its calls");
            (index as u64, result)
        });
        let _ = self.ends.send(end);
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if let Some((ask, timeout)) = self.asks.next() {
            let call = ctx.call(self.out, ask, timeout).expect("room for the call");
            self.ids.push(call);
        }
    }
}

#[test]
fn an_actor_calls_without_waiting_and_each_call_ends_once_in_its_inbox() {
    bounded("actor calls", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        let asks = vec![
            (Ask { n: 1, delta: 1 }, T),
            // Answered at the adder's next tick (50 ms), after its 1 ms timeout.
            (Ask { n: LATER, delta: 5 }, Duration::from_millis(1)),
            (Ask { n: DROP, delta: 0 }, T),
            (Ask { n: 40, delta: 2 }, T),
        ];
        bus.actor("client", move |s: &mut Setup<'_>| Client {
            out: s.caller(&service()),
            asks: asks.clone().into_iter(),
            ends: tx.clone(),
            ids: Vec::new(),
        })
        .calls(&service())
        .tick_every(Duration::from_millis(20));
        let running = bus.start().expect("start");
        let mut ends = Vec::new();
        let mut late = 0;
        // Four calls end, once each, and one late reply is refused.
        while ends.len() < 4 || late < 1 {
            match rx.recv_timeout(T).expect("the calls end") {
                Some(end) => ends.push(end),
                None => late += 1,
            }
        }
        ends.sort_by_key(|(i, _)| *i);
        assert_eq!(
            ends,
            [
                (0, Ok(Sum(2))),
                (1, Err(CallError::Timeout)),
                (2, Err(CallError::Dropped)),
                (3, Ok(Sum(42))),
            ]
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "a call ended twice");
        running.stop();
        running.join().expect("join");
    });
}

/// Opens as many calls as it can in `on_start` (the adder holds each until its tick) and
/// reports how many it opened and the error of the first refused.
struct Greedy {
    out: llbus::CallOut<Ask, Sum>,
    report: std::sync::mpsc::Sender<(usize, Option<CallError>)>,
}

impl Actor for Greedy {
    type In = llbus::Reply<Sum>;
    fn on_message(&mut self, reply: llbus::Reply<Sum>, ctx: &mut Context<'_>) {
        let _ = ctx.settle(reply);
    }
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        let mut opened = 0;
        let ask = Ask { n: LATER, delta: 0 };
        let refused = loop {
            match ctx.call(self.out, ask.clone(), T) {
                Ok(_) => opened += 1,
                Err(e) => break Some(e),
            }
            if opened > 2 * llbus::MAX_CALLS_IN_FLIGHT {
                break None;
            }
        };
        let _ = self.report.send((opened, refused));
    }
}

#[test]
fn an_actor_with_max_calls_in_flight_is_refused_queue_full_at_once() {
    bounded("calls in flight", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        bus.actor("greedy", move |s: &mut Setup<'_>| Greedy {
            out: s.caller(&service()),
            report: tx.clone(),
        })
        .calls(&service());
        let running = bus.start().expect("start");
        let (opened, refused) = rx.recv_timeout(T).expect("a report");
        assert_eq!(
            (opened, refused),
            (llbus::MAX_CALLS_IN_FLIGHT, Some(CallError::QueueFull))
        );
        running.stop();
        running.join().expect("join");
    });
}
