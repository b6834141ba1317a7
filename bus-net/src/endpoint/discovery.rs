//! Discovery: announcing this endpoint's exports, and importing a topic from whichever
//! publishers announce it (`docs/PROTOCOL.md`, "Discovery"), in the manner of DDS's SPDP and
//! Zenoh's scouting.
//!
//! Inputs: `Announce` and `Query` frames, each with its datagram's facts ([`Incoming`]: from
//! [`Endpoint::handle`] or, heard on the discovery group, [`Endpoint::handle_group`]), and the
//! timer ([`Endpoint::on_timer`]). Outputs: announcements to the discovery group and unicast
//! peers (at the first timer, then every period), queries for the topics with no publisher
//! yet, an answer to a query (to the asker alone, never larger than its query, rate-limited
//! per source), and imports added to and removed from the subscriber side at run time, with an
//! [`Event`] for each. It reads the publisher side's exports and the served services (what it
//! announces: a service flagged as one, and never imported from an announcement) and the
//! subscriber side's imports (whether a followed publisher answers).
//!
//! An announcement only proposes. Acting on one adds an import, whose subscription is made
//! by the ordinary handshake: the publisher must answer the cookie challenge at the announced
//! address, and data is accepted only from that address with the subscription's token (or the
//! pre-shared key's seal). So a forged announcement can make the endpoint try a
//! subscription, and nothing more: it cannot move an established import elsewhere (an import
//! is keyed by its publisher's address, and a new address is a new import) nor feed one. Tries
//! are bounded: an announcement may only name its sender's own IP address, at most
//! `max_publishers` are followed per topic and `max_tries` tried at once, a try not
//! established within `try_timeout` is given up and its address left alone as long, and
//! everything is kept in tables of fixed capacity: a flood grows neither memory nor traffic.

use std::net::SocketAddr;
use std::sync::Arc;

use super::common::Common;
use super::event::{Event, EVENT_QUEUE};
use super::publisher::PublisherSide;
use super::subscriber::SubscriberSide;
#[cfg(doc)]
use super::Endpoint;
use super::{Incoming, Via, Wire};
use crate::session::is_answerable;
use crate::{
    entry_len, Announce, AnnounceHead, AnnouncedTopic, BatchEncoder, DiscoveryConfig, DropReason,
    Frame, ImportSpec, ImportState, Query, RateLimiter, ANNOUNCE_FIXED_LEN, ENTRY_RELIABLE,
    ENTRY_SERVICE, HEADER_LEN, MAX_ANNOUNCED_NAME, QUERY_LEN,
};

/// Addresses given up on that an endpoint remembers at once (the oldest forgotten first).
const COOLDOWN: usize = 64;
/// Missed announcement periods after which a publisher is forgotten.
const MISSED: u64 = 3;
/// The shortest time between two announcements brought forward by queries heard on the
/// discovery group (ns).
const EARLY_GAP: u64 = 1_000_000_000;
/// The shortest and longest announcement periods believed (ms): a sender cannot make its
/// entry last forever, nor expire at once.
const PERIOD_MS: (u64, u64) = (100, 3_600_000);

/// A topic imported from whichever publishers announce it.
#[derive(Clone, Debug)]
pub struct DiscoverSpec {
    /// The topic's name (for logs and reports).
    pub topic: Arc<str>,
    /// The topic id.
    pub topic_id: u64,
    /// The schema fingerprint a publisher must announce (and match at subscription).
    pub fingerprint: u64,
    /// Imported reliably (in order, gaps NAKed).
    pub reliable: bool,
    /// Where its messages go: the index [`Sink::deliver`](super::Sink::deliver) is given for
    /// every publisher's.
    pub port: usize,
}

/// Topics imported by pattern (a bridge's `discover_matching`): announced names the pattern
/// matches are counted when they cannot be imported (another fingerprint, or no local
/// subscriber: the names subscribed to locally are the exact [`DiscoverSpec`]s).
#[derive(Clone, Debug)]
pub struct DiscoverPattern {
    /// The pattern.
    pub pattern: llbus::TopicPattern,
    /// The schema fingerprint of its type.
    pub fingerprint: u64,
}

