//! The modern section: the 2026-07-28 path's caching hint, MRTR `requestState` (its lifetime
//! and sealing key), Idempotency-Key records, keyed calls, server→client requests and tasks;
//! their limits, defaults, validation and flags.
//!
//! Owns: `ModernConfig`, `KeyMaterial`, the limits, and their flags. Never: reads the key
//! file (`cli` does) or installs the key (`server` does, at start).

use std::sync::Arc;
use std::time::Duration;

use super::error::{nonzero, ConfigError};

/// The `ttlMs` caching hint of 2026-07-28 list and read results (`--cache-ttl-ms`). 0: a
/// client should re-fetch whenever it needs the list (lists may change; a client learns of
/// changes through `subscriptions/listen`). Raise it when the tool set is static.
pub(crate) const CACHE_TTL_MS: u64 = 0;
/// How long an MRTR `requestState` is accepted after it was issued
/// (`--request-state-ttl-secs`): the time a user has to answer an elicitation.
pub(crate) const REQUEST_STATE_TTL_SECS: u64 = 600;
/// 2026-07-28 Idempotency-Key records kept per core (`--max-idempotency-keys-per-core`); the
/// oldest finished one is forgotten first, a running one never.
pub(crate) const IDEMPOTENCY_KEYS_PER_CORE_MAX: usize = 4096;
/// Bytes the 2026-07-28 Idempotency-Key records of one core hold: recorded notifications and
/// final answers (`--idempotency-bytes-per-core`). At it, finished records go oldest first; a
/// running call's further notifications are dropped (counted), a new keyed call is refused
/// (503, `Retry-After`), and a final answer that alone does not fit is delivered to the clients
/// reading it but not kept for retries (they get -32603 naming this flag; the tool never runs
/// twice). 64 MiB, as `TASK_BYTES_PER_CORE`: 4096 answers of 16 KiB.
pub(crate) const IDEMPOTENCY_BYTES_PER_CORE: usize = 64 * 1024 * 1024;
/// Keyed calls one client may have running at once on one core
/// (`--max-running-keyed-calls-per-client`). A client is its connection's peer address
/// (behind a balancer: the balancer's, until authorization names subjects). A sixteenth of
/// `IDEMPOTENCY_KEYS_PER_CORE_MAX`, so one client's calls that never finish cannot fill the
/// table: past its share it gets 429 + `Retry-After`, the others still run.
pub(crate) const KEYED_CALLS_RUNNING_PER_CLIENT_MAX: usize = 256;
/// How long a keyed call may run (`--keyed-call-max-secs`). It runs detached from every
/// connection, so nothing else stops a tool that never returns; past this it is cancelled and
/// its record answers -32603 naming the flag (finished, so evictable). Ten minutes: longer than
/// any interactive tool call, as long as `REQUEST_STATE_TTL_SECS`.
pub(crate) const KEYED_CALL_MAX_SECS: u64 = 600;
/// Server→client requests (sampling, elicitation, roots) outstanding at once in one legacy
/// session, or in one round of a 2026-07-28 call (`--max-pending-client-requests`); a tool's
/// next one fails with -32603 naming the flag. Each waits for a client that may never answer,
/// so a tool (or an upstream relaying requests) could otherwise grow the table without end.
pub(crate) const CLIENT_REQUESTS_PENDING_MAX: usize = 64;
/// Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) one core holds, running or finished and
/// retained (`--max-tasks-per-core`). Over it, a call that would become a task goes on
/// synchronously (the client gets its result on the request's own stream). 4096: far more than
/// the concurrent long-running calls a core serves; `TASK_BYTES_PER_CORE` bounds their results.
pub(crate) const TASKS_PER_CORE_MAX: usize = 4096;
/// How long a task is kept after its creation (`--task-retention-secs`), announced as its
/// `ttlMs`: SEP-2663 forbids dropping it earlier, so a full store refuses new tasks rather than
/// evicting. One hour: a client can come back for a result after a reconnect or a restart of
/// its own. After it: `tasks/*` get -32602, and a tool still running is cancelled.
pub(crate) const TASK_RETENTION_SECS: u64 = 3600;
/// Result and error bytes (serialized JSON) the tasks of one core hold
/// (`--task-bytes-per-core`). A result that does not fit fails its task with -32603 naming the
/// flag. 64 MiB: 4096 results of 16 KiB.
pub(crate) const TASK_BYTES_PER_CORE: usize = 64 * 1024 * 1024;
/// Input requests one task may have outstanding at once (`--max-task-input-requests`): a tool's
/// next one fails (an elicitation fan-out wider than this is a bug).
pub(crate) const TASK_INPUT_REQUESTS_MAX: usize = 16;
/// `pollIntervalMs` suggested to clients polling `tasks/get` (`--task-poll-interval-ms`).
pub(crate) const TASK_POLL_INTERVAL_MS: u64 = 500;

