//! Goal: the 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) end to
//! end: `server/discover` advertises it; a task-supporting tool's call from a declaring client
//! answers with a flat `CreateTaskResult` that `tasks/get` resolves at once, from whichever
//! core the poll lands on, and the tool runs on after its connection closed; `tasks/update`
//! feeds a waiting task, `tasks/cancel` settles one; the refusals (-32021 without the extension,
//! -32602 for unknown tasks, -32020 for a lying `Mcp-Name`); and the limits at N and N+1
//! (`--max-tasks-per-core`: the call runs synchronously instead; `--task-retention-secs`).
//! Method: the real binary with `--tools conformance` on 127.0.0.1:0, both drivers, `--threads
//! 2` (a fresh connection lands on the other core about half the time, so hand-offs by
//! `Mcp-Name` are exercised), raw HTTP/1.1, counters from `/metrics`.
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// One 2026-07-28 request on a fresh connection, with its routing headers; `declare` puts the
/// extension in the request's client capabilities. Returns the HTTP status and the JSON-RPC
/// message (the last event of an SSE answer).
fn modern(server: &Server, method: &str, mut params: Value, declare: bool) -> (u16, Value) {
    let capabilities = if declare {
        json!({ "elicitation": {}, "extensions": { EXTENSION: {} } })
    } else {
        json!({ "elicitation": {} })
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str);
    let name = name.map(str::to_owned);
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let r = post(server, &headers, &body.to_string());
    let message = if r.header("Content-Type").is_some_and(|t| t.starts_with("text/event-stream")) {
        messages(&r.events()).last().expect("an event").json()
    } else {
        r.json()
    };
    (r.status, message)
}

fn call_tool(server: &Server, tool: &str, arguments: Value, declare: bool) -> (u16, Value) {
    modern(server, "tools/call", json!({ "name": tool, "arguments": arguments }), declare)
}

fn get(server: &Server, task_id: &str) -> Value {
    let (status, message) = modern(server, "tasks/get", json!({ "taskId": task_id }), true);
    assert_eq!(status, 200, "{message}");
    message
}

/// Polls `tasks/get` (each on a fresh connection) until `done` holds for the result.
fn get_until(server: &Server, task_id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut result = Value::Null;
    let reached = poll_until(Duration::from_secs(10), || {
        result = get(server, task_id)["result"].clone();
        done(&result)
    });
    assert!(reached, "task {task_id} stuck at {result}");
    result
}

fn terminal(result: &Value) -> bool {
    matches!(result["status"].as_str(), Some("completed" | "failed" | "cancelled"))
}

/// A task's id from a `CreateTaskResult` answer, after checking its shape.
fn created(message: &Value) -> String {
    let result = &message["result"];
    assert_eq!(result["resultType"], "task", "{message}");
    for absent in ["task", "result", "error", "inputRequests", "requestState", "ttl"] {
        assert!(result.get(absent).is_none(), "{absent} in {message}");
    }
    assert!(result["ttlMs"].as_u64().is_some_and(|t| t > 0), "{message}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

#[test]
fn tasks_run_detached_and_answer_from_any_core() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "2", "--tools", "conformance"]);
        let (_, discovered) = modern(&server, "server/discover", json!({}), false);
        let capabilities = &discovered["result"]["capabilities"];
        assert_eq!(capabilities["extensions"][EXTENSION], json!({}), "{driver}");
        assert!(capabilities.get("tasks").is_none());
        // Several tasks, so some are polled from the core that did not create them.
        let ids: Vec<String> = (0..6)
            .map(|i| {
                let arguments = json!({ "seconds": 0.3, "label": format!("t{i}") });
                let (status, message) = call_tool(&server, "slow_compute", arguments, true);
                assert_eq!(status, 200, "{driver}: {message}");
                created(&message)
            })
            .collect();
        for id in &ids {
            let now = get(&server, id)["result"].clone();
            assert_eq!(now["taskId"], id.as_str(), "{driver}: resolves at once");
            assert_eq!(now["resultType"], "complete");
        }
        for (i, id) in ids.iter().enumerate() {
            let done = get_until(&server, id, terminal);
            assert_eq!(done["status"], "completed", "{driver}: {done}");
            assert_eq!(done["result"]["content"][0]["text"], format!("Computed t{i} in 0.3s"));
        }
        let text = scrape(&metrics);
        assert_eq!(metric(&text, "tidemark_tasks_created_total"), 6, "{driver}");
        // The same tool without the extension answers synchronously.
        let (_, plain) = call_tool(&server, "slow_compute", json!({ "seconds": 0.1 }), false);
        assert_eq!(plain["result"]["resultType"], "complete", "{driver}: {plain}");
        assert!(plain["result"].get("taskId").is_none());
    }
}

