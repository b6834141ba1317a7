//! Channels: one shared ring in one sealed memory file, a [`Sender`] that creates it and
//! listens at the channel's name, and a [`Receiver`] that fetches it from there; each stamps
//! its liveness into the header and watches the other's.
//!
//! Rendezvous: the sender's socket is `DIR/llbus-ipc-NAME` in a directory only this user can
//! write (see [`ChannelConfig::dir`]); the receiver connects, checks that the listener is this
//! user (or one the configuration admits), and receives the memory file's descriptor, which it
//! maps only once it has checked that its size is sealed (see `file` and `rendezvous`). A
//! name whose listener died refuses connections: the next [`Sender::create`] replaces it; a
//! live one is [`OpenError::InUse`].
//!
//! Liveness: each side writes its pid when it takes its side and a `CLOCK_MONOTONIC` stamp on
//! every [`Sender::heartbeat`] / [`Receiver::heartbeat`]. A side is dead when its process is
//! gone (`kill(pid, 0)`) or its stamp is older than [`ChannelConfig::stale_after`] (which also
//! covers a zombie and a reused pid), so a `kill -9` is noticed within `stale_after` plus the
//! watcher's own heartbeat period.

use std::io;
use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use llbus::{Message, Topic, TopicName};

use crate::codec::{CodecError, Pod, SlotCodec};
use crate::file::{self, AdoptError};
use crate::layout::{Geometry, LayoutError, Side};
use crate::region::Region;
use crate::rendezvous::{
    self, Access, FetchError, HandoverError, Listener, Probe, HANDOVER_TIMEOUT,
};
use crate::ring::{RingError, RingReader, RingWriter};
use crate::sys;

/// The start of every channel's socket name.
pub const PREFIX: &str = "llbus-ipc-";

/// Where channels meet, who may use them, and how their rings are made.
#[derive(Clone, Debug)]
pub struct ChannelConfig {
    /// The directory of channel sockets. Default: `$XDG_RUNTIME_DIR/llbus` when that variable
    /// names a directory of this user's, else `/dev/shm/llbus-UID` (the next `llbus-UID-N`, or
    /// `$HOME/.llbus`, when someone else took that name); made mode 0700 if missing.
    /// Whatever it is, it must be a directory (not a link) owned by this user that no other
    /// user can write (its group only if it is [`group`](Self::group)): anything else is
    /// refused with [`OpenError::UnsafeDir`].
    pub dir: PathBuf,
    /// Slots per ring (rounded up to a power of two; default 1024).
    pub capacity: usize,
    /// The largest encoded message for bincode channels (default 1024 bytes; ignored for
    /// plain data, whose slot is the type's size).
    pub max_message: usize,
    /// A group whose members may also use the channel: its socket is made mode 0660 and
    /// given to the group, and a peer whose primary group it is is admitted. Default: none.
    /// (The directory must then let the group in: see [`dir`](Self::dir).)
    pub group: Option<u32>,
    /// Other users admitted at the other end, by explicit opt-in. Default: none: a channel
    /// speaks only with processes of this user (root included: root is not admitted unless
    /// named here, and a root process attaches only to root's channels).
    pub allow_uids: Vec<u32>,
    /// A peer whose stamp is older than this is dead (default 1 s). Also bounds how long
    /// [`Receiver::open`] waits for a listener's answer (and 250 ms does in any case).
    pub stale_after: Duration,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            dir: file::default_dir(),
            capacity: 1024,
            max_message: 1024,
            group: None,
            allow_uids: Vec::new(),
            stale_after: Duration::from_secs(1),
        }
    }
}

impl ChannelConfig {
    /// The socket of channel `name`: `DIR/llbus-ipc-NAME`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{PREFIX}{name}"))
    }

    fn mode(&self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }

    fn access(&self) -> Access {
        Access {
            me: file::euid(),
            uids: self.allow_uids.clone(),
            group: self.group,
        }
    }

    /// Checks (and with `create`, makes) the directory. `Ok(false)`: missing.
    fn prepare(&self, create: bool) -> Result<bool, OpenError> {
        file::prepare_dir(&self.dir, create, self.group).map_err(|why| OpenError::UnsafeDir {
            dir: self.dir.clone(),
            why,
        })
    }
}

