//! One core: its monoio runtime (io_uring with the best ring flags the kernel takes, else
//! epoll), its SO_REUSEPORT listener and accept loop, its hand-off inbox, the reaper (each tick
//! asks the endpoint to expire what is due, `Endpoint::expire`: idle sessions, owed streams
//! nobody resumes, settled streams past retention, tasks past theirs; it reaches into neither
//! era's state), and its part in a graceful drain (`Lifecycle`, `Drain`).
//!
//! Its accept loop: `accept` (admission, the accept queue at the drain, running out of file
//! descriptors). Its connections: `conn` (one socket: read a request, `endpoint::handle`, write or hand over)
//! and `stream` (the one driver of a response stream, over a `core::Source`).
//!
//! Called by `server` once per thread. Never: touches another core's sessions.
//!
//! # Drain
//!
//! `Lifecycle` (shared, atomics) moves `Serving` → `Draining` → `Ending`, only forward. On
//! `Draining` (SIGTERM/SIGINT through `server`, or `Running::shutdown`) each worker closes its
//! listener (new connections are refused; those already in its accept queue are taken first
//! and served, never reset), sets `Core::draining` (a new `initialize` gets 503 +
//! Retry-After), answers every further request with `Connection: close`, closes idle
//! keep-alive connections, and reports every `DRAIN_TICK` whether it is still busy: a call
//! running (a legacy request stream, a 2026-07-28 keyed call, a working task), or a connection
//! mid-request or writing a request stream. When every core is quiet,
//! or `--drain-secs` passed, the first worker to notice moves the lifecycle to `Ending`: every
//! SSE writer sends what is ready plus the chunked body's last chunk and closes, and the worker
//! returns once its connections are gone (at most `DRAIN_FLUSH_MS` later). A worker learns of a
//! phase change from another thread through its slot's `AtomicWaker` (the hand-off inbox's
//! pattern, monoio's `sync` feature); its connections learn it from the core-local `Drain`.

mod accept;
pub(crate) mod conn;
mod drain;
pub(crate) mod handoff;
pub(crate) mod reload;
mod socket;
mod stream;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{self, Config, DriverChoice};
use crate::core::Core;
use crate::dispatch::Registry;
use crate::endpoint::Endpoint;
use crate::metrics::CoreMetrics;
use crate::provider::Provider;
use crate::runtime::handoff::Inboxes;
use crate::runtime::socket::Transport;
pub(crate) use drain::{Drain, Lifecycle, Phase};

pub(crate) use reload::ProviderFactory;

/// How often the reaper looks at this core's sessions.
const REAP_INTERVAL: Duration = Duration::from_millis(250);

/// Between two bounded steps of one reaper tick (`reap`): the connections' turn. monoio has
/// no public yield, and its timer's resolution is a millisecond.
const REAP_PAUSE: Duration = Duration::from_millis(1);

/// How often a draining core reports whether it is still busy: the drain ends at most this long
/// after the last call delivered its result.
const DRAIN_TICK: Duration = Duration::from_millis(50);

/// How often the end of a drain looks whether the core's connections are gone.
const FLUSH_TICK: Duration = Duration::from_millis(10);

/// Everything one worker thread is given.
pub(crate) struct WorkerSpec {
    pub index: u16,
    pub cfg: Arc<Config>,
    /// This core's SO_REUSEPORT TCP listener (`None`: no TCP `--listen`).
    pub listener: Option<std::net::TcpListener>,
    /// This core's duplicate of the Unix socket's listener (`None`: no `--listen unix:PATH`).
    pub unix: Option<std::os::unix::net::UnixListener>,
    /// The listener's TLS (`--tls-cert`), shared by every core and swapped on reload.
    pub tls: Option<Arc<crate::tls::Certs>>,
    pub inboxes: Inboxes,
    pub metrics: Arc<CoreMetrics>,
    pub providers: Vec<reload::ProviderSlot>,
    /// Where SIGHUP's new upstream set reaches this core (`reload`).
    pub reloads: Arc<reload::ReloadInbox>,
    pub life: Arc<Lifecycle>,
    /// The endpoint's authorization, the same for every core (`None`: off).
    pub auth: Option<Arc<crate::auth::Authorizer>>,
    /// This core's queue of finished spans (`None`: tracing is off).
    pub spans: Option<Arc<crate::trace::SpanQueue>>,
    /// This core's part of the durable mirror (`None`: `--durable` is off).
    pub durable: Option<crate::durable::CoreDurable>,
    /// The audit trail's queue (`None`: `--audit-log` is off).
    pub audit: Option<crate::audit::AuditSink>,
}

/// Which driver a worker got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriverGot {
    UringDeferTaskrun,
    UringCoopTaskrun,
    UringPlain,
    Epoll,
}

impl DriverGot {
    pub(crate) fn name(self) -> &'static str {
        match self {
            DriverGot::UringDeferTaskrun => "io_uring+single_issuer+defer_taskrun",
            DriverGot::UringCoopTaskrun => "io_uring+coop_taskrun",
            DriverGot::UringPlain => "io_uring",
            DriverGot::Epoll => "epoll",
        }
    }
}

