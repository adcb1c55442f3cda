//! The command line: every flag of the `tidemark` binary (one per limit in `config`), parsed
//! into a `Config`. Embedding programs get the same flags through `Config::from_args`.
//!
//! Owns: the flag names, their help text and defaults. Never: starts anything.

use std::ffi::OsString;
use std::path::Path;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::config::{self, AuthConfig, Config, ConfigError, ConfigFileOrigin, DurableConfig};
use crate::config::{KeyMaterial, ModernConfig, RateConfig, ServerConfig};
use crate::config::{SessionsConfig, UpstreamConfig};
use crate::layers::{self, FileValues, LayerError, ResolveError, Resolved};

/// tidemark: an io_uring, thread-per-core MCP Streamable HTTP endpoint that never loses or
/// doubles a stream.
#[derive(Parser)]
#[command(version, about)]
struct Flags {
    /// A TOML configuration file: every flag's long name is a key (docs/configuration.md);
    /// flags and TIDEMARK_* environment variables override it. Also TIDEMARK_CONFIG.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the effective configuration as TOML, each key's source above it, and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    server: config::ServerFlags,
    #[command(flatten)]
    modes: config::ModeFlags,
    #[command(flatten)]
    http: config::HttpFlags,
    #[command(flatten)]
    sessions: config::SessionFlags,
    #[command(flatten)]
    listener: config::ListenerFlags,
    #[command(flatten)]
    trace: config::TraceFlags,
    #[command(flatten)]
    node: config::NodeFlags,
    #[command(flatten)]
    buffers: config::BufferFlags,
    #[command(flatten)]
    upstream: config::UpstreamFlags,
    #[command(flatten)]
    jwt: config::JwtFlags,
    #[command(flatten)]
    modern: config::ModernFlags,
    #[command(flatten)]
    auth: config::AuthFlags,
    #[command(flatten)]
    log: config::LogFlags,
    #[command(flatten)]
    rate: config::RateFlags,
    #[command(flatten)]
    durable: config::DurableFlags,
}

impl Flags {
    /// The sections of the parsed flags, one line each (the flags of a section are split
    /// into runs only to keep `--help`'s order). No side effect: the request-state key is a
    /// field, installed by `Server` at start.
    fn into_config(self) -> Result<Config, ConfigError> {
        let key = request_state_key(self.modern.request_state_key_file.as_deref())?;
        Ok(Config {
            server: ServerConfig::from_flags(self.server, self.listener, self.node)?,
            http: self.http.into(),
            sessions: SessionsConfig::from_flags(self.modes, self.sessions, self.buffers),
            trace: self.trace.into(),
            upstream: UpstreamConfig::from_flags(self.upstream)?,
            auth: AuthConfig::from_flags(self.jwt, self.auth),
            modern: ModernConfig::from_flags(self.modern, key),
            log: self.log.into(),
            rate: RateConfig::from_flags(self.rate)?,
            durable: DurableConfig::from_flags(self.durable)?,
            config_file: None,
            startup_warnings: Vec::new(),
        })
    }
}

/// The key material of `--request-state-key-file`, when given: a regular file under its
/// byte limit, with at least a key's worth of bytes.
fn request_state_key(path: Option<&Path>) -> Result<Option<KeyMaterial>, ConfigError> {
    let Some(path) = path else { return Ok(None) };
    let bytes = crate::fsread::read(path, config::REQUEST_STATE_KEY_FILE_BYTES_MAX)
        .map_err(|e| ConfigError::KeyFile(format!("{}: {e}", path.display())))?;
    if bytes.len() < crate::modern::state::KEY_BYTES {
        let message = format!(
            "{}: at least {} bytes of key material needed",
            path.display(),
            crate::modern::state::KEY_BYTES
        );
        return Err(ConfigError::KeyFile(message));
    }
    Ok(Some(KeyMaterial::new(bytes)))
}

