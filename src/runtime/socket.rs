//! One connection's socket and buffers (`Conn`) and the I/O both the request loop (`conn`)
//! and the stream driver (`stream`) do on it: a read with a timeout that never loses its
//! buffer (`read_some`), a whole write (`Conn::write`), and giving back grown buffers.
//! Never: parses a request or knows what it writes.

use std::future::Future;
use std::time::Duration;

use monoio::buf::IoBufMut;
use monoio::io::{AsyncWriteRentExt, CancelableAsyncReadRent, Canceller};
use monoio::net::TcpStream;

use crate::endpoint::Endpoint;
use crate::runtime::drain::Drain;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

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

/// Appends whatever arrives within `timeout` to `buf`.
pub(super) async fn read_some(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> ReadEnd {
    read_some_or(socket, buf, timeout, std::future::pending()).await
}

/// `read_some`, also ended (`Stopped`) when `stop` completes first.
pub(super) async fn read_some_or(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> ReadEnd {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    let owned = std::mem::take(buf);
    let len = owned.len();
    let canceller = Canceller::new();
    let read = socket.cancelable_read(owned.slice_mut(len..), canceller.handle());
    let mut read = std::pin::pin!(read);
    let (res, slice) = monoio::select! {
        r = &mut read => r,
        _ = monoio::time::sleep(timeout) => {
            let _canceled = canceller.cancel();
            let (res, slice) = read.await;
            *buf = slice.into_inner();
            return match res {
                Ok(n) if n > 0 => ReadEnd::Data,
                _ => ReadEnd::TimedOut,
            };
        }
        _ = stop => {
            let _canceled = canceller.cancel();
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

/// One connection's socket and buffers, and the core it is served on; what `serve` and the
/// stream driver share.
pub(super) struct Conn<'c> {
    pub(super) core: &'c Endpoint,
    pub(super) drain: &'c Drain,
    pub(super) socket: TcpStream,
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
    }
}

/// Writes all of `out` and gives the buffer back (cleared on success).
pub(super) async fn write_out(socket: &mut TcpStream, out: Vec<u8>) -> (bool, Vec<u8>) {
    let (res, mut out) = socket.write_all(out).await;
    out.clear();
    (res.is_ok(), out)
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
