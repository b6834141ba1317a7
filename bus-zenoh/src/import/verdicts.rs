//! An import's checks on each sample, as plain code (no zenoh, no threads): is it of this
//! topic and type, and did samples go missing before it?
//!
//! Inputs: the sample's attachment bytes. Outputs: a [`Verdict`]. Per stream (an export's run,
//! named by the attachment's random stream id) it keeps the next expected sequence number: a
//! larger one counts the difference lost, a smaller one is late (delivered, counted). The
//! stream table is bounded ([`MAX_STREAMS`]): past it the oldest-seen stream is forgotten,
//! which at worst misses a gap of that stream.
//!
//! No single sample moves a stream far, as in the UDP bridge's sequence tracking: a number more
//! than [`MAX_JUMP`] ahead of the next expected one is delivered but counts nothing lost and
//! leaves the stream where it was, as a claim; a second sample at most [`MAX_JUMP`] above the
//! claim confirms it, and the stream starts over there as a new stream would (nothing counted
//! lost for the jump). A forged number alone can neither inflate `lost` by up to 2^64 nor make
//! the genuine samples of its stream late; no figure is computed with a sum that can overflow.

use std::collections::HashMap;

use crate::attachment::Attachment;

/// The most export streams one import tracks at once.
pub const MAX_STREAMS: usize = 1024;

/// The largest gap one sample counts lost: a number further ahead is a claim until another
/// sample confirms it (the UDP bridge's bound).
pub const MAX_JUMP: u64 = 1 << 16;

/// What to do with one sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Of this topic and type: decode and publish it. `lost` samples of its stream went
    /// missing just before it; `late` if it came after a later one of its stream.
    Accept {
        /// Samples of the stream skipped before this one.
        lost: u64,
        /// It is older than one already seen.
        late: bool,
    },
    /// Of another topic or fingerprint. `error` is the message to report, the first time for
    /// its stream (later ones are only counted).
    Refused {
        /// The error naming the topic and both fingerprints, once per stream.
        error: Option<String>,
        /// Of another topic id (else: of this topic with another fingerprint).
        other_topic: bool,
    },
    /// Not a sample of the gateway's: no attachment, or not one of [`Attachment`]'s layout.
    Malformed,
}

/// One import's checks: the topic and type it takes, and each stream's next sequence number.
#[derive(Debug)]
pub struct Verdicts {
    topic: String,
    topic_id: u64,
    fingerprint: u64,
    key: String,
    /// Stream id -> (next expected sequence number, when it was last seen in `clock` ticks).
    streams: HashMap<u64, Stream>,
    /// Stream ids refused already (reported once), bounded like `streams`.
    refused: HashMap<u64, u64>,
    clock: u64,
}

#[derive(Debug)]
struct Stream {
    next: u64,
    seen: u64,
    /// A number more than [`MAX_JUMP`] ahead of `next`, not yet confirmed.
    claim: Option<u64>,
}

impl Verdicts {
    /// The checks of an import of `topic` (id `topic_id`, type fingerprint `fingerprint`) on
    /// zenoh key `key` (named in errors).
    pub fn new(topic: &str, topic_id: u64, fingerprint: u64, key: &str) -> Self {
        Verdicts {
            topic: topic.to_owned(),
            topic_id,
            fingerprint,
            key: key.to_owned(),
            streams: HashMap::new(),
            refused: HashMap::new(),
            clock: 0,
        }
    }

    /// The verdict on a sample whose attachment is `attachment`.
    pub fn check(&mut self, attachment: Option<&[u8]>) -> Verdict {
        let Some(a) = attachment.and_then(Attachment::decode) else {
            return Verdict::Malformed;
        };
        self.clock = self.clock.wrapping_add(1);
        if a.topic_id != self.topic_id || a.fingerprint != self.fingerprint {
            let clock = self.clock;
            let first = self.refused.insert(a.stream, clock).is_none();
            if first {
                forget_oldest(&mut self.refused, |&seen| seen);
            }
            return Verdict::Refused {
                error: first.then(|| self.refusal(&a)),
                other_topic: a.topic_id != self.topic_id,
            };
        }
        let clock = self.clock;
        if !self.streams.contains_key(&a.stream) && self.streams.len() >= MAX_STREAMS {
            forget_oldest(&mut self.streams, |s| s.seen);
        }
        let stream = self.streams.entry(a.stream).or_insert(Stream {
            next: a.sequence,
            seen: clock,
            claim: None,
        });
        stream.seen = clock;
        if a.sequence >= stream.next {
            let lost = a.sequence - stream.next;
            if lost > MAX_JUMP {
                let confirmed = stream
                    .claim
                    .is_some_and(|c| c <= a.sequence && a.sequence - c <= MAX_JUMP);
                if confirmed {
                    stream.next = a.sequence.saturating_add(1);
                    stream.claim = None;
                } else {
                    stream.claim = Some(a.sequence);
                }
                return Verdict::Accept {
                    lost: 0,
                    late: false,
                };
            }
            stream.next = a.sequence.saturating_add(1);
            Verdict::Accept { lost, late: false }
        } else {
            Verdict::Accept {
                lost: 0,
                late: true,
            }
        }
    }

