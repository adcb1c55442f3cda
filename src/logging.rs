//! Structured logs (docs/logging.md): the subscriber (`--log-format text|json` on stderr,
//! colour only when stderr is a terminal), its filter in `RUST_LOG` syntax (`--log-level` >
//! `RUST_LOG` > `info`) behind a reload handle (SIGHUP: `reload_log_level`), and the per-kind
//! rate limiter that keeps a flood of one kind of event from filling a disk (`limited!`,
//! `--log-events-per-kind-per-sec`, "N more suppressed" lines), with the info summary of
//! refusals (`refused`, `--log-refusal-summary-secs`), and the lines an answer does not wait
//! for (`deferred`: kept by the worker thread, written after the answer).
//!
//! Owns: the field names every event uses (`field`), the culprits, the kinds and their
//! windows. Never: logs a body, a token or an `Authorization` value (callers pass ids, sizes
//! and reasons only). The limiter's state is one set of atomics per kind, touched only when
//! an event passed the level filter (and, for refusals, one relaxed add per refusal); nothing
//! here is on the path of a request whose events are filtered out.

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

use crate::config::{self, Config, LogFormat};

/// The fixed field names (docs/logging.md): every event names its subject with these, so one
/// `jq 'select(.fields.session == "…")'` follows a session.
#[allow(dead_code)] // The list is the documentation of record; call sites write the names.
pub(crate) mod field {
    /// The `Mcp-Session-Id` (38 hex digits; not a secret: it routes, the token authorizes).
    pub(crate) const SESSION: &str = "session";
    /// A stream of a session (its number in the session's event ids).
    pub(crate) const STREAM: &str = "stream";
    /// The JSON-RPC request id, as the client wrote it.
    pub(crate) const REQUEST_ID: &str = "request_id";
    /// A 2026-07-28 task id.
    pub(crate) const TASK: &str = "task";
    /// The worker core.
    pub(crate) const CORE: &str = "core";
    /// The node (`--node-id`).
    pub(crate) const NODE: &str = "node";
    /// An `--upstream` by name.
    pub(crate) const UPSTREAM: &str = "upstream";
    /// The peer's socket address.
    pub(crate) const PEER: &str = "peer";
    /// Whose fault it is: one of `Culprit`'s names.
    pub(crate) const CULPRIT: &str = "culprit";
    /// Why, in a few words.
    pub(crate) const REASON: &str = "reason";
    /// The HTTP status answered.
    pub(crate) const STATUS: &str = "status";
    /// The JSON-RPC error code answered.
    pub(crate) const CODE: &str = "code";
}

/// Characters of a client-chosen id (a JSON-RPC request id) a line carries; the rest is cut,
/// so a peer cannot make one line as long as its body.
pub(crate) const ID_CHARS_MAX: usize = 64;

/// `id` cut to `ID_CHARS_MAX` characters.
pub(crate) fn clip(id: &str) -> &str {
    match id.char_indices().nth(ID_CHARS_MAX) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

/// Whose fault an event is (the `culprit` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Culprit {
    /// The client or whatever sits between it and us (a balancer).
    Peer,
    /// tidemark: a limit reached, a drain, a bug.
    Us,
    /// The operating system: file descriptors, random source, sockets.
    Os,
    /// An `--upstream` MCP server.
    Upstream,
}

impl Culprit {
    /// The field's value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Culprit::Peer => "peer",
            Culprit::Us => "us",
            Culprit::Os => "os",
            Culprit::Upstream => "upstream",
        }
    }
}

/// The kinds of event that are rate-limited separately (one budget each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A 4xx/5xx refusal (debug).
    Refusal,
    /// A migration decision other than fresh (info).
    Migration,
    /// A resume (GET + Last-Event-ID) and its replay (info).
    Resume,
    /// Owed events lost to ring eviction, owed streams abandoned (warn).
    Loss,
    /// A session expired or was deleted (info/debug).
    Session,
    /// A connection's hand-off to its owner core failed (warn).
    Handoff,
    /// An upstream's failures and unparseable output (warn).
    Upstream,
    /// Accept and socket errors (warn).
    Accept,
}

const KINDS: usize = 8;

impl Kind {
    const ALL: [Kind; KINDS] = [
        Kind::Refusal,
        Kind::Migration,
        Kind::Resume,
        Kind::Loss,
        Kind::Session,
        Kind::Handoff,
        Kind::Upstream,
        Kind::Accept,
    ];

    /// The `kind` field of a "suppressed" line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Refusal => "refusal",
            Kind::Migration => "migration",
            Kind::Resume => "resume",
            Kind::Loss => "loss",
            Kind::Session => "session",
            Kind::Handoff => "handoff",
            Kind::Upstream => "upstream",
            Kind::Accept => "accept",
        }
    }
}

