//! `--topic NAME|PATTERN` of `llbus echo` and `llbus record`: a name is taken as given, a
//! pattern (a value with `*` in it: `md.quote.*`, `fleet/**/odom`; `llbus::TopicPattern`) is
//! resolved once, at start, against the topics the publisher says it serves. Topics it adds
//! later are not followed. Names alone ask nothing: the commands run as they always did.
//!
//! The publisher is asked as `llbus topics --peer` asks a bridge (docs/PROTOCOL.md,
//! "Discovery"): a `Query` for every topic, alone in its datagram and padded, sent by unicast
//! to its address; it answers with one `Announce` of its exports no larger than the query.
//! Hence:
//!
//! - only a bridge with discovery on answers (`Bridge::announce`, `Bridge::discover`,
//!   `BridgeConfig::discovery`); one without drops the query. A schema request for a topic no
//!   bridge exports goes out beside the queries: a publisher that answers it and not the
//!   queries has discovery off (or exports nothing), and the error says so within
//!   [`NO_ANSWER_GRACE`] instead of at the setup timeout;
//! - an answer names the topics of one group (those sent by unicast only, if any, else the
//!   first multicast group's), as many as fit the query. Two sizes go out: the
//!   [`QUERY_LEN`] bytes every bridge takes, and a query as large as the link's datagrams
//!   (about 1400 bytes of names), which a bridge with a smaller `max_datagram` drops. When
//!   the largest answer came close enough to its room that a topic may have been left out,
//!   [`Served::partial`] says so and the commands warn;
//! - with the pre-shared key, the queries are sealed and the answers opened with it
//!   ([`FrameMac`]).
//!
//! The names come from the network: they are escaped wherever they are printed (`text`), and
//! at most [`MAX_SERVED`] are kept.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use llbus::TopicPattern;
use llbus_net::{
    canonical, entry_len, parse_datagram, Announce, Event, Flags, FrameMac, Header, Kind,
    RecvBatch, SchemaFailure, SocketConfig, UdpEndpoint, DEFAULT_MAX_DATAGRAM, HEADER_LEN,
    MAC_TAG_LEN, MAX_ANNOUNCED_NAME, QUERY_LEN,
};

use crate::remote::{Link, NoMessages};
use crate::text;

/// What one `--topic` value names.
#[derive(Clone, Debug)]
pub(crate) enum TopicArg {
    /// A name, as given: not checked against the naming rule, so that a name a hand-written
    /// `Message` impl chose works as it always did.
    Name(String),
    /// A pattern, resolved against what the publisher serves.
    Pattern(TopicPattern),
}

impl TopicArg {
    /// Whether this is a pattern (the output then names each message's topic).
    pub(crate) fn is_pattern(&self) -> bool {
        matches!(self, TopicArg::Pattern(_))
    }

    /// Whether topic `name` is this one, or one this pattern matches.
    pub(crate) fn takes(&self, name: &str) -> bool {
        match self {
            TopicArg::Name(n) => n == name,
            TopicArg::Pattern(p) => p.matches(name),
        }
    }

    /// The value as given.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            TopicArg::Name(n) => n,
            TopicArg::Pattern(p) => p.as_str(),
        }
    }
}

/// A `--topic` value: a pattern if it holds a `*` (or is empty), checked by
/// `TopicPattern::new`, whose error is the usage error; a name otherwise.
pub(crate) fn parse_topic(s: &str) -> Result<TopicArg, String> {
    if s.is_empty() || s.contains('*') {
        return TopicPattern::new(s)
            .map(TopicArg::Pattern)
            .map_err(|e| e.to_string());
    }
    Ok(TopicArg::Name(s.to_owned()))
}

/// The `--help` text of `echo` and `record` on patterns.
pub(crate) const PATTERN_HELP: &str = "\
A --topic PATTERN names every topic of the publisher that matches it: `*` stands for one \
segment and `**` for any number of them, each alone between `.` or `/` (`md.quote.*`, \
`fleet/**/odom`; quote it for the shell). A value without `*` is a name, taken as given.

