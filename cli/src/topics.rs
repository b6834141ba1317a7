//! `llbus topics`: what bridges announce on the network (discovery, `docs/PROTOCOL.md`,
//! "Discovery"). It joins the discovery group (with no `--interface`, on every interface that
//! carries multicast and on loopback, since a bridge announces on the interface of its bound
//! address), asks every bridge for its topics (one `Query`, padded, to the group and the peers
//! given), listens for a while, and lists each topic with
//! its fingerprint and publishers (address, session, uptime, reliable, data group). Publishers
//! of one topic that announce different fingerprints are reported loudly: their subscribers
//! would be refused. A served service is announced as an entry flagged a service (its
//! fingerprint `Request<Req>`'s), and listed as one: `llbus call` calls it.
//!
//! [`find`] is the same listener for the commands given `--topic` without `--publisher`
//! (`hz`, `spy`, `echo`, `record`): the publishers that announce the topic.
//!
//! Everything printed comes from the network, so names are escaped (`text`), and what the
//! listener keeps is bounded (at most [`MAX_PUBLISHERS`] publishers, each with what one
//! announcement cycle names, a datagram per part, and at most [`MAX_TOPICS`] topics in all).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use llbus::TopicPattern;
use llbus_net::{
    parse_datagram, Announce, FrameMac, Kind, RecvBatch, SocketConfig, UdpEndpoint,
    DEFAULT_MAX_DATAGRAM, MAC_TAG_LEN, QUERY_LEN,
};

