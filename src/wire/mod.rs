//! Every answer the endpoint gives, as a value rendered to bytes in one place: the JSON-RPC
//! error codes (`Code`), the refusals and their HTTP statuses (`Refusal`, one exhaustive map),
//! and `Answer`, whose `render` writes status line, headers and body. Also the JSON-RPC
//! envelope (`jsonrpc`), every error body (`error`) and a result value's body (`result`),
//! which the protocol paths call instead of writing JSON-RPC by hand, SSE framing (`sse`), the CORS lines of a shared answer (`cors`), and
//! the 2026-07-28 headers that mirror a body (`param_headers`: `x-mcp-header`, the base64 form).
//!
//! Called by: the endpoint and the protocol paths, which decide *what* to answer; this module
//! decides only *how it looks on the wire*. Never: decides anything about MCP or sessions.

pub(crate) mod code;
pub(crate) mod cors;
pub(crate) mod error;
pub(crate) mod jsonrpc;
pub(crate) mod notification;
pub(crate) mod owned_id;
pub(crate) mod param_headers;
pub(crate) mod result;
pub(crate) mod revision;
pub(crate) mod sse;

use crate::digits::push_decimal;
use crate::http::{write_header, write_status};
use jsonrpc::RawId;

use crate::logging::{limited, Culprit, Kind};

pub(crate) use code::Code;
pub(crate) use error::{error_object, push_batch_conflict, push_error_value, push_events_lost};
pub(crate) use error::{push_conflict, push_rate_limited, OwedStream};
pub(crate) use error::{push_error_response, push_outcome_unknown, push_oversize_error};
pub(crate) use result::{push_result_value, push_result_with, response_object};
pub use revision::LEGACY_VERSIONS;

/// A decoded request value: a borrowed view of the request's simd-json tape (internal: the
/// provider API gets `provider::Value`).
pub(crate) use jsonrpc::WireValue;

/// Every HTTP status the server answers with (a JSON-RPC answer, a refusal, an admin answer),
/// named: `Answer` and `Refusal` take one of these, never a number, so what the server answers
/// is listed here and nowhere else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// 200: the request was served (its JSON-RPC result or error is the body).
    Ok,
    /// 202: a notification or a client's response taken (no body).
    Accepted,
    /// 204: a CORS preflight admitted (no body).
    NoContent,
    /// 400: the peer's request is malformed or fails a 2026-07-28 check.
    BadRequest,
    /// 401: no valid bearer token (MCP authorization; RFC 6750 §3).
    Unauthorized,
    /// 403: a valid token without the scope the operation needs (`insufficient_scope`).
    Forbidden,
    /// 404: no such method in 2026-07-28 (`-32601`), or no such session or path.
    NotFound,
    /// 405: the method is not served there (the admin listener: GET only).
    MethodNotAllowed,
    /// 406: the Accept header lacks what the answer needs.
    NotAcceptable,
    /// 408: the request head did not arrive in time.
    RequestTimeout,
    /// 409: a retry whose outcome is not there yet, or a stream still owed (CONTRACT §4, §5).
    Conflict,
    /// 411: a POST without Content-Length.
    LengthRequired,
    /// 413: a body over `--max-body-bytes`.
    ContentTooLarge,
    /// 415: a POST that is not `application/json`.
    UnsupportedMediaType,
    /// 422: an Idempotency-Key reused with another call (CONTRACT §4 step 1).
    UnprocessableContent,
    /// 429: over a `--rate-limit`, a stream or keyed-call limit (with `Retry-After`).
    TooManyRequests,
    /// 431: a request head too large.
    HeaderFieldsTooLarge,
    /// 500: our bug (a request handed on twice).
    InternalServerError,
    /// 503: not now (a full core, a drain, a down dependency; the admin listener: too many
    /// connections, or `/readyz` while draining).
    ServiceUnavailable,
}

impl Status {
    /// The number on the status line.
    pub(crate) const fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::Accepted => 202,
            Status::NoContent => 204,
            Status::BadRequest => 400,
            Status::Unauthorized => 401,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::NotAcceptable => 406,
            Status::RequestTimeout => 408,
            Status::Conflict => 409,
            Status::LengthRequired => 411,
            Status::ContentTooLarge => 413,
            Status::UnsupportedMediaType => 415,
            Status::UnprocessableContent => 422,
            Status::TooManyRequests => 429,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::ServiceUnavailable => 503,
        }
    }
}

