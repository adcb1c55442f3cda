//! The legacy-era path (MCP 2025-03-26 … 2025-11-25): sessions named by `Mcp-Session-Id`,
//! POST/GET/DELETE on one endpoint, resumable request streams in a per-session replay ring, and
//! the migration decision for every request POST (CONTRACT §4), single or batched.
//!
//! Owns the routes (POST/GET/DELETE), `initialize`, held POSTs and batches; the per-core state
//! is `core` (`LegacyCore`), the decision loop and its 409 data `decision`, the stream a
//! connection writes `writer`.
//!
//! Called by `endpoint` for each request it routes here; answers with an `Outcome`, whose stream
//! (`SseJob`, a `core::Source`: `writer`) the runtime's driver writes. Tools and every other MCP
//! method are answered by `dispatch`. Never: touches a socket, or keeps a
//! `RefCell` borrow across an await.

mod adopt;
pub(crate) mod context;
mod core;
mod decision;
mod expire;
mod list_changed;
pub(crate) mod migration;
pub(crate) mod replay;
pub(crate) mod session;
pub(crate) mod stream;
mod writer;

pub(crate) use writer::SseJob;

use std::rc::Rc;
use std::time::Instant;

use simd_json::prelude::*;

use crate::auth::Access;
use crate::config::ResponseMode;
use crate::core::{refuse, refuse_rate, refuse_scope, reply, Admitted, Request};
use crate::dispatch::{self, ToolRoute};
use crate::http::lists_media_type;
use crate::provider::builtin::BuiltinCall;
use crate::provider::{
    CallContext, Caller, LogLevel, Notifier, ProviderError, SessionInfo, SessionStart,
};
use crate::wire::jsonrpc::{self, Body, Message, RawId};
use crate::wire::{owned_id, Answer, Code, Refusal, WireValue};
use replay::{EventSeq, StreamKey};
use session::{OpenError, Session, SessionId, StreamKind, LEGACY_VERSIONS};
use stream::Cursor;

pub(crate) use self::core::{end_session, LegacyCore, SessionEnd};
pub(crate) use adopt::{adopt_if_absent, mirror_lost};
use decision::{classify, conflict, decide, owed_streams, Verdict};
pub use decision::{facts, fingerprint};
pub(crate) use session::SessionRc;

/// How the legacy path's handling of a request ends: a whole answer, or an SSE response head
/// in the buffer and the stream the connection writes next.
pub(crate) type Outcome = crate::core::Outcome<SseJob>;

/// A request refused before its session was found (the answer is in `out`). Small, unlike
/// `Outcome`, so lookups return it cheaply.
struct Early {
    keep_alive: bool,
}

impl From<Early> for Outcome {
    fn from(early: Early) -> Outcome {
        Outcome::Reply { keep_alive: early.keep_alive }
    }
}

/// Writes a refusal into `out` and ends the request early.
fn refuse_early(out: &mut Vec<u8>, refusal: Refusal, keep_alive: bool) -> Early {
    Answer::Refused { refusal, id: None }.render(out, keep_alive);
    Early { keep_alive }
}

