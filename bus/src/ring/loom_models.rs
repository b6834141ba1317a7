//! Loom models of the ring and the doorbell handshake. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p llbus --release --lib loom`.

use loom::thread;

use super::{Latest, Ring};
use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::wait::Doorbell;

/// The consumer calls the models make, for both rings.
trait Pop {
    fn pop(&mut self) -> Option<usize>;
    fn abandoned(&self) -> bool;
}

impl Pop for super::Consumer<usize> {
    fn pop(&mut self) -> Option<usize> {
        self.try_pop()
    }
    fn abandoned(&self) -> bool {
        self.is_abandoned()
    }
}

impl Pop for super::SlotConsumer<usize> {
    fn pop(&mut self) -> Option<usize> {
        self.try_pop()
    }
    fn abandoned(&self) -> bool {
        self.is_abandoned()
    }
}

/// Pops until `n` values arrived, yielding to loom between empty polls.
fn pop_n(rx: &mut impl Pop, n: usize) -> Vec<usize> {
    let mut got = Vec::new();
    while got.len() < n {
        match rx.pop() {
            Some(v) => got.push(v),
            None => thread::yield_now(),
        }
    }
    got
}

/// Pushes `0..n` in order, yielding to loom while the ring is full.
fn push_n(tx: &mut super::Producer<usize>, n: usize) {
    for i in 0..n {
        let mut v = i;
        while let Err(e) = tx.try_push(v) {
            v = e.into_inner();
            thread::yield_now();
        }
    }
}

#[test]
fn loom_push_pop_in_order() {
    loom::model(|| {
        let (mut tx, mut rx) = Ring::new(2);
        let producer = thread::spawn(move || {
            push_n(&mut tx, 3);
        });
        assert_eq!(pop_n(&mut rx, 3), [0, 1, 2]);
        producer.join().unwrap();
    });
}

#[test]
fn loom_batches_wrap_around() {
    loom::model(|| {
        let (mut tx, mut rx) = Ring::new(2);
        let producer = thread::spawn(move || {
            let items = [0, 1, 2, 3];
            let mut sent = 0;
            while sent < items.len() {
                let n = tx.push_slice(&items[sent..]);
                if n == 0 {
                    thread::yield_now();
                }
                sent += n;
            }
        });
        let mut got = Vec::new();
        while got.len() < 4 {
            if rx.pop_batch(4, |v| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, [0, 1, 2, 3]);
        producer.join().unwrap();
    });
}

/// A value that counts its drops.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn loom_abandonment_drops_each_value_once() {
    // Set (outside the model) when some interleaving saw the producer gone before the consumer
    // left, so the check below is known to have run.
    static SAW_ABANDONMENT: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = Ring::new(2);
        let d = drops.clone();
        let producer = thread::spawn(move || {
            assert!(
                tx.try_push(Counted(d.clone())).is_ok(),
                "the ring has room for two"
            );
            assert!(
                tx.try_push(Counted(d.clone())).is_ok(),
                "the ring has room for two"
            );
            // `tx` drops here: abandonment.
        });
        // The consumer takes at most one value, then leaves while the producer may still push.
        let taken = rx.try_pop();
        if rx.is_abandoned() {
            // Abandonment is published after both pushes (Release on `closed`, Acquire here):
            // a consumer that sees the producer gone sees everything it pushed.
            SAW_ABANDONMENT.store(true, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(usize::from(taken.is_some()) + rx.len(), 2);
        }
        drop(rx);
        producer.join().unwrap();
        drop(taken);
        // Both values were made and each was dropped exactly once, whoever held it last.
        assert_eq!(drops.load(Ordering::Relaxed), 2);
    });
    assert!(
        SAW_ABANDONMENT.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving had the producer gone before the consumer checked"
    );
}

#[test]
fn loom_gathered_frees_keep_order_and_let_the_producer_through() {
    // The consumer frees two slots at a time (or when it has taken all it knew of): the
    // producer, waiting on a full ring, must always be let through, and nothing reordered.
    loom::model(|| {
        let (mut tx, mut rx) = Ring::new(2);
        rx.set_release_every(2);
        let producer = thread::spawn(move || {
            push_n(&mut tx, 4);
        });
        assert_eq!(pop_n(&mut rx, 4), [0, 1, 2, 3]);
        producer.join().unwrap();
    });
}

