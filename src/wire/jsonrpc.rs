//! JSON-RPC 2.0 envelope: decodes a POST body into messages (simd-json, in place) and encodes
//! responses, errors and notifications into caller-supplied buffers.
//!
//! Called by `transport` and `stream`. Never: interprets MCP methods (that is `transport`).

use simd_json::prelude::*;
use simd_json::OwnedValue as Value;

/// A request id as the client wrote it (JSON text: a number or a quoted string), so it is
/// echoed back byte-for-byte and compared exactly. Held inline up to `ID_INLINE_BYTES` (every
/// integer id, short strings): making or cloning one allocates nothing, and a request clones
/// its id for its stream, its job and its answer (issue 40 §1); a longer one is shared, so a
/// clone is a count. Equality and hashing are the text's (as `str`'s).
#[derive(Clone)]
pub struct RawId(IdText);

/// Bytes of id text held inline: `RawId` stays the size of the `String` it replaced (24).
const ID_INLINE_BYTES: usize = 22;
const _: () = assert!(ID_INLINE_BYTES <= u8::MAX as usize);

#[derive(Clone)]
enum IdText {
    /// `bytes[..len]` is the text.
    Inline { len: u8, bytes: [u8; ID_INLINE_BYTES] },
    /// Longer than `ID_INLINE_BYTES`.
    Shared(std::rc::Rc<str>),
}

impl RawId {
    /// The id whose JSON text is `text` (a number or a quoted string, as written).
    pub fn new(text: &str) -> RawId {
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= ID_INLINE_BYTES => {
                let mut bytes = [0; ID_INLINE_BYTES];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                RawId(IdText::Inline { len, bytes })
            }
            _ => RawId(IdText::Shared(text.into())),
        }
    }

    /// The id `value` (a string or an integer) encodes to: written straight into the inline
    /// bytes when it fits, so decoding a request's id allocates nothing.
    fn encoded(value: &Value) -> RawId {
        let mut bytes = [0; ID_INLINE_BYTES];
        let mut rest = &mut bytes[..];
        if value.write(&mut rest).is_err() {
            // Longer than the inline bytes.
            return RawId::new(&value.encode());
        }
        let written = ID_INLINE_BYTES - rest.len();
        // `written` ≤ `ID_INLINE_BYTES`, which fits a u8 (asserted below).
        RawId(IdText::Inline { len: written as u8, bytes })
    }

    /// The id's JSON text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // A whole `str` was copied in (`new`), so its bytes are UTF-8 up to `len`.
            IdText::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            IdText::Shared(text) => text,
        }
    }

    /// The id's JSON text, as bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            IdText::Inline { len, bytes } => &bytes[..usize::from(*len)],
            IdText::Shared(text) => text.as_bytes(),
        }
    }
}

impl From<&str> for RawId {
    fn from(text: &str) -> RawId {
        RawId::new(text)
    }
}

impl From<String> for RawId {
    fn from(text: String) -> RawId {
        RawId::new(&text)
    }
}

impl PartialEq for RawId {
    fn eq(&self, other: &RawId) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for RawId {}

impl std::hash::Hash for RawId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for RawId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RawId").field(&self.as_str()).finish()
    }
}

#[cfg(test)]
mod raw_id_tests {
    use super::*;

