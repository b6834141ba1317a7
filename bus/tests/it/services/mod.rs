//! Services on one bus: a handle calls an actor that serves, and every call ends exactly once,
//! with its reply or a typed error (late, dropped, panicked, stopped), whatever the server does.
//!
//! - `counts`: every call counted per caller and service, balanced in every report and the
//!   counters file;
//! - `queue_full`: a call that finds the server's ring full, under `DropNewest` and `Block`;
//! - `stop`: the stop, or a server's end, ends every call still open;
//! - `timeouts`: a flood of late replies loses no timeout;
//! - `misrouted`: a responder answered through another actor's context;
//! - `async_calls`: a caller awaited from tokio;
//! - `taken`: an actor that takes its rings itself serves and calls (`serves_taken`,
//!   `calls_taken`), and a request carries its caller's deadline.

use std::time::Duration;

use crate::fixtures::start_err;
use llbus::{
    Actor, Bus, CallError, Context, Replies, Request, Responder, RestartLimit, Service, Setup,
    Supervision,
};
use tests::bounded;

mod async_calls;
mod counts;
mod hostile;
mod misrouted;
mod queue_full;
mod stop;
mod taken;
mod timeouts;

/// A question: add `delta` to `n`; `n == DROP` drops the call, `n == PANIC` panics holding it,
/// `n == LATER` answers on the next tick, `n == HOLD` holds it unanswered (until the server
/// drops), `n == AWAY` hands the responder to another thread, which drops it `delta` ms later.
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
const HOLD: u64 = u64::MAX - 3;
const AWAY: u64 = u64::MAX - 4;

fn service() -> Service<Ask, Sum> {
    Service::named("calc.add").expect("name")
}

struct Adder {
    replies: Replies<Sum>,
    later: Vec<(Responder<Sum>, u64)>,
    held: Vec<Responder<Sum>>,
}

impl Adder {
    fn new(setup: &mut Setup<'_>) -> Self {
        Adder {
            replies: setup.replies(&service()),
            later: Vec::with_capacity(16),
            held: Vec::new(),
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
            HOLD => self.held.push(responder),
            AWAY => {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ask.delta));
                    drop(responder);
                });
            }
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

#[test]
fn start_refuses_a_caller_without_a_server_and_two_servers_naming_them() {
    let mut bus = Bus::builder();
    let _key = bus.caller(&service(), "lonely");
    let e = start_err(bus).to_string();
    assert!(e.contains("lonely") && e.contains("calc.add"), "{e}");

    let mut bus = Bus::builder();
    bus.actor("adder-1", Adder::new).serves(&service());
    bus.actor("adder-2", Adder::new).serves(&service());
    let _key = bus.caller(&service(), "client");
    let e = start_err(bus).to_string();
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

/// Holds one call open (the adder holds it) and makes `left` more, one after another, each as
/// the last ends; reports how many ended with their reply, and the first other end.
struct Chain {
    out: llbus::CallOut<Ask, Sum>,
    left: u64,
    answered: u64,
    report: std::sync::mpsc::Sender<(u64, Option<CallError>)>,
}

impl Chain {
    fn next(&mut self, ctx: &mut Context<'_>) {
        if self.left == 0 {
            let _ = self.report.send((self.answered, None));
            return;
        }
        self.left -= 1;
        let n = self.left;
        if let Err(e) = ctx.call(self.out, Ask { n, delta: 1 }, T) {
            let _ = self.report.send((self.answered, Some(e)));
        }
    }
}

impl Actor for Chain {
    type In = llbus::Reply<Sum>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        ctx.call(self.out, Ask { n: HOLD, delta: 0 }, T)
            .expect("room for the held call");
        self.next(ctx);
    }
    fn on_message(&mut self, reply: llbus::Reply<Sum>, ctx: &mut Context<'_>) {
        match ctx.settle(reply) {
            Some((_, Ok(_))) => {
                self.answered += 1;
                self.next(ctx);
            }
            Some((_, Err(e))) => {
                let _ = self.report.send((self.answered, Some(e)));
            }
            None => {}
        }
    }
}

/// One call held open while many more come and go: call ids wrap the table of calls in flight
/// (a slot per id modulo its size), and a new call must neither be refused while there is room
/// nor share the held call's slot.
#[test]
fn an_actor_holding_one_long_call_keeps_calling_past_the_wrap_of_its_call_table() {
    bounded("wrapping call ids", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        let calls = 3 * llbus::MAX_CALLS_IN_FLIGHT as u64;
        bus.actor("chain", move |s: &mut Setup<'_>| Chain {
            out: s.caller(&service()),
            left: calls,
            answered: 0,
            report: tx.clone(),
        })
        .calls(&service());
        let running = bus.start().expect("start");
        let got = rx.recv_timeout(T).expect("a report");
        assert_eq!(got, (calls, None), "one call in flight refused the others");
        running.stop();
        running.join().expect("join");
    });
}

