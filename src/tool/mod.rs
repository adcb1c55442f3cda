//! Tool registry and execution: the MCP server features (tools, resources, prompts,
//! completions) that a session can call, behind traits that a library user or a later stdio
//! bridge can implement.
//!
//! Owns: the `Tool` trait, the `Emit` trait through which a running tool talks to its client
//! (progress, logs, server→client requests, SEP-1699 disconnect), the built-in tool sets
//! (`demo`, `conformance`) and the `Registry` that the transport consults.
//! Called by: `transport` (list/read/get/complete) and `stream` (runs a tool call).
//! Never: touches sockets, sessions or the replay ring; a tool only sees `Emit`.

pub mod conformance;
pub mod demo;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use simd_json::prelude::*;

pub use simd_json::OwnedValue as Value;

/// A boxed, single-core future: tools run as monoio tasks on the session's owner core.
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// RFC 5424 severities as MCP `logging/setLevel` names them (ascending).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    /// Parses the wire name; `None` for anything else (the peer sent a bad level).
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// MCP `ToolAnnotations` that matter to the migration boundary (CONTRACT §4 step 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: bool,
    /// `idempotentHint`: repeating a call with the same arguments has no additional effect.
    pub idempotent: bool,
}

impl Annotations {
    /// True when a retried call may simply run again.
    pub fn safe_to_repeat(self) -> bool {
        self.read_only || self.idempotent
    }
}

/// What `tools/list` says about a tool.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// The JSON Schema of `arguments`, as JSON text (kept verbatim, e.g. `$schema`, `$defs`).
    pub input_schema: &'static str,
    pub annotations: Annotations,
}

/// Why a tool call (or a prompt/resource lookup) failed; mapped to JSON-RPC by `transport`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolError {
    /// The peer sent arguments the tool cannot use → -32602.
    InvalidParams(String),
    /// No such tool, prompt or resource → -32602 (MCP uses invalid params for unknown names).
    NotFound(String),
    /// A server→client request was answered with a JSON-RPC error by the client.
    ClientError { code: i64, message: String },
    /// The call was cancelled (notifications/cancelled or session end); nothing is sent.
    Cancelled,
    /// Our bug or resource exhaustion → -32603.
    Internal(String),
}

/// How a running tool talks to its client. Implemented by `stream`; every message goes on the
/// originating call's stream (MCP 2025-11-25 transports: messages SHOULD relate to the request).
pub trait Emit {
    /// `notifications/progress` carrying the request's `_meta.progressToken` (as the client sent
    /// it, same JSON type). A no-op when the request had no token.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// `notifications/message` when `level` is at or above the session's `logging/setLevel`.
    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value);
    /// A server→client request (`sampling/createMessage`, `elicitation/create`, `roots/list`)
    /// sent on this call's stream; resolves with the client's POSTed `result`.
    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, Result<Value, ToolError>>;
    /// SEP-1699: close the HTTP connection that carries this call's stream without ending the
    /// stream; the client resumes with GET + Last-Event-ID and gets the rest.
    fn close_connection(&self);
}

/// A callable tool. `call` returns a `CallToolResult` object (`{"content": [...], ...}`); a
/// tool-level failure is a result with `isError: true`, not an `Err`. `arguments` is the
/// request's `arguments` object, or null when the client omitted it.
pub trait Tool {
    fn spec(&self) -> &ToolSpec;
    fn call(
        &self,
        arguments: Value,
        emit: Rc<dyn Emit>,
    ) -> LocalBoxFuture<'static, Result<Value, ToolError>>;
}

