//! The bridge's flags (`--upstream-*`), read once from `Config` and shared by every core's
//! bridges and their transports (`stdio`, `http`). Never: changes once made (an upstream
//! reload makes a new one for the bridges it builds; the others keep theirs).

use std::sync::Arc;
use std::time::Duration;

use super::credentials::CredentialTable;
use crate::config::{Isolation, UpstreamFilters, UpstreamPolicy, UpstreamProtocol};

/// The bridge flags, shared by every core.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) env: Vec<(String, String)>,
    pub(crate) isolation: Isolation,
    pub(crate) max_processes: usize,
    /// `--upstream-timeout-secs`: one request; a tool call's idle timeout (`peer`).
    pub(crate) timeout: Duration,
    /// `--upstream-call-max-secs`: one whole tool call.
    pub(crate) call_max: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) line_bytes: usize,
    /// `--upstream-catalog-bytes-per-core`: distinct tool listings held per core (`catalog`).
    pub(crate) catalog_bytes: usize,
    pub(crate) queue_bytes: usize,
    pub(crate) kill_grace: Duration,
    /// `--upstream-credentials` and `--upstream-forward-authorization`, read at start-up.
    pub(crate) credentials: CredentialTable,
    /// Each upstream's tool, prompt and resource filters (index: the `--upstream` flags' order).
    pub(crate) filters: Vec<Arc<UpstreamFilters>>,
    /// Each upstream's `--upstream-policy` (index: the `--upstream` flags' order).
    pub(crate) policies: Vec<UpstreamPolicy>,
    /// Each upstream's `--upstream-protocol` (index: the `--upstream` flags' order).
    pub(crate) protocols: Vec<UpstreamProtocol>,
    /// `--upstream-breaker-failures`: consecutive failed calls that open a breaker.
    pub(crate) breaker_failures: u32,
    /// `--upstream-input-rounds-max`: input rounds of one call of a 2026-07-28 upstream.
    pub(crate) input_rounds_max: usize,
    /// `--upstream-breaker-pause-ms`: an open breaker's pause; an optional upstream's retry.
    pub(crate) breaker_pause: Duration,
    /// `--resource-uri-bytes-max`: the longest resource URI a client may name.
    pub(crate) resource_uri_bytes_max: usize,
}

impl Settings {
    /// The filters of the `index`-th upstream (open when there are none).
    pub(crate) fn filters(&self, index: usize) -> Arc<UpstreamFilters> {
        self.filters.get(index).cloned().unwrap_or_default()
    }

    /// The policy of the `index`-th upstream (`required` when none is given).
    pub(crate) fn policy(&self, index: usize) -> UpstreamPolicy {
        self.policies.get(index).copied().unwrap_or_default()
    }

    /// The era of the `index`-th upstream (`auto` when none is given).
    pub(crate) fn protocol(&self, index: usize) -> UpstreamProtocol {
        self.protocols.get(index).copied().unwrap_or_default()
    }

    /// The `Retry-After` of a 503 for a required upstream that is down: the breaker's pause
    /// (when an optional one would be tried again), in whole seconds rounded up, at least 1.
    pub(crate) fn down_retry_after_secs(&self) -> u64 {
        self.breaker_pause.as_millis().div_ceil(1000).max(1) as u64
    }
}
