//! `llbus topics`: what bridges announce on the network (discovery, `docs/PROTOCOL.md`,
//! "Discovery"). It joins the discovery group, asks every bridge for its topics (one `Query`,
//! padded, to the group and the peers given), listens for a while, and lists each topic with
//! its fingerprint and publishers (address, session, uptime, reliable, data group). Publishers
//! of one topic that announce different fingerprints are reported loudly: their subscribers
//! would be refused. A served service is announced as an entry flagged a service (its
//! fingerprint `Request<Req>`'s), and listed as one: `llbus call` calls it.
//!
//! Everything printed comes from the network, so names are escaped (`text`), and what the
//! listener keeps is bounded (at most [`MAX_PUBLISHERS`] publishers, each with what one
//! announcement cycle names, a datagram per part, and at most [`MAX_TOPICS`] topics in all).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use llbus::TopicPattern;
use llbus_net::{
    parse_datagram, Announce, BatchEncoder, Kind, RecvBatch, SocketConfig, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM, HEADER_LEN, QUERY_LEN,
};

use crate::text;

/// Publishers remembered at most (the rest are counted, not listed).
const MAX_PUBLISHERS: usize = 1024;
/// Topics remembered at most, all publishers together (the rest are counted, not listed).
const MAX_TOPICS: usize = 65_536;

/// Where to listen and ask.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Lists only the topics whose names match the pattern: `*` is any one segment, `**` any
    /// number of them, each standing alone between separators (`md.quote.*`, `fleet/**/odom`).
    #[arg(value_parser = parse_pattern)]
    pattern: Option<TopicPattern>,
    /// The discovery group (as the bridges' `DiscoveryConfig::group`).
    #[arg(long, default_value_t = llbus_net::DEFAULT_DISCOVERY_GROUP)]
    group: SocketAddr,
    /// Does not join the group: asks the peers only.
    #[arg(long)]
    no_group: bool,
    /// A bridge to ask by unicast (its bound address); repeat for several.
    #[arg(long)]
    peer: Vec<SocketAddr>,
    /// The interface to join the group on and send from, by one of its IPv4 addresses
    /// (`127.0.0.1` for loopback); default: the system's choice and, for an IPv4 group,
    /// loopback too (where bridges bound to this host's loopback address announce).
    #[arg(long)]
    interface: Option<IpAddr>,
    /// How long to listen for announcements, in milliseconds (bridges announce every second
    /// by default).
    #[arg(long, default_value_t = 2500)]
    listen_ms: u64,
    /// Lists again after every listening period.
    #[arg(long)]
    watch: bool,
    /// With `--watch`: stops after this many lists.
    #[arg(long)]
    count: Option<u64>,
    /// Prints JSON.
    #[arg(long)]
    json: bool,
}

/// One publisher as last announced.
#[derive(Clone, Debug)]
struct Publisher {
    session: u64,
    uptime_ms: u64,
    /// The entries of each part of its announcement, as last heard: a part replaces what that
    /// part named before, so what is kept is one announcement cycle, however many parts are
    /// sent.
    parts: Vec<Vec<Entry>>,
}

/// A topic as announced.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    topic_id: u64,
    fingerprint: u64,
    reliable: bool,
    /// A served service, not a topic of data (its fingerprint is its requests').
    service: bool,
    name: String,
    /// The multicast group its data goes to (a part's group is its topics').
    group: Option<SocketAddr>,
}

impl Publisher {
    fn topics(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.parts.iter().flatten()
    }
}

/// What was heard, by data address.
#[derive(Default)]
struct Heard {
    publishers: BTreeMap<SocketAddr, Publisher>,
    malformed: u64,
    sealed: u64,
    over: u64,
    /// Topics kept, all publishers together (at most [`MAX_TOPICS`]).
    kept: usize,
    /// Topics not kept: over [`MAX_TOPICS`].
    topics_over: u64,
}

