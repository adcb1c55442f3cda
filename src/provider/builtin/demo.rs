//! The `demo` tool set (`--tools demo`): `echo`, `slow_counter` and `get_counter`.
//!
//! Owns: the server-global execution counter `EXECUTIONS` that `slow_counter` bumps once per
//! execution. It is the observable side effect that shows whether a retried, non-idempotent
//! call ran twice (CONTRACT §4); clients read it through `get_counter`.
//! Called by: `BuiltinProvider::new` (through `tools`). Never: retries, or bumps the counter
//! for a call whose arguments were rejected.

use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::future::Future;

use super::kit::{argument, expect_arguments_object, fn_tool, hints, required_str, text_result};
use super::kit::{instant_tool, owned_arguments, Args, BuiltinTool, ToolAnswer, ToolSpec};
use crate::provider::{CallContext, ProviderError, ProviderResult, Value};

/// Executions of `slow_counter` since the process started, across all cores. The one atomic in
/// the built-in sets, and off the hot path: only the demo tools touch it. Relaxed ordering is
/// enough: the counter publishes no other memory, it only has to count each start once.
pub(crate) static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// Most progress steps one `slow_counter` call may ask for. Bounds the notifications (and so the
/// replay-buffer events) one call produces; a larger `steps` gets JSON-RPC -32602.
pub(crate) const SLOW_COUNTER_STEPS_MAX: u64 = 1000;

/// Longest pause before each `slow_counter` step, in ms. 10 s is longer than any resume a test
/// needs to fit in; a larger `delay_ms` gets -32602. With `SLOW_COUNTER_STEPS_MAX` a call may
/// still run for hours; the server's tool run-time limit, not this one, bounds a whole call.
pub(crate) const SLOW_COUNTER_DELAY_MS_MAX: u64 = 10_000;

/// `stamp` when the call does not say: progress notifications carry no `message`, the tool's
/// wire output as the conformance and client suites know it.
pub(crate) const SLOW_COUNTER_STAMP_DEFAULT: bool = false;

/// `steps` when the call does not say (documented in the input schema).
pub(crate) const SLOW_COUNTER_STEPS_DEFAULT: u64 = 5;

/// `delay_ms` when the call does not say (documented in the input schema).
pub(crate) const SLOW_COUNTER_DELAY_MS_DEFAULT: u64 = 0;

const ECHO: ToolSpec = ToolSpec {
    name: "echo",
    description: "Returns the given text unchanged.",
    input_schema: concat!(
        r#"{"type":"object","#,
        r#""properties":{"text":{"type":"string","description":"The text to return."}},"#,
        r#""required":["text"]}"#
    ),
    annotations: hints(true, true),
};

const SLOW_COUNTER: ToolSpec = ToolSpec {
    name: "slow_counter",
    description: "Increments the server-wide execution counter once, then sends `steps` \
                  progress notifications, waiting `delay_ms` before each (with `stamp`, each \
                  carries its emit time), and returns the counter value after its own \
                  increment. Not idempotent: every execution counts.",
    input_schema: concat!(
        r#"{"type":"object","properties":{"#,
        r#""steps":{"type":"integer","minimum":0,"maximum":1000,"default":5,"#,
        r#""description":"Progress notifications to send (0 to 1000, default 5)."},"#,
        r#""delay_ms":{"type":"integer","minimum":0,"maximum":10000,"default":0,"#,
        r#""description":"Milliseconds to wait before each notification "#,
        r#"(0 to 10000, default 0: no wait)."},"#,
        r#""stamp":{"type":"boolean","default":false,"#,
        r#""description":"Put the emit time in each notification's message: microseconds "#,
        r#"since the Unix epoch, in decimal (a load test's delivery latency)."}}}"#
    ),
    annotations: hints(false, false),
};

const GET_COUNTER: ToolSpec = ToolSpec {
    name: "get_counter",
    description: "Returns how many times slow_counter has started executing since the server \
                  started, across all cores.",
    input_schema: r#"{"type":"object","properties":{}}"#,
    annotations: hints(true, false),
};

const GREET: ToolSpec = ToolSpec {
    name: "greet",
    description: "Asks the user for their name (an elicitation: a server→client request on a \
                  2025 session, an input-required result and a retry in MCP 2026-07-28) and \
                  greets them.",
    input_schema: r#"{"type":"object","properties":{}}"#,
    annotations: hints(true, false),
};

