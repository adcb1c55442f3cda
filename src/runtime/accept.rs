//! One core's accept loop: taking connections from its listener until the drain begins, then
//! the connections already in the kernel's accept queue, and what a failed accept does.
//!
//! Owns: the admission of an accepted socket (`--max-connections-per-core`, then `conn::serve`),
//! the sweep of the accept queue at the drain (`answer_backlog`), and running out of file
//! descriptors: an accept that fails with EMFILE/ENFILE never spins. The core keeps one reserve
//! descriptor (`/dev/null`); on exhaustion it gives it up, takes one connection with it, answers
//! `503` + `Retry-After` + `Connection: close`, closes it and opens the reserve again (the
//! practice of nginx and libuv's users), so a client learns to come back instead of waiting in
//! the queue. Without the reserve (its connection is still being answered) the loop backs off
//! `EXHAUSTED_BACKOFF`. Each exhaustion is counted; the log says so at most once a second.
//! On a TLS listener an accepted socket starts its TLS session here with the configuration
//! current on its core at the accept (`tls::CoreCerts`); a connection refused at admission is closed without
//! an answer there (a 503 would first cost the full handshake the refusal is meant to save).
//!
//! A core has a loop per listener (`Listening`): its TCP listener (SO_REUSEPORT, its own) and
//! its duplicate of the `--listen unix:PATH` socket (one listening socket, every core's accept
//! pending on it: the kernel hands each connection to one of them). A Unix connection is
//! served as a `TcpStream` holding the Unix socket's descriptor: every operation the runtime
//! does on a connection (recv, send, shutdown, poll, the hand-off of the descriptor) is the
//! same system call on AF_UNIX, so the request path has one socket type and no branch for the
//! other. What is TCP's alone is not asked of it (`set_nodelay` fails harmlessly; the peer
//! address is read by `core::Request::peer`, never through monoio's `peer_addr`, which
//! panics on a non-IP address).
//! Called by: `runtime` (`serve`), once per core. Never: reads a request (`conn` does), or
//! leaves a queued connection to the reset a closing listener gives it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::io::{CancelHandle, Canceller};
use monoio::net::TcpStream;

use crate::config::LISTEN_BACKLOG;
use crate::endpoint::Endpoint;
use crate::runtime::conn::{self, linger_close};
use crate::runtime::drain::{Drain, Lifecycle, Phase};
use crate::runtime::handoff::Inboxes;
use crate::runtime::socket::{write_out, Transport};
use crate::tls::{Certs, CoreCerts};
use crate::wire::{Answer, Refusal};

/// How long the accept loop waits after an EMFILE/ENFILE it could not answer (the reserve
/// descriptor is in use), or another failure that would repeat at once: long enough not to spin on a listener that stays readable, short
/// enough that a freed descriptor is used within a blink.
const EXHAUSTED_BACKOFF: Duration = Duration::from_millis(50);
/// Least time between two logs of descriptor exhaustion on one core (`error` level: resource
/// exhaustion; the counter has every one).
const EXHAUSTED_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// One listener of a core, with what its accept loop keeps.
pub(super) struct Listening {
    listener: Listener,
    acceptor: Acceptor,
}

/// A listener in the core's runtime.
enum Listener {
    Tcp(monoio::net::TcpListener),
    Unix(monoio::net::UnixListener),
}

