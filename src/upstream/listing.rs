//! The bridge's side of the catalog and names: a link's upstream `tools/list` taken into the
//! link's catalog, a listing of the core's store (`relist`; each item through the tool filter
//! and named as clients see it: `tool_info`), listed again when stale (`catalog_of`), the
//! refusal of a session whose listing the core's budget cannot take (`catalog_refusal`); and
//! the bridge's names both ways: a tool, prompt or resource URI as clients see it (`outward`,
//! `outward_uri`) and as the upstream knows it (`inward`, `inward_uri`). The store itself is
//! `catalog`, the prefix decision and name lengths `names`.
//!
//! Called by: the bridge's links (`links`: a new connection lists), its `Provider` impl
//! (`provider`). Never: lists a tool the filter refuses, or claims another upstream's name.

use std::time::Duration;

use serde_json::json;

use super::names::{self, NAME_SEPARATOR};
use super::peer::Peer;
use super::{catalog, Bridge, Link, URI_SEPARATOR};
use crate::provider::{Annotations, ProviderError, ToolInfo, Value};

impl Bridge {
    /// Lists the link's upstream tools into its catalog; announces a change. `Err` when the
    /// core's catalog budget cannot take the listing: the link keeps what it had (nothing, at a
    /// session's start, which is then refused: `catalog_refusal`).
    pub(super) async fn relist(
        &self,
        peer: &Peer,
        link: &Link,
        timeout: Duration,
    ) -> Result<(), catalog::OverBudget> {
        let catalog = &link.catalog;
        catalog.stale.set(false);
        let listed = match peer.list_all("tools/list", "tools", timeout).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "upstream tools/list failed");
                catalog.stale.set(true);
                return Ok(());
            }
        };
        let tools: Vec<ToolInfo> = listed.iter().filter_map(|t| self.tool_info(t)).collect();
        drop(listed);
        if catalog.tools.borrow().tools == tools {
            return Ok(());
        }
        let held = catalog.tools.borrow().clone();
        let listing = catalog::admit(tools, self.settings.catalog_bytes, &held).inspect_err(|e| {
            if let Some((metrics, _)) = &self.calls {
                metrics.limit_upstream_catalog.inc();
            }
            tracing::warn!(upstream = %self.name, held = e.held, needed = e.needed, "upstream tools/list past --upstream-catalog-bytes-per-core: not taken");
        })?;
        drop(held);
        *catalog.tools.borrow_mut() = listing;
        self.shared.announce(link.session);
        Ok(())
    }

    /// The refusal of a session whose upstream's listing the core's catalog budget cannot
    /// take: 503 + `Retry-After` (sessions ending free their catalogs), naming the flag.
    pub(super) fn catalog_refusal(&self, e: &catalog::OverBudget) -> ProviderError {
        let budget = self.settings.catalog_bytes;
        ProviderError::Down {
            message: format!(
                "upstream {}: its tool listing ({} bytes) does not fit this core's catalogs \
                 ({} of {budget} bytes held, --upstream-catalog-bytes-per-core); try again \
                 after Retry-After",
                self.name, e.needed, e.held
            ),
            data: Some(json!({
                "upstream": &*self.name,
                "reason": "catalog budget",
                "neededBytes": e.needed,
                "heldBytes": e.held,
                "budgetBytes": budget,
            })),
            retry_after_secs: self.settings.down_retry_after_secs(),
        }
    }

    /// The link's catalog, listed again first when it is stale and its upstream is up.
    pub(super) async fn catalog_of(&self, link: &Link) -> Vec<ToolInfo> {
        if link.catalog.stale.get() {
            let peer = link.peer.borrow().clone().filter(|p| p.is_alive());
            if let Some(peer) = peer {
                // Past the budget the link keeps its last listing (logged and counted).
                let _ = self.relist(&peer, link, self.settings.timeout).await;
            }
        }
        link.catalog.tools.borrow().tools.clone()
    }

    /// An upstream `tools/list` item as tidemark lists it (prefixed name); `None` for one the
    /// tool filter leaves out (then it is neither listed nor callable: one table decides both).
    pub(super) fn tool_info(&self, tool: &Value) -> Option<ToolInfo> {
        let name = tool.get("name")?.as_str()?;
        if !self.filters.tools.allows(name) {
            return None;
        }
        let hints = tool.get("annotations");
        let hint = |key: &str| hints.and_then(|h| h.get(key)).and_then(Value::as_bool);
        let annotations = Annotations {
            title: hints.and_then(|h| h.get("title")).and_then(Value::as_str).map(str::to_owned),
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
            open_world: hint("openWorldHint"),
        };
        let outward = self.outward(name);
        if self.prefix.is_some() && !names::fits(&outward) {
            names::report_too_long(&self.name, &outward);
            return None;
        }
        Some(ToolInfo {
            name: outward,
            description: tool.get("description").and_then(Value::as_str).map(str::to_owned),
            input_schema: tool
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| json!({ "type": "object" })),
            output_schema: tool.get("outputSchema").cloned(),
            annotations,
        })
    }

    /// A tool or prompt name as clients see it.
    pub(super) fn outward(&self, name: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{NAME_SEPARATOR}{name}"),
            None => name.to_owned(),
        }
    }

    /// A client-side tool or prompt name as the upstream knows it; `None` when not ours.
    pub(super) fn inward<'a>(&self, name: &'a str) -> Option<&'a str> {
        match &self.prefix {
            Some(prefix) => name.strip_prefix(prefix.as_str())?.strip_prefix(NAME_SEPARATOR),
            None => Some(name),
        }
    }

    /// A resource URI as clients see it.
    pub(super) fn outward_uri(&self, uri: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{URI_SEPARATOR}{uri}"),
            None => uri.to_owned(),
        }
    }

    pub(super) fn inward_uri<'a>(&self, uri: &'a str) -> Option<&'a str> {
        match &self.prefix {
            Some(prefix) => uri.strip_prefix(prefix.as_str())?.strip_prefix(URI_SEPARATOR),
            None => Some(uri),
        }
    }
}
