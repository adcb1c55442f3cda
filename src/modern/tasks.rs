//! The tasks extension's state (`io.modelcontextprotocol/tasks`, SEP-2663): one core's tasks,
//! each a durable record of a detached `tools/call` — its status, its pending input requests,
//! and its final result or JSON-RPC error — kept for a retention time after creation.
//!
//! Owns: task ids, the per-core `TaskStore` (bounded by a count, a retention time and a byte
//! budget), the status machine (`working` ⇄ `input_required` → `completed` | `failed` |
//! `cancelled`), the `Task` wire objects (`CreateTaskResult`, `DetailedTask`), the cancel signal
//! a running tool observes, and the input requests a running task waits on (`tasks/update`).
//! Called by: the stateless path (`modern`) for `tools/call` (create, then run the tool through
//! `drive`), `tasks/get`, `tasks/update` and `tasks/cancel`.
//! Never: touches sockets or HTTP, decides whether a call becomes a task (the caller does, from
//! the client's per-request capabilities and the tool), or holds a `RefCell` borrow across an
//! `.await`.
//!
//! # Where tasks live: per core, reached by hand-off
//!
//! Connections land on any core (SO_REUSEPORT), so a `tasks/get` may arrive on a core other
//! than the one that created the task. Two designs answer it:
//!
//! - a process-wide store behind a lock: every core reads and writes it; the running tool (a
//!   `!Send` future on its core) must then be reached from other cores for cancellation and
//!   for `tasks/update`'s answers, i.e. cross-thread wakers and `Send` state everywhere;
//! - a store per core, with the owner core written into the task id (as session ids do), and a
//!   request for another core's task handed to that core with the connection (`runtime::handoff`,
//!   the path legacy sessions already take).
//!
//! We take the second. The tool, its task record, its cancel signal and its input slots then
//! live on one thread: `Rc`/`Cell`, no lock, no atomic, local wakes (the crate's rule:
//! `clippy.toml` disallows `std::sync::Mutex`, "cross-core traffic goes through handoff").
//! SEP-2663 §"Routing Headers" makes clients send `Mcp-Name: <taskId>` precisely so a task's
//! requests can be routed to the instance holding it; the owner core is the first four hex
//! digits, so routing needs no lookup. The cost is one hand-off when a poll lands on another
//! core (not a hot path: clients poll at `pollIntervalMs`).
//!
//! # Limits (per core; constants and flags in `config`)
//!
//! | constant | flag | when hit |
//! | --- | --- | --- |
//! | `TASKS_PER_CORE_MAX` | `--max-tasks-per-core` | no new task (`create` is `Full`; the caller runs the call synchronously) |
//! | `TASK_RETENTION_SECS` | `--task-retention-secs` | the task is deleted (a running tool is cancelled); `tasks/*` then get -32602 |
//! | `TASK_BYTES_PER_CORE` | `--task-bytes-per-core` | a result that does not fit fails the task with -32603 instead |
//! | `TASK_INPUT_REQUESTS_MAX` | `--max-task-input-requests` | the tool's next input request fails |
//!
//! `TASK_POLL_INTERVAL_MS` (`--task-poll-interval-ms`) is a hint, not a bound. The retention is
//! the `ttlMs` we announce: SEP-2663 lets a server drop a task once `createdAt + ttlMs` passed
//! and forbids it earlier, so a task is never evicted to make room (the count bound refuses
//! new tasks instead). Tasks live in memory: a restart (or the drain's end) loses them.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use std::sync::Arc;

use crate::config::Config;
use crate::metrics::CoreMetrics;

/// The extension's identifier: the key under `capabilities.extensions` (ours, in
/// `server/discover`) and under the request's `clientCapabilities.extensions` (the client's).
pub(crate) const EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";

/// JSON-RPC -32603, the code of a task that failed for our own reason.
const INTERNAL_ERROR: i64 = -32603;

/// The bounds of one core's store (from `Config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskLimits {
    pub tasks_max: usize,
    pub retention: Duration,
    pub bytes_max: usize,
    pub input_requests_max: usize,
    pub poll_interval: Duration,
}

impl TaskLimits {
    pub fn from_config(cfg: &Config) -> TaskLimits {
        TaskLimits {
            tasks_max: cfg.tasks_per_core_max,
            retention: cfg.task_retention,
            bytes_max: cfg.task_bytes_per_core,
            input_requests_max: cfg.task_input_requests_max,
            poll_interval: cfg.task_poll_interval,
        }
    }
}

/// Why a task operation did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TaskError {
    /// The peer named a task this core does not hold: malformed, never created, or deleted
    /// after its retention (SEP-2663: -32602).
    #[error("task not found (unknown or expired)")]
    NotFound,
    /// This core holds `--max-tasks-per-core` tasks (peer load): no new task.
    #[error("too many tasks on this core (--max-tasks-per-core)")]
    Full,
    /// The OS random source failed (the OS).
    #[error("OS random source failed")]
    Random,
    /// The tool asked for more than `--max-task-input-requests` inputs at once (the tool).
    #[error("too many pending input requests (--max-task-input-requests)")]
    TooManyInputRequests,
    /// The task was cancelled or deleted while the tool waited (the peer, or its retention).
    #[error("task cancelled")]
    Cancelled,
}

