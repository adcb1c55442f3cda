//! Smoke test of `tidemark-bare` (the limit of scripts/limit.sh): on each driver it starts,
//! says where it listens, and `tidemark-load ping` (sessions set up, pipelined calls, every
//! answer's id checked) runs clean against it for a moment. Not a measurement.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

/// Kills the server however the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(driver: &str) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark-bare"))
        .args(["--listen", "127.0.0.1:0", "--threads", "1", "--driver", driver])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tidemark-bare starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("tidemark-bare says where it listens");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    (server, url)
}

#[test]
fn ping_runs_clean_against_the_bare_server_on_each_driver() {
    for driver in ["auto", "epoll"] {
        let (_server, url) = start(driver);
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark-load"))
            .args(["ping", "--url", &url, "--connections", "4", "--pipeline", "4"])
            .args(["--duration", "300ms", "--warmup", "100ms", "--quiet"])
            .output()
            .expect("tidemark-load runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{driver}: tidemark-load failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("result: OK"), "{driver}: {stdout}");
    }
}
