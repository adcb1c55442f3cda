//! HTTP/1.1 by hand (RFC 9112): a request head → byte ranges into the caller's read buffer, and a
//! status line + headers → the caller's write `Vec`. Knows nothing about MCP.
//!
//! Called by `conn` (parse) and `transport` (encode). Never allocates on the parse path, never
//! panics on peer bytes, never reads past the head it was given.

use std::ops::Range;

use crate::digits::push_decimal;

pub(crate) use crate::config::HEADERS_CAP;

/// The methods the MCP endpoint distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
    /// Answered without a body (RFC 9112 §6.3).
    Head,
    Other,
}

/// A parsed request head: every string is a range into the buffer it was parsed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// The request method; `Some` in every parsed head (`None` only in `RequestHead::default()`).
    pub method: Option<Method>,
    /// The request target as sent: the path with its query, or the absolute form with authority.
    pub path: Range<usize>,
    /// Bytes of the head including the blank line; the body starts here.
    pub head_len: usize,
    /// `Content-Length`, when present and valid.
    pub content_length: Option<usize>,
    /// `Transfer-Encoding` present (we do not take chunked request bodies: 411).
    pub chunked: bool,
    /// False for `Connection: close` or HTTP/1.0 without keep-alive.
    pub keep_alive: bool,
    /// `Content-Type` value, trimmed; the last one given wins.
    pub content_type: Option<Range<usize>>,
    /// `Accept` value, trimmed; the last one given wins.
    pub accept: Option<Range<usize>>,
    /// `Mcp-Session-Id` value, trimmed (single-valued: see `conflict`).
    pub session_id: Option<Range<usize>>,
    /// `MCP-Protocol-Version` value, trimmed (single-valued: see `conflict`).
    pub protocol_version: Option<Range<usize>>,
    /// `Last-Event-ID` value, trimmed: the client's last event; a resume goes on after it.
    pub last_event_id: Option<Range<usize>>,
    /// `Origin` value, trimmed; given twice is `ParseError::BadHost`.
    pub origin: Option<Range<usize>>,
    /// `Host` value, trimmed; `Some` in every parsed HTTP/1.1 head, twice is `BadHost`.
    pub host: Option<Range<usize>>,
    /// MCP 2026-07-28 `Idempotency-Key` value, trimmed (single-valued: see `conflict`).
    pub idempotency_key: Option<Range<usize>>,
    /// MCP 2026-07-28 request-metadata headers (SEP-2243): the JSON-RPC method, and the tool or
    /// prompt name or resource uri. `Mcp-Param-*` headers are not kept here: the modern path
    /// scans the head for them when a tool declares `x-mcp-header` parameters.
    pub mcp_method: Option<Range<usize>>,
    /// `Mcp-Name` value, trimmed: the tool or prompt name or resource uri (single-valued).
    pub mcp_name: Option<Range<usize>>,
    /// `Authorization` value, trimmed (single-valued: two different credentials are a
    /// `conflict`, never one picked).
    pub authorization: Option<Range<usize>>,
    /// The name of the first single-valued header (`Mcp-Session-Id`, `MCP-Protocol-Version`,
    /// `Last-Event-ID`, `Idempotency-Key`, `Mcp-Method`, `Mcp-Name`, any `Mcp-Param-*`,
    /// `Authorization`) given
    /// again with another value; the endpoint refuses such a request (400; -32020 for the
    /// `Mcp-*` ones) rather than pick one, since a proxy reading the first and us the last would
    /// disagree about the request. `None` when each is given at most once or only repeated
    /// identically (which we accept, as RFC 9112 §6.3 does for Content-Length).
    pub conflict: Option<Range<usize>>,
}

impl RequestHead {
    /// The request method, `Method::Other` for one the endpoint does not distinguish.
    pub fn method(&self) -> Method {
        self.method.unwrap_or(Method::Other)
    }
}

/// Why a request head was refused. Every variant is the peer's fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The head is larger than `--max-header-bytes` → 431.
    #[error("request head too large")]
    HeadTooLarge,
    /// More header lines than `--max-headers` → 431.
    #[error("too many headers")]
    TooManyHeaders,
    /// Not HTTP/1.x syntax → 400.
    #[error("malformed request head")]
    Malformed,
    /// `Content-Length` not a number, or given twice with different values → 400.
    #[error("bad Content-Length")]
    BadContentLength,
    /// HTTP/1.1 without `Host`, or `Host`/`Origin` given twice (RFC 9112 §3.2) → 400.
    #[error("missing or repeated Host, or repeated Origin")]
    BadHost,
}

/// Parses the head at the start of `buf`. `Ok(None)` means more bytes are needed.
pub fn parse_head(
    buf: &[u8],
    header_bytes_max: usize,
    headers_max: usize,
) -> Result<Option<RequestHead>, ParseError> {
    let mut head = RequestHead::default();
    Ok(parse_head_into(buf, header_bytes_max, headers_max, &mut head)?.then_some(head))
}

