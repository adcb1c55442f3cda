//! The upstream section: the MCP servers tidemark fronts (`--upstream`), their per-upstream
//! `NAME=…` flags (filters, prefix, failure policy, era, forwarded authorization, token
//! exchange), and the
//! bridge's limits; defaults, validation and flags.
//!
//! Owns: `UpstreamConfig`, the bridge's limits, and their flags. Never: starts an upstream
//! (`upstream` does) or reads the credentials file.

use std::path::PathBuf;
use std::time::Duration;

use super::error::{at_most, nonzero, ConfigError};
use super::filter::{self, FilterError, UpstreamFilters};
use super::filter::{RESOURCE_URI_BYTES_MAX, UPSTREAM_FILTER_GLOBS_MAX};
use super::upstream_spec::UpstreamProtocol;
use super::upstream_spec::{Isolation, PrefixPolicy, UpstreamAuth, UpstreamPolicy};
use super::upstream_spec::{UpstreamSpec, UpstreamSpecError, UpstreamTarget};

/// Upstream child processes (`--upstream` over stdio) alive at once, all cores together
/// (`--upstream-max-processes`); `initialize` of a session that would need one more gets 503.
pub(crate) const UPSTREAM_PROCESSES_MAX: usize = 256;
/// Longest an upstream may take to answer one request (`--upstream-timeout-secs`); then the
/// call ends with -32603 and is cancelled upstream. For a tool call it is an idle timeout: it
/// runs from the upstream's last message for the call (progress, logs, requests), and time in
/// which tidemark held the upstream back for a slow client does not count.
pub(crate) const UPSTREAM_TIMEOUT_SECS: u64 = 300;
/// Longest one upstream tool call may run however busy its upstream keeps it
/// (`--upstream-call-max-secs`); then -32603 naming the flag, and the call is cancelled
/// upstream. One hour: twelve idle timeouts, far beyond an interactive call, yet an upstream
/// stuck in a progress loop cannot hold a call (its stream, its slot) for good. Long-running
/// work belongs in tasks, whose own retention bounds them.
pub(crate) const UPSTREAM_CALL_MAX_SECS: u64 = 3600;
/// Longest an upstream may take to start and answer `initialize` and its first `tools/list`
/// (`--upstream-start-timeout-secs`): a child's start (an interpreter loading its modules) may
/// take seconds on a busy host; then the session's `initialize` gets -32603.
pub(crate) const UPSTREAM_START_TIMEOUT_SECS: u64 = 60;
/// Longest line (one JSON-RPC message) read from an upstream child's stdout
/// (`--upstream-line-bytes`); a longer line is not taken: the call it answers ends at once
/// with -32603 naming the flag (or, when its start does not say whose answer it is, the link is
/// reset and its calls end so).
pub(crate) const UPSTREAM_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of upstream tool listings one core holds (`--upstream-catalog-bytes-per-core`), as
/// their JSON size; equal listings are held once, shared by every session listed them. A
/// session whose upstream's listing would take a core past it gets `initialize` 503 +
/// `Retry-After` naming the flag. 64 MiB: four listings of the 16 MiB `--upstream-line-bytes`
/// allows, or 64 distinct 1 MiB ones (a large server's 200 tools). Held in memory a listing
/// costs several times its JSON (its parsed tools in the bridge, the sessions' shared tool
/// table and its encoded `tools/list`): the first session behind a 12.5 MB listing grew RSS by
/// about 150 MiB, parse transients included (tests/upstream_catalogs.rs), so plan for up to
/// 10× the budget per core.
pub(crate) const UPSTREAM_CATALOG_BYTES_PER_CORE: usize = 64 * 1024 * 1024;
/// Bytes queued for one upstream child's stdin (`--upstream-queue-bytes`): a child that stops
/// reading makes further requests fail rather than grow the queue.
pub(crate) const UPSTREAM_QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// From SIGTERM to SIGKILL when an upstream child is stopped (`--upstream-kill-grace-ms`).
pub(crate) const UPSTREAM_KILL_GRACE_MS: u64 = 2000;
/// Consecutive failed calls of one upstream's tools on one core that open its circuit breaker
/// (`--upstream-breaker-failures`): then its calls fail fast with -32603 naming it, without
/// reaching it, for `--upstream-breaker-pause-ms`. 5: a few timeouts or crashes in a row say
/// the upstream is down, not unlucky; fewer would open on one bad argument's crash.
pub(crate) const UPSTREAM_BREAKER_FAILURES: u32 = 5;
/// Rounds of input one tool call of a 2026-07-28 upstream may ask for (`InputRequiredResult`
/// after `InputRequiredResult`, `--upstream-input-rounds-max`) before tidemark ends the call
/// with -32603: a real tool asks a handful of questions; an upstream that keeps asking is
/// looping, and each round holds the client.
pub(crate) const UPSTREAM_INPUT_ROUNDS_MAX: usize = 16;
/// How long an open breaker fails calls fast before one half-open probe call goes through
/// (`--upstream-breaker-pause-ms`); also how often an optional upstream that was down is tried
/// again, and the `Retry-After` (rounded up to whole seconds) of a 503 for a required one.
pub(crate) const UPSTREAM_BREAKER_PAUSE_MS: u64 = 5000;
/// Bytes of the `--upstream-credentials` file; larger is refused at start-up (the file holds a
/// few lines per upstream).
pub(crate) const UPSTREAM_CREDENTIALS_BYTES_MAX: usize = 64 * 1024;

