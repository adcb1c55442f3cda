//! What the built-in tool sets are written with: `ToolSpec` (a tool's listing as constants),
//! the `BuiltinTool` and `Catalog` traits a set implements, `fn_tool`/`task_tool` (a tool from
//! one function of its borrowed arguments `Args`, which reads them before its future starts),
//! `owned_arguments` (for a tool written over a `serde_json` copy), and the small result and
//! argument helpers every set shares. Used by `demo`, `conformance*` and `BuiltinProvider`
//! (`builtin/mod.rs`). Never: keeps state.

use std::future::Future;
use std::rc::Rc;

use simd_json::prelude::*;

use crate::provider::{
    Annotations, CallContext, LocalBoxFuture, ProviderError, ProviderResult, TaskSupport,
    ToolArguments, Value,
};
use crate::wire::WireValue;

/// A built-in tool's arguments (or one value inside them), borrowed: on the request path a
/// view of the request's decoded body (no copy), else a provider-API value (a call through
/// `Provider::call_tool`: a task's, a test's). A tool reads what it needs before its future
/// starts, so the borrow ends when `call` returns.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Args<'a> {
    Wire(WireValue<'a>),
    Public(&'a Value),
}

impl<'a> From<&'a Value> for Args<'a> {
    fn from(value: &'a Value) -> Args<'a> {
        Args::Public(value)
    }
}

/// Absent arguments.
static NO_ARGUMENTS: Value = Value::Null;

impl<'a> Args<'a> {
    /// Absent arguments (`null`).
    pub(crate) fn none() -> Args<'static> {
        Args::Public(&NO_ARGUMENTS)
    }

    /// The arguments of a call through `Provider::call_tool_in_place`.
    pub(crate) fn of_request(arguments: ToolArguments<'a>) -> Args<'a> {
        arguments.0.map_or(Args::none(), Args::Wire)
    }

    /// Member `name` of an object (`None` for anything else, or when absent).
    pub(crate) fn get(self, name: &str) -> Option<Args<'a>> {
        match self {
            Args::Wire(v) => v.get(name).map(Args::Wire),
            Args::Public(v) => v.get(name).map(Args::Public),
        }
    }

    pub(crate) fn as_str(self) -> Option<&'a str> {
        match self {
            Args::Wire(v) => v.into_string(),
            Args::Public(v) => v.as_str(),
        }
    }

    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Args::Wire(v) => v.as_u64(),
            Args::Public(v) => v.as_u64(),
        }
    }

    pub(crate) fn as_f64(self) -> Option<f64> {
        match self {
            Args::Wire(v) => v.cast_f64(),
            Args::Public(v) => v.as_f64(),
        }
    }

    pub(crate) fn is_null(self) -> bool {
        match self {
            Args::Wire(v) => v.as_null().is_some(),
            Args::Public(v) => v.is_null(),
        }
    }

    pub(crate) fn is_object(self) -> bool {
        match self {
            Args::Wire(v) => v.is_object(),
            Args::Public(v) => v.is_object(),
        }
    }

    /// A `serde_json` copy (allocates: for tools off the request's hot path).
    pub(crate) fn to_value(self) -> Value {
        match self {
            Args::Wire(v) => crate::wire::jsonrpc::to_serde(v),
            Args::Public(v) => v.clone(),
        }
    }
}

/// What `tools/list` says about a built-in tool, as constants.
#[derive(Clone, Debug)]
pub(crate) struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// The JSON Schema of `arguments`, as JSON text (a unit test checks every one parses).
    pub input_schema: &'static str,
    pub annotations: Annotations,
}

/// The `readOnlyHint`/`idempotentHint` pair of a built-in tool: both listed when either is
/// set, neither when both are false (the lists the built-in sets have always sent).
pub(crate) const fn hints(read_only: bool, idempotent: bool) -> Annotations {
    let listed = read_only || idempotent;
    Annotations {
        title: None,
        read_only: if listed { Some(read_only) } else { None },
        destructive: None,
        idempotent: if listed { Some(idempotent) } else { None },
        open_world: None,
    }
}

