//! Loom models of the bus's stop protocol, its stop driver, and a publisher waiting on a full
//! `Block` edge. They drive the real code: `Control` (through the `sync` shim), the edges and
//! their counters, `drive_stop` behind the driver's `wait_for_stop_request`, the runner's
//! `end_of_round`, and the real `Park`. Only the runner's
//! round loop is restated (four lines, beside `end_of_round`), and loom's clock is a step
//! count. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p llbus --release --lib loom`.

use std::sync::Arc;

use loom::thread;

use super::control::Control;
use super::edge::{single_edge, Inputs, Output, Wait};
use super::metrics::EdgeCounters;
use super::runner::end_of_round;
use super::stop::{drive_stop, StopClock};
use super::Backpressure;
use crate::wait::{IdleStrategy, Park};

#[derive(Clone, Debug, PartialEq)]
struct T(u64);

impl crate::Message for T {
    const TOPIC: &'static str = "loom.t";
    const TOPIC_ID: u64 = crate::topic_id("loom.t");
    const FINGERPRINT: u64 = 1;
}

/// Yields to loom's scheduler when idle (a spin loop must, under loom).
struct LoomYield;

impl IdleStrategy for LoomYield {
    fn idle(&mut self, work_count: usize) {
        if work_count == 0 {
            thread::yield_now();
        }
    }
    fn reset(&mut self) {}
}

/// Loom's clock: the deadlines are either never reached or already passed.
struct StepClock {
    drain_gives_up: bool,
}

impl StopClock for StepClock {
    fn pause(&mut self, control: &Control) {
        control.ring_all();
        thread::yield_now();
    }
    fn drain_over(&self) -> bool {
        self.drain_gives_up
    }
    fn begin_step(&mut self) {}
    fn step_over(&self) -> bool {
        self.drain_gives_up
    }
}

/// A subscriber thread's round loop, as `run_thread` has it: take the phase, poll the inbox
/// (unless the phase is `Exit`), then `end_of_round`. Returns what it handled and whether its
/// stop hook ran.
fn subscriber_rounds(control: &Control, mut inputs: Inputs<T>) -> (Vec<u64>, bool) {
    let mut got = Vec::new();
    let mut hooks_counted = false;
    let mut hook_ran = false;
    loop {
        let phase = control.phase();
        let n = if phase == super::control::EXIT {
            0
        } else {
            inputs.poll(64, |T(v)| got.push(v))
        };
        let (more, exit) = end_of_round(control, 0, phase, &mut hooks_counted, || {
            let first = !hook_ran;
            hook_ran = true;
            usize::from(first)
        });
        if exit {
            break;
        }
        if n + more == 0 {
            thread::yield_now();
        }
    }
    (got, hook_ran)
}

