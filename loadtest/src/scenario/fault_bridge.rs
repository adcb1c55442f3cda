//! `fault --path bridge-stdio|bridge-http`: the randomized fault test through tidemark's bridge
//! (CONTRACT §7). The calls are `fault`'s legacy calls, cut and recovered on the client side
//! exactly as there, against a tidemark whose `slow_counter` is an upstream's: the stdio
//! fixture (`tests/fixtures/stdio_upstream.py`, one child per session, its counter in a file
//! shared by every child) or a second tidemark with `--tools demo` behind `CutProxy`. On the
//! other side of tidemark, one call in `--upstream-fault-every` gets an upstream fault once it
//! has received a drawn number of progress values (so the upstream has counted it):
//! - stdio: the session's child is killed (SIGKILL; its pid asked of the fixture's `pid` tool
//!   before the call's first POST), and the call waits until the child is reaped, so the
//!   session's next call starts a new one rather than meet the dying one;
//! - HTTP: every connection between tidemark and the upstream that carried a byte from the
//!   upstream within the last `ACTIVE_WITHIN` is cut (FIN both ways): the call's own stream,
//!   and those of other sessions' calls streaming at that moment (an idle kept-alive
//!   connection is left alone: tidemark never sends a request twice, so one cut while idle
//!   fails the next call before it reaches the upstream, which tests nothing more).
//!
//! A call whose upstream failed must end with the bridge's `-32603` as its final, resumable
//! answer: `fault` counts it as `upstream_failed`, not as lost. The execution counter is the
//! upstream's (`get_counter` through the bridge), so a second execution by the upstream — a
//! request tidemark sent twice — shows as a double execution.
//!
//! Owns: the two `UpstreamFaults` and the cutting proxy. Never: decides what a call checks
//! (that is `fault`'s).
#![allow(
    clippy::disallowed_types,
    reason = "the rule keeps the server's cores apart; here a Mutex is the proxy's table of open \
              connections, shared by its copy threads and the cutting call"
)]

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::client::{self, Session};
use crate::scenario::fault::UpstreamFaults;
use crate::wire::Target;

/// JSON-RPC ids of the `pid` requests: above every call's (`fault::CALL_ID_BASE` + calls), one
/// each, since a session refuses an id it has seen.
const PID_REQUEST_ID_BASE: u64 = 2_000_000_000;
/// How long a killed child may take to be reaped by tidemark before the call goes on anyway.
const REAP_WAIT_MAX: Duration = Duration::from_secs(5);
const REAP_POLL: Duration = Duration::from_millis(5);
/// A proxied connection counts as carrying a response when the upstream wrote to it this
/// recently.
const ACTIVE_WITHIN: Duration = Duration::from_millis(20);

/// Kills the session's stdio child mid-call.
#[derive(Debug)]
pub struct StdioChildKills {
    target: Target,
    timeout: Duration,
    every: u64,
    next_id: AtomicU64,
}

impl StdioChildKills {
    pub fn new(target: Target, timeout: Duration, every: u64) -> StdioChildKills {
        StdioChildKills { target, timeout, every, next_id: AtomicU64::new(PID_REQUEST_ID_BASE) }
    }
}

impl UpstreamFaults for StdioChildKills {
    fn every(&self) -> u64 {
        self.every
    }

    fn prepare(&self, session: &Session) -> Result<u64, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = r#"{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{"name":"pid","arguments":{}}}"#;
        let text = client::tool_text(&self.target, session, id, body, self.timeout)
            .map_err(|e| format!("asking the child's pid: {e:#}"))?;
        text.trim().parse().map_err(|_| format!("the pid tool returned {text:?}"))
    }

    fn inject(&self, pid: u64) -> String {
        match std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status() {
            Ok(status) if status.success() => format!("killed child {pid}"),
            Ok(status) => format!("kill {pid}: {status}"),
            Err(e) => format!("kill {pid}: {e}"),
        }
    }

    fn settle(&self, pid: u64) {
        // tidemark reaps its children: once the pid is gone it has seen the exit.
        let deadline = Instant::now() + REAP_WAIT_MAX;
        while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(REAP_POLL);
        }
    }
}

