//! Sequence tracking per (publisher session, topic): how many messages were lost, duplicated or
//! reordered, and whether a late one is delivered.
//!
//! The algorithm is the sliding-window replay check of IPsec (RFC 4303, section 3.4.3, after
//! RFC 2401 appendix C): the highest sequence number seen and a bitmap of the [`WINDOW`]
//! numbers below it. A number above the highest advances the window and counts the skipped
//! numbers as lost; a number inside the window is a duplicate if its bit is set, otherwise a
//! late (reordered) arrival, which un-counts one loss and is delivered or dropped per
//! [`LatePolicy`]. A number below the window cannot be told apart from a duplicate and is
//! dropped as stale. Fixed size, no allocation.
//!
//! A new session id (the publisher restarted) starts over without counting a gap, and frames of
//! the previous session that arrive after the change are dropped as stale instead of switching
//! back. A heartbeat's (or acknowledgement's) last sequence number advances the window like a
//! message that was not received, so loss at the end of a burst is counted.
//!
//! No single frame moves the window far: a number more than [`MAX_JUMP`] above the highest
//! one believed (data or heartbeat) is held as a claim, not delivered and not counted
//! ([`Verdict::Unconfirmed`]), until a second frame within [`MAX_JUMP`] above the claim
//! confirms it ([`JumpGuard`]). A genuine jump that far (a long outage at a high rate) costs
//! one frame; a forged one alone can neither inflate `lost` nor make the genuine stream stale.

/// How many sequence numbers below the highest one the tracker remembers.
pub const WINDOW: u64 = 128;

/// The furthest one frame may move the highest sequence number believed; a number further
/// ahead waits for a second frame to confirm it.
pub const MAX_JUMP: u64 = 1 << 16;

/// Holds a sequence number far ahead of what a stream has seen until another frame confirms
/// it. See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JumpGuard {
    /// The last far-ahead number claimed and not yet confirmed.
    claim: Option<u64>,
}

impl JumpGuard {
    /// Whether `seq` is believed, `highest` being the highest number believed so far: yes if
    /// it is at most [`MAX_JUMP`] above it, or confirms the previous claim (at or at most
    /// [`MAX_JUMP`] above it); otherwise it becomes the claim.
    pub fn believe(&mut self, highest: u64, seq: u64) -> bool {
        if seq <= highest.saturating_add(MAX_JUMP) {
            return true;
        }
        match self.claim {
            Some(c) if c <= seq && seq - c <= MAX_JUMP => {
                self.claim = None;
                true
            }
            _ => {
                self.claim = Some(seq);
                false
            }
        }
    }

    /// Forgets the claim (a new session starts).
    pub fn reset(&mut self) {
        self.claim = None;
    }
}

/// What an import does with a message that arrives after a later one of its topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LatePolicy {
    /// Deliver it (order is not guaranteed, nothing is lost that arrived).
    #[default]
    Deliver,
    /// Drop it (order is kept; the message counts as late-dropped, not lost).
    Drop,
}

/// What to do with one received message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// In order (possibly after a gap): deliver.
    Deliver,
    /// Late (reordered) and the policy is [`LatePolicy::Deliver`]: deliver.
    DeliverLate,
    /// Seen before: drop.
    Duplicate,
    /// Late and the policy is [`LatePolicy::Drop`]: drop.
    DropLate,
    /// Older than the window, from before this tracker started, or from a previous session:
    /// drop.
    Stale,
    /// More than [`MAX_JUMP`] ahead of the highest number believed, and not confirmed by an
    /// earlier frame: drop, count nothing lost ([`JumpGuard`]).
    Unconfirmed,
}

impl Verdict {
    /// True when the message is to be delivered.
    pub const fn is_deliver(self) -> bool {
        matches!(self, Verdict::Deliver | Verdict::DeliverLate)
    }
}

/// The counters of one tracker; cumulative across sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossCounts {
    /// Data messages observed.
    pub received: u64,
    /// Observed and delivered.
    pub delivered: u64,
    /// Sequence numbers skipped and not (yet) arrived.
    pub lost: u64,
    /// Messages seen twice (or more).
    pub duplicates: u64,
    /// Messages that arrived after a later one (delivered or dropped per the policy).
    pub reordered: u64,
    /// Reordered messages dropped by [`LatePolicy::Drop`].
    pub late_dropped: u64,
    /// Messages dropped as [`Verdict::Stale`].
    pub stale: u64,
    /// Times the publisher's session id changed (restarts seen).
    pub session_changes: u64,
    /// Data messages and heartbeats not believed: too far ahead, unconfirmed ([`JumpGuard`]).
    pub unconfirmed: u64,
}

