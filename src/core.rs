//! One core's shared state and the shape of an era's answer: what both protocol paths read
//! (`Core`: the config, the provider registry, the metrics, the drain flag, which core this
//! is, the rate limits' buckets), what they take from `endpoint` (`Request`, and a POST as
//! `Admitted`), what they hand back (`Outcome`, rendered with `reply`/`refuse`), and
//! `Source`, the shape of a response stream that `runtime::stream` drives (below).
//!
//! Below both eras and above `dispatch`: each era keeps its own state in a core of its own
//! (`legacy::LegacyCore`: the sessions; `modern::ModernCore`: keys and tasks) that derefs to
//! this one, so neither era names the other's state. Built by `runtime` once per core.
//! Never: holds an era's state, touches a socket, or decodes a body.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

use crate::auth::policy::{Item, Kind, Policy};
use crate::auth::{Access, Authorizer, Claims, ConnCache};
use crate::config::Config;
use crate::dispatch::{Registry, ToolRoute};
use crate::http::RequestHead;
use crate::metrics::{CoreMetrics, RequestLabel};
use crate::provider::Caller;
use crate::ratelimit::{self, Cause, Client, Limits};
use crate::trace::{Span, TraceParent};
use crate::wire::jsonrpc::{Body, RawId};
use crate::wire::{Answer, Code, Refusal};

/// One core's view of the server, shared by both eras.
pub(crate) struct Core {
    pub(crate) cfg: Arc<Config>,
    pub(crate) index: u16,
    pub(crate) threads: u16,
    pub(crate) registry: Registry,
    pub(crate) metrics: Arc<CoreMetrics>,
    /// The endpoint's authorization, shared by every core (`None`: off).
    pub(crate) auth: Option<Arc<Authorizer>>,
    /// True once this core drains (SIGTERM/SIGINT, `Running::shutdown`): a new `initialize`
    /// is refused (503 + Retry-After). Set only by `runtime`, never cleared.
    pub(crate) draining: Cell<bool>,
    /// This core's `--rate-limit` buckets.
    pub(crate) rate: Rate,
    /// This core's tap on the durable mirror (`--durable`; `None`: off).
    pub(crate) mirror: Option<Rc<crate::durable::CoreTap>>,
    /// The node's store reader, for adoptions and other nodes' keys and tasks (`--durable`).
    pub(crate) reader: Option<Arc<crate::durable::Reader>>,
    /// The audit trail (`--audit-log`; `None`: off, and a POST pays this one test).
    pub(crate) audit: Option<crate::audit::AuditSink>,
}

/// One core's rate limits and the clock they count on.
pub(crate) struct Rate {
    limits: RefCell<Limits>,
    /// Where the buckets' nanoseconds count from (the core's start).
    origin: std::time::Instant,
    /// False when no `--rate-limit` is given: a request then costs one branch.
    on: bool,
}

impl Rate {
    /// The limits of `cfg` as one of `threads` cores enforces them.
    pub(crate) fn new(cfg: &Config, threads: u16) -> Rate {
        let limits = Limits::new(cfg, threads);
        let on = !limits.is_empty();
        Rate { limits: RefCell::new(limits), origin: std::time::Instant::now(), on }
    }
}

/// A request over a rate limit, as its 429 says it.
#[derive(Debug)]
pub(crate) struct RateRefusal {
    /// The limit's scope as configured (`client`, `tool:NAME`, `upstream:NAME`).
    scope: Box<str>,
    retry_after_secs: u64,
    retry_after_ms: u64,
    table_full: bool,
}

impl RateRefusal {
    /// The 429 answer to request `id`.
    pub(crate) fn answer<'a>(&'a self, id: Option<&'a RawId>) -> Answer<'a> {
        Answer::RateLimited {
            id,
            scope: &self.scope,
            retry_after_secs: self.retry_after_secs,
            retry_after_ms: self.retry_after_ms,
            table_full: self.table_full,
        }
    }

    /// The JSON-RPC error alone (one element of a batch's array).
    pub(crate) fn push_error(&self, body: &mut Vec<u8>, id: &RawId) {
        let (scope, ms, full) = (&*self.scope, self.retry_after_ms, self.table_full);
        crate::wire::push_rate_limited(body, Some(id), scope, ms, full);
    }
}

