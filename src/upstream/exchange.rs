//! OAuth 2.0 Token Exchange (RFC 8693) toward an upstream (`--upstream-auth NAME=exchange`):
//! the caller's validated access token is traded at the authorization server for one whose
//! audience is the upstream, and that token is the upstream's bearer. The MCP authorization
//! spec forbids passing the client's own token to another resource; this is how the upstream
//! still learns which user calls.
//!
//! The exchange itself runs on one thread of its own (`tidemark-exchange`, ureq, blocking), the
//! JWK Set fetcher's model: a worker core queues a job (a bounded queue,
//! `--upstream-exchange-queue-entries`) and awaits its reply, which the thread hands back through
//! a one-slot queue and a waker; no HTTP client with a runtime of its own comes near the worker
//! cores. What it got is kept per
//! core (`Cache`), per (subject, upstream), until `--upstream-exchange-margin-secs` before its
//! expiry, within `--upstream-exchange-cache-entries` entries. An answer is read up to
//! `--upstream-exchange-answer-bytes`. Each exchange made (not a cached token's use) is counted
//! in `tidemark_upstream_token_exchanges_total{upstream,outcome}` on the calling core.
//!
//! Owns: `ExchangeTarget` (one upstream's exchange: the endpoint, the client, the audience and
//! resource), the request's encoding, the answer's reading, the per-core cache, the thread.
//! Called by: the HTTP transport (`http`), before a request of a link whose credentials name a
//! target. Never: logs, formats or returns a token or the client secret (`Debug` shows neither;
//! an error carries the authorization server's `error` and `error_description` only), sends the
//! caller's token anywhere but the target's token endpoint, or blocks a worker core.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use base64::Engine as _;
use crossbeam_queue::ArrayQueue;

use crate::provider::Caller;

/// The grant type of a token exchange (RFC 8693 §2.1).
pub(crate) const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The type of the token traded: the caller's OAuth access token (RFC 8693 §3).
pub(crate) const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Longest `error` or `error_description` of a refusal passed on to the client (in the
/// -32603's message); longer is cut (RFC 6749 §5.2 means them for a developer, in one line).
const REASON_BYTES_MAX: usize = 256;
/// How long past the exchange timeout a core waits for the thread's reply before it gives up
/// on it (the thread is then still bound by its own timeout).
const REPLY_GRACE: Duration = Duration::from_secs(1);

/// One upstream's exchange: where, as which client, for which audience and resource.
pub(crate) struct ExchangeTarget {
    /// The upstream's `NAME=` (in refusals, never a token).
    pub(crate) upstream: Box<str>,
    /// The authorization server's token endpoint (`NAME exchange token-endpoint URL`).
    pub(crate) token_endpoint: Box<str>,
    /// tidemark's client at that server, sent with HTTP Basic (RFC 6749 §2.3.1).
    pub(crate) client_id: Box<str>,
    /// `None`: a public client (the id goes in the form instead).
    pub(crate) client_secret: Option<Box<str>>,
    /// The upstream as the server names it (RFC 8693 `audience`).
    pub(crate) audience: Option<Box<str>>,
    /// The upstream's URL as a resource indicator (RFC 8693 `resource`, RFC 8707).
    pub(crate) resource: Option<Box<str>>,
    /// `--upstream-exchange-margin-secs`.
    pub(crate) margin: Duration,
    /// `--upstream-exchange-cache-entries`.
    pub(crate) cache_entries: usize,
    /// `--upstream-exchange-timeout-secs`.
    pub(crate) timeout: Duration,
    /// `--upstream-exchange-answer-bytes`: the longest answer read.
    pub(crate) answer_bytes: usize,
    /// This target among every one built (a reload builds new ones): the cache's key, so a
    /// token got for an old target is never used for a new one.
    id: u64,
}

impl fmt::Debug for ExchangeTarget {
    // Never the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeTarget")
            .field("upstream", &self.upstream)
            .field("client_id", &self.client_id)
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl ExchangeTarget {
    /// A target with a fresh id (the fields are the caller's to fill in).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        upstream: &str,
        token_endpoint: Box<str>,
        client_id: Box<str>,
        client_secret: Option<Box<str>>,
        audience: Option<Box<str>>,
        resource: Option<Box<str>>,
        tuning: Tuning,
    ) -> ExchangeTarget {
        static IDS: AtomicU64 = AtomicU64::new(1);
        ExchangeTarget {
            upstream: upstream.into(),
            token_endpoint,
            client_id,
            client_secret,
            audience,
            resource,
            margin: tuning.margin,
            cache_entries: tuning.cache_entries,
            timeout: tuning.timeout,
            answer_bytes: tuning.answer_bytes,
            id: IDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The exchange's form body (`application/x-www-form-urlencoded`, RFC 8693 §2.1).
    pub(crate) fn form(&self, subject_token: &str) -> String {
        let mut form = Form::default();
        form.pair("grant_type", GRANT_TYPE);
        form.pair("subject_token", subject_token);
        form.pair("subject_token_type", ACCESS_TOKEN_TYPE);
        form.pair("requested_token_type", ACCESS_TOKEN_TYPE);
        if let Some(audience) = &self.audience {
            form.pair("audience", audience);
        }
        if let Some(resource) = &self.resource {
            form.pair("resource", resource);
        }
        if self.client_secret.is_none() {
            form.pair("client_id", &self.client_id);
        }
        form.0
    }

    /// The `Authorization` value of a confidential client: Basic over the form-encoded id and
    /// secret (RFC 6749 §2.3.1); `None` for a public one.
    pub(crate) fn basic(&self) -> Option<String> {
        let secret = self.client_secret.as_deref()?;
        let mut pair = Form::default();
        pair.encode(&self.client_id);
        pair.0.push(':');
        pair.encode(secret);
        Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair.0)))
    }
}

