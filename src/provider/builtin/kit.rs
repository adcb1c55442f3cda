//! What the built-in tool sets are written with: `ToolSpec` (a tool's listing as constants),
//! the `BuiltinTool` and `Catalog` traits a set implements, `fn_tool`/`task_tool` (a tool from
//! one async function), and the small result and argument helpers every set shares. Used by
//! `demo`, `conformance*` and `BuiltinProvider` (`builtin/mod.rs`). Never: keeps state.

use std::future::Future;
use std::rc::Rc;

use crate::provider::{
    Annotations, CallContext, LocalBoxFuture, ProviderError, ProviderResult, TaskSupport, Value,
};

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
        arguments: Value,
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
    F: Fn(Value, CallContext) -> Fut,
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
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        Box::pin((self.run)(arguments, cx))
    }
}

/// Wraps a tool function and its spec as a set entry.
pub(crate) fn fn_tool<F, Fut>(spec: ToolSpec, run: F) -> Rc<dyn BuiltinTool>
where
    F: Fn(Value, CallContext) -> Fut + 'static,
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
    F: Fn(Value, CallContext) -> Fut + 'static,
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
pub(crate) fn argument<'a>(arguments: &'a Value, name: &str) -> ProviderResult<Option<&'a Value>> {
    match arguments {
        Value::Object(object) => Ok(object.get(name)),
        Value::Null => Ok(None),
        _ => Err(ProviderError::InvalidParams("arguments must be an object".to_owned())),
    }
}

/// Checks that `arguments` is an object or absent, for tools that take no arguments.
pub(crate) fn expect_arguments_object(arguments: &Value) -> ProviderResult<()> {
    argument(arguments, "").map(|_| ())
}

/// The required string argument `name`.
pub(crate) fn required_str<'a>(arguments: &'a Value, name: &str) -> ProviderResult<&'a str> {
    match argument(arguments, name)? {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(ProviderError::InvalidParams(format!("argument `{name}` must be a string"))),
        None => Err(ProviderError::InvalidParams(format!("missing required argument `{name}`"))),
    }
}
