//! Running an llbus bus inside a measurement, bounded in time: the `bus` and `udp` suites build
//! a fresh bus (or two) per measurement, wait for their actors' results with a deadline, then
//! stop and join them with a deadline too.
//!
//! A bus that does not stop is an error, never a hang: [`stop_and_join`] joins on a helper
//! thread and, if the bus is still running [`STOP_LIMIT`] after it was asked to stop, prints
//! why and ends the process (its threads would still spin on the benchmark cores, so no later
//! figure of the run could be trusted).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use llbus::{Actor, ActorBuilder, GroupBuilder, Report, RunningBus};

use crate::harness::{secs, Pinning, CORES};

/// How long a bus may take to stop once asked, before the run gives up on it.
pub const STOP_LIMIT: Duration = Duration::from_secs(15);

/// How long each bus may take to drain on a graceful stop (`BusBuilder::stop_timeout`).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Exit status when a bus does not stop.
const EXIT_BUS_HUNG: i32 = 3;

/// Asks `running` to stop and joins it, waiting at most [`STOP_LIMIT`].
///
/// # Errors
///
/// The bus's own error (an actor panicked), as text.
pub fn stop_and_join(running: RunningBus, what: &str) -> Result<Report, String> {
    running.stop();
    let (tx, rx) = mpsc::channel();
    let joiner = std::thread::Builder::new()
        .name("bench-join".into())
        .spawn(move || {
            let _ = tx.send(running.join());
        })
        .map_err(|e| format!("{what}: cannot spawn a thread to join the bus: {e}"))?;
    match rx.recv_timeout(STOP_LIMIT) {
        Ok(result) => {
            let _ = joiner.join();
            result.map_err(|e| format!("{what}: the bus failed: {e}"))
        }
        Err(_) => {
            eprintln!(
                "FATAL: {what}: the bus did not stop within {} of being asked; its threads \
                 still spin on the benchmark cores, so no later figure would be fair: exiting",
                secs(STOP_LIMIT)
            );
            std::process::exit(EXIT_BUS_HUNG);
        }
    }
}

/// Polls `ready` every millisecond until it holds (`true`) or `deadline` passes (`false`).
pub fn wait_until(deadline: Instant, mut ready: impl FnMut() -> bool) -> bool {
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Named metric `name` of actor `actor` in `report`, 0 if absent.
pub fn metric(report: &Report, actor: &str, name: &str) -> u64 {
    report
        .actor(actor)
        .and_then(|a| a.metric(name))
        .unwrap_or(0)
}

/// Pins an actor's own thread to benchmark core `which` (0 or 1) when pinning is on.
pub fn place<'b, A: Actor>(
    builder: ActorBuilder<'b, A>,
    pinning: &Pinning,
    which: usize,
) -> ActorBuilder<'b, A> {
    if pinning.enabled() {
        builder.on_core(CORES[which])
    } else {
        builder
    }
}

/// Pins a group's thread to benchmark core `which` (0 or 1) when pinning is on.
pub fn place_group<'b>(
    builder: GroupBuilder<'b>,
    pinning: &Pinning,
    which: usize,
) -> GroupBuilder<'b> {
    if pinning.enabled() {
        builder.on_core(CORES[which])
    } else {
        builder
    }
}
