//! Real `redis-server`s for the durable tests (`durable_adopt`, `durable_sentinel`,
//! `durable_cluster`): one on a free loopback port, killed on drop; a replica; a sentinel's or a
//! cluster node's arguments given by the test. Debian's `redis-server` must be on PATH: a test
//! is skipped loudly without it (`have_redis`), unless `TIDEMARK_REQUIRE_REDIS=1` (the README's
//! test command sets it), which makes that a failure.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A `redis-server` (or sentinel) of its own on a free port; killed on drop.
pub struct Redis {
    pub child: Child,
    pub port: u16,
    /// A directory of this server's own (a replica's), removed on drop.
    scratch: Option<PathBuf>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Whether `redis-server` is on PATH (a panic without it under `TIDEMARK_REQUIRE_REDIS=1`).
pub fn have_redis() -> bool {
    let found = Command::new("sh").args(["-c", "command -v redis-server"]).output();
    if found.is_ok_and(|o| o.status.success()) {
        return true;
    }
    if std::env::var("TIDEMARK_REQUIRE_REDIS").as_deref() == Ok("1") {
        panic!("redis-server is not installed and TIDEMARK_REQUIRE_REDIS=1");
    }
    eprintln!("SKIPPED: redis-server not on PATH (apt-get install redis-server)");
    false
}

/// A fresh directory of the caller's own (a sentinel's config, a cluster node's `nodes.conf`, a
/// replica's RDB file): one per call, so a test removing its directory never takes another's
/// running in parallel, and a replica never loads another test's `dump.rdb` at its start.
pub fn scratch_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tidemark-redis-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A session's key in the store as `durable::keys` names it: `prefix` (`tm:s:`, `tm:st:`,
/// `tm:ev:`), then the session id as the key's hash tag.
pub fn store_key(prefix: &str, sid: &str) -> String {
    format!("{prefix}{{{sid}}}")
}

impl Redis {
    /// One server on a free port, or `None` (said why) without `redis-server`.
    pub fn standalone() -> Option<Redis> {
        have_redis().then(|| Redis::start(&[], &[]))
    }

    /// A server on a free port with `extra` arguments (`before`: a config file first and
    /// `--sentinel`, for a sentinel).
    pub fn start(before: &[&str], extra: &[&str]) -> Redis {
        Redis::start_on(free_port(), before, extra)
    }

    /// `start` on port `port` (a killed server started again where its peers knew it).
    pub fn start_on(port: u16, before: &[&str], extra: &[&str]) -> Redis {
        let port_text = port.to_string();
        let mut args: Vec<&str> = before.to_vec();
        args.extend([
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        if before.is_empty() {
            // A replica's first sync at once, not after Redis 7's 5 s wait for more replicas.
            args.extend(["--repl-diskless-sync-delay", "0"]);
        }
        args.extend(extra);
        let child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let redis = Redis { child, port, scratch: None };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis.command("PING").as_deref() != Some("+PONG") {
            assert!(Instant::now() < deadline, "redis-server on {port} did not answer PING");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    /// A replica of `primary`; the RDB file it loads through lands in `scratch_dir`.
    pub fn replica_of(primary: &Redis) -> Redis {
        let dir = scratch_dir();
        let text = dir.to_str().expect("utf-8 path");
        let primary_port = primary.port.to_string();
        let mut replica =
            Redis::start(&[], &["--replicaof", "127.0.0.1", &primary_port, "--dir", text]);
        replica.scratch = Some(dir);
        replica
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One inline command; its reply's lines joined by `|` (`$1|1` for a bulk "1").
    pub fn command(&self, line: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(format!("{line}\r\n").as_bytes()).ok()?;
        let mut buf = [0u8; 4096];
        let n = super::read_retrying(&mut s, &mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).lines().collect::<Vec<_>>().join("|"))
    }

    /// Sends `sig` (`STOP`, `CONT`, `KILL`) to the server.
    pub fn signal(&self, sig: &str) {
        let status =
            Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig} redis-server");
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
        }
        self.kill();
        if let Some(dir) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
