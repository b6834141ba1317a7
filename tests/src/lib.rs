//! Shared helpers for llbus's cross-crate integration tests.
#![deny(missing_docs)]

pub mod bridges;
pub mod cli;
pub mod example_bins;
pub mod local;
pub mod netns;
pub mod readme;
pub mod relay;
pub mod spoof;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// A global allocator that counts allocations (and reallocations), for the tests that prove a
/// hot path allocates nothing. Install it with `#[global_allocator]` in a test binary of its own,
/// whose tests serialize themselves (a static `Mutex`) so that no other test allocates meanwhile.
#[derive(Debug)]
pub struct CountingAlloc {
    allocations: AtomicU64,
}

std::thread_local! {
    /// Allocations made by the current thread; const-initialised, so reading it never allocates.
    static THREAD_ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_thread() {
    // `try_with`: a thread being torn down has no slot any more; it is simply not counted.
    let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

std::thread_local! {
    /// Whether this thread is the process's main thread: 0 not known yet, 1 yes, 2 no.
    static IS_MAIN: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// True on the process's main thread, which in a test binary is libtest's own: it prints the
/// "has been running for over 60 seconds" notices (allocating) while tests run, and runs no
/// test and no bus code. Its thread id is the process id (Linux); asked once per thread,
/// without allocating.
fn on_harness_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        IS_MAIN
            .try_with(|known| {
                if known.get() == 0 {
                    // SAFETY: gettid and getpid have no preconditions.
                    let main = unsafe { libc::gettid() == libc::getpid() };
                    known.set(if main { 1 } else { 2 });
                }
                known.get() == 1
            })
            .unwrap_or(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

impl CountingAlloc {
    /// Allocations and reallocations made so far by the calling thread only: immune to what
    /// the test harness's own threads do meanwhile (such as its "running over 60 seconds"
    /// notice).
    pub fn thread_allocations(&self) -> u64 {
        THREAD_ALLOCATIONS.try_with(|c| c.get()).unwrap_or(0)
    }

    /// A counter at zero.
    pub const fn new() -> Self {
        CountingAlloc {
            allocations: AtomicU64::new(0),
        }
    }

    /// Allocations and reallocations so far, on every thread but the test harness's own
    /// main thread (libtest's, which allocates for its own notices while tests run).
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::SeqCst)
    }

    fn count(&self) {
        count_thread();
        if !on_harness_thread() {
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counter
// is an atomic and allocates nothing.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count();
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Implements `llbus::Message` by hand for a type, with the topic id computed from the name
/// (the derive does this for users; these tests exercise the bus without it).
#[macro_export]
macro_rules! message {
    ($ty:ty, $topic:literal) => {
        impl ::llbus::Message for $ty {
            const TOPIC: &'static str = $topic;
            const TOPIC_ID: u64 = ::llbus::topic_id($topic);
            const FINGERPRINT: u64 = ::llbus::topic_id(concat!($topic, "/", stringify!($ty)));
        }
    };
}

/// An actor that publishes `make(n)`, `n` counting from 1, on each of its ticks (give it
/// `tick_every`): the feed of the tests that need a steady stream of one topic.
pub struct TickFeed<M> {
    out: llbus::Out<M>,
    n: u64,
    make: fn(u64) -> M,
}

impl<M> std::fmt::Debug for TickFeed<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TickFeed").field("n", &self.n).finish()
    }
}

impl<M> TickFeed<M> {
    /// A feed on `out` whose `n`-th message is `make(n)`.
    pub fn new(out: llbus::Out<M>, make: fn(u64) -> M) -> TickFeed<M> {
        TickFeed { out, n: 0, make }
    }
}

impl<M: llbus::Message + Clone> llbus::Actor for TickFeed<M> {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut llbus::Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut llbus::Context<'_>) {
        self.n += 1;
        ctx.publish(self.out, (self.make)(self.n));
    }
}

/// A named metric of an actor in a bus report, or 0 if the actor or the metric is missing.
pub fn metric(report: &llbus::Report, actor: &str, name: &str) -> u64 {
    report
        .actor(actor)
        .and_then(|a| a.metric(name))
        .unwrap_or(0)
}

/// Polls `done` every 10 ms until it says yes; panics naming `what` after `secs` seconds, so a
/// test that waits always ends.
pub fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Runs `f` on a thread of its own and returns its result; panics naming `what` if it has not
/// finished after `secs` seconds (the thread is left behind), so a hang fails the test instead
/// of hanging the test binary. A panic in `f` is passed on.
pub fn bounded<T: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("bounded: {what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn the bounded test thread");
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {secs} s (hung)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => panic!("{what} ended without a result"),
        },
    }
}

