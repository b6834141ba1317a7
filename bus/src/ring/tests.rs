//! The ring's tests. They run under miri too (CI), with smaller counts.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::{Latest, PopError, PushError, Ring, TryPushError};
use crate::wait::{Backoff, IdleStrategy, Park};

/// A value that counts its drops in a shared counter.
#[derive(Debug)]
struct Counted {
    value: u64,
    drops: Arc<AtomicUsize>,
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted {
            value: self.value,
            drops: Arc::clone(&self.drops),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

fn counted(value: u64, drops: &Arc<AtomicUsize>) -> Counted {
    Counted {
        value,
        drops: Arc::clone(drops),
    }
}

/// Pushes a `Counted` for each of `values`; the ring must have room for them all.
fn push_counted(
    tx: &mut super::Producer<Counted>,
    values: std::ops::Range<u64>,
    drops: &Arc<AtomicUsize>,
) {
    for i in values {
        tx.try_push(counted(i, drops)).unwrap();
    }
}

#[test]
fn capacity_rounds_up_to_a_power_of_two() {
    let (tx, rx) = Ring::<u8>::new(5);
    assert_eq!(tx.capacity(), 8);
    assert_eq!(rx.capacity(), 8);
    let (tx, _rx) = Ring::<u8>::new(1);
    assert_eq!(tx.capacity(), 1);
}

#[test]
#[should_panic(expected = "ring capacity must be at least 1")]
fn zero_capacity_is_refused() {
    let _ = Ring::<u8>::new(0);
}

#[test]
fn push_pop_in_order_and_full_hands_the_value_back() {
    let (mut tx, mut rx) = Ring::new(4);
    for i in 0..4 {
        tx.try_push(i).unwrap();
    }
    assert_eq!(tx.try_push(99), Err(TryPushError::Full(99)));
    assert_eq!(tx.len(), 4);
    assert_eq!(rx.len(), 4);
    assert_eq!(rx.peek(), Some(&0));
    for i in 0..4 {
        assert_eq!(rx.try_pop(), Some(i));
    }
    assert_eq!(rx.try_pop(), None);
    assert_eq!(rx.peek(), None);
    assert!(rx.is_empty());
}

#[test]
fn wraps_around_many_times() {
    let (mut tx, mut rx) = Ring::new(4);
    let rounds = if cfg!(miri) { 50 } else { 10_000 };
    for i in 0..rounds {
        tx.try_push(i).unwrap();
        tx.try_push(i + 1).unwrap();
        tx.try_push(i + 2).unwrap();
        assert_eq!(rx.try_pop(), Some(i));
        assert_eq!(rx.try_pop(), Some(i + 1));
        assert_eq!(rx.try_pop(), Some(i + 2));
    }
}

#[test]
fn batches_stop_at_capacity_and_commit_once() {
    let (mut tx, mut rx) = Ring::new(8);
    assert_eq!(tx.push_slice(&[1, 2, 3]), 3);
    let mut more = 4..20;
    assert_eq!(tx.push_iter(&mut more), 5);
    // The iterator was not advanced past the last pushed item.
    assert_eq!(more.next(), Some(9));
    assert_eq!(tx.push_slice(&[0]), 0);
    let mut got = Vec::new();
    assert_eq!(rx.pop_batch(6, |v| got.push(v)), 6);
    assert_eq!(got, [1, 2, 3, 4, 5, 6]);
    assert_eq!(rx.pop_batch(100, |v| got.push(v)), 2);
    assert_eq!(rx.pop_batch(100, |v| got.push(v)), 0);
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// The free slots the producer sees in the consumer's index (`slots()` answers from its cache
/// while that shows room).
fn seen_free<T>(tx: &super::Producer<T>) -> usize {
    tx.capacity() - tx.len()
}

#[test]
fn the_consumer_frees_a_quarter_ring_at_a_time_and_all_when_it_took_everything() {
    let (mut tx, mut rx) = Ring::new(16);
    assert_eq!(rx.release_every(), 4);
    assert_eq!(tx.push_slice(&[0; 16]), 16);
    for _ in 0..3 {
        assert!(rx.try_pop().is_some());
    }
    assert_eq!(seen_free(&tx), 0, "three reads are not yet freed");
    assert!(rx.try_pop().is_some());
    assert_eq!(seen_free(&tx), 4, "the fourth frees all four");
    assert_eq!(tx.push_slice(&[1; 4]), 4);
    assert_eq!(rx.pop_batch(2, |_| ()), 2);
    assert_eq!(seen_free(&tx), 0);
    assert_eq!(rx.pop_batch(5, |_| ()), 5);
    assert_eq!(
        seen_free(&tx),
        7,
        "a batch past the threshold frees what it gathered"
    );
    rx.release();
    assert_eq!(seen_free(&tx), 7, "nothing more to free");
    assert_eq!(rx.pop_batch(3, |_| ()), 3);
    assert_eq!(seen_free(&tx), 7);
    rx.release();
    assert_eq!(seen_free(&tx), 10, "`release` frees at once");
    // Taking every value the consumer knows of frees at once, whatever the threshold.
    rx.set_release_every(16);
    assert_eq!(rx.release_every(), 16);
    assert_eq!(rx.pop_batch(100, |_| ()), 6);
    assert_eq!(seen_free(&tx), 16);
    assert!(rx.try_pop().is_none());
}

#[test]
fn release_every_one_frees_each_read_and_lowering_it_frees_what_it_passed() {
    let (mut tx, mut rx) = Ring::new(8);
    rx.set_release_every(0);
    assert_eq!(rx.release_every(), 1, "clamped to at least one");
    rx.set_release_every(1000);
    assert_eq!(rx.release_every(), 8, "clamped to the capacity");
    assert_eq!(tx.push_slice(&[0; 8]), 8);
    assert_eq!(rx.pop_batch(3, |_| ()), 3);
    assert_eq!(seen_free(&tx), 0);
    rx.set_release_every(2);
    assert_eq!(
        seen_free(&tx),
        3,
        "a threshold below what is gathered frees it"
    );
    rx.set_release_every(1);
    for freed in 4..8 {
        assert!(rx.try_pop().is_some());
        assert_eq!(seen_free(&tx), freed);
    }
}

#[test]
fn a_dropped_consumer_frees_what_it_gathered_and_nothing_is_dropped_twice() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = Ring::new(8);
    push_counted(&mut tx, 0..8, &drops);
    // One taken and not yet freed (a quarter of 8 is 2).
    let a = rx.try_pop().unwrap();
    assert_eq!(tx.slots(), 0);
    drop(rx);
    // The producer sees the slot the consumer freed as it went, and the ring's drop leaves the
    // taken value to its holder: 7 dropped by the ring, 1 by us, 1 pushed after.
    assert!(tx.is_abandoned());
    assert_eq!(tx.slots(), 1);
    assert!(tx.push(counted(8, &drops), &mut Backoff::new()).is_ok());
    assert!(matches!(
        tx.push(counted(9, &drops), &mut Backoff::new()),
        Err(PushError::Abandoned(_))
    ));
    assert_eq!(drops.load(Ordering::Relaxed), 1, "the refused value");
    drop(tx);
    assert_eq!(drops.load(Ordering::Relaxed), 1 + 8);
    assert_eq!(a.value, 0);
    drop(a);
    assert_eq!(drops.load(Ordering::Relaxed), 10);
}

#[test]
fn abandonment_is_seen_from_both_sides() {
    let (tx, rx) = Ring::<u32>::new(2);
    assert!(!tx.is_abandoned());
    drop(rx);
    assert!(tx.is_abandoned());

    let (mut tx, mut rx) = Ring::new(2);
    tx.try_push(7).unwrap();
    drop(tx);
    assert!(rx.is_abandoned());
    // Values pushed before the producer went are still delivered.
    assert_eq!(rx.try_pop(), Some(7));
    assert_eq!(rx.pop(&mut Backoff::new()), Err(PopError::Abandoned));
}

#[test]
fn items_left_in_the_ring_are_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = Ring::new(8);
    push_counted(&mut tx, 0..6, &drops);
    drop(rx.try_pop());
    assert_eq!(drops.load(Ordering::Relaxed), 1);
    drop(tx);
    assert_eq!(drops.load(Ordering::Relaxed), 1);
    drop(rx);
    assert_eq!(drops.load(Ordering::Relaxed), 6);
}

#[test]
fn items_left_after_wrap_around_are_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = Ring::new(4);
    push_counted(&mut tx, 0..3, &drops);
    drop(rx.try_pop());
    drop(rx.try_pop());
    push_counted(&mut tx, 3..6, &drops);
    // Slots now wrap: head=2, tail=6.
    drop(rx);
    assert_eq!(drops.load(Ordering::Relaxed), 2);
    drop(tx);
    assert_eq!(drops.load(Ordering::Relaxed), 6);
}

