//! One SSE stream's producer and consumer halves, over the session's replay ring.
//!
//! Owns: running a request as a monoio task (`spawn_job`) whose messages are appended to the
//! session ring through the call's context (`context::StreamSink`), `fill_batch`, which a
//! connection's writer calls to encode everything ready after its cursor as SSE frames in one
//! buffer (one chunk, one send), and `after_send`, the bookkeeping once a batch is sent.
//! Resume positions come from `Session::resume_start` in O(1).
//! Called by `legacy::writer` (the stream as a `core::Source`), which `runtime::stream` drives.
//! Never: touches a socket, or sends a message of one stream on another (MCP 2025-11-25
//! transports §multiple connections).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::legacy::replay::{Event, EventSeq, StreamKey};
use crate::legacy::session::{ResumeStart, Session};
use crate::provider::builtin::{RunningWork, ToolAnswer};
use crate::provider::{ProviderError, ProviderResult};
use crate::wire::jsonrpc;

/// Where a writer is in its stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    /// Last event written whole to this connection.
    pub after: EventSeq,
    /// Start here (inclusive) instead of after `after`: a new stream's priming event, or the
    /// first event for a deduplicated retry.
    pub from: Option<EventSeq>,
    /// An event larger than the write buffer, written in windows: its seq and how many of its
    /// payload bytes are already in the connection.
    pub partial: Option<(EventSeq, usize)>,
}

impl Cursor {
    /// Writes from `after`'s successor.
    pub(crate) fn after(after: EventSeq) -> Cursor {
        Cursor { after, from: None, partial: None }
    }

    /// Writes from `from` (inclusive).
    pub(crate) fn from(after: EventSeq, from: Option<EventSeq>) -> Cursor {
        Cursor { after, from, partial: None }
    }
}

pub(crate) use crate::config::WINDOW_BYTES_MIN;

pub(crate) use crate::wire::notification::{rewrite_event_parts, Rewrite};

/// The epoch of an *observer*: a writer that reads a stream another live connection owns (a
/// deduplicated retry sent while the original request's stream is still being written, CONTRACT
/// §4 step 1). It never takes the stream over, so both connections receive the whole stream;
/// it changes no writer state, and only marks the stream delivered once it wrote the end.
/// Owners' epochs start at 1.
pub(crate) const OBSERVER_EPOCH: u64 = 0;

/// What `fill_batch` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Frames were appended (maybe none); the stream goes on.
    More,
    /// The final response is in the buffer: end the HTTP response.
    Ended,
    /// The stream was cancelled or abandoned: end the response without a result.
    Dropped,
    /// A gap error is in the buffer: end the response.
    Gap,
    /// Another connection took the stream over, or the session ended: stop writing, close.
    Superseded,
    /// A tool asked to close the connection (SEP-1699): end the response, close, park.
    Park,
    /// The event this writer was part-way through was evicted from the ring: close the
    /// connection without ending the response, as a network cut would; the client's resume
    /// from its last whole event then gets the -31003 gap.
    Cut,
}

