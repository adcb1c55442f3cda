//! The edge of the MCP endpoint: one parsed HTTP request → the path check, the Host/Origin
//! rules (DNS-rebinding protection), CORS, the protected resource metadata and the bearer
//! token (`auth`: 401/400/403 before any session or era is looked at), HEAD and unknown
//! methods, a POST's Content-Type and Accept, the core that serves it (`owner`: from its task, session and key, in that order),
//! the choice of the protocol path (era) that serves it, and a POST's admission (`admit`: its
//! one decode, label, span, access and era). The only module that sees both eras: each takes
//! an admitted request and answers with its own `Outcome`, which `handle` turns into the
//! connection's.
//!
//! Called by `runtime::conn` once per request; answers with an `Outcome` telling the connection
//! what to do next: a whole reply, a hand-off, or a `Stream` (each era's streams, gathered in
//! one enum the runtime drives). Owns `Endpoint`, one core's view of both eras. Never:
//! touches a socket, decodes a body outside `admit`, reads a session, or drives a stream.

mod admit;
mod audit;
pub(crate) mod cors;
mod expire;
mod owner;

use std::rc::Rc;

use crate::auth::{Denial, TokenError};
use crate::config::Config;
pub(crate) use crate::core::Request;
use crate::core::{refuse, reply, Core};
use crate::http::{is_media_type, lists_media_type, Method};
use crate::legacy::{self, LegacyCore};
use crate::metrics::{EraLabel, RequestLabel};
use crate::modern::{self, ModernCore};
use crate::wire::{Answer, Refusal, Status};
use admit::{era, Era};
use owner::{Misrouted, Owner};

/// One core's endpoint: the shared `Core` (through `Deref`) and each era's own state.
pub(crate) struct Endpoint {
    pub(crate) legacy: Rc<LegacyCore>,
    pub(crate) modern: Rc<ModernCore>,
}

impl Endpoint {
    /// Both eras' state on core `shared`, empty.
    pub(crate) fn new(shared: Rc<Core>) -> Endpoint {
        let legacy = Rc::new(LegacyCore::new(shared.clone()));
        let modern = Rc::new(ModernCore::new(shared));
        Endpoint { legacy, modern }
    }
}

impl std::ops::Deref for Endpoint {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.legacy
    }
}

/// What the connection does after `handle`.
pub(crate) enum Outcome {
    /// A whole response is in the output buffer.
    Reply { keep_alive: bool },
    /// A response stream the connection drives next (`runtime::stream`); its head is in the
    /// buffer, or (a 2026-07-28 call or keyed request) rendered by the stream once known.
    Stream(Stream),
    /// The request belongs to another core (`owner`: its task, session or key): move the
    /// connection there, unanswered.
    HandOff(u16),
}

/// Every kind of response stream, each a `core::Source` of its era: the connection drives the
/// one it gets without knowing either era.
pub(crate) enum Stream {
    /// A legacy request or GET stream over its session's replay ring.
    Ring(legacy::SseJob),
    /// A 2026-07-28 call still running: closing the connection cancels it.
    Call(modern::call::CallStream),
    /// A 2026-07-28 request with an `Idempotency-Key` reading its keyed call's record.
    Observe(modern::Observer),
    /// A 2026-07-28 `subscriptions/listen` stream.
    Listen(modern::listen::ListenJob),
    /// A 2026-07-28 call whose line the audit trail writes at its end (`--audit-log`).
    AuditedCall(Box<audit::Audited<modern::call::CallStream>>),
    /// A keyed 2026-07-28 call's first request, audited (`--audit-log`).
    AuditedObserve(Box<audit::Audited<modern::Observer>>),
}

impl From<crate::core::Outcome<modern::Job>> for Outcome {
    fn from(outcome: crate::core::Outcome<modern::Job>) -> Outcome {
        match outcome {
            crate::core::Outcome::Reply { keep_alive } => Outcome::Reply { keep_alive },
            crate::core::Outcome::Job(modern::Job::Call(call)) => {
                Outcome::Stream(Stream::Call(call))
            }
            crate::core::Outcome::Job(modern::Job::Observe(observer)) => {
                Outcome::Stream(Stream::Observe(observer))
            }
            crate::core::Outcome::Job(modern::Job::Listen(listen)) => {
                Outcome::Stream(Stream::Listen(listen))
            }
        }
    }
}