/// The window of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stream {
    session: u64,
    /// The highest sequence number received or announced.
    highest: u64,
    /// Bit `i` set: `highest - i` was received. Bits for numbers `<= floor` are meaningless.
    seen: u128,
    /// Numbers `<= floor` precede this tracker's knowledge of the session: stale.
    /// Invariant: `floor <= highest`.
    floor: u64,
}

/// Tracks the sequence numbers of one topic from one publisher. See the module docs.
#[derive(Clone, Debug)]
pub struct SeqTracker {
    policy: LatePolicy,
    stream: Option<Stream>,
    /// The session before the current one: its late frames are stale, not a new restart.
    previous_session: Option<u64>,
    guard: JumpGuard,
    counts: LossCounts,
}

impl SeqTracker {
    /// A tracker that has seen nothing, with the import's late policy.
    pub const fn new(policy: LatePolicy) -> Self {
        SeqTracker {
            policy,
            stream: None,
            previous_session: None,
            guard: JumpGuard { claim: None },
            counts: LossCounts {
                received: 0,
                delivered: 0,
                lost: 0,
                duplicates: 0,
                reordered: 0,
                late_dropped: 0,
                stale: 0,
                session_changes: 0,
                unconfirmed: 0,
            },
        }
    }

    /// The counters so far.
    pub const fn counts(&self) -> &LossCounts {
        &self.counts
    }

    /// The current session id and highest sequence number, if any message or heartbeat was seen.
    pub fn position(&self) -> Option<(u64, u64)> {
        self.stream.map(|s| (s.session, s.highest))
    }

    /// Switches to `session` if it is new. Returns `false` for a frame of the previous session,
    /// which is stale.
    fn enter(&mut self, session: u64, seq_floor: u64, seq_highest: u64, seen: u128) -> bool {
        match self.stream {
            Some(s) if s.session == session => true,
            Some(_) if self.previous_session == Some(session) => false,
            current => {
                self.guard.reset();
                if let Some(old) = current {
                    self.previous_session = Some(old.session);
                    self.counts.session_changes = self.counts.session_changes.saturating_add(1);
                }
                self.stream = Some(Stream {
                    session,
                    highest: seq_highest,
                    seen,
                    floor: seq_floor,
                });
                true
            }
        }
    }

    /// Observes data message `seq` of publisher session `session` and says what to do with it.
    pub fn observe(&mut self, session: u64, seq: u64) -> Verdict {
        self.counts.received = self.counts.received.saturating_add(1);
        let fresh = self.stream.map(|s| s.session) != Some(session);
        let verdict = if !self.enter(session, seq.saturating_sub(1), seq, 1) {
            Verdict::Stale
        } else if fresh {
            Verdict::Deliver
        } else {
            self.observe_in_stream(seq)
        };
        match verdict {
            Verdict::Deliver | Verdict::DeliverLate => {
                self.counts.delivered = self.counts.delivered.saturating_add(1)
            }
            Verdict::Duplicate => self.counts.duplicates = self.counts.duplicates.saturating_add(1),
            Verdict::DropLate => {
                self.counts.late_dropped = self.counts.late_dropped.saturating_add(1)
            }
            Verdict::Stale => self.counts.stale = self.counts.stale.saturating_add(1),
            Verdict::Unconfirmed => {
                self.counts.unconfirmed = self.counts.unconfirmed.saturating_add(1)
            }
        }
        verdict
    }

    fn observe_in_stream(&mut self, seq: u64) -> Verdict {
        let Some(s) = self.stream.as_mut() else {
            return Verdict::Stale;
        };
        if seq <= s.floor {
            return Verdict::Stale;
        }
        if seq > s.highest {
            if !self.guard.believe(s.highest, seq) {
                return Verdict::Unconfirmed;
            }
            let shift = seq - s.highest;
            self.counts.lost = self.counts.lost.saturating_add(shift - 1);
            s.seen = if shift >= WINDOW { 0 } else { s.seen << shift };
            s.seen |= 1;
            s.highest = seq;
            return Verdict::Deliver;
        }
        let age = s.highest - seq;
        if age >= WINDOW {
            return Verdict::Stale;
        }
        let bit = 1u128 << age;
        if s.seen & bit != 0 {
            return Verdict::Duplicate;
        }
        s.seen |= bit;
        self.counts.reordered = self.counts.reordered.saturating_add(1);
        self.counts.lost = self.counts.lost.saturating_sub(1);
        match self.policy {
            LatePolicy::Deliver => Verdict::DeliverLate,
            LatePolicy::Drop => Verdict::DropLate,
        }
    }

