//! The publisher side of the handshake: a sans-IO state machine.
//!
//! Input: a control frame, its source address and the time ([`PublisherSession::on_control`]).
//! Output: at most one answer per frame, to the source, echoing the request's nonce and exactly
//! as long as the request (so the publisher never amplifies), and whether the subscriber table
//! changed. The source address is never trusted:
//!
//! 1. The source must be allowed to subscribe to the topic (the export's allowlist or the
//!    bridge's), else [`DropReason::NotAllowed`] and no answer.
//! 2. Every `Subscribe` and `Unsubscribe`, proven or not (renewals included), is charged to
//!    the rate limit of its source IP ([`DropReason::RateLimited`] beyond it, no answer).
//! 3. A `Subscribe` without a cookie that proves the source's address is answered only by a
//!    `CookieChallenge`; a wrong cookie is [`DropReason::BadCookie`] (counted once, still
//!    challenged, so a subscriber whose cookie expired recovers).
//! 4. A proven `Subscribe` is checked (topic exported, fingerprint equal), entered in the
//!    subscriber table (capped per host per topic, per topic and in all) and acknowledged with
//!    a fresh cookie, the topic's last sequence number and the subscription token; or refused
//!    with the reason (`HostFull` when the host holds its share of the topic's slots).
//! 5. An `Unsubscribe` is honoured only with a cookie proving the source.
//!
//! The subscription token binds the data of a subscription to its handshake: it is a keyed
//! BLAKE3 hash (under a random key of this bridge) of the subscriber's address, the topic and
//! the subscriber's session, sent only in the `SubscribeAck` to that proven address; every
//! data, heartbeat and retransmission datagram to that subscriber ends with it. Another host,
//! even one allowed to subscribe, never sees it, so it cannot inject into or silence that
//! subscriber's import.
//!
//! Cookies are stateless (`CookieJar`): nothing is kept for an unproven source but its rate
//! limiter bucket.

use std::net::SocketAddr;

use crate::{
    Allowlist, Control, Cookie, CookieJar, DropReason, HostBudgets, RateLimiter, Refusal,
    RefuseReason, ReliableConfig, Renewal, SubscriberTable,
};

use super::Replies;

/// One exported topic, as the handshake sees it.
#[derive(Clone, Debug)]
pub struct ExportedTopic {
    /// The topic id.
    pub topic_id: u64,
    /// The fingerprint of the exported type.
    pub fingerprint: u64,
    /// Who may subscribe to it; `None`: the bridge's allowlist.
    pub allow: Option<Allowlist>,
}

/// What one control frame did to the publisher's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublisherEvent {
    /// Nothing changed (a challenge sent, a renewal, a refusal, ...).
    None,
    /// The subscribers of `topic_id` changed (one added, restarted or removed).
    SubscribersChanged(u64),
}

/// The counters of the publisher side that are not drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublisherCounts {
    /// Challenges sent.
    pub challenges: u64,
    /// Subscriptions refused.
    pub refused: u64,
}

/// The publisher side of the handshake of one bridge. See the module docs.
#[derive(Debug)]
pub struct PublisherSession {
    session: u64,
    jar: CookieJar,
    limiter: RateLimiter,
    allow: Allowlist,
    topics: Vec<ExportedTopic>,
    subscribers: SubscriberTable<SocketAddr>,
    /// The key of the subscription tokens (random per bridge, never sent).
    token_key: [u8; 32],
    /// The retransmission budgets of the subscriber hosts.
    budgets: HostBudgets,
    counts: PublisherCounts,
}

