//! Idle strategies and core pinning: how a thread waits when it has nothing to do, and where it
//! runs. This layer knows nothing of rings.
//!
//! The contract follows Agrona's `IdleStrategy`: after each round of polling the caller reports
//! how much work the round did; with work the strategy resets, without work it decides how to
//! wait, getting lazier the longer nothing arrives.
//!
//! - [`BusySpin`]: `spin_loop` hints only; the lowest latency, for a thread with a core of its own.
//! - [`Backoff`]: spin, then yield (`crossbeam_utils::Backoff`). The default: microsecond wake-up,
//!   and it leaves the core to other threads when idle.
//! - [`Park`]: spin, then yield, then sleep on a [`Doorbell`] that producers ring; they make no
//!   system call unless the thread has announced that it sleeps. A thread whose actors watch
//!   file descriptors ([`IdleStrategy::wake_on_readable`]) sleeps in `epoll` on them and on an
//!   eventfd that the doorbell writes, so a datagram wakes it as soon as a message does.

mod doorbell;
#[cfg(all(unix, not(loom)))]
mod kernel;
#[cfg(all(test, loom))]
mod loom_models;
mod pin;

use std::time::{Duration, Instant};

pub use doorbell::Doorbell;
pub(crate) use pin::total_memory;
pub use pin::{allowed_cores, online_cores, pin_to_core, run_on_cores, PinError};

/// How long [`Idle::Backoff`](crate::Idle::Backoff) keeps yielding before it sleeps on a
/// thread that watches descriptors. NB: long enough that a thread with a message every 200 µs
/// (the two-process examples at 5000 msgs/s) stays awake between messages; with `Park`'s few
/// microseconds of yielding it sleeps between them and pays a wake-up on each, which costs
/// more than the rest of the one-way latency (`benches/examples.sh`; docs/PERFORMANCE.md,
/// "A parked bridge wakes on its socket").
pub const BACKOFF_YIELD: Duration = Duration::from_millis(1);

/// How a polling thread waits when a round of polling found nothing to do.
pub trait IdleStrategy: Send {
    /// Called after each round of polling with how much work the round did: `0` means nothing
    /// was there, and the strategy waits; anything else resets it.
    fn idle(&mut self, work_count: usize);

    /// Like [`idle`](Self::idle), but never sleeps past `deadline` (a strategy that sleeps cuts
    /// its sleep short; the others ignore it, since they return within microseconds).
    fn idle_until(&mut self, work_count: usize, deadline: Instant) {
        let _ = deadline;
        self.idle(work_count);
    }

    /// Forgets any waiting progress, as if work had just arrived.
    fn reset(&mut self);

    /// The doorbell that producers must ring to wake this strategy from its sleep, if it sleeps.
    fn doorbell(&self) -> Option<std::sync::Arc<Doorbell>> {
        None
    }

    /// True if this strategy never gives up its core (two of these pinned to one core starve).
    fn is_busy_spin(&self) -> bool {
        false
    }

    /// Asks a strategy that sleeps to wake as soon as `fd` becomes readable, as well as when
    /// rung. Returns `Ok(true)` if it will, `Ok(false)` if it never sleeps in a way that `fd`
    /// could end (it spins or yields, so it polls often anyway). The descriptor must stay open
    /// while the thread runs, or be closed for good: a closed file leaves the set by itself.
    ///
    /// # Errors
    /// The operating system's, from creating the `epoll` set or adding `fd` to it; the
    /// strategy then still wakes when rung or at its deadline.
    #[cfg(unix)]
    fn wake_on_readable(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<bool> {
        let _ = fd;
        Ok(false)
    }
}

/// Spins with `spin_loop` hints and never gives the core away.
///
/// The lowest wake-up latency; use it only on a thread pinned to a core of its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct BusySpin;

impl IdleStrategy for BusySpin {
    #[inline]
    fn idle(&mut self, work_count: usize) {
        if work_count == 0 {
            std::hint::spin_loop();
        }
    }

    fn reset(&mut self) {}

