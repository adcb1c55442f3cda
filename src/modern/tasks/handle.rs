//! The running side of one task: what the detached tool and its call context hold.
//!
//! Owns: `TaskHandle` (complete, fail, ask the client for input, observe the cancel signal),
//! `InputWait` (one pending answer), the byte budget the core's results draw on (`Shared`,
//! with the limits and the core's counters), and `drive`, which runs a tool to its task's end.
//! Called by: `store` (which creates each handle) and `modern::task_call` (which spawns
//! `drive` and gives the tool's context the handle).
//! Never: changes a task once it is finished, cancelled or deleted, lets a result past the
//! byte budget, or polls the tool again after the cancel signal.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;

use super::error::TaskError;
#[cfg(test)]
use super::id::TaskId;
use super::limits::TaskLimits;
#[cfg(test)]
use super::task::Status;
use super::task::{Input, Phase, Task};
use crate::metrics::CoreMetrics;
use crate::wire::{error_object, Code};

/// What the store shares with the handles of its tasks: the limits, the byte budget, and the
/// core's counters (limit hits, tasks created).
pub(super) struct Shared {
    pub(super) limits: TaskLimits,
    pub(super) metrics: Arc<CoreMetrics>,
    /// Result and error bytes held by live tasks (≤ `limits.bytes_max`).
    pub(super) bytes: Cell<usize>,
    /// The durable mirror's tap (`--durable`): each task's state goes to the store as it
    /// changes, so a peer answers `tasks/get` after this node dies.
    pub(super) mirror: Option<Rc<crate::durable::CoreTap>>,
}

/// The running side of one task: what the runner and the tool's context hold.
#[derive(Clone)]
pub(crate) struct TaskHandle {
    task: Rc<Task>,
    shared: Rc<Shared>,
}

impl TaskHandle {
    /// The handle of `task`, a live task of the store that shares `shared`.
    pub(super) fn new(task: Rc<Task>, shared: Rc<Shared>) -> TaskHandle {
        TaskHandle { task, shared }
    }

    #[cfg(test)]
    pub(super) fn id(&self) -> TaskId {
        self.task.id
    }

    /// The `CreateTaskResult`: the task's fields with `resultType: "task"`, without `result`,
    /// `error` or `inputRequests` (those are `tasks/get`'s).
    pub(crate) fn create_result(&self) -> Value {
        Value::Object(self.task.fields(&self.shared.limits, "task"))
    }

    /// The current status.
    #[cfg(test)]
    pub(super) fn status(&self) -> Status {
        self.task.status()
    }

