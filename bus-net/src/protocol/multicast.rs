//! The `Group` frame (`docs/PROTOCOL.md`, "Multicast data"): a publisher that sends a topic's
//! data to a multicast group tells each admitted subscriber, by unicast and with that
//! subscriber's own token, the group and the group token every group datagram ends with.
//!
//! A group datagram goes to every member at once, so it cannot end with a per-subscriber
//! token: without a pre-shared key it ends with the export's group token instead, random per
//! publisher session, known only to hosts the publisher admitted. That keeps off-path hosts
//! out; an admitted subscriber knows the group token and so can forge group data to the other
//! subscribers (as any member of a multicast group can): where that matters, use the key,
//! which seals group datagrams like any other.
//!
//! Payload, little-endian (26 bytes): the group's IPv6 address (IPv4 mapped, 16), its port
//! (`u16`), the group token (`u64`). Header: topic id and fingerprint of the topic, the
//! publisher's session, sequence number and timestamp 0; it is a downstream frame (it carries
//! [`Flags::TOKEN`](super::header::Flags::TOKEN) without a key).

use std::net::SocketAddr;

use super::control::control_header;
use super::decode::{DropReason, Frame};
use super::discovery::{read_addr, write_addr};
use super::encode::{BatchEncoder, EncodeError};
use super::header::Kind;

/// The payload length of a `Group` frame.
pub const GROUP_PAYLOAD_LEN: usize = 26;

/// Publisher to subscriber: the topic's data also goes to `group`, ending with `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupOffer {
    /// The topic id.
    pub topic_id: u64,
    /// The publisher's fingerprint of the topic.
    pub fingerprint: u64,
    /// The publisher's session.
    pub session: u64,
    /// The multicast group (a multicast address, port not 0).
    pub group: SocketAddr,
    /// What every group datagram of the topic ends with (without a key).
    pub token: u64,
}

impl GroupOffer {
    /// The `Group` of a frame.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind or an address that is not a multicast
    /// group; [`DropReason::BadLength`] for a payload of the wrong length.
    pub fn from_frame(frame: &Frame<'_>) -> Result<GroupOffer, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::Group {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        if p.len() != GROUP_PAYLOAD_LEN {
            return Err(DropReason::BadLength);
        }
        let group = read_addr(p).ok_or(DropReason::BadLength)?;
        if !group.ip().is_multicast() || group.port() == 0 {
            return Err(DropReason::BadControl);
        }
        let token = p
            .get(18..26)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        Ok(GroupOffer {
            topic_id: h.topic_id,
            fingerprint: h.fingerprint,
            session: h.session,
            group,
            token,
        })
    }
}

impl BatchEncoder<'_> {
    /// Appends a `Group` frame.
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] when it does not fit.
    pub fn push_group_offer(&mut self, offer: &GroupOffer) -> Result<(), EncodeError> {
        let mut payload = [0u8; GROUP_PAYLOAD_LEN];
        write_addr(&mut payload[..18], Some(offer.group));
        payload[18..].copy_from_slice(&offer.token.to_le_bytes());
        let header = control_header(
            Kind::Group,
            offer.topic_id,
            offer.fingerprint,
            offer.session,
        );
        self.push_raw(header, &payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_datagram;

    #[test]
    fn a_group_offer_round_trips_and_names_only_a_group() {
        let offer = GroupOffer {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            group: "239.255.0.9:7600".parse().unwrap(),
            token: 0xfeed,
        };
        let mut buf = [0u8; 200];
        let mut enc = BatchEncoder::new(&mut buf).with_token(true);
        enc.push_group_offer(&offer).unwrap();
        let mut bytes = enc.as_bytes().to_vec();
        bytes.extend_from_slice(&9u64.to_le_bytes());
        let frames = parse_datagram(&bytes, 1472).unwrap();
        assert_eq!(frames.token(), Some(9));
        let frame = frames.into_iter().next().unwrap();
        assert_eq!(GroupOffer::from_frame(&frame), Ok(offer));
        let unicast = GroupOffer {
            group: "10.0.0.1:7600".parse().unwrap(),
            ..offer
        };
        let mut buf = [0u8; 200];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_group_offer(&unicast).unwrap();
        let bytes = enc.as_bytes().to_vec();
        let frame = parse_datagram(&bytes, 1472).unwrap().next().unwrap();
        assert_eq!(GroupOffer::from_frame(&frame), Err(DropReason::BadControl));
    }
}
