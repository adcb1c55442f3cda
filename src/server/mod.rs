//! The embedding entry point: `Server` takes a `Config` and providers, and runs the endpoint
//! exactly as the `tidemark` binary does: SO_REUSEPORT listeners, one pinned thread with its own
//! monoio runtime per core, the hand-off inboxes, the optional admin listener (`admin`:
//! `/metrics`, `/healthz`, `/readyz`), the one-line start-up banner on stdout, the graceful
//! drain on SIGTERM/SIGINT (`Running::handle_signals`, `Running::shutdown`; the drain itself is
//! `runtime`'s), and the reloads on SIGHUP: the TLS certificate (`Running::reload_tls`), the
//! authorization files, the log level and the `--config` file's upstream set (`upstreams`).
//!
//! Owns: start-up, signal handling and the threads' lifetime. Never: handles a request (the
//! workers do).

use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::auth::Authorizer;
use crate::config::{self, BuiltinSet, Config, ConfigError};
use crate::layers::{self, FileValues};
use crate::metrics::CoreMetrics;
use crate::provider::builtin::BuiltinProvider;
use crate::provider::Provider;
use crate::runtime::handoff::Inbox;
use crate::runtime::reload::{ProviderSlot, ReloadInbox};
use crate::runtime::{self, Lifecycle, ProviderFactory, WorkerSpec};
use crate::tls::Certs as Tls;

mod unix;
mod upstreams;
use upstreams::{MetricNames, Reloader, SetError};

/// How long `Running::join` sleeps between looks while nothing wakes it (a worker's return and
/// every phase change do).
const JOIN_POLL: Duration = Duration::from_secs(1);

/// How long `Running::join` leaves a second signal's exit to the signal thread before exiting
/// with its status itself: beyond that exit's sweep of the upstream descendants (a second).
const IMMEDIATE_EXIT_WAIT: Duration = Duration::from_secs(3);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The operator's configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OS refused a socket, a bind or a thread.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up (e.g. `bind 127.0.0.1:8080`).
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A worker's runtime could not be built (e.g. `--driver uring` without io_uring).
    #[error("{0}")]
    Worker(String),
    /// `--tls-cert`/`--tls-key` could not be loaded: which file and why.
    #[error("{0}")]
    Tls(String),
    /// `--upstream-credentials` is unusable; the message names the line, never a value.
    #[error("{0}")]
    Credentials(String),
    /// Two providers offer one tool or prompt name that no `--upstream-prefix` separates; the
    /// message names the name, both providers and the flag to set.
    #[error("{0}")]
    NameCollision(String),
}