#[test]
fn zero_sized_types_work() {
    let (mut tx, mut rx) = Ring::<()>::new(4);
    assert_eq!(tx.push_slice(&[(), (), (), (), ()]), 4);
    assert_eq!(tx.try_push(()), Err(TryPushError::Full(())));
    assert_eq!(rx.try_pop(), Some(()));
    assert_eq!(rx.pop_batch(10, |()| {}), 3);
    assert_eq!(rx.try_pop(), None);
}

/// A zero-sized type with a `Drop` that counts into a static.
static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);
struct ZstDrop;
impl Drop for ZstDrop {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn zero_sized_types_with_drop_are_dropped_exactly_once() {
    let (mut tx, mut rx) = Ring::new(4);
    for _ in 0..3 {
        assert!(tx.try_push(ZstDrop).is_ok());
    }
    drop(rx.try_pop());
    assert_eq!(ZST_DROPS.load(Ordering::Relaxed), 1);
    drop((tx, rx));
    assert_eq!(ZST_DROPS.load(Ordering::Relaxed), 3);
}

#[test]
fn a_panic_in_the_pop_closure_does_not_corrupt_the_ring() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = Ring::new(8);
    push_counted(&mut tx, 0..5, &drops);
    let result = catch_unwind(AssertUnwindSafe(|| {
        rx.pop_batch(5, |v| {
            if v.value == 2 {
                panic!("user closure fails on 2");
            }
        });
    }));
    assert!(result.is_err());
    // 0, 1 and 2 were handed out (and dropped); 3 and 4 remain, in order.
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    assert_eq!(rx.len(), 2);
    assert_eq!(rx.try_pop().map(|v| v.value), Some(3));
    assert_eq!(rx.try_pop().map(|v| v.value), Some(4));
    assert_eq!(drops.load(Ordering::Relaxed), 5);
    tx.try_push(counted(5, &drops)).unwrap();
    assert_eq!(rx.try_pop().map(|v| v.value), Some(5));
}

