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
//! Shaping applies to packets *leaving* a side, like a root netem qdisc on that side's device:
//! `shape(Side::A, ..)` impairs traffic from A to B.

use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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

/// Link impairment, with netem's meaning. All zero (the default) is a clean link.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Netem {
    /// Percentage of packets dropped, independently at random.
    pub loss_pct: f64,
    /// Percentage of packets sent twice.
    pub duplicate_pct: f64,
    /// Percentage of packets sent at once while the rest wait `delay_ms`, which reorders them.
    /// Needs `delay_ms > 0`.
    pub reorder_pct: f64,
    /// Delay added to every packet (except the reordered ones), in milliseconds.
    pub delay_ms: u32,
    /// Uniform random variation of the delay, plus or minus, in milliseconds.
    pub jitter_ms: u32,
    /// Packets the link may hold at once; 0 means the default (10,000).
    pub limit: u32,
}

impl Netem {
    fn check(&self) -> Result<(), NetnsError> {
        let pct = [
            ("loss_pct", self.loss_pct),
            ("duplicate_pct", self.duplicate_pct),
            ("reorder_pct", self.reorder_pct),
        ];
        for (name, v) in pct {
            if !(0.0..=100.0).contains(&v) {
                return Err(NetnsError::BadShape(format!(
                    "{name} = {v} is not a percentage in 0..=100"
                )));
            }
        }
        if self.reorder_pct > 0.0 && self.delay_ms == 0 {
            return Err(NetnsError::BadShape(
                "reorder_pct needs delay_ms > 0 (netem reorders by sending some packets \
                 ahead of the delayed ones)"
                    .into(),
            ));
        }
        if self.jitter_ms > self.delay_ms {
            return Err(NetnsError::BadShape(
                "jitter_ms must not exceed delay_ms".into(),
            ));
        }
        Ok(())
    }

    fn limit_or_default(&self) -> u32 {
        if self.limit == 0 {
            10_000
        } else {
            self.limit
        }
    }

    /// The arguments after `netem` for `tc qdisc replace`.
    fn tc_args(&self) -> Vec<String> {
        let mut a = vec!["limit".to_string(), self.limit_or_default().to_string()];
        if self.delay_ms > 0 {
            a.push("delay".into());
            a.push(format!("{}ms", self.delay_ms));
            if self.jitter_ms > 0 {
                a.push(format!("{}ms", self.jitter_ms));
            }
        }
        if self.loss_pct > 0.0 {
            a.push("loss".into());
            a.push(format!("{}%", self.loss_pct));
        }
        if self.duplicate_pct > 0.0 {
            a.push("duplicate".into());
            a.push(format!("{}%", self.duplicate_pct));
        }
        if self.reorder_pct > 0.0 {
            a.push("reorder".into());
            a.push(format!("{}%", self.reorder_pct));
        }
        a
    }
}

/// Why the harness could not do something. `Display` says what failed and how to fix it.
#[derive(Debug)]
pub enum NetnsError {
    /// Neither root nor the needed capabilities.
    NotRoot,
    /// The `ip` program (iproute2) is missing.
    IpMissing,
    /// The `tc` program (iproute2) is missing.
    TcMissing,
    /// `LLBUS_NETNS_LINK=veth` was asked for but the kernel has no netem qdisc.
    NetemUnavailable(String),
    /// The kernel has no netem and TUN devices cannot be made either.
    NoShapableLink(String),
    /// A shaping request that netem would refuse.
    BadShape(String),
    /// A command ran and failed.
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status, as text.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A command did not finish in time (it was killed).
    Timeout {
        /// The command line.
        cmd: String,
        /// How long it was given.
        after: Duration,
    },
    /// An I/O error, with what was being done.
    Io {
        /// What the harness was doing.
        what: String,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetnsError::NotRoot => f.write_str(
                "not root: network namespaces need root (or CAP_SYS_ADMIN and CAP_NET_ADMIN); \
                 run as root, e.g. `sudo -E cargo test -p tests --test netns_harness`",
            ),
            NetnsError::IpMissing => f.write_str(
                "ip not found: install iproute2 (`apt-get install -y iproute2`, or run \
                 tests/netns/ci-prereqs.sh)",
            ),
            NetnsError::TcMissing => f.write_str(
                "tc not found: install iproute2 (`apt-get install -y iproute2`, or run \
                 tests/netns/ci-prereqs.sh)",
            ),
            NetnsError::NetemUnavailable(why) => write!(
                f,
                "netem qdisc unavailable ({why}): this kernel lacks CONFIG_NET_SCH_NETEM / \
                 sch_netem; load the module (`modprobe sch_netem`), use a kernel with it, or \
                 unset LLBUS_NETNS_LINK=veth to use the userspace tun wire"
            ),
            NetnsError::NoShapableLink(why) => write!(
                f,
                "no shapable link: the kernel has no netem qdisc and tun devices failed \
                 ({why}); enable CONFIG_NET_SCH_NETEM or CONFIG_TUN (/dev/net/tun)"
            ),
            NetnsError::BadShape(why) => write!(f, "bad netem settings: {why}"),
            NetnsError::Command {
                cmd,
                status,
                stderr,
            } => write!(f, "command failed ({status}): `{cmd}`: {}", stderr.trim()),
            NetnsError::Timeout { cmd, after } => {
                write!(
                    f,
                    "command timed out after {after:?} and was killed: `{cmd}`"
                )
            }
            NetnsError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for NetnsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetnsError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NetnsError {
    let what = what.into();
    move |source| NetnsError::Io { what, source }
}

fn cmd_line(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion with its output captured, killing it after `timeout`.
pub fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, NetnsError> {
    let line = cmd_line(cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound && cmd.get_program() == "ip" {
                NetnsError::IpMissing
            } else if e.kind() == io::ErrorKind::NotFound && cmd.get_program() == "tc" {
                NetnsError::TcMissing
            } else {
                NetnsError::Io {
                    what: format!("cannot start `{line}`"),
                    source: e,
                }
            }
        })?;
    wait_with_timeout(child, timeout).map_err(|e| match e {
        NetnsError::Timeout { after, .. } => NetnsError::Timeout { cmd: line, after },
        e => e,
    })
}

/// Waits for `child` (whose stdout and stderr, if piped, are collected), killing it if it has not
/// exited after `timeout`. Returns its output, or [`NetnsError::Timeout`] once it is killed.
pub fn wait_with_timeout(mut child: Child, timeout: Duration) -> Result<Output, NetnsError> {
    fn drain<R: Read + Send + 'static>(r: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
        r.map(|mut r| {
            thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().map_err(io_err("waiting for a child"))? {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => thread::sleep(Duration::from_millis(5)),
        }
    };
    let stdout = out
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    let stderr = err
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(NetnsError::Timeout {
            cmd: format!(
                "pid {} (stderr so far: {})",
                child.id(),
                String::from_utf8_lossy(&stderr).trim()
            ),
            after: timeout,
        }),
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
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns_name(side)]).arg(program);
        cmd
    }

