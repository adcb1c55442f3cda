//! Goal: everything is bound to the subject that created it (issue 18 item 3; CONTRACT §8),
//! both io drivers: a legacy session (POST, GET resume with Last-Event-ID, DELETE, a re-POST
//! that would get the 409 hint), a 2026-07-28 `Idempotency-Key` record, a task and an MRTR
//! `requestState`, presented with another subject's token, are answered exactly as unknown
//! ones (404 / not found, never 403) and nothing of the owner's reaches the other subject; a
//! new token of the same subject continues the session; the refusals are counted.
//!
//! Method: the real binary with a token file (alice has two tokens, bob one), raw HTTP/1.1 over
//! blocking sockets; each foreign answer is compared with the answer to a made-up name.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const TOKENS: &str = "tok-alice-1 alice\ntok-alice-2 alice\ntok-bob bob\n";
const ALICE: &str = "tok-alice-1";
const ALICE_AGAIN: &str = "tok-alice-2";
const BOB: &str = "tok-bob";

fn server_with_tokens(driver: &str, name: &str, args: &[&str]) -> Server {
    let dir = std::env::temp_dir().join(format!("tidemark-subjects-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let mut all = vec!["--auth-tokens", tokens.to_str().expect("path")];
    all.extend_from_slice(args);
    let all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    Server::with_admin(driver, &all)
}

/// `headers` plus `Authorization: Bearer token`.
fn with_token<'a>(
    token: &'a str,
    bearer: &'a mut String,
    headers: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    *bearer = format!("Bearer {token}");
    let mut all = headers.to_vec();
    all.push(("Authorization", bearer.as_str()));
    all
}

fn post_as(server: &Server, token: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut bearer = String::new();
    post(server, &with_token(token, &mut bearer, headers), body)
}

/// A session id of the same shape that names no session (one character changed).
fn unknown_like(sid: &str) -> String {
    let mut chars: Vec<char> = sid.chars().collect();
    let last = chars.len() - 1;
    chars[last] = if chars[last] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

/// Status and JSON body, the parts a "not found" must share with an unknown name's.
fn shape(r: &Response) -> (u16, String) {
    (r.status, r.text())
}

fn foreign(server: &Server) -> u64 {
    metric(&scrape(&server.metrics()), "tidemark_auth_foreign_subject_total")
}

/// Goal: a legacy session is its opener's: bob's POST, GET (standalone and a Last-Event-ID
/// resume), DELETE and a re-POST of alice's owed call all get the 404 of an unknown session,
/// counted; alice (with either of her tokens) keeps the session, its stream and its replay.
#[test]
fn a_session_is_its_openers() {
    for driver in DRIVERS {
        let server = server_with_tokens(driver, &format!("session-{driver}"), &[]);
        let sid = open_session_with_token(&server, ALICE);
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let unknown =
            shape(&post_as(&server, BOB, &[("Mcp-Session-Id", &unknown_like(&sid))], ping));
        assert_eq!(unknown.0, 404, "{driver}: {unknown:?}");
        let before = foreign(&server);
        assert_eq!(
            shape(&post_as(&server, BOB, &[("Mcp-Session-Id", &sid)], ping)),
            unknown,
            "{driver} POST"
        );
        // Without a token: the 401 of any tokenless request, before any session is looked up.
        let none = |sid: &str| shape(&post(&server, &[("Mcp-Session-Id", sid)], ping));
        assert_eq!(none(&sid), none(&unknown_like(&sid)), "{driver}: no token");
        assert_eq!(none(&sid).0, 401, "{driver}: no token");
        // A call of alice's that drops after its first progress: owed, with events to replay.
        let mut bearer = String::new();
        let headers = with_token(ALICE, &mut bearer, &[]);
        let body = call(2, "slow_counter", r#"{"steps":3,"delay_ms":50}"#, true);
        let mut stream = call_stream(&server, &sid, &body, &headers);
        let priming = read_priming(&mut stream, driver);
        stream.cut();
        // bob: the resume, the standalone GET and the re-POST that would get a 409 hint.
        for (name, last_event_id) in [("resume", Some(priming.as_str())), ("standalone", None)] {
            let mut h = vec![("Accept", "text/event-stream"), ("Mcp-Session-Id", sid.as_str())];
            if let Some(id) = last_event_id {
                h.push(("Last-Event-ID", id));
            }
            let mut bearer = String::new();
            let h = with_token(BOB, &mut bearer, &h);
            let r = exchange(&server, &request("GET", &server.path, &server.host(), &h, None));
            assert_eq!(shape(&r), unknown, "{driver} GET {name}");
        }
        let r = post_as(&server, BOB, &[("Mcp-Session-Id", &sid)], &body);
        assert_eq!(shape(&r), unknown, "{driver} re-POST");
        assert!(r.header("Last-Event-ID").is_none(), "{driver}: a hint leaked");
        let delete = |token: &str| {
            let mut bearer = String::new();
            let h = with_token(token, &mut bearer, &[("Mcp-Session-Id", sid.as_str())]);
            exchange(&server, &request("DELETE", &server.path, &server.host(), &h, None))
        };
        assert_eq!(shape(&delete(BOB)), unknown, "{driver} DELETE");
        assert_eq!(foreign(&server) - before, 5, "{driver}: each foreign request counted");
        // alice, with her other token: the replay from the priming event, to the end.
        let mut bearer = String::new();
        let h = with_token(
            ALICE_AGAIN,
            &mut bearer,
            &[
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", sid.as_str()),
                ("Last-Event-ID", priming.as_str()),
            ],
        );
        let mut resumed =
            SseStream::open(&server, &request("GET", &server.path, &server.host(), &h, None));
        assert!(
            resumed.receive_to_end(Duration::from_secs(10)),
            "{driver}: the resume did not end"
        );
        let events = messages(&resumed.rest());
        assert_eq!(events.last().expect("final").json()["id"], 2, "{driver}: {events:?}");
        assert_eq!(post_as(&server, ALICE_AGAIN, &[("Mcp-Session-Id", &sid)], ping).status, 200);
        assert_eq!(delete(ALICE).status, 200, "{driver}: alice's DELETE");
    }
}

/// A 2026-07-28 request of `method` with `params` (the `_meta` added), as `token`'s subject.
fn modern(
    server: &Server,
    token: &str,
    method: &str,
    mut params: Value,
    key: Option<&str>,
) -> Response {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {}, "extensions": { "io.modelcontextprotocol/tasks": {} }
        },
        // One clientInfo for everyone: the subject, not it, must tell them apart.
        "io.modelcontextprotocol/clientInfo": { "name": "same", "version": "1" },
    });
    let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str);
    let name = name.map(str::to_owned);
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    post_as(server, token, &headers, &body.to_string())
}

