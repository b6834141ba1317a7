//! Bounded waiting: every wait loop gives up past its deadline instead of hanging the run.

use std::fmt;
use std::time::Instant;

/// A wait loop gave up: the other side did not answer before the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stuck;

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timed out waiting for the other thread (stuck or disconnected)")
    }
}

/// A bounded spin: call [`Spin::tick`] once per failed attempt.
#[derive(Debug, Clone, Copy)]
pub struct Spin {
    deadline: Instant,
    spins: u32,
}

impl Spin {
    /// Clock is read once every this many ticks.
    const CHECK_EVERY: u32 = 4096;

    /// A spin that gives up at `deadline`.
    #[inline]
    pub fn until(deadline: Instant) -> Self {
        Self { deadline, spins: 0 }
    }

    /// Records one failed attempt; returns [`Stuck`] once past the deadline.
    ///
    /// # Errors
    ///
    /// [`Stuck`] when the deadline has passed.
    #[inline]
    pub fn tick(&mut self) -> Result<(), Stuck> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % Self::CHECK_EVERY == 0 && Instant::now() >= self.deadline {
            return Err(Stuck);
        }
        // NB: a pause in every implementation's wait loop, so that all of them are treated
        // alike; it also leaves the pipeline to a sibling hyperthread of a shared vCPU.
        std::hint::spin_loop();
        Ok(())
    }
}

/// Spins until `ready()` holds or `deadline` passes.
///
/// # Errors
///
/// [`Stuck`] when the deadline passes first.
pub fn spin_until(deadline: Instant, mut ready: impl FnMut() -> bool) -> Result<(), Stuck> {
    let mut spin = Spin::until(deadline);
    while !ready() {
        spin.tick()?;
    }
    Ok(())
}
