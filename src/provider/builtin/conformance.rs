//! The `conformance` tool set (`--tools conformance`): the fixtures that the official MCP
//! conformance suite (`@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha, server
//! scenarios) calls by name, with the names, arguments and result shapes of its reference
//! "everything server" (`examples/servers/typescript/everything-server.ts`).
//!
//! Owns: the `test_*` tools, the `test://` resources and template, the `test_*` prompts and the
//! completion of `test_prompt_with_arguments`. Called by: `BuiltinProvider::new` (`tools`,
//! `catalog`).
//! Never: keeps state between calls; `resources/subscribe` bookkeeping belongs to the
//! transport, and `test://watched-resource` never changes, so no update is ever due.

use std::rc::Rc;
use std::time::Duration;

use super::kit::owned_arguments;
use super::kit::{
    error_result, expect_arguments_object, fn_tool, hints, required_str, text_result,
};
use super::kit::{BuiltinTool, Catalog, ToolSpec};
use crate::provider::{Annotations, CallContext, LogLevel, ProviderError, ProviderResult, Value};
use serde_json::json;

/// A 1×1 PNG, base64: the image the reference server returns (tools, resource and prompt).
const TEST_IMAGE_PNG_BASE64: &str = concat!(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E",
    "rkJggg=="
);

/// A minimal WAV file, base64 (`tools-call-audio` requires mimeType `audio/wav`).
const TEST_AUDIO_WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// Pause between the notifications of `test_tool_with_logging` and `test_tool_with_progress`,
/// as in the reference server, so a client sees them arrive one by one on the stream.
const STEP_PAUSE: Duration = Duration::from_millis(50);

/// How long `test_reconnection` keeps running after closing its connection (reference: 100 ms),
/// so its result is produced while the stream is parked and must be replayed on the GET resume.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Input schema of the tools that take no arguments.
const NO_ARGUMENTS: &str = r#"{"type":"object","properties":{}}"#;

/// Pure tools: nothing they do changes anything, so a retried call may simply run again.
const READ_ONLY: Annotations = hints(true, false);

/// Tools that talk to the client (logs, progress, sampling, elicitation, disconnect) while
/// running: repeating one repeats that conversation, so they are not marked safe to repeat.
const INTERACTIVE: Annotations = hints(false, false);

const fn spec(
    name: &'static str,
    description: &'static str,
    input_schema: &'static str,
    annotations: Annotations,
) -> ToolSpec {
    ToolSpec { name, description, input_schema, annotations }
}

const SIMPLE_TEXT: ToolSpec =
    spec("test_simple_text", "Tests simple text content response", NO_ARGUMENTS, READ_ONLY);
const IMAGE_CONTENT: ToolSpec =
    spec("test_image_content", "Tests image content response", NO_ARGUMENTS, READ_ONLY);
const AUDIO_CONTENT: ToolSpec =
    spec("test_audio_content", "Tests audio content response", NO_ARGUMENTS, READ_ONLY);
const EMBEDDED_RESOURCE: ToolSpec = spec(
    "test_embedded_resource",
    "Tests embedded resource content response",
    NO_ARGUMENTS,
    READ_ONLY,
);
const MULTIPLE_CONTENT_TYPES: ToolSpec = spec(
    "test_multiple_content_types",
    "Tests response with multiple content types (text, image, resource)",
    NO_ARGUMENTS,
    READ_ONLY,
);
const TOOL_WITH_LOGGING: ToolSpec = spec(
    "test_tool_with_logging",
    "Tests tool that emits log messages during execution",
    NO_ARGUMENTS,
    INTERACTIVE,
);
const TOOL_WITH_PROGRESS: ToolSpec = spec(
    "test_tool_with_progress",
    "Tests tool that reports progress notifications",
    NO_ARGUMENTS,
    INTERACTIVE,
);
const ERROR_HANDLING: ToolSpec =
    spec("test_error_handling", "Tests error response handling", NO_ARGUMENTS, READ_ONLY);
