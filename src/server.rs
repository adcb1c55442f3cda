//! The embedding entry point: `Server` takes a `Config` and providers, and runs the endpoint
//! exactly as the `tidemark` binary does: SO_REUSEPORT listeners, one pinned thread with its own
//! monoio runtime per core, the hand-off inboxes, the optional `/metrics` listener, and the
//! one-line start-up banner on stdout.
//!
//! Owns: start-up and the threads' lifetime. Never: handles a request (the workers do).

use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, BuiltinSet, Config, ConfigError};
use crate::metrics::CoreMetrics;
use crate::provider::builtin::BuiltinProvider;
use crate::provider::Provider;
use crate::runtime::handoff::Inbox;
use crate::runtime::{self, ProviderFactory, WorkerSpec};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The operator's configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OS refused a socket, a bind or a thread.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// A worker's runtime could not be built (e.g. `--driver uring` without io_uring).
    #[error("{0}")]
    Worker(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

/// A tidemark endpoint to run: a configuration and the providers it serves.
///
/// ```no_run
/// # use tidemark::{Config, Server};
/// let config = Config::from_args()?;
/// Server::new(config).run()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Server {
    cfg: Config,
    providers: Vec<(String, ProviderFactory)>,
}

/// A started server: its bound address, and its threads to wait for.
pub struct Running {
    /// The address the endpoint listens on (port 0 resolved).
    pub local_addr: SocketAddr,
    /// The `/metrics` address, when `--metrics-listen` was given.
    pub metrics_addr: Option<SocketAddr>,
    /// The io driver the workers got (`io_uring+single_issuer+defer_taskrun`, …, `epoll`).
    pub driver: &'static str,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Blocks while the workers run (they run until the process ends).
    pub fn join(self) {
        for worker in self.workers {
            let _ = worker.join();
        }
    }
}

impl Server {
    /// A server for `cfg` with no providers yet. Built-in sets named by `cfg.builtin_tools`
    /// are added at start; when that is unset, the `demo` set is served only if no provider is
    /// added.
    pub fn new(cfg: Config) -> Server {
        Server { cfg, providers: Vec::new() }
    }

    /// Adds a provider. `make` runs once on every worker thread, so each core has its own
    /// instance (which may use `Rc`/`RefCell`); providers are asked in the order added, and on
    /// a duplicate tool name the first one wins.
    pub fn provider<P, F>(mut self, make: F) -> Server
    where
        P: Provider + 'static,
        F: Fn() -> P + Send + Sync + 'static,
    {
        let name = std::any::type_name::<P>().rsplit("::").next().unwrap_or("custom").to_owned();
        let factory: ProviderFactory = Arc::new(move || Rc::new(make()) as Rc<dyn Provider>);
        self.providers.push((name, factory));
        self
    }

    /// Starts the server and blocks while it runs.
    pub fn run(self) -> Result<(), ServerError> {
        self.start()?.join();
        Ok(())
    }

    /// Starts the listeners and workers, prints the banner (`tidemark listening on http://…`)
    /// and returns once every worker is serving.
    pub fn start(self) -> Result<Running, ServerError> {
        let Server { cfg, mut providers } = self;
        cfg.validate()?;
        let builtin = match &cfg.builtin_tools {
            Some(sets) => sets.clone(),
            None if providers.is_empty() => vec![BuiltinSet::Demo],
            None => Vec::new(),
        };
        for (index, set) in builtin.into_iter().enumerate() {
            let factory: ProviderFactory =
                Arc::new(move || Rc::new(BuiltinProvider::new(set)) as Rc<dyn Provider>);
            providers.insert(index, (set.name().to_owned(), factory));
        }
        let names: Vec<&str> = providers.iter().map(|(name, _)| name.as_str()).collect();
        let tools_label = if names.is_empty() { "none".to_owned() } else { names.join(",") };
        let factories = providers.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>();
        let started = start_workers(&cfg, factories)?;
        let metrics_note = match started.metrics_addr {
            Some(addr) => format!(" metrics=http://{addr}/metrics"),
            None => String::new(),
        };
        // The first stdout line: scripts read the bound address (port 0) and the driver from it.
        println!(
            "tidemark listening on http://{}{} driver={} threads={} tools={tools_label}{metrics_note}",
            started.local_addr, cfg.path, started.driver, cfg.threads
        );
        let _ = std::io::stdout().flush();
        Ok(started)
    }
}

