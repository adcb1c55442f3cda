//! The stdio transport: an upstream MCP server as a child process, spoken to in newline-
//! delimited JSON-RPC on its stdin and stdout, driven by the core that owns the session.
//!
//! The child's stdin, stdout and stderr are Unix socket pairs rather than pipes: monoio drives
//! sockets on both of its drivers (io_uring and epoll), so every read and write of the child's
//! streams is an ordinary non-blocking operation of the owning core's runtime, with no helper
//! thread. Programs read and write a socket on fd 0/1/2 exactly like a pipe.
//!
//! Owns: the child (its own process group), its write queue (bounded by
//! `--upstream-queue-bytes`), its stdout reader (lines bounded by `--upstream-line-bytes`: an
//! over-long one fails its call at once, or resets the link when its call cannot be told),
//! its stderr logger (rate-limited), and the core's side of its end: the child's exit as the
//! process watcher (`process`) reports it, which ends its calls even while a grandchild keeps
//! its stdout open, and the stop (the watcher's SIGTERM to the group, SIGKILL after
//! `--upstream-kill-grace-ms`).
//!
//! Backpressure: while a running call's client is attached and has not been written its share
//! of the ring (`config::UNWRITTEN_SHARE_DIVISOR`), the stdout reader takes no further line; the
//! socket's buffer fills and the child blocks in its write, which is how a flood of
//! notifications is slowed to what the client reads instead of evicting its unwritten events.
//! Never: runs a shell, blocks a worker thread, waits for a process, or buffers without a bound.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::UnixStream;

use super::credentials::Credentials;
use super::line_head;
use super::peer::{Incoming, Peer, Transport};
use super::process::{self, ExitNote, ProcessCount, Watched, Watcher};
use super::settings::Settings;
use crate::signal::Signal;

/// Why a child could not be started.
pub(crate) enum SpawnError {
    /// `--upstream-max-processes` children are running.
    AtCapacity,
    Failed(String),
}

/// Bytes queued for the child's stdin, and whether the queue still takes more.
#[derive(Default)]
struct WriteQueue {
    bytes: Vec<u8>,
    closed: bool,
    /// Emptied buffers lent for the next messages' encoding (`Transport::lend`): a message's
    /// buffer becomes the queue's, the queue's emptied one is kept here, so a steady flow of
    /// requests allocates none. At most `SPARE_BUFFERS_MAX`, none over `SPARE_BUFFER_BYTES_MAX`.
    spares: Vec<Vec<u8>>,
}

/// Emptied stdin buffers a child's queue keeps for lending: the message being encoded, the
/// one queued, and the one the writer holds are three, so two spares cover the steady state.
const SPARE_BUFFERS_MAX: usize = 2;
/// The largest emptied buffer kept for lending (one large request's buffer is freed, not
/// kept for the child's life).
const SPARE_BUFFER_BYTES_MAX: usize = 16 * 1024;

impl WriteQueue {
    fn keep(&mut self, mut emptied: Vec<u8>) {
        let fits = (1..=SPARE_BUFFER_BYTES_MAX).contains(&emptied.capacity());
        if fits && self.spares.len() < SPARE_BUFFERS_MAX {
            emptied.clear();
            self.spares.push(emptied);
        }
    }
}

/// A running child and the pieces its tasks share.
pub(crate) struct StdioTransport {
    name: Rc<str>,
    queue: Rc<RefCell<WriteQueue>>,
    queued: Rc<Signal>,
    queue_max: usize,
    /// The child's pid, `Some` until the transport stops it.
    pid: Cell<Option<u32>>,
    watcher: &'static Watcher,
}

/// How the child ended, as its core learns it: set once, by `watch_exit`.
#[derive(Default)]
struct ChildEnd {
    reason: RefCell<Option<String>>,
    known: Signal,
}

impl ChildEnd {
    fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }
}

