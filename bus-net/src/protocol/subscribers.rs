//! The publisher's subscriber table: which address wants which topic, and since when it has
//! not renewed.
//!
//! A flat vector of (address, topic) entries, scanned linearly: a publisher has few
//! subscribers, and a scan of a few cache lines beats hashing at that size. Subscribers renew
//! every second; [`SubscriberTable::expire`] drops entries not renewed within the timeout
//! (default [`DEFAULT_SUBSCRIBER_TIMEOUT`]). Time is passed in as monotonic nanoseconds (any
//! origin, the caller's clock). The table allocates only when a new entry is inserted and the
//! vector grows, up to its capacity; renewal, lookup, fan-out iteration and expiry never
//! allocate.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::decode::DropReason;

/// The host of a subscriber address: what the per-host cap counts by (an IP address, whatever
/// its ports).
pub trait Host {
    /// The host's identity.
    type Id: PartialEq;
    /// The host this address is on.
    fn host(&self) -> Self::Id;
}

impl Host for SocketAddr {
    type Id = IpAddr;
    fn host(&self) -> IpAddr {
        self.ip().to_canonical()
    }
}

/// How long a subscription lasts without renewal, unless configured otherwise.
pub const DEFAULT_SUBSCRIBER_TIMEOUT: Duration = Duration::from_secs(60);

/// How many addresses may subscribe to one topic, unless configured otherwise
/// ([`SubscriberTable::with_topic_cap`]): fan-out is one send per subscriber, so the cap bounds
/// what one message can cost the publisher.
pub const DEFAULT_SUBSCRIBERS_PER_TOPIC: usize = 64;

/// How many of one topic's subscriber slots one host (IP address) may hold, unless configured
/// otherwise ([`SubscriberTable::with_host_cap`]): a handful of processes per host, so that one
/// host cannot hold every slot of a topic and lock the others out.
pub const DEFAULT_SUBSCRIBERS_PER_HOST: usize = 4;

/// One subscription of one address to one topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subscriber<A> {
    /// Where to send the topic's frames.
    pub addr: A,
    /// The topic id.
    pub topic_id: u64,
    /// The subscriber's session id, as of its last renewal.
    pub session: u64,
    /// When it last subscribed or renewed, in the caller's monotonic nanoseconds.
    pub renewed_ns: u64,
    /// The subscription token: what every datagram of the topic sent to it ends with.
    pub token: u64,
    /// It receives the topic's multicast group (said by its last `Subscribe`): its data is
    /// not sent to it by unicast.
    pub via_group: bool,
}

/// What [`SubscriberTable::renew`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Renewal {
    /// A new entry.
    New,
    /// An existing entry, renewed.
    Renewed,
    /// An existing entry whose subscriber restarted (new session id), renewed.
    Restarted,
}

/// The subscriber table. See the module docs.
#[derive(Clone, Debug)]
pub struct SubscriberTable<A> {
    /// Invariant: `entries.len() <= capacity`, no two entries share (addr, topic_id), no
    /// topic has more than `topic_cap` entries, and no host more than `host_cap` of a topic's.
    entries: Vec<Subscriber<A>>,
    capacity: usize,
    topic_cap: usize,
    host_cap: usize,
    timeout_ns: u64,
}

impl<A: Copy + PartialEq + Host> SubscriberTable<A> {
    /// An empty table holding at most `capacity` entries, at most
    /// [`DEFAULT_SUBSCRIBERS_PER_TOPIC`] per topic, expiring them `timeout` after their last
    /// renewal. Allocates nothing until the first insert.
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        SubscriberTable {
            entries: Vec::new(),
            capacity,
            topic_cap: DEFAULT_SUBSCRIBERS_PER_TOPIC,
            host_cap: DEFAULT_SUBSCRIBERS_PER_HOST,
            timeout_ns: u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The same table with at most `cap` subscribers per topic.
    pub fn with_topic_cap(mut self, cap: usize) -> Self {
        self.topic_cap = cap;
        self
    }

    /// The most subscribers one topic may have.
    pub fn topic_cap(&self) -> usize {
        self.topic_cap
    }

    /// The same table with at most `cap` subscribers per host (IP address) per topic.
    pub fn with_host_cap(mut self, cap: usize) -> Self {
        self.host_cap = cap;
        self
    }

    /// The most subscriber slots of one topic one host may hold.
    pub fn host_cap(&self) -> usize {
        self.host_cap
    }

    /// Adds or renews the subscription of `addr` to `topic_id` at time `now_ns`, with the
    /// subscription token `token` (a renewal by a restarted subscriber takes its new token).
    ///
    /// # Errors
    /// [`DropReason::TableFull`] if it is new and the table holds `capacity` entries already
    /// (answer with a `Refuse` of reason `TableFull`); [`DropReason::TopicFull`] if it is new
    /// and the topic has its cap of subscribers, or its host its cap of the topic's
    /// subscribers (answer with reason `TopicFull` or `HostFull`: [`SubscriberTable::host_full`]
    /// says which). A renewal always succeeds.
    pub fn renew(
        &mut self,
        addr: A,
        topic_id: u64,
        session: u64,
        token: u64,
        now_ns: u64,
    ) -> Result<Renewal, DropReason> {
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.topic_id == topic_id && e.addr == addr)
        {
            e.renewed_ns = e.renewed_ns.max(now_ns);
            let restarted = e.session != session;
            e.session = session;
            e.token = token;
            return Ok(if restarted {
                Renewal::Restarted
            } else {
                Renewal::Renewed
            });
        }
        if self.entries.len() >= self.capacity {
            return Err(DropReason::TableFull);
        }
        if self.subscribers(topic_id).count() >= self.topic_cap || self.host_full(addr, topic_id) {
            return Err(DropReason::TopicFull);
        }
        self.entries.push(Subscriber {
            addr,
            topic_id,
            session,
            renewed_ns: now_ns,
            token,
            via_group: false,
        });
        Ok(Renewal::New)
    }