The names are asked of the publisher (at --publisher, or the one discovery found) once, at \
start, with a discovery query \
(docs/PROTOCOL.md, \"Discovery\"): topics it adds later are not followed. Only a bridge with \
discovery on answers that query (Bridge::announce, Bridge::discover, BridgeConfig::discovery; \
the publisher example's --announce): against a bridge without, the command fails saying so, \
and its topics must be named exactly. An answer holds at most about 1400 bytes of names, of \
one multicast group; a warning says when it may have left some out. A pattern that matches nothing fails, listing what the \
publisher serves. One publisher per command: `llbus topics PATTERN` finds them on the network.";

/// Names kept at most from the publisher's answers.
const MAX_SERVED: usize = 4096;
/// Names listed at most in an error.
const LISTED: usize = 16;
/// How long a publisher that is there (it answered the schema request) may take to answer a
/// query before it is taken to have discovery off.
const NO_ANSWER_GRACE: Duration = Duration::from_millis(1500);
/// How often the queries go out until one is answered: two per round stay under a bridge's
/// default limit of 5 answers a second per source.
const ASK_EVERY: Duration = Duration::from_millis(500);
/// How long to wait, after an answer that may be partial, for the larger query's.
const SETTLE: Duration = Duration::from_millis(150);

/// The topics a publisher said it serves.
#[derive(Debug, Default)]
struct Served {
    /// Each name once, in the publisher's announcement order.
    names: Vec<String>,
    /// The names it announces as reliable exports (`Bridge::export_reliable`).
    reliable: Vec<String>,
    /// Whether the largest answer came so close to filling the room its query gave that a
    /// topic may have been left out.
    partial: bool,
}

impl Served {
    /// The names, escaped, at most [`LISTED`] of them, and how many more there are.
    fn listing(&self) -> String {
        let mut list: Vec<String> = self
            .names
            .iter()
            .take(LISTED)
            .map(|n| text::clean(n).into_owned())
            .collect();
        if self.names.len() > LISTED {
            list.push(format!("... {} more", self.names.len() - LISTED));
        }
        list.join(", ")
    }

    /// What `llbus` tells of a possibly partial answer.
    fn partial_note(&self) -> &'static str {
        if self.partial {
            " (its answer may leave topics out: one answer holds at most about 1400 bytes of \
             names, of one multicast group; name a topic it left out exactly)"
        } else {
            ""
        }
    }
}

/// The names `args` stand for, each once, in order: names as given, and for each pattern the
/// names of `served` that match it.
///
/// # Errors
/// A pattern that matches none of `served` (naming the pattern and what is served).
fn expand(
    args: &[TopicArg],
    served: &Served,
    publisher: SocketAddr,
) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    for arg in args {
        match arg {
            TopicArg::Name(name) => {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
            TopicArg::Pattern(pattern) => {
                let mut matched = false;
                for name in served.names.iter().filter(|n| pattern.matches(n)) {
                    matched = true;
                    if !names.contains(name) {
                        names.push(name.clone());
                    }
                }
                if !matched {
                    return Err(format!(
                        "no topic of the publisher at {publisher} matches --topic '{}'; it \
                         serves {}: {}{}{}",
                        text::clean(pattern.as_str()),
                        served.names.len(),
                        served.listing(),
                        served.partial_note(),
                        deeper_hint(pattern, &served.names),
                    ));
                }
            }
        }
    }
    Ok(names)
}

/// When `pattern` ends in `*` and the same with `**` would match some of `names`: a hint that
/// `*` stands for one segment (a user who wrote `md.*` for everything under `md`).
pub(crate) fn deeper_hint<S: AsRef<str>>(pattern: &TopicPattern, names: &[S]) -> String {
    let text = pattern.as_str();
    let Some(stem) = text.strip_suffix('*').filter(|s| !s.ends_with('*')) else {
        return String::new();
    };
    let deeper = format!("{stem}**");
    match TopicPattern::new(&deeper) {
        Ok(p)
            if (names.iter().map(AsRef::as_ref))
                .any(|n| p.matches(n) && segments(n) > segments(text)) =>
        {
            format!(
                " (`*` stands for one segment: '{}' matches deeper names)",
                text::clean(&deeper)
            )
        }
        _ => String::new(),
    }
}

/// How many segments a name or pattern has.
fn segments(name: &str) -> usize {
    name.split(['.', '/']).count()
}

