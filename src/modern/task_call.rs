//! The tasks extension on the 2026-07-28 path (`io.modelcontextprotocol/tasks`, SEP-2663): a
//! `tools/call` that becomes a task, and the methods `tasks/get`, `tasks/update`,
//! `tasks/cancel`.
//!
//! When a call becomes a task: its tool supports tasks (`Provider::task_support`), the request
//! declares the extension in its own `clientCapabilities` (SEP-2663: the per-request
//! declaration is the only handshake), and the call first waits for something other than
//! client input. Until then it is an ordinary call: one that finishes at once answers with its
//! result (SEP-2663's immediate-result shortcut) and one that asks the client first answers with
//! an MRTR `InputRequiredResult` (the composition SEP-2663 describes: MRTR rounds synchronously,
//! then the task). At that wait the task is created — so `tasks/get` resolves before the client
//! hears of it — and the request answers with the `CreateTaskResult`, while the call goes on in
//! a monoio task of its own on this core, detached from the connection (a closed stream no
//! longer cancels it; `tasks/cancel` does). From then on the call's input requests become the
//! task's `inputRequests`, answered by `tasks/update`, and its progress and log messages are
//! dropped (SEP-2663 has no channel for them).
//!
//! Tasks live on the core that created them (`tasks`); a `tasks/*` request on another core is
//! handed to the owner by its `Mcp-Name` header (the task id, SEP-2663 §Routing Headers) before
//! its body is decoded (`endpoint::owner` reads it, in the layout of `wire::owned_id`, and
//! decides every request's core; decoding works in place, so a hand-off must come first). The task outranks an
//! `Idempotency-Key`: a keyed `tasks/*` request is served on the task's core, and that costs it
//! nothing, since `tasks/*` requests take no key record (only `tools/call` keeps one, in
//! `keyed`): the key of a `tasks/get`, `tasks/update` or `tasks/cancel` is ignored (all three
//! are safe to repeat: a read, answers delivered once, a cancel that settles once).
//!
//! Owns: `admission` (which calls may become tasks, and the -32021 refusal of a
//! task-only tool), `TaskSink`, `augment`, `serve` (the three methods). Called by `modern`.
//! Never: decides a task's state (`tasks` does), or touches a socket.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

use simd_json::prelude::*;

use super::core::ModernCore;
use crate::core::Answered;
use crate::core::{reply, Request};
use crate::provider::{
    CallSink, LocalBoxFuture, LogLevel, ProviderError, ProviderResult, TaskSupport, Value,
};
use crate::wire::jsonrpc::RawId;
use crate::wire::{Answer, Code, WireValue};

use super::call::ModernSink;
use super::meta::MetaError;
use super::tasks::{self, TaskError, TaskHandle};

/// Whether a `tools/call` of a tool with `support` may become a task for a request whose
/// `_meta` declares `client_capabilities`: `Err` (-32021, HTTP 400, the extension named in
/// `data.requiredCapabilities`) for a task-only tool and a request without the extension,
/// checked before the tool runs.
pub(crate) fn admission(
    support: TaskSupport,
    client_capabilities: &Value,
) -> Result<bool, MetaError> {
    let declared = tasks::declared(Some(client_capabilities));
    match (support, declared) {
        (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => Ok(false),
        (TaskSupport::Optional | TaskSupport::Required, true) => Ok(true),
        (TaskSupport::Required, false) => {
            Err(missing_extension("this tool runs only as a task: declare the tasks extension"))
        }
    }
}

/// Adds the extension to `server/discover`'s capabilities, under `extensions` (SEP-2663; never
/// a `tasks` member, the 2025-11-25 form).
pub(crate) fn advertise(capabilities: &mut Value) {
    let Some(capabilities) = capabilities.as_object_mut() else { return };
    let extensions = capabilities.entry("extensions").or_insert_with(|| serde_json::json!({}));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(tasks::EXTENSION_ID.into(), serde_json::json!({}));
    }
}