    /// Removes the subscription of `addr` to `topic_id` (an unsubscribe). Returns whether
    /// there was one.
    pub fn remove(&mut self, addr: A, topic_id: u64) -> bool {
        match self
            .entries
            .iter()
            .position(|e| e.topic_id == topic_id && e.addr == addr)
        {
            Some(i) => {
                self.entries.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes every entry not renewed within the timeout as of `now_ns`, calling `on_expired`
    /// for each (to log it). Returns how many were removed. Call it about once a second.
    pub fn expire(&mut self, now_ns: u64, mut on_expired: impl FnMut(&Subscriber<A>)) -> usize {
        let before = self.entries.len();
        let timeout = self.timeout_ns;
        self.entries.retain(|e| {
            let keep = now_ns.saturating_sub(e.renewed_ns) <= timeout;
            if !keep {
                on_expired(e);
            }
            keep
        });
        before - self.entries.len()
    }

    /// Whether the host of `addr` holds `host_cap` of `topic_id`'s subscriber slots already.
    pub fn host_full(&self, addr: A, topic_id: u64) -> bool {
        let host = addr.host();
        self.entries
            .iter()
            .filter(|e| e.topic_id == topic_id && e.addr.host() == host)
            .count()
            >= self.host_cap
    }

    /// The addresses subscribed to `topic_id` with their subscription tokens, for fan-out.
    pub fn destinations(&self, topic_id: u64) -> impl Iterator<Item = (A, u64)> + '_ {
        self.entries
            .iter()
            .filter(move |e| e.topic_id == topic_id)
            .map(|e| (e.addr, e.token))
    }

    /// The subscribers of `topic_id` served by unicast (not via its group), with their tokens.
    pub fn unicast_destinations(&self, topic_id: u64) -> impl Iterator<Item = (A, u64)> + '_ {
        self.entries
            .iter()
            .filter(move |e| e.topic_id == topic_id && !e.via_group)
            .map(|e| (e.addr, e.token))
    }

    /// The subscribers of `topic_id` that receive its group, with their tokens.
    pub fn group_destinations(&self, topic_id: u64) -> impl Iterator<Item = (A, u64)> + '_ {
        self.entries
            .iter()
            .filter(move |e| e.topic_id == topic_id && e.via_group)
            .map(|e| (e.addr, e.token))
    }

    /// Whether any subscriber of `topic_id` receives its group.
    pub fn any_via_group(&self, topic_id: u64) -> bool {
        self.entries
            .iter()
            .any(|e| e.topic_id == topic_id && e.via_group)
    }

    /// Records whether the subscriber `addr` of `topic_id` receives the topic's group.
    /// Returns whether it is subscribed.
    pub fn set_via_group(&mut self, addr: A, topic_id: u64, via_group: bool) -> bool {
        match self
            .entries
            .iter_mut()
            .find(|e| e.topic_id == topic_id && e.addr == addr)
        {
            Some(e) => {
                e.via_group = via_group;
                true
            }
            None => false,
        }
    }

    /// The addresses subscribed to `topic_id`, for fan-out.
    pub fn subscribers(&self, topic_id: u64) -> impl Iterator<Item = A> + '_ {
        self.entries
            .iter()
            .filter(move |e| e.topic_id == topic_id)
            .map(|e| e.addr)
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = &Subscriber<A>> + '_ {
        self.entries.iter()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    // In these tests every address is a host of its own.
    macro_rules! own_host {
        ($($t:ty),*) => {$(
            impl Host for $t {
                type Id = $t;
                fn host(&self) -> $t {
                    *self
                }
            }
        )*};
    }
    own_host!(u8, u32, char);

