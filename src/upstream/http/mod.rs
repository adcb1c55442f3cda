//! The Streamable HTTP transport (MCP 2025-11-25, "Transports", §Streamable HTTP): an upstream
//! MCP server at `http://HOST:PORT/PATH`, spoken to by POSTing each JSON-RPC message and
//! reading what comes back as one JSON body or a `text/event-stream`, driven by the core that
//! owns the session.
//!
//! Every POST is a task of its own on an HTTP/1.1 connection of its own (an idle keep-alive
//! connection is reused when one is at hand), so a long tool call never holds up another
//! message. POSTs still leave in the order `send` was called: a request once its bytes are
//! written, a notification or response once the upstream accepted it (its `202`), so
//! `notifications/initialized` reaches the upstream before the requests after it. After that
//! notification one `GET` stream carries the upstream's own requests and notifications. An SSE
//! stream that breaks before the answer it carries is resumed with `GET` + `Last-Event-ID` when
//! the upstream numbered its events (§Resumability and Redelivery).
//!
//! The folder, one concern per file. `mod.rs` uses the others; among them the arrows run down
//! this list only (`response` → `conn` → `error`, `sse` → `error`), and none uses `mod.rs`:
//! - `mod.rs`: the transport: its link (session id, protocol version, order of POSTs, the
//!   in-flight bound), POST, resumption, the standalone `GET` stream and the `DELETE`.
//! - `response.rs`: one response: its head, then its body (by length, chunked, to the close).
//! - `conn.rs`: one client connection, the idle pool, an exchange's deadline and the stop.
//! - `sse.rs`: the event-stream decoder. `url.rs`: the URL and its address.
//! - `error.rs`: `HttpError`, the one error of an exchange.
//!
//! Owns: the upstream's URL and address (an IP literal is used as is; a host name is looked up
//! once per core, the first time that core connects to it, with the system resolver: the one
//! blocking call here, at a session's start and not on the path of any call), the session id
//! and negotiated protocol version, the idle-connection pool, the in-flight bound, and the
//! `DELETE` that ends the upstream session.
//! Called by: `upstream` (`HttpTransport::connect` for an `--upstream http://…`, then its `Peer`
//! through `Transport`), and the runtime at the end of a drain (`deletes_settled`).
//! Never: follows redirects (what is sent to an upstream must not go to an origin the operator
//! did not name; the error names the `Location` instead), buffers a body or event beyond `--upstream-line-bytes`, or lets a
//! failed POST leave its call waiting: a JSON-RPC error for it goes to the peer at once.

mod conn;
mod error;
mod modern;
mod response;
mod sse;
mod url;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::credentials::Credentials;
use super::exchange::{self, ExchangeError};
use super::line_head;
use super::peer::{Incoming, Peer, Transport};
use super::settings::Settings;
use crate::provider::{Caller, Value};
use crate::signal::Signal;
use crate::trace::TraceParent;
use crate::wire::param_headers::{self, HeaderParam};
use crate::wire::revision::MODERN_VERSION;
use crate::wire::Code;
use conn::{Conn, Pool, Stop, Until, READ_CHUNK};
use error::HttpError;
pub(crate) use modern::{offers_legacy, offers_modern, server_info, Stateless, DISCOVER};
use modern::{Heads, ToolsPage};
use response::{read_head, read_json, Body, Framing, Head, Kind};
pub(crate) use sse::SseDecoder;
pub(crate) use url::{parse_url, resolve, Endpoint};

/// Messages of one transport POSTed and not yet finished. A tool call holds its slot until its
/// answer arrived; beyond this `send` fails ("too many requests in flight") and so does the
/// call, at once. 256 is far above what one client session runs at a time.
const IN_FLIGHT_MAX: usize = 256;
/// Resumptions of one request's event stream that brought no event before it fails. Each waits
/// the upstream's `retry:` (at most `RETRY_MAX`) or a backoff; the call's timeout bounds all.
const RESUME_ATTEMPTS_MAX: u32 = 5;
/// Reconnections of the standalone `GET` stream in a row that brought no event before it is
/// given up (the session keeps working; only server-initiated messages outside calls stop).
const LISTEN_ATTEMPTS_MAX: u32 = 10;
/// First wait before reconnecting a stream without a `retry:` hint; doubled per attempt.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest backoff between reconnections.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Longest `retry:` wait honoured (a hostile hint cannot park a stream for hours).
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Longest protocol version taken from the upstream's `initialize` result (echoed in a header).
const VERSION_BYTES_MAX: usize = 64;
/// How long the `DELETE` that ends the upstream session may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(5);

const _: () = assert!(IN_FLIGHT_MAX > 0);
const _: () = assert!(BACKOFF_MIN.as_millis() < BACKOFF_MAX.as_millis());
const _: () = assert!(BACKOFF_MAX.as_millis() <= RETRY_MAX.as_millis());

// ---------------------------------------------------------------------------------------------
// The transport and the state its tasks share.

/// One upstream session over Streamable HTTP.
pub(crate) struct HttpTransport {
    link: Rc<Link>,
}

/// What the transport's tasks share.
struct Link {
    name: Rc<str>,
    endpoint: Endpoint,
    addr: SocketAddr,
    /// `--upstream-line-bytes`: the longest JSON body or SSE event.
    line_max: usize,
    /// How long a POST may take end to end: `--upstream-call-max-secs` (or
    /// `--upstream-timeout-secs` when longer). A call's idle timeout, which may end it earlier,
    /// is the peer's (`peer::Peer::request`): a response stream the upstream keeps busy, or that
    /// tidemark holds back for a slow client, is not cut at `--upstream-timeout-secs`.
    timeout: Duration,
    peer: Weak<Peer>,
    /// `Some` from the first response that carried `Mcp-Session-Id`.
    session: RefCell<Option<Rc<str>>>,
    /// `Some` once the `initialize` result passed through (`MCP-Protocol-Version`).
    protocol_version: RefCell<Option<Rc<str>>>,
    /// Set once by `shutdown` or a session expiry; wakes every waiting task.
    stop: Stop,
    /// The upstream said the session is gone (404): nothing to `DELETE`.
    expired: Cell<bool>,
    /// POST tasks running, against `IN_FLIGHT_MAX`.
    in_flight: Cell<usize>,
    order: Order,
    pool: Pool,
    /// The standalone `GET` stream was started (it is started once).
    listening: Cell<bool>,
    /// The operator's headers for this upstream (`--upstream-credentials`), on every request.
    /// Of the client's request only its `Caller` reaches a request head, and only as these
    /// credentials say: the subject under `subject_header`, the `Authorization` value when
    /// `forward_authorization`.
    credentials: Arc<Credentials>,
    /// The session opener's (a per-session link's), for the messages that are not a call's.
    caller: Option<Caller>,
    /// The client this link speaks for, as a 2026-07-28 request presents it in `_meta`.
    client: Stateless,
    /// Set once the upstream was found to serve 2026-07-28 (`enter_modern`): every request
    /// goes stateless (no session, the client in `_meta`, `Mcp-Method`/`Mcp-Name`), a
    /// `notifications/cancelled` closes its request's connection, and nothing else the peer
    /// sends that is not a request goes out (the revision has no other client message).
    modern: Cell<bool>,
    /// The stop of each stateless request still running, by its JSON-RPC id: its
    /// `notifications/cancelled` sets it (2026-07-28 cancels a request by closing its stream).
    cancels: RefCell<HashMap<u64, Rc<Stop>>>,
    /// The `x-mcp-header` declarations of each tool the upstream listed with some (by its
    /// name upstream), learnt from the `tools/list` answers this link carried: a call of such
    /// a tool sends its `Mcp-Param-*` headers (2026-07-28 only).
    declarations: RefCell<HashMap<String, Rc<[HeaderParam]>>>,
}

