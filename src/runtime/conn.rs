//! One client connection: owned read and write buffers (`Conn`), per-read timeouts, and the
//! loop read → parse → `endpoint::handle` → write a reply, hand the connection to another
//! core, or hand a response stream to the driver (`runtime::stream`).
//!
//! During a drain (`runtime::Drain`): an idle keep-alive connection closes at once and every
//! answer carries `Connection: close` (a stream's end at the drain's end is the driver's); a
//! connection that has not sent its first request yet (one the drain took from the accept
//! queue) is waited for, and answered 503 if the drain ends first.
//!
//! Called by `runtime` for each accepted or handed-over socket. Never: interprets MCP or
//! writes a stream itself; never leaves a read buffer that may hold request bytes inside a
//! dropped I/O future (timeouts cancel and take the buffer back). The one read dropped instead
//! is a kept-alive connection's wait for its next request, whose timeout or drain closes the
//! connection (`socket::read_some_or_close`).

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::time::Sleep;

use crate::endpoint::{self, Endpoint, Outcome, Request};
use crate::http::{self, Method};
use crate::metrics::RequestLabel;
use crate::runtime::drain::{Admitted, Drain};
use crate::runtime::handoff::{self, Inboxes, Moved};
use crate::runtime::socket::BUFFER_KEEP_BYTES;
use crate::runtime::socket::{self, read_some, read_some_or, read_some_or_close};
use crate::runtime::socket::{shrink, Conn, ReadEnd, Transport};
use crate::runtime::stream;
use crate::trace::Span;
use crate::wire::{Answer, Refusal};

/// Serves one connection until it closes, or hands it to another core; `admitted` counts it in
/// its core's drain from before this task first ran. `hops`: how many times
/// its first request (in `buf`) was already handed between cores (0 for an accepted socket); a
/// handed request that would be handed on again is refused instead (`Refusal::HandedTwice`),
/// so no request bounces between cores. Later requests on the connection start at 0. A TLS
/// connection's handshake (none yet on a handed one) must end within `--header-timeout-ms`.
pub(crate) async fn serve(
    core: Rc<Endpoint>,
    admitted: Admitted,
    inboxes: Inboxes,
    socket: Transport,
    buf: Vec<u8>,
    mut hops: u8,
) {
    assert!(hops <= handoff::HOPS_MAX, "a request was handed {hops} times");
    core.metrics.connections_active.inc();
    let Some(mut conn) = open(&core, admitted.drain(), socket, buf).await else {
        core.metrics.connections_active.sub(1);
        return;
    };
    // No request read yet: during a drain such a connection is waited for (its client
    // connected to send one), not closed as an idle keep-alive one.
    let mut first = true;
    // The tape each request's body is decoded onto, reused by the next (`wire::jsonrpc`).
    let tape = crate::wire::jsonrpc::TapeSlot::default();
    // The idle timeout between requests: one timer for the connection's life, pushed later by
    // each wait (`socket::read_some_or_close`), not one registered and removed per request.
    let mut idle = std::pin::pin!(monoio::time::sleep(core.cfg.http.idle_timeout));
    // Each request's head, filled in place (`next_request`), and what `endpoint::handle` made
    // of it (written in place too; a stream is driven where it lies).
    let mut whole = Whole::default();
    let mut outcome = Outcome::Reply { keep_alive: false };
    loop {
        if !next_request(&mut conn, idle.as_mut(), first, &mut whole).await {
            break;
        }
        let head = &whole;
        first = false;
        let started = Instant::now();
        let label = Cell::new(RequestLabel::default());
        let mut span = span_of(&conn, &head.head);
        let consumed = head.head.head_len + head.body_len;
        {
            let (head_bytes, rest) = conn.buf.split_at_mut(head.head.head_len);
            let body = &mut rest[..head.body_len];
            let socket = conn.socket.tcp();
            let req = Request {
                socket,
                head: &head.head,
                head_bytes,
                body,
                tape: &tape,
                auth_cache: &conn.auth_cache,
                claims: None,
                label: &label,
                policy: None,
                span: span.as_ref(),
            };
            endpoint::handle(&core, req, &mut conn.out, &mut outcome).await;
        }
        match &mut outcome {
            Outcome::HandOff(_) if hops >= handoff::HOPS_MAX => {
                refuse_handed_twice(&mut conn).await;
                break;
            }
            &mut Outcome::HandOff(target) => {
                let Conn { socket, buf, .. } = conn;
                hand_off(&core, &inboxes, target, socket, buf, hops + 1);
                core.metrics.connections_active.sub(1);
                return;
            }
            &mut Outcome::Reply { keep_alive } => {
                hops = 0;
                answered(&mut conn, consumed, span.as_ref());
                let written = conn.write().await;
                settle(&core, &label, started, Instant::now(), &mut span);
                // A line the answer did not wait for (a 409's migration decision), after the
                // request's duration is taken: the answer is out, the write is not its cost.
                crate::logging::write_deferred();
                if !written || !keep_alive {
                    break;
                }
            }
            Outcome::Stream(s) => {
                hops = 0;
                answered(&mut conn, consumed, span.as_ref());
                let ended = stream::drive_stream(&mut conn, s, started).await;
                // The stream ends here, dropped in place (a 2026-07-28 call not finished is
                // cancelled by that) before the request's duration is taken, as it always was.
                outcome = Outcome::Reply { keep_alive: false };
                settle(&core, &label, started, ended.at, &mut span);
                conn.shrink_buffers();
                if !ended.reusable || !head.head.keep_alive {
                    break;
                }
            }
        }
    }
    // A TLS client sees a clean end, not a truncation.
    conn.socket.close_notify(LINGER).await;
    // `conn` (its socket) and then `admitted` drop here, in that order.
    core.metrics.connections_active.sub(1);
}