impl From<SetError> for ServerError {
    fn from(e: SetError) -> ServerError {
        match e {
            SetError::Config(e) => ServerError::Config(e),
            SetError::Credentials(why) => ServerError::Credentials(why),
            SetError::NameCollision(why) => ServerError::NameCollision(why),
        }
    }
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

/// A started server: its bound addresses, its drain, and its threads to wait for.
///
/// Graceful drain (what SIGTERM/SIGINT start under `Server::run`, and `shutdown` starts here):
/// every core stops accepting connections, a new `initialize` gets 503 with `Retry-After`, idle
/// keep-alive connections are closed and every further answer carries `Connection: close`;
/// requests on existing sessions are still served, and running calls get up to
/// `--drain-secs` to finish and deliver their results. Then every open SSE response ends with
/// the chunked body's last chunk (a stream whose call had not finished ends without its
/// result), connections close, and the workers return: `join` returns, and `Server::run` with
/// it. `/readyz` answers 503 from the drain's start.
pub struct Running {
    /// The address the endpoint listens on (port 0 resolved); with no TCP listener (every
    /// `--listen` a `unix:PATH`) the unbound loopback default.
    pub local_addr: SocketAddr,
    /// The admin listener's address (`/metrics`, `/healthz`, `/readyz`), when
    /// `--metrics-listen` was given.
    pub metrics_addr: Option<SocketAddr>,
    /// The io driver the workers got (`io_uring+single_issuer+defer_taskrun`, …, `epoll`).
    pub driver: &'static str,
    workers: Vec<std::thread::JoinHandle<()>>,
    life: Arc<Lifecycle>,
    /// The MCP listeners' TLS, when `--tls-cert` was given.
    tls: Option<Arc<Tls>>,
    /// The endpoint's authorization (`None`: off): SIGHUP reloads its token and policy files.
    auth: Option<Arc<Authorizer>>,
    /// `handle_signals` ran (a second call would see every signal twice).
    signals: AtomicBool,
    /// The `--config` file, which SIGHUP reads again (`reload_config_file`).
    config_file: Option<config::ConfigFileOrigin>,
    /// `--log-level` as given (empty: `RUST_LOG`, else info): what SIGHUP applies again.
    log_level: String,
    /// The `--listen unix:PATH` socket file, removed when this is dropped (after `join`: the
    /// drain ended).
    _unix_file: Option<unix::SocketFile>,
    /// The OTLP exporter thread (`--otlp-endpoint`); dropped last, it sends what the cores'
    /// queues still hold.
    _exporter: Option<crate::trace::Exporter>,
    /// The durable mirror's threads (`--durable`); dropped after the workers.
    _durable: Option<crate::durable::Durable>,
    /// The audit trail's writer (`--audit-log`); dropped after the workers, it writes what
    /// the queue still holds. SIGHUP opens its path again.
    audit: Option<crate::audit::AuditLog>,
    /// Every core's metrics (the upstream reloads are counted on core 0's).
    core_metrics: Vec<Arc<CoreMetrics>>,
    /// The upstream set's reload, which `handle_signals` takes to its thread (SIGHUP).
    reloader: arc_swap::ArcSwapOption<Reloader>,
}

impl Running {
    /// Blocks until the workers return, which they do once a drain ended (`shutdown`, or a
    /// signal after `handle_signals`); before that, forever. While a second signal's immediate
    /// exit is under way it does not return: the process ends with that exit's status. A worker that is still busy
    /// `DRAIN_FLUSH_MS` + 1 s after the drain's deadline (a provider blocking its thread) is
    /// left behind: `join` returns anyway, and the process may exit.
    pub fn join(self) {
        self.life.set_joiner(std::thread::current());
        while !self.life.all_finished() {
            let now = Instant::now();
            match self.life.give_up_at() {
                Some(at) if now >= at => {
                    tracing::warn!("a worker is still busy after the drain: not waiting for it");
                    return;
                }
                Some(at) => std::thread::park_timeout((at - now).min(JOIN_POLL)),
                None => std::thread::park_timeout(JOIN_POLL),
            }
            // The log's "N more suppressed" lines and refusal summary when nobody logs.
            crate::logging::flush();
        }
        for worker in self.workers {
            let _ = worker.join();
        }
        // The cores stopped their upstream children; they get their kill grace to exit, then
        // every descendant left (a setsid daemon of one) is killed.
        crate::upstream::wait_for_children();
        // A second signal's exit killed the children this drain waited for: its status, not
        // this drain's 0, is the process's. The signal thread exits once its sweep is done.
        if let Some(status) = self.life.exiting_with() {
            std::thread::sleep(IMMEDIATE_EXIT_WAIT);
            std::process::exit(status);
        }
    }

    /// Begins the graceful drain (see the type's doc) and returns at once; `join` waits for
    /// its end. Calling it again, or after a signal, changes nothing.
    pub fn shutdown(&self) {
        self.life.begin_drain();
    }

    /// A handle that begins the drain from any thread (`shutdown` without the `Running`),
    /// e.g. for a program with its own signal handling or control channel.
    pub fn shutdown_handle(&self) -> impl Fn() + Clone + Send + Sync + 'static {
        let life = self.life.clone();
        move || {
            life.begin_drain();
        }
    }

    /// Reads `--tls-cert` and `--tls-key` again (what SIGHUP does under `handle_signals`): new
    /// TLS handshakes use the new certificate, connections already up keep theirs. `Ok(false)`
    /// without TLS; `Err` says why the files did not load, and the old certificate stays.
    pub fn reload_tls(&self) -> Result<bool, ServerError> {
        reload_tls(self.tls.as_deref())
    }

