//! One client connection: owned read and write buffers, per-read timeouts, and the loop
//! read → parse → `endpoint::handle` → write, including the SSE writer that drains a stream's
//! events from the replay ring in one chunk per send (runtime-notes §4).
//!
//! During a drain (`runtime::Drain`): an idle keep-alive connection closes at once, every answer
//! carries `Connection: close`, and at the drain's end an SSE writer sends what is ready plus
//! the chunked body's last chunk and closes (a client sees a clean end, not a cut).
//!
//! Called by `runtime` for each accepted or handed-over socket. Never: interprets MCP; never
//! leaves a read buffer inside a dropped I/O future (timeouts cancel and take the buffer back).

use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncWriteRentExt, CancelableAsyncReadRent, Canceller};
use monoio::net::TcpStream;

use crate::endpoint::{self, Endpoint, Outcome, Request};
use crate::http::{self, Method};
use crate::legacy::session::StreamKind;
use crate::legacy::stream::{self, Batch};
use crate::legacy::SseJob;
use crate::runtime::handoff::{self, Inboxes, Moved};
use crate::runtime::Drain;
use crate::wire::jsonrpc::RawId;
use crate::wire::{Answer, Code, Refusal};

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

/// How a read ended.
enum ReadEnd {
    /// Bytes were appended.
    Data,
    /// The peer closed or the socket failed.
    Closed,
    /// No byte within the timeout.
    TimedOut,
    /// No byte before the `stop` future of `read_some_or` completed.
    Stopped,
}

/// Appends whatever arrives within `timeout` to `buf`.
async fn read_some(socket: &mut TcpStream, buf: &mut Vec<u8>, timeout: Duration) -> ReadEnd {
    read_some_or(socket, buf, timeout, std::future::pending()).await
}

