//! A binary of its own because a counting global allocator is its fixture: the shared ring's
//! steady state allocates nothing (a channel's send, receive, heartbeat and park, and two buses
//! joined by `ShmExport`/`ShmImport` with messages flowing, on the type's default topic and on
//! named topics, one of them remapped). The tests take turns, so that no other test allocates
//! meanwhile.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, Setup, Topic};
use llbus_ipc::{topic_channel, ChannelConfig, Pod, Receiver, Sender, ShmExport, ShmImport};
use tests::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "ipc.alloc")]
#[repr(C)]
struct Quote {
    seq: u64,
    px: u64,
}

// SAFETY: `repr(C)` of two u64s: no padding, no pointers, any bits are a `Quote`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Quote {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Quote {}

struct FileGuard(std::path::PathBuf);

impl Drop for FileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The allocation counter is global: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn name(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

#[test]
fn channel_send_and_receive_allocate_nothing() {
    let _serial = serial();
    let name = name("alloc-channel");
    let cfg = ChannelConfig {
        capacity: 64,
        ..ChannelConfig::default()
    };
    let _g = FileGuard(cfg.path(&name));
    let mut tx = Sender::<Quote, Pod>::create(&name, &cfg).expect("create");
    let mut rx = Receiver::<Quote, Pod>::open(&name, &cfg).expect("open");
    let mut sum = 0u64;
    let mut round = |tx: &mut Sender<Quote, Pod>, rx: &mut Receiver<Quote, Pod>, n: u64| {
        for seq in 0..n {
            assert!(tx.try_send(&Quote { seq, px: seq }).expect("send"));
            if seq % 64 == 31 {
                rx.recv_batch(64, |q| sum = sum.wrapping_add(q.px))
                    .expect("recv");
            } else if seq % 64 == 63 {
                // The plain-data batch paths: a slice in, values straight from the slots out.
                let more = [Quote { seq, px: seq }; 4];
                assert_eq!(tx.send_slice(&more).expect("send_slice"), 4);
                let n = rx
                    .recv_each(64, |q| sum = sum.wrapping_add(q.px))
                    .expect("recv_each");
                assert_eq!(n, 36);
                tx.heartbeat(true);
                rx.heartbeat(true);
            }
        }
        rx.recv_batch(64, |q| sum = sum.wrapping_add(q.px))
            .expect("recv");
        rx.park(Duration::from_micros(1)).expect("park");
    };
    round(&mut tx, &mut rx, 1_000); // warm-up
    let before = ALLOC.thread_allocations();
    round(&mut tx, &mut rx, 100_000);
    let after = ALLOC.thread_allocations();
    assert_eq!(after - before, 0, "the channel allocated in steady state");
    assert!(sum > 0);
}

struct Source {
    n: u64,
    out: Out<Quote>,
}

impl Actor for Source {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        for _ in 0..16 {
            self.n += 1;
            ctx.publish(self.out, Quote { seq: self.n, px: 1 });
        }
        16
    }
}

struct Sink(Arc<AtomicU64>);

impl Actor for Sink {
    type In = Quote;
    fn on_message(&mut self, q: Quote, _ctx: &mut Context<'_>) {
        self.0.fetch_add(q.px, Ordering::Relaxed);
    }
}

