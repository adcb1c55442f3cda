//! `http_head`: the request-head parser (`tidemark::fuzz_support::parse_head`) on arbitrary bytes.
//!
//! Input: one control byte, then the bytes the server would have in its read buffer. A control
//! byte below 0x80 keeps the server's default limits (16 KiB, 64 headers); from 0x80 on it picks
//! small ones, so the 431 refusals are reached too.
//!
//! Properties: no panic; a complete head lies inside the buffer and the limits, and every range
//! lies inside the head; the head alone (without what follows it) parses to the same value; every
//! proper prefix of a complete head is "need more bytes" (`Ok(None)`), so the answer never depends
//! on where TCP split the head; "need more" never exceeds the byte limit.

use std::ops::Range;

use tidemark::fuzz_support::{parse_head, RequestHead};

/// The server's defaults (`config::HEADER_BYTES_MAX`, `config::HEADERS_MAX`).
const HEADER_BYTES_MAX: usize = 16 * 1024;
const HEADERS_MAX: usize = 64;
/// Prefixes checked per complete head (evenly spread, plus the one a byte short).
const PREFIX_CHECKS: usize = 16;

pub fn check(data: &[u8]) {
    let Some((&control, buf)) = data.split_first() else { return };
    let (bytes_max, headers_max) = if control < 0x80 {
        (HEADER_BYTES_MAX, HEADERS_MAX)
    } else {
        (16 + usize::from(control & 0x3f) * 8, 1 + usize::from(control >> 2 & 0x0f))
    };
    match parse_head(buf, bytes_max, headers_max) {
        Ok(Some(head)) => complete(buf, &head, bytes_max, headers_max),
        Ok(None) => assert!(buf.len() <= bytes_max, "need-more past the byte limit"),
        Err(_) => {}
    }
}

fn complete(buf: &[u8], head: &RequestHead, bytes_max: usize, headers_max: usize) {
    let len = head.head_len;
    assert!(len <= buf.len(), "head_len {len} past the buffer ({})", buf.len());
    assert!(len <= bytes_max, "head_len {len} past the limit {bytes_max}");
    assert!(buf[..len].ends_with(b"\n"), "a head ends with its blank line");
    for (name, range) in ranges(head) {
        assert!(range.start <= range.end, "{name}: reversed range {range:?}");
        assert!(range.end <= len, "{name}: range {range:?} past the head ({len})");
    }
    let alone = parse_head(&buf[..len], bytes_max, headers_max);
    assert_eq!(alone.as_ref().ok().and_then(Option::as_ref), Some(head), "head alone: {alone:?}");
    let step = (len / PREFIX_CHECKS).max(1);
    let prefixes = (0..len).step_by(step).chain(std::iter::once(len - 1));
    for cut in prefixes {
        let got = parse_head(&buf[..cut], bytes_max, headers_max);
        assert_eq!(got, Ok(None), "prefix of {cut} of a {len}-byte head");
    }
}

fn ranges(head: &RequestHead) -> Vec<(&'static str, Range<usize>)> {
    let optional = [
        ("content_type", &head.content_type),
        ("accept", &head.accept),
        ("session_id", &head.session_id),
        ("protocol_version", &head.protocol_version),
        ("last_event_id", &head.last_event_id),
        ("origin", &head.origin),
        ("host", &head.host),
        ("idempotency_key", &head.idempotency_key),
        ("conflict", &head.conflict),
    ];
    let mut all = vec![("path", head.path.clone())];
    all.extend(optional.into_iter().filter_map(|(n, r)| r.clone().map(|r| (n, r))));
    all
}
