//! The shared SPSC ring: llbus's in-process ring (Lamport's buffer with rigtorp's and rtrb's
//! cached indices and batching) laid over a [`Region`] that another process also maps.
//!
//! The protocol is the in-process one: the writer fills slots, then publishes them with one
//! `Release` store of `tail`; the reader loads `tail` with `Acquire`, copies slots out, then
//! frees them with one `Release` store of `head`. Each side keeps its own index privately (it
//! never reads it back from the mapping) and a cached copy of the other's, refreshed only when
//! the cache says full (writer) or empty (reader).
//!
//! Where it differs, because the other side is another process that is not trusted:
//! - **Every index read from the mapping is checked** before use: the writer requires
//!   `tail - head <= capacity` of the `head` it loads, the reader `0 <= tail - head <= capacity`
//!   of the `tail` it loads (wrapping u64 arithmetic). A value outside makes the half
//!   [`RingError::Corrupt`] for good: the caller counts it and reconnects. Slot offsets come
//!   only from the private, checked [`Geometry`] and the private index, so no value in the
//!   mapping can steer an access outside the region.
//! - **Slots are copied, never referenced**: each side reaches slot bytes only through
//!   [`Slots`], which copies them a word at a time through atomics between the region and
//!   private memory, and never as a `&[u8]` (the region module says why). A reader copies a
//!   slot out before it interprets it (plain data), or copies the length prefix, checks it
//!   against the slot, and copies and decodes that many bytes (bincode), so a peer that
//!   scribbles on a slot it published yields a wrong value, never undefined behaviour.
//! - **Sleeping is announced in the mapping** (`reader_sleeps`, `writer_sleeps`): a side that
//!   wants to sleep sets its word, issues a `SeqCst` fence, re-checks the ring, and sleeps on
//!   the word with a futex; the other side, after its `Release` store, issues a `SeqCst` fence
//!   and loads the word, making the wake-up system call only when it is set (Dekker's pattern:
//!   the fences forbid both sides missing each other). The loom model in `loom_models` checks it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::handshake;
use crate::layout::{Geometry, LayoutError, HEADER_LEN};
use crate::region::{Region, Slots};
use crate::sys;

/// Why a ring operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The peer wrote an index or length that breaks the ring's invariants: the ring cannot be
    /// trusted any more. Count it, drop this half and reconnect.
    Corrupt(&'static str),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::Corrupt(what) => write!(
                f,
                "shared ring is corrupt ({what}): the peer is faulty or hostile; reconnect"
            ),
        }
    }
}

impl std::error::Error for RingError {}

/// The writing half of a shared ring.
#[derive(Debug)]
pub struct RingWriter {
    region: Arc<Region>,
    geo: Geometry,
    mask: u64,
    /// Next slot to write; the only copy that counts (the mapping's `tail` is a publication).
    tail: u64,
    /// Last `head` read from the mapping. Invariant: `tail - head_cache <= capacity`.
    head_cache: u64,
    poisoned: Option<&'static str>,
}

/// The reading half of a shared ring.
#[derive(Debug)]
pub struct RingReader {
    region: Arc<Region>,
    geo: Geometry,
    mask: u64,
    /// Next slot to read; the only copy that counts.
    head: u64,
    /// Last `tail` read from the mapping. Invariant: `tail_cache - head <= capacity`.
    tail_cache: u64,
    poisoned: Option<&'static str>,
}

/// `count` adjacent slots from slot `first`: the callers keep `first + count <= capacity`
/// (a private index masked by `capacity - 1`, and `runs`).
///
/// NB: no bounds check per call: the geometry is private, and was checked against the region
/// once (`RingWriter::create`, `RingReader::attach`: `HEADER_LEN + capacity * slot_size` is the
/// region's length, `slot_size` a multiple of 8), so a slot index below the capacity is inside
/// the region. Checking each slot anyway slows a single-value read (the `ipc_read` example,
/// one u64; docs/PERFORMANCE.md, "What the sound copies cost").
#[inline(always)]
fn slots<'a>(region: &'a Region, geo: &Geometry, first: u64, count: usize) -> Slots<'a> {
    debug_assert!(first as usize + count <= geo.capacity);
    let offset = HEADER_LEN + first as usize * geo.slot_size;
    // SAFETY: `HEADER_LEN` and `slot_size` are multiples of 8 (the checked geometry), so are
    // `offset` and the length; `first + count <= capacity` (the callers), so the slots end by
    // `HEADER_LEN + capacity * slot_size`, the region's length (checked at create or attach).
    unsafe { region.slots_unchecked(offset, count * geo.slot_size) }
}