/// Looks up the session a request names; `Err` says how the request ended instead.
fn find_session(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<SessionRc, Early> {
    let keep_alive = req.head.keep_alive;
    let Some(text) = req.header(&req.head.session_id) else {
        return Err(refuse_early(out, Refusal::SessionRequired, keep_alive));
    };
    let Some(id) = SessionId::parse(text) else {
        return Err(refuse_early(out, Refusal::SessionNotFound, keep_alive));
    };
    // `endpoint::owner` moved the request to its session's core unless the session names no
    // core we run (not found), or an earlier name outranked it: a `tasks/*` `Mcp-Name`, which
    // no legacy session uses (the legacy era serves no `tasks/*` method). Either way the
    // session is not here, and this core does not hand the request on.
    if home_core(core, &id) != Some(core.index) {
        return Err(refuse_early(out, Refusal::SessionNotFound, keep_alive));
    }
    let found = core.sessions.borrow().get(&id);
    let now = Instant::now();
    // Another subject's session (or a session opened with a token, named without one) is
    // answered exactly as an unknown one: a 403 would confirm the id exists (CONTRACT §8).
    if found.as_ref().is_some_and(|s| s.borrow().subject() != req.subject()) {
        core.metrics.auth_foreign_subject.inc();
        return Err(refuse_early(out, Refusal::SessionNotFound, keep_alive));
    }
    match found {
        Some(s) if !s.borrow().closed => {
            // Expired but not yet reaped: the reaper's tick must not decide whether it lives.
            if s.borrow().is_expired(now, core.cfg.sessions.session_idle) {
                end_session(core, &id, SessionEnd::Expired);
                return Err(refuse_early(out, Refusal::SessionNotFound, keep_alive));
            }
            let mut session = s.borrow_mut();
            session.last_active = now;
            core.sessions.borrow_mut().keep_close(&mut session);
            drop(session);
            Ok(s)
        }
        _ => Err(refuse_early(out, Refusal::SessionNotFound, keep_alive)),
    }
}

/// The revision the session `req` names negotiated, when it lives on this core (what the
/// audit trail names as a legacy call's era).
pub(crate) fn session_version(core: &LegacyCore, req: &Request<'_>) -> Option<&'static str> {
    let id = SessionId::parse(req.header(&req.head.session_id)?)?;
    let session = core.sessions.borrow().get(&id)?;
    let version = session.borrow().version();
    Some(version)
}

/// The core of this node a session lives on: its own (a session this node made), or, with
/// `--durable`, another node's session folded onto our cores (`owned_id::fold_core`); `None`: none.
fn home_core(core: &LegacyCore, id: &SessionId) -> Option<u16> {
    if id.node == core.cfg.server.node_id {
        return (id.core < core.threads).then_some(id.core);
    }
    core.reader.is_some().then(|| owned_id::fold_core(id.core, core.threads))
}

fn version_ok(req: &Request<'_>) -> bool {
    match req.header(&req.head.protocol_version) {
        None => true,
        Some(v) => LEGACY_VERSIONS.iter().any(|s| s.as_bytes() == v),
    }
}

/// The session a GET or DELETE names, with a supported protocol version.
fn session_for(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<SessionRc, Early> {
    let session = find_session(core, req, out)?;
    if !version_ok(req) {
        return Err(refuse_early(out, Refusal::BadProtocolVersion, req.head.keep_alive));
    }
    Ok(session)
}

/// DELETE: ends the session.
pub(crate) fn delete(core: &Rc<LegacyCore>, req: &Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let session = match session_for(core, req, out) {
        Ok(s) => s,
        Err(early) => return early.into(),
    };
    let id = session.borrow().id;
    end_session(core, &id, SessionEnd::Deleted);
    reply(out, Answer::Deleted, req.head.keep_alive)
}

/// GET: resume a stream (with Last-Event-ID) or open the standalone stream.
pub(crate) fn get(core: &Rc<LegacyCore>, req: &Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let keep_alive = req.head.keep_alive;
    let accepts =
        req.header(&req.head.accept).is_some_and(|a| lists_media_type(a, b"text/event-stream"));
    if !accepts {
        return refuse(out, Refusal::NotAcceptable, None, keep_alive);
    }
    let session = match session_for(core, req, out) {
        Ok(s) => s,
        Err(early) => return early.into(),
    };
    match req.header(&req.head.last_event_id) {
        Some(text) => resume(core, &session, text, out, keep_alive),
        None => standalone(&session, out, keep_alive),
    }
}

/// GET + Last-Event-ID: that stream's events after the id, then live or the end (CONTRACT §3).
fn resume(
    core: &Rc<LegacyCore>,
    session: &SessionRc,
    text: &[u8],
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let mut s = session.borrow_mut();
    let Some((tag, key, after)) = session::parse_event_id(text) else {
        return refuse(out, Refusal::BadLastEventId, None, keep_alive);
    };
    let Some(after) = s.cursor(tag, key, after) else {
        return refuse(out, Refusal::BadLastEventId, None, keep_alive);
    };
    let Ok(start) = s.resume_start(key, after) else {
        return refuse(out, Refusal::BadLastEventId, None, keep_alive);
    };
    core.metrics.replays_total.inc();
    let replay = s.replay_len(key, start);
    core.metrics.hist.resume_replay.observe(replay);
    crate::logging::limited!(
        crate::logging::Kind::Resume,
        tracing::Level::INFO,
        session = %s.id.to_header(),
        stream = key.0,
        after = after.0,
        replay,
        core = s.id.core,
        node = s.id.node,
        reason = "resume",
        "stream resumed (GET + Last-Event-ID): replaying"
    );
    let Some(epoch) = s.attach_resume(key, after) else {
        return refuse(out, Refusal::BadLastEventId, None, keep_alive);
    };
    drop(s);
    stream_reply(out, session, key, epoch, Cursor::after(after), None)
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
    Answer::SseHead.render(out, true);
    Outcome::Job(SseJob::new(session.clone(), key, epoch, cursor, rewrite))
}

/// GET without Last-Event-ID: the session's standalone stream (a new GET takes it over).
fn standalone(session: &SessionRc, out: &mut Vec<u8>, keep_alive: bool) -> Outcome {
    let mut s = session.borrow_mut();
    let key = match s.standalone() {
        Some(k) => k,
        None => match s.open_stream(StreamKind::Standalone, None, 0, None, None) {
            Ok(k) => k,
            Err(_) => return refuse(out, Refusal::TooManyStreams, None, keep_alive),
        },
    };
    let Some(epoch) = s.attach(key) else {
        return refuse(out, Refusal::TooManyStreams, None, keep_alive);
    };
    // Each connection of the standalone stream starts with its own priming event.
    let priming = s.append(key, []).ok();
    drop(s);
    stream_reply(out, session, key, epoch, Cursor::from(EventSeq(0), priming), None)
}

/// POST, admitted at the edge (`endpoint::admit`): the session it names and the header rules,
/// the session's tool scope (`forbidden_in`), then the body's messages.
pub(crate) async fn post(
    core: &Rc<LegacyCore>,
    admitted: Admitted<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let Admitted { req, body, access } = admitted;
    let keep_alive = req.head.keep_alive;
    let session = match req.head.session_id {
        Some(_) => match find_session(core, req, out) {
            Ok(s) => Some(s),
            Err(early) => return early.into(),
        },
        None => None,
    };
    if session.is_some() && !version_ok(req) {
        return refuse(out, Refusal::BadProtocolVersion, None, keep_alive);
    }
    // A key that is not UTF-8 is refused, never ignored (the edge refuses it already).
    let idempotency_key: Option<Box<str>> = match req.header(&req.head.idempotency_key) {
        None => None,
        Some(k) => match std::str::from_utf8(k) {
            Ok(k) => Some(Box::from(k)),
            Err(_) => return refuse(out, Refusal::BadIdempotencyKey, None, keep_alive),
        },
    };
    let Some(session) = session else {
        return sessionless(core, req, body, out).await;
    };
    // The per-tool policy, before the migration decision: a refused call is never recorded,
    // held or deduplicated (a batch is refused whole when one of its requests is).
    let reference = session.borrow().reference();
    if let Some((id, challenge)) = forbidden_in(core, reference, access, &body) {
        return refuse_scope(out, id.as_ref(), &challenge, keep_alive);
    }
    match body {
        Body::Single(Message::Request { id, method, params }) => {
            if method == "initialize" {
                return refuse(out, Refusal::AlreadyInitialized, Some(&id), keep_alive);
            }
            let trace = req.trace();
            let parts = RequestParts { id, method, params, idempotency_key, trace };
            request(core, req, &session, access, parts, out, keep_alive).await
        }
        Body::Single(Message::Notification { method, params }) => {
            notification(&session, method, &params);
            reply(out, Answer::Accepted, keep_alive)
        }
        Body::Single(Message::Response { id, outcome }) => {
            client_answer(&session, &id, outcome);
            reply(out, Answer::Accepted, keep_alive)
        }
        Body::Batch(msgs) => batch(core, req, &session, access, msgs, out, keep_alive).await,
    }
}

/// The policy's refusal of a request of `body` (`Core::forbidden`): the request's id (none for
/// a batch) and the 403's challenge.
fn forbidden_in(
    core: &LegacyCore,
    reference: crate::provider::SessionRef,
    access: Option<Access<'_>>,
    body: &Body,
) -> Option<(Option<RawId>, String)> {
    let access = access?;
    match body {
        Body::Single(Message::Request { id, method, params }) => {
            core.forbidden(reference, access, method, params).map(|c| (Some(id.clone()), c))
        }
        Body::Single(_) => None,
        Body::Batch(msgs) => msgs.iter().find_map(|m| match m {
            Message::Request { method, params, .. } => {
                core.forbidden(reference, access, method, params).map(|c| (None, c))
            }
            _ => None,
        }),
    }
}

/// A POST without a session: `initialize`, or a refusal (a request whose `_meta` names
/// 2026-07-28 never comes here: `endpoint::admit` sends it to the modern era). A request naming
/// a revision older than we serve gets 400 with the spec's UnsupportedProtocolVersion error
/// listing ours.
async fn sessionless(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    body: Body<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let keep_alive = req.head.keep_alive;
    match body {
        Body::Single(Message::Request { id, method, params }) => {
            if method == "initialize" {
                // A session (and maybe an upstream child) is the most a request can cost.
                if let Some(limited) = core.rate_limited(req, None) {
                    return refuse_rate(out, Some(&id), &limited, keep_alive);
                }
                let subject = req.subject().map(Box::from);
                initialize(core, id, params, subject, req.caller(), out, keep_alive).await
            } else if !version_ok(req) {
                let requested = req.header(&req.head.protocol_version).map(String::from_utf8_lossy);
                let answer = Answer::UnsupportedVersion {
                    id: &id,
                    requested: requested.as_deref().unwrap_or(""),
                    supported: &crate::wire::revision::SUPPORTED_VERSIONS,
                };
                reply(out, answer, keep_alive)
            } else {
                refuse(out, Refusal::SessionRequired, Some(&id), keep_alive)
            }
        }
        Body::Single(_) | Body::Batch(_) => refuse(out, Refusal::SessionRequired, None, keep_alive),
    }
}

/// `initialize` without a session: creates one on this core (MCP lifecycle: echo a supported
/// requested version, else answer with our latest), once every provider has opened it (a
/// bridge starts the session's upstream first, and adds its capabilities and instructions).
async fn initialize(
    core: &Rc<LegacyCore>,
    id: RawId,
    params: WireValue<'_>,
    subject: Option<Box<str>>,
    caller: Option<Caller>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    // A draining server takes no new session: the client retries here later or elsewhere.
    if core.draining.get() {
        return refuse(out, Refusal::Draining, Some(&id), keep_alive);
    }
    if core.sessions.borrow().is_full() {
        core.metrics.limit_sessions.inc();
        return refuse(out, Refusal::TooManySessions, Some(&id), keep_alive);
    }
    let requested =
        params.get("protocolVersion").and_then(ValueIntoString::into_string).unwrap_or("");
    let version =
        LEGACY_VERSIONS.iter().copied().find(|v| *v == requested).unwrap_or(LEGACY_VERSIONS[0]);
    let (Ok(sid), Ok(tag)) =
        (SessionId::generate(core.cfg.server.node_id, core.index), random_u32())
    else {
        return refuse(out, Refusal::Unavailable, Some(&id), keep_alive);
    };
    let mut session = Session::new(sid, tag, version, &core.cfg);
    session.set_opener(subject, caller.clone());
    session.count_bytes_in(core.tally.clone());
    let reference = session.reference();
    // In the table while the providers open it (no client knows its id yet), so that a
    // provider's notifier reaches it.
    let session = core.sessions.borrow_mut().insert(session);
    let notifier = Notifier::new(Rc::new(context::SessionNotifier::new(
        &session,
        core.cfg.sessions.list_changed_min,
    )));
    let client_params = dispatch::into_public(params);
    let start = SessionStart {
        session: reference,
        protocol_version: version,
        client_params,
        notifier,
        caller,
    };
    let infos = match core.registry.open_session(&start).await {
        Ok(infos) => infos,
        Err(e) => {
            core.sessions.borrow_mut().remove(&sid);
            if matches!(e, ProviderError::Unavailable(_)) {
                core.metrics.limit_upstream.inc();
                return refuse(out, Refusal::UpstreamBusy, Some(&id), keep_alive);
            }
            if let Some(down) = crate::core::reply_down(out, &e, &id, keep_alive) {
                return down;
            }
            let mut body = Vec::with_capacity(128);
            crate::dispatch::push_provider_error(&mut body, &id, &e);
            return reply(out, Answer::Json(&body), keep_alive);
        }
    };
    core.metrics.sessions_created_total.inc();
    core.metrics.sessions_active.inc();
    adopt::mirror_new_session(core, &session, &start.client_params);
    let result = initialize_result(core, version, &infos);
    let mut body = Vec::with_capacity(512);
    crate::wire::push_result_value(&mut body, &id, &result);
    let header = sid.to_header();
    reply(out, Answer::Initialized { body: &body, session_id: header.as_bytes() }, keep_alive)
}

/// tidemark's own `instructions`: the one thing a client should know about this endpoint.
const INSTRUCTIONS: &str = "tidemark: resumable MCP streams. If a stream drops, resume it with GET + Last-Event-ID instead of re-POSTing.";

/// The `initialize` result: tidemark's capabilities with the providers' merged over them, their
/// instructions after tidemark's, and the first provider-given `serverInfo` (a bridge with one
/// upstream announces the upstream's).
fn initialize_result(
    core: &LegacyCore,
    version: &str,
    infos: &[SessionInfo],
) -> crate::provider::Value {
    let mut capabilities = (*core.registry.capabilities()).clone();
    let mut instructions = String::from(INSTRUCTIONS);
    let mut server_info = None;
    for info in infos {
        if let (Some(crate::provider::Value::Object(theirs)), Some(ours)) =
            (&info.capabilities, capabilities.as_object_mut())
        {
            for (name, value) in theirs {
                ours.insert(name.clone(), value.clone());
            }
        }
        if let Some(text) = &info.instructions {
            instructions.push_str("\n\n");
            instructions.push_str(text);
        }
        if server_info.is_none() {
            server_info = info.server_info.clone();
        }
    }
    let server_info = server_info.unwrap_or_else(
        || serde_json::json!({ "name": "tidemark", "version": env!("CARGO_PKG_VERSION") }),
    );
    serde_json::json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
        "instructions": instructions,
    })
}

fn random_u32() -> Result<u32, getrandom::Error> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// Notifications are never held or refused (CONTRACT §4). `notifications/cancelled` stops an
/// owed or running request.
fn notification(session: &SessionRc, method: &str, params: &WireValue<'_>) {
    if method != "notifications/cancelled" {
        return;
    }
    let Some(request_id) = params.get("requestId") else { return };
    if !(request_id.is_str() || request_id.is_i64() || request_id.is_u64()) {
        return;
    }
    let raw = RawId::new(&request_id.encode());
    let mut s = session.borrow_mut();
    let key = s.by_request_id(&raw).filter(|st| st.is_running() || st.is_owed()).map(|st| st.key);
    if let Some(key) = key {
        s.drop_stream(key);
    }
}

/// A JSON-RPC response POSTed by the client: the answer to a server→client request.
fn client_answer(session: &SessionRc, id: &RawId, outcome: Result<WireValue<'_>, WireValue<'_>>) {
    let Ok(n) = id.as_str().parse::<u64>() else { return };
    let pending = session.borrow_mut().take_pending_client(n);
    if let Some(p) = pending {
        let outcome = outcome.map(dispatch::into_public).map_err(dispatch::into_public);
        *p.answer.borrow_mut() = Some(outcome);
        p.signal.notify_all();
    }
}

/// One JSON-RPC request as the decision and the dispatch see it.
struct RequestParts<'a> {
    id: RawId,
    method: &'a str,
    params: WireValue<'a>,
    idempotency_key: Option<Box<str>>,
    /// The request span's context (`None`: tracing is off), for the call's upstream spans.
    trace: Option<crate::trace::TraceParent>,
}