/// The topics `--topic` values stand for at one publisher.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// Each name once, in order.
    pub(crate) names: Vec<String>,
    /// Per name: whether the publisher announces it as a reliable export (`false` when it was
    /// not asked, or did not say).
    pub(crate) reliable: Vec<bool>,
}

/// The names `args` stand for (see [`expand`]): when a pattern is among them, or `reliability`
/// is wanted, first asks the publisher at `link` which topics it serves (and which reliably),
/// within `timeout`; warns when its answer may be partial. Without a pattern, a publisher
/// that does not answer only costs the reliability (a note says so).
///
/// # Errors
/// For a pattern: no answer (saying why, when the publisher is there but has discovery off),
/// or a pattern that matches nothing.
pub(crate) fn resolve(
    args: &[TopicArg],
    link: &mut Link,
    timeout: Duration,
    reliability: bool,
) -> Result<Resolved, String> {
    let patterns = args.iter().any(TopicArg::is_pattern);
    let served = match (patterns, reliability) {
        (false, false) => Served::default(),
        (true, _) => ask(link, timeout)?,
        (false, true) => ask(link, timeout.min(NO_ANSWER_GRACE * 2)).unwrap_or_else(|e| {
            eprintln!(
                "llbus: cannot tell whether the topics are reliable exports ({}): subscribing                  best-effort",
                text::clean(&e)
            );
            Served::default()
        }),
    };
    let names = expand(args, &served, link.publisher())?;
    if served.partial {
        eprintln!(
            "llbus: the publisher at {} named {} topics{}",
            link.publisher(),
            served.names.len(),
            served.partial_note()
        );
    }
    let reliable = names.iter().map(|n| served.reliable.contains(n)).collect();
    Ok(Resolved { names, reliable })
}

/// A `Query` for every topic (`room` bytes, header and padding), sealed with `mac` if given.
///
/// # Errors
/// It cannot be sealed.
pub(crate) fn sealed_query(room: usize, mac: Option<&FrameMac>) -> Result<Vec<u8>, String> {
    let mut datagram = query(llbus_net::new_session_id(), room);
    if let Some(mac) = mac {
        datagram.resize(room + MAC_TAG_LEN, 0);
        mac.seal(&mut datagram, room)
            .map_err(|e| format!("cannot seal the query: {e:?}"))?;
    }
    Ok(datagram)
}

/// A `Query` for every topic from `session`, `len` bytes long (header and zero padding).
fn query(session: u64, len: usize) -> Vec<u8> {
    let mut datagram = vec![0u8; len.max(HEADER_LEN)];
    let header = Header {
        kind: Kind::Query,
        flags: Flags::NONE,
        payload_len: u16::try_from(datagram.len() - HEADER_LEN).unwrap_or(u16::MAX),
        topic_id: 0,
        fingerprint: 0,
        session,
        seq: 0,
        timestamp_ns: 0,
    };
    if let Some(head) = datagram.first_chunk_mut::<HEADER_LEN>() {
        header.write(head);
    }
    datagram
}

/// What the answers to one query brought.
#[derive(Debug)]
struct Answers {
    /// The body bytes (without a key's trailer) the query gave the answer room for.
    room: usize,
    served: Served,
    /// The body bytes of the largest answer.
    largest: usize,
}

impl Answers {
    fn new(room: usize) -> Answers {
        Answers {
            room,
            served: Served::default(),
            largest: 0,
        }
    }

    /// Whether an answer came.
    fn any(&self) -> bool {
        self.largest > 0
    }

