//! Real-client check of tidemark's 2026-07-28 ("modern", stateless) era with the official Rust MCP
//! SDK (rmcp), run by scripts/clients.sh's `modern` stage.
//!
//! Goal: prove that an unmodified rmcp client in its `Discover` lifecycle (server/discover with
//! 2026-07-28 as the only preferred version; rmcp never falls back to initialize in this mode)
//! ends in the 2026-07-28 era against the server and completes: tools/list; echo; slow_counter
//! with progress (each notification exactly once, in order) that ran exactly once (get_counter
//! before and after); and the input-required round trip of the demo tool `greet`: the server
//! answers the first tools/call with an InputRequiredResult asking, through elicitation/create,
//! "What is your name?" (form schema: one required string property `name`); rmcp's `call_tool`
//! hands it to this client's `create_elicitation`, which accepts with {name: "Ada"}, and retries
//! tools/call with inputResponses (and the echoed requestState) by itself; the result must be
//! "Hello, Ada!".
//!
//! Method: drive rmcp as an application would; the transport's HTTP client is reqwest wrapped in
//! [`Counting`], which only records the JSON-RPC messages it POSTs (never alters them).
//!
//! Usage: tidemark-rmcp-modern-client --url URL [--steps N] [--delay-ms N] [--check-counter]
//!            [--no-greet] [--timeout-s N] [--label TEXT]
//! Prints `[LABEL] ok: ...` and exits 0 when every check passed; prints `[LABEL] FAILED: ...`
//! (a check) or `[LABEL] ERROR: ...` (an SDK or transport error) on stderr and exits 1; 2 on usage.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientJsonRpcMessage,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, ErrorData,
    FormElicitationCapability, Implementation, JsonObject,
    ProgressNotificationParam, ProtocolVersion, RequestId,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _, RoleClient};
use serde_json::{json, Value};

const MODERN: &str = "2026-07-28";
const GREET_MESSAGE: &str = "What is your name?";
const GREET_NAME: &str = "Ada";

/// A check that failed: the message says what was expected and what came.
struct CheckFailed(String);

type Outcome<T> = Result<T, Failure>;

enum Failure {
    Check(CheckFailed),
    Sdk(String),
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Sdk(e.to_string())
    }
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Outcome<()> {
    if cond {
        Ok(())
    } else {
        Err(Failure::Check(CheckFailed(msg())))
    }
}

struct Args {
    url: String,
    steps: u64,
    delay_ms: u64,
    check_counter: bool,
    greet: bool,
    timeout_s: u64,
    label: String,
}

const USAGE: &str = "usage: tidemark-rmcp-modern-client --url URL [--steps N] [--delay-ms N] \
                     [--check-counter] [--no-greet] [--timeout-s N] [--label TEXT]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: String::new(),
        steps: 3,
        delay_ms: 20,
        check_counter: false,
        greet: true,
        timeout_s: 60,
        label: "rmcp-modern".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let number = |name: &str, v: String| v.parse::<u64>().map_err(|_| format!("bad {name}: {v}"));
        match a.as_str() {
            "--url" => args.url = value("--url")?,
            "--steps" => args.steps = number("--steps", value("--steps")?)?,
            "--delay-ms" => args.delay_ms = number("--delay-ms", value("--delay-ms")?)?,
            "--timeout-s" => args.timeout_s = number("--timeout-s", value("--timeout-s")?)?,
            "--label" => args.label = value("--label")?,
            "--check-counter" => args.check_counter = true,
            "--no-greet" => args.greet = false,
            "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    if args.url.is_empty() {
        return Err("--url is required".into());
    }
    Ok(args)
}

// ---- the wire, as the transport's HTTP client sees it --------------------------------------

/// One POSTed JSON-RPC message: its method (or `(response)`), and for tools/call its tool name,
/// inputResponses and whether it echoed a requestState.
#[derive(Debug, Clone)]
struct Posted {
    method: String,
    tool: Option<String>,
    input_responses: Option<Value>,
    request_state: bool,
}

#[derive(Default)]
struct WireLog {
    posts: Vec<Posted>,
    deletes: u32,
    gets: u32,
}

