//! Handing a channel's memory file to its reader: the writer listens on a Unix socket at the
//! channel's name; a reader connects, both check who the other is (`SO_PEERCRED`, filled in by
//! the kernel: it cannot be forged), and the writer sends the memory file's descriptor
//! (`SCM_RIGHTS`) after an 8-byte greeting.
//!
//! The writer's side is a thread of its own ([`Listener`]) that sleeps in `poll` on the
//! listening socket and a wake-up socket; it answers each connection at once, so a reader can
//! attach whatever the writer is doing, and it makes no system call on the writer's hot path.
//! A connection from a user the channel does not admit ([`Access`]) is closed unanswered and
//! counted. A listening socket left by a writer that died refuses connections
//! (`ECONNREFUSED`): that is how a stale name is told from a live one.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::file::{self, cvt, FileId};

/// The greeting before the descriptor: "llbusFD" and the handover's version.
const GREETING: [u8; 8] = *b"llbusFD\x01";

/// The kernel's word on the process at the other end of a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// Who may be at the other end of a channel: this user, the users named, and members of the
/// group named (by their primary group, which is what the kernel reports).
#[derive(Clone, Debug)]
pub(crate) struct Access {
    pub(crate) me: u32,
    pub(crate) uids: Vec<u32>,
    pub(crate) group: Option<u32>,
}

impl Access {
    pub(crate) fn admits(&self, p: &Peer) -> bool {
        p.uid == self.me || self.uids.contains(&p.uid) || self.group == Some(p.gid)
    }
}

/// The credentials of the process at the other end of `fd`.
#[cfg(target_os = "linux")]
pub(crate) fn peer(fd: BorrowedFd<'_>) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the sizes given; `fd` is open.
    cvt(|| unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(Peer {
        pid: u32::try_from(cred.pid).unwrap_or(0),
        uid: cred.uid,
        gid: cred.gid,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn peer(_: BorrowedFd<'_>) -> io::Result<Peer> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "peer credentials are read on Linux only",
    ))
}

/// Room for a control message of up to 4 descriptors (more than one is refused, but must be
/// received to be closed), as u64s for its alignment.
const CONTROL_WORDS: usize = 16;

/// Sends the greeting and `fd` on `stream`.
fn send_fd(stream: &UnixStream, fd: RawFd) -> io::Result<()> {
    let mut data = GREETING;
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; CONTROL_WORDS];
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` has a control buffer of `space` bytes (< its 128), so the first header
    // exists and its data holds one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return Err(io::Error::other("no room for the descriptor"));
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` points at live buffers for the call; MSG_NOSIGNAL: a reader that left
    // gives EPIPE, not SIGPIPE.
    let n = cvt(|| unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) })?;
    if n as usize != GREETING.len() {
        return Err(io::Error::other("short send"));
    }
    Ok(())
}

/// Why no descriptor came.
#[derive(Debug)]
pub(crate) enum HandoverError {
    /// The writer closed the connection, sent something else, or nothing in time.
    Garbage(&'static str),
    /// The OS refused a call.
    Io(io::Error),
}

/// Receives the greeting and exactly one descriptor on `stream` (whose read timeout bounds the
/// wait).
fn recv_fd(stream: &UnixStream) -> Result<OwnedFd, HandoverError> {
    let mut data = [0u8; 16];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; CONTROL_WORDS];
    // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at live buffers of the sizes it states; received descriptors are
    // close-on-exec.
    let n = match cvt(|| unsafe {
        libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC)
    }) {
        Ok(n) => n as usize,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Err(HandoverError::Garbage("the writer sent nothing in time"))
        }
        Err(e) => return Err(HandoverError::Io(e)),
    };
    // Take ownership of every descriptor received first, so that all of them are closed
    // whatever is wrong with the message.
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR/NXTHDR stay inside
    // `msg_controllen`, and each SCM_RIGHTS header's data holds `(len - CMSG_LEN(0)) / 4`
    // descriptors that are now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 {
        return Err(HandoverError::Garbage(
            "the writer closed the connection without handing over the channel",
        ));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(HandoverError::Garbage("too many descriptors"));
    }
    if n != GREETING.len() || data[..8] != GREETING {
        return Err(HandoverError::Garbage("not a channel handover"));
    }
    if fds.len() != 1 {
        return Err(HandoverError::Garbage("not exactly one descriptor"));
    }
    fds.pop()
        .ok_or(HandoverError::Garbage("not exactly one descriptor"))
}

