//! One core's tasks: the store every `tasks/*` request and every task-augmented call reaches.
//!
//! Owns: `TaskStore`, the live tasks by id and in creation order; creation against
//! `--max-tasks-per-core`, deletion once `--task-retention-secs` passed (cancelling a tool
//! still running), the `tasks/get`, `tasks/update` and `tasks/cancel` operations, and the
//! hand-over of a task's audit end line (`audit_at_end`, `--audit-log`).
//! Called by: `runtime` (one store per core, built from `TaskLimits`; the reaper's tick, through
//! `modern::expire`) and `modern::task_call` (create, then the three operations).
//! Never: evicts a task before its retention ended (SEP-2663: `ttlMs` is a promise; a full
//! store refuses new tasks instead), answers for a task owned by another core (that request
//! is handed off first), or overwrites a task whose id collided.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use serde_json::{Map, Value};

use super::error::TaskError;
use super::handle::{Shared, TaskHandle};
use super::id::TaskId;
use super::limits::TaskLimits;
use super::task::Status;
use super::task::{parse_input_key, Input, Phase, Task};
use crate::metrics::CoreMetrics;

/// One core's tasks. Cheap to clone (one `Rc`); core-local.
#[derive(Clone)]
pub(crate) struct TaskStore {
    inner: Rc<StoreInner>,
}

struct StoreInner {
    /// `--node-id`: minted into every id, and compared on every lookup.
    node: u8,
    core: u16,
    shared: Rc<Shared>,
    /// Live tasks by the random part of their id.
    tasks: RefCell<HashMap<u128, Rc<Task>>>,
    /// Live tasks in creation order: retention is counted from creation, so they expire in
    /// this order. Holds exactly the keys of `tasks`.
    order: RefCell<VecDeque<(Instant, u128)>>,
}

impl TaskStore {
    pub(crate) fn new(
        node: u8,
        core: u16,
        limits: TaskLimits,
        metrics: Arc<CoreMetrics>,
        mirror: Option<Rc<crate::durable::CoreTap>>,
    ) -> TaskStore {
        assert!(limits.tasks_max > 0 && limits.bytes_max > 0, "invariant: limits are validated");
        let shared = Rc::new(Shared { limits, metrics, bytes: Cell::new(0), mirror });
        let inner = StoreInner {
            node,
            core,
            shared,
            tasks: RefCell::new(HashMap::new()),
            order: RefCell::new(VecDeque::new()),
        };
        TaskStore { inner: Rc::new(inner) }
    }

    pub(super) fn limits(&self) -> &TaskLimits {
        &self.inner.shared.limits
    }

    /// Live tasks (running or retained).
    pub(crate) fn len(&self) -> usize {
        self.inner.tasks.borrow().len()
    }

