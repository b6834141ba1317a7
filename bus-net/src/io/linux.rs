//! `recvmmsg(2)` / `sendmmsg(2)`: one system call per batch (Linux 3.0+). All of the crate's
//! `unsafe` lives here: the descriptor arrays the kernel reads and writes, and the conversion
//! of a kernel-written `sockaddr_storage`.
//!
//! The descriptors (`mmsghdr`, `iovec`) are allocated once per batch and their pointers are
//! rewritten at the start of every call, so they never point at anything that is not borrowed
//! for that call.

use std::io;
use std::mem;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::ptr;

use socket2::SockAddr;

use super::batch::SUFFIX_LEN;
use super::batch::{RecvBatch, SendBatch, DROPPED};
use super::socket::{count_send_error, retry_interrupted, IoStats};

/// A zeroed `mmsghdr`: null pointers, zero lengths and flags.
fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a C struct of integers and raw pointers (and, on some libcs, padding
    // integers); all-zero bytes are a valid value of each of them.
    unsafe { mem::zeroed() }
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: ptr::null_mut(),
        iov_len: 0,
    }
}

/// The kernel-facing descriptors of a [`RecvBatch`].
pub(crate) struct RecvState {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    names: Box<[libc::sockaddr_storage]>,
    /// Datagrams the next call asks for: the whole batch after a call that filled what it
    /// asked for (more may wait), one after a call that found the socket drained. Invariant:
    /// `1 <= want <= hdrs.len()`.
    want: usize,
}

// SAFETY: the raw pointers inside `hdrs` and `iovs` are written at the start of each `recv`
// (which holds `&mut RecvBatch`), point only into buffers owned by the same `RecvBatch`, and are
// never read by Rust code afterwards; no other thread can reach them. Moving the batch to
// another thread between calls therefore moves only dead pointer values.
unsafe impl Send for RecvState {}

impl core::fmt::Debug for RecvState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvState")
            .field("capacity", &self.hdrs.len())
            .finish()
    }
}

impl RecvState {
    pub(crate) fn new(capacity: usize) -> Self {
        // SAFETY: `sockaddr_storage` is a C struct of integers; all-zero bytes are valid.
        let zero_name: libc::sockaddr_storage = unsafe { mem::zeroed() };
        RecvState {
            hdrs: (0..capacity).map(|_| zeroed_mmsghdr()).collect(),
            iovs: (0..capacity).map(|_| empty_iovec()).collect(),
            names: vec![zero_name; capacity].into_boxed_slice(),
            want: capacity.max(1),
        }
    }
}

