//! Incremental `text/event-stream` decoder (WHATWG HTML, "Server-sent events", §9.2.6).
//!
//! Owns: line splitting across arbitrary input boundaries (`\n`, `\r\n` and lone `\r`), the
//! `data`/`id` fields and the last-event-id buffer that persists across events.
//! Called by: `wire::ResponseParser` with de-chunked body bytes, in whatever pieces they arrive.
//! Never: interprets the JSON in `data`; that is the caller's business.

use memchr::memchr2;

/// Longest line we accept before calling the stream broken (bounds memory on a hostile server).
const LINE_BYTES_MAX: usize = 16 << 20;

/// One dispatched event. `id` is the last-event-id buffer at dispatch time (it persists across
/// events, as in the browser), `data` has the joined `data:` lines without the final newline.
/// An event whose `data:` field is present but empty (a priming event) is dispatched with empty
/// `data`; a block without any `data:` field only updates the id and is not dispatched.
#[derive(Debug)]
pub struct SseEvent<'a> {
    pub id: &'a [u8],
    pub data: &'a [u8],
}

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// The previous input ended in `\r`: a `\n` at the start of the next input belongs to it.
    pending_cr: bool,
    data: Vec<u8>,
    /// `Some` once a `data:` field was seen in the current block.
    data_present: bool,
    last_id: Vec<u8>,
}

/// The stream broke a limit; the caller treats the response as failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong;

impl SseParser {
    /// Forget everything, including the last event id (a new response starts).
    pub fn reset(&mut self) {
        self.partial.clear();
        self.pending_cr = false;
        self.data.clear();
        self.data_present = false;
        self.last_id.clear();
    }

    /// Decodes `input`, calling `sink` once per dispatched event.
    pub fn feed<F>(&mut self, mut input: &[u8], sink: &mut F) -> Result<(), LineTooLong>
    where
        F: FnMut(SseEvent<'_>),
    {
        if self.pending_cr && !input.is_empty() {
            self.pending_cr = false;
            if input[0] == b'\n' {
                input = &input[1..];
            }
        }
        while let Some(end) = memchr2(b'\r', b'\n', input) {
            if self.partial.is_empty() {
                self.line(&input[..end], sink);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&input[..end]);
                self.line(&line, sink);
                line.clear();
                self.partial = line;
            }
            let terminator = input[end];
            input = &input[end + 1..];
            if terminator == b'\r' {
                match input.first() {
                    Some(b'\n') => input = &input[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
        }
        if self.partial.len() + input.len() > LINE_BYTES_MAX {
            return Err(LineTooLong);
        }
        self.partial.extend_from_slice(input);
        Ok(())
    }

    fn line<F>(&mut self, line: &[u8], sink: &mut F)
    where
        F: FnMut(SseEvent<'_>),
    {
        if line.is_empty() {
            self.dispatch(sink);
            return;
        }
        if line[0] == b':' {
            return; // comment (keep-alive)
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.data_present = true;
            }
            // An id containing NUL is ignored (WHATWG).
            b"id" if !value.contains(&0) => {
                self.last_id.clear();
                self.last_id.extend_from_slice(value);
            }
            _ => {} // `event` (all events are messages here), `retry`, unknown fields
        }
    }

    fn dispatch<F>(&mut self, sink: &mut F)
    where
        F: FnMut(SseEvent<'_>),
    {
        if self.data_present {
            let data = self.data.strip_suffix(b"\n").unwrap_or(&self.data);
            sink(SseEvent { id: &self.last_id, data });
        }
        self.data.clear();
        self.data_present = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> Vec<(String, String)> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            parser
                .feed(piece, &mut |ev: SseEvent<'_>| {
                    out.push((
                        String::from_utf8_lossy(ev.id).into_owned(),
                        String::from_utf8_lossy(ev.data).into_owned(),
                    ))
                })
                .unwrap();
        }
        out
    }

    #[test]
    fn priming_then_messages_in_any_split() {
        let text: &[u8] =
            b"id: 7\nretry: 3000\ndata: \n\nid: 8\ndata: {\"a\":1}\n\n: ka\n\ndata: x\ndata: y\n\n";
        let want = vec![
            ("7".to_owned(), String::new()),
            ("8".to_owned(), "{\"a\":1}".to_owned()),
            ("8".to_owned(), "x\ny".to_owned()),
        ];
        assert_eq!(decode(&[text]), want);
        for split in 0..text.len() {
            assert_eq!(decode(&[&text[..split], &text[split..]]), want, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(decode(&bytes), want);
    }

    #[test]
    fn crlf_and_lone_cr_line_ends() {
        let want = vec![("1".to_owned(), "a".to_owned()), ("2".to_owned(), "b".to_owned())];
        assert_eq!(decode(&[b"id: 1\r\ndata: a\r\n\r\nid: 2\rdata: b\r\r"]), want);
        assert_eq!(decode(&[b"id: 1\r", b"\ndata: a\r", b"\n\r", b"\nid: 2\rdata: b\r\r"]), want);
    }

    #[test]
    fn block_without_data_only_sets_the_id() {
        assert_eq!(decode(&[b"id: 5\n\ndata: z\n\n"]), vec![("5".to_owned(), "z".to_owned())]);
    }
}