/// Why a channel could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The channel name is empty, too long, or holds a character other than `[A-Za-z0-9._-]`.
    BadName(String),
    /// A live process already writes (or reads) this channel.
    InUse {
        /// The channel.
        name: String,
        /// The process that holds it; 0 when it could not be told (a listener at the name
        /// that does not take connections: a stopped writer, or another program).
        pid: u32,
    },
    /// No writer listens at the name yet (or the one that did died): try again later.
    NotReady,
    /// The channel directory cannot be trusted (or made): the text says why.
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The name, or the process at the other end, belongs to a user this channel does not
    /// admit: refused, never used.
    Foreign {
        /// The channel's socket.
        path: PathBuf,
        /// The user who owns it (or runs the process at the other end).
        uid: u32,
        /// That process, if one answered.
        pid: Option<u32>,
    },
    /// The writer handed over memory whose size is not sealed (another process could shrink
    /// it under us): refused.
    Unsealed,
    /// The writer did not hand over a channel: it did not take the connection in time,
    /// closed it, sent something else (memory that is not a channel's size, or not ordinary
    /// shared memory: huge pages, a file on disk), or nothing within `stale_after`.
    Handover(String),
    /// The memory's header is from another version or corrupt.
    Layout(LayoutError),
    /// The channel carries another topic: its header's topic id is not the id of the topic
    /// this side names (another name, or another type's default name).
    Topic {
        /// The channel.
        channel: String,
        /// The topic this side expects.
        ours: String,
        /// Its id.
        ours_id: u64,
        /// The id the channel's header carries.
        theirs_id: u64,
    },
    /// The two sides disagree on the topic's type: its schema fingerprint or slot encoding.
    Fingerprint {
        /// The topic.
        topic: String,
        /// Our fingerprint (and slot size) for it.
        ours: (u64, usize),
        /// The other side's.
        theirs: (u64, usize),
    },
    /// The operating system refused.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::BadName(n) => write!(
                f,
                "bad channel name {n:?}: use 1-200 characters of [A-Za-z0-9._-]"
            ),
            OpenError::InUse { name, pid: 0 } => write!(
                f,
                "channel '{name}' is in use by a process that does not answer (a stopped writer, or another program listening at its name): left alone"
            ),
            OpenError::InUse { name, pid } => {
                write!(f, "channel '{name}' is in use by live process {pid}")
            }
            OpenError::NotReady => f.write_str("channel not created yet: retry"),
            OpenError::UnsafeDir { dir, why } => write!(
                f,
                "channel directory {} refused: {why}",
                dir.display()
            ),
            OpenError::Foreign { path, uid, pid } => write!(
                f,
                "{} belongs to uid {uid}{}, not to this user ({}) nor to a user or group the channel admits: refused (a squatter, or set ChannelConfig::allow_uids)",
                path.display(),
                pid.map(|p| format!(" (process {p})")).unwrap_or_default(),
                file::euid()
            ),
            OpenError::Unsealed => f.write_str(
                "the writer handed over memory it could still shrink (not a sealed memory file): refused",
            ),
            OpenError::Handover(why) => write!(f, "no channel from the writer: {why}"),
            OpenError::Layout(e) => e.fmt(f),
            OpenError::Topic {
                channel,
                ours,
                ours_id,
                theirs_id,
            } => write!(
                f,
                "channel '{channel}' carries topic id {theirs_id:#018x}, not topic '{ours}' ({ours_id:#018x}): another topic's channel (another name, or another type); import each channel as the topic it carries"
            ),
            OpenError::Fingerprint {
                topic,
                ours,
                theirs,
            } => write!(
                f,
                "topic '{topic}': schema mismatch between the processes (fingerprint {:#018x}, slot {} here; {:#018x}, slot {} there): build both from the same message type",
                ours.0, ours.1, theirs.0, theirs.1
            ),
            OpenError::Io(e) => write!(f, "channel: {e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::NotFound {
            OpenError::NotReady
        } else {
            OpenError::Io(e)
        }
    }
}

