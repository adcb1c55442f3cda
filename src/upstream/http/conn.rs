//! One client connection to the upstream, the idle keep-alive pool of a transport, and what
//! bounds an exchange on a connection: its deadline and the transport's stop.
//!
//! Owns: the TCP connection (`Conn`: connected within `CONNECT_TIMEOUT`, a request written
//! whole, the response read in `READ_CHUNK` pieces into the connection's own buffer), `Until`,
//! `Stop`, and the pool (`Pool`: at most `POOL_IDLE_MAX` idle connections, none reused after
//! `POOL_REUSE_WITHIN` or once its upstream closed it).
//! Called by: the transport (`mod.rs`: opens, writes, pools) and the response reader
//! (`response.rs`: reads heads and bodies from it).
//! Never: parses what it reads, sends a request twice, or lets a stoppable read outlive the
//! transport's stop (the read in flight is cancelled).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncWriteRentExt, CancelableAsyncReadRent, Canceller};
use monoio::net::TcpStream;

use super::error::HttpError;
use crate::signal::{Notified, Signal};

/// Bytes asked for per read of a response.
pub(super) const READ_CHUNK: usize = 16 * 1024;
/// How long a TCP connect may take (also bounded by the request's own deadline).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle keep-alive connections kept per transport.
const POOL_IDLE_MAX: usize = 8;
/// An idle connection older than this is closed rather than reused: common servers close idle
/// connections after 5 s (uvicorn, Node), and a request on one they just closed would fail.
const POOL_REUSE_WITHIN: Duration = Duration::from_secs(2);

/// The transport's stop, as its tasks and the reads on its connections see it.
#[derive(Default)]
pub(super) struct Stop {
    /// Set once by `shutdown` or a session expiry; every task ends at its next check.
    stopped: Cell<bool>,
    /// Notified when `stopped` is set, to end waits and reads at once.
    signal: Signal,
}

impl Stop {
    /// Whether the transport stopped.
    pub(super) fn is_set(&self) -> bool {
        self.stopped.get()
    }

    /// Sets `stopped` and wakes every waiting task; false when it was set already.
    pub(super) fn set(&self) -> bool {
        if self.stopped.replace(true) {
            return false;
        }
        self.signal.notify_all();
        true
    }

    /// Completes at the next `set` after this call: take it before checking `is_set`.
    pub(super) fn notified(&self) -> Notified<'_> {
        self.signal.notified()
    }
}

/// The time bounds of one HTTP exchange.
#[derive(Clone, Copy)]
pub(super) struct Until {
    /// `None` for the standalone stream, which lasts as long as the session.
    pub(super) deadline: Option<Instant>,
    /// Whether `shutdown` ends the exchange (not for the `DELETE` that follows it).
    pub(super) stoppable: bool,
}

/// An idle keep-alive connection.
struct Idle {
    conn: Conn,
    since: Instant,
}

/// The idle keep-alive connections of one transport, newest last.
#[derive(Default)]
pub(super) struct Pool {
    /// At most `POOL_IDLE_MAX`.
    idle: RefCell<Vec<Idle>>,
}

