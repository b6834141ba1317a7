//! Shared pieces of the comparison harness, one module each:
//!
//! - `args`: the command line ([`Args`], parsed by clap) and the suites ([`Suite`]).
//! - `pin`: [`Pinning::probe`] checks once that threads can be pinned to cores 0 and 1; every
//!   measurement then runs on two fresh threads started by [`run_pair`], the first pinned to
//!   core 0 and the second to core 1, each with an explicit `CoreId { id }` and a checked
//!   return value (on this machine `core_affinity::get_core_ids()` from a pinned thread lists
//!   only that thread's core, so it must not be used to pick the second core). If pinning
//!   fails the run goes on unpinned and says so in its output.
//! - `rounds`: [`run_rounds`] runs the rounds: each runs every implementation once per
//!   measurement (phase), in a fresh random order per round and phase ([`shuffled`], from a
//!   seed printed in the output and taken back with `--seed`), so that no implementation always
//!   follows the same neighbour (the floor's hot cores, a blocking channel's parked threads):
//!   slow drifts and after-effects of a noisy machine then spread over all of them.
//! - `wait`: [`Spin`] bounds every wait loop: it checks the clock every few thousand spins and
//!   gives up with [`Stuck`] past its deadline, so a broken implementation ends with an error
//!   instead of hanging the run.
//! - `stats`: [`Collector`] keeps one value per (implementation, case) per round, and each
//!   implementation's round-trip histograms merged over rounds (for the pictures of `plot`);
//!   [`Collector::figures`] reduces the values to the median, min and max over rounds.
//! - `targets`: the ratios a suite promises, from the figures of the same run.
//! - `output`: [`print_figures`] prints them as a table ([`render_table`]) or as JSON lines
//!   ([`json_line`]).

mod args;
mod output;
mod pin;
mod rounds;
mod stats;
mod targets;
mod wait;

#[cfg(test)]
mod tests;

pub use args::*;
pub use output::*;
pub use pin::*;
pub use rounds::*;
pub use stats::*;
pub use targets::*;
pub use wait::*;