/// A handle's call waits for room in the server's request ring (its `Block` policy) only
/// within the call's timeout.
#[test]
fn a_handle_call_waiting_for_room_in_a_full_request_ring_keeps_its_timeout() {
    bounded("a full request ring", 60, || {
        let mut bus = Bus::builder();
        let (hold, release) = std::sync::mpsc::channel::<()>();
        let release = std::sync::Arc::new(std::sync::Mutex::new(release));
        // A server stuck in its first call until released: its ring (2) fills behind it.
        bus.actor("slow", move |s: &mut Setup<'_>| {
            let release = std::sync::Arc::clone(&release);
            Slow {
                replies: s.replies(&service()),
                release,
            }
        })
        .serves(&service())
        .capacity::<Request<Ask>>(2);
        let key = bus.caller(&service(), "client");
        let mut running = bus.start().expect("start");
        let mut client = running.caller(key).expect("caller");
        let short = Duration::from_millis(20);
        let mut worst = Duration::ZERO;
        for n in 0..6 {
            let t0 = std::time::Instant::now();
            assert_eq!(
                client.call(Ask { n, delta: 0 }, short),
                Err(CallError::Timeout)
            );
            worst = worst.max(t0.elapsed());
            if worst > Duration::from_secs(2) {
                break;
            }
        }
        let _ = hold.send(());
        drop(hold);
        assert!(
            worst < Duration::from_secs(2),
            "a call with a 20 ms timeout took {worst:?}"
        );
        drop(client);
        running.stop();
        // The requests given up are counted lost, not left in flight.
        tests::assert_balanced(&running.join().expect("join"));
    });
}

/// Answers each call after waiting for its release (once released, at once).
struct Slow {
    replies: Replies<Sum>,
    release: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl Actor for Slow {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        let _ = (self.release.lock().expect("release")).recv_timeout(Duration::from_secs(10));
        ctx.reply(responder, Ok(Sum(ask.n)));
    }
}

