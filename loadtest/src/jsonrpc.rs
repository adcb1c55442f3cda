//! JSON-RPC messages as the load generator sees them: bodies it sends (templates with `{id}`) and
//! a cheap classifier for what comes back.
//!
//! Owns: the request bodies of every scenario, the hot-path classifier (substring scans, no
//! parse: a full parse would cost the client more than the server spends on an `echo`), and the
//! full `serde_json` checks used off the hot path.
//! Never: trusts the classifier for correctness counters; `resume` and `migration` parse fully.

use memchr::memmem::Finder;
use serde_json::Value;

pub fn initialize_body(version: &str) -> String {
    format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"method":"initialize","params":{{"protocolVersion":"{}","#,
            r#""capabilities":{{}},"clientInfo":{{"name":"tidemark-load","version":"{}"}}}}}}"#
        ),
        version,
        env!("CARGO_PKG_VERSION")
    )
}

pub const INITIALIZED_BODY: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

pub const PING_BODY: &str = r#"{"jsonrpc":"2.0","id":{id},"method":"ping"}"#;

pub fn echo_body(text: &str) -> String {
    tool_echo_body("echo", text)
}

/// `tools/call TOOL {text}`: an echo offered under another name (a bridged upstream's, prefixed
/// `NAME__echo` beside the built-in one: `scripts/soak.sh`).
pub fn tool_echo_body(tool: &str, text: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{{id}},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"{text}"}}}}}}"#
    )
}

/// `tools/call echo` as a 2026-07-28 (stateless) client sends it: the protocol version and the
/// client's capabilities in `params._meta`, since there is no `initialize` to carry them.
pub fn modern_echo_body(text: &str, version: &str) -> String {
    format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"method":"tools/call","params":{{"name":"echo","#,
            r#""arguments":{{"text":"{}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{}","#,
            r#""io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        ),
        text, version
    )
}

/// `slow_counter` with the request id as progress token, so every call asks for progress.
pub fn slow_counter_body(steps: u64, delay_ms: u64) -> String {
    format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"method":"tools/call","params":{{"name":"slow_counter","#,
            r#""arguments":{{"steps":{},"delay_ms":{}}},"_meta":{{"progressToken":{{id}}}}}}}}"#
        ),
        steps, delay_ms
    )
}

/// `slow_counter` with `stamp`: each progress notification's message is its emit time (µs since
/// the Unix epoch), for the `streams` scenario's delivery latency.
pub fn stamped_slow_counter_body(steps: u64, delay_ms: u64) -> String {
    format!(
        concat!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"method":"tools/call","params":{{"name":"slow_counter","#,
            r#""arguments":{{"steps":{},"delay_ms":{},"stamp":true}},"#,
            r#""_meta":{{"progressToken":{{id}}}}}}}}"#
        ),
        steps, delay_ms
    )
}

pub const GET_COUNTER_BODY: &str = r#"{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{"name":"get_counter","arguments":{}}}"#;

/// What a message is, judged by substrings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Progress,
    /// A JSON-RPC response: `ok` is false for an error or a tool result with `isError: true`.
    Response {
        ok: bool,
    },
    /// Any other notification or a server→client request.
    Other,
}

/// Substring finders built once per thread.
pub struct Classifier {
    method: Finder<'static>,
    progress: Finder<'static>,
    result: Finder<'static>,
    error: Finder<'static>,
    is_error: Finder<'static>,
    id: Finder<'static>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            method: Finder::new(b"\"method\""),
            progress: Finder::new(b"notifications/progress"),
            result: Finder::new(b"\"result\""),
            error: Finder::new(b"\"error\""),
            is_error: Finder::new(b"\"isError\":true"),
            id: Finder::new(b"\"id\""),
        }
    }
}