impl Config {
    /// The configuration the process's command-line flags describe (the `tidemark` binary's
    /// flags). Prints usage and exits on a malformed flag, as command-line tools do; a value
    /// that parses but cannot be served is an `Err`. The result is checked again by
    /// `Server::run`.
    ///
    /// Each flag may also come from a `TIDEMARK_*` environment variable or the `--config`
    /// TOML file (flag > env > file > default; docs/configuration.md). Unknown `TIDEMARK_*`
    /// variables are warnings that `init_logging` logs. `--print-config` prints the effective configuration
    /// and exits 0.
    pub fn from_args() -> Result<Config, ConfigError> {
        let argv: Vec<OsString> = std::env::args_os().collect();
        let env: Vec<(String, String)> = std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect();
        let resolved = match layers::resolve(Flags::command(), &argv, &env) {
            Ok(resolved) => resolved,
            Err(ResolveError::Clap(error)) => error.exit(),
            Err(ResolveError::Layer(error)) => return Err(ConfigError::Layer(error.to_string())),
        };
        if resolved.print {
            // No subscriber exists yet, and none will: the warnings go straight to stderr.
            for warning in &resolved.warnings {
                eprintln!("warning: {warning}");
            }
            print!("{}", layers::print_config(&Flags::command(), &resolved));
            std::process::exit(0);
        }
        config_of(resolved, &argv, &env)
    }

    /// The command line `from_args` parses, as clap's `Command`: every flag with its help and
    /// default. `docs/flags.md`'s table is rendered from it (`tests/docs.rs`), so the two agree.
    pub fn command() -> clap::Command {
        Flags::command()
    }

    /// `from_args` over an explicit argument list (the first item is the program name),
    /// without the process's environment: a `--config FILE` among `args` is read, and
    /// `--print-config` changes nothing here.
    pub fn try_from_args<I, T>(args: I) -> Result<Config, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        try_from_layers(args, &[])
    }
}

/// `try_from_args` with `env` as the environment (`TIDEMARK_*` variables; others ignored).
pub(crate) fn try_from_layers<I, T>(args: I, env: &[(String, String)]) -> Result<Config, String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let resolved = match layers::resolve(Flags::command(), &argv, env) {
        Ok(resolved) => resolved,
        Err(ResolveError::Clap(error)) => return Err(error.to_string()),
        Err(ResolveError::Layer(error)) => return Err(error.to_string()),
    };
    config_of(resolved, &argv, env).map_err(|e| e.to_string())
}

/// The `Config` of resolved matches, remembering the file (its shadowed keys, and the command
/// line and `TIDEMARK_*` environment to resolve it again with) for SIGHUP.
fn config_of(
    resolved: Resolved,
    argv: &[OsString],
    env: &[(String, String)],
) -> Result<Config, ConfigError> {
    let flags = Flags::from_arg_matches(&resolved.matches)
        .map_err(|e| ConfigError::Layer(e.to_string()))?;
    let mut cfg = flags.into_config()?;
    cfg.startup_warnings = resolved.warnings.clone();
    cfg.config_file = resolved.file.as_ref().map(|file| ConfigFileOrigin {
        path: file.path.clone(),
        shadowed: resolved.shadowed_file_keys(),
        relaunch: crate::config::Relaunch {
            argv: argv.to_vec(),
            env: (env.iter())
                .filter(|(name, _)| name.starts_with(layers::ENV_PREFIX))
                .cloned()
                .collect(),
        },
    });
    Ok(cfg)
}

/// The configuration `origin` was resolved to, resolved again over what its file says now
/// (SIGHUP); why not, when the file or a value no longer loads.
pub(crate) fn reresolve(origin: &ConfigFileOrigin) -> Result<Config, String> {
    try_from_layers(origin.relaunch.argv.iter().cloned(), &origin.relaunch.env)
}

