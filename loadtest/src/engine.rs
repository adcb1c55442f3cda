//! The throughput engine: one thread drives many non-blocking connections from one epoll loop
//! (mio), pipelining up to `--pipeline` requests per connection.
//!
//! Owns: connection I/O, the closed-loop and fixed-rate schedules, per-request timing and
//! timeouts, reconnects. What a request is and what a good answer looks like belongs to a
//! `Workload` (`scenario::calls` for ping/echo/stream, `scenario::sessions` for session opening).
//!
//! Timing. Closed loop: each connection keeps `--pipeline` operations in flight and starts the
//! next one when one completes; latency is measured from the send. Fixed rate (`--rate`): the
//! n-th operation of a thread is *due* at `start + n / rate`; it is sent on a connection with a
//! free pipeline slot, or queued until one frees up, and its latency is measured from when it
//! was due, not from when it could be sent. That is the coordinated-omission correction: a
//! server stall shows up in every request that should have been sent during it (as in wrk2).
//! epoll sleeps in whole milliseconds, so the loop polls without sleeping in the last
//! millisecond before a due time.

use std::collections::VecDeque;
use std::io::{ErrorKind as IoKind, Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::tls::Sock;

use crate::stats::{self, ErrorKind, Errors, Live};
use crate::wire::{Head, ResponseParser, Target};

/// Initial read buffer per connection; grows when a single response needs more.
const READ_BUF_BYTES: usize = 64 << 10;
/// How often timeouts are checked and live numbers published.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(100);
/// How often the progress line's interval percentiles are published.
const INTERVAL_EVERY: Duration = Duration::from_secs(1);

/// Per-connection state a workload may keep (the session a connection uses).
#[derive(Debug, Default)]
pub struct ConnState {
    /// The connection's index across all threads (picks its session).
    pub slot: usize,
    /// A session the workload opened on this connection, if any.
    pub session: Option<String>,
}

/// One request in flight; `tag` tells the workload which step of an operation it is.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub tag: u8,
    pub id: u64,
    /// Progress events seen in the answer so far.
    pub events: u32,
    pub answer: Answer,
}

impl Step {
    pub fn new(tag: u8, id: u64) -> Step {
        Step { tag, id, events: 0, answer: Answer::None }
    }
}

/// What the answer's final JSON-RPC message said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    None,
    Ok,
    Failed(ErrorKind),
}

/// The end of a step.
pub enum Outcome {
    /// The operation is complete: success with the number of progress events, or an error.
    Done(Result<u32, ErrorKind>),
    /// The workload wrote the next request of the same operation into `out`.
    Next(Step),
}

pub trait Workload {
    /// Writes the first request of a new operation into `out`; `None` when there is no more work.
    fn begin(&mut self, conn: &mut ConnState, id: u64, out: &mut Vec<u8>) -> Option<Step>;
    /// One SSE message event (non-empty data) of the answer to `step`.
    fn on_event(&mut self, step: &mut Step, data: &[u8]);
    /// The answer to `step` is complete. `id` is a fresh id should a next step need one.
    fn on_response(
        &mut self,
        step: Step,
        head: &Head,
        body: &[u8],
        conn: &mut ConnState,
        id: u64,
        out: &mut Vec<u8>,
    ) -> Outcome;
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub target: Target,
    pub thread_index: usize,
    pub thread_count: usize,
    /// This thread's connections; connection i of this thread has slot `i * threads + index`.
    pub connections: usize,
    pub pipeline: usize,
    /// Operations per second for this thread; `None` = closed loop.
    pub rate: Option<f64>,
    pub start: Instant,
    /// End of the warm-up: operations due before it are not recorded.
    pub measure_from: Instant,
    /// No operation starts at or after this instant.
    pub end: Instant,
    pub timeout: Duration,
    /// Every operation on a connection of its own (`--new-connection`): a handshake per
    /// request (pipeline 1).
    pub new_connection: bool,
    /// Fixed rate without the spin (`--coarse-pacing`): sleep in epoll to the due time.
    pub coarse_pacing: bool,
}

