//! The network across crates: the `publisher` and `subscriber` examples and the `llbus` command
//! as processes against bridges, forged source addresses from raw sockets, and hosts in network
//! namespaces (root; skipped loudly off root except in CI). What drives bridges in one process
//! is `llbus-net`'s own `bus-net/tests/it/`.
//!
//! - `processes`: the examples as two processes on loopback, both formats, restarts, expiry;
//! - `spoof`: attacks with forged source addresses against the examples (root);
//! - `netns`: the examples on two namespaces joined by a shaped link (root);
//! - `multicast_ns`: discovery and multicast across namespaces (`fallback`: members whose
//!   multicast stops and resumes) (root);
//! - `topics`: `llbus topics` against bridges and forgers on a discovery group;
//! - `schema_cli`: `llbus echo`, `spy --decode`, `play` and `record` against hostile publishers
//!   and recordings.

use std::sync::Mutex;

mod multicast_ns;
mod netns;
mod processes;
mod schema_cli;
mod spoof;
mod topics;

/// One namespace case at a time across the modules: each shares the machine's cores with its
/// wire (a thread of this process) and its examples, and would otherwise add loss of its own.
pub(crate) static NAMESPACES: Mutex<()> = Mutex::new(());
