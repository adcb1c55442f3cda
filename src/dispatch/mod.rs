//! MCP methods → providers: the per-core `Registry` of providers, the cached tool table that
//! `tools/call` routes by (with each tool's idempotency from its provider's annotations,
//! CONTRACT §4 step 3), the answers of every method that needs no stream, and the server
//! capabilities.
//!
//! Called by: a protocol path (`legacy`) once it has decided that a request runs. Never: knows
//! about sessions, streams or HTTP; it writes JSON-RPC response bodies and nothing else.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use simd_json::prelude::*;

use crate::auth::policy::{Item, Kind};
use crate::auth::Access;
use crate::fasthash::FastMap;
use crate::provider::builtin::ToolAnswer;
use crate::provider::{
    CallContext, Changes, LocalBoxFuture, Provider, ProviderError, ProviderResult, SessionInfo,
    SessionRef, SessionStart, ToolArguments, ToolInfo, Value,
};
use crate::wire::jsonrpc::{self, RawId};
use crate::wire::param_headers::{self, HeaderParam};
use crate::wire::{self, Code, WireValue};

/// The MCP `completion/complete` cap: "values: max 100 items" (MCP 2025-11-25, server/utilities/
/// completion). Longer candidate lists are cut here and reported with `total` and `hasMore`.
pub(crate) const COMPLETION_VALUES_MAX: usize = 100;

/// Where `tools/call` of one tool goes.
#[derive(Clone)]
pub(crate) struct ToolRoute {
    /// The tool's name, shared (a call clones the `Rc`, not the text).
    pub name: Rc<str>,
    pub provider: Rc<dyn Provider>,
    /// Read-only or idempotent: a retried call may run again (CONTRACT §4 step 3).
    pub safe_to_repeat: bool,
    /// Annotated `readOnlyHint: true` (the policy's write-scope default spares it).
    pub read_only: bool,
    /// The tool's `x-mcp-header` declarations (MCP 2026-07-28 SEP-2243), checked against the
    /// request's `Mcp-Param-*` headers; empty for most tools, and for a tool whose
    /// declarations are invalid (2026-07-28 clients drop such a tool; legacy ones may call it).
    pub header_params: Rc<[HeaderParam]>,
}

/// The tools of all providers, as last listed: for every session (the core's table), or for
/// one session whose providers list it tools of its own (`Provider::list_session_tools`).
/// Listing and `tools/call` read the same table, so a session may call exactly what it is
/// listed.
#[derive(Default)]
struct ToolTable {
    by_name: FastMap<String, ToolRoute>,
    /// The `tools/list` result (`{"tools":[...]}`) encoded once per listing, so the method
    /// costs no encoding per request.
    list_json: Vec<u8>,
    /// Each listed tool's JSON with its route, in listing order: what a listing filtered by
    /// the policy (`auth::Access`) is encoded from.
    listed: Vec<(Value, ToolRoute)>,
    /// Some tool was hidden by a name collision: which one depended on the table's history, so
    /// the table is not shared with another session (`Registry::share`).
    collided: bool,
}

impl ToolTable {
    /// The table of these providers' lists, in provider order. A name two providers list goes
    /// to the one `previous` routed it to, if it still lists it (a tool that appeared later,
    /// e.g. at a `list_changed`, never takes a name from the tool clients were calling), else
    /// to the first; the other's tool is hidden: neither listed nor callable, logged once per
    /// core and counted (`tidemark_tools_hidden_total{reason="collision"}`). Collisions of
    /// upstreams known at start-up stopped the start (`upstream::plan_prefixes`).
    fn build<'a>(
        lists: impl Iterator<Item = (&'a Rc<dyn Provider>, &'a [ToolInfo])>,
        previous: &ToolTable,
    ) -> ToolTable {
        let lists: Vec<(&Rc<dyn Provider>, &[ToolInfo])> = lists.collect();
        let mut owner: FastMap<&str, usize> = FastMap::default();
        let mut collided = false;
        for (index, (provider, tools)) in lists.iter().enumerate() {
            for tool in tools.iter() {
                let Some(&held) = owner.get(tool.name.as_str()) else {
                    owner.insert(tool.name.as_str(), index);
                    continue;
                };
                if held == index {
                    continue;
                }
                let routed_here = previous.by_name.get(&tool.name).is_some_and(|r| {
                    std::ptr::addr_eq(Rc::as_ptr(&r.provider), Rc::as_ptr(provider))
                });
                let hidden = if routed_here {
                    owner.insert(tool.name.as_str(), index);
                    lists[held].0
                } else {
                    *provider
                };
                let winner = lists[owner[tool.name.as_str()]].0;
                report_hidden(hidden.as_ref(), winner.as_ref(), &tool.name);
                collided = true;
            }
        }
        let mut table = ToolTable { collided, ..ToolTable::default() };
        let mut items: Vec<Value> = Vec::new();
        for (index, (provider, tools)) in lists.iter().enumerate() {
            for tool in tools.iter() {
                let ours = owner.get(tool.name.as_str()) == Some(&index);
                if !ours || table.by_name.contains_key(&tool.name) {
                    continue;
                }
                let route = ToolRoute {
                    name: Rc::from(tool.name.as_str()),
                    provider: (*provider).clone(),
                    safe_to_repeat: tool.annotations.safe_to_repeat(),
                    read_only: tool.annotations.read_only == Some(true),
                    header_params: param_headers::declared(&tool.input_schema)
                        .unwrap_or_default()
                        .into(),
                };
                let json = tool.to_json();
                table.by_name.insert(tool.name.clone(), route.clone());
                items.push(json.clone());
                table.listed.push((json, route));
            }
        }
        table.list_json = serde_json::to_vec(&serde_json::json!({ "tools": items }))
            .unwrap_or_else(|_| b"{\"tools\":[]}".to_vec());
        table
    }
}

