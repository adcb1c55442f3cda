//! Goal: every flag of the binary is settable from `TIDEMARK_*` and the `--config` file with
//! precedence flag > env > file > default; unknown keys and wrong types are errors naming the
//! file, table and key (with the nearest key); `--print-config` loads back to the same
//! configuration. Method: `layers::resolve` and `try_from_layers` over the real `Flags`, with
//! an explicit environment (no process-wide `set_var`) and files in the temp directory.

use std::path::PathBuf;

use clap::CommandFactory;

use super::*;
use crate::layers::{self, Source};

/// A file named for the test (and the process: test binaries may run side by side).
fn file_with(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tidemark-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write the test file");
    path
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn argv(args: &[&str]) -> Vec<OsString> {
    std::iter::once("tidemark").chain(args.iter().copied()).map(OsString::from).collect()
}

fn resolved(args: &[&str], vars: &[(&str, &str)]) -> layers::Resolved {
    match layers::resolve(Flags::command(), &argv(args), &env(vars)) {
        Ok(resolved) => resolved,
        Err(ResolveError::Clap(e)) => panic!("clap: {e}"),
        Err(ResolveError::Layer(e)) => panic!("layer: {e}"),
    }
}

fn layer_error(args: &[&str], vars: &[(&str, &str)]) -> String {
    match layers::resolve(Flags::command(), &argv(args), &env(vars)) {
        Err(ResolveError::Layer(e)) => e.to_string(),
        Err(ResolveError::Clap(e)) => panic!("clap, not a layer error: {e}"),
        Ok(_) => panic!("resolved: {args:?} {vars:?}"),
    }
}

fn source_of(resolved: &layers::Resolved, key: &str) -> Source {
    let found = resolved.sources.iter().find(|(k, _)| k == key);
    found.map(|(_, source)| source.clone()).unwrap_or_else(|| panic!("no key {key}"))
}

/// Arguments, environment, the expected `--max-body-bytes` and its source.
type Layered<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], usize, Source);

#[test]
fn each_layer_overrides_the_one_below_for_one_key() {
    // Goal: default < file < env < flag for one key. Method: add the layers one at a time.
    let path = file_with("precedence", "max-body-bytes = 1000\n");
    let file = path.to_str().expect("utf-8 path");
    let env_var = ("TIDEMARK_MAX_BODY_BYTES", "2000");
    let cases: [Layered; 4] = [
        (&[], &[], config::BODY_BYTES_MAX, Source::Default),
        (&["--config", file], &[], 1000, Source::File(path.clone())),
        (&["--config", file], &[env_var], 2000, Source::Env("TIDEMARK_MAX_BODY_BYTES".into())),
        (&["--config", file, "--max-body-bytes", "3000"], &[env_var], 3000, Source::Flag),
    ];
    for (args, vars, bytes, source) in cases {
        let all: Vec<&str> = std::iter::once("tidemark").chain(args.iter().copied()).collect();
        let cfg = try_from_layers(all, &env(vars)).expect("parses");
        assert_eq!(cfg.http.body_bytes_max, bytes, "{args:?} {vars:?}");
        assert_eq!(source_of(&resolved(args, vars), "max-body-bytes"), source, "{args:?}");
    }
    // The file is also found through TIDEMARK_CONFIG, and a flag names it over the env.
    let cfg = try_from_layers(["tidemark"], &env(&[("TIDEMARK_CONFIG", file)])).expect("parses");
    assert_eq!(cfg.http.body_bytes_max, 1000);
    assert_eq!(cfg.config_file.map(|origin| origin.path), Some(path.clone()));
    let other = file_with("precedence-other", "max-body-bytes = 5\n");
    let args = ["tidemark", "--config", other.to_str().expect("utf-8")];
    let cfg = try_from_layers(args, &env(&[("TIDEMARK_CONFIG", file)])).expect("parses");
    assert_eq!(cfg.http.body_bytes_max, 5);
}