/// Receives up to `batch.capacity()` datagrams with one `recvmmsg`.
///
/// NB: while traffic is light (the last call drained the socket) it asks for one datagram with
/// `recvfrom` instead of setting up the whole batch's descriptors: an empty poll of a 32-slot batch
/// costs over twice a plain `recv`, and a single datagram makes the kernel try a second, empty
/// receive (the `udp` suite; docs/PERFORMANCE.md, "Where the round trip goes"). A call that
/// fills what it asked for makes the next one ask for the whole batch again.
pub(super) fn recv(
    socket: &UdpSocket,
    batch: &mut RecvBatch,
    stats: &mut IoStats,
) -> io::Result<usize> {
    if batch.sys.want == 1 {
        // NB: `recvfrom` rather than a one-slot `recvmmsg`: no message header or iovec array
        // for the kernel to copy in (the "where the round trip goes" breakdown).
        return recv_one(socket, batch, stats);
    }
    let RecvBatch {
        buf,
        slot_len,
        max_datagram,
        lens,
        addrs,
        taken,
        sys,
    } = batch;
    let state = sys;
    let slots = buf.chunks_exact_mut(*slot_len);
    let want = state.want;
    let mut n = 0usize;
    for (((hdr, iov), name), slot) in state
        .hdrs
        .iter_mut()
        .zip(state.iovs.iter_mut())
        .zip(state.names.iter_mut())
        .zip(slots)
        .take(want)
    {
        *iov = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        *hdr = zeroed_mmsghdr();
        hdr.msg_hdr.msg_name = ptr::from_mut(name).cast();
        hdr.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_hdr.msg_iov = ptr::from_mut(iov);
        hdr.msg_hdr.msg_iovlen = 1;
        n += 1;
    }
    let fd = socket.as_raw_fd();
    let hdrs = state.hdrs.as_mut_ptr();
    let got = retry_interrupted(|| {
        // SAFETY: `hdrs` points to `n` initialised `mmsghdr`s (`n <= hdrs.len()`), each naming
        // one `iovec` of this batch that covers one whole slot of `buf`, and one
        // `sockaddr_storage` of this batch with its true size; all of them are exclusively
        // borrowed through `batch` for this call, so the kernel may write them. A null timeout
        // and `MSG_DONTWAIT` make the call return at once.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                hdrs,
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                ptr::null_mut(),
            )
        };
        usize::try_from(rc).map_err(|_| io::Error::last_os_error())
    });
    let got = match got {
        Ok(got) => got,
        Err(e) => {
            // Nothing taken (an empty socket, or an error the caller counts): light traffic.
            state.want = 1;
            return Err(e);
        }
    };
    let got = got.min(n);
    state.want = if got == n { state.hdrs.len().max(1) } else { 1 };
    for i in 0..got {
        let (Some(hdr), Some(name), Some(len_out), Some(addr_out)) = (
            state.hdrs.get(i),
            state.names.get(i),
            lens.get_mut(i),
            addrs.get_mut(i),
        ) else {
            break;
        };
        let truncated = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let name_len = hdr.msg_hdr.msg_namelen;
        let len = hdr.msg_len as usize;
        *len_out = record(
            len,
            truncated,
            name,
            name_len,
            addr_out,
            *max_datagram,
            stats,
        );
    }
    *taken = got;
    Ok(got)
}

/// Checks one received datagram of `len` bytes from the address the kernel wrote into `name`
/// (`name_len` bytes) and counts it: returns `len`, with the sender in `addr_out`, or `DROPPED`
/// (too large, or an unknown address family).
fn record(
    len: usize,
    truncated: bool,
    name: &libc::sockaddr_storage,
    name_len: libc::socklen_t,
    addr_out: &mut SocketAddr,
    max_datagram: usize,
    stats: &mut IoStats,
) -> usize {
    if truncated || len > max_datagram {
        stats.recv_too_large = stats.recv_too_large.saturating_add(1);
        return DROPPED;
    }
    let name_len = name_len.min(mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t);
    // SAFETY: the kernel wrote the sender's address into `name` and its length into `name_len`
    // (clamped to the storage's size above); `SockAddr` only reads the first `name_len` bytes
    // as the family's address struct.
    let sender = unsafe { SockAddr::new(*name, name_len) }.as_socket();
    match sender {
        Some(a) => {
            *addr_out = a;
            stats.received = stats.received.saturating_add(1);
            len
        }
        None => {
            stats.recv_bad_address = stats.recv_bad_address.saturating_add(1);
            DROPPED
        }
    }
}

/// Receives one datagram with `recvfrom` into the batch's first slot: the light-traffic
/// receive (see [`recv`]).
fn recv_one(socket: &UdpSocket, batch: &mut RecvBatch, stats: &mut IoStats) -> io::Result<usize> {
    let RecvBatch {
        buf,
        slot_len,
        max_datagram,
        lens,
        addrs,
        taken,
        sys: state,
    } = batch;
    let (Some(slot), Some(name), Some(len_out), Some(addr_out)) = (
        buf.get_mut(..*slot_len),
        state.names.first_mut(),
        lens.first_mut(),
        addrs.first_mut(),
    ) else {
        return Ok(0);
    };
    let fd = socket.as_raw_fd();
    let mut name_len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let len = retry_interrupted(|| {
        name_len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `slot` is a buffer of `slot.len()` bytes and `name` a `sockaddr_storage`
        // with `name_len` its true size, both exclusively borrowed through `batch` for this
        // call, so the kernel may write them; `MSG_DONTWAIT` makes the call return at once.
        let rc = unsafe {
            libc::recvfrom(
                fd,
                slot.as_mut_ptr().cast(),
                slot.len(),
                libc::MSG_DONTWAIT,
                ptr::from_mut(name).cast(),
                &mut name_len,
            )
        };
        usize::try_from(rc).map_err(|_| io::Error::last_os_error())
    })?;
    // A datagram longer than the slot is cut to it: `len` is then `max_datagram + 1`, too large.
    *len_out = record(len, false, name, name_len, addr_out, *max_datagram, stats);
    *taken = 1;
    // It filled what it asked for: more may wait.
    state.want = state.hdrs.len().max(1);
    Ok(1)
}

