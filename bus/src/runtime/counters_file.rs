//! The live counters file: every figure of a running bus's report, published in shared memory
//! for other processes (the `llbus` command) to read while the bus runs, after Aeron's CnC file
//! and AeronStat.
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
//! # Where
//! `/dev/shm/llbus-<bus>-<pid>-<n>.cnc` (a tmpfs: shared memory that is also a file), or
//! `$LLBUS_COUNTERS_DIR` if set; `<n>` tells apart buses of one process. The file is created
//! exclusively (never through an existing name or link) and removed when the bus is joined or
//! dropped. A process that dies leaves its file behind: [`CountersSnapshot::is_live`] tells
//! such a stale file from a live one by its process id and its heartbeat, and the next bus
//! started on the host removes the files of processes that are gone.
//!
//! # Layout
//! Documented on [`COUNTERS_VERSION`], in the public docs.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::builder::BusBuilder;
use super::metrics::Report;

impl BusBuilder {
    /// Names the bus (default: the program's file name), for its counters file and the
    /// `llbus` command.
    pub fn name(&mut self, name: &str) -> &mut Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Whether the running bus publishes its counters in a file for other processes (default
    /// yes): see [`counters_dir`]. If the file cannot be made the bus runs all the same, and a
    /// warning is logged.
    pub fn counters_file(&mut self, enabled: bool) -> &mut Self {
        self.counters_file = Some(enabled);
        self
    }
}

/// The default name of a bus: the program's file name.
pub(super) fn default_bus_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "bus".to_owned())
}

/// The file's magic bytes.
pub const COUNTERS_MAGIC: [u8; 8] = *b"LLBUSCNT";
/// The layout version this llbus writes and reads: 1, as follows.
///
/// # Layout, version 1
/// All integers little-endian; offsets in bytes. The file is a header, then `record_count`
/// records of `record_len` bytes each. A reader can map it read-only or read it with `pread`.
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
///
/// A reader skips record types it does not know and values past those it knows, so version 1
/// can grow new ones; anything else changes the version.
///
/// A reader reads the generation, then the file, then the generation again, and keeps the
/// read only if both are the same even number (retrying otherwise).
pub const COUNTERS_VERSION: u32 = 1;
const HEADER_LEN: usize = 128;
const RECORD_LEN: usize = 256;
const LABEL_AT: usize = 128;
const LABEL_LEN: usize = RECORD_LEN - LABEL_AT;
const MAX_VALUES: usize = (LABEL_AT - 8) / 8;
const NAME_LEN: usize = 64;
const GENERATION_AT: u64 = 16;

/// Record type of an edge.
pub const RECORD_EDGE: u32 = 1;
/// Record type of an actor or an external handle.
pub const RECORD_ACTOR: u32 = 2;
/// Record type of an actor's named metric.
pub const RECORD_METRIC: u32 = 3;

/// How often the snapshotter thread copies the counters into the file.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(100);

/// The directory of counters files: `$LLBUS_COUNTERS_DIR`, else `/dev/shm` where it exists,
/// else the temporary directory.
pub fn counters_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LLBUS_COUNTERS_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Every counters file (`llbus-*.cnc`) in [`counters_dir`], live or stale, sorted by name.
///
/// # Errors
/// If the directory cannot be read.
pub fn counters_files() -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(counters_dir())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("llbus-") && n.ends_with(".cnc"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One edge's figures, as read from a counters file (see [`EdgeReport`](crate::EdgeReport)).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EdgeCounts {
    /// The topic name.
    pub topic: String,
    /// The publishing actor or handle.
    pub publisher: String,
    /// The subscribing actor or handle.
    pub subscriber: String,
    /// The backpressure policy (`Block`, `DropNewest`, `Latest`).
    pub policy: String,
    /// Every message published on the edge.
    pub published: u64,
    /// Messages whose handler returned.
    pub handled: u64,
    /// Messages whose handler panicked.
    pub panicked: u64,
    /// Messages refused by a full ring.
    pub dropped: u64,
    /// Values overwritten before they were read.
    pub conflated: u64,
    /// Publishes that waited for room.
    pub waited: u64,
    /// Messages lost.
    pub lost: u64,
    /// Messages queued now.
    pub in_flight: u64,
    /// The highest queue depth seen.
    pub max_depth: u64,
}

