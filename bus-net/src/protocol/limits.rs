//! Per-export admission limits: which networks may subscribe ([`Allowlist`]) and how many
//! control messages a source address may send ([`RateLimiter`]). The per-topic subscriber cap
//! is in `subscribers` ([`SubscriberTable::with_topic_cap`](super::subscribers::SubscriberTable::with_topic_cap)).
//!
//! - [`Allowlist`]: a list of CIDR networks, matched by prefix. The default admits loopback
//!   only (`127.0.0.0/8`, `::1/128`): an export reachable from other hosts has to say so
//!   ([`Allowlist::any`] or a list). IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a
//!   dual-stack socket reports) are matched as the IPv4 address they carry.
//! - [`RateLimiter`]: a token bucket per source IP address (RFC 2697's single-rate idea, integer
//!   arithmetic on nano-tokens), in a fixed table of [`DEFAULT_RATE_LIMIT_SOURCES`] entries
//!   organised as an 8-way set-associative cache: a source hashes (keyed, per process) to one
//!   set of 8 slots, and a new source takes the set's free slot or evicts its stalest entry.
//!   Each check costs one hash and at most 8 comparisons; the table is allocated once, at
//!   construction, and never grows, so a flood of spoofed sources costs neither memory nor
//!   time. An evicted source starts again with a full bucket, which is the price of the bound:
//!   to evict a given victim an attacker has to hit its set, which the keyed hash hides.
//!
//! Time is the caller's monotonic nanoseconds; nothing here reads a clock or allocates after
//! construction.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::str::FromStr;

/// An IP network: an address and a prefix length, such as `10.0.0.0/8` or `fd00::/8`.
/// Prefix arithmetic is the `ipnet` crate's; this type adds strict parsing (no host bits set)
/// with errors that say what to write, and IPv4-mapped matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// Invariant: no bit set past the prefix (`net == net.trunc()`, checked by [`Cidr::new`]).
    net: IpNet,
}

/// Why a network or an allowlist did not parse. The `Display` text names the input and says
/// what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CidrError {
    /// An empty entry.
    Empty,
    /// The part before `/` is not an IPv4 or IPv6 address.
    BadAddress {
        /// The entry as written.
        input: String,
    },
    /// The part after `/` is not a number.
    BadPrefix {
        /// The entry as written.
        input: String,
    },
    /// A prefix longer than the address (33 for IPv4, 129 for IPv6).
    PrefixTooLong {
        /// The entry as written.
        input: String,
        /// The longest prefix for the address family.
        max: u8,
    },
    /// Bits set past the prefix (`10.0.0.1/8`): probably a typo, so refused.
    HostBitsSet {
        /// The entry as written.
        input: String,
        /// The network the prefix describes (`10.0.0.0/8`).
        network: String,
    },
}

impl core::fmt::Display for CidrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CidrError::Empty => f.write_str(
                "empty network in allowlist; write an address or network such as 10.0.0.0/8 or ::1",
            ),
            CidrError::BadAddress { input } => write!(
                f,
                "{input:?} is not an IP address or network; write one such as 10.0.0.0/8 or fd00::/8"
            ),
            CidrError::BadPrefix { input } => write!(
                f,
                "{input:?} has a prefix length that is not a number; write one such as /24"
            ),
            CidrError::PrefixTooLong { input, max } => write!(
                f,
                "{input:?} has a prefix longer than the address; use at most /{max}"
            ),
            CidrError::HostBitsSet { input, network } => write!(
                f,
                "{input:?} has bits set past its prefix; did you mean {network}?"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The network `addr/prefix`.
    ///
    /// # Errors
    /// [`CidrError::PrefixTooLong`] or [`CidrError::HostBitsSet`].
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let input = || format!("{addr}/{prefix}");
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let net = IpNet::new(addr, prefix).map_err(|_| CidrError::PrefixTooLong {
            input: input(),
            max,
        })?;
        if net.trunc() != net {
            return Err(CidrError::HostBitsSet {
                input: input(),
                network: net.trunc().to_string(),
            });
        }
        Ok(Cidr { net })
    }

    /// The network's first address.
    pub fn addr(&self) -> IpAddr {
        self.net.addr()
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.net.prefix_len()
    }

    /// Whether `ip` is in this network. An IPv4-mapped IPv6 address is matched as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.net.contains(&ip.to_canonical())
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `10.0.0.0/8`, `fd00::/8`, or a bare address (`127.0.0.1`, `::1`: a whole-length
    /// prefix). Surrounding whitespace is ignored.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(CidrError::Empty);
        }
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| CidrError::BadAddress {
            input: s.to_owned(),
        })?;
        let max = if addr.is_ipv4() { 32u8 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u32>() {
                Ok(n) if n <= u32::from(max) => n as u8,
                Ok(_) => {
                    return Err(CidrError::PrefixTooLong {
                        input: s.to_owned(),
                        max,
                    })
                }
                Err(_) => {
                    return Err(CidrError::BadPrefix {
                        input: s.to_owned(),
                    })
                }
            },
        };
        Cidr::new(addr, prefix).map_err(|e| match e {
            CidrError::HostBitsSet { network, .. } => CidrError::HostBitsSet {
                input: s.to_owned(),
                network,
            },
            other => other,
        })
    }
}