/// The `--config` file read again against the binary's flags (SIGHUP): its values by key, or
/// why it no longer loads.
pub(crate) fn reread_config_file(path: &std::path::Path) -> Result<FileValues, LayerError> {
    layers::read_file(&Flags::command(), path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BuiltinSet;
    use std::time::Duration;

    #[test]
    fn every_flag_has_a_line_of_help() {
        // Goal: `--help` explains every setting (an operator reads it before the README).
        // Method: walk clap's own argument list; a flag without a doc comment has no help.
        let command = Flags::command();
        let silent: Vec<String> = command
            .get_arguments()
            .filter(|arg| arg.get_long().is_some() && arg.get_help().is_none())
            .map(|arg| format!("--{}", arg.get_long().unwrap_or_default()))
            .collect();
        assert!(silent.is_empty(), "flags without help: {silent:?}");
    }

    #[test]
    fn flags_map_onto_the_config_and_tools_default_to_unset() {
        // Goal: the binary's flags reach Config. Method: parse a few argument lists.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.server.listen, config::LISTEN_DEFAULT.parse().expect("address"));
        assert_eq!(cfg.server.builtin_tools, None);
        let args = ["tidemark", "--listen", "127.0.0.1:0", "--tools", "conformance,demo"];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.server.builtin_tools, Some(vec![BuiltinSet::Conformance, BuiltinSet::Demo]));
        let cfg = Config::try_from_args(["tidemark", "--tools", "none"]).expect("parses");
        assert_eq!(cfg.server.builtin_tools, Some(vec![]));
        let bad = Config::try_from_args(["tidemark", "--tools", "demo,bogus"]).expect_err("bogus");
        assert!(bad.contains("\"bogus\"") && bad.contains("demo, conformance"), "{bad}");
        assert!(Config::try_from_args(["tidemark", "--no-such-flag"]).is_err());
    }

    #[test]
    fn durable_writer_is_each_core_unless_the_thread_is_asked_and_refuses_other_values() {
        // Goal: --durable-writer defaults to each core's own writer, takes `thread`, and
        // refuses anything else naming the two values.
        let writer = |extra: &[&str]| {
            let args = ["tidemark", "--durable", "redis://127.0.0.1:6379"];
            Config::try_from_args(args.iter().chain(extra).copied())
                .map(|cfg| cfg.durable.expect("durable").writer)
        };
        assert_eq!(writer(&[]).expect("default"), config::DurableWriter::Core);
        let thread = writer(&["--durable-writer", "thread"]).expect("thread");
        assert_eq!(thread, config::DurableWriter::Thread);
        let bad = writer(&["--durable-writer", "both"]).expect_err("not a writer");
        assert!(bad.contains("thread") && bad.contains("core"), "{bad}");
    }

    #[test]
    fn durable_linger_takes_its_largest_value_and_refuses_past_it() {
        // Goal: --durable-linger-us is 0..=DURABLE_LINGER_US_MAX, refused past it with the
        // bound named. Method: parse the default, zero, the limit and one past it.
        let with = |linger: &str| {
            let args = ["tidemark", "--durable", "redis://127.0.0.1:6379", "--durable-linger-us"];
            Config::try_from_args(args.into_iter().chain([linger]))
        };
        let linger = |cfg: Config| cfg.durable.expect("durable").linger.as_micros() as u64;
        let args = ["tidemark", "--durable", "redis://127.0.0.1:6379"];
        let cfg = Config::try_from_args(args).expect("defaults parse");
        assert_eq!(linger(cfg), config::DURABLE_LINGER_US);
        assert_eq!(linger(with("0").expect("zero: at once")), 0);
        let max = config::DURABLE_LINGER_US_MAX.to_string();
        assert_eq!(linger(with(&max).expect("the limit")), config::DURABLE_LINGER_US_MAX);
        let past = (config::DURABLE_LINGER_US_MAX + 1).to_string();
        let bad = with(&past).expect("parses").validate().expect_err("past the limit");
        assert!(bad.to_string().contains("at most 100000"), "{bad}");
        with(&max).expect("parses").validate().expect("the limit is valid");
    }

    #[test]
    fn durable_replicas_default_to_zero_take_their_largest_value_and_refuse_past_it() {
        // Goal: --durable-replicas is 0 (today: the primary's acknowledgement) unless given,
        // takes DURABLE_REPLICAS_MAX and is refused past it with the bound named; a malformed
        // Sentinel value is refused at start-up, saying what is wrong.
        let with = |extra: &[&str]| {
            let args = ["tidemark", "--durable", "redis+sentinel://127.0.0.1:26379/tm"];
            Config::try_from_args(args.iter().chain(extra).copied())
        };
        let cfg = with(&[]).expect("defaults parse").durable.expect("durable");
        assert_eq!(cfg.replicas, 0);
        assert!(matches!(cfg.url, config::DurableStore::Sentinel(_)));
        let max = config::DURABLE_REPLICAS_MAX.to_string();
        let at_max = with(&["--durable-replicas", &max]).expect("the limit");
        at_max.validate().expect("the limit is valid");
        assert_eq!(at_max.durable.expect("durable").replicas, config::DURABLE_REPLICAS_MAX);
        let past = (config::DURABLE_REPLICAS_MAX + 1).to_string();
        let cfg = with(&["--durable-replicas", &past]).expect("parses");
        let bad = cfg.validate().expect_err("past the limit");
        assert!(bad.to_string().contains("--durable-replicas must be at most 16"), "{bad}");
        let args = ["tidemark", "--durable", "redis+sentinel://127.0.0.1:26379"];
        let bad = Config::try_from_args(args).expect_err("no master name");
        assert!(bad.contains("no /MASTER_NAME"), "{bad}");
        let args = ["tidemark", "--durable", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"];
        let cfg = Config::try_from_args(args).expect("a cluster parses");
        assert!(matches!(cfg.durable.expect("durable").url, config::DurableStore::Cluster(_)));
    }

    #[test]
    fn durable_cluster_limits_take_their_bounds_and_refuse_past_them() {
        // Goal: --durable-cluster-redirects-max is 0..=16 and --durable-claims-ttl-ms
        // 2000..=3600000, each refused one past a bound at start-up with the bound named.
        // Method: parse the defaults, each bound and one past it, and validate.
        let with = |extra: &[&str]| {
            let args = ["tidemark", "--durable", "redis+cluster://127.0.0.1:7000"];
            Config::try_from_args(args.iter().chain(extra).copied()).expect("parses")
        };
        let cfg = with(&[]).durable.expect("durable");
        assert_eq!(cfg.cluster_redirects_max, config::DURABLE_CLUSTER_REDIRECTS_MAX);
        assert_eq!(cfg.claims_ttl, Duration::from_secs(60));
        let most = config::DURABLE_CLUSTER_REDIRECTS_MOST.to_string();
        for good in ["0", &most] {
            let cfg = with(&["--durable-cluster-redirects-max", good]);
            cfg.validate().expect("inside the bounds");
        }
        let past = (config::DURABLE_CLUSTER_REDIRECTS_MOST + 1).to_string();
        let bad = with(&["--durable-cluster-redirects-max", &past]).validate().expect_err("past");
        assert!(bad.to_string().contains("--durable-cluster-redirects-max must be at most 16"));
        let stop_write = with(&[]).durable.expect("durable").stop_write;
        assert_eq!(stop_write.as_millis() as u64, config::DURABLE_STOP_WRITE_MS);
        for good in [0, config::DURABLE_STOP_WRITE_MS_MAX] {
            let cfg = with(&["--durable-stop-write-ms", &good.to_string()]);
            cfg.validate().expect("inside the bounds");
        }
        let past = (config::DURABLE_STOP_WRITE_MS_MAX + 1).to_string();
        let bad = with(&["--durable-stop-write-ms", &past]).validate().expect_err("past");
        assert!(bad.to_string().contains("--durable-stop-write-ms must be at most 30000"), "{bad}");
        let (min, max) = (config::DURABLE_CLAIMS_TTL_MS_MIN, config::DURABLE_CLAIMS_TTL_MS_MAX);
        for good in [min, max] {
            let cfg = with(&["--durable-claims-ttl-ms", &good.to_string()]);
            assert_eq!(cfg.durable.as_ref().expect("durable").claims_ttl.as_millis() as u64, good);
            cfg.validate().expect("inside the bounds");
        }
        for past in [min - 1, max + 1] {
            let cfg = with(&["--durable-claims-ttl-ms", &past.to_string()]);
            let bad = cfg.validate().expect_err("outside the bounds").to_string();
            assert!(bad.contains("--durable-claims-ttl-ms must be 2000 to 3600000"), "{bad}");
        }
    }
    #[test]
    fn node_id_defaults_to_zero_takes_its_largest_value_and_refuses_past_it() {
        // Goal: --node-id is 0..=NODE_ID_MAX (the ids' two-digit prefix); past it is refused at
        // parse time with the range named. Method: parse the default, the limit, one past it.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.server.node_id, config::NODE_ID_DEFAULT);
        let max = config::NODE_ID_MAX.to_string();
        let cfg = Config::try_from_args(["tidemark", "--node-id", &max]).expect("parses");
        assert_eq!(cfg.server.node_id, config::NODE_ID_MAX);
        let past = (u32::from(config::NODE_ID_MAX) + 1).to_string();
        let bad = Config::try_from_args(["tidemark", "--node-id", &past]).expect_err("past max");
        assert!(bad.contains("0..=255"), "{bad}");
        assert!(Config::try_from_args(["tidemark", "--node-id", "-1"]).is_err());
    }

    #[test]
    fn drain_secs_defaults_parses_and_rejects_zero() {
        // Goal: --drain-secs reaches Config, its smallest value (1) is taken and zero is
        // rejected like every limit. Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.server.drain, Duration::from_secs(config::DRAIN_SECS));
        let cfg = Config::try_from_args(["tidemark", "--drain-secs", "1"]).expect("parses");
        assert_eq!(cfg.server.drain, Duration::from_secs(1));
        assert_eq!(cfg.validate(), Ok(()));
        let cfg = Config::try_from_args(["tidemark", "--drain-secs", "0"]).expect("parses");
        assert_eq!(cfg.validate(), Err(ConfigError::Zero("drain-secs")));
    }

    #[test]
    fn task_flags_reach_the_config_and_zero_is_rejected() {
        // Goal: the tasks extension's five flags reach Config (defaults = the constants) and
        // none of them takes zero. Method: parse defaults, one list of values, then each zero.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.modern.tasks_per_core_max, config::TASKS_PER_CORE_MAX);
        assert_eq!(cfg.modern.task_retention, Duration::from_secs(config::TASK_RETENTION_SECS));
        let args = [
            "tidemark",
            "--max-tasks-per-core",
            "1",
            "--task-retention-secs",
            "2",
            "--task-bytes-per-core",
            "3",
            "--max-task-input-requests",
            "4",
            "--task-poll-interval-ms",
            "5",
        ];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.modern.tasks_per_core_max, 1);
        assert_eq!(cfg.modern.task_retention, Duration::from_secs(2));
        assert_eq!(cfg.modern.task_bytes_per_core, 3);
        assert_eq!(cfg.modern.task_input_requests_max, 4);
        assert_eq!(cfg.modern.task_poll_interval, Duration::from_millis(5));
        assert_eq!(cfg.validate(), Ok(()));
        for flag in [
            "max-tasks-per-core",
            "task-retention-secs",
            "task-bytes-per-core",
            "max-task-input-requests",
            "task-poll-interval-ms",
        ] {
            let cfg =
                Config::try_from_args(["tidemark", &format!("--{flag}"), "0"]).expect("parses");
            assert_eq!(cfg.validate(), Err(ConfigError::Zero(flag)));
        }
    }

    #[test]
    fn tool_set_lists_accept_known_names_and_reject_the_rest() {
        // Goal: the --tools flag. Method: table of accepted specs, then of rejected ones.
        let accepted = [
            ("demo", vec![BuiltinSet::Demo]),
            ("conformance", vec![BuiltinSet::Conformance]),
            ("demo,conformance", vec![BuiltinSet::Demo, BuiltinSet::Conformance]),
            (" conformance , demo ", vec![BuiltinSet::Conformance, BuiltinSet::Demo]),
            ("demo,demo", vec![BuiltinSet::Demo]),
            ("none", vec![]),
        ];
        for (spec, sets) in accepted {
            assert_eq!(BuiltinSet::parse_list(spec), Ok(sets), "{spec:?}");
        }
        for spec in [
            "",
            " ",
            "demo,",
            ",demo",
            "demo,,conformance",
            "Demo",
            "everything",
            "demo;x",
            "none,demo",
        ] {
            let error = BuiltinSet::parse_list(spec).expect_err(spec).to_string();
            assert!(error.contains("demo, conformance"), "{spec:?}: {error}");
        }
    }

    #[test]
    fn jwks_flags_reach_the_config_and_the_leeway_is_capped() {
        // Goal: the JWT/JWKS flags reach Config (defaults = the constants), the leeway is
        // taken at its cap and refused one past it, the refresh intervals refuse zero, and the
        // JWKS URL must be http(s). Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.auth.leeway, Duration::from_secs(config::AUTH_LEEWAY_SECS));
        assert_eq!(cfg.auth.jwks_refresh, Duration::from_secs(config::JWKS_REFRESH_SECS));
        assert_eq!(cfg.auth.jwks_min_refetch, Duration::from_secs(config::JWKS_MIN_REFETCH_SECS));
        let max = config::AUTH_LEEWAY_SECS_MAX.to_string();
        let args = [
            "tidemark",
            "--auth-jwks-url",
            "https://as.example/jwks",
            "--auth-jwks-file",
            "/etc/tidemark/jwks.json",
            "--auth-leeway-secs",
            max.as_str(),
        ];
        let cfg = Config::try_from_args(args).expect("parses");
        assert_eq!(cfg.auth.jwks_url, ["https://as.example/jwks"]);
        assert_eq!(cfg.auth.jwks_file, [std::path::PathBuf::from("/etc/tidemark/jwks.json")]);
        assert_eq!(cfg.validate(), Ok(()));
        let over = (config::AUTH_LEEWAY_SECS_MAX + 1).to_string();
        let cfg = Config::try_from_args(["tidemark", "--auth-leeway-secs", &over]).expect("parses");
        let refused = Err(ConfigError::LeewayTooLong(
            config::AUTH_LEEWAY_SECS_MAX + 1,
            config::AUTH_LEEWAY_SECS_MAX,
        ));
        assert_eq!(cfg.validate(), refused);
        for flag in ["auth-jwks-refresh-secs", "auth-jwks-min-refetch-secs"] {
            let cfg =
                Config::try_from_args(["tidemark", &format!("--{flag}"), "0"]).expect("parses");
            assert_eq!(cfg.validate(), Err(ConfigError::Zero(flag)));
        }
        let cfg = Config::try_from_args(["tidemark", "--auth-jwks-url", "file:///etc/passwd"])
            .expect("parses");
        assert!(matches!(cfg.validate(), Err(ConfigError::BadJwksUrl(_))));
    }

    #[test]
    fn auth_cache_secs_is_bounded() {
        // Goal: `--auth-cache-secs` defaults to its constant, is taken at its cap, refused one
        // past it and at zero (never "forever"). Method: parse, then validate.
        let cfg = Config::try_from_args(["tidemark"]).expect("defaults parse");
        assert_eq!(cfg.auth.cache_lifetime, Duration::from_secs(config::AUTH_CACHE_SECS));
        let with = |secs: u64| {
            Config::try_from_args(["tidemark", "--auth-cache-secs", &secs.to_string()])
                .expect("parses")
                .validate()
        };
        assert_eq!(with(config::AUTH_CACHE_SECS_MAX), Ok(()));
        assert_eq!(with(1), Ok(()));
        let over = config::AUTH_CACHE_SECS_MAX + 1;
        assert_eq!(
            with(over),
            Err(ConfigError::AuthCacheTooLong(over, config::AUTH_CACHE_SECS_MAX))
        );
        assert_eq!(with(0), Err(ConfigError::Zero("auth-cache-secs")));
    }

    #[test]
    fn the_request_state_key_file_becomes_a_field_not_a_global() {
        // Goal: parsing flags has no side effect: `--request-state-key-file`'s bytes land in
        // `ModernConfig::state_key` (installed by `Server::start`), a short file is refused
        // by name, and the key never shows in `Debug`. Method: parse with a file written here.
        let dir = std::env::temp_dir();
        let path = dir.join(format!("tidemark-{}-state-key", std::process::id()));
        std::fs::write(&path, [7u8; 40]).expect("write the key file");
        let file = path.to_str().expect("utf-8").to_owned();
        let cfg = Config::try_from_args(["tidemark", "--request-state-key-file", &file]);
        let key = cfg.expect("parses").modern.state_key.expect("the key is a field");
        assert_eq!(key.bytes(), [7u8; 40]);
        assert_eq!(format!("{key:?}"), "KeyMaterial(40 bytes)");
        assert!(Config::try_from_args(["tidemark"]).expect("parses").modern.state_key.is_none());
        std::fs::write(&path, [7u8; 31]).expect("write a short key file");
        let short = Config::try_from_args(["tidemark", "--request-state-key-file", &file]);
        assert!(short.expect_err("too short").contains("at least 32 bytes"));
        let _ = std::fs::remove_file(&path);
    }
}

// After `mod tests`: the env, file and `--print-config` tests of the layers over these flags.
#[cfg(test)]
#[path = "cli_layers_tests.rs"]
mod layers_tests;
