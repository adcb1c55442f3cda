//! What a 2026-07-28 request must carry besides its body, checked in the order the spec and
//! the conformance suite expect: the per-request `_meta` (-32602), then `MCP-Protocol-Version`
//! against it (-32020 before -32022), then `Mcp-Method` / `Mcp-Name` (-32020, with the
//! `=?base64?…?=` sentinel decoded), and for a tool that declares `x-mcp-header` parameters its
//! `Mcp-Param-*` headers (-32020). Decoded header values are compared as bytes, never decoded
//! lossily; a header given twice with different values never gets here (the edge refuses it).
//!
//! Owns: `RequestMeta` (the validated `_meta` a request runs with) and `MetaError` (each
//! rejection with its HTTP status and JSON-RPC code). Never: runs anything.

use simd_json::prelude::*;

use crate::core::Answered;
use crate::provider::{LogLevel, Value};
use crate::wire::jsonrpc::RawId;
use crate::wire::param_headers::{self, HeaderParam};
use crate::wire::{Answer, Code, Status, WireValue};

pub(crate) use crate::wire::revision::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN_VERSION,
    SUPPORTED_VERSIONS,
};
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(crate) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Why a modern request is refused before it runs: always HTTP 400, with this JSON-RPC error.
#[derive(Debug, PartialEq)]
pub(crate) struct MetaError {
    pub code: Code,
    pub message: String,
    /// The error's `data` as JSON text.
    pub data: Option<String>,
}

impl MetaError {
    fn invalid_params(message: impl Into<String>) -> MetaError {
        MetaError { code: Code::InvalidParams, message: message.into(), data: None }
    }

    fn mismatch(message: impl Into<String>) -> MetaError {
        MetaError { code: Code::HeaderMismatch, message: message.into(), data: None }
    }

    /// The refusal as a whole answer to request `id`: 400 with this JSON-RPC error.
    pub(crate) fn refuse(&self, out: &mut Vec<u8>, id: &RawId, keep_alive: bool) -> Answered {
        let answer = Answer::Error {
            status: Status::BadRequest,
            id: Some(id),
            code: self.code,
            message: &self.message,
            data: self.data.as_deref(),
        };
        crate::core::reply(out, answer, keep_alive)
    }
}

/// The validated `_meta` of one request.
pub(crate) struct RequestMeta {
    /// `io.modelcontextprotocol/clientCapabilities` (an object).
    pub client_capabilities: Value,
    /// `io.modelcontextprotocol/clientInfo` when given (optional since spec PR #3002): scopes
    /// Idempotency-Keys.
    pub client_info: Option<Value>,
    /// `io.modelcontextprotocol/logLevel`: without it the server sends no log messages.
    pub log_level: Option<LogLevel>,
    /// `progressToken`, as the JSON text the client sent.
    pub progress_token: Option<Box<str>>,
}

/// The request's `_meta`, then the protocol version header against it. `header` is the
/// `MCP-Protocol-Version` value (absent: a client that put modern `_meta` on a request without
/// the header, which the spec says to refuse with HeaderMismatch).
pub(crate) fn check_meta(
    params: &WireValue<'_>,
    header: Option<&[u8]>,
) -> Result<RequestMeta, MetaError> {
    let Some(meta) = params.get("_meta").and_then(|m| MetaMembers::of(&m)) else {
        return Err(MetaError::invalid_params("params._meta is required (MCP 2026-07-28)"));
    };
    let Some(version) = meta.version.and_then(ValueIntoString::into_string) else {
        return Err(MetaError::invalid_params(format!(
            "_meta[\"{META_PROTOCOL_VERSION}\"] is required"
        )));
    };
    let Some(capabilities) = meta.capabilities.filter(|c| c.is_object()) else {
        return Err(MetaError::invalid_params(format!(
            "_meta[\"{META_CLIENT_CAPABILITIES}\"] is required (an object)"
        )));
    };
    match header {
        None => return Err(MetaError::mismatch("MCP-Protocol-Version header is required")),
        Some(h) if h != version.as_bytes() => {
            return Err(MetaError::mismatch(format!(
                "Header mismatch: MCP-Protocol-Version header value '{}' does not match _meta value '{version}'",
                String::from_utf8_lossy(h)
            )))
        }
        Some(_) => {}
    }
    if version != MODERN_VERSION {
        return Err(unsupported_version(version));
    }
    let log_level = match meta.log_level {
        None => None,
        Some(level) => match level.as_str().and_then(LogLevel::parse) {
            Some(level) => Some(level),
            None => {
                return Err(MetaError::invalid_params(format!(
                    "_meta[\"{META_LOG_LEVEL}\"] is not a log level"
                )))
            }
        },
    };
    Ok(RequestMeta {
        client_capabilities: crate::dispatch::into_public(capabilities),
        client_info: meta.client_info.map(crate::dispatch::into_public),
        log_level,
        progress_token: meta.progress_token.map(|t| Box::from(t.encode().as_str())),
    })
}

