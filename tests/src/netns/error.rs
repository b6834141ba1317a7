//! What can go wrong making and shaping the hosts; each error says how to fix it.

use std::fmt;
use std::io;
use std::time::Duration;

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
                 run as root, e.g. `sudo -E cargo test -p tests netns`",
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

pub(super) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NetnsError {
    let what = what.into();
    move |source| NetnsError::Io { what, source }
}