/// reqwest::Client (rmcp's own StreamableHttpClient implementation) plus a log of what it sent.
#[derive(Clone)]
struct Counting {
    inner: reqwest::Client,
    wire: Arc<Mutex<WireLog>>,
}

impl Counting {
    fn record(&self, message: &ClientJsonRpcMessage) {
        let v = serde_json::to_value(message).unwrap_or(Value::Null);
        let method = match v.get("method").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None if v.get("result").is_some() || v.get("error").is_some() => "(response)".into(),
            None => "?".into(),
        };
        let params = v.get("params");
        let posted = Posted {
            tool: (method == "tools/call")
                .then(|| params.and_then(|p| p.get("name")).and_then(Value::as_str).map(str::to_owned))
                .flatten(),
            input_responses: params.and_then(|p| p.get("inputResponses")).cloned(),
            request_state: params.is_some_and(|p| p.get("requestState").is_some()),
            method,
        };
        self.wire.lock().unwrap().posts.push(posted);
    }
}

type SseStream = BoxStream<'static, Result<sse_stream::Sse, SseError>>;

impl StreamableHttpClient for Counting {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.record(&message);
        self.inner.post_message(uri, message, session_id, auth_header, custom_headers).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.record(&message);
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.record(&message);
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.wire.lock().unwrap().deletes += 1;
        self.inner.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.wire.lock().unwrap().gets += 1;
        self.inner.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.wire.lock().unwrap().gets += 1;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

// ---- the client handler ---------------------------------------------------------------------

/// What the server asked of this client: progress notifications and elicitations (with the
/// request id rmcp gave the handler: the inputRequests key on the 2026-07-28 path).
#[derive(Clone, Default)]
struct Handler {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    elicitations: Arc<Mutex<Vec<(RequestId, Value)>>>,
    greet: bool,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // (ClientCapabilities::builder() needs rmcp's `macros` feature; the fields are public.)
        let mut capabilities = ClientCapabilities::default();
        if self.greet {
            capabilities.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        }
        ClientConfig::new(capabilities, Implementation::new("tidemark-rmcp-modern-client", "0.1.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let seen = serde_json::to_value(&request).unwrap_or(Value::Null);
        self.elicitations.lock().unwrap().push((context.id, seen));
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "name": GREET_NAME })))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }
}

// ---- the run ------------------------------------------------------------------------------------

type Client = RunningService<RoleClient, Handler>;

fn args_object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

fn text_of(result: &CallToolResult, what: &str) -> Outcome<String> {
    let v = serde_json::to_value(result)?;
    let first = v.get("content").and_then(Value::as_array).and_then(|c| c.first());
    let Some(first) = first else {
        return Err(Failure::Check(CheckFailed(format!("{what}: result has no content: {v}"))));
    };
    check(first.get("type").and_then(Value::as_str) == Some("text"), || {
        format!("{what}: first content item is not text: {first}")
    })?;
    check(v.get("isError").and_then(Value::as_bool) != Some(true), || format!("{what}: isError is true: {v}"))?;
    Ok(first.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())
}

async fn call(client: &Client, name: &'static str, arguments: Value, timeout: Duration) -> Outcome<String> {
    let params = CallToolRequestParams::new(name).with_arguments(args_object(arguments));
    let result = tokio::time::timeout(timeout, client.call_tool(params))
        .await
        .map_err(|_| Failure::Sdk(format!("{name}: no result within {timeout:?}")))??;
    text_of(&result, name)
}

async fn counter(client: &Client, timeout: Duration) -> Outcome<u64> {
    let text = call(client, "get_counter", json!({}), timeout).await?;
    text.trim()
        .parse::<u64>()
        .map_err(|_| Failure::Check(CheckFailed(format!("get_counter: text is not a number: {text:?}"))))
}

fn tool_posts(wire: &Arc<Mutex<WireLog>>, tool: &str) -> Vec<Posted> {
    wire.lock().unwrap().posts.iter().filter(|p| p.tool.as_deref() == Some(tool)).cloned().collect()
}

