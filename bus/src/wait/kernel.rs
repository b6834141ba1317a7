//! The kernel sleep of a parked thread that owns file descriptors: one `epoll` set (`kqueue`
//! off Linux, through `mio`) holding the thread's sockets and an `eventfd` waker that its
//! [`Doorbell`] rings, so that a datagram or a local message wakes the thread at once.
//!
//! The doorbell's armed handshake is unchanged (see `doorbell`): producers write the eventfd
//! only when they claim an armed bell, so a thread that is not asleep costs them nothing new.
//! No wake-up is lost: the eventfd and the sockets are registered edge-triggered, and an edge
//! that happens before `epoll_wait` stays on the set's ready list until the wait collects it.
//! Sockets are safe edge-triggered here because the thread sleeps only after a round that read
//! them empty (the re-poll after arming), so any datagram it has not read arrived after that
//! read and made an edge of its own. At most one spurious return follows a busy period (an
//! edge whose datagram the thread already read); the caller polls again either way.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::Doorbell;

/// The waker's token; watched descriptors get the tokens after it.
const WAKER: Token = Token(0);

/// Events collected per wait: only "something is ready" matters, the caller polls everything.
const EVENTS: usize = 16;

/// A thread's `epoll` set: its doorbell's eventfd and the descriptors it watches.
pub(crate) struct KernelWait {
    poll: Poll,
    events: Events,
    next_token: usize,
}

impl std::fmt::Debug for KernelWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelWait")
            .field("watched", &(self.next_token - 1))
            .finish()
    }
}

impl KernelWait {
    /// Creates the set and its eventfd, and hands the eventfd's waker to `doorbell`: from now
    /// on its ringers write the eventfd instead of notifying the condvar.
    ///
    /// # Errors
    /// The operating system's, from `epoll_create1` or `eventfd`.
    pub(crate) fn new(doorbell: &Doorbell) -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        doorbell.attach_waker(waker);
        Ok(KernelWait {
            poll,
            events: Events::with_capacity(EVENTS),
            next_token: 1,
        })
    }

    /// Adds `fd` to the set: its becoming readable ends a sleep. Watching a descriptor twice is
    /// not an error. A descriptor leaves the set by itself when its file is closed.
    ///
    /// # Errors
    /// The operating system's, from `epoll_ctl` (a bad descriptor, say).
    pub(crate) fn watch(&mut self, fd: RawFd) -> io::Result<()> {
        let token = Token(self.next_token);
        match self
            .poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
        {
            Ok(()) => {
                self.next_token += 1;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sleeps until a watched descriptor becomes readable, the eventfd is written, or
    /// `timeout` passes (rounded up to a millisecond). Returns whether anything woke it.
    /// Errors (`EINTR` included) end the sleep; the caller polls again either way.
    pub(crate) fn sleep(&mut self, timeout: Option<Duration>) -> bool {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => !self.events.is_empty(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => {
                log::warn!("a parked bus thread's epoll wait failed: {e}");
                std::thread::yield_now();
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use crate::ring::Ring;
    use crate::wait::{IdleStrategy, Park};

    /// Far longer than the test waits: a lost wake-up leaves the consumer asleep past the
    /// test's deadline instead of being hidden by a short timeout.
    const SLEEP_LIMIT: Duration = Duration::from_secs(120);

    /// The real `Park` sleeping in `epoll` (it watches a socket nobody sends to): a producer
    /// pushes one item at a time into a ring that rings its doorbell, waiting for each to be
    /// taken and pausing before the next push by nothing, a yield, or long enough for the
    /// consumer to go to sleep, so pushes land in every phase of the arm-poll-sleep
    /// handshake. A lost wake-up strands the consumer for `SLEEP_LIMIT`; the test fails after
    /// a bounded wait instead.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_park_sleeping_in_epoll_loses_no_wake_up_from_a_ring() {
        const ITEMS: usize = 3000;
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        let mut park = Park::new().with_max_sleep(SLEEP_LIMIT);
        assert!(park
            .wake_on_readable(socket.as_raw_fd())
            .expect("an epoll set"));
        let bell = park.doorbell().expect("park has a doorbell");
        let (mut tx, mut rx) = Ring::new(4);
        tx.notify_on_push(Some(bell.clone() as _));
        let taken = Arc::new(AtomicUsize::new(0));
        let (done_tx, done_rx) = mpsc::channel();
        let t = Arc::clone(&taken);
        let consumer = std::thread::spawn(move || {
            let mut next = 0usize;
            while next < ITEMS {
                let mut work = 0;
                if let Some(v) = rx.try_pop() {
                    assert_eq!(v, next, "in order, none lost");
                    next += 1;
                    t.store(next, Ordering::Release);
                    work = 1;
                }
                park.idle(work);
            }
            let _ = done_tx.send(());
        });
        for i in 0..ITEMS {
            match i % 3 {
                0 => {}
                1 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(200)),
            }
            assert!(tx.try_push(i).is_ok(), "one item in flight at a time");
            assert!(
                !stalled(&taken, i),
                "item {i} was not taken within 30 s: a wake-up was lost"
            );
        }
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the consumer finished");
        consumer.join().expect("the consumer did not panic");
        assert!(
            bell.wakeups() > 0,
            "the consumer slept and was woken through the eventfd"
        );
    }

    /// Waits up to 30 s for item `i` to be taken (yielding, then sleeping); true if it never
    /// was.
    fn stalled(taken: &AtomicUsize, i: usize) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut polls = 0u32;
        while taken.load(Ordering::Acquire) <= i {
            if std::time::Instant::now() > deadline {
                return true;
            }
            polls += 1;
            if polls < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        false
    }
}