/// -32021 naming the extension.
fn missing_extension(message: &str) -> MetaError {
    MetaError {
        code: Code::MissingCapability,
        message: format!("{message} ({})", tasks::EXTENSION_ID),
        data: Some(tasks::missing_capability_data().to_string()),
    }
}

/// The `CallSink` of a call that may become a task: the request's `ModernSink` until then,
/// the task afterwards.
pub(crate) struct TaskSink {
    call: Rc<ModernSink>,
    /// `Some` once the call became a task.
    task: RefCell<Option<TaskHandle>>,
}

impl TaskSink {
    pub(crate) fn new(call: Rc<ModernSink>) -> Rc<TaskSink> {
        Rc::new(TaskSink { call, task: RefCell::new(None) })
    }

    fn task(&self) -> Option<TaskHandle> {
        self.task.borrow().clone()
    }

    /// An input request of the task: an `inputRequests` entry until `tasks/update` answers it.
    fn task_input(
        &self,
        task: &TaskHandle,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        match task.request_input(method, params) {
            Ok(wait) => Box::pin(async move { wait.await.map_err(provider_error) }),
            Err(e) => Box::pin(std::future::ready(Err(provider_error(e)))),
        }
    }
}

/// A task's refusal as the tool sees it.
fn provider_error(e: TaskError) -> ProviderError {
    match e {
        TaskError::Cancelled => ProviderError::Cancelled,
        TaskError::NotFound
        | TaskError::Misrouted
        | TaskError::Full
        | TaskError::Random
        | TaskError::TooManyInputRequests => ProviderError::Internal(e.to_string()),
    }
}

impl CallSink for TaskSink {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if self.task.borrow().is_none() {
            self.call.progress(progress, total, message);
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if self.task.borrow().is_none() {
            self.call.log(level, logger, data);
        }
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        match self.task() {
            // The request's sink refuses what the client did not declare (-32021).
            Some(task) if self.call.client_supports(method) => {
                self.task_input(&task, method, params)
            }
            _ => self.call.request(method, params),
        }
    }

    fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        // A task mints its own keys (unique over its life; SEP-2663 scopes them to the task,
        // apart from the MRTR phase's).
        match self.task() {
            Some(task) if self.call.client_supports(method) => {
                self.task_input(&task, method, params)
            }
            _ => self.call.input(key, method, params),
        }
    }

    fn client_supports(&self, method: &str) -> bool {
        self.call.client_supports(method)
    }

    fn close_connection(&self) {}

    fn is_cancelled(&self) -> bool {
        match self.task() {
            Some(task) => task.is_cancelled(),
            None => self.call.is_cancelled(),
        }
    }

    fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
        match self.task() {
            Some(task) => Box::pin(task.cancelled()),
            None => self.call.cancelled(),
        }
    }

    /// A task's notifications are dropped, so it always has room; before, the request's.
    fn has_room(&self) -> bool {
        self.task.borrow().is_some() || self.call.has_room()
    }

    fn room(&self) -> LocalBoxFuture<'static, ()> {
        self.call.room()
    }
}

/// The sink of a call's `CallContext`: `task_sink` when the call may become a task, else the
/// request's own.
pub(crate) fn call_sink(
    call: &Rc<ModernSink>,
    task_sink: &Option<Rc<TaskSink>>,
) -> Rc<dyn CallSink> {
    match task_sink {
        Some(task_sink) => task_sink.clone(),
        None => call.clone(),
    }
}

