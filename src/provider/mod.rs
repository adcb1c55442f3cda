//! The public provider interface: how tools, resources, resource templates, prompts and
//! completions reach tidemark, whoever implements them (the built-in sets, an embedding
//! application, a bridge to another MCP server).
//!
//! Owns: the `Provider` trait, `ToolInfo` and `Annotations` (what `tools/list` says and what the
//! migration boundary reads: CONTRACT §4 step 3), the per-call `CallContext` (progress, logs,
//! server→client requests, cancellation, session identity, negotiated revision), the
//! `ProviderError` type and the public JSON `Value` type (serde_json's, so simd-json stays an
//! internal detail of the request decoder).
//! Called by: `dispatch` (lists and calls), `legacy::stream` (implements the context's sink).
//! Never: touches sockets, sessions or the replay ring; a provider only sees `CallContext`.

pub(crate) mod builtin;

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// The JSON value type of the provider API (arguments, results, resources, prompts).
pub use serde_json::Value;

/// A boxed, single-core future: providers run on the core that owns the session (monoio, one
/// runtime per core), so nothing they return needs to be `Send`.
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A `tools/call`'s `arguments` as the request decoded them (`None`: absent), borrowed for the
/// time of a built-in tool's call (`BuiltinProvider::call_in_place`, `call`, `call_now`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ToolArguments<'a>(pub(crate) Option<crate::wire::WireValue<'a>>);

/// RFC 5424 severities as MCP `logging/setLevel` names them (ascending).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `debug`: debug-level messages (RFC 5424 severity 7).
    Debug,
    /// `info`: informational messages (severity 6).
    Info,
    /// `notice`: normal but significant conditions (severity 5).
    Notice,
    /// `warning`: warning conditions (severity 4).
    Warning,
    /// `error`: error conditions (severity 3).
    Error,
    /// `critical`: critical conditions (severity 2).
    Critical,
    /// `alert`: action must be taken immediately (severity 1).
    Alert,
    /// `emergency`: the system is unusable (severity 0).
    Emergency,
}

impl LogLevel {
    /// Parses the wire name; `None` for anything else (the peer sent a bad level).
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }

    /// The wire name (`"warning"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// MCP `ToolAnnotations`. `read_only` and `idempotent` decide whether a retried call may simply
/// run again (CONTRACT §4 step 3); the others are passed to clients as hints. A hint that is
/// `None` is not listed (the client applies the spec's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `title`: a human-readable name.
    pub title: Option<String>,
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: Option<bool>,
    /// `destructiveHint`: the tool may perform destructive updates.
    pub destructive: Option<bool>,
    /// `idempotentHint`: repeating a call with the same arguments has no additional effect.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: the tool interacts with an open world of external entities.
    pub open_world: Option<bool>,
}

impl Annotations {
    /// Read-only (and so safe to repeat), as a fluent constructor.
    pub fn read_only() -> Annotations {
        Annotations { read_only: Some(true), ..Annotations::default() }
    }

    /// True when a retried call may simply run again: read-only or idempotent.
    pub fn safe_to_repeat(&self) -> bool {
        self.read_only == Some(true) || self.idempotent == Some(true)
    }

    /// The `annotations` object of `tools/list`, or `None` when no field is set.
    pub fn to_json(&self) -> Option<Value> {
        let mut object = serde_json::Map::new();
        if let Some(title) = &self.title {
            object.insert("title".into(), Value::from(title.as_str()));
        }
        let hints = [
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        ];
        for (name, hint) in hints {
            if let Some(hint) = hint {
                object.insert(name.into(), Value::Bool(hint));
            }
        }
        (!object.is_empty()).then_some(Value::Object(object))
    }
}

/// What `tools/list` says about one tool. Names and schemas are owned: a provider may list
/// different tools over its life (then it calls `Changes::tools_changed`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// Unique among all providers of a server (a later duplicate is not listed).
    pub name: String,
    /// `description`: what the tool does, for the model; `None` is not listed.
    pub description: Option<String>,
    /// The JSON Schema of `arguments`: a JSON object (listed verbatim).
    pub input_schema: Value,
    /// The JSON Schema of `structuredContent`, when the tool declares one.
    pub output_schema: Option<Value>,
    /// `annotations`: the hints, and what decides a retried call at the migration boundary.
    pub annotations: Annotations,
}