impl PublisherSession {
    /// The handshake of the bridge with session id `session`, exporting `topics`, admitting
    /// sources of `allow` (unless a topic has its own list). `token_key` is a random secret
    /// of this bridge, the key of its subscription tokens. Retransmission budgets are the
    /// default's ([`ReliableConfig::retransmit_rate`]) per host, for as many hosts as the
    /// table holds subscribers ([`PublisherSession::with_budgets`] to change them).
    pub fn new(
        session: u64,
        jar: CookieJar,
        limiter: RateLimiter,
        allow: Allowlist,
        topics: Vec<ExportedTopic>,
        subscribers: SubscriberTable<SocketAddr>,
        token_key: [u8; 32],
    ) -> Self {
        let budgets = HostBudgets::new(
            subscribers.capacity(),
            ReliableConfig::default().retransmit_rate,
        );
        PublisherSession {
            session,
            jar,
            limiter,
            allow,
            topics,
            subscribers,
            token_key,
            budgets,
            counts: PublisherCounts::default(),
        }
    }

    /// The same session with these retransmission budgets.
    pub fn with_budgets(mut self, budgets: HostBudgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// The retransmission budgets of the subscriber hosts, to plan a retransmission or a
    /// late-join burst with.
    pub fn budgets_mut(&mut self) -> &mut HostBudgets {
        &mut self.budgets
    }

    /// The subscription token of `src`'s subscription to `topic_id` under its session
    /// `session`: the first 8 bytes of BLAKE3-keyed(token key, canonical IPv6 form of the
    /// address (16) | port (2) | topic (8) | session (8)), never 0.
    pub fn token(&self, src: SocketAddr, topic_id: u64, session: u64) -> u64 {
        let ip = match src.ip().to_canonical() {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            std::net::IpAddr::V6(v6) => v6,
        };
        let mut input = [0u8; 34];
        input[..16].copy_from_slice(&ip.octets());
        input[16..18].copy_from_slice(&src.port().to_le_bytes());
        input[18..26].copy_from_slice(&topic_id.to_le_bytes());
        input[26..].copy_from_slice(&session.to_le_bytes());
        let hash = blake3::keyed_hash(&self.token_key, &input);
        let mut token = [0u8; 8];
        if let Some(head) = hash.as_bytes().first_chunk::<8>() {
            token = *head;
        }
        u64::from_le_bytes(token).max(1)
    }

    /// The subscriber table.
    pub fn subscribers(&self) -> &SubscriberTable<SocketAddr> {
        &self.subscribers
    }

    /// The subscriber table, to record what a subscriber said of the group it receives.
    pub fn subscribers_mut(&mut self) -> &mut SubscriberTable<SocketAddr> {
        &mut self.subscribers
    }

    /// The counters.
    pub fn counts(&self) -> &PublisherCounts {
        &self.counts
    }

    /// The exported topics.
    pub fn topics(&self) -> &[ExportedTopic] {
        &self.topics
    }

    /// Exports `topic` too (a served service: subscribing to it is what proves a caller).
    pub(crate) fn add_topic(&mut self, topic: ExportedTopic) {
        self.topics.push(topic);
    }

    /// Mixes fresh randomness into the next cookie window's secret.
    pub fn reseed(&mut self, entropy: [u8; 32]) {
        self.jar.reseed(entropy);
    }

    /// Drops subscribers not renewed within the timeout; `on_expired` sees each.
    pub fn expire(
        &mut self,
        now_ns: u64,
        on_expired: impl FnMut(&crate::Subscriber<SocketAddr>),
    ) -> usize {
        self.subscribers.expire(now_ns, on_expired)
    }

    /// Whether one more unproven control message from `src` is within its rate limit (the
    /// compat format, which has no cookies, uses this alone).
    pub fn rate_ok(&mut self, src: SocketAddr, now_ns: u64) -> bool {
        self.limiter.allow(src.ip(), now_ns)
    }

    /// Whether `src` may subscribe to `topic_id` (or fetch its schema).
    pub(crate) fn allowed(&self, topic_id: u64, src: SocketAddr) -> bool {
        let own = self
            .topics
            .iter()
            .find(|t| t.topic_id == topic_id)
            .and_then(|t| t.allow.as_ref());
        own.unwrap_or(&self.allow).contains(src.ip())
    }

    /// Whether `cookie` proves `src`'s address; `Err(BadCookie)` for one that does not.
    fn proven(
        &mut self,
        src: SocketAddr,
        cookie: Option<Cookie>,
        now_ns: u64,
    ) -> Result<bool, DropReason> {
        match cookie {
            Some(c) if self.jar.verify(src, &c, now_ns) => Ok(true),
            Some(_) => Err(DropReason::BadCookie),
            None => Ok(false),
        }
    }

    /// Whether `nak` from `src` may be answered at all: its cookie proves `src`'s address and
    /// `src` is subscribed to the topic under the NAK's session id. Nothing is ever sent for a
    /// NAK this refuses (no amplification towards an unproven or unsubscribed address).
    ///
    /// # Errors
    /// [`DropReason::BadCookie`] for a cookie that does not prove `src`;
    /// [`DropReason::UnknownSender`] for a source not subscribed to the topic (or under
    /// another session).
    pub fn admit_nak(
        &mut self,
        nak: &crate::Nak,
        src: SocketAddr,
        now_ns: u64,
    ) -> Result<(), DropReason> {
        if !self.jar.verify(src, &nak.cookie, now_ns) {
            return Err(DropReason::BadCookie);
        }
        if self
            .subscribers
            .iter()
            .any(|s| s.addr == src && s.topic_id == nak.topic_id && s.session == nak.session)
        {
            Ok(())
        } else {
            Err(DropReason::UnknownSender)
        }
    }

    /// Handles one control frame from `src` at `now_ns`. `last_seq(topic_id)` is the last
    /// sequence number sent on an exported topic. The answer, if any, goes into `replies`.
    ///
    /// # Errors
    /// The reason to count the frame under (it had no effect; a challenge may still have been
    /// queued for a bad cookie, whose datagram is counted once, under `BadCookie`).
    pub fn on_control(
        &mut self,
        control: &Control,
        src: SocketAddr,
        now_ns: u64,
        last_seq: impl Fn(u64) -> u64,
        replies: &mut Replies,
    ) -> Result<PublisherEvent, DropReason> {
        match *control {
            Control::Subscribe {
                topic_id,
                fingerprint,
                session,
                nonce,
                cookie,
            } => {
                if !self.allowed(topic_id, src) {
                    return Err(DropReason::NotAllowed);
                }
                let proven = self.proven(src, cookie, now_ns);
                // Proven or not, a request costs its source: renewals cannot hold slots
                // faster than the rate limit allows.
                if !self.limiter.allow(src.ip(), now_ns) {
                    return Err(proven.err().unwrap_or(DropReason::RateLimited));
                }
                if proven != Ok(true) {
                    // Unproven address: the only answer is a challenge, as long as the
                    // request.
                    let cookie = self.jar.issue(src, now_ns);
                    replies.push(Control::CookieChallenge {
                        topic_id,
                        fingerprint,
                        session: self.session,
                        nonce,
                        cookie,
                    });
                    self.counts.challenges = self.counts.challenges.saturating_add(1);
                    return proven.map(|_| PublisherEvent::None);
                }
                let exported = self
                    .topics
                    .iter()
                    .find(|t| t.topic_id == topic_id)
                    .map(|t| t.fingerprint);
                let refuse = |reason, offered| {
                    Control::Refuse(Refusal {
                        topic_id,
                        requested: fingerprint,
                        offered,
                        session: self.session,
                        reason,
                        nonce,
                    })
                };
                let (reply, event) = match exported {
                    None => (refuse(RefuseReason::UnknownTopic, 0), PublisherEvent::None),
                    Some(offered) if offered != fingerprint => (
                        refuse(RefuseReason::FingerprintMismatch, offered),
                        PublisherEvent::None,
                    ),
                    Some(offered) => match self.subscribers.renew(
                        src,
                        topic_id,
                        session,
                        self.token(src, topic_id, session),
                        now_ns,
                    ) {
                        Ok(renewal) => {
                            let ack = Control::SubscribeAck {
                                topic_id,
                                fingerprint: offered,
                                session: self.session,
                                last_seq: last_seq(topic_id),
                                nonce,
                                cookie: self.jar.issue(src, now_ns),
                                token: self.token(src, topic_id, session),
                            };
                            let event = if renewal == Renewal::Renewed {
                                PublisherEvent::None
                            } else {
                                PublisherEvent::SubscribersChanged(topic_id)
                            };
                            (ack, event)
                        }
                        Err(DropReason::TopicFull) => {
                            let reason = if self.subscribers.host_full(src, topic_id) {
                                RefuseReason::HostFull
                            } else {
                                RefuseReason::TopicFull
                            };
                            (refuse(reason, offered), PublisherEvent::None)
                        }
                        Err(_) => (
                            refuse(RefuseReason::TableFull, offered),
                            PublisherEvent::None,
                        ),
                    },
                };
                if let Control::Refuse(_) = reply {
                    self.counts.refused = self.counts.refused.saturating_add(1);
                }
                replies.push(reply);
                Ok(event)
            }
            Control::Unsubscribe {
                topic_id, cookie, ..
            } => {
                // Only the subscriber itself may end its subscription: it proves its address.
                if cookie.is_none() {
                    return Err(DropReason::BadCookie);
                }
                if !self.limiter.allow(src.ip(), now_ns) {
                    return Err(DropReason::RateLimited);
                }
                self.proven(src, cookie, now_ns)?;
                if self.subscribers.remove(src, topic_id) {
                    Ok(PublisherEvent::SubscribersChanged(topic_id))
                } else {
                    Ok(PublisherEvent::None)
                }
            }
            // Frames a subscriber never sends to a publisher: the subscriber side's business.
            Control::CookieChallenge { .. }
            | Control::SubscribeAck { .. }
            | Control::Refuse(_)
            | Control::Heartbeat { .. } => Err(DropReason::UnknownSender),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RateLimit, DEFAULT_SUBSCRIBER_TIMEOUT};
    use std::time::Duration;

    const TOPIC: u64 = 0x70;
    const FP: u64 = 0xf0;
    const ME: u64 = 0x9ab;
    const MS: u64 = 1_000_000;

    fn publisher(cap: usize) -> PublisherSession {
        PublisherSession::new(
            ME,
            CookieJar::new([3; 32], Duration::from_secs(30)),
            RateLimiter::new(
                RateLimit {
                    per_second: 20,
                    burst: 2,
                },
                16,
            ),
            Allowlist::loopback(),
            vec![ExportedTopic {
                topic_id: TOPIC,
                fingerprint: FP,
                allow: None,
            }],
            SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 8).with_topic_cap(cap),
            [7; 32],
        )
    }

    fn sub(nonce: u64, cookie: Option<Cookie>) -> Control {
        Control::Subscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 1,
            nonce,
            cookie,
        }
    }

