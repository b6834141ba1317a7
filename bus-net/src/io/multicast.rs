//! Multicast membership and sending options: the socket a bridge hears its discovery group on
//! (bound to the group's address and port with `SO_REUSEADDR` and `SO_REUSEPORT`, so every
//! bridge of a host receives each datagram sent to the group, and nothing sent to another
//! group on that port), and the TTL, outgoing interface and loopback of a socket that sends to
//! a group.
//!
//! Loopback is on, so bridges of one host hear each other (and a bridge its own announcements,
//! which the endpoint recognises by their session and ignores). An IPv4 group is joined on the
//! interface named by one of its addresses (`127.0.0.1` for the loopback interface, which
//! works even where `lo` has no multicast flag), or the system's choice; an IPv6 group on the
//! interface that has the IPv6 address given (which must carry multicast: Linux's `lo` does
//! not by default, so `::1` cannot reach an IPv6 group), or the system's choice.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::socket::{SocketConfig, UdpEndpoint};

impl UdpEndpoint {
    /// A non-blocking socket that receives what is sent to `group`: bound to the group's
    /// address and port (shared with other sockets of the host), and a member of the group on
    /// `interface` (one of the interface's addresses; `None`: the system's choice).
    ///
    /// # Errors
    /// `group` is not a multicast address, or creating, binding or joining failed (no route
    /// for multicast, say).
    pub fn bind_group(
        group: SocketAddr,
        interface: Option<IpAddr>,
        config: &SocketConfig,
    ) -> io::Result<UdpEndpoint> {
        if !group.ip().is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast group: use 224.0.0.0/4 or ff00::/8"),
            ));
        }
        let socket = Socket::new(Domain::for_address(group), Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_nonblocking(true)?;
        socket.set_reuse_address(true)?;
        #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
        socket.set_reuse_port(true)?;
        if let Some(size) = config.recv_buffer {
            if let Err(e) = socket.set_recv_buffer_size(size) {
                log::warn!("llbus-net: SO_RCVBUF {size} refused on group {group} ({e})");
            }
        }
        // Bound to the group's own address where the system allows it (Unix), so that the
        // socket takes only this group's datagrams and not those of another group on the same
        // port; elsewhere to every address.
        let local = if cfg!(unix) {
            scoped(group, interface)?
        } else {
            match group {
                SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, group.port())),
                SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, group.port())),
            }
        };
        socket.bind(&local.into())?;
        // Only the groups this socket joined, not every group the host joined on the port.
        #[cfg(target_os = "linux")]
        if group.is_ipv4() {
            socket.set_multicast_all_v4(false)?;
        }
        match group.ip() {
            IpAddr::V4(g) => socket.join_multicast_v4(&g, &v4_interface(interface))?,
            IpAddr::V6(g) => {
                let index = match local {
                    SocketAddr::V6(l) if l.scope_id() != 0 => l.scope_id(),
                    _ => v6_index(interface),
                };
                socket.join_multicast_v6(&g, index)?;
            }
        }
        UdpEndpoint::from_bound(socket)
    }

    /// Makes this socket's datagrams to a multicast group of `family`'s leave with `ttl` (IPv6:
    /// hop limit) by `interface` (one of its addresses; `None`: the system's choice), and
    /// loop back to this host's members.
    ///
    /// # Errors
    /// The socket refused an option.
    pub fn set_multicast(
        &self,
        family_v4: bool,
        ttl: u32,
        interface: Option<IpAddr>,
    ) -> io::Result<()> {
        let socket = SockRef::from(self.socket());
        if family_v4 {
            socket.set_multicast_ttl_v4(ttl)?;
            socket.set_multicast_loop_v4(true)?;
            if let Some(IpAddr::V4(_)) = interface {
                socket.set_multicast_if_v4(&v4_interface(interface))?;
            }
        } else {
            socket.set_multicast_hops_v6(ttl)?;
            socket.set_multicast_loop_v6(true)?;
            let index = v6_index(interface);
            if index != 0 {
                socket.set_multicast_if_v6(index)?;
            }
        }
        Ok(())
    }
}

