//! System calls: the futex, the monotonic clock, and whether a process is alive.
//!
//! The futex is the shared (not `FUTEX_PRIVATE_FLAG`) kind, so that a word in a mapping shared
//! by two processes works: the kernel keys it by the page and offset, not the address. Other
//! Unix systems fall back to a short sleep (a wait that ends early is always allowed).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Returns early on a wake, a signal, or
/// when the word differs; callers re-check their condition in every case.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only
        // reads it. The result is ignored on purpose: EAGAIN (word changed), EINTR and
        // ETIMEDOUT all mean "return and re-check".
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
            );
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        if word.load(std::sync::atomic::Ordering::Acquire) == expected {
            std::thread::sleep(timeout.min(Duration::from_micros(50)));
        }
    }
}

/// Wakes one thread sleeping on `word` (in any process).
pub(crate) fn futex_wake(word: &AtomicU32) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access user memory
        // beyond using its address as a key.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = word;
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the host.
pub(crate) fn now_ns() -> u64 {
    #[cfg(all(unix, not(miri)))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Unix.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
            + 1
    }
}

/// This process's id.
pub(crate) fn my_pid() -> u32 {
    std::process::id()
}

/// Whether process `pid` exists (it may be a zombie, or another process that reused the id:
/// callers also check the liveness stamp).
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: signal 0 only checks that the process exists and may be signalled.
        let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        pid == my_pid()
    }
}

/// Whether this process may use the asymmetric fence: registered for
/// `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, so that a sleeper in another process can force a barrier
/// on our threads and we need none on the hot path. Decided once.
pub(crate) fn asymmetric_fences() -> bool {
    use std::sync::OnceLock;
    static MODE: OnceLock<bool> = OnceLock::new();
    *MODE.get_or_init(|| {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
            let supported = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0) };
            if supported < 0 || supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED == 0 {
                return false;
            }
            // SAFETY: as above.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                    0,
                )
            };
            rc == 0
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            false
        }
    })
}

#[cfg(all(target_os = "linux", not(miri)))]
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
#[cfg(all(target_os = "linux", not(miri)))]
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
#[cfg(all(target_os = "linux", not(miri)))]
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

/// The heavy side of the asymmetric fence: a memory barrier on every running thread of every
/// process registered for it (and on ours). Returns false if the kernel refused, in which case
/// a peer that relies on it may miss us: the caller sleeps only briefly.
pub(crate) fn heavy_fence() -> bool {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
        let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0) };
        rc == 0
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        false
    }
}