    fn handle(
        p: &mut PublisherSession,
        c: &Control,
        src: &str,
        now: u64,
    ) -> (Result<PublisherEvent, DropReason>, Vec<Control>) {
        let src: SocketAddr = src.parse().unwrap();
        let mut r = Replies::with_capacity(4);
        r.clear(src);
        let res = p.on_control(c, src, now, |_| 42, &mut r);
        (res, r.frames().to_vec())
    }

    fn cookie_of(c: &Control) -> Cookie {
        match *c {
            Control::CookieChallenge { cookie, .. } | Control::SubscribeAck { cookie, .. } => {
                cookie
            }
            _ => panic!("no cookie in {c:?}"),
        }
    }

    #[test]
    fn handshake_echoes_the_nonce_and_admits_only_the_prover() {
        let mut p = publisher(4);
        let (res, out) = handle(&mut p, &sub(11, None), "127.0.0.1:5000", 0);
        assert_eq!(res, Ok(PublisherEvent::None));
        assert!(matches!(
            out[..],
            [Control::CookieChallenge { nonce: 11, .. }]
        ));
        assert!(p.subscribers().is_empty());
        let cookie = cookie_of(&out[0]);
        // The cookie from another address proves nothing.
        let (res, _) = handle(&mut p, &sub(12, Some(cookie)), "127.0.0.2:5000", MS);
        assert_eq!(res, Err(DropReason::BadCookie));
        assert!(p.subscribers().is_empty());
        let (res, out) = handle(&mut p, &sub(13, Some(cookie)), "127.0.0.1:5000", 100 * MS);
        assert_eq!(res, Ok(PublisherEvent::SubscribersChanged(TOPIC)));
        assert!(matches!(
            out[..],
            [Control::SubscribeAck {
                nonce: 13,
                last_seq: 42,
                session: ME,
                ..
            }]
        ));
        assert_eq!(p.subscribers().len(), 1);
        // A renewal changes nothing but is acknowledged.
        let (res, out) = handle(
            &mut p,
            &sub(14, Some(cookie_of(&out[0]))),
            "127.0.0.1:5000",
            200 * MS,
        );
        assert_eq!(res, Ok(PublisherEvent::None));
        assert!(matches!(out[..], [Control::SubscribeAck { nonce: 14, .. }]));
    }