    /// Observes a heartbeat's or acknowledgement's last sequence number: numbers up to
    /// `last_seq` not yet received are counted lost (and un-counted should they still arrive).
    /// For a session not seen before, nothing is counted: numbers up to `last_seq` were sent
    /// before this tracker knew the session and are treated as stale. Returns how many numbers
    /// this call counted as lost.
    pub fn observe_last_seq(&mut self, session: u64, last_seq: u64) -> u64 {
        let fresh = self.stream.map(|s| s.session) != Some(session);
        if !self.enter(session, last_seq, last_seq, 0) || fresh {
            return 0;
        }
        let Some(s) = self.stream.as_mut() else {
            return 0;
        };
        if last_seq <= s.highest {
            return 0;
        }
        if !self.guard.believe(s.highest, last_seq) {
            self.counts.unconfirmed = self.counts.unconfirmed.saturating_add(1);
            return 0;
        }
        let shift = last_seq - s.highest;
        s.seen = if shift >= WINDOW { 0 } else { s.seen << shift };
        s.highest = last_seq;
        self.counts.lost = self.counts.lost.saturating_add(shift);
        shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: LatePolicy, seqs: &[u64]) -> (SeqTracker, Vec<Verdict>) {
        let mut t = SeqTracker::new(policy);
        let v = seqs.iter().map(|&s| t.observe(7, s)).collect();
        (t, v)
    }

    #[test]
    fn in_order_counts_nothing() {
        let (t, v) = run(LatePolicy::Deliver, &[1, 2, 3, 4, 5]);
        assert!(v.iter().all(|v| *v == Verdict::Deliver));
        assert_eq!(
            *t.counts(),
            LossCounts {
                received: 5,
                delivered: 5,
                ..LossCounts::default()
            }
        );
    }

    #[test]
    fn gaps_count_exactly() {
        let (t, _) = run(LatePolicy::Deliver, &[1, 2, 5, 6, 10]);
        assert_eq!(t.counts().lost, 2 + 3);
        assert_eq!(t.counts().delivered, 5);
        assert_eq!(t.counts().reordered, 0);
    }

    #[test]
    fn duplicates_count_exactly() {
        let (t, v) = run(LatePolicy::Deliver, &[1, 2, 2, 3, 1, 3, 3]);
        assert_eq!(t.counts().duplicates, 4);
        assert_eq!(t.counts().delivered, 3);
        assert_eq!(t.counts().lost, 0);
        assert_eq!(v[2], Verdict::Duplicate);
    }

    #[test]
    fn reordered_uncounts_loss_and_follows_policy() {
        let (t, v) = run(LatePolicy::Deliver, &[1, 3, 2, 4]);
        assert_eq!(
            v,
            [
                Verdict::Deliver,
                Verdict::Deliver,
                Verdict::DeliverLate,
                Verdict::Deliver
            ]
        );
        assert_eq!(t.counts().lost, 0);
        assert_eq!(t.counts().reordered, 1);
        assert_eq!(t.counts().delivered, 4);

        let (t, v) = run(LatePolicy::Drop, &[1, 4, 2, 3, 2]);
        assert_eq!(v[2], Verdict::DropLate);
        assert_eq!(v[3], Verdict::DropLate);
        assert_eq!(v[4], Verdict::Duplicate);
        assert_eq!(t.counts().lost, 0);
        assert_eq!(t.counts().reordered, 2);
        assert_eq!(t.counts().late_dropped, 2);
        assert_eq!(t.counts().duplicates, 1);
        assert_eq!(t.counts().delivered, 2);
    }

    #[test]
    fn window_edge_and_beyond() {
        let mut t = SeqTracker::new(LatePolicy::Deliver);
        assert_eq!(t.observe(1, 1), Verdict::Deliver);
        assert_eq!(t.observe(1, 1 + WINDOW), Verdict::Deliver);
        assert_eq!(t.counts().lost, WINDOW - 1);
        // 1 is exactly WINDOW below the highest: out of the window, stale (not un-counted).
        assert_eq!(t.observe(1, 1), Verdict::Stale);
        // 2 is WINDOW - 1 below: inside, late.
        assert_eq!(t.observe(1, 2), Verdict::DeliverLate);
        assert_eq!(t.counts().lost, WINDOW - 2);
        // A jump larger than the window clears it.
        assert_eq!(t.observe(1, 10_000), Verdict::Deliver);
        assert_eq!(t.observe(1, 9_999), Verdict::DeliverLate);
        assert_eq!(t.observe(1, 10_000), Verdict::Duplicate);
    }

