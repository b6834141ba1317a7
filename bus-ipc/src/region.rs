//! A region of memory that a channel lives in: a shared mapping of a sealed memory file, or
//! (for tests and miri, which cannot `mmap`) a zeroed heap buffer with the same alignment.
//!
//! # Why shared bytes are never behind a Rust reference
//!
//! The peer writes the region whenever it likes, and it is another program: nothing it does is
//! ordered with what we do except through the header's atomics. A `&[u8]` or `&mut [u8]` over
//! such bytes would tell the compiler that they do not change while the reference lives (or
//! that nobody else sees them), which the peer can falsify at any moment: the compiler may then
//! read a length twice and get two answers, which is undefined behaviour whatever the bytes.
//! So slot bytes are reached only through [`Slots`], which holds a raw pointer and moves bytes
//! only by copying them between the region and private memory: a reader copies out a 64-bit
//! atomic (`Relaxed`) load per word; a writer copies in with a raw-pointer copy into slots it
//! owns and never reads back (see `Slots::copy_in`). Everything is interpreted (lengths checked, values decoded) only after
//! it has been copied: a peer that rewrites a slot while we copy it makes us copy a mix of old
//! and new words, each of them some value, never undefined behaviour. The ordering that makes
//! a well-behaved peer's bytes whole comes from the ring's `Release`/`Acquire` on its indices.
//! The header is a struct of atomics, which are allowed behind shared references because they
//! are interior-mutable.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::Header;

/// Where a region's memory came from, and so how to give it back.
#[derive(Debug)]
enum Backing {
    Heap(Layout),
    #[cfg(unix)]
    Map,
}

/// A fixed-size, 128-byte aligned run of bytes that may be shared with another process.
///
/// The bytes may change under us at any time (the peer writes them): the code that reads them
/// goes through atomics (the header) or copies slot bytes out before interpreting them, and
/// never trusts a value it read without checking it.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: a region is a plain run of bytes; every access to it goes through atomics or through
// slot accesses ordered by the ring's Release/Acquire protocol, from whichever thread holds it.
unsafe impl Send for Region {}
// SAFETY: as above: shared access is what a region is for; the ring halves order it.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed heap region of `len` bytes (at least one header), aligned to 128.
    ///
    /// # Panics
    /// If `len` is smaller than the header or the allocation fails.
    pub fn heap(len: usize) -> Region {
        assert!(
            len >= crate::layout::HEADER_LEN,
            "a region holds at least a header"
        );
        let layout = match Layout::from_size_align(len, 128) {
            Ok(l) => l,
            Err(e) => panic!("region of {len} bytes: {e}"),
        };
        // SAFETY: `layout` has a non-zero size (at least HEADER_LEN).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout)
        };
        Region {
            ptr,
            len,
            backing: Backing::Heap(layout),
        }
    }

    /// Takes ownership of a shared mapping made by `mmap` (unmapped on drop).
    ///
    /// # Safety
    /// `ptr` must be the start of a live `MAP_SHARED` read-write mapping of exactly `len` bytes
    /// (page-aligned, so 128-aligned), owned by nobody else.
    #[cfg(unix)]
    pub(crate) unsafe fn from_mapping(ptr: NonNull<u8>, len: usize) -> Region {
        Region {
            ptr,
            len,
            backing: Backing::Map,
        }
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region holds at least a header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The header at offset 0.
    pub(crate) fn header(&self) -> &Header {
        debug_assert!(self.len >= crate::layout::HEADER_LEN);
        // SAFETY: the region is at least HEADER_LEN >= size_of::<Header>() bytes, 128-aligned
        // (the heap layout or a page-aligned mapping), and lives as long as `self`. `Header` is
        // made only of atomics, valid for every bit pattern and sound to share: whatever the
        // peer writes there, reading it is defined.
        unsafe { &*self.ptr.as_ptr().cast::<Header>() }
    }

    /// The `len` bytes at `offset` as [`Slots`], or `None` if they are not 8-aligned or not
    /// inside the region: for tests that reach slots without a ring.
    #[cfg(test)]
    pub(crate) fn slots(&self, offset: usize, len: usize) -> Option<Slots<'_>> {
        let end = offset.checked_add(len)?;
        if end > self.len || offset % 8 != 0 || len % 8 != 0 {
            return None;
        }
        // SAFETY: `offset + len <= self.len`, so the result stays inside the region.
        let ptr = unsafe { self.ptr.as_ptr().add(offset) };
        Some(Slots {
            ptr,
            len,
            _region: PhantomData,
        })
    }

    /// The `len` bytes at `offset` as [`Slots`], unchecked: for the ring halves, whose slot
    /// offsets come from a geometry checked against this region once, at create or attach.
    ///
    /// # Safety
    /// `offset` and `len` are multiples of 8 and `offset + len <= self.len()`.
    #[inline(always)]
    pub(crate) unsafe fn slots_unchecked(&self, offset: usize, len: usize) -> Slots<'_> {
        debug_assert!(offset % 8 == 0 && len % 8 == 0);
        debug_assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        Slots {
            // SAFETY: `offset + len <= self.len` (the caller), so the result stays inside the
            // region.
            ptr: unsafe { self.ptr.as_ptr().add(offset) },
            len,
            _region: PhantomData,
        }
    }

    /// Copies `bytes` into the region at `offset` (clipped to the region), as a faulty or
    /// hostile peer would: for tests and fuzzing.
    ///
    /// # Safety
    /// No other thread may access the region during the call (in this process: another
    /// process's accesses are its own business, and ours tolerate any bytes).
    pub unsafe fn poke(&self, offset: usize, bytes: &[u8]) {
        let offset = offset.min(self.len);
        let n = bytes.len().min(self.len - offset);
        // SAFETY: `offset + n <= len`; the caller guarantees no concurrent access here.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(offset), n) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated in `heap` with exactly this layout, freed once here.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            #[cfg(unix)]
            Backing::Map => {
                // SAFETY: `from_mapping`'s contract: a mapping of `len` bytes we own.
                let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
                if rc != 0 {
                    log::warn!(
                        "llbus-ipc: munmap failed: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
        }
    }
}

/// A run of shared bytes (one slot or several adjacent ones) that is only ever copied, a
/// 64-bit word at a time through atomics, to or from private memory: see the module doc.
///
/// NB: the word loop is the price of soundness in batches: LLVM never widens atomic accesses
/// into vector moves, so on one core a 64-value batch through `send_slice` and `recv_each`
/// costs about twice per value what `memcpy` and a `&[u8]` view would, and `rep movsb` in an
/// `asm!` block (atomic-equivalent) costs more still. Single values cost the same either way
/// (docs/PERFORMANCE.md, "What the sound copies cost").
///
/// Invariant: `ptr` is 8-aligned and `ptr..ptr + len` lies inside a live region for `'a`, with
/// `len` a multiple of 8.
#[derive(Debug)]
pub struct Slots<'a> {
    ptr: *mut u8,
    len: usize,
    _region: PhantomData<&'a Region>,
}

