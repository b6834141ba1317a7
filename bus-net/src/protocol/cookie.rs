//! Address-proving cookies: a publisher answers a subscribe with a cookie and sends nothing
//! else to that address until the cookie comes back, so a spoofed subscribe never makes it send
//! data to an address that did not ask.
//!
//! The technique of TCP SYN cookies, DTLS's HelloVerifyRequest (RFC 6347 §4.2.1) and QUIC's
//! Retry token (RFC 9000 §8.1.2): the cookie is a keyed MAC over the requester's address (IP and
//! port) and the current time window, so the publisher keeps no state per requester and a
//! cookie is only good for the address it was sent to. Only someone who receives packets at
//! that address can echo it.
//!
//! - MAC: BLAKE3 in keyed mode ([`blake3::keyed_hash`]) over `family (1) | IPv6 or
//!   IPv4-mapped address (16) | port (2, LE) | window number (8, LE)`, truncated to
//!   [`COOKIE_LEN`] = 16 bytes (128 bits: forging one by guessing is hopeless).
//! - Windows: time (the caller's monotonic nanoseconds) is cut into windows of
//!   [`DEFAULT_COOKIE_WINDOW`] (30 s, configurable). A cookie is accepted in the window it was
//!   issued in and the next one, so it lives between one and two windows.
//! - Secrets: each window has its own 32-byte key. The first is the caller's random secret
//!   (`CookieJar::from_os_random` takes it from the operating system); the key of each later
//!   window is derived from the one before by a one-way step (`keyed_hash(previous key,
//!   context | window)`), optionally mixed with fresh randomness ([`CookieJar::reseed`]).
//!   The jar holds only the current and the previous window's keys, so a key that leaks
//!   cannot be used to recover older keys, and cookies die after two windows whatever happens.
//!
//! Nothing here allocates, reads a clock or touches the system: time and randomness are passed
//! in. Comparison of cookies is constant-time ([`constant_time_eq`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The length of a cookie on the wire, in bytes.
pub const COOKIE_LEN: usize = 16;

/// How long a cookie window lasts unless configured otherwise. A cookie is accepted for the
/// rest of the window it was issued in and the whole next one.
pub const DEFAULT_COOKIE_WINDOW: Duration = Duration::from_secs(30);

/// Domain separation for the per-window key step.
const RATCHET_CONTEXT: &[u8; 24] = b"llbus-net cookie step v1";

/// An address-proving cookie, as carried in `CookieChallenge`, `Subscribe`, `SubscribeAck` and
/// `Unsubscribe` frames. Compare cookies with [`CookieJar::verify`], never with `==` (which is
/// not constant-time; it exists for tests and maps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cookie(pub [u8; COOKIE_LEN]);

/// The key of one window.
#[derive(Clone, Copy)]
struct WindowKey {
    window: u64,
    key: [u8; blake3::KEY_LEN],
}

impl WindowKey {
    /// The key of window `window`, one step on from `self` (one-way), mixing in `entropy`.
    fn step(&self, window: u64, entropy: &[u8; 32]) -> WindowKey {
        let mut input = [0u8; RATCHET_CONTEXT.len() + 8 + 32];
        let (ctx, rest) = input.split_at_mut(RATCHET_CONTEXT.len());
        let (w, e) = rest.split_at_mut(8);
        ctx.copy_from_slice(RATCHET_CONTEXT);
        w.copy_from_slice(&window.to_le_bytes());
        e.copy_from_slice(entropy);
        WindowKey {
            window,
            key: *blake3::keyed_hash(&self.key, &input).as_bytes(),
        }
    }

    /// The cookie of `addr` in this window.
    fn cookie(&self, addr: SocketAddr) -> Cookie {
        let (family, octets) = match addr.ip().to_canonical() {
            IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => (6u8, v6.octets()),
        };
        let mut input = [0u8; 1 + 16 + 2 + 8];
        let (f, rest) = input.split_at_mut(1);
        let (ip, rest) = rest.split_at_mut(16);
        let (port, window) = rest.split_at_mut(2);
        f.copy_from_slice(&[family]);
        ip.copy_from_slice(&octets);
        port.copy_from_slice(&addr.port().to_le_bytes());
        window.copy_from_slice(&self.window.to_le_bytes());
        let hash = blake3::keyed_hash(&self.key, &input);
        let mut out = [0u8; COOKIE_LEN];
        if let Some(head) = hash.as_bytes().first_chunk::<COOKIE_LEN>() {
            out = *head;
        }
        Cookie(out)
    }
}