/// One kind's window: the second it counts, the lines written in it, the lines not written
/// since the last "suppressed" line. Races between cores at a window's turn may let a line or
/// two more through; no line is counted twice or lost from the suppressed count.
struct Window {
    second: AtomicU64,
    written: AtomicU32,
    suppressed: AtomicU64,
}

impl Window {
    const fn new() -> Window {
        Window {
            second: AtomicU64::new(0),
            written: AtomicU32::new(0),
            suppressed: AtomicU64::new(0),
        }
    }
}

/// The per-kind budget of one window, and whether a line of `kind` may be written now.
struct Limiter {
    budget: AtomicU32,
    windows: [Window; KINDS],
}

impl Limiter {
    const fn new(budget: u32) -> Limiter {
        Limiter { budget: AtomicU32::new(budget), windows: [const { Window::new() }; KINDS] }
    }

    /// Whether a line of `kind` fits the window of `second`; when the window turned, the
    /// count suppressed in the windows before it (to be reported before this line).
    fn admit(&self, kind: Kind, second: u64) -> (bool, u64) {
        let w = &self.windows[kind as usize];
        let mut reported = 0;
        let seen = w.second.load(Ordering::Relaxed);
        if seen != second
            && w.second.compare_exchange(seen, second, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            w.written.store(0, Ordering::Relaxed);
            reported = w.suppressed.swap(0, Ordering::AcqRel);
        }
        let fits = w.written.fetch_add(1, Ordering::Relaxed) < self.budget.load(Ordering::Relaxed);
        if !fits {
            w.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        (fits, reported)
    }

    /// The suppressed count of `kind`'s window when that window is over (before `second`);
    /// taken, so it is reported once.
    fn take_finished(&self, kind: Kind, second: u64) -> u64 {
        let w = &self.windows[kind as usize];
        if w.second.load(Ordering::Acquire) >= second {
            return 0;
        }
        w.suppressed.swap(0, Ordering::AcqRel)
    }
}

static LIMITER: Limiter = Limiter::new(config::LOG_EVENTS_PER_KIND_PER_SEC);
/// Refusals since the last summary, and the summary's interval in seconds.
static REFUSED: AtomicU64 = AtomicU64::new(0);
static SUMMARY_SECS: AtomicU64 = AtomicU64::new(config::LOG_REFUSAL_SUMMARY_SECS);
static LAST_SUMMARY: AtomicU64 = AtomicU64::new(0);
/// The filter's reload handle, set by `init_logging`.
static RELOAD: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// The clock of the windows.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Seconds since the first look (window numbers start at 1: 0 is "never").
fn now_second() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs() + 1
}

/// Whether a line of `kind` may be written now; first writes the "N more suppressed" line of
/// the window that just ended, if any. Called by `limited!` only once the level admits it.
pub(crate) fn admit(kind: Kind) -> bool {
    let (fits, suppressed) = LIMITER.admit(kind, now_second());
    if suppressed > 0 {
        report_suppressed(kind, suppressed);
    }
    fits
}

fn report_suppressed(kind: Kind, suppressed: u64) {
    tracing::info!(
        kind = kind.as_str(),
        suppressed,
        budget = LIMITER.budget.load(Ordering::Relaxed),
        "{suppressed} more suppressed (--log-events-per-kind-per-sec)"
    );
}

/// Counts one refusal for the info summary (every refusal, whatever the level).
pub(crate) fn refused() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Writes what is owed when nobody logs: the "suppressed" lines of finished windows and the
/// refusal summary when its interval is over. Called about once a second (`Running::join`).
pub(crate) fn flush() {
    let second = now_second();
    for kind in Kind::ALL {
        let suppressed = LIMITER.take_finished(kind, second);
        if suppressed > 0 {
            report_suppressed(kind, suppressed);
        }
    }
    let interval = SUMMARY_SECS.load(Ordering::Relaxed);
    let last = LAST_SUMMARY.load(Ordering::Relaxed);
    if second >= last + interval
        && LAST_SUMMARY.compare_exchange(last, second, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        let refused = REFUSED.swap(0, Ordering::AcqRel);
        if refused > 0 {
            tracing::info!(
                refused,
                window_secs = interval,
                "{refused} requests refused (4xx/5xx) in the last {interval} s; each at debug"
            );
        }
    }
}

/// Keys of "logged once" events this thread has logged (a tool hidden from a tool table: once
/// per core, not at every re-listing, as each per-session upstream link lists its own), at most
/// this many; past it such an event is logged every time, through the rate limiter. No flag:
/// it bounds only this memory, nothing a peer sees.
pub(crate) const REPORTED_MAX: usize = 256;

thread_local! {
    static REPORTED: std::cell::RefCell<std::collections::HashSet<String>> =
        std::cell::RefCell::new(std::collections::HashSet::new());
}

