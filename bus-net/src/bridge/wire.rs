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

/// A socket, its send batch and where its failure is kept.
pub(crate) struct SocketWire<'a> {
    pub(crate) socket: &'a mut UdpEndpoint,
    pub(crate) batch: &'a mut SendBatch,
    pub(crate) failed: &'a mut Option<std::io::Error>,
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
