//! The stdio transport: an upstream MCP server as a child process, spoken to in newline-
//! delimited JSON-RPC on its stdin and stdout, driven by the core that owns the session.
//!
//! The child's stdin, stdout and stderr are Unix socket pairs rather than pipes: monoio drives
//! sockets on both of its drivers (io_uring and epoll), so every read and write of the child's
//! streams is an ordinary non-blocking operation of the owning core's runtime, with no helper
//! thread. Programs read and write a socket on fd 0/1/2 exactly like a pipe.
//!
//! Owns: the child (its own process group), its write queue (bounded by
//! `--upstream-queue-bytes`), its stdout reader (lines bounded by `--upstream-line-bytes`),
//! its stderr logger (rate-limited), and its end: SIGTERM to the group, then SIGKILL after
//! `--upstream-kill-grace-ms`, reaped by one process-wide reaper thread.
//!
//! Backpressure: while a running call's client is attached and has not been written its share
//! of the ring (`config::UNWRITTEN_SHARE_DIVISOR`), the stdout reader takes no further line; the
//! socket's buffer fills and the child blocks in its write, which is how a flood of
//! notifications is slowed to what the client reads instead of evicting its unwritten events.
//! Never: runs a shell, blocks a worker thread, or buffers without a bound.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::UnixStream;

use super::peer::{Peer, Transport};
use super::settings::Settings;
use crate::signal::Signal;

/// Live children of all cores, against `--upstream-max-processes`. A slot is taken before the
/// spawn and given back when the reaper has waited for the child.
#[derive(Default)]
pub(crate) struct ProcessCount(AtomicUsize);

impl ProcessCount {
    fn try_take(&self, max: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok()
    }

    fn give_back(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

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
}

/// A running child and the pieces its tasks share.
pub(crate) struct StdioTransport {
    name: Rc<str>,
    queue: Rc<RefCell<WriteQueue>>,
    queued: Rc<Signal>,
    queue_max: usize,
    child: Rc<RefCell<Option<Child>>>,
    grace: Duration,
    count: Arc<ProcessCount>,
}

impl StdioTransport {
    /// Starts `argv` with `env` added, and the tasks that drive its streams, reporting to `peer`.
    pub(crate) fn spawn(
        name: Rc<str>,
        argv: &[String],
        settings: &Settings,
        count: Arc<ProcessCount>,
        peer: Weak<Peer>,
    ) -> Result<Rc<StdioTransport>, SpawnError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(SpawnError::Failed("empty command".into()));
        };
        if !count.try_take(settings.max_processes) {
            return Err(SpawnError::AtCapacity);
        }
        let started = start_child(program, args, settings);
        let (child, stdin, stdout, stderr) = match started {
            Ok(parts) => parts,
            Err(e) => {
                count.give_back();
                return Err(SpawnError::Failed(format!("cannot start {program}: {e}")));
            }
        };
        tracing::info!(upstream = %name, pid = child.id(), command = %argv.join(" "), "upstream started");
        let transport = Rc::new(StdioTransport {
            name: name.clone(),
            queue: Rc::new(RefCell::new(WriteQueue::default())),
            queued: Rc::new(Signal::default()),
            queue_max: settings.queue_bytes,
            child: Rc::new(RefCell::new(Some(child))),
            grace: settings.kill_grace,
            count,
        });
        monoio::spawn(write_stdin(stdin, transport.queue.clone(), transport.queued.clone()));
        monoio::spawn(read_stdout(stdout, settings.line_bytes, transport.child.clone(), peer));
        monoio::spawn(log_stderr(stderr, name));
        Ok(transport)
    }
}

type ChildStreams = (Child, UnixStream, UnixStream, UnixStream);

/// Forks and execs the child on three socket pairs, in a process group of its own (so its end
/// reaches any process it started, e.g. `npx` → `node`).
fn start_child(
    program: &str,
    args: &[String],
    settings: &Settings,
) -> std::io::Result<ChildStreams> {
    let (stdin_ours, stdin_theirs) = StdUnixStream::pair()?;
    let (stdout_ours, stdout_theirs) = StdUnixStream::pair()?;
    let (stderr_ours, stderr_theirs) = StdUnixStream::pair()?;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(settings.env.iter().map(|(k, v)| (k, v)))
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
            queue.bytes = message;
        } else {
            queue.bytes.extend_from_slice(&message);
        }
        drop(queue);
        self.queued.notify_all();
        Ok(())
    }

    fn shutdown(&self) {
        self.queue.borrow_mut().closed = true;
        self.queued.notify_all();
        let child = self.child.borrow_mut().take();
        if let Some(child) = child {
            stop(child, self.grace, self.count.clone(), &self.name);
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
/// the child's end. A line longer than `line_max` is skipped to its end and logged. After each
/// line it waits until every running call has room (`peer::room`): one child's stdout carries
/// all its calls' messages, so a call whose attached client lags pauses the reading for all of
/// them (in `shared` isolation, for every session of the core that uses the child).
async fn read_stdout(
    mut stdout: UnixStream,
    line_max: usize,
    child: Rc<RefCell<Option<Child>>>,
    peer: Weak<Peer>,
) {
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
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if skipping {
                skipping = false;
            } else {
                line.extend_from_slice(&rest[..end]);
                let Some(peer) = peer.upgrade() else { return };
                deliver(&peer, &line);
            }
            line.clear();
            rest = &rest[end + 1..];
            // Backpressure: the next line is not taken while a call's client has not been
            // written its share; the child then blocks on its full stdout (module doc).
            super::peer::room(&peer, None).await;
        }
        if !skipping {
            line.extend_from_slice(rest);
            if line.len() > line_max {
                let name = peer.upgrade().map(|p| p.name().to_owned()).unwrap_or_default();
                tracing::warn!(upstream = %name, limit = line_max, "upstream line longer than --upstream-line-bytes skipped");
                line.clear();
                line.shrink_to(READ_CHUNK);
                skipping = true;
            }
        }
        buf.clear();
    }
    let why = exit_reason(&child).await;
    if let Some(peer) = peer.upgrade() {
        peer.closed(&why);
    }
}

