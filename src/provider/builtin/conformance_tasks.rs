//! The tasks-extension fixtures of the `conformance` set (`io.modelcontextprotocol/tasks`,
//! SEP-2663): the tools the suite's `tasks-*` scenarios call by name, with the arguments and
//! outcomes they expect (`/work/notes`-independent summary in each tool's doc).
//!
//! A call of a task-supporting tool becomes a task when it first waits for something other
//! than client input (`TaskSupport`); so the tools that ask the client while running as a task
//! first look their subject up (a short pause), and `test_tool_with_task` asks before it
//! pauses (its question is an MRTR round, its work a task). Every tool also runs without the
//! extension (a legacy session, or a 2026-07-28 client that did not declare it), where it
//! answers synchronously; `failing_job` and `test_tool_with_task` are `Required` and refused
//! there on 2026-07-28 (-32021).
//!
//! Owns: those tools. Called by `conformance`. Never: keeps state between calls.

use std::rc::Rc;
use std::time::Duration;

use super::kit::{argument, error_result, expect_arguments_object, fn_tool, hints, required_str};
use super::kit::{one_field_form, task_tool, text_result, BuiltinTool, ToolSpec};
use super::kit::{owned_arguments, Args};
use crate::provider::{
    Annotations, CallContext, ProviderError, ProviderResult, TaskSupport, Value,
};

/// Longest `slow_compute` accepted, in seconds (a fixture, not a load generator: longer
/// requests are the caller's mistake, -32602).
const SLOW_COMPUTE_SECONDS_MAX: f64 = 600.0;
/// How long `failing_job` works before it reports its failure ("after ~1s").
const FAILING_JOB_PAUSE: Duration = Duration::from_secs(1);
/// How long `protocol_error_job` works before it fails.
const PROTOCOL_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// The lookup before a tool asks the client: the wait at which its call becomes a task.
const LOOKUP_PAUSE: Duration = Duration::from_millis(10);
/// The work `test_tool_with_task` does as a task, after its MRTR round.
const TASK_WORK_PAUSE: Duration = Duration::from_millis(200);

/// They compute, wait or ask: not safe to repeat blindly.
const INTERACTIVE: Annotations = hints(false, false);

const fn spec(
    name: &'static str,
    description: &'static str,
    input_schema: &'static str,
) -> ToolSpec {
    ToolSpec { name, description, input_schema, annotations: INTERACTIVE }
}

const NO_ARGUMENTS: &str = r#"{"type":"object","properties":{}}"#;

const GREET: ToolSpec = ToolSpec {
    name: "greet",
    description: "Greets {name} synchronously (never a task)",
    input_schema: r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}"#,
    annotations: hints(true, false),
};
const SLOW_COMPUTE: ToolSpec = spec(
    "slow_compute",
    "Sleeps `seconds` then returns a result; a task for clients with the tasks extension \
     (seconds 0 answers at once)",
    concat!(
        r#"{"type":"object","properties":{"seconds":{"type":"number","minimum":0},"#,
        r#""label":{"type":"string"}},"required":["seconds"]}"#
    ),
);
const FAILING_JOB: ToolSpec =
    spec("failing_job", "Reports a tool error after about a second (tasks only)", NO_ARGUMENTS);
const PROTOCOL_ERROR_JOB: ToolSpec = spec(
    "protocol_error_job",
    "Fails with a JSON-RPC internal error (its task ends failed)",
    NO_ARGUMENTS,
);
const CONFIRM_DELETE: ToolSpec = spec(
    "confirm_delete",
    "Asks the user to confirm deleting `filename` (as a task: input_required), then answers",
    r#"{"type":"object","properties":{"filename":{"type":"string"}},"required":["filename"]}"#,
);
const MULTI_INPUT: ToolSpec = spec(
    "multi_input",
    "Asks the user two questions at once, then answers with both",
    NO_ARGUMENTS,
);
const TOOL_WITH_TASK: ToolSpec = spec(
    "test_tool_with_task",
    "Asks for user_name (an MRTR round), then finishes as a task (tasks only)",
    NO_ARGUMENTS,
);

