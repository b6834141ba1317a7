//! The one way out of a bridge: every native datagram (an export's data, a direct topic's
//! data, heartbeats, retransmissions, handshake answers, requests) leaves through
//! [`send_frames`], which protects it as the bridge's configuration says and counts it.
//!
//! Protection ([`Protect`]):
//! - with a pre-shared key, the frames are sealed once (a copy in the sealing buffer gets the
//!   MAC trailer) and the same sealed bytes go to every destination;
//! - without one, a datagram of downstream frames (marked `Flags::TOKEN` by their encoder) is
//!   followed by the subscription token of each destination: for several destinations the
//!   kernel gathers the shared frames and each 8-byte token (two iovecs), so the payload is
//!   written once whatever the fan-out; for one, frames and token are put together in the
//!   scratch buffer and sent as one piece.
//! - handshake frames and requests go as they are.

use std::net::SocketAddr;

use crate::io::SUFFIX_LEN;
use crate::{FrameMac, SendBatch, UdpEndpoint, TOKEN_LEN};

const _: () = assert!(
    TOKEN_LEN == SUFFIX_LEN,
    "the token is the io layer's suffix"
);

/// How a datagram is protected on its way out. See the module docs.
pub(crate) enum Protect<'a> {
    /// As it is: handshake frames, requests, the compat format.
    Plain,
    /// Each destination's subscription token after the frames (downstream frames, no key),
    /// using the buffer to put frames and token together for a lone destination.
    Token(&'a mut [u8]),
    /// Sealed with the pre-shared key (if the key's policy covers these frames), using the
    /// buffer as room for the sealed copy.
    Seal(&'a FrameMac, &'a mut [u8]),
}

impl<'a> Protect<'a> {
    /// The protection of a bridge with `mac` (its key, if any) for frames that are
    /// `downstream` (data, heartbeats, retransmissions to a subscriber) or not.
    pub(crate) fn of(mac: Option<&'a FrameMac>, scratch: &'a mut [u8], downstream: bool) -> Self {
        match mac {
            Some(mac) => Protect::Seal(mac, scratch),
            None if downstream => Protect::Token(scratch),
            None => Protect::Plain,
        }
    }
}

/// What [`send_frames`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Datagrams the kernel took.
    pub(crate) datagrams: usize,
    /// Bytes of those datagrams, in all.
    pub(crate) bytes: usize,
}

/// Sends `frames` (whole frames, as an encoder made them) to every `(address, token)` of
/// `dests`, protected as `protect` says, in batches of `batch.capacity()` per system call.
/// A send that fails for one destination is counted by the endpoint and the others go on.
///
/// # Errors
/// A fatal socket error: nothing more should be sent on `endpoint`.
pub(crate) fn send_frames(
    endpoint: &mut UdpEndpoint,
    batch: &mut SendBatch,
    frames: &[u8],
    protect: Protect<'_>,
    dests: impl Iterator<Item = (SocketAddr, u64)>,
) -> std::io::Result<Sent> {
    let (bytes, token) = match protect {
        Protect::Plain => (frames, false),
        Protect::Token(buf) => return send_tokened(endpoint, batch, frames, buf, dests),
        Protect::Seal(mac, buf) if mac.must_seal(frames) && buf.len() >= frames.len() => {
            let (head, _) = buf.split_at_mut(frames.len());
            head.copy_from_slice(frames);
            match mac.seal(buf, frames.len()) {
                Ok(len) => (buf.get(..len).unwrap_or_default(), false),
                // Cannot happen: room was kept and the frames are whole.
                Err(_) => return Ok(Sent::default()),
            }
        }
        Protect::Seal(..) => (frames, false),
    };
    let each = bytes.len() + if token { TOKEN_LEN } else { 0 };
    let datagrams = endpoint.send_batch_suffixed(
        batch,
        dests.map(|(addr, t)| (bytes, token.then(|| t.to_le_bytes()), addr)),
    )?;
    Ok(Sent {
        datagrams,
        bytes: datagrams * each,
    })
}

/// [`send_frames`] for downstream frames without a key: `frames` then each destination's
/// token.
fn send_tokened(
    endpoint: &mut UdpEndpoint,
    batch: &mut SendBatch,
    frames: &[u8],
    scratch: &mut [u8],
    dests: impl Iterator<Item = (SocketAddr, u64)>,
) -> std::io::Result<Sent> {
    let each = frames.len() + TOKEN_LEN;
    let mut dests = dests.peekable();
    let Some((addr, token)) = dests.next() else {
        return Ok(Sent::default());
    };
    // NB: one destination (the round trip's case) goes as one contiguous piece by `sendto`:
    // copying the frames here is cheaper than the message header and two iovecs `sendmsg`
    // makes the kernel copy in (the `udp` suite's round trip, `llbus` against `llbus-mac`).
    if dests.peek().is_none() {
        if let Some(whole) = scratch.get_mut(..each) {
            let (head, tail) = whole.split_at_mut(frames.len());
            head.copy_from_slice(frames);
            tail.copy_from_slice(&token.to_le_bytes());
            let datagrams = endpoint.send_batch(batch, [(&*whole, addr)])?;
            return Ok(Sent {
                datagrams,
                bytes: datagrams * each,
            });
        }
    }
    let datagrams = endpoint.send_batch_suffixed(
        batch,
        std::iter::once((addr, token))
            .chain(dests)
            .map(|(a, t)| (frames, Some(t.to_le_bytes()), a)),
    )?;
    Ok(Sent {
        datagrams,
        bytes: datagrams * each,
    })
}