    /// SIGHUP reloads `--auth-tokens` and `--auth-policy` (`reload`). Handles SIGTERM and SIGINT as the `tidemark`
    /// binary does (`Server::run` calls it before
    /// the banner): the first begins the drain; a second one, or one after `shutdown`, exits
    /// the process at once with status 128 + the signal's number (143 for SIGTERM, 130 for
    /// SIGINT, the shell's convention), without waiting for anything but the SIGKILL of every
    /// stdio upstream's process and descendant (at most a second). A thread of its own
    /// reads the signals (signal-hook's self-pipe), so no worker's io wait is involved.
    /// SIGHUP reloads the TLS files (`reload_tls`; logged, and ignored without TLS), and reads the
    /// `--config` file again, logging which changed keys reload and which need a restart, and
    /// applying its upstream set when that changed (`upstreams::Reloader`).
    /// Calling it again changes nothing.
    pub fn handle_signals(&self) -> Result<(), ServerError> {
        if self.signals.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(io("install the SIGTERM/SIGINT/SIGHUP handlers"))?;
        let life = self.life.clone();
        let tls = self.tls.clone();
        let auth = self.auth.clone();
        let audit = self.audit.as_ref().map(crate::audit::AuditLog::reopener);
        let drain_secs = life.drain().as_secs();
        // What the file says now: the baseline a SIGHUP's re-read is compared with.
        let mut config_file = self.config_file.clone().map(|origin| {
            let values = crate::cli::reread_config_file(&origin.path).unwrap_or_default();
            (origin, values)
        });
        let mut log_level = self.log_level.clone();
        // Only this thread holds it from here (`swap` took the one reference).
        let mut reloader = self.reloader.swap(None).and_then(|r| Arc::try_unwrap(r).ok());
        std::thread::Builder::new()
            .name("tidemark-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if signal == SIGHUP {
                        // The file's log level wins over the one at start unless the env or a
                        // flag set it (then the file's change has no effect, and says so).
                        if let Some((origin, values)) = &mut config_file {
                            if let Some(new) = reload_config_file(origin, values) {
                                if !origin.shadowed.iter().any(|key| key == LOG_LEVEL_KEY) {
                                    log_level = new
                                        .get(LOG_LEVEL_KEY)
                                        .and_then(|v| v.first().cloned())
                                        .unwrap_or_default();
                                }
                            }
                        }
                        let _ = crate::logging::reload_log_level(&log_level);
                        reload(auth.as_deref());
                        let _ = reload_tls(tls.as_deref());
                        if let Some(audit) = &audit {
                            audit.reopen();
                        }
                        if let Some(reloader) = &mut reloader {
                            reloader.reload();
                        }
                        continue;
                    }
                    if life.begin_drain() {
                        tracing::info!(
                            signal,
                            drain_secs,
                            "draining; a second signal exits at once"
                        );
                    } else {
                        tracing::warn!(signal, "second signal: exiting at once");
                        life.exit_at_once(128 + signal);
                        // No upstream descendant outlives tidemark (at most a second).
                        crate::upstream::end_descendants();
                        std::process::exit(128 + signal);
                    }
                }
            })
            .map_err(io("spawn the signal thread"))?;
        Ok(())
    }
}

/// The `--config` key of `--log-level` (one of `layers::RELOADABLE_KEYS`).
const LOG_LEVEL_KEY: &str = "log-level";

