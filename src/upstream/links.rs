//! A bridge's links to its upstream and its policy: which link serves a session (`link`,
//! `core_link`); connecting a link (again) and the MCP handshake over stdio or HTTP, with the
//! era probe of an HTTP upstream (`peer`, `connect`, `discover`); what a client session is
//! told of the upstream (`session_info`, `forwarded_capabilities`); `--upstream-policy` as a
//! session starts (`start_link`: a required upstream refuses the session, an optional one is
//! watched until it answers, `watch_return`); the circuit breaker's verdict on each call
//! (`judge`, `breaker_open`, `ProbeGuard`); and the stop of every link of the core.
//!
//! Called by: the bridge's `Provider` impl (`provider`) and its calls (`rounds`). Never:
//! connects a link whose session ended, or a link of a stopped core.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::breaker::{self, Breaker, Transition};
use super::http::{self, HttpTransport};
use super::peer::{Peer, PeerEvents};
use super::stdio::{SpawnError, StdioTransport};
use super::{Bridge, BroadcastEvents, Catalog, Link};
use crate::config::{Isolation, UpstreamPolicy, UpstreamProtocol, UpstreamTarget};
use crate::provider::Value;
use crate::provider::{ProviderError, ProviderResult, SessionInfo, SessionRef, SessionStart};
use crate::signal::Signal;

impl Bridge {
    /// The link serving `session`, if it has one: the core's link for `shared` isolation and
    /// for 2026-07-28 requests (`SessionRef::STATELESS`: there is no client session to map).
    pub(super) fn link(&self, session: SessionRef) -> Option<Rc<Link>> {
        match self.settings.isolation {
            Isolation::PerSession if session != SessionRef::STATELESS => {
                self.links.borrow().get(&session).cloned()
            }
            Isolation::PerSession | Isolation::Shared => self.core_link.borrow().clone(),
        }
    }

    /// The core's link, made (not yet connected) on first use. It speaks for every client, so
    /// it offers the upstream every client capability tidemark can route to a call.
    pub(super) fn core_link(&self, start: &SessionStart) -> Rc<Link> {
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
    pub(super) async fn peer(&self, link: &Link) -> ProviderResult<Rc<Peer>> {
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

    /// Opens `link`'s upstream connection as a session starts. When it cannot be reached: a
    /// required upstream refuses the session (503 with `Retry-After`; a process-limit refusal
    /// stays itself), an optional one leaves the link down, watched until it answers.
    pub(super) async fn start_link(&self, link: &Rc<Link>) -> ProviderResult<()> {
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
    pub(super) fn stop_all(&self) {
        self.stopped.set(true);
        let links: Vec<Rc<Link>> = self.links.borrow_mut().drain().map(|(_, l)| l).collect();
        for link in links.iter().chain(self.core_link.borrow().iter()) {
            let peer = link.peer.borrow_mut().take();
            if let Some(peer) = peer {
                peer.shutdown();
            }
        }
    }

    /// Tells the breaker how an admitted call (`probe`: the half-open one) ended; a cancelled
    /// call says nothing of the upstream.
    pub(super) fn judge<T>(&self, answer: &ProviderResult<T>, probe: bool) {
        if matches!(answer, Err(ProviderError::Cancelled)) {
            if probe {
                self.breaker.probe_abandoned(Instant::now());
            }
            return;
        }
        match self.breaker.record(breaker::is_failure(answer), Instant::now) {
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
    pub(super) fn breaker_open(&self, retry_in: Duration) -> ProviderError {
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
}

/// The half-open probe of a call whose future may be dropped before it ends (the connection
/// closed, the core stops): while `armed`, its drop lets the next call probe instead.
pub(super) struct ProbeGuard<'a> {
    pub(super) breaker: &'a Breaker,
    pub(super) armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.probe_abandoned(Instant::now());
        }
    }
}

/// The features the bridge relays; an upstream capability outside them (`tasks`,
/// `experimental`, …) is not announced, as tidemark would answer its methods with -32601.
const FORWARDED_CAPABILITIES: [&str; 5] =
    ["tools", "resources", "prompts", "completions", "logging"];

/// The upstream's capabilities that the bridge relays.
pub(super) fn forwarded_capabilities(capabilities: &Value) -> Value {
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

/// A link of `start`'s session (`session`; `None` for the core's link), not yet connected.
pub(super) fn new_link(
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
