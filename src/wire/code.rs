//! Every JSON-RPC error code the server sends, named (`Code`) with its number in one place: no
//! other file writes a code as a number (`tests/layering.rs` holds it).
//!
//! Called by: every encoder of an error body (`wire::error`, `Answer::render`) and whoever
//! names the error a request gets. Never: writes bytes.

/// Every JSON-RPC error code the server sends (JSON-RPC 2.0's own, MCP's, and CONTRACT §6's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// -32700: the body is not JSON.
    ParseError,
    /// -32600: JSON, but not a request this endpoint accepts.
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: bad params, or an unknown tool, prompt or resource.
    InvalidParams,
    /// -32603: our failure (or the provider's).
    InternalError,
    /// -31001: the request's stream is still owed (CONTRACT §4 step 2).
    StreamOwed,
    /// -31002: request id reused for a completed, non-idempotent request (step 3).
    RequestIdReused,
    /// -31003: events after the resume cursor were evicted.
    EventsLost,
    /// -31004: held too long while the session owes a stream (step 4).
    HeldTooLong,
    /// -31005: Idempotency-Key reused with other method or params (step 1).
    KeyReused,
    /// -31006: outcome unknown: the node running the call stopped before its result reached the
    /// durable store (`--durable`; `data: {node, lastEventId}`). The call is never run again.
    OutcomeUnknown,
    /// -31007: over a `--rate-limit` (429 + `Retry-After`; `data: {scope, retryAfterMs}`).
    RateLimited,
    /// -32020: MCP 2026-07-28 `HeaderMismatch`: a required header is missing or disagrees with
    /// the body (`MCP-Protocol-Version` vs `_meta`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
    HeaderMismatch,
    /// -32021: MCP 2026-07-28 `MissingRequiredClientCapability`: the request needs a capability
    /// its `_meta` did not declare.
    MissingCapability,
    /// -32022: MCP 2026-07-28 `UnsupportedProtocolVersionError`.
    UnsupportedProtocolVersion,
}

impl Code {
    /// The number on the wire.
    pub(crate) const fn value(self) -> i64 {
        match self {
            Code::ParseError => -32700,
            Code::InvalidRequest => -32600,
            Code::MethodNotFound => -32601,
            Code::InvalidParams => -32602,
            Code::InternalError => -32603,
            Code::StreamOwed => -31001,
            Code::RequestIdReused => -31002,
            Code::EventsLost => -31003,
            Code::HeldTooLong => -31004,
            Code::KeyReused => -31005,
            Code::OutcomeUnknown => -31006,
            Code::RateLimited => -31007,
            Code::HeaderMismatch => -32020,
            Code::MissingCapability => -32021,
            Code::UnsupportedProtocolVersion => -32022,
        }
    }
}
