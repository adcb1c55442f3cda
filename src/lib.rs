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
//! Flow: socket → `runtime` (`conn`) → `http` → `endpoint` (rules, era) → `legacy` (sessions,
//! `migration`, streams over the `replay` ring) → `dispatch` → `provider` → back as events
//! rendered by `wire` → socket.
//!
//! | module | owns |
//! | --- | --- |
//! | `server` | `Server` (the public entry): listeners (one owner per port), one pinned thread + runtime per core, signals and the graceful drain, the banner |
//! | `admin` | the admin listener: `/metrics`, `/healthz`, `/readyz` |
//! | `cli` | the binary's flags → `Config` (`Config::from_args`) |
//! | `config` | every limit as a named constant; `Config` |
//! | `runtime` | one core: driver choice, accept loop, session reaper; `conn` (one socket: buffers, timeouts, read → `endpoint::handle` → write), `stream` (the one stream driver over a `core::Source`), `handoff` (moving a connection to its session's core) |
//! | `http` | request head → byte ranges; status line and headers → bytes; knows nothing of MCP |
//! | `endpoint` | HTTP rules at the MCP endpoint (path, Host/Origin, methods, CORS) and era selection; gathers each era's streams in one `Stream` |
//! | `legacy` | the 2025-era path: sessions, streams with an explicit lifecycle, `migration` (the pure O(1) decision), `replay` (the ring), the call context's sink |
//! | `modern` | the 2026-07-28 stateless path: `_meta` checks, calls, keys, listen, tasks; its streams as `core::Source`s |
//! | `core` | per-core state both eras read; an era's `Outcome`; `Source`, the shape of a response stream the runtime drives |
//! | `dispatch` | MCP methods → providers; the tool table with each tool's idempotency |
//! | `provider` | the public `Provider` trait, `CallContext`, `ProviderError`, `Value`; `builtin` (demo, conformance) |
//! | `upstream` | the bridge (`--upstream`): one provider per upstream; an MCP client (`peer`) over stdio children (`stdio`) or Streamable HTTP (`http`) |
//! | `wire` | every answer as a value rendered in one place: statuses, JSON-RPC codes; SSE framing; JSON-RPC envelope |
//! | `metrics` | per-core counters, Prometheus text |

mod admin;
mod cli;
mod config;
mod core;
mod dispatch;
mod endpoint;
mod fasthash;
mod http;
mod legacy;
mod metrics;
mod modern;
mod provider;
mod runtime;
mod server;
mod signal;
mod upstream;
mod wire;

pub use config::{BuiltinSet, Config, ConfigError, DriverChoice, MigrationPolicy, ResponseMode};
pub use config::{Isolation, UpstreamSpec, UpstreamSpecError, UpstreamTarget};
pub use provider::{
    Annotations, CallContext, Changes, LocalBoxFuture, LogLevel, Notifier, Provider, ProviderError,
    ProviderResult, SessionInfo, SessionRef, SessionStart, TaskSupport, ToolInfo, Value,
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
}

/// Parsers and encoders the fuzz targets (`fuzz/`) drive directly; not part of the API.
#[doc(hidden)]
pub mod fuzz_support {
    pub use crate::http::{parse_head, ParseError, RequestHead};
    pub use crate::legacy::fingerprint;
    pub use crate::legacy::replay::{EventSeq, StreamKey};
    pub use crate::legacy::session::{parse_event_id, push_event_id};
    pub use crate::wire::jsonrpc::{canonical_params, decode, Body, DecodeError, Message};
    pub use crate::wire::sse::push_event;
}
