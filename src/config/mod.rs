//! Every limit and tunable of the server: each bound is a documented `pub const` with a long
//! flag in `cli.rs`, and `Config` carries the values checked once at start-up.
//!
//! Owns: the defaults, the relations between limits (checked at compile time), and
//! `Config::validate`. Never: reads the environment or touches I/O.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod auth;
pub(crate) use auth::jwks_sources;
pub use auth::AuthConfig;
pub use auth::JwksSourceError;
pub(crate) use auth::{AUTH_CACHE_SECS, AUTH_CACHE_SECS_MAX};
pub(crate) use auth::{AUTH_FILE_BYTES_MAX, AUTH_POLICY_RULES_MAX, AUTH_TOKENS_MAX};
mod durable;
pub use durable::{DurableConfig, DurableUrl, DurableUrlError};
pub(crate) use durable::{
    DURABLE_ADOPTIONS_MAX, DURABLE_BATCH_BYTES, DURABLE_BATCH_RECORDS, DURABLE_LEASE_MS,
    DURABLE_LEASE_MS_MIN, DURABLE_LINGER_US, DURABLE_LINGER_US_MAX, DURABLE_QUEUE_BYTES,
    DURABLE_QUEUE_RECORDS, DURABLE_WRITE_AHEAD_MS,
};
mod rate;
pub use rate::{RateLimit, RateLimitError, RateScope};
pub(crate) use rate::{
    RATE_BUCKETS_PER_CORE_MAX, RATE_BUCKETS_PER_CORE_MIN, RATE_IPV6_PREFIX_DEFAULT,
};
mod filter;
pub(crate) use filter::glob_matches;
pub use filter::FilterError;
pub(crate) use filter::UpstreamFilters;
pub(crate) use filter::{RESOURCE_URI_BYTES_MAX, UPSTREAM_FILTER_GLOBS_MAX};
mod upstream;
#[cfg(test)]
pub(crate) use upstream::UPSTREAM_NAME_BYTES_MAX;
pub use upstream::{
    Isolation, UpstreamPolicy, UpstreamProtocol, UpstreamSpec, UpstreamSpecError, UpstreamTarget,
};
pub(crate) use upstream::{PrefixPolicy, TOOL_NAME_BYTES_MAX};

/// Default listen address: loopback, so DNS-rebinding protection is on (MCP 2025-11-25
/// transports §security: servers SHOULD bind to localhost when local).
pub(crate) const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// Default MCP endpoint path.
pub(crate) const PATH_DEFAULT: &str = "/mcp";

/// Hard cap of header lines the request-head parser gets room for; `--max-headers` may only
/// lower it.
pub(crate) const HEADERS_CAP: usize = 128;

/// The smallest window of a large event one stream batch carries, and so the smallest write
/// buffer (`--write-buffer-bytes`): a batch always makes this much progress.
pub(crate) const WINDOW_BYTES_MIN: usize = 4096;

