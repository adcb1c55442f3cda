//! One 2026-07-28 request that runs provider code (`tools/call`, `prompts/get`): its
//! `CallSink` (progress and logs as notifications on the request's own response stream, logs
//! only when the request set `_meta…/logLevel`), MRTR (a server→client request becomes an
//! entry of an `InputRequiredResult`; the answers of the client's retry resolve it), and the
//! final answer's bytes and HTTP status, and the call as a response stream (`CallStream`, a
//! `core::Source`): when its head is SSE or JSON, the final answer (`FinalAnswer`) and what
//! the drain's end writes (`end_for_drain`), shared with the keyed observer (`observer`).
//!
//! `runtime::stream` drives a `CallStream`: it polls the work through `wake`, writes what
//! `fill` made ready, and returns when the client closes the stream; the `CallJob` is then
//! dropped, which cancels the call (MCP 2026-07-28: a closed response stream is the request's
//! cancellation; nothing more is sent).
//!
//! Owns: `ModernSink`, `CallJob`, `CallStream`. Never: touches a socket or a session.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use crate::core::{Core, KeepAlive, Source, Step};
use crate::provider::builtin::ToolAnswer;
use crate::provider::{CallSink, LocalBoxFuture, LogLevel, ProviderError, ProviderResult, Value};
use crate::signal::Signal;
use crate::wire::jsonrpc::{self, RawId};
use crate::wire::sse;
use crate::wire::{Answer, Code, Refusal, Status};

use super::meta;
use super::state;

/// A request's `CallSink` on the modern path.
pub(crate) struct ModernSink {
    /// Notifications not yet written, each a whole JSON-RPC message (an unkeyed call); their
    /// bytes are `backlog.bytes`.
    events: RefCell<Vec<Bytes>>,
    /// What bounds `events` (an unkeyed call): its bytes, and the room a paused producer waits
    /// for.
    backlog: Rc<Backlog>,
    /// Every notification of a keyed call, kept for its observers (the first request and its
    /// retries read it from their own positions); `None` for an unkeyed call.
    recorded: Option<RefCell<Recorded>>,
    progress_token: Option<Box<str>>,
    log_level: Option<LogLevel>,
    client_capabilities: Value,
    /// The client's answers: earlier rounds' (from the verified `requestState`) and this
    /// round's `inputResponses`.
    answers: serde_json::Map<String, Value>,
    /// Answers the work actually used (sealed into the next `requestState`).
    used: RefCell<serde_json::Map<String, Value>>,
    /// Input the work waits for: the next `InputRequiredResult`'s `inputRequests`.
    needed: RefCell<serde_json::Map<String, Value>>,
    next_input: Cell<u32>,
    /// `--max-pending-client-requests`: entries `needed` may hold in one round.
    input_requests_max: usize,
    /// Something to write, or input needed: the driver looks again.
    pub(crate) wake: Signal,
    cancelled: Cell<bool>,
    cancel_signal: Rc<Signal>,
}

/// What a call starts with.
pub(crate) struct SinkSetup {
    pub progress_token: Option<Box<str>>,
    pub log_level: Option<LogLevel>,
    pub client_capabilities: Value,
    pub answers: serde_json::Map<String, Value>,
    /// Keep every event for retries with the same Idempotency-Key, up to `RecordLimit`;
    /// `None`: an unkeyed call.
    pub record: Option<RecordLimit>,
    /// `--max-pending-client-requests`.
    pub input_requests_max: usize,
    /// Bytes of an unkeyed call's notifications that may wait to be written (`--replay-bytes`):
    /// a producer that can wait is paused at `config::UNWRITTEN_SHARE_DIVISOR` of it (the
    /// bridge's upstream reader), and past all of it a notification is dropped (counted in
    /// `tidemark_modern_notifications_dropped_total`); the final result never is.
    pub pending_max: usize,
}

/// The notifications of an unkeyed call that wait for its connection's writer, bounded in
/// bytes (`SinkSetup::pending_max`). Shared with the futures of `CallSink::room`.
struct Backlog {
    bytes: Cell<usize>,
    /// Past it a producer has no room (`pending_max / UNWRITTEN_SHARE_DIVISOR`, at least 1).
    share: usize,
    max: usize,
    /// Notifications refused past `max`, not yet counted in the core's metrics.
    dropped: Cell<u64>,
    /// The call was cancelled (its stream closed): nothing more is written, so nothing waits.
    closed: Cell<bool>,
    /// Woken when the writer took the backlog, or the call was cancelled.
    room: Signal,
}

