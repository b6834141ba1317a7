//! SECURITY.md, "Local processes and users": counters files are 0600 in a per-user directory,
//! and readable by a group only if the bus's user opted in with `LLBUS_COUNTERS_GROUP`
//! (0640, that group). One test: it sets the process's environment.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use llbus::{Backpressure, Bus};
use tests::cli::CountersDir;
use tests::local::{is_root, nobody};

#[derive(Clone, Debug)]
struct Num(u64);
tests::message!(Num, "contract.counters.num");

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
