//! The slot array, FIFO eviction and per-stream chains behind [`Ring`], plus the [`Replay`]
//! iterator that walks one stream's chain.
//!
//! Held events always form the contiguous range `head..tail` of sequence numbers (every append
//! takes `tail`, every eviction removes `head`), and that range is never longer than the slot
//! array, so `seq & mask` never collides and a lookup is a range check plus one index.

use std::collections::VecDeque;
use std::fmt;
use std::iter::FusedIterator;
use std::num::NonZeroU64;

use super::page::{self, PAGE_BYTES};
use super::{Event, EventSeq, Evicted, ReplayError, StreamKey};
use crate::config::{REPLAY_BYTES_MOST, REPLAY_EVENTS_MOST};
use crate::fasthash::SequenceMap;
use crate::wire::notification::PROGRESS_PREFIX;

/// Slots allocated by the first append (fewer when `events_max` is smaller). An idle session
/// allocates none; a session that has emitted a handful of events holds 16 × 16 bytes (and its
/// first payload page); the array then doubles up to `events_max` as events accumulate, so memory
/// follows the high-water mark of held events, never the configured capacity (100k idle
/// sessions at `events_max` = 2^20 must not cost 2^20 slots each).
pub(super) const SLOTS_INITIAL: usize = 16;

/// `Slot::span` of a payload longer than `PAGE_BYTES`: it fills a block of its own, whose
/// length is the payload's. Never a small payload's span: its offset is below `PAGE_BYTES`.
const LARGE: u32 = u32::MAX;

/// The opening of a payload the ring does not store (issue 43 §2): every
/// `notifications/progress` starts with these 77 bytes, over half of a stamped `slow_counter`
/// event (~130 B), and a live call's ring holds hundreds of them (300 after 30 s at 10/s).
/// An event starting with it keeps only the bytes after it, and a flag in its slot; reads
/// give it back as [`Event::prefix`].
pub(super) const ELIDED_PREFIX: &[u8] = PROGRESS_PREFIX;

/// The bit of `Slot::next_after` that says the payload's `ELIDED_PREFIX` was not stored. Free:
/// a successor's distance is below `events_max` ≤ `REPLAY_EVENTS_MOST` = 2^31.
const ELIDED: u32 = 1 << 31;
const _: () = assert!(REPLAY_EVENTS_MOST <= ELIDED as usize);

/// One held event. 16 bytes (40, then 24 before issue 43 §2: the offset, length and successor
/// were 64-bit, then the slot kept its own sequence number; at 10 events/s a live stream holds
/// 300 after 30 s, 512 slots): where its payload lies (a page and a span in it), its
/// successor's distance and the stream key. Its sequence number is where it lies: the event
/// `seq` is the slot `seq & mask` exactly when `head <= seq < tail`, so the slot need not say
/// it, and a slot outside that range is a leftover (`Slot::FREE` or an evicted event's) never
/// read.
#[derive(Clone, Copy)]
struct Slot {
    stream: StreamKey,
    /// The stream's next event is `seq + (next_after & !ELIDED)`; 0 until it is appended (see
    /// [`Event`]). Both are held then, so the distance is below `events_max` (≤
    /// `REPLAY_EVENTS_MOST`). The `ELIDED` bit is set exactly when the payload began with
    /// `ELIDED_PREFIX` and only the bytes after it are stored.
    next_after: u32,
    /// The number of the page the stored payload lies in (`Pages::first` numbers the oldest;
    /// numbers wrap, and only differences are read); 0 for an empty payload.
    page: u32,
    /// Where in that page: offset × 2^16 + length (both below `PAGE_BYTES` < 2^16, and 0 for an
    /// empty payload), or `LARGE` for a payload that fills a block of its own.
    span: u32,
}

// The memory per held event that the docs and the bench quote.
const _: () = assert!(std::mem::size_of::<Slot>() == 16);

impl Slot {
    /// What a slot holds before its first event.
    const FREE: Slot = Slot { stream: StreamKey(0), next_after: 0, page: 0, span: 0 };

