//! The 2026-07-28 fixtures of the `conformance` set: the diagnostic tools of the suite's
//! `server-stateless` scenario and the MRTR (`input-required-result-*`) tools and prompt, with
//! the input keys, methods and params the scenarios name. Every one also works on a legacy
//! session, where its input requests go to the client as server→client requests.
//!
//! Owns: those tools and `test_input_required_result_prompt`. Called by `conformance`.
//! Never: keeps state between calls or rounds (the server carries the answers of earlier
//! rounds in the sealed `requestState`).

use std::rc::Rc;

use serde_json::json;

use super::kit::owned_arguments;
use super::kit::{expect_arguments_object, fn_tool, hints, one_field_form, text_result};
use super::kit::{BuiltinTool, ToolSpec};
use crate::provider::{Annotations, CallContext, LogLevel, ProviderResult, Value};

const NO_ARGUMENTS: &str = r#"{"type":"object","properties":{}}"#;

/// They ask the client, or announce changes: not safe to repeat.
const INTERACTIVE: Annotations = hints(false, false);

const fn spec(name: &'static str, description: &'static str) -> ToolSpec {
    ToolSpec { name, description, input_schema: NO_ARGUMENTS, annotations: INTERACTIVE }
}

/// The 2026-07-28 fixtures, after the legacy ones in `tools/list`.
pub(crate) fn tools() -> Vec<Rc<dyn BuiltinTool>> {
    vec![
        fn_tool(
            spec(
                "test_missing_capability",
                "Needs the client's sampling capability (-32021 without it)",
            ),
            owned_arguments(missing_capability),
        ),
        fn_tool(
            spec("test_logging_tool", "Logs three info messages (none without a log level)"),
            owned_arguments(logging_tool),
        ),
        fn_tool(
            spec(
                "test_streaming_elicitation",
                "Asks for input: an InputRequiredResult, never a request on the stream",
            ),
            owned_arguments(streaming_elicitation),
        ),
        fn_tool(
            spec("test_trigger_tool_change", "Announces a tool list change to listen streams"),
            owned_arguments(trigger_tool_change),
        ),
        fn_tool(
            spec("test_trigger_prompt_change", "Announces a prompt list change to listen streams"),
            owned_arguments(trigger_prompt_change),
        ),
        fn_tool(
            spec("test_input_required_result_elicitation", "MRTR: asks for a name (user_name)"),
            owned_arguments(mrtr_elicitation),
        ),
        fn_tool(
            spec(
                "test_input_required_result_sampling",
                "MRTR: asks the client's LLM (capital_question)",
            ),
            owned_arguments(mrtr_sampling),
        ),
        fn_tool(
            spec(
                "test_input_required_result_list_roots",
                "MRTR: asks for the client's roots (client_roots)",
            ),
            owned_arguments(mrtr_list_roots),
        ),
        fn_tool(
            spec(
                "test_input_required_result_request_state",
                "MRTR: asks for a confirmation; answers state-ok",
            ),
            owned_arguments(mrtr_request_state),
        ),
        fn_tool(
            spec(
                "test_input_required_result_multiple_inputs",
                "MRTR: elicitation, sampling and roots in one round",
            ),
            owned_arguments(mrtr_multiple_inputs),
        ),
        fn_tool(
            spec("test_input_required_result_multi_round", "MRTR: two rounds (step1, step2)"),
            owned_arguments(mrtr_multi_round),
        ),
        fn_tool(
            spec(
                "test_input_required_result_capabilities",
                "MRTR: asks only for what the client declared",
            ),
            owned_arguments(mrtr_capabilities),
        ),
        fn_tool(
            spec(
                "test_input_required_result_tampered_state",
                "MRTR: a sealed requestState; tampering is refused",
            ),
            owned_arguments(mrtr_request_state),
        ),
    ]
}

/// `field` of an accepted elicitation's content, as text.
fn accepted(result: &Value, field: &str) -> String {
    match result.get("content").and_then(|c| c.get(field)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => format!("(no {field}; action {})", result.get("action").unwrap_or(&Value::Null)),
    }
}

fn sampling_params(text: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
        "maxTokens": max_tokens,
    })
}

/// The text of a sampling result (one content block or an array of them).
fn sampled(result: &Value) -> String {
    let content = result.get("content");
    let single = content.and_then(|c| c.get("text")).and_then(Value::as_str);
    let first = || content?.as_array()?.iter().find_map(|i| i.get("text")?.as_str());
    single.or_else(first).unwrap_or("(no text)").to_owned()
}

async fn missing_capability(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let answer =
        cx.input("sample", "sampling/createMessage", sampling_params("Say hi", 20)).await?;
    Ok(text_result(format!("Sampled: {}", sampled(&answer))))
}

