//! Counters, one set per core, written only by their core (a relaxed load + store, no
//! read-modify-write on the hot path) and summed by the admin listener (`admin`, `GET
//! /metrics`) into the Prometheus text format.
//!
//! Never: blocks a worker; the exporter only reads.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident => $prom:literal, $help:literal;)*) => {
        /// One core's counters.
        #[derive(Default)]
        pub(crate) struct CoreMetrics { $(pub(crate) $name: Counter,)* }

        impl CoreMetrics {
            /// Appends every counter, summed over `cores`, in the Prometheus text format.
            #[allow(unused_assignments)]
            pub(crate) fn render(cores: &[std::sync::Arc<CoreMetrics>], out: &mut String) {
                use std::fmt::Write;
                let mut last_family = "";
                $(
                    let total: u64 = cores.iter().map(|c| c.$name.get()).sum();
                    let family = $prom.split('{').next().unwrap_or($prom);
                    if family != last_family {
                        let _ = writeln!(out, "# HELP {} {}", family, $help);
                        let kind = if family.ends_with("_total") { "counter" } else { "gauge" };
                        let _ = writeln!(out, "# TYPE {} {}", family, kind);
                        last_family = family;
                    }
                    let _ = writeln!(out, "{} {}", $prom, total);
                )*
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
    rejected_owed => "migrations_rejected_total{reason=\"retry_of_owed\"}", "POSTs refused by the migration boundary.";
    rejected_id_reused => "migrations_rejected_total{reason=\"id_reused\"}", "POSTs refused by the migration boundary.";
    rejected_held_too_long => "migrations_rejected_total{reason=\"held_too_long\"}", "POSTs refused by the migration boundary.";
    rejected_key_reused => "migrations_rejected_total{reason=\"idempotency_key_reused\"}", "POSTs refused by the migration boundary.";
    posts_held_total => "posts_held_total", "POSTs held until owed streams were resumed.";
    dedup_hits_total => "dedup_hits_total", "POSTs answered from an earlier stream by Idempotency-Key.";
    replays_total => "replays_total", "Resumes with Last-Event-ID that replayed a stream.";
    gaps_total => "gaps_total", "Resumes that found evicted events (-31003).";
    owed_abandoned_total => "owed_abandoned_total", "Owed streams nobody resumed in time.";
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
    auth_foreign_subject => "tidemark_auth_foreign_subject_total", "Requests naming a session, task, Idempotency-Key or requestState of another subject (or none): answered as unknown (404 / not found).";
    limit_header => "tidemark_limit_hits_total{limit=\"header\"}", "Requests refused at a limit.";
    limit_body => "tidemark_limit_hits_total{limit=\"body\"}", "Requests refused at a limit.";
    misrouted_sessions => "tidemark_misrouted_total{name=\"session\"}", "Requests naming a session or task of another node (--node-id): the balancer sent them to the wrong node.";
    misrouted_tasks => "tidemark_misrouted_total{name=\"task\"}", "Requests naming a session or task of another node (--node-id): the balancer sent them to the wrong node.";
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

    pub(crate) fn sub(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
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
        assert!(out.contains("migrations_rejected_total{reason=\"retry_of_owed\"} 3\n"));
        assert!(out.contains("migrations_rejected_total{reason=\"id_reused\"} 1\n"));
        assert_eq!(out.matches("# TYPE migrations_rejected_total counter").count(), 1);
    }
}