/// What a thread measured.
pub struct ThreadResult {
    pub hist: Histogram<u64>,
    /// Operations completed successfully inside the measurement window.
    pub done: u64,
    /// Progress events of those operations.
    pub events: u64,
    pub errors: Errors,
    /// Operations started, warm-up included.
    pub started: u64,
    /// Deepest fixed-rate backlog (operations due but without a free connection).
    pub backlog_max: usize,
    /// When the last operation completed (for runs that end when the work does).
    pub last_done: Option<Instant>,
}

struct Inflight {
    /// When the operation was due (fixed rate) or started (closed loop).
    due: Instant,
    /// When this step's request was queued for writing (for `--timeout`).
    sent: Instant,
    step: Step,
}

struct Conn {
    sock: Sock,
    out: Vec<u8>,
    out_at: usize,
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    parser: ResponseParser,
    inflight: VecDeque<Inflight>,
    state: ConnState,
    dirty: bool,
}

struct Engine<W: Workload> {
    cfg: EngineConfig,
    poll: Poll,
    conns: Vec<Conn>,
    workload: W,
    live: Arc<Live>,
    next_id: u64,
    dirty: Vec<usize>,
    exhausted: bool,
    backlog: VecDeque<Instant>,
    cursor: usize,
    interval: Histogram<u64>,
    result: ThreadResult,
}

fn connect(target: &Target) -> std::io::Result<Sock> {
    let std = std::net::TcpStream::connect_timeout(&target.addr, Duration::from_secs(5))?;
    std.set_nodelay(true)?;
    std.set_nonblocking(true)?;
    Sock::new(TcpStream::from_std(std), target)
}

/// Runs one load thread to the end of its schedule (or until the workload has no more work
/// and nothing is in flight).
pub fn run<W: Workload>(
    cfg: EngineConfig,
    workload: W,
    live: Arc<Live>,
) -> anyhow::Result<ThreadResult> {
    let poll = Poll::new().context("creating the epoll instance")?;
    let mut conns = Vec::with_capacity(cfg.connections);
    for i in 0..cfg.connections {
        let mut sock =
            connect(&cfg.target).with_context(|| format!("connecting to {}", cfg.target.addr))?;
        let interest = Interest::READABLE | Interest::WRITABLE;
        poll.registry().register(&mut sock.tcp, Token(i), interest)?;
        conns.push(Conn {
            sock,
            out: Vec::with_capacity(4096),
            out_at: 0,
            inbuf: vec![0; READ_BUF_BYTES],
            in_start: 0,
            in_end: 0,
            parser: ResponseParser::default(),
            inflight: VecDeque::with_capacity(cfg.pipeline + 1),
            state: ConnState { slot: i * cfg.thread_count + cfg.thread_index, session: None },
            dirty: false,
        });
    }
    let next_id = ((cfg.thread_index as u64) + 1) << 40;
    let mut engine = Engine {
        cfg,
        poll,
        conns,
        workload,
        live,
        next_id,
        dirty: Vec::new(),
        exhausted: false,
        backlog: VecDeque::new(),
        cursor: 0,
        interval: stats::new_histogram(),
        result: ThreadResult {
            hist: stats::new_histogram(),
            done: 0,
            events: 0,
            errors: Errors::default(),
            started: 0,
            backlog_max: 0,
            last_done: None,
        },
    };
    // Every thread starts its schedule at the same instant, after all have connected.
    let now = Instant::now();
    if engine.cfg.start > now {
        std::thread::sleep(engine.cfg.start - now);
    }
    engine.run()?;
    Ok(engine.result)
}