/// The tuning every target of a set shares (`--upstream-exchange-*`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) margin: Duration,
    pub(crate) cache_entries: usize,
    pub(crate) timeout: Duration,
    pub(crate) answer_bytes: usize,
}

/// `application/x-www-form-urlencoded` text (WHATWG URL §5.2: unreserved bytes kept, space as
/// `+`, the rest `%XX`).
#[derive(Default)]
struct Form(String);

impl Form {
    fn pair(&mut self, name: &str, value: &str) {
        if !self.0.is_empty() {
            self.0.push('&');
        }
        self.encode(name);
        self.0.push('=');
        self.encode(value);
    }

    fn encode(&mut self, text: &str) {
        for byte in text.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    self.0.push(byte as char)
                }
                b' ' => self.0.push('+'),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789ABCDEF";
                    self.0.push('%');
                    self.0.push(HEX[usize::from(byte >> 4)] as char);
                    self.0.push(HEX[usize::from(byte & 15)] as char);
                }
            }
        }
    }
}

/// What an exchange issued.
#[derive(PartialEq, Eq)]
pub(crate) struct Issued {
    pub(crate) access_token: String,
    /// `expires_in` (`None`: the server did not say; the token is then not cached).
    pub(crate) expires_in: Option<Duration>,
}

impl fmt::Debug for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issued").field("expires_in", &self.expires_in).finish_non_exhaustive()
    }
}