#[test]
fn every_flag_is_reachable_from_the_env_and_from_the_file() {
    // Goal: no flag (today's, or one added later) lacks an env var or a file key. Method: give
    // every settable argument a value in the env, then in a file, and check each one's source
    // and value after resolving.
    let command = Flags::command();
    let sample = |arg: &clap::Arg| -> String {
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            return "true".into();
        }
        if let Some(default) = arg.get_default_values().first() {
            return default.to_string_lossy().into_owned();
        }
        match arg.get_long().unwrap_or_default() {
            "metrics-listen" => "127.0.0.1:0".into(),
            "upstream" => "stdio:true".into(),
            "tools" => "demo".into(),
            long if long.ends_with("-url") => "https://as.example/jwks".into(),
            _ => "1".into(),
        }
    };
    let empty = file_with("reachable-empty", "");
    let mut vars = Vec::new();
    let mut toml_text = String::new();
    for arg in layers::settable(&command) {
        let long = arg.get_long().expect("long");
        if long == layers::CONFIG_FLAG {
            vars.push((layers::env_name(long), empty.display().to_string()));
            continue;
        }
        let value = sample(arg);
        vars.push((layers::env_name(long), value.clone()));
        let numeric = layers::is_numeric(arg);
        let literal = match (arg.get_action(), numeric) {
            (clap::ArgAction::SetTrue, _) => value.clone(),
            (clap::ArgAction::Append, true) => format!("[{value}]"),
            (clap::ArgAction::Append, false) => format!("[{value:?}]"),
            (_, true) => value.clone(),
            (_, false) => format!("{value:?}"),
        };
        toml_text.push_str(&format!("{long} = {literal}\n"));
    }
    let by_env = layers::resolve(Flags::command(), &argv(&[]), &vars).expect("env resolves");
    let path = file_with("reachable", &toml_text);
    let file_args = argv(&["--config", path.to_str().expect("utf-8")]);
    let by_file = layers::resolve(Flags::command(), &file_args, &[]).expect("file resolves");
    for arg in layers::settable(&command) {
        let long = arg.get_long().expect("long");
        let name = layers::env_name(long);
        assert_eq!(source_of(&by_env, long), Source::Env(name.clone()), "{long}");
        if long != layers::CONFIG_FLAG {
            assert_eq!(source_of(&by_file, long), Source::File(path.clone()), "{long}");
            let id = arg.get_id().as_str();
            let raw: Vec<String> = by_file
                .matches
                .get_raw(id)
                .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let expected = vec![sample(arg)];
            if !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                assert_eq!(raw, expected, "{long}: the file's value arrives");
            } else {
                assert!(by_file.matches.get_flag(id), "{long}: the file's switch arrives");
            }
        }
    }
}

#[test]
fn unknown_keys_are_errors_with_the_nearest_known_key() {
    // Goal: a typo is named with its fix (kebab-case is the one spelling). Method: a
    // misspelled key, a snake_case key, a key near nothing.
    let path = file_with("unknown", "max-body-byte = 10\n");
    let shown = path.display();
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    let expected =
        format!("unknown key 'max-body-byte' in {shown} (did you mean 'max-body-bytes'?)");
    assert_eq!(error, expected);
    let path = file_with("snake", "max_connections_per_core = 10\n");
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert!(error.contains("(did you mean 'max-connections-per-core'?)"), "{error}");
    let path = file_with("far", "zzzzzz = 1\n");
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert_eq!(error, format!("unknown key 'zzzzzz' in {}", path.display()));
    let path = file_with("nested", "config = \"/etc/other.toml\"\n");
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert!(error.contains("cannot name another"), "{error}");
}

