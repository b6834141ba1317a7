//! Three or more "hosts" on one wire ([`Hosts`]): a namespace each, a TUN device `IFNAME` in
//! each, and a thread of the test process that forwards IPv4 and IPv6 packets between them
//! like a switch: unicast to the namespace that owns the destination address, multicast
//! (`224.0.0.0/4`, `ff00::/8`) to every other namespace, except those told to drop multicast
//! ([`Hosts::drop_multicast`], a network where the group does not reach).
//!
//! Shaping applies to packets leaving a namespace, as a netem qdisc on its device would: one
//! draw per packet, so a multicast packet lost on the way out is lost for every receiver, and
//! one duplicated is duplicated for all. The wire shapes loss and duplication only (no delay).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use super::error::io_err;
use super::netem::chance;
use super::tun::{open_tun_in, write_packet};
use super::{ip, spawn_in, wrap_in, Netem, NetnsError, TwoHosts, IFNAME};

/// What the wire did with the packets of one namespace, counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireCounts {
    /// Multicast packets delivered to this namespace.
    pub multicast_in: u64,
    /// Multicast packets not delivered to it because it drops multicast.
    pub multicast_refused: u64,
    /// Unicast packets delivered to it.
    pub unicast_in: u64,
    /// Packets leaving it that the shaping dropped.
    pub lost_out: u64,
    /// Packets on their way to it that the shaping dropped: a multicast packet lost on the
    /// way out of its sender counts once for every namespace that would have received it.
    pub lost_in: u64,
}

#[derive(Default)]
struct Counters {
    multicast_in: AtomicU64,
    multicast_refused: AtomicU64,
    unicast_in: AtomicU64,
    lost_out: AtomicU64,
    lost_in: AtomicU64,
}

/// Per namespace: its shaping and whether it drops multicast.
#[derive(Clone, Copy, Default)]
struct Port {
    shape: Netem,
    no_multicast: bool,
}

static NEXT_WIRE: AtomicU32 = AtomicU32::new(0);

/// N network namespaces on one forwarding wire. Dropping it stops the wire and deletes them.
pub struct Hosts {
    ns: Vec<String>,
    addrs: Vec<Ipv4Addr>,
    addrs6: Vec<Ipv6Addr>,
    ports: Arc<Mutex<Vec<Port>>>,
    counters: Arc<Vec<Counters>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts")
            .field("ns", &self.ns)
            .field("addrs", &self.addrs)
            .finish()
    }
}

impl Hosts {
    /// Checks the prerequisites (as [`TwoHosts::available`]).
    pub fn available() -> Result<(), NetnsError> {
        TwoHosts::available()
    }

