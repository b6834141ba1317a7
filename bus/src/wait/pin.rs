//! Pinning the current thread to a core.
//!
//! `core_affinity::get_core_ids()` lists only the cores in the *calling thread's* mask, so once a
//! thread is pinned, every thread it spawns sees a single core. We therefore read the
//! *process's* allowed set ([`allowed_cores`]: the mask of its main thread, which `taskset` or a
//! cpuset set for it) rather than the caller's, pin with an explicit `CoreId`, check the result,
//! and read the mask back; and a thread that is not pinned is given the process's set
//! ([`run_on_cores`]) instead of inheriting its spawner's pinned core.

use std::fmt;

/// Why pinning failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinError {
    /// The core id is not below the number of online cores.
    NoSuchCore {
        /// The core asked for.
        core: usize,
        /// How many cores are online.
        online: usize,
    },
    /// The operating system refused (a cgroup or cpuset may exclude the core).
    Refused {
        /// The core asked for.
        core: usize,
    },
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinError::NoSuchCore { core, online } => write!(
                f,
                "cannot pin to core {core}: this machine has {online} online cores (0..{online}); pick one of those"
            ),
            PinError::Refused { core } => write!(
                f,
                "the operating system refused to pin this thread to core {core}: check the process's cpuset or taskset mask"
            ),
        }
    }
}

impl std::error::Error for PinError {}

/// How many cores the machine has online, whatever the calling thread's affinity mask.
pub fn online_cores() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if n > 0 {
            return n as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The cores this process may run on: the affinity mask of its main thread (on Linux,
/// `sched_getaffinity` of the process id), which is what `taskset` or a cpuset gave it. Unlike
/// the calling thread's own mask, it does not shrink when the caller pins itself. Elsewhere, or
/// if the call fails, every online core.
pub fn allowed_cores() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is plain data, valid when zeroed.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `getpid` has no preconditions; `sched_getaffinity` writes at most
        // `size_of::<cpu_set_t>()` bytes into `set`, which is that large.
        let rc = unsafe {
            libc::sched_getaffinity(
                libc::getpid(),
                std::mem::size_of::<libc::cpu_set_t>(),
                &mut set,
            )
        };
        if rc == 0 {
            let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                // SAFETY: `i` is below `CPU_SETSIZE`, the set's capacity.
                .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
                .collect();
            if !cores.is_empty() {
                return cores;
            }
        }
    }
    (0..online_cores()).collect()
}

/// Lets the calling thread run on any of `cores` (undoing a pin it inherited). An empty list
/// does nothing.
///
/// # Errors
/// [`PinError::Refused`] (naming the first core) if the operating system refuses.
pub fn run_on_cores(cores: &[usize]) -> Result<(), PinError> {
    let Some(&first) = cores.first() else {
        return Ok(());
    };
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is plain data, valid when zeroed.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &core in cores {
            if core < libc::CPU_SETSIZE as usize {
                // SAFETY: `core` is below `CPU_SETSIZE`, the set's capacity.
                unsafe { libc::CPU_SET(core, &mut set) };
            }
        }
        // SAFETY: pid 0 is the calling thread; `set` is a valid, initialised `cpu_set_t` of the
        // size passed.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if rc != 0 {
            return Err(PinError::Refused { core: first });
        }
    }
    Ok(())
}

/// Pins the calling thread to core `core` (an explicit id, as numbered by the OS).
///
/// # Errors
/// [`PinError::NoSuchCore`] if `core` is not below [`online_cores`]; [`PinError::Refused`] if the
/// OS refuses, or the thread's mask does not read back as exactly that core.
pub fn pin_to_core(core: usize) -> Result<(), PinError> {
    let online = online_cores();
    if core >= online {
        return Err(PinError::NoSuchCore { core, online });
    }
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        return Err(PinError::Refused { core });
    }
    match core_affinity::get_core_ids() {
        Some(ids) if ids.len() == 1 && ids[0].id == core => Ok(()),
        _ => Err(PinError::Refused { core }),
    }
}
