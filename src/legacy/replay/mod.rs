//! Replay buffer: one [`Ring`] per legacy-era MCP session holding the SSE events of all that
//! session's streams (one per POSTed request, plus the standalone GET stream), so a client that
//! lost its connection can resume with `GET` + `Last-Event-ID` and receive exactly the events it
//! missed, in order, once (CONTRACT §3).
//!
//! Owns: session-wide event sequence numbers ([`EventSeq`], strictly increasing from 1; 0 means
//! "none"), the slot array (slot of an event = `seq & mask`, so a lookup by id is O(1) at any
//! capacity), the pages the held payloads lie in (`page`: fixed pages from the core's spares,
//! each payload whole in one, appended by one copy and never moved, a page given back when
//! its last payload is evicted; issue 43 §2; a progress notification's fixed 77-byte opening
//! is not stored but flagged in its slot and given back on reads as [`Event::prefix`]), FIFO
//! eviction under the `--replay-events` / `--replay-bytes` bounds, and the
//! per-stream chains (`next_in_stream`) that let a replay visit only its own stream's events:
//! O(events replayed), never a scan of the ring.
//!
//! Called by: the `stream` module only. It assigns [`StreamKey`]s, turns an [`EventSeq`] into a
//! wire event id, records gaps from the [`Evicted`] reports, and keeps its own first-held pointer
//! per stream for resumes that start before the first held event ([`Replay::start_unknown`]).
//!
//! Never: performs I/O, reads a clock, allocates per idle session (memory follows what is held,
//! not the configured capacity), uses `unsafe`, or panics on anything a peer can choose: peer
//! input reaches this module only as an `EventSeq` to look up, and every lookup is bounds-checked
//! into `None`. The `assert!`s guard our own invariants (head ≤ tail, sequence numbers strictly
//! increasing, byte accounting never underflowing).

mod page;
mod ring;
#[cfg(test)]
mod tests;

pub(crate) use page::set_spare_pages_max;
#[cfg(test)]
use page::{spare_pages, PAGE_BYTES};
pub use ring::Ring;
#[cfg(test)]
use ring::{Replay, ELIDED_PREFIX, SLOTS_INITIAL};

/// Names one SSE stream of a session. Assigned by the `stream` module; the ring only compares
/// keys and never interprets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamKey(pub u32);

/// Session-wide event sequence number: strictly increasing from 1 across all streams of a
/// session; `EventSeq(0)` means "none" and is never held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventSeq(pub u64);

/// One held event, borrowed from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    pub stream: StreamKey,
    pub seq: EventSeq,
    /// The SSE `data` began with the opening the ring does not store (a progress
    /// notification's fixed prefix, [`Event::prefix`]); the data to re-send is `prefix()`
    /// then `payload`. A flag, not the slice: every lookup returns an `Event` (callgrind, echo).
    pub elided: bool,
    /// The rest of the SSE `data` to re-send; both are empty for priming events (CONTRACT §3).
    /// It lies whole in one of the ring's payload pages (or a block of its own).
    pub payload: &'a [u8],
    /// The next event of the same stream; `Some` exactly when that event has been appended
    /// (it is then held too, because eviction is oldest-first).
    pub next_in_stream: Option<EventSeq>,
}

impl<'a> Event<'a> {
    /// The opening of the data that the ring did not store, or nothing. It holds no line
    /// break.
    pub fn prefix(&self) -> &'static [u8] {
        if self.elided {
            ring::ELIDED_PREFIX
        } else {
            b""
        }
    }

    /// Length of the data as appended (`prefix()` then `payload`).
    pub fn len(&self) -> usize {
        self.prefix().len() + self.payload.len()
    }

    /// A priming event: no data at all.
    pub fn is_empty(&self) -> bool {
        !self.elided && self.payload.is_empty()
    }

    /// The data as appended, in one slice: `Some` when the ring holds it whole (nothing
    /// elided, as for every final response: those open with `{"jsonrpc":"2.0","id":`).
    pub fn whole(&self) -> Option<&'a [u8]> {
        (!self.elided).then_some(self.payload)
    }
}

/// What one eviction removed; the `stream` layer uses it to record gaps and to move its
/// first-held pointer of `stream` to `next_in_stream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub stream: StreamKey,
    pub seq: EventSeq,
    /// The stream's next event at the moment of eviction. `None` when the evicted event was the
    /// stream's newest, even if the append that caused the eviction belongs to the same stream:
    /// the callback fires before the new event is stored.
    pub next_in_stream: Option<EventSeq>,
    /// The evicted payload's length as appended (the stream layer keeps per-stream unwritten
    /// bytes).
    pub bytes: usize,
}

/// Why an append was refused; the ring is unchanged when it is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// Culprit: the producer (a tool's message) against the operator's `--replay-bytes`. A single
    /// payload larger than the whole byte budget could never be held, so it is refused rather
    /// than emptying the ring for an event that would not fit anyway.
    #[error("event payload of {len} bytes exceeds the replay byte budget of {bytes_max}")]
    PayloadTooLarge { len: usize, bytes_max: usize },
}
