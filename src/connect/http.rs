//! One blocking HTTP/1.1 exchange of the client-side bridge: a request written on a connection
//! of its own (`Connection: close`), its response head, then its body in de-framed pieces.
//!
//! Owns: which failures leave the request unsent (`Failure::NotSent`: nothing reached the
//! server, so sending again is safe) and which may have reached it (`Failure::Sent`); the body
//! framings (length, chunked, to the close) and their bounds.
//! Called by: `call` (each POST, resuming `GET` and the `DELETE`).
//! Never: reuses a connection (one client, a handful of exchanges at a time: simplicity wins),
//! follows a redirect, or buffers a body: the caller reads it piece by piece.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Largest response head read; a bigger one is the server's fault and ends the exchange.
const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Headers parsed in one response head.
const HEADERS_MAX: usize = 64;
/// Longest chunk-size line of a chunked body (hex digits and extensions).
const CHUNK_LINE_BYTES_MAX: usize = 1024;

/// Why an exchange failed, by whether the server may have seen the request.
#[derive(Debug)]
pub(super) enum Failure {
    /// The OS or the server: no connection, or the request's bytes never fully left.
    NotSent(io::Error),
    /// The server or the path to it: the request left, its response did not (fully) come.
    Sent(io::Error),
}

/// A request to send: the method, the headers beyond the fixed ones, the body.
pub(super) struct Request<'a> {
    pub(super) method: &'static str,
    pub(super) headers: &'a [(String, String)],
    pub(super) body: &'a [u8],
}

/// Where requests go: the address, the `Host` header and the request target.
pub(super) struct Target {
    pub(super) addr: SocketAddr,
    pub(super) authority: String,
    pub(super) path: String,
    /// Longest silence on a response (tidemark sends keep-alive comments well within it).
    pub(super) read_timeout: Duration,
    pub(super) connect_timeout: Duration,
}

/// A response: status, headers (names lowercased), and its body still to read.
pub(super) struct Response {
    pub(super) status: u16,
    headers: Vec<(String, String)>,
    body: Body,
}

enum Framing {
    Length(u64),
    /// Bytes left in the current chunk; `None` before a size line.
    Chunked(Option<u64>),
    Close,
    Done,
}

struct Body {
    reader: BufReader<TcpStream>,
    framing: Framing,
}

/// Sends `request` and reads the response head.
pub(super) fn exchange(target: &Target, request: &Request<'_>) -> Result<Response, Failure> {
    let stream = TcpStream::connect_timeout(&target.addr, target.connect_timeout)
        .map_err(Failure::NotSent)?;
    stream.set_read_timeout(Some(target.read_timeout)).map_err(Failure::NotSent)?;
    stream.set_nodelay(true).map_err(Failure::NotSent)?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
         Connection: close\r\nContent-Length: {}\r\n",
        request.method,
        target.path,
        target.authority,
        request.body.len()
    );
    if !request.body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(request.body);
    (&stream).write_all(&bytes).map_err(Failure::NotSent)?;
    read_response(BufReader::new(stream)).map_err(Failure::Sent)
}

fn read_response(mut reader: BufReader<TcpStream>) -> io::Result<Response> {
    let mut head = Vec::with_capacity(512);
    while !head.ends_with(b"\r\n\r\n") {
        let read = (&mut reader).take(HEAD_BYTES_MAX as u64).read_until(b'\n', &mut head)?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if head.len() > HEAD_BYTES_MAX {
            return Err(invalid("response head too large"));
        }
    }
    let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut parsed = httparse::Response::new(&mut slots);
    parsed.parse(&head).map_err(|_| invalid("malformed response head"))?;
    let status = parsed.code.ok_or_else(|| invalid("no status"))?;
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let framing = if matches!(status, 204 | 304) || (100..200).contains(&status) {
        Framing::Done
    } else if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        Framing::Chunked(None)
    } else if let Some(length) = header("content-length") {
        Framing::Length(length.trim().parse().map_err(|_| invalid("bad Content-Length"))?)
    } else {
        Framing::Close
    };
    Ok(Response { status, headers, body: Body { reader, framing } })
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The next piece of the body into `buf`: `Ok(0)` at its end, an error when it broke
    /// (a close before the end is `UnexpectedEof`).
    pub(super) fn read_piece(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.body.read_piece(buf)
    }

    /// The whole body, at most `limit` bytes (a longer one is an error).
    pub(super) fn read_all(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = self.read_piece(&mut buf)?;
            if n == 0 {
                return Ok(all);
            }
            if all.len() + n > limit {
                return Err(invalid("body too large"));
            }
            all.extend_from_slice(&buf[..n]);
        }
    }
}