/// Why no exchanged token is at hand (never holds a token).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// The authorization server: it refused (RFC 6749 §5.2), with its status and reasons.
    #[error("the authorization server refused the token exchange (HTTP {status}): {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused { status: u16, error: String, description: Option<String> },
    /// The authorization server: its answer is no usable RFC 8693 answer.
    #[error("the authorization server's token exchange answer is unusable: {0}")]
    Unusable(&'static str),
    /// The network or the server: no answer (connection, timeout, TLS).
    #[error("the token exchange failed: {0}")]
    Unreachable(String),
    /// The authorization server: its answer is longer than `--upstream-exchange-answer-bytes`.
    #[error("the authorization server's token exchange answer is over {0} bytes (--upstream-exchange-answer-bytes)")]
    AnswerTooLong(usize),
    /// Us: `--upstream-exchange-queue-entries` exchanges are waiting already.
    #[error(
        "token exchange queue full: {0} exchanges waiting (--upstream-exchange-queue-entries)"
    )]
    Busy(usize),
    /// The peer: the call carries no bearer token to exchange (authorization off).
    #[error("the call carries no access token to exchange")]
    NoSubjectToken,
}

/// Reads the authorization server's answer: an access token and its lifetime on 200, its
/// `error` and `error_description` otherwise (RFC 6749 §5.1, §5.2; RFC 8693 §2.2).
pub(crate) fn read_answer(
    status: u16,
    body: &[u8],
    subject_token: &str,
) -> Result<Issued, ExchangeError> {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |key: &str| json.get(key).and_then(serde_json::Value::as_str);
    if status != 200 {
        let reason = |key| text(key).map(|t| printable(t, subject_token));
        return Err(ExchangeError::Refused {
            status,
            error: reason("error").unwrap_or_else(|| "(no error code)".to_owned()),
            description: reason("error_description"),
        });
    }
    let token = text("access_token").ok_or(ExchangeError::Unusable("no access_token"))?;
    if token.is_empty() || !token.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return Err(ExchangeError::Unusable("the access_token is no bearer token's syntax"));
    }
    if !text("token_type").is_some_and(|t| t.eq_ignore_ascii_case("bearer")) {
        return Err(ExchangeError::Unusable("the token_type is not Bearer"));
    }
    let expires_in = json.get("expires_in").and_then(serde_json::Value::as_u64);
    Ok(Issued { access_token: token.to_owned(), expires_in: expires_in.map(Duration::from_secs) })
}

