//! What the built-in tool sets are written with: `ToolSpec` (a tool's listing as constants),
//! the `BuiltinTool` and `Catalog` traits a set implements, `fn_tool`/`task_tool` (a tool from
//! one function of its borrowed arguments `Args`, which reads them before its future starts),
//! `owned_arguments` (for a tool written over a `serde_json` copy), and the small result and
//! argument helpers every set shares. Used by `demo`, `conformance*` and `BuiltinProvider`
//! (`builtin/mod.rs`). Never: keeps state, but for the work slots a tool that runs on reuses
//! (`WORK_SLOTS_KEPT`, empty between calls).

use std::borrow::Cow;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

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

    /// The arguments of a call through `BuiltinProvider::call_in_place`.
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

    pub(crate) fn as_bool(self) -> Option<bool> {
        match self {
            Args::Wire(v) => v.as_bool(),
            Args::Public(v) => v.as_bool(),
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
    /// Calls the tool. An instant tool answers here, borrowing its answer from `arguments`;
    /// any other reads what it needs from `arguments` before its future starts.
    fn call<'a>(&self, arguments: Args<'a>, cx: ContextSource<'_>) -> BuiltinCall<'a>;
    /// An instant tool's answer (borrowed from `arguments`); `None` for a tool that runs on.
    fn call_now<'a>(&self, arguments: Args<'a>) -> Option<ProviderResult<ToolAnswer<'a>>> {
        let _ = arguments;
        None
    }
}

/// A built-in tool's `CallToolResult`, in the form the tool had it: a value (any shape), or
/// one text item the request paths write straight into the answer's bytes (`push_json`), with
/// no JSON tree, and borrowed from the arguments when the tool echoes them.
#[derive(Debug, PartialEq)]
pub(crate) enum ToolAnswer<'a> {
    /// A result object as the provider API has it.
    Value(Value),
    /// A result as JSON text another server sent (the bridge's upstream), checked to be one
    /// JSON value when it was read: passed on as those bytes, no value built.
    Json(JsonText),
    /// `{"content":[{"type":"text","text":<text>}]}`.
    Text(Cow<'a, str>),
    /// A text item holding a count in decimal (`slow_counter`, `get_counter`).
    Count(u64),
}

impl ToolAnswer<'_> {
    /// The result object as JSON, appended to `out`: the bytes `serde_json` gives for
    /// `into_value` (a unit test checks both forms agree). `Err` only for a `Value` that does
    /// not serialize (then `out` may hold part of it).
    pub(crate) fn push_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            ToolAnswer::Value(value) => serde_json::to_writer(&mut *out, value),
            ToolAnswer::Json(json) => {
                out.extend_from_slice(json.0.as_bytes());
                Ok(())
            }
            text => {
                text.push_text_json(out, "");
                Ok(())
            }
        }
    }

    /// A `Text` or `Count` answer's JSON with `members` (JSON object members whose keys sort
    /// after `content`, so the order stays `serde_json`'s: 2026-07-28's `resultType`) added;
    /// `false` for a `Value`, which the caller writes as a value.
    pub(crate) fn push_text_json(&self, out: &mut Vec<u8>, members: &str) -> bool {
        match self {
            ToolAnswer::Value(_) | ToolAnswer::Json(_) => return false,
            ToolAnswer::Text(text) => {
                push_text_result(out, |out| {
                    if crate::wire::jsonrpc::push_plain_json_str(out, text) {
                        return Ok(());
                    }
                    serde_json::to_writer(out, text.as_ref())
                });
            }
            ToolAnswer::Count(n) => push_text_result(out, |out| {
                out.push(b'"');
                crate::digits::push_decimal(out, *n);
                out.push(b'"');
                Ok(())
            }),
        }
        if !members.is_empty() {
            out.pop();
            out.push(b',');
            out.extend_from_slice(members.as_bytes());
            out.push(b'}');
        }
        true
    }

    /// The result object as the provider API's value (`Provider::call_tool`).
    pub(crate) fn into_value(self) -> Value {
        match self {
            ToolAnswer::Value(value) => value,
            // Checked JSON when read; a text deeper than `serde_json`'s nesting limit is the
            // one that could fail here, and then the answer is `null`.
            ToolAnswer::Json(json) => serde_json::from_str(&json.0).unwrap_or_default(),
            ToolAnswer::Text(text) => text_result(text.into_owned()),
            ToolAnswer::Count(n) => text_result(n.to_string()),
        }
    }
}

/// One JSON value's text as another server wrote it (`ToolAnswer::Json`); equal when the
/// texts are.
#[derive(Debug)]
pub(crate) struct JsonText(pub(crate) Box<str>);

impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.0 == other.0
    }
}

impl From<Value> for ToolAnswer<'static> {
    fn from(value: Value) -> Self {
        ToolAnswer::Value(value)
    }
}

/// Writes `{"content":[{"text":<text>,"type":"text"}]}`, `text` (a JSON string) by `string`.
/// The members in `serde_json`'s order for a map (sorted by key: the crate is built without
/// `preserve_order`), so the bytes are the ones `text_result`'s value serializes to.
fn push_text_result(
    out: &mut Vec<u8>,
    string: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) {
    out.extend_from_slice(b"{\"content\":[{\"text\":");
    // Writing into a `Vec` cannot fail, and a `str` always serializes.
    let _ = string(out);
    out.extend_from_slice(b",\"type\":\"text\"}]}");
}

/// What a built-in tool's call did at once.
pub(crate) enum BuiltinCall<'a> {
    /// An instant tool answered (or refused its arguments) without a future.
    Now(ProviderResult<ToolAnswer<'a>>),
    /// The call runs on: the future its caller drives.
    Running(RunningWork),
}

/// A call's work its caller drives: a boxed future (a user provider's), or a built-in tool's
/// future in a slot the tool reuses call after call (`FnTool`), so a steady stream of calls of
/// a tool that runs on allocates no future (issue 40 §1). Dropping it drops the tool's future,
/// as dropping a box would (a cancelled call's tool stops).
pub(crate) enum RunningWork {
    Boxed(LocalBoxFuture<'static, ProviderResult<ToolAnswer<'static>>>),
    Kept(Rc<dyn WorkSlot>),
}

impl Future for RunningWork {
    type Output = ProviderResult<ToolAnswer<'static>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut *self {
            RunningWork::Boxed(work) => work.as_mut().poll(cx),
            RunningWork::Kept(slot) => slot.poll_work(cx),
        }
    }
}

impl Drop for RunningWork {
    fn drop(&mut self) {
        if let RunningWork::Kept(slot) = self {
            slot.clear();
        }
    }
}