    #[test]
    fn renewal_keeps_and_silence_expires() {
        let mut t = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 8);
        assert_eq!(t.renew(1u32, 10, 100, 0, 0), Ok(Renewal::New));
        assert_eq!(t.renew(2u32, 10, 200, 0, 0), Ok(Renewal::New));
        assert_eq!(t.renew(1u32, 11, 100, 0, 0), Ok(Renewal::New));
        // Address 1 renews every second for 90 s; address 2 falls silent.
        for sec in 1..=90 {
            t.renew(1, 10, 100, 0, sec * S).unwrap();
            t.renew(1, 11, 100, 0, sec * S).unwrap();
            let mut expired = Vec::new();
            let n = t.expire(sec * S, |e| expired.push((e.addr, e.topic_id)));
            if sec == 61 {
                assert_eq!((n, expired), (1, vec![(2, 10)]));
            } else {
                assert_eq!(n, 0, "second {sec}");
            }
        }
        assert_eq!(t.len(), 2);
        assert_eq!(t.subscribers(10).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn exactly_at_timeout_is_kept_one_ns_later_is_not() {
        let mut t = SubscriberTable::new(Duration::from_secs(5), 4);
        t.renew(7u8, 1, 1, 0, 10).unwrap();
        assert_eq!(t.expire(10 + 5 * S, |_| {}), 0);
        assert_eq!(t.expire(10 + 5 * S + 1, |_| {}), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn cap_unsubscribe_and_restart() {
        let mut t = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 2);
        t.renew('a', 1, 1, 0, 0).unwrap();
        t.renew('b', 1, 1, 0, 0).unwrap();
        assert_eq!(t.renew('c', 1, 1, 0, 0), Err(DropReason::TableFull));
        // Renewal of an existing entry still works when full.
        assert_eq!(t.renew('a', 1, 1, 0, 5), Ok(Renewal::Renewed));
        assert_eq!(t.renew('a', 1, 2, 0, 6), Ok(Renewal::Restarted));
        assert!(t.remove('a', 1));
        assert!(!t.remove('a', 1));
        assert_eq!(t.renew('c', 1, 1, 0, 7), Ok(Renewal::New));
        let mut subs: Vec<_> = t.subscribers(1).collect();
        subs.sort();
        assert_eq!(subs, ['b', 'c']);
    }

    #[test]
    fn per_topic_cap() {
        let t = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 10);
        assert_eq!(t.topic_cap(), DEFAULT_SUBSCRIBERS_PER_TOPIC);
        let mut t = t.with_topic_cap(2);
        assert_eq!(t.renew(1u8, 7, 0, 0, 0), Ok(Renewal::New));
        assert_eq!(t.renew(2u8, 7, 0, 0, 0), Ok(Renewal::New));
        assert_eq!(t.renew(3u8, 7, 0, 0, 0), Err(DropReason::TopicFull));
        // Other topics are not affected; renewals of the capped topic still work.
        assert_eq!(t.renew(3u8, 8, 0, 0, 0), Ok(Renewal::New));
        assert_eq!(t.renew(2u8, 7, 0, 0, 1), Ok(Renewal::Renewed));
        // The table-wide capacity is checked first.
        let mut full = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 1).with_topic_cap(1);
        full.renew(1u8, 7, 0, 0, 0).unwrap();
        assert_eq!(full.renew(2u8, 7, 0, 0, 0), Err(DropReason::TableFull));
        // Room again after an unsubscribe.
        assert!(t.remove(1, 7));
        assert_eq!(t.renew(3u8, 7, 0, 0, 2), Ok(Renewal::New));
    }

    #[test]
    fn per_host_cap_counts_every_port_of_an_address() {
        let addr = |ip: [u8; 4], port| SocketAddr::from((ip, port));
        let mut t = SubscriberTable::new(DEFAULT_SUBSCRIBER_TIMEOUT, 100).with_host_cap(2);
        assert_eq!(t.host_cap(), 2);
        assert_eq!(
            t.renew(addr([10, 0, 0, 1], 1), 7, 1, 11, 0),
            Ok(Renewal::New)
        );
        assert_eq!(
            t.renew(addr([10, 0, 0, 1], 2), 7, 1, 12, 0),
            Ok(Renewal::New)
        );
        assert!(t.host_full(addr([10, 0, 0, 1], 3), 7));
        assert_eq!(
            t.renew(addr([10, 0, 0, 1], 3), 7, 1, 13, 0),
            Err(DropReason::TopicFull)
        );
        // Another host, and another topic of the same host, are not affected; renewals are.
        assert_eq!(
            t.renew(addr([10, 0, 0, 2], 3), 7, 1, 14, 0),
            Ok(Renewal::New)
        );
        assert_eq!(
            t.renew(addr([10, 0, 0, 1], 3), 8, 1, 15, 0),
            Ok(Renewal::New)
        );
        assert_eq!(
            t.renew(addr([10, 0, 0, 1], 2), 7, 2, 16, 1),
            Ok(Renewal::Restarted)
        );
        // The renewal took the new token.
        let tokens: Vec<_> = t.destinations(7).map(|(_, token)| token).collect();
        assert_eq!(tokens, [11, 16, 14]);
    }
}
