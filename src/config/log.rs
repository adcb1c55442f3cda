//! The log section: how log lines are written (`--log-format`, `--log-level`) and how many
//! a flood may write (`--log-events-per-kind-per-sec`, `--log-refusal-summary-secs`); the
//! limits, defaults, validation and flags.
//!
//! Owns: `LogConfig`, `LogFormat`, the limits, and their flags. Never: writes a line.

use std::time::Duration;

use super::error::{nonzero, ConfigError};

/// Log lines one kind of event (refusal, migration decision, resume, eviction, …) may write
/// per second (`--log-events-per-kind-per-sec`); the rest are counted and reported as one
/// "N more suppressed" line when the second turns, so a flood cannot fill a disk.
pub(crate) const LOG_EVENTS_PER_KIND_PER_SEC: u32 = 20;
/// How often the info summary of refusals is written (`--log-refusal-summary-secs`): each
/// refusal itself is a debug line, the summary tells an info-level log how many there were.
pub(crate) const LOG_REFUSAL_SUMMARY_SECS: u64 = 60;

/// Lines the audit trail's queue holds (`--audit-queue-lines`), shared by every core: a line
/// that finds it full is dropped and counted (`tidemark_audit_lines_dropped_total`, and an
/// `audit_dropped` line in the file), never waited for. 16 384 lines of ~400 bytes (6 MiB at
/// most) ride out a disk's stall of a second at thousands of calls per second.
pub(crate) const AUDIT_QUEUE_LINES: usize = 16384;
/// Bytes one audit file may reach before it is rotated (`--audit-log-max-bytes`): a line
/// that would take it past the limit goes into a new file.
pub(crate) const AUDIT_LOG_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Rotated audit files kept (`--audit-log-keep`): FILE.1 (newest) … FILE.K; 0 keeps none.
pub(crate) const AUDIT_LOG_KEEP: u32 = 5;
/// Most rotated audit files `--audit-log-keep` may ask for (each rotation renames them all).
pub(crate) const AUDIT_LOG_KEEP_MAX: u32 = 1000;
/// How often the audit writer wakes to write what is queued, in ms: a line reaches the file
/// at most this long after its call ended (plus the write).
pub(crate) const AUDIT_FLUSH_MS: u64 = 50;

/// How log lines are written to stderr (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LogFormat {
    /// One human-readable line per event (colour only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line (`jq`-friendly; field names in docs/logging.md).
    Json,
}

/// The log's format, filter and flood bounds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LogConfig {
    /// `--log-format`: text or JSON lines on stderr.
    pub format: LogFormat,
    /// `--log-level`: a filter in `RUST_LOG` syntax (`info`, `tidemark::legacy=debug,info`);
    /// `None`: `RUST_LOG`, else `info`.
    pub level: Option<String>,
    /// `--log-events-per-kind-per-sec`: the per-kind line budget of the log.
    pub events_per_kind_per_sec: u32,
    /// `--log-refusal-summary-secs`: the interval of the info summary of refusals.
    pub refusal_summary: Duration,
    /// `--audit-log`: the audit trail's file, or `-` for stdout (`None`: off, the default).
    pub audit_log: Option<String>,
    /// `--audit-log-max-bytes` (`AUDIT_LOG_MAX_BYTES`).
    pub audit_log_max_bytes: u64,
    /// `--audit-log-keep` (`AUDIT_LOG_KEEP`).
    pub audit_log_keep: u32,
    /// `--audit-queue-lines` (`AUDIT_QUEUE_LINES`).
    pub audit_queue_lines: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: None,
            events_per_kind_per_sec: LOG_EVENTS_PER_KIND_PER_SEC,
            refusal_summary: Duration::from_secs(LOG_REFUSAL_SUMMARY_SECS),
            audit_log: None,
            audit_log_max_bytes: AUDIT_LOG_MAX_BYTES,
            audit_log_keep: AUDIT_LOG_KEEP,
            audit_queue_lines: AUDIT_QUEUE_LINES,
        }
    }
}

impl From<LogFlags> for LogConfig {
    fn from(flags: LogFlags) -> LogConfig {
        LogConfig {
            format: match flags.log_format {
                LogFormatFlag::Text => LogFormat::Text,
                LogFormatFlag::Json => LogFormat::Json,
            },
            level: flags.log_level,
            events_per_kind_per_sec: flags.log_events_per_kind_per_sec,
            refusal_summary: Duration::from_secs(flags.log_refusal_summary_secs),
            audit_log: flags.audit_log,
            audit_log_max_bytes: flags.audit_log_max_bytes,
            audit_log_keep: flags.audit_log_keep,
            audit_queue_lines: flags.audit_queue_lines,
        }
    }
}

impl LogConfig {
    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.audit_log_keep > AUDIT_LOG_KEEP_MAX {
            return Err(ConfigError::AuditKeep(self.audit_log_keep, AUDIT_LOG_KEEP_MAX));
        }
        if self.audit_log.as_deref() == Some("") {
            return Err(ConfigError::AuditPath);
        }
        nonzero(&[
            ("log-events-per-kind-per-sec", u128::from(self.events_per_kind_per_sec)),
            ("log-refusal-summary-secs", self.refusal_summary.as_millis()),
            ("audit-log-max-bytes", u128::from(self.audit_log_max_bytes)),
            ("audit-queue-lines", self.audit_queue_lines as u128),
        ])
    }
}

/// `--log-format`'s values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum LogFormatFlag {
    Text,
    Json,
}

/// The command line's flags of this section: `--log-*`. `cli` flattens them into its `Flags` in
/// `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct LogFlags {
    /// Log lines on stderr: text (colour only on a terminal) or json (one object a line).
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) log_format: LogFormatFlag,
    /// Log filter in RUST_LOG syntax, e.g. debug or tidemark::legacy=debug,info (default:
    /// RUST_LOG, else info). Applied again on SIGHUP.
    #[arg(long)]
    pub(crate) log_level: Option<String>,
    /// Lines one kind of log event may write per second; the rest become one "N more
    /// suppressed" line.
    #[arg(long, default_value_t = LOG_EVENTS_PER_KIND_PER_SEC)]
    pub(crate) log_events_per_kind_per_sec: u32,
    /// Interval of the info-level count of refusals (each refusal is a debug line).
    #[arg(long, default_value_t = LOG_REFUSAL_SUMMARY_SECS)]
    pub(crate) log_refusal_summary_secs: u64,
    /// Write the audit trail to this file (or - for stdout): one JSON line per tools/call,
    /// resources/read and prompts/get, written when it ends (docs/audit.md; off by default).
    /// Opened again on SIGHUP.
    #[arg(long, value_name = "FILE|-")]
    pub(crate) audit_log: Option<String>,
    /// Bytes an audit file may reach; the line that would pass it starts a new file.
    #[arg(long, default_value_t = AUDIT_LOG_MAX_BYTES)]
    pub(crate) audit_log_max_bytes: u64,
    /// Rotated audit files kept (FILE.1 newest … FILE.K), at most 1000; 0 keeps none.
    #[arg(long, default_value_t = AUDIT_LOG_KEEP)]
    pub(crate) audit_log_keep: u32,
    /// Audit lines queued for the writer (all cores); past it lines are dropped and counted
    /// (tidemark_audit_lines_dropped_total and an audit_dropped line in the file).
    #[arg(long, default_value_t = AUDIT_QUEUE_LINES)]
    pub(crate) audit_queue_lines: usize,
}
