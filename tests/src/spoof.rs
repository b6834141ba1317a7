//! Forging UDP datagrams with any source address and port, for the spoofing tests: a raw IPv4
//! socket (`socket(AF_INET, SOCK_RAW, IPPROTO_RAW)`, which implies `IP_HDRINCL`) sends an IPv4
//! header and a UDP header we build ourselves. Needs `CAP_NET_RAW` (root).
//!
//! Without the capability, [`RawSender::for_test`] fails the test under CI (`CI=true` in the
//! environment) and elsewhere prints a loud `SKIPPED` line to stderr (and the test names end in
//! `_requires_root`, so a reader of the summary sees which ones depend on it).

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A raw IPv4 socket that sends UDP datagrams with forged source addresses.
#[derive(Debug)]
pub struct RawSender {
    fd: OwnedFd,
    id: u16,
}

impl RawSender {
    /// Opens the raw socket.
    ///
    /// # Errors
    /// `EPERM` without `CAP_NET_RAW`; whatever else `socket(2)` returns.
    pub fn open() -> io::Result<RawSender> {
        // SAFETY: `socket` takes no pointers; a negative return is an error, checked below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(RawSender { fd, id: 1 })
    }

    /// The sender for test `name`, or `None` when raw sockets are not allowed here and this is
    /// not CI (after printing a loud `SKIPPED` line).
    ///
    /// # Panics
    /// Under CI (`CI=true`) if the raw socket cannot be opened: the spoofing tests must run.
    pub fn for_test(name: &str) -> Option<RawSender> {
        match RawSender::open() {
            Ok(raw) => Some(raw),
            Err(e) => {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                assert!(
                    !ci,
                    "{name}: cannot open a raw socket ({e}); the spoofing tests need root \
                     (CAP_NET_RAW) and must not be skipped under CI"
                );
                eprintln!(
                    "\n*** SKIPPED {name}: no raw socket ({e}); run as root to forge source \
                     addresses. This test proved NOTHING. ***\n"
                );
                None
            }
        }
    }

    /// Makes datagrams to a multicast group leave by the interface of `ip` (`127.0.0.1`: the
    /// loopback interface, where this host's members of the group hear them).
    ///
    /// # Errors
    /// What `setsockopt(2)` returns.
    pub fn multicast_via(&self, ip: std::net::Ipv4Addr) -> io::Result<()> {
        let addr = libc::in_addr {
            s_addr: u32::from_ne_bytes(ip.octets()),
        };
        // SAFETY: `addr` is a live `in_addr` of the size given; the kernel only reads it.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_IF,
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sends `payload` as one UDP datagram from `src` to `dst` (any source, port 0 included).
    ///
    /// # Errors
    /// What `sendto(2)` returns.
    pub fn send(&mut self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> io::Result<()> {
        let packet = udp_packet(src, dst, payload, self.id);
        self.id = self.id.wrapping_add(1);
        // SAFETY: `sockaddr_in` is plain data; all-zero is a valid value, then filled in.
        let mut to: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_port = 0;
        to.sin_addr = libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.ip().octets()),
        };
        // SAFETY: `packet` is a live buffer of `packet.len()` bytes and `to` a `sockaddr_in` of
        // the size given; the kernel only reads them.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                std::ptr::from_ref(&to).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// One UDP datagram seen on the wire by a [`Sniffer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Its source.
    pub src: SocketAddrV4,
    /// Its destination.
    pub dst: SocketAddrV4,
    /// Its UDP payload.
    pub payload: Vec<u8>,
}

/// A packet socket (`AF_PACKET`, `SOCK_DGRAM`, IPv4) that sees every IPv4 packet on every
/// interface, loopback included: the eavesdropper who captures datagrams to replay them.
/// Needs `CAP_NET_RAW`.
#[derive(Debug)]
pub struct Sniffer {
    fd: OwnedFd,
}

impl Sniffer {
    /// Opens the packet socket (non-blocking).
    ///
    /// # Errors
    /// `EPERM` without `CAP_NET_RAW`; whatever else `socket(2)` returns.
    pub fn open() -> io::Result<Sniffer> {
        let proto = i32::from((libc::ETH_P_IP as u16).to_be());
        // SAFETY: `socket` takes no pointers; a negative return is an error, checked below.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
                proto,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Sniffer { fd })
    }