impl ToolInfo {
    /// A tool with a description and an input schema, no annotations.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        ToolInfo {
            name: name.into(),
            description: Some(description.into()),
            input_schema,
            output_schema: None,
            annotations: Annotations::default(),
        }
    }

    /// The same tool with these annotations.
    pub fn with_annotations(mut self, annotations: Annotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// The `tools/list` item. A schema that is not an object is listed as `{"type":"object"}`
    /// (MCP requires an object schema; a provider's mistake must not break the whole list).
    pub fn to_json(&self) -> Value {
        let mut item = serde_json::Map::new();
        item.insert("name".into(), Value::from(self.name.as_str()));
        if let Some(description) = &self.description {
            item.insert("description".into(), Value::from(description.as_str()));
        }
        let schema = match &self.input_schema {
            Value::Object(_) => self.input_schema.clone(),
            _ => serde_json::json!({ "type": "object" }),
        };
        item.insert("inputSchema".into(), schema);
        if let Some(output) = &self.output_schema {
            item.insert("outputSchema".into(), output.clone());
        }
        if let Some(annotations) = self.annotations.to_json() {
            item.insert("annotations".into(), annotations);
        }
        Value::Object(item)
    }
}

/// Whether a call of a tool may become a task (MCP 2026-07-28 tasks extension,
/// `io.modelcontextprotocol/tasks`, SEP-2663): the server then answers `tools/call` with a task
/// handle and the client polls `tasks/get` for the result. Only 2026-07-28 requests that declare
/// the extension get tasks; legacy sessions and other clients get the result as before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Never a task: the result is always the call's answer.
    #[default]
    Forbidden,
    /// A task once the call first waits for something other than client input (a call that
    /// finishes at once, or that asks the client first, answers as usual until then); a client
    /// without the extension gets the result as the call's answer.
    Optional,
    /// As `Optional`, but a 2026-07-28 client without the extension is refused with -32021
    /// (MissingRequiredClientCapability) before the tool runs.
    Required,
}

/// Why a provider could not answer; mapped to JSON-RPC in one place (`wire`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The peer sent arguments the tool cannot use → -32602.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// No such tool, prompt or resource → -32602 (MCP uses invalid params for unknown names).
    #[error("not found: {0}")]
    NotFound(String),
    /// A server→client request was answered with a JSON-RPC error by the client → -32603.
    #[error("client error {code}: {message}")]
    ClientError {
        /// The client's JSON-RPC error `code` (not relayed: the call's answer is -32603).
        code: i64,
        /// The client's error `message`, which becomes the -32603 answer's message.
        message: String,
    },
    /// The call was cancelled (notifications/cancelled or session end); nothing is sent.
    #[error("cancelled")]
    Cancelled,
    /// The provider's own failure or resource exhaustion → -32603.
    #[error("internal error: {0}")]
    Internal(String),
    /// A JSON-RPC error passed to the client as is: a bridge relays its upstream's errors, and
    /// its own faults with `data` naming the upstream.
    #[error("error {code}: {message}")]
    Rpc {
        /// The JSON-RPC error `code`, sent as is.
        code: i64,
        /// The error `message`, sent as is.
        message: String,
        /// The error `data`; `None` leaves the member out.
        data: Option<Value>,
    },
    /// A capacity limit (e.g. `--upstream-max-processes`): the request may succeed later; a
    /// refused `initialize` gets 503.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Something the request cannot go without is down (a required `--upstream` that cannot
    /// be reached): 503 with `Retry-After` and -32603 with this message and `data`, naming it.
    #[error("down: {message}")]
    Down {
        /// The -32603 message, naming what is down.
        message: String,
        /// The error `data` (the upstream's name, why); `None` leaves the member out.
        data: Option<Value>,
        /// The `Retry-After` seconds: when trying again may find it up.
        retry_after_secs: u64,
    },
}

impl ProviderError {
    /// A server→client request past `--max-pending-client-requests` (both eras): the tool's
    /// request fails at once instead of waiting in a table that would grow without end.
    pub fn too_many_client_requests() -> ProviderError {
        ProviderError::Internal(
            "too many server→client requests outstanding (--max-pending-client-requests)".into(),
        )
    }
}

/// The result type of every provider method.
pub type ProviderResult<T> = Result<T, ProviderError>;

/// A source of MCP server features. One instance lives on each core (built by the factory given
/// to `Server::provider`), so it may use `Rc`/`RefCell` freely; every method runs on that
/// core's runtime and must not block it.
///
/// Only `list_tools` and `call_tool` are required; the other features default to "none", and a
/// capability is declared to clients only when some provider lists something for it.
pub trait Provider {
    /// A short name for the start-up banner and logs (`demo`, `reverse`, …).
    fn name(&self) -> &str {
        "custom"
    }