/// Why a reader could not fetch a channel's memory file.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// Nobody listens at the name (no socket, or one left by a writer that died).
    NotThere,
    /// The listener is not a process this channel admits.
    Foreign(Peer),
    /// The listener answered with something else than one descriptor.
    Handover(HandoverError),
    /// The OS refused a call.
    Io(io::Error),
}

/// Connects to the writer listening at `path`, checks it is admitted, and receives its memory
/// file, waiting at most `timeout` for it. Returns the descriptor and who sent it.
pub(crate) fn fetch(
    path: &Path,
    access: &Access,
    timeout: Duration,
) -> Result<(OwnedFd, Peer), FetchError> {
    let stream =
        match connect_within(path, timeout) {
            Ok(Connect::Connected(s)) => s,
            Ok(Connect::Refused) => return Err(FetchError::NotThere),
            Ok(Connect::Unanswered) => return Err(FetchError::Handover(HandoverError::Garbage(
                "the writer did not accept the connection in time (stopped, or not a llbus writer)",
            ))),
            Err(e) => return Err(FetchError::Io(e)),
        };
    // The credentials the listener had when it called `listen`, from the kernel.
    let who = {
        use std::os::fd::AsFd;
        peer(stream.as_fd()).map_err(FetchError::Io)?
    };
    if !access.admits(&who) {
        return Err(FetchError::Foreign(who));
    }
    stream
        .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .map_err(FetchError::Io)?;
    let fd = recv_fd(&stream).map_err(FetchError::Handover)?;
    Ok((fd, who))
}

/// What is at a socket's name, as a connection finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A process listens and took the connection: who.
    Live(Peer),
    /// Nobody listens (no socket, or one left by a process that died).
    Gone,
    /// A listener whose queue stayed full for the whole wait: a stopped process, or one that
    /// never accepts. Alive, but who it is cannot be told.
    Unanswered,
}

/// What is listening at `path`, waiting at most [`HANDOVER_TIMEOUT`] for it to take the
/// connection.
pub(crate) fn probe(path: &Path) -> io::Result<Probe> {
    match connect_within(path, HANDOVER_TIMEOUT)? {
        Connect::Connected(s) => {
            use std::os::fd::AsFd;
            peer(s.as_fd()).map(Probe::Live)
        }
        Connect::Refused => Ok(Probe::Gone),
        Connect::Unanswered => Ok(Probe::Unanswered),
    }
}

/// The longest a reader waits for a writer to hand over its memory, and a probe for a
/// listener to take its connection.
pub(crate) const HANDOVER_TIMEOUT: Duration = Duration::from_millis(250);

/// How a connection attempt ended.
#[derive(Debug)]
enum Connect {
    Connected(UnixStream),
    /// No socket at the name, or nobody listens on it.
    Refused,
    /// The listener's queue stayed full until the time limit.
    Unanswered,
}

/// Connects to the Unix socket at `path`, waiting at most `timeout` for room in the listener's
/// queue. `UnixStream::connect` waits without limit when the queue is full (a listener that is
/// stopped, or never accepts); a non-blocking connect cannot be polled for either (on a Unix
/// socket it fails with `EAGAIN` instead of starting), so the wait is bounded by the socket's
/// send timeout, which the kernel applies to a Unix stream's connect.
fn connect_within(path: &Path, timeout: Duration) -> io::Result<Connect> {
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long, or holds a NUL byte",
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket call; the result is checked.
    let raw =
        cvt(|| unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let limit = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: limit.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: limit.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval of the size given; `fd` is open.
    cvt(|| unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_un holding a NUL-terminated path within `len`.
    let rc = cvt(|| unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    });
    match rc {
        Ok(_) => Ok(Connect::Connected(UnixStream::from(fd))),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(Connect::Refused)
        }
        // The send timeout ran out with the listener's queue still full.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Connect::Unanswered),
        Err(e) => Err(e),
    }
}

