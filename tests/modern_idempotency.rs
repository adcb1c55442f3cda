//! Goal: tidemark's `Idempotency-Key` extension in the 2026-07-28 era (CONTRACT §5): a keyed
//! `tools/call` whose response stream drops keeps running, and a retry with the same key gets
//! that execution's progress and result with its own id and token (one execution); a retry
//! while it still runs waits up to `--owed-wait-ms`, then 409 -31004; the same key with other
//! arguments is 422 -31005; without a key a drop cancels. Method: the real binary with
//! `--threads 2` (keys are handed to their owner core), raw HTTP/1.1 over blocking sockets, the
//! demo `slow_counter` and its process-wide execution counter (`get_counter`).
mod support;

use serde_json::{json, Value};
use support::*;

fn keyed_call(
    id: u64,
    token: &str,
    arguments: Value,
    key: Option<&str>,
) -> (Vec<(String, String)>, String) {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "slow_counter", "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": { "name": "keyed-test", "version": "1" },
                "progressToken": token,
            },
        },
    });
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), "2026-07-28".to_owned()),
        ("Mcp-Method".to_owned(), "tools/call".to_owned()),
        ("Mcp-Name".to_owned(), "slow_counter".to_owned()),
    ];
    if let Some(key) = key {
        headers.push(("Idempotency-Key".to_owned(), key.to_owned()));
    }
    (headers, body.to_string())
}

fn raw(server: &Server, call: &(Vec<(String, String)>, String)) -> Vec<u8> {
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend(call.0.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    request("POST", &server.path, &server.host(), &headers, Some(&call.1))
}

/// The execution count of `slow_counter`, asked in the 2026-07-28 era.
fn executions(server: &Server) -> u64 {
    let body = json!({"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"get_counter","arguments":{},
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "get_counter"),
    ];
    let r = post(server, &headers, &body.to_string());
    let v = r.json();
    v["result"]["content"][0]["text"].as_str().expect("text").parse().expect("number")
}

#[test]
fn a_dropped_keyed_call_runs_once_and_its_retry_gets_the_outcome() {
    for driver in DRIVERS {
        let server =
            Server::on(driver, &["--tools", "demo", "--threads", "2", "--owed-wait-ms", "10000"]);
        let args = json!({ "steps": 4, "delay_ms": 150 });
        let first = keyed_call(1, "t1", args.clone(), Some("k-1"));
        let mut s = SseStream::open(&server, &raw(&server, &first));
        let ev = s.next_event().expect("first progress").json();
        assert_eq!(ev["params"]["progressToken"], "t1", "{driver}: {ev}");
        s.cut();
        // The retry (new id, new token) waits for the detached call, then gets all of it.
        let retry = keyed_call(2, "t2", args.clone(), Some("k-1"));
        let evs = messages(&SseStream::open(&server, &raw(&server, &retry)).rest());
        assert_eq!(evs.len(), 5, "{driver}: 4 progress + result");
        for (i, ev) in evs[..4].iter().enumerate() {
            let v = ev.json();
            assert_eq!(v["params"]["progressToken"], "t2", "{driver}: {v}");
            assert_eq!(v["params"]["progress"].as_f64(), Some((i + 1) as f64), "{driver}: {v}");
        }
        let last = evs[4].json();
        assert_eq!(last["id"], 2, "{driver}: {last}");
        assert_eq!(last["result"]["resultType"], "complete", "{driver}: {last}");
        assert_eq!(
            executions(&server),
            1,
            "{driver}: one execution for a dropped call and its retry"
        );

        // Other arguments under the same key: 422.
        let other = keyed_call(3, "t3", json!({ "steps": 1 }), Some("k-1"));
        let r = exchange(&server, &raw(&server, &other));
        assert_eq!(r.status, 422, "{driver}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], -31005, "{driver}");
        assert_eq!(executions(&server), 1, "{driver}");
    }
}

#[test]
fn a_retry_while_the_keyed_call_runs_waits_then_gets_409() {
    let server =
        Server::on("uring", &["--tools", "demo", "--threads", "2", "--owed-wait-ms", "200"]);
    let args = json!({ "steps": 3, "delay_ms": 1000 });
    let mut s =
        SseStream::open(&server, &raw(&server, &keyed_call(1, "t1", args.clone(), Some("k-2"))));
    assert!(s.next_event().is_some(), "the first call streams");
    let r = exchange(&server, &raw(&server, &keyed_call(2, "t2", args, Some("k-2"))));
    assert_eq!(r.status, 409, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], -31004, "{v}");
    assert_eq!(v["error"]["data"]["inFlight"], true, "{v}");
    assert!(r.header("Mcp-Stream-Resumable").is_none(), "nothing to resume in 2026-07-28");
}

#[test]
fn without_a_key_a_dropped_call_is_cancelled_and_a_retry_runs_again() {
    let server = Server::on("uring", &["--tools", "demo", "--threads", "2"]);
    let args = json!({ "steps": 4, "delay_ms": 150 });
    let mut s = SseStream::open(&server, &raw(&server, &keyed_call(1, "t1", args.clone(), None)));
    assert!(s.next_event().is_some(), "the first call streams");
    s.cut();
    let evs =
        messages(&SseStream::open(&server, &raw(&server, &keyed_call(2, "t2", args, None))).rest());
    assert_eq!(evs.last().expect("result").json()["id"], 2);
    assert_eq!(executions(&server), 2, "plain spec behaviour: the retry is a second execution");
}

/// Goal: CONTRACT §5 "a task-augmented call with a known key returns the same task": the retry
/// gets the first call's task (one task, one execution), not a new one. Method: the tasks
/// extension's `slow_compute` (--tools conformance) called twice with one key, the extension
/// declared; both answers name the same `taskId`.
#[test]
fn a_keyed_task_call_retried_returns_the_same_task() {
    let server = Server::on("uring", &["--tools", "conformance", "--threads", "2"]);
    let task_call = |id: u64| {
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {
                "name": "slow_compute", "arguments": { "seconds": 1 },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities":
                        { "extensions": { "io.modelcontextprotocol/tasks": {} } },
                    "io.modelcontextprotocol/clientInfo": { "name": "keyed-task", "version": "1" },
                },
            },
        });
        let headers = [
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "slow_compute"),
            ("Idempotency-Key", "task-key"),
        ];
        let r = post(&server, &headers, &body.to_string());
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let first = task_call(1);
    let retry = task_call(2);
    assert_eq!(first["result"]["resultType"], "task", "{first}");
    let task = first["result"]["taskId"].as_str().expect("a task id");
    assert_eq!(retry["id"], 2, "{retry}");
    assert_eq!(retry["result"]["taskId"], task, "the retry names the first call's task: {retry}");
}

