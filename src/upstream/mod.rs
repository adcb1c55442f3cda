//! The bridge: tidemark in front of another MCP server (`--upstream`), which then gets every
//! guarantee tidemark gives its own tools. Each upstream is a `Provider` (`Bridge`), so its
//! calls run through the same sessions, replay rings, migration boundary and `Idempotency-Key`
//! dedup as built-in tools: every upstream message of a call becomes an event of that call's
//! request stream, and the upstream sees each call once, whatever the client's drops do.
//!
//! Owns: the `--upstream` spec (`UpstreamSpec`), the bridge settings, and per core and
//! upstream the links to upstream connections: one per client session (`per-session`
//! isolation, the default: the child starts at `initialize` and ends with the session) or one
//! for all sessions of the core (`shared`). Each link holds a tool catalog (the tools that
//! connection lists, filtered by `--upstream-allow-tools`/`--upstream-deny-tools`, names
//! prefixed when there are several upstreams), re-listed when its upstream says they changed:
//! an upstream started with one client's capabilities may offer it other tools than another
//! client's, so a per-session link's catalog is that session's (`list_session_tools`) and the
//! core's link's is every other session's (`list_tools`). Equal catalogs are one listing of the
//! core's store (`catalog`), whose bytes `--upstream-catalog-bytes-per-core` bounds.
//!
//! When an upstream cannot be reached as a session starts, its `--upstream-policy` decides:
//! `required` refuses the session (`ProviderError::Down`: 503 + `Retry-After`), `optional` starts
//! it without the upstream and retries in the background (`watch_return`) until its tools can be
//! announced. Its tool calls pass its circuit breaker (`breaker`), per core.
//!
//! A session's upstream I/O runs on the core that owns the session: the child's streams are
//! sockets of that core's runtime (`stdio`). Starting a child (fork+exec) is the one
//! synchronous system call on a worker, once per session in `per-session` mode; it takes well
//! under a millisecond and is not on the path of any call.
//!
//! Called by: `server` (one `Bridge` per upstream per core), `dispatch` (as any provider).
//! Never: runs a shell, or lets a client's session reach another session's upstream process.

mod breaker;
mod catalog;
mod credentials;
mod http;
mod line_head;
mod names;
mod peer;
pub(crate) mod probe;
mod process;
mod settings;
mod stdio;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::{Isolation, UpstreamFilters, UpstreamSpec, UpstreamTarget};
use crate::config::{UpstreamPolicy, UpstreamProtocol};
use crate::metrics::CoreMetrics;
use crate::provider::{
    Annotations, CallContext, Caller, Changes, LocalBoxFuture, LogLevel, Notifier, Provider,
    ProviderError, ProviderResult, SessionInfo, SessionRef, SessionStart, ToolInfo, Value,
};
use crate::signal::Signal;
use breaker::{Admission, Breaker, Transition};
use credentials::Credentials;
pub(crate) use credentials::{CredentialTable, CredentialsError};
pub(crate) use http::deletes_settled;
use http::HttpTransport;
pub(crate) use names::Collision;
use names::NAME_SEPARATOR;
use peer::{upstream_fault, Peer, PeerEvents};
pub(crate) use process::{end_descendants, wait_for_children, ProcessCount};
pub(crate) use settings::Settings;
use stdio::{SpawnError, StdioTransport};

/// Where a bridged call keeps its upstream's pending round of input between client rounds
/// (`CallContext::carry`).
const CARRIED_ROUND: &str = "tidemark/upstream-round";

/// The separator between an upstream's name and a resource URI (`NAME+scheme://…`), which
/// keeps the result a URI (`+` is allowed in a scheme).
pub(crate) const URI_SEPARATOR: &str = "+";

/// The tools one link's upstream connection lists, as clients see them: a listing of the core's
/// store, shared with every other link listed the same (`catalog`).
struct Catalog {
    tools: RefCell<Rc<catalog::Listing>>,
    /// Set when the upstream said its tools changed (or a listing failed): listed again at the
    /// next look.
    stale: Cell<bool>,
}