/// What the listener thread shares with its owner.
#[derive(Debug)]
struct Shared {
    /// The memory file handed to each admitted reader (replaced on a channel reset).
    region: Mutex<OwnedFd>,
    /// Connections refused because of who made them.
    refused: AtomicU64,
}

/// The writer's listening socket at a channel's name and the thread that answers it. Dropping
/// it stops the thread and unlinks the name (if it still names our socket).
#[derive(Debug)]
pub(crate) struct Listener {
    path: PathBuf,
    id: Option<FileId>,
    shared: Arc<Shared>,
    /// Dropped to wake the thread for good.
    wake: Option<UnixStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// Binds `path` (which must not exist), sets its mode (and group), and starts answering
    /// admitted readers with `region`.
    ///
    /// # Errors
    /// `AddrInUse` if the name was taken meanwhile; any error of the calls made.
    pub(crate) fn bind(
        path: &Path,
        mode: u32,
        group: Option<u32>,
        access: Access,
        region: OwnedFd,
    ) -> io::Result<Listener> {
        let listener = UnixListener::bind(path)?;
        let id = file::id_of(path);
        let cleanup = |e: io::Error| {
            if let Some(id) = id {
                file::unlink_if(path, id);
            }
            e
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(cleanup)?;
        if let Some(gid) = group {
            std::os::unix::fs::lchown(path, None, Some(gid)).map_err(cleanup)?;
        }
        listener.set_nonblocking(true).map_err(cleanup)?;
        let (wake, woken) = UnixStream::pair().map_err(cleanup)?;
        let shared = Arc::new(Shared {
            region: Mutex::new(region),
            refused: AtomicU64::new(0),
        });
        let name = path.display().to_string();
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("llbus-ipc-listen".to_owned())
            .spawn(move || serve(&listener, &woken, &access, &s, &name))
            .map_err(cleanup)?;
        Ok(Listener {
            path: path.to_path_buf(),
            id,
            shared,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// Hands `region` to readers from now on.
    pub(crate) fn replace(&self, region: OwnedFd) {
        let mut g = match self.shared.region.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = region;
    }

    /// Connections refused so far because of who made them.
    pub(crate) fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Unlink first: a reader that connects from now on is refused, not left waiting.
        if let Some(id) = self.id {
            file::unlink_if(&self.path, id);
        }
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The listener thread: answers connections until `woken` reports its peer gone.
fn serve(listener: &UnixListener, woken: &UnixStream, access: &Access, s: &Shared, name: &str) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: woken.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            log::error!(
                "llbus-ipc: {name}: poll failed: {}; no more readers can attach",
                io::Error::last_os_error()
            );
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("llbus-ipc: {name}: accept failed: {e}");
                    break;
                }
            };
            answer(stream, access, s, name);
        }
    }
}

/// Answers one connection: the memory file if its maker is admitted, nothing otherwise.
fn answer(stream: UnixStream, access: &Access, s: &Shared, name: &str) {
    use std::os::fd::AsFd;
    let who = match peer(stream.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("llbus-ipc: {name}: cannot tell who connected ({e}): refused");
            return;
        }
    };
    if !access.admits(&who) {
        if s.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            log::warn!(
                "llbus-ipc: {name}: refused a reader of uid {} (pid {}): not this user, nor a user or group the channel admits",
                who.uid, who.pid
            );
        }
        return;
    }
    // Bounded: a reader that does not read cannot hold the thread.
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let g = match s.region.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if let Err(e) = send_fd(&stream, g.as_raw_fd()) {
        log::debug!("llbus-ipc: {name}: handover to pid {} failed: {e}", who.pid);
    }
}
