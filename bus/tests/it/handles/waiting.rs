//! How the bus's external handles wait, under attack (bus/src/runtime/handle.rs's
//! module doc and `Subscription`'s): they spin, yield for up to `BACKOFF_YIELD`, then sleep on
//! their doorbell, so a longer silence costs no CPU, a `Block` publisher waiting on a full ring
//! ends up sleeping too, a sleeping handle is woken by the other side's push, and nothing is
//! lost.
//!
//! CPU time is the waiting thread's own (`CLOCK_THREAD_CPUTIME_ID`), so other load on the
//! machine does not count; the bounds are loose (a busy-waiting thread burns close to the whole
//! second measured, a sleeping one a few milliseconds).

use std::time::{Duration, Instant};

use llbus::{
    Actor, Backpressure, Bus, Context, Message, Out, RecvTimeoutError, Setup, BACKOFF_YIELD,
};
use tests::{assert_balanced, bounded};

#[derive(Clone, Debug, PartialEq)]
struct Ping(u64);
tests::message!(Ping, "handles.ping");

#[derive(Clone, Debug, PartialEq)]
struct Pong(u64);
tests::message!(Pong, "handles.pong");

/// Answers each ping with a pong after `ACTOR_WORK`: slower than `BACKOFF_YIELD`, so whoever
/// waits on it (a `Block` publisher handle on its full ring, a subscription handle for the
/// pong) goes to sleep each time.
struct SlowEcho {
    out: Out<Pong>,
}

const ACTOR_WORK: Duration = Duration::from_millis(3);

impl Actor for SlowEcho {
    type In = Ping;
    fn on_message(&mut self, Ping(n): Ping, ctx: &mut Context<'_>) {
        std::thread::sleep(ACTOR_WORK);
        ctx.publish(self.out, Pong(n));
    }
}

/// The CPU time the calling thread has used so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_THREAD_CPUTIME_ID is a clock every Linux kernel this crate supports provides.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// More CPU than this over a second of waiting is a busy wait (spinning and yielding for
/// `BACKOFF_YIELD` then sleeping costs a few milliseconds).
const IDLE_CPU_LIMIT: Duration = Duration::from_millis(100);

/// handle.rs: "a longer silence costs no CPU". A thread in `Subscription::recv_timeout(10 s)`
/// with nothing coming for a second uses (almost) no CPU of its own, and still takes the
/// message that ends the silence.
#[test]
fn an_idle_recv_timeout_costs_no_cpu_and_still_takes_the_message() {
    let mut bus = Bus::builder();
    let tx = bus.publisher::<Ping>("tx");
    let rx = bus.subscription::<Ping>("rx");
    let mut running = bus.start().expect("the bus starts");
    let mut tx = running.publisher(tx).expect("the publisher");
    let mut rx = running.subscription(rx).expect("the subscription");
    let reader = std::thread::spawn(move || {
        let cpu = thread_cpu();
        let wall = Instant::now();
        let got = rx.recv_timeout(Duration::from_secs(10));
        (got, thread_cpu() - cpu, wall.elapsed(), rx)
    });
    std::thread::sleep(Duration::from_secs(1));
    tx.publish(Ping(7)).expect("published");
    let (got, cpu, wall, rx) = reader.join().expect("the reader");
    assert_eq!(got, Ok(Ping(7)));
    assert!(wall >= Duration::from_millis(900), "woke early: {wall:?}");
    assert!(
        cpu < IDLE_CPU_LIMIT,
        "an idle recv_timeout used {cpu:?} of CPU over {wall:?}"
    );
    drop((tx, rx));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
}

/// handle.rs: a `recv_timeout` that nothing ends returns `Timeout` at its deadline, idle all
/// the while (the deadline is not overslept by more than the handle's longest sleep, 20 ms, and
/// a margin for the machine).
#[test]
fn a_recv_timeout_nothing_ends_times_out_on_time_without_cpu() {
    let mut bus = Bus::builder();
    let tx = bus.publisher::<Ping>("tx");
    let rx = bus.subscription::<Ping>("rx");
    let mut running = bus.start().expect("the bus starts");
    let tx = running.publisher(tx).expect("the publisher");
    let mut rx = running.subscription(rx).expect("the subscription");
    let (got, cpu, wall, rx) = bounded("an idle recv_timeout", 10, move || {
        let cpu = thread_cpu();
        let wall = Instant::now();
        let got = rx.recv_timeout(Duration::from_millis(1500));
        (got, thread_cpu() - cpu, wall.elapsed(), rx)
    });
    assert_eq!(got, Err(RecvTimeoutError::Timeout));
    assert!(
        wall >= Duration::from_millis(1500) && wall < Duration::from_millis(2500),
        "{wall:?}"
    );
    assert!(cpu < IDLE_CPU_LIMIT, "{cpu:?} of CPU over {wall:?}");
    drop((tx, rx));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
}