/// How long before an exchanged token's expiry tidemark stops using it and exchanges anew
/// (`--upstream-exchange-margin-secs`): a call that takes the cached token just before the margin
/// still reaches the upstream while it is valid (a request's flight and the clocks' skew). 30 s:
/// far above a round trip, far below the minutes an access token lives. A token that lives no
/// longer than the margin is used for its one call and not cached.
pub(crate) const UPSTREAM_EXCHANGE_MARGIN_SECS: u64 = 30;
/// Exchanged tokens one core keeps (`--upstream-exchange-cache-entries`), one per (subject,
/// upstream): beyond it the expired go first, then the one that expires soonest (its subject's
/// next call exchanges again). An entry holds a token (an access token is some hundred bytes to a
/// few KiB, at most `--upstream-exchange-answer-bytes`): 4096 entries stay under a few MiB per core.
pub(crate) const UPSTREAM_EXCHANGE_CACHE_ENTRIES: usize = 4096;
/// Longest one exchange at the authorization server may take, connection included
/// (`--upstream-exchange-timeout-secs`); then the call gets -32603 naming the upstream.
pub(crate) const UPSTREAM_EXCHANGE_TIMEOUT_SECS: u64 = 10;
/// Bytes of the authorization server's answer to an exchange that are read
/// (`--upstream-exchange-answer-bytes`); a longer answer fails the exchange, the call gets
/// -32603 naming the flag. 64 KiB: an RFC 8693 answer is a token (some hundred bytes to a few
/// KiB) and four short fields; this bounds what one exchange makes the thread hold.
pub(crate) const UPSTREAM_EXCHANGE_ANSWER_BYTES: usize = 64 * 1024;
/// The most `--upstream-exchange-answer-bytes` takes: 1 MiB, sixteen times the default and
/// far beyond any token an upstream's `Authorization` header could carry.
pub(crate) const UPSTREAM_EXCHANGE_ANSWER_BYTES_MAX: usize = 1024 * 1024;
/// Exchanges waiting for the exchange thread, all cores together
/// (`--upstream-exchange-queue-entries`); beyond it a call's exchange fails at once with -32603
/// naming the flag (the authorization server is not keeping up). 1024: an exchange takes a round
/// trip (milliseconds), so 1024 waiting is seconds of backlog; a waiting job holds the caller's
/// token and a reply slot (about a KiB). Set when the exchange thread starts (a reload keeps it).
pub(crate) const UPSTREAM_EXCHANGE_QUEUE_ENTRIES: usize = 1024;
/// The most `--upstream-exchange-queue-entries` takes: 65536 waiting exchanges are minutes of
/// backlog at any authorization server's pace and tens of MiB of waiting tokens.
pub(crate) const UPSTREAM_EXCHANGE_QUEUE_ENTRIES_MAX: usize = 65536;