    /// The opening of the payload that is not stored: `ELIDED_PREFIX` or nothing.
    fn prefix(&self) -> &'static [u8] {
        if self.next_after & ELIDED == 0 {
            b""
        } else {
            ELIDED_PREFIX
        }
    }

    /// Distance to the stream's next event; 0 until it is appended.
    fn distance(&self) -> u32 {
        self.next_after & !ELIDED
    }

    /// The stream's next held event, if appended, for this slot's event `seq`.
    fn next(&self, seq: NonZeroU64) -> Option<NonZeroU64> {
        NonZeroU64::new(self.distance().into()).and_then(|after| seq.checked_add(after.get()))
    }
}

/// `payload` as the ring stores it: without `ELIDED_PREFIX` when it starts with it.
/// Every append asks, so the prefix's last word is compared first (one load and compare): a
/// final response (`{"jsonrpc":"2.0","id":…`) shares the prefix's first 17 bytes and took the
/// whole compare's ~45 instructions on each echo (callgrind).
#[inline]
fn stored_form(payload: &[u8]) -> (bool, &[u8]) {
    const LEN: usize = ELIDED_PREFIX.len();
    let last_word = |bytes: &[u8]| -> Option<[u8; 8]> { bytes.get(LEN - 8..LEN)?.try_into().ok() };
    if last_word(payload) != last_word(ELIDED_PREFIX) {
        return (false, payload);
    }
    match payload.strip_prefix(ELIDED_PREFIX) {
        Some(rest) => (true, rest),
        None => (false, payload),
    }
}

/// A page number, span part or page count as a slot keeps it: spans are below 2^32 by
/// construction, and a ring holds far fewer than 2^32 pages.
fn narrow(value: usize) -> u32 {
    u32::try_from(value).expect("invariant: a span or page number fits 32 bits")
}

/// One page (`PAGE_BYTES` of capacity, its length what has been written: the rest is room for
/// the next payloads while it is the newest), or one large payload's block (exactly its bytes).
type Page = Vec<u8>;

/// The ring's payload bytes (issue 43 §2): the pages the held payloads lie in, oldest first.
/// Each payload of at most `PAGE_BYTES` lies whole in one page, right after its predecessor in
/// the same page or at the start of a new one; a longer payload fills a block of its own. A
/// page goes back to the core's spares (`page::give`) when its last payload is evicted, so the
/// pages follow what the ring holds: appending copies the payload once, into place, and never
/// moves the others. Every page holds at least one held payload, except a ring's only page
/// once it holds none (kept for the next payload, written from its start).
#[derive(Default)]
struct Pages {
    /// Oldest first: `pages[i]` is page number `first + i` (wrapping).
    pages: VecDeque<Page>,
    /// The number of `pages[0]`.
    first: u32,
    /// Stored bytes held (payloads without their elided prefixes): at most the ring's `bytes`.
    held: usize,
}

impl Pages {
    /// Copies `payload` into place after the newest payload and returns its `(page, span)`.
    fn place(&mut self, payload: &[u8]) -> (u32, u32) {
        let len = payload.len();
        if len == 0 {
            return (0, 0);
        }
        self.held += len;
        if len > PAGE_BYTES {
            // An allocation of the payload's size, as each growth of the one buffer was; a
            // final response this long costs its copy many times over anyway.
            self.pages.push_back(payload.to_vec());
            return (self.newest_number(), LARGE);
        }
        let room = |page: &Page| page.capacity() == PAGE_BYTES && PAGE_BYTES - page.len() >= len;
        if !self.pages.back().is_some_and(room) {
            self.pages.push_back(page::take());
        }
        let newest = self.pages.back_mut().expect("invariant: a page was just made if needed");
        let at = newest.len();
        // Within the page's capacity (`room`): no reallocation.
        newest.extend_from_slice(payload);
        (self.newest_number(), narrow(at << 16 | len))
    }

    /// The number of the newest page; only called with a page.
    fn newest_number(&self) -> u32 {
        self.first.wrapping_add(narrow(self.pages.len() - 1))
    }

