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
use simd_json::Tape;
use tidemark::fuzz_support::{canonical_params, decode, fingerprint, Body, Message, WireValue};

/// The server's `config::JSON_DEPTH_MAX`.
const JSON_DEPTH_MAX: usize = 64;
/// What the re-encoded params are wrapped in (one level of depth).
const ENVELOPE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#;

pub fn check(data: &[u8]) {
    let mut body = data.to_vec();
    let mut tape = Tape::null();
    let messages = match decode(&mut body, &mut tape, JSON_DEPTH_MAX) {
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
                canonical_round_trip(*params);
            }
            Message::Response { .. } => {}
        }
    }
}

fn canonical_round_trip(params: WireValue<'_>) {
    let mut canon = String::new();
    canonical_params(params, &mut canon);
    let (mut body, mut tape) = (envelope(&canon), Tape::null());
    let again = reparse(&mut body, &mut tape)
        .unwrap_or_else(|| panic!("canonical params do not decode: {canon}"));
    let mut canon2 = String::new();
    canonical_params(again, &mut canon2);
    assert_eq!(canon2, canon, "canonical params are not a fixed point");

    let mut shuffled = String::new();
    reordered(params, &mut shuffled, true);
    let (mut body, mut tape) = (envelope(&shuffled), Tape::null());
    let other =
        reparse(&mut body, &mut tape).unwrap_or_else(|| panic!("re-ordered params: {shuffled}"));
    assert_eq!(
        fingerprint("m", &other),
        fingerprint("m", &params),
        "key order or _meta changed the fingerprint: {canon} vs {shuffled}"
    );
}

/// `{"jsonrpc":"2.0","id":1,"method":"m","params":<params>}`.
fn envelope(params: &str) -> Vec<u8> {
    format!("{ENVELOPE}{params}}}").into_bytes()
}

/// Decodes an `envelope` and returns its params.
fn reparse<'a>(body: &'a mut [u8], tape: &'a mut Tape<'a>) -> Option<WireValue<'a>> {
    match decode(body, tape, JSON_DEPTH_MAX) {
        Ok(Body::Single(Message::Request { params, .. })) => Some(params),
        _ => None,
    }
}

/// JSON text of `v` with every object's keys in reverse order and, at the top, a `_meta` of
/// its own first (top-level `_meta` is per attempt: the fingerprint must ignore it).
fn reordered(v: WireValue<'_>, out: &mut String, top: bool) {
    if let Some(obj) = v.as_object() {
        let mut keys: Vec<&str> = obj.keys().filter(|k| !(top && *k == "_meta")).collect();
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
            out.push_str(&simd_json::BorrowedValue::from(*k).encode());
            out.push(':');
            if let Some(child) = obj.get(*k) {
                reordered(child, out, false);
            }
        }
        out.push('}');
    } else if let Some(items) = v.as_array() {
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            reordered(item, out, false);
        }
        out.push(']');
    } else {
        out.push_str(&v.encode());
    }
}