fn check_name(name: &str) -> Result<(), OpenError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(OpenError::BadName(name.to_owned()))
    }
}

/// The channel of topic `name` (the name it runs under): the name, each `/` written `.`, then
/// `-` and the name's id in 16 hex digits (`md.quote.nyse-8f0c...`), so that two names never
/// share a channel (`a/b` and `a.b` differ in their ids). What [`Sender::create_on`] and
/// [`Receiver::open_on`] meet at when the components are given a topic.
pub fn topic_channel(name: &TopicName) -> String {
    format!("{}-{:016x}", name.as_str().replace('/', "."), name.id())
}

/// What a side knows of the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Nobody holds the other side (yet, or any more).
    Absent,
    /// The other side is held by a live process.
    Alive(u32),
    /// The other side left gracefully.
    Closed,
    /// The other side's process died, or stopped stamping for longer than `stale_after`.
    Dead(u32),
    /// The reader found the ring corrupt and left: the writer must [`Sender::reset`] it.
    Broken,
}

/// `Side::closed` values.
const OPEN: u32 = 0;
const CLOSED: u32 = 1;
const BROKEN: u32 = 2;

fn peer_state(side: &Side, stale_after: Duration, check_pid: bool) -> PeerState {
    let pid = side.pid.load(Ordering::Acquire);
    match side.closed.load(Ordering::Acquire) {
        OPEN => {}
        BROKEN => return PeerState::Broken,
        _ => return PeerState::Closed,
    }
    if pid == 0 {
        return PeerState::Absent;
    }
    let stamp = side.stamp.load(Ordering::Acquire);
    let age = sys::now_ns().saturating_sub(stamp);
    if age > stale_after.as_nanos() as u64 || (check_pid && !sys::pid_alive(pid)) {
        PeerState::Dead(pid)
    } else {
        PeerState::Alive(pid)
    }
}

fn take_side(side: &Side) {
    side.closed.store(OPEN, Ordering::Relaxed);
    side.stamp.store(sys::now_ns(), Ordering::Relaxed);
    side.generation.fetch_add(1, Ordering::Relaxed);
    side.pid.store(sys::my_pid(), Ordering::Release);
}

/// Removes stale channel sockets from `dir`: sockets of this user at which nobody listens any
/// more (their writer died), and temporary files of older versions left by processes that are
/// gone. Returns how many it removed. Anything of another user, or that it cannot read, is left
/// alone. (`stale_after` is ignored: whether anyone listens is the test.)
///
/// # Errors
/// If `dir` cannot be listed.
pub fn remove_stale(dir: &Path, stale_after: Duration) -> io::Result<usize> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let _ = stale_after;
    let me = file::euid();
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(PREFIX) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.uid() != me {
            continue;
        }
        let Some(id) = file::id_of(&path) else {
            continue;
        };
        if meta.file_type().is_socket() {
            // A listener that does not answer is alive (stopped, perhaps): left alone.
            if let Ok(Probe::Gone) = rendezvous::probe(&path) {
                removed += file::unlink_if(&path, id) as usize;
            }
            continue;
        }
        if let Some((_, pid)) = name.rsplit_once(".tmp.") {
            if pid.parse().map(|p| !sys::pid_alive(p)).unwrap_or(false) {
                removed += file::unlink_if(&path, id) as usize;
            }
        }
    }
    Ok(removed)
}

/// Makes a fresh ring of geometry `geo` in a new sealed memory file, the writer's side taken.
fn create_ring(name: &str, geo: Geometry, len: usize) -> Result<(RingWriter, OwnedFd), OpenError> {
    let (fd, region) = file::create_region(name, len)?;
    take_side(&region.header().writer.0);
    let ring = RingWriter::create(region, geo).map_err(OpenError::Layout)?;
    Ok((ring, fd))
}

/// Marks the writer's side closed and wakes a sleeping reader so that it sees it at once.
fn close_writer(h: &crate::layout::Header) {
    h.writer.0.closed.store(CLOSED, Ordering::Release);
    h.reader_sleeps.0.store(0, Ordering::Relaxed);
    sys::futex_wake(&h.reader_sleeps.0);
}

