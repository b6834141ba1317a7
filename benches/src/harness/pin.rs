//! Pinning the two benchmark threads to cores 0 and 1, checked, and running a pair of them.

use std::sync::atomic::{AtomicBool, Ordering};

/// Cores the two benchmark threads are pinned to.
pub const CORES: [usize; 2] = [0, 1];

/// Whether the benchmark threads are pinned, decided once by [`Pinning::probe`].
#[derive(Debug)]
pub struct Pinning {
    enabled: bool,
    /// Why pinning is off, when it is.
    reason: Option<String>,
    /// Set when a thread failed to pin after a successful probe.
    failed_later: AtomicBool,
}

impl Pinning {
    /// Tries to pin a scratch thread to each of [`CORES`] and prints a warning to stderr if
    /// that fails; the run then goes on unpinned.
    pub fn probe() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut reason = None;
        if cores < 2 {
            reason = Some(format!(
                "only {cores} core available; the two threads share it"
            ));
        } else {
            for id in CORES {
                // A fresh thread per core: the probing thread's own mask must stay wide.
                let ok = std::thread::spawn(move || pin_current(id))
                    .join()
                    .unwrap_or(false);
                if !ok {
                    reason = Some(format!("could not pin a thread to core {id}"));
                    break;
                }
            }
        }
        if let Some(why) = &reason {
            eprintln!("WARNING: {why}; running UNPINNED, figures are less stable");
        }
        Self {
            enabled: reason.is_none(),
            reason,
            failed_later: AtomicBool::new(false),
        }
    }

    /// Whether threads are pinned: suites that place their own threads (a bus's) pin them to
    /// [`CORES`] only then.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Pinning switched off, for tests.
    #[cfg(test)]
    pub fn disabled(reason: &str) -> Self {
        Self {
            enabled: false,
            reason: Some(reason.into()),
            failed_later: AtomicBool::new(false),
        }
    }

    /// One line for the output header.
    pub fn describe(&self) -> String {
        match (&self.reason, self.failed_later.load(Ordering::Relaxed)) {
            (Some(why), _) => format!("UNPINNED ({why})"),
            (None, true) => format!(
                "pinned to cores {} and {}, but some threads FAILED to pin (see warnings)",
                CORES[0], CORES[1]
            ),
            (None, false) => format!("pinned to cores {} and {}", CORES[0], CORES[1]),
        }
    }

    fn pin(&self, which: usize) {
        if self.enabled
            && !pin_current(CORES[which])
            && !self.failed_later.swap(true, Ordering::Relaxed)
        {
            eprintln!(
                "WARNING: could not pin a thread to core {}; it runs unpinned",
                CORES[which]
            );
        }
    }
}

/// Pins the calling thread to core `id`, by explicit id (see the module docs).
pub(super) fn pin_current(id: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id })
}

/// Runs `a` on a thread pinned to core 0 and `b` on a thread pinned to core 1, concurrently,
/// and returns both results. A panic in either thread is re-raised here.
pub fn run_pair<RA, RB>(
    pinning: &Pinning,
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB)
where
    RA: Send,
    RB: Send,
{
    std::thread::scope(|s| {
        let ha = s.spawn(|| {
            pinning.pin(0);
            a()
        });
        let hb = s.spawn(|| {
            pinning.pin(1);
            b()
        });
        let rb = hb.join();
        let ra = ha.join();
        match (ra, rb) {
            (Ok(ra), Ok(rb)) => (ra, rb),
            (Err(e), _) | (_, Err(e)) => std::panic::resume_unwind(e),
        }
    })
}
