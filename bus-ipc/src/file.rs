//! Channel files: created owner-only (or group-readable for a chosen group), sized, mapped
//! shared, published under their final name by `rename`, and unlinked only while the name
//! still points at the file we mean (device and inode compared).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::layout::{HEADER_LEN, MAX_LEN};
use crate::region::Region;

/// Which file a mapping came from, to unlink only that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

/// Retries a libc call on EINTR; returns its result or the OS error.
fn cvt(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let rc = f();
        if rc >= 0 {
            return Ok(rc);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe { libc::close(self.0) };
    }
}

fn fstat_id(fd: &Fd) -> io::Result<(FileId, u64, u32)> {
    // SAFETY: zeroed `stat` is a valid out-buffer; `fd` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    cvt(|| unsafe { libc::fstat(fd.0, &mut st) })?;
    Ok((
        FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        },
        st.st_size as u64,
        st.st_uid,
    ))
}

fn map(fd: &Fd, len: usize) -> io::Result<Arc<Region>> {
    // SAFETY: a fresh shared read-write mapping of `len` bytes of an open file; the kernel
    // picks the address. The result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let Some(p) = NonNull::new(p.cast::<u8>()) else {
        return Err(io::Error::other("mmap returned null"));
    };
    // SAFETY: `p` is a page-aligned MAP_SHARED mapping of exactly `len` bytes that we own.
    Ok(Arc::new(unsafe { Region::from_mapping(p, len) }))
}

/// Creates `path` afresh holding a zeroed mapping of `len` bytes: written under a temporary
/// name (`O_EXCL`, `mode`, then `group` if any), then renamed over `path`, so that nobody ever
/// opens a file of the wrong size or one whose header `init` has not written yet. Returns what
/// `init` made of the mapping, and the file's identity.
pub(crate) fn create<X, E: From<io::Error>>(
    path: &Path,
    len: usize,
    mode: u32,
    group: Option<u32>,
    init: impl FnOnce(Arc<Region>) -> Result<X, E>,
) -> Result<(X, FileId), E> {
    let tmp = tmp_name(path, std::process::id());
    let ctmp = cpath(&tmp)?;
    // SAFETY: a valid C string; the flags create a new file or fail.
    let fd = Fd(cvt(|| unsafe {
        libc::open(
            ctmp.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })
    .or_else(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            // Our own leftover (a crash between open and rename): remove and retry once.
            let _ = std::fs::remove_file(&tmp);
            // SAFETY: as above.
            cvt(|| unsafe {
                libc::open(
                    ctmp.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    mode as libc::c_uint,
                )
            })
        } else {
            Err(e)
        }
    })?);
    let result = (|| {
        // The umask may have cleared bits of `mode`; set exactly what was asked.
        // SAFETY: `fd` is open.
        cvt(|| unsafe { libc::fchmod(fd.0, mode as libc::mode_t) })?;
        if let Some(gid) = group {
            // SAFETY: `fd` is open; uid -1 keeps the owner.
            cvt(|| unsafe { libc::fchown(fd.0, u32::MAX, gid) })?;
        }
        // SAFETY: `fd` is open; the length is bounded by MAX_LEN.
        cvt(|| unsafe { libc::ftruncate(fd.0, len as libc::off_t) })?;
        let (id, _, _) = fstat_id(&fd)?;
        let made = init(map(&fd, len)?)?;
        std::fs::rename(&tmp, path)?;
        Ok((made, id))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Opens and maps an existing channel file, refusing sizes outside the layout's bounds and
/// files owned by another user (unless we are root).
pub(crate) fn open(path: &Path) -> io::Result<(Arc<Region>, FileId)> {
    let c = cpath(path)?;
    // SAFETY: a valid C string; opening an existing file.
    let fd = Fd(cvt(|| unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    })?);
    let (id, size, uid) = fstat_id(&fd)?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if uid != me && me != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to uid {uid}, not to us ({me})", path.display()),
        ));
    }
    if size < HEADER_LEN as u64 || size > MAX_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} has {size} bytes: not a channel", path.display()),
        ));
    }
    let region = map(&fd, size as usize)?;
    Ok((region, id))
}

/// The identity of the file `path` names now, if any.
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

/// The temporary name `path` is written under by process `pid`.
pub(crate) fn tmp_name(path: &Path, pid: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".tmp.{pid}"));
    PathBuf::from(s)
}
