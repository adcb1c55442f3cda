//! What the first bytes of an upstream line too long to take (`--upstream-line-bytes`) say
//! about it: the answer to one of our requests (its id), some other message, or nothing that
//! can be told. The stdio reader (`stdio::read_stdout`) fails that one call at once in the
//! first case, skips the line in the second, and resets the link in the third, so no call waits
//! out `--upstream-timeout-secs` for an answer that arrived but could not be taken.
//!
//! Reads only the top-level members of a JSON object, within a prefix of at most
//! `HEAD_SCAN_BYTES`: nested values are skipped by depth, strings by their quotes and escapes.
//! An `"id"` inside a nested value (a log message's text, a schema) is never taken for the
//! message's own. Never: allocates, reads past the prefix, or guesses.
//!
//! The same reading finds a whole line that is a plain answer (`plain_answer`): the stdio
//! reader, and the HTTP transport for a body or event, take such a message without running
//! `serde_json` over the members around its result.

use serde_json::value::RawValue;

/// Bytes of an over-long line's start scanned for its members: `{"jsonrpc": "2.0", "id": 17,
/// "result": ` is 40 bytes as JSON libraries write it; 1024 leaves room for members written
/// before the id (`_meta`, a long `jsonrpc` spelling) without reading further into the line.
pub(crate) const HEAD_SCAN_BYTES: usize = 1024;

/// What an over-long line's start says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// A response (`result` or `error` follows the numeric `id`): the answer to request `id`.
    Answer(u64),
    /// A request or notification from the upstream (`method` comes first, or the id is not a
    /// number, which tidemark never sends): no call of ours waits for it.
    Other,
    /// Not a JSON object, or its kind is not known within the prefix.
    Unknown,
}

/// Reads `prefix` (the start of a line) for its kind; see `Head`.
pub(crate) fn read(prefix: &[u8]) -> Head {
    let mut at = Cursor { bytes: &prefix[..prefix.len().min(HEAD_SCAN_BYTES)], at: 0 };
    if at.next_token() != Some(b'{') {
        return Head::Unknown;
    }
    let mut id: Option<u64> = None;
    loop {
        let Some(key) = at.key() else { return Head::Unknown };
        match key {
            b"method" => return Head::Other,
            b"result" | b"error" => return id.map_or(Head::Unknown, Head::Answer),
            b"id" => match at.number() {
                Some(Some(n)) => id = Some(n),
                Some(None) => return Head::Other,
                None => return Head::Unknown,
            },
            _ => {
                if !at.skip_value() {
                    return Head::Unknown;
                }
            }
        }
        if at.next_token() != Some(b',') {
            return Head::Unknown;
        }
    }
}

