//! Helpers for the tests of what other local processes and users can do: a second,
//! unprivileged user to run a child as, and a process's channel memory in `/proc`.

use std::path::PathBuf;

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Whether the tests run as root (the scenarios with a second user need it).
pub fn is_root() -> bool {
    euid() == 0
}

/// Whether a scenario that needs root (a second user) can run: true as root; otherwise it is
/// skipped with a notice, except under CI (`CI=true`), where a skip would hide a gap and fails.
///
/// # Panics
/// Under CI without root.
pub fn root_or_skip(what: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} needs root (a second user), and CI must run it"
    );
    eprintln!("\n!!!!! SKIPPED: {what} needs root (a second user) !!!!!\n");
    false
}

/// The unprivileged user `nobody` (uid, gid), from `/etc/passwd`, else 65534.
pub fn nobody() -> (u32, u32) {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                if f.first() == Some(&"nobody") && f.len() > 3 {
                    Some((f[2].parse().ok()?, f[3].parse().ok()?))
                } else {
                    None
                }
            })
        })
        .unwrap_or((65534, 65534))
}

/// Where process `pid` holds a llbus-ipc channel's memory: `/proc/PID/fd/N` for the first
/// descriptor that is a `memfd:llbus-ipc-...` file.
pub fn memfd_of(pid: u32) -> Option<PathBuf> {
    memfds_of(pid).into_iter().next()
}

/// Every llbus-ipc channel memory process `pid` holds, as `/proc/PID/fd/N` paths.
pub fn memfds_of(pid: u32) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            std::fs::read_link(p)
                .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:llbus-ipc-"))
        })
        .collect();
    found.sort();
    found
}

/// Every llbus-ipc channel memory mapped by process `pid` (from `/proc/PID/maps`), as
/// `/proc/PID/map_files/START-END` paths: reachable even after its descriptor is closed.
pub fn mapped_memfds_of(pid: u32) -> Vec<PathBuf> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    maps.lines()
        .filter(|l| l.contains("/memfd:llbus-ipc-"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|range| PathBuf::from(format!("/proc/{pid}/map_files/{range}")))
        .collect()
}

/// A version-1 counters file (the layout documented on `llbus::COUNTERS_VERSION`) that looks
/// live (this process's pid, a heartbeat of now), with the bus, topic and actor names given
/// (hostile ones, say: the readers must escape what they print).
pub fn crafted_counters_file(bus: &str, topic: &str, actor: &str) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut b = vec![0u8; 128];
    b[..8].copy_from_slice(&llbus::COUNTERS_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&128u32.to_le_bytes());
    b[16..24].copy_from_slice(&2u64.to_le_bytes());
    b[24..32].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    b[32..40].copy_from_slice(&(now - 1_000_000_000).to_le_bytes());
    b[40..48].copy_from_slice(&now.to_le_bytes());
    b[48..56].copy_from_slice(&100_000_000u64.to_le_bytes());
    b[56..60].copy_from_slice(&2u32.to_le_bytes());
    b[60..64].copy_from_slice(&256u32.to_le_bytes());
    b[64..64 + bus.len()].copy_from_slice(bus.as_bytes());
    let record = |type_id: u32, values: &[u64], label: &[&str]| {
        let mut r = vec![0u8; 256];
        r[..4].copy_from_slice(&type_id.to_le_bytes());
        r[4..8].copy_from_slice(&(values.len() as u32).to_le_bytes());
        for (i, v) in values.iter().enumerate() {
            r[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let l = label.join("\0");
        r[128..128 + l.len()].copy_from_slice(l.as_bytes());
        r
    };
    b.extend(record(
        llbus::RECORD_EDGE,
        &[5, 5, 0, 0, 0, 0, 0, 0, 1],
        &[topic, actor, "sink", "Block"],
    ));
    b.extend(record(llbus::RECORD_ACTOR, &[5, 1, 1, 0, 0], &[actor, "t"]));
    b
}