/// A task id: the owner core in 16 bits and 128 bits from the OS CSPRNG (SEP-2663 §Security:
/// ids are bearer handles and must be unguessable), written as 36 lower-case hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TaskId {
    pub core: u16,
    pub random: u128,
}

impl TaskId {
    /// Length of the text form.
    pub const LEN: usize = 36;

    /// A fresh id owned by `core`.
    pub fn generate(core: u16) -> Result<TaskId, TaskError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| TaskError::Random)?;
        Ok(TaskId { core, random: u128::from_le_bytes(bytes) })
    }

    /// Parses the text form; `None` for anything that is not exactly ours.
    pub fn parse(text: &str) -> Option<TaskId> {
        let text = text.as_bytes();
        if text.len() != TaskId::LEN {
            return None;
        }
        let core = u16::try_from(parse_hex(&text[..4])?).ok()?;
        Some(TaskId { core, random: parse_hex(&text[4..])? })
    }

    /// The core that holds the task named `text`, when `text` is a task id (the hand-off
    /// target of `tasks/get|update|cancel`).
    pub fn owner(text: &str) -> Option<u16> {
        TaskId::parse(text).map(|id| id.core)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}{:032x}", self.core, self.random)
    }
}

/// Lower-case hex only (what we mint), 1 to 32 digits.
fn parse_hex(text: &[u8]) -> Option<u128> {
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    text.iter().try_fold(0u128, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some((n << 4) | u128::from(digit))
    })
}

/// The `status` of a task on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// Where a task's execution is.
enum Phase {
    /// The tool runs (`working`, or `input_required` while an input slot waits).
    Running,
    /// The tool returned a `CallToolResult` (tool errors, `isError: true`, included).
    Completed(Value),
    /// The call ended in a JSON-RPC error `{code, message, data?}`.
    Failed(Value),
    /// `tasks/cancel` arrived while it ran.
    Cancelled,
}

/// One outstanding input request of a running task.
enum Input {
    /// Listed in `inputRequests` until answered. `waker`: the tool's `InputWait`, once polled.
    Waiting { request: Value, waker: Option<Waker> },
    /// `tasks/update` answered it; the tool has not taken the answer yet (no longer listed).
    Answered(Value),
}

/// Prefix of our input-request keys (`input-1`, `input-2`, …: unique over a task's life, as
/// SEP-2663 requires, because the counter never goes back).
const INPUT_KEY_PREFIX: &str = "input-";

/// One task. Lives in its core's store and in the handle of the tool that runs it.
struct Task {
    id: TaskId,
    created_at: SystemTime,
    updated_at: Cell<SystemTime>,
    phase: RefCell<Phase>,
    status_message: RefCell<Option<String>>,
    /// Outstanding input requests by key number.
    inputs: RefCell<BTreeMap<u64, Input>>,
    /// The next input key number (never reused).
    next_input: Cell<u64>,
    /// The cancel signal: set by `tasks/cancel` on a running task and by deletion.
    cancelled: Cell<bool>,
    /// Who waits for the cancel signal (deduplicated with `will_wake`).
    cancel_wakers: RefCell<Vec<Waker>>,
    /// False once the store deleted the task (then nothing it does is stored or counted).
    live: Cell<bool>,
    /// Result or error bytes counted in the store's budget for this task.
    stored_bytes: Cell<usize>,
}

impl Task {
    fn status(&self) -> Status {
        match &*self.phase.borrow() {
            Phase::Running if self.waiting_inputs() > 0 => Status::InputRequired,
            Phase::Running => Status::Working,
            Phase::Completed(_) => Status::Completed,
            Phase::Failed(_) => Status::Failed,
            Phase::Cancelled => Status::Cancelled,
        }
    }

    fn waiting_inputs(&self) -> usize {
        self.inputs.borrow().values().filter(|i| matches!(i, Input::Waiting { .. })).count()
    }

    fn is_running(&self) -> bool {
        matches!(*self.phase.borrow(), Phase::Running)
    }

    fn touch(&self) {
        self.updated_at.set(SystemTime::now());
    }

    /// Raises the cancel signal and wakes every waiter (the runner, input waits).
    fn signal_cancel(&self) {
        self.cancelled.set(true);
        for waker in self.cancel_wakers.take() {
            waker.wake();
        }
        for input in std::mem::take(&mut *self.inputs.borrow_mut()).into_values() {
            if let Input::Waiting { waker: Some(waker), .. } = input {
                waker.wake();
            }
        }
    }

    fn register_cancel_waker(&self, waker: &Waker) {
        let mut wakers = self.cancel_wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }

