//! The 2026-07-28 ("modern") path: stateless MCP on the same endpoint as the legacy sessions.
//! A modern request carries everything it needs (`_meta` with the protocol version, the
//! client's capabilities, optionally its log level) and runs on no session: no `Mcp-Session-Id`,
//! no event ids, no replay ring. Closing the response stream cancels it.
//!
//! Era selection (`endpoint::admit`, before and after the body is decoded):
//! a request without a session whose `MCP-Protocol-Version` names a revision newer than the
//! legacy ones, or whose params carry `_meta["io.modelcontextprotocol/protocolVersion"]`.
//! `initialize` starts a legacy session and a legacy session's requests stay legacy.
//!
//! Owns: the order of a modern request's checks (headers, `_meta`, then the method), the
//! answers of `server/discover` and of the methods that need no stream (with `resultType` and
//! the caching hints), and the streams a connection drives (each a `core::Source`): a call
//! (`call::CallStream`), a keyed call's record read by its request or a retry (`observer`) and
//! a `subscriptions/listen` stream (`listen`). Providers are the same as the legacy path's: a
//! modern request reaches them with `SessionRef::STATELESS` (a bridge then uses its core's shared
//! upstream link).
//! Never: touches a socket, or any legacy session.

pub(crate) mod call;
mod core;
mod durable;
mod expire;
pub(crate) mod keyed;
pub(crate) mod listen;
pub(crate) mod meta;
pub(crate) mod observer;
pub(crate) mod state;
pub(crate) mod task_call;
pub(crate) mod tasks;

use std::rc::Rc;

use simd_json::prelude::*;

pub(crate) use self::core::ModernCore;
use crate::auth::Access;
use crate::core::{refuse, refuse_rate, refuse_scope, reply, Admitted, Request};
use crate::dispatch::{self, ToolRoute};
use crate::provider::{CallContext, SessionRef, Value, CARRIED_PREFIX};
use crate::ratelimit::peer_key;
use crate::wire::jsonrpc::{Body, Message, RawId};
use crate::wire::result::decorate_result;
use crate::wire::{Answer, Code, Refusal, Status, WireValue};
use call::{CallJob, CallStream, ModernSink, SinkSetup};
use meta::{MetaError, RequestMeta};
pub(crate) use observer::Observer;

/// How the modern path's handling of a request ends.
pub(crate) type Outcome = crate::core::Outcome<Job>;

/// What a connection drives after a modern request's head is written.
pub(crate) enum Job {
    /// A `tools/call` or `prompts/get` still running after its first poll.
    Call(CallStream),
    /// A `subscriptions/listen` stream.
    Listen(listen::ListenJob),
    /// A request with an `Idempotency-Key`: it observes the keyed call's record.
    Observe(Observer),
}

/// Methods 2026-07-28 removed: they get 404 with -32601 like any unknown method, named so a
/// reader of the code knows they are meant.
const REMOVED_METHODS: [&str; 5] =
    ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];

/// GET or DELETE of a modern client: the stateless revision has neither (MCP 2026-07-28
/// backward compatibility: 405).
pub(crate) fn not_allowed(req: &Request<'_>, out: &mut Vec<u8>) -> Outcome {
    refuse(out, Refusal::MethodNotAllowed, None, req.head.keep_alive)
}

