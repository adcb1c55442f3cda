//! One response of the upstream: its head (RFC 9112 §6.3 for the framing), then its body,
//! de-framed by length, by chunks (§7.1) or by the end of the connection.
//!
//! Owns: what the transport takes from a head (`Head`: status, `Kind`, `Framing`, session id,
//! a redirect's `Location`, keep-alive) and its bounds (`HEAD_BYTES_MAX`, `HEADERS_MAX`,
//! `SESSION_ID_BYTES_MAX`, `LOCATION_BYTES_MAX`), the
//! body reader over a `Conn` (`Body`, `read_json`), and the chunked decoder with its bound
//! (`CHUNK_EXTRA_BYTES_MAX`).
//! Called by: the transport (`mod.rs`), after each request it writes.
//! Never: reads past the end of the response (the next response's bytes stay in the `Conn`),
//! holds a head beyond `HEAD_BYTES_MAX` or a JSON body beyond `--upstream-line-bytes`, or
//! panics on what the upstream sends: every break is an `HttpError`.

use super::conn::{Conn, Stop, Until, READ_CHUNK};
use super::error::HttpError;

/// Longest response head. Beyond it the response is dropped and its request fails.
const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most header lines in a response head (`httparse` parses into a fixed array).
const HEADERS_MAX: usize = 64;
/// Longest `Mcp-Session-Id` taken from the upstream (echoed on every request); a longer one is
/// not taken.
const SESSION_ID_BYTES_MAX: usize = 1024;
/// Longest `Location` of a redirect taken into the error that names it; a longer one (or one
/// with bytes that are not visible ASCII) is left out of the error.
const LOCATION_BYTES_MAX: usize = 1024;
/// Longest chunk extension, and trailer section, of a chunked body.
const CHUNK_EXTRA_BYTES_MAX: usize = 4096;

const _: () = assert!(HEAD_BYTES_MAX >= READ_CHUNK);

/// What a response body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Json,
    EventStream,
    Other,
}

/// How a response body ends (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    Length(u64),
    Chunked,
    /// At the end of the connection.
    Close,
}

/// The parts of a response head the transport uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) kind: Kind,
    pub(super) framing: Framing,
    /// A valid `Mcp-Session-Id` (visible ASCII, at most `SESSION_ID_BYTES_MAX`), if any.
    pub(super) session: Option<String>,
    /// A redirect's (3xx) `Location` when it is visible ASCII of at most `LOCATION_BYTES_MAX`:
    /// only named in the error (redirects are not followed), never taken for other statuses.
    pub(super) location: Option<String>,
    /// The connection may carry another request after this response.
    pub(super) keep_alive: bool,
}

/// Parses a response head at the start of `bytes`: `Ok(None)` when it is not complete yet,
/// else the head and its length.
pub(super) fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(bytes) {
        Ok(httparse::Status::Complete(used)) if used <= HEAD_BYTES_MAX => used,
        Ok(httparse::Status::Partial) if bytes.len() <= HEAD_BYTES_MAX => return Ok(None),
        Ok(_) => return Err(HttpError::HeadTooLarge),
        Err(_) => return Err(HttpError::BadHead),
    };
    let status = response.code.ok_or(HttpError::BadHead)?;
    let mut kind = Kind::Other;
    let mut length: Option<u64> = None;
    let mut transfer: Option<bool> = None;
    let mut session = None;
    let mut location = None;
    let mut close = response.version != Some(1);
    for header in response.headers.iter() {
        let name = header.name;
        let value = header.value;
        if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(value)?;
            if length.is_some_and(|m| m != n) {
                return Err(HttpError::BadHead);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only the final coding decides (RFC 9112 §6.3, item 4).
            let last = value.rsplit(|&b| b == b',').next().unwrap_or(value);
            transfer = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("content-type") {
            kind = media_kind(value);
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            session = visible_ascii(value, SESSION_ID_BYTES_MAX);
        } else if name.eq_ignore_ascii_case("location") && (300..400).contains(&status) {
            location = visible_ascii(value, LOCATION_BYTES_MAX);
        } else if name.eq_ignore_ascii_case("connection") {
            close |=
                value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
    }
    let framing = match (status, transfer, length) {
        (100..=199 | 204 | 304, _, _) => Framing::Length(0),
        (_, Some(true), _) => Framing::Chunked,
        (_, Some(false), _) => Framing::Close,
        (_, None, Some(n)) => Framing::Length(n),
        (_, None, None) => Framing::Close,
    };
    // Both framings given: the sender must close after the response (RFC 9112 §6.1).
    let keep_alive =
        !close && framing != Framing::Close && !(transfer.is_some() && length.is_some());
    Ok(Some((Head { status, kind, framing, session, location, keep_alive }, used)))
}

/// `value` as a string when it is 1 to `max` bytes of visible ASCII (nothing that could break
/// a header or a log line); else `None`.
fn visible_ascii(value: &[u8], max: usize) -> Option<String> {
    let valid = !value.is_empty()
        && value.len() <= max
        && value.iter().all(|&b| (0x21..=0x7e).contains(&b));
    // Visible ASCII is UTF-8: nothing is replaced.
    valid.then(|| String::from_utf8_lossy(value).into_owned())
}

/// A `Content-Length` value: 1 to 18 ASCII digits (so it fits a `u64`), whitespace around it
/// trimmed.
fn content_length(value: &[u8]) -> Result<u64, HttpError> {
    let text = std::str::from_utf8(value).map_err(|_| HttpError::BadHead)?.trim();
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::BadHead);
    }
    text.parse().map_err(|_| HttpError::BadHead)
}