/// A connection's state over `socket`, once its TLS handshake (none on a plain or a handed
/// connection) ended within `--header-timeout-ms`. `None`: closed, failed (the alert was
/// sent) or too slow: nothing to answer in HTTP.
async fn open<'c>(
    core: &'c Endpoint,
    drain: &'c Drain,
    socket: Transport,
    buf: Vec<u8>,
) -> Option<Conn<'c>> {
    let mut conn = Conn {
        core,
        drain,
        socket,
        buf,
        out: Vec::with_capacity(socket::OUT_INITIAL_BYTES),
        frames: Vec::with_capacity(socket::FRAMES_INITIAL_BYTES),
        auth_cache: Default::default(),
    };
    if conn.socket.handshaking() {
        let timeout = core.cfg.http.header_timeout;
        if !socket::handshake(&mut conn.socket, &mut conn.buf, timeout).await {
            core.metrics.tls_handshakes_failed_total.inc();
            return None;
        }
        core.metrics.tls_handshakes_total.inc();
    }
    Some(conn)
}

/// The request's SERVER span when tracing is on (`--otlp-endpoint`). Off, this test is all
/// tracing costs a request.
#[inline]
fn span_of(conn: &Conn<'_>, head: &http::RequestHead) -> Option<RefCell<Span>> {
    let on = conn.core.cfg.trace.endpoint.as_ref();
    on.map(|_| RefCell::new(request_span(&conn.buf[..head.head_len], head)))
}

/// A handed request that would be handed on again, answered here instead. `endpoint::owner`
/// is the same function on every core, so this is a bug: answer now rather than move the
/// request again.
async fn refuse_handed_twice(conn: &mut Conn<'_>) {
    debug_assert!(false, "a handed request would be handed on again");
    conn.core.metrics.handoffs_refused_total.inc();
    conn.out.clear();
    let refusal = Answer::Refused { refusal: Refusal::HandedTwice, id: None };
    refusal.render(&mut conn.out, false);
    let _ = conn.write().await;
}

/// The request's answer is in `conn.out`: its bytes (`consumed`) leave the read buffer, and
/// its span notes the answer.
#[inline]
fn answered(conn: &mut Conn<'_>, consumed: usize, span: Option<&RefCell<Span>>) {
    release_request(&mut conn.buf, consumed);
    if let Some(span) = span {
        note_answer(&mut span.borrow_mut(), &conn.out);
    }
}

/// The request is written (or its stream ended) at `ended`: its duration is counted under its
/// label and its span ends. `span` by reference, taken only when there is one: moved in, its
/// 136 bytes were copied for every request, traced or not (callgrind).
#[inline]
fn settle(
    core: &Endpoint,
    label: &Cell<RequestLabel>,
    started: Instant,
    ended: Instant,
    span: &mut Option<RefCell<Span>>,
) {
    core.metrics.hist.request(label.get(), started, ended);
    if span.is_some() {
        if let Some(span) = span.take() {
            span.into_inner().finish();
        }
    }
}

