//! Reading a counters file: one consistent snapshot through the sequence lock, decoded from a
//! private copy of the bytes. What the `llbus` command reads.
//!
//! A counters file is read as untrusted input: it is opened without following links and
//! without blocking (`O_NOFOLLOW | O_NONBLOCK`), and read only if it is a regular file owned by
//! the expected user and no larger than [`MAX_FILE_LEN`] (`file::open_checked`); decoding
//! checks every count and offset against the bytes read, so any bytes give a snapshot or an
//! error, never a panic, a hang, or an allocation larger than the file.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::file::{self, unix_ns};
use super::layout::*;

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
    /// The user who owns the file (the bus's user), as checked when it was opened (0 from
    /// [`decode`], which sees bytes only).
    pub owner: u32,
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
        fresh && file::process_exists(self.pid)
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
    /// Not something to read: a link, a FIFO or another special file, a file of another user
    /// than the directory's, or one too large to be a counters file. It was not read.
    Refused(String),
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
            CountersFileError::Refused(why) => write!(f, "not read: {why}"),
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
/// is in the middle of a write, at most 100 times 1 ms). The file must be a regular file (not
/// a link, a FIFO or a device) owned by the owner of its directory, and at most
/// [`MAX_FILE_LEN`] bytes; anything else is [`CountersFileError::Refused`] without being read,
/// and opening it never blocks.
///
/// # Errors
/// See [`CountersFileError`].
pub fn read_counters_file(path: &Path) -> Result<CountersSnapshot, CountersFileError> {
    let owner = file::dir_owner(path)?;
    read_counters_file_of(path, owner)
}

/// [`read_counters_file`] of a file that must belong to user `owner`.
///
/// # Errors
/// See [`CountersFileError`].
pub fn read_counters_file_of(
    path: &Path,
    owner: u32,
) -> Result<CountersSnapshot, CountersFileError> {
    use std::os::unix::fs::FileExt;
    let (file, len) = file::open_checked(path, owner)?;
    // Never longer than `MAX_FILE_LEN` (checked by `open_checked`), allocated once.
    let mut bytes = Vec::new();
    for _ in 0..100 {
        let now = file.metadata()?.len().min(len);
        bytes.resize(now as usize, 0);
        let got = read_at_most(&file, &mut bytes)?;
        bytes.truncate(got);
        // A writer in the middle of a write shows the magic and an odd generation.
        let busy = bytes.len() >= HEADER_LEN
            && bytes[..8] == COUNTERS_MAGIC
            && get_u64(&bytes, GENERATION_AT) % 2 == 1;
        if busy {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let mut snap = decode(&bytes)?;
        snap.owner = owner;
        let mut g = [0u8; 8];
        file.read_exact_at(&mut g, GENERATION_AT as u64)?;
        if u64::from_le_bytes(g) == snap.generation {
            return Ok(snap);
        }
    }
    Err(CountersFileError::Busy)
}

/// Reads from offset 0 into `buf` until it is full or the file ends (it may have shrunk
/// meanwhile); returns how many bytes it read.
fn read_at_most(file: &std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
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
    let version = get_u32(b, VERSION_AT);
    if version != COUNTERS_VERSION {
        return Err(CountersFileError::Version(version));
    }
    let header_len = get_u32(b, HEADER_LEN_AT) as usize;
    let count = get_u32(b, COUNT_AT) as usize;
    let record_len = get_u32(b, RECORD_LEN_AT) as usize;
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
        bus: label_fields(&b[NAME_AT..NAME_AT + NAME_LEN])
            .into_iter()
            .next()
            .unwrap_or_default(),
        pid: get_u64(b, PID_AT),
        owner: 0,
        started_unix_ns: get_u64(b, STARTED_AT),
        heartbeat_unix_ns: get_u64(b, HEARTBEAT_AT),
        interval_ns: get_u64(b, INTERVAL_AT),
        generation: get_u64(b, GENERATION_AT),
        edges: Vec::new(),
        actors: Vec::new(),
    };
    for i in 0..count {
        let rec = &b[header_len + i * record_len..][..record_len];
        let type_id = get_u32(rec, TYPE_AT);
        let n = (get_u32(rec, VALUE_COUNT_AT) as usize).min(MAX_VALUES);
        let mut values = [0u64; MAX_VALUES];
        for (k, v) in values.iter_mut().enumerate().take(n) {
            *v = get_u64(rec, VALUES_AT + 8 * k);
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
