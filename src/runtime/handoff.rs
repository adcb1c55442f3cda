//! Per-core inbox for connections whose request belongs to another core (its task, session or
//! key: `endpoint::owner`; runtime-notes §5): the receiving core pushes the socket (as a std
//! `TcpStream`, with its TLS session on a TLS listener) plus the bytes it already read into
//! the owner's bounded queue and wakes the owner's drain task, which adopts the connection.
//! After that every event of the session is written locally, with no per-event hop.
//!
//! A request is handed at most once: `Moved::hops` travels with it, and the core that adopts it
//! refuses a second hand-off (`runtime::conn`).
//!
//! Never: blocks; a full inbox is reported to the sender, which answers 503.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use atomic_waker::AtomicWaker;
use crossbeam_queue::ArrayQueue;

/// The most hand-offs one request may take: to its owner, once.
pub(crate) const HOPS_MAX: u8 = 1;

/// A connection on its way to its request's owner core.
pub(crate) struct Moved {
    pub socket: std::net::TcpStream,
    /// The connection's TLS session (handshake done, nothing unsent), on a TLS listener: it
    /// goes with the socket, and the owner core goes on with it.
    pub tls: Option<Box<rustls::ServerConnection>>,
    /// Bytes read but not yet handled (the request that named the session, and any pipelined
    /// after it).
    pub pending: Vec<u8>,
    /// How many times the first pending request was handed between cores (1..=`HOPS_MAX`).
    pub hops: u8,
}

/// One core's inbox.
pub(crate) struct Inbox {
    queue: ArrayQueue<Moved>,
    waker: AtomicWaker,
}

impl Inbox {
    pub(crate) fn new(capacity: usize) -> Inbox {
        Inbox { queue: ArrayQueue::new(capacity), waker: AtomicWaker::new() }
    }

    /// From another core. `Err` gives the connection back when the inbox is full.
    pub(crate) fn send(&self, moved: Moved) -> Result<(), Moved> {
        self.queue.push(moved)?;
        self.waker.wake();
        Ok(())
    }

    /// On the owner core: the next moved connection.
    pub(crate) async fn recv(&self) -> Moved {
        poll_fn(|cx| {
            if let Some(m) = self.queue.pop() {
                return Poll::Ready(m);
            }
            self.waker.register(cx.waker());
            match self.queue.pop() {
                Some(m) => Poll::Ready(m),
                None => Poll::Pending,
            }
        })
        .await
    }
}

/// All cores' inboxes, indexed by core.
pub(crate) type Inboxes = Arc<Vec<Inbox>>;

/// Turns a monoio socket into a std one for the trip to another core: the fd is duplicated
/// (same open socket, same kernel buffers) and the monoio handle is dropped. Must be called
/// with no operation in flight on `socket` (the connection loop only hands off between
/// requests).
pub(crate) fn detach_socket(
    socket: monoio::net::TcpStream,
) -> std::io::Result<std::net::TcpStream> {
    let owned = crate::fd::with_borrowed_fd(&socket, |fd| fd.try_clone_to_owned())?;
    drop(socket);
    Ok(std::net::TcpStream::from(owned))
}
