//! Goal: the configuration's layers through the real binary (issue 21 item 4): a server
//! started from a `--config` file, with `TIDEMARK_*` overriding one key and a flag another,
//! serves exactly those limits; `--print-config` exits 0 with TOML that loads back to the same
//! output; the example `deploy/tidemark.toml` loads; a bad file is refused naming the key; a
//! SIGHUP re-reads the file and logs what needs a restart. Method: the binary over real
//! sockets (support::Server), files in the temp directory, the log read from a file.
mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use support::*;

/// A file named for the test and process.
fn file_with(name: &str, text: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("tidemark-config-file-{}-{name}", std::process::id()));
    std::fs::write(&path, text).expect("write the test file");
    path
}

/// Runs the binary to completion (for `--print-config` and refusals) with `envs`.
fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    command.args(args).envs(envs.iter().copied());
    command.output().expect("run tidemark")
}

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// The key lines of a `--print-config` output (comments left out).
fn key_lines(printed: &str) -> Vec<&str> {
    printed.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect()
}

#[test]
fn a_server_from_a_file_serves_the_env_and_flag_overrides_at_their_edges() {
    // File: 300 body bytes, 6 headers. Env raises the body limit to 512, a flag the header
    // count to 12; the file's own values would refuse what is served here.
    let path = file_with("served.toml", "max-body-bytes = 300\nmax-headers = 6\nthreads = 1\n");
    let file = path.to_str().expect("utf-8");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    command.args(["--listen", "127.0.0.1:0", "--config", file, "--max-headers", "12"]);
    command.env("TIDEMARK_MAX_BODY_BYTES", "512");
    let server = Server::spawn(command);
    let sid = open_session(&server);
    let session = [("Mcp-Session-Id", sid.as_str())];

    let base = ping(1);
    let at = format!("{base}{}", " ".repeat(512 - base.len()));
    let r = post(&server, &session, &at);
    assert_eq!(r.status, 200, "a body of 512 bytes (env) is served: {}", r.text());
    assert_eq!(r.json()["id"], 1);
    let r = post(&server, &session, &format!("{at} "));
    assert_eq!(r.status, 413, "513 bytes: over the env's limit");
    assert!(r.json()["error"]["code"].is_i64(), "a JSON-RPC error: {}", r.text());

    // Host, Content-Type, Accept, Mcp-Session-Id, Content-Length: 5; pad to 12, then 13.
    let pads: Vec<(String, String)> = (0..8).map(|i| (format!("X-Pad-{i}"), "x".into())).collect();
    let mut headers: Vec<(&str, &str)> = session.to_vec();
    headers.extend(pads.iter().take(7).map(|(n, v)| (n.as_str(), v.as_str())));
    let r = post(&server, &headers, &ping(2));
    assert_eq!(r.status, 200, "12 header lines (the flag's limit) are served: {}", r.text());
    headers.push((pads[7].0.as_str(), pads[7].1.as_str()));
    let r = post(&server, &headers, &ping(3));
    assert_eq!(r.status, 431, "13 header lines: over the flag's limit");
}

#[test]
fn print_config_exits_zero_names_sources_and_loads_back_to_the_same() {
    let path =
        file_with("print.toml", "max-headers = 20\nallowed-origin = [\"https://a.example\"]\n");
    let file = path.to_str().expect("utf-8");
    let args = ["--config", file, "--path", "/rpc", "--print-config"];
    let first = run(&args, &[("TIDEMARK_SSE_RETRY_MS", "1500"), ("TIDEMARK_NO_SUCH", "1")]);
    assert!(first.status.success(), "exit 0: {first:?}");
    let printed = String::from_utf8(first.stdout).expect("utf-8");
    assert!(printed.contains(&format!("# file {file}\nmax-headers = 20\n")), "{printed}");
    assert!(printed.contains("# env TIDEMARK_SSE_RETRY_MS\nsse-retry-ms = 1500\n"), "{printed}");
    assert!(printed.contains("# flag\npath = \"/rpc\"\n"), "{printed}");
    assert!(printed.contains("# default\nmax-body-bytes = 4194304\n"), "{printed}");
    let log = String::from_utf8_lossy(&first.stderr);
    assert!(log.contains("TIDEMARK_NO_SUCH"), "the unknown variable is warned about: {log}");
    assert!(!printed.contains("listening"), "nothing started: {printed}");

    let again = file_with("print-again.toml", &printed);
    let second = run(&["--config", again.to_str().expect("utf-8"), "--print-config"], &[]);
    assert!(second.status.success(), "the printed file loads: {second:?}");
    let reprinted = String::from_utf8(second.stdout).expect("utf-8");
    assert_eq!(key_lines(&printed), key_lines(&reprinted), "the same configuration");
}