/// The upstream set and the bridge's bounds (`--upstream*`, `--resource-uri-bytes-max`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// MCP servers to front (`--upstream`), each served as a provider.
    pub specs: Vec<UpstreamSpec>,
    /// Extra environment of stdio upstream children (`--upstream-env KEY=VALUE`).
    pub env: Vec<(String, String)>,
    /// Whether upstream children are per client session or shared per core
    /// (`--upstream-isolation`).
    pub isolation: Isolation,
    /// Upstream children alive at once, all cores (`--upstream-max-processes`,
    /// `UPSTREAM_PROCESSES_MAX`); an `initialize` needing one more gets 503.
    pub processes_max: usize,
    /// Longest an upstream may take to answer one request (`--upstream-timeout-secs`,
    /// `UPSTREAM_TIMEOUT_SECS`); then -32603 and the call is cancelled upstream.
    pub timeout: Duration,
    /// Longest one upstream tool call may run, progress or not (`--upstream-call-max-secs`,
    /// `UPSTREAM_CALL_MAX_SECS`); then -32603 and the call is cancelled upstream.
    pub call_max: Duration,
    /// Longest an upstream may take to start and answer `initialize` and its first `tools/list`
    /// (`--upstream-start-timeout-secs`, `UPSTREAM_START_TIMEOUT_SECS`); then -32603.
    pub start_timeout: Duration,
    /// Longest line read from a stdio upstream's stdout (`--upstream-line-bytes`,
    /// `UPSTREAM_LINE_BYTES`); a longer answer fails its call at once (`upstream::line_head`).
    pub line_bytes: usize,
    /// Bytes (JSON) of distinct upstream tool listings one core holds
    /// (`--upstream-catalog-bytes-per-core`, `UPSTREAM_CATALOG_BYTES_PER_CORE`).
    pub catalog_bytes_per_core: usize,
    /// Bytes queued for one stdio upstream's stdin (`--upstream-queue-bytes`,
    /// `UPSTREAM_QUEUE_BYTES`); beyond it requests fail.
    pub queue_bytes: usize,
    /// From SIGTERM to SIGKILL when an upstream child is stopped (`--upstream-kill-grace-ms`,
    /// `UPSTREAM_KILL_GRACE_MS`).
    pub kill_grace: Duration,
    /// Per-upstream credentials, headers and environment (`--upstream-credentials FILE`); read
    /// when the bridge starts.
    pub credentials: Option<PathBuf>,
    /// Upstreams (by `NAME=`) that get the client's own `Authorization` header
    /// (`--upstream-forward-authorization`): only for an upstream that is this same resource.
    pub forward_authorization: Vec<String>,
    /// `--upstream-auth NAME=static|exchange` values (NAME an `--upstream`'s `NAME=` or `*`); an
    /// upstream none names is `static`.
    pub auth: Vec<String>,
    /// `--upstream-exchange-margin-secs` (`UPSTREAM_EXCHANGE_MARGIN_SECS`).
    pub exchange_margin: Duration,
    /// `--upstream-exchange-cache-entries` (`UPSTREAM_EXCHANGE_CACHE_ENTRIES`), per core.
    pub exchange_cache_entries: usize,
    /// `--upstream-exchange-timeout-secs` (`UPSTREAM_EXCHANGE_TIMEOUT_SECS`).
    pub exchange_timeout: Duration,
    /// `--upstream-exchange-answer-bytes` (`UPSTREAM_EXCHANGE_ANSWER_BYTES`).
    pub exchange_answer_bytes: usize,
    /// `--upstream-exchange-queue-entries` (`UPSTREAM_EXCHANGE_QUEUE_ENTRIES`), all cores.
    pub exchange_queue_entries: usize,
    /// `--upstream-allow-tools NAME=GLOB[,GLOB…]` values (see `NameFilter`).
    pub allow_tools: Vec<String>,
    /// `--upstream-deny-tools NAME=GLOB[,GLOB…]` values; deny wins over allow.
    pub deny_tools: Vec<String>,
    /// `--upstream-allow-prompts` values (prompt names).
    pub allow_prompts: Vec<String>,
    /// `--upstream-deny-prompts` values.
    pub deny_prompts: Vec<String>,
    /// `--upstream-allow-resources` values (resource URIs and URI templates).
    pub allow_resources: Vec<String>,
    /// `--upstream-deny-resources` values.
    pub deny_resources: Vec<String>,
    /// `--upstream-prefix NAME=always|on-collision|never` values (see `upstream_prefixes`).
    pub prefix: Vec<String>,
    /// `--upstream-filter-globs-max` (`UPSTREAM_FILTER_GLOBS_MAX`): globs per upstream, all
    /// kinds together.
    pub filter_globs_max: usize,
    /// `--resource-uri-bytes-max` (`RESOURCE_URI_BYTES_MAX`): the longest resource URI a
    /// request may name.
    pub resource_uri_bytes_max: usize,
    /// `--upstream-policy NAME=required|optional` values (NAME an `--upstream`'s `NAME=` or
    /// `*`); an upstream none names is `required`.
    pub policy: Vec<String>,
    /// `--upstream-protocol NAME=auto|legacy|modern` values (NAME an `--upstream`'s `NAME=` or
    /// `*`); an upstream none names is `auto`.
    pub protocol: Vec<String>,
    /// `--upstream-breaker-failures` (`UPSTREAM_BREAKER_FAILURES`).
    pub breaker_failures: u32,
    /// `--upstream-input-rounds-max` (`UPSTREAM_INPUT_ROUNDS_MAX`).
    pub input_rounds_max: usize,
    /// `--upstream-breaker-pause-ms` (`UPSTREAM_BREAKER_PAUSE_MS`).
    pub breaker_pause: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            specs: Vec::new(),
            env: Vec::new(),
            isolation: Isolation::PerSession,
            processes_max: UPSTREAM_PROCESSES_MAX,
            timeout: Duration::from_secs(UPSTREAM_TIMEOUT_SECS),
            call_max: Duration::from_secs(UPSTREAM_CALL_MAX_SECS),
            start_timeout: Duration::from_secs(UPSTREAM_START_TIMEOUT_SECS),
            line_bytes: UPSTREAM_LINE_BYTES,
            catalog_bytes_per_core: UPSTREAM_CATALOG_BYTES_PER_CORE,
            queue_bytes: UPSTREAM_QUEUE_BYTES,
            kill_grace: Duration::from_millis(UPSTREAM_KILL_GRACE_MS),
            credentials: None,
            forward_authorization: Vec::new(),
            auth: Vec::new(),
            exchange_margin: Duration::from_secs(UPSTREAM_EXCHANGE_MARGIN_SECS),
            exchange_cache_entries: UPSTREAM_EXCHANGE_CACHE_ENTRIES,
            exchange_timeout: Duration::from_secs(UPSTREAM_EXCHANGE_TIMEOUT_SECS),
            exchange_answer_bytes: UPSTREAM_EXCHANGE_ANSWER_BYTES,
            exchange_queue_entries: UPSTREAM_EXCHANGE_QUEUE_ENTRIES,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
            allow_prompts: Vec::new(),
            deny_prompts: Vec::new(),
            allow_resources: Vec::new(),
            deny_resources: Vec::new(),
            prefix: Vec::new(),
            filter_globs_max: UPSTREAM_FILTER_GLOBS_MAX,
            resource_uri_bytes_max: RESOURCE_URI_BYTES_MAX,
            policy: Vec::new(),
            protocol: Vec::new(),
            breaker_failures: UPSTREAM_BREAKER_FAILURES,
            input_rounds_max: UPSTREAM_INPUT_ROUNDS_MAX,
            breaker_pause: Duration::from_millis(UPSTREAM_BREAKER_PAUSE_MS),
        }
    }
}