/// A batch of `n` slots from slot `first` (`< capacity`) of a ring of `capacity` slots, as two
/// runs of (first slot, slot count): the second is empty unless the batch wraps.
fn runs(first: u64, n: usize, capacity: usize) -> [(u64, usize); 2] {
    let first_len = n.min(capacity - first as usize);
    [(first, first_len), (0, n - first_len)]
}

impl RingWriter {
    /// Lays a fresh ring of geometry `geo` over `region` (which must be zeroed and exactly
    /// `geo.mapping_len()` bytes) and returns its writer. The header's magic is written last.
    ///
    /// # Errors
    /// [`LayoutError::Corrupt`] if `geo` is out of range or does not match the region's length.
    pub fn create(region: Arc<Region>, geo: Geometry) -> Result<RingWriter, LayoutError> {
        if geo.validate()? != region.len() {
            return Err(LayoutError::Corrupt("mapping length"));
        }
        handshake::prepare();
        let h = region.header();
        h.tail.0.store(0, Ordering::Relaxed);
        h.head.0.store(0, Ordering::Relaxed);
        geo.write(h);
        Ok(RingWriter {
            region,
            geo,
            mask: geo.capacity as u64 - 1,
            tail: 0,
            head_cache: 0,
            poisoned: None,
        })
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The region the ring lives in.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Slots published so far (the private tail).
    pub fn published(&self) -> u64 {
        self.tail
    }

    fn check(&self) -> Result<(), RingError> {
        match self.poisoned {
            Some(what) => Err(RingError::Corrupt(what)),
            None => Ok(()),
        }
    }

    /// Loads and checks the reader's `head`.
    fn refresh_head(&mut self) -> Result<(), RingError> {
        let head = self.region.header().head.0.load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        // The reader's head never passes our tail nor falls more than a ring behind it, and
        // never moves backwards.
        if used > self.geo.capacity as u64
            || head.wrapping_sub(self.head_cache) > self.geo.capacity as u64
        {
            self.poisoned = Some("head out of range");
            return Err(RingError::Corrupt("head out of range"));
        }
        self.head_cache = head;
        Ok(())
    }

    /// How many slots are free now (one `Acquire` load of the reader's `head`).
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the reader's `head` is out of range.
    pub fn free(&mut self) -> Result<usize, RingError> {
        self.check()?;
        self.refresh_head()?;
        self.cached_free()
    }

    /// Free slots by the cached head, refreshed only if the cache says none.
    fn cached_free(&mut self) -> Result<usize, RingError> {
        self.check()?;
        let cap = self.geo.capacity as u64;
        if self.tail.wrapping_sub(self.head_cache) == cap {
            self.refresh_head()?;
        }
        Ok((cap - self.tail.wrapping_sub(self.head_cache)) as usize)
    }

    /// Fills up to `max` free slots with `fill` (called with each slot; it returns `false` to
    /// stop without using the slot), then publishes them with one `Release` store,
    /// and wakes the reader if it announced that it sleeps. Returns how many it published.
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the reader's `head` is out of range.
    pub fn write_batch<F: FnMut(&mut Slots<'_>) -> bool>(
        &mut self,
        max: usize,
        mut fill: F,
    ) -> Result<usize, RingError> {
        let free = self.free_for(max)?;
        let mut n = 0;
        while n < free {
            let index = self.tail.wrapping_add(n as u64) & self.mask;
            // The slot is free (`[tail, head + capacity)`): a well-behaved reader does not touch
            // it until we publish it; a hostile one may scribble on it, which only changes the
            // bytes it will read.
            let mut slot = slots(&self.region, &self.geo, index, 1);
            if !fill(&mut slot) {
                break;
            }
            n += 1;
        }
        self.publish(n);
        Ok(n)
    }

    /// Like [`write_batch`](Self::write_batch), a run of adjacent slots at a time: up to `max`
    /// free slots as at most two runs (the second when the batch wraps), each handed to `fill`
    /// with its slot count; `fill` returns how many of the run's leading slots it filled
    /// (fewer than all ends the batch). One `Release` store publishes them all. A batch of
    /// plain data is then one copy per run instead of a call per slot.
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the reader's `head` is out of range.
    pub fn write_runs<F: FnMut(&mut Slots<'_>, usize) -> usize>(
        &mut self,
        max: usize,
        mut fill: F,
    ) -> Result<usize, RingError> {
        let free = self.free_for(max)?;
        let mut n = 0;
        for (first, len) in runs(self.tail & self.mask, free, self.geo.capacity) {
            if len == 0 {
                break;
            }
            // Free slots, as in `write_batch`; `runs` keeps them below the capacity.
            let mut run = slots(&self.region, &self.geo, first, len);
            let filled = fill(&mut run, len).min(len);
            n += filled;
            if filled < len {
                break;
            }
        }
        self.publish(n);
        Ok(n)
    }

    /// Free slots for a batch of up to `max`: the cached figure, or one `Acquire` load of the
    /// reader's `head` when the cache shows fewer than asked.
    fn free_for(&mut self, max: usize) -> Result<usize, RingError> {
        let mut free = self.cached_free()?;
        if free < max && free < self.geo.capacity {
            self.refresh_head()?;
            free = (self.geo.capacity as u64 - self.tail.wrapping_sub(self.head_cache)) as usize;
        }
        Ok(free.min(max))
    }

    /// Publishes `n` written slots with one `Release` store, and wakes the reader if it
    /// announced that it sleeps.
    fn publish(&mut self, n: usize) {
        if n > 0 {
            self.tail = self.tail.wrapping_add(n as u64);
            let h = self.region.header();
            h.tail.0.store(self.tail, Ordering::Release);
            wake(&h.reader_sleeps.0);
        }
    }

    /// Sleeps until the ring has a free slot or `timeout` passes (the futex in the mapping,
    /// announced in `writer_sleeps`).
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the reader's `head` is out of range.
    pub fn park(&mut self, timeout: Duration) -> Result<(), RingError> {
        if self.cached_free()? > 0 {
            return Ok(());
        }
        // A clone so the header outlives the `&mut self` calls below (park is the slow path).
        let region = Arc::clone(&self.region);
        let word = &region.header().writer_sleeps.0;
        let full = handshake::announce(word, || {
            self.refresh_head()?;
            Ok(self.tail.wrapping_sub(self.head_cache) == self.geo.capacity as u64)
        });
        sleep(word, full, timeout);
        word.store(0, Ordering::Relaxed);
        full.map(|_| ())
    }
}

/// Sleeps on `word` as the handshake decided.
fn sleep<E>(
    word: &std::sync::atomic::AtomicU32,
    decision: Result<handshake::Decision, E>,
    timeout: Duration,
) {
    match decision {
        Ok(handshake::Decision::Sleep) => sys::futex_wait(word, 1, timeout),
        Ok(handshake::Decision::SleepBriefly) => {
            sys::futex_wait(word, 1, timeout.min(Duration::from_micros(50)))
        }
        _ => {}
    }
}

/// The waking side of the sleep handshake: after a `Release` store of an index.
#[inline]
fn wake(word: &std::sync::atomic::AtomicU32) {
    if handshake::must_wake(word) {
        sys::futex_wake(word);
    }
}

impl RingReader {
    /// Attaches to the ring in `region`: reads and checks its header, and resumes at its
    /// current `head` (a reader that replaces a dead one takes over its position).
    ///
    /// # Errors
    /// [`LayoutError`] if the header is not ready, of another version, or out of range.
    pub fn attach(region: Arc<Region>) -> Result<RingReader, LayoutError> {
        let geo = Geometry::read(region.header(), region.len())?;
        handshake::prepare();
        let h = region.header();
        let head = h.head.0.load(Ordering::Acquire);
        let tail = h.tail.0.load(Ordering::Acquire);
        if tail.wrapping_sub(head) > geo.capacity as u64 {
            return Err(LayoutError::Corrupt("head and tail out of range"));
        }
        Ok(RingReader {
            region,
            geo,
            mask: geo.capacity as u64 - 1,
            head,
            tail_cache: head,
            poisoned: None,
        })
    }

