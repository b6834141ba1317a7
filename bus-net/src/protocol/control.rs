//! Control frames: subscribe, cookie challenge, acknowledge, refuse, unsubscribe and heartbeat.
//!
//! Each control frame names one topic, so a subscriber asking for several topics sends a batch
//! of `Subscribe` frames in one datagram and the publisher answers with a batch of
//! `CookieChallenge` / `SubscribeAck` / `Refuse` frames. The header's topic id, fingerprint,
//! session and sequence fields carry everything but a cookie or a refuse reason.
//!
//! Address-proving handshake bound to its request (`docs/PROTOCOL.md`, "Handshake"):
//! `Subscribe`, `Unsubscribe`, `CookieChallenge`, `SubscribeAck` and `Refuse` all have a 24-byte
//! payload. A subscribe carries a fresh random 64-bit nonce and, with [`Flags::COOKIE`], the
//! address-proving cookie (16 zero bytes of padding without one, so that the challenge it may
//! cause is no larger than itself). Every answer to a subscribe (challenge, acknowledgement,
//! refusal) echoes its nonce, as QUIC binds a Retry to the client's Initial: an off-path host
//! that cannot see the subscribe cannot forge its answer. Every answer is exactly as long as
//! the subscribe: the publisher can never be used to amplify traffic.
//!
//! Payload layouts (all little-endian):
//!
//! | kind                               | payload (24 bytes)                                   |
//! |------------------------------------|------------------------------------------------------|
//! | Subscribe, Unsubscribe             | nonce `u64`, cookie (16) or 16 zero bytes            |
//! | CookieChallenge, SubscribeAck      | nonce `u64` echoed, cookie (16)                      |
//!
//! A `SubscribeAck` carries the subscription token in its header's timestamp field.
//! | Refuse                             | reason `u8`, 7 zero bytes, offered fingerprint `u64`, nonce `u64` echoed |

use super::cookie::{Cookie, COOKIE_LEN};
use super::decode::{DropReason, Frame};
use super::encode::{BatchEncoder, EncodeError};
use super::header::{Flags, Header, Kind};

/// The payload length of a `Refuse` frame: reason code (1 byte), 7 reserved zero bytes, the
/// publisher's fingerprint (`u64` LE), the echoed nonce (`u64` LE).
pub const REFUSE_PAYLOAD_LEN: usize = 24;

/// The payload length of `Subscribe`, `Unsubscribe`, `CookieChallenge` and `SubscribeAck`: the
/// nonce (`u64` LE) and a cookie (or zero padding).
pub const HANDSHAKE_PAYLOAD_LEN: usize = 8 + COOKIE_LEN;

/// Why a publisher refused a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RefuseReason {
    /// The publisher does not export this topic.
    UnknownTopic = 1,
    /// The publisher exports the topic with a different schema fingerprint.
    FingerprintMismatch = 2,
    /// The publisher's subscriber table is full.
    TableFull = 3,
    /// The topic has as many subscribers as the publisher allows per topic.
    TopicFull = 4,
    /// The subscriber's host (its IP address, whatever the port) holds as many of the topic's
    /// subscriber slots as the publisher allows one host.
    HostFull = 5,
}

impl RefuseReason {
    /// The reason of wire value `code`.
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for a code no version defines.
    pub const fn from_u8(code: u8) -> Result<RefuseReason, DropReason> {
        match code {
            1 => Ok(RefuseReason::UnknownTopic),
            2 => Ok(RefuseReason::FingerprintMismatch),
            3 => Ok(RefuseReason::TableFull),
            4 => Ok(RefuseReason::TopicFull),
            5 => Ok(RefuseReason::HostFull),
            _ => Err(DropReason::BadControl),
        }
    }

    /// The publisher's check of a subscribe: `exported` is the fingerprint it exports the topic
    /// with, `None` if it does not export it.
    ///
    /// # Errors
    /// The reason to refuse with.
    pub const fn check(requested: u64, exported: Option<u64>) -> Result<(), RefuseReason> {
        match exported {
            None => Err(RefuseReason::UnknownTopic),
            Some(fp) if fp != requested => Err(RefuseReason::FingerprintMismatch),
            Some(_) => Ok(()),
        }
    }
}

/// A refused subscription, as the subscriber receives it. Its `Display` is the error a
/// subscriber reports: it names the topic and, for a mismatch, both fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refusal {
    /// The topic id.
    pub topic_id: u64,
    /// The fingerprint the subscriber asked for (its local type's).
    pub requested: u64,
    /// The fingerprint the publisher exports the topic with; 0 if it does not export it.
    pub offered: u64,
    /// The publisher's session id.
    pub session: u64,
    /// Why.
    pub reason: RefuseReason,
    /// The nonce of the `Subscribe` refused, echoed.
    pub nonce: u64,
}