    /// The `Task` fields: `taskId`, `status`, `statusMessage?`, `createdAt`, `lastUpdatedAt`,
    /// `ttlMs`, `pollIntervalMs`.
    fn fields(&self, limits: &TaskLimits, result_type: &str) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("resultType".into(), Value::from(result_type));
        object.insert("taskId".into(), Value::from(self.id.to_string()));
        object.insert("status".into(), Value::from(self.status().as_str()));
        if let Some(message) = &*self.status_message.borrow() {
            object.insert("statusMessage".into(), Value::from(message.as_str()));
        }
        object.insert("createdAt".into(), Value::from(iso8601(self.created_at)));
        object.insert("lastUpdatedAt".into(), Value::from(iso8601(self.updated_at.get())));
        object.insert("ttlMs".into(), Value::from(millis(limits.retention)));
        object.insert("pollIntervalMs".into(), Value::from(millis(limits.poll_interval)));
        object
    }

    /// `DetailedTask`: the fields plus `result` (completed), `error` (failed) or
    /// `inputRequests` (input_required).
    fn detailed(&self, limits: &TaskLimits) -> Value {
        let mut object = self.fields(limits, "complete");
        match &*self.phase.borrow() {
            Phase::Completed(result) => {
                object.insert("result".into(), result.clone());
            }
            Phase::Failed(error) => {
                object.insert("error".into(), error.clone());
            }
            Phase::Running => {
                let requests: Map<String, Value> = self
                    .inputs
                    .borrow()
                    .iter()
                    .filter_map(|(key, input)| match input {
                        Input::Waiting { request, .. } => Some((input_key(*key), request.clone())),
                        Input::Answered(_) => None,
                    })
                    .collect();
                if !requests.is_empty() {
                    object.insert("inputRequests".into(), Value::Object(requests));
                }
            }
            Phase::Cancelled => {}
        }
        Value::Object(object)
    }
}

fn input_key(number: u64) -> String {
    format!("{INPUT_KEY_PREFIX}{number}")
}

fn parse_input_key(key: &str) -> Option<u64> {
    key.strip_prefix(INPUT_KEY_PREFIX)?.parse().ok()
}

/// What the store shares with the handles of its tasks: the limits, the byte budget, and the
/// core's counters (limit hits, tasks created).
struct Shared {
    limits: TaskLimits,
    metrics: Arc<CoreMetrics>,
    /// Result and error bytes held by live tasks (≤ `limits.bytes_max`).
    bytes: Cell<usize>,
}

/// One core's tasks. Cheap to clone (one `Rc`); core-local.
#[derive(Clone)]
pub(crate) struct TaskStore {
    inner: Rc<StoreInner>,
}

struct StoreInner {
    core: u16,
    shared: Rc<Shared>,
    /// Live tasks by the random part of their id.
    tasks: RefCell<HashMap<u128, Rc<Task>>>,
    /// Live tasks in creation order: retention is counted from creation, so they expire in
    /// this order. Holds exactly the keys of `tasks`.
    order: RefCell<VecDeque<(Instant, u128)>>,
}

impl TaskStore {
    pub fn new(core: u16, limits: TaskLimits, metrics: Arc<CoreMetrics>) -> TaskStore {
        assert!(limits.tasks_max > 0 && limits.bytes_max > 0, "invariant: limits are validated");
        let shared = Rc::new(Shared { limits, metrics, bytes: Cell::new(0) });
        let inner = StoreInner {
            core,
            shared,
            tasks: RefCell::new(HashMap::new()),
            order: RefCell::new(VecDeque::new()),
        };
        TaskStore { inner: Rc::new(inner) }
    }

    pub fn limits(&self) -> &TaskLimits {
        &self.inner.shared.limits
    }

    /// Live tasks (running or retained).
    pub fn len(&self) -> usize {
        self.inner.tasks.borrow().len()
    }