/// The kernel-facing descriptors of a [`SendBatch`].
pub(crate) struct SendState {
    hdrs: Box<[libc::mmsghdr]>,
    /// Two per datagram: its shared bytes, then its own suffix (empty if none).
    iovs: Box<[libc::iovec]>,
    /// Each datagram's suffix, where its second iovec points.
    suffixes: Box<[[u8; SUFFIX_LEN]]>,
    /// Destinations of the datagrams being sent; capacity fixed at `hdrs.len()`.
    names: Vec<SockAddr>,
}

// SAFETY: as for `RecvState`: the pointers are rewritten at the start of each `send` (which
// holds `&mut SendBatch`), point only at this batch's `iovs` and `names` and at payloads
// borrowed for that call, and are never read after it returns.
unsafe impl Send for SendState {}

impl core::fmt::Debug for SendState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendState")
            .field("capacity", &self.hdrs.len())
            .finish()
    }
}

impl SendState {
    pub(crate) fn new(capacity: usize) -> Self {
        SendState {
            hdrs: (0..capacity).map(|_| zeroed_mmsghdr()).collect(),
            iovs: (0..2 * capacity).map(|_| empty_iovec()).collect(),
            suffixes: vec![[0; SUFFIX_LEN]; capacity].into_boxed_slice(),
            names: Vec::with_capacity(capacity),
        }
    }
}

