//! The 2026-07-28 shape of what the transport sends a modern upstream (MCP 2026-07-28,
//! "Versioning" and "Streamable HTTP"): no session, so each request says who asks and with what
//! capabilities in its own `_meta`, and names its method (and tool, prompt or resource) in
//! headers that an intermediary can route on without reading the body.
//!
//! Owns: `Stateless` (the client's identity the link presents on every request), the rewrite
//! of one JSON-RPC request into its stateless form (`Stateless::request`), the
//! `Mcp-Method`/`Mcp-Name` values (`Heads`, with the spec's base64 sentinel for a name that is
//! no plain header value; the `Mcp-Param-*` ones the link adds), and the
//! `subscriptions/listen` request. Never: sends anything.

use serde_json::json;

use crate::provider::Value;
use crate::wire::param_headers;
use crate::wire::revision::{
    LEGACY_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
    MODERN_VERSION,
};

/// Where a `server/discover` result names its server.
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The method of the probe that tells a modern upstream from a legacy one.
pub(crate) const DISCOVER: &str = "server/discover";

/// The id of the link's `subscriptions/listen` request: a string, so that it never meets the
/// numeric ids of the peer's own requests (its final result, if one comes, is then ignored).
pub(super) const LISTEN_ID: &str = "tidemark-listen";

/// The client a link speaks for, as every stateless request presents it.
#[derive(Clone, Debug)]
pub(crate) struct Stateless {
    pub(crate) capabilities: Value,
    pub(crate) client_info: Value,
}

/// The routing headers of one stateless request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Heads {
    /// `Mcp-Method`.
    pub(super) method: String,
    /// `Mcp-Name`, for the methods the spec requires it on.
    pub(super) name: Option<String>,
    /// `Mcp-Param-*` (full name, value): a `tools/call`'s arguments its tool declared with
    /// `x-mcp-header` (`Link::param_heads`).
    pub(super) params: Vec<(String, String)>,
    /// A `tools/list` request: which page it asks for (its answer's declarations are learnt).
    pub(super) tools_page: Option<ToolsPage>,
}

/// The page of a `tools/list`: the first one (without a cursor) starts the link's
/// declarations afresh, a later one adds to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ToolsPage {
    First,
    Next,
}

impl Stateless {
    /// tidemark itself, with no client capabilities (until a link says whom it speaks for).
    pub(crate) fn tidemark() -> Stateless {
        Stateless {
            capabilities: json!({}),
            client_info: json!({ "name": "tidemark", "version": env!("CARGO_PKG_VERSION") }),
        }
    }

    /// The client of a legacy `initialize`'s params (`capabilities`, `clientInfo`).
    pub(crate) fn of_initialize(params: &Value) -> Stateless {
        let fallback = Stateless::tidemark();
        Stateless {
            capabilities: params.get("capabilities").cloned().unwrap_or(fallback.capabilities),
            client_info: params.get("clientInfo").cloned().unwrap_or(fallback.client_info),
        }
    }

    /// `message` (a request) in its stateless form: `_meta` carries the revision, the client's
    /// capabilities and identity (beside what the peer put there: the progress token, the
    /// trace), and the heads name its method and target.
    pub(super) fn request(&self, message: &mut Value) -> Heads {
        let heads = heads_of(message);
        let Some(object) = message.as_object_mut() else { return heads };
        let params = object.entry("params").or_insert_with(|| json!({}));
        if !params.is_object() {
            return heads;
        }
        let meta = params
            .as_object_mut()
            .map(|p| p.entry("_meta").or_insert_with(|| json!({})))
            .filter(|meta| meta.is_object());
        if let Some(Value::Object(meta)) = meta {
            meta.insert(META_PROTOCOL_VERSION.into(), Value::String(MODERN_VERSION.into()));
            meta.insert(META_CLIENT_CAPABILITIES.into(), self.capabilities.clone());
            meta.insert(META_CLIENT_INFO.into(), self.client_info.clone());
        }
        heads
    }

    /// The `subscriptions/listen` request for the list changes an upstream offers
    /// (`capabilities` from its `server/discover` result); `None` when it offers none.
    pub(super) fn listen(&self, capabilities: &Value) -> Option<(Vec<u8>, Heads)> {
        let offers = |kind: &str| {
            capabilities.pointer(&format!("/{kind}/listChanged")).and_then(Value::as_bool)
                == Some(true)
        };
        let mut wanted = serde_json::Map::new();
        for (kind, key) in [
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resources", "resourcesListChanged"),
        ] {
            if offers(kind) {
                wanted.insert(key.into(), Value::Bool(true));
            }
        }
        if wanted.is_empty() {
            return None;
        }
        let mut message = json!({
            "jsonrpc": "2.0",
            "id": LISTEN_ID,
            "method": "subscriptions/listen",
            "params": { "notifications": wanted },
        });
        let heads = self.request(&mut message);
        Some((serde_json::to_vec(&message).ok()?, heads))
    }
}