/// The members of a request's `_meta` its checks read, found in one pass over it rather than a
/// scan of every member per name (five names, on every request); of a name given twice, the
/// first, as a lookup by name finds it.
#[derive(Default)]
struct MetaMembers<'a> {
    version: Option<WireValue<'a>>,
    capabilities: Option<WireValue<'a>>,
    log_level: Option<WireValue<'a>>,
    client_info: Option<WireValue<'a>>,
    progress_token: Option<WireValue<'a>>,
}

impl<'a> MetaMembers<'a> {
    /// `None`: `_meta` is not an object.
    fn of(meta: &WireValue<'a>) -> Option<MetaMembers<'a>> {
        let mut members = MetaMembers::default();
        for (key, value) in meta.as_object()?.iter() {
            let slot = match key {
                META_PROTOCOL_VERSION => &mut members.version,
                META_CLIENT_CAPABILITIES => &mut members.capabilities,
                META_LOG_LEVEL => &mut members.log_level,
                META_CLIENT_INFO => &mut members.client_info,
                "progressToken" => &mut members.progress_token,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        Some(members)
    }
}

/// -32022 naming what we serve and echoing what was asked for.
pub(crate) fn unsupported_version(requested: &str) -> MetaError {
    let data = serde_json::json!({ "supported": SUPPORTED_VERSIONS, "requested": requested });
    MetaError {
        code: Code::UnsupportedProtocolVersion,
        message: format!("unsupported protocol version: {requested}"),
        data: Some(data.to_string()),
    }
}

/// The methods whose `Mcp-Name` header carries a params member, and which member.
fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// `Mcp-Method` must equal the body's method; `Mcp-Name` the body's name, uri or task id where
/// the method has one (SEP-2243). Both are required.
pub(crate) fn check_headers(
    method: &str,
    params: &WireValue<'_>,
    mcp_method: Option<&[u8]>,
    mcp_name: Option<&[u8]>,
) -> Result<(), MetaError> {
    match mcp_method {
        None => return Err(MetaError::mismatch("Mcp-Method header is required")),
        Some(h) if h != method.as_bytes() => {
            return Err(MetaError::mismatch(format!(
            "Header mismatch: Mcp-Method header value '{}' does not match body value '{method}'",
            String::from_utf8_lossy(h)
        )))
        }
        Some(_) => {}
    }
    let Some(member) = name_member(method) else { return Ok(()) };
    let Some(body) = params.get(member).and_then(ValueIntoString::into_string) else {
        // The body lacks the member: the method's own validation reports it (-32602).
        return Ok(());
    };
    let Some(header) = mcp_name else {
        return Err(MetaError::mismatch("Mcp-Name header is required for this method"));
    };
    match param_headers::decode(header) {
        Some(value) if *value == *body.as_bytes() => Ok(()),
        Some(value) => Err(MetaError::mismatch(format!(
            "Header mismatch: Mcp-Name header value '{}' does not match body value '{body}'",
            String::from_utf8_lossy(&value)
        ))),
        None => Err(MetaError::mismatch("Mcp-Name header value is not valid")),
    }
}

/// Each `x-mcp-header` parameter present (and not null) in `arguments` (at its property path)
/// must come with its
/// `Mcp-Param-{Name}` header, equal after decoding (strings compared as bytes, so a decoded
/// value that is not UTF-8 equals nothing; numbers compared numerically, booleans as
/// `true`/`false`); a header without a body value is ignored. `find` looks a header up by name
/// (case-insensitive).
pub(crate) fn check_param_headers<'h>(
    declared: &[HeaderParam],
    arguments: &WireValue<'_>,
    find: impl Fn(&str) -> Option<&'h [u8]>,
) -> Result<(), MetaError> {
    for param in declared {
        let value = param.path.iter().try_fold(*arguments, |node, key| node.get(key.as_str()));
        let Some(value) = value.filter(|v| !v.is_null()) else {
            continue;
        };
        let property = param.path.join(".");
        let name = param.header();
        let Some(raw) = find(&name) else {
            return Err(MetaError::mismatch(format!(
                "{name} header is required: `{property}` is in the arguments"
            )));
        };
        let Some(decoded) = param_headers::decode(raw) else {
            return Err(MetaError::mismatch(format!("{name} header value is not valid")));
        };
        // Compared as bytes: a header that decodes to bytes that are not UTF-8 equals no body
        // value (a lossy decode would make it equal a body holding U+FFFD).
        let text = std::str::from_utf8(&decoded).ok();
        let equal = if let Some(s) = value.as_str() {
            s.as_bytes() == &*decoded
        } else if let Some(b) = value.as_bool() {
            *decoded == *if b { &b"true"[..] } else { &b"false"[..] }
        } else if let Some(n) = value.cast_f64() {
            text.is_some_and(|t| t.trim().parse::<f64>().is_ok_and(|h| h == n))
        } else {
            false
        };
        if !equal {
            return Err(MetaError::mismatch(format!(
                "Header mismatch: {name} header value '{}' does not match body value",
                String::from_utf8_lossy(&decoded)
            )));
        }
    }
    Ok(())
}

/// True when `capabilities` (a `ClientCapabilities` object) declares what `method` needs.
pub(crate) fn client_can(capabilities: &Value, method: &str) -> bool {
    match capability_of(method) {
        Some(capability) => capabilities.get(capability).is_some_and(Value::is_object),
        None => true,
    }
}

/// The client capability a server→client request needs.
pub(crate) fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> WireValue<'static> {
        crate::wire::jsonrpc::leaked_value(text)
    }