impl core::fmt::Display for Cidr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.net.addr(), self.net.prefix_len())
    }
}

// Evaluated at compile time: an invalid prefix would not build.
const LOOPBACK_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8);
const LOOPBACK_V6: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128);
const ANY_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::UNSPECIFIED, 0);
const ANY_V6: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::UNSPECIFIED, 0);

/// The networks allowed to subscribe to an export. See the module docs.
///
/// ```
/// use llbus_net::Allowlist;
///
/// let list: Allowlist = "10.0.0.0/8, fd00::/8, 192.0.2.7".parse()?;
/// assert!(list.contains("10.1.2.3".parse()?));
/// assert!(list.contains("::ffff:10.1.2.3".parse()?)); // as a dual-stack socket reports it
/// assert!(!list.contains("192.0.2.8".parse()?));
/// // The default is loopback only.
/// assert!(Allowlist::default().contains("127.0.0.1".parse()?));
/// assert!(!Allowlist::default().contains("10.1.2.3".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Allowlist {
    nets: Vec<Cidr>,
}

impl Allowlist {
    /// Loopback only (`127.0.0.0/8` and `::1/128`): the default.
    pub fn loopback() -> Self {
        Allowlist {
            nets: vec![
                Cidr {
                    net: IpNet::V4(LOOPBACK_V4),
                },
                Cidr {
                    net: IpNet::V6(LOOPBACK_V6),
                },
            ],
        }
    }

    /// Every address (`0.0.0.0/0` and `::/0`). Only for exports meant for the whole network
    /// they are reachable from; the cookie handshake, the rate limit and the caps still apply.
    pub fn any() -> Self {
        Allowlist {
            nets: vec![
                Cidr {
                    net: IpNet::V4(ANY_V4),
                },
                Cidr {
                    net: IpNet::V6(ANY_V6),
                },
            ],
        }
    }

    /// Exactly `nets` (none: nobody is allowed).
    pub fn new(nets: impl IntoIterator<Item = Cidr>) -> Self {
        Allowlist {
            nets: nets.into_iter().collect(),
        }
    }

    /// Parses each of `entries` as a network (see [`Cidr`]'s `FromStr`).
    ///
    /// # Errors
    /// The first entry's [`CidrError`].
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, CidrError> {
        entries
            .into_iter()
            .map(Cidr::from_str)
            .collect::<Result<Vec<_>, _>>()
            .map(|nets| Allowlist { nets })
    }

    /// Whether `ip` is in one of the networks. Allocates nothing.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }

    /// The networks.
    pub fn networks(&self) -> &[Cidr] {
        &self.nets
    }
}

impl Default for Allowlist {
    /// [`Allowlist::loopback`].
    fn default() -> Self {
        Allowlist::loopback()
    }
}

impl FromStr for Allowlist {
    type Err = CidrError;

    /// A comma-separated list of networks: `"10.0.0.0/8, fd00::/8"`.
    fn from_str(s: &str) -> Result<Self, CidrError> {
        Allowlist::parse(s.split(','))
    }
}

