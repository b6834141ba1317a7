//! Set-ups that several modules of this binary use.

use std::net::SocketAddr;

/// Any free port on the IPv4 loopback address, to bind a bridge or a socket to.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