/// Issues and verifies address-proving cookies. See the module docs for the algorithm.
///
/// One jar per publisher socket, owned by the thread that answers subscribes: issuing and
/// verifying take `&mut self` because they move the jar to the window of `now_ns` first.
/// Neither allocates; each costs one or two BLAKE3 compressions (plus one per window change).
///
/// ```
/// use llbus_net::CookieJar;
/// use std::time::Duration;
///
/// let mut jar = CookieJar::new([7; 32], Duration::from_secs(30));
/// let addr = "192.0.2.1:4000".parse().unwrap();
/// let cookie = jar.issue(addr, 0);
/// assert!(jar.verify(addr, &cookie, 45_000_000_000)); // the next window still accepts it
/// assert!(!jar.verify("192.0.2.1:4001".parse().unwrap(), &cookie, 0)); // another port
/// assert!(!jar.verify(addr, &cookie, 60_000_000_000)); // two windows on: expired
/// ```
#[derive(Clone)]
pub struct CookieJar {
    /// The window length in nanoseconds. Invariant: at least 1.
    window_ns: u64,
    /// The key of the latest window seen.
    current: WindowKey,
    /// The key of the window before `current` (invariant: `previous.window + 1 ==
    /// current.window`), or `None` when there is none: right after `new`, before a window
    /// change, nobody can hold a cookie of an earlier window.
    previous: Option<WindowKey>,
    /// Randomness to mix into the next window's key ([`CookieJar::reseed`]).
    pending: [u8; 32],
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The keys are secrets: never printed.
        f.debug_struct("CookieJar")
            .field("window_ns", &self.window_ns)
            .field("current_window", &self.current.window)
            .finish_non_exhaustive()
    }
}