/// A tool of `hidden` left out because `winner` offers the same name: logged once per core
/// and counted (built-in sets among themselves too: `--tools demo,conformance` both offer
/// `greet`, and the first set's is kept).
fn report_hidden(hidden: &dyn Provider, winner: &dyn Provider, name: &str) {
    let key = format!("collision\0{}\0{name}", hidden.name());
    if !crate::logging::first_report(&key) {
        return;
    }
    if let Some(metrics) = crate::metrics::this_core() {
        metrics.tools_hidden_collision.inc();
    }
    crate::logging::limited!(
        crate::logging::Kind::Upstream,
        tracing::Level::WARN,
        tool = %name,
        provider = hidden.name(),
        kept = winner.name(),
        "tool hidden: another provider already offers this name (see --upstream-prefix)"
    );
}

/// A session's own tool table, and the core listing it was built with (the providers that
/// have no list of the session's contribute the core's).
struct SessionTools {
    table: Rc<ToolTable>,
    core_listing: u64,
}

/// All providers of one core.
pub(crate) struct Registry {
    /// In order; replaced whole by an upstream reload (`replace`), so a method iterates the
    /// list it began with (`providers()`) across its awaits.
    providers: RefCell<Rc<[Rc<dyn Provider>]>>,
    /// Each open session's start (the core's stateless one's too, once opened): what a provider
    /// a reload adds is opened with for the sessions already running. Removed when the session
    /// closes; bounded by the sessions a core may hold. Compact (`HeldStart`): an idle
    /// session's whole cost is a few hundred bytes (tests/idle_session.rs's budget).
    starts: RefCell<FastMap<SessionRef, HeldStart>>,
    /// The newest distinct client hello, which the next session's is compared with: sessions
    /// of one client application share one copy of their `initialize` params. Weak: it goes
    /// (and a caller's `Authorization` value with it) with the last session holding it.
    last_hello: RefCell<Weak<ClientHello>>,
    /// Sessions a reload has not caught up yet (`replace` … `caught_up`): their tables stay as
    /// they were (the old providers still serve) until the added providers opened for them.
    catching_up: RefCell<Vec<SessionRef>>,
    /// Providers a reload removed that still finish their calls (`runtime::reload`); `stop`
    /// stops them too, so none outlives the core.
    retiring: RefCell<Vec<Rc<dyn Provider>>>,
    changes: Changes,
    /// The core's table: every session's whose providers list nothing of their own (built-in
    /// tools, shared upstreams) and the 2026-07-28 requests'. Shared by `Rc`, never copied.
    tools: RefCell<Rc<ToolTable>>,
    /// Each provider's tools as the core last listed them (index: `providers`), for the
    /// session tables.
    core_lists: RefCell<Rc<[Rc<[ToolInfo]>]>>,
    /// The provider list `core_lists` is of (after a reload it may not be the current one).
    core_lists_of: RefCell<Rc<[Rc<dyn Provider>]>>,
    /// The tables of sessions that have their own (per-session upstreams); a session without
    /// an entry reads the core's. Removed when the session closes.
    session_tools: RefCell<FastMap<SessionRef, SessionTools>>,
    /// Session tables by a hash of their `tools/list` JSON: sessions listed equal tools by the
    /// same providers share one table (an upstream's 12 MB listing is held once per core, not
    /// once per session: CONTRACT §11). Dropped with the last session holding it.
    shared_tables: RefCell<FastMap<u64, Vec<Weak<ToolTable>>>>,
    /// Bumped when a re-listing starts: a slower, older listing must not overwrite a newer one.
    listing: std::cell::Cell<u64>,
    /// The listing the core's table is from (session tables built on an older one are rebuilt).
    core_listing: std::cell::Cell<u64>,
    /// Grows when a reload adds a provider with resources or prompts (never shrinks: a
    /// session that was promised a feature keeps getting answers for it).
    capabilities: RefCell<Rc<Value>>,
    /// Whether every provider has opened `SessionRef::STATELESS` (the 2026-07-28 requests of
    /// this core), and a wake-up for requests waiting while it opens.
    stateless: std::cell::Cell<StatelessOpen>,
    stateless_opened: crate::signal::Signal,
    /// `Some` while the last attempt to open `SessionRef::STATELESS` failed: the refusal (a
    /// bridge's names its upstream), the answer to a 2026-07-28 call of a tool no provider
    /// lists (that provider could not list its tools), instead of "unknown tool".
    stateless_failure: RefCell<Option<ProviderError>>,
    /// `--resource-uri-bytes-max`: a longer resource URI is refused before any provider.
    uri_bytes_max: usize,
}

/// Distinct listings in `Registry::shared_tables` past which the ones no session holds are
/// forgotten (at the next insertion): bounds the map by the tables alive, not ever made.
const SHARED_TABLES_SWEEP: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatelessOpen {
    Closed,
    Opening,
    Open,
}

impl Registry {
    /// Attaches and lists every provider (in order: on a duplicate tool name the first wins;
    /// later, the tool already routed keeps its name: `ToolTable::build`).
    pub(crate) async fn build(providers: Vec<Rc<dyn Provider>>) -> Registry {
        let changes = Changes::default();
        for provider in &providers {
            provider.attach(changes.clone());
        }
        let (has_resources, has_prompts) = features(&providers).await;
        let registry = Registry {
            capabilities: RefCell::new(Rc::new(capabilities(has_resources, has_prompts))),
            providers: RefCell::new(providers.into()),
            starts: RefCell::new(FastMap::default()),
            last_hello: RefCell::new(Weak::new()),
            retiring: RefCell::new(Vec::new()),
            catching_up: RefCell::new(Vec::new()),
            changes,
            tools: RefCell::new(Rc::new(ToolTable::default())),
            core_lists: RefCell::new(Rc::from(Vec::new())),
            core_lists_of: RefCell::new(Rc::from(Vec::new())),
            session_tools: RefCell::new(FastMap::default()),
            shared_tables: RefCell::new(FastMap::default()),
            listing: std::cell::Cell::new(0),
            core_listing: std::cell::Cell::new(0),
            stateless: std::cell::Cell::new(StatelessOpen::Closed),
            stateless_opened: Default::default(),
            stateless_failure: RefCell::new(None),
            uri_bytes_max: crate::config::RESOURCE_URI_BYTES_MAX,
        };
        registry.relist_tools().await;
        registry
    }