type UringRt = monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>>;
type EpollRt = monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>;

/// runtime-notes §0: DEFER_TASKRUN (6.1+) or COOP_TASKRUN (5.19+) are worth 1.6× here; an older
/// kernel refuses them with EINVAL, so each is tried in turn.
type RingFlags = fn(&mut io_uring::Builder);

fn build_uring() -> Option<(UringRt, DriverGot)> {
    let attempts: [(DriverGot, RingFlags); 3] = [
        (DriverGot::UringDeferTaskrun, |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        (DriverGot::UringCoopTaskrun, |b| {
            b.setup_coop_taskrun();
        }),
        (DriverGot::UringPlain, |_| {}),
    ];
    for (got, flags) in attempts {
        let mut urb = io_uring::IoUring::builder();
        flags(&mut urb);
        let built = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(1024)
            .uring_builder(urb)
            .enable_timer()
            .build();
        if let Ok(rt) = built {
            return Some((rt, got));
        }
    }
    None
}

fn build_epoll() -> std::io::Result<EpollRt> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build()
}

/// Runs one worker thread until its drain ended (or its runtime could not be built). `ready`
/// receives the driver name once the runtime is built.
pub(crate) fn run(spec: WorkerSpec, ready: std::sync::mpsc::Sender<Result<DriverGot, String>>) {
    let choice = spec.cfg.server.driver;
    let uring = match choice {
        DriverChoice::Auto | DriverChoice::Uring
            if std::env::var_os("MONOIO_FORCE_LEGACY_DRIVER").is_none() =>
        {
            build_uring()
        }
        _ => None,
    };
    match (uring, choice) {
        (Some((mut rt, got)), _) => {
            let _ = ready.send(Ok(got));
            rt.block_on(serve(spec));
        }
        (None, DriverChoice::Uring) => {
            let _ = ready.send(Err("io_uring is not available (kernel, seccomp or io_uring_disabled); use --driver epoll".into()));
        }
        (None, _) => match build_epoll() {
            Ok(mut rt) => {
                let _ = ready.send(Ok(DriverGot::Epoll));
                rt.block_on(serve(spec));
            }
            Err(e) => {
                let _ = ready.send(Err(format!("epoll runtime failed: {e}")));
            }
        },
    }
}

async fn serve(spec: WorkerSpec) {
    let WorkerSpec {
        index,
        cfg,
        listener,
        unix,
        tls,
        inboxes,
        metrics,
        providers,
        reloads,
        life,
        auth,
        spans,
        durable,
        audit,
    } = spec;
    crate::metrics::enter_core(metrics.clone());
    if let Some(queue) = spans {
        crate::trace::enter_core(queue, metrics.clone(), cfg.trace.sample_ratio);
    }
    let held: Vec<reload::Held> = (providers.iter())
        .map(|slot| reload::Held {
            provider: (slot.factory)(),
            fingerprint: slot.fingerprint.clone(),
        })
        .collect();
    let providers: Vec<Rc<dyn Provider>> = held.iter().map(|h| h.provider.clone()).collect();
    let threads = inboxes.len() as u16;
    let rate = crate::core::Rate::new(&cfg, threads);
    let reader = durable.as_ref().map(|d| d.reader.clone());
    let mirror = durable.map(|d| Rc::new(d.tap(metrics.clone())));
    let audit = audit.map(|sink| sink.for_core(metrics.clone()));
    let shared = Rc::new(Core {
        registry: Registry::build(providers)
            .await
            .with_uri_bytes_max(cfg.upstream.resource_uri_bytes_max),
        threads,
        index,
        metrics,
        cfg,
        auth,
        draining: Cell::new(false),
        rate,
        mirror,
        reader,
        audit,
    });
    let core = Rc::new(Endpoint::new(shared));
    if let Some(tap) = core.mirror.clone() {
        let legacy = core.legacy.clone();
        monoio::spawn(tap.pump(move |lost| crate::legacy::mirror_lost(&legacy, lost)));
    }
    let listeners = match accept::Listening::join(listener, unix, tls, usize::from(index)) {
        Ok(listeners) => listeners,
        Err(e) => {
            tracing::error!(core = index, error = %e, "listener could not join the runtime");
            // Nothing to wait for here: a drain must not wait for this core until its deadline.
            life.report(usize::from(index), false);
            return;
        }
    };
    let drain = Rc::new(Drain::default());
    drain.set_phase(Phase::Serving);
    monoio::spawn(drain_inbox(core.clone(), drain.clone(), inboxes.clone()));
    monoio::spawn(reap(core.clone()));
    monoio::spawn(reload::follow(core.clone(), reloads, held));
    let loops: Vec<_> = (listeners.into_iter())
        .map(|listening| {
            let (core, drain, inboxes, life) =
                (core.clone(), drain.clone(), inboxes.clone(), life.clone());
            monoio::spawn(async move {
                accept::accept_until_drain(&core, &drain, &inboxes, &listening, &life).await;
                listening
            })
        })
        .collect();
    let mut listeners = Vec::with_capacity(loops.len());
    for accepting in loops {
        listeners.push(accepting.await);
    }
    // Closing a listener refuses new connections and resets those still in its queue: each
    // queue is emptied first, each connection served as the drain serves any.
    core.draining.set(true);
    drain.set_phase(Phase::Draining);
    for listening in &listeners {
        accept::answer_backlog(&core, &drain, &inboxes, listening);
    }
    drop(listeners);
    let drain_began = Instant::now();
    drain_core(&core, &drain, &life).await;
    core.metrics.hist.drain.observe_since(drain_began);
    write_mirror_at_stop(&core).await;
    // The core's tasks (and with them `core`) are not dropped when its runtime ends: what
    // providers hold outside the process (upstream children and sessions) is released here,
    // and the upstream sessions' DELETEs go out before the runtime ends.
    core.registry.stop();
    crate::upstream::deletes_settled().await;
}

