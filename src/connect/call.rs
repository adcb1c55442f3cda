//! One message of the local client on its way to the server; for a request, its whole life:
//! the POST, its answer (a JSON body or an event stream), the resumption of a stream that broke
//! (`GET` + `Last-Event-ID` from the last event forwarded), a 409's hint, a re-send when one is
//! safe, and the -31006 "outcome unknown" when nothing else is.
//!
//! A re-send of a request is safe only when running it twice cannot happen or cannot matter:
//! the request never reached the server (no connection), the method is idempotent (CONTRACT §4
//! step 3's list, and tools the server annotated `readOnlyHint`/`idempotentHint`), or the server
//! decides it (tidemark, known by its `Mcp-Stream-Resumable` header: a same-id re-POST is a
//! 409 when the first arrived, and the `Idempotency-Key` every `tools/call` carries is honoured
//! in both eras). Otherwise a call whose stream broke with no event id to resume from, or whose
//! server stayed away past the retry budget, is answered -31006 and not sent again.
//! Owns: a request's resume cursor, its retry hint, what it already forwarded (so a replayed
//! re-send forwards only what is new), its key. Called by: the stdin loop (`mod.rs`).
//! Never: forwards an event twice on a resume (it resumes from its own cursor), or retries a
//! non-idempotent call toward a server that does not decide retries.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use super::http::{exchange, Failure, Request, Response};
use super::link::{Link, MESSAGE_BYTES};
use crate::upstream::SseDecoder;
use crate::wire::{error_object, response_object, Code};

/// The first protocol revision without sessions or resumption (2026-07-28).
const MODERN_VERSION: &str = "2026-07-28";
/// The `_meta` key a 2026-07-28 request names its revision with.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Methods safe to send again (CONTRACT §4 step 3); `tools/call` depends on the tool.
const IDEMPOTENT_METHODS: &[&str] = &[
    "ping",
    "initialize",
    "resources/read",
    "prompts/get",
    "completion/complete",
    "server/discover",
];

/// Hands one line of the local client on: a request to a thread of its own (`initialize` in
/// line, so the session exists before anything else leaves), anything else POSTed at once.
pub(super) fn from_client(link: &Arc<Link>, line: &[u8]) -> Option<JoinHandle<()>> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return None;
    }
    let message: Value = match serde_json::from_slice(text) {
        Ok(message) => message,
        Err(e) => {
            let error = error_object(Code::ParseError.value(), &format!("parse error: {e}"), None);
            link.emit(&response_object(Value::Null, Err(error)));
            return None;
        }
    };
    let is_request = message.get("method").is_some() && message.get("id").is_some();
    if !is_request {
        post_message(link, &message);
        return None;
    }
    if message["method"] == "initialize" {
        Call::new(link, message).run();
        return None;
    }
    if link.in_flight.fetch_add(1, Ordering::AcqRel) >= link.in_flight_max {
        link.in_flight.fetch_sub(1, Ordering::AcqRel);
        let error = error_object(
            Code::InternalError.value(),
            "too many requests in flight (tidemark connect --in-flight-max)",
            None,
        );
        link.emit(&response_object(message["id"].clone(), Err(error)));
        return None;
    }
    let link = Arc::clone(link);
    Some(std::thread::spawn(move || {
        Call::new(&link, message).run();
        link.in_flight.fetch_sub(1, Ordering::AcqRel);
    }))
}