/// `call` with its `_meta` clientInfo replaced by `info` (`None`: removed).
fn with_client_info(
    call: (Vec<(String, String)>, String),
    info: Option<Value>,
) -> (Vec<(String, String)>, String) {
    let (headers, body) = call;
    let mut v: Value = serde_json::from_str(&body).expect("json");
    let meta = v["params"]["_meta"].as_object_mut().expect("_meta");
    match info {
        Some(info) => meta.insert("io.modelcontextprotocol/clientInfo".into(), info),
        None => meta.remove("io.modelcontextprotocol/clientInfo"),
    };
    (headers, v.to_string())
}

/// Goal: issue 17 item 4: keys are scoped so no two distinct (clientInfo name, version, key)
/// triples meet: `("a\0b","c")` and `("a","b\0c")` were one client (NUL-joined scope), and a
/// request without clientInfo was the client `("","")`; requests without clientInfo share one
/// documented scope. Method: the same keyed `slow_counter` call under each pair, counting
/// executions (a dedup hit does not run the tool).
#[test]
fn client_infos_that_collided_get_distinct_records() {
    let server = Server::on("uring", &["--tools", "demo", "--threads", "2"]);
    let args = json!({ "steps": 1, "delay_ms": 1 });
    let run = |id: u64, info: Option<Value>| {
        let c = with_client_info(keyed_call(id, "t", args.clone(), Some("k-scope")), info);
        let evs = messages(&SseStream::open(&server, &raw(&server, &c)).rest());
        let last = evs.last().expect("result").json();
        assert_eq!(last["id"], id, "{last}");
        assert_eq!(last["result"]["resultType"], "complete", "{last}");
    };
    run(1, Some(json!({ "name": "a\u{0}b", "version": "c" })));
    assert_eq!(executions(&server), 1);
    run(2, Some(json!({ "name": "a", "version": "b\u{0}c" })));
    assert_eq!(executions(&server), 2, "another client: its own record, not a dedup hit");
    run(3, Some(json!({ "name": "a", "version": "b\u{0}c" })));
    assert_eq!(executions(&server), 2, "the same client: a dedup hit");
    run(4, None);
    assert_eq!(executions(&server), 3);
    run(5, Some(json!({ "name": "", "version": "" })));
    assert_eq!(executions(&server), 4, "empty clientInfo is not the missing one");
    run(6, None);
    assert_eq!(executions(&server), 4, "requests without clientInfo share one scope");
}

/// Goal: an `Idempotency-Key` whose bytes are not UTF-8 is refused (400, JSON-RPC -32600), not
/// decoded lossily (`k\xff` and `k\xfe` were one key, U+FFFD). Method: both keys on a keyed
/// `slow_counter` call; neither runs the tool.
#[test]
fn idempotency_keys_that_are_not_utf8_are_refused() {
    let server = Server::on("uring", &["--tools", "demo", "--threads", "2"]);
    let call = keyed_call(1, "t", json!({ "steps": 1, "delay_ms": 1 }), Some("k-PLACEHOLDER"));
    let good = raw(&server, &call);
    let at = good.windows(13).position(|w| w == b"k-PLACEHOLDER").expect("placeholder");
    for key in [&b"k\xff"[..], &b"k\xfe"[..]] {
        let bad = [&good[..at], key, &good[at + 13..]].concat();
        let r = exchange(&server, &bad);
        assert_eq!(r.status, 400, "{key:?}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "{key:?}: {v}");
        let message = v["error"]["message"].as_str().expect("message");
        assert!(message.contains("Idempotency-Key"), "{key:?}: {message}");
    }
    assert_eq!(executions(&server), 0, "a refused key runs nothing");
}
