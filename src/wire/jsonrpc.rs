//! JSON-RPC 2.0 envelope: decodes a POST body into messages (simd-json, in place, onto a
//! reused tape) and encodes responses, errors and notifications into caller-supplied buffers.
//!
//! Owns: the decode's storage between requests (`TapeSlot`, one per connection: the tape's
//! nodes; the parser's scratch `Buffers`, one per core), and the params' canonical form and
//! fingerprint hash (CONTRACT §4).
//!
//! A decoded message is a view of the tape (`WireValue`), valid while the body and the tape
//! are: a request is served within one connection's turn, so the view lives as long as the
//! request does, and nothing of it is copied unless a consumer keeps it (a user provider's
//! `serde_json` arguments, a session's client params).
//!
//! Called by `endpoint::admit` (decode) and the eras (encode). Never: interprets MCP methods.

use std::cell::{Cell, RefCell};
use std::hash::Hasher;
use std::io;
use std::sync::LazyLock;

use simd_json::prelude::*;
use simd_json::{Buffers, Node, Tape};

use crate::fasthash::StableHasher;

/// A decoded JSON value: a borrowed view of the request's tape.
pub type WireValue<'a> = simd_json::tape::Value<'a, 'a>;

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
    /// bytes when it fits, so decoding a request's id allocates nothing. Also holds a
    /// `_meta.progressToken` (any JSON value: a long one is shared).
    pub(crate) fn encoded(value: simd_json::tape::Value<'_, '_>) -> RawId {
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
    #[inline]
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
    /// As `[u8]` hashes (with its length). Writing the bytes alone was tried for one multiply
    /// round fewer on the migration decision's id probe and measured slower with the session
    /// maps' hasher: criterion `decide_by_buffered_events` 23.6 ns against 22.8 ns with the
    /// prefix, alternating on a quiet machine (issue 40 §5).
    #[inline]
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
            let mut tape = Tape::null();
            let Ok(Body::Single(Message::Request { id: decoded, .. })) =
                decode(&mut bytes, &mut tape, 8)
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

/// One JSON-RPC message, borrowed from the tape its body was decoded onto.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request: it has an `id` and a `method`, and is answered.
    Request {
        /// The `id`, to echo in the answer.
        id: RawId,
        /// The `method` name.
        method: &'a str,
        /// `params`: an object or array; an empty object when absent.
        params: WireValue<'a>,
    },
    /// A notification: a `method` without an `id`; never answered.
    Notification {
        /// The `method` name.
        method: &'a str,
        /// `params`: an object or array; an empty object when absent.
        params: WireValue<'a>,
    },
    /// An answer to a server→client request (sampling, elicitation): `result` or `error`.
    Response {
        /// The `id` of the server's request it answers.
        id: RawId,
        /// `Ok(result)` or `Err(error)`: exactly one of the two members was present.
        outcome: Result<WireValue<'a>, WireValue<'a>>,
    },
}

