//! What a bridge takes from the system once per start or once per send: the publisher session
//! id and the `CLOCK_REALTIME` send timestamp. Kept out of the pure protocol layer, which takes
//! both as arguments.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

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
    #[cfg_attr(miri, ignore)] // reads the real-time clock
    fn realtime_is_after_2020() {
        assert!(realtime_ns() > 1_577_836_800_000_000_000);
    }
}
