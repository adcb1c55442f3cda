//! The bridge as a `Provider`: each MCP method routed to the session's link (the core's for
//! `shared` isolation and 2026-07-28 requests) and through this upstream's filters
//! (`--upstream-allow-*`/`--upstream-deny-*`): list methods filtered and renamed, a resource
//! URI resolved to the upstream's own spelling only when the upstream offered it (listed, or
//! matched by one of its templates), a completion's `ref` decided as what it names would be,
//! and a tool call past the circuit breaker (`links`) to `rounds`. Sessions opening and
//! closing make and drop their links.
//!
//! Called by: `dispatch` (as any provider). Never: forwards a name or URI the filters refuse,
//! or lets a session reach another session's link.

use std::rc::Rc;
use std::time::Instant;

use serde_json::json;

use super::breaker::Admission;
use super::links::{new_link, ProbeGuard};
use super::peer::{CallArguments, Peer};
use super::{Bridge, Catalog, SessionEvents};
use crate::config::Isolation;
use crate::provider::builtin::ToolAnswer;
use crate::provider::{
    CallContext, Changes, LocalBoxFuture, Provider, ProviderError, ProviderResult, SessionInfo,
    SessionRef, SessionStart, ToolInfo, Value,
};

impl Bridge {
    /// The live connection of `session`; `None` when it has no link (the start-up probe).
    /// `None` as well when the upstream did not declare `capability` (`resources`, `prompts`,
    /// `completions`): it is not asked for a feature it does not have.
    async fn session_peer(
        &self,
        session: SessionRef,
        capability: &str,
    ) -> ProviderResult<Option<Rc<Peer>>> {
        let Some(link) = self.link(session) else { return Ok(None) };
        if link.down.get() {
            return Ok(None);
        }
        let peer = self.peer(&link).await?;
        let declared = link
            .info
            .borrow()
            .capabilities
            .as_ref()
            .is_some_and(|c| c.get(capability).is_some_and(Value::is_object));
        Ok(declared.then_some(peer))
    }

    /// A list method's items from the session's upstream: those whose string member `field`
    /// `keep` accepts, `rewrite` applied to each.
    async fn list(
        &self,
        session: SessionRef,
        (method, key): (&str, &str),
        (field, keep): (&str, impl Fn(&str) -> bool),
        rewrite: impl Fn(&mut serde_json::Map<String, Value>),
    ) -> ProviderResult<Vec<Value>> {
        let capability = method.split('/').next().unwrap_or(method);
        let Some(peer) = self.session_peer(session, capability).await? else {
            return Ok(Vec::new());
        };
        let mut items = peer.list_all(method, key, self.settings.timeout).await?;
        items.retain(|item| keep(item.get(field).and_then(Value::as_str).unwrap_or("")));
        if self.prefix.is_some() {
            for item in &mut items {
                if let Some(object) = item.as_object_mut() {
                    rewrite(object);
                }
            }
        }
        Ok(items)
    }

    /// Whether the resource filter lets clients see a URI this upstream lists: its canonical
    /// form is matched (one that has none is never shown: it could not be read).
    fn lists_uri(&self, uri: &str) -> bool {
        crate::uri::canonical(uri).is_ok_and(|c| self.filters.resources.allows(&c))
    }

    /// The canonical form of a client's resource URI (this upstream's part, after the prefix)
    /// when the resource filter allows it (`None`: refused as unknown); `-32602` naming the
    /// problem when it has none (`uri::UriError`).
    fn allowed_uri(&self, uri: &str) -> ProviderResult<Option<String>> {
        let max = self.settings.resource_uri_bytes_max;
        let canonical = crate::uri::canonical_bounded(uri, max).map_err(|e| invalid_uri(uri, e))?;
        Ok(self.filters.resources.allows(&canonical).then_some(canonical))
    }