/// Bytes of the `--request-state-key-file`; larger is refused at start. Its bytes are hashed
/// into the 32-byte key, so more than this adds nothing but reading. No flag.
pub(crate) const REQUEST_STATE_KEY_FILE_BYTES_MAX: u64 = 64 * 1024;

const _: () = assert!(TASKS_PER_CORE_MAX > 0 && TASK_BYTES_PER_CORE > 0);
const _: () = assert!(IDEMPOTENCY_BYTES_PER_CORE > 0 && KEYED_CALL_MAX_SECS > 0);
const _: () = assert!(CLIENT_REQUESTS_PENDING_MAX > 0);
const _: () = assert!(KEYED_CALLS_RUNNING_PER_CLIENT_MAX < IDEMPOTENCY_KEYS_PER_CORE_MAX);
const _: () = assert!(TASK_INPUT_REQUESTS_MAX > 0 && TASK_POLL_INTERVAL_MS > 0);
const _: () = assert!(TASK_POLL_INTERVAL_MS < TASK_RETENTION_SECS * 1000);

/// The 2026-07-28 (stateless) path's settings and bounds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ModernConfig {
    /// `--cache-ttl-ms` (`CACHE_TTL_MS`).
    pub cache_ttl_ms: u64,
    /// `--request-state-ttl-secs` (`REQUEST_STATE_TTL_SECS`).
    pub state_ttl: Duration,
    /// `--max-idempotency-keys-per-core` (`IDEMPOTENCY_KEYS_PER_CORE_MAX`).
    pub idempotency_keys_per_core_max: usize,
    /// `--idempotency-bytes-per-core` (`IDEMPOTENCY_BYTES_PER_CORE`).
    pub idempotency_bytes_per_core: usize,
    /// `--max-pending-client-requests` (`CLIENT_REQUESTS_PENDING_MAX`).
    pub client_requests_pending_max: usize,
    /// `--max-running-keyed-calls-per-client` (`KEYED_CALLS_RUNNING_PER_CLIENT_MAX`).
    pub keyed_calls_running_per_client_max: usize,
    /// `--keyed-call-max-secs` (`KEYED_CALL_MAX_SECS`).
    pub keyed_call_max: Duration,
    /// `--max-tasks-per-core` (`TASKS_PER_CORE_MAX`).
    pub tasks_per_core_max: usize,
    /// `--task-retention-secs` (`TASK_RETENTION_SECS`).
    pub task_retention: Duration,
    /// `--task-bytes-per-core` (`TASK_BYTES_PER_CORE`).
    pub task_bytes_per_core: usize,
    /// `--max-task-input-requests` (`TASK_INPUT_REQUESTS_MAX`).
    pub task_input_requests_max: usize,
    /// `--task-poll-interval-ms` (`TASK_POLL_INTERVAL_MS`).
    pub task_poll_interval: Duration,
    /// The key material that seals MRTR `requestState` (`--request-state-key-file`'s bytes,
    /// hashed to the key), installed by `Server` at start; `None`: a random key per process.
    /// Give every node of a cluster the same material so any node accepts the state.
    pub state_key: Option<KeyMaterial>,
}

impl Default for ModernConfig {
    fn default() -> Self {
        ModernConfig {
            cache_ttl_ms: CACHE_TTL_MS,
            state_ttl: Duration::from_secs(REQUEST_STATE_TTL_SECS),
            idempotency_keys_per_core_max: IDEMPOTENCY_KEYS_PER_CORE_MAX,
            idempotency_bytes_per_core: IDEMPOTENCY_BYTES_PER_CORE,
            client_requests_pending_max: CLIENT_REQUESTS_PENDING_MAX,
            keyed_calls_running_per_client_max: KEYED_CALLS_RUNNING_PER_CLIENT_MAX,
            keyed_call_max: Duration::from_secs(KEYED_CALL_MAX_SECS),
            tasks_per_core_max: TASKS_PER_CORE_MAX,
            task_retention: Duration::from_secs(TASK_RETENTION_SECS),
            task_bytes_per_core: TASK_BYTES_PER_CORE,
            task_input_requests_max: TASK_INPUT_REQUESTS_MAX,
            task_poll_interval: Duration::from_millis(TASK_POLL_INTERVAL_MS),
            state_key: None,
        }
    }
}