impl Backlog {
    fn has_room(&self) -> bool {
        self.closed.get() || self.bytes.get() < self.share
    }
}

/// How much a keyed call may record: `max` bytes of its own (`--replay-bytes`), inside what
/// its core's records may hold together (`KeyBytes`).
pub(crate) struct RecordLimit {
    pub max: usize,
    pub core: Rc<KeyBytes>,
}

/// The bytes one core's Idempotency-Key records hold (`--idempotency-bytes-per-core`):
/// recorded notifications (taken as they come, refused past the budget) and final answers
/// (taken when the call ends, whatever their size: the key table then evicts to make room).
/// Released when the bytes are freed (`Recorded` and `keyed::Record` are dropped), so what is
/// counted is what is held, records still read by a connection after eviction included.
pub(crate) struct KeyBytes {
    held: Cell<usize>,
    max: usize,
    metrics: std::sync::Arc<crate::metrics::CoreMetrics>,
}

impl KeyBytes {
    pub(crate) fn new(max: usize, metrics: std::sync::Arc<crate::metrics::CoreMetrics>) -> Self {
        KeyBytes { held: Cell::new(0), max, metrics }
    }

    /// Takes `n` bytes when they fit under the budget.
    fn try_take(&self, n: usize) -> bool {
        let fits = self.held.get().saturating_add(n) <= self.max;
        if fits {
            self.take(n);
        }
        fits
    }

    /// Takes `n` bytes even past the budget (a final answer: never dropped).
    pub(crate) fn take(&self, n: usize) {
        self.held.set(self.held.get() + n);
        self.metrics.idempotency_bytes.add(n as u64);
    }

    pub(crate) fn release(&self, n: usize) {
        debug_assert!(n <= self.held.get(), "invariant: released bytes were taken");
        self.held.set(self.held.get().saturating_sub(n));
        self.metrics.idempotency_bytes.sub(n as u64);
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.get()
    }

    /// True while the records hold more than the budget (finished ones should go).
    pub(crate) fn over(&self) -> bool {
        self.held.get() > self.max
    }

    /// True when not one more byte fits (a new keyed call is refused).
    pub(crate) fn full(&self) -> bool {
        self.held.get() >= self.max
    }
}

/// A keyed call's notifications, bounded in bytes (its own `max` and its core's `KeyBytes`):
/// past either bound further notifications are dropped (counted), the final result never is.
pub(crate) struct Recorded {
    pub events: Vec<Bytes>,
    bytes: usize,
    limit: RecordLimit,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.limit.core.release(self.bytes);
    }
}

impl ModernSink {
    pub(crate) fn new(setup: SinkSetup) -> ModernSink {
        let backlog = Backlog {
            bytes: Cell::new(0),
            share: (setup.pending_max / crate::config::UNWRITTEN_SHARE_DIVISOR).max(1),
            max: setup.pending_max,
            dropped: Cell::new(0),
            closed: Cell::new(false),
            room: Signal::default(),
        };
        ModernSink {
            events: RefCell::new(Vec::new()),
            recorded: setup
                .record
                .map(|limit| RefCell::new(Recorded { events: Vec::new(), bytes: 0, limit })),
            backlog: Rc::new(backlog),
            progress_token: setup.progress_token,
            log_level: setup.log_level,
            client_capabilities: setup.client_capabilities,
            answers: setup.answers,
            used: RefCell::new(serde_json::Map::new()),
            needed: RefCell::new(serde_json::Map::new()),
            next_input: Cell::new(0),
            input_requests_max: setup.input_requests_max,
            wake: Signal::default(),
            cancelled: Cell::new(false),
            cancel_signal: Rc::new(Signal::default()),
        }
    }