    /// `cmd` (its program, arguments, environment changes and working directory), run inside
    /// `side`'s namespace. Stdio settings are not copied (`Command` does not expose them).
    pub fn wrap(&self, side: Side, cmd: &Command) -> Command {
        let mut w = self.command(side, cmd.get_program());
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
        let mut w = self.wrap(side, cmd);
        let line = cmd_line(&w);
        w.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_err(format!("cannot start `{line}`")))
    }
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

/// A child process that is killed (and reaped) when dropped, unless taken back with
/// [`KillOnDrop::into_inner`].
#[derive(Debug)]
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Guards `child`.
    pub fn new(child: Child) -> Self {
        KillOnDrop(Some(child))
    }

    /// The child, no longer guarded.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("child present until taken")
    }

    /// The guarded child.
    pub fn child_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("child present until taken")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// The lines of a child's stdout, read on a thread so that the caller can wait with a timeout
/// (`recv_timeout`). The channel closes when the child closes its stdout.
pub fn lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    rx
}

// ---------------------------------------------------------------------------------------------
// The tun wire: netem in userspace, for kernels without sch_netem.

/// A thread that copies IP packets between a TUN device in each namespace, shaping each
/// direction like a root netem qdisc on the sending side.
#[derive(Debug)]
struct Wire {
    shapes: Arc<Mutex<[Netem; 2]>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Wire {
    /// Makes `IFNAME` as a TUN device in each namespace (by path of its `ip netns` file) and
    /// starts forwarding between them.
    fn start(ns_paths: [String; 2]) -> Result<Wire, NetnsError> {
        // setns changes only the calling thread's namespace; do it on a throwaway thread so the
        // caller's thread stays where it is. A TUN device is made in the namespace of the thread
        // that opens /dev/net/tun.
        let opener = thread::spawn(move || -> Result<[OwnedFd; 2], NetnsError> {
            let a = open_tun_in(&ns_paths[0])?;
            let b = open_tun_in(&ns_paths[1])?;
            Ok([a, b])
        });
        let fds = opener.join().map_err(|_| NetnsError::Io {
            what: "tun opener thread panicked".into(),
            source: io::Error::other("panic"),
        })??;
        let shapes = Arc::new(Mutex::new([Netem::default(); 2]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let shapes = Arc::clone(&shapes);
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("llbus-netns-wire".into())
                .spawn(move || wire_loop(fds, &shapes, &stop))
                .map_err(io_err("cannot start the wire thread"))?
        };
        Ok(Wire {
            shapes,
            stop,
            thread: Some(thread),
        })
    }

    fn shape(&self, side: Side, netem: Netem) {
        let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
        shapes[side.index()] = netem;
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

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
fn open_tun_in(ns_path: &str) -> Result<OwnedFd, NetnsError> {
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

/// xorshift64*: plenty for drawing impairments.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng((t ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: f64) -> bool {
        pct > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) * 100.0 < pct
    }

    /// Uniform in `-j..=j`.
    fn jitter(&mut self, j: u32) -> i64 {
        if j == 0 {
            0
        } else {
            (self.next() % (2 * u64::from(j) * 1000 + 1)) as i64 - i64::from(j) * 1000
        }
    }
}

/// A packet waiting for its time, ordered by due time then arrival.
struct Held {
    due: Instant,
    order: u64,
    to: usize,
    packet: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.order) == (o.due, o.order)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (o.due, o.order).cmp(&(self.due, self.order))
    }
}

