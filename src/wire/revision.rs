//! The MCP revisions the endpoint serves and how a request names one: the legacy era's
//! (through `initialize` and `MCP-Protocol-Version`) and 2026-07-28's (per request, in
//! `_meta`). Read by `endpoint` (era selection), `legacy`, `modern` and `dispatch`, so no era
//! has to ask the other. Never: decides anything beyond naming.

/// Protocol revisions of the legacy era that we serve, newest first.
pub const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The stateless revision (the modern path).
pub(crate) const MODERN_VERSION: &str = "2026-07-28";

/// Every revision the endpoint serves, newest first: the modern one, the legacy ones through
/// `initialize` (listed by `server/discover` and in -32022's `data.supported`).
pub(crate) const SUPPORTED_VERSIONS: [&str; 4] =
    [MODERN_VERSION, LEGACY_VERSIONS[0], LEGACY_VERSIONS[1], LEGACY_VERSIONS[2]];

/// The `_meta` member a 2026-07-28 request names its revision in.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` member a 2026-07-28 request declares its client's capabilities in.
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` member a 2026-07-28 request names its client in.
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// True when a decoded request's params carry the modern `_meta` protocol version (the era
/// rule for a request that arrived without the header).
pub(crate) fn carries_modern_meta(params: super::jsonrpc::WireValue<'_>) -> bool {
    params.get("_meta").and_then(|m| m.get(META_PROTOCOL_VERSION)).is_some()
}
