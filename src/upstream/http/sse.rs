//! The `text/event-stream` decoder (WHATWG HTML, "Server-sent events", §9.2.6) for the
//! upstream's SSE responses: POST answers, their resumptions and the standalone `GET` stream.
//!
//! Owns: `SseDecoder` (lines, fields, dispatched events, the last event id and the `retry:`
//! hint) and its bounds: an event's data within `--upstream-line-bytes`, a line within that
//! plus `FIELD_NAME_BYTES_MAX`, an event id within `EVENT_ID_BYTES_MAX`.
//! Called by: the transport's streams (`Stream` in `mod.rs`), with the de-framed body pieces
//! read from a response; the client-side bridge (`connect`), the same way.
//! Never: does I/O, reads an event's data (JSON is the transport's), or panics on what the
//! upstream sends: every break of a bound is an `HttpError`.

use std::time::Duration;

use super::error::HttpError;

/// Room for a field name (`data: `) in an SSE line beyond `--upstream-line-bytes` of value.
const FIELD_NAME_BYTES_MAX: usize = 16;
/// Longest event id resumed from (echoed in `Last-Event-ID`); a longer one counts as none.
const EVENT_ID_BYTES_MAX: usize = 1024;

/// Incremental `text/event-stream` decoder (WHATWG HTML, "Server-sent events", §9.2.6) for
/// bytes in any pieces: lines end in CRLF, LF or CR; `data` lines join with LF; `id` is the
/// stream's last event id once its event is dispatched; `retry` sets the reconnection time;
/// comments and other fields (`event`) are skipped.
pub(crate) struct SseDecoder {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last byte seen was CR: an LF next belongs to it.
    after_cr: bool,
    data: Vec<u8>,
    /// `data` holds at least one `data` field of the current event.
    has_data: bool,
    /// The `id` field of the current event, committed at its dispatch.
    id_pending: Option<String>,
    last_id: Option<String>,
    retry: Option<Duration>,
    /// The longest line and the longest event data.
    limit: usize,
    /// Events dispatched (with data, empty included) since the stream began.
    events: u64,
}

impl SseDecoder {
    pub(crate) fn new(limit: usize) -> SseDecoder {
        SseDecoder {
            line: Vec::new(),
            after_cr: false,
            data: Vec::new(),
            has_data: false,
            id_pending: None,
            last_id: None,
            retry: None,
            limit,
            events: 0,
        }
    }

    /// The last event id, to resume after.
    pub(crate) fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The longest line: an event's data plus room for its field name.
    fn line_max(&self) -> usize {
        self.limit.saturating_add(FIELD_NAME_BYTES_MAX)
    }

    /// Events dispatched so far, over every response of the stream.
    pub(super) fn events(&self) -> u64 {
        self.events
    }

    /// The reconnection time the stream asked for.
    pub(crate) fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// A new response of the same stream begins: an event cut off by the old one is dropped,
    /// the last event id and retry time stay.
    pub(crate) fn restart(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.data.clear();
        self.has_data = false;
        self.id_pending = None;
    }

