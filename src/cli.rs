//! The command line: every flag of the `tidemark` binary (one per limit in `config`), parsed
//! into a `Config`. Embedding programs get the same flags through `Config::from_args`.
//!
//! Owns: the flag names, their help text and defaults. Never: starts anything.

use std::net::SocketAddr;
use std::time::Duration;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

use crate::config::{self, BuiltinSet, Config, ConfigError, DriverChoice, MigrationPolicy};
use crate::config::{ConfigFileOrigin, ResponseMode};
use crate::layers::{self, FileValues, LayerError, ResolveError, Resolved};

#[derive(Clone, Copy, ValueEnum)]
enum DriverFlag {
    Auto,
    Uring,
    Epoll,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeFlag {
    Auto,
    Sse,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatFlag {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyFlag {
    Strict,
    Off,
}

/// tidemark: an io_uring, thread-per-core MCP Streamable HTTP endpoint that never loses or
/// doubles a stream.
#[derive(Parser)]
#[command(version, about)]
struct Flags {
    /// A TOML configuration file: every flag's long name is a key (docs/configuration.md);
    /// flags and TIDEMARK_* environment variables override it. Also TIDEMARK_CONFIG.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the effective configuration as TOML, each key's source above it, and exit.
    #[arg(long)]
    print_config: bool,
    /// Address to listen on (loopback by default: DNS-rebinding protection applies).
    #[arg(long, default_value = config::LISTEN_DEFAULT)]
    listen: SocketAddr,
    /// The MCP endpoint path.
    #[arg(long, default_value = config::PATH_DEFAULT)]
    path: String,
    /// Worker threads, one monoio runtime each (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// io driver: auto tries io_uring (DEFER_TASKRUN, COOP_TASKRUN, plain), then epoll.
    #[arg(long, value_enum, default_value = "auto")]
    driver: DriverFlag,
    /// Built-in tool sets, comma-separated: demo, conformance; `none` for none (default: demo,
    /// unless the embedding program adds providers of its own).
    #[arg(long)]
    tools: Option<String>,
    /// How request POSTs are answered: auto (tools/call as SSE, the rest JSON), sse, json.
    #[arg(long, value_enum, default_value = "auto")]
    response_mode: ModeFlag,
    /// strict enforces the migration boundary; off behaves like the SDK servers (comparison).
    #[arg(long, value_enum, default_value = "strict")]
    migration_policy: PolicyFlag,
    /// Extra Origin value to accept (repeatable), e.g. https://app.example.
    #[arg(long)]
    allowed_origin: Vec<String>,
    /// Extra Host value to accept (repeatable), e.g. mcp.example:8080.
    #[arg(long)]
    allowed_host: Vec<String>,
    /// Bytes of one request head (request line and headers); over it: 431, closed.
    #[arg(long, default_value_t = config::HEADER_BYTES_MAX)]
    max_header_bytes: usize,
    /// Header lines of one request (at most HEADERS_CAP, 128); over it: 431, closed.
    #[arg(long, default_value_t = config::HEADERS_MAX)]
    max_headers: usize,
    /// Bytes of one POST body; over it: 413, closed.
    #[arg(long, default_value_t = config::BODY_BYTES_MAX)]
    max_body_bytes: usize,
    /// Time to receive a request head once its first byte came (and, with TLS, the handshake
    /// from the accept); past it: 408, closed.
    #[arg(long, default_value_t = config::HEADER_TIMEOUT_MS)]
    header_timeout_ms: u64,
    /// An idle keep-alive connection is closed after this long.
    #[arg(long, default_value_t = config::IDLE_TIMEOUT_SECS)]
    idle_timeout_secs: u64,
    /// Open connections per core; over it: 503, closed.
    #[arg(long, default_value_t = config::CONNECTIONS_PER_CORE_MAX)]
    max_connections_per_core: usize,
    /// Live legacy sessions per core; over it: initialize gets 503.
    #[arg(long, default_value_t = config::SESSIONS_PER_CORE_MAX)]
    max_sessions_per_core: usize,
    /// Request streams a session retains (settled ones are evicted first); over it: 429.
    #[arg(long, default_value_t = config::STREAMS_PER_SESSION_MAX)]
    max_streams_per_session: usize,
    /// Events held per session replay ring (power of two).
    #[arg(long, default_value_t = config::REPLAY_EVENTS_MAX)]
    replay_events: usize,
    /// Payload bytes held per session replay ring.
    #[arg(long, default_value_t = config::REPLAY_BYTES_MAX)]
    replay_bytes: usize,
    /// How long a settled stream stays resumable and deduplicable; a resume after it: 400.
    #[arg(long, default_value_t = config::STREAM_RETENTION_SECS)]
    stream_retention_secs: u64,
    /// An idle legacy session expires after this long (404 after).
    #[arg(long, default_value_t = config::SESSION_IDLE_SECS)]
    session_idle_secs: u64,
    /// Per legacy session (and subscriptions/listen stream) and kind, at most one
    /// tools/prompts/resources list_changed per this many ms; those inside the window go out
    /// as one at its end.
    #[arg(long, default_value_t = config::LIST_CHANGED_MIN_MS)]
    list_changed_min_ms: u64,
    /// The `retry:` field of priming events: how long a client waits before it resumes.
    #[arg(long, default_value_t = config::SSE_RETRY_MS)]
    sse_retry_ms: u64,
    /// Interval of the SSE keep-alive comment on a quiet stream.
    #[arg(long, default_value_t = config::SSE_KEEPALIVE_SECS)]
    sse_keepalive_secs: u64,
    /// How long a POST is held while its session owes a stream's tail; past it: 409 -31004.
    #[arg(long, default_value_t = config::OWED_WAIT_MS)]
    owed_wait_ms: u64,
    /// How long an owed stream waits for a resume before it is abandoned (counted).
    #[arg(long, default_value_t = config::OWED_TIMEOUT_SECS)]
    owed_timeout_secs: u64,
    /// Serve every MCP listener over TLS (1.3/1.2, ALPN http/1.1) with this PEM certificate
    /// chain, leaf first; needs --tls-key. Reloaded with the key on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Admin listener: Prometheus text at http://ADDR/metrics, an HTML page at /status,
    /// /healthz, /readyz (off by default; no authentication: keep it on loopback).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Export OpenTelemetry traces (OTLP/HTTP JSON) to this URL, e.g.
    /// http://127.0.0.1:4318/v1/traces: a SERVER span per request, a CLIENT span per upstream
    /// call (off by default).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Share of new traces recorded, 0..=1 (a request with a traceparent follows its sampled
    /// flag).
    #[arg(long, default_value_t = config::OTLP_SAMPLE_RATIO)]
    otlp_sample_ratio: f64,
    /// Finished spans each core holds for the exporter; past it spans are dropped and counted
    /// (tidemark_trace_spans_dropped_total).
    #[arg(long, default_value_t = config::OTLP_QUEUE_SPANS)]
    otlp_queue_spans: usize,
    /// Spans in one OTLP export request.
    #[arg(long, default_value_t = config::OTLP_BATCH_SPANS)]
    otlp_batch_spans: usize,
    /// On SIGTERM/SIGINT: how long running calls may finish and deliver their results before
    /// open streams are ended and the process exits 0 (a second signal exits at once).
    #[arg(long, default_value_t = config::DRAIN_SECS)]
    drain_secs: u64,
    /// This node's id behind a balancer, 0..=255: the first two hex digits of every session
    /// and task id, which the balancer routes on (deploy/haproxy-config). Unique per node.
    #[arg(long, default_value_t = config::NODE_ID_DEFAULT,
          value_parser = clap::value_parser!(u8).range(..=i64::from(config::NODE_ID_MAX)))]
    node_id: u8,
    /// SSE bytes one connection buffers per send; larger events go out in windows (min 4096).
    #[arg(long, default_value_t = config::WRITE_BUFFER_BYTES)]
    write_buffer_bytes: usize,
    /// Replay-ring bytes all sessions of one core may hold; over it new streams get 503.
    #[arg(long, default_value_t = config::CORE_BUFFER_BYTES)]
    core_buffer_bytes: usize,
    /// POSTs one session may have held (while a stream is owed) at once; more get 409 -31004.
    #[arg(long, default_value_t = config::HELD_PER_SESSION_MAX)]
    max_held_per_session: usize,
    /// An MCP server to front (repeatable): 'stdio:COMMAND ARGS…' (split like a shell, no
    /// shell run) or 'http://HOST:PORT/PATH'; with several, each 'NAME=…' (tools and prompts
    /// become NAME__tool, resource URIs NAME+uri). With any upstream, --tools defaults to none.
    #[arg(long)]
    upstream: Vec<String>,
    /// Extra environment for stdio upstreams, KEY=VALUE (repeatable).
    #[arg(long)]
    upstream_env: Vec<String>,
    /// per-session: one upstream child per client session; shared: one per core.
    #[arg(long, value_enum, default_value = "per-session")]
    upstream_isolation: config::Isolation,
    /// Upstream child processes alive at once (all cores); initialize beyond it gets 503.
    #[arg(long, default_value_t = config::UPSTREAM_PROCESSES_MAX)]
    upstream_max_processes: usize,
    /// Longest an upstream may take to answer one request; for a tool call, since the
    /// upstream last sent for it (progress, logs), time held back for a slow client not counted.
    #[arg(long, default_value_t = config::UPSTREAM_TIMEOUT_SECS)]
    upstream_timeout_secs: u64,
    /// Longest one upstream tool call may run, however much progress its upstream sends.
    #[arg(long, default_value_t = config::UPSTREAM_CALL_MAX_SECS)]
    upstream_call_max_secs: u64,
    /// Longest an upstream may take to start and answer initialize (and its first tools/list).
    #[arg(long, default_value_t = config::UPSTREAM_START_TIMEOUT_SECS)]
    upstream_start_timeout_secs: u64,
    /// Longest JSON-RPC line read from a stdio upstream; a longer answer fails its call.
    #[arg(long, default_value_t = config::UPSTREAM_LINE_BYTES)]
    upstream_line_bytes: usize,
    /// Bytes (JSON) of distinct upstream tool listings one core holds (equal ones are shared);
    /// a session whose listing would exceed it gets 503 on initialize.
    #[arg(long, default_value_t = config::UPSTREAM_CATALOG_BYTES_PER_CORE)]
    upstream_catalog_bytes_per_core: usize,
    /// Bytes queued for one stdio upstream's stdin; beyond it requests fail.
    #[arg(long, default_value_t = config::UPSTREAM_QUEUE_BYTES)]
    upstream_queue_bytes: usize,
    /// From SIGTERM to SIGKILL when an upstream child is stopped.
    #[arg(long, default_value_t = config::UPSTREAM_KILL_GRACE_MS)]
    upstream_kill_grace_ms: u64,
    /// Per-upstream credentials: HTTP headers and stdio environment, from this file (lines
    /// 'NAME header HEADER VALUE' / 'NAME env KEY VALUE'; VALUE may be $VAR or use ${VAR} from
    /// tidemark's environment). Never on the command line, where ps shows it.
    #[arg(long)]
    upstream_credentials: Option<std::path::PathBuf>,
    /// Send the client's own Authorization header to the HTTP upstream NAME (repeatable): only
    /// for an upstream that is this same resource (the token's audience). Off by default.
    #[arg(long, value_name = "NAME")]
    upstream_forward_authorization: Vec<String>,
    /// Expose only the tools of upstream NAME ('*': every upstream) whose own names match a
    /// GLOB ('*' any run, '?' one character; case-sensitive); repeatable; 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_allow_tools: Vec<String>,
    /// Hide the tools of upstream NAME ('*': every upstream) matching a GLOB, listed and
    /// called alike (refused as unknown); wins over --upstream-allow-tools; 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_deny_tools: Vec<String>,
    /// Expose only the prompts of upstream NAME ('*': all) whose names match a GLOB (as for
    /// tools: listed, fetched and completed alike); 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_allow_prompts: Vec<String>,
    /// Hide the prompts of upstream NAME ('*': all) matching a GLOB; wins over allow.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_deny_prompts: Vec<String>,
    /// Expose only the resources of upstream NAME ('*': all) whose URIs (in canonical form) or
    /// URI templates match a GLOB; read and subscribe are refused as not found for the rest.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_allow_resources: Vec<String>,
    /// Hide the resources of upstream NAME ('*': all) whose URIs (in canonical form) match a
    /// GLOB; wins over allow.
    #[arg(long, value_name = "NAME=GLOB")]
    upstream_deny_resources: Vec<String>,
    /// Whether upstream NAME's tool and prompt names are prefixed NAME__ (resource URIs NAME+):
    /// always, on-collision (only if one of its names is another provider's) or never; an
    /// unresolved collision stops the start. Default: never with one upstream, always with
    /// several (repeatable; 'NAME=POLICY').
    #[arg(long, value_name = "NAME=POLICY")]
    upstream_prefix: Vec<String>,
    /// Most --upstream-allow-* and --upstream-deny-* globs (all kinds) for one upstream.
    #[arg(long, default_value_t = config::UPSTREAM_FILTER_GLOBS_MAX)]
    upstream_filter_globs_max: usize,
    /// Longest resource URI (bytes) a resources/read, resources/subscribe or completion may
    /// name; a longer one is refused with -32602.
    #[arg(long, default_value_t = config::RESOURCE_URI_BYTES_MAX)]
    resource_uri_bytes_max: usize,
    /// What a session does when upstream NAME ('*': every upstream) is down as it starts:
    /// required (the default: initialize gets 503 + Retry-After naming it) or optional (the
    /// session starts without its tools; they return with tools/list_changed); repeatable.
    #[arg(long, value_name = "NAME=POLICY")]
    upstream_policy: Vec<String>,
    /// Which MCP era to speak to HTTP upstream NAME ('*': every one): auto (the default: probe
    /// with server/discover; 2026-07-28 when it is all the upstream serves, else initialize,
    /// whose streams resume), legacy (initialize, no probe) or modern (2026-07-28 only);
    /// repeatable.
    #[arg(long, value_name = "NAME=PROTOCOL")]
    upstream_protocol: Vec<String>,
    /// Consecutive failed tool calls of one upstream (per core) that open its circuit breaker:
    /// its calls then fail fast with -32603 naming it, without reaching it.
    #[arg(long, default_value_t = config::UPSTREAM_BREAKER_FAILURES)]
    upstream_breaker_failures: u32,
    /// Rounds of input (InputRequiredResult after InputRequiredResult) one tool call of a
    /// 2026-07-28 upstream may ask for before tidemark ends it with -32603.
    #[arg(long, default_value_t = config::UPSTREAM_INPUT_ROUNDS_MAX)]
    upstream_input_rounds_max: usize,
    /// How long an open breaker fails calls fast before one probe call goes through; also the
    /// retry interval of an optional upstream that is down.
    #[arg(long, default_value_t = config::UPSTREAM_BREAKER_PAUSE_MS)]
    upstream_breaker_pause_ms: u64,
    /// A local JWK Set (an authorization server's signing keys), read again every refresh and
    /// on SIGHUP; ISSUER=PATH names the --auth-issuer it is for (needed with several).
    #[arg(long, value_name = "[ISSUER=]PATH")]
    auth_jwks_file: Vec<std::path::PathBuf>,
    /// An authorization server's jwks_uri, fetched off the worker cores; ISSUER=URL names the
    /// --auth-issuer it is for (needed with several).
    #[arg(long, value_name = "[ISSUER=]URL")]
    auth_jwks_url: Vec<String>,
    /// How often the JWK Set is read again.
    #[arg(long, default_value_t = config::JWKS_REFRESH_SECS)]
    auth_jwks_refresh_secs: u64,
    /// Shortest time between two JWK Set reads (a token with an unknown kid asks for one).
    #[arg(long, default_value_t = config::JWKS_MIN_REFETCH_SECS)]
    auth_jwks_min_refetch_secs: u64,
    /// Clock skew allowed on a JWT's exp and nbf, in seconds (at most 300).
    #[arg(long, default_value_t = config::AUTH_LEEWAY_SECS)]
    auth_leeway_secs: u64,
    /// Longest a connection's cached token verification is used before the token is verified
    /// again, whatever its exp (at most 3600); a changed token or key set ends it at once.
    #[arg(long, default_value_t = config::AUTH_CACHE_SECS)]
    auth_cache_secs: u64,
    /// The `ttlMs` caching hint on 2026-07-28 list and read results (0: re-fetch when needed).
    #[arg(long, default_value_t = config::CACHE_TTL_MS)]
    cache_ttl_ms: u64,
    /// How long a 2026-07-28 MRTR `requestState` is accepted after it was issued.
    #[arg(long, default_value_t = config::REQUEST_STATE_TTL_SECS)]
    request_state_ttl_secs: u64,
    /// A file whose bytes key the HMAC that seals `requestState` (default: a random key per
    /// process). Give every node of a cluster the same file so any node accepts the state.
    #[arg(long)]
    request_state_key_file: Option<std::path::PathBuf>,
    /// 2026-07-28 Idempotency-Key records kept per core.
    #[arg(long, default_value_t = config::IDEMPOTENCY_KEYS_PER_CORE_MAX)]
    max_idempotency_keys_per_core: usize,
    /// Bytes of recorded notifications and final answers the Idempotency-Key records of one
    /// core hold; finished records go oldest first, then new keyed calls get 503.
    #[arg(long, default_value_t = config::IDEMPOTENCY_BYTES_PER_CORE)]
    idempotency_bytes_per_core: usize,
    /// Keyed calls one client (its connection's peer address) may have running on one core;
    /// past it 429 + Retry-After.
    #[arg(long, default_value_t = config::KEYED_CALLS_RUNNING_PER_CLIENT_MAX)]
    max_running_keyed_calls_per_client: usize,
    /// Server→client requests (sampling, elicitation, roots) one legacy session, or one round
    /// of a 2026-07-28 call, has outstanding; a tool's next one fails with -32603.
    #[arg(long, default_value_t = config::CLIENT_REQUESTS_PENDING_MAX)]
    max_pending_client_requests: usize,
    /// How long a keyed call (Idempotency-Key) may run before it is cancelled and answers -32603.
    #[arg(long, default_value_t = config::KEYED_CALL_MAX_SECS)]
    keyed_call_max_secs: u64,
    /// Tasks (2026-07-28 tasks extension) one core holds, running or retained; beyond it a call
    /// that would become a task runs synchronously.
    #[arg(long, default_value_t = config::TASKS_PER_CORE_MAX)]
    max_tasks_per_core: usize,
    /// How long a task is kept after its creation (its `ttlMs`).
    #[arg(long, default_value_t = config::TASK_RETENTION_SECS)]
    task_retention_secs: u64,
    /// Bytes of task results and errors one core holds; a result that does not fit fails its
    /// task.
    #[arg(long, default_value_t = config::TASK_BYTES_PER_CORE)]
    task_bytes_per_core: usize,
    /// Input requests one task may have outstanding at once.
    #[arg(long, default_value_t = config::TASK_INPUT_REQUESTS_MAX)]
    max_task_input_requests: usize,
    /// The `pollIntervalMs` suggested to clients polling `tasks/get`.
    #[arg(long, default_value_t = config::TASK_POLL_INTERVAL_MS)]
    task_poll_interval_ms: u64,
    /// Static bearer tokens: `TOKEN SUBJECT [SCOPE,SCOPE…]` per line, `#` comments; reloaded on
    /// SIGHUP. Turns authorization on: every request needs a valid token.
    #[arg(long)]
    auth_tokens: Option<std::path::PathBuf>,
    /// This server's resource URL (the metadata's `resource`; the `aud` a JWT must name).
    /// Default: http://<listen address><path>.
    #[arg(long)]
    auth_resource: Option<String>,
    /// An authorization server's issuer URL (repeatable): the metadata's
    /// `authorization_servers`.
    #[arg(long)]
    auth_issuer: Vec<String>,
    /// Scopes listed in the metadata's `scopes_supported` (comma-separated).
    #[arg(long, value_delimiter = ',')]
    auth_scopes_supported: Vec<String>,
    /// A scope every request's token must hold (repeatable): else 403 insufficient_scope.
    #[arg(long)]
    auth_required_scope: Vec<String>,
    /// The per-tool policy: `tool|prompt|resource|upstream PATTERN SCOPE[,SCOPE…]` per line.
    #[arg(long)]
    auth_policy: Option<std::path::PathBuf>,
    /// The annotation default: tools not annotated `readOnlyHint: true` need this scope.
    #[arg(long)]
    auth_write_scope: Option<String>,
    /// Serve a non-loopback --listen address without authorization (anyone who reaches the
    /// port may use every session and tool).
    #[arg(long)]
    allow_unauthenticated: bool,
    /// Tokens one --auth-tokens file may list.
    #[arg(long, default_value_t = config::AUTH_TOKENS_MAX)]
    auth_tokens_max: usize,
    /// Rules one --auth-policy file may hold.
    #[arg(long, default_value_t = config::AUTH_POLICY_RULES_MAX)]
    auth_policy_rules_max: usize,
    /// Log lines on stderr: text (colour only on a terminal) or json (one object a line).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormatFlag,
    /// Log filter in RUST_LOG syntax, e.g. debug or tidemark::legacy=debug,info (default:
    /// RUST_LOG, else info). Applied again on SIGHUP.
    #[arg(long)]
    log_level: Option<String>,
    /// Lines one kind of log event may write per second; the rest become one "N more
    /// suppressed" line.
    #[arg(long, default_value_t = config::LOG_EVENTS_PER_KIND_PER_SEC)]
    log_events_per_kind_per_sec: u32,
    /// Interval of the info-level count of refusals (each refusal is a debug line).
    #[arg(long, default_value_t = config::LOG_REFUSAL_SUMMARY_SECS)]
    log_refusal_summary_secs: u64,
    /// A token-bucket rate limit, SCOPE=COUNT/UNIT[/BURST] (repeatable): SCOPE client (per
    /// subject, else peer IP), tool:NAME (per client) or upstream:NAME (all clients); UNIT s,
    /// m or h; e.g. client=10/s/20. Over it: 429 + Retry-After (docs/rate-limits.md).
    #[arg(long)]
    rate_limit: Vec<String>,
    /// Rate-limit buckets one core keeps; past it the oldest bucket closest to full is
    /// evicted and its debt remembered, so a new client waits at most one interval.
    #[arg(long, default_value_t = config::RATE_BUCKETS_PER_CORE_MAX)]
    rate_buckets_per_core: usize,
    /// Leading bits of an IPv6 peer address that name one client for rate limits and the
    /// running keyed-call share (1..=128; authorization off): a host's /64 is one by default.
    #[arg(long, default_value_t = config::RATE_IPV6_PREFIX_DEFAULT)]
    rate_ipv6_prefix: u32,
    /// Mirror sessions, streams, events, keyed records and tasks to this Redis 7 / Valkey
    /// server, redis://HOST:PORT[/DB], so a peer node can adopt them if this one dies
    /// (docs/reliability.md). Off by default.
    #[arg(long, value_name = "URL")]
    durable: Option<String>,
    /// Lifetime of this node's liveness lease in the durable store; a peer adopts this
    /// node's sessions only after it has expired.
    #[arg(long, default_value_t = config::DURABLE_LEASE_MS)]
    durable_lease_ms: u64,
    /// Mirror records one core may queue for the store; past it the record's session is
    /// marked not durable (a worker never waits).
    #[arg(long, default_value_t = config::DURABLE_QUEUE_RECORDS)]
    durable_queue_records: usize,
    /// Bytes of mirror records one core may queue for the store.
    #[arg(long, default_value_t = config::DURABLE_QUEUE_BYTES)]
    durable_queue_bytes: usize,
    /// Records the mirror thread writes to the store in one pipelined batch.
    #[arg(long, default_value_t = config::DURABLE_BATCH_RECORDS)]
    durable_batch_records: usize,
    /// Bytes of records the mirror thread writes to the store in one pipelined batch (a batch
    /// takes at least one record).
    #[arg(long, default_value_t = config::DURABLE_BATCH_BYTES)]
    durable_batch_bytes: usize,
    /// Microseconds the mirror thread lets records gather after a batch that did not fill
    /// before it writes the next (0: at once): fewer, fuller batches cost the node less per
    /// record; a record a call waits for cuts it short. At most 100000.
    #[arg(long, default_value_t = config::DURABLE_LINGER_US)]
    durable_linger_us: u64,
    /// How long a non-idempotent tools/call of a durable session waits for the store to
    /// acknowledge its record before the tool starts (so an adopting peer never runs it
    /// again); past it the call starts, the session stops being durable, and it is counted.
    #[arg(long, default_value_t = config::DURABLE_WRITE_AHEAD_MS)]
    durable_write_ahead_ms: u64,
    /// Store lookups (adoptions of a dead node's sessions, its keyed records and tasks)
    /// waiting at once on this node; past it the request gets 503 + Retry-After.
    #[arg(long, default_value_t = config::DURABLE_ADOPTIONS_MAX)]
    durable_adoptions_max: usize,
}

impl Flags {
    fn into_config(self) -> Result<Config, ConfigError> {
        let threads = self
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let cfg = Config {
            listen: self.listen,
            path: self.path,
            threads,
            driver: match self.driver {
                DriverFlag::Auto => DriverChoice::Auto,
                DriverFlag::Uring => DriverChoice::Uring,
                DriverFlag::Epoll => DriverChoice::Epoll,
            },
            response_mode: match self.response_mode {
                ModeFlag::Auto => ResponseMode::Auto,
                ModeFlag::Sse => ResponseMode::Sse,
                ModeFlag::Json => ResponseMode::Json,
            },
            migration_policy: match self.migration_policy {
                PolicyFlag::Strict => MigrationPolicy::Strict,
                PolicyFlag::Off => MigrationPolicy::Off,
            },
            allowed_origins: self.allowed_origin,
            allowed_hosts: self.allowed_host,
            header_bytes_max: self.max_header_bytes,
            headers_max: self.max_headers,
            body_bytes_max: self.max_body_bytes,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            connections_per_core_max: self.max_connections_per_core,
            sessions_per_core_max: self.max_sessions_per_core,
            streams_per_session_max: self.max_streams_per_session,
            replay_events_max: self.replay_events,
            replay_bytes_max: self.replay_bytes,
            stream_retention: Duration::from_secs(self.stream_retention_secs),
            session_idle: Duration::from_secs(self.session_idle_secs),
            list_changed_min: Duration::from_millis(self.list_changed_min_ms),
            sse_retry_ms: self.sse_retry_ms,
            sse_keepalive: Duration::from_secs(self.sse_keepalive_secs),
            owed_wait: Duration::from_millis(self.owed_wait_ms),
            owed_timeout: Duration::from_secs(self.owed_timeout_secs),
            tls: match (self.tls_cert, self.tls_key) {
                (Some(cert), Some(key)) => Some(config::TlsFiles { cert, key }),
                // clap's `requires` refuses one without the other.
                _ => None,
            },
            metrics_listen: self.metrics_listen,
            otlp_endpoint: self.otlp_endpoint,
            otlp_sample_ratio: self.otlp_sample_ratio,
            otlp_queue_spans: self.otlp_queue_spans,
            otlp_batch_spans: self.otlp_batch_spans,
            drain: Duration::from_secs(self.drain_secs),
            node_id: self.node_id,
            write_buffer_bytes: self.write_buffer_bytes,
            core_buffer_bytes: self.core_buffer_bytes,
            held_per_session_max: self.max_held_per_session,
            builtin_tools: self.tools.as_deref().map(BuiltinSet::parse_list).transpose()?,
            upstreams: self
                .upstream
                .iter()
                .map(|u| config::UpstreamSpec::parse(u))
                .collect::<Result<_, _>>()?,
            upstream_env: self
                .upstream_env
                .iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(ConfigError::BadUpstreamEnv(kv.clone())),
                })
                .collect::<Result<_, _>>()?,
            upstream_isolation: self.upstream_isolation,
            upstream_processes_max: self.upstream_max_processes,
            upstream_timeout: Duration::from_secs(self.upstream_timeout_secs),
            upstream_call_max: Duration::from_secs(self.upstream_call_max_secs),
            upstream_start_timeout: Duration::from_secs(self.upstream_start_timeout_secs),
            upstream_line_bytes: self.upstream_line_bytes,
            upstream_catalog_bytes_per_core: self.upstream_catalog_bytes_per_core,
            upstream_queue_bytes: self.upstream_queue_bytes,
            upstream_kill_grace: Duration::from_millis(self.upstream_kill_grace_ms),
            cache_ttl_ms: self.cache_ttl_ms,
            request_state_ttl: Duration::from_secs(self.request_state_ttl_secs),
            idempotency_keys_per_core_max: self.max_idempotency_keys_per_core,
            idempotency_bytes_per_core: self.idempotency_bytes_per_core,
            client_requests_pending_max: self.max_pending_client_requests,
            keyed_calls_running_per_client_max: self.max_running_keyed_calls_per_client,
            keyed_call_max: Duration::from_secs(self.keyed_call_max_secs),
            tasks_per_core_max: self.max_tasks_per_core,
            task_retention: Duration::from_secs(self.task_retention_secs),
            task_bytes_per_core: self.task_bytes_per_core,
            task_input_requests_max: self.max_task_input_requests,
            task_poll_interval: Duration::from_millis(self.task_poll_interval_ms),
            auth_jwks_file: self.auth_jwks_file,
            auth_jwks_url: self.auth_jwks_url,
            auth_jwks_refresh: Duration::from_secs(self.auth_jwks_refresh_secs),
            auth_jwks_min_refetch: Duration::from_secs(self.auth_jwks_min_refetch_secs),
            auth_leeway: Duration::from_secs(self.auth_leeway_secs),
            upstream_credentials: self.upstream_credentials,
            upstream_forward_authorization: self.upstream_forward_authorization,
            upstream_allow_tools: self.upstream_allow_tools,
            upstream_deny_tools: self.upstream_deny_tools,
            upstream_allow_prompts: self.upstream_allow_prompts,
            upstream_deny_prompts: self.upstream_deny_prompts,
            upstream_allow_resources: self.upstream_allow_resources,
            upstream_deny_resources: self.upstream_deny_resources,
            upstream_prefix: self.upstream_prefix,
            upstream_filter_globs_max: self.upstream_filter_globs_max,
            resource_uri_bytes_max: self.resource_uri_bytes_max,
            upstream_policy: self.upstream_policy,
            upstream_protocol: self.upstream_protocol,
            upstream_breaker_failures: self.upstream_breaker_failures,
            upstream_input_rounds_max: self.upstream_input_rounds_max,
            upstream_breaker_pause: Duration::from_millis(self.upstream_breaker_pause_ms),
            auth: config::AuthConfig {
                tokens_file: self.auth_tokens,
                resource: self.auth_resource,
                issuers: self.auth_issuer,
                scopes_supported: self.auth_scopes_supported,
                required_scopes: self.auth_required_scope,
                policy_file: self.auth_policy,
                write_scope: self.auth_write_scope,
                allow_unauthenticated: self.allow_unauthenticated,
                tokens_max: self.auth_tokens_max,
                policy_rules_max: self.auth_policy_rules_max,
                cache_lifetime: Duration::from_secs(self.auth_cache_secs),
            },
            config_file: None,
            startup_warnings: Vec::new(),
            log_format: match self.log_format {
                LogFormatFlag::Text => config::LogFormat::Text,
                LogFormatFlag::Json => config::LogFormat::Json,
            },
            log_level: self.log_level,
            log_events_per_kind_per_sec: self.log_events_per_kind_per_sec,
            log_refusal_summary: Duration::from_secs(self.log_refusal_summary_secs),
            rate_limits: self
                .rate_limit
                .iter()
                .map(|r| config::RateLimit::parse(r))
                .collect::<Result<_, _>>()?,
            rate_buckets_per_core_max: self.rate_buckets_per_core,
            rate_ipv6_prefix: self.rate_ipv6_prefix,
            durable: self.durable.as_deref().map(config::DurableUrl::parse).transpose()?.map(
                |url| config::DurableConfig {
                    url,
                    lease: Duration::from_millis(self.durable_lease_ms),
                    queue_records_max: self.durable_queue_records,
                    queue_bytes_max: self.durable_queue_bytes,
                    batch_records_max: self.durable_batch_records,
                    batch_bytes_max: self.durable_batch_bytes,
                    linger: Duration::from_micros(self.durable_linger_us),
                    write_ahead: Duration::from_millis(self.durable_write_ahead_ms),
                    adoptions_max: self.durable_adoptions_max,
                },
            ),
        };
        if let Some(path) = &self.request_state_key_file {
            let bytes = crate::fsread::read(path, config::REQUEST_STATE_KEY_FILE_BYTES_MAX)
                .map_err(|e| ConfigError::KeyFile(format!("{}: {e}", path.display())))?;
            if bytes.len() < crate::modern::state::KEY_BYTES {
                let message = format!(
                    "{}: at least {} bytes of key material needed",
                    path.display(),
                    crate::modern::state::KEY_BYTES
                );
                return Err(ConfigError::KeyFile(message));
            }
            crate::modern::state::set_key_material(&bytes);
        }
        Ok(cfg)
    }
}