#[test]
fn a_panic_in_the_push_iterator_keeps_what_was_pushed() {
    let (mut tx, mut rx) = Ring::new(8);
    let mut n = 0;
    let mut failing = std::iter::from_fn(|| {
        n += 1;
        if n == 4 {
            panic!("iterator fails on its fourth item");
        }
        Some(n)
    });
    let result = catch_unwind(AssertUnwindSafe(|| tx.push_iter(&mut failing)));
    assert!(result.is_err());
    assert_eq!(rx.len(), 3);
    let mut got = Vec::new();
    rx.pop_batch(8, |v| got.push(v));
    assert_eq!(got, [1, 2, 3]);
}

/// Clones itself until the clone of `fail_at` panics.
#[derive(Debug, PartialEq)]
struct FailingClone {
    value: u32,
    fail_at: u32,
}

impl Clone for FailingClone {
    fn clone(&self) -> Self {
        assert!(
            self.value != self.fail_at,
            "clone fails on {}",
            self.fail_at
        );
        FailingClone { ..*self }
    }
}

#[test]
fn a_panic_in_clone_across_the_wrap_keeps_the_clones_made() {
    let (mut tx, mut rx) = Ring::new(8);
    let item = |value| FailingClone { value, fail_at: 5 };
    // Move both indices to 6 so the next batch wraps after two slots.
    assert_eq!(tx.push_iter(&mut (0..6).map(item)), 6);
    assert_eq!(rx.pop_batch(6, drop), 6);
    let items: Vec<FailingClone> = (0..8).map(item).collect();
    let result = catch_unwind(AssertUnwindSafe(|| tx.push_slice(&items)));
    assert!(result.is_err());
    // 0..5 were cloned (two before the wrap, three after) and published; 5 failed.
    let mut got = Vec::new();
    assert_eq!(rx.pop_batch(8, |v| got.push(v.value)), 5);
    assert_eq!(got, [0, 1, 2, 3, 4]);
    // The ring still works after the panic, across the wrap again.
    assert_eq!(tx.push_slice(&items[..5]), 5);
    assert_eq!(rx.len(), 5);
}

/// Drops of a value whose `Drop` panics, counted, to check the ring's own drop survives one.
struct PanicOnDrop {
    panic: bool,
    drops: Arc<AtomicUsize>,
}
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
        if self.panic {
            panic!("user Drop panics");
        }
    }
}

#[test]
fn a_panic_in_a_user_drop_still_drops_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, rx) = Ring::new(4);
    for i in 0..4 {
        let v = PanicOnDrop {
            panic: i == 1,
            drops: Arc::clone(&drops),
        };
        assert!(tx.try_push(v).is_ok());
    }
    drop(rx);
    let result = catch_unwind(AssertUnwindSafe(move || drop(tx)));
    assert!(result.is_err());
    assert_eq!(drops.load(Ordering::Relaxed), 4);
}

#[test]
fn timeouts_return_the_value_or_empty() {
    let (mut tx, mut rx) = Ring::new(1);
    let mut idle = Backoff::new();
    tx.try_push(1).unwrap();
    assert_eq!(
        tx.push_timeout(2, Duration::from_millis(5), &mut idle),
        Err(PushError::Full(2))
    );
    assert_eq!(rx.pop_timeout(Duration::from_millis(5), &mut idle), Ok(1));
    assert_eq!(
        rx.pop_timeout(Duration::from_millis(5), &mut idle),
        Err(PopError::Empty)
    );
    drop(rx);
    tx.try_push(3).unwrap();
    assert_eq!(tx.push(4, &mut idle), Err(PushError::Abandoned(4)));
}