/// One actor's figures, as read from a counters file (see [`ActorReport`](crate::ActorReport)).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ActorCounts {
    /// The actor's (or handle's) name.
    pub name: String,
    /// Its thread.
    pub thread: String,
    /// Messages handled.
    pub handled: u64,
    /// Ticks run.
    pub ticks: u64,
    /// Turns that found nothing to do.
    pub idle_rounds: u64,
    /// Restarts.
    pub restarts: u64,
    /// Panics caught.
    pub panics: u64,
    /// Its named metrics, in registration order.
    pub metrics: Vec<(String, u64)>,
}

/// Everything one read of a counters file gives: who wrote it, when, and the figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CountersSnapshot {
    /// The bus's name.
    pub bus: String,
    /// The writer's process id.
    pub pid: u64,
    /// When the bus started, ns since the UNIX epoch.
    pub started_unix_ns: u64,
    /// When this snapshot was written, ns since the UNIX epoch.
    pub heartbeat_unix_ns: u64,
    /// How often the writer writes, ns.
    pub interval_ns: u64,
    /// The sequence-lock generation of this snapshot (grows by 2 per write).
    pub generation: u64,
    /// Every edge.
    pub edges: Vec<EdgeCounts>,
    /// Every actor and handle.
    pub actors: Vec<ActorCounts>,
}

impl CountersSnapshot {
    /// Whether the writer looks alive: its heartbeat is recent (within ten intervals and at
    /// least two seconds) and, on Linux, its process exists. A file that fails this is stale:
    /// left by a process that died without removing it.
    pub fn is_live(&self) -> bool {
        let now = unix_ns(SystemTime::now());
        let allowed = self.interval_ns.saturating_mul(10).max(2_000_000_000);
        let fresh = now.saturating_sub(self.heartbeat_unix_ns) <= allowed;
        fresh && process_exists(self.pid)
    }
}

fn process_exists(pid: u64) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// What went wrong reading a counters file.
#[derive(Debug)]
pub enum CountersFileError {
    /// The file could not be read.
    Io(io::Error),
    /// It is not a counters file, or is cut short or corrupt; the text says what is wrong.
    Malformed(String),
    /// It is a counters file of another layout version.
    Version(u32),
    /// The writer kept writing while we read, every time we tried.
    Busy,
}

impl std::fmt::Display for CountersFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountersFileError::Io(e) => write!(f, "cannot read the counters file: {e}"),
            CountersFileError::Malformed(what) => {
                write!(f, "not a valid llbus counters file: {what}")
            }
            CountersFileError::Version(v) => write!(
                f,
                "the counters file has layout version {v}, this llbus reads version {COUNTERS_VERSION}: use a matching llbus"
            ),
            CountersFileError::Busy => f.write_str(
                "the counters file changed during every read attempt: try again",
            ),
        }
    }
}

impl std::error::Error for CountersFileError {}

impl From<io::Error> for CountersFileError {
    fn from(e: io::Error) -> Self {
        CountersFileError::Io(e)
    }
}