/// Entry point: one parsed request. Counted in `tidemark_requests_total` where it is answered:
/// a request handed to its session's owner core is parsed and handled again there, and counted
/// there only. Every answer, whatever path wrote it, is shared with a listed `--allowed-origin`
/// page here (`cors`), after it was rendered; a stream that renders its head later is told the
/// listed origin to share it with. The outcome is written to `outcome`, the connection's slot
/// for it: returned by value, its 184 bytes were copied on each hop out to the connection's
/// state, ~150 instructions a streamed request (callgrind).
pub(crate) async fn handle(
    edge: &Endpoint,
    req: Request<'_>,
    out: &mut Vec<u8>,
    outcome: &mut Outcome,
) {
    let (head, head_bytes, head_start) = (req.head, req.head_bytes, out.len());
    *outcome = route(edge, req, out).await;
    if !matches!(outcome, Outcome::HandOff(_)) {
        edge.metrics.requests_total.inc();
        cors::share_if_listed(&edge.cfg, head, head_bytes, out, head_start);
    }
    match outcome {
        Outcome::Stream(Stream::Call(call)) => {
            call.shared_with = cors::listed_index(&edge.cfg, head, head_bytes);
        }
        Outcome::Stream(Stream::Observe(observer)) => {
            observer.shared_with = cors::listed_index(&edge.cfg, head, head_bytes);
        }
        Outcome::Stream(Stream::AuditedCall(audited)) => {
            audited.inner.shared_with = cors::listed_index(&edge.cfg, head, head_bytes);
        }
        Outcome::Stream(Stream::AuditedObserve(audited)) => {
            audited.inner.shared_with = cors::listed_index(&edge.cfg, head, head_bytes);
        }
        _ => {}
    }
}

