//! Pinning the current thread to a core.
//!
//! `core_affinity::get_core_ids()` lists only the cores in the *calling thread's* mask, so once a
//! thread is pinned, every thread it spawns sees a single core. We therefore read the
//! *process's* allowed set ([`allowed_cores`]: the affinity the process started with, read
//! before `main` runs, within its cgroup cpuset) rather than any thread's current mask, pin with
//! an explicit `CoreId`, check the result, and read the mask back; and a thread that is not
//! pinned is given the process's set ([`run_on_cores`]) instead of inheriting its spawner's
//! pinned core.

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

/// The cores this process may run on, whatever the calling thread's own mask: the affinity the
/// process started with (read before `main` runs, so a `main` that pins itself first does not
/// shrink it), within its cgroup's cpuset as it is now (`cpuset.cpus.effective`, cgroup v2),
/// and within the online cores. `taskset` and a container's cpuset both show here; a later
/// `sched_setaffinity` of any thread does not. Elsewhere than Linux, or if nothing can be read,
/// every online core.
pub fn allowed_cores() -> Vec<usize> {
    let online = online_cores();
    let mut cores: Vec<usize> = match startup_affinity() {
        Some(set) => set,
        None => (0..online).collect(),
    };
    if let Some(cpuset) = cgroup_cpuset() {
        let within: Vec<usize> = cores
            .iter()
            .copied()
            .filter(|c| cpuset.contains(c))
            .collect();
        // A cpuset that changed to cores the process never had: trust the cpuset.
        cores = if within.is_empty() { cpuset } else { within };
    }
    cores.retain(|&c| c < online);
    if cores.is_empty() {
        cores = (0..online).collect();
    }
    cores
}

/// The affinity mask of the calling thread, if it can be read.
#[cfg(target_os = "linux")]
fn thread_affinity() -> Option<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain data, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `sched_getaffinity` writes at most
    // `size_of::<cpu_set_t>()` bytes into `set`, which is that large.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below `CPU_SETSIZE`, the set's capacity.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect();
    (!cores.is_empty()).then_some(cores)
}

/// The process's affinity as it started: read once by [`STARTUP_SNAPSHOT`] before `main` runs
/// (on the main thread, before anyone could pin it), or failing that on first use.
#[cfg(target_os = "linux")]
fn startup_affinity() -> Option<Vec<usize>> {
    STARTUP_AFFINITY.get_or_init(thread_affinity).clone()
}

#[cfg(not(target_os = "linux"))]
fn startup_affinity() -> Option<Vec<usize>> {
    None
}

#[cfg(target_os = "linux")]
static STARTUP_AFFINITY: std::sync::OnceLock<Option<Vec<usize>>> = std::sync::OnceLock::new();

/// Runs when the program is loaded, before `main`: records the process's start-up affinity.
#[cfg(target_os = "linux")]
extern "C" fn snapshot_startup_affinity() {
    let _ = STARTUP_AFFINITY.get_or_init(thread_affinity);
}

/// The loader calls every function in `.init_array` before `main` (rustc keeps `#[used]`
/// statics in the link), which is the one moment the main thread's mask is still the
/// process's: the affinity `taskset` or the parent gave it.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static STARTUP_SNAPSHOT: extern "C" fn() = snapshot_startup_affinity;

/// The cores of this process's cgroup cpuset now (cgroup v2's `cpuset.cpus.effective`), if it
/// has one that can be read.
fn cgroup_cpuset() -> Option<Vec<usize>> {
    #[cfg(target_os = "linux")]
    {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        // cgroup v2: one line "0::/path".
        let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
        let file = format!("/sys/fs/cgroup{}/cpuset.cpus.effective", path.trim_end());
        let list = std::fs::read_to_string(file).ok()?;
        parse_cpu_list(list.trim())
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Parses a kernel CPU list ("0-3,8,10-11"); `None` if it is empty or malformed.
pub(crate) fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cores = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cores.extend(a..=b);
            }
            None => cores.push(part.parse().ok()?),
        }
    }
    cores.sort_unstable();
    cores.dedup();
    (!cores.is_empty()).then_some(cores)
}

/// The machine's physical memory in bytes (`u64::MAX` if it cannot be read): a ring larger
/// than this cannot be allocated.
pub(crate) fn total_memory() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && size > 0 {
            return (pages as u64).saturating_mul(size as u64);
        }
    }
    u64::MAX
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

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them_and_garbage_is_refused() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
    }
}