/// Asserts that every edge of `report` balances: `published == handled + panicked + dropped +
/// conflated + lost + in_flight`, that every caller's calls of a service balance: `calls ==
/// replies + errors + in_flight` (with `errors` the sum of its kinds), and that nothing is in
/// flight (a report from `join`).
pub fn assert_balanced(report: &llbus::Report) {
    for c in &report.services {
        assert_eq!(
            c.errors,
            c.timeouts + c.dropped + c.server_panicked + c.stopped + c.queue_full + c.refused,
            "the errors of {}'s calls of {} are not the sum of their kinds: {c:?}",
            c.caller,
            c.service
        );
        assert_eq!(
            (c.calls, c.in_flight),
            (c.replies + c.errors, 0),
            "{}'s calls of {} do not balance, or some are in flight after join: {c:?}",
            c.caller,
            c.service
        );
    }
    for e in &report.edges {
        assert_eq!(
            e.published,
            e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight,
            "edge {} -> {} on {} does not balance: {e:?}",
            e.publisher,
            e.subscriber,
            e.topic
        );
        assert_eq!(
            e.in_flight, 0,
            "edge {} -> {} on {} has messages in flight after join: {e:?}",
            e.publisher, e.subscriber, e.topic
        );
    }
}

/// The snippets of README.md, compiled and run as doctests (`cargo test --doc -p tests`), so the
/// tour cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// Whether this machine lets a socket join multicast group `group` on the IPv4 loopback
/// interface, which the tests of discovery and multicast need. Where it cannot, the test is
/// skipped loudly (`SKIPPED` on stderr), except under CI (`$CI` set), whose machine can: there
/// it fails, so a skip never hides a failure.
///
/// # Panics
/// Under CI, if the group cannot be joined.
pub fn loopback_group_or_skip(group: std::net::SocketAddr) -> bool {
    let lo = Some(std::net::IpAddr::from([127, 0, 0, 1]));
    match llbus_net::UdpEndpoint::bind_group(group, lo, &llbus_net::SocketConfig::default()) {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot join {group} on loopback in CI ({e})"
            );
            eprintln!("SKIPPED: this machine cannot join {group} on loopback ({e})");
            false
        }
    }
}

/// Listens on `group` on the loopback interface (as any host of the network may, admitted or
/// not) for up to 5 s and returns the first data datagram (kind `01`) heard.
pub fn overhear_data(group: std::net::SocketAddr) -> Option<Vec<u8>> {
    let lo = Some(std::net::IpAddr::from([127, 0, 0, 1]));
    let config = llbus_net::SocketConfig::default();
    let mut member = llbus_net::UdpEndpoint::bind_group(group, lo, &config).ok()?;
    let mut batch = llbus_net::RecvBatch::new(16, llbus_net::DEFAULT_MAX_DATAGRAM);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < until {
        let n = member.recv_batch(&mut batch).unwrap_or(0);
        if let Some((bytes, _)) = batch.iter().take(n).find(|(b, _)| b.get(4) == Some(&0x01)) {
            return Some(bytes.to_vec());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    None
}

/// The sockets of this network namespace joined to IPv4 `group` on loopback, as
/// `/proc/net/igmp` lists them (`None` where the kernel has no such file).
pub fn loopback_members(group: std::net::SocketAddr) -> Option<u32> {
    let std::net::IpAddr::V4(want) = group.ip() else {
        return None;
    };
    let table = std::fs::read_to_string("/proc/net/igmp").ok()?;
    let mut on_lo = false;
    for line in table.lines() {
        if !line.starts_with('\t') {
            on_lo = line.split_whitespace().nth(1) == Some("lo");
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(hex), Some(users)) = (fields.next(), fields.next()) else {
            continue;
        };
        // The address as the kernel's `%08X` of a network-order u32 read natively.
        let joined = u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
        if on_lo && joined == Some(want.octets()) {
            return users.parse().ok();
        }
    }
    Some(0)
}

/// The little-endian `u64` at `at` in `bytes` (0 past the end).
pub fn le(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}