    /// Called once per core after the provider is built, with a handle through which it
    /// announces that its lists changed.
    fn attach(&self, changes: Changes) {
        let _ = changes;
    }

    /// The tools this provider serves. Listed when the core starts and again after
    /// `Changes::tools_changed`; `tools/list` answers from that cache.
    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>>;

    /// The tools client session `session` is listed and may call, when they are its own (a
    /// bridge with one upstream per session, started with that client's capabilities, may be
    /// offered other tools than another session's). `None`, the default: the tools of
    /// `list_tools`, the same for every session. Asked when the session opens and again after
    /// `Changes::session_tools_changed` for it; never for `SessionRef::STATELESS`.
    fn list_session_tools(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Option<Vec<ToolInfo>>>> {
        let _ = session;
        Box::pin(async { Ok(None) })
    }

    /// Runs tool `name` (one this provider listed). `arguments` is the request's `arguments`
    /// object, or `Value::Null` when the client sent none. Returns a `CallToolResult` object
    /// (`{"content": [...]}`); a tool-level failure is a result with `isError: true`, not an
    /// `Err`. Dropping the returned future cancels the call; `cx.cancelled()` says so too.
    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>>;

    /// Not part of the provider API (hidden; a provider never overrides it): tidemark's own
    /// providers say here which they are (the built-in sets, the bridge), so the request paths
    /// call their tools past the owned result this trait returns (issue 40 §1: no allocation
    /// per built-in call; issue 43: a bridged result passed on as its upstream's text).
    #[doc(hidden)]
    fn builtin(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// Whether calls of tool `name` (one this provider listed) may become tasks on the
    /// 2026-07-28 path. The default: never.
    fn task_support(&self, name: &str) -> TaskSupport {
        let _ = name;
        TaskSupport::Forbidden
    }

    /// Items for `resources/list` (each `{uri, name, ...}`). `session` is the client session
    /// that asks (`SessionRef::NONE` when the server probes its capabilities at start): a
    /// provider whose answers differ per session (a bridge) answers for that session.
    fn list_resources(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let _ = session;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Items for `resources/templates/list` (each `{uriTemplate, name, ...}`).
    fn list_resource_templates(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let _ = session;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// The `resources/read` result (`{contents: [...]}`), or `Ok(None)` when the uri is not ours.
    fn read_resource<'a>(
        &'a self,
        session: SessionRef,
        uri: &'a str,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        let _ = (session, uri);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// `resources/subscribe` (`subscribe`) or `resources/unsubscribe` of `uri` for `session`:
    /// `Ok(true)` when the uri is this provider's and it took note (it then sends
    /// `notifications/resources/updated` through the session's `Notifier`), `Ok(false)` when
    /// the uri is not ours. The default takes note of nothing.
    fn subscribe_resource<'a>(
        &'a self,
        session: SessionRef,
        uri: &'a str,
        subscribe: bool,
    ) -> LocalBoxFuture<'a, ProviderResult<bool>> {
        let _ = (session, uri, subscribe);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Items for `prompts/list` (each `{name, description, arguments?}`).
    fn list_prompts(&self, session: SessionRef) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let _ = session;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// The `prompts/get` result (`{messages: [...]}`), or `Ok(None)` when the name is not ours.
    /// `arguments` is the request's `arguments` object, or `Value::Null`.
    fn get_prompt<'a>(
        &'a self,
        session: SessionRef,
        name: &'a str,
        arguments: Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        let _ = (session, name, arguments);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// `prompts/get` with a context, so that a prompt may ask the client for input (MCP
    /// 2026-07-28 MRTR: `cx.input`, answered by the client's retry). The 2026-07-28 path calls
    /// this; the default forwards to `get_prompt`.
    fn get_prompt_with_context<'a>(
        &'a self,
        session: SessionRef,
        name: &'a str,
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        let _ = cx;
        self.get_prompt(session, name, arguments)
    }

    /// `completion/complete` candidates for a `ref` and `argument`, or `Ok(None)` when the
    /// reference is not ours. The server caps the list at MCP's 100 values.
    fn complete<'a>(
        &'a self,
        session: SessionRef,
        reference: &'a Value,
        argument: &'a Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Vec<String>>>> {
        let _ = (session, reference, argument);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// A client session starts (`initialize`). A provider that keeps per-session state (a
    /// bridge starts the session's upstream here) prepares it, and may add to the `initialize`
    /// result. `Err(ProviderError::Unavailable)` refuses the session with 503 (a capacity
    /// limit); any other error refuses it with -32603. Runs before the client is answered.
    fn open_session<'a>(
        &'a self,
        start: &'a SessionStart,
    ) -> LocalBoxFuture<'a, ProviderResult<SessionInfo>> {
        let _ = start;
        Box::pin(std::future::ready(Ok(SessionInfo::default())))
    }

