//! JSON-RPC result bodies from a result value (the provider API's `serde_json` value), encoded
//! straight into the caller's buffer; the hot path of every `tools/call` ends here.
//!
//! Called by: `dispatch` and the protocol paths, for a method's result. Never: builds the
//! result itself (that is the method's), or an intermediate buffer.

use super::error::push_error_response;
use super::jsonrpc::{self, RawId};
use super::Code;

/// A result object as a JSON-RPC response, encoded straight into `out` (no intermediate
/// buffer); on failure `out` is rolled back and gets a -32603 instead.
pub(crate) fn push_result_value(out: &mut Vec<u8>, id: &RawId, result: &serde_json::Value) {
    let start = out.len();
    jsonrpc::push_result_prefix(out, id);
    if serde_json::to_writer(&mut *out, result).is_err() {
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