/// The heads of a request: its method, and the `name` (tools, prompts) or `uri` (resources)
/// of the methods that must carry `Mcp-Name`.
fn heads_of(message: &Value) -> Heads {
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default().to_owned();
    let member = match method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    let name = member
        .and_then(|m| message.pointer(&format!("/params/{m}")))
        .and_then(Value::as_str)
        .map(param_headers::encode);
    let tools_page = (method == "tools/list").then(|| {
        match message.pointer("/params/cursor").is_some_and(|c| !c.is_null()) {
            true => ToolsPage::Next,
            false => ToolsPage::First,
        }
    });
    Heads { method, name, params: Vec::new(), tools_page }
}

/// Whether a `server/discover` result offers 2026-07-28.
pub(crate) fn offers_modern(result: &Value) -> bool {
    supported(result).any(|v| v == MODERN_VERSION)
}

/// Whether a `server/discover` result also offers a legacy revision tidemark speaks.
pub(crate) fn offers_legacy(result: &Value) -> bool {
    supported(result).any(|v| LEGACY_VERSIONS.contains(&v))
}

/// The `supportedVersions` of a `server/discover` result.
fn supported(result: &Value) -> impl Iterator<Item = &str> {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The `serverInfo` of a `server/discover` result: in `_meta` (where the revision puts it),
/// else at the top level (where some servers put it too).
pub(crate) fn server_info(result: &Value) -> Option<Value> {
    let meta = result.get("_meta").and_then(|m| m.get(META_SERVER_INFO));
    meta.or_else(|| result.get("serverInfo")).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Stateless {
        Stateless {
            capabilities: json!({ "elicitation": {} }),
            client_info: json!({ "name": "c", "version": "1" }),
        }
    }

    #[test]
    fn a_request_carries_the_revision_and_the_client_in_meta_beside_the_peers_own() {
        let mut message = json!({
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": { "name": "echo", "arguments": {}, "_meta": { "progressToken": 3 } },
        });
        let heads = client().request(&mut message);
        let expected = Heads {
            method: "tools/call".into(),
            name: Some("echo".into()),
            params: Vec::new(),
            tools_page: None,
        };
        assert_eq!(heads, expected);
        let meta = &message["params"]["_meta"];
        assert_eq!(meta["progressToken"], 3);
        assert_eq!(meta[META_PROTOCOL_VERSION], MODERN_VERSION);
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({ "elicitation": {} }));
        assert_eq!(meta[META_CLIENT_INFO]["name"], "c");
    }

    #[test]
    fn a_request_without_params_gets_them_and_only_named_methods_get_a_name() {
        let mut message = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
        let heads = client().request(&mut message);
        assert_eq!((heads.method.as_str(), heads.name), ("tools/list", None));
        assert_eq!(heads.tools_page, Some(ToolsPage::First));
        let mut next = json!({ "id": 4, "method": "tools/list", "params": { "cursor": "2" } });
        assert_eq!(client().request(&mut next).tools_page, Some(ToolsPage::Next));
        assert_eq!(message["params"]["_meta"][META_PROTOCOL_VERSION], MODERN_VERSION);
        let mut read = json!({ "id": 2, "method": "resources/read", "params": { "uri": "a://b" } });
        assert_eq!(client().request(&mut read).name.as_deref(), Some("a://b"));
    }

    #[test]
    fn listen_asks_for_exactly_the_list_changes_offered() {
        let caps = json!({ "tools": { "listChanged": true }, "prompts": {} });
        let (body, heads) = client().listen(&caps).expect("tools offered");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["params"]["notifications"], json!({ "toolsListChanged": true }));
        assert_eq!(body["id"], LISTEN_ID);
        assert_eq!(heads.method, "subscriptions/listen");
        assert!(client().listen(&json!({ "tools": {} })).is_none());
    }

    #[test]
    fn discover_offers_modern_only_when_it_lists_the_revision() {
        let both = json!({ "supportedVersions": ["2025-11-25", MODERN_VERSION] });
        assert!(offers_modern(&both) && offers_legacy(&both));
        let only = json!({ "supportedVersions": [MODERN_VERSION] });
        assert!(offers_modern(&only) && !offers_legacy(&only));
        assert!(!offers_modern(&json!({ "supportedVersions": ["2025-11-25"] })));
        assert!(!offers_modern(&json!({})) && !offers_legacy(&json!({ "supportedVersions": 1 })));
    }

    #[test]
    fn server_info_is_read_from_meta_first() {
        let both = json!({ "_meta": { META_SERVER_INFO: { "name": "m" } }, "serverInfo": { "name": "t" } });
        assert_eq!(server_info(&both).unwrap()["name"], "m");
        assert_eq!(server_info(&json!({ "serverInfo": { "name": "t" } })).unwrap()["name"], "t");
        assert!(server_info(&json!({})).is_none());
    }
}
