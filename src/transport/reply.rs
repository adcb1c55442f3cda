//! How every refusal reaches the wire: one exhaustive map from `Refusal` to HTTP status and
//! JSON-RPC code, and the encoders for JSON, 202 and SSE response heads.

use crate::http::{push_decimal, write_header, write_status};
use crate::jsonrpc::{self, RawId};

/// Every way the endpoint refuses a request. The doc of each says whose fault it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Peer: not the MCP path.
    NotFoundPath,
    /// Peer: Host or Origin not allowed (DNS rebinding, MCP 2025-11-25 §security).
    Forbidden,
    /// Peer: POST Content-Type is not application/json.
    UnsupportedMediaType,
    /// Peer: Accept lacks application/json and text/event-stream (POST) or the latter (GET).
    NotAcceptable,
    /// Peer: chunked or length-less POST body.
    LengthRequired,
    /// Peer: body over `--max-body-bytes`.
    BodyTooLarge,
    /// Peer: body is not JSON / not UTF-8 / too deep.
    ParseError,
    /// Peer: JSON that is not JSON-RPC, or a batch outside 2025-03-26.
    InvalidRequest,
    /// Peer: request other than initialize without Mcp-Session-Id.
    SessionRequired,
    /// Peer: unknown, expired or deleted session.
    SessionNotFound,
    /// Peer: MCP-Protocol-Version names no supported revision.
    BadProtocolVersion,
    /// Peer: initialize inside an existing session.
    AlreadyInitialized,
    /// Peer: Last-Event-ID on a POST.
    LastEventIdOnPost,
    /// Peer: malformed, foreign or future Last-Event-ID.
    BadLastEventId,
    /// Peer: method other than GET/POST/DELETE.
    MethodNotAllowed,
    /// Peer: request head over `--max-header-bytes` or `--max-headers`.
    HeaderTooLarge,
    /// Peer: request head not complete within `--header-timeout-ms`.
    HeadTimeout,
    /// Us: `--max-sessions-per-core` reached.
    TooManySessions,
    /// Peer: `--max-streams-per-session` reached with nothing evictable.
    TooManyStreams,
    /// Us: a core's hand-off inbox is full, or the OS random source failed.
    Unavailable,
}

