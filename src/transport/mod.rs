//! MCP Streamable HTTP (legacy era, 2025-03-26 … 2025-11-25) on one endpoint: POST/GET/DELETE
//! routing, the header checks (Host/Origin, Accept, Content-Type, session, protocol version),
//! the JSON-RPC methods, and the migration decision for every request POST (CONTRACT §4).
//!
//! Called by `conn` once per parsed request; answers with an `Outcome` telling the connection
//! what to do next. Never: touches a socket, or keeps a `RefCell` borrow across an await.

pub mod reply;

use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use simd_json::prelude::*;

use crate::config::{Config, MigrationPolicy, ResponseMode};
use crate::http::{is_media_type, lists_media_type, Method, RequestHead};
use crate::jsonrpc::{self, Body, Message, RawId};
use crate::metrics::CoreMetrics;
use crate::migration::{self, Decision, Facts, KeyMatch};
use crate::replay::{EventSeq, StreamKey};
use crate::session::{self, Session, SessionId, SessionTable, StreamKind, LEGACY_VERSIONS};
use crate::stream::{self, Cursor, Emitter};
use crate::tool::{Registry, ToolError, Value};
pub use reply::Refusal;

/// Project error codes (CONTRACT §6).
pub const STREAM_OWED: i64 = -31001;
pub const REQUEST_ID_REUSED: i64 = -31002;
pub const HELD_TOO_LONG: i64 = -31004;
pub const KEY_REUSED: i64 = -31005;
/// MCP 2026-07-28 `UnsupportedProtocolVersionError`.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// One core's view of the server.
pub struct Core {
    pub cfg: Arc<Config>,
    pub index: u16,
    pub threads: u16,
    pub registry: Registry,
    pub sessions: RefCell<SessionTable>,
    pub metrics: Arc<CoreMetrics>,
}

type SessionRc = Rc<RefCell<Session>>;

/// A stream a connection is to write after the response head.
pub struct SseJob {
    pub session: SessionRc,
    pub key: StreamKey,
    pub epoch: u64,
    pub cursor: Cursor,
    /// How a deduplicated retry sees the stream (its own id and progress token).
    pub rewrite: Option<stream::Rewrite>,
}

/// What the connection does after `handle`.
pub enum Outcome {
    /// A whole response is in the output buffer.
    Reply { keep_alive: bool },
    /// An SSE response head is in the buffer; write the stream next.
    Stream(SseJob),
    /// The session lives on another core: move the connection there, unanswered.
    HandOff(u16),
}

/// The parts of a request `handle` reads: the head's bytes and the (mutable) body.
pub struct Request<'a> {
    pub head: &'a RequestHead,
    pub head_bytes: &'a [u8],
    pub body: &'a mut [u8],
}

impl Request<'_> {
    fn header(&self, r: &Option<std::ops::Range<usize>>) -> Option<&[u8]> {
        r.as_ref().map(|r| &self.head_bytes[r.clone()])
    }
}

fn reply(out: &mut Vec<u8>, r: Refusal, id: Option<&RawId>, keep_alive: bool) -> Outcome {
    reply::refuse(out, r, id, keep_alive);
    Outcome::Reply { keep_alive }
}

/// Entry point: one parsed request.
pub async fn handle(core: &Rc<Core>, req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    core.metrics.requests_total.inc();
    let keep_alive = req.head.keep_alive;
    let (authority, path) = split_target(&req.head_bytes[req.head.path.clone()]);
    let path = path.split(|&b| b == b'?').next().unwrap_or(path);
    if path != core.cfg.path.as_bytes() {
        return reply(out, Refusal::NotFoundPath, None, keep_alive);
    }
    if !host_and_origin_allowed(&core.cfg, &req)
        || authority.is_some_and(|a| !host_allowed(&core.cfg, a))
    {
        return reply(out, Refusal::Forbidden, None, keep_alive);
    }
    match req.head.method() {
        Method::Post => post(core, req, out).await,
        Method::Get => get(core, req, out),
        Method::Delete => delete(core, req, out),
        Method::Head => {
            reply::head_not_allowed(out, keep_alive);
            Outcome::Reply { keep_alive }
        }
        Method::Other => reply(out, Refusal::MethodNotAllowed, None, keep_alive),
    }
}