/// A JSON-RPC request on a session: the migration decision, then the answer.
async fn request(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    session: &SessionRc,
    access: Option<Access<'_>>,
    parts: RequestParts<'_>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let RequestParts { id, method, params, idempotency_key, trace } = parts;
    let reference = session.borrow().reference();
    let class = match classify(core, reference, method, &params).await {
        Ok(class) => class,
        Err((code, message)) => {
            return crate::core::reply_error(out, &id, code, &message, keep_alive);
        }
    };
    match decide(core, session, &id, &class, idempotency_key.as_deref()).await {
        Verdict::Run => {}
        Verdict::Conflict(refused) => return conflict(session, &refused, &id, out, keep_alive),
        Verdict::KeyReused => return reply(out, Answer::KeyReused { id: &id }, keep_alive),
        Verdict::Deduplicated(key) => {
            let progress_token = progress_token_of(class.top.meta);
            return deduplicated(session, key, id, progress_token, out, keep_alive);
        }
    }
    // Rate limits only once the request is known to run: a retry the boundary answers from
    // what is recorded (or points to its owed stream) is never throttled out of its data.
    if let Some(limited) = core.rate_limited(req, class.tool.as_ref()) {
        return refuse_rate(out, Some(&id), &limited, keep_alive);
    }
    let streams = class.tool.is_some() || core.cfg.sessions.response_mode == ResponseMode::Sse;
    // Rings at the core's ceiling: no new stream (running ones go on) rather than growing.
    if streams && core.tally.ring_bytes.get() > core.cfg.sessions.core_buffer_bytes {
        core.metrics.limit_buffer.inc();
        return refuse(out, Refusal::BufferBudget, Some(&id), keep_alive);
    }
    if !streams {
        // The body straight into `out`; the head goes in front of it.
        let body_at = out.len();
        answer_inline(core, session, access, &id, method, &params, out).await;
        return reply(out, Answer::JsonAt { body_at }, keep_alive);
    }
    let progress_token = progress_token_of(class.top.meta);
    // A quick call (no write-ahead wait): nothing is awaited from its opening to the end of
    // its first poll (`Session::open_quick_stream`).
    let quick = class.idempotent && class.tool.is_some();
    let sse = core.cfg.sessions.response_mode != ResponseMode::Json;
    let opening = (id.clone(), class.fingerprint, idempotency_key, progress_token);
    let opened = open_request_stream(session, opening, quick, sse);
    let Ok((key, attached)) = opened else {
        core.metrics.limit_streams.inc();
        return refuse(out, Refusal::TooManyStreams, Some(&id), keep_alive);
    };
    match class.tool {
        Some(route) => {
            // The store must know the call runs before it runs (CONTRACT §10): an adopter
            // then ends it with its result or -31006, never by running it again.
            if !class.idempotent && core.mirror.is_some() {
                adopt::write_ahead(core, session).await;
            }
            run_call(session, key, route, class.top.arguments, trace);
        }
        None => {
            let mut payload = Vec::with_capacity(256);
            answer_inline(core, session, access, &id, method, &params, &mut payload).await;
            session.borrow_mut().finish(key, &payload);
        }
    }
    if core.cfg.sessions.response_mode == ResponseMode::Json {
        return json_when_done(session, key, out, keep_alive).await;
    }
    let attached = attached.or_else(|| session.borrow_mut().attach_fresh(key));
    let Some((epoch, first)) = attached else {
        return refuse(out, Refusal::TooManyStreams, Some(&id), keep_alive);
    };
    stream_reply(out, session, key, epoch, Cursor::from(EventSeq(0), Some(first)), None)
}