    /// The ring's geometry, as checked at attach.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The region the ring lives in.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn check(&self) -> Result<(), RingError> {
        match self.poisoned {
            Some(what) => Err(RingError::Corrupt(what)),
            None => Ok(()),
        }
    }

    /// Loads and checks the writer's `tail`.
    fn refresh_tail(&mut self) -> Result<(), RingError> {
        let tail = self.region.header().tail.0.load(Ordering::Acquire);
        // The writer's tail is never behind our head (nor behind what it published before)
        // and never more than a ring ahead of it.
        if tail.wrapping_sub(self.head) > self.geo.capacity as u64
            || tail.wrapping_sub(self.tail_cache) > self.geo.capacity as u64
        {
            self.poisoned = Some("tail out of range");
            return Err(RingError::Corrupt("tail out of range"));
        }
        self.tail_cache = tail;
        Ok(())
    }

    /// How many slots are ready now (one `Acquire` load of the writer's `tail`).
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the writer's `tail` is out of range.
    pub fn available(&mut self) -> Result<usize, RingError> {
        self.check()?;
        self.refresh_tail()?;
        self.cached_available()
    }

    /// Ready slots by the cached tail, refreshed only if the cache says none.
    fn cached_available(&mut self) -> Result<usize, RingError> {
        self.check()?;
        if self.tail_cache == self.head {
            self.refresh_tail()?;
        }
        Ok(self.tail_cache.wrapping_sub(self.head) as usize)
    }

