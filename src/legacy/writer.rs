//! The writer side of one legacy SSE stream: `SseJob`, a connection's position in a stream of
//! the session's replay ring, as a `core::Source` that `runtime::stream` drives. Each `fill`
//! encodes what is ready after the cursor (`stream::fill_batch`, one chunk per send); the
//! bookkeeping after a send (`stream::after_send`) and what a peer that went away means (the
//! writer detaches: the stream stays owed and resumable, MCP 2025-11-25 transports
//! "Disconnection SHOULD NOT be interpreted as the client cancelling") live here too.
//!
//! Built by `legacy` (`stream_reply`) after it rendered the SSE head; carried to the
//! connection by `endpoint::Outcome`. Never: touches a socket, or waits inside `fill`.

use std::future::Future;

use crate::core::{Core, KeepAlive, Source, Step};
use crate::legacy::replay::StreamKey;
use crate::legacy::session::SessionRc;
use crate::legacy::session::StreamKind;
use crate::legacy::stream::{self, Batch, Cursor, Rewrite};
use crate::wire::sse;

/// A stream a connection is to write after the response head.
pub(crate) struct SseJob {
    session: SessionRc,
    key: StreamKey,
    /// The writer's attachment (`stream::OBSERVER_EPOCH` for a deduplicated retry's).
    epoch: u64,
    cursor: Cursor,
    /// How a deduplicated retry sees the stream (its own id and progress token).
    rewrite: Option<Rewrite>,
    /// What the last `fill` found: the bookkeeping after its send depends on it.
    batch: Batch,
    /// True once the drain's end cut the stream: the writer detaches after its last send.
    cut: bool,
    /// A retry answered from an earlier request's stream (`legacy::deduplicated`).
    retry: bool,
}

impl SseJob {
    pub(crate) fn new(
        session: SessionRc,
        key: StreamKey,
        epoch: u64,
        cursor: Cursor,
        rewrite: Option<Rewrite>,
    ) -> SseJob {
        SseJob {
            session,
            key,
            epoch,
            cursor,
            rewrite,
            batch: Batch::More,
            cut: false,
            retry: false,
        }
    }

    /// The same job, marked as a retry answered from an earlier request's stream.
    pub(crate) fn into_retry(mut self) -> SseJob {
        self.retry = true;
        self
    }

    /// True for a retry answered from an earlier request's stream (a dedup hit).
    pub(crate) fn is_retry(&self) -> bool {
        self.retry
    }

    /// The session and the stream it writes (the audit trail waits for its run's end).
    pub(crate) fn stream(&self) -> (&SessionRc, StreamKey) {
        (&self.session, self.key)
    }
}

impl Source for SseJob {
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step {
        let batch = {
            let mut s = self.session.borrow_mut();
            stream::fill_batch(
                &mut s,
                self.key,
                self.epoch,
                &mut self.cursor,
                self.rewrite.as_ref(),
                core.cfg.sessions.sse_retry_ms,
                frames,
                core.cfg.sessions.write_buffer_bytes,
            )
        };
        self.batch = batch;
        if batch == Batch::Gap {
            core.metrics.gaps_total.inc();
        }
        if !frames.is_empty() {
            sse::push_chunk(out, frames);
        }
        match batch {
            Batch::More => Step::Open,
            Batch::Ended | Batch::Dropped | Batch::Gap | Batch::Park => {
                out.extend_from_slice(sse::CHUNK_END);
                // A parked stream (SEP-1699) closes its connection: the client reconnects.
                Step::Ended { reusable: batch != Batch::Park }
            }
            Batch::Superseded => Step::Cut,
            Batch::Cut => {
                // Like a network cut: no terminating chunk, so the client resumes from its last
                // whole event (and learns of the evicted one as a -31003 gap).
                self.session.borrow_mut().detach(self.key, self.epoch);
                Step::Cut
            }
        }
    }

    fn wake(&mut self) -> impl Future<Output = ()> + '_ {
        let signals = self.session.borrow().stream(self.key).map(|s| s.signals());
        async move {
            match signals {
                Some(signals) => signals.events.notified().await,
                // Gone: the next `fill` says so (superseded) before anything waits again.
                None => std::future::pending().await,
            }
        }
    }

    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::Idle
    }

    fn first_write_hold(&self, core: &Core) -> Option<std::time::Duration> {
        let hold = core.cfg.sessions.sse_first_write_hold;
        if hold.is_zero() || self.rewrite.is_some() {
            return None;
        }
        // A new request stream that holds only its priming event: its call is running (an
        // instant call's answer is already there). A resume or a stream with events to send
        // is written at once.
        let s = self.session.borrow();
        let st = s.stream(self.key)?;
        let fresh = st.kind == StreamKind::Request
            && self.cursor.from == Some(st.first)
            && st.produced() == st.first;
        fresh.then_some(hold)
    }

    fn holds_drain(&self) -> bool {
        // A standalone GET stream waits for messages that may never come: a drain does not
        // wait for it (it is ended with the others at the drain's end).
        !self.session.borrow().stream(self.key).is_some_and(|st| st.kind == StreamKind::Standalone)
    }

    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, _frames: &mut Vec<u8>) {
        // What is ready goes out, then the last chunk (no final response): a clean end the
        // client resumes elsewhere with Last-Event-ID.
        out.extend_from_slice(sse::CHUNK_END);
        core.metrics.drain_streams_ended.inc();
        self.cut = true;
    }

    fn sent(&mut self, _core: &Core) {
        let mut s = self.session.borrow_mut();
        stream::after_send(&mut s, self.key, self.epoch, self.cursor.after, self.batch);
        if self.cut {
            s.detach(self.key, self.epoch);
        }
    }

    fn gone(&mut self, _core: &Core) {
        self.session.borrow_mut().detach(self.key, self.epoch);
    }
}
