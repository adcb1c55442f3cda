//! One server's life and one core's part in it: `Lifecycle` (shared by every worker, atomics:
//! `Serving` → `Draining` → `Ending`, only forward) and `Drain` (one core's view of it, which its
//! connections and stream drivers wait on). The drain itself is described in `runtime`'s doc.
//! Used by `runtime` (the worker's drain loop), `conn` and `stream` (a connection's part), and
//! `server` (starting the drain). Never: touches a socket or a session.

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::task::Poll;
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;

use crate::config;
use crate::signal::{Notified, Signal};

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
    /// The status an immediate exit (a second signal) ends the process with, 0 while none is
    /// under way. Set before that exit kills the upstream children, whose deaths can end the
    /// drain: `Running::join` must not then return and let the binary exit 0 first.
    exiting_with: AtomicI32,
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
    pub(crate) fn new(cores: usize, drain: Duration) -> Lifecycle {
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
            exiting_with: AtomicI32::new(0),
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Begins the drain; false when it had begun already (a second request to stop).
    pub(crate) fn begin_drain(&self) -> bool {
        let _ = self.drain_started.set(Instant::now());
        let from = Phase::Serving as u8;
        let to = Phase::Draining as u8;
        let began = self.phase.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire);
        if began.is_ok() {
            self.wake_all();
        }
        began.is_ok()
    }

    /// An immediate exit with `status` is under way (the signal thread's, on a second signal).
    pub(crate) fn exit_at_once(&self, status: i32) {
        self.exiting_with.store(status, Ordering::Release);
    }

    /// The status of the immediate exit under way, if one is.
    pub(crate) fn exiting_with(&self) -> Option<i32> {
        Some(self.exiting_with.load(Ordering::Acquire)).filter(|&status| status != 0)
    }

    /// Ends the drain (idempotent).
    pub(super) fn end(&self) {
        if self.phase.swap(Phase::Ending as u8, Ordering::AcqRel) != Phase::Ending as u8 {
            self.wake_all();
        }
    }

    /// `--drain-secs`.
    pub(crate) fn drain(&self) -> Duration {
        self.drain
    }

    /// When the drain must end (`None` while serving).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.drain_started.get().map(|t| *t + self.drain)
    }

    /// Past this, `Running::join` stops waiting for workers: the drain's deadline, its flush,
    /// and a second for a worker to return.
    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        let flush = Duration::from_millis(config::DRAIN_FLUSH_MS) + Duration::from_secs(1);
        self.deadline().map(|d| d + flush)
    }

    pub(super) fn report(&self, core: usize, busy: bool) {
        if let Some(slot) = self.cores.get(core) {
            slot.busy.store(busy, Ordering::Release);
        }
    }

    pub(super) fn all_quiet(&self) -> bool {
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
    pub(super) async fn reached(&self, core: usize, phase: Phase) {
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
    pub(crate) fn worker_finished(&self, core: usize) {
        if let Some(slot) = self.cores.get(core) {
            slot.finished.store(true, Ordering::Release);
        }
        if let Some(joiner) = self.joiner.get() {
            joiner.unpark();
        }
    }

    pub(crate) fn all_finished(&self) -> bool {
        self.cores.iter().all(|c| c.finished.load(Ordering::Acquire))
    }

    /// Registers the thread that waits in `Running::join` (the first one only).
    pub(crate) fn set_joiner(&self, thread: std::thread::Thread) {
        let _ = self.joiner.set(thread);
    }
}

/// One core's side of the lifecycle, for its connections: core-local, no atomics.
#[derive(Default)]
pub(crate) struct Drain {
    /// This core's phase (follows `Lifecycle`, set by the worker's drain loop).
    phase: Cell<Option<Phase>>,
    /// Connections this core serves (`conn::serve` running).
    pub(super) open: Cell<usize>,
    /// Of those: waiting for a request with nothing buffered, or writing a standalone GET
    /// stream. A drain closes or ends them and never waits for them.
    idle: Cell<usize>,
    /// Tasks waiting for the next phase change (idle connections, SSE writers).
    watch: Signal,
}

impl Drain {
    /// The drain has begun: no idle keep-alive, every answer closes its connection.
    pub(crate) fn draining(&self) -> bool {
        self.phase.get().is_some_and(|p| p >= Phase::Draining)
    }

    /// The drain ends: SSE writers send their last chunk and close.
    pub(crate) fn ending(&self) -> bool {
        self.phase.get() == Some(Phase::Ending)
    }

    /// Completes at this core's next phase change after the call.
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.watch.notified()
    }

    pub(super) fn set_phase(&self, phase: Phase) {
        self.phase.set(Some(phase));
        self.watch.notify_all();
    }

    /// Counts a connection open from now (its admission, before its task first runs) until
    /// the guard is dropped.
    pub(crate) fn admit(self: &Rc<Self>) -> Admitted {
        self.open.set(self.open.get() + 1);
        Admitted(self.clone())
    }

    /// Counts the connection as idle while the guard lives.
    pub(crate) fn idle(&self) -> Counted<'_> {
        Counted::new(&self.idle)
    }

    /// No connection of this core is mid-request or writing a request stream.
    pub(super) fn connections_quiet(&self) -> bool {
        self.open.get() <= self.idle.get()
    }
}

/// One connection counted in `Drain::open` from its admission until dropped. Counted before
/// its task first runs, so neither the drain's quiet check nor the end of its flush misses a
/// connection accepted a moment ago: one that ended the runtime with its task unrun would be
/// closed with its request unread, a reset.
pub(crate) struct Admitted(Rc<Drain>);

impl Admitted {
    /// The core's drain the connection belongs to.
    pub(crate) fn drain(&self) -> &Rc<Drain> {
        &self.0
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get() - 1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Waker};

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
        let drain = Rc::new(Drain::default());
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..1000 {
            let mut waiter = std::pin::pin!(drain.changed());
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
        }
        assert!(drain.watch.slots_held() <= 1, "one slot, reused");
        let mut waiter = std::pin::pin!(drain.changed());
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        assert!(!drain.draining());
        drain.set_phase(Phase::Draining);
        assert!(waiter.as_mut().poll(&mut cx).is_ready());
        assert!(drain.draining() && !drain.ending());
        let idle = drain.idle();
        let open = drain.admit();
        assert!(drain.connections_quiet(), "an idle connection is not waited for");
        drop(idle);
        assert!(!drain.connections_quiet(), "a busy one is");
        drop(open);
        assert!(drain.connections_quiet());
    }
}