    /// The registry with `--resource-uri-bytes-max` set to `max`.
    pub(crate) fn with_uri_bytes_max(mut self, max: usize) -> Registry {
        self.uri_bytes_max = max;
        self
    }

    /// Lists the providers' tools again if one said they changed: the core's, and `session`'s
    /// own (when it has one and it changed, or was built on an older core listing).
    pub(crate) async fn refresh_if_stale(&self, session: SessionRef) {
        if self.changes.take_tools_stale() {
            self.relist_tools().await;
        }
        if session == SessionRef::STATELESS || session == SessionRef::NONE {
            return;
        }
        if self.catching_up.borrow().contains(&session) {
            return;
        }
        let outdated = self
            .session_tools
            .borrow()
            .get(&session)
            .is_some_and(|own| own.core_listing != self.core_listing.get());
        if self.changes.take_session_stale(session) || outdated {
            self.relist_session(session).await;
        }
    }

    async fn relist_tools(&self) {
        let listing = self.listing.get() + 1;
        self.listing.set(listing);
        let providers = self.providers();
        let mut lists: Vec<Rc<[ToolInfo]>> = Vec::with_capacity(providers.len());
        for provider in providers.iter() {
            let tools = match provider.list_tools().await {
                Ok(tools) => tools,
                Err(e) => {
                    tracing::warn!(provider = provider.name(), error = %e, "tools/list failed");
                    Vec::new()
                }
            };
            lists.push(tools.into());
        }
        let previous = self.tools.borrow().clone();
        let table = ToolTable::build(providers.iter().zip(lists.iter().map(|l| &l[..])), &previous);
        if self.listing.get() == listing {
            *self.tools.borrow_mut() = Rc::new(table);
            *self.core_lists.borrow_mut() = lists.into();
            *self.core_lists_of.borrow_mut() = providers;
            self.core_listing.set(listing);
        }
    }

    /// Builds `session`'s own table, or drops it when no provider has a list of the session's
    /// (the session then reads the core's table).
    async fn relist_session(&self, session: SessionRef) {
        let core_listing = self.core_listing.get();
        let core_lists = self.core_lists.borrow().clone();
        let providers = self.providers();
        // The core's lists are by position: after a reload they may be of another provider set
        // (the core's listing then is older than this one, and the session's table is built
        // again once the core listed anew).
        let same_set = Rc::ptr_eq(&self.core_lists_of.borrow(), &providers);
        let mut own_any = false;
        let mut lists: Vec<Rc<[ToolInfo]>> = Vec::with_capacity(providers.len());
        for (index, provider) in providers.iter().enumerate() {
            let core = || {
                (core_lists.get(index).filter(|_| same_set).cloned())
                    .unwrap_or_else(|| Rc::from(Vec::new()))
            };
            match provider.list_session_tools(session).await {
                Ok(Some(tools)) => {
                    own_any = true;
                    lists.push(tools.into());
                }
                Ok(None) => lists.push(core()),
                Err(e) => {
                    tracing::warn!(provider = provider.name(), error = %e, "session tools/list failed");
                    own_any = true;
                    lists.push(Rc::from(Vec::new()));
                }
            }
        }
        if !own_any {
            self.session_tools.borrow_mut().remove(&session);
            return;
        }
        // A session's first table has no history: the first provider wins a shared name.
        let previous: Rc<ToolTable> = (self.session_tools.borrow().get(&session))
            .map(|own| own.table.clone())
            .unwrap_or_default();
        let table = ToolTable::build(providers.iter().zip(lists.iter().map(|l| &l[..])), &previous);
        drop(lists);
        let own = SessionTools { table: self.share(table), core_listing };
        self.session_tools.borrow_mut().insert(session, own);
    }

    /// `table`, or an equal one another session holds: the same listing JSON routed to the same
    /// providers, built without a collision. The new table is built first and dropped when one
    /// is found: the peak is one table more, what stays is one per distinct listing.
    fn share(&self, table: ToolTable) -> Rc<ToolTable> {
        if table.collided {
            return Rc::new(table);
        }
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hasher::write(&mut hasher, &table.list_json);
        let hash = std::hash::Hasher::finish(&hasher);
        let mut shared = self.shared_tables.borrow_mut();
        // Forget the tables no session holds any more, a sweep amortised over the insertions.
        if shared.len() >= SHARED_TABLES_SWEEP {
            shared.retain(|_, same| same.iter().any(|w| w.strong_count() > 0));
        }
        let same = shared.entry(hash).or_default();
        same.retain(|w| w.strong_count() > 0);
        let routed_alike = |held: &ToolTable| {
            held.list_json == table.list_json
                && held.listed.len() == table.listed.len()
                && held.listed.iter().zip(&table.listed).all(|((_, a), (_, b))| {
                    std::ptr::addr_eq(Rc::as_ptr(&a.provider), Rc::as_ptr(&b.provider))
                })
        };
        if let Some(held) = same.iter().filter_map(Weak::upgrade).find(|t| routed_alike(t)) {
            return held;
        }
        let table = Rc::new(table);
        same.push(Rc::downgrade(&table));
        table
    }