impl HttpTransport {
    /// Parses `url` and makes the transport; nothing is sent until the first `send`.
    pub(crate) fn connect(
        name: Rc<str>,
        url: &str,
        settings: &Settings,
        credentials: Arc<Credentials>,
        caller: Option<Caller>,
        client: Stateless,
        peer: Weak<Peer>,
    ) -> Result<Rc<HttpTransport>, String> {
        // Never the URL in the message: it may carry a secret (user-info, a query parameter).
        let endpoint = parse_url(url).map_err(|e| format!("its URL: {e}"))?;
        let addr = resolve(&endpoint)?;
        tracing::info!(upstream = %name, %addr, "upstream http transport ready");
        let post_max = settings.timeout.max(settings.call_max);
        let mut link = Link::new(name, endpoint, addr, settings.line_bytes, post_max, peer);
        link.credentials = credentials;
        link.caller = caller;
        link.client = client;
        Ok(Rc::new(HttpTransport { link: Rc::new(link) }))
    }

    /// From now on the link speaks 2026-07-28 (its `server/discover` offered it); with the
    /// list changes `capabilities` offers, a `subscriptions/listen` stream brings them.
    pub(crate) fn enter_modern(&self, capabilities: &Value) {
        let link = &self.link;
        link.modern.set(true);
        if let Some(subscription) = link.client.listen(capabilities) {
            link.start_listening(Some(subscription));
        }
    }
}

impl Transport for HttpTransport {
    fn send(&self, message: Vec<u8>) -> Result<(), String> {
        self.send_as(message, None, None)
    }

    fn send_as(
        &self,
        message: Vec<u8>,
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let classified = classify(&message).ok_or("the message is not a JSON-RPC object")?;
        self.post(message, classified, caller, trace)
    }

    /// A request whose id and method the peer names: nothing is read back out of the message
    /// (parsing it into a `Value` for them cost ~7.4 k instructions a bridged call, a reader of
    /// only those two members ~4.3 k: callgrind, issue 43 item 1).
    fn send_request(
        &self,
        message: Vec<u8>,
        (id, method): (u64, &str),
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let expect = Expect::Answer { id: Value::from(id), initialize: method == "initialize" };
        self.post(message, (expect, method == DISCOVER), caller, trace)
    }

    fn shutdown(&self) {
        let link = &self.link;
        if !link.stop() {
            return;
        }
        let session = link.session.borrow().clone();
        if let Some(session) = session.filter(|_| !link.expired.get()) {
            // Counted from here, not from the task's first poll: a drain that stops this link
            // right now must wait for the DELETE (`deletes_settled`).
            let done = DeleteDone::new();
            let link = link.clone();
            monoio::spawn(async move {
                let _done = done;
                delete(link, session).await;
            });
        }
    }
}

impl HttpTransport {
    /// Sends one message whose `Expect` and era-probe flag are known: a POST task of its own,
    /// after the link's checks.
    fn post(
        &self,
        message: Vec<u8>,
        (expect, discover): (Expect, bool),
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let link = &self.link;
        if link.stop.is_set() {
            return Err("the transport is shut down".to_owned());
        }
        if link.in_flight.get() >= IN_FLIGHT_MAX {
            return Err(format!("too many requests in flight ({IN_FLIGHT_MAX})"));
        }
        let (message, heads) = match &expect {
            Expect::Answer { .. } if link.modern.get() || discover => {
                let mut value = message_value(&message)?;
                let mut heads = link.client.request(&mut value);
                if heads.method == "tools/call" {
                    heads.params = link.param_heads(&value);
                }
                (serde_json::to_vec(&value).map_err(|e| e.to_string())?, Some(heads))
            }
            Expect::Answer { .. } => (message, None),
            Expect::Accepted { .. } if link.modern.get() => {
                link.cancel(&message_value(&message)?);
                return Ok(());
            }
            Expect::Accepted { .. } => (message, None),
        };
        let turn = Turn::take(link);
        link.in_flight.set(link.in_flight.get() + 1);
        let caller = caller.cloned();
        let post = PostBytes {
            body: message,
            caller,
            bearer: None,
            trace,
            turn: Some(turn),
            hold_turn: false,
            heads,
        };
        monoio::spawn(post_task(link.clone(), post, expect));
        Ok(())
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        // Without `shutdown` (the peer was dropped): stop the tasks; no DELETE is spawned from
        // a destructor, which may run while the runtime is being torn down.
        self.link.stop();
    }
}

impl Link {
    /// A link with no upstream session yet, nothing in flight and an empty pool.
    fn new(
        name: Rc<str>,
        endpoint: Endpoint,
        addr: SocketAddr,
        line_max: usize,
        timeout: Duration,
        peer: Weak<Peer>,
    ) -> Link {
        Link {
            name,
            endpoint,
            addr,
            line_max,
            timeout,
            peer,
            session: RefCell::new(None),
            protocol_version: RefCell::new(None),
            stop: Stop::default(),
            expired: Cell::new(false),
            in_flight: Cell::new(0),
            order: Order::default(),
            pool: Pool::default(),
            listening: Cell::new(false),
            credentials: Arc::default(),
            caller: None,
            client: Stateless::tidemark(),
            modern: Cell::new(false),
            cancels: RefCell::new(HashMap::new()),
            declarations: RefCell::new(HashMap::new()),
        }
    }

    /// A stateless request's `notifications/cancelled`: its connection is closed (what cancels
    /// a request in 2026-07-28). Any other notification or response has no 2026-07-28 meaning
    /// toward a server and is dropped.
    fn cancel(&self, message: &Value) {
        if message.get("method").and_then(Value::as_str) != Some("notifications/cancelled") {
            return;
        }
        let id = message.pointer("/params/requestId").and_then(Value::as_u64);
        let stop = id.and_then(|id| self.cancels.borrow_mut().remove(&id));
        if let Some(stop) = stop {
            stop.set();
        }
    }