#[test]
fn wrong_types_and_refused_values_name_the_key_and_what_was_expected() {
    // Goal: a value of the wrong TOML type, or one the flag refuses, is an error naming the
    // key, the file and the expected type (or clap's reason). Method: one bad key per file.
    let cases = [
        ("max-body-bytes = \"big\"", "key 'max-body-bytes' in {}: expected an integer, got string"),
        (
            "allow-unauthenticated = 1",
            "key 'allow-unauthenticated' in {}: expected a boolean (true or false), got integer",
        ),
        (
            "allowed-origin = \"https://a\"",
            "key 'allowed-origin' in {}: expected an array of strings, got string",
        ),
        (
            "allowed-origin = [1]",
            "key 'allowed-origin' in {}: expected an array of strings, got integer",
        ),
        ("path = 5", "key 'path' in {}: expected a string, got integer"),
        ("max-headers = -1", "key 'max-headers' in {}: invalid value '-1'"),
        ("node-id = 256", "key 'node-id' in {}: invalid value '256': 256 is not in 0..=255"),
        (
            "driver = \"fast\"",
            "key 'driver' in {}: invalid value 'fast' [possible values: auto, uring, epoll]",
        ),
        ("listen = \"nowhere\"", "key 'listen' in {}: invalid value 'nowhere'"),
    ];
    for (index, (text, expected)) in cases.into_iter().enumerate() {
        let path = file_with(&format!("type-{index}"), text);
        let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
        let expected = expected.replace("{}", &path.display().to_string());
        assert!(error.starts_with(&expected), "{text}: {error}");
    }
    let path = file_with("syntax", "max-body-bytes = \n");
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert!(error.contains("not valid TOML") && error.contains("line 1"), "{error}");
    let error = layer_error(&["--config", "/nonexistent/tidemark.toml"], &[]);
    assert!(error.starts_with("--config /nonexistent/tidemark.toml: "), "{error}");
}

#[test]
fn a_file_at_the_size_limit_loads_and_one_byte_more_is_refused() {
    // Goal: the file's byte budget (CONFIG_FILE_BYTES_MAX), at N and N+1. Method: comments.
    let limit = usize::try_from(layers::CONFIG_FILE_BYTES_MAX).expect("fits");
    let mut text = "max-headers = 10\n".to_owned();
    text.push('#');
    text.push_str(&"x".repeat(limit - text.len() - 1));
    text.push('\n');
    assert_eq!(text.len(), limit);
    let at = file_with("size-at", &text);
    let cfg = try_from_layers(["tidemark", "--config", at.to_str().expect("utf-8")], &[]);
    assert_eq!(cfg.expect("at the limit").http.headers_max, 10);
    text.insert(text.len() - 1, 'x');
    let over = file_with("size-over", &text);
    let error = layer_error(&["--config", over.to_str().expect("utf-8")], &[]);
    assert!(error.contains(&format!("over {limit} bytes")), "{error}");
}

#[test]
fn repeated_flags_are_arrays_and_a_higher_layer_replaces_the_whole_list() {
    // Goal: lists are TOML arrays in the file, lines in an env var, and a layer's list replaces
    // (never merges with) the one below. Method: origins from each layer.
    let path =
        file_with("lists", "allowed-origin = [\"https://a.example\", \"https://b.example\"]\n");
    let file = path.to_str().expect("utf-8");
    let cfg = try_from_layers(["tidemark", "--config", file], &[]).expect("parses");
    assert_eq!(cfg.http.allowed_origins, ["https://a.example", "https://b.example"]);
    let vars = env(&[("TIDEMARK_ALLOWED_ORIGIN", "https://c.example\nhttps://d.example\n")]);
    let cfg = try_from_layers(["tidemark", "--config", file], &vars).expect("parses");
    assert_eq!(cfg.http.allowed_origins, ["https://c.example", "https://d.example"]);
    let args = ["tidemark", "--config", file, "--allowed-origin", "https://e.example"];
    let cfg = try_from_layers(args, &vars).expect("parses");
    assert_eq!(cfg.http.allowed_origins, ["https://e.example"]);
}

