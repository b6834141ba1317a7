//! `Ring` and `SlotRing` on one thread: what a push and a pop cost in instructions alone, with
//! no cross-core traffic (docs/PERFORMANCE.md uses it beside the `ring` suite, whose cross-core
//! figures swing with the host). Each step pushes 64 `u64`s (one at a time, or one
//! `push_slice`) into a ring of 1024, then pops them (`try_pop`, or one `pop_batch`) and checks
//! their order; prints M msgs/s of each ring over 200 ms, the two alternating, five times.
//!
//! `cargo run --release -p benches --example one_thread_ring -- [batch]`
use std::hint::black_box;
use std::time::{Duration, Instant};

const PER: u64 = 64;
const WINDOW: Duration = Duration::from_millis(200);

/// The two rings behind one face.
trait Ends {
    fn push(&mut self, v: u64) -> bool;
    fn push_slice(&mut self, items: &[u64]) -> usize;
    fn pop(&mut self) -> Option<u64>;
    fn pop_batch(&mut self, max: usize, f: impl FnMut(u64)) -> usize;
}

impl Ends for (llbus::Producer<u64>, llbus::Consumer<u64>) {
    #[inline(never)]
    fn push(&mut self, v: u64) -> bool {
        self.0.try_push(v).is_ok()
    }
    #[inline(never)]
    fn push_slice(&mut self, items: &[u64]) -> usize {
        self.0.push_slice(items)
    }
    #[inline(never)]
    fn pop(&mut self) -> Option<u64> {
        self.1.try_pop()
    }
    #[inline(never)]
    fn pop_batch(&mut self, max: usize, f: impl FnMut(u64)) -> usize {
        self.1.pop_batch(max, f)
    }
}

impl Ends for (llbus::SlotProducer<u64>, llbus::SlotConsumer<u64>) {
    #[inline(never)]
    fn push(&mut self, v: u64) -> bool {
        self.0.try_push(v).is_ok()
    }
    #[inline(never)]
    fn push_slice(&mut self, items: &[u64]) -> usize {
        self.0.push_slice(items)
    }
    #[inline(never)]
    fn pop(&mut self) -> Option<u64> {
        self.1.try_pop()
    }
    #[inline(never)]
    fn pop_batch(&mut self, max: usize, f: impl FnMut(u64)) -> usize {
        self.1.pop_batch(max, f)
    }
}

/// M msgs/s through `ends` over [`WINDOW`].
fn run(mut ends: impl Ends, batch: bool) -> f64 {
    let mut next = 0u64;
    let mut expected = 0u64;
    let mut buf = [0u64; PER as usize];
    let start = Instant::now();
    while start.elapsed() < WINDOW {
        for _ in 0..64 {
            if batch {
                buf.iter_mut().zip(next..).for_each(|(b, v)| *b = v);
                assert_eq!(ends.push_slice(black_box(&buf)), PER as usize);
                let n = ends.pop_batch(PER as usize, |v| {
                    assert_eq!(v, expected);
                    expected += 1;
                });
                assert_eq!(n, PER as usize);
            } else {
                for v in next..next + PER {
                    assert!(ends.push(black_box(v)));
                }
                for _ in 0..PER {
                    assert_eq!(ends.pop(), Some(expected));
                    expected += 1;
                }
            }
            next += PER;
        }
    }
    next as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let batch = std::env::args().nth(1).as_deref() == Some("batch");
    for _ in 0..5 {
        let ring = run(llbus::Ring::new(1024), batch);
        let slotted = run(llbus::SlotRing::new(1024), batch);
        println!(
            "Ring {ring:8.1}  SlotRing {slotted:8.1}  ratio {:.3}",
            slotted / ring
        );
    }
}