/// A client session's (or, shared, a core's) connection to the upstream, made on demand: the
/// first `initialize`, and again after the upstream ended (the next request respawns it).
struct Link {
    /// The client session whose link this is; `None` for the core's link.
    session: Option<SessionRef>,
    catalog: Rc<Catalog>,
    protocol_version: &'static str,
    client_params: Value,
    peer: RefCell<Option<Rc<Peer>>>,
    /// What the upstream said in its `initialize` result (for the session's).
    info: RefCell<SessionInfo>,
    connecting: Cell<bool>,
    connected: Signal,
    /// Where notifications outside calls go (the session's; all sessions' when shared).
    notify: Rc<dyn PeerEvents>,
    /// The session opener (a per-session link's; `None` for the core's link, which speaks for
    /// every client: its calls carry their own).
    caller: Option<Caller>,
    /// Set while an optional upstream could not be reached for this link (`--upstream-policy`):
    /// no request connects on its own behalf (it would wait out the start each time), and
    /// `watch_return` tries again every `--upstream-breaker-pause-ms` until it answers.
    down: Cell<bool>,
}

/// The state the bridge shares with its links' event handlers.
struct Shared {
    /// The bridge's prefix (several upstreams), for URIs in forwarded notifications.
    prefix: Option<String>,
    changes: RefCell<Option<Changes>>,
    /// Sessions of this core using the shared link (for its session-level notifications).
    notifiers: RefCell<HashMap<SessionRef, Notifier>>,
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog { tools: RefCell::new(catalog::Listing::empty()), stale: Cell::new(false) }
    }
}

impl Shared {
    /// A notification's params as the client sees them: with several upstreams, the `uri` of
    /// `notifications/resources/updated` carries the upstream's prefix.
    fn outward(&self, method: &str, mut params: Value) -> Value {
        if let (Some(prefix), "notifications/resources/updated") = (&self.prefix, method) {
            if let Some(Value::String(uri)) = params.get_mut("uri") {
                *uri = format!("{prefix}{URI_SEPARATOR}{uri}");
            }
        }
        params
    }

    /// A link's catalog changed: the registry lists the session's tools (a per-session link)
    /// or the core's (the core's link) again.
    fn announce(&self, session: Option<SessionRef>) {
        if let Some(changes) = self.changes.borrow().as_ref() {
            match session {
                Some(session) => changes.session_tools_changed(session),
                None => changes.tools_changed(),
            }
        }
    }
}

/// One session's notifications.
struct SessionEvents {
    shared: Rc<Shared>,
    notifier: Notifier,
    session: SessionRef,
    catalog: Rc<Catalog>,
}

impl PeerEvents for SessionEvents {
    fn tools_changed(&self) {
        self.catalog.stale.set(true);
        self.shared.announce(Some(self.session));
        self.notifier.notify("notifications/tools/list_changed", Value::Null);
    }

    fn notification(&self, method: &str, params: Value) {
        self.notifier.notify(method, self.shared.outward(method, params));
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        self.notifier.log(level, logger, data);
    }
}

/// The shared link's notifications: to every session of the core.
struct BroadcastEvents(Rc<Shared>, Rc<Catalog>);

impl PeerEvents for BroadcastEvents {
    fn tools_changed(&self) {
        self.1.stale.set(true);
        self.0.announce(None);
        self.notification("notifications/tools/list_changed", Value::Null);
    }