    fn push(&self, message: Vec<u8>) {
        if self.cancelled.get() {
            return;
        }
        let message = Bytes::from(message);
        match &self.recorded {
            Some(recorded) => {
                let mut r = recorded.borrow_mut();
                let own_fits = r.bytes + message.len() <= r.limit.max;
                if !own_fits || !r.limit.core.try_take(message.len()) {
                    r.limit.core.metrics.keyed_events_dropped_total.inc();
                    return;
                }
                r.bytes += message.len();
                r.events.push(message);
            }
            None => {
                let backlog = &self.backlog;
                let bytes = backlog.bytes.get() + message.len();
                if bytes > backlog.max {
                    // A producer that did not wait for room (`CallSink::room`) overran it.
                    backlog.dropped.set(backlog.dropped.get() + 1);
                    return;
                }
                backlog.bytes.set(bytes);
                self.events.borrow_mut().push(message);
            }
        }
        self.wake.notify_all();
    }

    /// A notification of `bytes` bytes, as a provider's would be pushed (tests of the budgets).
    #[cfg(test)]
    pub(crate) fn push_for_test(&self, bytes: usize) {
        self.push(vec![b'x'; bytes]);
    }

    /// Moves the pending events, SSE-framed, into `frames`; true when there were some. A
    /// producer paused for room is woken.
    pub(crate) fn take_frames(&self, frames: &mut Vec<u8>) -> bool {
        let mut events = self.events.borrow_mut();
        for event in events.iter() {
            crate::wire::sse::push_event(frames, None, None, event);
        }
        let any = !events.is_empty();
        events.clear();
        self.backlog.bytes.set(0);
        self.backlog.room.notify_all();
        any
    }

    /// Notifications dropped past the backlog's bound since the last call (for the metric).
    pub(crate) fn take_dropped(&self) -> u64 {
        self.backlog.dropped.replace(0)
    }

    /// A keyed call's notifications from position `from` on (appended to `into`).
    pub(crate) fn recorded_from(&self, from: usize, into: &mut Vec<Bytes>) {
        if let Some(recorded) = &self.recorded {
            into.extend(recorded.borrow().events.iter().skip(from).cloned());
        }
    }

    /// True when events wait to be written.
    pub(crate) fn has_events(&self) -> bool {
        !self.events.borrow().is_empty()
    }

    /// True when the work waits for client input.
    pub(crate) fn input_needed(&self) -> bool {
        !self.needed.borrow().is_empty()
    }

    /// Marks the call cancelled (its stream closed): providers see `cx.cancelled()`.
    pub(crate) fn cancel(&self) {
        if !self.cancelled.replace(true) {
            self.cancel_signal.notify_all();
        }
        self.close_backlog();
    }

    /// Nothing more of this sink's backlog will be written (the call was cancelled, or became a
    /// task whose notifications go nowhere): a producer paused for room goes on.
    pub(crate) fn close_backlog(&self) {
        self.backlog.closed.set(true);
        self.backlog.room.notify_all();
    }

    /// The `InputRequiredResult` for the input the work waits for.
    fn input_required(&self, binding: &str, ttl: Duration) -> Value {
        let request_state = state::seal(binding, &self.used.borrow(), ttl);
        serde_json::json!({
            "resultType": "input_required",
            "inputRequests": Value::Object(self.needed.borrow().clone()),
            "requestState": request_state,
        })
    }
}

/// The sink's side of `CallContext::input`: an answer the client already gave, or a new entry
/// of the next `InputRequiredResult` (the future then never completes: the driver ends the
/// round and drops the work).
fn input(
    sink: &ModernSink,
    key: &str,
    method: &str,
    params: Value,
) -> LocalBoxFuture<'static, ProviderResult<Value>> {
    if let Some(answer) = sink.answers.get(key) {
        let result = match answer {
            Value::Object(_) => {
                sink.used.borrow_mut().insert(key.to_owned(), answer.clone());
                Ok(answer.clone())
            }
            _ => Err(ProviderError::InvalidParams(format!(
                "inputResponses[\"{key}\"] must be an object (the client's result for {method})"
            ))),
        };
        return Box::pin(std::future::ready(result));
    }
    if !meta::client_can(&sink.client_capabilities, method) {
        let capability = meta::capability_of(method).unwrap_or("unknown");
        let mut required = serde_json::Map::new();
        required.insert(capability.to_owned(), serde_json::json!({}));
        let error = ProviderError::Rpc {
            code: Code::MissingCapability.value(),
            message: format!("this request needs the client capability `{capability}` ({method})"),
            data: Some(serde_json::json!({ "requiredCapabilities": required })),
        };
        return Box::pin(std::future::ready(Err(error)));
    }
    if sink.needed.borrow().len() >= sink.input_requests_max {
        return Box::pin(std::future::ready(Err(ProviderError::too_many_client_requests())));
    }
    let request = serde_json::json!({ "method": method, "params": params });
    sink.needed.borrow_mut().insert(key.to_owned(), request);
    sink.wake.notify_all();
    Box::pin(std::future::pending())
}