/// What is at a channel's name before a sender takes it.
fn clear_name(name: &str, path: &Path, access: &Access) -> Result<(), OpenError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(OpenError::Io(e)),
    };
    let Some(id) = file::id_of(path) else {
        return Ok(());
    };
    if meta.uid() != access.me {
        // Only possible in a directory others may write (a group's), or made by root: never
        // used, never removed by us, reported.
        return Err(OpenError::Foreign {
            path: path.to_owned(),
            uid: meta.uid(),
            pid: None,
        });
    }
    if meta.file_type().is_socket() {
        match rendezvous::probe(path) {
            Ok(Probe::Live(who)) => {
                return Err(OpenError::InUse {
                    name: name.to_owned(),
                    pid: who.pid,
                })
            }
            // Something listens but never takes the connection (a stopped writer, or a
            // squatter of this user): not ours to replace, and not worth a hang.
            Ok(Probe::Unanswered) => {
                return Err(OpenError::InUse {
                    name: name.to_owned(),
                    pid: 0,
                })
            }
            Ok(Probe::Gone) => log::info!(
                "llbus-ipc: replacing channel socket {} left by a writer that is gone",
                path.display()
            ),
            Err(e) => return Err(OpenError::Io(e)),
        }
    } else {
        log::info!(
            "llbus-ipc: replacing {} (not a channel socket: an older version's file, or garbage)",
            path.display()
        );
    }
    file::unlink_if(path, id);
    Ok(())
}

/// The writing side of a channel: makes the ring's memory and listens at the channel's name.
#[derive(Debug)]
pub struct Sender<T, C> {
    ring: RingWriter,
    listener: Listener,
    name: String,
    path: PathBuf,
    topic: TopicName,
    stale_after: Duration,
    /// A slot's worth of private bytes that the codec builds a message in.
    scratch: Box<[u8]>,
    _t: PhantomData<fn(T, C)>,
}