    /// What the upstream is asked for when a client names `canonical` (allowed by the filter):
    /// the upstream's own spelling of a resource it lists with that canonical form, else
    /// `canonical` itself when one of its templates (the filter allows) matches it, else
    /// `None` (never forwarded: a URI the upstream did not offer). A listing that fails counts
    /// as empty. Costs the upstream a `resources/list` (stopping at the match) and, without
    /// one, a `resources/templates/list`, per request that names a resource.
    async fn upstream_uri(&self, peer: &Peer, canonical: &str) -> Option<String> {
        let timeout = self.settings.timeout;
        let same = |item: &Value| {
            let uri = item.get("uri").and_then(Value::as_str).unwrap_or("");
            crate::uri::canonical(uri).is_ok_and(|c| c == canonical)
        };
        let listed = peer.find("resources/list", "resources", timeout, same).await.ok().flatten();
        if let Some(uri) = listed.as_ref().and_then(|item| item.get("uri")?.as_str()) {
            return Some(uri.to_owned());
        }
        let templates = self.templates(peer).await;
        let matched = templates.iter().any(|t| crate::uri::template::matches(t, canonical));
        matched.then(|| canonical.to_owned())
    }

    /// The upstream's resource templates the filter lets clients see (none when the listing
    /// fails).
    async fn templates(&self, peer: &Peer) -> Vec<String> {
        let method = ("resources/templates/list", "resourceTemplates");
        let listed = peer.list_all(method.0, method.1, self.settings.timeout).await;
        let listed = listed.unwrap_or_default();
        let templates = listed.iter().filter_map(|t| t.get("uriTemplate")?.as_str());
        templates.filter(|t| self.filters.resources.allows(t)).map(str::to_owned).collect()
    }

    /// The upstream's spelling of a client's resource URI (after the prefix), decided as a
    /// `resources/read` of it is: `None` when this upstream may not be asked for it.
    async fn resolve_uri(
        &self,
        session: SessionRef,
        uri: &str,
    ) -> ProviderResult<Option<(Rc<Peer>, String)>> {
        let Some(canonical) = self.allowed_uri(uri)? else { return Ok(None) };
        let Some(peer) = self.session_peer(session, "resources").await? else { return Ok(None) };
        let resolved = self.upstream_uri(&peer, &canonical).await;
        Ok(resolved.map(|uri| (peer, uri)))
    }

    /// The `ref` of a `completion/complete` as the upstream knows it, decided as a
    /// `prompts/get` or `resources/read` of what it names would be (a resource reference may
    /// also be one of the upstream's templates, spelled as listed): `None` when this upstream
    /// may not be asked.
    async fn completion_ref(
        &self,
        session: SessionRef,
        reference: &Value,
    ) -> ProviderResult<Option<Value>> {
        let mut reference = reference.clone();
        let text = |key: &str| reference.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        let (key, upstream) = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = text("name");
                let ours = self.inward(&name).filter(|n| self.filters.prompts.allows(n));
                let Some(ours) = ours else { return Ok(None) };
                ("name", ours.to_owned())
            }
            Some("ref/resource") => {
                let uri = text("uri");
                let Some(ours) = self.inward_uri(&uri) else { return Ok(None) };
                if ours.contains('{') {
                    let Some(peer) = self.session_peer(session, "resources").await? else {
                        return Ok(None);
                    };
                    let listed = self.templates(&peer).await.iter().any(|t| t == ours);
                    let Some(template) = listed.then(|| ours.to_owned()) else { return Ok(None) };
                    ("uri", template)
                } else {
                    let Some((_, upstream)) = self.resolve_uri(session, ours).await? else {
                        return Ok(None);
                    };
                    ("uri", upstream)
                }
            }
            _ => return Ok(None),
        };
        reference[key] = Value::from(upstream);
        Ok(Some(reference))
    }

    /// Rewrites the string member `key` of `object` with `f`.
    fn rewrite_member(
        object: &mut serde_json::Map<String, Value>,
        key: &str,
        f: impl Fn(&str) -> String,
    ) {
        if let Some(Value::String(text)) = object.get_mut(key) {
            *text = f(text);
        }
    }
}