/// What a `Content-Type` value announces, parameters (`; charset=…`) ignored.
fn media_kind(value: &[u8]) -> Kind {
    let media = value.split(|&b| b == b';').next().unwrap_or(value).trim_ascii();
    if media.eq_ignore_ascii_case(b"application/json") {
        Kind::Json
    } else if media.eq_ignore_ascii_case(b"text/event-stream") {
        Kind::EventStream
    } else {
        Kind::Other
    }
}

/// Reads a response head, skipping interim (1xx) responses.
pub(super) async fn read_head(
    conn: &mut Conn,
    stop: &Stop,
    until: Until,
) -> Result<Head, HttpError> {
    loop {
        match parse_head(conn.pending())? {
            Some((head, used)) => {
                conn.consume(used);
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue;
                }
                return Ok(head);
            }
            None => conn.read_more(stop, until).await?,
        }
    }
}

/// Reads a whole JSON body, at most `line_max` bytes (`--upstream-line-bytes`).
pub(super) async fn read_json(
    conn: &mut Conn,
    framing: Framing,
    line_max: usize,
    stop: &Stop,
    until: Until,
) -> Result<Vec<u8>, HttpError> {
    if let Framing::Length(n) = framing {
        if n > line_max as u64 {
            return Err(HttpError::TooLarge);
        }
    }
    let mut body = Body::new(framing);
    let mut piece = Vec::new();
    let mut json = Vec::new();
    while body.next(conn, stop, until, &mut piece).await? {
        if json.len() + piece.len() > line_max {
            return Err(HttpError::TooLarge);
        }
        json.extend_from_slice(&piece);
    }
    Ok(json)
}

/// A response body being read: de-framed pieces from the connection.
pub(super) struct Body {
    framing: BodyState,
}

/// Where the body being read stands.
enum BodyState {
    /// Framed by `Content-Length`: the bytes left.
    Length(u64),
    /// Framed by `Transfer-Encoding: chunked`.
    Chunked(ChunkDecoder),
    /// Framed by the end of the connection.
    Close,
    /// The body ended.
    Done,
}

impl Body {
    pub(super) fn new(framing: Framing) -> Body {
        let framing = match framing {
            Framing::Length(0) => BodyState::Done,
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(ChunkDecoder::default()),
            Framing::Close => BodyState::Close,
        };
        Body { framing }
    }

