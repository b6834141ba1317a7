//! The recorder's file writer for a caller that has its own messages: a tool that records
//! from the network (`llbus record`) writes the same files, through the same code, as the
//! in-process [`Recorder`](crate::Recorder), on its own thread and its own terms.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::recorder::{Settings, Stats};
use crate::writer::{Channel, Entry, Writer};

/// How files are written: chunk size, compression, how often the current chunk is finished,
/// rotation. The default is the in-process recorder's: zstd level 1, 1 MiB chunks finished
/// at least once a second, no rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileOptions {
    /// The uncompressed size at which a chunk is finished.
    pub chunk_size: u64,
    /// zstd's level, or `None` for uncompressed chunks.
    pub zstd_level: Option<u32>,
    /// The current chunk is finished at least this often (what a crash can lose).
    pub flush_every: Option<Duration>,
    /// A new file once this many bytes of messages are in the current one.
    pub rotate_size: Option<u64>,
    /// A new file once the current one is this old.
    pub rotate_every: Option<Duration>,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            chunk_size: 1 << 20,
            zstd_level: Some(1),
            flush_every: Some(Duration::from_secs(1)),
            rotate_size: None,
            rotate_every: None,
        }
    }
}

/// MCAP files written message by message: the first file is created (with every channel's
/// Schema and Channel records) by [`create`](Self::create); each file ends with the
/// `llbus.recorder` Metadata record, the summary and the footer.
pub struct FileWriter {
    writer: Writer,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("files", &self.files())
            .finish_non_exhaustive()
    }
}

impl FileWriter {
    /// Creates `path` (with rotation: `STEM-0000.EXT`) with `channels`, in that order.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(
        path: impl Into<PathBuf>,
        channels: Vec<Channel>,
        options: &FileOptions,
    ) -> Result<FileWriter, String> {
        if channels.len() > usize::from(u16::MAX) {
            return Err(format!("{} channels: at most 65535", channels.len()));
        }
        let settings = Settings {
            path: path.into(),
            chunk_size: options.chunk_size,
            zstd: options.zstd_level.is_some(),
            zstd_level: options.zstd_level.unwrap_or(0),
            flush_every: options.flush_every,
            rotate_size: options.rotate_size,
            rotate_every: options.rotate_every,
        };
        let stats = Arc::new(Stats::default());
        let mut writer = Writer::new(settings, channels, Arc::clone(&stats));
        writer.open()?;
        Ok(FileWriter { writer, stats })
    }

    /// Writes one Message record on channel `channel` (its index in the list given to
    /// [`create`](Self::create)), then finishes the chunk or rotates if it is time to.
    ///
    /// # Errors
    /// No such channel, or the file cannot be written (nothing more is then).
    pub fn write(
        &mut self,
        channel: usize,
        sequence: u32,
        log_time: u64,
        publish_time: u64,
        data: &[u8],
    ) -> Result<(), String> {
        let topic = u16::try_from(channel).map_err(|_| format!("no channel {channel}"))?;
        let entry = Entry {
            topic,
            sequence,
            log_time,
            publish_time,
            end: data.len(),
        };
        self.writer.write_one(&entry, data)?;
        self.tick()
    }

    /// Finishes the chunk or rotates if it is time to (call it now and then while no message
    /// comes, so that what was written becomes readable).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn tick(&mut self) -> Result<(), String> {
        self.writer.maintain();
        self.error()
    }

    /// How many files were opened.
    pub fn files(&self) -> u64 {
        self.stats.files.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ends the current file (Metadata record, summary, footer).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn finish(mut self) -> Result<(), String> {
        self.writer.close();
        self.error()
    }

    fn error(&self) -> Result<(), String> {
        match self.stats.error.lock() {
            Ok(slot) => slot.clone().map_or(Ok(()), Err),
            Err(_) => Err("the writer's error slot is poisoned".to_owned()),
        }
    }
}
