//! Writing a counters file: what the bus writes. A snapshotter thread, which sleeps between
//! rounds, encodes every figure of the bus (a [`Source`]) into a buffer it reuses and writes it
//! under the sequence lock every [`SNAPSHOT_INTERVAL`].

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use super::file::{self, unix_ns};
use super::layout::*;
use crate::runtime::Report;

/// How often the snapshotter thread copies the counters into the file.
pub const SNAPSHOT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Who writes the file: fixed for its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Writer {
    pub(crate) bus: String,
    pub(crate) pid: u64,
    pub(crate) started_unix_ns: u64,
    pub(crate) interval_ns: u64,
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
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
    put_u32(&mut rec, TYPE_AT, type_id);
    put_u32(&mut rec, VALUE_COUNT_AT, values.len() as u32);
    for (i, v) in values.iter().enumerate() {
        put_u64(&mut rec, VALUES_AT + 8 * i, *v);
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

impl Source for Report {
    fn visit(&self, rec: &mut Visitor<'_>) {
        for e in &self.edges {
            let label = [
                e.topic.as_str(),
                &e.publisher,
                &e.subscriber,
                policy_name(e.policy),
            ];
            rec(RECORD_EDGE, &edge_values(e), &label);
        }
        for a in &self.actors {
            let values = [a.handled, a.ticks, a.idle_rounds, a.restarts, a.panics];
            rec(RECORD_ACTOR, &values, &[&a.name, &a.thread]);
            for (name, v) in &a.metrics {
                rec(RECORD_METRIC, &[*v], &[&a.name, name]);
            }
            for c in self.services.iter().filter(|c| c.caller == a.name) {
                let label = [c.caller.as_str(), c.service.as_str(), &c.server];
                rec(RECORD_CALL, &call_values(c), &label);
            }
        }
    }
}

/// The name of a backpressure policy, as the file spells it.
pub(crate) fn policy_name(p: crate::runtime::Backpressure) -> &'static str {
    match p {
        crate::runtime::Backpressure::Block => "Block",
        crate::runtime::Backpressure::DropNewest => "DropNewest",
        crate::runtime::Backpressure::Latest => "Latest",
    }
}

/// The values of an edge record, in the file's order.
pub(crate) fn edge_values(e: &crate::runtime::EdgeReport) -> [u64; 9] {
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

/// The values of a call record, in the file's order.
pub(crate) fn call_values(c: &crate::runtime::CallReport) -> [u64; 11] {
    [
        c.calls,
        c.replies,
        c.errors,
        c.in_flight,
        c.timeouts,
        c.dropped,
        c.server_panicked,
        c.stopped,
        c.queue_full,
        c.late,
        c.refused,
    ]
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
        // No more than a reader reads: the rest is left out rather than the file refused.
        if (count as usize) < MAX_RECORDS {
            put_record(out, type_id, values, label);
            count += 1;
        }
    });
    out[MAGIC_AT..MAGIC_AT + 8].copy_from_slice(&COUNTERS_MAGIC);
    put_u32(out, VERSION_AT, COUNTERS_VERSION);
    put_u32(out, HEADER_LEN_AT, HEADER_LEN as u32);
    put_u64(out, GENERATION_AT, generation);
    put_u64(out, PID_AT, writer.pid);
    put_u64(out, STARTED_AT, writer.started_unix_ns);
    put_u64(out, HEARTBEAT_AT, heartbeat_unix_ns);
    put_u64(out, INTERVAL_AT, writer.interval_ns);
    put_u32(out, COUNT_AT, count);
    put_u32(out, RECORD_LEN_AT, RECORD_LEN as u32);
    let mut name = [0u8; NAME_LEN];
    put_label(&mut name, &[&writer.bus]);
    out[NAME_AT..NAME_AT + NAME_LEN].copy_from_slice(&name);
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

/// The counters file of one running bus and the snapshotter thread that keeps it current.
/// Closing it (or dropping it) stops the thread and removes the file.
#[derive(Debug)]
pub(crate) struct CountersFile {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CountersFile {
    /// Creates the file for bus `bus` in [`counters_dir`](super::counters_dir) (made if
    /// missing, checked in any case) and starts its snapshotter, which calls `snapshot` every
    /// [`SNAPSHOT_INTERVAL`].
    pub(crate) fn create(
        bus: &str,
        source: impl Source + Send + 'static,
    ) -> io::Result<CountersFile> {
        Self::create_in(&super::counters_dir(), bus, source)
    }

    /// [`create`](Self::create) in directory `dir`.
    pub(crate) fn create_in(
        dir: &Path,
        bus: &str,
        source: impl Source + Send + 'static,
    ) -> io::Result<CountersFile> {
        let pid = u64::from(std::process::id());
        file::prepare_dir(dir)?;
        file::prune_stale(dir);
        let (path, file) = file::create_file(dir, bus, pid)?;
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
    file.write_all_at(&odd.to_le_bytes(), GENERATION_AT as u64)?;
    file.write_all_at(bytes, 0)?;
    *generation = odd + 1;
    file.write_all_at(&generation.to_le_bytes(), GENERATION_AT as u64)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::file::pid_in_name;
    use crate::counters::reader::{decode, read_counters_file, CountersFileError};
    use crate::runtime::{ActorReport, Backpressure, CallReport, EdgeReport};
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    fn sample() -> Report {
        Report {
            edges: vec![EdgeReport {
                topic: crate::TopicName::new("md.quote").expect("a valid name"),
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
            services: vec![CallReport {
                service: crate::TopicName::new("calc.add").expect("a valid name"),
                caller: "bridge".to_owned(),
                server: "adder".to_owned(),
                calls: 26,
                replies: 9,
                errors: 16,
                in_flight: 1,
                timeouts: 1,
                dropped: 2,
                server_panicked: 3,
                stopped: 4,
                queue_full: 0,
                refused: 6,
                late: 5,
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
        assert_eq!(bytes.len(), HEADER_LEN + 5 * RECORD_LEN);
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
        let c = &a.calls[0];
        assert_eq!(
            (c.service.as_str(), c.server.as_str()),
            ("calc.add", "adder")
        );
        assert_eq!(
            [
                c.calls,
                c.replies,
                c.errors,
                c.in_flight,
                c.timeouts,
                c.dropped,
                c.server_panicked,
                c.stopped,
                c.queue_full,
                c.late,
                c.refused
            ],
            [26, 9, 16, 1, 1, 2, 3, 4, 0, 5, 6]
        );
    }

    /// A file written before call records existed (types 1 to 3 only) reads as before, with no
    /// calls; a call record before any actor's is malformed, as a metric's is.
    #[test]
    fn a_file_without_call_records_reads_and_a_stray_call_record_is_malformed() {
        let mut old = sample();
        old.services.clear();
        let bytes = encode(&writer(), 0, 0, &old);
        assert_eq!(bytes.len(), HEADER_LEN + 4 * RECORD_LEN);
        let s = decode(&bytes).unwrap();
        assert_eq!(s.actors.len(), 1);
        assert!(s.actors[0].calls.is_empty());
        let mut stray = encode(&writer(), 0, 0, &sample());
        // The edge record first becomes a call record: no actor before it.
        stray[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&RECORD_CALL.to_le_bytes());
        assert!(matches!(
            decode(&stray),
            Err(CountersFileError::Malformed(_))
        ));
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