/// The SERVER span of a request (tracing on): the child of the client's `traceparent`, named
/// by its HTTP method until the body is decoded (`endpoint::admit`), with the transport
/// and the MCP headers' attributes (`mcp.session.id`, `mcp.protocol.version`).
fn request_span(head_bytes: &[u8], head: &http::RequestHead) -> Span {
    let method = match head.method() {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Delete => "DELETE",
        Method::Head => "HEAD",
        Method::Other => "_OTHER",
    };
    let mut span = Span::server(http::header_named(head_bytes, "traceparent"), method);
    span.set_str("network.transport", "tcp");
    span.set_str("network.protocol.name", "http");
    span.set_str("http.request.method", method);
    let header = |r: &Option<std::ops::Range<usize>>| {
        r.as_ref().and_then(|r| std::str::from_utf8(&head_bytes[r.clone()]).ok())
    };
    if let Some(session) = header(&head.session_id) {
        span.set_str("mcp.session.id", session);
    }
    if let Some(version) = header(&head.protocol_version) {
        span.set_str("mcp.protocol.version", version);
    }
    span
}

/// Notes the answer about to be written on the request's span: its HTTP status, and as
/// `error.type` a status of 400 or more or the code of a JSON-RPC error answer (a stream's
/// events are not read: its span ends with the stream).
fn note_answer(span: &mut Span, out: &[u8]) {
    let status = out.get(9..12).and_then(|s| std::str::from_utf8(s).ok());
    let Some(status) = status.and_then(|s| s.parse::<i64>().ok()) else { return };
    span.set_int("http.response.status_code", status);
    let body = out.windows(4).position(|w| w == b"\r\n\r\n").map(|at| &out[at + 4..]);
    if let Some(code) = body.and_then(crate::wire::jsonrpc::response_error_code) {
        span.set_int("rpc.response.status_code", code);
        span.fail(&code.to_string(), "JSON-RPC error");
    } else if status >= 400 {
        span.fail(&status.to_string(), "HTTP error status");
    }
}

/// A request whose head and body are buffered: the parsed head and the body's length. A
/// connection has one, filled in place by each `next_request`: returned by value, its 344
/// bytes were copied on every hop between the async functions (callgrind).
#[derive(Default)]
struct Whole {
    head: http::RequestHead,
    body_len: usize,
}

/// Reads the next whole request (head and body) into `whole`. `false`: the connection ends
/// (closed, idle, timed out, or refused here: the refusal is written and the connection lingers
/// closed). `idle`: the connection's idle timer (`serve`).
async fn next_request(
    conn: &mut Conn<'_>,
    idle: Pin<&mut Sleep>,
    first: bool,
    whole: &mut Whole,
) -> bool {
    let core = conn.core;
    let mut deadline: Option<Instant> = None;
    let head = &mut whole.head;
    match next_head(conn, idle, &mut deadline, first, head).await {
        Ok(true) => {}
        Ok(false) => return false,
        Err(refusal) => {
            Answer::Refused { refusal, id: None }.render(&mut conn.out, false);
            let _ = conn.write().await;
            if refusal == Refusal::ShuttingDown {
                // Its request may be in the socket unread (a read the drain's end cancelled):
                // closing now would reset the answer away.
                linger_close(&mut conn.socket, &mut conn.buf, usize::MAX).await;
            }
            return false;
        }
    }
    // Draining: answer, then close (`Connection: close`), so no client waits on a connection
    // that is about to go.
    if conn.drain.draining() {
        head.keep_alive = false;
    }
    let body_len = match body_length(core, head) {
        Ok(n) => n,
        Err(refusal) => {
            Answer::Refused { refusal, id: None }.render(&mut conn.out, false);
            let head_bytes = &conn.buf[..head.head_len];
            endpoint::cors::share_if_listed(&core.cfg, head, head_bytes, &mut conn.out, 0);
            let _ = conn.write().await;
            let got = conn.buf.len() - head.head_len;
            let unread = head.content_length.unwrap_or(0).saturating_sub(got);
            linger_close(&mut conn.socket, &mut conn.buf, unread).await;
            return false;
        }
    };
    while conn.buf.len() < head.head_len + body_len {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let timeout = left.unwrap_or(core.cfg.http.header_timeout);
        match read_some(&mut conn.socket, &mut conn.buf, timeout).await {
            ReadEnd::Data => {}
            ReadEnd::Closed | ReadEnd::TimedOut | ReadEnd::Stopped => {
                core.metrics.limit_timeout.inc();
                return false;
            }
        }
    }
    whole.body_len = body_len;
    true
}