/// Reads one consistent snapshot from the counters file at `path` (retrying while the writer
/// is in the middle of a write).
///
/// # Errors
/// See [`CountersFileError`].
pub fn read_counters_file(path: &Path) -> Result<CountersSnapshot, CountersFileError> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path)?;
    for _ in 0..100 {
        let len = file.metadata()?.len();
        let len = usize::try_from(len)
            .map_err(|_| CountersFileError::Malformed("the file is too large".to_owned()))?;
        if len > HEADER_LEN + RECORD_LEN * 1_000_000 {
            return Err(CountersFileError::Malformed(format!(
                "{len} bytes is too large for a counters file"
            )));
        }
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)?;
        // A writer in the middle of a write shows the magic and an odd generation.
        let busy = bytes.len() >= HEADER_LEN
            && bytes[..8] == COUNTERS_MAGIC
            && get_u64(&bytes, GENERATION_AT as usize) % 2 == 1;
        if busy {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let snap = decode(&bytes)?;
        let mut g = [0u8; 8];
        file.read_exact_at(&mut g, GENERATION_AT)?;
        if u64::from_le_bytes(g) == snap.generation {
            return Ok(snap);
        }
    }
    Err(CountersFileError::Busy)
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Who writes the file: fixed for its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Writer {
    pub(crate) bus: String,
    pub(crate) pid: u64,
    pub(crate) started_unix_ns: u64,
    pub(crate) interval_ns: u64,
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Writes `fields` NUL-separated into `out` (NUL-padded), cutting every field alike when they
/// do not fit, and never leaving a NUL inside a field.
fn put_label(out: &mut [u8], fields: &[&str]) {
    let total: usize = fields.iter().map(|f| f.len()).sum::<usize>() + fields.len() - 1;
    let each = if total <= out.len() {
        usize::MAX
    } else {
        (out.len() + 1) / fields.len() - 1
    };
    let mut at = 0;
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out[at] = 0;
            at += 1;
        }
        let f = cut(f, each);
        for (dst, src) in out[at..].iter_mut().zip(f.bytes()) {
            *dst = if src == 0 { b' ' } else { src };
        }
        at += f.len();
    }
}

fn put_record(out: &mut Vec<u8>, type_id: u32, values: &[u64], label: &[&str]) {
    debug_assert!(values.len() <= MAX_VALUES);
    let mut rec = [0u8; RECORD_LEN];
    put_u32(&mut rec, 0, type_id);
    put_u32(&mut rec, 4, values.len() as u32);
    for (i, v) in values.iter().enumerate() {
        put_u64(&mut rec, 8 + 8 * i, *v);
    }
    put_label(&mut rec[LABEL_AT..], label);
    out.extend_from_slice(&rec);
}

/// What the file shows: a visitor that hands each record (type id, values, label fields) to
/// `rec`, in order (a metric record after its actor's).
pub(crate) trait Source {
    fn visit(&self, rec: &mut Visitor<'_>);
}

/// Takes one record: its type id, its values and its label's fields.
pub(crate) type Visitor<'a> = dyn FnMut(u32, &[u64], &[&str]) + 'a;

/// The live counters of a running bus: read where they are, with no allocation (the named
/// metrics under the lock they are registered with, which no message path takes).
pub(crate) struct Live {
    pub(crate) edges: Vec<super::start::EdgeInfo>,
    pub(crate) actors: Vec<super::start::ActorInfo>,
}

impl Source for Live {
    fn visit(&self, rec: &mut Visitor<'_>) {
        for e in &self.edges {
            let snap = e.counters.snapshot();
            let report = super::running::edge_report_of(e, &snap, String::new(), String::new());
            let label = [e.topic, &e.publisher, &e.subscriber, policy_name(e.policy)];
            rec(RECORD_EDGE, &edge_values(&report), &label);
        }
        for a in &self.actors {
            let c = &a.counters;
            let values = [
                c.handled.get(),
                c.ticks.get(),
                c.idle_rounds.get(),
                c.restarts.get(),
                c.panics.get(),
            ];
            rec(RECORD_ACTOR, &values, &[&a.name, &a.thread]);
            let named = c
                .named
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (name, m) in named.iter() {
                rec(RECORD_METRIC, &[m.get()], &[&a.name, name]);
            }
        }
    }
}

/// The name of a backpressure policy, as the file spells it.
fn policy_name(p: crate::runtime::Backpressure) -> &'static str {
    match p {
        crate::runtime::Backpressure::Block => "Block",
        crate::runtime::Backpressure::DropNewest => "DropNewest",
        crate::runtime::Backpressure::Latest => "Latest",
    }
}

/// The values of an edge record, in the file's order.
pub(crate) fn edge_values(e: &super::metrics::EdgeReport) -> [u64; 9] {
    [
        e.published,
        e.handled,
        e.panicked,
        e.dropped,
        e.conflated,
        e.waited,
        e.lost,
        e.in_flight,
        e.max_depth,
    ]
}