    /// The next piece of the body into `out` (cleared first); false at its end.
    pub(super) async fn next(
        &mut self,
        conn: &mut Conn,
        stop: &Stop,
        until: Until,
        out: &mut Vec<u8>,
    ) -> Result<bool, HttpError> {
        out.clear();
        loop {
            let pending = conn.pending();
            if !pending.is_empty() {
                match &mut self.framing {
                    BodyState::Done => return Ok(false),
                    BodyState::Length(left) => {
                        let n = pending.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                        out.extend_from_slice(&pending[..n]);
                        conn.consume(n);
                        *left -= n as u64;
                        if *left == 0 {
                            self.framing = BodyState::Done;
                        }
                        return Ok(true);
                    }
                    BodyState::Chunked(decoder) => {
                        let used = decoder.feed(pending, out)?;
                        conn.consume(used);
                        if decoder.is_done() {
                            self.framing = BodyState::Done;
                        }
                        if !out.is_empty() {
                            return Ok(true);
                        }
                        continue;
                    }
                    BodyState::Close => {
                        out.extend_from_slice(pending);
                        let n = pending.len();
                        conn.consume(n);
                        return Ok(true);
                    }
                }
            }
            if matches!(self.framing, BodyState::Done) {
                return Ok(false);
            }
            match conn.read_more(stop, until).await {
                Ok(()) => {}
                Err(HttpError::Closed) if matches!(self.framing, BodyState::Close) => {
                    self.framing = BodyState::Done;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Incremental decoder of a chunked body (RFC 9112 §7.1): chunk extensions are skipped and
/// trailer fields dropped, each within `CHUNK_EXTRA_BYTES_MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkDecoder {
    /// In the hex chunk size; `digits` so far.
    Size { size: u64, digits: u8 },
    /// In a chunk extension after the size.
    Extension { size: u64, len: usize },
    /// At the LF of the size line.
    SizeLf { size: u64 },
    /// In chunk data.
    Data { left: u64 },
    /// At the CR after chunk data.
    DataCr,
    /// At the LF after chunk data.
    DataLf,
    /// In the trailer section after the last chunk; `line` bytes of the current line.
    Trailer { line: usize, total: usize },
    /// At the LF of a trailer line.
    TrailerLf { line: usize, total: usize },
    /// The body ended.
    Done,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder::Size { size: 0, digits: 0 }
    }
}

impl ChunkDecoder {
    fn is_done(&self) -> bool {
        *self == ChunkDecoder::Done
    }

    /// Decodes from `input`, appending data to `out`; returns the bytes consumed (all of
    /// `input` unless the body ended inside it).
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        use ChunkDecoder as D;
        let bad = HttpError::BadChunk;
        let after_size = |size: u64| match size {
            0 => D::Trailer { line: 0, total: 0 },
            left => D::Data { left },
        };
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            *self = match *self {
                D::Done => return Ok(i),
                D::Data { left } => {
                    let n = (input.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    *self = match left - n as u64 {
                        0 => D::DataCr,
                        left => D::Data { left },
                    };
                    continue;
                }
                D::Size { size, digits } => match (b as char).to_digit(16) {
                    Some(_) if digits >= 15 => return Err(bad),
                    Some(d) => D::Size { size: size << 4 | u64::from(d), digits: digits + 1 },
                    None if digits == 0 => return Err(bad),
                    None => match b {
                        b'\r' => D::SizeLf { size },
                        b'\n' => after_size(size),
                        b';' | b' ' | b'\t' => D::Extension { size, len: 0 },
                        _ => return Err(bad),
                    },
                },
                D::Extension { size, len } => match b {
                    b'\r' => D::SizeLf { size },
                    b'\n' => after_size(size),
                    _ if len >= CHUNK_EXTRA_BYTES_MAX => return Err(bad),
                    _ => D::Extension { size, len: len + 1 },
                },
                D::SizeLf { size } if b == b'\n' => after_size(size),
                D::DataCr if b == b'\r' => D::DataLf,
                D::DataCr | D::DataLf if b == b'\n' => D::default(),
                D::Trailer { line, total } | D::TrailerLf { line, total } if b == b'\n' => {
                    match line {
                        0 => D::Done,
                        _ => D::Trailer { line: 0, total },
                    }
                }
                D::Trailer { line, total } if b == b'\r' => D::TrailerLf { line, total },
                D::Trailer { .. } if total_exceeded(*self) => return Err(bad),
                D::Trailer { line, total } => D::Trailer { line: line + 1, total: total + 1 },
                D::SizeLf { .. } | D::DataCr | D::DataLf | D::TrailerLf { .. } => return Err(bad),
            };
            i += 1;
        }
        Ok(i)
    }
}

fn total_exceeded(state: ChunkDecoder) -> bool {
    matches!(state, ChunkDecoder::Trailer { total, .. } if total >= CHUNK_EXTRA_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a chunked body fed in `pieces`: the data and the bytes consumed.
    fn dechunk(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), HttpError> {
        let mut decoder = ChunkDecoder::default();
        let mut out = Vec::new();
        let mut used = 0;
        for piece in pieces {
            used += decoder.feed(piece, &mut out)?;
        }
        Ok((out, used, decoder.is_done()))
    }

    const CHUNKED: &[u8] =
        b"5\r\nhello\r\n1;name=value\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";

    #[test]
    fn chunked_bodies_decode_whatever_the_split() {
        // Goal: data, extensions and trailers decode the same at every boundary, and decoding
        // stops at the body's end (the next response's bytes are left). Method: every 2-split
        // and byte by byte.
        let body_len = CHUNKED.len() - 4;
        let expected = b"hello 0123456789".to_vec();
        assert_eq!(dechunk(&[CHUNKED]), Ok((expected.clone(), body_len, true)));
        for cut in 0..=CHUNKED.len() {
            let (a, b) = CHUNKED.split_at(cut);
            assert_eq!(dechunk(&[a, b]), Ok((expected.clone(), body_len, true)), "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = CHUNKED.chunks(1).collect();
        assert_eq!(dechunk(&bytes), Ok((expected, body_len, true)));
        assert_eq!(dechunk(&[b"3\nabc\n0\n\n"]), Ok((b"abc".to_vec(), 9, true)));
        assert_eq!(dechunk(&[b"3\r\nab"]), Ok((b"ab".to_vec(), 5, false)));
    }

    #[test]
    fn malformed_chunked_bodies_are_refused() {
        // Goal: each break of RFC 9112 §7.1 is an error, never a panic. Method: table.
        let long_ext = [b"1;".as_slice(), &[b'x'; CHUNK_EXTRA_BYTES_MAX + 1]].concat();
        let long_trailer = [b"0\r\n".as_slice(), &[b'x'; CHUNK_EXTRA_BYTES_MAX + 1]].concat();
        let cases: [&[u8]; 7] = [
            b"\r\n",
            b"g\r\n",
            b"fffffffffffffffff\r\n",
            b"3\r\nabcX",
            b"3\rX",
            &long_ext,
            &long_trailer,
        ];
        for case in cases {
            assert_eq!(
                dechunk(&[case]),
                Err(HttpError::BadChunk),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn response_heads_give_status_type_framing_and_session() {
        // Goal: the fields the transport acts on, per RFC 9112 §6.3. Method: table of heads.
        let json = b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n\
            Content-Length: 12\r\nmcp-session-id: abc-123\r\n\r\n{}";
        let (head, used) = parse_head(json).expect("valid").expect("complete");
        assert_eq!(used, json.len() - 2);
        let expected = Head {
            status: 200,
            kind: Kind::Json,
            framing: Framing::Length(12),
            session: Some("abc-123".into()),
            location: None,
            keep_alive: true,
        };
        assert_eq!(head, expected);
        let sse = Kind::EventStream;
        let cases: [(&[u8], Kind, Framing, bool); 6] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: TEXT/Event-Stream\r\n\
                    Transfer-Encoding: chunked\r\n\r\n",
                sse,
                Framing::Chunked,
                true,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                sse,
                Framing::Close,
                false,
            ),
            (
                b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                Kind::Other,
                Framing::Length(0),
                false,
            ),
            (b"HTTP/1.1 204 No Content\r\n\r\n", Kind::Other, Framing::Length(0), true),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                Kind::Other,
                Framing::Chunked,
                false,
            ),
            (
                b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
                Kind::Other,
                Framing::Length(5),
                false,
            ),
        ];
        for (bytes, kind, framing, keep_alive) in cases {
            let (head, _) = parse_head(bytes).expect("valid").expect("complete");
            assert_eq!((head.kind, head.framing, head.keep_alive), (kind, framing, keep_alive));
        }
    }

    #[test]
    fn a_redirects_location_is_kept_only_when_valid_and_only_for_3xx() {
        // Goal: the error of a redirect can name where it pointed, without a byte that could
        // break a log line, and no other status keeps one. Method: table of heads, the bound
        // at N and N+1.
        let at_max = format!("/{}", "a".repeat(LOCATION_BYTES_MAX - 1));
        let over = format!("/{}", "a".repeat(LOCATION_BYTES_MAX));
        let cases: [(u16, &str, Option<&str>); 5] = [
            (307, "http://b.example/mcp", Some("http://b.example/mcp")),
            (301, &at_max, Some(&at_max)),
            (308, &over, None),
            (302, "http://b.example/a b", None),
            (200, "http://b.example/mcp", None),
        ];
        for (status, location, expected) in cases {
            let bytes = format!("HTTP/1.1 {status} X\r\nLocation: {location}\r\n\r\n");
            let (head, _) = parse_head(bytes.as_bytes()).expect("valid").expect("complete");
            assert_eq!(head.location.as_deref(), expected, "{status} {}", location.len());
        }
    }

    #[test]
    fn bad_or_oversized_heads_are_refused() {
        // Goal: partial heads wait, broken ones fail, 64 KiB is the bound, bad session ids are
        // not taken. Method: table plus the bound at N and N+1.
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-"), Ok(None));
        let bad: [&[u8]; 4] = [
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        ];
        for bytes in bad {
            assert_eq!(
                parse_head(bytes),
                Err(HttpError::BadHead),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let head = |len: usize| {
            let start = b"HTTP/1.1 200 OK\r\nX: ".as_slice();
            let filler = len - start.len() - 4;
            [start, &vec![b'a'; filler], b"\r\n\r\n"].concat()
        };
        assert!(parse_head(&head(HEAD_BYTES_MAX)).expect("fits").is_some());
        assert_eq!(parse_head(&head(HEAD_BYTES_MAX + 1)), Err(HttpError::HeadTooLarge));
        assert_eq!(parse_head(&vec![b'H'; HEAD_BYTES_MAX + 1]), Err(HttpError::BadHead));
        let spaced = b"HTTP/1.1 200 OK\r\nMcp-Session-Id: a b\r\n\r\n";
        assert_eq!(parse_head(spaced).expect("valid").expect("complete").0.session, None);
    }
}