/// Opens the answer stream of a request that runs, `(id, fingerprint, idempotency key,
/// progress token)`. A quick call (nothing awaited from its opening to the end of its first
/// poll, `Session::open_quick_stream`) answered on SSE opens attached to this request's
/// writer (`Session::open_quick_attached`: nothing is awaited until the writer takes it, so
/// it need not be owed meanwhile), returned with the key; any other stream is attached after
/// its call starts.
fn open_request_stream(
    session: &SessionRc,
    (id, fingerprint, idempotency_key, progress_token): (
        RawId,
        u64,
        Option<Box<str>>,
        Option<RawId>,
    ),
    quick: bool,
    sse: bool,
) -> Result<(StreamKey, Option<(u64, EventSeq)>), OpenError> {
    let mut s = session.borrow_mut();
    if quick && sse {
        let (key, epoch, first) =
            s.open_quick_attached(id, fingerprint, idempotency_key, progress_token)?;
        return Ok((key, Some((epoch, first))));
    }
    let opened = if quick {
        s.open_quick_stream(id, fingerprint, idempotency_key, progress_token)
    } else {
        let kind = StreamKind::Request;
        s.open_stream(kind, Some(id), fingerprint, idempotency_key, progress_token)
    };
    opened.map(|key| (key, None))
}

