//! Where counters files live, how they are made, listed and opened.
//!
//! # Where
//! `DIR/llbus-<bus>-<pid>-<n>.cnc`, where `DIR` is `$LLBUS_COUNTERS_DIR` if set, else the
//! per-user directory `$XDG_RUNTIME_DIR/llbus` (when that variable names a directory of this
//! user's), else `/dev/shm/llbus-<uid>` (the temporary directory where there is no
//! `/dev/shm`); `<n>` tells apart buses of one process. The writer makes the directory mode 0700
//! if it is missing, and uses it only if it is a directory (not a link) of its own that no
//! other user can write: a directory someone else made in its place is reported and the bus
//! runs without a counters file, never writing into it.
//!
//! # Who may read
//! A file is created exclusively (never through an existing name or link), mode 0600: only
//! its user (and root) reads it. `$LLBUS_COUNTERS_GROUP` (a numeric group id) opts in to
//! group-readable files (0640, that group, and the directory 0750).
//!
//! # Reading someone else's file safely
//! A reader (the `llbus` command) opens each file with `O_NOFOLLOW | O_NONBLOCK` (a link is
//! refused, a FIFO cannot block the open) and reads it only if it is a regular file, owned by
//! the owner of its directory, and at most [`MAX_FILE_LEN`](super::MAX_FILE_LEN) bytes.
//!
//! A process that dies leaves its file behind: a snapshot's liveness tells a stale file from a
//! live one, and the next bus started by the same user removes the files of processes that are
//! gone.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::layout::MAX_FILE_LEN;
use super::reader::CountersFileError;

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

pub(crate) fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub(crate) fn process_exists(pid: u64) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// The directory of this user's counters files: `$LLBUS_COUNTERS_DIR`, else
/// `$XDG_RUNTIME_DIR/llbus` (when that variable names a directory of this user's), else
/// `/dev/shm/llbus-<uid>`, else `llbus-<uid>` in the temporary directory.
pub fn counters_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LLBUS_COUNTERS_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR") {
        let xdg = PathBuf::from(xdg);
        if xdg.is_absolute() && check_dir(&xdg, euid()).is_ok() {
            return xdg.join("llbus");
        }
    }
    shm_base().join(format!("llbus-{}", euid()))
}

fn shm_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The group that may read counters files, if the user opted in (`$LLBUS_COUNTERS_GROUP`).
fn reader_group() -> Option<u32> {
    std::env::var("LLBUS_COUNTERS_GROUP")
        .ok()
        .and_then(|g| g.trim().parse().ok())
}

/// Whether `dir` is a directory (not a link) of user `owner` that no other user can write;
/// the text says what is wrong otherwise.
pub(crate) fn check_dir(dir: &Path, owner: u32) -> Result<(), String> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if m.file_type().is_symlink() {
        return Err("it is a symbolic link".to_owned());
    }
    if !m.is_dir() {
        return Err("it is not a directory".to_owned());
    }
    if m.uid() != owner {
        return Err(format!(
            "it belongs to uid {}, not to uid {owner}: someone else made it",
            m.uid()
        ));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "users other than its owner may write it (mode {mode:o})"
        ));
    }
    Ok(())
}

/// Makes `dir` if it is missing (0700, or 0750 and the reader group's when one is set) and
/// checks that it is this user's alone to write.
///
/// # Errors
/// `PermissionDenied` naming what is wrong (a directory someone else made, a link, one
/// others may write), or the error of making it.
pub(crate) fn prepare_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let group = reader_group();
    let mode = if group.is_some() { 0o750 } else { 0o700 };
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {
            if let Some(gid) = group {
                std::os::unix::fs::lchown(dir, None, Some(gid))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
            }
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    check_dir(dir, euid()).map_err(|why| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("counters directory {} refused: {why}", dir.display()),
        )
    })
}