    fn notification(&self, method: &str, params: Value) {
        let params = self.0.outward(method, params);
        for notifier in self.0.notifiers.borrow().values() {
            notifier.notify(method, params.clone());
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        for notifier in self.0.notifiers.borrow().values() {
            notifier.log(level, logger, data.clone());
        }
    }
}

/// One upstream on one core.
pub(crate) struct Bridge {
    name: Rc<str>,
    /// `Some(name)` with several upstreams: names and URIs carry it.
    prefix: Option<String>,
    target: UpstreamTarget,
    settings: Arc<Settings>,
    /// What this upstream is shown (`--upstream-credentials`), never the client's token.
    credentials: Arc<Credentials>,
    count: Arc<ProcessCount>,
    /// This core's metrics and this upstream's index (`tidemark_upstream_call_duration_seconds`);
    /// `None` when made off a worker thread.
    calls: Option<(Arc<CoreMetrics>, usize)>,
    shared: Rc<Shared>,
    /// `--upstream-allow-*` / `--upstream-deny-*` of this upstream: its tools, prompts and
    /// resources that clients may see.
    filters: Arc<UpstreamFilters>,
    links: RefCell<HashMap<SessionRef, Rc<Link>>>,
    /// `shared` isolation: the core's one link, made at the first session.
    core_link: RefCell<Option<Rc<Link>>>,
    /// `--upstream-policy` of this upstream: what a session does when it cannot be reached.
    policy: UpstreamPolicy,
    /// `--upstream-protocol` of this upstream (an HTTP one's era).
    protocol: UpstreamProtocol,
    /// What this core's first probe of an HTTP upstream found: `Some(Some(result))` its
    /// `server/discover` result when it is spoken to in 2026-07-28, `Some(None)` legacy;
    /// `None` before the first link connected (later links reuse the answer, so the probe
    /// costs one round trip per core, not one per session).
    discovered: RefCell<Option<Option<Value>>>,
    /// The circuit breaker of this upstream's tool calls on this core.
    breaker: Breaker,
    /// This bridge (`new_rc`), for the task that waits for an optional upstream's return.
    me: Weak<Bridge>,
    /// Set once the core stopped (`stop_all`): no link is tried again.
    stopped: Cell<bool>,
}

impl Bridge {
    /// The CLIENT span of a `tools/call` of `tool` (its name upstream) under `parent`, with
    /// the MCP attributes of the upstream's side: the transport and, for HTTP, its address.
    fn client_span(&self, parent: &crate::trace::TraceParent, tool: &str) -> crate::trace::Span {
        use crate::trace::{Span, SpanKind};
        let mut span = Span::child(parent, SpanKind::Client, format!("tools/call {tool}"));
        span.set_str("mcp.method.name", "tools/call");
        span.set_str("gen_ai.tool.name", tool);
        span.set_str("gen_ai.operation.name", "execute_tool");
        span.set_str("tidemark.upstream", &self.name);
        match &self.target {
            UpstreamTarget::Stdio(_) => span.set_str("network.transport", "pipe"),
            UpstreamTarget::Http(url) => {
                span.set_str("network.transport", "tcp");
                span.set_str("url.full", url);
            }
        }
        span
    }

    /// The provider of `spec`, the `index`-th --upstream (its `upstream` label).
    pub(crate) fn new(
        spec: &UpstreamSpec,
        index: usize,
        prefixed: bool,
        settings: Arc<Settings>,
        count: Arc<ProcessCount>,
    ) -> Bridge {
        let policy = settings.policy(index);
        let protocol = settings.protocol(index);
        let breaker = Breaker::new(settings.breaker_failures, settings.breaker_pause);
        Bridge {
            name: Rc::from(spec.label(index)),
            prefix: if prefixed { spec.name.clone() } else { None },
            target: spec.target.clone(),
            credentials: settings.credentials.for_upstream(spec.name.as_deref()),
            filters: settings.filters(index),
            settings,
            count,
            calls: crate::metrics::this_core().map(|metrics| (metrics, index)),
            shared: Rc::new(Shared {
                prefix: if prefixed { spec.name.clone() } else { None },
                changes: RefCell::new(None),
                notifiers: RefCell::new(HashMap::new()),
            }),
            links: RefCell::new(HashMap::new()),
            core_link: RefCell::new(None),
            policy,
            protocol,
            discovered: RefCell::new(None),
            breaker,
            me: Weak::new(),
            stopped: Cell::new(false),
        }
    }

    /// `new` as the provider the server runs: it knows itself, so an optional upstream that
    /// was down at a session's start is tried again in the background (`watch_return`), and
    /// its calls are counted under metrics index `slot` (its name's for the process's life:
    /// after a reload it may differ from `index`, its place in the set).
    pub(crate) fn new_rc(
        spec: &UpstreamSpec,
        index: usize,
        slot: usize,
        prefixed: bool,
        settings: Arc<Settings>,
        count: Arc<ProcessCount>,
    ) -> Rc<Bridge> {
        Rc::new_cyclic(|me| {
            let mut bridge = Bridge::new(spec, index, prefixed, settings, count);
            bridge.me = me.clone();
            if let Some((_, at)) = &mut bridge.calls {
                *at = slot;
            }
            bridge
        })
    }

    /// The link serving `session`, if it has one: the core's link for `shared` isolation and
    /// for 2026-07-28 requests (`SessionRef::STATELESS`: there is no client session to map).
    fn link(&self, session: SessionRef) -> Option<Rc<Link>> {
        match self.settings.isolation {
            Isolation::PerSession if session != SessionRef::STATELESS => {
                self.links.borrow().get(&session).cloned()
            }
            Isolation::PerSession | Isolation::Shared => self.core_link.borrow().clone(),
        }
    }