/// A listener's socket once more, outside the runtime (see `Acceptor::queue`).
enum Queue {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Listening {
    /// The core's listeners in its runtime: TCP (with `tls`, when set) and the Unix socket
    /// (plain: TLS is the TCP listener's; a socket file's protection is its permissions).
    pub(super) fn join(
        tcp: Option<std::net::TcpListener>,
        unix: Option<std::os::unix::net::UnixListener>,
        tls: Option<Arc<Certs>>,
        index: usize,
    ) -> std::io::Result<Vec<Listening>> {
        let mut all = Vec::new();
        if let Some(l) = tcp {
            let acceptor = Acceptor::new(l.try_clone().ok().map(Queue::Tcp), tls, index);
            let listener = Listener::Tcp(monoio::net::TcpListener::from_std(l)?);
            all.push(Listening { listener, acceptor });
        }
        if let Some(l) = unix {
            let acceptor = Acceptor::new(l.try_clone().ok().map(Queue::Unix), None, index);
            let listener = Listener::Unix(monoio::net::UnixListener::from_std(l)?);
            all.push(Listening { listener, acceptor });
        }
        Ok(all)
    }
}

impl Listener {
    /// The next connection, as the runtime's `TcpStream` (see the module's doc).
    async fn accept(&self, cancel: CancelHandle) -> std::io::Result<TcpStream> {
        match self {
            Listener::Tcp(l) => l.cancelable_accept(cancel).await.map(|(socket, _)| socket),
            Listener::Unix(l) => {
                let (socket, _) = l.cancelable_accept(cancel).await?;
                // The same open socket under a second descriptor; the first closes with
                // `socket`. One `dup` per accepted connection, none per request.
                let owned = crate::fd::with_borrowed_fd(&socket, |fd| fd.try_clone_to_owned())?;
                drop(socket);
                into_runtime(std::net::TcpStream::from(owned))
                    .ok_or_else(|| std::io::ErrorKind::InvalidInput.into())
            }
        }
    }
}

impl Queue {
    /// A connection already queued, without waiting (`WouldBlock` when none is).
    fn accept(&self) -> std::io::Result<std::net::TcpStream> {
        match self {
            Queue::Tcp(q) => q.accept().map(|(socket, _)| socket),
            Queue::Unix(q) => {
                q.accept().map(|(socket, _)| std::os::fd::OwnedFd::from(socket).into())
            }
        }
    }
}

/// What the accept loop of one core keeps besides its listener.
pub(super) struct Acceptor {
    /// The listener's socket once more (a duplicate descriptor), for accepts that must not
    /// wait: the drain's sweep and the one connection taken with the reserve. Non-blocking.
    queue: Option<Queue>,
    /// `Some` while the reserve descriptor is held; given up to answer one connection when
    /// descriptors run out, taken again once that connection is closed.
    reserve: Rc<RefCell<Option<std::fs::File>>>,
    /// When exhaustion was last logged, and how many went unlogged since.
    logged: Cell<Option<Instant>>,
    unlogged: Cell<u64>,
    /// The listener's TLS, when it has it.
    tls: Option<CoreCerts>,
}

impl Acceptor {
    /// `queue`: a duplicate of the core's listener (see the field); `tls`: the listener's TLS.
    /// `index`: the core's.
    fn new(queue: Option<Queue>, tls: Option<Arc<Certs>>, index: usize) -> Acceptor {
        let queue = queue.filter(|q| match q {
            Queue::Tcp(q) => q.set_nonblocking(true).is_ok(),
            Queue::Unix(q) => q.set_nonblocking(true).is_ok(),
        });
        if queue.is_none() {
            tracing::warn!("accept queue not duplicated: the drain resets queued connections");
        }
        Acceptor {
            queue,
            reserve: Rc::new(RefCell::new(open_reserve())),
            logged: Cell::new(None),
            unlogged: Cell::new(0),
            tls: tls.map(|certs| certs.for_core(index)),
        }
    }
}

/// The reserve descriptor; `None` when even that cannot be opened now.
fn open_reserve() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Accepts connections until the drain begins (a connection accepted in that same instant is
/// served too).
pub(super) async fn accept_until_drain(
    core: &Rc<Endpoint>,
    drain: &Rc<Drain>,
    inboxes: &Inboxes,
    listening: &Listening,
    life: &Lifecycle,
) {
    let Listening { listener, acceptor } = listening;
    let index = usize::from(core.index);
    loop {
        let canceller = Canceller::new();
        let accepting = listener.accept(canceller.handle());
        let mut accepting = std::pin::pin!(accepting);
        let (accepted, draining) = monoio::select! {
            r = &mut accepting => (r, false),
            _ = life.reached(index, Phase::Draining) => {
                let _canceled = canceller.cancel();
                (accepting.await, true)
            }
        };
        match accepted {
            Ok(socket) => admit(core, drain, inboxes, acceptor, socket),
            Err(e) if out_of_descriptors(&e) => exhausted(core, acceptor).await,
            // Cancelled by the drain, interrupted, or aborted by the peer: nothing to answer.
            Err(_) if draining => {}
            Err(e) if passing(&e) => {}
            // Another failure (ENOBUFS, ENOMEM: the kernel short of memory) would come back at
            // once: wait rather than spin.
            Err(e) => {
                crate::logging::limited!(
                    crate::logging::Kind::Accept,
                    tracing::Level::WARN,
                    core = index,
                    error = %e,
                    culprit = "os",
                    "accept failed"
                );
                monoio::time::sleep(EXHAUSTED_BACKOFF).await;
            }
        }
        if draining {
            return;
        }
    }
}

/// At the drain's start, before the listener closes: takes every connection already in the
/// accept queue (at most `LISTEN_BACKLOG`, so a flood arriving meanwhile cannot prolong the
/// sweep) and serves it as the drain serves any connection (its first request is read and
/// answered with `Connection: close`; one that sends nothing before the drain ends gets 503).
/// Closing a listener resets what its queue
/// holds; a connection whose handshake completes between the last accept here and the close
/// still is (Linux's `net.ipv4.tcp_migrate_req` moves it to another core's open listener).
pub(super) fn answer_backlog(
    core: &Rc<Endpoint>,
    drain: &Rc<Drain>,
    inboxes: &Inboxes,
    listening: &Listening,
) {
    let acceptor = &listening.acceptor;
    let Some(queue) = &acceptor.queue else { return };
    for _ in 0..LISTEN_BACKLOG {
        let socket = match queue.accept() {
            Ok(socket) => socket,
            Err(e) if passing(&e) => continue,
            Err(e) if out_of_descriptors(&e) => match accept_with_reserve(core, acceptor) {
                Some(()) => continue,
                None => return,
            },
            // Empty (WouldBlock), or a failure the next accept would repeat.
            Err(_) => return,
        };
        core.metrics.drain_backlog_accepted_total.inc();
        if let Some(socket) = into_runtime(socket) {
            admit(core, drain, inboxes, acceptor, socket);
        }
    }
}

/// An accepted std socket as the runtime's; `None` (closed) when the runtime refuses it.
fn into_runtime(socket: std::net::TcpStream) -> Option<TcpStream> {
    socket.set_nonblocking(true).ok()?;
    TcpStream::from_std(socket).ok()
}

/// Serves an accepted socket (its TLS session started on a TLS listener), or answers 503 when
/// the core has its `--max-connections-per-core`.
fn admit(
    core: &Rc<Endpoint>,
    drain: &Rc<Drain>,
    inboxes: &Inboxes,
    acceptor: &Acceptor,
    socket: TcpStream,
) {
    let _ = socket.set_nodelay(true);
    if core.metrics.connections_active.get() as usize >= core.cfg.http.connections_per_core_max {
        core.metrics.limit_connections.inc();
        if acceptor.tls.is_none() {
            monoio::spawn(refuse(socket, Refusal::Unavailable));
        }
        return;
    }
    let socket = match &acceptor.tls {
        None => Transport::plain(socket),
        Some(certs) => match rustls::ServerConnection::new(certs.current()) {
            Ok(session) => Transport::tls(socket, session),
            Err(e) => {
                tracing::warn!(error = %e, "TLS session not started");
                return;
            }
        },
    };
    let admitted = drain.admit();
    monoio::spawn(conn::serve(core.clone(), admitted, inboxes.clone(), socket, Vec::new(), 0));
}

/// The accept failed for want of a descriptor: answer one queued connection with the reserve,
/// or back off when the reserve is in use.
async fn exhausted(core: &Endpoint, acceptor: &Acceptor) {
    if accept_with_reserve(core, acceptor).is_none() {
        monoio::time::sleep(EXHAUSTED_BACKOFF).await;
    }
}

/// Counts (and, rate-limited, logs) an exhaustion, then gives up the reserve descriptor to
/// take one queued connection and answer it 503 (`Refusal::OutOfDescriptors`); the reserve is
/// opened again once that connection is closed. `None` when there was no reserve to give up
/// or no connection came with it.
fn accept_with_reserve(core: &Endpoint, acceptor: &Acceptor) -> Option<()> {
    core.metrics.accept_descriptors_exhausted_total.inc();
    log_exhausted(core, acceptor);
    let queue = acceptor.queue.as_ref()?;
    let reserve = acceptor.reserve.borrow_mut().take()?;
    drop(reserve);
    let accepted = queue.accept().ok().and_then(into_runtime);
    let Some(socket) = accepted else {
        *acceptor.reserve.borrow_mut() = open_reserve();
        return None;
    };
    let reserve = acceptor.reserve.clone();
    if acceptor.tls.is_some() {
        // No plaintext answer on a TLS listener (see the module's doc): closed.
        drop(socket);
        *reserve.borrow_mut() = open_reserve();
        return Some(());
    }
    monoio::spawn(async move {
        refuse(socket, Refusal::OutOfDescriptors).await;
        *reserve.borrow_mut() = open_reserve();
    });
    Some(())
}

/// Logs descriptor exhaustion at most once per `EXHAUSTED_LOG_INTERVAL`, with how many went
/// unlogged since.
fn log_exhausted(core: &Endpoint, acceptor: &Acceptor) {
    let now = Instant::now();
    let due = acceptor.logged.get().is_none_or(|at| now >= at + EXHAUSTED_LOG_INTERVAL);
    if !due {
        acceptor.unlogged.set(acceptor.unlogged.get() + 1);
        return;
    }
    acceptor.logged.set(Some(now));
    let unlogged = acceptor.unlogged.replace(0);
    let core = core.index;
    tracing::error!(
        core,
        unlogged,
        culprit = "os",
        "out of file descriptors: new connections answered 503"
    );
}

/// A failed accept that says nothing about the next one: interrupted, or a connection the peer
/// aborted while it waited in the queue.
fn passing(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::Interrupted | ErrorKind::ConnectionAborted | ErrorKind::WouldBlock
    )
}

/// EMFILE (the process's limit) or ENFILE (the system's).
fn out_of_descriptors(e: &std::io::Error) -> bool {
    let errno = rustix::io::Errno::from_io_error(e);
    matches!(errno, Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE))
}

/// Writes `refusal` (with `Connection: close`) and closes without a reset for the request
/// bytes it did not read.
async fn refuse(socket: TcpStream, refusal: Refusal) {
    let mut out = Vec::new();
    Answer::Refused { refusal, id: None }.render(&mut out, false);
    let mut socket = Transport::plain(socket);
    let (written, _) = write_out(&mut socket, out).await;
    if written {
        linger_close(&mut socket, &mut Vec::new(), usize::MAX).await;
    }
}
