//! The mirror's batch connection (`Link`): one TCP connection that sends a `resp::Pipeline`'s
//! bytes and reads back exactly as many replies, keeping only the first error's text. The
//! `redis` crate parses every reply into a `redis::Value` (a parser-combinator state machine
//! and an allocation per bulk reply); the mirror needs none of the values, only the count and
//! the first refusal, and that decoding was the largest part of the mirror thread's reply time.
//! Everything else (the lease, adoption's compare-and-set, reads) stays on the crate's
//! connection.
//!
//! A command that fails inside `EXEC` (its error nested in the `EXEC` reply) is a refusal like a
//! top-level one.
//!
//! Never: reads past a malformed reply (the link is then broken and the store counts as down),
//! nests deeper than `REPLY_DEPTH_MAX`, or holds more than one read buffer.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::config::DurableUrl;

/// Arrays nested deeper than this in a reply are taken for a broken store: the mirror's own
/// commands answer with flat replies (an integer, a status, an entry id).
const REPLY_DEPTH_MAX: usize = 4;
/// The read buffer's first size; it grows only for a reply that does not fit.
pub(super) const READ_CHUNK_BYTES: usize = 16 * 1024;
/// A bulk reply longer than this is taken for a broken store (the mirror's commands answer
/// with entry ids and integers): the read buffer never grows past about this.
pub(super) const REPLY_BYTES_MAX: usize = 1 << 20;

/// The link failed (unreachable, timed out, a malformed reply, or the store refused a command);
/// the text says how.
#[derive(Debug)]
pub(crate) struct LinkError(pub(crate) String);

/// One reply read from the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// `consumed` bytes make one whole reply; `error` the text of a `-ERR …` reply.
    Whole { consumed: usize, error: Option<(usize, usize)> },
    /// The buffer ends inside the reply.
    Partial,
}

/// Reads one RESP2 reply at the front of `buf` (what a store sends when no `HELLO` asked for
/// RESP3). `Err` for bytes that are no reply.
pub(super) fn read_reply(buf: &[u8], depth: usize) -> Result<Reply, LinkError> {
    let Some(&kind) = buf.first() else { return Ok(Reply::Partial) };
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(Reply::Partial);
    };
    let line = &buf[1..line_end];
    let after_line = line_end + 2;
    let number = || -> Result<i64, LinkError> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .ok_or_else(|| LinkError("the store sent a malformed reply length".into()))
    };
    match kind {
        b'+' | b':' => Ok(Reply::Whole { consumed: after_line, error: None }),
        b'-' => Ok(Reply::Whole { consumed: after_line, error: Some((1, line_end)) }),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Whole { consumed: after_line, error: None });
            }
            if len as u64 > REPLY_BYTES_MAX as u64 {
                return Err(LinkError(
                    "the store sent a reply longer than the mirror reads".into(),
                ));
            }
            let consumed = after_line + len as usize + 2;
            Ok(if buf.len() < consumed {
                Reply::Partial
            } else {
                Reply::Whole { consumed, error: None }
            })
        }
        b'*' => {
            let count = number()?;
            if depth >= REPLY_DEPTH_MAX {
                return Err(LinkError("the store sent a reply nested too deep".into()));
            }
            // An error inside an array is a command that failed inside `EXEC` (a session's
            // image): the first one is the array's error, as if it stood alone.
            let (mut consumed, mut error) = (after_line, None);
            for _ in 0..count.max(0) {
                match read_reply(&buf[consumed..], depth + 1)? {
                    Reply::Whole { consumed: n, error: inner } => {
                        error = error.or(inner.map(|(from, to)| (consumed + from, consumed + to)));
                        consumed += n;
                    }
                    Reply::Partial => return Ok(Reply::Partial),
                }
            }
            Ok(Reply::Whole { consumed, error })
        }
        other => {
            Err(LinkError(format!("the store sent a reply of unknown type {:?}", other as char)))
        }
    }
}