impl Config {
    /// The configuration the process's command-line flags describe (the `tidemark` binary's
    /// flags). Prints usage and exits on a malformed flag, as command-line tools do; a value
    /// that parses but cannot be served is an `Err`. The result is checked again by
    /// `Server::run`.
    ///
    /// Each flag may also come from a `TIDEMARK_*` environment variable or the `--config`
    /// TOML file (flag > env > file > default; docs/configuration.md). Unknown `TIDEMARK_*`
    /// variables are warnings that `init_logging` logs. `--print-config` prints the effective configuration
    /// and exits 0.
    pub fn from_args() -> Result<Config, ConfigError> {
        let argv: Vec<OsString> = std::env::args_os().collect();
        let env: Vec<(String, String)> = std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect();
        let resolved = match layers::resolve(Flags::command(), &argv, &env) {
            Ok(resolved) => resolved,
            Err(ResolveError::Clap(error)) => error.exit(),
            Err(ResolveError::Layer(error)) => return Err(ConfigError::Layer(error.to_string())),
        };
        if resolved.print {
            // No subscriber exists yet, and none will: the warnings go straight to stderr.
            for warning in &resolved.warnings {
                eprintln!("warning: {warning}");
            }
            print!("{}", layers::print_config(&Flags::command(), &resolved));
            std::process::exit(0);
        }
        config_of(resolved, &argv, &env)
    }

