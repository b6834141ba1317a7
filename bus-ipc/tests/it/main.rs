//! llbus-ipc's integration tests with both ends of every channel in this process, by subject:
//!
//! - `channel`: a `Sender` and a `Receiver`: order across the wrap, group-readable files.
//! - `export`: `ShmExport`/`ShmImport` between two buses: no importer, a stale stamp, parking
//!   on the futex, wiring `start()` refuses.
//! - `rendezvous`: the socket and the handover against writers that are not what they claim.
//! - `topics`: named topics: one channel per running name, each import its own, refusals.
//! - `payload`: bincode slots and the bounded decoder under them.
//!
//! Binaries of their own, where the process is the fixture: `alloc.rs` (a counting global
//! allocator), `default_dir.rs` (it sets `XDG_RUNTIME_DIR`), and `processes/` (it re-executes
//! itself as the other side of a channel).
#![cfg(not(loom))]

mod channel;
mod export;
mod fixtures;
mod payload;
mod rendezvous;
mod topics;
