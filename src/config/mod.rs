//! Every limit and tunable of the server, in sections: `Config` is a set of them (`server`,
//! `http`, `sessions`, `trace`, `upstream`, `auth`, `modern`, `log`, `rate`, `durable`), each
//! in its own file with its limits (documented named constants, their relations checked at
//! compile time), its defaults, its validation and its clap flags (which `cli` flattens into
//! the command line). Below the sections: `error` (`ConfigError`, the zero check they share)
//! and the values they parse (`upstream_spec`, `filter`, `rate_limit`, `durable_url`,
//! `jwks`); no section file uses this one, so the folder has no import cycle.
//!
//! Owns: `Config` and `Config::validate` (each section's, then the one check across
//! sections). Never: reads the environment or touches I/O.

use std::path::PathBuf;

mod auth;
mod durable;
mod durable_url;
mod error;
mod filter;
mod http;
mod jwks;
mod log;
mod modern;
mod rate;
mod rate_limit;
mod server;
mod sessions;
mod trace;
mod upstream;
mod upstream_spec;

// The sections, each with its limits, defaults, validation and flags.
pub use auth::AuthConfig;
pub use durable::{DurableConfig, DurableWriter};
pub use http::HttpConfig;
pub use log::LogConfig;
pub use modern::ModernConfig;
pub use rate::RateConfig;
pub use server::ServerConfig;
pub use sessions::SessionsConfig;
pub use trace::TraceConfig;
pub use upstream::UpstreamConfig;
// Their flags, which `cli` flattens into its command line.
pub(crate) use auth::{AuthFlags, JwtFlags};
pub(crate) use durable::DurableFlags;
pub(crate) use http::HttpFlags;
pub(crate) use log::LogFlags;
pub(crate) use modern::ModernFlags;
pub(crate) use rate::RateFlags;
pub(crate) use server::{ListenerFlags, NodeFlags, ServerFlags};
pub(crate) use sessions::{BufferFlags, ModeFlags, SessionFlags};
pub(crate) use trace::TraceFlags;
pub(crate) use upstream::UpstreamFlags;
// The values the sections hold, and why one is refused.
pub use durable_url::{ClusterUrl, DurableStore, DurableUrl, SentinelUrl};
pub use error::ConfigError;
pub(crate) use filter::{glob_matches, FilterError, UpstreamFilters};
pub(crate) use jwks::jwks_sources;
pub use log::LogFormat;
pub use modern::KeyMaterial;
pub use rate_limit::RateLimit;
pub(crate) use rate_limit::RateScope;
pub use server::{BuiltinSet, DriverChoice, FileMode, TlsFiles};
pub use sessions::{MigrationPolicy, ResponseMode};
pub use upstream_spec::{Isolation, UpstreamSpec};
pub(crate) use upstream_spec::{PrefixPolicy, UpstreamAuth, UpstreamPolicy, UpstreamProtocol};
pub(crate) use upstream_spec::{UpstreamSpecError, UpstreamTarget};
// The limits other modules read.
#[cfg(test)]
pub(crate) use auth::{AUTH_CACHE_SECS, AUTH_CACHE_SECS_MAX, AUTH_LEEWAY_SECS_MAX};
pub(crate) use auth::{AUTH_FILE_BYTES_MAX, AUTH_LEEWAY_SECS, AUTH_TOKEN_BYTES_MAX};
pub(crate) use auth::{JWKS_BYTES_MAX, JWKS_FETCH_TIMEOUT_SECS, JWKS_KEYS_MAX};
#[cfg(test)]
pub(crate) use auth::{JWKS_MIN_REFETCH_SECS, JWKS_REFRESH_SECS};
pub(crate) use durable::DURABLE_REPLICAS_WAIT_MS_MAX;
#[cfg(test)]
pub(crate) use durable::{DURABLE_CLAIMS_TTL_MS_MAX, DURABLE_CLAIMS_TTL_MS_MIN};
#[cfg(test)]
pub(crate) use durable::{DURABLE_CLUSTER_REDIRECTS_MAX, DURABLE_CLUSTER_REDIRECTS_MOST};
#[cfg(test)]
pub(crate) use durable::{DURABLE_LINGER_US, DURABLE_LINGER_US_MAX, DURABLE_REPLICAS_MAX};
#[cfg(test)]
pub(crate) use durable::{DURABLE_STOP_WRITE_MS, DURABLE_STOP_WRITE_MS_MAX};
pub(crate) use filter::RESOURCE_URI_BYTES_MAX;
#[cfg(test)]
pub(crate) use http::BODY_BYTES_MAX;
pub(crate) use http::HEADERS_CAP;
pub(crate) use http::{CORS_MAX_AGE_SECS, CORS_PARAM_HEADERS_MAX, JSON_DEPTH_MAX};
pub(crate) use log::AUDIT_FLUSH_MS;
pub(crate) use log::{LOG_EVENTS_PER_KIND_PER_SEC, LOG_REFUSAL_SUMMARY_SECS};
pub(crate) use modern::REQUEST_STATE_KEY_FILE_BYTES_MAX;
#[cfg(test)]
pub(crate) use modern::{TASKS_PER_CORE_MAX, TASK_RETENTION_SECS};
pub(crate) use rate_limit::RATE_BUCKETS_PER_CORE_MIN;
pub(crate) use server::{
    ADMIN_CONNECTIONS_MAX, ADMIN_HEAD_BYTES_MAX, ADMIN_IO_TIMEOUT_MS, DRAIN_FLUSH_MS,
    DRAIN_RETRY_AFTER_SECS, HANDOFF_INBOX_MAX, LISTEN_BACKLOG, TLS_FILE_BYTES_MAX,
};
#[cfg(test)]
pub(crate) use server::{DRAIN_SECS, LISTEN_DEFAULT, NODE_ID_DEFAULT, NODE_ID_MAX};
pub(crate) use sessions::{
    REPLAY_BYTES_MOST, REPLAY_EVENTS_MOST, REPLAY_SPARE_PAGES_MAX, UNWRITTEN_SHARE_DIVISOR,
    WINDOW_BYTES_MIN,
};
pub(crate) use trace::{
    ATTRIBUTE_VALUE_BYTES_MAX, OTLP_EXPORT_INTERVAL_MS, OTLP_EXPORT_TIMEOUT_SECS,
};
pub(crate) use upstream::UPSTREAM_CREDENTIALS_BYTES_MAX;
#[cfg(test)]
pub(crate) use upstream::UPSTREAM_EXCHANGE_ANSWER_BYTES;
pub(crate) use upstream_spec::TOOL_NAME_BYTES_MAX;
#[cfg(test)]
pub(crate) use upstream_spec::UPSTREAM_NAME_BYTES_MAX;

