//! llbus-record's integration tests, in one binary with one module per subject:
//!
//! - `record`: what the recorder writes reads back, through the mcap crate's reader and the
//!   generic decoder, cut off anywhere, rotated, or with a disk error;
//! - `replay`: a recording replayed into a bus, in order, in lockstep, paced, or refused;
//! - `topics`: named topics, several of one type, recorded one channel each under their running
//!   names and replayed each into its own topic, or refused.
//!
//! `fixtures` holds the message types and helpers they share. Two binaries stand apart because
//! the process is the fixture: `alloc.rs` (a counting global allocator) and `killed.rs` (a
//! recording process killed mid-write: the test runs itself again as that process).

mod fixtures;
mod record;
mod replay;
mod topics;
