//! The native frame header: 48 bytes, little-endian, in front of every message and every
//! control message. A datagram is one or more frames back to back (see `docs/PROTOCOL.md`).
//!
//! Every frame carries the magic and version, so a frame is self-describing and a batch needs
//! no datagram header of its own: the batch is just the frames, and the datagram length says
//! where it ends. Byte layout:
//!
//! | offset | size | field                                     |
//! |-------:|-----:|-------------------------------------------|
//! | 0      | 3    | magic `b"LLU"`                            |
//! | 3      | 1    | version, `3` (`2` had no subscription token, `1` no nonce-bound handshake) |
//! | 4      | 1    | kind ([`Kind`])                           |
//! | 5      | 1    | flags ([`Flags`])                         |
//! | 6      | 2    | payload length, `u16`                     |
//! | 8      | 8    | topic id, `u64`                           |
//! | 16     | 8    | schema fingerprint, `u64`                 |
//! | 24     | 8    | sender's session id, `u64`                |
//! | 32     | 8    | sequence number, `u64`                    |
//! | 40     | 8    | send timestamp, `i64` ns since the UNIX epoch |

use super::decode::DropReason;

/// The first three bytes of every native frame.
pub const MAGIC: [u8; 3] = *b"LLU";
/// The protocol version this crate speaks, in byte 3 of every frame.
pub const VERSION: u8 = 3;
/// The length of the subscription token after the last frame of a datagram marked
/// [`Flags::TOKEN`].
pub const TOKEN_LEN: usize = 8;
/// The size of a frame header in bytes.
pub const HEADER_LEN: usize = 48;
/// The default maximum datagram size: a 1500-byte Ethernet MTU less 20 bytes of IPv4 header
/// and 8 of UDP header, so nothing relies on IP fragmentation.
pub const DEFAULT_MAX_DATAGRAM: usize = 1472;
/// The default maximum datagram size of an IPv6 (or dual-stack) socket: a 1500-byte MTU less 40
/// bytes of IPv6 header and 8 of UDP header. Also the safe choice over most tunnels' IPv4.
pub const DEFAULT_MAX_DATAGRAM_V6: usize = 1452;

/// The largest UDP payload over IPv4; no configured maximum may exceed it.
pub const MAX_DATAGRAM_LIMIT: usize = 65_507;

/// What a frame is. Unknown values are dropped as [`DropReason::UnknownKind`]; values still
/// reserved (`0x21..=0x3f`) as [`DropReason::ReservedKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A message of a topic: the payload is its bincode encoding.
    Data = 0x01,
    /// Publisher to subscriber: the last sequence number sent on a topic (payload empty).
    Heartbeat = 0x02,
    /// Publisher to subscriber: one piece of a message too large for one datagram (a 16-byte
    /// fragment header, then the piece; see `fragment`). Takes a sequence number of its own.
    Fragment = 0x03,
    /// Subscriber to publisher: subscribe to, or renew, one topic (24-byte payload: a fresh
    /// nonce, then zero padding or the address-proving cookie with [`Flags::COOKIE`]).
    Subscribe = 0x10,
    /// Publisher to subscriber: the subscription to one topic is accepted (24-byte payload:
    /// the echoed nonce and a fresh cookie for the next renewals).
    SubscribeAck = 0x11,
    /// Publisher to subscriber: the subscription to one topic is refused (24-byte payload,
    /// with the echoed nonce).
    Refuse = 0x12,
    /// Subscriber to publisher: stop sending one topic (24-byte payload, as `Subscribe`).
    Unsubscribe = 0x13,
    /// Publisher to subscriber: prove your address by sending `Subscribe` again with this
    /// cookie (24-byte payload: the echoed nonce and the cookie). The answer to a `Subscribe`
    /// without a valid cookie.
    CookieChallenge = 0x20,
    /// Subscriber to publisher, reliable topics: retransmit one range of sequence numbers
    /// (40-byte payload: the subscriber's current cookie, a fresh nonce, first and last).
    Nak = 0x14,
    /// Publisher to subscriber, reliable topics: the range a NAK asked for is no longer in
    /// history (24-byte payload: the NAK's nonce echoed, first and last).
    Unavailable = 0x15,
    /// Anyone to publisher: send a page of a topic's encoded shape (16-byte fixed part: a
    /// fresh nonce and the page's offset, then zero padding, the room for the answer's page).
    SchemaRequest = 0x16,
    /// Publisher to requester: one page of a topic's encoded shape (16-byte fixed part: the
    /// echoed nonce, the shape's total length and the page's offset, then the page).
    SchemaReply = 0x17,
    /// Bridge to discovery channel: the topics it exports and where (payload: see
    /// `discovery`). Sent to a multicast group, unicast peers, or an asker.
    Announce = 0x18,
    /// Discovery channel to bridges: who exports this topic (0: every topic)? Padded: the
    /// answer is never larger.
    Query = 0x19,
    /// Publisher to subscriber, by unicast with its token: the topic's data also goes to a
    /// multicast group, with this group token (26-byte payload: group address and port,
    /// token; see `multicast`).
    Group = 0x1a,
    /// Caller's bridge to server's bridge: one call of a service (payload: call id, deadline
    /// budget in ms, then the bincode of the request; see `service`). Ends with the caller's
    /// subscription token to the service (without a key).
    Request = 0x1b,
    /// Server's bridge to caller's bridge: how one call ended (payload: call id, status, then
    /// the bincode of the reply when the status is 0). Ends with the caller's token.
    Reply = 0x1c,
}