/// A decoded POST body.
#[derive(Debug)]
pub enum Body<'a> {
    /// One message object.
    Single(Message<'a>),
    /// A JSON array of messages (JSON-RPC 2.0 batch); never empty.
    Batch(Vec<Message<'a>>),
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

/// Tape nodes a connection keeps between requests (24 bytes each: 96 KiB); a larger body's
/// tape is let go once it is served, so one big request does not pin its tape to an idle
/// connection. An echo call is about 15 nodes.
///
/// No flag, like `SCRATCH_KEEP_BODY_BYTES` and the other keep thresholds (a connection's
/// `BUFFER_KEEP_BYTES`, the event and body scratch): it bounds nothing a peer can send (no
/// request is refused at it, none sees it) but what is kept between requests, and the most it
/// can keep follows from `--max-body-bytes`, which is the operator's limit. It only trades
/// the allocations of a request over it against memory held while idle.
pub(crate) const TAPE_KEEP_NODES: usize = 4096;

/// The largest body whose parser scratch a core keeps for the next request; a larger body's is
/// let go once decoded, so one big request does not pin several times its size per core (the
/// scratch holds an aligned copy of the input, its string buffer and structural indexes).
///
/// No flag, for the reasons `TAPE_KEEP_NODES` gives: a threshold of reuse, not a limit on the
/// peer (a body over it is served like any other, with the scratch allocated for it), and one
/// scratch per core at most `--max-body-bytes` large.
pub(crate) const SCRATCH_KEEP_BODY_BYTES: usize = 64 * 1024;

thread_local! {
    /// The parser's scratch (structural indexes, string buffer, aligned input copy): used only
    /// inside `decode`, which never awaits, so one per core serves every connection. It keeps
    /// the size of the largest body decoded on the core up to `SCRATCH_KEEP_BODY_BYTES`.
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// A connection's tape storage, kept between its requests so decoding a request allocates
/// nothing once the connection has served one like it. A connection serves one request at a
/// time, so one slot each is enough; the tape is taken for a request (`take`) and given back
/// when it is served (`put`); one that is never given back is only dropped (the next request
/// starts a new one).
#[derive(Default)]
pub(crate) struct TapeSlot(Cell<Vec<Node<'static>>>);

impl TapeSlot {
    /// The slot's (empty) tape, for a body that lives for `'b`.
    pub(crate) fn take<'b>(&self) -> Tape<'b> {
        Tape(self.0.take()).reset()
    }

    /// Gives a served request's tape back, emptied (a large one is dropped instead).
    pub(crate) fn put(&self, tape: Tape<'_>) {
        let nodes: Tape<'static> = tape.reset();
        if nodes.0.capacity() <= TAPE_KEEP_NODES {
            self.0.set(nodes.0);
        }
    }
}

/// Decodes a body in place (simd-json rewrites the buffer) onto `tape` (emptied first).
pub fn decode<'t, 'b: 't>(
    body: &'b mut [u8],
    tape: &'t mut Tape<'b>,
    depth_max: usize,
) -> Result<Body<'t>, DecodeError> {
    prescan(body, depth_max)?;
    let large = body.len() > SCRATCH_KEEP_BODY_BYTES;
    let filled = BUFFERS.with_borrow_mut(|buffers| {
        let filled = simd_json::fill_tape(body, buffers, tape);
        if large {
            *buffers = Buffers::default();
        }
        filled
    });
    filled.map_err(|_| DecodeError::Parse)?;
    let value = Tape::as_value(tape);
    match value.as_array() {
        Some(items) => {
            if items.is_empty() {
                return Err(DecodeError::Invalid);
            }
            let msgs = items.iter().map(message).collect::<Result<Vec<_>, _>>()?;
            Ok(Body::Batch(msgs))
        }
        None => Ok(Body::Single(message(value)?)),
    }
}

/// The `{}` that stands for absent `params`.
static EMPTY_OBJECT: LazyLock<Tape<'static>> =
    LazyLock::new(|| Tape(vec![Node::Object { len: 0, count: 0 }]));

fn message<'t>(v: simd_json::tape::Value<'t, '_>) -> Result<Message<'t>, DecodeError> {
    let Some(obj) = v.as_object() else {
        return Err(DecodeError::Invalid);
    };
    let m = Members::of(&obj);
    if m.jsonrpc.and_then(ValueIntoString::into_string) != Some("2.0") {
        return Err(DecodeError::Invalid);
    }
    let id = match m.id {
        None => None,
        Some(v) => Some(raw_id(v)?),
    };
    let method = match m.method {
        None => None,
        Some(m) => Some(m.into_string().ok_or(DecodeError::Invalid)?),
    };
    let params = m.params.unwrap_or_else(|| EMPTY_OBJECT.as_value());
    if !(params.is_object() || params.is_array()) {
        return Err(DecodeError::Invalid);
    }
    match (id, method) {
        (Some(id), Some(method)) => Ok(Message::Request { id, method, params }),
        (None, Some(method)) => Ok(Message::Notification { method, params }),
        (Some(id), None) => match (m.result, m.error) {
            (Some(r), None) => Ok(Message::Response { id, outcome: Ok(r) }),
            (None, Some(e)) => Ok(Message::Response { id, outcome: Err(e) }),
            _ => Err(DecodeError::Invalid),
        },
        (None, None) => Err(DecodeError::Invalid),
    }
}

/// The members of a message `message` reads, each the first of its name (as `Object::get`
/// finds it, so a repeated member means what it meant before), gathered in one pass over the
/// object: one `get` per name scanned the members up to four times (issue 40 §3).
#[derive(Default)]
struct Members<'t, 'i> {
    jsonrpc: Option<simd_json::tape::Value<'t, 'i>>,
    id: Option<simd_json::tape::Value<'t, 'i>>,
    method: Option<simd_json::tape::Value<'t, 'i>>,
    params: Option<simd_json::tape::Value<'t, 'i>>,
    result: Option<simd_json::tape::Value<'t, 'i>>,
    error: Option<simd_json::tape::Value<'t, 'i>>,
}

impl<'t, 'i> Members<'t, 'i> {
    fn of(obj: &simd_json::tape::Object<'t, 'i>) -> Members<'t, 'i> {
        let mut m = Members::default();
        for (key, value) in obj.iter() {
            let slot = match key {
                "jsonrpc" => &mut m.jsonrpc,
                "id" => &mut m.id,
                "method" => &mut m.method,
                "params" => &mut m.params,
                "result" => &mut m.result,
                "error" => &mut m.error,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        m
    }
}

/// Ids are strings or integers; `null`, fractions, objects and arrays are refused (MCP: "MUST
/// NOT be null").
fn raw_id(v: simd_json::tape::Value<'_, '_>) -> Result<RawId, DecodeError> {
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
    push_json_string(out, message);
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

/// Appends a client→server request toward an upstream, `{"id":<id>,"jsonrpc":"2.0","method":
/// <method>,"params":<params>}`: the bytes `serde_json` writes for that message as a value (its
/// members in key order, its escaping), without building the value, which cost a deep copy of
/// `params` and its drop per bridged call.
pub(crate) fn push_upstream_request(
    out: &mut Vec<u8>,
    id: u64,
    method: &str,
    params: &serde_json::Value,
) {
    out.extend_from_slice(b"{\"id\":");
    crate::digits::push_decimal(out, id);
    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"method\":");
    // Writing into a Vec cannot fail, and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut *out, method);
    out.extend_from_slice(b",\"params\":");
    let _ = serde_json::to_writer(&mut *out, params);
    out.push(b'}');
}

/// Appends a `tools/call` toward an upstream, `_meta` ours (the progress token `id`, the
/// call's `traceparent`), `arguments` JSON text already encoded (`push_value`; `None`: none),
/// the members in the order `push_upstream_request` writes a params value's: the same bytes
/// for the same arguments text, with no params value built.
pub(crate) fn push_upstream_call(
    out: &mut Vec<u8>,
    id: u64,
    tool: &str,
    arguments: Option<&[u8]>,
    traceparent: Option<&str>,
) {
    out.extend_from_slice(b"{\"id\":");
    crate::digits::push_decimal(out, id);
    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":");
    out.extend_from_slice(b"{\"_meta\":{\"progressToken\":");
    crate::digits::push_decimal(out, id);
    if let Some(traceparent) = traceparent {
        out.extend_from_slice(b",\"traceparent\":");
        push_json_string(out, traceparent);
    }
    out.push(b'}');
    if let Some(arguments) = arguments {
        out.extend_from_slice(b",\"arguments\":");
        out.extend_from_slice(arguments);
    }
    out.extend_from_slice(b",\"name\":");
    // Writing into a Vec cannot fail, and a `str` always serializes.
    let _ = serde_json::to_writer(&mut *out, tool);
    out.extend_from_slice(b"}}");
}

/// Appends a decoded value as JSON text, its members in the order they came (a key given
/// twice: twice), with no value copied out of the request.
pub(crate) fn push_value(out: &mut Vec<u8>, value: WireValue<'_>) {
    // Writing into a Vec cannot fail.
    let _ = value.write(out);
}

/// Appends `text` as a JSON string (simd-json's escaping), without a temporary.
pub(crate) fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail.
    let _ = simd_json::BorrowedValue::from(text).write(out);
}

/// A copy of a decoded value as `serde_json` (what the provider API takes): one allocation per
/// string, array and object. A key given twice keeps its last value, as `serde_json` parses it.
pub(crate) fn to_serde(value: WireValue<'_>) -> serde_json::Value {
    use serde_json::Value as Json;
    if let Some(text) = value.into_string() {
        return Json::String(text.to_owned());
    }
    if let Some(items) = value.as_array() {
        return Json::Array(items.iter().map(to_serde).collect());
    }
    if let Some(object) = value.as_object() {
        return Json::Object(object.iter().map(|(k, v)| (k.to_owned(), to_serde(v))).collect());
    }
    if let Some(b) = value.as_bool() {
        return Json::Bool(b);
    }
    if value.is_i64() {
        return value.as_i64().map_or(Json::Null, Json::from);
    }
    if value.is_u64() {
        return value.as_u64().map_or(Json::Null, Json::from);
    }
    match value.as_f64() {
        Some(n) => serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number),
        None => Json::Null,
    }
}

/// Keys of one object the canonical form sorts on the stack; an object with more keys sorts
/// them in a heap buffer (the one allocation the fingerprint may make, for such params only).
pub const CANONICAL_INLINE_KEYS: usize = 16;

/// Canonical JSON: object keys sorted at every level, so two params that differ only in key
/// order encode to the same text (CONTRACT §4 fingerprints). `_meta` at the top level is left
/// out: it carries per-attempt data (the SDKs set `progressToken` to the request id). A key
/// given twice is written twice, each time with its first value (what a lookup finds).
pub fn canonical_params(params: WireValue<'_>, out: &mut String) {
    let mut writer = TextWriter { out, pending: [0; 4], pending_len: 0 };
    canonical(params, &mut writer, true);
    writer.finish();
}

/// An `io::Write` onto a `String`. The encoder writes a string in pieces that may cut a
/// multi-byte character (its SIMD blocks do; the fuzzer found one), so the bytes of a character
/// cut at a piece's end wait in `pending` for the next piece: what reaches `out` is the text,
/// byte for byte. Bytes that are not UTF-8 never come from a decoded value; should they, they
/// become U+FFFD rather than a panic.
struct TextWriter<'s> {
    out: &'s mut String,
    pending: [u8; 4],
    pending_len: usize,
}