/// Mismatched names no local subscriber takes reported at most (as [`Event::Mismatched`]; the
/// rest are counted). The wanted topics' mismatches are reported apart, once each, so that
/// names anyone can announce cannot use up the reports of the topics subscribed to.
const MISMATCH_REPORTS: usize = 64;

/// What discovery did, counted since the endpoint was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryCounts {
    /// Announcement datagrams sent (every part to every destination).
    pub announcements_sent: u64,
    /// Announcements received from other endpoints.
    pub announcements_in: u64,
    /// Queries answered.
    pub queries_answered: u64,
    /// Publishers followed (imports added).
    pub found: u64,
    /// Established publishers forgotten after missed announcements (imports removed).
    pub lost: u64,
    /// Tries given up: refused, not established in time, or forgotten (missed
    /// announcements) before they were established.
    pub given_up: u64,
    /// Publishers announced and not tried: over a cap, or given up on recently.
    pub ignored: u64,
    /// Announcements of a discovered topic, or of a name a discovered pattern matches, with
    /// another fingerprint (not tried; the first of each topic is reported as
    /// [`Event::Mismatched`]).
    pub mismatched: u64,
    /// Announced names that a discovered pattern matches, with its fingerprint, that no local
    /// subscriber takes (not tried).
    pub unsubscribed: u64,
    /// Exports the latest announcement left out: a name longer than an announcement carries,
    /// or past the 255 parts one announcement can have. Such topics are still served to
    /// subscribers that name the publisher.
    pub unannounced: u64,
}

/// A publisher being followed.
#[derive(Clone, Copy, Debug)]
struct Found {
    /// Which of the discovered topics.
    want: usize,
    /// Its data address.
    data: SocketAddr,
    /// The session it last announced.
    session: u64,
    /// The import following it.
    import: usize,
    /// When it is forgotten unless it announces again.
    expires: u64,
    /// How long (ns) an announcement keeps it followed: three of the period it was first
    /// followed with, which a later announcement (forged, perhaps) cannot shorten.
    keep: u64,
    /// When the subscription was tried, or last stopped being established.
    tried: u64,
    /// Whether the subscription is established.
    established: bool,
}

/// The discovery part of an endpoint (see the module docs).
pub(crate) struct Discovery {
    config: DiscoveryConfig,
    /// The data address announced (an unspecified IP: the datagram's source).
    local: SocketAddr,
    wants: Vec<DiscoverSpec>,
    patterns: Vec<DiscoverPattern>,
    /// The ids of the names, wanted by no topic of `wants`, reported as mismatched (at most
    /// [`MISMATCH_REPORTS`]).
    reported: Vec<u64>,
    /// Whether each of `wants` was reported as mismatched (same length as `wants`).
    wants_reported: Vec<bool>,
    /// Invariant: at most `wants.len() * max_publishers` entries (its capacity).
    found: Vec<Found>,
    /// `(address, topic, until)`: tries given up, not made again before `until`.
    cooldown: Vec<(SocketAddr, u64, u64)>,
    limiter: RateLimiter,
    /// Announcements sent in this session.
    seq: u64,
    start: Option<u64>,
    next_announce: u64,
    /// When an announcement brought forward by a query on the group is due (`u64::MAX`:
    /// none), and when the last one was.
    early: u64,
    last_early: u64,
    /// Each part of an announcement: its group, and where it starts and ends in that group's
    /// entries (reused).
    parts: Vec<(Option<SocketAddr>, usize, usize)>,
    /// An announcement's payload being built.
    scratch: Vec<u8>,
    counts: DiscoveryCounts,
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What an endpoint offers, and announces: its exports, its direct topics and the services it
/// serves.
#[derive(Clone, Copy)]
pub(crate) struct Offered<'a> {
    pub(crate) exports: &'a [super::export::ExportState],
    pub(crate) directs: &'a [super::DirectTopic],
    pub(crate) services: &'a [super::ServiceSpec],
}

impl<'a> Offered<'a> {
    /// What `publisher` exports and `services` serves.
    pub(crate) fn new(publisher: &'a PublisherSide, services: &'a [super::ServiceSpec]) -> Self {
        Offered {
            exports: &publisher.exports,
            directs: &publisher.directs,
            services,
        }
    }
}