/// Bytes of one request head (request line + headers). Over it: 431, connection closed.
pub(crate) const HEADER_BYTES_MAX: usize = 16 * 1024;
/// Header lines in one request. Over it: 431, connection closed.
pub(crate) const HEADERS_MAX: usize = 64;
/// Bytes of one POST body. Over it: 413 with a JSON-RPC error; the connection is closed
/// after the answer so the unread body never reaches the parser.
pub(crate) const BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Nesting depth of a JSON body. Deeper: 400, -32700 (a parser stack bomb is the peer's fault).
pub(crate) const JSON_DEPTH_MAX: usize = 64;
/// Time to receive a whole request head once its first byte arrived. Over it: 408, closed.
pub(crate) const HEADER_TIMEOUT_MS: u64 = 10_000;
/// Time an idle keep-alive connection is kept between requests. Over it: closed silently.
pub(crate) const IDLE_TIMEOUT_SECS: u64 = 60;
/// Open connections on one core. Over it: new connections get 503 and are closed.
pub(crate) const CONNECTIONS_PER_CORE_MAX: usize = 16 * 1024;
/// Live sessions on one core. Over it: `initialize` gets 503 with -32603.
pub(crate) const SESSIONS_PER_CORE_MAX: usize = 100_000;
/// Request streams retained per session (running, owed or completed-and-retained). Over it,
/// when none can be evicted: 429 with -32603.
pub(crate) const STREAMS_PER_SESSION_MAX: usize = 256;
/// Events held per session ring (power of two: slot = seq & mask).
pub(crate) const REPLAY_EVENTS_MAX: usize = 4096;
/// Payload bytes held per session ring.
pub(crate) const REPLAY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The part of a session ring (1/N of `--replay-events` and of `--replay-bytes`) that the
/// events of its attached streams not yet written may fill before tidemark stops reading the
/// upstreams of their running calls (backpressure, CONTRACT §3) until a writer has sent some.
/// Half: a producer is checked once per upstream message, so each overshoots by at most one
/// message, and the other half is room for what producers that do not wait (built-in tools,
/// streams whose client is gone) add meanwhile; only more than that from them makes the
/// oldest-first eviction reach an attached stream's unwritten events. A 2026-07-28 call's pending notifications pause at the
/// same share of `--replay-bytes`, and past the whole of it are dropped (counted).
pub(crate) const UNWRITTEN_SHARE_DIVISOR: usize = 2;
/// How long a completed, delivered request stream stays resumable and deduplicable.
pub(crate) const STREAM_RETENTION_SECS: u64 = 300;
/// Idle time after which a session expires (then 404).
pub(crate) const SESSION_IDLE_SECS: u64 = 600;
/// Per session and kind (tools, prompts, resources), at most one `…/list_changed` notification
/// is sent per this many milliseconds (`--list-changed-min-ms`); one that arrives inside the
/// window goes out once at its end, standing for all of them. 250 ms: a human sees no lag, and
/// an upstream flooding 2000 a second costs each client 4 a second (and 4 re-lists), not 2000.
pub(crate) const LIST_CHANGED_MIN_MS: u64 = 250;
/// `retry:` field of every priming event (SEP-1699), in milliseconds.
pub(crate) const SSE_RETRY_MS: u64 = 1000;
/// Keep-alive comment interval on an SSE connection; a dead peer shows up as a failed write.
pub(crate) const SSE_KEEPALIVE_SECS: u64 = 15;
/// How long a POST is held while the session owes a stream before 409 -31004.
pub(crate) const OWED_WAIT_MS: u64 = 2000;
/// How long an owed stream waits for a resume before it is abandoned (counted).
pub(crate) const OWED_TIMEOUT_SECS: u64 = 60;
/// Connections queued in one core's hand-off inbox. Full: the sender answers 503.
pub(crate) const HANDOFF_INBOX_MAX: usize = 1024;
/// This node's id when `--node-id` is not given: a single node needs no other.
pub(crate) const NODE_ID_DEFAULT: u8 = 0;
/// The largest `--node-id`: session and task ids carry the owner node in 8 bits, as their first
/// two hex digits (the prefix a balancer routes on), so a cluster has at most 256 nodes.
pub(crate) const NODE_ID_MAX: u8 = u8::MAX;
/// Cores the server may run on; session ids carry the owner core in 16 bits.
pub(crate) const THREADS_MAX: usize = 1024;
/// Longest graceful drain after SIGTERM/SIGINT (or `Running::shutdown`): running calls get this
/// long to finish and deliver their results while no new connection or session is accepted.
/// 30 s is the usual grace period of process supervisors (Kubernetes'
/// `terminationGracePeriodSeconds`, systemd's `TimeoutStopSec` is 90 s), so a call shorter than
/// that survives a rolling restart. Over it: open SSE streams end with the chunked response's
/// last chunk (no result: the client sees a clean end and may retry elsewhere), and the process
/// exits 0.
pub(crate) const DRAIN_SECS: u64 = 30;
/// Bytes of SSE frames one connection buffers for one send (`--write-buffer-bytes`): a batch of
/// events, or one window of an event larger than this (written in windows across sends). With
/// the ring, it bounds what a session's slow reader can make the server hold: `--replay-bytes`
/// plus this per connection (issue 11 §2). 256 KiB coalesces thousands of small events per send
/// (runtime-notes §4: one chunk per flush is 40× cheaper than one per event).
pub(crate) const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// POSTs one session may have held at the migration boundary at once (CONTRACT §4 step 4,
/// `--max-held-per-session`). Each keeps its request in memory until it runs, so this bounds
/// that memory by this × `--max-body-bytes`; one more gets 409 -31004 at once (resume first).
/// 16: far more than a client has in flight while it ought to be resuming.
pub(crate) const HELD_PER_SESSION_MAX: usize = 16;
/// Replay-ring bytes all sessions of one core may hold together (`--core-buffer-bytes`). Over
/// it, new request streams are refused with 503 (`Retry-After`) rather than growing; running
/// streams go on (each ring stays within `--replay-bytes`). 1 GiB: 256 sessions with full 4 MiB
/// rings per core.
pub(crate) const CORE_BUFFER_BYTES: usize = 1024 * 1024 * 1024;
/// How long the end of a drain waits for connections to take their last bytes (an SSE stream's
/// last chunk, an answer being written) before the process exits regardless. One second covers
/// a slow reader on a loopback or LAN link; a peer that reads nothing is cut then.
pub(crate) const DRAIN_FLUSH_MS: u64 = 1000;
/// The kernel's accept queue of each core's listener (`listen(2)` backlog; the kernel caps it
/// at `net.core.somaxconn`). Connections beyond it wait in SYN retries; the drain takes at
/// most this many from the queue before closing the listener.
pub(crate) const LISTEN_BACKLOG: usize = 1024;
/// `Retry-After` of the 503 a new `initialize` gets during a drain, in seconds: by then a
/// restarted process or another replica answers.
pub(crate) const DRAIN_RETRY_AFTER_SECS: u64 = 1;
/// Concurrent connections on the admin listener (`--metrics-listen`), one thread each. Scrapers
/// and probes hold one or two; 64 leaves room for several of each and bounds the threads an
/// abuser can make us hold. Over it: 503, closed.
pub(crate) const ADMIN_CONNECTIONS_MAX: usize = 64;
/// Time an admin connection has to deliver its request head, and each write to be taken. Over
/// it: closed (an idle connection holds a thread this long at most).
pub(crate) const ADMIN_IO_TIMEOUT_MS: u64 = 2000;
/// Bytes of an admin request head. Over it: 431, closed.
pub(crate) const ADMIN_HEAD_BYTES_MAX: usize = 4096;
/// `Access-Control-Max-Age` of a CORS preflight answer (`endpoint::cors`), in seconds: how long
/// a browser may reuse it before asking again. 7200 is Chromium's own cap (Firefox caps at one
/// day); a longer value would buy nothing there. No flag: it bounds no resource of ours, and a
/// restart that drops an origin is still enforced at once (the cached preflight does not make
/// the actual request's answer readable: that answer carries no `Access-Control-Allow-Origin`).
pub(crate) const CORS_MAX_AGE_SECS: u64 = 7200;
/// `Mcp-Param-*` header names (MCP 2026-07-28 `x-mcp-header`) one CORS preflight answer echoes
/// by name in `Access-Control-Allow-Headers` (`*` would cover neither `Authorization` nor any
/// header of a credentialed request). Past it the rest are left out, the browser refuses that
/// one request, and `tidemark_cors_headers_left_out_total` counts them. 32: more than the
/// header parameters a tool declares. No flag: `--max-header-bytes` already bounds the work.
pub(crate) const CORS_PARAM_HEADERS_MAX: usize = 32;
/// Upstream child processes (`--upstream` over stdio) alive at once, all cores together
/// (`--upstream-max-processes`); `initialize` of a session that would need one more gets 503.
pub(crate) const UPSTREAM_PROCESSES_MAX: usize = 256;
/// Longest an upstream may take to answer one request (`--upstream-timeout-secs`); then the
/// call ends with -32603 and is cancelled upstream. For a tool call it is an idle timeout: it
/// runs from the upstream's last message for the call (progress, logs, requests), and time in
/// which tidemark held the upstream back for a slow client does not count.
pub(crate) const UPSTREAM_TIMEOUT_SECS: u64 = 300;
/// Longest one upstream tool call may run however busy its upstream keeps it
/// (`--upstream-call-max-secs`); then -32603 naming the flag, and the call is cancelled
/// upstream. One hour: twelve idle timeouts, far beyond an interactive call, yet an upstream
/// stuck in a progress loop cannot hold a call (its stream, its slot) for good. Long-running
/// work belongs in tasks, whose own retention bounds them.
pub(crate) const UPSTREAM_CALL_MAX_SECS: u64 = 3600;
/// Longest an upstream may take to start and answer `initialize` and its first `tools/list`
/// (`--upstream-start-timeout-secs`): a child's start (an interpreter loading its modules) may
/// take seconds on a busy host; then the session's `initialize` gets -32603.
pub(crate) const UPSTREAM_START_TIMEOUT_SECS: u64 = 60;
/// Longest line (one JSON-RPC message) read from an upstream child's stdout
/// (`--upstream-line-bytes`); a longer line is not taken: the call it answers ends at once
/// with -32603 naming the flag (or, when its start does not say whose answer it is, the link is
/// reset and its calls end so).
pub(crate) const UPSTREAM_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of upstream tool listings one core holds (`--upstream-catalog-bytes-per-core`), as
/// their JSON size; equal listings are held once, shared by every session listed them. A
/// session whose upstream's listing would take a core past it gets `initialize` 503 +
/// `Retry-After` naming the flag. 64 MiB: four listings of the 16 MiB `--upstream-line-bytes`
/// allows, or 64 distinct 1 MiB ones (a large server's 200 tools). Held in memory a listing
/// costs several times its JSON (its parsed tools in the bridge, the sessions' shared tool
/// table and its encoded `tools/list`): the first session behind a 12.5 MB listing grew RSS by
/// about 150 MiB, parse transients included (tests/upstream_catalogs.rs), so plan for up to
/// 10× the budget per core.
pub(crate) const UPSTREAM_CATALOG_BYTES_PER_CORE: usize = 64 * 1024 * 1024;
/// Bytes queued for one upstream child's stdin (`--upstream-queue-bytes`): a child that stops
/// reading makes further requests fail rather than grow the queue.
pub(crate) const UPSTREAM_QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// From SIGTERM to SIGKILL when an upstream child is stopped (`--upstream-kill-grace-ms`).
pub(crate) const UPSTREAM_KILL_GRACE_MS: u64 = 2000;
/// Consecutive failed calls of one upstream's tools on one core that open its circuit breaker
/// (`--upstream-breaker-failures`): then its calls fail fast with -32603 naming it, without
/// reaching it, for `--upstream-breaker-pause-ms`. 5: a few timeouts or crashes in a row say
/// the upstream is down, not unlucky; fewer would open on one bad argument's crash.
pub(crate) const UPSTREAM_BREAKER_FAILURES: u32 = 5;
/// Rounds of input one tool call of a 2026-07-28 upstream may ask for (`InputRequiredResult`
/// after `InputRequiredResult`, `--upstream-input-rounds-max`) before tidemark ends the call
/// with -32603: a real tool asks a handful of questions; an upstream that keeps asking is
/// looping, and each round holds the client.
pub(crate) const UPSTREAM_INPUT_ROUNDS_MAX: usize = 16;
/// How long an open breaker fails calls fast before one half-open probe call goes through
/// (`--upstream-breaker-pause-ms`); also how often an optional upstream that was down is tried
/// again, and the `Retry-After` (rounded up to whole seconds) of a 503 for a required one.
pub(crate) const UPSTREAM_BREAKER_PAUSE_MS: u64 = 5000;

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

/// Bytes of one bearer token (JWT access token) the verifier reads (`auth::jwt`); a longer one
/// is refused as malformed before any decoding. 8 KiB: a JWT with a few dozen scopes and an
/// RSA-4096 signature is under 2 KiB; the request head's own limit (`--max-header-bytes`) is
/// larger, so this is what bounds the verifier's work. No flag: no real token comes near it.
pub(crate) const AUTH_TOKEN_BYTES_MAX: usize = 8 * 1024;
/// Clock skew allowed on a JWT's `exp` and `nbf` (`--auth-leeway-secs`). 30 s: hosts synced by
/// NTP are within a second; a token stays usable this long past its `exp` at most.
pub(crate) const AUTH_LEEWAY_SECS: u64 = 30;
/// The largest `--auth-leeway-secs` accepted: past five minutes an expired token would be
/// honoured long enough to matter.
pub(crate) const AUTH_LEEWAY_SECS_MAX: u64 = 300;
/// How often the JWK Set is read again from `--auth-jwks-url`/`--auth-jwks-file`
/// (`--auth-jwks-refresh-secs`), so a key the authorization server adds in advance of a
/// rotation is known before tokens use it.
pub(crate) const JWKS_REFRESH_SECS: u64 = 300;
/// The shortest time between two reads of the JWK Set (`--auth-jwks-min-refetch-secs`): a
/// token naming an unknown `kid` asks for a read, and a flood of such tokens makes one per
/// this interval, not one each.
pub(crate) const JWKS_MIN_REFETCH_SECS: u64 = 10;
/// Bytes of one JWK Set document (file or fetched body); larger ones are refused and the last
/// good set stays. 256 KiB: a set of `JWKS_KEYS_MAX` RSA-4096 keys is under 64 KiB.
pub(crate) const JWKS_BYTES_MAX: usize = 256 * 1024;
/// Keys of one JWK Set document; more and the document is refused (a key lookup is a hash
/// probe, but every key is parsed and held).
pub(crate) const JWKS_KEYS_MAX: usize = 64;
/// Longest one JWK Set fetch may take, connect to last byte. The refresher thread waits this
/// long at most; no worker ever waits for it.
pub(crate) const JWKS_FETCH_TIMEOUT_SECS: u64 = 10;

/// Bytes of the `--upstream-credentials` file; larger is refused at start-up (the file holds a
/// few lines per upstream).
pub(crate) const UPSTREAM_CREDENTIALS_BYTES_MAX: usize = 64 * 1024;
/// Bytes of one `--tls-cert` or `--tls-key` PEM file; larger is refused at start (and kept out
/// on a reload: the old certificate stays). 1 MiB: a chain of a leaf and two intermediates
/// with RSA-4096 keys is under 8 KiB in PEM. No flag: no certificate file comes near it.
pub(crate) const TLS_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Bytes of the `--request-state-key-file`; larger is refused at start. Its bytes are hashed
/// into the 32-byte key, so more than this adds nothing but reading. No flag.
pub(crate) const REQUEST_STATE_KEY_FILE_BYTES_MAX: u64 = 64 * 1024;

/// Log lines one kind of event (refusal, migration decision, resume, eviction, …) may write
/// per second (`--log-events-per-kind-per-sec`); the rest are counted and reported as one
/// "N more suppressed" line when the second turns, so a flood cannot fill a disk.
pub(crate) const LOG_EVENTS_PER_KIND_PER_SEC: u32 = 20;
/// How often the info summary of refusals is written (`--log-refusal-summary-secs`): each
/// refusal itself is a debug line, the summary tells an info-level log how many there were.
pub(crate) const LOG_REFUSAL_SUMMARY_SECS: u64 = 60;

const _: () = assert!(REPLAY_EVENTS_MAX.is_power_of_two());
const _: () = assert!(UNWRITTEN_SHARE_DIVISOR >= 2 && REPLAY_EVENTS_MAX >= UNWRITTEN_SHARE_DIVISOR);
const _: () = assert!(HEADER_BYTES_MAX >= 1024);
const _: () = assert!(THREADS_MAX <= u16::MAX as usize);
const _: () = assert!(OWED_WAIT_MS < OWED_TIMEOUT_SECS * 1000);
const _: () = assert!(LISTEN_BACKLOG > 0 && LISTEN_BACKLOG <= i32::MAX as usize);
const _: () = assert!(DRAIN_SECS > 0 && DRAIN_FLUSH_MS > 0 && DRAIN_RETRY_AFTER_SECS > 0);
const _: () = assert!(ADMIN_CONNECTIONS_MAX > 0 && ADMIN_IO_TIMEOUT_MS > 0);
const _: () = assert!(TASKS_PER_CORE_MAX > 0 && TASK_BYTES_PER_CORE > 0);
const _: () = assert!(IDEMPOTENCY_BYTES_PER_CORE > 0 && KEYED_CALL_MAX_SECS > 0);
const _: () = assert!(CLIENT_REQUESTS_PENDING_MAX > 0);
const _: () = assert!(AUTH_LEEWAY_SECS <= AUTH_LEEWAY_SECS_MAX && JWKS_MIN_REFETCH_SECS > 0);
const _: () = assert!(KEYED_CALLS_RUNNING_PER_CLIENT_MAX < IDEMPOTENCY_KEYS_PER_CORE_MAX);
const _: () = assert!(TASK_INPUT_REQUESTS_MAX > 0 && TASK_POLL_INTERVAL_MS > 0);
const _: () = assert!(TASK_POLL_INTERVAL_MS < TASK_RETENTION_SECS * 1000);
const _: () = assert!(CORS_MAX_AGE_SECS > 0 && CORS_PARAM_HEADERS_MAX > 0);

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

/// Which io driver a worker runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverChoice {
    /// io_uring with the best ring flags the kernel takes, else epoll.
    Auto,
    /// io_uring only (fails if the kernel refuses).
    Uring,
    /// epoll (monoio's legacy driver).
    Epoll,
}

