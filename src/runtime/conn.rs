//! One client connection: owned read and write buffers, per-read timeouts, and the loop
//! read → parse → `transport::handle` → write, including the SSE writer that drains a stream's
//! events from the replay ring in one chunk per send (runtime-notes §4).
//!
//! Called by `worker` for each accepted or handed-over socket. Never: interprets MCP; never
//! leaves a read buffer inside a dropped I/O future (timeouts cancel and take the buffer back).

use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncWriteRentExt, CancelableAsyncReadRent, Canceller};
use monoio::net::TcpStream;

use crate::endpoint::{self, Core, Outcome, Request};
use crate::http::{self, Method};
use crate::legacy::stream::{self, Batch};
use crate::legacy::SseJob;
use crate::runtime::handoff::{self, Inboxes, Moved};
use crate::wire::{Answer, Refusal};

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// Bytes of SSE frames one send carries at most (a larger backlog goes in several sends).
const SSE_BATCH_BYTES: usize = 256 * 1024;

/// How a read ended.
enum ReadEnd {
    /// Bytes were appended.
    Data,
    /// The peer closed or the socket failed.
    Closed,
    /// No byte within the timeout.
    TimedOut,
}

/// Appends whatever arrives within `timeout` to `buf`.
async fn read_some(socket: &mut TcpStream, buf: &mut Vec<u8>, timeout: Duration) -> ReadEnd {
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
pub async fn serve(core: Rc<Core>, inboxes: Inboxes, mut socket: TcpStream, mut buf: Vec<u8>) {
    core.metrics.connections_active.inc();
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    // SSE frames of one batch before they become a chunk; reused by every stream of this
    // connection.
    let mut frames: Vec<u8> = Vec::with_capacity(4096);
    let handed = loop {
        let mut deadline: Option<Instant> = None;
        let head = match next_head(&core, &mut socket, &mut buf, &mut deadline).await {
            Ok(Some(h)) => h,
            Ok(None) => break false,
            Err(refusal) => {
                Answer::Refused { refusal, id: None }.render(&mut out, false);
                let _ = write_out(&mut socket, out).await;
                break false;
            }
        };
        let body_len = match body_length(&core, &head) {
            Ok(n) => n,
            Err(refusal) => {
                Answer::Refused { refusal, id: None }.render(&mut out, false);
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
                ReadEnd::Closed | ReadEnd::TimedOut => {
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
                buf.drain(..consumed);
                let (ok, o) = write_out(&mut socket, out).await;
                out = o;
                if !ok || !keep_alive {
                    break false;
                }
            }
            Outcome::Stream(job) => {
                buf.drain(..consumed);
                let (reusable, o) =
                    write_stream(&core, &mut socket, &mut buf, &mut frames, out, job).await;
                out = o;
                if !reusable || !head.keep_alive {
                    break false;
                }
            }
        }
    };
    let _ = handed;
    core.metrics.connections_active.sub(1);
}

/// Reads until a whole request head is buffered. `Ok(None)`: closed or idle too long. The
/// head (and then the body) must arrive within `--header-timeout-ms` of the request's first
/// byte: a deadline, not a per-read timeout, so a peer dripping one byte at a time cannot hold
/// the connection (slowloris).
async fn next_head(
    core: &Core,
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
            Err(http::ParseError::Malformed)
            | Err(http::ParseError::BadContentLength)
            | Err(http::ParseError::BadHost) => return Err(Refusal::InvalidRequest),
        }
        let timeout = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => core.cfg.idle_timeout,
        };
        match read_some(socket, buf, timeout).await {
            ReadEnd::Data => {
                deadline.get_or_insert_with(|| Instant::now() + core.cfg.header_timeout);
            }
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
fn body_length(core: &Core, head: &http::RequestHead) -> Result<usize, Refusal> {
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
            ReadEnd::Closed | ReadEnd::TimedOut => break,
        }
    }
}

/// Moves the connection, with its unhandled bytes, to `target`'s inbox.
fn hand_off(core: &Core, inboxes: &Inboxes, target: u16, socket: TcpStream, pending: Vec<u8>) {
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
/// over, or the peer goes away. Returns whether the connection can serve another request.
async fn write_stream(
    core: &Core,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    frames: &mut Vec<u8>,
    mut out: Vec<u8>,
    job: SseJob,
) -> (bool, Vec<u8>) {
    let SseJob { session, key, epoch, mut cursor, rewrite } = job;
    let retry_ms = core.cfg.sse_retry_ms;
    let mut watch_peer = true;
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
                SSE_BATCH_BYTES,
            )
        };
        if batch == Batch::Gap {
            core.metrics.gaps_total.inc();
        }
        if !frames.is_empty() {
            crate::wire::sse::push_chunk(&mut out, frames);
        }
        let ends = matches!(batch, Batch::Ended | Batch::Dropped | Batch::Gap | Batch::Park);
        if ends {
            out.extend_from_slice(crate::wire::sse::CHUNK_END);
        }
        if batch == Batch::Superseded {
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
            if ends {
                return (batch != Batch::Park, out);
            }
            continue;
        }
        // Only readiness is awaited inside the select: a losing branch is dropped, and a read
        // future dropped there would take the connection buffer (pipelined requests) with it.
        let readable = monoio::select! {
            _ = notified => false,
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

/// After the socket turned readable: true if the peer closed, false if it sent bytes (appended
/// to `buf`, handled after the stream). Not cancelled by anything: the read returns the buffer.
async fn peer_closed(socket: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    match read_some(socket, buf, Duration::from_millis(1)).await {
        ReadEnd::Data => false,
        ReadEnd::Closed => true,
        ReadEnd::TimedOut => false,
    }
}