/// `_meta.progressToken` as JSON text, read only once the request is known to open or read a
/// stream (a refused or conflicting request copies nothing). Held inline like an id (MCP: a
/// string or an integer), so it allocates nothing unless it is long. `meta` is the params'
/// top-level `_meta` (`Classified::top`).
fn progress_token_of(meta: Option<WireValue>) -> Option<RawId> {
    let token = meta?.get("progressToken")?;
    Some(RawId::encoded(token))
}

/// Runs a tool call on stream `key`. A built-in tool is called past the provider API: an
/// instant one (`echo`) answers here, its answer written straight into the final event,
/// with no future, task, waker or context built; one that runs on is driven like any call.
fn run_call(
    session: &SessionRc,
    key: StreamKey,
    route: ToolRoute,
    arguments: Option<WireValue<'_>>,
    trace: Option<crate::trace::TraceParent>,
) {
    if let Some(builtin) = crate::provider::builtin::as_builtin(route.provider.as_ref()) {
        let make_cx = || call_context(session, key).with_trace(trace);
        let source = crate::provider::builtin::ContextSource::Lazy(&make_cx);
        let in_place = crate::provider::ToolArguments(arguments);
        match builtin.call(&route.name, in_place, source) {
            Some(BuiltinCall::Now(outcome)) => return stream::finish_now(session, key, outcome),
            Some(BuiltinCall::Running(work)) => {
                return stream::spawn_job(session.clone(), key, work)
            }
            None => {}
        }
    }
    // A user provider: its arguments copied into the provider API's value; a bridge's result
    // passed on as its upstream's text (`dispatch`).
    let cx = call_context(session, key).with_trace(trace);
    let work = dispatch::call_tool_answer(route, arguments, cx);
    stream::spawn_job(session.clone(), key, crate::provider::builtin::RunningWork::Boxed(work));
}