/// A modern POST, admitted at the edge (`endpoint::admit`: by its protocol version header, or
/// its `_meta` alone) and moved to the core its task or `Idempotency-Key` names
/// (`endpoint::owner`): one request (or a notification, accepted and ignored). Its checks in
/// order (`_meta`, the MCP headers, the tool scope; a `tools/call`'s own: `tools_call`), the
/// rate limit, then its method (`run_tool`, `answer`).
pub(crate) async fn serve(
    core: &Rc<ModernCore>,
    admitted: Admitted<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let Admitted { req, body, access } = admitted;
    let keep_alive = req.head.keep_alive;
    let (id, method, params) = match body {
        Body::Single(Message::Request { id, method, params }) => (id, method, params),
        // The core revision defines no client notification over HTTP; one is taken (202) so
        // that extensions' notifications do not fail.
        Body::Single(Message::Notification { .. }) => {
            return reply(out, Answer::Accepted, keep_alive)
        }
        // "The client MUST NOT send JSON-RPC responses"; batches do not exist since 2025-06-18.
        Body::Single(Message::Response { .. }) | Body::Batch(_) => {
            return refuse(out, Refusal::InvalidRequest, None, keep_alive)
        }
    };
    let protocol_version = req.header(&req.head.protocol_version);
    let request_meta = match meta::check_meta(&params, protocol_version) {
        Ok(m) => m,
        Err(e) => return meta_refusal(out, &id, &e, keep_alive),
    };
    let (mcp_method, mcp_name) = (req.header(&req.head.mcp_method), req.header(&req.head.mcp_name));
    if let Err(e) = meta::check_headers(method, &params, mcp_method, mcp_name) {
        return meta_refusal(out, &id, &e, keep_alive);
    }
    core.metrics.modern_requests_total.inc();
    if method != "server/discover" {
        core.registry.open_stateless().await;
    }
    // The per-tool policy: every 2026-07-28 request is authorized on its own (without
    // authorization there is no access to judge).
    if let Some(access) = access {
        if let Some(challenge) = core.forbidden(SessionRef::STATELESS, access, method, &params) {
            return refuse_scope(out, Some(&id), &challenge, keep_alive);
        }
    }
    let parts = Parts { id, method, params, request_meta };
    let work = match parts.method {
        "tools/call" => match tools_call(core, req, parts, out).await {
            Ok(call) => Work::Call(call),
            Err(answered) => return answered,
        },
        _ => Work::Other(parts),
    };
    // Rate limits, here only, once a request is known to be new work: a `tools/call` once its
    // key is looked up (a keyed retry answered from its record is not); a task's get, update
    // (input responses) or cancel complete admitted work (the task runs once). A continuation
    // (`requestState` with the answers of an input-required round) is not exempt: the state is
    // not single-use and each one runs the tool (or prompt) again.
    let (id, route, new_work) = match &work {
        Work::Call(call) => (&call.id, Some(&call.route), true),
        Work::Other(parts) => (&parts.id, None, !parts.method.starts_with("tasks/")),
    };
    if new_work {
        if let Some(limited) = core.rate_limited(req, route) {
            return refuse_rate(out, Some(id), &limited, keep_alive);
        }
    }
    match work {
        Work::Call(call) => run_tool(core, req, call, out).await,
        Work::Other(parts) => answer(core, req, access, parts, out).await,
    }
}

/// A checked modern request: a `tools/call` ready to run, or any other method.
enum Work<'a> {
    Call(ToolCall<'a>),
    Other(Parts<'a>),
}

/// A modern request that passed its checks, as its method's answer takes it.
struct Parts<'a> {
    id: RawId,
    method: &'a str,
    params: WireValue<'a>,
    request_meta: RequestMeta,
}

/// The answer of a checked request's method: now (discovery, lists, reads, completions, an
/// unknown method) or driven by the connection (a call, a prompt, a listen stream).
async fn answer(
    core: &Rc<ModernCore>,
    req: &Request<'_>,
    access: Option<Access<'_>>,
    parts: Parts<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let keep_alive = req.head.keep_alive;
    let Parts { id, method, params, request_meta } = parts;
    match method {
        "server/discover" => {
            let mut body = Vec::with_capacity(512);
            crate::wire::push_result_value(&mut body, &id, &discover_result(core));
            reply(out, Answer::Json(&body), keep_alive)
        }
        "tools/list"
        | "prompts/list"
        | "resources/list"
        | "resources/templates/list"
        | "resources/read" => {
            let mut body = Vec::with_capacity(512);
            let registry = &core.registry;
            registry.answer(SessionRef::STATELESS, access, &id, method, &params, &mut body).await;
            let hints = cache_hints(core);
            decorate_result(&mut body, &id, &hints);
            reply(out, Answer::Json(&body), keep_alive)
        }
        "completion/complete" => {
            let mut body = Vec::with_capacity(256);
            let registry = &core.registry;
            registry.answer(SessionRef::STATELESS, None, &id, method, &params, &mut body).await;
            decorate_result(&mut body, &id, RESULT_COMPLETE);
            reply(out, Answer::Json(&body), keep_alive)
        }
        "prompts/get" => prompts_get(core, req, id, params, request_meta, out).await,
        "subscriptions/listen" => listen::start(core, id, &params, out).map_job(Job::Listen),
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            let capabilities = &request_meta.client_capabilities;
            if let Some(answer) =
                task_call::recovered(core, req, &id, method, &params, capabilities, out).await
            {
                return answer.widen();
            }
            task_call::serve(core, req, &id, method, &params, capabilities, out).widen()
        }
        _ => method_not_found(&id, method, out, keep_alive),
    }
}