fn wait_until(handled: &AtomicU64, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled.load(Ordering::Relaxed) < at_least {
        assert!(
            Instant::now() < deadline,
            "no progress through the shared ring"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn export_and_import_allocate_nothing_while_messages_flow() {
    let _serial = serial();
    let name = name("alloc-bus");
    let cfg = ChannelConfig::default();
    let _g = FileGuard(cfg.path(&name));
    let handled = Arc::new(AtomicU64::new(0));

    let mut a = Bus::builder();
    a.actor("source", |s: &mut Setup<'_>| Source {
        n: 0,
        out: s.output(),
    })
    .publishes::<Quote>();
    // Threads of their own: a `Block` edge within one thread is refused by llbus.
    let export = ShmExport::<Quote, Pod>::new(&name, &cfg).expect("export");
    let es = export.status();
    a.add(export);

    let mut b = Bus::builder();
    let import = ShmImport::<Quote, Pod>::new(&name, &cfg).expect("import");
    let is = import.status();
    b.add(import);
    let h = handled.clone();
    b.actor("sink", move |_: &mut Setup<'_>| Sink(h.clone()))
        .subscribes::<Quote>();

    let b = b.start().expect("import bus");
    let a = a.start().expect("export bus");
    wait_until(&handled, 20_000); // warm-up: connected, every loop run many times
    let before = ALLOC.allocations();
    let from = handled.load(Ordering::Relaxed);
    wait_until(&handled, from + 200_000);
    let after = ALLOC.allocations();
    // The exporting bus first, while the import still reads: its stop drains into the ring.
    a.stop();
    a.join().expect("export bus stops");
    b.stop();
    b.join().expect("import bus stops");
    let show = |s: &llbus_ipc::IpcStatus| {
        format!(
            "connects={} corrupt={} deaths={} dropped={} error={:?}",
            s.connects(),
            s.corrupt(),
            s.peer_deaths(),
            s.dropped(),
            s.last_error()
        )
    };
    assert_eq!(
        after - before,
        0,
        "the export or import allocated in steady state\nexport: {}\nimport: {}",
        show(&es),
        show(&is)
    );
}

/// Publishes on two named topics of one type, in turns.
struct TwoSources {
    n: u64,
    outs: [Out<Quote>; 2],
}

impl Actor for TwoSources {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        for _ in 0..16 {
            self.n += 1;
            let out = self.outs[(self.n % 2) as usize];
            ctx.publish(out, Quote { seq: self.n, px: 1 });
        }
        16
    }
}

#[test]
fn named_export_and_import_allocate_nothing_while_messages_flow() {
    let _serial = serial();
    let cfg = ChannelConfig::default();
    let topic = |n: &str| Topic::<Quote>::named(&name(n)).expect("a topic name");
    // The exporting bus runs `a` as `site2`; the importing bus names `site2` and `b`.
    let (a_topic, site2, b_topic) = (topic("alloc-a"), topic("alloc-site2"), topic("alloc-b"));
    let _g = [&site2, &b_topic].map(|t| FileGuard(cfg.path(&topic_channel(t.name()))));
    let handled = Arc::new(AtomicU64::new(0));

    let mut a = Bus::builder();
    a.remap(a_topic.name().as_str(), site2.name().as_str());
    let outs = (a_topic.clone(), b_topic.clone());
    a.actor("source", move |s: &mut Setup<'_>| TwoSources {
        n: 0,
        outs: [s.output_on(&outs.0), s.output_on(&outs.1)],
    })
    .publishes_to(&a_topic)
    .publishes_to(&b_topic);
    let exports = [
        ShmExport::<Quote, Pod>::on(&a_topic, &cfg),
        ShmExport::<Quote, Pod>::on(&b_topic, &cfg),
    ];
    let es: Vec<_> = exports.iter().map(ShmExport::status).collect();
    for e in exports {
        a.add(e);
    }

    let mut b = Bus::builder();
    let imports = [
        ShmImport::<Quote, Pod>::on(&site2, &cfg),
        ShmImport::<Quote, Pod>::on(&b_topic, &cfg),
    ];
    let is: Vec<_> = imports.iter().map(ShmImport::status).collect();
    for i in imports {
        b.add(i);
    }
    let h = handled.clone();
    b.actor("sink", move |_: &mut Setup<'_>| Sink(h.clone()))
        .subscribes_to(&site2)
        .subscribes_to(&b_topic);

    let b = b.start().expect("import bus");
    let a = a.start().expect("export bus");
    wait_until(&handled, 20_000); // warm-up: connected, every loop run many times
    let before = ALLOC.allocations();
    let from = handled.load(Ordering::Relaxed);
    wait_until(&handled, from + 200_000);
    let after = ALLOC.allocations();
    a.stop();
    a.join().expect("export bus stops");
    b.stop();
    b.join().expect("import bus stops");
    // Both topics flowed, each through its own channel.
    for s in is.iter().chain(&es) {
        assert!(
            s.moved() > 10_000,
            "moved {}: {:?}",
            s.moved(),
            s.last_error()
        );
        assert_eq!(s.last_error(), None);
    }
    assert_eq!(
        after - before,
        0,
        "a named export or import allocated in steady state"
    );
}
