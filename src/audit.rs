//! The audit trail (`--audit-log FILE|-`, docs/audit.md): one JSON line per `tools/call`,
//! `resources/read` and `prompts/get`, written when the call ends, with who called what and
//! how it ended; and one per 2026-07-28 task when the task ends (`Pending::became_task`).
//!
//! A worker renders its line (`Call::line`) and pushes the bytes into one bounded lock-free
//! queue (`--audit-queue-lines`); a full queue drops the line and counts it
//! (`tidemark_audit_lines_dropped_total`, and an `{"audit_dropped":N}` line the writer puts
//! into the file itself), never waits. One writer thread, started only when the flag is set,
//! takes the lines, appends them, rotates the file by size (`--audit-log-max-bytes`, keeping
//! `--audit-log-keep` old files as FILE.1 … FILE.K) and opens the path again on SIGHUP
//! (`AuditLog::reopen`), so an operator's `mv` + SIGHUP rotates it from outside.
//!
//! Owns: the line format, the queue, the writer and its file (the outcome is read off a
//! rendered answer by `wire::jsonrpc::answered`). Off (no `--audit-log`): nothing here exists, and the request path
//! tests one `Option` (`endpoint::post`). Never: blocks a worker, writes an argument's value
//! (only its SHA-256), or lets a peer's id or name grow a line past `FIELD_BYTES_MAX` each.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_queue::ArrayQueue;

use crate::config::{Config, AUDIT_FLUSH_MS};
use crate::metrics::CoreMetrics;

/// Bytes of one client-chosen field (a request id, a tool name, a key, a client name) a line
/// carries; the rest is cut, so a peer cannot make one line as long as its body.
pub(crate) const FIELD_BYTES_MAX: usize = 256;

/// What the writer thread and every core share.
struct Shared {
    queue: ArrayQueue<Vec<u8>>,
    /// Lines dropped since the writer last reported them in the file.
    dropped: AtomicU64,
    /// SIGHUP asked for the path to be opened again.
    reopen: AtomicBool,
    /// The server stops: write what is queued, then return.
    stop: AtomicBool,
}

/// A core's handle on the audit trail (cheap to clone).
#[derive(Clone)]
pub(crate) struct AuditSink {
    shared: Arc<Shared>,
    /// `--node-id`, as every line names it.
    node: u8,
    /// The core's metrics (`for_core`), where its lines and drops are counted.
    metrics: Option<Arc<CoreMetrics>>,
}

impl AuditSink {
    /// This handle for the core whose metrics count its lines.
    pub(crate) fn for_core(&self, metrics: Arc<CoreMetrics>) -> AuditSink {
        AuditSink { metrics: Some(metrics), ..self.clone() }
    }

    /// Queues the line of `call` ended as `ending`; false when the queue was full (the line is
    /// dropped and counted). Never waits.
    pub(crate) fn record(&self, call: &Call, ending: Ending) -> bool {
        let line = call.line(self.node, ending, SystemTime::now());
        let queued = self.shared.queue.push(line).is_ok();
        if !queued {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(metrics) = &self.metrics {
            match queued {
                true => metrics.audit_lines_total.inc(),
                false => metrics.audit_lines_dropped_total.inc(),
            }
        }
        queued
    }
}

/// An audited call whose end comes later (a legacy call's run, a 2026-07-28 call's stream):
/// `end` writes its line; dropped without one, it ends as `Cancelled`, so no call that began
/// goes without its line.
pub(crate) struct Pending {
    call: Option<Box<Call>>,
    sink: AuditSink,
}

impl Pending {
    pub(crate) fn new(call: Call, sink: AuditSink) -> Pending {
        Pending { call: Some(Box::new(call)), sink }
    }

    /// Forgets the call without a line (its request is served, and audited, elsewhere).
    pub(crate) fn discard(mut self) {
        self.call = None;
    }