/// 404 with -32601: an unknown method, or one 2026-07-28 removed (named as such).
fn method_not_found(id: &RawId, method: &str, out: &mut Vec<u8>, keep_alive: bool) -> Outcome {
    let known_removed = REMOVED_METHODS.contains(&method);
    let message = if known_removed {
        "method not found: removed in MCP 2026-07-28"
    } else {
        "method not found"
    };
    let (status, code) = (Status::NotFound, Code::MethodNotFound);
    let answer = Answer::Error { status, id: Some(id), code, message, data: None };
    reply(out, answer, keep_alive)
}

/// 400 with a check's JSON-RPC error (and the request's id).
fn meta_refusal(out: &mut Vec<u8>, id: &RawId, e: &MetaError, keep_alive: bool) -> Outcome {
    e.refuse(out, id, keep_alive).widen()
}

/// The members every complete result gets.
const RESULT_COMPLETE: &str = "\"resultType\":\"complete\"";

/// `resultType` plus the caching hints (SEP-2549) of a list or read: `ttlMs` from
/// `--cache-ttl-ms`, `cacheScope` public (nothing tidemark lists depends on who asks).
fn cache_hints(core: &ModernCore) -> String {
    format!(
        "{RESULT_COMPLETE},\"ttlMs\":{},\"cacheScope\":\"public\"",
        core.cfg.modern.cache_ttl_ms
    )
}

/// The `server/discover` result: every revision we serve (the legacy ones through
/// `initialize`), the capabilities, how to use tidemark, and who we are in `_meta`.
fn discover_result(core: &ModernCore) -> Value {
    let mut capabilities = (*core.registry.capabilities()).clone();
    if let Some(resources) = capabilities.get_mut("resources").and_then(Value::as_object_mut) {
        // Resource updates would come through subscriptions/listen's resourceSubscriptions,
        // which tidemark does not deliver yet: do not promise them.
        resources.remove("subscribe");
    }
    task_call::advertise(&mut capabilities);
    serde_json::json!({
        "resultType": "complete",
        "supportedVersions": meta::SUPPORTED_VERSIONS,
        "capabilities": capabilities,
        "instructions": MODERN_INSTRUCTIONS,
        "ttlMs": core.cfg.modern.cache_ttl_ms,
        "cacheScope": "public",
        "_meta": {
            meta::META_SERVER_INFO: { "name": "tidemark", "version": env!("CARGO_PKG_VERSION") },
        },
    })
}

/// What a 2026-07-28 client should know about this endpoint.
const MODERN_INSTRUCTIONS: &str = "tidemark: a dropped response stream cancels the request. To \
    retry a call that must not run twice, send the same Idempotency-Key header with the retry: \
    it gets the first execution's outcome instead of a second execution.";