impl Core {
    /// The per-tool policy's verdict on `method` (`tools/call`, `prompts/get`,
    /// `resources/read`, `resources/subscribe`, `completion/complete` of a prompt or resource;
    /// anything else passes) for a request of `session` (whose tools it is listed): `Some` is
    /// the `WWW-Authenticate` of the 403 naming the scopes the token lacks. The decision
    /// `dispatch` lists by, so what is listed can be called and what is refused is not listed.
    /// A tool no provider lists passes (the era answers "unknown tool"). A resource is judged
    /// by its canonical form (`uri::canonical`; one without passes here and is refused
    /// `-32602` by `dispatch`), which is what an upstream is asked for (issue 38).
    pub(crate) fn forbidden(
        &self,
        session: crate::provider::SessionRef,
        access: Access<'_>,
        method: &str,
        params: &crate::wire::WireValue<'_>,
    ) -> Option<String> {
        use simd_json::prelude::*;
        let text = |field: &str| params.get(field).and_then(ValueIntoString::into_string);
        let named = |kind, name| Item { kind, name, provider: "", read_only: true };
        let canonical =
            |uri| crate::uri::canonical_bounded(uri, self.cfg.upstream.resource_uri_bytes_max);
        let missing = match method {
            "tools/call" => access.missing(self.registry.tool(session, text("name")?)?.item()),
            "prompts/get" => access.missing(named(Kind::Prompt, text("name")?)),
            "resources/read" | "resources/subscribe" => {
                let uri = canonical(text("uri")?).ok()?;
                access.missing(named(Kind::Resource, &uri))
            }
            "completion/complete" => {
                let reference = params.get("ref")?;
                let field = |key: &str| reference.get(key).and_then(ValueIntoString::into_string);
                match field("type")? {
                    "ref/prompt" => access.missing(named(Kind::Prompt, field("name")?)),
                    "ref/resource" => {
                        let uri = field("uri")?;
                        // A template (`{…}`) is judged as listed; a URI in canonical form.
                        let uri = match uri.contains('{') {
                            true => uri.to_owned(),
                            false => canonical(uri).ok()?,
                        };
                        access.missing(named(Kind::Resource, &uri))
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        (!missing.is_empty()).then(|| access.challenge(&missing))
    }
}

impl Core {
    /// The rate limits' verdict on one request of `req`'s client (its subject, else its peer
    /// address): `call` is a `tools/call`'s route, which the `tool:` and `upstream:` limits
    /// look at. `Some` takes no token and is counted; the era answers it 429 (`refuse_rate`).
    /// Asked only where a request starts new work: never for a resume, a notification or
    /// response, or a retry answered from what is recorded. A 2026-07-28 continuation (a
    /// retry with `requestState`) runs its tool again, so it is new work and asked too
    /// (docs/rate-limits.md).
    pub(crate) fn rate_limited(
        &self,
        req: &Request<'_>,
        call: Option<&ToolRoute>,
    ) -> Option<RateRefusal> {
        if !self.rate.on {
            return None;
        }
        let mut limits = self.rate.limits.borrow_mut();
        let call = call.filter(|_| limits.names_calls).map(|r| (&*r.name, r.provider.name()));
        let client = match req.subject() {
            Some(subject) => Client::Subject(subject),
            None => Client::Peer(req.peer()),
        };
        let now_ns = self.rate.origin.elapsed().as_nanos() as u64;
        let denied = limits.admit(now_ns, client, call).err()?;
        let counter = match (denied.cause, denied.kind) {
            (Cause::Shadowed, _) => &self.metrics.limit_rate_buckets,
            (Cause::Over, ratelimit::Kind::Client) => &self.metrics.rate_limited_client,
            (Cause::Over, ratelimit::Kind::Tool) => &self.metrics.rate_limited_tool,
            (Cause::Over, ratelimit::Kind::Upstream) => &self.metrics.rate_limited_upstream,
        };
        counter.inc();
        tracing::debug!(
            scope = limits.scope_text(denied.rule),
            wait_ns = denied.wait_ns,
            "rate limited"
        );
        Some(RateRefusal {
            scope: Box::from(limits.scope_text(denied.rule)),
            retry_after_secs: denied.retry_after_secs(),
            retry_after_ms: denied.retry_after_ms(),
            table_full: denied.cause == Cause::Shadowed,
        })
    }
}

/// The 429 of a request over a rate limit (`Core::rate_limited`), with its id.
pub(crate) fn refuse_rate<J>(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    refusal: &RateRefusal,
    keep_alive: bool,
) -> Outcome<J> {
    reply(out, refusal.answer(id), keep_alive)
}

/// The 403 of a request the policy refuses (`Core::forbidden`'s challenge), with its id.
pub(crate) fn refuse_scope<J>(
    out: &mut Vec<u8>,
    id: Option<&RawId>,
    challenge: &str,
    keep_alive: bool,
) -> Outcome<J> {
    let message = "insufficient scope: the token lacks a scope this tool, prompt or resource \
                   needs (see WWW-Authenticate)";
    let status = crate::wire::Status::Forbidden;
    reply(out, Answer::Challenge { status, challenge, id, message }, keep_alive)
}

/// The parts of a request an era reads: the head's bytes and the (mutable) body.
pub(crate) struct Request<'a> {
    /// The connection's socket, for its peer address (`peer`).
    pub(crate) socket: &'a monoio::net::TcpStream,
    pub(crate) head: &'a RequestHead,
    pub(crate) head_bytes: &'a [u8],
    pub(crate) body: &'a mut [u8],
    /// The connection's tape storage, which the body is decoded onto (`endpoint::admit`).
    pub(crate) tape: &'a crate::wire::jsonrpc::TapeSlot,
    /// The connection's last validated token (`auth`), so keep-alive requests validate once.
    pub(crate) auth_cache: &'a ConnCache,
    /// Who the request's token names, once the endpoint authorized it (`None`: authorization
    /// is off): what the eras scope sessions, keys, tasks and request states by.
    pub(crate) claims: Option<std::rc::Rc<Claims>>,
    /// What the request is, for `tidemark_request_duration_seconds`: set where it is admitted
    /// (`endpoint::admit`; a GET or DELETE by `endpoint`), read by the connection once it is
    /// answered.
    pub(crate) label: &'a Cell<RequestLabel>,
    /// The per-tool policy in force when the request was authorized (`None`: authorization
    /// is off): one request is held to one policy, whatever a SIGHUP swaps in meanwhile.
    pub(crate) policy: Option<Arc<Policy>>,
    /// The request's span (`--otlp-endpoint`; `None`: tracing is off): named and given its
    /// MCP attributes where the body is decoded (`endpoint::admit`), finished by the
    /// connection once the request is answered.
    pub(crate) span: Option<&'a std::cell::RefCell<Span>>,
}

impl Request<'_> {
    /// The connection's peer address (`None` when the OS could not say, or over a Unix
    /// socket: no address, and no one else's share to count against): who a per-client share
    /// counts against until authorization names subjects. Asked only by the requests that
    /// need it (a keyed call, a rate limit), so other connections pay no `getpeername`; the
    /// connection keeps the answer.
    pub(crate) fn peer(&self) -> Option<std::net::IpAddr> {
        self.auth_cache.peer(|| peer_ip(self.socket))
    }

    /// The subject of the request's token (`None`: authorization is off).
    pub(crate) fn subject(&self) -> Option<&str> {
        self.claims.as_deref().map(|c| &*c.subject)
    }

    /// Who the request was authorized for, with its `Authorization` value (`None`:
    /// authorization is off): what a bridge presents to the upstreams configured for it.
    pub(crate) fn caller(&self) -> Option<Caller> {
        let claims = self.claims.as_deref()?;
        let authorization = self.header(&self.head.authorization)?;
        let authorization = std::str::from_utf8(authorization).ok()?.trim();
        Some(Caller::new(Rc::from(&*claims.subject), Rc::from(authorization)))
    }

    /// The request span's context, the parent of its upstream calls (`None`: tracing is off).
    pub(crate) fn trace(&self) -> Option<TraceParent> {
        self.span.map(|span| span.borrow().context())
    }

    /// The bytes of a header the head parser found (`None`: absent).
    pub(crate) fn header(&self, r: &Option<Range<usize>>) -> Option<&[u8]> {
        r.as_ref().map(|r| &self.head_bytes[r.clone()])
    }
}

/// A POST admitted at the edge (`endpoint::admit`): its body decoded once, its label and span
/// set, the era chosen, and its authorization access worked out. What both eras take instead of
/// raw bytes; what only an era can judge (the session's tool scope, and the rate limit where it
/// knows a request is new work) it asks of this, once each.
pub(crate) struct Admitted<'a> {
    /// The request's head, token, span and connection.
    pub(crate) req: &'a Request<'a>,
    /// The decoded body (a single message or a batch), a view of the connection's tape.
    pub(crate) body: Body<'a>,
    /// The per-tool policy's view of the request (`None`: no policy, or authorization off).
    pub(crate) access: Option<Access<'a>>,
}

/// How an era's handling of a request ends; `J` is what that era's connection drives next.
pub(crate) enum Outcome<J> {
    /// A whole response is in the output buffer.
    Reply { keep_alive: bool },
    /// A response head is in the buffer (or nothing yet): the connection drives `J` next.
    Job(J),
}

impl<J> Outcome<J> {
    /// The same outcome with its job turned into another kind (a part's job into its era's).
    pub(crate) fn map_job<K>(self, f: impl FnOnce(J) -> K) -> Outcome<K> {
        match self {
            Outcome::Reply { keep_alive } => Outcome::Reply { keep_alive },
            Outcome::Job(job) => Outcome::Job(f(job)),
        }
    }
}

/// An outcome with nothing to drive: a whole answer. (No era hands a request to another core:
/// `endpoint::owner` decides that before either era sees the request.)
pub(crate) type Answered = Outcome<std::convert::Infallible>;

impl Answered {
    /// As an outcome of any era (it never has a job).
    pub(crate) fn widen<K>(self) -> Outcome<K> {
        self.map_job(|never| match never {})
    }
}

/// Renders `answer` as a whole response.
pub(crate) fn reply<J>(out: &mut Vec<u8>, answer: Answer<'_>, keep_alive: bool) -> Outcome<J> {
    answer.render(out, keep_alive);
    Outcome::Reply { keep_alive }
}

/// Bytes of capacity the core's answer-body buffer (`with_body`) keeps between answers; after
/// a larger answer it is let go, so one large answer does not stay resident.
pub(crate) const BODY_SCRATCH_KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    /// The core's buffer a JSON answer's body is written in before its head (`with_body`).
    static BODY_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `write` with the core's reused buffer for an answer's body (written before the head,
/// which carries its length), so an answer allocates no body of its own (issue 40 §1).
pub(crate) fn with_body<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    // Taken, not borrowed: a `write` that needed another body would find it empty.
    let mut body = BODY_SCRATCH.with(|scratch| scratch.take());
    body.clear();
    let written = write(&mut body);
    if body.capacity() <= BODY_SCRATCH_KEEP_BYTES {
        body.clear();
        BODY_SCRATCH.with(|scratch| *scratch.borrow_mut() = body);
    }
    written
}

/// Renders a refusal as a whole response.
pub(crate) fn refuse<J>(
    out: &mut Vec<u8>,
    refusal: Refusal,
    id: Option<&RawId>,
    keep_alive: bool,
) -> Outcome<J> {
    reply(out, Answer::Refused { refusal, id }, keep_alive)
}

/// A provider's `Down` error (a required upstream that cannot be reached) as its whole
/// answer: 503 with `Retry-After` and -32603 naming what is down; `None` for any other error.
pub(crate) fn reply_down<J>(
    out: &mut Vec<u8>,
    error: &crate::provider::ProviderError,
    id: &RawId,
    keep_alive: bool,
) -> Option<Outcome<J>> {
    let crate::provider::ProviderError::Down { message, data, retry_after_secs } = error else {
        return None;
    };
    let data = data.as_ref().map(|d| d.to_string());
    let retry_after_secs = *retry_after_secs;
    let answer = Answer::Down { id: Some(id), message, data: data.as_deref(), retry_after_secs };
    Some(reply(out, answer, keep_alive))
}

/// A JSON-RPC error response for request `id` as a whole `200 application/json` answer.
pub(crate) fn reply_error<J>(
    out: &mut Vec<u8>,
    id: &RawId,
    code: Code,
    message: &str,
    keep_alive: bool,
) -> Outcome<J> {
    let status = crate::wire::Status::Ok;
    let answer = Answer::Error { status, id: Some(id), code, message, data: None };
    reply(out, answer, keep_alive)
}

// `Source`: one response stream as the connection's driver sees it (`runtime::stream`), the
// seam between the socket-level loop and each era's stream. A source says what is ready
// (`fill`), what to wait on for more (`wake`), how it ends (`Step`), what the drain's end
// writes (`end_for_drain`) and what a peer that went away means (`gone`); the driver owns the
// waiting, the keep-alive comment, the peer-closed check, the drain and the writes.
//
// Implemented by each era for its own streams: the legacy ring stream (`legacy::SseJob`),
// and the 2026-07-28 call, keyed observer and `subscriptions/listen` stream (`modern`).
// Driven monomorphised (`async fn drive<S: Source>`): no box and no allocation per request
// or event comes from this seam.
// Never: names a socket, a runtime or an era; a source never awaits inside `fill`.

/// What a stream's `fill` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The stream goes on: write what is in the output (maybe nothing), then wait.
    Open,
    /// The stream's last bytes are in the output (its final event and the chunked body's last
    /// chunk, or a whole answer: a JSON response, a retry's 409 after its wait): write them;
    /// then the connection serves its next request when `reusable`.
    Ended { reusable: bool },
    /// Stop now and write nothing more (the output is dropped), then close the connection:
    /// another writer took the stream over, or the stream is cut as a network cut would be
    /// (no last chunk, so the client resumes).
    Cut,
}

