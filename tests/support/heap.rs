//! Counting the server's heap from inside a test process (`idle_session`, `live_stream`,
//! `allocations`): which thread is a server worker, and a global allocator over mimalloc
//! that hands each block it makes or frees to the test's own tally.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

thread_local! {
    /// 0: not classified yet, 1: a worker thread (`tidemark-N`), 2: any other.
    static ROLE: Cell<u8> = const { Cell::new(0) };
}

/// A server worker (`tidemark-0`, `tidemark-1`, …), classified once per thread; false while
/// the thread is being torn down.
pub fn is_worker() -> bool {
    ROLE.try_with(|role| {
        if role.get() == 0 {
            let worker = std::thread::current().name().is_some_and(|name| {
                name.strip_prefix("tidemark-")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            });
            role.set(if worker { 1 } else { 2 });
        }
        role.get() == 1
    })
    .unwrap_or(false)
}

// mimalloc's own size of a block it handed out (its size class), from the library the
// `mimalloc` crate links.
#[allow(unsafe_code)]
extern "C" {
    fn mi_usable_size(p: *const std::ffi::c_void) -> usize;
}

/// The size mimalloc gave live block `p` (its size class).
#[allow(unsafe_code)]
pub fn usable_size(p: *mut u8) -> usize {
    // SAFETY: callers pass a live block mimalloc handed out (freed only after the call).
    unsafe { mi_usable_size(p.cast()) }
}

/// mimalloc, telling its function each block made (`1`) or freed (`-1`): a test's
/// `#[global_allocator] static GLOBAL: CountingMimalloc = CountingMimalloc(note);`.
pub struct CountingMimalloc(pub fn(*mut u8, i64));

// SAFETY: every method forwards to mimalloc unchanged; the counting reads the block's size
// from mimalloc and never touches the memory. (A global allocator cannot be written without
// `unsafe`; the crate denies it elsewhere.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = mimalloc::MiMalloc.alloc(layout);
        (self.0)(p, 1);
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = mimalloc::MiMalloc.alloc_zeroed(layout);
        (self.0)(p, 1);
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        (self.0)(ptr, -1);
        let p = mimalloc::MiMalloc.realloc(ptr, layout, new_size);
        (self.0)(p, 1);
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        (self.0)(ptr, -1);
        mimalloc::MiMalloc.dealloc(ptr, layout)
    }
}
