//! One task: its record, its status machine and the wire objects clients see of it.
//!
//! Owns: `Task` (status, phase, status message, input slots, cancel signal, byte count),
//! `Status` and `Phase` (`working` ⇄ `input_required` → `completed` | `failed` |
//! `cancelled`), the input-request keys, the `Task` fields of `CreateTaskResult` and
//! `DetailedTask` with their `createdAt`/`lastUpdatedAt` timestamps (RFC 3339, via humantime),
//! and the task's audit end line (`--audit-log`: held from its call's line, written once, when
//! the task ends).
//! The JSON-RPC error a `failed` task carries is built by `wire::error_object`.
//! Called by: `store` (creation, lookup, `tasks/update`, `tasks/cancel`, deletion) and
//! `handle` (the running tool's side).
//! Never: counts bytes or tasks against a limit (the store and handle do), or holds a
//! `RefCell` borrow beyond the method that took it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::task::Waker;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::id::TaskId;
use super::limits::TaskLimits;
use crate::audit::{Ending, Pending};

/// The `status` of a task on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
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
pub(super) enum Phase {
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
pub(super) enum Input {
    /// Listed in `inputRequests` until answered. `waker`: the tool's `InputWait`, once polled.
    Waiting { request: Value, waker: Option<Waker> },
    /// `tasks/update` answered it; the tool has not taken the answer yet (no longer listed).
    Answered(Value),
}

/// Prefix of our input-request keys (`input-1`, `input-2`, …: unique over a task's life, as
/// SEP-2663 requires, because the counter never goes back).
const INPUT_KEY_PREFIX: &str = "input-";

/// One task. Lives in its core's store and in the handle of the tool that runs it.
pub(super) struct Task {
    pub(super) id: TaskId,
    /// The subject whose token created the task (`None`: authorization is off).
    pub(super) owner: Option<Box<str>>,
    created_at: SystemTime,
    updated_at: Cell<SystemTime>,
    pub(super) phase: RefCell<Phase>,
    pub(super) status_message: RefCell<Option<String>>,
    /// Outstanding input requests by key number.
    pub(super) inputs: RefCell<BTreeMap<u64, Input>>,
    /// The next input key number (never reused).
    pub(super) next_input: Cell<u64>,
    /// The cancel signal: set by `tasks/cancel` on a running task and by deletion.
    pub(super) cancelled: Cell<bool>,
    /// Who waits for the cancel signal (deduplicated with `will_wake`).
    cancel_wakers: RefCell<Vec<Waker>>,
    /// False once the store deleted the task (then nothing it does is stored or counted).
    pub(super) live: Cell<bool>,
    /// Result or error bytes counted in the store's budget for this task.
    pub(super) stored_bytes: Cell<usize>,
    /// The task's end line (`--audit-log`; `None`: off, or written): its call, kept from the
    /// call's line until the task ends (`end_audit`).
    audit: Cell<Option<Box<Pending>>>,
}

impl Task {
    /// A `working` task created at `wall`, with no inputs, no result and no bytes counted.
    pub(super) fn new(id: TaskId, owner: Option<Box<str>>, wall: SystemTime) -> Task {
        Task {
            id,
            owner,
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
            audit: Cell::new(None),
        }
    }

    /// Holds the task's end line (`--audit-log`), counted from the task's creation; a task
    /// that already ended writes it now.
    pub(super) fn audit_at_end(&self, mut pending: Pending) {
        let age = self.created_at.elapsed().unwrap_or_default();
        pending.started_at(Instant::now().checked_sub(age).unwrap_or_else(Instant::now));
        match self.ending() {
            Some(ending) => pending.end(ending),
            None => self.audit.set(Some(Box::new(pending))),
        }
    }

    /// Writes the task's end line (`--audit-log`), if it holds one: ended as its phase says,
    /// or as `expired` (a running task deleted at its retention's end). Off: one `Option` test.
    pub(super) fn end_audit(&self) {
        if let Some(pending) = self.audit.take() {
            pending.end(self.ending().unwrap_or(Ending::Expired));
        }
    }

    /// How the task ended, as an audit line says it; `None` while it runs.
    fn ending(&self) -> Option<Ending> {
        match &*self.phase.borrow() {
            Phase::Running => None,
            Phase::Completed(result) => {
                let tool_error = result.get("isError").and_then(Value::as_bool) == Some(true);
                Some(Ending::Result { tool_error })
            }
            Phase::Failed(error) => {
                Some(Ending::Error(error.get("code").and_then(Value::as_i64).unwrap_or_default()))
            }
            Phase::Cancelled => Some(Ending::Cancelled),
        }
    }

    pub(super) fn status(&self) -> Status {
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

    pub(super) fn is_running(&self) -> bool {
        matches!(*self.phase.borrow(), Phase::Running)
    }

    pub(super) fn touch(&self) {
        self.updated_at.set(SystemTime::now());
    }

    /// Raises the cancel signal and wakes every waiter (the runner, input waits).
    pub(super) fn signal_cancel(&self) {
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

    pub(super) fn register_cancel_waker(&self, waker: &Waker) {
        let mut wakers = self.cancel_wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }

    /// The `Task` fields: `taskId`, `status`, `statusMessage?`, `createdAt`, `lastUpdatedAt`,
    /// `ttlMs`, `pollIntervalMs`.
    pub(super) fn fields(&self, limits: &TaskLimits, result_type: &str) -> Map<String, Value> {
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
    pub(super) fn detailed(&self, limits: &TaskLimits) -> Value {
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

impl Drop for Task {
    /// A task dropped while it still holds its end line (the server stops with it running) writes
    /// none, as a call still running at exit has none (docs/audit.md).
    fn drop(&mut self) {
        if let Some(pending) = self.audit.take() {
            pending.discard();
        }
    }
}

fn input_key(number: u64) -> String {
    format!("{INPUT_KEY_PREFIX}{number}")
}

pub(super) fn parse_input_key(key: &str) -> Option<u64> {
    key.strip_prefix(INPUT_KEY_PREFIX)?.parse().ok()
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
