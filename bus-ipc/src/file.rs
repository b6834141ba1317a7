//! What a channel is made of outside the mapping: the per-user directory it meets in, and the
//! sealed memory file it shares.
//!
//! # The region: a sealed memory file
//! A channel's bytes live in an anonymous memory file (`memfd_create`), sized once, its pages
//! allocated up front (`fallocate`, so that a full machine fails the creation and not a later
//! page fault), then sealed with `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`: from then on no
//! process, root included, can change its size, so no page of a mapping of it can ever vanish
//! and no access to one can raise `SIGBUS`. It has no name in any directory: a peer receives
//! its descriptor over the channel's socket (`rendezvous`) and checks the seals before it maps
//! anything ([`adopt`]); a descriptor without them, or of anything but an ordinary (tmpfs)
//! memory file of a channel's size, is refused: a huge-page memory file takes the same seals,
//! but a page punched out of it may find the huge-page pool empty at the next touch (`SIGBUS`).
//!
//! # The directory: only the owner writes it
//! A channel's socket is `DIR/llbus-ipc-NAME`. The default directory is `llbus` in
//! `$XDG_RUNTIME_DIR` (made by the login manager for this user alone), else `/dev/shm/llbus-UID`
//! (made mode 0700; the next `llbus-UID-N`, then `$HOME/.llbus`, when someone else has taken
//! it). Before use, a directory must be a directory (not a link), owned by this
//! user, and writable by nobody else (by its group only when it is the channel's group), or it
//! is refused naming what is wrong: a directory made by someone else in its place is reported,
//! never used.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::layout::{HEADER_LEN, MAX_LEN};
use crate::region::Region;

/// Which file a path named when we made it, to unlink only that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

/// A libc return value: negative on failure.
pub(crate) trait Ret: Copy {
    fn failed(self) -> bool;
}

impl Ret for i32 {
    fn failed(self) -> bool {
        self < 0
    }
}

impl Ret for isize {
    fn failed(self) -> bool {
        self < 0
    }
}

/// Retries a libc call on EINTR; returns its result or the OS error.
pub(crate) fn cvt<T: Ret>(mut f: impl FnMut() -> T) -> io::Result<T> {
    loop {
        let rc = f();
        if !rc.failed() {
            return Ok(rc);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// How many `/dev/shm/llbus-UID-N` alternatives are tried when the first name is taken by
/// someone else.
const ALTERNATIVES: usize = 8;

/// The default directory of channels: `$XDG_RUNTIME_DIR/llbus` when that variable names an
/// absolute directory of ours, else `/dev/shm/llbus-UID` (the temporary directory where there
/// is no `/dev/shm`). If that name is taken by a directory we must not use (another user's, a
/// link, one others may write), it is reported and the next of `llbus-UID-1`, `llbus-UID-2`,
/// ... that is missing or ours is used instead, and when someone has taken all of them,
/// `$HOME/.llbus` (a directory nobody else can make, since only this user writes the home
/// directory; it is on disk, but it only holds the sockets: the memory is never in a file). A
/// squatter is never used and cannot keep the channel from being made.
pub(crate) fn default_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR") {
        let xdg = PathBuf::from(xdg);
        if xdg.is_absolute() && check_dir(&xdg, None).is_ok() {
            return xdg.join("llbus");
        }
    }
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let first = base.join(format!("llbus-{}", euid()));
    for n in 0..ALTERNATIVES {
        let candidate = if n == 0 {
            first.clone()
        } else {
            base.join(format!("llbus-{}-{n}", euid()))
        };
        match check_dir(&candidate, None) {
            Ok(()) => return candidate,
            Err(_) if std::fs::symlink_metadata(&candidate).is_err() => return candidate,
            Err(why) => log::warn!(
                "llbus-ipc: not using {} as the channel directory: {why}",
                candidate.display()
            ),
        }
    }
    match home_dir() {
        Ok(dir) => {
            log::warn!(
                "llbus-ipc: every /dev/shm name of this user's is taken by someone else: channels are made in {}",
                dir.display()
            );
            dir
        }
        Err(why) => {
            log::error!("llbus-ipc: no channel directory of this user's is left: {why}");
            first
        }
    }
}

/// `$HOME/.llbus`, when `$HOME` names an absolute directory of this user's that nobody else
/// can write (so nobody else can have made `.llbus` in it).
fn home_dir() -> Result<PathBuf, String> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| "$HOME is not set to an absolute path".to_owned())?;
    check_dir(&home, None).map_err(|why| format!("not using $HOME ({}): {why}", home.display()))?;
    Ok(home.join(".llbus"))
}

/// Why a directory is not one a channel may meet in: the text says what is wrong with it.
pub(crate) fn check_dir(dir: &Path, group: Option<u32>) -> Result<(), String> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if m.file_type().is_symlink() {
        return Err("it is a symbolic link".to_owned());
    }
    if !m.is_dir() {
        return Err("it is not a directory".to_owned());
    }
    let me = euid();
    // A directory shared with the channel's group may be another member's: the group is
    // trusted with the channel by configuration.
    let shared = group.is_some_and(|g| g == m.gid());
    if m.uid() != me && !shared {
        return Err(format!(
            "it belongs to uid {}, not to this user ({me}): someone else made it; remove it or choose another directory",
            m.uid()
        ));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o002 != 0 {
        return Err(format!(
            "every user may write it (mode {mode:o}): use a directory only its owner can write"
        ));
    }
    if mode & 0o020 != 0 && group != Some(m.gid()) {
        return Err(format!(
            "its group {} may write it (mode {mode:o}) but is not the channel's group",
            m.gid()
        ));
    }
    Ok(())
}