const RECONNECTION: ToolSpec = spec(
    "test_reconnection",
    "Tests SSE stream disconnection and client reconnection (SEP-1699). Server will close the \
     stream mid-call and send the result after client reconnects.",
    NO_ARGUMENTS,
    INTERACTIVE,
);
const SAMPLING: ToolSpec = spec(
    "test_sampling",
    "Tests server-initiated sampling (LLM completion request)",
    concat!(
        r#"{"type":"object","properties":{"#,
        r#""prompt":{"type":"string","description":"The prompt to send to the LLM"}},"#,
        r#""required":["prompt"]}"#
    ),
    INTERACTIVE,
);
const ELICITATION: ToolSpec = spec(
    "test_elicitation",
    "Tests server-initiated elicitation (user input request)",
    concat!(
        r#"{"type":"object","properties":{"#,
        r#""message":{"type":"string","description":"The message to show the user"}},"#,
        r#""required":["message"]}"#
    ),
    INTERACTIVE,
);
const ELICITATION_SEP1034_DEFAULTS: ToolSpec = spec(
    "test_elicitation_sep1034_defaults",
    "Tests elicitation with default values per SEP-1034",
    NO_ARGUMENTS,
    INTERACTIVE,
);
const ELICITATION_SEP1330_ENUMS: ToolSpec = spec(
    "test_elicitation_sep1330_enums",
    "Tests elicitation with enum schema improvements per SEP-1330",
    NO_ARGUMENTS,
    INTERACTIVE,
);
/// SEP-1613 and SEP-2106: listed verbatim, so `$schema`, `$defs` (with an `$anchor`),
/// `additionalProperties`, the composition (`allOf`/`anyOf`) and conditional
/// (`if`/`then`/`else`) keywords must survive.
const JSON_SCHEMA_2020_12: ToolSpec = spec(
    "json_schema_2020_12_tool",
    "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
    concat!(
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","#,
        r#""$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"#,
        r#""street":{"type":"string"},"city":{"type":"string"}}}},"#,
        r##""properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"##,
        r#""contactMethod":{"type":"string","enum":["phone","email"]},"#,
        r#""phone":{"type":"string"},"email":{"type":"string"}},"#,
        r#""allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],"#,
        r#""if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},"#,
        r#""then":{"required":["phone"]},"else":{"required":["email"]},"#,
        r#""additionalProperties":false}"#
    ),
    READ_ONLY,
);
/// SEP-2243 (2026-07-28): a parameter mirrored into the `Mcp-Param-Value` header, which the
/// server checks against the body before the call runs.
const HEADER_PARAM: ToolSpec = spec(
    "test_header_param",
    "Returns its `value`, which clients also send as the Mcp-Param-Value header (SEP-2243)",
    r#"{"type":"object","properties":{"value":{"type":"string","x-mcp-header":"Value"}},"required":["value"]}"#,
    READ_ONLY,
);

/// The conformance set's tools, in the reference server's order.
pub(crate) fn tools() -> Vec<Rc<dyn BuiltinTool>> {
    vec![
        fn_tool(SIMPLE_TEXT, owned_arguments(simple_text)),
        fn_tool(IMAGE_CONTENT, owned_arguments(image_content)),
        fn_tool(AUDIO_CONTENT, owned_arguments(audio_content)),
        fn_tool(EMBEDDED_RESOURCE, owned_arguments(embedded_resource)),
        fn_tool(MULTIPLE_CONTENT_TYPES, owned_arguments(multiple_content_types)),
        fn_tool(TOOL_WITH_LOGGING, owned_arguments(tool_with_logging)),
        fn_tool(TOOL_WITH_PROGRESS, owned_arguments(tool_with_progress)),
        fn_tool(ERROR_HANDLING, owned_arguments(error_handling)),
        fn_tool(RECONNECTION, owned_arguments(reconnection)),
        fn_tool(SAMPLING, owned_arguments(sampling)),
        fn_tool(ELICITATION, owned_arguments(elicitation)),
        fn_tool(ELICITATION_SEP1034_DEFAULTS, owned_arguments(elicitation_sep1034_defaults)),
        fn_tool(ELICITATION_SEP1330_ENUMS, owned_arguments(elicitation_sep1330_enums)),
        fn_tool(JSON_SCHEMA_2020_12, owned_arguments(json_schema_2020_12)),
        fn_tool(HEADER_PARAM, owned_arguments(header_param)),
    ]
    .into_iter()
    .chain(super::conformance_modern::tools())
    .chain(super::conformance_tasks::tools())
    .collect()
}

/// The conformance set's resources, template, prompts and completions.
pub(crate) fn catalog() -> Box<dyn Catalog> {
    Box::new(ConformanceCatalog)
}

fn image_item() -> Value {
    json!({ "type": "image", "data": TEST_IMAGE_PNG_BASE64, "mimeType": "image/png" })
}

async fn simple_text(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    Ok(text_result("This is a simple text response for testing."))
}

async fn image_content(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    Ok(json!({ "content": [image_item()] }))
}

async fn audio_content(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let audio = json!({ "type": "audio", "data": TEST_AUDIO_WAV_BASE64, "mimeType": "audio/wav" });
    Ok(json!({ "content": [audio] }))
}

async fn embedded_resource(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let resource = json!({
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    });
    Ok(json!({ "content": [{ "type": "resource", "resource": resource }] }))
}

async fn multiple_content_types(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let resource = json!({
        "uri": "test://mixed-content-resource",
        "mimeType": "application/json",
        "text": r#"{"test":"data","value":123}"#,
    });
    Ok(json!({
        "content": [
            { "type": "text", "text": "Multiple content types test:" },
            image_item(),
            { "type": "resource", "resource": resource },
        ]
    }))
}

/// Three `info` logs, `STEP_PAUSE` apart (scenario `tools-call-with-logging`).
async fn tool_with_logging(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let messages = ["Tool execution started", "Tool processing data", "Tool execution completed"];
    for (index, message) in messages.into_iter().enumerate() {
        if index > 0 {
            monoio::time::sleep(STEP_PAUSE).await;
        }
        cx.log(LogLevel::Info, None, Value::from(message));
    }
    Ok(text_result("Tool with logging executed successfully"))
}

/// Progress 0, 50, 100 of 100, `STEP_PAUSE` apart (scenario `tools-call-with-progress`).
async fn tool_with_progress(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    for (index, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if index > 0 {
            monoio::time::sleep(STEP_PAUSE).await;
        }
        let message = format!("Completed step {progress} of 100");
        cx.progress(progress, Some(100.0), Some(&message));
    }
    Ok(text_result("Progress test completed: reported 0, 50 and 100 of 100"))
}