/// Every way the endpoint refuses a request. The doc of each says whose fault it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
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
    /// The balancer: a session of another node (`--node-id`): 404 as for an unknown one, with a
    /// message naming the misrouting (CONTRACT §9).
    MisroutedSession,
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
    /// Peer: the request line or a header line is not HTTP/1.x syntax (RFC 9112 §3, §5).
    MalformedHead,
    /// Peer: Content-Length is not a decimal, or is given twice with different values.
    BadContentLength,
    /// Peer: HTTP/1.1 without Host, or Host or Origin given twice (RFC 9112 §3.2).
    BadHost,
    /// Peer: a single-valued header (Last-Event-ID, Idempotency-Key, Authorization) given
    /// twice with different values.
    ConflictingHeader,
    /// Peer: an `Mcp-*` header (Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name,
    /// Mcp-Param-*) given twice with different values: 400 with HeaderMismatch, since an
    /// intermediary reading the other value would authorize something other than what runs.
    ConflictingMcpHeader,
    /// Peer: an `Idempotency-Key` that is not UTF-8 (two such keys would otherwise be read
    /// as one, or the key ignored).
    BadIdempotencyKey,
    /// Us: the server drains (SIGTERM/SIGINT) and takes no new session; 503 with `Retry-After`.
    Draining,
    /// Us: the core's replay rings hold `--core-buffer-bytes`; no new request stream until
    /// they drain; 503 with `Retry-After`.
    BufferBudget,
    /// Us: `--upstream-max-processes` upstream children are alive; a new session would need
    /// one more. 503 with `Retry-After`.
    UpstreamBusy,
    /// Us: a request handed to the core its names choose would be handed on again (the cores
    /// disagree on its owner: a bug). Answered at once, never moved a second time.
    HandedTwice,
    /// Us: `--max-idempotency-keys-per-core` keyed calls run on this core (none finished to
    /// evict). 503 with `Retry-After`.
    KeyTableFull,
    /// Us: running keyed calls hold `--idempotency-bytes-per-core` on this core (finished
    /// records were evicted). 503 with `Retry-After`.
    KeyBytesFull,
    /// Peer: this client (its token's subject, else its peer address) already runs
    /// `--max-running-keyed-calls-per-client` keyed calls on this core. 429 with `Retry-After`.
    KeyedCallShare,
    /// Us: the drain ended before a connection sent its first request (it was waiting in the
    /// accept queue, or had just connected); 503 with `Retry-After` and `Connection: close`.
    ShuttingDown,
    /// The OS: the process or system is out of file descriptors (EMFILE/ENFILE); the
    /// connection is answered from the reserve descriptor and closed. 503 with `Retry-After`.
    OutOfDescriptors,
}

impl Refusal {
    /// Whose fault the refusal is (each variant's doc; the log's `culprit`). Exhaustive, no
    /// wildcard: a new variant must say who is to blame.
    pub(crate) fn culprit(self) -> Culprit {
        match self {
            Refusal::NotFoundPath
            | Refusal::Forbidden
            | Refusal::UnsupportedMediaType
            | Refusal::NotAcceptable
            | Refusal::LengthRequired
            | Refusal::BodyTooLarge
            | Refusal::ParseError
            | Refusal::InvalidRequest
            | Refusal::SessionRequired
            | Refusal::SessionNotFound
            | Refusal::MisroutedSession
            | Refusal::BadProtocolVersion
            | Refusal::AlreadyInitialized
            | Refusal::LastEventIdOnPost
            | Refusal::BadLastEventId
            | Refusal::MethodNotAllowed
            | Refusal::HeaderTooLarge
            | Refusal::HeadTimeout
            | Refusal::TooManyStreams
            | Refusal::MalformedHead
            | Refusal::BadContentLength
            | Refusal::BadHost
            | Refusal::ConflictingHeader
            | Refusal::ConflictingMcpHeader
            | Refusal::BadIdempotencyKey
            | Refusal::KeyedCallShare => Culprit::Peer,
            Refusal::TooManySessions
            | Refusal::Unavailable
            | Refusal::Draining
            | Refusal::BufferBudget
            | Refusal::UpstreamBusy
            | Refusal::HandedTwice
            | Refusal::KeyTableFull
            | Refusal::KeyBytesFull
            | Refusal::ShuttingDown => Culprit::Us,
            Refusal::OutOfDescriptors => Culprit::Os,
        }
    }

