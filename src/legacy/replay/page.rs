//! The pages a ring's payloads lie in, and the core's spare pages (issue 43 §2).
//!
//! Owns: `PAGE_BYTES`, the per-core list of empty pages (`take`, `give`), bounded by
//! `--replay-spare-pages` (`set_spare_pages_max`, set and filled once per core at its start,
//! so a core holds that many pages, `--replay-spare-pages` × 4 KiB, from its start). A ring takes
//! a page when its newest page has no room for the next payload and gives each page back as
//! its last payload is evicted, or when the ring is dropped: so a ring's pages follow what it
//! holds (no doubling slack, no copy on growth), and a page freed by one session is the next
//! page of another without a trip through the allocator.
//!
//! The spares are a cache, not a budget: an empty list allocates a page, a full list frees the
//! page given to it. So no session can take pages from the others (what each ring holds is
//! bounded by its `--replay-bytes`, all of them by `--core-buffer-bytes`), and the spares cost
//! at most `--replay-spare-pages` × `PAGE_BYTES` a core when nothing needs them. A ring that
//! grows past the spares allocates a page per 4 KiB of growth (the one buffer it replaced
//! allocated once per doubling, and copied what it held each time).
//!
//! Called by: `ring` only. Never: shares a page between threads (the list is thread-local, and
//! a core is a thread), keeps a page whose capacity is not `PAGE_BYTES`, or writes a page's
//! bytes before a payload does (a page is a `Vec` filled by appends, never zeroed).

use std::cell::RefCell;

use crate::config::REPLAY_SPARE_PAGES_MAX;

/// Bytes of one payload page. A payload of at most this many stored bytes lies whole in one
/// page (never split: a final response is read back in one slice, `Event::whole`), so a page
/// ends unused by less than the payload that did not fit; a longer payload gets a block of its
/// own, exactly its length (allocated and freed with it, never a spare). 4 KiB: a stamped
/// `slow_counter` event stores ~60 bytes, an echo's answer ~200, so a page wastes ~1 % at its
/// end, and a live stream's ring (300 events after 30 s at 10/s, ~18 KB) holds five or six pages
/// where its doubling buffer held 32 KiB.
pub(crate) const PAGE_BYTES: usize = 4096;

// A payload's offset and length in its page are 16-bit each in its slot (`ring::Slot::span`).
const _: () = assert!(PAGE_BYTES < 1 << 16);

/// The core's empty pages, at most `max`.
struct Spares {
    pages: Vec<Vec<u8>>,
    max: usize,
}

thread_local! {
    /// This core's spare pages, each empty with a capacity of `PAGE_BYTES`.
    static SPARES: RefCell<Spares> =
        const { RefCell::new(Spares { pages: Vec::new(), max: REPLAY_SPARE_PAGES_MAX }) };
}

/// Sets this core's bound on spare pages (`--replay-spare-pages`, ≥ 1) and makes room for
/// them, so giving a page back never allocates; spares over the new bound are freed. With
/// `fill`, makes the spares up to the bound (a core's start: allocate when a core is made, then
/// reuse, STYLE; the first `max` pages its rings grow by are then no allocation, issue 40 §1).
pub(crate) fn set_spare_pages_max(max: usize, fill: bool) {
    SPARES.with_borrow_mut(|spares| {
        spares.max = max;
        spares.pages.truncate(max);
        spares.pages.reserve_exact(max - spares.pages.len());
        if fill {
            spares.pages.resize_with(max, new_page);
        }
    });
}

/// A page the allocator makes: capacity only, so nothing writes it before its payloads do (a
/// zeroed page cost a 4 KiB memset, ~160 instructions an echo on a growing ring, callgrind).
fn new_page() -> Vec<u8> {
    Vec::with_capacity(PAGE_BYTES)
}

/// An empty page for the newest payloads, `PAGE_BYTES` of capacity: a spare, else a new one.
pub(super) fn take() -> Vec<u8> {
    SPARES
        .try_with(|spares| spares.borrow_mut().pages.pop())
        .ok()
        .flatten()
        .unwrap_or_else(new_page)
}

/// Gives back a page no payload lies in any more: emptied and kept as a spare while there are
/// fewer than the bound, else freed (as it is on a thread whose list is gone, at its exit, and
/// as a large payload's block, whose capacity is not a page's, always is).
pub(super) fn give(mut page: Vec<u8>) {
    if page.capacity() != PAGE_BYTES {
        return;
    }
    page.clear();
    let _ = SPARES.try_with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.pages.len() < spares.max {
            spares.pages.push(page);
        }
    });
}

/// Spare pages this core holds now; for tests.
#[cfg(test)]
pub(super) fn spare_pages() -> usize {
    SPARES.with_borrow(|spares| spares.pages.len())
}
