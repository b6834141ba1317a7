//! Pinning the current thread to a core.
//!
//! `core_affinity::get_core_ids()` lists only the cores in the *calling thread's* mask, so once a
//! thread is pinned, every thread it spawns sees a single core. We therefore validate core ids
//! against the cores the machine has online (not the caller's mask), pin with an explicit
//! `CoreId`, check the result, and read the mask back.

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