impl<W: Workload> Engine<W> {
    fn run(&mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut issued: u64 = 0;
        let mut housekeeping = Instant::now();
        let mut interval_at = Instant::now();
        let drain_until = self.cfg.end + self.cfg.timeout;
        if self.cfg.rate.is_none() {
            let now = Instant::now();
            for ci in 0..self.conns.len() {
                self.refill(ci, now);
            }
        }
        loop {
            let now = Instant::now();
            let stopping = now >= self.cfg.end;
            let idle = self.conns.iter().all(|c| c.inflight.is_empty());
            if idle && (stopping || self.exhausted) && self.backlog.is_empty() {
                break;
            }
            if now >= drain_until {
                self.abandon_all();
                break;
            }
            let mut wait = HOUSEKEEPING_EVERY;
            if let Some(rate) = self.cfg.rate {
                if !stopping && !self.exhausted {
                    loop {
                        // Threads interleave their schedules instead of firing together.
                        let phase = self.cfg.thread_index as f64 / self.cfg.thread_count as f64;
                        let due = self.cfg.start
                            + Duration::from_secs_f64((issued as f64 + phase) / rate);
                        if due > now {
                            wait = wait.min(due - now);
                            break;
                        }
                        issued += 1;
                        self.backlog.push_back(due);
                    }
                }
                self.drain_backlog(now);
            }
            self.flush_dirty();
            // epoll rounds timeouts up to whole milliseconds: spin through the last one, unless
            // the run asked for a load thread that sleeps (sends up to ~1 ms late, charged to
            // their latency, which runs from the due time).
            let timeout = if self.cfg.coarse_pacing {
                wait
            } else if wait < Duration::from_millis(1) {
                Duration::ZERO
            } else {
                wait - Duration::from_millis(1)
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(e) => return Err(e).context("epoll_wait"),
            }
            for event in events.iter() {
                let ci = event.token().0;
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(ci);
                }
                if event.is_writable() {
                    self.mark_dirty(ci);
                }
            }
            let now = Instant::now();
            if now.duration_since(housekeeping) >= HOUSEKEEPING_EVERY {
                housekeeping = now;
                self.check_timeouts(now);
                if now.duration_since(interval_at) >= INTERVAL_EVERY {
                    interval_at = now;
                    self.live.publish_interval(&mut self.interval);
                }
            }
        }
        self.live.publish_interval(&mut self.interval);
        Ok(())
    }

    fn mark_dirty(&mut self, ci: usize) {
        if !self.conns[ci].dirty {
            self.conns[ci].dirty = true;
            self.dirty.push(ci);
        }
    }

    fn flush_dirty(&mut self) {
        while let Some(ci) = self.dirty.pop() {
            self.conns[ci].dirty = false;
            if let Err(kind) = self.flush(ci) {
                self.fail_conn(ci, kind);
            }
        }
    }

    fn flush(&mut self, ci: usize) -> Result<(), ErrorKind> {
        let conn = &mut self.conns[ci];
        if conn.sock.pending() && conn.sock.flush_pending().is_err() {
            return Err(ErrorKind::Io);
        }
        while conn.out_at < conn.out.len() {
            match conn.sock.write(&conn.out[conn.out_at..]) {
                Ok(0) => return Err(ErrorKind::Io),
                Ok(n) => conn.out_at += n,
                Err(e) if e.kind() == IoKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(_) => return Err(ErrorKind::Io),
            }
        }
        conn.out.clear();
        conn.out_at = 0;
        Ok(())
    }

    /// Starts one operation on `ci`, due at `due`. False when the workload has no more work.
    fn start_op(&mut self, ci: usize, due: Instant, now: Instant) -> bool {
        let id = self.next_id;
        let conn = &mut self.conns[ci];
        match self.workload.begin(&mut conn.state, id, &mut conn.out) {
            Some(step) => {
                self.next_id += 1;
                conn.inflight.push_back(Inflight { due, sent: now, step });
                self.result.started += 1;
                self.mark_dirty(ci);
                true
            }
            None => {
                // The work is done: queued fixed-rate slots have nothing left to carry.
                self.exhausted = true;
                self.backlog.clear();
                false
            }
        }
    }

    /// Closed loop: fill `ci`'s pipeline (until the end of the schedule). Fixed rate: give it
    /// queued operations (all were due before the end).
    fn refill(&mut self, ci: usize, now: Instant) {
        let closed_loop = self.cfg.rate.is_none();
        if closed_loop && now >= self.cfg.end {
            return;
        }
        while self.conns[ci].inflight.len() < self.cfg.pipeline && !self.exhausted {
            let due = if closed_loop {
                now
            } else {
                match self.backlog.pop_front() {
                    Some(due) => due,
                    None => return,
                }
            };
            if !self.start_op(ci, due, now) {
                return;
            }
        }
    }

    /// Fixed rate: hand queued operations to connections with free pipeline slots.
    fn drain_backlog(&mut self, now: Instant) {
        self.result.backlog_max = self.result.backlog_max.max(self.backlog.len());
        let n = self.conns.len();
        for _ in 0..n {
            if self.backlog.is_empty() || self.exhausted {
                return;
            }
            let ci = self.cursor % n;
            self.cursor = self.cursor.wrapping_add(1);
            if self.conns[ci].inflight.len() < self.cfg.pipeline {
                self.refill(ci, now);
            }
        }
    }

    fn on_readable(&mut self, ci: usize) {
        loop {
            let conn = &mut self.conns[ci];
            if conn.in_start == conn.in_end {
                conn.in_start = 0;
                conn.in_end = 0;
            } else if conn.in_end == conn.inbuf.len() {
                if conn.in_start > 0 {
                    conn.inbuf.copy_within(conn.in_start..conn.in_end, 0);
                    conn.in_end -= conn.in_start;
                    conn.in_start = 0;
                } else {
                    let len = conn.inbuf.len();
                    conn.inbuf.resize(len * 2, 0);
                }
            }
            let end = conn.in_end;
            match conn.sock.read(&mut conn.inbuf[end..]) {
                Ok(0) => {
                    let kind = if conn.parser.finish_eof() && conn.inflight.len() == 1 {
                        // A body delimited by the end of the connection: complete it first.
                        self.complete_front(ci, Instant::now());
                        None
                    } else {
                        Some(ErrorKind::Io)
                    };
                    self.reconnect(ci, kind);
                    return;
                }
                Ok(n) => {
                    let space = conn.inbuf.len() - conn.in_end;
                    let plain = !conn.sock.is_tls();
                    conn.in_end += n;
                    if let Err(kind) = self.process(ci) {
                        self.fail_conn(ci, kind);
                        return;
                    }
                    if n < space && plain {
                        // A short read drained the socket; new bytes raise a new edge (as tokio
                        // does), so skip the read that would only return EAGAIN. (On TLS a short
                        // read says nothing of the socket: rustls may hold more records.)
                        return;
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => return,
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(_) => {
                    self.fail_conn(ci, ErrorKind::Io);
                    return;
                }
            }
        }
    }

    /// Parses every complete response in `ci`'s read buffer.
    fn process(&mut self, ci: usize) -> Result<(), ErrorKind> {
        loop {
            let conn = &mut self.conns[ci];
            if conn.in_start == conn.in_end {
                return Ok(());
            }
            let Some(front) = conn.inflight.front_mut() else {
                return Err(ErrorKind::Wire); // bytes nobody asked for
            };
            let workload = &mut self.workload;
            let step = &mut front.step;
            let used = conn
                .parser
                .advance(&conn.inbuf[conn.in_start..conn.in_end], &mut |ev| {
                    if !ev.data.is_empty() {
                        workload.on_event(step, ev.data);
                    }
                })
                .map_err(|_| ErrorKind::Wire)?;
            conn.in_start += used;
            if !conn.parser.is_done() {
                return Ok(());
            }
            let close = conn.parser.head.close;
            self.complete_front(ci, Instant::now());
            let close = close || (self.cfg.new_connection && self.conns[ci].inflight.is_empty());
            if close {
                self.reconnect(ci, None);
                return Ok(());
            }
        }
    }

    /// The answer to `ci`'s oldest request is complete.
    fn complete_front(&mut self, ci: usize, now: Instant) {
        let id = self.next_id;
        let conn = &mut self.conns[ci];
        let inflight = conn.inflight.pop_front().expect("invariant: a response answers a request");
        let outcome = self.workload.on_response(
            inflight.step,
            &conn.parser.head,
            &conn.parser.body,
            &mut conn.state,
            id,
            &mut conn.out,
        );
        conn.parser.reset();
        match outcome {
            Outcome::Next(step) => {
                self.next_id += 1;
                conn.inflight.push_back(Inflight { due: inflight.due, sent: now, step });
                self.mark_dirty(ci);
            }
            Outcome::Done(result) => {
                self.finish(inflight.due, now, result);
                // With --new-connection the next operation starts on the new connection.
                if !self.cfg.new_connection {
                    self.refill(ci, now);
                }
            }
        }
    }

    fn finish(&mut self, due: Instant, now: Instant, result: Result<u32, ErrorKind>) {
        let recorded = due >= self.cfg.measure_from && due < self.cfg.end;
        match result {
            Ok(events) => {
                self.result.last_done = Some(now);
                if recorded {
                    stats::record(&mut self.result.hist, now - due);
                    stats::record(&mut self.interval, now - due);
                }
                if now >= self.cfg.measure_from && now < self.cfg.end {
                    self.result.done += 1;
                    self.result.events += u64::from(events);
                    self.live.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.live
                        .events
                        .fetch_add(u64::from(events), std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err(kind) => {
                if now >= self.cfg.measure_from {
                    self.result.errors.add(kind, 1);
                    self.live.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    /// Fails everything in flight on `ci` and opens a new connection in its place.
    fn fail_conn(&mut self, ci: usize, kind: ErrorKind) {
        self.reconnect(ci, Some(kind));
    }

    fn reconnect(&mut self, ci: usize, fail: Option<ErrorKind>) {
        let now = Instant::now();
        let pending: Vec<Inflight> = self.conns[ci].inflight.drain(..).collect();
        for inflight in pending {
            self.finish(inflight.due, now, Err(fail.unwrap_or(ErrorKind::Io)));
        }
        let conn = &mut self.conns[ci];
        let _ = self.poll.registry().deregister(&mut conn.sock.tcp);
        conn.out.clear();
        conn.out_at = 0;
        conn.in_start = 0;
        conn.in_end = 0;
        conn.parser.reset();
        conn.state.session = None;
        match connect(&self.cfg.target) {
            Ok(mut sock) => {
                if self
                    .poll
                    .registry()
                    .register(&mut sock.tcp, Token(ci), Interest::READABLE | Interest::WRITABLE)
                    .is_err()
                {
                    self.result.errors.add(ErrorKind::Io, 1);
                    return;
                }
                conn.sock = sock;
                self.refill(ci, now);
            }
            Err(_) => {
                self.result.errors.add(ErrorKind::Io, 1);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    fn check_timeouts(&mut self, now: Instant) {
        for ci in 0..self.conns.len() {
            let late = self.conns[ci]
                .inflight
                .front()
                .is_some_and(|f| now.duration_since(f.sent) > self.cfg.timeout);
            if late {
                self.fail_conn(ci, ErrorKind::Timeout);
            }
        }
    }

    /// The drain deadline passed: whatever is still in flight timed out.
    fn abandon_all(&mut self) {
        let now = Instant::now();
        for ci in 0..self.conns.len() {
            let pending: Vec<Inflight> = self.conns[ci].inflight.drain(..).collect();
            for inflight in pending {
                self.finish(inflight.due, now, Err(ErrorKind::Timeout));
            }
        }
        for due in std::mem::take(&mut self.backlog) {
            self.finish(due, now, Err(ErrorKind::Timeout));
        }
    }
}