/// handle.rs: "a `recv` or a `Block` publish spins, then yields ..., then sleeps". A `Block`
/// publisher handle on a full ring that nobody reads for a second uses (almost) no CPU, and
/// once the reader drains, every message arrives, in order: nothing is lost.
#[test]
fn a_block_publisher_on_a_full_ring_sleeps_and_loses_nothing() {
    const CAPACITY: usize = 16;
    const SENT: u64 = 64;
    let mut bus = Bus::builder();
    let tx = bus.publisher::<Ping>("tx");
    let rx = bus.subscription_with::<Ping>("rx", Backpressure::Block, CAPACITY);
    let mut running = bus.start().expect("the bus starts");
    let mut tx = running.publisher(tx).expect("the publisher");
    let mut rx = running.subscription(rx).expect("the subscription");
    let publisher = std::thread::spawn(move || {
        let cpu = thread_cpu();
        let wall = Instant::now();
        for n in 0..SENT {
            tx.publish(Ping(n)).expect("published");
        }
        (thread_cpu() - cpu, wall.elapsed(), tx)
    });
    // The ring fills at once; the publisher then waits for the rest.
    std::thread::sleep(Duration::from_secs(1));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < SENT as usize && Instant::now() < deadline {
        if let Ok(Ping(n)) = rx.recv_timeout(Duration::from_millis(100)) {
            got.push(n);
        }
    }
    let (cpu, wall, tx) = publisher.join().expect("the publisher thread");
    assert_eq!(got, (0..SENT).collect::<Vec<_>>(), "lost or reordered");
    assert!(
        wall >= Duration::from_millis(900),
        "never blocked: {wall:?}"
    );
    assert!(
        cpu < IDLE_CPU_LIMIT,
        "a Block publisher waiting {wall:?} on a full ring used {cpu:?} of CPU"
    );
    drop((tx, rx));
    running.stop();
    let report = running.join().expect("the bus joins");
    assert_balanced(&report);
    let edge = report
        .edge(Ping::TOPIC, "tx", "rx")
        .expect("the handles' edge");
    assert_eq!((edge.published, edge.handled, edge.lost), (SENT, SENT, 0));
}

/// handle.rs: "a push or pop costs the other side no syscall unless the handle sleeps" — and a
/// sleeping handle is rung by the push, from whichever of its publishers it comes. A reader
/// that went to sleep (a silence of several `BACKOFF_YIELD`s) takes a message well before its
/// longest sleep (20 ms) would end: the doorbell woke it. Two publisher handles take turns, so
/// each ring's push must ring the one doorbell. Medians over rounds, so one descheduling does
/// not decide.
#[test]
fn a_sleeping_reader_is_woken_by_the_push_not_by_its_sleep_running_out() {
    const ROUNDS: usize = 16;
    let mut bus = Bus::builder();
    let first = bus.publisher::<Ping>("first");
    let second = bus.publisher::<Ping>("second");
    let rx = bus.subscription::<Ping>("rx");
    let mut running = bus.start().expect("the bus starts");
    let mut publishers = [
        running.publisher(first).expect("the first publisher"),
        running.publisher(second).expect("the second publisher"),
    ];
    let mut rx = running.subscription(rx).expect("the subscription");
    let start = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut at = Vec::new();
        for _ in 0..ROUNDS {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ping(sent_ns)) => at.push((sent_ns, start.elapsed())),
                Err(e) => panic!("a message never came: {e}"),
            }
        }
        (at, rx)
    });
    for round in 0..ROUNDS {
        std::thread::sleep(BACKOFF_YIELD * 8);
        let sent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        publishers[round % 2]
            .publish(Ping(sent))
            .expect("published");
    }
    let (at, rx) = reader.join().expect("the reader");
    // Each publisher's rounds apart: one that does not ring shows in its own median.
    for (who, offset) in [("first", 0), ("second", 1)] {
        let mut delays: Vec<Duration> = at
            .iter()
            .skip(offset)
            .step_by(2)
            .map(|&(sent, got)| got.saturating_sub(Duration::from_nanos(sent)))
            .collect();
        delays.sort();
        let median = delays[delays.len() / 2];
        assert!(
            median < Duration::from_millis(8),
            "a sleeping reader took a median {median:?} to see a push of the {who} publisher \
             (all: {delays:?})"
        );
    }
    drop((publishers, rx));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
}

