//! A region of memory that a channel lives in: a shared mapping of a file, or (for tests and
//! miri, which cannot `mmap`) a zeroed heap buffer with the same alignment.

use std::alloc::Layout;
use std::ptr::NonNull;

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

    /// A raw pointer to byte `offset`. The caller checks `offset + n <= len` for what it reads.
    pub(crate) fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: `offset <= len` (the callers' bound: slot offsets come from the private,
        // validated geometry, never from the mapping), so the result stays inside the region.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// Copies `bytes` into the region at `offset` (clipped to the region), as a faulty or
    /// hostile peer would: for tests and fuzzing.
    ///
    /// # Safety
    /// No other thread may access the region during the call (in this process: another
    /// process's accesses are its own business, and ours tolerate any bytes).
    pub unsafe fn poke(&self, offset: usize, bytes: &[u8]) {
        let n = bytes.len().min(self.len.saturating_sub(offset));
        // SAFETY: `offset + n <= len`; the caller guarantees no concurrent access here.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at(offset.min(self.len)), n) };
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
