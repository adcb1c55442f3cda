//! The admission step at the edge: a POST that passed the HTTP rules, its authorization and
//! its owner core is decoded here, once (simd-json, in place), labelled (era and method, for
//! `tidemark_request_duration_seconds`), its span named (`--otlp-endpoint`), its authorization
//! access worked out, and its era settled (a sessionless request whose `_meta` alone names
//! 2026-07-28 goes to the modern era). What comes out is one `core::Admitted` that either era
//! takes instead of raw bytes.
//!
//! Called by `endpoint::route` for every POST it serves. Never: reads a session, a key or a
//! task, or judges what only an era can (the session's tool scope, the rate limit where a
//! request turns out to be new work): the eras ask those of the admitted request, once each.

use crate::auth::Access;
use crate::core::{refuse, Admitted, Answered, Core, Request};
use crate::metrics::{EraLabel, RequestLabel};
use crate::wire::jsonrpc::{self, Body, Message};
use crate::wire::{Refusal, LEGACY_VERSIONS};

/// Which protocol path serves a request: the legacy one (sessions, 2025-03-26 … 2025-11-25)
/// or the stateless 2026-07-28 one, chosen by the protocol version header (`era`) before the
/// body is decoded; a sessionless POST whose `_meta` alone names 2026-07-28 is
/// moved to the modern one once it is (`admit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Era {
    Legacy,
    Modern,
}

/// The era a request's headers choose: the modern one for a request without a session whose
/// `MCP-Protocol-Version` names a revision newer than the legacy ones (2026-07-28, or a future
/// or unknown one, which the modern era refuses with the list of what we serve).
pub(super) fn era(req: &Request<'_>) -> Era {
    let newer = |v: &[u8]| {
        !LEGACY_VERSIONS.iter().any(|l| l.as_bytes() == v) && v > LEGACY_VERSIONS[0].as_bytes()
    };
    let modern =
        req.head.session_id.is_none() && req.header(&req.head.protocol_version).is_some_and(newer);
    if modern {
        Era::Modern
    } else {
        Era::Legacy
    }
}

/// Admits a POST whose headers chose `era`: decodes its body (a body that is no JSON, or no
/// JSON-RPC, is refused here: 400 with -32700 or -32600), settles its era, labels it, names its
/// span and works out its access. `Err`: refused, the answer is in `out`.
pub(super) fn admit<'a, 'b>(
    core: &'a Core,
    req: &'a mut Request<'b>,
    era: Era,
    tape: &'a mut simd_json::Tape<'b>,
    out: &mut Vec<u8>,
) -> Result<(Era, Admitted<'a>), Answered> {
    let keep_alive = req.head.keep_alive;
    // Decoded in place for as long as the request lives ('b): no one reads the bytes after.
    let bytes = std::mem::take(&mut req.body);
    let body = match jsonrpc::decode(bytes, tape, crate::config::JSON_DEPTH_MAX) {
        Ok(b) => b,
        Err(jsonrpc::DecodeError::Parse) => {
            return Err(refuse(out, Refusal::ParseError, None, keep_alive))
        }
        Err(jsonrpc::DecodeError::Invalid) => {
            return Err(refuse(out, Refusal::InvalidRequest, None, keep_alive))
        }
    };
    let req: &'a Request<'_> = req;
    let era = match (era, &body) {
        // Its header did not name 2026-07-28, its `_meta` does: the modern era refuses it with
        // HeaderMismatch (or 404s a modern `initialize`), as the revision says.
        (Era::Legacy, Body::Single(Message::Request { params, .. }))
            if req.head.session_id.is_none()
                && crate::wire::revision::carries_modern_meta(*params) =>
        {
            Era::Modern
        }
        _ => era,
    };
    let era_label = match era {
        Era::Legacy => EraLabel::Legacy,
        Era::Modern => EraLabel::Modern,
    };
    req.label.set(RequestLabel::new(era_label, label_method(&body)));
    note_span(req, &body);
    // The policy's view of the request (`None`: no policy, or authorization off: nothing is
    // filtered or refused by scope).
    let access = Access::of(core.auth.as_deref(), req.policy.as_deref(), req.claims.as_deref());
    Ok((era, Admitted { req, body, access }))
}

/// The `method` label of a decoded body (`metrics::RequestLabel`): a request's method, any
/// notification as `notification`, anything else (responses, batches) as `other`.
fn label_method<'a>(body: &Body<'a>) -> &'a str {
    match body {
        Body::Single(Message::Request { method, .. }) => method,
        Body::Single(Message::Notification { .. }) => "notification",
        _ => "other",
    }
}

/// Names the request's span after its decoded body, as the MCP semantic conventions say:
/// `{mcp.method.name} {target}` (the tool or prompt name), `mcp.method.name`,
/// `jsonrpc.request.id`, `gen_ai.tool.name` (tools/call), `gen_ai.prompt.name`,
/// `mcp.resource.uri`, and `mcp.protocol.version` of an `initialize`. Nothing when tracing is
/// off (or for a batch: its span keeps the HTTP method's name).
fn note_span(req: &Request<'_>, body: &Body) {
    use simd_json::prelude::*;
    let Some(span) = req.span else { return };
    let mut span = span.borrow_mut();
    match body {
        Body::Single(Message::Request { id, method, params }) => {
            let text = |field: &str| params.get(field).and_then(ValueIntoString::into_string);
            let target = match *method {
                "tools/call" | "prompts/get" => text("name"),
                _ => None,
            };
            match target {
                Some(target) => span.rename(&format!("{method} {target}")),
                None => span.rename(method),
            }
            span.set_str("mcp.method.name", method);
            let id = id.as_str();
            let id = id.strip_prefix('"').and_then(|i| i.strip_suffix('"')).unwrap_or(id);
            span.set_str("jsonrpc.request.id", id);
            match (*method, target) {
                ("tools/call", Some(tool)) => {
                    span.set_str("gen_ai.tool.name", tool);
                    span.set_str("gen_ai.operation.name", "execute_tool");
                }
                ("prompts/get", Some(prompt)) => span.set_str("gen_ai.prompt.name", prompt),
                ("resources/read", _) => {
                    if let Some(uri) = text("uri") {
                        span.set_str("mcp.resource.uri", uri);
                    }
                }
                ("initialize", _) => {
                    if let Some(version) = text("protocolVersion") {
                        span.set_str("mcp.protocol.version", version);
                    }
                }
                _ => {}
            }
        }
        Body::Single(Message::Notification { method, .. }) => {
            span.rename(method);
            span.set_str("mcp.method.name", method);
        }
        _ => {}
    }
}