/// Cuts the connections between tidemark and its HTTP upstream that carry a response.
#[derive(Debug)]
pub struct HttpUpstreamCuts {
    proxy: CutProxy,
    every: u64,
}

impl HttpUpstreamCuts {
    pub fn new(proxy: CutProxy, every: u64) -> HttpUpstreamCuts {
        HttpUpstreamCuts { proxy, every }
    }
}

impl UpstreamFaults for HttpUpstreamCuts {
    fn every(&self) -> u64 {
        self.every
    }

    fn prepare(&self, _session: &Session) -> Result<u64, String> {
        Ok(0)
    }

    fn inject(&self, _handle: u64) -> String {
        format!("cut {} upstream connection(s)", self.proxy.cut_active())
    }

    fn settle(&self, _handle: u64) {}
}

/// A loopback TCP proxy between tidemark and its HTTP upstream that can cut the connections
/// carrying a response. Two threads per connection copy the bytes; either direction ending (or
/// a cut) closes both sides.
#[derive(Debug, Clone)]
pub struct CutProxy {
    open: Arc<Mutex<HashMap<u64, Proxied>>>,
    started: Instant,
}

/// One proxied connection: its two sockets and when the upstream last wrote to it.
#[derive(Debug)]
struct Proxied {
    ends: [TcpStream; 2],
    /// Milliseconds since the proxy started.
    upstream_wrote_ms: Arc<AtomicU64>,
}

impl CutProxy {
    /// Listens on `listen` and forwards each connection to `to`.
    pub fn start(listen: SocketAddr, to: SocketAddr) -> anyhow::Result<CutProxy> {
        let listener =
            TcpListener::bind(listen).with_context(|| format!("proxy: binding {listen}"))?;
        let proxy = CutProxy { open: Arc::default(), started: Instant::now() };
        let accepting = proxy.clone();
        std::thread::Builder::new().name("cut-proxy".into()).spawn(move || {
            let mut next = 0u64;
            for inbound in listener.incoming().flatten() {
                next += 1;
                if let Err(e) = accepting.forward(next, inbound, to) {
                    eprintln!("# cut proxy: connection {next}: {e:#}");
                }
            }
        })?;
        Ok(proxy)
    }

    fn forward(&self, id: u64, inbound: TcpStream, to: SocketAddr) -> anyhow::Result<()> {
        let outbound = TcpStream::connect(to).with_context(|| format!("connecting to {to}"))?;
        let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
        let ends = [inbound.try_clone()?, outbound.try_clone()?];
        let upstream_wrote_ms = Arc::new(AtomicU64::new(0));
        let proxied = Proxied { ends, upstream_wrote_ms: upstream_wrote_ms.clone() };
        self.open.lock().expect("invariant: no panic holds the lock").insert(id, proxied);
        for (mut from, mut into, wrote) in [
            (inbound.try_clone()?, outbound.try_clone()?, None),
            (outbound, inbound, Some(upstream_wrote_ms)),
        ] {
            let (open, started) = (self.open.clone(), self.started);
            std::thread::Builder::new().name(format!("cut-proxy-{id}")).spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 || into.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    if let Some(wrote) = &wrote {
                        wrote.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                }
                let _ = (from.shutdown(Shutdown::Both), into.shutdown(Shutdown::Both));
                open.lock().expect("invariant: no panic holds the lock").remove(&id);
            })?;
        }
        Ok(())
    }

    /// Cuts every connection the upstream wrote to within `ACTIVE_WITHIN`; says how many.
    pub fn cut_active(&self) -> usize {
        let now = self.started.elapsed().as_millis() as u64;
        let recent = ACTIVE_WITHIN.as_millis() as u64;
        let mut open = self.open.lock().expect("invariant: no panic holds the lock");
        let active: Vec<u64> = open
            .iter()
            .filter(|(_, p)| {
                now.saturating_sub(p.upstream_wrote_ms.load(Ordering::Relaxed)) <= recent
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &active {
            if let Some(p) = open.remove(id) {
                for end in &p.ends {
                    let _ = end.shutdown(Shutdown::Both);
                }
            }
        }
        active.len()
    }
}