/// Bytes asked for per read of the child's stdout or stderr.
const READ_CHUNK: usize = 64 * 1024;

/// One stdout line to the peer: JSON (invalid UTF-8 in it replaced), or logged and skipped.
fn deliver(peer: &Rc<Peer>, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    // A line that is JSON but not UTF-8 (a byte of the child's locale in a string) still
    // answers its call, with U+FFFD for the bytes: skipped, it would leave the call waiting
    // for `--upstream-timeout-secs`. Only such a line pays for the second parse.
    let parsed = serde_json::from_slice(line).or_else(|e| match std::str::from_utf8(line) {
        Ok(_) => Err(e),
        Err(_) => serde_json::from_str(&String::from_utf8_lossy(line)),
    });
    match parsed {
        Ok(message) => peer.receive(message),
        Err(_) => {
            let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
            tracing::warn!(upstream = %peer.name(), line = %shown, "upstream stdout line is not JSON; skipped");
        }
    }
}

/// What ended the child, for the fault of its calls: its exit status when it exited within a
/// moment of closing stdout, else that it closed stdout.
async fn exit_reason(child: &Rc<RefCell<Option<Child>>>) -> String {
    let deadline = Instant::now() + EXIT_STATUS_WAIT;
    loop {
        let status = match child.borrow_mut().as_mut() {
            None => return "stopped by tidemark".to_owned(),
            Some(c) => c.try_wait().ok().flatten(),
        };
        if let Some(status) = status {
            return describe(status);
        }
        if Instant::now() >= deadline {
            return "closed its stdout".to_owned();
        }
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long a child that closed its stdout is given to exit before its calls fail anyway.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => format!("ended ({status})"),
    }
}

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

/// Ends a child: SIGTERM to its process group now, SIGKILL after `grace` if it still runs; the
/// reaper thread waits for it and gives its slot back.
fn stop(child: Child, grace: Duration, count: Arc<ProcessCount>, name: &str) {
    let pid = child.id();
    UNREAPED.fetch_add(1, Ordering::AcqRel);
    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    LONGEST_GRACE_MS.fetch_max(grace_ms, Ordering::AcqRel);
    signal_group(pid, rustix::process::Signal::TERM);
    tracing::info!(upstream = name, pid, "upstream stopped");
    reaper().send(Reap { child, kill_at: Instant::now() + grace, count });
}

fn signal_group(pid: u32, signal: rustix::process::Signal) {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        // ESRCH (already gone) is the expected case for a child that exited by itself.
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// A child to wait for.
struct Reap {
    child: Child,
    kill_at: Instant,
    count: Arc<ProcessCount>,
}

/// The process-wide reaper: one thread that waits for stopped children (SIGKILL at their
/// deadline), so no worker thread ever waits for a process.
struct Reaper(mpsc::Sender<Reap>);

impl Reaper {
    fn send(&self, reap: Reap) {
        if self.0.send(reap).is_err() {
            tracing::warn!("upstream reaper is gone; a child may be left unreaped");
        }
    }
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Reap>();
        let spawned = std::thread::Builder::new()
            .name("tidemark-reaper".into())
            .spawn(move || reap_forever(rx));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the upstream reaper thread");
        }
        Reaper(tx)
    })
}

fn reap_forever(rx: mpsc::Receiver<Reap>) {
    let mut waiting: Vec<Reap> = Vec::new();
    loop {
        let next = if waiting.is_empty() {
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(REAP_POLL)
        };
        match next {
            Ok(reap) => waiting.push(reap),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) if waiting.is_empty() => return,
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(REAP_POLL),
        }
        let now = Instant::now();
        waiting.retain_mut(|r| {
            if let Ok(Some(_)) = r.child.try_wait() {
                r.count.give_back();
                UNREAPED.fetch_sub(1, Ordering::AcqRel);
                return false;
            }
            if now >= r.kill_at {
                signal_group(r.child.id(), rustix::process::Signal::KILL);
                let _ = r.child.kill();
            }
            true
        });
    }
}

/// Children stopped and not yet waited for, all cores.
static UNREAPED: AtomicUsize = AtomicUsize::new(0);
/// The longest kill grace any stopped child was given.
static LONGEST_GRACE_MS: AtomicU64 = AtomicU64::new(0);

/// Blocks (the process's main thread, after the workers ended) until every stopped child has
/// exited: at most the longest kill grace plus `REAP_SLACK`, since the reaper sends SIGKILL at
/// the end of the grace. Without this the process would exit before its children's SIGKILL.
pub(crate) fn wait_for_children() {
    let grace = Duration::from_millis(LONGEST_GRACE_MS.load(Ordering::Acquire));
    let deadline = Instant::now() + grace + REAP_SLACK;
    while UNREAPED.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(REAP_POLL);
    }
}

/// Time beyond the kill grace for a SIGKILLed child to be reaped.
const REAP_SLACK: Duration = Duration::from_secs(1);

/// How often the reaper looks at the children it waits for.
const REAP_POLL: Duration = Duration::from_millis(20);