impl UpstreamConfig {
    /// The section of the parsed flags: each `--upstream` and `--upstream-env` parsed.
    pub(crate) fn from_flags(flags: UpstreamFlags) -> Result<UpstreamConfig, ConfigError> {
        Ok(UpstreamConfig {
            specs: flags
                .upstream
                .iter()
                .map(|u| UpstreamSpec::parse(u))
                .collect::<Result<_, _>>()?,
            env: (flags.upstream_env.iter())
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(ConfigError::BadUpstreamEnv(kv.clone())),
                })
                .collect::<Result<_, _>>()?,
            isolation: flags.upstream_isolation,
            processes_max: flags.upstream_max_processes,
            timeout: Duration::from_secs(flags.upstream_timeout_secs),
            call_max: Duration::from_secs(flags.upstream_call_max_secs),
            start_timeout: Duration::from_secs(flags.upstream_start_timeout_secs),
            line_bytes: flags.upstream_line_bytes,
            catalog_bytes_per_core: flags.upstream_catalog_bytes_per_core,
            queue_bytes: flags.upstream_queue_bytes,
            kill_grace: Duration::from_millis(flags.upstream_kill_grace_ms),
            credentials: flags.upstream_credentials,
            forward_authorization: flags.upstream_forward_authorization,
            auth: flags.upstream_auth,
            exchange_margin: Duration::from_secs(flags.upstream_exchange_margin_secs),
            exchange_cache_entries: flags.upstream_exchange_cache_entries,
            exchange_timeout: Duration::from_secs(flags.upstream_exchange_timeout_secs),
            exchange_answer_bytes: flags.upstream_exchange_answer_bytes,
            exchange_queue_entries: flags.upstream_exchange_queue_entries,
            allow_tools: flags.upstream_allow_tools,
            deny_tools: flags.upstream_deny_tools,
            allow_prompts: flags.upstream_allow_prompts,
            deny_prompts: flags.upstream_deny_prompts,
            allow_resources: flags.upstream_allow_resources,
            deny_resources: flags.upstream_deny_resources,
            prefix: flags.upstream_prefix,
            filter_globs_max: flags.upstream_filter_globs_max,
            resource_uri_bytes_max: flags.resource_uri_bytes_max,
            policy: flags.upstream_policy,
            protocol: flags.upstream_protocol,
            breaker_failures: flags.upstream_breaker_failures,
            input_rounds_max: flags.upstream_input_rounds_max,
            breaker_pause: Duration::from_millis(flags.upstream_breaker_pause_ms),
        })
    }

    /// Checks the section's values: its limits, the names, and every per-upstream flag.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("upstream-max-processes", self.processes_max as u128),
            ("upstream-timeout-secs", self.timeout.as_millis()),
            ("upstream-call-max-secs", self.call_max.as_millis()),
            ("upstream-start-timeout-secs", self.start_timeout.as_millis()),
            ("upstream-line-bytes", self.line_bytes as u128),
            ("upstream-catalog-bytes-per-core", self.catalog_bytes_per_core as u128),
            ("upstream-queue-bytes", self.queue_bytes as u128),
            ("upstream-filter-globs-max", self.filter_globs_max as u128),
            ("resource-uri-bytes-max", self.resource_uri_bytes_max as u128),
            ("upstream-breaker-failures", u128::from(self.breaker_failures)),
            ("upstream-input-rounds-max", self.input_rounds_max as u128),
            ("upstream-breaker-pause-ms", self.breaker_pause.as_millis()),
            ("upstream-exchange-cache-entries", self.exchange_cache_entries as u128),
            ("upstream-exchange-timeout-secs", self.exchange_timeout.as_millis()),
            ("upstream-exchange-answer-bytes", self.exchange_answer_bytes as u128),
            ("upstream-exchange-queue-entries", self.exchange_queue_entries as u128),
        ])?;
        at_most(&[
            (
                "upstream-exchange-answer-bytes",
                self.exchange_answer_bytes,
                UPSTREAM_EXCHANGE_ANSWER_BYTES_MAX,
            ),
            (
                "upstream-exchange-queue-entries",
                self.exchange_queue_entries,
                UPSTREAM_EXCHANGE_QUEUE_ENTRIES_MAX,
            ),
        ])?;
        UpstreamSpec::check_names(&self.specs)?;
        self.prefixes()?;
        self.filters()?;
        self.policies()?;
        self.protocols()?;
        for name in &self.forward_authorization {
            let known = self.specs.iter().any(|spec| {
                spec.name.as_deref() == Some(name.as_str())
                    && matches!(spec.target, UpstreamTarget::Http(_))
            });
            if !known {
                return Err(ConfigError::ForwardToUnknownUpstream(name.clone()));
            }
        }
        self.check_exchanges()
    }

    /// Each `--upstream-auth NAME=exchange` names an HTTP upstream whose links are per
    /// session (a shared link speaks for no one caller), and one whose client token is not
    /// forwarded as well.
    fn check_exchanges(&self) -> Result<(), ConfigError> {
        for (spec, auth) in self.specs.iter().zip(self.auths()?) {
            if auth != UpstreamAuth::Exchange {
                continue;
            }
            let name = spec.name.clone().unwrap_or_else(|| "*".to_owned());
            let fail = |why| Err(ConfigError::Exchange(name.clone(), why));
            if !matches!(spec.target, UpstreamTarget::Http(_)) {
                return fail("only an HTTP upstream takes a bearer token");
            }
            if spec.name.is_none() {
                return fail(
                    "the upstream needs a NAME= for its exchange lines in --upstream-credentials",
                );
            }
            if self.isolation != Isolation::PerSession {
                return fail(
                    "a shared upstream link speaks for no one caller: use \
                     --upstream-isolation per-session",
                );
            }
            if self.forward_authorization.contains(&name) {
                return fail("it is also --upstream-forward-authorization: choose one");
            }
        }
        Ok(())
    }

    /// This section with the upstream set of `other`: the `--upstream`s and their
    /// per-upstream `NAME=…` flags (filters, prefix, failure policy, era).
    pub(crate) fn with_set_of(&self, other: &UpstreamConfig) -> UpstreamConfig {
        UpstreamConfig {
            specs: other.specs.clone(),
            allow_tools: other.allow_tools.clone(),
            deny_tools: other.deny_tools.clone(),
            allow_prompts: other.allow_prompts.clone(),
            deny_prompts: other.deny_prompts.clone(),
            allow_resources: other.allow_resources.clone(),
            deny_resources: other.deny_resources.clone(),
            prefix: other.prefix.clone(),
            policy: other.policy.clone(),
            protocol: other.protocol.clone(),
            auth: other.auth.clone(),
            ..self.clone()
        }
    }

    /// Each `--upstream`'s filters, in order (`--upstream-allow-tools`, `--upstream-deny-tools`
    /// and the same for prompts and resources); a filter flag with no `--upstream` is an error.
    pub(crate) fn filters(&self) -> Result<Vec<UpstreamFilters>, FilterError> {
        let flags = filter::FilterFlags {
            tools: [&self.allow_tools, &self.deny_tools],
            prompts: [&self.allow_prompts, &self.deny_prompts],
            resources: [&self.allow_resources, &self.deny_resources],
        };
        if self.specs.is_empty() {
            let all = [flags.tools, flags.prompts, flags.resources];
            if let Some(value) = all.iter().flatten().flat_map(|v| v.iter()).next() {
                let why = "(no --upstream given)".to_owned();
                return Err(FilterError::UnknownUpstream(
                    "--upstream-allow-*/--upstream-deny-*",
                    value.clone(),
                    why,
                ));
            }
        }
        let max = self.filter_globs_max;
        self.specs
            .iter()
            .map(|spec| UpstreamFilters::for_upstream(spec, &self.specs, &flags, max))
            .collect()
    }

    /// Each `--upstream`'s prefix policy, in order (`--upstream-prefix`, else the default: one
    /// upstream `never`, several `always`).
    pub(crate) fn prefixes(&self) -> Result<Vec<PrefixPolicy>, UpstreamSpecError> {
        PrefixPolicy::for_upstreams(&self.specs, &self.prefix)
    }

    /// Each `--upstream`'s failure policy, in order (`--upstream-policy`; the last value naming
    /// it wins, `*` names every upstream; `required` when none does).
    pub(crate) fn policies(&self) -> Result<Vec<UpstreamPolicy>, ConfigError> {
        self.per_upstream(&self.policy, UpstreamPolicy::parse, ConfigError::UpstreamPolicy)
    }

    /// Each `--upstream`'s bearer (`--upstream-auth`, as `upstream_policies`; `static` when none
    /// names it).
    pub(crate) fn auths(&self) -> Result<Vec<UpstreamAuth>, ConfigError> {
        self.per_upstream(&self.auth, UpstreamAuth::parse, ConfigError::UpstreamAuth)
    }

    /// Each `--upstream`'s era, in order (`--upstream-protocol`, as `upstream_policies`; `auto`
    /// when none names it).
    pub(crate) fn protocols(&self) -> Result<Vec<UpstreamProtocol>, ConfigError> {
        let parse = UpstreamProtocol::parse;
        self.per_upstream(&self.protocol, parse, ConfigError::UpstreamProtocol)
    }

    /// One `NAME=VALUE` per-upstream flag's values as a value per `--upstream`, in order: the
    /// last value naming an upstream wins, `*` names every one, the default where none does.
    fn per_upstream<T: Copy + Default>(
        &self,
        values: &[String],
        parse: fn(&str) -> Option<T>,
        error: fn(String) -> ConfigError,
    ) -> Result<Vec<T>, ConfigError> {
        let mut chosen = vec![T::default(); self.specs.len()];
        for value in values {
            let bad = || error(value.clone());
            let (name, word) = value.split_once('=').ok_or_else(bad)?;
            let parsed = parse(word).ok_or_else(bad)?;
            let mut named = false;
            for (spec, into) in self.specs.iter().zip(chosen.iter_mut()) {
                if name == "*" || spec.name.as_deref() == Some(name) {
                    *into = parsed;
                    named = true;
                }
            }
            if !named {
                return Err(bad());
            }
        }
        Ok(chosen)
    }
}

