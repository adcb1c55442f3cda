//! Goal: a stdio upstream's processes live and die with tidemark (issue 17 item 6). A child
//! whose own child (a grandchild: `npx` → `node`, a shell → the server) holds its stdout is
//! still seen to exit when it exits, so its call ends at once with "exited with status N"
//! instead of waiting for `--upstream-timeout-secs`; and no descendant, not even one that left
//! the process group with `setsid()` and ignores SIGTERM, outlives tidemark's drain or its
//! immediate exit on a second signal.
//!
//! Method: the real binary fronting tests/fixtures/stdio_upstream.py. In `--wrapper` mode the
//! fixture forks the server as its child (sharing stdin and stdout) and exits with status 4 on
//! the server's `exit_wrapper` tool, which never answers; its `detach` tool starts a setsid
//! grandchild and writes its pid to a file. Processes are looked up in /proc by pid.

mod support;

use std::time::{Duration, Instant};

use support::{call, call_stream, open_session, poll_until, Server, DRIVERS};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// Far beyond any bound below: a call that ends only at the upstream timeout fails the test.
const UPSTREAM_TIMEOUT_SECS: &str = "300";

/// How long a call whose wrapper exited may take to end (it ends within a fraction of a
/// second; the bound is for a loaded CI host).
const PROMPT_END: Duration = Duration::from_secs(20);

/// A file of this test's own (removed on drop).
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("tidemark-children-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        TempFile(path)
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// tidemark fronting the fixture started with `fixture_args`, on one core.
fn bridge(driver: &str, counter: &TempFile, fixture_args: &str) -> Server {
    let upstream = format!("stdio:python3 {FIXTURE} {fixture_args}");
    let env = format!("COUNTER_FILE={}", counter.path());
    let mut args = vec!["--upstream", upstream.trim_end(), "--upstream-env", &env];
    args.extend_from_slice(&["--threads", "1", "--upstream-kill-grace-ms", "300"]);
    args.extend_from_slice(&["--upstream-timeout-secs", UPSTREAM_TIMEOUT_SECS]);
    Server::on(driver, &args)
}

/// Calls `tool` and returns the text of its result.
fn call_text(server: &Server, sid: &str, id: u64, tool: &str, args: &str) -> String {
    let mut s = call_stream(server, sid, &call(id, tool, args, false), &[]);
    assert_eq!(s.status, 200, "{tool}");
    let evs = support::messages(&s.rest());
    let json = evs.last().unwrap_or_else(|| panic!("{tool}: no answer")).json();
    json["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{tool}: not a text result: {json}"))
        .to_owned()
}

/// True while `pid` runs: it exists and is not a zombie (a zombie is dead; it waits only for
/// its parent, or init after tidemark's exit, to collect its status).
fn alive(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // "pid (comm) state ...": comm may hold spaces, so the state follows the last ')'.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

fn dead_within(pid: &str, bound: Duration) -> bool {
    poll_until(bound, || !alive(pid))
}

/// Kills the processes it names when dropped, so a failing test leaves nothing running.
struct KillOnDrop(Vec<String>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|pid| alive(pid)) {
            let _ =
                std::process::Command::new("sh").args(["-c", &format!("kill -9 {pid}")]).status();
        }
    }
}