    /// A client session ended (DELETE, idle expiry, or the server's drain). Its running calls
    /// are already cancelled.
    fn close_session(&self, session: SessionRef) {
        let _ = session;
    }

    /// The core stops (its drain ended, or the server failed): release what the provider holds
    /// outside the process (a bridge stops its children). Called once, on the core's thread;
    /// nothing is called after it.
    fn stop(&self) {}
}

/// What a provider learns when a client session starts.
#[derive(Clone)]
pub struct SessionStart {
    /// The session's identity, as every `CallContext` of it and `close_session` carry it.
    pub session: SessionRef,
    /// The revision negotiated with the client (`"2025-11-25"`, …).
    pub protocol_version: &'static str,
    /// The client's `initialize` params: `capabilities`, `clientInfo`, … (`Value::Null` when
    /// it sent none).
    pub client_params: Value,
    /// Session-level messages to the client (list changes, resource updates, logs outside a
    /// call), on the session's standalone GET stream.
    pub notifier: Notifier,
    /// Who opened the session, when its `initialize` was authorized (`None`: authorization is
    /// off, or the core's own stateless session).
    pub caller: Option<Caller>,
}

/// Who a request was authorized for: the token's subject and the client's own `Authorization`
/// value. A bridge shows the subject to an upstream configured for it and the value to an
/// upstream named by `--upstream-forward-authorization`, to no other. `Debug` shows neither.
#[derive(Clone)]
pub struct Caller {
    subject: Rc<str>,
    authorization: Rc<str>,
}

impl Caller {
    pub(crate) fn new(subject: Rc<str>, authorization: Rc<str>) -> Caller {
        Caller { subject, authorization }
    }

    /// The token's subject (`sub`, or the token file's name for it).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The client's `Authorization` header value as it sent it (`Bearer …`): a credential,
    /// for an upstream that is this same resource only.
    pub fn authorization(&self) -> &str {
        &self.authorization
    }
}

impl fmt::Debug for Caller {
    // Never the subject or the token: neither belongs in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Caller { .. }")
    }
}

/// What a provider adds to a session's `initialize` result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionInfo {
    /// Joined (blank line between) with the other providers' and tidemark's own.
    pub instructions: Option<String>,
    /// `ServerCapabilities` members, merged over tidemark's (a provider's object members win).
    pub capabilities: Option<Value>,
    /// The `serverInfo` to announce instead of tidemark's (the first provider's that sets one).
    pub server_info: Option<Value>,
}

/// Sends session-level notifications to a client (not tied to a call): each becomes an event
/// of the session's standalone GET stream, replayable like any other; dropped when the client
/// has no standalone stream open (MCP gives them no other channel). Cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    sink: Rc<dyn NotifySink>,
}

impl Notifier {
    pub(crate) fn new(sink: Rc<dyn NotifySink>) -> Notifier {
        Notifier { sink }
    }

    /// A notifier that drops everything (unit tests, sessionless work).
    pub fn detached() -> Notifier {
        Notifier { sink: Rc::new(DetachedSink) }
    }

    /// Sends `{"jsonrpc":"2.0","method":method,"params":params}` (no params when `Null`).
    pub fn notify(&self, method: &str, params: Value) {
        self.sink.notify(method, params);
    }

    /// Sends `notifications/message` when `level` passes the session's `logging/setLevel`.
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.sink.log(level, logger, data);
    }

    /// False once the session ended.
    pub fn is_open(&self) -> bool {
        self.sink.is_open()
    }
}

/// The protocol path's side of a `Notifier`.
pub(crate) trait NotifySink {
    fn notify(&self, method: &str, params: Value);
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    fn is_open(&self) -> bool;
}

/// How a provider announces that its lists changed. Cheap to clone; core-local (each core's
/// providers announce their own changes and the core re-lists them), but each announcement is
/// also counted process-wide (`LIST_CHANGES`) for the 2026-07-28 `subscriptions/listen`
/// streams, which are not tied to the core whose provider saw the change.
#[derive(Clone, Default)]
pub struct Changes {
    tools_stale: Rc<Cell<bool>>,
    /// Sessions whose own tool list (`Provider::list_session_tools`) changed; a few at a time
    /// (each is taken at its session's next request), so a scan is cheaper than a map.
    stale_sessions: Rc<std::cell::RefCell<Vec<SessionRef>>>,
}