    #[test]
    fn joining_late_counts_no_gap_and_earlier_numbers_are_stale() {
        let (t, v) = run(LatePolicy::Deliver, &[1000, 1001, 999]);
        assert_eq!(v, [Verdict::Deliver, Verdict::Deliver, Verdict::Stale]);
        assert_eq!(t.counts().lost, 0);
        assert_eq!(t.counts().stale, 1);
    }

    #[test]
    fn restart_starts_over_without_gap_storm() {
        let mut t = SeqTracker::new(LatePolicy::Deliver);
        for s in 1..=500 {
            t.observe(0xA, s);
        }
        // Publisher restarts with a new session, counting from 1 again.
        assert_eq!(t.observe(0xB, 1), Verdict::Deliver);
        assert_eq!(t.observe(0xB, 2), Verdict::Deliver);
        // A straggler of the old session is stale and does not switch back.
        assert_eq!(t.observe(0xA, 501), Verdict::Stale);
        assert_eq!(t.observe(0xB, 3), Verdict::Deliver);
        let c = t.counts();
        assert_eq!((c.lost, c.duplicates, c.reordered, c.stale), (0, 0, 0, 1));
        assert_eq!(c.session_changes, 1);
        assert_eq!(c.delivered, 503);
        assert_eq!(t.position(), Some((0xB, 3)));
    }

    #[test]
    fn heartbeat_counts_loss_at_end_of_burst() {
        let mut t = SeqTracker::new(LatePolicy::Deliver);
        for s in 1..=10 {
            t.observe(5, s);
        }
        // 11..=13 were sent, none arrived; the heartbeat says so.
        assert_eq!(t.observe_last_seq(5, 13), 3);
        assert_eq!(t.counts().lost, 3);
        // A repeated heartbeat counts nothing more.
        assert_eq!(t.observe_last_seq(5, 13), 0);
        // One of them shows up after all: un-counted, late.
        assert_eq!(t.observe(5, 12), Verdict::DeliverLate);
        assert_eq!(t.counts().lost, 2);
        assert_eq!(t.observe(5, 14), Verdict::Deliver);
        assert_eq!(t.counts().lost, 2);
    }

    #[test]
    fn ack_primes_a_new_session() {
        let mut t = SeqTracker::new(LatePolicy::Deliver);
        // Subscribed while the publisher was at 40: nothing lost so far.
        assert_eq!(t.observe_last_seq(9, 40), 0);
        assert_eq!(t.observe(9, 40), Verdict::Stale);
        assert_eq!(t.observe(9, 42), Verdict::Deliver);
        assert_eq!(t.counts().lost, 1);
        assert_eq!(t.observe(9, 41), Verdict::DeliverLate);
        assert_eq!(t.counts().lost, 0);
    }

    #[test]
    fn one_frame_far_ahead_is_not_believed() {
        let mut t = SeqTracker::new(LatePolicy::Deliver);
        assert_eq!(t.observe(7, 1), Verdict::Deliver);
        // A forged data frame and heartbeat 2^40 ahead: neither delivered nor counted lost.
        assert_eq!(t.observe(7, 1 << 40), Verdict::Unconfirmed);
        assert_eq!(t.observe_last_seq(7, (1 << 41) + MAX_JUMP + 1), 0);
        for seq in 2..=10 {
            assert_eq!(t.observe(7, seq), Verdict::Deliver, "genuine {seq}");
        }
        assert_eq!((t.counts().lost, t.counts().unconfirmed), (0, 2));
        // A genuine jump past MAX_JUMP (a long outage) costs one frame: the next confirms it,
        // and `lost` counts exactly what was skipped (the unconfirmed frame included).
        let far = 10 + MAX_JUMP + 5;
        assert_eq!(t.observe(7, far), Verdict::Unconfirmed);
        assert_eq!(t.observe(7, far + 1), Verdict::Deliver);
        assert_eq!(t.counts().lost, far - 10);
        // A heartbeat confirms like data does.
        let far = far + 1 + 2 * MAX_JUMP;
        assert_eq!(t.observe_last_seq(7, far), 0);
        assert_eq!(
            t.observe_last_seq(7, far + 3),
            far + 3 - (far - 2 * MAX_JUMP)
        );
    }
}