impl Source for Report {
    fn visit(&self, rec: &mut Visitor<'_>) {
        for e in &self.edges {
            let label = [e.topic, &e.publisher, &e.subscriber, policy_name(e.policy)];
            rec(RECORD_EDGE, &edge_values(e), &label);
        }
        for a in &self.actors {
            let values = [a.handled, a.ticks, a.idle_rounds, a.restarts, a.panics];
            rec(RECORD_ACTOR, &values, &[&a.name, &a.thread]);
            for (name, v) in &a.metrics {
                rec(RECORD_METRIC, &[*v], &[&a.name, name]);
            }
        }
    }
}

/// Encodes what `source` shows as a whole file (header and records) with `generation` into
/// `out`, which keeps its allocation from one snapshot to the next: once it has grown to the
/// file's size, encoding allocates nothing. Pure.
pub(crate) fn encode_into(
    out: &mut Vec<u8>,
    writer: &Writer,
    generation: u64,
    heartbeat_unix_ns: u64,
    source: &dyn Source,
) {
    out.clear();
    out.resize(HEADER_LEN, 0);
    let mut count = 0u32;
    source.visit(&mut |type_id, values, label| {
        put_record(out, type_id, values, label);
        count += 1;
    });
    out[..8].copy_from_slice(&COUNTERS_MAGIC);
    put_u32(out, 8, COUNTERS_VERSION);
    put_u32(out, 12, HEADER_LEN as u32);
    put_u64(out, 16, generation);
    put_u64(out, 24, writer.pid);
    put_u64(out, 32, writer.started_unix_ns);
    put_u64(out, 40, heartbeat_unix_ns);
    put_u64(out, 48, writer.interval_ns);
    put_u32(out, 56, count);
    put_u32(out, 60, RECORD_LEN as u32);
    let mut name = [0u8; NAME_LEN];
    put_label(&mut name, &[&writer.bus]);
    out[64..64 + NAME_LEN].copy_from_slice(&name);
}

