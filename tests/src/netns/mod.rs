//! Two "hosts" in network namespaces, joined by a shaped link, for system tests of the UDP
//! bridge.
//!
//! [`TwoHosts::create`] makes two namespaces (`llb-<pid>-<n>-a` and `llb-<pid>-<n>-b`), joins them
//! with one link, and gives each end an address in `10.213.<n>.0/24` (`.1` on side A, `.2` on
//! side B). Those addresses exist only inside the two namespaces, so a test that talks to
//! [`TwoHosts::addr`] never sends a packet anywhere else. Dropping the guard deletes both
//! namespaces, which removes the link with them.
//!
//! The link is one of two kinds ([`LinkKind`]):
//! - [`LinkKind::VethNetem`]: a veth pair, shaped with `tc qdisc replace dev llb0 root netem ...`.
//!   Used whenever the kernel has the netem qdisc (`CONFIG_NET_SCH_NETEM`).
//! - [`LinkKind::TunWire`]: one TUN device in each namespace and a thread of the test process
//!   that copies IP packets between them, applying the same loss, duplication, reordering and
//!   delay as netem. Used when the kernel has no netem (some CI and VM kernels are built
//!   without it and without module support, so it cannot be loaded either).
//!
//! `LLBUS_NETNS_LINK=veth` (or `tun`) forces a kind; `auto` (the default) probes for netem.
//! Either way, what a test sees is the same: two addresses and a link with the shaping asked for.
//!
//! - `error`: what can go wrong, each error saying how to fix it.
//! - `process`: running `ip`/`tc` and test processes with time limits, killing them on drop.
//! - `tun`: TUN devices made inside a namespace (the ioctl).
//! - `hub`: three or more namespaces on one tun wire that forwards multicast ([`Hosts`]), with
//!   a per-namespace switch that drops it.
//! - `netem`: the shaping ([`Netem`]) and the userspace netem that applies it on the tun wire.
//!
//! Shaping applies to packets *leaving* a side, like a root netem qdisc on that side's device:
//! `shape(Side::A, ..)` impairs traffic from A to B.

mod error;
mod hub;
mod netem;
mod process;
mod tun;

use std::fmt;
use std::fs;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use error::io_err;
pub use error::NetnsError;
pub use hub::{Hosts, WireCounts};
pub use netem::Netem;
use netem::Wire;
use process::cmd_line;
pub use process::{lines, output_with_timeout, wait_with_timeout, KillOnDrop};

/// The name of the link device in both namespaces.
pub const IFNAME: &str = "llb0";

/// How long any single `ip`/`tc` invocation may take before the harness gives up on it.
const TOOL_TIMEOUT: Duration = Duration::from_secs(20);

/// One side of a [`TwoHosts`] pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Host A, address `10.213.<n>.1`.
    A,
    /// Host B, address `10.213.<n>.2`.
    B,
}

impl Side {
    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
}

/// What joins the two namespaces (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A veth pair shaped by the kernel's netem qdisc.
    VethNetem,
    /// A TUN device per side, joined and shaped by a thread of this process.
    TunWire,
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkKind::VethNetem => "veth+netem",
            LinkKind::TunWire => "tun-wire",
        })
    }
}

