//! A UDP socket as the endpoint's [`Wire`]: one `sendmmsg` per batch of destinations (a
//! gather of the shared bytes and each destination's suffix when suffixed). A socket that
//! fails for good is recorded, and nothing more is sent on it.

use std::net::SocketAddr;

use crate::endpoint::Wire;
use crate::{SendBatch, UdpEndpoint, TOKEN_LEN};

const _: () = assert!(
    TOKEN_LEN == crate::io::SUFFIX_LEN,
    "the token is the io layer's suffix"
);

/// A socket as an [`Endpoint`](crate::Endpoint)'s [`Wire`]: what the bridge sends through,
/// and what a tool that drives an endpoint itself can use. A send that fails for its
/// destination is counted by the socket; one that fails for good is kept in `failed`, and
/// nothing more is sent.
pub struct SocketWire<'a> {
    pub(crate) socket: &'a mut UdpEndpoint,
    pub(crate) batch: &'a mut SendBatch,
    pub(crate) failed: &'a mut Option<std::io::Error>,
}

impl std::fmt::Debug for SocketWire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketWire")
            .field("local", &self.socket.local_addr())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<'a> SocketWire<'a> {
    /// Sends on `socket`, with `batch` (allocated once, reused), keeping a fatal socket error
    /// in `failed`.
    pub fn new(
        socket: &'a mut UdpEndpoint,
        batch: &'a mut SendBatch,
        failed: &'a mut Option<std::io::Error>,
    ) -> Self {
        SocketWire {
            socket,
            batch,
            failed,
        }
    }
}

impl Wire for SocketWire<'_> {
    #[inline]
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        let sent = if suffixed {
            self.socket.send_batch_suffixed(
                self.batch,
                dests
                    .iter()
                    .map(|&(addr, suffix)| (bytes, Some(suffix.to_le_bytes()), addr)),
            )
        } else {
            self.socket
                .send_batch(self.batch, dests.iter().map(|&(addr, _)| (bytes, addr)))
        };
        match sent {
            Ok(n) => n,
            Err(e) => {
                *self.failed = Some(e);
                0
            }
        }
    }
}
