//! Two processes through a channel: order and backpressure through two buses, a fingerprint
//! mismatch, `kill -9` of either side (noticed in bounded time, reclaimed, replaced by a
//! restarted peer without restarting this side), garbage written into the mapping, and stale
//! channel names. The other side is [`child`], chosen by `LLBUS_IPC_CHILD`.

use std::io::Write as _;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Idle, Message, Out, Setup};
use llbus_ipc::{
    remove_stale, ChannelConfig, OpenError, PeerState, Pod, Receiver, Sender, ShmExport, ShmImport,
};
use tests::example_bins::Running;

use crate::fixtures::Tick;
use crate::{eventually, ready, reexec};

/// The same topic with another shape: what a process built from other sources would send.
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.tick")]
#[repr(C)]
struct TickV2 {
    seq: u64,
    check: u64,
    extra: u64,
}

// SAFETY: `repr(C)` of three u64s.
unsafe impl llbus_ipc::bytemuck::Zeroable for TickV2 {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for TickV2 {}

const CHILD_VAR: &str = "LLBUS_IPC_CHILD";
/// A child never outlives this, whatever the parent does.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

fn config() -> ChannelConfig {
    ChannelConfig {
        capacity: 16,
        ..ChannelConfig::default()
    }
}

fn channel(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

/// Removes a channel's file (and a temporary one) when the test ends, however it ends.
struct FileGuard(PathBuf);

impl Drop for FileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn guard(name: &str) -> FileGuard {
    FileGuard(config().path(name))
}

/// Starts this binary as the other side: `mode` on channel `name`, with `args`.
fn spawn(mode: &str, name: &str, args: &[(&str, String)]) -> Running {
    let mut cmd = reexec("pair::child");
    cmd.env(CHILD_VAR, mode).env("LLBUS_IPC_CHANNEL", name);
    for (k, v) in args {
        cmd.env(k, v);
    }
    Running::spawn(mode, cmd)
}

fn open_reader(name: &str) -> Receiver<Tick, Pod> {
    eventually(Duration::from_secs(10), || {
        Receiver::<Tick, Pod>::open(name, &config()).ok()
    })
    .expect("the exporter's channel never became ready")
}

fn env_u64(key: &str) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// The other process.

/// Not a test on its own: the entry point of the child processes (does nothing without
/// `LLBUS_IPC_CHILD`).
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_VAR) else {
        return;
    };
    let name = std::env::var("LLBUS_IPC_CHANNEL").expect("channel name");
    let deadline = Instant::now() + CHILD_LIFETIME;
    match mode.as_str() {
        "writer" => {
            let mut tx = Sender::<Tick, Pod>::create(&name, &config()).expect("create");
            println!("READY");
            let mut seq = env_u64("START");
            while Instant::now() < deadline {
                if tx.heartbeat(false) == PeerState::Broken {
                    tx.reset().expect("reset");
                }
                match tx.try_send(&Tick::new(seq)) {
                    Ok(true) => seq += 1,
                    Ok(false) | Err(_) => {
                        if tx.park(Duration::from_millis(1)).is_err() {
                            tx.reset().expect("reset");
                        }
                    }
                }
            }
        }
        "writer_v2" => {
            let mut tx = Sender::<TickV2, Pod>::create(&name, &config()).expect("create");
            println!("READY");
            while Instant::now() < deadline {
                tx.heartbeat(false);
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        "reader" => {
            let mut rx = open_reader(&name);
            println!("READY {}", std::process::id());
            let mut said = false;
            while Instant::now() < deadline {
                rx.heartbeat(false);
                let mut first = None;
                rx.recv_batch(64, |t| {
                    first.get_or_insert(t.seq);
                })
                .expect("recv");
                if let (Some(first), false) = (first, said) {
                    println!("GOT first={first}");
                    said = true;
                }
                rx.park(Duration::from_millis(1)).expect("park");
            }
        }
        "export_bus" => export_bus(&name, env_u64("COUNT")),
        other => panic!("unknown child mode {other}"),
    }
}

/// Publishes `count` ticks on a bus whose topic is exported to channel `name`, once the
/// importer is attached, then stops the bus (which drains into the shared ring) and prints
/// the export's counters.
fn export_bus(name: &str, count: u64) {
    struct Source {
        out: Out<Tick>,
        next: u64,
        count: u64,
        connected: llbus_ipc::IpcStatus,
    }
    impl Actor for Source {
        type In = ();
        fn on_message(&mut self, (): (), _: &mut Context<'_>) {}
        fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
            if !self.connected.is_connected() {
                return 0;
            }
            if self.next == self.count {
                ctx.request_stop();
                return 0;
            }
            ctx.publish(self.out, Tick::new(self.next));
            self.next += 1;
            1
        }
    }
    let export = ShmExport::<Tick, Pod>::new(name, &config()).expect("export");
    let status = export.status();
    let mut bus = Bus::builder();
    bus.stop_timeout(Duration::from_secs(20));
    let s = status.clone();
    bus.actor("source", move |setup: &mut Setup<'_>| Source {
        out: setup.output(),
        next: 0,
        count,
        connected: s.clone(),
    })
    .publishes::<Tick>()
    // It polls (for the connection): Park would sleep until a publisher rings, which none does.
    .idle(Idle::Backoff);
    bus.add(export).capacity::<Tick>(16).idle(Idle::Park);
    println!("READY");
    let running = bus.start().expect("start");
    let stop = running.stop_handle();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(CHILD_LIFETIME);
        stop.stop();
    });
    let report = running.join().expect("join");
    drop(watchdog);
    let e = report
        .edge("ipc.tick", "source", &format!("ipc-export-{name}"))
        .map(|e| e.lost);
    println!(
        "EXPORT moved={} dropped={} corrupt={} lost={e:?}",
        status.moved(),
        status.dropped(),
        status.corrupt()
    );
    std::io::stdout().flush().ok();
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// A checking subscriber: counts ticks and counts any out of order; slow for its first ones,
/// so that the rings on both sides fill and the exporter is held back.
struct Check {
    next: u64,
    out_of_order: Arc<AtomicU64>,
    got: Arc<AtomicU64>,
}