#[test]
fn latest_keeps_only_the_newest_and_counts_conflations() {
    let (mut tx, mut rx) = Latest::new();
    assert_eq!(rx.read(), None);
    let mut conflated = 0;
    for i in 0..10 {
        conflated += usize::from(tx.write(i));
    }
    assert_eq!(conflated, 9);
    assert_eq!(rx.read(), Some(9));
    assert_eq!(rx.read(), None);
    assert!(!tx.write(10));
    assert_eq!(rx.read(), Some(10));
    drop(tx);
    assert!(rx.is_abandoned());
}

#[test]
fn latest_drops_every_value_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = Latest::new();
    for i in 0..5 {
        tx.write(counted(i, &drops));
    }
    let newest = rx.read().map(|v| v.value);
    assert_eq!(newest, Some(4));
    tx.write(counted(5, &drops));
    drop((tx, rx));
    assert_eq!(drops.load(Ordering::Relaxed), 6);
}

/// Moves `n` sequence numbers between two threads through a small ring and checks order and
/// completeness. Blocking ops with a timeout keep it bounded: a lost item fails, never hangs.
fn stress(n: u64, batch: bool, make_idle: fn() -> Park) {
    let (mut tx, mut rx) = Ring::new(1024);
    let mut consumer_idle = make_idle();
    tx.notify_on_push(consumer_idle.doorbell().map(|d| d as _));
    let mut producer_idle = make_idle();
    rx.notify_on_pop(producer_idle.doorbell().map(|d| d as _));
    let limit = Duration::from_secs(60);
    let producer = std::thread::spawn(move || {
        if batch {
            let mut next = 0..n;
            while next.start < n {
                if tx.push_iter(&mut next.by_ref().take(64)) == 0 {
                    producer_idle.idle(0);
                } else {
                    producer_idle.reset();
                }
            }
        } else {
            for i in 0..n {
                tx.push_timeout(i, limit, &mut producer_idle)
                    .expect("stress producer timed out: consumer stuck");
            }
        }
    });
    let mut expected = 0;
    if batch {
        while expected < n {
            let got = rx.pop_batch(64, |v| {
                assert_eq!(v, expected, "out of order");
                expected += 1;
            });
            if got == 0 {
                if rx.is_abandoned() && rx.is_empty() {
                    break;
                }
                consumer_idle.idle(0);
            } else {
                consumer_idle.reset();
            }
        }
    } else {
        while expected < n {
            let v = rx
                .pop_timeout(limit, &mut consumer_idle)
                .expect("stress consumer timed out: producer stuck");
            assert_eq!(v, expected, "out of order");
            expected += 1;
        }
    }
    assert_eq!(expected, n, "items were lost");
    producer.join().expect("producer panicked");
    assert_eq!(rx.try_pop(), None, "items were duplicated");
}

/// The latest slot between two threads: the reader sees strictly increasing values, always
/// ends with the last one, and every value is either read or counted as conflated by the
/// writer. Bounded: the reader gives up (and fails) after a minute without the last value.
#[test]
fn stress_latest_between_two_threads() {
    let n: u64 = if cfg!(miri) { 200 } else { 1_000_000 };
    let (mut tx, mut rx) = Latest::new();
    let writer = std::thread::spawn(move || {
        let mut conflated = 0u64;
        for i in 1..=n {
            conflated += u64::from(tx.write(i));
        }
        conflated
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = 0;
    let mut read = 0u64;
    while last != n {
        match rx.read() {
            Some(v) => {
                assert!(v > last, "went back from {last} to {v}");
                last = v;
                read += 1;
            }
            None => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the last value never came"
                );
                std::thread::yield_now();
            }
        }
    }
    let conflated = writer.join().expect("writer panicked");
    assert_eq!(rx.read(), None, "a value was read twice");
    assert_eq!(read + conflated, n, "read {read}, conflated {conflated}");
}

fn stress_count() -> u64 {
    if cfg!(miri) {
        2_000
    } else {
        10_000_000
    }
}

#[test]
fn stress_ten_million_in_order_single_items() {
    stress(stress_count(), false, Park::new);
}

#[test]
fn stress_ten_million_in_order_batches() {
    stress(stress_count(), true, Park::new);
}