/// SIGHUP: the authorization's token file and policy file read again, and its JWK Sets soon
/// (off this thread: `Authorizer::reload_keys`); sessions and connections are untouched. A file that does not load keeps the old set (or policy), and the
/// log says why (file and line only).
fn reload(auth: Option<&Authorizer>) {
    let Some(auth) = auth else {
        tracing::info!("SIGHUP: nothing to reload (authorization is off)");
        return;
    };
    match auth.reload() {
        Ok(tokens) => tracing::info!(tokens, "SIGHUP: --auth-tokens reloaded"),
        Err(why) => {
            tracing::warn!(error = %why, "SIGHUP: --auth-tokens not reloaded, the old set stays")
        }
    }
    if auth.reload_keys() {
        tracing::info!("SIGHUP: JWK Sets to be read again");
    }
    match auth.reload_policy() {
        Ok(Some(rules)) => tracing::info!(rules, "SIGHUP: --auth-policy reloaded"),
        Ok(None) => {}
        Err(why) => {
            tracing::warn!(error = %why, "SIGHUP: --auth-policy not reloaded, the old policy stays")
        }
    }
}

/// SIGHUP: the `--config` file read again and compared with `last` (then replaced by it).
/// Logs the changed keys by what applying them takes: reloadable ones
/// (`layers::RELOADABLE_KEYS`), ones that need a restart, ones the env or a flag shadow. A file
/// that no longer loads changes nothing (logged). Returns the new values when they loaded (the
/// reloadable keys' own reloads read them there).
fn reload_config_file(
    origin: &config::ConfigFileOrigin,
    last: &mut FileValues,
) -> Option<FileValues> {
    let path = origin.path.display().to_string();
    let new = match crate::cli::reread_config_file(&origin.path) {
        Ok(new) => new,
        Err(why) => {
            tracing::warn!(error = %why, "SIGHUP: --config {path} not re-read; nothing changes");
            return None;
        }
    };
    let changed = layers::changes(last, &new, &origin.shadowed);
    if changed == layers::FileChanges::default() {
        tracing::info!("SIGHUP: --config {path} re-read, no key changed");
    }
    if !changed.reloadable.is_empty() {
        let keys = changed.reloadable.join(", ");
        tracing::info!("SIGHUP: --config {path}: reloadable keys changed: {keys}");
    }
    if !changed.restart_needed.is_empty() {
        let keys = changed.restart_needed.join(", ");
        tracing::warn!("SIGHUP: --config {path}: restart needed for {keys}");
    }
    if !changed.shadowed.is_empty() {
        let keys = changed.shadowed.join(", ");
        tracing::info!(
            "SIGHUP: --config {path}: changed but set by env or flag (no effect): {keys}"
        );
    }
    *last = new.clone();
    Some(new)
}

impl Server {
    /// A server for `cfg` with no providers yet. Built-in sets named by `cfg.server.builtin_tools`
    /// are added at start; when that is unset, the `demo` set is served only if no provider is
    /// added.
    pub fn new(cfg: Config) -> Server {
        Server { cfg, providers: Vec::new() }
    }

    /// Adds a provider. `make` runs once on every worker thread, so each core has its own
    /// instance (which may use `Rc`/`RefCell`); providers are asked in the order added, and on
    /// a duplicate tool name the first one wins (an `--upstream` sharing a name with a built-in
    /// set or another upstream is a start-up error instead, unless `--upstream-prefix`
    /// separates them; a provider's tool that appears later under a taken name is hidden).
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

    /// Starts the server, handles SIGTERM/SIGINT (`Running::handle_signals`: the first drains
    /// gracefully, a second exits at once) and blocks until the drain ended. `Ok` after a
    /// drain: the binary exits 0.
    pub fn run(self) -> Result<(), ServerError> {
        self.launch(true)?.join();
        Ok(())
    }

    /// Starts the listeners and workers, prints the banner (`tidemark listening on http://…`)
    /// and returns once every worker is serving. Signals are left alone: call
    /// `Running::handle_signals` for the binary's handling, or `Running::shutdown` to drain.
    pub fn start(self) -> Result<Running, ServerError> {
        self.launch(false)
    }