    fn meta(version: &str) -> String {
        format!(
            r#"{{"_meta":{{"{META_PROTOCOL_VERSION}":"{version}","{META_CLIENT_CAPABILITIES}":{{}}}}}}"#
        )
    }

    #[test]
    fn meta_is_checked_before_the_header_and_the_header_before_the_version() {
        // Goal: the conformance order: -32602 (missing _meta parts), -32020 (header missing
        // or different), -32022 (same but unsupported). Method: one case each.
        let v = MODERN_VERSION.as_bytes();
        assert_eq!(check_meta(&wire("{}"), Some(v)).err().map(|e| e.code.value()), Some(-32602));
        let no_caps = format!(r#"{{"_meta":{{"{META_PROTOCOL_VERSION}":"{MODERN_VERSION}"}}}}"#);
        assert_eq!(
            check_meta(&wire(&no_caps), Some(v)).err().map(|e| e.code.value()),
            Some(-32602)
        );
        assert_eq!(
            check_meta(&wire(&meta("v999")), Some(v)).err().map(|e| e.code.value()),
            Some(-32020)
        );
        assert_eq!(
            check_meta(&wire(&meta(MODERN_VERSION)), None).err().map(|e| e.code.value()),
            Some(-32020)
        );
        let e = check_meta(&wire(&meta("v999")), Some(b"v999")).err().expect("refused");
        assert_eq!(e.code.value(), -32022);
        assert!(e.data.as_deref().is_some_and(|d| d.contains("\"requested\":\"v999\"")));
        assert!(check_meta(&wire(&meta(MODERN_VERSION)), Some(v)).is_ok());
    }

    #[test]
    fn every_meta_member_is_read_and_of_one_given_twice_the_first() {
        // Goal: the one pass over `_meta` (`MetaMembers`) reads what a lookup by name would.
        // Method: every member, each given twice, and `_meta` that is no object.
        let (p, c, l, i) =
            (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_CLIENT_INFO);
        let text = format!(
            r#"{{"_meta":{{"x":0,"{p}":"{MODERN_VERSION}","{c}":{{"roots":{{}}}},"{l}":"info","{i}":{{"name":"a"}},"progressToken":7,"{p}":"v9","{c}":[],"{l}":"nope","{i}":{{"name":"b"}},"progressToken":8}}}}"#
        );
        let m = check_meta(&wire(&text), Some(MODERN_VERSION.as_bytes())).expect("valid");
        assert_eq!(m.client_capabilities, serde_json::json!({"roots": {}}));
        assert_eq!(m.client_info, Some(serde_json::json!({"name": "a"})));
        assert_eq!(m.log_level, LogLevel::parse("info"));
        assert_eq!(m.progress_token.as_deref(), Some("7"));
        let refused = check_meta(&wire(r#"{"_meta":[1]}"#), Some(MODERN_VERSION.as_bytes()));
        assert_eq!(refused.err().map(|e| e.code.value()), Some(-32602));
    }

    #[test]
    fn mcp_name_is_compared_after_decoding_the_base64_sentinel() {
        // Goal: SEP-2243's sentinel and mismatch rules. Method: plain, encoded, wrong, missing.
        let params = wire(r#"{"name":"Hello, 世界"}"#);
        let encoded = b"=?base64?SGVsbG8sIOS4lueVjA==?=";
        assert!(check_headers("tools/call", &params, Some(b"tools/call"), Some(encoded)).is_ok());
        let wrong = check_headers("tools/call", &params, Some(b"tools/call"), Some(b"other"));
        assert_eq!(wrong.err().map(|e| e.code.value()), Some(-32020));
        let missing = check_headers("tools/call", &params, Some(b"tools/call"), None);
        assert_eq!(missing.err().map(|e| e.code.value()), Some(-32020));
        let method = check_headers("tools/call", &params, Some(b"tools/list"), Some(encoded));
        assert_eq!(method.err().map(|e| e.code.value()), Some(-32020));
        assert!(check_headers("tools/list", &wire("{}"), Some(b"tools/list"), None).is_ok());
        assert_eq!(param_headers::decode(b"=?base64?!!?="), None);
        assert_eq!(param_headers::decode(b"a\x01b"), None);
    }

    #[test]
    fn param_headers_compare_numbers_numerically_and_skip_absent_values() {
        // Goal: x-mcp-header checks. Method: a schema with two header params.
        let schema = serde_json::json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "count":{"type":"integer","x-mcp-header":"Count"}}});
        let declared = param_headers::declared(&schema).expect("valid");
        assert_eq!(declared.len(), 2);
        let args = wire(r#"{"region":"us-west1","count":42}"#);
        let headers = |name: &str| match name {
            "Mcp-Param-Region" => Some(&b"us-west1"[..]),
            "Mcp-Param-Count" => Some(&b"42.0"[..]),
            _ => None,
        };
        assert!(check_param_headers(&declared, &args, headers).is_ok());
        let absent = wire(r#"{"region":null}"#);
        assert!(check_param_headers(&declared, &absent, |_| None).is_ok());
        let missing = check_param_headers(&declared, &args, |_| None);
        assert_eq!(missing.err().map(|e| e.code.value()), Some(-32020));
        // Base64 of the bytes `ff fe`: not UTF-8, so not the U+FFFD U+FFFD a lossy decode makes.
        let replacement = wire(r#"{"region":"\ufffd\ufffd"}"#);
        let invalid = |name: &str| (name == "Mcp-Param-Region").then_some(&b"=?base64?//4=?="[..]);
        assert_eq!(
            check_param_headers(&declared, &replacement, invalid).err().map(|e| e.code.value()),
            Some(-32020)
        );
        let wrong = |name: &str| (name == "Mcp-Param-Region").then_some(&b"eu"[..]);
        assert_eq!(
            check_param_headers(&declared, &args, wrong).err().map(|e| e.code.value()),
            Some(-32020)
        );
    }
}
