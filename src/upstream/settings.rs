//! The bridge's flags (`--upstream-*`), read once from `Config` and shared by every core's
//! bridges and their transports (`stdio`, `http`). Never: changes after start-up.

use std::sync::Arc;
use std::time::Duration;

use super::credentials::CredentialTable;
use crate::config::{Isolation, UpstreamFilters};

/// The bridge flags, shared by every core.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) env: Vec<(String, String)>,
    pub(crate) isolation: Isolation,
    pub(crate) max_processes: usize,
    pub(crate) timeout: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) line_bytes: usize,
    pub(crate) queue_bytes: usize,
    pub(crate) kill_grace: Duration,
    /// `--upstream-credentials` and `--upstream-forward-authorization`, read at start-up.
    pub(crate) credentials: CredentialTable,
    /// Each upstream's tool, prompt and resource filters (index: the `--upstream` flags' order).
    pub(crate) filters: Vec<Arc<UpstreamFilters>>,
}

impl Settings {
    /// The filters of the `index`-th upstream (open when there are none).
    pub(crate) fn filters(&self, index: usize) -> Arc<UpstreamFilters> {
        self.filters.get(index).cloned().unwrap_or_default()
    }
}