/// `tools/call` up to its run: the tool's route, its `x-mcp-header` parameters, its task
/// support and input round, its `Idempotency-Key` (a retry answered from its record:
/// `keyed_lookup`). `Ok`: new work, which `serve` rate-limits and `run_tool` runs.
async fn tools_call<'a>(
    core: &Rc<ModernCore>,
    req: &Request<'_>,
    parts: Parts<'a>,
    out: &mut Vec<u8>,
) -> Result<ToolCall<'a>, Outcome> {
    let keep_alive = req.head.keep_alive;
    let Parts { id, params, request_meta, .. } = parts;
    let Some(name) = string_name(&params) else {
        let message = "tools/call needs a string name";
        return Err(crate::core::reply_error(out, &id, Code::InvalidParams, message, keep_alive));
    };
    core.registry.refresh_if_stale(SessionRef::STATELESS).await;
    let Some(route) = core.registry.tool(SessionRef::STATELESS, name) else {
        return Err(unknown_tool(core, &id, name, out, keep_alive));
    };
    let arguments = params.get("arguments");
    if !route.header_params.is_empty() {
        let find = |wanted: &str| crate::http::header_named(req.head_bytes, wanted);
        let declared = &route.header_params;
        let given = arguments.unwrap_or(WireValue::null());
        if let Err(e) = meta::check_param_headers(declared, &given, find) {
            return Err(meta_refusal(out, &id, &e, keep_alive));
        }
    }
    let support = route.provider.task_support(name);
    let may_become_task = match task_call::admission(support, &request_meta.client_capabilities) {
        Ok(may) => may,
        Err(e) => return Err(meta_refusal(out, &id, &e, keep_alive)),
    };
    let (answers, mut binding) = match input_round(core, req, "tools/call", name, &params) {
        Ok(round) => round,
        Err(e) => return Err(meta_refusal(out, &id, &e, keep_alive)),
    };
    let scoped_key = match req.header(&req.head.idempotency_key) {
        None => None,
        // A key that is not UTF-8 (the edge refuses it already; never decoded lossily).
        Some(k) => match keyed::ScopedKey::new(k, req.subject(), request_meta.client_info.as_ref())
        {
            Some(scoped) => Some(scoped),
            None => return Err(refuse(out, Refusal::BadIdempotencyKey, Some(&id), keep_alive)),
        },
    };
    let keyed = match scoped_key {
        None => None,
        Some(scoped_key) => {
            let bound = *binding.get_or_insert_with(|| {
                state::binding("tools/call", name, arguments, req.subject())
            });
            let key = (&*scoped_key, fingerprint_of(&bound));
            let seen = keyed_lookup(core, key, &route, &id, &request_meta, out, keep_alive);
            if let Some(answered) = seen.await {
                return Err(answered);
            }
            Some((scoped_key.to_boxed(), key.1))
        }
    };
    Ok(ToolCall {
        id,
        route,
        name,
        arguments,
        request_meta,
        answers,
        binding,
        may_become_task,
        keyed,
    })
}

/// A `tools/call` naming no tool listed for stateless requests. A provider that could not open
/// the core's stateless session (an upstream that is down, or redirects) lists nothing: its
/// refusal says more than "unknown tool".
fn unknown_tool(
    core: &ModernCore,
    id: &RawId,
    name: &str,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    if let Some(e) = core.registry.stateless_failure() {
        if let Some(down) = crate::core::reply_down(out, &e, id, keep_alive) {
            return down;
        }
        let mut body = Vec::with_capacity(256);
        dispatch::push_provider_error(&mut body, id, &e);
        return reply(out, Answer::Json(&body), keep_alive);
    }
    let message = format!("unknown tool: {name}");
    crate::core::reply_error(out, id, Code::InvalidParams, &message, keep_alive)
}

