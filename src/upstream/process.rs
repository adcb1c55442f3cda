//! The lives of the stdio upstreams' processes, process-wide: one watcher thread sees each
//! child exit the moment it exits (poll(2) on its pidfd), whatever still holds its pipes (a
//! wrapper's server, as `npx`, `uvx` and shells leave behind, keeps its stdout open), reaps it
//! and tells the child's core by closing the far end of a socket pair the core reads. Then it
//! ends what is left of the child's process group (SIGTERM, SIGKILL after the kill grace) and
//! reaps the group's orphans.
//!
//! From its first stdio child on, tidemark is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a
//! descendant whose parent dies is reparented to tidemark rather than to init, even one that
//! left its group and session with `setsid()`. A child of tidemark outside tidemark's own
//! process group is therefore an upstream's (every stdio child gets a group of its own) or a
//! descendant of one; the exit (`end_descendants`) kills every such process, its group too.
//!
//! Owns: the watcher thread and its children (`Entry`), `ProcessCount` (a slot is given back
//! once a child's whole group is gone), the exit's wait and sweep.
//! Called by: `stdio` (`Watcher::watch` after a spawn, `Watcher::stop` at a transport's end);
//! `server` through `upstream` (`wait_for_children` after the drain, `end_descendants` before
//! an immediate exit).
//! Never: blocks a worker thread (a worker sends an order and writes one wake byte), waits
//! for or signals a process in tidemark's own process group (an embedding program's own
//! children stay its own).

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitIdStatus, WaitOptions};

/// Live children of all cores, against `--upstream-max-processes`. A slot is taken before the
/// spawn and given back when the child has exited and its process group is empty.
#[derive(Default)]
pub(crate) struct ProcessCount(AtomicUsize);

impl ProcessCount {
    pub(super) fn try_take(&self, max: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok()
    }

    /// Children alive now (what the admin listener reports).
    pub(crate) fn live(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    pub(super) fn give_back(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a child ended: written by the watcher before it closes the child's exit socket, read
/// by the core once that socket reads end-of-file. 0 until then.
#[derive(Default)]
pub(crate) struct ExitNote(AtomicU64);

/// `ExitNote`'s kinds, in its high 32 bits; the low ones hold the status or the signal.
const NOTE_EXITED: u64 = 1 << 32;
const NOTE_SIGNALED: u64 = 2 << 32;
const NOTE_LOST: u64 = 3 << 32;

impl ExitNote {
    fn set(&self, status: Option<&WaitIdStatus>) {
        let low = |n: i32| u64::from(n as u32);
        let note = match status {
            Some(s) => match (s.exit_status(), s.terminating_signal()) {
                (Some(code), _) => NOTE_EXITED | low(code),
                (None, Some(signal)) => NOTE_SIGNALED | low(signal),
                (None, None) => NOTE_LOST,
            },
            None => NOTE_LOST,
        };
        self.0.store(note, Ordering::Release);
    }

    /// The fault's reason (`data.reason` of the call's `-32603`), once the child has exited.
    pub(crate) fn reason(&self) -> Option<String> {
        let note = self.0.load(Ordering::Acquire);
        let low = note & u64::from(u32::MAX);
        match note & !u64::from(u32::MAX) {
            0 => None,
            NOTE_EXITED => Some(format!("exited with status {low}")),
            NOTE_SIGNALED => Some(format!("killed by signal {low}")),
            _ => Some("ended (its exit status could not be read)".to_owned()),
        }
    }
}

/// What a core keeps of a child it handed to the watcher.
pub(crate) struct Watched {
    /// Reads end-of-file once the child has exited; `note` then says how.
    pub(crate) exited: StdUnixStream,
    pub(crate) note: Arc<ExitNote>,
}

/// An order from a core to the watcher.
enum Order {
    Watch(Entry),
    /// The transport ended: SIGTERM to the child's group now, SIGKILL after its grace.
    Stop(u32),
}

/// The process-wide watcher: the orders' channel and the socket that wakes its poll(2).
pub(crate) struct Watcher {
    orders: mpsc::Sender<Order>,
    wake: StdUnixStream,
}

/// The watcher, started (and tidemark made a child subreaper) on first use, which is before
/// the first stdio child is spawned: no descendant can be orphaned before it.
pub(crate) fn watcher() -> std::io::Result<&'static Watcher> {
    static WATCHER: OnceLock<Watcher> = OnceLock::new();
    if let Some(watcher) = WATCHER.get() {
        return Ok(watcher);
    }
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        tracing::warn!(error = %e, "not a child subreaper: orphaned upstream descendants go to init");
    }
    let (wake, woken) = StdUnixStream::pair()?;
    wake.set_nonblocking(true)?;
    woken.set_nonblocking(true)?;
    let (orders, rx) = mpsc::channel();
    let candidate = Watcher { orders, wake };
    // Two cores may race here; the loser's thread sees its channel closed and returns.
    let won = WATCHER.set(candidate).is_ok();
    let watcher = WATCHER.get().expect("invariant: WATCHER was set just above");
    if won {
        STARTED.store(true, Ordering::Release);
        std::thread::Builder::new()
            .name("tidemark-children".into())
            .spawn(move || watch_forever(&rx, &woken))?;
    }
    Ok(watcher)
}

impl Watcher {
    /// Hands a just-spawned child (a process group leader) to the watcher. Its pidfd is opened
    /// here, while the child cannot have been reaped yet (only the watcher reaps it).
    pub(crate) fn watch(
        &self,
        pid: u32,
        grace: Duration,
        count: Arc<ProcessCount>,
    ) -> std::io::Result<Watched> {
        let pid = pid_of(pid).ok_or_else(|| std::io::Error::other("a child pid out of range"))?;
        let (exited, ours) = StdUnixStream::pair()?;
        // Linux < 5.3 has no pidfd: such a child is looked at every `REAP_POLL` instead.
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
        let note = Arc::new(ExitNote::default());
        // Here, not at the stop: the exit's wait reads it before the watcher may have
        // taken the drain's stop orders.
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        LONGEST_GRACE_MS.fetch_max(grace_ms, Ordering::AcqRel);
        LIVE.fetch_add(1, Ordering::AcqRel);
        self.order(Order::Watch(Entry {
            pid,
            leader: Leader::Running(pidfd),
            exit_socket: Some(ours),
            note: note.clone(),
            count,
            grace,
            end: End::NotAsked,
        }));
        Ok(Watched { exited, note })
    }