    fn hash(id: &RawId) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(id)
    }

    /// Goal: an id keeps its exact text, inline or shared, through decoding, `new` and clone,
    /// and compares and hashes as its text. Method: ids at, under and over the inline size.
    #[test]
    fn an_id_is_its_text_inline_or_shared() {
        let inline_max = format!("\"{}\"", "x".repeat(ID_INLINE_BYTES - 2));
        let over = format!("\"{}\"", "y".repeat(ID_INLINE_BYTES - 1));
        let texts = ["0", "18446744073709551615", "-9223372036854775808", r#""a\"b""#];
        for text in texts.iter().copied().chain([inline_max.as_str(), over.as_str()]) {
            let id = RawId::new(text);
            assert_eq!(id.as_str(), text);
            assert_eq!(id.as_bytes(), text.as_bytes());
            let copy = id.clone();
            assert_eq!(copy, id);
            assert_eq!(hash(&copy), hash(&RawId::from(text.to_owned())));
            let body = format!(r#"{{"jsonrpc":"2.0","id":{text},"method":"m"}}"#);
            let mut bytes = body.into_bytes();
            let Ok(Body::Single(Message::Request { id: decoded, .. })) = decode(&mut bytes, 8)
            else {
                panic!("{text}: not decoded")
            };
            assert_eq!(decoded, id, "{text}");
            assert_eq!(format!("{decoded:?}"), format!("RawId({text:?})"));
        }
        assert!(matches!(RawId::new(&inline_max).0, IdText::Inline { .. }));
        assert!(matches!(RawId::new(&over).0, IdText::Shared(_)));
        assert_ne!(RawId::new("1"), RawId::new("\"1\""));
        assert_eq!(std::mem::size_of::<RawId>(), std::mem::size_of::<String>());
    }
}

/// One JSON-RPC message.
#[derive(Debug)]
pub enum Message {
    /// A request: it has an `id` and a `method`, and is answered.
    Request {
        /// The `id`, to echo in the answer.
        id: RawId,
        /// The `method` name.
        method: String,
        /// `params`: an object or array; an empty object when absent.
        params: Value,
    },
    /// A notification: a `method` without an `id`; never answered.
    Notification {
        /// The `method` name.
        method: String,
        /// `params`: an object or array; an empty object when absent.
        params: Value,
    },
    /// An answer to a server→client request (sampling, elicitation): `result` or `error`.
    Response {
        /// The `id` of the server's request it answers.
        id: RawId,
        /// `Ok(result)` or `Err(error)`: exactly one of the two members was present.
        outcome: Result<Value, Value>,
    },
}

/// A decoded POST body.
#[derive(Debug)]
pub enum Body {
    /// One message object.
    Single(Message),
    /// A JSON array of messages (JSON-RPC 2.0 batch); never empty.
    Batch(Vec<Message>),
}

/// Why a body is not JSON-RPC. Every variant is the peer's fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON (or not UTF-8, or a lone surrogate escape, or nested deeper than the limit) →
    /// -32700.
    #[error("parse error")]
    Parse,
    /// JSON, but not a JSON-RPC 2.0 message → -32600.
    #[error("invalid request")]
    Invalid,
}

