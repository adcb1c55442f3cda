//! The edge: flags → `Config`, logging, SO_REUSEPORT listeners, one pinned thread + monoio
//! runtime per core, and the optional `/metrics` exporter thread. The only `anyhow` user.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};

use tidemark::config::{self, Config, DriverChoice, MigrationPolicy, ResponseMode};
use tidemark::handoff::Inbox;
use tidemark::metrics::CoreMetrics;
use tidemark::worker::{self, WorkerSpec};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, ValueEnum)]
enum DriverFlag {
    Auto,
    Uring,
    Epoll,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeFlag {
    Auto,
    Sse,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyFlag {
    Strict,
    Off,
}

/// tidemark: an io_uring, thread-per-core MCP Streamable HTTP endpoint that never loses or
/// doubles a stream.
#[derive(Parser)]
#[command(version, about)]
struct Flags {
    /// Address to listen on (loopback by default: DNS-rebinding protection applies).
    #[arg(long, default_value = config::LISTEN_DEFAULT)]
    listen: SocketAddr,
    /// The MCP endpoint path.
    #[arg(long, default_value = config::PATH_DEFAULT)]
    path: String,
    /// Worker threads, one monoio runtime each (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// io driver: auto tries io_uring (DEFER_TASKRUN, COOP_TASKRUN, plain), then epoll.
    #[arg(long, value_enum, default_value = "auto")]
    driver: DriverFlag,
    /// Built-in tool sets, comma-separated: demo, conformance.
    #[arg(long, default_value = "demo")]
    tools: String,
    /// How request POSTs are answered: auto (tools/call as SSE, the rest JSON), sse, json.
    #[arg(long, value_enum, default_value = "auto")]
    response_mode: ModeFlag,
    /// strict enforces the migration boundary; off behaves like the SDK servers (comparison).
    #[arg(long, value_enum, default_value = "strict")]
    migration_policy: PolicyFlag,
    /// Extra Origin value to accept (repeatable), e.g. https://app.example.
    #[arg(long)]
    allowed_origin: Vec<String>,
    /// Extra Host value to accept (repeatable), e.g. mcp.example:8080.
    #[arg(long)]
    allowed_host: Vec<String>,
    #[arg(long, default_value_t = config::HEADER_BYTES_MAX)]
    max_header_bytes: usize,
    #[arg(long, default_value_t = config::HEADERS_MAX)]
    max_headers: usize,
    #[arg(long, default_value_t = config::BODY_BYTES_MAX)]
    max_body_bytes: usize,
    #[arg(long, default_value_t = config::HEADER_TIMEOUT_MS)]
    header_timeout_ms: u64,
    #[arg(long, default_value_t = config::IDLE_TIMEOUT_SECS)]
    idle_timeout_secs: u64,
    #[arg(long, default_value_t = config::CONNECTIONS_PER_CORE_MAX)]
    max_connections_per_core: usize,
    #[arg(long, default_value_t = config::SESSIONS_PER_CORE_MAX)]
    max_sessions_per_core: usize,
    #[arg(long, default_value_t = config::STREAMS_PER_SESSION_MAX)]
    max_streams_per_session: usize,
    /// Events held per session replay ring (power of two).
    #[arg(long, default_value_t = config::REPLAY_EVENTS_MAX)]
    replay_events: usize,
    /// Payload bytes held per session replay ring.
    #[arg(long, default_value_t = config::REPLAY_BYTES_MAX)]
    replay_bytes: usize,
    #[arg(long, default_value_t = config::STREAM_RETENTION_SECS)]
    stream_retention_secs: u64,
    #[arg(long, default_value_t = config::SESSION_IDLE_SECS)]
    session_idle_secs: u64,
    #[arg(long, default_value_t = config::SSE_RETRY_MS)]
    sse_retry_ms: u64,
    #[arg(long, default_value_t = config::SSE_KEEPALIVE_SECS)]
    sse_keepalive_secs: u64,
    #[arg(long, default_value_t = config::OWED_WAIT_MS)]
    owed_wait_ms: u64,
    #[arg(long, default_value_t = config::OWED_TIMEOUT_SECS)]
    owed_timeout_secs: u64,
    /// Serve Prometheus text at http://ADDR/metrics (off by default).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

impl Flags {
    fn into_config(self) -> (Config, String) {
        let threads = self
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let cfg = Config {
            listen: self.listen,
            path: self.path,
            threads,
            driver: match self.driver {
                DriverFlag::Auto => DriverChoice::Auto,
                DriverFlag::Uring => DriverChoice::Uring,
                DriverFlag::Epoll => DriverChoice::Epoll,
            },
            response_mode: match self.response_mode {
                ModeFlag::Auto => ResponseMode::Auto,
                ModeFlag::Sse => ResponseMode::Sse,
                ModeFlag::Json => ResponseMode::Json,
            },
            migration_policy: match self.migration_policy {
                PolicyFlag::Strict => MigrationPolicy::Strict,
                PolicyFlag::Off => MigrationPolicy::Off,
            },
            allowed_origins: self.allowed_origin,
            allowed_hosts: self.allowed_host,
            header_bytes_max: self.max_header_bytes,
            headers_max: self.max_headers,
            body_bytes_max: self.max_body_bytes,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            connections_per_core_max: self.max_connections_per_core,
            sessions_per_core_max: self.max_sessions_per_core,
            streams_per_session_max: self.max_streams_per_session,
            replay_events_max: self.replay_events,
            replay_bytes_max: self.replay_bytes,
            stream_retention: Duration::from_secs(self.stream_retention_secs),
            session_idle: Duration::from_secs(self.session_idle_secs),
            sse_retry_ms: self.sse_retry_ms,
            sse_keepalive: Duration::from_secs(self.sse_keepalive_secs),
            owed_wait: Duration::from_millis(self.owed_wait_ms),
            owed_timeout: Duration::from_secs(self.owed_timeout_secs),
            metrics_listen: self.metrics_listen,
        };
        (cfg, self.tools)
    }
}

/// A non-blocking SO_REUSEPORT listener, so every core accepts on the same port.
fn reuseport_listener(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into()).with_context(|| format!("bind {addr}"))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let (cfg, tools) = Flags::parse().into_config();
    cfg.validate()?;
    if cfg.headers_max > tidemark::http::HEADERS_CAP {
        bail!("--max-headers must be at most {}", tidemark::http::HEADERS_CAP);
    }
    let tool_sets =
        tidemark::tool::parse_tool_sets(&tools).map_err(|e| anyhow::anyhow!("--tools: {e}"))?;
    let first = reuseport_listener(cfg.listen)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..cfg.threads {
        listeners.push(reuseport_listener(bound)?);
    }
    let cfg = Arc::new(cfg);
    let inboxes = Arc::new(
        (0..cfg.threads).map(|_| Inbox::new(config::HANDOFF_INBOX_MAX)).collect::<Vec<_>>(),
    );
    let metrics: Vec<Arc<CoreMetrics>> =
        (0..cfg.threads).map(|_| Arc::new(CoreMetrics::default())).collect();
    let cpus = allowed_cpus();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut handles = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        let spec = WorkerSpec {
            index: index as u16,
            cfg: cfg.clone(),
            listener,
            inboxes: inboxes.clone(),
            metrics: metrics[index].clone(),
            tool_sets: tool_sets.clone(),
        };
        let ready = ready_tx.clone();
        // Worker i runs on the i-th CPU the process may use (respecting taskset/cgroups);
        // unpinned when there are more workers than CPUs.
        let pin = (cfg.threads <= cpus.len()).then(|| cpus[index]);
        handles.push(std::thread::Builder::new().name(format!("tidemark-{index}")).spawn(
            move || {
                if let Some(cpu) = pin {
                    let _ = monoio::utils::bind_to_cpu_set([cpu]);
                }
                worker::run(spec, ready);
            },
        )?);
    }
    let mut driver = "";
    for _ in 0..cfg.threads {
        match ready_rx.recv().context("a worker thread died before it started")? {
            Ok(got) => driver = got.name(),
            Err(e) => bail!("{e}"),
        }
    }
    let mut metrics_note = String::new();
    if let Some(addr) = cfg.metrics_listen {
        let listener =
            std::net::TcpListener::bind(addr).with_context(|| format!("bind metrics {addr}"))?;
        // The bound address, so `--metrics-listen 127.0.0.1:0` is usable by scripts.
        metrics_note = format!(" metrics=http://{}/metrics", listener.local_addr()?);
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name("tidemark-metrics".into())
            .spawn(move || serve_metrics(listener, metrics))?;
    }
    println!(
        "tidemark listening on http://{bound}{} driver={driver} threads={} tools={tools}{metrics_note}",
        cfg.path, cfg.threads
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// The CPUs this process may run on, from `Cpus_allowed_list` (e.g. `0-3,8`); all of
/// `available_parallelism` when it cannot be read.
fn allowed_cpus() -> Vec<usize> {
    let listed = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
        parse_cpu_list(line.split(':').nth(1)?.trim())
    });
    listed.filter(|v| !v.is_empty()).unwrap_or_else(|| {
        (0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).collect()
    })
}

/// Parses a Linux CPU list (`0-3,8,10-11`).
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// A tiny blocking HTTP/1.0 responder for `GET /metrics`, off the worker cores.
fn serve_metrics(listener: std::net::TcpListener, metrics: Vec<Arc<CoreMetrics>>) {
    use std::io::{Read, Write};
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut head = [0u8; 2048];
        let n = conn.read(&mut head).unwrap_or(0);
        let ok = head[..n].starts_with(b"GET /metrics");
        let mut body = String::new();
        if ok {
            CoreMetrics::render(&metrics, &mut body);
        }
        let status = if ok { "200 OK" } else { "404 Not Found" };
        let _ = write!(conn, "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_parse() {
        assert_eq!(super::parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(super::parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(super::parse_cpu_list("x"), None);
    }
}