    /// Result and error bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.inner.shared.bytes.get()
    }

    /// A new `working` task, present in the store (so `tasks/get` resolves it) before the
    /// caller answers with its `create_result` (SEP-2663 §Task Creation: strongly consistent).
    pub fn create(&self, now: Instant) -> Result<TaskHandle, TaskError> {
        self.expire(now);
        if self.len() >= self.limits().tasks_max {
            self.inner.shared.metrics.limit_tasks.inc();
            return Err(TaskError::Full);
        }
        let id = TaskId::generate(self.inner.core)?;
        let wall = SystemTime::now();
        let task = Rc::new(Task {
            id,
            created_at: wall,
            updated_at: Cell::new(wall),
            phase: RefCell::new(Phase::Running),
            status_message: RefCell::new(None),
            inputs: RefCell::new(BTreeMap::new()),
            next_input: Cell::new(1),
            cancelled: Cell::new(false),
            cancel_wakers: RefCell::new(Vec::new()),
            live: Cell::new(true),
            stored_bytes: Cell::new(0),
        });
        let mut tasks = self.inner.tasks.borrow_mut();
        if tasks.contains_key(&id.random) {
            // 128 random bits collided: the OS source is broken; never overwrite a task.
            return Err(TaskError::Random);
        }
        tasks.insert(id.random, task.clone());
        self.inner.order.borrow_mut().push_back((now, id.random));
        debug_assert_eq!(tasks.len(), self.inner.order.borrow().len());
        self.inner.shared.metrics.tasks_created_total.inc();
        Ok(TaskHandle { task, shared: self.inner.shared.clone() })
    }

    /// The `tasks/get` result (`DetailedTask` with `resultType: "complete"`).
    pub fn get(&self, task_id: &str, now: Instant) -> Result<Value, TaskError> {
        let task = self.find(task_id, now)?;
        Ok(task.detailed(self.limits()))
    }

    /// `tasks/update`: delivers the answers whose keys are outstanding and ignores the rest
    /// (unknown, already answered, or from an earlier round: SEP-2663 §Task Update Requests).
    /// A task that is not running ignores them all. The ack is the caller's.
    pub fn update(
        &self,
        task_id: &str,
        responses: &Map<String, Value>,
        now: Instant,
    ) -> Result<(), TaskError> {
        let task = self.find(task_id, now)?;
        let mut delivered = false;
        let mut inputs = task.inputs.borrow_mut();
        for (key, answer) in responses {
            let Some(slot) = parse_input_key(key).and_then(|n| inputs.get_mut(&n)) else {
                continue;
            };
            if let Input::Waiting { waker, .. } = slot {
                if let Some(waker) = waker.take() {
                    waker.wake();
                }
                *slot = Input::Answered(answer.clone());
                delivered = true;
            }
        }
        drop(inputs);
        if delivered {
            task.touch();
        }
        Ok(())
    }

    /// `tasks/cancel`: a running task becomes `cancelled` at once and its tool is signalled
    /// (the runner drops it); a finished task is left as it is (the ack is idempotent).
    pub fn cancel(&self, task_id: &str, now: Instant) -> Result<(), TaskError> {
        let task = self.find(task_id, now)?;
        if task.is_running() {
            *task.phase.borrow_mut() = Phase::Cancelled;
            *task.status_message.borrow_mut() = Some("cancelled by tasks/cancel".into());
            task.touch();
            task.signal_cancel();
        }
        Ok(())
    }

    /// Deletes the tasks whose retention ended by `now`; a running one is cancelled (its tool
    /// is dropped). Called by every operation, and may be called periodically.
    pub fn expire(&self, now: Instant) {
        let retention = self.limits().retention;
        loop {
            let key = match self.inner.order.borrow().front() {
                Some(&(created, key)) if now.saturating_duration_since(created) > retention => key,
                _ => break,
            };
            self.inner.order.borrow_mut().pop_front();
            let removed = self.inner.tasks.borrow_mut().remove(&key);
            if let Some(task) = removed {
                self.release(&task);
            }
        }
    }

    fn release(&self, task: &Task) {
        task.live.set(false);
        let (held, stored) = (self.inner.shared.bytes.get(), task.stored_bytes.replace(0));
        debug_assert!(stored <= held, "invariant: a task's bytes are counted in the store's");
        self.inner.shared.bytes.set(held.saturating_sub(stored));
        task.signal_cancel();
    }

    fn find(&self, task_id: &str, now: Instant) -> Result<Rc<Task>, TaskError> {
        self.expire(now);
        let id = TaskId::parse(task_id).ok_or(TaskError::NotFound)?;
        if id.core != self.inner.core {
            return Err(TaskError::NotFound);
        }
        self.inner.tasks.borrow().get(&id.random).cloned().ok_or(TaskError::NotFound)
    }
}

/// The running side of one task: what the runner and the tool's context hold.
#[derive(Clone)]
pub(crate) struct TaskHandle {
    task: Rc<Task>,
    shared: Rc<Shared>,
}

impl TaskHandle {
    #[cfg(test)]
    pub fn id(&self) -> TaskId {
        self.task.id
    }

    /// The `CreateTaskResult`: the task's fields with `resultType: "task"`, without `result`,
    /// `error` or `inputRequests` (those are `tasks/get`'s).
    pub fn create_result(&self) -> Value {
        Value::Object(self.task.fields(&self.shared.limits, "task"))
    }

    /// The current status.
    #[cfg(test)]
    pub fn status(&self) -> Status {
        self.task.status()
    }

    /// True once `tasks/cancel` arrived or the task was deleted.
    pub fn is_cancelled(&self) -> bool {
        self.task.cancelled.get()
    }

