//! Server-Sent Events framing (WHATWG HTML §9.2): encodes `id:`/`retry:`/`data:` frames and
//! keep-alive comments into a buffer the caller supplies, and wraps a batch of frames as one
//! HTTP/1.1 chunk (runtime-notes §4: one chunk per flush is 40× cheaper than one per event).
//!
//! Pure: no I/O, no allocation beyond the caller's buffer growing.

use crate::http::push_hex;

/// Appends one event. `data` is split on line breaks into several `data:` lines, so a payload
/// with newlines can never end the event early or inject a field.
pub fn push_event(out: &mut Vec<u8>, id: Option<&[u8]>, retry_ms: Option<u64>, data: &[u8]) {
    push_fields(out, id, retry_ms);
    if data.is_empty() {
        out.extend_from_slice(b"data: \n");
    }
    push_data_lines(out, data);
    out.push(b'\n');
}

/// [`push_event`] of the data `head` then `data` without joining them (a replay ring keeps a
/// progress notification's fixed opening apart, issue 43 §2). `head` holds no line break, so
/// it opens the first `data:` line.
pub(crate) fn push_event_after(
    out: &mut Vec<u8>,
    id: Option<&[u8]>,
    retry_ms: Option<u64>,
    head: &[u8],
    data: &[u8],
) {
    if head.is_empty() {
        return push_event(out, id, retry_ms, data);
    }
    debug_assert!(memchr::memchr2(b'\n', b'\r', head).is_none(), "head holds no line break");
    push_fields(out, id, retry_ms);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(head);
    let end = memchr::memchr2(b'\n', b'\r', data).unwrap_or(data.len());
    out.extend_from_slice(&data[..end]);
    out.push(b'\n');
    push_data_lines(out, after_line_break(data, end));
    out.push(b'\n');
}

/// The `id:` and `retry:` fields of an event, when given.
fn push_fields(out: &mut Vec<u8>, id: Option<&[u8]>, retry_ms: Option<u64>) {
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id);
        out.push(b'\n');
    }
    if let Some(ms) = retry_ms {
        out.extend_from_slice(b"retry: ");
        crate::digits::push_decimal(out, ms);
        out.push(b'\n');
    }
}

/// One `data:` line per line of `data` (none when it is empty).
fn push_data_lines(out: &mut Vec<u8>, data: &[u8]) {
    let mut rest = data;
    while !rest.is_empty() {
        // SIMD: a JSON payload (no raw line break) is one search, not a test per byte (~4
        // instructions a byte, most of an echo event's framing: callgrind).
        let end = memchr::memchr2(b'\n', b'\r', rest).unwrap_or(rest.len());
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&rest[..end]);
        out.push(b'\n');
        rest = after_line_break(rest, end);
    }
}

/// `data` after the line that ends at `end` and its line break (CR, LF or CRLF).
fn after_line_break(data: &[u8], end: usize) -> &[u8] {
    let mut skip = end;
    if data.get(skip) == Some(&b'\r') {
        skip += 1;
    }
    if data.get(skip) == Some(&b'\n') {
        skip += 1;
    }
    &data[skip..]
}

/// Appends a keep-alive comment line.
pub(crate) fn push_comment(out: &mut Vec<u8>) {
    out.extend_from_slice(b": keep-alive\n\n");
}

/// Appends `frames` as one HTTP/1.1 chunk (RFC 9112 §7.1).
pub(crate) fn push_chunk(out: &mut Vec<u8>, frames: &[u8]) {
    push_hex(out, frames.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(frames);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk of a chunked body.
pub(crate) const CHUNK_END: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A minimal WHATWG-style decoder for round-trip tests: returns (id, data) per event.
    fn decode(s: &[u8]) -> Vec<(Option<String>, String)> {
        let text = String::from_utf8_lossy(s);
        let mut out = Vec::new();
        for block in text.split("\n\n").filter(|b| !b.is_empty()) {
            let mut id = None;
            let mut data: Vec<&str> = Vec::new();
            for line in block.split('\n') {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push(v);
                }
            }
            out.push((id, data.join("\n")));
        }
        out
    }

    #[test]
    fn priming_event_has_id_retry_and_empty_data() {
        let mut out = Vec::new();
        push_event(&mut out, Some(b"a-1"), Some(1000), b"");
        assert_eq!(out, b"id: a-1\nretry: 1000\ndata: \n\n");
    }

    #[test]
    fn frames_become_one_chunk() {
        let mut frames = Vec::new();
        push_event(&mut frames, None, None, b"{}");
        let mut out = b"HEAD".to_vec();
        push_chunk(&mut out, &frames);
        assert_eq!(out, b"HEADa\r\ndata: {}\n\n\r\n");
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(id in "[a-z0-9-]{1,20}", data in "[ -~\n]{0,80}") {
            let mut out = Vec::new();
            push_event(&mut out, Some(id.as_bytes()), None, data.as_bytes());
            let events = decode(&out);
            prop_assert_eq!(events.len(), 1);
            prop_assert_eq!(events[0].0.as_deref(), Some(id.as_str()));
            // Empty lines inside data collapse (a blank line would end the event): compare
            // without them, as a client sees the same JSON either way.
            let want: Vec<&str> = data.split('\n').filter(|l| !l.is_empty()).collect();
            let got: Vec<&str> = events[0].1.split('\n').filter(|l| !l.is_empty()).collect();
            prop_assert_eq!(got, want);
        }

        // Goal: an event written as a head without line breaks and the rest (a replay ring's
        // elided prefix) is byte for byte the event of the joined data. Method: both ways, any
        // data with line breaks (CR, LF, CRLF), empty heads and data included.
        #[test]
        fn head_then_data_is_the_joined_event(
            head in "[ -~]{0,20}", data in "[ -~\r\n]{0,80}", retry in any::<bool>()
        ) {
            let retry = retry.then_some(1000);
            let (mut split, mut joined) = (Vec::new(), Vec::new());
            push_event_after(&mut split, Some(b"7"), retry, head.as_bytes(), data.as_bytes());
            push_event(&mut joined, Some(b"7"), retry, format!("{head}{data}").as_bytes());
            prop_assert_eq!(split, joined);
        }
    }
}
