//! The built-in tool sets as providers: `demo` (echo, slow_counter, get_counter) and
//! `conformance` (every fixture the official MCP conformance suite expects).
//!
//! Owns: `BuiltinProvider` (a fixed list of tools with `'static` specs, plus an optional
//! catalog of resources, prompts and completions), the `ToolSpec` form the sets are written in,
//! and the small argument helpers they share. Called by: `server` (one provider per enabled set
//! and core). Never: keeps per-session state; the demo counter is process-wide on purpose.

pub(crate) mod conformance;
mod conformance_modern;
mod conformance_tasks;
pub(crate) mod demo;
mod kit;

use std::rc::Rc;

use crate::config::BuiltinSet;
use crate::fasthash::FastMap;
use crate::provider::{
    CallContext, LocalBoxFuture, Provider, ProviderError, ProviderResult, SessionRef, TaskSupport,
    ToolArguments, ToolInfo, Value,
};
use kit::{Args, BuiltinTool, Catalog, ToolSpec};
pub(crate) use kit::{BuiltinCall, ContextSource, JsonText, RunningWork, ToolAnswer};

/// One built-in set as a provider.
pub(crate) struct BuiltinProvider {
    name: &'static str,
    tools: Vec<Rc<dyn BuiltinTool>>,
    /// Every request's tool lookup (twice on a `tools/call`): `FastMap`, since SipHash cost ~160
    /// instructions a lookup and the keys are this set's own names (fasthash.rs says why a
    /// peer's name cannot hurt it).
    by_name: FastMap<&'static str, usize>,
    catalog: Option<Box<dyn Catalog>>,
}

impl BuiltinProvider {
    /// The provider of `set`.
    pub(crate) fn new(set: BuiltinSet) -> BuiltinProvider {
        let (name, tools, catalog) = match set {
            BuiltinSet::Demo => ("demo", demo::tools(), None),
            BuiltinSet::Conformance => {
                ("conformance", conformance::tools(), Some(conformance::catalog()))
            }
        };
        let by_name = tools.iter().enumerate().map(|(i, t)| (t.spec().name, i)).collect();
        BuiltinProvider { name, tools, by_name, catalog }
    }
}

impl BuiltinProvider {
    /// Calls tool `name` for a request path that writes the answer itself (`ToolAnswer::
    /// push_json`): an instant tool answers here without a future or a result value (issue 40
    /// §1). `None`: not a tool of this set.
    pub(crate) fn call<'a>(
        &self,
        name: &str,
        arguments: ToolArguments<'a>,
        cx: ContextSource<'_>,
    ) -> Option<BuiltinCall<'a>> {
        let tool = self.by_name.get(name).and_then(|&i| self.tools.get(i))?;
        Some(tool.call(Args::of_request(arguments), cx))
    }
}

impl BuiltinProvider {
    /// Starts tool `name` with its arguments read in place (`kit::Args`), without the
    /// `serde_json` copy `Provider::call_tool` takes; `Err(cx)` for a name this set lacks
    /// (`call_tool` answers it).
    pub(crate) fn call_in_place(
        &self,
        name: &str,
        arguments: ToolArguments<'_>,
        cx: CallContext,
    ) -> Result<LocalBoxFuture<'static, ProviderResult<Value>>, CallContext> {
        match self.by_name.get(name).and_then(|&i| self.tools.get(i)) {
            Some(tool) => Ok(kit::call_value(tool.as_ref(), Args::of_request(arguments), cx)),
            None => Err(cx),
        }
    }

    /// Tool `name`'s answer when it is an instant tool (`kit::instant_tool`), borrowed from
    /// `arguments`: no context, future or result value is made. `None`: not an instant tool
    /// of this set (call it through the provider API).
    pub(crate) fn call_now<'a>(
        &self,
        name: &str,
        arguments: ToolArguments<'a>,
    ) -> Option<ProviderResult<ToolAnswer<'a>>> {
        let tool = self.by_name.get(name).and_then(|&i| self.tools.get(i))?;
        tool.call_now(Args::of_request(arguments))
    }
}