/// Why a message was not sent; the ring is unusable after `Corrupt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The reader wrote an out-of-range index: drop this sender and make a new one.
    Corrupt(RingError),
    /// The message does not fit a slot (bincode channels): it was not sent.
    Codec(CodecError),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Corrupt(e) => e.fmt(f),
            SendError::Codec(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SendError {}

impl<T: Message, C: SlotCodec<T>> Sender<T, C> {
    /// Creates channel `name` for `T`'s default topic: [`create_on`](Self::create_on) of
    /// [`Topic::of`].
    ///
    /// # Errors
    /// As [`create_on`](Self::create_on).
    pub fn create(name: &str, config: &ChannelConfig) -> Result<Self, OpenError> {
        Self::create_on(name, &Topic::of(), config)
    }

    /// Creates channel `name` for `topic`: its ring in a new sealed memory file, whose header
    /// carries the topic's id and `T`'s fingerprint, and its socket in `config.dir` (made if
    /// missing, checked in any case). A socket left there by a writer that died is replaced
    /// (and logged); a live writer's is refused; anything of another user is reported and left
    /// alone.
    ///
    /// # Errors
    /// [`OpenError::BadName`], [`OpenError::UnsafeDir`], [`OpenError::InUse`],
    /// [`OpenError::Foreign`], or [`OpenError::Io`].
    pub fn create_on(
        name: &str,
        topic: &Topic<T>,
        config: &ChannelConfig,
    ) -> Result<Self, OpenError> {
        check_name(name)?;
        config.prepare(true)?;
        let path = config.path(name);
        let access = config.access();
        clear_name(name, &path, &access)?;
        let capacity = config
            .capacity
            .max(1)
            .checked_next_power_of_two()
            .ok_or(OpenError::Layout(LayoutError::Corrupt("capacity")))?;
        let geo = Geometry {
            kind: C::KIND,
            slot_size: C::slot_size(config.max_message),
            capacity,
            fingerprint: T::FINGERPRINT,
            topic_id: topic.id(),
        };
        let len = geo.validate().map_err(OpenError::Layout)?;
        let (ring, fd) = create_ring(name, geo, len)?;
        let listener = match Listener::bind(&path, config.mode(), config.group, access, fd) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                // Another writer took the name between our look and our bind.
                let pid = match rendezvous::probe(&path) {
                    Ok(Probe::Live(p)) => p.pid,
                    _ => 0,
                };
                return Err(OpenError::InUse {
                    name: name.to_owned(),
                    pid,
                });
            }
            Err(e) => return Err(OpenError::Io(e)),
        };
        Ok(Sender {
            ring,
            listener,
            name: name.to_owned(),
            path,
            topic: topic.name().clone(),
            stale_after: config.stale_after,
            scratch: vec![0u8; geo.slot_size].into_boxed_slice(),
            _t: PhantomData,
        })
    }

    /// Replaces the channel's ring with a fresh, empty one (after the reader reported the ring
    /// [`PeerState::Broken`], or [`SendError::Corrupt`]); the reader fetches the new one.
    /// Returns how many messages the old ring still held (lost).
    ///
    /// # Errors
    /// [`OpenError::Io`] if the new memory cannot be made; the old ring is closed either way.
    pub fn reset(&mut self) -> Result<u64, OpenError> {
        let geo = *self.ring.geometry();
        let h = self.ring.region().header();
        let head = h.head.0.load(Ordering::Acquire);
        let lost = self
            .ring
            .published()
            .wrapping_sub(head)
            .min(geo.capacity as u64);
        close_writer(h);
        let len = geo.validate().map_err(OpenError::Layout)?;
        let (ring, fd) = create_ring(&self.name, geo, len)?;
        self.listener.replace(fd);
        self.ring = ring;
        Ok(lost)
    }

    /// Connections to the channel's socket refused because of the user who made them.
    pub fn refused(&self) -> u64 {
        self.listener.refused()
    }

    /// Sends `value` if a slot is free; returns whether it was sent.
    ///
    /// # Errors
    /// [`SendError::Corrupt`] if the reader broke the ring; [`SendError::Codec`] if the value
    /// does not fit a slot.
    #[inline]
    pub fn try_send(&mut self, value: &T) -> Result<bool, SendError> {
        let mut codec = Ok(());
        let scratch = &mut self.scratch;
        let n = self
            .ring
            .write_batch(1, |slot| {
                codec = C::encode(value, slot, scratch);
                codec.is_ok()
            })
            .map_err(SendError::Corrupt)?;
        codec.map_err(SendError::Codec)?;
        Ok(n == 1)
    }

    /// Sends values from `next` into free slots, at most `max`, publishing them together;
    /// `next` returns `None` when it has no more. Returns how many were sent. A value that does
    /// not fit a slot is skipped and counted in the second figure.
    ///
    /// # Errors
    /// [`SendError::Corrupt`] if the reader broke the ring.
    pub fn send_batch<F: FnMut() -> Option<T>>(
        &mut self,
        max: usize,
        mut next: F,
    ) -> Result<(usize, usize), SendError> {
        let mut skipped = 0;
        let scratch = &mut self.scratch;
        let n = self
            .ring
            .write_batch(max, |slot| loop {
                match next() {
                    None => return false,
                    Some(v) => match C::encode(&v, slot, scratch) {
                        Ok(()) => return true,
                        Err(_) => skipped += 1,
                    },
                }
            })
            .map_err(SendError::Corrupt)?;
        Ok((n, skipped))
    }

    /// Free slots now.
    ///
    /// # Errors
    /// [`SendError::Corrupt`] if the reader broke the ring.
    pub fn free(&mut self) -> Result<usize, SendError> {
        self.ring.free().map_err(SendError::Corrupt)
    }

    /// Sleeps on the mapping's futex until a slot frees or `timeout` passes.
    ///
    /// # Errors
    /// [`SendError::Corrupt`] if the reader broke the ring.
    pub fn park(&mut self, timeout: Duration) -> Result<(), SendError> {
        self.ring.park(timeout).map_err(SendError::Corrupt)
    }

    /// Stamps our liveness (call at least every `stale_after / 4`), and returns the reader's
    /// state. A dead reader's side is reclaimed (a new reader may take it and resume at its
    /// position). `check_pid` also asks the kernel whether the reader's process exists.
    pub fn heartbeat(&mut self, check_pid: bool) -> PeerState {
        let h = self.ring.region().header();
        h.writer.0.stamp.store(sys::now_ns(), Ordering::Release);
        let state = peer_state(&h.reader.0, self.stale_after, check_pid);
        if let PeerState::Dead(pid) = state {
            // Reclaim: only if nobody replaced it meanwhile.
            let _ = h
                .reader
                .0
                .pid
                .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
        if state == PeerState::Closed && h.reader.0.pid.load(Ordering::Acquire) != 0 {
            return PeerState::Alive(h.reader.0.pid.load(Ordering::Acquire));
        }
        state
    }

    /// The channel's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        self.topic.as_str()
    }
}