impl Kind {
    /// Another name for the wire value of [`Kind::CookieChallenge`], kept for callers that use
    /// it.
    pub const RESERVED_CHALLENGE: u8 = 0x20;
    /// Still reserved: the design echoes a cookie in `Subscribe` ([`Flags::COOKIE`]) instead
    /// of a kind of its own.
    pub const RESERVED_CHALLENGE_ECHO: u8 = 0x21;
    /// Still reserved: the MAC is a 16-byte tag after the last frame ([`Flags::MAC`]), not a
    /// frame of its own.
    pub const RESERVED_MAC: u8 = 0x30;

    /// The kind of wire value `value`.
    ///
    /// # Errors
    /// [`DropReason::ReservedKind`] for `0x21..=0x3f` (reserved for authentication
    /// extensions), [`DropReason::UnknownKind`] for anything else that is not a [`Kind`].
    pub const fn from_u8(value: u8) -> Result<Kind, DropReason> {
        match value {
            0x01 => Ok(Kind::Data),
            0x02 => Ok(Kind::Heartbeat),
            0x03 => Ok(Kind::Fragment),
            0x10 => Ok(Kind::Subscribe),
            0x11 => Ok(Kind::SubscribeAck),
            0x12 => Ok(Kind::Refuse),
            0x13 => Ok(Kind::Unsubscribe),
            0x20 => Ok(Kind::CookieChallenge),
            0x14 => Ok(Kind::Nak),
            0x15 => Ok(Kind::Unavailable),
            0x16 => Ok(Kind::SchemaRequest),
            0x17 => Ok(Kind::SchemaReply),
            0x18 => Ok(Kind::Announce),
            0x19 => Ok(Kind::Query),
            0x1a => Ok(Kind::Group),
            0x1b => Ok(Kind::Request),
            0x1c => Ok(Kind::Reply),
            0x21..=0x3f => Err(DropReason::ReservedKind),
            _ => Err(DropReason::UnknownKind),
        }
    }

    /// Whether frames of this kind carry (a piece of) a message: data and fragments.
    pub const fn is_data(self) -> bool {
        matches!(self, Kind::Data | Kind::Fragment)
    }

    /// Whether a publisher sends frames of this kind down an established subscription (data,
    /// fragments, heartbeats, unavailable ranges): the kinds that carry [`Flags::TOKEN`].
    pub const fn is_downstream(self) -> bool {
        matches!(
            self,
            Kind::Data | Kind::Fragment | Kind::Heartbeat | Kind::Unavailable | Kind::Group
        )
    }

