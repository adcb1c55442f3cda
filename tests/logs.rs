//! Goal: the structured log of issue 21 item 1 (docs/logging.md) on the real binary: one
//! session's refused migration and its recovery found in the JSON log by its session id alone;
//! a flood of refusals written as at most the per-kind budget plus "suppressed" lines that
//! account for every one; no token, no `Authorization` value and no body at trace level; no
//! ANSI escape when stderr is a file; the start-up line with addresses, driver and limits; and
//! SIGHUP's reload of the log level, logged.
//!
//! Method: the binary on 127.0.0.1:0 with its stderr in a file (`--log-format json` unless the
//! test is about text), raw HTTP/1.1 over loopback (`tests/support`); the log read back and
//! parsed line by line (every JSON line must parse).

mod support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

/// Bound on a log line the server writes without a timer of its own.
const LOG_WAIT: Duration = Duration::from_secs(10);

fn log_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-logs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("stderr.log")
}

/// The binary with `args`, its stderr in `log`, `RUST_LOG` unset (the flags decide).
fn start(args: &[&str], log: &Path) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    command.args(["--listen", "127.0.0.1:0"]).args(args).env_remove("RUST_LOG");
    command.stderr(std::fs::File::create(log).expect("log file"));
    Server::spawn(command)
}

/// Every line of the JSON log, parsed; panics on a line that is not a JSON object.
fn json_lines(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // The last line may be half written while the server runs: only complete lines count.
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v.is_object(), "a JSON line is an object: {l}");
            v
        })
        .collect()
}