    #[test]
    fn refusals_echo_the_nonce_and_caps_hold() {
        let mut p = publisher(1);
        let cookie =
            |p: &mut PublisherSession, src: &str| cookie_of(&handle(p, &sub(1, None), src, 0).1[0]);
        let c1 = cookie(&mut p, "127.0.0.1:1");
        let c2 = cookie(&mut p, "127.0.0.2:1");
        handle(&mut p, &sub(2, Some(c1)), "127.0.0.1:1", MS)
            .0
            .unwrap();
        let (_, out) = handle(&mut p, &sub(3, Some(c2)), "127.0.0.2:1", 100 * MS);
        assert!(matches!(
            out[..],
            [Control::Refuse(Refusal {
                reason: RefuseReason::TopicFull,
                nonce: 3,
                ..
            })]
        ));
        let mut other = sub(4, Some(c2));
        if let Control::Subscribe { fingerprint, .. } = &mut other {
            *fingerprint = 1;
        }
        let (_, out) = handle(&mut p, &other, "127.0.0.2:1", 200 * MS);
        assert!(matches!(
            out[..],
            [Control::Refuse(Refusal {
                reason: RefuseReason::FingerprintMismatch,
                offered: FP,
                nonce: 4,
                ..
            })]
        ));
        assert_eq!(p.counts().refused, 2);
    }