/// Everything a worker needs to know, in sections (one file each, with its limits, defaults,
/// validation and flags), checked once by `validate`. An embedder starts from
/// `Config::default()` (or `Config::from_args`) and changes the sections' public fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Where and how the process serves (`--listen`, `--path`, `--threads`, `--driver`,
    /// `--tools`, TLS, `--metrics-listen`, `--drain-secs`, `--node-id`).
    pub server: ServerConfig,
    /// The HTTP rules and bounds of the MCP endpoint (`--allowed-*`, `--max-header*`,
    /// `--max-body-bytes`, the connection timeouts and count).
    pub http: HttpConfig,
    /// Legacy sessions, their streams, replay rings and buffers.
    pub sessions: SessionsConfig,
    /// OpenTelemetry traces (`--otlp-*`).
    pub trace: TraceConfig,
    /// The upstream set and the bridge's bounds (`--upstream*`).
    pub upstream: UpstreamConfig,
    /// Authorization (`--auth-*`, `--allow-unauthenticated`).
    pub auth: AuthConfig,
    /// The 2026-07-28 path: MRTR state, Idempotency-Key records, keyed calls, tasks.
    pub modern: ModernConfig,
    /// The log (`--log-*`).
    pub log: LogConfig,
    /// Rate limits (`--rate-*`).
    pub rate: RateConfig,
    /// The durable mirror (`--durable*`, CONTRACT §10); `None` (the default) keeps every
    /// session in this process only.
    pub durable: Option<DurableConfig>,
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
            server: ServerConfig::default(),
            http: HttpConfig::default(),
            sessions: SessionsConfig::default(),
            trace: TraceConfig::default(),
            upstream: UpstreamConfig::default(),
            auth: AuthConfig::with_limits(),
            modern: ModernConfig::default(),
            log: LogConfig::default(),
            rate: RateConfig::default(),
            durable: None,
            config_file: None,
            startup_warnings: Vec::new(),
        }
    }
}

impl Config {
    /// Smallest sensible limits, for tests that probe behaviour at the limits.
    pub fn test_min() -> Config {
        let mut cfg = Config::default();
        cfg.server.listen = "127.0.0.1:0".parse().expect("invariant: constant address parses");
        cfg.http.header_bytes_max = 1024;
        cfg.http.headers_max = 16;
        cfg.http.body_bytes_max = 4096;
        cfg.sessions.sessions_per_core_max = 4;
        cfg.sessions.streams_per_session_max = 4;
        cfg.sessions.replay_events_max = 16;
        cfg.sessions.replay_bytes_max = 4096;
        cfg
    }