    /// HTTP status and JSON-RPC code. Exhaustive: a new variant must be mapped here.
    pub(crate) fn status_and_code(self) -> (Status, Code) {
        match self {
            Refusal::NotFoundPath => (Status::NotFound, Code::InvalidRequest),
            Refusal::Forbidden => (Status::Forbidden, Code::InvalidRequest),
            Refusal::UnsupportedMediaType => (Status::UnsupportedMediaType, Code::InvalidRequest),
            Refusal::NotAcceptable => (Status::NotAcceptable, Code::InvalidRequest),
            Refusal::LengthRequired => (Status::LengthRequired, Code::InvalidRequest),
            Refusal::BodyTooLarge => (Status::ContentTooLarge, Code::InvalidRequest),
            Refusal::ParseError => (Status::BadRequest, Code::ParseError),
            Refusal::InvalidRequest => (Status::BadRequest, Code::InvalidRequest),
            Refusal::SessionRequired => (Status::BadRequest, Code::InvalidRequest),
            Refusal::SessionNotFound => (Status::NotFound, Code::InvalidRequest),
            Refusal::MisroutedSession => (Status::NotFound, Code::InvalidRequest),
            Refusal::BadProtocolVersion => (Status::BadRequest, Code::InvalidRequest),
            Refusal::AlreadyInitialized => (Status::BadRequest, Code::InvalidRequest),
            Refusal::LastEventIdOnPost => (Status::BadRequest, Code::InvalidRequest),
            Refusal::BadLastEventId => (Status::BadRequest, Code::InvalidRequest),
            Refusal::MethodNotAllowed => (Status::MethodNotAllowed, Code::InvalidRequest),
            Refusal::HeaderTooLarge => (Status::HeaderFieldsTooLarge, Code::InvalidRequest),
            Refusal::HeadTimeout => (Status::RequestTimeout, Code::InvalidRequest),
            Refusal::TooManySessions => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::TooManyStreams => (Status::TooManyRequests, Code::InternalError),
            Refusal::Unavailable => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::MalformedHead => (Status::BadRequest, Code::InvalidRequest),
            Refusal::BadContentLength => (Status::BadRequest, Code::InvalidRequest),
            Refusal::BadHost => (Status::BadRequest, Code::InvalidRequest),
            Refusal::ConflictingHeader => (Status::BadRequest, Code::InvalidRequest),
            Refusal::ConflictingMcpHeader => (Status::BadRequest, Code::HeaderMismatch),
            Refusal::BadIdempotencyKey => (Status::BadRequest, Code::InvalidRequest),
            Refusal::Draining => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::ShuttingDown => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::OutOfDescriptors => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::BufferBudget => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::UpstreamBusy => (Status::ServiceUnavailable, Code::InternalError),
            Refusal::HandedTwice => (Status::InternalServerError, Code::InternalError),
            Refusal::KeyTableFull | Refusal::KeyBytesFull => {
                (Status::ServiceUnavailable, Code::InternalError)
            }
            Refusal::KeyedCallShare => (Status::TooManyRequests, Code::InternalError),
        }
    }

    /// True for the refusals that clear by themselves (a full store, a drain): they carry
    /// `Retry-After`.
    fn retry_after(self) -> bool {
        matches!(
            self,
            Refusal::Draining
                | Refusal::BufferBudget
                | Refusal::UpstreamBusy
                | Refusal::KeyTableFull
                | Refusal::KeyBytesFull
                | Refusal::KeyedCallShare
                | Refusal::ShuttingDown
                | Refusal::OutOfDescriptors
        )
    }

