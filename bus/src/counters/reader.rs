//! Reading a counters file: one consistent snapshot through the sequence lock, decoded from a
//! private copy of the bytes. What the `llbus` command reads.
//!
//! A counters file is read as untrusted input: it is opened without following links and
//! without blocking (`O_NOFOLLOW | O_NONBLOCK`), and read only if it is a regular file owned by
//! the expected user and no larger than [`MAX_FILE_LEN`] (`file::open_checked`); decoding
//! checks every count and offset against the bytes read, so any bytes give a snapshot or an
//! error, never a panic, a hang, or an allocation larger than the file.
//!
//! A file that shows the writer in the middle of a write (an odd generation) is retried for at
//! most [`COUNTERS_BUSY_RETRY`], checking its header only, then reported [`CountersFileError::Busy`]; a
//! caller reading many files bounds the retries of all of them with one deadline
//! ([`read_counters_file_until`]), so files forever mid-write cannot add up to a stall. A
//! consistent file is read up to the end of its records, not to the end of the file.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

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
    /// Its calls, one entry per service it calls (see [`CallReport`](crate::CallReport)).
    pub calls: Vec<CallCounts>,
}

/// One caller's calls of one service, as read from a counters file (see
/// [`CallReport`](crate::CallReport)): `calls == replies + errors + in_flight`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallCounts {
    /// The service.
    pub service: String,
    /// The serving actor.
    pub server: String,
    /// Calls made.
    pub calls: u64,
    /// Calls answered by the server.
    pub replies: u64,
    /// Calls ended by an error of the bus's (the six kinds below together, `refused` included).
    pub errors: u64,
    /// Calls not ended yet.
    pub in_flight: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls the server dropped unanswered.
    pub dropped: u64,
    /// Calls held by a server that panicked.
    pub server_panicked: u64,
    /// Calls ended by the stop, or by their server's end.
    pub stopped: u64,
    /// Calls refused for a full queue.
    pub queue_full: u64,
    /// Calls whose service a remote server's bridge refused (0 in a file written before
    /// this count).
    pub refused: u64,
    /// Replies that came after their call had ended.
    pub late: u64,
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

/// How long one file is retried while its writer is in the middle of a write. A write takes
/// microseconds (one `pwrite` of the whole snapshot), so this allows for the writer's thread
/// being descheduled mid-write several times over.
pub const COUNTERS_BUSY_RETRY: Duration = Duration::from_millis(20);

/// Reads one consistent snapshot from the counters file at `path` (retrying while the writer
/// is in the middle of a write, for at most [`COUNTERS_BUSY_RETRY`]). The file must be a regular file (not
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
    read_counters_file_until(path, owner, Instant::now() + COUNTERS_BUSY_RETRY)
}

/// [`read_counters_file_of`], retrying a file whose writer is in the middle of a write only
/// until `deadline` (and for at most [`COUNTERS_BUSY_RETRY`]); past it, the file is read once. A caller
/// that reads many files (`llbus list`) passes them all one deadline, so that any number of
/// files forever in the middle of a write cost at most that long in all, plus one header read
/// each.
///
/// # Errors
/// See [`CountersFileError`]; [`CountersFileError::Busy`] when the writer was in the middle of
/// a write at every attempt.
pub fn read_counters_file_until(
    path: &Path,
    owner: u32,
    deadline: Instant,
) -> Result<CountersSnapshot, CountersFileError> {
    let (file, len) = file::open_checked(path, owner)?;
    let deadline = deadline.min(Instant::now() + COUNTERS_BUSY_RETRY);
    // Never longer than `MAX_FILE_LEN` (checked by `open_checked`).
    let mut bytes = Vec::new();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(mut snap) = read_once(&file, len, &mut bytes)? {
            snap.owner = owner;
            return Ok(snap);
        }
        if Instant::now() + pause > deadline {
            return Err(CountersFileError::Busy);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(8));
    }
}

/// One attempt at a consistent snapshot of a file of at most `len` bytes: `None` if the writer
/// was in the middle of a write before or during it. The header is read first, and the rest
/// only if the generation is even, up to the end of the records the header counts.
fn read_once(
    file: &std::fs::File,
    len: u64,
    bytes: &mut Vec<u8>,
) -> Result<Option<CountersSnapshot>, CountersFileError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_at_most(file, &mut header)?;
    let header = &header[..got];
    let counters = header.len() == HEADER_LEN && header[..8] == COUNTERS_MAGIC;
    let generation = counters.then(|| get_u64(header, GENERATION_AT));
    if generation.is_some_and(|g| g % 2 == 1) {
        return Ok(None);
    }
    let end = if counters {
        u64::from(get_u32(header, HEADER_LEN_AT)).saturating_add(
            u64::from(get_u32(header, COUNT_AT)) * u64::from(get_u32(header, RECORD_LEN_AT)),
        )
    } else {
        // Not a counters file: the header says why.
        header.len() as u64
    };
    let now = file.metadata()?.len().min(len).min(end);
    bytes.resize(now as usize, 0);
    let got = read_at_most(file, bytes)?;
    bytes.truncate(got);
    let decoded = decode(bytes);
    // The generation now, against the one read first: a write in between tore the copy (even
    // one that made it look malformed, with records counted by one write and read from another).
    let unchanged = match generation {
        Some(g) => {
            let mut now = [0u8; 8];
            read_at_most_at(file, &mut now, GENERATION_AT as u64)? == 8
                && u64::from_le_bytes(now) == g
                && decoded.as_ref().map_or(true, |s| s.generation == g)
        }
        None => true,
    };
    if unchanged {
        decoded.map(Some)
    } else {
        Ok(None)
    }
}