impl CallSink for ModernSink {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else { return };
        let payload = crate::wire::notification::progress_payload(token, progress, total, message);
        self.push(payload);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if self.log_level.is_none_or(|min| level < min) {
            return;
        }
        let params = crate::wire::notification::log_params(level.as_str(), logger, data);
        let params = serde_json::to_vec(&params).unwrap_or_else(|_| b"{}".to_vec());
        let mut payload = Vec::with_capacity(64 + params.len());
        jsonrpc::push_notification(&mut payload, "notifications/message", &params);
        self.push(payload);
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        let n = self.next_input.get() + 1;
        self.next_input.set(n);
        input(self, &format!("input_{n}"), method, params)
    }

    fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        input(self, key, method, params)
    }

    fn carry(&self, key: &str, value: Value) {
        self.used.borrow_mut().insert(key.to_owned(), value);
    }

    fn carried(&self, key: &str) -> Option<Value> {
        // Only a sealed state holds such a key (`input_round` drops it from inputResponses).
        self.answers.get(key).filter(|_| key.starts_with(crate::provider::CARRIED_PREFIX)).cloned()
    }

    fn client_supports(&self, method: &str) -> bool {
        meta::client_can(&self.client_capabilities, method)
    }

    /// SEP-1699 polling does not exist in this revision: a closed stream would cancel the call.
    fn close_connection(&self) {}

    fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }

    fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
        if self.cancelled.get() {
            return Box::pin(std::future::ready(()));
        }
        let signal = self.cancel_signal.clone();
        Box::pin(async move { signal.notified().await })
    }

    /// A keyed call's record is bounded on its own (`Recorded`) and read by observers at their
    /// own pace: it has room always; an unkeyed call while its backlog is below its share.
    fn has_room(&self) -> bool {
        self.recorded.is_some() || self.backlog.has_room()
    }

    fn room(&self) -> LocalBoxFuture<'static, ()> {
        if self.has_room() {
            return Box::pin(std::future::ready(()));
        }
        let backlog = self.backlog.clone();
        Box::pin(async move {
            // Single-core: nothing changes between the check and the wait's registration.
            while !backlog.has_room() {
                backlog.room.notified().await;
            }
        })
    }
}

/// A running call the connection drives.
pub(crate) struct CallJob {
    pub id: RawId,
    pub sink: Rc<ModernSink>,
    work: LocalBoxFuture<'static, ProviderResult<Value>>,
    /// The work's outcome once it finished (the work is not polled again).
    outcome: Option<ProviderResult<Value>>,
    /// What the next `requestState` is bound to (method, name, arguments).
    binding: state::Binding,
    state_ttl: Duration,
    done: bool,
}

impl CallJob {
    pub(crate) fn new(
        id: RawId,
        sink: Rc<ModernSink>,
        work: LocalBoxFuture<'static, ProviderResult<Value>>,
        binding: state::Binding,
        state_ttl: Duration,
    ) -> CallJob {
        CallJob { id, sink, work, outcome: None, binding, state_ttl, done: false }
    }

