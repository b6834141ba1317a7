//! The discovery frames: `Announce` (what a bridge exports, where) and `Query` (who exports
//! this topic?), in the manner of DDS's SPDP and Zenoh's scouting (`docs/PROTOCOL.md`,
//! "Discovery").
//!
//! A bridge announces its exports on a discovery channel (a multicast group, unicast peers):
//! one `Announce` frame per datagram, the exports split over as many parts as they need. An
//! announcement only proposes: a subscriber that acts on it still subscribes with the
//! address-proving handshake, so a forged one can make it try a subscription, never redirect
//! or feed one.
//!
//! Header of both kinds: topic id (a `Query`: the topic asked for, 0 for every topic; an
//! `Announce`: 0), fingerprint 0, the sender's session id; an `Announce` carries its count in
//! the session (from 1) as sequence number and its send time as timestamp, a `Query` 0 in both.
//!
//! `Announce` payload, little-endian:
//!
//! | offset | size | field                                                            |
//! |-------:|-----:|------------------------------------------------------------------|
//! | 0      | 4    | announcement period, ms (`u32`): expire the sender after 3 missed |
//! | 4      | 8    | uptime, ms (`u64`)                                                |
//! | 12     | 1    | part (from 0)                                                     |
//! | 13     | 1    | parts                                                             |
//! | 14     | 18   | data address: IPv6 (IPv4 mapped; `::` = the datagram's source IP), port `u16` |
//! | 32     | 18   | multicast group of the data, or all zero for none                |
//! | 50     | 2    | entries (`u16`)                                                   |
//! | 52     | ...  | entries: topic id `u64`, fingerprint `u64`, flags `u8` (bit 0: reliable, bit 1: a service), name length `u8`, name (UTF-8) |
//!
//! `Query` payload: zero padding of any length. The answer (one `Announce` of the topic's
//! entries, to the asker alone) is never larger than the query: an asker pads its query to
//! [`QUERY_LEN`].

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::control::control_header;
use super::decode::{DropReason, Frame};
use super::encode::{BatchEncoder, EncodeError};
use super::header::Kind;

/// The fixed part of an `Announce` payload, before its entries.
pub const ANNOUNCE_FIXED_LEN: usize = 52;
/// An entry's bytes before its name.
const ENTRY_FIXED_LEN: usize = 18;
/// The longest topic name an announcement carries (a longer one is not announced).
pub const MAX_ANNOUNCED_NAME: usize = 200;
/// The size an asker pads its `Query` datagram to: room for an answer with one entry of the
/// longest name, sealed.
pub const QUERY_LEN: usize = 512;
/// An encoded address: 16 bytes of IPv6, 2 of port.
const ADDR_LEN: usize = 18;
/// An entry's flag: the topic is exported reliably (history, NAKs).
pub const ENTRY_RELIABLE: u8 = 0x01;
/// An entry's flag: the entry is a served service (`docs/PROTOCOL.md`, "Services"), not a
/// topic of data: its fingerprint is `Request<Req>`'s, what a caller subscribes with.
pub const ENTRY_SERVICE: u8 = 0x02;

/// One exported topic in an announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnouncedTopic<'a> {
    /// The topic id.
    pub topic_id: u64,
    /// The schema fingerprint the publisher serves.
    pub fingerprint: u64,
    /// Whether it is exported reliably (history, NAKs).
    pub reliable: bool,
    /// Whether it is a served service rather than a topic of data ([`ENTRY_SERVICE`]).
    pub service: bool,
    /// The topic's name, as the publisher sent it (untrusted: escape before printing).
    pub name: &'a [u8],
}

/// An `Announce` frame, decoded (its entries are read with [`Announce::topics`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce<'a> {
    /// The announcing bridge's session id.
    pub session: u64,
    /// The announcement's number in that session.
    pub seq: u64,
    /// How often the bridge announces, ms.
    pub period_ms: u32,
    /// How long the bridge has run, ms.
    pub uptime_ms: u64,
    /// This datagram's part (from 0) of `parts`.
    pub part: u8,
    /// How many datagrams the announcement takes.
    pub parts: u8,
    /// The bridge's data address; an unspecified IP means the datagram's source IP.
    pub data: SocketAddr,
    /// The multicast group its data goes to, if any.
    pub group: Option<SocketAddr>,
    entries: u16,
    body: &'a [u8],
}