impl Classifier {
    pub fn kind(&self, msg: &[u8]) -> Kind {
        if self.method.find(msg).is_some() {
            if self.progress.find(msg).is_some() {
                return Kind::Progress;
            }
            return Kind::Other;
        }
        if self.result.find(msg).is_some() {
            return Kind::Response { ok: self.is_error.find(msg).is_none() };
        }
        if self.error.find(msg).is_some() {
            return Kind::Response { ok: false };
        }
        Kind::Other
    }

    /// The numeric `"id"` of a response (the first `"id"` key in the text).
    pub fn id(&self, msg: &[u8]) -> Option<u64> {
        let at = self.id.find(msg)? + 4;
        let rest = msg[at..].trim_ascii_start().strip_prefix(b":")?.trim_ascii_start();
        let end = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
    }
}

/// A fully parsed message, for the correctness checks.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// `notifications/progress`: the `progress` value.
    Progress(f64),
    /// A result: the first text content of a tool result (or the whole result as JSON).
    Result {
        id: Value,
        text: String,
    },
    Error {
        id: Value,
        code: i64,
        message: String,
        /// `error.data.retryAfterMs`: the server says when the request may succeed (tidemark's
        /// open upstream circuit breaker).
        retry_after_ms: Option<u64>,
    },
    Other,
}

pub fn parse(msg: &[u8]) -> Option<Message> {
    let value: Value = serde_json::from_slice(msg).ok()?;
    if let Some(method) = value.get("method").and_then(Value::as_str) {
        if method == "notifications/progress" {
            return value["params"]["progress"].as_f64().map(Message::Progress);
        }
        return Some(Message::Other);
    }
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    if let Some(result) = value.get("result") {
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            let message = result.to_string();
            return Some(Message::Error { id, code: 0, message, retry_after_ms: None });
        }
        let text =
            result["content"][0]["text"].as_str().map_or_else(|| result.to_string(), str::to_owned);
        return Some(Message::Result { id, text });
    }
    if let Some(error) = value.get("error") {
        return Some(Message::Error {
            id,
            code: error["code"].as_i64().unwrap_or(0),
            message: error["message"].as_str().unwrap_or("").to_owned(),
            retry_after_ms: error["data"]["retryAfterMs"].as_u64(),
        });
    }
    Some(Message::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_and_finds_ids() {
        let c = Classifier::default();
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#;
        let ok =
            br#"{"jsonrpc":"2.0","id": 17,"result":{"content":[{"type":"text","text":"hi"}]}}"#;
        let tool_err = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":true}}"#;
        let err = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-31001,"message":"owed"}}"#;
        assert_eq!(c.kind(progress), Kind::Progress);
        assert_eq!(c.kind(ok), Kind::Response { ok: true });
        assert_eq!(c.kind(tool_err), Kind::Response { ok: false });
        assert_eq!(c.kind(err), Kind::Response { ok: false });
        assert_eq!(c.id(ok), Some(17));
        assert_eq!(c.id(err), Some(5));
        assert_eq!(parse(progress), Some(Message::Progress(1.0)));
        assert_eq!(parse(ok), Some(Message::Result { id: 17.into(), text: "hi".into() }));
        assert!(matches!(
            parse(err),
            Some(Message::Error { code: -31001, retry_after_ms: None, .. })
        ));
        let breaker = br#"{"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"open","data":{"retryAfterMs":3722}}}"#;
        assert!(matches!(parse(breaker), Some(Message::Error { retry_after_ms: Some(3722), .. })));
    }

    #[test]
    fn bodies_are_json_once_the_id_is_in() {
        for body in [
            initialize_body("2025-11-25"),
            PING_BODY.to_owned(),
            echo_body("xx"),
            tool_echo_body("up__echo", "xx"),
            modern_echo_body("xx", "2026-07-28"),
            slow_counter_body(3, 1),
            stamped_slow_counter_body(3, 100),
            GET_COUNTER_BODY.to_owned(),
        ] {
            let filled = body.replace("{id}", "42");
            let v: Value =
                serde_json::from_str(&filled).unwrap_or_else(|e| panic!("{filled}: {e}"));
            assert_eq!(v["id"], 42);
        }
    }
}
