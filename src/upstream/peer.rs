//! One MCP client connection to an upstream server, over any `Transport`: request ids and
//! their answers, the progress-token mapping of tool calls, server→client requests routed to
//! the tool call that is running (and the client's answer routed back), notifications
//! forwarded to the session, `notifications/cancelled` toward the upstream when a call ends
//! early, and the upstream's end failing every call still waiting.
//!
//! Deadlines: a request that is not a tool call gets `--upstream-timeout-secs` from its send.
//! A tool call's timeout is an idle timeout: it runs from the last message the upstream sent
//! for the call (its progress, logs and requests), and the time tidemark holds the upstream back
//! (`room`: its reader paused for a lagging client) does not count; `--upstream-call-max-secs`
//! bounds the whole call, however busy the upstream keeps it.
//!
//! Called by: `upstream::Bridge` (requests), the transport's reader task (`receive`, `closed`).
//! Never: blocks, or waits without a deadline.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::json;
use serde_json::value::RawValue;

use crate::fasthash::FastMap;
use crate::provider::{CallContext, Caller, LogLevel, ProviderError, Value};
use crate::trace::TraceParent;
use crate::wire::{self, Code};

/// How messages reach the upstream. Sending queues; a reader task of the transport hands what
/// arrives to `Peer::receive` and the end to `Peer::closed`.
pub(crate) trait Transport {
    /// Queues one JSON-RPC message (a whole JSON object, no newline). `Err` says why it cannot
    /// be sent (the transport ended, or its queue is full).
    fn send(&self, message: Vec<u8>) -> Result<(), String>;
    /// `send` for a call's request, made for `caller`: a transport that presents callers to
    /// its upstream (HTTP's `subject-header`, a forwarded token) uses it; others ignore it.
    /// `trace`: the call's CLIENT span (`--otlp-endpoint`), for a transport that sends it as
    /// a `traceparent` header (HTTP).
    fn send_as(
        &self,
        message: Vec<u8>,
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let _ = (caller, trace);
        self.send(message)
    }
    /// `send_as` for request `id` of `method` (`request`): a transport that must know them
    /// (HTTP: what its POST waits for) takes them from here instead of reading the message.
    fn send_request(
        &self,
        message: Vec<u8>,
        request: (u64, &str),
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let _ = request;
        self.send_as(message, caller, trace)
    }
    /// Ends the transport (the child is stopped, the HTTP session deleted); `Peer::closed`
    /// follows.
    fn shutdown(&self);
    /// An empty buffer for the next message's encoding: one the transport is done with
    /// (stdio: its stdin queue's emptied buffers), so a steady flow of requests allocates
    /// none; a new one where it has none to spare.
    fn lend(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// What the peer tells its owner besides answers.
pub(crate) trait PeerEvents {
    /// `notifications/tools/list_changed` from the upstream.
    fn tools_changed(&self);
    /// A notification that belongs to no running call (resource updates, list changes, logs
    /// outside a call), to forward to the client session(s) as is.
    fn notification(&self, method: &str, params: Value);
    /// A log message outside a call.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
}

/// A one-shot slot a waiting request parks on.
struct Slot {
    answer: RefCell<Option<Answer>>,
    waker: RefCell<Option<Waker>>,
    /// When the upstream last sent something for this request (its send, then each progress,
    /// log or request routed to its call): a tool call's idle timeout runs from here.
    heard: Cell<Instant>,
}

impl Slot {
    /// A slot for a request sent at `sent`.
    fn new(sent: Instant) -> Slot {
        Slot { answer: RefCell::new(None), waker: RefCell::new(None), heard: Cell::new(sent) }
    }

    /// The slot emptied for another request (its answer and waker dropped), if nothing else
    /// holds it.
    fn emptied(mut slot: Rc<Slot>) -> Option<Rc<Slot>> {
        let only = Rc::get_mut(&mut slot)?;
        *only.answer.get_mut() = None;
        *only.waker.get_mut() = None;
        Some(slot)
    }

    fn fill(&self, answer: Answer) {
        *self.answer.borrow_mut() = Some(answer);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// Resolves when the slot is filled.
struct Filled(Rc<Slot>);

impl Future for &Filled {
    type Output = Answer;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        if let Some(answer) = self.0.answer.borrow_mut().take() {
            return Poll::Ready(answer);
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// How an upstream request ended.
enum Answer {
    /// No answer within its deadline: `Idle` for `--upstream-timeout-secs` (a tool call: since
    /// the upstream last sent anything for it), `Total` past `--upstream-call-max-secs`.
    Late(Late),
    /// The `result` member's text, as the upstream wrote it (one JSON value, checked).
    Result(Box<str>),
    Error(Value),
    /// The upstream ended, or this request's answer could not be taken (why).
    Gone(Rc<str>),
}

/// Which deadline a request missed.
#[derive(Clone, Copy)]
enum Late {
    Idle,
    Total,
}

/// A request waiting for its answer.
struct Pending {
    slot: Rc<Slot>,
    /// The tool call's context, for the progress, logs and requests the upstream sends while
    /// it runs.
    call: Option<CallContext>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Keyed by the ids we send (an upstream only looks them up), so the multiply-rotate hash
    /// is enough: SipHash was a quarter of the map's cost per call.
    pending: FastMap<u64, Pending>,
    /// Ids of running tool calls, oldest first: a server→client request or log from the
    /// upstream goes to the newest (stdio carries no request relation).
    calls: Vec<u64>,
    /// Why the upstream ended, once it did.
    gone: Option<Rc<str>>,
    /// Slots of answered requests, emptied, for the next requests (at most `SPARE_SLOTS_MAX`):
    /// a steady flow of calls allocates none.
    spare_slots: Vec<Rc<Slot>>,
}

/// Emptied slots a peer keeps: one per call in flight at a time is reused; more in flight at
/// once allocate their own, freed when done beyond this many.
const SPARE_SLOTS_MAX: usize = 4;

/// An MCP client connection to one upstream.
pub(crate) struct Peer {
    /// The upstream's name, in logs and in the `data` of its faults.
    name: Rc<str>,
    transport: RefCell<Option<Rc<dyn Transport>>>,
    state: RefCell<State>,
    events: Rc<dyn PeerEvents>,
    /// `--upstream-call-max-secs`: the bound of a whole tool call.
    call_max: Duration,
    /// Readers of this upstream paused for a lagging client right now (`room`): while any is,
    /// no tool call's idle timeout runs.
    holds: Cell<u32>,
    /// When the last such pause ended: the idle timeouts run again from here.
    released: Cell<Instant>,
}

impl Peer {
    pub(crate) fn new(name: Rc<str>, events: Rc<dyn PeerEvents>, call_max: Duration) -> Peer {
        Peer {
            name,
            transport: RefCell::new(None),
            state: RefCell::new(State { next_id: 1, ..State::default() }),
            events,
            call_max,
            holds: Cell::new(0),
            released: Cell::new(Instant::now()),
        }
    }

    /// Binds the transport (built after the peer, as it reports to it).
    pub(crate) fn bind(&self, transport: Rc<dyn Transport>) {
        *self.transport.borrow_mut() = Some(transport);
    }

    /// The upstream's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// False once the upstream ended.
    pub(crate) fn is_alive(&self) -> bool {
        self.state.borrow().gone.is_none()
    }

    /// Ends the transport; waiting requests fail.
    pub(crate) fn shutdown(&self) {
        self.reset(STOPPED_BY_TIDEMARK);
    }

    /// Ends the transport because of what the upstream did (`why`): every waiting request
    /// fails with it at once, and the link's next request connects again.
    pub(crate) fn reset(&self, why: &str) {
        let transport = self.transport.borrow_mut().take();
        if let Some(transport) = transport {
            transport.shutdown();
        }
        self.end(why);
    }

    /// Request `id`'s answer arrived but cannot be taken (`why`): it fails at once, as if the
    /// upstream had ended for it alone. False when no request `id` is waiting (it timed out or
    /// was cancelled, or the id is not one of ours).
    pub(crate) fn refuse(&self, id: u64, why: &str) -> bool {
        let Some(pending) = self.state.borrow_mut().pending.remove(&id) else { return false };
        pending.slot.fill(Answer::Gone(Rc::from(why)));
        true
    }

    fn send(&self, message: &Value) -> Result<(), String> {
        self.send_as(message, None, None)
    }

    fn send_as(
        &self,
        message: &Value,
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let bytes = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        self.send_bytes(bytes, None, caller, trace)
    }

    /// Sends one message already encoded (a whole JSON object, no newline); `request`: its id
    /// and method when it is one of our requests (`Transport::send_request`).
    fn send_bytes(
        &self,
        bytes: Vec<u8>,
        request: Option<(u64, &str)>,
        caller: Option<&Caller>,
        trace: Option<TraceParent>,
    ) -> Result<(), String> {
        let transport = self.transport.borrow().clone();
        match (transport, request) {
            (Some(t), Some(request)) => t.send_request(bytes, request, caller, trace),
            (Some(t), None) => t.send_as(bytes, caller, trace),
            (None, _) => Err("not connected".to_owned()),
        }
    }

    /// Sends a notification (best effort: a gone upstream needs none).
    pub(crate) fn notify(&self, method: &str, params: Value) {
        let mut message = json!({ "jsonrpc": "2.0", "method": method });
        if !params.is_null() {
            message["params"] = params;
        }
        let _ = self.send(&message);
    }

    /// `request_text`'s result as a value.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        call: Option<CallContext>,
        timeout: Duration,
    ) -> Result<Value, ProviderError> {
        let text = self.request_text(method, Params::Value(params), call, timeout).await?;
        serde_json::from_str(&text).map_err(|_| self.fault(RESULT_TOO_DEEP))
    }

    /// Sends request `method` and waits for its answer, at most `timeout`: the result's JSON
    /// text as the upstream wrote it (a tool call's is passed on to the client so, with no
    /// value built). With `call`, it is a tool call: it gets a progress token of its own, the
    /// upstream's progress, logs and requests while it runs go to that context, and `timeout`
    /// is an idle timeout within `--upstream-call-max-secs` (module doc). Dropping the future
    /// before the answer sends `notifications/cancelled` for it.
    pub(crate) async fn request_text(
        &self,
        method: &str,
        params: Params<'_>,
        call: Option<CallContext>,
        timeout: Duration,
    ) -> Result<Box<str>, ProviderError> {
        // One clock read for the slot and the deadlines: the send between them takes no time
        // that matters to a timeout in seconds (each read is ~60 instructions a call).
        let sent = Instant::now();
        let (slot, id) = {
            let mut state = self.state.borrow_mut();
            if let Some(why) = &state.gone {
                return Err(self.fault(why));
            }
            let slot = match state.spare_slots.pop() {
                Some(spare) => {
                    spare.heard.set(sent);
                    spare
                }
                None => Rc::new(Slot::new(sent)),
            };
            let id = state.next_id;
            state.next_id += 1;
            if call.is_some() {
                state.calls.push(id);
            }
            state.pending.insert(id, Pending { slot: slot.clone(), call: call.clone() });
            (slot, id)
        };
        let guard = InFlight { peer: self, id, done: false };
        let trace = call.as_ref().and_then(CallContext::trace);
        let message = self.transport.borrow().as_ref().map_or_else(Vec::new, |t| t.lend());
        let message = encode_request(message, id, method, params, call.is_some(), trace.as_ref());
        let caller = call.as_ref().and_then(CallContext::caller);
        if let Err(why) = self.send_bytes(message, Some((id, method)), caller, trace) {
            let mut guard = guard;
            guard.done = true;
            self.forget(id);
            return Err(self.fault(&why));
        }
        let is_call = call.is_some();
        let filled = Filled(slot);
        let answer = self.wait(&filled, is_call, (sent, timeout)).await;
        let mut guard = guard;
        if !matches!(answer, Answer::Late(_)) {
            // Answered: the pending entry went with the answer, so the slot is ours alone.
            self.keep_slot(filled.0);
        }
        match answer {
            Answer::Result(result) => {
                guard.done = true;
                self.forget(id);
                Ok(result)
            }
            Answer::Error(error) => {
                guard.done = true;
                self.forget(id);
                Err(relay_error(error))
            }
            Answer::Gone(why) => {
                guard.done = true;
                self.forget(id);
                Err(self.fault(&why))
            }
            // The guard cancels it upstream.
            Answer::Late(late) => Err(self.late(method, late, timeout)),
        }
    }

    /// Keeps an answered request's slot for the next request, within `SPARE_SLOTS_MAX`.
    fn keep_slot(&self, slot: Rc<Slot>) {
        let mut state = self.state.borrow_mut();
        if state.spare_slots.len() < SPARE_SLOTS_MAX {
            state.spare_slots.extend(Slot::emptied(slot));
        }
    }

    /// Waits for `filled` until its deadline: `timeout` from `started` (its send), or for a tool
    /// call (`is_call`) `timeout` since the upstream last sent for it or was last held back,
    /// within `--upstream-call-max-secs` from `started`.
    async fn wait(
        &self,
        filled: &Filled,
        is_call: bool,
        (started, timeout): (Instant, Duration),
    ) -> Answer {
        let total = if is_call { self.call_max } else { timeout };
        let mut now = started;
        loop {
            let idle_end =
                if is_call { self.idle_from(&filled.0, now) + timeout } else { started + timeout };
            let end = idle_end.min(started + total);
            if let Ok(answer) =
                monoio::time::timeout(end.saturating_duration_since(now), filled).await
            {
                return answer;
            }
            now = Instant::now();
            if now.duration_since(started) >= total {
                return Answer::Late(if is_call { Late::Total } else { Late::Idle });
            }
            if !is_call || self.idle_from(&filled.0, now) + timeout <= now {
                return Answer::Late(Late::Idle);
            }
        }
    }

    /// Where a tool call's idle time starts at `now`: `now` while a reader is held back, else
    /// the later of its last message and the end of the last hold.
    fn idle_from(&self, slot: &Slot, now: Instant) -> Instant {
        if self.holds.get() > 0 {
            return now;
        }
        slot.heard.get().max(self.released.get())
    }

    /// The error of a request that missed its deadline: -32603 naming the flag.
    fn late(&self, method: &str, late: Late, timeout: Duration) -> ProviderError {
        let (flag, secs, key) = match late {
            Late::Idle => ("--upstream-timeout-secs", timeout.as_secs(), "timeoutSecs"),
            Late::Total => ("--upstream-call-max-secs", self.call_max.as_secs(), "callMaxSecs"),
        };
        crate::logging::limited!(
            crate::logging::Kind::Upstream,
            tracing::Level::WARN,
            upstream = %self.name,
            method,
            limit_secs = secs,
            flag,
            culprit = crate::logging::Culprit::Upstream.as_str(),
            reason = "timeout",
            "upstream did not answer in time"
        );
        let message = match late {
            Late::Idle => {
                format!("upstream {} did not answer {method} within {secs} s ({flag})", self.name)
            }
            Late::Total => {
                format!("upstream {} did not finish {method} within {secs} s ({flag})", self.name)
            }
        };
        ProviderError::Rpc {
            code: Code::InternalError.value(),
            message,
            data: Some(json!({ "upstream": &*self.name, key: secs })),
        }
    }

    /// Every page of a list method (`tools/list`, …): the items under `key`.
    pub(crate) async fn list_all(
        &self,
        method: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Vec<Value>, ProviderError> {
        let mut items = Vec::new();
        self.walk(method, key, timeout, |item| {
            items.push(item);
            false
        })
        .await?;
        Ok(items)
    }

    /// The first item of a list method's pages that `wanted` accepts; pages after it are not
    /// asked for (a `resources/read` looks its URI up in the upstream's listing this way).
    pub(crate) async fn find(
        &self,
        method: &str,
        key: &str,
        timeout: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<Option<Value>, ProviderError> {
        let mut found = None;
        self.walk(method, key, timeout, |item| {
            let hit = wanted(&item);
            if hit {
                found = Some(item);
            }
            hit
        })
        .await?;
        Ok(found)
    }

    /// Hands each item of a list method's pages to `visit` until it returns true.
    async fn walk(
        &self,
        method: &str,
        key: &str,
        timeout: Duration,
        mut visit: impl FnMut(Value) -> bool,
    ) -> Result<(), ProviderError> {
        let mut cursor: Option<Value> = None;
        // A bound on pages, so an upstream that keeps answering with a cursor cannot loop us.
        for _ in 0..LIST_PAGES_MAX {
            let params = match cursor.take() {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let mut page = self.request(method, params, None, timeout).await?;
            if let Some(Value::Array(listed)) = page.get_mut(key).map(Value::take) {
                for item in listed {
                    if visit(item) {
                        return Ok(());
                    }
                }
            }
            match page.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => return Ok(()),
            }
        }
        Ok(())
    }

    /// The waiting request `id` is answered, cancelled or timed out: it is no longer routed.
    fn forget(&self, id: u64) {
        let mut state = self.state.borrow_mut();
        state.pending.remove(&id);
        state.calls.retain(|&c| c != id);
    }

    /// The error of a request the upstream's end cut off: -32603 with `data` naming the upstream
    /// and what happened to it.
    fn fault(&self, why: &str) -> ProviderError {
        upstream_fault(&self.name, why)
    }

    /// The transport ended: every waiting request fails with `why`.
    pub(crate) fn closed(&self, why: &str) {
        if self.is_alive() {
            tracing::warn!(upstream = %self.name, reason = why, culprit = "upstream", "upstream ended");
        }
        self.end(why);
    }

    fn end(&self, why: &str) {
        let why: Rc<str> = Rc::from(why);
        let pending = {
            let mut state = self.state.borrow_mut();
            if state.gone.is_some() {
                return;
            }
            state.gone = Some(why.clone());
            state.calls.clear();
            std::mem::take(&mut state.pending)
        };
        for (_, p) in pending {
            p.slot.fill(Answer::Gone(why.clone()));
        }
    }

    /// One message from the upstream, as a value (the HTTP transport's, and tests').
    pub(crate) fn receive(self: &Rc<Self>, message: Value) {
        let incoming = match message {
            Value::Object(mut object) => Incoming::Message(Members {
                id: object.remove("id"),
                method: object.remove("method"),
                params: object.remove("params"),
                // A value always serializes.
                result: object
                    .remove("result")
                    .and_then(|r| serde_json::value::to_raw_value(&r).ok()),
                error: object.remove("error"),
            }),
            _ => Incoming::NotObject,
        };
        self.receive_members(incoming);
    }

    /// One message from the upstream, its members taken (`Incoming`).
    pub(crate) fn receive_members(self: &Rc<Self>, message: Incoming) {
        let Incoming::Message(members) = message else {
            tracing::warn!(upstream = %self.name, "upstream sent a JSON value that is not a message");
            return;
        };
        let Members { id, method, params, result, error } = members;
        let method = match method {
            Some(Value::String(method)) => Some(method),
            _ => None,
        };
        let params = params.unwrap_or(Value::Null);
        match (method, id) {
            (None, Some(id)) => self.answer(&id, result, error),
            (Some(method), Some(id)) => self.upstream_request(method, id, params),
            (Some(method), None) => self.notification(&method, params),
            (None, None) => {
                tracing::warn!(upstream = %self.name, "upstream sent a message without method or id")
            }
        }
    }

    /// The answer to request `id` with its result's text, read by a transport's scan of a
    /// plain answer (`line_head::plain_answer`): as `receive_members` takes that message.
    pub(crate) fn answered(&self, id: u64, result: Box<str>) {
        self.settle(id, || Answer::Result(result));
    }

    /// Fills the slot of our request `id`, if still pending, with what `answer` makes.
    fn settle(&self, id: u64, answer: impl FnOnce() -> Answer) {
        let Some(pending) = self.state.borrow_mut().pending.remove(&id) else { return };
        pending.slot.fill(answer());
    }

    /// A response to one of our requests: its `result` and `error` members.
    fn answer(&self, id: &Value, result: Option<Box<RawValue>>, error: Option<Value>) {
        let Some(id) = id.as_u64() else { return };
        self.settle(id, || match (result, error) {
            (Some(result), _) => Answer::Result(result.into()),
            (None, Some(error)) => Answer::Error(error),
            (None, None) => Answer::Error(wire::error_object(
                Code::InternalError.value(),
                "upstream response without result or error",
                None,
            )),
        });
    }

    /// A running tool call whose client has not been written its share of the call's messages
    /// (`CallContext::has_room`): call `only`, or, without it, any running call. The reader of
    /// a transport that carries several calls' messages on one stream (stdio's stdout, HTTP's
    /// standalone stream) asks for any: it cannot read one call's next message without the
    /// others', so it pauses for all.
    fn call_without_room(&self, only: Option<u64>) -> Option<CallContext> {
        let state = self.state.borrow();
        // Checked by reference: only the call found without room is cloned (this runs after
        // every line an upstream writes).
        let full =
            |id: &u64| state.pending.get(id)?.call.as_ref().filter(|cx| !cx.has_room()).cloned();
        match only {
            Some(id) => full(&id),
            None => state.calls.iter().find_map(full),
        }
    }

    /// The context of the newest running tool call, if any, for a message of the upstream's
    /// that belongs to it: the call has heard from its upstream (its idle timeout restarts).
    fn newest_call(&self) -> Option<CallContext> {
        let state = self.state.borrow();
        state.calls.iter().rev().find_map(|id| {
            let pending = state.pending.get(id)?;
            let call = pending.call.clone()?;
            pending.slot.heard.set(Instant::now());
            Some(call)
        })
    }

    /// A server→client request from the upstream (sampling, elicitation, roots, ping).
    fn upstream_request(self: &Rc<Self>, method: String, id: Value, params: Value) {
        if method == "ping" {
            let _ = self.send(&wire::response_object(id, Ok(json!({}))));
            return;
        }
        let call = self.newest_call();
        let peer = Rc::downgrade(self);
        let Some(call) = call.filter(|_| is_plain_method(&method)) else {
            let message = "no client request is running to carry this request";
            let error = wire::error_object(Code::InternalError.value(), message, None);
            let _ = self.send(&wire::response_object(id, Err(error)));
            return;
        };
        monoio::spawn(async move {
            let outcome = call.request(&method, params).await;
            let Some(peer) = peer.upgrade() else { return };
            let reply = wire::response_object(id, outcome.map_err(|e| client_error(&e)));
            let _ = peer.send(&reply);
        });
    }

    /// A notification from the upstream.
    fn notification(&self, method: &str, params: Value) {
        match method {
            "notifications/progress" => {
                let call = params.get("progressToken").and_then(Value::as_u64).and_then(|token| {
                    let state = self.state.borrow();
                    let pending = state.pending.get(&token)?;
                    pending.slot.heard.set(Instant::now());
                    pending.call.clone()
                });
                let Some(call) = call else { return };
                let Some(progress) = params.get("progress").and_then(Value::as_f64) else { return };
                let total = params.get("total").and_then(Value::as_f64);
                call.progress(progress, total, params.get("message").and_then(Value::as_str));
            }
            "notifications/message" => {
                let level = params.get("level").and_then(Value::as_str).and_then(LogLevel::parse);
                let Some(level) = level else { return };
                let logger = params.get("logger").and_then(Value::as_str);
                let data = params.get("data").cloned().unwrap_or(Value::Null);
                match self.newest_call() {
                    Some(call) => call.log(level, logger, data),
                    None => self.events.log(level, logger, data),
                }
            }
            "notifications/tools/list_changed" => self.events.tools_changed(),
            // The upstream gave up on one of its requests to us: the client's answer, when it
            // comes, is simply not needed.
            "notifications/cancelled" => {}
            _ if is_plain_method(method) => self.events.notification(method, params),
            _ => {}
        }
    }
}

/// One JSON text from an upstream as the peer reads it: an object's members that a message
/// has (`Members`), or `NotObject`. Parsed straight from the text (`serde_json::from_slice`):
/// the object's other members are skipped unbuilt and its own map is never made, where a
/// `Value` built the map, its key strings and the `"jsonrpc"` string, then took the members out
/// of it one by one (per bridged call).
pub(crate) enum Incoming {
    Message(Members),
    /// An array, string, number, boolean or null: not a message.
    NotObject,
}

/// The members of an upstream's message the peer reads, as a `serde_json` object holds them
/// (a key given twice: its last value; an escaped key: its unescaped text).
#[derive(Default)]
pub(crate) struct Members {
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    /// Its text, checked to be one JSON value and not parsed further.
    result: Option<Box<RawValue>>,
    error: Option<Value>,
}

impl Members {
    /// True for a response (no method) to request `id`.
    pub(crate) fn answers(&self, id: &Value) -> bool {
        self.method.is_none() && self.id.as_ref() == Some(id)
    }
}

impl<'de> serde::Deserialize<'de> for Incoming {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Incoming, D::Error> {
        d.deserialize_any(IncomingVisitor)
    }
}

/// Reads an `Incoming` from any JSON value.
struct IncomingVisitor;

impl<'de> serde::de::Visitor<'de> for IncomingVisitor {
    type Value = Incoming;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Incoming, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<MemberKey>()? {
            let slot = match key {
                MemberKey::Id => &mut members.id,
                MemberKey::Method => &mut members.method,
                MemberKey::Params => &mut members.params,
                MemberKey::Result => {
                    members.result = Some(map.next_value()?);
                    continue;
                }
                MemberKey::Error => &mut members.error,
                MemberKey::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(Incoming::Message(members))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Incoming, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Incoming::NotObject)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Incoming, E> {
        Ok(Incoming::NotObject)
    }
}

/// A member's name in an upstream's message: one the peer reads, or any other.
enum MemberKey {
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> serde::Deserialize<'de> for MemberKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MemberKey, D::Error> {
        d.deserialize_identifier(MemberKeyVisitor)
    }
}

/// Reads a `MemberKey` from an object key, borrowed or unescaped.
struct MemberKeyVisitor;

impl serde::de::Visitor<'_> for MemberKeyVisitor {
    type Value = MemberKey;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<MemberKey, E> {
        Ok(match key {
            "id" => MemberKey::Id,
            "method" => MemberKey::Method,
            "params" => MemberKey::Params,
            "result" => MemberKey::Result,
            "error" => MemberKey::Error,
            _ => MemberKey::Other,
        })
    }
}

/// Backpressure (CONTRACT §3): returns once every running call of `peer` — call `only`, when
/// the stream being read carries only its messages — has room for more, so a transport's reader
/// awaits it between messages and stops reading the upstream meanwhile (its pipe or TCP window
/// then fills, and the upstream blocks in its write). Each wait is on the call's own signal,
/// woken when its writer sent events, its client left or the call ended; never a poll.
///
/// While it waits, the peer's tool calls are held back by tidemark, not idle: their idle
/// timeouts stop (`Hold`).
pub(crate) async fn room(peer: &std::rc::Weak<Peer>, only: Option<u64>) {
    loop {
        let full = peer.upgrade().and_then(|p| p.call_without_room(only));
        match full {
            Some(call) => {
                let _hold = Hold::new(peer);
                call.room().await;
            }
            None => return,
        }
    }
}

/// One reader of a peer held back for a lagging client, until dropped (also when the reader's
/// future is dropped mid-wait).
struct Hold<'a>(&'a std::rc::Weak<Peer>);

impl<'a> Hold<'a> {
    fn new(peer: &'a std::rc::Weak<Peer>) -> Hold<'a> {
        if let Some(p) = peer.upgrade() {
            p.holds.set(p.holds.get() + 1);
        }
        Hold(peer)
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0.upgrade() {
            p.holds.set(p.holds.get().saturating_sub(1));
            p.released.set(Instant::now());
        }
    }
}

/// Why requests fail after tidemark ended the upstream (session end, drain).
const STOPPED_BY_TIDEMARK: &str = "stopped by tidemark (the session ended)";

/// A bridged call's arguments: the provider API's value, or, from the request paths
/// (`dispatch::call_tool_answer`), the client's as JSON text (`None`: none sent), sent on with
/// no value built.
pub(crate) enum CallArguments {
    Value(Value),
    Text(Option<Vec<u8>>),
}

impl CallArguments {
    /// The arguments as the provider API's value (`Null`: none).
    pub(super) fn into_value(self) -> Value {
        match self {
            CallArguments::Value(value) => value,
            // The text was encoded from a decoded value: it parses.
            CallArguments::Text(text) => {
                text.and_then(|t| serde_json::from_slice(&t).ok()).unwrap_or_default()
            }
        }
    }
}

/// What a request carries: its params as a value, or a tool call's (`Call`) as the name and
/// the arguments' JSON text (the client's, encoded once: `wire::jsonrpc::push_value`).
pub(crate) enum Params<'a> {
    Value(Value),
    Call { tool: &'a str, arguments: Option<&'a [u8]> },
}

/// Request `id`'s message. A tool call's (`is_call`) params get `_meta`: its progress token
/// and, traced, its `traceparent` (the MCP semantic conventions' propagation, for every
/// transport).
fn encode_request(
    mut message: Vec<u8>,
    id: u64,
    method: &str,
    params: Params<'_>,
    is_call: bool,
    trace: Option<&TraceParent>,
) -> Vec<u8> {
    message.clear();
    message.reserve(REQUEST_BYTES_HINT);
    match params {
        Params::Call { tool, arguments } => {
            let traceparent = trace.map(TraceParent::header_value);
            let traceparent = traceparent.as_deref();
            wire::jsonrpc::push_upstream_call(&mut message, id, tool, arguments, traceparent);
        }
        Params::Value(mut params) => {
            if let Some(object) = params.as_object_mut().filter(|_| is_call) {
                let mut meta = json!({ "progressToken": id });
                if let Some(trace) = trace {
                    meta["traceparent"] = Value::String(trace.header_value());
                }
                object.insert("_meta".into(), meta);
            }
            // Encoded straight from `params`: a message value would be a deep copy of them.
            wire::jsonrpc::push_upstream_request(&mut message, id, method, &params);
        }
    }
    message
}

/// Why a request fails whose result (a JSON text) nests deeper than `serde_json` builds values.
const RESULT_TOO_DEEP: &str = "its result nests too deep to read";

/// The capacity a request toward the upstream is encoded into: a tool call with small
/// arguments fits, so it is one allocation (the transport takes the buffer as it is).
const REQUEST_BYTES_HINT: usize = 256;

/// Most pages one list method may take (`LIST_PAGES_MAX` × the upstream's page size).
const LIST_PAGES_MAX: usize = 1000;

/// True for a method name made of the characters MCP method names use; anything else from an
/// upstream is not passed on to clients.
pub(super) fn is_plain_method(method: &str) -> bool {
    !method.is_empty()
        && method.len() <= 128
        && method.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_-.".contains(&b))
}

/// An upstream's JSON-RPC error object, passed on as is.
fn relay_error(error: Value) -> ProviderError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(Code::InternalError.value());
    let message =
        error.get("message").and_then(Value::as_str).unwrap_or("upstream error").to_owned();
    ProviderError::Rpc { code, message, data: error.get("data").cloned() }
}

/// The JSON-RPC error object that answers the upstream when the client could not.
fn client_error(e: &ProviderError) -> Value {
    match e {
        ProviderError::ClientError { code, message } => wire::error_object(*code, message, None),
        // `data` goes as is, `null` included.
        ProviderError::Rpc { code, message, data } => {
            wire::error_object(*code, message, Some(data.clone().unwrap_or_default()))
        }
        other => wire::error_object(Code::InternalError.value(), &other.to_string(), None),
    }
}

/// A request between sending and its answer: dropped early (the call was cancelled, or timed
/// out), it tells the upstream to stop.
struct InFlight<'a> {
    peer: &'a Peer,
    id: u64,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.peer.forget(self.id);
        if self.peer.is_alive() {
            let params = json!({ "requestId": self.id, "reason": "cancelled by the client" });
            self.peer.notify("notifications/cancelled", params);
        }
    }
}

/// The error of a request an upstream's fault ended: -32603 with `data` naming the upstream
/// and what happened to it.
pub(super) fn upstream_fault(upstream: &str, why: &str) -> ProviderError {
    ProviderError::Rpc {
        code: Code::InternalError.value(),
        message: format!("upstream {upstream} failed: {why}"),
        data: Some(json!({ "upstream": upstream, "reason": why })),
    }
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