    /// Ends a child and its group: SIGTERM now, SIGKILL after its grace (the watcher's).
    pub(crate) fn stop(&self, pid: u32) {
        self.order(Order::Stop(pid));
    }

    fn order(&self, order: Order) {
        if self.orders.send(order).is_err() {
            tracing::warn!("upstream watcher is gone; a child may be left unreaped");
        }
        // A full socket already holds a wake-up the watcher has not read: nothing is lost.
        let _ = (&self.wake).write(&[1]);
    }
}

/// Ends a child the watcher could not take (its exit socket could not be made): SIGKILL to
/// its group now, and its slot back. What stays of it is reaped as an orphan.
pub(crate) fn abandon(pid: u32, count: &ProcessCount) {
    if let Some(pid) = pid_of(pid) {
        signal_group(pid, Signal::KILL);
    }
    count.give_back();
}

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// A watched child's own state.
enum Leader {
    /// Not reaped; its pidfd (`None` without pidfd support).
    Running(Option<OwnedFd>),
    Reaped,
}

/// How far the end of a watched child's group has gone.
enum End {
    /// Nobody asked it to end, and the child runs.
    NotAsked,
    /// SIGTERM sent to the group (a stop, or the child exited); SIGKILL at `kill_at`.
    Terminated { kill_at: Instant },
    /// SIGKILL sent; past `give_up_at` the entry is dropped (a process stuck in the kernel).
    Killed { give_up_at: Instant },
}

/// One watched child and its process group.
struct Entry {
    pid: Pid,
    leader: Leader,
    /// The watcher's end of the exit socket, `Some` until the child is reaped.
    exit_socket: Option<StdUnixStream>,
    note: Arc<ExitNote>,
    count: Arc<ProcessCount>,
    grace: Duration,
    end: End,
}

impl Entry {
    fn terminate(&mut self, now: Instant) {
        if let End::NotAsked = self.end {
            signal_group(self.pid, Signal::TERM);
            self.end = End::Terminated { kill_at: now + self.grace };
        }
    }

