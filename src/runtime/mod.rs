//! One core: its monoio runtime (io_uring with the best ring flags the kernel takes, else
//! epoll), its SO_REUSEPORT listener and accept loop, its hand-off inbox, its sessions, the
//! reaper that expires idle sessions, abandons owed streams nobody resumes and forgets settled
//! streams past retention, and its part in a graceful drain (`Lifecycle`, `Drain`).
//!
//! Its connections: `conn` (one socket: read a request, `endpoint::handle`, write or hand over)
//! and `stream` (the one driver of a response stream, over a `core::Source`).
//!
//! Called by `server` once per thread. Never: touches another core's sessions.
//!
//! # Drain
//!
//! `Lifecycle` (shared, atomics) moves `Serving` → `Draining` → `Ending`, only forward. On
//! `Draining` (SIGTERM/SIGINT through `server`, or `Running::shutdown`) each worker closes its
//! listener (new connections are refused), sets `Core::draining` (a new `initialize` gets 503 +
//! Retry-After), answers every further request with `Connection: close`, closes idle
//! keep-alive connections, and reports every `DRAIN_TICK` whether it is still busy: a call
//! running, or a connection mid-request or writing a request stream. When every core is quiet,
//! or `--drain-secs` passed, the first worker to notice moves the lifecycle to `Ending`: every
//! SSE writer sends what is ready plus the chunked body's last chunk and closes, and the worker
//! returns once its connections are gone (at most `DRAIN_FLUSH_MS` later). A worker learns of a
//! phase change from another thread through its slot's `AtomicWaker` (the hand-off inbox's
//! pattern, monoio's `sync` feature); its connections learn it from the core-local `Drain`.

pub mod conn;
pub mod handoff;
mod stream;

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use monoio::io::Canceller;

use crate::config::{self, Config, DriverChoice};
use crate::core::Core;
use crate::dispatch::Registry;
use crate::endpoint::Endpoint;
use crate::legacy::session::StreamKind;
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

/// How often a draining core reports whether it is still busy: the drain ends at most this long
/// after the last call delivered its result.
const DRAIN_TICK: Duration = Duration::from_millis(50);

/// How often the end of a drain looks whether the core's connections are gone.
const FLUSH_TICK: Duration = Duration::from_millis(10);

/// Everything one worker thread is given.
pub(crate) struct WorkerSpec {
    pub index: u16,
    pub cfg: Arc<Config>,
    pub listener: std::net::TcpListener,
    pub inboxes: Inboxes,
    pub metrics: Arc<CoreMetrics>,
    pub providers: Vec<ProviderFactory>,
    pub life: Arc<Lifecycle>,
}

/// Where the server is in its life. Only moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Accepting connections and sessions.
    Serving = 0,
    /// Listeners closed, `initialize` refused (503 + Retry-After), idle connections closed;
    /// running calls finish and deliver their results, other requests are still served.
    Draining = 1,
    /// Every core quiet, or `--drain-secs` passed: open SSE responses end with their last
    /// chunk, connections close, workers return.
    Ending = 2,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Serving,
            1 => Phase::Draining,
            _ => Phase::Ending,
        }
    }
}

/// The server's lifecycle, shared by the workers, the admin listener (`/readyz`), the signal
/// thread and `Running`. Written rarely (twice per process life); read by workers only while
/// they wait for it, never on the request path.
pub(crate) struct Lifecycle {
    phase: AtomicU8,
    /// `--drain-secs`.
    drain: Duration,
    /// When the drain began; set before `phase` leaves `Serving`.
    drain_started: OnceLock<Instant>,
    cores: Vec<CoreSlot>,
    /// The thread blocked in `Running::join`, unparked when a worker returns.
    joiner: OnceLock<std::thread::Thread>,
}

/// One worker's slot in the lifecycle.
struct CoreSlot {
    /// The worker's one task that waits for a phase (its accept loop, then its drain loop).
    waker: AtomicWaker,
    /// The core still has work. True from the start, so a core that has not reported yet is
    /// never taken as quiet.
    busy: AtomicBool,
    /// The worker's thread returned.
    finished: AtomicBool,
}