/// The work of a call, unchanged unless it may become a task (`task_sink`; see the module
/// doc). Then `work` runs in a task of
/// its own on this core from its first poll — monoio's timers keep the waker of their first
/// poll, so a future must not change tasks once polled — and the returned future, which the
/// request's driver polls, is its answer: the work's outcome when it finishes in the request,
/// nothing while it waits for MRTR input (the driver ends the round), or the
/// `CreateTaskResult` once it became a task. Dropping the returned future before then (the
/// client closed the stream, or the MRTR round ended) drops the work. When the core holds
/// `--max-tasks-per-core` tasks the call simply goes on in its request.
pub(crate) fn augment(
    core: &Rc<ModernCore>,
    owner: Option<&str>,
    task_sink: Option<Rc<TaskSink>>,
    work: LocalBoxFuture<'static, ProviderResult<Value>>,
) -> LocalBoxFuture<'static, ProviderResult<Value>> {
    let Some(sink) = task_sink else { return work };
    let core = core.clone();
    let handover = Rc::new(Handover::default());
    let owner = owner.map(Box::from);
    monoio::spawn(run(core, owner, sink, work, handover.clone()));
    Box::pin(CallAnswer { handover })
}

/// Between a call's work (in its own task) and the request that waits for its answer.
#[derive(Default)]
struct Handover {
    /// The request's answer, once there is one (taken by the request).
    answer: RefCell<Option<ProviderResult<Value>>>,
    /// The request's driver, to wake when the answer is there or input is needed.
    request: RefCell<Option<Waker>>,
    /// The request went away before the call became a task: drop the work.
    abandoned: Cell<bool>,
    /// The work's task, to wake when the request goes away.
    runner: RefCell<Option<Waker>>,
}

