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
/// to be one JSON value in UTF-8, as `serde_json` checks a `Box<RawValue>` in the full parse
/// (`check_value`; one nested deeper than `NESTING_BITS` is checked by `serde_json`). `None` for
/// any other line (a member beyond these three, one given twice, a `jsonrpc` other than
/// `"2.0"`, an id that is not an unsigned integer as JSON writes one, an escaped key, a result
/// that is not JSON, anything after the object but whitespace), which then goes through the
/// full parse. The two readings agree on every line this one takes
/// (`plain_answers_agree_with_the_full_parse`), except that the result's check starts its
/// nesting count one level higher: a result nested right at `serde_json`'s depth limit is
/// taken here where the full parse skipped it. Reading a bridged echo's answer line cost 2 790
/// instructions with `serde_json`, 1 743 with only the result checked by `serde_json`, and
/// 1 508 with `check_value` (callgrind, issue 43 item 1), which allocates nothing
/// (`serde_json`'s skip keeps its nesting on a heap stack).
pub(crate) fn plain_answer(line: &[u8]) -> Option<(u64, &str)> {
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
                at.skip_whitespace();
                let start = at.at;
                at.at = match check_value(line, start) {
                    Checked::End(end) => end,
                    Checked::Invalid => return None,
                    // `serde_json` reads one value and says where it ends.
                    Checked::Deep => {
                        let mut values =
                            serde_json::Deserializer::from_slice(&line[start..]).into_iter();
                        let _: &RawValue = values.next()?.ok()?;
                        start + values.byte_offset()
                    }
                };
                result = Some(std::str::from_utf8(&line[start..at.at]).ok()?);
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

/// Containers nested in a result that `check_value` follows (one bit each: object or array);
/// a result nested deeper is checked by `serde_json` (rare: MCP results are a few levels).
const NESTING_BITS: u32 = u128::BITS;

/// What `check_value` found.
enum Checked {
    /// One JSON value, ending before this index.
    End(usize),
    Invalid,
    /// Containers nested deeper than `NESTING_BITS`: not decided here.
    Deep,
}

/// One JSON value at `bytes[at..]` (no whitespace before it), checked as `serde_json` checks
/// a value it skips (`Deserializer::ignore_value`, what a `RawValue` is read with): the
/// grammar, numbers as JSON writes them, every string's escapes (`\u` with four hex digits,
/// not decoded) and no control character in one. What follows the value is not looked at, and
/// UTF-8 is the caller's to check. Never allocates: the open containers are bits of a `u128`.
fn check_value(bytes: &[u8], mut at: usize) -> Checked {
    let mut objects: u128 = 0;
    let mut depth = 0u32;
    loop {
        // A value starts at `at`.
        match bytes.get(at) {
            Some(&open @ (b'{' | b'[')) => {
                if depth == NESTING_BITS {
                    return Checked::Deep;
                }
                objects = (objects << 1) | u128::from(open == b'{');
                depth += 1;
                at = skip_whitespace(bytes, at + 1);
                let close = if open == b'{' { b'}' } else { b']' };
                if bytes.get(at) == Some(&close) {
                    objects >>= 1;
                    depth -= 1;
                    at += 1;
                } else if open == b'{' {
                    let Some(next) = member_key(bytes, at) else { return Checked::Invalid };
                    at = next;
                    continue;
                } else {
                    continue;
                }
            }
            Some(b'"') => match string_end(bytes, at + 1) {
                Some(end) => at = end,
                None => return Checked::Invalid,
            },
            Some(b't') if bytes[at..].starts_with(b"true") => at += 4,
            Some(b'f') if bytes[at..].starts_with(b"false") => at += 5,
            Some(b'n') if bytes[at..].starts_with(b"null") => at += 4,
            Some(b'-' | b'0'..=b'9') => match number_end(bytes, at) {
                Some(end) => at = end,
                None => return Checked::Invalid,
            },
            _ => return Checked::Invalid,
        }
        // After a value: close containers until a comma starts the next value.
        loop {
            if depth == 0 {
                return Checked::End(at);
            }
            at = skip_whitespace(bytes, at);
            let object = objects & 1 == 1;
            match bytes.get(at) {
                Some(b',') => {
                    at = skip_whitespace(bytes, at + 1);
                    if object {
                        let Some(next) = member_key(bytes, at) else { return Checked::Invalid };
                        at = next;
                    }
                    break;
                }
                Some(b'}') if object => {}
                Some(b']') if !object => {}
                _ => return Checked::Invalid,
            }
            objects >>= 1;
            depth -= 1;
            at += 1;
        }
    }
}

/// Past JSON whitespace from `at`.
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        at += 1;
    }
    at
}