    /// Takes `bytes` from `src` if it is the publisher's answer: an `Announce` from the
    /// publisher's address, opened with the key if there is one. Returns whether it was taken.
    fn on_datagram(
        &mut self,
        bytes: &[u8],
        src: SocketAddr,
        publisher: SocketAddr,
        mac: Option<&FrameMac>,
    ) -> bool {
        if canonical(src) != publisher {
            return false;
        }
        let max = DEFAULT_MAX_DATAGRAM.max(self.room) + MAC_TAG_LEN;
        let (frames, body) = match mac {
            Some(mac) => (
                mac.open(bytes, max),
                bytes.len().saturating_sub(MAC_TAG_LEN),
            ),
            None => (parse_datagram(bytes, max), bytes.len()),
        };
        let Ok(frames) = frames else {
            return false;
        };
        let mut taken = false;
        for frame in frames {
            if frame.header.kind != Kind::Announce {
                continue;
            }
            let Ok(announce) = Announce::from_frame(&frame) else {
                continue;
            };
            taken = true;
            for t in announce.topics() {
                let name = String::from_utf8_lossy(t.name).into_owned();
                if !self.served.names.contains(&name) && self.served.names.len() < MAX_SERVED {
                    if t.reliable {
                        self.served.reliable.push(name.clone());
                    }
                    self.served.names.push(name);
                }
            }
        }
        if taken && body > self.largest {
            self.largest = body;
            // A bridge fills an answer up to the first topic that does not fit: with room for
            // the longest name left, none was left out.
            self.served.partial = body + entry_len("") + MAX_ANNOUNCED_NAME > self.room;
        }
        taken
    }
}

