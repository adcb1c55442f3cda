//! Unit tests of the `--upstream` spec and the naming scheme.

use std::time::Duration;

use super::links::forwarded_capabilities;
use super::*;
use crate::config::Isolation;
use crate::config::UpstreamSpecError;

#[test]
fn stdio_specs_split_like_a_shell_without_running_one() {
    // Goal: the command is split into argv as a shell would, with no expansion. Method: table.
    let cases: [(&str, &[&str]); 6] = [
        (
            "stdio:npx -y @modelcontextprotocol/server-everything",
            &["npx", "-y", "@modelcontextprotocol/server-everything"],
        ),
        ("stdio:python 'my server.py'  --flag", &["python", "my server.py", "--flag"]),
        ("stdio:echo \"a \\\"b\\\" c\" d\\ e", &["echo", "a \"b\" c", "d e"]),
        ("stdio:  spaced   out  ", &["spaced", "out"]),
        ("stdio:echo $HOME '*'", &["echo", "$HOME", "*"]),
        ("stdio:x ''", &["x", ""]),
    ];
    for (text, argv) in cases {
        let spec = UpstreamSpec::parse(text).expect(text);
        let expected: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            spec,
            UpstreamSpec { name: None, target: UpstreamTarget::Stdio(expected) },
            "{text}"
        );
    }
}

#[test]
fn names_are_taken_only_before_a_known_scheme() {
    // Goal: `NAME=` is a name only when a target follows; an '=' inside a command stays.
    let named =
        UpstreamSpec::parse("time=stdio:mcp-server-time --local-timezone=UTC").expect("parses");
    assert_eq!(named.name.as_deref(), Some("time"));
    assert_eq!(
        named.target,
        UpstreamTarget::Stdio(vec!["mcp-server-time".into(), "--local-timezone=UTC".into()])
    );
    let http = UpstreamSpec::parse("a-b_1=http://127.0.0.1:9/mcp").expect("parses");
    assert_eq!(http.name.as_deref(), Some("a-b_1"));
    assert_eq!(http.target, UpstreamTarget::Http("http://127.0.0.1:9/mcp".into()));
    let unnamed = UpstreamSpec::parse("http://h:1/p?a=b").expect("parses");
    assert_eq!(unnamed.name, None);
}

#[test]
fn bad_specs_say_what_is_wrong() {
    // Goal: each malformed value gets its own error. Method: table.
    assert!(matches!(UpstreamSpec::parse("stdio:"), Err(UpstreamSpecError::EmptyCommand(_))));
    assert!(matches!(UpstreamSpec::parse("stdio:  "), Err(UpstreamSpecError::EmptyCommand(_))));
    assert!(matches!(UpstreamSpec::parse("stdio:a 'b"), Err(UpstreamSpecError::Unbalanced(_))));
    assert!(matches!(UpstreamSpec::parse("stdio:a \"b"), Err(UpstreamSpecError::Unbalanced(_))));
    assert!(matches!(UpstreamSpec::parse("stdio:a \\"), Err(UpstreamSpecError::Unbalanced(_))));
    assert!(matches!(UpstreamSpec::parse("https://h/mcp"), Err(UpstreamSpecError::Https(_))));
    assert!(matches!(UpstreamSpec::parse("npx server"), Err(UpstreamSpecError::Unknown(_))));
    // A NAME= outside the tool-name charset (it prefixes tool names) says so.
    for bad in ["a__b=stdio:x", "a.b=http://h/mcp", "a b=stdio:x", "=stdio:x"] {
        assert!(matches!(UpstreamSpec::parse(bad), Err(UpstreamSpecError::BadName(_))), "{bad}");
    }
    let long = format!("{}=stdio:x", "n".repeat(crate::config::UPSTREAM_NAME_BYTES_MAX + 1));
    assert!(matches!(UpstreamSpec::parse(&long), Err(UpstreamSpecError::BadName(_))));
    let at_limit = format!("{}=stdio:x", "n".repeat(crate::config::UPSTREAM_NAME_BYTES_MAX));
    assert!(UpstreamSpec::parse(&at_limit).expect("at the limit").name.is_some());
    // An '=' inside a command or URL is no name.
    let spec = UpstreamSpec::parse("stdio:cmd --url=http://h/mcp").expect("a command");
    assert_eq!(spec.name, None);
}