impl<T: Message + bytemuck::Pod> Sender<T, Pod> {
    /// Sends the values of `items` while there is room and publishes them with one store;
    /// returns how many were sent. When a slot is exactly a `T` wide (`T`'s size a multiple
    /// of 8), each run of adjacent slots is one copy; otherwise a value at a time, as
    /// [`send_batch`](Self::send_batch).
    ///
    /// # Errors
    /// [`SendError::Corrupt`] if the reader broke the ring.
    pub fn send_slice(&mut self, items: &[T]) -> Result<usize, SendError> {
        let size = std::mem::size_of::<T>();
        if size == 0 || self.ring.geometry().slot_size != size {
            let mut it = items.iter();
            return self
                .send_batch(items.len(), || it.next().copied())
                .map(|(n, _)| n);
        }
        let mut bytes: &[u8] = bytemuck::cast_slice(items);
        self.ring
            .write_runs(items.len(), |run, slots| {
                let (now, rest) = bytes.split_at(run.len().min(bytes.len()));
                if !run.write(0, now) {
                    return 0;
                }
                bytes = rest;
                slots
            })
            .map_err(SendError::Corrupt)
    }
}

impl<T, C> Drop for Sender<T, C> {
    fn drop(&mut self) {
        // The reader drains what is left and lets go; the memory goes with the last mapping,
        // and the listener (dropped next) unlinks the name.
        close_writer(self.ring.region().header());
    }
}

/// The reading side of a channel: maps the memory a [`Sender`] hands over.
#[derive(Debug)]
pub struct Receiver<T, C> {
    ring: RingReader,
    path: PathBuf,
    topic: TopicName,
    stale_after: Duration,
    /// A slot's worth of private bytes that slots are copied into before they are decoded.
    scratch: Box<[u8]>,
    _t: PhantomData<fn() -> (T, C)>,
}