/// The command line's flags of this section: `--upstream*` and `--resource-uri-bytes-max`. `cli`
/// flattens them into its `Flags` in `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct UpstreamFlags {
    /// An MCP server to front (repeatable): 'stdio:COMMAND ARGS…' (split like a shell, no
    /// shell run) or 'http://HOST:PORT/PATH'; with several, each 'NAME=…' (tools and prompts
    /// become NAME__tool, resource URIs NAME+uri). With any upstream, --tools defaults to none.
    #[arg(long)]
    pub(crate) upstream: Vec<String>,
    /// Extra environment for stdio upstreams, KEY=VALUE (repeatable).
    #[arg(long)]
    pub(crate) upstream_env: Vec<String>,
    /// per-session: one upstream child per client session; shared: one per core.
    #[arg(long, value_enum, default_value = "per-session")]
    pub(crate) upstream_isolation: Isolation,
    /// Upstream child processes alive at once (all cores); initialize beyond it gets 503.
    #[arg(long, default_value_t = UPSTREAM_PROCESSES_MAX)]
    pub(crate) upstream_max_processes: usize,
    /// Longest an upstream may take to answer one request; for a tool call, since the
    /// upstream last sent for it (progress, logs), time held back for a slow client not counted.
    #[arg(long, default_value_t = UPSTREAM_TIMEOUT_SECS)]
    pub(crate) upstream_timeout_secs: u64,
    /// Longest one upstream tool call may run, however much progress its upstream sends.
    #[arg(long, default_value_t = UPSTREAM_CALL_MAX_SECS)]
    pub(crate) upstream_call_max_secs: u64,
    /// Longest an upstream may take to start and answer initialize (and its first tools/list).
    #[arg(long, default_value_t = UPSTREAM_START_TIMEOUT_SECS)]
    pub(crate) upstream_start_timeout_secs: u64,
    /// Longest JSON-RPC line read from a stdio upstream; a longer answer fails its call.
    #[arg(long, default_value_t = UPSTREAM_LINE_BYTES)]
    pub(crate) upstream_line_bytes: usize,
    /// Bytes (JSON) of distinct upstream tool listings one core holds (equal ones are shared);
    /// a session whose listing would exceed it gets 503 on initialize.
    #[arg(long, default_value_t = UPSTREAM_CATALOG_BYTES_PER_CORE)]
    pub(crate) upstream_catalog_bytes_per_core: usize,
    /// Bytes queued for one stdio upstream's stdin; beyond it requests fail.
    #[arg(long, default_value_t = UPSTREAM_QUEUE_BYTES)]
    pub(crate) upstream_queue_bytes: usize,
    /// From SIGTERM to SIGKILL when an upstream child is stopped.
    #[arg(long, default_value_t = UPSTREAM_KILL_GRACE_MS)]
    pub(crate) upstream_kill_grace_ms: u64,
    /// Per-upstream credentials: HTTP headers and stdio environment, from this file (lines
    /// 'NAME header HEADER VALUE' / 'NAME env KEY VALUE'; VALUE may be $VAR or use ${VAR} from
    /// tidemark's environment). Never on the command line, where ps shows it.
    #[arg(long)]
    pub(crate) upstream_credentials: Option<std::path::PathBuf>,
    /// Send the client's own Authorization header to the HTTP upstream NAME (repeatable): only
    /// for an upstream that is this same resource (the token's audience). Off by default.
    #[arg(long, value_name = "NAME")]
    pub(crate) upstream_forward_authorization: Vec<String>,
    /// What HTTP upstream NAME ('*': every one) gets as its bearer token: static (the default:
    /// --upstream-credentials' headers) or exchange (the caller's token traded, RFC 8693, for
    /// one whose audience is the upstream, at the authorization server the credentials file's
    /// 'NAME exchange …' lines name; per-session isolation only); repeatable.
    #[arg(long, value_name = "NAME=MODE")]
    pub(crate) upstream_auth: Vec<String>,
    /// How long before an exchanged token expires tidemark exchanges anew instead of using it.
    #[arg(long, default_value_t = UPSTREAM_EXCHANGE_MARGIN_SECS)]
    pub(crate) upstream_exchange_margin_secs: u64,
    /// Exchanged tokens one core keeps, one per (subject, upstream); beyond it the expired
    /// and then the soonest to expire are dropped.
    #[arg(long, default_value_t = UPSTREAM_EXCHANGE_CACHE_ENTRIES)]
    pub(crate) upstream_exchange_cache_entries: usize,
    /// Longest one token exchange at the authorization server may take; then the call gets
    /// -32603 naming the upstream.
    #[arg(long, default_value_t = UPSTREAM_EXCHANGE_TIMEOUT_SECS)]
    pub(crate) upstream_exchange_timeout_secs: u64,
    /// Longest answer to a token exchange read from the authorization server (at most
    /// 1048576); a longer one fails the exchange and its call gets -32603 naming this flag.
    #[arg(long, default_value_t = UPSTREAM_EXCHANGE_ANSWER_BYTES)]
    pub(crate) upstream_exchange_answer_bytes: usize,
    /// Token exchanges waiting for the authorization server, all cores (at most 65536); beyond
    /// it a call's exchange fails at once with -32603 naming this flag. Read once, at start.
    #[arg(long, default_value_t = UPSTREAM_EXCHANGE_QUEUE_ENTRIES)]
    pub(crate) upstream_exchange_queue_entries: usize,
    /// Expose only the tools of upstream NAME ('*': every upstream) whose own names match a
    /// GLOB ('*' any run, '?' one character; case-sensitive); repeatable; 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_allow_tools: Vec<String>,
    /// Hide the tools of upstream NAME ('*': every upstream) matching a GLOB, listed and
    /// called alike (refused as unknown); wins over --upstream-allow-tools; 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_deny_tools: Vec<String>,
    /// Expose only the prompts of upstream NAME ('*': all) whose names match a GLOB (as for
    /// tools: listed, fetched and completed alike); 'NAME=GLOB[,GLOB…]'.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_allow_prompts: Vec<String>,
    /// Hide the prompts of upstream NAME ('*': all) matching a GLOB; wins over allow.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_deny_prompts: Vec<String>,
    /// Expose only the resources of upstream NAME ('*': all) whose URIs (in canonical form) or
    /// URI templates match a GLOB; read and subscribe are refused as not found for the rest.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_allow_resources: Vec<String>,
    /// Hide the resources of upstream NAME ('*': all) whose URIs (in canonical form) match a
    /// GLOB; wins over allow.
    #[arg(long, value_name = "NAME=GLOB")]
    pub(crate) upstream_deny_resources: Vec<String>,
    /// Whether upstream NAME's tool and prompt names are prefixed NAME__ (resource URIs NAME+):
    /// always, on-collision (only if one of its names is another provider's) or never; an
    /// unresolved collision stops the start. Default: never with one upstream, always with
    /// several (repeatable; 'NAME=POLICY').
    #[arg(long, value_name = "NAME=POLICY")]
    pub(crate) upstream_prefix: Vec<String>,
    /// Most --upstream-allow-* and --upstream-deny-* globs (all kinds) for one upstream.
    #[arg(long, default_value_t = UPSTREAM_FILTER_GLOBS_MAX)]
    pub(crate) upstream_filter_globs_max: usize,
    /// Longest resource URI (bytes) a resources/read, resources/subscribe or completion may
    /// name; a longer one is refused with -32602.
    #[arg(long, default_value_t = RESOURCE_URI_BYTES_MAX)]
    pub(crate) resource_uri_bytes_max: usize,
    /// What a session does when upstream NAME ('*': every upstream) is down as it starts:
    /// required (the default: initialize gets 503 + Retry-After naming it) or optional (the
    /// session starts without its tools; they return with tools/list_changed); repeatable.
    #[arg(long, value_name = "NAME=POLICY")]
    pub(crate) upstream_policy: Vec<String>,
    /// Which MCP era to speak to HTTP upstream NAME ('*': every one): auto (the default: probe
    /// with server/discover; 2026-07-28 when it is all the upstream serves, else initialize,
    /// whose streams resume), legacy (initialize, no probe) or modern (2026-07-28 only);
    /// repeatable.
    #[arg(long, value_name = "NAME=PROTOCOL")]
    pub(crate) upstream_protocol: Vec<String>,
    /// Consecutive failed tool calls of one upstream (per core) that open its circuit breaker:
    /// its calls then fail fast with -32603 naming it, without reaching it.
    #[arg(long, default_value_t = UPSTREAM_BREAKER_FAILURES)]
    pub(crate) upstream_breaker_failures: u32,
    /// Rounds of input (InputRequiredResult after InputRequiredResult) one tool call of a
    /// 2026-07-28 upstream may ask for before tidemark ends it with -32603.
    #[arg(long, default_value_t = UPSTREAM_INPUT_ROUNDS_MAX)]
    pub(crate) upstream_input_rounds_max: usize,
    /// How long an open breaker fails calls fast before one probe call goes through; also the
    /// retry interval of an optional upstream that is down.
    #[arg(long, default_value_t = UPSTREAM_BREAKER_PAUSE_MS)]
    pub(crate) upstream_breaker_pause_ms: u64,
}