/// Polls the JSON log until `done` holds for its lines (at most `LOG_WAIT`); the last lines.
fn wait_log(
    log: &Path,
    what: &str,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let lines = json_lines(log);
        if done(&lines) {
            return lines;
        }
        assert!(start.elapsed() < LOG_WAIT, "{what}: never logged; the log:\n{lines:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn message(v: &serde_json::Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

/// Goal (issue 21 "done when"): a legacy session's call is cut mid-stream, the client re-POSTs
/// it (409 -31001), then resumes with GET + Last-Event-ID; the lines that carry that session's
/// id alone tell the story: the refused migration at info with its reason, culprit, code,
/// status and request id, then the resume with the stream and the cursor.
/// Method: `jq 'select(.session == SID)'` done in Rust: filter the parsed lines on `session`.
#[test]
fn a_refused_migration_and_its_recovery_are_found_by_the_session_id() {
    let log = log_path("migration");
    let args = ["--threads", "1", "--metrics-listen", "127.0.0.1:0", "--log-format", "json"];
    let server = start(&args, &log);
    let sid = open_session(&server);
    let other = open_session(&server);
    let long = r#"{"steps":10,"delay_ms":50}"#;
    let mut s = call_stream(&server, &sid, &call(1, "slow_counter", long, true), &[]);
    let priming = read_priming(&mut s, "cut");
    let _last = read_progress(&mut s, 3, priming.clone(), "cut");
    s.cut();
    wait_closed(&server, 0, "cut");
    let r = post(&server, &[("Mcp-Session-Id", &sid)], &call(1, "slow_counter", long, true));
    assert_eq!(r.status, 409, "{}", r.text());
    let hint = r.header("Last-Event-ID").expect("the resume hint").to_owned();
    let evs = resume(&server, &sid, &hint).rest();
    assert!(!evs.is_empty(), "the resume replays");
    // Another session's traffic must not show up under the first one's id.
    let _ =
        post(&server, &[("Mcp-Session-Id", &other)], &call(7, "echo", r#"{"text":"x"}"#, false));

    let lines = wait_log(&log, "the resume", |lines| {
        lines.iter().any(|l| l["session"] == sid.as_str() && l["reason"] == "resume")
    });
    let mine: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["session"] == sid.as_str()).collect();
    let refused = mine
        .iter()
        .find(|l| message(l) == "migration decision")
        .unwrap_or_else(|| panic!("no migration line for {sid}: {mine:#?}"));
    assert_eq!(refused["level"], "INFO", "{refused}");
    assert_eq!(refused["reason"], "retry_of_owed (matched by id)", "{refused}");
    assert_eq!(refused["culprit"], "peer", "{refused}");
    assert_eq!(refused["code"], -31001, "{refused}");
    assert_eq!(refused["status"], 409, "{refused}");
    assert_eq!(refused["request_id"], "1", "{refused}");
    let (_, stream, _) = split_event_id(&hint).expect("hint is an event id");
    assert_eq!(refused["stream"], stream, "the refusal names the owed stream: {refused}");
    let resumed = mine.iter().find(|l| l["reason"] == "resume").expect("resume line");
    assert_eq!(resumed["level"], "INFO", "{resumed}");
    assert_eq!(resumed["stream"], stream, "the same stream resumed: {resumed}");
    let (_, _, after) = split_event_id(&hint).expect("hint");
    assert_eq!(resumed["after"], after, "from the hint's event: {resumed}");
    let at = |l: &serde_json::Value| lines.iter().position(|x| x == l).expect("in the log");
    assert!(at(refused) < at(resumed), "the refusal comes before the recovery");
    assert!(
        lines.iter().all(|l| l["session"] != other.as_str() || message(l) != "migration decision"),
        "the other session made no migration decision"
    );
}

/// Goal: a flood of refusals cannot fill a disk: with a budget of 5 lines per kind per
/// second, 2000 refused requests at debug yield at most 5 refusal lines per second of the
/// flood (plus the window in progress at either end), and "N more suppressed" lines whose
/// counts, with the lines written, account for exactly the 2000; the info summary counts them
/// all too.
/// Method: 2000 GETs without `Accept: text/event-stream` (406, keep-alive) on one connection.
#[test]
fn a_flood_of_refusals_is_written_as_the_budget_and_a_suppressed_count() {
    const FLOOD: u64 = 2000;
    const BUDGET: u64 = 5;
    let log = log_path("flood");
    let args = [
        "--threads",
        "1",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--log-events-per-kind-per-sec",
        "5",
        "--log-refusal-summary-secs",
        "1",
    ];
    let server = start(&args, &log);
    let mut conn = server.connect();
    let raw = request("GET", &server.path, &server.host(), &[("Accept", "application/json")], None);
    let started = Instant::now();
    for _ in 0..FLOOD {
        send(&mut conn, &raw);
        assert_eq!(read_response(&mut conn).status, 406);
    }
    let seconds = started.elapsed().as_secs() + 1;
    let refusal_lines =
        |lines: &[serde_json::Value]| lines.iter().filter(|l| l["status"] == 406).count() as u64;
    let suppressed = |lines: &[serde_json::Value]| -> u64 {
        let of_refusals = lines.iter().filter(|l| l["kind"] == "refusal");
        of_refusals.map(|l| l["suppressed"].as_u64().expect("a count")).sum()
    };
    let summarized = |lines: &[serde_json::Value]| -> u64 {
        lines.iter().filter_map(|l| l["refused"].as_u64()).sum()
    };
    let lines = wait_log(&log, "every refusal accounted for", |lines| {
        refusal_lines(lines) + suppressed(lines) == FLOOD && summarized(lines) == FLOOD
    });
    let written = refusal_lines(&lines);
    assert!(written >= BUDGET, "the first window's budget is written: {written}");
    assert!(written <= BUDGET * (seconds + 1), "{written} lines in {seconds} s over the budget");
    let notes = lines.iter().filter(|l| l["kind"] == "refusal").count() as u64;
    assert!(notes >= 1 && notes <= seconds + 2, "one suppressed line per window: {notes}");
    let refusal = lines.iter().find(|l| l["status"] == 406).expect("a refusal line");
    assert_eq!(refusal["level"], "DEBUG", "{refusal}");
    assert_eq!(refusal["culprit"], "peer", "{refusal}");
    assert_eq!(refusal["reason"], "NotAcceptable", "{refusal}");
    assert!(refusal["code"].is_i64(), "{refusal}");
    assert!(
        lines.len() as u64 <= written + notes + seconds + 20,
        "nothing else floods: {} lines",
        lines.len()
    );
}

/// Goal: at the most verbose level, a bearer token (valid or not), the `Authorization` header
/// and a request body are never written to the log.
/// Method: `--auth-tokens` with a token, a session opened and a call made with it, a request
/// with a wrong token (401), bodies carrying a marker; `--log-level trace`; the whole log
/// searched for the secrets and the marker.
#[test]
fn no_token_authorization_value_or_body_at_trace() {
    const SECRET: &str = "tok-secret-5c1d9e";
    const WRONG: &str = "wrong-secret-77aa";
    const MARKER: &str = "BODY-MARKER-9f3b";
    let log = log_path("secrets");
    let tokens = log.with_file_name("tokens");
    std::fs::write(&tokens, format!("{SECRET} alice read\n")).expect("tokens");
    let tokens = tokens.to_str().expect("path");
    let args =
        ["--threads", "1", "--log-format", "json", "--log-level", "trace", "--auth-tokens", tokens];
    let server = start(&args, &log);
    let bearer = format!("Bearer {SECRET}");
    let init = INIT.replace("\"t\"", &format!("\"{MARKER}\""));
    let r = post(&server, &[("Authorization", &bearer)], &init);
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session").to_owned();
    let headers = [("Authorization", bearer.as_str()), ("Mcp-Session-Id", sid.as_str())];
    let echo = call(2, "echo", &format!(r#"{{"text":"{MARKER}"}}"#), false);
    assert_eq!(post(&server, &headers, &echo).status, 200);
    let wrong = format!("Bearer {WRONG}");
    let r = post(&server, &[("Authorization", &wrong), ("Mcp-Session-Id", &sid)], &echo);
    assert_eq!(r.status, 401, "{}", r.text());
    let bad_json = format!("{{\"{MARKER}\": ");
    let r = post(&server, &[("Authorization", &bearer), ("Mcp-Session-Id", &sid)], &bad_json);
    assert!(r.status >= 400, "{}", r.text());
    // The refusal of the unparseable body is the last thing logged: once it is there, the
    // lines of everything before are too.
    wait_log(&log, "the parse error", |lines| lines.iter().any(|l| l["status"] == 400));
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.lines().count() > 5, "trace logs something: {text}");
    for secret in [SECRET, WRONG, MARKER, "Bearer"] {
        assert!(!text.contains(secret), "{secret:?} in the log:\n{text}");
    }
}

/// Goal: text lines written to a file carry no ANSI escape (colour only on a terminal).
/// Method: text format at debug, some refusals, the log searched for ESC.
#[test]
fn text_to_a_file_has_no_ansi_escape() {
    let log = log_path("text");
    let server = start(&["--threads", "1", "--log-level", "debug"], &log);
    let raw = request("GET", &server.path, &server.host(), &[], None);
    assert_eq!(exchange(&server, &raw).status, 406);
    let start = Instant::now();
    // The banner goes to stdout before the start-up line reaches the log, so a refusal can be
    // written first: wait for both.
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("refused") && text.contains("started") {
            break text;
        }
        assert!(start.elapsed() < LOG_WAIT, "no refusal and start-up lines: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!text.contains('\u{1b}'), "an ANSI escape in a file:\n{text:?}");
    assert!(text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_err()), "text");
}

/// Goal: the start-up line says where the server listens (and its admin listener), which
/// driver it got, its node and its effective limits.
#[test]
fn the_start_up_line_has_addresses_driver_and_limits() {
    let log = log_path("startup");
    let args = [
        "--threads",
        "1",
        "--log-format",
        "json",
        "--metrics-listen",
        "127.0.0.1:0",
        "--max-sessions-per-core",
        "77",
        "--node-id",
        "9",
    ];
    let server = start(&args, &log);
    let lines = wait_log(&log, "started", |ls| ls.iter().any(|l| message(l) == "started"));
    let line = lines.iter().find(|l| message(l) == "started").expect("started");
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["listen"], server.addr.to_string(), "{line}");
    let admin = format!("Some({})", server.metrics());
    assert_eq!(line["metrics"], admin, "{line}");
    assert!(line["driver"].as_str().is_some_and(|d| !d.is_empty()), "{line}");
    assert_eq!(line["threads"], 1, "{line}");
    assert_eq!(line["node"], 9, "{line}");
    assert_eq!(line["max_sessions_per_core"], 77, "{line}");
    for limit in ["max_connections_per_core", "max_body_bytes", "replay_bytes", "core_buffer_bytes"]
    {
        assert!(line[limit].as_u64().is_some_and(|n| n > 0), "{limit}: {line}");
    }
}

/// Goal: SIGHUP applies `--log-level` again and says so; a filter that does not parse is
/// refused at start-up with a message naming the flag.
#[test]
fn sighup_reloads_the_log_level_and_a_bad_filter_is_refused() {
    let log = log_path("hup");
    let server = start(&["--threads", "1", "--log-format", "json", "--log-level", "info"], &log);
    wait_log(&log, "started", |ls| ls.iter().any(|l| message(l) == "started"));
    server.signal("HUP");
    let lines = wait_log(&log, "the reload", |ls| {
        ls.iter().any(|l| message(l) == "SIGHUP: log level reloaded")
    });
    let line = lines.iter().find(|l| message(l) == "SIGHUP: log level reloaded").expect("line");
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["log_level"], "info", "{line}");

    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--log-level", "tidemark=loud"])
        .output()
        .expect("run");
    assert!(!out.status.success(), "a bad filter must not start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-level"), "the message names the flag: {err}");
}
