//! The subscriber side of one import: a sans-IO state machine.
//!
//! Inputs: a control frame from the import's publisher address ([`SubscriberSession::on_control`]),
//! a data frame's header ([`SubscriberSession::on_data`]), and the time
//! ([`SubscriberSession::poll`]). Outputs: frames to send (a `Subscribe`, the answer to a
//! challenge) and events (established, refused). The bridge routes to it only frames whose
//! source is the import's publisher; everything here assumes that source may be forged.
//!
//! Algorithm (`docs/PROTOCOL.md`, "Handshake"):
//! - Every `Subscribe` carries a fresh nonce: the first 8 bytes of a keyed BLAKE3 hash of a
//!   counter under a random per-import secret (unpredictable without the secret, no system
//!   call per nonce). The last [`OUTSTANDING`] requests are remembered.
//! - A `CookieChallenge`, `SubscribeAck` or `Refuse` counts only if it echoes one of them
//!   (else [`DropReason::BadNonce`]). Each request is answered once: a second answer to it is a
//!   *duplicate*, an answer to a request older than one already answered is *stale*; both are
//!   counted under their own names and ignored (a network that duplicates or reorders is not
//!   an attacker).
//! - Only an echoing `SubscribeAck` establishes or changes the publisher session the import
//!   follows, and only if it answers a request newer than the one that established the current
//!   session. Data or heartbeats of any other session are dropped (frames of the session
//!   before the current one as stale, others as unknown) and trigger a resubscribe, at most one
//!   per [`RESUBSCRIBE_GAP_NS`].
//! - Without a pre-shared key, every data frame, heartbeat and `Unavailable` must end its
//!   datagram with the subscription token of the `SubscribeAck` that established or renewed
//!   the session (else [`DropReason::BadToken`], with no other effect: a host that was not
//!   sent that acknowledgement cannot inject, nor trigger a resubscribe once the import has its
//!   token; before, such frames make the next request due at once, as an unknown session's
//!   do, since they mean our acknowledgement was lost). With a key, the MAC does that and no
//!   token is used ([`SubscriberSession::without_token`]).
//! - A refusal of an unknown topic or a fingerprint mismatch is final; a full table or topic is
//!   retried with exponential backoff (from the renewal period up to [`MAX_BACKOFF_NS`]).

use std::time::Duration;

use crate::{
    Control, Cookie, DropReason, Header, LatePolicy, LossCounts, Refusal, SeqTracker, Verdict,
};

use super::Replies;

/// How many recent requests (nonces) an answer may echo.
pub const OUTSTANDING: usize = 8;

/// The least time between two resubscribes triggered by frames of an unknown session: bounds
/// what forged data can make an import send (50 a second).
pub const RESUBSCRIBE_GAP_NS: u64 = 20_000_000;

/// The longest wait between two attempts after transient refusals.
pub const MAX_BACKOFF_NS: u64 = 30_000_000_000;

/// One request sent.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    /// Its number among this import's requests, from 1 (0: the slot is empty).
    number: u64,
    nonce: u64,
    answered: bool,
}

/// Where the import stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportState {
    /// No session established (yet, or the publisher stopped answering).
    Subscribing,
    /// Following publisher session `session`, established by the answer to request `by`.
    Established {
        /// The publisher's session id.
        session: u64,
        /// The number of the request whose acknowledgement established it.
        by: u64,
    },
    /// Refused for good (unknown topic, fingerprint mismatch): nothing more is sent.
    Refused(Refusal),
}

/// What one control frame did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriberEvent {
    /// Nothing the bridge must act on (a renewal acknowledged, a challenge answered, a
    /// duplicate or stale answer ignored, a heartbeat).
    None,
    /// A publisher session was established (`changed`: it replaces another one).
    Established {
        /// The publisher's session id.
        session: u64,
        /// Whether an earlier session was replaced (the publisher restarted).
        changed: bool,
    },
    /// The publisher refused, for good: report it; the import is over.
    Refused(Refusal),
    /// The publisher refused for now (table or topic full): retried with backoff.
    Retrying(Refusal),
}

/// The counters of one import's machine (the sequence tracker's are in [`LossCounts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscriberCounts {
    /// Answers to a request that was answered already (the network duplicated them).
    pub control_duplicates: u64,
    /// Answers to a request older than one already answered (the network delayed them).
    pub control_stale: u64,
    /// Data and heartbeats of a session no acknowledgement established: dropped.
    pub unknown_session: u64,
    /// Resubscribes those triggered.
    pub resubscribes: u64,
    /// Transient refusals (retried).
    pub refused: u64,
}