/// The fixed fields of an announcement being encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceHead {
    /// The announcing session.
    pub session: u64,
    /// The announcement's number in it.
    pub seq: u64,
    /// The send timestamp (ns since the UNIX epoch).
    pub timestamp_ns: i64,
    /// How often the bridge announces, ms.
    pub period_ms: u32,
    /// How long it has run, ms.
    pub uptime_ms: u64,
    /// The data address (an unspecified IP: the datagram's source).
    pub data: SocketAddr,
    /// The multicast group of its data, if any.
    pub group: Option<SocketAddr>,
}

/// A `Query` frame, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// The asking session.
    pub session: u64,
    /// The topic asked for; 0 for every topic.
    pub topic_id: u64,
}

fn le_u64(p: &[u8], at: usize) -> u64 {
    p.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Writes `addr` (all zero for `None`) as 16 bytes of IPv6 (IPv4 mapped) and a port.
pub(crate) fn write_addr(out: &mut [u8], addr: Option<SocketAddr>) {
    let Some(addr) = addr else {
        out.fill(0);
        return;
    };
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    if let Some(dst) = out.get_mut(..16) {
        dst.copy_from_slice(&ip.octets());
    }
    if let Some(dst) = out.get_mut(16..ADDR_LEN) {
        dst.copy_from_slice(&addr.port().to_le_bytes());
    }
}

/// Reads what [`write_addr`] wrote (IPv4-mapped addresses as IPv4).
pub(crate) fn read_addr(p: &[u8]) -> Option<SocketAddr> {
    let ip: [u8; 16] = p.get(..16)?.try_into().ok()?;
    let port = u16::from_le_bytes(p.get(16..ADDR_LEN)?.try_into().ok()?);
    let ip = Ipv6Addr::from(ip);
    let ip = match ip.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(ip),
    };
    Some(SocketAddr::new(ip, port))
}

impl<'a> Announce<'a> {
    /// The `Announce` of a frame.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind, no parts, a part past the last, or a data
    /// address of port 0; [`DropReason::BadLength`] for a payload shorter than its fixed part
    /// or whose entries do not fill it exactly.
    pub fn from_frame(frame: &Frame<'a>) -> Result<Announce<'a>, DropReason> {
        let h = &frame.header;
        if h.kind != Kind::Announce {
            return Err(DropReason::BadControl);
        }
        let p = frame.payload;
        let fixed = p.get(..ANNOUNCE_FIXED_LEN).ok_or(DropReason::BadLength)?;
        let body = p.get(ANNOUNCE_FIXED_LEN..).unwrap_or_default();
        let period_ms = u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]);
        let (part, parts) = (fixed[12], fixed[13]);
        let data = read_addr(&fixed[14..32]).ok_or(DropReason::BadLength)?;
        let group_bytes = &fixed[32..50];
        let group = if group_bytes.iter().all(|&b| b == 0) {
            None
        } else {
            Some(read_addr(group_bytes).ok_or(DropReason::BadLength)?)
        };
        let entries = u16::from_le_bytes([fixed[50], fixed[51]]);
        if parts == 0 || part >= parts || data.port() == 0 || period_ms == 0 {
            return Err(DropReason::BadControl);
        }
        let announce = Announce {
            session: h.session,
            seq: h.seq,
            period_ms,
            uptime_ms: le_u64(fixed, 4),
            part,
            parts,
            data,
            group,
            entries,
            body,
        };
        // Every entry must be whole and the last must end the payload.
        let mut walked = 0usize;
        let mut rest = body;
        while let Some((_, tail)) = split_entry(rest)? {
            walked += 1;
            rest = tail;
        }
        if walked != usize::from(entries) {
            return Err(DropReason::BadLength);
        }
        Ok(announce)
    }

    /// The topics announced in this part.
    pub fn topics(&self) -> impl Iterator<Item = AnnouncedTopic<'a>> + 'a {
        let mut rest = self.body;
        std::iter::from_fn(move || match split_entry(rest) {
            Ok(Some((topic, tail))) => {
                rest = tail;
                Some(topic)
            }
            _ => None,
        })
    }

    /// How many topics this part announces.
    pub fn len(&self) -> usize {
        usize::from(self.entries)
    }

    /// Whether this part announces no topic.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The data address to subscribe to, for an announcement that came from `src`: the
    /// announced one, its IP taken from `src` when unspecified. `None` when the announced IP
    /// is another host's than `src`'s: an announcement may only point at its sender.
    pub fn data_from(&self, src: SocketAddr) -> Option<SocketAddr> {
        let ip = self.data.ip();
        if ip.is_unspecified() {
            return Some(SocketAddr::new(src.ip(), self.data.port()));
        }
        (ip == src.ip()).then_some(self.data)
    }
}

