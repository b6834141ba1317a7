//! Topic names, typed topics and name patterns.
//!
//! A topic is a name and a type. The name is chosen at run time ([`Topic::named`]); the type
//! brings the fingerprint and the shape. `#[derive(Message)]`'s `topic = "..."` is the type's
//! default name ([`Topic::of`]), so a program that never names a topic runs as it always has.
//!
//! # Names
//! A topic name is 1 to [`TOPIC_NAME_MAX_LEN`] bytes of ASCII letters, digits, `_` and `-`, in
//! segments separated by `.` or `/` (`md.quote.nyse`, `robot7/odom`); no segment is empty, so a
//! name has no leading, trailing or doubled separator. Names are case sensitive. A name's id is
//! [`topic_id`] of its bytes, the same on every host: the id is what travels on the wire and
//! what the running bus routes by, so no name is looked up once the bus runs.
//!
//! # Patterns
//! A [`TopicPattern`] matches names segment by segment: a segment of the pattern matches the
//! same segment of the name, `*` matches any one segment, and `**` matches any number of
//! segments, none included. `md.quote.*` matches `md.quote.nyse` but neither `md.quote` nor
//! `md.quote.nyse.l2`; `md.**` matches `md`, `md.quote` and `md.quote.nyse.l2`. The separators
//! are interchangeable in a pattern as in a name (`robot*` is not a wildcard: `*` stands alone in
//! its segment).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::message::{topic_id, Message};

/// The longest topic name, in bytes.
pub const TOPIC_NAME_MAX_LEN: usize = 64;

/// A checked topic name and its id.
///
/// A topic name is 1 to [`TOPIC_NAME_MAX_LEN`] bytes of ASCII letters, digits, `_` and `-`, in
/// segments separated by `.` or `/` (`md.quote.nyse`, `robot7/odom`); no segment is empty, so a
/// name has no leading, trailing or doubled separator. Names are case sensitive. A name's id is
/// [`topic_id`] of its bytes, the same on every host: the id is what travels on the wire and
/// what the running bus routes by, so no name is looked up once the bus runs.
///
/// Cheap to clone (the text is shared). Two names are equal when their texts are.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName {
    text: Arc<str>,
    id: u64,
}

impl TopicName {
    /// Checks `name` against the rule of [`TopicName`] and computes its id.
    ///
    /// ```
    /// let name = llbus::TopicName::new("md.quote.nyse").unwrap();
    /// assert_eq!(name.id(), llbus::topic_id("md.quote.nyse"));
    /// assert!(llbus::TopicName::new("md..quote").is_err());
    /// ```
    pub fn new(name: &str) -> Result<TopicName, TopicNameError> {
        check_name(name)?;
        Ok(TopicName {
            text: Arc::from(name),
            id: topic_id(name),
        })
    }

    /// The default name of message type `M`: `M::TOPIC` with `M::TOPIC_ID`, taken as they are
    /// (a hand-written [`Message`] impl is trusted with both, as it always was).
    pub fn of<M: Message>() -> TopicName {
        TopicName {
            text: Arc::from(M::TOPIC),
            id: M::TOPIC_ID,
        }
    }

    /// A name the bus makes for its own wiring (a service's reply topics), unchecked: it holds
    /// a character no user name can have, so it never clashes with one.
    pub(crate) fn internal(name: String) -> TopicName {
        let id = topic_id(&name);
        TopicName {
            text: Arc::from(name),
            id,
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The name's id: [`topic_id`] of the name (for a type's default name, its `TOPIC_ID`).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text, f)
    }
}

impl AsRef<str> for TopicName {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl PartialEq<str> for TopicName {
    fn eq(&self, other: &str) -> bool {
        *self.text == *other
    }
}

impl PartialEq<&str> for TopicName {
    fn eq(&self, other: &&str) -> bool {
        *self.text == **other
    }
}

/// Why a topic name or pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicNameError {
    /// The name or pattern as given (cut to [`TOPIC_NAME_MAX_LEN`] characters more than the
    /// limit, so that an error never holds an unbounded input).
    pub name: String,
    /// What is wrong with it.
    pub problem: String,
    /// It was given as a pattern ([`TopicPattern::new`]), not a name.
    pub pattern: bool,
}