/// One pass over the raw body before simd-json sees it, O(n) and without allocating: refuses
/// nesting deeper than `depth_max` (`[`/`{` counted outside strings) and any `\u` escape that is
/// half of a UTF-16 surrogate pair. A JSON string must be Unicode text (RFC 8259 §8.2), so a
/// lone surrogate cannot be decoded without changing it, and simd-json 0.17 does change it: a
/// high surrogate not followed by `\u` becomes U+0000 (a low one alone it refuses). Refused
/// here, both halves alike, the peer's text is either kept exactly or not taken.
fn prescan(bytes: &[u8], depth_max: usize) -> Result<(), DecodeError> {
    let mut depth = 0usize;
    let mut at = 0usize;
    while let Some(&b) = bytes.get(at) {
        at += 1;
        match b {
            b'"' => at = string_end(bytes, at)?,
            b'[' | b'{' => {
                depth += 1;
                if depth > depth_max {
                    return Err(DecodeError::Parse);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The index after the closing quote of the string whose contents start at `at` (the end of
/// `bytes` if it is unterminated: simd-json refuses that), checking its `\u` escapes.
fn string_end(bytes: &[u8], mut at: usize) -> Result<usize, DecodeError> {
    while let Some(&b) = bytes.get(at) {
        match b {
            b'"' => return Ok(at + 1),
            b'\\' if bytes.get(at + 1) == Some(&b'u') => at = unicode_escape_end(bytes, at)?,
            // Any other escape is two bytes; an invalid one is simd-json's to refuse.
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    Ok(at)
}

/// `bytes[at..]` starts with `\u`: the index after the escape, after both escapes of a
/// surrogate pair; `Err` for half a pair. Not four hex digits: simd-json refuses the escape,
/// the scan goes on after the `\u`.
fn unicode_escape_end(bytes: &[u8], at: usize) -> Result<usize, DecodeError> {
    match hex4(bytes, at + 2) {
        Some(0xD800..=0xDBFF) => {
            let low = match bytes.get(at + 6..at + 8) {
                Some(b"\\u") => hex4(bytes, at + 8),
                _ => None,
            };
            match low {
                Some(0xDC00..=0xDFFF) => Ok(at + 12),
                _ => Err(DecodeError::Parse),
            }
        }
        Some(0xDC00..=0xDFFF) => Err(DecodeError::Parse),
        Some(_) => Ok(at + 6),
        None => Ok(at + 2),
    }
}

/// The UTF-16 code unit of the four hex digits at `bytes[at..]`, if they are four hex digits.
fn hex4(bytes: &[u8], at: usize) -> Option<u16> {
    let digits = bytes.get(at..at + 4)?;
    digits.iter().try_fold(0u16, |unit, &d| {
        let nibble = char::from(d).to_digit(16)?;
        Some(unit << 4 | nibble as u16)
    })
}

/// Decodes a body in place (simd-json rewrites the buffer).
pub fn decode(body: &mut [u8], depth_max: usize) -> Result<Body, DecodeError> {
    prescan(body, depth_max)?;
    let value = simd_json::to_owned_value(body).map_err(|_| DecodeError::Parse)?;
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(DecodeError::Invalid);
            }
            let msgs = items.into_iter().map(message).collect::<Result<Vec<_>, _>>()?;
            Ok(Body::Batch(msgs))
        }
        v => Ok(Body::Single(message(v)?)),
    }
}

fn message(v: Value) -> Result<Message, DecodeError> {
    let Value::Object(mut obj) = v else {
        return Err(DecodeError::Invalid);
    };
    if obj.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
        return Err(DecodeError::Invalid);
    }
    let id = match obj.remove("id") {
        None => None,
        Some(v) => Some(raw_id(&v)?),
    };
    let method = match obj.remove("method") {
        None => None,
        Some(Value::String(m)) => Some(m),
        Some(_) => return Err(DecodeError::Invalid),
    };
    let params = obj.remove("params").unwrap_or_else(Value::object);
    if !(params.is_object() || params.is_array()) {
        return Err(DecodeError::Invalid);
    }
    match (id, method) {
        (Some(id), Some(method)) => Ok(Message::Request { id, method, params }),
        (None, Some(method)) => Ok(Message::Notification { method, params }),
        (Some(id), None) => match (obj.remove("result"), obj.remove("error")) {
            (Some(r), None) => Ok(Message::Response { id, outcome: Ok(r) }),
            (None, Some(e)) => Ok(Message::Response { id, outcome: Err(e) }),
            _ => Err(DecodeError::Invalid),
        },
        (None, None) => Err(DecodeError::Invalid),
    }
}

/// Ids are strings or integers; `null`, fractions, objects and arrays are refused (MCP: "MUST
/// NOT be null").
fn raw_id(v: &Value) -> Result<RawId, DecodeError> {
    if v.is_str() || v.is_i64() || v.is_u64() {
        Ok(RawId::encoded(v))
    } else {
        Err(DecodeError::Invalid)
    }
}

/// What every response this module encodes starts with, up to the id.
pub(crate) const RESPONSE_PREFIX: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";

/// Offset of `,"result"`/`,"error"` in a response to `id` encoded by `push_result` or
/// `push_error` (so a replay can swap the id without re-parsing).
pub(crate) fn response_body_offset(id: &RawId) -> usize {
    RESPONSE_PREFIX.len() + id.as_bytes().len()
}

/// The code of an error response this module encoded (`{"jsonrpc":"2.0","id":<id>,"error":
/// {"code":<code>`), for a span's `error.type`; `None` for a result or anything else. An id is
/// a number, `null` or a string (skipped to its closing quote), so a nested `"error"` inside
/// a result is never mistaken for one.
pub(crate) fn response_error_code(body: &[u8]) -> Option<i64> {
    let rest = body.strip_prefix(RESPONSE_PREFIX)?;
    let id_len = match rest.first()? {
        b'"' => {
            let mut i = 1;
            loop {
                match *rest.get(i)? {
                    b'\\' => i += 2,
                    b'"' => break i + 1,
                    _ => i += 1,
                }
            }
        }
        _ => rest.iter().position(|b| *b == b',')?,
    };
    let code = rest.get(id_len..)?.strip_prefix(b",\"error\":{\"code\":")?;
    let end = code.iter().position(|b| !(b.is_ascii_digit() || *b == b'-')).unwrap_or(code.len());
    std::str::from_utf8(&code[..end]).ok()?.parse().ok()
}

/// Appends `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
pub(crate) fn push_result(out: &mut Vec<u8>, id: &RawId, result_json: &[u8]) {
    push_result_prefix(out, id);
    out.extend_from_slice(result_json);
    out.push(b'}');
}

/// Appends a result response up to its result value (`{"jsonrpc":"2.0","id":<id>,"result":`);
/// the caller writes the value and the closing `}`.
pub(crate) fn push_result_prefix(out: &mut Vec<u8>, id: &RawId) {
    out.extend_from_slice(RESPONSE_PREFIX);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"result\":");
}

/// Appends a JSON-RPC error response; `id` None is written as `null` only where JSON-RPC
/// requires an id member, i.e. always (the spec allows the id-less body in HTTP errors, but
/// clients parse `"id":null` more reliably than a missing member).
pub(crate) fn push_error(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    code: i64,
    message: &str,
    data: Option<&str>,
) {
    match data {
        Some(data) => push_error_with_data(out, id, code, message, |out: &mut Vec<u8>| {
            out.extend_from_slice(data.as_bytes())
        }),
        None => {
            push_error_start(out, id, code, message);
            out.extend_from_slice(b"}}");
        }
    }
}

/// `push_error` whose `data` member `write_data` writes into `out` in place (a `data` built
/// from server state needs no buffer of its own).
pub(crate) fn push_error_with_data(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    code: i64,
    message: &str,
    write_data: impl FnOnce(&mut Vec<u8>),
) {
    push_error_start(out, id, code, message);
    out.extend_from_slice(b",\"data\":");
    write_data(out);
    out.extend_from_slice(b"}}");
}

/// An error response up to its message (`data` and the closing braces follow).
fn push_error_start(out: &mut Vec<u8>, id: Option<&RawId>, code: i64, message: &str) {
    out.extend_from_slice(RESPONSE_PREFIX);
    match id {
        Some(id) => out.extend_from_slice(id.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"error\":{\"code\":");
    if code < 0 {
        out.push(b'-');
    }
    crate::digits::push_decimal(out, code.unsigned_abs());
    out.extend_from_slice(b",\"message\":");
    // Escaped straight into `out` (serde_json escapes exactly as simd-json's encoder did).
    let _ = serde_json::to_writer(&mut *out, message);
}

/// Appends `{"jsonrpc":"2.0","method":<method>,"params":<params>}`.
pub(crate) fn push_notification(out: &mut Vec<u8>, method: &str, params_json: &[u8]) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b"\",\"params\":");
    out.extend_from_slice(params_json);
    out.push(b'}');
}

/// Appends a server→client request `{"jsonrpc":"2.0","id":<id>,"method":..,"params":..}`.
pub(crate) fn push_request(out: &mut Vec<u8>, id: u64, method: &str, params_json: &[u8]) {
    out.extend_from_slice(RESPONSE_PREFIX);
    crate::digits::push_decimal(out, id);
    out.extend_from_slice(b",\"method\":\"");
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(b"\",\"params\":");
    out.extend_from_slice(params_json);
    out.push(b'}');
}

/// Canonical JSON: object keys sorted at every level, so two params that differ only in key
/// order encode to the same text (CONTRACT §4 fingerprints). `_meta` at the top level is left
/// out: it carries per-attempt data (the SDKs set `progressToken` to the request id).
pub fn canonical_params(params: &Value, out: &mut String) {
    canonical(params, out, true);
}

fn canonical(v: &Value, out: &mut String, top: bool) {
    match v {
        Value::Object(obj) => {
            let mut keys: Vec<&String> = obj.keys().filter(|k| !(top && *k == "_meta")).collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).encode());
                out.push(':');
                if let Some(child) = obj.get(k.as_str()) {
                    canonical(child, out, false);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out, false);
            }
            out.push(']');
        }
        other => out.push_str(&other.encode()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Result<Body, DecodeError> {
        let mut b = s.as_bytes().to_vec();
        decode(&mut b, 8)
    }

    #[test]
    fn classifies_messages() {
        let table: [(&str, &str); 7] = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "request"),
            (r#"{"jsonrpc":"2.0","id":"a","method":"x","params":{}}"#, "request"),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, "notification"),
            (r#"{"jsonrpc":"2.0","id":5,"result":{}}"#, "response"),
            (r#"{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"m"}}"#, "response"),
            (r#"[{"jsonrpc":"2.0","method":"a"}]"#, "batch"),
            (r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#, "request"),
        ];
        for (body, kind) in table {
            let got = match dec(body).unwrap() {
                Body::Single(Message::Request { .. }) => "request",
                Body::Single(Message::Notification { .. }) => "notification",
                Body::Single(Message::Response { .. }) => "response",
                Body::Batch(_) => "batch",
            };
            assert_eq!(got, kind, "{body}");
        }
    }

    #[test]
    fn refuses_what_is_not_json_rpc() {
        let table: [(&[u8], DecodeError); 10] = [
            (b"{", DecodeError::Parse),
            (b"\xff\xfe", DecodeError::Parse),
            (b"[[[[[[[[[[1]]]]]]]]]]", DecodeError::Parse),
            (b"[]", DecodeError::Invalid),
            (b"42", DecodeError::Invalid),
            (br#"{"id":1,"method":"x"}"#, DecodeError::Invalid),
            (br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, DecodeError::Invalid),
            (br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, DecodeError::Invalid),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, DecodeError::Invalid),
            (br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#, DecodeError::Invalid),
        ];
        for (body, want) in table {
            let mut b = body.to_vec();
            assert_eq!(decode(&mut b, 8).err(), Some(want), "{:?}", String::from_utf8_lossy(body));
        }
    }

    /// Goal: half a surrogate pair is refused wherever it is escaped, a whole pair (and text
    /// that only looks like an escape) decodes exactly. Method: a string member in a request,
    /// decoded, its value compared.
    #[test]
    fn surrogate_escapes_are_paired_or_refused() {
        let refused = [
            r#""\ud800""#,
            r#""\uDBFF""#,
            r#""\udc00""#,
            r#""\ud83dx""#,
            r#""\ud800\u0041""#,
            r#""\ud800\ud800""#,
            r#""\ude00\ud83d""#,
            r#""\ud800\\udc00""#,
            r#""\ud800\udc0""#,
            r#""\ud800"#,
        ];
        for text in refused {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"t":{text}}}}}"#);
            assert_eq!(dec(&body).err(), Some(DecodeError::Parse), "{text}");
            let key = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{{text}:1}}}}"#);
            assert_eq!(dec(&key).err(), Some(DecodeError::Parse), "key {text}");
        }
        let accepted = [
            (r#""\ud83d\ude00""#, "\u{1F600}"),
            (r#""\uD83D\uDE00""#, "\u{1F600}"),
            (r#""\udbff\udfff""#, "\u{10FFFF}"),
            (r#""\u00e9\uffff""#, "\u{e9}\u{ffff}"),
            (r#""\\ud800""#, "\\ud800"),
            (r#""\"\\\ud83d\ude00""#, "\"\\\u{1F600}"),
            (r#""[{\ud83d\ude00""#, "[{\u{1F600}"),
        ];
        for (text, want) in accepted {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"t":{text}}}}}"#);
            let Ok(Body::Single(Message::Request { params, .. })) = dec(&body) else {
                panic!("{text}: not decoded")
            };
            assert_eq!(params.get("t").and_then(|v| v.as_str()), Some(want), "{text}");
        }
        // Not hex: simd-json's refusal, unchanged.
        assert_eq!(
            dec(r#"{"jsonrpc":"2.0","id":1,"method":"\uzzzz"}"#).err(),
            Some(DecodeError::Parse)
        );
    }

    #[test]
    fn ids_echo_exactly() {
        let Body::Single(Message::Request { id, .. }) =
            dec(r#"{"jsonrpc":"2.0","id":"x\"y","method":"m"}"#).unwrap()
        else {
            panic!("not a request")
        };
        let mut out = Vec::new();
        push_result(&mut out, &id, b"{}");
        assert_eq!(out, br#"{"jsonrpc":"2.0","id":"x\"y","result":{}}"#);
    }

    #[test]
    fn error_encoding() {
        let mut out = Vec::new();
        push_error(&mut out, None, -32700, "parse \"error\"", None);
        assert_eq!(
            out,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse \"error\""}}"#
        );
    }

    #[test]
    fn canonical_ignores_key_order_and_top_meta() {
        let mut a =
            br#"{"b":{"y":1,"x":[2,{"q":1,"p":2}]},"a":"s","_meta":{"progressToken":1}}"#.to_vec();
        let mut b = br#"{"a":"s","b":{"x":[2,{"p":2,"q":1}],"y":1}}"#.to_vec();
        let (va, vb) = (
            simd_json::to_owned_value(&mut a).unwrap(),
            simd_json::to_owned_value(&mut b).unwrap(),
        );
        let (mut ca, mut cb) = (String::new(), String::new());
        canonical_params(&va, &mut ca);
        canonical_params(&vb, &mut cb);
        assert_eq!(ca, cb);
        assert_eq!(ca, r#"{"a":"s","b":{"x":[2,{"p":2,"q":1}],"y":1}}"#);
    }

    #[test]
    fn an_error_answers_code_is_read_and_a_result_with_an_error_inside_is_not() {
        let code = |body: &str| response_error_code(body.as_bytes());
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"m"}}"#),
            Some(-32602)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"a,\"b","error":{"code":-1}}"#), Some(-1));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}"#), Some(-32700));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":5,"result":{"error":{"code":1}}}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"x,\"error\":{\"code\":3","result":{}}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"unterminated"#), None);
        assert_eq!(code("event: message"), None);
    }
}