    /// `start`, with the signal handlers installed before the banner when `signals` (a
    /// supervisor that reads the banner may signal at once).
    fn launch(self, signals: bool) -> Result<Running, ServerError> {
        let Server { cfg, mut providers } = self;
        cfg.validate()?;
        if let Some(key) = &cfg.modern.state_key {
            // Before any worker seals a `requestState`; the process's first key wins.
            crate::modern::state::set_key_material(key.bytes());
        }
        crate::logging::configure(&cfg);
        let builtin = match &cfg.server.builtin_tools {
            Some(sets) => sets.clone(),
            None if providers.is_empty() && cfg.upstream.specs.is_empty() => vec![BuiltinSet::Demo],
            None => Vec::new(),
        };
        let children = Arc::new(crate::upstream::ProcessCount::default());
        let mut metric_names = MetricNames::default();
        let set = upstreams::build(&cfg, &builtin, &children, &mut metric_names)?;
        for (index, set) in builtin.iter().copied().enumerate() {
            let factory: ProviderFactory =
                Arc::new(move || Rc::new(BuiltinProvider::new(set)) as Rc<dyn Provider>);
            providers.insert(index, (set.name().to_owned(), factory));
        }
        let mut names: Vec<&str> = providers.iter().map(|(name, _)| name.as_str()).collect();
        names.extend(set.iter().map(|u| u.label.as_str()));
        let tools_label = if names.is_empty() { "none".to_owned() } else { names.join(",") };
        let mut slots: Vec<ProviderSlot> = (providers.iter())
            .map(|(_, factory)| ProviderSlot { factory: factory.clone(), fingerprint: None })
            .collect();
        slots.extend(set.iter().map(|u| u.slot.clone()));
        let reloads: Vec<Arc<ReloadInbox>> =
            (0..cfg.server.threads).map(|_| Arc::new(ReloadInbox::default())).collect();
        let started = start_workers(&cfg, slots, children.clone(), &metric_names, &reloads)?;
        started.reloader.store(Some(Arc::new(Reloader::new(
            cfg.clone(),
            builtin,
            children,
            metric_names,
            &set,
            reloads,
            started.core_metrics.clone(),
        ))));
        if signals {
            started.handle_signals()?;
        }
        let metrics_note = match started.metrics_addr {
            Some(addr) => format!(" metrics=http://{addr}/metrics"),
            None => String::new(),
        };
        // The first stdout line: scripts read the bound address (port 0) and the driver from it.
        let scheme = if cfg.server.tls.is_some() { "https" } else { "http" };
        let unix = cfg.server.listen_unix.as_ref().map(|p| p.display().to_string());
        let unix_note = match &unix {
            Some(path) if cfg.server.listen_tcp => format!(" unix={path}"),
            _ => String::new(),
        };
        let serves = match &unix {
            Some(path) if !cfg.server.listen_tcp => format!("unix:{path} path={}", cfg.server.path),
            _ => format!("{scheme}://{}{}", started.local_addr, cfg.server.path),
        };
        println!(
            "tidemark listening on {serves} driver={} threads={} tools={tools_label}{unix_note}{metrics_note}",
            started.driver, cfg.server.threads
        );
        let _ = std::io::stdout().flush();
        tracing::info!(
            listen = %started.local_addr,
            tcp = cfg.server.listen_tcp,
            unix = ?cfg.server.listen_unix,
            scheme,
            path = %cfg.server.path,
            metrics = ?started.metrics_addr,
            driver = started.driver,
            threads = cfg.server.threads,
            node = cfg.server.node_id,
            tools = %tools_label,
            max_connections_per_core = cfg.http.connections_per_core_max,
            max_sessions_per_core = cfg.sessions.sessions_per_core_max,
            max_streams_per_session = cfg.sessions.streams_per_session_max,
            max_body_bytes = cfg.http.body_bytes_max,
            replay_events = cfg.sessions.replay_events_max,
            replay_bytes = cfg.sessions.replay_bytes_max,
            core_buffer_bytes = cfg.sessions.core_buffer_bytes,
            session_idle_secs = cfg.sessions.session_idle.as_secs(),
            owed_timeout_secs = cfg.sessions.owed_timeout.as_secs(),
            upstreams = cfg.upstream.specs.len(),
            auth = cfg.auth_enabled(),
            tls = cfg.server.tls.is_some(),
            log_events_per_kind_per_sec = cfg.log.events_per_kind_per_sec,
            "started"
        );
        Ok(started)
    }
}

