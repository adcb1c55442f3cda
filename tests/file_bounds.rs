//! Goal: every file tidemark reads by a name the operator gave is bounded (issue 38, finding 2):
//! a name that ends at `/dev/zero` (whose length reads 0) or at a FIFO (whose open waits for a
//! writer) is refused at start, quickly, with the file named; on a reload (SIGHUP, or the JWK
//! Set's refresh) it is refused, the old set stays, the memory stays put and SIGTERM is still
//! answered. Before the fix, a `/dev/zero` link took RSS past 1 GiB within seconds and a FIFO
//! blocked the start (or the signal thread) forever.
//!
//! Method: the real binary, each kind of file in a temporary directory, replaced by a symlink to
//! `/dev/zero` or by a FIFO (`mkfifo`); each run is watched with a short deadline and an RSS
//! ceiling, so the old behaviour fails the test instead of hanging it or eating the host.

mod support;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// How long a refused start may take: it reads nothing, so well under a second is normal;
/// a FIFO that blocks the open (the old behaviour) hits this.
const START_BOUND: Duration = Duration::from_secs(5);
/// How long a reload may take to log its refusal.
const RELOAD_BOUND: Duration = Duration::from_secs(5);
/// The most resident memory a refused read may leave: tidemark starts at about 20 MiB; the old
/// read of `/dev/zero` passed 1 GiB in seconds.
const RSS_CEILING_KIB: u64 = 256 * 1024;

/// A fresh temporary directory for one test.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-bounds-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// What replaces a good file.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// A symlink to `/dev/zero`: endless bytes, length 0.
    Zero,
    /// A FIFO no one writes: its blocking open never returns.
    Fifo,
}

impl Hostile {
    /// Replaces `path` (whatever it is) by this.
    fn put(self, path: &Path) {
        let _ = std::fs::remove_file(path);
        match self {
            Hostile::Zero => std::os::unix::fs::symlink("/dev/zero", path).expect("symlink"),
            Hostile::Fifo => {
                let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
                assert!(status.success(), "mkfifo {}", path.display());
            }
        }
    }
}

/// One kind of file: the flags that make tidemark read it, the file itself, and the log line
/// that says a reload of it was refused.
struct Kind {
    /// The flag naming the file (what every error about it starts with).
    flag: &'static str,
    args: Vec<String>,
    file: PathBuf,
    refused_reload: &'static str,
}

/// Every kind of file, written good into `dir`.
fn kinds(dir: &Path) -> Vec<Kind> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        // Removed first: the last case may have left a FIFO here, whose write would block.
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, text).expect("write");
        path
    };
    let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let config = write("config.toml", "drain-secs = 5\n");
    let tokens = write("tokens", "tok-alice alice read\n");
    let policy = write("policy", "tool echo read\n");
    // RFC 8037 Appendix A.2's Ed25519 public key: one usable key, as a set must hold.
    let jwks = write(
        "jwks.json",
        r#"{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","kid":"a","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#,
    );
    let key = write("state-key", &"k".repeat(64));
    let credentials = write("credentials", "# none\n");
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    let cert = write("cert.pem", &pair.cert.pem());
    let tls_key = write("key.pem", &pair.key_pair.serialize_pem());
    let with_config =
        |flag: &str, file: &Path| vec!["--config".into(), s(&config), flag.into(), s(file)];
    let kind = |flag, args: Vec<String>, file: &Path, refused_reload| Kind {
        flag,
        args,
        file: file.to_owned(),
        refused_reload,
    };
    vec![
        kind("--config", vec!["--config".into(), s(&config)], &config, "not re-read"),
        kind(
            "--auth-tokens",
            vec!["--auth-tokens".into(), s(&tokens)],
            &tokens,
            "--auth-tokens not reloaded",
        ),
        kind(
            "--auth-policy",
            vec!["--auth-tokens".into(), s(&tokens), "--auth-policy".into(), s(&policy)],
            &policy,
            "--auth-policy not reloaded",
        ),
        kind(
            "--tls-cert",
            vec!["--tls-cert".into(), s(&cert), "--tls-key".into(), s(&tls_key)],
            &cert,
            "TLS files not loaded",
        ),
        kind(
            "--tls-key",
            vec!["--tls-cert".into(), s(&cert), "--tls-key".into(), s(&tls_key)],
            &tls_key,
            "TLS files not loaded",
        ),
        kind(
            "--auth-jwks-file",
            // Static tokens beside the JWT verifier, so the old set can be shown to serve; the
            // set read again every second (its refresh is its reload).
            [
                "--auth-issuer",
                "https://issuer.example",
                "--auth-jwks-refresh-secs",
                "1",
                "--auth-jwks-min-refetch-secs",
                "1",
                "--auth-jwks-file",
                &s(&jwks),
                "--auth-tokens",
                &s(&tokens),
            ]
            .map(String::from)
            .to_vec(),
            &jwks,
            "JWKS file unusable",
        ),
        kind(
            "--request-state-key-file",
            with_config("--request-state-key-file", &key),
            &key,
            "upstream set refused",
        ),
        kind(
            "--upstream-credentials",
            with_config("--upstream-credentials", &credentials),
            &credentials,
            "upstream set refused",
        ),
    ]
}