impl Lifecycle {
    pub fn new(cores: usize, drain: Duration) -> Lifecycle {
        let slot = || CoreSlot {
            waker: AtomicWaker::new(),
            busy: AtomicBool::new(true),
            finished: AtomicBool::new(false),
        };
        Lifecycle {
            phase: AtomicU8::new(Phase::Serving as u8),
            drain,
            drain_started: OnceLock::new(),
            cores: (0..cores).map(|_| slot()).collect(),
            joiner: OnceLock::new(),
        }
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Begins the drain; false when it had begun already (a second request to stop).
    pub fn begin_drain(&self) -> bool {
        let _ = self.drain_started.set(Instant::now());
        let from = Phase::Serving as u8;
        let to = Phase::Draining as u8;
        let began = self.phase.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire);
        if began.is_ok() {
            self.wake_all();
        }
        began.is_ok()
    }

    /// Ends the drain (idempotent).
    fn end(&self) {
        if self.phase.swap(Phase::Ending as u8, Ordering::AcqRel) != Phase::Ending as u8 {
            self.wake_all();
        }
    }

    /// `--drain-secs`.
    pub fn drain(&self) -> Duration {
        self.drain
    }

    /// When the drain must end (`None` while serving).
    pub fn deadline(&self) -> Option<Instant> {
        self.drain_started.get().map(|t| *t + self.drain)
    }

    /// Past this, `Running::join` stops waiting for workers: the drain's deadline, its flush,
    /// and a second for a worker to return.
    pub fn give_up_at(&self) -> Option<Instant> {
        let flush = Duration::from_millis(config::DRAIN_FLUSH_MS) + Duration::from_secs(1);
        self.deadline().map(|d| d + flush)
    }

    fn report(&self, core: usize, busy: bool) {
        if let Some(slot) = self.cores.get(core) {
            slot.busy.store(busy, Ordering::Release);
        }
    }

    fn all_quiet(&self) -> bool {
        self.cores.iter().all(|c| !c.busy.load(Ordering::Acquire))
    }

    fn wake_all(&self) {
        for slot in &self.cores {
            slot.waker.wake();
        }
        if let Some(joiner) = self.joiner.get() {
            joiner.unpark();
        }
    }

    /// Completes once the phase is at least `phase`. Only worker `core`'s one waiting task
    /// calls it (one waker per slot).
    async fn reached(&self, core: usize, phase: Phase) {
        let Some(slot) = self.cores.get(core) else { return };
        poll_fn(|cx| {
            if self.phase() >= phase {
                return Poll::Ready(());
            }
            slot.waker.register(cx.waker());
            if self.phase() >= phase {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Worker `core`'s thread returned.
    pub fn worker_finished(&self, core: usize) {
        if let Some(slot) = self.cores.get(core) {
            slot.finished.store(true, Ordering::Release);
        }
        if let Some(joiner) = self.joiner.get() {
            joiner.unpark();
        }
    }

    pub fn all_finished(&self) -> bool {
        self.cores.iter().all(|c| c.finished.load(Ordering::Acquire))
    }

    /// Registers the thread that waits in `Running::join` (the first one only).
    pub fn set_joiner(&self, thread: std::thread::Thread) {
        let _ = self.joiner.set(thread);
    }
}

/// One core's side of the lifecycle, for its connections: core-local, no atomics.
#[derive(Default)]
pub(crate) struct Drain {
    /// This core's phase (follows `Lifecycle`, set by the worker's drain loop).
    phase: Cell<Option<Phase>>,
    /// Connections this core serves (`conn::serve` running).
    open: Cell<usize>,
    /// Of those: waiting for a request with nothing buffered, or writing a standalone GET
    /// stream. A drain closes or ends them and never waits for them.
    idle: Cell<usize>,
    /// Tasks waiting for the next phase change (idle connections, SSE writers).
    watch: PhaseWatch,
}

impl Drain {
    /// The drain has begun: no idle keep-alive, every answer closes its connection.
    pub fn draining(&self) -> bool {
        self.phase.get().is_some_and(|p| p >= Phase::Draining)
    }

    /// The drain ends: SSE writers send their last chunk and close.
    pub fn ending(&self) -> bool {
        self.phase.get() == Some(Phase::Ending)
    }

    /// Completes at this core's next phase change after the call.
    pub fn changed(&self) -> Changed<'_> {
        Changed { watch: &self.watch, generation: self.watch.generation.get(), slot: None }
    }

    fn set_phase(&self, phase: Phase) {
        self.phase.set(Some(phase));
        self.watch.notify_all();
    }

    /// Counts a connection while the guard lives.
    pub fn open(&self) -> Counted<'_> {
        Counted::new(&self.open)
    }

    /// Counts the connection as idle while the guard lives.
    pub fn idle(&self) -> Counted<'_> {
        Counted::new(&self.idle)
    }

    /// No connection of this core is mid-request or writing a request stream.
    fn connections_quiet(&self) -> bool {
        self.open.get() <= self.idle.get()
    }
}

/// Adds one to a core-local count while it lives.
pub(crate) struct Counted<'a>(&'a Cell<usize>);