    /// The table `session` is listed from and calls by.
    fn table(&self, session: SessionRef) -> Rc<ToolTable> {
        let own = self.session_tools.borrow();
        match own.get(&session) {
            Some(own) => own.table.clone(),
            None => self.tools.borrow().clone(),
        }
    }

    /// The route of tool `name` for `session`'s `tools/call`; `None` when no provider lists
    /// it to that session.
    pub(crate) fn tool(&self, session: SessionRef, name: &str) -> Option<ToolRoute> {
        let own = self.session_tools.borrow();
        match own.get(&session) {
            Some(own) => own.table.by_name.get(name).cloned(),
            None => self.tools.borrow().by_name.get(name).cloned(),
        }
    }

    /// `ServerCapabilities` for the `initialize` result.
    pub(crate) fn capabilities(&self) -> Rc<Value> {
        self.capabilities.borrow().clone()
    }

    /// The providers, in order, as they are now (a reload replaces the list, never edits it).
    fn providers(&self) -> Rc<[Rc<dyn Provider>]> {
        self.providers.borrow().clone()
    }

    /// Tells every provider that a session starts, in order, and gathers what they add to
    /// its `initialize` result. On the first refusal the providers already opened are closed
    /// again and the refusal is returned. A reload that replaced the providers meanwhile is
    /// caught up with: the session is opened on the providers it added (their infos are not
    /// in the result) and closed on those it removed.
    pub(crate) async fn open_session(
        &self,
        start: &SessionStart,
    ) -> Result<Vec<SessionInfo>, ProviderError> {
        let mut opened_on = self.providers();
        let mut infos = Vec::with_capacity(opened_on.len());
        for (opened, provider) in opened_on.iter().enumerate() {
            match provider.open_session(start).await {
                Ok(info) => infos.push(info),
                Err(e) => {
                    for earlier in &opened_on[..opened] {
                        earlier.close_session(start.session);
                    }
                    return Err(e);
                }
            }
        }
        // `replace` puts a new list in place: one that is not the list opened on is a reload's.
        while !Rc::ptr_eq(&self.providers.borrow(), &opened_on) {
            let now = self.providers();
            for gone in opened_on.iter().filter(|p| !holds(&now, p)) {
                gone.close_session(start.session);
            }
            for added in now.iter().filter(|p| !holds(&opened_on, p)) {
                if let Err(e) = added.open_session(start).await {
                    tracing::warn!(provider = added.name(), error = %e, "a reloaded provider could not open a starting session");
                }
            }
            opened_on = now;
        }
        self.hold_start(start);
        // A provider may have re-listed its tools while opening (a bridge's first upstream),
        // and a per-session upstream lists this session's own.
        if self.changes.take_tools_stale() {
            self.relist_tools().await;
        }
        if start.session != SessionRef::STATELESS && start.session != SessionRef::NONE {
            self.changes.take_session_stale(start.session);
            self.relist_session(start.session).await;
        }
        Ok(infos)
    }

    /// Replaces the providers with `next` (an upstream reload: `runtime::reload`). Those `next`
    /// adds are attached; those it drops are returned, still serving the calls they run (the
    /// caller stops them once those finished) but no longer listed or routed to once the
    /// tables are rebuilt. Returns with the starts of the open sessions, which the caller
    /// opens the added providers for (`open_added`).
    pub(crate) fn replace(&self, next: Vec<Rc<dyn Provider>>) -> Replaced {
        let old = self.providers();
        let added: Vec<Rc<dyn Provider>> =
            next.iter().filter(|p| !holds(&old, p)).cloned().collect();
        let removed: Vec<Rc<dyn Provider>> =
            old.iter().filter(|p| !holds(&next, p)).cloned().collect();
        for provider in &added {
            provider.attach(self.changes.clone());
        }
        *self.providers.borrow_mut() = next.into();
        self.retiring.borrow_mut().extend(removed.iter().cloned());
        let starts: Vec<SessionStart> =
            self.starts.borrow().iter().map(|(session, held)| held.start(*session)).collect();
        *self.catching_up.borrow_mut() = starts.iter().map(|start| start.session).collect();
        Replaced { added, removed, starts }
    }

    /// After `replace` and every `open_added`: the core's tools listed again, with the
    /// capabilities grown by what the added providers offer, and the 2026-07-28 list
    /// subscriptions told.
    pub(crate) async fn relist_after_replace(&self, added: &[Rc<dyn Provider>]) {
        let (has_resources, has_prompts) = features(added).await;
        if has_resources || has_prompts {
            let was = self.capabilities();
            let had = |key: &str| was.get(key).is_some();
            let grown =
                capabilities(has_resources || had("resources"), has_prompts || had("prompts"));
            *self.capabilities.borrow_mut() = Rc::new(grown);
        }
        self.changes.take_tools_stale();
        self.relist_tools().await;
        self.changes.all_lists_relisted();
    }

    /// After `replace`: `start`'s session opened on the `added` providers (a refusal is
    /// logged; the session goes on without that provider).
    pub(crate) async fn open_added(&self, start: &SessionStart, added: &[Rc<dyn Provider>]) {
        let session = start.session;
        for provider in added {
            if let Err(e) = provider.open_session(start).await {
                tracing::warn!(provider = provider.name(), error = %e, "a reloaded provider could not open a running session; it goes on without it");
            }
            // The session ended while the provider opened it: what it opened is closed again.
            if !self.starts.borrow().contains_key(&session) {
                provider.close_session(session);
            }
        }
    }