    /// Polls the work once, in the caller's task (so its wakers wake the caller).
    pub(crate) async fn poll_once(&mut self) {
        if self.outcome.is_some() {
            return;
        }
        let work = &mut self.work;
        let polled = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match work.as_mut().poll(cx) {
                std::task::Poll::Ready(result) => Some(result),
                std::task::Poll::Pending => None,
            })
        })
        .await;
        self.outcome = polled;
    }

    /// Runs the work until it finishes or asks for input (for a driver that waits on it).
    pub(crate) async fn settle(&mut self) {
        if self.is_settled() {
            return;
        }
        let (work, sink) = (&mut self.work, &self.sink);
        let result = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
            std::task::Poll::Ready(result) => std::task::Poll::Ready(Some(result)),
            std::task::Poll::Pending if sink.input_needed() => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        })
        .await;
        self.outcome = result;
    }

    /// Ends the work with `error` instead of its outcome (a keyed call past
    /// `--keyed-call-max-secs`): the call is cancelled, the work dropped unpolled.
    pub(crate) fn give_up(&mut self, error: ProviderError) {
        self.sink.cancel();
        self.work = Box::pin(std::future::pending());
        self.outcome = Some(Err(error));
    }

    /// True once the work returned (not merely waiting for input).
    pub(crate) fn has_outcome(&self) -> bool {
        self.outcome.is_some()
    }

    /// Finished, or waiting for client input (which ends this round).
    pub(crate) fn is_settled(&self) -> bool {
        self.outcome.is_some() || self.sink.input_needed()
    }

    /// The final answer's body (into `body`) and HTTP status: the work's result (or error),
    /// or, when it waits for input, the `InputRequiredResult`.
    pub(crate) fn finish(&mut self, body: &mut Vec<u8>) -> Status {
        self.done = true;
        if self.outcome.is_none() && self.sink.input_needed() {
            let result = self.sink.input_required(&self.binding, self.state_ttl);
            crate::wire::push_result_value(body, &self.id, &result);
            return Status::Ok;
        }
        let outcome = self.outcome.take().unwrap_or(Err(ProviderError::Cancelled));
        render_outcome(&self.id, outcome, body)
    }
}

/// A provider's outcome as a modern response: a result gets `resultType: "complete"` (MCP
/// 2026-07-28 puts it on every result); a missing client capability is HTTP 400.
pub(crate) fn render_outcome(
    id: &RawId,
    outcome: ProviderResult<Value>,
    body: &mut Vec<u8>,
) -> Status {
    match outcome {
        Ok(Value::Object(mut result)) => {
            result.entry("resultType").or_insert_with(|| Value::from("complete"));
            crate::wire::push_result_value(body, id, &Value::Object(result));
            Status::Ok
        }
        Ok(other) => {
            crate::wire::push_result_value(body, id, &other);
            Status::Ok
        }
        Err(e) => {
            crate::dispatch::push_provider_error(body, id, &e);
            match e {
                ProviderError::Rpc { code, .. } if code == Code::MissingCapability.value() => {
                    Status::BadRequest
                }
                _ => Status::Ok,
            }
        }
    }
}

/// A built-in instant tool's outcome as a modern response: `render_outcome`'s bytes, a text
/// answer written without a result value (issue 40 §1), `complete` (the `resultType` member
/// `render_outcome` adds) written into it.
pub(crate) fn render_answer(
    id: &RawId,
    outcome: ProviderResult<ToolAnswer<'_>>,
    complete: &str,
    body: &mut Vec<u8>,
) -> Status {
    match outcome {
        Ok(ToolAnswer::Value(value)) => render_outcome(id, Ok(value), body),
        Ok(json @ ToolAnswer::Json(_)) => render_outcome(id, Ok(json.into_value()), body),
        Ok(answer) => {
            crate::wire::push_result_with(body, id, |out| {
                answer.push_text_json(out, complete);
                Ok::<(), ()>(())
            });
            Status::Ok
        }
        Err(e) => render_outcome(id, Err(e), body),
    }
}

impl Drop for CallJob {
    fn drop(&mut self) {
        // Dropped before it finished: the client closed the stream (or the server drains).
        // The cancel signal fires before the work itself is dropped (fields drop after this).
        if !self.done {
            self.sink.cancel();
        }
    }
}

/// A call as the response stream a connection drives (`runtime::stream`): its events as an
/// SSE stream opened at the first one, its final answer as the last event, or, when nothing
/// was streamed, as a whole JSON response with its own status. The head is rendered here,
/// once it is known, and shared with a listed origin (`shared_with`, set by `endpoint`).
/// A peer that closes the connection cancels the call: the driver returns, the `CallJob` is
/// dropped, which fires the call's cancel signal and drops its work; nothing more is written.
pub(crate) struct CallStream {
    job: CallJob,
    keep_alive: bool,
    /// The index in `--allowed-origin`'s list of the origin the head is shared with.
    pub(crate) shared_with: Option<usize>,
    /// True once the SSE head is in the output.
    streaming: bool,
    /// True once the stream's end is in the output: a peer gone after it cancels nothing.
    over: bool,
}