fn method_posts(wire: &Arc<Mutex<WireLog>>, method: &str) -> usize {
    wire.lock().unwrap().posts.iter().filter(|p| p.method == method).count()
}

async fn run(args: &Args, handler: Handler, wire: Arc<Mutex<WireLog>>) -> Outcome<String> {
    let timeout = Duration::from_secs(args.timeout_s);
    let http = Counting {
        // As rmcp's own default client for this transport: no idle pooling (see rmcp's
        // default_http_client); redirects are not followed (loopback, one URL).
        inner: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()?,
        wire: wire.clone(),
    };
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(args.url.as_str()),
    );
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client: Client = tokio::time::timeout(timeout, handler.clone().serve_with_lifecycle(transport, lifecycle))
        .await
        .map_err(|_| Failure::Sdk(format!("connect: no answer within {timeout:?}")))??;

    // The era: the version rmcp took from the server's DiscoverResult.
    let version = client
        .peer_info()
        .map(|info| info.protocol_version.to_string())
        .unwrap_or_else(|| "(none)".into());
    check(version == MODERN, || format!("connect: ended in protocol version {version}, expected {MODERN}"))?;
    check(method_posts(&wire, "server/discover") >= 1, || "no server/discover on the wire".into())?;
    check(method_posts(&wire, "initialize") == 0, || "the Discover lifecycle sent initialize".into())?;

    let tools = client.list_all_tools().await?;
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let mut wanted = vec!["echo", "slow_counter", "get_counter"];
    if args.greet {
        wanted.push("greet");
    }
    for want in wanted {
        check(names.iter().any(|n| n == want), || format!("tools/list: missing {want}; got {names:?}"))?;
    }

    let echo = call(&client, "echo", json!({ "text": "hi modern" }), timeout).await?;
    check(echo == "hi modern", || format!("echo: expected \"hi modern\", got {echo:?}"))?;

    let before = if args.check_counter { Some(counter(&client, timeout).await?) } else { None };
    handler.progress.lock().unwrap().clear();
    let slow_posts_before = tool_posts(&wire, "slow_counter").len();
    let text = call(
        &client,
        "slow_counter",
        json!({ "steps": args.steps, "delay_ms": args.delay_ms }),
        timeout,
    )
    .await?;
    let value = text
        .trim()
        .parse::<u64>()
        .map_err(|_| Failure::Check(CheckFailed(format!("slow_counter: result is not a number: {text:?}"))))?;
    tokio::time::sleep(Duration::from_millis(50)).await; // a late duplicate is caught, not missed
    let progress = handler.progress.lock().unwrap().clone();
    let values: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    check(progress.len() as u64 == args.steps, || {
        format!("slow_counter: expected {} progress notifications, got {}: {values:?}", args.steps, progress.len())
    })?;
    check(values.windows(2).all(|w| w[1] > w[0]), || {
        format!("slow_counter: progress not strictly increasing (duplicate or out of order): {values:?}")
    })?;
    check(progress.windows(2).all(|w| w[0].progress_token == w[1].progress_token), || {
        "slow_counter: progress notifications carry different progress tokens".into()
    })?;
    for p in &progress {
        check(p.total.is_none() || p.total == Some(args.steps as f64), || {
            format!("slow_counter: progress total {:?}, expected {}", p.total, args.steps)
        })?;
    }
    let slow_posts = tool_posts(&wire, "slow_counter").len() - slow_posts_before;
    check(slow_posts == 1, || format!("slow_counter: rmcp POSTed tools/call {slow_posts} times (re-POST)"))?;
    if let Some(before) = before {
        let after = counter(&client, timeout).await?;
        check(value == before + 1 && after == before + 1, || {
            format!("slow_counter ran more than once or not at all: before {before}, result {value}, after {after}")
        })?;
    }

    let mut greet_summary = String::new();
    if args.greet {
        let responses_before = method_posts(&wire, "(response)");
        let greet = call(&client, "greet", json!({}), timeout).await?;
        let expected = format!("Hello, {GREET_NAME}!");
        check(greet == expected, || format!("greet: expected {expected:?}, got {greet:?}"))?;
        let elicitations = handler.elicitations.lock().unwrap().clone();
        check(elicitations.len() == 1, || {
            format!("greet: the elicitation handler ran {} times, expected 1", elicitations.len())
        })?;
        let (handler_id, question) = &elicitations[0];
        check_greet_question(question)?;
        let posts = tool_posts(&wire, "greet");
        check(posts.len() == 2, || {
            format!(
                "greet ({MODERN}): expected 2 tools/call POSTs (first round, retry with inputResponses), saw {}",
                posts.len()
            )
        })?;
        check(posts[0].input_responses.is_none(), || {
            format!("greet ({MODERN}): the first round carried inputResponses: {:?}", posts[0].input_responses)
        })?;
        let answers = posts[1].input_responses.clone().unwrap_or(Value::Null);
        let entries = answers.as_object().cloned().unwrap_or_default();
        check(entries.len() == 1, || format!("greet ({MODERN}): the retry must carry one inputResponse: {answers}"))?;
        let (key, answer) = entries.iter().next().expect("one entry");
        check(
            answer.get("action").and_then(Value::as_str) == Some("accept")
                && answer.get("content") == Some(&json!({ "name": GREET_NAME })),
            || format!("greet ({MODERN}): the retry's inputResponse is not the handler's answer: {answer}"),
        )?;
        let posted = method_posts(&wire, "(response)") - responses_before;
        check(posted == 0, || format!("greet ({MODERN}): {posted} JSON-RPC response(s) POSTed"))?;
        greet_summary = format!(
            " greet={greet:?} via input_required key={key:?} (handler id {handler_id}) requestState={}",
            if posts[1].request_state { "echoed" } else { "absent" }
        );
    }

    let _ = client.cancel().await;
    let values_shown: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
    Ok(format!(
        "lifecycle=Discover version={version} echo=ok result={value} progress=[{}]{greet_summary}",
        values_shown.join(",")
    ))
}