use crate::{pattern, text};

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
    /// (`127.0.0.1` for loopback); default, for an IPv4 group: every interface that is up and
    /// carries multicast, and loopback (where bridges bound to this host's loopback address
    /// announce), so that every bridge of this host and its links is heard whichever
    /// interface it announces on.
    #[arg(long)]
    interface: Option<IpAddr>,
    /// The bridges' pre-shared key (a file of 64 hex digits or 32 bytes): the query is
    /// sealed with it and their sealed announcements opened.
    #[arg(long)]
    psk_file: Option<std::path::PathBuf>,
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
    fn on_datagram(&mut self, bytes: &[u8], src: SocketAddr, mac: Option<&FrameMac>) {
        let parsed = match mac {
            Some(mac) => mac.open(bytes, DEFAULT_MAX_DATAGRAM + MAC_TAG_LEN),
            None => parse_datagram(bytes, DEFAULT_MAX_DATAGRAM),
        };
        let frames = match parsed {
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

/// Sockets: per interface asked on, one to ask from (answers come back to it) and one in the
/// group; with `--no-group`, one asker for the peers alone.
struct Listener {
    /// The first asker also asks the peers.
    pairs: Vec<(UdpEndpoint, Option<UdpEndpoint>)>,
    /// The group, unless `--no-group`.
    group: Option<SocketAddr>,
    peers: Vec<SocketAddr>,
    /// With the bridges' pre-shared key: queries sealed, announcements opened.
    mac: Option<FrameMac>,
    recv: RecvBatch,
}

/// Where a discovery listener asks and listens.
struct Where<'a> {
    group: SocketAddr,
    no_group: bool,
    peers: &'a [SocketAddr],
    interface: Option<IpAddr>,
    psk: Option<[u8; 32]>,
}

impl Listener {
    fn new(w: &Where<'_>) -> Result<Listener, String> {
        let v4 = w.group.is_ipv4();
        let any = if v4 {
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
        } else {
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
        };
        let config = SocketConfig::default();
        let mut pairs = Vec::new();
        if w.no_group {
            let bind = w.interface.map_or(any, |ip| SocketAddr::new(ip, 0));
            let asker =
                UdpEndpoint::bind(bind, &config).map_err(|e| format!("cannot bind {bind}: {e}"))?;
            pairs.push((asker, None));
        } else {
            // Every interface a bridge may announce on (a bridge joins the group on its bound
            // address's interface, or the system's choice): with no --interface, each
            // multicast-capable one and loopback.
            let interfaces: Vec<Option<IpAddr>> = match w.interface {
                Some(ip) => vec![Some(ip)],
                None if v4 => llbus_net::multicast_v4_interfaces()
                    .into_iter()
                    .map(|ip| Some(IpAddr::V4(ip)))
                    .collect(),
                None => Vec::new(),
            };
            let mut failed = Vec::new();
            for interface in &interfaces {
                match Self::pair(w.group, *interface, &config) {
                    Ok(pair) => pairs.push(pair),
                    Err(e) => failed.push(e),
                }
            }
            if pairs.is_empty() {
                // The system's choice, as a bridge bound to an unspecified address does.
                match Self::pair(w.group, w.interface, &config) {
                    Ok(pair) => pairs.push(pair),
                    Err(e) => {
                        failed.push(e);
                        return Err(format!(
                            "cannot join the discovery group {} ({}); name bridges with --peer",
                            w.group,
                            failed.join("; ")
                        ));
                    }
                }
            } else if w.interface.is_none() {
                for e in failed {
                    eprintln!("llbus: not listening there: {e}");
                }
            }
        }
        if w.no_group && w.peers.is_empty() {
            return Err("nothing to ask: give --peer, or drop --no-group".into());
        }
        Ok(Listener {
            pairs,
            group: (!w.no_group).then_some(w.group),
            peers: w.peers.to_vec(),
            mac: w.psk.map(|key| FrameMac::new(&key).control_only()),
            recv: RecvBatch::new(32, DEFAULT_MAX_DATAGRAM + MAC_TAG_LEN),
        })
    }

    /// An asker sending to `group` by `interface` (`None`: the system's choice) and a member
    /// of the group there.
    fn pair(
        group: SocketAddr,
        interface: Option<IpAddr>,
        config: &SocketConfig,
    ) -> Result<(UdpEndpoint, Option<UdpEndpoint>), String> {
        let bind = match interface {
            Some(ip) => SocketAddr::new(ip, 0),
            None if group.is_ipv4() => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            None => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        };
        let on = interface.map_or("the system's choice".to_owned(), |i| i.to_string());
        let asker =
            UdpEndpoint::bind(bind, config).map_err(|e| format!("cannot bind {bind}: {e}"))?;
        asker
            .set_multicast(group.is_ipv4(), 1, interface)
            .map_err(|e| format!("cannot send to {group} on {on}: {e}"))?;
        let member = UdpEndpoint::bind_group(group, interface, config)
            .map_err(|e| format!("cannot join {group} on {on}: {e}"))?;
        Ok((asker, Some(member)))
    }

    /// Asks every destination for every topic.
    fn ask(&mut self) {
        let Ok(query) = pattern::sealed_query(QUERY_LEN, self.mac.as_ref()) else {
            return;
        };
        // A bridge that cannot be reached is simply not listed.
        if let Some((asker, _)) = self.pairs.first_mut() {
            for &peer in &self.peers {
                let _ = asker.send_to(&query, peer);
            }
        }
        if let Some(group) = self.group {
            for (asker, _) in &mut self.pairs {
                let _ = asker.send_to(&query, group);
            }
        }
    }

    /// Listens for `period`, handing each datagram to `heard`.
    fn listen(&mut self, period: Duration, heard: &mut Heard) -> Result<(), String> {
        let until = Instant::now() + period;
        while Instant::now() < until {
            let mut got = 0;
            for socket in self
                .pairs
                .iter_mut()
                .flat_map(|(asker, member)| std::iter::once(asker).chain(member.as_mut()))
            {
                let n = socket
                    .recv_batch(&mut self.recv)
                    .map_err(|e| format!("receive failed: {e}"))?;
                for (bytes, src) in self.recv.iter().take(n) {
                    heard.on_datagram(bytes, src, self.mac.as_ref());
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

/// Where a command given `--topic` and no `--publisher` looks for its publishers
/// (discovery, as `llbus topics` does).
#[derive(Debug, clap::Args)]
pub(crate) struct Lookup {
    /// With no --publisher: the discovery group where the topic's publishers are looked for
    /// (as `llbus topics --group`).
    #[arg(long, default_value_t = llbus_net::DEFAULT_DISCOVERY_GROUP)]
    group: SocketAddr,
    /// With no --publisher: the interface to look on, by one of its IPv4 addresses; default:
    /// every multicast-capable interface and loopback (as `llbus topics`).
    #[arg(long)]
    interface: Option<IpAddr>,
}

/// A topic a publisher announces.
#[derive(Clone, Debug)]
pub(crate) struct Announced {
    /// The topic's name (from the network: escape it before printing).
    pub(crate) name: String,
    /// The publisher's bridge address (where it takes subscriptions).
    pub(crate) publisher: SocketAddr,
    /// Announced as a reliable export.
    pub(crate) reliable: bool,
}

/// How often `find` asks the bridges again (a bridge answers a source at most 5 times a
/// second).
const FIND_ASK_EVERY: Duration = Duration::from_millis(500);
/// How long `find` listens on, once one publisher is heard, for the others.
const FIND_SETTLE: Duration = Duration::from_millis(400);

/// The topics (not services) whose names `wanted` takes, announced on `lookup`'s group,
/// with their publishers, in address order: asked, then listened for until one is heard
/// (and [`FIND_SETTLE`] more, for the others) or `timeout` passes. `psk`: the bridges' key.
///
/// # Errors
/// No socket, or nothing wanted announced within `timeout`.
pub(crate) fn find(
    lookup: &Lookup,
    psk: Option<[u8; 32]>,
    what: &str,
    wanted: &dyn Fn(&str) -> bool,
    timeout: Duration,
) -> Result<Vec<Announced>, String> {
    let mut listener = Listener::new(&Where {
        group: lookup.group,
        no_group: false,
        peers: &[],
        interface: lookup.interface,
        psk,
    })?;
    let mut heard = Heard::default();
    let started = Instant::now();
    let mut found_at: Option<Instant> = None;
    let mut found = Vec::new();
    while started.elapsed() < timeout && found_at.is_none_or(|t| t.elapsed() < FIND_SETTLE) {
        listener.ask();
        listener.listen(FIND_ASK_EVERY.min(timeout), &mut heard)?;
        found = heard
            .publishers
            .iter()
            .flat_map(|(&publisher, p)| {
                p.topics()
                    .filter(|e| !e.service && wanted(&e.name))
                    .map(move |e| Announced {
                        name: e.name.clone(),
                        publisher,
                        reliable: e.reliable,
                    })
            })
            .collect();
        if !found.is_empty() {
            found_at.get_or_insert_with(Instant::now);
        }
    }
    if found.is_empty() {
        return Err(format!(
            "no publisher of {what} announced on the discovery group {} within {timeout:?}: is              it running with discovery on (Bridge::announce; the publisher example's              --announce), on this group?{} Or name it with --publisher ADDR",
            lookup.group,
            if heard.sealed > 0 && psk.is_none() {
                format!(
                    " ({} sealed announcements heard: give the bridges' key with --psk-file)",
                    heard.sealed
                )
            } else {
                String::new()
            }
        ));
    }
    Ok(found)
}

/// `llbus topics`.
pub(crate) fn run(o: &Options) -> Result<(), String> {
    let mut listener = Listener::new(&Where {
        group: o.group,
        no_group: o.no_group,
        peers: &o.peer,
        interface: o.interface,
        psk: o
            .psk_file
            .as_deref()
            .map(crate::remote::read_psk)
            .transpose()?,
    })?;
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
    use llbus_net::{AnnounceHead, BatchEncoder};

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
            None,
        );
        heard.on_datagram(
            &announce(0xb, 0xf2, "md.\u{1b}[2Jquote"),
            "10.0.0.2:1".parse().unwrap(),
            None,
        );
        heard.on_datagram(b"garbage", "10.0.0.3:1".parse().unwrap(), None);
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
            None,
        );
        heard.on_datagram(
            &announce(0xb, 0xf2, "md.quote"),
            "10.0.0.2:1".parse().unwrap(),
            None,
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
            heard.on_datagram(&announce(i as u64 + 1, 0xf1, name), from, None);
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