/// A keyed `tools/call`'s key looked up: `Some` answers it from what is known (its record, a
/// reused key, or, for a call not safe to repeat, what another node recorded before it died:
/// `--durable`); `None`: the key is fresh, the call is new work.
async fn keyed_lookup(
    core: &Rc<ModernCore>,
    (scoped_key, fingerprint): (&str, u64),
    route: &ToolRoute,
    id: &RawId,
    request_meta: &RequestMeta,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Option<Outcome> {
    let retention = core.cfg.sessions.stream_retention;
    let found = core.keys.borrow_mut().lookup(scoped_key, fingerprint, retention);
    match found {
        keyed::Lookup::Other => {
            core.metrics.rejected_key_reused.inc();
            Some(reply(out, Answer::KeyReused { id }, keep_alive))
        }
        keyed::Lookup::Same(record) => {
            core.metrics.dedup_hits_total.inc();
            let until = std::time::Instant::now() + core.cfg.sessions.owed_wait;
            let token = request_meta.progress_token.clone();
            Some(observe(record, id.clone(), token, Some(until), keep_alive))
        }
        keyed::Lookup::Fresh if !route.safe_to_repeat => {
            // Another node may have run it before it died (`--durable`).
            match durable::recover(core, scoped_key, fingerprint, id).await {
                durable::Recovered::Nothing => None,
                durable::Recovered::Answered(body) | durable::Recovered::Unknown(body) => {
                    Some(reply(out, Answer::Json(&body), keep_alive))
                }
                durable::Recovered::OtherCall => {
                    core.metrics.rejected_key_reused.inc();
                    Some(reply(out, Answer::KeyReused { id }, keep_alive))
                }
                durable::Recovered::Busy => {
                    Some(refuse(out, Refusal::Unavailable, Some(id), keep_alive))
                }
            }
        }
        keyed::Lookup::Fresh => None,
    }
}

/// One `tools/call` that passed its checks and is new work: what `run_tool` runs.
struct ToolCall<'a> {
    id: RawId,
    route: ToolRoute,
    /// The tool's name as the request gives it (`params.name`).
    name: &'a str,
    /// The request's `arguments` (`None`: absent), read in place by a built-in tool.
    arguments: Option<WireValue<'a>>,
    request_meta: RequestMeta,
    /// The client's answers so far (`input_round`).
    answers: serde_json::Map<String, Value>,
    /// The request binding (`state::binding`) of its next `requestState` and of its key's
    /// fingerprint. `None`: not computed yet, since a call answered at once (`answer_now`)
    /// never needs it; it is computed when the request brings a `requestState` or a key.
    binding: Option<state::Binding>,
    /// True when the client and the tool let it become a task (`task_call::admission`).
    may_become_task: bool,
    /// Its scoped `Idempotency-Key` and fingerprint (`None`: not keyed).
    keyed: Option<(Box<str>, u64)>,
}

/// Runs a `tools/call` (`serve` admitted it as new work): polled once and answered now when it
/// finishes there, else driven by the connection; a keyed one runs under its record, which
/// this request and every retry observe.
async fn run_tool(
    core: &Rc<ModernCore>,
    req: &Request<'_>,
    call: ToolCall<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let keep_alive = req.head.keep_alive;
    if let Some(answered) = answer_now(&call, out, keep_alive) {
        return answered;
    }
    let ToolCall {
        id,
        route,
        name,
        arguments,
        request_meta,
        answers,
        binding,
        may_become_task,
        keyed,
    } = call;
    let binding =
        binding.unwrap_or_else(|| state::binding("tools/call", name, arguments, req.subject()));
    let progress_token = request_meta.progress_token.clone();
    let record = keyed.as_ref().map(|_| call::RecordLimit {
        max: core.cfg.sessions.replay_bytes_max,
        core: core.keys.borrow().bytes(),
    });
    let sink = sink_for(core, request_meta, answers, record);
    let task_sink = may_become_task.then(|| task_call::TaskSink::new(sink.clone()));
    let cx = CallContext::new(
        task_call::call_sink(&sink, &task_sink),
        SessionRef::STATELESS,
        meta::MODERN_VERSION,
    )
    .with_caller(req.caller())
    .with_trace(req.trace());
    let route_safe_to_repeat = route.safe_to_repeat;
    let work = dispatch::call_tool(route, arguments, cx);
    let work = task_call::augment(core, req.subject(), task_sink, work);
    let job = CallJob::new(id.clone(), sink.clone(), work, binding, core.cfg.modern.state_ttl);
    let Some((scoped_key, fingerprint)) = keyed else {
        return start_call(job, out, keep_alive).await;
    };
    let bytes = core.keys.borrow().bytes();
    let token = progress_token.clone();
    let client = match req.subject() {
        Some(subject) => keyed::Client::Subject(Rc::from(subject)),
        // By the rate limiter's key, so one IPv6 host's /64 is one client here too (§11).
        None => keyed::Client::Peer(req.peer().map(|ip| peer_key(ip, core.cfg.rate.ipv6_prefix))),
    };
    let record = Rc::new(keyed::Record::new(fingerprint, token, sink, id.clone(), client, bytes));
    if let Err(full) = core.keys.borrow_mut().insert(scoped_key.clone(), record.clone()) {
        let (counter, refusal) = match full {
            keyed::Full::Keys => (&core.metrics.limit_idempotency_keys, Refusal::KeyTableFull),
            keyed::Full::Bytes => (&core.metrics.limit_idempotency_bytes, Refusal::KeyBytesFull),
            keyed::Full::ClientShare => {
                (&core.metrics.limit_keyed_calls_per_client, Refusal::KeyedCallShare)
            }
        };
        counter.inc();
        return refuse(out, refusal, Some(&id), keep_alive);
    }
    let mirror = durable::KeyedMirror::new(core, &scoped_key, fingerprint);
    if let (Some(mirror), false) = (&mirror, route_safe_to_repeat) {
        mirror.running().await;
    }
    keyed::spawn(core.keys.clone(), scoped_key, record.clone(), job, mirror);
    observe(record, id, progress_token, None, keep_alive)
}

