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
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: None,
            events_per_kind_per_sec: LOG_EVENTS_PER_KIND_PER_SEC,
            refusal_summary: Duration::from_secs(LOG_REFUSAL_SUMMARY_SECS),
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
        }
    }
}

impl LogConfig {
    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("log-events-per-kind-per-sec", u128::from(self.events_per_kind_per_sec)),
            ("log-refusal-summary-secs", self.refusal_summary.as_millis()),
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
}