/// The context of a tool call on stream `key`.
fn call_context(session: &SessionRc, key: StreamKey) -> CallContext {
    let (identity, version, caller) = {
        let s = session.borrow();
        (s.reference(), s.version(), s.caller().cloned())
    };
    let sink = context::stream_sink(Rc::downgrade(session), key);
    CallContext::new(sink, identity, version).with_caller(caller)
}

/// Answers a request that needs no stream into `out`: `logging/setLevel` here (it is session
/// state), everything else through the providers.
async fn answer_inline(
    core: &Rc<LegacyCore>,
    session: &SessionRc,
    access: Option<Access<'_>>,
    id: &RawId,
    method: &str,
    params: &WireValue<'_>,
    out: &mut Vec<u8>,
) {
    if method != "logging/setLevel" {
        let reference = session.borrow().reference();
        core.registry.answer(reference, access, id, method, params, out).await;
        return;
    }
    match params.get("level").and_then(ValueIntoString::into_string).and_then(LogLevel::parse) {
        Some(level) => {
            session.borrow_mut().log_level = level;
            jsonrpc::push_result(out, id, b"{}");
        }
        None => crate::wire::push_error_response(
            out,
            Some(id),
            Code::InvalidParams,
            "unknown log level",
            None,
        ),
    }
}

