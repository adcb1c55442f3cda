//! Why a configuration cannot be served (`ConfigError`, the operator's mistake), and the
//! zero and most checks every section's limits share (`nonzero`, `at_most`).
//!
//! Owns: `ConfigError`. Never: names a section's limit itself (a variant that reports one
//! carries it), so every section may use this file and it uses none of them.

use std::net::SocketAddr;

use super::durable_url::DurableUrlError;
use super::filter::FilterError;
use super::jwks::JwksSourceError;
use super::rate_limit::RateLimitError;
use super::upstream_spec::UpstreamSpecError;

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
    /// `--audit-log-keep` above `AUDIT_LOG_KEEP_MAX`.
    #[error("--audit-log-keep {0} is above its most, {1}")]
    AuditKeep(u32, u32),
    /// `--audit-log` given an empty path.
    #[error("--audit-log needs a file path or - (stdout)")]
    AuditPath,
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
    /// `--threads` is over `THREADS_MAX`: the value, and the limit.
    #[error("--threads must be at most {1}, got {0}")]
    TooManyThreads(usize, usize),
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
    /// An `--upstream-auth` value is not `NAME=static|exchange` with NAME `*` or an
    /// `--upstream`'s `NAME=`; the value as given.
    #[error(
        "--upstream-auth {0:?}: expected NAME=static|exchange (NAME an --upstream's NAME= or '*')"
    )]
    UpstreamAuth(String),
    /// `--upstream-auth NAME=exchange` for an upstream that cannot carry an exchanged token:
    /// its name, and why.
    #[error("--upstream-auth {0}=exchange: {1}")]
    Exchange(String, &'static str),
    /// `--auth-leeway-secs` is over `AUTH_LEEWAY_SECS_MAX`: the value, and the limit.
    #[error("--auth-leeway-secs must be at most {1}, got {0}")]
    LeewayTooLong(u64, u64),
    /// `--auth-cache-secs` is over `AUTH_CACHE_SECS_MAX`: the value, and the limit.
    #[error("--auth-cache-secs must be at most {1}, got {0}")]
    AuthCacheTooLong(u64, u64),
    /// An `--auth-jwks-*` source set-up that would mix issuers' keys (`jwks_sources`).
    #[error(transparent)]
    JwksSource(#[from] JwksSourceError),
    /// `--auth-jwks-url` is not an http:// or https:// URL.
    #[error("--auth-jwks-url must be an http:// or https:// URL, got {0:?}")]
    BadJwksUrl(String),
    /// `--upstream-forward-authorization` names no `--upstream NAME=http://…`.
    #[error("--upstream-forward-authorization {0:?}: no HTTP --upstream has that NAME=")]
    ForwardToUnknownUpstream(String),
    /// Two TCP addresses or two socket files in `--listen` (the operator's).
    #[error("--listen takes at most one HOST:PORT and at most one unix:PATH")]
    ListenTwice,
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
    /// A `--durable` value is neither `redis://HOST:PORT[/DB]` nor a well-formed
    /// `redis+sentinel://…` (the message says what is wrong).
    #[error(transparent)]
    DurableUrl(#[from] DurableUrlError),
    /// `--durable-lease-ms` is under `DURABLE_LEASE_MS_MIN`: the value, and the limit.
    #[error("--durable-lease-ms must be at least {1}, got {0}")]
    DurableLeaseTooShort(u64, u64),
    /// `--sse-first-write-hold-us` is over `SSE_FIRST_WRITE_HOLD_US_MAX`: the value, and the limit.
    #[error("--sse-first-write-hold-us must be at most {1}, got {0}")]
    FirstWriteHoldTooLong(u64, u64),
    /// `--durable-linger-us` is over `DURABLE_LINGER_US_MAX`: the value, and the limit.
    #[error("--durable-linger-us must be at most {1}, got {0}")]
    DurableLingerTooLong(u64, u64),
    /// A limit flag (its name, without `--`) is over its most: the value, and the most.
    #[error("--{0} must be at most {2}, got {1}")]
    AboveMost(&'static str, usize, usize),
    /// `--durable-replicas` is over `DURABLE_REPLICAS_MAX`: the value, and the limit.
    #[error("--durable-replicas must be at most {1}, got {0}")]
    DurableReplicasTooMany(u32, u32),
    /// `--durable-claims-ttl-ms` is outside `DURABLE_CLAIMS_TTL_MS_MIN..=_MAX`: the value, and
    /// the bounds.
    #[error("--durable-claims-ttl-ms must be {1} to {2}, got {0}")]
    DurableClaimsTtlOutOfRange(u64, u64, u64),
}

/// The first of `limits` (a flag's name without `--`, its value, its most) over its most, as the
/// error.
pub(crate) fn at_most(limits: &[(&'static str, usize, usize)]) -> Result<(), ConfigError> {
    match limits.iter().find(|(_, value, most)| value > most) {
        Some((name, value, most)) => Err(ConfigError::AboveMost(name, *value, *most)),
        None => Ok(()),
    }
}

/// The first of `limits` (a flag's name without `--`, its value) that is zero, as the error:
/// zero never means unlimited.
pub(crate) fn nonzero(limits: &[(&'static str, u128)]) -> Result<(), ConfigError> {
    match limits.iter().find(|(_, value)| *value == 0) {
        Some((name, _)) => Err(ConfigError::Zero(name)),
        None => Ok(()),
    }
}