impl Bridge {
    /// A call of tool `name` (as clients know it) with its answer as the request paths take it:
    /// a legacy upstream's result as the JSON text it wrote (`rounds::forward`).
    pub(crate) async fn call_tool_answer(
        &self,
        name: &str,
        arguments: CallArguments,
        cx: CallContext,
    ) -> ProviderResult<ToolAnswer<'static>> {
        let upstream_name = self.inward(name).filter(|n| self.filters.tools.allows(n));
        let Some(upstream_name) = upstream_name else {
            return Err(ProviderError::NotFound(format!("unknown tool: {name}")));
        };
        let Some(link) = self.link(cx.session()) else {
            return Err(self.fault("the session has no upstream connection"));
        };
        if link.down.get() {
            return Err(self.fault("down (an optional upstream): its tools return when it answers"));
        }
        let probe = match self.breaker.admit(Instant::now) {
            Admission::Pass => false,
            Admission::Probe => true,
            Admission::Reject { retry_in } => {
                if let Some((metrics, index)) = &self.calls {
                    metrics.hist.upstream_health(*index).breaker_rejected.inc();
                }
                return Err(self.breaker_open(retry_in));
            }
        };
        let mut guard = ProbeGuard { breaker: &self.breaker, armed: probe };
        let answer = self.forward(&link, upstream_name, arguments, cx).await;
        guard.armed = false;
        self.judge(&answer, probe);
        answer
    }
}