    /// This configuration with the upstream set of `other`: the `--upstream`s and their
    /// per-upstream `NAME=…` flags (filters, prefix, failure policy, era) — what a SIGHUP may
    /// change (`layers::RELOADABLE_KEYS`); every other setting stays this one's.
    pub(crate) fn with_upstream_set_of(&self, other: &Config) -> Config {
        Config { upstream: self.upstream.with_set_of(&other.upstream), ..self.clone() }
    }

    /// Each `--upstream`'s filters, in order (`UpstreamConfig::filters`).
    pub(crate) fn upstream_filters(&self) -> Result<Vec<UpstreamFilters>, FilterError> {
        self.upstream.filters()
    }

    /// Each `--upstream`'s prefix policy, in order (`UpstreamConfig::prefixes`).
    pub(crate) fn upstream_prefixes(&self) -> Result<Vec<PrefixPolicy>, UpstreamSpecError> {
        self.upstream.prefixes()
    }

    /// Each `--upstream`'s failure policy, in order (`UpstreamConfig::policies`).
    pub(crate) fn upstream_policies(&self) -> Result<Vec<UpstreamPolicy>, ConfigError> {
        self.upstream.policies()
    }

    /// Each `--upstream`'s `--upstream-auth`, in order (`UpstreamConfig::auths`).
    pub(crate) fn upstream_auths(&self) -> Result<Vec<UpstreamAuth>, ConfigError> {
        self.upstream.auths()
    }

    /// Each `--upstream`'s era, in order (`UpstreamConfig::protocols`).
    pub(crate) fn upstream_protocols(&self) -> Result<Vec<UpstreamProtocol>, ConfigError> {
        self.upstream.protocols()
    }

    /// Checks every value once, section by section, so workers can rely on them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.http.validate()?;
        self.sessions.validate()?;
        self.trace.validate()?;
        self.upstream.validate()?;
        self.auth.validate()?;
        // An exchange trades the caller's validated token: without authorization there is none.
        if self.upstream.auths()?.contains(&UpstreamAuth::Exchange) && !self.auth_enabled() {
            return Err(ConfigError::AuthFlagWithoutAuth("--upstream-auth NAME=exchange"));
        }
        self.modern.validate()?;
        self.log.validate()?;
        self.rate.validate()?;
        if let Some(durable) = &self.durable {
            durable.validate()?;
        }
        // Anyone who reaches a non-loopback port could otherwise use every session and tool
        // (issue 18): serving them must be asked for by name.
        let listen = self.server.listen;
        if !listen.ip().is_loopback() && !self.auth_enabled() && !self.auth.allow_unauthenticated {
            return Err(ConfigError::Unauthenticated(listen));
        }
        Ok(())
    }

    /// True when some verifier is configured (static tokens, or JWT access tokens over a
    /// JWK Set), so every request must carry a valid token.
    pub fn auth_enabled(&self) -> bool {
        self.auth.verifies()
    }
}

#[cfg(test)]
mod tests {
    use super::server::THREADS_MAX;
    use super::*;
    use std::time::Duration;