#[test]
fn update_feeds_a_waiting_task_and_cancel_settles_one() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2", "--tools", "conformance"]);
        let arguments = json!({ "filename": "a.txt" });
        let id = created(&call_tool(&server, "confirm_delete", arguments, true).1);
        let waiting = get_until(&server, &id, |r| r["status"] == "input_required");
        let keys: Vec<&String> =
            waiting["inputRequests"].as_object().expect("map").keys().collect();
        assert_eq!(keys.len(), 1, "{driver}: {waiting}");
        assert_eq!(waiting["inputRequests"][keys[0]]["method"], "elicitation/create");
        let answer =
            json!({ keys[0].as_str(): { "action": "accept", "content": { "confirm": true } } });
        let params = json!({ "taskId": id, "inputResponses": answer });
        let (status, ack) = modern(&server, "tasks/update", params, true);
        assert_eq!((status, &ack["result"]), (200, &json!({ "resultType": "complete" })));
        let done = get_until(&server, &id, terminal);
        assert_eq!(done["result"]["content"][0]["text"], "Deleted a.txt", "{driver}");

        let id = created(&call_tool(&server, "slow_compute", json!({ "seconds": 60 }), true).1);
        for _ in 0..2 {
            // The second cancel (of a cancelled task) is the same ack.
            let (status, ack) = modern(&server, "tasks/cancel", json!({ "taskId": id }), true);
            assert_eq!((status, &ack["result"]), (200, &json!({ "resultType": "complete" })));
            assert_eq!(get(&server, &id)["result"]["status"], "cancelled", "{driver}");
        }
    }
}

#[test]
fn refusals_name_the_extension_the_task_or_the_header() {
    let server = Server::on("epoll", &["--threads", "2", "--tools", "conformance"]);
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let params = json!({ "taskId": "gate-test", "inputResponses": {} });
        let (status, message) = modern(&server, method, params, false);
        assert_eq!((status, message["error"]["code"].as_i64()), (400, Some(-32021)), "{method}");
        let required = &message["error"]["data"]["requiredCapabilities"]["extensions"];
        assert_eq!(required[EXTENSION], json!({}));
    }
    let (status, message) = call_tool(&server, "failing_job", json!({}), false);
    assert_eq!((status, message["error"]["code"].as_i64()), (400, Some(-32021)), "{message}");
    let unknown = "tasks-conformance-nonexistent-12345";
    // Unknown shapes, then ids of this node (00) on core 1 (exists, unknown random) and on
    // core 0xffff (does not exist).
    for id in [
        unknown,
        "0001ffffffffffffffffffffffffffffffff",
        "ffffffffffffffffffffffffffffffffffff",
        "000001ffffffffffffffffffffffffffffffff",
        "00ffffffffffffffffffffffffffffffffffff",
    ] {
        let (_, message) = modern(&server, "tasks/get", json!({ "taskId": id }), true);
        assert_eq!(message["error"]["code"], -32602, "{id}: {message}");
    }
    let (_, message) =
        modern(&server, "tasks/update", json!({ "taskId": unknown, "inputResponses": 1 }), true);
    assert_eq!(message["error"]["code"], -32602);
    // Mcp-Name must be the body's task id.
    let id = created(&call_tool(&server, "slow_compute", json!({ "seconds": 60 }), true).1);
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {
        "taskId": id,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "extensions": { EXTENSION: {} } },
        },
    }});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tasks/get"),
        ("Mcp-Name", "0000ffffffffffffffffffffffffffffffff"),
    ];
    let r = post(&server, &headers, &body.to_string());
    assert_eq!((r.status, r.json()["error"]["code"].as_i64()), (400, Some(-32020)));
    // tasks/result and tasks/list do not exist in this revision.
    for method in ["tasks/result", "tasks/list"] {
        let (_, message) = modern(&server, method, json!({}), true);
        assert_eq!(message["error"]["code"], -32601, "{method}");
    }
}

#[test]
fn a_full_store_runs_calls_synchronously_and_tasks_expire_after_their_retention() {
    // --max-tasks-per-core 2: the 2nd call is a task, the 3rd runs in its request (counted);
    // --task-retention-secs 1: gettable until then, -32602 after, and room again.
    for driver in DRIVERS {
        let args = [
            "--threads",
            "1",
            "--tools",
            "conformance",
            "--max-tasks-per-core",
            "2",
            "--task-retention-secs",
            "1",
        ];
        let (server, metrics) = server_with_metrics(driver, &args);
        let started = Instant::now();
        let arguments = json!({ "seconds": 0.1 });
        let first = created(&call_tool(&server, "slow_compute", arguments.clone(), true).1);
        // The task was created before its answer came: past this + its retention it is gone.
        let first_answered = Instant::now();
        created(&call_tool(&server, "slow_compute", arguments.clone(), true).1);
        let (_, third) = call_tool(&server, "slow_compute", arguments.clone(), true);
        assert_eq!(third["result"]["resultType"], "complete", "{driver}: {third}");
        assert_eq!(third["result"]["content"][0]["text"], "Computed slow_compute in 0.1s");
        assert_eq!(metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"tasks\"}"), 1);
        assert!(started.elapsed() < Duration::from_millis(900), "the test needs the ttl ahead");
        assert_eq!(get(&server, &first)["result"]["taskId"], first.as_str());
        // Elapsed time is what this tests: --task-retention-secs 1 counts from the task's
        // creation, which came before `first_answered`, so from then + 1 s on it has expired.
        std::thread::sleep(Duration::from_secs(1).saturating_sub(first_answered.elapsed()));
        let (_, gone) = modern(&server, "tasks/get", json!({ "taskId": first }), true);
        assert_eq!(gone["error"]["code"], -32602, "{driver}: {gone}");
        created(&call_tool(&server, "slow_compute", arguments, true).1);
    }
}
