//! Goal: the failure policy per upstream (issue 22 item 5). A required upstream that is down
//! refuses the session (`initialize` 503 + `Retry-After`, -32603 naming it; a 2026-07-28 call
//! needing it likewise) while the other upstreams' tools work; an optional one lets the
//! session start without its tools, which come back with `notifications/tools/list_changed`
//! once it answers; the circuit breaker fails calls fast after N consecutive failures without
//! reaching the upstream, lets one probe through after the pause, closes on its success and
//! re-opens on its failure; each is counted in /metrics.
//! Method: the real binary (one core, so one breaker) fronting
//! tests/fixtures/stdio_upstream.py, switched by files: `--exit-if FILE` makes it exit at
//! start (down), `--fail-if FILE` answers every call -32603 (failing), `--call-log FILE`
//! records every call it received (whether a call reached it).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::{call, post, scrape, Server, DRIVERS};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// A scratch file of this test (removed at the end); it does not exist until `create`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir()
            .join(format!("tidemark-upstream-failure-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Scratch(path)
    }

    fn create(&self) {
        std::fs::write(&self.0, b"").expect("create the switch file");
    }

    fn remove(&self) {
        std::fs::remove_file(&self.0).expect("remove the switch file");
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }

    /// Lines in the file (the calls the fixture received, for a call log).
    fn lines(&self) -> usize {
        std::fs::read_to_string(&self.0).map(|t| t.lines().count()).unwrap_or(0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `NAME=stdio:python3 FIXTURE ARGS…`.
fn upstream(name: &str, args: &str) -> String {
    format!("{name}=stdio:python3 {FIXTURE} {args}")
}

/// tidemark on one core with its admin listener, fronting `upstreams`, plus `extra`.
fn front(driver: &str, upstreams: &[String], extra: &[&str]) -> Server {
    let mut args = vec!["--threads", "1", "--upstream-kill-grace-ms", "200"];
    for spec in upstreams {
        args.extend_from_slice(&["--upstream", spec.as_str()]);
    }
    args.extend_from_slice(extra);
    Server::with_admin(driver, &args)
}

/// The sample `sample` of the server's /metrics.
fn metric(server: &Server, sample: &str) -> u64 {
    support::metric(&scrape(&server.metrics()), sample)
}

/// A legacy `initialize`.
fn initialize(server: &Server) -> support::Response {
    post(server, &[], support::INIT)
}

/// `notifications/initialized` of a session whose `initialize` answered `init`.
fn opened(server: &Server, init: &support::Response) -> String {
    assert_eq!(init.status, 200, "{}", init.text());
    let sid = init.header("Mcp-Session-Id").expect("a session id").to_owned();
    let body = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(server, &[("Mcp-Session-Id", &sid)], body).status, 202);
    sid
}

/// The names of the tools the session is listed.
fn tool_names(server: &Server, sid: &str) -> Vec<String> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let list = post(server, &[("Mcp-Session-Id", sid)], body);
    let tools = list.json()["result"]["tools"].as_array().expect("tools").clone();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// Calls `tool` in the session; its final message (result or error; JSON or SSE).
fn call_final(server: &Server, sid: &str, id: u64, tool: &str) -> serde_json::Value {
    let r = post(server, &[("Mcp-Session-Id", sid)], &call(id, tool, r#"{"text":"hi"}"#, false));
    assert_eq!(r.status, 200, "{tool}: {}", r.text());
    support::final_message(&r)
}

#[test]
fn a_required_upstream_that_is_down_refuses_the_session_with_503_naming_it() {
    // Goal: the default policy (required): initialize answers 503 + Retry-After (the breaker's
    // pause, whole seconds) with -32603 whose message and data name the upstream; a 2026-07-28
    // call of its tool likewise, while the other upstream's tools are served; once it starts
    // again a session opens. Counted as tidemark_upstream_down_total{upstream}.
    for driver in DRIVERS {
        let down = Scratch::new(&format!("required-down-{driver}"));
        down.create();
        let specs = [upstream("up", ""), upstream("gone", &format!("--exit-if {}", down.path()))];
        let server = front(driver, &specs, &["--upstream-breaker-pause-ms", "1500"]);

        let init = initialize(&server);
        assert_eq!(init.status, 503, "{driver}: {}", init.text());
        assert_eq!(init.header("Retry-After"), Some("2"), "{driver}: 1500 ms rounded up");
        assert!(init.header("Mcp-Session-Id").is_none(), "{driver}: no session");
        let error = &init.json()["error"];
        assert_eq!(error["code"], -32603, "{driver}: {error}");
        let message = error["message"].as_str().expect("a message");
        assert!(message.contains("upstream gone"), "{driver}: {message}");
        assert_eq!(error["data"]["upstream"], "gone", "{driver}: {error}");
        assert_eq!(error["data"]["policy"], "required", "{driver}: {error}");
        assert_eq!(metric(&server, "tidemark_upstream_down_total{upstream=\"gone\"}"), 1);
        assert_eq!(metric(&server, "tidemark_upstream_down_total{upstream=\"up\"}"), 0);

        let served = support::modern_echo_call(&server, 2, "up__echo");
        assert_eq!(served.status, 200, "{driver}: the other upstream: {}", served.text());
        let answer = support::final_message(&served);
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{driver}: {answer}");
        let refused = support::modern_echo_call(&server, 3, "gone__echo");
        assert_eq!(refused.status, 503, "{driver}: {}", refused.text());
        assert_eq!(refused.header("Retry-After"), Some("2"), "{driver}");
        assert_eq!(refused.json()["error"]["data"]["upstream"], "gone", "{driver}");

        down.remove();
        let sid = opened(&server, &initialize(&server));
        let names = tool_names(&server, &sid);
        for name in ["up__echo", "gone__echo"] {
            assert!(names.iter().any(|n| n == name), "{driver}: {name} in {names:?}");
        }
    }
}

#[test]
fn an_optional_upstream_that_is_down_is_left_out_until_it_returns_with_list_changed() {
    // Goal: --upstream-policy NAME=optional: the session starts without the down upstream's
    // tools (its call is refused as an unknown tool), the other upstream's tools work; when it
    // can start again (tried every --upstream-breaker-pause-ms) the client gets
    // notifications/tools/list_changed on its GET stream and is listed its tools, which work.
    for driver in DRIVERS {
        let down = Scratch::new(&format!("optional-down-{driver}"));
        down.create();
        let specs = [upstream("up", ""), upstream("late", &format!("--exit-if {}", down.path()))];
        let extra = ["--upstream-policy", "late=optional", "--upstream-breaker-pause-ms", "300"];
        let server = front(driver, &specs, &extra);

        let sid = opened(&server, &initialize(&server));
        let names = tool_names(&server, &sid);
        assert!(names.iter().any(|n| n == "up__echo"), "{driver}: {names:?}");
        assert!(!names.iter().any(|n| n.starts_with("late__")), "{driver}: {names:?}");
        assert_eq!(metric(&server, "tidemark_upstream_down_total{upstream=\"late\"}"), 1);
        let answer = call_final(&server, &sid, 2, "up__echo");
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{driver}: {answer}");
        let answer = call_final(&server, &sid, 3, "late__echo");
        assert_eq!(answer["error"]["code"], -32602, "{driver}: unknown while down: {answer}");
        // 2026-07-28: the core's link to it is down as well (the tool is unknown, not 503).
        let answer = support::final_message(&support::modern_echo_call(&server, 5, "late__echo"));
        assert_eq!(answer["error"]["code"], -32602, "{driver}: modern, down: {answer}");

        let get = support::request(
            "GET",
            &server.path,
            &server.host(),
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
            None,
        );
        let mut standalone = support::SseStream::open(&server, &get);
        assert_eq!(standalone.status, 200, "{driver}");
        down.remove();
        let notice = loop {
            let ev = standalone.next_event().expect("list_changed on the standalone stream");
            if !ev.is_priming() {
                break ev.json();
            }
        };
        assert_eq!(notice["method"], "notifications/tools/list_changed", "{driver}: {notice}");
        let names = tool_names(&server, &sid);
        assert!(names.iter().any(|n| n == "late__echo"), "{driver}: back: {names:?}");
        let answer = call_final(&server, &sid, 4, "late__echo");
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{driver}: {answer}");
        // The core's link came back on its own too (its own retry).
        support::wait_until(Duration::from_secs(10), "the 2026-07-28 tool back", || {
            support::final_message(&support::modern_echo_call(&server, 6, "late__echo"))["result"]
                ["content"][0]["text"]
                == "hi"
        });
    }
}

#[test]
fn the_breaker_opens_after_n_failures_fails_fast_and_a_probe_after_the_pause_decides() {
    // Goal: with --upstream-breaker-failures 3, the 3rd consecutive failure (not the 2nd)
    // opens the breaker; then calls fail fast with -32603 naming the upstream and never reach
    // it (the fixture's call log does not grow); after the pause one probe goes through: a
    // failing probe re-opens it, a succeeding one closes it. Counted in /metrics.
    // Sleeps: the pause's elapsing is what is tested.
    let failing = Scratch::new("breaker-failing");
    let log = Scratch::new("breaker-calls");
    let args = format!("--fail-if {} --call-log {}", failing.path(), log.path());
    let pause = Duration::from_millis(800);
    let extra = ["--upstream-breaker-failures", "3", "--upstream-breaker-pause-ms", "800"];
    let server = front("uring", &[upstream("fx", &args)], &extra);
    let sid = opened(&server, &initialize(&server));
    let opened_total = "tidemark_upstream_breaker_open_total{upstream=\"fx\"}";
    let rejected_total = "tidemark_upstream_breaker_rejected_total{upstream=\"fx\"}";

    failing.create();
    for id in 1..=3 {
        let answer = call_final(&server, &sid, id, "echo");
        assert_eq!(answer["error"]["message"], "fixture failing", "call {id}: {answer}");
        assert_eq!(log.lines(), id as usize, "call {id} reached the upstream");
        let want = u64::from(id == 3);
        assert_eq!(metric(&server, opened_total), want, "open only at the 3rd failure");
    }
    let opened_at = Instant::now();
    for id in 4..=5 {
        let answer = call_final(&server, &sid, id, "echo");
        let error = &answer["error"];
        assert_eq!(error["code"], -32603, "{answer}");
        let message = error["message"].as_str().expect("a message");
        assert!(
            message.contains("upstream fx") && message.contains("circuit breaker"),
            "{message}"
        );
        assert_eq!(error["data"]["upstream"], "fx", "{answer}");
    }
    assert_eq!(log.lines(), 3, "failed fast: the upstream was not contacted");
    assert_eq!(metric(&server, rejected_total), 2);

    // A failing probe re-opens it.
    std::thread::sleep(pause.saturating_sub(opened_at.elapsed()) + Duration::from_millis(100));
    let answer = call_final(&server, &sid, 6, "echo");
    assert_eq!(answer["error"]["message"], "fixture failing", "the probe reached it: {answer}");
    assert_eq!(log.lines(), 4);
    assert_eq!(metric(&server, opened_total), 2, "re-opened by the failed probe");
    let reopened_at = Instant::now();
    let answer = call_final(&server, &sid, 7, "echo");
    assert!(answer["error"]["message"].as_str().unwrap_or("").contains("circuit breaker"));
    assert_eq!(log.lines(), 4, "open again: not contacted");

    // A succeeding probe closes it.
    failing.remove();
    std::thread::sleep(pause.saturating_sub(reopened_at.elapsed()) + Duration::from_millis(100));
    let answer = call_final(&server, &sid, 8, "echo");
    assert_eq!(answer["result"]["content"][0]["text"], "hi", "the probe: {answer}");
    for id in 9..=10 {
        let answer = call_final(&server, &sid, id, "echo");
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "closed: {answer}");
    }
    assert_eq!(log.lines(), 7, "every call since the probe reached the upstream");
    assert_eq!(metric(&server, rejected_total), 3);
}

#[test]
fn a_policy_naming_no_upstream_or_no_policy_stops_the_start() {
    // Goal: --upstream-policy values are checked at start: NAME must be an --upstream's NAME=
    // or '*', the policy required or optional; the error names the value. And 0 breaker
    // failures or pause is refused (zero never means "unlimited").
    let spec = upstream("fx", "");
    let cases: [(&[&str], &str); 4] = [
        (&["--upstream-policy", "nope=optional"], "nope=optional"),
        (&["--upstream-policy", "fx=sometimes"], "fx=sometimes"),
        (&["--upstream-breaker-failures", "0"], "upstream-breaker-failures"),
        (&["--upstream-breaker-pause-ms", "0"], "upstream-breaker-pause-ms"),
    ];
    for (flags, named) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--listen", "127.0.0.1:0", "--upstream", spec.as_str()])
            .args(flags)
            .output()
            .expect("run tidemark");
        assert!(!out.status.success(), "{flags:?} must stop the start");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{flags:?}: {stderr}");
    }
}