impl TextWriter<'_> {
    /// Takes bytes into `pending` until it holds one whole character, or bytes that cannot
    /// start one, and moves it to `out`. Returns how many of `bytes` it took.
    fn complete_pending(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        while self.pending_len > 0 && taken < bytes.len() && self.pending_len < self.pending.len() {
            self.pending[self.pending_len] = bytes[taken];
            self.pending_len += 1;
            taken += 1;
            match std::str::from_utf8(&self.pending[..self.pending_len]) {
                Ok(text) => {
                    self.out.push_str(text);
                    self.pending_len = 0;
                }
                Err(e) if e.error_len().is_some() => self.finish(),
                Err(_) => {}
            }
        }
        taken
    }

    /// Writes out what is still pending (a cut that never completed) as U+FFFD.
    fn finish(&mut self) {
        if self.pending_len > 0 {
            self.out.push_str(&String::from_utf8_lossy(&self.pending[..self.pending_len]));
            self.pending_len = 0;
        }
    }
}

impl io::Write for TextWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let rest = &bytes[self.complete_pending(bytes)..];
        match std::str::from_utf8(rest) {
            Ok(text) => self.out.push_str(text),
            Err(e) => {
                let (valid, tail) = rest.split_at(e.valid_up_to());
                // `valid` is UTF-8 (`valid_up_to` says so): borrowed, never replaced.
                self.out.push_str(&String::from_utf8_lossy(valid));
                if e.error_len().is_none() {
                    // A character cut at the piece's end: fewer than 4 bytes by definition.
                    self.pending[..tail.len()].copy_from_slice(tail);
                    self.pending_len = tail.len();
                } else {
                    self.out.push_str(&String::from_utf8_lossy(tail));
                }
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the canonical form of `params` to `out` piece by piece, without a buffer: joined,
/// the pieces are `canonical_params`'s text byte for byte (a decoded value's strings are UTF-8,
/// so a character cut between two pieces is whole once they are joined). For a digest over the
/// canonical form (`modern::state::binding`).
pub(crate) fn write_canonical_params(params: WireValue<'_>, out: &mut impl io::Write) {
    canonical(params, out, true);
}

/// Word tags of the fingerprint encoding (`hash_params`): the low byte of a value's first word.
mod tag {
    pub(super) const NULL: u64 = 1;
    pub(super) const FALSE: u64 = 2;
    pub(super) const TRUE: u64 = 3;
    pub(super) const UINT: u64 = 4;
    pub(super) const NEGINT: u64 = 5;
    pub(super) const FLOAT: u64 = 6;
    pub(super) const STRING: u64 = 7;
    pub(super) const ARRAY: u64 = 8;
    pub(super) const OBJECT: u64 = 9;
    /// A value of a type JSON text does not have (none from the decoder): the stable hash of
    /// its encoder text follows.
    pub(super) const OTHER: u64 = 10;
}

/// Feeds `params`' fingerprint encoding to `h`: the canonical form (`canonical_params`: keys
/// sorted, a duplicate key's value its first one's, the top-level `_meta` left out) as whole
/// little-endian words instead of text, so that nothing is escaped, quoted or formatted and
/// every word is one round of the hash (echo's text form cost ~1 400 instructions, its
/// strings' quoting and the writes half of it: callgrind). Per value: null, false, true a tag
/// word; an integer `UINT`/`NEGINT` and its 64 bits (two's complement), a float `FLOAT` and
/// its bits; a string, array or object its tag with its length (bytes, items, members) from
/// bit 8, then a string's bytes zero-padded to whole words, the items, the members as key
/// (a string) and value. Two params have one encoding exactly when they have one canonical
/// text. Stored by the durable mirror (the fingerprint): a change here changes stored
/// numbers; `legacy::decision`'s test pins one.
///
/// Returns the top-level members a request is read by after its fingerprint (`ParamsTop`),
/// found in the same pass over the members.
pub(crate) fn hash_params<'v>(params: WireValue<'v>, h: &mut StableHasher) -> ParamsTop<'v> {
    let mut top = ParamsTop::default();
    if params.as_object().is_none() {
        hash_value(params, h, true);
        return top;
    }
    // The members sorted with `_meta` kept, so that its value is found here too; it is left
    // out of the encoding below as `hash_value`'s top level leaves it out (equal keys are
    // adjacent once sorted, each with its first occurrence's value).
    with_sorted_members(params, false, |members| {
        let meta = members.iter().filter(|&&(key, _, _)| key == "_meta").count();
        h.write_word(tag::OBJECT | ((members.len() - meta) as u64) << 8);
        for &(key, _, value) in members {
            match key {
                "_meta" => {
                    top.meta = Some(value);
                    continue;
                }
                "name" => top.name = Some(value),
                "arguments" => top.arguments = Some(value),
                _ => {}
            }
            hash_str(key, h);
            hash_value(value, h, false);
        }
    });
    top
}