/// A responder is `Send`: dropped unanswered on a thread of the user's, it still answers
/// `Dropped`, and soon, though the server has nothing more to do.
#[test]
fn a_responder_dropped_on_another_thread_answers_dropped_while_the_server_idles() {
    bounded("a responder dropped away", 60, || {
        let mut bus = Bus::builder();
        // No tick: nothing wakes the server but its inbox.
        bus.actor("adder", Adder::new).serves(&service());
        let key = bus.caller(&service(), "client");
        let mut running = bus.start().expect("start");
        let mut client = running.caller(key).expect("caller");
        let t0 = std::time::Instant::now();
        let got = client.call(
            Ask {
                n: AWAY,
                delta: 100,
            },
            Duration::from_secs(20),
        );
        assert_eq!(got, Err(CallError::Dropped), "after {:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        drop(client);
        running.stop();
        running.join().expect("join");
    });
}

/// A handle's call that the server holds when the bus stops ends then (not at its timeout).
#[test]
fn a_handle_call_held_by_the_server_ends_when_the_bus_stops() {
    bounded("held at the stop", 60, || {
        let (mut bus, keys) = adder_bus(&["client"]);
        bus.stop_timeout(Duration::from_secs(2));
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        let waiting = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let got = client.call(Ask { n: HOLD, delta: 0 }, Duration::from_secs(40));
            (got, t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        running.stop();
        let (got, took) = waiting.join().expect("the call");
        assert!(
            matches!(got, Err(CallError::Stopped | CallError::Dropped)),
            "{got:?}"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
        running.join().expect("join");
    });
}

/// Calls with timeouts of 0 and 1 ns race their replies: each ends once, reply or timeout.
#[test]
fn calls_with_zero_and_one_nanosecond_timeouts_end_once_each() {
    bounded("zero timeouts", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        let asks: Vec<_> = (0..200)
            .map(|n| (Ask { n, delta: 1 }, Duration::from_nanos(n % 2)))
            .collect();
        bus.actor("client", move |s: &mut Setup<'_>| Client {
            out: s.caller(&service()),
            asks: asks.clone().into_iter(),
            ends: tx.clone(),
            ids: Vec::new(),
        })
        .calls(&service())
        .tick_every(Duration::from_micros(200));
        let running = bus.start().expect("start");
        let mut seen = vec![0u32; 200];
        let mut ended = 0;
        while ended < 200 {
            if let Some((i, result)) = rx.recv_timeout(T).expect("the calls end") {
                seen[i as usize] += 1;
                ended += 1;
                assert!(
                    result == Ok(Sum(i + 1)) || result == Err(CallError::Timeout),
                    "call {i}: {result:?}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        while let Ok(end) = rx.try_recv() {
            if let Some((i, _)) = end {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        running.stop();
        running.join().expect("join");
    });
}

/// Calls once and panics (its first instance only); every instance reports what its calls'
/// replies settle to.
struct Fragile {
    out: llbus::CallOut<Ask, Sum>,
    first: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ends: std::sync::mpsc::Sender<Option<(llbus::CallId, Result<Sum, CallError>)>>,
}

impl Actor for Fragile {
    type In = llbus::Reply<Sum>;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        if self.first.swap(false, std::sync::atomic::Ordering::Relaxed) {
            // One answered at the adder's tick, one held past its timeout.
            ctx.call(self.out, Ask { n: LATER, delta: 3 }, T)
                .expect("room");
            ctx.call(
                self.out,
                Ask { n: HOLD, delta: 0 },
                Duration::from_millis(100),
            )
            .expect("room");
            panic!("the caller panics with two calls in flight");
        }
    }
    fn on_message(&mut self, reply: llbus::Reply<Sum>, ctx: &mut Context<'_>) {
        let _ = self.ends.send(ctx.settle(reply));
    }
}

/// An actor that calls and restarts: its calls in flight outlive the instance that made them
/// (they are the actor's), and each still ends once, in the new instance's inbox.
#[test]
fn the_calls_of_a_caller_that_restarts_still_end_once_each() {
    bounded("a caller restarts", 60, || {
        let (mut bus, _keys) = adder_bus(&[]);
        let (tx, rx) = std::sync::mpsc::channel();
        let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        bus.actor("fragile", move |s: &mut Setup<'_>| Fragile {
            out: s.caller(&service()),
            first: std::sync::Arc::clone(&first),
            ends: tx.clone(),
        })
        .calls(&service())
        .supervision(Supervision::Restart(RestartLimit {
            max_restarts: 3,
            within: Duration::from_secs(60),
            delay: Duration::from_millis(1),
        }));
        let running = bus.start().expect("start");
        let mut ends = Vec::new();
        while ends.len() < 2 {
            if let Some((call, result)) = rx.recv_timeout(T).expect("the calls end") {
                ends.push((call.get(), result));
            }
        }
        ends.sort_by_key(|(call, _)| *call);
        assert_eq!(ends, [(1, Ok(Sum(3))), (2, Err(CallError::Timeout))]);
        std::thread::sleep(Duration::from_millis(200));
        assert!(rx.try_iter().all(|end| end.is_none()), "a call ended twice");
        running.stop();
        let report = running.join().expect("join");
        assert_eq!(report.actor("fragile").map(|a| a.restarts), Some(1));
    });
}

/// Serves `service()` but takes the replies of a service it does not serve (a typo in its
/// name): every answer it gives goes nowhere.
struct Mistaken {
    replies: Replies<Sum>,
}

impl Actor for Mistaken {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        ctx.reply(responder, Ok(Sum(ask.n)));
    }
}

/// `Setup::replies` of a service the actor does not serve yields replies that reach no caller:
/// every call then waits out its whole timeout, the server believing it answered. `start()`
/// should refuse it, as `Setup::caller` refuses an undeclared call.
#[test]
fn replies_of_a_service_the_actor_does_not_serve_are_refused_at_start() {
    bounded("replies of another service", 60, || {
        let mut bus = Bus::builder();
        bus.actor("mistaken", |s: &mut Setup<'_>| Mistaken {
            replies: s.replies(&Service::<Ask, Sum>::named("calc.addd").expect("name")),
        })
        .serves(&service());
        let key = bus.caller(&service(), "client");
        match bus.start() {
            Err(e) => assert!(e.to_string().contains("calc.addd"), "{e}"),
            Ok(mut running) => {
                let mut client = running.caller(key).expect("caller");
                let got = client.call(Ask { n: 1, delta: 0 }, Duration::from_millis(200));
                drop(client);
                running.stop();
                running.join().expect("join");
                panic!("the bus started, and the call ended {got:?}");
            }
        }
    });
}