/// Drops a handled request from the read buffer (pipelined bytes stay) and gives back the room
/// a large body needed.
fn release_request(buf: &mut Vec<u8>, consumed: usize) {
    buf.drain(..consumed);
    shrink(buf, BUFFER_KEEP_BYTES);
}

/// Reads until a whole request head is buffered and parses it into `head`: `Ok(true)`.
/// `Ok(false)`: closed, idle too long, or idle while the core drains. A connection's `first`
/// request is waited for while the core drains (the drain takes the accept queue: those
/// clients have not sent theirs yet, or it is not read yet), up to `--header-timeout-ms`, counted idle (a drain does not wait for it); at the
/// drain's end with nothing read it is answered 503 (`Refusal::ShuttingDown`). The head (and then the body) must arrive within
/// `--header-timeout-ms` of the request's first byte: a deadline, not a per-read timeout, so a
/// peer dripping one byte at a time cannot hold the connection (slowloris).
async fn next_head(
    conn: &mut Conn<'_>,
    mut idle: Pin<&mut Sleep>,
    deadline: &mut Option<Instant>,
    first: bool,
    head: &mut http::RequestHead,
) -> Result<bool, Refusal> {
    let Conn { core, drain, socket, buf, .. } = conn;
    if !buf.is_empty() {
        *deadline = Some(Instant::now() + core.cfg.http.header_timeout);
    }
    loop {
        // Nothing read yet (a kept-alive connection between requests): no head to parse.
        let parsed = match buf.is_empty() {
            true => Ok(false),
            false => {
                let (bytes_max, headers_max) =
                    (core.cfg.http.header_bytes_max, core.cfg.http.headers_max);
                http::parse_head_into(buf, bytes_max, headers_max, head)
            }
        };
        match parsed {
            Ok(true) => return Ok(true),
            Ok(false) => {}
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
            None if drain.draining() && !first => return Ok(false),
            None if drain.ending() => return Err(Refusal::ShuttingDown),
            None => {
                let _idle = drain.idle();
                let wait = if drain.draining() {
                    core.cfg.http.header_timeout
                } else {
                    core.cfg.http.idle_timeout
                };
                if first {
                    // A drain's phase change reads on (or answers 503): no byte may be lost.
                    read_some_or(socket, buf, wait, drain.changed()).await
                } else {
                    // Idle and kept alive: a timeout or a drain closes it (the arms below).
                    read_some_or_close(socket, buf, idle.as_mut(), wait, drain.changed()).await
                }
            }
        };
        match end {
            ReadEnd::Data => {
                deadline.get_or_insert_with(|| Instant::now() + core.cfg.http.header_timeout);
            }
            ReadEnd::Stopped => {}
            ReadEnd::Closed => return Ok(false),
            ReadEnd::TimedOut if buf.is_empty() => return Ok(false),
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
        (_, Some(n)) if n > core.cfg.http.body_bytes_max => {
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
pub(super) async fn linger_close(socket: &mut Transport, buf: &mut Vec<u8>, unread: usize) {
    socket.shutdown().await;
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

/// Moves the connection, with its unhandled bytes (and its TLS session), to `target`'s inbox;
/// `hops` counts this hand-off (at most `HOPS_MAX`).
fn hand_off(
    core: &Endpoint,
    inboxes: &Inboxes,
    target: u16,
    socket: Transport,
    pending: Vec<u8>,
    hops: u8,
) {
    assert!(hops <= handoff::HOPS_MAX, "a request handed {hops} times");
    let (socket, tls) = socket.into_parts();
    let Ok(socket) = handoff::detach_socket(socket) else { return };
    core.metrics.handoffs_total.inc();
    if let Some(inbox) = inboxes.get(usize::from(target)) {
        if let Err(back) = inbox.send(Moved { socket, tls, pending, hops }) {
            // Full inbox: answer 503 on the (now std, blocking-capable) socket and close.
            crate::logging::limited!(
                crate::logging::Kind::Handoff,
                tracing::Level::WARN,
                core = core.index,
                target_core = target,
                hops,
                culprit = "us",
                reason = "inbox full",
                "hand-off to the owner core failed: answered 503"
            );
            let mut out = Vec::new();
            Answer::Refused { refusal: Refusal::Unavailable, id: None }.render(&mut out, false);
            if let Some(mut session) = back.tls {
                out = socket::seal(&mut session, &out);
            }
            let mut s = back.socket;
            let _ = s.set_nonblocking(false);
            let _ = std::io::Write::write_all(&mut s, &out);
        }
    }
}