/// Process-wide counts of list changes, by kind (read by `subscriptions/listen` streams on any
/// core, which compare them with the counts they last reported).
pub(crate) struct ListChanges {
    pub tools: std::sync::atomic::AtomicU64,
    pub prompts: std::sync::atomic::AtomicU64,
    pub resources: std::sync::atomic::AtomicU64,
}

pub(crate) static LIST_CHANGES: ListChanges = ListChanges {
    tools: std::sync::atomic::AtomicU64::new(0),
    prompts: std::sync::atomic::AtomicU64::new(0),
    resources: std::sync::atomic::AtomicU64::new(0),
};

impl Changes {
    /// The tool list changed: the server lists this core's providers again before it next
    /// answers `tools/list` or looks up a tool it does not know.
    pub fn tools_changed(&self) {
        self.tools_stale.set(true);
        LIST_CHANGES.tools.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The prompt list changed (announced to `subscriptions/listen` streams that asked).
    pub fn prompts_changed(&self) {
        LIST_CHANGES.prompts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The resource list changed (announced to `subscriptions/listen` streams that asked).
    pub fn resources_changed(&self) {
        LIST_CHANGES.resources.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every list changed and the registry has listed the tools anew already (an upstream
    /// reload): only the `subscriptions/listen` streams are told; nothing is marked stale.
    pub(crate) fn all_lists_relisted(&self) {
        for count in [&LIST_CHANGES.tools, &LIST_CHANGES.prompts, &LIST_CHANGES.resources] {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// True once after `tools_changed` (the registry consumes the flag).
    pub(crate) fn take_tools_stale(&self) -> bool {
        self.tools_stale.replace(false)
    }

    /// The tools of one session (`Provider::list_session_tools`) changed: the server lists
    /// them again before that session's next `tools/list` or `tools/call`.
    pub fn session_tools_changed(&self, session: SessionRef) {
        let mut stale = self.stale_sessions.borrow_mut();
        if !stale.contains(&session) {
            stale.push(session);
        }
    }

    /// True once after `session_tools_changed(session)` (the registry consumes it).
    pub(crate) fn take_session_stale(&self, session: SessionRef) -> bool {
        let mut stale = self.stale_sessions.borrow_mut();
        match stale.iter().position(|s| *s == session) {
            Some(at) => {
                stale.swap_remove(at);
                true
            }
            None => false,
        }
    }
}

/// The prefix of the keys `CallContext::carry` keeps: a client's `inputResponses` entry whose
/// key starts with it is dropped, so only tidemark's sealed state can bring one back.
pub const CARRIED_PREFIX: &str = "tidemark/";

/// An opaque identity of the client session a call belongs to: equal for every call of one
/// session, different across sessions; carries no secret (it is not the `Mcp-Session-Id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionRef(u64);

impl SessionRef {
    /// No session: the server asking at start, before any client.
    pub const NONE: SessionRef = SessionRef(0);

    /// Requests of the 2026-07-28 (stateless) revision, which have no session: a provider that
    /// keeps per-session state serves them from state it shares (a bridge: its core's
    /// upstream link). Opened once per core with `open_session` before the first such request.
    pub const STATELESS: SessionRef = SessionRef(u64::MAX);

    pub(crate) fn new(value: u64) -> SessionRef {
        SessionRef(value)
    }
}

impl fmt::Display for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Where a call's messages go: implemented by the protocol path that runs the call (the legacy
/// session's request stream), and by `DetachedSink` for calls nobody listens to.
pub(crate) trait CallSink {
    /// `notifications/progress` with the request's progress token; no-op without one.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// `notifications/message`, if `level` passes the session's `logging/setLevel`.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    /// A server→client request on the call's stream; resolves with the client's answer.
    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>>;
    /// A server→client request the call names `key` (MCP 2026-07-28 MRTR: the key of its
    /// `inputRequests` entry). On the legacy path the key is not sent: the request goes out as
    /// `request` sends it.
    fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        let _ = key;
        self.request(method, params)
    }
    /// Keeps `value` under `key` for the call's next client round (2026-07-28: sealed into the
    /// `requestState` of the `InputRequiredResult` this round may end with); a no-op where the
    /// call's rounds run in one piece (the legacy path, tasks). `key` starts with
    /// `CARRIED_PREFIX`, which a client's `inputResponses` cannot name.
    fn carry(&self, key: &str, value: Value) {
        let _ = (key, value);
    }
    /// What the previous client round of this call carried under `key` (from a verified
    /// `requestState` only).
    fn carried(&self, key: &str) -> Option<Value> {
        let _ = key;
        None
    }
    /// Whether the client declared the capability a server→client request `method` needs.
    /// Legacy sessions are not asked (their capabilities were negotiated at `initialize`).
    fn client_supports(&self, method: &str) -> bool {
        let _ = method;
        true
    }
    /// SEP-1699: close the connection carrying the call's stream, without ending the stream.
    fn close_connection(&self);
    /// True once the call was cancelled.
    fn is_cancelled(&self) -> bool;
    /// Completes when the call is cancelled.
    fn cancelled(&self) -> LocalBoxFuture<'static, ()>;
    /// False while the call's client is attached and has not yet been written its share of
    /// the call's messages (`config::UNWRITTEN_SHARE_DIVISOR`): a producer that can wait
    /// (the bridge's upstream reader) waits on `room` instead of overrunning the buffer.
    fn has_room(&self) -> bool {
        true
    }
    /// Completes once `has_room` holds, or the call ended, or its client went away (eviction
    /// is then the answer, CONTRACT §3). Woken by the writer's progress, never polled.
    fn room(&self) -> LocalBoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// What a running tool may do besides computing its result. Cheap to clone (one `Rc`).
#[derive(Clone)]
pub struct CallContext {
    sink: Rc<dyn CallSink>,
    session: SessionRef,
    protocol_version: &'static str,
    caller: Option<Caller>,
    /// The trace context of the request that made the call (`--otlp-endpoint`; `None`:
    /// tracing is off): the parent of the bridge's CLIENT span.
    trace: Option<crate::trace::TraceParent>,
}

impl CallContext {
    pub(crate) fn new(
        sink: Rc<dyn CallSink>,
        session: SessionRef,
        protocol_version: &'static str,
    ) -> CallContext {
        CallContext { sink, session, protocol_version, caller: None, trace: None }
    }

    /// The context with the request's caller (`None`: authorization is off).
    pub(crate) fn with_caller(mut self, caller: Option<Caller>) -> CallContext {
        self.caller = caller;
        self
    }

    /// The context in the trace `trace` (a request's span, or the bridge's CLIENT span).
    pub(crate) fn with_trace(mut self, trace: Option<crate::trace::TraceParent>) -> CallContext {
        self.trace = trace;
        self
    }

    /// The span this call runs under (`None`: tracing is off).
    pub(crate) fn trace(&self) -> Option<crate::trace::TraceParent> {
        self.trace
    }

    /// Who the call was authorized for (`None`: authorization is off). A bridge presents it to
    /// the upstreams configured for it (`subject-header`, `--upstream-forward-authorization`).
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref()
    }

    /// A context whose messages go nowhere and whose server→client requests fail with
    /// `Cancelled`: for unit tests of a provider, or calls made outside a client session.
    pub fn detached() -> CallContext {
        CallContext::new(Rc::new(DetachedSink), SessionRef(0), "")
    }

    /// Sends `notifications/progress` with the request's `_meta.progressToken` (as the client
    /// sent it). A no-op when the request had no token.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.sink.progress(progress, total, message);
    }

    /// Sends `notifications/message` when `level` is at or above the session's log level.
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.sink.log(level, logger, data);
    }

    /// Sends a server→client request (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`) on this call's stream and resolves with the client's `result`; a JSON-RPC
    /// error from the client is `ProviderError::ClientError`.
    pub fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        self.sink.request(method, params)
    }

    /// `request` with a name for it. In the 2026-07-28 era a server→client request is not
    /// sent on the stream: the call ends with an `InputRequiredResult` whose `inputRequests`
    /// holds it under `key`, the client retries with the answer, and the call runs again from
    /// its start, this time getting the answer here at once (so code before an input request
    /// runs once per round; put side effects after the last one). `request` names its
    /// requests `input_1`, `input_2`, … in call order. In the legacy era the key is unused.
    pub fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        self.sink.input(key, method, params)
    }

    /// Keeps `value` under `key` (which must start with `CARRIED_PREFIX`) for this call's
    /// next client round, when the call's rounds are split across client requests (2026-07-28
    /// MRTR: sealed into tidemark's `requestState`, so it comes back unaltered and only for this
    /// call); elsewhere the call runs in one piece and needs nothing carried. A bridge keeps
    /// its upstream's own `requestState` here.
    pub fn carry(&self, key: &str, value: Value) {
        debug_assert!(key.starts_with(CARRIED_PREFIX), "carried keys are reserved");
        self.sink.carry(key, value);
    }

    /// What the previous round of this call carried under `key`, if any.
    pub fn carried(&self, key: &str) -> Option<Value> {
        self.sink.carried(key)
    }

    /// Whether the client can answer server→client request `method` (it declared the
    /// capability): a 2026-07-28 client's per-request `clientCapabilities`; always true on a
    /// legacy session. Asking anyway fails with MCP's MissingRequiredClientCapability (-32021).
    pub fn client_supports(&self, method: &str) -> bool {
        self.sink.client_supports(method)
    }

    /// SEP-1699 polling: closes the HTTP connection that carries this call's stream without
    /// ending the stream; the client resumes with GET + Last-Event-ID and gets the rest.
    pub fn close_connection(&self) {
        self.sink.close_connection();
    }

    /// True once the client cancelled the call (or its session ended).
    pub fn is_cancelled(&self) -> bool {
        self.sink.is_cancelled()
    }

    /// Completes when the call is cancelled; for work the tool started outside its own future.
    pub fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
        self.sink.cancelled()
    }