/// A call of a built-in instant tool (`echo`) answered at once, as `start_call` would answer
/// it (the tool sends nothing, so the answer is a JSON response), without a sink, context,
/// future or result value. A keyed call (its record) and one that may become a task take the
/// common path.
fn answer_now(call: &ToolCall, out: &mut Vec<u8>, keep_alive: bool) -> Option<Outcome> {
    if call.keyed.is_some() || call.may_become_task {
        return None;
    }
    let builtin = crate::provider::builtin::as_builtin(call.route.provider.as_ref())?;
    let arguments = crate::provider::ToolArguments(call.arguments);
    let outcome = builtin.call_now(&call.route.name, arguments)?;
    Some(crate::core::with_body(|body| {
        let status = call::render_answer(&call.id, outcome, RESULT_COMPLETE, body);
        reply(out, Answer::JsonStatus { status, body }, keep_alive)
    }))
}

/// A keyed call's fingerprint: its request binding (method, tool name, canonical arguments).
/// The stable hash (`fasthash::StableHasher`), since the durable mirror stores it (`fp`).
fn fingerprint_of(binding: &str) -> u64 {
    crate::fasthash::stable_hash(binding.as_bytes())
}

/// The job of a connection that reads keyed call `record` for request `id`.
fn observe(
    record: Rc<keyed::Record>,
    id: RawId,
    progress_token: Option<Box<str>>,
    wait_until: Option<std::time::Instant>,
    keep_alive: bool,
) -> Outcome {
    let tokens = match (progress_token, record.progress_token.clone()) {
        (Some(mine), Some(original)) if mine != original => Some((mine, original)),
        _ => None,
    };
    let rewrite = (id != record.id || tokens.is_some())
        .then(|| crate::wire::notification::Rewrite { id: id.clone(), progress_token: tokens });
    Outcome::Job(Job::Observe(Observer::new(record, rewrite, id, wait_until, keep_alive)))
}

/// `prompts/get` through `get_prompt_with_context`, so a prompt may ask for input (MRTR).
async fn prompts_get(
    core: &Rc<ModernCore>,
    req: &Request<'_>,
    id: RawId,
    params: WireValue<'_>,
    request_meta: RequestMeta,
    out: &mut Vec<u8>,
) -> Outcome {
    let keep_alive = req.head.keep_alive;
    let Some(name) = string_name(&params) else {
        let message = "prompts/get needs a string name";
        return crate::core::reply_error(out, &id, Code::InvalidParams, message, keep_alive);
    };
    let (answers, binding) = match input_round(core, req, "prompts/get", name, &params) {
        Ok(round) => round,
        Err(e) => return meta_refusal(out, &id, &e, keep_alive),
    };
    let arguments = params.get("arguments");
    let binding =
        binding.unwrap_or_else(|| state::binding("prompts/get", name, arguments, req.subject()));
    let arguments = arguments.map(dispatch::into_public).unwrap_or(Value::Null);
    let name = name.to_owned();
    let sink = sink_for(core, request_meta, answers, None);
    let cx = CallContext::new(sink.clone(), SessionRef::STATELESS, meta::MODERN_VERSION)
        .with_caller(req.caller())
        .with_trace(req.trace());
    let registry_core = core.clone();
    let work = Box::pin(async move {
        registry_core.registry.get_prompt_with_context(&name, arguments, cx).await
    });
    let job = CallJob::new(id, sink, work, binding, core.cfg.modern.state_ttl);
    start_call(job, out, keep_alive).await
}

