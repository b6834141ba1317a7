//! Finding buses: the counters files on this host, and the one a command names. Every file is
//! read as untrusted input (`llbus::read_counters_file_of`: never a link, a FIFO, another
//! user's file or an oversized one); what cannot be read is reported once, on stderr, and
//! skipped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use llbus::CountersSnapshot;

use crate::text;

/// One counters file and what it says.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    /// The user the file belongs to (its directory's owner).
    pub(crate) owner: u32,
    pub(crate) snapshot: Option<CountersSnapshot>,
    /// Why it could not be read, if it could not.
    pub(crate) error: Option<String>,
    pub(crate) live: bool,
}

/// Reads the file at `path` (which must belong to `owner`), with the error as text.
pub(crate) fn read(path: &Path, owner: u32) -> Result<CountersSnapshot, String> {
    llbus::read_counters_file_of(path, owner).map_err(|e| format!("{}: {e}", text::path(path)))
}

/// How long all the files one scan reads may be retried in all while their writers are in the
/// middle of a write: past it, each file is read once, so any number of files forever
/// mid-write (planted, or another user's) cannot stall `llbus list`. A genuine writer is out
/// of a write within microseconds, so this is spent only on files that never are.
const SCAN_RETRY: Duration = Duration::from_millis(250);

/// The most bytes of counters files one scan reads: a bus's file is a few kilobytes, so this
/// is only ever reached by files planted to be read (any number of them, each up to
/// [`llbus::MAX_FILE_LEN`]); past it the rest are skipped with one warning. This user's own
/// files are read first, so another user's cannot push them out.
const SCAN_BYTES: u64 = 64 << 20;

/// Every counters file on this host that this user may see (root: every user's). Directories
/// and files that are not what they should be are skipped with one warning each.
pub(crate) fn all() -> Result<Vec<Found>, String> {
    let (mut files, skipped) = llbus::find_counters_files();
    for s in skipped {
        eprintln!("llbus: warning: {}", text::clean(&s));
    }
    let me = llbus_euid();
    files.sort_by_key(|loc| loc.owner != me);
    let deadline = Instant::now() + SCAN_RETRY;
    let mut budget = SCAN_BYTES;
    let mut over_budget = 0usize;
    let mut found = Vec::new();
    for loc in files {
        // What reading it costs: nothing if it is too large to be read at all.
        let len = std::fs::symlink_metadata(&loc.path)
            .map(|m| m.len())
            .unwrap_or(0);
        let cost = if len > llbus::MAX_FILE_LEN { 0 } else { len };
        if cost > budget {
            over_budget += 1;
            continue;
        }
        budget -= cost;
        match llbus::read_counters_file_until(&loc.path, loc.owner, deadline) {
            Ok(s) => found.push(Found {
                path: loc.path,
                owner: loc.owner,
                live: s.is_live(),
                snapshot: Some(s),
                error: None,
            }),
            Err(e @ llbus::CountersFileError::Refused(_)) => {
                eprintln!(
                    "llbus: warning: skipped {}: {}",
                    text::path(&loc.path),
                    text::clean(&e.to_string())
                );
            }
            Err(e) => found.push(Found {
                path: loc.path,
                owner: loc.owner,
                snapshot: None,
                error: Some(e.to_string()),
                live: false,
            }),
        }
    }
    if over_budget > 0 {
        eprintln!(
            "llbus: warning: skipped {over_budget} counters files: this scan already read {} MiB of them",
            SCAN_BYTES >> 20
        );
    }
    Ok(found)
}

/// The bus `which` names (a counters file, a name or a process id), or the only live bus.
/// Buses of this user come first: another user's bus of the same name never shadows one's own.
pub(crate) fn one(which: Option<&str>) -> Result<Found, String> {
    if let Some(w) = which {
        let p = Path::new(w);
        if w.contains('/') || p.is_file() {
            let s = llbus::read_counters_file(p).map_err(|e| format!("{}: {e}", text::path(p)))?;
            return Ok(Found {
                path: p.to_path_buf(),
                owner: s.owner,
                live: s.is_live(),
                snapshot: Some(s),
                error: None,
            });
        }
    }
    let live: Vec<Found> = all()?.into_iter().filter(|f| f.live).collect();
    let names = |v: &[Found]| -> String {
        v.iter()
            .filter_map(|f| {
                f.snapshot.as_ref().map(|s| {
                    format!(
                        "{} (pid {}, user {})",
                        text::clean(&s.bus),
                        s.pid,
                        text::user(f.owner)
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let me = llbus_euid();
    let mut matching: Vec<Found> = match which {
        None => live,
        Some(w) => {
            let all_live = names(&live);
            let m: Vec<Found> = live
                .into_iter()
                .filter(|f| {
                    f.snapshot
                        .as_ref()
                        .is_some_and(|s| s.bus == w || s.pid.to_string() == w)
                        || f.path.file_stem().and_then(|s| s.to_str()) == Some(w)
                })
                .collect();
            if m.is_empty() {
                return Err(format!(
                    "no running bus is called '{}' or has that process id; running: {}",
                    text::clean(w),
                    if all_live.is_empty() {
                        "none".to_owned()
                    } else {
                        all_live
                    }
                ));
            }
            m
        }
    };
    if matching.iter().any(|f| f.owner == me) {
        matching.retain(|f| f.owner == me);
    }
    match matching.len() {
        0 => Err(format!(
            "no llbus bus is running on this host (no live counters file in {})",
            text::path(&llbus::counters_dir())
        )),
        1 => Ok(matching.remove(0)),
        _ => Err(format!(
            "{} buses match: name one by its process id or counters file: {}",
            matching.len(),
            names(&matching)
        )),
    }
}

/// This process's effective user id.
fn llbus_euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user: no unsafe call needed.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}