/// The demo set's tools, bound to the process-wide `EXECUTIONS` counter.
pub(crate) fn tools() -> Vec<Rc<dyn BuiltinTool>> {
    vec![
        instant_tool(ECHO, echo),
        fn_tool(SLOW_COUNTER, |arguments, cx| slow_counter(&EXECUTIONS, arguments, cx)),
        instant_tool(GET_COUNTER, |arguments| get_counter(&EXECUTIONS, arguments)),
        fn_tool(GREET, owned_arguments(greet)),
    ]
}

/// `Hello, <name>!` with the name the user gave; a declined or cancelled form says so.
async fn greet(arguments: Value, cx: CallContext) -> ProviderResult<Value> {
    super::kit::expect_arguments_object(&arguments)?;
    let form = serde_json::json!({
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": { "name": { "type": "string" } },
            "required": ["name"],
        },
    });
    let answer = cx.input("name", "elicitation/create", form).await?;
    let action = answer.get("action").and_then(Value::as_str).unwrap_or("");
    let name = answer.get("content").and_then(|c| c.get("name")).and_then(Value::as_str);
    match (action, name) {
        ("accept", Some(name)) => Ok(text_result(format!("Hello, {name}!"))),
        _ => Ok(text_result(format!("No name given (action: {action:?})"))),
    }
}

/// Instant: the answer borrows the text from the arguments (in place, a view of the request's
/// body) and is written straight into the response (`ToolAnswer::push_json`), so an echo
/// builds no result value.
fn echo(arguments: Args<'_>) -> ProviderResult<ToolAnswer<'_>> {
    let text = required_str(arguments, "text")?;
    Ok(ToolAnswer::Text(text.into()))
}

/// Validates both arguments before counting, so a rejected call leaves no trace; counts at the
/// start, so a call cancelled half-way (dropped stream, `notifications/cancelled`) still counts.
fn slow_counter(
    counter: &'static AtomicU64,
    arguments: Args<'_>,
    cx: CallContext,
) -> impl Future<Output = ProviderResult<ToolAnswer<'static>>> + 'static {
    let steps =
        bounded_integer(arguments, "steps", SLOW_COUNTER_STEPS_DEFAULT, SLOW_COUNTER_STEPS_MAX);
    let delay_ms = bounded_integer(
        arguments,
        "delay_ms",
        SLOW_COUNTER_DELAY_MS_DEFAULT,
        SLOW_COUNTER_DELAY_MS_MAX,
    );
    let stamp = optional_bool(arguments, "stamp", SLOW_COUNTER_STAMP_DEFAULT);
    count_slowly(counter, steps, delay_ms, stamp, cx)
}

/// `slow_counter` once its arguments are read.
async fn count_slowly(
    counter: &'static AtomicU64,
    steps: ProviderResult<u64>,
    delay_ms: ProviderResult<u64>,
    stamp: ProviderResult<bool>,
    cx: CallContext,
) -> ProviderResult<ToolAnswer<'static>> {
    let (steps, delay_ms, stamp) = (steps?, delay_ms?, stamp?);
    let executions = counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    // `step` and `steps` are at most SLOW_COUNTER_STEPS_MAX, so the f64 conversions are exact.
    let total = steps as f64;
    let delay = Duration::from_millis(delay_ms);
    // One timer for the whole call, re-armed per step: a new one per step cost its wheel
    // entry's set-up and tear-down on every event of a live stream (issue 43 §2).
    let mut pause = pin!(None::<Duration>.map(monoio::time::sleep));
    for step in 1..=steps {
        if delay_ms > 0 {
            match pause.as_mut().as_pin_mut() {
                Some(sleep) => sleep.reset(monoio::time::Instant::now() + delay),
                None => pause.set(Some(monoio::time::sleep(delay))),
            }
            pause.as_mut().as_pin_mut().expect("invariant: armed just above").await;
        }
        if stamp {
            // Read as late as possible: the latency a client computes from it is the server's
            // delivery (ring, writer, socket), not the tool's own sleep.
            let mut digits = [0u8; DECIMAL_U64_MAX_LEN];
            cx.progress(step as f64, Some(total), Some(decimal(unix_micros(), &mut digits)));
        } else {
            cx.progress(step as f64, Some(total), None);
        }
    }
    Ok(ToolAnswer::Count(executions))
}

/// Microseconds since the Unix epoch on the wall clock (0 if the clock is before it): the one
/// clock a client on the same machine can compare with.
fn unix_micros() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Digits of the largest `u64` (`u64::MAX` is 20 digits long).
const DECIMAL_U64_MAX_LEN: usize = 20;

/// `value` in decimal, written into the end of `digits` (no heap: a stamp per event).
fn decimal(mut value: u64, digits: &mut [u8; DECIMAL_U64_MAX_LEN]) -> &str {
    let mut start = digits.len();
    loop {
        start -= 1;
        // `value % 10` < 10, so the cast is exact.
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[start..]).expect("invariant: ASCII digits")
}