impl CookieJar {
    /// A jar whose first key is `secret` (32 bytes from a cryptographically secure random
    /// source: `CookieJar::from_os_random` does that) and whose windows last `window` (at
    /// least 1 ns; [`DEFAULT_COOKIE_WINDOW`] is a good choice).
    pub fn new(secret: [u8; 32], window: Duration) -> Self {
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
        CookieJar {
            window_ns,
            current: WindowKey {
                window: 0,
                key: secret,
            },
            previous: None,
            pending: [0; 32],
        }
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Mixes 32 fresh random bytes into the key of the next window, so that even someone who
    /// learnt the current key cannot compute the keys after the next rotation. Call it now and
    /// then (once a window is plenty) with bytes from the operating system.
    pub fn reseed(&mut self, entropy: [u8; 32]) {
        for (p, e) in self.pending.iter_mut().zip(entropy) {
            *p ^= e;
        }
    }

    /// Moves the jar to the window of `now_ns` (the caller's monotonic nanoseconds). A time
    /// before the current window changes nothing.
    fn rotate(&mut self, now_ns: u64) {
        let window = now_ns / self.window_ns;
        let current = self.current.window;
        if window <= current {
            return;
        }
        let entropy = core::mem::take(&mut self.pending);
        let previous = if window == current + 1 {
            self.current
        } else {
            // Skipped windows: nobody can hold a cookie of them; derive straight to `window - 1`.
            self.current.step(window - 1, &entropy)
        };
        self.current = previous.step(window, &entropy);
        self.previous = Some(previous);
        debug_assert!(self.previous.map(|p| p.window + 1) == Some(self.current.window));
    }

    /// The cookie for `addr` as of `now_ns`: answer a subscribe without a valid cookie with it.
    pub fn issue(&mut self, addr: SocketAddr, now_ns: u64) -> Cookie {
        self.rotate(now_ns);
        self.current.cookie(addr)
    }

    /// Whether `cookie` was issued to `addr` (same IP and port) in the window of `now_ns` or
    /// the one before. Constant-time in the cookie's bytes.
    pub fn verify(&mut self, addr: SocketAddr, cookie: &Cookie, now_ns: u64) -> bool {
        self.rotate(now_ns);
        let current =
            constant_time_eq::constant_time_eq_16(&self.current.cookie(addr).0, &cookie.0);
        let previous = self
            .previous
            .is_some_and(|p| constant_time_eq::constant_time_eq_16(&p.cookie(addr).0, &cookie.0));
        current | previous
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 30_000_000_000;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn accepted_in_its_window_and_the_next_rejected_after_two_rotations() {
        let mut jar = CookieJar::new([1; 32], DEFAULT_COOKIE_WINDOW);
        let a = addr("10.0.0.1:5000");
        let t0 = 5 * W + 123;
        let c = jar.issue(a, t0);
        assert!(jar.verify(a, &c, t0));
        assert!(jar.verify(a, &c, 6 * W - 1));
        assert!(jar.verify(a, &c, 6 * W));
        assert!(jar.verify(a, &c, 7 * W - 1));
        assert!(!jar.verify(a, &c, 7 * W));
        // Still rejected if time appears to go back afterwards.
        assert!(!jar.verify(a, &c, t0));
    }

    #[test]
    fn a_long_silence_expires_everything() {
        let mut jar = CookieJar::new([2; 32], DEFAULT_COOKIE_WINDOW);
        let a = addr("10.0.0.1:5000");
        let c = jar.issue(a, 0);
        assert!(!jar.verify(a, &c, 1000 * W));
        // A cookie issued after the jump works in the window after it.
        let d = jar.issue(a, 1000 * W);
        assert!(jar.verify(a, &d, 1001 * W));
        assert_ne!(c, d);
    }

    #[test]
    fn bound_to_ip_and_port() {
        let mut jar = CookieJar::new([3; 32], DEFAULT_COOKIE_WINDOW);
        let a = addr("10.0.0.1:5000");
        let c = jar.issue(a, 0);
        assert!(!jar.verify(addr("10.0.0.1:5001"), &c, 0));
        assert!(!jar.verify(addr("10.0.0.2:5000"), &c, 0));
        assert!(!jar.verify(addr("[::1]:5000"), &c, 0));
        // The same host seen through a dual-stack socket (IPv4-mapped) is the same address.
        assert!(jar.verify(addr("[::ffff:10.0.0.1]:5000"), &c, 0));
        let v6 = addr("[2001:db8::1]:9");
        let c6 = jar.issue(v6, 0);
        assert!(jar.verify(v6, &c6, 0));
        assert!(!jar.verify(addr("[2001:db8::2]:9"), &c6, 0));
    }

    #[test]
    fn forged_and_other_secret_rejected() {
        let mut jar = CookieJar::new([4; 32], DEFAULT_COOKIE_WINDOW);
        let mut other = CookieJar::new([5; 32], DEFAULT_COOKIE_WINDOW);
        let a = addr("192.0.2.7:1234");
        assert!(!jar.verify(a, &Cookie::default(), 0));
        assert!(!jar.verify(a, &other.issue(a, 0), 0));
        let mut c = jar.issue(a, 0);
        for byte in 0..COOKIE_LEN {
            for bit in 0..8 {
                c.0[byte] ^= 1 << bit;
                assert!(!jar.verify(a, &c, 0), "flip {byte}.{bit}");
                c.0[byte] ^= 1 << bit;
            }
        }
        assert!(jar.verify(a, &c, 0));
    }

    #[test]
    fn reseed_changes_later_keys_only() {
        let mut a = CookieJar::new([6; 32], DEFAULT_COOKIE_WINDOW);
        let mut b = a.clone();
        let x = addr("10.1.1.1:1");
        let c = a.issue(x, 0);
        b.reseed([9; 32]);
        // Same window: same key, b still accepts a's cookie.
        assert!(b.verify(x, &c, 0));
        // Next window: the keys differ, but both accept the previous window's cookie.
        assert_ne!(a.issue(x, W), b.issue(x, W));
        assert!(b.verify(x, &c, W));
        // The window length is kept and never zero.
        assert_eq!(a.window(), DEFAULT_COOKIE_WINDOW);
        assert_eq!(
            CookieJar::new([0; 32], Duration::ZERO).window(),
            Duration::from_nanos(1)
        );
        assert!(!format!("{a:?}").contains("[6"));
    }
}