/// [`encode_into`] a fresh buffer.
#[cfg(test)]
fn encode(
    writer: &Writer,
    generation: u64,
    heartbeat_unix_ns: u64,
    source: &dyn Source,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, writer, generation, heartbeat_unix_ns, source);
    out
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn label_fields(b: &[u8]) -> Vec<String> {
    let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
    b[..end]
        .split(|&c| c == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect()
}

/// Decodes a whole file. Pure; any bytes give a snapshot or an error, never a panic.
///
/// # Errors
/// [`CountersFileError::Malformed`] or [`CountersFileError::Version`].
pub fn decode(b: &[u8]) -> Result<CountersSnapshot, CountersFileError> {
    let bad = |what: String| Err(CountersFileError::Malformed(what));
    if b.len() < HEADER_LEN {
        return bad(format!("{} bytes, shorter than the header", b.len()));
    }
    if b[..8] != COUNTERS_MAGIC {
        return bad("wrong magic bytes".to_owned());
    }
    let version = get_u32(b, 8);
    if version != COUNTERS_VERSION {
        return Err(CountersFileError::Version(version));
    }
    let header_len = get_u32(b, 12) as usize;
    let count = get_u32(b, 56) as usize;
    let record_len = get_u32(b, 60) as usize;
    if header_len < HEADER_LEN || record_len < RECORD_LEN {
        return bad(format!(
            "header length {header_len} or record length {record_len} too small"
        ));
    }
    let needed = count
        .checked_mul(record_len)
        .and_then(|r| r.checked_add(header_len));
    match needed {
        Some(n) if n <= b.len() => {}
        _ => return bad(format!("{count} records do not fit in {} bytes", b.len())),
    }
    let mut snap = CountersSnapshot {
        bus: label_fields(&b[64..64 + NAME_LEN])
            .into_iter()
            .next()
            .unwrap_or_default(),
        pid: get_u64(b, 24),
        started_unix_ns: get_u64(b, 32),
        heartbeat_unix_ns: get_u64(b, 40),
        interval_ns: get_u64(b, 48),
        generation: get_u64(b, 16),
        edges: Vec::new(),
        actors: Vec::new(),
    };
    for i in 0..count {
        let rec = &b[header_len + i * record_len..][..record_len];
        let type_id = get_u32(rec, 0);
        let n = (get_u32(rec, 4) as usize).min(MAX_VALUES);
        let mut values = [0u64; MAX_VALUES];
        for (k, v) in values.iter_mut().enumerate().take(n) {
            *v = get_u64(rec, 8 + 8 * k);
        }
        let mut label = label_fields(&rec[LABEL_AT..LABEL_AT + LABEL_LEN]).into_iter();
        let mut field = || label.next().unwrap_or_default();
        match type_id {
            RECORD_EDGE => snap.edges.push(EdgeCounts {
                topic: field(),
                publisher: field(),
                subscriber: field(),
                policy: field(),
                published: values[0],
                handled: values[1],
                panicked: values[2],
                dropped: values[3],
                conflated: values[4],
                waited: values[5],
                lost: values[6],
                in_flight: values[7],
                max_depth: values[8],
            }),
            RECORD_ACTOR => snap.actors.push(ActorCounts {
                name: field(),
                thread: field(),
                handled: values[0],
                ticks: values[1],
                idle_rounds: values[2],
                restarts: values[3],
                panics: values[4],
                metrics: Vec::new(),
            }),
            RECORD_METRIC => {
                let _actor = field();
                let name = field();
                match snap.actors.last_mut() {
                    Some(a) => a.metrics.push((name, values[0])),
                    None => return bad(format!("record {i}: a metric before any actor")),
                }
            }
            _ => {} // A newer record type of version 1: skipped.
        }
    }
    Ok(snap)
}

/// The counters file of one running bus and the snapshotter thread that keeps it current.
/// Closing it (or dropping it) stops the thread and removes the file.
#[derive(Debug)]
pub(crate) struct CountersFile {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Tells apart the counters files of several buses of one process.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// The writer's process id in a counters file's name (`llbus-<bus>-<pid>-<n>.cnc`).
fn pid_in_name(name: &str) -> Option<u64> {
    let stem = name.strip_prefix("llbus-")?.strip_suffix(".cnc")?;
    let mut parts = stem.rsplitn(3, '-');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

/// Removes the counters files in `dir` left by processes that are gone (on Linux, where that
/// can be told from `/proc`): a crashed bus's file does not outlive the next bus started on the
/// host. Files of other users, or that cannot be removed, are left alone.
fn prune_stale(dir: &Path) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(pid_in_name) else {
            continue;
        };
        if !process_exists(pid) && std::fs::remove_file(e.path()).is_ok() {
            log::info!("removed the stale counters file {}", e.path().display());
        }
    }
}

/// Keeps what may go into a file name: ASCII letters, digits, `_`, `-`, `.`.
fn file_safe(name: &str) -> String {
    let s: String = cut(name, 48)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "bus".to_owned()
    } else {
        s
    }
}

impl CountersFile {
    /// Creates the file for bus `bus` and starts its snapshotter, which calls `snapshot` every
    /// [`SNAPSHOT_INTERVAL`].
    pub(crate) fn create(
        bus: &str,
        source: impl Source + Send + 'static,
    ) -> io::Result<CountersFile> {
        Self::create_in(&counters_dir(), bus, source)
    }

    /// [`create`](Self::create) in directory `dir`.
    pub(crate) fn create_in(
        dir: &Path,
        bus: &str,
        source: impl Source + Send + 'static,
    ) -> io::Result<CountersFile> {
        let pid = u64::from(std::process::id());
        prune_stale(dir);
        let safe = file_safe(bus);
        let (path, file) = loop {
            let n = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("llbus-{safe}-{pid}-{n}.cnc"));
            // `create_new`: never through a name (or a link) someone else made.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1_000_000 => continue,
                Err(e) => return Err(e),
            }
        };
        let writer = Writer {
            bus: bus.to_owned(),
            pid,
            started_unix_ns: unix_ns(SystemTime::now()),
            interval_ns: SNAPSHOT_INTERVAL.as_nanos() as u64,
        };
        // The first snapshot is written before `start()` returns: a reader never finds an
        // empty file of a live bus.
        let mut generation = 0u64;
        let mut buf = Vec::new();
        if let Err(e) = write_snapshot(&file, &writer, &mut generation, &mut buf, &source) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("llbus-counters".to_owned())
            .spawn(move || {
                while !stopping.load(Ordering::Acquire) {
                    std::thread::park_timeout(SNAPSHOT_INTERVAL);
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    if let Err(e) =
                        write_snapshot(&file, &writer, &mut generation, &mut buf, &source)
                    {
                        log::warn!("cannot update the bus's counters file: {e}; it stops updating");
                        break;
                    }
                }
            });
        match thread {
            Ok(thread) => Ok(CountersFile {
                path,
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CountersFile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            log::warn!(
                "cannot remove the bus's counters file {}: {e}",
                self.path.display()
            );
        }
    }
}

