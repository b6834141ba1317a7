//! The recorder's writer thread: batches of encoded messages in, MCAP files out.
//!
//! The bus side ([`crate::recorder`]) fills a [`Batch`] and hands it over a bounded channel;
//! this thread writes each message into the current chunk, sends the emptied batch back for
//! reuse, finishes the chunk every `flush_every` (so a crash loses at most that much), and
//! rotates to a new file past a size or an age. An I/O error ends the recording: the thread
//! logs it, keeps it for [`RecorderStats::error`](crate::RecorderStats::error), and from then
//! on counts what arrives as dropped, so the bus never notices.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use llbus::TopicSpec;

use crate::mapping::{
    channel_metadata, schema_name, MESSAGE_ENCODING, RECORDER_METADATA, SCHEMA_ENCODING,
};
use crate::recorder::{Settings, Stats};

/// One message's place in a [`Batch`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Index of the topic in the recorder's list.
    pub topic: u16,
    pub sequence: u32,
    pub log_time: u64,
    pub publish_time: u64,
    /// Where the message's bytes end in [`Batch::bytes`] (they start where the previous end).
    pub end: usize,
}

/// Encoded messages on their way to the file. Allocated once, at start, and reused.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub bytes: Vec<u8>,
    pub entries: Vec<Entry>,
}

impl Batch {
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }
}

/// One channel of a file: its topic, message encoding, metadata and schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// The topic name.
    pub topic: String,
    /// The messages' encoding ([`MESSAGE_ENCODING`], `json`, ...).
    pub message_encoding: String,
    /// The channel's metadata ([`crate::META_TOPIC_ID`], [`crate::META_FINGERPRINT`], ...).
    pub metadata: BTreeMap<String, String>,
    /// Its Schema record, if any.
    pub schema: Option<ChannelSchema>,
}

/// A Schema record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSchema {
    /// The type's name.
    pub name: String,
    /// The schema's encoding ([`SCHEMA_ENCODING`], `jsonschema`, ...).
    pub encoding: String,
    /// The schema itself.
    pub data: Vec<u8>,
}

impl Channel {
    /// The channel of a topic of this process's bus: its shape as the schema
    /// ([`SCHEMA_ENCODING`]; none for a shape that does not encode), bincode messages.
    pub(crate) fn of(spec: &TopicSpec) -> Channel {
        let shape = (spec.shape)();
        let schema = match shape.to_bytes() {
            Ok(data) => Some(ChannelSchema {
                name: schema_name(spec, &shape),
                encoding: SCHEMA_ENCODING.to_owned(),
                data,
            }),
            Err(error) => {
                log::warn!(
                    "recorder: topic '{}' is recorded without a schema: {error}",
                    spec.name
                );
                None
            }
        };
        Channel {
            topic: spec.name.to_string(),
            message_encoding: MESSAGE_ENCODING.to_owned(),
            metadata: channel_metadata(spec),
            schema,
        }
    }
}

/// A file being written and where it is.
pub(crate) struct Open {
    writer: mcap::Writer<BufWriter<File>>,
    /// Channel id of each topic, by topic index.
    channels: Vec<u16>,
    opened: Instant,
    /// Bytes of message data and headers written into this file so far (uncompressed): the
    /// rotation measure, cheaper than asking the file.
    written: u64,
    recorded: u64,
}

/// The writer thread's state.
pub(crate) struct Writer {
    settings: Settings,
    topics: Vec<Channel>,
    stats: Arc<Stats>,
    file: Option<Open>,
    /// How many files were opened (the next file's index).
    files: u64,
    last_flush: Instant,
    /// Set after an I/O error: nothing more is written.
    failed: bool,
}

impl Writer {
    pub(crate) fn new(settings: Settings, topics: Vec<Channel>, stats: Arc<Stats>) -> Writer {
        Writer {
            settings,
            topics,
            stats,
            file: None,
            files: 0,
            last_flush: Instant::now(),
            failed: false,
        }
    }