impl fmt::Display for TopicNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.pattern { "pattern" } else { "name" };
        write!(f, "invalid topic {what} {:?}: {}", self.name, self.problem)
    }
}

impl std::error::Error for TopicNameError {}

fn refuse(name: &str, problem: String) -> TopicNameError {
    let shown: String = name.chars().take(2 * TOPIC_NAME_MAX_LEN).collect();
    TopicNameError {
        name: shown,
        problem,
        pattern: false,
    }
}

fn is_separator(c: char) -> bool {
    c == '.' || c == '/'
}

/// Checks a name, or a pattern when `pattern` (which also allows `*` and `**` segments).
fn check(name: &str, pattern: bool) -> Result<(), TopicNameError> {
    const EXAMPLE: &str = "write a name such as `md.quote.nyse` or `robot7/odom`";
    if name.is_empty() {
        return Err(refuse(name, format!("it is empty; {EXAMPLE}")));
    }
    if name.len() > TOPIC_NAME_MAX_LEN {
        return Err(refuse(
            name,
            format!(
                "it is {} bytes long, and the limit is {TOPIC_NAME_MAX_LEN}",
                name.len()
            ),
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-') || is_separator(c);
    if let Some(bad) = name
        .chars()
        .find(|&c| !(allowed(c) || (pattern && c == '*')))
    {
        return Err(refuse(
            name,
            format!(
                "it contains {bad:?}; a topic name is made of ASCII letters, digits, `_` and `-`, \
                 in segments separated by `.` or `/`"
            ),
        ));
    }
    for segment in name.split(is_separator) {
        if segment.is_empty() {
            return Err(refuse(
                name,
                format!(
                    "it has an empty segment (a leading, trailing or doubled separator); {EXAMPLE}"
                ),
            ));
        }
        if pattern && segment.contains('*') && segment != "*" && segment != "**" {
            return Err(refuse(
                name,
                format!(
                    "its segment `{segment}` mixes `*` with other characters; `*` (one segment) \
                     and `**` (any number of segments) stand alone between separators"
                ),
            ));
        }
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), TopicNameError> {
    check(name, false)
}

/// A topic of message type `T` with a name chosen at run time.
///
/// The name's id is what the bus routes by; the type gives the fingerprint and the shape.
/// Several topics may share one type (`md.quote.nyse` and `md.quote.nasdaq` of one `Quote`);
/// one name has one type on a bus, which `start()` checks.
///
/// ```
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, llbus::Message)]
/// # #[message(topic = "md.quote")]
/// # struct Quote { px: f64 }
/// use llbus::Topic;
///
/// let nyse = Topic::<Quote>::named("md.quote.nyse").unwrap();
/// assert_eq!(nyse.name().as_str(), "md.quote.nyse");
/// assert_eq!(Topic::<Quote>::of().name().as_str(), "md.quote");
/// ```
pub struct Topic<T> {
    name: TopicName,
    _type: PhantomData<fn() -> T>,
}

impl<T: Message> Topic<T> {
    /// The topic `name` of type `T`, or why the name is refused.
    pub fn named(name: &str) -> Result<Topic<T>, TopicNameError> {
        TopicName::new(name).map(Topic::with_name)
    }

    /// The type's default topic: `T::TOPIC`, as `#[derive(Message)]` names it.
    pub fn of() -> Topic<T> {
        Topic::with_name(TopicName::of::<T>())
    }

    /// The topic of type `T` with an already checked `name`.
    pub fn with_name(name: TopicName) -> Topic<T> {
        Topic {
            name,
            _type: PhantomData,
        }
    }
}

impl<T> Topic<T> {
    /// The topic's name (and id).
    pub fn name(&self) -> &TopicName {
        &self.name
    }

    /// The topic's id: [`topic_id`] of its name.
    pub fn id(&self) -> u64 {
        self.name.id
    }
}

impl<T> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Topic {
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> PartialEq for Topic<T> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<T> Eq for Topic<T> {}

impl<T> fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Topic<{}>({:?})",
            crate::runtime::short_type_name::<T>(),
            self.name
        )
    }
}

impl<T: Message> Default for Topic<T> {
    fn default() -> Self {
        Topic::of()
    }
}

