//! The counters file's layout, version 1: its header and records, defined once here and used
//! by both the writer (`writer`) and the reader (`reader`).

/// The file's magic bytes.
pub const COUNTERS_MAGIC: [u8; 8] = *b"LLBUSCNT";
/// The layout version this llbus writes and reads: 1, as follows.
///
/// # Layout, version 1
/// All integers little-endian; offsets in bytes. The file is a header, then `record_count`
/// records of `record_len` bytes each. A reader reads it with `pread` into a private buffer (a
/// mapping would let whoever can truncate the file raise `SIGBUS` in the reader).
///
/// Header (128 bytes):
///
/// | offset | type     | field                                                              |
/// |--------|----------|--------------------------------------------------------------------|
/// | 0      | [u8; 8]  | magic `LLBUSCNT`                                                   |
/// | 8      | u32      | version (1)                                                        |
/// | 12     | u32      | header length (128)                                                |
/// | 16     | u64      | generation: odd while the writer writes (a sequence lock)          |
/// | 24     | u64      | process id of the writer                                           |
/// | 32     | u64      | when the bus started, ns since the UNIX epoch                      |
/// | 40     | u64      | heartbeat: when this snapshot was written, ns since the UNIX epoch |
/// | 48     | u64      | snapshot interval, ns                                              |
/// | 56     | u32      | record count                                                       |
/// | 60     | u32      | record length (256)                                                |
/// | 64     | [u8; 64] | the bus's name, UTF-8, NUL-padded                                  |
///
/// Record (256 bytes): `type_id: u32` at 0, `value_count: u32` at 4, up to 15 `u64` values
/// from 8, and a 128-byte label from 128: UTF-8 fields separated by NUL, NUL-padded (a label
/// too long for it has each field cut at a character boundary). Type ids:
///
/// - 1, an edge: label `topic, publisher, subscriber, policy`; values `published, handled,
///   panicked, dropped, conflated, waited, lost, in_flight, max_depth`.
/// - 2, an actor (or an external handle): label `name, thread`; values `handled, ticks,
///   idle_rounds, restarts, panics`.
/// - 3, a named metric of the actor of the nearest record of type 2 before it (bridge
///   metrics among them): label `actor, metric`; values `value`.
/// - 4, the calls of one service by the actor (or handle) of the nearest record of type 2
///   before it: label `caller, service, server`; values `calls, replies, errors, in_flight,
///   timeouts, dropped, server_panicked, stopped, queue_full, late, refused` (`calls ==
///   replies + errors + in_flight`; `errors` is the sum of the five after `in_flight` and
///   `refused`, which a file written before it lacks: read as 0).
///
/// A reader skips record types it does not know and values past those it knows, so version 1
/// can grow new ones; anything else changes the version.
///
/// A reader reads the generation, then the file, then the generation again, and keeps the
/// read only if both are the same even number (retrying otherwise).
pub const COUNTERS_VERSION: u32 = 1;
/// Bytes in the header.
pub(crate) const HEADER_LEN: usize = 128;
/// Bytes in a record.
pub(crate) const RECORD_LEN: usize = 256;
/// Where a record's label starts.
pub(crate) const LABEL_AT: usize = 128;
/// Bytes of a record's label.
pub(crate) const LABEL_LEN: usize = RECORD_LEN - LABEL_AT;
/// The most values a record holds.
pub(crate) const MAX_VALUES: usize = (LABEL_AT - 8) / 8;
/// Bytes of the bus's name in the header.
pub(crate) const NAME_LEN: usize = 64;

// Header offsets.
pub(crate) const MAGIC_AT: usize = 0;
pub(crate) const VERSION_AT: usize = 8;
pub(crate) const HEADER_LEN_AT: usize = 12;
pub(crate) const GENERATION_AT: usize = 16;
pub(crate) const PID_AT: usize = 24;
pub(crate) const STARTED_AT: usize = 32;
pub(crate) const HEARTBEAT_AT: usize = 40;
pub(crate) const INTERVAL_AT: usize = 48;
pub(crate) const COUNT_AT: usize = 56;
pub(crate) const RECORD_LEN_AT: usize = 60;
pub(crate) const NAME_AT: usize = 64;

// Record offsets.
pub(crate) const TYPE_AT: usize = 0;
pub(crate) const VALUE_COUNT_AT: usize = 4;
pub(crate) const VALUES_AT: usize = 8;

/// The most records a file may hold: a writer writes no more, and a reader refuses a file
/// longer than this many records after the header without reading it ([`MAX_FILE_LEN`]).
pub const MAX_RECORDS: usize = 1 << 16;
/// The largest counters file a reader reads (16 MiB and a header): anything larger is not a
/// counters file, and is skipped unread.
pub const MAX_FILE_LEN: u64 = (HEADER_LEN + RECORD_LEN * MAX_RECORDS) as u64;

/// Record type of an edge.
pub const RECORD_EDGE: u32 = 1;
/// Record type of an actor or an external handle.
pub const RECORD_ACTOR: u32 = 2;
/// Record type of an actor's named metric.
pub const RECORD_METRIC: u32 = 3;
/// Record type of an actor's (or a handle's) calls of one service.
pub const RECORD_CALL: u32 = 4;

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The u32 at `at`; the caller checked `at + 4 <= b.len()`.
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// The u64 at `at`; the caller checked `at + 8 <= b.len()`.
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