/// A tool-level failure: an `isError` result, not a JSON-RPC error (`tools-call-error`).
async fn error_handling(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    Ok(error_result("This tool intentionally returns an error for testing"))
}

/// SEP-1699 fixture (`server-sse-polling`): drop the connection first, answer after, so the
/// result can only reach the client through a GET + `Last-Event-ID` resume.
async fn reconnection(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    cx.close_connection();
    monoio::time::sleep(RECONNECT_PAUSE).await;
    Ok(text_result(
        "Reconnection test completed successfully. If you received this, the client properly \
         reconnected after stream closure.",
    ))
}

/// Asks the client's LLM (`sampling/createMessage`) and returns its text.
async fn sampling(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    let prompt = required_str(&arguments, "prompt")?;
    let params = json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": 100,
    });
    match cx.request("sampling/createMessage", params).await {
        Ok(result) => Ok(text_result(format!("LLM response: {}", sampled_text(&result)))),
        Err(ProviderError::ClientError { code, message }) => {
            Ok(error_result(format!("Sampling failed: client error {code}: {message}")))
        }
        Err(error) => Err(error),
    }
}

/// The text of a `CreateMessageResult`: `content` is one block, or (2025-11-25, sampling with
/// tools) an array of blocks, of which the first text one counts.
fn sampled_text(result: &Value) -> &str {
    let Some(content) = result.get("content") else {
        return "No response";
    };
    let single = content.get("text").and_then(|text| text.as_str());
    let from_array = || {
        let items = content.as_array()?;
        items.iter().find_map(|item| item.get("text")?.as_str())
    };
    single.or_else(from_array).unwrap_or("No response")
}

/// Asks the user (`elicitation/create`) for a username and an e-mail address.
async fn elicitation(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    let message = required_str(&arguments, "message")?;
    let requested_schema = json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "Your username" },
            "email": { "type": "string", "description": "Your email address" },
        },
        "required": ["username", "email"],
    });
    elicit(cx, "User response", message, requested_schema).await
}

/// SEP-1034: one field per primitive type, each with a default.
async fn elicitation_sep1034_defaults(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let requested_schema = json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {
                "type": "boolean",
                "description": "Verification status",
                "default": true,
            },
        },
        "required": [],
    });
    let message = "Please review and update the form fields with defaults";
    elicit(cx, "Elicitation completed", message, requested_schema).await
}

/// SEP-1330: the five enum shapes (untitled/titled single, legacy `enumNames`, untitled/titled
/// multi-select).
async fn elicitation_sep1330_enums(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let titled = |word: &str| {
        json!([
            { "const": "value1", "title": format!("First {word}") },
            { "const": "value2", "title": format!("Second {word}") },
            { "const": "value3", "title": format!("Third {word}") },
        ])
    };
    let requested_schema = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": titled("Option"),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] },
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": { "anyOf": titled("Choice") },
            },
        },
        "required": [],
    });
    let message = "Please select options from the enum fields";
    elicit(cx, "Elicitation completed", message, requested_schema).await
}

/// Sends `elicitation/create` (form mode, the default, so `mode` is omitted for clients of
/// 2025-06-18) and describes the client's answer.
async fn elicit(
    cx: CallContext,
    summary: &str,
    message: &str,
    requested_schema: Value,
) -> ProviderResult<Value> {
    let params = json!({ "message": message, "requestedSchema": requested_schema });
    match cx.request("elicitation/create", params).await {
        Ok(result) => {
            let action = result.get("action").and_then(|action| action.as_str());
            let content = result.get("content").map_or_else(|| "{}".to_owned(), Value::to_string);
            let action = action.unwrap_or("(none)");
            Ok(text_result(format!("{summary}: action={action}, content={content}")))
        }
        Err(ProviderError::ClientError { code, message }) => {
            Ok(error_result(format!("Elicitation failed: client error {code}: {message}")))
        }
        Err(error) => Err(error),
    }
}

/// Echoes its arguments; the point of the tool is its listed schema.
async fn json_schema_2020_12(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let arguments = if arguments.is_null() { "{}".to_owned() } else { arguments.to_string() };
    Ok(text_result(format!("JSON Schema 2020-12 tool called with: {arguments}")))
}

/// Returns `value`: the point of the tool is its `x-mcp-header` parameter.
async fn header_param(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    Ok(text_result(format!("value: {}", required_str(&arguments, "value")?)))
}

/// Resources, the template, prompts and completions of the conformance set. Stateless.
struct ConformanceCatalog;

const TEMPLATE_URI_PREFIX: &str = "test://template/";
const TEMPLATE_URI_SUFFIX: &str = "/data";

/// Values offered for `arg1` of `test_prompt_with_arguments`, filtered by the typed prefix.
const ARG1_COMPLETIONS: [&str; 4] = ["paris", "park", "party", "testValue1"];

impl Catalog for ConformanceCatalog {
    fn resources(&self) -> Vec<Value> {
        vec![
            json!({
                "uri": "test://static-text",
                "name": "static-text",
                "title": "Static Text Resource",
                "description": "A static text resource for testing",
                "mimeType": "text/plain",
            }),
            json!({
                "uri": "test://static-binary",
                "name": "static-binary",
                "title": "Static Binary Resource",
                "description": "A static binary resource (image) for testing",
                "mimeType": "image/png",
            }),
            json!({
                "uri": "test://watched-resource",
                "name": "watched-resource",
                "title": "Watched Resource",
                "description": "A resource to subscribe to (its content never changes here)",
                "mimeType": "text/plain",
            }),
        ]
    }

