//! Goal: the registry routes tools by name across providers, caches `tools/list`, refreshes on
//! `tools_changed`, caps completions, and declares only capabilities some provider backs.
//! Method: registries over the built-in providers and small synthetic ones, no I/O; answers are
//! whole JSON-RPC responses, parsed back with serde_json.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde_json::json;

use super::*;
use crate::config::BuiltinSet;
use crate::provider::builtin::{conformance, demo, BuiltinProvider};
use crate::provider::testing::{parse, run};
use crate::provider::{Annotations, CallContext, LocalBoxFuture, ProviderResult, SessionRef};

/// The id every request of these tests carries.
const ID: &str = "7";

fn build(providers: Vec<Rc<dyn Provider>>) -> Registry {
    run(Registry::build(providers))
}

/// A registry over one built-in provider per set, in order (repeats included).
fn builtin(sets: &[BuiltinSet]) -> Registry {
    let providers =
        sets.iter().map(|&set| Rc::new(BuiltinProvider::new(set)) as Rc<dyn Provider>).collect();
    build(providers)
}

fn full() -> Registry {
    builtin(&[BuiltinSet::Demo, BuiltinSet::Conformance])
}

/// The response bytes `answer` writes for `method` with `params` (JSON text, decoded as the
/// request decoder does).
fn respond_text(registry: &Registry, method: &str, params: &str) -> Vec<u8> {
    let params: WireValue<'_> = crate::wire::jsonrpc::leaked_value(params);
    let mut out = Vec::new();
    run(registry.answer(SessionRef::NONE, None, &RawId::new(ID), method, &params, &mut out));
    out
}

/// The whole JSON-RPC response `answer` writes for `method` with `params`, parsed.
fn respond(registry: &Registry, method: &str, params: &str) -> Value {
    let out = respond_text(registry, method, params);
    let response: Value = serde_json::from_slice(&out).expect("the response is JSON");
    assert_eq!(response["jsonrpc"], json!("2.0"), "{response}");
    assert_eq!(response["id"], json!(7), "{response}");
    response
}

/// The `result` of a successful answer.
fn result(registry: &Registry, method: &str, params: &str) -> Value {
    let response = respond(registry, method, params);
    assert!(response.get("error").is_none(), "{method} {params}: {response}");
    response["result"].clone()
}

/// The `error` of a failed answer (with no `result` beside it).
fn error(registry: &Registry, method: &str, params: &str) -> Value {
    let response = respond(registry, method, params);
    assert!(response.get("result").is_none(), "{method} {params}: {response}");
    response["error"].clone()
}

/// The names `tools/list` answers, in order.
fn listed_names(registry: &Registry) -> Vec<String> {
    let listed = result(registry, "tools/list", "{}");
    let items = listed["tools"].as_array().expect("tools array");
    items.iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

/// `^[A-Za-z0-9_.-]{1,128}$` (conformance alpha `tools-name-format`).
fn valid_tool_name(name: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    (1..=128).contains(&name.len()) && name.bytes().all(allowed)
}

/// A provider whose tool list the test edits, that counts `list_tools` calls, keeps the
/// `Changes` it is attached with, and may fail its listing or offer `completions` values for
/// any reference.
#[derive(Default)]
struct Synthetic {
    name: &'static str,
    tools: RefCell<Vec<ToolInfo>>,
    fail_listing: bool,
    completions: Option<usize>,
    changes: RefCell<Option<Changes>>,
    list_calls: Cell<usize>,
}

impl Synthetic {
    fn new(name: &'static str, tools: &[&str]) -> Synthetic {
        let synthetic = Synthetic { name, ..Synthetic::default() };
        synthetic.set_tools(tools);
        synthetic
    }

    /// Replaces the list (without announcing it).
    fn set_tools(&self, names: &[&str]) {
        *self.tools.borrow_mut() = names.iter().map(|&n| tool(n, Annotations::default())).collect();
    }

    /// What a provider does when its list changed.
    fn announce(&self) {
        self.changes.borrow().as_ref().expect("attached").tools_changed();
    }
}

/// A tool whose description names it, with an empty object schema.
fn tool(name: &str, annotations: Annotations) -> ToolInfo {
    let schema = json!({ "type": "object", "properties": {} });
    ToolInfo::new(name, format!("the {name} tool"), schema).with_annotations(annotations)
}

impl Provider for Synthetic {
    fn name(&self) -> &str {
        self.name
    }

    fn attach(&self, changes: Changes) {
        *self.changes.borrow_mut() = Some(changes);
    }

    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
        self.list_calls.set(self.list_calls.get() + 1);
        let listed = if self.fail_listing {
            Err(ProviderError::Internal("backend down".into()))
        } else {
            Ok(self.tools.borrow().clone())
        };
        Box::pin(std::future::ready(listed))
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        _arguments: Value,
        _cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
        let text = format!("{} ran {name}", self.name);
        Box::pin(std::future::ready(Ok(json!({ "content": [{ "type": "text", "text": text }] }))))
    }

    fn complete<'a>(
        &'a self,
        _session: SessionRef,
        _reference: &'a Value,
        _argument: &'a Value,
    ) -> LocalBoxFuture<'a, ProviderResult<Option<Vec<String>>>> {
        let values = self.completions.map(|count| (0..count).map(|i| i.to_string()).collect());
        Box::pin(std::future::ready(Ok(values)))
    }
}