/// Makes `dir` (mode 0700) if it is missing and `create`, then checks it ([`check_dir`]).
/// `Ok(false)` when it is missing and not made.
pub(crate) fn prepare_dir(dir: &Path, create: bool, group: Option<u32>) -> Result<bool, String> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !create {
                return Ok(false);
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("cannot make it: {e}")),
            }
        }
        Err(e) => return Err(e.to_string()),
    }
    check_dir(dir, group).map(|()| true)
}

/// The identity of the file `path` names now, if any (links are not followed).
pub(crate) fn id_of(path: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(path).ok().map(|m| FileId {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Unlinks `path` if it still names file `id`. Returns whether it did.
pub(crate) fn unlink_if(path: &Path, id: FileId) -> bool {
    id_of(path) == Some(id) && std::fs::remove_file(path).is_ok()
}

/// The seals every channel's memory file carries.
#[cfg(target_os = "linux")]
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

fn map(fd: &OwnedFd, len: usize) -> io::Result<Arc<Region>> {
    // SAFETY: a fresh shared read-write mapping of `len` bytes of an open file; the kernel
    // picks the address. The result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let Some(p) = std::ptr::NonNull::new(p.cast::<u8>()) else {
        return Err(io::Error::other("mmap returned null"));
    };
    // SAFETY: `p` is a page-aligned MAP_SHARED mapping of exactly `len` bytes that we own.
    Ok(Arc::new(unsafe { Region::from_mapping(p, len) }))
}

/// Makes a zeroed memory file of `len` bytes, allocates its pages, seals its size, and maps
/// it. `name` shows in `/proc/PID/fd` (`memfd:NAME`).
#[cfg(target_os = "linux")]
pub(crate) fn create_region(name: &str, len: usize) -> io::Result<(OwnedFd, Arc<Region>)> {
    let cname = std::ffi::CString::new(format!("llbus-ipc-{name}"))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name holds a NUL byte"))?;
    // SAFETY: a valid C string; the call returns a new descriptor or -1.
    let raw = cvt(|| unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let off = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
    // SAFETY: `fd` is open; the length is bounded by MAX_LEN.
    cvt(|| unsafe { libc::ftruncate(fd.as_raw_fd(), off) })?;
    // SAFETY: as above; allocates the pages now, so that running out of memory is an error
    // here and not a signal at a later page fault.
    cvt(|| unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, off) })?;
    // SAFETY: `fd` is open; adding seals touches no memory of ours.
    cvt(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) })?;
    let region = map(&fd, len)?;
    Ok((fd, region))
}

/// Shared memory that cannot be sealed is not offered off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn create_region(_: &str, _: usize) -> io::Result<(OwnedFd, Arc<Region>)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "llbus-ipc needs sealed memory files (memfd_create), which only Linux has",
    ))
}

/// Why a descriptor a peer handed over was refused.
#[derive(Debug)]
pub(crate) enum AdoptError {
    /// It is not a memory file sealed against shrinking and growing.
    Unsealed,
    /// Its size is not a channel's, or it is not a regular file.
    Shape(String),
    /// The OS refused a call.
    Io(io::Error),
}

/// Checks a descriptor a peer handed over (a memory file, sealed against shrinking and
/// growing, of ordinary shared memory, of a channel's size) and maps it.
#[cfg(target_os = "linux")]
pub(crate) fn adopt(fd: &OwnedFd) -> Result<Arc<Region>, AdoptError> {
    // SAFETY: `fd` is open; F_GET_SEALS reads no memory of ours. A descriptor that is not a
    // memory file fails with EINVAL: unsealed.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if seals < 0 || seals & need != need {
        return Err(AdoptError::Unsealed);
    }
    check_shmem(fd)?;
    // SAFETY: zeroed `stat` is a valid out-buffer; `fd` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    cvt(|| unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }).map_err(AdoptError::Io)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(AdoptError::Shape("not a regular memory file".to_owned()));
    }
    let size = st.st_size as u64;
    if size < HEADER_LEN as u64 || size > MAX_LEN {
        return Err(AdoptError::Shape(format!(
            "{size} bytes is not a channel's size"
        )));
    }
    map(fd, size as usize).map_err(AdoptError::Io)
}

/// `f_type` of ordinary shared memory (`shmem`, which `memfd_create` files live on).
#[cfg(target_os = "linux")]
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Checks that `fd` is a file of ordinary shared memory (tmpfs/shmem), whose pages were
/// allocated at creation and come from the page cache. A huge-page memory file
/// (`MFD_HUGETLB`) takes the same seals but draws on the huge-page pool: a hole punched in it
/// after we map it, with the pool drained, gives the next touch no page and the kernel sends
/// `SIGBUS`. Any other file system is refused the same way.
#[cfg(target_os = "linux")]
pub(crate) fn check_shmem(fd: &OwnedFd) -> Result<(), AdoptError> {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer of the right type; `fd` is open.
    cvt(|| unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) }).map_err(AdoptError::Io)?;
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between libcs
    let kind = st.f_type as i64;
    if kind != TMPFS_MAGIC {
        return Err(AdoptError::Shape(format!(
            "not ordinary shared memory (file system type {kind:#x}, not tmpfs): a huge-page memory file or a file on disk is refused"
        )));
    }
    Ok(())
}

/// See the Linux version: nothing is adopted elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) fn adopt(_: &OwnedFd) -> Result<Arc<Region>, AdoptError> {
    Err(AdoptError::Unsealed)
}