/// `group` as a socket can be bound to it: an IPv6 group of interface- or link-local scope
/// (`ff01::/16`, `ff02::/16`) exists once per link, so the kernel binds it only with the
/// index of its interface (`EINVAL` otherwise): the group's own scope id, or that of the
/// interface with address `interface`.
///
/// # Errors
/// Such a group with neither: the link is not named.
fn scoped(group: SocketAddr, interface: Option<IpAddr>) -> io::Result<SocketAddr> {
    let SocketAddr::V6(mut v6) = group else {
        return Ok(group);
    };
    let link_scoped = v6.ip().segments()[0] & 0xff0f <= 0xff02;
    if !link_scoped || v6.scope_id() != 0 {
        return Ok(group);
    }
    match v6_index(interface) {
        0 => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{group} is a link-local group: name its link (bind the bridge to an IPv6 \
                 address of the interface, or set the multicast interface), or use a group of \
                 wider scope (ff05::/16, ff08::/16, ff0e::/16)"
            ),
        )),
        index => {
            v6.set_scope_id(index);
            Ok(SocketAddr::V6(v6))
        }
    }
}

/// The index of the interface with IPv6 address `interface` (0: the system's choice).
fn v6_index(interface: Option<IpAddr>) -> u32 {
    match interface {
        Some(IpAddr::V6(a)) => v6_interface(a).map_or(0, |(index, _)| index),
        _ => 0,
    }
}

/// The index of the interface that has IPv6 address `ip`, and whether it carries multicast
/// (`IFF_MULTICAST`); `None` if no interface has it, or the list cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn v6_interface(ip: Ipv6Addr) -> Option<(u32, bool)> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` writes the head of a list it allocates (freed below) into `list`.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut node = list;
    while !node.is_null() {
        // SAFETY: `node` is a node of the list `getifaddrs` returned, not freed yet.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null `ifa_addr` points to a socket address of the family it names.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET6 {
            continue;
        }
        // SAFETY: an `AF_INET6` socket address is a `sockaddr_in6`.
        let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
        if Ipv6Addr::from(sin6.sin6_addr.s6_addr) != ip {
            continue;
        }
        // SAFETY: `ifa_name` is the NUL-terminated name of this node's interface.
        let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
        #[allow(clippy::cast_sign_loss)] // A flag bit: positive.
        let multicast = ifa.ifa_flags & (libc::IFF_MULTICAST as u32) != 0;
        found = (index != 0).then_some((index, multicast));
        break;
    }
    // SAFETY: `list` came from `getifaddrs` and is freed once, after its last use.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// One IPv4 address of every interface that is up and can take an IPv4 group: each that