/// Whether `key` is hidden for the first time on this thread (then it is logged and counted);
/// past `REPORTED_MAX` keys every hiding is, through the rate-limited log.
pub(crate) fn first_report(key: &str) -> bool {
    REPORTED.with(|seen| {
        let mut seen = seen.borrow_mut();
        if seen.contains(key) {
            return false;
        }
        if seen.len() < REPORTED_MAX {
            seen.insert(key.to_owned());
        }
        true
    })
}

/// Bytes of log lines one thread keeps for later (`deferred`) before it writes them at once.
/// The lines are rate-limited and written after the answer at hand, so this is rarely more
/// than one line; it bounds only this memory, nothing a peer sees, so it has no flag.
pub(crate) const DEFERRED_BYTES_MAX: usize = 16 * 1024;

/// A thread's deferred lines; written when the thread ends, if nothing wrote them before.
struct Deferred(Vec<u8>);

impl Drop for Deferred {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = std::io::stderr().write_all(&self.0);
        }
    }
}

thread_local! {
    /// Whether this thread's lines go to `DEFERRED` now (inside `deferred`).
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
    static DEFERRED: RefCell<Deferred> = const { RefCell::new(Deferred(Vec::new())) };
}

/// Runs `log` with this thread's lines kept in memory (formatted, not written), for
/// `write_deferred` once the answer at hand is written: a 409 must not wait on a write to
/// stderr (issue 40 §5: ~30 µs of the migration round trip's p99). Order is kept: a line
/// written directly on this thread first writes the kept ones, and the reaper tick writes
/// what no answer did (at most `REAP_INTERVAL` late).
pub(crate) fn deferred(log: impl FnOnce()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFERRING.set(false);
        }
    }
    DEFERRING.set(true);
    let _reset = Reset;
    log();
}

/// Writes this thread's kept lines, if any, with one `write`. Called by a connection once
/// its answer is written, and by the reaper tick; one thread-local load when there are none.
pub(crate) fn write_deferred() {
    DEFERRED.with_borrow_mut(|lines| {
        if !lines.0.is_empty() {
            let _ = std::io::stderr().write_all(&lines.0);
            lines.0.clear();
        }
    });
}

/// Keeps `line` for `write_deferred`; `true` when the kept lines passed
/// `DEFERRED_BYTES_MAX` (then they are written at once).
fn keep(line: &[u8]) -> bool {
    DEFERRED.with_borrow_mut(|lines| {
        lines.0.extend_from_slice(line);
        lines.0.len() > DEFERRED_BYTES_MAX
    })
}

/// The subscriber's writer: stderr, or this thread's kept lines inside `deferred`.
#[derive(Clone, Copy)]
struct LogWriter;

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

impl Write for LogWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        if DEFERRING.get() {
            if keep(line) {
                write_deferred();
            }
            return Ok(line.len());
        }
        write_deferred();
        std::io::stderr().write(line)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A rate-limited event: `limited!(Kind::Migration, tracing::Level::INFO, field = …, "msg")`.
/// Costs a callsite check when the level filters it out; only an admitted event reaches the
/// limiter.
macro_rules! limited {
    ($kind:expr, $level:expr, $($rest:tt)+) => {
        if tracing::enabled!($level) && $crate::logging::admit($kind) {
            tracing::event!($level, $($rest)+);
        }
    };
}
pub(crate) use limited;

/// Sets the limiter's budgets from `cfg` (`Server` start; the subscriber is `init_logging`'s).
pub(crate) fn configure(cfg: &Config) {
    LIMITER.budget.store(cfg.log.events_per_kind_per_sec, Ordering::Relaxed);
    SUMMARY_SECS.store(cfg.log.refusal_summary.as_secs().max(1), Ordering::Relaxed);
    LAST_SUMMARY.store(now_second(), Ordering::Relaxed);
}

/// The filter in force: `--log-level`, else `RUST_LOG`, else `info`.
fn effective_level(flag: Option<&str>) -> String {
    match flag {
        Some(level) => level.to_owned(),
        None => std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()).unwrap_or("info".into()),
    }
}