/// A whole line that is exactly a plain answer, `{"jsonrpc":"2.0","id":N,"result":…}` in any
/// member order with JSON whitespace around its tokens: its id and its result's text, checked
/// by `serde_json` to be one JSON value (as `Box<RawValue>` is by the full parse). `None` for
/// any other line (a member beyond these three, one given twice, a `jsonrpc` other than
/// `"2.0"`, an id that is not an unsigned integer as JSON writes one, an escaped key, a result
/// that is not JSON, anything after the object but whitespace), which then goes through the
/// full parse. The two readings agree on every line this one takes
/// (`plain_answers_agree_with_the_full_parse`), except that the result's check starts its
/// nesting count one level higher: a result nested right at `serde_json`'s depth limit is
/// taken here where the full parse skipped it. Reading a bridged echo's answer line cost 2 790
/// instructions with `serde_json` and costs 1 743 so, most of it the result's check (callgrind,
/// issue 43 item 1).
pub(crate) fn plain_answer(line: &[u8]) -> Option<(u64, &RawValue)> {
    let mut at = Cursor { bytes: line, at: 0 };
    if at.next_token()? != b'{' {
        return None;
    }
    let (mut id, mut result, mut jsonrpc) = (None, None, false);
    loop {
        match at.key()? {
            b"id" if id.is_none() => id = Some(at.plain_id()?),
            b"jsonrpc" if !jsonrpc => {
                at.skip_whitespace();
                jsonrpc = at.bytes.get(at.at..at.at + 5)? == br#""2.0""#;
                at.at += 5;
                if !jsonrpc {
                    return None;
                }
            }
            b"result" if result.is_none() => {
                // Checked as it is found: `serde_json` reads one value and says where it ends.
                let rest = &line[at.at..];
                let mut values = serde_json::Deserializer::from_slice(rest).into_iter();
                result = Some(values.next()?.ok()?);
                at.at += values.byte_offset();
            }
            _ => return None,
        }
        match at.next_token()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    at.skip_whitespace();
    if at.at != line.len() || !jsonrpc {
        return None;
    }
    Some((id?, result?))
}

/// A position in the prefix.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// The next byte that is not JSON whitespace, consumed.
    fn next_token(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes.get(self.at) {
            self.at += 1;
            if !matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
                return Some(b);
            }
        }
        None
    }

    /// A member's key (the raw bytes between its quotes) and the `:` after it.
    fn key(&mut self) -> Option<&[u8]> {
        if self.next_token()? != b'"' {
            return None;
        }
        let start = self.at;
        self.skip_string()?;
        let key = &self.bytes[start..self.at - 1];
        (self.next_token()? == b':').then_some(key)
    }

    /// Past a string whose opening quote was consumed; `None` when the prefix ends in it.
    fn skip_string(&mut self) -> Option<()> {
        while let Some(&b) = self.bytes.get(self.at) {
            self.at += 1;
            match b {
                b'\\' => self.at += 1,
                b'"' => return Some(()),
                _ => {}
            }
        }
        None
    }

    /// Past JSON whitespace.
    fn skip_whitespace(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    /// An `id` that is an unsigned integer written as JSON writes one (no sign, fraction,
    /// exponent or leading zero) and fits a `u64`; `None` for anything else.
    fn plain_id(&mut self) -> Option<u64> {
        self.skip_whitespace();
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&b) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.bytes[start] == b'0';
        let more = matches!(self.bytes.get(self.at), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !more).then_some(n)
    }

    /// The `id` value: `Some(Some(n))` an unsigned integer, `Some(None)` a value of another
    /// kind (a string id), `None` when the prefix ends first.
    fn number(&mut self) -> Option<Option<u64>> {
        let first = self.next_token()?;
        if !first.is_ascii_digit() {
            self.at -= 1;
            return self.skip_value().then_some(None);
        }
        let mut n = u64::from(first - b'0');
        while let Some(&b) = self.bytes.get(self.at) {
            if !b.is_ascii_digit() {
                // A fraction or exponent is not one of our ids.
                let integer = !matches!(b, b'.' | b'e' | b'E');
                return Some(integer.then_some(n));
            }
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.at += 1;
        }
        None
    }

    /// Past one value (a string, or a scalar or container up to the `,` or `}` after it);
    /// false when the prefix ends first.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b'"' => {
                    self.at += 1;
                    if self.skip_string().is_none() {
                        return false;
                    }
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => return true,
                b'}' | b']' => depth -= 1,
                b',' if depth == 0 => return true,
                _ => {}
            }
            self.at += 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn each_kind_of_line_start() {
        let cases: [(&str, Head); 14] = [
            (r#"{"jsonrpc": "2.0", "id": 17, "result": {"content": ["#, Head::Answer(17)),
            (r#"{"id":3,"jsonrpc":"2.0","error":{"code""#, Head::Answer(3)),
            (r#" { "jsonrpc" : "2.0" , "id" : 0 , "result" :"#, Head::Answer(0)),
            (r#"{"_meta":{"id":9,"x":[1,{"y":"}"}]},"id":4,"result":"#, Head::Answer(4)),
            (r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"id":5"#, Head::Other),
            (r#"{"jsonrpc":"2.0","id":1001,"method":"sampling/createMessage""#, Head::Other),
            (r#"{"jsonrpc":"2.0","id":"abc","result":"#, Head::Other),
            (r#"{"jsonrpc":"2.0","result":{"content":[],"id":3"#, Head::Unknown),
            (r#"{"jsonrpc":"2.0","id":1.5,"result":"#, Head::Other),
            (r#"{"jsonrpc":"2.0","id":99999999999999999999999,"result":"#, Head::Unknown),
            (r#"{"jsonrpc":"2.0","id":12"#, Head::Unknown),
            (r#"{"jsonrpc":"2.\"0\\","id":2,"error":"#, Head::Answer(2)),
            (r#"[{"id":1,"result":"#, Head::Unknown),
            ("not json at all", Head::Unknown),
        ];
        for (line, want) in cases {
            assert_eq!(read(line.as_bytes()), want, "{line}");
        }
    }

    #[test]
    fn plain_answers_agree_with_the_full_parse() {
        // Goal: a line the scan takes is that answer as `serde_json` reads the whole line (the
        // same id and result), and every other shape goes to the full parse. Method: table;
        // the taken ones compared with the line parsed as a value.
        let taken = [
            (r#"{"id":2,"jsonrpc":"2.0","result":{"content":[{"text":"hi","type":"text"}]}}"#, 2),
            (r#"{"jsonrpc":"2.0","id":0,"result":{}}"#, 0),
            (" {\t\"result\" : [1,\"}\",{\"a\":null}] ,\"jsonrpc\":\"2.0\", \"id\" : 18446744073709551615 } ", u64::MAX),
            (r#"{"result":"x,}","id":7,"jsonrpc":"2.0"}"#, 7),
            (r#"{"id":9,"result":5,"jsonrpc":"2.0"}"#, 9),
        ];
        for (line, id) in taken {
            let (found, result) = plain_answer(line.as_bytes()).expect(line);
            let full: Value = serde_json::from_str(line).expect(line);
            assert_eq!(found, id, "{line}");
            assert_eq!(full["id"].as_u64(), Some(id), "{line}");
            let result: Value = serde_json::from_str(result.get()).expect(line);
            assert_eq!(result, full["result"], "{line}");
        }
        let declined = [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"_meta":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"id":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"1","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":-1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":01,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.0,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1e2,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"result":{}}"#,
            r#"{"jsonrpc":"2.0","\u0069d":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1 2}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"\u12"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":tru}"#,
            "{}",
            "",
        ];
        for line in declined {
            assert!(plain_answer(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[test]
    fn only_the_scanned_prefix_is_read() {
        // The id is past `HEAD_SCAN_BYTES`: unknown, not found by reading further.
        let pad = "x".repeat(HEAD_SCAN_BYTES);
        let line = format!(r#"{{"pad":"{pad}","id":1,"result":{{}}}}"#);
        assert_eq!(read(line.as_bytes()), Head::Unknown);
        let short = format!(r#"{{"id":1,"pad":"{}","result":{{}}}}"#, &pad[..900]);
        assert_eq!(read(short.as_bytes()), Head::Answer(1));
    }
}
