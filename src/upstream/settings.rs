//! The bridge's flags (`--upstream-*`), read once from `Config` and shared by every core's
//! bridges and their transports (`stdio`, `http`). Never: changes after start-up.

use std::time::Duration;

use super::credentials::CredentialTable;
use crate::config::Isolation;

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
}