    fn is_busy_spin(&self) -> bool {
        true
    }
}

/// Spins, then yields the thread: `crossbeam_utils::Backoff`'s `snooze` (2^step spins for steps
/// 0..=6, then `yield_now`). The default strategy.
#[derive(Debug, Default)]
pub struct Backoff {
    backoff: crossbeam_utils::Backoff,
}

impl Backoff {
    /// A fresh backoff.
    pub fn new() -> Self {
        Self::default()
    }
}

impl IdleStrategy for Backoff {
    #[inline]
    fn idle(&mut self, work_count: usize) {
        if work_count == 0 {
            self.backoff.snooze();
        } else {
            self.backoff.reset();
        }
    }

    fn reset(&mut self) {
        self.backoff.reset();
    }
}

/// Spins, then yields, then sleeps on a [`Doorbell`] until a producer rings it (or
/// `max_sleep`, or the caller's deadline, passes).
///
/// Sleeping is a two-step handshake so that no wake-up is lost: the first idle round after the
/// backoff is exhausted only *arms* the doorbell (announces the sleep); the caller polls once
/// more, and only if that round also finds nothing does the next `idle` sleep. A producer that
/// publishes after the announcement sees it and rings; one that published before is seen by the
/// extra poll. Producers find the doorbell through [`IdleStrategy::doorbell`].
///
/// A thread that watches file descriptors ([`IdleStrategy::wake_on_readable`]) sleeps in the
/// kernel on them and on its doorbell's eventfd instead of on the condvar.
#[derive(Debug)]
pub struct Park {
    backoff: crossbeam_utils::Backoff,
    doorbell: std::sync::Arc<Doorbell>,
    armed: bool,
    max_sleep: Option<Duration>,
    /// How long to keep yielding once spinning is done, before arming (zero: arm at once).
    yield_for: Duration,
    /// When this idle spell's yielding began (only kept when `yield_for` is not zero).
    yielding_since: Option<Instant>,
    /// The `epoll` set, once a descriptor is watched; `None` sleeps on the doorbell's condvar.
    #[cfg(all(unix, not(loom)))]
    kernel: Option<kernel::KernelWait>,
}

impl Default for Park {
    fn default() -> Self {
        Self::new()
    }
}

impl Park {
    /// A park strategy with its own doorbell that sleeps until rung.
    pub fn new() -> Self {
        Park {
            backoff: crossbeam_utils::Backoff::new(),
            doorbell: std::sync::Arc::new(Doorbell::new()),
            armed: false,
            max_sleep: None,
            yield_for: Duration::ZERO,
            yielding_since: None,
            #[cfg(all(unix, not(loom)))]
            kernel: None,
        }
    }

    /// Keeps yielding for `yield_for` after the spin phase before it sleeps: a thread whose
    /// work comes more often than that wakes in microseconds (a yield), one idle for longer
    /// sleeps in the kernel. [`Idle::Backoff`](crate::Idle::Backoff) on a thread that watches
    /// descriptors is `Park` with a millisecond of this.
    pub fn with_yield_for(mut self, yield_for: Duration) -> Self {
        self.yield_for = yield_for;
        self
    }

    /// Never sleeps longer than `max_sleep` at a time, even if nobody rings.
    pub fn with_max_sleep(mut self, max_sleep: Duration) -> Self {
        self.max_sleep = Some(max_sleep);
        self
    }

    fn idle_inner(&mut self, work_count: usize, deadline: Option<Instant>) {
        if work_count > 0 {
            self.reset();
        } else if self.armed {
            // Armed, and the caller polled again and found nothing: sleep. `sleep` disarms.
            let mut limit = self.max_sleep;
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                limit = Some(limit.map_or(left, |l| l.min(left)));
            }
            self.sleep(limit);
            self.armed = false;
        } else if !self.backoff_completed() {
            self.backoff.snooze();
        } else if self.keep_yielding() {
            std::thread::yield_now();
        } else {
            self.doorbell.arm();
            self.armed = true;
        }
    }