#[test]
fn upstreams_are_tables_with_their_per_upstream_keys() {
    // Goal: `[[upstream]]` tables give --upstream NAME=SPEC and each per-upstream flag
    // (--upstream-forward-authorization NAME) as a key; mistakes name the table.
    let text = r#"
[[upstream]]
name = "fs"
spec = "stdio:npx -y @modelcontextprotocol/server-filesystem /tmp"

[[upstream]]
name = "api"
spec = "http://127.0.0.1:9000/mcp"
forward-authorization = true
"#;
    let path = file_with("upstreams", text);
    let cfg = try_from_layers(["tidemark", "--config", path.to_str().expect("utf-8")], &[])
        .expect("parses");
    let names: Vec<Option<&str>> = cfg.upstream.specs.iter().map(|u| u.name.as_deref()).collect();
    assert_eq!(names, [Some("fs"), Some("api")]);
    let command: Vec<String> = match &cfg.upstream.specs[0].target {
        config::UpstreamTarget::Stdio(argv) => argv.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(command[0], "npx");
    assert_eq!(cfg.upstream.forward_authorization, ["api"]);
    assert_eq!(cfg.validate(), Ok(()));

    let typo = format!("{text}forward-authorisation = true\n");
    let path = file_with("upstream-typo", &typo);
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    let expected = format!(
        "unknown key 'forward-authorisation' in {}, table [[upstream]] #2 (name 'api') (did you mean 'forward-authorization'?)",
        path.display()
    );
    assert_eq!(error, expected);
    let path = file_with(
        "upstream-nameless",
        "[[upstream]]\nspec = \"stdio:x\"\nforward-authorization = true\n",
    );
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert!(
        error.contains("table [[upstream]] #1") && error.contains("needs the table's 'name'"),
        "{error}"
    );
    let path = file_with("upstream-specless", "[[upstream]]\nname = \"x\"\n");
    let error = layer_error(&["--config", path.to_str().expect("utf-8")], &[]);
    assert!(error.starts_with("key 'spec' in ") && error.contains("missing"), "{error}");
    // The plain array form is the flag's own.
    let path = file_with("upstream-array", "upstream = [\"stdio:true\"]\n");
    let cfg = try_from_layers(["tidemark", "--config", path.to_str().expect("utf-8")], &[])
        .expect("parses");
    assert_eq!(cfg.upstream.specs.len(), 1);
}

#[test]
fn unknown_env_vars_warn_with_the_nearest_and_bad_values_are_errors() {
    // Goal: the environment is shared, so an unknown TIDEMARK_* only warns (naming the
    // nearest variable); a known one with a bad value is an error naming it.
    let resolved = resolved(&[], &[("TIDEMARK_MAX_BODY_BYTE", "5"), ("OTHER_THING", "x")]);
    assert_eq!(
        resolved.warnings,
        ["unknown environment variable TIDEMARK_MAX_BODY_BYTE ignored (did you mean TIDEMARK_MAX_BODY_BYTES?)"]
    );
    let error = layer_error(&[], &[("TIDEMARK_MAX_BODY_BYTES", "lots")]);
    assert!(
        error.starts_with("environment variable TIDEMARK_MAX_BODY_BYTES: invalid value 'lots'"),
        "{error}"
    );
    let error = layer_error(&[], &[("TIDEMARK_ALLOW_UNAUTHENTICATED", "perhaps")]);
    assert!(error.contains("TIDEMARK_ALLOW_UNAUTHENTICATED: expected true or false"), "{error}");
    let cfg = try_from_layers(["tidemark"], &env(&[("TIDEMARK_ALLOW_UNAUTHENTICATED", "1")]));
    assert!(cfg.expect("parses").auth.allow_unauthenticated);
}

#[test]
fn a_requirement_is_met_across_layers() {
    // Goal: --tls-cert needs --tls-key from any layer (clap's `requires` sees them all), and
    // one without the other is still refused. Method: cert in the file, key by flag.
    let path = file_with("tls-half", "tls-cert = \"/etc/tidemark/cert.pem\"\n");
    let file = path.to_str().expect("utf-8");
    let args = ["tidemark", "--config", file, "--tls-key", "/etc/tidemark/key.pem"];
    let cfg = try_from_layers(args, &[]).expect("parses");
    assert_eq!(cfg.server.tls.map(|t| t.key), Some(PathBuf::from("/etc/tidemark/key.pem")));
    let error = try_from_layers(["tidemark", "--config", file], &[]).expect_err("no key");
    assert!(error.contains("--tls-key"), "{error}");
}

#[test]
fn print_config_loads_back_to_the_same_configuration() {
    // Goal: --print-config's TOML, loaded with --config, gives the same values, and names each
    // key's source. Method: three layers in, print, load the print alone, compare every raw
    // value.
    let path = file_with("print-in", "max-headers = 20\nallowed-host = [\"mcp.example:8080\"]\n");
    let file = path.to_str().expect("utf-8");
    let vars = [("TIDEMARK_SSE_RETRY_MS", "1500")];
    let first = resolved(&["--config", file, "--path", "/rpc", "--allow-unauthenticated"], &vars);
    let printed = layers::print_config(&Flags::command(), &first);
    assert!(printed.contains(&format!("# file {file}\nmax-headers = 20\n")), "{printed}");
    assert!(printed.contains("# env TIDEMARK_SSE_RETRY_MS\nsse-retry-ms = 1500\n"), "{printed}");
    assert!(printed.contains("# flag\npath = \"/rpc\"\n"), "{printed}");
    assert!(printed.contains("# flag\nallow-unauthenticated = true\n"), "{printed}");
    assert!(printed.contains("# default\nmax-body-bytes = 4194304\n"), "{printed}");
    assert!(printed.contains("# default\n# threads = (unset)\n"), "{printed}");
    let again = file_with("print-out", &printed);
    let second = resolved(&["--config", again.to_str().expect("utf-8")], &[]);
    let command = Flags::command();
    for arg in layers::settable(&command).filter(|a| a.get_long() != Some(layers::CONFIG_FLAG)) {
        let id = arg.get_id().as_str();
        let raw = |r: &layers::Resolved| -> Option<Vec<String>> {
            r.matches.get_raw(id).map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
        };
        assert_eq!(raw(&first), raw(&second), "{id}");
    }
}

#[test]
fn secrets_are_never_printed_and_secret_looking_flags_are_reviewed() {
    // Goal: a value that may be a secret is never in --print-config. Method: every flag whose
    // name suggests a secret takes a path or a number, or is in SECRET_KEYS (whose values are
    // counted, not printed); then print one.
    let command = Flags::command();
    let words = ["token", "key", "secret", "password", "credential", "env"];
    for arg in layers::settable(&command) {
        let long = arg.get_long().expect("long");
        if !words.iter().any(|w| long.contains(w)) || layers::SECRET_KEYS.contains(&long) {
            continue;
        }
        let parser = arg.get_value_parser().type_id();
        let harmless = parser == std::any::TypeId::of::<PathBuf>()
            || parser == std::any::TypeId::of::<usize>()
            || parser == std::any::TypeId::of::<u64>();
        assert!(harmless, "--{long} may hold a secret: list it in layers::SECRET_KEYS");
    }
    let first = resolved(&["--upstream-env", "API_KEY=hunter2"], &[]);
    let printed = layers::print_config(&command, &first);
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("# upstream-env = [1 value(s) withheld"), "{printed}");
}

