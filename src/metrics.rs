//! Counters, gauges and histograms, one set per core, written only by their core (a relaxed
//! load + store, no read-modify-write and no cell another core writes on the hot path) and
//! merged by the admin listener (`admin`, `GET /metrics`) into the Prometheus text format:
//! counters and gauges summed (gauges also per core, `tidemark_core_*{core}`), histograms
//! bucket by bucket. Every family is `tidemark_`-prefixed, in base units, with `# HELP` and
//! `# TYPE`; the six unprefixed names of earlier releases are still rendered for one release
//! as deprecated copies (`DEPRECATED_ALIASES`).
//!
//! Never: blocks a worker; the exporter only reads.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

macro_rules! counters {
    ($($name:ident => $prom:literal, $help:literal;)*) => {
        /// One core's counters.
        #[derive(Default)]
        pub(crate) struct CoreMetrics {
            $(pub(crate) $name: Counter,)*
            /// The latency and size histograms (`Histograms`).
            pub(crate) hist: Histograms,
        }

        impl CoreMetrics {
            /// Appends every family in the Prometheus text format: counters and gauges summed
            /// over `cores`, each gauge again per core, the histograms, the deprecated copies.
            #[allow(unused_assignments)]
            pub(crate) fn render(cores: &[Arc<CoreMetrics>], out: &mut String) {
                let mut last_family = "";
                $(
                    let total: u64 = cores.iter().map(|c| c.$name.get()).sum();
                    let family = $prom.split('{').next().unwrap_or($prom);
                    if family != last_family {
                        let _ = writeln!(out, "# HELP {} {}", family, $help);
                        let _ = writeln!(out, "# TYPE {} {}", family, kind_of(family));
                        last_family = family;
                    }
                    let _ = writeln!(out, "{} {}", $prom, total);
                )*
                $(
                    if kind_of($prom) == "gauge" && !$prom.contains('{') {
                        let family = per_core_family($prom);
                        let _ = writeln!(out, "# HELP {} {} (per core)", family, $help);
                        let _ = writeln!(out, "# TYPE {} gauge", family);
                        for (core, c) in cores.iter().enumerate() {
                            let _ = writeln!(out, "{}{{core=\"{}\"}} {}", family, core, c.$name.get());
                        }
                    }
                )*
                Histograms::render(cores, out);
                Histograms::render_health(cores, out);
                render_deprecated(out);
            }
        }
    };
}