    fn resource_templates(&self) -> Vec<Value> {
        vec![json!({
            "uriTemplate": "test://template/{id}/data",
            "name": "template",
            "title": "Resource Template",
            "description": "A resource template with parameter substitution",
            "mimeType": "application/json",
        })]
    }

    fn read_resource(&self, uri: &str) -> Option<Value> {
        let content = match uri {
            "test://static-text" => json!({
                "uri": uri,
                "mimeType": "text/plain",
                "text": "This is the content of the static text resource.",
            }),
            "test://static-binary" => {
                json!({ "uri": uri, "mimeType": "image/png", "blob": TEST_IMAGE_PNG_BASE64 })
            }
            "test://watched-resource" => {
                json!({ "uri": uri, "mimeType": "text/plain", "text": "Watched resource content" })
            }
            _ => {
                let id = template_id(uri)?;
                let data =
                    json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
                json!({ "uri": uri, "mimeType": "application/json", "text": data.to_string() })
            }
        };
        Some(json!({ "contents": [content] }))
    }

    fn prompts(&self) -> Vec<Value> {
        vec![
            json!({
                "name": "test_simple_prompt",
                "title": "Simple Test Prompt",
                "description": "A simple prompt without arguments",
            }),
            json!({
                "name": "test_prompt_with_arguments",
                "title": "Prompt With Arguments",
                "description": "A prompt with required arguments",
                "arguments": [
                    prompt_argument("arg1", "First test argument"),
                    prompt_argument("arg2", "Second test argument"),
                ],
            }),
            json!({
                "name": "test_prompt_with_embedded_resource",
                "title": "Prompt With Embedded Resource",
                "description": "A prompt that includes an embedded resource",
                "arguments": [prompt_argument("resourceUri", "URI of the resource to embed")],
            }),
            json!({
                "name": "test_prompt_with_image",
                "title": "Prompt With Image",
                "description": "A prompt that includes image content",
            }),
            super::conformance_modern::mrtr_prompt_listing(),
        ]
    }