    pub(crate) fn message(self) -> &'static str {
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
            Refusal::MisroutedSession => {
                "session not found on this node: its id names another node (misrouted: a \
                 balancer routes on the id's first two hex digits); initialize again"
            }
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
            Refusal::MalformedHead => "malformed HTTP request: bad request line or header syntax",
            Refusal::BadContentLength => {
                "bad Content-Length: not a decimal number, or given twice with different values"
            }
            Refusal::BadHost => "bad Host: missing, or Host or Origin given more than once",
            Refusal::ConflictingHeader => {
                "conflicting duplicate header: Last-Event-ID, Idempotency-Key and Authorization \
                 take a single value"
            }
            Refusal::ConflictingMcpHeader => {
                "conflicting duplicate header: an Mcp-* header (Mcp-Session-Id, \
                 MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-*) takes a single value"
            }
            Refusal::BadIdempotencyKey => "Idempotency-Key must be UTF-8",
            Refusal::Draining => {
                "server shutting down: no new sessions; initialize again after Retry-After"
            }
            Refusal::BufferBudget => {
                "server buffers full (--core-buffer-bytes): retry after Retry-After, or resume \
                 owed streams first"
            }
            Refusal::UpstreamBusy => {
                "upstream process limit reached (--upstream-max-processes): initialize again \
                 after Retry-After"
            }
            Refusal::HandedTwice => "request was handed between cores twice",
            Refusal::KeyTableFull => {
                "every Idempotency-Key record of this core is a running call \
                 (--max-idempotency-keys-per-core): retry after Retry-After"
            }
            Refusal::KeyBytesFull => {
                "running keyed calls hold this core's --idempotency-bytes-per-core: retry after \
                 Retry-After"
            }
            Refusal::KeyedCallShare => {
                "this client already runs --max-running-keyed-calls-per-client keyed calls on \
                 this core: retry after Retry-After, when one has finished"
            }
            Refusal::ShuttingDown => {
                "server shutting down: send the request again after Retry-After"
            }
            Refusal::OutOfDescriptors => {
                "server out of file descriptors: connect again after Retry-After"
            }
        }
    }
}