impl StdioTransport {
    /// Starts `argv` with `env` added, and the tasks that drive its streams, reporting to `peer`.
    pub(crate) fn spawn(
        name: Rc<str>,
        argv: &[String],
        settings: &Settings,
        credentials: &Credentials,
        count: Arc<ProcessCount>,
        peer: Weak<Peer>,
    ) -> Result<Rc<StdioTransport>, SpawnError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(SpawnError::Failed("empty command".into()));
        };
        // Before the first spawn: from then on tidemark is the subreaper of what children leave.
        let watcher = process::watcher()
            .map_err(|e| SpawnError::Failed(format!("cannot watch upstream processes: {e}")))?;
        if !count.try_take(settings.max_processes) {
            return Err(SpawnError::AtCapacity);
        }
        let started = start_child(program, args, settings, credentials);
        let (child, stdin, stdout, stderr) = match started {
            Ok(parts) => parts,
            Err(e) => {
                count.give_back();
                // The program in the operator's log only: the client's message names the
                // upstream by its label, never by its command (issue 38, finding 10).
                tracing::warn!(upstream = %name, %program, error = %e, "upstream cannot start");
                return Err(SpawnError::Failed(format!("cannot start its command: {e}")));
            }
        };
        let pid = child.id();
        // The watcher reaps the child from here on; `Child` would only race it for the status.
        drop(child);
        tracing::info!(upstream = %name, pid, command = %argv.join(" "), "upstream started");
        let transport = Rc::new(StdioTransport {
            name: name.clone(),
            queue: Rc::new(RefCell::new(WriteQueue::default())),
            queued: Rc::new(Signal::default()),
            queue_max: settings.queue_bytes,
            pid: Cell::new(Some(pid)),
            watcher,
        });
        let watched = match watcher.watch(pid, settings.kill_grace, count.clone()) {
            Ok(watched) => adopt_exit(watched),
            Err(e) => {
                transport.pid.set(None);
                process::abandon(pid, &count);
                return Err(SpawnError::Failed(format!("cannot watch its process: {e}")));
            }
        };
        // Watched: dropping `transport` (its `shutdown`) has the watcher end the child.
        let (exited, note) =
            watched.map_err(|e| SpawnError::Failed(format!("cannot watch its process: {e}")))?;
        let end = Rc::new(ChildEnd::default());
        monoio::spawn(write_stdin(stdin, transport.queue.clone(), transport.queued.clone()));
        monoio::spawn(read_stdout(stdout, settings.line_bytes, end.clone(), peer.clone()));
        monoio::spawn(watch_exit(exited, note, end, peer));
        monoio::spawn(log_stderr(stderr, name));
        Ok(transport)
    }
}

/// The core's end of a watched child's exit socket, as a socket of this core's runtime.
fn adopt_exit(watched: Watched) -> std::io::Result<(UnixStream, Arc<ExitNote>)> {
    watched.exited.set_nonblocking(true)?;
    Ok((UnixStream::from_std(watched.exited)?, watched.note))
}

type ChildStreams = (Child, UnixStream, UnixStream, UnixStream);

/// Forks and execs the child on three socket pairs, in a process group of its own (so its end
/// reaches any process it started, e.g. `npx` → `node`).
fn start_child(
    program: &str,
    args: &[String],
    settings: &Settings,
    credentials: &Credentials,
) -> std::io::Result<ChildStreams> {
    let (stdin_ours, stdin_theirs) = StdUnixStream::pair()?;
    let (stdout_ours, stdout_theirs) = StdUnixStream::pair()?;
    let (stderr_ours, stderr_theirs) = StdUnixStream::pair()?;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(settings.env.iter().map(|(k, v)| (k, v)))
        // The operator's credentials for this upstream: in its environment, never its argv.
        .envs(credentials.env.iter().map(|(k, v)| (&**k, &**v)))
        .stdin(Stdio::from(OwnedFd::from(stdin_theirs)))
        .stdout(Stdio::from(OwnedFd::from(stdout_theirs)))
        .stderr(Stdio::from(OwnedFd::from(stderr_theirs)))
        .process_group(0);
    // fork+exec: a few hundred µs on this core, once per child (see the module doc of
    // `upstream` for why this is not moved to another thread).
    let child = command.spawn()?;
    drop(command);
    unpin(child.id());
    let adopt = |s: StdUnixStream| -> std::io::Result<UnixStream> {
        s.set_nonblocking(true)?;
        UnixStream::from_std(s)
    };
    Ok((child, adopt(stdin_ours)?, adopt(stdout_ours)?, adopt(stderr_ours)?))
}