    /// Makes `n` namespaces on one wire, host `i` at `10.214.<k>.<i + 1>/24` and
    /// `fd6c:0:0:<k>::<i + 1>/64`, each with `lo` and `IFNAME` up, the MULTICAST flag on
    /// `IFNAME` and routes for `224.0.0.0/4` and `ff00::/8` through it.
    pub fn create(n: usize) -> Result<Hosts, NetnsError> {
        if !(2..=250).contains(&n) {
            return Err(NetnsError::BadShape(format!("{n} hosts: 2..=250 please")));
        }
        Self::available()?;
        TwoHosts::cleanup_stale();
        let pid = std::process::id();
        let k = NEXT_WIRE.fetch_add(1, Ordering::Relaxed);
        let mut hosts = Hosts {
            ns: Vec::new(),
            addrs: (0..n)
                .map(|i| Ipv4Addr::new(10, 214, (k % 250) as u8, i as u8 + 1))
                .collect(),
            addrs6: (0..n)
                .map(|i| Ipv6Addr::new(0xfd6c, 0, 0, (k % 250) as u16, 0, 0, 0, i as u16 + 1))
                .collect(),
            ports: Arc::new(Mutex::new(vec![Port::default(); n])),
            counters: Arc::new((0..n).map(|_| Counters::default()).collect()),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        // From here on, `hosts` deletes whatever namespaces exist if a step fails.
        for i in 0..n {
            let name = format!("llb-{pid}-w{k}-{i}");
            ip(&["netns", "add", &name])?;
            hosts.ns.push(name);
            ip(&["-n", &hosts.ns[i], "link", "set", "lo", "up"])?;
        }
        let paths: Vec<String> = hosts.ns.iter().map(|n| format!("/run/netns/{n}")).collect();
        // setns changes only the calling thread's namespace: open the devices on a throwaway
        // thread, so the caller's stays where it is.
        let fds = thread::spawn(move || -> Result<Vec<OwnedFd>, NetnsError> {
            paths.iter().map(|p| open_tun_in(p)).collect()
        })
        .join()
        .map_err(|_| NetnsError::Io {
            what: "tun opener thread panicked".into(),
            source: io::Error::other("panic"),
        })??;
        let cidrs: Vec<String> = hosts.addrs.iter().map(|a| format!("{a}/24")).collect();
        let cidrs6: Vec<String> = hosts.addrs6.iter().map(|a| format!("{a}/64")).collect();
        for ((ns, cidr), cidr6) in hosts.ns.iter().zip(&cidrs).zip(&cidrs6) {
            // A deep queue, so that a briefly descheduled wire thread does not add loss.
            ip(&["-n", ns, "link", "set", IFNAME, "txqueuelen", "10000"])?;
            ip(&["-n", ns, "link", "set", IFNAME, "multicast", "on"])?;
            ip(&["-n", ns, "addr", "add", cidr, "dev", IFNAME])?;
            // No duplicate address detection: the address is usable at once.
            ip(&["-n", ns, "-6", "addr", "add", cidr6, "dev", IFNAME, "nodad"])?;
            ip(&["-n", ns, "link", "set", IFNAME, "up"])?;
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", IFNAME])?;
            // The kernel adds `ff00::/8` to the local table for a multicast device; the main
            // table's route makes it the choice of a socket that names no interface.
            ip(&["-n", ns, "-6", "route", "add", "ff00::/8", "dev", IFNAME])?;
        }
        let (ports, counters, stop) = (
            Arc::clone(&hosts.ports),
            Arc::clone(&hosts.counters),
            Arc::clone(&hosts.stop),
        );
        let addrs: Vec<IpAddr> = hosts.addrs.iter().map(|&a| IpAddr::V4(a)).collect();
        let addrs6: Vec<IpAddr> = hosts.addrs6.iter().map(|&a| IpAddr::V6(a)).collect();
        hosts.thread = Some(
            thread::Builder::new()
                .name("llbus-netns-hub".into())
                .spawn(move || hub_loop(&fds, [&addrs, &addrs6], &ports, &counters, &stop))
                .map_err(io_err("cannot start the wire thread"))?,
        );
        Ok(hosts)
    }

    /// How many hosts.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether there are none (never, once made).
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        self.addrs[i]
    }

    /// Host `i`'s IPv6 address.
    pub fn addr6(&self, i: usize) -> Ipv6Addr {
        self.addrs6[i]
    }

    /// Host `i`'s namespace name, as `ip netns` knows it.
    pub fn ns_name(&self, i: usize) -> &str {
        &self.ns[i]
    }

    /// Shapes the packets leaving host `i` (loss and duplication; the wire has no delay).
    pub fn shape(&self, i: usize, netem: Netem) -> Result<(), NetnsError> {
        netem.check()?;
        if netem.delay_ms > 0 || netem.reorder_pct > 0.0 {
            return Err(NetnsError::BadShape(
                "the multi-host wire shapes loss and duplication only".into(),
            ));
        }
        self.ports.lock().unwrap_or_else(|p| p.into_inner())[i].shape = netem;
        Ok(())
    }

    /// Whether host `i` receives multicast: `true` drops every multicast packet to it.
    pub fn drop_multicast(&self, i: usize, drop: bool) {
        self.ports.lock().unwrap_or_else(|p| p.into_inner())[i].no_multicast = drop;
    }

    /// What the wire did with host `i`'s packets so far.
    pub fn counts(&self, i: usize) -> WireCounts {
        let c = &self.counters[i];
        WireCounts {
            multicast_in: c.multicast_in.load(Ordering::Relaxed),
            multicast_refused: c.multicast_refused.load(Ordering::Relaxed),
            unicast_in: c.unicast_in.load(Ordering::Relaxed),
            lost_out: c.lost_out.load(Ordering::Relaxed),
            lost_in: c.lost_in.load(Ordering::Relaxed),
        }
    }

