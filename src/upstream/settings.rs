//! The bridge's flags (`--upstream-*`), read once from `Config` and shared by every core's
//! bridges and their transports (`stdio`, `http`). Never: changes after start-up.

use std::sync::Arc;
use std::time::Duration;

use super::credentials::CredentialTable;
use crate::config::{Isolation, NameFilter};

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
    /// Each upstream's tool filter (index: the `--upstream` flags' order).
    pub(crate) tool_filters: Vec<Arc<NameFilter>>,
}

impl Settings {
    /// The tool filter of the `index`-th upstream (open when there is none).
    pub(crate) fn tool_filter(&self, index: usize) -> Arc<NameFilter> {
        self.tool_filters.get(index).cloned().unwrap_or_default()
    }
}