    fn get_prompt_with_context(
        &self,
        name: &str,
        cx: &CallContext,
    ) -> Option<crate::provider::LocalBoxFuture<'static, ProviderResult<Value>>> {
        (name == super::conformance_modern::MRTR_PROMPT)
            .then(|| Box::pin(super::conformance_modern::mrtr_prompt(cx.clone())) as _)
    }

    fn get_prompt(&self, name: &str, arguments: &Value) -> ProviderResult<Value> {
        let user = |content: Value| json!({ "role": "user", "content": content });
        let text = |text: String| json!({ "type": "text", "text": text });
        let messages = match name {
            "test_simple_prompt" => {
                expect_arguments_object(arguments)?;
                vec![user(text("This is a simple prompt for testing.".to_owned()))]
            }
            "test_prompt_with_arguments" => {
                let arg1 = required_str(arguments, "arg1")?;
                let arg2 = required_str(arguments, "arg2")?;
                vec![user(text(format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")))]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = required_str(arguments, "resourceUri")?;
                let resource = json!({
                    "uri": uri,
                    "mimeType": "text/plain",
                    "text": "Embedded resource content for testing.",
                });
                vec![
                    user(json!({ "type": "resource", "resource": resource })),
                    user(text("Please process the embedded resource above.".to_owned())),
                ]
            }
            "test_prompt_with_image" => {
                expect_arguments_object(arguments)?;
                vec![user(image_item()), user(text("Please analyze the image above.".to_owned()))]
            }
            super::conformance_modern::MRTR_PROMPT => {
                return Err(ProviderError::InvalidParams(
                    "this prompt asks the client for input: get it with MCP 2026-07-28".to_owned(),
                ))
            }
            _ => return Err(ProviderError::NotFound(name.to_owned())),
        };
        Ok(json!({ "messages": messages }))
    }

    fn complete(&self, reference: &Value, argument: &Value) -> Option<Vec<String>> {
        let ours = reference.get("type").and_then(|t| t.as_str()) == Some("ref/prompt")
            && reference.get("name").and_then(|n| n.as_str()) == Some("test_prompt_with_arguments");
        if !ours {
            return None;
        }
        let typed = argument.get("value").and_then(|v| v.as_str()).unwrap_or("");
        let candidates: &[&str] = match argument.get("name").and_then(|n| n.as_str()) {
            Some("arg1") => &ARG1_COMPLETIONS,
            _ => &[],
        };
        let values = candidates.iter().filter(|c| c.starts_with(typed));
        Some(values.map(|c| (*c).to_owned()).collect())
    }
}

/// A required `PromptArgument`.
fn prompt_argument(name: &str, description: &str) -> Value {
    json!({ "name": name, "description": description, "required": true })
}

/// The `{id}` of `test://template/{id}/data`: one non-empty path segment, taken as written.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix(TEMPLATE_URI_PREFIX)?.strip_suffix(TEMPLATE_URI_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::testing::{first_text, parse, run, Call, RecordingSink};
    use std::time::Instant;

    /// Calls tool `name` of this set with `arguments` on a context recorded by `sink`.
    fn call(name: &str, arguments: Value, sink: &Rc<RecordingSink>) -> ProviderResult<Value> {
        let tool = tools().into_iter().find(|t| t.spec().name == name).expect("tool exists");
        let arguments = crate::provider::builtin::kit::Args::from(&arguments);
        run(super::super::kit::call_value(tool.as_ref(), arguments, sink.context()))
    }

    fn call_quietly(name: &str, arguments: Value) -> Value {
        let sink = Rc::new(RecordingSink::default());
        let result = call(name, arguments, &sink).expect("tool succeeds");
        assert!(sink.calls().is_empty(), "{name} emitted {:?}", sink.calls());
        result
    }

    #[test]
    fn content_tools_return_the_reference_shapes() {
        // Goal: the tools-call-{simple-text,image,audio,embedded-resource,mixed-content}
        // checks pass. Method: call each with absent and empty arguments, compare exactly.
        let image =
            json!({ "type": "image", "data": TEST_IMAGE_PNG_BASE64, "mimeType": "image/png" });
        let cases = [
            (
                "test_simple_text",
                json!([{ "type": "text", "text": "This is a simple text response for testing." }]),
            ),
            ("test_image_content", json!([image.clone()])),
            (
                "test_audio_content",
                json!([{
                    "type": "audio",
                    "data": TEST_AUDIO_WAV_BASE64,
                    "mimeType": "audio/wav",
                }]),
            ),
            (
                "test_embedded_resource",
                json!([{ "type": "resource", "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                } }]),
            ),
            (
                "test_multiple_content_types",
                json!([
                    { "type": "text", "text": "Multiple content types test:" },
                    image,
                    { "type": "resource", "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": "{\"test\":\"data\",\"value\":123}",
                    } },
                ]),
            ),
        ];
        for (name, content) in cases {
            for arguments in [json!(null), json!({})] {
                assert_eq!(
                    call_quietly(name, arguments),
                    json!({ "content": content.clone() }),
                    "{name}"
                );
            }
        }
        assert!(TEST_IMAGE_PNG_BASE64.starts_with("iVBORw0KGgo"), "PNG signature");
        assert!(TEST_AUDIO_WAV_BASE64.starts_with("UklGR"), "RIFF header");
    }

    #[test]
    fn tools_reject_non_object_arguments() {
        // Goal: malformed `arguments` is -32602 for every tool, never a panic. Method: table.
        for tool in tools() {
            for arguments in [json!([]), json!("x"), json!(1)] {
                let sink = Rc::new(RecordingSink::default());
                let result = call(tool.spec().name, arguments, &sink);
                assert!(
                    matches!(result, Err(ProviderError::InvalidParams(_))),
                    "{}",
                    tool.spec().name
                );
                assert!(sink.calls().is_empty());
            }
        }
    }

    #[test]
    fn error_handling_is_an_is_error_result() {
        // Goal: tools-call-error needs an Ok result with isError true and non-empty text.
        let result = call_quietly("test_error_handling", json!({}));
        assert_eq!(result["isError"], json!(true));
        assert_eq!(first_text(&result), "This tool intentionally returns an error for testing");
    }

    #[test]
    fn logging_tool_sends_three_info_logs_50_ms_apart() {
        // Goal: tools-call-with-logging sees 3 notifications/message. Method: record the logs
        // and their times.
        let sink = Rc::new(RecordingSink::default());
        let result = call("test_tool_with_logging", json!({}), &sink).expect("ok");
        assert_eq!(first_text(&result), "Tool with logging executed successfully");
        let log = |text: &str| Call::Log { level: LogLevel::Info, logger: None, data: json!(text) };
        let expected = vec![
            log("Tool execution started"),
            log("Tool processing data"),
            log("Tool execution completed"),
        ];
        assert_eq!(sink.calls(), expected);
        assert_spaced(&sink, STEP_PAUSE);
    }

    #[test]
    fn progress_tool_reports_0_50_100_of_100() {
        // Goal: tools-call-with-progress sees ≥3 non-decreasing progress notifications.
        let sink = Rc::new(RecordingSink::default());
        let result = call("test_tool_with_progress", json!(null), &sink).expect("ok");
        assert!(!first_text(&result).is_empty());
        let progress = |p: f64| Call::Progress {
            progress: p,
            total: Some(100.0),
            message: Some(format!("Completed step {p} of 100")),
        };
        assert_eq!(sink.calls(), vec![progress(0.0), progress(50.0), progress(100.0)]);
        assert_spaced(&sink, STEP_PAUSE);
    }

    fn assert_spaced(sink: &RecordingSink, pause: Duration) {
        let times: Vec<Instant> = sink.calls.borrow().iter().map(|(at, _)| *at).collect();
        assert!(times.windows(2).all(|w| w[1] - w[0] >= pause), "calls closer than {pause:?}");
    }

    #[test]
    fn reconnection_closes_the_connection_before_answering() {
        // Goal: server-sse-polling gets its result only after the disconnect. Method: the
        // close is the only call, and the result comes ≥ 100 ms after it.
        let sink = Rc::new(RecordingSink::default());
        let result = call("test_reconnection", json!({}), &sink).expect("ok");
        let answered = Instant::now();
        assert!(first_text(&result).starts_with("Reconnection test completed successfully."));
        assert_eq!(sink.calls(), vec![Call::CloseConnection]);
        let closed = sink.calls.borrow()[0].0;
        assert!(answered - closed >= RECONNECT_PAUSE);
    }

    #[test]
    fn sampling_sends_the_prompt_and_returns_the_answer() {
        // Goal: tools-call-sampling: the exact createMessage params, the answer's text back.
        let sink = Rc::new(RecordingSink::default());
        let answer = json!({
            "role": "assistant",
            "content": { "type": "text", "text": "This is a test response from the client" },
            "model": "test-model",
            "stopReason": "endTurn",
        });
        sink.answer("sampling/createMessage", Ok(answer));
        let result = call("test_sampling", json!({ "prompt": "Say hi" }), &sink).expect("ok");
        assert_eq!(first_text(&result), "LLM response: This is a test response from the client");
        let params = json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": "Say hi" } }],
            "maxTokens": 100,
        });
        let method = "sampling/createMessage".to_owned();
        assert_eq!(sink.calls(), vec![Call::Request { method, params }]);
    }

    #[test]
    fn sampling_handles_array_content_client_errors_and_bad_arguments() {
        // Goal: every reject path: missing/non-string prompt → -32602 with no request; a client
        // error → isError result; cancellation propagates; array content is read.
        for arguments in [json!({}), json!(null), json!({ "prompt": 3 })] {
            let sink = Rc::new(RecordingSink::default());
            let result = call("test_sampling", arguments, &sink);
            assert!(matches!(result, Err(ProviderError::InvalidParams(_))));
            assert!(sink.calls().is_empty());
        }
        let sink = Rc::new(RecordingSink::default());
        let rejected = ProviderError::ClientError { code: -1, message: "User rejected".to_owned() };
        sink.answer("sampling/createMessage", Err(rejected));
        let result = call("test_sampling", json!({ "prompt": "p" }), &sink).expect("ok");
        assert_eq!(result["isError"], json!(true));
        assert!(first_text(&result).contains("User rejected"));

        sink.answer("sampling/createMessage", Err(ProviderError::Cancelled));
        let result = call("test_sampling", json!({ "prompt": "p" }), &sink);
        assert_eq!(result, Err(ProviderError::Cancelled));

        let answer = json!({ "content": [{ "type": "image" }, { "type": "text", "text": "two" }] });
        sink.answer("sampling/createMessage", Ok(answer));
        let result = call("test_sampling", json!({ "prompt": "p" }), &sink).expect("ok");
        assert_eq!(first_text(&result), "LLM response: two");
        sink.answer("sampling/createMessage", Ok(json!({})));
        let result = call("test_sampling", json!({ "prompt": "p" }), &sink).expect("ok");
        assert_eq!(first_text(&result), "LLM response: No response");
    }

    /// Runs elicitation tool `name` against an accepting client; returns the sent params.
    fn elicit_params(name: &str, arguments: Value) -> (Value, String) {
        let sink = Rc::new(RecordingSink::default());
        let answer = json!({ "action": "accept", "content": { "username": "testuser" } });
        sink.answer("elicitation/create", Ok(answer));
        let result = call(name, arguments, &sink).expect("ok");
        let calls = sink.calls();
        assert_eq!(calls.len(), 1);
        let Call::Request { method, params } = &calls[0] else {
            panic!("not a request: {calls:?}")
        };
        assert_eq!(method, "elicitation/create");
        (params.clone(), first_text(&result).to_owned())
    }

    #[test]
    fn elicitation_asks_for_username_and_email() {
        // Goal: tools-call-elicitation: message passed through, object schema, answer described.
        let (params, text) = elicit_params("test_elicitation", json!({ "message": "Who?" }));
        assert_eq!(params["message"], json!("Who?"));
        let schema = &params["requestedSchema"];
        assert_eq!(schema["type"], json!("object"));
        assert_eq!(schema["properties"]["username"]["type"], json!("string"));
        assert_eq!(schema["properties"]["email"]["type"], json!("string"));
        assert_eq!(schema["required"], json!(["username", "email"]));
        assert_eq!(text, r#"User response: action=accept, content={"username":"testuser"}"#);

        let sink = Rc::new(RecordingSink::default());
        let result = call("test_elicitation", json!({}), &sink);
        assert!(matches!(result, Err(ProviderError::InvalidParams(_))));
        sink.answer("elicitation/create", Ok(json!({ "action": "decline" })));
        let result = call("test_elicitation", json!({ "message": "m" }), &sink).expect("ok");
        assert_eq!(first_text(&result), "User response: action=decline, content={}");
    }

    #[test]
    fn elicitation_sep1034_sends_a_default_for_every_primitive() {
        // Goal: elicitation-sep1034-*-default checks. Method: compare each property's default.
        let (params, text) = elicit_params("test_elicitation_sep1034_defaults", json!({}));
        let properties = &params["requestedSchema"]["properties"];
        assert_eq!(properties["name"]["default"], json!("John Doe"));
        assert_eq!(properties["age"]["type"], json!("integer"));
        assert_eq!(properties["age"]["default"], json!(30));
        assert_eq!(properties["score"]["type"], json!("number"));
        assert_eq!(properties["score"]["default"], json!(95.5));
        assert_eq!(properties["status"]["enum"], json!(["active", "inactive", "pending"]));
        assert_eq!(properties["status"]["default"], json!("active"));
        assert_eq!(properties["verified"]["default"], json!(true));
        assert!(text.starts_with("Elicitation completed: action=accept"));
    }

    #[test]
    fn elicitation_sep1330_sends_the_five_enum_shapes() {
        // Goal: elicitation-sep1330-* checks. Method: compare each property's enum keywords.
        let (params, _) = elicit_params("test_elicitation_sep1330_enums", json!(null));
        let properties = &params["requestedSchema"]["properties"];
        assert_eq!(properties["untitledSingle"]["enum"], json!(["option1", "option2", "option3"]));
        assert_eq!(
            properties["titledSingle"]["oneOf"],
            json!([
                { "const": "value1", "title": "First Option" },
                { "const": "value2", "title": "Second Option" },
                { "const": "value3", "title": "Third Option" },
            ])
        );
        assert_eq!(properties["legacyEnum"]["enum"], json!(["opt1", "opt2", "opt3"]));
        assert_eq!(
            properties["legacyEnum"]["enumNames"],
            json!(["Option One", "Option Two", "Option Three"])
        );
        assert_eq!(properties["untitledMulti"]["type"], json!("array"));
        assert_eq!(properties["untitledMulti"]["items"]["type"], json!("string"));
        assert_eq!(
            properties["untitledMulti"]["items"]["enum"],
            json!(["option1", "option2", "option3"])
        );
        assert_eq!(properties["titledMulti"]["type"], json!("array"));
        assert_eq!(
            properties["titledMulti"]["items"]["anyOf"][2],
            json!({ "const": "value3", "title": "Third Choice" })
        );
    }

    #[test]
    fn json_schema_2020_12_tool_keeps_its_keywords() {
        // Goal: json-schema-2020-12-{$schema,$defs,additionalProperties}. Method: parse the
        // spec's schema text (listed verbatim by the registry); call the tool.
        let schema = parse(JSON_SCHEMA_2020_12.input_schema);
        assert_eq!(schema["$schema"], json!("https://json-schema.org/draft/2020-12/schema"));
        assert_eq!(schema["$defs"]["address"]["type"], json!("object"));
        assert_eq!(schema["properties"]["address"]["$ref"], json!("#/$defs/address"));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["$defs"]["address"]["$anchor"], json!("addressDef"));
        assert!(schema["allOf"][0]["anyOf"].is_array());
        assert!(
            schema["if"].is_object() && schema["then"].is_object() && schema["else"].is_object()
        );
        let result = call_quietly("json_schema_2020_12_tool", json!({ "name": "n" }));
        assert_eq!(first_text(&result), r#"JSON Schema 2020-12 tool called with: {"name":"n"}"#);
    }

    #[test]
    fn annotations_mark_only_pure_tools_safe_to_repeat() {
        // Goal: interactive tools are never re-run on a reused request id (CONTRACT §4 step 3).
        let interactive = [
            "test_reconnection",
            "test_sampling",
            "test_elicitation",
            "test_elicitation_sep1034_defaults",
            "test_elicitation_sep1330_enums",
            "test_tool_with_logging",
            "test_tool_with_progress",
        ];
        let mut modern: Vec<&str> =
            super::super::conformance_modern::tools().iter().map(|t| t.spec().name).collect();
        // The tasks fixtures compute, wait or ask; only their `greet` is pure.
        let tasks = super::super::conformance_tasks::tools();
        modern.extend(tasks.iter().map(|t| t.spec().name).filter(|&name| name != "greet"));
        for tool in tools() {
            let spec = tool.spec();
            let expected = !interactive.contains(&spec.name) && !modern.contains(&spec.name);
            assert_eq!(spec.annotations.safe_to_repeat(), expected, "{}", spec.name);
            assert_eq!(spec.annotations.read_only.unwrap_or(false), expected, "{}", spec.name);
        }
    }

    #[test]
    fn resources_list_and_read() {
        // Goal: resources-list / -read-text / -read-binary. Method: every listed resource reads
        // back with its uri and mimeType, and the text/blob the scenarios expect.
        let catalog = ConformanceCatalog;
        let listed = catalog.resources();
        assert_eq!(listed.len(), 3);
        for resource in &listed {
            let uri = resource["uri"].as_str().expect("uri");
            assert!(resource["name"].as_str().is_some_and(|name| !name.is_empty()));
            let read = catalog.read_resource(uri).expect("listed resource reads");
            assert_eq!(read["contents"][0]["uri"], json!(uri));
            assert_eq!(read["contents"][0]["mimeType"], resource["mimeType"]);
        }
        let text = catalog.read_resource("test://static-text").expect("read");
        let expected = "This is the content of the static text resource.";
        assert_eq!(text["contents"][0]["text"], json!(expected));
        let binary = catalog.read_resource("test://static-binary").expect("read");
        assert_eq!(binary["contents"][0]["blob"], json!(TEST_IMAGE_PNG_BASE64));
        let watched = catalog.read_resource("test://watched-resource").expect("read");
        assert!(watched["contents"][0]["text"].as_str().is_some_and(|t| !t.is_empty()));
    }

    #[test]
    fn template_reads_any_single_segment_id() {
        // Goal: resources-templates-read; every near miss of the template is unknown.
        let catalog = ConformanceCatalog;
        let templates = catalog.resource_templates();
        assert_eq!(templates[0]["uriTemplate"], json!("test://template/{id}/data"));
        let read = catalog.read_resource("test://template/123/data").expect("read");
        let content = &read["contents"][0];
        assert_eq!(content["uri"], json!("test://template/123/data"));
        assert_eq!(content["mimeType"], json!("application/json"));
        let data = parse(content["text"].as_str().expect("text"));
        assert_eq!(data, json!({ "id": "123", "templateTest": true, "data": "Data for ID: 123" }));
        let quoted = catalog.read_resource("test://template/a\"b/data").expect("read");
        assert_eq!(
            parse(quoted["contents"][0]["text"].as_str().expect("text"))["id"],
            json!("a\"b")
        );
        let misses = [
            "test://template//data",
            "test://template/1/2/data",
            "test://template/1/data/",
            "test://template/1",
            "test://template/data",
            "test://static-text/",
            "test://embedded-resource",
            "",
        ];
        for uri in misses {
            assert!(catalog.read_resource(uri).is_none(), "{uri}");
        }
    }

    #[test]
    fn prompts_list_and_get() {
        // Goal: prompts-list (name+description) and the four prompts-get-* shapes.
        let catalog = ConformanceCatalog;
        let listed = catalog.prompts();
        assert_eq!(listed.len(), 5);
        for prompt in &listed {
            assert!(prompt["name"].as_str().is_some());
            assert!(prompt["description"].as_str().is_some_and(|d| !d.is_empty()));
        }
        let simple = catalog.get_prompt("test_simple_prompt", &json!(null)).expect("ok");
        assert_eq!(simple["messages"][0]["role"], json!("user"));
        assert_eq!(simple["messages"][0]["content"]["type"], json!("text"));

        let arguments = json!({ "arg1": "testValue1", "arg2": "testValue2" });
        let with_args = catalog.get_prompt("test_prompt_with_arguments", &arguments).expect("ok");
        let text = with_args["messages"][0]["content"]["text"].as_str().expect("text");
        assert_eq!(text, "Prompt with arguments: arg1='testValue1', arg2='testValue2'");

        let arguments = json!({ "resourceUri": "test://example-resource" });
        let embedded =
            catalog.get_prompt("test_prompt_with_embedded_resource", &arguments).expect("ok");
        let content = &embedded["messages"][0]["content"];
        assert_eq!(content["type"], json!("resource"));
        assert_eq!(content["resource"]["uri"], json!("test://example-resource"));
        assert!(content["resource"]["text"].as_str().is_some());

        let image = catalog.get_prompt("test_prompt_with_image", &json!({})).expect("ok");
        assert_eq!(image["messages"][0]["content"], image_item());
    }

    #[test]
    fn prompts_reject_missing_arguments_and_unknown_names() {
        // Goal: each reject path of prompts/get. Method: table of (name, arguments, error).
        let catalog = ConformanceCatalog;
        let invalid = [
            ("test_prompt_with_arguments", json!({ "arg1": "x" })),
            ("test_prompt_with_arguments", json!({ "arg1": "x", "arg2": 2 })),
            ("test_prompt_with_arguments", json!(null)),
            ("test_prompt_with_embedded_resource", json!({})),
            ("test_simple_prompt", json!([])),
        ];
        for (name, arguments) in invalid {
            let result = catalog.get_prompt(name, &arguments);
            assert!(matches!(result, Err(ProviderError::InvalidParams(_))), "{name} {arguments:?}");
        }
        let unknown = catalog.get_prompt("test_dynamic_prompt", &json!({}));
        assert_eq!(unknown, Err(ProviderError::NotFound("test_dynamic_prompt".to_owned())));
    }

    #[test]
    fn completion_filters_arg1_by_prefix() {
        // Goal: completion-complete. Method: prefixes with 3, 1 and 0 matches; the other
        // argument and foreign refs.
        let catalog = ConformanceCatalog;
        let reference = json!({ "type": "ref/prompt", "name": "test_prompt_with_arguments" });
        let complete = |name: &str, value: &str| {
            catalog.complete(&reference, &json!({ "name": name, "value": value }))
        };
        let owned = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
        assert_eq!(complete("arg1", "pa"), Some(owned(&["paris", "park", "party"])));
        assert_eq!(complete("arg1", "test"), Some(owned(&["testValue1"])));
        assert_eq!(complete("arg1", "zz"), Some(Vec::new()));
        assert_eq!(complete("arg1", "").map(|v| v.len()), Some(ARG1_COMPLETIONS.len()));
        assert_eq!(complete("arg2", "t"), Some(Vec::new()));
        let other_prompt = json!({ "type": "ref/prompt", "name": "test_simple_prompt" });
        let argument = json!({ "name": "arg1", "value": "" });
        assert_eq!(catalog.complete(&other_prompt, &argument), None);
        let resource = json!({ "type": "ref/resource", "uri": "test://template/{id}/data" });
        assert_eq!(catalog.complete(&resource, &argument), None);
        assert_eq!(catalog.complete(&json!(null), &json!(null)), None);
    }
}
