//! A responder is `Send`: one handed to another actor and answered through that actor's
//! context still reaches its caller, with the answer given (through its server), and the
//! mistake is logged once.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Out, Replies, Request, Responder, Setup};
use tests::{assert_balanced, bounded};

use super::{service, Ask, Sum, T};

/// A call handed over: its `n` and its responder.
type Handed = (u64, Responder<Sum>);

/// Hands every call to the helper, unanswered.
struct Handoff {
    replies: Replies<Sum>,
    helper: Sender<Handed>,
}

impl Actor for Handoff {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, _ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        let _ = self.helper.send((ask.n, responder));
    }
}

/// Answers the calls handed to it, `10 n`, through its own context; publishes `Sum(n)` on its
/// own output for each (an output of another type at the index a misrouted answer would take).
struct Helper {
    calls: Arc<Mutex<Receiver<Handed>>>,
    out: Out<Sum>,
}

impl Actor for Helper {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let next = self.calls.lock().expect("calls").try_recv();
        match next {
            Ok((n, responder)) => {
                ctx.publish(self.out, Sum(n));
                ctx.reply(responder, Ok(Sum(10 * n)));
                1
            }
            Err(_) => 0,
        }
    }
}

/// Counts the warnings logged in this process that contain a text.
struct Warnings(Mutex<Vec<String>>);

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let text = record.args().to_string();
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(text);
        }
    }
    fn flush(&self) {}
}

static WARNINGS: Warnings = Warnings(Mutex::new(Vec::new()));

/// The warnings logged so far that contain `text` (installing the logger on first use).
fn warned(text: &str) -> usize {
    if log::set_logger(&WARNINGS).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let all = WARNINGS.0.lock().unwrap_or_else(|e| e.into_inner());
    all.iter().filter(|w| w.contains(text)).count()
}

#[test]
fn a_responder_answered_through_another_actor_s_context_still_reaches_its_caller() {
    bounded("a misrouted answer", 60, || {
        let mistake = "through its own context";
        let before = warned(mistake);
        let (helper, calls) = std::sync::mpsc::channel();
        let calls = Arc::new(Mutex::new(calls));
        let mut bus = Bus::builder();
        bus.actor("handoff", move |s: &mut Setup<'_>| Handoff {
            replies: s.replies(&service()),
            helper: helper.clone(),
        })
        .serves(&service());
        bus.actor("helper", move |s: &mut Setup<'_>| Helper {
            calls: Arc::clone(&calls),
            out: s.output(),
        })
        .publishes::<Sum>();
        let sums = bus.subscription::<Sum>("sums");
        let client = bus.caller(&service(), "client");
        let mut running = bus.start().expect("start");
        let mut client = running.caller(client).expect("caller");
        let mut sums = running.subscription(sums).expect("subscription");
        for n in 1..=3 {
            let t0 = Instant::now();
            assert_eq!(client.call(Ask { n, delta: 0 }, T), Ok(Sum(10 * n)));
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
            // The helper's own output got its own message, and nothing else.
            assert_eq!(sums.recv_timeout(T), Ok(Sum(n)));
        }
        assert_eq!(warned(mistake) - before, 1, "warned once for the server");
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "client").expect("client's row");
        assert_eq!((calls.calls, calls.replies), (3, 3));
        assert_eq!(
            report
                .edge("calc.sum", "helper", "sums")
                .map(|e| e.published),
            Some(3)
        );
    });
}