    /// The core's link, made (not yet connected) on first use. It speaks for every client, so
    /// it offers the upstream every client capability tidemark can route to a call.
    fn core_link(&self, start: &SessionStart) -> Rc<Link> {
        if let Some(link) = self.core_link.borrow().clone() {
            return link;
        }
        let mut generic = start.clone();
        generic.caller = None;
        generic.client_params = json!({
            "capabilities": { "sampling": {}, "elicitation": {}, "roots": {} },
            "clientInfo": { "name": "tidemark", "version": env!("CARGO_PKG_VERSION") },
        });
        let catalog = Rc::new(Catalog::default());
        let events = BroadcastEvents(self.shared.clone(), catalog.clone());
        let link = Rc::new(new_link(&generic, None, catalog, Rc::new(events)));
        *self.core_link.borrow_mut() = Some(link.clone());
        link
    }

    /// The link's live upstream connection, connecting (again) when it has none.
    async fn peer(&self, link: &Link) -> ProviderResult<Rc<Peer>> {
        loop {
            let connected = link.connected.notified();
            let alive = link.peer.borrow().clone().filter(|p| p.is_alive());
            if let Some(peer) = alive {
                return Ok(peer);
            }
            if link.connecting.get() {
                connected.await;
                continue;
            }
            link.connecting.set(true);
            let made = self.connect(link).await;
            link.connecting.set(false);
            link.connected.notify_all();
            let (peer, info) = made?;
            *link.peer.borrow_mut() = Some(peer.clone());
            *link.info.borrow_mut() = info;
            return Ok(peer);
        }
    }

    /// Starts an upstream connection and runs the MCP handshake on it.
    async fn connect(&self, link: &Link) -> ProviderResult<(Rc<Peer>, SessionInfo)> {
        let peer =
            Rc::new(Peer::new(self.name.clone(), link.notify.clone(), self.settings.call_max));
        match &self.target {
            UpstreamTarget::Stdio(argv) => {
                let weak = Rc::downgrade(&peer);
                let spawned = StdioTransport::spawn(
                    self.name.clone(),
                    argv,
                    &self.settings,
                    &self.credentials,
                    self.count.clone(),
                    weak,
                );
                match spawned {
                    Ok(transport) => peer.bind(transport),
                    Err(SpawnError::AtCapacity) => {
                        return Err(ProviderError::Unavailable(format!(
                            "upstream {}: {} processes running (--upstream-max-processes)",
                            self.name, self.settings.max_processes
                        )))
                    }
                    Err(SpawnError::Failed(why)) => return Err(self.fault(&why)),
                }
            }
            UpstreamTarget::Http(url) => {
                let weak = Rc::downgrade(&peer);
                let credentials = self.credentials.clone();
                let client = http::Stateless::of_initialize(&link.client_params);
                let transport = match HttpTransport::connect(
                    self.name.clone(),
                    url,
                    &self.settings,
                    credentials,
                    link.caller.clone(),
                    client,
                    weak,
                ) {
                    Ok(transport) => transport,
                    Err(why) => return Err(self.fault(&why)),
                };
                peer.bind(transport.clone());
                let discovered = match self.discover(&peer).await {
                    Ok(discovered) => discovered,
                    Err(e) => {
                        peer.shutdown();
                        return Err(e);
                    }
                };
                if let Some(result) = discovered {
                    let capabilities = result.get("capabilities").cloned().unwrap_or_default();
                    transport.enter_modern(&capabilities);
                    if let Err(e) = self.relist(&peer, link, self.settings.start_timeout).await {
                        peer.shutdown();
                        return Err(self.catalog_refusal(&e));
                    }
                    return Ok((peer, self.session_info(&result, http::server_info(&result))));
                }
            }
        }
        let client = &link.client_params;
        let params = json!({
            "protocolVersion": link.protocol_version,
            "capabilities": client.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "clientInfo": client.get("clientInfo").cloned()
                .unwrap_or_else(|| json!({ "name": "tidemark", "version": env!("CARGO_PKG_VERSION") })),
        });
        let timeout = self.settings.start_timeout;
        let result = match peer.request("initialize", params, None, timeout).await {
            Ok(result) => result,
            Err(e) => {
                peer.shutdown();
                return Err(e);
            }
        };
        peer.notify("notifications/initialized", Value::Null);
        // A new connection (a first one, or a respawned child) may list other tools.
        if let Err(e) = self.relist(&peer, link, self.settings.start_timeout).await {
            peer.shutdown();
            return Err(self.catalog_refusal(&e));
        }
        Ok((peer, self.session_info(&result, result.get("serverInfo").cloned())))
    }