/// Why a receive failed; the receiver is unusable after it and should reconnect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// The writer wrote an out-of-range index.
    Corrupt(RingError),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Corrupt(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RecvError {}

impl<T: Message, C: SlotCodec<T>> Receiver<T, C> {
    /// Attaches to channel `name` of `T`'s default topic: [`open_on`](Self::open_on) of
    /// [`Topic::of`].
    ///
    /// # Errors
    /// As [`open_on`](Self::open_on).
    pub fn open(name: &str, config: &ChannelConfig) -> Result<Self, OpenError> {
        Self::open_on(name, &Topic::of(), config)
    }

    /// Attaches to channel `name` of `topic` in `config.dir`: connects to its writer's
    /// socket, checks that the writer is this user (or one `config` admits), receives the
    /// ring's memory and checks that its size is sealed, then checks the header (its topic id
    /// is `topic`'s, its slot encoding and schema fingerprint `T`'s), and takes the reader's
    /// side (from a dead reader too, resuming at its position). Waits at most
    /// `config.stale_after`, and at most 250 ms, for the writer's answer.
    ///
    /// # Errors
    /// [`OpenError::NotReady`] (no live writer yet: retry later), [`OpenError::UnsafeDir`],
    /// [`OpenError::Foreign`], [`OpenError::Unsealed`], [`OpenError::Handover`],
    /// [`OpenError::Topic`] if the channel carries another topic, [`OpenError::Fingerprint`]
    /// naming the topic if it carries another type, [`OpenError::InUse`] if a live reader holds
    /// it, [`OpenError::Layout`], [`OpenError::Io`].
    pub fn open_on(
        name: &str,
        topic: &Topic<T>,
        config: &ChannelConfig,
    ) -> Result<Self, OpenError> {
        check_name(name)?;
        if !config.prepare(false)? {
            return Err(OpenError::NotReady);
        }
        let path = config.path(name);
        // A live writer answers from a thread of its own within microseconds; a writer that
        // does not (stopped, or not a llbus writer) must not hold a bus thread for long.
        let timeout = config.stale_after.min(HANDOVER_TIMEOUT);
        let (fd, _writer) = match rendezvous::fetch(&path, &config.access(), timeout) {
            Ok(got) => got,
            Err(FetchError::NotThere) => return Err(OpenError::NotReady),
            Err(FetchError::Foreign(who)) => {
                return Err(OpenError::Foreign {
                    path,
                    uid: who.uid,
                    pid: Some(who.pid),
                })
            }
            Err(FetchError::Handover(HandoverError::Garbage(why))) => {
                return Err(OpenError::Handover(why.to_owned()))
            }
            Err(FetchError::Handover(HandoverError::Io(e)) | FetchError::Io(e)) => {
                return Err(OpenError::Io(e))
            }
        };
        let region = match file::adopt(&fd) {
            Ok(r) => r,
            Err(AdoptError::Unsealed) => return Err(OpenError::Unsealed),
            Err(AdoptError::Shape(why)) => return Err(OpenError::Handover(why)),
            Err(AdoptError::Io(e)) => return Err(OpenError::Io(e)),
        };
        // The mapping keeps the memory; the descriptor is not needed any more.
        drop(fd);
        Self::attach(region, name, topic.name(), path, config.stale_after)
    }

    fn attach(
        region: Arc<Region>,
        name: &str,
        topic: &TopicName,
        path: PathBuf,
        stale_after: Duration,
    ) -> Result<Self, OpenError> {
        let ring = RingReader::attach(region).map_err(|e| match e {
            LayoutError::NotReady => OpenError::NotReady,
            e => OpenError::Layout(e),
        })?;
        let geo = *ring.geometry();
        let slot = C::slot_size(geo.slot_size.saturating_sub(8));
        let ours = (T::FINGERPRINT, slot);
        if geo.topic_id != topic.id() {
            return Err(OpenError::Topic {
                channel: name.to_owned(),
                ours: topic.as_str().to_owned(),
                ours_id: topic.id(),
                theirs_id: geo.topic_id,
            });
        }
        if geo.kind != C::KIND || geo.fingerprint != T::FINGERPRINT || geo.slot_size != slot {
            return Err(OpenError::Fingerprint {
                topic: topic.as_str().to_owned(),
                ours,
                theirs: (geo.fingerprint, geo.slot_size),
            });
        }
        let h = ring.region().header();
        if h.writer.0.closed.load(Ordering::Acquire) != OPEN {
            // A finished file (its writer left or was replaced): wait for the next one.
            return Err(OpenError::NotReady);
        }
        match peer_state(&h.reader.0, stale_after, true) {
            PeerState::Alive(pid) if pid != sys::my_pid() => {
                return Err(OpenError::InUse {
                    name: path.display().to_string(),
                    pid,
                })
            }
            _ => take_side(&h.reader.0),
        }
        Ok(Receiver {
            scratch: vec![0u8; geo.slot_size].into_boxed_slice(),
            ring,
            path,
            topic: topic.clone(),
            stale_after,
            _t: PhantomData,
        })
    }

    /// Hands up to `max` messages to `handler`, in order, and returns how many slots it read
    /// and how many of them were malformed (not a value of `T`: counted, skipped).
    ///
    /// # Errors
    /// [`RecvError::Corrupt`] if the writer broke the ring: reconnect.
    #[inline]
    pub fn recv_batch<F: FnMut(T)>(
        &mut self,
        max: usize,
        mut handler: F,
    ) -> Result<(usize, usize), RecvError> {
        let mut malformed = 0;
        let scratch = &mut self.scratch;
        let n = self
            .ring
            .read_batch(max, |slot| match C::decode(slot, scratch) {
                Ok(v) => handler(v),
                Err(_) => malformed += 1,
            })
            .map_err(|e| self.broken(e))?;
        Ok((n, malformed))
    }

    /// Tells the writer the ring is broken (it resets the channel) and returns the error.
    fn broken(&self, e: RingError) -> RecvError {
        let h = self.ring.region().header();
        h.reader.0.closed.store(BROKEN, Ordering::Release);
        RecvError::Corrupt(e)
    }

    /// Messages ready now.
    ///
    /// # Errors
    /// [`RecvError::Corrupt`] if the writer broke the ring.
    pub fn available(&mut self) -> Result<usize, RecvError> {
        self.ring.available().map_err(|e| self.broken(e))
    }

    /// Sleeps on the mapping's futex until a message arrives or `timeout` passes.
    ///
    /// # Errors
    /// [`RecvError::Corrupt`] if the writer broke the ring.
    pub fn park(&mut self, timeout: Duration) -> Result<(), RecvError> {
        self.ring.park(timeout).map_err(|e| self.broken(e))
    }

    /// Stamps our liveness (call at least every `stale_after / 4`) and returns the writer's
    /// state. `check_pid` also asks the kernel whether the writer's process exists.
    pub fn heartbeat(&mut self, check_pid: bool) -> PeerState {
        let h = self.ring.region().header();
        h.reader.0.stamp.store(sys::now_ns(), Ordering::Release);
        peer_state(&h.writer.0, self.stale_after, check_pid)
    }

    /// The channel's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        self.topic.as_str()
    }
}