/// Splits an absolute-form request target (`http://host:port/mcp`, RFC 9112 §3.2.2: a server
/// MUST accept it) into its authority and path; an origin-form target has no authority.
fn split_target(target: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let rest = target.strip_prefix(b"http://").or_else(|| target.strip_prefix(b"https://"));
    match rest {
        None => (None, target),
        Some(rest) => match rest.iter().position(|&b| b == b'/') {
            Some(slash) => (Some(&rest[..slash]), &rest[slash..]),
            None => (Some(rest), b"/"),
        },
    }
}

/// The Host rule, also applied to an absolute-form target's authority (which the server must
/// use instead of Host).
fn host_allowed(cfg: &Config, host: &[u8]) -> bool {
    let listed = cfg.allowed_hosts.iter().any(|h| h.as_bytes() == host);
    listed || !cfg.listen.ip().is_loopback() || is_loopback_authority(host)
}

/// DNS-rebinding protection: on a loopback listener, Host and Origin must be loopback names
/// unless allowed by flag. On other listeners only Origin is checked against the allow-list.
fn host_and_origin_allowed(cfg: &Config, req: &Request<'_>) -> bool {
    let loopback = cfg.listen.ip().is_loopback();
    if let Some(host) = req.header(&req.head.host) {
        if !host_allowed(cfg, host) {
            return false;
        }
    }
    if let Some(origin) = req.header(&req.head.origin) {
        let listed = cfg.allowed_origins.iter().any(|o| o.as_bytes() == origin);
        let authority = origin
            .strip_prefix(b"http://")
            .or_else(|| origin.strip_prefix(b"https://"))
            .map(is_loopback_authority)
            .unwrap_or(false);
        if !listed && !authority && origin != b"null" {
            return false;
        }
        if !listed && origin == b"null" && loopback {
            return false;
        }
    }
    true
}

/// `localhost`, `127.x.y.z` or `[::1]`, with an optional port.
fn is_loopback_authority(a: &[u8]) -> bool {
    let host = if a.starts_with(b"[") {
        match a.iter().position(|&b| b == b']') {
            Some(end) => &a[..=end],
            None => return false,
        }
    } else {
        a.split(|&b| b == b':').next().unwrap_or(a)
    };
    host.eq_ignore_ascii_case(b"localhost")
        || host == b"[::1]"
        || (host.starts_with(b"127.")
            && std::str::from_utf8(host).is_ok_and(|h| h.parse::<std::net::Ipv4Addr>().is_ok()))
}

