//! Loom models of the shared ring's sleep/wake handshake (`handshake`), the part of its
//! protocol that differs from the in-process ring. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p llbus-ipc --release --lib loom`.

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::handshake::{announce, must_wake, Decision};

/// One writer publishes (tail 0 -> 1) and wakes; one reader that found the ring empty
/// announces a sleep and re-checks. In no interleaving may the reader decide to sleep on an
/// empty ring while the writer decides nobody sleeps: that is the lost wake-up.
#[test]
fn loom_reader_sleep_is_never_missed() {
    loom::model(|| {
        let tail = Arc::new(AtomicU64::new(0));
        let word = Arc::new(AtomicU32::new(0));
        let (t, w) = (tail.clone(), word.clone());
        let writer = thread::spawn(move || {
            t.store(1, Ordering::Release);
            must_wake(&*w)
        });
        let sleeps = announce::<_, ()>(&*word, || Ok(tail.load(Ordering::Acquire) == 0))
            == Ok(Decision::Sleep);
        let woke = writer.join().unwrap();
        assert!(
            !sleeps || woke,
            "reader sleeps on an empty ring and nobody wakes it"
        );
        if !sleeps {
            // It saw the message: the Acquire load synchronised with the Release store.
            assert_eq!(tail.load(Ordering::Relaxed), 1);
        }
    });
}

/// The same for the writer that sleeps on a full ring and the reader that frees a slot, with
/// the reader also announcing a sleep of its own on the other word (both words in flight).
#[test]
fn loom_both_sides_sleeping_never_miss_each_other() {
    loom::model(|| {
        let head = Arc::new(AtomicU64::new(0));
        let tail = Arc::new(AtomicU64::new(1)); // one slot used, capacity 1: full
        let writer_word = Arc::new(AtomicU32::new(0));
        let reader_word = Arc::new(AtomicU32::new(0));
        let (h, ww, rw) = (head.clone(), writer_word.clone(), reader_word.clone());
        let t2 = tail.clone();
        let reader = thread::spawn(move || {
            h.store(1, Ordering::Release); // frees the slot
            let woke_writer = must_wake(&*ww);
            // Then finds the ring empty and wants to sleep.
            let sleeps = announce::<_, ()>(&*rw, || Ok(t2.load(Ordering::Acquire) == 1))
                == Ok(Decision::Sleep);
            (woke_writer, sleeps)
        });
        let writer_sleeps =
            announce::<_, ()>(&*writer_word, || Ok(head.load(Ordering::Acquire) == 0))
                == Ok(Decision::Sleep);
        let woke_reader = if writer_sleeps {
            false
        } else {
            tail.store(2, Ordering::Release);
            must_wake(&*reader_word)
        };
        let (woke_writer, reader_sleeps) = reader.join().unwrap();
        assert!(
            !writer_sleeps || woke_writer,
            "writer sleeps on a freed ring"
        );
        assert!(
            // A writer that slept published nothing; one that published must wake a sleeper.
            !reader_sleeps || writer_sleeps || woke_reader,
            "reader sleeps on a published message"
        );
    });
}
