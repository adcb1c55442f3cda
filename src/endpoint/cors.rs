//! CORS (WHATWG Fetch §3.2, "CORS protocol") at the MCP endpoint, both eras: what lets a web
//! page served from an origin the operator listed with `--allowed-origin` use the endpoint.
//!
//! Which origins: exactly the listed ones, byte for byte (browsers serialise an origin as
//! `scheme://host[:port]`, no path). A loopback origin that the DNS-rebinding rule admits
//! without a flag (a page on another local port) stays admitted but gets no CORS headers: any
//! local process can serve such a page, so letting a page read answers is the operator's
//! explicit choice. Any other origin is refused (403) before anything here runs, preflights
//! included.
//!
//! Two parts:
//! - `answer_preflight`: `OPTIONS` + a listed `Origin` + `Access-Control-Request-Method` → 204
//!   with the endpoint's methods, the request headers MCP uses and `Access-Control-Max-Age`. A
//!   requested header outside that set is left out of the answer rather than refused with 403:
//!   the browser then refuses the request itself and its console names the header, and
//!   `tidemark_cors_headers_left_out_total` shows it to the operator.
//! - `share_response`: `Access-Control-Allow-Origin: <origin>` (echoed, never `*`),
//!   `Access-Control-Expose-Headers` and `Vary: Origin`, inserted right after the status line
//!   of an answer `wire` already rendered (the bytes are `wire::cors`'s), so one place covers
//!   every kind of answer (JSON, 202, refusals, 409/422, SSE heads, the preflight's 204). A
//!   modern stream whose head is rendered after `endpoint::handle` returned is told the listed
//!   origin here (`listed_index`, kept in the stream) and shares its head the same way.
//!
//! No `Access-Control-Allow-Credentials`: the endpoint sets no cookies, and a page sends its
//! token in `Authorization`, which a request without credentials may carry once listed here.
//!
//! Called by `endpoint::handle` and `route`, and by `runtime::conn` for the refusals it sends
//! before routing (411, 413). Never: admits a request the Host/Origin rules refuse, answers
//! `*`, or costs a request without a listed `Origin` more than a comparison per listed origin.

use crate::config::{Config, CORS_MAX_AGE_SECS, CORS_PARAM_HEADERS_MAX};
use crate::core::{Core, Request};
use crate::digits::push_decimal;
use crate::http::{write_header, write_status, Method, RequestHead, HEADERS_CAP};
use crate::wire::Status;

/// `Access-Control-Allow-Methods`: the endpoint's methods (CONTRACT §1) and the preflight's.
const ALLOWED_METHODS: &[u8] = b"GET, POST, DELETE, OPTIONS";

/// The request headers MCP clients send, both eras: the media types, a bearer token, the legacy
/// session and resume headers, our `Idempotency-Key` (CONTRACT §4, §5), and the 2026-07-28
/// routing headers (SEP-2243). Always listed whole, whatever the preflight asked for, so one
/// cached preflight covers every later request of the page.
const ALLOWED_REQUEST_HEADERS: &[u8] = b"Content-Type, Accept, Authorization, Mcp-Session-Id, \
    MCP-Protocol-Version, Last-Event-ID, Idempotency-Key, Mcp-Method, Mcp-Name";

/// The names in `ALLOWED_REQUEST_HEADERS`, lower case, to recognise them in a preflight.
const KNOWN_REQUEST_HEADERS: [&[u8]; 9] = [
    b"content-type",
    b"accept",
    b"authorization",
    b"mcp-session-id",
    b"mcp-protocol-version",
    b"last-event-id",
    b"idempotency-key",
    b"mcp-method",
    b"mcp-name",
];

/// Prefix of MCP 2026-07-28's tool parameter headers (`x-mcp-header` → `Mcp-Param-{Name}`):
/// open-ended, so each name a preflight asks for is echoed (up to `CORS_PARAM_HEADERS_MAX`).
const PARAM_HEADER_PREFIX: &[u8] = b"mcp-param-";

/// The request's `Origin` when the operator listed it (`--allowed-origin`): the origin its
/// answer is shared with. `None` without an `Origin`, or for any other one.
pub(crate) fn listed_origin<'c>(
    cfg: &'c Config,
    head: &RequestHead,
    head_bytes: &[u8],
) -> Option<&'c str> {
    let origin = head_bytes.get(head.origin.clone()?)?;
    cfg.http.allowed_origins.iter().map(String::as_str).find(|listed| listed.as_bytes() == origin)
}

/// The index in `--allowed-origin`'s list of the request's `Origin`, when listed: what a
/// stream whose head is rendered later keeps (no borrow, no copy) to share that head.
pub(crate) fn listed_index(cfg: &Config, head: &RequestHead, head_bytes: &[u8]) -> Option<usize> {
    let origin = head_bytes.get(head.origin.clone()?)?;
    cfg.http.allowed_origins.iter().position(|listed| listed.as_bytes() == origin)
}