/// `read_some`, also ended (`Stopped`) when `stop` completes first.
async fn read_some_or(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> ReadEnd {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    let owned = std::mem::take(buf);
    let len = owned.len();
    let canceller = Canceller::new();
    let read = socket.cancelable_read(owned.slice_mut(len..), canceller.handle());
    let mut read = std::pin::pin!(read);
    let (res, slice) = monoio::select! {
        r = &mut read => r,
        _ = monoio::time::sleep(timeout) => {
            let _canceled = canceller.cancel();
            let (res, slice) = read.await;
            *buf = slice.into_inner();
            return match res {
                Ok(n) if n > 0 => ReadEnd::Data,
                _ => ReadEnd::TimedOut,
            };
        }
        _ = stop => {
            let _canceled = canceller.cancel();
            let (res, slice) = read.await;
            *buf = slice.into_inner();
            return match res {
                Ok(n) if n > 0 => ReadEnd::Data,
                _ => ReadEnd::Stopped,
            };
        }
    };
    *buf = slice.into_inner();
    match res {
        Ok(n) if n > 0 => ReadEnd::Data,
        _ => ReadEnd::Closed,
    }
}

/// Writes all of `out` and gives the buffer back (cleared on success).
async fn write_out(socket: &mut TcpStream, out: Vec<u8>) -> (bool, Vec<u8>) {
    let (res, mut out) = socket.write_all(out).await;
    out.clear();
    (res.is_ok(), out)
}

/// Serves one connection until it closes, or hands it to another core.
pub async fn serve(
    core: Rc<Endpoint>,
    drain: Rc<Drain>,
    inboxes: Inboxes,
    mut socket: TcpStream,
    mut buf: Vec<u8>,
) {
    core.metrics.connections_active.inc();
    let open = drain.open();
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    // SSE frames of one batch before they become a chunk; reused by every stream of this
    // connection.
    let mut frames: Vec<u8> = Vec::with_capacity(4096);
    let handed = loop {
        let mut deadline: Option<Instant> = None;
        let mut head = match next_head(&core, &drain, &mut socket, &mut buf, &mut deadline).await {
            Ok(Some(h)) => h,
            Ok(None) => break false,
            Err(refusal) => {
                Answer::Refused { refusal, id: None }.render(&mut out, false);
                let _ = write_out(&mut socket, out).await;
                break false;
            }
        };
        // Draining: answer, then close (`Connection: close`), so no client waits on a
        // connection that is about to go.
        if drain.draining() {
            head.keep_alive = false;
        }
        let body_len = match body_length(&core, &head) {
            Ok(n) => n,
            Err(refusal) => {
                Answer::Refused { refusal, id: None }.render(&mut out, false);
                endpoint::cors::share_if_listed(
                    &core.cfg,
                    &head,
                    &buf[..head.head_len],
                    &mut out,
                    0,
                );
                let _ = write_out(&mut socket, out).await;
                let got = buf.len() - head.head_len;
                let unread = head.content_length.unwrap_or(0).saturating_sub(got);
                linger_close(&mut socket, &mut buf, unread).await;
                break false;
            }
        };
        while buf.len() < head.head_len + body_len {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match read_some(&mut socket, &mut buf, left.unwrap_or(core.cfg.header_timeout)).await {
                ReadEnd::Data => {}
                ReadEnd::Closed | ReadEnd::TimedOut | ReadEnd::Stopped => {
                    core.metrics.limit_timeout.inc();
                    break;
                }
            }
        }
        if buf.len() < head.head_len + body_len {
            break false;
        }
        let consumed = head.head_len + body_len;
        let outcome = {
            let (head_bytes, rest) = buf.split_at_mut(head.head_len);
            let req = Request { head: &head, head_bytes, body: &mut rest[..body_len] };
            endpoint::handle(&core, req, &mut out).await
        };
        match outcome {
            Outcome::HandOff(target) => {
                hand_off(&core, &inboxes, target, socket, buf);
                break true;
            }
            Outcome::Reply { keep_alive } => {
                release_request(&mut buf, consumed);
                let (ok, o) = write_out(&mut socket, out).await;
                out = o;
                if !ok || !keep_alive {
                    break false;
                }
            }
            Outcome::Modern(job) => {
                // A call's head is rendered later, once it is known (SSE or JSON): it is shared
                // with a listed origin there (`endpoint::cors`).
                let shared_with =
                    endpoint::cors::listed_origin(&core.cfg, &head, &buf[..head.head_len]);
                release_request(&mut buf, consumed);
                let (reusable, o) = drive_modern(
                    &core,
                    &drain,
                    &mut socket,
                    &mut buf,
                    &mut frames,
                    out,
                    job,
                    head.keep_alive,
                    shared_with,
                )
                .await;
                out = o;
                shrink(&mut frames, BUFFER_KEEP_BYTES);
                shrink(&mut out, BUFFER_KEEP_BYTES);
                if !reusable {
                    break false;
                }
            }
            Outcome::Stream(job) => {
                release_request(&mut buf, consumed);
                let (reusable, o) =
                    write_stream(&core, &drain, &mut socket, &mut buf, &mut frames, out, job).await;
                out = o;
                shrink(&mut frames, BUFFER_KEEP_BYTES);
                shrink(&mut out, BUFFER_KEEP_BYTES);
                if !reusable || !head.keep_alive {
                    break false;
                }
            }
        }
    };
    let _ = handed;
    drop(open);
    core.metrics.connections_active.sub(1);
}

/// Capacity a connection's buffers keep between requests. A large request or stream grows
/// them (up to `--max-body-bytes` or `--write-buffer-bytes`); an idle connection gives that
/// back, so many connections that once carried large messages do not pin it (issue 11 §2).
const BUFFER_KEEP_BYTES: usize = 64 * 1024;

/// Drops a handled request from the read buffer (pipelined bytes stay) and gives back the room
/// a large body needed.
fn release_request(buf: &mut Vec<u8>, consumed: usize) {
    buf.drain(..consumed);
    shrink(buf, BUFFER_KEEP_BYTES);
}

/// Shrinks `buf` to `keep` bytes of capacity (or its length) when it holds more.
fn shrink(buf: &mut Vec<u8>, keep: usize) {
    if buf.capacity() > keep {
        buf.shrink_to(keep.max(buf.len()));
    }
}

/// Reads until a whole request head is buffered. `Ok(None)`: closed, idle too long, or idle
/// while the core drains. The head (and then the body) must arrive within
/// `--header-timeout-ms` of the request's first byte: a deadline, not a per-read timeout, so a
/// peer dripping one byte at a time cannot hold the connection (slowloris).
async fn next_head(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: &mut Option<Instant>,
) -> Result<Option<http::RequestHead>, Refusal> {
    if !buf.is_empty() {
        *deadline = Some(Instant::now() + core.cfg.header_timeout);
    }
    loop {
        match http::parse_head(buf, core.cfg.header_bytes_max, core.cfg.headers_max) {
            Ok(Some(h)) => return Ok(Some(h)),
            Ok(None) => {}
            Err(http::ParseError::HeadTooLarge) | Err(http::ParseError::TooManyHeaders) => {
                core.metrics.limit_header.inc();
                return Err(Refusal::HeaderTooLarge);
            }
            Err(http::ParseError::Malformed) => return Err(Refusal::MalformedHead),
            Err(http::ParseError::BadContentLength) => return Err(Refusal::BadContentLength),
            Err(http::ParseError::BadHost) => return Err(Refusal::BadHost),
        }
        let end = match deadline {
            Some(d) => read_some(socket, buf, d.saturating_duration_since(Instant::now())).await,
            // Idle keep-alive: nothing of a request yet. A drain closes it at once.
            None if drain.draining() => return Ok(None),
            None => {
                let _idle = drain.idle();
                read_some_or(socket, buf, core.cfg.idle_timeout, drain.changed()).await
            }
        };
        match end {
            ReadEnd::Data => {
                deadline.get_or_insert_with(|| Instant::now() + core.cfg.header_timeout);
            }
            ReadEnd::Stopped => {}
            ReadEnd::Closed => return Ok(None),
            ReadEnd::TimedOut if buf.is_empty() => return Ok(None),
            ReadEnd::TimedOut => {
                core.metrics.limit_timeout.inc();
                return Err(Refusal::HeadTimeout);
            }
        }
    }
}

/// The body length a request announces, within the limits.
fn body_length(core: &Endpoint, head: &http::RequestHead) -> Result<usize, Refusal> {
    if head.chunked {
        return Err(Refusal::LengthRequired);
    }
    match (head.method(), head.content_length) {
        (_, Some(n)) if n > core.cfg.body_bytes_max => {
            core.metrics.limit_body.inc();
            Err(Refusal::BodyTooLarge)
        }
        (_, Some(n)) => Ok(n),
        (Method::Post, None) => Err(Refusal::LengthRequired),
        (_, None) => Ok(0),
    }
}

/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_secs(1);

/// Closes after a refusal without a TCP reset: stops sending, then reads and discards up to
/// `unread` announced body bytes (bounded by `LINGER`), so the refusal is not destroyed by an
/// RST for unread data (RFC 9112 §9.6).
async fn linger_close(socket: &mut TcpStream, buf: &mut Vec<u8>, unread: usize) {
    use monoio::io::AsyncWriteRent;
    let _ = socket.shutdown().await;
    let deadline = Instant::now() + LINGER;
    let mut drained = 0usize;
    while drained < unread {
        buf.clear();
        match read_some(socket, buf, deadline.saturating_duration_since(Instant::now())).await {
            ReadEnd::Data => drained += buf.len(),
            ReadEnd::Closed | ReadEnd::TimedOut | ReadEnd::Stopped => break,
        }
    }
}

/// Moves the connection, with its unhandled bytes, to `target`'s inbox.
fn hand_off(core: &Endpoint, inboxes: &Inboxes, target: u16, socket: TcpStream, pending: Vec<u8>) {
    let Ok(socket) = handoff::detach_socket(socket) else { return };
    core.metrics.handoffs_total.inc();
    if let Some(inbox) = inboxes.get(usize::from(target)) {
        if let Err(back) = inbox.send(Moved { socket, pending }) {
            // Full inbox: answer 503 on the (now std, blocking-capable) socket and close.
            let mut out = Vec::new();
            Answer::Refused { refusal: Refusal::Unavailable, id: None }.render(&mut out, false);
            let mut s = back.socket;
            let _ = s.set_nonblocking(false);
            let _ = std::io::Write::write_all(&mut s, &out);
        }
    }
}

/// Writes an SSE stream after its response head (already in `out`) until it ends, is taken
/// over, the peer goes away, or the drain ends (then: what is ready, the last chunk, close).
/// Returns whether the connection can serve another request.
async fn write_stream(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    mut out: Vec<u8>,
    job: SseJob,
) -> (bool, Vec<u8>) {
    let SseJob { session, key, epoch, mut cursor, rewrite } = job;
    let retry_ms = core.cfg.sse_retry_ms;
    let mut watch_peer = true;
    // A standalone GET stream waits for messages that may never come: a drain does not wait
    // for it (it is ended with the others at the drain's end).
    let standalone =
        session.borrow().stream(key).is_some_and(|st| st.kind == StreamKind::Standalone);
    let _idle = standalone.then(|| drain.idle());
    loop {
        let signal = session.borrow().stream(key).map(|s| s.signal.clone());
        let Some(signal) = signal else {
            return (false, out);
        };
        let notified = signal.notified();
        frames.clear();
        let batch = {
            let mut s = session.borrow_mut();
            stream::fill_batch(
                &mut s,
                key,
                epoch,
                &mut cursor,
                rewrite.as_ref(),
                retry_ms,
                frames,
                core.cfg.write_buffer_bytes,
            )
        };
        if batch == Batch::Gap {
            core.metrics.gaps_total.inc();
        }
        if !frames.is_empty() {
            crate::wire::sse::push_chunk(&mut out, frames);
        }
        let ends = matches!(batch, Batch::Ended | Batch::Dropped | Batch::Gap | Batch::Park);
        // The drain's end: what is ready goes out, then the last chunk (no final response).
        let cut = !ends && batch != Batch::Superseded && drain.ending();
        if ends || cut {
            out.extend_from_slice(crate::wire::sse::CHUNK_END);
        }
        if cut {
            core.metrics.drain_streams_ended.inc();
        }
        if batch == Batch::Superseded {
            return (false, out);
        }
        if batch == Batch::Cut {
            // Like a network cut: no terminating chunk, so the client resumes from its last
            // whole event (and learns of the evicted one as a -31003 gap).
            session.borrow_mut().detach(key, epoch);
            return (false, out);
        }
        if !out.is_empty() {
            let (ok, o) = write_out(socket, out).await;
            out = o;
            let mut s = session.borrow_mut();
            if !ok {
                s.detach(key, epoch);
                return (false, out);
            }
            stream::after_send(&mut s, key, epoch, cursor.after, batch);
            if cut {
                s.detach(key, epoch);
                return (false, out);
            }
            if ends {
                return (batch != Batch::Park, out);
            }
            continue;
        }
        // Only readiness is awaited inside the select: a losing branch is dropped, and a read
        // future dropped there would take the connection buffer (pipelined requests) with it.
        let readable = monoio::select! {
            _ = notified => false,
            _ = drain.changed() => false,
            _ = monoio::time::sleep(core.cfg.sse_keepalive) => {
                frames.clear();
                crate::wire::sse::push_comment(frames);
                crate::wire::sse::push_chunk(&mut out, frames);
                false
            }
            _ = socket.readable(false), if watch_peer => true,
        };
        if readable {
            if peer_closed(socket, buf).await {
                session.borrow_mut().detach(key, epoch);
                return (false, out);
            }
            watch_peer = false;
        }
    }
}

/// Drives a 2026-07-28 job to its end: a call (its events as an SSE stream, opened at the
/// first event; its final answer as JSON when it had none) or a `subscriptions/listen` stream.
/// A peer that closes the connection cancels the call: the job is dropped, which fires the
/// call's cancel signal and drops its work, and nothing more is written. Returns whether the
/// connection can serve another request.
#[allow(clippy::too_many_arguments)]
async fn drive_modern(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    out: Vec<u8>,
    job: crate::modern::Job,
    keep_alive: bool,
    shared_with: Option<&str>,
) -> (bool, Vec<u8>) {
    match job {
        crate::modern::Job::Call(call) => {
            drive_call(core, drain, socket, buf, frames, out, call, keep_alive, shared_with).await
        }
        crate::modern::Job::Listen(listen) => {
            drive_listen(core, drain, socket, buf, frames, out, listen).await
        }
        crate::modern::Job::Observe(observer) => {
            drive_observer(core, drain, socket, buf, frames, out, observer, keep_alive, shared_with)
                .await
        }
    }
}

/// A request with an Idempotency-Key reading its keyed call: the first request streams it
/// live (SSE from the first notification, JSON when there was none); a retry waits for the
/// outcome until `wait_until`, then writes everything at once, or 409 -31004 when the call
/// still runs. Closing the connection does not cancel a keyed call (its record keeps it).
#[allow(clippy::too_many_arguments)]
async fn drive_observer(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    mut out: Vec<u8>,
    observer: crate::modern::Observer,
    keep_alive: bool,
    shared_with: Option<&str>,
) -> (bool, Vec<u8>) {
    let crate::modern::Observer { record, rewrite, id, wait_until } = observer;
    let body_offset = crate::wire::jsonrpc::response_body_offset(&record.id);
    let mut cursor = 0usize;
    let mut streaming = false;
    let mut watch_peer = true;
    let mut pending: Vec<bytes::Bytes> = Vec::new();
    loop {
        let finished = record.outcome.borrow().clone();
        // A retry writes nothing until the outcome is there (then all at once), or its wait
        // ran out (then 409, below).
        let waiting = wait_until.is_some() && finished.is_none();
        if !waiting {
            pending.clear();
            record.sink.recorded_from(cursor, &mut pending);
            cursor += pending.len();
            frames.clear();
            for event in &pending {
                match &rewrite {
                    Some(rw) => {
                        let rewritten =
                            crate::wire::notification::rewrite_event(rw, event, false, 0);
                        crate::wire::sse::push_event(frames, None, None, &rewritten);
                    }
                    None => crate::wire::sse::push_event(frames, None, None, event),
                }
            }
            if !frames.is_empty() {
                if !streaming {
                    render_shared(&mut out, Answer::SseHeadStateless, true, shared_with);
                    streaming = true;
                }
                crate::wire::sse::push_chunk(&mut out, frames);
            }
        }
        if let Some((body, status)) = &finished {
            let body = match &rewrite {
                Some(rw) => crate::wire::notification::rewrite_event(rw, body, true, body_offset),
                None => body.to_vec(),
            };
            let status = *status;
            let end = FinalAnswer { status, body: &body, streaming, keep_alive, shared_with };
            end.render(&mut out, frames);
            let (ok, o) = write_out(socket, out).await;
            return (ok && keep_alive, o);
        }
        if waiting && wait_until.is_some_and(|until| Instant::now() >= until) {
            // A retry whose call still runs after --owed-wait-ms: it learns to come back.
            core.metrics.rejected_held_too_long.inc();
            let mut body = Vec::with_capacity(160);
            let message = "the call with this Idempotency-Key is still running: retry later";
            let data = Some(r#"{"inFlight":true}"#);
            crate::wire::push_error_response(
                &mut body,
                Some(&id),
                Code::HeldTooLong,
                message,
                data,
            );
            let answer = Answer::JsonStatus { status: crate::wire::Status::Conflict, body: &body };
            render_shared(&mut out, answer, keep_alive, shared_with);
            let (ok, o) = write_out(socket, out).await;
            return (ok && keep_alive, o);
        }
        if drain.ending() {
            end_for_drain(&mut out, streaming, &id, shared_with);
            let (_, o) = write_out(socket, out).await;
            return (false, o);
        }
        if !out.is_empty() {
            let (ok, o) = write_out(socket, out).await;
            out = o;
            if !ok {
                return (false, out);
            }
        }
        let events = record.sink.wake.notified();
        let done = record.done.notified();
        let deadline = wait_until
            .map_or(core.cfg.sse_keepalive, |u| u.saturating_duration_since(Instant::now()));
        let closed = monoio::select! {
            _ = events => false,
            _ = done => false,
            _ = drain.changed() => false,
            _ = monoio::time::sleep(deadline) => {
                if streaming {
                    frames.clear();
                    crate::wire::sse::push_comment(frames);
                    crate::wire::sse::push_chunk(&mut out, frames);
                }
                false
            }
            _ = socket.readable(false), if watch_peer => true,
        };
        if closed {
            if peer_closed(socket, buf).await {
                return (false, out);
            }
            watch_peer = false;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive_call(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    mut out: Vec<u8>,
    mut call: crate::modern::call::CallJob,
    keep_alive: bool,
    shared_with: Option<&str>,
) -> (bool, Vec<u8>) {
    let mut streaming = false;
    let mut watch_peer = true;
    loop {
        frames.clear();
        if call.sink.take_frames(frames) {
            if !streaming {
                render_shared(&mut out, Answer::SseHeadStateless, true, shared_with);
                streaming = true;
            }
            crate::wire::sse::push_chunk(&mut out, frames);
        }
        if call.is_settled() {
            let mut body = Vec::with_capacity(256);
            let status = call.finish(&mut body);
            let end = FinalAnswer { status, body: &body, streaming, keep_alive, shared_with };
            end.render(&mut out, frames);
            let (ok, o) = write_out(socket, out).await;
            return (ok && keep_alive, o);
        }
        if drain.ending() {
            // The server stops: the call is cancelled (dropped) and its stream ends; a
            // 2026-07-28 client re-issues the request elsewhere.
            end_for_drain(&mut out, streaming, &call.id, shared_with);
            core.metrics.drain_streams_ended.inc();
            let (_, o) = write_out(socket, out).await;
            return (false, o);
        }
        if !out.is_empty() {
            let (ok, o) = write_out(socket, out).await;
            out = o;
            if !ok {
                core.metrics.modern_cancelled_total.inc();
                return (false, out);
            }
        }
        let woke = call.sink.clone();
        let woke = woke.wake.notified();
        let closed = monoio::select! {
            _ = call.settle() => false,
            _ = woke => false,
            _ = drain.changed() => false,
            _ = monoio::time::sleep(core.cfg.sse_keepalive), if streaming => {
                frames.clear();
                crate::wire::sse::push_comment(frames);
                crate::wire::sse::push_chunk(&mut out, frames);
                false
            }
            _ = socket.readable(false), if watch_peer => true,
        };
        if closed {
            if peer_closed(socket, buf).await {
                core.metrics.modern_cancelled_total.inc();
                return (false, out);
            }
            watch_peer = false;
        }
    }
}

async fn drive_listen(
    core: &Endpoint,
    drain: &Drain,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    mut out: Vec<u8>,
    mut listen: crate::modern::listen::ListenJob,
) -> (bool, Vec<u8>) {
    // A listen stream waits for changes that may never come: a drain does not wait for it.
    let _idle = drain.idle();
    frames.clear();
    listen.acknowledge(frames);
    crate::wire::sse::push_chunk(&mut out, frames);
    let mut watch_peer = true;
    let mut next_keepalive = Instant::now() + core.cfg.sse_keepalive;
    loop {
        frames.clear();
        if listen.changes(frames) {
            crate::wire::sse::push_chunk(&mut out, frames);
        }
        if drain.ending() {
            frames.clear();
            listen.close(frames);
            crate::wire::sse::push_chunk(&mut out, frames);
            out.extend_from_slice(crate::wire::sse::CHUNK_END);
            let (_, o) = write_out(socket, out).await;
            return (false, o);
        }
        if !out.is_empty() {
            let (ok, o) = write_out(socket, out).await;
            out = o;
            if !ok {
                return (false, out);
            }
        }
        // Polled every LISTEN_POLL, so the keep-alive is a deadline rather than a timer.
        if Instant::now() >= next_keepalive {
            frames.clear();
            crate::wire::sse::push_comment(frames);
            crate::wire::sse::push_chunk(&mut out, frames);
            next_keepalive = Instant::now() + core.cfg.sse_keepalive;
            continue;
        }
        let readable = monoio::select! {
            _ = monoio::time::sleep(crate::modern::listen::LISTEN_POLL) => false,
            _ = drain.changed() => false,
            _ = socket.readable(false), if watch_peer => true,
        };
        if readable {
            if peer_closed(socket, buf).await {
                return (false, out);
            }
            watch_peer = false;
        }
    }
}

/// After the socket turned readable: true if the peer closed, false if it sent bytes (appended
/// to `buf`, handled after the stream). Not cancelled by anything: the read returns the buffer.
async fn peer_closed(socket: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    match read_some(socket, buf, Duration::from_millis(1)).await {
        ReadEnd::Data => false,
        ReadEnd::Closed => true,
        ReadEnd::TimedOut | ReadEnd::Stopped => false,
    }
}

/// The last answer of a 2026-07-28 request: the final event and the end of an SSE stream, or,
/// when nothing was streamed, the whole JSON response with its status.
struct FinalAnswer<'a> {
    status: crate::wire::Status,
    body: &'a [u8],
    streaming: bool,
    keep_alive: bool,
    shared_with: Option<&'a str>,
}

impl FinalAnswer<'_> {
    fn render(&self, out: &mut Vec<u8>, frames: &mut Vec<u8>) {
        if self.streaming {
            frames.clear();
            crate::wire::sse::push_event(frames, None, None, self.body);
            crate::wire::sse::push_chunk(out, frames);
            out.extend_from_slice(crate::wire::sse::CHUNK_END);
        } else {
            let answer = Answer::JsonStatus { status: self.status, body: self.body };
            render_shared(out, answer, self.keep_alive, self.shared_with);
        }
    }
}

/// The drain's end reached a 2026-07-28 request: its stream ends (nothing to resume in this
/// revision: the client re-issues it), or, when nothing was streamed yet, 503 + Retry-After.
fn end_for_drain(out: &mut Vec<u8>, streaming: bool, id: &RawId, shared_with: Option<&str>) {
    if streaming {
        out.extend_from_slice(crate::wire::sse::CHUNK_END);
    } else {
        let answer = Answer::Refused { refusal: Refusal::Draining, id: Some(id) };
        render_shared(out, answer, false, shared_with);
    }
}

/// Renders `answer` and shares it with `shared_with`, a listed origin (`endpoint::cors`).
fn render_shared(
    out: &mut Vec<u8>,
    answer: Answer<'_>,
    keep_alive: bool,
    shared_with: Option<&str>,
) {
    let head_start = out.len();
    answer.render(out, keep_alive);
    if let Some(origin) = shared_with {
        endpoint::cors::share_response(out, head_start, origin);
    }
}