/// A reusable slot holding one call's future at a time (`KeptWork`), type-erased.
pub(crate) trait WorkSlot {
    /// Polls the future in the slot; emptied once it is ready.
    fn poll_work(&self, cx: &mut Context<'_>) -> Poll<ProviderResult<ToolAnswer<'static>>>;
    /// Drops the future in the slot, if any.
    fn clear(&self);
}

/// Work slots a tool that runs on keeps for its next calls: as many calls as this run at once
/// without a future allocated each; one past it gets a slot of its own, let go when it ends.
/// A kept slot holds one future's bytes (the tool's state machine) while empty.
pub(crate) const WORK_SLOTS_KEPT: usize = 8;

/// One future of type `Fut` at a time, pinned in its box for the slot's life: a call's
/// future is set into it in place (`Pin::set`), so reusing it allocates nothing.
struct KeptWork<Fut> {
    future: RefCell<Pin<Box<Option<Fut>>>>,
}

impl<Fut, R> WorkSlot for KeptWork<Fut>
where
    Fut: Future<Output = ProviderResult<R>>,
    R: Into<ToolAnswer<'static>>,
{
    fn poll_work(&self, cx: &mut Context<'_>) -> Poll<ProviderResult<ToolAnswer<'static>>> {
        let mut future = self.future.borrow_mut();
        // Polled after it finished: cannot happen (its driver stops at Ready); say so safely.
        let Some(running) = future.as_mut().as_pin_mut() else {
            return Poll::Ready(Err(ProviderError::Cancelled));
        };
        let outcome = std::task::ready!(running.poll(cx));
        future.set(None);
        Poll::Ready(outcome.map(Into::into))
    }

    fn clear(&self) {
        self.future.borrow_mut().set(None);
    }
}

/// A built-in tool's call context: one already made (`Provider::call_tool`), or how to make one,
/// asked only by a tool that runs on, so an instant tool's call builds none.
pub(crate) enum ContextSource<'a> {
    Made(CallContext),
    Lazy(&'a dyn Fn() -> CallContext),
}

impl ContextSource<'_> {
    fn into_context(self) -> CallContext {
        match self {
            ContextSource::Made(cx) => cx,
            ContextSource::Lazy(make) => make(),
        }
    }
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
struct FnTool<F, Fut> {
    spec: ToolSpec,
    task_support: TaskSupport,
    run: F,
    /// Slots for its calls' futures, in use (shared with a `RunningWork`) or free (held only
    /// here, empty); at most `WORK_SLOTS_KEPT`.
    kept: RefCell<Vec<Rc<KeptWork<Fut>>>>,
}

impl<F, Fut> FnTool<F, Fut> {
    fn new(spec: ToolSpec, task_support: TaskSupport, run: F) -> FnTool<F, Fut> {
        FnTool { spec, task_support, run, kept: RefCell::new(Vec::new()) }
    }
}

impl<F, Fut, R> FnTool<F, Fut>
where
    Fut: Future<Output = ProviderResult<R>> + 'static,
    R: Into<ToolAnswer<'static>>,
{
    /// `future` in a free kept slot, else in a new one (kept while fewer than
    /// `WORK_SLOTS_KEPT` are).
    fn kept_work(&self, future: Fut) -> RunningWork {
        let mut kept = self.kept.borrow_mut();
        // A free slot is held by nothing but this list (a `RunningWork` empties it on drop).
        // The slice's `iter`: simd-json's prelude gives `Vec` an `Array::iter` that boxes.
        if let Some(free) = kept.as_slice().iter().find(|slot| Rc::strong_count(slot) == 1) {
            free.future.borrow_mut().set(Some(future));
            return RunningWork::Kept(free.clone());
        }
        let slot = Rc::new(KeptWork { future: RefCell::new(Box::pin(Some(future))) });
        if kept.len() < WORK_SLOTS_KEPT {
            kept.push(slot.clone());
        }
        RunningWork::Kept(slot)
    }
}

impl<F, Fut, R> BuiltinTool for FnTool<F, Fut>
where
    F: Fn(Args<'_>, CallContext) -> Fut,
    Fut: Future<Output = ProviderResult<R>> + 'static,
    R: Into<ToolAnswer<'static>>,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn task_support(&self) -> TaskSupport {
        self.task_support
    }

    fn call<'a>(&self, arguments: Args<'a>, cx: ContextSource<'_>) -> BuiltinCall<'a> {
        let work = (self.run)(arguments, cx.into_context());
        BuiltinCall::Running(self.kept_work(work))
    }
}

/// A tool that answers at once from its arguments, without a context or a future: its call
/// allocates nothing of its own (issue 40 §1).
struct InstantTool<F> {
    spec: ToolSpec,
    run: F,
}

impl<F> BuiltinTool for InstantTool<F>
where
    F: for<'a> Fn(Args<'a>) -> ProviderResult<ToolAnswer<'a>>,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&self, arguments: Args<'a>, _cx: ContextSource<'_>) -> BuiltinCall<'a> {
        BuiltinCall::Now((self.run)(arguments))
    }

    fn call_now<'a>(&self, arguments: Args<'a>) -> Option<ProviderResult<ToolAnswer<'a>>> {
        Some((self.run)(arguments))
    }
}

/// Wraps an instant tool function (no await, no context) and its spec as a set entry.
pub(crate) fn instant_tool<F>(spec: ToolSpec, run: F) -> Rc<dyn BuiltinTool>
where
    F: for<'a> Fn(Args<'a>) -> ProviderResult<ToolAnswer<'a>> + 'static,
{
    Rc::new(InstantTool { spec, run })
}

