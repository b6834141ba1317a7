//! A feed and its sinks sharing one thread: what the bus's publish and handling cost in
//! instructions alone, with no cross-core traffic (docs/PERFORMANCE.md uses it beside the `bus`
//! suite, whose cross-core figures swing with the host). One group on core 1, `BusySpin`: the
//! feed publishes 64 items per poll (`publish`, or one `publish_slice` with `batch`), each sink
//! takes them (the runner's budget is 64 per ring); prints the first sink's M msgs/s over
//! 300 ms after 50 ms of warm-up.
//!
//! `cargo run --release -p benches --example one_thread_fanout -- SUBSCRIBERS [batch]`
use llbus::{Actor, Bus, Context, Idle, Out, Setup};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(llbus::Message, Clone, Copy, Debug)]
#[message(topic = "micro.seq")]
struct Seq(u64);

const PER: u64 = 64;
struct Feeder {
    out: Out<Seq>,
    next: u64,
    batch: bool,
    stop: Arc<AtomicU64>,
}
impl Actor for Feeder {
    type In = ();
    fn on_message(&mut self, (): (), _: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.stop.load(Ordering::Relaxed) != 0 {
            return 0;
        }
        if self.batch {
            let b: [Seq; PER as usize] = std::array::from_fn(|i| Seq(self.next + i as u64));
            ctx.publish_slice(self.out, &b);
            self.next += PER;
            return PER as usize;
        }
        for v in self.next..self.next + PER {
            ctx.publish(self.out, Seq(v));
        }
        self.next += PER;
        PER as usize
    }
}
struct Sink {
    expected: u64,
    count: Arc<AtomicU64>,
}
impl Actor for Sink {
    type In = Seq;
    fn on_message(&mut self, Seq(v): Seq, _: &mut Context<'_>) {
        assert_eq!(v, self.expected);
        self.expected += 1;
        if self.expected % 256 == 0 {
            self.count.store(self.expected, Ordering::Relaxed);
        }
    }
}
fn run(subs: usize, batch: bool) -> f64 {
    let stop = Arc::new(AtomicU64::new(0));
    let counts: Vec<Arc<AtomicU64>> = (0..subs).map(|_| Arc::default()).collect();
    let mut bus = Bus::builder();
    let st = stop.clone();
    bus.actor("feed", move |s: &mut Setup<'_>| Feeder {
        out: s.output(),
        next: 0,
        batch,
        stop: st.clone(),
    })
    .publishes::<Seq>()
    .never_waits()
    .group("g");
    for (i, c) in counts.iter().enumerate() {
        let c = c.clone();
        bus.actor(&format!("s{i}"), move |_: &mut Setup<'_>| Sink {
            expected: 0,
            count: c.clone(),
        })
        .subscribes::<Seq>()
        .group("g");
    }
    bus.group("g").idle(Idle::BusySpin).on_core(1);
    let running = bus.start().expect("the bus starts");
    std::thread::sleep(Duration::from_millis(50));
    let (t0, n0) = (Instant::now(), counts[0].load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(300));
    let (t1, n1) = (Instant::now(), counts[0].load(Ordering::Relaxed));
    stop.store(1, Ordering::Relaxed);
    running.stop();
    let _ = running.join();
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64() / 1e6
}
fn main() {
    let arg: Vec<String> = std::env::args().collect();
    let subs: usize = arg.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let batch = arg.get(2).map(|s| s == "batch").unwrap_or(false);
    println!("{:.2}", run(subs, batch));
}