/// Optional boolean argument `name`, `default` when absent; anything but `true`/`false` is
/// -32602.
fn optional_bool(arguments: Args<'_>, name: &str, default: bool) -> ProviderResult<bool> {
    let Some(value) = argument(arguments, name)? else {
        return Ok(default);
    };
    value.as_bool().ok_or_else(|| {
        ProviderError::InvalidParams(format!("argument `{name}` must be true or false"))
    })
}

fn get_counter(
    counter: &'static AtomicU64,
    arguments: Args<'_>,
) -> ProviderResult<ToolAnswer<'static>> {
    expect_arguments_object(arguments)?;
    Ok(ToolAnswer::Count(counter.load(Ordering::Relaxed)))
}

/// Optional integer argument `name` in `0..=max`, `default` when absent. A float with no
/// fractional part (`5.0`) counts as an integer, as JSON Schema's `integer` type says.
fn bounded_integer(arguments: Args<'_>, name: &str, default: u64, max: u64) -> ProviderResult<u64> {
    let Some(value) = argument(arguments, name)? else {
        return Ok(default);
    };
    match non_negative_integer(value) {
        Some(number) if number <= max => Ok(number),
        Some(_) => {
            Err(ProviderError::InvalidParams(format!("argument `{name}` must be at most {max}")))
        }
        None => Err(ProviderError::InvalidParams(format!(
            "argument `{name}` must be a non-negative integer"
        ))),
    }
}

fn non_negative_integer(value: Args<'_>) -> Option<u64> {
    if let Some(number) = value.as_u64() {
        return Some(number);
    }
    let number = value.as_f64()?;
    // 2^64 is exact as an f64; an integral value below it converts to u64 exactly.
    let integral = number.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&number);
    integral.then_some(number as u64)
}

#[cfg(test)]
mod tests {
    use super::super::kit::call_value;
    use super::*;
    use crate::provider::testing::{first_text, parse, run, Call, RecordingSink};
    use serde_json::json;
    use std::time::Instant;

    fn call_slow_counter(
        counter: &'static AtomicU64,
        arguments: Value,
    ) -> (ProviderResult<Value>, Vec<Call>) {
        let sink = Rc::new(RecordingSink::default());
        let result = run(slow_counter(counter, Args::from(&arguments), sink.context()));
        (result.map(ToolAnswer::into_value), sink.calls())
    }

    fn is_invalid_params(result: &ProviderResult<Value>) -> bool {
        matches!(result, Err(ProviderError::InvalidParams(_)))
    }

    #[test]
    fn echo_returns_its_text() {
        // Goal: echo answers one text item with the argument. Method: call it directly.
        let arguments = json!({ "text": "héllo \"x\"" });
        let result = echo(Args::from(&arguments)).expect("ok").into_value();
        assert_eq!(result, json!({ "content": [{ "type": "text", "text": "héllo \"x\"" }] }));
    }

    #[test]
    fn echo_rejects_missing_or_non_string_text() {
        // Goal: every malformed argument shape is -32602, never a panic. Method: table of cases.
        let cases = [
            json!({}),
            json!(null),
            json!({ "text": 5 }),
            json!({ "text": null }),
            json!({ "text": ["a"] }),
            json!(["text"]),
            json!("text"),
        ];
        for arguments in cases {
            let result = echo(Args::from(&arguments)).map(ToolAnswer::into_value);
            assert!(is_invalid_params(&result), "{arguments:?} → {result:?}");
        }
    }

    #[test]
    fn slow_counter_counts_once_and_reports_each_step_in_order() {
        // Goal: one increment per execution, `steps` progress notifications 1..=steps of
        // `steps`, and the result is the counter after the call's own increment. Method: a
        // private counter, two calls in a row.
        static COUNTER: AtomicU64 = AtomicU64::new(41);
        let (result, calls) = call_slow_counter(&COUNTER, json!({ "steps": 4, "delay_ms": 0 }));
        assert_eq!(first_text(&result.expect("ok")), "42");
        assert_eq!(COUNTER.load(Ordering::Relaxed), 42);
        let expected: Vec<Call> = (1..=4)
            .map(|i| Call::Progress { progress: f64::from(i), total: Some(4.0), message: None })
            .collect();
        assert_eq!(calls, expected);

        let (result, _) = call_slow_counter(&COUNTER, json!({ "steps": 1 }));
        assert_eq!(first_text(&result.expect("ok")), "43");
        assert_eq!(COUNTER.load(Ordering::Relaxed), 43);
    }