/// Splits one entry off `rest`: `None` at its end.
fn split_entry(rest: &[u8]) -> Result<Option<(AnnouncedTopic<'_>, &[u8])>, DropReason> {
    if rest.is_empty() {
        return Ok(None);
    }
    let fixed = rest.get(..ENTRY_FIXED_LEN).ok_or(DropReason::BadLength)?;
    let flags = fixed[16];
    if flags & !(ENTRY_RELIABLE | ENTRY_SERVICE) != 0 {
        return Err(DropReason::BadControl);
    }
    let name_len = usize::from(fixed[17]);
    let end = ENTRY_FIXED_LEN + name_len;
    let name = rest
        .get(ENTRY_FIXED_LEN..end)
        .ok_or(DropReason::BadLength)?;
    let topic = AnnouncedTopic {
        topic_id: le_u64(fixed, 0),
        fingerprint: le_u64(fixed, 8),
        reliable: flags & ENTRY_RELIABLE != 0,
        service: flags & ENTRY_SERVICE != 0,
        name,
    };
    Ok(Some((topic, rest.get(end..).unwrap_or_default())))
}

/// The bytes an entry of `name` takes in an announcement.
pub fn entry_len(name: &str) -> usize {
    ENTRY_FIXED_LEN + name.len()
}

impl Query {
    /// The `Query` of a frame (any payload length: it is padding).
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for another kind.
    pub fn from_frame(frame: &Frame<'_>) -> Result<Query, DropReason> {
        if frame.header.kind != Kind::Query {
            return Err(DropReason::BadControl);
        }
        Ok(Query {
            session: frame.header.session,
            topic_id: frame.header.topic_id,
        })
    }
}