/// Nothing lost at the yield/sleep boundary: messages sent after silences on either side of
/// `BACKOFF_YIELD` (none, half of it, twice it) all arrive, in order, at a reader that waits
/// with `recv`.
#[test]
fn silences_around_backoff_yield_lose_nothing() {
    const SENT: u64 = 600;
    let mut bus = Bus::builder();
    let tx = bus.publisher::<Ping>("tx");
    let rx = bus.subscription_with::<Ping>("rx", Backpressure::Block, 8);
    let mut running = bus.start().expect("the bus starts");
    let mut tx = running.publisher(tx).expect("the publisher");
    let mut rx = running.subscription(rx).expect("the subscription");
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        while got.len() < SENT as usize {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ping(n)) => got.push(n),
                Err(_) => break,
            }
        }
        (got, rx)
    });
    for n in 0..SENT {
        match n % 3 {
            0 => {}
            1 => std::thread::sleep(BACKOFF_YIELD / 2),
            _ => std::thread::sleep(BACKOFF_YIELD * 2),
        }
        tx.publish(Ping(n)).expect("published");
    }
    let (got, rx) = reader.join().expect("the reader");
    assert_eq!(got, (0..SENT).collect::<Vec<_>>());
    drop((tx, rx));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
}

/// handle.rs: a handle sleeps on "its own doorbell, which the other end of its rings rings".
/// A `Block` publisher handle on a full ring to an actor that takes a message every 3 ms (so
/// the publisher sleeps on each one) must be woken by the actor's pop, not by its longest sleep
/// (20 ms) running out: 150 messages take about 0.45 s if it is rung, 3 s if it polls. The
/// subscription handle that reads the actor's answers sleeps between them too, and gets every
/// one, in order; both handles' threads stay nearly idle.
#[test]
fn handles_asleep_on_an_actor_are_woken_by_it_and_lose_nothing() {
    const SENT: u64 = 150;
    let mut bus = Bus::builder();
    let feed = bus.publisher::<Ping>("feed");
    bus.actor("echo", |s: &mut Setup<'_>| SlowEcho { out: s.output() })
        .subscribes::<Ping>()
        .publishes::<Pong>()
        .capacity::<Ping>(2);
    let tap = bus.subscription_with::<Pong>("tap", Backpressure::Block, 1024);
    let mut running = bus.start().expect("the bus starts");
    let mut feed = running.publisher(feed).expect("the publisher");
    let mut tap = running.subscription(tap).expect("the subscription");
    let reader = std::thread::spawn(move || {
        let cpu = thread_cpu();
        let mut got = Vec::new();
        while got.len() < SENT as usize {
            match tap.recv_timeout(Duration::from_secs(10)) {
                Ok(Pong(n)) => got.push(n),
                Err(_) => break,
            }
        }
        (got, thread_cpu() - cpu, tap)
    });
    let cpu = thread_cpu();
    let wall = Instant::now();
    for n in 0..SENT {
        feed.publish(Ping(n)).expect("published");
    }
    let (feed_wall, feed_cpu) = (wall.elapsed(), thread_cpu() - cpu);
    let (got, tap_cpu, tap) = reader.join().expect("the reader");
    assert_eq!(got, (0..SENT).collect::<Vec<_>>(), "lost or reordered");
    assert!(
        feed_wall < Duration::from_millis(1500),
        "a Block publisher asleep on a full ring took {feed_wall:?} for {SENT} messages of \
         {ACTOR_WORK:?} each: it was not woken by the actor's pops"
    );
    assert!(
        feed_cpu < IDLE_CPU_LIMIT * 2 && tap_cpu < IDLE_CPU_LIMIT * 2,
        "publisher {feed_cpu:?}, reader {tap_cpu:?} of CPU over {feed_wall:?}"
    );
    drop((feed, tap));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
}

/// `Subscription::recv_timeout`: "Waits at most `timeout` for the next message", and
/// `RecvTimeoutError::Timeout` means "nothing arrived within the timeout". A caller that means
/// "as long as it takes" passes `Duration::MAX`: the wait has no deadline (the unit test
/// `runtime::handle::deadline_tests` checks that exactly), so it is still waiting half a
/// second later (a deadline that overflowed would have ended it at once) and takes the message
/// published then.
#[test]
fn recv_timeout_with_the_longest_timeout_does_not_time_out_early() {
    let mut bus = Bus::builder();
    let tx = bus.publisher::<Ping>("tx");
    let rx = bus.subscription::<Ping>("rx");
    let mut running = bus.start().expect("the bus starts");
    let mut tx = running.publisher(tx).expect("the publisher");
    let mut rx = running.subscription(rx).expect("the subscription");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        let got = rx.recv_timeout(Duration::MAX);
        let _ = done_tx.send(());
        (got, started.elapsed(), rx)
    });
    let early = done_rx.recv_timeout(Duration::from_millis(500)).is_ok();
    tx.publish(Ping(1)).expect("published");
    let (got, waited, rx) = reader.join().expect("the reader");
    drop((tx, rx));
    running.stop();
    assert_balanced(&running.join().expect("the bus joins"));
    assert!(
        !early && got == Ok(Ping(1)),
        "recv_timeout(Duration::MAX) returned {got:?} after {waited:?}"
    );
}