    /// True once `tasks/cancel` arrived or the task was deleted.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.task.cancelled.get()
    }

    /// Completes when the task is cancelled or deleted.
    pub(crate) fn cancelled(&self) -> impl Future<Output = ()> + 'static {
        let task = self.task.clone();
        poll_fn(move |cx| {
            if task.cancelled.get() {
                return Poll::Ready(());
            }
            task.register_cancel_waker(cx.waker());
            Poll::Pending
        })
    }

    /// The tool returned: `completed` with its `CallToolResult`. A result that does not fit
    /// the core's byte budget fails the task instead (-32603). No effect once the task is
    /// finished, cancelled or deleted.
    pub(super) fn complete(&self, result: Value) {
        match self.reserve(json_len(&result)) {
            Ok(()) => self.finish(Phase::Completed(result), None),
            Err(needed) => {
                self.shared.metrics.limit_task_bytes.inc();
                let message = "task result larger than the task store's budget \
                               (--task-bytes-per-core)";
                let data = serde_json::json!({
                    "resultBytes": needed,
                    "budgetBytes": self.shared.limits.bytes_max,
                });
                let error = error_object(Code::InternalError.value(), message, Some(data));
                self.finish(Phase::Failed(error), Some(message.to_owned()));
            }
        }
    }

    /// The call ended in a JSON-RPC error (`error_object`): `failed`, with its message as
    /// `statusMessage` (SEP-2663 §Task Execution Errors). Same no-effect cases as `complete`;
    /// an error that does not fit the budget is stored without its `data`.
    pub(super) fn fail(&self, error: Value) {
        let message = error.get("message").and_then(Value::as_str).map(str::to_owned);
        let error = match self.reserve(json_len(&error)) {
            Ok(()) => error,
            Err(_) => {
                let code = error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(Code::InternalError.value());
                error_object(code, message.as_deref().unwrap_or("failed"), None)
            }
        };
        self.finish(Phase::Failed(error), message);
    }

    /// Counts `bytes` in the budget for this task; `Err(bytes)` when they do not fit. A
    /// finished or deleted task reserves nothing (its `finish` is a no-op).
    fn reserve(&self, bytes: usize) -> Result<(), usize> {
        if !self.task.live.get() || !self.task.is_running() {
            return Ok(());
        }
        let held = self.shared.bytes.get();
        match held.checked_add(bytes) {
            Some(total) if total <= self.shared.limits.bytes_max => {
                self.shared.bytes.set(total);
                self.task.stored_bytes.set(self.task.stored_bytes.get() + bytes);
                Ok(())
            }
            _ => Err(bytes),
        }
    }

    fn finish(&self, phase: Phase, status_message: Option<String>) {
        if !self.task.live.get() || !self.task.is_running() {
            return;
        }
        *self.task.phase.borrow_mut() = phase;
        *self.task.status_message.borrow_mut() = status_message;
        // Inputs still waiting belong to futures the tool dropped or never awaited.
        self.task.inputs.borrow_mut().clear();
        self.task.touch();
        self.mirror();
        self.task.end_audit();
    }

    /// Reports the task's state to the core's observer, the durable mirror (`--durable`;
    /// none without it). A full queue drops it: a peer then answers from the last state it has.
    pub(super) fn mirror(&self) {
        let Some(observer) = &self.shared.mirror else { return };
        let _ = observer.observe(crate::durable::CoreChange::TaskChanged {
            id: self.task.id.to_string(),
            subject: self.task.owner.as_deref().map(str::to_owned),
            detailed: self.task.detailed(&self.shared.limits).to_string(),
            running: self.task.is_running(),
            ttl_ms: self.shared.limits.retention.as_millis() as u64,
        });
    }

    /// Asks the client for input (`elicitation/create`, `sampling/createMessage`, …): the task
    /// shows `input_required` with this request in `inputRequests` until `tasks/update`
    /// answers it; the returned future then resolves with the client's answer (an
    /// `ElicitResult`, …), or with `Cancelled` when the task is cancelled or deleted first.
    pub(crate) fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputWait, TaskError> {
        let task = &self.task;
        if task.cancelled.get() || !task.is_running() {
            return Err(TaskError::Cancelled);
        }
        if task.inputs.borrow().len() >= self.shared.limits.input_requests_max {
            self.shared.metrics.limit_task_input_requests.inc();
            return Err(TaskError::TooManyInputRequests);
        }
        let key = task.next_input.get();
        task.next_input.set(key + 1);
        let request = serde_json::json!({ "method": method, "params": params });
        task.inputs.borrow_mut().insert(key, Input::Waiting { request, waker: None });
        task.touch();
        Ok(InputWait { task: task.clone(), key })
    }
}

/// The answer to one input request (`TaskHandle::request_input`). Dropping it withdraws the
/// request (it is no longer listed).
pub(crate) struct InputWait {
    task: Rc<Task>,
    key: u64,
}

impl Future for InputWait {
    type Output = Result<Value, TaskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let task = &self.task;
        if task.cancelled.get() {
            return Poll::Ready(Err(TaskError::Cancelled));
        }
        let mut inputs = task.inputs.borrow_mut();
        match inputs.get_mut(&self.key) {
            Some(Input::Waiting { waker, .. }) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Some(Input::Answered(_)) => match inputs.remove(&self.key) {
                Some(Input::Answered(answer)) => Poll::Ready(Ok(answer)),
                _ => Poll::Ready(Err(TaskError::Cancelled)),
            },
            None => Poll::Ready(Err(TaskError::Cancelled)),
        }
    }
}

impl Drop for InputWait {
    fn drop(&mut self) {
        if let Ok(mut inputs) = self.task.inputs.try_borrow_mut() {
            if inputs.remove(&self.key).is_some() {
                drop(inputs);
                self.task.touch();
            }
        }
    }
}

/// Runs a task's tool to its end, detached from any connection: `tool`'s `Ok` completes the
/// task, its `Err` (a JSON-RPC error object, `error_object`) fails it; a cancel (tasks/cancel,
/// deletion) drops `tool` at once. The caller spawns this on the task's core.
pub(crate) async fn drive<F>(handle: TaskHandle, tool: F)
where
    F: Future<Output = Result<Value, Value>>,
{
    let mut tool = pin!(tool);
    let outcome = poll_fn(|cx| {
        if handle.is_cancelled() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(outcome) = tool.as_mut().poll(cx) {
            return Poll::Ready(Some(outcome));
        }
        handle.task.register_cancel_waker(cx.waker());
        Poll::Pending
    })
    .await;
    match outcome {
        Some(Ok(result)) => handle.complete(result),
        Some(Err(error)) => handle.fail(error),
        None => {}
    }
}

/// The serialized length of `value` (what a stored result costs the budget).
pub(super) fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to an infallible sink cannot fail (its keys are strings).
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