impl SubscriberCounts {
    /// Adds `other`'s counts to these (sums saturate).
    pub fn add(&mut self, other: &SubscriberCounts) {
        self.control_duplicates = self
            .control_duplicates
            .saturating_add(other.control_duplicates);
        self.control_stale = self.control_stale.saturating_add(other.control_stale);
        self.unknown_session = self.unknown_session.saturating_add(other.unknown_session);
        self.resubscribes = self.resubscribes.saturating_add(other.resubscribes);
        self.refused = self.refused.saturating_add(other.refused);
    }
}

/// The subscriber side of one import. See the module docs.
#[derive(Clone, Debug)]
pub struct SubscriberSession {
    topic_id: u64,
    fingerprint: u64,
    /// This bridge's own session id, sent in every request.
    own_session: u64,
    /// The key of the nonce generator.
    secret: [u8; 32],
    /// Requests sent so far (the last one's number).
    requests: u64,
    /// The last [`OUTSTANDING`] requests, indexed by `number % OUTSTANDING`.
    sent: [Sent; OUTSTANDING],
    /// The newest request answered, by number (0: none).
    newest_answered: u64,
    cookie: Option<Cookie>,
    state: ImportState,
    /// The session before the current one: its late frames are stale.
    previous: Option<u64>,
    tracker: SeqTracker,
    renew_ns: u64,
    /// When the next `Subscribe` is due.
    next_request_ns: u64,
    /// The wait after the next transient refusal.
    backoff_ns: u64,
    /// When the last resubscribe was triggered by an unknown session.
    last_resubscribe_ns: Option<u64>,
    /// Whether downstream frames must carry the subscription token (no pre-shared key).
    token_required: bool,
    /// The subscription token of the session followed, from its `SubscribeAck`.
    token: Option<u64>,
    /// The token of the topic's multicast group, from a `Group` frame of the session
    /// followed: group datagrams end with it.
    group_token: Option<u64>,
    counts: SubscriberCounts,
}

impl SubscriberSession {
    /// A machine for topic `topic_id` with the local type's `fingerprint`. `own_session` is the
    /// bridge's session id, `secret` a random key for its nonces, `renew` the renewal period.
    pub fn new(
        topic_id: u64,
        fingerprint: u64,
        own_session: u64,
        secret: [u8; 32],
        renew: Duration,
        late: LatePolicy,
    ) -> Self {
        let renew_ns = u64::try_from(renew.as_nanos()).unwrap_or(u64::MAX).max(1);
        SubscriberSession {
            topic_id,
            fingerprint,
            own_session,
            secret,
            requests: 0,
            sent: [Sent::default(); OUTSTANDING],
            newest_answered: 0,
            cookie: None,
            state: ImportState::Subscribing,
            previous: None,
            tracker: SeqTracker::new(late),
            renew_ns,
            next_request_ns: 0,
            backoff_ns: renew_ns,
            last_resubscribe_ns: None,
            token_required: true,
            token: None,
            group_token: None,
            counts: SubscriberCounts::default(),
        }
    }

    /// The same machine for a bridge with a pre-shared key: downstream frames carry no
    /// subscription token (the MAC authenticates them).
    pub fn without_token(mut self) -> Self {
        self.token_required = false;
        self
    }

    /// Whether a downstream frame whose datagram ended with `token` belongs to this
    /// subscription. Without a required token, every frame does.
    ///
    /// # Errors
    /// [`DropReason::BadToken`] when the token is missing or not this subscription's.
    pub fn check_token(&self, token: Option<u64>) -> Result<(), DropReason> {
        if !self.token_required
            || (token.is_some() && (token == self.token || token == self.group_token))
        {
            Ok(())
        } else {
            Err(DropReason::BadToken)
        }
    }

    /// Also accepts downstream frames ending with `token`: the group token of the topic's
    /// multicast group, from a `Group` frame that carried this subscription's own token.
    pub fn set_group_token(&mut self, token: u64) {
        self.group_token = Some(token);
    }

    /// The subscription token of the session followed, if its acknowledgement came.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// The group token accepted, if any.
    pub fn group_token(&self) -> Option<u64> {
        self.group_token
    }

    /// Makes the next renewal of an established subscription due now: to say at once that
    /// the group is now received, or no longer. Does nothing otherwise (a subscription being
    /// made keeps its backoff).
    pub fn renew_soon(&mut self, now_ns: u64) {
        if matches!(self.state, ImportState::Established { .. }) {
            self.next_request_ns = self.next_request_ns.min(now_ns);
        }
    }

