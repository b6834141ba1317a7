//! The one way out: every native datagram (an export's data, a direct topic's data,
//! heartbeats, retransmissions, handshake answers, requests) is protected here, as the
//! configuration says, and handed to a [`Wire`]: the bridge's socket, a direct sender's socket,
//! or the simulator's network.
//!
//! Protection:
//! - with a pre-shared key, the frames are sealed once (a copy in the scratch buffer gets the
//!   MAC trailer) and the same sealed bytes go to every destination;
//! - without one, a datagram of downstream frames (marked `Flags::TOKEN` by their encoder) is
//!   followed by the subscription token of each destination: for several destinations the
//!   wire gathers the shared frames and each 8-byte token (two iovecs on a socket), so the
//!   payload is written once whatever the fan-out; for one, frames and token are put together
//!   in the scratch buffer and sent as one piece;
//! - handshake frames and requests go as they are.

use std::net::SocketAddr;

use crate::{BridgeConfig, FrameMac, TOKEN_LEN};

/// Where an [`Endpoint`](super::Endpoint)'s datagrams go. The bridge's implementation sends
/// on its socket (one `sendmmsg` per batch of destinations); a simulator's puts them on its
/// network. A failure is the wire's to record: the endpoint only counts what was taken.
pub trait Wire {
    /// Sends `bytes` to every address of `dests`; with `suffixed`, each datagram is followed
    /// by its destination's 8-byte suffix (the `u64`, little-endian). Returns how many
    /// datagrams were taken.
    fn send(&mut self, bytes: &[u8], dests: &[(SocketAddr, u64)], suffixed: bool) -> usize;
}

/// What leaves the endpoint: the pre-shared key's MAC, if any, and the buffers protecting a
/// datagram needs (allocated once).
pub(crate) struct Egress {
    pub(crate) mac: Option<FrameMac>,
    /// Where a datagram is copied to be sealed, or put together with its token.
    scratch: Vec<u8>,
    /// The destinations of the datagram being sent (capacity: a topic's subscribers).
    dests: Vec<(SocketAddr, u64)>,
}

impl Egress {
    /// An egress for datagrams of at most `max_datagram` bytes to at most `fan_out`
    /// destinations at once.
    pub(crate) fn new(mac: Option<FrameMac>, max_datagram: usize, fan_out: usize) -> Self {
        Egress {
            mac,
            scratch: vec![0; max_datagram + TOKEN_LEN],
            dests: Vec::with_capacity(fan_out.max(1)),
        }
    }

    /// The bytes after the last frame of a downstream datagram: the MAC trailer with a key,
    /// the subscription token without.
    pub(crate) fn trailer_len(&self) -> usize {
        match &self.mac {
            Some(_) => crate::MAC_TAG_LEN,
            None => TOKEN_LEN,
        }
    }

    /// Sends `frames` to every `(address, token)` of `dests`: `downstream` frames (data,
    /// heartbeats, retransmissions) are sealed with a key or followed by each destination's
    /// token without one; the others are sealed with a key (if its policy covers them) or go
    /// as they are. Returns the datagrams taken and their bytes.
    pub(crate) fn send(
        &mut self,
        wire: &mut dyn Wire,
        frames: &[u8],
        downstream: bool,
        dests: impl Iterator<Item = (SocketAddr, u64)>,
    ) -> (usize, usize) {
        self.dests.clear();
        // At most the capacity: a table never holds more subscribers of one topic.
        for d in dests {
            if self.dests.len() == self.dests.capacity() {
                break;
            }
            self.dests.push(d);
        }
        protect_and_send(
            wire,
            self.mac.as_ref(),
            &mut self.scratch,
            frames,
            downstream,
            &self.dests,
        )
    }
}

/// Protects `frames` (see the module docs) and sends them to `dests` on `wire`, using
/// `scratch` (at least a datagram and a token long) for the sealed or tokened copy. Returns
/// the datagrams taken and their bytes. Shared by the endpoint and the direct sender.
pub(crate) fn protect_and_send(
    wire: &mut dyn Wire,
    mac: Option<&FrameMac>,
    scratch: &mut [u8],
    frames: &[u8],
    downstream: bool,
    dests: &[(SocketAddr, u64)],
) -> (usize, usize) {
    if dests.is_empty() || frames.is_empty() {
        return (0, 0);
    }
    let (bytes, suffixed): (&[u8], bool) = match mac {
        Some(mac) if mac.must_seal(frames) && scratch.len() >= frames.len() => {
            let (head, _) = scratch.split_at_mut(frames.len());
            head.copy_from_slice(frames);
            match mac.seal(scratch, frames.len()) {
                Ok(len) => (scratch.get(..len).unwrap_or_default(), false),
                // Cannot happen: room was kept and the frames are whole.
                Err(_) => return (0, 0),
            }
        }
        Some(_) => (frames, false),
        None if downstream => {
            let each = frames.len() + TOKEN_LEN;
            // NB: one destination (the round trip's case) goes as one contiguous piece:
            // copying the frames here is cheaper than the message header and two iovecs
            // `sendmsg` makes the kernel copy in (the `udp` suite's round trip, `llbus`
            // against `llbus-mac`).
            if let ([(_, token)], Some(whole)) = (dests, scratch.get_mut(..each)) {
                let (head, tail) = whole.split_at_mut(frames.len());
                head.copy_from_slice(frames);
                tail.copy_from_slice(&token.to_le_bytes());
                let taken = wire.send(whole, dests, false);
                return (taken, taken * each);
            }
            (frames, true)
        }
        None => (frames, false),
    };
    let taken = wire.send(bytes, dests, suffixed);
    let each = bytes.len() + if suffixed { TOKEN_LEN } else { 0 };
    (taken, taken * each)
}

/// The MAC of a configuration with a pre-shared key.
pub(crate) fn mac_of(config: &BridgeConfig) -> Option<FrameMac> {
    config.psk.as_ref().map(|key| {
        let mut mac = FrameMac::with_key_id(config.psk_id, key);
        for (id, key) in &config.psk_accept {
            mac = mac.also_accept(*id, key);
        }
        if config.mac_data {
            mac
        } else {
            mac.control_only()
        }
    })
}