#[test]
fn park_sleeps_and_is_woken_by_the_producer() {
    // Without a wake-up the consumer would sleep until its deadline and only then find the
    // value, so "returned before the deadline, and the push rang" is what the wake-up proves.
    let timeout = Duration::from_secs(60);
    // The push must find the consumer asleep (armed), or it proves nothing: on a loaded machine
    // the consumer may still be backing off, so try again with a longer head start.
    for attempt in 1..=10 {
        let (mut tx, mut rx) = Ring::<u32>::new(4);
        let mut idle = Park::new();
        let bell = idle.doorbell().expect("park has a doorbell");
        tx.notify_on_push(Some(bell.clone() as _));
        let consumer = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let got = rx.pop_timeout(timeout, &mut idle);
            (got, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20 * attempt));
        tx.try_push(42).unwrap();
        let (got, waited) = consumer.join().expect("consumer panicked");
        assert_eq!(got, Ok(42));
        match bell.wakeups() {
            0 => continue, // still backing off when the push came: not asleep yet
            1 => {
                assert!(
                    waited < timeout,
                    "the consumer slept to its deadline ({waited:?}): the push's wake-up was lost"
                );
                return;
            }
            n => panic!("one push rang the doorbell {n} times"),
        }
    }
    panic!("in 10 attempts the push never found the consumer asleep: Park never armed its bell");
}

#[test]
fn no_wake_up_is_paid_while_the_consumer_spins() {
    let (mut tx, mut rx) = Ring::<u32>::new(64);
    let bell = Arc::new(crate::wait::Doorbell::new());
    tx.notify_on_push(Some(bell.clone() as _));
    for i in 0..32 {
        tx.try_push(i).unwrap();
        assert_eq!(rx.try_pop(), Some(i));
    }
    assert_eq!(bell.wakeups(), 0);
    bell.arm();
    tx.try_push(1).unwrap();
    assert_eq!(bell.wakeups(), 1);
    tx.try_push(2).unwrap();
    assert_eq!(bell.wakeups(), 1, "only the first push after arming rings");
}

#[derive(Clone, Debug)]
enum Op {
    Push,
    PushSlice(u8),
    /// Pushes from an iterator of `n` items; `true` hides its length (size hint 0).
    PushIter(u8, bool),
    Pop,
    PopBatch(u8),
    Peek,
    /// `Consumer::release`: the producer sees every free slot.
    Release,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Push),
        (0u8..20).prop_map(Op::PushSlice),
        (0u8..20, any::<bool>()).prop_map(|(n, hide)| Op::PushIter(n, hide)),
        Just(Op::Pop),
        (0u8..20).prop_map(Op::PopBatch),
        Just(Op::Peek),
        Just(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random sequences of single and batch operations behave like a bounded `VecDeque`, and
    /// every value is dropped exactly once. The producer's view of the ring (`tx.len()`) is the
    /// model's plus at most `release_every - 1` slots the consumer has read but not yet freed,
    /// exact once the consumer has taken everything or `release`d, and what the producer can
    /// push is exactly the room in that view.
    #[test]
    fn behaves_like_a_bounded_vecdeque(
        cap_log in 0u32..5,
        every in prop::option::of(1usize..20),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let capacity = 1usize << cap_log;
        let drops = Arc::new(AtomicUsize::new(0));
        let mut created = 0usize;
        let (mut tx, mut rx) = Ring::new(capacity);
        if let Some(every) = every {
            rx.set_release_every(every);
        }
        let every = rx.release_every();
        prop_assert_eq!(every, every.clamp(1, capacity));
        let mut model: VecDeque<u64> = VecDeque::new();
        let mut next = 0u64;
        for op in ops {
            // The room the producer sees (its cached head may say less, but a push that wants
            // more than the cache offers re-reads the consumer's index).
            let room = capacity - tx.len();
            match op {
                Op::Push => {
                    let v = counted(next, &drops);
                    created += 1;
                    match tx.try_push(v) {
                        Ok(()) => { model.push_back(next); }
                        Err(TryPushError::Full(v)) => {
                            prop_assert_eq!(room, 0);
                            prop_assert_eq!(v.value, next);
                        }
                    }
                    next += 1;
                }
                Op::PushSlice(n) => {
                    let items: Vec<Counted> = (0..u64::from(n)).map(|i| counted(next + i, &drops)).collect();
                    created += items.len() * 2; // the originals and their clones
                    let pushed = tx.push_slice(&items);
                    prop_assert_eq!(pushed, usize::from(n).min(room));
                    for i in 0..pushed as u64 { model.push_back(next + i); }
                    next += u64::from(n);
                    // Clones not pushed were never made: count them as dropped already.
                    created -= usize::from(n) - pushed;
                }
                Op::PushIter(n, hide) => {
                    let mut made = 0usize;
                    let mut make = |i| {
                        made += 1;
                        counted(next + i, &drops)
                    };
                    let pushed = if hide {
                        tx.push_iter(&mut (0..u64::from(n)).filter(|_| true).map(&mut make))
                    } else {
                        tx.push_iter(&mut (0..u64::from(n)).map(&mut make))
                    };
                    if hide {
                        // Without a length the batch may stop at the cached room, but it never
                        // takes more than fits, and takes something when something fits.
                        prop_assert!(pushed <= usize::from(n).min(room));
                        prop_assert!(n == 0 || room == 0 || pushed > 0);
                    } else {
                        prop_assert_eq!(pushed, usize::from(n).min(room));
                    }
                    // The iterator was not advanced past the last pushed item.
                    prop_assert_eq!(made, pushed);
                    created += made;
                    for i in 0..pushed as u64 { model.push_back(next + i); }
                    next += u64::from(n);
                }
                Op::Pop => {
                    prop_assert_eq!(rx.try_pop().map(|v| v.value), model.pop_front());
                }
                Op::PopBatch(n) => {
                    let mut got = Vec::new();
                    let popped = rx.pop_batch(usize::from(n), |v| got.push(v.value));
                    prop_assert_eq!(popped, got.len());
                    let want: Vec<u64> = (0..popped).filter_map(|_| model.pop_front()).collect();
                    prop_assert_eq!(got, want);
                    prop_assert!(popped == usize::from(n) || model.is_empty());
                }
                Op::Peek => {
                    prop_assert_eq!(rx.peek().map(|v| v.value), model.front().copied());
                }
                Op::Release => {
                    rx.release();
                    prop_assert_eq!(tx.len(), model.len());
                }
            }
            prop_assert_eq!(rx.len(), model.len());
            let unfreed = tx.len() - model.len();
            prop_assert!(unfreed < every, "{} read slots not freed, release_every {}", unfreed, every);
            if model.is_empty() {
                prop_assert_eq!(tx.len(), 0, "a consumer that took everything frees everything");
            }
        }
        drop(tx);
        drop(rx);
        prop_assert_eq!(drops.load(Ordering::Relaxed), created);
    }
}