/// Encodes everything ready after the cursor into `out` — at most `budget` bytes, or one
/// `WINDOW_BYTES_MIN` window — for the writer holding `epoch`. An event larger than the room
/// left is written in windows across batches (`Cursor::partial`), so a connection's buffers
/// never hold more than the budget whatever the event size (issue 11 §2). Called with the
/// session borrowed; it does not await.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fill_batch(
    session: &mut Session,
    key: StreamKey,
    epoch: u64,
    cursor: &mut Cursor,
    rewrite: Option<&Rewrite>,
    retry_ms: u64,
    out: &mut Vec<u8>,
    budget: usize,
) -> Batch {
    let Some(s) = session.stream(key) else { return Batch::Superseded };
    if session.closed || !(epoch == OBSERVER_EPOCH || s.is_attached_by(epoch)) {
        return Batch::Superseded;
    }
    let (final_seq, dropped) = (s.final_seq(), s.is_dropped());
    // Where the final response's body starts (derived: we encoded it with the stream's id).
    let body_offset = s.request_id.as_ref().map_or(0, jsonrpc::response_body_offset);
    let (evicted_through, produced) = (s.evicted_through(), s.produced());
    if let Some((seq, sent)) = cursor.partial {
        let Some(ev) = session.ring.get(seq).filter(|e| e.stream == key) else {
            return Batch::Cut;
        };
        let rewritten = rewritten(&ev, rewrite, Some(seq) == final_seq, body_offset);
        let data = rewritten.as_deref().map_or((ev.prefix(), ev.payload), |r| (&[][..], r));
        let room = budget.saturating_sub(out.len()).max(WINDOW_BYTES_MIN);
        match push_event_window(out, &[], None, data, sent, room) {
            Some(sent) => {
                cursor.partial = Some((seq, sent));
                return Batch::More;
            }
            None => {
                cursor.partial = None;
                cursor.after = seq;
            }
        }
    }
    // The first event to write, read once (the walk goes on by each event's successor).
    let held = |seq: EventSeq| session.ring.get(seq).filter(|e| e.stream == key);
    let start = match cursor.from.take() {
        Some(seq) => match held(seq) {
            Some(ev) => Ok(Some(ev)),
            // The stream's start was evicted before this writer sent anything (a tool emitted
            // more than the ring holds in one burst): report the gap rather than wait for
            // nothing.
            None => Err(evicted_through.max(seq)),
        },
        None => match session.resume_start(key, cursor.after) {
            Ok(ResumeStart::From(first)) => Ok(held(first)),
            Ok(ResumeStart::Caught) => Ok(None),
            Ok(ResumeStart::Gap { lost_to }) => Err(lost_to),
            // Cannot happen for a cursor this writer advanced itself; end the stream loudly
            // instead of waiting on events it could never find.
            Err(_) => Err(produced),
        },
    };
    let mut next = match start {
        Ok(first) => first,
        Err(lost_to) => {
            push_gap(session, out, key, cursor.after, lost_to);
            return Batch::Gap;
        }
    };
    while let Some(ev) = next.take() {
        let mut id = [0u8; crate::legacy::session::EVENT_ID_LEN_MAX];
        let id_len = session.event_id_into(&mut id, key, ev.seq);
        let rewritten = rewritten(&ev, rewrite, Some(ev.seq) == final_seq, body_offset);
        let data = rewritten.as_deref().map_or((ev.prefix(), ev.payload), |r| (&[][..], r));
        let len = data.0.len() + data.1.len();
        let room = budget.saturating_sub(out.len());
        if len > room && room < WINDOW_BYTES_MIN && !out.is_empty() {
            break; // a large event starts in a batch of its own
        }
        let retry = (len == 0).then_some(retry_ms);
        let room = room.max(WINDOW_BYTES_MIN);
        if let Some(sent) = push_event_window(out, &id[..id_len], retry, data, 0, room) {
            cursor.partial = Some((ev.seq, sent));
            break;
        }
        cursor.after = ev.seq;
        if out.len() >= budget {
            break;
        }
        // Eviction is oldest-first, so a held event's successor is held.
        next = ev.next_in_stream.and_then(held);
        debug_assert!(ev.next_in_stream.is_none() || next.is_some(), "a successor is held");
    }
    if cursor.partial.is_some() {
        return Batch::More; // an event is half written: nothing may end the response now
    }
    if final_seq.is_some_and(|f| cursor.after >= f) {
        return Batch::Ended;
    }
    if dropped {
        return Batch::Dropped;
    }
    if session.take_close_request(key) {
        return Batch::Park;
    }
    Batch::More
}

/// What a deduplicated retry (CONTRACT §4 step 1) is sent for `ev`: its data under the retry's
/// id and progress token; `None` without a rewrite, or for a priming event (no data). Inlined:
/// every event of every stream asks, and almost none has a rewrite (callgrind, echo).
#[inline(always)]
fn rewritten(
    ev: &Event<'_>,
    rewrite: Option<&Rewrite>,
    is_final: bool,
    body_offset: usize,
) -> Option<Vec<u8>> {
    let rw = rewrite.filter(|_| !ev.is_empty())?;
    Some(rewrite_event_parts(rw, ev.prefix(), ev.payload, is_final, body_offset))
}

/// Writes event data `(head, payload)` (a ring's elided prefix, or nothing, then the rest)
/// from byte `sent` of the two on, at most `room` data bytes: the whole event when it fits and
/// nothing was sent yet, else the next window (the `id:`/`data:` head before the first, the
/// blank line after the last). `None` once the event is complete, else the new count of data
/// bytes sent. Line breaks inside a window start new `data:` lines, as `sse::push_event` does
/// (our encoders never emit raw line breaks in JSON).
fn push_event_window(
    out: &mut Vec<u8>,
    id: &[u8],
    retry_ms: Option<u64>,
    (head, payload): (&[u8], &[u8]),
    sent: usize,
    room: usize,
) -> Option<usize> {
    let len = head.len() + payload.len();
    if sent == 0 && len <= room {
        crate::wire::sse::push_event_after(out, Some(id), retry_ms, head, payload);
        return None;
    }
    if sent == 0 {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id);
        out.extend_from_slice(b"\ndata: ");
    }
    let end = len.min(sent + room);
    for &b in head.iter().chain(payload).take(end).skip(sent) {
        if b == b'\n' || b == b'\r' {
            out.extend_from_slice(b"\ndata: ");
        } else {
            out.push(b);
        }
    }
    if end == len {
        out.extend_from_slice(b"\n\n");
        return None;
    }
    Some(end)
}