/// Shares the answer whose head starts at `head_start` in `out` with the page of `head`'s
/// `Origin`, when that origin is listed; otherwise leaves `out` alone. Nothing written from
/// `head_start` on: the connection writes that answer's head later, and must share it there
/// (`listed_origin` before the request's bytes are released, `share_response` after the head
/// is rendered).
pub(crate) fn share_if_listed(
    cfg: &Config,
    head: &RequestHead,
    head_bytes: &[u8],
    out: &mut Vec<u8>,
    head_start: usize,
) {
    if out.len() <= head_start {
        return;
    }
    if let Some(origin) = listed_origin(cfg, head, head_bytes) {
        share_response(out, head_start, origin);
    }
}

pub(crate) use crate::wire::cors::share_response;

/// Answers a CORS preflight from a listed origin (Fetch §3.2.2: `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`): 204 with the methods and request headers the endpoint
/// takes; true when it answered (the answer is in `out`). False when `req` is no such preflight; it is then routed like any other request (an
/// `OPTIONS` gets 405). Call it only once the Host/Origin rules admitted `req`.
pub(crate) fn answer_preflight(
    core: &Core,
    req: &Request<'_>,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> bool {
    // GET, POST, DELETE and HEAD never get past this one comparison.
    if req.head.method() != Method::Other
        || listed_origin(&core.cfg, req.head, req.head_bytes).is_none()
    {
        return false;
    }
    // The head parsed once already (`http::parse_head`), but that keeps only what every request
    // needs; a preflight is rare enough to be read again here for its own headers.
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_CAP];
    let mut parsed = httparse::Request::new(&mut headers);
    let complete = matches!(parsed.parse(req.head_bytes), Ok(httparse::Status::Complete(_)));
    if !complete || parsed.method != Some("OPTIONS") {
        return false;
    }
    let fields: &[httparse::Header<'_>] = parsed.headers;
    if header_values(fields, "access-control-request-method").next().is_none() {
        return false;
    }
    let requested = header_values(fields, "access-control-request-headers");
    let private_network = header_values(fields, "access-control-request-private-network")
        .any(|value| value.eq_ignore_ascii_case(b"true"));

    write_status(out, Status::NoContent.code());
    write_header(out, "Access-Control-Allow-Methods", ALLOWED_METHODS);
    out.extend_from_slice(b"Access-Control-Allow-Headers: ");
    out.extend_from_slice(ALLOWED_REQUEST_HEADERS);
    let left_out = push_param_headers(out, requested);
    out.extend_from_slice(b"\r\nAccess-Control-Max-Age: ");
    push_decimal(out, CORS_MAX_AGE_SECS);
    out.extend_from_slice(b"\r\n");
    // Private Network Access (WICG): a page of a listed public origin calling a loopback
    // listener; the operator's listing is the consent this header asks for.
    if private_network {
        write_header(out, "Access-Control-Allow-Private-Network", b"true");
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    core.metrics.cors_preflights_total.inc();
    core.metrics.cors_headers_left_out_total.add(left_out);
    true
}

/// Appends `, <name>` for each `Mcp-Param-*` name in the `Access-Control-Request-Headers`
/// values, as requested, up to `CORS_PARAM_HEADERS_MAX`. Returns how many requested names were
/// neither one of `KNOWN_REQUEST_HEADERS` nor echoed.
fn push_param_headers<'v>(out: &mut Vec<u8>, requested: impl Iterator<Item = &'v [u8]>) -> u64 {
    let mut echoed = 0usize;
    let mut left_out = 0u64;
    let names = requested.flat_map(|value| value.split(|&b| b == b',')).map(trim_ows);
    for name in names.filter(|name| !name.is_empty()) {
        if KNOWN_REQUEST_HEADERS.iter().any(|known| name.eq_ignore_ascii_case(known)) {
            continue;
        }
        if is_param_header(name) && echoed < CORS_PARAM_HEADERS_MAX {
            out.extend_from_slice(b", ");
            out.extend_from_slice(name);
            echoed += 1;
        } else {
            left_out += 1;
        }
    }
    left_out
}

/// The values of every header line named `name` (lower case), in order.
fn header_values<'h, 'b>(
    fields: &'h [httparse::Header<'b>],
    name: &'static str,
) -> impl Iterator<Item = &'b [u8]> + 'h {
    fields.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
}

/// `Mcp-Param-<name>`, any case, where the whole is an RFC 9110 §5.6.2 token: only such a
/// name may be echoed into a header line.
fn is_param_header(name: &[u8]) -> bool {
    name.len() > PARAM_HEADER_PREFIX.len()
        && name[..PARAM_HEADER_PREFIX.len()].eq_ignore_ascii_case(PARAM_HEADER_PREFIX)
        && crate::http::is_token(name)
}