/// How a request POST is answered (CONTRACT §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseMode {
    /// `tools/call` as SSE (it may emit progress, logs, server→client requests), the rest JSON.
    Auto,
    /// Every request as SSE.
    Sse,
    /// Every request as one JSON body.
    Json,
}

/// Whether the migration boundary (CONTRACT §4 steps 2–4) is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrationPolicy {
    /// Enforced (default).
    Strict,
    /// Skipped: what the official SDK servers do today; for comparison runs only.
    Off,
}

/// A built-in tool set (`--tools`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuiltinSet {
    /// `echo`, `slow_counter`, `get_counter`.
    Demo,
    /// The fixtures of the official MCP conformance suite.
    Conformance,
}

impl BuiltinSet {
    /// Parses the `--tools` flag: a comma list of set names (`demo`, `conformance`), whitespace
    /// around names ignored, repeats collapsed; `none` alone means no built-in set. An empty or
    /// unknown name is an operator error.
    pub fn parse_list(spec: &str) -> Result<Vec<BuiltinSet>, ConfigError> {
        if spec.trim() == "none" {
            return Ok(Vec::new());
        }
        let mut sets = Vec::new();
        for name in spec.split(',').map(str::trim) {
            let set = match name {
                "demo" => BuiltinSet::Demo,
                "conformance" => BuiltinSet::Conformance,
                other => return Err(ConfigError::UnknownToolSet(other.to_owned())),
            };
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
        Ok(sets)
    }

    /// The name `--tools` takes.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinSet::Demo => "demo",
            BuiltinSet::Conformance => "conformance",
        }
    }
}

/// The PEM files the MCP listeners' TLS is configured from (`--tls-cert`, `--tls-key`: both
/// or neither); read at start and again on SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`--tls-cert`).
    pub cert: std::path::PathBuf,
    /// The leaf's private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) (`--tls-key`).
    pub key: std::path::PathBuf,
}

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

