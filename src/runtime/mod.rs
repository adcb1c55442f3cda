//! One core: its monoio runtime (io_uring with the best ring flags the kernel takes, else
//! epoll), its SO_REUSEPORT listener and accept loop, its hand-off inbox, its sessions, and the
//! reaper that expires idle sessions, abandons owed streams nobody resumes and forgets settled
//! streams past retention.
//!
//! Called by `server` once per thread. Never: touches another core's sessions.

pub mod conn;
pub mod handoff;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, DriverChoice};
use crate::dispatch::Registry;
use crate::endpoint::Core;
use crate::legacy::session::SessionTable;
use crate::legacy::{end_session, SessionEnd};
use crate::metrics::CoreMetrics;
use crate::provider::Provider;
use crate::runtime::handoff::Inboxes;
use crate::wire::{Answer, Refusal};

/// Builds one core's instance of a provider (called once on each worker thread, so the
/// provider itself need not be `Send`).
pub(crate) type ProviderFactory = Arc<dyn Fn() -> Rc<dyn Provider> + Send + Sync>;

/// How often the reaper looks at this core's sessions.
const REAP_INTERVAL: Duration = Duration::from_millis(250);

/// Everything one worker thread is given.
pub(crate) struct WorkerSpec {
    pub index: u16,
    pub cfg: Arc<Config>,
    pub listener: std::net::TcpListener,
    pub inboxes: Inboxes,
    pub metrics: Arc<CoreMetrics>,
    pub providers: Vec<ProviderFactory>,
}

/// Which driver a worker got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverGot {
    UringDeferTaskrun,
    UringCoopTaskrun,
    UringPlain,
    Epoll,
}

impl DriverGot {
    pub fn name(self) -> &'static str {
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

/// Runs one worker thread to completion (it never completes while the listener lives).
/// `ready` receives the driver name once the runtime is built.
pub(crate) fn run(spec: WorkerSpec, ready: std::sync::mpsc::Sender<Result<DriverGot, String>>) {
    let choice = spec.cfg.driver;
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
    let WorkerSpec { index, cfg, listener, inboxes, metrics, providers } = spec;
    let providers: Vec<Rc<dyn Provider>> = providers.iter().map(|make| make()).collect();
    let core = Rc::new(Core {
        registry: Registry::build(providers).await,
        sessions: RefCell::new(SessionTable::new(cfg.sessions_per_core_max)),
        threads: inboxes.len() as u16,
        index,
        metrics,
        cfg,
    });
    let listener = match monoio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(core = index, error = %e, "listener could not join the runtime");
            return;
        }
    };
    monoio::spawn(drain_inbox(core.clone(), inboxes.clone()));
    monoio::spawn(reap(core.clone()));
    loop {
        let Ok((socket, _peer)) = listener.accept().await else { continue };
        let _ = socket.set_nodelay(true);
        if core.metrics.connections_active.get() as usize >= core.cfg.connections_per_core_max {
            core.metrics.limit_connections.inc();
            monoio::spawn(refuse_connection(socket));
            continue;
        }
        monoio::spawn(crate::runtime::conn::serve(
            core.clone(),
            inboxes.clone(),
            socket,
            Vec::new(),
        ));
    }
}

async fn refuse_connection(mut socket: monoio::net::TcpStream) {
    use monoio::io::AsyncWriteRentExt;
    let mut out = Vec::new();
    Answer::Refused { refusal: Refusal::Unavailable, id: None }.render(&mut out, false);
    let _ = socket.write_all(out).await;
}

/// Adopts connections other cores moved here because their session lives on this core.
async fn drain_inbox(core: Rc<Core>, inboxes: Inboxes) {
    let index = usize::from(core.index);
    loop {
        let Some(inbox) = inboxes.get(index) else { return };
        let moved = inbox.recv().await;
        if moved.socket.set_nonblocking(true).is_err() {
            continue;
        }
        let Ok(socket) = monoio::net::TcpStream::from_std(moved.socket) else { continue };
        monoio::spawn(crate::runtime::conn::serve(
            core.clone(),
            inboxes.clone(),
            socket,
            moved.pending,
        ));
    }
}

/// Periodic housekeeping; off the request path.
async fn reap(core: Rc<Core>) {
    loop {
        monoio::time::sleep(REAP_INTERVAL).await;
        let now = Instant::now();
        let sessions = core.sessions.borrow().all();
        for rc in sessions {
            let mut s = rc.borrow_mut();
            let (abandoned, expired) =
                s.overdue(now, core.cfg.owed_timeout, core.cfg.stream_retention);
            for k in abandoned {
                s.drop_stream(k);
                core.metrics.owed_abandoned_total.inc();
            }
            for k in expired {
                s.remove_stream(k);
            }
            if s.is_expired(now, core.cfg.session_idle) {
                let id = s.id;
                drop(s);
                end_session(&core, &id, SessionEnd::Expired);
            }
        }
    }
}