    /// What a client session is told of the upstream, from its `initialize` (or
    /// `server/discover`) result: its instructions (prefixed with several upstreams), the
    /// capabilities the bridge relays, and its `serverInfo` when it is the only upstream.
    fn session_info(&self, result: &Value, server_info: Option<Value>) -> SessionInfo {
        SessionInfo {
            instructions: result.get("instructions").and_then(Value::as_str).map(
                |text| match &self.prefix {
                    Some(prefix) => format!("{prefix}: {text}"),
                    None => text.to_owned(),
                },
            ),
            capabilities: result.get("capabilities").map(forwarded_capabilities),
            server_info: server_info.filter(|_| self.prefix.is_none()),
        }
    }

    /// The era of an HTTP upstream (`--upstream-protocol`): `Some(discover result)` to speak
    /// 2026-07-28 to it, `None` for `initialize`. `auto` probes with `server/discover` and
    /// speaks 2026-07-28 only to an upstream that serves nothing else: one that also serves a
    /// legacy revision gets `initialize`, whose response streams resume (`Last-Event-ID`) when
    /// a connection to it breaks mid-call, where a broken 2026-07-28 stream is the call's
    /// cancellation. A failed probe is a legacy upstream for `auto`, a failed start for
    /// `modern`. The first answer on a core holds for its later links.
    async fn discover(&self, peer: &Peer) -> ProviderResult<Option<Value>> {
        if self.protocol == UpstreamProtocol::Legacy {
            return Ok(None);
        }
        if let Some(known) = self.discovered.borrow().clone() {
            return Ok(known);
        }
        let timeout = self.settings.start_timeout;
        let probed = peer.request(http::DISCOVER, json!({}), None, timeout).await;
        let modern = match (&probed, self.protocol) {
            (Ok(result), UpstreamProtocol::Modern) if http::offers_modern(result) => true,
            (Ok(result), _) => http::offers_modern(result) && !http::offers_legacy(result),
            (Err(_), _) => false,
        };
        if !modern && self.protocol == UpstreamProtocol::Modern {
            let why = match probed {
                Ok(_) => "its server/discover does not offer 2026-07-28".to_owned(),
                Err(e) => format!("its server/discover failed: {e}"),
            };
            return Err(self.fault(&format!("{why} (--upstream-protocol {}=modern)", self.name)));
        }
        if let Err(e) = &probed {
            tracing::debug!(upstream = %self.name, error = %e, "no server/discover: a legacy upstream");
        }
        let known = probed.ok().filter(|_| modern);
        let era = if known.is_some() { "2026-07-28" } else { "legacy (initialize)" };
        tracing::info!(upstream = %self.name, era, "upstream era chosen");
        *self.discovered.borrow_mut() = Some(known.clone());
        Ok(known)
    }

    /// Lists the link's upstream tools into its catalog; announces a change. `Err` when the
    /// core's catalog budget cannot take the listing: the link keeps what it had (nothing, at a
    /// session's start, which is then refused: `catalog_refusal`).
    async fn relist(
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
    fn catalog_refusal(&self, e: &catalog::OverBudget) -> ProviderError {
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
    async fn catalog_of(&self, link: &Link) -> Vec<ToolInfo> {
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
    fn tool_info(&self, tool: &Value) -> Option<ToolInfo> {
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
    fn outward(&self, name: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{NAME_SEPARATOR}{name}"),
            None => name.to_owned(),
        }
    }

    /// A client-side tool or prompt name as the upstream knows it; `None` when not ours.
    fn inward<'a>(&self, name: &'a str) -> Option<&'a str> {
        match &self.prefix {
            Some(prefix) => name.strip_prefix(prefix.as_str())?.strip_prefix(NAME_SEPARATOR),
            None => Some(name),
        }
    }

    /// A resource URI as clients see it.
    fn outward_uri(&self, uri: &str) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}{URI_SEPARATOR}{uri}"),
            None => uri.to_owned(),
        }
    }

    fn inward_uri<'a>(&self, uri: &'a str) -> Option<&'a str> {
        match &self.prefix {
            Some(prefix) => uri.strip_prefix(prefix.as_str())?.strip_prefix(URI_SEPARATOR),
            None => Some(uri),
        }
    }

    fn fault(&self, why: &str) -> ProviderError {
        upstream_fault(&self.name, why)
    }

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
            let upstream_name = self.inward(name).filter(|n| self.filters.tools.allows(n));
            let Some(upstream_name) = upstream_name else {
                return Err(ProviderError::NotFound(format!("unknown tool: {name}")));
            };
            let Some(link) = self.link(cx.session()) else {
                return Err(self.fault("the session has no upstream connection"));
            };
            if link.down.get() {
                return Err(
                    self.fault("down (an optional upstream): its tools return when it answers")
                );
            }
            let probe = match self.breaker.admit(Instant::now()) {
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
        })
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

