//! tidemark: an io_uring, thread-per-core MCP Streamable HTTP endpoint that never loses or
//! doubles a stream.
//!
//! # Embedding
//!
//! Serve your own tools by implementing [`Provider`] and handing a factory for it to
//! [`Server::provider`]; the server runs exactly as the `tidemark` binary does (the same flags
//! through [`Config::from_args`], threads, pinning, listeners, resumable streams and the
//! migration boundary). `examples/custom_tool.rs` is a complete program:
//!
//! ```no_run
//! use tidemark::{CallContext, Config, LocalBoxFuture, Provider, ProviderResult, Server};
//! use tidemark::{ToolInfo, Value};
//!
//! struct Hello;
//!
//! impl Provider for Hello {
//!     fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
//!         let schema = serde_json::json!({ "type": "object", "properties": {} });
//!         Box::pin(async move { Ok(vec![ToolInfo::new("hello", "Says hello.", schema)]) })
//!     }
//!
//!     fn call_tool<'a>(
//!         &'a self,
//!         _name: &'a str,
//!         _arguments: Value,
//!         _cx: CallContext,
//!     ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
//!         Box::pin(async { Ok(serde_json::json!({ "content": [{ "type": "text", "text": "hello" }] })) })
//!     }
//! }
//!
//! Server::new(Config::from_args()?).provider(|| Hello).run()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Map
//!
//! `CONTRACT §n` in a comment of this crate is section n of `docs/contract.md`, the wire
//! contract: what the server promises on the MCP endpoint where the MCP specification is silent
//! (`tests/docs.rs` checks that every cited section exists).
//!
//! Flow: socket → `runtime` (`conn`, the one stream driver) → `http` (the head) → `endpoint`
//! (HTTP rules, CORS, the era; `admit`: a POST decoded once) → `legacy` (sessions,
//! `migration`, streams over the `replay` ring) or `modern` (stateless 2026-07-28: `_meta`
//! checks, keys, tasks, listen) → `core`
//! (what both eras share on a core) → `dispatch` → `provider` (built-in tools, or `upstream`,
//! the bridge) → back as events rendered by `wire` → socket.
//!
//! The floors below are the layering, declared here once: a module uses only modules on lower
//! floors (so modules on one floor never use each other), and no files use each other, in a
//! pair or round a longer cycle. `tests/layering.rs` reads this table and the tree and fails on
//! any import that breaks it.
//!
//! | floor | module | owns |
//! | --- | --- | --- |
//! | 12 | `server` | `Server` (the public entry): listeners (one owner per port), one pinned thread + runtime per core, signals and the graceful drain, the banner; `upstreams` (the upstream set, built at start and again on SIGHUP); `unix` (the `--listen unix:PATH` socket file: one owner per file, its mode, removed after the drain) |
//! | 12 | `connect` | `tidemark connect URL`, the client-side bridge: stdio (a local client) to Streamable HTTP (any server), resuming a dropped stream with `GET` + `Last-Event-ID`, following a 409's hint, an `Idempotency-Key` on every `tools/call`, bounded backoff, -31006 when the outcome cannot be known (CONTRACT §12); plain threads, one blocking exchange each (`http`), one request's life (`call`) |
//! | 11 | `admin` | the admin listener: `/metrics`, `/status`, `/healthz`, `/readyz` |
//! | 11 | `cli` | the binary's flags → `Config` (`Config::from_args`), over the `layers` (env, `--config` file) |
//! | 10 | `runtime` | one core: driver choice, accept loop, session reaper; `conn` (one socket: buffers, timeouts, read → `endpoint::handle` → write), `stream` (the one stream driver over a `core::Source`), `handoff` (moving a connection to its owner core), `reload` (a new upstream set applied on the core: SIGHUP) |
//! | 9 | `endpoint` | HTTP rules at the MCP endpoint (path, Host/Origin, CORS, a POST's media types) and era selection; `admit` (a POST decoded once, labelled, its span and access, its era); the only module that sees both eras, and gathers their streams in one `Stream` |
//! | 8 | `legacy` | the 2025-era path: `LegacyCore` (sessions), streams with an explicit lifecycle, `migration` (the pure O(1) decision), `replay` (the ring), the call context's sink |
//! | 8 | `modern` | the 2026-07-28 path: `ModernCore` (keys, tasks), `_meta`/header checks, `server/discover`, input-required rounds (`state`), calls, `keyed`, `listen`, `tasks/`; its streams as `core::Source`s |
//! | 7 | `core` | one core's state both eras share (`Core`), the request, the shape of an era's answer (`Outcome`), and `Source`, the shape of a response stream the runtime drives |
//! | 6 | `dispatch` | MCP methods → providers; the tool table with each tool's idempotency; a provider's error as JSON-RPC |
//! | 5 | `upstream` | the bridge (`--upstream`): one provider per upstream (`Bridge`: its `Provider` impl in `provider`, its `links` and policy, a call's input `rounds`, its tool `listing` and names; `credentials` and `exchange`, what an upstream is presented: the operator's headers, or the caller's token exchanged (RFC 8693) off the worker cores); an MCP client (`peer`) over stdio children (`stdio`, their lives in `process`) or Streamable HTTP (`http/`) |
//! | 4 | `provider` | the public `Provider` trait, `CallContext`, `ProviderError`, `Value`; `builtin` (demo, conformance) |
//! | 3 | `auth` | authorization (OAuth 2.1 resource server): `Claims`, the verifier chain (`--auth-tokens` static tokens, then the JWT seam `TokenVerifier`), the per-connection token cache, the `WWW-Authenticate` challenges, the protected resource metadata (RFC 9728), the per-tool policy; `jwt` (JWT access tokens: signature, `aud`, `iss`, `exp`/`nbf`, scopes) over `jwks` (the issuer's keys, read off the worker cores) |
//! | 3 | `wire` | every answer as a value rendered in one place: HTTP statuses (`Status`), JSON-RPC codes (`Code`), refusals; every result and error body (`result`, `error`: no JSON-RPC written by hand elsewhere); the JSON-RPC envelope, SSE framing, the revisions, notification encoders, `param_headers` (SEP-2243's `x-mcp-header` declarations and header values, both directions), `owned_id` (the text layout of session and task ids, whose first digits name the owner node and core) |
//! | 2 | `layers` | the layers under the flags: the `--config` TOML file and `TIDEMARK_*` env, merged generically over clap's arguments (flag > env > file > default), each value's source (`--print-config`), the file's re-read (SIGHUP) |
//! | 2 | `logging` | the subscriber (`--log-format`, `--log-level`, colour only on a terminal), its SIGHUP reload, the per-kind rate limiter and its "N more suppressed" lines, the fixed field names and culprits |
//! | 2 | `tls` | the listeners' rustls `ServerConfig` from the PEM files (`--tls-cert`, `--tls-key`), swapped whole on reload (SIGHUP); no socket |
//! | 2 | `ratelimit` | one core's token buckets of `--rate-limit` (GCRA: one instant per bucket), the per-core share of each limit, the bounded bucket table that evicts only full buckets |
//! | 2 | `durable` | the durable mirror (`--durable`, CONTRACT §10): the observer the eras report their changes to (a legacy session's `SessionChange` through `SessionMirror::observe`; a core's keyed calls and tasks, `CoreChange`, through `CoreTap::observe`), the store's key schema, one place for every key name and encoding both the writer (the mirror thread) and the reader (adoption) use; the store one Redis, the primary a set of sentinels names (`redis+sentinel://`, a failover followed at the next connection), or a Redis Cluster (`redis+cluster://`, `cluster`: each session's keys in one slot, batches split per shard) |
//! | 2 | `audit` | the audit trail (`--audit-log`, docs/audit.md): one JSON line per call when it ends, the outcome read off the rendered answer, the bounded queue every core pushes into (drops counted and reported in the file), the one writer thread with its size rotation and SIGHUP reopen |
//! | 2 | `trace` | OpenTelemetry traces (`--otlp-endpoint`): W3C `traceparent`, a request's or an upstream call's span, the per-core bounded queues of finished spans and the exporter thread (OTLP/HTTP JSON) |
//! | 2 | `http` | request head → byte ranges; status line and headers → bytes; knows nothing of MCP |
//! | 1 | `config` | `Config` as sections (`server`, `http`, `sessions`, `trace`, `upstream`, `auth`, `modern`, `log`, `rate`, `durable`), a file each with its limits as named constants, defaults, validation and flags; `ConfigError`; the values they parse (the `--upstream` spec, filters, rate limits, the durable URL) |
//! | 1 | `metrics` | per-core counters, gauges and histograms (one writer each), merged into Prometheus text |
//! | 1 | `status` | the admin listener's `/status` HTML page, rendered from the parsed `/metrics` exposition (no bookkeeping of its own) |
//! | 1 | `signal` | a core-local wake-up for many waiters |
//! | 1 | `fasthash` | the core-local hash maps of session and key tables; the stable hash of the fingerprints the durable mirror stores |
//! | 1 | `uri` | resource URIs as policies compare them: the canonical form (RFC 3986 §6.2.2, `file:` paths as a file server resolves them) and RFC 6570 template matching |
//! | 1 | `digits` | unsigned integers as decimal ASCII without allocating, for every writer of numbers into bytes |
//! | 1 | `fd` | a monoio socket's descriptor borrowed for a closure: the crate's one audited `unsafe` |
//! | 1 | `redact` | secrets inside a setting's value (a URL's password, secret-looking query parameters and `--flag=value` pairs) hidden for `--print-config` |
//! | 1 | `fsread` | every file read by a name the operator gave: a regular file only (links followed), under its kind's byte limit |