impl Heard {
    fn on_datagram(&mut self, bytes: &[u8], src: SocketAddr) {
        let frames = match parse_datagram(bytes, DEFAULT_MAX_DATAGRAM) {
            Ok(f) => f,
            Err(llbus_net::DropReason::BadMac) => {
                self.sealed += 1;
                return;
            }
            Err(_) => {
                self.malformed += 1;
                return;
            }
        };
        for frame in frames {
            if frame.header.kind != Kind::Announce {
                continue;
            }
            let Ok(a) = Announce::from_frame(&frame) else {
                self.malformed += 1;
                continue;
            };
            let Some(data) = a.data_from(src) else {
                self.malformed += 1;
                continue;
            };
            if !self.publishers.contains_key(&data) && self.publishers.len() >= MAX_PUBLISHERS {
                self.over += 1;
                continue;
            }
            let p = self.publishers.entry(data).or_insert_with(|| Publisher {
                session: a.session,
                uptime_ms: a.uptime_ms,
                parts: Vec::new(),
            });
            if p.session != a.session {
                // Restarted: what the old session announced is gone.
                self.kept -= p.topics().count();
                p.parts.clear();
            }
            p.session = a.session;
            p.uptime_ms = a.uptime_ms;
            // As many parts as this announcement says (the parts beyond are forgotten); this
            // part's topics replace what it named before.
            for gone in p.parts.drain(usize::from(a.parts).min(p.parts.len())..) {
                self.kept -= gone.len();
            }
            p.parts.resize_with(usize::from(a.parts), Vec::new);
            let Some(part) = p.parts.get_mut(usize::from(a.part)) else {
                continue; // Cannot happen: a part is below its count (checked at decode).
            };
            self.kept -= part.len();
            part.clear();
            for t in a.topics() {
                let name = String::from_utf8_lossy(t.name).into_owned();
                let entry = Entry {
                    topic_id: t.topic_id,
                    fingerprint: t.fingerprint,
                    reliable: t.reliable,
                    service: t.service,
                    name,
                    group: a.group,
                };
                if part.contains(&entry) {
                    continue;
                }
                if self.kept >= MAX_TOPICS {
                    self.topics_over += 1;
                    continue;
                }
                part.push(entry);
                self.kept += 1;
            }
        }
    }
}

/// Sockets: one to ask from (answers come back to it), one in the group; with no
/// `--interface`, a second pair on loopback.
struct Listener {
    asker: UdpEndpoint,
    member: Option<UdpEndpoint>,
    /// With no `--interface` and an IPv4 group: an asker and a member on loopback, since a
    /// bridge bound to a loopback address (the examples' default) announces there, where a
    /// member on the system's choice of interface does not hear it.
    loopback: Option<(UdpEndpoint, UdpEndpoint)>,
    group: SocketAddr,
    dests: Vec<SocketAddr>,
    recv: RecvBatch,
}

impl Listener {
    fn new(o: &Options) -> Result<Listener, String> {
        let any: SocketAddr = if o.group.is_ipv4() {
            "0.0.0.0:0".parse()
        } else {
            "[::]:0".parse()
        }
        .map_err(|e| format!("{e}"))?;
        let bind = match o.interface {
            Some(ip) => SocketAddr::new(ip, 0),
            None => any,
        };
        let asker = UdpEndpoint::bind(bind, &SocketConfig::default())
            .map_err(|e| format!("cannot bind {bind}: {e}"))?;
        let mut dests = o.peer.clone();
        let loopback = if o.no_group || o.interface.is_some() || !o.group.is_ipv4() {
            None
        } else {
            Self::loopback_pair(o.group)
        };
        let member = if o.no_group {
            None
        } else {
            dests.push(o.group);
            let joined = asker
                .set_multicast(o.group.is_ipv4(), 1, o.interface)
                .map_err(|e| format!("cannot send to {}: {e}", o.group))
                .and_then(|()| {
                    UdpEndpoint::bind_group(o.group, o.interface, &SocketConfig::default()).map_err(
                        |e| {
                            format!(
                                "cannot join the discovery group {} ({e}); name bridges with \
                                 --peer, or --interface 127.0.0.1 for this host's",
                                o.group
                            )
                        },
                    )
                });
            match joined {
                Ok(member) => Some(member),
                // Loopback alone still hears this host's bridges.
                Err(e) if loopback.is_some() => {
                    eprintln!("llbus: {e}; listening on loopback only");
                    None
                }
                Err(e) => return Err(e),
            }
        };
        if dests.is_empty() {
            return Err("nothing to ask: give --peer, or drop --no-group".into());
        }
        Ok(Listener {
            asker,
            member,
            loopback,
            group: o.group,
            dests,
            recv: RecvBatch::new(32, DEFAULT_MAX_DATAGRAM),
        })
    }