impl CallStream {
    pub(crate) fn new(job: CallJob, keep_alive: bool) -> CallStream {
        CallStream { job, keep_alive, shared_with: None, streaming: false, over: false }
    }
}

/// The listed origin at `index` (`--allowed-origin`), for a head rendered late.
pub(crate) fn origin(core: &Core, index: Option<usize>) -> Option<&str> {
    index.and_then(|i| core.cfg.http.allowed_origins.get(i)).map(String::as_str)
}

impl Source for CallStream {
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step {
        let shared_with = origin(core, self.shared_with);
        core.metrics.modern_notifications_dropped_total.add(self.job.sink.take_dropped());
        if self.job.sink.take_frames(frames) {
            if !self.streaming {
                Answer::SseHeadStateless.render_shared(out, true, shared_with);
                self.streaming = true;
            }
            sse::push_chunk(out, frames);
        }
        if !self.job.is_settled() {
            return Step::Open;
        }
        let mut body = Vec::with_capacity(256);
        let status = self.job.finish(&mut body);
        let (streaming, keep_alive) = (self.streaming, self.keep_alive);
        FinalAnswer { status, body: &body, streaming, keep_alive, shared_with }.render(out, frames);
        self.over = true;
        Step::Ended { reusable: keep_alive }
    }

    fn wake(&mut self) -> impl Future<Output = ()> + '_ {
        let sink = self.job.sink.clone();
        let job = &mut self.job;
        async move {
            let woke = sink.wake.notified();
            monoio::select! {
                _ = job.settle() => {}
                _ = woke => {}
            }
        }
    }

    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::once_streaming(self.streaming)
    }

    fn first_write_hold(&self, core: &Core) -> Option<Duration> {
        // A call that did not answer in its first poll (a bridged echo) has nothing to write
        // until it answers: waiting for it here first means a quick answer is written without
        // the stream's peer-watch poll armed and cancelled before it. A closed stream is then
        // seen (and the call cancelled) at most the hold later.
        let hold = core.cfg.sessions.sse_first_write_hold;
        let idle = !self.streaming && !self.job.is_settled() && !self.job.sink.has_events();
        (idle && !hold.is_zero()).then_some(hold)
    }

    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, _frames: &mut Vec<u8>) {
        // The server stops: the call is cancelled (dropped) and its stream ends; a 2026-07-28
        // client re-issues the request elsewhere.
        let shared_with = origin(core, self.shared_with);
        end_for_drain(out, self.streaming, &self.job.id, shared_with);
        core.metrics.drain_streams_ended.inc();
        self.over = true;
    }

    fn sent(&mut self, _core: &Core) {}

    fn gone(&mut self, core: &Core) {
        if !self.over {
            core.metrics.modern_cancelled_total.inc();
        }
    }
}

/// The last answer of a 2026-07-28 request: the final event and the end of an SSE stream, or,
/// when nothing was streamed, the whole JSON response with its status.
pub(crate) struct FinalAnswer<'a> {
    pub status: Status,
    pub body: &'a [u8],
    pub streaming: bool,
    pub keep_alive: bool,
    pub shared_with: Option<&'a str>,
}

impl FinalAnswer<'_> {
    pub(crate) fn render(&self, out: &mut Vec<u8>, frames: &mut Vec<u8>) {
        if self.streaming {
            frames.clear();
            sse::push_event(frames, None, None, self.body);
            sse::push_chunk(out, frames);
            out.extend_from_slice(sse::CHUNK_END);
        } else {
            let answer = Answer::JsonStatus { status: self.status, body: self.body };
            answer.render_shared(out, self.keep_alive, self.shared_with);
        }
    }
}