/// `params.name` when it is a string (`tools/call`, `prompts/get`), borrowed from the body.
fn string_name<'a>(params: &WireValue<'a>) -> Option<&'a str> {
    params.get("name").and_then(ValueIntoString::into_string)
}

/// The sink of a call that runs with `request_meta`, the client's `answers` so far, and (a
/// keyed call) a record of its notifications up to `record` bytes, else a backlog of at most
/// `pending_max` bytes waiting for the writer.
fn sink_for(
    core: &ModernCore,
    request_meta: RequestMeta,
    answers: serde_json::Map<String, Value>,
    record: Option<call::RecordLimit>,
) -> Rc<ModernSink> {
    Rc::new(ModernSink::new(SinkSetup {
        progress_token: request_meta.progress_token,
        log_level: request_meta.log_level,
        client_capabilities: request_meta.client_capabilities,
        answers,
        record,
        input_requests_max: core.cfg.modern.client_requests_pending_max,
        pending_max: core.cfg.sessions.replay_bytes_max,
    }))
}

/// The answers a retry brings (`inputResponses`, and earlier rounds' from a verified
/// `requestState`) and, when it brings a state, the request's binding (`state::binding`), which
/// opened it (`None`: no state, no binding computed yet). Malformed input is the client's error
/// (-32602, HTTP 400); so is a state that fails verification.
fn input_round(
    core: &ModernCore,
    req: &Request<'_>,
    method: &str,
    name: &str,
    params: &WireValue<'_>,
) -> Result<(serde_json::Map<String, Value>, Option<state::Binding>), MetaError> {
    let invalid = |message: &str| MetaError {
        code: Code::InvalidParams,
        message: message.to_owned(),
        data: None,
    };
    // Both members in one pass over the params (of a name given twice, the first, as `get`).
    let (mut request_state, mut input_responses) = (None, None);
    for (key, value) in params.as_object().iter().flat_map(|members| members.iter()) {
        match key {
            "requestState" => request_state = request_state.or(Some(value)),
            "inputResponses" => input_responses = input_responses.or(Some(value)),
            _ => {}
        }
    }
    let mut binding = None;
    let mut answers = match request_state {
        None => serde_json::Map::new(),
        Some(text) => {
            let Some(text) = text.as_str() else {
                return Err(invalid("requestState must be a string"));
            };
            let bound = state::binding(method, name, params.get("arguments"), req.subject());
            binding = Some(bound);
            state::open(text, &bound).map_err(|e| {
                core.metrics.request_state_refused_total.inc();
                invalid(e.message())
            })?
        }
    };
    // The retry's own answers are laid over the sealed ones: every answer came from the client,
    // so its newest word wins (docs/wire.md, "Decisions where the revision is silent").
    match input_responses {
        None => {}
        Some(responses) => match dispatch::into_public(responses) {
            // A carried key (a bridge's upstream state) comes only from the sealed state.
            Value::Object(responses) => answers
                .extend(responses.into_iter().filter(|(key, _)| !key.starts_with(CARRIED_PREFIX))),
            _ => return Err(invalid("inputResponses must be an object")),
        },
    }
    Ok((answers, binding))
}

/// Polls a call once: finished (or waiting for input) with nothing to stream → the whole
/// answer now, as `application/json`; else the connection drives it as an SSE stream.
async fn start_call(mut job: CallJob, out: &mut Vec<u8>, keep_alive: bool) -> Outcome {
    job.poll_once().await;
    if job.is_settled() && !job.sink.has_events() {
        return crate::core::with_body(|body| {
            let status = job.finish(body);
            reply(out, Answer::JsonStatus { status, body }, keep_alive)
        });
    }
    Outcome::Job(Job::Call(CallStream::new(job, keep_alive)))
}