impl<'a> Counted<'a> {
    fn new(count: &'a Cell<usize>) -> Counted<'a> {
        count.set(count.get() + 1);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Wakes every task waiting for the core's next phase change. A waiter gives its slot back
/// when dropped, so the many connections that wait and then go on (or close) leave nothing
/// behind; slots are reused, their number bounded by the waiters at one time.
#[derive(Default)]
struct PhaseWatch {
    generation: Cell<u64>,
    /// `Some` exactly while the waiter holding that slot is pending.
    wakers: RefCell<Vec<Option<Waker>>>,
    /// Slots no waiter holds.
    free: RefCell<Vec<usize>>,
}

impl PhaseWatch {
    fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let woken: Vec<Waker> =
            self.wakers.borrow_mut().iter_mut().filter_map(Option::take).collect();
        for waker in woken {
            waker.wake();
        }
    }
}

/// `Drain::changed`.
pub(crate) struct Changed<'a> {
    watch: &'a PhaseWatch,
    generation: u64,
    /// The slot this waiter holds, once it waited.
    slot: Option<usize>,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.watch.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut wakers = self.watch.wakers.borrow_mut();
        let slot = match self.slot {
            Some(slot) => slot,
            None => match self.watch.free.borrow_mut().pop() {
                Some(slot) => slot,
                None => {
                    wakers.push(None);
                    wakers.len() - 1
                }
            },
        };
        wakers[slot] = Some(cx.waker().clone());
        drop(wakers);
        self.slot = Some(slot);
        Poll::Pending
    }
}

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            if let Some(waker) = self.watch.wakers.borrow_mut().get_mut(slot) {
                *waker = None;
            }
            self.watch.free.borrow_mut().push(slot);
        }
    }
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

/// Runs one worker thread until its drain ended (or its runtime could not be built). `ready`
/// receives the driver name once the runtime is built.
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
    let WorkerSpec { index, cfg, listener, inboxes, metrics, providers, life } = spec;
    let providers: Vec<Rc<dyn Provider>> = providers.iter().map(|make| make()).collect();
    let shared = Rc::new(Core {
        registry: Registry::build(providers).await,
        threads: inboxes.len() as u16,
        index,
        metrics,
        cfg,
        draining: Cell::new(false),
    });
    let core = Rc::new(Endpoint::new(shared));
    let listener = match monoio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
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
    accept_until_drain(&core, &drain, &inboxes, &listener, &life).await;
    // Closing the listener refuses new connections (and resets those still in its backlog).
    drop(listener);
    drain_core(&core, &drain, &life).await;
    // The core's tasks (and with them `core`) are not dropped when its runtime ends: what
    // providers hold outside the process (upstream children and sessions) is released here,
    // and the upstream sessions' DELETEs go out before the runtime ends.
    core.registry.stop();
    crate::upstream::deletes_settled().await;
}

/// Accepts connections until the drain begins.
async fn accept_until_drain(
    core: &Rc<Endpoint>,
    drain: &Rc<Drain>,
    inboxes: &Inboxes,
    listener: &monoio::net::TcpListener,
    life: &Lifecycle,
) {
    let index = usize::from(core.index);
    loop {
        let canceller = Canceller::new();
        let accepting = listener.cancelable_accept(canceller.handle());
        let mut accepting = std::pin::pin!(accepting);
        let accepted = monoio::select! {
            r = &mut accepting => r,
            _ = life.reached(index, Phase::Draining) => {
                let _canceled = canceller.cancel();
                // A connection accepted in that same instant is closed unanswered, like the
                // ones still in the backlog.
                drop(accepting.await);
                return;
            }
        };
        let Ok((socket, _peer)) = accepted else { continue };
        let _ = socket.set_nodelay(true);
        if core.metrics.connections_active.get() as usize >= core.cfg.connections_per_core_max {
            core.metrics.limit_connections.inc();
            monoio::spawn(refuse_connection(socket));
            continue;
        }
        monoio::spawn(crate::runtime::conn::serve(
            core.clone(),
            drain.clone(),
            inboxes.clone(),
            socket,
            Vec::new(),
        ));
    }
}