/// The tasks fixtures, after the 2026-07-28 ones in `tools/list`.
pub(crate) fn tools() -> Vec<Rc<dyn BuiltinTool>> {
    vec![
        fn_tool(GREET, owned_arguments(greet)),
        task_tool(SLOW_COMPUTE, TaskSupport::Optional, owned_arguments(slow_compute)),
        task_tool(FAILING_JOB, TaskSupport::Required, owned_arguments(failing_job)),
        task_tool(PROTOCOL_ERROR_JOB, TaskSupport::Optional, owned_arguments(protocol_error_job)),
        task_tool(CONFIRM_DELETE, TaskSupport::Optional, owned_arguments(confirm_delete)),
        task_tool(MULTI_INPUT, TaskSupport::Optional, owned_arguments(multi_input)),
        task_tool(TOOL_WITH_TASK, TaskSupport::Required, owned_arguments(tool_with_task)),
    ]
}

/// `content[field]` of an accepted elicitation, as text; `None` when declined or cancelled.
fn accepted(answer: &Value, field: &str) -> Option<String> {
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return None;
    }
    match answer.get("content").and_then(|c| c.get(field)) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => Some(other.to_string()),
        None => None,
    }
}

/// `Hello, {name}!` (tasks-lifecycle, tasks-request-headers).
async fn greet(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    let name = required_str(&arguments, "name")?;
    Ok(text_result(format!("Hello, {name}!")))
}

/// Sleeps `seconds` (0 ≤ seconds ≤ 600), then `Computed <label> in <seconds>s`.
async fn slow_compute(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    let seconds = argument(&arguments, "seconds")?.and_then(Args::as_f64).unwrap_or(-1.0);
    if !(0.0..=SLOW_COMPUTE_SECONDS_MAX).contains(&seconds) {
        let message = format!("`seconds` must be a number from 0 to {SLOW_COMPUTE_SECONDS_MAX}");
        return Err(ProviderError::InvalidParams(message));
    }
    let label = argument(&arguments, "label")?.and_then(Args::as_str).unwrap_or("slow_compute");
    if seconds > 0.0 {
        monoio::time::sleep(Duration::from_secs_f64(seconds)).await;
    }
    Ok(text_result(format!("Computed {label} in {seconds}s")))
}

/// About a second of work, then a tool error (`isError: true`): its task ends `completed`.
async fn failing_job(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    monoio::time::sleep(FAILING_JOB_PAUSE).await;
    Ok(error_result("failing_job: the job failed (a tool error, as designed)"))
}

/// A moment of work, then a JSON-RPC internal error (-32603): its task ends `failed`. (The
/// suite's reference "panics"; a panic aborts tidemark, so the error is returned.)
async fn protocol_error_job(arguments: Value, _cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    monoio::time::sleep(PROTOCOL_ERROR_PAUSE).await;
    Err(ProviderError::Internal("protocol_error_job: an internal error, as designed".into()))
}

/// Looks `filename` up, asks for confirmation (`confirm`: boolean), answers what it did.
async fn confirm_delete(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    let filename = required_str(&arguments, "filename")?.to_owned();
    monoio::time::sleep(LOOKUP_PAUSE).await;
    let question = one_field_form(&format!("Delete {filename}?"), "confirm", "boolean");
    let answer = cx.input("confirm_delete", "elicitation/create", question).await?;
    match accepted(&answer, "confirm").as_deref() {
        Some("true") => Ok(text_result(format!("Deleted {filename}"))),
        _ => Ok(text_result(format!("Kept {filename}"))),
    }
}

/// Asks two questions at once (both pending together), answers with both names.
async fn multi_input(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    monoio::time::sleep(LOOKUP_PAUSE).await;
    let first =
        cx.input("first", "elicitation/create", one_field_form("First name?", "name", "string"));
    let second =
        cx.input("second", "elicitation/create", one_field_form("Second name?", "name", "string"));
    let (first, second) = (first.await?, second.await?);
    let name = |answer: &Value| accepted(answer, "name").unwrap_or_else(|| "(none)".into());
    Ok(text_result(format!("Got {} and {}", name(&first), name(&second))))
}