    /// After `relist_after_replace`: `start`'s session's table rebuilt over the new providers
    /// and its client told `notifications/tools/list_changed` (and prompts/resources, when
    /// declared), once.
    pub(crate) async fn caught_up(&self, start: &SessionStart) {
        let session = start.session;
        self.catching_up.borrow_mut().retain(|s| *s != session);
        if !self.starts.borrow().contains_key(&session) {
            return;
        }
        if session != SessionRef::STATELESS && session != SessionRef::NONE {
            self.changes.take_session_stale(session);
            self.relist_session(session).await;
        }
        start.notifier.notify("notifications/tools/list_changed", Value::Null);
        let capabilities = self.capabilities();
        if capabilities.get("prompts").is_some() {
            start.notifier.notify("notifications/prompts/list_changed", Value::Null);
        }
        if capabilities.get("resources").is_some() {
            start.notifier.notify("notifications/resources/list_changed", Value::Null);
        }
    }

    /// A provider `replace` removed has finished (or was given up on): it leaves the list
    /// that `stop` stops.
    pub(crate) fn retired(&self, provider: &Rc<dyn Provider>) {
        self.retiring
            .borrow_mut()
            .retain(|p| !std::ptr::addr_eq(Rc::as_ptr(p), Rc::as_ptr(provider)));
    }

    /// Opens `SessionRef::STATELESS` on every provider, once per core, before the core's first
    /// 2026-07-28 request that reaches them (a bridge connects its core's upstream link and
    /// lists its tools). A failure is logged and tried again at the next request; the request
    /// goes on with what the providers have (a call of a tool none lists gets the failure).
    pub(crate) async fn open_stateless(&self) {
        loop {
            match self.stateless.get() {
                StatelessOpen::Open => return,
                StatelessOpen::Opening => self.stateless_opened.notified().await,
                StatelessOpen::Closed => break,
            }
        }
        self.stateless.set(StatelessOpen::Opening);
        let start = SessionStart {
            session: SessionRef::STATELESS,
            protocol_version: wire::LEGACY_VERSIONS[0],
            client_params: serde_json::json!({
                "capabilities": { "sampling": {}, "elicitation": {}, "roots": {} },
                "clientInfo": { "name": "tidemark", "version": env!("CARGO_PKG_VERSION") },
            }),
            notifier: crate::provider::Notifier::detached(),
            caller: None,
        };
        // Every provider is opened even when one fails: the others' tools are served (a
        // request needing the failed one gets its refusal), and the open is tried again.
        let mut failure = None;
        for provider in self.providers().iter() {
            if let Err(e) = provider.open_session(&start).await {
                tracing::warn!(provider = provider.name(), error = %e, "a provider could not open the stateless (2026-07-28) session");
                failure.get_or_insert(e);
            }
        }
        self.hold_start(&start);
        if self.changes.take_tools_stale() {
            self.relist_tools().await;
        }
        let state = if failure.is_none() { StatelessOpen::Open } else { StatelessOpen::Closed };
        *self.stateless_failure.borrow_mut() = failure;
        self.stateless.set(state);
        self.stateless_opened.notify_all();
    }

    /// Why the last attempt to open `SessionRef::STATELESS` failed, if it did.
    pub(crate) fn stateless_failure(&self) -> Option<ProviderError> {
        self.stateless_failure.borrow().clone()
    }

    /// Tells every provider that the core stops (those still retiring too).
    pub(crate) fn stop(&self) {
        for provider in self.providers().iter() {
            provider.stop();
        }
        let retiring = std::mem::take(&mut *self.retiring.borrow_mut());
        for provider in retiring {
            provider.stop();
        }
    }

    /// Tells every provider that a session ended.
    pub(crate) fn close_session(&self, session: SessionRef) {
        self.session_tools.borrow_mut().remove(&session);
        self.starts.borrow_mut().remove(&session);
        self.catching_up.borrow_mut().retain(|s| *s != session);
        self.changes.take_session_stale(session);
        for provider in self.providers().iter() {
            provider.close_session(session);
        }
    }

    /// Answers a request that needs no stream (every method but `tools/call`, `initialize` and
    /// `logging/setLevel`, which belong to the protocol path): one whole JSON-RPC response into
    /// `out`.
    pub(crate) async fn answer(
        &self,
        session: SessionRef,
        access: Option<Access<'_>>,
        id: &RawId,
        method: &str,
        params: &WireValue<'_>,
        out: &mut Vec<u8>,
    ) {
        let result = match method {
            "ping" => Ok(serde_json::json!({})),
            "resources/subscribe" | "resources/unsubscribe" => {
                match resource_uri(method, params, self.uri_bytes_max) {
                    Ok(uri) => {
                        let on = method == "resources/subscribe";
                        self.subscribe(session, uri, on).await.map(|()| serde_json::json!({}))
                    }
                    Err(e) => Err(e),
                }
            }
            "tools/list" => {
                self.refresh_if_stale(session).await;
                let table = self.table(session);
                match access {
                    None => jsonrpc::push_result(out, id, &table.list_json),
                    Some(access) => wire::push_result_value(out, id, &tools_for(&table, access)),
                }
                return;
            }
            "resources/list" => {
                let listed = self.gather("resources", |p| p.list_resources(session)).await;
                listed.map(|list| only_allowed(list, "resources", "uri", Kind::Resource, access))
            }
            "resources/templates/list" => {
                let key = "resourceTemplates";
                let listed = self.gather(key, |p| p.list_resource_templates(session)).await;
                listed.map(|list| only_allowed(list, key, "uriTemplate", Kind::Resource, access))
            }
            "resources/read" => match resource_uri(method, params, self.uri_bytes_max) {
                Ok(uri) => self.read_resource(session, uri).await,
                Err(e) => Err(e),
            },
            "prompts/list" => {
                let listed = self.gather("prompts", |p| p.list_prompts(session)).await;
                listed.map(|list| only_allowed(list, "prompts", "name", Kind::Prompt, access))
            }
            "prompts/get" => match params.get("name").and_then(ValueIntoString::into_string) {
                Some(name) => {
                    let arguments = params.get("arguments").map(into_public).unwrap_or(Value::Null);
                    self.get_prompt(session, name, arguments).await
                }
                None => Err(ProviderError::InvalidParams("prompts/get needs a string name".into())),
            },
            "completion/complete" => Ok(self.complete(session, params).await),
            _ => {
                wire::push_error_response(
                    out,
                    Some(id),
                    wire::Code::MethodNotFound,
                    "method not found",
                    None,
                );
                return;
            }
        };
        match result {
            Ok(v) => wire::push_result_value(out, id, &v),
            Err(e) => push_provider_error(out, id, &e),
        }
    }

