//! The audit trail (`--audit-log`, docs/audit.md), end to end on the real binary: every
//! audited call of a mixed run has exactly one line with the outcome its client saw; the file
//! rotates at its byte limit; SIGHUP opens the path again after the file was moved; a writer
//! that cannot keep up never slows a worker, and the drops are counted in the file and in
//! `/metrics`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-audit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The audit lines in `path` (waits up to `bound` for at least `n` of them).
fn lines(path: &Path, n: usize, bound: Duration) -> Vec<Value> {
    let read = || -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
    };
    poll_until(bound, || read().len() >= n);
    read()
}

/// The line whose `id` is `id` (exactly one).
fn line_of<'a>(all: &'a [Value], id: &Value) -> &'a Value {
    let found: Vec<&Value> = all.iter().filter(|l| &l["id"] == id).collect();
    assert_eq!(found.len(), 1, "exactly one line for id {id}: {found:?}");
    found[0]
}

/// A 2026-07-28 request: headers and body.
fn modern(
    id: u64,
    method: &str,
    params: Value,
    key: Option<&str>,
) -> (Vec<(String, String)>, String) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "audit-test", "version": "7" },
    });
    let name = params.get("name").or(params.get("uri")).and_then(Value::as_str).unwrap_or("");
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), "2026-07-28".to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
        ("Mcp-Name".to_owned(), name.to_owned()),
    ];
    if let Some(key) = key {
        headers.push(("Idempotency-Key".to_owned(), key.to_owned()));
    }
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    (headers, body.to_string())
}

fn post_modern(server: &Server, request: &(Vec<(String, String)>, String)) -> Response {
    let headers: Vec<(&str, &str)> =
        request.0.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    post(server, &headers, &request.1)
}

