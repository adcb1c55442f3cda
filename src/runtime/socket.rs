//! One connection's transport and buffers (`Conn`) and the I/O both the request loop (`conn`)
//! and the stream driver (`stream`) do on it: a read with a timeout that never loses its
//! buffer (`read_some`; `read_some_or_close` for the wait that closes when interrupted), a
//! whole write (`Conn::write`), giving back grown buffers, and the core's spare read buffers
//! (`lend_read_buffer`: a waiting stream holds none).
//!
//! The transport (`Transport`) is the socket, plain or TLS: with `--tls-cert` the connection's
//! `rustls::ServerConnection` is driven here by hand over owned buffers (ciphertext read into
//! the transport's own buffer → `read_tls`/`process_new_packets` → plaintext appended to the
//! request buffer; plaintext → `writer()` → `write_tls` into an owned buffer → socket), so
//! everything above this file reads and writes plaintext exactly as on a plain socket.
//! Never: parses a request or knows what it writes.

use std::cell::RefCell;
use std::future::Future;
use std::io::{Read as _, Write as _};
use std::pin::Pin;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{
    AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, CancelableAsyncReadRent, Canceller,
};
use monoio::net::TcpStream;
use monoio::time::Sleep;
use rustls::ServerConnection;

use crate::endpoint::Endpoint;
use crate::runtime::drain::Drain;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

/// A connection's first write buffer (`Conn::out`): an answer's head and a small body, or a
/// stream's head and its first events. Larger answers grow it (kept up to `BUFFER_KEEP_BYTES`
/// between requests), once per connection. Not more: a live stream holds it for its whole
/// life, and 10 000 of them held 4 KiB each (issue 43 §2).
pub(super) const OUT_INITIAL_BYTES: usize = 1024;
/// A connection's first buffer of SSE frames (`Conn::frames`): one batch of events before it
/// becomes a chunk; a progress notification is ~150 B. Grows as `OUT_INITIAL_BYTES` does.
pub(super) const FRAMES_INITIAL_BYTES: usize = 512;

/// Empty read buffers one core keeps for its connections (`lend_read_buffer`). A stream that
/// waits for its next event gives its connection's read buffer here, so 10 000 live streams do
/// not hold 16 KiB each (issue 43 §2); a connection that reads again takes one back before it
/// allocates, so one that alternates requests and streams allocates nothing (issue 40 §1).
/// Back from its stream, a kept-alive connection takes one only when its next request's
/// first bytes arrive (`read_some_or_close`), so ended streams whose connections stay open
/// hold none either.
/// More than this many are freed: they would only be needed when as many waiting streams end
/// at once, and then one allocation each is the old cost.
pub(super) const SPARE_READ_BUFFERS_MAX: usize = 16;

thread_local! {
    /// This core's spare read buffers, each empty with `READ_CHUNK` or more of capacity.
    static SPARE_READ_BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Gives `buf` to the core's spares when it is empty (nothing pipelined waits in it), leaving
/// `buf` without capacity; a full spare list frees it instead.
pub(super) fn lend_read_buffer(buf: &mut Vec<u8>) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let lent = std::mem::take(buf);
    SPARE_READ_BUFFERS.with_borrow_mut(|spares| {
        if spares.len() < SPARE_READ_BUFFERS_MAX {
            spares.push(lent);
        }
    });
}

/// A buffer without capacity takes one of the core's spares, if there is one.
fn take_spare(buf: &mut Vec<u8>) {
    if buf.capacity() == 0 {
        if let Some(spare) = SPARE_READ_BUFFERS.with_borrow_mut(Vec::pop) {
            *buf = spare;
        }
    }
}

/// Room for a read in `buf` (a spare first when it has none).
fn room_to_read(buf: &mut Vec<u8>) {
    take_spare(buf);
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
}

/// Plaintext given to rustls per encrypted write: rustls's own default limit of buffered
/// plaintext, so `writer()` takes all of it, and the ciphertext buffer stays this size (plus
/// record overhead) however large the answer.
const TLS_WRITE_SLICE: usize = 64 * 1024;

/// A connection's socket, with its TLS session when the listener has TLS.
pub(crate) struct Transport {
    tcp: TcpStream,
    tls: Option<Box<Tls>>,
    /// Cancels the socket read a timeout or a stop interrupts, so the read gives its buffer
    /// back. One for the connection's life, not one per read: a new one costs an `Rc` and its
    /// op set's table, two heap allocations per read (issue 40 §1); the set keeps its room.
    canceller: Canceller,
}

