//! A request with an `Idempotency-Key` reading its keyed call's record (`keyed::Record`), as
//! the response stream a connection drives (a `core::Source`). The request that took the key
//! streams the call live (SSE from the first notification, JSON when there was none); a retry
//! waits for the outcome until `wait_until` (`--owed-wait-ms`) and then writes everything at
//! once, or 409 -31004 (`Answer::StillRunning`) when the call still runs (CONTRACT §5). Both
//! see the call with their own id and progress token (`rewrite`).
//!
//! Built by `modern` (`observe`); driven by `runtime::stream`. A peer that closes the
//! connection cancels nothing: the record keeps the call, and the key says the client comes
//! back. Never: touches a socket, or runs the call (its detached task does: `keyed::spawn`).

use std::future::Future;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use super::call::{end_for_drain, origin, FinalAnswer};
use super::keyed;
use crate::core::{Core, KeepAlive, Source, Step};
use crate::wire::jsonrpc::{self, RawId};
use crate::wire::notification::{rewrite_event, rewrite_event_into, Rewrite};
use crate::wire::{sse, Answer};

/// A connection reading a keyed call's record: the request that took the key, or a retry.
pub(crate) struct Observer {
    record: Rc<keyed::Record>,
    /// This request's id and progress token where they differ from the record's.
    rewrite: Option<Rewrite>,
    id: RawId,
    /// A retry waits for the outcome until then, and writes nothing before (CONTRACT §5);
    /// `None`: the request that took the key streams the call live.
    wait_until: Option<Instant>,
    keep_alive: bool,
    /// The index in `--allowed-origin`'s list of the origin the head is shared with.
    pub(crate) shared_with: Option<usize>,
    /// The record's notifications already written.
    cursor: usize,
    /// True once the SSE head is in the output.
    streaming: bool,
    /// The notifications of one `fill`, reused (one allocation per request, none per event).
    pending: Vec<Bytes>,
}

impl Observer {
    /// True for a retry answered from the record of an earlier request with its key (a
    /// dedup hit); false for the request that took the key and runs the call.
    pub(crate) fn is_retry(&self) -> bool {
        self.wait_until.is_some()
    }

    pub(crate) fn new(
        record: Rc<keyed::Record>,
        rewrite: Option<Rewrite>,
        id: RawId,
        wait_until: Option<Instant>,
        keep_alive: bool,
    ) -> Observer {
        Observer {
            record,
            rewrite,
            id,
            wait_until,
            keep_alive,
            shared_with: None,
            cursor: 0,
            streaming: false,
            pending: Vec::new(),
        }
    }

    /// The record's notifications after the cursor, SSE-framed into `frames`.
    fn take_events(&mut self, frames: &mut Vec<u8>) {
        self.pending.clear();
        self.record.sink.recorded_from(self.cursor, &mut self.pending);
        self.cursor += self.pending.len();
        for event in &self.pending {
            match &self.rewrite {
                Some(rw) => {
                    let rewritten = rewrite_event(rw, event, false, 0);
                    sse::push_event(frames, None, None, &rewritten);
                }
                None => sse::push_event(frames, None, None, event),
            }
        }
    }
}

impl Source for Observer {
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step {
        let shared_with = origin(core, self.shared_with);
        let finished = self.record.outcome();
        // A retry writes nothing until the outcome is there (then all at once), or its wait
        // ran out (then 409, below).
        let waiting = self.wait_until.is_some() && finished.is_none();
        if !waiting {
            self.take_events(frames);
            if !frames.is_empty() {
                if !self.streaming {
                    Answer::SseHeadStateless.render_shared(out, true, shared_with);
                    self.streaming = true;
                }
                sse::push_chunk(out, frames);
            }
        }
        let keep_alive = self.keep_alive;
        if let Some((body, status)) = &finished {
            // The retry's body goes into the connection's frame buffer (lent for it: the
            // answer needs its own frames only while streaming) rather than a copy of its own.
            let mut rewritten = std::mem::take(frames);
            rewritten.clear();
            let body: &[u8] = match &self.rewrite {
                Some(rw) => {
                    let body_offset = jsonrpc::response_body_offset(&self.record.id);
                    rewrite_event_into(&mut rewritten, rw, body, true, body_offset);
                    &rewritten
                }
                None => body,
            };
            let streaming = self.streaming;
            let end = FinalAnswer { status: *status, body, streaming, keep_alive, shared_with };
            end.render(out, frames);
            rewritten.clear();
            *frames = rewritten;
            return Step::Ended { reusable: keep_alive };
        }
        if waiting && self.wait_until.is_some_and(|until| Instant::now() >= until) {
            // A retry whose call still runs after --owed-wait-ms: it learns to come back.
            core.metrics.rejected_held_too_long.inc();
            Answer::StillRunning { id: &self.id }.render_shared(out, keep_alive, shared_with);
            return Step::Ended { reusable: keep_alive };
        }
        Step::Open
    }

    fn wake(&mut self) -> impl Future<Output = ()> + '_ {
        let (record, until) = (&self.record, self.wait_until);
        async move {
            let events = record.sink.wake.notified();
            let done = record.done.notified();
            // A retry's own timer: its wait's end is when it answers 409.
            let timeout = until.map(|u| u.saturating_duration_since(Instant::now()));
            monoio::select! {
                _ = events => {}
                _ = done => {}
                _ = monoio::time::sleep(timeout.unwrap_or_default()), if timeout.is_some() => {}
            }
        }
    }

    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::once_streaming(self.streaming)
    }

    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, _frames: &mut Vec<u8>) {
        end_for_drain(out, self.streaming, &self.id, origin(core, self.shared_with));
    }

    fn sent(&mut self, _core: &Core) {}

    fn gone(&mut self, _core: &Core) {}
}