fn push_gap(
    session: &Session,
    out: &mut Vec<u8>,
    key: StreamKey,
    after: EventSeq,
    lost_to: EventSeq,
) {
    let mut ids = Vec::with_capacity(64);
    session.push_event_id(&mut ids, key, after);
    let lost_from_len = ids.len();
    session.push_event_id(&mut ids, key, lost_to);
    let (lost_from, lost_to) = ids.split_at(lost_from_len);
    let mut msg = Vec::with_capacity(160);
    // The gap path is rare: only here is the stream's request id looked up.
    let request_id = session.stream(key).and_then(|s| s.request_id.as_ref());
    crate::wire::push_events_lost(&mut msg, request_id, lost_from, lost_to);
    crate::wire::sse::push_event(out, None, None, &msg);
}

/// Runs a request's work on this core; its outcome becomes the stream's final response. The
/// work is polled once right here: a tool that answers at once (`echo`, every read-only
/// fixture) finishes without a task spawn and its answer goes out in the same send as the
/// priming event. Otherwise it continues as a task that outlives the connection: a dropped
/// connection is not a cancellation (MCP 2025-11-25 transports: "Disconnection SHOULD NOT be
/// interpreted as the client cancelling").
pub(crate) fn spawn_job(session: Rc<RefCell<Session>>, key: StreamKey, mut work: Work) {
    let forward = forward_wake();
    let waker = Waker::from(forward.clone());
    // A call its first poll finishes completes inside the poll's report, so the mirror joins
    // a quick call's opening with its final event (`Session::open_quick_stream`).
    let done =
        polling(&session, || match Pin::new(&mut work).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(outcome) => {
                complete(&session, key, outcome);
                true
            }
            Poll::Pending => false,
        });
    if done {
        drop(waker);
        keep_forward_wake(forward);
        return;
    }
    let work = Forwarded { work, forward, waker, session: Rc::downgrade(&session) };
    monoio::spawn(async move {
        let cancelled = cancelled(Rc::downgrade(&session), key);
        let outcome = monoio::select! {
            r = work => Some(r),
            _ = cancelled => None,
        };
        if let Some(outcome) = outcome {
            complete(&session, key, outcome);
        }
    });
}

/// A request's work: a tool's answer to come (a user provider's value, or a built-in tool's
/// `ToolAnswer`, in a slot the tool reuses).
pub(crate) type Work = RunningWork;

/// Ends stream `key` with the outcome of a call that answered at its call (a built-in instant
/// tool: no future, no task), reported as one poll, as `spawn_job`'s first poll would be.
pub(crate) fn finish_now(
    session: &Rc<RefCell<Session>>,
    key: StreamKey,
    outcome: ProviderResult<ToolAnswer<'_>>,
) {
    polling(session, || complete(session, key, outcome));
}

/// A waker that forwards to whichever task waker was registered last. monoio 0.2.4's timer keeps
/// the *first* waker a sleep was polled with (`time/driver/entry.rs`: `if w.is_none()`), so a
/// work future polled inline before its task exists must always be polled with this same waker,
/// which then reaches the task.
struct ForwardWake(atomic_waker::AtomicWaker);

impl Wake for ForwardWake {
    fn wake(self: Arc<Self>) {
        self.0.wake();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake();
    }
}

/// Forwarding wakers a core keeps for the next calls (`forward_wake`): a call its first poll
/// finishes hands its waker back, so such a call allocates none; one that runs on keeps its.
pub(crate) const FORWARD_WAKERS_KEPT: usize = 8;

thread_local! {
    /// The core's spare forwarding wakers, never registered with a task.
    static FORWARD_WAKERS: RefCell<Vec<Arc<ForwardWake>>> = const { RefCell::new(Vec::new()) };
}

/// A forwarding waker for a new call: a spare one, else a new one.
fn forward_wake() -> Arc<ForwardWake> {
    let spare = FORWARD_WAKERS.with(|spares| spares.borrow_mut().pop());
    spare.unwrap_or_else(|| Arc::new(ForwardWake(atomic_waker::AtomicWaker::new())))
}

/// Keeps the waker of a call that finished at its first poll, if nothing else holds it (a
/// tool may have kept a clone, which could still wake it) and fewer than
/// `FORWARD_WAKERS_KEPT` are kept. It never reached a task, so nothing is registered in it.
fn keep_forward_wake(forward: Arc<ForwardWake>) {
    if Arc::strong_count(&forward) != 1 || Arc::weak_count(&forward) != 0 {
        return;
    }
    FORWARD_WAKERS.with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.len() < FORWARD_WAKERS_KEPT {
            spares.push(forward);
        }
    });
}

/// The work future, polled with the forwarding waker, which points at the current task.
struct Forwarded {
    work: Work,
    forward: Arc<ForwardWake>,
    waker: Waker,
    session: Weak<RefCell<Session>>,
}