/// The params' top-level members the legacy era reads after the fingerprint (a tool call's
/// `name` and `arguments`, `_meta` for its progress token), each the value of its key's first
/// occurrence as `Value::get` finds it: taken in the fingerprint's pass over the members
/// (`hash_params`), where three `get`s walked them again (~100 instructions each on echo).
/// All `None` when the params are not an object.
#[derive(Clone, Copy, Default)]
pub(crate) struct ParamsTop<'v> {
    pub(crate) name: Option<WireValue<'v>>,
    pub(crate) arguments: Option<WireValue<'v>>,
    pub(crate) meta: Option<WireValue<'v>>,
}

/// A string's fingerprint encoding (`hash_params`).
pub(crate) fn hash_str(text: &str, h: &mut StableHasher) {
    h.write_word(tag::STRING | (text.len() as u64) << 8);
    h.write_padded(text.as_bytes());
}

fn hash_value(v: WireValue<'_>, h: &mut StableHasher, top: bool) {
    match v.value_type() {
        ValueType::Null => h.write_word(tag::NULL),
        ValueType::Bool if v.as_bool() == Some(true) => h.write_word(tag::TRUE),
        ValueType::Bool => h.write_word(tag::FALSE),
        ValueType::I64 | ValueType::U64 if v.as_u64().is_some() => {
            h.write_word(tag::UINT);
            h.write_word(v.as_u64().unwrap_or_default());
        }
        ValueType::I64 => {
            h.write_word(tag::NEGINT);
            h.write_word(v.as_i64().unwrap_or_default() as u64);
        }
        ValueType::F64 => {
            h.write_word(tag::FLOAT);
            h.write_word(v.as_f64().unwrap_or_default().to_bits());
        }
        ValueType::String => hash_str(v.as_str().unwrap_or_default(), h),
        ValueType::Array => {
            let Some(items) = v.as_array() else { return };
            h.write_word(tag::ARRAY | (items.len() as u64) << 8);
            items.iter().for_each(|item| hash_value(item, h, false));
        }
        ValueType::Object => with_sorted_members(v, top, |members| {
            h.write_word(tag::OBJECT | (members.len() as u64) << 8);
            for &(key, _, value) in members {
                hash_str(key, h);
                hash_value(value, h, false);
            }
        }),
        _ => {
            let mut text = StableHasher::default();
            let _ = v.write(&mut HashWrite(&mut text));
            h.write_word(tag::OTHER);
            h.write_word(text.finish());
        }
    }
}

/// An `io::Write` into a `StableHasher` (a value of a type without a word encoding).
struct HashWrite<'h>(&'h mut StableHasher);

impl io::Write for HashWrite<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Hands `each` the members of object `v` in canonical order: sorted by key, equal keys in
/// their order (with their position), each with the value of its key's first occurrence; a
/// top-level `_meta` left out. Up to `CANONICAL_INLINE_KEYS` members on the stack, more in a `Vec`.
fn with_sorted_members<'v, R>(
    v: WireValue<'v>,
    top: bool,
    each: impl FnOnce(&[(&'v str, usize, WireValue<'v>)]) -> R,
) -> R {
    let obj = v.as_object();
    let members =
        || obj.iter().flat_map(|o| o.iter()).filter(move |(k, _)| !(top && *k == "_meta"));
    let len = members().count();
    let mut inline = [("", 0usize, WireValue::null()); CANONICAL_INLINE_KEYS];
    let mut heap = Vec::new();
    let sorted: &mut [(&str, usize, WireValue<'_>)] = if len <= CANONICAL_INLINE_KEYS {
        &mut inline[..len]
    } else {
        heap.resize(len, ("", 0usize, WireValue::null()));
        &mut heap
    };
    for (slot, (at, (key, value))) in sorted.iter_mut().zip(members().enumerate()) {
        *slot = (key, at, value);
    }
    // Unstable (it never allocates) but total: equal keys stay in their order.
    sorted.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut first = 0;
    for i in 1..sorted.len() {
        if sorted[i].0 == sorted[first].0 {
            sorted[i].2 = sorted[first].2;
        } else {
            first = i;
        }
    }
    each(sorted)
}

fn canonical<W: io::Write>(v: WireValue<'_>, out: &mut W, top: bool) {
    // Writing into a Vec cannot fail: the results are ignored.
    if v.as_object().is_some() {
        with_sorted_members(v, top, |members| {
            let _ = out.write_all(b"{");
            for (i, &(key, _, value)) in members.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                write_json_str(key, out);
                let _ = out.write_all(b":");
                canonical(value, out, false);
            }
            let _ = out.write_all(b"}");
        });
    } else if let Some(items) = v.as_array() {
        let _ = out.write_all(b"[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                let _ = out.write_all(b",");
            }
            canonical(item, out, false);
        }
        let _ = out.write_all(b"]");
    } else if let Some(text) = v.as_str() {
        write_json_str(text, out);
    } else {
        let _ = v.write(out);
    }
}

