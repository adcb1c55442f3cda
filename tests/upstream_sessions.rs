//! Goal (issue 22 items 3 and 2): with `--upstream-isolation per-session` a session is listed,
//! and may call, exactly the tools of its own upstream (started with that client's
//! capabilities), never another session's, whichever listed last; and a tool an
//! `--upstream-allow-tools`/`--upstream-deny-tools` glob filters out is absent from `tools/list`
//! and refused like an unknown tool, with annotations of the rest passed through.
//! Method: the real binary fronting tests/fixtures/stdio_upstream.py, which lists `elicit_only`
//! only to a client whose `initialize` declared elicitation; two sessions over real sockets,
//! the one without the capability first (as `mcp-remote`'s probe session is), their listings
//! and calls interleaved.

mod support;

use support::{call, post, run_to_exit, Server};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

fn bridge(extra: &[&str]) -> Server {
    let upstream = format!("stdio:python3 {FIXTURE}");
    let mut args = vec!["--upstream", upstream.as_str(), "--threads", "1"];
    args.extend_from_slice(&["--upstream-kill-grace-ms", "200"]);
    args.extend_from_slice(extra);
    Server::on("uring", &args)
}

/// initialize declaring `capabilities` (JSON) + notifications/initialized; the session id.
fn open_with(server: &Server, capabilities: &str) -> String {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{capabilities},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    );
    let r = post(server, &[], &init);
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(server, &[("Mcp-Session-Id", &sid)], note).status, 202);
    sid
}

fn tools(server: &Server, sid: &str) -> Vec<serde_json::Value> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let list = post(server, &[("Mcp-Session-Id", sid)], body);
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["result"]["tools"].as_array().expect("tools").clone()
}

fn names(server: &Server, sid: &str) -> Vec<String> {
    tools(server, sid).iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// A `tools/call` without progress answered as plain JSON or one SSE event: its response.
fn call_json(server: &Server, sid: &str, id: u64, tool: &str) -> serde_json::Value {
    let r = post(server, &[("Mcp-Session-Id", sid)], &call(id, tool, "{}", false));
    assert_eq!(r.status, 200, "{tool}: {}", r.text());
    let text = r.text();
    let body = if r.header("Content-Type").is_some_and(|c| c.starts_with("text/event-stream")) {
        let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).collect();
        data.into_iter().map(str::trim).find(|d| d.contains("\"id\"")).unwrap_or("").to_owned()
    } else {
        text
    };
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{tool}: {e}: {body}"))
}

fn assert_unknown_tool(response: &serde_json::Value, tool: &str) {
    assert_eq!(response["error"]["code"], -32602, "{tool}: {response}");
    let message = response["error"]["message"].as_str().unwrap_or("");
    assert_eq!(message, format!("unknown tool: {tool}"), "{response}");
}