impl Future for Forwarded {
    type Output = ProviderResult<ToolAnswer<'static>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.forward.0.register(cx.waker());
        let waker = self.waker.clone();
        let this = &mut *self;
        match this.session.upgrade() {
            Some(session) => polling(&session, || {
                Pin::new(&mut this.work).poll(&mut Context::from_waker(&waker))
            }),
            None => Pin::new(&mut this.work).poll(&mut Context::from_waker(&waker)),
        }
    }
}

/// Runs one poll of a request's work, reported to the session's observer
/// (`Session::poll_began`, `poll_ended`): the durable mirror gathers the events the poll
/// appends into one record, so a tool's burst of progress costs it one record, and the poll's
/// end queues it, so no event waits longer than the poll. Without `--durable` no report is made.
fn polling<T>(session: &Rc<RefCell<Session>>, poll: impl FnOnce() -> T) -> T {
    if !session.borrow().is_observed() {
        return poll();
    }
    session.borrow_mut().poll_began();
    let polled = poll();
    session.borrow_mut().poll_ended();
    polled
}

/// Completes when stream `key` is cancelled (or gone, or its session is). Single-core: nothing
/// can fire between the check and the wait.
pub(crate) async fn cancelled(session: Weak<RefCell<Session>>, key: StreamKey) {
    loop {
        let cancel = {
            let Some(rc) = session.upgrade() else { return };
            let s = rc.borrow();
            match s.stream(key) {
                Some(st) if !st.is_cancelled() => st.signals(),
                _ => return,
            }
        };
        cancel.cancel.notified().await;
    }
}

/// Appends the final response of a finished request (nothing for a cancelled one), encoded
/// with the request id its stream holds (read in place, not cloned per call).
fn complete(
    session: &Rc<RefCell<Session>>,
    key: StreamKey,
    outcome: ProviderResult<ToolAnswer<'_>>,
) {
    let event = {
        let s = session.borrow();
        let Some(request_id) = s.stream(key).and_then(|st| st.request_id.as_ref()) else {
            return;
        };
        match outcome {
            Ok(answer) => encode_event(|out| {
                crate::wire::push_result_with(out, request_id, |out| answer.push_json(out))
            }),
            Err(ProviderError::Cancelled) => return,
            Err(e) => encode_event(|out| crate::dispatch::push_provider_error(out, request_id, &e)),
        }
    };
    session.borrow_mut().finish(key, &event);
}

/// Bytes of its capacity the core's event buffer keeps between events; after a larger event
/// it is let go, so one large result does not stay resident.
pub(crate) const EVENT_SCRATCH_KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    /// The core's buffer an event is encoded in (`encode_event`), reused across events.
    static EVENT_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An event encoded in the core's reused buffer, to be appended to a ring (which copies it
/// into its own payload pages); the buffer goes back to the core when this is dropped. So
/// encoding and storing an event allocates nothing once both buffers have grown (issue 40 §1).
pub(crate) struct EncodedEvent(Vec<u8>);

/// The event `write` encodes, in the core's buffer. The buffer is taken, not borrowed: a
/// `write` that encoded another event meanwhile would find it empty and use its own.
pub(crate) fn encode_event(write: impl FnOnce(&mut Vec<u8>)) -> EncodedEvent {
    let mut buffer = EVENT_SCRATCH.with(|scratch| scratch.take());
    buffer.clear();
    write(&mut buffer);
    EncodedEvent(buffer)
}

impl std::ops::Deref for EncodedEvent {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for EncodedEvent {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for EncodedEvent {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.0);
        if buffer.capacity() <= EVENT_SCRATCH_KEEP_BYTES {
            // `try_with`: a thread's locals may be gone while it exits.
            let _ = EVENT_SCRATCH.try_with(|scratch| *scratch.borrow_mut() = buffer);
        }
    }
}

/// Bookkeeping after a writer with `epoch` sent a batch ending at `after`.
pub(crate) fn after_send(
    s: &mut Session,
    key: StreamKey,
    epoch: u64,
    after: EventSeq,
    batch: Batch,
) {
    if !s.stream(key).is_some_and(|st| st.is_attached_by(epoch)) {
        // An observer, or a writer another connection took the stream from while its last send
        // was in flight: the owner's state is not its own, but a client that was sent the
        // whole stream holds it (else the stream stays owed and holds the session, found by
        // the fault test).
        if batch == Batch::Ended {
            s.mark_all_delivered(key);
        }
        return;
    }
    s.wrote(key, epoch, after);
    match batch {
        Batch::Ended => s.delivered_and_detach(key, epoch),
        Batch::Dropped | Batch::Gap | Batch::Cut => s.detach(key, epoch),
        Batch::Park => s.park(key, epoch),
        Batch::More | Batch::Superseded => s.caught_up(key, epoch, after),
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