    /// Whether frames of this kind may carry [`Flags::TOKEN`]: the downstream kinds, and the
    /// frames of services (a `Request` ends with the caller's token, its `Reply` too).
    pub const fn carries_token(self) -> bool {
        self.is_downstream() || matches!(self, Kind::Request | Kind::Reply)
    }

    /// The payload length a frame of this kind must have, if it is fixed.
    pub(crate) const fn fixed_payload_len(self) -> Option<usize> {
        match self {
            Kind::Data
            | Kind::Fragment
            | Kind::SchemaRequest
            | Kind::SchemaReply
            | Kind::Announce
            | Kind::Query
            | Kind::Request
            | Kind::Reply => None,
            Kind::Refuse => Some(super::control::REFUSE_PAYLOAD_LEN),
            Kind::Subscribe | Kind::Unsubscribe | Kind::SubscribeAck | Kind::CookieChallenge => {
                Some(super::control::HANDSHAKE_PAYLOAD_LEN)
            }
            Kind::Heartbeat => Some(0),
            Kind::Nak => Some(super::reliable::NAK_PAYLOAD_LEN),
            Kind::Unavailable => Some(super::reliable::UNAVAILABLE_PAYLOAD_LEN),
            Kind::Group => Some(super::multicast::GROUP_PAYLOAD_LEN),
        }
    }
}

/// The flags byte of a frame.
///
/// - bit 0, [`Flags::COOKIE`]: the payload of a `Subscribe` or `Unsubscribe` is the
///   address-proving cookie (see `cookie`); without it the payload is zero padding. Set on any
///   other kind, the frame is dropped as [`DropReason::UnsupportedFlags`].
/// - bit 1, [`Flags::MAC`]: the datagram ends with a 16-byte pre-shared-key tag after its last
///   frame (see `mac`). Set on every frame of such a datagram.
/// - bit 2, [`Flags::TOKEN`]: the datagram ends with the 8-byte subscription token of the
///   subscriber it is sent to (see `decode`). Only on the kinds a publisher sends down a
///   subscription (data, fragment, heartbeat, unavailable), on every frame of the datagram,
///   and never with [`Flags::MAC`].
/// - bit 3, [`Flags::GROUP`]: on a `Subscribe` only, the subscriber receives the topic's
///   multicast group (its data need not come by unicast).
/// - bits 4..7: reserved; a frame with any of them set is dropped as
///   [`DropReason::UnsupportedFlags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(pub u8);

impl Flags {
    /// No flags.
    pub const NONE: Flags = Flags(0);
    /// The payload of a `Subscribe` or `Unsubscribe` is an address-proving cookie.
    pub const COOKIE: u8 = 0x01;
    /// The datagram ends with a MAC tag (pre-shared key).
    pub const MAC: u8 = 0x02;
    /// The datagram ends with the subscription token of its destination.
    pub const TOKEN: u8 = 0x04;
    /// Old name of [`Flags::COOKIE`].
    pub const RESERVED_COOKIE: u8 = Flags::COOKIE;
    /// Old name of [`Flags::MAC`].
    pub const RESERVED_MAC: u8 = Flags::MAC;
    /// On a `Subscribe`: the subscriber receives the topic's multicast group, so its data
    /// need not be sent to it by unicast.
    pub const GROUP: u8 = 0x08;
    /// The flags this version understands.
    pub const SUPPORTED: u8 = Flags::COOKIE | Flags::MAC | Flags::TOKEN | Flags::GROUP;

    /// Whether the cookie bit is set.
    pub const fn cookie(self) -> bool {
        self.0 & Flags::COOKIE != 0
    }

    /// Whether the MAC bit is set.
    pub const fn mac(self) -> bool {
        self.0 & Flags::MAC != 0
    }

    /// Whether the token bit is set.
    pub const fn token(self) -> bool {
        self.0 & Flags::TOKEN != 0
    }

    /// Whether the group bit is set.
    pub const fn group(self) -> bool {
        self.0 & Flags::GROUP != 0
    }
}

