//! A binary of its own: its tests set the process's environment (`LLBUS_COUNTERS_DIR`,
//! `LLBUS_COUNTERS_GROUP`), which every bus of the process reads when it starts. They take
//! [`ENV`] for their whole run, so no two change it at once.
//!
//! - SECURITY.md, "Local processes and users": counters files are 0600 in a per-user
//!   directory, and readable by a group only if the bus's user opted in with
//!   `LLBUS_COUNTERS_GROUP` (0640, that group).
//! - README "Live counters": the counters file is "read by other processes under a sequence
//!   lock, so every snapshot balances". A bus whose figures change all the time (a publisher
//!   and a reader on threads of their own) is read from its file over and over: every edge of
//!   every snapshot read balances, and the snapshots move.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use llbus::{read_counters_file, Backpressure, Bus};
use tests::cli::CountersDir;
use tests::local::{is_root, nobody};

/// Held by each test while it sets and relies on the environment.
static ENV: Mutex<()> = Mutex::new(());

/// Takes [`ENV`] (also after another test panicked holding it).
fn env_lock() -> MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Clone, Debug)]
struct Num(u64);
tests::message!(Num, "contract.counters.num");

#[derive(Clone, Debug)]
struct Count(u64);
tests::message!(Count, "contract.counters.live");

/// Starts a bus, returns its counters file's (mode, gid), and joins it.
fn file_of_a_bus(name: &str) -> (u32, u32) {
    let mut bus = Bus::builder();
    bus.name(name);
    let feed = bus.publisher::<Num>("feed");
    let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 8);
    let mut running = bus.start().expect("start");
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    running.publisher(feed).unwrap().publish(Num(1)).unwrap();
    let got = running
        .subscription(tap)
        .unwrap()
        .try_recv()
        .expect("the message");
    assert_eq!(got.0, 1);
    let meta = std::fs::metadata(&path).expect("the counters file");
    running.stop();
    running.join().expect("join");
    assert!(!path.exists(), "the file outlived the bus");
    (meta.permissions().mode() & 0o7777, meta.gid())
}

#[test]
fn counters_files_are_owner_only_unless_a_group_is_opted_in() {
    let _env = env_lock();
    let dir = CountersDir::new("contract-group");
    std::env::set_var("LLBUS_COUNTERS_DIR", dir.path());

    std::env::remove_var("LLBUS_COUNTERS_GROUP");
    let (mode, _) = file_of_a_bus("owner-only");
    assert_eq!(mode, 0o600, "without opting in: mode {mode:o}");

    // A group of ours (root may hand the file to any group, so it takes another one).
    let gid = if is_root() {
        nobody().1
    } else {
        // SAFETY: getegid cannot fail.
        unsafe { libc::getegid() }
    };
    std::env::set_var("LLBUS_COUNTERS_GROUP", gid.to_string());
    let (mode, file_gid) = file_of_a_bus("group-readable");
    std::env::remove_var("LLBUS_COUNTERS_GROUP");
    assert_eq!(mode, 0o640, "opted in: mode {mode:o}");
    assert_eq!(file_gid, gid, "opted in: the file's group");
}

#[test]
fn every_snapshot_read_from_a_busy_bus_s_file_balances() {
    let _env = env_lock();
    let dir = CountersDir::new("contract-live");
    std::env::set_var("LLBUS_COUNTERS_DIR", dir.path());
    let mut bus = Bus::builder();
    bus.name("live");
    let feed = bus.publisher::<Count>("feed");
    let tap = bus.subscription_with::<Count>("tap", Backpressure::DropNewest, 64);
    let mut running = bus.start().expect("start");
    let path = running
        .counters_path()
        .expect("a counters file")
        .to_path_buf();
    let mut feed = running.publisher(feed).unwrap();
    let mut tap = running.subscription(tap).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let publisher = std::thread::spawn(move || {
        let mut i = 0;
        while !d.load(Ordering::Relaxed) {
            let _ = feed.publish(Count(i));
            i += 1;
        }
    });
    let d = done.clone();
    let reader = std::thread::spawn(move || {
        let mut sum = 0u64;
        while !d.load(Ordering::Relaxed) {
            if let Ok(n) = tap.try_recv() {
                sum = sum.wrapping_add(n.0);
            }
        }
        sum
    });

    let mut generations = BTreeSet::new();
    let mut published = BTreeSet::new();
    let mut reads = 0u64;
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        // A read that meets the writer mid-write retries or fails cleanly; one that returns
        // must be whole.
        if let Ok(s) = read_counters_file(&path) {
            reads += 1;
            generations.insert(s.generation);
            for e in &s.edges {
                let out = e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight;
                assert_eq!(
                    e.published, out,
                    "a torn snapshot (generation {}): {e:?}",
                    s.generation
                );
                published.insert(e.published);
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    reader.join().unwrap();
    running.stop();
    running.join().expect("join");
    assert!(reads > 100, "only {reads} whole reads in 1.5 s");
    assert!(
        generations.len() >= 5 && published.len() >= 5,
        "the file did not move: {} generations, {} published figures",
        generations.len(),
        published.len()
    );
}