    /// Result and error bytes held.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.inner.shared.bytes.get()
    }

    /// A new `working` task, present in the store (so `tasks/get` resolves it) before the
    /// caller answers with its `create_result` (SEP-2663 §Task Creation: strongly consistent).
    /// `owner`: the subject whose token created it (`None`: authorization is off); only the
    /// same subject finds it again.
    pub(crate) fn create(
        &self,
        owner: Option<&str>,
        now: Instant,
    ) -> Result<TaskHandle, TaskError> {
        self.expire(now);
        if self.len() >= self.limits().tasks_max {
            self.inner.shared.metrics.limit_tasks.inc();
            return Err(TaskError::Full);
        }
        let id = TaskId::generate(self.inner.node, self.inner.core)?;
        let task = Rc::new(Task::new(id, owner.map(Box::from), SystemTime::now()));
        let mut tasks = self.inner.tasks.borrow_mut();
        if tasks.contains_key(&id.random) {
            // 128 random bits collided: the OS source is broken; never overwrite a task.
            return Err(TaskError::Random);
        }
        tasks.insert(id.random, task.clone());
        self.inner.order.borrow_mut().push_back((now, id.random));
        debug_assert_eq!(tasks.len(), self.inner.order.borrow().len());
        self.inner.shared.metrics.tasks_created_total.inc();
        let handle = TaskHandle::new(task, self.inner.shared.clone());
        handle.mirror();
        Ok(handle)
    }

    /// Whether a task of this core is working (what a drain waits for: it runs detached from
    /// any connection). One waiting for `tasks/update` input is not waited for: its client
    /// cannot reach a draining node to give it.
    pub(crate) fn any_working(&self) -> bool {
        self.inner.tasks.borrow().values().any(|t| t.live.get() && t.status() == Status::Working)
    }

    /// Whether `owner` finds task `task_id` here (what `tasks/get` would answer, without
    /// building it, and without counting another subject's id: `tasks/get` counts that).
    pub(crate) fn holds(&self, owner: Option<&str>, task_id: &str, now: Instant) -> bool {
        self.find_any(task_id, now).is_ok_and(|task| task.owner.as_deref() == owner)
    }

    /// The `tasks/get` result (`DetailedTask` with `resultType: "complete"`).
    pub(crate) fn get(
        &self,
        owner: Option<&str>,
        task_id: &str,
        now: Instant,
    ) -> Result<Value, TaskError> {
        let task = self.find(owner, task_id, now)?;
        Ok(task.detailed(self.limits()))
    }

    /// `tasks/update`: delivers the answers whose keys are outstanding and ignores the rest
    /// (unknown, already answered, or from an earlier round: SEP-2663 §Task Update Requests).
    /// A task that is not running ignores them all. The ack is the caller's.
    pub(crate) fn update(
        &self,
        owner: Option<&str>,
        task_id: &str,
        responses: &Map<String, Value>,
        now: Instant,
    ) -> Result<(), TaskError> {
        let task = self.find(owner, task_id, now)?;
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
    pub(crate) fn cancel(
        &self,
        owner: Option<&str>,
        task_id: &str,
        now: Instant,
    ) -> Result<(), TaskError> {
        let task = self.find(owner, task_id, now)?;
        if task.is_running() {
            *task.phase.borrow_mut() = Phase::Cancelled;
            *task.status_message.borrow_mut() = Some("cancelled by tasks/cancel".into());
            task.touch();
            task.signal_cancel();
            task.end_audit();
        }
        Ok(())
    }

    /// The call of `pending` was answered with task `task_id` (`--audit-log`): when this core
    /// holds that task for the call's subject, the call's line names it and the task keeps its
    /// end line (written when it ends, or now if it already did). Anything else (a tool's
    /// result that only looks like a `CreateTaskResult`) leaves the call's line as it is.
    pub(crate) fn audit_at_end(&self, task_id: &str, pending: &mut crate::audit::Pending) {
        let Ok(task) = self.find_any(task_id, Instant::now()) else { return };
        if task.owner.as_deref() != pending.subject() {
            return;
        }
        if let Some(task_end) = pending.became_task(task_id) {
            task.audit_at_end(task_end);
        }
    }

    /// Deletes the tasks whose retention ended by `now`; a running one is cancelled (its tool
    /// is dropped). Called by every operation, and may be called periodically.
    pub(crate) fn expire(&self, now: Instant) {
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
        task.end_audit();
    }

    /// The task `task_id` names when `owner` created it: another subject's task (or one made
    /// with a token, named without one) is not found, exactly as an unknown id (CONTRACT §8).
    fn find(
        &self,
        owner: Option<&str>,
        task_id: &str,
        now: Instant,
    ) -> Result<Rc<Task>, TaskError> {
        let task = self.find_any(task_id, now)?;
        if task.owner.as_deref() != owner {
            self.inner.shared.metrics.auth_foreign_subject.inc();
            return Err(TaskError::NotFound);
        }
        Ok(task)
    }

    /// The task `task_id` names, whoever created it.
    fn find_any(&self, task_id: &str, now: Instant) -> Result<Rc<Task>, TaskError> {
        self.expire(now);
        let id = TaskId::parse(task_id).ok_or(TaskError::NotFound)?;
        if id.node != self.inner.node {
            return Err(TaskError::Misrouted);
        }
        if id.core != self.inner.core {
            return Err(TaskError::NotFound);
        }
        self.inner.tasks.borrow().get(&id.random).cloned().ok_or(TaskError::NotFound)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