/// An announcement's entry: `(topic id, fingerprint, flags, name)`.
type Entry<'a> = (u64, u64, u8, &'a str);

/// The entries an endpoint announces: its exports, then its direct topics and its services,
/// with names short enough.
fn entries(offered: Offered<'_>) -> impl Iterator<Item = Entry<'_>> + Clone + '_ {
    entries_in(offered, None).chain(
        groups(offered.exports)
            .skip(1)
            .flat_map(move |g| entries_in(offered, g)),
    )
}

/// The entries whose data goes to `group` (`None`: unicast only, the direct topics and the
/// services too). A service is flagged [`ENTRY_SERVICE`], with `Request<Req>`'s fingerprint:
/// what a caller subscribes with.
fn entries_in(
    offered: Offered<'_>,
    group: Option<SocketAddr>,
) -> impl Iterator<Item = Entry<'_>> + Clone + '_ {
    let exports = (offered.exports.iter())
        .filter(move |e| e.spec.group == group)
        .map(|e| {
            let flags = if e.spec.reliable { ENTRY_RELIABLE } else { 0 };
            (e.spec.topic_id, e.spec.fingerprint, flags, &*e.spec.topic)
        });
    let directs = (offered.directs.iter())
        .filter(move |_| group.is_none())
        .map(|d| (d.topic_id, d.fingerprint, 0, &*d.topic));
    let services = (offered.services.iter())
        .filter(move |_| group.is_none())
        .map(|s| {
            (
                s.topic_id,
                s.request_fingerprint,
                ENTRY_SERVICE,
                &*s.service,
            )
        });
    exports
        .chain(directs)
        .chain(services)
        .filter(|e| e.3.len() <= MAX_ANNOUNCED_NAME)
}

/// The groups the exports' data goes to, in the order announced: `None` (unicast only) first,
/// then each multicast group once, in the order of the first export sending to it. An
/// announcement part carries the topics of one of them, since its head names one group.
fn groups(
    exports: &[super::export::ExportState],
) -> impl Iterator<Item = Option<SocketAddr>> + Clone + '_ {
    let distinct = exports.iter().enumerate().filter_map(move |(i, e)| {
        let g = e.spec.group?;
        let seen = exports.get(..i)?.iter().any(|p| p.spec.group == Some(g));
        (!seen).then_some(Some(g))
    });
    std::iter::once(None).chain(distinct)
}

/// Whether `data` is this endpoint's own data address `local` (bound to an unspecified IP:
/// the same port on a loopback address). A Subscribe carrying this endpoint's own session is
/// refused too, for the addresses of its other interfaces.
fn is_own(local: SocketAddr, data: SocketAddr) -> bool {
    let (local, data) = (
        crate::session::canonical(local),
        crate::session::canonical(data),
    );
    data.port() == local.port()
        && (data.ip() == local.ip() || (local.ip().is_unspecified() && data.ip().is_loopback()))
}

impl Discovery {
    /// Discovery announcing the exports (data address `local`; an unspecified IP means the
    /// announcements' source) as `config` says and importing each topic of `wants` from
    /// whichever publishers announce it; queries answered within a rate limit over
    /// `rate_limit_sources` sources, announcements built in datagrams of `max_datagram`
    /// bytes. Allocates its tables now.
    pub(crate) fn new(
        config: &DiscoveryConfig,
        local: SocketAddr,
        wants: Vec<DiscoverSpec>,
        rate_limit_sources: usize,
        max_datagram: usize,
    ) -> Self {
        let followed = wants.len().saturating_mul(config.max_publishers);
        Discovery {
            config: config.clone(),
            local,
            wants_reported: vec![false; wants.len()],
            wants,
            patterns: Vec::new(),
            reported: Vec::with_capacity(MISMATCH_REPORTS),
            found: Vec::with_capacity(followed),
            cooldown: Vec::with_capacity(COOLDOWN),
            limiter: RateLimiter::new(config.query_limit, rate_limit_sources),
            seq: 0,
            start: None,
            next_announce: 0,
            early: u64::MAX,
            last_early: 0,
            parts: Vec::new(),
            scratch: vec![0; max_datagram],
            counts: DiscoveryCounts::default(),
        }
    }

