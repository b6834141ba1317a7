//! After construction, the ring allocates nothing: a million single pushes and pops, batches,
//! the latest-value slot, and a doorbell ring, counted by a global allocator.

use llbus::{Doorbell, Latest, Ring};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[test]
fn a_million_pushes_and_pops_allocate_nothing() {
    let (mut tx, mut rx) = Ring::<u64>::new(1024);
    let (mut latest_tx, mut latest_rx) = Latest::<u64>::new();
    let bell = std::sync::Arc::new(Doorbell::new());
    tx.notify_on_push(Some(bell.clone() as _));
    let batch: Vec<u64> = (0..64).collect();
    let mut sum = 0u64;

    // Counted on this thread only: the ring runs entirely on it.
    let before = ALLOC.thread_allocations();
    for i in 0..1_000_000u64 {
        tx.try_push(i).expect("room for one");
        sum = sum.wrapping_add(rx.try_pop().expect("one to pop"));
        latest_tx.write(i);
        if let Some(v) = latest_rx.read() {
            sum = sum.wrapping_add(v);
        }
    }
    for _ in 0..10_000 {
        assert_eq!(tx.push_slice(&batch), 64);
        assert_eq!(rx.pop_batch(64, |v| sum = sum.wrapping_add(v)), 64);
    }
    let after = ALLOC.thread_allocations();

    assert_eq!(after - before, 0, "the ring allocated on its hot path");
    assert!(sum > 0);
}
