//! `sse`: the SSE event encoder (`push_event`) against an independent decoder that follows the
//! WHATWG HTML "event stream interpretation" (§9.2.6) to the letter.
//!
//! Input: a flags byte (bit 0: with an id, bit 1: with a retry), 16 bytes of (tag, stream, seq)
//! for the id (encoded by `push_event_id`, as the server does), 8 bytes of retry, then the
//! payload. Missing bytes are zeros.
//!
//! Properties: the encoding is one event ending at its only blank line; a decoder sees exactly
//! one event whose data is the payload with its line breaks (CRLF, CR, LF) as LF and without a
//! final one (SSE cannot carry it; JSON payloads never end with one); the last event id and the
//! retry are the ones given; the same event twice decodes as two equal events.

use tidemark::fuzz_support::{push_event, push_event_id, EventSeq, StreamKey};

/// Bytes before the payload.
const HEADER_LEN: usize = 1 + 16 + 8;

pub fn check(data: &[u8]) {
    let mut header = [0u8; HEADER_LEN];
    let n = data.len().min(HEADER_LEN);
    header[..n].copy_from_slice(&data[..n]);
    let payload = &data[n..];
    let le = |range: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..range.len()].copy_from_slice(&header[range]);
        u64::from_le_bytes(b)
    };
    let id = (header[0] & 1 != 0).then(|| {
        let mut id = Vec::new();
        let (tag, stream) = (le(1..5) as u32, StreamKey(le(5..9) as u32));
        push_event_id(&mut id, tag, stream, EventSeq(le(9..17)));
        id
    });
    let retry = (header[0] & 2 != 0).then(|| le(17..25));

    let mut out = Vec::new();
    push_event(&mut out, id.as_deref(), retry, payload);
    assert!(out.ends_with(b"\n\n"), "event does not end with a blank line");
    let first_blank = out.windows(2).position(|w| w == b"\n\n");
    assert_eq!(first_blank, Some(out.len() - 2), "blank line inside the event: {out:?}");

    let decoded = Decoder::run(&out);
    assert_eq!(decoded.events, vec![expected_data(payload)], "encoded: {out:?}");
    assert_eq!(decoded.last_event_id, id.unwrap_or_default());
    assert_eq!(decoded.retry, retry);

    let twice = [out.as_slice(), out.as_slice()].concat();
    let decoded = Decoder::run(&twice);
    assert_eq!(decoded.events.len(), 2, "two events: {twice:?}");
    assert_eq!(decoded.events[0], decoded.events[1]);
}

/// The payload as a client's `MessageEvent.data`: line breaks normalised to LF, one final LF
/// dropped (WHATWG: "If the data buffer's last character is a U+000A LINE FEED (LF) character,
/// then remove the last character from the data buffer").
fn expected_data(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    let mut i = 0;
    while i < payload.len() {
        match payload[i] {
            b'\r' => {
                out.push(b'\n');
                if payload.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

/// WHATWG HTML §9.2.6 over bytes (the spec decodes UTF-8 first; byte-wise is equivalent for
/// these fields, whose delimiters are ASCII). Event types are ignored: tidemark sends none.
#[derive(Default)]
struct Decoder {
    events: Vec<Vec<u8>>,
    data: Vec<u8>,
    /// The last event id buffer: set by `id` fields, kept across events.
    last_event_id: Vec<u8>,
    retry: Option<u64>,
}

impl Decoder {
    fn run(stream: &[u8]) -> Decoder {
        let mut d = Decoder::default();
        let mut rest = stream;
        // A line ends at CRLF, CR or LF; bytes after the last line end are an incomplete line
        // and are dropped (as at the end of a stream).
        while let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
            d.line(&rest[..end]);
            let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') { 2 } else { 1 };
            rest = &rest[end + skip..];
        }
        d
    }

    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let v = &line[colon + 1..];
                (&line[..colon], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"id" if !value.contains(&0) => self.last_event_id = value.to_vec(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            }
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        if self.data.is_empty() {
            return;
        }
        if self.data.last() == Some(&b'\n') {
            self.data.pop();
        }
        self.events.push(std::mem::take(&mut self.data));
    }
}