/// The edge's rules in order (head conflicts, path, Host/Origin, a preflight, the resource
/// metadata, authorization, a POST's media types), the
/// request's owner core (`owner`: moved there unanswered), then the protocol path.
async fn route(edge: &Endpoint, mut req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    let keep_alive = req.head.keep_alive;
    if let Some(name) = &req.head.conflict {
        let mcp =
            req.head_bytes[name.clone()].get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"mcp-"));
        let refusal = if mcp { Refusal::ConflictingMcpHeader } else { Refusal::ConflictingHeader };
        return refuse(out, refusal, None, keep_alive).into_edge();
    }
    let (authority, target) = split_target(&req.head_bytes[req.head.path.clone()]);
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(mark) => (&target[..mark], &target[mark + 1..]),
        None => (target, &b""[..]),
    };
    let metadata = edge.auth.as_deref().and_then(|auth| auth.metadata_at(path));
    if path != edge.cfg.server.path.as_bytes() && metadata.is_none() {
        return refuse(out, Refusal::NotFoundPath, None, keep_alive).into_edge();
    }
    if !host_and_origin_allowed(&edge.cfg, &req)
        || authority.is_some_and(|a| !host_allowed(&edge.cfg, a))
    {
        return refuse(out, Refusal::Forbidden, None, keep_alive).into_edge();
    }
    // Before the era is chosen: a preflight carries no MCP header, so it has no era.
    if cors::answer_preflight(edge, &req, out, keep_alive) {
        return Outcome::Reply { keep_alive };
    }
    // RFC 9728: the protected resource metadata, which never needs a token.
    if let Some(document) = metadata {
        return match req.head.method() {
            Method::Get => reply(out, Answer::Json(document), keep_alive).into_edge(),
            Method::Head => reply(out, Answer::HeadNotAllowed, keep_alive).into_edge(),
            _ => refuse(out, Refusal::MethodNotAllowed, None, keep_alive).into_edge(),
        };
    }
    // Authorization: after the HTTP rules, before the era and the owner core, so a request
    // without a valid token is never decoded, moved, or shown anything of a session.
    if let Some(auth) = edge.auth.as_deref() {
        let header = req.header(&req.head.authorization);
        match auth.authenticate(header, query, req.auth_cache) {
            Ok((claims, check)) => {
                if check == crate::auth::Check::Verified {
                    edge.metrics.auth_verifications.inc();
                }
                tracing::trace!(subject = &*claims.subject, "authorized");
                req.claims = Some(claims);
                req.policy = Some(auth.policy());
            }
            Err(denial) => return deny(edge, auth, denial, out, keep_alive),
        }
    }
    let era = era(&req);
    if req.head.method() == Method::Post {
        // 2026-07-28 says to ignore Last-Event-ID on a POST; the legacy era refuses it.
        if let Err(refusal) = post_headers_ok(&req, era == Era::Legacy) {
            return refuse(out, refusal, None, keep_alive).into_edge();
        }
    }
    // The one place a request's core is chosen (its task, session, then key): before the era
    // and before the body is decoded. A misrouted task is served here: the task store answers
    // it not found (it holds no other node's task), with the request's id.
    let adopts = edge.reader.is_some();
    match owner::owner(&req, edge.cfg.server.node_id, edge.index, edge.threads, adopts) {
        Owner::Here => {}
        Owner::Core(core) => return Outcome::HandOff(core),
        Owner::Misrouted(Misrouted::Task { node }) => {
            edge.metrics.misrouted_tasks.inc();
            tracing::debug!(node, "tasks/* request for another node's task (misrouted)");
        }
        Owner::Misrouted(Misrouted::Session { node }) => {
            edge.metrics.misrouted_sessions.inc();
            tracing::debug!(node, "request for another node's session (misrouted)");
            return refuse(out, Refusal::MisroutedSession, None, keep_alive).into_edge();
        }
    }
    // A session this node does not hold may be a dead node's, in the durable store.
    if adopts && era == Era::Legacy && req.head.session_id.is_some() {
        if let Err(keep_alive) = legacy::adopt_if_absent(&edge.legacy, &req, out).await {
            return Outcome::Reply { keep_alive };
        }
    }
    match (req.head.method(), era) {
        (Method::Post, _) => post(edge, &mut req, era, out).await,
        (Method::Get, Era::Legacy) => {
            req.label.set(RequestLabel::new(EraLabel::Legacy, "GET"));
            legacy::get(&edge.legacy, &req, out).into()
        }
        (Method::Delete, Era::Legacy) => {
            req.label.set(RequestLabel::new(EraLabel::Legacy, "DELETE"));
            legacy::delete(&edge.legacy, &req, out).into()
        }
        (Method::Get | Method::Delete, Era::Modern) => modern::not_allowed(&req, out).into(),
        (Method::Head, _) => reply(out, Answer::HeadNotAllowed, keep_alive).into_edge(),
        (Method::Other, _) => refuse(out, Refusal::MethodNotAllowed, None, keep_alive).into_edge(),
    }
}

/// A POST: admitted at the edge (`admit`: decoded once, labelled, its span named, its access
/// worked out, its era settled), then served by that era.
/// The body's tape comes from the connection and goes back to it once the request is served.
async fn post(edge: &Endpoint, req: &mut Request<'_>, era: Era, out: &mut Vec<u8>) -> Outcome {
    let slot = req.tape;
    let mut tape = slot.take();
    let outcome = match admit::admit(edge, req, era, &mut tape, out) {
        // The audit trail (`--audit-log`): off, this one test is all a request pays.
        Ok((era, admitted)) => match &edge.audit {
            None => match era {
                Era::Legacy => legacy::post(&edge.legacy, admitted, out).await.into(),
                Era::Modern => modern::serve(&edge.modern, admitted, out).await.into(),
            },
            Some(sink) => Box::pin(audited(edge, sink, era, admitted, out)).await,
        },
        Err(refused) => refused.into_edge(),
    };
    slot.put(tape);
    outcome
}