/// `reason` as one short printable line, never holding the subject token.
fn printable(reason: &str, subject_token: &str) -> String {
    if !subject_token.is_empty() && reason.contains(subject_token) {
        return "(withheld: it quotes the token)".to_owned();
    }
    let mut out: String = reason.chars().filter(|c| (' '..='~').contains(c)).collect();
    if out.len() > REASON_BYTES_MAX {
        out.truncate(REASON_BYTES_MAX);
        out.push('…');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The per-core cache.

/// Exchanged tokens of one core, by (target, subject).
#[derive(Default)]
struct Cache {
    entries: HashMap<(u64, Rc<str>), Entry>,
}

struct Entry {
    token: Rc<str>,
    /// Used until then: its expiry less the margin.
    fresh_until: Instant,
}

impl Cache {
    fn get(&self, target: u64, subject: &Rc<str>, now: Instant) -> Option<Rc<str>> {
        let entry = self.entries.get(&(target, subject.clone()))?;
        (now < entry.fresh_until).then(|| entry.token.clone())
    }

    /// Keeps `issued` until `margin` before its expiry, within `capacity` entries; a token
    /// with no lifetime, or one no longer than the margin, is not kept.
    fn put(&mut self, key: (u64, Rc<str>), issued: &Issued, margin: Duration, capacity: usize) {
        let Some(lifetime) = issued.expires_in.filter(|l| *l > margin) else { return };
        let now = Instant::now();
        if !self.entries.contains_key(&key) && self.entries.len() >= capacity {
            self.entries.retain(|_, e| e.fresh_until > now);
            while self.entries.len() >= capacity {
                let soonest = self.entries.iter().min_by_key(|(_, e)| e.fresh_until);
                let Some(key) = soonest.map(|(k, _)| k.clone()) else { break };
                self.entries.remove(&key);
            }
        }
        let entry = Entry {
            token: issued.access_token.as_str().into(),
            fresh_until: now + lifetime - margin,
        };
        self.entries.insert(key, entry);
        debug_assert!(self.entries.len() <= capacity);
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::default();
}

/// The bearer token for `caller` at `target`'s upstream: this core's cached one while it is
/// fresh, else one exchanged now (off this core) and kept.
pub(crate) async fn bearer(
    target: &Arc<ExchangeTarget>,
    caller: Option<&Caller>,
) -> Result<Rc<str>, ExchangeError> {
    let caller = caller.ok_or(ExchangeError::NoSubjectToken)?;
    let subject: Rc<str> = caller.subject().into();
    if let Some(token) = CACHE.with(|c| c.borrow().get(target.id, &subject, Instant::now())) {
        return Ok(token);
    }
    let subject_token =
        subject_token(caller.authorization()).ok_or(ExchangeError::NoSubjectToken)?;
    let outcome = exchange_off_core(target, subject_token).await;
    count(&target.upstream, &outcome);
    let issued = outcome?;
    let token: Rc<str> = issued.access_token.as_str().into();
    tracing::debug!(upstream = %target.upstream, expires_in = ?issued.expires_in, "token exchanged");
    CACHE.with(|c| {
        let key = (target.id, subject);
        c.borrow_mut().put(key, &issued, target.margin, target.cache_entries)
    });
    Ok(token)
}

/// Counts an exchange made for `upstream` on this core: `exchanged`, `refused` (by the
/// authorization server) or `failed` (anything else: unreachable, unusable, too long, queue full).
fn count(upstream: &str, outcome: &Result<Issued, ExchangeError>) {
    let Some(metrics) = crate::metrics::this_core() else { return };
    let Some(health) = metrics.hist.upstream_health_named(upstream) else { return };
    match outcome {
        Ok(_) => health.exchanged.inc(),
        Err(ExchangeError::Refused { .. }) => health.exchange_refused.inc(),
        Err(_) => health.exchange_failed.inc(),
    }
}

/// The token of an `Authorization: Bearer …` value (the scheme case-insensitive, RFC 6750).
fn subject_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

// ---------------------------------------------------------------------------------------------
// The thread.

/// One exchange for the thread, and where its answer goes.
struct Job {
    target: Arc<ExchangeTarget>,
    subject_token: String,
    reply: Arc<Reply>,
}

/// A one-shot answer from the thread to a core: the slot, and the waker of the task awaiting it.
struct Reply {
    slot: ArrayQueue<Result<Issued, ExchangeError>>,
    waker: AtomicWaker,
}

/// The jobs waiting for the thread, at most `capacity` (`--upstream-exchange-queue-entries`).
struct JobQueue {
    sender: SyncSender<Job>,
    capacity: usize,
}

impl JobQueue {
    /// A queue of `capacity` jobs, and the thread's end of it.
    fn new(capacity: usize) -> (JobQueue, Receiver<Job>) {
        let (sender, receiver) = sync_channel::<Job>(capacity);
        (JobQueue { sender, capacity }, receiver)
    }

    /// Queues `job`, or refuses it at once when `capacity` are waiting (never blocks a core).
    fn push(&self, job: Job) -> Result<(), ExchangeError> {
        match self.sender.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(ExchangeError::Busy(self.capacity)),
            Err(TrySendError::Disconnected(_)) => {
                Err(ExchangeError::Unreachable("the exchange thread is gone".into()))
            }
        }
    }
}

static QUEUE: OnceLock<JobQueue> = OnceLock::new();

/// Starts the exchange thread, once per process (later calls return at once); exchanges time
/// out after `timeout`, at most `queue_entries` wait. Called when an upstream set with an
/// exchange is built.
pub(crate) fn start(timeout: Duration, queue_entries: usize) -> Result<(), String> {
    if QUEUE.get().is_some() {
        return Ok(());
    }
    let (queue, receiver) = JobQueue::new(queue_entries);
    std::thread::Builder::new()
        .name("tidemark-exchange".into())
        .spawn(move || {
            let agent = agent(timeout);
            for job in receiver {
                let outcome = exchange(&agent, &job.target, &job.subject_token);
                let _ = job.reply.slot.push(outcome);
                job.reply.waker.wake();
            }
        })
        .map_err(|e| format!("the token exchange thread: {e}"))?;
    let _ = QUEUE.set(queue);
    Ok(())
}

/// Queues the exchange and awaits the thread's answer (at most the target's timeout and a grace).
async fn exchange_off_core(
    target: &Arc<ExchangeTarget>,
    subject_token: &str,
) -> Result<Issued, ExchangeError> {
    let queue = QUEUE.get().ok_or(ExchangeError::Unreachable("no exchange thread".into()))?;
    let reply = Arc::new(Reply { slot: ArrayQueue::new(1), waker: AtomicWaker::new() });
    let job = Job {
        target: target.clone(),
        subject_token: subject_token.to_owned(),
        reply: reply.clone(),
    };
    queue.push(job)?;
    let answer = std::future::poll_fn(|cx| {
        if let Some(outcome) = reply.slot.pop() {
            return Poll::Ready(outcome);
        }
        reply.waker.register(cx.waker());
        match reply.slot.pop() {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    });
    match monoio::time::timeout(target.timeout + REPLY_GRACE, answer).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ExchangeError::Unreachable("timed out".into())),
    }
}

/// The thread's client: bounded in time, no redirects (the token endpoint is configuration),
/// statuses as values (a refusal's body says why).
fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into()
}