/// Publishes `values` then asks the bus to stop, as an actor's `ctx.request_stop()` would, and
/// returns its end of the edge (the caller drops it after the threads exit, as the bus does:
/// a spinning publisher would only multiply the model's states).
fn publisher(
    control: &Control,
    mut out: Output<T>,
    values: &[u64],
    idle: &mut (dyn IdleStrategy + 'static),
) -> Output<T> {
    for &v in values {
        let idle = &mut *idle;
        out.publish(
            T(v),
            Some(&mut Wait {
                idle,
                control,
                deadline: None,
            }),
        );
    }
    control.request_stop();
    out
}

/// Loom's explorer with room for the stop protocol's polling loops (each sweep of the edges
/// reads every counter: many more branches than loom's default 1,000 per execution).
fn explore(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 20_000;
    builder.check(f);
}

/// Asserts the balance of `counters` with both ends gone: every publish is handled, panicked,
/// dropped, conflated or lost, and nothing is in flight.
fn assert_settled(counters: &EdgeCounters, published: u64) {
    let s = counters.snapshot();
    assert_eq!(s.published(), published, "{s:?}");
    assert_eq!(s.in_flight(), 0, "{s:?}");
    assert_eq!(
        s.published(),
        s.handled + s.panicked + s.dropped + s.conflated + s.publisher_lost + s.subscriber_lost,
        "{s:?}"
    );
}

/// A graceful stop: a message published before the stop request is handled before the threads
/// exit, the stop hook runs, and the edge balances with nothing in flight.
#[test]
fn loom_stop_drains_what_was_published_before_it() {
    explore(|| {
        let control = Arc::new(Control::new(1, Vec::new()));
        let counters = Arc::new(EdgeCounters::default());
        let (out, inputs) =
            single_edge::<T>(Backpressure::Block, 2, false, Arc::clone(&counters), None);
        let c = Arc::clone(&control);
        let sub = thread::spawn(move || subscriber_rounds(&c, inputs));
        let c = Arc::clone(&control);
        let publ = thread::spawn(move || publisher(&c, out, &[7], &mut LoomYield));
        control.wait_for_stop_request();
        let outcome = drive_stop(
            &control,
            &[&*counters],
            &mut StepClock {
                drain_gives_up: false,
            },
        );
        let (got, hook_ran) = sub.join().unwrap();
        drop(publ.join().unwrap());
        assert!(outcome.drained && outcome.late_hooks.is_empty());
        assert_eq!(got, [7]);
        assert!(hook_ran);
        assert_settled(&counters, 1);
    });
}

/// A stop whose drain gives up at once (its timeout passed): whatever interleaving, the
/// threads exit, and every message is handled or counted lost.
#[test]
fn loom_stop_past_its_timeout_still_balances() {
    explore(|| {
        let control = Arc::new(Control::new(1, Vec::new()));
        let counters = Arc::new(EdgeCounters::default());
        let (out, inputs) =
            single_edge::<T>(Backpressure::Block, 1, false, Arc::clone(&counters), None);
        let c = Arc::clone(&control);
        let sub = thread::spawn(move || subscriber_rounds(&c, inputs));
        let c = Arc::clone(&control);
        let publ = thread::spawn(move || publisher(&c, out, &[1, 2], &mut LoomYield));
        control.wait_for_stop_request();
        drive_stop(
            &control,
            &[&*counters],
            &mut StepClock {
                drain_gives_up: true,
            },
        );
        let (got, _) = sub.join().unwrap();
        drop(publ.join().unwrap());
        let s = counters.snapshot();
        assert_eq!(s.handled, got.len() as u64);
        assert_settled(&counters, 2);
    });
}

/// A publisher thread with the real `Park`, whose doorbell the bus's control and the
/// subscriber's pops ring, publishing 1 and 2 into a `Block` edge of capacity 1: the second
/// publish finds the ring full unless the subscriber was quick.
fn parked_publisher() -> (
    Arc<Control>,
    Arc<EdgeCounters>,
    Inputs<T>,
    thread::JoinHandle<Output<T>>,
) {
    parked_publisher_into(false)
}

/// [`parked_publisher`], into an external subscription if `to_handle`.
fn parked_publisher_into(
    to_handle: bool,
) -> (
    Arc<Control>,
    Arc<EdgeCounters>,
    Inputs<T>,
    thread::JoinHandle<Output<T>>,
) {
    let mut park = Park::new();
    let bell = park.doorbell().expect("park has a doorbell");
    let control = Arc::new(Control::new(0, vec![Arc::clone(&bell)]));
    let counters = Arc::new(EdgeCounters::default());
    let (mut out, inputs) = single_edge::<T>(
        Backpressure::Block,
        1,
        to_handle,
        Arc::clone(&counters),
        Some(bell as Arc<dyn crate::ring::Notify>),
    );
    let c = Arc::clone(&control);
    let publ = thread::spawn(move || {
        for v in [1, 2] {
            let idle = &mut park;
            out.publish(
                T(v),
                Some(&mut Wait {
                    idle,
                    control: &c,
                    deadline: None,
                }),
            );
        }
        out
    });
    (control, counters, inputs, publ)
}

/// A publisher that sleeps (the real `Park`) on a full `Block` edge is woken by the
/// subscriber's pop: no wake-up is lost (loom would report the deadlock).
#[test]
fn loom_block_publisher_sleeping_on_a_full_ring_is_woken_by_a_pop() {
    loom::model(|| {
        let (_control, counters, mut inputs, publ) = parked_publisher();
        let mut got = Vec::new();
        while got.len() < 2 {
            if inputs.poll(1, |T(v)| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        let out = publ.join().unwrap();
        assert_eq!(got, [1, 2]);
        drop((out, inputs));
        assert_settled(&counters, 2);
    });
}

/// A publisher asleep on a full `Block` edge whose subscriber never reads gives up when the
/// stop protocol calls waits off (`end_waits` rings its doorbell), counting the message lost.
#[test]
fn loom_block_publisher_asleep_gives_up_when_waits_end() {
    loom::model(|| {
        let (control, counters, inputs, publ) = parked_publisher();
        control.end_waits();
        // A lost wake-up would leave the publisher asleep: loom reports the deadlock here.
        let out = publ.join().unwrap();
        let s = counters.snapshot();
        assert_eq!((s.sent, s.publisher_lost), (1, 1), "{s:?}");
        drop((out, inputs));
        assert_settled(&counters, 2);
    });
}

/// Who asks the bus to stop in [`loom_the_stop_driver_runs_the_stop_without_join`].
#[derive(Clone, Copy)]
enum Requester {
    /// Another thread: an actor's `ctx.request_stop()` or a `StopHandle`.
    OtherThread,
    /// The thread that owns the running bus, as its `Drop` does: request, then wait for the
    /// driver.
    Owner,
}

/// The stop driver (a thread asleep in `wait_for_stop_request`, then `drive_stop`) runs the
/// whole stop when a stop is requested from another thread or by the owner, while a publisher
/// sleeps (the real `Park`) on a full `Block` edge into an external subscription that nobody
/// reads: the request wakes the publisher, which gives up (counted lost) instead of waiting
/// for the reader; the driver reaches `Exit`; what is in the ring stays readable. A lost
/// wake-up of the driver or the publisher is a deadlock loom reports.
fn the_stop_driver_runs_the_stop_without_join(requester: Requester) {
    explore(move || {
        let (control, counters, mut inputs, publ) = parked_publisher_into(true);
        let c = Arc::clone(&control);
        let driver = thread::spawn(move || {
            c.wait_for_stop_request();
            drive_stop(
                &c,
                &[],
                &mut StepClock {
                    drain_gives_up: false,
                },
            )
        });
        match requester {
            Requester::OtherThread => {
                let c = Arc::clone(&control);
                thread::spawn(move || c.request_stop()).join().unwrap();
            }
            Requester::Owner => control.request_stop(),
        }
        let outcome = driver.join().unwrap();
        let out = publ.join().unwrap();
        assert!(outcome.drained && outcome.late_hooks.is_empty());
        assert_eq!(control.phase(), super::control::EXIT);
        let s = counters.snapshot();
        // The first value went into the ring; the second found it full and was given up.
        assert_eq!((s.sent, s.publisher_lost), (1, 1), "{s:?}");
        let mut got = Vec::new();
        inputs.poll(2, |T(v)| got.push(v));
        assert_eq!(got, [1]);
        drop((out, inputs));
        assert_settled(&counters, 2);
    });
}

#[test]
fn loom_the_stop_driver_runs_a_stop_requested_by_another_thread() {
    the_stop_driver_runs_the_stop_without_join(Requester::OtherThread);
}

#[test]
fn loom_the_stop_driver_runs_a_stop_requested_by_the_owner() {
    the_stop_driver_runs_the_stop_without_join(Requester::Owner);
}

/// A publisher asleep on a full `Block` edge into an external subscription gives up on the
/// stop request alone (no `end_waits`, no driver): the stop never waits for a reader outside
/// the bus. Without that rule the publisher sleeps on, and loom reports the deadlock.
#[test]
fn loom_a_publisher_into_a_subscription_gives_up_at_the_stop_request() {
    loom::model(|| {
        let (control, counters, inputs, publ) = parked_publisher_into(true);
        control.request_stop();
        let out = publ.join().unwrap();
        assert!(!control.waits_over());
        let s = counters.snapshot();
        assert_eq!((s.sent, s.publisher_lost), (1, 1), "{s:?}");
        drop((out, inputs));
        assert_settled(&counters, 2);
    });
}

/// A publisher thread with the real `Park` publishing the burst `[1, 2, 3]` with one
/// `publish_slice` into a `Block` edge of capacity 2: two fit at once, the third waits.
fn parked_burst_publisher() -> (
    Arc<Control>,
    Arc<EdgeCounters>,
    Inputs<T>,
    thread::JoinHandle<Output<T>>,
) {
    let mut park = Park::new();
    let bell = park.doorbell().expect("park has a doorbell");
    let control = Arc::new(Control::new(0, vec![Arc::clone(&bell)]));
    let counters = Arc::new(EdgeCounters::default());
    let (mut out, inputs) = single_edge::<T>(
        Backpressure::Block,
        2,
        false,
        Arc::clone(&counters),
        Some(bell as Arc<dyn crate::ring::Notify>),
    );
    let c = Arc::clone(&control);
    let publ = thread::spawn(move || {
        let idle = &mut park;
        out.publish_slice(
            &[T(1), T(2), T(3)],
            Some(&mut Wait {
                idle,
                control: &c,
                deadline: None,
            }),
        );
        out
    });
    (control, counters, inputs, publ)
}

/// A burst larger than the room in a `Block` ring: what fits goes in at once, the rest waits
/// asleep and is woken by the subscriber's pops; all of it arrives in order, counted once.
#[test]
fn loom_a_burst_waits_for_room_and_arrives_whole() {
    loom::model(|| {
        let (_control, counters, mut inputs, publ) = parked_burst_publisher();
        let mut got = Vec::new();
        while got.len() < 3 {
            if inputs.poll(1, |T(v)| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        let out = publ.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
        drop((out, inputs));
        assert_settled(&counters, 3);
    });
}

/// A burst's publisher asleep on a full `Block` ring that nobody reads gives up its rest when
/// the stop protocol calls waits off, counting it lost: the books balance.
#[test]
fn loom_a_waiting_burst_gives_up_its_rest_when_waits_end() {
    loom::model(|| {
        let (control, counters, inputs, publ) = parked_burst_publisher();
        control.end_waits();
        let out = publ.join().unwrap();
        let s = counters.snapshot();
        assert_eq!((s.sent, s.publisher_lost), (2, 1), "{s:?}");
        drop((out, inputs));
        assert_settled(&counters, 3);
    });
}