/// Listeners, the admin listener and one pinned worker thread per core.
/// `children`: the upstream children of every core (`tidemark_upstream_children`).
fn start_workers(
    cfg: &Config,
    providers: Vec<ProviderSlot>,
    children: Arc<crate::upstream::ProcessCount>,
    upstream_names: &MetricNames,
    reloads: &[Arc<ReloadInbox>],
) -> Result<Running, ServerError> {
    let Bound { cfg, mut listeners, mut unix, unix_file, tls } = bind(cfg)?;
    let bound = cfg.server.listen;
    let inboxes = Arc::new(
        (0..cfg.server.threads).map(|_| Inbox::new(config::HANDOFF_INBOX_MAX)).collect::<Vec<_>>(),
    );
    let metrics: Vec<Arc<CoreMetrics>> =
        (0..cfg.server.threads).map(|_| Arc::new(CoreMetrics::default())).collect();
    for core in &metrics {
        core.hist.name_upstreams(upstream_names.names());
    }
    let life = Arc::new(Lifecycle::new(cfg.server.threads, cfg.server.drain));
    let (exporter, span_queues) =
        match crate::trace::Exporter::start(&cfg).map_err(io("spawn the OTLP exporter thread"))? {
            Some((exporter, queues)) => (Some(exporter), queues.into_iter().map(Some).collect()),
            None => (None, vec![None; cfg.server.threads]),
        };
    let mut durable =
        crate::durable::Durable::start(&cfg).map_err(io("spawn the durable mirror threads"))?;
    let audit = crate::audit::AuditLog::start(&cfg).map_err(io("open --audit-log"))?;
    // After the bind: the default resource URL names the bound port.
    let auth = Authorizer::build(&cfg)?.map(Arc::new);
    let cpus = allowed_cpus();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut workers = Vec::new();
    for index in 0..cfg.server.threads {
        let spec = WorkerSpec {
            index: index as u16,
            cfg: cfg.clone(),
            listener: listeners.pop(),
            unix: unix.pop(),
            tls: tls.clone(),
            inboxes: inboxes.clone(),
            metrics: metrics[index].clone(),
            providers: providers.clone(),
            reloads: reloads[index].clone(),
            life: life.clone(),
            auth: auth.clone(),
            spans: span_queues[index].clone(),
            durable: durable.as_mut().map(|d| d.for_core(index)),
            audit: audit.as_ref().map(|(_, sink)| sink.clone()),
        };
        let ready = ready_tx.clone();
        let finished = WorkerFinished(life.clone(), index);
        // Worker i runs on the i-th CPU the process may use (respecting taskset/cgroups);
        // unpinned when there are more workers than CPUs.
        let pin = (cfg.server.threads <= cpus.len()).then(|| cpus[index]);
        let worker = std::thread::Builder::new()
            .name(format!("tidemark-{index}"))
            .spawn(move || {
                let _finished = finished;
                if let Some(cpu) = pin {
                    let _ = monoio::utils::bind_to_cpu_set([cpu]);
                }
                runtime::run(spec, ready);
            })
            .map_err(io("spawn a worker thread"))?;
        workers.push(worker);
    }
    let driver = wait_ready(&ready_rx, cfg.server.threads)?;
    let durable_stats = durable.as_ref().map(|d| d.stats.clone());
    let admin = Admin { metrics: metrics.clone(), children, life: life.clone(), durable_stats };
    let metrics_addr = start_admin(&cfg, driver, admin)?;
    let signals = AtomicBool::new(false);
    let config_file = cfg.config_file.clone();
    let log_level = crate::logging::current_flag(&cfg);
    Ok(Running {
        local_addr: bound,
        metrics_addr,
        driver,
        workers,
        life,
        tls,
        auth,
        signals,
        config_file,
        log_level,
        _exporter: exporter,
        _durable: durable,
        audit: audit.map(|(log, _)| log),
        core_metrics: metrics,
        reloader: arc_swap::ArcSwapOption::empty(),
        _unix_file: unix_file,
    })
}