/// Tells apart the counters files of several buses of one process.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// Creates a fresh counters file for bus `bus` of process `pid` in `dir`: exclusively (never
/// through a name or link someone else made), mode 0600 (0640 and the reader group's when one
/// is set).
pub(crate) fn create_file(dir: &Path, bus: &str, pid: u64) -> io::Result<(PathBuf, File)> {
    let safe = file_safe(bus);
    let group = reader_group();
    let mode = if group.is_some() { 0o640 } else { 0o600 };
    loop {
        let n = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("llbus-{safe}-{pid}-{n}.cnc"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => {
                // The umask may have cleared bits of `mode`, never added any: set it exactly.
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
                if let Some(gid) = group {
                    std::os::unix::fs::fchown(&f, None, Some(gid))?;
                }
                return Ok((path, f));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1_000_000 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The owner of the directory that holds `path`, which must be a directory (not a link) that
/// no user but its owner can write: the user every file in it must belong to.
///
/// # Errors
/// [`CountersFileError::Refused`] if the directory is not such a one, `Io` if it cannot be
/// looked at.
pub(crate) fn dir_owner(path: &Path) -> Result<u32, CountersFileError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let m = std::fs::symlink_metadata(dir)?;
    check_dir(dir, m.uid()).map_err(|why| {
        CountersFileError::Refused(format!("its directory {} is unsafe: {why}", dir.display()))
    })?;
    Ok(m.uid())
}

/// Opens `path` for reading without following a link and without blocking, and checks that
/// it is a regular file of user `owner` no larger than [`MAX_FILE_LEN`]; returns it and its
/// length.
///
/// # Errors
/// [`CountersFileError::Refused`] saying what it is instead, or `Io`.
pub(crate) fn open_checked(path: &Path, owner: u32) -> Result<(File, u64), CountersFileError> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(CountersFileError::Refused("a symbolic link".to_owned()))
        }
        Err(e) => return Err(CountersFileError::Io(e)),
    };
    let m = file.metadata()?;
    let kind = m.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(CountersFileError::Refused(what.to_owned()));
    }
    if m.uid() != owner {
        return Err(CountersFileError::Refused(format!(
            "it belongs to uid {}, not to uid {owner} whose directory it is in",
            m.uid()
        )));
    }
    if m.len() > MAX_FILE_LEN {
        return Err(CountersFileError::Refused(format!(
            "{} bytes, larger than any counters file ({MAX_FILE_LEN})",
            m.len()
        )));
    }
    Ok((file, m.len()))
}

/// Whether `name` is a counters file's name (`llbus-*.cnc`).
fn is_counters_name(name: &str) -> bool {
    name.starts_with("llbus-") && name.ends_with(".cnc")
}

/// Every counters file (`llbus-*.cnc`) in [`counters_dir`], live or stale, sorted by name.
///
/// # Errors
/// If the directory cannot be read.
pub fn counters_files() -> io::Result<Vec<PathBuf>> {
    files_in(&counters_dir())
}

fn files_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_counters_name)
        })
        .collect();
    files.sort();
    Ok(files)
}

/// A counters file and the user it must belong to (its directory's owner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountersLocation {
    /// The file.
    pub path: PathBuf,
    /// The user whose directory holds it: the file must be theirs.
    pub owner: u32,
}

/// Every counters file this process can see: those in [`counters_dir`] and, unless
/// `$LLBUS_COUNTERS_DIR` is set, those in the other users' per-user directories it may read
/// (`/dev/shm/llbus-<uid>`: root sees every user's buses). Returns them sorted, and one line
/// for each directory skipped because it cannot be trusted (a directory named for a user but
/// made by another, a link, one others may write): what a squatter left, reported, never read.
pub fn find_counters_files() -> (Vec<CountersLocation>, Vec<String>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut dirs: Vec<(PathBuf, u32)> = vec![(counters_dir(), euid())];
    if std::env::var_os("LLBUS_COUNTERS_DIR").is_none() {
        if let Ok(entries) = std::fs::read_dir(shm_base()) {
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name();
                let Some(uid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("llbus-"))
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                let path = e.path();
                if !dirs.iter().any(|(d, _)| *d == path) {
                    dirs.push((path, uid));
                }
            }
        }
    }
    for (dir, owner) in dirs {
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            _ => {}
        }
        if let Err(why) = check_dir(&dir, owner) {
            skipped.push(format!(
                "skipped the counters directory {} of uid {owner}: {why}",
                dir.display()
            ));
            continue;
        }
        match files_in(&dir) {
            Ok(files) => found.extend(
                files
                    .into_iter()
                    .map(|path| CountersLocation { path, owner }),
            ),
            // Another user's directory we may not read: not ours to see.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
            Err(e) => skipped.push(format!(
                "cannot list the counters directory {}: {e}",
                dir.display()
            )),
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    (found, skipped)
}

/// The writer's process id in a counters file's name (`llbus-<bus>-<pid>-<n>.cnc`).
pub(crate) fn pid_in_name(name: &str) -> Option<u64> {
    let stem = name.strip_prefix("llbus-")?.strip_suffix(".cnc")?;
    let mut parts = stem.rsplitn(3, '-');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

/// Removes the counters files in `dir` left by processes that are gone (on Linux, where that
/// can be told from `/proc`): a crashed bus's file does not outlive the next bus started by
/// the same user. Only this user's regular files are touched.
pub(crate) fn prune_stale(dir: &Path) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = euid();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(pid_in_name) else {
            continue;
        };
        let ours = std::fs::symlink_metadata(e.path())
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if ours && !process_exists(pid) && std::fs::remove_file(e.path()).is_ok() {
            log::info!("removed the stale counters file {}", e.path().display());
        }
    }
}

/// Keeps what may go into a file name: ASCII letters, digits, `_`, `-`, `.`.
pub(crate) fn file_safe(name: &str) -> String {
    let s: String = super::writer::cut(name, 48)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "bus".to_owned()
    } else {
        s
    }
}