/// Reads from offset 0 into `buf` until it is full or the file ends (it may have shrunk
/// meanwhile); returns how many bytes it read.
fn read_at_most(file: &std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    read_at_most_at(file, buf, 0)
}

/// Reads from offset `from` into `buf` until it is full or the file ends; returns how many
/// bytes it read.
fn read_at_most_at(file: &std::fs::File, buf: &mut [u8], from: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], from + at as u64) {
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
    if count > MAX_RECORDS {
        return bad(format!(
            "{count} records, more than any counters file holds ({MAX_RECORDS})"
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
                calls: Vec::new(),
            }),
            RECORD_METRIC => {
                let _actor = field();
                let name = field();
                match snap.actors.last_mut() {
                    Some(a) => a.metrics.push((name, values[0])),
                    None => return bad(format!("record {i}: a metric before any actor")),
                }
            }
            RECORD_CALL => {
                let _caller = field();
                let calls = CallCounts {
                    service: field(),
                    server: field(),
                    calls: values[0],
                    replies: values[1],
                    errors: values[2],
                    in_flight: values[3],
                    timeouts: values[4],
                    dropped: values[5],
                    server_panicked: values[6],
                    stopped: values[7],
                    queue_full: values[8],
                    late: values[9],
                    refused: values[10],
                };
                match snap.actors.last_mut() {
                    Some(a) => a.calls.push(calls),
                    None => return bad(format!("record {i}: calls before any actor")),
                }
            }
            _ => {} // A newer record type of version 1: skipped.
        }
    }
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counters file header of no records at generation `generation`, padded with zeros
    /// (sparse) to `len` bytes, in a fresh directory of ours.
    fn planted(name: &str, generation: u64, len: u64) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("llbus-reader-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("llbus-planted-1-0.cnc");
        let mut b = vec![0u8; HEADER_LEN];
        b[..8].copy_from_slice(&COUNTERS_MAGIC);
        b[VERSION_AT..VERSION_AT + 4].copy_from_slice(&COUNTERS_VERSION.to_le_bytes());
        b[HEADER_LEN_AT..HEADER_LEN_AT + 4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[RECORD_LEN_AT..RECORD_LEN_AT + 4].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
        b[GENERATION_AT..GENERATION_AT + 8].copy_from_slice(&generation.to_le_bytes());
        std::fs::write(&path, &b).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len))
            .unwrap();
        path
    }

    fn remove(path: &Path) {
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_file_forever_mid_write_is_busy_and_a_spent_deadline_allows_one_attempt() {
        let path = planted("busy", 3, 4096);
        let owner = file::dir_owner(&path).unwrap();
        assert!(matches!(
            read_counters_file(&path),
            Err(CountersFileError::Busy)
        ));
        // A deadline already past: one attempt, no sleep (no retries add up over many files).
        let past = Instant::now();
        for _ in 0..1000 {
            assert!(matches!(
                read_counters_file_until(&path, owner, past),
                Err(CountersFileError::Busy)
            ));
        }
        remove(&path);
    }

    #[test]
    fn a_consistent_file_is_read_to_the_end_of_its_records_once() {
        // Zero records in a file of the largest size: a snapshot, whatever the deadline.
        let path = planted("even", 4, MAX_FILE_LEN);
        let owner = file::dir_owner(&path).unwrap();
        let snap = read_counters_file_until(&path, owner, Instant::now()).unwrap();
        assert_eq!((snap.generation, snap.owner), (4, owner));
        assert!(snap.edges.is_empty() && snap.actors.is_empty());
        remove(&path);
        // Not a counters file: its header says so.
        let path = planted("junk", 4, 1 << 20);
        std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
        assert!(matches!(
            read_counters_file(&path),
            Err(CountersFileError::Malformed(_))
        ));
        remove(&path);
    }

    #[test]
    fn a_header_claiming_more_records_than_any_file_holds_is_malformed() {
        let mut b = vec![0u8; HEADER_LEN];
        b[..8].copy_from_slice(&COUNTERS_MAGIC);
        b[VERSION_AT..VERSION_AT + 4].copy_from_slice(&COUNTERS_VERSION.to_le_bytes());
        b[HEADER_LEN_AT..HEADER_LEN_AT + 4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[RECORD_LEN_AT..RECORD_LEN_AT + 4].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
        let claim = |b: &mut Vec<u8>, n: usize| {
            b[COUNT_AT..COUNT_AT + 4].copy_from_slice(&(n as u32).to_le_bytes());
            b.resize(HEADER_LEN + n * RECORD_LEN, 0);
        };
        claim(&mut b, MAX_RECORDS);
        assert!(decode(&b).is_ok());
        claim(&mut b, MAX_RECORDS + 1);
        match decode(&b) {
            Err(CountersFileError::Malformed(why)) => assert!(why.contains("more than"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