/// `post`'s serving of an admitted request with the audit trail on (`--audit-log`): a
/// `tools/call`, `resources/read` or `prompts/get` gets its line when it ends (`audit`).
async fn audited(
    edge: &Endpoint,
    sink: &crate::audit::AuditSink,
    era: Era,
    admitted: crate::core::Admitted<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let call = audit::begin(&edge.legacy, era, &admitted);
    let start = out.len();
    let outcome: Outcome = match era {
        Era::Legacy => legacy::post(&edge.legacy, admitted, out).await.into(),
        Era::Modern => modern::serve(&edge.modern, admitted, out).await.into(),
    };
    let Some(call) = call else { return outcome };
    let pending = crate::audit::Pending::new(call, sink.clone());
    match outcome {
        Outcome::Stream(Stream::Ring(job)) => {
            audit::ends_with_run(&job, pending);
            Outcome::Stream(Stream::Ring(job))
        }
        Outcome::Stream(Stream::Observe(observer)) if observer.is_retry() => {
            pending.end(crate::audit::Ending::Dedup);
            Outcome::Stream(Stream::Observe(observer))
        }
        Outcome::Stream(Stream::Observe(observer)) => {
            let audited = audit::Audited::new(observer, pending, edge.modern.tasks.clone());
            Outcome::Stream(Stream::AuditedObserve(Box::new(audited)))
        }
        Outcome::Stream(Stream::Call(call)) => {
            let audited = audit::Audited::new(call, pending, edge.modern.tasks.clone());
            Outcome::Stream(Stream::AuditedCall(Box::new(audited)))
        }
        // The owner core serves it again, and audits it there.
        Outcome::HandOff(core) => {
            pending.discard();
            Outcome::HandOff(core)
        }
        other => {
            let tasks = (era == Era::Modern).then_some(&edge.modern.tasks);
            audit::end(pending, &out[start..], tasks);
            other
        }
    }
}