impl Handover {
    fn wake_request(&self) {
        if let Some(waker) = self.request.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// Where the work stands in the request.
enum InRequest {
    Finished(ProviderResult<Value>),
    /// It waits for client input: the request answers with an `InputRequiredResult`.
    InputNeeded,
    /// The request went away.
    Abandoned,
    /// It became this task.
    Task(TaskHandle),
}

/// The work's own task: in the request until it finishes, needs input, or first waits for
/// anything else (then it becomes a task and runs to its end through `tasks::drive`).
async fn run(
    core: Rc<ModernCore>,
    owner: Option<Box<str>>,
    sink: Rc<TaskSink>,
    mut work: LocalBoxFuture<'static, ProviderResult<Value>>,
    handover: Rc<Handover>,
) {
    let mut synchronous = false;
    let state = poll_fn(|cx| {
        if handover.abandoned.get() {
            return Poll::Ready(InRequest::Abandoned);
        }
        if let Poll::Ready(outcome) = work.as_mut().poll(cx) {
            return Poll::Ready(InRequest::Finished(outcome));
        }
        if sink.call.input_needed() {
            return Poll::Ready(InRequest::InputNeeded);
        }
        if !synchronous {
            match core.tasks.create(owner.as_deref(), Instant::now()) {
                Ok(handle) => return Poll::Ready(InRequest::Task(handle)),
                Err(e) => {
                    tracing::debug!(error = %e, "call goes on in its request");
                    synchronous = true;
                }
            }
        }
        *handover.runner.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    })
    .await;
    match state {
        InRequest::Finished(outcome) => {
            *handover.answer.borrow_mut() = Some(outcome);
            handover.wake_request();
        }
        InRequest::InputNeeded => handover.wake_request(),
        InRequest::Abandoned => {}
        InRequest::Task(handle) => {
            *sink.task.borrow_mut() = Some(handle.clone());
            // The request's stream ends with the task's creation: a producer paused on its
            // backlog must not wait for a writer that is gone.
            sink.call.close_backlog();
            *handover.answer.borrow_mut() = Some(Ok(handle.create_result()));
            handover.wake_request();
            tasks::drive(handle, async move { task_outcome(work.await) }).await;
        }
    }
}

/// The request's side of `augment`.
struct CallAnswer {
    handover: Rc<Handover>,
}

impl std::future::Future for CallAnswer {
    type Output = ProviderResult<Value>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        if let Some(answer) = self.handover.answer.borrow_mut().take() {
            return Poll::Ready(answer);
        }
        *self.handover.request.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for CallAnswer {
    fn drop(&mut self) {
        self.handover.abandoned.set(true);
        if let Some(waker) = self.handover.runner.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// A finished call as its task stores it: the result exactly as the request would have
/// answered it (with `resultType: "complete"`), or its JSON-RPC error.
fn task_outcome(outcome: ProviderResult<Value>) -> Result<Value, Value> {
    match outcome {
        Ok(Value::Object(mut result)) => {
            result.entry("resultType").or_insert_with(|| Value::from("complete"));
            Ok(Value::Object(result))
        }
        Ok(other) => Ok(other),
        Err(e) => {
            let (code, message, data) = crate::dispatch::provider_error_parts(&e);
            Err(crate::wire::error_object(code, message, data.cloned()))
        }
    }
}

/// With `--durable`, before `serve`: a `tasks/get` of a task this core does not hold is asked
/// of the store (`durable::recover_task`); `Some` when the store answered it (or is busy: 503 +
/// `Retry-After`), `None` to go on with `serve` (which answers the rest, not found included).
pub(crate) async fn recovered(
    core: &ModernCore,
    req: &Request<'_>,
    id: &RawId,
    method: &str,
    params: &WireValue<'_>,
    client_capabilities: &Value,
    out: &mut Vec<u8>,
) -> Option<Answered> {
    if core.reader.is_none() || method != "tasks/get" || !tasks::declared(Some(client_capabilities))
    {
        return None;
    }
    let task_id = params.get("taskId").and_then(ValueIntoString::into_string)?;
    if core.tasks.holds(req.subject(), task_id, Instant::now()) {
        return None;
    }
    let keep_alive = req.head.keep_alive;
    let misses = (&core.task_misses, &core.miss_keys);
    match super::durable::recover_task(core, misses, req.subject(), task_id).await? {
        Ok(detailed) => {
            let mut body = Vec::with_capacity(256);
            crate::wire::push_result_value(&mut body, id, &detailed);
            Some(reply(out, Answer::Json(&body), keep_alive))
        }
        Err(()) => {
            Some(crate::core::refuse(out, crate::wire::Refusal::Unavailable, Some(id), keep_alive))
        }
    }
}

/// `tasks/get`, `tasks/update` or `tasks/cancel` (headers and `_meta` already checked): -32021
/// without the extension, -32602 for a bad or unknown `taskId` or bad `inputResponses`; else
/// the `DetailedTask`, or the empty ack (`{"resultType":"complete"}`).
pub(crate) fn serve(
    core: &ModernCore,
    req: &Request<'_>,
    id: &RawId,
    method: &str,
    params: &WireValue<'_>,
    client_capabilities: &Value,
    out: &mut Vec<u8>,
) -> Answered {
    let (owner, keep_alive) = (req.subject(), req.head.keep_alive);
    if !tasks::declared(Some(client_capabilities)) {
        let e = missing_extension(&format!("{method} needs the tasks extension"));
        return e.refuse(out, id, keep_alive);
    }
    let Some(task_id) = params.get("taskId").and_then(ValueIntoString::into_string) else {
        return error(out, id, Code::InvalidParams, "params.taskId must be a string", keep_alive);
    };
    let now = Instant::now();
    let answered = match method {
        "tasks/get" => core.tasks.get(owner, task_id, now),
        "tasks/update" => {
            let responses = match input_responses(params) {
                Ok(responses) => responses,
                Err(message) => return error(out, id, Code::InvalidParams, message, keep_alive),
            };
            core.tasks.update(owner, task_id, &responses, now).map(|()| ack())
        }
        _ => core.tasks.cancel(owner, task_id, now).map(|()| ack()),
    };
    match answered {
        Ok(result) => {
            let mut body = Vec::with_capacity(256);
            crate::wire::push_result_value(&mut body, id, &result);
            reply(out, Answer::Json(&body), keep_alive)
        }
        Err(e @ (TaskError::NotFound | TaskError::Misrouted)) => {
            error(out, id, Code::InvalidParams, &format!("{e}: {task_id}"), keep_alive)
        }
        Err(e) => error(out, id, Code::InternalError, &e.to_string(), keep_alive),
    }
}

/// `tasks/update`'s `inputResponses`: an object of objects (each the client's result for one
/// input request).
fn input_responses(params: &WireValue<'_>) -> Result<serde_json::Map<String, Value>, &'static str> {
    match params.get("inputResponses").map(crate::dispatch::into_public) {
        Some(Value::Object(responses)) if responses.values().all(Value::is_object) => Ok(responses),
        Some(Value::Object(_)) => Err("each inputResponses value must be an object"),
        _ => Err("params.inputResponses must be an object"),
    }
}

/// The acknowledgement of `tasks/update` and `tasks/cancel`: an empty result.
fn ack() -> Value {
    serde_json::json!({ "resultType": "complete" })
}

/// A JSON-RPC error answer (the modern path's one form).
fn error(out: &mut Vec<u8>, id: &RawId, code: Code, message: &str, keep_alive: bool) -> Answered {
    crate::core::reply_error(out, id, code, message, keep_alive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_task_only_tools_are_refused_to_clients_without_the_extension() {
        // Goal: the admission table of SEP-2663 §Capability Negotiation (tasks-capability-
        // negotiation, tasks-required-task-error). Method: every support × declaration.
        let with = json!({ "extensions": { tasks::EXTENSION_ID: {} } });
        let without = json!({ "elicitation": {} });
        assert_eq!(admission(TaskSupport::Forbidden, &with), Ok(false));
        assert_eq!(admission(TaskSupport::Forbidden, &without), Ok(false));
        assert_eq!(admission(TaskSupport::Optional, &with), Ok(true));
        assert_eq!(admission(TaskSupport::Optional, &without), Ok(false));
        assert_eq!(admission(TaskSupport::Required, &with), Ok(true));
        let refused = admission(TaskSupport::Required, &without).expect_err("-32021");
        assert_eq!(refused.code.value(), -32021);
        let data: Value =
            serde_json::from_str(refused.data.as_deref().expect("data")).expect("json");
        assert_eq!(data["requiredCapabilities"]["extensions"][tasks::EXTENSION_ID], json!({}));
    }

    #[test]
    fn a_finished_call_is_stored_as_the_request_would_have_answered() {
        // Goal: completed results carry resultType complete (isError ones too), errors become
        // JSON-RPC error objects with the wire's codes. Method: map each outcome.
        let ok = task_outcome(Ok(json!({ "content": [], "isError": true })));
        assert_eq!(ok, Ok(json!({ "content": [], "isError": true, "resultType": "complete" })));
        let failed = task_outcome(Err(ProviderError::Internal("boom".into())));
        assert_eq!(failed, Err(json!({ "code": -32603, "message": "boom" })));
        let rpc = ProviderError::Rpc { code: -32021, message: "m".into(), data: Some(json!(1)) };
        assert_eq!(
            task_outcome(Err(rpc)),
            Err(json!({ "code": -32021, "message": "m", "data": 1 }))
        );
    }

    #[test]
    fn input_responses_must_be_an_object_of_objects() {
        // Goal: a malformed tasks/update is -32602, an unknown key is not (it is ignored
        // later). Method: table.
        let parse = crate::wire::jsonrpc::leaked_value;
        let ok = parse(r#"{"taskId":"t","inputResponses":{"unknown-key":{"ignored":true}}}"#);
        assert!(input_responses(&ok).is_ok());
        for bad in
            [r#"{"taskId":"t"}"#, r#"{"inputResponses":[]}"#, r#"{"inputResponses":{"k":1}}"#]
        {
            assert!(input_responses(&parse(bad)).is_err(), "{bad}");
        }
    }
}
