//! The errors a gateway reports ([`Gateway::errors`](crate::Gateway::errors)), kept bounded
//! without hiding any: one entry per topic and kind of error, with its first message, its
//! latest one and how many times it was reported. A flood of one kind (thousands of forged
//! streams of one topic) only raises a count, so another topic's or kind's first error stays
//! visible; the table holds at most (topics of the gateway) x ([`ErrorKind`]s) entries.
//!
//! Pure code: no zenoh, no lock, no log (the gateway logs the first of each entry).

/// What went wrong, as one entry of the table per topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// An import refused a sample of another topic id.
    OtherTopic,
    /// An import refused a sample of its topic with another fingerprint.
    Fingerprint,
    /// An import dropped a malformed sample.
    Malformed,
    /// An export could not encode or put a message.
    PutFailed,
}

#[derive(Debug)]
struct Entry {
    topic: String,
    kind: ErrorKind,
    first: String,
    latest: Option<String>,
    count: u64,
}

/// The table. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct ErrorTable {
    entries: Vec<Entry>,
}

impl ErrorTable {
    /// Records `message`; the message back if it is the first of its topic and kind (to be
    /// logged).
    pub(crate) fn record(&mut self, topic: &str, kind: ErrorKind, message: String) -> Option<&str> {
        // What a sample carries (an encoding's schema, say) is quoted in messages: no line
        // breaks or other control characters of a sender's choosing reach the table or the log.
        let message = if message.chars().any(char::is_control) {
            message
                .chars()
                .flat_map(|c| {
                    let escaped = c.is_control().then(|| c.escape_default());
                    escaped
                        .into_iter()
                        .flatten()
                        .chain((!c.is_control()).then_some(c))
                })
                .collect()
        } else {
            message
        };
        match self
            .entries
            .iter_mut()
            .find(|e| e.topic == topic && e.kind == kind)
        {
            Some(e) => {
                e.count = e.count.saturating_add(1);
                e.latest = Some(message);
                None
            }
            None => {
                self.entries.push(Entry {
                    topic: topic.to_owned(),
                    kind,
                    first: message,
                    latest: None,
                    count: 1,
                });
                self.entries.last().map(|e| e.first.as_str())
            }
        }
    }

    /// Each entry as one line, oldest first: its first message, and if it was reported again,
    /// how many times and the latest message.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| match (&e.latest, e.count) {
                (_, 1) => e.first.clone(),
                (Some(latest), n) => {
                    format!("{} (reported {n} times; the latest: {latest})", e.first)
                }
                (None, n) => format!("{} (reported {n} times)", e.first),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_topic_and_kind_keeps_the_first_the_latest_and_a_count() {
        let mut t = ErrorTable::default();
        assert_eq!(
            t.record("a", ErrorKind::Fingerprint, "fp 1".into()),
            Some("fp 1")
        );
        for n in 2..1000 {
            assert_eq!(
                t.record("a", ErrorKind::Fingerprint, format!("fp {n}")),
                None
            );
        }
        assert!(t.record("a", ErrorKind::Malformed, "bad".into()).is_some());
        assert!(t
            .record("b", ErrorKind::Fingerprint, "fp b".into())
            .is_some());
        assert!(t.record("a", ErrorKind::Malformed, "bad".into()).is_none());
        // The latest is the latest, even when it says what the first said.
        assert!(t
            .record("b", ErrorKind::Fingerprint, "fp c".into())
            .is_none());
        assert!(t
            .record("b", ErrorKind::Fingerprint, "fp b".into())
            .is_none());
        // A sender's line breaks are escaped, not written.
        assert_eq!(
            t.record("c", ErrorKind::Malformed, "x\n[ERROR] all\tgood\r".into()),
            Some("x\\n[ERROR] all\\tgood\\r")
        );
        assert_eq!(
            t.lines(),
            vec![
                "fp 1 (reported 999 times; the latest: fp 999)".to_owned(),
                "bad (reported 2 times; the latest: bad)".to_owned(),
                "fp b (reported 3 times; the latest: fp b)".to_owned(),
                "x\\n[ERROR] all\\tgood\\r".to_owned(),
            ]
        );
    }
}