// The slotted ring: the same guarantees as `Ring`, checked the same ways.

use super::SlotRing;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The slotted ring against a `VecDeque`: any sequence of pushes, batch pushes, pops and
    /// batch pops (single-threaded) yields the same values, and the same room.
    #[test]
    fn slotted_ring_behaves_as_a_bounded_deque(
        cap in 1usize..20,
        per_block in 0usize..8,
        every in 1usize..9,
        ops in prop::collection::vec((0u8..5, 0usize..10), 0..200),
    ) {
        // Blocks of every size a `u64` ring can have (0: the size `new` chooses).
        let (mut tx, mut rx) = match per_block {
            0 => SlotRing::new(cap),
            n => SlotRing::with_slots_per_block(cap, n),
        };
        rx.set_release_every(every);
        let cap = tx.capacity();
        let mut model = VecDeque::new();
        let mut next = 0u64;
        // Whether the consumer has freed every slot it took: after a pop that found the ring
        // drained (it got less than it asked for), or always when it frees each at once.
        let mut all_freed = true;
        for (op, n) in ops {
            match op {
                0 => {
                    let pushed = tx.try_push(next).is_ok();
                    // Lazy frees: the producer may see less room than there is, never more.
                    prop_assert!(pushed || model.len() == cap || !all_freed);
                    if pushed {
                        model.push_back(next);
                        next += 1;
                    }
                }
                1 | 4 => {
                    let items: Vec<u64> = (next..next + n as u64).collect();
                    let k = if op == 1 {
                        tx.push_slice(&items)
                    } else {
                        tx.push_iter(&mut items.iter().copied())
                    };
                    prop_assert!(model.len() + k <= cap);
                    if all_freed {
                        prop_assert_eq!(k, n.min(cap - model.len()));
                    }
                    model.extend(&items[..k]);
                    next += k as u64;
                }
                2 => {
                    let got = rx.try_pop();
                    all_freed = got.is_none() || every == 1;
                    prop_assert_eq!(got, model.pop_front());
                }
                _ => {
                    let mut got = Vec::new();
                    rx.pop_batch(n, |v| got.push(v));
                    let want: Vec<u64> = (0..n.min(model.len()))
                        .filter_map(|_| model.pop_front())
                        .collect();
                    all_freed = got.len() < n || every == 1 || (all_freed && n == 0);
                    prop_assert_eq!(got, want);
                }
            }
            prop_assert_eq!(rx.len(), model.len());
            prop_assert_eq!(rx.is_empty(), model.is_empty());
            prop_assert!(rx.cached_len() <= model.len());
            prop_assert!(tx.len() >= model.len());
        }
    }

    /// Values of other sizes (16 bytes: three to a block), and ones left in the ring at the
    /// end: every value arrives once, in order, and the ones left are dropped once.
    #[test]
    fn slotted_ring_of_counted_values_drops_each_once(
        cap in 1usize..12,
        ops in prop::collection::vec((0u8..3, 0usize..8), 0..100),
    ) {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = SlotRing::new(cap);
        let mut model = VecDeque::new();
        let mut next = 0u64;
        // Values made: the originals of a `push_slice` and their clones pushed, and the values
        // `push_iter` took from its iterator.
        let mut created = 0;
        for (op, n) in ops {
            match op {
                0 => {
                    let items: Vec<Counted> = (next..next + n as u64).map(|v| counted(v, &drops)).collect();
                    let k = tx.push_slice(&items);
                    model.extend(next..next + k as u64);
                    next += k as u64;
                    created += n + k;
                }
                1 => {
                    let mut items = (next..next + n as u64).map(|v| counted(v, &drops));
                    let k = tx.push_iter(&mut items);
                    model.extend(next..next + k as u64);
                    next += k as u64;
                    created += k;
                }
                _ => {
                    let mut got = Vec::new();
                    rx.pop_batch(n, |c| got.push(c.value));
                    let want: Vec<u64> = (0..got.len()).filter_map(|_| model.pop_front()).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
        prop_assert_eq!(drops.load(Ordering::Relaxed) + model.len(), created);
        drop(tx);
        drop(rx);
        prop_assert_eq!(drops.load(Ordering::Relaxed), created);
    }
}

#[test]
fn slotted_blocks_fit_a_line_and_capacity_rounds_up_to_whole_blocks() {
    // Seven 8-byte values beside the header; three 16-byte ones; one 32-byte one.
    assert_eq!(SlotRing::<u64>::new(7).0.capacity(), 7);
    assert_eq!(SlotRing::<u64>::new(8).0.capacity(), 14);
    assert_eq!(SlotRing::<u64>::new(1024).0.capacity(), 1029);
    assert_eq!(SlotRing::<[u64; 2]>::new(4).0.capacity(), 6);
    assert_eq!(SlotRing::<[u64; 4]>::new(3).0.capacity(), 3);
    // Small rings are one block of exactly the size asked for.
    assert_eq!(SlotRing::<u64>::new(3).0.capacity(), 3);
}

/// Zero-sized and over-aligned values go through as any other.
#[test]
fn slotted_zero_sized_and_over_aligned_values() {
    let (mut tx, mut rx) = SlotRing::<()>::new(20);
    assert_eq!(
        tx.push_iter(&mut std::iter::repeat_n((), 30)),
        tx.capacity()
    );
    assert_eq!(rx.pop_batch(100, drop), tx.capacity());

    #[derive(Clone, Debug, PartialEq)]
    #[repr(align(128))]
    struct Wide(u64);
    let (mut tx, mut rx) = SlotRing::new(5);
    for round in 0..4 {
        let items: Vec<Wide> = (0..5).map(|i| Wide(round * 10 + i)).collect();
        assert_eq!(tx.push_slice(&items), 5);
        let mut got = Vec::new();
        rx.pop_batch(10, |w| {
            assert_eq!(&w as *const Wide as usize % 128, 0);
            got.push(w);
        });
        assert_eq!(got, items);
    }
}

/// A consumer still taking the last values of a block's lap while the producer has begun the
/// block's next lap (its header already says the new lap) takes exactly the old values first.
#[test]
fn slotted_a_block_a_lap_ahead_hands_out_the_old_values_first() {
    let (mut tx, mut rx) = SlotRing::with_slots_per_block(4, 2); // two blocks of two
    rx.set_release_every(1);
    tx.try_push(0).unwrap();
    assert_eq!(rx.try_pop(), Some(0)); // knows of position 0 only
    assert_eq!(tx.push_slice(&[1, 2, 3]), 3);
    // Position 4 is block 0's next lap: its header now reads 5 while position 1 is unread.
    tx.try_push(4).unwrap();
    let mut got = Vec::new();
    rx.pop_batch(10, |v| got.push(v));
    assert_eq!(got, [1, 2, 3, 4]);
}

/// A `Clone` that panics in the middle of a block: the clones made before it are pushed (and
/// published), nothing is dropped twice, and the ring goes on.
#[test]
fn slotted_a_clone_that_panics_mid_batch_keeps_the_clones_made() {
    #[derive(Debug)]
    struct Fragile(u64, Arc<AtomicUsize>);
    impl Clone for Fragile {
        fn clone(&self) -> Self {
            assert_ne!(self.0, 4, "the fifth clone");
            Fragile(self.0, Arc::clone(&self.1))
        }
    }
    impl Drop for Fragile {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = SlotRing::new(16); // three to a block: the panic is in block 1
    let items: Vec<Fragile> = (0..8).map(|i| Fragile(i, Arc::clone(&drops))).collect();
    let unwound = catch_unwind(AssertUnwindSafe(|| tx.push_slice(&items)));
    assert!(unwound.is_err());
    let mut got = Vec::new();
    rx.pop_batch(16, |f| got.push(f.0));
    assert_eq!(got, [0, 1, 2, 3]);
    assert_eq!(drops.load(Ordering::Relaxed), 4);
    assert_eq!(tx.push_slice(&items[5..]), 3);
    drop((tx, rx, items));
    assert_eq!(drops.load(Ordering::Relaxed), 4 + 3 + 8);
}

/// The doorbells: the producer's rings after each push and batch, the consumer's after each
/// store of `head`, and each half's when it goes.
#[test]
fn slotted_doorbells_ring_on_publish_free_and_drop() {
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl super::Notify for Count {
        fn notify(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let (mut tx, mut rx) = SlotRing::new(16);
    let (pushed, freed) = (Arc::new(Count::default()), Arc::new(Count::default()));
    tx.notify_on_push(Some(pushed.clone()));
    rx.notify_on_pop(Some(freed.clone()));
    rx.set_release_every(1);
    tx.try_push(1u64).unwrap();
    assert_eq!(tx.push_slice(&[2, 3, 4, 5, 6, 7, 8, 9]), 8); // two blocks, one ring
    assert_eq!(tx.push_slice(&[]), 0); // nothing published: no ring
    assert_eq!(pushed.0.load(Ordering::Relaxed), 2);
    assert_eq!(rx.pop_batch(4, drop), 4);
    assert_eq!(freed.0.load(Ordering::Relaxed), 1);
    assert_eq!(rx.try_pop(), Some(5));
    assert_eq!(freed.0.load(Ordering::Relaxed), 2);
    drop(tx);
    assert_eq!(pushed.0.load(Ordering::Relaxed), 3);
    assert!(rx.is_abandoned());
    drop(rx);
    assert_eq!(freed.0.load(Ordering::Relaxed), 3);
}

#[test]
fn slotted_items_left_are_dropped_exactly_once_after_wrap_around() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = SlotRing::new(4);
    for round in 0..3u64 {
        for i in 0..3 {
            tx.try_push(counted(round * 10 + i, &drops)).unwrap();
        }
        for i in 0..3 {
            assert_eq!(rx.try_pop().map(|c| c.value), Some(round * 10 + i));
        }
    }
    assert_eq!(drops.load(Ordering::Relaxed), 9);
    for i in 0..3 {
        tx.try_push(counted(100 + i, &drops)).unwrap();
    }
    assert_eq!(rx.try_pop().map(|c| c.value), Some(100));
    assert_eq!(drops.load(Ordering::Relaxed), 10);
    drop(tx);
    assert!(rx.is_abandoned());
    drop(rx);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        12,
        "the two left dropped once each"
    );
}

#[test]
fn slotted_a_panic_in_the_pop_closure_keeps_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = SlotRing::new(8);
    for i in 0..5 {
        tx.try_push(counted(i, &drops)).unwrap();
    }
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        rx.pop_batch(8, |c| assert_ne!(c.value, 2, "the third"));
    }));
    assert!(unwound.is_err());
    assert_eq!(
        drops.load(Ordering::Relaxed),
        3,
        "three taken (one in the panic)"
    );
    let rest: Vec<u64> = std::iter::from_fn(|| rx.try_pop().map(|c| c.value)).collect();
    assert_eq!(rest, [3, 4]);
    drop((tx, rx));
    assert_eq!(drops.load(Ordering::Relaxed), 5);
}

#[test]
fn slotted_a_stream_between_two_threads_arrives_in_order() {
    let n = if cfg!(miri) { 2_000 } else { 2_000_000 };
    let (mut tx, mut rx) = SlotRing::<u64>::new(64);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let producer = std::thread::spawn(move || {
        let mut next = 0;
        while next < n && std::time::Instant::now() < deadline {
            if next % 3 == 0 {
                let items: Vec<u64> = (next..(next + 5).min(n)).collect();
                next += tx.push_slice(&items) as u64;
            } else if tx.try_push(next).is_ok() {
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
    });
    let mut expected = 0;
    while expected < n && std::time::Instant::now() < deadline {
        let got = rx.pop_batch(7, |v| {
            assert_eq!(v, expected, "out of order");
            expected += 1;
        });
        if got == 0 {
            std::thread::yield_now();
        }
    }
    producer.join().expect("producer panicked");
    assert_eq!(expected, n, "items were lost (or the minute ran out)");
    assert_eq!(rx.try_pop(), None, "items were duplicated");
}