impl Body {
    fn read_piece(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.framing {
                Framing::Done => return Ok(0),
                Framing::Close => return self.reader.read(buf),
                Framing::Length(0) => self.framing = Framing::Done,
                Framing::Length(left) => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.reader.read(&mut buf[..want])?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    self.framing = Framing::Length(left - n as u64);
                    return Ok(n);
                }
                Framing::Chunked(None) => self.chunk_size()?,
                Framing::Chunked(Some(0)) => {
                    self.expect_crlf()?;
                    self.framing = Framing::Chunked(None);
                }
                Framing::Chunked(Some(left)) => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.reader.read(&mut buf[..want])?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    self.framing = Framing::Chunked(Some(left - n as u64));
                    return Ok(n);
                }
            }
        }
    }

    /// A chunk-size line; the last chunk (size 0) ends the body (its trailer is not read:
    /// the connection closes anyway).
    fn chunk_size(&mut self) -> io::Result<()> {
        let line = self.line()?;
        let digits = line.split(|&b| b == b';').next().unwrap_or_default();
        let text = std::str::from_utf8(digits).map_err(|_| invalid("bad chunk size"))?;
        let size = u64::from_str_radix(text.trim(), 16).map_err(|_| invalid("bad chunk size"))?;
        self.framing = if size == 0 { Framing::Done } else { Framing::Chunked(Some(size)) };
        Ok(())
    }

    fn expect_crlf(&mut self) -> io::Result<()> {
        if self.line()?.is_empty() {
            Ok(())
        } else {
            Err(invalid("chunk without CRLF"))
        }
    }

    /// One line without its CRLF; EOF before its end is a break.
    fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        let limit = CHUNK_LINE_BYTES_MAX as u64;
        (&mut self.reader).take(limit).read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\n") {
            let kind = if line.len() as u64 >= limit {
                io::ErrorKind::InvalidData
            } else {
                io::ErrorKind::UnexpectedEof
            };
            return Err(kind.into());
        }
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server on a real socket: reads the request head, answers `response`, closes.
    fn serve_once(response: &'static [u8]) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().expect("accept");
            let mut head = Vec::new();
            let mut reader = BufReader::new(socket.try_clone().expect("clone"));
            while !head.ends_with(b"\r\n\r\n") {
                if reader.read_until(b'\n', &mut head).expect("read") == 0 {
                    break;
                }
            }
            let _ = socket.write_all(response);
        });
        target(addr)
    }

    fn target(addr: SocketAddr) -> Target {
        Target {
            addr,
            authority: addr.to_string(),
            path: "/mcp".into(),
            read_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }

    fn get(target: &Target) -> Result<Response, Failure> {
        exchange(target, &Request { method: "GET", headers: &[], body: b"" })
    }

    #[test]
    fn connect_http_reads_chunked_length_and_close_delimited_bodies() {
        // Goal: every framing yields the body's bytes, and the head's headers are found by
        // lowercase name. Method: one real socket per framing.
        let cases: [(&'static [u8], &[u8]); 3] = [
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n", b"abcde"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A: 1\r\n\r\nwxyz", b"wxyz"),
            (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nto the close", b"to the close"),
        ];
        for (response, body) in cases {
            let mut answer = get(&serve_once(response)).expect("answer");
            assert_eq!(answer.status, 200);
            assert_eq!(answer.header("x-a"), Some("1"));
            assert_eq!(answer.read_all(1024).expect("body"), body);
        }
    }

    #[test]
    fn connect_http_tells_a_break_from_an_unsent_request() {
        // Goal: no listener → NotSent (safe to send again); a close mid-chunk → an error while
        // reading (the stream broke); a close before the head → Sent (the server may have run
        // it). Method: a closed port, a truncated chunked body, a server that says nothing.
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
        assert!(matches!(get(&target(closed)), Err(Failure::NotSent(_))));
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
        let mut answer = get(&serve_once(cut)).expect("head");
        assert!(answer.read_all(1024).is_err());
        assert!(matches!(get(&serve_once(b"")), Err(Failure::Sent(_))));
    }

    #[test]
    fn connect_http_bounds_the_head_and_the_body() {
        // Goal: a body over the caller's limit is an error, not a growing buffer. Method: a
        // 4-byte limit against a 5-byte body.
        let mut answer =
            get(&serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n12345")).expect("head");
        assert!(answer.read_all(4).is_err());
    }
}
