//! What a bridge takes from the system once per start or once per send: the publisher session
//! id, the `CLOCK_REALTIME` send timestamp, and secrets for the cookie jar. Kept out of the pure
//! protocol layer, which takes them as arguments.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::protocol::cookie::CookieJar;

/// 32 bytes from the operating system's cryptographically secure random source (`getrandom(2)`
/// on Linux, through the `getrandom` crate): a cookie secret, or entropy for
/// [`CookieJar::reseed`].
///
/// # Errors
/// The operating system's error if its random source is unavailable (very rare: a Linux
/// kernel before 3.17 without `/dev/urandom`, a sandbox that forbids it).
pub fn random_secret() -> io::Result<[u8; 32]> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(format!("no operating system random source: {e}")),
    })?;
    Ok(secret)
}

impl CookieJar {
    /// A jar whose first secret comes from the operating system ([`random_secret`]), with
    /// windows of `window` ([`DEFAULT_COOKIE_WINDOW`](crate::DEFAULT_COOKIE_WINDOW) is a good
    /// choice). Call it once per start of a publisher.
    ///
    /// # Errors
    /// As [`random_secret`].
    pub fn from_os_random(window: Duration) -> io::Result<CookieJar> {
        Ok(CookieJar::new(random_secret()?, window))
    }
}

/// Nanoseconds since the UNIX epoch from `CLOCK_REALTIME` (`SystemTime`), as the wire's send
/// timestamp: what ll-udp-pubsub puts in `sent_ts`. A clock before 1970 gives a negative value;
/// one past 2262 saturates.
pub fn realtime_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// A fresh random session id for one start of a publisher or subscriber, never 0.
///
/// Drawn from the standard library's per-process random hash keys (seeded from the operating
/// system's random source) mixed with the process id and the time, so two starts, even in the
/// same nanosecond on different hosts, differ with overwhelming probability. Not a secret: the
/// hardening issue's cookies must not rely on it.
pub fn new_session_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_i64(realtime_ns());
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // reads the real-time clock
    fn session_ids_differ_and_are_not_zero() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, 0);
        assert_ne!(a, b);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // reads the operating system's random source
    fn secrets_differ() {
        let a = random_secret().unwrap();
        assert_ne!(a, random_secret().unwrap());
        assert_ne!(a, [0; 32]);
        let mut jar = CookieJar::from_os_random(crate::DEFAULT_COOKIE_WINDOW).unwrap();
        let addr = "127.0.0.1:1".parse().unwrap();
        let cookie = jar.issue(addr, 0);
        assert!(jar.verify(addr, &cookie, 0));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // reads the real-time clock
    fn realtime_is_after_2020() {
        assert!(realtime_ns() > 1_577_836_800_000_000_000);
    }
}