/// One TLS connection's state: the session and its ciphertext buffers.
struct Tls {
    session: ServerConnection,
    /// Ciphertext read from the socket and not yet taken by rustls.
    incoming: Vec<u8>,
    /// Ciphertext rustls produced, on its way to the socket.
    outgoing: Vec<u8>,
}

impl Transport {
    /// A plain socket.
    pub(crate) fn plain(tcp: TcpStream) -> Transport {
        Transport { tcp, tls: None, canceller: Canceller::new() }
    }

    /// A TLS socket whose session is `session` (new, or moved from another core mid-life).
    pub(crate) fn tls(tcp: TcpStream, session: ServerConnection) -> Transport {
        let tls = Tls { session, incoming: Vec::new(), outgoing: Vec::new() };
        Transport { tcp, tls: Some(Box::new(tls)), canceller: Canceller::new() }
    }

    /// The socket beneath (its peer address, readiness).
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The socket and the TLS session, for the trip to another core (`handoff`); nothing is
    /// in flight and no ciphertext is unsent between requests.
    pub(crate) fn into_parts(self) -> (TcpStream, Option<Box<ServerConnection>>) {
        (self.tcp, self.tls.map(|tls| Box::new(tls.session)))
    }

    /// Whether the TLS handshake is still to finish (false on a plain socket).
    pub(super) fn handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(|tls| tls.session.is_handshaking())
    }

    /// Ends what this side sends: a TLS `close_notify` first, then the TCP FIN.
    pub(super) async fn shutdown(&mut self) {
        if let Some(tls) = &mut self.tls {
            tls.session.send_close_notify();
            let _ = flush(&mut self.tcp, tls).await;
        }
        let _ = self.tcp.shutdown().await;
    }

    /// On TLS, tells the peer this side is done (`close_notify`) before the socket closes, so a
    /// client sees a clean end rather than a truncation; the write is bounded by `timeout` (a
    /// peer that does not read cannot hold the connection). Nothing on a plain socket.
    pub(super) async fn close_notify(&mut self, timeout: Duration) {
        let Some(tls) = &mut self.tls else { return };
        if tls.session.is_handshaking() {
            return;
        }
        tls.session.send_close_notify();
        let _ = monoio::time::timeout(timeout, flush(&mut self.tcp, tls)).await;
    }

    /// Gives back what a large answer grew the ciphertext buffers to.
    pub(super) fn shrink_buffers(&mut self) {
        if let Some(tls) = &mut self.tls {
            shrink(&mut tls.incoming, BUFFER_KEEP_BYTES);
            shrink(&mut tls.outgoing, BUFFER_KEEP_BYTES);
        }
    }
}

/// How a read ended.
pub(super) enum ReadEnd {
    /// Bytes were appended.
    Data,
    /// The peer closed or the socket failed.
    Closed,
    /// No byte within the timeout.
    TimedOut,
    /// No byte before the `stop` future of `read_some_or` completed.
    Stopped,
}