#![warn(missing_docs, unreachable_pub)]

mod admin;
mod audit;
mod auth;
mod cli;
mod config;
mod connect;
mod core;
mod digits;
mod dispatch;
mod durable;
mod endpoint;
mod fasthash;
mod fd;
mod fsread;
mod http;
mod layers;
mod legacy;
mod logging;
mod metrics;
mod modern;
mod provider;
mod ratelimit;
mod redact;
mod runtime;
mod server;
mod signal;
mod status;
mod tls;
mod trace;
mod upstream;
mod uri;
mod wire;

pub use config::{AuthConfig, Config, ConfigError, DurableConfig, HttpConfig, LogConfig};
pub use config::{KeyMaterial, UpstreamConfig};
pub use config::{ModernConfig, RateConfig, ServerConfig, SessionsConfig, TraceConfig};
// The types of the sections' fields an embedder sets.
pub use config::UpstreamSpec;
pub use config::{BuiltinSet, DriverChoice, Isolation, LogFormat, MigrationPolicy, ResponseMode};
pub use config::{
    ClusterUrl, DurableStore, DurableUrl, DurableWriter, FileMode, RateLimit, SentinelUrl, TlsFiles,
};
pub use connect::connect;
pub use logging::{init_logging, reload_log_level};
pub use provider::{
    Annotations, CallContext, Caller, Changes, LocalBoxFuture, LogLevel, Notifier, Provider,
    ProviderError, ProviderResult, SessionInfo, SessionRef, SessionStart, TaskSupport, ToolInfo,
    Value, CARRIED_PREFIX,
};
pub use server::{Running, Server, ServerError};

