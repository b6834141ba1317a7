//! [`UdpEndpoint`]: one non-blocking UDP socket with its counters, and the error policy.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use super::batch::{RecvBatch, SendBatch};

/// How to create an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketConfig {
    /// `SO_RCVBUF` to ask for, in bytes; best effort (the kernel may cap or double it), `None`
    /// keeps the system default.
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF` to ask for, in bytes; best effort, `None` keeps the system default.
    pub send_buffer: Option<usize>,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            recv_buffer: Some(4 << 20),
            send_buffer: Some(4 << 20),
        }
    }
}

/// Counters of one endpoint, written only by the thread that owns it. Datagrams that a
/// counter counts are dropped; nothing here is an error returned to the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Receive system calls made (`recvmmsg`, or `recv_from` on the portable path).
    pub recv_calls: u64,
    /// Datagrams received and handed out.
    pub received: u64,
    /// Datagrams received larger than the maximum datagram size: dropped.
    pub recv_too_large: u64,
    /// Datagrams received from an address family the endpoint does not understand: dropped.
    pub recv_bad_address: u64,
    /// ICMP-surfaced errors reported by a receive (`ECONNREFUSED` after sending to a closed
    /// port, `EHOSTUNREACH`, ...): counted, receiving goes on.
    pub recv_icmp_errors: u64,
    /// Send system calls made.
    pub send_calls: u64,
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams dropped because the socket's send buffer was full (`EAGAIN`).
    pub send_would_block: u64,
    /// Datagrams dropped on an ICMP-surfaced error (`ECONNREFUSED`, unreachable).
    pub send_icmp_errors: u64,
    /// Datagrams the kernel refused (`EMSGSIZE`, `EACCES`, `EPERM`, `ENOBUFS`): dropped.
    pub send_refused: u64,
    /// Datagrams refused for their destination (`EINVAL`, `EADDRNOTAVAIL`, `EAFNOSUPPORT`,
    /// `EDESTADDRREQ`: a forged source such as `0.0.0.0:0` answered, or an address of the
    /// other family): dropped. Never fatal: one bad destination must not stop the others.
    pub send_bad_destination: u64,
    /// Datagrams dropped on any other error of one send that does not say the socket itself
    /// is broken: dropped and counted, never fatal.
    pub send_other_errors: u64,
}

/// What an I/O error means for the batch in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// `EAGAIN`/`EWOULDBLOCK`: nothing to receive, or no room to send.
    WouldBlock,
    /// An error an ICMP message surfaced: count and go on.
    Icmp,
    /// The kernel refused this datagram: count, drop it and go on.
    Refused,
    /// The destination of this datagram cannot be sent to: count, drop it and go on.
    BadDestination,
    /// Anything else: return it.
    Fatal,
}

/// Classifies an I/O error (after `EINTR` was retried by [`retry_interrupted`]).
pub(crate) fn classify(e: &io::Error) -> ErrorClass {
    match e.kind() {
        io::ErrorKind::WouldBlock => return ErrorClass::WouldBlock,
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable => return ErrorClass::Icmp,
        io::ErrorKind::PermissionDenied => return ErrorClass::Refused,
        _ => {}
    }
    #[cfg(unix)]
    if let Some(code) = e.raw_os_error() {
        if code == libc::EMSGSIZE || code == libc::ENOBUFS {
            return ErrorClass::Refused;
        }
        if code == libc::EHOSTDOWN || code == libc::ENETDOWN {
            return ErrorClass::Icmp;
        }
    }
    // WSAEMSGSIZE: a datagram larger than the receive slot (not on Linux, whose slots catch it).
    #[cfg(windows)]
    if e.raw_os_error() == Some(10040) {
        return ErrorClass::Refused;
    }
    ErrorClass::Fatal
}

/// Calls `f` until it does not fail with `EINTR`: the one place interrupted calls are retried.
#[inline]
pub(crate) fn retry_interrupted<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// One non-blocking UDP socket and its counters. Owned by one thread (the bridge actor's).
#[derive(Debug)]
pub struct UdpEndpoint {
    socket: UdpSocket,
    local: SocketAddr,
    stats: IoStats,
}

/// Why binding `addr` failed, in words: the address, the system's reason and, for the usual
/// mistakes, what to do (the error keeps its kind).
fn bind_error(addr: SocketAddr, e: &io::Error) -> io::Error {
    let hint = match e.kind() {
        io::ErrorKind::AddrNotAvailable => {
            ": no network interface of this host has that address (bind 0.0.0.0 or [::] to \
             listen on every interface, or one of this host's own addresses)"
        }
        io::ErrorKind::AddrInUse => ": another socket already has that port (pick another port)",
        io::ErrorKind::PermissionDenied => ": ports below 1024 need privileges (pick a higher one)",
        _ => "",
    };
    io::Error::new(
        e.kind(),
        format!("cannot bind a UDP socket to {addr}: {e}{hint}"),
    )
}

impl UdpEndpoint {
    /// Creates a non-blocking UDP socket bound to `addr` (port 0 for an ephemeral port).
    /// Buffer sizes are best effort: a refused size is logged and the default kept.
    ///
    /// # Errors
    /// Creating, binding or making the socket non-blocking failed (address in use, no
    /// permission, ...).
    pub fn bind(addr: SocketAddr, config: &SocketConfig) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_nonblocking(true)?;
        if let Some(size) = config.recv_buffer {
            if let Err(e) = socket.set_recv_buffer_size(size) {
                log::warn!("llbus-net: SO_RCVBUF {size} refused on {addr} ({e}); keeping default");
            }
        }
        if let Some(size) = config.send_buffer {
            if let Err(e) = socket.set_send_buffer_size(size) {
                log::warn!("llbus-net: SO_SNDBUF {size} refused on {addr} ({e}); keeping default");
            }
        }
        if let SocketAddr::V6(v6) = addr {
            if v6.ip().is_unspecified() {
                // `[::]` serves both families (dual stack) whatever the system default; IPv4
                // peers then appear as `::ffff:a.b.c.d`, which the bridge canonicalises.
                if let Err(e) = socket.set_only_v6(false) {
                    log::warn!("llbus-net: cannot make {addr} dual-stack ({e}); IPv6 only");
                }
            }
        }
        socket
            .bind(&addr.into())
            .map_err(|e| bind_error(addr, &e))?;
        Self::from_bound(socket)
    }

    /// An endpoint of a socket already bound and non-blocking.
    ///
    /// # Errors
    /// Its local address cannot be read.
    pub(crate) fn from_bound(socket: Socket) -> io::Result<Self> {
        let socket: UdpSocket = socket.into();
        let local = socket.local_addr()?;
        Ok(UdpEndpoint {
            socket,
            local,
            stats: IoStats::default(),
        })
    }

    /// Connects the socket to `peer`: it then receives only from `peer`, and ICMP errors for
    /// `peer` are reported on it (a compat-mode subscriber talks to exactly one publisher).
    ///
    /// # Errors
    /// The system call failed.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.socket.connect(peer)
    }

    /// A second endpoint on the same socket (same port), with counters of its own: lets a
    /// publishing actor send from its own thread while the bridge receives.
    ///
    /// # Errors
    /// Duplicating the file descriptor failed.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(UdpEndpoint {
            socket: self.socket.try_clone()?,
            local: self.local,
            stats: IoStats::default(),
        })
    }

    /// The bound address (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The counters so far.
    pub fn stats(&self) -> &IoStats {
        &self.stats
    }

    /// The underlying socket, for options this type does not set.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Receives as many datagrams as are queued, up to the batch's size, into `batch`
    /// (replacing what it held). Never blocks. Returns how many datagrams were taken off the
    /// socket, dropped ones included: `Ok(0)` means the socket is drained. The datagrams to
    /// use are [`RecvBatch::iter`]'s.
    ///
    /// Counted and dropped, not returned: datagrams larger than the maximum datagram size
    /// ([`IoStats::recv_too_large`]) or from an unknown address family; ICMP-surfaced errors
    /// ([`IoStats::recv_icmp_errors`]). `EINTR` is retried. Allocates nothing.
    ///
    /// # Errors
    /// A fatal socket error (see the module docs); the batch then holds what was received
    /// before it, if anything.
    pub fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        // An ICMP error is reported once and then cleared, and several can be pending (one per
        // closed destination): try again, a bounded number of times.
        let mut icmp_budget = batch.capacity();
        loop {
            self.stats.recv_calls = self.stats.recv_calls.saturating_add(1);
            match self.recv_into(batch) {
                Ok(n) => return Ok(n),
                Err(e) => match classify(&e) {
                    ErrorClass::WouldBlock => return Ok(batch.taken()),
                    ErrorClass::Icmp | ErrorClass::Refused | ErrorClass::BadDestination => {
                        self.stats.recv_icmp_errors = self.stats.recv_icmp_errors.saturating_add(1);
                        if icmp_budget == 0 || batch.taken() > 0 {
                            return Ok(batch.taken());
                        }
                        icmp_budget -= 1;
                    }
                    ErrorClass::Fatal => {
                        log::error!("llbus-net: fatal receive error on {}: {e}", self.local);
                        return Err(e);
                    }
                },
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn recv_into(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        super::linux::recv(&self.socket, batch, &mut self.stats)
    }

    #[cfg(not(target_os = "linux"))]
    fn recv_into(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        super::portable::recv(&self.socket, batch, &mut self.stats)
    }

    /// Sends each `(payload, destination)` of `datagrams`, `batch.capacity()` per system call.
    /// Never blocks. Returns how many datagrams the kernel took.
    ///
    /// Fan-out of one datagram to many subscribers is
    /// `datagrams = addrs.map(|a| (bytes, a))`.
    ///
    /// Counted and dropped, not returned: a datagram refused for a full send buffer
    /// ([`IoStats::send_would_block`]: this and the rest of the current system call's share),
    /// an ICMP-surfaced error ([`IoStats::send_icmp_errors`]) or a per-datagram refusal
    /// ([`IoStats::send_refused`]); the others are still sent. `EINTR` is retried. Allocates
    /// nothing.
    ///
    /// # Errors
    /// A fatal socket error (see the module docs); datagrams after it are not sent.
    pub fn send_batch<'a, I>(&mut self, batch: &mut SendBatch, datagrams: I) -> io::Result<usize>
    where
        I: IntoIterator<Item = (&'a [u8], SocketAddr)>,
    {
        self.send_batch_suffixed(
            batch,
            datagrams
                .into_iter()
                .map(|(bytes, dest)| (bytes, None, dest)),
        )
    }

    /// [`UdpEndpoint::send_batch`] where each datagram may end with an 8-byte suffix of its
    /// own (a subscription token, [`TOKEN_LEN`](crate::TOKEN_LEN) bytes):
    /// `(bytes, suffix, destination)`. The kernel gathers the shared bytes and the suffix
    /// (two iovecs on Linux), so fan-out copies nothing per destination. Same counting and
    /// errors.
    ///
    /// # Errors
    /// A fatal socket error (see the module docs); datagrams after it are not sent.
    pub fn send_batch_suffixed<'a, I>(
        &mut self,
        batch: &mut SendBatch,
        datagrams: I,
    ) -> io::Result<usize>
    where
        I: IntoIterator<Item = (&'a [u8], Option<[u8; super::batch::SUFFIX_LEN]>, SocketAddr)>,
    {
        let v6 = self.local.is_ipv6();
        let datagrams = datagrams
            .into_iter()
            .map(move |(bytes, suffix, dest)| (bytes, suffix, wire_dest(v6, dest)));
        #[cfg(target_os = "linux")]
        let sent = super::linux::send(&self.socket, &mut self.stats, batch, datagrams);
        #[cfg(not(target_os = "linux"))]
        let sent =
            super::portable::send(&self.socket, &mut self.stats, &mut batch.scratch, datagrams);
        if let Err(e) = &sent {
            log::error!("llbus-net: fatal send error on {}: {e}", self.local);
        }
        sent
    }

    /// Sends one datagram. Returns whether the kernel took it; a dropped one is counted as in
    /// [`UdpEndpoint::send_batch`].
    ///
    /// # Errors
    /// A fatal socket error.
    pub fn send_to(&mut self, payload: &[u8], dest: SocketAddr) -> io::Result<bool> {
        self.stats.send_calls = self.stats.send_calls.saturating_add(1);
        let dest = wire_dest(self.local.is_ipv6(), dest);
        match retry_interrupted(|| self.socket.send_to(payload, dest)) {
            Ok(_) => {
                self.stats.sent = self.stats.sent.saturating_add(1);
                Ok(true)
            }
            Err(e) => {
                count_send_error(&mut self.stats, e, 1).inspect_err(|e| {
                    log::error!("llbus-net: fatal send error on {}: {e}", self.local);
                })?;
                Ok(false)
            }
        }
    }
}

/// The destination as the socket must be given it: an IPv4 address is written IPv4-mapped
/// (`::ffff:a.b.c.d`) for an IPv6 (dual-stack) socket. Addresses are kept canonical (plain
/// IPv4) everywhere else.
#[inline]
fn wire_dest(socket_v6: bool, dest: SocketAddr) -> SocketAddr {
    match dest {
        SocketAddr::V4(v4) if socket_v6 => {
            SocketAddr::new(std::net::IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
        }
        other => other,
    }
}

/// Whether a send error says the socket itself is broken (closed, not a socket, a bad
/// buffer: a bug), as opposed to something about one datagram or its destination.
fn socket_is_broken(e: &io::Error) -> bool {
    #[cfg(unix)]
    if let Some(code) = e.raw_os_error() {
        return matches!(code, libc::EBADF | libc::ENOTSOCK | libc::EFAULT);
    }
    // Not an OS error (a std-made one): nothing names one datagram as its cause.
    e.raw_os_error().is_none()
}

/// Classifies a send error: like [`classify`], plus the errors that name the destination.
pub(crate) fn classify_send(e: &io::Error) -> ErrorClass {
    #[cfg(unix)]
    if let Some(code) = e.raw_os_error() {
        if matches!(
            code,
            libc::EINVAL | libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT | libc::EDESTADDRREQ
        ) {
            return ErrorClass::BadDestination;
        }
    }
    #[cfg(windows)]
    if matches!(e.raw_os_error(), Some(10049 | 10047 | 10039 | 10022)) {
        return ErrorClass::BadDestination;
    }
    classify(e)
}

/// Counts `dropped` datagrams for a send error that concerns them only, or returns an error
/// that says the socket is broken. Counters saturate.
pub(crate) fn count_send_error(stats: &mut IoStats, e: io::Error, dropped: u64) -> io::Result<()> {
    let counter = match classify_send(&e) {
        ErrorClass::WouldBlock => &mut stats.send_would_block,
        ErrorClass::Icmp => &mut stats.send_icmp_errors,
        ErrorClass::Refused => &mut stats.send_refused,
        ErrorClass::BadDestination => &mut stats.send_bad_destination,
        ErrorClass::Fatal if socket_is_broken(&e) => return Err(e),
        ErrorClass::Fatal => &mut stats.send_other_errors,
    };
    *counter = counter.saturating_add(dropped);
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    /// A send that fails for its destination (an answer to a forged `0.0.0.0:0`
    /// fails with `EINVAL`) is counted and dropped; only a broken socket is an error.
    #[test]
    fn send_errors_are_counted_by_reason_and_only_a_broken_socket_is_fatal() {
        let mut stats = IoStats::default();
        for code in [
            libc::EINVAL,
            libc::EADDRNOTAVAIL,
            libc::EAFNOSUPPORT,
            libc::EDESTADDRREQ,
        ] {
            assert!(count_send_error(&mut stats, os(code), 1).is_ok(), "{code}");
        }
        assert_eq!(stats.send_bad_destination, 4);
        assert!(count_send_error(&mut stats, os(libc::EAGAIN), 3).is_ok());
        assert_eq!(stats.send_would_block, 3);
        assert!(count_send_error(&mut stats, os(libc::ECONNREFUSED), 1).is_ok());
        assert_eq!(stats.send_icmp_errors, 1);
        assert!(count_send_error(&mut stats, os(libc::EMSGSIZE), 1).is_ok());
        assert_eq!(stats.send_refused, 1);
        // Something unexpected about one send: counted, not fatal.
        assert!(count_send_error(&mut stats, os(libc::EIO), 1).is_ok());
        assert_eq!(stats.send_other_errors, 1);
        for code in [libc::EBADF, libc::ENOTSOCK, libc::EFAULT] {
            assert!(count_send_error(&mut stats, os(code), 1).is_err(), "{code}");
        }
        // Counters saturate.
        stats.send_bad_destination = u64::MAX;
        assert!(count_send_error(&mut stats, os(libc::EINVAL), 5).is_ok());
        assert_eq!(stats.send_bad_destination, u64::MAX);
    }

    /// The real case: sending to `0.0.0.0:0` and to a port-0 address is refused by the kernel
    /// and counted, and the endpoint goes on sending to a good address.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn sending_to_an_unsendable_address_is_counted_not_fatal() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut ep = UdpEndpoint::bind(any, &SocketConfig::default()).unwrap();
        let good = UdpSocket::bind(any).unwrap();
        let mut batch = SendBatch::new(4);
        let bad: [SocketAddr; 2] = ["0.0.0.0:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap()];
        for dest in bad {
            assert!(!ep.send_to(b"x", dest).unwrap());
        }
        let list = [
            (&b"a"[..], bad[0]),
            (&b"b"[..], good.local_addr().unwrap()),
            (&b"c"[..], bad[1]),
        ];
        assert_eq!(ep.send_batch(&mut batch, list).unwrap(), 1);
        assert_eq!(ep.stats().send_bad_destination, 4, "{:?}", ep.stats());
        let mut buf = [0u8; 8];
        good.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        assert_eq!(good.recv(&mut buf).unwrap(), 1);
    }
}