/// A pattern over topic names: `*` is any one segment, `**` any number of segments.
///
/// A pattern matches names segment by segment: a segment of the pattern matches the same
/// segment of the name, `*` matches any one segment, and `**` matches any number of segments,
/// none included. `md.quote.*` matches `md.quote.nyse` but neither `md.quote` nor
/// `md.quote.nyse.l2`; `md.**` matches `md`, `md.quote` and `md.quote.nyse.l2`. The separators
/// are interchangeable in a pattern as in a name (`robot*` is not a wildcard: `*` stands alone
/// in its segment).
///
/// ```
/// let p = llbus::TopicPattern::new("md.quote.*").unwrap();
/// assert!(p.matches("md.quote.nyse"));
/// assert!(!p.matches("md.quote"));
/// assert!(llbus::TopicPattern::new("md.**").unwrap().matches("md.quote.nyse.l2"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TopicPattern {
    text: Arc<str>,
    segments: Arc<[Segment]>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Segment {
    Literal(Box<str>),
    One,
    Any,
}

impl TopicPattern {
    /// Checks `pattern`: a topic name whose segments may also be `*` or `**`.
    pub fn new(pattern: &str) -> Result<TopicPattern, TopicNameError> {
        check(pattern, true).map_err(|e| TopicNameError { pattern: true, ..e })?;
        let segments = pattern
            .split(is_separator)
            .map(|s| match s {
                "*" => Segment::One,
                "**" => Segment::Any,
                literal => Segment::Literal(literal.into()),
            })
            .collect();
        Ok(TopicPattern {
            text: Arc::from(pattern),
            segments,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the pattern has no wildcard: it matches one sequence of segments only, which
    /// is one name up to the separators (`md.quote` matches `md.quote` and `md/quote`, two
    /// topics with two ids).
    pub fn is_exact(&self) -> bool {
        self.segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
    }

    /// Whether `name` matches. A name that breaks the naming rule matches nothing.
    pub fn matches(&self, name: &str) -> bool {
        if check_name(name).is_err() {
            return false;
        }
        let name: Vec<&str> = name.split(is_separator).collect();
        matches_from(&self.segments, &name)
    }
}

/// Whether `name`'s segments match `pattern`'s: the classic wildcard match, where `**` is the
/// star and `*` the single-item wildcard. On a mismatch it returns to the last `**` only, with
/// one more segment swallowed, so it takes at most `pattern.len() * name.len()` steps, whatever
/// the pattern.
fn matches_from(pattern: &[Segment], name: &[&str]) -> bool {
    let (mut p, mut n) = (0, 0);
    // After the last `**` seen: where the pattern resumes and the name segment it resumed at.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(Segment::One) => (p, n) = (p + 1, n + 1),
            Some(Segment::Literal(l)) if **l == *name[n] => (p, n) = (p + 1, n + 1),
            Some(Segment::Any) => {
                star = Some((p + 1, n));
                p += 1;
            }
            _ => match star {
                Some((resume, at)) => {
                    star = Some((resume, at + 1));
                    (p, n) = (resume, at + 1);
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|s| *s == Segment::Any)
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicPattern({:?})", &*self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule_and_say_what_is_wrong() {
        for good in [
            "md.quote",
            "md.quote.nyse",
            "robot7/odom",
            "a",
            "A-b_c.d/e",
            "x".repeat(64).as_str(),
        ] {
            let name = TopicName::new(good).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(name.as_str(), good);
            assert_eq!(name.id(), topic_id(good));
        }
        for (bad, says) in [
            ("", "empty"),
            ("md..quote", "empty segment"),
            (".md", "empty segment"),
            ("md/", "empty segment"),
            ("md quote", "' '"),
            ("md.*", "'*'"),
            ("mé", "'é'"),
            (&"x".repeat(65), "65 bytes"),
        ] {
            let e = TopicName::new(bad).expect_err(bad);
            assert!(e.to_string().contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_error_holds_a_bounded_copy_of_a_long_input() {
        let long = "x".repeat(100_000);
        let e = TopicName::new(&long).unwrap_err();
        assert_eq!(e.name.len(), 2 * TOPIC_NAME_MAX_LEN);
    }

    #[test]
    fn patterns_match_by_segment() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "md.quote.*",
                &["md.quote.nyse", "md.quote/nasdaq"],
                &["md.quote", "md.quote.nyse.l2", "md.trade.nyse"],
            ),
            (
                "md.**",
                &["md", "md.quote", "md.quote.nyse.l2"],
                &["mdx", "x.md"],
            ),
            ("**", &["a", "a.b.c"], &[]),
            ("*.odom", &["robot7/odom", "r.odom"], &["odom", "a.b.odom"]),
            ("a.**.z", &["a.z", "a.b.z", "a.b.c.z"], &["a.b", "z"]),
            ("a.**.**.z", &["a.z", "a.b.c.z"], &["a"]),
            ("md.quote", &["md.quote", "md/quote"], &["md.quote.x", "md"]),
        ];
        for (pattern, yes, no) in cases {
            let p = TopicPattern::new(pattern).unwrap();
            for name in *yes {
                assert!(p.matches(name), "{pattern} should match {name}");
            }
            for name in *no {
                assert!(!p.matches(name), "{pattern} should not match {name}");
            }
        }
        assert!(TopicPattern::new("md.quote").unwrap().is_exact());
        assert!(!TopicPattern::new("md.*").unwrap().is_exact());
    }

    #[test]
    fn an_exact_pattern_matches_its_segments_under_either_separator_which_are_distinct_names() {
        let p = TopicPattern::new("a.b/c").unwrap();
        assert!(p.is_exact());
        let spellings = ["a.b.c", "a.b/c", "a/b.c", "a/b/c"];
        for name in spellings {
            assert!(p.matches(name), "{name}");
        }
        for name in ["a.b", "a.b.c.d", "a.bc", "ab.c"] {
            assert!(!p.matches(name), "{name}");
        }
        // Each spelling is a topic of its own: the bus routes by the id of the exact bytes.
        let mut ids: Vec<u64> = spellings
            .iter()
            .map(|n| TopicName::new(n).unwrap().id())
            .collect();
        ids.dedup();
        assert_eq!(ids.len(), spellings.len());
    }

    #[test]
    fn patterns_refuse_what_is_not_a_whole_segment_wildcard() {
        for bad in ["robot*", "a.***", "*x.y", "", "a..*", "a b"] {
            let e = TopicPattern::new(bad).expect_err(bad);
            assert!(e.to_string().starts_with("invalid topic pattern"), "{e}");
        }
        assert!(!TopicPattern::new("**").unwrap().matches("not valid"));
    }

    #[test]
    fn patterns_with_many_stars_match_as_a_backtracking_matcher_would() {
        // A naive recursive matcher takes about 32^12 steps on this pair; a `**` that
        // backtracks only to the last star takes at most 24 * 32.
        let pattern = ["**.a"; 12].join(".");
        let p = TopicPattern::new(&pattern).unwrap();
        let mut name = vec!["a"; 31];
        name.push("b");
        assert!(!p.matches(&name.join(".")));
        name[31] = "a";
        assert!(p.matches(&name.join(".")));
        // The reference: every split of the name, tried recursively, on short inputs.
        fn reference(p: &[Segment], n: &[&str]) -> bool {
            match p.split_first() {
                None => n.is_empty(),
                Some((Segment::Any, rest)) => (0..=n.len()).any(|k| reference(rest, &n[k..])),
                Some((Segment::One, rest)) => !n.is_empty() && reference(rest, &n[1..]),
                Some((Segment::Literal(l), rest)) => {
                    n.first().is_some_and(|x| **l == **x) && reference(rest, &n[1..])
                }
            }
        }
        let parts = ["a", "b", "*", "**"];
        let mut checked = 0;
        for code in 0..4u32.pow(5) {
            let len = 1 + (code % 5) as usize;
            let pat: Vec<&str> = (0..len)
                .map(|i| parts[(code / 4u32.pow(i as u32)) as usize % 4])
                .collect();
            let p = TopicPattern::new(&pat.join(".")).unwrap();
            for ncode in 0..2u32.pow(5) {
                let nlen = (ncode % 5) as usize + 1;
                let n: Vec<&str> = (0..nlen)
                    .map(|i| ["a", "b"][(ncode >> i) as usize & 1])
                    .collect();
                assert_eq!(
                    p.matches(&n.join(".")),
                    reference(&p.segments, &n),
                    "{pat:?} {n:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 30_000);
    }
}
