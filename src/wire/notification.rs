//! The notifications both eras send for a call, encoded once: `notifications/progress` (its
//! prefix, which a deduplicated retry's `Rewrite` recognises) and `notifications/message`'s
//! params, and the rewrite that shows a recorded stream to a retry under its own id and
//! progress token. Called by `legacy` (replay rings, observers) and `modern` (calls, keyed
//! records). Never: allocates on the path of a call that needs no rewrite.

use serde_json::Value;

use super::jsonrpc::{self, RawId};

/// How a deduplicated retry (CONTRACT §4 step 1) sees the original stream: its final response
/// carries the retry's JSON-RPC id, and progress carries the retry's progress token, so the
/// client matches both to the request it actually sent.
#[derive(Clone, Debug)]
pub(crate) struct Rewrite {
    pub(crate) id: RawId,
    /// The retry's `_meta.progressToken` (JSON text) and the original's, when both exist.
    pub(crate) progress_token: Option<(Box<str>, Box<str>)>,
}

/// Prefix of a progress notification up to its token: `StreamSink::progress` writes it and a
/// dedup `Rewrite` recognises it.
pub(crate) const PROGRESS_PREFIX: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":";

/// The payload a deduplicated retry sees (only dedup attachments pay for this copy).
pub(crate) fn rewrite_event(
    rw: &Rewrite,
    payload: &[u8],
    is_final: bool,
    body_offset: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 16);
    rewrite_event_into(&mut out, rw, payload, is_final, body_offset);
    out
}

/// [`rewrite_event`] of the data `head` then `payload`, as a replay ring holds an event whose
/// fixed opening (`PROGRESS_PREFIX`) it did not store.
pub(crate) fn rewrite_event_parts(
    rw: &Rewrite,
    head: &[u8],
    payload: &[u8],
    is_final: bool,
    body_offset: usize,
) -> Vec<u8> {
    if head.is_empty() {
        return rewrite_event(rw, payload, is_final, body_offset);
    }
    let joined = [head, payload].concat();
    rewrite_event(rw, &joined, is_final, body_offset)
}

/// `rewrite_event`, appended to `out` (a buffer the caller reuses).
pub(crate) fn rewrite_event_into(
    out: &mut Vec<u8>,
    rw: &Rewrite,
    payload: &[u8],
    is_final: bool,
    body_offset: usize,
) {
    if is_final {
        out.extend_from_slice(jsonrpc::RESPONSE_PREFIX);
        out.extend_from_slice(rw.id.as_bytes());
        out.extend_from_slice(&payload[body_offset.min(payload.len())..]);
        return;
    }
    if let Some((retry, original)) = &rw.progress_token {
        let rest = payload
            .strip_prefix(PROGRESS_PREFIX)
            .and_then(|rest| rest.strip_prefix(original.as_bytes()));
        if let Some(rest) = rest {
            out.extend_from_slice(PROGRESS_PREFIX);
            out.extend_from_slice(retry.as_bytes());
            out.extend_from_slice(rest);
            return;
        }
    }
    out.extend_from_slice(payload);
}

/// A whole `notifications/progress` message for `token` (its JSON text as the client sent it).
pub(crate) fn progress_payload(
    token: &str,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) -> Vec<u8> {
    let mut payload = Vec::with_capacity(160);
    push_progress(&mut payload, token, progress, total, message);
    payload
}

/// `progress_payload` appended to `payload` (a caller's reused buffer).
pub(crate) fn push_progress(
    payload: &mut Vec<u8>,
    token: &str,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) {
    payload.extend_from_slice(PROGRESS_PREFIX);
    payload.extend_from_slice(token.as_bytes());
    payload.extend_from_slice(b",\"progress\":");
    push_number(payload, progress);
    if let Some(t) = total {
        payload.extend_from_slice(b",\"total\":");
        push_number(payload, t);
    }
    if let Some(m) = message {
        payload.extend_from_slice(b",\"message\":");
        let _ = serde_json::to_writer(&mut *payload, m);
    }
    payload.extend_from_slice(b"}}");
}

/// A number as JSON (`1.0`, `0.5`); non-finite values, which JSON cannot carry, as `null`.
/// Serialized straight into `out` (the formatter's buffer is on the stack): a progress event
/// used to allocate a `String` per number.
fn push_number(out: &mut Vec<u8>, n: f64) {
    match serde_json::Number::from_f64(n) {
        // Writing into a `Vec` cannot fail, and a finite number always serializes.
        Some(n) => {
            let _ = serde_json::to_writer(&mut *out, &n);
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// The params of `notifications/message`.
pub(crate) fn log_params(level: &str, logger: Option<&str>, data: Value) -> Value {
    let mut params = serde_json::json!({ "level": level, "data": data });
    if let (Some(l), Some(obj)) = (logger, params.as_object_mut()) {
        obj.insert("logger".into(), Value::from(l));
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_numbers_are_written_as_json_numbers_without_changing_their_text() {
        let payload = progress_payload("\"t\"", 1.0, Some(4.0), None);
        let text = String::from_utf8(payload).unwrap();
        assert!(text.ends_with(r#""progressToken":"t","progress":1.0,"total":4.0}}"#), "{text}");
        // The text is the one `Number`'s `Display` gives (what the payload carried before).
        for n in [0.0, 0.5, 3.0, 1e21, -2.25, f64::MAX, 12345.678] {
            let mut out = Vec::new();
            push_number(&mut out, n);
            let shown = serde_json::Number::from_f64(n).unwrap().to_string();
            assert_eq!(String::from_utf8(out).unwrap(), shown);
        }
        for n in [f64::NAN, f64::INFINITY] {
            let mut out = Vec::new();
            push_number(&mut out, n);
            assert_eq!(out, b"null");
        }
    }
}