/// The JSON macro of the provider API's `Value` (serde_json's `json!`).
pub use serde_json::json;

/// Internals the criterion benches measure (`benches/`); not part of the API.
#[doc(hidden)]
pub mod bench_support {
    pub use crate::config::Config;
    pub use crate::config::MigrationPolicy;
    pub use crate::legacy::migration::decide;
    pub use crate::legacy::replay::{EventSeq, Ring, StreamKey};
    pub use crate::legacy::session::{AppendError, ResumeStart};
    pub use crate::legacy::session::{
        Session, SessionId, SessionTable, StreamKind, LEGACY_VERSIONS,
    };
    pub use crate::legacy::{facts, fingerprint};
    pub use crate::wire::jsonrpc::RawId;

    /// A JWT verifier over a fixed JWK Set (`benches/auth_jwt.rs`): the cold path, every
    /// token decoded and its signature checked.
    pub struct JwtVerifier(crate::auth::jwt::JwtVerifier);

    impl JwtVerifier {
        /// Over the keys of `jwks` (a JWK Set document), for tokens of `resource` by `issuer`.
        pub fn new(jwks: &[u8], resource: &str, issuer: &str) -> JwtVerifier {
            let keys = crate::auth::jwks::KeySet::parse(jwks).expect("a usable JWK Set");
            let settings = crate::auth::jwt::JwtSettings {
                resource: resource.to_owned(),
                issuers: vec![issuer.to_owned()],
                leeway: std::time::Duration::from_secs(crate::config::AUTH_LEEWAY_SECS),
            };
            let keys = crate::auth::jwks::Jwks::fixed(keys);
            JwtVerifier(crate::auth::jwt::JwtVerifier::new(settings, vec![keys]).expect("settings"))
        }

        /// Whether `token` verifies at `now`; the subject's length when it does.
        pub fn verify(&self, token: &str, now: std::time::SystemTime) -> Option<usize> {
            use crate::auth::TokenVerifier as _;
            self.0.verify(token, now).ok().map(|claims| claims.subject.len())
        }
    }

    /// Static-token validation as the endpoint runs it (`benches/token_validation.rs`): the
    /// `--auth-tokens` set of a config, and one connection's token cache.
    pub struct TokenValidation {
        auth: crate::auth::Authorizer,
        cache: crate::auth::ConnCache,
    }

    impl TokenValidation {
        /// The set `cfg.auth.tokens_file` names (panics when it does not load).
        pub fn new(cfg: &Config) -> TokenValidation {
            let auth = crate::auth::Authorizer::build(cfg).expect("tokens load");
            let auth = auth.expect("--auth-tokens set");
            TokenValidation { auth, cache: crate::auth::ConnCache::default() }
        }

        /// Validates `token` through the connection's cache (a keep-alive request).
        pub fn cached(&self, token: &[u8]) -> bool {
            self.auth.validate(token, &self.cache).is_ok()
        }

        /// Validates `token` with an empty cache (a connection's first request).
        pub fn uncached(&self, token: &[u8]) -> bool {
            self.auth.validate(token, &crate::auth::ConnCache::default()).is_ok()
        }
    }
}

/// Parsers and encoders the fuzz targets (`fuzz/`) drive directly; not part of the API.
#[doc(hidden)]
pub mod fuzz_support {
    pub use crate::http::{parse_head, ParseError, RequestHead};
    pub use crate::legacy::fingerprint;
    pub use crate::legacy::replay::{EventSeq, StreamKey};
    pub use crate::legacy::session::{parse_event_id, push_event_id};
    pub use crate::trace::{TraceParent, TRACEPARENT_LEN};
    pub use crate::wire::jsonrpc::{canonical_params, decode, Body, DecodeError, Message};
    pub use crate::wire::jsonrpc::{WireValue, CANONICAL_INLINE_KEYS};
    pub use crate::wire::sse::push_event;
}