/// A rate and a burst for [`RateLimiter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// Messages per second a source may send on average.
    pub per_second: u32,
    /// Messages a source may send at once after a quiet spell (the bucket's size).
    pub burst: u32,
}

/// The default control-message limit per source address: 20 per second, bursts of 40. A
/// well-behaved subscriber sends one `Subscribe` per topic per second (plus one for the cookie
/// round trip when it starts), so this leaves room for about 20 topics from one host.
pub const DEFAULT_RATE_LIMIT: RateLimit = RateLimit {
    per_second: 20,
    burst: 40,
};

impl Default for RateLimit {
    /// [`DEFAULT_RATE_LIMIT`].
    fn default() -> Self {
        DEFAULT_RATE_LIMIT
    }
}

/// The default number of source addresses a [`RateLimiter`] tracks at once.
pub const DEFAULT_RATE_LIMIT_SOURCES: usize = 4096;

/// Slots per set of the limiter's table.
const WAYS: usize = 8;

/// One token, in the bucket's unit (nano-tokens: a rate of `r` per second refills `r` units per
/// nanosecond, so the arithmetic is integer and exact).
const TOKEN: u64 = 1_000_000_000;

/// One source's bucket.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// `None`: free.
    ip: Option<IpAddr>,
    /// Nano-tokens left. Invariant: at most the burst's worth.
    tokens: u64,
    /// When the bucket was last refilled (the latest time seen for this source).
    last_ns: u64,
}

/// A token bucket per source address, in a fixed-size table. See the module docs.
///
/// ```
/// use llbus_net::{RateLimit, RateLimiter};
///
/// let mut limiter = RateLimiter::new(RateLimit { per_second: 10, burst: 2 }, 64);
/// let ip = "192.0.2.1".parse()?;
/// assert!(limiter.allow(ip, 0));
/// assert!(limiter.allow(ip, 0));
/// assert!(!limiter.allow(ip, 0)); // burst spent
/// assert!(limiter.allow(ip, 100_000_000)); // 100 ms later: one token back
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RateLimiter {
    /// Invariant: `slots.len()` is a power of two, at least `WAYS`; set `i` is
    /// `slots[i * WAYS..(i + 1) * WAYS]`.
    slots: Box<[Slot]>,
    limit: RateLimit,
    hasher: RandomState,
}

impl RateLimiter {
    /// A limiter allowing `limit` per source, tracking at least `sources` sources (rounded up
    /// to a power of two, at least 8). Allocates the whole table now, and never again.
    pub fn new(limit: RateLimit, sources: usize) -> Self {
        let len = sources
            .max(WAYS)
            .checked_next_power_of_two()
            .unwrap_or(1 << 20);
        RateLimiter {
            slots: vec![Slot::default(); len].into_boxed_slice(),
            limit,
            hasher: RandomState::new(),
        }
    }

    /// The limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// How many sources the table holds at most.
    pub fn sources(&self) -> usize {
        self.slots.len()
    }

    /// How many sources it holds now.
    pub fn tracked(&self) -> usize {
        self.slots.iter().filter(|s| s.ip.is_some()).count()
    }

    /// Whether a control message from `ip` at `now_ns` is within its limit; if so, it is
    /// counted. A source not seen before (or evicted since) starts with a full bucket.
    /// Allocates nothing. An IPv4-mapped IPv6 address is the IPv4 address it carries.
    pub fn allow(&mut self, ip: IpAddr, now_ns: u64) -> bool {
        let ip = ip.to_canonical();
        let sets = self.slots.len() / WAYS;
        let set = (self.hasher.hash_one(ip) as usize) & (sets - 1);
        let capacity = u64::from(self.limit.burst).saturating_mul(TOKEN);
        let Some(ways) = self.slots.get_mut(set * WAYS..(set + 1) * WAYS) else {
            debug_assert!(false, "set out of range");
            return false;
        };
        // This source's slot, else a free one, else the stalest.
        let mut pick = 0;
        let mut found = false;
        for (i, slot) in ways.iter().enumerate() {
            match slot.ip {
                Some(s) if s == ip => {
                    pick = i;
                    found = true;
                    break;
                }
                None => {
                    if ways.get(pick).is_some_and(|p| p.ip.is_some()) {
                        pick = i;
                    }
                }
                Some(_) => {
                    if ways
                        .get(pick)
                        .is_some_and(|p| p.ip.is_some() && slot.last_ns < p.last_ns)
                    {
                        pick = i;
                    }
                }
            }
        }
        let Some(slot) = ways.get_mut(pick) else {
            return false;
        };
        if !found {
            *slot = Slot {
                ip: Some(ip),
                tokens: capacity,
                last_ns: now_ns,
            };
        }
        let elapsed = now_ns.saturating_sub(slot.last_ns);
        let refill = elapsed.saturating_mul(u64::from(self.limit.per_second));
        slot.tokens = slot.tokens.saturating_add(refill).min(capacity);
        slot.last_ns = slot.last_ns.max(now_ns);
        debug_assert!(slot.tokens <= capacity);
        if slot.tokens >= TOKEN {
            slot.tokens -= TOKEN;
            true
        } else {
            false
        }
    }
}