impl Bridge {
    /// A `tools/call` of `tool` (its name upstream) on `link`'s upstream, connecting first if
    /// it has no live connection.
    async fn forward(
        &self,
        link: &Link,
        tool: &str,
        arguments: Value,
        cx: CallContext,
    ) -> ProviderResult<Value> {
        let peer = self.peer(link).await?;
        let mut params = json!({ "name": tool });
        if !arguments.is_null() {
            params["arguments"] = arguments;
        }
        // Tracing on: the call's CLIENT span, a child of the request's, whose context the
        // upstream is sent (`traceparent` header, `params._meta.traceparent`).
        let span = cx.trace().map(|parent| self.client_span(&parent, tool));
        let cx = match &span {
            Some(span) => cx.with_trace(Some(span.context())),
            None => cx,
        };
        let started = std::time::Instant::now();
        // Only a 2026-07-28 upstream answers with rounds of input (a legacy one asks its
        // questions as requests during the call): the others' calls go out once, as they are.
        let answer = if self.speaks_modern() {
            self.call_rounds(&peer, params, &cx).await
        } else {
            peer.request("tools/call", params, Some(cx), self.settings.timeout).await
        };
        if let Some((metrics, index)) = &self.calls {
            metrics.hist.upstream_call(*index, tool, started);
        }
        if let Some(mut span) = span {
            if let Err(e) = &answer {
                let error_type = match e {
                    ProviderError::Rpc { code, .. } => code.to_string(),
                    ProviderError::Cancelled => "cancelled".to_owned(),
                    _ => "tool_error".to_owned(),
                };
                span.fail(&error_type, &e.to_string());
            }
            span.finish();
        }
        answer
    }

    /// Whether this core speaks 2026-07-28 to the upstream (its probe found it modern).
    fn speaks_modern(&self) -> bool {
        matches!(*self.discovered.borrow(), Some(Some(_)))
    }