/// The last JSON-RPC message of an answer (SSE or JSON).
fn last_message(r: &Response) -> Value {
    if r.header("Content-Type").is_some_and(|t| t.starts_with("text/event-stream")) {
        messages(&r.events()).last().expect("an event").json()
    } else {
        r.json()
    }
}

fn executions(server: &Server, token: &str) -> u64 {
    let r = modern(
        server,
        token,
        "tools/call",
        json!({ "name": "get_counter", "arguments": {} }),
        None,
    );
    let v = last_message(&r);
    v["result"]["content"][0]["text"].as_str().expect("text").parse().expect("number")
}

/// Goal: a 2026-07-28 `Idempotency-Key` is scoped by subject, whatever `clientInfo` says:
/// bob's call with alice's key and arguments runs (no dedup hit, none of alice's answer), his
/// call with her key and other arguments is no 422 (which would say the key exists); alice's
/// own retry is a dedup hit. The per-client keyed share counts by subject.
#[test]
fn an_idempotency_key_is_its_subjects() {
    for driver in DRIVERS {
        let server = server_with_tokens(driver, &format!("key-{driver}"), &["--tools", "demo"]);
        let args = json!({ "name": "slow_counter", "arguments": { "steps": 1, "delay_ms": 1 } });
        let first = modern(&server, ALICE, "tools/call", args.clone(), Some("shared-key"));
        assert_eq!(first.status, 200, "{driver}: {}", first.text());
        assert_eq!(executions(&server, ALICE), 1);
        // Other arguments under alice's key: for bob a fresh call, no 422.
        let other = json!({ "name": "slow_counter", "arguments": { "steps": 2, "delay_ms": 1 } });
        let r = modern(&server, BOB, "tools/call", other, Some("shared-key"));
        assert_eq!(r.status, 200, "{driver}: bob learned alice's key exists: {}", r.text());
        assert_eq!(executions(&server, BOB), 2, "{driver}: bob's call did not run");
        // bob's own key, then alice's key once more: hers is a dedup hit, his a new call.
        let bobs = modern(&server, BOB, "tools/call", args.clone(), Some("bob-key"));
        assert_eq!(last_message(&bobs)["result"]["resultType"], "complete", "{driver}");
        assert_eq!(executions(&server, BOB), 3, "{driver}");
        let retry = modern(&server, ALICE_AGAIN, "tools/call", args, Some("shared-key"));
        assert_eq!(last_message(&retry)["result"]["resultType"], "complete", "{driver}");
        assert_eq!(executions(&server, ALICE), 3, "{driver}: alice's retry was no dedup hit");
    }
}