/// `parse_head` into `head`, which a connection keeps for its requests: `Ok(true)` when `head`
/// holds the parsed head, `Ok(false)` (`head` untouched) when more bytes are needed; after an
/// error `head` is no request's (partly written). In place because a returned head (336
/// bytes) was copied about eight times on its way to the connection, ~500 instructions a
/// request (callgrind).
pub(crate) fn parse_head_into(
    buf: &[u8],
    header_bytes_max: usize,
    headers_max: usize,
    head: &mut RequestHead,
) -> Result<bool, ParseError> {
    // Uninitialised: the array is 4 KiB, and filling it with empty headers cost each parse
    // ~500 instructions (callgrind) for the handful of lines a request has.
    let mut headers = [std::mem::MaybeUninit::<httparse::Header<'_>>::uninit(); HEADERS_CAP];
    let mut req = httparse::Request::new(&mut []);
    let status = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
        Err(_) => return Err(ParseError::Malformed),
    };
    let head_len = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if buf.len() > header_bytes_max {
                return Err(ParseError::HeadTooLarge);
            }
            return Ok(false);
        }
    };
    if head_len > header_bytes_max {
        return Err(ParseError::HeadTooLarge);
    }
    if req.headers.len() > headers_max {
        return Err(ParseError::TooManyHeaders);
    }
    let method = req.method.ok_or(ParseError::Malformed)?;
    let path = req.path.ok_or(ParseError::Malformed)?;
    let version = req.version.ok_or(ParseError::Malformed)?;
    *head = RequestHead {
        method: Some(match method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "HEAD" => Method::Head,
            _ => Method::Other,
        }),
        path: range_in(buf, path.as_bytes()),
        head_len,
        keep_alive: version == 1,
        ..RequestHead::default()
    };
    head.conflict = take_headers(head, buf, req.headers)?;
    if version == 1 && head.host.is_none() {
        return Err(ParseError::BadHost);
    }
    Ok(true)
}

/// Where `part` (a slice of `buf`) lies in `buf`.
#[inline]
fn range_in(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// Takes the headers `parse_head` keeps into `head` (ranges of `buf`); the name of the first
/// header line that conflicts with an earlier one (`RequestHead::conflict`).
#[inline]
fn take_headers(
    head: &mut RequestHead,
    buf: &[u8],
    headers: &[httparse::Header<'_>],
) -> Result<Option<Range<usize>>, ParseError> {
    let mut conflict = None;
    for (i, h) in headers.iter().enumerate() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        let Some(kept) = header_slot(head, name, value)? else { continue };
        let Some((slot, single)) = kept else {
            // `Mcp-Param-*` (any name): an earlier line of the same name with another value.
            if is_mcp_param(name) && conflict.is_none() {
                let differs = headers[..i]
                    .iter()
                    .any(|e| e.name.eq_ignore_ascii_case(h.name) && trim(e.value) != value);
                if differs {
                    conflict = Some(range_in(buf, name));
                }
            }
            continue;
        };
        let differs = slot.as_ref().is_some_and(|old| buf[old.clone()] != *value);
        *slot = Some(range_in(buf, value));
        if single && differs && conflict.is_none() {
            conflict = Some(range_in(buf, name));
        }
    }
    Ok(conflict)
}

/// An `Mcp-Param-*` header name (any case).
#[inline]
fn is_mcp_param(name: &[u8]) -> bool {
    name.get(..10).is_some_and(|p| p.eq_ignore_ascii_case(b"mcp-param-"))
}

/// A kept header's place in the head, and whether it is `single` (`header_slot`).
type Slot<'h> = (&'h mut Option<Range<usize>>, bool);