/// Strings up to this many bytes are checked for escapes here (`write_json_str`); longer ones
/// go to the encoder's SIMD scan.
const PLAIN_STR_BYTES_MAX: usize = 128;

/// Writes `text` as a JSON string, as the encoder does: a short string with nothing to escape
/// (no control character, `"` or `\`, the only bytes the encoder escapes) between quotes as
/// it is, without the encoder's per-string set-up and its piecewise writes (most of a short
/// key's cost: callgrind); any other through the encoder.
fn write_json_str<W: io::Write>(text: &str, out: &mut W) {
    if !push_plain_json_str(out, text) {
        let _ = simd_json::BorrowedValue::from(text).write(out);
    }
}

/// Appends `text` as a JSON string when it is short and holds nothing to escape (no control
/// character, `"` or `\`: the only bytes `serde_json` and simd-json escape), quoted as it is;
/// `false`, with nothing written, otherwise. A built-in tool's text answer goes out this way
/// (`ToolAnswer::push_text_json`): `serde_json`'s string writer took 178 instructions for
/// echo's 16 bytes (callgrind, issue 40's sixth step).
/// The fast path of `write_json_str` too, so the two encoders' plain strings are one rule.
pub(crate) fn push_plain_json_str<W: io::Write>(out: &mut W, text: &str) -> bool {
    if text.len() > PLAIN_STR_BYTES_MAX || escapes(text.as_bytes()) {
        return false;
    }
    let _ = out.write_all(b"\"");
    let _ = out.write_all(text.as_bytes());
    let _ = out.write_all(b"\"");
    true
}