/// One write under the sequence lock: the generation goes odd, the whole file is written, the
/// generation goes even.
fn write_snapshot(
    file: &File,
    writer: &Writer,
    generation: &mut u64,
    buf: &mut Vec<u8>,
    source: &dyn Source,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let odd = *generation + 1;
    encode_into(buf, writer, odd, unix_ns(SystemTime::now()), source);
    let bytes: &[u8] = buf;
    let len = bytes.len() as u64;
    if file.metadata()?.len() < len {
        file.set_len(len)?;
    }
    file.write_all_at(&odd.to_le_bytes(), GENERATION_AT)?;
    file.write_all_at(bytes, 0)?;
    *generation = odd + 1;
    file.write_all_at(&generation.to_le_bytes(), GENERATION_AT)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ActorReport, Backpressure, EdgeReport};

    fn sample() -> Report {
        Report {
            edges: vec![EdgeReport {
                topic: "md.quote",
                publisher: "feed".to_owned(),
                subscriber: "strategy".to_owned(),
                policy: Backpressure::DropNewest,
                published: 10,
                handled: 5,
                panicked: 1,
                dropped: 1,
                conflated: 0,
                waited: 7,
                lost: 2,
                in_flight: 1,
                max_depth: 3,
            }],
            actors: vec![ActorReport {
                name: "bridge".to_owned(),
                thread: "io".to_owned(),
                handled: 4,
                ticks: 3,
                idle_rounds: 2,
                restarts: 1,
                panics: 1,
                metrics: vec![("datagrams_sent".to_owned(), 42), ("drops".to_owned(), 1)],
            }],
            stop: None,
        }
    }

    fn writer() -> Writer {
        Writer {
            bus: "demo".to_owned(),
            pid: 7,
            started_unix_ns: 1,
            interval_ns: 2,
        }
    }

    #[test]
    fn a_report_round_trips() {
        let bytes = encode(&writer(), 4, 9, &sample());
        assert_eq!(bytes.len(), HEADER_LEN + 4 * RECORD_LEN);
        let s = decode(&bytes).unwrap();
        assert_eq!((s.bus.as_str(), s.pid, s.generation), ("demo", 7, 4));
        assert_eq!(
            (s.started_unix_ns, s.heartbeat_unix_ns, s.interval_ns),
            (1, 9, 2)
        );
        let e = &s.edges[0];
        assert_eq!(
            (
                e.topic.as_str(),
                e.publisher.as_str(),
                e.subscriber.as_str()
            ),
            ("md.quote", "feed", "strategy")
        );
        assert_eq!(e.policy, "DropNewest");
        assert_eq!(
            [
                e.published,
                e.handled,
                e.panicked,
                e.dropped,
                e.conflated,
                e.waited,
                e.lost,
                e.in_flight,
                e.max_depth
            ],
            [10, 5, 1, 1, 0, 7, 2, 1, 3]
        );
        let a = &s.actors[0];
        assert_eq!(
            [a.handled, a.ticks, a.idle_rounds, a.restarts, a.panics],
            [4, 3, 2, 1, 1]
        );
        assert_eq!(
            a.metrics,
            vec![("datagrams_sent".to_owned(), 42), ("drops".to_owned(), 1)]
        );
    }

    #[test]
    fn long_labels_are_cut_per_field_at_character_boundaries() {
        let mut r = sample();
        r.edges[0].publisher = "é".repeat(100);
        r.edges[0].subscriber = "s".repeat(10);
        let s = decode(&encode(&writer(), 0, 0, &r)).unwrap();
        let e = &s.edges[0];
        assert_eq!(e.topic, "md.quote");
        assert!(
            e.publisher.len() <= 31 && e.publisher.chars().all(|c| c == 'é'),
            "{e:?}"
        );
        assert_eq!(e.subscriber, "s".repeat(10));
        assert_eq!(e.policy, "DropNewest");
    }

    #[test]
    fn broken_files_are_errors_not_panics() {
        let good = encode(&writer(), 0, 0, &sample());
        assert!(matches!(
            decode(&good[..100]),
            Err(CountersFileError::Malformed(_))
        ));
        assert!(matches!(
            decode(&good[..HEADER_LEN + 10]),
            Err(CountersFileError::Malformed(_))
        ));
        let mut wrong = good.clone();
        wrong[0] = b'X';
        assert!(matches!(
            decode(&wrong),
            Err(CountersFileError::Malformed(_))
        ));
        let mut newer = good.clone();
        newer[8] = 2;
        assert!(matches!(decode(&newer), Err(CountersFileError::Version(2))));
        let mut huge = good.clone();
        huge[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&huge),
            Err(CountersFileError::Malformed(_))
        ));
        // An unknown record type of version 1 is skipped.
        let mut unknown = good;
        unknown[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&99u32.to_le_bytes());
        let s = decode(&unknown).unwrap();
        assert!(s.edges.is_empty());
        assert_eq!(s.actors.len(), 1);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048), magic in proptest::bool::ANY) {
            let mut bytes = bytes;
            if magic && bytes.len() >= 16 {
                bytes[..8].copy_from_slice(&COUNTERS_MAGIC);
                bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
            }
            let _ = decode(&bytes);
        }
    }

    #[test]
    fn a_new_file_prunes_those_of_dead_processes_only() {
        assert_eq!(pid_in_name("llbus-my-bus-42-0.cnc"), Some(42));
        assert_eq!(pid_in_name("llbus-x.cnc"), None);
        let dir = std::env::temp_dir().join(format!("llbus-prune-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Beyond any pid_max (2^22 on Linux): no such process.
        let dead = dir.join("llbus-gone-99999999-0.cnc");
        let alive = dir.join(format!("llbus-here-{}-7.cnc", std::process::id()));
        let other = dir.join("unrelated-99999999.cnc");
        for p in [&dead, &alive, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        let file = CountersFile::create_in(&dir, "fresh", Report::default()).unwrap();
        assert_eq!(dead.exists(), !cfg!(target_os = "linux"));
        assert!(alive.exists() && other.exists());
        drop(file);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_file_is_written_live_and_removed_on_close() {
        let dir = std::env::temp_dir().join(format!("llbus-cnc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        /// A sample whose first edge's `published` grows by one per snapshot.
        struct Growing(AtomicU64);
        impl Source for Growing {
            fn visit(&self, rec: &mut Visitor<'_>) {
                let mut r = sample();
                r.edges[0].published = self.0.fetch_add(1, Ordering::Relaxed);
                r.visit(rec);
            }
        }
        let file =
            CountersFile::create_in(&dir, "unit test/bus", Growing(AtomicU64::new(0))).unwrap();
        let path = file.path().to_path_buf();
        assert!(path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("llbus-unit_test_bus-"));
        let first = read_counters_file(&path).unwrap();
        assert_eq!(first.bus, "unit test/bus");
        assert!(first.is_live());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = read_counters_file(&path).unwrap();
            if s.edges[0].published > first.edges[0].published {
                assert!(s.generation > first.generation);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the file never updated"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(file);
        assert!(!path.exists(), "the file outlived its bus");
        // A file whose writer is gone is recognised as stale.
        let mut stale = first;
        stale.heartbeat_unix_ns -= 60_000_000_000;
        assert!(!stale.is_live());
        let _ = std::fs::remove_dir(&dir);
    }
}