#[test]
fn loom_a_consumer_dropped_with_gathered_frees_drops_each_value_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = Ring::new(2);
        rx.set_release_every(2);
        let d = drops.clone();
        let producer = thread::spawn(move || {
            let mut made = 0;
            for _ in 0..3 {
                made += 1;
                if tx.try_push(Counted(d.clone())).is_err() {
                    // Handed back and dropped here: the ring is full as far as we can see.
                    continue;
                }
            }
            made
        });
        // Take one value (freed at once only if it was all the consumer knew of), then leave.
        let taken = rx.try_pop();
        drop(rx);
        let made = producer.join().unwrap();
        drop(taken);
        assert_eq!(made, 3);
        // Every value made was dropped exactly once: by the producer (refused), by us (taken)
        // or by the ring (left in it). A slot freed late would be dropped twice or never.
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    });
}

#[test]
fn loom_consumer_sees_abandonment_after_the_last_value() {
    loom::model(|| {
        let (mut tx, mut rx) = Ring::new(2);
        let producer = thread::spawn(move || {
            tx.try_push(1usize).unwrap();
        });
        // Abandoned-then-empty (in that order) means nothing more will come, and nothing was
        // missed: the value pushed before the drop is always seen.
        let mut got = Vec::new();
        loop {
            if let Some(v) = rx.try_pop() {
                got.push(v);
                continue;
            }
            if rx.is_abandoned() {
                if let Some(v) = rx.try_pop() {
                    got.push(v);
                }
                break;
            }
            thread::yield_now();
        }
        assert_eq!(got, [1]);
        producer.join().unwrap();
    });
}

/// The consumer's side of `Park`: poll, arm, poll again, sleep. Returns the value.
fn park_pop(rx: &mut impl Pop, bell: &Doorbell) -> Option<usize> {
    loop {
        if let Some(v) = rx.pop() {
            return Some(v);
        }
        if rx.abandoned() {
            return rx.pop();
        }
        bell.arm();
        if let Some(v) = rx.pop() {
            bell.disarm();
            return Some(v);
        }
        if rx.abandoned() {
            bell.disarm();
            return rx.pop();
        }
        bell.sleep(None);
    }
}

#[test]
fn loom_park_no_lost_wake_up() {
    // If a wake-up could be lost, the consumer would sleep forever and loom would report a
    // deadlock in some interleaving.
    loom::model(|| {
        let bell = std::sync::Arc::new(Doorbell::new());
        let (mut tx, mut rx) = Ring::new(2);
        tx.notify_on_push(Some(bell.clone() as _));
        let producer = thread::spawn(move || {
            tx.try_push(7usize).unwrap();
            tx
        });
        assert_eq!(park_pop(&mut rx, &bell), Some(7));
        drop(producer.join().unwrap());
    });
}

#[test]
fn loom_park_wakes_on_abandonment() {
    loom::model(|| {
        let bell = std::sync::Arc::new(Doorbell::new());
        let (mut tx, mut rx) = Ring::<usize>::new(2);
        tx.notify_on_push(Some(bell.clone() as _));
        let producer = thread::spawn(move || drop(tx));
        assert_eq!(park_pop(&mut rx, &bell), None);
        producer.join().unwrap();
    });
}

#[test]
fn loom_no_wake_up_while_the_consumer_spins() {
    loom::model(|| {
        let bell = std::sync::Arc::new(Doorbell::new());
        let (mut tx, mut rx) = Ring::new(2);
        tx.notify_on_push(Some(bell.clone() as _));
        let producer = thread::spawn(move || {
            tx.try_push(1usize).unwrap();
            tx.try_push(2usize).unwrap();
        });
        assert_eq!(pop_n(&mut rx, 2), [1, 2]);
        producer.join().unwrap();
        assert_eq!(
            bell.wakeups(),
            0,
            "a spinning consumer must cost no wake-up"
        );
    });
}

#[test]
fn loom_latest_delivers_the_newest_and_counts_every_overwrite() {
    loom::model(|| {
        let (mut tx, mut rx) = Latest::new();
        let writer = thread::spawn(move || {
            let mut conflated = 0;
            for i in 1..=3usize {
                conflated += usize::from(tx.write(i));
            }
            conflated
        });
        let mut seen = Vec::new();
        if let Some(v) = rx.read() {
            seen.push(v);
        }
        let conflated = writer.join().unwrap();
        if let Some(v) = rx.read() {
            seen.push(v);
        }
        // Values arrive in increasing order, the last one always, and every value was either
        // read or counted as conflated.
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(seen.last(), Some(&3));
        assert_eq!(seen.len() + conflated, 3);
    });
}