    /// `cmd`, run inside host `i`'s namespace (as [`TwoHosts::wrap`]).
    pub fn wrap(&self, i: usize, cmd: &Command) -> Command {
        wrap_in(&self.ns[i], cmd)
    }

    /// Starts `cmd` inside host `i`'s namespace (as [`TwoHosts::spawn`]).
    pub fn spawn(&self, i: usize, cmd: &Command) -> Result<Child, NetnsError> {
        spawn_in(&self.ns[i], cmd)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Stop the wire first: it holds the tun devices open.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for ns in &self.ns {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("llbus netns harness: could not delete namespace {ns}: {e}");
            }
        }
    }
}

/// An IP packet's destination, if it is one (IPv4 or IPv6).
fn destination(packet: &[u8]) -> Option<IpAddr> {
    match packet.first()? >> 4 {
        4 if packet.len() >= 20 => Some(IpAddr::from([
            packet[16], packet[17], packet[18], packet[19],
        ])),
        6 if packet.len() >= 40 => {
            let bytes: [u8; 16] = packet[24..40].try_into().ok()?;
            Some(IpAddr::from(bytes))
        }
        _ => None,
    }
}

fn hub_loop(
    fds: &[OwnedFd],
    addrs: [&[IpAddr]; 2],
    ports: &Mutex<Vec<Port>>,
    counters: &[Counters],
    stop: &AtomicBool,
) {
    let mut rng = fastrand::Rng::new();
    let mut buf = vec![0u8; 65_536];
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        for p in &mut pfds {
            p.revents = 0;
        }
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 20) };
        if ready <= 0 {
            continue;
        }
        let current = ports.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for from in 0..fds.len() {
            if pfds[from].revents & libc::POLLIN == 0 {
                continue;
            }
            // Drain what is queued on this port (bounded, to stay fair to the others).
            for _ in 0..256 {
                // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes.
                let n = unsafe {
                    libc::read(fds[from].as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                };
                if n <= 0 {
                    break;
                }
                let packet = &buf[..n as usize];
                let Some(dst) = destination(packet) else {
                    continue;
                };
                let shape = current[from].shape;
                if chance(&mut rng, shape.loss_pct) {
                    counters[from].lost_out.fetch_add(1, Ordering::Relaxed);
                    for to in receivers(dst, from, addrs, &current) {
                        counters[to].lost_in.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                let copies = if chance(&mut rng, shape.duplicate_pct) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    if dst.is_multicast() {
                        for (to, port) in current.iter().enumerate() {
                            if to != from && port.no_multicast {
                                counters[to]
                                    .multicast_refused
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    for to in receivers(dst, from, addrs, &current) {
                        write_packet(&fds[to], packet);
                        let delivered = if dst.is_multicast() {
                            &counters[to].multicast_in
                        } else {
                            &counters[to].unicast_in
                        };
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// The namespaces a packet from `from` to `dst` goes to: for multicast every other one that
/// does not drop it, for unicast the one with that address (if any).
fn receivers<'a>(
    dst: IpAddr,
    from: usize,
    addrs: [&'a [IpAddr]; 2],
    ports: &'a [Port],
) -> impl Iterator<Item = usize> + 'a {
    (0..ports.len()).filter(move |&to| {
        if dst.is_multicast() {
            to != from && !ports[to].no_multicast
        } else {
            addrs.iter().any(|a| a.get(to) == Some(&dst))
        }
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn ipv4_and_ipv6_packets_have_a_destination() {
        let mut p = [0u8; 40];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&[239, 255, 1, 2]);
        assert_eq!(destination(&p), Some(IpAddr::from([239, 255, 1, 2])));
        assert_eq!(destination(&p[..19]), None);
        p[0] = 0x60;
        let group: Ipv6Addr = "ff15::77:1".parse().unwrap();
        p[24..40].copy_from_slice(&group.octets());
        assert_eq!(destination(&p), Some(IpAddr::V6(group)));
        assert_eq!(destination(&p[..39]), None);
        p[0] = 0x50;
        assert_eq!(destination(&p), None);
    }
}