/// The drain on this core: report busy or quiet until every core is quiet or the deadline
/// passed, then end the open streams and wait (bounded) for the connections to go.
async fn drain_core(core: &Rc<Endpoint>, drain: &Drain, life: &Lifecycle) {
    let index = usize::from(core.index);
    core.draining.set(true);
    drain.set_phase(Phase::Draining);
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

/// No call runs on this core and no connection is mid-request or writing a request stream.
/// Owed streams are not waited for: their clients cannot reconnect to a draining server.
fn is_quiet(core: &Endpoint, drain: &Drain) -> bool {
    if !drain.connections_quiet() {
        return false;
    }
    let sessions = core.legacy.sessions.borrow().all();
    let running = sessions.iter().any(|rc| {
        rc.borrow().streams().any(|st| st.kind == StreamKind::Request && st.is_running())
    });
    !running
}

async fn refuse_connection(mut socket: monoio::net::TcpStream) {
    use monoio::io::AsyncWriteRentExt;
    let mut out = Vec::new();
    Answer::Refused { refusal: Refusal::Unavailable, id: None }.render(&mut out, false);
    let _ = socket.write_all(out).await;
}

/// Adopts connections other cores moved here because their session lives on this core.
async fn drain_inbox(core: Rc<Endpoint>, drain: Rc<Drain>, inboxes: Inboxes) {
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
            drain.clone(),
            inboxes.clone(),
            socket,
            moved.pending,
        ));
    }
}

/// Periodic housekeeping; off the request path.
async fn reap(core: Rc<Endpoint>) {
    loop {
        monoio::time::sleep(REAP_INTERVAL).await;
        let now = Instant::now();
        core.modern.tasks.expire(now);
        let sessions = core.legacy.sessions.borrow().all();
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
                end_session(&core.legacy, &id, SessionEnd::Expired);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lifecycle_only_moves_forward_and_waits_for_every_core() {
        // Goal: one drain per life, its deadline, and "all quiet" only once every core said so.
        // Method: drive a two-core lifecycle by hand.
        let life = Lifecycle::new(2, Duration::from_secs(5));
        assert_eq!((life.phase(), life.deadline()), (Phase::Serving, None));
        assert!(!life.all_quiet(), "a core that never reported is busy");
        assert!(life.begin_drain());
        assert!(!life.begin_drain(), "a second request to stop is reported as such");
        assert_eq!(life.phase(), Phase::Draining);
        let deadline = life.deadline().expect("deadline once draining");
        assert!(deadline > Instant::now() + Duration::from_secs(4));
        life.report(0, false);
        assert!(!life.all_quiet(), "core 1 has not reported");
        life.report(1, false);
        assert!(life.all_quiet());
        life.end();
        life.end();
        assert_eq!(life.phase(), Phase::Ending);
        assert!(!life.begin_drain(), "never back to draining");
        assert_eq!(life.phase(), Phase::Ending);
        assert!(!life.all_finished());
        life.worker_finished(0);
        life.worker_finished(1);
        assert!(life.all_finished());
    }

    #[test]
    fn phase_waiters_fire_on_change_and_give_their_slot_back() {
        // Goal: connections that wait for a phase change and then go on leave nothing behind
        // (a waiter list that only grows would leak per connection). Method: poll and drop
        // many waiters by hand, then one that sees a change.
        let drain = Drain::default();
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..1000 {
            let mut waiter = std::pin::pin!(drain.changed());
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(drain.watch.wakers.borrow().len(), 1, "one slot, reused");
        let mut waiter = std::pin::pin!(drain.changed());
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        assert!(!drain.draining());
        drain.set_phase(Phase::Draining);
        assert!(waiter.as_mut().poll(&mut cx).is_ready());
        assert!(drain.draining() && !drain.ending());
        let idle = drain.idle();
        let open = drain.open();
        assert!(drain.connections_quiet(), "an idle connection is not waited for");
        drop(idle);
        assert!(!drain.connections_quiet(), "a busy one is");
        drop(open);
        assert!(drain.connections_quiet());
    }
}