/// A callable built-in tool.
pub(crate) trait BuiltinTool {
    fn spec(&self) -> &ToolSpec;
    /// Whether a call may become a task (2026-07-28 tasks extension).
    fn task_support(&self) -> TaskSupport {
        TaskSupport::Forbidden
    }
    fn call(
        &self,
        arguments: Args<'_>,
        cx: CallContext,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>>;
}

/// Resources, resource templates, prompts and completions of a built-in set (synchronous: they
/// are constants).
pub(crate) trait Catalog {
    fn resources(&self) -> Vec<Value> {
        Vec::new()
    }
    fn resource_templates(&self) -> Vec<Value> {
        Vec::new()
    }
    /// `None` when the uri is not ours.
    fn read_resource(&self, _uri: &str) -> Option<Value> {
        None
    }
    fn prompts(&self) -> Vec<Value> {
        Vec::new()
    }
    /// `Err(NotFound)` when the name is not ours.
    fn get_prompt(&self, name: &str, _arguments: &Value) -> ProviderResult<Value> {
        Err(ProviderError::NotFound(name.to_owned()))
    }
    /// A prompt that may ask the client for input (MCP 2026-07-28 MRTR): `None` when `name` is
    /// not such a prompt (then `get_prompt` answers).
    fn get_prompt_with_context(
        &self,
        _name: &str,
        _cx: &CallContext,
    ) -> Option<LocalBoxFuture<'static, ProviderResult<Value>>> {
        None
    }
    /// `None` when the reference is not ours.
    fn complete(&self, _reference: &Value, _argument: &Value) -> Option<Vec<String>> {
        None
    }
}

/// A tool whose behaviour is one async function of its arguments; every built-in tool is one.
struct FnTool<F> {
    spec: ToolSpec,
    task_support: TaskSupport,
    run: F,
}

impl<F, Fut> BuiltinTool for FnTool<F>
where
    F: Fn(Args<'_>, CallContext) -> Fut,
    Fut: Future<Output = ProviderResult<Value>> + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn task_support(&self) -> TaskSupport {
        self.task_support
    }

    fn call(
        &self,
        arguments: Args<'_>,
        cx: CallContext,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        Box::pin((self.run)(arguments, cx))
    }
}

/// A tool function written over a `serde_json` copy of its arguments, as `fn_tool` takes one
/// (the copy allocates: for tools off the hot path, whose code reads more than a field or two).
pub(crate) fn owned_arguments<F, Fut>(run: F) -> impl Fn(Args<'_>, CallContext) -> Fut + 'static
where
    F: Fn(Value, CallContext) -> Fut + 'static,
{
    move |arguments, cx| run(arguments.to_value(), cx)
}

/// Wraps a tool function and its spec as a set entry.
pub(crate) fn fn_tool<F, Fut>(spec: ToolSpec, run: F) -> Rc<dyn BuiltinTool>
where
    F: Fn(Args<'_>, CallContext) -> Fut + 'static,
    Fut: Future<Output = ProviderResult<Value>> + 'static,
{
    Rc::new(FnTool { spec, task_support: TaskSupport::Forbidden, run })
}

/// `fn_tool` for a tool whose calls may become tasks.
pub(crate) fn task_tool<F, Fut>(
    spec: ToolSpec,
    task_support: TaskSupport,
    run: F,
) -> Rc<dyn BuiltinTool>
where
    F: Fn(Args<'_>, CallContext) -> Fut + 'static,
    Fut: Future<Output = ProviderResult<Value>> + 'static,
{
    Rc::new(FnTool { spec, task_support, run })
}

/// The `elicitation/create` params of a one-field form (`field` of JSON Schema type `kind`,
/// required), as the conformance fixtures ask.
pub(crate) fn one_field_form(message: &str, field: &str, kind: &str) -> Value {
    serde_json::json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": { field: { "type": kind } },
            "required": [field],
        },
    })
}

/// A `CallToolResult` holding one text item.
pub(crate) fn text_result(text: impl Into<String>) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }] })
}

/// A tool-level failure: a `CallToolResult` with `isError: true`, so the model sees why (MCP
/// 2025-11-25 server/tools, "Error Handling"), rather than a JSON-RPC error.
pub(crate) fn error_result(text: impl Into<String>) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true })
}

/// Argument `name` of a call or prompt. `arguments` must be an object, or null when the client
/// sent none (then every argument is absent).
pub(crate) fn argument<'a>(
    arguments: impl Into<Args<'a>>,
    name: &str,
) -> ProviderResult<Option<Args<'a>>> {
    let arguments = arguments.into();
    if arguments.is_object() {
        Ok(arguments.get(name))
    } else if arguments.is_null() {
        Ok(None)
    } else {
        Err(ProviderError::InvalidParams("arguments must be an object".to_owned()))
    }
}

/// Checks that `arguments` is an object or absent, for tools that take no arguments.
pub(crate) fn expect_arguments_object<'a>(arguments: impl Into<Args<'a>>) -> ProviderResult<()> {
    argument(arguments, "").map(|_| ())
}

/// The required string argument `name`.
pub(crate) fn required_str<'a>(
    arguments: impl Into<Args<'a>>,
    name: &str,
) -> ProviderResult<&'a str> {
    match argument(arguments, name)?.map(Args::as_str) {
        Some(Some(text)) => Ok(text),
        Some(None) => {
            Err(ProviderError::InvalidParams(format!("argument `{name}` must be a string")))
        }
        None => Err(ProviderError::InvalidParams(format!("missing required argument `{name}`"))),
    }
}
