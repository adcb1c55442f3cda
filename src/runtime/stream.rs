//! The one stream driver: writes a response stream (`core::Source`) to its connection until
//! it ends, is cut, the peer goes away, or the drain ends. The loop: `fill` what is ready →
//! ended? → write → wait on the source's wake, the drain's next phase, the keep-alive timer
//! (`--sse-keepalive-ms`: an SSE comment) and the peer's socket turning readable.
//!
//! During a drain a stream that holds it (`Source::holds_drain`) is waited for; one that does
//! not is counted idle. At the drain's end the source writes its last bytes
//! (`Source::end_for_drain`) after what was ready, and the connection closes: a client sees a
//! clean end, not a cut.
//!
//! Called by `runtime::conn` with the `endpoint::Stream` it got; knows sockets, not protocols.
//! Never: renders an answer or an event beyond the keep-alive comment, decides anything about
//! MCP, or drops a read future holding the connection's buffer (only readiness is awaited in
//! the wait; the read after it is never cancelled).

use std::time::{Duration, Instant};

use crate::core::{Core, KeepAlive, Source, Step};
use crate::endpoint::Stream;
use crate::runtime::socket::{lend_read_buffer, read_some, Conn, ReadEnd};
use crate::wire::sse;

/// How a driven stream ended: `reusable` when the connection can serve another request (the
/// caller also honours the request's own `Connection`), and `at` when: one clock read at the
/// stream's end serves its first-event time and its request's duration (two were ~100
/// instructions a streamed request, callgrind).
pub(super) struct Ended {
    pub(super) reusable: bool,
    pub(super) at: Instant,
}

impl Ended {
    fn now(reusable: bool) -> Ended {
        Ended { reusable, at: Instant::now() }
    }
}

/// Drives the stream the endpoint handed over until it ends (`Ended`). `started`: when its
/// request was read whole (`tidemark_sse_first_event_seconds` counts from there). The stream
/// stays where the caller keeps it, which drops it right after (a 2026-07-28 call is
/// cancelled by that when it had not finished): moved in by value, it was copied twice more
/// per stream (callgrind).
pub(super) async fn drive_stream(
    conn: &mut Conn<'_>,
    stream: &mut Stream,
    started: Instant,
) -> Ended {
    match stream {
        Stream::Ring(ring) => drive(conn, ring, started).await,
        Stream::Call(call) => drive(conn, call, started).await,
        Stream::Observe(observer) => drive(conn, observer, started).await,
        Stream::Listen(listen) => drive(conn, listen, started).await,
        Stream::AuditedCall(call) => drive(conn, &mut **call, started).await,
        Stream::AuditedObserve(observer) => drive(conn, &mut **observer, started).await,
    }
}

/// Drives `source` to its end.
async fn drive<S: Source>(conn: &mut Conn<'_>, source: &mut S, started: Instant) -> Ended {
    let core: &Core = conn.core;
    let drain = conn.drain;
    let _idle = (!source.holds_drain()).then(|| drain.idle());
    let interval = core.cfg.sessions.sse_keepalive;
    // The last keep-alive of a `KeepAlive::Every` stream (set at its first wait).
    let mut beat: Option<Instant> = None;
    let mut watch_peer = true;
    // Until the stream's first write: then counted once.
    let mut unwritten = Some(started);
    if let Some(hold) = source.first_write_hold(core) {
        // A quick answer then shares the head's send: one loopback send and one client
        // wake-up fewer per call (a bridged echo). Nothing is read or written meanwhile.
        monoio::select! {
            _ = source.wake() => {},
            _ = drain.changed() => {},
            _ = monoio::time::sleep(hold) => {},
        }
    }
    loop {
        conn.frames.clear();
        match source.fill(core, &mut conn.out, &mut conn.frames) {
            Step::Open => {}
            Step::Ended { reusable } => {
                let ok = conn.write().await;
                let at = Instant::now();
                if let Some(started) = unwritten.take() {
                    core.metrics.hist.sse_first_event.observe_between(started, at);
                }
                if ok {
                    source.sent(core);
                } else {
                    source.gone(core);
                }
                return Ended { reusable: ok && reusable, at };
            }
            Step::Cut => {
                conn.out.clear();
                return Ended::now(false);
            }
        }
        if drain.ending() {
            conn.frames.clear();
            source.end_for_drain(core, &mut conn.out, &mut conn.frames);
            if conn.write().await {
                source.sent(core);
            } else {
                source.gone(core);
            }
            return Ended::now(false);
        }
        if !conn.out.is_empty() {
            if !conn.write().await {
                source.gone(core);
                return Ended::now(false);
            }
            if let Some(started) = unwritten.take() {
                core.metrics.hist.sse_first_event.observe_since(started);
            }
            source.sent(core);
            continue;
        }
        let keep_alive = match source.keep_alive() {
            KeepAlive::Off => None,
            KeepAlive::Idle => Some(interval),
            KeepAlive::Every => {
                let last = *beat.get_or_insert_with(Instant::now);
                Some((last + interval).saturating_duration_since(Instant::now()))
            }
        };
        // Nothing is read while the stream waits (the peer's bytes, if any, are read after
        // readiness into a buffer taken back then): the core keeps the buffer meanwhile.
        lend_read_buffer(&mut conn.buf);
        let Conn { socket, out, frames, .. } = conn;
        // Only readiness is awaited inside the select: a losing branch is dropped, and a read
        // future dropped there would take the connection buffer (pipelined requests) with it.
        let readable = monoio::select! {
            _ = source.wake() => false,
            _ = drain.changed() => false,
            _ = monoio::time::sleep(keep_alive.unwrap_or_default()), if keep_alive.is_some() => {
                frames.clear();
                sse::push_comment(frames);
                sse::push_chunk(out, frames);
                beat = beat.map(|_| Instant::now());
                false
            }
            _ = socket.tcp().readable(false), if watch_peer => true,
        };
        if readable {
            if peer_closed(conn).await {
                source.gone(core);
                return Ended::now(false);
            }
            watch_peer = false;
        }
    }
}

/// After the socket turned readable: true if the peer closed, false if it sent bytes (appended
/// to the read buffer, handled after the stream). Not cancelled by anything: the read returns
/// the buffer.
async fn peer_closed(conn: &mut Conn<'_>) -> bool {
    match read_some(&mut conn.socket, &mut conn.buf, Duration::from_millis(1)).await {
        ReadEnd::Data => false,
        ReadEnd::Closed => true,
        ReadEnd::TimedOut | ReadEnd::Stopped => false,
    }
}