fn write_packet(fd: &OwnedFd, packet: &[u8]) {
    // SAFETY: `packet` is a valid buffer of `packet.len()` bytes; a TUN write injects one packet.
    // A failed write (a full queue) is a dropped packet, as on a real link.
    unsafe {
        libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len());
    }
}

fn wire_loop(fds: [OwnedFd; 2], shapes: &Mutex<[Netem; 2]>, stop: &AtomicBool) {
    let mut rng = Rng::seeded();
    let mut held: std::collections::BinaryHeap<Held> = std::collections::BinaryHeap::new();
    let mut order = 0u64;
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        // Release what is due.
        let now = Instant::now();
        while held.peek().is_some_and(|h| h.due <= now) {
            let h = held.pop().expect("peeked");
            write_packet(&fds[h.to], &h.packet);
        }
        let wait_ms = held
            .peek()
            // Rounded up: a packet due in under a millisecond must not make this a busy loop
            // (it then leaves up to 1 ms late, which the delay emulation tolerates).
            .map(|h| {
                h.due
                    .saturating_duration_since(now)
                    .as_micros()
                    .div_ceil(1000) as i32
            })
            .unwrap_or(20)
            .clamp(0, 20);
        let mut pfds = [
            libc::pollfd {
                fd: fds[0].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fds[1].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `pfds` is a valid array of two pollfd structs.
        let ready = unsafe { libc::poll(pfds.as_mut_ptr(), 2, wait_ms) };
        if ready <= 0 {
            continue;
        }
        let current = *shapes.lock().unwrap_or_else(|p| p.into_inner());
        for from in 0..2 {
            if pfds[from].revents & libc::POLLIN == 0 {
                continue;
            }
            let to = 1 - from;
            let shape = current[from];
            // Drain what is queued on this side (bounded, to stay fair to the other side).
            for _ in 0..256 {
                // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes.
                let n = unsafe {
                    libc::read(fds[from].as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                };
                if n <= 0 {
                    break;
                }
                let packet = &buf[..n as usize];
                if rng.chance(shape.loss_pct) {
                    continue;
                }
                let copies = if rng.chance(shape.duplicate_pct) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let ahead = rng.chance(shape.reorder_pct);
                    if shape.delay_ms == 0 || ahead {
                        write_packet(&fds[to], packet);
                    } else {
                        let delay_us = (i64::from(shape.delay_ms) * 1000
                            + rng.jitter(shape.jitter_ms))
                        .max(0) as u64;
                        let limit = shape.limit_or_default() as usize;
                        if held.len() >= limit {
                            continue; // queue full: dropped, like netem over its limit
                        }
                        order += 1;
                        held.push(Held {
                            due: Instant::now() + Duration::from_micros(delay_us),
                            order,
                            to,
                            packet: packet.to_vec(),
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn netem_arguments_match_tc_syntax() {
        let n = Netem {
            loss_pct: 5.0,
            duplicate_pct: 1.0,
            reorder_pct: 10.0,
            delay_ms: 1,
            ..Netem::default()
        };
        assert_eq!(
            n.tc_args().join(" "),
            "limit 10000 delay 1ms loss 5% duplicate 1% reorder 10%"
        );
        let n = Netem {
            loss_pct: 0.5,
            delay_ms: 5,
            jitter_ms: 2,
            limit: 500,
            ..Netem::default()
        };
        assert_eq!(n.tc_args().join(" "), "limit 500 delay 5ms 2ms loss 0.5%");
        assert_eq!(Netem::default().tc_args().join(" "), "limit 10000");
    }

    #[test]
    fn netem_settings_are_checked() {
        let reorder_without_delay = Netem {
            reorder_pct: 10.0,
            ..Netem::default()
        };
        assert!(matches!(
            reorder_without_delay.check(),
            Err(NetnsError::BadShape(_))
        ));
        let too_much = Netem {
            loss_pct: 101.0,
            ..Netem::default()
        };
        assert!(too_much.check().is_err());
        let jitter_over_delay = Netem {
            delay_ms: 1,
            jitter_ms: 2,
            ..Netem::default()
        };
        assert!(jitter_over_delay.check().is_err());
        assert!(Netem::default().check().is_ok());
    }

    #[test]
    fn wire_rng_draws_close_to_the_asked_percentage() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let hits = (0..100_000).filter(|_| rng.chance(5.0)).count();
        assert!((4_500..=5_500).contains(&hits), "{hits}");
        assert!(!(0..1000).any(|_| rng.chance(0.0)));
        assert!((0..1000).all(|_| rng.chance(100.0)));
    }

    #[test]
    fn errors_say_how_to_fix() {
        assert!(NetnsError::NotRoot.to_string().starts_with("not root: "));
        assert!(NetnsError::IpMissing
            .to_string()
            .starts_with("ip not found: install iproute2"));
    }
}