/// Where the value of header `name` goes in `head`, and whether it is `single` (one value
/// only: a second, different one is a conflict): `Some(Some(_))`. `None` for a header taken
/// here (`Content-Length`, `Transfer-Encoding`, `Connection`); `Some(None)` for one not kept.
/// The names are told apart by length first: a request's handful of lines each compared with
/// all fourteen names was ~1 000 instructions of every request's ~1 700 of parse (callgrind).
#[inline]
fn header_slot<'h>(
    head: &'h mut RequestHead,
    name: &[u8],
    value: &[u8],
) -> Result<Option<Option<Slot<'h>>>, ParseError> {
    let is = |known: &[u8]| is_named(name, known);
    let slot = match name.len() {
        14 if is(b"content-length") => {
            let n = parse_decimal(value).ok_or(ParseError::BadContentLength)?;
            if head.content_length.is_some_and(|old| old != n) {
                return Err(ParseError::BadContentLength);
            }
            head.content_length = Some(n);
            return Ok(None);
        }
        17 if is(b"transfer-encoding") => {
            head.chunked = true;
            return Ok(None);
        }
        10 if is(b"connection") => {
            if value.eq_ignore_ascii_case(b"close") {
                head.keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                head.keep_alive = true;
            }
            return Ok(None);
        }
        12 if is(b"content-type") => (&mut head.content_type, false),
        6 if is(b"accept") => (&mut head.accept, false),
        14 if is(b"mcp-session-id") => (&mut head.session_id, true),
        20 if is(b"mcp-protocol-version") => (&mut head.protocol_version, true),
        13 if is(b"last-event-id") => (&mut head.last_event_id, true),
        6 if is(b"origin") => {
            if head.origin.is_some() {
                return Err(ParseError::BadHost);
            }
            (&mut head.origin, false)
        }
        4 if is(b"host") => {
            if head.host.is_some() {
                return Err(ParseError::BadHost);
            }
            (&mut head.host, false)
        }
        15 if is(b"idempotency-key") => (&mut head.idempotency_key, true),
        10 if is(b"mcp-method") => (&mut head.mcp_method, true),
        8 if is(b"mcp-name") => (&mut head.mcp_name, true),
        13 if is(b"authorization") => (&mut head.authorization, true),
        _ => return Ok(Some(None)),
    };
    Ok(Some(Some(slot)))
}

/// Whether header name `name` (a token: httparse accepted it) is `known` (lowercase letters
/// and `-`, 4 bytes or more) in any case, eight bytes at a time. For a token byte `b`,
/// `b | 0x20` is a lowercase letter exactly when `b` is that letter in either case, and `-`
/// exactly when `b` is `-` (the only other byte it comes from, CR, is no token byte), so one OR
/// per word folds the case; `eq_ignore_ascii_case`'s per-byte folding was most of the ~900
/// instructions `take_headers` spent on a request's six lines (callgrind).
#[inline]
fn is_named(name: &[u8], known: &[u8]) -> bool {
    debug_assert!(known.len() >= 4, "known names are 4 bytes or more");
    debug_assert!(known.iter().all(|&k| k == b'-' || k.is_ascii_lowercase()));
    if name.len() != known.len() || name.len() < 4 {
        return false;
    }
    let len = name.len();
    if len < 8 {
        // Two 4-byte words, overlapping when `len` < 8.
        let word =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let fold = 0x2020_2020u32;
        return (word(name, 0) | fold) == word(known, 0)
            && (word(name, len - 4) | fold) == word(known, len - 4);
    }
    let word = |b: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let fold = 0x2020_2020_2020_2020u64;
    // Whole words from the start, then the last eight bytes (overlapping the one before).
    let mut at = 0;
    while at + 8 < len {
        if (word(name, at) | fold) != word(known, at) {
            return false;
        }
        at += 8;
    }
    (word(name, len - 8) | fold) == word(known, len - 8)
}

/// The value of header `name` (case-insensitive) in a complete request head, for the rare
/// header the parse does not keep (MCP 2026-07-28 `Mcp-Param-*`). The first occurrence wins
/// (`parse_head` reports a repeat with another value as a `conflict`, so any would do).
pub(crate) fn header_named<'h>(head: &'h [u8], name: &str) -> Option<&'h [u8]> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_CAP];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(head).ok()?;
    req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| trim(h.value))
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = v {
        if first.is_ascii_whitespace() {
            v = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = v {
        if last.is_ascii_whitespace() {
            v = rest;
        } else {
            break;
        }
    }
    v
}

/// An RFC 9110 §5.6.2 token (what a header name must be): one or more `tchar`s.
pub(crate) fn is_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A decimal without sign or spaces, at most 18 digits (so it cannot overflow).
pub(crate) fn parse_decimal(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 18 {
        return None;
    }
    let mut n: usize = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + usize::from(b - b'0');
    }
    Some(n)
}

/// True when a header value (e.g. `Accept`) lists `media` as one of its comma-separated types,
/// ignoring parameters and case; `*/*` counts.
pub(crate) fn lists_media_type(value: &[u8], media: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|item| {
        let ty = trim(item.split(|&b| b == b';').next().unwrap_or(&[]));
        ty.eq_ignore_ascii_case(media) || ty == b"*/*"
    })
}

/// True when `Content-Type` is `media` (parameters such as charset allowed).
pub(crate) fn is_media_type(value: &[u8], media: &[u8]) -> bool {
    trim(value.split(|&b| b == b';').next().unwrap_or(&[])).eq_ignore_ascii_case(media)
}

/// The reason phrase of every status we send.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Appends `HTTP/1.1 <status> <reason>\r\n` to `out`.
pub(crate) fn write_status(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends one header line.
pub(crate) fn write_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in lower-case hex without allocating (chunk sizes, event ids).
pub(crate) fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests;