/// A notification or a response (to a server's request): POSTed, a refusal said on stderr.
/// After `notifications/initialized` the session's standalone `GET` stream is opened.
fn post_message(link: &Arc<Link>, message: &Value) {
    let body = serde_json::to_vec(message).unwrap_or_default();
    let headers = session_headers(link, message);
    for attempt in 1..=link.reconnect_attempts.max(1) {
        let request = Request { method: "POST", headers: &headers, body: &body };
        match exchange(&link.target, &request) {
            Ok(mut response) => {
                if !(200..300).contains(&response.status) {
                    eprintln!(
                        "tidemark connect: the server refused a message: HTTP {}",
                        response.status
                    );
                } else if response.status != 202 {
                    // A body for a notification (a batch, or a server that answers anyway).
                    let mut listen = Stream::new(Value::Null);
                    listen.pump(link, &mut response);
                }
                if message["method"] == "notifications/initialized" && link.session().is_some() {
                    let link = Arc::clone(link);
                    std::thread::spawn(move || listen(&link));
                }
                return;
            }
            Err(Failure::NotSent(e)) => {
                eprintln!("tidemark connect: cannot reach the server ({e}); will retry");
                std::thread::sleep(link.backoff(attempt, None));
            }
            Err(Failure::Sent(e)) => {
                eprintln!("tidemark connect: a message's answer was lost ({e}); not sent again");
                return;
            }
        }
    }
    eprintln!("tidemark connect: the server is unreachable; a message was dropped");
}

/// The session's standalone `GET` stream: the server's own requests and notifications, resumed
/// from its last event when it breaks, until the server refuses it or stays away.
fn listen(link: &Arc<Link>) {
    let mut stream = Stream::new(Value::Null);
    let mut attempt = 0;
    while attempt <= link.reconnect_attempts {
        let mut headers = session_headers(link, &Value::Null);
        if let Some(cursor) = &stream.cursor {
            headers.push(("Last-Event-ID".into(), cursor.clone()));
        }
        let request = Request { method: "GET", headers: &headers, body: b"" };
        match exchange(&link.target, &request) {
            Ok(mut response) if response.status == 200 => {
                if stream.pump(link, &mut response) == Pumped::Progress {
                    attempt = 0;
                }
            }
            Ok(_) => return, // 405: no standalone stream here; 404: the session ended
            Err(_) => {}
        }
        attempt += 1;
        std::thread::sleep(link.backoff(attempt, stream.retry));
    }
}

/// The session's end: a `DELETE`, best effort (the server expires it anyway).
pub(super) fn end_session(link: &Link) {
    if link.session().is_none() {
        return;
    }
    let headers = session_headers(link, &Value::Null);
    let _ = exchange(&link.target, &Request { method: "DELETE", headers: &headers, body: b"" });
}

/// The headers every request of the session carries: `--header`s, `Mcp-Session-Id`,
/// `MCP-Protocol-Version`; for a 2026-07-28 `message`, its revision, `Mcp-Method`, `Mcp-Name`.
fn session_headers(link: &Link, message: &Value) -> Vec<(String, String)> {
    let mut headers = link.headers.clone();
    if let Some(version) = modern_version(message) {
        headers.push(("MCP-Protocol-Version".into(), version.to_owned()));
        if let Some(method) = message["method"].as_str() {
            headers.push(("Mcp-Method".into(), method.to_owned()));
        }
        let params = &message["params"];
        if let Some(name) = params["name"].as_str().or(params["uri"].as_str()) {
            headers.push(("Mcp-Name".into(), name.to_owned()));
        }
        return headers;
    }
    if let Some(session) = link.session() {
        headers.push(("Mcp-Session-Id".into(), session));
    }
    if let Some(version) = link.protocol_version.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        headers.push(("MCP-Protocol-Version".into(), version));
    }
    headers
}

/// The 2026-07-28-or-later revision a request names in its `_meta`, if any.
fn modern_version(message: &Value) -> Option<&str> {
    let version = message["params"]["_meta"][META_VERSION].as_str()?;
    (version >= MODERN_VERSION).then_some(version)
}