/// A batch (2025-03-26 sessions only): notifications and responses are taken; each request
/// goes through the same migration decision as a single one and is answered inline, all in one
/// JSON array. `tools/call` and `initialize` must be sent alone (they stream, or start a
/// session). Idempotency keys name a single request, so a batch has none.
async fn batch(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    session: &SessionRc,
    access: Option<Access<'_>>,
    msgs: Vec<Message<'_>>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    if session.borrow().version() != "2025-03-26" {
        return refuse(out, Refusal::InvalidRequest, None, keep_alive);
    }
    let mut body = Vec::new();
    let mut answered = 0usize;
    for m in msgs {
        let (id, method, params) = match m {
            Message::Notification { method, params } => {
                notification(session, method, &params);
                continue;
            }
            Message::Response { id, outcome } => {
                client_answer(session, &id, outcome);
                continue;
            }
            Message::Request { id, method, params } => (id, method, params),
        };
        body.push(if answered == 0 { b'[' } else { b',' });
        answered += 1;
        batch_answer(core, req, session, access, &id, method, &params, &mut body).await;
    }
    if answered == 0 {
        return reply(out, Answer::Accepted, keep_alive);
    }
    body.push(b']');
    reply(out, Answer::Json(&body), keep_alive)
}

/// One request of a batch, answered into the batch's array.
#[allow(clippy::too_many_arguments)]
async fn batch_answer(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    session: &SessionRc,
    access: Option<Access<'_>>,
    id: &RawId,
    method: &str,
    params: &WireValue<'_>,
    body: &mut Vec<u8>,
) {
    if method == "tools/call" || method == "initialize" {
        let message = "send this request alone, not in a batch";
        crate::wire::push_error_response(body, Some(id), Code::InvalidRequest, message, None);
        return;
    }
    let reference = session.borrow().reference();
    let class = match classify(core, reference, method, params).await {
        Ok(class) => class,
        Err((code, message)) => {
            crate::wire::push_error_response(body, Some(id), code, &message, None);
            return;
        }
    };
    match decide(core, session, id, &class, None).await {
        // Each request of a batch meets the limits on its own; one over them gets its error
        // in the array (the batch's status is shared: 200).
        Verdict::Run => match core.rate_limited(req, None) {
            Some(limited) => limited.push_error(body, id),
            None => answer_inline(core, session, access, id, method, params, body).await,
        },
        Verdict::Conflict(refused) => {
            let s = session.borrow();
            let matched_by = refused.matched_by.map(|by| by.as_str());
            crate::wire::push_batch_conflict(body, id, refused.code, matched_by, |emit| {
                owed_streams(&s, &refused, emit)
            });
        }
        // Unreachable without an Idempotency-Key; answered like a single request would be.
        Verdict::KeyReused | Verdict::Deduplicated(_) => {
            answer_inline(core, session, access, id, method, params, body).await
        }
    }
}