#[test]
fn a_wrapper_that_exits_ends_its_call_at_once_though_its_child_holds_stdout() {
    for driver in DRIVERS {
        let ctx = format!("{driver}: wrapper exits with status 4");
        let counter = TempFile::new(&format!("wrapper-{driver}.count"));
        let server = bridge(driver, &counter, "--wrapper");
        let sid = open_session(&server);
        let server_pid = call_text(&server, &sid, 1, "pid", "{}");
        let _cleanup = KillOnDrop(vec![server_pid.clone()]);
        let started = Instant::now();
        let mut s = call_stream(&server, &sid, &call(2, "exit_wrapper", "{}", false), &[]);
        assert_eq!(s.status, 200, "{ctx}");
        assert!(s.receive_to_end(PROMPT_END), "{ctx}: the call did not end within {PROMPT_END:?}");
        let evs = support::messages(&s.rest());
        let end = evs.last().unwrap_or_else(|| panic!("{ctx}: no end")).json();
        assert_eq!(end["error"]["code"], -32603, "{ctx}: {end}");
        assert_eq!(end["error"]["data"]["reason"], "exited with status 4", "{ctx}: {end}");
        assert!(started.elapsed() < PROMPT_END, "{ctx}: took {:?}", started.elapsed());
        // The wrapper's child (the server that held stdout) is ended with it.
        assert!(dead_within(&server_pid, Duration::from_secs(5)), "{ctx}: {server_pid} lives");
        // The session goes on with a new wrapper.
        let again = call_text(&server, &sid, 3, "echo", r#"{"text":"again"}"#);
        assert_eq!(again, "again", "{ctx}");
    }
}

/// Starts tidemark fronting a plain fixture, has it start a setsid grandchild, and returns
/// the server, the fixture's pid and the grandchild's pid.
fn with_detached_grandchild(name: &str, files: &(TempFile, TempFile)) -> (Server, String, String) {
    let server = bridge("uring", &files.0, "");
    let sid = open_session(&server);
    let child = call_text(&server, &sid, 1, "pid", "{}");
    let args = serde_json::json!({ "pidfile": files.1.path() }).to_string();
    let grandchild = call_text(&server, &sid, 2, "detach", &args);
    let written = std::fs::read_to_string(&files.1 .0).expect("the grandchild's pid file");
    assert_eq!(written.trim(), grandchild, "{name}");
    assert!(alive(&child) && alive(&grandchild), "{name}: both run before tidemark ends");
    (server, child, grandchild)
}

#[test]
fn no_descendant_outlives_the_drain_not_even_a_setsid_grandchild_ignoring_sigterm() {
    let files = (TempFile::new("drain.count"), TempFile::new("drain.pid"));
    let (mut server, child, grandchild) = with_detached_grandchild("drain", &files);
    let _cleanup = KillOnDrop(vec![child.clone(), grandchild.clone()]);
    server.signal("TERM");
    let status = server.exit_within(Duration::from_secs(10)).expect("drained");
    assert!(status.success(), "{status:?}");
    // Dead by the time tidemark has exited; the bound only covers a zombie's last moments.
    assert!(dead_within(&child, Duration::from_secs(1)), "child {child} outlived tidemark");
    let survived = !dead_within(&grandchild, Duration::from_secs(1));
    assert!(!survived, "setsid grandchild {grandchild} outlived tidemark's drain");
}

#[test]
fn no_descendant_outlives_the_immediate_exit_on_a_second_signal() {
    let files = (TempFile::new("exit.count"), TempFile::new("exit.pid"));
    let (mut server, child, grandchild) = with_detached_grandchild("exit", &files);
    let _cleanup = KillOnDrop(vec![child.clone(), grandchild.clone()]);
    // Keep a call running so the drain cannot end before the second signal.
    let sid = open_session(&server);
    let mut hanging = call_stream(&server, &sid, &call(9, "hang", "{}", false), &[]);
    assert_eq!(hanging.status, 200);
    server.signal("TERM");
    // Two signals of one kind that arrive before the signal thread reads the first are one
    // signal to it (a drain, not an exit): let it take the first before sending the second.
    assert!(server.exit_within(Duration::from_millis(300)).is_none(), "not draining");
    server.signal("TERM");
    let status = server.exit_within(Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(143), "128 + SIGTERM: {status:?}");
    drop(hanging.rest());
    assert!(dead_within(&child, Duration::from_secs(1)), "child {child} outlived tidemark");
    let survived = !dead_within(&grandchild, Duration::from_secs(1));
    assert!(!survived, "setsid grandchild {grandchild} outlived tidemark's exit");
}