impl Actor for Check {
    type In = Tick;
    fn on_message(&mut self, t: Tick, _: &mut Context<'_>) {
        if t.seq != self.next {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        self.next = t.seq + 1;
        if t.seq < 100 {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.got.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn two_buses_keep_order_under_backpressure() {
    const COUNT: u64 = 50_000;
    let name = channel("order");
    let _g = guard(&name);
    let mut child = spawn("export_bus", &name, &[("COUNT", COUNT.to_string())]);
    ready(&mut child);
    // The exporter made its file before READY: the import checks it now.
    let import = ShmImport::<Tick, Pod>::new(&name, &config()).expect("import");
    let status = import.status();
    let (got, out_of_order) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut bus = Bus::builder();
    bus.add(import).idle(Idle::Park);
    let (g, o) = (got.clone(), out_of_order.clone());
    bus.actor("check", move |_: &mut Setup<'_>| Check {
        next: 0,
        out_of_order: o.clone(),
        got: g.clone(),
    })
    .subscribes::<Tick>()
    .capacity::<Tick>(16)
    .idle(Idle::Park);
    let running = bus.start().expect("start");
    let done = eventually(Duration::from_secs(60), || {
        (got.load(Ordering::Relaxed) == COUNT).then_some(())
    });
    running.stop();
    running.join().expect("importing bus");
    let (_, out, err) = child.finish(Duration::from_secs(20));
    assert!(
        done.is_some(),
        "received {} of {COUNT}\nchild:\n{out}\n{err}",
        got.load(Ordering::Relaxed)
    );
    assert_eq!(out_of_order.load(Ordering::Relaxed), 0, "order broken");
    assert_eq!(status.malformed() + status.corrupt(), 0);
    let line = out
        .lines()
        .find(|l| l.contains("EXPORT "))
        .unwrap_or_else(|| panic!("no EXPORT line:\n{out}\n{err}"));
    assert!(
        line.contains(&format!("moved={COUNT} ")) && line.contains("dropped=0 "),
        "{line}"
    );
    // Both sides gone: the file is reclaimed.
    let path = config().path(&name);
    assert!(
        eventually(Duration::from_secs(5), || (!path.exists()).then_some(())).is_some(),
        "{} left behind",
        path.display()
    );
}

#[test]
fn fingerprint_mismatch_is_refused_naming_the_topic() {
    let name = channel("fingerprint");
    let _g = guard(&name);
    let mut child = spawn("writer_v2", &name, &[]);
    ready(&mut child);
    let err = ShmImport::<Tick, Pod>::new(&name, &config()).expect_err("a mismatch");
    assert!(
        matches!(&err, OpenError::Fingerprint { topic, .. } if topic == "ipc.tick"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("'ipc.tick'") && text.contains("schema mismatch"),
        "{text}"
    );
    assert!(matches!(
        Receiver::<Tick, Pod>::open(&name, &config()),
        Err(OpenError::Fingerprint { .. })
    ));
    child.kill();
}

#[test]
fn killed_writer_is_noticed_reclaimed_and_its_restart_reconnects() {
    let name = channel("killwriter");
    let _g = guard(&name);
    let path = config().path(&name);
    let mut writer = spawn("writer", &name, &[]);
    ready(&mut writer);
    let mode = std::fs::metadata(&path).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only file");
    let mut rx = open_reader(&name);
    let mut next = 0;
    let read = |rx: &mut Receiver<Tick, Pod>, next: &mut u64| {
        rx.recv_batch(64, |t| {
            assert_eq!(t.seq, *next, "order");
            *next += 1;
        })
        .expect("recv")
    };
    eventually(Duration::from_secs(10), || {
        read(&mut rx, &mut next);
        (next > 1000).then_some(())
    })
    .expect("ticks from the writer");
    assert!(matches!(rx.heartbeat(true), PeerState::Alive(_)));

    writer.kill(); // SIGKILL, reaped
    let killed = Instant::now();
    let state = eventually(Duration::from_secs(5), || match rx.heartbeat(true) {
        PeerState::Dead(pid) => Some(pid),
        _ => None,
    });
    assert!(state.is_some(), "a killed writer was not noticed");
    assert!(killed.elapsed() < config().stale_after * 2);
    // What it published before it died is still there, in memory nobody can take away.
    read(&mut rx, &mut next);
    drop(rx);
    // Its name is stale (nobody listens): not an error, not used, replaced by the next writer.
    assert!(matches!(
        Receiver::<Tick, Pod>::open(&name, &config()),
        Err(OpenError::NotReady)
    ));

    // A restarted writer; this side reconnects without restarting.
    let mut writer = spawn("writer", &name, &[("START", "1000000".into())]);
    ready(&mut writer);
    let mut rx = open_reader(&name);
    let mut first = None;
    eventually(Duration::from_secs(10), || {
        rx.recv_batch(1, |t| first = Some(t.seq)).expect("recv");
        first
    });
    assert_eq!(first, Some(1_000_000), "the restarted writer's first tick");
    writer.kill();
}

#[test]
fn killed_reader_is_noticed_and_replaced() {
    let name = channel("killreader");
    let _g = guard(&name);
    let mut tx = Sender::<Tick, Pod>::create(&name, &config()).expect("create");
    let mut reader = spawn("reader", &name, &[]);
    let pid: u32 = ready(&mut reader).parse().expect("pid");
    assert!(
        eventually(Duration::from_secs(5), || (tx.heartbeat(true)
            == PeerState::Alive(pid))
        .then_some(()))
        .is_some(),
        "reader never seen alive"
    );
    let mut seq = 0;
    let mut send = |tx: &mut Sender<Tick, Pod>, n: u64| {
        for _ in 0..n {
            if tx.try_send(&Tick::new(seq)).expect("send") {
                seq += 1;
            }
        }
    };
    send(&mut tx, 10);
    reader
        .wait_line(Duration::from_secs(10), |l| l.contains("GOT"))
        .expect("the reader got ticks");
    reader.kill();
    let dead = eventually(Duration::from_secs(5), || match tx.heartbeat(true) {
        PeerState::Dead(p) => Some(p),
        _ => None,
    });
    assert_eq!(dead, Some(pid), "a killed reader was not noticed");
    assert_eq!(
        tx.heartbeat(true),
        PeerState::Absent,
        "its side was not reclaimed"
    );

    // Fill the ring while nobody reads; the new reader resumes where the old one stopped.
    send(&mut tx, 100);
    let mut reader = spawn("reader", &name, &[]);
    let pid2: u32 = ready(&mut reader).parse().expect("pid");
    let got = reader
        .wait_line(Duration::from_secs(10), |l| l.contains("GOT"))
        .expect("the new reader got ticks");
    let first: u64 = got
        .split_once("GOT first=")
        .and_then(|(_, v)| v.trim().parse().ok())
        .expect("seq");
    assert!(first < seq, "resumed at {first}, sent {seq}");
    assert_eq!(tx.heartbeat(true), PeerState::Alive(pid2));
    reader.kill();
}

/// A sink that counts.
struct Sink(Arc<AtomicU64>);

impl Actor for Sink {
    type In = Tick;
    fn on_message(&mut self, _: Tick, _: &mut Context<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn garbage_in_the_mapping_is_counted_and_reconnected() {
    let name = channel("garbage");
    let _g = guard(&name);
    let path = config().path(&name);
    let mut writer = spawn("writer", &name, &[]);
    ready(&mut writer);
    let import = ShmImport::<Tick, Pod>::new(&name, &config()).expect("import");
    let status = import.status();
    let got = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    bus.add(import).idle(Idle::Park);
    let g = got.clone();
    bus.actor("sink", move |_: &mut Setup<'_>| Sink(g.clone()))
        .subscribes::<Tick>()
        .idle(Idle::Park);
    let running = bus.start().expect("start");
    eventually(Duration::from_secs(10), || {
        (got.load(Ordering::Relaxed) > 100).then_some(())
    })
    .expect("ticks through the import");

    // Scribble a tail a ring and more ahead of any head, as a faulty writer would, until the
    // reader notices (the live writer overwrites it with each publish). The memory has no
    // name: reach it through the writer's descriptor, as its owner (or root) can.
    let _ = path;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tests::local::memfd_of(writer.pid()).expect("the writer's channel memory"))
        .expect("open the mapping's memory");
    let noticed = eventually(Duration::from_secs(10), || {
        let _ = file.write_at(&(u64::MAX / 2).to_le_bytes(), 384);
        (status.corrupt() > 0).then_some(())
    });
    assert!(noticed.is_some(), "garbage tail never noticed");
    assert!(status.last_error().is_some_and(|e| e.contains("corrupt")));
    // Reconnects on its own once the writer has overwritten the garbage, and moves again.
    let before = got.load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(10), || (status.connects() >= 2
            && got.load(Ordering::Relaxed) > before + 100)
            .then_some(()))
        .is_some(),
        "no reconnect after corruption: connects={} got={}",
        status.connects(),
        got.load(Ordering::Relaxed)
    );
    running.stop();
    running
        .join()
        .expect("the importing bus ends cleanly (no panic)");
    writer.kill();
}

#[test]
fn stale_files_are_recognised_and_removed() {
    let name = channel("stale");
    let _g = guard(&name);
    let path = config().path(&name);
    let mut writer = spawn("writer", &name, &[]);
    ready(&mut writer);
    // A live writer's file is kept.
    remove_stale(&config().dir, config().stale_after).expect("scan");
    assert!(path.exists(), "a live writer's file was removed");
    // A temporary file of a process that does not exist (beyond any pid_max).
    let tmp = PathBuf::from(format!("{}.tmp.{}", path.display(), u32::MAX / 2));
    let _t = FileGuard(tmp.clone());
    std::fs::write(&tmp, b"left by a dead process").expect("tmp");
    writer.kill();
    let removed = remove_stale(&config().dir, config().stale_after).expect("scan");
    assert!(removed >= 2, "removed {removed}");
    assert!(!path.exists() && !tmp.exists());

    // A writer that finds a dead one's file replaces it; one that finds a live one refuses.
    let mut writer = spawn("writer", &name, &[]);
    ready(&mut writer);
    assert!(matches!(
        Sender::<Tick, Pod>::create(&name, &config()),
        Err(OpenError::InUse { .. })
    ));
    writer.kill();
    let tx = Sender::<Tick, Pod>::create(&name, &config()).expect("replaces the stale file");
    drop(tx);
    assert!(
        !path.exists(),
        "a writer without reader removes its file on drop"
    );
}