impl Default for RateLimiter {
    /// [`DEFAULT_RATE_LIMIT`] over [`DEFAULT_RATE_LIMIT_SOURCES`] sources.
    fn default() -> Self {
        RateLimiter::new(DEFAULT_RATE_LIMIT, DEFAULT_RATE_LIMIT_SOURCES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_match() {
        let list: Allowlist = "10.0.0.0/8, 192.0.2.7, fd00::/8, ::1".parse().unwrap();
        assert_eq!(list.networks().len(), 4);
        for yes in [
            "10.0.0.0",
            "10.255.255.255",
            "192.0.2.7",
            "fd12::1",
            "::1",
            "::ffff:10.9.9.9",
        ] {
            assert!(list.contains(ip(yes)), "{yes}");
        }
        for no in [
            "11.0.0.0",
            "192.0.2.6",
            "192.0.2.8",
            "fe80::1",
            "::2",
            "127.0.0.1",
            "::ffff:11.0.0.1",
        ] {
            assert!(!list.contains(ip(no)), "{no}");
        }
        let any = Allowlist::any();
        assert!(any.contains(ip("8.8.8.8")) && any.contains(ip("2001:db8::1")));
        assert!(!Allowlist::new([]).contains(ip("127.0.0.1")));
        let lo = Allowlist::default();
        assert!(lo.contains(ip("127.1.2.3")) && lo.contains(ip("::1")));
        assert!(!lo.contains(ip("::2")) && !lo.contains(ip("192.168.1.1")));
        let c: Cidr = "fd00::/8".parse().unwrap();
        assert_eq!((c.to_string(), c.prefix()), ("fd00::/8".to_owned(), 8));
        assert_eq!(c.addr(), ip("fd00::"));
        let host: Cidr = " 127.0.0.1 ".parse().unwrap();
        assert_eq!(host.prefix(), 32);
        assert!(Cidr::new(ip("0.0.0.0"), 0).unwrap().contains(ip("1.2.3.4")));
    }

    #[test]
    fn parse_errors_say_what_to_write() {
        let err = |s: &str| s.parse::<Cidr>().unwrap_err();
        assert_eq!(err(""), CidrError::Empty);
        assert_eq!(err(" "), CidrError::Empty);
        assert!(matches!(err("10.0.0/8"), CidrError::BadAddress { .. }));
        assert!(matches!(err("localhost"), CidrError::BadAddress { .. }));
        assert!(matches!(err("10.0.0.0/x"), CidrError::BadPrefix { .. }));
        assert!(matches!(err("10.0.0.0/"), CidrError::BadPrefix { .. }));
        assert!(matches!(err("10.0.0.0/-1"), CidrError::BadPrefix { .. }));
        assert_eq!(
            err("10.0.0.0/33"),
            CidrError::PrefixTooLong {
                input: "10.0.0.0/33".into(),
                max: 32
            }
        );
        assert!(matches!(
            err("::/129"),
            CidrError::PrefixTooLong { max: 128, .. }
        ));
        assert!(matches!(
            err("::/99999999999"),
            CidrError::BadPrefix { .. } | CidrError::PrefixTooLong { .. }
        ));
        assert_eq!(
            err("10.0.0.1/8"),
            CidrError::HostBitsSet {
                input: "10.0.0.1/8".into(),
                network: "10.0.0.0/8".into()
            }
        );
        assert!(Cidr::new(ip("::"), 200).is_err());
        assert_eq!("10.0.0.0/8,".parse::<Allowlist>(), Err(CidrError::Empty));
        for e in [
            err(""),
            err("x"),
            err("1.2.3.4/y"),
            err("1.2.3.4/40"),
            err("1.2.3.4/8"),
        ] {
            let text = e.to_string();
            assert!(
                text.chars().next().is_some_and(|c| !c.is_uppercase()),
                "{text}"
            );
        }
        assert_eq!(
            err("10.0.0.1/8").to_string(),
            "\"10.0.0.1/8\" has bits set past its prefix; did you mean 10.0.0.0/8?"
        );
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn token_bucket_exact() {
        let mut l = RateLimiter::new(DEFAULT_RATE_LIMIT, 64);
        let a = ip("192.0.2.1");
        let t0 = 1_000 * MS;
        for i in 0..40 {
            assert!(l.allow(a, t0), "burst message {i}");
        }
        assert!(!l.allow(a, t0));
        // 20 per second: one token every 50 ms, exactly.
        assert!(!l.allow(a, t0 + 50 * MS - 1));
        assert!(l.allow(a, t0 + 50 * MS));
        assert!(!l.allow(a, t0 + 50 * MS));
        // A long silence refills to the burst, not beyond.
        let t1 = t0 + 3_600_000 * MS;
        for _ in 0..40 {
            assert!(l.allow(a, t1));
        }
        assert!(!l.allow(a, t1));
        // Time going back neither refills nor breaks anything.
        assert!(!l.allow(a, t0));
        // Other sources have buckets of their own; v4-mapped is the same source.
        assert!(l.allow(ip("192.0.2.2"), t1));
        assert!(!l.allow(ip("::ffff:192.0.2.1"), t1));
        // Sustained at exactly the rate: always allowed.
        let b = ip("198.51.100.1");
        for i in 0..1000 {
            assert!(l.allow(b, t1 + i * 50 * MS));
        }
    }

    #[test]
    fn zero_limits() {
        let mut none = RateLimiter::new(
            RateLimit {
                per_second: 100,
                burst: 0,
            },
            8,
        );
        assert!(!none.allow(ip("::1"), 0));
        assert!(!none.allow(ip("::1"), 10_000 * MS));
        let mut once = RateLimiter::new(
            RateLimit {
                per_second: 0,
                burst: 1,
            },
            8,
        );
        assert!(once.allow(ip("::1"), 0));
        assert!(!once.allow(ip("::1"), u64::MAX));
    }

    #[test]
    fn table_is_bounded_and_evicts_the_stalest() {
        // One set of 8: the hash cannot matter.
        let mut l = RateLimiter::new(
            RateLimit {
                per_second: 1,
                burst: 1,
            },
            1,
        );
        assert_eq!(l.sources(), 8);
        for i in 0..8u8 {
            assert!(l.allow(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)), u64::from(i)));
            assert!(!l.allow(IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)), u64::from(i)));
        }
        assert_eq!(l.tracked(), 8);
        // Source 0 was seen at t=0 (stalest); a newcomer takes its slot.
        assert!(l.allow(ip("10.0.0.100"), 10));
        assert_eq!(l.tracked(), 8);
        // Source 0 is forgotten (fresh bucket), source 1 is still limited.
        assert!(!l.allow(ip("10.0.0.1"), 11));
        assert!(l.allow(ip("10.0.0.0"), 12));
        // A flood of distinct sources never grows the table.
        let mut big = RateLimiter::default();
        assert_eq!(big.sources(), DEFAULT_RATE_LIMIT_SOURCES);
        for i in 0..50_000u32 {
            big.allow(IpAddr::V4(Ipv4Addr::from(i)), u64::from(i));
        }
        assert!(big.tracked() <= DEFAULT_RATE_LIMIT_SOURCES);
        assert_eq!(big.sources(), DEFAULT_RATE_LIMIT_SOURCES);
        assert_eq!(big.limit(), RateLimit::default());
    }
}