    /// The stored payload at `(page, span)`, which the ring holds.
    #[inline]
    fn read(&self, page: u32, span: u32) -> &[u8] {
        if span == 0 {
            return b"";
        }
        let page = &self.pages[page.wrapping_sub(self.first) as usize];
        if span == LARGE {
            return page;
        }
        let (at, len) = ((span >> 16) as usize, (span & 0xFFFF) as usize);
        &page[at..at + len]
    }

    /// Forgets the oldest stored payload, `len` bytes at `(page, span)`: the page goes back
    /// once that was its last (the only page stays, written again from its start).
    fn release(&mut self, page: u32, span: u32, len: usize) {
        self.held = self.held.checked_sub(len).expect("invariant: held counts every payload");
        if span == 0 {
            return;
        }
        assert!(page == self.first, "invariant: the oldest payload lies in the oldest page");
        let only = self.pages.len() == 1;
        let oldest = self.pages.front_mut().expect("invariant: a held payload has its page");
        let last = span == LARGE || (span >> 16) as usize + len == oldest.len();
        if !last {
            return;
        }
        if only && span != LARGE {
            oldest.clear();
            return;
        }
        let oldest = self.pages.pop_front().expect("invariant: checked above");
        self.first = self.first.wrapping_add(1);
        page::give(oldest);
    }

    /// Bytes of the pages and blocks held.
    fn capacity(&self) -> usize {
        self.pages.iter().map(Vec::capacity).sum()
    }
}

impl Drop for Pages {
    /// The pages go back to the core's spares.
    fn drop(&mut self) {
        for page in self.pages.drain(..) {
            page::give(page);
        }
    }
}

/// What a ring holds once it has held an event: boxed, so an idle ring is counters and one
/// null pointer (a session keeps its allocation size class, `session::tests`).
#[derive(Default)]
struct Storage {
    /// Length 0 (nothing appended yet) or a power of two ≤ `events_max`. The event `seq` lives in
    /// `slots[seq & (slots.len() - 1)]` exactly when `head <= seq < tail`; every other slot is
    /// a leftover, never read.
    slots: Vec<Slot>,
    /// Where the held payloads lie.
    payloads: Pages,
}

/// The replay buffer of one session; see the module doc of `replay`.
pub struct Ring {
    /// The slots and the payload pages; `None` until the first append.
    storage: Option<Box<Storage>>,
    /// Oldest held sequence number; equals `tail` when the ring is empty. 1 ≤ head ≤ tail.
    head: u64,
    /// Sequence number the next append receives. Starts at 1 and only grows.
    tail: u64,
    /// Sum of held payload lengths as appended (an elided prefix counts); ≤ `bytes_max`. The
    /// buffer holds at most this many bytes, so `bytes_max` bounds it (and
    /// `--core-buffer-bytes`, which sums it, bounds the core's payloads).
    bytes: usize,
    /// Bound on held events (`--replay-events`); a power of two ≥ 1.
    events_max: usize,
    /// Bound on held payload bytes (`--replay-bytes`); ≥ 1.
    bytes_max: usize,
    /// Newest held event of each stream that has any held event, so an append links its
    /// predecessor in O(1). Entries leave when a stream's newest event is evicted, so the map
    /// never outgrows the held events.
    stream_newest: SequenceMap<StreamKey, NonZeroU64>,
}

impl Ring {
    /// An empty ring bounded to `events_max` events and `bytes_max` payload bytes. Allocates
    /// nothing until the first append.
    ///
    /// Panics unless `events_max` is a power of two and `bytes_max` ≥ 1: `config` validates the
    /// flags, so a bad value here is our bug.
    pub fn new(events_max: usize, bytes_max: usize) -> Ring {
        assert!(events_max.is_power_of_two(), "events_max must be a power of two ≥ 1");
        assert!(events_max <= REPLAY_EVENTS_MOST, "events_max must be ≤ REPLAY_EVENTS_MOST");
        assert!(bytes_max >= 1, "bytes_max must be ≥ 1");
        assert!(bytes_max <= REPLAY_BYTES_MOST, "bytes_max must be ≤ REPLAY_BYTES_MOST");
        Ring {
            storage: None,
            head: 1,
            tail: 1,
            bytes: 0,
            events_max,
            bytes_max,
            stream_newest: SequenceMap::default(),
        }
    }