    /// A `tools/call` of the upstream through its rounds of input (2026-07-28 MRTR): while it
    /// answers with an `InputRequiredResult`, each of its `inputRequests` is asked of the
    /// client (`CallContext::input`, under the upstream's key: on a legacy session as a
    /// server→client request on the call's stream, for a 2026-07-28 client as an entry of
    /// tidemark's own `InputRequiredResult`) and the call is sent again with the
    /// `inputResponses` and the upstream's `requestState`. When the client's answers come in
    /// a later client request (2026-07-28 in front), the upstream's round is carried in
    /// tidemark's sealed state (`CallContext::carry`), so the upstream sees each round once.
    /// At most `--upstream-input-rounds-max` rounds.
    async fn call_rounds(
        &self,
        peer: &Peer,
        params: Value,
        cx: &CallContext,
    ) -> ProviderResult<Value> {
        let mut pending = cx.carried(CARRIED_ROUND);
        for _ in 0..=self.settings.input_rounds_max {
            let mut round = params.clone();
            if let Some(asked) = pending.take() {
                // Carried before asking: an input the client has not given yet ends this
                // client round, and the next one must find the upstream's state.
                cx.carry(CARRIED_ROUND, asked.clone());
                round["inputResponses"] = self.ask_client(&asked, cx).await?;
                if let Some(state) = asked.get("requestState").filter(|s| !s.is_null()) {
                    round["requestState"] = state.clone();
                }
            }
            let timeout = self.settings.timeout;
            let answer = peer.request("tools/call", round, Some(cx.clone()), timeout).await?;
            if answer.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(answer);
            }
            pending = Some(json!({
                "inputRequests": answer.get("inputRequests").cloned().unwrap_or_default(),
                "requestState": answer.get("requestState").cloned().unwrap_or_default(),
            }));
        }
        let max = self.settings.input_rounds_max;
        Err(self.fault(&format!(
            "it asked for input more than {max} times in one call (--upstream-input-rounds-max)"
        )))
    }

    /// The client's answers to one `InputRequiredResult`'s `inputRequests`, by key. Every
    /// request is made before any is awaited, so a 2026-07-28 client is asked them all in one
    /// round.
    async fn ask_client(&self, asked: &Value, cx: &CallContext) -> ProviderResult<Value> {
        let Some(Value::Object(requests)) = asked.get("inputRequests") else {
            return Err(self.fault("its InputRequiredResult has no inputRequests object"));
        };
        let mut waiting = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str);
            let Some(method) = method.filter(|m| peer::is_plain_method(m)) else {
                return Err(self.fault(&format!("its input request {key:?} names no method")));
            };
            let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            waiting.push((key.clone(), cx.input(key, method, params)));
        }
        let mut answers = serde_json::Map::with_capacity(waiting.len());
        for (key, answer) in waiting {
            answers.insert(key, answer.await?);
        }
        Ok(Value::Object(answers))
    }

    /// Tells the breaker how an admitted call (`probe`: the half-open one) ended; a cancelled
    /// call says nothing of the upstream.
    fn judge(&self, answer: &ProviderResult<Value>, probe: bool) {
        let now = Instant::now();
        if matches!(answer, Err(ProviderError::Cancelled)) {
            if probe {
                self.breaker.probe_abandoned(now);
            }
            return;
        }
        match self.breaker.record(breaker::is_failure(answer), now) {
            Transition::Opened => {
                if let Some((metrics, index)) = &self.calls {
                    metrics.hist.upstream_health(*index).breaker_opened.inc();
                }
                tracing::warn!(
                    upstream = %self.name,
                    failures = self.breaker.failures_max(),
                    pause_ms = self.settings.breaker_pause.as_millis() as u64,
                    "upstream circuit breaker opened: its calls fail fast"
                );
            }
            Transition::Closed => {
                tracing::info!(upstream = %self.name, "upstream circuit breaker closed")
            }
            Transition::None => {}
        }
    }

    /// The fail-fast answer of a call while the breaker is open (`retry_in` until the probe).
    fn breaker_open(&self, retry_in: Duration) -> ProviderError {
        let retry_after_ms = retry_in.as_millis() as u64;
        let failures = self.breaker.failures_max();
        ProviderError::Rpc {
            code: crate::wire::Code::InternalError.value(),
            message: format!(
                "upstream {} unavailable: circuit breaker open after {failures} consecutive \
                 failures (--upstream-breaker-failures); not called, retry in {retry_after_ms} ms",
                self.name
            ),
            data: Some(json!({
                "upstream": &*self.name,
                "reason": "circuit breaker open",
                "retryAfterMs": retry_after_ms,
            })),
        }
    }

    /// Opens `link`'s upstream connection as a session starts. When it cannot be reached: a
    /// required upstream refuses the session (503 with `Retry-After`; a process-limit refusal
    /// stays itself), an optional one leaves the link down, watched until it answers.
    async fn start_link(&self, link: &Rc<Link>) -> ProviderResult<()> {
        if link.down.get() {
            return Ok(());
        }
        let Err(e) = self.peer(link).await else { return Ok(()) };
        // Over the catalog budget (`catalog_refusal`): refused whatever the policy, as the
        // upstream is up.
        if matches!(e, ProviderError::Down { .. }) {
            return Err(e);
        }
        let required = self.policy == UpstreamPolicy::Required;
        if required && matches!(e, ProviderError::Unavailable(_)) {
            return Err(e);
        }
        if let Some((metrics, index)) = &self.calls {
            metrics.hist.upstream_health(*index).down.inc();
        }
        if required {
            return Err(self.required_down(e));
        }
        tracing::warn!(upstream = %self.name, error = %e, "optional upstream down: the session starts without it");
        link.down.set(true);
        self.watch_return(link.clone());
        Ok(())
    }

    /// A required upstream's failure to start as the session's refusal: its message and data
    /// (which name it), with `policy` and a `Retry-After` of the breaker's pause.
    fn required_down(&self, e: ProviderError) -> ProviderError {
        let (message, data) = match e {
            ProviderError::Rpc { message, data, .. } => (message, data),
            other => (format!("upstream {} failed: {other}", self.name), None),
        };
        let mut data = match data {
            Some(Value::Object(map)) => map,
            _ => serde_json::Map::from_iter([("upstream".to_owned(), json!(&*self.name))]),
        };
        data.insert("policy".to_owned(), json!(UpstreamPolicy::Required.as_str()));
        ProviderError::Down {
            message: format!("{message} (a required upstream: try again after Retry-After)"),
            data: Some(Value::Object(data)),
            retry_after_secs: self.settings.down_retry_after_secs(),
        }
    }

    /// Whether `link` is still one of this bridge's (its session has not ended).
    fn holds(&self, link: &Rc<Link>) -> bool {
        if self.stopped.get() {
            return false;
        }
        match link.session {
            Some(session) => self.links.borrow().get(&session).is_some_and(|l| Rc::ptr_eq(l, link)),
            None => self.core_link.borrow().as_ref().is_some_and(|l| Rc::ptr_eq(l, link)),
        }
    }

    /// Tries `link`'s optional upstream again every `--upstream-breaker-pause-ms` until it
    /// answers (then its tools are listed and the link's clients get
    /// `notifications/tools/list_changed`) or the link ends. A background task of this core.
    fn watch_return(&self, link: Rc<Link>) {
        let me = self.me.clone();
        let pause = self.settings.breaker_pause;
        monoio::spawn(async move {
            loop {
                monoio::time::sleep(pause).await;
                let Some(bridge) = me.upgrade() else { return };
                if !bridge.holds(&link) {
                    return;
                }
                match bridge.peer(&link).await {
                    Ok(peer) if !bridge.holds(&link) => {
                        link.peer.borrow_mut().take();
                        peer.shutdown();
                        return;
                    }
                    Ok(_) => {
                        link.down.set(false);
                        tracing::info!(upstream = %bridge.name, "optional upstream is back");
                        link.notify.tools_changed();
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(upstream = %bridge.name, error = %e, "optional upstream still down")
                    }
                }
            }
        });
    }

    /// Stops every upstream connection of this core.
    fn stop_all(&self) {
        self.stopped.set(true);
        let links: Vec<Rc<Link>> = self.links.borrow_mut().drain().map(|(_, l)| l).collect();
        for link in links.iter().chain(self.core_link.borrow().iter()) {
            let peer = link.peer.borrow_mut().take();
            if let Some(peer) = peer {
                peer.shutdown();
            }
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The features the bridge relays; an upstream capability outside them (`tasks`,
/// `experimental`, …) is not announced, as tidemark would answer its methods with -32601.
const FORWARDED_CAPABILITIES: [&str; 5] =
    ["tools", "resources", "prompts", "completions", "logging"];

/// The upstream's capabilities that the bridge relays.
fn forwarded_capabilities(capabilities: &Value) -> Value {
    let mut kept = serde_json::Map::new();
    if let Value::Object(all) = capabilities {
        for (name, value) in all {
            if FORWARDED_CAPABILITIES.contains(&name.as_str()) {
                kept.insert(name.clone(), value.clone());
            }
        }
    }
    Value::Object(kept)
}

fn new_link(
    start: &SessionStart,
    session: Option<SessionRef>,
    catalog: Rc<Catalog>,
    notify: Rc<dyn PeerEvents>,
) -> Link {
    Link {
        session,
        catalog,
        protocol_version: start.protocol_version,
        client_params: start.client_params.clone(),
        peer: RefCell::new(None),
        info: RefCell::new(SessionInfo::default()),
        connecting: Cell::new(false),
        connected: Signal::default(),
        notify,
        caller: start.caller.clone(),
        down: Cell::new(false),
    }
}

/// The half-open probe of a call whose future may be dropped before it ends (the connection
/// closed, the core stops): while `armed`, its drop lets the next call probe instead.
struct ProbeGuard<'a> {
    breaker: &'a Breaker,
    armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.probe_abandoned(Instant::now());
        }
    }
}

/// The `-32602` of a resource URI without a canonical form, naming why (`uri::UriError`).
fn invalid_uri(uri: &str, why: crate::uri::UriError) -> ProviderError {
    ProviderError::InvalidParams(crate::uri::refusal(uri, why))
}

#[cfg(test)]
mod tests;