/// Sends `datagrams` with `sendmmsg`, `batch.capacity()` per call: each is its bytes, then
/// its own suffix if it has one (gathered by the kernel from two iovecs, so shared bytes are
/// never copied per destination).
pub(super) fn send<'a, I>(
    socket: &UdpSocket,
    stats: &mut IoStats,
    batch: &mut SendBatch,
    mut datagrams: I,
) -> io::Result<usize>
where
    I: Iterator<Item = (&'a [u8], Option<[u8; SUFFIX_LEN]>, SocketAddr)>,
{
    let fd = socket.as_raw_fd();
    let state = &mut batch.sys;
    let capacity = state.hdrs.len();
    let mut sent = 0usize;
    loop {
        // Fill: destinations first (pushing within capacity never reallocates), then the
        // descriptors that point at them.
        state.names.clear();
        let mut count = 0usize;
        let mut suffixed = false;
        while count < capacity {
            let Some((payload, suffix, dest)) = datagrams.next() else {
                break;
            };
            let (Some([iov, tail]), Some(own)) = (
                state.iovs.get_mut(2 * count..2 * count + 2),
                state.suffixes.get_mut(count),
            ) else {
                break;
            };
            *iov = libc::iovec {
                iov_base: payload.as_ptr().cast_mut().cast(),
                iov_len: payload.len(),
            };
            *tail = match suffix {
                Some(bytes) => {
                    suffixed = true;
                    *own = bytes;
                    libc::iovec {
                        iov_base: own.as_mut_ptr().cast(),
                        iov_len: SUFFIX_LEN,
                    }
                }
                None => empty_iovec(),
            };
            state.names.push(SockAddr::from(dest));
            count += 1;
        }
        if count == 0 {
            return Ok(sent);
        }
        debug_assert!(state.names.len() == count && state.names.capacity() == capacity);
        for ((hdr, iov), name) in state
            .hdrs
            .iter_mut()
            .zip(state.iovs.chunks_exact_mut(2))
            .zip(&state.names)
        {
            *hdr = zeroed_mmsghdr();
            // The kernel only reads the destination: the cast to `*mut` is for the C signature.
            hdr.msg_hdr.msg_name = name.as_ptr().cast_mut().cast();
            hdr.msg_hdr.msg_namelen = name.len();
            hdr.msg_hdr.msg_iov = iov.as_mut_ptr();
            hdr.msg_hdr.msg_iovlen = if iov.get(1).is_some_and(|t| t.iov_len > 0) {
                2
            } else {
                1
            };
        }
        if count == 1 {
            // NB: one datagram (the usual case of a round trip): `sendto`, with no message
            // header or iovec array for the kernel to copy in (the "where the round trip
            // goes" breakdown); with a suffix, `sendmsg` gathers the two parts (one system
            // call, no copy), as `sendmmsg` does for several.
            let (Some(hdr), Some(iov), Some(name)) =
                (state.hdrs.first(), state.iovs.first(), state.names.first())
            else {
                continue;
            };
            stats.send_calls = stats.send_calls.saturating_add(1);
            let result = retry_interrupted(|| {
                let rc = if suffixed {
                    // SAFETY: `hdr` was initialised above: it names two iovecs, over a
                    // payload borrowed for `'a` and over this batch's suffix slot, and a
                    // destination of its true length in `state.names`, none modified until
                    // the next fill. The kernel only reads them. `MSG_DONTWAIT`: never block.
                    unsafe { libc::sendmsg(fd, &hdr.msg_hdr, libc::MSG_DONTWAIT) }
                } else {
                    // SAFETY: `iov` describes a payload borrowed for `'a` (alive for this
                    // whole function) and `name` a destination of its true length; the kernel
                    // only reads them. `MSG_DONTWAIT`: never block.
                    unsafe {
                        libc::sendto(
                            fd,
                            iov.iov_base.cast_const(),
                            iov.iov_len,
                            libc::MSG_DONTWAIT,
                            name.as_ptr(),
                            name.len(),
                        )
                    }
                };
                usize::try_from(rc).map_err(|_| io::Error::last_os_error())
            });
            match result {
                Ok(_) => {
                    stats.sent = stats.sent.saturating_add(1);
                    sent += 1;
                }
                Err(e) => count_send_error(stats, e, 1)?,
            }
            continue;
        }
        // Send, skipping a datagram that fails on its own.
        let mut done = 0usize;
        while done < count {
            let Some(rest) = state.hdrs.get_mut(done..count) else {
                break;
            };
            let (ptr, len) = (rest.as_mut_ptr(), rest.len());
            stats.send_calls = stats.send_calls.saturating_add(1);
            let result = retry_interrupted(|| {
                // SAFETY: `ptr` points to `len` `mmsghdr`s initialised above, each naming one
                // `iovec` over a payload borrowed for `'a` (alive for this whole function) and
                // one destination in `state.names`, not modified until the next fill. The
                // kernel only reads them (and writes `msg_len`). `MSG_DONTWAIT`: never block.
                let rc =
                    unsafe { libc::sendmmsg(fd, ptr, len as libc::c_uint, libc::MSG_DONTWAIT) };
                usize::try_from(rc).map_err(|_| io::Error::last_os_error())
            });
            match result {
                Ok(0) => {
                    // Nothing sent and no error: treat as a full buffer, do not spin.
                    stats.send_would_block =
                        stats.send_would_block.saturating_add((count - done) as u64);
                    break;
                }
                Ok(k) => {
                    let k = k.min(count - done);
                    stats.sent = stats.sent.saturating_add(k as u64);
                    sent += k;
                    done += k;
                }
                Err(e) => {
                    let would_block = e.kind() == io::ErrorKind::WouldBlock;
                    // A full buffer drops the rest of this call's share; any other non-fatal
                    // error belongs to the first datagram, which is skipped.
                    let dropped = if would_block { count - done } else { 1 };
                    count_send_error(stats, e, dropped as u64)?;
                    done += dropped;
                }
            }
        }
    }
}
