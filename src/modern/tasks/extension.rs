//! The handshake of the tasks extension: its identifier and the per-request declaration.
//!
//! Owns: `EXTENSION_ID`, `declared` (does this request's `clientCapabilities` declare the
//! extension?) and the `data` of the -32021 error that names the missing capability.
//! Called by: `modern::task_call`, to decide which calls may become tasks, to gate `tasks/*`,
//! and to advertise the extension in `server/discover`'s `capabilities.extensions`.
//! Never: remembers a declaration between requests (SEP-2663: there is no session), or
//! touches the store.

use serde_json::Value;

/// The extension's identifier: the key under `capabilities.extensions` (ours, in
/// `server/discover`) and under the request's `clientCapabilities.extensions` (the client's).
pub(crate) const EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";

/// True when a request's `clientCapabilities` declare this extension (SEP-2663: the
/// per-request declaration is the only handshake; nothing is remembered between requests).
pub(crate) fn declared(client_capabilities: Option<&Value>) -> bool {
    client_capabilities
        .and_then(|caps| caps.get("extensions"))
        .and_then(|extensions| extensions.get(EXTENSION_ID))
        .is_some_and(Value::is_object)
}

/// The `data` of the -32021 (missing required client capability) error that tasks methods,
/// and task-only tools, answer to a request that does not declare the extension.
pub(crate) fn missing_capability_data() -> Value {
    serde_json::json!({ "requiredCapabilities": { "extensions": { EXTENSION_ID: {} } } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declaration_is_read_from_the_request_capabilities() {
        // Goal: only an object under extensions["io.modelcontextprotocol/tasks"] declares the
        // extension; the -32021 data names it (tasks-required-task-error).
        let yes = json!({ "elicitation": {}, "extensions": { EXTENSION_ID: {} } });
        assert!(declared(Some(&yes)));
        for no in [
            json!({}),
            json!({ "extensions": {} }),
            json!({ "extensions": { EXTENSION_ID: true } }),
            json!({ "tasks": {} }),
        ] {
            assert!(!declared(Some(&no)), "{no}");
        }
        assert!(!declared(None));
        assert_eq!(
            missing_capability_data()["requiredCapabilities"]["extensions"][EXTENSION_ID],
            json!({})
        );
    }
}