impl Slots<'_> {
    /// The run's length in bytes (a multiple of 8).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the run holds no byte.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The atomic word at byte `at` of the run.
    ///
    /// # Safety
    /// `at` is a multiple of 8 and `at + 8 <= self.len`.
    #[inline(always)]
    unsafe fn word(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at % 8 == 0 && at + 8 <= self.len);
        // SAFETY: the caller keeps the word inside the run, which is 8-aligned and lives for
        // the borrow of `self` (the struct's invariant). Every access this process makes to
        // slot bytes is through such atomics, never a plain reference (the module doc).
        unsafe { AtomicU64::from_ptr(self.ptr.add(at).cast::<u64>()) }
    }

    /// Stores word `v` at byte `at` as another process writing the region reaches us (whole
    /// aligned words, with no ordering), for tests that play a scribbling peer in-process.
    /// Does nothing if the word is not inside the run.
    #[cfg(test)]
    pub(crate) fn scribble(&self, at: usize, v: u64) {
        if at % 8 == 0 && at.checked_add(8).is_some_and(|end| end <= self.len) {
            // SAFETY: the word is inside the run and 8-aligned (checked just above).
            unsafe { self.word(at).store(v, Ordering::Relaxed) };
        }
    }

    /// Copies `n` bytes from byte `offset` of the run to `dst`, a word at a time.
    ///
    /// # Safety
    /// `self.fits(offset, n)`, and `dst` is valid for writes of `n` bytes.
    #[inline(always)]
    unsafe fn copy_out(&self, offset: usize, dst: *mut u8, n: usize) {
        let whole = n / 8;
        for w in 0..whole {
            // SAFETY: `fits` puts every word of the rounded-up range inside the run; `dst`
            // holds `n >= 8 * (w + 1)` bytes.
            unsafe {
                let v = self.word(offset + 8 * w).load(Ordering::Relaxed);
                std::ptr::write_unaligned(dst.add(8 * w).cast::<u64>(), v);
            }
        }
        let rest = n % 8;
        if rest != 0 {
            // SAFETY: as above; the last word is inside the run because `fits` rounded `n` up.
            unsafe {
                let bytes = self
                    .word(offset + 8 * whole)
                    .load(Ordering::Relaxed)
                    .to_ne_bytes();
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.add(8 * whole), rest);
            }
        }
    }

    /// Copies `src` into the run from byte `offset` with one raw-pointer copy, a last partial
    /// word padded with zeros.
    ///
    /// NB: a plain copy, not a word at a time through atomics as reads are: the writer only
    /// writes slots it owns (between the reader's head and its own tail) and never reads them
    /// back, so no value in this process depends on what a scribbling peer might put there,
    /// and no Rust reference to the shared bytes is made. Word-wise atomic stores would cost
    /// batched throughput, since LLVM does not vectorise atomic stores (the `ipc` suite;
    /// docs/PERFORMANCE.md, "What the sound copies cost").
    ///
    /// # Safety
    /// `self.fits(offset, src.len())`.
    #[inline(always)]
    unsafe fn copy_in(&mut self, offset: usize, src: &[u8]) {
        let whole = src.len() - src.len() % 8;
        // SAFETY: `fits` puts `offset..offset + src.len()` rounded up to a word inside the run,
        // which `self.ptr` points into for the borrow; `src` is private memory, so the two do
        // not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), whole);
        }
        let rest = src.len() - whole;
        if rest != 0 {
            let mut b = [0u8; 8];
            b[..rest].copy_from_slice(&src[whole..]);
            // SAFETY: the last word is inside the run because `fits` rounded the length up.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr.add(offset + whole), 8);
            }
        }
    }

    /// Copies `dst.len()` bytes from byte `offset` (a multiple of 8) of the run into `dst`.
    /// Returns false, copying nothing, if `offset` is not a multiple of 8 or the bytes (rounded
    /// up to a whole word) are not all inside the run.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !self.fits(offset, dst.len()) {
            return false;
        }
        // SAFETY: `fits` holds; `dst` is a live buffer of `dst.len()` bytes.
        unsafe { self.copy_out(offset, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the run from byte `offset` (a multiple of 8). A last partial word is
    /// padded with zeros. Returns false, copying nothing, if it does not fit.
    #[inline]
    pub fn write(&mut self, offset: usize, src: &[u8]) -> bool {
        if !self.fits(offset, src.len()) {
            return false;
        }
        // SAFETY: `fits` holds.
        unsafe { self.copy_in(offset, src) };
        true
    }

    /// A plain-data value copied out of the run from byte `offset`, or `None` if it does not
    /// fit. Every bit pattern is a `T`, so whatever the peer wrote is a value.
    #[inline]
    pub fn read_pod<T: bytemuck::Pod>(&self, offset: usize) -> Option<T> {
        let n = std::mem::size_of::<T>();
        if !self.fits(offset, n) {
            return None;
        }
        let mut v = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: `fits` holds and `v` has room for `n` bytes; once all `n` bytes are written,
        // `v` is a `T` because every bit pattern is one (`Pod`).
        unsafe {
            self.copy_out(offset, v.as_mut_ptr().cast::<u8>(), n);
            Some(v.assume_init())
        }
    }

    /// Hands `count` plain-data values laid `stride` bytes apart from the start of the run
    /// (`stride` a multiple of 8, at least a `T`) to `f`, each copied out of the run first;
    /// returns how many it handed over (0 if they do not all fit). The bounds are checked once
    /// for the whole run.
    #[inline]
    pub fn read_each<T: bytemuck::Pod>(
        &self,
        count: usize,
        stride: usize,
        mut f: impl FnMut(T),
    ) -> usize {
        let n = std::mem::size_of::<T>();
        let fits = stride % 8 == 0
            && stride >= n
            && count
                .checked_mul(stride)
                .is_some_and(|total| total <= self.len);
        if !fits || count == 0 {
            return 0;
        }
        for i in 0..count {
            let mut v = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: value `i` starts at `i * stride` (a multiple of 8) and its bytes, rounded
            // up to a word, end by `(i + 1) * stride <= count * stride <= len` (checked above),
            // so `fits(i * stride, n)` holds; once written, `v` is a `T` (`Pod`).
            unsafe {
                self.copy_out(i * stride, v.as_mut_ptr().cast::<u8>(), n);
                f(v.assume_init());
            }
        }
        count
    }

    /// Whether `n` bytes from `offset`, rounded up to whole words, lie inside the run.
    #[inline]
    fn fits(&self, offset: usize, n: usize) -> bool {
        offset % 8 == 0
            && n.checked_next_multiple_of(8)
                .and_then(|n| n.checked_add(offset))
                .is_some_and(|end| end <= self.len)
    }
}