/// Installs the process's subscriber as `cfg` says (`--log-format`, `--log-level`): stderr,
/// ANSI colour only when stderr is a terminal. `Err` when the filter does not parse or a
/// subscriber is already installed (an embedding program's own).
pub fn init_logging(cfg: &Config) -> Result<(), String> {
    let level = effective_level(cfg.log.level.as_deref());
    let filter = EnvFilter::try_new(&level).map_err(|e| format!("--log-level {level:?}: {e}"))?;
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::stderr().is_terminal();
    let (text, json) = match cfg.log.format {
        LogFormat::Json => {
            let json = tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .with_writer(LogWriter);
            (None, Some(json))
        }
        _ => {
            let text = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(LogWriter);
            (Some(text), None)
        }
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .try_init()
        .map_err(|e| format!("log subscriber: {e}"))?;
    let _ = RELOAD.set(handle);
    configure(cfg);
    for warning in &cfg.startup_warnings {
        tracing::warn!("{warning}");
    }
    Ok(())
}

/// Replaces the log filter (SIGHUP) with `new`, in `RUST_LOG` syntax; `None`-like empty
/// means `RUST_LOG` or `info` again. Logged either way; `Err` says why (the old filter stays).
pub fn reload_log_level(new: &str) -> Result<(), String> {
    let level = effective_level(Some(new).filter(|n| !n.is_empty()));
    let result = match RELOAD.get() {
        None => Err("the log subscriber is not tidemark's (init_logging was not called)".into()),
        Some(handle) => match EnvFilter::try_new(&level) {
            Ok(filter) => handle.reload(filter).map_err(|e| e.to_string()),
            Err(e) => Err(format!("{level:?}: {e}")),
        },
    };
    match &result {
        Ok(()) => tracing::info!(log_level = %level, "SIGHUP: log level reloaded"),
        Err(why) => tracing::warn!(error = %why, "SIGHUP: log level not reloaded, the old stays"),
    }
    result
}

/// The `--log-level` a SIGHUP applies again (`server`'s signal thread).
pub(crate) fn current_flag(cfg: &Config) -> String {
    cfg.log.level.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: exactly `budget` lines of a kind per window, the rest counted; the count is
    /// reported once, at the first line of the next window; kinds do not share a budget.
    #[test]
    fn the_budget_is_exact_and_the_rest_is_reported_once() {
        let limiter = Limiter::new(3);
        let results: Vec<bool> = (0..10).map(|_| limiter.admit(Kind::Refusal, 5).0).collect();
        assert_eq!(results, [true, true, true, false, false, false, false, false, false, false]);
        assert!(limiter.admit(Kind::Migration, 5).0, "another kind has its own budget");
        let (fits, reported) = limiter.admit(Kind::Refusal, 6);
        assert!(fits, "a new window");
        assert_eq!(reported, 7, "the 7 suppressed lines of the window before");
        let (_, again) = limiter.admit(Kind::Refusal, 6);
        assert_eq!(again, 0, "reported once");
    }

    /// Goal: at the limit, a budget of 1 admits one line; the flush takes a finished window's
    /// count once and leaves the current window's alone.
    #[test]
    fn flush_takes_only_finished_windows() {
        let limiter = Limiter::new(1);
        assert!(limiter.admit(Kind::Loss, 2).0);
        assert!(!limiter.admit(Kind::Loss, 2).0);
        assert!(!limiter.admit(Kind::Loss, 2).0);
        assert_eq!(limiter.take_finished(Kind::Loss, 2), 0, "window 2 is still open");
        assert_eq!(limiter.take_finished(Kind::Loss, 3), 2);
        assert_eq!(limiter.take_finished(Kind::Loss, 3), 0, "taken once");
        let (fits, reported) = limiter.admit(Kind::Loss, 3);
        assert!(fits && reported == 0, "nothing reported twice");
    }

    /// Goal: inside `deferred` a line is formatted into this thread's kept lines, not
    /// written; outside it nothing is kept.
    #[test]
    fn a_deferred_line_is_kept_until_written() {
        let subscriber = tracing_subscriber::fmt().with_writer(LogWriter).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, || {
            deferred(|| tracing::info!(reason = "retry_of_owed", "migration decision"));
        });
        let kept = DEFERRED.with_borrow_mut(|lines| std::mem::take(&mut lines.0));
        let kept = String::from_utf8(kept).expect("a text line");
        assert!(kept.contains("migration decision"), "{kept}");
        assert!(kept.contains("retry_of_owed"), "{kept}");
        assert!(!DEFERRING.get(), "only inside deferred");
    }

    /// Goal: at the limit, `DEFERRED_BYTES_MAX` kept bytes stay kept; one byte more and they
    /// are to be written at once.
    #[test]
    fn kept_lines_are_bounded() {
        assert!(!keep(&vec![b' '; DEFERRED_BYTES_MAX]), "at the limit: kept");
        assert!(keep(b" "), "past it: written");
        DEFERRED.with_borrow_mut(|lines| lines.0.clear());
    }

    /// Goal: the filter precedence: the flag, else `RUST_LOG`, else info.
    #[test]
    fn the_flag_wins_over_the_environment() {
        assert_eq!(
            effective_level(Some("tidemark::legacy=debug,warn")),
            "tidemark::legacy=debug,warn"
        );
        if std::env::var("RUST_LOG").is_err() {
            assert_eq!(effective_level(None), "info");
        }
    }
}