#[test]
fn a_reread_sorts_changed_keys_by_what_applying_them_takes() {
    // Goal: SIGHUP's comparison: reloadable keys, restart-needed keys, shadowed keys.
    let command = Flags::command();
    let old = file_with("reread-old", "max-headers = 20\nsse-retry-ms = 5\npath = \"/a\"\n");
    let new = file_with("reread-new", "max-headers = 21\nsse-retry-ms = 5\ndrain-secs = 3\n");
    let old = layers::read_file(&command, &old).expect("old");
    let new = layers::read_file(&command, &new).expect("new");
    assert_eq!(new.get("drain-secs"), Some(&["3".to_owned()][..]));
    assert_eq!(old.changed_keys(&new), ["drain-secs", "max-headers", "path"]);
    let sorted = layers::changes(&old, &new, &["path".to_owned()]);
    assert_eq!(sorted.restart_needed, ["drain-secs", "max-headers"]);
    assert_eq!(sorted.shadowed, ["path"]);
    assert!(sorted.reloadable.is_empty());
}

#[test]
fn the_example_file_parses_and_names_every_key() {
    // Goal: deploy/tidemark.toml is a complete, loadable example. Method: read it against the
    // flags; then every settable key appears in it, set or commented out (`# key = `).
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/tidemark.toml");
    let command = Flags::command();
    layers::read_file(&command, &example).expect("the example loads");
    let text = std::fs::read_to_string(&example).expect("read the example");
    let missing: Vec<&str> = layers::settable(&command)
        .filter_map(|arg| arg.get_long())
        .filter(|long| *long != layers::CONFIG_FLAG)
        .filter(|long| {
            !text.lines().any(|line| {
                let line = line.trim_start_matches('#').trim_start();
                line.starts_with(&format!("{long} =")) || line.starts_with(&format!("{long}="))
            })
        })
        .collect();
    assert!(missing.is_empty(), "deploy/tidemark.toml lacks: {missing:?}");
}