/// When the driver sends the SSE keep-alive comment (`--sse-keepalive-ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeepAlive {
    /// None now (nothing streamed yet, or a body that is not SSE).
    Off,
    /// After an interval with nothing written, counted from each wait's start.
    Idle,
    /// Every interval from the stream's start, whatever else was written (a stream whose
    /// wake is a poll timer, which would otherwise restart an idle count forever).
    Every,
}

impl KeepAlive {
    /// `Idle` once a stream's SSE head went out, `Off` before (a body that may still be JSON).
    pub(crate) const fn once_streaming(streaming: bool) -> KeepAlive {
        if streaming {
            KeepAlive::Idle
        } else {
            KeepAlive::Off
        }
    }
}

/// One response stream a connection writes after the request was handled. The driver calls,
/// in a loop: `fill` (then writes, `sent` or `gone`), and when nothing was ready, waits on
/// `wake`, the drain, the keep-alive timer and the peer's socket. The output buffer holds the
/// response head before the first `fill` when the era rendered it already; `frames` is the
/// connection's scratch buffer, empty at each call.
pub(crate) trait Source {
    /// Appends what is ready to `out` (a head not rendered yet, SSE chunks, the end), at most
    /// about `core.cfg.sessions.write_buffer_bytes` of frames; never awaits.
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step;