/// Goal: every audited call of a mixed run (both eras) has exactly one line, with the outcome
/// its client saw: a result, a tool error, an unknown tool, a 409 re-POST refusal, a keyed
/// dedup hit, a resources/read and a prompts/get; nothing else is audited.
/// Method: each call made over real sockets, then the file read and matched by request id.
#[test]
fn every_call_of_a_mixed_run_has_one_line_with_its_outcome() {
    let dir = scratch("mixed");
    let path = dir.join("audit.log");
    let log = path.to_str().unwrap();
    let server = Server::with_admin("uring", &["--tools", "demo,conformance", "--audit-log", log]);
    let sid = open_session(&server);
    let in_session = [("Mcp-Session-Id", sid.as_str())];
    // Legacy: a result, a tool error, an unknown tool.
    call_stream(&server, &sid, &call(101, "echo", r#"{"text":"hi"}"#, false), &[]).rest();
    call_stream(&server, &sid, &call(102, "test_error_handling", "{}", false), &[]).rest();
    let unknown = post(&server, &in_session, &call(103, "no_such_tool", "{}", false));
    assert!(unknown.text().contains("-32602"), "{}", unknown.text());
    // Legacy: resources/read and prompts/get.
    let read = r#"{"jsonrpc":"2.0","id":105,"method":"resources/read","params":{"uri":"test://static-text"}}"#;
    post(&server, &in_session, read);
    let prompt = r#"{"jsonrpc":"2.0","id":106,"method":"prompts/get","params":{"name":"test_simple_prompt"}}"#;
    post(&server, &in_session, prompt);
    // Not audited: a list.
    post(&server, &in_session, r#"{"jsonrpc":"2.0","id":107,"method":"tools/list"}"#);
    // Legacy: a call cut while it runs, re-POSTed: 409 (the resume hint), then run to its end.
    let slow = call(104, "slow_counter", r#"{"steps":3,"delay_ms":300}"#, true);
    let mut s = call_stream(&server, &sid, &slow, &[]);
    s.next_event().expect("priming");
    s.cut();
    let again = post(&server, &in_session, &slow);
    assert_eq!(again.status, 409, "{}", again.text());
    // Resumed to its end, so the session holds nothing owed.
    let hint = again.json()["error"]["data"]["owedStreams"][0]["lastEventId"].clone();
    if let Some(last) = hint.as_str() {
        resume(&server, &sid, last).rest();
    }
    // 2026-07-28: a result, a keyed call and its dedup hit, a read.
    let echo = modern(201, "tools/call", json!({"name":"echo","arguments":{"text":"x"}}), None);
    assert_eq!(post_modern(&server, &echo).status, 200);
    let keyed = |id| {
        modern(id, "tools/call", json!({"name":"echo","arguments":{"text":"k"}}), Some("key-1"))
    };
    assert_eq!(post_modern(&server, &keyed(202)).status, 200);
    assert_eq!(post_modern(&server, &keyed(203)).status, 200);
    let read = modern(204, "resources/read", json!({"uri":"test://static-text"}), None);
    assert_eq!(post_modern(&server, &read).status, 200);

    // Eleven lines: 101-106 and 201-204, 104 twice (its run, and the refused re-POST).
    let all = lines(&path, 11, Duration::from_secs(10));
    let outcome = |id: Value| line_of(&all, &id)["outcome"].clone();
    assert_eq!(outcome(json!(101)), "result");
    let tool_error = line_of(&all, &json!(102));
    assert_eq!(
        (tool_error["outcome"].clone(), tool_error["tool_error"].clone()),
        (json!("result"), json!(true))
    );
    let unknown = line_of(&all, &json!(103));
    assert_eq!(
        (unknown["outcome"].clone(), unknown["error_code"].clone()),
        (json!("error"), json!(-32602))
    );
    let runs: Vec<&Value> = all.iter().filter(|l| l["id"] == json!(104)).collect();
    assert_eq!(runs.len(), 2, "the cut call's run and its refused re-POST: {runs:?}");
    assert!(runs.iter().any(|l| l["outcome"] == "refused" && l["status"] == 409), "{runs:?}");
    assert!(
        runs.iter().any(|l| l["outcome"] == "result"),
        "the run ends with its result: {runs:?}"
    );
    assert_eq!(outcome(json!(105)), "result");
    assert_eq!(line_of(&all, &json!(105))["resource"], "test://static-text");
    assert_eq!(outcome(json!(106)), "result");
    assert_eq!(line_of(&all, &json!(106))["prompt"], "test_simple_prompt");
    assert_eq!(outcome(json!(201)), "result");
    assert_eq!(outcome(json!(202)), "result");
    assert_eq!(outcome(json!(203)), "dedup");
    assert_eq!(line_of(&all, &json!(203))["idempotency_key"], "key-1");
    assert_eq!(outcome(json!(204)), "result");
    assert!(all.iter().all(|l| l["id"] != json!(107)), "a list is not audited");
    // The fields of one legacy and one modern line.
    let legacy = line_of(&all, &json!(101));
    assert_eq!(legacy["session"], sid.as_str());
    assert_eq!(legacy["era"], "2025-11-25");
    assert_eq!(legacy["tool"], "echo");
    assert_eq!(legacy["node"], 0);
    assert!(legacy["time"].as_str().unwrap().ends_with('Z'), "{legacy}");
    assert!(legacy["duration_us"].as_u64().is_some(), "{legacy}");
    assert_eq!(legacy["arguments_sha256"].as_str().unwrap().len(), 64);
    let fresh = line_of(&all, &json!(201));
    assert_eq!(fresh["session"], Value::Null);
    assert_eq!(fresh["era"], "2026-07-28");
    assert_eq!(fresh["client"], "audit-test/7");
    // Same arguments, same digest; other arguments, another.
    let digest = |id: u64| line_of(&all, &json!(id))["arguments_sha256"].clone();
    assert_eq!(digest(202), digest(203));
    assert_ne!(digest(201), digest(202));
    assert_eq!(all.len(), 11, "nothing else audited: {all:#?}");
    let metrics = scrape(&server.metrics());
    assert_eq!(metric(&metrics, "tidemark_audit_lines_total"), 11);
    assert_eq!(metric(&metrics, "tidemark_audit_lines_dropped_total"), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 2026-07-28 request that declares the tasks extension (`Mcp-Name`: the tool or the task).
fn task_request(method: &str, params: Value) -> (Vec<(String, String)>, String) {
    let (mut headers, body) = modern(1, method, params.clone(), None);
    let mut body: Value = serde_json::from_str(&body).unwrap();
    let tasks = json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } });
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = tasks;
    if let Some(task) = params.get("taskId").and_then(Value::as_str) {
        headers.retain(|(name, _)| name != "Mcp-Name");
        headers.push(("Mcp-Name".to_owned(), task.to_owned()));
    }
    (headers, body.to_string())
}

/// The task id a `tools/call` of `slow_compute` for `seconds` was answered with.
fn start_task(server: &Server, seconds: f64) -> String {
    let params = json!({ "name": "slow_compute", "arguments": { "seconds": seconds } });
    let answer = post_modern(server, &task_request("tools/call", params));
    let text = answer.text();
    let message: Value = match text.rfind("data: ") {
        Some(at) => serde_json::from_str(text[at + 6..].lines().next().unwrap()).unwrap(),
        None => answer.json(),
    };
    assert_eq!(message["result"]["resultType"], "task", "{message}");
    message["result"]["taskId"].as_str().unwrap().to_owned()
}

/// Goal: a 2026-07-28 call that becomes a task has its line (naming the task, `task_created`)
/// and the task exactly one end line (`task`) with the task's outcome: completed (`result`),
/// cancelled by `tasks/cancel`, and deleted while running at its retention's end (`expired`).
/// `tasks/get` and `tasks/cancel` have no line.
/// Method: `slow_compute` tasks over real sockets (`--task-retention-secs 2`), polled and
/// cancelled, then the file read and matched by task id.
#[test]
fn a_task_has_one_end_line_with_its_outcome() {
    let dir = scratch("tasks");
    let path = dir.join("audit.log");
    let log = path.to_str().unwrap();
    let args = ["--tools", "conformance", "--audit-log", log, "--task-retention-secs", "2"];
    let server = Server::with_admin("uring", &args);
    let completed = start_task(&server, 0.2);
    let cancelled = start_task(&server, 60.0);
    let expired = start_task(&server, 60.0);
    let cancel = task_request("tasks/cancel", json!({ "taskId": cancelled }));
    assert_eq!(post_modern(&server, &cancel).status, 200);
    let done = poll_until(Duration::from_secs(10), || {
        let get = task_request("tasks/get", json!({ "taskId": completed }));
        post_modern(&server, &get).json()["result"]["status"] == "completed"
    });
    assert!(done, "task {completed} completes");
    // Three call lines, three end lines (the expired one after its 2 s retention).
    let all = lines(&path, 6, Duration::from_secs(15));
    assert_eq!(all.len(), 6, "nothing else audited: {all:#?}");
    for (task, outcome) in
        [(&completed, "result"), (&cancelled, "cancelled"), (&expired, "expired")]
    {
        let created: Vec<&Value> = all.iter().filter(|l| l["task_created"] == **task).collect();
        assert_eq!(created.len(), 1, "the call's line names {task}: {all:#?}");
        assert_eq!(created[0]["outcome"], "result");
        let ended: Vec<&Value> = all.iter().filter(|l| l["task"] == **task).collect();
        assert_eq!(ended.len(), 1, "one end line for {task}: {all:#?}");
        let end = ended[0];
        assert_eq!(end["outcome"], outcome, "{end}");
        assert_eq!((&end["method"], &end["tool"]), (&json!("tools/call"), &json!("slow_compute")));
        assert_eq!(end["arguments_sha256"], created[0]["arguments_sha256"]);
        assert_eq!(end["era"], "2026-07-28");
    }
    let duration = |task: &str| {
        all.iter().find(|l| l["task"] == task).unwrap()["duration_us"].as_u64().unwrap()
    };
    assert!(duration(&completed) >= 200_000, "counted from the task's creation: {all:#?}");
    assert!(duration(&expired) >= 2_000_000, "{all:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: the file rotates at `--audit-log-max-bytes`: no file is past the limit, at most
/// `--audit-log-keep` old files are kept, and no line is lost or split.
/// Method: a limit of 2 000 bytes, keep 2, 30 calls; the files read back.
#[test]
fn the_file_rotates_at_its_byte_limit() {
    let dir = scratch("rotate");
    let path = dir.join("audit.log");
    let args = [
        "--audit-log",
        path.to_str().unwrap(),
        "--audit-log-max-bytes",
        "2000",
        "--audit-log-keep",
        "2",
    ];
    let server = Server::with_admin("uring", &args);
    let sid = open_session(&server);
    for id in 0..30 {
        call_stream(&server, &sid, &call(id, "echo", r#"{"text":"r"}"#, false), &[]).rest();
    }
    // The writer writes every AUDIT_FLUSH_MS: wait for the lines in the files, not for the
    // count of lines queued (the server is SIGKILLed below, which loses what is unwritten).
    wait_until(Duration::from_secs(10), "the newest lines written", || {
        metric(&scrape(&server.metrics()), "tidemark_audit_lines_total") == 30
            && std::fs::read_to_string(&path).is_ok_and(|t| t.contains("\"id\":29,"))
    });
    drop(server);
    let mut total = 0;
    let mut ids = Vec::new();
    for name in ["audit.log", "audit.log.1", "audit.log.2"] {
        let text = std::fs::read_to_string(dir.join(name)).expect(name);
        assert!(text.len() <= 2000, "{name} is {} bytes", text.len());
        assert!(text.len() > 2000 - 400, "{name} filled up to the limit ({} bytes)", text.len());
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("whole lines");
            ids.push(v["id"].as_u64().unwrap());
            total += 1;
        }
    }
    assert!(!dir.join("audit.log.3").exists(), "only two old files kept");
    ids.sort();
    assert!(total < 30, "older lines went with the third old file ({total} kept)");
    assert_eq!(*ids.last().unwrap(), 29, "the newest line is kept");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: SIGHUP opens the path again: lines after a `mv` + SIGHUP go to a new file at the
/// path, none are lost. Method: calls, mv, SIGHUP, calls; both files read back.
#[test]
fn sighup_reopens_the_file_after_it_was_moved() {
    let dir = scratch("sighup");
    let path = dir.join("audit.log");
    let moved = dir.join("audit.log.old");
    let server = Server::with_admin("uring", &["--audit-log", path.to_str().unwrap()]);
    let sid = open_session(&server);
    let echo =
        |id| call_stream(&server, &sid, &call(id, "echo", r#"{"text":"s"}"#, false), &[]).rest();
    for id in 0..3 {
        echo(id);
    }
    assert_eq!(lines(&path, 3, Duration::from_secs(10)).len(), 3);
    std::fs::rename(&path, &moved).unwrap();
    server.signal("HUP");
    wait_until(Duration::from_secs(10), "the path opened again", || path.exists());
    for id in 3..5 {
        echo(id);
    }
    let after = lines(&path, 2, Duration::from_secs(10));
    let ids: Vec<u64> = after.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![3, 4]);
    assert_eq!(lines(&moved, 3, Duration::ZERO).len(), 3, "the moved file keeps its lines");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: a writer that cannot keep up never slows a worker: calls keep completing while the
/// audit log is a FIFO nobody reads, the lines past `--audit-queue-lines` are dropped and
/// counted, and the file says how many once its reader comes back.
/// Method: a FIFO opened by this test but not read (the pipe fills, the writer blocks), a
/// queue of 4 lines, 300 calls that must all complete; then the FIFO read to its end.
#[test]
fn a_stalled_writer_never_slows_a_worker_and_drops_are_reported() {
    let dir = scratch("stall");
    let fifo = dir.join("audit.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    // The read end first (non-blocking open), so the server's open for writing finds a reader.
    use std::os::unix::fs::OpenOptionsExt;
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(0o4000) // O_NONBLOCK
        .open(&fifo)
        .expect("open the FIFO's read end");
    let args = ["--audit-log", fifo.to_str().unwrap(), "--audit-queue-lines", "4"];
    let server = Server::with_admin("uring", &args);
    let sid = open_session(&server);
    // Each line is ~450 bytes: 300 calls are ~135 KB, past the pipe's 64 KiB.
    let body = format!(r#"{{"text":"{}"}}"#, "p".repeat(100));
    for id in 0..300 {
        let evs = call_stream(&server, &sid, &call(id, "echo", &body, false), &[]).rest();
        assert!(evs.last().is_some_and(|e| e.json()["result"].is_object()), "call {id} completed");
    }
    let metrics = scrape(&server.metrics());
    let dropped = metric(&metrics, "tidemark_audit_lines_dropped_total");
    let queued = metric(&metrics, "tidemark_audit_lines_total");
    assert!(dropped > 0, "the full queue dropped lines ({queued} queued)");
    assert_eq!(dropped + queued, 300, "every call counted once");
    // The reader comes back: the file says how many were dropped.
    use std::io::Read;
    let mut text = Vec::new();
    let mut buf = [0u8; 65536];
    poll_until(Duration::from_secs(10), || {
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&text).contains("audit_dropped")
    });
    let text = String::from_utf8_lossy(&text);
    let reported: u64 = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["audit_dropped"].as_u64())
        .sum();
    assert!(reported > 0, "the file reports the drops");
    assert!(reported <= dropped, "{reported} reported, {dropped} dropped");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Goal: the audit limits are checked at start: `--audit-log-keep` at its maximum starts, one
/// past it does not; a zero queue or byte limit does not.
/// Goal: a full disk never slows a worker (issue 42 item 2): every call completes, the server
/// keeps answering, and the log says once that audit lines are being lost.
/// Method: `--audit-log /dev/full` (every write fails with ENOSPC), 200 calls, then a ping.
#[test]
fn a_full_disk_loses_audit_lines_never_a_call() {
    let dir = scratch("full");
    let log = dir.join("server.log");
    let args = ["--metrics-listen", "127.0.0.1:0", "--audit-log", "/dev/full"];
    let server = Server::start_logged(&args, &[], &log);
    let sid = open_session(&server);
    let started = std::time::Instant::now();
    for id in 0..200 {
        let evs =
            call_stream(&server, &sid, &call(id, "echo", r#"{"text":"x"}"#, false), &[]).rest();
        assert!(evs.last().is_some_and(|e| e.json()["result"].is_object()), "call {id} completed");
    }
    eprintln!("200 calls with the audit log on a full disk: {:?}", started.elapsed());
    let ping = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
    assert_eq!(post(&server, &[("Mcp-Session-Id", &sid)], ping).status, 200);
    let metrics = scrape(&server.metrics());
    assert_eq!(metric(&metrics, "tidemark_audit_lines_total"), 200, "every call's line queued");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(Duration::from_secs(5), "the loss said in the log", || {
        text().contains("audit log: writes fail")
    });
    std::thread::sleep(Duration::from_millis(200)); // a few more of the writer's turns
    assert_eq!(text().matches("audit log: writes fail").count(), 1, "said once, not every turn");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_audit_limits_are_checked_at_their_bounds() {
    let dir = scratch("limits");
    let log = dir.join("a.log");
    let log = log.to_str().unwrap();
    let ok = Server::start(&["--audit-log", log, "--audit-log-keep", "1000"]);
    drop(ok);
    for bad in [
        vec!["--audit-log", log, "--audit-log-keep", "1001"],
        vec!["--audit-log", log, "--audit-queue-lines", "0"],
        vec!["--audit-log", log, "--audit-log-max-bytes", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--listen", "127.0.0.1:0"])
            .args(&bad)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{bad:?} refused");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