    /// The call became the task `task` (a 2026-07-28 `tools/call` answered with a
    /// `CreateTaskResult`): its own line names the task (`task_created`), and the returned
    /// `Pending`, a copy of the call held by the task, writes the task's end line (`task`).
    pub(crate) fn became_task(&mut self, task: &str) -> Option<Pending> {
        let call = self.call.as_mut()?;
        call.task = TaskMark::Created(task.into());
        let mut end = Call::clone(call);
        end.task = TaskMark::Ended(task.into());
        Some(Pending { call: Some(Box::new(end)), sink: self.sink.clone() })
    }

    /// The token's subject of the call (`None`: authorization off, or the line is written).
    pub(crate) fn subject(&self) -> Option<&str> {
        self.call.as_ref()?.subject.as_deref()
    }

    /// Counts the line's `duration_us` from `started` (a task's end line: from its creation).
    pub(crate) fn started_at(&mut self, started: Instant) {
        if let Some(call) = &mut self.call {
            call.started = started;
        }
    }

    /// Writes the call's line, ended as `ending`.
    pub(crate) fn end(mut self, ending: Ending) {
        if let Some(call) = self.call.take() {
            self.sink.record(&call, ending);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.sink.record(&call, Ending::Cancelled);
        }
    }
}

/// The writer thread (`--audit-log`), owned by the running server; dropped last, it writes
/// what the queue still holds.
pub(crate) struct AuditLog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl AuditLog {
    /// Opens `--audit-log` and starts the writer (`None`: the flag is not set). The file is
    /// opened here, so a path that cannot be written fails the start.
    pub(crate) fn start(cfg: &Config) -> std::io::Result<Option<(AuditLog, AuditSink)>> {
        let Some(target) = cfg.log.audit_log.clone() else { return Ok(None) };
        let mut out = Output::open(target, cfg.log.audit_log_max_bytes, cfg.log.audit_log_keep)?;
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(cfg.log.audit_queue_lines),
            dropped: AtomicU64::new(0),
            reopen: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tidemark-audit".into())
            .spawn(move || out.run(&theirs))?;
        let sink = AuditSink { shared: shared.clone(), node: cfg.server.node_id, metrics: None };
        Ok(Some((AuditLog { shared, thread: Some(thread) }, sink)))
    }