/// The built-in set behind `provider`, if it is one: the request paths' way past the provider
/// API's owned result (`BuiltinProvider::call`).
pub(crate) fn as_builtin(provider: &dyn Provider) -> Option<&BuiltinProvider> {
    provider.builtin()?.downcast_ref()
}

impl Provider for BuiltinProvider {
    fn name(&self) -> &str {
        self.name
    }

    fn builtin(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
        let listed = self.tools.iter().map(|t| tool_info(t.spec())).collect();
        Box::pin(std::future::ready(Ok(listed)))
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
        match self.by_name.get(name).and_then(|&i| self.tools.get(i)) {
            Some(tool) => kit::call_value(tool.as_ref(), Args::Public(&arguments), cx),
            None => Box::pin(std::future::ready(Err(ProviderError::NotFound(name.to_owned())))),
        }
    }

    fn task_support(&self, name: &str) -> TaskSupport {
        let tool = self.by_name.get(name).and_then(|&i| self.tools.get(i));
        tool.map_or(TaskSupport::Forbidden, |t| t.task_support())
    }

    fn list_resources(
        &self,
        _session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let listed = self.catalog.as_ref().map(|c| c.resources()).unwrap_or_default();
        Box::pin(std::future::ready(Ok(listed)))
    }

    fn list_resource_templates(
        &self,
        _session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let listed = self.catalog.as_ref().map(|c| c.resource_templates()).unwrap_or_default();
        Box::pin(std::future::ready(Ok(listed)))
    }

    fn read_resource<'a>(
        &'a self,
        _session: SessionRef,
        uri: &'a str,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        let read = self.catalog.as_ref().and_then(|c| c.read_resource(uri));
        Box::pin(std::future::ready(Ok(read)))
    }

    fn list_prompts(&self, _session: SessionRef) -> LocalBoxFuture<'_, ProviderResult<Vec<Value>>> {
        let listed = self.catalog.as_ref().map(|c| c.prompts()).unwrap_or_default();
        Box::pin(std::future::ready(Ok(listed)))
    }

    fn get_prompt<'a>(
        &'a self,
        _session: SessionRef,
        name: &'a str,
        arguments: Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        let got = match self.catalog.as_ref().map(|c| c.get_prompt(name, &arguments)) {
            None | Some(Err(ProviderError::NotFound(_))) => Ok(None),
            Some(found) => found.map(Some),
        };
        Box::pin(std::future::ready(got))
    }

    fn get_prompt_with_context<'a>(
        &'a self,
        session: SessionRef,
        name: &'a str,
        arguments: Value,
        cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Value>>> {
        match self.catalog.as_ref().and_then(|c| c.get_prompt_with_context(name, &cx)) {
            Some(work) => Box::pin(async move { work.await.map(Some) }),
            None => self.get_prompt(session, name, arguments),
        }
    }

    fn complete<'a>(
        &'a self,
        _session: SessionRef,
        reference: &'a Value,
        argument: &'a Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Vec<String>>>> {
        let values = self.catalog.as_ref().and_then(|c| c.complete(reference, argument));
        Box::pin(std::future::ready(Ok(values)))
    }
}

/// Listed in place of a built-in schema that does not parse as a JSON object. Never used in
/// practice: a unit test checks that every built-in schema parses.
const INPUT_SCHEMA_FALLBACK: &str = r#"{"type":"object"}"#;