    /// Runs until the bus side hangs up: writes every batch, returns it for reuse.
    pub(crate) fn run(mut self, full: Receiver<Batch>, empty: Sender<Batch>) {
        // The first file exists from the start, with its schemas and channels, even if no
        // message ever comes (later files open with their first message).
        if let Err(error) = self.open() {
            self.fail(&error);
        }
        let tick = self.settings.flush_every.unwrap_or(Duration::from_secs(1));
        loop {
            match full.recv_timeout(tick.min(Duration::from_millis(100))) {
                Ok(mut batch) => {
                    self.write_batch(&batch);
                    batch.clear();
                    // The bus side may be gone already; then the batch is simply freed.
                    let _ = empty.send(batch);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.maintain();
        }
        self.close();
    }

    fn write_batch(&mut self, batch: &Batch) {
        let n = batch.entries.len() as u64;
        if self.failed {
            self.stats.dropped_io.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let mut start = 0;
        for (i, entry) in batch.entries.iter().enumerate() {
            let data = batch.bytes.get(start..entry.end).unwrap_or_default();
            start = entry.end;
            if let Err(error) = self.write_one(entry, data) {
                self.fail(&error);
                let left = n - i as u64;
                self.stats.dropped_io.fetch_add(left, Ordering::Relaxed);
                return;
            }
        }
        self.stats.recorded.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn write_one(&mut self, entry: &Entry, data: &[u8]) -> Result<(), String> {
        let open = self.open()?;
        let channel_id = open
            .channels
            .get(usize::from(entry.topic))
            .copied()
            .ok_or_else(|| format!("no channel for topic index {}", entry.topic))?;
        let header = mcap::records::MessageHeader {
            channel_id,
            sequence: entry.sequence,
            log_time: entry.log_time,
            publish_time: entry.publish_time,
        };
        open.writer
            .write_to_known_channel(&header, data)
            .map_err(|e| e.to_string())?;
        // A message record's header is 22 bytes and its opcode and length 9.
        open.written += 31 + data.len() as u64;
        open.recorded += 1;
        Ok(())
    }

    /// The current file, opened (with its schemas and channels) if there is none.
    pub(crate) fn open(&mut self) -> Result<&mut Open, String> {
        if self.file.is_none() {
            let path = file_path(&self.settings.path, self.settings.rotates(), self.files);
            let file = File::create(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let mut options = mcap::WriteOptions::new()
                .profile("llbus")
                .chunk_size(Some(self.settings.chunk_size))
                // The recorder has one thread; zstd's own workers would compete with the bus.
                .compression_threads(0)
                .compression_level(self.settings.zstd_level);
            options = options.compression(self.settings.zstd.then_some(mcap::Compression::Zstd));
            let mut writer = options
                .create(BufWriter::with_capacity(1 << 16, file))
                .map_err(|e| e.to_string())?;
            let mut channels = Vec::with_capacity(self.topics.len());
            for topic in &self.topics {
                let schema_id = match &topic.schema {
                    Some(s) => writer
                        .add_schema(&s.name, &s.encoding, &s.data)
                        .map_err(|e| e.to_string())?,
                    None => 0,
                };
                let id = writer
                    .add_channel(
                        schema_id,
                        &topic.topic,
                        &topic.message_encoding,
                        &topic.metadata,
                    )
                    .map_err(|e| e.to_string())?;
                channels.push(id);
            }
            self.files += 1;
            self.stats.files.store(self.files, Ordering::Relaxed);
            self.file = Some(Open {
                writer,
                channels,
                opened: Instant::now(),
                written: 0,
                recorded: 0,
            });
        }
        self.file.as_mut().ok_or_else(|| "no file".to_owned())
    }

    /// Finishes the chunk when it is time to, and rotates when the file is full or old.
    pub(crate) fn maintain(&mut self) {
        let Some(open) = &mut self.file else { return };
        let rotate = self
            .settings
            .rotate_size
            .is_some_and(|max| open.written >= max)
            || self
                .settings
                .rotate_every
                .is_some_and(|every| open.opened.elapsed() >= every);
        if rotate {
            self.finish_file();
            return;
        }
        if let Some(every) = self.settings.flush_every {
            if self.last_flush.elapsed() >= every {
                self.last_flush = Instant::now();
                if let Err(error) = open.writer.flush() {
                    self.fail(&error.to_string());
                }
            }
        }
    }

    /// Ends the current file: the recorder's Metadata record, the summary, the footer.
    fn finish_file(&mut self) {
        let Some(mut open) = self.file.take() else {
            return;
        };
        let metadata = mcap::records::Metadata {
            name: RECORDER_METADATA.to_owned(),
            metadata: [
                ("recorded".to_owned(), open.recorded.to_string()),
                (
                    "dropped_total".to_owned(),
                    (self.stats.dropped_handoff.load(Ordering::Relaxed)
                        + self.stats.dropped_io.load(Ordering::Relaxed))
                    .to_string(),
                ),
            ]
            .into(),
        };
        let result = open
            .writer
            .write_metadata(&metadata)
            .and_then(|()| open.writer.finish().map(|_| ()))
            .map_err(|e| e.to_string())
            .and_then(|()| open.writer.into_inner().flush().map_err(|e| e.to_string()));
        if let Err(error) = result {
            self.fail(&error);
        }
    }

    pub(crate) fn close(&mut self) {
        self.finish_file();
    }

    fn fail(&mut self, error: &str) {
        if !self.failed {
            log::error!("recorder: {error}; recording stops, further messages are dropped");
            if let Ok(mut slot) = self.stats.error.lock() {
                *slot = Some(error.to_owned());
            }
        }
        self.failed = true;
        // A file that failed is left as it is: readable up to its last complete chunk.
        self.file = None;
    }
}

/// The path of file number `index`: the path itself without rotation, else
/// `STEM-0000.EXT`, `STEM-0001.EXT`, ...
pub(crate) fn file_path(path: &Path, rotates: bool, index: u64) -> PathBuf {
    if !rotates {
        return path.to_path_buf();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
    let name = match ext {
        Some(ext) => format!("{}-{index:04}.{ext}", stem.unwrap_or_default()),
        None => format!("{}-{index:04}", stem.unwrap_or_default()),
    };
    path.with_file_name(name)
}
