//! What the modules of this binary and of `processes` use: the message, a directory of the
//! test's own, a configuration in it, and a fake writer that answers a reader's connection with
//! whatever a test hands it (a greeting, descriptors, or nothing).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use llbus::Message;
use llbus_ipc::ChannelConfig;

/// A plain-data message whose second word checks the first (`check == !seq`).
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.tick")]
#[repr(C)]
pub struct Tick {
    pub seq: u64,
    pub check: u64,
}

impl Tick {
    pub fn new(seq: u64) -> Tick {
        Tick { seq, check: !seq }
    }
}

// SAFETY: `repr(C)` of two u64s: no padding, no pointers, any bits are a `Tick`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Tick {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Tick {}

/// A 0700 directory of this user for one test, named after this process and `test`; removed
/// when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(test: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("llbus-ipc-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).expect("mkdir");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Channels of 64 slots in `dir`.
pub fn config_in(dir: &Path) -> ChannelConfig {
    ChannelConfig {
        capacity: 64,
        dir: dir.to_path_buf(),
        ..ChannelConfig::default()
    }
}

/// A fake writer of this user, listening at channel `name` in `dir`, that answers one
/// connection with `answer`.
pub fn fake_writer(
    dir: &Path,
    name: &str,
    answer: impl FnOnce(&UnixStream) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(dir.join(format!("llbus-ipc-{name}"))).expect("bind");
    std::thread::spawn(move || {
        if let Some(Ok(s)) = listener.incoming().next() {
            answer(&s);
        }
    })
}

/// Sends `data` on `s` with descriptors `fds` (`SCM_RIGHTS`, one control message; none if
/// `fds` is empty).
pub fn send_fds(s: &UnixStream, data: &[u8], fds: &[i32]) {
    let mut data = data.to_vec();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; 32];
    let bytes = (fds.len() * 4) as u32;
    // SAFETY: an all-zero msghdr is valid; the fields set point at live buffers; the control
    // buffer (256 bytes) holds one header with up to 16 descriptors (asserted).
    unsafe {
        assert!(libc::CMSG_SPACE(bytes) as usize <= std::mem::size_of_val(&control));
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>().add(i), *fd);
            }
        }
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
    }
}

/// A memory file called `name` of `len` bytes, sealed with `seals` (0: none).
pub fn memfd(name: &str, len: i64, seals: i32) -> OwnedFd {
    let name = std::ffi::CString::new(name).expect("name");
    // SAFETY: a valid C string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is ours; ftruncate and fcntl touch no memory of ours.
    unsafe {
        assert_eq!(libc::ftruncate(fd, len), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0, "seal");
        }
        OwnedFd::from_raw_fd(fd)
    }
}