/// True when `bytes` hold a byte the encoder escapes (below 0x20, `"` or `\`), tested eight at a
/// time: the byte-by-byte test was most of `write_json_str`'s ~800 instructions per echo
/// (callgrind, issue 40 §3). The word tests are exact for "is there such a byte": a borrow
/// only ever runs on from a byte that matched.
fn escapes(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH_BITS != 0;
    let has = |w: u64, b: u8| below(w ^ (ONES * u64::from(b)), 1);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let w = u64::from_le_bytes(w);
        if below(w, 0x20) || has(w, b'"') || has(w, b'\\') {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// What a rendered answer says, read back from its bytes (the audit trail's outcome): its HTTP
/// status when the bytes start with a status line, and its final JSON-RPC response: `Ok` a
/// result (true when a tool's result has `isError: true`), `Err` an error's code. The final
/// response is the last `{"jsonrpc":"2.0","id":` in the bytes (SSE events before it are
/// notifications or requests of their own); its first `"result":` or `"error":` is its member,
/// since an id is a scalar and a string escapes its quotes.
pub(crate) fn answered(bytes: &[u8]) -> (Option<u16>, Option<Result<bool, i64>>) {
    use memchr::memmem;
    let status = bytes
        .strip_prefix(b"HTTP/1.1 ")
        .and_then(|rest| std::str::from_utf8(rest.get(..3)?).ok()?.parse::<u16>().ok());
    let Some(start) = memmem::rfind(bytes, RESPONSE_PREFIX) else { return (status, None) };
    let message = &bytes[start..];
    let result = memmem::find(message, b"\"result\":");
    let error = memmem::find(message, b"\"error\":");
    let outcome = match (result, error) {
        (Some(r), e) if e.is_none_or(|e| r < e) => {
            Some(Ok(memmem::find(&message[r..], b"\"isError\":true").is_some()))
        }
        (_, Some(e)) => {
            let code = memmem::find(&message[e..], b"\"code\":")
                .and_then(|at| leading_integer(&message[e + at + 7..]));
            Some(Err(code.unwrap_or(0)))
        }
        _ => None,
    };
    (status, outcome)
}

/// The audit trail's ending of a call from its rendered answer (`answered`), `-31006` read as
/// an unknown outcome. The one reading of an answer both eras' audit hooks use.
pub(crate) fn audit_ending(bytes: &[u8]) -> crate::audit::Ending {
    crate::audit::Ending::of_answer(answered(bytes), super::code::Code::OutcomeUnknown.value())
}

/// The integer at the start of `text` (after spaces), if any.
fn leading_integer(text: &[u8]) -> Option<i64> {
    let text = text.trim_ascii_start();
    let digits = |(i, b): (usize, &u8)| !(b.is_ascii_digit() || (i == 0 && *b == b'-'));
    let end = text.iter().enumerate().position(digits).unwrap_or(text.len());
    std::str::from_utf8(&text[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod answered_tests {
    use crate::wire::jsonrpc::answered;

    #[test]
    fn outcomes_are_read_off_rendered_answers() {
        let json = |body: &str| format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{body}");
        let ok = json(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#);
        assert_eq!(answered(ok.as_bytes()), (Some(200), Some(Ok(false))));
        let tool = json(r#"{"jsonrpc":"2.0","id":"a","result":{"content":[],"isError":true}}"#);
        assert_eq!(answered(tool.as_bytes()), (Some(200), Some(Ok(true))));
        let err =
            json(r#"{"jsonrpc":"2.0","id":"\"error\":","error":{"code":-32602,"message":"x"}}"#);
        assert_eq!(answered(err.as_bytes()), (Some(200), Some(Err(-32602))));
        assert_eq!(answered(b"HTTP/1.1 409 Conflict\r\n\r\n{}"), (Some(409), None));
        // A log notification before the result carries an "error" key in its data.
        let sse = concat!(
            r#"data: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":{"error":{"code":1}}}}"#,
            "\n\n",
            r#"data: {"jsonrpc":"2.0","id":3,"result":{}}"#
        );
        assert_eq!(answered(sse.as_bytes()), (None, Some(Ok(false))));
    }
}

/// A JSON text decoded onto a tape that lives for the rest of the test process (leaked), for
/// unit tests that need a `WireValue`.
#[cfg(test)]
pub(crate) fn leaked_value(text: &str) -> WireValue<'static> {
    let bytes = Box::leak(text.as_bytes().to_vec().into_boxed_slice());
    let tape: &'static Tape<'static> =
        Box::leak(Box::new(simd_json::to_tape(bytes).expect("json")));
    tape.as_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word test against the byte test: every byte value at every position of a string of
    /// two words and a remainder, among plain bytes and among bytes of multi-byte characters.
    #[test]
    fn escapes_finds_exactly_the_bytes_the_encoder_escapes() {
        for filler in [b'a', 0xc3, 0x7f, 0xff] {
            for at in 0..19 {
                for b in 0..=255u8 {
                    let mut bytes = vec![filler; 19];
                    bytes[at] = b;
                    let want = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(escapes(&bytes), want, "byte {b:#x} at {at} among {filler:#x}");
                    assert_eq!(escapes(&bytes[..=at]), want, "byte {b:#x} ending {at} bytes");
                }
            }
        }
    }

    fn dec(s: &str) -> Result<Body<'static>, DecodeError> {
        let body = Box::leak(s.as_bytes().to_vec().into_boxed_slice());
        decode(body, Box::leak(Box::new(Tape::null())), 8)
    }

    /// A request body of exactly `len` bytes (a string param pads it).
    fn body_of(len: usize) -> Vec<u8> {
        let (head, tail) = (r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"t":""#, r#""}}"#);
        let pad = len - head.len() - tail.len();
        [head.as_bytes(), &vec![b'a'; pad], tail.as_bytes()].concat()
    }

    /// The structural indexes the core's parser scratch holds: those of the last body decoded
    /// when it was kept, none when it was let go.
    fn scratch_indexes() -> usize {
        BUFFERS.with_borrow(|buffers| buffers.structural_indexes().len())
    }

    /// Goal: a request toward an upstream is written byte for byte as `serde_json` wrote the
    /// same message built as a value (what an upstream saw before). Method: ids at 0, 1 and
    /// `u64::MAX`, a method that needs escaping, and params with nesting, escapes, non-ASCII
    /// text and numbers, against `serde_json::to_vec` of the `json!` message.
    #[test]
    fn an_upstream_request_has_the_bytes_of_its_serde_json_value() {
        let params = [
            serde_json::json!({}),
            serde_json::json!(null),
            serde_json::json!({ "name": "echo", "arguments": { "text": "hé \"x\"\n\u{1}</" },
                "_meta": { "progressToken": 7, "traceparent": "00-ab-cd-01" } }),
            serde_json::json!({ "n": [1, -2, 2.5, 1e300, true, null], "z": {}, "a": [] }),
        ];
        for id in [0, 1, u64::MAX] {
            for method in ["tools/call", "x\"y\\z\u{7f}é"] {
                for p in &params {
                    let mut ours = Vec::new();
                    push_upstream_request(&mut ours, id, method, p);
                    let value = serde_json::json!({
                        "jsonrpc": "2.0", "id": id, "method": method, "params": p
                    });
                    let theirs = serde_json::to_vec(&value).expect("serializes");
                    assert_eq!(String::from_utf8(ours), String::from_utf8(theirs));
                }
            }
        }
    }

    /// Goal: a tool call toward an upstream written from the client's decoded arguments
    /// (`push_upstream_call` over `push_value`) has the bytes the params value gave
    /// (`push_upstream_request`) when the arguments' keys come sorted, as a value sorts them;
    /// in another order, or with a float's exponent spelt otherwise, the same value once parsed. Method: arguments with escapes, non-ASCII
    /// text, numbers and nesting, none, with and without a traceparent, both ways.
    #[test]
    fn an_upstream_call_from_decoded_arguments_has_the_bytes_of_its_value() {
        let arguments = [
            Some(r#"{"text":"hé \"x\"\n\u0001</"}"#),
            Some(r#"{"a":[],"n":[1,-2,2.5,1e300,true,null],"z":{"k":{}}}"#),
            Some(r#"{"z":1,"a":2}"#),
            None,
        ];
        for text in arguments {
            for traceparent in [None, Some("00-ab-cd-01")] {
                let mut body = text.unwrap_or("null").as_bytes().to_vec();
                let decoded = simd_json::to_tape(&mut body).expect("JSON");
                let mut encoded = Vec::new();
                if text.is_some() {
                    push_value(&mut encoded, decoded.as_value());
                }
                let mut ours = Vec::new();
                let arguments = text.map(|_| encoded.as_slice());
                push_upstream_call(&mut ours, 7, "t\"ool", arguments, traceparent);
                let mut params =
                    serde_json::json!({ "name": "t\"ool", "_meta": { "progressToken": 7 } });
                if let Some(text) = text {
                    params["arguments"] = serde_json::from_str(text).expect("JSON");
                }
                if let Some(t) = traceparent {
                    params["_meta"]["traceparent"] = t.into();
                }
                let mut theirs = Vec::new();
                push_upstream_request(&mut theirs, 7, "tools/call", &params);
                // Another key order, or a float's exponent (`1e300`, `1e+300`): the same value.
                if text.is_some_and(|t| t.contains("1e300") || t.starts_with(r#"{"z""#)) {
                    let ours: serde_json::Value = serde_json::from_slice(&ours).expect("JSON");
                    let theirs: serde_json::Value = serde_json::from_slice(&theirs).expect("JSON");
                    assert_eq!(ours, theirs);
                } else {
                    assert_eq!(String::from_utf8(ours), String::from_utf8(theirs));
                }
            }
        }
    }

    /// Goal: `SCRATCH_KEEP_BODY_BYTES` at N and N + 1: the core keeps the parser scratch of a
    /// body of exactly the limit and lets a larger one's go. Method: the scratch (this test
    /// thread's) after decoding each, a small body first so it is not empty either way.
    #[test]
    fn the_parser_scratch_is_kept_up_to_its_limit_and_let_go_past_it() {
        for (len, kept) in [(SCRATCH_KEEP_BODY_BYTES, true), (SCRATCH_KEEP_BODY_BYTES + 1, false)] {
            let mut small = body_of(100);
            let mut tape = Tape::null();
            decode(&mut small, &mut tape, 8).expect("a small request");
            assert!(scratch_indexes() > 0);
            let mut body = body_of(len);
            assert_eq!(body.len(), len);
            let mut tape = Tape::null();
            assert!(matches!(decode(&mut body, &mut tape, 8), Ok(Body::Single(_))), "{len} B");
            assert_eq!(scratch_indexes() > 0, kept, "a body of {len} B");
        }
    }

    /// Goal: `TAPE_KEEP_NODES` at N and N + 1: a connection's slot keeps a tape of exactly the
    /// limit and drops a larger one.
    #[test]
    fn a_tape_is_kept_up_to_its_limit_and_dropped_past_it() {
        for (nodes, kept) in [(TAPE_KEEP_NODES, true), (TAPE_KEEP_NODES + 1, false)] {
            let slot = TapeSlot::default();
            let tape: Tape<'static> = Tape(Vec::with_capacity(nodes));
            assert_eq!(tape.0.capacity(), nodes);
            slot.put(tape);
            assert_eq!(slot.take().0.capacity() == nodes, kept, "a tape of {nodes} nodes");
        }
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
            let mut tape = Tape::null();
            assert_eq!(
                decode(&mut b, &mut tape, 8).err(),
                Some(want),
                "{:?}",
                String::from_utf8_lossy(body)
            );
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
            assert_eq!(params.get("t").and_then(|v| v.into_string()), Some(want), "{text}");
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
        let (ta, tb) = (simd_json::to_tape(&mut a).unwrap(), simd_json::to_tape(&mut b).unwrap());
        let (mut ca, mut cb) = (String::new(), String::new());
        canonical_params(ta.as_value(), &mut ca);
        canonical_params(tb.as_value(), &mut cb);
        assert_eq!(ca, cb);
        assert_eq!(ca, r#"{"a":"s","b":{"x":[2,{"p":2,"q":1}],"y":1}}"#);
    }

    /// The canonical text of the decoder before the tape (an `OwnedValue` tree, keys sorted in
    /// a Vec): the oracle the fingerprints must keep matching, since the durable mirror
    /// stores them.
    fn owned_canonical(v: &simd_json::OwnedValue, out: &mut String, top: bool) {
        use simd_json::OwnedValue as V;
        match v {
            V::Object(obj) => {
                let mut keys: Vec<&String> =
                    obj.keys().filter(|k| !(top && *k == "_meta")).collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&V::from(k.as_str()).encode());
                    out.push(':');
                    if let Some(child) = obj.get(k.as_str()) {
                        owned_canonical(child, out, false);
                    }
                }
                out.push('}');
            }
            V::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    owned_canonical(item, out, false);
                }
                out.push(']');
            }
            other => out.push_str(&other.encode()),
        }
    }

    /// Goal: the fingerprint is the same function of the params as before the tape (hashing
    /// the canonical text as a `str`), for escapes, numbers, nesting, duplicate keys, and
    /// objects above and at `CANONICAL_INLINE_KEYS`. Method: the old text form as the oracle.
    #[test]
    fn hashed_canonical_form_matches_the_owned_text_form() {
        let wide = |n: usize| {
            let members: Vec<String> = (0..n).rev().map(|i| format!(r#""k{i:02}":{i}"#)).collect();
            format!("{{{}}}", members.join(","))
        };
        let texts = [
            r#"{}"#.to_owned(),
            r#"[]"#.to_owned(),
            r#"{"name":"echo","arguments":{"text":"h\u00e9llo \"x\"\n\t/"}}"#.to_owned(),
            r#"{"b":[1,-2,3.5,1e300,18446744073709551615,true,false,null],"a":{"z":{},"y":[]}}"#
                .to_owned(),
            r#"{"_meta":{"progressToken":1},"x":{"_meta":2}}"#.to_owned(),
            r#"{"d":1,"d":2,"c":{"e":3,"e":[4]}}"#.to_owned(),
            r#"[{"b":1,"a":2},"\ud83d\ude00",""]"#.to_owned(),
            r#"{"é\"ü":"ẞ\n😀\\ü\"","\u0001ä":["ö\tö"],"\ud83d\ude00":"x"}"#.to_owned(),
            wide(CANONICAL_INLINE_KEYS),
            wide(CANONICAL_INLINE_KEYS + 1),
            wide(40),
            // Strings at and past `PLAIN_STR_BYTES_MAX`, plain and with one escape at the end.
            format!(
                r#"{{"{0}":"{0}","{1}":"{1}\n","\u007f":1}}"#,
                "k".repeat(128),
                "v".repeat(129)
            ),
            format!(r#"{{"{0}\"":"{0}\\"}}"#, "q".repeat(127)),
            // A long string.
            format!(r#"{{"long":"{}","after":1}}"#, "x".repeat(768)),
        ];
        // The encoder writes long strings in SIMD blocks that may end inside a character (the
        // fuzzer found `0…01\u{616}d` as a key): a two-, three- and four-byte character at
        // every offset of a string longer than two blocks, with a `"` to escape after it.
        let cut = (0..80).flat_map(|at| {
            ["\u{616}", "\u{2603}", "\u{1F600}"].map(|ch| {
                let s = format!("{}{ch}\"{}", "0".repeat(at), "1".repeat(80 - at));
                format!(r#"{{{}:{}}}"#, serde_json::json!(s), serde_json::json!(s))
            })
        });
        for text in texts.into_iter().chain(cut) {
            let mut owned_bytes = text.as_bytes().to_vec();
            let owned = simd_json::to_owned_value(&mut owned_bytes).expect("json");
            let mut want = String::new();
            owned_canonical(&owned, &mut want, true);
            let view = leaked_value(&text);
            let mut got = String::new();
            canonical_params(view, &mut got);
            assert_eq!(got, want, "{text}");
            let mut pieces = Vec::new();
            write_canonical_params(view, &mut pieces);
            assert_eq!(pieces, want.as_bytes(), "{text}");
        }
    }

    /// Goal: the members `hash_params` hands back are what `Value::get` finds (the first
    /// occurrence of a key, nothing for params that are not an object), so reading them from
    /// the fingerprint's pass changes no request's reading. Method: duplicate keys, `_meta`
    /// first, last and twice, near-miss keys, and params of every other kind.
    #[test]
    fn the_fingerprint_pass_finds_the_members_get_finds() {
        let texts = [
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":7}}"#,
            r#"{"_meta":{"progressToken":"a"},"arguments":[1],"name":"b"}"#,
            r#"{"name":"a","name":"b","arguments":1,"arguments":2,"_meta":3,"_meta":4}"#,
            r#"{"_meta":4,"x":1,"_meta":3,"names":"n","argument":1,"Name":2,"_met":5}"#,
            r#"{"x":{"name":"inner","_meta":1}}"#,
            r#"{}"#,
            r#"[{"name":"echo"}]"#,
            r#""name""#,
            r#"null"#,
            r#"7"#,
        ];
        let text_of = |v: Option<WireValue<'_>>| v.map(|v| v.encode());
        for text in texts {
            let view = leaked_value(text);
            let top = hash_params(view, &mut StableHasher::default());
            assert_eq!(text_of(top.name), text_of(view.get("name")), "{text}");
            assert_eq!(text_of(top.arguments), text_of(view.get("arguments")), "{text}");
            assert_eq!(text_of(top.meta), text_of(view.get("_meta")), "{text}");
        }
    }

    /// Goal: two params have one fingerprint encoding (`hash_params`) exactly when they have
    /// one canonical text, so the fingerprint ignores what the canonical form ignores (key
    /// order, a top-level `_meta`) and nothing else. Method: every pair of a set of params
    /// with near misses (number kinds, duplicate keys, nesting, strings that run together).
    #[test]
    fn the_fingerprint_encoding_matches_the_canonical_text() {
        let texts = [
            r#"{"name":"echo","arguments":{"text":"hi"}}"#,
            r#"{"arguments":{"text":"hi"},"name":"echo","_meta":{"progressToken":1}}"#,
            r#"{"arguments":{"text":"hi"},"name":"echo","x":{"_meta":1}}"#,
            r#"{"_meta":1,"arguments":{"text":"hi"},"_meta":2,"name":"echo"}"#,
            r#"{"arguments":{"text":"hi"},"name":"echo","_meta_":1}"#,
            r#"{"_meta":{}}"#,
            r#"{"_met":{}}"#,
            r#"{"arguments":{"text":"h"},"name":"echoi"}"#,
            r#"{"a":1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":-1}"#,
            r#"{"a":"1"}"#,
            r#"{"a":18446744073709551615}"#,
            r#"{"a":1e2}"#,
            r#"{"a":100.0}"#,
            r#"{"a":true}"#,
            r#"{"a":false}"#,
            r#"{"a":null}"#,
            r#"{"a":[]}"#,
            r#"{"a":{}}"#,
            r#"{"a":[1,2]}"#,
            r#"{"a":[[1],2]}"#,
            r#"{"a":[1,[2]]}"#,
            r#"{"d":1,"d":2}"#,
            r#"{"d":2,"d":1}"#,
            r#"{"d":1,"d":1}"#,
            r#"{"d":1}"#,
            r#"{"ab":"c"}"#,
            r#"{"a":"bc"}"#,
            r#"{"a\u0000":""}"#,
            r#"{"a":""}"#,
            r#"{"é":"\u00e9"}"#,
            r#"{"é":"é"}"#,
            r#"{}"#,
            r#"[]"#,
            r#"[null]"#,
            r#"["x"]"#,
        ];
        let of = |text: &str| {
            let view = leaked_value(text);
            let mut canonical = String::new();
            canonical_params(view, &mut canonical);
            let mut h = StableHasher::default();
            hash_params(view, &mut h);
            (canonical, h.finish())
        };
        let all: Vec<(String, u64)> = texts.iter().map(|t| of(t)).collect();
        for (a, (text_a, hash_a)) in all.iter().enumerate() {
            for (text_b, hash_b) in &all[a + 1..] {
                assert_eq!(text_a == text_b, hash_a == hash_b, "{text_a} / {text_b}");
            }
        }
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