/// Everything a worker needs to know, checked once by `validate`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Address the workers listen on (`--listen`, `LISTEN_DEFAULT`: loopback).
    pub listen: SocketAddr,
    /// The MCP endpoint path (`--path`, `PATH_DEFAULT`; starts with `/`); other paths get 404.
    pub path: String,
    /// Worker threads, one runtime pinned per core (`--threads`; at most `THREADS_MAX`).
    pub threads: usize,
    /// The io driver of every worker (`--driver`).
    pub driver: DriverChoice,
    /// How request POSTs are answered, SSE or JSON (`--response-mode`).
    pub response_mode: ResponseMode,
    /// Whether the migration boundary is enforced (`--migration-policy`).
    pub migration_policy: MigrationPolicy,
    /// Extra `Origin` values accepted besides loopback ones (exact match, e.g. `https://app`).
    pub allowed_origins: Vec<String>,
    /// Extra `Host` values accepted besides loopback ones (exact match, with port if any).
    pub allowed_hosts: Vec<String>,
    /// Bytes of one request head (`--max-header-bytes`, `HEADER_BYTES_MAX`); over it: 431, closed.
    pub header_bytes_max: usize,
    /// Header lines in one request (`--max-headers`, `HEADERS_MAX`, at most `HEADERS_CAP`); over
    /// it: 431, closed.
    pub headers_max: usize,
    /// Bytes of one POST body (`--max-body-bytes`, `BODY_BYTES_MAX`); over it: 413 with a JSON-RPC
    /// error, closed.
    pub body_bytes_max: usize,
    /// Time to receive a whole request head after its first byte (`--header-timeout-ms`,
    /// `HEADER_TIMEOUT_MS`); over it: 408, closed.
    pub header_timeout: Duration,
    /// Time an idle keep-alive connection is kept (`--idle-timeout-secs`, `IDLE_TIMEOUT_SECS`);
    /// over it: closed silently.
    pub idle_timeout: Duration,
    /// Open connections on one core (`--max-connections-per-core`, `CONNECTIONS_PER_CORE_MAX`);
    /// over it: 503, closed.
    pub connections_per_core_max: usize,
    /// Live sessions on one core (`--max-sessions-per-core`, `SESSIONS_PER_CORE_MAX`); over it:
    /// `initialize` gets 503 with -32603.
    pub sessions_per_core_max: usize,
    /// Request streams retained per session (`--max-streams-per-session`,
    /// `STREAMS_PER_SESSION_MAX`); over it, when none can be evicted: 429 with -32603.
    pub streams_per_session_max: usize,
    /// Events held per session replay ring (`--replay-events`, `REPLAY_EVENTS_MAX`); a power of
    /// two.
    pub replay_events_max: usize,
    /// Payload bytes held per session replay ring (`--replay-bytes`, `REPLAY_BYTES_MAX`).
    pub replay_bytes_max: usize,
    /// How long a completed, delivered request stream stays resumable and deduplicable
    /// (`--stream-retention-secs`, `STREAM_RETENTION_SECS`).
    pub stream_retention: Duration,
    /// Idle time after which a session expires and gets 404 (`--session-idle-secs`,
    /// `SESSION_IDLE_SECS`).
    pub session_idle: Duration,
    /// The least time between two list-changed notifications of one kind to one legacy
    /// session (`--list-changed-min-ms`, `LIST_CHANGED_MIN_MS`).
    pub list_changed_min: Duration,
    /// `retry:` field of every priming event, in milliseconds (`--sse-retry-ms`, `SSE_RETRY_MS`).
    pub sse_retry_ms: u64,
    /// Keep-alive comment interval on an SSE connection (`--sse-keepalive-secs`,
    /// `SSE_KEEPALIVE_SECS`).
    pub sse_keepalive: Duration,
    /// How long a POST is held while its session owes a stream (`--owed-wait-ms`, `OWED_WAIT_MS`);
    /// then 409 -31004. Shorter than `owed_timeout`.
    pub owed_wait: Duration,
    /// How long an owed stream waits for a resume before it is abandoned (`--owed-timeout-secs`,
    /// `OWED_TIMEOUT_SECS`).
    pub owed_timeout: Duration,
    /// TLS on every MCP listener (`--tls-cert`, `--tls-key`), when set; the handshake must end
    /// within `header_timeout` of the accept. The admin listener stays plain HTTP.
    pub tls: Option<TlsFiles>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`), when set.
    pub metrics_listen: Option<SocketAddr>,
    /// OTLP/HTTP traces endpoint (`--otlp-endpoint`, e.g. `http://127.0.0.1:4318/v1/traces`):
    /// `None` (the default) turns tracing off.
    pub otlp_endpoint: Option<String>,
    /// `--otlp-sample-ratio` (`OTLP_SAMPLE_RATIO`).
    pub otlp_sample_ratio: f64,
    /// `--otlp-queue-spans` (`OTLP_QUEUE_SPANS`), per core.
    pub otlp_queue_spans: usize,
    /// `--otlp-batch-spans` (`OTLP_BATCH_SPANS`).
    pub otlp_batch_spans: usize,
    /// Longest graceful drain (`--drain-secs`, `DRAIN_SECS`).
    pub drain: Duration,
    /// This node's id among the nodes behind one balancer (`--node-id`, `NODE_ID_DEFAULT`, at
    /// most `NODE_ID_MAX`): the first two hex digits of every session and task id it mints.
    pub node_id: u8,
    /// `--write-buffer-bytes` (`WRITE_BUFFER_BYTES`, at least `WINDOW_BYTES_MIN`).
    pub write_buffer_bytes: usize,
    /// `--core-buffer-bytes` (`CORE_BUFFER_BYTES`).
    pub core_buffer_bytes: usize,
    /// `--max-held-per-session` (`HELD_PER_SESSION_MAX`).
    pub held_per_session_max: usize,
    /// Built-in tool sets (`--tools`); `None`: `demo` when no other provider is given, else none.
    pub builtin_tools: Option<Vec<BuiltinSet>>,
    /// MCP servers to front (`--upstream`), each served as a provider.
    pub upstreams: Vec<UpstreamSpec>,
    /// Extra environment of stdio upstream children (`--upstream-env KEY=VALUE`).
    pub upstream_env: Vec<(String, String)>,
    /// Whether upstream children are per client session or shared per core
    /// (`--upstream-isolation`).
    pub upstream_isolation: Isolation,
    /// Upstream children alive at once, all cores (`--upstream-max-processes`,
    /// `UPSTREAM_PROCESSES_MAX`); an `initialize` needing one more gets 503.
    pub upstream_processes_max: usize,
    /// Longest an upstream may take to answer one request (`--upstream-timeout-secs`,
    /// `UPSTREAM_TIMEOUT_SECS`); then -32603 and the call is cancelled upstream.
    pub upstream_timeout: Duration,
    /// Longest one upstream tool call may run, progress or not (`--upstream-call-max-secs`,
    /// `UPSTREAM_CALL_MAX_SECS`); then -32603 and the call is cancelled upstream.
    pub upstream_call_max: Duration,
    /// Longest an upstream may take to start and answer `initialize` and its first `tools/list`
    /// (`--upstream-start-timeout-secs`, `UPSTREAM_START_TIMEOUT_SECS`); then -32603.
    pub upstream_start_timeout: Duration,
    /// Longest line read from a stdio upstream's stdout (`--upstream-line-bytes`,
    /// `UPSTREAM_LINE_BYTES`); a longer answer fails its call at once (`upstream::line_head`).
    pub upstream_line_bytes: usize,
    /// Bytes (JSON) of distinct upstream tool listings one core holds
    /// (`--upstream-catalog-bytes-per-core`, `UPSTREAM_CATALOG_BYTES_PER_CORE`).
    pub upstream_catalog_bytes_per_core: usize,
    /// Bytes queued for one stdio upstream's stdin (`--upstream-queue-bytes`,
    /// `UPSTREAM_QUEUE_BYTES`); beyond it requests fail.
    pub upstream_queue_bytes: usize,
    /// From SIGTERM to SIGKILL when an upstream child is stopped (`--upstream-kill-grace-ms`,
    /// `UPSTREAM_KILL_GRACE_MS`).
    pub upstream_kill_grace: Duration,
    /// `--cache-ttl-ms` (`CACHE_TTL_MS`).
    pub cache_ttl_ms: u64,
    /// `--request-state-ttl-secs` (`REQUEST_STATE_TTL_SECS`).
    pub request_state_ttl: Duration,
    /// `--max-idempotency-keys-per-core` (`IDEMPOTENCY_KEYS_PER_CORE_MAX`).
    pub idempotency_keys_per_core_max: usize,
    /// `--max-pending-client-requests` (`CLIENT_REQUESTS_PENDING_MAX`).
    pub client_requests_pending_max: usize,
    /// `--idempotency-bytes-per-core` (`IDEMPOTENCY_BYTES_PER_CORE`).
    pub idempotency_bytes_per_core: usize,
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
    /// Local JWK Sets of the authorization servers (`--auth-jwks-file [ISSUER=]PATH`,
    /// repeatable: `jwks_sources`), read again on each refresh and on SIGHUP.
    pub auth_jwks_file: Vec<PathBuf>,
    /// The authorization servers' `jwks_uri`s (`--auth-jwks-url [ISSUER=]URL`, repeatable:
    /// `jwks_sources`), fetched off the worker cores.
    pub auth_jwks_url: Vec<String>,
    /// `--auth-jwks-refresh-secs` (`JWKS_REFRESH_SECS`).
    pub auth_jwks_refresh: Duration,
    /// `--auth-jwks-min-refetch-secs` (`JWKS_MIN_REFETCH_SECS`).
    pub auth_jwks_min_refetch: Duration,
    /// `--auth-leeway-secs` (`AUTH_LEEWAY_SECS`, at most `AUTH_LEEWAY_SECS_MAX`).
    pub auth_leeway: Duration,
    /// Per-upstream credentials, headers and environment (`--upstream-credentials FILE`); read
    /// when the bridge starts.
    pub upstream_credentials: Option<PathBuf>,
    /// Upstreams (by `NAME=`) that get the client's own `Authorization` header
    /// (`--upstream-forward-authorization`): only for an upstream that is this same resource.
    pub upstream_forward_authorization: Vec<String>,
    /// `--upstream-allow-tools NAME=GLOB[,GLOB…]` values (see `NameFilter`).
    pub upstream_allow_tools: Vec<String>,
    /// `--upstream-deny-tools NAME=GLOB[,GLOB…]` values; deny wins over allow.
    pub upstream_deny_tools: Vec<String>,
    /// `--upstream-allow-prompts` values (prompt names).
    pub upstream_allow_prompts: Vec<String>,
    /// `--upstream-deny-prompts` values.
    pub upstream_deny_prompts: Vec<String>,
    /// `--upstream-allow-resources` values (resource URIs and URI templates).
    pub upstream_allow_resources: Vec<String>,
    /// `--upstream-deny-resources` values.
    pub upstream_deny_resources: Vec<String>,
    /// `--upstream-prefix NAME=always|on-collision|never` values (see `upstream_prefixes`).
    pub upstream_prefix: Vec<String>,
    /// `--upstream-filter-globs-max` (`UPSTREAM_FILTER_GLOBS_MAX`): globs per upstream, all
    /// kinds together.
    pub upstream_filter_globs_max: usize,
    /// `--resource-uri-bytes-max` (`RESOURCE_URI_BYTES_MAX`): the longest resource URI a
    /// request may name.
    pub resource_uri_bytes_max: usize,
    /// `--upstream-policy NAME=required|optional` values (NAME an `--upstream`'s `NAME=` or
    /// `*`); an upstream none names is `required`.
    pub upstream_policy: Vec<String>,
    /// `--upstream-protocol NAME=auto|legacy|modern` values (NAME an `--upstream`'s `NAME=` or
    /// `*`); an upstream none names is `auto`.
    pub upstream_protocol: Vec<String>,
    /// `--upstream-breaker-failures` (`UPSTREAM_BREAKER_FAILURES`).
    pub upstream_breaker_failures: u32,
    /// `--upstream-input-rounds-max` (`UPSTREAM_INPUT_ROUNDS_MAX`).
    pub upstream_input_rounds_max: usize,
    /// `--upstream-breaker-pause-ms` (`UPSTREAM_BREAKER_PAUSE_MS`).
    pub upstream_breaker_pause: Duration,
    /// Authorization (`--auth-*`, `--allow-unauthenticated`).
    pub auth: AuthConfig,
    /// Token-bucket rate limits (`--rate-limit`, at most `RATE_LIMITS_MAX`; none by default).
    pub rate_limits: Vec<RateLimit>,
    /// `--rate-buckets-per-core` (`RATE_BUCKETS_PER_CORE_MAX`).
    pub rate_buckets_per_core_max: usize,
    /// `--rate-ipv6-prefix` (`RATE_IPV6_PREFIX_DEFAULT`, 1..=`RATE_IPV6_PREFIX_MAX`): the
    /// leading bits of an IPv6 peer address that name one client.
    pub rate_ipv6_prefix: u32,
    /// The durable mirror (`--durable*`, CONTRACT §10); `None` (the default) keeps every
    /// session in this process only.
    pub durable: Option<DurableConfig>,
    /// `--log-format`: text or JSON lines on stderr.
    pub log_format: LogFormat,
    /// `--log-level`: a filter in `RUST_LOG` syntax (`info`, `tidemark::legacy=debug,info`);
    /// `None`: `RUST_LOG`, else `info`.
    pub log_level: Option<String>,
    /// `--log-events-per-kind-per-sec`: the per-kind line budget of the log.
    pub log_events_per_kind_per_sec: u32,
    /// `--log-refusal-summary-secs`: the interval of the info summary of refusals.
    pub log_refusal_summary: Duration,
    /// The `--config` file this configuration was read from, if any: SIGHUP reads it again.
    pub(crate) config_file: Option<ConfigFileOrigin>,
    /// What reading the layers found worth a warning (an unknown `TIDEMARK_*` variable):
    /// logged by `init_logging` once the subscriber exists (the layers are read before it).
    pub(crate) startup_warnings: Vec<String>,
}