    /// Completes when the task is cancelled or deleted.
    pub fn cancelled(&self) -> impl Future<Output = ()> + 'static {
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
    pub fn complete(&self, result: Value) {
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
                let error = error_object(INTERNAL_ERROR, message, Some(data));
                self.finish(Phase::Failed(error), Some(message.to_owned()));
            }
        }
    }

    /// The call ended in a JSON-RPC error (`error_object`): `failed`, with its message as
    /// `statusMessage` (SEP-2663 §Task Execution Errors). Same no-effect cases as `complete`;
    /// an error that does not fit the budget is stored without its `data`.
    pub fn fail(&self, error: Value) {
        let message = error.get("message").and_then(Value::as_str).map(str::to_owned);
        let error = match self.reserve(json_len(&error)) {
            Ok(()) => error,
            Err(_) => {
                let code = error.get("code").and_then(Value::as_i64).unwrap_or(INTERNAL_ERROR);
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
    }

    /// Asks the client for input (`elicitation/create`, `sampling/createMessage`, …): the task
    /// shows `input_required` with this request in `inputRequests` until `tasks/update`
    /// answers it; the returned future then resolves with the client's answer (an
    /// `ElicitResult`, …), or with `Cancelled` when the task is cancelled or deleted first.
    pub fn request_input(&self, method: &str, params: Value) -> Result<InputWait, TaskError> {
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

/// A JSON-RPC error object `{code, message, data?}` (what `failed` tasks carry).
pub(crate) fn error_object(code: i64, message: &str, data: Option<Value>) -> Value {
    let mut object = Map::new();
    object.insert("code".into(), Value::from(code));
    object.insert("message".into(), Value::from(message));
    if let Some(data) = data {
        object.insert("data".into(), data);
    }
    Value::Object(object)
}

/// True when a request's `clientCapabilities` declare this extension (SEP-2663: the
/// per-request declaration is the only handshake; nothing is remembered between requests).
pub(crate) fn declared(client_capabilities: Option<&Value>) -> bool {
    client_capabilities
        .and_then(|caps| caps.get("extensions"))
        .and_then(|extensions| extensions.get(EXTENSION_ID))
        .is_some_and(Value::is_object)
}

/// The `data` of the -32021 (missing required client capability) error that tasks methods,
/// and task-only tools, answer to a request that does not declare the extension.
pub(crate) fn missing_capability_data() -> Value {
    serde_json::json!({ "requiredCapabilities": { "extensions": { EXTENSION_ID: {} } } })
}

/// The serialized length of `value` (what a stored result costs the budget).
fn json_len(value: &Value) -> usize {
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

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Length of a timestamp's text (`2026-07-28T12:34:56.789Z`).
const TIMESTAMP_LEN: usize = 24;

/// The last instant humantime prints, 9999-12-31T23:59:59.999Z (RFC 3339 years have four
/// digits; past it `Display` fails).
const TIMESTAMP_LAST: Duration = Duration::new(253_402_300_799, 999_999_999);

/// `2026-07-28T12:34:56.789Z` (RFC 3339 / ISO 8601, UTC, milliseconds truncated).
fn iso8601(time: SystemTime) -> String {
    use std::fmt::Write as _;
    // humantime panics before the epoch and fails after year 9999: a wall clock that far off
    // prints the nearest end of that range instead.
    let time = time.clamp(UNIX_EPOCH, UNIX_EPOCH + TIMESTAMP_LAST);
    let mut text = String::with_capacity(TIMESTAMP_LEN);
    let written = write!(text, "{}", humantime::format_rfc3339_millis(time));
    debug_assert!(written.is_ok(), "invariant: the instant is within humantime's range");
    debug_assert_eq!(text.len(), TIMESTAMP_LEN);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    fn limits() -> TaskLimits {
        TaskLimits {
            tasks_max: 3,
            retention: Duration::from_secs(10),
            bytes_max: 1000,
            input_requests_max: 2,
            poll_interval: Duration::from_millis(250),
        }
    }

    fn store() -> TaskStore {
        counted_store().0
    }

    fn counted_store() -> (TaskStore, Arc<CoreMetrics>) {
        let metrics = Arc::new(CoreMetrics::default());
        (TaskStore::new(7, limits(), metrics.clone()), metrics)
    }

    fn keys(value: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> =
            value.as_object().expect("object").keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        keys
    }

    fn input_keys(detailed: &Value) -> Vec<String> {
        detailed["inputRequests"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn responses(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn ids_are_36_hex_digits_that_name_their_core() {
        // Goal: ids are unguessable handles whose owner core routing can read without a
        // lookup. Method: generate, print, parse; reject every malformed variant.
        let a = TaskId::generate(0x01ab).expect("random");
        let b = TaskId::generate(0x01ab).expect("random");
        assert_ne!(a, b);
        let text = a.to_string();
        assert_eq!(text.len(), TaskId::LEN);
        assert!(text.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert!(text.starts_with("01ab"));
        assert_eq!(TaskId::parse(&text), Some(a));
        assert_eq!(TaskId::owner(&text), Some(0x01ab));
        let upper = text.to_ascii_uppercase();
        for bad in [
            "",
            "gate-test",
            &text[1..],
            &format!("{text}0"),
            &upper,
            "tasks-conformance-nonexistent-12345",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_new_task_is_working_and_its_create_result_is_flat() {
        // Goal: the CreateTaskResult is `Result & Task`, flat, with integer ttlMs and
        // pollIntervalMs and ISO-8601 times, and nothing of DetailedTask's (tasks-lifecycle,
        // tasks-wire-fields, tasks-request-state-removal). Method: create, inspect keys.
        let store = store();
        let now = Instant::now();
        let handle = store.create(now).expect("room");
        let created = handle.create_result();
        assert_eq!(
            keys(&created),
            [
                "createdAt",
                "lastUpdatedAt",
                "pollIntervalMs",
                "resultType",
                "status",
                "taskId",
                "ttlMs"
            ]
        );
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["status"], "working");
        assert_eq!(created["ttlMs"], json!(10_000));
        assert_eq!(created["pollIntervalMs"], json!(250));
        assert_eq!(created["taskId"], handle.id().to_string());
        let at = created["createdAt"].as_str().expect("string");
        assert_eq!(at.len(), "2026-07-28T00:00:00.000Z".len());
        assert_eq!((&at[4..5], &at[10..11], &at[23..]), ("-", "T", "Z"));
        // Strongly consistent: tasks/get resolves before anyone answers the client.
        let got = store.get(&handle.id().to_string(), now).expect("present");
        assert_eq!(got["resultType"], "complete");
        assert_eq!(got["status"], "working");
        assert_eq!(keys(&got), keys(&created));
    }

    #[test]
    fn a_completed_task_inlines_the_result_and_a_failed_one_the_error() {
        // Goal: completed → `result` (isError results too), failed → `error` + statusMessage and
        // no `result` (tasks-lifecycle). Method: finish two tasks, get them.
        let store = store();
        let now = Instant::now();
        let ok = store.create(now).expect("room");
        let tool_error =
            json!({ "content": [{ "type": "text", "text": "boom" }], "isError": true });
        ok.complete(tool_error.clone());
        let got = store.get(&ok.id().to_string(), now).expect("present");
        assert_eq!(got["status"], "completed");
        assert_eq!(got["result"], tool_error);
        assert!(got.get("error").is_none() && got.get("inputRequests").is_none());

        let bad = store.create(now).expect("room");
        bad.fail(error_object(-32603, "tool panicked", None));
        let got = store.get(&bad.id().to_string(), now).expect("present");
        assert_eq!(got["status"], "failed");
        assert_eq!(got["error"], json!({ "code": -32603, "message": "tool panicked" }));
        assert_eq!(got["statusMessage"], "tool panicked");
        assert!(got.get("result").is_none());
        // A finished task does not change again.
        bad.complete(json!({ "content": [] }));
        ok.fail(error_object(-1, "late", None));
        assert_eq!(store.get(&bad.id().to_string(), now).expect("present")["status"], "failed");
        assert_eq!(store.get(&ok.id().to_string(), now).expect("present")["status"], "completed");
    }

    #[test]
    fn cancel_settles_a_running_task_and_is_idempotent_on_a_finished_one() {
        // Goal: tasks/cancel makes a running task `cancelled` and raises its signal; on a
        // terminal task it changes nothing but still succeeds; an unknown id is NotFound.
        let store = store();
        let now = Instant::now();
        let running = store.create(now).expect("room");
        let (wakes, waker) = counting_waker();
        let mut signal = Box::pin(running.cancelled());
        assert!(poll_once(&mut signal, &waker).is_pending());
        let id = running.id().to_string();
        store.cancel(&id, now).expect("known");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(poll_once(&mut signal, &waker).is_ready());
        assert!(running.is_cancelled());
        let got = store.get(&id, now).expect("present");
        assert_eq!(got["status"], "cancelled");
        assert!(got.get("result").is_none() && got.get("error").is_none());
        running.complete(json!({ "content": [] }));
        assert_eq!(store.get(&id, now).expect("present")["status"], "cancelled");
        store.cancel(&id, now).expect("idempotent");

        let done = store.create(now).expect("room");
        done.complete(json!({ "content": [] }));
        store.cancel(&done.id().to_string(), now).expect("idempotent on terminal");
        assert!(!done.is_cancelled());
        assert_eq!(store.get(&done.id().to_string(), now).expect("present")["status"], "completed");

        let foreign = TaskId { core: 8, random: done.id().random }.to_string();
        for unknown in ["tasks-conformance-nonexistent-12345", "gate-test", foreign.as_str()] {
            assert_eq!(store.cancel(unknown, now), Err(TaskError::NotFound));
            assert_eq!(store.get(unknown, now), Err(TaskError::NotFound));
            assert_eq!(store.update(unknown, &Map::new(), now), Err(TaskError::NotFound));
        }
    }

    #[test]
    fn input_requests_are_listed_until_answered_one_at_a_time() {
        // Goal: two parallel input requests → input_required with two keys; a partial update
        // removes only the answered key and the task stays input_required; the second answer
        // makes it working again; unknown and repeated keys are ignored (tasks-mrtr-input).
        let store = store();
        let now = Instant::now();
        let handle = store.create(now).expect("room");
        let id = handle.id().to_string();
        let mut first =
            handle.request_input("elicitation/create", json!({ "message": "1" })).expect("room");
        let mut second =
            handle.request_input("elicitation/create", json!({ "message": "2" })).expect("room");
        let (wakes, waker) = counting_waker();
        assert!(poll_once(&mut first, &waker).is_pending());
        assert!(poll_once(&mut second, &waker).is_pending());

        let got = store.get(&id, now).expect("present");
        assert_eq!(got["status"], "input_required");
        assert_eq!(input_keys(&got), ["input-1", "input-2"]);
        assert_eq!(
            got["inputRequests"]["input-1"],
            json!({ "method": "elicitation/create", "params": { "message": "1" } })
        );

        let answer = json!({ "action": "accept", "content": { "confirm": true } });
        store
            .update(
                &id,
                &responses(&[
                    ("input-1", answer.clone()),
                    ("unknown-key", json!({ "ignored": true })),
                ]),
                now,
            )
            .expect("known");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        let got = store.get(&id, now).expect("present");
        assert_eq!(got["status"], "input_required");
        assert_eq!(input_keys(&got), ["input-2"]);
        assert_eq!(poll_once(&mut first, &waker), Poll::Ready(Ok(answer.clone())));

        // A repeated answer to a key already taken is ignored.
        store.update(&id, &responses(&[("input-1", json!("again"))]), now).expect("known");
        store.update(&id, &responses(&[("input-2", answer.clone())]), now).expect("known");
        assert_eq!(store.get(&id, now).expect("present")["status"], "working");
        assert_eq!(poll_once(&mut second, &waker), Poll::Ready(Ok(answer)));
        // Keys are never reused.
        let third = handle.request_input("elicitation/create", json!({})).expect("room");
        assert_eq!(input_keys(&store.get(&id, now).expect("present")), ["input-3"]);
        drop(third);
        assert_eq!(store.get(&id, now).expect("present")["status"], "working");
    }

    #[test]
    fn input_requests_stop_at_the_limit_and_end_with_the_task() {
        // Goal: --max-task-input-requests bounds what one task has outstanding (N ok, N+1
        // refused); cancelling the task resolves waiting inputs with Cancelled and a finished
        // task takes no new ones. Method: limit 2.
        let (store, metrics) = counted_store();
        let now = Instant::now();
        let handle = store.create(now).expect("room");
        let mut a = handle.request_input("elicitation/create", json!({})).expect("1 of 2");
        let _b = handle.request_input("elicitation/create", json!({})).expect("2 of 2");
        assert!(matches!(
            handle.request_input("elicitation/create", json!({})),
            Err(TaskError::TooManyInputRequests)
        ));
        assert_eq!(metrics.limit_task_input_requests.get(), 1);
        let (wakes, waker) = counting_waker();
        assert!(poll_once(&mut a, &waker).is_pending());
        store.cancel(&handle.id().to_string(), now).expect("known");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll_once(&mut a, &waker), Poll::Ready(Err(TaskError::Cancelled)));
        assert!(matches!(handle.request_input("x", json!({})), Err(TaskError::Cancelled)));
        assert!(store
            .get(&handle.id().to_string(), now)
            .expect("present")
            .get("inputRequests")
            .is_none());
    }

    #[test]
    fn the_store_holds_at_most_max_tasks_and_refuses_rather_than_evicts() {
        // Goal: --max-tasks-per-core: N tasks are created, N+1 is refused while all are within
        // their retention (finished ones too: ttlMs is a promise); once the oldest expires there
        // is room again. Method: limit 3, a controlled clock.
        let (store, metrics) = counted_store();
        let t0 = Instant::now();
        let first = store.create(t0).expect("1");
        first.complete(json!({ "content": [] }));
        store.create(t0 + Duration::from_secs(1)).expect("2");
        store.create(t0 + Duration::from_secs(2)).expect("3");
        assert_eq!(store.len(), 3);
        assert!(matches!(store.create(t0 + Duration::from_secs(3)), Err(TaskError::Full)));
        assert_eq!((metrics.limit_tasks.get(), metrics.tasks_created_total.get()), (1, 3));
        assert!(store.create(t0 + Duration::from_secs(10) + Duration::from_millis(1)).is_ok());
        assert_eq!(store.len(), 3);
        assert_eq!(
            store.get(&first.id().to_string(), t0 + Duration::from_secs(11)),
            Err(TaskError::NotFound)
        );
    }

    #[test]
    fn a_task_lives_exactly_its_retention_and_a_running_one_is_cancelled_at_its_end() {
        // Goal: --task-retention-secs: gettable at createdAt + ttl (SEP-2663: MUST NOT expire
        // earlier), gone 1 ms later; a still-running tool gets the cancel signal and its
        // result is dropped. Method: a controlled clock.
        let store = store();
        let t0 = Instant::now();
        let handle = store.create(t0).expect("room");
        let id = handle.id().to_string();
        let ttl = Duration::from_secs(10);
        assert!(store.get(&id, t0 + ttl).is_ok());
        assert!(!handle.is_cancelled());
        assert_eq!(store.get(&id, t0 + ttl + Duration::from_millis(1)), Err(TaskError::NotFound));
        assert!(handle.is_cancelled());
        assert_eq!(store.len(), 0);
        handle.complete(json!({ "content": [{ "type": "text", "text": "late" }] }));
        assert_eq!(store.bytes(), 0);
    }

    #[test]
    fn results_are_counted_against_the_byte_budget() {
        // Goal: --task-bytes-per-core: a result that fits exactly is kept; one byte more fails
        // the task with -32603 naming the flag; expiry gives the bytes back. Method: budget
        // 1000, string results of known serialized size.
        let (store, metrics) = counted_store();
        let t0 = Instant::now();
        let half = json!("x".repeat(498)); // 500 bytes serialized
        assert_eq!(json_len(&half), 500);
        let a = store.create(t0).expect("room");
        a.complete(half.clone());
        let b = store.create(t0).expect("room");
        b.complete(half);
        assert_eq!(store.bytes(), 1000);
        let c = store.create(t0 + Duration::from_secs(1)).expect("room");
        c.complete(json!(""));
        let got = store.get(&c.id().to_string(), t0 + Duration::from_secs(1)).expect("present");
        assert_eq!(got["status"], "failed");
        assert_eq!(got["error"]["code"], json!(-32603));
        assert!(got["error"]["message"].as_str().expect("text").contains("--task-bytes-per-core"));
        assert_eq!(got["error"]["data"]["resultBytes"], json!(2));
        assert_eq!(metrics.limit_task_bytes.get(), 1);
        assert!(got.get("result").is_none());
        assert_eq!(store.bytes(), 1000);
        store.expire(t0 + Duration::from_secs(10) + Duration::from_millis(1));
        assert_eq!((store.len(), store.bytes()), (1, 0));
    }

    #[test]
    fn drive_completes_fails_or_drops_the_tool() {
        // Goal: the runner maps the tool's Ok to completed and Err to failed, and drops the tool
        // as soon as the task is cancelled. Method: poll `drive` by hand with tools that are
        // ready, failing, or pending forever (with a drop flag).
        let store = store();
        let now = Instant::now();
        let (_, waker) = counting_waker();

        let ok = store.create(now).expect("room");
        let mut run = Box::pin(drive(ok.clone(), async { Ok(json!({ "content": [] })) }));
        assert!(poll_once(&mut run, &waker).is_ready());
        assert_eq!(ok.status(), Status::Completed);

        let err = store.create(now).expect("room");
        let mut run = Box::pin(drive(err.clone(), async { Err(error_object(-32603, "x", None)) }));
        assert!(poll_once(&mut run, &waker).is_ready());
        assert_eq!(err.status(), Status::Failed);

        struct DropFlag(Rc<Cell<bool>>);
        impl Drop for DropFlag {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let dropped = Rc::new(Cell::new(false));
        let flag = DropFlag(dropped.clone());
        let slow = store.create(now).expect("room");
        let (wakes, waker) = counting_waker();
        let mut run = Box::pin(drive(slow.clone(), async move {
            let _flag = flag;
            std::future::pending::<Result<Value, Value>>().await
        }));
        assert!(poll_once(&mut run, &waker).is_pending());
        assert!(!dropped.get());
        store.cancel(&slow.id().to_string(), now).expect("known");
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(poll_once(&mut run, &waker).is_ready());
        drop(run);
        assert!(dropped.get());
        assert_eq!(slow.status(), Status::Cancelled);
    }

    #[test]
    fn declaration_is_read_from_the_request_capabilities() {
        // Goal: only an object under extensions["io.modelcontextprotocol/tasks"] declares the
        // extension; the -32021 data names it (tasks-required-task-error).
        let yes = json!({ "elicitation": {}, "extensions": { EXTENSION_ID: {} } });
        assert!(declared(Some(&yes)));
        for no in [
            json!({}),
            json!({ "extensions": {} }),
            json!({ "extensions": { EXTENSION_ID: true } }),
            json!({ "tasks": {} }),
        ] {
            assert!(!declared(Some(&no)), "{no}");
        }
        assert!(!declared(None));
        assert_eq!(
            missing_capability_data()["requiredCapabilities"]["extensions"][EXTENSION_ID],
            json!({})
        );
    }

    #[test]
    fn limits_come_from_the_config() {
        // Goal: the flags reach the store. Method: a config with every task value changed.
        let cfg = Config {
            tasks_per_core_max: 1,
            task_retention: Duration::from_secs(2),
            task_bytes_per_core: 3,
            task_input_requests_max: 4,
            task_poll_interval: Duration::from_millis(5),
            ..Config::default()
        };
        let limits = TaskLimits::from_config(&cfg);
        assert_eq!((limits.tasks_max, limits.bytes_max, limits.input_requests_max), (1, 3, 4));
        assert_eq!(
            (limits.retention, limits.poll_interval),
            (Duration::from_secs(2), Duration::from_millis(5))
        );
    }

    #[test]
    fn timestamps_are_iso_8601_utc() {
        // Goal: createdAt/lastUpdatedAt parse as ISO 8601. Method: known instants, leap days,
        // and the epoch.
        let at = |secs: u64, millis: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis);
        assert_eq!(iso8601(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(iso8601(at(1_700_000_000, 999)), "2023-11-14T22:13:20.999Z");
        assert_eq!(iso8601(at(4_107_542_399, 0)), "2100-02-28T23:59:59.000Z");
        assert_eq!(iso8601(at(4_107_542_400, 0)), "2100-03-01T00:00:00.000Z");
        assert_eq!(iso8601(UNIX_EPOCH - Duration::from_secs(1)), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(at(253_402_300_799, 999)), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso8601(at(253_402_300_800, 0)), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn timestamps_are_exactly_what_clients_see() {
        // Goal: createdAt/lastUpdatedAt stay byte-for-byte the same whatever formats them:
        // RFC 3339 in UTC with a `Z`, always three fractional digits, truncated (never rounded).
        // Method: fixed instants (the epoch, a time of day with milliseconds, a leap day, the
        // last millisecond of a day) with their exact strings.
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
        for (instant, text) in [
            (at(0, 0), "1970-01-01T00:00:00.000Z"),
            (at(0, 999_999), "1970-01-01T00:00:00.000Z"),
            (at(1_785_242_096, 789_000_000), "2026-07-28T12:34:56.789Z"),
            (at(1_785_242_096, 789_999_999), "2026-07-28T12:34:56.789Z"),
            (at(1_835_395_200, 0), "2028-02-29T00:00:00.000Z"),
            (at(1_835_481_599, 999_000_000), "2028-02-29T23:59:59.999Z"),
            (at(1_835_481_600, 1_000_000), "2028-03-01T00:00:00.001Z"),
        ] {
            assert_eq!(iso8601(instant), text);
        }
    }
}