    /// Hands up to `max` ready slots to `read` (each slot, in order), then frees them
    /// with one `Release` store, and wakes the writer if it announced that it sleeps. Returns
    /// how many it handed over.
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the writer's `tail` is out of range.
    pub fn read_batch<F: FnMut(&Slots<'_>)>(
        &mut self,
        max: usize,
        mut read: F,
    ) -> Result<usize, RingError> {
        let n = self.ready_for(max)?;
        for i in 0..n {
            let index = self.head.wrapping_add(i as u64) & self.mask;
            // Published (`[head, tail)`, the Acquire load of `tail` ordering the writer's
            // stores before our loads). A hostile writer may still change the bytes: `read`
            // copies them out before it looks at them.
            let slot = slots(&self.region, &self.geo, index, 1);
            read(&slot);
        }
        self.release(n);
        Ok(n)
    }

    /// Like [`read_batch`](Self::read_batch), a run of adjacent slots at a time: up to `max`
    /// ready slots as at most two runs (the second when the batch wraps), each handed to `read`
    /// with its slot count, then freed with one `Release` store.
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the writer's `tail` is out of range.
    pub fn read_runs<F: FnMut(&Slots<'_>, usize)>(
        &mut self,
        max: usize,
        mut read: F,
    ) -> Result<usize, RingError> {
        let n = self.ready_for(max)?;
        for (first, len) in runs(self.head & self.mask, n, self.geo.capacity) {
            if len == 0 {
                break;
            }
            let run = slots(&self.region, &self.geo, first, len);
            read(&run, len);
        }
        self.release(n);
        Ok(n)
    }

    /// Ready slots for a batch of up to `max`: the cached figure, or one `Acquire` load of the
    /// writer's `tail` when the cache shows fewer than asked.
    fn ready_for(&mut self, max: usize) -> Result<usize, RingError> {
        let mut n = self.cached_available()?;
        if n < max && n < self.geo.capacity {
            self.refresh_tail()?;
            n = self.tail_cache.wrapping_sub(self.head) as usize;
        }
        Ok(n.min(max))
    }

    /// Frees `n` read slots with one `Release` store, and wakes the writer if it announced
    /// that it sleeps.
    fn release(&mut self, n: usize) {
        if n > 0 {
            self.head = self.head.wrapping_add(n as u64);
            let h = self.region.header();
            h.head.0.store(self.head, Ordering::Release);
            wake(&h.writer_sleeps.0);
        }
    }

    /// Sleeps until the ring has a ready slot or `timeout` passes (the futex in the mapping,
    /// announced in `reader_sleeps`): a writer that publishes wakes it at once.
    ///
    /// # Errors
    /// [`RingError::Corrupt`] if the writer's `tail` is out of range.
    pub fn park(&mut self, timeout: Duration) -> Result<(), RingError> {
        if self.cached_available()? > 0 {
            return Ok(());
        }
        // A clone so the header outlives the `&mut self` calls below (park is the slow path).
        let region = Arc::clone(&self.region);
        let word = &region.header().reader_sleeps.0;
        let empty = handshake::announce(word, || {
            self.refresh_tail()?;
            Ok(self.tail_cache == self.head)
        });
        sleep(word, empty, timeout);
        word.store(0, Ordering::Relaxed);
        empty.map(|_| ())
    }
}