    /// Reaps the child if it exited (true then), telling its core.
    fn reap_leader(&mut self, now: Instant) -> bool {
        let Leader::Running(pidfd) = &self.leader else { return false };
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        let waited = match pidfd {
            Some(fd) => rustix::process::waitid(WaitId::PidFd(fd.as_fd()), options),
            None => rustix::process::waitid(WaitId::Pid(self.pid), options),
        };
        let status = match waited {
            Ok(None) => return false,
            Ok(Some(status)) => Some(status),
            // ECHILD: reaped elsewhere (an embedding program's `wait(-1)`); status lost.
            Err(_) => None,
        };
        self.note.set(status.as_ref());
        self.exit_socket = None;
        self.leader = Leader::Reaped;
        // What the child leaves behind (a wrapper's server holding its stdout) goes with it.
        self.terminate(now);
        true
    }

    /// One look at the entry; true once it is done (the child reaped, its group gone).
    fn step(&mut self, now: Instant) -> bool {
        if let Leader::Reaped = self.leader {
            // Orphans that stayed in the group are tidemark's children now: reap them.
            while let Ok(Some(_)) = rustix::process::waitpgid(self.pid, WaitOptions::NOHANG) {}
        }
        match self.end {
            End::Terminated { kill_at } if now >= kill_at => {
                signal_group(self.pid, Signal::KILL);
                if let Leader::Running(_) = self.leader {
                    let _ = rustix::process::kill_process(self.pid, Signal::KILL);
                }
                self.end = End::Killed { give_up_at: now + REAP_SLACK };
            }
            End::Killed { give_up_at } if now >= give_up_at => {
                tracing::warn!(
                    pid = self.pid.as_raw_nonzero().get(),
                    "upstream process group outlived SIGKILL; no longer watched"
                );
                return true;
            }
            _ => {}
        }
        let group_gone = rustix::process::test_kill_process_group(self.pid).is_err();
        matches!(self.leader, Leader::Reaped) && group_gone
    }