    /// True while this idle spell is within `yield_for` of its first yield past the spin phase.
    fn keep_yielding(&mut self) -> bool {
        if self.yield_for.is_zero() {
            return false;
        }
        let now = Instant::now();
        let since = *self.yielding_since.get_or_insert(now);
        now.saturating_duration_since(since) < self.yield_for
    }
}

impl Park {
    /// Sleeps until rung (or a watched descriptor is readable), or `limit` passes; disarms.
    fn sleep(&mut self, limit: Option<Duration>) {
        #[cfg(all(unix, not(loom)))]
        if let Some(kernel) = self.kernel.as_mut() {
            kernel.sleep(limit);
            self.doorbell.woke();
            return;
        }
        self.doorbell.sleep(limit);
    }

    /// True once spinning and yielding are done and the next idle round arms the doorbell.
    /// Under loom the spin phase is skipped (it makes no loom operation, only more states), so
    /// the models check the arm-poll-sleep handshake itself.
    fn backoff_completed(&self) -> bool {
        cfg!(loom) || self.backoff.is_completed()
    }
}

impl IdleStrategy for Park {
    fn idle(&mut self, work_count: usize) {
        self.idle_inner(work_count, None);
    }

    fn idle_until(&mut self, work_count: usize, deadline: Instant) {
        self.idle_inner(work_count, Some(deadline));
    }

    fn reset(&mut self) {
        if self.armed {
            self.doorbell.disarm();
            self.armed = false;
        }
        self.yielding_since = None;
        self.backoff.reset();
    }

    fn doorbell(&self) -> Option<std::sync::Arc<Doorbell>> {
        Some(std::sync::Arc::clone(&self.doorbell))
    }

    #[cfg(all(unix, not(loom)))]
    fn wake_on_readable(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<bool> {
        if self.kernel.is_none() {
            // A ringer that claimed an arm made before the waker was attached notifies the
            // condvar, which this thread no longer sleeps on: withdraw any arm first, so that
            // every arm the kernel sleep relies on is made after the attachment.
            self.reset();
            self.kernel = Some(kernel::KernelWait::new(&self.doorbell)?);
        }
        if let Some(kernel) = self.kernel.as_mut() {
            kernel.watch(fd)?;
        }
        Ok(true)
    }
}

impl<S: IdleStrategy + ?Sized> IdleStrategy for Box<S> {
    fn idle(&mut self, work_count: usize) {
        (**self).idle(work_count)
    }
    fn idle_until(&mut self, work_count: usize, deadline: Instant) {
        (**self).idle_until(work_count, deadline)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn doorbell(&self) -> Option<std::sync::Arc<Doorbell>> {
        (**self).doorbell()
    }
    fn is_busy_spin(&self) -> bool {
        (**self).is_busy_spin()
    }
    #[cfg(unix)]
    fn wake_on_readable(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<bool> {
        (**self).wake_on_readable(fd)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `with_yield_for` keeps a park strategy awake (yielding, never armed, never asleep) for
    /// its span, however many idle rounds that takes; then it arms as `Park` does.
    #[test]
    fn park_yields_for_its_span_before_it_arms() {
        let mut park = Park::new().with_yield_for(Duration::from_secs(3600));
        let bell = park.doorbell().expect("park has a doorbell");
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            // Far past the spin phase (11 rounds): had it armed, a round would sleep for good.
            for _ in 0..2000 {
                park.idle(0);
            }
            let _ = tx.send(());
            park
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("2000 idle rounds within the yield span never sleep");
        let mut park = spinner.join().expect("the idle thread");
        bell.ring();
        assert_eq!(
            bell.wakeups(),
            0,
            "never armed, so a ring takes no slow path"
        );

        // A span of zero: armed right after the spin phase, and then a ring wakes it.
        park.yield_for = Duration::ZERO;
        park.reset();
        for _ in 0..64 {
            park.idle(0);
            if park.armed {
                break;
            }
        }
        assert!(park.armed, "a zero span arms once spinning is done");
        bell.ring();
        assert_eq!(bell.wakeups(), 1);
    }
}