/// The slotted ring: a stream of 3 through 2 slots (so the producer reuses a slot whose
/// sequence is from the previous lap, and learns of free space from the lazily stored `head`),
/// half of it in batches: every value arrives once, in order.
#[test]
fn loom_slotted_push_pop_in_order_across_the_wrap() {
    loom::model(|| {
        let (mut tx, mut rx) = super::SlotRing::new(2);
        let producer = thread::spawn(move || {
            let mut next = 0;
            while next < 3 {
                let pushed = if next == 0 {
                    tx.try_push(0).is_ok() as usize
                } else {
                    tx.push_slice(&[next, next + 1][..(3 - next).min(2)])
                };
                if pushed == 0 {
                    thread::yield_now();
                }
                next += pushed;
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            if rx.pop_batch(2, |v| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, [0, 1, 2]);
        producer.join().unwrap();
    });
}

/// A value in the slotted ring when the two halves go, in either order, from two threads:
/// dropped exactly once (by whichever half goes last), and a popped one is not dropped again.
#[test]
fn loom_slotted_values_left_are_dropped_once() {
    #[derive(Debug)]
    struct D(Arc<AtomicUsize>);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = super::SlotRing::new(2);
        tx.try_push(D(Arc::clone(&drops))).unwrap();
        let d = Arc::clone(&drops);
        let producer = thread::spawn(move || {
            let _ = tx.try_push(D(d));
        });
        drop(rx.try_pop());
        drop(rx);
        producer.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 2);
    });
}

/// The slotted ring in two blocks of two: a stream of 5 in batches of up to 3, so that a batch
/// spans both blocks (one header store each), the consumer takes what one header says without
/// reloading it, frees two at a time, and the producer reuses block 0, whose header is from
/// the previous lap: every value arrives once, in order.
#[test]
fn loom_slotted_batches_span_blocks_and_wrap() {
    loom::model(|| {
        let (mut tx, mut rx) = super::SlotRing::with_slots_per_block(4, 2);
        rx.set_release_every(2);
        let producer = thread::spawn(move || {
            let items = [0, 1, 2, 3, 4];
            let mut sent = 0;
            while sent < items.len() {
                let n = tx.push_slice(&items[sent..(sent + 3).min(items.len())]);
                if n == 0 {
                    thread::yield_now();
                }
                sent += n;
            }
        });
        let mut got = Vec::new();
        while got.len() < 5 {
            if rx.pop_batch(3, |v| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
        producer.join().unwrap();
    });
}

/// Values in both blocks of a slotted ring when the two halves go, the consumer with a free
/// not yet stored: each value made is dropped exactly once (by the producer when refused, by
/// the consumer when taken, or by the ring from the consumer's last place).
#[test]
fn loom_slotted_a_consumer_dropped_with_gathered_frees_drops_each_value_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = super::SlotRing::with_slots_per_block(4, 2);
        rx.set_release_every(4);
        for _ in 0..3 {
            assert!(tx.try_push(Counted(drops.clone())).is_ok());
        }
        let d = drops.clone();
        let producer = thread::spawn(move || {
            // Refused (and dropped here) only if the ring looks full.
            let _ = tx.try_push(Counted(d));
        });
        let taken = rx.try_pop();
        drop(rx);
        producer.join().unwrap();
        drop(taken);
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    });
}

#[test]
fn loom_slotted_park_no_lost_wake_up() {
    // As `loom_park_no_lost_wake_up`, for the slotted ring's doorbell hook: a lost wake-up
    // would leave the consumer asleep, a deadlock loom reports.
    loom::model(|| {
        let bell = std::sync::Arc::new(Doorbell::new());
        let (mut tx, mut rx) = super::SlotRing::new(2);
        tx.notify_on_push(Some(bell.clone() as _));
        let producer = thread::spawn(move || {
            tx.try_push(7usize).unwrap();
            tx
        });
        assert_eq!(park_pop(&mut rx, &bell), Some(7));
        drop(producer.join().unwrap());
    });
}

#[test]
fn loom_slotted_park_wakes_on_abandonment() {
    loom::model(|| {
        let bell = std::sync::Arc::new(Doorbell::new());
        let (mut tx, mut rx) = super::SlotRing::<usize>::new(2);
        tx.notify_on_push(Some(bell.clone() as _));
        let producer = thread::spawn(move || drop(tx));
        assert_eq!(park_pop(&mut rx, &bell), None);
        producer.join().unwrap();
    });
}