/// `--response-mode json`: waits for the final response and sends it as one JSON body. The
/// waiting connection is the stream's writer: the stream is attached, not owed.
async fn json_when_done(
    session: &SessionRc,
    key: StreamKey,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let epoch = session.borrow_mut().attach(key);
    let outcome = loop {
        let signals = {
            let s = session.borrow();
            let Some(st) = s.stream(key) else {
                break refuse(out, Refusal::SessionNotFound, None, keep_alive);
            };
            match s.final_payload(key) {
                // Its wake-ups are made only when the answer is not there yet.
                None => st.signals(),
                Some(payload) => {
                    // Written from the ring's buffer in place.
                    let answered = match payload {
                        Some(payload) => reply(out, Answer::Json(payload), keep_alive),
                        None => reply(out, Answer::Accepted, keep_alive),
                    };
                    drop(s);
                    session.borrow_mut().mark_all_delivered(key);
                    break answered;
                }
            }
        };
        signals.events.notified().await;
    };
    if let Some(epoch) = epoch {
        session.borrow_mut().detach(key, epoch);
    }
    outcome
}

/// Step 1 hit: the earlier stream answers, from its first message, with this POST's id.
fn deduplicated(
    session: &SessionRc,
    key: StreamKey,
    id: RawId,
    progress_token: Option<RawId>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let mut s = session.borrow_mut();
    let Some(st) = s.stream(key) else {
        return refuse(out, Refusal::BadLastEventId, Some(&id), keep_alive);
    };
    let first = st.first;
    let same_id = st.request_id.as_ref() == Some(&id);
    let tokens = match (progress_token, st.progress_token.clone()) {
        (Some(retry), Some(original)) if retry != original => {
            Some((Box::from(retry.as_str()), Box::from(original.as_str())))
        }
        _ => None,
    };
    let rewrite = (!same_id || tokens.is_some())
        .then(|| stream::Rewrite { id: id.clone(), progress_token: tokens });
    let first_held = s.ring.get(first).is_some_and(|e| e.stream == key);
    // The original is still being written to a live connection (two live requests with one
    // key): read alongside it instead of taking it over, so neither connection is cut.
    let epoch = if st.is_attached() {
        stream::OBSERVER_EPOCH
    } else {
        match s.attach(key) {
            Some(epoch) => epoch,
            None => return refuse(out, Refusal::BadLastEventId, Some(&id), keep_alive),
        }
    };
    drop(s);
    let cursor = Cursor::from(first, first_held.then_some(first));
    stream_reply(out, session, key, epoch, cursor, rewrite).map_job(SseJob::into_retry)
}