    /// Completes once the call's stream has room for more messages: at once, unless a client is
    /// reading the stream and has not yet been written a good part of what the call sent. A
    /// tool that sends many messages (progress of a long loop, relayed logs) awaits it between
    /// them, so a slow reader slows the tool instead of losing messages to eviction; a client
    /// that went away never holds it up (its stream's resume reports what was evicted).
    pub fn room(&self) -> LocalBoxFuture<'static, ()> {
        self.sink.room()
    }

    /// `room` would complete at once (checked before awaiting it, which allocates).
    pub(crate) fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    /// The session this call belongs to.
    pub fn session(&self) -> SessionRef {
        self.session
    }

    /// The MCP revision negotiated for the session (`"2025-11-25"`, …); empty when detached.
    pub fn protocol_version(&self) -> &str {
        self.protocol_version
    }
}

/// The sink of `CallContext::detached`.
struct DetachedSink;

impl CallSink for DetachedSink {
    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<&str>) {}

    fn log(&self, _level: LogLevel, _logger: Option<&str>, _data: Value) {}

    fn request(
        &self,
        _method: &str,
        _params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        Box::pin(std::future::ready(Err(ProviderError::Cancelled)))
    }

    fn close_connection(&self) {}

    fn is_cancelled(&self) -> bool {
        false
    }

    fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