impl Refusal {
    /// HTTP status and JSON-RPC code. Exhaustive: a new variant must be mapped here.
    pub fn status_and_code(self) -> (u16, i64) {
        match self {
            Refusal::NotFoundPath => (404, jsonrpc::INVALID_REQUEST),
            Refusal::Forbidden => (403, jsonrpc::INVALID_REQUEST),
            Refusal::UnsupportedMediaType => (415, jsonrpc::INVALID_REQUEST),
            Refusal::NotAcceptable => (406, jsonrpc::INVALID_REQUEST),
            Refusal::LengthRequired => (411, jsonrpc::INVALID_REQUEST),
            Refusal::BodyTooLarge => (413, jsonrpc::INVALID_REQUEST),
            Refusal::ParseError => (400, jsonrpc::PARSE_ERROR),
            Refusal::InvalidRequest => (400, jsonrpc::INVALID_REQUEST),
            Refusal::SessionRequired => (400, jsonrpc::INVALID_REQUEST),
            Refusal::SessionNotFound => (404, jsonrpc::INVALID_REQUEST),
            Refusal::BadProtocolVersion => (400, jsonrpc::INVALID_REQUEST),
            Refusal::AlreadyInitialized => (400, jsonrpc::INVALID_REQUEST),
            Refusal::LastEventIdOnPost => (400, jsonrpc::INVALID_REQUEST),
            Refusal::BadLastEventId => (400, jsonrpc::INVALID_REQUEST),
            Refusal::MethodNotAllowed => (405, jsonrpc::INVALID_REQUEST),
            Refusal::HeaderTooLarge => (431, jsonrpc::INVALID_REQUEST),
            Refusal::HeadTimeout => (408, jsonrpc::INVALID_REQUEST),
            Refusal::TooManySessions => (503, jsonrpc::INTERNAL_ERROR),
            Refusal::TooManyStreams => (429, jsonrpc::INTERNAL_ERROR),
            Refusal::Unavailable => (503, jsonrpc::INTERNAL_ERROR),
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Refusal::NotFoundPath => "not the MCP endpoint",
            Refusal::Forbidden => "Host or Origin not allowed",
            Refusal::UnsupportedMediaType => "Content-Type must be application/json",
            Refusal::NotAcceptable => {
                "Accept must list application/json and text/event-stream (GET: text/event-stream)"
            }
            Refusal::LengthRequired => "a Content-Length body is required (no chunked bodies)",
            Refusal::BodyTooLarge => "body exceeds --max-body-bytes",
            Refusal::ParseError => {
                "parse error: body is not valid UTF-8 JSON within the depth limit"
            }
            Refusal::InvalidRequest => {
                "invalid request: not a JSON-RPC 2.0 message this session accepts"
            }
            Refusal::SessionRequired => "Mcp-Session-Id header is required",
            Refusal::SessionNotFound => "session not found (expired or deleted): initialize again",
            Refusal::BadProtocolVersion => "unsupported MCP-Protocol-Version",
            Refusal::AlreadyInitialized => "session already initialized",
            Refusal::LastEventIdOnPost => "Last-Event-ID is not accepted on POST: resume with GET",
            Refusal::BadLastEventId => "Last-Event-ID does not name an event of this session",
            Refusal::MethodNotAllowed => "method not allowed",
            Refusal::HeaderTooLarge => "request head exceeds --max-header-bytes or --max-headers",
            Refusal::HeadTimeout => "request head not received within --header-timeout-ms",
            Refusal::TooManySessions => "too many sessions on this core",
            Refusal::TooManyStreams => "too many streams in this session",
            Refusal::Unavailable => "server busy, retry",
        }
    }
}

/// Writes a whole refusal: status, headers, JSON-RPC error body.
pub fn refuse(out: &mut Vec<u8>, r: Refusal, id: Option<&RawId>, keep_alive: bool) {
    let (status, code) = r.status_and_code();
    let mut body = Vec::with_capacity(128);
    jsonrpc::push_error(&mut body, id, code, r.message(), None);
    let allow: &[(&str, &[u8])] =
        if r == Refusal::MethodNotAllowed { &[("Allow", b"GET, POST, DELETE")] } else { &[] };
    json(out, status, allow, &body, keep_alive);
}

/// A complete `application/json` response.
pub fn json(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(&str, &[u8])],
    body: &[u8],
    keep_alive: bool,
) {
    write_status(out, status);
    out.extend_from_slice(b"Content-Type: application/json\r\nContent-Length: ");
    push_decimal(out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    for (n, v) in headers {
        write_header(out, n, v);
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// 405 to a HEAD request: the head only (RFC 9112 §6.3), so the connection stays in sync.
pub fn head_not_allowed(out: &mut Vec<u8>, keep_alive: bool) {
    write_status(out, 405);
    out.extend_from_slice(b"Allow: GET, POST, DELETE\r\nContent-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A response without a body (202 Accepted, 200 on DELETE).
pub fn empty(out: &mut Vec<u8>, status: u16, keep_alive: bool) {
    write_status(out, status);
    out.extend_from_slice(b"Content-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The head of a chunked `text/event-stream` response; frames follow as chunks.
pub fn sse_head(out: &mut Vec<u8>, session_header: Option<&[u8]>) {
    write_status(out, 200);
    out.extend_from_slice(
        b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Transfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\nMcp-Stream-Resumable: true\r\n",
    );
    if let Some(s) = session_header {
        write_header(out, "Mcp-Session-Id", s);
    }
    out.extend_from_slice(b"\r\n");
}