/// The `--config` file of a configuration, and the keys it sets that the environment or the
/// command line set over it (a change of those in the file changes nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigFileOrigin {
    /// The file as named.
    pub(crate) path: PathBuf,
    /// Its keys that a higher layer shadows.
    pub(crate) shadowed: Vec<String>,
    /// The command line and environment the configuration was resolved from: SIGHUP resolves
    /// them again over the file's new values (the upstream set: `server::upstreams`).
    pub(crate) relaunch: Relaunch,
}

/// A command line and its `TIDEMARK_*` environment, kept to resolve the layers again. `Debug`
/// shows only their sizes (values may be secrets).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Relaunch {
    pub(crate) argv: Vec<std::ffi::OsString>,
    pub(crate) env: Vec<(String, String)>,
}

impl std::fmt::Debug for Relaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Relaunch {{ {} args, {} env vars }}", self.argv.len(), self.env.len())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: LISTEN_DEFAULT.parse().expect("invariant: constant address parses"),
            path: PATH_DEFAULT.to_owned(),
            threads: 1,
            node_id: NODE_ID_DEFAULT,
            driver: DriverChoice::Auto,
            response_mode: ResponseMode::Auto,
            migration_policy: MigrationPolicy::Strict,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_bytes_max: HEADER_BYTES_MAX,
            headers_max: HEADERS_MAX,
            body_bytes_max: BODY_BYTES_MAX,
            header_timeout: Duration::from_millis(HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_secs(IDLE_TIMEOUT_SECS),
            connections_per_core_max: CONNECTIONS_PER_CORE_MAX,
            sessions_per_core_max: SESSIONS_PER_CORE_MAX,
            streams_per_session_max: STREAMS_PER_SESSION_MAX,
            replay_events_max: REPLAY_EVENTS_MAX,
            replay_bytes_max: REPLAY_BYTES_MAX,
            stream_retention: Duration::from_secs(STREAM_RETENTION_SECS),
            session_idle: Duration::from_secs(SESSION_IDLE_SECS),
            list_changed_min: Duration::from_millis(LIST_CHANGED_MIN_MS),
            sse_retry_ms: SSE_RETRY_MS,
            sse_keepalive: Duration::from_secs(SSE_KEEPALIVE_SECS),
            owed_wait: Duration::from_millis(OWED_WAIT_MS),
            owed_timeout: Duration::from_secs(OWED_TIMEOUT_SECS),
            tls: None,
            metrics_listen: None,
            otlp_endpoint: None,
            otlp_sample_ratio: OTLP_SAMPLE_RATIO,
            otlp_queue_spans: OTLP_QUEUE_SPANS,
            otlp_batch_spans: OTLP_BATCH_SPANS,
            drain: Duration::from_secs(DRAIN_SECS),
            write_buffer_bytes: WRITE_BUFFER_BYTES,
            core_buffer_bytes: CORE_BUFFER_BYTES,
            held_per_session_max: HELD_PER_SESSION_MAX,
            builtin_tools: None,
            upstreams: Vec::new(),
            upstream_env: Vec::new(),
            upstream_isolation: Isolation::PerSession,
            upstream_processes_max: UPSTREAM_PROCESSES_MAX,
            upstream_timeout: Duration::from_secs(UPSTREAM_TIMEOUT_SECS),
            upstream_call_max: Duration::from_secs(UPSTREAM_CALL_MAX_SECS),
            upstream_start_timeout: Duration::from_secs(UPSTREAM_START_TIMEOUT_SECS),
            upstream_line_bytes: UPSTREAM_LINE_BYTES,
            upstream_catalog_bytes_per_core: UPSTREAM_CATALOG_BYTES_PER_CORE,
            upstream_queue_bytes: UPSTREAM_QUEUE_BYTES,
            upstream_kill_grace: Duration::from_millis(UPSTREAM_KILL_GRACE_MS),
            cache_ttl_ms: CACHE_TTL_MS,
            request_state_ttl: Duration::from_secs(REQUEST_STATE_TTL_SECS),
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
            auth_jwks_file: Vec::new(),
            auth_jwks_url: Vec::new(),
            auth_jwks_refresh: Duration::from_secs(JWKS_REFRESH_SECS),
            auth_jwks_min_refetch: Duration::from_secs(JWKS_MIN_REFETCH_SECS),
            auth_leeway: Duration::from_secs(AUTH_LEEWAY_SECS),
            upstream_credentials: None,
            upstream_forward_authorization: Vec::new(),
            upstream_allow_tools: Vec::new(),
            upstream_deny_tools: Vec::new(),
            upstream_allow_prompts: Vec::new(),
            upstream_deny_prompts: Vec::new(),
            upstream_allow_resources: Vec::new(),
            upstream_deny_resources: Vec::new(),
            upstream_prefix: Vec::new(),
            upstream_filter_globs_max: UPSTREAM_FILTER_GLOBS_MAX,
            resource_uri_bytes_max: RESOURCE_URI_BYTES_MAX,
            upstream_policy: Vec::new(),
            upstream_protocol: Vec::new(),
            upstream_breaker_failures: UPSTREAM_BREAKER_FAILURES,
            upstream_input_rounds_max: UPSTREAM_INPUT_ROUNDS_MAX,
            upstream_breaker_pause: Duration::from_millis(UPSTREAM_BREAKER_PAUSE_MS),
            auth: AuthConfig::with_limits(),
            log_format: LogFormat::Text,
            log_level: None,
            log_events_per_kind_per_sec: LOG_EVENTS_PER_KIND_PER_SEC,
            log_refusal_summary: Duration::from_secs(LOG_REFUSAL_SUMMARY_SECS),
            config_file: None,
            startup_warnings: Vec::new(),
            rate_limits: Vec::new(),
            rate_buckets_per_core_max: RATE_BUCKETS_PER_CORE_MAX,
            rate_ipv6_prefix: RATE_IPV6_PREFIX_DEFAULT,
            durable: None,
        }
    }
}