impl NotifySink for DetachedSink {
    fn notify(&self, _method: &str, _params: Value) {}

    fn log(&self, _level: LogLevel, _logger: Option<&str>, _data: Value) {}

    fn is_open(&self) -> bool {
        false
    }
}

/// A recording sink and a timer-enabled runtime, shared by the unit tests of the providers.
#[cfg(test)]
pub(crate) mod testing {
    use super::{
        CallContext, CallSink, LocalBoxFuture, LogLevel, ProviderError, SessionRef, Value,
    };
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::future::Future;
    use std::rc::Rc;
    use std::time::Instant;

    /// One call a tool made on its context.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Call {
        Progress { progress: f64, total: Option<f64>, message: Option<String> },
        Log { level: LogLevel, logger: Option<String>, data: Value },
        Request { method: String, params: Value },
        CloseConnection,
    }

    /// Records every call with the time it was made; answers requests from a table.
    #[derive(Default)]
    pub(crate) struct RecordingSink {
        pub calls: RefCell<Vec<(Instant, Call)>>,
        answers: RefCell<HashMap<String, Result<Value, ProviderError>>>,
    }

    impl RecordingSink {
        /// The client's answer to every later `request(method, ..)`.
        pub(crate) fn answer(&self, method: &str, answer: Result<Value, ProviderError>) {
            self.answers.borrow_mut().insert(method.to_owned(), answer);
        }

        /// The calls without their times.
        pub(crate) fn calls(&self) -> Vec<Call> {
            self.calls.borrow().iter().map(|(_, call)| call.clone()).collect()
        }

        /// A context whose messages this sink records.
        pub(crate) fn context(self: &Rc<Self>) -> CallContext {
            CallContext::new(self.clone(), SessionRef::new(1), "2025-11-25")
        }

        fn record(&self, call: Call) {
            self.calls.borrow_mut().push((Instant::now(), call));
        }
    }

    impl CallSink for RecordingSink {
        fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
            let message = message.map(str::to_owned);
            self.record(Call::Progress { progress, total, message });
        }

        fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
            self.record(Call::Log { level, logger: logger.map(str::to_owned), data });
        }

        fn request(
            &self,
            method: &str,
            params: Value,
        ) -> LocalBoxFuture<'static, Result<Value, ProviderError>> {
            self.record(Call::Request { method: method.to_owned(), params });
            let answer =
                self.answers.borrow().get(method).cloned().unwrap_or_else(|| {
                    Err(ProviderError::Internal(format!("no answer for {method}")))
                });
            Box::pin(std::future::ready(answer))
        }

        fn close_connection(&self) {
            self.record(Call::CloseConnection);
        }

        fn is_cancelled(&self) -> bool {
            false
        }

        fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
    }

    /// Runs `future` to completion on a fresh single-thread runtime with timers (epoll driver,
    /// so the tests also pass where io_uring is disabled).
    pub(crate) fn run<F: Future>(future: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("test runtime builds")
            .block_on(future)
    }

    /// Parses JSON text into a value.
    pub(crate) fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    /// The `text` of the first content item of a `CallToolResult`.
    pub(crate) fn first_text(result: &Value) -> &str {
        result["content"][0]["text"].as_str().expect("first content item has text")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotations_list_only_the_hints_that_are_set() {
        // Goal: tools/list carries exactly the hints a provider set. Method: table of cases.
        assert_eq!(Annotations::default().to_json(), None);
        assert_eq!(Annotations::read_only().to_json(), Some(json!({ "readOnlyHint": true })));
        let all = Annotations {
            title: Some("T".into()),
            read_only: Some(false),
            destructive: Some(true),
            idempotent: Some(false),
            open_world: Some(true),
        };
        assert_eq!(
            all.to_json(),
            Some(json!({
                "title": "T",
                "readOnlyHint": false,
                "destructiveHint": true,
                "idempotentHint": false,
                "openWorldHint": true,
            }))
        );
    }

    #[test]
    fn only_read_only_or_idempotent_tools_are_safe_to_repeat() {
        // Goal: CONTRACT §4 step 3 reads these two hints only. Method: every combination.
        for (read_only, idempotent, safe) in [
            (None, None, false),
            (Some(false), Some(false), false),
            (Some(true), None, true),
            (None, Some(true), true),
            (Some(false), Some(true), true),
        ] {
            let a = Annotations { read_only, idempotent, ..Annotations::default() };
            assert_eq!(a.safe_to_repeat(), safe, "{a:?}");
        }
        let destructive = Annotations { destructive: Some(false), ..Annotations::default() };
        assert!(!destructive.safe_to_repeat());
    }

    #[test]
    fn a_tool_with_a_non_object_schema_is_listed_with_an_object_schema() {
        // Goal: a provider's bad schema cannot break tools/list. Method: list one.
        let tool = ToolInfo::new("t", "d", json!([1]));
        assert_eq!(
            tool.to_json(),
            json!({ "name": "t", "description": "d", "inputSchema": { "type": "object" } })
        );
    }

    #[test]
    fn a_detached_context_swallows_messages_and_refuses_requests() {
        // Goal: CallContext::detached is usable in a provider's own unit tests.
        let cx = CallContext::detached();
        cx.progress(1.0, None, None);
        cx.log(LogLevel::Info, None, json!("x"));
        cx.close_connection();
        assert!(!cx.is_cancelled());
        let answer = testing::run(cx.request("roots/list", json!({})));
        assert_eq!(answer, Err(ProviderError::Cancelled));
        assert_eq!(cx.protocol_version(), "");
    }

    #[test]
    fn changes_flag_is_consumed_once_and_counted_process_wide() {
        // Goal: one tools_changed triggers one re-list of this core, and is counted for listen
        // streams. Method: set, take twice; the process-wide count grows (other tests may
        // add to it concurrently, so only "grew" is asserted).
        let changes = Changes::default();
        assert!(!changes.take_tools_stale());
        let before = LIST_CHANGES.tools.load(std::sync::atomic::Ordering::Relaxed);
        changes.clone().tools_changed();
        assert!(LIST_CHANGES.tools.load(std::sync::atomic::Ordering::Relaxed) > before);
        assert!(changes.take_tools_stale());
        assert!(!changes.take_tools_stale());
    }

    #[test]
    fn log_levels_round_trip() {
        // Goal: LogLevel::parse and as_str agree, in ascending order; unknown names are None.
        let levels =
            ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
        let parsed: Vec<LogLevel> = levels.iter().filter_map(|l| LogLevel::parse(l)).collect();
        assert_eq!(parsed.len(), levels.len());
        assert!(parsed.windows(2).all(|w| w[0] < w[1]));
        assert!(parsed.iter().zip(levels).all(|(level, name)| level.as_str() == name));
        assert_eq!(LogLevel::parse("INFO"), None);
        assert_eq!(LogLevel::parse("warn"), None);
    }
}