/// The drain's end reached a 2026-07-28 request: its stream ends (nothing to resume in this
/// revision: the client re-issues it), or, when nothing was streamed yet, 503 + Retry-After.
pub(crate) fn end_for_drain(
    out: &mut Vec<u8>,
    streaming: bool,
    id: &RawId,
    shared_with: Option<&str>,
) {
    if streaming {
        out.extend_from_slice(sse::CHUNK_END);
    } else {
        let answer = Answer::Refused { refusal: Refusal::Draining, id: Some(id) };
        answer.render_shared(out, false, shared_with);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_answer_has_the_bytes_of_the_value_path() {
        const COMPLETE: &str = "\"resultType\":\"complete\"";
        // Goal: issue 40 §1 writes a built-in text answer without a value; the response must
        // be the one `render_outcome` gives for its value (resultType included). Method: both
        // renderings of texts and a count, and of an error.
        let id = RawId::new("\"a\\\"b\"");
        let answers = [
            ToolAnswer::Text("héllo \"x\"\n".into()),
            ToolAnswer::Text("".into()),
            ToolAnswer::Count(42),
        ];
        for answer in answers {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let value = match &answer {
                ToolAnswer::Text(t) => ToolAnswer::Text(t.clone()).into_value(),
                ToolAnswer::Count(n) => ToolAnswer::Count(*n).into_value(),
                ToolAnswer::Value(v) => v.clone(),
                ToolAnswer::Json(_) => unreachable!("no JSON text among the answers"),
            };
            assert_eq!(render_answer(&id, Ok(answer), COMPLETE, &mut fast), Status::Ok);
            assert_eq!(render_outcome(&id, Ok(value), &mut slow), Status::Ok);
            assert_eq!(String::from_utf8(fast), String::from_utf8(slow));
        }
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        render_answer(&id, Err(ProviderError::InvalidParams("x".into())), COMPLETE, &mut fast);
        render_outcome(&id, Err(ProviderError::InvalidParams("x".into())), &mut slow);
        assert_eq!(fast, slow);
    }

    #[test]
    fn one_round_holds_at_most_the_pending_limit_of_input_requests() {
        // Goal: `--max-pending-client-requests` bounds one 2026-07-28 round's inputRequests as
        // it bounds a legacy session's pending requests. Method: a sink with a limit of 2.
        let sink = ModernSink::new(SinkSetup {
            progress_token: None,
            log_level: None,
            client_capabilities: serde_json::json!({ "roots": {} }),
            answers: serde_json::Map::new(),
            record: None,
            input_requests_max: 2,
            pending_max: 1024,
        });
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        for _ in 0..2 {
            let mut waiting = sink.request("roots/list", Value::Null);
            assert!(waiting.as_mut().poll(&mut cx).is_pending(), "within the limit: waits");
        }
        let mut past = sink.request("roots/list", Value::Null);
        let std::task::Poll::Ready(Err(e)) = past.as_mut().poll(&mut cx) else {
            panic!("past the limit: fails at once")
        };
        assert_eq!(e, ProviderError::too_many_client_requests());
        assert_eq!(sink.needed.borrow().len(), 2);
    }

    fn sink(pending_max: usize) -> ModernSink {
        ModernSink::new(SinkSetup {
            progress_token: Some("1".into()),
            log_level: None,
            client_capabilities: serde_json::json!({}),
            answers: serde_json::Map::new(),
            record: None,
            pending_max,
            input_requests_max: 1,
        })
    }

    #[test]
    fn an_unkeyed_backlog_pauses_at_its_share_and_drops_past_its_bound() {
        // Goal: issue 17 item 7 on the 2026-07-28 path: an unkeyed call's unwritten
        // notifications leave room below half of `pending_max`, none at it, room again once
        // the writer took them; past `pending_max` a notification is dropped and counted; a
        // cancelled call has room (nothing will write its backlog). Method: drive the sink.
        let sink = sink(1000);
        let message = |n: usize| {
            let mut m = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}".to_vec();
            m.resize(n, b' ');
            m
        };
        sink.push(message(499));
        assert!(sink.has_room(), "499 of a 500-byte share: room");
        sink.push(message(1));
        assert!(!sink.has_room(), "500: no room");
        sink.push(message(500));
        assert_eq!(sink.take_dropped(), 0, "1000 bytes fit the bound");
        sink.push(message(32));
        assert_eq!(sink.take_dropped(), 1, "past the bound: dropped, counted once");
        let mut frames = Vec::new();
        assert!(sink.take_frames(&mut frames));
        assert!(sink.has_room(), "written: room again");
        sink.push(message(900));
        assert!(!sink.has_room());
        sink.cancel();
        assert!(sink.has_room(), "cancelled: nothing waits");
    }
}