/// Listeners, metrics thread and one pinned worker thread per core.
fn start_workers(cfg: &Config, providers: Vec<ProviderFactory>) -> Result<Running, ServerError> {
    refuse_shared_port(cfg.listen)?;
    let first = reuseport_listener(cfg.listen)?;
    let bound = first.local_addr().map_err(io("local address"))?;
    let mut listeners = vec![first];
    for _ in 1..cfg.threads {
        listeners.push(reuseport_listener(bound)?);
    }
    let cfg = Arc::new(cfg.clone());
    let inboxes = Arc::new(
        (0..cfg.threads).map(|_| Inbox::new(config::HANDOFF_INBOX_MAX)).collect::<Vec<_>>(),
    );
    let metrics: Vec<Arc<CoreMetrics>> =
        (0..cfg.threads).map(|_| Arc::new(CoreMetrics::default())).collect();
    let cpus = allowed_cpus();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut workers = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        let spec = WorkerSpec {
            index: index as u16,
            cfg: cfg.clone(),
            listener,
            inboxes: inboxes.clone(),
            metrics: metrics[index].clone(),
            providers: providers.clone(),
        };
        let ready = ready_tx.clone();
        // Worker i runs on the i-th CPU the process may use (respecting taskset/cgroups);
        // unpinned when there are more workers than CPUs.
        let pin = (cfg.threads <= cpus.len()).then(|| cpus[index]);
        let worker = std::thread::Builder::new()
            .name(format!("tidemark-{index}"))
            .spawn(move || {
                if let Some(cpu) = pin {
                    let _ = monoio::utils::bind_to_cpu_set([cpu]);
                }
                runtime::run(spec, ready);
            })
            .map_err(io("spawn a worker thread"))?;
        workers.push(worker);
    }
    let mut driver = "";
    for _ in 0..cfg.threads {
        match ready_rx.recv() {
            Ok(Ok(got)) => driver = got.name(),
            Ok(Err(e)) => return Err(ServerError::Worker(e)),
            Err(_) => {
                return Err(ServerError::Worker("a worker thread died before it started".into()))
            }
        }
    }
    let metrics_addr = match cfg.metrics_listen {
        Some(addr) => Some(start_metrics(addr, metrics)?),
        None => None,
    };
    Ok(Running { local_addr: bound, metrics_addr, driver, workers })
}

/// Fails with "address in use" when another process already listens on `addr`. Our own
/// listeners use SO_REUSEPORT (one per core), which would otherwise let a second tidemark join
/// the same port silently and split its connections (every session then 404s on about half
/// of its requests). A probe bound *without* SO_REUSEPORT cannot share the port with anyone,
/// so it finds any listener there; it is closed before our listeners bind. Port 0 is always
/// free.
fn refuse_shared_port(addr: SocketAddr) -> Result<(), ServerError> {
    use socket2::{Domain, Socket, Type};
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(io("socket"))?;
    // SO_REUSEADDR still admits a restart over connections in TIME_WAIT.
    probe.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    probe
        .bind(&addr.into())
        .map_err(io(format!("bind {addr} (address in use by another process?)")))?;
    Ok(())
}

/// A non-blocking SO_REUSEPORT listener, so every core accepts on the same port.
fn reuseport_listener(addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    use socket2::{Domain, Socket, Type};
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(io("socket"))?;
    socket.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    socket.set_reuse_port(true).map_err(io("SO_REUSEPORT"))?;
    socket.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    socket.bind(&addr.into()).map_err(io(format!("bind {addr}")))?;
    socket.listen(1024).map_err(io("listen"))?;
    socket.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
    Ok(socket.into())
}

/// Binds the `/metrics` listener and serves it from its own thread; returns the bound address.
fn start_metrics(
    addr: SocketAddr,
    metrics: Vec<Arc<CoreMetrics>>,
) -> Result<SocketAddr, ServerError> {
    let listener = std::net::TcpListener::bind(addr).map_err(io(format!("bind metrics {addr}")))?;
    let bound = listener.local_addr().map_err(io("metrics address"))?;
    std::thread::Builder::new()
        .name("tidemark-metrics".into())
        .spawn(move || serve_metrics(listener, metrics))
        .map_err(io("spawn the metrics thread"))?;
    Ok(bound)
}

/// A tiny blocking HTTP/1.0 responder for `GET /metrics`, off the worker cores.
fn serve_metrics(listener: std::net::TcpListener, metrics: Vec<Arc<CoreMetrics>>) {
    use std::io::Read;
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

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_parse() {
        assert_eq!(super::parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(super::parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(super::parse_cpu_list("x"), None);
    }
}