/// An object member's key at `at` and the `:` after it: where its value starts (whitespace
/// skipped).
fn member_key(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let at = skip_whitespace(bytes, string_end(bytes, at + 1)?);
    (bytes.get(at) == Some(&b':')).then(|| skip_whitespace(bytes, at + 1))
}

/// The end of a string whose opening quote is before `at` (the index past its closing quote).
fn string_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        match *bytes.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => {
                at += match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' => {
                        let hex = bytes.get(at + 2..at + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        6
                    }
                    _ => return None,
                };
            }
            0..=0x1f => return None,
            _ => at += 1,
        }
    }
}

/// The end of a number at `at`: `-`, then `0` or a digit string not starting with `0`, then
/// an optional fraction (at least one digit) and exponent (sign, at least one digit).
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let digits =
        |at: usize| bytes[at.min(bytes.len())..].iter().take_while(|b| b.is_ascii_digit()).count();
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    match bytes.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at += digits(at),
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        let n = digits(at + 1);
        if n == 0 {
            return None;
        }
        at += 1 + n;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let n = digits(at);
        if n == 0 {
            return None;
        }
        at += n;
    }
    Some(at)
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
            let result: Value = serde_json::from_str(result).expect(line);
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

    /// `serde_json`'s reading of one value at the start of `text` (as the full parse reads a
    /// `result`): where it ends, or `None`.
    fn serde_end(text: &[u8]) -> Option<usize> {
        let mut values = serde_json::Deserializer::from_slice(text).into_iter::<&RawValue>();
        values.next()?.ok()?;
        Some(values.byte_offset())
    }

    /// `check_value`'s reading as `serde_json`'s stream gives it: a number or a literal must
    /// be followed by the end, whitespace or punctuation (`StreamDeserializer`'s trailing
    /// check; in a line, `plain_answer` wants `,` or `}` there anyway), and be UTF-8. `None`
    /// when deep.
    fn our_end(text: &[u8], at: usize) -> Option<Option<usize>> {
        let delineated = matches!(text.get(at), Some(b'[' | b'{' | b'"'));
        let delimited = |end: &usize| {
            delineated
                || matches!(
                    text.get(*end),
                    None | Some(
                        b' ' | b'\n'
                            | b'\t'
                            | b'\r'
                            | b'"'
                            | b'['
                            | b']'
                            | b'{'
                            | b'}'
                            | b','
                            | b':'
                    )
                )
        };
        match check_value(text, at) {
            // UTF-8 as `plain_answer` checks it.
            Checked::End(end) => {
                let utf8 = |end: &usize| std::str::from_utf8(&text[at..*end]).is_ok();
                Some(Some(end).filter(delimited).filter(utf8))
            }
            Checked::Invalid => Some(None),
            Checked::Deep => None,
        }
    }

    #[test]
    fn the_result_check_agrees_with_serde_json_on_a_table() {
        // Goal: `check_value` takes exactly what `serde_json` takes as one value, and ends it
        // at the same byte. Method: values and near-misses of every kind, each followed by
        // `}` as in a line.
        let cases = [
            "0",
            "-0",
            "12",
            "-12.5e+3",
            "1E9",
            "0.0",
            "01",
            "-",
            "1.",
            "1.e3",
            "1e",
            "1e+",
            "-a",
            "00",
            "true",
            "false",
            "null",
            "tru",
            "nul",
            "True",
            "\"\"",
            "\"a\\\"b\"",
            "\"\\u00e9\\/\\b\\f\\n\\r\\t\"",
            "\"\\u12\"",
            "\"\\uZZZZ\"",
            "\"\\x\"",
            "\"tab\there\"",
            "\"open",
            "{}",
            "[]",
            "{ }",
            "[ ]",
            "{\"a\":1}",
            "{\"a\" : [1, {}]}",
            "{\"a\"}",
            "{\"a\":}",
            "{a:1}",
            "{\"a\":1,}",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,,2]",
            "{\"a\":1 \"b\":2}",
            "[[[[]]]]",
            "[[[]]",
            "[{\"k\":[{\"k\":null}]}]",
            "[1]]",
            "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"isError\":false}",
            "",
            " 1",
            "x",
            "[\"\\u00\"]",
            "{\"\\u0041\":true}",
            "[-]",
            "[0e0]",
            "[1.5E-07]",
        ];
        for case in cases {
            let text = format!("{case}}}");
            let start = skip_whitespace(text.as_bytes(), 0);
            let ours = our_end(text.as_bytes(), start).expect("not deep");
            assert_eq!(ours, serde_end(text.as_bytes()), "{case}");
        }
    }

    #[test]
    fn a_result_nested_past_the_bits_is_left_to_serde_json() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(check_value(deep.as_bytes(), 0), Checked::Deep));
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{deep}}}"#);
        assert_eq!(plain_answer(line.as_bytes()), Some((1, deep.as_str())));
        let bits = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(matches!(check_value(bits.as_bytes(), 0), Checked::End(256)));
    }

    proptest::proptest! {
        /// Goal: on any text built from JSON's pieces and near-misses, `check_value` and
        /// `serde_json` agree on whether one value starts it and where it ends, and nothing
        /// panics. Method: proptest over a grammar of tokens.
        #[test]
        fn the_result_check_agrees_with_serde_json(
            text in "([\\[\\]{},:\" ]|\"a\"|\\\\|\\\\u00e9|\\\\u0|\\\\n|\\\\q|-|0|1|9|\\.|e|E|\\+|true|fals|null|\t|é|\u{1}){0,40}",
        ) {
            let bytes = text.as_bytes();
            let start = skip_whitespace(bytes, 0);
            if let Some(ours) = our_end(bytes, start) {
                proptest::prop_assert_eq!(ours, serde_end(bytes), "{:?}", text);
            }
        }
    }

    /// JSON text of up to four levels: numbers, strings with escapes, literals, arrays and
    /// objects, with whitespace here and there.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,2})?([eE][+-]?[0-9]{1,2})?",
            "\"([a-z é]|\\\\[nt\"/\\\\]|\\\\u00[0-9a-fA-F]{2}){0,5}\"",
            "true|false|null",
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let member =
                ("\"[a-z]{0,3}\"", " ?", inner.clone()).prop_map(|(k, w, v)| format!("{k}:{w}{v}"));
            prop_oneof![
                proptest::collection::vec(inner, 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(member, 0..4)
                    .prop_map(|v| format!("{{ {} }}", v.join(", "))),
            ]
        })
    }

    proptest::proptest! {
        /// Goal: on JSON values, whole or with one byte cut out or changed, `check_value` and
        /// `serde_json` agree on whether a value starts the text and where it ends. Method:
        /// proptest over generated JSON, then one byte removed or replaced.
        #[test]
        fn the_result_check_agrees_with_serde_json_on_json_and_near_misses(
            json in json_text(),
            cut in proptest::option::of(0usize..64),
            byte in proptest::option::of(proptest::sample::select(b"{}[]\",:\\ 0-.eu\x01".to_vec())),
        ) {
            let mut bytes = json.into_bytes();
            if let Some(at) = cut.filter(|&at| at < bytes.len()) {
                match byte {
                    Some(b) => bytes[at] = b,
                    None => { bytes.remove(at); }
                }
            }
            let start = skip_whitespace(&bytes, 0);
            if let Some(ours) = our_end(&bytes, start) {
                proptest::prop_assert_eq!(ours, serde_end(&bytes), "{:?}", String::from_utf8_lossy(&bytes));
            }
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