#[test]
fn the_example_file_loads_and_a_bad_file_is_refused_naming_the_key() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/tidemark.toml");
    let out = run(&["--config", example, "--print-config"], &[]);
    assert!(out.status.success(), "deploy/tidemark.toml loads: {out:?}");
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    assert!(printed.contains(&format!("# file {example}\nupstream = [")), "{printed}");
    assert!(printed.contains("upstream-forward-authorization = [\"api\"]"), "{printed}");

    let bad = file_with("bad.toml", "max-body-byte = 10\n");
    let out = run(&["--config", bad.to_str().expect("utf-8")], &[]);
    assert!(!out.status.success(), "refused");
    let log = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "unknown key 'max-body-byte' in {} (did you mean 'max-body-bytes'?)",
        bad.display()
    );
    assert!(log.contains(&expected), "{log}");

    let help = run(&["--help"], &[]);
    let help = String::from_utf8(help.stdout).expect("utf-8");
    for flag in ["--config <FILE>", "--print-config", "--max-body-bytes"] {
        assert!(help.contains(flag), "--help lists {flag}: {help}");
    }
}

#[test]
fn sighup_rereads_the_file_and_logs_what_needs_a_restart() {
    let path = file_with("hup.toml", "drain-secs = 5\nmax-headers = 20\n");
    let file = path.to_str().expect("utf-8");
    let log = std::env::temp_dir().join(format!("tidemark-config-hup-{}.log", std::process::id()));
    let server = Server::start_logged(&["--config", file, "--threads", "1"], &[], &log);
    std::fs::write(&path, "drain-secs = 6\nmax-headers = 20\n").expect("rewrite");
    server.signal("HUP");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until(Duration::from_secs(10), "the restart-needed line", || {
        read().contains("restart needed for drain-secs")
    });
    // A file that no longer loads changes nothing and says why.
    std::fs::write(&path, "drain-sec = 6\n").expect("rewrite");
    server.signal("HUP");
    wait_until(Duration::from_secs(10), "the not-re-read line", || {
        read().contains("not re-read") && read().contains("unknown key 'drain-sec'")
    });
    let r = post(&server, &[], INIT);
    assert_eq!(r.status, 200, "still serving: {}", r.text());
}

/// Goal: `log-level` is the reloadable key: changed in the file, a SIGHUP applies it (the
/// debug lines of a refusal appear only after it); set by a flag, the file's change has no
/// effect and the log says so.
#[test]
fn sighup_applies_the_files_log_level_unless_a_flag_sets_it() {
    let path = file_with("hup-level.toml", "log-level = \"info\"\n");
    let file = path.to_str().expect("utf-8");
    let log = std::env::temp_dir().join(format!("tidemark-config-lvl-{}.log", std::process::id()));
    let server = Server::start_logged(&["--config", file, "--threads", "1"], &[], &log);
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::write(&path, "log-level = \"debug\"\n").expect("rewrite");
    server.signal("HUP");
    wait_until(Duration::from_secs(10), "the reloaded-level line", || {
        read().contains("reloadable keys changed: log-level")
            && read().contains("log level reloaded")
    });
    assert!(read().contains("debug"), "the new level is named: {}", read());

    let pinned = file_with("hup-pinned.toml", "log-level = \"warn\"\n");
    let pinned_file = pinned.to_str().expect("utf-8");
    let log2 = std::env::temp_dir().join(format!("tidemark-config-pin-{}.log", std::process::id()));
    let flagged = Server::start_logged(
        &["--config", pinned_file, "--log-level", "info", "--threads", "1"],
        &[],
        &log2,
    );
    std::fs::write(&pinned, "log-level = \"debug\"\n").expect("rewrite");
    flagged.signal("HUP");
    let read2 = || std::fs::read_to_string(&log2).unwrap_or_default();
    wait_until(Duration::from_secs(10), "the shadowed line", || {
        read2().contains("set by env or flag (no effect): log-level")
    });
}

/// Goal: `--print-config` never prints a secret embedded in a value (issue 38, finding 10): a
/// URL's password in `--upstream` and `--otlp-endpoint`, a `client_secret` query parameter of
/// `--auth-jwks-url`, a stdio command line's `--api-key=…` and `--token …`; what is not secret
/// (hosts, other parameters and flags) is still printed. Method: the binary with those flags;
/// its output searched for each secret and for the redacted forms.
#[test]
fn print_config_redacts_secrets_inside_values() {
    let args = [
        "--upstream",
        "api=https://alice:hunter2-pw@api.example:8443/mcp",
        "--upstream",
        "gh=stdio:gh-server --api-key=sk-live-123 --verbose --token tok-456",
        "--otlp-endpoint",
        "http://otel:otlp-pw@collector:4318",
        "--auth-issuer",
        "https://idp.example",
        "--auth-jwks-url",
        "https://idp.example/jwks?client_id=tm&client_secret=cs-789",
        "--print-config",
    ];
    let out = run(&args, &[]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    for secret in ["hunter2-pw", "sk-live-123", "tok-456", "otlp-pw", "cs-789"] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
    for shown in [
        "https://alice:<redacted>@api.example:8443/mcp",
        "gh-server --api-key=<redacted> --verbose --token <redacted>",
        "http://otel:<redacted>@collector:4318",
        "jwks?client_id=tm&client_secret=<redacted>",
    ] {
        assert!(printed.contains(shown), "{shown} not printed:\n{printed}");
    }
}
