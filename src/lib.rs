//! tidemark: an io_uring, thread-per-core MCP Streamable HTTP endpoint that never loses or
//! doubles a stream.
//!
//! Flow: socket → `http` → `transport` (with `migration`) / `session` → `stream` / `replay` →
//! `tool` → `sse` → socket. One monoio runtime per core (`worker`) owns that core's sessions; a
//! request for a session of another core moves its connection there (`handoff`).
//!
//! | module | owns |
//! | --- | --- |
//! | `worker` | one core: SO_REUSEPORT listener, accept loop, hand-off inbox, session reaper |
//! | `conn` | one socket: buffers, timeouts, read → parse → handle → write, the SSE writer |
//! | `http` | request head → ranges; status line and headers → bytes |
//! | `transport` | MCP endpoint rules, JSON-RPC methods, the single refusal → status map |
//! | `migration` | the seed's boundary as one pure O(1) decision |
//! | `handoff` | per-core inbox of moved connections |
//! | `session` | sessions, their streams and the owed/replaying counters; session ids |
//! | `stream` | running a request; `Emit`; filling an SSE batch from the ring |
//! | `tool` | tool trait, registry, demo and conformance sets |
//! | `replay` | the per-session ring indexed by event sequence |
//! | `sse` | SSE frame and chunk encoding |
//! | `jsonrpc` | JSON-RPC envelope decode/encode, canonical params |
//! | `metrics` | per-core counters, Prometheus text |
//! | `config` | every limit as a named constant; `Config` |

pub mod config;
pub mod conn;
pub mod handoff;
pub mod http;
pub mod jsonrpc;
pub mod metrics;
pub mod migration;
pub mod replay;
pub mod session;
pub mod sse;
pub mod stream;
pub mod tool;
pub mod transport;
pub mod worker;