    /// The command line `from_args` parses, as clap's `Command`: every flag with its help and
    /// default. `docs/flags.md`'s table is rendered from it (`tests/docs.rs`), so the two agree.
    pub fn command() -> clap::Command {
        Flags::command()
    }

    /// `from_args` over an explicit argument list (the first item is the program name),
    /// without the process's environment: a `--config FILE` among `args` is read, and
    /// `--print-config` changes nothing here.
    pub fn try_from_args<I, T>(args: I) -> Result<Config, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        try_from_layers(args, &[])
    }
}

/// `try_from_args` with `env` as the environment (`TIDEMARK_*` variables; others ignored).
pub(crate) fn try_from_layers<I, T>(args: I, env: &[(String, String)]) -> Result<Config, String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let resolved = match layers::resolve(Flags::command(), &argv, env) {
        Ok(resolved) => resolved,
        Err(ResolveError::Clap(error)) => return Err(error.to_string()),
        Err(ResolveError::Layer(error)) => return Err(error.to_string()),
    };
    config_of(resolved, &argv, env).map_err(|e| e.to_string())
}

/// The `Config` of resolved matches, remembering the file (its shadowed keys, and the command
/// line and `TIDEMARK_*` environment to resolve it again with) for SIGHUP.
fn config_of(
    resolved: Resolved,
    argv: &[OsString],
    env: &[(String, String)],
) -> Result<Config, ConfigError> {
    let flags = Flags::from_arg_matches(&resolved.matches)
        .map_err(|e| ConfigError::Layer(e.to_string()))?;
    let mut cfg = flags.into_config()?;
    cfg.startup_warnings = resolved.warnings.clone();
    cfg.config_file = resolved.file.as_ref().map(|file| ConfigFileOrigin {
        path: file.path.clone(),
        shadowed: resolved.shadowed_file_keys(),
        relaunch: crate::config::Relaunch {
            argv: argv.to_vec(),
            env: (env.iter())
                .filter(|(name, _)| name.starts_with(layers::ENV_PREFIX))
                .cloned()
                .collect(),
        },
    });
    Ok(cfg)
}