counters! {
    requests_total => "tidemark_requests_total", "HTTP requests parsed.";
    modern_requests_total => "tidemark_modern_requests_total", "MCP 2026-07-28 (stateless) requests that passed the header and _meta checks.";
    request_state_refused_total => "tidemark_request_state_refused_total", "MRTR requestState refused (tampered, expired or another request's).";
    modern_cancelled_total => "tidemark_modern_cancelled_total", "MCP 2026-07-28 requests cancelled because the client closed the response stream.";
    modern_notifications_dropped_total => "tidemark_modern_notifications_dropped_total", "Notifications of MCP 2026-07-28 calls dropped because the call's unwritten notifications were at --replay-bytes (a producer that does not wait for room; the bridge waits).";
    tasks_created_total => "tidemark_tasks_created_total", "MCP 2026-07-28 tool calls that became tasks (io.modelcontextprotocol/tasks).";
    sessions_created_total => "tidemark_sessions_created_total", "Sessions created by initialize.";
    sessions_expired_total => "tidemark_sessions_expired_total", "Sessions ended by idle expiry.";
    sessions_deleted_total => "tidemark_sessions_deleted_total", "Sessions ended by DELETE.";
    sessions_active => "tidemark_sessions_active", "Live sessions.";
    connections_active => "tidemark_connections_active", "Open connections.";
    streams_live => "tidemark_streams_live", "Legacy request streams with a connection writing them (sampled every REAP_INTERVAL).";
    streams_owed => "tidemark_streams_owed", "Legacy request streams owed to a resume: detached, running or not fully delivered (sampled every REAP_INTERVAL).";
    ring_bytes => "tidemark_ring_bytes", "Bytes the sessions' replay rings hold, against --core-buffer-bytes per core (sampled every REAP_INTERVAL).";
    upstream_catalog_bytes => "tidemark_upstream_catalog_bytes", "Bytes (JSON size) of the distinct upstream tool listings the cores hold, shared by every session listed the same, against --upstream-catalog-bytes-per-core per core.";
    tasks_active => "tidemark_tasks_active", "MCP 2026-07-28 tasks held (working, waiting for input or finished and not yet expired; sampled every REAP_INTERVAL).";
    tls_handshakes_total => "tidemark_tls_handshakes_total", "TLS handshakes completed on the MCP listeners.";
    tls_handshakes_failed_total => "tidemark_tls_handshakes_failed_total", "TLS handshakes that failed (an alert sent, e.g. no common ALPN or plaintext HTTP), were closed, or did not finish within --header-timeout-ms.";
    handoffs_total => "tidemark_handoffs_total", "Connections moved to the core owning their request (its task, session or Idempotency-Key).";
    accept_descriptors_exhausted_total => "tidemark_accept_descriptors_exhausted_total", "Accepts that failed with EMFILE/ENFILE (out of file descriptors): each answered one connection 503 from the reserve descriptor, or backed off.";
    drain_backlog_accepted_total => "tidemark_drain_backlog_accepted_total", "Connections taken from the accept queue when the drain began (served, or answered 503), instead of reset by closing the listener.";
    handoffs_refused_total => "tidemark_handoffs_refused_total", "Requests answered 500 because the core they were handed to would have handed them on again (at most one hand-off per request).";
    idempotency_bytes => "tidemark_idempotency_bytes", "Bytes the 2026-07-28 Idempotency-Key records hold (recorded notifications and final answers; per core at most --idempotency-bytes-per-core, plus records a connection still reads).";
    keyed_events_dropped_total => "tidemark_keyed_events_dropped_total", "Notifications of keyed calls not recorded: past --replay-bytes for the call or --idempotency-bytes-per-core for its core.";
    keyed_calls_timed_out_total => "tidemark_keyed_calls_timed_out_total", "Keyed calls cancelled after --keyed-call-max-secs.";
    keyed_answers_not_retained_total => "tidemark_keyed_answers_not_retained_total", "Keyed calls whose final answer alone did not fit --idempotency-bytes-per-core: delivered, not kept for retries (they get -32603).";
    rejected_owed => "tidemark_migrations_rejected_total{reason=\"retry_of_owed\"}", "POSTs refused by the migration boundary.";
    rejected_id_reused => "tidemark_migrations_rejected_total{reason=\"id_reused\"}", "POSTs refused by the migration boundary.";
    rejected_held_too_long => "tidemark_migrations_rejected_total{reason=\"held_too_long\"}", "POSTs refused by the migration boundary.";
    rejected_key_reused => "tidemark_migrations_rejected_total{reason=\"idempotency_key_reused\"}", "POSTs refused by the migration boundary.";
    posts_held_total => "tidemark_posts_held_total", "POSTs held until owed streams were resumed.";
    dedup_hits_total => "tidemark_dedup_hits_total", "POSTs answered from an earlier stream by Idempotency-Key.";
    replays_total => "tidemark_replays_total", "Resumes with Last-Event-ID that replayed a stream.";
    gaps_total => "tidemark_gaps_total", "Resumes that found evicted events (-31003).";
    owed_abandoned_total => "tidemark_owed_abandoned_total", "Owed streams nobody resumed in time.";
    drain_streams_ended => "tidemark_drain_streams_ended_total", "SSE responses ended by the end of a drain before their final response (standalone GET streams included).";
    cors_preflights_total => "tidemark_cors_preflights_total", "CORS preflights answered (204) for a listed --allowed-origin.";
    cors_headers_left_out_total => "tidemark_cors_headers_left_out_total", "Header names a CORS preflight asked for and its answer left out (not an MCP request header, or past CORS_PARAM_HEADERS_MAX): the browser refuses that request.";
    auth_refused_missing => "tidemark_auth_refused_total{reason=\"missing\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_query_token => "tidemark_auth_refused_total{reason=\"query_token\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_malformed => "tidemark_auth_refused_total{reason=\"malformed\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_unknown => "tidemark_auth_refused_total{reason=\"unknown_token\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_signature => "tidemark_auth_refused_total{reason=\"bad_signature\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_key => "tidemark_auth_refused_total{reason=\"unknown_key\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_expired => "tidemark_auth_refused_total{reason=\"expired\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_not_yet_valid => "tidemark_auth_refused_total{reason=\"not_yet_valid\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_audience => "tidemark_auth_refused_total{reason=\"wrong_audience\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_issuer => "tidemark_auth_refused_total{reason=\"wrong_issuer\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_algorithm => "tidemark_auth_refused_total{reason=\"algorithm_not_allowed\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_refused_scope => "tidemark_auth_refused_total{reason=\"insufficient_scope\"}", "Requests refused authorization, by reason (401/400/403; never a token in a label).";
    auth_verifications => "tidemark_auth_verifications_total", "Bearer tokens checked by the verifier chain rather than a connection's cached verification (first use, another token, a changed token or key set, or past --auth-cache-secs).";
    auth_foreign_subject => "tidemark_auth_foreign_subject_total", "Requests naming a session, task, Idempotency-Key or requestState of another subject (or none): answered as unknown (404 / not found).";
    limit_header => "tidemark_limit_hits_total{limit=\"header\"}", "Requests refused at a limit.";
    limit_body => "tidemark_limit_hits_total{limit=\"body\"}", "Requests refused at a limit.";
    limit_sessions => "tidemark_limit_hits_total{limit=\"sessions\"}", "Requests refused at a limit.";
    limit_streams => "tidemark_limit_hits_total{limit=\"streams\"}", "Requests refused at a limit.";
    limit_held => "tidemark_limit_hits_total{limit=\"held_posts\"}", "Requests refused at a limit.";
    limit_buffer => "tidemark_limit_hits_total{limit=\"core_buffer\"}", "Requests refused at a limit.";
    limit_connections => "tidemark_limit_hits_total{limit=\"connections\"}", "Requests refused at a limit.";
    limit_timeout => "tidemark_limit_hits_total{limit=\"header_timeout\"}", "Requests refused at a limit.";
    limit_upstream => "tidemark_limit_hits_total{limit=\"upstream_processes\"}", "Requests refused at a limit.";
    limit_idempotency_keys => "tidemark_limit_hits_total{limit=\"idempotency_keys\"}", "Requests refused at a limit.";
    limit_idempotency_bytes => "tidemark_limit_hits_total{limit=\"idempotency_bytes\"}", "Requests refused at a limit.";
    limit_keyed_calls_per_client => "tidemark_limit_hits_total{limit=\"keyed_calls_per_client\"}", "Requests refused at a limit.";
    limit_tasks => "tidemark_limit_hits_total{limit=\"tasks\"}", "Requests refused at a limit.";
    limit_task_bytes => "tidemark_limit_hits_total{limit=\"task_bytes\"}", "Requests refused at a limit.";
    limit_task_input_requests => "tidemark_limit_hits_total{limit=\"task_input_requests\"}", "Requests refused at a limit.";
    limit_rate_buckets => "tidemark_limit_hits_total{limit=\"rate_buckets\"}", "Requests refused at a limit.";
    limit_upstream_catalog => "tidemark_limit_hits_total{limit=\"upstream_catalog_bytes\"}", "Requests refused at a limit.";
    misrouted_sessions => "tidemark_misrouted_total{name=\"session\"}", "Requests naming a session or task of another node (--node-id): the balancer sent them to the wrong node.";
    misrouted_tasks => "tidemark_misrouted_total{name=\"task\"}", "Requests naming a session or task of another node (--node-id): the balancer sent them to the wrong node.";
    rate_limited_client => "tidemark_rate_limited_total{scope=\"client\"}", "Requests refused 429 by a --rate-limit, by the kind of its scope (client, tool:NAME, upstream:NAME).";
    rate_limited_tool => "tidemark_rate_limited_total{scope=\"tool\"}", "Requests refused 429 by a --rate-limit, by the kind of its scope (client, tool:NAME, upstream:NAME).";
    rate_limited_upstream => "tidemark_rate_limited_total{scope=\"upstream\"}", "Requests refused 429 by a --rate-limit, by the kind of its scope (client, tool:NAME, upstream:NAME).";
    durable_sessions_marked_not_durable_total => "tidemark_durable_sessions_marked_not_durable_total", "Sessions that stopped being durable (--durable): a record of theirs could not be queued or written; each is rewritten whole when the store is back.";
    durable_sessions_not_durable => "tidemark_durable_sessions_not_durable", "Sessions not durable right now (--durable): never adopted by a peer until rewritten.";
    durable_records_refused_total => "tidemark_durable_records_refused_total", "Mirror records not queued because the core's queue held --durable-queue-records or --durable-queue-bytes.";
    durable_write_ahead_unprotected_total => "tidemark_durable_write_ahead_unprotected_total", "Non-idempotent calls started before the store acknowledged their record (store slow or down past --durable-write-ahead-ms): a node death could run them again elsewhere.";
    durable_adopted_total => "tidemark_durable_adoptions_total{outcome=\"adopted\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_absent_total => "tidemark_durable_adoptions_total{outcome=\"absent\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_not_durable_total => "tidemark_durable_adoptions_total{outcome=\"not_durable\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_owner_alive_total => "tidemark_durable_adoptions_total{outcome=\"owner_alive\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_taken_total => "tidemark_durable_adoptions_total{outcome=\"taken\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_cached_absent_total => "tidemark_durable_adoptions_total{outcome=\"cached_absent\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_adopt_failed_total => "tidemark_durable_adoptions_total{outcome=\"failed\"}", "Requests for a session this node does not hold, by what the store answered (cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_task_absent_total => "tidemark_durable_task_lookups_total{outcome=\"absent\"}", "Requests for a task this node does not hold, asked of the durable store, by its answer (absent: it lacks the id; cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_task_cached_absent_total => "tidemark_durable_task_lookups_total{outcome=\"cached_absent\"}", "Requests for a task this node does not hold, asked of the durable store, by its answer (absent: it lacks the id; cached_absent: it lacked that id within the last second, so it was not asked again).";
    durable_recovered_keyed_total => "tidemark_durable_recovered_total{name=\"keyed\"}", "2026-07-28 keyed calls and tasks of another node answered from the store.";
    durable_recovered_tasks_total => "tidemark_durable_recovered_total{name=\"task\"}", "2026-07-28 keyed calls and tasks of another node answered from the store.";
    tools_hidden_collision => "tidemark_tools_hidden_total{reason=\"collision\"}", "Tools left out of a tool table (not listed, refused as unknown), logged once per core: a name another provider already offered (found after start-up, e.g. at a list_changed), or a prefixed name longer than the 128 characters MCP allows.";
    tools_hidden_name_too_long => "tidemark_tools_hidden_total{reason=\"name_too_long\"}", "Tools left out of a tool table (not listed, refused as unknown), logged once per core: a name another provider already offered (found after start-up, e.g. at a list_changed), or a prefixed name longer than the 128 characters MCP allows.";
    upstream_reloads_applied => "tidemark_upstream_reloads_total{outcome=\"applied\"}", "SIGHUPs whose --config upstream set (the [[upstream]] tables and their per-upstream keys) was applied, refused whole (a bad value or a name collision: the old set stays) or unchanged; counted on core 0 by the signal thread.";
    upstream_reloads_refused => "tidemark_upstream_reloads_total{outcome=\"refused\"}", "SIGHUPs whose --config upstream set (the [[upstream]] tables and their per-upstream keys) was applied, refused whole (a bad value or a name collision: the old set stays) or unchanged; counted on core 0 by the signal thread.";
    upstream_reloads_unchanged => "tidemark_upstream_reloads_total{outcome=\"unchanged\"}", "SIGHUPs whose --config upstream set (the [[upstream]] tables and their per-upstream keys) was applied, refused whole (a bad value or a name collision: the old set stays) or unchanged; counted on core 0 by the signal thread.";
    list_changed_coalesced => "tidemark_list_changed_coalesced_total", "List-changed notifications (tools, prompts, resources) not sent to a legacy session on their own: inside --list-changed-min-ms of the last one of their kind, they went out as one trailing notification at the window's end.";
    trace_spans_dropped_total => "tidemark_trace_spans_dropped_total", "Finished spans dropped because their core's queue held --otlp-queue-spans (the exporter fell behind or the collector is down).";
    audit_lines_total => "tidemark_audit_lines_total", "Audit lines queued for --audit-log (one per tools/call, resources/read and prompts/get when it ends).";
    audit_lines_dropped_total => "tidemark_audit_lines_dropped_total", "Audit lines dropped because the writer's queue held --audit-queue-lines (the disk or the reader of --audit-log fell behind); the file says how many in an audit_dropped line.";
}

/// The Prometheus type of a counter table family: `_total` counts, anything else is a level.
fn kind_of(family: &str) -> &'static str {
    if family.split('{').next().unwrap_or(family).ends_with("_total") {
        "counter"
    } else {
        "gauge"
    }
}

/// The per-core family of gauge `family`: `tidemark_x` → `tidemark_core_x`.
fn per_core_family(family: &str) -> String {
    format!("tidemark_core_{}", family.strip_prefix("tidemark_").unwrap_or(family))
}

/// Families renamed to the `tidemark_` prefix, (old, new): the old name is still rendered, a
/// copy of the new one's samples marked deprecated in its HELP, for one release (dashboards
/// built on it keep working and say why they should move); removed in the release after.
pub(crate) const DEPRECATED_ALIASES: [(&str, &str); 6] = [
    ("migrations_rejected_total", "tidemark_migrations_rejected_total"),
    ("posts_held_total", "tidemark_posts_held_total"),
    ("dedup_hits_total", "tidemark_dedup_hits_total"),
    ("replays_total", "tidemark_replays_total"),
    ("gaps_total", "tidemark_gaps_total"),
    ("owed_abandoned_total", "tidemark_owed_abandoned_total"),
];

/// Appends the deprecated copies of `DEPRECATED_ALIASES` from the samples already in `out`.
fn render_deprecated(out: &mut String) {
    let mut copies = String::new();
    for (old, new) in DEPRECATED_ALIASES {
        let _ = writeln!(
            copies,
            "# HELP {old} Deprecated: renamed {new}; removed in the next release."
        );
        let _ = writeln!(copies, "# TYPE {old} counter");
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix(new) {
                if rest.starts_with('{') || rest.starts_with(' ') {
                    let _ = writeln!(copies, "{old}{rest}");
                }
            }
        }
    }
    out.push_str(&copies);
}

/// Bucket bounds of every duration histogram, in seconds: 10 µs to 5 minutes, about three per
/// decade (a local echo call takes tens of µs, an upstream call or a held POST seconds, a
/// drain up to its --drain-secs).
pub(crate) const DURATION_BUCKETS_SECONDS: [f64; 23] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Bucket bounds of the resume replay size, in events (a ring holds at most
/// --replay-events per stream).
pub(crate) const EVENT_COUNT_BUCKETS: [f64; 12] =
    [0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0];

/// Distinct `tool` labels of `tidemark_upstream_call_duration_seconds` per upstream and core;
/// calls of further tools are counted under `tool="other"`, so a server listing thousands of
/// tools cannot blow up the exposition.
pub(crate) const UPSTREAM_TOOL_LABELS_MAX: usize = 32;

/// Upstreams with a series of their own in `tidemark_upstream_call_duration_seconds` (more
/// are counted under the last one's index as `upstream="other"`).
pub(crate) const UPSTREAM_LABELS_MAX: usize = 16;

/// The era a request was served by (the `era` label): `none` when it was refused before an
/// era was chosen or its body decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum EraLabel {
    #[default]
    None,
    Legacy,
    Modern,
}

const ERA_LABELS: [&str; 3] = ["none", "legacy", "modern"];

/// The `method` label values: the MCP methods, `notification` for any client notification,
/// `GET`/`DELETE` for those HTTP requests (stream resumes, standalone streams, session ends),
/// `other` for anything else (unknown methods, responses, undecodable bodies): a bounded set,
/// whatever clients send.
const METHOD_LABELS: [&str; 22] = [
    "other",
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "subscriptions/listen",
    "server/discover",
    "notification",
    "GET",
    "DELETE",
];

/// What a request was (its `era` and `method` labels), set by the era that decoded it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct RequestLabel {
    era: EraLabel,
    method: u8,
}

impl RequestLabel {
    /// A request of `era` whose JSON-RPC method (or `notification`, `GET`, `DELETE`) is
    /// `method`.
    pub(crate) fn new(era: EraLabel, method: &str) -> RequestLabel {
        let index = METHOD_LABELS.iter().position(|m| *m == method).unwrap_or(0);
        RequestLabel { era, method: index as u8 }
    }
}

/// One histogram of one core: counts per bucket (not cumulative; the exporter adds them up)
/// and the sum of the observations in raw units (nanoseconds or events). Written by its core
/// only, as `Counter`s.
pub(crate) struct Histogram {
    /// Upper bounds in raw units, ascending; an observation above the last lands in +Inf.
    bounds: &'static [u64],
    buckets: Box<[Counter]>,
    sum: Counter,
}

/// Raw units per second of a duration histogram (observations are nanoseconds).
const NANOS_PER_SECOND: f64 = 1e9;

fn nanos_bounds() -> &'static [u64] {
    static BOUNDS: OnceLock<Vec<u64>> = OnceLock::new();
    BOUNDS.get_or_init(|| {
        DURATION_BUCKETS_SECONDS.iter().map(|s| (s * NANOS_PER_SECOND).round() as u64).collect()
    })
}

fn count_bounds() -> &'static [u64] {
    static BOUNDS: OnceLock<Vec<u64>> = OnceLock::new();
    BOUNDS.get_or_init(|| EVENT_COUNT_BUCKETS.iter().map(|n| *n as u64).collect())
}

impl Histogram {
    fn with_bounds(bounds: &'static [u64]) -> Histogram {
        let buckets = (0..=bounds.len()).map(|_| Counter::default()).collect();
        Histogram { bounds, buckets, sum: Counter::default() }
    }

    /// A duration histogram (`DURATION_BUCKETS_SECONDS`).
    pub(crate) fn seconds() -> Histogram {
        Histogram::with_bounds(nanos_bounds())
    }

    /// An event-count histogram (`EVENT_COUNT_BUCKETS`).
    pub(crate) fn events() -> Histogram {
        Histogram::with_bounds(count_bounds())
    }

    /// Counts one observation of `raw` units: a binary search over the bounds, two stores.
    pub(crate) fn observe(&self, raw: u64) {
        let bucket = self.bounds.partition_point(|bound| *bound < raw);
        self.buckets[bucket].inc();
        self.sum.add(raw);
    }

    /// `observe` from one of several writers (`Counter::add_shared`).
    pub(crate) fn observe_shared(&self, raw: u64) {
        let bucket = self.bounds.partition_point(|bound| *bound < raw);
        self.buckets[bucket].add_shared(1);
        self.sum.add_shared(raw);
    }

    /// Counts the time since `start` (a duration histogram).
    pub(crate) fn observe_since(&self, start: Instant) {
        self.observe_between(start, Instant::now());
    }

    /// Counts the time from `start` to `end` (a duration histogram; 0 when `end` is earlier),
    /// for a caller that read the clock already.
    pub(crate) fn observe_between(&self, start: Instant, end: Instant) {
        let took = end.saturating_duration_since(start);
        self.observe(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    fn count(&self) -> u64 {
        self.buckets.iter().map(Counter::get).sum()
    }
}

/// Appends one histogram series, merged over `parts` (the same series of every core): the
/// cumulative `_bucket`s, `_sum` (in base units) and `_count`. `labels` is empty or
/// `a="x",b="y"`.
fn render_series(out: &mut String, family: &str, labels: &str, parts: &[&Histogram]) {
    let Some(first) = parts.first() else { return };
    let seconds = std::ptr::eq(first.bounds, nanos_bounds());
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0u64;
    for (i, bound) in first.bounds.iter().enumerate() {
        cumulative += parts.iter().map(|h| h.buckets[i].get()).sum::<u64>();
        let le = if seconds { *bound as f64 / NANOS_PER_SECOND } else { *bound as f64 };
        let _ = writeln!(out, "{family}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}");
    }
    let count: u64 = parts.iter().map(|h| h.count()).sum();
    let _ = writeln!(out, "{family}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let raw: u64 = parts.iter().map(|h| h.sum.get()).sum();
    let sum = if seconds { raw as f64 / NANOS_PER_SECOND } else { raw as f64 };
    let braced = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{family}_sum{braced} {sum}");
    let _ = writeln!(out, "{family}_count{braced} {count}");
}

fn render_header(out: &mut String, family: &str, help: &str) {
    let _ = writeln!(out, "# HELP {family} {help}");
    let _ = writeln!(out, "# TYPE {family} histogram");
}

/// One upstream's call durations on one core: a series per tool label, claimed in call order
/// (the name is written once by the core, read by the exporter), the last slot `other`.
pub(crate) struct UpstreamCalls {
    tools: [OnceLock<Box<str>>; UPSTREAM_TOOL_LABELS_MAX],
    durations: [Histogram; UPSTREAM_TOOL_LABELS_MAX + 1],
    /// Slots claimed so far (written by this core only).
    claimed: Counter,
}

impl Default for UpstreamCalls {
    fn default() -> Self {
        UpstreamCalls {
            tools: std::array::from_fn(|_| OnceLock::new()),
            durations: std::array::from_fn(|_| Histogram::seconds()),
            claimed: Counter::default(),
        }
    }
}

impl UpstreamCalls {
    /// The series of `tool`: its own slot (claimed now if one is free), else `other`.
    fn series(&self, tool: &str) -> &Histogram {
        let claimed = self.claimed.get() as usize;
        if let Some(i) =
            self.tools[..claimed].iter().position(|t| t.get().is_some_and(|t| &**t == tool))
        {
            return &self.durations[i];
        }
        if claimed < UPSTREAM_TOOL_LABELS_MAX {
            let _ = self.tools[claimed].set(Box::from(tool));
            self.claimed.inc();
            return &self.durations[claimed];
        }
        &self.durations[UPSTREAM_TOOL_LABELS_MAX]
    }
}

/// Picks one of a core's unlabelled histograms (for rendering them alike).
type PickHistogram = fn(&Histograms) -> &Histogram;

/// One core's histograms.
pub(crate) struct Histograms {
    /// `tidemark_request_duration_seconds`, by `RequestLabel` (era × method).
    request: Box<[Histogram]>,
    /// `tidemark_sse_first_event_seconds`.
    pub(crate) sse_first_event: Histogram,
    /// `tidemark_resume_replay_events`.
    pub(crate) resume_replay: Histogram,
    /// `tidemark_post_held_seconds`.
    pub(crate) post_held: Histogram,
    /// `tidemark_drain_duration_seconds`.
    pub(crate) drain: Histogram,
    /// `tidemark_reaper_step_seconds`.
    pub(crate) reaper_step: Histogram,
    /// `tidemark_durable_adoption_seconds`.
    pub(crate) adoption: Histogram,
    /// `tidemark_upstream_call_duration_seconds`, by upstream index then tool; the names of
    /// the upstreams are set once at start (`name_upstreams`).
    upstreams: [UpstreamCalls; UPSTREAM_LABELS_MAX],
    upstream_names: arc_swap::ArcSwapOption<Vec<String>>,
    /// The failure counters of each upstream (by index, as `upstreams`).
    health: [UpstreamHealth; UPSTREAM_LABELS_MAX],
}

/// One upstream's failure counters on one core (`--upstream-policy`, the circuit breaker).
#[derive(Default)]
pub(crate) struct UpstreamHealth {
    /// `tidemark_upstream_breaker_open_total`: times its breaker opened (or re-opened after a
    /// failed probe).
    pub(crate) breaker_opened: Counter,
    /// `tidemark_upstream_breaker_rejected_total`: calls failed fast by its open breaker.
    pub(crate) breaker_rejected: Counter,
    /// `tidemark_upstream_down_total`: session starts that could not reach it (a required
    /// upstream's refused `initialize`, an optional one's session started without it).
    pub(crate) down: Counter,
    /// `tidemark_upstream_token_exchanges_total{outcome="exchanged"}`: token exchanges
    /// (`--upstream-auth NAME=exchange`) that issued a token (a cached token's use is none).
    pub(crate) exchanged: Counter,
    /// `…{outcome="refused"}`: exchanges the authorization server refused.
    pub(crate) exchange_refused: Counter,
    /// `…{outcome="failed"}`: exchanges with no usable answer (unreachable, unusable, over
    /// `--upstream-exchange-answer-bytes`, or not queued past `--upstream-exchange-queue-entries`).
    pub(crate) exchange_failed: Counter,
}

/// The per-upstream counter series: family, labels past `upstream`, help, and the counter of
/// `UpstreamHealth` (a family's series are next to each other).
type PickHealth = fn(&UpstreamHealth) -> &Counter;
const EXCHANGES_HELP: &str = "Token exchanges (RFC 8693, --upstream-auth NAME=exchange) made for an upstream's calls, by upstream and outcome: exchanged, refused (by the authorization server) or failed (unreachable, unusable, over --upstream-exchange-answer-bytes, or past --upstream-exchange-queue-entries); a cached token's use is not counted.";
const HEALTH_FAMILIES: [(&str, &str, &str, PickHealth); 6] = [
    ("tidemark_upstream_breaker_open_total", "", "Times an upstream's circuit breaker opened (--upstream-breaker-failures consecutive failed calls, or a failed half-open probe), by upstream.", |h| &h.breaker_opened),
    ("tidemark_upstream_breaker_rejected_total", "", "Tool calls failed fast (-32603) by an open circuit breaker without reaching the upstream, by upstream.", |h| &h.breaker_rejected),
    ("tidemark_upstream_down_total", "", "Session starts (legacy initialize, or a core's 2026-07-28 link) that could not reach an upstream: refused 503 when it is required, started without it when optional; by upstream.", |h| &h.down),
    ("tidemark_upstream_token_exchanges_total", ",outcome=\"exchanged\"", EXCHANGES_HELP, |h| &h.exchanged),
    ("tidemark_upstream_token_exchanges_total", ",outcome=\"refused\"", EXCHANGES_HELP, |h| &h.exchange_refused),
    ("tidemark_upstream_token_exchanges_total", ",outcome=\"failed\"", EXCHANGES_HELP, |h| &h.exchange_failed),
];

impl Default for Histograms {
    fn default() -> Self {
        Histograms {
            request: (0..ERA_LABELS.len() * METHOD_LABELS.len())
                .map(|_| Histogram::seconds())
                .collect(),
            sse_first_event: Histogram::seconds(),
            resume_replay: Histogram::events(),
            post_held: Histogram::seconds(),
            drain: Histogram::seconds(),
            reaper_step: Histogram::seconds(),
            adoption: Histogram::seconds(),
            upstreams: std::array::from_fn(|_| UpstreamCalls::default()),
            upstream_names: Default::default(),
            health: std::array::from_fn(|_| UpstreamHealth::default()),
        }
    }
}

impl Histograms {
    /// Counts a request of `label` that took from `start` until `end` (read by the caller: a
    /// stream's driver reads the clock once at the stream's end).
    pub(crate) fn request(&self, label: RequestLabel, start: Instant, end: Instant) {
        let index = label.era as usize * METHOD_LABELS.len() + usize::from(label.method);
        self.request[index].observe_between(start, end);
    }

    /// Names the upstreams (`upstream` label, by index): at start, and again when a reload
    /// adds one (a name keeps its index for the process's life, so its series go on).
    pub(crate) fn name_upstreams(&self, names: Vec<String>) {
        self.upstream_names.store(Some(Arc::new(names)));
    }

    /// The upstreams' names by index, as last set (`None` before the first).
    fn names_of_upstreams(&self) -> Option<Arc<Vec<String>>> {
        self.upstream_names.load_full()
    }

    /// The failure counters of upstream `index`.
    pub(crate) fn upstream_health(&self, index: usize) -> &UpstreamHealth {
        &self.health[index.min(UPSTREAM_LABELS_MAX - 1)]
    }

    /// The failure counters of the upstream named `name` (its `upstream` label); `None` before
    /// the names are set. For rare events only: it searches the names.
    pub(crate) fn upstream_health_named(&self, name: &str) -> Option<&UpstreamHealth> {
        let names = self.names_of_upstreams()?;
        let index = names.iter().position(|known| known == name)?;
        Some(self.upstream_health(index))
    }

    /// Appends the per-upstream counter families (every upstream, zeros included, so a
    /// dashboard sees the series before the first failure).
    fn render_health(cores: &[Arc<CoreMetrics>], out: &mut String) {
        let names = cores.first().and_then(|c| c.hist.names_of_upstreams());
        let names = names.as_deref();
        let Some(names) = names else { return };
        let mut last_family = "";
        for (family, labels, help, pick) in HEALTH_FAMILIES {
            if family != last_family {
                let _ = writeln!(out, "# HELP {family} {help}");
                let _ = writeln!(out, "# TYPE {family} counter");
                last_family = family;
            }
            for (index, name) in names.iter().enumerate().take(UPSTREAM_LABELS_MAX) {
                let name = if index == UPSTREAM_LABELS_MAX - 1 && names.len() > UPSTREAM_LABELS_MAX
                {
                    "other"
                } else {
                    name.as_str()
                };
                let total: u64 = cores.iter().map(|c| pick(&c.hist.health[index]).get()).sum();
                let _ = writeln!(out, "{family}{{upstream=\"{}\"{labels}}} {total}", escape(name));
            }
        }
    }

    /// Counts a call of `tool` on upstream `index` that took from `start` until now.
    pub(crate) fn upstream_call(&self, index: usize, tool: &str, start: Instant) {
        self.upstreams[index.min(UPSTREAM_LABELS_MAX - 1)].series(tool).observe_since(start);
    }

    /// Appends every histogram family merged over `cores` (series nobody observed left out).
    fn render(cores: &[Arc<CoreMetrics>], out: &mut String) {
        let family = "tidemark_request_duration_seconds";
        render_header(out, family, "From a request read whole to its answer written (a stream: to its end), by era and method.");
        for (era_index, era) in ERA_LABELS.iter().enumerate() {
            for (method_index, method) in METHOD_LABELS.iter().enumerate() {
                let index = era_index * METHOD_LABELS.len() + method_index;
                let parts: Vec<&Histogram> = cores.iter().map(|c| &c.hist.request[index]).collect();
                if parts.iter().any(|h| h.count() > 0) {
                    let labels = format!("era=\"{era}\",method=\"{method}\"");
                    render_series(out, family, &labels, &parts);
                }
            }
        }
        let singles: [(&str, &str, PickHistogram); 6] = [
            ("tidemark_sse_first_event_seconds", "From a request read whole to the first write of its SSE stream (its head and the events ready then, the priming event of a legacy stream).", |h| &h.sse_first_event),
            ("tidemark_resume_replay_events", "Events a resume with Last-Event-ID replayed from the ring.", |h| &h.resume_replay),
            ("tidemark_post_held_seconds", "How long a POST was held until owed streams were resumed (or it was refused, held_too_long).", |h| &h.post_held),
            ("tidemark_drain_duration_seconds", "From a drain's start (SIGTERM/SIGINT) to a core's quiet or the drain's end.", |h| &h.drain),
            ("tidemark_reaper_step_seconds", "How long one step of the session reaper held its core's event loop (expiring a bounded batch of the sessions that were due; a tick with none due is not a step): the reaper's share of the loop's worst stall.", |h| &h.reaper_step),
            ("tidemark_durable_adoption_seconds", "From a request naming a dead node's session to the session rebuilt here from the store (--durable).", |h| &h.adoption),
        ];
        for (family, help, pick) in singles {
            render_header(out, family, help);
            let parts: Vec<&Histogram> = cores.iter().map(|c| pick(&c.hist)).collect();
            render_series(out, family, "", &parts);
        }
        let family = "tidemark_upstream_call_duration_seconds";
        render_header(out, family, "tools/call forwarded to an --upstream, from sent to answered, by upstream and tool (at most UPSTREAM_TOOL_LABELS_MAX tools each, the rest as tool=\"other\").");
        let names = cores.first().and_then(|c| c.hist.names_of_upstreams());
        let names = names.as_deref();
        for (index, name) in names.into_iter().flatten().enumerate().take(UPSTREAM_LABELS_MAX) {
            let name = if index == UPSTREAM_LABELS_MAX - 1
                && names.is_some_and(|n| n.len() > UPSTREAM_LABELS_MAX)
            {
                "other"
            } else {
                name.as_str()
            };
            // Tool slots are claimed per core, in call order: merge by name.
            let mut tools: Vec<&str> = Vec::new();
            for c in cores {
                for t in c.hist.upstreams[index].tools.iter().filter_map(|t| t.get()) {
                    if !tools.contains(&&**t) {
                        tools.push(t);
                    }
                }
            }
            for tool in &tools {
                let parts: Vec<&Histogram> = cores
                    .iter()
                    .filter_map(|c| {
                        let calls = &c.hist.upstreams[index];
                        let slot = calls
                            .tools
                            .iter()
                            .position(|t| t.get().is_some_and(|t| &**t == *tool))?;
                        Some(&calls.durations[slot])
                    })
                    .collect();
                let labels = format!("upstream=\"{}\",tool=\"{}\"", escape(name), escape(tool));
                render_series(out, family, &labels, &parts);
            }
            let other: Vec<&Histogram> = cores
                .iter()
                .map(|c| &c.hist.upstreams[index].durations[UPSTREAM_TOOL_LABELS_MAX])
                .collect();
            if other.iter().any(|h| h.count() > 0) {
                let labels = format!("upstream=\"{}\",tool=\"other\"", escape(name));
                render_series(out, family, &labels, &other);
            }
        }
    }
}

/// A label value as the text format writes it (backslash, double quote and newline escaped).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What the durable mirror's queues hold now, read at each scrape (`durable::queue`): exact
/// whichever writer drains them (the mirror thread, or each core's own with
/// `--durable-writer core`), with no writer publishing a snapshot per batch.
pub(crate) trait QueueLevels: Send + Sync {
    /// Records and charged bytes queued on every core together.
    fn levels(&self) -> (u64, u64);
}

/// The durable mirror's figures (`--durable`), written by the mirror thread and with
/// `--durable-writer core` by each core's writer too: every count goes through
/// `Counter::add_shared` (`up` has the thread as its one writer).
pub(crate) struct DurableStats {
    /// 1 while the store is connected and its last write succeeded.
    pub(crate) up: Counter,
    pub(crate) records_written_total: Counter,
    /// Pipelines (batches) the store acknowledged: records per batch is what batching saves.
    pub(crate) batches_total: Counter,
    pub(crate) records_dropped_total: Counter,
    pub(crate) store_errors_total: Counter,
    /// Connections that reached another primary than the last (a Sentinel failover followed).
    pub(crate) failovers_total: Counter,
    /// Batches the primary took but fewer replicas than `--durable-replicas` acknowledged.
    pub(crate) batches_unreplicated_total: Counter,
    /// The cores' queues (`tidemark_durable_queue_records`, `_queue_bytes`), set once at start.
    pub(crate) queues: OnceLock<Box<dyn QueueLevels>>,
    /// From a ring append to the store's acknowledgement of its event.
    pub(crate) lag: Histogram,
}

impl Default for DurableStats {
    fn default() -> Self {
        DurableStats {
            up: Counter::default(),
            records_written_total: Counter::default(),
            batches_total: Counter::default(),
            records_dropped_total: Counter::default(),
            store_errors_total: Counter::default(),
            failovers_total: Counter::default(),
            batches_unreplicated_total: Counter::default(),
            queues: OnceLock::new(),
            lag: Histogram::seconds(),
        }
    }
}

impl DurableStats {
    /// Appends the mirror's families in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        let families: [(&str, &str, &str, &Counter); 7] = [
            ("tidemark_durable_up", "gauge", "1 while the durable store (--durable) is connected and its last write succeeded.", &self.up),
            ("tidemark_durable_records_written_total", "counter", "Mirror records the store acknowledged.", &self.records_written_total),
            ("tidemark_durable_batches_total", "counter", "Mirror batches (one pipelined round trip each) the store acknowledged.", &self.batches_total),
            ("tidemark_durable_records_dropped_total", "counter", "Mirror records not written because the store was down or failed (their sessions stop being durable until rewritten).", &self.records_dropped_total),
            ("tidemark_durable_store_errors_total", "counter", "Connections to the durable store that failed or broke.", &self.store_errors_total),
            ("tidemark_durable_failovers_total", "counter", "Connections to the durable store that reached another primary than the last one (a Sentinel or Cluster failover followed).", &self.failovers_total),
            ("tidemark_durable_batches_unreplicated_total", "counter", "Mirror batches the primary took but fewer replicas than --durable-replicas acknowledged within the wait (their sessions stop being durable until rewritten).", &self.batches_unreplicated_total),
        ];
        for (family, kind, help, counter) in families {
            let _ = writeln!(out, "# HELP {family} {help}");
            let _ = writeln!(out, "# TYPE {family} {kind}");
            let _ = writeln!(out, "{family} {}", counter.get());
        }
        let (records, bytes) = self.queues.get().map_or((0, 0), |queues| queues.levels());
        let levels = [
            (
                "tidemark_durable_queue_records",
                "Mirror records queued on every core together.",
                records,
            ),
            (
                "tidemark_durable_queue_bytes",
                "Charged bytes of the mirror records queued on every core together.",
                bytes,
            ),
        ];
        for (family, help, value) in levels {
            let _ = writeln!(out, "# HELP {family} {help}");
            let _ = writeln!(out, "# TYPE {family} gauge");
            let _ = writeln!(out, "{family} {value}");
        }
        let family = "tidemark_durable_lag_seconds";
        render_header(
            out,
            family,
            "From a ring append to the durable store's acknowledgement of its event (--durable).",
        );
        render_series(out, family, "", &[&self.lag]);
    }
}

thread_local! {
    /// The metrics of the core this thread runs (`enter_core`), for what is built on the core
    /// without a handle to them (an upstream's provider, made by its factory).
    static THIS_CORE: std::cell::RefCell<Option<Arc<CoreMetrics>>> = const { std::cell::RefCell::new(None) };
}

/// Marks this thread as the core owning `metrics` (a worker, before its providers are made).
pub(crate) fn enter_core(metrics: Arc<CoreMetrics>) {
    THIS_CORE.with(|core| *core.borrow_mut() = Some(metrics));
}

/// The metrics of this thread's core (`None` off the worker threads).
pub(crate) fn this_core() -> Option<Arc<CoreMetrics>> {
    THIS_CORE.with(|core| core.borrow().clone())
}

/// A counter written by one core only.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn add(&self, n: u64) {
        // Single writer: a load and a store, not an atomic read-modify-write.
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Adds from one of several writers (the durable mirror's figures with
    /// `--durable-writer core`: each core's writer and the mirror thread): an atomic
    /// read-modify-write, for a counter touched once per batch, never per request.
    pub(crate) fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
    }

    /// Sets a gauge (its core's value, e.g. sampled by the reaper).
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_cores_and_groups_families() {
        let a = Arc::new(CoreMetrics::default());
        let b = Arc::new(CoreMetrics::default());
        a.rejected_owed.inc();
        b.rejected_owed.add(2);
        b.rejected_id_reused.inc();
        let mut out = String::new();
        CoreMetrics::render(&[a, b], &mut out);
        assert!(out.contains("\ntidemark_migrations_rejected_total{reason=\"retry_of_owed\"} 3\n"));
        assert!(out.contains("\ntidemark_migrations_rejected_total{reason=\"id_reused\"} 1\n"));
        assert_eq!(out.matches("# TYPE tidemark_migrations_rejected_total counter").count(), 1);
    }

    #[test]
    fn every_family_is_prefixed_typed_and_helped_but_the_deprecated_copies() {
        let mut out = String::new();
        CoreMetrics::render(&[Arc::new(CoreMetrics::default())], &mut out);
        let deprecated: Vec<&str> = DEPRECATED_ALIASES.iter().map(|(old, _)| *old).collect();
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name.trim_end_matches("_bucket").trim_end_matches("_sum");
            let family = family.trim_end_matches("_count");
            assert!(name.starts_with("tidemark_") || deprecated.contains(&name), "{line}");
            let typed = out.contains(&format!("# TYPE {name} "))
                || out.contains(&format!("# TYPE {family} histogram"));
            assert!(typed, "no TYPE for {line}");
        }
    }

    #[test]
    fn each_family_is_introduced_once() {
        let mut out = String::new();
        CoreMetrics::render(&[Arc::new(CoreMetrics::default())], &mut out);
        for help in out.lines().filter(|l| l.starts_with("# HELP ")) {
            assert_eq!(out.matches(&format!("{help}\n")).count(), 1, "{help}");
        }
    }

    #[test]
    fn a_renamed_family_is_copied_under_its_old_name_marked_deprecated() {
        let core = Arc::new(CoreMetrics::default());
        core.gaps_total.add(4);
        core.rejected_owed.inc();
        let mut out = String::new();
        CoreMetrics::render(&[core], &mut out);
        assert!(out.contains("\ntidemark_gaps_total 4\n"));
        assert!(out.contains("\ngaps_total 4\n"));
        assert!(out.contains("\nmigrations_rejected_total{reason=\"retry_of_owed\"} 1\n"));
        assert!(out.contains("# HELP gaps_total Deprecated: renamed tidemark_gaps_total"));
    }

    #[test]
    fn histograms_are_cumulative_and_merged_over_cores() {
        let (a, b) = (Arc::new(CoreMetrics::default()), Arc::new(CoreMetrics::default()));
        a.hist.resume_replay.observe(0);
        a.hist.resume_replay.observe(3);
        b.hist.resume_replay.observe(3);
        b.hist.resume_replay.observe(1_000_000);
        let mut out = String::new();
        CoreMetrics::render(&[a, b], &mut out);
        assert!(out.contains("\ntidemark_resume_replay_events_bucket{le=\"0\"} 1\n"), "{out}");
        assert!(out.contains("\ntidemark_resume_replay_events_bucket{le=\"2\"} 1\n"));
        assert!(out.contains("\ntidemark_resume_replay_events_bucket{le=\"5\"} 3\n"));
        assert!(out.contains("\ntidemark_resume_replay_events_bucket{le=\"10000\"} 3\n"));
        assert!(out.contains("\ntidemark_resume_replay_events_bucket{le=\"+Inf\"} 4\n"));
        assert!(out.contains("\ntidemark_resume_replay_events_sum 1000006\n"));
        assert!(out.contains("\ntidemark_resume_replay_events_count 4\n"));
    }

    #[test]
    fn a_duration_on_a_bound_counts_in_that_bucket_in_seconds() {
        let core = Arc::new(CoreMetrics::default());
        core.hist.post_held.observe(1_000_000); // 1 ms, the bound `le="0.001"`
        let mut out = String::new();
        CoreMetrics::render(&[core], &mut out);
        assert!(out.contains("\ntidemark_post_held_seconds_bucket{le=\"0.0005\"} 0\n"), "{out}");
        assert!(out.contains("\ntidemark_post_held_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(out.contains("\ntidemark_post_held_seconds_sum 0.001\n"));
    }

    #[test]
    fn requests_are_labelled_by_era_and_method_and_unknown_methods_fold_into_other() {
        let core = Arc::new(CoreMetrics::default());
        let start = Instant::now();
        core.hist.request(RequestLabel::new(EraLabel::Modern, "tools/call"), start, Instant::now());
        core.hist.request(
            RequestLabel::new(EraLabel::Legacy, "vendor/anything"),
            start,
            Instant::now(),
        );
        let mut out = String::new();
        CoreMetrics::render(&[core], &mut out);
        let call =
            "tidemark_request_duration_seconds_count{era=\"modern\",method=\"tools/call\"} 1";
        assert!(out.contains(call), "{out}");
        assert!(out.contains("_count{era=\"legacy\",method=\"other\"} 1"));
        assert!(!out.contains("method=\"vendor/anything\""));
    }

    #[test]
    fn upstream_failure_counters_are_per_upstream_and_summed_over_cores() {
        let (a, b) = (Arc::new(CoreMetrics::default()), Arc::new(CoreMetrics::default()));
        a.hist.name_upstreams(vec!["fs".to_owned(), "web".to_owned()]);
        a.hist.upstream_health(1).breaker_opened.inc();
        b.hist.upstream_health(1).breaker_opened.add(2);
        b.hist.upstream_health(0).breaker_rejected.inc();
        let mut out = String::new();
        CoreMetrics::render(&[a, b], &mut out);
        assert!(out.contains("\ntidemark_upstream_breaker_open_total{upstream=\"web\"} 3\n"));
        assert!(out.contains("\ntidemark_upstream_breaker_open_total{upstream=\"fs\"} 0\n"));
        assert!(out.contains("\ntidemark_upstream_breaker_rejected_total{upstream=\"fs\"} 1\n"));
        assert!(out.contains("\ntidemark_upstream_down_total{upstream=\"web\"} 0\n"), "{out}");
    }

    #[test]
    fn token_exchanges_are_counted_by_upstream_name_and_outcome_under_one_header() {
        // Goal: the exchange counters are found by the upstream's name and rendered as one
        // family (one HELP/TYPE) with an `outcome` label, zeros included. Method: count, render.
        let core = Arc::new(CoreMetrics::default());
        assert!(core.hist.upstream_health_named("web").is_none(), "before the names are set");
        core.hist.name_upstreams(vec!["fs".to_owned(), "web".to_owned()]);
        let web = core.hist.upstream_health_named("web").expect("named");
        web.exchanged.add(2);
        web.exchange_refused.inc();
        assert!(core.hist.upstream_health_named("nope").is_none());
        let mut out = String::new();
        CoreMetrics::render(&[core], &mut out);
        let family = "tidemark_upstream_token_exchanges_total";
        assert_eq!(out.matches(&format!("# TYPE {family} counter\n")).count(), 1, "{out}");
        assert!(out.contains(&format!("\n{family}{{upstream=\"web\",outcome=\"exchanged\"}} 2\n")));
        assert!(out.contains(&format!("\n{family}{{upstream=\"web\",outcome=\"refused\"}} 1\n")));
        assert!(out.contains(&format!("\n{family}{{upstream=\"fs\",outcome=\"failed\"}} 0\n")));
    }

    #[test]
    fn tool_labels_stop_at_the_cap_and_the_rest_count_as_other() {
        let core = Arc::new(CoreMetrics::default());
        core.hist.name_upstreams(vec!["fs".to_owned()]);
        let start = Instant::now();
        for i in 0..UPSTREAM_TOOL_LABELS_MAX + 5 {
            core.hist.upstream_call(0, &format!("tool{i}"), start);
        }
        core.hist.upstream_call(0, "tool0", start);
        let mut out = String::new();
        CoreMetrics::render(&[core], &mut out);
        let family = "tidemark_upstream_call_duration_seconds_count";
        assert_eq!(out.matches(family).count(), UPSTREAM_TOOL_LABELS_MAX + 1, "{out}");
        assert!(out.contains(&format!("{family}{{upstream=\"fs\",tool=\"tool0\"}} 2\n")));
        assert!(out.contains(&format!("{family}{{upstream=\"fs\",tool=\"other\"}} 5\n")));
    }

    #[test]
    fn gauges_are_summed_and_given_per_core() {
        let (a, b) = (Arc::new(CoreMetrics::default()), Arc::new(CoreMetrics::default()));
        a.sessions_active.set(2);
        b.sessions_active.set(3);
        let mut out = String::new();
        CoreMetrics::render(&[a, b], &mut out);
        assert!(out.contains("\ntidemark_sessions_active 5\n"));
        assert!(out.contains("\ntidemark_core_sessions_active{core=\"0\"} 2\n"));
        assert!(out.contains("\ntidemark_core_sessions_active{core=\"1\"} 3\n"));
    }
}