    /// The topic id.
    pub fn topic_id(&self) -> u64 {
        self.topic_id
    }

    /// Where the import stands.
    pub fn state(&self) -> ImportState {
        self.state
    }

    /// The machine's counters.
    pub fn counts(&self) -> &SubscriberCounts {
        &self.counts
    }

    /// The sequence tracker's counters.
    pub fn loss(&self) -> &LossCounts {
        self.tracker.counts()
    }

    /// The cookie the publisher last gave (`None` before the first challenge or ack).
    pub fn cookie(&self) -> Option<Cookie> {
        self.cookie
    }

    /// A fresh `Subscribe`, remembered as outstanding.
    fn request(&mut self, now_ns: u64) -> Control {
        self.requests += 1;
        let number = self.requests;
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&number.to_le_bytes());
        input[8..].copy_from_slice(&self.topic_id.to_le_bytes());
        let hash = blake3::keyed_hash(&self.secret, &input);
        let mut nonce = [0u8; 8];
        if let Some(head) = hash.as_bytes().first_chunk::<8>() {
            nonce = *head;
        }
        let nonce = u64::from_le_bytes(nonce);
        if let Some(slot) = self.sent.get_mut(slot_of(number)) {
            *slot = Sent {
                number,
                nonce,
                answered: false,
            };
        }
        self.next_request_ns = now_ns.saturating_add(self.renew_ns);
        Control::Subscribe {
            topic_id: self.topic_id,
            fingerprint: self.fingerprint,
            session: self.own_session,
            nonce,
            cookie: self.cookie,
        }
    }

    /// The `Subscribe` due at `now_ns` (the first one, a renewal, a retry after a refusal, or a
    /// resubscribe), if any. Call it on every timer tick.
    pub fn poll(&mut self, now_ns: u64) -> Option<Control> {
        if matches!(self.state, ImportState::Refused(_)) || now_ns < self.next_request_ns {
            return None;
        }
        Some(self.request(now_ns))
    }

    /// The `Unsubscribe` to send when the bridge stops, if the publisher ever admitted us.
    pub fn unsubscribe(&mut self) -> Option<Control> {
        if matches!(self.state, ImportState::Refused(_)) {
            return None;
        }
        let cookie = self.cookie?;
        let Control::Subscribe { nonce, .. } = self.request(0) else {
            return None;
        };
        Some(Control::Unsubscribe {
            topic_id: self.topic_id,
            fingerprint: self.fingerprint,
            session: self.own_session,
            nonce,
            cookie: Some(cookie),
        })
    }

    /// Which request `nonce` answers: `Ok(number)` for an outstanding one (now marked
    /// answered), `Err(None)` for a duplicate or stale answer (counted), `Err(Some(BadNonce))`
    /// for a nonce never sent (or too long ago).
    fn answer(&mut self, nonce: u64) -> Result<u64, Option<DropReason>> {
        let Some(slot) = self
            .sent
            .iter_mut()
            .find(|s| s.number != 0 && s.nonce == nonce)
        else {
            return Err(Some(DropReason::BadNonce));
        };
        if slot.answered {
            self.counts.control_duplicates = self.counts.control_duplicates.saturating_add(1);
            return Err(None);
        }
        slot.answered = true;
        let number = slot.number;
        if number < self.newest_answered {
            self.counts.control_stale = self.counts.control_stale.saturating_add(1);
            return Err(None);
        }
        self.newest_answered = number;
        Ok(number)
    }

    /// Handles a control frame from the publisher's address; `token` is the subscription
    /// token its datagram ended with, if any. Answers (a `Subscribe` with the cookie, after a
    /// challenge) go into `replies`.
    ///
    /// # Errors
    /// The reason to count the frame under: [`DropReason::BadNonce`] for an answer to nothing
    /// we sent, [`DropReason::BadControl`] for a frame a publisher never sends,
    /// [`DropReason::BadToken`] for a heartbeat without this subscription's token, or a topic
    /// mismatch as [`DropReason::UnknownTopic`].
    pub fn on_control(
        &mut self,
        control: &Control,
        token: Option<u64>,
        now_ns: u64,
        replies: &mut Replies,
    ) -> Result<SubscriberEvent, DropReason> {
        match *control {
            Control::CookieChallenge {
                topic_id,
                nonce,
                cookie,
                ..
            } => {
                if self.admit(topic_id, nonce)?.is_some() {
                    self.cookie = Some(cookie);
                    let again = self.request(now_ns);
                    replies.push(again);
                }
                Ok(SubscriberEvent::None)
            }
            Control::SubscribeAck {
                topic_id,
                session,
                last_seq,
                nonce,
                cookie,
                token: acked,
                ..
            } => {
                let Some(number) = self.admit(topic_id, nonce)? else {
                    return Ok(SubscriberEvent::None);
                };
                self.cookie = Some(cookie);
                self.backoff_ns = self.renew_ns;
                match self.state {
                    ImportState::Established { session: s, .. } if s == session => {
                        self.token = Some(acked);
                        self.state = ImportState::Established {
                            session,
                            by: number,
                        };
                        self.tracker.observe_last_seq(session, last_seq);
                        Ok(SubscriberEvent::None)
                    }
                    ImportState::Established { session: old, by } if number > by => {
                        self.token = Some(acked);
                        // The old session's group token opens nothing of the new one: the
                        // new session tells its own group, if any.
                        self.group_token = None;
                        self.previous = Some(old);
                        self.state = ImportState::Established {
                            session,
                            by: number,
                        };
                        self.tracker.observe_last_seq(session, last_seq);
                        Ok(SubscriberEvent::Established {
                            session,
                            changed: true,
                        })
                    }
                    ImportState::Established { .. } => {
                        // Answers an older request than the one that established the current
                        // session: `answer` counted it stale already, or it cannot happen.
                        Ok(SubscriberEvent::None)
                    }
                    ImportState::Subscribing | ImportState::Refused(_) => {
                        self.token = Some(acked);
                        self.state = ImportState::Established {
                            session,
                            by: number,
                        };
                        self.tracker.observe_last_seq(session, last_seq);
                        Ok(SubscriberEvent::Established {
                            session,
                            changed: false,
                        })
                    }
                }
            }
            Control::Refuse(refusal) => {
                if self.admit(refusal.topic_id, refusal.nonce)?.is_none() {
                    return Ok(SubscriberEvent::None);
                }
                if refusal.is_final() {
                    self.state = ImportState::Refused(refusal);
                    return Ok(SubscriberEvent::Refused(refusal));
                }
                self.counts.refused = self.counts.refused.saturating_add(1);
                self.next_request_ns = now_ns.saturating_add(self.backoff_ns);
                self.backoff_ns = self.backoff_ns.saturating_mul(2).min(MAX_BACKOFF_NS);
                Ok(SubscriberEvent::Retrying(refusal))
            }
            Control::Heartbeat {
                topic_id,
                session,
                last_seq,
                ..
            } => {
                self.check_topic(topic_id)?;
                if self.bound(token, now_ns)? && self.follows(session, now_ns) {
                    self.tracker.observe_last_seq(session, last_seq);
                }
                Ok(SubscriberEvent::None)
            }
            // Frames a publisher never sends to a subscriber.
            Control::Subscribe { .. } | Control::Unsubscribe { .. } => Err(DropReason::BadControl),
        }
    }

    /// Whether an answer (challenge, acknowledgement, refusal) of `topic_id` echoing `nonce`
    /// is to be acted on: `Some(request number)`; `None` for one to ignore (the import was
    /// refused for good, or a duplicate or stale answer, counted).
    ///
    /// # Errors
    /// [`DropReason::UnknownTopic`] for another topic, [`DropReason::BadNonce`] for a nonce
    /// this import did not send (recently).
    fn admit(&mut self, topic_id: u64, nonce: u64) -> Result<Option<u64>, DropReason> {
        self.check_topic(topic_id)?;
        if matches!(self.state, ImportState::Refused(_)) {
            return Ok(None);
        }
        match self.answer(nonce) {
            Ok(number) => Ok(Some(number)),
            Err(None) => Ok(None),
            Err(Some(reason)) => Err(reason),
        }
    }

    fn check_topic(&self, topic_id: u64) -> Result<(), DropReason> {
        if topic_id == self.topic_id {
            Ok(())
        } else {
            Err(DropReason::UnknownTopic)
        }
    }

    /// Whether a frame of publisher session `session` belongs to the stream the import
    /// follows. Frames of the previous session count as stale; of any other session, as
    /// unknown, and they make the next request due now (at most once per gap).
    fn follows(&mut self, session: u64, now_ns: u64) -> bool {
        if let ImportState::Established { session: s, .. } = self.state {
            if s == session {
                return true;
            }
        }
        if self.previous == Some(session) {
            // The tracker counts it stale (it remembers the previous session too).
            let _ = self.tracker.observe(session, 0);
            return false;
        }
        self.counts.unknown_session = self.counts.unknown_session.saturating_add(1);
        self.resubscribe_soon(now_ns);
        false
    }

    /// Makes the next `Subscribe` due now (at most once per [`RESUBSCRIBE_GAP_NS`]), unless
    /// the import was refused for good.
    fn resubscribe_soon(&mut self, now_ns: u64) {
        if matches!(self.state, ImportState::Refused(_)) {
            return;
        }
        let due = self
            .last_resubscribe_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= RESUBSCRIBE_GAP_NS);
        if due && self.next_request_ns > now_ns {
            self.last_resubscribe_ns = Some(now_ns);
            self.next_request_ns = now_ns;
            self.counts.resubscribes = self.counts.resubscribes.saturating_add(1);
        }
    }

    /// [`SubscriberSession::check_token`] for a frame that arrived at `now_ns`: `Ok(true)` for
    /// a frame of this subscription. Downstream frames before any token is known mean the
    /// publisher admitted us and its answer was lost or is late: like frames of a session no
    /// acknowledgement established, they are counted (`unknown_session`), not delivered
    /// (`Ok(false)`), and make the next `Subscribe` due at once (bounded) instead of a renewal
    /// period later. Once a token is known, a frame without it is `Err(BadToken)` and changes
    /// nothing at all.
    fn bound(&mut self, token: Option<u64>, now_ns: u64) -> Result<bool, DropReason> {
        match self.check_token(token) {
            Ok(()) => Ok(true),
            Err(_) if self.token.is_none() => {
                self.counts.unknown_session = self.counts.unknown_session.saturating_add(1);
                self.resubscribe_soon(now_ns);
                Ok(false)
            }
            Err(reason) => Err(reason),
        }
    }

    /// Reliable imports: whether a data frame, heartbeat or `Unavailable` of publisher session
    /// `session` with `fingerprint`, in a datagram that ended with `token`, belongs to the
    /// stream the import follows. The reliable receiver (not the loss tracker) accounts for
    /// what it carries. A frame of an unknown session triggers a resubscribe, as for
    /// [`SubscriberSession::on_data`].
    ///
    /// # Errors
    /// [`DropReason::FingerprintMismatch`] for another fingerprint, [`DropReason::BadToken`]
    /// for a frame without this subscription's token.
    pub fn follows_reliable(
        &mut self,
        fingerprint: u64,
        session: u64,
        token: Option<u64>,
        now_ns: u64,
    ) -> Result<bool, DropReason> {
        if fingerprint != self.fingerprint {
            return Err(DropReason::FingerprintMismatch);
        }
        Ok(self.bound(token, now_ns)? && self.follows(session, now_ns))
    }

    /// Checks a data frame's header, in a datagram that ended with `token`: whether to decode
    /// and deliver its payload. The caller has checked the source and the topic; the
    /// fingerprint and the token are checked here.
    ///
    /// # Errors
    /// [`DropReason::FingerprintMismatch`] for another fingerprint, [`DropReason::BadToken`]
    /// for a frame without this subscription's token.
    pub fn on_data(
        &mut self,
        header: &Header,
        token: Option<u64>,
        now_ns: u64,
    ) -> Result<Verdict, DropReason> {
        if header.fingerprint != self.fingerprint {
            return Err(DropReason::FingerprintMismatch);
        }
        if !self.bound(token, now_ns)? || !self.follows(header.session, now_ns) {
            return Ok(Verdict::Stale);
        }
        Ok(self.tracker.observe(header.session, header.seq))
    }
}