/// Calls `tool` as the provider API does: its answer as a value, from a future (the request
/// paths call `BuiltinTool::call` and write the answer themselves).
pub(crate) fn call_value(
    tool: &dyn BuiltinTool,
    arguments: Args<'_>,
    cx: CallContext,
) -> LocalBoxFuture<'static, ProviderResult<Value>> {
    match tool.call(arguments, ContextSource::Made(cx)) {
        BuiltinCall::Now(answer) => {
            Box::pin(std::future::ready(answer.map(ToolAnswer::into_value)))
        }
        BuiltinCall::Running(work) => {
            Box::pin(async move { work.await.map(ToolAnswer::into_value) })
        }
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
pub(crate) fn fn_tool<F, Fut, R>(spec: ToolSpec, run: F) -> Rc<dyn BuiltinTool>
where
    F: Fn(Args<'_>, CallContext) -> Fut + 'static,
    Fut: Future<Output = ProviderResult<R>> + 'static,
    R: Into<ToolAnswer<'static>> + 'static,
{
    Rc::new(FnTool::<F, Fut>::new(spec, TaskSupport::Forbidden, run))
}

/// `fn_tool` for a tool whose calls may become tasks.
pub(crate) fn task_tool<F, Fut, R>(
    spec: ToolSpec,
    task_support: TaskSupport,
    run: F,
) -> Rc<dyn BuiltinTool>
where
    F: Fn(Args<'_>, CallContext) -> Fut + 'static,
    Fut: Future<Output = ProviderResult<R>> + 'static,
    R: Into<ToolAnswer<'static>> + 'static,
{
    Rc::new(FnTool::<F, Fut>::new(spec, task_support, run))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_written_without_a_value_has_the_bytes_of_its_value() {
        // Goal: the request paths' writer (`push_json`) sends exactly what the value form
        // serializes to, escaping included (issue 40 §1 keeps the answer bytes). Method: texts
        // with quotes, backslashes, control characters and non-ASCII; counts at the edges.
        let texts = ["", "x", "héllo \"x\"", "a\\b\n\t\r\u{1}\u{1f}", "😀 </script>", "\u{2028}"];
        // Plain texts at and over the length written without the encoder, and 0x7f.
        let (at, over) = ("p".repeat(128), "q".repeat(129));
        let plain = ["0123456789abcdef", "\u{7f} ~", at.as_str(), over.as_str()];
        let answers = texts
            .iter()
            .chain(plain.iter())
            .map(|t| ToolAnswer::Text(Cow::Borrowed(t)))
            .chain([0, 7, u64::MAX].map(ToolAnswer::Count));
        for answer in answers {
            let mut written = Vec::new();
            answer.push_json(&mut written).expect("writes");
            let value = serde_json::to_vec(&answer.into_value()).expect("serializes");
            assert_eq!(String::from_utf8(written), String::from_utf8(value));
        }
        let value = serde_json::json!({ "content": [], "isError": true });
        let mut written = Vec::new();
        ToolAnswer::Value(value.clone()).push_json(&mut written).expect("writes");
        assert_eq!(written, serde_json::to_vec(&value).expect("serializes"));
    }

    /// A future that answers `Pending` until `ready` is set, and counts its drops.
    struct Gate {
        ready: Rc<std::cell::Cell<bool>>,
        dropped: Rc<std::cell::Cell<usize>>,
    }

    impl Future for Gate {
        type Output = ProviderResult<Value>;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<ProviderResult<Value>> {
            if self.ready.get() {
                Poll::Ready(Ok(Value::from(7)))
            } else {
                Poll::Pending
            }
        }
    }

    impl Drop for Gate {
        fn drop(&mut self) {
            self.dropped.set(self.dropped.get() + 1);
        }
    }

    const SPEC: ToolSpec = ToolSpec {
        name: "gate",
        description: "",
        input_schema: "{}",
        annotations: hints(false, false),
    };

    #[test]
    fn work_slots_are_reused_up_to_their_limit_and_drop_their_future_with_the_work() {
        // Goal: a tool that runs on keeps at most `WORK_SLOTS_KEPT` slots, reuses a free one
        // (no future allocated per call), gives a call past the limit a slot of its own, and
        // drops a call's future when its work is dropped unfinished (a cancelled call's tool
        // stops) or once it is ready. Method: `WORK_SLOTS_KEPT + 1` calls at once, then more.
        let ready = Rc::new(std::cell::Cell::new(false));
        let dropped = Rc::new(std::cell::Cell::new(0));
        let (r, d) = (ready.clone(), dropped.clone());
        let tool: FnTool<_, Gate> =
            FnTool::new(SPEC, TaskSupport::Forbidden, move |_: Args<'_>, _: CallContext| Gate {
                ready: r.clone(),
                dropped: d.clone(),
            });
        let gate = || Gate { ready: ready.clone(), dropped: dropped.clone() };
        let running: Vec<RunningWork> =
            (0..=WORK_SLOTS_KEPT).map(|_| tool.kept_work(gate())).collect();
        assert_eq!(tool.kept.borrow().len(), WORK_SLOTS_KEPT, "kept up to the limit");
        drop(running);
        assert_eq!(
            dropped.get(),
            WORK_SLOTS_KEPT + 1,
            "unfinished futures dropped with their work"
        );
        let first = Rc::as_ptr(&tool.kept.borrow()[0]);
        let mut work = tool.kept_work(gate());
        let RunningWork::Kept(slot) = &work else { panic!("a kept slot") };
        assert!(std::ptr::addr_eq(Rc::as_ptr(slot), first), "a free slot is reused");
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut work).poll(&mut cx).is_pending());
        ready.set(true);
        assert!(matches!(Pin::new(&mut work).poll(&mut cx), Poll::Ready(Ok(ToolAnswer::Value(_)))));
        assert_eq!(dropped.get(), WORK_SLOTS_KEPT + 2, "a finished future is dropped at once");
        drop(work);
        assert_eq!(dropped.get(), WORK_SLOTS_KEPT + 2);
    }
}