/// The configuration `origin` was resolved to, resolved again over what its file says now
/// (SIGHUP); why not, when the file or a value no longer loads.
pub(crate) fn reresolve(origin: &ConfigFileOrigin) -> Result<Config, String> {
    try_from_layers(origin.relaunch.argv.iter().cloned(), &origin.relaunch.env)
}

/// The `--config` file read again against the binary's flags (SIGHUP): its values by key, or
/// why it no longer loads.
pub(crate) fn reread_config_file(path: &std::path::Path) -> Result<FileValues, LayerError> {
    layers::read_file(&Flags::command(), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_a_line_of_help() {
        // Goal: `--help` explains every setting (an operator reads it before the README).
        // Method: walk clap's own argument list; a flag without a doc comment has no help.
        let command = Flags::command();
        let silent: Vec<String> = command
            .get_arguments()
            .filter(|arg| arg.get_long().is_some() && arg.get_help().is_none())
            .map(|arg| format!("--{}", arg.get_long().unwrap_or_default()))
            .collect();
        assert!(silent.is_empty(), "flags without help: {silent:?}");
    }

    #[test]
    fn flags_map_onto_the_config_and_tools_default_to_unset() {
        // Goal: the binary's flags reach Config. Method: parse a few argument lists.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.listen, config::LISTEN_DEFAULT.parse().expect("address"));
        assert_eq!(cfg.builtin_tools, None);
        let args = ["tidemark", "--listen", "127.0.0.1:0", "--tools", "conformance,demo"];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.builtin_tools, Some(vec![BuiltinSet::Conformance, BuiltinSet::Demo]));
        let cfg = Config::try_from_args(["tidemark", "--tools", "none"]).expect("parses");
        assert_eq!(cfg.builtin_tools, Some(vec![]));
        let bad = Config::try_from_args(["tidemark", "--tools", "demo,bogus"]).expect_err("bogus");
        assert!(bad.contains("\"bogus\"") && bad.contains("demo, conformance"), "{bad}");
        assert!(Config::try_from_args(["tidemark", "--no-such-flag"]).is_err());
    }

    #[test]
    fn durable_linger_takes_its_largest_value_and_refuses_past_it() {
        // Goal: --durable-linger-us is 0..=DURABLE_LINGER_US_MAX, refused past it with the
        // bound named. Method: parse the default, zero, the limit and one past it.
        let with = |linger: &str| {
            let args = ["tidemark", "--durable", "redis://127.0.0.1:6379", "--durable-linger-us"];
            Config::try_from_args(args.into_iter().chain([linger]))
        };
        let linger = |cfg: Config| cfg.durable.expect("durable").linger.as_micros() as u64;
        let args = ["tidemark", "--durable", "redis://127.0.0.1:6379"];
        let cfg = Config::try_from_args(args).expect("defaults parse");
        assert_eq!(linger(cfg), config::DURABLE_LINGER_US);
        assert_eq!(linger(with("0").expect("zero: at once")), 0);
        let max = config::DURABLE_LINGER_US_MAX.to_string();
        assert_eq!(linger(with(&max).expect("the limit")), config::DURABLE_LINGER_US_MAX);
        let past = (config::DURABLE_LINGER_US_MAX + 1).to_string();
        let bad = with(&past).expect("parses").validate().expect_err("past the limit");
        assert!(bad.to_string().contains("at most 100000"), "{bad}");
        with(&max).expect("parses").validate().expect("the limit is valid");
    }

    #[test]
    fn node_id_defaults_to_zero_takes_its_largest_value_and_refuses_past_it() {
        // Goal: --node-id is 0..=NODE_ID_MAX (the ids' two-digit prefix); past it is refused at
        // parse time with the range named. Method: parse the default, the limit, one past it.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.node_id, config::NODE_ID_DEFAULT);
        let max = config::NODE_ID_MAX.to_string();
        let cfg = Config::try_from_args(["tidemark", "--node-id", &max]).expect("parses");
        assert_eq!(cfg.node_id, config::NODE_ID_MAX);
        let past = (u32::from(config::NODE_ID_MAX) + 1).to_string();
        let bad = Config::try_from_args(["tidemark", "--node-id", &past]).expect_err("past max");
        assert!(bad.contains("0..=255"), "{bad}");
        assert!(Config::try_from_args(["tidemark", "--node-id", "-1"]).is_err());
    }

    #[test]
    fn drain_secs_defaults_parses_and_rejects_zero() {
        // Goal: --drain-secs reaches Config, its smallest value (1) is taken and zero is
        // rejected like every limit. Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.drain, Duration::from_secs(config::DRAIN_SECS));
        let cfg = Config::try_from_args(["tidemark", "--drain-secs", "1"]).expect("parses");
        assert_eq!(cfg.drain, Duration::from_secs(1));
        assert_eq!(cfg.validate(), Ok(()));
        let cfg = Config::try_from_args(["tidemark", "--drain-secs", "0"]).expect("parses");
        assert_eq!(cfg.validate(), Err(ConfigError::Zero("drain-secs")));
    }

    #[test]
    fn task_flags_reach_the_config_and_zero_is_rejected() {
        // Goal: the tasks extension's five flags reach Config (defaults = the constants) and
        // none of them takes zero. Method: parse defaults, one list of values, then each zero.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.tasks_per_core_max, config::TASKS_PER_CORE_MAX);
        assert_eq!(cfg.task_retention, Duration::from_secs(config::TASK_RETENTION_SECS));
        let args = [
            "tidemark",
            "--max-tasks-per-core",
            "1",
            "--task-retention-secs",
            "2",
            "--task-bytes-per-core",
            "3",
            "--max-task-input-requests",
            "4",
            "--task-poll-interval-ms",
            "5",
        ];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.tasks_per_core_max, 1);
        assert_eq!(cfg.task_retention, Duration::from_secs(2));
        assert_eq!(cfg.task_bytes_per_core, 3);
        assert_eq!(cfg.task_input_requests_max, 4);
        assert_eq!(cfg.task_poll_interval, Duration::from_millis(5));
        assert_eq!(cfg.validate(), Ok(()));
        for flag in [
            "max-tasks-per-core",
            "task-retention-secs",
            "task-bytes-per-core",
            "max-task-input-requests",
            "task-poll-interval-ms",
        ] {
            let cfg =
                Config::try_from_args(["tidemark", &format!("--{flag}"), "0"]).expect("parses");
            assert_eq!(cfg.validate(), Err(ConfigError::Zero(flag)));
        }
    }

    #[test]
    fn tool_set_lists_accept_known_names_and_reject_the_rest() {
        // Goal: the --tools flag. Method: table of accepted specs, then of rejected ones.
        let accepted = [
            ("demo", vec![BuiltinSet::Demo]),
            ("conformance", vec![BuiltinSet::Conformance]),
            ("demo,conformance", vec![BuiltinSet::Demo, BuiltinSet::Conformance]),
            (" conformance , demo ", vec![BuiltinSet::Conformance, BuiltinSet::Demo]),
            ("demo,demo", vec![BuiltinSet::Demo]),
            ("none", vec![]),
        ];
        for (spec, sets) in accepted {
            assert_eq!(BuiltinSet::parse_list(spec), Ok(sets), "{spec:?}");
        }
        for spec in [
            "",
            " ",
            "demo,",
            ",demo",
            "demo,,conformance",
            "Demo",
            "everything",
            "demo;x",
            "none,demo",
        ] {
            let error = BuiltinSet::parse_list(spec).expect_err(spec).to_string();
            assert!(error.contains("demo, conformance"), "{spec:?}: {error}");
        }
    }

    #[test]
    fn jwks_flags_reach_the_config_and_the_leeway_is_capped() {
        // Goal: the JWT/JWKS flags reach Config (defaults = the constants), the leeway is
        // taken at its cap and refused one past it, the refresh intervals refuse zero, and the
        // JWKS URL must be http(s). Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.auth_leeway, Duration::from_secs(config::AUTH_LEEWAY_SECS));
        assert_eq!(cfg.auth_jwks_refresh, Duration::from_secs(config::JWKS_REFRESH_SECS));
        assert_eq!(cfg.auth_jwks_min_refetch, Duration::from_secs(config::JWKS_MIN_REFETCH_SECS));
        let max = config::AUTH_LEEWAY_SECS_MAX.to_string();
        let args = [
            "tidemark",
            "--auth-jwks-url",
            "https://as.example/jwks",
            "--auth-jwks-file",
            "/etc/tidemark/jwks.json",
            "--auth-leeway-secs",
            max.as_str(),
        ];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.auth_jwks_url, ["https://as.example/jwks"]);
        assert_eq!(cfg.auth_jwks_file, [std::path::PathBuf::from("/etc/tidemark/jwks.json")]);
        assert_eq!(cfg.validate(), Ok(()));
        let over = (config::AUTH_LEEWAY_SECS_MAX + 1).to_string();
        let cfg = Config::try_from_args(["tidemark", "--auth-leeway-secs", &over]).expect("parses");
        let refused = Err(ConfigError::LeewayTooLong(config::AUTH_LEEWAY_SECS_MAX + 1));
        assert_eq!(cfg.validate(), refused);
        for flag in ["auth-jwks-refresh-secs", "auth-jwks-min-refetch-secs"] {
            let cfg =
                Config::try_from_args(["tidemark", &format!("--{flag}"), "0"]).expect("parses");
            assert_eq!(cfg.validate(), Err(ConfigError::Zero(flag)));
        }
        let cfg = Config::try_from_args(["tidemark", "--auth-jwks-url", "file:///etc/passwd"])
            .expect("parses");
        assert!(matches!(cfg.validate(), Err(ConfigError::BadJwksUrl(_))));
    }

    #[test]
    fn auth_cache_secs_is_bounded() {
        // Goal: `--auth-cache-secs` defaults to its constant, is taken at its cap, refused one
        // past it and at zero (never "forever"). Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.auth.cache_lifetime, Duration::from_secs(config::AUTH_CACHE_SECS));
        let with = |secs: u64| {
            Config::try_from_args(["tidemark", "--auth-cache-secs", &secs.to_string()])
                .expect("parses")
                .validate()
        };
        assert_eq!(with(config::AUTH_CACHE_SECS_MAX), Ok(()));
        assert_eq!(with(1), Ok(()));
        let over = config::AUTH_CACHE_SECS_MAX + 1;
        assert_eq!(with(over), Err(ConfigError::AuthCacheTooLong(over)));
        assert_eq!(with(0), Err(ConfigError::Zero("auth-cache-secs")));
    }
}

// After `mod tests`: the env, file and `--print-config` tests of the layers over these flags.
#[cfg(test)]
#[path = "cli_layers_tests.rs"]
mod layers_tests;