/// A request refused authorization: counted by reason, answered with its challenge.
fn deny(
    edge: &Endpoint,
    auth: &crate::auth::Authorizer,
    denial: Denial,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome {
    let m = &edge.metrics;
    let (counter, status, message) = match denial {
        Denial::Missing => (
            &m.auth_refused_missing,
            Status::Unauthorized,
            "authorization required: send Authorization: Bearer <token> (see the \
             WWW-Authenticate header's resource_metadata)",
        ),
        Denial::QueryToken => (
            &m.auth_refused_query_token,
            Status::BadRequest,
            "a token in the query string is never accepted: send it in the Authorization header",
        ),
        Denial::Invalid(error) => (
            match error {
                TokenError::Malformed => &m.auth_refused_malformed,
                TokenError::BadSignature => &m.auth_refused_signature,
                TokenError::UnknownKey => &m.auth_refused_key,
                TokenError::Expired => &m.auth_refused_expired,
                TokenError::NotYetValid => &m.auth_refused_not_yet_valid,
                TokenError::WrongAudience => &m.auth_refused_audience,
                TokenError::WrongIssuer => &m.auth_refused_issuer,
                TokenError::AlgorithmNotAllowed => &m.auth_refused_algorithm,
                TokenError::Unknown => &m.auth_refused_unknown,
            },
            Status::Unauthorized,
            "invalid token: get a new token for this resource",
        ),
        Denial::Scope => (
            &m.auth_refused_scope,
            Status::Forbidden,
            "insufficient scope: the token lacks a scope this server requires",
        ),
    };
    counter.inc();
    tracing::debug!(?denial, "authorization refused");
    let challenge = auth.challenge(denial);
    let answer = Answer::Challenge { status, challenge: &challenge, id: None, message };
    reply(out, answer, keep_alive).into_edge()
}

impl From<legacy::Outcome> for Outcome {
    fn from(outcome: legacy::Outcome) -> Outcome {
        match outcome {
            crate::core::Outcome::Reply { keep_alive } => Outcome::Reply { keep_alive },
            crate::core::Outcome::Job(job) => Outcome::Stream(Stream::Ring(job)),
        }
    }
}

/// An outcome with nothing to drive, from `core::reply`/`refuse`, as the connection's.
trait IntoEdge {
    fn into_edge(self) -> Outcome;
}

impl IntoEdge for crate::core::Outcome<std::convert::Infallible> {
    fn into_edge(self) -> Outcome {
        match self {
            crate::core::Outcome::Reply { keep_alive } => Outcome::Reply { keep_alive },
            crate::core::Outcome::Job(never) => match never {},
        }
    }
}

/// The `Accept` of a POST as the MCP SDKs write it: both media types a POST must accept.
const ACCEPT_JSON_AND_SSE: &[u8] = b"application/json, text/event-stream";

/// Content-Type, Accept and (legacy: `refuse_last_event_id`) no Last-Event-ID on a POST (MCP
/// 2025-11-25 transports; 2026-07-28 says to ignore the header).
fn post_headers_ok(req: &Request<'_>, refuse_last_event_id: bool) -> Result<(), Refusal> {
    if refuse_last_event_id && req.head.last_event_id.is_some() {
        return Err(Refusal::LastEventIdOnPost);
    }
    let content_type_ok = req
        .header(&req.head.content_type)
        .is_some_and(|c| c == b"application/json" || is_media_type(c, b"application/json"));
    if !content_type_ok {
        return Err(Refusal::UnsupportedMediaType);
    }
    // The value the SDKs send is compared whole first: it lists both, and the item-by-item
    // scan of the two lookups costs a request ~1 000 instructions (callgrind).
    let accept_ok = req.header(&req.head.accept).is_some_and(|a| {
        a == ACCEPT_JSON_AND_SSE
            || (lists_media_type(a, b"application/json")
                && lists_media_type(a, b"text/event-stream"))
    });
    if !accept_ok {
        return Err(Refusal::NotAcceptable);
    }
    // Both eras read the key as text: one that is not UTF-8 is refused, never read lossily
    // (two such keys would be one) nor ignored.
    if req.header(&req.head.idempotency_key).is_some_and(|k| std::str::from_utf8(k).is_err()) {
        return Err(Refusal::BadIdempotencyKey);
    }
    Ok(())
}

/// Splits an absolute-form request target (`http://host:port/mcp`, RFC 9112 §3.2.2: a server
/// MUST accept it) into its authority and path; an origin-form target has no authority.
fn split_target(target: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let rest = target.strip_prefix(b"http://").or_else(|| target.strip_prefix(b"https://"));
    match rest {
        None => (None, target),
        Some(rest) => match rest.iter().position(|&b| b == b'/') {
            Some(slash) => (Some(&rest[..slash]), &rest[slash..]),
            None => (Some(rest), b"/"),
        },
    }
}

/// The Host rule, also applied to an absolute-form target's authority (which the server must
/// use instead of Host). On a loopback listener a Host not listed by `--allowed-host` (listed
/// values match exactly, port included) must be a loopback name with no port or a well-formed
/// one. Which port it names is not compared with the one bound: a transparent forwarder on this
/// machine (`ssh -L 9000:127.0.0.1:8080`, `kubectl port-forward`, `socat`) passes its client's
/// `Host: localhost:9000` through unchanged, and comparing would protect nothing, since a browser
/// attacked by DNS rebinding sends the attacker's host name, which is refused here anyway.
pub(crate) fn host_allowed(cfg: &Config, host: &[u8]) -> bool {
    let listed = cfg.http.allowed_hosts.iter().any(|h| h.as_bytes() == host);
    listed
        || !cfg.server.listen.ip().is_loopback()
        || split_authority(host)
            .is_some_and(|(name, port)| is_loopback_host(name) && port_well_formed(port))
}

/// DNS-rebinding protection: on a loopback listener, Host and Origin must be loopback names
/// unless allowed by flag. On other listeners only Origin is checked against the allow-list.
/// Origin's port is not checked: a page served from another local port may call us.
fn host_and_origin_allowed(cfg: &Config, req: &Request<'_>) -> bool {
    let loopback = cfg.server.listen.ip().is_loopback();
    if let Some(host) = req.header(&req.head.host) {
        if !host_allowed(cfg, host) {
            return false;
        }
    }
    if let Some(origin) = req.header(&req.head.origin) {
        let listed = cfg.http.allowed_origins.iter().any(|o| o.as_bytes() == origin);
        // An origin is `scheme://host[:port]` and nothing else (RFC 6454 §6.2): userinfo
        // (`http://localhost:80@evil.com` is evil.com's page) or a path makes it no loopback one.
        let authority = origin
            .strip_prefix(b"http://")
            .or_else(|| origin.strip_prefix(b"https://"))
            .and_then(split_authority)
            .is_some_and(|(name, rest)| is_loopback_host(name) && port_well_formed(rest));
        if !listed && !authority && origin != b"null" {
            return false;
        }
        if !listed && origin == b"null" && loopback {
            return false;
        }
    }
    true
}

/// Splits an authority (`host[:port]`, RFC 3986 §3.2) into its host and everything after it
/// (empty, or `:port` when well formed). `None`: an IPv6 literal without its closing bracket.
fn split_authority(a: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = if a.starts_with(b"[") {
        a.iter().position(|&b| b == b']')? + 1
    } else {
        a.iter().position(|&b| b == b':').unwrap_or(a.len())
    };
    Some(a.split_at(end))
}

/// `localhost`, `127.x.y.z` or `[::1]`.
fn is_loopback_host(host: &[u8]) -> bool {
    // The name nearly every local client sends, before the address parse (~250 instructions).
    host == b"127.0.0.1"
        || host.eq_ignore_ascii_case(b"localhost")
        || host == b"[::1]"
        || (host.starts_with(b"127.")
            && std::str::from_utf8(host).is_ok_and(|h| h.parse::<std::net::Ipv4Addr>().is_ok()))
}

/// True when what follows an authority's host is no port (nothing, or an empty port, which
/// RFC 3986 §3.2.3 allows) or `:` and a TCP port: 1 to 5 digits naming 1 to 65535 (0 is no
/// port a client can connect to). Anything else after the host (`localhost:9101.evil.com`,
/// `localhost:evil.com`, a second `:port`) is refused. Which port is not compared with the one
/// bound (see `host_allowed`): a forwarder's client names the forwarder's port.
fn port_well_formed(rest: &[u8]) -> bool {
    let Some(digits) = rest.strip_prefix(b":") else {
        return rest.is_empty();
    };
    if digits.is_empty() {
        return true;
    }
    if digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let port = digits.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    (1..=u32::from(u16::MAX)).contains(&port)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the Host rule on a loopback listener: loopback names, with no port or any
    /// well-formed one (a port forwarder's client names the forwarder's port); listed hosts
    /// exactly, port included; foreign names and malformed ports refused; anything goes on other
    /// listeners. Method: a table of Hosts against a config listening on 127.0.0.1:8080 (and on
    /// :0, the port not recorded, which must change nothing).
    #[test]
    fn host_names_a_loopback_name_and_a_well_formed_port() {
        let mut cfg = Config::test_min();
        cfg.server.listen = "127.0.0.1:8080".parse().expect("address");
        cfg.http.allowed_hosts = vec!["mcp.example:9000".into()];
        let table: [(&str, bool); 33] = [
            ("localhost", true),
            ("localhost:8080", true),
            ("LocalHost:8080", true),
            ("localhost:", true),
            ("127.0.0.1:8080", true),
            ("127.1.2.3", true),
            ("[::1]:8080", true),
            ("[::1]", true),
            ("localhost:08080", true),
            ("mcp.example:9000", true),
            // Another port: what a forwarder's client sends.
            ("localhost:9999", true),
            ("localhost:9000", true),
            ("127.0.0.1:9000", true),
            ("[::1]:9000", true),
            ("localhost:1", true),
            ("localhost:65535", true),
            // Malformed ports.
            ("localhost:0", false),
            ("localhost:00000", false),
            ("localhost:65536", false),
            ("localhost:80800", false),
            ("localhost:808080", false),
            ("localhost:+8080", false),
            ("localhost:8080:8080", false),
            ("localhost:9101.evil.com", false),
            ("localhost:evil.com", false),
            ("[::1]8080", false),
            ("[::1:8080", false),
            // Foreign names, and a listed name on another port than the listed one.
            ("evil.com:9101", false),
            ("evil.example:8080", false),
            ("localhost.evil.com", false),
            ("mcp.example", false),
            ("mcp.example:9001", false),
            ("127.0.0.1.evil.com:8080", false),
        ];
        for (host, want) in table {
            assert_eq!(host_allowed(&cfg, host.as_bytes()), want, "{host}");
        }
        cfg.server.listen = "127.0.0.1:0".parse().expect("address");
        for (host, want) in table {
            assert_eq!(host_allowed(&cfg, host.as_bytes()), want, "{host} (listening on :0)");
        }
        cfg.server.listen = "0.0.0.0:8080".parse().expect("address");
        assert!(host_allowed(&cfg, b"evil.example:1"));
    }
}