/// Every HTTP answer of the endpoint, as a value. The protocol paths build one; `render`
/// writes it.
#[derive(Debug)]
pub(crate) enum Answer<'a> {
    /// A refusal: its status, its JSON-RPC error (with the request's id when known).
    Refused { refusal: Refusal, id: Option<&'a RawId> },
    /// 200 `application/json`: a JSON-RPC response (or a batch's array of them).
    Json(&'a [u8]),
    /// `Json` whose body the caller already wrote into `out` from `body_at` on (the head is
    /// put in front of it): no body buffer of its own.
    JsonAt { body_at: usize },
    /// `application/json`: a JSON-RPC error with one of our codes as the whole answer, with
    /// the request's id when known; `status` is 200 for a method's own error, or a 2026-07-28
    /// error's own (400 for `_meta` errors, 404 for -32601); `data` is JSON.
    Error {
        status: Status,
        id: Option<&'a RawId>,
        code: Code,
        message: &'a str,
        data: Option<&'a str>,
    },
    /// `application/json` with another status: a 2026-07-28 answer whose JSON-RPC error has an
    /// HTTP status of its own (400 for -32602 `_meta` errors, -32020, -32021, -32022; 404 for
    /// -32601).
    JsonStatus { status: Status, body: &'a [u8] },
    /// 200 `application/json` to `initialize`, with the new session's `Mcp-Session-Id`.
    Initialized { body: &'a [u8], session_id: &'a [u8] },
    /// 202 Accepted, no body: notifications and client responses.
    Accepted,
    /// 200, no body: a DELETEd session.
    Deleted,
    /// 405 to HEAD: the head only (RFC 9112 §6.3), so the connection stays in sync.
    HeadNotAllowed,
    /// The head of a chunked `text/event-stream` response; frames follow as chunks.
    SseHead,
    /// `SseHead` of a 2026-07-28 response stream: not resumable, so no `Mcp-Stream-Resumable`.
    SseHeadStateless,
    /// 409 with the resume hint (CONTRACT §4 steps 2–4), its body (`push_conflict`: code
    /// `StreamOwed`, `RequestIdReused` or `HeldTooLong`, `data` the `owedStreams`) already
    /// written into `out` from `body_at` on; `hint` the `Last-Event-ID` to resume from, when a
    /// stream is named.
    Conflict { body_at: usize, hint: Option<&'a [u8]> },
    /// 422: an Idempotency-Key reused with other method or params (CONTRACT §4 step 1).
    KeyReused { id: &'a RawId },
    /// 409 with -31004 to a 2026-07-28 retry whose keyed call still runs after its wait
    /// (`--owed-wait-ms`, CONTRACT §5): `{"inFlight":true}` tells it to come back.
    StillRunning { id: &'a RawId },
    /// 400 with MCP's UnsupportedProtocolVersion (-32022) listing the revisions we serve, to a
    /// request naming a revision older than any we serve.
    UnsupportedVersion { id: &'a RawId, requested: &'a str, supported: &'a [&'a str] },
    /// 429 with `Retry-After` (whole seconds, rounded up) and -31007, to a request over a
    /// `--rate-limit`: `data` is `{"scope":…,"retryAfterMs":…}`; `table_full` when the client
    /// had no bucket (the core's table is full, `--rate-buckets-per-core`) and the debt the
    /// table kept for its key refused it.
    RateLimited {
        id: Option<&'a RawId>,
        scope: &'a str,
        retry_after_secs: u64,
        retry_after_ms: u64,
        table_full: bool,
    },
    /// 503 with `Retry-After` and -32603: something the request cannot go without is down (a
    /// required `--upstream`); `message` and `data` (JSON) name it.
    Down { id: Option<&'a RawId>, message: &'a str, data: Option<&'a str>, retry_after_secs: u64 },
    /// An authorization refusal (MCP authorization; RFC 6750 §3): 401 (no valid token), 400
    /// (a token in the query string) or 403 (`insufficient_scope`), with its `WWW-Authenticate`
    /// challenge and a JSON-RPC error (-32600) saying what to do. Never names the token.
    Challenge { status: Status, challenge: &'a str, id: Option<&'a RawId>, message: &'a str },
}

impl Answer<'_> {
    /// `render`, then shares the answer with `shared_with`, a listed origin (`cors`): for a
    /// head rendered after the endpoint shared what it had.
    pub(crate) fn render_shared(
        &self,
        out: &mut Vec<u8>,
        keep_alive: bool,
        shared_with: Option<&str>,
    ) {
        let head_start = match *self {
            Answer::JsonAt { body_at } | Answer::Conflict { body_at, .. } => body_at,
            _ => out.len(),
        };
        self.render(out, keep_alive);
        if let Some(origin) = shared_with {
            cors::share_response(out, head_start, origin);
        }
    }

    /// Writes the whole answer (or, for `SseHead`, its head) into `out`.
    pub(crate) fn render(&self, out: &mut Vec<u8>, keep_alive: bool) {
        match *self {
            Answer::Refused { refusal, id } => refuse(out, refusal, id, keep_alive),
            Answer::Json(body) => json(out, Status::Ok, &[], body, keep_alive),
            Answer::JsonAt { body_at } => json_at(out, body_at, Status::Ok, &[], keep_alive),
            Answer::JsonStatus { status, body } => json(out, status, &[], body, keep_alive),
            Answer::Error { status, id, code, message, data } => {
                let body_at = out.len();
                push_error_response(out, id, code, message, data);
                json_at(out, body_at, status, &[], keep_alive);
            }
            Answer::Initialized { body, session_id } => {
                json(out, Status::Ok, &[("Mcp-Session-Id", session_id)], body, keep_alive)
            }
            Answer::Accepted => empty(out, Status::Accepted, keep_alive),
            Answer::Deleted => empty(out, Status::Ok, keep_alive),
            Answer::HeadNotAllowed => head_not_allowed(out, keep_alive),
            Answer::SseHead => sse_head(out, true),
            Answer::SseHeadStateless => sse_head(out, false),
            Answer::Conflict { body_at, hint } => {
                let resumable: (&str, &[u8]) = ("Mcp-Stream-Resumable", b"true");
                match hint {
                    Some(hint) => {
                        let headers = [resumable, ("Last-Event-ID", hint)];
                        json_at(out, body_at, Status::Conflict, &headers, keep_alive)
                    }
                    None => json_at(out, body_at, Status::Conflict, &[resumable], keep_alive),
                }
            }
            Answer::KeyReused { id } => {
                let body_at = out.len();
                error::push_key_reused(out, id);
                json_at(out, body_at, Status::UnprocessableContent, &[], keep_alive);
            }
            Answer::StillRunning { id } => {
                let body_at = out.len();
                error::push_still_running(out, id);
                json_at(out, body_at, Status::Conflict, &[], keep_alive);
            }
            Answer::Challenge { status, challenge, id, message } => {
                let body_at = out.len();
                push_error_response(out, id, Code::InvalidRequest, message, None);
                let headers: [(&str, &[u8]); 1] = [("WWW-Authenticate", challenge.as_bytes())];
                json_at(out, body_at, status, &headers, keep_alive);
            }
            Answer::RateLimited { id, scope, retry_after_secs, retry_after_ms, table_full } => {
                let body_at = out.len();
                push_rate_limited(out, id, scope, retry_after_ms, table_full);
                let mut digits = [0; 20];
                let seconds = crate::digits::decimal(retry_after_secs, &mut digits);
                let headers: [(&str, &[u8]); 1] = [("Retry-After", seconds)];
                json_at(out, body_at, Status::TooManyRequests, &headers, keep_alive);
            }
            Answer::Down { id, message, data, retry_after_secs } => {
                let body_at = out.len();
                push_error_response(out, id, Code::InternalError, message, data);
                let mut digits = [0; 20];
                let seconds = crate::digits::decimal(retry_after_secs, &mut digits);
                let headers: [(&str, &[u8]); 1] = [("Retry-After", seconds)];
                json_at(out, body_at, Status::ServiceUnavailable, &headers, keep_alive);
            }
            Answer::UnsupportedVersion { id, requested, supported } => {
                let body_at = out.len();
                error::push_unsupported_version(out, id, requested, supported);
                json_at(out, body_at, Status::BadRequest, &[], keep_alive);
            }
        }
    }
}

/// Writes a whole refusal: status, headers, JSON-RPC error body.
fn refuse(out: &mut Vec<u8>, r: Refusal, id: Option<&RawId>, keep_alive: bool) {
    let (status, code) = r.status_and_code();
    crate::logging::refused();
    limited!(
        Kind::Refusal,
        tracing::Level::DEBUG,
        status = status.code(),
        code = code.value(),
        reason = ?r,
        culprit = r.culprit().as_str(),
        request_id = id.map(|id| crate::logging::clip(id.as_str())),
        "refused: {}",
        r.message()
    );
    let body_at = out.len();
    push_error_response(out, id, code, r.message(), None);
    let mut digits = [0; 20];
    let retry_after: [(&str, &[u8]); 1];
    let headers: &[(&str, &[u8])] = if r == Refusal::MethodNotAllowed {
        &[("Allow", b"GET, POST, DELETE")]
    } else if r.retry_after() {
        let seconds = crate::digits::decimal(crate::config::DRAIN_RETRY_AFTER_SECS, &mut digits);
        retry_after = [("Retry-After", seconds)];
        &retry_after
    } else {
        &[]
    };
    json_at(out, body_at, status, headers, keep_alive);
}

/// A complete `application/json` response.
fn json(
    out: &mut Vec<u8>,
    status: Status,
    headers: &[(&str, &[u8])],
    body: &[u8],
    keep_alive: bool,
) {
    json_head(out, status, headers, body.len(), keep_alive);
    out.extend_from_slice(body);
}

/// `json` for a body already in `out` from `body_at` on: the head is appended, then rotated in
/// front of the body (a copy of a few hundred bytes instead of a body buffer per answer).
/// Inlined: fat LTO's choice moved with unrelated code (ping +14 instructions when it was
/// left out of line, callgrind).
#[inline]
fn json_at(
    out: &mut Vec<u8>,
    body_at: usize,
    status: Status,
    headers: &[(&str, &[u8])],
    keep_alive: bool,
) {
    assert!(body_at <= out.len(), "a body starts inside the buffer");
    let body_len = out.len() - body_at;
    json_head(out, status, headers, body_len, keep_alive);
    out[body_at..].rotate_left(body_len);
}

/// The head of a `application/json` answer whose body is `body_len` bytes.
fn json_head(
    out: &mut Vec<u8>,
    status: Status,
    headers: &[(&str, &[u8])],
    body_len: usize,
    keep_alive: bool,
) {
    // The head of nearly every answer in one copy (status line, reason and header names
    // assembled piece by piece cost each answer ~100 instructions: callgrind).
    match status {
        Status::Ok => out.extend_from_slice(JSON_OK_HEAD),
        _ => {
            write_status(out, status.code());
            out.extend_from_slice(b"Content-Type: application/json\r\nContent-Length: ");
        }
    }
    push_decimal(out, body_len as u64);
    out.extend_from_slice(b"\r\n");
    for (n, v) in headers {
        write_header(out, n, v);
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn head_not_allowed(out: &mut Vec<u8>, keep_alive: bool) {
    write_status(out, Status::MethodNotAllowed.code());
    out.extend_from_slice(b"Allow: GET, POST, DELETE\r\nContent-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn empty(out: &mut Vec<u8>, status: Status, keep_alive: bool) {
    write_status(out, status.code());
    out.extend_from_slice(b"Content-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// `json_head` of a 200 up to its `Content-Length` value.
const JSON_OK_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ";

/// The head of a resumable (legacy) SSE answer; `SSE_HEAD_STATELESS` without
/// `Mcp-Stream-Resumable`. Each one copy.
const SSE_HEAD_RESUMABLE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
    Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\
    Mcp-Stream-Resumable: true\r\n\r\n";
const SSE_HEAD_STATELESS: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
    Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n";

fn sse_head(out: &mut Vec<u8>, resumable: bool) {
    out.extend_from_slice(if resumable { SSE_HEAD_RESUMABLE } else { SSE_HEAD_STATELESS });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the one-copy heads are the bytes the piecewise writers give. Method: both ways.
    #[test]
    fn constant_heads_are_the_piecewise_ones() {
        let mut want = Vec::new();
        write_status(&mut want, 200);
        want.extend_from_slice(b"Content-Type: application/json\r\nContent-Length: ");
        assert_eq!(String::from_utf8_lossy(JSON_OK_HEAD), String::from_utf8_lossy(&want));
        for resumable in [true, false] {
            let mut want = Vec::new();
            write_status(&mut want, 200);
            want.extend_from_slice(
                b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                  Transfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n",
            );
            if resumable {
                want.extend_from_slice(b"Mcp-Stream-Resumable: true\r\n");
            }
            want.extend_from_slice(b"\r\n");
            let mut got = Vec::new();
            sse_head(&mut got, resumable);
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
        }
    }

    /// Goal: an answer whose body was written in place (`JsonAt`, `Conflict`, the error
    /// bodies) is byte-for-byte the answer rendered from a separate body, also behind an answer
    /// already in the buffer (pipelining). Method: both ways, compared.
    #[test]
    fn a_body_written_in_place_renders_as_a_separate_one() {
        let earlier = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".as_slice();
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.as_slice();
        for keep_alive in [true, false] {
            let mut separate = earlier.to_vec();
            Answer::Json(body).render(&mut separate, keep_alive);
            let mut in_place = earlier.to_vec();
            in_place.extend_from_slice(body);
            Answer::JsonAt { body_at: earlier.len() }.render(&mut in_place, keep_alive);
            assert_eq!(in_place, separate);

            let id = RawId::new("\"c\"");
            let mut conflict = earlier.to_vec();
            error::push_conflict(&mut conflict, &id, Code::StreamOwed, Some("id"), |_| {});
            let conflict_body = conflict[earlier.len()..].to_vec();
            let hint = Some(b"a-1-2".as_slice());
            Answer::Conflict { body_at: earlier.len(), hint }.render(&mut conflict, keep_alive);
            let mut want = earlier.to_vec();
            let headers =
                [("Mcp-Stream-Resumable", b"true".as_slice()), ("Last-Event-ID", b"a-1-2")];
            json(&mut want, Status::Conflict, &headers, &conflict_body, keep_alive);
            assert_eq!(String::from_utf8_lossy(&conflict), String::from_utf8_lossy(&want));
        }
    }
}