#[test]
fn tools_list_is_valid_json_with_every_required_field() {
    // Goal: tools-list (name, description, inputSchema) and tools-name-format, every schema
    // listed as written (keys in their written order) and the annotations as set. Method:
    // parse the cached answer and compare each item with the built-in specs.
    let registry = full();
    let listed = result(&registry, "tools/list", "{}");
    let items = listed["tools"].as_array().expect("tools array");
    // demo's 4 and conformance's 35, whose `greet` (a tasks fixture) is demo's name: the first
    // provider's is listed.
    assert_eq!(items.len(), 38);
    let specs: Vec<_> =
        demo::tools().into_iter().chain(conformance::tools()).map(|t| t.spec().clone()).collect();
    for item in items {
        let name = item["name"].as_str().expect("name");
        assert!(valid_tool_name(name), "{name}");
        assert!(item["description"].as_str().is_some_and(|d| !d.is_empty()), "{name}");
        assert!(registry.tool(SessionRef::NONE, name).is_some(), "{name}: a listed tool is routed");
        let spec = specs.iter().find(|s| s.name == name).expect("listed tool has a spec");
        assert_eq!(item["description"], json!(spec.description), "{name}");
        let written = parse(spec.input_schema);
        assert_eq!(item["inputSchema"], written, "{name}: schema as written");
        assert_eq!(
            serde_json::to_string(&item["inputSchema"]).expect("encodes"),
            serde_json::to_string(&written).expect("encodes"),
            "{name}: schema keys in written order"
        );
        assert_eq!(item["inputSchema"]["type"], json!("object"), "{name}");
        assert!(item["inputSchema"]["properties"].is_object(), "{name}");
        assert_eq!(item.get("annotations").cloned(), spec.annotations.to_json(), "{name}");
    }
    let text = String::from_utf8(respond_text(&registry, "tools/list", "{}")).expect("UTF-8");
    assert!(text.contains(r#""$schema":"https://json-schema.org/draft/2020-12/schema""#));
}

#[test]
fn registry_dedups_repeated_providers_and_finds_tools_by_name() {
    // Goal: a repeated set adds nothing; unknown names are None; an empty registry answers
    // empty lists. Method: compare answers of registries over the built-in providers.
    let once = builtin(&[BuiltinSet::Demo]);
    let twice = builtin(&[BuiltinSet::Demo, BuiltinSet::Demo]);
    let list = |r: &Registry| result(r, "tools/list", "{}");
    assert_eq!(list(&once), list(&twice));
    assert_eq!(listed_names(&twice), ["echo", "slow_counter", "get_counter", "greet"]);
    assert!(twice.tool(SessionRef::NONE, "echo").is_some());
    assert!(twice.tool(SessionRef::NONE, "test_simple_text").is_none());
    assert!(twice.tool(SessionRef::NONE, "").is_none());
    assert!(full().tool(SessionRef::NONE, "ECHO").is_none());
    let empty = builtin(&[]);
    assert_eq!(list(&empty), json!({ "tools": [] }));
    assert_eq!(result(&empty, "resources/list", "{}"), json!({ "resources": [] }));
    assert_eq!(
        result(&empty, "resources/templates/list", "{}"),
        json!({ "resourceTemplates": [] })
    );
    assert_eq!(result(&empty, "prompts/list", "{}"), json!({ "prompts": [] }));
}

#[test]
fn on_a_duplicate_tool_name_the_first_provider_wins() {
    // Goal: provider order decides a clash, in the list and in the route. Method: two
    // synthetic providers that both list `shared`.
    let a: Rc<dyn Provider> = Rc::new(Synthetic::new("a", &["shared", "only_a"]));
    let b: Rc<dyn Provider> = Rc::new(Synthetic::new("b", &["shared", "only_b"]));
    let registry = build(vec![a, b]);
    assert_eq!(listed_names(&registry), ["shared", "only_a", "only_b"]);
    let route =
        |name: &str| registry.tool(SessionRef::NONE, name).expect(name).provider.name().to_owned();
    assert_eq!(route("shared"), "a");
    assert_eq!(route("only_a"), "a");
    assert_eq!(route("only_b"), "b");
}

#[test]
fn registry_runs_a_tool_through_its_route() {
    // Goal: Registry::tool hands out a callable provider. Method: echo through the route.
    let registry = full();
    let route = registry.tool(SessionRef::NONE, "echo").expect("echo");
    let result =
        run(route.provider.call_tool("echo", json!({ "text": "x" }), CallContext::detached()));
    assert_eq!(result, Ok(json!({ "content": [{ "type": "text", "text": "x" }] })));
}

#[test]
fn capabilities_follow_the_providers() {
    // Goal: capabilities never promise an empty feature, and the conformance set gets what
    // the suite requires. Method: compare the whole object for demo only and demo+conformance.
    let base = json!({ "tools": { "listChanged": true }, "logging": {}, "completions": {} });
    assert_eq!(*builtin(&[BuiltinSet::Demo]).capabilities(), base);
    assert_eq!(*builtin(&[]).capabilities(), base);
    assert_eq!(
        *full().capabilities(),
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
fn resources_prompts_and_lookups_go_through_the_providers() {
    // Goal: the list/read/get answers and their NotFound and InvalidParams paths (-32602).
    // Method: demo+conformance, then demo only, through `answer`.
    let registry = full();
    let resources = result(&registry, "resources/list", "{}");
    assert_eq!(resources["resources"].as_array().map(Vec::len), Some(3));
    let templates = result(&registry, "resources/templates/list", "{}");
    assert_eq!(templates["resourceTemplates"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        json!("test://template/{id}/data")
    );
    let prompts = result(&registry, "prompts/list", "{}");
    assert_eq!(prompts["prompts"].as_array().map(Vec::len), Some(5));

    let read = result(&registry, "resources/read", r#"{"uri":"test://template/123/data"}"#);
    assert!(read["contents"][0]["text"].as_str().is_some_and(|t| t.contains("123")), "{read}");
    let missing = "test://nonexistent-resource-for-conformance-testing";
    let not_found = error(&registry, "resources/read", &format!(r#"{{"uri":"{missing}"}}"#));
    assert_eq!(not_found["code"], json!(-32602));
    assert!(not_found["message"].as_str().is_some_and(|m| m.contains(missing)), "{not_found}");

    let prompt = result(&registry, "prompts/get", r#"{"name":"test_simple_prompt"}"#);
    assert!(prompt["messages"].as_array().is_some_and(|m| !m.is_empty()), "{prompt}");
    let with_arguments = result(
        &registry,
        "prompts/get",
        r#"{"name":"test_prompt_with_arguments","arguments":{"arg1":"p","arg2":"q"}}"#,
    );
    let text = with_arguments["messages"][0]["content"]["text"].as_str().expect("text");
    assert!(text.contains("arg1='p'") && text.contains("arg2='q'"), "{text}");
    let unknown = error(&registry, "prompts/get", r#"{"name":"nope","arguments":{}}"#);
    assert_eq!(unknown["code"], json!(-32602));
    assert!(unknown["message"].as_str().is_some_and(|m| m.contains("nope")), "{unknown}");
    let invalid =
        error(&registry, "prompts/get", r#"{"name":"test_prompt_with_arguments","arguments":{}}"#);
    assert_eq!(invalid["code"], json!(-32602));
    assert_eq!(error(&registry, "prompts/get", "{}")["code"], json!(-32602));

    let demo_only = builtin(&[BuiltinSet::Demo]);
    let not_ours = error(&demo_only, "resources/read", r#"{"uri":"test://static-text"}"#);
    assert_eq!(not_ours["code"], json!(-32602));
    let no_prompt = error(&demo_only, "prompts/get", r#"{"name":"test_simple_prompt"}"#);
    assert_eq!(no_prompt["code"], json!(-32602));
}

#[test]
fn resources_read_without_a_string_uri_is_invalid_params() {
    // Goal: a malformed read is the peer's fault (-32602), not a lookup of nothing. Method:
    // params without uri, with a non-string uri, and not an object at all.
    let registry = full();
    for params in
        ["{}", r#"{"uri":3}"#, r#"{"uri":null}"#, r#"{"uri":["test://static-text"]}"#, "null", "[]"]
    {
        let e = error(&registry, "resources/read", params);
        assert_eq!(e["code"], json!(-32602), "{params}: {e}");
    }
}

#[test]
fn an_unknown_method_is_method_not_found() {
    // Goal: -32601 for methods nobody answers here. Method: a few names, with any params.
    let registry = full();
    for method in ["", "nope", "tools/lists", "resources/READ", "notifications/initialized"] {
        let e = error(&registry, method, "{}");
        assert_eq!(e["code"], json!(-32601), "{method:?}: {e}");
    }
}

#[test]
fn methods_without_a_result_of_their_own_answer_an_empty_object() {
    // Goal: ping and (un)subscribe succeed with `{}` (a uri a provider lists, though it keeps
    // no subscriptions, is accepted, in any spelling of it); a uri no provider lists is refused
    // as not found, one without a canonical form as invalid, and so is one without its uri
    // (issue 38: a subscription to a forbidden uri answered 200). Method: answer each.
    let registry = full();
    assert_eq!(result(&registry, "ping", "{}"), json!({}));
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        for uri in ["test://static-text", "TEST://static-text", "Test://Static-Text"] {
            let params = format!(r#"{{"uri":"{uri}"}}"#);
            assert_eq!(result(&registry, method, &params), json!({}), "{method} {uri}");
        }
        let unknown = error(&registry, method, r#"{"uri":"test://nope"}"#);
        assert_eq!(unknown["code"], json!(-32602), "{method}");
        assert!(unknown["message"].as_str().is_some_and(|m| m.contains("not found")), "{unknown}");
        let bad = error(&registry, method, r#"{"uri":"test://a%2"}"#);
        assert!(bad["message"].as_str().is_some_and(|m| m.contains("percent-escape")), "{bad}");
        assert_eq!(error(&registry, method, "{}")["code"], json!(-32602), "{method}");
    }
}

#[test]
fn resource_uris_without_a_canonical_form_reach_no_provider() {
    // Goal: `resources/read` of a uri that has no canonical form is -32602 naming why, at the
    // `--resource-uri-bytes-max` limit's N+1 too; at N it is looked up. Method: the conformance
    // catalog, with the limit set to the length of one of its uris.
    let uri = "test://static-text";
    let registry = full().with_uri_bytes_max(uri.len());
    assert!(result(&registry, "resources/read", &format!(r#"{{"uri":"{uri}"}}"#)).is_object());
    for (params, why) in [
        (r#"{"uri":"test://static-textx"}"#, "longer than 18 bytes"),
        (r#"{"uri":"/static-text"}"#, "no scheme"),
        (r#"{"uri":"test://a%00"}"#, "control character"),
        (r#"{"uri":"test://h/a%2Fb"}"#, "encoded `/`"),
    ] {
        let e = error(&registry, "resources/read", params);
        assert_eq!(e["code"], json!(-32602), "{params}: {e}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(why)), "{params}: {e}");
    }
}

#[test]
fn complete_wraps_provider_values_and_tolerates_junk() {
    // Goal: completion-complete's shape, and unknown or malformed params → empty values.
    // Method: the conformance prompt's argument, then a table of junk params.
    let registry = full();
    let params = r#"{
        "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
        "argument": { "name": "arg1", "value": "par" }
    }"#;
    let expected = json!({
        "completion": { "values": ["paris", "park", "party"], "total": 3, "hasMore": false }
    });
    assert_eq!(result(&registry, "completion/complete", params), expected);
    let empty = json!({ "completion": { "values": [], "total": 0, "hasMore": false } });
    let junk = [
        "null",
        "{}",
        "[1]",
        r#"{ "ref": "x", "argument": 3 }"#,
        r#"{ "ref": { "type": "ref/prompt", "name": "nope" }, "argument": { "name": "a" } }"#,
    ];
    for params in junk {
        assert_eq!(result(&registry, "completion/complete", params), empty, "{params}");
    }
}

#[test]
fn complete_caps_values_at_n_and_n_plus_one() {
    // Goal: MCP's 100-value cap: 100 values pass whole, 101 are cut to the first 100 with the
    // true total and hasMore. Method: a registry over a synthetic provider.
    assert_eq!(COMPLETION_VALUES_MAX, 100);
    for (count, has_more) in [(100, false), (101, true)] {
        let provider = Synthetic { completions: Some(count), ..Synthetic::new("many", &[]) };
        let registry = build(vec![Rc::new(provider)]);
        let answer = result(&registry, "completion/complete", "{}");
        let completion = &answer["completion"];
        let first_100: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        assert_eq!(completion["values"], json!(first_100), "{count}");
        assert_eq!(completion["total"], json!(count), "{count}");
        assert_eq!(completion["hasMore"], json!(has_more), "{count}");
    }
}

#[test]
fn tools_changed_relists_and_nothing_else_does() {
    // Goal: the tool table is a cache: it changes after `Changes::tools_changed` (through
    // refresh_if_stale, or tools/list on its own), and nothing re-lists without the flag.
    // Method: a synthetic provider whose list the test edits; count its list_tools calls.
    let provider = Rc::new(Synthetic::new("live", &["before"]));
    let registry = build(vec![provider.clone(), Rc::new(BuiltinProvider::new(BuiltinSet::Demo))]);
    assert_eq!(provider.list_calls.get(), 1);
    assert!(registry.tool(SessionRef::NONE, "before").is_some());

    // Edited but not announced: every path answers from the cache.
    provider.set_tools(&["after"]);
    run(registry.refresh_if_stale(SessionRef::NONE));
    assert_eq!(listed_names(&registry), ["before", "echo", "slow_counter", "get_counter", "greet"]);
    assert!(registry.tool(SessionRef::NONE, "after").is_none());
    assert_eq!(provider.list_calls.get(), 1);

    // Announced: refresh_if_stale lists again, once.
    provider.announce();
    run(registry.refresh_if_stale(SessionRef::NONE));
    assert_eq!(provider.list_calls.get(), 2);
    assert!(registry.tool(SessionRef::NONE, "before").is_none());
    assert_eq!(registry.tool(SessionRef::NONE, "after").expect("after").provider.name(), "live");
    assert_eq!(listed_names(&registry), ["after", "echo", "slow_counter", "get_counter", "greet"]);
    run(registry.refresh_if_stale(SessionRef::NONE));
    assert_eq!(provider.list_calls.get(), 2);

    // tools/list refreshes by itself.
    provider.set_tools(&["third", "fourth"]);
    provider.announce();
    assert_eq!(
        listed_names(&registry),
        ["third", "fourth", "echo", "slow_counter", "get_counter", "greet"]
    );
    assert_eq!(provider.list_calls.get(), 3);
    assert!(
        registry.tool(SessionRef::NONE, "third").is_some()
            && registry.tool(SessionRef::NONE, "after").is_none()
    );
    assert_eq!(listed_names(&registry).len(), 6);
    assert_eq!(provider.list_calls.get(), 3);
}

#[test]
fn a_name_that_appears_later_never_takes_the_route_clients_were_using() {
    // Goal (issue 22 item 4): when a provider's list gains a name another provider already
    // routes, the newcomer is hidden whichever comes first in provider order; a name that
    // appears at two providers in one table goes to the first; the hidden tool comes back when
    // the older one leaves. Method: two synthetic providers whose lists the test edits.
    let (first, second) =
        (Rc::new(Synthetic::new("first", &["a"])), Rc::new(Synthetic::new("second", &["b"])));
    let registry = build(vec![first.clone(), second.clone()]);
    let owner = |name: &str| {
        run(registry.refresh_if_stale(SessionRef::NONE));
        registry.tool(SessionRef::NONE, name).map(|r| r.provider.name().to_owned())
    };
    // `first` (earlier in order) gains `b`, which `second` routes: `second` keeps it.
    first.set_tools(&["a", "b"]);
    first.announce();
    assert_eq!(listed_names(&registry), ["a", "b"]);
    assert_eq!(owner("b").as_deref(), Some("second"));
    // `second` gains `a`: `first` keeps it.
    second.set_tools(&["b", "a"]);
    second.announce();
    assert_eq!(listed_names(&registry), ["a", "b"]);
    assert_eq!((owner("a").as_deref(), owner("b").as_deref()), (Some("first"), Some("second")));
    // `second` drops `b`: `first`'s `b`, hidden so far, takes the name.
    second.set_tools(&["a"]);
    second.announce();
    assert_eq!(owner("b").as_deref(), Some("first"));
    assert_eq!(owner("a").as_deref(), Some("first"));
    // A new name at both in one listing: the first provider's.
    first.set_tools(&["a", "b", "c"]);
    second.set_tools(&["c"]);
    first.announce();
    assert_eq!(owner("c").as_deref(), Some("first"));
    assert_eq!(listed_names(&registry), ["a", "b", "c"]);
}

#[test]
fn a_provider_whose_listing_fails_is_skipped() {
    // Goal: one broken provider does not hide the others' tools, at build and on refresh.
    // Method: a failing synthetic provider listed ahead of two working ones.
    let broken = Rc::new(Synthetic { fail_listing: true, ..Synthetic::new("broken", &["lost"]) });
    let working = Rc::new(Synthetic::new("working", &["kept"]));
    let registry = build(vec![
        broken.clone(),
        working.clone(),
        Rc::new(BuiltinProvider::new(BuiltinSet::Demo)),
    ]);
    assert_eq!(broken.list_calls.get(), 1);
    assert_eq!(listed_names(&registry), ["kept", "echo", "slow_counter", "get_counter", "greet"]);
    assert!(registry.tool(SessionRef::NONE, "lost").is_none());
    assert_eq!(registry.tool(SessionRef::NONE, "kept").expect("kept").provider.name(), "working");

    working.set_tools(&["kept", "new"]);
    broken.announce();
    assert_eq!(
        listed_names(&registry),
        ["kept", "new", "echo", "slow_counter", "get_counter", "greet"]
    );
    assert_eq!((broken.list_calls.get(), working.list_calls.get()), (2, 2));
}

#[test]
fn safe_to_repeat_follows_the_annotations() {
    // Goal: CONTRACT §4 step 3: a route is safe to repeat exactly when its tool is read-only
    // or idempotent. Method: one synthetic tool per combination of hints.
    let idempotent = Annotations { idempotent: Some(true), ..Annotations::default() };
    let cases = [
        ("read_only", Annotations::read_only(), true),
        ("both", Annotations { read_only: Some(true), ..idempotent.clone() }, true),
        ("idempotent", idempotent, true),
        ("none", Annotations::default(), false),
        (
            "both_false",
            Annotations {
                read_only: Some(false),
                idempotent: Some(false),
                ..Annotations::default()
            },
            false,
        ),
        (
            "not_destructive",
            Annotations { destructive: Some(false), ..Annotations::default() },
            false,
        ),
    ];
    let provider = Synthetic::new("hinted", &[]);
    *provider.tools.borrow_mut() =
        cases.iter().map(|(name, annotations, _)| tool(name, annotations.clone())).collect();
    let registry = build(vec![Rc::new(provider)]);
    for (name, _, safe) in &cases {
        assert_eq!(
            registry.tool(SessionRef::NONE, name).expect(name).safe_to_repeat,
            *safe,
            "{name}"
        );
    }
    // The built-in sets too: slow_counter has no hints, echo and get_counter have some.
    let demo = builtin(&[BuiltinSet::Demo]);
    assert!(demo.tool(SessionRef::NONE, "echo").expect("echo").safe_to_repeat);
    assert!(demo.tool(SessionRef::NONE, "get_counter").expect("get_counter").safe_to_repeat);
    assert!(!demo.tool(SessionRef::NONE, "slow_counter").expect("slow_counter").safe_to_repeat);
}

/// A provider that lists each session its own tools, as a per-session upstream started with the
/// client's capabilities does: `elicit` only to a session whose `initialize` declared
/// elicitation; `echo` (idempotent) to all. Its core-wide list (`list_tools`) is `core_only`.
#[derive(Default)]
struct PerSession {
    elicitors: RefCell<Vec<SessionRef>>,
    changes: RefCell<Option<Changes>>,
    session_lists: Cell<usize>,
}

impl Provider for PerSession {
    fn name(&self) -> &str {
        "per-session"
    }

    fn attach(&self, changes: Changes) {
        *self.changes.borrow_mut() = Some(changes);
    }

    fn list_tools(&self) -> LocalBoxFuture<'_, ProviderResult<Vec<ToolInfo>>> {
        Box::pin(async { Ok(vec![tool("core_only", Annotations::default())]) })
    }

    fn list_session_tools(
        &self,
        session: SessionRef,
    ) -> LocalBoxFuture<'_, ProviderResult<Option<Vec<ToolInfo>>>> {
        self.session_lists.set(self.session_lists.get() + 1);
        let idempotent = Annotations { idempotent: Some(true), ..Annotations::default() };
        let mut tools = vec![tool("echo", idempotent)];
        if self.elicitors.borrow().contains(&session) {
            tools.push(tool("elicit", Annotations::default()));
        }
        Box::pin(async move { Ok(Some(tools)) })
    }

    fn open_session<'a>(
        &'a self,
        start: &'a SessionStart,
    ) -> LocalBoxFuture<'a, ProviderResult<SessionInfo>> {
        if start.client_params.pointer("/capabilities/elicitation").is_some() {
            self.elicitors.borrow_mut().push(start.session);
        }
        Box::pin(async { Ok(SessionInfo::default()) })
    }

    fn call_tool<'a>(
        &'a self,
        _name: &'a str,
        _arguments: Value,
        _cx: CallContext,
    ) -> LocalBoxFuture<'a, ProviderResult<Value>> {
        Box::pin(async { Ok(json!({ "content": [] })) })
    }
}

fn session_start(session: SessionRef, capabilities: Value) -> SessionStart {
    SessionStart {
        session,
        protocol_version: "2025-11-25",
        client_params: json!({ "capabilities": capabilities }),
        notifier: crate::provider::Notifier::detached(),
        caller: None,
    }
}

fn names_for(registry: &Registry, session: SessionRef) -> Vec<String> {
    let params: WireValue<'_> = crate::wire::jsonrpc::leaked_value("{}");
    let mut out = Vec::new();
    run(registry.answer(session, None, &RawId::new(ID), "tools/list", &params, &mut out));
    let response: Value = serde_json::from_slice(&out).expect("JSON");
    let items = response["result"]["tools"].as_array().expect("tools").clone();
    items.iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

#[test]
fn each_session_is_listed_and_routed_by_its_own_tools() {
    // Goal (issue 22 item 3): a session is listed, and may call, exactly the tools its own
    // providers' lists hold, never another session's, whichever listed last; a provider
    // without lists of its own (built-in) is shared by every session's table; idempotency
    // comes from the session's table; a change of one session's list re-lists that session
    // only; a closed session's table is gone. Method: a registry over a per-session provider
    // and the demo set, two sessions opened in interleaved order (the one without elicitation
    // first, as a probing client does), listing and routing for each after each step.
    let provider = Rc::new(PerSession::default());
    let registry = build(vec![provider.clone(), Rc::new(BuiltinProvider::new(BuiltinSet::Demo))]);
    let (probe, elicitor) = (SessionRef::new(11), SessionRef::new(22));
    let demo = ["echo", "slow_counter", "get_counter", "greet"].map(String::from);
    run(registry.open_session(&session_start(probe, json!({})))).expect("probe opens");
    run(registry.open_session(&session_start(elicitor, json!({ "elicitation": {} }))))
        .expect("elicitor opens");
    for _ in 0..2 {
        // The duplicate `echo` of the demo set loses to the first provider's, per session.
        let mut want_probe = vec!["echo".to_owned()];
        want_probe.extend(demo[1..].iter().cloned());
        assert_eq!(names_for(&registry, probe), want_probe);
        let mut want_elicitor = vec!["echo".to_owned(), "elicit".to_owned()];
        want_elicitor.extend(demo[1..].iter().cloned());
        assert_eq!(names_for(&registry, elicitor), want_elicitor);
        assert!(registry.tool(probe, "elicit").is_none(), "not listed to it, not callable");
        let route = registry.tool(elicitor, "elicit").expect("the elicitor's own tool");
        assert_eq!(route.provider.name(), "per-session");
        assert!(!route.safe_to_repeat);
        assert!(registry.tool(probe, "echo").expect("echo").safe_to_repeat, "its annotations");
        assert_eq!(registry.tool(probe, "greet").expect("greet").provider.name(), "demo");
        assert!(registry.tool(probe, "core_only").is_none(), "the session reads its own list");
        assert!(registry.tool(SessionRef::STATELESS, "core_only").is_some(), "the core's");
    }
    assert_eq!(provider.session_lists.get(), 2, "listing answers from the tables");

    // One session's change re-lists that session only.
    let changes = provider.changes.borrow().clone().expect("attached");
    changes.session_tools_changed(probe);
    provider.elicitors.borrow_mut().push(probe);
    assert_eq!(names_for(&registry, elicitor).len(), 5);
    assert_eq!(provider.session_lists.get(), 2);
    assert!(names_for(&registry, probe).contains(&"elicit".to_owned()));
    assert_eq!(provider.session_lists.get(), 3);
    assert!(registry.tool(probe, "elicit").is_some());

    // A core re-listing rebuilds the session tables at their next request (shared parts).
    changes.tools_changed();
    run(registry.refresh_if_stale(elicitor));
    assert_eq!(provider.session_lists.get(), 4);

    registry.close_session(probe);
    assert!(registry.tool(probe, "elicit").is_none(), "a closed session's table is dropped");
    assert!(registry.session_tools.borrow().get(&probe).is_none());
}

#[test]
fn sessions_share_the_core_table_when_no_provider_lists_per_session() {
    // Goal: the hot path of built-in tools: a session of providers without lists of their own
    // gets no table of its own (it reads the core's, shared by `Rc`). Method: the demo set,
    // a session opened, the tables compared by pointer.
    let registry = full();
    let session = SessionRef::new(5);
    run(registry.open_session(&session_start(session, json!({})))).expect("opens");
    assert!(registry.session_tools.borrow().is_empty());
    assert!(Rc::ptr_eq(&registry.table(session), &registry.table(SessionRef::NONE)));
    assert!(registry.tool(session, "echo").is_some());
}

#[test]
fn sessions_listed_equal_tools_share_one_table() {
    // Goal (issue 38 finding 6): a core holds one tool table per distinct listing, not one per
    // session; a table in which a name collision hid a tool (its winner depends on the table's
    // history) stays its session's own. Method: the per-session provider alone, two plain
    // sessions and an elicitor, compared by pointer; a plain session whose list becomes the
    // elicitor's then shares the elicitor's; with the demo set (`echo` collides) none share.
    let provider = Rc::new(PerSession::default());
    let registry = build(vec![provider.clone()]);
    let (a, b, e) = (SessionRef::new(1), SessionRef::new(2), SessionRef::new(3));
    for (session, caps) in [(a, json!({})), (b, json!({})), (e, json!({ "elicitation": {} }))] {
        run(registry.open_session(&session_start(session, caps))).expect("opens");
    }
    assert!(Rc::ptr_eq(&registry.table(a), &registry.table(b)), "equal lists, one table");
    assert!(!Rc::ptr_eq(&registry.table(a), &registry.table(e)), "other lists, another");
    // `a` is now listed what the elicitor is: it shares the elicitor's table, `b` keeps its.
    provider.elicitors.borrow_mut().push(a);
    provider.changes.borrow().clone().expect("attached").session_tools_changed(a);
    run(registry.refresh_if_stale(a));
    assert!(Rc::ptr_eq(&registry.table(a), &registry.table(e)), "shared once equal");
    assert_eq!(names_for(&registry, b), ["echo"], "b keeps its own list");
    registry.close_session(e);
    assert_eq!(names_for(&registry, a), ["echo", "elicit"], "closing one holder leaves the other");

    let provider = Rc::new(PerSession::default());
    let demo: Rc<dyn Provider> = Rc::new(BuiltinProvider::new(BuiltinSet::Demo));
    let registry = build(vec![provider, demo]);
    run(registry.open_session(&session_start(a, json!({})))).expect("opens");
    run(registry.open_session(&session_start(b, json!({})))).expect("opens");
    assert!(!Rc::ptr_eq(&registry.table(a), &registry.table(b)), "a collided table is its own");
}