/// Resources, resource templates, prompts and completions of a tool set.
pub trait Catalog {
    /// Items for `resources/list` (each `{uri, name, ...}`).
    fn resources(&self) -> Vec<Value> {
        Vec::new()
    }
    /// Items for `resources/templates/list` (each `{uriTemplate, name, ...}`).
    fn resource_templates(&self) -> Vec<Value> {
        Vec::new()
    }
    /// `resources/read` result (`{contents: [...]}`), or `None` when the uri is not ours.
    fn read_resource(&self, _uri: &str) -> Option<Value> {
        None
    }
    /// Items for `prompts/list` (each `{name, description, arguments?}`).
    fn prompts(&self) -> Vec<Value> {
        Vec::new()
    }
    /// `prompts/get` result (`{messages: [...]}`), `Err(NotFound)` when the name is not ours.
    fn get_prompt(&self, name: &str, _arguments: &Value) -> Result<Value, ToolError> {
        Err(ToolError::NotFound(name.to_owned()))
    }
    /// `completion/complete` values for a `ref` and argument, or `None` when not ours.
    fn complete(&self, _reference: &Value, _argument: &Value) -> Option<Vec<String>> {
        None
    }
}

/// Which built-in sets `--tools` enables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSet {
    Demo,
    Conformance,
}

/// All tools and catalogs of one core; built once per worker.
pub struct Registry {
    tools: Vec<Rc<dyn Tool>>,
    by_name: HashMap<&'static str, usize>,
    catalogs: Vec<Box<dyn Catalog>>,
    /// `{"tools":[...]}` encoded once, so `tools/list` costs no allocation per request.
    tools_list_json: String,
}

/// The MCP `completion/complete` cap: "values: max 100 items" (MCP 2025-11-25, server/utilities/
/// completion). Longer candidate lists are cut here and reported with `total` and `hasMore`.
const COMPLETION_VALUES_MAX: usize = 100;

/// Listed in place of a built-in schema that is not a JSON object. Never used in practice: a
/// unit test checks that every built-in schema is listed verbatim.
const INPUT_SCHEMA_FALLBACK: &str = r#"{"type":"object"}"#;

impl Registry {
    /// Builds the tools and catalogs of `sets`, in the order given. A set named twice is built
    /// once; if two sets ever define the same tool name, the first one wins.
    pub fn new(sets: &[ToolSet]) -> Registry {
        let mut tools: Vec<Rc<dyn Tool>> = Vec::new();
        let mut by_name = HashMap::new();
        let mut catalogs: Vec<Box<dyn Catalog>> = Vec::new();
        for (index, &set) in sets.iter().enumerate() {
            if sets[..index].contains(&set) {
                continue;
            }
            let (set_tools, catalog) = match set {
                ToolSet::Demo => (demo::tools(), None),
                ToolSet::Conformance => (conformance::tools(), Some(conformance::catalog())),
            };
            for tool in set_tools {
                let name = tool.spec().name;
                if !by_name.contains_key(name) {
                    by_name.insert(name, tools.len());
                    tools.push(tool);
                }
            }
            catalogs.extend(catalog);
        }
        let tools_list_json = encode_tools_list(&tools);
        Registry { tools, by_name, catalogs, tools_list_json }
    }

    /// The tool called `name`, for `tools/call`; `None` when no enabled set has it.
    pub fn tool(&self, name: &str) -> Option<Rc<dyn Tool>> {
        let index = *self.by_name.get(name)?;
        self.tools.get(index).cloned()
    }

    /// The `tools/list` result object (`{"tools":[...]}`) as JSON text, encoded once in `new`.
    pub fn tools_list_json(&self) -> &str {
        &self.tools_list_json
    }

    /// The `resources/list` result: `{"resources":[...]}`.
    pub fn resources_list(&self) -> Value {
        let resources: Vec<Value> = self.catalogs.iter().flat_map(|c| c.resources()).collect();
        simd_json::json!({ "resources": resources })
    }

    /// The `resources/templates/list` result: `{"resourceTemplates":[...]}`.
    pub fn resource_templates_list(&self) -> Value {
        let templates: Vec<Value> =
            self.catalogs.iter().flat_map(|c| c.resource_templates()).collect();
        simd_json::json!({ "resourceTemplates": templates })
    }

    /// The `resources/read` result for `uri`, from the first catalog that knows it.
    pub fn read_resource(&self, uri: &str) -> Result<Value, ToolError> {
        self.catalogs
            .iter()
            .find_map(|catalog| catalog.read_resource(uri))
            .ok_or_else(|| ToolError::NotFound(uri.to_owned()))
    }

