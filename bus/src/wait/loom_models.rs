//! Loom model of the real [`Park`] strategy's arm-poll-sleep handshake with several producers
//! ringing one doorbell. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p llbus --release --lib loom`.

use loom::thread;

use super::{IdleStrategy, Park};
use crate::ring::Ring;

/// Two producers push one value each into their own ring; one consumer polls both rings and
/// idles with the real `Park` (under loom its spin phase is skipped: it arms at once). A lost
/// wake-up would leave the consumer asleep forever, which loom reports as a deadlock.
#[test]
fn loom_park_with_two_producers_ringing_one_doorbell() {
    loom::model(|| {
        let mut park = Park::new();
        let bell = park.doorbell().expect("park has a doorbell");
        let (mut tx1, mut rx1) = Ring::new(1);
        let (mut tx2, mut rx2) = Ring::new(1);
        tx1.notify_on_push(Some(bell.clone() as _));
        tx2.notify_on_push(Some(bell as _));
        let p1 = thread::spawn(move || {
            tx1.try_push(1usize).unwrap();
            tx1
        });
        let p2 = thread::spawn(move || {
            tx2.try_push(2usize).unwrap();
            tx2
        });
        let mut got = Vec::new();
        while got.len() < 2 {
            let mut work = 0;
            for rx in [&mut rx1, &mut rx2] {
                if let Some(v) = rx.try_pop() {
                    got.push(v);
                    work += 1;
                }
            }
            park.idle(work);
        }
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        drop((p1.join().unwrap(), p2.join().unwrap()));
    });
}