/// What the admin listener reports on, besides the configuration.
struct Admin {
    metrics: Vec<Arc<CoreMetrics>>,
    children: Arc<crate::upstream::ProcessCount>,
    life: Arc<Lifecycle>,
    durable_stats: Option<Arc<crate::metrics::DurableStats>>,
}

/// The admin listener (`--metrics-listen`), when configured: its bound address.
fn start_admin(
    cfg: &Config,
    driver: &'static str,
    admin: Admin,
) -> Result<Option<SocketAddr>, ServerError> {
    let Some(addr) = cfg.server.metrics_listen else { return Ok(None) };
    let about = crate::admin::About {
        node_id: cfg.server.node_id,
        driver,
        core_buffer_bytes: cfg.sessions.core_buffer_bytes as u64,
        upstreams: (cfg.upstream.specs.iter().enumerate()).map(|(i, u)| u.label(i)).collect(),
        started: std::time::Instant::now(),
    };
    let Admin { metrics, children, life, durable_stats } = admin;
    crate::admin::start(addr, metrics, children, life, about, durable_stats)
        .map(Some)
        .map_err(io(format!("admin listener on {addr}")))
}

/// What `bind` makes: the workers' config (naming the bound address), one TCP listener per
/// worker (none without TCP), one duplicate of the Unix listener per worker (none without
/// `unix:PATH`) and the socket file's guard, and the loaded TLS files.
struct Bound {
    cfg: Arc<Config>,
    listeners: Vec<std::net::TcpListener>,
    unix: Vec<std::os::unix::net::UnixListener>,
    unix_file: Option<unix::SocketFile>,
    tls: Option<Arc<Tls>>,
}

/// The TLS files loaded and the listeners bound: TCP (`bind_tcp`) and the Unix socket file.
/// AF_UNIX has no SO_REUSEPORT, so every core accepts on its own duplicate of one listening
/// socket: the kernel gives each connection to one of the cores' pending accepts.
fn bind(cfg: &Config) -> Result<Bound, ServerError> {
    let tls = match &cfg.server.tls {
        Some(files) => {
            Some(Arc::new(Tls::load(files, cfg.server.threads).map_err(ServerError::Tls)?))
        }
        None => None,
    };
    let (mut unix, mut unix_file) = (Vec::new(), None);
    if let Some(path) = &cfg.server.listen_unix {
        let (listener, file) = unix::bind(path, cfg.server.listen_mode)
            .map_err(|e| ServerError::Io { what: e.what, source: e.source })?;
        for _ in 1..cfg.server.threads {
            unix.push(listener.try_clone().map_err(io("dup the unix listener"))?);
        }
        unix.push(listener);
        unix_file = Some(file);
    }
    let (cfg, listeners) = match cfg.server.listen_tcp {
        true => bind_tcp(cfg)?,
        false => (Arc::new(cfg.clone()), Vec::new()),
    };
    Ok(Bound { cfg, listeners, unix, unix_file, tls })
}

/// One TCP listener per worker (`SO_REUSEPORT`), with the workers' config naming the bound
/// address.
fn bind_tcp(cfg: &Config) -> Result<(Arc<Config>, Vec<std::net::TcpListener>), ServerError> {
    refuse_shared_port(cfg.server.listen)?;
    let first = reuseport_listener(cfg.server.listen)?;
    let bound = first.local_addr().map_err(io("local address"))?;
    let mut listeners = vec![first];
    for _ in 1..cfg.server.threads {
        listeners.push(reuseport_listener(bound)?);
    }
    // The workers' config names the bound address (port 0 resolved), so whatever reads
    // `cfg.server.listen` sees the address really listened on. (The endpoint's Host rule
    // reads only whether it is loopback: a Host's port is not compared with it, for port
    // forwarders.)
    let mut cfg = cfg.clone();
    cfg.server.listen = bound;
    Ok((Arc::new(cfg), listeners))
}