    /// `{"<key>": [...]}` from every provider's list, in provider order. A provider whose list
    /// fails is left out (logged), as in `tools/list`: one broken provider must not hide the
    /// others' items.
    async fn gather<F>(&self, key: &str, list: F) -> Result<Value, ProviderError>
    where
        F: for<'p> Fn(
            &'p dyn Provider,
        ) -> crate::provider::LocalBoxFuture<
            'p,
            crate::provider::ProviderResult<Vec<Value>>,
        >,
    {
        let mut items = Vec::new();
        for provider in self.providers().iter() {
            match list(provider.as_ref()).await {
                Ok(listed) => items.extend(listed),
                Err(e) => {
                    tracing::warn!(provider = provider.name(), error = %e, "{key} list failed")
                }
            }
        }
        let mut object = serde_json::Map::new();
        object.insert(key.to_owned(), Value::Array(items));
        Ok(Value::Object(object))
    }

    /// Passes a subscription change to the first provider that owns `uri`. One that no
    /// provider takes is accepted when a provider lists it (one keeping no subscriptions, as
    /// the built-in catalogs: tidemark sends no updates for it), and is otherwise refused as a
    /// read of it would be (a URI that is unknown, or that a filter hides, is not found).
    async fn subscribe(
        &self,
        session: SessionRef,
        uri: &str,
        on: bool,
    ) -> Result<(), ProviderError> {
        for provider in self.providers().iter() {
            if provider.subscribe_resource(session, uri, on).await? {
                return Ok(());
            }
        }
        let canonical = crate::uri::canonical(uri).ok();
        for provider in self.providers().iter() {
            let listed = provider.list_resources(session).await.unwrap_or_default();
            let same = |item: &Value| {
                let listed = item.get("uri").and_then(Value::as_str).unwrap_or("");
                listed == uri
                    || canonical.as_deref() == crate::uri::canonical(listed).ok().as_deref()
            };
            if listed.iter().any(same) {
                return Ok(());
            }
        }
        Err(resource_not_found(uri))
    }

    /// The `resources/read` result from the first provider that knows `uri`.
    async fn read_resource(&self, session: SessionRef, uri: &str) -> Result<Value, ProviderError> {
        for provider in self.providers().iter() {
            if let Some(found) = provider.read_resource(session, uri).await? {
                return Ok(found);
            }
        }
        Err(resource_not_found(uri))
    }

    /// The `prompts/get` result from the first provider that has a prompt called `name`.
    async fn get_prompt(
        &self,
        session: SessionRef,
        name: &str,
        arguments: Value,
    ) -> Result<Value, ProviderError> {
        for provider in self.providers().iter() {
            if let Some(found) = provider.get_prompt(session, name, arguments.clone()).await? {
                return Ok(found);
            }
        }
        Err(ProviderError::NotFound(name.to_owned()))
    }

    /// `prompts/get` with a call context (2026-07-28: the prompt may ask for input), from the
    /// first provider that has a prompt called `name`.
    pub(crate) async fn get_prompt_with_context(
        &self,
        name: &str,
        arguments: Value,
        cx: crate::provider::CallContext,
    ) -> Result<Value, ProviderError> {
        for provider in self.providers().iter() {
            let session = SessionRef::STATELESS;
            let found =
                provider.get_prompt_with_context(session, name, arguments.clone(), cx.clone());
            if let Some(found) = found.await? {
                return Ok(found);
            }
        }
        Err(ProviderError::NotFound(name.to_owned()))
    }

    /// The `completion/complete` result for the request's params (`{ref, argument, ...}`).
    /// Anything no provider recognises, malformed params and provider errors included,
    /// completes to nothing: the method has no error of its own that a client could act on.
    async fn complete(&self, session: SessionRef, params: &WireValue<'_>) -> Value {
        let reference = params.get("ref").map(into_public).unwrap_or(Value::Null);
        let argument = params.get("argument").map(into_public).unwrap_or(Value::Null);
        let mut values = Vec::new();
        for provider in self.providers().iter() {
            if let Ok(Some(found)) = provider.complete(session, &reference, &argument).await {
                values = found;
                break;
            }
        }
        completion(values)
    }
}

impl Registry {
    /// Keeps `start` until its session closes, in the compact form: who opened it and what
    /// the client said (its params as JSON text), shared with the previous session's when
    /// they are the same (one client application opening many sessions, with one token or
    /// none, holds one copy).
    fn hold_start(&self, start: &SessionStart) {
        let params = serde_json::to_string(&start.client_params).unwrap_or_default();
        let mut last = self.last_hello.borrow_mut();
        let hello = match last.upgrade() {
            Some(hello) if hello.is(start, &params) => hello,
            _ => {
                let hello = Rc::new(ClientHello {
                    protocol_version: start.protocol_version,
                    params_json: params.into_boxed_str(),
                    caller: start.caller.clone(),
                });
                *last = Rc::downgrade(&hello);
                hello
            }
        };
        let held = HeldStart { notifier: start.notifier.clone(), hello };
        self.starts.borrow_mut().insert(start.session, held);
    }
}

/// A session's `SessionStart` as the registry holds it while the session is open (read back
/// only by a reload): 24 bytes in the map and a shared hello, where the `SessionStart` with
/// its params tree was about 1.5 KB a session.
struct HeldStart {
    notifier: crate::provider::Notifier,
    hello: Rc<ClientHello>,
}

