//! `tidemark-stdio-echo`: a minimal, fast MCP server on the stdio transport (newline-delimited
//! JSON-RPC on stdin/stdout), the upstream of the bridge comparison (`scripts/bridge-compare.sh`)
//! and of `tidemark-load stdio-direct`.
//!
//! Owns: `initialize` (echoes a requested protocol version it knows, else answers the newest),
//! `ping`, `tools/list` (one tool, `echo {text}`, read-only and idempotent), `tools/call echo`,
//! `-32601` for any other method, `-32602` for an unknown tool or a missing `text`, `-32700` for
//! a line that is not JSON. Notifications and responses from the client are ignored. A JSON
//! array (a 2025-03-26 batch) is answered with an array of the responses it calls for.
//! Never: writes anything but JSON-RPC to stdout (diagnostics go to stderr), or blocks on
//! anything but stdin. Output is flushed whenever no further input is already buffered, so a
//! lone request is answered at once and a burst of pipelined requests costs one write.
//! Exits 0 at the end of stdin.

use std::io::{BufRead as _, BufReader, BufWriter, Write as _};

use serde_json::{json, Value};

/// Protocol versions this server speaks; `initialize` answers the requested one if listed.
const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// Answered when the client asks for a version not in `VERSIONS`.
const LATEST: &str = "2025-11-25";

fn main() {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    let mut reader = BufReader::with_capacity(64 << 10, stdin);
    let mut writer = BufWriter::with_capacity(64 << 10, stdout);
    let mut line = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("tidemark-stdio-echo: reading stdin: {e}");
                std::process::exit(1);
            }
        }
        out.clear();
        answer_line(&line, &mut out);
        if !out.is_empty() {
            out.push(b'\n');
            if writer.write_all(&out).is_err() {
                break; // stdout closed: the client went away
            }
        }
        // Flush before we could block on stdin; while more input is buffered, keep collecting.
        if reader.buffer().is_empty() && writer.flush().is_err() {
            break;
        }
    }
    let _ = writer.flush();
}

/// Appends the answer to one input line (nothing for a notification or a blank line).
fn answer_line(line: &[u8], out: &mut Vec<u8>) {
    let text = line.trim_ascii();
    if text.is_empty() {
        return;
    }
    let value: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            let reply = error(Value::Null, -32700, &format!("parse error: {e}"));
            write_value(&reply, out);
            return;
        }
    };
    match value {
        Value::Array(batch) => {
            let replies: Vec<Value> = batch.into_iter().filter_map(answer).collect();
            if !replies.is_empty() {
                write_value(&Value::Array(replies), out);
            }
        }
        message => {
            if let Some(reply) = answer(message) {
                write_value(&reply, out);
            }
        }
    }
}

fn write_value(value: &Value, out: &mut Vec<u8>) {
    serde_json::to_writer(&mut *out, value).expect("invariant: a Value always serializes");
}

/// The response to one message, or `None` for a notification or a client's response.
fn answer(message: Value) -> Option<Value> {
    let Value::Object(mut message) = message else {
        return Some(error(Value::Null, -32600, "invalid request: not an object"));
    };
    let id = message.remove("id");
    let method = match message.get("method").and_then(Value::as_str) {
        Some(m) => m,
        // A response to a server→client request (this server sends none) or garbage.
        None if id.is_some()
            && !message.contains_key("result")
            && !message.contains_key("error") =>
        {
            return Some(error(id.unwrap_or(Value::Null), -32600, "invalid request: no method"))
        }
        None => return None,
    };
    let id = id?; // a notification: nothing to answer
    let params = message.get("params");
    let result = match method {
        "initialize" => {
            let asked = params.and_then(|p| p.get("protocolVersion")).and_then(Value::as_str);
            let version = asked.filter(|v| VERSIONS.contains(v)).unwrap_or(LATEST);
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tidemark-stdio-echo", "version": env!("CARGO_PKG_VERSION")}
            })
        }
        "ping" => json!({}),
        "tools/list" => json!({
            "tools": [{
                "name": "echo",
                "description": "Returns its text argument unchanged.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"]
                },
                "annotations": {"readOnlyHint": true, "idempotentHint": true}
            }]
        }),
        "tools/call" => {
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
            if name != Some("echo") {
                return Some(error(id, -32602, &format!("unknown tool: {}", name.unwrap_or(""))));
            }
            let text = params.and_then(|p| p.get("arguments")).and_then(|a| a.get("text"));
            match text.and_then(Value::as_str) {
                Some(text) => json!({"content": [{"type": "text", "text": text}]}),
                None => return Some(error(id, -32602, "echo needs a string argument `text`")),
            }
        }
        _ => return Some(error(id, -32601, &format!("method not found: {method}"))),
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Option<Value> {
        let mut out = Vec::new();
        answer_line(line.as_bytes(), &mut out);
        (!out.is_empty()).then(|| serde_json::from_slice(&out).expect("answers are JSON"))
    }

    #[test]
    fn initialize_echoes_known_versions_and_falls_back_to_the_latest() {
        for v in VERSIONS {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{v}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            );
            let r = reply(&line).expect("an answer");
            assert_eq!(r["result"]["protocolVersion"], v);
            assert_eq!(r["result"]["capabilities"], json!({"tools": {}}));
            assert_eq!(r["id"], 1);
        }
        let r = reply(r#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#)
            .expect("an answer");
        assert_eq!(r["result"]["protocolVersion"], LATEST);
        assert_eq!(r["id"], "a");
    }

    #[test]
    fn notifications_and_responses_get_no_answer() {
        assert_eq!(reply(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(reply(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#), None);
        assert_eq!(reply("   \n"), None);
    }

    #[test]
    fn ping_list_call_and_errors() {
        assert_eq!(
            reply(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).unwrap()["result"],
            json!({})
        );
        let list = reply(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#).unwrap();
        let tool = &list["result"]["tools"][0];
        assert_eq!(tool["name"], "echo");
        assert_eq!(tool["annotations"]["readOnlyHint"], true);
        assert_eq!(tool["annotations"]["idempotentHint"], true);
        let call = reply(
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hé \"x\""}}}"#,
        )
        .unwrap();
        assert_eq!(
            call,
            json!({"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"hé \"x\""}]}})
        );
        let unknown = reply(r#"{"jsonrpc":"2.0","id":6,"method":"resources/list"}"#).unwrap();
        assert_eq!(unknown["error"]["code"], -32601);
        let tool =
            reply(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope"}}"#)
                .unwrap();
        assert_eq!(tool["error"]["code"], -32602);
        assert_eq!(reply("{not json").unwrap()["error"]["code"], -32700);
    }

    #[test]
    fn batches_answer_their_requests_only() {
        let r = reply(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]"#,
        )
        .unwrap();
        assert_eq!(r, json!([{"jsonrpc":"2.0","id":1,"result":{}}]));
    }
}
