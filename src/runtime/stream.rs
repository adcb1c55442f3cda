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

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use monoio::net::TcpStream;

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

/// Waits after which a stream watches its peer through a descriptor of its own
/// (`kept_watch`): a live stream (issue 43 §2) then arms that poll once and keeps it across its
/// writes, instead of arming and cancelling one on the connection's descriptor per wait (at
/// 2 000 streams × 10 events/s the arm and the cancel were 12 % of the server's CPU, and the
/// cancel's lookup grows with the polls in flight). Not at once: the second descriptor (a
/// `dup`, closed with the stream) costs a heap block and two system calls, more than a short
/// stream's few waits (an echo waits at most once, the allocation gate's 10-event
/// `slow_counter` at most 10 times).
pub(super) const PEER_WATCH_KEPT_AFTER_WAITS: u32 = 16;

/// Drives `source` to its end.
async fn drive<S: Source>(conn: &mut Conn<'_>, source: &mut S, started: Instant) -> Ended {
    let core: &Core = conn.core;
    let drain = conn.drain;
    let _idle = (!source.holds_drain()).then(|| drain.idle());
    // The last keep-alive of a `KeepAlive::Every` stream (set at its first wait).
    let mut beat: Option<Deadline> = None;
    let mut watch_peer = true;
    let mut waits: u32 = 0;
    // Kept across waits (see `wait`): the keep-alive timer, re-armed only when it fires
    // before the deadline of the wait it then ends, and the peer watch of a live stream.
    let mut timer = pin!(None::<Deadline>.map(monoio::time::sleep_until));
    let mut kept_watch = pin!(None::<TcpStream>.map(watch_readable));
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
        let interval = core.cfg.sessions.sse_keepalive;
        let deadline = keep_alive_deadline(source.keep_alive(), interval, &mut beat);
        waits = waits.saturating_add(1);
        if watch_peer && waits == PEER_WATCH_KEPT_AFTER_WAITS {
            if let Some(watcher) = duplicate(conn.socket.tcp()) {
                kept_watch.set(Some(watch_readable(watcher)));
            }
        }
        let waiting = Waiting { deadline, watch_peer };
        match wait(conn, source, waiting, timer.as_mut(), kept_watch.as_mut()).await {
            Woke::Source => {}
            Woke::KeepAlive => {
                conn.frames.clear();
                sse::push_comment(&mut conn.frames);
                sse::push_chunk(&mut conn.out, &conn.frames);
                beat = beat.map(|_| Deadline::now());
            }
            Woke::Peer => {
                kept_watch.set(None);
                if peer_closed(conn).await {
                    source.gone(core);
                    return Ended::now(false);
                }
                watch_peer = false;
            }
        }
    }
}

/// The monoio clock the stream's timer runs on.
type Deadline = monoio::time::Instant;

/// What ended one wait of a stream.
enum Woke {
    /// The source has something, or the drain moved on: fill again.
    Source,
    /// The keep-alive interval passed with nothing written.
    KeepAlive,
    /// The peer's socket turned readable (bytes, or its close).
    Peer,
}

/// What one wait watches besides the source and the drain.
#[derive(Clone, Copy)]
struct Waiting {
    /// When the keep-alive comment is due (`None`: no keep-alive now).
    deadline: Option<Deadline>,
    /// Whether the peer's socket is watched (until it first turns readable).
    watch_peer: bool,
}

/// When this wait's keep-alive is due: `interval` from now when idle counts from each wait's
/// start, from the last beat for `KeepAlive::Every`.
fn keep_alive_deadline(
    kind: KeepAlive,
    interval: Duration,
    beat: &mut Option<Deadline>,
) -> Option<Deadline> {
    match kind {
        KeepAlive::Off => None,
        KeepAlive::Idle => Some(Deadline::now() + interval),
        KeepAlive::Every => Some(*beat.get_or_insert_with(Deadline::now) + interval),
    }
}

/// Waits on the source's wake, the drain's next phase, the keep-alive and the peer. The timer
/// is kept from wait to wait: it is armed (a timer wheel entry) when there is none, moved
/// earlier when it would be late, and otherwise left to fire at an older, earlier deadline, when
/// it is moved to this wait's (so a stream woken every 100 ms touches the wheel once per
/// keep-alive interval, not twice per event). The peer is watched through `kept` once the
/// stream has one, else by a poll on the connection's descriptor for this wait alone.
async fn wait<S: Source, W: Future>(
    conn: &mut Conn<'_>,
    source: &mut S,
    waiting: Waiting,
    mut timer: Pin<&mut Option<monoio::time::Sleep>>,
    mut kept: Pin<&mut Option<W>>,
) -> Woke {
    match (timer.as_mut().as_pin_mut(), waiting.deadline) {
        (None, Some(deadline)) => timer.set(Some(monoio::time::sleep_until(deadline))),
        (Some(sleep), Some(deadline)) if sleep.is_elapsed() || sleep.deadline() > deadline => {
            sleep.reset(deadline);
        }
        _ => {}
    }
    // Nothing is read while the stream waits (the peer's bytes, if any, are read after
    // readiness into a buffer taken back then): the core keeps the buffer meanwhile.
    lend_read_buffer(&mut conn.buf);
    let watch_here = waiting.watch_peer && kept.is_none();
    let (socket, drain) = (&conn.socket, conn.drain);
    loop {
        // Only readiness is awaited inside the select: a losing branch is dropped, and a read
        // future dropped there would take the connection buffer (pipelined requests) with it.
        let timer_fired = monoio::select! {
            _ = source.wake() => return Woke::Source,
            _ = drain.changed() => return Woke::Source,
            _ = poll_kept(timer.as_mut()) => true,
            _ = poll_kept(kept.as_mut()) => return Woke::Peer,
            _ = socket.tcp().readable(false), if watch_here => return Woke::Peer,
        };
        debug_assert!(timer_fired);
        match waiting.deadline {
            Some(deadline) if Deadline::now() >= deadline => return Woke::KeepAlive,
            Some(deadline) => {
                timer.as_mut().as_pin_mut().expect("invariant: it fired").reset(deadline)
            }
            None => timer.set(None),
        }
    }
}

/// Polls the kept future in `slot`; pending for ever while there is none.
fn poll_kept<F: Future>(mut slot: Pin<&mut Option<F>>) -> impl Future<Output = F::Output> + '_ {
    std::future::poll_fn(move |cx| match slot.as_mut().as_pin_mut() {
        Some(future) => future.poll(cx),
        None => Poll::Pending,
    })
}

/// A second descriptor of the connection's socket, for `kept_watch` (`None` when the process
/// is out of descriptors: the stream then keeps polling its own one per wait).
fn duplicate(tcp: &TcpStream) -> Option<TcpStream> {
    let owned = crate::fd::with_borrowed_fd(tcp, |fd| fd.try_clone_to_owned()).ok()?;
    TcpStream::from_std(std::net::TcpStream::from(owned)).ok()
}

/// Completes when `watcher` turns readable; owns it, so the poll outlives the waits and the
/// writes of the stream, and the descriptor closes with it.
async fn watch_readable(watcher: TcpStream) -> std::io::Result<()> {
    watcher.readable(false).await
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
