//! Goal: several nodes behind one balancer (issue 19, CONTRACT §9). Every session id and task id
//! names its node (`--node-id`) as a fixed two-hex-digit prefix ahead of its core; a request
//! naming another node's session gets 404, one naming another node's task the unknown task's
//! -32602, each with a message saying it was misrouted, and `tidemark_misrouted_total` counts
//! them, while the named node still serves them; `--node-id` takes 0..=255 and refuses 256. A
//! drain waits for a 2026-07-28 keyed call whose client dropped and for a working task before
//! the process exits 0, while `/readyz` fails at once.
//! Method: the real binaries (two nodes, both drivers, `--threads 2` so hand-offs between cores
//! mix with the node check) on 127.0.0.1:0, raw HTTP/1.1, counters from `/metrics`, signals.
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use support::*;

/// A task of `slow_compute` running `seconds` on `server`: its id.
fn start_task(server: &Server, seconds: f64) -> String {
    let params = json!({ "name": "slow_compute", "arguments": { "seconds": seconds } });
    let (status, message) = modern_with_tasks(server, "tools/call", params, &[]);
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["result"]["resultType"], "task", "{message}");
    message["result"]["taskId"].as_str().expect("taskId").to_owned()
}

fn misrouted(text: &str) -> u64 {
    metric(text, "tidemark_misrouted_total{name=\"session\"}")
        + metric(text, "tidemark_misrouted_total{name=\"task\"}")
}

#[test]
fn ids_name_their_node_and_a_misrouted_request_is_unknown_and_counted() {
    for driver in DRIVERS {
        let args = |node: &'static str| {
            ["--threads", "2", "--tools", "demo,conformance", "--node-id", node]
        };
        let (one, one_metrics) = server_with_metrics(driver, &args("1"));
        let (two, two_metrics) = server_with_metrics(driver, &args("2"));
        // Sessions and tasks of each node carry its id first, then the core, then 32 digits.
        let (sid_one, sid_two) = (open_session(&one), open_session(&two));
        for (sid, prefix) in [(&sid_one, "01"), (&sid_two, "02")] {
            assert_eq!(sid.len(), 38, "{driver}: {sid}");
            assert!(sid.starts_with(prefix), "{driver}: {sid} should start with {prefix}");
        }
        let task_two = start_task(&two, 30.0);
        assert_eq!(task_two.len(), 38, "{driver}: {task_two}");
        assert!(task_two.starts_with("02"), "{driver}: {task_two}");

        // Node 2's session sent to node 1: POST, GET and DELETE are 404 naming the misrouting.
        for method in ["POST", "GET", "DELETE"] {
            let body =
                if method == "POST" { r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"# } else { "" };
            let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
            h.push(("Mcp-Session-Id", &sid_two));
            let body = (method == "POST").then_some(body);
            let r = exchange(&one, &request(method, &one.path, &one.host(), &h, body));
            assert_eq!(r.status, 404, "{driver}: {method}: {}", r.text());
            let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains("misrouted"), "{driver}: {method}: {message}");
        }
        // Node 2's task polled on node 1: the unknown task's -32602, saying misrouted.
        let (_, message) = modern_with_tasks(&one, "tasks/get", json!({ "taskId": task_two }), &[]);
        assert_eq!(message["error"]["code"], -32602, "{driver}: {message}");
        assert_eq!(message["id"], 7, "{driver}: the answer names the request: {message}");
        let text = message["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains("misrouted"), "{driver}: {message}");
        let counted = scrape(&one_metrics);
        assert_eq!(metric(&counted, "tidemark_misrouted_total{name=\"session\"}"), 3, "{driver}");
        assert_eq!(metric(&counted, "tidemark_misrouted_total{name=\"task\"}"), 1, "{driver}");

        // The named node still serves both, and counted nothing misrouted.
        let r = post(
            &two,
            &[("Mcp-Session-Id", &sid_two)],
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        );
        assert_eq!(r.json()["result"], json!({}), "{driver}: {}", r.text());
        let (status, message) =
            modern_with_tasks(&two, "tasks/get", json!({ "taskId": task_two }), &[]);
        assert_eq!(
            (status, message["result"]["status"].as_str()),
            (200, Some("working")),
            "{message}"
        );
        assert_eq!(misrouted(&scrape(&two_metrics)), 0, "{driver}");
        // A session of this node naming a core it does not run is simply unknown (not misrouted).
        let foreign_core = format!("02ffff{}", &sid_two[6..]);
        let r = post(
            &two,
            &[("Mcp-Session-Id", &foreign_core)],
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
        );
        assert_eq!(r.status, 404, "{driver}");
        assert!(!r.text().contains("misrouted"), "{driver}: {}", r.text());
        assert_eq!(misrouted(&scrape(&two_metrics)), 0, "{driver}");
    }
}

#[test]
fn node_id_255_is_the_last_and_256_is_refused_at_start() {
    let server = Server::on("epoll", &["--node-id", "255"]);
    assert!(open_session(&server).starts_with("ff"), "node 255 mints ff…");
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--node-id", "256"])
        .output()
        .expect("run the binary");
    assert!(!out.status.success(), "--node-id 256 must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0..=255"), "the range is named: {stderr}");
}

/// What runs on the server while it drains.
#[derive(Clone, Copy, Debug)]
enum Running {
    /// A 2026-07-28 keyed call of 4 s whose client dropped after its first event.
    DroppedKeyedCall,
    /// A task of 4 s, detached from every connection.
    WorkingTask,
}

fn start_dropped_keyed_call(server: &Server) {
    let params = json!({ "name": "slow_counter", "arguments": { "steps": 40, "delay_ms": 100 },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": { "name": "drain-test", "version": "1" },
            "progressToken": 1,
        } });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.extend([
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "slow_counter"),
        ("Idempotency-Key", "drain-key"),
    ]);
    let raw = request("POST", &server.path, &server.host(), &h, Some(&body.to_string()));
    let mut keyed = SseStream::open(server, &raw);
    assert!(keyed.next_event().is_some(), "the keyed call's first event");
    keyed.cut();
}

#[test]
fn a_drain_waits_for_a_dropped_keyed_call_and_a_working_task_then_exits_0() {
    for driver in DRIVERS {
        for running in [Running::DroppedKeyedCall, Running::WorkingTask] {
            let mut server = Server::with_admin(
                driver,
                &["--threads", "2", "--tools", "demo,conformance", "--drain-secs", "30"],
            );
            let admin = server.metrics();
            match running {
                Running::DroppedKeyedCall => start_dropped_keyed_call(&server),
                Running::WorkingTask => drop(start_task(&server, 4.0)),
            }
            server.signal("TERM");
            // /readyz fails at once, so a balancer stops sending new sessions here.
            wait_until(Duration::from_secs(2), "/readyz 503", || {
                readyz(&admin).starts_with("HTTP/1.1 503")
            });
            // It still runs: the drain does not end under it (an idle server exits in ~50 ms).
            assert!(
                server.exit_within(Duration::from_millis(1000)).is_none(),
                "{driver}: {running:?}: exited before it finished"
            );
            let status =
                server.exit_within(Duration::from_secs(15)).expect("exits after the drain");
            assert!(status.success(), "{driver}: {running:?}: {status:?}");
        }
    }
}

fn readyz(addr: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}