impl<T: Message + bytemuck::Pod> Receiver<T, Pod> {
    /// Receives up to `out.len()` values into `out`, in order, and frees their slots with one
    /// store; returns how many. When a slot is exactly a `T` wide, each run of adjacent slots
    /// is one copy; otherwise a value at a time, as [`recv_batch`](Self::recv_batch). (Every
    /// bit pattern is a `T`, so there is nothing to reject.)
    ///
    /// # Errors
    /// [`RecvError::Corrupt`] if the writer broke the ring.
    pub fn recv_slice(&mut self, out: &mut [T]) -> Result<usize, RecvError> {
        let size = std::mem::size_of::<T>();
        if size == 0 || self.ring.geometry().slot_size != size {
            let mut slots = out.iter_mut();
            return self
                .recv_batch(slots.len(), |v| {
                    if let Some(slot) = slots.next() {
                        *slot = v;
                    }
                })
                .map(|(n, _)| n);
        }
        let mut dst: &mut [u8] = bytemuck::cast_slice_mut(out);
        let got = self.ring.read_runs(dst.len() / size, |run, _| {
            let (now, rest) = std::mem::take(&mut dst).split_at_mut(run.len());
            // Copied out of the shared run before anything looks at it.
            run.read(0, now);
            dst = rest;
        });
        got.map_err(|e| self.broken(e))
    }

    /// Hands up to `max` values to `f`, in order, each copied out of its slot straight into
    /// the value handed over (no buffer in between), and frees their slots with one store;
    /// returns how many. The plain-data counterpart of the in-process ring's `pop_batch`.
    /// (Every bit pattern is a `T`, so there is nothing to reject; a writer that scribbles on a
    /// published slot yields a wrong value, as with any read.)
    ///
    /// # Errors
    /// [`RecvError::Corrupt`] if the writer broke the ring.
    pub fn recv_each(&mut self, max: usize, mut f: impl FnMut(T)) -> Result<usize, RecvError> {
        let size = std::mem::size_of::<T>();
        if size == 0 || self.ring.geometry().slot_size != size {
            return self.recv_batch(max, f).map(|(n, _)| n);
        }
        let got = self.ring.read_runs(max, |run, slots| {
            run.read_each::<T>(slots, size, &mut f);
        });
        got.map_err(|e| self.broken(e))
    }
}

impl<T, C> Drop for Receiver<T, C> {
    fn drop(&mut self) {
        let h = self.ring.region().header();
        // Release our side so the next reader may take it.
        let _ =
            h.reader
                .0
                .pid
                .compare_exchange(sys::my_pid(), 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}