/// The resident memory of process `pid`, in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or("VmRSS: 0 kB");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// How a watched start ended.
enum Start {
    Exited { code: Option<i32>, stderr: String },
    StillRunning,
    Ballooned(u64),
}

/// Runs the binary with `args` until it exits, `START_BOUND` passes, or its RSS passes the
/// ceiling (the last two kill it).
fn watched_start(args: &[String]) -> Start {
    let mut all = vec!["--threads", "1"];
    all.extend(args.iter().map(String::as_str));
    let mut child = spawn_refusable(&all);
    let deadline = Instant::now() + START_BOUND;
    let outcome = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            let _ = child.stderr.take().expect("stderr").read_to_string(&mut stderr);
            break Start::Exited { code: status.code(), stderr };
        }
        let rss = rss_kib(child.id());
        if rss > RSS_CEILING_KIB {
            break Start::Ballooned(rss);
        }
        if Instant::now() > deadline {
            break Start::StillRunning;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

/// Goal: each kind of file, replaced by a `/dev/zero` link or a FIFO, refuses the start at
/// once, the error naming the file and saying why. Method: `watched_start` per case.
#[test]
fn a_device_or_a_fifo_refuses_the_start_naming_the_file() {
    let dir = temp_dir("start");
    for hostile in [Hostile::Zero, Hostile::Fifo] {
        for index in 0..kinds(&dir).len() {
            // Every file good again but this one.
            let kind = kinds(&dir).swap_remove(index);
            hostile.put(&kind.file);
            let ctx = format!("{} as {hostile:?}", kind.flag);
            match watched_start(&kind.args) {
                Start::Exited { code, stderr } => {
                    assert_ne!(code, Some(0), "{ctx}: started: {stderr}");
                    let named = format!("{} {}", kind.flag, kind.file.display());
                    assert!(stderr.contains(&named), "{ctx}: the file is not named: {stderr}");
                    assert!(stderr.contains("not a regular file"), "{ctx}: why: {stderr}");
                }
                Start::StillRunning => panic!("{ctx}: still running after {START_BOUND:?}"),
                Start::Ballooned(kib) => panic!("{ctx}: RSS past {kib} KiB"),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Lines of `log` holding both `marker` and `path`.
fn refusals(log: &Path, marker: &str, path: &str) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains(marker) && l.contains(path)).count()
}

/// Goal: a reload (SIGHUP; the JWK Set's own refresh) of each kind of file that became a
/// `/dev/zero` link, then a FIFO, is refused naming the file; the server keeps its old set
/// (a token of the old set still opens a session), its RSS stays under the ceiling, and
/// SIGTERM still ends it. Method: one server per kind, its log read for the refusal.
#[test]
fn a_device_or_a_fifo_on_reload_keeps_the_old_set_and_sigterm_works() {
    let dir = temp_dir("reload");
    for index in 0..kinds(&dir).len() {
        let kind = kinds(&dir).swap_remove(index);
        let marker = kind.refused_reload;
        let log = dir.join(format!("{}.log", kind.flag.trim_start_matches('-')));
        let mut args: Vec<&str> = vec!["--threads", "1", "--metrics-listen", "127.0.0.1:0"];
        args.extend(kind.args.iter().map(String::as_str));
        let mut server = Server::start_logged(&args, &[("RUST_BACKTRACE", "0")], &log);
        let path = kind.file.display().to_string();
        for (seen, hostile) in [Hostile::Zero, Hostile::Fifo].into_iter().enumerate() {
            let ctx = format!("{} as {hostile:?}", kind.flag);
            hostile.put(&kind.file);
            server.signal("HUP");
            // The RSS is looked at while waiting, so the old unbounded read fails fast.
            let refused = poll_until(RELOAD_BOUND, || {
                refusals(&log, marker, &path) > seen || rss_kib(server.pid()) > RSS_CEILING_KIB
            });
            let rss = rss_kib(server.pid());
            assert!(rss < RSS_CEILING_KIB, "{ctx}: RSS {rss} KiB");
            assert!(refused, "{ctx}: no `{marker}` line naming {path}");
            assert!(scrape(&server.metrics()).contains("tidemark_"), "{ctx}: /metrics");
            if !kind.args.iter().any(|a| a == "--tls-cert") {
                let token = [("Authorization", "Bearer tok-alice")];
                let r = post(&server, &token, INIT);
                assert_eq!(r.status, 200, "{ctx}: the old set did not stay: {}", r.text());
            }
        }
        server.signal("TERM");
        let exited = server.exit_within(Duration::from_secs(5));
        assert!(exited.is_some(), "{}: SIGTERM unanswered", kind.flag);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