/// Runs a tool (`ip`, `tc`) and fails with its stderr unless it succeeds.
fn tool(program: &str, args: &[&str]) -> Result<Output, NetnsError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let line = cmd_line(&cmd);
    let out = output_with_timeout(&mut cmd, TOOL_TIMEOUT)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(NetnsError::Command {
            cmd: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

fn ip(args: &[&str]) -> Result<Output, NetnsError> {
    tool("ip", args)
}

/// True when this process may create namespaces: root, or CAP_SYS_ADMIN and CAP_NET_ADMIN.
fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let Some(hex) = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
    else {
        return false;
    };
    let caps = u64::from_str_radix(hex, 16).unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 12;
    const CAP_SYS_ADMIN: u64 = 21;
    caps & (1 << CAP_NET_ADMIN) != 0 && caps & (1 << CAP_SYS_ADMIN) != 0
}

/// Which link kind `LLBUS_NETNS_LINK` asks for (`None` = auto).
fn requested_link() -> Option<LinkKind> {
    match std::env::var("LLBUS_NETNS_LINK").as_deref() {
        Ok("veth") | Ok("netem") => Some(LinkKind::VethNetem),
        Ok("tun") | Ok("wire") => Some(LinkKind::TunWire),
        _ => None,
    }
}

static NEXT_PAIR: AtomicU32 = AtomicU32::new(0);

/// Two network namespaces joined by a shapable link. Dropping it deletes both namespaces (and
/// stops the tun wire, if that is the link).
#[derive(Debug)]
pub struct TwoHosts {
    ns: [String; 2],
    addrs: [Ipv4Addr; 2],
    /// Whether each namespace was created (so `Drop` deletes only what exists).
    created: [bool; 2],
    link: LinkKind,
    wire: Option<Wire>,
}

impl TwoHosts {
    /// Checks the prerequisites: privileges and iproute2 (`ip`, `tc`). Whether the kernel has
    /// netem is found out by [`TwoHosts::create`], which falls back to the tun wire without it.
    pub fn available() -> Result<(), NetnsError> {
        if !privileged() {
            return Err(NetnsError::NotRoot);
        }
        let mut ipv = Command::new("ip");
        ipv.arg("-V");
        output_with_timeout(&mut ipv, TOOL_TIMEOUT)?;
        let mut tcv = Command::new("tc");
        tcv.arg("-V");
        output_with_timeout(&mut tcv, TOOL_TIMEOUT)?;
        Ok(())
    }

    /// Makes the two namespaces and the link between them, with addresses up and `lo` up.
    pub fn create() -> Result<TwoHosts, NetnsError> {
        Self::available()?;
        Self::cleanup_stale();
        let pid = std::process::id();
        let n = NEXT_PAIR.fetch_add(1, Ordering::Relaxed);
        let octet = (n % 250) as u8;
        let mut hosts = TwoHosts {
            ns: [
                format!("llb-{pid}-{n}-{}", Side::A.suffix()),
                format!("llb-{pid}-{n}-{}", Side::B.suffix()),
            ],
            addrs: [
                Ipv4Addr::new(10, 213, octet, 1),
                Ipv4Addr::new(10, 213, octet, 2),
            ],
            created: [false, false],
            link: LinkKind::VethNetem,
            wire: None,
        };
        // From here on, `hosts` cleans up whatever exists if a step fails.
        for side in [Side::A, Side::B] {
            ip(&["netns", "add", hosts.ns_name(side)])?;
            hosts.created[side.index()] = true;
            ip(&["-n", hosts.ns_name(side), "link", "set", "lo", "up"])?;
        }
        let requested = requested_link();
        let mut netem_error = None;
        if requested != Some(LinkKind::TunWire) {
            match hosts.make_veth() {
                Ok(()) => {
                    hosts.link = LinkKind::VethNetem;
                    hosts.configure_addrs()?;
                    return Ok(hosts);
                }
                Err(e @ NetnsError::NetemUnavailable(_)) => {
                    if requested == Some(LinkKind::VethNetem) {
                        return Err(e);
                    }
                    netem_error = Some(e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
        let wire = Wire::start([hosts.ns_path(Side::A), hosts.ns_path(Side::B)]).map_err(|e| {
            match netem_error {
                Some(netem) => NetnsError::NoShapableLink(format!("{netem}; then: {e}")),
                None => e,
            }
        })?;
        hosts.wire = Some(wire);
        hosts.link = LinkKind::TunWire;
        for side in [Side::A, Side::B] {
            // A deep queue, so that a briefly descheduled wire thread does not add loss.
            ip(&[
                "-n",
                hosts.ns_name(side),
                "link",
                "set",
                IFNAME,
                "txqueuelen",
                "10000",
            ])?;
        }
        hosts.configure_addrs()?;
        Ok(hosts)
    }

    /// Makes the veth pair directly inside the namespaces (never in the caller's namespace, so
    /// concurrent runs cannot collide on interface names) and checks that netem can shape it.
    fn make_veth(&mut self) -> Result<(), NetnsError> {
        let (a, b) = (self.ns[0].clone(), self.ns[1].clone());
        ip(&[
            "-n", &a, "link", "add", IFNAME, "type", "veth", "peer", "name", IFNAME, "netns", &b,
        ])?;
        // Probe: netem with no impairment (a no-op qdisc, replaced by `shape`).
        let probe = tool(
            "tc",
            &[
                "-n", &a, "qdisc", "replace", "dev", IFNAME, "root", "netem", "limit", "10000",
            ],
        );
        match probe {
            Ok(_) => {
                tool(
                    "tc",
                    &[
                        "-n", &b, "qdisc", "replace", "dev", IFNAME, "root", "netem", "limit",
                        "10000",
                    ],
                )?;
                Ok(())
            }
            Err(NetnsError::Command { stderr, .. }) => {
                // Deleting one end deletes the pair.
                let _ = ip(&["-n", &a, "link", "del", IFNAME]);
                Err(NetnsError::NetemUnavailable(format!(
                    "tc said: {}",
                    stderr.trim()
                )))
            }
            Err(e) => Err(e),
        }
    }

    fn configure_addrs(&self) -> Result<(), NetnsError> {
        for side in [Side::A, Side::B] {
            let cidr = format!("{}/24", self.addr(side));
            ip(&[
                "-n",
                self.ns_name(side),
                "addr",
                "add",
                &cidr,
                "dev",
                IFNAME,
            ])?;
            ip(&["-n", self.ns_name(side), "link", "set", IFNAME, "up"])?;
        }
        Ok(())
    }

    /// Deletes `llb-<pid>-*` namespaces left behind by processes that no longer exist (a test
    /// killed with SIGKILL cannot run its `Drop`). Returns how many it deleted.
    pub fn cleanup_stale() -> usize {
        let Ok(dir) = fs::read_dir("/run/netns") else {
            return 0;
        };
        let mut deleted = 0;
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("llb-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id()
                && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                && ip(&["netns", "del", &name]).is_ok()
            {
                deleted += 1;
            }
        }
        deleted
    }

    /// What joins the namespaces.
    pub fn link(&self) -> LinkKind {
        self.link
    }

    /// A side's address (`10.213.<n>.1` for A, `.2` for B).
    pub fn addr(&self, side: Side) -> Ipv4Addr {
        self.addrs[side.index()]
    }

    /// A side's namespace name, as `ip netns` knows it.
    pub fn ns_name(&self, side: Side) -> &str {
        &self.ns[side.index()]
    }

    fn ns_path(&self, side: Side) -> String {
        format!("/run/netns/{}", self.ns_name(side))
    }

    /// Shapes the traffic leaving `side` (towards the other side) with `netem`, replacing any
    /// earlier shaping of that side. `Netem::default()` makes the link clean again.
    pub fn shape(&self, side: Side, netem: Netem) -> Result<(), NetnsError> {
        netem.check()?;
        match &self.wire {
            Some(wire) => {
                wire.shape(side, netem);
                Ok(())
            }
            None => {
                let mut args: Vec<String> = [
                    "-n",
                    self.ns_name(side),
                    "qdisc",
                    "replace",
                    "dev",
                    IFNAME,
                    "root",
                    "netem",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                args.extend(netem.tc_args());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                tool("tc", &args).map(|_| ())
            }
        }
    }

    /// A command that runs `program` inside `side`'s namespace (`ip netns exec NS program`).
    /// Add arguments, environment and stdio to it as to any `Command`.
    pub fn command(&self, side: Side, program: impl AsRef<std::ffi::OsStr>) -> Command {
        command_in(self.ns_name(side), program)
    }

    /// `cmd` (its program, arguments, environment changes and working directory), run inside
    /// `side`'s namespace. Stdio settings are not copied (`Command` does not expose them).
    pub fn wrap(&self, side: Side, cmd: &Command) -> Command {
        wrap_in(self.ns_name(side), cmd)
    }

    /// Runs `cmd` inside `side`'s namespace to completion, capturing its output; kills it and
    /// fails with [`NetnsError::Timeout`] after `timeout`. A non-zero exit is *not* an error here:
    /// check `status` yourself.
    pub fn run(&self, side: Side, cmd: &Command, timeout: Duration) -> Result<Output, NetnsError> {
        output_with_timeout(&mut self.wrap(side, cmd), timeout)
    }

    /// Starts `cmd` inside `side`'s namespace with stdout piped (read it, e.g. with
    /// [`lines`]) and stderr inherited. Finish it with [`wait_with_timeout`] or
    /// [`KillOnDrop`], so that a failing test does not leave it running.
    pub fn spawn(&self, side: Side, cmd: &Command) -> Result<Child, NetnsError> {
        spawn_in(self.ns_name(side), cmd)
    }
}

/// A command that runs `program` inside namespace `ns` (`ip netns exec NS program`).
fn command_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(program);
    cmd
}

/// `cmd` (its program, arguments, environment changes and working directory), run inside
/// namespace `ns`.
fn wrap_in(ns: &str, cmd: &Command) -> Command {
    let mut w = command_in(ns, cmd.get_program());
    w.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        w.current_dir(dir);
    }
    w
}

/// Starts `cmd` inside namespace `ns` with stdout piped and stderr inherited.
fn spawn_in(ns: &str, cmd: &Command) -> Result<Child, NetnsError> {
    let mut w = wrap_in(ns, cmd);
    let line = cmd_line(&w);
    w.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(io_err(format!("cannot start `{line}`")))
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Stop the wire first: it holds the tun devices open.
        if let Some(wire) = self.wire.take() {
            wire.stop();
        }
        for side in [Side::A, Side::B] {
            if self.created[side.index()] {
                if let Err(e) = ip(&["netns", "del", self.ns_name(side)]) {
                    eprintln!(
                        "llbus netns harness: could not delete namespace {}: {e}",
                        self.ns_name(side)
                    );
                }
            }
        }
    }
}

/// Whether the namespace tests `test` (a filter that selects them, as `cargo test` takes it:
/// `netns_harness`, `net::netns`) may run, given what their harness says
/// (`TwoHosts::available()` or `Hosts::available()`): under CI (`$CI` set, not empty, `0` or
/// `false`) a harness that cannot run fails the test; without root it is skipped with a banner
/// written straight to stderr (past libtest's capture); any other missing prerequisite fails.
///
/// # Panics
/// As said: under CI when the harness cannot run, and anywhere for anything but missing root.
pub fn prerequisites(test: &str, available: Result<(), NetnsError>) -> bool {
    use std::io::Write as _;
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    match available {
        Ok(()) => true,
        Err(e) if in_ci => panic!(
            "\n\n*** {test} cannot run in CI: {e} ***\n\
             (CI must run these tests as root with iproute2: see tests/netns/ci-prereqs.sh)\n"
        ),
        Err(NetnsError::NotRoot) => {
            let bar = "!".repeat(96);
            let _ = writeln!(
                std::io::stderr().lock(),
                "\n{bar}\n!!! SKIPPED: {test} needs root (network namespaces, veth/tun, tc).\n\
                 !!! Nothing was tested. Run: sudo -E cargo test -p tests {test} -- --nocapture\n\
                 !!! (Under CI, with CI set, this is a failure instead.)\n{bar}\n"
            );
            false
        }
        Err(e) => panic!("\n\n*** {test} prerequisites missing: {e} ***\n"),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn errors_say_how_to_fix() {
        assert!(NetnsError::NotRoot.to_string().starts_with("not root: "));
        assert!(NetnsError::IpMissing
            .to_string()
            .starts_with("ip not found: install iproute2"));
    }
}