    #[test]
    fn outsiders_and_floods_get_nothing_or_a_bounded_few() {
        let mut p = publisher(4);
        let (res, out) = handle(&mut p, &sub(1, None), "10.0.0.1:1", 0);
        assert_eq!(res, Err(DropReason::NotAllowed));
        assert!(out.is_empty());
        // Burst 2: the third unproven request within the same instant gets no challenge.
        for _ in 0..2 {
            assert_eq!(handle(&mut p, &sub(1, None), "127.0.0.9:1", 0).1.len(), 1);
        }
        let (res, out) = handle(&mut p, &sub(1, None), "127.0.0.9:1", 0);
        assert_eq!(res, Err(DropReason::RateLimited));
        assert!(out.is_empty());
        // Frames only a publisher sends are not ours to handle.
        let hb = Control::Heartbeat {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 5,
            last_seq: 1,
            timestamp_ns: 0,
        };
        assert_eq!(
            handle(&mut p, &hb, "127.0.0.1:1", 0).0,
            Err(DropReason::UnknownSender)
        );
    }

    #[test]
    fn only_the_subscriber_unsubscribes_itself() {
        let mut p = publisher(4);
        let c = cookie_of(&handle(&mut p, &sub(1, None), "127.0.0.1:1", 0).1[0]);
        handle(&mut p, &sub(2, Some(c)), "127.0.0.1:1", MS)
            .0
            .unwrap();
        let unsub = |cookie| Control::Unsubscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 1,
            nonce: 3,
            cookie,
        };
        assert_eq!(
            handle(&mut p, &unsub(None), "127.0.0.1:1", MS).0,
            Err(DropReason::BadCookie)
        );
        assert_eq!(
            handle(&mut p, &unsub(Some(c)), "127.0.0.2:1", MS).0,
            Err(DropReason::BadCookie)
        );
        assert_eq!(p.subscribers().len(), 1);
        let (res, out) = handle(&mut p, &unsub(Some(c)), "127.0.0.1:1", 100 * MS);
        assert_eq!(res, Ok(PublisherEvent::SubscribersChanged(TOPIC)));
        assert!(out.is_empty());
        assert!(p.subscribers().is_empty());
    }

    /// Admits `src` (challenge, then the proven subscribe) at `now`.
    fn admit(p: &mut PublisherSession, src: &str, now: u64) -> Vec<Control> {
        let c = cookie_of(&handle(p, &sub(1, None), src, now).1[0]);
        handle(p, &sub(2, Some(c)), src, now + 100 * MS).1
    }

    #[test]
    fn one_host_cannot_take_every_slot_and_is_told_why() {
        let mut p = publisher(8);
        // 127.0.0.5 fills its share (4 by default) from four ports; its fifth port is
        // refused with the reason, another host is still admitted.
        for (i, port) in (1..=4).enumerate() {
            let out = admit(&mut p, &format!("127.0.0.5:{port}"), i as u64 * 1000 * MS);
            assert!(matches!(out[..], [Control::SubscribeAck { .. }]), "{out:?}");
        }
        let out = admit(&mut p, "127.0.0.5:5", 5000 * MS);
        assert!(
            matches!(
                out[..],
                [Control::Refuse(Refusal {
                    reason: RefuseReason::HostFull,
                    ..
                })]
            ),
            "{out:?}"
        );
        if let [Control::Refuse(r)] = out[..] {
            assert!(r.to_string().contains("this host"), "{r}");
        }
        let out = admit(&mut p, "127.0.0.6:1", 6000 * MS);
        assert!(matches!(out[..], [Control::SubscribeAck { .. }]), "{out:?}");
    }

    #[test]
    fn renewals_are_rate_limited_and_tokens_are_per_subscription() {
        let mut p = publisher(8);
        let out = admit(&mut p, "127.0.0.1:1", 0);
        let (c, token) = match out[..] {
            [Control::SubscribeAck { cookie, token, .. }] => (cookie, token),
            _ => panic!("{out:?}"),
        };
        // Burst 2: proven renewals in the same instant are charged too.
        let renewals: Vec<_> = (0..4)
            .map(|n| handle(&mut p, &sub(10 + n, Some(c)), "127.0.0.1:1", 200 * MS).0)
            .collect();
        assert!(
            renewals.contains(&Err(DropReason::RateLimited)),
            "{renewals:?}"
        );
        // The token is the subscription's: the same on renewal, another for another port,
        // topic or subscriber session, and it is what the table sends with.
        let src: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(p.token(src, TOPIC, 1), token);
        assert_ne!(p.token("127.0.0.1:2".parse().unwrap(), TOPIC, 1), token);
        assert_ne!(p.token(src, TOPIC + 1, 1), token);
        assert_ne!(p.token(src, TOPIC, 2), token);
        assert_eq!(
            p.subscribers().destinations(TOPIC).collect::<Vec<_>>(),
            [(src, token)]
        );
    }
}