/// A spec as the provider API lists it.
fn tool_info(spec: &ToolSpec) -> ToolInfo {
    let schema = serde_json::from_str::<Value>(spec.input_schema)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| serde_json::from_str(INPUT_SCHEMA_FALLBACK).unwrap_or_default());
    ToolInfo {
        name: spec.name.to_owned(),
        description: Some(spec.description.to_owned()),
        input_schema: schema,
        output_schema: None,
        annotations: spec.annotations.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::kit::hints;
    use super::*;
    use crate::provider::testing::{parse, run};
    use serde_json::json;

    fn listed(set: BuiltinSet) -> Vec<ToolInfo> {
        run(BuiltinProvider::new(set).list_tools()).expect("built-in lists")
    }

    /// `^[A-Za-z0-9_.-]{1,128}$` (conformance alpha `tools-name-format`).
    fn valid_tool_name(name: &str) -> bool {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
        (1..=128).contains(&name.len()) && name.bytes().all(allowed)
    }

    #[test]
    fn every_builtin_tool_lists_a_valid_name_description_and_parsed_schema() {
        // Goal: tools-list (name, description, inputSchema), tools-name-format, and every
        // schema constant parses (so the fallback is never listed). Method: list both sets.
        let provider = BuiltinProvider::new(BuiltinSet::Conformance);
        let mut count = 0;
        for set in [BuiltinSet::Demo, BuiltinSet::Conformance] {
            for tool in listed(set) {
                count += 1;
                assert!(valid_tool_name(&tool.name), "{}", tool.name);
                assert!(tool.description.as_deref().is_some_and(|d| !d.is_empty()));
                assert_eq!(tool.input_schema["type"], json!("object"), "{}", tool.name);
                assert!(tool.input_schema["properties"].is_object(), "{}", tool.name);
                let spec = match set {
                    BuiltinSet::Demo => demo::tools(),
                    BuiltinSet::Conformance => conformance::tools(),
                };
                let spec =
                    spec.iter().find(|t| t.spec().name == tool.name).map(|t| t.spec().clone());
                let text = spec.expect("listed tool has a spec").input_schema;
                assert_eq!(tool.input_schema, parse(text), "{}: schema as written", tool.name);
            }
        }
        assert_eq!(count, 39);
        let schema = &run(provider.list_tools()).expect("lists")[13].input_schema;
        assert_eq!(schema["$schema"], json!("https://json-schema.org/draft/2020-12/schema"));
    }

    #[test]
    fn hints_list_both_flags_or_neither() {
        // Goal: the built-in annotations keep their wire form. Method: all four pairs.
        assert_eq!(hints(false, false).to_json(), None);
        let both = |r, i| Some(json!({ "readOnlyHint": r, "idempotentHint": i }));
        assert_eq!(hints(true, false).to_json(), both(true, false));
        assert_eq!(hints(false, true).to_json(), both(false, true));
        assert_eq!(hints(true, true).to_json(), both(true, true));
    }

    #[test]
    fn a_builtin_provider_calls_its_tools_and_refuses_others() {
        // Goal: call_tool dispatches by name. Method: echo, then an unknown name.
        let provider = BuiltinProvider::new(BuiltinSet::Demo);
        let result =
            run(provider.call_tool("echo", json!({ "text": "x" }), CallContext::detached()));
        assert_eq!(result, Ok(json!({ "content": [{ "type": "text", "text": "x" }] })));
        let missing =
            run(provider.call_tool("test_simple_text", json!({}), CallContext::detached()));
        assert_eq!(missing, Err(ProviderError::NotFound("test_simple_text".into())));
    }

    #[test]
    fn the_demo_set_has_no_catalog_and_conformance_has_one() {
        // Goal: catalogs flow through the provider methods. Method: list and look up.
        let demo = BuiltinProvider::new(BuiltinSet::Demo);
        assert_eq!(run(demo.list_resources(SessionRef::NONE)), Ok(vec![]));
        assert_eq!(run(demo.read_resource(SessionRef::NONE, "test://static-text")), Ok(None));
        assert_eq!(
            run(demo.get_prompt(SessionRef::NONE, "test_simple_prompt", Value::Null)),
            Ok(None)
        );
        let conformance = BuiltinProvider::new(BuiltinSet::Conformance);
        assert_eq!(run(conformance.list_resources(SessionRef::NONE)).map(|r| r.len()), Ok(3));
        assert_eq!(
            run(conformance.list_resource_templates(SessionRef::NONE)).map(|r| r.len()),
            Ok(1)
        );
        assert_eq!(run(conformance.list_prompts(SessionRef::NONE)).map(|r| r.len()), Ok(5));
        let read = run(conformance.read_resource(SessionRef::NONE, "test://template/123/data"))
            .expect("ok");
        assert!(read.expect("ours")["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("123")));
        assert_eq!(run(conformance.get_prompt(SessionRef::NONE, "nope", json!({}))), Ok(None));
        let invalid =
            run(conformance.get_prompt(SessionRef::NONE, "test_prompt_with_arguments", json!({})));
        assert!(matches!(invalid, Err(ProviderError::InvalidParams(_))));
    }
}