impl Link {
    fn session(&self) -> Option<String> {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// How a request's life ended when its answer did not come from the server.
enum End {
    Answered,
    /// The outcome cannot be known: -31006 with this reason.
    Unknown(&'static str),
    /// The server refused or failed it before running it: -32603 with this message.
    Failed(String),
}

/// What one POST brought.
enum Step {
    Answered,
    /// The answer's stream broke, or the request left and no answer came.
    Broken,
    /// The request never reached the server.
    NotSent,
    /// A 409 for this call (or a refusal to retry later): resume from this event id.
    Resume(String),
    /// A 409 without a stream to resume (a 2026-07-28 call still running, or another call's
    /// stream owed), a 429 or a 503: send again after a backoff, with the same key.
    Later,
    Over(End),
}

/// One request of the local client.
struct Call<'a> {
    link: &'a Link,
    message: Value,
    body: Vec<u8>,
    key: Option<String>,
    stream: Stream,
    /// A POST of this call may have reached the server.
    maybe_sent: bool,
}

impl<'a> Call<'a> {
    fn new(link: &'a Link, message: Value) -> Call<'a> {
        let key = (message["method"] == "tools/call").then(|| link.new_key());
        let body = serde_json::to_vec(&message).unwrap_or_default();
        let stream = Stream::new(message["id"].clone());
        Call { link, message, body, key, stream, maybe_sent: false }
    }

    fn run(mut self) {
        let end = self.drive();
        let id = self.message["id"].clone();
        let error = match end {
            End::Answered => return,
            End::Unknown(reason) => {
                let data = json!({
                    "source": "tidemark connect",
                    "reason": reason,
                    "lastEventId": self.stream.cursor,
                });
                let message = "outcome unknown: the call's stream was lost and could not be \
                               resumed; it was not sent again";
                error_object(Code::OutcomeUnknown.value(), message, Some(data))
            }
            End::Failed(message) => error_object(Code::InternalError.value(), &message, None),
        };
        self.link.emit(&response_object(id, Err(error)));
    }

    /// POSTs until answered, resumed or given up; `attempt` counts reconnections in a row
    /// without progress (a re-send whose stream forwarded something new starts it again, as a
    /// resume does: a 2026-07-28 call cut on every re-send still gets its answer).
    fn drive(&mut self) -> End {
        let mut attempt = 0;
        loop {
            let delivered = self.stream.delivered;
            match self.post() {
                Step::Answered => return End::Answered,
                Step::Over(end) => return end,
                Step::Resume(from) => return self.resume(from),
                Step::Broken => {
                    if let Some(end) = self.after_break() {
                        return end;
                    }
                    if self.stream.delivered > delivered {
                        attempt = 0;
                    }
                }
                // Sent again below, after the backoff.
                Step::NotSent | Step::Later => {}
            }
            attempt += 1;
            if attempt > self.link.reconnect_attempts {
                return if self.maybe_sent {
                    End::Unknown("the server stayed away past --reconnect-attempts")
                } else {
                    End::Failed("the server is unreachable (--reconnect-attempts)".into())
                };
            }
            std::thread::sleep(self.link.backoff(attempt, self.stream.retry));
        }
    }

    /// The stream broke: resume it when it has an event id; else `None` when sending the
    /// request again is safe, else the outcome is unknown.
    fn after_break(&mut self) -> Option<End> {
        if let Some(cursor) = self.stream.cursor.clone() {
            if modern_version(&self.message).is_none() {
                return Some(self.resume(cursor));
            }
        }
        if self.resend_is_safe() {
            None
        } else {
            Some(End::Unknown("the stream dropped and the server gave no event id to resume from"))
        }
    }

    fn resend_is_safe(&self) -> bool {
        let method = self.message["method"].as_str().unwrap_or_default();
        if IDEMPOTENT_METHODS.contains(&method) || method.ends_with("/list") || !self.maybe_sent {
            return true;
        }
        if method == "tools/call" {
            let tool = self.message["params"]["name"].as_str().unwrap_or_default();
            let tools = self.link.idempotent_tools.lock().unwrap_or_else(|e| e.into_inner());
            if tools.contains(tool) {
                return true;
            }
            // 2026-07-28: the key is the only way to ask the server not to run it again.
            if self.key.is_some() && modern_version(&self.message).is_some() {
                return true;
            }
        }
        self.link.server_dedups.load(Ordering::Relaxed)
    }

    /// One POST of the request and what it brought.
    fn post(&mut self) -> Step {
        let mut headers = session_headers(self.link, &self.message);
        if let Some(key) = &self.key {
            headers.push(("Idempotency-Key".into(), key.clone()));
        }
        let request = Request { method: "POST", headers: &headers, body: &self.body };
        let mut response = match exchange(&self.link.target, &request) {
            Ok(response) => response,
            Err(Failure::NotSent(e)) => {
                eprintln!("tidemark connect: cannot reach the server ({e}); will retry");
                return Step::NotSent;
            }
            Err(Failure::Sent(_)) => {
                self.maybe_sent = true;
                return Step::Broken;
            }
        };
        self.maybe_sent = true;
        self.learn_head(&response);
        // A re-send's answer may replay what the first already brought (a dedup hit).
        self.stream.skip = self.stream.delivered;
        self.stream.seen = 0;
        match response.status {
            200..=299 => self.answer(&mut response),
            409 => self.conflict(&mut response),
            429 | 503 => Step::Later,
            status => self.refusal(status, &mut response),
        }
    }

    /// A 2xx: a JSON body or an event stream.
    fn answer(&mut self, response: &mut Response) -> Step {
        let is_sse =
            response.header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        if is_sse {
            return match self.stream.pump(self.link, response) {
                Pumped::Answered => Step::Answered,
                Pumped::Progress | Pumped::Nothing => Step::Broken,
            };
        }
        match response.read_all(MESSAGE_BYTES) {
            Ok(body) => match serde_json::from_slice::<Value>(&body) {
                Ok(message) => {
                    self.stream.deliver(self.link, message);
                    if self.stream.answered {
                        Step::Answered
                    } else {
                        Step::Over(End::Failed("the server answered with another message".into()))
                    }
                }
                Err(_) => Step::Over(End::Failed("the server's answer is not JSON".into())),
            },
            Err(_) => Step::Broken,
        }
    }

    /// A 409 (CONTRACT §4): this call's stream is owed (resume it from our cursor, which is
    /// never earlier than the hint, or from the hint), or another's is (retry later).
    fn conflict(&mut self, response: &mut Response) -> Step {
        let hint = response.header("last-event-id").map(str::to_owned);
        let body: Value = response
            .read_all(MESSAGE_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let id = &self.message["id"];
        let owed = body["error"]["data"]["owedStreams"].as_array();
        let ours = owed.is_none_or(|streams| streams.iter().any(|s| &s["requestId"] == id));
        match (self.stream.cursor.clone().or(hint), ours) {
            (Some(from), true) => Step::Resume(from),
            _ => Step::Later,
        }
    }

    /// Any other status: the server's JSON-RPC error when it sent one, else -32603.
    fn refusal(&mut self, status: u16, response: &mut Response) -> Step {
        let body = response.read_all(MESSAGE_BYTES).unwrap_or_default();
        if let Ok(message) = serde_json::from_slice::<Value>(&body) {
            if let Some(error) = message.get("error") {
                let answer = response_object(self.message["id"].clone(), Err(error.clone()));
                self.link.emit(&answer);
                return Step::Answered;
            }
        }
        Step::Over(End::Failed(format!("the server refused the request: HTTP {status}")))
    }

    /// Resumes this call's stream from event `from` until its answer, or gives up.
    fn resume(&mut self, from: String) -> End {
        let mut from = from;
        let mut attempt = 0;
        self.stream.skip = 0;
        loop {
            let mut headers = session_headers(self.link, &Value::Null);
            headers.push(("Last-Event-ID".into(), from.clone()));
            let request = Request { method: "GET", headers: &headers, body: b"" };
            self.stream.seen = 0;
            match exchange(&self.link.target, &request) {
                Ok(mut response) if response.status == 200 => {
                    match self.stream.pump(self.link, &mut response) {
                        Pumped::Answered => return End::Answered,
                        Pumped::Progress => attempt = 0,
                        Pumped::Nothing => {}
                    }
                    from = self.stream.cursor.clone().unwrap_or(from);
                }
                Ok(response) if matches!(response.status, 429 | 500..=599) => {}
                Ok(_) => return End::Unknown("the server refused to resume the stream"),
                Err(_) => {}
            }
            attempt += 1;
            if attempt > self.link.reconnect_attempts {
                return End::Unknown("the server stayed away past --reconnect-attempts");
            }
            std::thread::sleep(self.link.backoff(attempt, self.stream.retry));
        }
    }

    /// What a response head teaches: the session id, and whether the server decides retries.
    fn learn_head(&self, response: &Response) {
        if let Some(session) = response.header("mcp-session-id") {
            if self.message["method"] == "initialize" {
                *self.link.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.into());
            }
        }
        if response.header("mcp-stream-resumable").is_some() {
            self.link.server_dedups.store(true, Ordering::Relaxed);
        }
    }
}

/// How a response stream ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pumped {
    /// The awaited answer came (and was forwarded).
    Answered,
    /// It broke or ended after forwarding at least one new message.
    Progress,
    /// It broke or ended with nothing new.
    Nothing,
}

/// One request's stream as forwarded so far (across its POST, re-sends and resumptions).
struct Stream {
    /// The JSON-RPC id whose answer ends the stream (`Null`: the standalone stream, no end).
    awaited: Value,
    /// The last event id forwarded: where a resumption starts.
    cursor: Option<String>,
    /// The server's `retry:` hint.
    retry: Option<Duration>,
    /// Messages other than the answer forwarded so far.
    delivered: usize,
    /// Of this response's messages, how many to skip (a re-send's replay), and seen so far.
    skip: usize,
    seen: usize,
    answered: bool,
    decoder: SseDecoder,
}

impl Stream {
    fn new(awaited: Value) -> Stream {
        Stream {
            awaited,
            cursor: None,
            retry: None,
            delivered: 0,
            skip: 0,
            seen: 0,
            answered: false,
            decoder: SseDecoder::new(MESSAGE_BYTES),
        }
    }

    /// Reads an event stream to its end or its break, forwarding each message; the cursor
    /// moves only past events whose messages were all forwarded.
    fn pump(&mut self, link: &Link, response: &mut Response) -> Pumped {
        self.decoder.restart();
        let before = self.delivered;
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = response.read_piece(&mut buf) {
            if n == 0 {
                break;
            }
            let mut messages = Vec::new();
            let fed = self.decoder.feed(&buf[..n], &mut |data: &[u8]| {
                if !data.trim_ascii().is_empty() {
                    messages.push(serde_json::from_slice::<Value>(data));
                }
            });
            for message in messages.into_iter().flatten() {
                self.deliver(link, message);
            }
            self.cursor = self.decoder.last_id().map(str::to_owned).or(self.cursor.take());
            self.retry = self.decoder.retry().or(self.retry);
            if self.answered {
                return Pumped::Answered;
            }
            if fed.is_err() {
                break;
            }
        }
        if self.delivered > before {
            Pumped::Progress
        } else {
            Pumped::Nothing
        }
    }

    /// Forwards one message of the server, unless a re-send's replay already brought it; the
    /// awaited answer also teaches the link what it says (session, version, idempotent tools).
    fn deliver(&mut self, link: &Link, message: Value) {
        let is_answer = !self.awaited.is_null()
            && message.get("method").is_none()
            && message.get("id") == Some(&self.awaited);
        if is_answer {
            learn_answer(link, &message);
            link.emit(&message);
            self.answered = true;
            return;
        }
        self.seen += 1;
        if self.seen > self.skip {
            link.emit(&message);
            self.delivered += 1;
        }
    }
}

/// What an answer teaches: an `initialize` result's protocol version, a `tools/list` result's
/// idempotent tools.
fn learn_answer(link: &Link, message: &Value) {
    let result = &message["result"];
    if let Some(version) = result["protocolVersion"].as_str() {
        if result.get("serverInfo").is_some() {
            *link.protocol_version.lock().unwrap_or_else(|e| e.into_inner()) = Some(version.into());
        }
    }
    if let Some(tools) = result["tools"].as_array() {
        let mut known = link.idempotent_tools.lock().unwrap_or_else(|e| e.into_inner());
        for tool in tools {
            let hints = &tool["annotations"];
            if hints["readOnlyHint"] == true || hints["idempotentHint"] == true {
                if let Some(name) = tool["name"].as_str() {
                    known.insert(name.to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::connect::link::ConnectFlags;
    use clap::Parser;

    /// A server on a real socket answering the i-th POST with `answers[i]` (then closing: a
    /// body without its terminating chunk is a cut stream); it returns each POST's
    /// `Idempotency-Key`.
    fn scripted(answers: Vec<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        let server = std::thread::spawn(move || {
            let mut keys = Vec::new();
            for answer in answers {
                let (mut socket, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(socket.try_clone().expect("clone"));
                let (mut line, mut length) = (String::new(), 0);
                while reader.read_line(&mut line).expect("head") > 2 {
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().expect("length");
                    }
                    if let Some(v) = lower.strip_prefix("idempotency-key:") {
                        keys.push(v.trim().to_owned());
                    }
                    line.clear();
                }
                reader.take(length).read_to_end(&mut Vec::new()).expect("body");
                let _ = socket.write_all(answer.as_bytes());
            }
            keys
        });
        (url, server)
    }

    /// The head and the first `progress` events of a 2026-07-28 `slow_counter` stream (no event
    /// ids), and its answer when `answered`; chunked, the terminating chunk only when answered.
    fn modern_stream(progress: usize, answered: bool) -> String {
        let mut body = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                        Transfer-Encoding: chunked\r\n\r\n"
            .to_owned();
        let mut event = |message: Value| {
            let data = format!("data: {message}\n\n");
            body.push_str(&format!("{:x}\r\n{data}\r\n", data.len()));
        };
        for n in 1..=progress {
            let params = json!({"progressToken": "t", "progress": n});
            event(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}));
        }
        if answered {
            event(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}));
            body.push_str("0\r\n\r\n");
        }
        body
    }

    #[test]
    fn connect_a_modern_resend_that_made_progress_does_not_spend_the_retry_budget() {
        // Goal: CONTRACT §12's budget is reconnections in a row *without progress*; a 2026-07-28
        // call whose every re-send (same key) is cut after one new event still gets its answer
        // with --reconnect-attempts 1, and with the same key on every POST. Method: a scripted
        // server on a real socket: three cut streams each one event longer, then the answer.
        let answers = vec![
            modern_stream(1, false),
            modern_stream(2, false),
            modern_stream(3, false),
            modern_stream(3, true),
        ];
        let (url, server) = scripted(answers);
        let flags = ConnectFlags::try_parse_from([
            "connect",
            &url,
            "--reconnect-attempts",
            "1",
            "--backoff-min-ms",
            "1",
        ])
        .expect("flags");
        let link = Link::new(&flags).expect("link");
        let meta = json!({META_VERSION: MODERN_VERSION, "progressToken": "t"});
        let params = json!({"name": "slow_counter", "arguments": {}, "_meta": meta});
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let mut call = Call::new(&link, message);
        assert!(matches!(call.drive(), End::Answered), "answered within the budget");
        assert_eq!(call.stream.delivered, 3, "each progress event forwarded once");
        let keys = server.join().expect("server");
        assert_eq!(keys.len(), 4, "one POST and three re-sends, each with a key");
        assert!(keys.iter().all(|k| *k == keys[0]), "the same key every time: {keys:?}");
    }
}