/// Who opened a session and what its client said in `initialize`: the negotiated revision,
/// its params as JSON text.
struct ClientHello {
    protocol_version: &'static str,
    params_json: Box<str>,
    caller: Option<crate::provider::Caller>,
}

impl ClientHello {
    /// The same revision, params text and caller (subject and `Authorization` value) as
    /// `start`'s, whose params are `params_json`.
    fn is(&self, start: &SessionStart, params_json: &str) -> bool {
        let same_caller = match (&self.caller, &start.caller) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.subject() == b.subject() && a.authorization() == b.authorization()
            }
            _ => false,
        };
        self.protocol_version == start.protocol_version
            && *self.params_json == *params_json
            && same_caller
    }
}

impl HeldStart {
    /// The `SessionStart` of `session` again (its params parsed back from their text).
    fn start(&self, session: SessionRef) -> SessionStart {
        SessionStart {
            session,
            protocol_version: self.hello.protocol_version,
            client_params: serde_json::from_str(&self.hello.params_json).unwrap_or(Value::Null),
            notifier: self.notifier.clone(),
            caller: self.hello.caller.clone(),
        }
    }
}

/// What `Registry::replace` changed: the providers it added and removed, and the starts of the
/// sessions open at that moment.
pub(crate) struct Replaced {
    pub(crate) added: Vec<Rc<dyn Provider>>,
    pub(crate) removed: Vec<Rc<dyn Provider>>,
    pub(crate) starts: Vec<SessionStart>,
}

/// SEP-2164's answer to a resource no provider serves: -32602 with the uri in `data`, never
/// an empty `contents`.
fn resource_not_found(uri: &str) -> ProviderError {
    ProviderError::Rpc {
        code: crate::wire::Code::InvalidParams.value(),
        message: format!("Resource not found: {uri}"),
        data: Some(serde_json::json!({ "uri": uri })),
    }
}

/// The `uri` of a `resources/read`, `subscribe` or `unsubscribe`, refused `-32602` when it is
/// missing or has no canonical form (`uri::canonical`): such a request reaches no provider.
fn resource_uri<'p>(
    method: &str,
    params: &'p WireValue<'p>,
    max: usize,
) -> Result<&'p str, ProviderError> {
    let Some(uri) = params.get("uri").and_then(ValueIntoString::into_string) else {
        return Err(ProviderError::InvalidParams(format!("{method} needs a string uri")));
    };
    match crate::uri::canonical_bounded(uri, max) {
        Ok(_) => Ok(uri),
        Err(why) => Err(ProviderError::InvalidParams(crate::uri::refusal(uri, why))),
    }
}

/// Whether `list` holds `provider` (the same instance).
fn holds(list: &[Rc<dyn Provider>], provider: &Rc<dyn Provider>) -> bool {
    list.iter().any(|p| std::ptr::addr_eq(Rc::as_ptr(p), Rc::as_ptr(provider)))
}

/// Whether any of `providers` has resources (or templates), and whether any has prompts: the
/// features `capabilities` declares.
async fn features(providers: &[Rc<dyn Provider>]) -> (bool, bool) {
    let (mut has_resources, mut has_prompts) = (false, false);
    for provider in providers {
        let none = SessionRef::NONE;
        let resources = provider.list_resources(none).await.unwrap_or_default();
        let templates = provider.list_resource_templates(none).await.unwrap_or_default();
        has_resources |= !resources.is_empty() || !templates.is_empty();
        has_prompts |= !provider.list_prompts(none).await.unwrap_or_default().is_empty();
    }
    (has_resources, has_prompts)
}

/// The `tools/list` result of `table` with only the tools `access` allows (the decision a
/// call is refused by, so a subject is never listed a tool it may not call).
fn tools_for(table: &ToolTable, access: Access<'_>) -> Value {
    let tools: Vec<Value> = table
        .listed
        .iter()
        .filter(|(_, route)| access.allows(route.item()))
        .map(|(json, _)| json.clone())
        .collect();
    serde_json::json!({ "tools": tools })
}

/// A prompts or resources listing with only the items `access` allows (by their `field`:
/// name, uri or uriTemplate; the policy's name rules, as `core::forbidden` applies to
/// `prompts/get` and `resources/read`: a uri in canonical form, and one without is left out).
fn only_allowed(
    mut list: Value,
    key: &str,
    field: &str,
    kind: Kind,
    access: Option<Access<'_>>,
) -> Value {
    let Some(access) = access else { return list };
    if let Some(Value::Array(items)) = list.get_mut(key) {
        items.retain(|item| {
            let name = item.get(field).and_then(Value::as_str).unwrap_or("");
            let canonical = match field {
                "uri" => crate::uri::canonical(name).ok().map(std::borrow::Cow::Owned),
                _ => Some(std::borrow::Cow::Borrowed(name)),
            };
            canonical.is_some_and(|name| {
                access.allows(Item { kind, name: &name, provider: "", read_only: true })
            })
        });
    }
    list
}

impl ToolRoute {
    /// The tool as the policy sees it.
    pub(crate) fn item(&self) -> Item<'_> {
        Item {
            kind: Kind::Tool,
            name: &self.name,
            provider: self.provider.name(),
            read_only: self.read_only,
        }
    }
}

/// The `completion/complete` result: at most `COMPLETION_VALUES_MAX` values, the true total,
/// and whether more exist.
fn completion(mut values: Vec<String>) -> Value {
    let total = values.len();
    values.truncate(COMPLETION_VALUES_MAX);
    serde_json::json!({
        "completion": { "values": values, "total": total, "hasMore": total > COMPLETION_VALUES_MAX }
    })
}

