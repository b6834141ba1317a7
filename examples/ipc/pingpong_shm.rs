//! `pingpong --transport shm`: ping on this process's bus, pong on the bus of a second
//! process (this binary run again with `--shm-echo BASE`), joined by llbus-ipc channels in
//! this user's channel directory (`BASE-ping`, `BASE-pong`; bincode slots, since `Ping`/`Pong`
//! are serde types).
//! Each process runs its actor and both ends of the channels on one thread (a group pinned
//! to core 0, resp. 1, when the machine has two), as the UDP transport does.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Idle, Setup};
use llbus_ipc::{Bincode, ChannelConfig, ShmExport, ShmImport};

use super::{pinger, Outcome, Ping, Pong, Ponger};

/// The hidden argument that makes this binary the echo process.
pub const ECHO_ARG: &str = "--shm-echo";

/// The echo process never outlives this.
const LIFETIME: Duration = Duration::from_secs(600);

fn import_of<T: llbus::Message + Clone + serde::Serialize + serde::de::DeserializeOwned>(
    channel: &str,
    idle: Idle,
) -> Result<ShmImport<T, Bincode>, llbus_ipc::OpenError> {
    let import = ShmImport::<T, Bincode>::new(channel, &ChannelConfig::default())?;
    // Park: sleep on the mapping's futex (the other process wakes it) rather than on the
    // bus's doorbell, which no local publisher rings.
    Ok(match idle {
        Idle::Park => import.park_on_futex(Duration::from_millis(1)),
        _ => import,
    })
}

/// Spin and backoff: the import shares the group's thread. Park: a thread of its own that
/// sleeps on the mapping's futex in `poll` (a group thread that sleeps there would delay the
/// group's other actors; one that sleeps on the bus's doorbell would not hear the other
/// process), idling with Backoff between polls.
fn place_import<A: llbus::Actor>(import: llbus::ActorBuilder<'_, A>, group: &str, idle: Idle) {
    match idle {
        Idle::Park => {
            import.idle(Idle::Backoff);
        }
        _ => {
            import.group(group);
        }
    }
}

fn idle_name(idle: Idle) -> &'static str {
    match idle {
        Idle::BusySpin => "spin",
        Idle::Park => "park",
        _ => "backoff",
    }
}

/// Runs the echo side if the arguments ask for it; returns `None` otherwise.
pub fn echo_if_asked() -> Option<Result<(), Box<dyn std::error::Error>>> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == ECHO_ARG)?;
    let base = args.get(at + 1)?.clone();
    let idle = match args.get(at + 2).map(String::as_str) {
        Some("spin") => Idle::BusySpin,
        Some("park") => Idle::Park,
        _ => Idle::Backoff,
    };
    Some(echo(&base, idle))
}

fn echo(base: &str, idle: Idle) -> Result<(), Box<dyn std::error::Error>> {
    let export =
        ShmExport::<Pong, Bincode>::new(&format!("{base}-pong"), &ChannelConfig::default())?;
    let import = import_of::<Ping>(&format!("{base}-ping"), idle)?;
    let status = import.status();
    let mut b = Bus::builder();
    let group = b.group("host-b").idle(idle);
    if llbus::online_cores() >= 2 {
        group.on_core(1);
    }
    b.actor("pong", |s: &mut Setup<'_>| Ponger { out: s.output() })
        .group("host-b")
        .subscribes::<Ping>()
        .backpressure::<Ping>(Backpressure::DropNewest)
        .publishes::<Pong>();
    place_import(b.add(import), "host-b", idle);
    b.add(export)
        .group("host-b")
        .backpressure::<Pong>(Backpressure::DropNewest);
    let running = b.start()?;
    // Ends when the pinger's process leaves (or dies), or after LIFETIME.
    let started = Instant::now();
    // (`connects` counts every attach, so a run shorter than one sleep is not missed.)
    let finished = || status.connects() > 0 && !status.is_connected();
    while started.elapsed() < LIFETIME && !finished() {
        std::thread::sleep(Duration::from_millis(10));
    }
    running.stop();
    running.join()?;
    Ok(())
}

/// Kills the echo process if it is still there when dropped, and reclaims its channel file
/// (which a killed exporter cannot remove itself).
struct Child(std::process::Child, std::path::PathBuf);

impl Drop for Child {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.1);
    }
}

/// Ping here, pong in a second process.
pub fn run(
    idle: Idle,
    count: u64,
    result: &Arc<Mutex<Option<Outcome>>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let base = format!("pingpong-{}", std::process::id());
    let export =
        ShmExport::<Ping, Bincode>::new(&format!("{base}-ping"), &ChannelConfig::default())?;
    let _echo = Child(
        Command::new(std::env::current_exe()?)
            .args([ECHO_ARG, &base, idle_name(idle)])
            .stdin(Stdio::null())
            .spawn()?,
        ChannelConfig::default().path(&format!("{base}-pong")),
    );
    let import = import_of::<Pong>(&format!("{base}-pong"), idle)?;
    let mut a = Bus::builder();
    let group = a.group("host-a").idle(idle);
    if llbus::online_cores() >= 2 {
        group.on_core(0);
    }
    a.actor("ping", pinger(count, result))
        .group("host-a")
        .tick_every(Duration::from_millis(10))
        .subscribes::<Pong>()
        .backpressure::<Pong>(Backpressure::DropNewest)
        .publishes::<Ping>();
    a.add(export)
        .group("host-a")
        .backpressure::<Ping>(Backpressure::DropNewest);
    place_import(a.add(import), "host-a", idle);
    a.start()?.join()?;
    Ok(())
}
