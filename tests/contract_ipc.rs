//! Two promises of docs/IPC.md no other test keeps: an export with no importer attached fills
//! its ring and then drops, counted, without holding the local bus back; and the default
//! channel directory is `$XDG_RUNTIME_DIR/llbus` when that variable names a directory of this
//! user's, else the per-user directory under `/dev/shm`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, Setup};
use llbus_ipc::{ChannelConfig, Pod, ShmExport};

#[derive(Message, Clone, Copy, Debug)]
#[message(topic = "ipc.contract")]
#[repr(C)]
struct Tick {
    seq: u64,
}

// SAFETY: `repr(C)` of one u64: no padding, no pointers, any bits are a `Tick`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Tick {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Tick {}

/// The tests read and set the environment: they take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A directory of this test's, mode 0700, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("llbus-contract-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("make the directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const COUNT: u64 = 10_000;

/// Publishes `COUNT` ticks, as fast as the edge lets it, then nothing.
struct Source {
    out: Out<Tick>,
    published: Arc<AtomicU64>,
}

impl Actor for Source {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let mut n = 0;
        while n < 64 && self.published.load(Ordering::Relaxed) < COUNT {
            let seq = self.published.load(Ordering::Relaxed);
            ctx.publish(self.out, Tick { seq });
            self.published.store(seq + 1, Ordering::Relaxed);
            n += 1;
        }
        n
    }
}

/// docs/IPC.md "Liveness": "While no importer is attached, the export fills the ring and then
/// drops (counted): an absent process never stalls the local bus."
#[test]
fn an_export_without_an_importer_fills_its_ring_then_drops_and_counts() {
    let _serial = serial();
    let dir = TempDir::new("no-importer");
    let cfg = ChannelConfig {
        dir: dir.0.clone(),
        capacity: 64,
        ..ChannelConfig::default()
    };
    let published = Arc::new(AtomicU64::new(0));
    let mut bus = Bus::builder();
    let p = published.clone();
    bus.actor("source", move |s: &mut Setup<'_>| Source {
        out: s.output(),
        published: p.clone(),
    })
    .publishes::<Tick>();
    let export = ShmExport::<Tick, Pod>::new("no-importer", &cfg).expect("export");
    let status = export.status();
    bus.add(export);
    let bus = bus.start().expect("start");

    // Every message is published (Block edges: a stalled export would stop the source) and
    // accounted for: at most a ring's worth moved into the ring, the rest dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while published.load(Ordering::Relaxed) < COUNT || status.moved() + status.dropped() < COUNT {
        assert!(
            Instant::now() < deadline,
            "the bus stalled without an importer: published {} of {COUNT}, moved {}, dropped {}",
            published.load(Ordering::Relaxed),
            status.moved(),
            status.dropped()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (moved, dropped) = (status.moved(), status.dropped());
    assert!(!status.is_connected());
    assert_eq!(moved + dropped, COUNT, "moved {moved}, dropped {dropped}");
    assert!(
        moved <= 64,
        "moved {moved} into a 64-slot ring nobody reads"
    );
    assert!(dropped >= COUNT - 64, "dropped only {dropped}");
    bus.stop();
    bus.join().expect("the bus stops");
}

/// docs/IPC.md "Where channels meet": `DIR` is by default `$XDG_RUNTIME_DIR/llbus` when that
/// variable names a directory of this user's, else `/dev/shm/llbus-UID`.
#[test]
fn the_default_channel_directory_follows_xdg_runtime_dir_only_when_it_is_ours() {
    let _serial = serial();
    let saved = std::env::var_os("XDG_RUNTIME_DIR");
    let ours = TempDir::new("xdg");
    let writable = TempDir::new("xdg-open");
    std::fs::set_permissions(&writable.0, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    std::env::set_var("XDG_RUNTIME_DIR", &ours.0);
    let with_ours = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", "relative/run");
    let relative = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", ours.0.join("missing"));
    let missing = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", &writable.0);
    let open = ChannelConfig::default().dir;
    match saved {
        Some(v) => std::env::set_var("XDG_RUNTIME_DIR", v),
        None => std::env::remove_var("XDG_RUNTIME_DIR"),
    }

    assert_eq!(with_ours, ours.0.join("llbus"));
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for (what, dir) in [
        ("a relative XDG_RUNTIME_DIR", relative),
        ("a missing XDG_RUNTIME_DIR", missing),
        ("an XDG_RUNTIME_DIR everyone may write", open),
    ] {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(
            dir.parent() == Some(base.as_path()) && name.starts_with(&format!("llbus-{uid}")),
            "{what}: the channel directory is {}",
            dir.display()
        );
    }
}