impl BatchEncoder<'_> {
    /// Appends an `Announce` frame: part `part` of `parts`, announcing `topics` (each
    /// `(topic id, fingerprint, flags, name)`, the flags [`ENTRY_RELIABLE`] and
    /// [`ENTRY_SERVICE`]; names longer than [`MAX_ANNOUNCED_NAME`]
    /// must have been left out by the caller) into `scratch`, a buffer for the payload.
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] when the frame does not fit, or
    /// `TooLarge` when `scratch` is too short for the payload.
    pub fn push_announce<'t>(
        &mut self,
        head: &AnnounceHead,
        part: u8,
        parts: u8,
        topics: impl Iterator<Item = (u64, u64, u8, &'t str)> + Clone,
        scratch: &mut [u8],
    ) -> Result<(), EncodeError> {
        let max = scratch.len();
        let too_large = |size| EncodeError::TooLarge {
            topic: 0,
            size,
            max,
        };
        let mut len = ANNOUNCE_FIXED_LEN;
        let mut entries = 0u16;
        for (topic_id, fingerprint, flags, name) in topics {
            let name_len = u8::try_from(name.len()).map_err(|_| too_large(name.len()))?;
            let end = len + entry_len(name);
            let dst = scratch.get_mut(len..end).ok_or(too_large(end))?;
            dst[..8].copy_from_slice(&topic_id.to_le_bytes());
            dst[8..16].copy_from_slice(&fingerprint.to_le_bytes());
            dst[16] = flags;
            dst[17] = name_len;
            dst[ENTRY_FIXED_LEN..].copy_from_slice(name.as_bytes());
            len = end;
            entries = entries.saturating_add(1);
        }
        let fixed = scratch
            .get_mut(..ANNOUNCE_FIXED_LEN)
            .ok_or(too_large(ANNOUNCE_FIXED_LEN))?;
        fixed[..4].copy_from_slice(&head.period_ms.to_le_bytes());
        fixed[4..12].copy_from_slice(&head.uptime_ms.to_le_bytes());
        fixed[12] = part;
        fixed[13] = parts;
        write_addr(&mut fixed[14..32], Some(head.data));
        write_addr(&mut fixed[32..50], head.group);
        fixed[50..52].copy_from_slice(&entries.to_le_bytes());
        let mut header = control_header(Kind::Announce, 0, 0, head.session);
        header.seq = head.seq;
        header.timestamp_ns = head.timestamp_ns;
        let payload = scratch.get(..len).unwrap_or_default();
        self.push_raw(header, payload)
    }

    /// Appends a `Query` for `topic_id` (0: every topic) from `session`, padded with
    /// `padding` zero bytes so that the answer may be as large.
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] when the frame does not fit.
    pub fn push_query(
        &mut self,
        session: u64,
        topic_id: u64,
        padding: usize,
    ) -> Result<(), EncodeError> {
        const ZEROS: [u8; QUERY_LEN] = [0; QUERY_LEN];
        let padding = padding.min(QUERY_LEN);
        let header = control_header(Kind::Query, topic_id, 0, session);
        self.push_raw(header, ZEROS.get(..padding).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_datagram;

    fn head() -> AnnounceHead {
        AnnounceHead {
            session: 7,
            seq: 3,
            timestamp_ns: 11,
            period_ms: 1000,
            uptime_ms: 5000,
            data: "0.0.0.0:7000".parse().unwrap(),
            group: Some("239.255.76.76:7477".parse().unwrap()),
        }
    }

    #[test]
    fn announce_round_trips_and_points_only_at_its_sender() {
        let mut buf = [0u8; 1472];
        let mut scratch = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        let topics = [
            (1u64, 2u64, ENTRY_RELIABLE, "md.quote"),
            (3, 4, 0, "ex.order"),
            (5, 6, ENTRY_SERVICE, "risk.check"),
        ];
        enc.push_announce(&head(), 0, 1, topics.iter().copied(), &mut scratch)
            .unwrap();
        let bytes = enc.as_bytes().to_vec();
        let frame = parse_datagram(&bytes, 1472).unwrap().next().unwrap();
        let a = Announce::from_frame(&frame).unwrap();
        assert_eq!(
            (a.session, a.seq, a.period_ms, a.uptime_ms),
            (7, 3, 1000, 5000)
        );
        assert_eq!((a.part, a.parts, a.len()), (0, 1, 3));
        assert_eq!(a.group, head().group);
        let got: Vec<_> = a
            .topics()
            .map(|t| {
                (
                    t.topic_id,
                    t.fingerprint,
                    t.reliable,
                    t.service,
                    t.name.to_vec(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, 2, true, false, b"md.quote".to_vec()),
                (3, 4, false, false, b"ex.order".to_vec()),
                (5, 6, false, true, b"risk.check".to_vec())
            ]
        );
        let src: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        assert_eq!(a.data_from(src), Some("10.0.0.2:7000".parse().unwrap()));
        let pinned = Announce {
            data: "10.0.0.9:7000".parse().unwrap(),
            ..a
        };
        assert_eq!(pinned.data_from(src), None, "points at another host");
    }

    #[test]
    fn malformed_announcements_are_refused() {
        let mut buf = [0u8; 1472];
        let mut scratch = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        let topics = [(1u64, 2u64, 0, "t")];
        enc.push_announce(&head(), 0, 1, topics.iter().copied(), &mut scratch)
            .unwrap();
        let good = enc.as_bytes().to_vec();
        let check = |bytes: &[u8]| {
            let frame = parse_datagram(bytes, 1472)?
                .next()
                .ok_or(DropReason::Truncated)?;
            Announce::from_frame(&frame).map(|_| ())
        };
        assert_eq!(check(&good), Ok(()));
        // The entry count disagrees with the entries.
        let mut bad = good.clone();
        bad[48 + 50] = 2;
        assert_eq!(check(&bad), Err(DropReason::BadLength));
        // A part past the last.
        let mut bad = good.clone();
        bad[48 + 12] = 1;
        assert_eq!(check(&bad), Err(DropReason::BadControl));
        // A name running past the payload.
        let mut bad = good.clone();
        bad[48 + 52 + 17] = 9;
        assert_eq!(check(&bad), Err(DropReason::BadLength));
        // Every truncation of the payload is refused (lengths fixed up to stay parseable).
        for cut in 0..good.len() - 48 {
            let mut short = good[..48 + cut].to_vec();
            short[6..8].copy_from_slice(&(cut as u16).to_le_bytes());
            assert!(check(&short).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn query_carries_its_topic_and_padding() {
        let mut buf = [0u8; 1472];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_query(9, 42, QUERY_LEN - 48).unwrap();
        assert_eq!(enc.len(), QUERY_LEN);
        let bytes = enc.as_bytes().to_vec();
        let frame = parse_datagram(&bytes, 1472).unwrap().next().unwrap();
        assert_eq!(
            Query::from_frame(&frame),
            Ok(Query {
                session: 9,
                topic_id: 42
            })
        );
    }
}