    /// Makes an empty ring's next append take `seq` (a session rebuilt from the durable store
    /// keeps its sequence numbers, so the client's event ids stay valid). `false`, unchanged,
    /// when the ring holds events or `seq` is 0.
    pub fn resume_at(&mut self, seq: EventSeq) -> bool {
        if !self.is_empty() || seq.0 == 0 || self.tail != 1 {
            return false;
        }
        self.head = seq.0;
        self.tail = seq.0;
        true
    }

    /// Appends `payload` as the newest event of `stream` and returns its sequence number.
    ///
    /// First evicts oldest-first, reporting each removed event to `on_evict` in sequence order,
    /// until one more event fits within `events_max` and `payload.len()` more bytes fit within
    /// `bytes_max`; then stores the event and links it from the stream's previous held event.
    /// A payload longer than `bytes_max` is refused with the ring unchanged.
    /// The payload is copied into the ring's buffer.
    pub fn try_append(
        &mut self,
        stream: StreamKey,
        payload: impl AsRef<[u8]>,
        on_evict: impl FnMut(Evicted),
    ) -> Result<EventSeq, ReplayError> {
        let payload = payload.as_ref();
        if payload.len() > self.bytes_max {
            return Err(ReplayError::PayloadTooLarge {
                len: payload.len(),
                bytes_max: self.bytes_max,
            });
        }
        Ok(self.append_assume_fits(stream, payload, on_evict))
    }

    /// [`Ring::try_append`] for a payload the caller knows fits (e.g. an empty priming event).
    ///
    /// Panics if `payload.len() > bytes_max`.
    pub fn append_assume_fits(
        &mut self,
        stream: StreamKey,
        payload: impl AsRef<[u8]>,
        mut on_evict: impl FnMut(Evicted),
    ) -> EventSeq {
        let payload = payload.as_ref();
        assert!(payload.len() <= self.bytes_max, "payload longer than bytes_max");
        // Terminates: an empty ring holds 0 bytes, and both bounds admit one fitting event.
        while self.len() == self.events_max || self.bytes_max - self.bytes < payload.len() {
            on_evict(self.evict_oldest());
        }
        if self.len() == self.slots().len() {
            self.grow();
        }
        let (elided, stored) = stored_form(payload);
        let (page, span) = self.storage().payloads.place(stored);
        let seq = NonZeroU64::new(self.tail).expect("invariant: tail starts at 1 and only grows");
        self.tail = self.tail.checked_add(1).expect("invariant: 2^64 events are never appended");
        if let Some(prev) = self.stream_newest.insert(stream, seq) {
            assert!(prev.get() >= self.head, "invariant: a stream's newest is held");
            let index = self.index(prev.get());
            let prev_slot = &mut self.storage().slots[index];
            assert!(prev_slot.stream == stream, "invariant: slot holds the stream's newest event");
            assert!(prev_slot.distance() == 0, "invariant: a stream's newest has no successor");
            assert!(prev < seq, "invariant: sequence numbers strictly increase");
            // Both held: the distance is below events_max ≤ REPLAY_EVENTS_MOST < ELIDED.
            let distance =
                u32::try_from(seq.get() - prev.get()).expect("invariant: within events_max");
            prev_slot.next_after |= distance;
        }
        self.bytes += payload.len();
        assert!(self.bytes <= self.bytes_max, "invariant: bytes within bytes_max");
        let index = self.index(seq.get());
        let next_after = if elided { ELIDED } else { 0 };
        // The slot of tail is free: held events are `head..tail`, fewer than the slots.
        self.storage().slots[index] = Slot { stream, next_after, page, span };
        assert!(self.head <= self.tail, "invariant: head ≤ tail");
        assert!(self.len() <= self.slots().len(), "invariant: held events fit the slots");
        EventSeq(seq.get())
    }

