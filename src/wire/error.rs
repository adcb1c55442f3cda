//! Every JSON-RPC error body the server writes, each with its code, its message and the shape
//! of its `data` in one place: ours by `Code` (`push_error_response`), the named ones with a
//! `data` of their own (outcome unknown, rate limited, an oversize event, a resume gap, a
//! batch's conflict), and a provider's or an upstream's error, whose code may be foreign
//! (`push_error_value`, `error_object`).
//!
//! Called by: `Answer::render`, and the protocol paths and `dispatch` for the errors that
//! travel inside a stream or a batch. Never: decides which error a request gets.

use super::code::Code;
use super::jsonrpc::{self, RawId};
use crate::digits::push_decimal;

/// The message of a 409, by its code.
fn conflict_message(code: Code) -> &'static str {
    match code {
        Code::StreamOwed => {
            "this request's stream is still owed: resume it with GET + Last-Event-ID instead of re-POSTing"
        }
        Code::RequestIdReused => {
            "request id already used in this session: fetch the original answer with GET + Last-Event-ID"
        }
        Code::HeldTooLong => {
            "held too long while the session owes a stream: resume it with GET + Last-Event-ID first"
        }
        _ => "conflict",
    }
}

/// The 409 of CONTRACT §4 steps 2–4 (`code`: -31001, -31002 or -31004), its message by its
/// code and `data` its `owedStreams` (`owed_streams_data`), written in place.
pub(crate) fn push_conflict(
    out: &mut Vec<u8>,
    id: &RawId,
    code: Code,
    matched_by: Option<&str>,
    streams: impl FnOnce(&mut dyn FnMut(OwedStream<'_>)),
) {
    let message = conflict_message(code);
    jsonrpc::push_error_with_data(out, Some(id), code.value(), message, |out: &mut Vec<u8>| {
        owed_streams_data(out, matched_by, streams)
    });
}

/// The 422 of CONTRACT §4 step 1 (-31005): an Idempotency-Key reused with another call.
pub(super) fn push_key_reused(out: &mut Vec<u8>, id: &RawId) {
    let message = "Idempotency-Key already used with other method or params";
    push_error_response(out, Some(id), Code::KeyReused, message, None);
}

/// The 409 (-31004) of a 2026-07-28 retry whose keyed call still runs (CONTRACT §5):
/// `{"inFlight":true}` tells it to come back.
pub(super) fn push_still_running(out: &mut Vec<u8>, id: &RawId) {
    let message = "the call with this Idempotency-Key is still running: retry later";
    let data = Some(r#"{"inFlight":true}"#);
    push_error_response(out, Some(id), Code::HeldTooLong, message, data);
}

/// MCP's UnsupportedProtocolVersion (-32022): `data` lists the revisions we serve and echoes
/// the one asked for.
pub(super) fn push_unsupported_version(
    out: &mut Vec<u8>,
    id: &RawId,
    requested: &str,
    supported: &[&str],
) {
    let data = serde_json::json!({ "supported": supported, "requested": requested });
    let message = "unsupported protocol version";
    push_error_response(
        out,
        Some(id),
        Code::UnsupportedProtocolVersion,
        message,
        Some(&data.to_string()),
    );
}

/// One stream a session owes, as the `data` of a CONTRACT §4 conflict names it: its request's
/// id (`None` for a standalone stream) and its event ids (ASCII).
pub(crate) struct OwedStream<'a> {
    pub(crate) request_id: Option<&'a RawId>,
    /// Where to resume (`Last-Event-ID`).
    pub(crate) last_event_id: &'a [u8],
    pub(crate) first_event_id: &'a [u8],
    pub(crate) last_written_event_id: &'a [u8],
    /// The request still runs.
    pub(crate) in_flight: bool,
}

/// Writes the `data` of a conflict (CONTRACT §4 steps 2–4): `matchedBy` when a retry was
/// recognised (-31001), then `owedStreams`, one object per stream `streams` hands to the
/// writer it is given (so the caller's event ids can live on its stack).
pub(crate) fn owed_streams_data(
    out: &mut Vec<u8>,
    matched_by: Option<&str>,
    streams: impl FnOnce(&mut dyn FnMut(OwedStream<'_>)),
) {
    out.push(b'{');
    if let Some(by) = matched_by {
        out.extend_from_slice(b"\"matchedBy\":\"");
        out.extend_from_slice(by.as_bytes());
        out.extend_from_slice(b"\",");
    }
    out.extend_from_slice(b"\"owedStreams\":[");
    let mut first = true;
    streams(&mut |st: OwedStream<'_>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        push_owed_stream(out, &st);
    });
    out.extend_from_slice(b"]}");
}

/// One object of `owedStreams`. Event ids are ASCII (`legacy::session::push_event_id`).
fn push_owed_stream(out: &mut Vec<u8>, st: &OwedStream<'_>) {
    out.extend_from_slice(b"{\"requestId\":");
    out.extend_from_slice(st.request_id.map_or(b"null".as_slice(), |r| r.as_bytes()));
    out.extend_from_slice(b",\"lastEventId\":\"");
    out.extend_from_slice(st.last_event_id);
    out.extend_from_slice(b"\",\"firstEventId\":\"");
    out.extend_from_slice(st.first_event_id);
    out.extend_from_slice(b"\",\"lastWrittenEventId\":\"");
    out.extend_from_slice(st.last_written_event_id);
    out.extend_from_slice(b"\",\"inFlight\":");
    out.extend_from_slice(if st.in_flight { b"true" } else { b"false" });
    out.push(b'}');
}

/// A JSON-RPC error response with one of our codes.
pub(crate) fn push_error_response(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    code: Code,
    message: &str,
    data: Option<&str>,
) {
    jsonrpc::push_error(out, id, code.value(), message, data);
}

/// The final response (-31006) of a call whose node stopped before its result reached the
/// durable store: `node` ran it, `last_event_id` is the last event of its stream the store
/// holds (`None`: none after its priming event).
pub(crate) fn push_outcome_unknown(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    node: u8,
    last_event_id: Option<&str>,
) {
    let data = match last_event_id {
        Some(event) => format!("{{\"node\":{node},\"lastEventId\":\"{event}\"}}"),
        None => format!("{{\"node\":{node},\"lastEventId\":null}}"),
    };
    jsonrpc::push_error(
        out,
        id,
        Code::OutcomeUnknown.value(),
        "outcome unknown: the node running this call stopped; it is not run again",
        Some(&data),
    );
}

/// The JSON-RPC error of a request over a `--rate-limit` (-31007), alone or as one element of
/// a batch's array: `data` names the limit's scope (as configured, JSON-escaped) and the wait.
pub(crate) fn push_rate_limited(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    scope: &str,
    retry_after_ms: u64,
    table_full: bool,
) {
    let mut data = Vec::with_capacity(48 + scope.len());
    data.extend_from_slice(b"{\"scope\":");
    data.extend_from_slice(serde_json::Value::from(scope).to_string().as_bytes());
    data.extend_from_slice(b",\"retryAfterMs\":");
    push_decimal(&mut data, retry_after_ms);
    data.push(b'}');
    let data = String::from_utf8_lossy(&data);
    let message = if table_full {
        "rate limited (--rate-limit; this core's bucket table is full, see \
         --rate-buckets-per-core): retry after Retry-After"
    } else {
        "rate limited (--rate-limit): retry after Retry-After"
    };
    jsonrpc::push_error(out, id, Code::RateLimited.value(), message, Some(&data));
}

/// The error that ends a request whose event does not fit the replay ring at all (bigger
/// than `--replay-bytes`): -32603 naming the flag, with both sizes, so the operator knows
/// which limit to raise and the client is never left waiting for an event that cannot exist.
pub(crate) fn push_oversize_error(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    event_bytes: usize,
    replay_bytes: usize,
) {
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(b"{\"eventBytes\":");
    push_decimal(&mut data, event_bytes as u64);
    data.extend_from_slice(b",\"replayBytes\":");
    push_decimal(&mut data, replay_bytes as u64);
    data.push(b'}');
    let data = String::from_utf8_lossy(&data);
    let message = "event larger than the replay buffer (--replay-bytes): raise --replay-bytes";
    jsonrpc::push_error(out, id, Code::InternalError.value(), message, Some(&data));
}

/// A JSON-RPC error response whose code is not necessarily ours (a provider's `Rpc` error, an
/// upstream's relayed one), `data` encoded from its value; a `data` that cannot be encoded is
/// left out.
pub(crate) fn push_error_value(
    out: &mut Vec<u8>,
    id: &RawId,
    code: i64,
    message: &str,
    data: Option<&serde_json::Value>,
) {
    let data = data.and_then(|d| serde_json::to_string(d).ok());
    jsonrpc::push_error(out, Some(id), code, message, data.as_deref());
}

/// A JSON-RPC error object as a value (`{"code","message"[,"data"]}`): what a failed task
/// carries, and what the bridge answers an upstream's request with.
pub(crate) fn error_object(
    code: i64,
    message: &str,
    data: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("code".into(), serde_json::Value::from(code));
    object.insert("message".into(), serde_json::Value::from(message));
    if let Some(data) = data {
        object.insert("data".into(), data);
    }
    serde_json::Value::Object(object)
}

/// The -31003 event of a resume that found events evicted: `data` names the first and the
/// last event lost (`lost_from`, `lost_to`: event ids, ASCII), so the client knows its gap.
pub(crate) fn push_events_lost(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    lost_from: &[u8],
    lost_to: &[u8],
) {
    let mut data = Vec::with_capacity(32 + lost_from.len() + lost_to.len());
    data.extend_from_slice(b"{\"lostFrom\":\"");
    data.extend_from_slice(lost_from);
    data.extend_from_slice(b"\",\"lostTo\":\"");
    data.extend_from_slice(lost_to);
    data.extend_from_slice(b"\"}");
    let data = String::from_utf8_lossy(&data);
    let message = "events after Last-Event-ID were evicted from the replay buffer";
    push_error_response(out, id, Code::EventsLost, message, Some(&data));
}

/// One request of a batch refused by the migration decision (`code`: -31001, -31002 or
/// -31004; `data`: its `owedStreams`, as `owed_streams_data`): the batch shares one status
/// (200), so the error points at the 409 the request would get alone.
pub(crate) fn push_batch_conflict(
    out: &mut Vec<u8>,
    id: &RawId,
    code: Code,
    matched_by: Option<&str>,
    streams: impl FnOnce(&mut dyn FnMut(OwedStream<'_>)),
) {
    let message = "conflict: see the 409 of a single request";
    jsonrpc::push_error_with_data(out, Some(id), code.value(), message, |out: &mut Vec<u8>| {
        owed_streams_data(out, matched_by, streams)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the error bodies keep their exact bytes (clients and the conformance suite read
    /// them). Method: each encoder once, against its whole body.
    #[test]
    fn each_error_body_is_written_exactly() {
        let id = RawId::new("7");
        let body = |write: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::new();
            write(&mut out);
            String::from_utf8(out).expect("UTF-8")
        };
        let prefix = r#"{"jsonrpc":"2.0","id":7,"error":"#;
        let table: [(String, &str); 7] = [
            (
                body(&|o| push_key_reused(o, &id)),
                r#"{"code":-31005,"message":"Idempotency-Key already used with other method or params"}}"#,
            ),
            (
                body(&|o| push_still_running(o, &id)),
                r#"{"code":-31004,"message":"the call with this Idempotency-Key is still running: retry later","data":{"inFlight":true}}}"#,
            ),
            (
                body(&|o| push_unsupported_version(o, &id, "2024-11-05", &["2025-11-25"])),
                r#"{"code":-32022,"message":"unsupported protocol version","data":{"requested":"2024-11-05","supported":["2025-11-25"]}}}"#,
            ),
            (
                body(&|o| push_events_lost(o, Some(&id), b"a-1", b"a-9")),
                r#"{"code":-31003,"message":"events after Last-Event-ID were evicted from the replay buffer","data":{"lostFrom":"a-1","lostTo":"a-9"}}}"#,
            ),
            (
                body(&|o| push_batch_conflict(o, &id, Code::StreamOwed, None, |_| {})),
                r#"{"code":-31001,"message":"conflict: see the 409 of a single request","data":{"owedStreams":[]}}}"#,
            ),
            (
                body(&|o| push_error_value(o, &id, -1, "m\"", Some(&serde_json::json!({"a":1})))),
                r#"{"code":-1,"message":"m\"","data":{"a":1}}}"#,
            ),
            (
                body(&|o| push_conflict(o, &id, Code::HeldTooLong, None, |_| {})),
                r#"{"code":-31004,"message":"held too long while the session owes a stream: resume it with GET + Last-Event-ID first","data":{"owedStreams":[]}}}"#,
            ),
        ];
        for (got, error) in table {
            assert_eq!(got, format!("{prefix}{error}"));
        }
        let stream = |request_id, in_flight| OwedStream {
            request_id,
            last_event_id: b"s-3",
            first_event_id: b"s-1",
            last_written_event_id: b"s-2",
            in_flight,
        };
        let owed =
            body(&|o| owed_streams_data(o, Some("id"), |emit| emit(stream(Some(&id), true))));
        assert_eq!(
            owed,
            r#"{"matchedBy":"id","owedStreams":[{"requestId":7,"lastEventId":"s-3","firstEventId":"s-1","lastWrittenEventId":"s-2","inFlight":true}]}"#
        );
        let owed = body(&|o| {
            owed_streams_data(o, None, |emit| {
                emit(stream(None, false));
                emit(stream(None, true));
            })
        });
        assert!(owed.starts_with(r#"{"owedStreams":[{"requestId":null,"#), "{owed}");
        assert!(owed.ends_with(r#""inFlight":false},{"requestId":null,"lastEventId":"s-3","firstEventId":"s-1","lastWrittenEventId":"s-2","inFlight":true}]}"#), "{owed}");
        let object = error_object(-32603, "m", None).to_string();
        assert_eq!(object, r#"{"code":-32603,"message":"m"}"#);
    }
}