/// Looks up the session a request names; `Err` is the outcome to return.
fn find_session(
    core: &Rc<Core>,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<SessionRc, Outcome> {
    let keep_alive = req.head.keep_alive;
    let Some(text) = req.header(&req.head.session_id) else {
        return Err(reply(out, Refusal::SessionRequired, None, keep_alive));
    };
    let Some(id) = SessionId::parse(text) else {
        return Err(reply(out, Refusal::SessionNotFound, None, keep_alive));
    };
    if id.core != core.index {
        if id.core >= core.threads {
            return Err(reply(out, Refusal::SessionNotFound, None, keep_alive));
        }
        return Err(Outcome::HandOff(id.core));
    }
    let found = core.sessions.borrow().get(&id);
    let now = Instant::now();
    match found {
        Some(s) if !s.borrow().closed => {
            // Expired but not yet reaped: the reaper's tick must not decide whether it lives.
            if s.borrow().is_expired(now, core.cfg.session_idle) {
                if core.sessions.borrow_mut().remove(&id).is_some() {
                    core.metrics.sessions_expired_total.inc();
                    core.metrics.sessions_active.sub(1);
                }
                return Err(reply(out, Refusal::SessionNotFound, None, keep_alive));
            }
            s.borrow_mut().last_active = now;
            Ok(s)
        }
        _ => Err(reply(out, Refusal::SessionNotFound, None, keep_alive)),
    }
}

fn version_ok(req: &Request<'_>) -> bool {
    match req.header(&req.head.protocol_version) {
        None => true,
        Some(v) => LEGACY_VERSIONS.iter().any(|s| s.as_bytes() == v),
    }
}

fn delete(core: &Rc<Core>, req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let keep_alive = req.head.keep_alive;
    let session = match find_session(core, &req, out) {
        Ok(s) => s,
        Err(o) => return o,
    };
    if !version_ok(&req) {
        return reply(out, Refusal::BadProtocolVersion, None, keep_alive);
    }
    let id = session.borrow().id;
    if core.sessions.borrow_mut().remove(&id).is_some() {
        core.metrics.sessions_deleted_total.inc();
        core.metrics.sessions_active.sub(1);
    }
    reply::empty(out, 200, keep_alive);
    Outcome::Reply { keep_alive }
}

fn get(core: &Rc<Core>, req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let keep_alive = req.head.keep_alive;
    let accepts =
        req.header(&req.head.accept).is_some_and(|a| lists_media_type(a, b"text/event-stream"));
    if !accepts {
        return reply(out, Refusal::NotAcceptable, None, keep_alive);
    }
    let session = match find_session(core, &req, out) {
        Ok(s) => s,
        Err(o) => return o,
    };
    if !version_ok(&req) {
        return reply(out, Refusal::BadProtocolVersion, None, keep_alive);
    }
    match req.header(&req.head.last_event_id) {
        Some(text) => resume(core, &session, text, out, keep_alive),
        None => standalone(&session, out, keep_alive),
    }
}

/// GET + Last-Event-ID: that stream's events after the id, then live or the end (CONTRACT §3).
fn resume(
    core: &Rc<Core>,
    session: &SessionRc,
    text: &[u8],
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let mut s = session.borrow_mut();
    let Some((tag, key, after)) = session::parse_event_id(text) else {
        return reply(out, Refusal::BadLastEventId, None, keep_alive);
    };
    if tag != s.tag || s.stream(key).is_none() {
        return reply(out, Refusal::BadLastEventId, None, keep_alive);
    }
    if s.resume_start(key, after).is_err() {
        return reply(out, Refusal::BadLastEventId, None, keep_alive);
    }
    core.metrics.replays_total.inc();
    s.mark_delivered(key, after);
    let Some(epoch) = s.attach(key) else {
        return reply(out, Refusal::BadLastEventId, None, keep_alive);
    };
    let backlog =
        s.stream(key).is_some_and(|st| st.produced > after || st.final_seq.is_some() || st.dropped);
    if backlog {
        s.set_replaying(key, true);
    }
    drop(s);
    stream_reply(out, session, key, epoch, Cursor { after, from: None }, None)
}

/// The head of an SSE response, and the stream its connection is to write next.
fn stream_reply(
    out: &mut Vec<u8>,
    session: &SessionRc,
    key: StreamKey,
    epoch: u64,
    cursor: Cursor,
    rewrite: Option<stream::Rewrite>,
) -> Outcome {
    reply::sse_head(out, None);
    Outcome::Stream(SseJob { session: session.clone(), key, epoch, cursor, rewrite })
}

/// GET without Last-Event-ID: the session's standalone stream (a new GET takes it over).
fn standalone(session: &SessionRc, out: &mut Vec<u8>, keep_alive: bool) -> Outcome {
    let mut s = session.borrow_mut();
    let key = match s.standalone() {
        Some(k) => k,
        None => match s.open_stream(StreamKind::Standalone, None, 0, None, None) {
            Ok(k) => k,
            Err(_) => return reply(out, Refusal::TooManyStreams, None, keep_alive),
        },
    };
    let Some(epoch) = s.attach(key) else {
        return reply(out, Refusal::TooManyStreams, None, keep_alive);
    };
    // Each connection of the standalone stream starts with its own priming event.
    let priming = s.append(key, Bytes::new());
    drop(s);
    stream_reply(out, session, key, epoch, Cursor { after: EventSeq(0), from: priming }, None)
}

async fn post(core: &Rc<Core>, req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let keep_alive = req.head.keep_alive;
    if req.head.last_event_id.is_some() {
        return reply(out, Refusal::LastEventIdOnPost, None, keep_alive);
    }
    let content_type_ok =
        req.header(&req.head.content_type).is_some_and(|c| is_media_type(c, b"application/json"));
    if !content_type_ok {
        return reply(out, Refusal::UnsupportedMediaType, None, keep_alive);
    }
    let accept_ok = req.header(&req.head.accept).is_some_and(|a| {
        lists_media_type(a, b"application/json") && lists_media_type(a, b"text/event-stream")
    });
    if !accept_ok {
        return reply(out, Refusal::NotAcceptable, None, keep_alive);
    }
    // The session is found before the body is decoded, so a request for another core moves
    // with its body still raw.
    let session = match req.head.session_id {
        Some(_) => match find_session(core, &req, out) {
            Ok(s) => Some(s),
            Err(o) => return o,
        },
        None => None,
    };
    if session.is_some() && !version_ok(&req) {
        return reply(out, Refusal::BadProtocolVersion, None, keep_alive);
    }
    let idempotency_key: Option<Box<str>> = req
        .header(&req.head.idempotency_key)
        .and_then(|k| std::str::from_utf8(k).ok())
        .map(Box::from);
    let body = match jsonrpc::decode(req.body, crate::config::JSON_DEPTH_MAX) {
        Ok(b) => b,
        Err(jsonrpc::DecodeError::Parse) => {
            return reply(out, Refusal::ParseError, None, keep_alive)
        }
        Err(jsonrpc::DecodeError::Invalid) => {
            return reply(out, Refusal::InvalidRequest, None, keep_alive)
        }
    };
    match (body, session) {
        (Body::Single(Message::Request { id, method, params }), None) => {
            if method == "initialize" {
                initialize(core, id, &params, out, keep_alive)
            } else if !version_ok(&req) {
                unsupported_version(&req, &id, out, keep_alive)
            } else {
                reply(out, Refusal::SessionRequired, Some(&id), keep_alive)
            }
        }
        (Body::Single(_), None) | (Body::Batch(_), None) => {
            reply(out, Refusal::SessionRequired, None, keep_alive)
        }
        (Body::Single(Message::Request { id, method, params }), Some(s)) => {
            if method == "initialize" {
                return reply(out, Refusal::AlreadyInitialized, Some(&id), keep_alive);
            }
            request(core, &s, id, method, params, idempotency_key, out, keep_alive).await
        }
        (Body::Single(Message::Notification { method, params }), Some(s)) => {
            notification(core, &s, &method, &params);
            reply::empty(out, 202, keep_alive);
            Outcome::Reply { keep_alive }
        }
        (Body::Single(Message::Response { id, outcome }), Some(s)) => {
            client_answer(&s, &id, outcome);
            reply::empty(out, 202, keep_alive);
            Outcome::Reply { keep_alive }
        }
        (Body::Batch(msgs), Some(s)) => batch(core, &s, msgs, out, keep_alive),
    }
}

/// A sessionless request naming a revision we do not serve (e.g. a 2026-07-28 client probing
/// with `server/discover`): 400 with the spec's UnsupportedProtocolVersion error listing our
/// revisions, so the client falls back to the `initialize` handshake (the Python SDK's default
/// mode does exactly that).
fn unsupported_version(
    req: &Request<'_>,
    id: &RawId,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let requested = req.header(&req.head.protocol_version).map(String::from_utf8_lossy);
    let data = simd_json::json!({
        "supported": LEGACY_VERSIONS.to_vec(),
        "requested": requested.as_deref().unwrap_or(""),
    });
    let mut body = Vec::with_capacity(160);
    jsonrpc::push_error(
        &mut body,
        Some(id),
        UNSUPPORTED_PROTOCOL_VERSION,
        "unsupported protocol version: this endpoint serves the initialize handshake",
        Some(&data.encode()),
    );
    reply::json(out, 400, &[], &body, keep_alive);
    Outcome::Reply { keep_alive }
}

/// `initialize` without a session: creates one on this core (MCP lifecycle: echo a supported
/// requested version, else answer with our latest).
fn initialize(
    core: &Rc<Core>,
    id: RawId,
    params: &Value,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    if core.sessions.borrow().is_full() {
        core.metrics.limit_sessions.inc();
        return reply(out, Refusal::TooManySessions, Some(&id), keep_alive);
    }
    let requested = params.get("protocolVersion").and_then(|v| v.as_str()).unwrap_or("");
    let version =
        LEGACY_VERSIONS.iter().copied().find(|v| *v == requested).unwrap_or(LEGACY_VERSIONS[0]);
    let (Ok(sid), Ok(tag)) = (SessionId::generate(core.index), random_u32()) else {
        return reply(out, Refusal::Unavailable, Some(&id), keep_alive);
    };
    let session = Session::new(sid, tag, version, &core.cfg);
    core.sessions.borrow_mut().insert(session);
    core.metrics.sessions_created_total.inc();
    core.metrics.sessions_active.inc();
    let result = simd_json::json!({
        "protocolVersion": version,
        "capabilities": core.registry.capabilities(),
        "serverInfo": { "name": "tidemark", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "tidemark: resumable MCP streams. If a stream drops, resume it with GET + Last-Event-ID instead of re-POSTing."
    });
    let mut body = Vec::with_capacity(512);
    jsonrpc::push_result(&mut body, &id, result.encode().as_bytes());
    let header = sid.to_header();
    reply::json(out, 200, &[("Mcp-Session-Id", header.as_bytes())], &body, keep_alive);
    Outcome::Reply { keep_alive }
}

fn random_u32() -> Result<u32, getrandom::Error> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// Notifications are never held or refused (CONTRACT §4).
fn notification(core: &Rc<Core>, session: &SessionRc, method: &str, params: &Value) {
    if method == "notifications/cancelled" {
        let Some(request_id) = params.get("requestId") else { return };
        if !(request_id.is_str() || request_id.is_i64() || request_id.is_u64()) {
            return;
        }
        let raw = RawId(request_id.encode());
        let mut s = session.borrow_mut();
        let key = s.by_request_id(&raw).filter(|st| st.in_flight || st.is_owed()).map(|st| st.key);
        if let Some(key) = key {
            s.drop_stream(key);
        }
    }
    let _ = core;
}

/// A JSON-RPC response POSTed by the client: the answer to a server→client request.
fn client_answer(session: &SessionRc, id: &RawId, outcome: Result<Value, Value>) {
    let Ok(n) = id.0.parse::<u64>() else { return };
    let pending = session.borrow_mut().pending_client.remove(&n);
    if let Some(p) = pending {
        *p.answer.borrow_mut() = Some(outcome);
        p.signal.notify_all();
    }
}

/// A batch (2025-03-26 sessions only): notifications and responses are taken, requests are
/// answered inline in one JSON array. `tools/call` must be sent alone (it streams).
fn batch(
    core: &Rc<Core>,
    session: &SessionRc,
    msgs: Vec<Message>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    if session.borrow().version != "2025-03-26" {
        return reply(out, Refusal::InvalidRequest, None, keep_alive);
    }
    let mut answers: Vec<Vec<u8>> = Vec::new();
    for m in msgs {
        match m {
            Message::Notification { method, params } => {
                notification(core, session, &method, &params)
            }
            Message::Response { id, outcome } => client_answer(session, &id, outcome),
            Message::Request { id, method, params } => {
                let mut a = Vec::new();
                if method == "tools/call" || method == "initialize" {
                    jsonrpc::push_error(
                        &mut a,
                        Some(&id),
                        jsonrpc::INVALID_REQUEST,
                        "send this request alone, not in a batch",
                        None,
                    );
                } else {
                    inline_answer(core, session, &id, &method, &params, &mut a);
                }
                answers.push(a);
            }
        }
    }
    if answers.is_empty() {
        reply::empty(out, 202, keep_alive);
    } else {
        let mut body = vec![b'['];
        for (i, a) in answers.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(a);
        }
        body.push(b']');
        reply::json(out, 200, &[], &body, keep_alive);
    }
    Outcome::Reply { keep_alive }
}

/// Answers a request that needs no stream: a complete JSON-RPC response into `out`.
fn inline_answer(
    core: &Rc<Core>,
    session: &SessionRc,
    id: &RawId,
    method: &str,
    params: &Value,
    out: &mut Vec<u8>,
) {
    let reg = &core.registry;
    let result: Result<Value, ToolError> = match method {
        "ping" | "resources/subscribe" | "resources/unsubscribe" => Ok(Value::object()),
        "tools/list" => {
            jsonrpc::push_result(out, id, reg.tools_list_json().as_bytes());
            return;
        }
        "resources/list" => Ok(reg.resources_list()),
        "resources/templates/list" => Ok(reg.resource_templates_list()),
        "resources/read" => match params.get("uri").and_then(|u| u.as_str()) {
            Some(uri) => reg.read_resource(uri),
            None => Err(ToolError::InvalidParams("resources/read needs a string uri".into())),
        },
        "prompts/list" => Ok(reg.prompts_list()),
        "prompts/get" => match params.get("name").and_then(|u| u.as_str()) {
            Some(name) => {
                let empty = Value::object();
                reg.get_prompt(name, params.get("arguments").unwrap_or(&empty))
            }
            None => Err(ToolError::InvalidParams("prompts/get needs a string name".into())),
        },
        "completion/complete" => Ok(reg.complete(params)),
        "logging/setLevel" => match params
            .get("level")
            .and_then(|l| l.as_str())
            .and_then(crate::tool::LogLevel::parse)
        {
            Some(level) => {
                session.borrow_mut().log_level = level;
                Ok(Value::object())
            }
            None => Err(ToolError::InvalidParams("unknown log level".into())),
        },
        _ => {
            jsonrpc::push_error(out, Some(id), jsonrpc::METHOD_NOT_FOUND, "method not found", None);
            return;
        }
    };
    match result {
        Ok(v) => jsonrpc::push_result(out, id, v.encode().as_bytes()),
        Err(e) => stream::push_tool_error(out, id, &e),
    }
}

/// Hash of method + canonical params (key order and top-level `_meta` ignored).
pub fn fingerprint(method: &str, params: &Value) -> u64 {
    let mut canon = String::with_capacity(64);
    jsonrpc::canonical_params(params, &mut canon);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    method.hash(&mut h);
    canon.hash(&mut h);
    h.finish()
}

/// Gathers the facts for the decision from the session's maps and counters (all O(1)).
pub fn facts(
    policy: MigrationPolicy,
    s: &Session,
    id: &RawId,
    fp: u64,
    key: Option<&str>,
    idempotent: bool,
) -> Facts {
    let key = match key.and_then(|k| s.by_idempotency_key(k)) {
        None => KeyMatch::None,
        Some(st) if st.fingerprint == fp => KeyMatch::SameRequest(st.key),
        Some(_) => KeyMatch::OtherRequest,
    };
    let by_id = s.by_request_id(id);
    let retry_by_id = by_id.filter(|st| !st.is_settled()).map(|st| st.key);
    let retry_by_fp = s
        .by_fingerprint(fp)
        .filter(|st| st.is_owed() || (st.parked && !st.is_settled()))
        .map(|st| st.key);
    Facts {
        strict: policy == MigrationPolicy::Strict,
        key,
        retry_of: retry_by_id.or(retry_by_fp),
        reused_id_of: by_id.filter(|st| st.is_settled()).map(|st| st.key),
        idempotent,
        session_owes: s.owes(),
    }
}

/// A JSON-RPC request on a session: the migration decision, then the answer.
#[allow(clippy::too_many_arguments)]
async fn request(
    core: &Rc<Core>,
    session: &SessionRc,
    id: RawId,
    method: String,
    params: Value,
    idempotency_key: Option<Box<str>>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let tool = if method == "tools/call" {
        match params.get("name").and_then(|n| n.as_str()).map(|n| (n, core.registry.tool(n))) {
            Some((_, Some(t))) => Some(t),
            Some((name, None)) => {
                let mut body = Vec::new();
                jsonrpc::push_error(
                    &mut body,
                    Some(&id),
                    jsonrpc::INVALID_PARAMS,
                    &format!("unknown tool: {name}"),
                    None,
                );
                reply::json(out, 200, &[], &body, keep_alive);
                return Outcome::Reply { keep_alive };
            }
            None => {
                let mut body = Vec::new();
                jsonrpc::push_error(
                    &mut body,
                    Some(&id),
                    jsonrpc::INVALID_PARAMS,
                    "tools/call needs a string name",
                    None,
                );
                reply::json(out, 200, &[], &body, keep_alive);
                return Outcome::Reply { keep_alive };
            }
        }
    } else {
        None
    };
    let idempotent = match &tool {
        Some(t) => t.spec().annotations.safe_to_repeat(),
        None => migration::method_is_idempotent(&method),
    };
    let fp = fingerprint(&method, &params);
    let progress_token: Option<Box<str>> = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .map(|t| Box::from(t.encode().as_str()));
    let deadline = Instant::now() + core.cfg.owed_wait;
    let mut held = false;
    loop {
        let decision = {
            let s = session.borrow();
            migration::decide(facts(
                core.cfg.migration_policy,
                &s,
                &id,
                fp,
                idempotency_key.as_deref(),
                idempotent,
            ))
        };
        match decision {
            Decision::Fresh => break,
            Decision::Hold => {
                if !held {
                    held = true;
                    core.metrics.posts_held_total.inc();
                }
                let signal = session.borrow().owed_signal.clone();
                let now = Instant::now();
                if now >= deadline
                    || monoio::time::timeout(deadline - now, signal.notified()).await.is_err()
                {
                    if !session.borrow().owes() {
                        continue;
                    }
                    core.metrics.rejected_held_too_long.inc();
                    return conflict(session, None, &id, HELD_TOO_LONG, "held too long while the session owes a stream: resume it with GET + Last-Event-ID first", out, keep_alive);
                }
            }
            Decision::RetryOfOwed(key) => {
                core.metrics.rejected_owed.inc();
                return conflict(session, Some(key), &id, STREAM_OWED, "this request's stream is still owed: resume it with GET + Last-Event-ID instead of re-POSTing", out, keep_alive);
            }
            Decision::IdReused(key) => {
                core.metrics.rejected_id_reused.inc();
                return conflict(session, Some(key), &id, REQUEST_ID_REUSED, "request id already used in this session: fetch the original answer with GET + Last-Event-ID", out, keep_alive);
            }
            Decision::KeyReused => {
                core.metrics.rejected_key_reused.inc();
                let mut body = Vec::new();
                jsonrpc::push_error(
                    &mut body,
                    Some(&id),
                    KEY_REUSED,
                    "Idempotency-Key already used with other method or params",
                    None,
                );
                reply::json(out, 422, &[], &body, keep_alive);
                return Outcome::Reply { keep_alive };
            }
            Decision::Deduplicated(key) => {
                core.metrics.dedup_hits_total.inc();
                return deduplicated(session, key, id, progress_token, out, keep_alive);
            }
        }
    }
    let streams = tool.is_some() || core.cfg.response_mode == ResponseMode::Sse;
    if !streams {
        let mut body = Vec::with_capacity(256);
        inline_answer(core, session, &id, &method, &params, &mut body);
        reply::json(out, 200, &[], &body, keep_alive);
        return Outcome::Reply { keep_alive };
    }
    let opened = session.borrow_mut().open_stream(
        StreamKind::Request,
        Some(id.clone()),
        fp,
        idempotency_key,
        progress_token,
    );
    let key = match opened {
        Ok(k) => k,
        Err(_) => {
            core.metrics.limit_streams.inc();
            return reply(out, Refusal::TooManyStreams, Some(&id), keep_alive);
        }
    };
    match tool {
        Some(tool) => {
            let emitter = Rc::new(Emitter { session: Rc::downgrade(session), key });
            let args = params.get("arguments").cloned().unwrap_or_else(Value::object);
            let work = tool.call(args, emitter);
            stream::spawn_job(session.clone(), key, id.clone(), work);
        }
        None => {
            let mut payload = Vec::with_capacity(256);
            inline_answer(core, session, &id, &method, &params, &mut payload);
            session.borrow_mut().finish(key, Bytes::from(payload));
        }
    }
    if core.cfg.response_mode == ResponseMode::Json {
        // The waiting connection is this stream's writer: the stream is attached, not owed.
        let epoch = session.borrow_mut().attach(key);
        let outcome = json_when_done(session, key, out, keep_alive).await;
        if let Some(epoch) = epoch {
            session.borrow_mut().detach(key, epoch);
        }
        return outcome;
    }
    let (epoch, first) = {
        let mut s = session.borrow_mut();
        let first = s.stream(key).map(|st| st.first);
        (s.attach(key), first)
    };
    let Some(epoch) = epoch else {
        return reply(out, Refusal::TooManyStreams, Some(&id), keep_alive);
    };
    stream_reply(out, session, key, epoch, Cursor { after: EventSeq(0), from: first }, None)
}

/// `--response-mode json`: waits for the final response and sends it as one JSON body.
async fn json_when_done(
    session: &SessionRc,
    key: StreamKey,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    loop {
        let (signal, done) = {
            let s = session.borrow();
            let Some(st) = s.stream(key) else { break };
            let done = st.final_seq.and_then(|f| s.ring.get(f).map(|e| e.payload.clone()));
            (st.signal.clone(), done.or_else(|| (!st.in_flight).then(Bytes::new)))
        };
        if let Some(payload) = done {
            let produced = session.borrow().stream(key).map(|s| s.produced).unwrap_or(EventSeq(0));
            session.borrow_mut().mark_delivered(key, produced);
            if payload.is_empty() {
                reply::empty(out, 202, keep_alive);
            } else {
                reply::json(out, 200, &[], &payload, keep_alive);
            }
            return Outcome::Reply { keep_alive };
        }
        signal.notified().await;
    }
    reply(out, Refusal::SessionNotFound, None, keep_alive)
}

/// Step 1 hit: the earlier stream answers, from its first message, with this POST's id.
fn deduplicated(
    session: &SessionRc,
    key: StreamKey,
    id: RawId,
    progress_token: Option<Box<str>>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let mut s = session.borrow_mut();
    let Some(st) = s.stream(key) else {
        return reply(out, Refusal::BadLastEventId, Some(&id), keep_alive);
    };
    let first = st.first;
    let same_id = st.request_id.as_ref() == Some(&id);
    let tokens = match (progress_token, st.progress_token.clone()) {
        (Some(retry), Some(original)) if retry != original => Some((retry, original)),
        _ => None,
    };
    let rewrite = (!same_id || tokens.is_some())
        .then(|| stream::Rewrite { id: id.clone(), progress_token: tokens });
    let first_held = s.ring.get(first).is_some_and(|e| e.stream == key);
    let Some(epoch) = s.attach(key) else {
        return reply(out, Refusal::BadLastEventId, Some(&id), keep_alive);
    };
    drop(s);
    stream_reply(
        out,
        session,
        key,
        epoch,
        Cursor { after: first, from: first_held.then_some(first) },
        rewrite,
    )
}

/// 409 with the resume hint (CONTRACT §4 steps 2–4).
fn conflict(
    session: &SessionRc,
    key: Option<StreamKey>,
    id: &RawId,
    code: i64,
    message: &str,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let s = session.borrow();
    let listed: Vec<&session::StreamState> = match key {
        Some(k) => s.stream(k).into_iter().collect(),
        None => s.streams().filter(|st| st.is_owed() || st.replaying).collect(),
    };
    let mut data = String::from("{\"owedStreams\":[");
    let mut hint = Vec::new();
    for (i, st) in listed.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        let mut last = Vec::new();
        s.push_event_id(&mut last, st.key, st.resume_hint());
        let mut first = Vec::new();
        s.push_event_id(&mut first, st.key, st.first);
        let mut written = Vec::new();
        s.push_event_id(&mut written, st.key, st.written.max(st.first));
        if hint.is_empty() {
            hint = last.clone();
        }
        data.push_str(&format!(
            "{{\"requestId\":{},\"lastEventId\":\"{}\",\"firstEventId\":\"{}\",\
             \"lastWrittenEventId\":\"{}\",\"inFlight\":{}}}",
            st.request_id.as_ref().map(|r| r.0.as_str()).unwrap_or("null"),
            String::from_utf8_lossy(&last),
            String::from_utf8_lossy(&first),
            String::from_utf8_lossy(&written),
            st.in_flight
        ));
    }
    data.push_str("]}");
    let mut body = Vec::with_capacity(256);
    jsonrpc::push_error(&mut body, Some(id), code, message, Some(&data));
    let mut headers: Vec<(&str, &[u8])> = vec![("Mcp-Stream-Resumable", b"true")];
    if !hint.is_empty() {
        headers.push(("Last-Event-ID", &hint));
    }
    reply::json(out, 409, &headers, &body, keep_alive);
    Outcome::Reply { keep_alive }
}
