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
//! The bridge's rooms: this file holds its state (`Bridge`, `Link`, `Catalog`) and the
//! handlers of an upstream's notifications; `provider` its `Provider` impl (routing and the
//! filters); `links` its links and policy (connecting, `--upstream-policy`, the breaker's
//! verdict); `rounds` a forwarded call's rounds of input; `credentials` what an upstream is
//! presented (the `--upstream-credentials` file) and `exchange` a caller's token traded for the
//! upstream's (RFC 8693, `--upstream-auth NAME=exchange`, off the worker cores); `listing` a link's tools listed into
//! the core's store (`catalog`) and the bridge's names both ways (the prefix rules: `names`).
//!
//! Called by: `server` (one `Bridge` per upstream per core), `dispatch` (as any provider).
//! Never: runs a shell, or lets a client's session reach another session's upstream process.

mod breaker;
mod catalog;
mod credentials;
mod exchange;
mod http;
mod line_head;
mod links;
mod listing;
mod names;
mod peer;
pub(crate) mod probe;
mod process;
mod provider;
mod rounds;
mod settings;
mod stdio;

/// The pieces of the HTTP client that the client-side bridge (`connect`) shares.
pub(crate) use http::{parse_url, resolve, SseDecoder};

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use std::rc::{Rc, Weak};
use std::sync::Arc;

use crate::config::{UpstreamFilters, UpstreamSpec, UpstreamTarget};
use crate::config::{UpstreamPolicy, UpstreamProtocol};
use crate::fasthash::FastMap;
use crate::metrics::CoreMetrics;
use crate::provider::{
    Caller, Changes, LogLevel, Notifier, ProviderError, SessionInfo, SessionRef, Value,
};
use crate::signal::Signal;
use breaker::Breaker;
use credentials::Credentials;
pub(crate) use credentials::{CredentialTable, CredentialsError};
pub(crate) use exchange::{start as start_exchanges, Tuning as ExchangeTuning};
pub(crate) use http::deletes_settled;
pub(crate) use names::Collision;
pub(crate) use peer::CallArguments;
use peer::{upstream_fault, Peer, PeerEvents};
pub(crate) use process::{end_descendants, wait_for_children, ProcessCount};
pub(crate) use settings::Settings;

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
    /// Keyed by the server's own session references (looked up once per call: the fast hash).
    links: RefCell<FastMap<SessionRef, Rc<Link>>>,
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
            links: RefCell::new(FastMap::default()),
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

    fn fault(&self, why: &str) -> ProviderError {
        upstream_fault(&self.name, why)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests;
