//! TUN devices made inside a namespace: the ioctl that names one, and writing a packet to it.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::error::io_err;
use super::{NetnsError, IFNAME};

/// `struct ifreq` as TUNSETIFF reads it: a name and the flags (the rest of the union unused).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// On the current thread: enter the namespace at `ns_path`, then open a TUN device `IFNAME`.
pub(super) fn open_tun_in(ns_path: &str) -> Result<OwnedFd, NetnsError> {
    let ns = fs::File::open(ns_path).map_err(io_err(format!("cannot open {ns_path}")))?;
    // SAFETY: `ns` is an open namespace file; setns affects only this (throwaway) thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(NetnsError::Io {
            what: format!("setns into {ns_path}"),
            source: io::Error::last_os_error(),
        });
    }
    let path = c"/dev/net/tun";
    // SAFETY: `path` is a NUL-terminated string; the flags are valid for open(2).
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(NetnsError::Io {
            what: "cannot open /dev/net/tun (is CONFIG_TUN enabled?)".into(),
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` was just returned by open(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..IFNAME.len()].copy_from_slice(IFNAME.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `IfReq` lays out (40 bytes).
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } != 0 {
        return Err(NetnsError::Io {
            what: format!("TUNSETIFF {IFNAME} in {ns_path}"),
            source: io::Error::last_os_error(),
        });
    }
    Ok(fd)
}

pub(super) fn write_packet(fd: &OwnedFd, packet: &[u8]) {
    // SAFETY: `packet` is a valid buffer of `packet.len()` bytes; a TUN write injects one packet.
    // A failed write (a full queue) is a dropped packet, as on a real link.
    unsafe {
        libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len());
    }
}