fn check_greet_question(question: &Value) -> Outcome<()> {
    check(question.get("mode").and_then(Value::as_str).unwrap_or("form") == "form", || {
        format!("greet: elicitation is not form mode: {question}")
    })?;
    let message = question.get("message").and_then(Value::as_str);
    check(message == Some(GREET_MESSAGE), || {
        format!("greet: elicitation message {message:?}, expected {GREET_MESSAGE:?}")
    })?;
    let schema = question.get("requestedSchema").cloned().unwrap_or(Value::Null);
    let props = schema.get("properties").and_then(Value::as_object);
    check(
        schema.get("type").and_then(Value::as_str) == Some("object")
            && props.is_some_and(|p| p.len() == 1 && p.get("name").and_then(|n| n.get("type")) == Some(&json!("string")))
            && schema.get("required") == Some(&json!(["name"])),
        || format!("greet: requestedSchema must be an object with one required string property 'name': {schema}"),
    )
}

fn posts_summary(wire: &Arc<Mutex<WireLog>>) -> String {
    let log = wire.lock().unwrap();
    let mut by_method: BTreeMap<&str, u32> = BTreeMap::new();
    for p in &log.posts {
        *by_method.entry(p.method.as_str()).or_default() += 1;
    }
    format!("posts={by_method:?} gets={} deletes={}", log.gets, log.deletes)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let handler = Handler { greet: args.greet, ..Handler::default() };
    let wire = Arc::new(Mutex::new(WireLog::default()));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let outcome = runtime.block_on(run(&args, handler, wire.clone()));
    let label = &args.label;
    match outcome {
        Ok(summary) => {
            println!(
                "[{label}] ok: {summary} {} {}ms",
                posts_summary(&wire),
                started.elapsed().as_millis()
            );
        }
        Err(failure) => {
            match failure {
                Failure::Check(CheckFailed(msg)) => eprintln!("[{label}] FAILED: {msg}"),
                Failure::Sdk(msg) => eprintln!("[{label}] ERROR: {msg}"),
            }
            eprintln!("[{label}] wire: {}", posts_summary(&wire));
            std::process::exit(1);
        }
    }
}
