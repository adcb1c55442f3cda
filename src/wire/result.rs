//! JSON-RPC result bodies from a result value (the provider API's `serde_json` value), encoded
//! straight into the caller's buffer; the hot path of every `tools/call` ends here.
//!
//! Also `decorate_result`, which adds members (2026-07-28's `resultType`, cache hints) to a
//! result already encoded, and `response_object`, a whole response as a value (the bridge).
//!
//! Called by: `dispatch` and the protocol paths, for a method's result. Never: builds the
//! result itself (that is the method's), or an intermediate buffer.

use super::code::Code;
use super::error::push_error_response;
use super::jsonrpc::{self, RawId};

/// A result object as a JSON-RPC response, encoded straight into `out` (no intermediate
/// buffer); on failure `out` is rolled back and gets a -32603 instead.
pub(crate) fn push_result_value(out: &mut Vec<u8>, id: &RawId, result: &serde_json::Value) {
    push_result_with(out, id, |out| serde_json::to_writer(out, result));
}

/// A result response whose result object `write` appends to the buffer (a built-in tool's
/// answer, written without a value: `ToolAnswer::push_json`); when `write` fails, `out` is
/// rolled back and gets a -32603 instead.
pub(crate) fn push_result_with<E>(
    out: &mut Vec<u8>,
    id: &RawId,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) {
    let start = out.len();
    jsonrpc::push_result_prefix(out, id);
    if write(&mut *out).is_err() {
        out.truncate(start);
        let message = "result could not be encoded";
        push_error_response(out, Some(id), Code::InternalError, message, None);
        return;
    }
    out.push(b'}');
}

/// A whole JSON-RPC response as a value, `Ok` a result and `Err` an error object
/// (`error_object`): the bridge's answers to an upstream's requests, and the answer it hands
/// its own client side when an upstream's never came.
pub(crate) fn response_object(
    id: serde_json::Value,
    outcome: Result<serde_json::Value, serde_json::Value>,
) -> serde_json::Value {
    match outcome {
        Ok(result) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error }),
    }
}

/// Adds `members` (JSON object members, no braces) to the result object of the response in
/// `body`; an error response is left alone. The response was written by `jsonrpc` for `id`, so
/// its shape is known: prefix, `"result":{…}`, `}`.
pub(crate) fn decorate_result(body: &mut Vec<u8>, id: &RawId, members: &str) {
    let result_at = jsonrpc::response_body_offset(id);
    let is_object_result =
        body.get(result_at..).is_some_and(|rest| rest.starts_with(b",\"result\":{"));
    if !is_object_result || !body.ends_with(b"}}") {
        return;
    }
    let close = body.len() - 2;
    let empty = body[..close].ends_with(b"{");
    let mut insert = Vec::with_capacity(members.len() + 1);
    if !empty {
        insert.push(b',');
    }
    insert.extend_from_slice(members.as_bytes());
    body.splice(close..close, insert);
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPLETE: &str = "\"resultType\":\"complete\"";

    #[test]
    fn decorate_adds_members_to_object_results_only() {
        // Goal: resultType and hints land inside the result object, never in an error.
        let id = RawId::new("7");
        let mut body = Vec::new();
        jsonrpc::push_result(&mut body, &id, b"{\"tools\":[]}");
        decorate_result(&mut body, &id, COMPLETE);
        assert_eq!(
            String::from_utf8_lossy(&body),
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[],"resultType":"complete"}}"#
        );
        let mut empty = Vec::new();
        jsonrpc::push_result(&mut empty, &id, b"{}");
        decorate_result(&mut empty, &id, COMPLETE);
        assert!(String::from_utf8_lossy(&empty).ends_with(r#""result":{"resultType":"complete"}}"#));
        let mut error = Vec::new();
        push_error_response(&mut error, Some(&id), Code::InvalidParams, "x", None);
        let before = error.clone();
        decorate_result(&mut error, &id, COMPLETE);
        assert_eq!(error, before);
    }
}