    /// A handle SIGHUP's thread keeps to ask for a reopen.
    pub(crate) fn reopener(&self) -> Reopener {
        Reopener {
            shared: self.shared.clone(),
            thread: self.thread.as_ref().map(|t| t.thread().clone()),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Asks the writer to open its path again (SIGHUP).
pub(crate) struct Reopener {
    shared: Arc<Shared>,
    thread: Option<std::thread::Thread>,
}

impl Reopener {
    /// The next turn of the writer closes the file and opens the path again.
    pub(crate) fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

/// Where the lines go: a file (rotated by size, reopened on SIGHUP) or stdout (`-`).
struct Output {
    path: Option<PathBuf>,
    file: Box<dyn Write + Send>,
    /// Bytes in the current file (for rotation).
    bytes: u64,
    max_bytes: u64,
    keep: u32,
    /// The last turn's flush failed (a full disk): logged once when it starts and once when it
    /// ends, not at every turn.
    failing: bool,
}

impl Output {
    fn open(target: String, max_bytes: u64, keep: u32) -> std::io::Result<Output> {
        if target == "-" {
            let file = Box::new(std::io::stdout());
            return Ok(Output { path: None, file, bytes: 0, max_bytes, keep, failing: false });
        }
        let path = PathBuf::from(target);
        let (file, bytes) = open_append(&path)?;
        Ok(Output { path: Some(path), file, bytes, max_bytes, keep, failing: false })
    }

    /// The writer's loop: every `AUDIT_FLUSH_MS` (or when woken) the queue is written out, the
    /// drop count reported, a SIGHUP's reopen done; returns once the server stops.
    fn run(&mut self, shared: &Shared) {
        let mut lines = 0u64;
        loop {
            let stopping = shared.stop.load(Ordering::Acquire);
            if shared.reopen.swap(false, Ordering::AcqRel) {
                self.reopen();
            }
            while let Some(line) = shared.queue.pop() {
                self.write_line(&line);
                lines += 1;
            }
            let dropped = shared.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                let line = dropped_line(dropped, lines, SystemTime::now());
                self.write_line(&line);
            }
            self.flush_turn();
            if stopping {
                return;
            }
            std::thread::park_timeout(Duration::from_millis(AUDIT_FLUSH_MS));
        }
    }

    /// Flushes what the turn wrote. A failure (a full disk, a closed `-`) loses those lines:
    /// said once in the log when it starts, and again when writes succeed again.
    fn flush_turn(&mut self) {
        match (self.file.flush(), self.failing) {
            (Err(error), false) => {
                self.failing = true;
                tracing::error!(%error, "audit log: writes fail, lines are lost until they succeed");
            }
            (Ok(()), true) => {
                self.failing = false;
                tracing::warn!("audit log: writes succeed again");
            }
            _ => {}
        }
    }

    /// Appends one line, rotating first when it would take the file past the byte limit. A
    /// failed write (a full disk) loses the line; the writer goes on with the next.
    fn write_line(&mut self, line: &[u8]) {
        let len = line.len() as u64;
        if self.path.is_some() && self.bytes > 0 && self.bytes + len > self.max_bytes {
            self.rotate();
        }
        if self.file.write_all(line).is_ok() {
            self.bytes += len;
        }
    }

    /// FILE.{K-1} → FILE.K … FILE → FILE.1 (the oldest beyond `keep` removed), a new FILE.
    fn rotate(&mut self) {
        let Some(path) = self.path.clone() else { return };
        let _ = self.file.flush();
        let numbered = |n: u32| {
            let mut name = path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.keep == 0 {
            let _ = std::fs::remove_file(&path);
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for n in (1..self.keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            let _ = std::fs::rename(&path, numbered(1));
        }
        self.reopen();
    }

    /// Opens the path again (after a rotation, or SIGHUP after the file was moved away).
    fn reopen(&mut self) {
        let Some(path) = &self.path else { return };
        let _ = self.file.flush();
        match open_append(path) {
            Ok((file, bytes)) => {
                self.file = file;
                self.bytes = bytes;
            }
            Err(e) => tracing::warn!(error = %e, path = %path.display(), "audit log not reopened"),
        }
    }
}

/// The file at `path` opened for appending (created 0600 when absent) and its length.
fn open_append(path: &std::path::Path) -> std::io::Result<(Box<dyn Write + Send>, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file: File = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    let bytes = file.metadata().map(|m| if m.is_file() { m.len() } else { 0 })?;
    Ok((Box::new(std::io::BufWriter::with_capacity(64 * 1024, file)), bytes))
}

/// The line the writer puts in the file for lines the queue dropped.
fn dropped_line(dropped: u64, written: u64, now: SystemTime) -> Vec<u8> {
    let time = humantime::format_rfc3339_micros(now);
    format!("{{\"time\":\"{time}\",\"audit_dropped\":{dropped},\"audit_written\":{written}}}\n")
        .into_bytes()
}

/// How a call ended, as its line says it (`outcome`, and `code` or `status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// A JSON-RPC result (`tool_error`: a tool's result with `isError: true`).
    Result { tool_error: bool },
    /// A JSON-RPC error with its code (an unknown tool is -32602).
    Error(i64),
    /// Refused before it ran: the HTTP status (403 policy, 409 migration refusal, 429 rate
    /// limit, 503 unavailable or draining, …).
    Refused(u16),
    /// Answered from what an earlier attempt recorded (an `Idempotency-Key` or the legacy
    /// boundary's record): nothing ran.
    Dedup,
    /// The outcome is unknown (-31006: a call whose node died mid-run, CONTRACT §10).
    Unknown,
    /// The client went away before the end (a 2026-07-28 call is cancelled by that); a task
    /// cancelled by `tasks/cancel`.
    Cancelled,
    /// A task still running when its retention (`--task-retention-secs`) ended: deleted, its
    /// tool dropped.
    Expired,
}

impl Ending {
    /// What an answer says, as read back by `wire::jsonrpc::answered` (its HTTP status, its
    /// final JSON-RPC result or error code); `unknown` is the code of an unknown outcome
    /// (`wire::Code::OutcomeUnknown`). A refusal's status wins over its body.
    pub(crate) fn of_answer(
        answer: (Option<u16>, Option<Result<bool, i64>>),
        unknown: i64,
    ) -> Ending {
        let (status, message) = answer;
        if let Some(status @ (401 | 403 | 409 | 413 | 429 | 503)) = status {
            return Ending::Refused(status);
        }
        match message {
            Some(Ok(tool_error)) => Ending::Result { tool_error },
            Some(Err(code)) if code == unknown => Ending::Unknown,
            Some(Err(code)) => Ending::Error(code),
            None => Ending::Refused(status.unwrap_or(0)),
        }
    }
}

/// Whether a line is a task's: its call's creation of the task, or the task's end.
#[derive(Clone, Debug, Default)]
pub(crate) enum TaskMark {
    /// Not a task (every call's line but these two).
    #[default]
    None,
    /// The call was answered with this task (`"task_created":"<id>"`).
    Created(Box<str>),
    /// The task ended (`"task":"<id>"`): the line of the task's own outcome.
    Ended(Box<str>),
}

/// One audited call while it runs: everything its line says but the outcome and the end.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) started: Instant,
    /// `tools/call`, `resources/read` or `prompts/get`.
    pub(crate) method: &'static str,
    /// The JSON-RPC request id as the client wrote it (JSON text: a number or a string).
    pub(crate) id: Box<str>,
    /// The tool or prompt name, or the resource URI.
    pub(crate) name: Box<str>,
    /// SHA-256 of the canonical text of the call's `arguments` (`wire::jsonrpc::canonical_params`).
    pub(crate) arguments_sha256: [u8; 32],
    /// `Mcp-Session-Id` (legacy era; `None` for 2026-07-28).
    pub(crate) session: Option<Box<str>>,
    /// The token's subject (authorization on).
    pub(crate) subject: Option<Box<str>>,
    /// `clientInfo` name/version, when the request or its session says them.
    pub(crate) client: Option<Box<str>>,
    /// The protocol revision.
    pub(crate) era: Box<str>,
    /// The upstream that serves it (bridged calls).
    pub(crate) upstream: Option<Box<str>>,
    pub(crate) idempotency_key: Option<Box<str>>,
    /// The trace id (32 hex digits), when the request carries or starts a trace.
    pub(crate) trace_id: Option<Box<str>>,
    /// The task the call became, on its line or on the task's end line.
    pub(crate) task: TaskMark,
}

impl Call {
    /// The call's line, ended as `ending` at `now`.
    pub(crate) fn line(&self, node: u8, ending: Ending, now: SystemTime) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        let time = humantime::format_rfc3339_micros(now);
        let _ = write!(out, "{{\"time\":\"{time}\",\"node\":{node}");
        push_field(&mut out, "session", self.session.as_deref());
        push_field(&mut out, "subject", self.subject.as_deref());
        push_field(&mut out, "client", self.client.as_deref());
        push_field(&mut out, "era", Some(&self.era));
        push_field(&mut out, "upstream", self.upstream.as_deref());
        push_field(&mut out, "method", Some(self.method));
        push_id(&mut out, &self.id);
        let kind = match self.method {
            "tools/call" => "tool",
            "resources/read" => "resource",
            _ => "prompt",
        };
        push_field(&mut out, kind, Some(&self.name));
        match &self.task {
            TaskMark::None => {}
            TaskMark::Created(task) => push_field(&mut out, "task_created", Some(task)),
            TaskMark::Ended(task) => push_field(&mut out, "task", Some(task)),
        }
        let outcome = match ending {
            Ending::Result { tool_error: false } => "\"result\"".to_owned(),
            Ending::Result { tool_error: true } => "\"result\",\"tool_error\":true".to_owned(),
            Ending::Error(code) => format!("\"error\",\"error_code\":{code}"),
            Ending::Refused(status) => format!("\"refused\",\"status\":{status}"),
            Ending::Dedup => "\"dedup\"".to_owned(),
            Ending::Unknown => "\"unknown\"".to_owned(),
            Ending::Cancelled => "\"cancelled\"".to_owned(),
            Ending::Expired => "\"expired\"".to_owned(),
        };
        let micros = self.started.elapsed().as_micros();
        let _ = write!(out, ",\"outcome\":{outcome},\"duration_us\":{micros}");
        let _ = write!(out, ",\"arguments_sha256\":\"");
        for byte in self.arguments_sha256 {
            let _ = write!(out, "{byte:02x}");
        }
        out.push(b'"');
        push_field(&mut out, "idempotency_key", self.idempotency_key.as_deref());
        push_field(&mut out, "trace_id", self.trace_id.as_deref());
        out.extend_from_slice(b"}\n");
        out
    }
}

/// `,"name":"value"` (a JSON string, cut to `FIELD_BYTES_MAX` bytes on a character boundary),
/// or `,"name":null`.
fn push_field(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
    let _ = write!(out, ",\"{name}\":");
    match value {
        None => out.extend_from_slice(b"null"),
        Some(value) => {
            let mut end = value.len().min(FIELD_BYTES_MAX);
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            let _ = serde_json::to_writer(&mut *out, &value[..end]);
        }
    }
}

/// `,"id":` and the request id's JSON text as the client wrote it; one longer than
/// `FIELD_BYTES_MAX` becomes a string of its cut text (a cut JSON string is no JSON).
fn push_id(out: &mut Vec<u8>, id: &str) {
    if id.len() <= FIELD_BYTES_MAX {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(id.as_bytes());
    } else {
        push_field(out, "id", Some(id));
    }
}

/// SHA-256 of `text`.
pub(crate) fn sha256(text: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(text).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_cut_at_its_limit() {
        let call = Call {
            started: Instant::now(),
            method: "tools/call",
            id: "1".into(),
            name: "é".repeat(FIELD_BYTES_MAX).into(),
            arguments_sha256: sha256(b"{}"),
            session: None,
            subject: None,
            client: None,
            era: "2026-07-28".into(),
            upstream: None,
            idempotency_key: Some("k".repeat(FIELD_BYTES_MAX + 1).into()),
            trace_id: None,
            task: TaskMark::None,
        };
        let line = call.line(0, Ending::Dedup, SystemTime::UNIX_EPOCH);
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["tool"].as_str().unwrap().len(), FIELD_BYTES_MAX);
        assert_eq!(value["idempotency_key"].as_str().unwrap().len(), FIELD_BYTES_MAX);
        assert_eq!(value["outcome"], "dedup");
        assert_eq!(value["time"], "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            value["arguments_sha256"],
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn rotation_keeps_each_file_within_its_limit() {
        let dir = std::env::temp_dir().join(format!("tidemark-audit-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let line = [b'x'; 99].iter().copied().chain([b'\n']).collect::<Vec<u8>>();
        let mut out = Output::open(path.display().to_string(), 1000, 2).unwrap();
        for _ in 0..35 {
            out.write_line(&line);
        }
        out.file.flush().unwrap();
        let len = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let one = dir.join("audit.log.1");
        assert_eq!(len(&one), 1000, "exactly at the limit, not past it");
        assert_eq!(len(&dir.join("audit.log.2")), 1000);
        assert_eq!(len(&path), 500, "35 lines: two full files rotated, five lines now");
        assert!(!dir.join("audit.log.3").exists(), "only --audit-log-keep old files");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
