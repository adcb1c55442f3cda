//! `jsonrpc`: the JSON-RPC body decoder and the canonical params fingerprint (CONTRACT §4: a
//! retry is recognised by method + canonical params) on arbitrary bytes.
//!
//! Input: a POST body, as the server would pass it to `decode` (in place, depth limit 64).
//!
//! Properties: no panic; a batch is never empty; for every request and notification, the
//! canonical params text decodes again and canonicalises to itself (so a client that re-sends
//! canonical params is recognised), and re-ordering every object's keys or adding a top-level
//! `_meta` never changes the fingerprint.

use simd_json::prelude::*;
use simd_json::OwnedValue as Value;
use tidemark::fuzz_support::{canonical_params, decode, fingerprint, Body, Message};

/// The server's `config::JSON_DEPTH_MAX`.
const JSON_DEPTH_MAX: usize = 64;
/// What the re-encoded params are wrapped in (one level of depth).
const ENVELOPE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#;

pub fn check(data: &[u8]) {
    let mut body = data.to_vec();
    let messages = match decode(&mut body, JSON_DEPTH_MAX) {
        Ok(Body::Single(m)) => vec![m],
        Ok(Body::Batch(ms)) => {
            assert!(!ms.is_empty(), "empty batch decoded");
            ms
        }
        Err(_) => return,
    };
    for message in &messages {
        match message {
            Message::Request { method, params, .. } | Message::Notification { method, params } => {
                let _ = fingerprint(method, params);
                canonical_round_trip(params);
            }
            Message::Response { .. } => {}
        }
    }
}

fn canonical_round_trip(params: &Value) {
    let mut canon = String::new();
    canonical_params(params, &mut canon);
    let again =
        reparse(&canon).unwrap_or_else(|| panic!("canonical params do not decode: {canon}"));
    let mut canon2 = String::new();
    canonical_params(&again, &mut canon2);
    assert_eq!(canon2, canon, "canonical params are not a fixed point");

    let mut shuffled = String::new();
    reordered(params, &mut shuffled, true);
    let other = reparse(&shuffled).unwrap_or_else(|| panic!("re-ordered params: {shuffled}"));
    assert_eq!(
        fingerprint("m", &other),
        fingerprint("m", params),
        "key order or _meta changed the fingerprint: {canon} vs {shuffled}"
    );
}

/// Decodes `{"jsonrpc":"2.0","id":1,"method":"m","params":<params>}` and returns its params.
fn reparse(params: &str) -> Option<Value> {
    let mut body = format!("{ENVELOPE}{params}}}").into_bytes();
    match decode(&mut body, JSON_DEPTH_MAX) {
        Ok(Body::Single(Message::Request { params, .. })) => Some(params),
        _ => None,
    }
}

/// JSON text of `v` with every object's keys in reverse order and, at the top, a `_meta` of
/// its own first (top-level `_meta` is per attempt: the fingerprint must ignore it).
fn reordered(v: &Value, out: &mut String, top: bool) {
    match v {
        Value::Object(obj) => {
            let mut keys: Vec<&String> = obj.keys().filter(|k| !(top && *k == "_meta")).collect();
            keys.sort();
            keys.reverse();
            out.push('{');
            if top {
                out.push_str(r#""_meta":{"progressToken":[7]}"#);
            }
            for (i, k) in keys.iter().enumerate() {
                if i > 0 || top {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).encode());
                out.push(':');
                reordered(&obj[k.as_str()], out, false);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reordered(item, out, false);
            }
            out.push(']');
        }
        other => out.push_str(&other.encode()),
    }
}