/// Goal: `--max-running-keyed-calls-per-client` counts by subject when authorization is on:
/// with a share of 1, alice's second running keyed call gets 429 while bob's, from the same
/// address, runs. Method: one core; alice's first call runs for seconds (steps with delays)
/// on a connection left open.
#[test]
fn the_keyed_share_counts_by_subject() {
    for driver in DRIVERS {
        let args =
            ["--tools", "demo", "--threads", "1", "--max-running-keyed-calls-per-client", "1"];
        let server = server_with_tokens(driver, &format!("share-{driver}"), &args);
        let long = json!({ "name": "slow_counter", "arguments": { "steps": 5, "delay_ms": 1000 } });
        let body = || {
            let mut params = long.clone();
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            });
            json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params })
                .to_string()
        };
        let mut bearer = String::new();
        let headers = with_token(
            ALICE,
            &mut bearer,
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "slow_counter"),
                ("Idempotency-Key", "alice-1"),
            ],
        );
        let raw = request("POST", &server.path, &server.host(), &headers, Some(&body()));
        let mut running = server.connect();
        send(&mut running, &raw);
        // Alice's first call runs for 5 s; once the server holds it, her next keyed call is
        // refused (each try with a new key: one that ran is quick and leaves the share free).
        let quick = json!({ "name": "slow_counter", "arguments": { "steps": 1, "delay_ms": 1 } });
        let mut tries = 0;
        let refused = poll_until(Duration::from_secs(4), || {
            tries += 1;
            let key = format!("alice-2-{tries}");
            modern(&server, ALICE_AGAIN, "tools/call", quick.clone(), Some(&key)).status == 429
        });
        assert!(refused, "{driver}: alice's second running keyed call was never refused");
        let bobs = modern(&server, BOB, "tools/call", quick, Some("bob-1"));
        assert_eq!(
            bobs.status,
            200,
            "{driver}: bob's call counted in alice's share: {}",
            bobs.text()
        );
        drop(running);
    }
}

/// Goal: a task is its creator's: bob's `tasks/get`, `tasks/update` and `tasks/cancel` of
/// alice's task get the answer of an unknown task id; alice's task keeps running.
#[test]
fn a_task_is_its_creators() {
    for driver in DRIVERS {
        let server =
            server_with_tokens(driver, &format!("task-{driver}"), &["--tools", "conformance"]);
        let call = json!({ "name": "slow_compute", "arguments": { "seconds": 60 } });
        let created = last_message(&modern(&server, ALICE, "tools/call", call, None));
        let task_id =
            created["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
        let unknown_id = format!("{}x", &task_id[..task_id.len() - 1]);
        let before = foreign(&server);
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let params = |id: &str| json!({ "taskId": id, "inputResponses": {} });
            let unknown = modern(&server, BOB, method, params(&unknown_id), None);
            let theirs = modern(&server, BOB, method, params(&task_id), None);
            assert_eq!(unknown.status, theirs.status, "{driver} {method}");
            let error =
                |r: &Response, id: &str| last_message(r)["error"].to_string().replace(id, "ID");
            assert_eq!(error(&unknown, &unknown_id), error(&theirs, &task_id), "{driver} {method}");
            assert!(
                last_message(&theirs)["error"].is_object(),
                "{driver} {method}: {}",
                theirs.text()
            );
        }
        assert_eq!(foreign(&server) - before, 3, "{driver}: each foreign request counted");
        let mine = modern(&server, ALICE_AGAIN, "tasks/get", json!({ "taskId": task_id }), None);
        assert_eq!(last_message(&mine)["result"]["status"], "working", "{driver}: {}", mine.text());
    }
}

/// Goal: an MRTR `requestState` is its subject's: bob's retry with alice's state and answer
/// is refused as another request's (-32602) and does not complete her round; alice's does.
#[test]
fn a_request_state_is_its_subjects() {
    for driver in DRIVERS {
        let server = server_with_tokens(driver, &format!("state-{driver}"), &["--tools", "demo"]);
        let greet = json!({ "name": "greet", "arguments": {} });
        let round = last_message(&modern(&server, ALICE, "tools/call", greet.clone(), None));
        let state = round["result"]["requestState"].as_str().expect("requestState").to_owned();
        let mut retry = greet;
        retry["inputResponses"] =
            json!({ "name": { "action": "accept", "content": { "name": "Ada" } } });
        retry["requestState"] = json!(state);
        let bobs = modern(&server, BOB, "tools/call", retry.clone(), None);
        let v = last_message(&bobs);
        assert_eq!(v["error"]["code"], -32602, "{driver}: {v}");
        assert!(!bobs.text().contains("Ada"), "{driver}");
        let alices = last_message(&modern(&server, ALICE_AGAIN, "tools/call", retry, None));
        assert_eq!(alices["result"]["resultType"], "complete", "{driver}: {alices}");
    }
}