/// Strips the optional whitespace (space, tab: RFC 9110 §5.6.3) around a list element.
fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the preflight's header list echoes exactly the valid `Mcp-Param-*` names, up to
    /// the limit, and counts every other unknown name. Method: requested lists against the
    /// bytes appended and the count returned.
    #[test]
    fn param_headers_are_echoed_and_the_rest_counted() {
        let table: [(&[&str], &str, u64); 7] = [
            (&["content-type,mcp-session-id"], "", 0),
            (&[" Content-Type , MCP-Protocol-Version ", ""], "", 0),
            (&["content-type,mcp-param-region"], ", mcp-param-region", 0),
            (&["Mcp-Param-A", "mcp-param-b , x-custom"], ", Mcp-Param-A, mcp-param-b", 1),
            (&["mcp-param-", "mcp-param-a b", "mcp-param-a\"b"], "", 3),
            (&["x-one,x-two,,"], "", 2),
            (
                &["authorization, last-event-id, idempotency-key, mcp-method, mcp-name, accept"],
                "",
                0,
            ),
        ];
        for (requested, echoed, left_out) in table {
            let mut out = Vec::new();
            let got = push_param_headers(&mut out, requested.iter().map(|v| v.as_bytes()));
            assert_eq!(String::from_utf8_lossy(&out), echoed, "{requested:?}");
            assert_eq!(got, left_out, "{requested:?}");
        }
    }

    /// Goal: the names recognised in a preflight are exactly the ones the answer lists, so the
    /// two lists cannot drift apart. Method: the listed names, lower-cased, against the table.
    #[test]
    fn known_headers_are_the_listed_ones() {
        let listed: Vec<String> = String::from_utf8_lossy(ALLOWED_REQUEST_HEADERS)
            .split(", ")
            .map(str::to_ascii_lowercase)
            .collect();
        let known: Vec<String> =
            KNOWN_REQUEST_HEADERS.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
        assert_eq!(listed, known);
    }

    /// Goal: the echo stops at `CORS_PARAM_HEADERS_MAX` (N echoed, N+1 counted). Method: one
    /// value with one name more than the limit.
    #[test]
    fn param_header_echo_stops_at_the_limit() {
        let names: Vec<String> =
            (0..=CORS_PARAM_HEADERS_MAX).map(|i| format!("mcp-param-p{i}")).collect();
        let value = names.join(",");
        let mut out = Vec::new();
        let left_out = push_param_headers(&mut out, std::iter::once(value.as_bytes()));
        assert_eq!(left_out, 1);
        let echoed = String::from_utf8_lossy(&out);
        assert_eq!(echoed.matches(", mcp-param-").count(), CORS_PARAM_HEADERS_MAX);
        assert!(!echoed.contains(&names[CORS_PARAM_HEADERS_MAX]), "{echoed}");
    }

    /// Goal: the CORS lines land right after the status line, whatever follows (a body, an SSE
    /// head), and only for a listed origin. Method: rendered heads before and after.
    #[test]
    fn shared_lines_follow_the_status_line() {
        let mut out = b"earlier bytes".to_vec();
        let start = out.len();
        out.extend_from_slice(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
        share_response(&mut out, start, "http://app.example:3000");
        let want = "earlier bytesHTTP/1.1 202 Accepted\r\n\
            Access-Control-Allow-Origin: http://app.example:3000\r\n\
            Access-Control-Expose-Headers: Mcp-Session-Id, Last-Event-ID, Mcp-Stream-Resumable, \
            Retry-After, WWW-Authenticate\r\nVary: Origin\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(String::from_utf8_lossy(&out), want);

        let mut cfg = Config::test_min();
        cfg.http.allowed_origins = vec!["http://app.example:3000".into()];
        let head_bytes =
            b"GET /mcp HTTP/1.1\r\nHost: h\r\nOrigin: http://app.example:30000\r\n\r\n";
        let head = crate::http::parse_head(head_bytes, 1024, 16).expect("head").expect("complete");
        assert_eq!(listed_origin(&cfg, &head, head_bytes), None, "a longer origin");
        let head_bytes = b"GET /mcp HTTP/1.1\r\nHost: h\r\nOrigin: http://app.example:3000\r\n\r\n";
        let head = crate::http::parse_head(head_bytes, 1024, 16).expect("head").expect("complete");
        assert_eq!(listed_origin(&cfg, &head, head_bytes), Some("http://app.example:3000"));
        let mut out = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        share_if_listed(&cfg, &head, head_bytes, &mut out, 0);
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: http://app"));
        // No head written yet (the connection writes it later): nothing to share here.
        let len = out.len();
        share_if_listed(&cfg, &head, head_bytes, &mut out, len);
        assert_eq!(out.len(), len);
    }
}