#[test]
fn each_session_lists_and_calls_its_own_upstreams_tools() {
    let server = bridge(&[]);
    // The probe (no capabilities) first, then the client that declared elicitation, then
    // listings and calls in turns: each answer must be the session's own.
    let probe = open_with(&server, "{}");
    assert!(!names(&server, &probe).contains(&"elicit_only".to_owned()));
    let elicitor = open_with(&server, r#"{"elicitation":{}}"#);
    for round in 0..2 {
        let listed = names(&server, &elicitor);
        assert!(listed.contains(&"elicit_only".to_owned()), "round {round}: {listed:?}");
        let probed = names(&server, &probe);
        assert!(!probed.contains(&"elicit_only".to_owned()), "round {round}: {probed:?}");
        assert_eq!(listed.len(), probed.len() + 1, "round {round}: the same tools otherwise");
        let ran = call_json(&server, &elicitor, 10 + round, "elicit_only");
        assert_eq!(ran["result"]["content"][0]["text"], "elicit_only ran", "{ran}");
        assert_unknown_tool(&call_json(&server, &probe, 20 + round, "elicit_only"), "elicit_only");
        let echo = call_json(&server, &probe, 30 + round, "echo");
        assert!(echo.get("result").is_some(), "{echo}");
    }
    // A third session without the capability, opened after the elicitor listed last.
    let late = open_with(&server, r#"{"sampling":{}}"#);
    assert!(!names(&server, &late).contains(&"elicit_only".to_owned()));
    assert_unknown_tool(&call_json(&server, &late, 40, "elicit_only"), "elicit_only");
    assert!(names(&server, &elicitor).contains(&"elicit_only".to_owned()));
}

#[test]
fn filtered_tools_are_neither_listed_nor_callable() {
    // Allow four names by glob, deny one of them again (deny wins), deny by '?' too.
    let server = bridge(&[
        "--upstream-allow-tools",
        "*=echo,get_*,p?d,crash_*",
        "--upstream-deny-tools",
        "*=crash_*",
        "--upstream-deny-tools",
        "*=get_counte?",
    ]);
    let sid = open_with(&server, "{}");
    let listed = tools(&server, &sid);
    let mut listed_names: Vec<&str> = listed.iter().filter_map(|t| t["name"].as_str()).collect();
    listed_names.sort_unstable();
    assert_eq!(listed_names, ["echo", "pid"], "{listed:?}");
    // The annotations of what is listed pass through unchanged.
    let pid = listed.iter().find(|t| t["name"] == "pid").expect("pid");
    assert_eq!(pid["annotations"]["readOnlyHint"], true, "{pid}");
    for (id, tool) in [(1, "crash_after"), (2, "get_counter"), (3, "slow_counter"), (4, "hang")] {
        assert_unknown_tool(&call_json(&server, &sid, id, tool), tool);
    }
    let echo = call_json(&server, &sid, 5, "echo");
    assert!(echo.get("result").is_some(), "{echo}");
}

#[test]
fn filtered_prompts_are_neither_listed_nor_fetched() {
    let listed = |server: &Server, sid: &str| {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#;
        let r = post(server, &[("Mcp-Session-Id", sid)], body);
        let prompts = r.json()["result"]["prompts"].as_array().expect("prompts").clone();
        prompts.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect::<Vec<_>>()
    };
    let get = r#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"greet"}}"#;
    let open = bridge(&[]);
    let sid = open_with(&open, "{}");
    assert_eq!(listed(&open, &sid), ["greet"], "the fixture's prompt, unfiltered");
    let got = post(&open, &[("Mcp-Session-Id", &sid)], get).json();
    assert!(got["result"]["messages"].is_array(), "{got}");
    // Denied by '?', even though an allow glob matches it: deny wins.
    let server =
        bridge(&["--upstream-allow-prompts", "*=g*", "--upstream-deny-prompts", "*=gr??t"]);
    let sid = open_with(&server, "{}");
    assert!(listed(&server, &sid).is_empty());
    let refused = post(&server, &[("Mcp-Session-Id", &sid)], get).json();
    assert_eq!(refused["error"]["code"], -32602, "refused as an unknown prompt: {refused}");
}

#[test]
fn filter_flags_are_checked_at_start() {
    let upstream = format!("a=stdio:python3 {FIXTURE}");
    let base = ["--listen", "127.0.0.1:0", "--upstream", upstream.as_str()];
    let cases: [(&[&str], &str); 4] = [
        (&["--upstream-allow-tools", "b=echo"], "no --upstream is named \"b\""),
        (&["--upstream-deny-tools", "a=echo,,pid"], "expected NAME=GLOB"),
        (&["--upstream-deny-tools", "a=x,y", "--upstream-filter-globs-max", "1"], "at most 1"),
        (&["--upstream-filter-globs-max", "0"], "greater than zero"),
    ];
    for (flags, want) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(flags);
        let (status, stderr) = run_to_exit(&args);
        assert!(status.is_some_and(|s| s != 0), "{flags:?}: {status:?} {stderr}");
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
    }
    // At the limit it starts.
    let server = Server::on(
        "uring",
        &[
            "--upstream",
            &upstream,
            "--upstream-deny-tools",
            "a=x,y",
            "--upstream-filter-globs-max",
            "2",
        ],
    );
    let sid = open_with(&server, "{}");
    assert!(names(&server, &sid).contains(&"echo".to_owned()));
}