    /// The error for a sample of another topic or type, in the words of the UDP bridge's.
    fn refusal(&self, a: &Attachment) -> String {
        if a.topic_id != self.topic_id {
            format!(
                "zenoh gateway refused a sample on key '{}' for topic '{}': it carries topic id \
                 {:#018x}, not this topic's {:#018x}; import each key as the topic it carries",
                self.key, self.topic, a.topic_id, self.topic_id
            )
        } else {
            format!(
                "zenoh gateway refused topic '{}' on key '{}': schema fingerprint mismatch (ours \
                 {:#018x}, theirs {:#018x}); build both sides with the same message type",
                self.topic, self.key, self.fingerprint, a.fingerprint
            )
        }
    }
}

/// Removes the entry least recently seen once `map` is over [`MAX_STREAMS`].
fn forget_oldest<V>(map: &mut HashMap<u64, V>, seen: impl Fn(&V) -> u64) {
    if map.len() < MAX_STREAMS {
        return;
    }
    if let Some(oldest) = map.iter().min_by_key(|(_, v)| seen(v)).map(|(k, _)| *k) {
        map.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(fingerprint: u64, stream: u64, sequence: u64) -> [u8; 40] {
        Attachment {
            topic_id: llbus::topic_id("t"),
            fingerprint,
            stream,
            sequence,
            sent_ns: 0,
        }
        .encode()
    }

    #[test]
    fn gaps_count_lost_per_stream_and_a_new_stream_starts_anywhere() {
        let mut v = Verdicts::new("t", llbus::topic_id("t"), 7, "llbus/t");
        let accept = |lost, late| Verdict::Accept { lost, late };
        assert_eq!(v.check(Some(&sample(7, 1, 10))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, 11))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, 15))), accept(3, false));
        assert_eq!(v.check(Some(&sample(7, 1, 12))), accept(0, true));
        assert_eq!(v.check(Some(&sample(7, 2, 0))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, 16))), accept(0, false));
    }

    #[test]
    fn a_jump_past_max_jump_counts_nothing_lost_and_moves_the_stream_only_once_confirmed() {
        let mut v = Verdicts::new("t", llbus::topic_id("t"), 7, "llbus/t");
        let accept = |lost, late| Verdict::Accept { lost, late };
        assert_eq!(v.check(Some(&sample(7, 1, 0))), accept(0, false));
        // A forged jump alone: delivered, nothing lost, the genuine stream carries on.
        assert_eq!(v.check(Some(&sample(7, 1, u64::MAX))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, 2))), accept(1, false));
        assert_eq!(
            v.check(Some(&sample(7, 1, 3 + MAX_JUMP))),
            accept(MAX_JUMP, false)
        );
        // A genuine far jump: the second sample confirms it, and the stream starts over there.
        let far = 10 * MAX_JUMP;
        assert_eq!(v.check(Some(&sample(7, 1, far))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, far + 5))), accept(0, false));
        assert_eq!(v.check(Some(&sample(7, 1, far + 7))), accept(1, false));
        assert_eq!(v.check(Some(&sample(7, 1, far + 1))), accept(0, true));
    }

    #[test]
    fn a_mismatched_fingerprint_is_reported_once_per_stream_naming_both() {
        let mut v = Verdicts::new("t", llbus::topic_id("t"), 7, "llbus/t");
        let Verdict::Refused { error: Some(e), .. } = v.check(Some(&sample(9, 1, 0))) else {
            panic!("the first refusal of a stream carries its error");
        };
        assert!(e.contains("'t'") && e.contains("0x0000000000000007"), "{e}");
        assert!(e.contains("0x0000000000000009"), "{e}");
        assert_eq!(
            v.check(Some(&sample(9, 1, 1))),
            Verdict::Refused {
                error: None,
                other_topic: false
            }
        );
        assert!(matches!(
            v.check(Some(&sample(9, 2, 0))),
            Verdict::Refused { error: Some(_), .. }
        ));
    }

    #[test]
    fn missing_or_short_attachments_are_malformed() {
        let mut v = Verdicts::new("t", llbus::topic_id("t"), 7, "llbus/t");
        assert_eq!(v.check(None), Verdict::Malformed);
        assert_eq!(v.check(Some(&[1, 2, 3])), Verdict::Malformed);
    }

    #[test]
    fn the_stream_table_stays_bounded() {
        let mut v = Verdicts::new("t", llbus::topic_id("t"), 7, "llbus/t");
        for s in 0..(MAX_STREAMS as u64 * 2) {
            v.check(Some(&sample(7, s, 0)));
            v.check(Some(&sample(8, s, 0)));
        }
        assert!(v.streams.len() <= MAX_STREAMS && v.refused.len() <= MAX_STREAMS);
    }
}
