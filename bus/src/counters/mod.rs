//! The live counters file: every figure of a running bus's report, published in shared memory
//! for other processes (the `llbus` command) to read while the bus runs, after Aeron's CnC file
//! and AeronStat (whose descriptor, reader and manager this module's files follow).
//!
//! - `layout`: the versioned header and record layout, defined once ([`COUNTERS_VERSION`]).
//! - `writer`: what the bus writes: the snapshotter thread and the encoder.
//! - `reader`: decoding a snapshot under the sequence lock: what the `llbus` command reads.
//! - `file`: the per-user directory, creating, listing and opening files, their permissions.
//!
//! # How the figures get there
//! A *snapshotter* thread of the bus, which sleeps between rounds, copies
//! [`RunningBus::snapshot`](crate::RunningBus::snapshot) into the file every
//! [`SNAPSHOT_INTERVAL`] (10 per second). The counters themselves stay where they are, on
//! their padded per-edge cache lines, written by their one owner thread as before: the hot
//! paths do no extra work and no syscall. We did not place the counters in the mapping itself
//! (Aeron's way) because (1) the edges' counters must exist before the rings are made and the
//! named metrics are registered by factories later, so the mapping would have to grow under
//! live writers; (2) a whole-report copy lets the reader get a *consistent* snapshot (every edge
//! balances) through a sequence lock, which independent live counters cannot give; (3) a reader
//! sees figures at most one interval old, which is what a human or Prometheus needs.
//!
//! # What another local user can do
//! Nothing to the file or its directory (owner-only, checked before use); read it only if the
//! bus's user opted in to a group. A file planted where a reader looks is read only if it is a
//! regular file of the directory's owner and of a sane size, and is decoded as untrusted bytes;
//! the reader never blocks on it and never maps it.

mod file;
mod layout;
mod reader;
mod writer;

pub use file::{counters_dir, counters_files, find_counters_files, CountersLocation};
pub use layout::{
    COUNTERS_MAGIC, COUNTERS_VERSION, MAX_FILE_LEN, MAX_RECORDS, RECORD_ACTOR, RECORD_CALL,
    RECORD_EDGE, RECORD_METRIC,
};
pub use reader::{
    decode, read_counters_file, read_counters_file_of, read_counters_file_until, ActorCounts,
    CallCounts, CountersFileError, CountersSnapshot, EdgeCounts, COUNTERS_BUSY_RETRY,
};
pub use writer::SNAPSHOT_INTERVAL;
pub(crate) use writer::{call_values, edge_values, policy_name, CountersFile, Source, Visitor};