impl Refusal {
    /// Whether the refusal is final: a fingerprint mismatch or an unknown topic will not change
    /// by asking again. A full table or topic may (the subscriber retries with backoff).
    pub const fn is_final(&self) -> bool {
        matches!(
            self.reason,
            RefuseReason::UnknownTopic | RefuseReason::FingerprintMismatch
        )
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let topic = self.topic_id;
        match self.reason {
            RefuseReason::UnknownTopic => write!(
                f,
                "publisher refused topic {topic:#018x}: it does not export that topic; export it \
                 there or remove the import here"
            ),
            RefuseReason::FingerprintMismatch => write!(
                f,
                "publisher refused topic {topic:#018x}: schema fingerprint mismatch (ours {:#018x}, \
                 theirs {:#018x}); build both sides with the same message type",
                self.requested, self.offered
            ),
            RefuseReason::TableFull => write!(
                f,
                "publisher refused topic {topic:#018x}: its subscriber table is full; raise its \
                 capacity or subscribe fewer hosts"
            ),
            RefuseReason::TopicFull => write!(
                f,
                "publisher refused topic {topic:#018x}: the topic has as many subscribers as it \
                 allows; raise its per-topic cap or subscribe fewer hosts"
            ),
            RefuseReason::HostFull => write!(
                f,
                "publisher refused topic {topic:#018x}: this host already holds as many of the \
                 topic's subscriber slots as the publisher allows one host (other ports of this \
                 address subscribe to it); stop one of them or raise the publisher's \
                 `subscribers_per_host`"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// A decoded control frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Control {
    /// Subscriber to publisher: send me `topic_id`, whose type has `fingerprint`. Also the
    /// once-a-second renewal.
    Subscribe {
        /// The topic id.
        topic_id: u64,
        /// The subscriber's fingerprint of the topic's type.
        fingerprint: u64,
        /// The subscriber's session id.
        session: u64,
        /// A fresh random number, echoed by the answer.
        nonce: u64,
        /// The latest cookie the publisher gave this subscriber ([`Flags::COOKIE`]), or `None`
        /// for a first request (16 zero bytes of padding on the wire).
        cookie: Option<Cookie>,
    },
    /// Publisher to subscriber: the answer to a `Subscribe` without a valid cookie. Send the
    /// `Subscribe` again with this cookie.
    CookieChallenge {
        /// The topic id, echoed from the `Subscribe`.
        topic_id: u64,
        /// The fingerprint, echoed from the `Subscribe`.
        fingerprint: u64,
        /// The publisher's session id.
        session: u64,
        /// The nonce of the `Subscribe` answered, echoed.
        nonce: u64,
        /// The cookie for the subscriber's address.
        cookie: Cookie,
    },
    /// Publisher to subscriber: the subscription is accepted (or renewed).
    SubscribeAck {
        /// The topic id.
        topic_id: u64,
        /// The publisher's fingerprint (equal to the subscriber's).
        fingerprint: u64,
        /// The publisher's session id.
        session: u64,
        /// The last sequence number the publisher sent on the topic (0 if none).
        last_seq: u64,
        /// The nonce of the `Subscribe` acknowledged, echoed.
        nonce: u64,
        /// A fresh cookie: the subscriber uses it in its next renewals (and `Unsubscribe`), so
        /// an active subscription never sees its cookie expire.
        cookie: Cookie,
        /// The subscription token (in the header's timestamp field): every data, heartbeat and
        /// unavailable datagram of this subscription ends with it, so that nobody who was not
        /// sent this acknowledgement can inject into the stream (0 with a pre-shared key,
        /// where the MAC does that).
        token: u64,
    },
    /// Publisher to subscriber: the subscription is refused.
    Refuse(Refusal),
    /// Subscriber to publisher: stop sending `topic_id` (graceful stop). Honoured only with a
    /// valid cookie, so nobody can unsubscribe someone else.
    Unsubscribe {
        /// The topic id.
        topic_id: u64,
        /// The subscriber's fingerprint.
        fingerprint: u64,
        /// The subscriber's session id.
        session: u64,
        /// A fresh random number (nothing answers an unsubscribe; it keeps the layout).
        nonce: u64,
        /// The latest cookie the publisher gave this subscriber.
        cookie: Option<Cookie>,
    },
    /// Publisher to subscriber: the last sequence number sent on a topic, so that loss at the
    /// end of a burst is noticed.
    Heartbeat {
        /// The topic id.
        topic_id: u64,
        /// The publisher's fingerprint.
        fingerprint: u64,
        /// The publisher's session id.
        session: u64,
        /// The last sequence number sent (0 if none).
        last_seq: u64,
        /// When the heartbeat was sent, ns since the UNIX epoch.
        timestamp_ns: i64,
    },
}

/// The nonce and cookie of a 24-byte handshake payload.
fn handshake_payload(frame: &Frame<'_>) -> Result<(u64, [u8; COOKIE_LEN]), DropReason> {
    let p: &[u8; HANDSHAKE_PAYLOAD_LEN] = frame
        .payload
        .try_into()
        .map_err(|_| DropReason::BadLength)?;
    let (nonce, cookie) = p.split_at(8);
    let nonce = u64::from_le_bytes(nonce.try_into().map_err(|_| DropReason::BadLength)?);
    let cookie = cookie.try_into().map_err(|_| DropReason::BadLength)?;
    Ok((nonce, cookie))
}

/// The nonce and optional cookie of a `Subscribe` or `Unsubscribe`: the cookie with
/// [`Flags::COOKIE`], else 16 bytes of zero padding (anything else is
/// [`DropReason::BadControl`]).
fn optional_cookie(frame: &Frame<'_>) -> Result<(u64, Option<Cookie>), DropReason> {
    let (nonce, bytes) = handshake_payload(frame)?;
    if frame.header.flags.cookie() {
        Ok((nonce, Some(Cookie(bytes))))
    } else if bytes == [0; COOKIE_LEN] {
        Ok((nonce, None))
    } else {
        Err(DropReason::BadControl)
    }
}

impl Control {
    /// The control message of a frame from [`parse_datagram`](super::decode::parse_datagram).
    ///
    /// # Errors
    /// [`DropReason::BadControl`] for a data frame, an unknown refuse reason, or non-zero
    /// padding in a subscribe without a cookie; [`DropReason::BadLength`] for a payload of the
    /// wrong length.
    pub fn from_frame(frame: &Frame<'_>) -> Result<Control, DropReason> {
        let h = &frame.header;
        if Some(frame.payload.len()) != h.kind.fixed_payload_len() {
            return Err(if h.kind.is_data() {
                DropReason::BadControl
            } else {
                DropReason::BadLength
            });
        }
        Ok(match h.kind {
            // Data, the reliable-topic frames (`super::reliable`), the schema frames
            // (`super::schema`) and the discovery and multicast frames are not handshake control.
            Kind::Data
            | Kind::Fragment
            | Kind::Nak
            | Kind::Unavailable
            | Kind::SchemaRequest
            | Kind::SchemaReply
            | Kind::Announce
            | Kind::Query
            | Kind::Group
            | Kind::Request
            | Kind::Reply => return Err(DropReason::BadControl),
            Kind::Subscribe => {
                let (nonce, cookie) = optional_cookie(frame)?;
                Control::Subscribe {
                    topic_id: h.topic_id,
                    fingerprint: h.fingerprint,
                    session: h.session,
                    nonce,
                    cookie,
                }
            }
            Kind::Unsubscribe => {
                let (nonce, cookie) = optional_cookie(frame)?;
                Control::Unsubscribe {
                    topic_id: h.topic_id,
                    fingerprint: h.fingerprint,
                    session: h.session,
                    nonce,
                    cookie,
                }
            }
            Kind::CookieChallenge => {
                let (nonce, cookie) = handshake_payload(frame)?;
                Control::CookieChallenge {
                    topic_id: h.topic_id,
                    fingerprint: h.fingerprint,
                    session: h.session,
                    nonce,
                    cookie: Cookie(cookie),
                }
            }
            Kind::SubscribeAck => {
                let (nonce, cookie) = handshake_payload(frame)?;
                Control::SubscribeAck {
                    topic_id: h.topic_id,
                    fingerprint: h.fingerprint,
                    session: h.session,
                    last_seq: h.seq,
                    nonce,
                    cookie: Cookie(cookie),
                    token: h.timestamp_ns as u64,
                }
            }
            Kind::Heartbeat => Control::Heartbeat {
                topic_id: h.topic_id,
                fingerprint: h.fingerprint,
                session: h.session,
                last_seq: h.seq,
                timestamp_ns: h.timestamp_ns,
            },
            Kind::Refuse => {
                let p: &[u8; REFUSE_PAYLOAD_LEN] = frame
                    .payload
                    .try_into()
                    .map_err(|_| DropReason::BadLength)?;
                let [code, r1, r2, r3, r4, r5, r6, r7, f0, f1, f2, f3, f4, f5, f6, f7, n @ ..] = *p;
                if [r1, r2, r3, r4, r5, r6, r7] != [0; 7] {
                    return Err(DropReason::BadControl);
                }
                Control::Refuse(Refusal {
                    topic_id: h.topic_id,
                    requested: h.fingerprint,
                    offered: u64::from_le_bytes([f0, f1, f2, f3, f4, f5, f6, f7]),
                    session: h.session,
                    reason: RefuseReason::from_u8(code)?,
                    nonce: u64::from_le_bytes(n),
                })
            }
        })
    }
}

impl BatchEncoder<'_> {
    /// A `Subscribe` or `Unsubscribe`: the nonce, then the cookie with [`Flags::COOKIE`] or
    /// zero padding.
    fn push_optional_cookie(
        &mut self,
        mut header: Header,
        nonce: u64,
        cookie: Option<Cookie>,
    ) -> Result<(), EncodeError> {
        if cookie.is_some() {
            header.flags = Flags(Flags::COOKIE);
        }
        self.push_handshake(header, nonce, cookie.unwrap_or_default())
    }

    /// A frame with a handshake payload: nonce, then cookie.
    fn push_handshake(
        &mut self,
        header: Header,
        nonce: u64,
        cookie: Cookie,
    ) -> Result<(), EncodeError> {
        let mut payload = [0u8; HANDSHAKE_PAYLOAD_LEN];
        payload[..8].copy_from_slice(&nonce.to_le_bytes());
        payload[8..].copy_from_slice(&cookie.0);
        self.push_raw(header, &payload)
    }
}

/// A control frame's header: everything but the payload length.
pub(crate) const fn control_header(
    kind: Kind,
    topic_id: u64,
    fingerprint: u64,
    session: u64,
) -> Header {
    Header {
        kind,
        flags: Flags::NONE,
        payload_len: 0,
        topic_id,
        fingerprint,
        session,
        seq: 0,
        timestamp_ns: 0,
    }
}

impl BatchEncoder<'_> {
    /// Appends a control frame.
    ///
    /// # Errors
    /// [`EncodeError::Full`] when the datagram has no room left for it (send and retry);
    /// [`EncodeError::TooLarge`] only if the buffer is smaller than one frame.
    pub fn push_control(&mut self, control: &Control) -> Result<(), EncodeError> {
        match *control {
            Control::Subscribe {
                topic_id,
                fingerprint,
                session,
                nonce,
                cookie,
            } => self.push_optional_cookie(
                control_header(Kind::Subscribe, topic_id, fingerprint, session),
                nonce,
                cookie,
            ),
            Control::Unsubscribe {
                topic_id,
                fingerprint,
                session,
                nonce,
                cookie,
            } => self.push_optional_cookie(
                control_header(Kind::Unsubscribe, topic_id, fingerprint, session),
                nonce,
                cookie,
            ),
            Control::CookieChallenge {
                topic_id,
                fingerprint,
                session,
                nonce,
                cookie,
            } => self.push_handshake(
                control_header(Kind::CookieChallenge, topic_id, fingerprint, session),
                nonce,
                cookie,
            ),
            Control::SubscribeAck {
                topic_id,
                fingerprint,
                session,
                last_seq,
                nonce,
                cookie,
                token,
            } => {
                let mut h = control_header(Kind::SubscribeAck, topic_id, fingerprint, session);
                h.seq = last_seq;
                h.timestamp_ns = token as i64;
                self.push_handshake(h, nonce, cookie)
            }
            Control::Heartbeat {
                topic_id,
                fingerprint,
                session,
                last_seq,
                timestamp_ns,
            } => {
                let mut h = control_header(Kind::Heartbeat, topic_id, fingerprint, session);
                h.seq = last_seq;
                h.timestamp_ns = timestamp_ns;
                self.push_raw(h, &[])
            }
            Control::Refuse(r) => {
                let mut payload = [0u8; REFUSE_PAYLOAD_LEN];
                payload[0] = r.reason as u8;
                payload[8..16].copy_from_slice(&r.offered.to_le_bytes());
                payload[16..].copy_from_slice(&r.nonce.to_le_bytes());
                self.push_raw(
                    control_header(Kind::Refuse, r.topic_id, r.requested, r.session),
                    &payload,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::decode::parse_datagram;

    fn refuse_bytes() -> Vec<u8> {
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&Control::Refuse(Refusal {
            topic_id: 1,
            requested: 2,
            offered: 0,
            session: 3,
            nonce: 0x6e6f6e6365,
            reason: RefuseReason::UnknownTopic,
        }))
        .unwrap();
        enc.as_bytes().to_vec()
    }

    fn control_of(bytes: &[u8]) -> Result<Control, DropReason> {
        let mut frames = parse_datagram(bytes, 1472)?;
        Control::from_frame(&frames.next().ok_or(DropReason::Truncated)?)
    }

    #[test]
    fn refuse_reasons_and_reserved_bytes() {
        let good = refuse_bytes();
        assert!(
            matches!(control_of(&good), Ok(Control::Refuse(r)) if r.reason == RefuseReason::UnknownTopic)
        );
        let mut bad = good.clone();
        bad[48] = 9;
        assert_eq!(control_of(&bad), Err(DropReason::BadControl));
        let mut bad = good.clone();
        bad[49] = 1;
        assert_eq!(control_of(&bad), Err(DropReason::BadControl));
        // The nonce is the last 8 bytes.
        let mut other = good.clone();
        other[64] ^= 1;
        assert!(
            matches!(control_of(&other), Ok(Control::Refuse(r)) if r.nonce == 0x6e6f6e6365 ^ 1)
        );
    }

    #[test]
    fn check_and_messages() {
        assert_eq!(RefuseReason::check(5, Some(5)), Ok(()));
        assert_eq!(
            RefuseReason::check(5, Some(6)),
            Err(RefuseReason::FingerprintMismatch)
        );
        assert_eq!(
            RefuseReason::check(5, None),
            Err(RefuseReason::UnknownTopic)
        );
        for reason in [
            RefuseReason::UnknownTopic,
            RefuseReason::TableFull,
            RefuseReason::TopicFull,
        ] {
            let r = Refusal {
                topic_id: 0xab,
                requested: 1,
                offered: 2,
                session: 3,
                nonce: 0x6e6f6e6365,
                reason,
            };
            assert!(r
                .to_string()
                .starts_with("publisher refused topic 0x00000000000000ab: "));
        }
    }

    fn one(control: Control) -> Vec<u8> {
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&control).unwrap();
        enc.as_bytes().to_vec()
    }

    #[test]
    fn handshake_frames_are_as_long_as_the_subscribe() {
        let cookie = Some(Cookie([0xc5; COOKIE_LEN]));
        let hello = one(Control::Subscribe {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            nonce: 0x6e6f6e6365,
            cookie: None,
        });
        let answers = [
            Control::CookieChallenge {
                topic_id: 1,
                fingerprint: 2,
                session: 4,
                nonce: 0x6e6f6e6365,
                cookie: Cookie([9; 16]),
            },
            Control::SubscribeAck {
                topic_id: 1,
                fingerprint: 2,
                session: 4,
                nonce: 0x6e6f6e6365,
                last_seq: 5,
                cookie: Cookie([9; 16]),
                token: 0x70c3,
            },
            Control::Refuse(Refusal {
                topic_id: 1,
                requested: 2,
                offered: 0,
                session: 4,
                nonce: 0x6e6f6e6365,
                reason: RefuseReason::TopicFull,
            }),
        ];
        for answer in answers {
            let bytes = one(answer);
            assert_eq!(bytes.len(), hello.len(), "{answer:?}");
            assert_eq!(control_of(&bytes), Ok(answer));
        }
        assert_eq!(hello.len(), 72);
        assert_eq!(hello[5], 0);
        assert_eq!(&hello[48..56], &0x6e6f6e6365u64.to_le_bytes());
        assert_eq!(&hello[56..], &[0; 16]);
        let proven = Control::Unsubscribe {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            nonce: 0x6e6f6e6365,
            cookie,
        };
        let bytes = one(proven);
        assert_eq!(bytes[5], Flags::COOKIE);
        assert_eq!(control_of(&bytes), Ok(proven));
        // Padding must be zero; the cookie flag is only for subscribe and unsubscribe.
        let mut bad = hello.clone();
        bad[71] = 1;
        assert_eq!(control_of(&bad), Err(DropReason::BadControl));
        // Every answer echoes the nonce of the request.
        for answer in answers {
            assert_eq!(&one(answer)[64..72].len(), &8);
        }
        let mut bad = one(answers[0]);
        bad[5] = Flags::COOKIE;
        assert_eq!(control_of(&bad), Err(DropReason::UnsupportedFlags));
    }

    #[test]
    fn data_frame_is_not_control() {
        let mut buf = [0u8; 128];
        let mut enc = BatchEncoder::new(&mut buf);
        let meta = crate::protocol::encode::DataMeta {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            seq: 1,
            timestamp_ns: 0,
        };
        enc.push_data(meta, &1u8).unwrap();
        assert_eq!(control_of(enc.as_bytes()), Err(DropReason::BadControl));
    }
}