/// The mirror's batch connection to the store.
pub(crate) struct Link {
    stream: TcpStream,
    /// Received bytes not yet read as replies: `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Link {
    /// Connects to `url` within `timeout` (every later read and write is bounded by it too) and
    /// selects its database.
    pub(crate) fn connect(url: &DurableUrl, timeout: Duration) -> Result<Link, LinkError> {
        let down = |e: std::io::Error| LinkError(format!("{url}: {e}"));
        let mut last = None;
        let mut stream = None;
        for addr in (url.host.as_str(), url.port).to_socket_addrs().map_err(down)? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            down(last.unwrap_or_else(|| std::io::Error::other("no address for the host")))
        })?;
        stream.set_nodelay(true).map_err(down)?;
        stream.set_read_timeout(Some(timeout)).map_err(down)?;
        stream.set_write_timeout(Some(timeout)).map_err(down)?;
        let mut link = Link { stream, buf: vec![0; READ_CHUNK_BYTES], start: 0, end: 0 };
        if url.db != 0 {
            let mut select = super::resp::Pipeline::default();
            select.command(2).arg(b"SELECT").arg_u64(u64::from(url.db));
            link.round_trip(select.bytes(), select.commands())?;
        }
        Ok(link)
    }

    /// Sends `bytes` (`replies` commands) and reads every reply: `send` then `receive`.
    pub(crate) fn round_trip(&mut self, bytes: &[u8], replies: usize) -> Result<(), LinkError> {
        self.send(bytes)?;
        self.receive(replies).map(|_| ())
    }

    /// Sends `bytes` without waiting for the replies (`receive` reads them).
    pub(crate) fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.stream.write_all(bytes).map_err(link_error)
    }

    /// Reads `replies` replies (blocking, bounded by the timeout), so the connection stays in
    /// step even after a refused command; the first refusal is the error. The last reply's
    /// value when it is an integer (a closing `WAIT`'s count of replicas).
    pub(crate) fn receive(&mut self, replies: usize) -> Result<Option<i64>, LinkError> {
        let mut refused: Option<String> = None;
        let mut last = None;
        let mut read = 0;
        while read < replies {
            match read_reply(&self.buf[self.start..self.end], 0)? {
                Reply::Whole { consumed, error } => {
                    if read + 1 == replies {
                        last = integer(&self.buf[self.start..self.start + consumed]);
                    }
                    if let (None, Some((from, to))) = (&refused, error) {
                        let text = &self.buf[self.start + from..self.start + to];
                        refused = Some(String::from_utf8_lossy(text).into_owned());
                    }
                    self.start += consumed;
                    read += 1;
                }
                Reply::Partial => {
                    // Keep the partial reply at the front, then read more after it.
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                    if self.end == self.buf.len() {
                        self.buf.resize(self.buf.len() * 2, 0);
                    }
                    if self.end - self.start > REPLY_BYTES_MAX {
                        return Err(LinkError(
                            "the store sent a reply longer than the mirror reads".into(),
                        ));
                    }
                    // A signal landing on this thread interrupts the read (SO_RCVTIMEO reads are
                    // never restarted): read again rather than take the store for down.
                    let n = match self.stream.read(&mut self.buf[self.end..]) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        other => other.map_err(link_error)?,
                    };
                    if n == 0 {
                        return Err(LinkError("the durable store closed the connection".into()));
                    }
                    self.end += n;
                }
            }
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            // A reply that grew the buffer does not keep it grown.
            if self.buf.len() > READ_CHUNK_BYTES {
                self.buf.truncate(READ_CHUNK_BYTES);
                self.buf.shrink_to_fit();
            }
        }
        match refused {
            Some(why) => Err(LinkError(why)),
            None => Ok(last),
        }
    }
}

/// The value of a whole integer reply (`:N\r\n`), `None` for any other reply.
pub(super) fn integer(reply: &[u8]) -> Option<i64> {
    let digits = reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The value of a whole bulk reply (`$N\r\n…\r\n`), `None` for a nil or any other reply.
pub(super) fn bulk(reply: &[u8]) -> Option<&[u8]> {
    let rest = reply.strip_prefix(b"$")?;
    let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..line_end]).ok()?.parse().ok()?;
    rest.get(line_end + 2..line_end + 2 + len)
}

fn link_error(e: std::io::Error) -> LinkError {
    LinkError(format!("durable store connection: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(buf: &[u8]) -> (usize, Option<&[u8]>) {
        match read_reply(buf, 0).expect("a reply") {
            Reply::Whole { consumed, error } => (consumed, error.map(|(a, b)| &buf[a..b])),
            Reply::Partial => panic!("partial: {buf:?}"),
        }
    }

    #[test]
    fn replies_are_measured_whole_and_the_error_text_kept() {
        // Goal: each reply type the store sends is consumed exactly, so the next starts right
        // after it; an error keeps its text.
        assert_eq!(whole(b"+OK\r\n:1\r\n"), (5, None));
        assert_eq!(whole(b":12\r\n"), (5, None));
        assert_eq!(whole(b"$9\r\n120-1\r\n\r\n+OK"), (15, None), "a bulk may hold CR LF");
        assert_eq!(whole(b"$-1\r\n"), (5, None));
        assert_eq!(whole(b"*2\r\n$1\r\na\r\n:3\r\n"), (15, None));
        assert_eq!(whole(b"*-1\r\n"), (5, None));
        assert_eq!(
            whole(b"-WRONGTYPE Operation against a key\r\n"),
            (36, Some(&b"WRONGTYPE Operation against a key"[..]))
        );
        let exec = b"*3\r\n:1\r\n-WRONGTYPE Operation against a key\r\n*1\r\n-ERR x\r\n+OK";
        assert_eq!(
            whole(exec),
            (56, Some(&b"WRONGTYPE Operation against a key"[..])),
            "a command failed inside EXEC is the reply's error (the first one)"
        );
        assert_eq!(integer(b":2\r\n"), Some(2), "a WAIT's count");
        assert_eq!((integer(b"+OK\r\n"), integer(b"$1\r\n1\r\n")), (None, None));
        assert_eq!(bulk(b"$2\r\n12\r\n"), Some(&b"12"[..]), "an owner read");
        assert_eq!((bulk(b"$-1\r\n"), bulk(b":1\r\n")), (None, None));
    }

    #[test]
    fn a_reply_cut_anywhere_is_partial_and_garbage_is_an_error() {
        // Goal: a reply split across reads is never taken for a whole one, and bytes that are
        // no reply break the link instead of being skipped.
        let full = b"*2\r\n$5\r\nhello\r\n:7\r\n";
        for cut in 0..full.len() {
            assert_eq!(read_reply(&full[..cut], 0).expect("no error"), Reply::Partial, "cut {cut}");
        }
        assert!(read_reply(b"?x\r\n", 0).is_err());
        assert!(read_reply(b"$x\r\n", 0).is_err());
        assert!(read_reply(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 0).is_err(), "too deep");
        assert!(read_reply(b"$9223372036854775807\r\n", 0).is_err(), "too long");
    }
}