    /// The held event `seq`, in O(1) at any capacity; `None` if it was never appended (including
    /// `EventSeq(0)`) or has been evicted.
    pub fn get(&self, seq: EventSeq) -> Option<Event<'_>> {
        let (storage, slot) = self.held(seq)?;
        let this = NonZeroU64::new(seq.0).expect("invariant: head ≥ 1");
        Some(Event {
            stream: slot.stream,
            seq,
            elided: slot.next_after & ELIDED != 0,
            payload: storage.payloads.read(slot.page, slot.span),
            next_in_stream: slot.next(this).map(|next| EventSeq(next.get())),
        })
    }

    /// The storage and slot of the held event `seq`, without reading its payload (a replay's
    /// start asks only its stream and successor); `None` when it is not held.
    #[inline]
    fn held(&self, seq: EventSeq) -> Option<(&Storage, &Slot)> {
        if seq.0 < self.head || seq.0 >= self.tail {
            return None;
        }
        let storage =
            self.storage.as_deref().expect("invariant: a ring that held events has storage");
        // Lossless: masked below slots.len(), a usize.
        let index = (seq.0 & (storage.slots.len() as u64 - 1)) as usize;
        Some((storage, &storage.slots[index]))
    }

    /// The sequence number the next append receives.
    pub fn next_seq(&self) -> EventSeq {
        EventSeq(self.tail)
    }

    /// The oldest held event's sequence number; `None` when empty.
    pub fn oldest(&self) -> Option<EventSeq> {
        (self.head < self.tail).then_some(EventSeq(self.head))
    }

    /// The newest held event of `stream`; `None` if the stream holds none (never appended to,
    /// or all its events evicted). O(1).
    pub fn newest_in_stream(&self, stream: StreamKey) -> Option<EventSeq> {
        self.stream_newest.get(&stream).map(|seq| EventSeq(seq.get()))
    }

    /// Number of held events.
    pub fn len(&self) -> usize {
        // Lossless: tail - head ≤ slots.len(), a usize.
        (self.tail - self.head) as usize
    }

    /// No event is held.
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// Sum of held payload lengths.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bound on held events this ring was created with.
    pub fn events_max(&self) -> usize {
        self.events_max
    }

    /// The bound on held payload bytes this ring was created with.
    pub fn bytes_max(&self) -> usize {
        self.bytes_max
    }

    /// Bytes of the payload pages and blocks: 0 before the first non-empty payload, then what
    /// the held payloads lie in (at most twice their stored bytes and two pages). For memory
    /// tests and the docs.
    pub fn capacity_bytes(&self) -> usize {
        self.storage.as_deref().map_or(0, |storage| storage.payloads.capacity())
    }

    /// Slots currently allocated: 0 before the first append, then a power of two between
    /// `min(SLOTS_INITIAL, events_max)` and `events_max`. For memory tests.
    pub fn capacity_slots(&self) -> usize {
        self.slots().len()
    }

    /// The slot array; empty before the first append.
    fn slots(&self) -> &[Slot] {
        self.storage.as_deref().map_or(&[], |storage| &storage.slots)
    }

    /// The storage, made at the first append.
    fn storage(&mut self) -> &mut Storage {
        self.storage.get_or_insert_with(Box::default)
    }

    /// `stream`'s held events with a sequence number greater than `after`, in order.
    ///
    /// Starts from `after`'s successor when `after` is held and belongs to `stream`. Otherwise
    /// (evicted, never appended, `EventSeq(0)`, or another stream's event) the iterator yields
    /// nothing and reports [`Replay::start_unknown`]: the `stream` layer then decides between its
    /// own first-held pointer and a gap report.
    pub fn replay_after(&self, stream: StreamKey, after: EventSeq) -> Replay<'_> {
        match self.held(after) {
            Some((_, slot)) if slot.stream == stream => {
                let this = NonZeroU64::new(after.0).expect("invariant: head ≥ 1");
                let next = slot.next(this).map(|next| EventSeq(next.get()));
                Replay { ring: self, stream, next, start_unknown: false }
            }
            _ => Replay::unknown(self, stream),
        }
    }

    /// The chain of `first`'s stream starting at `first` (inclusive). When `first` is not held the
    /// iterator yields nothing and reports [`Replay::start_unknown`].
    pub fn iter_from(&self, first: EventSeq) -> Replay<'_> {
        match self.held(first) {
            Some((_, slot)) => {
                Replay { ring: self, stream: slot.stream, next: Some(first), start_unknown: false }
            }
            None => Replay::unknown(self, StreamKey(0)),
        }
    }

    /// Removes the oldest event. Caller ensures the ring is not empty.
    fn evict_oldest(&mut self) -> Evicted {
        assert!(self.head < self.tail, "invariant: evict only from a non-empty ring");
        let (index, head) = (self.index(self.head), self.head);
        let bytes = self.bytes;
        let storage = self.storage();
        // Left as it is: outside head..tail nothing reads it, the next append overwrites it.
        let slot = storage.slots[index];
        let seq = NonZeroU64::new(head).expect("invariant: head ≥ 1");
        let stored = storage.payloads.read(slot.page, slot.span).len();
        let whole_len = slot.prefix().len() + stored;
        let bytes =
            bytes.checked_sub(whole_len).expect("invariant: bytes counts every held payload");
        storage.payloads.release(slot.page, slot.span, stored);
        self.head += 1;
        self.bytes = bytes;
        if slot.distance() == 0 {
            let newest = self.stream_newest.remove(&slot.stream);
            assert!(newest == Some(seq), "invariant: a chain's end is its stream's newest");
        }
        Evicted {
            stream: slot.stream,
            seq: EventSeq(head),
            next_in_stream: slot.next(seq).map(|next| EventSeq(next.get())),
            bytes: whole_len,
        }
    }

    /// Doubles the slot array (or makes the first one), re-placing held events by the new mask.
    /// Called only when every slot is in use, so doubling keeps appends amortized O(1).
    fn grow(&mut self) {
        let old_len = self.slots().len();
        let slots_len = if old_len == 0 { SLOTS_INITIAL.min(self.events_max) } else { old_len * 2 };
        assert!(slots_len <= self.events_max, "invariant: grow only below events_max");
        let mut slots = vec![Slot::FREE; slots_len];
        let mask = slots_len as u64 - 1;
        for seq in self.head..self.tail {
            // Lossless: masked below slots_len, a usize.
            slots[(seq & mask) as usize] = self.slots()[self.index(seq)];
        }
        self.storage().slots = slots;
    }

    /// Slot index of `seq`. Only called with a non-empty slot array.
    fn index(&self, seq: u64) -> usize {
        // Lossless: masked below slots.len(), a usize.
        (seq & (self.slots().len() as u64 - 1)) as usize
    }

    /// Held payloads lie oldest first, each right after its predecessor or at the start of a
    /// later page, none overlapping; every page holds one (but a ring's only page may hold
    /// none); the pages are at most twice the stored bytes and two pages (a page is left for
    /// the next only when the payload after it does not fit in it).
    #[cfg(test)]
    fn check_payload_order(&self) {
        let Some(p) = self.storage.as_deref().map(|storage| &storage.payloads) else { return };
        let (mut page_index, mut expect, mut pages_used) = (None::<usize>, 0, 0);
        for seq in self.head..self.tail {
            let slot = &self.slots()[self.index(seq)];
            if slot.span == 0 {
                continue;
            }
            let index = slot.page.wrapping_sub(p.first) as usize;
            assert!(index < p.pages.len(), "a held payload's page is held");
            let (at, len) = if slot.span == LARGE {
                (0, p.pages[index].len())
            } else {
                ((slot.span >> 16) as usize, (slot.span & 0xFFFF) as usize)
            };
            if page_index == Some(index) {
                assert_eq!(at, expect, "right after its predecessor");
            } else {
                assert_eq!(index, page_index.map_or(0, |i| i + 1), "no page without a payload");
                pages_used += 1;
                page_index = Some(index);
            }
            expect = at + len;
            assert!(expect <= p.pages[index].len());
        }
        if let Some(index) = page_index {
            assert_eq!(p.pages[index].len(), expect, "the newest payload ends its page's bytes");
        }
        assert!(pages_used == p.pages.len() || (p.held == 0 && p.pages.len() <= 1));
        assert!(p.capacity() <= 2 * p.held + 2 * PAGE_BYTES, "{} for {}", p.capacity(), p.held);
    }

    /// O(n) check of every invariant; tests call it after each operation.
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        assert!(1 <= self.head && self.head <= self.tail);
        assert!(self.len() <= self.slots().len());
        assert!(self.slots().len() <= self.events_max);
        assert!(self.slots().is_empty() || self.slots().len().is_power_of_two());
        assert!(self.bytes <= self.bytes_max);
        let (mut bytes, mut stored) = (0, 0);
        let mut newest: std::collections::HashMap<StreamKey, NonZeroU64> =
            std::collections::HashMap::new();
        for seq in self.head..self.tail {
            let slot = &self.slots()[self.index(seq)];
            let this = NonZeroU64::new(seq).expect("head ≥ 1");
            let len = self.get(EventSeq(seq)).expect("held").payload.len();
            bytes += slot.prefix().len() + len;
            stored += len;
            newest.insert(slot.stream, this);
            if let Some(next) = slot.next(this) {
                assert!(next > this && next.get() < self.tail);
                let successor = &self.slots()[self.index(next.get())];
                assert_eq!(successor.stream, slot.stream);
                // No event of the same stream between the two.
                for between in seq + 1..next.get() {
                    let other = &self.slots()[self.index(between)];
                    assert_ne!(other.stream, slot.stream);
                }
            }
        }
        assert_eq!(bytes, self.bytes);
        let held = self.storage.as_deref().map_or(0, |storage| storage.payloads.held);
        assert_eq!(stored, held);
        assert!(held <= self.bytes);
        self.check_payload_order();
        assert_eq!(newest.len(), self.stream_newest.len());
        for (stream, seq) in &newest {
            assert_eq!(self.stream_newest.get(stream), Some(seq));
            let slot = &self.slots()[self.index(seq.get())];
            assert!(slot.next(*seq).is_none());
        }
    }
}