/// carries multicast (`IFF_MULTICAST`), and loopback (which takes IPv4 groups even where
/// `lo` has no multicast flag), loopback first, each interface once. What a listener joins a
/// discovery group on to hear every bridge of this host and its links, whichever interface
/// each bridge announces on. Empty if the list cannot be read.
#[cfg(target_os = "linux")]
pub fn multicast_v4_interfaces() -> Vec<Ipv4Addr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` writes the head of a list it allocates (freed below) into `list`.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut found: Vec<(bool, String, Ipv4Addr)> = Vec::new();
    let mut node = list;
    while !node.is_null() {
        // SAFETY: `node` is a node of the list `getifaddrs` returned, not freed yet.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null `ifa_addr` points to a socket address of the family it names.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        #[allow(clippy::cast_sign_loss)] // Flag bits: positive.
        let (up, multicast, loopback) = (
            ifa.ifa_flags & (libc::IFF_UP as u32) != 0,
            ifa.ifa_flags & (libc::IFF_MULTICAST as u32) != 0,
            ifa.ifa_flags & (libc::IFF_LOOPBACK as u32) != 0,
        );
        if !up || !(multicast || loopback) {
            continue;
        }
        // SAFETY: an `AF_INET` socket address is a `sockaddr_in`.
        let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
        let address = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        // SAFETY: `ifa_name` is the NUL-terminated name of this node's interface.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        if !found.iter().any(|(_, n, _)| *n == name) {
            found.push((!loopback, name, address));
        }
    }
    // SAFETY: `list` came from `getifaddrs` and is freed once, after its last use.
    unsafe { libc::freeifaddrs(list) };
    found.sort_by_key(|(not_loopback, _, _)| *not_loopback);
    found.into_iter().map(|(_, _, address)| address).collect()
}

/// Elsewhere: loopback alone (the system's choice covers the rest).
#[cfg(not(target_os = "linux"))]
pub fn multicast_v4_interfaces() -> Vec<Ipv4Addr> {
    vec![Ipv4Addr::LOCALHOST]
}

/// Elsewhere the system's choice is left alone.
#[cfg(not(target_os = "linux"))]
pub(crate) fn v6_interface(_ip: Ipv6Addr) -> Option<(u32, bool)> {
    None
}

/// The IPv4 interface address of `interface` (unspecified: the system's choice).
fn v4_interface(interface: Option<IpAddr>) -> Ipv4Addr {
    match interface {
        Some(IpAddr::V4(a)) => a,
        Some(IpAddr::V6(a)) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
        None => Ipv4Addr::UNSPECIFIED,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::RecvBatch;

    /// Loopback comes first, once, and every address listed is one a group can be joined on.
    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore)]
    fn the_multicast_interfaces_start_with_loopback_and_each_takes_a_group() {
        let all = multicast_v4_interfaces();
        assert_eq!(all.first(), Some(&Ipv4Addr::LOCALHOST), "{all:?}");
        let mut unique = all.clone();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        let group = SocketAddr::from(([239, 255, 77, 99], 0));
        for ip in &all {
            let joined =
                UdpEndpoint::bind_group(group, Some(IpAddr::V4(*ip)), &SocketConfig::default());
            assert!(joined.is_ok(), "{ip}: {:?}", joined.err());
        }
    }

    /// A link-local IPv6 group (`ff02::/16`, and interface-local `ff01::/16`) exists once per
    /// link: without a scope id or an interface to take it from, joining it is refused with an
    /// error that says what to name; with a scope id, or a group of wider scope, the address
    /// is used as given.
    #[test]
    fn a_link_local_group_without_a_link_is_refused_naming_what_to_set() {
        for group in ["[ff02::4c4c]:7476", "[ff01::4c4c]:7476"] {
            let group: SocketAddr = group.parse().unwrap();
            let e = scoped(group, None).expect_err("no link named");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            let text = e.to_string();
            assert!(
                text.contains("link-local group") && text.contains("multicast interface"),
                "{text}"
            );
            let e = UdpEndpoint::bind_group(group, None, &SocketConfig::default())
                .expect_err("bind_group refuses it too");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
        let with_scope = SocketAddr::V6(std::net::SocketAddrV6::new(
            "ff02::4c4c".parse().unwrap(),
            7476,
            0,
            1,
        ));
        assert_eq!(scoped(with_scope, None).unwrap(), with_scope);
        for wider in [
            "[ff05::4c4c]:7476",
            "[ff0e::4c4c]:7476",
            "239.255.76.76:7476",
        ] {
            let wider: SocketAddr = wider.parse().unwrap();
            assert_eq!(scoped(wider, None).unwrap(), wider);
        }
    }

    /// Two members of one group on one host (sharing its port) both receive a datagram sent
    /// to it over the loopback interface.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn two_members_on_one_host_share_the_group() {
        let group: SocketAddr = "239.255.76.77:7481".parse().unwrap();
        let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let config = SocketConfig::default();
        let (mut a, mut b) = match (
            UdpEndpoint::bind_group(group, lo, &config),
            UdpEndpoint::bind_group(group, lo, &config),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                // CI's machine has multicast on loopback: there, a skip would hide a failure.
                assert!(
                    std::env::var_os("CI").is_none(),
                    "cannot join {group} on loopback in CI ({e})"
                );
                eprintln!("SKIPPED: this machine cannot join {group} on loopback ({e})");
                return;
            }
        };
        let mut sender =
            UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default()).unwrap();
        sender.set_multicast(true, 1, lo).unwrap();
        assert!(sender.send_to(b"hello", group).unwrap());
        let mut batch = RecvBatch::new(4, 64);
        for member in [&mut a, &mut b] {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if member.recv_batch(&mut batch).unwrap() > 0 {
                    let (bytes, from) = batch.iter().next().unwrap();
                    assert_eq!(bytes, b"hello");
                    assert_eq!(from, sender.local_addr());
                    break;
                }
                assert!(Instant::now() < deadline, "no datagram from the group");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // A member of another group on the same port hears nothing of this one.
        let other: SocketAddr = "239.255.76.78:7481".parse().unwrap();
        let mut c = UdpEndpoint::bind_group(other, lo, &config).unwrap();
        assert!(sender.send_to(b"not yours", group).unwrap());
        assert!(sender.send_to(b"yours", other).unwrap());
        let deadline = Instant::now() + Duration::from_secs(5);
        let got = loop {
            if c.recv_batch(&mut batch).unwrap() > 0 {
                break batch.iter().next().unwrap().0.to_vec();
            }
            assert!(
                Instant::now() < deadline,
                "no datagram from the other group"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, b"yours");
        assert!(UdpEndpoint::bind_group("127.0.0.1:1".parse().unwrap(), lo, &config).is_err());
    }
}