/// Asks for `user_name` first (on 2026-07-28 an MRTR round: no task yet), then works as a task
/// and greets the name it was given.
async fn tool_with_task(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    expect_arguments_object(&arguments)?;
    let question = one_field_form("What is your name?", "name", "string");
    let answer = cx.input("user_name", "elicitation/create", question).await?;
    let name = accepted(&answer, "name").unwrap_or_else(|| "(no name)".into());
    monoio::time::sleep(TASK_WORK_PAUSE).await;
    Ok(text_result(format!("Hello, {name}! (finished as a task)")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::testing::{first_text, run, RecordingSink};
    use serde_json::json;

    fn call(name: &str, arguments: Value, sink: &Rc<RecordingSink>) -> ProviderResult<Value> {
        let tool = tools().into_iter().find(|t| t.spec().name == name).expect("listed");
        let arguments = crate::provider::builtin::kit::Args::from(&arguments);
        run(super::super::kit::call_value(tool.as_ref(), arguments, sink.context()))
    }

    fn support(name: &str) -> TaskSupport {
        let tool = tools().into_iter().find(|t| t.spec().name == name).expect("listed");
        tool.task_support()
    }

    #[test]
    fn task_support_is_what_the_scenarios_register() {
        // Goal: greet is sync-only; failing_job and test_tool_with_task are required (the
        // -32021 checks); the others optional. Method: read each tool's declaration.
        assert_eq!(support("greet"), TaskSupport::Forbidden);
        assert_eq!(support("failing_job"), TaskSupport::Required);
        assert_eq!(support("test_tool_with_task"), TaskSupport::Required);
        for name in ["slow_compute", "protocol_error_job", "confirm_delete", "multi_input"] {
            assert_eq!(support(name), TaskSupport::Optional, "{name}");
        }
    }

    #[test]
    fn greet_slow_compute_and_the_failing_jobs_answer_as_the_scenarios_expect() {
        // Goal: the outcomes tasks-lifecycle checks (text, isError, protocol error) and the
        // argument checks. Method: call each with a recording sink.
        let sink = Rc::new(RecordingSink::default());
        let greeted = call("greet", json!({ "name": "sep-2243" }), &sink).expect("ok");
        assert_eq!(first_text(&greeted), "Hello, sep-2243!");
        assert!(call("greet", json!({}), &sink).is_err());
        let computed = call("slow_compute", json!({ "seconds": 0, "label": "x" }), &sink);
        assert_eq!(first_text(&computed.expect("ok")), "Computed x in 0s");
        for bad in [json!({}), json!({ "seconds": -1 }), json!({ "seconds": 601 }), json!([])] {
            assert!(
                matches!(
                    call("slow_compute", bad.clone(), &sink),
                    Err(ProviderError::InvalidParams(_))
                ),
                "{bad}"
            );
        }
        let failed = call("failing_job", json!({}), &sink).expect("a result");
        assert_eq!(failed["isError"], json!(true));
        let error = call("protocol_error_job", json!({}), &sink);
        assert!(matches!(error, Err(ProviderError::Internal(_))));
    }

    #[test]
    fn the_asking_tools_use_the_answers() {
        // Goal: confirm_delete, multi_input and test_tool_with_task ask with elicitation
        // forms and build their result from the answers (test_tool_with_task's text names the
        // user: tasks-mrtr-composition). Method: a sink that accepts every form.
        let sink = Rc::new(RecordingSink::default());
        let yes = json!({ "action": "accept", "content": { "confirm": true, "name": "Alice" } });
        sink.answer("elicitation/create", Ok(yes));
        let deleted = call("confirm_delete", json!({ "filename": "a.txt" }), &sink);
        assert_eq!(first_text(&deleted.expect("ok")), "Deleted a.txt");
        let both = call("multi_input", json!({}), &sink).expect("ok");
        assert_eq!(first_text(&both), "Got Alice and Alice");
        let greeted = call("test_tool_with_task", json!({}), &sink).expect("ok");
        assert!(first_text(&greeted).contains("Alice"));
        let no = json!({ "action": "decline" });
        sink.answer("elicitation/create", Ok(no));
        let kept = call("confirm_delete", json!({ "filename": "a.txt" }), &sink);
        assert_eq!(first_text(&kept.expect("ok")), "Kept a.txt");
    }
}