    /// Decodes `input`, calling `sink` with the data of each dispatched event.
    pub(crate) fn feed(
        &mut self,
        mut input: &[u8],
        sink: &mut impl FnMut(&[u8]),
    ) -> Result<(), HttpError> {
        if input.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.after_cr) && input[0] == b'\n' {
            input = &input[1..];
        }
        while let Some(end) = input.iter().position(|&b| b == b'\r' || b == b'\n') {
            if self.line.len() + end > self.line_max() {
                return Err(HttpError::TooLarge);
            }
            if self.line.is_empty() {
                self.field(&input[..end], sink)?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&input[..end]);
                self.field(&line, sink)?;
                line.clear();
                self.line = line;
            }
            let cr = input[end] == b'\r';
            input = &input[end + 1..];
            if cr {
                match input.first() {
                    Some(b'\n') => input = &input[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if self.line.len() + input.len() > self.line_max() {
            return Err(HttpError::TooLarge);
        }
        self.line.extend_from_slice(input);
        Ok(())
    }

    /// One complete line.
    fn field(&mut self, line: &[u8], sink: &mut impl FnMut(&[u8])) -> Result<(), HttpError> {
        if line.is_empty() {
            self.dispatch(sink);
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(()),
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.limit {
                    return Err(HttpError::TooLarge);
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.has_data = true;
            }
            b"id" if !value.contains(&0) => {
                // An id we could not send back in `Last-Event-ID` is as good as none.
                let usable = value.len() <= EVENT_ID_BYTES_MAX
                    && value.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
                self.id_pending = Some(if usable {
                    String::from_utf8_lossy(value).into_owned()
                } else {
                    String::new()
                });
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Ok(ms) = std::str::from_utf8(value).unwrap_or("").parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, sink: &mut impl FnMut(&[u8])) {
        if let Some(id) = self.id_pending.take() {
            self.last_id = Some(id).filter(|id| !id.is_empty());
        }
        if self.has_data {
            self.events += 1;
            let data = self.data.strip_suffix(b"\n").unwrap_or(&self.data);
            sink(data);
        }
        self.data.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `pieces` as one event stream: the data of each event, and the decoder.
    fn events(pieces: &[&[u8]], limit: usize) -> (Result<Vec<String>, HttpError>, SseDecoder) {
        let mut decoder = SseDecoder::new(limit);
        let mut out = Vec::new();
        for piece in pieces {
            let fed = decoder
                .feed(piece, &mut |d: &[u8]| out.push(String::from_utf8_lossy(d).into_owned()));
            if let Err(e) = fed {
                return (Err(e), decoder);
            }
        }
        (Ok(out), decoder)
    }

    const STREAM: &[u8] = b": keep-alive\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n\
        event: message\nid: 2\ndata\n\nretry: 1500\rdata: x\r\rid: 3\n: comment only\n\n\
        data:no-space\ndata:  two spaces\nunknown: field\n\n";

    #[test]
    fn sse_events_join_data_lines_under_every_line_ending() {
        // Goal: multi-line data, CRLF/LF/CR endings, comments, empty `data`, `retry`, and the
        // last id committed at dispatch. Method: one stream with all of them, fed whole.
        let (out, decoder) = events(&[STREAM], 1 << 20);
        let expected = ["{\"a\":\n1}", "", "x", "no-space\n two spaces"];
        assert_eq!(out.expect("decodes"), expected);
        assert_eq!(decoder.last_id(), Some("3"));
        assert_eq!(decoder.retry(), Some(Duration::from_millis(1500)));
        assert_eq!(decoder.events(), 4);
    }

    #[test]
    fn sse_decoding_does_not_depend_on_where_the_input_is_split() {
        // Goal: the same events whatever the read boundaries, CR|LF pairs split included.
        // Method: split the stream at every byte boundary, and feed it byte by byte.
        let (whole, _) = events(&[STREAM], 1 << 20);
        let whole = whole.expect("decodes");
        for cut in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            let (out, decoder) = events(&[a, b], 1 << 20);
            assert_eq!(out.expect("decodes"), whole, "cut at {cut}");
            assert_eq!(decoder.last_id(), Some("3"), "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(events(&bytes, 1 << 20).0.expect("decodes"), whole);
    }

    #[test]
    fn sse_ids_count_only_once_their_event_is_dispatched() {
        // Goal: an id whose event was cut off is not resumed from (its event was never seen);
        // an empty id clears it; an id with NUL is ignored. Method: streams cut mid-event.
        let (_, decoder) = events(&[b"id: 1\ndata: a\n\nid: 2\ndata: b\n"], 1024);
        assert_eq!(decoder.last_id(), Some("1"));
        let (_, decoder) = events(&[b"id: 1\n\nid\n\n"], 1024);
        assert_eq!(decoder.last_id(), None);
        let (_, decoder) = events(&[b"id: 1\n\nid: a\0b\n\n"], 1024);
        assert_eq!(decoder.last_id(), Some("1"));
        let (_, mut decoder) = events(&[b"id: 5\n\ndata: cut"], 1024);
        decoder.restart();
        let mut out = Vec::new();
        decoder.feed(b"data: whole\n\n", &mut |d: &[u8]| out.push(d.to_vec())).expect("decodes");
        assert_eq!(out, [b"whole".to_vec()]);
        assert_eq!(decoder.last_id(), Some("5"));
    }

    #[test]
    fn sse_lines_and_events_beyond_the_limit_are_refused() {
        // Goal: an event's data (its lines joined, LF included) stays within the limit, and no
        // line grows past the limit plus a field name. Method: limit 16 at N and N+1.
        let fits = events(&[b"data: 0123456789abcde\n\n"], 16).0.expect("15 bytes + LF fit");
        assert_eq!(fits, ["0123456789abcde"]);
        assert_eq!(events(&[b"data: 0123456789abcdef\n\n"], 16).0, Err(HttpError::TooLarge));
        let many = events(&[b"data: 0123456\ndata: 0123456\n\n"], 16).0;
        assert_eq!(many.expect("8 + 8 bytes fit"), ["0123456\n0123456"]);
        let many = events(&[b"data: 0123456\ndata: 01234567\n\n"], 16).0;
        assert_eq!(many, Err(HttpError::TooLarge));
        let line = [b"x: ".as_slice(), &[b'y'; 16 + FIELD_NAME_BYTES_MAX - 3]].concat();
        assert!(events(&[&line], 16).0.is_ok(), "an unfinished line at the bound waits");
        let line = [line.as_slice(), b"y"].concat();
        assert_eq!(events(&[&line], 16).0, Err(HttpError::TooLarge));
    }
}