    #[test]
    fn slow_counter_defaults_and_zero_steps() {
        // Goal: absent arguments mean steps 5 / delay 0; steps 0 still counts the execution
        // but sends nothing. Method: null, {} and {"steps":0}.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for arguments in [json!(null), json!({})] {
            let (result, calls) = call_slow_counter(&COUNTER, arguments);
            assert!(result.is_ok());
            assert_eq!(calls.len() as u64, SLOW_COUNTER_STEPS_DEFAULT);
        }
        let (result, calls) = call_slow_counter(&COUNTER, json!({ "steps": 0 }));
        assert_eq!(first_text(&result.expect("ok")), "3");
        assert!(calls.is_empty());
    }

    #[test]
    fn slow_counter_waits_delay_ms_before_each_step() {
        // Goal: delay_ms is honoured per step. Method: 3 steps of 20 ms take at least 60 ms and
        // the notifications are at least 20 ms apart.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let sink = Rc::new(RecordingSink::default());
        let start = Instant::now();
        let result = run(slow_counter(
            &COUNTER,
            Args::from(&json!({ "steps": 3, "delay_ms": 20 })),
            sink.context(),
        ));
        assert!(result.is_ok());
        assert!(start.elapsed() >= Duration::from_millis(60));
        let times: Vec<Instant> = sink.calls.borrow().iter().map(|(at, _)| *at).collect();
        assert_eq!(times.len(), 3);
        assert!(times.windows(2).all(|w| w[1] - w[0] >= Duration::from_millis(20)));
    }

    #[test]
    fn slow_counter_limits_at_n_and_n_plus_one() {
        // Goal: each cap accepts N and rejects N+1 with -32602 and no increment. Method: steps
        // at 1000/1001 with no delay; delay_ms at 10000/10001 with zero steps (so no sleep).
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let (result, calls) =
            call_slow_counter(&COUNTER, json!({ "steps": SLOW_COUNTER_STEPS_MAX, "delay_ms": 0 }));
        assert_eq!(first_text(&result.expect("ok")), "1");
        assert_eq!(calls.len() as u64, SLOW_COUNTER_STEPS_MAX);
        let (result, calls) =
            call_slow_counter(&COUNTER, json!({ "steps": SLOW_COUNTER_STEPS_MAX + 1 }));
        assert!(is_invalid_params(&result));
        assert!(calls.is_empty());

        let max_delay = json!({ "steps": 0, "delay_ms": SLOW_COUNTER_DELAY_MS_MAX });
        let (result, _) = call_slow_counter(&COUNTER, max_delay);
        assert_eq!(first_text(&result.expect("ok")), "2");
        let over_delay = json!({ "steps": 0, "delay_ms": SLOW_COUNTER_DELAY_MS_MAX + 1 });
        let (result, _) = call_slow_counter(&COUNTER, over_delay);
        assert!(is_invalid_params(&result));
        assert_eq!(COUNTER.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn slow_counter_rejects_non_integers_without_counting() {
        // Goal: negative, fractional, non-numeric and null values are -32602 and leave the
        // counter alone; an integral float is an integer. Method: table over both arguments.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let bad = [
            json!(-1),
            json!(1.5),
            json!("3"),
            json!(null),
            json!(true),
            json!(-0.5),
            json!(1e300),
        ];
        for value in bad {
            for name in ["steps", "delay_ms"] {
                let mut arguments = json!({ "steps": 0, "delay_ms": 0 });
                arguments.as_object_mut().expect("object").insert(name.to_owned(), value.clone());
                let (result, _) = call_slow_counter(&COUNTER, arguments.clone());
                assert!(is_invalid_params(&result), "{arguments:?} → {result:?}");
            }
        }
        let (result, _) = call_slow_counter(&COUNTER, json!([1, 2]));
        assert!(is_invalid_params(&result));
        assert_eq!(COUNTER.load(Ordering::Relaxed), 0);

        let (result, calls) = call_slow_counter(&COUNTER, json!({ "steps": 2.0 }));
        assert_eq!(first_text(&result.expect("ok")), "1");
        assert_eq!(calls.len(), 2);
    }

    #[test]
    fn decimal_writes_every_width_of_u64() {
        // Goal: the stamp's digits are what `to_string` wrote before, at 0, each power of ten
        // and the largest value.
        let mut digits = [0u8; DECIMAL_U64_MAX_LEN];
        for value in [0, 1, 9, 10, 99, 100, 1_733_560_000_123_456, u64::MAX] {
            assert_eq!(decimal(value, &mut digits), value.to_string());
        }
    }

    #[test]
    fn slow_counter_stamp_puts_the_emit_time_in_each_message() {
        // Goal: with `stamp: true` each notification's message is the emit time in µs since
        // the Unix epoch (between the call's start and end); without it there is no message
        // (the default wire output). Method: a private counter, the wall clock around the call.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let before = unix_micros();
        let (result, calls) = call_slow_counter(&COUNTER, json!({ "steps": 3, "stamp": true }));
        let after = unix_micros();
        assert!(result.is_ok());
        assert_eq!(calls.len(), 3);
        let mut last = before;
        for (i, call) in calls.iter().enumerate() {
            let Call::Progress { progress, message: Some(message), .. } = call else {
                panic!("no message in {call:?}");
            };
            assert_eq!(*progress, (i + 1) as f64);
            let at: u64 = message.parse().expect("decimal µs");
            assert!(last <= at && at <= after, "{before} ≤ {at} ≤ {after}");
            last = at;
        }
        let (_, calls) = call_slow_counter(&COUNTER, json!({ "steps": 1, "stamp": false }));
        assert_eq!(calls, vec![Call::Progress { progress: 1.0, total: Some(1.0), message: None }]);
    }

    #[test]
    fn slow_counter_rejects_a_stamp_that_is_not_a_boolean_without_counting() {
        // Goal: `stamp` takes only true/false; anything else is -32602 and no execution.
        // Method: a table of non-booleans.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for value in [json!(1), json!("true"), json!(null), json!([true]), json!({})] {
            let arguments = json!({ "steps": 1, "stamp": value });
            let (result, calls) = call_slow_counter(&COUNTER, arguments.clone());
            assert!(is_invalid_params(&result), "{arguments:?} → {result:?}");
            assert!(calls.is_empty());
        }
        assert_eq!(COUNTER.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn get_counter_reads_without_counting() {
        // Goal: get_counter reports the counter and never changes it. Method: private counter.
        static COUNTER: AtomicU64 = AtomicU64::new(7);
        for _ in 0..2 {
            let result = get_counter(&COUNTER, Args::from(&json!({}))).expect("ok").into_value();
            assert_eq!(first_text(&result), "7");
        }
        assert!(matches!(
            get_counter(&COUNTER, Args::from(&json!(3))),
            Err(ProviderError::InvalidParams(_))
        ));
    }

    #[test]
    fn registered_tools_share_the_global_counter() {
        // Goal: the registered slow_counter and get_counter use EXECUTIONS. Method: through the
        // BuiltinTool trait; other tests may bump EXECUTIONS concurrently, so compare
        // monotonically.
        let tools = tools();
        let by_name = |name: &str| tools.iter().find(|t| t.spec().name == name).expect("tool");
        let cx = Rc::new(RecordingSink::default()).context();
        let read = |cx: CallContext| -> u64 {
            let result =
                run(call_value(by_name("get_counter").as_ref(), Args::from(&json!({})), cx))
                    .expect("ok");
            first_text(&result).parse().expect("decimal")
        };
        let before = read(cx.clone());
        let result = run(call_value(
            by_name("slow_counter").as_ref(),
            Args::from(&json!({ "steps": 1 })),
            cx.clone(),
        ));
        let own: u64 = first_text(&result.expect("ok")).parse().expect("decimal");
        assert!(own > before);
        assert!(read(cx) >= own);
    }

    #[test]
    fn specs_document_the_limits_and_annotations() {
        // Goal: the schema text tells clients the same caps and defaults the code enforces, and
        // only slow_counter is unsafe to repeat. Method: parse each schema.
        let schema = parse(SLOW_COUNTER.input_schema);
        let steps = &schema["properties"]["steps"];
        assert_eq!(steps["maximum"].as_u64(), Some(SLOW_COUNTER_STEPS_MAX));
        assert_eq!(steps["default"].as_u64(), Some(SLOW_COUNTER_STEPS_DEFAULT));
        let delay = &schema["properties"]["delay_ms"];
        assert_eq!(delay["maximum"].as_u64(), Some(SLOW_COUNTER_DELAY_MS_MAX));
        assert_eq!(delay["default"].as_u64(), Some(SLOW_COUNTER_DELAY_MS_DEFAULT));
        assert_eq!(schema["properties"]["stamp"]["default"], json!(SLOW_COUNTER_STAMP_DEFAULT));
        assert_eq!(parse(ECHO.input_schema)["required"], json!(["text"]));
        assert!(ECHO.annotations.safe_to_repeat());
        assert!(GET_COUNTER.annotations.safe_to_repeat());
        assert!(!SLOW_COUNTER.annotations.safe_to_repeat());
    }
}