    /// The `prompts/list` result: `{"prompts":[...]}`.
    pub fn prompts_list(&self) -> Value {
        let prompts: Vec<Value> = self.catalogs.iter().flat_map(|c| c.prompts()).collect();
        simd_json::json!({ "prompts": prompts })
    }

    /// The `prompts/get` result from the first catalog that has a prompt called `name`.
    /// `arguments` is the request's `arguments` object, or null when the client sent none.
    pub fn get_prompt(&self, name: &str, arguments: &Value) -> Result<Value, ToolError> {
        for catalog in &self.catalogs {
            match catalog.get_prompt(name, arguments) {
                Err(ToolError::NotFound(_)) => continue,
                found => return found,
            }
        }
        Err(ToolError::NotFound(name.to_owned()))
    }

    /// The `completion/complete` result for the request's params (`{ref, argument, ...}`).
    /// Anything no catalog recognises, malformed params included, completes to nothing: the
    /// method has no error of its own that a client could act on.
    pub fn complete(&self, params: &Value) -> Value {
        let null = Value::Static(simd_json::StaticNode::Null);
        let reference = params.get("ref").unwrap_or(&null);
        let argument = params.get("argument").unwrap_or(&null);
        let mut values = self
            .catalogs
            .iter()
            .find_map(|catalog| catalog.complete(reference, argument))
            .unwrap_or_default();
        let total = values.len();
        values.truncate(COMPLETION_VALUES_MAX);
        simd_json::json!({
            "completion": {
                "values": values,
                "total": total as u64,
                "hasMore": total > COMPLETION_VALUES_MAX,
            }
        })
    }

    /// `ServerCapabilities` for the `initialize` result. `tools`, `logging` and `completions`
    /// are always declared (the methods always answer); `resources` and `prompts` only when an
    /// enabled set has some, so a capability never promises an empty feature.
    pub fn capabilities(&self) -> Value {
        let mut capabilities = simd_json::owned::Object::default();
        capabilities.insert("tools".into(), simd_json::json!({ "listChanged": true }));
        capabilities.insert("logging".into(), simd_json::json!({}));
        capabilities.insert("completions".into(), simd_json::json!({}));
        let has_resources = self
            .catalogs
            .iter()
            .any(|c| !c.resources().is_empty() || !c.resource_templates().is_empty());
        if has_resources {
            capabilities.insert(
                "resources".into(),
                simd_json::json!({ "subscribe": true, "listChanged": true }),
            );
        }
        if self.catalogs.iter().any(|c| !c.prompts().is_empty()) {
            capabilities.insert("prompts".into(), simd_json::json!({ "listChanged": true }));
        }
        Value::Object(Box::new(capabilities))
    }
}

/// Parses the `--tools` flag: a comma list of set names (`demo`, `conformance`), whitespace
/// around names ignored, repeats collapsed. An empty or unknown name is an operator error.
pub fn parse_tool_sets(spec: &str) -> Result<Vec<ToolSet>, String> {
    let mut sets = Vec::new();
    for name in spec.split(',').map(str::trim) {
        let set = match name {
            "demo" => ToolSet::Demo,
            "conformance" => ToolSet::Conformance,
            "" => {
                return Err(format!("empty tool set name in {spec:?} (known: demo, conformance)"))
            }
            other => return Err(format!("unknown tool set {other:?} (known: demo, conformance)")),
        };
        if !sets.contains(&set) {
            sets.push(set);
        }
    }
    Ok(sets)
}