/// Asks the publisher at `link` which topics it serves (see the module docs), within
/// `timeout`.
///
/// # Errors
/// No answer within `timeout`, or the publisher answered a schema request and not the
/// queries within [`NO_ANSWER_GRACE`]; no socket.
fn ask(link: &mut Link, timeout: Duration) -> Result<Served, String> {
    let publisher = link.publisher();
    let local = if publisher.is_ipv4() {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    };
    let mac = link.psk().map(|key| FrameMac::new(&key));
    let seal = if mac.is_some() { MAC_TAG_LEN } else { 0 };
    // One socket per query size, so that an answer's room is known: the small query first.
    let mut rooms = vec![QUERY_LEN];
    if link.max_datagram() - seal > QUERY_LEN {
        rooms.push(link.max_datagram() - seal);
    }
    let mut askers = Vec::with_capacity(rooms.len());
    for &room in &rooms {
        let socket = UdpEndpoint::bind(local, &SocketConfig::default())
            .map_err(|e| format!("cannot bind a UDP socket: {e}"))?;
        let datagram = sealed_query(room, mac.as_ref())?;
        askers.push((socket, datagram, Answers::new(room)));
    }
    // Is the publisher there at all? Asked for a topic no bridge exports (`*` is in no name),
    // it answers that it serves no schema for it.
    let mut probe = link.subscribe(&[])?;
    probe.request_schema(llbus::topic_id("*"), publisher);
    let mut recv = RecvBatch::new(
        8,
        DEFAULT_MAX_DATAGRAM.max(link.max_datagram()) + MAC_TAG_LEN,
    );
    let start = Instant::now();
    let deadline = start + timeout;
    let mut next_ask = start;
    let mut there: Option<Instant> = None;
    let mut first_answer: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= next_ask && first_answer.is_none() {
            for (socket, datagram, _) in &mut askers {
                // Not sent now, maybe at the next round: the deadline decides.
                let _ = socket.send_to(datagram, publisher);
            }
            next_ask = now + ASK_EVERY;
        }
        for (socket, _, answers) in &mut askers {
            let n = socket
                .recv_batch(&mut recv)
                .map_err(|e| format!("the UDP socket failed: {e}"))?;
            for (bytes, src) in recv.iter().take(n) {
                if answers.on_datagram(bytes, src, publisher, mac.as_ref()) {
                    first_answer.get_or_insert(now);
                }
            }
        }
        if let Some(at) = first_answer {
            // The largest query's answer holds the most; a smaller one will do when it says
            // it is whole, or when the larger query seems dropped (a bridge with a smaller
            // `max_datagram`).
            let best = askers.iter().rev().map(|(_, _, a)| a).find(|a| a.any());
            let largest_answered = askers.last().is_some_and(|(_, _, a)| a.any());
            if let Some(best) = best {
                if largest_answered || !best.served.partial || now >= at + SETTLE {
                    let mut served = Served {
                        partial: best.served.partial,
                        ..Served::default()
                    };
                    for (_, _, a) in &askers {
                        for name in &a.served.names {
                            if !served.names.contains(name) && served.names.len() < MAX_SERVED {
                                if a.served.reliable.contains(name) {
                                    served.reliable.push(name.clone());
                                }
                                served.names.push(name.clone());
                            }
                        }
                    }
                    return Ok(served);
                }
            }
        }
        // Drives the probe; sleeps a millisecond when nothing came on its socket.
        link.drive(&mut probe, &mut NoMessages)?;
        while let Some(event) = probe.poll_event() {
            match event {
                Event::SchemaFailed {
                    reason: SchemaFailure::TimedOut,
                    ..
                } => {}
                Event::SchemaFailed { .. } | Event::SchemaReceived { .. } => {
                    there.get_or_insert(Instant::now());
                }
                _ => {}
            }
        }
        let now = Instant::now();
        if first_answer.is_none() && there.is_some_and(|t| now >= t + NO_ANSWER_GRACE) {
            return Err(format!(
                "the publisher at {publisher} answers but not the discovery query for its \
                 topics, which a --topic pattern needs: its bridge has discovery off (only a \
                 bridge with discovery on answers: Bridge::announce, Bridge::discover, \
                 BridgeConfig::discovery), exports nothing, or limits this host's queries; \
                 name the topics exactly"
            ));
        }
        if now >= deadline {
            return Err(format!(
                "no answer from {publisher} to the discovery query for its topics within \
                 {timeout:?}, which a --topic pattern needs: is the publisher running there, \
                 does its allowlist admit this host, and is the key right?"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llbus_net::{AnnounceHead, BatchEncoder};

    const PUBLISHER: &str = "10.0.0.1:7000";

    fn publisher() -> SocketAddr {
        PUBLISHER.parse().unwrap()
    }

    fn served(names: &[&str]) -> Served {
        Served {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Served::default()
        }
    }

    fn args(values: &[&str]) -> Vec<TopicArg> {
        values.iter().map(|v| parse_topic(v).unwrap()).collect()
    }

    /// An answer naming `names`, sealed with `mac` if given.
    fn answer(names: &[&str], mac: Option<&FrameMac>) -> Vec<u8> {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM + MAC_TAG_LEN];
        let mut scratch = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM]);
        let head = AnnounceHead {
            session: 7,
            seq: 1,
            timestamp_ns: 0,
            period_ms: 1000,
            uptime_ms: 10,
            data: "0.0.0.0:7000".parse().unwrap(),
            group: None,
        };
        let topics = names.iter().map(|n| (llbus::topic_id(n), 0xf1, 0, *n));
        enc.push_announce(&head, 0, 1, topics, &mut scratch)
            .unwrap();
        let len = enc.len();
        match mac {
            Some(mac) => {
                let sealed = mac.seal(&mut buf, len).unwrap();
                buf.truncate(sealed);
            }
            None => buf.truncate(len),
        }
        buf
    }

    #[test]
    fn a_value_with_a_star_is_a_pattern_and_a_bad_one_says_what_is_wrong() {
        assert!(matches!(parse_topic("md.quote").unwrap(), TopicArg::Name(n) if n == "md.quote"));
        // A name is taken as given, as before: the naming rule is not applied to it.
        assert!(matches!(
            parse_topic("Demo Counter").unwrap(),
            TopicArg::Name(_)
        ));
        assert!(parse_topic("md.quote.*").unwrap().is_pattern());
        assert!(parse_topic("fleet/**/odom").unwrap().is_pattern());
        let e = parse_topic("md.*x").unwrap_err();
        assert!(
            e.contains("invalid topic pattern") && e.contains("mixes `*`"),
            "{e}"
        );
        let e = parse_topic("").unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn a_star_that_misses_deeper_names_says_that_a_double_star_reaches_them() {
        let s = served(&["md.quote.nyse", "ops"]);
        let e = expand(&args(&["md.*"]), &s, publisher()).unwrap_err();
        assert!(
            e.contains("`*` stands for one segment") && e.contains("'md.**'"),
            "{e}"
        );
        let e = expand(&args(&["ops.*"]), &s, publisher()).unwrap_err();
        assert!(
            !e.contains("one segment"),
            "ops.** matches nothing either: {e}"
        );
    }

    #[test]
    fn patterns_expand_to_what_they_match_each_name_once_in_order() {
        let s = served(&["md.quote.nyse", "md.trade.nyse", "md.quote.nasdaq", "ops"]);
        let got = expand(&args(&["md.quote.*"]), &s, publisher()).unwrap();
        assert_eq!(got, ["md.quote.nyse", "md.quote.nasdaq"]);
        let got = expand(
            &args(&["md.quote.nasdaq", "md.*.nyse", "md.quote.*"]),
            &s,
            publisher(),
        )
        .unwrap();
        assert_eq!(got, ["md.quote.nasdaq", "md.quote.nyse", "md.trade.nyse"]);
        // Names need nothing served.
        let got = expand(&args(&["a", "b", "a"]), &Served::default(), publisher()).unwrap();
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn a_pattern_matching_nothing_names_it_and_a_bounded_escaped_list_of_what_is_served() {
        let mut names: Vec<String> = (0..40).map(|i| format!("t.{i}")).collect();
        names.insert(0, "evil\u{1b}[2J".to_owned());
        let s = Served {
            names,
            partial: true,
            ..Served::default()
        };
        let e = expand(&args(&["md.*"]), &s, publisher()).unwrap_err();
        assert!(e.contains("matches --topic 'md.*'"), "{e}");
        assert!(!e.contains("one segment"), "no deeper name: no hint: {e}");
        assert!(e.contains(PUBLISHER) && e.contains("serves 41: "), "{e}");
        assert!(e.contains("t.14") && !e.contains("t.15,"), "{e}");
        assert!(e.contains("... 25 more"), "{e}");
        assert!(!e.contains('\u{1b}') && e.contains("evil\\x1b[2J"), "{e}");
        assert!(e.contains("may leave topics out"), "{e}");
    }

    #[test]
    fn an_answer_is_taken_from_the_publisher_only_and_opened_with_the_key() {
        let names = ["md.quote.nyse", "md.quote.nasdaq"];
        let mut a = Answers::new(QUERY_LEN);
        let other: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        assert!(!a.on_datagram(&answer(&names, None), other, publisher(), None));
        assert!(!a.on_datagram(b"garbage", publisher(), publisher(), None));
        assert!(a.served.names.is_empty() && !a.any());
        assert!(a.on_datagram(&answer(&names, None), publisher(), publisher(), None));
        assert_eq!(a.served.names, names);
        assert!(a.any() && !a.served.partial);

        let mac = FrameMac::new(&[7; 32]);
        let wrong = FrameMac::new(&[8; 32]);
        let sealed = answer(&names, Some(&mac));
        let mut a = Answers::new(QUERY_LEN);
        assert!(!a.on_datagram(&sealed, publisher(), publisher(), None));
        assert!(!a.on_datagram(&sealed, publisher(), publisher(), Some(&wrong)));
        assert!(a.on_datagram(&sealed, publisher(), publisher(), Some(&mac)));
        assert_eq!(a.served.names, names);
    }

    #[test]
    fn an_answer_near_its_room_may_be_partial_and_one_with_room_left_is_not() {
        // Names of 14 bytes: 100 bytes of header and head, then 32 per entry.
        let names: Vec<String> = (0..13).map(|i| format!("md.quote.v{i:04}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let cases = [
            // 516 bytes, with the room of a large query left for any name.
            (DEFAULT_MAX_DATAGRAM, 13, false),
            // 420 bytes, which the small query's room (512) may have cut short.
            (QUERY_LEN, 10, true),
            // 196: room left for any name.
            (QUERY_LEN, 3, false),
        ];
        for (room, n, partial) in cases {
            let mut a = Answers::new(room);
            assert!(a.on_datagram(&answer(&refs[..n], None), publisher(), publisher(), None));
            assert_eq!(a.largest, 100 + 32 * n);
            assert_eq!(a.served.partial, partial, "{n} names in {room}");
        }
    }

    #[test]
    fn a_query_is_one_frame_of_the_size_asked_for_every_topic() {
        let q = query(9, 1400);
        assert_eq!(q.len(), 1400);
        let frames: Vec<_> = parse_datagram(&q, 1472).unwrap().collect();
        assert_eq!(frames.len(), 1);
        let parsed = llbus_net::Query::from_frame(&frames[0]).unwrap();
        assert_eq!((parsed.session, parsed.topic_id), (9, 0));
    }
}