/// A flag value the server cannot run with (the operator's mistake).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--otlp-endpoint` is not an http(s) URL.
    #[error("--otlp-endpoint must be an http:// or https:// URL, got {0:?}")]
    BadOtlpEndpoint(String),
    /// `--otlp-sample-ratio` is not within 0..=1.
    #[error("--otlp-sample-ratio must be within 0 and 1")]
    BadSampleRatio,
    /// `--request-state-key-file` is unreadable, not a regular file, over
    /// `REQUEST_STATE_KEY_FILE_BYTES_MAX` or too short; the path and why.
    #[error("--request-state-key-file {0}")]
    KeyFile(String),
    /// A limit flag (its name, without `--`) is zero; zero never means unlimited.
    #[error("--{0} must be greater than zero (zero never means unlimited)")]
    Zero(&'static str),
    /// `--replay-events` is not a power of two.
    #[error("--replay-events must be a power of two, got {0}")]
    NotPowerOfTwo(usize),
    /// `--threads` is over `THREADS_MAX`.
    #[error("--threads must be at most {THREADS_MAX}, got {0}")]
    TooManyThreads(usize),
    /// `--path` does not start with `/`.
    #[error("--path must start with '/', got {0:?}")]
    BadPath(String),
    /// `--owed-wait-ms` is not shorter than `--owed-timeout-secs`.
    #[error("--owed-wait-ms must be shorter than --owed-timeout-secs")]
    OwedWaitTooLong,
    /// A `--tools` name is empty or not a known set.
    #[error("--tools: unknown tool set {0:?} (known: demo, conformance, or none alone)")]
    UnknownToolSet(String),
    /// `--write-buffer-bytes` is under `WINDOW_BYTES_MIN`.
    #[error("--write-buffer-bytes must be at least {0}")]
    WriteBufferTooSmall(usize),
    /// `--max-headers` is over `HEADERS_CAP`.
    #[error("--max-headers must be at most {0}")]
    TooManyHeaders(usize),
    /// An `--upstream` value, or the set of them, is unusable.
    #[error(transparent)]
    Upstream(#[from] UpstreamSpecError),
    /// An `--upstream-env` value is not `KEY=VALUE` with a non-empty key.
    #[error("--upstream-env expects KEY=VALUE, got {0:?}")]
    BadUpstreamEnv(String),
    /// An `--upstream-allow-tools` or `--upstream-deny-tools` value is unusable.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// An `--upstream-policy` value is not `NAME=required|optional` with NAME `*` or an
    /// `--upstream`'s `NAME=`; the value as given.
    #[error("--upstream-policy {0:?}: expected NAME=required|optional (NAME an --upstream's NAME= or '*')")]
    UpstreamPolicy(String),
    /// An `--upstream-protocol` value is not `NAME=auto|legacy|modern` with NAME `*` or an
    /// `--upstream`'s `NAME=`; the value as given.
    #[error("--upstream-protocol {0:?}: expected NAME=auto|legacy|modern (NAME an --upstream's NAME= or '*')")]
    UpstreamProtocol(String),
    /// `--auth-leeway-secs` is over `AUTH_LEEWAY_SECS_MAX`.
    #[error("--auth-leeway-secs must be at most {AUTH_LEEWAY_SECS_MAX}, got {0}")]
    LeewayTooLong(u64),
    /// `--auth-cache-secs` is over `AUTH_CACHE_SECS_MAX`.
    #[error("--auth-cache-secs must be at most {AUTH_CACHE_SECS_MAX}, got {0}")]
    AuthCacheTooLong(u64),
    /// An `--auth-jwks-*` source set-up that would mix issuers' keys (`jwks_sources`).
    #[error(transparent)]
    JwksSource(#[from] JwksSourceError),
    /// `--auth-jwks-url` is not an http:// or https:// URL.
    #[error("--auth-jwks-url must be an http:// or https:// URL, got {0:?}")]
    BadJwksUrl(String),
    /// `--upstream-forward-authorization` names no `--upstream NAME=http://…`.
    #[error("--upstream-forward-authorization {0:?}: no HTTP --upstream has that NAME=")]
    ForwardToUnknownUpstream(String),
    /// A non-loopback `--listen` with no authorization and no `--allow-unauthenticated`.
    #[error(
        "refusing to listen on {0} (not a loopback address) without authorization: add \
         --auth-tokens FILE (bearer tokens) or --auth-jwks-url URL (JWT access tokens), or \
         --allow-unauthenticated to serve anyone who \
         reaches the port"
    )]
    Unauthenticated(SocketAddr),
    /// `--auth-policy`, `--auth-write-scope` or `--auth-required-scope` without a verifier
    /// (`--auth-tokens`): nothing would name the scopes they ask for.
    #[error("{0} needs authorization: add --auth-tokens FILE or --auth-jwks-url URL")]
    AuthFlagWithoutAuth(&'static str),
    /// An `--auth-tokens` or `--auth-policy` file could not be loaded: the path and why.
    #[error("{0}")]
    AuthFile(String),
    /// The `--config` file or a `TIDEMARK_*` environment variable is unusable; the message
    /// names the file (and table) or the variable, and the key.
    #[error("{0}")]
    Layer(String),
    /// A `--rate-limit` value, or the set of them, is unusable.
    #[error(transparent)]
    RateLimit(#[from] RateLimitError),
    /// A `--durable` value is not `redis://HOST:PORT[/DB]`.
    #[error(transparent)]
    DurableUrl(#[from] DurableUrlError),
    /// `--durable-lease-ms` is under `DURABLE_LEASE_MS_MIN`.
    #[error("--durable-lease-ms must be at least {DURABLE_LEASE_MS_MIN}, got {0}")]
    DurableLeaseTooShort(u64),
    /// `--durable-linger-us` is over `DURABLE_LINGER_US_MAX`.
    #[error("--durable-linger-us must be at most {DURABLE_LINGER_US_MAX}, got {0}")]
    DurableLingerTooLong(u64),
}

impl Config {
    /// Smallest sensible limits, for tests that probe behaviour at the limits.
    pub fn test_min() -> Config {
        Config {
            listen: "127.0.0.1:0".parse().expect("invariant: constant address parses"),
            header_bytes_max: 1024,
            headers_max: 16,
            body_bytes_max: 4096,
            sessions_per_core_max: 4,
            streams_per_session_max: 4,
            replay_events_max: 16,
            replay_bytes_max: 4096,
            ..Config::default()
        }
    }

    /// This configuration with the upstream set of `other`: the `--upstream`s and their
    /// per-upstream `NAME=…` flags (filters, prefix, failure policy, era) — what a SIGHUP may
    /// change (`layers::RELOADABLE_KEYS`); every other setting stays this one's.
    pub(crate) fn with_upstream_set_of(&self, other: &Config) -> Config {
        Config {
            upstreams: other.upstreams.clone(),
            upstream_allow_tools: other.upstream_allow_tools.clone(),
            upstream_deny_tools: other.upstream_deny_tools.clone(),
            upstream_allow_prompts: other.upstream_allow_prompts.clone(),
            upstream_deny_prompts: other.upstream_deny_prompts.clone(),
            upstream_allow_resources: other.upstream_allow_resources.clone(),
            upstream_deny_resources: other.upstream_deny_resources.clone(),
            upstream_prefix: other.upstream_prefix.clone(),
            upstream_policy: other.upstream_policy.clone(),
            upstream_protocol: other.upstream_protocol.clone(),
            ..self.clone()
        }
    }

    /// Each `--upstream`'s filters, in order (`--upstream-allow-tools`, `--upstream-deny-tools`
    /// and the same for prompts and resources); a filter flag with no `--upstream` is an error.
    pub(crate) fn upstream_filters(&self) -> Result<Vec<UpstreamFilters>, FilterError> {
        let flags = filter::FilterFlags {
            tools: [&self.upstream_allow_tools, &self.upstream_deny_tools],
            prompts: [&self.upstream_allow_prompts, &self.upstream_deny_prompts],
            resources: [&self.upstream_allow_resources, &self.upstream_deny_resources],
        };
        if self.upstreams.is_empty() {
            let all = [flags.tools, flags.prompts, flags.resources];
            if let Some(value) = all.iter().flatten().flat_map(|v| v.iter()).next() {
                let why = "(no --upstream given)".to_owned();
                return Err(FilterError::UnknownUpstream(
                    "--upstream-allow-*/--upstream-deny-*",
                    value.clone(),
                    why,
                ));
            }
        }
        let max = self.upstream_filter_globs_max;
        self.upstreams
            .iter()
            .map(|spec| UpstreamFilters::for_upstream(spec, &self.upstreams, &flags, max))
            .collect()
    }

    /// Each `--upstream`'s prefix policy, in order (`--upstream-prefix`, else the default: one
    /// upstream `never`, several `always`).
    pub(crate) fn upstream_prefixes(&self) -> Result<Vec<PrefixPolicy>, UpstreamSpecError> {
        PrefixPolicy::for_upstreams(&self.upstreams, &self.upstream_prefix)
    }

    /// Each `--upstream`'s failure policy, in order (`--upstream-policy`; the last value naming
    /// it wins, `*` names every upstream; `required` when none does).
    pub(crate) fn upstream_policies(&self) -> Result<Vec<UpstreamPolicy>, ConfigError> {
        self.per_upstream(&self.upstream_policy, UpstreamPolicy::parse, ConfigError::UpstreamPolicy)
    }

    /// Each `--upstream`'s era, in order (`--upstream-protocol`, as `upstream_policies`; `auto`
    /// when none names it).
    pub(crate) fn upstream_protocols(&self) -> Result<Vec<UpstreamProtocol>, ConfigError> {
        let parse = UpstreamProtocol::parse;
        self.per_upstream(&self.upstream_protocol, parse, ConfigError::UpstreamProtocol)
    }

    /// One `NAME=VALUE` per-upstream flag's values as a value per `--upstream`, in order: the
    /// last value naming an upstream wins, `*` names every one, the default where none does.
    fn per_upstream<T: Copy + Default>(
        &self,
        values: &[String],
        parse: fn(&str) -> Option<T>,
        error: fn(String) -> ConfigError,
    ) -> Result<Vec<T>, ConfigError> {
        let mut chosen = vec![T::default(); self.upstreams.len()];
        for value in values {
            let bad = || error(value.clone());
            let (name, word) = value.split_once('=').ok_or_else(bad)?;
            let parsed = parse(word).ok_or_else(bad)?;
            let mut named = false;
            for (spec, into) in self.upstreams.iter().zip(chosen.iter_mut()) {
                if name == "*" || spec.name.as_deref() == Some(name) {
                    *into = parsed;
                    named = true;
                }
            }
            if !named {
                return Err(bad());
            }
        }
        Ok(chosen)
    }

    /// The tracing flags: an http(s) endpoint, a ratio within 0..=1, nonzero sizes.
    fn validate_otlp(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.otlp_endpoint {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::BadOtlpEndpoint(url.clone()));
            }
        }
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            return Err(ConfigError::BadSampleRatio);
        }
        if self.otlp_queue_spans == 0 {
            return Err(ConfigError::Zero("otlp-queue-spans"));
        }
        if self.otlp_batch_spans == 0 {
            return Err(ConfigError::Zero("otlp-batch-spans"));
        }
        Ok(())
    }

    /// Checks every value once, so workers can rely on them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let nonzero: [(&'static str, u128); 51] = [
            ("threads", self.threads as u128),
            ("max-header-bytes", self.header_bytes_max as u128),
            ("max-headers", self.headers_max as u128),
            ("max-body-bytes", self.body_bytes_max as u128),
            ("header-timeout-ms", self.header_timeout.as_millis()),
            ("idle-timeout-secs", self.idle_timeout.as_millis()),
            ("max-connections-per-core", self.connections_per_core_max as u128),
            ("max-sessions-per-core", self.sessions_per_core_max as u128),
            ("max-streams-per-session", self.streams_per_session_max as u128),
            ("replay-bytes", self.replay_bytes_max as u128),
            ("session-idle-secs", self.session_idle.as_millis()),
            ("list-changed-min-ms", self.list_changed_min.as_millis()),
            ("sse-keepalive-secs", self.sse_keepalive.as_millis()),
            ("owed-wait-ms", self.owed_wait.as_millis()),
            ("owed-timeout-secs", self.owed_timeout.as_millis()),
            ("stream-retention-secs", self.stream_retention.as_millis()),
            ("request-state-ttl-secs", self.request_state_ttl.as_millis()),
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
            ("sse-retry-ms", u128::from(self.sse_retry_ms)),
            ("drain-secs", self.drain.as_millis()),
            ("core-buffer-bytes", self.core_buffer_bytes as u128),
            ("max-held-per-session", self.held_per_session_max as u128),
            ("upstream-max-processes", self.upstream_processes_max as u128),
            ("upstream-timeout-secs", self.upstream_timeout.as_millis()),
            ("upstream-call-max-secs", self.upstream_call_max.as_millis()),
            ("upstream-start-timeout-secs", self.upstream_start_timeout.as_millis()),
            ("upstream-line-bytes", self.upstream_line_bytes as u128),
            ("upstream-catalog-bytes-per-core", self.upstream_catalog_bytes_per_core as u128),
            ("upstream-queue-bytes", self.upstream_queue_bytes as u128),
            ("upstream-filter-globs-max", self.upstream_filter_globs_max as u128),
            ("resource-uri-bytes-max", self.resource_uri_bytes_max as u128),
            ("upstream-breaker-failures", u128::from(self.upstream_breaker_failures)),
            ("upstream-input-rounds-max", self.upstream_input_rounds_max as u128),
            ("upstream-breaker-pause-ms", self.upstream_breaker_pause.as_millis()),
            ("auth-jwks-refresh-secs", self.auth_jwks_refresh.as_millis()),
            ("auth-jwks-min-refetch-secs", self.auth_jwks_min_refetch.as_millis()),
            ("auth-tokens-max", self.auth.tokens_max as u128),
            ("auth-policy-rules-max", self.auth.policy_rules_max as u128),
            ("auth-cache-secs", self.auth.cache_lifetime.as_millis()),
            ("log-events-per-kind-per-sec", u128::from(self.log_events_per_kind_per_sec)),
            ("log-refusal-summary-secs", self.log_refusal_summary.as_millis()),
            ("rate-buckets-per-core", self.rate_buckets_per_core_max as u128),
        ];
        for (name, value) in nonzero {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        UpstreamSpec::check_names(&self.upstreams)?;
        self.upstream_prefixes()?;
        RateLimit::check_set(&self.rate_limits)?;
        RateLimit::check_table(self.rate_buckets_per_core_max, self.rate_ipv6_prefix)?;
        if let Some(durable) = &self.durable {
            let lease_ms = durable.lease.as_millis() as u64;
            if lease_ms < DURABLE_LEASE_MS_MIN {
                return Err(ConfigError::DurableLeaseTooShort(lease_ms));
            }
            let linger_us = durable.linger.as_micros() as u64;
            if linger_us > DURABLE_LINGER_US_MAX {
                return Err(ConfigError::DurableLingerTooLong(linger_us));
            }
            let limits = [
                ("durable-queue-records", durable.queue_records_max),
                ("durable-queue-bytes", durable.queue_bytes_max),
                ("durable-batch-records", durable.batch_records_max),
                ("durable-batch-bytes", durable.batch_bytes_max),
                ("durable-adoptions-max", durable.adoptions_max),
            ];
            if let Some((name, _)) = limits.iter().find(|(_, value)| *value == 0) {
                return Err(ConfigError::Zero(name));
            }
        }
        self.upstream_filters()?;
        self.upstream_policies()?;
        self.upstream_protocols()?;
        self.validate_otlp()?;
        if self.auth_leeway.as_secs() > AUTH_LEEWAY_SECS_MAX {
            return Err(ConfigError::LeewayTooLong(self.auth_leeway.as_secs()));
        }
        if self.auth.cache_lifetime.as_secs() > AUTH_CACHE_SECS_MAX {
            return Err(ConfigError::AuthCacheTooLong(self.auth.cache_lifetime.as_secs()));
        }
        if self.auth.issuers.is_empty() {
            // No issuer: the verifier refuses to start (`jwt::JwtSettingsError::NoIssuer`).
            let web = |u: &&String| u.starts_with("http://") || u.starts_with("https://");
            if let Some(url) = self.auth_jwks_url.iter().find(|u| !web(u)) {
                return Err(ConfigError::BadJwksUrl(url.clone()));
            }
        } else {
            jwks_sources(&self.auth.issuers, &self.auth_jwks_file, &self.auth_jwks_url)?;
        }
        for name in &self.upstream_forward_authorization {
            let known = self.upstreams.iter().any(|spec| {
                spec.name.as_deref() == Some(name.as_str())
                    && matches!(spec.target, UpstreamTarget::Http(_))
            });
            if !known {
                return Err(ConfigError::ForwardToUnknownUpstream(name.clone()));
            }
        }
        if !self.replay_events_max.is_power_of_two() {
            return Err(ConfigError::NotPowerOfTwo(self.replay_events_max));
        }
        if self.threads > THREADS_MAX {
            return Err(ConfigError::TooManyThreads(self.threads));
        }
        if !self.path.starts_with('/') {
            return Err(ConfigError::BadPath(self.path.clone()));
        }
        if self.owed_wait >= self.owed_timeout {
            return Err(ConfigError::OwedWaitTooLong);
        }
        if self.write_buffer_bytes < WINDOW_BYTES_MIN {
            return Err(ConfigError::WriteBufferTooSmall(WINDOW_BYTES_MIN));
        }
        if self.headers_max > HEADERS_CAP {
            return Err(ConfigError::TooManyHeaders(HEADERS_CAP));
        }
        let scoped = [
            ("--auth-policy", self.auth.policy_file.is_some()),
            ("--auth-write-scope", self.auth.write_scope.is_some()),
            ("--auth-required-scope", !self.auth.required_scopes.is_empty()),
        ];
        if let Some((flag, _)) = scoped.iter().find(|(_, set)| *set && !self.auth_enabled()) {
            return Err(ConfigError::AuthFlagWithoutAuth(flag));
        }
        // Anyone who reaches a non-loopback port could otherwise use every session and tool
        // (issue 18): serving them must be asked for by name.
        if !self.listen.ip().is_loopback()
            && !self.auth_enabled()
            && !self.auth.allow_unauthenticated
        {
            return Err(ConfigError::Unauthenticated(self.listen));
        }
        Ok(())
    }

    /// True when some verifier is configured (static tokens, or JWT access tokens over a
    /// JWK Set), so every request must carry a valid token.
    pub fn auth_enabled(&self) -> bool {
        self.auth.enabled() || !self.auth_jwks_file.is_empty() || !self.auth_jwks_url.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_test_min_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
        assert_eq!(Config::test_min().validate(), Ok(()));
    }

    #[test]
    fn zero_and_bad_values_are_rejected() {
        let d = Config::default;
        let c = Config { replay_events_max: 3, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::NotPowerOfTwo(3)));
        let c = Config { body_bytes_max: 0, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::Zero("max-body-bytes")));
        let c = Config { threads: THREADS_MAX + 1, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::TooManyThreads(THREADS_MAX + 1)));
        let c = Config { sse_retry_ms: 0, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::Zero("sse-retry-ms")));
        let c = Config { stream_retention: std::time::Duration::ZERO, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::Zero("stream-retention-secs")));
        let c = Config { drain: std::time::Duration::ZERO, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::Zero("drain-secs")));
        let c = Config { drain: std::time::Duration::from_secs(1), ..d() };
        assert_eq!(c.validate(), Ok(()), "one second, the smallest drain, is valid");
        let c = Config { path: "mcp".into(), ..d() };
        assert!(matches!(c.validate(), Err(ConfigError::BadPath(_))));
        let c = Config { owed_wait: d().owed_timeout, ..d() };
        assert_eq!(c.validate(), Err(ConfigError::OwedWaitTooLong));
    }
}