async fn logging_tool(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    for message in ["Logging tool started", "Logging tool working", "Logging tool done"] {
        cx.log(LogLevel::Info, None, Value::from(message));
    }
    Ok(text_result("Logged three messages (sent only to clients that set a log level)"))
}

async fn streaming_elicitation(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let answer = cx
        .input("confirm", "elicitation/create", one_field_form("Continue?", "ok", "boolean"))
        .await?;
    Ok(text_result(format!("Confirmed: {}", accepted(&answer, "ok"))))
}

async fn trigger_tool_change(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    crate::provider::Changes::default().tools_changed();
    Ok(text_result("Tool list change announced"))
}

async fn trigger_prompt_change(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    crate::provider::Changes::default().prompts_changed();
    Ok(text_result("Prompt list change announced"))
}

async fn mrtr_elicitation(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let answer = cx
        .input(
            "user_name",
            "elicitation/create",
            one_field_form("What is your name?", "name", "string"),
        )
        .await?;
    Ok(text_result(format!("Hello, {}!", accepted(&answer, "name"))))
}

async fn mrtr_sampling(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let params = sampling_params("What is the capital of France?", 100);
    let answer = cx.input("capital_question", "sampling/createMessage", params).await?;
    Ok(text_result(format!("The client's LLM says: {}", sampled(&answer))))
}

async fn mrtr_list_roots(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let answer = cx.input("client_roots", "roots/list", json!({})).await?;
    let roots = answer.get("roots").and_then(Value::as_array).cloned().unwrap_or_default();
    let uris: Vec<&str> = roots.iter().filter_map(|r| r.get("uri")?.as_str()).collect();
    Ok(text_result(format!("Client roots: {}", uris.join(", "))))
}

/// Also `test_input_required_result_tampered_state`: the server refuses a state that fails
/// verification before the tool runs, so reaching the end means the state was verified.
async fn mrtr_request_state(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let answer = cx
        .input("confirm", "elicitation/create", one_field_form("Please confirm", "ok", "boolean"))
        .await?;
    Ok(text_result(format!("state-ok: confirmed={}", accepted(&answer, "ok"))))
}

async fn mrtr_multiple_inputs(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    // All three are asked before the first is awaited, so they share one round.
    let name = cx.input(
        "user_name",
        "elicitation/create",
        one_field_form("What is your name?", "name", "string"),
    );
    let greeting =
        cx.input("greeting", "sampling/createMessage", sampling_params("Generate a greeting", 50));
    let roots = cx.input("client_roots", "roots/list", json!({}));
    let (name, greeting, roots) = (name.await?, greeting.await?, roots.await?);
    let count = roots.get("roots").and_then(Value::as_array).map_or(0, Vec::len);
    Ok(text_result(format!("{} — {} ({count} roots)", sampled(&greeting), accepted(&name, "name"))))
}

async fn mrtr_multi_round(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let name = cx
        .input(
            "step1",
            "elicitation/create",
            one_field_form("Step 1: What is your name?", "name", "string"),
        )
        .await?;
    let color = cx
        .input(
            "step2",
            "elicitation/create",
            one_field_form("Step 2: What is your favorite color?", "color", "string"),
        )
        .await?;
    Ok(text_result(format!("{} likes {}", accepted(&name, "name"), accepted(&color, "color"))))
}

async fn mrtr_capabilities(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let mut asked = Vec::new();
    if cx.client_supports("sampling/createMessage") {
        asked.push(cx.input(
            "capital_question",
            "sampling/createMessage",
            sampling_params("Capital of France?", 50),
        ));
    }
    if cx.client_supports("elicitation/create") {
        asked.push(cx.input(
            "user_name",
            "elicitation/create",
            one_field_form("What is your name?", "name", "string"),
        ));
    }
    let count = asked.len();
    for answer in asked {
        answer.await?;
    }
    Ok(text_result(format!("Asked for {count} input(s), each one the client can answer")))
}

/// `test_input_required_result_prompt`: asks what context to use, then returns a prompt with it.
pub(crate) async fn mrtr_prompt(cx: CallContext) -> ProviderResult<Value> {
    let params = one_field_form("What context should the prompt use?", "context", "string");
    let answer = cx.input("user_context", "elicitation/create", params).await?;
    let text = format!("Use this context: {}", accepted(&answer, "context"));
    Ok(json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }] }))
}

/// The prompt's `prompts/list` entry.
pub(crate) fn mrtr_prompt_listing() -> Value {
    json!({
        "name": "test_input_required_result_prompt",
        "title": "Prompt needing input",
        "description": "MRTR on prompts/get: asks the client for context first",
    })
}

pub(crate) const MRTR_PROMPT: &str = "test_input_required_result_prompt";