/// The slot of request `number` in the ring of outstanding requests.
fn slot_of(number: u64) -> usize {
    // The remainder is below OUTSTANDING, a small constant, so the cast cannot truncate.
    (number % OUTSTANDING as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Flags, Kind, RefuseReason};

    const TOPIC: u64 = 0x70;
    const FP: u64 = 0xf0;
    const ME: u64 = 0x5ab;
    const PUB: u64 = 0xaaaa;
    const MS: u64 = 1_000_000;
    /// The subscription token the publisher's acknowledgements carry.
    const TOK: u64 = 0x70c;

    fn session() -> SubscriberSession {
        SubscriberSession::new(
            TOPIC,
            FP,
            ME,
            [9; 32],
            Duration::from_secs(1),
            LatePolicy::Deliver,
        )
    }

    fn replies() -> Replies {
        let mut r = Replies::with_capacity(4);
        r.clear("127.0.0.1:7000".parse().unwrap());
        r
    }

    fn nonce_of(c: &Control) -> u64 {
        match *c {
            Control::Subscribe { nonce, .. } | Control::Unsubscribe { nonce, .. } => nonce,
            _ => panic!("not a request: {c:?}"),
        }
    }

    fn challenge(nonce: u64) -> Control {
        Control::CookieChallenge {
            topic_id: TOPIC,
            fingerprint: FP,
            session: PUB,
            nonce,
            cookie: Cookie([7; 16]),
        }
    }

    fn ack(nonce: u64, session: u64, last_seq: u64) -> Control {
        Control::SubscribeAck {
            topic_id: TOPIC,
            fingerprint: FP,
            session,
            last_seq,
            nonce,
            cookie: Cookie([8; 16]),
            token: TOK,
        }
    }

    fn refuse(nonce: u64, reason: RefuseReason) -> Control {
        Control::Refuse(Refusal {
            topic_id: TOPIC,
            requested: FP,
            offered: FP,
            session: PUB,
            reason,
            nonce,
        })
    }

    fn data(session: u64, seq: u64) -> Header {
        Header {
            kind: Kind::Data,
            flags: Flags::NONE,
            payload_len: 0,
            topic_id: TOPIC,
            fingerprint: FP,
            session,
            seq,
            timestamp_ns: 0,
        }
    }

    /// Subscribes through a challenge; returns the machine established on `PUB`.
    fn established() -> SubscriberSession {
        let mut s = session();
        let mut r = replies();
        let first = s.poll(0).unwrap();
        assert!(matches!(first, Control::Subscribe { cookie: None, .. }));
        s.on_control(&challenge(nonce_of(&first)), Some(TOK), MS, &mut r)
            .unwrap();
        let second = r.frames()[0];
        assert!(matches!(
            second,
            Control::Subscribe {
                cookie: Some(_),
                ..
            }
        ));
        let ev = s.on_control(&ack(nonce_of(&second), PUB, 0), Some(TOK), 2 * MS, &mut r);
        assert_eq!(
            ev,
            Ok(SubscriberEvent::Established {
                session: PUB,
                changed: false
            })
        );
        s
    }

    #[test]
    fn nonces_are_fresh_and_renewals_due_each_period() {
        let mut s = session();
        let a = s.poll(0).unwrap();
        assert!(s.poll(999 * MS).is_none());
        let b = s.poll(1000 * MS).unwrap();
        assert_ne!(nonce_of(&a), nonce_of(&b));
        // Another secret gives other nonces.
        let mut other = SubscriberSession::new(
            TOPIC,
            FP,
            ME,
            [1; 32],
            Duration::from_secs(1),
            LatePolicy::Deliver,
        );
        assert_ne!(nonce_of(&other.poll(0).unwrap()), nonce_of(&a));
    }

    #[test]
    fn answers_without_our_nonce_are_dropped_and_change_nothing() {
        let mut s = established();
        let mut r = replies();
        let cookie = s.cookie();
        for forged in [
            challenge(12345),
            ack(12345, 0xbad, 1_000_000),
            refuse(12345, RefuseReason::TableFull),
            refuse(12345, RefuseReason::FingerprintMismatch),
        ] {
            assert_eq!(
                s.on_control(&forged, Some(TOK), 3 * MS, &mut r),
                Err(DropReason::BadNonce),
                "{forged:?}"
            );
        }
        assert!(r.is_empty());
        assert_eq!(
            s.cookie(),
            cookie,
            "a forged challenge overwrote the cookie"
        );
        assert!(matches!(
            s.state(),
            ImportState::Established { session: PUB, .. }
        ));
        assert_eq!(
            s.on_data(&data(PUB, 1), Some(TOK), 4 * MS),
            Ok(Verdict::Deliver)
        );
    }

    /// Under duplication and reordering, a duplicated challenge, or one that arrives after the
    /// subscription was acknowledged, is a duplicate or stale control frame, counted by name,
    /// not an invalid datagram.
    #[test]
    fn duplicate_and_late_challenges_are_counted_by_name_not_invalid() {
        let mut s = session();
        let mut r = replies();
        let first = s.poll(0).unwrap();
        let chal = challenge(nonce_of(&first));
        assert_eq!(
            s.on_control(&chal, Some(TOK), MS, &mut r),
            Ok(SubscriberEvent::None)
        );
        assert_eq!(r.frames().len(), 1);
        let second = r.frames()[0];
        // The network duplicates the challenge: not answered twice, not invalid.
        r.clear("127.0.0.1:7000".parse().unwrap());
        assert_eq!(
            s.on_control(&chal, Some(TOK), MS, &mut r),
            Ok(SubscriberEvent::None)
        );
        assert!(r.is_empty());
        assert_eq!(s.counts().control_duplicates, 1);
        // The ack arrives; then a late duplicate of the ack and a late challenge.
        s.on_control(&ack(nonce_of(&second), PUB, 0), Some(TOK), 2 * MS, &mut r)
            .unwrap();
        assert_eq!(
            s.on_control(&ack(nonce_of(&second), PUB, 0), Some(TOK), 3 * MS, &mut r),
            Ok(SubscriberEvent::None)
        );
        assert_eq!(
            s.on_control(&chal, Some(TOK), 4 * MS, &mut r),
            Ok(SubscriberEvent::None)
        );
        assert_eq!(s.counts().control_duplicates, 3);
        // A renewal's answer overtaken by the next renewal's: stale.
        let r1 = s.poll(1001 * MS).unwrap();
        let r2 = s.poll(2001 * MS).unwrap();
        s.on_control(&ack(nonce_of(&r2), PUB, 0), Some(TOK), 2002 * MS, &mut r)
            .unwrap();
        assert_eq!(
            s.on_control(&ack(nonce_of(&r1), PUB, 0), Some(TOK), 2003 * MS, &mut r),
            Ok(SubscriberEvent::None)
        );
        assert_eq!(s.counts().control_stale, 1);
        assert!(r.is_empty());
    }

    #[test]
    fn unknown_sessions_never_switch_and_trigger_a_resubscribe() {
        let mut s = established();
        assert_eq!(
            s.on_data(&data(PUB, 1), Some(TOK), 3 * MS),
            Ok(Verdict::Deliver)
        );
        // Forged data and heartbeat of another session: dropped, counted, resubscribe due.
        assert_eq!(
            s.on_data(&data(0xbad, 1_000), Some(TOK), 4 * MS),
            Ok(Verdict::Stale)
        );
        let hb = Control::Heartbeat {
            topic_id: TOPIC,
            fingerprint: FP,
            session: 0xbad,
            last_seq: u64::MAX,
            timestamp_ns: 0,
        };
        s.on_control(&hb, Some(TOK), 5 * MS, &mut replies())
            .unwrap();
        assert_eq!(s.counts().unknown_session, 2);
        assert_eq!(s.counts().resubscribes, 1, "one per gap");
        assert!(s.poll(5 * MS).is_some(), "resubscribe due at once");
        // The real stream goes on untouched: no loss counted, no session change.
        assert_eq!(
            s.on_data(&data(PUB, 2), Some(TOK), 6 * MS),
            Ok(Verdict::Deliver)
        );
        assert_eq!(s.loss().lost, 0);
        assert_eq!(s.loss().session_changes, 0);
    }

    #[test]
    fn only_an_echoing_ack_changes_the_session() {
        let mut s = established();
        assert!(
            s.poll(1000 * MS).is_none(),
            "renewal due a period after the last request"
        );
        let renewal = s.poll(1001 * MS).unwrap();
        let ev = s.on_control(
            &ack(nonce_of(&renewal), 0xbeef, 5),
            Some(TOK),
            1001 * MS,
            &mut replies(),
        );
        assert_eq!(
            ev,
            Ok(SubscriberEvent::Established {
                session: 0xbeef,
                changed: true
            })
        );
        // Late frames of the old session are stale, not a switch back.
        assert_eq!(
            s.on_data(&data(PUB, 9), Some(TOK), 1002 * MS),
            Ok(Verdict::Stale)
        );
        assert_eq!(s.counts().unknown_session, 0);
        assert_eq!(
            s.on_data(&data(0xbeef, 6), Some(TOK), 1003 * MS),
            Ok(Verdict::Deliver)
        );
    }

    #[test]
    fn transient_refusals_back_off_final_ones_end_the_import() {
        let mut s = session();
        let mut r = replies();
        let a = s.poll(0).unwrap();
        let ev = s.on_control(
            &refuse(nonce_of(&a), RefuseReason::TableFull),
            Some(TOK),
            MS,
            &mut r,
        );
        assert!(matches!(ev, Ok(SubscriberEvent::Retrying(_))));
        assert!(s.poll(1000 * MS).is_none(), "waits out the backoff");
        let b = s.poll(1001 * MS).unwrap();
        s.on_control(
            &refuse(nonce_of(&b), RefuseReason::TopicFull),
            Some(TOK),
            1002 * MS,
            &mut r,
        )
        .unwrap();
        assert!(s.poll(2500 * MS).is_none(), "backoff doubled");
        let c = s.poll(3002 * MS).unwrap();
        let ev = s.on_control(
            &refuse(nonce_of(&c), RefuseReason::FingerprintMismatch),
            Some(TOK),
            3003 * MS,
            &mut r,
        );
        assert!(matches!(ev, Ok(SubscriberEvent::Refused(_))));
        assert!(s.poll(u64::MAX).is_none());
        assert!(s.unsubscribe().is_none());
        assert_eq!(s.counts().refused, 2);
    }

    #[test]
    fn frames_of_the_wrong_topic_or_direction() {
        let mut s = session();
        let a = s.poll(0).unwrap();
        let mut wrong = challenge(nonce_of(&a));
        if let Control::CookieChallenge { topic_id, .. } = &mut wrong {
            *topic_id = 1;
        }
        assert_eq!(
            s.on_control(&wrong, Some(TOK), 0, &mut replies()),
            Err(DropReason::UnknownTopic)
        );
        assert_eq!(
            s.on_control(&a, Some(TOK), 0, &mut replies()),
            Err(DropReason::BadControl)
        );
        let mut other_fp = data(PUB, 1);
        other_fp.fingerprint = 1;
        assert_eq!(
            s.on_data(&other_fp, Some(TOK), 0),
            Err(DropReason::FingerprintMismatch)
        );
    }

    #[test]
    fn unsubscribe_carries_the_cookie_and_a_fresh_nonce() {
        let mut s = session();
        assert!(s.unsubscribe().is_none(), "never admitted: nothing to end");
        let mut s = established();
        let u = s.unsubscribe().unwrap();
        assert!(matches!(
            u,
            Control::Unsubscribe {
                cookie: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn downstream_frames_without_the_subscription_token_change_nothing() {
        let mut s = established();
        let mut r = replies();
        assert_eq!(
            s.on_data(&data(PUB, 1), Some(TOK), 3 * MS),
            Ok(Verdict::Deliver)
        );
        // Someone who knows the session but not the token: a far-ahead data frame and
        // heartbeat, with no token or a guessed one, are dropped without effect.
        for token in [None, Some(TOK ^ 1), Some(0)] {
            assert_eq!(
                s.on_data(&data(PUB, 1 << 40), token, 4 * MS),
                Err(DropReason::BadToken)
            );
            let hb = Control::Heartbeat {
                topic_id: TOPIC,
                fingerprint: FP,
                session: PUB,
                last_seq: 1 << 40,
                timestamp_ns: 0,
            };
            assert_eq!(
                s.on_control(&hb, token, 4 * MS, &mut r),
                Err(DropReason::BadToken)
            );
            // Not even a resubscribe for a forged unknown session.
            assert_eq!(
                s.on_data(&data(0xbad, 1), token, 4 * MS),
                Err(DropReason::BadToken)
            );
        }
        assert_eq!(s.counts().resubscribes, 0);
        assert_eq!(
            s.on_data(&data(PUB, 2), Some(TOK), 5 * MS),
            Ok(Verdict::Deliver)
        );
        assert_eq!(s.loss().lost, 0);
        // With a pre-shared key the MAC authenticates instead: no token needed.
        let keyed = session().without_token();
        assert_eq!(keyed.check_token(None), Ok(()));
    }

    #[test]
    fn tokened_data_before_the_acknowledgement_makes_the_next_request_due() {
        let mut s = session();
        let first = s.poll(0).unwrap();
        let mut r = replies();
        s.on_control(&challenge(nonce_of(&first)), Some(TOK), MS, &mut r)
            .unwrap();
        // The acknowledgement is lost; the publisher's data arrives with a token we lack.
        assert!(
            s.poll(2 * MS).is_none(),
            "the next renewal is a period away"
        );
        // Not an attack (nothing was established to attack): counted, not a drop.
        assert_eq!(
            s.on_data(&data(PUB, 1), Some(TOK), 3 * MS),
            Ok(Verdict::Stale)
        );
        assert!(s.poll(3 * MS).is_some(), "asked again at once");
        assert_eq!(s.counts().resubscribes, 1);
        assert_eq!(s.counts().unknown_session, 1);
    }
}