#[test]
fn a_request_state_key_file_at_its_byte_limit_loads_and_one_byte_more_is_refused() {
    // Goal: REQUEST_STATE_KEY_FILE_BYTES_MAX at N and N+1 (`fsread`). Method: two key files.
    let limit = usize::try_from(config::REQUEST_STATE_KEY_FILE_BYTES_MAX).expect("fits");
    let at = file_with("state-key-at", &"k".repeat(limit));
    let at = at.to_str().expect("utf-8");
    try_from_layers(["tidemark", "--request-state-key-file", at], &[]).expect("at the limit");
    let over = file_with("state-key-over", &"k".repeat(limit + 1));
    let over = over.to_str().expect("utf-8");
    let error = try_from_layers(["tidemark", "--request-state-key-file", over], &[])
        .expect_err("over the limit");
    assert!(error.contains(&format!("over {limit} bytes")), "{error}");
}

#[test]
fn listen_in_the_file_is_one_string_or_an_array_of_both_kinds() {
    // Goal: `listen` (repeatable since `unix:PATH`) still reads as one string, and as an array
    // of a TCP address and a socket file. Method: two files, their resolved server section.
    let one = file_with("listen-one", "listen = \"127.0.0.1:9\"\n");
    let cfg = try_from_layers(["tidemark", "--config", one.to_str().expect("utf-8")], &env(&[]))
        .expect("one string");
    assert_eq!(cfg.server.listen, "127.0.0.1:9".parse().expect("address"));
    assert!(cfg.server.listen_tcp);
    assert_eq!(cfg.server.listen_unix, None);
    let both = file_with(
        "listen-both",
        "listen = [\"127.0.0.1:9\", \"unix:/tmp/t.sock\"]\nlisten-mode = \"0660\"\n",
    );
    let cfg = try_from_layers(["tidemark", "--config", both.to_str().expect("utf-8")], &env(&[]))
        .expect("an array");
    assert!(cfg.server.listen_tcp);
    assert_eq!(cfg.server.listen_unix, Some("/tmp/t.sock".into()));
    assert_eq!(cfg.server.listen_mode, crate::FileMode(0o660));
}
