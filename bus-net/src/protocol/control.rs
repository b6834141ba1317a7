//! Control frames: subscribe, cookie challenge, acknowledge, refuse, unsubscribe and heartbeat.
//!
//! Each control frame names one topic, so a subscriber asking for several topics sends a batch
//! of `Subscribe` frames in one datagram and the publisher answers with a batch of
//! `CookieChallenge` / `SubscribeAck` / `Refuse` frames. The header's topic id, fingerprint,
//! session and sequence fields carry everything but a cookie or a refuse reason.
//!
//! Address-proving handshake (`docs/PROTOCOL.md`, "Address-proving handshake"): `Subscribe`,
//! `Unsubscribe`, `CookieChallenge` and `SubscribeAck` all have a 16-byte payload. A subscribe
//! without a cookie carries 16 zero bytes of padding instead, so that the challenge it may
//! cause is no larger than itself; with [`Flags::COOKIE`] the payload is the cookie. Every
//! answer to a subscribe (challenge, acknowledgement, refusal) is exactly as long as the
//! subscribe: the publisher can never be used to amplify traffic.

use super::cookie::{Cookie, COOKIE_LEN};
use super::decode::{DropReason, Frame};
use super::encode::{BatchEncoder, EncodeError};
use super::header::{Flags, Header, Kind};

/// The payload length of a `Refuse` frame: reason code (1 byte), 7 reserved zero bytes, the
/// publisher's fingerprint (`u64` LE).
pub const REFUSE_PAYLOAD_LEN: usize = 16;

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
        /// A fresh cookie: the subscriber uses it in its next renewals (and `Unsubscribe`), so
        /// an active subscription never sees its cookie expire.
        cookie: Cookie,
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

/// The 16-byte payload of a cookie-carrying frame.
fn cookie_payload(frame: &Frame<'_>) -> Result<[u8; COOKIE_LEN], DropReason> {
    frame.payload.try_into().map_err(|_| DropReason::BadLength)
}

/// The optional cookie of a `Subscribe` or `Unsubscribe`: the payload with [`Flags::COOKIE`],
/// else 16 bytes of zero padding (anything else is [`DropReason::BadControl`]).
fn optional_cookie(frame: &Frame<'_>) -> Result<Option<Cookie>, DropReason> {
    let bytes = cookie_payload(frame)?;
    if frame.header.flags.cookie() {
        Ok(Some(Cookie(bytes)))
    } else if bytes == [0; COOKIE_LEN] {
        Ok(None)
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
            return Err(if h.kind == Kind::Data {
                DropReason::BadControl
            } else {
                DropReason::BadLength
            });
        }
        Ok(match h.kind {
            Kind::Data => return Err(DropReason::BadControl),
            Kind::Subscribe => Control::Subscribe {
                topic_id: h.topic_id,
                fingerprint: h.fingerprint,
                session: h.session,
                cookie: optional_cookie(frame)?,
            },
            Kind::Unsubscribe => Control::Unsubscribe {
                topic_id: h.topic_id,
                fingerprint: h.fingerprint,
                session: h.session,
                cookie: optional_cookie(frame)?,
            },
            Kind::CookieChallenge => Control::CookieChallenge {
                topic_id: h.topic_id,
                fingerprint: h.fingerprint,
                session: h.session,
                cookie: Cookie(cookie_payload(frame)?),
            },
            Kind::SubscribeAck => Control::SubscribeAck {
                topic_id: h.topic_id,
                fingerprint: h.fingerprint,
                session: h.session,
                last_seq: h.seq,
                cookie: Cookie(cookie_payload(frame)?),
            },
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
                let [code, r1, r2, r3, r4, r5, r6, r7, f @ ..] = *p;
                if [r1, r2, r3, r4, r5, r6, r7] != [0; 7] {
                    return Err(DropReason::BadControl);
                }
                Control::Refuse(Refusal {
                    topic_id: h.topic_id,
                    requested: h.fingerprint,
                    offered: u64::from_le_bytes(f),
                    session: h.session,
                    reason: RefuseReason::from_u8(code)?,
                })
            }
        })
    }
}

impl BatchEncoder<'_> {
    /// A `Subscribe` or `Unsubscribe`: the cookie with [`Flags::COOKIE`], or zero padding.
    fn push_optional_cookie(
        &mut self,
        mut header: Header,
        cookie: Option<Cookie>,
    ) -> Result<(), EncodeError> {
        match cookie {
            Some(c) => {
                header.flags = Flags(Flags::COOKIE);
                self.push_raw(header, &c.0)
            }
            None => self.push_raw(header, &[0; COOKIE_LEN]),
        }
    }
}

/// A control frame's header: everything but the payload length.
const fn control_header(kind: Kind, topic_id: u64, fingerprint: u64, session: u64) -> Header {
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
                cookie,
            } => self.push_optional_cookie(
                control_header(Kind::Subscribe, topic_id, fingerprint, session),
                cookie,
            ),
            Control::Unsubscribe {
                topic_id,
                fingerprint,
                session,
                cookie,
            } => self.push_optional_cookie(
                control_header(Kind::Unsubscribe, topic_id, fingerprint, session),
                cookie,
            ),
            Control::CookieChallenge {
                topic_id,
                fingerprint,
                session,
                cookie,
            } => self.push_raw(
                control_header(Kind::CookieChallenge, topic_id, fingerprint, session),
                &cookie.0,
            ),
            Control::SubscribeAck {
                topic_id,
                fingerprint,
                session,
                last_seq,
                cookie,
            } => {
                let mut h = control_header(Kind::SubscribeAck, topic_id, fingerprint, session);
                h.seq = last_seq;
                self.push_raw(h, &cookie.0)
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
                payload[8..].copy_from_slice(&r.offered.to_le_bytes());
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
            cookie: None,
        });
        let answers = [
            Control::CookieChallenge {
                topic_id: 1,
                fingerprint: 2,
                session: 4,
                cookie: Cookie([9; 16]),
            },
            Control::SubscribeAck {
                topic_id: 1,
                fingerprint: 2,
                session: 4,
                last_seq: 5,
                cookie: Cookie([9; 16]),
            },
            Control::Refuse(Refusal {
                topic_id: 1,
                requested: 2,
                offered: 0,
                session: 4,
                reason: RefuseReason::TopicFull,
            }),
        ];
        for answer in answers {
            let bytes = one(answer);
            assert_eq!(bytes.len(), hello.len(), "{answer:?}");
            assert_eq!(control_of(&bytes), Ok(answer));
        }
        assert_eq!(hello.len(), 64);
        assert_eq!(hello[5], 0);
        assert_eq!(&hello[48..], &[0; 16]);
        let proven = Control::Unsubscribe {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            cookie,
        };
        let bytes = one(proven);
        assert_eq!(bytes[5], Flags::COOKIE);
        assert_eq!(control_of(&bytes), Ok(proven));
        // Padding must be zero; the cookie flag is only for subscribe and unsubscribe.
        let mut bad = hello.clone();
        bad[63] = 1;
        assert_eq!(control_of(&bad), Err(DropReason::BadControl));
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