    /// Every UDP datagram seen for `duration` for which `keep(src, dst)` holds, in order,
    /// each once (loopback shows a packet twice: going out and coming in).
    pub fn capture(
        &self,
        duration: std::time::Duration,
        keep: impl Fn(SocketAddrV4, SocketAddrV4) -> bool,
    ) -> Vec<Captured> {
        let until = std::time::Instant::now() + duration;
        let mut got: Vec<Captured> = Vec::new();
        let mut buf = vec![0u8; 65536];
        while std::time::Instant::now() < until {
            // SAFETY: `buf` is a live buffer of `buf.len()` bytes the kernel writes into.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let Ok(n) = usize::try_from(n) else {
                std::thread::sleep(std::time::Duration::from_micros(200));
                continue;
            };
            if let Some(c) = parse_udp(&buf[..n.min(buf.len())]) {
                if keep(c.src, c.dst) && got.last() != Some(&c) {
                    got.push(c);
                }
            }
        }
        got
    }
}

/// The UDP datagram in an IPv4 packet, if it is one.
fn parse_udp(packet: &[u8]) -> Option<Captured> {
    let first = *packet.first()?;
    if first >> 4 != 4 || *packet.get(9)? != libc::IPPROTO_UDP as u8 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    let ip = |at: usize| -> Option<std::net::Ipv4Addr> {
        let b: [u8; 4] = packet.get(at..at + 4)?.try_into().ok()?;
        Some(std::net::Ipv4Addr::from(b))
    };
    let udp = packet.get(ihl..)?;
    let port = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(udp.get(at..at + 2)?.try_into().ok()?))
    };
    let len = usize::from(port(4)?);
    Some(Captured {
        src: SocketAddrV4::new(ip(12)?, port(0)?),
        dst: SocketAddrV4::new(ip(16)?, port(2)?),
        payload: udp.get(8..len)?.to_vec(),
    })
}

/// An IPv4 header (20 bytes, no options) and a UDP header in front of `payload`.
pub fn udp_packet(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], id: u16) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0]); // don't fragment
    p.extend_from_slice(&[64, libc::IPPROTO_UDP as u8]);
    p.extend_from_slice(&[0, 0]); // checksum, filled in below
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    let sum = checksum(&p);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&src.port().to_be_bytes());
    p.extend_from_slice(&dst.port().to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    p.extend_from_slice(payload);
    p
}

/// The Internet checksum (RFC 1071) of `bytes`.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in bytes.chunks(2) {
        let word = match *pair {
            [a, b] => u16::from_be_bytes([a, b]),
            [a] => u16::from_be_bytes([a, 0]),
            _ => 0,
        };
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_packet_parses_back() {
        let src: SocketAddrV4 = "10.0.0.1:7".parse().unwrap();
        let dst: SocketAddrV4 = "10.0.0.2:9".parse().unwrap();
        let c = parse_udp(&udp_packet(src, dst, b"hello", 1)).unwrap();
        assert_eq!((c.src, c.dst, &c.payload[..]), (src, dst, &b"hello"[..]));
        assert!(parse_udp(&[0x45]).is_none());
    }

    #[test]
    fn header_layout_and_checksum() {
        let src: SocketAddrV4 = "10.0.0.1:7".parse().unwrap();
        let dst: SocketAddrV4 = "10.0.0.2:9".parse().unwrap();
        let p = udp_packet(src, dst, b"hi", 5);
        assert_eq!(p.len(), 20 + 8 + 2);
        assert_eq!(
            checksum(&p[..20]),
            0,
            "a header with its checksum sums to zero"
        );
        assert_eq!(&p[20..22], &7u16.to_be_bytes());
        assert_eq!(&p[22..24], &9u16.to_be_bytes());
        assert_eq!(&p[28..], b"hi");
    }
}