/// After the drain: the records this core's last calls queued reach the store before the
/// node's lease is no longer renewed (`--durable-writer core`: this core writes them; bounded).
async fn write_mirror_at_stop(core: &Endpoint) {
    if let Some(tap) = &core.mirror {
        tap.write_queued_at_stop().await;
    }
}

/// The drain on this core: report busy or quiet until every core is quiet or the deadline
/// passed, then end the open streams and wait (bounded) for the connections to go.
async fn drain_core(core: &Rc<Endpoint>, drain: &Drain, life: &Lifecycle) {
    let index = usize::from(core.index);
    assert!(drain.draining(), "invariant: the drain began before the listener closed");
    tracing::info!(core = index, "draining: listener closed, new sessions refused");
    loop {
        life.report(index, !is_quiet(core, drain));
        let overdue = life.deadline().is_some_and(|d| Instant::now() >= d);
        if overdue || life.all_quiet() {
            life.end();
        }
        if life.phase() == Phase::Ending {
            break;
        }
        monoio::select! {
            _ = monoio::time::sleep(DRAIN_TICK) => {}
            _ = life.reached(index, Phase::Ending) => {}
        }
    }
    drain.set_phase(Phase::Ending);
    let flush_until = Instant::now() + Duration::from_millis(config::DRAIN_FLUSH_MS);
    while drain.open.get() > 0 && Instant::now() < flush_until {
        monoio::time::sleep(FLUSH_TICK).await;
    }
    tracing::info!(core = index, cut = drain.open.get(), "drained");
}

/// No call runs on this core (`Endpoint::is_quiet`: a legacy request stream, a 2026-07-28
/// keyed call whose client dropped, a working task) and no connection is mid-request or
/// writing a request stream. Owed streams and tasks waiting for input are not waited for:
/// their clients cannot reconnect to a draining server.
fn is_quiet(core: &Endpoint, drain: &Drain) -> bool {
    drain.connections_quiet() && core.is_quiet()
}

/// Adopts connections other cores moved here because their request belongs to this core.
async fn drain_inbox(core: Rc<Endpoint>, drain: Rc<Drain>, inboxes: Inboxes) {
    let index = usize::from(core.index);
    loop {
        let Some(inbox) = inboxes.get(index) else { return };
        let moved = inbox.recv().await;
        if moved.socket.set_nonblocking(true).is_err() {
            continue;
        }
        let Ok(socket) = monoio::net::TcpStream::from_std(moved.socket) else { continue };
        let socket = match moved.tls {
            Some(session) => Transport::tls(socket, *session),
            None => Transport::plain(socket),
        };
        monoio::spawn(crate::runtime::conn::serve(
            core.clone(),
            drain.admit(),
            inboxes.clone(),
            socket,
            moved.pending,
            moved.hops,
        ));
    }
}

/// Periodic housekeeping; off the request path. Each tick asks the endpoint to expire what
/// is due, in bounded steps with `REAP_PAUSE` between them so that a burst of expiries never
/// holds the event loop for long, then to sample the gauges that are cheaper to sample than
/// to keep on every change (`tidemark_tasks_active`, with `--durable` the sessions not
/// durable): at most `REAP_INTERVAL` old.
async fn reap(core: Rc<Endpoint>) {
    loop {
        monoio::time::sleep(REAP_INTERVAL).await;
        let step = &core.metrics.hist.reaper_step;
        loop {
            let began = Instant::now();
            // Only a step that looked at a session is timed: an idle tick leaves /metrics
            // unchanged (the status page and scrapes compare samples).
            let Some(more) = core.expire(began) else { break };
            step.observe_since(began);
            if !more {
                break;
            }
            monoio::time::sleep(REAP_PAUSE).await;
        }
        core.sample();
        // Deferred log lines whose connection wrote no answer since (`logging::deferred`).
        crate::logging::write_deferred();
    }
}
