//! The CORS header lines of an answer shared with a listed origin (WHATWG Fetch §3.2), as
//! bytes: inserted right after the status line of an answer already rendered, so one place
//! covers every kind of answer, including a head rendered late (a 2026-07-28 call's, once it
//! is known to be SSE or JSON).
//!
//! Called by `endpoint::cors` (which decides whether an origin is listed) and by the modern
//! streams that render their head after `endpoint::handle` returned (`Answer::render_shared`).
//! Never: decides which origins are listed, or answers `*`.

/// The CORS header lines of every answer to a listed origin, around the echoed origin. Exposed:
/// the session id a page must send back, the resume headers of a 409 (CONTRACT §4) and SSE
/// heads, the `Retry-After` of a 503, and the `WWW-Authenticate` challenge of a 401/403 (a
/// page's OAuth client finds the resource metadata there); `Content-Type` and `Content-Length` are readable
/// anyway (CORS-safelisted response headers).
const SHARE_BEFORE_ORIGIN: &[u8] = b"Access-Control-Allow-Origin: ";
const SHARE_AFTER_ORIGIN: &[u8] = b"\r\nAccess-Control-Expose-Headers: Mcp-Session-Id, \
    Last-Event-ID, Mcp-Stream-Resumable, Retry-After, WWW-Authenticate\r\nVary: Origin\r\n";

/// Inserts the CORS header lines for `origin` right after the status line of the answer whose
/// head starts at `head_start` in `out` (the body, if any, moves along: one `memmove`).
pub(crate) fn share_response(out: &mut Vec<u8>, head_start: usize, origin: &str) {
    let status_line_len =
        out.get(head_start..).and_then(|head| head.windows(2).position(|w| w == b"\r\n"));
    debug_assert!(status_line_len.is_some(), "invariant: every answer starts with a status line");
    let Some(status_line_len) = status_line_len else { return };
    let at = head_start + status_line_len + 2;
    let lines =
        SHARE_BEFORE_ORIGIN.iter().chain(origin.as_bytes()).chain(SHARE_AFTER_ORIGIN).copied();
    out.splice(at..at, lines);
}
