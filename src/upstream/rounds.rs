//! A bridged `tools/call` on its way upstream (`forward`): the call's CLIENT span (tracing
//! on), its duration in `tidemark_upstream_call_duration_seconds`, and with a 2026-07-28
//! upstream its rounds of input (`call_rounds`, MRTR): each `InputRequiredResult` asked of the
//! client (`ask_client`) and the upstream's round carried between client rounds, at most
//! `--upstream-input-rounds-max` of them.
//!
//! Called by: the bridge's `call_tool` (`provider`), past the breaker. Never: sends the
//! upstream one round twice.

use serde_json::json;

use super::peer::{self, CallArguments, Params, Peer};
use super::{Bridge, Link};
use crate::config::UpstreamTarget;
use crate::provider::builtin::{JsonText, ToolAnswer};
use crate::provider::{CallContext, ProviderError, ProviderResult, Value};

/// A `tools/call`'s params: `tool` and, unless `null`, `arguments`.
fn call_params(tool: &str, arguments: Value) -> Value {
    let mut params = json!({ "name": tool });
    if !arguments.is_null() {
        params["arguments"] = arguments;
    }
    params
}

/// Where a bridged call keeps its upstream's pending round of input between client rounds
/// (`CallContext::carry`).
const CARRIED_ROUND: &str = "tidemark/upstream-round";

impl Bridge {
    /// The CLIENT span of a `tools/call` of `tool` (its name upstream) under `parent`, with
    /// the MCP attributes of the upstream's side: the transport and, for HTTP, its address.
    fn client_span(&self, parent: &crate::trace::TraceParent, tool: &str) -> crate::trace::Span {
        use crate::trace::{Span, SpanKind};
        let mut span = Span::child(parent, SpanKind::Client, format!("tools/call {tool}"));
        span.set_str("mcp.method.name", "tools/call");
        span.set_str("gen_ai.tool.name", tool);
        span.set_str("gen_ai.operation.name", "execute_tool");
        span.set_str("tidemark.upstream", &self.name);
        match &self.target {
            UpstreamTarget::Stdio(_) => span.set_str("network.transport", "pipe"),
            UpstreamTarget::Http(url) => {
                span.set_str("network.transport", "tcp");
                span.set_str("url.full", url);
            }
        }
        span
    }

    /// A `tools/call` of `tool` (its name upstream) on `link`'s upstream, connecting first if
    /// it has no live connection. A legacy upstream's result is its JSON text (`ToolAnswer::
    /// Json`: the client gets the bytes the upstream wrote, with no value built, parsed,
    /// rendered and dropped per call); a 2026-07-28 upstream's is read for its rounds.
    pub(super) async fn forward(
        &self,
        link: &Link,
        tool: &str,
        arguments: CallArguments,
        cx: CallContext,
    ) -> ProviderResult<ToolAnswer<'static>> {
        let peer = self.peer(link).await?;
        // Tracing on: the call's CLIENT span, a child of the request's, whose context the
        // upstream is sent (`traceparent` header, `params._meta.traceparent`).
        let span = cx.trace().map(|parent| self.client_span(&parent, tool));
        let cx = match &span {
            Some(span) => cx.with_trace(Some(span.context())),
            None => cx,
        };
        let started = std::time::Instant::now();
        // Only a 2026-07-28 upstream answers with rounds of input (a legacy one asks its
        // questions as requests during the call): the others' calls go out once, as they are.
        let answer = if self.speaks_modern() {
            let params = call_params(tool, arguments.into_value());
            self.call_rounds(&peer, params, &cx).await.map(ToolAnswer::Value)
        } else {
            let text;
            let params = match arguments {
                CallArguments::Text(arguments) => {
                    text = arguments;
                    Params::Call { tool, arguments: text.as_deref() }
                }
                CallArguments::Value(value) => Params::Value(call_params(tool, value)),
            };
            let timeout = self.settings.timeout;
            let text = peer.request_text("tools/call", params, Some(cx), timeout).await;
            text.map(|text| ToolAnswer::Json(JsonText(text)))
        };
        if let Some((metrics, index)) = &self.calls {
            metrics.hist.upstream_call(*index, tool, started);
        }
        if let Some(mut span) = span {
            if let Err(e) = &answer {
                let error_type = match e {
                    ProviderError::Rpc { code, .. } => code.to_string(),
                    ProviderError::Cancelled => "cancelled".to_owned(),
                    _ => "tool_error".to_owned(),
                };
                span.fail(&error_type, &e.to_string());
            }
            span.finish();
        }
        answer
    }

    /// Whether this core speaks 2026-07-28 to the upstream (its probe found it modern).
    fn speaks_modern(&self) -> bool {
        matches!(*self.discovered.borrow(), Some(Some(_)))
    }

    /// A `tools/call` of the upstream through its rounds of input (2026-07-28 MRTR): while it
    /// answers with an `InputRequiredResult`, each of its `inputRequests` is asked of the
    /// client (`CallContext::input`, under the upstream's key: on a legacy session as a
    /// server→client request on the call's stream, for a 2026-07-28 client as an entry of
    /// tidemark's own `InputRequiredResult`) and the call is sent again with the
    /// `inputResponses` and the upstream's `requestState`. When the client's answers come in
    /// a later client request (2026-07-28 in front), the upstream's round is carried in
    /// tidemark's sealed state (`CallContext::carry`), so the upstream sees each round once.
    /// At most `--upstream-input-rounds-max` rounds.
    async fn call_rounds(
        &self,
        peer: &Peer,
        params: Value,
        cx: &CallContext,
    ) -> ProviderResult<Value> {
        let mut pending = cx.carried(CARRIED_ROUND);
        for _ in 0..=self.settings.input_rounds_max {
            let mut round = params.clone();
            if let Some(asked) = pending.take() {
                // Carried before asking: an input the client has not given yet ends this
                // client round, and the next one must find the upstream's state.
                cx.carry(CARRIED_ROUND, asked.clone());
                round["inputResponses"] = self.ask_client(&asked, cx).await?;
                if let Some(state) = asked.get("requestState").filter(|s| !s.is_null()) {
                    round["requestState"] = state.clone();
                }
            }
            let timeout = self.settings.timeout;
            let answer = peer.request("tools/call", round, Some(cx.clone()), timeout).await?;
            if answer.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(answer);
            }
            pending = Some(json!({
                "inputRequests": answer.get("inputRequests").cloned().unwrap_or_default(),
                "requestState": answer.get("requestState").cloned().unwrap_or_default(),
            }));
        }
        let max = self.settings.input_rounds_max;
        Err(self.fault(&format!(
            "it asked for input more than {max} times in one call (--upstream-input-rounds-max)"
        )))
    }

    /// The client's answers to one `InputRequiredResult`'s `inputRequests`, by key. Every
    /// request is made before any is awaited, so a 2026-07-28 client is asked them all in one
    /// round.
    async fn ask_client(&self, asked: &Value, cx: &CallContext) -> ProviderResult<Value> {
        let Some(Value::Object(requests)) = asked.get("inputRequests") else {
            return Err(self.fault("its InputRequiredResult has no inputRequests object"));
        };
        let mut waiting = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str);
            let Some(method) = method.filter(|m| peer::is_plain_method(m)) else {
                return Err(self.fault(&format!("its input request {key:?} names no method")));
            };
            let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            waiting.push((key.clone(), cx.input(key, method, params)));
        }
        let mut answers = serde_json::Map::with_capacity(waiting.len());
        for (key, answer) in waiting {
            answers.insert(key, answer.await?);
        }
        Ok(Value::Object(answers))
    }
}