    /// Counts, and reports, what announced names `patterns` match and cannot be imported.
    pub(crate) fn set_patterns(&mut self, patterns: Vec<DiscoverPattern>) {
        self.patterns = patterns;
    }

    /// What discovery did.
    pub(crate) fn counts(&self) -> DiscoveryCounts {
        self.counts
    }

    /// The publishers followed: `(topic, data address, session, import)`; the session is the
    /// one the import follows once established (the announced one before).
    pub(crate) fn discovered<'a>(
        &'a self,
        subscriber: &'a SubscriberSide,
    ) -> impl Iterator<Item = (&'a Arc<str>, SocketAddr, u64, usize)> + 'a {
        self.found.iter().filter_map(move |f| {
            let want = self.wants.get(f.want)?;
            let session = match subscriber.import_state(f.import) {
                Some(ImportState::Established { session, .. }) => session,
                _ => f.session,
            };
            Some((&want.topic, f.data, session, f.import))
        })
    }

    /// When discovery next has something to do; `housekeeping`: when the endpoint's next
    /// housekeeping is (tries and expiries are checked at that rate at least).
    pub(crate) fn deadline(&self, housekeeping: u64) -> u64 {
        let next = self.next_announce.min(self.early);
        if self.found.is_empty() {
            next
        } else {
            next.min(housekeeping)
        }
    }

    /// An announcement from the datagram's source: follows each publisher of a discovered
    /// topic it names, within the caps, by adding an import to `subscriber`.
    pub(crate) fn on_announce(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        subscriber: &mut SubscriberSide,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (src, now_ns) = (incoming.src, incoming.now_ns);
        let announce = Announce::from_frame(frame)?;
        if announce.session == common.session {
            return Ok(()); // Our own, looped back by the group.
        }
        if !common.config.allow.contains(src.ip()) {
            return Err(DropReason::NotAllowed);
        }
        let data = announce.data_from(src).ok_or(DropReason::BadSource)?;
        if !is_answerable(data) || is_own(self.local, data) {
            // Following ourselves would feed our bus a second copy of what it publishes.
            return Err(DropReason::BadSource);
        }
        self.counts.announcements_in += 1;
        let period = u64::from(announce.period_ms).clamp(PERIOD_MS.0, PERIOD_MS.1);
        let keep = MISSED * period * 1_000_000;
        let expires = now_ns.saturating_add(keep);
        for topic in announce.topics() {
            if topic.service {
                // A service is called, not imported: its entry is for tools (`llbus topics`).
                continue;
            }
            if !self.wants.iter().any(|w| w.topic_id == topic.topic_id) {
                self.unwanted(&topic, data, common);
                continue;
            }
            for want in 0..self.wants.len() {
                let Some(spec) = self
                    .wants
                    .get(want)
                    .filter(|w| w.topic_id == topic.topic_id)
                else {
                    continue;
                };
                if let Some(f) = self
                    .found
                    .iter_mut()
                    .find(|f| f.want == want && f.data == data)
                {
                    // Known: still there (a new session is a restart, which the import's
                    // machine follows by itself). Its expiry only ever moves later, by the
                    // period it was first followed with: an announcement claiming a shorter
                    // period cannot make it expire early.
                    f.expires = f.expires.max(now_ns.saturating_add(f.keep));
                    f.session = announce.session;
                    continue;
                }
                if topic.fingerprint != spec.fingerprint {
                    self.counts.mismatched += 1;
                    if !std::mem::replace(&mut self.wants_reported[want], true) {
                        common.push_event(Event::Mismatched {
                            topic: Arc::clone(&spec.topic),
                            topic_id: topic.topic_id,
                            publisher: data,
                            fingerprint: topic.fingerprint,
                        });
                    }
                    continue;
                }
                let cooling = self
                    .cooldown
                    .iter()
                    .any(|&(a, t, until)| a == data && t == spec.topic_id && now_ns < until);
                let followed = self.found.iter().filter(|f| f.want == want).count();
                let trying = self.found.iter().filter(|f| !f.established).count();
                if cooling
                    || followed >= self.config.max_publishers
                    || trying >= self.config.max_tries
                    || self.found.len() == self.found.capacity()
                {
                    self.counts.ignored += 1;
                    continue;
                }
                let import = subscriber.add_import(
                    ImportSpec {
                        topic: spec.topic.clone(),
                        topic_id: spec.topic_id,
                        fingerprint: spec.fingerprint,
                        publisher: data,
                        reliable: spec.reliable,
                    },
                    spec.port,
                    common,
                );
                self.found.push(Found {
                    want,
                    data,
                    session: announce.session,
                    import,
                    expires,
                    keep,
                    tried: now_ns,
                    established: false,
                });
                self.counts.found += 1;
                common.push_event(Event::Discovered {
                    import,
                    topic_id: spec.topic_id,
                    publisher: data,
                    session: announce.session,
                });
            }
        }
        Ok(())
    }

    /// An announced topic no want names: counted if a pattern matches its name (which must
    /// be the name of its id: anything else is not a topic this endpoint could import).
    fn unwanted(&mut self, topic: &AnnouncedTopic<'_>, data: SocketAddr, common: &mut Common) {
        if self.patterns.is_empty() {
            return;
        }
        let Ok(name) = std::str::from_utf8(topic.name) else {
            return;
        };
        let mut matching = self.patterns.iter().filter(|p| p.pattern.matches(name));
        let Some(first) = matching.next() else {
            return;
        };
        if llbus::topic_id(name) != topic.topic_id {
            return;
        }
        // Mismatched only if no pattern that matches it is of its type.
        let of_its_type = |p: &DiscoverPattern| p.fingerprint == topic.fingerprint;
        if of_its_type(first) || matching.any(of_its_type) {
            self.counts.unsubscribed += 1;
        } else {
            let fingerprint = topic.fingerprint;
            self.mismatched(name, topic.topic_id, fingerprint, data, common);
        }
    }

    /// A publisher announces `topic`, a name no local subscriber takes, with another
    /// `fingerprint` than the local type's: counted, and reported the first time for each
    /// topic (within [`MISMATCH_REPORTS`]), and only while the event queue is at most half
    /// full: names anyone may announce never push out the driver's other events (a group to
    /// join, an import refused).
    fn mismatched(
        &mut self,
        topic: &str,
        topic_id: u64,
        fingerprint: u64,
        publisher: SocketAddr,
        common: &mut Common,
    ) {
        self.counts.mismatched += 1;
        if self.reported.contains(&topic_id)
            || self.reported.len() == MISMATCH_REPORTS
            || common.events.len() >= EVENT_QUEUE / 2
        {
            return;
        }
        self.reported.push(topic_id);
        common.push_event(Event::Mismatched {
            topic: Arc::from(topic),
            topic_id,
            publisher,
            fingerprint,
        });
    }

    /// A query from the datagram's source: answered, to it alone, with one announcement of
    /// the topics it asks for that fit in `budget` bytes (the query datagram's length if the
    /// query is alone in it, else 0; spent, so that one datagram is answered once), at most as
    /// often as the per-source limit allows. A query heard on the discovery group is not
    /// answered: it brings the next announcement to the group forward.
    pub(crate) fn on_query(
        &mut self,
        frame: &Frame<'_>,
        incoming: &Incoming,
        budget: &mut usize,
        offered: Offered<'_>,
        wire: &mut dyn Wire,
        common: &mut Common,
    ) -> Result<(), DropReason> {
        let (src, now_ns) = (incoming.src, incoming.now_ns);
        let query = Query::from_frame(frame)?;
        let room = std::mem::take(budget)
            .saturating_sub(common.egress.trailer_len())
            .min(common.control_room());
        if query.session == common.session {
            return Ok(());
        }
        if !common.config.allow.contains(src.ip()) {
            return Err(DropReason::NotAllowed);
        }
        if incoming.via == Via::DiscoveryGroup {
            // Every member of the group hears a query sent to it: answering would send its
            // source one answer per member. The group is served by an announcement to the
            // group instead, brought forward (at most once per `EARLY_GAP`).
            if now_ns >= self.last_early.saturating_add(EARLY_GAP) || self.last_early == 0 {
                self.early = self.early.min(now_ns);
            }
            return Ok(());
        }
        if room == 0 {
            return Ok(()); // Not alone in its datagram.
        }
        if !self.limiter.allow(src.ip(), now_ns) {
            return Err(DropReason::RateLimited);
        }
        // As many of the topics asked for as fit the query's size.
        let mut fit = room.saturating_sub(HEADER_LEN + ANNOUNCE_FIXED_LEN);
        let wanted = move |e: &Entry<'_>| query.topic_id == 0 || e.0 == query.topic_id;
        // One part: the topics asked for of one group (the first that has any), since its
        // head names one group.
        let Some(group) =
            groups(offered.exports).find(|&g| entries_in(offered, g).any(|e| wanted(&e)))
        else {
            return Ok(());
        };
        let n = entries_in(offered, group)
            .filter(wanted)
            .take_while(|e| match fit.checked_sub(entry_len(e.3)) {
                Some(left) => {
                    fit = left;
                    true
                }
                None => false,
            })
            .count();
        if n == 0 || room < HEADER_LEN + ANNOUNCE_FIXED_LEN {
            return Ok(());
        }
        let head = self.announce_head(now_ns, group, common);
        let asked = entries_in(offered, group).filter(wanted).take(n);
        let mut enc = BatchEncoder::new(common.control_buf.get_mut(..room).unwrap_or_default());
        if enc
            .push_announce(&head, 0, 1, asked, &mut self.scratch)
            .is_err()
        {
            return Ok(()); // Cannot happen: only what fits was taken.
        }
        let (datagrams, bytes) =
            common
                .egress
                .send(wire, enc.as_bytes(), false, std::iter::once((src, 0)));
        common.metrics.sent(datagrams, bytes);
        self.counts.queries_answered += 1;
        Ok(())
    }

    /// The fixed fields of this endpoint's next announcement (part), whose topics' data goes to
    /// `group` (`None`: by unicast only).
    fn announce_head(
        &mut self,
        now_ns: u64,
        group: Option<SocketAddr>,
        common: &Common,
    ) -> AnnounceHead {
        let timestamp_ns = (common.wall)();
        self.seq += 1;
        let start = *self.start.get_or_insert(now_ns);
        AnnounceHead {
            session: common.session,
            seq: self.seq,
            timestamp_ns,
            period_ms: u32::try_from(self.config.announce_every.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            uptime_ms: now_ns.saturating_sub(start) / 1_000_000,
            data: self.local,
            group,
        }
    }

    /// Discovery's timers: the periodic announcement, queries for the topics with no
    /// publisher, and the followed publishers' tries and expiries.
    pub(crate) fn poll(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        subscriber: &mut SubscriberSide,
        offered: Offered<'_>,
        common: &mut Common,
    ) {
        self.start.get_or_insert(now_ns);
        self.tend(now_ns, wire, subscriber, common);
        if now_ns >= self.next_announce {
            self.next_announce = now_ns.saturating_add(nanos(self.config.announce_every));
            self.early = u64::MAX;
            self.announce(now_ns, wire, offered, common);
            self.query(wire, common);
            return;
        }
        if now_ns >= self.early {
            self.early = u64::MAX;
            self.last_early = now_ns;
            self.announce(now_ns, wire, offered, common);
        }
    }

    /// Marks the tries established, gives up those refused or too slow, forgets publishers
    /// that stopped announcing (removing their imports from `subscriber`).
    fn tend(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        subscriber: &mut SubscriberSide,
        common: &mut Common,
    ) {
        let timeout = nanos(self.config.try_timeout);
        let mut i = 0;
        while let Some(f) = self.found.get_mut(i) {
            let import = subscriber.imports.get(f.import);
            let state = import.map(|im| im.session.state());
            let heard = import.map_or(0, |im| im.heard_ns);
            let refused = matches!(state, Some(ImportState::Refused(_)));
            let answering = now_ns < heard.saturating_add(timeout);
            if matches!(state, Some(ImportState::Established { .. })) && answering {
                f.established = true;
            } else if f.established {
                // It stopped answering: a try again, timed from its last answer (so replayed
                // announcements of a publisher that left cannot keep it followed).
                f.established = false;
                f.tried = heard;
            }
            let late = !f.established && now_ns >= f.tried.saturating_add(timeout);
            let expired = now_ns >= f.expires;
            if !(refused || late || expired) {
                i += 1;
                continue;
            }
            let f = self.found.swap_remove(i);
            subscriber.remove_import(f.import, wire, common);
            let topic_id = self.wants.get(f.want).map_or(0, |w| w.topic_id);
            // A try that expires before it is established is given up like a late one: a
            // sender claiming a short period must not get its address tried again sooner.
            if refused || late || !f.established {
                self.counts.given_up += 1;
                if self.cooldown.len() == COOLDOWN {
                    self.cooldown.remove(0);
                }
                self.cooldown
                    .push((f.data, topic_id, now_ns.saturating_add(timeout)));
            } else {
                self.counts.lost += 1;
            }
            common.push_event(Event::Lost {
                import: f.import,
                topic_id,
                publisher: f.data,
            });
        }
    }

    /// The destinations of discovery's own datagrams: the group and the peers.
    fn dests(config: &DiscoveryConfig) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
        config
            .group
            .iter()
            .chain(&config.peers)
            .map(|&a| (crate::session::canonical(a), 0))
    }

    /// Announces everything `offered`, in as many parts as it needs.
    fn announce(
        &mut self,
        now_ns: u64,
        wire: &mut dyn Wire,
        offered: Offered<'_>,
        common: &mut Common,
    ) {
        let room = common.control_room();
        let per_part = room.saturating_sub(HEADER_LEN + ANNOUNCE_FIXED_LEN);
        self.parts.clear();
        for group in groups(offered.exports) {
            let (mut first, mut used) = (0, 0);
            let mut n = 0;
            for entry in entries_in(offered, group) {
                let len = entry_len(entry.3);
                if used + len > per_part && n > first {
                    self.parts.push((group, first, n));
                    (first, used) = (n, 0);
                }
                used += len;
                n += 1;
            }
            if n > first {
                self.parts.push((group, first, n));
            }
        }
        let total = entries(offered).count();
        let parts = u8::try_from(self.parts.len()).unwrap_or(u8::MAX);
        let carried: usize = self
            .parts
            .iter()
            .take(usize::from(parts))
            .map(|&(_, first, end)| end - first)
            .sum();
        let exported = offered.exports.len() + offered.directs.len() + offered.services.len();
        self.counts.unannounced = (exported - carried.min(total)) as u64;
        for part in 0..parts {
            let Some(&(group, first, end)) = self.parts.get(usize::from(part)) else {
                return;
            };
            let head = self.announce_head(now_ns, group, common);
            let topics = entries_in(offered, group).skip(first).take(end - first);
            let mut enc = BatchEncoder::new(&mut common.control_buf[..room]);
            if enc
                .push_announce(&head, part, parts, topics, &mut self.scratch)
                .is_err()
            {
                return; // Cannot happen: the parts were cut to fit.
            }
            let (datagrams, bytes) =
                common
                    .egress
                    .send(wire, enc.as_bytes(), false, Self::dests(&self.config));
            common.metrics.sent(datagrams, bytes);
            self.counts.announcements_sent += datagrams as u64;
        }
    }

    /// Asks for each discovered topic that has no established publisher yet.
    fn query(&mut self, wire: &mut dyn Wire, common: &mut Common) {
        let padding = QUERY_LEN - HEADER_LEN - common.egress.trailer_len();
        let room = common.control_room();
        for (want, spec) in self.wants.iter().enumerate() {
            if self.found.iter().any(|f| f.want == want && f.established) {
                continue;
            }
            let mut enc = BatchEncoder::new(&mut common.control_buf[..room]);
            if enc
                .push_query(common.session, spec.topic_id, padding)
                .is_err()
            {
                return;
            }
            let (datagrams, bytes) =
                common
                    .egress
                    .send(wire, enc.as_bytes(), false, Self::dests(&self.config));
            common.metrics.sent(datagrams, bytes);
        }
    }
}
