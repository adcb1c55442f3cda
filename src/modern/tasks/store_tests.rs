//! Unit tests of the store and the handles it creates: the task lifecycle, `tasks/get`,
//! `tasks/update` and `tasks/cancel`, input requests, every per-core limit at N and N+1, and
//! `drive`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::modern::tasks::handle::{drive, json_len};
use crate::modern::tasks::task::Status;
use crate::wire::error_object;

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
    (TaskStore::new(0, 7, limits(), metrics.clone(), None), metrics)
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> =
        value.as_object().expect("object").keys().map(|k| k.as_str()).collect();
    keys.sort_unstable();
    keys
}

fn input_keys(detailed: &Value) -> Vec<String> {
    detailed["inputRequests"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

fn responses(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

#[test]
fn a_new_task_is_working_and_its_create_result_is_flat() {
    // Goal: the CreateTaskResult is `Result & Task`, flat, with integer ttlMs and
    // pollIntervalMs and ISO-8601 times, and nothing of DetailedTask's (tasks-lifecycle,
    // tasks-wire-fields, tasks-request-state-removal). Method: create, inspect keys.
    let store = store();
    let now = Instant::now();
    let handle = store.create(None, now).expect("room");
    let created = handle.create_result();
    assert_eq!(
        keys(&created),
        ["createdAt", "lastUpdatedAt", "pollIntervalMs", "resultType", "status", "taskId", "ttlMs"]
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
    let got = store.get(None, &handle.id().to_string(), now).expect("present");
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
    let ok = store.create(None, now).expect("room");
    let tool_error = json!({ "content": [{ "type": "text", "text": "boom" }], "isError": true });
    ok.complete(tool_error.clone());
    let got = store.get(None, &ok.id().to_string(), now).expect("present");
    assert_eq!(got["status"], "completed");
    assert_eq!(got["result"], tool_error);
    assert!(got.get("error").is_none() && got.get("inputRequests").is_none());

    let bad = store.create(None, now).expect("room");
    bad.fail(error_object(-32603, "tool panicked", None));
    let got = store.get(None, &bad.id().to_string(), now).expect("present");
    assert_eq!(got["status"], "failed");
    assert_eq!(got["error"], json!({ "code": -32603, "message": "tool panicked" }));
    assert_eq!(got["statusMessage"], "tool panicked");
    assert!(got.get("result").is_none());
    // A finished task does not change again.
    bad.complete(json!({ "content": [] }));
    ok.fail(error_object(-1, "late", None));
    assert_eq!(store.get(None, &bad.id().to_string(), now).expect("present")["status"], "failed");
    assert_eq!(store.get(None, &ok.id().to_string(), now).expect("present")["status"], "completed");
}

#[test]
fn cancel_settles_a_running_task_and_is_idempotent_on_a_finished_one() {
    // Goal: tasks/cancel makes a running task `cancelled` and raises its signal; on a
    // terminal task it changes nothing but still succeeds; an unknown id is NotFound.
    let store = store();
    let now = Instant::now();
    let running = store.create(None, now).expect("room");
    let (wakes, waker) = counting_waker();
    let mut signal = Box::pin(running.cancelled());
    assert!(poll_once(&mut signal, &waker).is_pending());
    let id = running.id().to_string();
    store.cancel(None, &id, now).expect("known");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert!(poll_once(&mut signal, &waker).is_ready());
    assert!(running.is_cancelled());
    let got = store.get(None, &id, now).expect("present");
    assert_eq!(got["status"], "cancelled");
    assert!(got.get("result").is_none() && got.get("error").is_none());
    running.complete(json!({ "content": [] }));
    assert_eq!(store.get(None, &id, now).expect("present")["status"], "cancelled");
    store.cancel(None, &id, now).expect("idempotent");

    let done = store.create(None, now).expect("room");
    done.complete(json!({ "content": [] }));
    store.cancel(None, &done.id().to_string(), now).expect("idempotent on terminal");
    assert!(!done.is_cancelled());
    assert_eq!(
        store.get(None, &done.id().to_string(), now).expect("present")["status"],
        "completed"
    );

    let foreign = TaskId { node: 0, core: 8, random: done.id().random }.to_string();
    for unknown in ["tasks-conformance-nonexistent-12345", "gate-test", foreign.as_str()] {
        assert_eq!(store.cancel(None, unknown, now), Err(TaskError::NotFound));
        assert_eq!(store.get(None, unknown, now), Err(TaskError::NotFound));
        assert_eq!(store.update(None, unknown, &Map::new(), now), Err(TaskError::NotFound));
    }
}

#[test]
fn input_requests_are_listed_until_answered_one_at_a_time() {
    // Goal: two parallel input requests → input_required with two keys; a partial update
    // removes only the answered key and the task stays input_required; the second answer
    // makes it working again; unknown and repeated keys are ignored (tasks-mrtr-input).
    let store = store();
    let now = Instant::now();
    let handle = store.create(None, now).expect("room");
    let id = handle.id().to_string();
    let mut first =
        handle.request_input("elicitation/create", json!({ "message": "1" })).expect("room");
    let mut second =
        handle.request_input("elicitation/create", json!({ "message": "2" })).expect("room");
    let (wakes, waker) = counting_waker();
    assert!(poll_once(&mut first, &waker).is_pending());
    assert!(poll_once(&mut second, &waker).is_pending());

    let got = store.get(None, &id, now).expect("present");
    assert_eq!(got["status"], "input_required");
    assert_eq!(input_keys(&got), ["input-1", "input-2"]);
    assert_eq!(
        got["inputRequests"]["input-1"],
        json!({ "method": "elicitation/create", "params": { "message": "1" } })
    );

    let answer = json!({ "action": "accept", "content": { "confirm": true } });
    store
        .update(
            None,
            &id,
            &responses(&[("input-1", answer.clone()), ("unknown-key", json!({ "ignored": true }))]),
            now,
        )
        .expect("known");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    let got = store.get(None, &id, now).expect("present");
    assert_eq!(got["status"], "input_required");
    assert_eq!(input_keys(&got), ["input-2"]);
    assert_eq!(poll_once(&mut first, &waker), Poll::Ready(Ok(answer.clone())));

    // A repeated answer to a key already taken is ignored.
    store.update(None, &id, &responses(&[("input-1", json!("again"))]), now).expect("known");
    store.update(None, &id, &responses(&[("input-2", answer.clone())]), now).expect("known");
    assert_eq!(store.get(None, &id, now).expect("present")["status"], "working");
    assert_eq!(poll_once(&mut second, &waker), Poll::Ready(Ok(answer)));
    // Keys are never reused.
    let third = handle.request_input("elicitation/create", json!({})).expect("room");
    assert_eq!(input_keys(&store.get(None, &id, now).expect("present")), ["input-3"]);
    drop(third);
    assert_eq!(store.get(None, &id, now).expect("present")["status"], "working");
}

#[test]
fn input_requests_stop_at_the_limit_and_end_with_the_task() {
    // Goal: --max-task-input-requests bounds what one task has outstanding (N ok, N+1
    // refused); cancelling the task resolves waiting inputs with Cancelled and a finished
    // task takes no new ones. Method: limit 2.
    let (store, metrics) = counted_store();
    let now = Instant::now();
    let handle = store.create(None, now).expect("room");
    let mut a = handle.request_input("elicitation/create", json!({})).expect("1 of 2");
    let _b = handle.request_input("elicitation/create", json!({})).expect("2 of 2");
    assert!(matches!(
        handle.request_input("elicitation/create", json!({})),
        Err(TaskError::TooManyInputRequests)
    ));
    assert_eq!(metrics.limit_task_input_requests.get(), 1);
    let (wakes, waker) = counting_waker();
    assert!(poll_once(&mut a, &waker).is_pending());
    store.cancel(None, &handle.id().to_string(), now).expect("known");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll_once(&mut a, &waker), Poll::Ready(Err(TaskError::Cancelled)));
    assert!(matches!(handle.request_input("x", json!({})), Err(TaskError::Cancelled)));
    assert!(store
        .get(None, &handle.id().to_string(), now)
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
    let first = store.create(None, t0).expect("1");
    first.complete(json!({ "content": [] }));
    store.create(None, t0 + Duration::from_secs(1)).expect("2");
    store.create(None, t0 + Duration::from_secs(2)).expect("3");
    assert_eq!(store.len(), 3);
    assert!(matches!(store.create(None, t0 + Duration::from_secs(3)), Err(TaskError::Full)));
    assert_eq!((metrics.limit_tasks.get(), metrics.tasks_created_total.get()), (1, 3));
    assert!(store.create(None, t0 + Duration::from_secs(10) + Duration::from_millis(1)).is_ok());
    assert_eq!(store.len(), 3);
    assert_eq!(
        store.get(None, &first.id().to_string(), t0 + Duration::from_secs(11)),
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
    let handle = store.create(None, t0).expect("room");
    let id = handle.id().to_string();
    let ttl = Duration::from_secs(10);
    assert!(store.get(None, &id, t0 + ttl).is_ok());
    assert!(!handle.is_cancelled());
    assert_eq!(store.get(None, &id, t0 + ttl + Duration::from_millis(1)), Err(TaskError::NotFound));
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
    let a = store.create(None, t0).expect("room");
    a.complete(half.clone());
    let b = store.create(None, t0).expect("room");
    b.complete(half);
    assert_eq!(store.bytes(), 1000);
    let c = store.create(None, t0 + Duration::from_secs(1)).expect("room");
    c.complete(json!(""));
    let got = store.get(None, &c.id().to_string(), t0 + Duration::from_secs(1)).expect("present");
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

    let ok = store.create(None, now).expect("room");
    let mut run = Box::pin(drive(ok.clone(), async { Ok(json!({ "content": [] })) }));
    assert!(poll_once(&mut run, &waker).is_ready());
    assert_eq!(ok.status(), Status::Completed);

    let err = store.create(None, now).expect("room");
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
    let slow = store.create(None, now).expect("room");
    let (wakes, waker) = counting_waker();
    let mut run = Box::pin(drive(slow.clone(), async move {
        let _flag = flag;
        std::future::pending::<Result<Value, Value>>().await
    }));
    assert!(poll_once(&mut run, &waker).is_pending());
    assert!(!dropped.get());
    store.cancel(None, &slow.id().to_string(), now).expect("known");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert!(poll_once(&mut run, &waker).is_ready());
    drop(run);
    assert!(dropped.get());
    assert_eq!(slow.status(), Status::Cancelled);
}