/// Gives a child the process's CPUs back. It was forked by a worker thread pinned to one CPU
/// (`server`), and would inherit that pin: every child of a core would compete with that core's
/// worker on one CPU while the others idle. The process's own set is its main thread's (never
/// pinned; Linux answers for the thread whose id is the pid). Done right after the exec, before
/// the child can have started processes of its own; a failure leaves the child pinned (logged).
fn unpin(pid: u32) {
    use rustix::process::{getpid, Pid};
    let cpus = rustix::thread::sched_getaffinity(Some(getpid()));
    let child = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let unpinned = match (cpus, child) {
        (Ok(cpus), Some(child)) => rustix::thread::sched_setaffinity(Some(child), &cpus),
        (Err(e), _) => Err(e),
        (_, None) => return,
    };
    if let Err(e) = unpinned {
        tracing::warn!(pid, error = %e, "upstream child keeps its worker's CPU affinity");
    }
}

impl Transport for StdioTransport {
    fn send(&self, mut message: Vec<u8>) -> Result<(), String> {
        let mut queue = self.queue.borrow_mut();
        if queue.closed {
            return Err("its stdin is closed".to_owned());
        }
        if queue.bytes.len() + message.len() + 1 > self.queue_max {
            return Err(format!(
                "its stdin queue is full ({} bytes, --upstream-queue-bytes)",
                self.queue_max
            ));
        }
        message.push(b'\n');
        if queue.bytes.is_empty() {
            let emptied = std::mem::replace(&mut queue.bytes, message);
            queue.keep(emptied);
        } else {
            queue.bytes.extend_from_slice(&message);
            queue.keep(message);
        }
        drop(queue);
        self.queued.notify_all();
        Ok(())
    }

    fn lend(&self) -> Vec<u8> {
        self.queue.borrow_mut().spares.pop().unwrap_or_default()
    }

