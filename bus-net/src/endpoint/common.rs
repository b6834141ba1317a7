//! What every part of the endpoint uses and none of them owns: the endpoint's identity and
//! configuration, its randomness, the one way out (the egress, with the buffer control
//! datagrams are built in), its figures and its event queue.
//!
//! Inputs: the parts' calls, each with the `&mut Common` the router lends it for the call.
//! Outputs: datagrams through the egress to a [`Wire`], counts in [`NetMetrics`], [`Event`]s.
//! It decides nothing: what to send, to whom and when is the parts' business; this is where
//! a control datagram is framed for its destination (the room left by the MAC trailer or the
//! subscription token) and counted once sent.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::egress::{Egress, Wire};
use super::event::{push_event, Event};
use super::metrics::NetMetrics;
use crate::{BatchEncoder, BridgeConfig, Control, Flags, ReliableConfig, MAC_TAG_LEN};

/// Randomness for the endpoint's secrets: a keyed BLAKE3 stream from one seed, so that a
/// simulation is deterministic and a bridge (seeded from the OS) unpredictable.
pub(crate) struct Entropy {
    key: [u8; 32],
    counter: u64,
}

impl Entropy {
    pub(crate) fn new(seed: [u8; 32]) -> Self {
        Entropy {
            key: seed,
            counter: 0,
        }
    }

    pub(crate) fn next(&mut self) -> [u8; 32] {
        self.counter += 1;
        *blake3::keyed_hash(&self.key, &self.counter.to_le_bytes()).as_bytes()
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let bytes = self.next();
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(word)
    }
}

/// The endpoint's shared context (see the module docs).
pub(crate) struct Common {
    /// The endpoint's session id (the publisher session its exports carry, the subscriber
    /// session its imports' requests carry).
    pub(crate) session: u64,
    pub(crate) max_datagram: usize,
    /// The largest datagram accepted: `max_datagram`, but never less than the IPv4 default, so
    /// a dual-stack bridge (1452 by default) takes what an IPv4 peer (1472) sends it.
    pub(crate) recv_max: usize,
    pub(crate) config: BridgeConfig,
    pub(crate) entropy: Entropy,
    /// The wall clock data frames and heartbeats are stamped with.
    pub(crate) wall: fn() -> i64,
    pub(crate) egress: Egress,
    /// Control frames being built (answers, renewals, heartbeats, NAKs, retransmissions,
    /// announcements); `recv_max` long, since the answers to a datagram are packed into as
    /// much as it held.
    pub(crate) control_buf: Vec<u8>,
    pub(crate) metrics: NetMetrics,
    pub(crate) events: VecDeque<Event>,
}

impl Common {
    /// The reliable configuration of this endpoint's exports and imports: frames of at most a
    /// datagram.
    pub(crate) fn reliable_config(&self) -> ReliableConfig {
        ReliableConfig {
            max_frame: self.max_datagram,
            ..self.config.reliable
        }
    }

    /// Queues `event` for the driver (bounded: [`push_event`]).
    pub(crate) fn push_event(&mut self, event: Event) {
        push_event(&mut self.events, event);
    }

    /// The room for frames in a downstream datagram: what the MAC trailer (with a key) or the
    /// subscription token (without) leaves.
    pub(crate) fn control_room(&self) -> usize {
        self.max_datagram - self.egress.trailer_len()
    }

    /// The MAC trailer's length with a key, else 0: what a sealed control datagram adds.
    pub(crate) fn seal_len(&self) -> usize {
        if self.egress.mac.is_some() {
            MAC_TAG_LEN
        } else {
            0
        }
    }

    /// Sends `control_buf[..len]` to `dest` alone; `token`: downstream frames to a
    /// subscriber with that token.
    pub(crate) fn send_control_buf(
        &mut self,
        wire: &mut dyn Wire,
        len: usize,
        dest: SocketAddr,
        token: Option<u64>,
    ) {
        let frames = self.control_buf.get(..len).unwrap_or_default();
        let (datagrams, bytes) = self.egress.send(
            wire,
            frames,
            token.is_some(),
            std::iter::once((dest, token.unwrap_or(0))),
        );
        self.metrics.sent(datagrams, bytes);
    }

    /// Sends one control frame (a request) to `dest`.
    pub(crate) fn send_control(
        &mut self,
        wire: &mut dyn Wire,
        control: &Control,
        dest: SocketAddr,
    ) {
        self.send_request(wire, control, dest, false);
    }

    /// Sends a request of an import to its publisher; `group`: a `Subscribe` says that the
    /// import receives the topic's multicast group ([`Flags::GROUP`]).
    pub(crate) fn send_request(
        &mut self,
        wire: &mut dyn Wire,
        control: &Control,
        dest: SocketAddr,
        group: bool,
    ) {
        let room = self.control_room();
        let mut enc = BatchEncoder::new(&mut self.control_buf[..room]);
        if enc.push_control(control).is_err() {
            return; // Cannot happen: `max_datagram` holds a control frame (checked at bind).
        }
        let len = enc.len();
        if group && matches!(control, Control::Subscribe { .. }) {
            if let Some(flags) = self.control_buf.get_mut(5) {
                *flags |= Flags::GROUP;
            }
        }
        self.send_control_buf(wire, len, dest, None);
    }
}