    /// Completes when `fill` may find more (an event, the outcome, a timeout of the stream's
    /// own). Asked after a `fill` that found nothing to write; dropped when another branch of
    /// the wait wins, so it must hold no buffer.
    fn wake(&mut self) -> impl Future<Output = ()> + '_;

    /// How the keep-alive comment is timed now (asked before each wait).
    fn keep_alive(&self) -> KeepAlive;

    /// How long the first write may wait for more, asked once before the first `fill`: `Some`
    /// for a new request stream whose call is still running, so that an answer coming within
    /// it goes out in the same send as the head and priming event (`--sse-first-write-hold-us`);
    /// for a 2026-07-28 call that has nothing to write before its answer, so that a quick
    /// answer is written without the peer-watch poll armed and cancelled before it. Default:
    /// none, the first `fill` is written at once.
    fn first_write_hold(&self, core: &Core) -> Option<std::time::Duration> {
        let _ = core;
        None
    }

    /// True when a drain waits for this stream to end; false for one that waits for messages
    /// that may never come (a standalone GET, a listen stream), which the drain counts as
    /// idle and ends at its end with the others.
    fn holds_drain(&self) -> bool {
        true
    }

    /// The drain's end reached the stream after a `fill` that did not end it: appends its last
    /// bytes (the last chunk, a result, or a 503 when nothing was streamed). The connection
    /// then closes.
    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>);

    /// The output was written whole.
    fn sent(&mut self, core: &Core);

    /// The peer went away (it closed its end, or a write failed): detach, cancel, or nothing,
    /// as the stream's revision says. Nothing more is written.
    fn gone(&mut self, core: &Core);
}