    /// An asker sending to `group` by loopback and a member of it there, or `None` (said on
    /// stderr) where loopback carries no multicast.
    fn loopback_pair(group: SocketAddr) -> Option<(UdpEndpoint, UdpEndpoint)> {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let config = SocketConfig::default();
        let pair = UdpEndpoint::bind(SocketAddr::new(lo, 0), &config).and_then(|asker| {
            asker.set_multicast(true, 1, Some(lo))?;
            Ok((asker, UdpEndpoint::bind_group(group, Some(lo), &config)?))
        });
        match pair {
            Ok(pair) => Some(pair),
            Err(e) => {
                eprintln!("llbus: not listening on loopback too ({e})");
                None
            }
        }
    }

    /// Asks every destination for every topic.
    fn ask(&mut self) {
        let mut buf = [0u8; QUERY_LEN];
        let mut enc = BatchEncoder::new(&mut buf);
        let session = llbus_net::new_session_id();
        if enc.push_query(session, 0, QUERY_LEN - HEADER_LEN).is_err() {
            return;
        }
        for &dest in &self.dests {
            // A bridge that cannot be reached is simply not listed.
            let _ = self.asker.send_to(enc.as_bytes(), dest);
        }
        if let Some((asker, _)) = &mut self.loopback {
            let _ = asker.send_to(enc.as_bytes(), self.group);
        }
    }

    /// Listens for `period`, handing each datagram to `heard`.
    fn listen(&mut self, period: Duration, heard: &mut Heard) -> Result<(), String> {
        let until = Instant::now() + period;
        while Instant::now() < until {
            let mut got = 0;
            let loopback = self.loopback.iter_mut().flat_map(|(a, m)| [a, m]);
            for socket in std::iter::once(&mut self.asker)
                .chain(self.member.as_mut())
                .chain(loopback)
            {
                let n = socket
                    .recv_batch(&mut self.recv)
                    .map_err(|e| format!("receive failed: {e}"))?;
                for (bytes, src) in self.recv.iter().take(n) {
                    heard.on_datagram(bytes, src);
                }
                got += n;
            }
            if got == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }
}

/// `llbus topics`.
pub(crate) fn run(o: &Options) -> Result<(), String> {
    let mut listener = Listener::new(o)?;
    let period = Duration::from_millis(o.listen_ms.max(10));
    let mut printed = 0u64;
    loop {
        let mut heard = Heard::default();
        listener.ask();
        listener.listen(period, &mut heard)?;
        print!("{}", render(&heard, o.pattern.as_ref(), o.json));
        printed += 1;
        if !o.watch || o.count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
    }
}

/// A topic and who announces it.
struct Topic<'a> {
    name: &'a str,
    topic_id: u64,
    /// Announced as a service (by any of its publishers).
    service: bool,
    /// `(address, publisher, fingerprint, reliable, group)`.
    publishers: Vec<(SocketAddr, &'a Publisher, u64, bool, Option<SocketAddr>)>,
}

impl Topic<'_> {
    fn fingerprints(&self) -> Vec<u64> {
        let mut f: Vec<u64> = self.publishers.iter().map(|p| p.2).collect();
        f.sort_unstable();
        f.dedup();
        f
    }
}

/// A pattern as given on the command line, or why it is not one.
fn parse_pattern(s: &str) -> Result<TopicPattern, String> {
    TopicPattern::new(s).map_err(|e| e.to_string())
}

fn by_topic<'a>(heard: &'a Heard, pattern: Option<&TopicPattern>) -> Vec<Topic<'a>> {
    let mut topics: BTreeMap<(&str, u64), Topic<'_>> = BTreeMap::new();
    for (&addr, p) in &heard.publishers {
        for e in p.topics() {
            if pattern.is_some_and(|p| !p.matches(&e.name)) {
                continue;
            }
            let topic = topics
                .entry((e.name.as_str(), e.topic_id))
                .or_insert_with(|| Topic {
                    name: &e.name,
                    topic_id: e.topic_id,
                    service: false,
                    publishers: Vec::new(),
                });
            topic.service |= e.service;
            topic
                .publishers
                .push((addr, p, e.fingerprint, e.reliable, e.group));
        }
    }
    topics.into_values().collect()
}