    /// A 2026-07-28 `tools/list` answer (one page), taken as a conforming client takes it: a
    /// tool whose `x-mcp-header` declarations are invalid is left out (logged; its calls
    /// could carry no valid headers), and the valid declarations are kept for its calls.
    fn learn_tools(&self, message: &mut Value, page: ToolsPage) {
        let mut declarations = self.declarations.borrow_mut();
        if page == ToolsPage::First {
            declarations.clear();
        }
        let Some(Value::Array(tools)) = message.pointer_mut("/result/tools") else { return };
        tools.retain(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match param_headers::declared(schema) {
                Ok(found) if found.is_empty() => {
                    declarations.remove(name);
                    true
                }
                Ok(found) => {
                    declarations.insert(name.to_owned(), found.into());
                    true
                }
                Err(why) => {
                    let upstream = &*self.name;
                    tracing::warn!(
                        upstream,
                        tool = name,
                        why,
                        "upstream tool left out: invalid x-mcp-header"
                    );
                    declarations.remove(name);
                    false
                }
            }
        });
    }

    /// The `Mcp-Param-*` headers of a 2026-07-28 `tools/call` (its tool's declarations, the
    /// values from its arguments); none for a tool that declares none.
    fn param_heads(&self, message: &Value) -> Vec<(String, String)> {
        let name = message.pointer("/params/name").and_then(Value::as_str);
        let Some(declared) = name.and_then(|n| self.declarations.borrow().get(n).cloned()) else {
            return Vec::new();
        };
        let arguments = message.pointer("/params/arguments").unwrap_or(&Value::Null);
        declared
            .iter()
            .filter_map(|param| Some((param.header(), param_headers::rendered(param, arguments)?)))
            .collect()
    }

    /// Sets `stop` (waking every waiting task) and closes the idle connections; false when
    /// it was set already.
    fn stop(&self) -> bool {
        if !self.stop.set() {
            return false;
        }
        self.pool.clear();
        true
    }

    /// The upstream answered 404 to a request carrying our session id: the session is gone
    /// (§Session Management); the peer ends and the next request of the client starts anew.
    fn session_expired(&self) {
        self.expired.set(true);
        self.stop();
        if let Some(peer) = self.peer.upgrade() {
            peer.closed("upstream session expired (404)");
        }
    }

    /// Takes the session id from a response head, the first time one carries it.
    fn note_session(&self, head: &Head) {
        let Some(id) = &head.session else { return };
        let mut session = self.session.borrow_mut();
        if session.is_none() {
            let prefix = &id[..id.len().min(8)];
            tracing::debug!(upstream = %self.name, prefix, "upstream session id");
            *session = Some(Rc::from(id.as_str()));
        }
    }

    /// Takes the negotiated protocol version from the `initialize` result.
    fn note_protocol_version(&self, message: &Value) {
        let version = message.pointer("/result/protocolVersion").and_then(Value::as_str);
        let valid = |v: &&str| {
            !v.is_empty()
                && v.len() <= VERSION_BYTES_MAX
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        };
        if let Some(version) = version.filter(valid) {
            *self.protocol_version.borrow_mut() = Some(Rc::from(version));
        }
    }

    /// Starts the standalone `GET` stream (or, with `subscription`, the 2026-07-28
    /// `subscriptions/listen` stream), once.
    fn start_listening(self: &Rc<Self>, subscription: Option<(Vec<u8>, Heads)>) {
        if !self.listening.replace(true) && !self.stop.is_set() {
            monoio::spawn(listen(self.clone(), subscription));
        }
    }

    /// The exchanged bearer of a request speaking for `caller` (a call's, else the link's own):
    /// `None` when the upstream does not exchange, or when no caller stands behind the request
    /// (the shared link's own listings: they carry the configured headers only).
    async fn exchanged(&self, caller: Option<&Caller>) -> Result<Option<Rc<str>>, ExchangeError> {
        let Some(target) = &self.credentials.exchange else { return Ok(None) };
        let Some(caller) = caller.or(self.caller.as_ref()) else { return Ok(None) };
        exchange::bearer(target, Some(caller)).await.map(Some)
    }

    /// Keeps `conn` for reuse when its response ended cleanly and it may be kept alive.
    fn recycle(&self, conn: Conn, reusable: bool) {
        if !reusable || !conn.pending().is_empty() || self.stop.is_set() {
            return;
        }
        self.pool.keep(conn);
    }

    /// Encodes a request head (and body) to the endpoint with the session's headers; of
    /// `presented`, the caller (a call's) in place of the link's own, and its exchanged token
    /// (`--upstream-auth NAME=exchange`), sent as the bearer. With `heads` it is a 2026-07-28
    /// request: no session, the revision's version and the routing headers.
    fn encode(
        &self,
        method: Method,
        body: Option<&[u8]>,
        last_event_id: Option<&str>,
        (caller, exchanged): (Option<&Caller>, Option<&str>),
        heads: Option<&Heads>,
    ) -> Vec<u8> {
        let verb = match method {
            Method::Post => "POST",
            Method::Get => "GET",
            Method::Delete => "DELETE",
        };
        let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
        out.extend_from_slice(verb.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.endpoint.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let mut line = |name: &str, value: &str| {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        };
        line("Host", &self.endpoint.authority);
        match method {
            Method::Post => {
                line("Accept", "application/json, text/event-stream");
                line("Content-Type", "application/json");
            }
            Method::Get => line("Accept", "text/event-stream"),
            Method::Delete => line("Connection", "close"),
        }
        line("Content-Length", &body.map_or(0, <[u8]>::len).to_string());
        if let Some(heads) = heads {
            line("MCP-Protocol-Version", MODERN_VERSION);
            line("Mcp-Method", &heads.method);
            if let Some(name) = &heads.name {
                line("Mcp-Name", name);
            }
            for (name, value) in &heads.params {
                line(name, value);
            }
        } else {
            if let Some(session) = self.session.borrow().as_deref() {
                line("Mcp-Session-Id", session);
            }
            if let Some(version) = self.protocol_version.borrow().as_deref() {
                line("MCP-Protocol-Version", version);
            }
        }
        if let Some(id) = last_event_id {
            line("Last-Event-ID", id);
        }
        let caller = caller.or(self.caller.as_ref());
        let forwarded = caller.filter(|_| self.credentials.forward_authorization);
        let exchanged = exchanged.filter(|_| self.credentials.exchange.is_some());
        for (name, value) in &self.credentials.headers {
            // A forwarded or exchanged token replaces the configured one: one `Authorization`.
            let replaced = forwarded.is_some() || exchanged.is_some();
            if !replaced || !name.eq_ignore_ascii_case("authorization") {
                line(name, value);
            }
        }
        if let Some(caller) = forwarded.filter(|c| is_header_value(c.authorization())) {
            line("Authorization", caller.authorization());
        }
        if let (Some(name), Some(caller)) = (&self.credentials.subject_header, caller) {
            // A subject that is no header value (a CR, LF, control byte) is not sent at all.
            if is_header_value(caller.subject()) {
                line(name, caller.subject());
            }
        }
        if let Some(token) = exchanged {
            // `exchange::read_answer` let only a token of visible ASCII through.
            out.extend_from_slice(b"Authorization: Bearer ");
            out.extend_from_slice(token.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if let Some(body) = body {
            out.extend_from_slice(body);
        }
        out
    }
}

/// Whether `value` can stand in a request head as is: visible ASCII, spaces and tabs (what
/// the client's own header passed, and a subject from a token may not).
fn is_header_value(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Post,
    Get,
    Delete,
}

// ---------------------------------------------------------------------------------------------
// Ordering and the in-flight bound.

/// The order POSTs leave in: each waits until every POST `send` queued before it released its
/// turn. Tickets are taken in `send` (so in call order) and released by `Turn`'s drop.
#[derive(Default)]
struct Order {
    next: Cell<u64>,
    /// Tickets not yet released; bounded by `IN_FLIGHT_MAX`.
    waiting: RefCell<BTreeSet<u64>>,
    released: Signal,
}

/// A POST's place in `Order`; released when dropped.
struct Turn {
    link: Rc<Link>,
    ticket: u64,
}

impl Turn {
    fn take(link: &Rc<Link>) -> Turn {
        let ticket = link.order.next.get();
        link.order.next.set(ticket + 1);
        let fresh = link.order.waiting.borrow_mut().insert(ticket);
        assert!(fresh, "invariant: tickets are unique");
        Turn { link: link.clone(), ticket }
    }

    /// Waits until every earlier ticket was released; false when the transport stopped.
    async fn wait(&self) -> bool {
        let order = &self.link.order;
        loop {
            let released = order.released.notified();
            let stop = self.link.stop.notified();
            if self.link.stop.is_set() {
                return false;
            }
            if order.waiting.borrow().first() == Some(&self.ticket) {
                return true;
            }
            monoio::select! {
                _ = released => {}
                _ = stop => return false,
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let order = &self.link.order;
        if order.waiting.borrow_mut().remove(&self.ticket) {
            order.released.notify_all();
        }
    }
}

/// Gives the in-flight slot back when a POST task ends, however it ends.
struct Slot(Rc<Link>);

impl Drop for Slot {
    fn drop(&mut self) {
        let n = self.0.in_flight.get();
        assert!(n > 0, "invariant: every slot was counted");
        self.0.in_flight.set(n - 1);
    }
}

// ---------------------------------------------------------------------------------------------
// POST, resume, GET stream, DELETE.

/// What the POST of a message waits for.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    /// A request: its response, carried by the POST's response (or a resumption of it).
    Answer { id: Value, initialize: bool },
    /// A notification or response: `202 Accepted`.
    Accepted { initialized: bool },
}

/// What an outgoing message is, from its `id` and `method`, and whether it is the era probe,
/// which goes stateless whatever the link speaks; `None` when it is not a JSON object. Only
/// for what the peer sends without naming them (notifications, responses): a request's come
/// from the peer (`send_request`), so a tool call is never parsed back here.
fn classify(message: &[u8]) -> Option<(Expect, bool)> {
    let value: Value = serde_json::from_slice(message).ok()?;
    let object = value.as_object()?;
    let method = object.get("method").and_then(Value::as_str);
    let expect = match (object.get("id"), method) {
        (Some(id), Some(method)) => {
            Expect::Answer { id: id.clone(), initialize: method == "initialize" }
        }
        _ => Expect::Accepted { initialized: method == Some("notifications/initialized") },
    };
    Some((expect, method == Some(DISCOVER)))
}

/// An outgoing message as a value, for the paths that rewrite or read more than its `id` and
/// `method` (a 2026-07-28 link's requests and cancellations, the era probe).
fn message_value(message: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(message).map_err(|_| "the message is not JSON".to_owned())
}

/// Why a request got no answer from the upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    Http(HttpError),
    /// The upstream answered with this status (not 2xx, not 3xx).
    Status(u16),
    /// The upstream answered with a redirect (3xx), which is not followed: the request carries
    /// what the operator configured for this upstream (its headers, and a credential once
    /// upstreams take one), which must not follow to an origin the operator did not name. The
    /// error names the status and the `Location` so the operator can configure that URL.
    Redirect {
        status: u16,
        location: Option<Box<str>>,
    },
    /// The upstream answered 404 while we had a session id.
    SessionExpired,
    /// No exchanged token for the caller (`--upstream-auth NAME=exchange`): nothing was sent.
    Exchange(ExchangeError),
    /// The response (or its stream and every resumption) ended without the answer.
    Unanswered,
}

impl From<HttpError> for Failure {
    fn from(e: HttpError) -> Failure {
        Failure::Http(e)
    }
}

/// One message's POST, and the error its call gets when it fails.
async fn post_task(link: Rc<Link>, mut post: PostBytes, expect: Expect) {
    let _slot = Slot(link.clone());
    let until = Until { deadline: Some(Instant::now() + link.timeout), stoppable: true };
    // One predictable branch when the upstream does not exchange (the default).
    if link.credentials.exchange.is_some() {
        match link.exchanged(post.caller.as_ref()).await {
            Ok(bearer) => post.bearer = bearer,
            Err(e) => return exchange_failed(&link, &expect, e),
        }
    }
    match expect {
        Expect::Answer { id, initialize } => {
            let outcome = match (post.heads.is_some(), id.as_u64()) {
                (true, Some(number)) => stateless_request(&link, post, &id, number, until).await,
                _ => request(&link, post, &id, initialize, until).await,
            };
            match outcome {
                Ok(()) | Err(Failure::Http(HttpError::Stopped)) => {}
                Err(Failure::SessionExpired) => link.session_expired(),
                Err(failure) => fail_request(&link, &id, failure),
            }
        }
        Expect::Accepted { initialized } => match notice(&link, post, until).await {
            Ok(()) if initialized => link.start_listening(None),
            Ok(()) | Err(Failure::Http(HttpError::Stopped)) => {}
            Err(Failure::SessionExpired) => link.session_expired(),
            Err(failure) => {
                let name = &*link.name;
                tracing::warn!(
                    upstream = name,
                    ?failure,
                    "upstream refused a notification or response"
                )
            }
        },
    }
}

/// A POST that cannot go out for want of an exchanged token: its request ends with -32603
/// naming the upstream and the authorization server's reasons; a notification is dropped.
fn exchange_failed(link: &Link, expect: &Expect, error: ExchangeError) {
    match expect {
        Expect::Answer { id, .. } => fail_request(link, id, Failure::Exchange(error)),
        Expect::Accepted { .. } => {
            tracing::warn!(upstream = %link.name, %error, "upstream notification not sent")
        }
    }
}

/// Hands the peer the JSON-RPC error that ends request `id` now (-32603, `data` naming the
/// upstream and what happened).
fn fail_request(link: &Link, id: &Value, failure: Failure) {
    let name = &*link.name;
    let (message, data) = match &failure {
        Failure::Status(status) => (
            format!("upstream {name} answered HTTP {status}"),
            json!({ "upstream": name, "status": status }),
        ),
        Failure::Redirect { status, location } => {
            let to = location.as_deref().unwrap_or("(no valid Location)");
            (
                format!(
                    "upstream {name} answered HTTP {status} redirecting to {to}; redirects are \
                     not followed: configure --upstream with the URL to use"
                ),
                json!({ "upstream": name, "status": status, "location": location.as_deref() }),
            )
        }
        Failure::Http(e) => (
            format!("upstream {name} failed: {e}"),
            json!({ "upstream": name, "reason": e.to_string() }),
        ),
        Failure::Unanswered => {
            let why = "its response ended before the answer";
            (format!("upstream {name} failed: {why}"), json!({ "upstream": name, "reason": why }))
        }
        Failure::SessionExpired => {
            let why = "upstream session expired (404)";
            (format!("upstream {name} failed: {why}"), json!({ "upstream": name, "reason": why }))
        }
        Failure::Exchange(e) => {
            let (error, description) = match e {
                ExchangeError::Refused { error, description, .. } => {
                    (Some(error), description.as_ref())
                }
                _ => (None, None),
            };
            (
                format!("upstream {name}: {e}"),
                // The server's RFC 6749 §5.2 fields, named apart from JSON-RPC's own `error`.
                json!({ "upstream": name, "reason": "token exchange", "oauth_error": error,
                        "oauth_error_description": description }),
            )
        }
    };
    tracing::warn!(upstream = name, ?failure, "upstream request failed");
    let error = crate::wire::error_object(Code::InternalError.value(), &message, Some(data));
    if let Some(peer) = link.peer.upgrade() {
        peer.receive(crate::wire::response_object(id.clone(), Err(error)));
    }
}

/// A 2026-07-28 request: `request`, unless its `notifications/cancelled` comes first; then
/// its connection is dropped unread, which is the revision's cancellation (the peer forgot
/// the request already: nothing is delivered).
async fn stateless_request(
    link: &Rc<Link>,
    post: PostBytes,
    id: &Value,
    number: u64,
    until: Until,
) -> Result<(), Failure> {
    let cancel = Rc::new(Stop::default());
    link.cancels.borrow_mut().insert(number, cancel.clone());
    let cancelled = cancel.notified();
    let outcome = monoio::select! {
        outcome = request(link, post, id, false, until) => outcome,
        _ = cancelled => Err(HttpError::Stopped.into()),
    };
    link.cancels.borrow_mut().remove(&number);
    outcome
}

/// POSTs a request and delivers what its response carries until the answer to it came.
/// A 2026-07-28 request's 4xx answer with a JSON body is delivered too: such a server says
/// why in a JSON-RPC error (an unknown method's -32601, a header mismatch's -32020).
async fn request(
    link: &Rc<Link>,
    post: PostBytes,
    id: &Value,
    initialize: bool,
    until: Until,
) -> Result<(), Failure> {
    let caller = post.caller.clone();
    let bearer = post.bearer.clone();
    let stateless = post.heads.is_some();
    let tools_page = post.heads.as_ref().and_then(|h| h.tools_page);
    let (mut conn, mut head) = round_trip(link, Method::Post, post, until).await?;
    let mut stream = Stream::new(link.line_max, Some(id.clone()), initialize);
    stream.tools_page = tools_page;
    if stateless {
        // A session id on a stateless answer is not ours to keep.
        head.session = None;
        if (400..500).contains(&head.status) && head.kind == Kind::Json {
            let refused = Failure::Status(head.status);
            let body = read_json(&mut conn, head.framing, link.line_max, &link.stop, until).await?;
            stream.deliver(link, &body);
            return if stream.answered { Ok(()) } else { Err(refused) };
        }
    }
    check_status(link, &head)?;
    match head.kind {
        _ if head.status == 202 => return Err(Failure::Unanswered),
        Kind::Json => {
            let body = read_json(&mut conn, head.framing, link.line_max, &link.stop, until).await?;
            link.recycle(conn, head.keep_alive);
            stream.deliver(link, &body);
        }
        Kind::EventStream => {
            match read_events(&mut conn, head.framing, link, &mut stream, until).await {
                Ok(()) => link.recycle(conn, head.keep_alive),
                Err(e) if e.is_break() => {}
                Err(e) => return Err(e.into()),
            }
            // 2026-07-28 has no resumption: a broken stateless stream is unanswered.
            if !stream.answered && !stateless {
                let presented = (caller.as_ref(), bearer.as_deref());
                resume(link, &mut stream, presented, until).await?;
            }
        }
        Kind::Other => return Err(HttpError::ContentType.into()),
    }
    if stream.answered {
        Ok(())
    } else {
        Err(Failure::Unanswered)
    }
}

/// Resumes a request's event stream from its last event id until the answer came, at most
/// `RESUME_ATTEMPTS_MAX` times in a row without an event.
async fn resume(
    link: &Rc<Link>,
    stream: &mut Stream,
    (caller, bearer): (Option<&Caller>, Option<&str>),
    until: Until,
) -> Result<(), Failure> {
    let mut attempts = 0;
    while !stream.answered {
        let Some(last_id) = stream.decoder.last_id().map(str::to_owned) else {
            return Err(Failure::Unanswered);
        };
        if attempts == RESUME_ATTEMPTS_MAX {
            return Err(Failure::Unanswered);
        }
        attempts += 1;
        let delay = stream.decoder.retry().unwrap_or_else(|| backoff(attempts));
        tracing::debug!(upstream = %link.name, attempts, ?delay, "resuming a request stream");
        if !pause(link, delay).await {
            return Err(HttpError::Stopped.into());
        }
        let seen = stream.decoder.events();
        let request = link.encode(Method::Get, None, Some(&last_id), (caller, bearer), None);
        let (mut conn, head) = match round_trip(link, Method::Get, GetBytes(request), until).await {
            Ok(response) => response,
            // The upstream may be restarting: another attempt, within the bound.
            Err(e) if e.is_break() && attempts < RESUME_ATTEMPTS_MAX => continue,
            Err(e) => return Err(e.into()),
        };
        check_status(link, &head)?;
        if head.kind != Kind::EventStream {
            return Err(HttpError::ContentType.into());
        }
        stream.decoder.restart();
        match read_events(&mut conn, head.framing, link, stream, until).await {
            Ok(()) => link.recycle(conn, head.keep_alive),
            Err(e) if e.is_break() => {}
            Err(e) => return Err(e.into()),
        }
        // Any event (a priming one included) shows the upstream serves the stream: an upstream
        // that closes it after each event (polling, §Resumability) is followed to the answer.
        if stream.decoder.events() > seen {
            attempts = 0;
        }
    }
    Ok(())
}

/// POSTs a notification or response; done when the upstream accepted it.
async fn notice(link: &Rc<Link>, mut post: PostBytes, until: Until) -> Result<(), Failure> {
    post.hold_turn = true;
    let (conn, head) = round_trip(link, Method::Post, post, until).await?;
    check_status(link, &head)?;
    // A body (none is expected) is not read: the connection is not reused then.
    link.recycle(conn, head.keep_alive && head.framing == Framing::Length(0));
    Ok(())
}

/// The standalone `GET` stream (§Listening for Messages from the Server): the upstream's own
/// requests and notifications, reconnected (with `Last-Event-ID`) while the transport runs.
/// With `subscription` (2026-07-28: the `subscriptions/listen` request and its heads) it is
/// that POST's stream instead, made anew after a break, and only list changes pass.
async fn listen(link: Rc<Link>, subscription: Option<(Vec<u8>, Heads)>) {
    let mut stream = Stream::new(link.line_max, None, false);
    stream.list_changes_only = subscription.is_some();
    let mut attempts = 0;
    let until = Until { deadline: None, stoppable: true };
    while !link.stop.is_set() {
        let seen = stream.decoder.events();
        let last_id = stream.decoder.last_id().map(str::to_owned);
        // The link's own stream speaks for its session's opener (a per-session link's).
        let bearer = match link.exchanged(None).await {
            Ok(bearer) => bearer,
            Err(error) => {
                tracing::warn!(upstream = %link.name, %error, "upstream standalone stream not opened");
                return;
            }
        };
        let presented = (None, bearer.as_deref());
        let (method, request) = match &subscription {
            Some((body, heads)) => {
                (Method::Post, link.encode(Method::Post, Some(body), None, presented, Some(heads)))
            }
            None => {
                (Method::Get, link.encode(Method::Get, None, last_id.as_deref(), presented, None))
            }
        };
        let outcome = match round_trip(&link, method, GetBytes(request), until).await {
            Ok((mut conn, head)) => match check_status(&link, &head) {
                Ok(()) if head.kind != Kind::EventStream => Err(HttpError::ContentType.into()),
                Ok(()) => {
                    stream.decoder.restart();
                    read_events(&mut conn, head.framing, &link, &mut stream, until)
                        .await
                        .map_err(Failure::from)
                }
                Err(failure) => Err(failure),
            },
            Err(e) => Err(e.into()),
        };
        match outcome {
            Err(Failure::Status(405)) => {
                tracing::debug!(upstream = %link.name, "upstream has no standalone stream (405)");
                return;
            }
            Err(Failure::Status(status @ 400..=499)) if subscription.is_some() => {
                tracing::info!(upstream = %link.name, status, "upstream refused subscriptions/listen: its list changes are not followed");
                return;
            }
            Err(Failure::SessionExpired) => return link.session_expired(),
            Err(Failure::Http(HttpError::Stopped)) => return,
            Ok(()) | Err(_) => {}
        }
        attempts = if stream.decoder.events() > seen { 1 } else { attempts + 1 };
        if attempts > LISTEN_ATTEMPTS_MAX {
            tracing::warn!(upstream = %link.name, attempts, "upstream standalone stream given up");
            return;
        }
        if !pause(&link, stream.decoder.retry().unwrap_or_else(|| backoff(attempts))).await {
            return;
        }
    }
}

/// Ends the upstream session (§Session Management), best effort.
async fn delete(link: Rc<Link>, session: Rc<str>) {
    let until = Until { deadline: Some(Instant::now() + DELETE_TIMEOUT), stoppable: false };
    let Ok(bearer) = link.exchanged(None).await else {
        return tracing::debug!(upstream = %link.name, "upstream session not deleted: no token");
    };
    let request = link.encode(Method::Delete, None, None, (None, bearer.as_deref()), None);
    let status =
        round_trip(&link, Method::Delete, GetBytes(request), until).await.map(|(_, h)| h.status);
    let prefix = &session[..session.len().min(8)];
    tracing::debug!(upstream = %link.name, prefix, ?status, "upstream session deleted");
}

thread_local! {
    /// DELETEs of upstream sessions this core has not finished (`deletes_settled`).
    static DELETES_IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// One DELETE in flight, until dropped (its task ended, or was dropped unrun).
struct DeleteDone;

impl DeleteDone {
    fn new() -> DeleteDone {
        DELETES_IN_FLIGHT.with(|n| n.set(n.get() + 1));
        DeleteDone
    }
}

impl Drop for DeleteDone {
    fn drop(&mut self) {
        DELETES_IN_FLIGHT.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Waits (at most `DELETE_TIMEOUT`) until this core's upstream-session DELETEs are done: the
/// end of a drain stops every HTTP upstream, and the core's runtime must not end before their
/// DELETEs went out.
pub(crate) async fn deletes_settled() {
    let deadline = Instant::now() + DELETE_TIMEOUT;
    while DELETES_IN_FLIGHT.with(Cell::get) > 0 && Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Maps a response's status: 2xx passes; 404 with a session id means the session is gone; a
/// redirect is named, not followed (`Failure::Redirect`).
fn check_status(link: &Link, head: &Head) -> Result<(), Failure> {
    link.note_session(head);
    match head.status {
        200..=299 => Ok(()),
        404 if link.session.borrow().is_some() => Err(Failure::SessionExpired),
        status @ 300..=399 => {
            Err(Failure::Redirect { status, location: head.location.as_deref().map(Box::from) })
        }
        status => Err(Failure::Status(status)),
    }
}

/// How long to wait before reconnection `attempt` (1-based) without a `retry:` hint.
fn backoff(attempt: u32) -> Duration {
    let doubled = BACKOFF_MIN.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    doubled.min(BACKOFF_MAX)
}

/// Sleeps `delay` (at least `BACKOFF_MIN`, at most `RETRY_MAX`: a `retry: 0` cannot make a
/// reconnection loop spin); false when the transport stopped meanwhile.
async fn pause(link: &Link, delay: Duration) -> bool {
    let stop = link.stop.notified();
    if link.stop.is_set() {
        return false;
    }
    monoio::select! {
        _ = monoio::time::sleep(delay.clamp(BACKOFF_MIN, RETRY_MAX)) => !link.stop.is_set(),
        _ = stop => false,
    }
}

// ---------------------------------------------------------------------------------------------
// One HTTP/1.1 exchange.

/// The request of a round trip, and how it is ordered.
trait Outgoing {
    /// The turn to wait for before writing, if any.
    fn turn(&self) -> Option<&Turn>;
    /// Releases the turn once the bytes are written (unless it is held until the head).
    fn written(&mut self);
    /// The bytes to write (encoded after the turn came, so they carry the newest session id).
    fn bytes(&self, link: &Link, method: Method) -> Vec<u8>;
}

/// A POST: its body and its turn.
struct PostBytes {
    body: Vec<u8>,
    /// The call's caller, when the message is a call's request.
    caller: Option<Caller>,
    /// The caller's exchanged token (`--upstream-auth NAME=exchange`), set before the POST.
    bearer: Option<Rc<str>>,
    /// The call's CLIENT span (tracing on): sent as `traceparent`.
    trace: Option<TraceParent>,
    turn: Option<Turn>,
    /// Keep the turn until the response head came (notifications and responses).
    hold_turn: bool,
    /// A 2026-07-28 request's routing headers (`None`: a legacy message).
    heads: Option<Heads>,
}

impl Outgoing for PostBytes {
    fn turn(&self) -> Option<&Turn> {
        self.turn.as_ref()
    }
    fn written(&mut self) {
        if !self.hold_turn {
            self.turn = None;
        }
    }
    fn bytes(&self, link: &Link, method: Method) -> Vec<u8> {
        let presented = (self.caller.as_ref(), self.bearer.as_deref());
        let mut bytes = link.encode(method, Some(&self.body), None, presented, self.heads.as_ref());
        if let Some(trace) = &self.trace {
            with_traceparent(&mut bytes, trace);
        }
        bytes
    }
}

/// Adds a `traceparent` header (W3C Trace Context) naming `trace` to an encoded request, at
/// the end of its head (the body stays as it is).
fn with_traceparent(request: &mut Vec<u8>, trace: &TraceParent) {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else { return };
    let line = format!("\r\ntraceparent: {}", trace.header_value());
    request.splice(end..end, line.into_bytes());
}

/// A GET or DELETE, already encoded; not ordered.
struct GetBytes(Vec<u8>);

impl Outgoing for GetBytes {
    fn turn(&self) -> Option<&Turn> {
        None
    }
    fn written(&mut self) {}
    fn bytes(&self, _: &Link, _: Method) -> Vec<u8> {
        self.0.clone()
    }
}

/// Writes a request and reads its response head. A reused idle connection whose write fails
/// (the upstream closed it meanwhile) is replaced by a new one. One that took the whole
/// request and then closed without a response byte is not: the upstream may have run the
/// request, and sending it again could run a tool twice.
async fn round_trip(
    link: &Link,
    method: Method,
    mut outgoing: impl Outgoing,
    until: Until,
) -> Result<(Conn, Head), HttpError> {
    if let Some(turn) = outgoing.turn() {
        if !turn.wait().await {
            return Err(HttpError::Stopped);
        }
    }
    let bytes = outgoing.bytes(link, method);
    let mut idle = link.pool.take();
    loop {
        let reused = idle.is_some();
        let mut conn = match idle.take() {
            Some(conn) => conn,
            None => Conn::open(link.addr, until).await?,
        };
        match conn.write(bytes.clone(), &link.stop, until).await {
            Ok(()) => outgoing.written(),
            Err(HttpError::Closed | HttpError::Io(_)) if reused => continue,
            Err(e) => return Err(e),
        }
        let head = read_head(&mut conn, &link.stop, until).await?;
        return Ok((conn, head));
    }
}

/// Reads an event stream to its end, handing each event's message to the peer. After each
/// event it waits until the call the stream answers (any running call, for the standalone
/// stream) has room (`peer::room`): the response is then not read, the TCP window fills, and the
/// upstream is slowed to what tidemark's client reads (backpressure, CONTRACT §3).
async fn read_events(
    conn: &mut Conn,
    framing: Framing,
    link: &Link,
    stream: &mut Stream,
    until: Until,
) -> Result<(), HttpError> {
    let mut body = Body::new(framing);
    let mut piece = Vec::with_capacity(READ_CHUNK);
    let mut events: Vec<Vec<u8>> = Vec::new();
    let only = stream.awaited.as_ref().and_then(Value::as_u64);
    while body.next(conn, &link.stop, until, &mut piece).await? {
        stream.decoder.feed(&piece, &mut |data: &[u8]| events.push(data.to_vec()))?;
        for data in events.drain(..) {
            stream.deliver(link, &data);
            super::peer::room(&link.peer, only).await;
        }
    }
    Ok(())
}

/// One logical event stream: a request's (over its POST and resumptions) or the standalone one.
struct Stream {
    decoder: SseDecoder,
    /// The id of the request whose answer ends the stream, if any.
    awaited: Option<Value>,
    /// The awaited request is `initialize` (its result carries the protocol version).
    initialize: bool,
    answered: bool,
    /// A `subscriptions/listen` stream: only its `…/list_changed` notifications go to the peer
    /// (its acknowledgement and anything else are the subscription's own business).
    list_changes_only: bool,
    /// The awaited request is a 2026-07-28 `tools/list` (its answer's declarations are
    /// learnt: `Link::learn_tools`).
    tools_page: Option<ToolsPage>,
}

impl Stream {
    fn new(line_max: usize, awaited: Option<Value>, initialize: bool) -> Stream {
        Stream {
            decoder: SseDecoder::new(line_max),
            awaited,
            initialize,
            answered: false,
            list_changes_only: false,
            tools_page: None,
        }
    }

    /// One JSON body or event: a message or a batch of them, each to the peer. An event with
    /// no data (a priming event carrying only an id) and text that is not JSON are skipped.
    fn deliver(&mut self, link: &Link, data: &[u8]) {
        if data.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if self.reads_members() && data.trim_ascii_start().starts_with(b"{") {
            return self.deliver_members(link, data);
        }
        let value: Value = match serde_json::from_slice(data) {
            Ok(value) => value,
            Err(_) => {
                let (upstream, bytes) = (&*link.name, data.len());
                tracing::warn!(upstream, bytes, "upstream sent a message that is not JSON");
                return;
            }
        };
        let Some(peer) = link.peer.upgrade() else { return };
        match value {
            Value::Array(batch) => batch.into_iter().for_each(|m| self.hand(link, &peer, m)),
            message => self.hand(link, &peer, message),
        }
    }

    /// True when a message is only handed on (no listing learned, no protocol version noted,
    /// no filter): it is then read straight into its members (`deliver_members`).
    fn reads_members(&self) -> bool {
        !self.list_changes_only && !self.initialize && self.tools_page.is_none()
    }

    /// One JSON object to the peer read into its members (`peer::Incoming`): a tool call's
    /// result stays the upstream's text, passed on to the client as it is.
    fn deliver_members(&mut self, link: &Link, data: &[u8]) {
        // Most are a call's answer: its members scanned, only the result checked as JSON (as
        // the stdio reader takes its lines).
        if let Some((id, result)) = line_head::plain_answer(data) {
            self.answered |= self.awaited.as_ref().and_then(Value::as_u64) == Some(id);
            let Some(peer) = link.peer.upgrade() else { return };
            return peer.answered(id, result.into());
        }
        let incoming: Incoming = match serde_json::from_slice(data) {
            Ok(incoming) => incoming,
            Err(_) => {
                let (upstream, bytes) = (&*link.name, data.len());
                tracing::warn!(upstream, bytes, "upstream sent a message that is not JSON");
                return;
            }
        };
        if let (Incoming::Message(members), Some(awaited)) = (&incoming, &self.awaited) {
            self.answered |= members.answers(awaited);
        }
        let Some(peer) = link.peer.upgrade() else { return };
        peer.receive_members(incoming);
    }

    fn hand(&mut self, link: &Link, peer: &Rc<Peer>, mut message: Value) {
        if self.list_changes_only {
            let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
            if !(method.starts_with("notifications/") && method.ends_with("/list_changed")) {
                return;
            }
        }
        let answers = match &self.awaited {
            Some(id) => message.get("method").is_none() && message.get("id") == Some(id),
            None => false,
        };
        if answers {
            self.answered = true;
            if self.initialize {
                link.note_protocol_version(&message);
            }
            if let Some(page) = self.tools_page {
                link.learn_tools(&mut message, page);
            }
        }
        peer.receive(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_id_and_method() {
        // Goal: requests wait for an answer; notifications and responses for 202. Method: table.
        let answer = |id: Value, initialize| Some(Expect::Answer { id, initialize });
        let accepted = |initialized| Some(Expect::Accepted { initialized });
        let cases = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#, answer(json!(1), true)),
            (r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#, answer(json!("a"), false)),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, accepted(true)),
            (r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#, accepted(false)),
            (r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, accepted(false)),
            (
                r#"{"id":1,"params":{"a":[1,{"b":null}]},"method":"x","id":"b"}"#,
                answer(json!("b"), false),
            ),
            (r#"{"jsonrpc":"2.0","id":3,"method":7}"#, accepted(false)),
            ("[1]", None),
            ("not json", None),
        ];
        for (text, expected) in cases {
            let expect = classify(text.as_bytes()).map(|(expect, _)| expect);
            assert_eq!(expect, expected, "{text}");
        }
        let probe = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"{DISCOVER}"}}"#);
        assert_eq!(classify(probe.as_bytes()).map(|(_, discover)| discover), Some(true));
    }

    fn test_link(url: &str) -> Link {
        let endpoint = parse_url(url).expect("parses");
        let addr = resolve(&endpoint).expect("an IP literal");
        Link::new(Rc::from("up"), endpoint, addr, 1024, Duration::from_secs(1), Weak::new())
    }

    #[test]
    fn requests_carry_the_session_headers_once_known() {
        // Goal: before initialize only the basics; after it the session id and protocol version
        // on every request, Last-Event-ID on a resumption. Method: encode before and after.
        let link = test_link("http://127.0.0.1:8000/mcp?x=1");
        let first = link.encode(Method::Post, Some(b"{}"), None, (None, None), None);
        let expected = "POST /mcp?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\
            Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
            Content-Length: 2\r\n\r\n{}";
        assert_eq!(String::from_utf8(first).expect("ascii"), expected);
        let head = Head {
            status: 200,
            kind: Kind::Json,
            framing: Framing::Length(0),
            session: Some("s-1".into()),
            location: None,
            keep_alive: true,
        };
        link.note_session(&head);
        link.note_session(&Head { session: Some("s-2".into()), ..head });
        link.note_protocol_version(
            &json!({ "id": 1, "result": { "protocolVersion": "2025-11-25" } }),
        );
        link.note_protocol_version(&json!({ "id": 1, "result": { "protocolVersion": "a\r\nb" } }));
        let resume = link.encode(Method::Get, None, Some("7"), (None, None), None);
        let expected =
            "GET /mcp?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: text/event-stream\r\n\
            Content-Length: 0\r\nMcp-Session-Id: s-1\r\nMCP-Protocol-Version: 2025-11-25\r\n\
            Last-Event-ID: 7\r\n\r\n";
        assert_eq!(String::from_utf8(resume).expect("ascii"), expected);
        let delete = String::from_utf8(link.encode(Method::Delete, None, None, (None, None), None))
            .expect("ascii");
        assert!(delete.starts_with("DELETE /mcp?x=1 HTTP/1.1\r\n"), "{delete}");
        assert!(
            delete.contains("Connection: close\r\nContent-Length: 0\r\nMcp-Session-Id: s-1\r\n")
        );
    }

    #[test]
    fn configured_credential_headers_go_on_every_request() {
        // Goal: `--upstream-credentials` headers are on POST, GET and DELETE, after the
        // transport's own. Method: encode each with credentials set.
        let mut link = test_link("http://127.0.0.1:8000/mcp");
        link.credentials = Arc::new(Credentials {
            headers: vec![
                ("Authorization".into(), "Bearer k".into()),
                ("X-T".into(), "a b".into()),
            ],
            ..Credentials::default()
        });
        for method in [Method::Post, Method::Get, Method::Delete] {
            let head = String::from_utf8(link.encode(method, None, None, (None, None), None))
                .expect("ascii");
            assert!(head.ends_with("\r\nAuthorization: Bearer k\r\nX-T: a b\r\n\r\n"), "{head}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        // Goal: reconnection waits grow and stay bounded. Method: a few attempts and a huge one.
        assert_eq!(backoff(1), BACKOFF_MIN);
        assert_eq!(backoff(2), BACKOFF_MIN * 2);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn a_callers_subject_and_forwarded_token_go_only_where_configured() {
        // Goal: the subject under `subject_header`; with forwarding the caller's
        // `Authorization` in place of a configured one, which stays for a request with no
        // caller; a subject that is no header value is left out. Method: encode each case.
        let mut link = test_link("http://127.0.0.1:8000/mcp");
        link.credentials = Arc::new(Credentials {
            headers: vec![("Authorization".into(), "Bearer configured".into())],
            subject_header: Some("X-Subject".into()),
            forward_authorization: true,
            ..Credentials::default()
        });
        let alice = Caller::new(Rc::from("alice"), Rc::from("Bearer tok-alice"));
        let head = |caller: Option<&Caller>| {
            String::from_utf8(link.encode(Method::Post, None, None, (caller, None), None))
                .expect("ascii")
        };
        let called = head(Some(&alice));
        assert!(called.contains("\r\nAuthorization: Bearer tok-alice\r\n"), "{called}");
        assert!(called.contains("\r\nX-Subject: alice\r\n"), "{called}");
        assert!(!called.contains("configured"), "{called}");
        let own = head(None);
        assert!(own.contains("\r\nAuthorization: Bearer configured\r\n"), "{own}");
        assert!(!own.contains("X-Subject"), "{own}");
        let hostile = Caller::new(Rc::from("eve\r\nX-Admin: 1"), Rc::from("Bearer tok-eve"));
        let injected = head(Some(&hostile));
        assert!(!injected.contains("X-Admin") && !injected.contains("X-Subject"), "{injected}");
    }

    #[test]
    fn an_exchanged_token_is_the_one_bearer_and_the_callers_own_never_goes() {
        // Goal: with `--upstream-auth NAME=exchange` the exchanged token replaces a configured
        // `Authorization` (one header only), the caller's own token is never sent, and a
        // request without an exchanged token (one that speaks for no one) keeps the configured
        // one; without a target an exchanged token is ignored. Method: encode each case.
        let mut link = test_link("http://127.0.0.1:8000/mcp");
        let tuning = super::exchange::Tuning {
            margin: Duration::from_secs(30),
            cache_entries: 4,
            timeout: Duration::from_secs(10),
            answer_bytes: 64 * 1024,
        };
        let target = super::exchange::ExchangeTarget::new(
            "who",
            "http://127.0.0.1:1/token".into(),
            "gateway".into(),
            None,
            Some("who-api".into()),
            None,
            tuning,
        );
        link.credentials = Arc::new(Credentials {
            headers: vec![("Authorization".into(), "Bearer configured".into())],
            exchange: Some(Arc::new(target)),
            ..Credentials::default()
        });
        let alice = Caller::new(Rc::from("alice"), Rc::from("Bearer tok-alice"));
        let head = |link: &Link, exchanged: Option<&str>| {
            let presented = (Some(&alice), exchanged);
            String::from_utf8(link.encode(Method::Post, None, None, presented, None))
                .expect("ascii")
        };
        let called = head(&link, Some("xchg-alice"));
        assert!(called.contains("\r\nAuthorization: Bearer xchg-alice\r\n"), "{called}");
        assert_eq!(called.matches("Authorization").count(), 1, "{called}");
        assert!(!called.contains("tok-alice") && !called.contains("configured"), "{called}");
        let own = head(&link, None);
        assert!(own.contains("\r\nAuthorization: Bearer configured\r\n"), "{own}");
        assert!(!own.contains("tok-alice"), "{own}");
        link.credentials = Arc::default();
        let plain = head(&link, Some("xchg-alice"));
        assert!(!plain.contains("Authorization"), "{plain}");
    }
}
