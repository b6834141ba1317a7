//! Allocation counting for the library's test build: a `#[global_allocator]` that forwards to
//! the system allocator and counts the calls made on the thread that asks, so tests of other
//! threads running beside it do not disturb the count. Nothing else in this build installs a
//! global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

fn note_alloc() {
    let _ = COUNT_HERE.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
pub(crate) fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|n| n.set(0));
    COUNT_HERE.with(|on| on.set(true));
    f();
    COUNT_HERE.with(|on| on.set(false));
    ALLOCS.with(|n| n.get())
}