/// Appends whatever arrives within `timeout` to `buf` (plaintext: on TLS, what the records
/// read decrypt to).
pub(super) async fn read_some(
    socket: &mut Transport,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> ReadEnd {
    read_some_or(socket, buf, timeout, std::future::pending()).await
}

/// `read_some`, also ended (`Stopped`) when `stop` completes first.
pub(super) async fn read_some_or(
    socket: &mut Transport,
    buf: &mut Vec<u8>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> ReadEnd {
    match &mut socket.tls {
        None => read_socket(&mut socket.tcp, &mut socket.canceller, buf, timeout, stop).await,
        Some(tls) => {
            match read_tls(&mut socket.tcp, &mut socket.canceller, tls, buf, timeout, stop).await {
                TlsRead::Plaintext => ReadEnd::Data,
                // Only `handshake` waits for this; to `read_some` it is a read that goes on.
                TlsRead::Handshaken => ReadEnd::Data,
                TlsRead::End(end) => end,
            }
        }
    }
}

/// `read_some_or` for a read whose interruption ends the connection: a kept-alive
/// connection's wait for its next request, which a timeout (idle) or a stop (a drain) closes.
/// On a plain socket the read is not a cancellable one: an interrupted read is dropped
/// (monoio cancels the operation in the ring) and its buffer with it, so `buf` is left
/// without capacity, and bytes the kernel had just given that read are lost with it, which
/// only a connection about to close can afford. A cancellable read costs its connection's
/// `Canceller` a SipHash `HashSet` insert and remove per read, ~730 instructions of every
/// request (callgrind), for a buffer the closing connection no longer needs. The timeout is
/// `timer`, the connection's, reset to `timeout` from now: pushing a registered timer later
/// only moves its deadline (monoio re-files it when the old one comes), where a new timer per
/// wait was registered and removed each time (~300 instructions). On TLS, as `read_some_or`.
pub(super) async fn read_some_or_close(
    socket: &mut Transport,
    buf: &mut Vec<u8>,
    mut timer: Pin<&mut Sleep>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> ReadEnd {
    if socket.tls.is_some() {
        return read_some_or(socket, buf, timeout, stop).await;
    }
    let mut stop = std::pin::pin!(stop);
    timer.as_mut().reset(monoio::time::Instant::now() + timeout);
    if buf.capacity() == 0 {
        // Back from a stream that lent its read buffer (`lend_read_buffer`): wait for the
        // next request's first bytes before taking one. A session's streams end while its
        // connection stays open, and 10 000 connections each holding 16 KiB while they wait
        // were the RSS peak of `scripts/streams.sh` (issue 43 §2). A connection that never
        // streamed keeps its buffer and never comes here.
        monoio::select! {
            r = socket.tcp.readable(false) => if r.is_err() { return ReadEnd::Closed },
            _ = timer.as_mut() => return ReadEnd::TimedOut,
            _ = stop.as_mut() => return ReadEnd::Stopped,
        }
    }
    room_to_read(buf);
    let owned = std::mem::take(buf);
    let len = owned.len();
    let (res, slice) = monoio::select! {
        r = socket.tcp.read(owned.slice_mut(len..)) => r,
        _ = timer => return ReadEnd::TimedOut,
        _ = stop => return ReadEnd::Stopped,
    };
    *buf = slice.into_inner();
    match res {
        Ok(n) if n > 0 => ReadEnd::Data,
        _ => ReadEnd::Closed,
    }
}

/// Drives the TLS handshake to its end within `timeout` (plaintext a client sends with its
/// last flight is appended to `buf`); true at once on a plain socket. False: the peer closed,
/// failed the handshake (the alert was sent), or was too slow.
pub(super) async fn handshake(
    socket: &mut Transport,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> bool {
    let Some(tls) = &mut socket.tls else { return true };
    let deadline = Instant::now() + timeout;
    while tls.session.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        let pending = std::future::pending();
        let read = read_tls(&mut socket.tcp, &mut socket.canceller, tls, buf, left, pending).await;
        if let TlsRead::End(_) = read {
            return false;
        }
    }
    true
}

/// How a TLS read ended.
enum TlsRead {
    /// Plaintext was appended.
    Plaintext,
    /// The handshake finished (no plaintext yet).
    Handshaken,
    /// As a plain read ends; `Closed` also for a TLS failure or the peer's `close_notify`.
    End(ReadEnd),
}

/// Reads records until one decrypts to plaintext (appended to `plain`), the handshake
/// finishes, or the socket ends, within `timeout` (one deadline across the records: a peer
/// dripping a record byte by byte gets no more time than one sending it whole). What rustls
/// answers (handshake flights, alerts) is written before it returns.
async fn read_tls(
    tcp: &mut TcpStream,
    canceller: &mut Canceller,
    tls: &mut Tls,
    plain: &mut Vec<u8>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> TlsRead {
    let deadline = Instant::now() + timeout;
    let mut stop = std::pin::pin!(stop);
    let was_handshaking = tls.session.is_handshaking();
    loop {
        tls.incoming.clear();
        let left = deadline.saturating_duration_since(Instant::now());
        match read_socket(tcp, canceller, &mut tls.incoming, left, stop.as_mut()).await {
            ReadEnd::Data => {}
            end => return TlsRead::End(end),
        }
        let before = plain.len();
        let absorbed = absorb(tls, plain);
        // Handshake flights, session tickets, alerts (also the one for a failure).
        if !flush(tcp, tls).await {
            return TlsRead::End(ReadEnd::Closed);
        }
        let peer_closed = match absorbed {
            Ok(peer_closed) => peer_closed,
            Err(_) => return TlsRead::End(ReadEnd::Closed),
        };
        if plain.len() > before {
            return TlsRead::Plaintext;
        }
        if peer_closed {
            return TlsRead::End(ReadEnd::Closed);
        }
        if was_handshaking && !tls.session.is_handshaking() {
            return TlsRead::Handshaken;
        }
        // Part of a record, or a record with no plaintext: read on.
    }
}

/// Gives rustls all of `tls.incoming` and appends the plaintext it yields to `plain`;
/// `Ok(true)` when the peer sent `close_notify`. `Err`: the peer broke the protocol (rustls
/// queued the alert).
fn absorb(tls: &mut Tls, plain: &mut Vec<u8>) -> Result<bool, rustls::Error> {
    let mut rest = &tls.incoming[..];
    let mut peer_closed = false;
    while !rest.is_empty() {
        // Takes at most what its record buffer has room for; processing empties that. Taking
        // nothing of a non-empty slice would repeat forever: a failure too.
        match tls.session.read_tls(&mut rest) {
            Ok(n) if n > 0 => {}
            _ => return Err(rustls::Error::General("TLS record buffer full".into())),
        }
        let state = tls.session.process_new_packets()?;
        let ready = state.plaintext_bytes_to_read();
        if ready > 0 {
            take_spare(plain);
            let start = plain.len();
            plain.resize(start + ready, 0);
            if tls.session.reader().read_exact(&mut plain[start..]).is_err() {
                plain.truncate(start);
                return Err(rustls::Error::General("TLS plaintext lost".into()));
            }
        }
        peer_closed |= state.peer_has_closed();
    }
    Ok(peer_closed)
}

/// Writes out whatever ciphertext rustls has ready; false when the socket failed.
async fn flush(tcp: &mut TcpStream, tls: &mut Tls) -> bool {
    while tls.session.wants_write() {
        // Into a Vec: cannot fail.
        let _ = tls.session.write_tls(&mut tls.outgoing);
    }
    if tls.outgoing.is_empty() {
        return true;
    }
    let (ok, outgoing) = write_socket(tcp, std::mem::take(&mut tls.outgoing)).await;
    tls.outgoing = outgoing;
    ok
}

/// Appends whatever arrives on the socket within `timeout` to `buf`, also ended (`Stopped`)
/// when `stop` completes first; `canceller` is the connection's (a cancelled one is replaced).
async fn read_socket(
    socket: &mut TcpStream,
    canceller: &mut Canceller,
    buf: &mut Vec<u8>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> ReadEnd {
    room_to_read(buf);
    let owned = std::mem::take(buf);
    let len = owned.len();
    let read = socket.cancelable_read(owned.slice_mut(len..), canceller.handle());
    let mut read = std::pin::pin!(read);
    let (res, slice) = monoio::select! {
        r = &mut read => r,
        _ = monoio::time::sleep(timeout) => {
            cancel(canceller);
            let (res, slice) = read.await;
            *buf = slice.into_inner();
            return match res {
                Ok(n) if n > 0 => ReadEnd::Data,
                _ => ReadEnd::TimedOut,
            };
        }
        _ = stop => {
            cancel(canceller);
            let (res, slice) = read.await;
            *buf = slice.into_inner();
            return match res {
                Ok(n) if n > 0 => ReadEnd::Data,
                _ => ReadEnd::Stopped,
            };
        }
    };
    *buf = slice.into_inner();
    match res {
        Ok(n) if n > 0 => ReadEnd::Data,
        _ => ReadEnd::Closed,
    }
}

/// Cancels the read `canceller` is associated with; a cancelled canceller stays cancelled, so
/// it is replaced by the fresh one `cancel` returns (only on a timeout or a stop).
fn cancel(canceller: &mut Canceller) {
    let cancelled = std::mem::take(canceller);
    *canceller = cancelled.cancel();
}

/// One connection's socket and buffers, and the core it is served on; what `serve` and the
/// stream driver share.
pub(super) struct Conn<'c> {
    pub(super) core: &'c Endpoint,
    pub(super) drain: &'c Drain,
    pub(super) socket: Transport,
    /// Bytes read and not yet handled (a pipelined request stays here across a stream).
    pub(super) buf: Vec<u8>,
    /// What the next write sends: a reply, or a stream's head and chunks.
    pub(super) out: Vec<u8>,
    /// SSE frames of one batch before they become a chunk; reused by every stream.
    pub(super) frames: Vec<u8>,
    /// The last bearer token this connection presented that validated (`auth`); a connection
    /// handed to another core starts with an empty one there.
    pub(super) auth_cache: crate::auth::ConnCache,
}

impl Conn<'_> {
    /// Writes all of `out` (cleared on success); false when the socket failed.
    pub(super) async fn write(&mut self) -> bool {
        let (ok, out) = write_out(&mut self.socket, std::mem::take(&mut self.out)).await;
        self.out = out;
        ok
    }

    /// Gives back what a large request or stream grew the write buffers to.
    pub(super) fn shrink_buffers(&mut self) {
        shrink(&mut self.frames, BUFFER_KEEP_BYTES);
        shrink(&mut self.out, BUFFER_KEEP_BYTES);
        self.socket.shrink_buffers();
    }
}

/// Writes all of `out` (plaintext: on TLS, encrypted first) and gives the buffer back
/// (cleared on success).
pub(super) async fn write_out(socket: &mut Transport, mut out: Vec<u8>) -> (bool, Vec<u8>) {
    let Some(tls) = &mut socket.tls else { return write_socket(&mut socket.tcp, out).await };
    let mut ok = true;
    for slice in out.chunks(TLS_WRITE_SLICE) {
        // rustls buffers up to `TLS_WRITE_SLICE` of plaintext, and `flush` empties it.
        ok = tls.session.writer().write_all(slice).is_ok() && flush(&mut socket.tcp, tls).await;
        if !ok {
            break;
        }
    }
    out.clear();
    (ok, out)
}

/// Writes all of `out` to the socket and gives the buffer back (cleared).
async fn write_socket(socket: &mut TcpStream, out: Vec<u8>) -> (bool, Vec<u8>) {
    let (res, mut out) = socket.write_all(out).await;
    out.clear();
    (res.is_ok(), out)
}

/// `out` (plaintext) as the TLS records `session` sends it, for a blocking write on a socket
/// that left the runtime (a hand-off refused at a full inbox).
pub(crate) fn seal(session: &mut ServerConnection, out: &[u8]) -> Vec<u8> {
    let mut sealed = Vec::new();
    for slice in out.chunks(TLS_WRITE_SLICE) {
        let _ = session.writer().write_all(slice);
        while session.wants_write() {
            let _ = session.write_tls(&mut sealed);
        }
    }
    sealed
}

/// Capacity a connection's buffers keep between requests. A large request or stream grows
/// them (up to `--max-body-bytes` or `--write-buffer-bytes`); an idle connection gives that
/// back, so many connections that once carried large messages do not pin it (issue 11 §2).
pub(super) const BUFFER_KEEP_BYTES: usize = 64 * 1024;

/// Shrinks `buf` to `keep` bytes of capacity (or its length) when it holds more.
pub(super) fn shrink(buf: &mut Vec<u8>, keep: usize) {
    if buf.capacity() > keep {
        buf.shrink_to(keep.max(buf.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_keeps_at_most_its_spare_read_buffers_and_hands_them_back() {
        // Goal: a waiting stream's empty read buffer goes to the core's spares, up to
        // SPARE_READ_BUFFERS_MAX (more are freed); one holding pipelined bytes is kept; a
        // connection that reads again takes a spare before it allocates.
        let spares = || SPARE_READ_BUFFERS.with_borrow(Vec::len);
        let mut pipelined = b"POST".to_vec();
        lend_read_buffer(&mut pipelined);
        assert_eq!((pipelined.len(), spares()), (4, 0));
        for _ in 0..=SPARE_READ_BUFFERS_MAX {
            let mut buf = Vec::with_capacity(READ_CHUNK);
            lend_read_buffer(&mut buf);
            assert_eq!(buf.capacity(), 0);
        }
        assert_eq!(spares(), SPARE_READ_BUFFERS_MAX);
        let mut buf = Vec::new();
        room_to_read(&mut buf);
        assert!(buf.capacity() >= READ_CHUNK);
        assert_eq!(spares(), SPARE_READ_BUFFERS_MAX - 1);
    }
}
