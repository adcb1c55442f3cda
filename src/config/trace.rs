//! The trace section: OpenTelemetry export (`--otlp-*`): where spans go, which traces are
//! recorded, and the bounds of the per-core queues and export batches; its limits, defaults,
//! validation and flags.
//!
//! Owns: `TraceConfig`, the exporter's limits, and their flags. Never: records a span.

use super::error::{nonzero, ConfigError};

/// Finished spans one core holds for the exporter (`--otlp-queue-spans`): a span that finds its
/// core's queue full is dropped and counted (`tidemark_trace_spans_dropped_total`), never
/// waited for. 4096 spans (each at most a few `ATTRIBUTE_VALUE_BYTES_MAX` values, ~2 KiB)
/// ride out a collector's pause of a second or more at thousands of requests per second.
pub(crate) const OTLP_QUEUE_SPANS: usize = 4096;

/// Spans in one OTLP export request (`--otlp-batch-spans`); the exporter sends full batches
/// at once and a partial one every `OTLP_EXPORT_INTERVAL_MS`. 512 is the OpenTelemetry SDKs'
/// default batch size.
pub(crate) const OTLP_BATCH_SPANS: usize = 512;

/// Share of new traces (requests without a client `traceparent`) that are recorded
/// (`--otlp-sample-ratio`, 0..=1). A request with a `traceparent` follows its sampled flag.
pub(crate) const OTLP_SAMPLE_RATIO: f64 = 1.0;

/// How often the exporter sends a partial batch, in ms (the OpenTelemetry SDKs wait 5 s; a
/// shorter wait keeps queues short and traces prompt, at one POST per interval at most).
pub(crate) const OTLP_EXPORT_INTERVAL_MS: u64 = 200;

/// Longest OTLP export request, in seconds; a collector slower than that loses the batch.
pub(crate) const OTLP_EXPORT_TIMEOUT_SECS: u64 = 5;

/// Longest span attribute value (a tool name, session or request id, an error), in bytes;
/// longer values are cut there, so a peer's header or id cannot grow a queued span.
pub(crate) const ATTRIBUTE_VALUE_BYTES_MAX: usize = 256;

/// OpenTelemetry traces (`--otlp-*`): off unless `endpoint` is set.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TraceConfig {
    /// OTLP/HTTP traces endpoint (`--otlp-endpoint`, e.g. `http://127.0.0.1:4318/v1/traces`):
    /// `None` (the default) turns tracing off.
    pub endpoint: Option<String>,
    /// `--otlp-sample-ratio` (`OTLP_SAMPLE_RATIO`).
    pub sample_ratio: f64,
    /// `--otlp-queue-spans` (`OTLP_QUEUE_SPANS`), per core.
    pub queue_spans: usize,
    /// `--otlp-batch-spans` (`OTLP_BATCH_SPANS`).
    pub batch_spans: usize,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            endpoint: None,
            sample_ratio: OTLP_SAMPLE_RATIO,
            queue_spans: OTLP_QUEUE_SPANS,
            batch_spans: OTLP_BATCH_SPANS,
        }
    }
}

impl From<TraceFlags> for TraceConfig {
    fn from(flags: TraceFlags) -> TraceConfig {
        TraceConfig {
            endpoint: flags.otlp_endpoint,
            sample_ratio: flags.otlp_sample_ratio,
            queue_spans: flags.otlp_queue_spans,
            batch_spans: flags.otlp_batch_spans,
        }
    }
}

impl TraceConfig {
    /// The tracing flags: an http(s) endpoint, a ratio within 0..=1, nonzero sizes.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.endpoint {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::BadOtlpEndpoint(url.clone()));
            }
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(ConfigError::BadSampleRatio);
        }
        nonzero(&[
            ("otlp-queue-spans", self.queue_spans as u128),
            ("otlp-batch-spans", self.batch_spans as u128),
        ])
    }
}

/// The command line's flags of this section: `--otlp-*`. `cli` flattens them into its `Flags` in
/// `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct TraceFlags {
    /// Export OpenTelemetry traces (OTLP/HTTP JSON) to this URL, e.g.
    /// http://127.0.0.1:4318/v1/traces: a SERVER span per request, a CLIENT span per upstream
    /// call (off by default).
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Share of new traces recorded, 0..=1 (a request with a traceparent follows its sampled
    /// flag).
    #[arg(long, default_value_t = OTLP_SAMPLE_RATIO)]
    pub(crate) otlp_sample_ratio: f64,
    /// Finished spans each core holds for the exporter; past it spans are dropped and counted
    /// (tidemark_trace_spans_dropped_total).
    #[arg(long, default_value_t = OTLP_QUEUE_SPANS)]
    pub(crate) otlp_queue_spans: usize,
    /// Spans in one OTLP export request.
    #[arg(long, default_value_t = OTLP_BATCH_SPANS)]
    pub(crate) otlp_batch_spans: usize,
}