impl Pool {
    /// An idle connection young enough to reuse.
    pub(super) fn take(&self) -> Option<Conn> {
        let mut pool = self.idle.borrow_mut();
        while let Some(idle) = pool.pop() {
            if idle.since.elapsed() < POOL_REUSE_WITHIN && idle.conn.is_quiet() {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Keeps `conn` for reuse while there is room (else it is closed here).
    pub(super) fn keep(&self, conn: Conn) {
        let mut pool = self.idle.borrow_mut();
        if pool.len() < POOL_IDLE_MAX {
            pool.push(Idle { conn, since: Instant::now() });
        }
    }

    /// Closes every idle connection.
    pub(super) fn clear(&self) {
        self.idle.borrow_mut().clear();
    }
}

/// A TCP connection to the upstream and what was read from it and not yet consumed.
pub(super) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// `buf[at..]` is read and not yet consumed.
    at: usize,
    /// Bytes read since the last request was written (0: the response has not begun).
    received: usize,
}

impl Conn {
    pub(super) async fn open(addr: SocketAddr, until: Until) -> Result<Conn, HttpError> {
        let mut wait = CONNECT_TIMEOUT;
        if let Some(deadline) = until.deadline {
            wait = wait.min(deadline.saturating_duration_since(Instant::now()));
        }
        let stream = match monoio::time::timeout(wait, TcpStream::connect_addr(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(HttpError::Io(e.kind())),
            Err(_) => return Err(HttpError::Timeout),
        };
        // Requests are written whole; Nagle would only delay a small POST behind an ACK.
        let _ = stream.set_nodelay(true);
        Ok(Conn { stream, buf: Vec::new(), at: 0, received: 0 })
    }

    /// Whether the idle connection is still open with nothing to read: its upstream has not
    /// closed it (end of stream) nor sent anything unasked. A connection the upstream closed
    /// while it sat in the pool (an idle timeout shorter than `POOL_REUSE_WITHIN`, a restart)
    /// would take the next request and answer it with end of stream, and a request the
    /// upstream may have read is never sent twice: so it is looked at before, with one
    /// non-blocking peek (no byte is consumed).
    fn is_quiet(&self) -> bool {
        use rustix::net::{recv, RecvFlags};
        if !self.pending().is_empty() {
            return false;
        }
        let mut byte = [0u8; 1];
        let peeked = crate::fd::with_borrowed_fd(&self.stream, |fd| {
            recv(fd, &mut byte[..], RecvFlags::PEEK | RecvFlags::DONTWAIT)
        });
        // Only "would block" means open and silent; end of stream (0), unasked bytes and
        // errors (a reset) all mean the connection is not reused.
        matches!(peeked, Err(e) if e == rustix::io::Errno::AGAIN)
    }

    pub(super) fn pending(&self) -> &[u8] {
        &self.buf[self.at..]
    }

    pub(super) fn consume(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.at, "invariant: only read bytes are consumed");
        self.at += n;
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
    }

    pub(super) async fn write(
        &mut self,
        bytes: Vec<u8>,
        stop: &Stop,
        until: Until,
    ) -> Result<(), HttpError> {
        self.received = 0;
        let write = self.stream.write_all(bytes);
        let result = match until.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match monoio::time::timeout(left, write).await {
                    Ok((result, _)) => result,
                    Err(_) => return Err(HttpError::Timeout),
                }
            }
            None => write.await.0,
        };
        if until.stoppable && stop.is_set() {
            return Err(HttpError::Stopped);
        }
        result.map(drop).map_err(|e| HttpError::Io(e.kind()))
    }

    /// Appends what arrives next; ends early at the deadline or, if stoppable, at `shutdown`.
    pub(super) async fn read_more(&mut self, stop: &Stop, until: Until) -> Result<(), HttpError> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.reserve(READ_CHUNK);
        }
        let notified = stop.notified();
        if until.stoppable && stop.is_set() {
            return Err(HttpError::Stopped);
        }
        let stop = async move {
            match until.stoppable {
                true => notified.await,
                false => std::future::pending().await,
            }
        };
        let timer = async move {
            match until.deadline {
                Some(d) => monoio::time::sleep(d.saturating_duration_since(Instant::now())).await,
                None => std::future::pending().await,
            }
        };
        let owned = std::mem::take(&mut self.buf);
        let len = owned.len();
        let canceller = Canceller::new();
        let read = self.stream.cancelable_read(owned.slice_mut(len..), canceller.handle());
        let mut read = std::pin::pin!(read);
        let (result, slice, ended) = monoio::select! {
            r = &mut read => (r.0, r.1, None),
            _ = timer => {
                let _canceled = canceller.cancel();
                let (r, s) = read.await;
                (r, s, Some(HttpError::Timeout))
            }
            _ = stop => {
                let _canceled = canceller.cancel();
                let (r, s) = read.await;
                (r, s, Some(HttpError::Stopped))
            }
        };
        self.buf = slice.into_inner();
        match (result, ended) {
            (Ok(n), _) if n > 0 => {
                self.received += n;
                Ok(())
            }
            (_, Some(e)) => Err(e),
            (Ok(_), None) => Err(HttpError::Closed),
            (Err(e), None) => Err(HttpError::Io(e.kind())),
        }
    }
}