fn render(heard: &Heard, pattern: Option<&TopicPattern>, json: bool) -> String {
    let topics = by_topic(heard, pattern);
    if json {
        let topics: Vec<serde_json::Value> = topics
            .iter()
            .map(|t| {
                let fingerprints = t.fingerprints();
                serde_json::json!({
                    "topic": t.name,
                    "service": t.service,
                    "topic_id": format!("{:#018x}", t.topic_id),
                    "fingerprints": fingerprints.iter().map(|f| format!("{f:#018x}")).collect::<Vec<_>>(),
                    "fingerprint_mismatch": fingerprints.len() > 1,
                    "publishers": t.publishers.iter().map(|(addr, p, fp, reliable, group)| serde_json::json!({
                        "address": addr.to_string(),
                        "session": format!("{:#018x}", p.session),
                        "uptime_ms": p.uptime_ms,
                        "fingerprint": format!("{fp:#018x}"),
                        "reliable": reliable,
                        "group": group.map(|g| g.to_string()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let value = serde_json::json!({
            "topics": topics,
            "malformed": heard.malformed,
            "sealed": heard.sealed,
            "not_listed": heard.over,
            "topics_not_listed": heard.topics_over,
        });
        return text::json(&value) + "\n";
    }
    let mut out = String::new();
    match pattern {
        Some(pattern) if topics.is_empty() => {
            let names: Vec<&str> = by_topic(heard, None).iter().map(|t| t.name).collect();
            if names.is_empty() {
                out.push_str("no topic announced\n");
            } else {
                out.push_str(&format!(
                    "none of the {} topics announced matches '{}'{}\n",
                    names.len(),
                    text::clean(pattern.as_str()),
                    crate::pattern::deeper_hint(pattern, &names),
                ));
            }
        }
        _ if topics.is_empty() => out.push_str("no topic announced\n"),
        _ => {}
    }
    for t in &topics {
        let fingerprints = t.fingerprints();
        let name = text::clean(t.name);
        if fingerprints.len() > 1 {
            out.push_str(&format!(
                "!! FINGERPRINT MISMATCH: topic '{name}' is announced with {} different \
                 fingerprints; subscribers of one are refused by the others\n",
                fingerprints.len()
            ));
        }
        out.push_str(&format!(
            "{name}{}  id {:#018x}  {}fingerprint {}\n",
            if t.service { "  SERVICE" } else { "" },
            t.topic_id,
            if t.service { "request " } else { "" },
            fingerprints
                .iter()
                .map(|f| format!("{f:#018x}"))
                .collect::<Vec<_>>()
                .join(" / ")
        ));
        for (addr, p, fp, reliable, group) in &t.publishers {
            out.push_str(&format!(
                "  {addr:<24} session {:#018x}  up {:>9.1} s  {}{}{}\n",
                p.session,
                p.uptime_ms as f64 / 1000.0,
                if *reliable { "reliable" } else { "best-effort" },
                group.map(|g| format!("  group {g}")).unwrap_or_default(),
                if fingerprints.len() > 1 {
                    format!("  fingerprint {fp:#018x}")
                } else {
                    String::new()
                },
            ));
        }
    }
    if heard.sealed > 0 {
        out.push_str(&format!(
            "({} sealed announcements not read: those bridges use a pre-shared key)\n",
            heard.sealed
        ));
    }
    if heard.malformed > 0 || heard.over > 0 {
        out.push_str(&format!(
            "({} malformed datagrams, {} publishers not listed)\n",
            heard.malformed, heard.over
        ));
    }
    if heard.topics_over > 0 {
        out.push_str(&format!(
            "({} topics not listed: over {MAX_TOPICS})\n",
            heard.topics_over
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use llbus_net::AnnounceHead;

    fn announce(session: u64, fp: u64, name: &str) -> Vec<u8> {
        announce_flagged(session, fp, name, llbus_net::ENTRY_RELIABLE)
    }

    fn announce_flagged(session: u64, fp: u64, name: &str, flags: u8) -> Vec<u8> {
        let mut buf = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut scratch = vec![0u8; DEFAULT_MAX_DATAGRAM];
        let mut enc = BatchEncoder::new(&mut buf);
        let head = AnnounceHead {
            session,
            seq: 1,
            timestamp_ns: 0,
            period_ms: 1000,
            uptime_ms: 1500,
            data: "0.0.0.0:7000".parse().unwrap(),
            group: None,
        };
        enc.push_announce(
            &head,
            0,
            1,
            [(1, fp, flags, name)].into_iter(),
            &mut scratch,
        )
        .unwrap();
        enc.as_bytes().to_vec()
    }

    #[test]
    fn lists_publishers_escapes_names_and_shouts_a_mismatch() {
        let mut heard = Heard::default();
        heard.on_datagram(
            &announce(0xa, 0xf1, "md.\u{1b}[2Jquote"),
            "10.0.0.1:1".parse().unwrap(),
        );
        heard.on_datagram(
            &announce(0xb, 0xf2, "md.\u{1b}[2Jquote"),
            "10.0.0.2:1".parse().unwrap(),
        );
        heard.on_datagram(b"garbage", "10.0.0.3:1".parse().unwrap());
        let table = render(&heard, None, false);
        assert!(table.contains("FINGERPRINT MISMATCH"), "{table}");
        assert!(table.contains("10.0.0.1:7000") && table.contains("10.0.0.2:7000"));
        assert!(!table.contains('\u{1b}'), "{table}");
        assert!(table.contains("md.\\x1b[2Jquote"));
        assert!(table.contains("1 malformed"));
        let json: serde_json::Value = serde_json::from_str(&render(&heard, None, true)).unwrap();
        assert_eq!(json["topics"][0]["fingerprint_mismatch"], true);
        assert_eq!(json["topics"][0]["publishers"].as_array().unwrap().len(), 2);
        assert!(!render(&heard, None, true).contains('\u{1b}'));
    }

    #[test]
    fn a_service_is_listed_as_one() {
        let mut heard = Heard::default();
        let service = llbus_net::ENTRY_SERVICE;
        heard.on_datagram(
            &announce_flagged(0xa, 0xf1, "demo.risk", service),
            "10.0.0.1:1".parse().unwrap(),
        );
        heard.on_datagram(
            &announce(0xb, 0xf2, "md.quote"),
            "10.0.0.2:1".parse().unwrap(),
        );
        let table = render(&heard, None, false);
        assert!(
            table.contains("demo.risk  SERVICE  id ")
                && table.contains("request fingerprint 0x00000000000000f1"),
            "{table}"
        );
        assert!(table.contains("md.quote  id "), "{table}");
        let json: serde_json::Value = serde_json::from_str(&render(&heard, None, true)).unwrap();
        let service_of = |name: &str| {
            let topics = json["topics"].as_array().unwrap();
            let t = topics.iter().find(|t| t["topic"] == name).unwrap();
            t["service"].as_bool().unwrap()
        };
        assert!(service_of("demo.risk") && !service_of("md.quote"));
    }

    #[test]
    fn a_pattern_lists_only_the_topics_it_matches() {
        let mut heard = Heard::default();
        for (i, name) in [
            "md.quote.nyse",
            "md.quote.nasdaq",
            "md.trade.nyse",
            "ops.health",
        ]
        .iter()
        .enumerate()
        {
            let from = format!("10.0.0.{}:1", i + 1).parse().unwrap();
            heard.on_datagram(&announce(i as u64 + 1, 0xf1, name), from);
        }
        let list = |p: &str| {
            let pattern = TopicPattern::new(p).unwrap();
            let json: serde_json::Value =
                serde_json::from_str(&render(&heard, Some(&pattern), true)).unwrap();
            let mut names: Vec<String> = json["topics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["topic"].as_str().unwrap().to_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(list("md.quote.*"), ["md.quote.nasdaq", "md.quote.nyse"]);
        assert_eq!(list("md.**").len(), 3);
        assert_eq!(list("*.*.nyse"), ["md.quote.nyse", "md.trade.nyse"]);
        assert!(list("md").is_empty());
        // A '*' that stops short of every name says that '**' goes deeper.
        let text = render(&heard, Some(&TopicPattern::new("md.*").unwrap()), false);
        assert!(
            text.contains("none of the 4 topics announced matches 'md.*'")
                && text.contains("'md.**' matches deeper names"),
            "{text}"
        );
        assert!(parse_pattern("robot*").is_err());
    }
}