    #[test]
    fn defaults_and_test_min_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
        assert_eq!(Config::test_min().validate(), Ok(()));
    }

    #[test]
    fn zero_and_bad_values_are_rejected() {
        let with = |change: fn(&mut Config)| {
            let mut c = Config::default();
            change(&mut c);
            c.validate()
        };
        assert_eq!(with(|c| c.sessions.replay_events_max = 3), Err(ConfigError::NotPowerOfTwo(3)));
        // The replay ring's 32-bit slot fields, at N and N + 1 (the next power of two for
        // events: only powers of two are taken).
        let (events, bytes) = (REPLAY_EVENTS_MOST, REPLAY_BYTES_MOST);
        assert_eq!(with(|c| c.sessions.replay_events_max = REPLAY_EVENTS_MOST), Ok(()));
        let over = with(|c| c.sessions.replay_events_max = REPLAY_EVENTS_MOST * 2);
        assert_eq!(over, Err(ConfigError::AboveMost("replay-events", events * 2, events)));
        assert_eq!(with(|c| c.sessions.replay_bytes_max = REPLAY_BYTES_MOST), Ok(()));
        let over = with(|c| c.sessions.replay_bytes_max = REPLAY_BYTES_MOST + 1);
        assert_eq!(over, Err(ConfigError::AboveMost("replay-bytes", bytes + 1, bytes)));
        let zero_body = with(|c| c.http.body_bytes_max = 0);
        assert_eq!(zero_body, Err(ConfigError::Zero("max-body-bytes")));
        let threads = with(|c| c.server.threads = THREADS_MAX + 1);
        assert_eq!(threads, Err(ConfigError::TooManyThreads(THREADS_MAX + 1, THREADS_MAX)));
        assert_eq!(with(|c| c.sessions.sse_retry_ms = 0), Err(ConfigError::Zero("sse-retry-ms")));
        let retention = with(|c| c.sessions.stream_retention = Duration::ZERO);
        assert_eq!(retention, Err(ConfigError::Zero("stream-retention-secs")));
        let drain = with(|c| c.server.drain = Duration::ZERO);
        assert_eq!(drain, Err(ConfigError::Zero("drain-secs")));
        let drain = with(|c| c.server.drain = Duration::from_secs(1));
        assert_eq!(drain, Ok(()), "one second, the smallest drain, is valid");
        let path = with(|c| c.server.path = "mcp".into());
        assert!(matches!(path, Err(ConfigError::BadPath(_))));
        let owed = with(|c| c.sessions.owed_wait = c.sessions.owed_timeout);
        assert_eq!(owed, Err(ConfigError::OwedWaitTooLong));
    }

    #[test]
    fn token_exchange_is_refused_where_no_one_caller_stands_behind_a_link() {
        // Goal: `--upstream-auth NAME=exchange` starts only for a named HTTP upstream with
        // per-session links, authorization on, and no forwarding of the client's token; a bad
        // mode is named. Method: validate a config per case.
        let with = |spec: &str, change: fn(&mut Config)| {
            let mut c = Config::default();
            c.auth.tokens_file = Some("/dev/null".into());
            c.upstream.specs = vec![UpstreamSpec::parse(spec).expect("spec")];
            c.upstream.auth = vec!["who=exchange".to_owned()];
            change(&mut c);
            c.validate()
        };
        let http = "who=http://127.0.0.1:9/mcp";
        assert_eq!(with(http, |_| {}), Ok(()));
        let shared = with(http, |c| c.upstream.isolation = Isolation::Shared);
        assert!(
            matches!(shared, Err(ConfigError::Exchange(ref n, why)) if n == "who" && why.contains("shared"))
        );
        let stdio = with("who=stdio:cat", |_| {});
        assert!(matches!(stdio, Err(ConfigError::Exchange(_, why)) if why.contains("HTTP")));
        let both = with(http, |c| c.upstream.forward_authorization = vec!["who".to_owned()]);
        assert!(matches!(both, Err(ConfigError::Exchange(_, why)) if why.contains("forward")));
        let open = with(http, |c| c.auth.tokens_file = None);
        assert_eq!(open, Err(ConfigError::AuthFlagWithoutAuth("--upstream-auth NAME=exchange")));
        let bad = with(http, |c| c.upstream.auth = vec!["who=forward".to_owned()]);
        assert_eq!(bad, Err(ConfigError::UpstreamAuth("who=forward".to_owned())));
        let shown = with(http, |c| c.upstream.isolation = Isolation::Shared).expect_err("shared");
        assert!(shown
            .to_string()
            .starts_with("--upstream-auth who=exchange: a shared upstream link"));
    }

    #[test]
    fn the_exchange_limits_take_their_most_and_refuse_one_more() {
        // Goal: `--upstream-exchange-answer-bytes` and `--upstream-exchange-queue-entries`
        // take values up to their most and refuse one more or zero, naming the flag. Method:
        // validate each at the most, one past it, and zero.
        use super::upstream::{
            UPSTREAM_EXCHANGE_ANSWER_BYTES_MAX, UPSTREAM_EXCHANGE_QUEUE_ENTRIES_MAX,
        };
        let answer = |value| {
            let mut c = Config::default();
            c.upstream.exchange_answer_bytes = value;
            c.validate()
        };
        let queue = |value| {
            let mut c = Config::default();
            c.upstream.exchange_queue_entries = value;
            c.validate()
        };
        let (answer_max, queue_max) =
            (UPSTREAM_EXCHANGE_ANSWER_BYTES_MAX, UPSTREAM_EXCHANGE_QUEUE_ENTRIES_MAX);
        assert_eq!(answer(answer_max), Ok(()));
        let over = answer(answer_max + 1).expect_err("over");
        assert_eq!(
            over.to_string(),
            format!(
                "--upstream-exchange-answer-bytes must be at most {answer_max}, got {}",
                answer_max + 1
            )
        );
        assert_eq!(answer(0), Err(ConfigError::Zero("upstream-exchange-answer-bytes")));
        assert_eq!(queue(queue_max), Ok(()));
        let over = queue(queue_max + 1);
        let name = "upstream-exchange-queue-entries";
        assert_eq!(over, Err(ConfigError::AboveMost(name, queue_max + 1, queue_max)));
        assert_eq!(queue(0), Err(ConfigError::Zero(name)));
    }
}