/// Waits until each of `threads` workers reports it serves; the name of their io driver.
fn wait_ready(
    ready: &std::sync::mpsc::Receiver<Result<runtime::DriverGot, String>>,
    threads: usize,
) -> Result<&'static str, ServerError> {
    let mut driver = "";
    for _ in 0..threads {
        match ready.recv() {
            Ok(Ok(got)) => driver = got.name(),
            Ok(Err(e)) => return Err(ServerError::Worker(e)),
            Err(_) => {
                return Err(ServerError::Worker("a worker thread died before it started".into()))
            }
        }
    }
    Ok(driver)
}

/// The SIGHUP reload of the TLS files (`Running::reload_tls`), logged either way.
fn reload_tls(tls: Option<&Tls>) -> Result<bool, ServerError> {
    let Some(tls) = tls else {
        tracing::info!("reload: no --tls-cert, nothing to reload");
        return Ok(false);
    };
    match tls.reload() {
        Ok(()) => {
            tracing::info!("reload: TLS certificate loaded; new connections use it");
            Ok(true)
        }
        Err(why) => {
            tracing::error!(error = %why, "reload: TLS files not loaded; the old certificate stays");
            Err(ServerError::Tls(why))
        }
    }
}

/// Tells the lifecycle that worker `.1`'s thread returned (also when it unwinds).
struct WorkerFinished(Arc<Lifecycle>, usize);

impl Drop for WorkerFinished {
    fn drop(&mut self) {
        self.0.worker_finished(self.1);
    }
}

/// Fails with "address in use" when another process already listens on `addr`. Our own
/// listeners use SO_REUSEPORT (one per core), which would otherwise let a second tidemark join
/// the same port silently and split its connections (every session then 404s on about half
/// of its requests). A probe bound *without* SO_REUSEPORT cannot share the port with a
/// listener, so a bind that succeeds proves the port free (it is closed before our listeners
/// bind). A refused probe may also mean only that connections of a previous process linger
/// on the port (TIME_WAIT, FIN_WAIT): a connect tells the two apart, since only a listener
/// accepts it. The check is repeated for up to `PORT_PROBE_WAIT`, because a process that just
/// died can keep listening for a moment: its io_uring instance is torn down asynchronously
/// by the kernel and holds the listening socket (and accepts into its backlog) until then.
/// Port 0 is always free.
fn refuse_shared_port(addr: SocketAddr) -> Result<(), ServerError> {
    if addr.port() == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + PORT_PROBE_WAIT;
    loop {
        let Some(refused) = port_has_listener(addr)? else { return Ok(()) };
        if std::time::Instant::now() >= deadline {
            return Err(ServerError::Io {
                what: format!("bind {addr}: address in use by another process"),
                source: refused,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `Some(the bind error)` when a listener holds `addr`, `None` when the port is free (or held
/// only by lingering connections).
fn port_has_listener(addr: SocketAddr) -> Result<Option<std::io::Error>, ServerError> {
    use socket2::{Domain, Socket, Type};
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(io("socket"))?;
    probe.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    let Err(refused) = probe.bind(&addr.into()) else { return Ok(None) };
    if refused.kind() != std::io::ErrorKind::AddrInUse {
        return Err(ServerError::Io { what: format!("bind {addr}"), source: refused });
    }
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let answered = std::net::TcpStream::connect_timeout(&target, PORT_PROBE_TIMEOUT).is_ok();
    Ok(answered.then_some(refused))
}

/// How long the start-up probe waits for a listener on the port to accept a connection.
const PORT_PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a listener found on the port may take to go away (a process that just exited)
/// before start-up fails with "address in use".
const PORT_PROBE_WAIT: Duration = Duration::from_secs(2);

/// A non-blocking SO_REUSEPORT listener, so every core accepts on the same port.
fn reuseport_listener(addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    use socket2::{Domain, Socket, Type};
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(io("socket"))?;
    socket.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    socket.set_reuse_port(true).map_err(io("SO_REUSEPORT"))?;
    socket.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    socket.bind(&addr.into()).map_err(io(format!("bind {addr}")))?;
    socket.listen(config::LISTEN_BACKLOG as i32).map_err(io("listen"))?;
    socket.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
    Ok(socket.into())
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