/// One frame's header, decoded. See the module docs for the byte layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the frame is.
    pub kind: Kind,
    /// Flags ([`Flags::COOKIE`], [`Flags::MAC`], [`Flags::TOKEN`]).
    pub flags: Flags,
    /// The number of payload bytes after the header.
    pub payload_len: u16,
    /// The topic id ([`llbus::Message::TOPIC_ID`]).
    pub topic_id: u64,
    /// The schema fingerprint ([`llbus::Message::FINGERPRINT`]).
    pub fingerprint: u64,
    /// The sender's session id: random per start, so a restart is noticed.
    pub session: u64,
    /// Data: the sequence number per topic per session, from 1. Heartbeat and acknowledge:
    /// the last sequence number sent on the topic (0 if none). Other kinds: 0.
    pub seq: u64,
    /// Nanoseconds since the UNIX epoch (`CLOCK_REALTIME`) just before sending.
    pub timestamp_ns: i64,
}

impl Header {
    /// Writes this header into the first [`HEADER_LEN`] bytes of a frame.
    pub fn write(&self, out: &mut [u8; HEADER_LEN]) {
        let [m0, m1, m2] = MAGIC;
        let [l0, l1] = self.payload_len.to_le_bytes();
        out[..8].copy_from_slice(&[m0, m1, m2, VERSION, self.kind as u8, self.flags.0, l0, l1]);
        out[8..16].copy_from_slice(&self.topic_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.fingerprint.to_le_bytes());
        out[24..32].copy_from_slice(&self.session.to_le_bytes());
        out[32..40].copy_from_slice(&self.seq.to_le_bytes());
        out[40..48].copy_from_slice(&self.timestamp_ns.to_le_bytes());
    }

    /// Reads a header from the first [`HEADER_LEN`] bytes of a frame, checking magic, version,
    /// kind and flags (not the payload length, which needs the rest of the datagram). Whether
    /// a MAC flag is expected is the caller's business (`parse_datagram`, `FrameMac::open`).
    ///
    /// # Errors
    /// [`DropReason::BadMagic`], [`DropReason::BadVersion`], [`DropReason::UnknownKind`],
    /// [`DropReason::ReservedKind`] or [`DropReason::UnsupportedFlags`].
    pub fn read(bytes: &[u8; HEADER_LEN]) -> Result<Header, DropReason> {
        let [m0, m1, m2, version, kind, flags, l0, l1, ..] = *bytes;
        if [m0, m1, m2] != MAGIC {
            return Err(DropReason::BadMagic);
        }
        if version != VERSION {
            return Err(DropReason::BadVersion);
        }
        let kind = Kind::from_u8(kind)?;
        if flags & !Flags::SUPPORTED != 0
            || (flags & Flags::COOKIE != 0 && !matches!(kind, Kind::Subscribe | Kind::Unsubscribe))
            || (flags & Flags::TOKEN != 0 && (!kind.carries_token() || flags & Flags::MAC != 0))
            || (flags & Flags::GROUP != 0 && kind != Kind::Subscribe)
        {
            return Err(DropReason::UnsupportedFlags);
        }
        Ok(Header {
            kind,
            flags: Flags(flags),
            payload_len: u16::from_le_bytes([l0, l1]),
            topic_id: le_u64(bytes, 8),
            fingerprint: le_u64(bytes, 16),
            session: le_u64(bytes, 24),
            seq: le_u64(bytes, 32),
            timestamp_ns: le_u64(bytes, 40) as i64,
        })
    }
}

/// The little-endian `u64` at `at` of a header; `at` is one of the constant offsets above, all
/// at most `HEADER_LEN - 8`, so the slice is always 8 bytes long.
#[inline]
fn le_u64(bytes: &[u8; HEADER_LEN], at: usize) -> u64 {
    debug_assert!(at + 8 <= HEADER_LEN);
    let mut word = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        word.copy_from_slice(src);
    }
    u64::from_le_bytes(word)
}