/// Encodes the `tools/list` result once. `inputSchema` is copied verbatim from the spec so
/// keywords such as `$schema`, `$defs` and `additionalProperties` reach the client untouched
/// (the conformance scenario `json-schema-2020-12` checks them).
fn encode_tools_list(tools: &[Rc<dyn Tool>]) -> String {
    let mut out = String::from(r#"{"tools":["#);
    for (index, tool) in tools.iter().enumerate() {
        let spec = tool.spec();
        if index > 0 {
            out.push(',');
        }
        out.push_str(r#"{"name":"#);
        out.push_str(&Value::from(spec.name).encode());
        out.push_str(r#","description":"#);
        out.push_str(&Value::from(spec.description).encode());
        out.push_str(r#","inputSchema":"#);
        out.push_str(listed_input_schema(spec.input_schema));
        let Annotations { read_only, idempotent } = spec.annotations;
        if read_only || idempotent {
            out.push_str(r#","annotations":{"readOnlyHint":"#);
            out.push_str(if read_only { "true" } else { "false" });
            out.push_str(r#","idempotentHint":"#);
            out.push_str(if idempotent { "true" } else { "false" });
            out.push('}');
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// `schema` when it is a JSON object, else a permissive object schema, so a typo in a built-in
/// schema cannot corrupt the whole `tools/list` answer (the unit tests reject such a typo).
fn listed_input_schema(schema: &'static str) -> &'static str {
    let mut bytes = schema.as_bytes().to_vec();
    match simd_json::to_owned_value(&mut bytes) {
        Ok(value) if value.is_object() => schema,
        _ => INPUT_SCHEMA_FALLBACK,
    }
}

/// A tool whose behaviour is one async function of its arguments; every built-in tool is one.
struct FnTool<F> {
    spec: ToolSpec,
    run: F,
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, Rc<dyn Emit>) -> Fut,
    Fut: Future<Output = Result<Value, ToolError>> + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(
        &self,
        arguments: Value,
        emit: Rc<dyn Emit>,
    ) -> LocalBoxFuture<'static, Result<Value, ToolError>> {
        Box::pin((self.run)(arguments, emit))
    }
}

/// Wraps a tool function and its spec as a registry entry.
fn fn_tool<F, Fut>(spec: ToolSpec, run: F) -> Rc<dyn Tool>
where
    F: Fn(Value, Rc<dyn Emit>) -> Fut + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + 'static,
{
    Rc::new(FnTool { spec, run })
}

/// A `CallToolResult` holding one text item.
fn text_result(text: impl Into<String>) -> Value {
    simd_json::json!({ "content": [{ "type": "text", "text": text.into() }] })
}

/// A tool-level failure: a `CallToolResult` with `isError: true`, so the model sees why (MCP
/// 2025-11-25 server/tools, "Error Handling"), rather than a JSON-RPC error.
fn error_result(text: impl Into<String>) -> Value {
    simd_json::json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true })
}

/// Argument `name` of a call or prompt. `arguments` must be an object, or null when the client
/// sent none (then every argument is absent).
fn argument<'a>(arguments: &'a Value, name: &str) -> Result<Option<&'a Value>, ToolError> {
    match arguments {
        Value::Object(object) => Ok(object.get(name)),
        Value::Static(simd_json::StaticNode::Null) => Ok(None),
        _ => Err(ToolError::InvalidParams("arguments must be an object".to_owned())),
    }
}

/// Checks that `arguments` is an object or absent, for tools that take no arguments.
fn expect_arguments_object(arguments: &Value) -> Result<(), ToolError> {
    argument(arguments, "").map(|_| ())
}

/// The required string argument `name`.
fn required_str<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    match argument(arguments, name)? {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(ToolError::InvalidParams(format!("argument `{name}` must be a string"))),
        None => Err(ToolError::InvalidParams(format!("missing required argument `{name}`"))),
    }
}

/// A recording `Emit` and a timer-enabled runtime, shared by the unit tests of this module.
#[cfg(test)]
mod testing {
    use super::{Emit, LocalBoxFuture, LogLevel, ToolError, Value};
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::future::Future;
    use std::time::Instant;

    /// One call a tool made on its `Emit`.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Call {
        Progress { progress: f64, total: Option<f64>, message: Option<String> },
        Log { level: LogLevel, logger: Option<String>, data: Value },
        Request { method: String, params: Value },
        CloseConnection,
    }

    /// Records every call with the time it was made; answers requests from a table.
    #[derive(Default)]
    pub struct RecordingEmit {
        pub calls: RefCell<Vec<(Instant, Call)>>,
        answers: RefCell<HashMap<String, Result<Value, ToolError>>>,
    }

    impl RecordingEmit {
        /// The client's answer to every later `request(method, ..)`.
        pub fn answer(&self, method: &str, answer: Result<Value, ToolError>) {
            self.answers.borrow_mut().insert(method.to_owned(), answer);
        }

        /// The calls without their times.
        pub fn calls(&self) -> Vec<Call> {
            self.calls.borrow().iter().map(|(_, call)| call.clone()).collect()
        }

        fn record(&self, call: Call) {
            self.calls.borrow_mut().push((Instant::now(), call));
        }
    }

    impl Emit for RecordingEmit {
        fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
            let message = message.map(str::to_owned);
            self.record(Call::Progress { progress, total, message });
        }

        fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
            self.record(Call::Log { level, logger: logger.map(str::to_owned), data });
        }

        fn request(
            &self,
            method: &str,
            params: Value,
        ) -> LocalBoxFuture<'static, Result<Value, ToolError>> {
            self.record(Call::Request { method: method.to_owned(), params });
            let answer = self
                .answers
                .borrow()
                .get(method)
                .cloned()
                .unwrap_or_else(|| Err(ToolError::Internal(format!("no answer for {method}"))));
            Box::pin(std::future::ready(answer))
        }

        fn close_connection(&self) {
            self.record(Call::CloseConnection);
        }
    }

    /// Runs `future` to completion on a fresh single-thread runtime with timers (epoll driver,
    /// so the tests also pass where io_uring is disabled).
    pub fn run<F: Future>(future: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("test runtime builds")
            .block_on(future)
    }

    /// Parses JSON text into a value.
    pub fn parse(text: &str) -> Value {
        let mut bytes = text.as_bytes().to_vec();
        simd_json::to_owned_value(&mut bytes).expect("valid JSON")
    }

    /// The `text` of the first content item of a `CallToolResult`.
    pub fn first_text(result: &Value) -> &str {
        use simd_json::prelude::*;
        result["content"][0]["text"].as_str().expect("first content item has text")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{parse, run, RecordingEmit};
    use super::*;
    use simd_json::json;

    fn full() -> Registry {
        Registry::new(&[ToolSet::Demo, ToolSet::Conformance])
    }

    /// `^[A-Za-z0-9_.-]{1,128}$` (conformance alpha `tools-name-format`).
    fn valid_tool_name(name: &str) -> bool {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
        (1..=128).contains(&name.len()) && name.bytes().all(allowed)
    }

    #[test]
    fn parse_tool_sets_accepts_known_names_and_rejects_the_rest() {
        // Goal: the --tools flag. Method: table of accepted specs, then of rejected ones.
        let accepted = [
            ("demo", vec![ToolSet::Demo]),
            ("conformance", vec![ToolSet::Conformance]),
            ("demo,conformance", vec![ToolSet::Demo, ToolSet::Conformance]),
            (" conformance , demo ", vec![ToolSet::Conformance, ToolSet::Demo]),
            ("demo,demo", vec![ToolSet::Demo]),
        ];
        for (spec, sets) in accepted {
            assert_eq!(parse_tool_sets(spec), Ok(sets), "{spec:?}");
        }
        for spec in ["", " ", "demo,", ",demo", "demo,,conformance", "Demo", "everything", "demo;x"]
        {
            let error = parse_tool_sets(spec).expect_err(spec);
            assert!(error.contains("demo, conformance"), "{spec:?}: {error}");
        }
        assert!(parse_tool_sets("demo,bogus").expect_err("bogus").contains("\"bogus\""));
    }

    #[test]
    fn tools_list_is_valid_json_with_every_required_field() {
        // Goal: tools-list (name, description, inputSchema) and tools-name-format, and the
        // schema text listed verbatim. Method: parse the cached JSON and compare with the specs.
        let registry = full();
        let listed = parse(registry.tools_list_json());
        let items = listed["tools"].as_array().expect("tools array");
        assert_eq!(items.len(), 17);
        for item in items {
            let name = item["name"].as_str().expect("name");
            assert!(valid_tool_name(name), "{name}");
            assert!(item["description"].as_str().is_some_and(|d| !d.is_empty()), "{name}");
            let tool = registry.tool(name).expect("listed tool is callable");
            let spec = tool.spec();
            assert_eq!(item["inputSchema"], parse(spec.input_schema), "{name}: schema verbatim");
            assert_eq!(item["inputSchema"]["type"], json!("object"), "{name}");
            assert!(item["inputSchema"]["properties"].is_object(), "{name}");
            let hints = spec.annotations.read_only || spec.annotations.idempotent;
            match item.get("annotations") {
                Some(annotations) => {
                    assert!(hints, "{name}");
                    assert_eq!(annotations["readOnlyHint"], json!(spec.annotations.read_only));
                    assert_eq!(annotations["idempotentHint"], json!(spec.annotations.idempotent));
                }
                None => assert!(!hints, "{name}"),
            }
        }
        let text = registry.tools_list_json();
        assert!(text.contains(r#""$schema":"https://json-schema.org/draft/2020-12/schema""#));
    }

    #[test]
    fn registry_dedups_sets_and_finds_tools_by_name() {
        // Goal: a repeated set adds nothing; unknown names are None. Method: compare lists.
        let once = Registry::new(&[ToolSet::Demo]);
        let twice = Registry::new(&[ToolSet::Demo, ToolSet::Demo]);
        assert_eq!(once.tools_list_json(), twice.tools_list_json());
        assert_eq!(twice.tools.len(), 3);
        assert!(twice.tool("echo").is_some());
        assert!(twice.tool("test_simple_text").is_none());
        assert!(twice.tool("").is_none());
        assert!(full().tool("ECHO").is_none());
        let empty = Registry::new(&[]);
        assert_eq!(empty.tools_list_json(), r#"{"tools":[]}"#);
        assert_eq!(empty.resources_list(), json!({ "resources": [] }));
        assert_eq!(empty.prompts_list(), json!({ "prompts": [] }));
    }

    #[test]
    fn registry_runs_a_tool_through_the_trait() {
        // Goal: Registry::tool hands out a callable tool. Method: echo through Rc<dyn Tool>.
        let registry = full();
        let tool = registry.tool("echo").expect("echo");
        let emit: Rc<dyn Emit> = Rc::new(RecordingEmit::default());
        let result = run(tool.call(json!({ "text": "x" }), emit)).expect("ok");
        assert_eq!(result, json!({ "content": [{ "type": "text", "text": "x" }] }));
    }

    #[test]
    fn capabilities_follow_the_enabled_sets() {
        // Goal: capabilities never promise an empty feature, and the conformance set gets what
        // the suite requires. Method: compare the whole object for demo-only and both sets.
        let demo = Registry::new(&[ToolSet::Demo]).capabilities();
        let base = json!({ "tools": { "listChanged": true }, "logging": {}, "completions": {} });
        assert_eq!(demo, base);
        assert_eq!(
            full().capabilities(),
            json!({
                "tools": { "listChanged": true },
                "logging": {},
                "completions": {},
                "resources": { "subscribe": true, "listChanged": true },
                "prompts": { "listChanged": true },
            })
        );
    }

    #[test]
    fn resources_prompts_and_lookups_go_through_the_catalogs() {
        // Goal: the list/read/get wrappers and their NotFound paths. Method: demo+conformance.
        let registry = full();
        assert_eq!(registry.resources_list()["resources"].as_array().map(Vec::len), Some(3));
        let templates = registry.resource_templates_list();
        assert_eq!(
            templates["resourceTemplates"][0]["uriTemplate"],
            json!("test://template/{id}/data")
        );
        assert_eq!(registry.prompts_list()["prompts"].as_array().map(Vec::len), Some(4));
        let read = registry.read_resource("test://template/123/data").expect("read");
        assert!(read["contents"][0]["text"].as_str().is_some_and(|t| t.contains("123")));
        let missing = "test://nonexistent-resource-for-conformance-testing";
        assert_eq!(registry.read_resource(missing), Err(ToolError::NotFound(missing.to_owned())));
        let prompt = registry.get_prompt("test_simple_prompt", &json!(null)).expect("prompt");
        assert!(prompt["messages"].as_array().is_some_and(|m| !m.is_empty()));
        let unknown = registry.get_prompt("nope", &json!({}));
        assert_eq!(unknown, Err(ToolError::NotFound("nope".to_owned())));
        let invalid = registry.get_prompt("test_prompt_with_arguments", &json!({}));
        assert!(matches!(invalid, Err(ToolError::InvalidParams(_))));
        let demo_only = Registry::new(&[ToolSet::Demo]);
        assert!(matches!(
            demo_only.read_resource("test://static-text"),
            Err(ToolError::NotFound(_))
        ));
    }

    #[test]
    fn complete_wraps_catalog_values_and_tolerates_junk() {
        // Goal: completion-complete's shape, and unknown or malformed params → empty values.
        let registry = full();
        let params = json!({
            "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
            "argument": { "name": "arg1", "value": "par" },
        });
        let expected = json!({
            "completion": { "values": ["paris", "park", "party"], "total": 3, "hasMore": false }
        });
        assert_eq!(registry.complete(&params), expected);
        let empty = json!({ "completion": { "values": [], "total": 0, "hasMore": false } });
        let junk = [
            json!(null),
            json!({}),
            json!([1]),
            json!({ "ref": "x", "argument": 3 }),
            json!({ "ref": { "type": "ref/prompt", "name": "nope" }, "argument": { "name": "a" } }),
        ];
        for params in junk {
            assert_eq!(registry.complete(&params), empty, "{params:?}");
        }
    }

    /// A catalog offering `count` completion values for anything.
    struct ManyValues(usize);

    impl Catalog for ManyValues {
        fn complete(&self, _reference: &Value, _argument: &Value) -> Option<Vec<String>> {
            Some((0..self.0).map(|i| i.to_string()).collect())
        }
    }

    #[test]
    fn complete_caps_values_at_n_and_n_plus_one() {
        // Goal: MCP's 100-value cap: 100 values pass whole, 101 are cut to 100 with the true
        // total and hasMore. Method: a registry over a synthetic catalog.
        for (count, listed, has_more) in [(100, 100, false), (101, 100, true)] {
            let registry = Registry {
                tools: Vec::new(),
                by_name: HashMap::new(),
                catalogs: vec![Box::new(ManyValues(count))],
                tools_list_json: String::new(),
            };
            let completion = registry.complete(&json!({}))["completion"].clone();
            assert_eq!(completion["values"].as_array().map(Vec::len), Some(listed));
            assert_eq!(completion["total"], json!(count as u64));
            assert_eq!(completion["hasMore"], json!(has_more));
        }
    }

    #[test]
    fn a_broken_builtin_schema_is_listed_as_a_plain_object_schema() {
        // Goal: a typo in a schema constant cannot break tools/list. Method: the fallback path.
        assert_eq!(listed_input_schema(r#"{"type":"object""#), INPUT_SCHEMA_FALLBACK);
        assert_eq!(listed_input_schema("[]"), INPUT_SCHEMA_FALLBACK);
        assert_eq!(listed_input_schema(r#"{"type":"object"}"#), r#"{"type":"object"}"#);
    }

    #[test]
    fn log_levels_round_trip() {
        // Goal: LogLevel::parse and as_str agree, in ascending order; unknown names are None.
        let levels =
            ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
        let parsed: Vec<LogLevel> = levels.iter().filter_map(|l| LogLevel::parse(l)).collect();
        assert_eq!(parsed.len(), levels.len());
        assert!(parsed.windows(2).all(|w| w[0] < w[1]));
        assert!(parsed.iter().zip(levels).all(|(level, name)| level.as_str() == name));
        assert_eq!(LogLevel::parse("INFO"), None);
        assert_eq!(LogLevel::parse("warn"), None);
    }
}