/// `tools`, `logging` and `completions` are always declared (the methods always answer);
/// `resources` and `prompts` only when some provider has some, so a capability never
/// promises an empty feature.
fn capabilities(has_resources: bool, has_prompts: bool) -> Value {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("tools".into(), serde_json::json!({ "listChanged": true }));
    capabilities.insert("logging".into(), serde_json::json!({}));
    capabilities.insert("completions".into(), serde_json::json!({}));
    if has_resources {
        capabilities.insert(
            "resources".into(),
            serde_json::json!({ "subscribe": true, "listChanged": true }),
        );
    }
    if has_prompts {
        capabilities.insert("prompts".into(), serde_json::json!({ "listChanged": true }));
    }
    Value::Object(capabilities)
}

/// The provider API's value for a decoded request value (a copy: `wire::jsonrpc::to_serde`).
pub(crate) fn into_public(value: WireValue<'_>) -> Value {
    crate::wire::jsonrpc::to_serde(value)
}

/// Starts `tools/call` of `route` with the request's `arguments` (`None`: absent): borrowed in
/// place when the provider reads them so (the built-in sets), encoded as text for a bridge
/// (`call_bridge`), else copied into the `serde_json` value a user provider takes
/// (`into_public`).
pub(crate) fn call_tool(
    route: ToolRoute,
    arguments: Option<WireValue<'_>>,
    cx: CallContext,
) -> LocalBoxFuture<'static, ProviderResult<Value>> {
    if is_bridge(&route) {
        // The arguments as text here too; the result becomes the value this path takes.
        let work = call_bridge(route, arguments, cx);
        return Box::pin(async move { work.await.map(ToolAnswer::into_value) });
    }
    let ToolRoute { name, provider, .. } = route;
    let cx = match crate::provider::builtin::as_builtin(provider.as_ref()) {
        Some(builtin) => match builtin.call_in_place(&name, ToolArguments(arguments), cx) {
            Ok(work) => return work,
            Err(cx) => cx,
        },
        None => cx,
    };
    let arguments = arguments.map(into_public).unwrap_or(Value::Null);
    Box::pin(async move { provider.call_tool(&name, arguments, cx).await })
}

/// `call_tool` for a request path that writes the answer itself (`ToolAnswer::push_json`): a
/// bridge's tool result as the JSON text its upstream wrote (`ToolAnswer::Json`), no value
/// built, parsed, rendered and dropped per call; any other provider's as its value.
pub(crate) fn call_tool_answer(
    route: ToolRoute,
    arguments: Option<WireValue<'_>>,
    cx: CallContext,
) -> LocalBoxFuture<'static, ProviderResult<ToolAnswer<'static>>> {
    if !is_bridge(&route) {
        let work = call_tool(route, arguments, cx);
        return Box::pin(async move { work.await.map(ToolAnswer::Value) });
    }
    call_bridge(route, arguments, cx)
}

/// True when `route`'s provider is a bridge (`upstream::Bridge`), which the request paths
/// call past the provider API (`call_bridge`).
fn is_bridge(route: &ToolRoute) -> bool {
    route.provider.builtin().is_some_and(|p| p.is::<crate::upstream::Bridge>())
}

/// A bridged call with the client's arguments as JSON text, encoded while the request is
/// here: no value of them is built for an upstream that takes them as they are. Boxed here:
/// the future is built in its box, not moved into it (~370 instructions of `memcpy` a call).
fn call_bridge(
    route: ToolRoute,
    arguments: Option<WireValue<'_>>,
    cx: CallContext,
) -> LocalBoxFuture<'static, ProviderResult<ToolAnswer<'static>>> {
    let ToolRoute { name, provider, .. } = route;
    let arguments = arguments.filter(|a| !a.is_null()).map(|arguments| {
        let mut text = Vec::with_capacity(ARGUMENTS_BYTES_HINT);
        jsonrpc::push_value(&mut text, arguments);
        text
    });
    let arguments = crate::upstream::CallArguments::Text(arguments);
    Box::pin(async move {
        let bridge = provider.builtin().and_then(|p| p.downcast_ref::<crate::upstream::Bridge>());
        match bridge {
            Some(bridge) => bridge.call_tool_answer(&name, arguments, cx).await,
            // Not reached: `is_bridge` said it is one.
            None => Err(ProviderError::Internal("not a bridge".into())),
        }
    })
}

/// The capacity a bridged call's arguments text starts with: small arguments fit at once.
const ARGUMENTS_BYTES_HINT: usize = 128;

/// A provider's error as a JSON-RPC error response (MCP: unknown names are invalid params),
/// encoded by `wire`.
pub(crate) fn push_provider_error(out: &mut Vec<u8>, id: &RawId, e: &ProviderError) {
    let (code, message, data) = provider_error_parts(e);
    wire::push_error_value(out, id, code, message, data);
}

/// A provider's error as JSON-RPC `(code, message, data)`: the one mapping, for a response
/// (`push_provider_error`) and for a failed task's `error` object.
pub(crate) fn provider_error_parts(e: &ProviderError) -> (i64, &str, Option<&serde_json::Value>) {
    let (code, message) = match e {
        ProviderError::InvalidParams(m) => (Code::InvalidParams, m.as_str()),
        ProviderError::NotFound(m) => (Code::InvalidParams, m.as_str()),
        ProviderError::ClientError { message, .. } => (Code::InternalError, message.as_str()),
        ProviderError::Cancelled => (Code::InternalError, "cancelled"),
        ProviderError::Internal(m) => (Code::InternalError, m.as_str()),
        ProviderError::Unavailable(m) => (Code::InternalError, m.as_str()),
        ProviderError::Down { message, data, .. } => {
            return (Code::InternalError.value(), message, data.as_ref())
        }
        ProviderError::Rpc { code, message, data } => return (*code, message, data.as_ref()),
    };
    (code.value(), message, None)
}

#[cfg(test)]
mod tests;