/// One exchange, blocking (on the thread).
fn exchange(
    agent: &ureq::Agent,
    target: &ExchangeTarget,
    subject_token: &str,
) -> Result<Issued, ExchangeError> {
    let mut request = agent
        .post(&*target.token_endpoint)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Accept", "application/json");
    if let Some(basic) = target.basic() {
        request = request.header("Authorization", basic);
    }
    // ureq's error names the URL's host and the failure, never the form.
    let unreachable = |e: ureq::Error| ExchangeError::Unreachable(e.to_string());
    let mut response = request.send(target.form(subject_token)).map_err(unreachable)?;
    let status = response.status().as_u16();
    let body =
        match response.body_mut().with_config().limit(target.answer_bytes as u64).read_to_vec() {
            Err(ureq::Error::BodyExceedsLimit(_)) => {
                return Err(ExchangeError::AnswerTooLong(target.answer_bytes))
            }
            read => read.map_err(unreachable)?,
        };
    read_answer(status, &body, subject_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-answer token endpoint on a real local socket: reads one request whole, answers
    /// 200 with `body`, and closes. Its URL.
    fn token_endpoint(body: Vec<u8>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/token", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = conn.read(&mut buf).expect("read");
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                let Some(end) = text.find("\r\n\r\n") else { continue };
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().expect("length"));
                if n == 0 || request.len() >= end + 4 + length {
                    break;
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(&body)).expect("write");
        });
        url
    }

    /// A token answer padded with JSON whitespace to `bytes` bytes.
    fn answer_of(bytes: usize) -> Vec<u8> {
        let mut body =
            br#"{"access_token":"abc.def","token_type":"Bearer","expires_in":60}"#.to_vec();
        body.resize(bytes, b' ');
        body
    }

    #[test]
    fn an_answer_of_the_limit_is_read_and_one_byte_more_fails_naming_the_flag() {
        // Goal: `--upstream-exchange-answer-bytes` bounds the answer read: exactly the limit is
        // read and used, one byte more fails the exchange with an error naming the limit and
        // the flag. Method: the real client against a local token endpoint, at the default.
        let limit = crate::config::UPSTREAM_EXCHANGE_ANSWER_BYTES;
        let agent = agent(Duration::from_secs(10));
        let mut at = target(Some("secret"));
        at.token_endpoint = token_endpoint(answer_of(limit)).into();
        let issued = exchange(&agent, &at, "subject").expect("exactly the limit is read");
        assert_eq!(issued.access_token, "abc.def");
        let mut over = target(Some("secret"));
        over.token_endpoint = token_endpoint(answer_of(limit + 1)).into();
        let error = exchange(&agent, &over, "subject").expect_err("one byte over");
        assert_eq!(error, ExchangeError::AnswerTooLong(limit));
        let message = error.to_string();
        assert!(message.contains(&format!("over {limit} bytes")), "{message}");
        assert!(message.contains("--upstream-exchange-answer-bytes"), "{message}");
    }

    #[test]
    fn the_queue_takes_its_capacity_and_refuses_the_next_at_once() {
        // Goal: `--upstream-exchange-queue-entries` bounds the exchanges waiting: N are queued,
        // the next is refused at once (never waits) with "token exchange queue full" naming N
        // and the flag; a call gets it as -32603 (`http::fail_request`). Method: a queue of 3
        // with no thread taking from it.
        let (queue, _receiver) = JobQueue::new(3);
        let target = Arc::new(target(None));
        let job = || Job {
            target: target.clone(),
            subject_token: "t".to_owned(),
            reply: Arc::new(Reply { slot: ArrayQueue::new(1), waker: AtomicWaker::new() }),
        };
        for _ in 0..3 {
            queue.push(job()).expect("within the capacity");
        }
        let error = queue.push(job()).expect_err("past the capacity");
        assert_eq!(error, ExchangeError::Busy(3));
        assert_eq!(
            error.to_string(),
            "token exchange queue full: 3 exchanges waiting (--upstream-exchange-queue-entries)"
        );
    }

    fn target(secret: Option<&str>) -> ExchangeTarget {
        let tuning = Tuning {
            margin: Duration::from_secs(30),
            cache_entries: 2,
            timeout: Duration::from_secs(10),
            answer_bytes: crate::config::UPSTREAM_EXCHANGE_ANSWER_BYTES,
        };
        ExchangeTarget::new(
            "search",
            "http://127.0.0.1:1/token".into(),
            "tide mark:gw".into(),
            secret.map(Box::from),
            Some("https://search.example/".into()),
            Some("https://search.example/mcp?x=1&y=2".into()),
            tuning,
        )
    }

    #[test]
    fn the_request_is_rfc_8693_form_encoded_with_basic_client_authentication() {
        // Goal: the grant, the token and its type, the audience and resource, each value
        // form-encoded; the client in Basic over the encoded id and secret (RFC 6749 §2.3.1),
        // or in the form for a public client; Debug shows no secret. Method: encode.
        let confidential = target(Some("s3cr:et"));
        assert_eq!(
            confidential.form("ey.J+/="),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\
             &subject_token=ey.J%2B%2F%3D\
             &subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token\
             &requested_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token\
             &audience=https%3A%2F%2Fsearch.example%2F\
             &resource=https%3A%2F%2Fsearch.example%2Fmcp%3Fx%3D1%26y%3D2"
        );
        let basic = confidential.basic().expect("confidential");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.strip_prefix("Basic ").expect("Basic"))
            .expect("base64");
        assert_eq!(decoded, b"tide+mark%3Agw:s3cr%3Aet");
        let public = target(None);
        assert!(public.basic().is_none());
        assert!(public.form("t").ends_with("&client_id=tide+mark%3Agw"));
        let shown = format!("{confidential:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
    }

    #[test]
    fn answers_are_read_and_refusals_name_the_servers_reasons_but_never_the_token() {
        // Goal: a 200 gives the token and lifetime; a 400 the `error`/`error_description`;
        // an unusable answer is named; a description quoting the subject token is withheld.
        // Method: read each answer.
        let ok = br#"{"access_token":"abc.def","token_type":"Bearer","expires_in":60,
            "issued_token_type":"urn:ietf:params:oauth:token-type:access_token"}"#;
        let issued = read_answer(200, ok, "subject").expect("issued");
        assert_eq!(issued.access_token, "abc.def");
        assert_eq!(issued.expires_in, Some(Duration::from_secs(60)));
        let refused = br#"{"error":"invalid_client","error_description":"client auth\nfailed"}"#;
        let error = read_answer(401, refused, "subject").expect_err("refused");
        assert_eq!(
            error.to_string(),
            "the authorization server refused the token exchange (HTTP 401): invalid_client \
             (client authfailed)"
        );
        let quoting = br#"{"error":"invalid_grant","error_description":"bad token subject-xyz"}"#;
        let error = read_answer(400, quoting, "subject-xyz").expect_err("refused").to_string();
        assert!(!error.contains("subject-xyz") && error.contains("withheld"), "{error}");
        assert_eq!(
            read_answer(200, br#"{"token_type":"Bearer"}"#, "s"),
            Err(ExchangeError::Unusable("no access_token"))
        );
        let mac = br#"{"access_token":"a","token_type":"N_A"}"#;
        assert_eq!(
            read_answer(200, mac, "s"),
            Err(ExchangeError::Unusable("the token_type is not Bearer"))
        );
        let header = br#"{"access_token":"a\r\nX: y","token_type":"bearer"}"#;
        assert!(matches!(read_answer(200, header, "s"), Err(ExchangeError::Unusable(_))));
        let long = format!(r#"{{"error":"{}"}}"#, "e".repeat(1000));
        let ExchangeError::Refused { error, .. } =
            read_answer(400, long.as_bytes(), "s").expect_err("x")
        else {
            panic!("a refusal")
        };
        assert_eq!(error.len(), REASON_BYTES_MAX + '…'.len_utf8());
    }

    #[test]
    fn the_cache_keeps_a_token_until_the_margin_and_holds_at_most_its_entries() {
        // Goal: a token is used until `margin` before its expiry; one no longer-lived than the
        // margin is not kept; at the capacity the soonest to expire goes, N entries kept, not
        // N+1. Method: put and get with a 30 s margin and 2 entries.
        let margin = Duration::from_secs(30);
        let mut cache = Cache::default();
        let issued = |token: &str, secs| Issued {
            access_token: token.to_owned(),
            expires_in: Some(Duration::from_secs(secs)),
        };
        let (alice, bob, carol): (Rc<str>, Rc<str>, Rc<str>) = ("a".into(), "b".into(), "c".into());
        cache.put((1, alice.clone()), &issued("ta", 90), margin, 2);
        let now = Instant::now();
        assert_eq!(cache.get(1, &alice, now).as_deref(), Some("ta"));
        assert_eq!(cache.get(2, &alice, now), None, "another target");
        assert_eq!(cache.get(1, &alice, now + Duration::from_secs(59)).as_deref(), Some("ta"));
        assert_eq!(cache.get(1, &alice, now + Duration::from_secs(61)), None, "within the margin");
        cache.put((1, bob.clone()), &issued("short", 30), margin, 2);
        assert_eq!(cache.get(1, &bob, now), None, "no longer than the margin: not kept");
        cache.put((1, bob.clone()), &issued("tb", 600), margin, 2);
        assert_eq!(cache.entries.len(), 2, "at the capacity");
        cache.put((1, carol.clone()), &issued("tc", 300), margin, 2);
        assert_eq!(cache.entries.len(), 2, "never over it");
        assert_eq!(cache.get(1, &alice, now), None, "the soonest to expire went");
        assert_eq!(cache.get(1, &bob, now).as_deref(), Some("tb"));
        assert_eq!(cache.get(1, &carol, now).as_deref(), Some("tc"));
        cache.put((1, carol.clone()), &issued("tc2", 300), margin, 2);
        assert_eq!(cache.get(1, &bob, now).as_deref(), Some("tb"), "a refresh evicts none");
        assert_eq!(subject_token("bearer  abc "), Some("abc"));
        assert_eq!(subject_token("Basic abc"), None);
    }
}