    /// Wants a look every `REAP_POLL` (a deadline, a group to reap, no pidfd to poll).
    fn ticks(&self) -> bool {
        !matches!((&self.end, &self.leader), (End::NotAsked, Leader::Running(Some(_))))
    }
}

fn signal_group(pid: Pid, signal: Signal) {
    // ESRCH (already gone) is the expected case for a group that ended by itself.
    let _ = rustix::process::kill_process_group(pid, signal);
}

fn watch_forever(orders: &mpsc::Receiver<Order>, woken: &StdUnixStream) {
    let mut entries: Vec<Entry> = Vec::new();
    loop {
        let now = Instant::now();
        loop {
            match orders.try_recv() {
                Ok(Order::Watch(entry)) => entries.push(entry),
                Ok(Order::Stop(pid)) => {
                    let pid = pid_of(pid);
                    if let Some(entry) = entries.iter_mut().find(|e| Some(e.pid) == pid) {
                        entry.terminate(now);
                    }
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        }
        let mut reaped = false;
        for entry in &mut entries {
            reaped |= entry.reap_leader(now);
        }
        entries.retain_mut(|entry| {
            let done = entry.step(now);
            if done {
                entry.count.give_back();
                LIVE.fetch_sub(1, Ordering::AcqRel);
            }
            !done
        });
        if reaped {
            reap_orphans(&entries);
        }
        wait_for_news(&entries, woken);
    }
}

/// Blocks until a watched child exits, an order arrives, or (while any entry ticks)
/// `REAP_POLL` passes.
fn wait_for_news(entries: &[Entry], woken: &StdUnixStream) {
    let mut fds = vec![PollFd::new(woken, PollFlags::IN)];
    for entry in entries {
        if let Leader::Running(Some(fd)) = &entry.leader {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
    }
    let tick = rustix::event::Timespec { tv_sec: 0, tv_nsec: i64::from(REAP_POLL.subsec_nanos()) };
    let timeout = entries.iter().any(Entry::ticks).then_some(&tick);
    // EINTR (a signal handled on this thread) is one more look, like a wake-up.
    let _ = rustix::event::poll(&mut fds, timeout);
    let mut drained = [0u8; 64];
    while matches!((&*woken).read(&mut drained), Ok(n) if n > 0) {}
}

/// Reaps the zombies among tidemark's children outside its own process group that no entry
/// watches: descendants orphaned to tidemark (a setsid daemon) that have exited since.
fn reap_orphans(entries: &[Entry]) {
    for orphan in orphans().into_iter().filter(|o| o.zombie) {
        let watched = entries.iter().any(|e| e.pid == orphan.pid);
        if !watched {
            let _ = rustix::process::waitpid(Some(orphan.pid), WaitOptions::NOHANG);
        }
    }
}

/// A child of tidemark outside tidemark's own process group.
struct Orphan {
    pid: Pid,
    group: Pid,
    zombie: bool,
}

/// Every child of tidemark outside its process group (from /proc; a zombie included).
fn orphans() -> Vec<Orphan> {
    let us = rustix::process::getpid().as_raw_nonzero().get();
    let our_group = rustix::process::getpgrp().as_raw_nonzero().get();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // "pid (comm) state ppid pgrp …": comm may hold spaces and ')', so split at the last.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|f| f.parse::<i32>().ok());
        let group = fields.next().and_then(|f| f.parse::<i32>().ok());
        let (Some(ppid), Some(group)) = (ppid, group) else { continue };
        if ppid != us || group == our_group {
            continue;
        }
        if let (Some(pid), Some(group)) = (Pid::from_raw(pid), Pid::from_raw(group)) {
            found.push(Orphan { pid, group, zombie: state == Some("Z") });
        }
    }
    found
}

/// Watched children not yet done, all cores.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The longest kill grace of any child watched.
static LONGEST_GRACE_MS: AtomicU64 = AtomicU64::new(0);

/// Blocks (the process's main thread, after the workers ended and stopped their children)
/// until every watched child's group is gone, at most the longest kill grace plus
/// `REAP_SLACK`, then ends every descendant left (`end_descendants`). Without this the
/// process would exit before its children's SIGKILL, and orphans would outlive it.
pub(crate) fn wait_for_children() {
    if !started() {
        return;
    }
    let grace = Duration::from_millis(LONGEST_GRACE_MS.load(Ordering::Acquire));
    let deadline = Instant::now() + grace + REAP_SLACK;
    while LIVE.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(REAP_POLL);
    }
    end_descendants();
}

/// SIGKILLs every child of tidemark outside its process group, with its group, and reaps
/// them, again for the descendants each death reparents to tidemark, until none is left or
/// `REAP_SLACK` passed. For the exit: a drain's end (`wait_for_children`) or a second signal.
/// Does nothing when no stdio child was ever started (tidemark is then no subreaper, and a
/// child of an embedding program is its own).
pub(crate) fn end_descendants() {
    if !started() {
        return;
    }
    let deadline = Instant::now() + REAP_SLACK;
    loop {
        let left = orphans();
        if left.is_empty() {
            return;
        }
        for orphan in &left {
            if orphan.zombie {
                let _ = rustix::process::waitpid(Some(orphan.pid), WaitOptions::NOHANG);
            } else {
                signal_group(orphan.group, Signal::KILL);
                let _ = rustix::process::kill_process(orphan.pid, Signal::KILL);
            }
        }
        if Instant::now() >= deadline {
            tracing::warn!(left = left.len(), "upstream descendants still running at exit");
            return;
        }
        std::thread::sleep(EXIT_SWEEP_POLL);
    }
}

/// The watcher was started: tidemark is a subreaper and a stdio child may have been spawned.
fn started() -> bool {
    STARTED.load(Ordering::Acquire)
}

static STARTED: AtomicBool = AtomicBool::new(false);

/// Time beyond the kill grace for SIGKILLed processes to be reaped, and for the exit's sweep.
const REAP_SLACK: Duration = Duration::from_secs(1);

/// How often the watcher looks at children it must tick for (deadlines, groups to reap).
const REAP_POLL: Duration = Duration::from_millis(20);

/// How often the exit's sweep looks for descendants reparented by the deaths it caused.
const EXIT_SWEEP_POLL: Duration = Duration::from_millis(10);
