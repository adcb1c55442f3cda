//! `tidemark-load stdio-direct`: sequential `tools/call echo` straight to a stdio MCP server
//! (newline-delimited JSON-RPC on its stdin/stdout, no HTTP): the baseline for what a bridge
//! (tidemark `--upstream stdio:…`, mcp-proxy, supergateway) adds to a call.
//!
//! Owns: spawning the server (`--command`, split on whitespace like tidemark's
//! `stdio:COMMAND ARGS…`), the `initialize` handshake, one call at a time (write + flush the
//! request line, block until the response line), the per-call latency from just before the
//! write to just after the response's newline, and a watchdog that kills a server that leaves a
//! call unanswered for `--timeout`.
//! Called by: `main` (`Command::StdioDirect`).
//! Never: runs more than one call in flight (concurrency 1 is what it is the baseline for).

use std::io::{BufRead as _, BufReader, BufWriter, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use hdrhistogram::Histogram;

use crate::jsonrpc::{self, Classifier, Kind};
use crate::stats::{self, ErrorKind, Errors, Live};

/// How often the watchdog looks at the call in flight.
const WATCHDOG_EVERY: Duration = Duration::from_millis(50);
/// How long the server may take to exit once its stdin is closed before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Server→client lines (notifications) tolerated before one call's response.
const EXTRA_LINES_MAX: usize = 1000;

pub struct Settings {
    /// Program and arguments.
    pub command: Vec<String>,
    /// The request line with `{id}` where the id goes (no newline).
    pub body: String,
    /// Protocol version asked for in `initialize`.
    pub version: String,
    pub measure_from: Instant,
    pub end: Instant,
    /// Stop after this many calls (warm-up included), if given.
    pub requests: Option<u64>,
    pub timeout: Duration,
}

pub struct Outcome {
    pub hist: Histogram<u64>,
    /// Calls answered correctly inside the measurement window.
    pub done: u64,
    pub errors: Errors,
    /// The version the server answered `initialize` with.
    pub version: String,
    /// When the last call inside the window finished (a `--requests` budget may end early).
    pub last_done: Option<Instant>,
    /// The first error's description, if any.
    pub first_error: Option<String>,
}

/// The server process, watched: `busy_since_ns` is the start of the call in flight (0 = idle),
/// in ns after `base`.
struct Watched {
    child: Child,
    base: Instant,
    busy_since_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
}

fn spawn(command: &[String]) -> anyhow::Result<(Child, ChildStdin, ChildStdout)> {
    let (program, args) = command.split_first().context("--command is empty")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", command.join(" ")))?;
    let stdin = child.stdin.take().context("no stdin pipe")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    Ok((child, stdin, stdout))
}

/// Kills the server when a call has been in flight longer than `timeout`; on `stop`, waits for
/// it to exit (its stdin is closed by then) and kills it after `EXIT_GRACE`.
fn watchdog(mut w: Watched, timeout: Duration) {
    let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    while !w.stop.load(Ordering::Relaxed) {
        std::thread::sleep(WATCHDOG_EVERY);
        let since = w.busy_since_ns.load(Ordering::Relaxed);
        let now = u64::try_from(w.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if since != 0 && now.saturating_sub(since) > timeout_ns {
            w.timed_out.store(true, Ordering::Relaxed);
            let _ = w.child.kill();
            let _ = w.child.wait();
            return;
        }
        if let Ok(Some(_)) = w.child.try_wait() {
            return; // exited by itself: the reader sees the end of its stdout
        }
    }
    let deadline = Instant::now() + EXIT_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = w.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = w.child.kill();
    let _ = w.child.wait();
}

struct Pipe {
    writer: BufWriter<ChildStdin>,
    reader: BufReader<ChildStdout>,
    line: Vec<u8>,
}

impl Pipe {
    fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(line)?;
        self.writer.write_all(b"\n")?;
        self.writer.flush()
    }

    /// Reads one line into `self.line`; an error at the end of the server's stdout.
    fn read_line(&mut self) -> anyhow::Result<()> {
        self.line.clear();
        let n = self.reader.read_until(b'\n', &mut self.line).context("reading the server")?;
        if n == 0 {
            bail!("the server closed its stdout");
        }
        Ok(())
    }
}

/// `initialize` + `notifications/initialized`; returns the negotiated version.
fn handshake(pipe: &mut Pipe, version: &str) -> anyhow::Result<String> {
    let init = jsonrpc::initialize_body(version).replace("{id}", "0");
    pipe.send(init.as_bytes())?;
    for _ in 0..EXTRA_LINES_MAX {
        pipe.read_line()?;
        let value: serde_json::Value = match serde_json::from_slice(&pipe.line) {
            Ok(v) => v,
            Err(_) => continue, // a stray non-JSON line (some servers log to stdout)
        };
        if value.get("id") != Some(&serde_json::Value::from(0)) {
            continue;
        }
        if let Some(e) = value.get("error") {
            bail!("initialize failed: {e}");
        }
        let negotiated = value["result"]["protocolVersion"]
            .as_str()
            .with_context(|| format!("initialize answer has no protocolVersion: {value}"))?
            .to_owned();
        pipe.send(jsonrpc::INITIALIZED_BODY.as_bytes())?;
        return Ok(negotiated);
    }
    bail!("no answer to initialize in {EXTRA_LINES_MAX} lines")
}

pub fn run(settings: Settings, live: Arc<Live>) -> anyhow::Result<Outcome> {
    let (child, stdin, stdout) = spawn(&settings.command)?;
    let base = Instant::now();
    let busy_since_ns = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let watched = Watched {
        child,
        base,
        busy_since_ns: busy_since_ns.clone(),
        stop: stop.clone(),
        timed_out: timed_out.clone(),
    };
    let timeout = settings.timeout;
    let dog = std::thread::Builder::new()
        .name("stdio-watchdog".into())
        .spawn(move || watchdog(watched, timeout))?;
    let mut pipe = Pipe {
        writer: BufWriter::with_capacity(16 << 10, stdin),
        reader: BufReader::with_capacity(64 << 10, stdout),
        line: Vec::with_capacity(4096),
    };
    let mark_busy = |on: bool| {
        let ns = if on { u64::try_from(base.elapsed().as_nanos()).unwrap_or(1).max(1) } else { 0 };
        busy_since_ns.store(ns, Ordering::Relaxed);
    };

    mark_busy(true);
    let version = handshake(&mut pipe, &settings.version);
    mark_busy(false);
    let outcome =
        version.and_then(|version| calls(&settings, &mut pipe, &live, &mark_busy, version));

    drop(pipe); // closes the server's stdin: it should exit
    stop.store(true, Ordering::Relaxed);
    let _ = dog.join();
    let timed_out = timed_out.load(Ordering::Relaxed);
    let mut outcome = outcome.map_err(|e| {
        if timed_out {
            e.context(format!("no answer within --timeout {timeout:?}: the server was killed"))
        } else {
            e
        }
    })?;
    if timed_out {
        outcome.errors.add(ErrorKind::Timeout, 1);
        outcome.first_error.get_or_insert_with(|| "a call timed out; server killed".into());
    }
    Ok(outcome)
}

fn calls(
    settings: &Settings,
    pipe: &mut Pipe,
    live: &Live,
    mark_busy: &dyn Fn(bool),
    version: String,
) -> anyhow::Result<Outcome> {
    let parts: Vec<&[u8]> = settings.body.split("{id}").map(str::as_bytes).collect();
    let classifier = Classifier::default();
    let mut hist = stats::new_histogram();
    let mut interval = stats::new_histogram();
    let mut last_publish = Instant::now();
    let mut request = Vec::with_capacity(settings.body.len() + 32);
    let mut outcome = Outcome {
        hist: stats::new_histogram(),
        done: 0,
        errors: Errors::default(),
        version,
        last_done: None,
        first_error: None,
    };
    let mut id: u64 = 0;
    while Instant::now() < settings.end {
        if settings.requests.is_some_and(|n| id >= n) {
            break;
        }
        id += 1;
        request.clear();
        request.extend_from_slice(parts[0]);
        for part in &parts[1..] {
            crate::wire::push_u64(&mut request, id);
            request.extend_from_slice(part);
        }
        mark_busy(true);
        let sent = Instant::now();
        let answer = pipe
            .send(&request)
            .context("writing to the server")
            .and_then(|()| read_answer(pipe, &classifier));
        let finished = Instant::now();
        mark_busy(false);
        let verdict = match answer {
            Err(e) => {
                outcome.errors.add(ErrorKind::Io, 1);
                outcome.first_error.get_or_insert_with(|| format!("{e:#}"));
                live.errors.fetch_add(1, Ordering::Relaxed);
                break; // the pipe is gone
            }
            Ok(Kind::Response { ok: true }) if classifier.id(&pipe.line) == Some(id) => Ok(()),
            Ok(Kind::Response { ok: true }) => Err(ErrorKind::WrongId),
            Ok(_) => Err(ErrorKind::Rpc),
        };
        if sent < settings.measure_from {
            continue;
        }
        match verdict {
            Ok(()) => {
                stats::record(&mut hist, finished - sent);
                stats::record(&mut interval, finished - sent);
                outcome.done += 1;
                outcome.last_done = Some(finished);
                live.done.fetch_add(1, Ordering::Relaxed);
            }
            Err(kind) => {
                outcome.errors.add(kind, 1);
                outcome.first_error.get_or_insert_with(|| {
                    format!("call {id}: {}", String::from_utf8_lossy(&pipe.line).trim_end())
                });
                live.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if finished.duration_since(last_publish) >= Duration::from_secs(1) {
            live.publish_interval(&mut interval);
            last_publish = finished;
        }
    }
    outcome.hist = hist;
    Ok(outcome)
}

/// Reads lines until a JSON-RPC response (skipping notifications and server requests).
fn read_answer(pipe: &mut Pipe, classifier: &Classifier) -> anyhow::Result<Kind> {
    for _ in 0..EXTRA_LINES_MAX {
        pipe.read_line()?;
        match classifier.kind(&pipe.line) {
            kind @ Kind::Response { .. } => return Ok(kind),
            Kind::Progress | Kind::Other => {}
        }
    }
    bail!("no response in {EXTRA_LINES_MAX} lines")
}