/// Counters only: payloads are never logged (STYLE, logging).
impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .field("bytes", &self.bytes)
            .field("capacity_bytes", &self.capacity_bytes())
            .field("slots", &self.slots().len())
            .field("streams", &self.stream_newest.len())
            .field("events_max", &self.events_max)
            .field("bytes_max", &self.bytes_max)
            .finish()
    }
}

/// Iterator over one stream's held events, oldest first, following `next_in_stream`; from
/// [`Ring::replay_after`] or [`Ring::iter_from`]. Each step is O(1).
#[derive(Clone, Debug)]
pub struct Replay<'a> {
    ring: &'a Ring,
    /// The stream being walked (meaningless when `start_unknown`).
    stream: StreamKey,
    /// The event the next call to `next` yields; `None` once the chain is exhausted.
    next: Option<EventSeq>,
    /// True when the requested starting point was not held, so nothing is yielded.
    start_unknown: bool,
}

impl<'a> Replay<'a> {
    fn unknown(ring: &'a Ring, stream: StreamKey) -> Replay<'a> {
        Replay { ring, stream, next: None, start_unknown: true }
    }

    /// True when the starting point was not held (evicted, never appended, `EventSeq(0)`, or
    /// another stream's event): the iterator is empty and the caller must find the start itself.
    pub fn start_unknown(&self) -> bool {
        self.start_unknown
    }

    /// The sequence number the next call to `next` yields, if any. A writer that must release
    /// the ring mid-replay (to await a socket write) resumes later with [`Ring::iter_from`] at
    /// this value.
    pub fn peek_seq(&self) -> Option<EventSeq> {
        self.next
    }
}

impl<'a> Iterator for Replay<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let seq = self.next?;
        let event = self
            .ring
            .get(seq)
            .expect("invariant: a held event's successor is held (eviction is oldest-first)");
        assert!(event.stream == self.stream, "invariant: a chain never crosses streams");
        debug_assert!(event.next_in_stream.is_none_or(|next| next > seq));
        self.next = event.next_in_stream;
        Some(event)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.next {
            None => (0, Some(0)),
            Some(seq) => {
                // Lossless: bounded by the held range, ≤ slots.len().
                let upper = (self.ring.tail.saturating_sub(seq.0)) as usize;
                (1, Some(upper))
            }
        }
    }
}

impl FusedIterator for Replay<'_> {}