    fn shutdown(&self) {
        self.queue.borrow_mut().closed = true;
        self.queued.notify_all();
        if let Some(pid) = self.pid.take() {
            self.watcher.stop(pid);
            tracing::info!(upstream = %self.name, pid, culprit = "us", "upstream stopped");
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Writes queued messages to the child's stdin, all that is queued in one write.
async fn write_stdin(mut stdin: UnixStream, queue: Rc<RefCell<WriteQueue>>, queued: Rc<Signal>) {
    let mut spare = Vec::new();
    loop {
        let notified = queued.notified();
        let (bytes, closed) = {
            let mut q = queue.borrow_mut();
            (std::mem::replace(&mut q.bytes, std::mem::take(&mut spare)), q.closed)
        };
        if closed {
            return;
        }
        if bytes.is_empty() {
            spare = bytes;
            notified.await;
            continue;
        }
        let (result, mut written) = stdin.write_all(bytes).await;
        if result.is_err() {
            queue.borrow_mut().closed = true;
            return;
        }
        written.clear();
        spare = written;
    }
}

/// Reads the child's stdout, hands each line (one JSON-RPC message) to the peer, and reports
/// the child's end. A line longer than `line_max` is not taken (`overlong`): the call it answers
/// fails at once, or the link is reset. After each line it waits until every running call has
/// room (`peer::room`): one child's stdout carries all its calls' messages, so a call whose
/// attached client lags pauses the reading for all of them (in `shared` isolation, for every
/// session of the core that uses the child).
async fn read_stdout(mut stdout: UnixStream, line_max: usize, end: Rc<ChildEnd>, peer: Weak<Peer>) {
    let mut line: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut skipping = false;
    let mut buf = Vec::with_capacity(READ_CHUNK);
    loop {
        let (result, filled) = stdout.read(buf).await;
        buf = filled;
        let n = match result {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &buf[..n];
        loop {
            let newline = rest.iter().position(|&b| b == b'\n');
            let piece = &rest[..newline.unwrap_or(rest.len())];
            if !skipping && line.len() + piece.len() > line_max {
                // The line's start (at most `HEAD_SCAN_BYTES`) says whose answer it is.
                let head = line_head::HEAD_SCAN_BYTES.saturating_sub(line.len()).min(piece.len());
                line.extend_from_slice(&piece[..head]);
                let Some(peer) = peer.upgrade() else { return };
                if !overlong(&peer, &line, line_max) {
                    return;
                }
                line.clear();
                line.shrink_to(READ_CHUNK);
                skipping = true;
            } else if !skipping {
                line.extend_from_slice(piece);
            }
            let Some(at) = newline else { break };
            if !std::mem::take(&mut skipping) {
                let Some(peer) = peer.upgrade() else { return };
                deliver(&peer, &line);
            }
            line.clear();
            // A long line (a 12 MB tools/list) would otherwise keep its buffer for the child's
            // life: one per session in `per-session` isolation.
            line.shrink_to(READ_CHUNK);
            rest = &rest[at + 1..];
            // Backpressure: the next line is not taken while a call's client has not been
            // written its share; the child then blocks on its full stdout (module doc).
            super::peer::room(&peer, None).await;
        }
        buf.clear();
    }
    let why = exit_reason(&end).await;
    if let Some(peer) = peer.upgrade() {
        peer.closed(&why);
    }
}

/// A stdout line outgrew `line_max`; `head` is its start. When it is the answer to a waiting
/// request, that request fails at once with -32603 naming the flag, and the rest of the line
/// is skipped; a request or notification from the upstream is skipped. A line whose kind its
/// start does not tell resets the link (its calls fail at once; the next request starts the
/// child again): skipping it could leave a call waiting out `--upstream-timeout-secs` for an
/// answer that came. False after a reset (the reader stops).
fn overlong(peer: &Peer, head: &[u8], line_max: usize) -> bool {
    let kind = line_head::read(head);
    tracing::warn!(upstream = %peer.name(), limit = line_max, kind = ?kind, "upstream line longer than --upstream-line-bytes not taken");
    match kind {
        line_head::Head::Answer(id) => {
            let why = format!(
                "its answer is longer than --upstream-line-bytes ({line_max} bytes) and was not taken"
            );
            peer.refuse(id, &why);
            true
        }
        line_head::Head::Other => true,
        line_head::Head::Unknown => {
            peer.reset(&format!(
                "it wrote a line longer than --upstream-line-bytes ({line_max} bytes) whose \
                 request id could not be read; its connection was reset"
            ));
            false
        }
    }
}

/// Waits for the watcher to report the child's exit (its end of the exit socket closes), then
/// ends the child's calls with how it ended. Its stdout may still hold the last lines it wrote
/// (an answer just before it exited): `read_stdout` gets `STDOUT_DRAIN_WAIT` to deliver them
/// and report the end itself at stdout's end. A stdout that a grandchild keeps open never ends;
/// the calls end here then, instead of at `--upstream-timeout-secs`.
async fn watch_exit(
    mut exited: UnixStream,
    note: Arc<ExitNote>,
    end: Rc<ChildEnd>,
    peer: Weak<Peer>,
) {
    let mut buf = Vec::with_capacity(1);
    loop {
        let (result, unused) = exited.read(buf).await;
        buf = unused;
        buf.clear();
        if !matches!(result, Ok(n) if n > 0) {
            break;
        }
    }
    let why = note.reason().unwrap_or_else(|| "ended (its watcher stopped)".to_owned());
    *end.reason.borrow_mut() = Some(why.clone());
    end.known.notify_all();
    monoio::time::sleep(STDOUT_DRAIN_WAIT).await;
    if let Some(peer) = peer.upgrade() {
        peer.closed(&why);
    }
}

/// How long a child's stdout may go on after the child exited before its calls end anyway.
const STDOUT_DRAIN_WAIT: Duration = Duration::from_millis(100);

/// Bytes asked for per read of the child's stdout or stderr.
const READ_CHUNK: usize = 64 * 1024;

/// One stdout line to the peer: JSON (invalid UTF-8 in it replaced), or logged and skipped.
fn deliver(peer: &Rc<Peer>, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    // Most lines answer a call: their members are scanned, only the result is checked as JSON.
    if let Some((id, result)) = line_head::plain_answer(line) {
        return peer.answered(id, result.into());
    }
    // A line that is JSON but not UTF-8 (a byte of the child's locale in a string) still
    // answers its call, with U+FFFD for the bytes: skipped, it would leave the call waiting
    // for `--upstream-timeout-secs`. Only such a line pays for the second parse.
    let parsed =
        serde_json::from_slice::<Incoming>(line).or_else(|e| match std::str::from_utf8(line) {
            Ok(_) => Err(e),
            Err(_) => serde_json::from_str(&String::from_utf8_lossy(line)),
        });
    match parsed {
        Ok(message) => peer.receive_members(message),
        Err(_) => {
            let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
            tracing::warn!(upstream = %peer.name(), line = %shown, "upstream stdout line is not JSON; skipped");
        }
    }
}

/// What ended the child, for the fault of its calls: its exit status when it exited within a
/// moment of closing stdout, else that it closed stdout.
async fn exit_reason(end: &ChildEnd) -> String {
    let known = end.known.notified();
    if end.reason().is_none() {
        let _ = monoio::time::timeout(EXIT_STATUS_WAIT, known).await;
    }
    end.reason().unwrap_or_else(|| "closed its stdout".to_owned())
}

/// How long a child that closed its stdout is given to exit before its calls fail anyway.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// Logs the child's stderr line by line, at most `STDERR_LINES_PER_SEC` lines a second (the
/// rest are counted and the count logged).
async fn log_stderr(mut stderr: UnixStream, name: Rc<str>) {
    let mut buf = Vec::with_capacity(READ_CHUNK);
    let mut line = Vec::new();
    let mut window = Instant::now();
    let mut logged = 0u32;
    let mut dropped = 0u64;
    loop {
        let (result, filled) = stderr.read(buf).await;
        buf = filled;
        let n = match result {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b != b'\n' {
                if line.len() < STDERR_LINE_MAX {
                    line.push(b);
                }
                continue;
            }
            if window.elapsed() >= Duration::from_secs(1) {
                if dropped > 0 {
                    tracing::warn!(upstream = %name, dropped, "upstream stderr lines not logged (rate limit)");
                }
                window = Instant::now();
                logged = 0;
                dropped = 0;
            }
            if logged < STDERR_LINES_PER_SEC {
                logged += 1;
                tracing::info!(upstream = %name, "stderr: {}", String::from_utf8_lossy(&line));
            } else {
                dropped += 1;
            }
            line.clear();
        }
        buf.clear();
    }
}

/// Child stderr lines logged per second, per child.
const STDERR_LINES_PER_SEC: u32 = 50;
/// Longest stderr line logged (the rest of the line is cut).
const STDERR_LINE_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_keeps_at_most_its_spares_and_none_too_large_or_empty() {
        let mut queue = WriteQueue::default();
        queue.keep(Vec::new());
        queue.keep(Vec::with_capacity(SPARE_BUFFER_BYTES_MAX + 1));
        assert!(queue.spares.is_empty(), "no capacity, or over the bound: not kept");
        let mut full = Vec::with_capacity(SPARE_BUFFER_BYTES_MAX);
        full.extend_from_slice(b"sent");
        queue.keep(full);
        for _ in 0..SPARE_BUFFERS_MAX + 2 {
            queue.keep(Vec::with_capacity(64));
        }
        assert_eq!(queue.spares.len(), SPARE_BUFFERS_MAX);
        assert!(queue.spares.iter().all(Vec::is_empty), "kept emptied");
        assert_eq!(queue.spares[0].capacity(), SPARE_BUFFER_BYTES_MAX, "the bound itself is kept");
    }
}