/// The peer's IP address as the OS says it; `None` for a Unix socket's peer. Not monoio's
/// `TcpStream::peer_addr`: a `--listen unix:PATH` connection travels as a `TcpStream`
/// (`runtime::accept`), and monoio panics on an address that is not an IP one.
fn peer_ip(socket: &monoio::net::TcpStream) -> Option<std::net::IpAddr> {
    let addr = crate::fd::with_borrowed_fd(socket, |fd| rustix::net::getpeername(fd)).ok()??;
    std::net::SocketAddr::try_from(addr).ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_buffer_is_kept_up_to_its_limit() {
        // Goal: `with_body` reuses one buffer per core but keeps at most
        // `BODY_SCRATCH_KEEP_BYTES`. Method: bodies that grow it to the limit and past it.
        let capacity = || BODY_SCRATCH.with(|s| s.borrow().capacity());
        with_body(|body| body.reserve_exact(BODY_SCRATCH_KEEP_BYTES));
        assert_eq!(capacity(), BODY_SCRATCH_KEEP_BYTES, "kept at the limit");
        let len = with_body(|body| {
            assert!(body.is_empty(), "cleared between answers");
            body.extend_from_slice(b"{}");
            body.len()
        });
        assert_eq!(len, 2);
        assert_eq!(capacity(), BODY_SCRATCH_KEEP_BYTES, "reused, not grown");
        with_body(|body| body.resize(BODY_SCRATCH_KEEP_BYTES + 1, b'x'));
        assert_eq!(capacity(), 0, "let go past the limit");
    }
}