impl ModernConfig {
    /// The section of the parsed flags, with the key material `cli` read from
    /// `--request-state-key-file`.
    pub(crate) fn from_flags(flags: ModernFlags, key: Option<KeyMaterial>) -> ModernConfig {
        ModernConfig {
            cache_ttl_ms: flags.cache_ttl_ms,
            state_ttl: Duration::from_secs(flags.request_state_ttl_secs),
            idempotency_keys_per_core_max: flags.max_idempotency_keys_per_core,
            idempotency_bytes_per_core: flags.idempotency_bytes_per_core,
            client_requests_pending_max: flags.max_pending_client_requests,
            keyed_calls_running_per_client_max: flags.max_running_keyed_calls_per_client,
            keyed_call_max: Duration::from_secs(flags.keyed_call_max_secs),
            tasks_per_core_max: flags.max_tasks_per_core,
            task_retention: Duration::from_secs(flags.task_retention_secs),
            task_bytes_per_core: flags.task_bytes_per_core,
            task_input_requests_max: flags.max_task_input_requests,
            task_poll_interval: Duration::from_millis(flags.task_poll_interval_ms),
            state_key: key,
        }
    }

    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("request-state-ttl-secs", self.state_ttl.as_millis()),
            ("max-idempotency-keys-per-core", self.idempotency_keys_per_core_max as u128),
            ("idempotency-bytes-per-core", self.idempotency_bytes_per_core as u128),
            ("max-running-keyed-calls-per-client", self.keyed_calls_running_per_client_max as u128),
            ("keyed-call-max-secs", self.keyed_call_max.as_millis()),
            ("max-pending-client-requests", self.client_requests_pending_max as u128),
            ("max-tasks-per-core", self.tasks_per_core_max as u128),
            ("task-retention-secs", self.task_retention.as_millis()),
            ("task-bytes-per-core", self.task_bytes_per_core as u128),
            ("max-task-input-requests", self.task_input_requests_max as u128),
            ("task-poll-interval-ms", self.task_poll_interval.as_millis()),
        ])
    }
}

/// Key material for sealing MRTR `requestState`: any bytes, hashed to the key. `Debug` shows
/// only its length (it is a secret).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial(Arc<[u8]>);

impl KeyMaterial {
    /// Key material of these bytes.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> KeyMaterial {
        KeyMaterial(bytes.into())
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyMaterial({} bytes)", self.0.len())
    }
}

/// The command line's flags of this section: the 2026-07-28 path's. `cli` flattens them into its
/// `Flags` in `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct ModernFlags {
    /// The `ttlMs` caching hint on 2026-07-28 list and read results (0: re-fetch when needed).
    #[arg(long, default_value_t = CACHE_TTL_MS)]
    pub(crate) cache_ttl_ms: u64,
    /// How long a 2026-07-28 MRTR `requestState` is accepted after it was issued.
    #[arg(long, default_value_t = REQUEST_STATE_TTL_SECS)]
    pub(crate) request_state_ttl_secs: u64,
    /// A file whose bytes key the HMAC that seals `requestState` (default: a random key per
    /// process). Give every node of a cluster the same file so any node accepts the state.
    #[arg(long)]
    pub(crate) request_state_key_file: Option<std::path::PathBuf>,
    /// 2026-07-28 Idempotency-Key records kept per core.
    #[arg(long, default_value_t = IDEMPOTENCY_KEYS_PER_CORE_MAX)]
    pub(crate) max_idempotency_keys_per_core: usize,
    /// Bytes of recorded notifications and final answers the Idempotency-Key records of one
    /// core hold; finished records go oldest first, then new keyed calls get 503.
    #[arg(long, default_value_t = IDEMPOTENCY_BYTES_PER_CORE)]
    pub(crate) idempotency_bytes_per_core: usize,
    /// Keyed calls one client (its connection's peer address) may have running on one core;
    /// past it 429 + Retry-After.
    #[arg(long, default_value_t = KEYED_CALLS_RUNNING_PER_CLIENT_MAX)]
    pub(crate) max_running_keyed_calls_per_client: usize,
    /// Server→client requests (sampling, elicitation, roots) one legacy session, or one round
    /// of a 2026-07-28 call, has outstanding; a tool's next one fails with -32603.
    #[arg(long, default_value_t = CLIENT_REQUESTS_PENDING_MAX)]
    pub(crate) max_pending_client_requests: usize,
    /// How long a keyed call (Idempotency-Key) may run before it is cancelled and answers -32603.
    #[arg(long, default_value_t = KEYED_CALL_MAX_SECS)]
    pub(crate) keyed_call_max_secs: u64,
    /// Tasks (2026-07-28 tasks extension) one core holds, running or retained; beyond it a call
    /// that would become a task runs synchronously.
    #[arg(long, default_value_t = TASKS_PER_CORE_MAX)]
    pub(crate) max_tasks_per_core: usize,
    /// How long a task is kept after its creation (its `ttlMs`).
    #[arg(long, default_value_t = TASK_RETENTION_SECS)]
    pub(crate) task_retention_secs: u64,
    /// Bytes of task results and errors one core holds; a result that does not fit fails its
    /// task.
    #[arg(long, default_value_t = TASK_BYTES_PER_CORE)]
    pub(crate) task_bytes_per_core: usize,
    /// Input requests one task may have outstanding at once.
    #[arg(long, default_value_t = TASK_INPUT_REQUESTS_MAX)]
    pub(crate) max_task_input_requests: usize,
    /// The `pollIntervalMs` suggested to clients polling `tasks/get`.
    #[arg(long, default_value_t = TASK_POLL_INTERVAL_MS)]
    pub(crate) task_poll_interval_ms: u64,
}