impl Provider for Bridge {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&self, changes: Changes) {
        *self.shared.changes.borrow_mut() = Some(changes);
    }

    /// The core's link's tools: every session's with `shared` isolation, the 2026-07-28
    /// requests' with `per-session` (whose sessions list their own: `list_session_tools`).
    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
        Box::pin(async move {
            let core_link = self.core_link.borrow().clone();
            match core_link {
                Some(link) => Ok(self.catalog_of(&link).await),
                None => Ok(Vec::new()),
            }
        })
    }

    /// With `per-session` isolation, the tools of the session's own upstream (started with
    /// that client's capabilities); a session without a link here has none of this upstream.
    fn list_session_tools(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Option<Vec<ToolInfo>>>> {
        Box::pin(async move {
            if self.settings.isolation != Isolation::PerSession || session == SessionRef::STATELESS
            {
                return Ok(None);
            }
            let link = self.links.borrow().get(&session).cloned();
            match link {
                Some(link) => Ok(Some(self.catalog_of(&link).await)),
                None => Ok(Some(Vec::new())),
            }
        })
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
        Box::pin(async move {
            let arguments = CallArguments::Value(arguments);
            self.call_tool_answer(name, arguments, cx).await.map(ToolAnswer::into_value)
        })
    }

    /// Says it is the bridge, so the request paths call `call_tool_answer` and pass a tool's
    /// result on as the upstream's JSON text (`dispatch::call_tool_answer`).
    fn builtin(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn list_resources(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let keep = ("uri", |uri: &str| self.lists_uri(uri));
        Box::pin(self.list(session, ("resources/list", "resources"), keep, |item| {
            Self::rewrite_member(item, "uri", |uri| self.outward_uri(uri))
        }))
    }

    fn list_resource_templates(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let keep = ("uriTemplate", |t: &str| self.filters.resources.allows(t));
        let method = ("resources/templates/list", "resourceTemplates");
        Box::pin(self.list(session, method, keep, |item| {
            Self::rewrite_member(item, "uriTemplate", |uri| self.outward_uri(uri))
        }))
    }

    fn read_resource<'a>(
        &'a self,
        session: SessionRef,
        uri: &'a str,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        Box::pin(async move {
            let Some(ours) = self.inward_uri(uri) else { return Ok(None) };
            let Some((peer, upstream_uri)) = self.resolve_uri(session, ours).await? else {
                return Ok(None);
            };
            let params = json!({ "uri": upstream_uri });
            let mut result =
                peer.request("resources/read", params, None, self.settings.timeout).await?;
            if self.prefix.is_some() {
                if let Some(Value::Array(contents)) = result.get_mut("contents") {
                    for item in contents.iter_mut().filter_map(Value::as_object_mut) {
                        Self::rewrite_member(item, "uri", |u| self.outward_uri(u));
                    }
                }
            }
            Ok(Some(result))
        })
    }

    fn subscribe_resource<'a>(
        &'a self,
        session: SessionRef,
        uri: &'a str,
        subscribe: bool,
    ) -> LocalBoxFuture<'a, ProviderResult<bool>> {
        Box::pin(async move {
            let Some(ours) = self.inward_uri(uri) else { return Ok(false) };
            let Some((peer, upstream_uri)) = self.resolve_uri(session, ours).await? else {
                return Ok(false);
            };
            let method = if subscribe { "resources/subscribe" } else { "resources/unsubscribe" };
            let params = json!({ "uri": upstream_uri });
            peer.request(method, params, None, self.settings.timeout).await?;
            Ok(true)
        })
    }

    fn list_prompts(&self, session: SessionRef) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let keep = ("name", |name: &str| self.filters.prompts.allows(name));
        Box::pin(self.list(session, ("prompts/list", "prompts"), keep, |item| {
            Self::rewrite_member(item, "name", |name| self.outward(name))
        }))
    }

    fn get_prompt<'a>(
        &'a self,
        session: SessionRef,
        name: &'a str,
        arguments: Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        Box::pin(async move {
            let upstream_name = self.inward(name).filter(|n| self.filters.prompts.allows(n));
            let Some(upstream_name) = upstream_name else { return Ok(None) };
            let Some(peer) = self.session_peer(session, "prompts").await? else { return Ok(None) };
            let mut params = json!({ "name": upstream_name });
            if !arguments.is_null() {
                params["arguments"] = arguments;
            }
            peer.request("prompts/get", params, None, self.settings.timeout).await.map(Some)
        })
    }

    fn complete<'a>(
        &'a self,
        session: SessionRef,
        reference: &'a Value,
        argument: &'a Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Vec<String>>>> {
        Box::pin(async move {
            let Some(reference) = self.completion_ref(session, reference).await? else {
                return Ok(None);
            };
            let Some(peer) = self.session_peer(session, "completions").await? else {
                return Ok(None);
            };
            let params = json!({ "ref": reference, "argument": argument });
            let result =
                peer.request("completion/complete", params, None, self.settings.timeout).await?;
            let values = result
                .pointer("/completion/values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect());
            Ok(values)
        })
    }

    fn open_session<'a>(
        &'a self,
        start: &'a SessionStart,
    ) -> LocalBoxFuture<'a, ProviderResult<SessionInfo>> {
        Box::pin(async move {
            let stateless = start.session == SessionRef::STATELESS;
            match self.settings.isolation {
                Isolation::PerSession if !stateless => {
                    let catalog = Rc::new(Catalog::default());
                    let events = SessionEvents {
                        shared: self.shared.clone(),
                        notifier: start.notifier.clone(),
                        session: start.session,
                        catalog: catalog.clone(),
                    };
                    let session = Some(start.session);
                    let link = Rc::new(new_link(start, session, catalog, Rc::new(events)));
                    // 64 random bits name a session: a clash is ~2^-64 per pair, but it would
                    // hand one client another's upstream, so it is refused, not overwritten.
                    if self.links.borrow().contains_key(&start.session) {
                        return Err(self.fault("session identity clash; initialize again"));
                    }
                    self.links.borrow_mut().insert(start.session, link.clone());
                    if let Err(e) = self.start_link(&link).await {
                        self.links.borrow_mut().remove(&start.session);
                        return Err(e);
                    }
                    let info = link.info.borrow().clone();
                    Ok(info)
                }
                Isolation::PerSession | Isolation::Shared => {
                    let link = self.core_link(start);
                    self.start_link(&link).await?;
                    self.shared
                        .notifiers
                        .borrow_mut()
                        .insert(start.session, start.notifier.clone());
                    let info = link.info.borrow().clone();
                    Ok(info)
                }
            }
        })
    }

    fn stop(&self) {
        // The core's drain ended: every child of this core is stopped (the process waits for
        // them: `upstream::wait_for_children`).
        self.stop_all();
    }

    fn close_session(&self, session: SessionRef) {
        self.shared.notifiers.borrow_mut().remove(&session);
        let link = self.links.borrow_mut().remove(&session);
        let peer = link.and_then(|l| l.peer.borrow_mut().take());
        if let Some(peer) = peer {
            peer.shutdown();
        }
    }
}

/// The `-32602` of a resource URI without a canonical form, naming why (`uri::UriError`).
fn invalid_uri(uri: &str, why: crate::uri::UriError) -> ProviderError {
    ProviderError::InvalidParams(crate::uri::refusal(uri, why))
}