#[test]
fn several_upstreams_need_distinct_names() {
    // Goal: the naming scheme is collision-free. Method: lists that must pass and fail.
    let spec = |t: &str| UpstreamSpec::parse(t).expect(t);
    assert_eq!(UpstreamSpec::check_names(&[spec("stdio:a")]), Ok(()));
    assert_eq!(UpstreamSpec::check_names(&[spec("x=stdio:a"), spec("y=stdio:a")]), Ok(()));
    assert!(UpstreamSpec::check_names(&[spec("x=stdio:a"), spec("stdio:b")]).is_err());
    assert!(UpstreamSpec::check_names(&[spec("x=stdio:a"), spec("x=http://h/m")]).is_err());
}

fn bridge(spec: &str, prefixed: bool) -> Bridge {
    let settings = Arc::new(Settings {
        env: Vec::new(),
        isolation: Isolation::PerSession,
        max_processes: 1,
        timeout: Duration::from_secs(1),
        call_max: Duration::from_secs(1),
        start_timeout: Duration::from_secs(1),
        line_bytes: 1024,
        catalog_bytes: 1 << 20,
        queue_bytes: 1024,
        kill_grace: Duration::from_millis(10),
        credentials: Default::default(),
        filters: Vec::new(),
        policies: Vec::new(),
        protocols: Vec::new(),
        breaker_failures: 1,
        input_rounds_max: 16,
        breaker_pause: Duration::from_millis(10),
        resource_uri_bytes_max: 1024,
    });
    let spec = UpstreamSpec::parse(spec).expect("parses");
    Bridge::new(&spec, 0, prefixed, settings, Arc::new(ProcessCount::default()))
}

#[test]
fn prefixed_names_round_trip_and_foreign_names_are_not_ours() {
    // Goal: with several upstreams, NAME__tool and NAME+uri map back to the upstream's names,
    // and another upstream's names are not claimed. With one, names pass through.
    let b = bridge("ev=stdio:x", true);
    assert_eq!(b.outward("echo"), "ev__echo");
    assert_eq!(b.inward("ev__echo"), Some("echo"));
    assert_eq!(b.inward("ev__a__b"), Some("a__b"));
    assert_eq!(b.inward("other__echo"), None);
    assert_eq!(b.inward("evecho"), None);
    assert_eq!(b.outward_uri("test://static/1"), "ev+test://static/1");
    assert_eq!(b.inward_uri("ev+test://static/1"), Some("test://static/1"));
    assert_eq!(b.inward_uri("test://static/1"), None);
    let single = bridge("ev=stdio:x", false);
    assert_eq!(single.outward("echo"), "echo");
    assert_eq!(single.inward("ev__echo"), Some("ev__echo"));
    assert_eq!(single.inward_uri("test://x"), Some("test://x"));
}

#[test]
fn upstream_tool_annotations_decide_idempotency() {
    // Goal: CONTRACT §4 step 3 through the bridge: the upstream's hints are kept.
    let b = bridge("stdio:x", false);
    let listed = serde_json::json!({
        "name": "add", "description": "adds", "inputSchema": { "type": "object" },
        "annotations": { "readOnlyHint": true, "title": "Add" }
    });
    let tool = b.tool_info(&listed).expect("a tool");
    assert!(tool.annotations.safe_to_repeat());
    assert_eq!(tool.annotations.title.as_deref(), Some("Add"));
    let bare = b.tool_info(&serde_json::json!({ "name": "inc" })).expect("a tool");
    assert!(!bare.annotations.safe_to_repeat());
    assert_eq!(bare.input_schema, serde_json::json!({ "type": "object" }));
    assert!(b.tool_info(&serde_json::json!({ "description": "no name" })).is_none());
}

#[test]
fn only_relayed_capabilities_are_announced() {
    // Goal: a client is not promised a feature tidemark cannot relay (server-everything
    // declares `tasks`). Method: filter a capability object with extras.
    let upstream = serde_json::json!({
        "tools": { "listChanged": true }, "resources": { "subscribe": true }, "prompts": {},
        "completions": {}, "logging": {}, "tasks": { "list": {} }, "experimental": { "x": {} }
    });
    let kept = forwarded_capabilities(&upstream);
    let names: Vec<&String> = kept.as_object().expect("object").keys().collect();
    assert_eq!(names, ["completions", "logging", "prompts", "resources", "tools"]);
    assert_eq!(kept["resources"], serde_json::json!({ "subscribe": true }));
    assert_eq!(forwarded_capabilities(&serde_json::json!([1])), serde_json::json!({}));
}
