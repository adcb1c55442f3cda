//! The layers under the command line: a TOML file (`--config FILE`) and the environment
//! (`TIDEMARK_*`), merged with the flags and their defaults generically over clap's arguments —
//! flag > env > file > default — so a flag added to `cli` is settable from all three with no
//! code of its own. Also: where each value came from (`--print-config`), and the file's re-read
//! on SIGHUP (`read_file`, `FileValues::changed_keys`).
//!
//! Naming: a file key is the flag's long name, kebab-case only (`max-body-bytes`); an env var
//! is `TIDEMARK_` + the long name upper-snake (`TIDEMARK_MAX_BODY_BYTES`). Upstreams may be
//! written as `[[upstream]]` tables (`name`, `spec`, and each per-upstream flag — a long name
//! `upstream-X` whose value name is `NAME` or `NAME=…` — as key `X`).
//!
//! Owns: the naming, the file's shape and types, unknown-key suggestions, the printed
//! configuration. Never: knows a particular flag (it walks a `clap::Command`) or builds a
//! `Config` (that is `cli`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// Every env var this program reads starts with it (others are not ours and are ignored).
pub(crate) const ENV_PREFIX: &str = "TIDEMARK_";
/// The long name of the flag naming the configuration file (also `TIDEMARK_CONFIG`; never a
/// key inside a file).
pub(crate) const CONFIG_FLAG: &str = "config";
/// The long name of the flag that prints the effective configuration and exits (command line
/// only: an env var doing it would turn every start into a print).
pub(crate) const PRINT_FLAG: &str = "print-config";
/// Bytes of one configuration file; a bigger one is refused (it is read whole, at start and on
/// every SIGHUP). 1 MiB is thousands of times a full example (`deploy/tidemark.toml`). No flag:
/// the file cannot set the bound it is read under.
pub(crate) const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// The file key of upstream tables (`[[upstream]]`), also the long name of `--upstream`.
pub(crate) const UPSTREAM_KEY: &str = "upstream";
/// Keys of an `[[upstream]]` table that are not per-upstream flags.
const UPSTREAM_TABLE_NAME: &str = "name";
const UPSTREAM_TABLE_SPEC: &str = "spec";
/// The long-name prefix of per-upstream flags (`--upstream-X NAME[=VALUE]` → table key `X`).
const UPSTREAM_PREFIX: &str = "upstream-";
/// Keys a SIGHUP applies when the file's value changed; any other changed key is logged as
/// "restart needed". (`log-level` is applied by its own flag's reload function; the upstream
/// set — `[[upstream]]` tables and their per-upstream keys, `Config::with_upstream_set_of` —
/// by the server's upstream reload.)
pub(crate) const RELOADABLE_KEYS: &[&str] = &[
    "log-level",
    "upstream",
    "upstream-allow-tools",
    "upstream-deny-tools",
    "upstream-allow-prompts",
    "upstream-deny-prompts",
    "upstream-allow-resources",
    "upstream-deny-resources",
    "upstream-prefix",
    "upstream-policy",
    "upstream-protocol",
    "upstream-auth",
];
/// Keys whose values may hold secrets: `--print-config` prints how many values they have,
/// never the values. A unit test makes every flag whose name suggests a secret (token, key,
/// secret, password, credential, env) either take a path or a number, or be listed here.
pub(crate) const SECRET_KEYS: &[&str] = &["upstream-env"];

/// Where a setting's effective value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The command line.
    Flag,
    /// This environment variable.
    Env(String),
    /// The `--config` file at this path.
    File(PathBuf),
    /// The flag's own default.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// Why the file or the environment cannot be used; every message names the file (and table)
/// or the variable, and the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum LayerError {
    /// The file cannot be read, is not a regular file, or is over `CONFIG_FILE_BYTES_MAX`.
    #[error("--config {path}: {why}")]
    Read { path: String, why: String },
    /// The file is not TOML (the parser's message carries line and column).
    #[error("--config {path}: not valid TOML: {why}")]
    Syntax { path: String, why: String },
    /// A key no flag has; `hint` is ` (did you mean '…'?)` or empty.
    #[error("unknown key '{key}' in {place}{hint}")]
    UnknownKey { key: String, place: String, hint: String },
    /// A key whose TOML value has the wrong type.
    #[error("key '{key}' in {place}: expected {expected}, got {got}")]
    WrongType { key: String, place: String, expected: String, got: &'static str },
    /// A value of the right type that the flag refuses (clap's reason).
    #[error("key '{key}' in {place}: {why}")]
    BadValue { key: String, place: String, why: String },
    /// A `TIDEMARK_*` variable whose value the flag refuses.
    #[error("environment variable {name}: {why}")]
    BadEnv { name: String, why: String },
}

/// The command-line parse failed (usage, `--help`, `--version`: clap prints and exits), or a
/// lower layer is unusable.
#[derive(Debug)]
pub(crate) enum ResolveError {
    Clap(clap::Error),
    Layer(LayerError),
}

/// The values a configuration file gives, by key (after `[[upstream]]` tables are turned into
/// the `upstream` and per-upstream keys), as the strings the flags would take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileValues {
    /// The file they were read from.
    pub(crate) path: PathBuf,
    values: BTreeMap<String, Vec<String>>,
}

impl FileValues {
    /// The file's value(s) of `key` (a flag's long name), if it sets it.
    pub(crate) fn get(&self, key: &str) -> Option<&[String]> {
        self.values.get(key).map(Vec::as_slice)
    }

    /// The keys whose values differ between `self` and `newer` (set, unset or changed).
    pub(crate) fn changed_keys(&self, newer: &FileValues) -> Vec<String> {
        let mut keys: Vec<String> =
            self.values.keys().chain(newer.values.keys()).cloned().collect();
        keys.sort();
        keys.dedup();
        keys.retain(|key| self.values.get(key) != newer.values.get(key));
        keys
    }
}

/// What a re-read of the file changed, by what it takes to apply (`changes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileChanges {
    /// Changed keys in `RELOADABLE_KEYS`: applied without a restart.
    pub(crate) reloadable: Vec<String>,
    /// Changed keys that take effect only after a restart.
    pub(crate) restart_needed: Vec<String>,
    /// Changed keys the environment or the command line set over the file: no effect.
    pub(crate) shadowed: Vec<String>,
}

/// The keys that differ between two reads of the file, sorted by what applying them takes;
/// `shadowed` are the keys a higher layer sets.
pub(crate) fn changes(old: &FileValues, new: &FileValues, shadowed: &[String]) -> FileChanges {
    let mut sorted = FileChanges::default();
    for key in old.changed_keys(new) {
        if shadowed.contains(&key) {
            sorted.shadowed.push(key);
        } else if RELOADABLE_KEYS.contains(&key.as_str()) {
            sorted.reloadable.push(key);
        } else {
            sorted.restart_needed.push(key);
        }
    }
    sorted
}

/// The outcome of `resolve`: clap's matches over all layers, and each key's source.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// Matches of the command over all layers' values.
    pub(crate) matches: ArgMatches,
    /// Each settable key (a long name) and where its value came from, in the command's order.
    pub(crate) sources: Vec<(String, Source)>,
    /// The configuration file's values, when there is one.
    pub(crate) file: Option<FileValues>,
    /// Unknown `TIDEMARK_*` variables, each with the nearest known name (log them).
    pub(crate) warnings: Vec<String>,
    /// `--print-config` was given.
    pub(crate) print: bool,
}

impl Resolved {
    /// Keys set in the file that the env or the command line set too (changing them in the
    /// file does nothing until those go).
    pub(crate) fn shadowed_file_keys(&self) -> Vec<String> {
        let Some(file) = &self.file else { return Vec::new() };
        self.sources
            .iter()
            .filter(|(key, source)| {
                file.get(key).is_some() && matches!(source, Source::Flag | Source::Env(_))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// The env var of a long name: `max-body-bytes` → `TIDEMARK_MAX_BODY_BYTES`.
pub(crate) fn env_name(long: &str) -> String {
    format!("{ENV_PREFIX}{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// The arguments a layer may set: every long flag but `--help`, `--version` and
/// `--print-config`.
pub(crate) fn settable(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|arg| {
        let long = arg.get_long().unwrap_or("help");
        !matches!(long, "help" | "version" | PRINT_FLAG)
            && !matches!(arg.get_action(), ArgAction::Help | ArgAction::Version)
    })
}

/// Repeated flags whose file key also takes a single string: they took one value before
/// they were repeatable (`listen`: a TCP address, now also `unix:PATH` beside it), so a file
/// written then still reads.
const ONE_VALUE_LISTS: &[&str] = &["listen"];

/// How a flag's values are written in TOML.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A switch: a TOML boolean.
    Bool,
    /// A repeated flag: a TOML array of `numeric` integers or strings.
    List { numeric: bool },
    /// One value: an integer when `numeric`, else a string.
    One { numeric: bool },
}

impl Shape {
    fn of(arg: &Arg) -> Shape {
        let numeric = is_numeric(arg);
        match arg.get_action() {
            ArgAction::SetTrue => Shape::Bool,
            ArgAction::Append => Shape::List { numeric },
            _ => Shape::One { numeric },
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Shape::Bool => "a boolean (true or false)",
            Shape::List { numeric: true } => "an array of integers",
            Shape::List { numeric: false } => "an array of strings",
            Shape::One { numeric: true } => "an integer",
            Shape::One { numeric: false } => "a string",
        }
    }
}

/// The flag's value parser yields an integer type (a TOML integer in the file).
pub(crate) fn is_numeric(arg: &Arg) -> bool {
    use std::any::TypeId;
    let id = arg.get_value_parser().type_id();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i8>(),
        TypeId::of::<i16>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<isize>(),
    ]
    .into_iter()
    .any(|t| id == t)
}

/// A per-upstream flag's table key and whether it takes a value (`NAME=…`) or only names the
/// upstream (`NAME`, a boolean in the table).
fn per_upstream_key(arg: &Arg) -> Option<(&str, bool)> {
    let key = arg.get_long()?.strip_prefix(UPSTREAM_PREFIX)?;
    if !matches!(arg.get_action(), ArgAction::Append) {
        return None;
    }
    let value_name = arg.get_value_names()?.first()?.as_str();
    if value_name == "NAME" {
        Some((key, false))
    } else if value_name.starts_with("NAME=") {
        Some((key, true))
    } else {
        None
    }
}

/// Runs `value` through the flag's own value parser (range, enum, address…): clap's reason
/// when refused.
fn check_value(arg: &Arg, value: &str) -> Result<(), String> {
    // A fresh argument with the same parser: the original's `requires` name arguments the
    // probe has not. `--value=…` takes a value starting with '-' as it is.
    let probe_arg = Arg::new("value")
        .long("value")
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    let probe = Command::new("tidemark").arg(probe_arg);
    match probe
        .try_get_matches_from([OsString::from("tidemark"), format!("--value={value}").into()])
    {
        Ok(_) => Ok(()),
        Err(error) => {
            // clap's message (and its possible values), up to its "For more information" line.
            let text = error.to_string().replace(" for '--value <value>'", "");
            let lines: Vec<&str> =
                text.lines().map(str::trim).take_while(|line| !line.is_empty()).collect();
            Err(lines.join(" ").trim_start_matches("error: ").to_owned())
        }
    }
}

/// The nearest of `known` to `key` (edit distance, a `_` spelling of a kebab key first), as
/// ` (did you mean '…'?)`, or empty when none is near.
pub(crate) fn did_you_mean<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> String {
    let kebab = key.replace('_', "-").to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in known {
        let distance = if candidate == kebab { 0 } else { edit_distance(&kebab, candidate) };
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    match best {
        Some((distance, candidate)) if distance <= (key.len() / 3).max(2) => {
            format!(" (did you mean '{candidate}'?)")
        }
        _ => String::new(),
    }
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The strings the flag would take for one TOML value of `key`.
fn toml_values(
    arg: &Arg,
    key: &str,
    place: &str,
    value: &toml::Value,
) -> Result<Vec<String>, LayerError> {
    let shape = Shape::of(arg);
    let wrong = |got: &toml::Value| LayerError::WrongType {
        key: key.to_owned(),
        place: place.to_owned(),
        expected: shape.expected().to_owned(),
        got: got.type_str(),
    };
    let scalar = |numeric: bool, item: &toml::Value| match item {
        toml::Value::Integer(n) if numeric => Ok(n.to_string()),
        toml::Value::String(s) if !numeric => Ok(s.clone()),
        other => Err(wrong(other)),
    };
    let values = match (shape, value) {
        (Shape::Bool, toml::Value::Boolean(b)) => vec![b.to_string()],
        (Shape::List { numeric }, toml::Value::Array(items)) => {
            items.iter().map(|item| scalar(numeric, item)).collect::<Result<_, _>>()?
        }
        // A repeated flag that once took one value still takes one (`listen = "…"`).
        (Shape::List { numeric }, item) if ONE_VALUE_LISTS.contains(&key) && !item.is_table() => {
            vec![scalar(numeric, item)?]
        }
        (Shape::One { numeric }, item) if !item.is_array() && !item.is_table() => {
            vec![scalar(numeric, item)?]
        }
        (_, other) => return Err(wrong(other)),
    };
    for one in &values {
        check_value(arg, one).map_err(|why| LayerError::BadValue {
            key: key.to_owned(),
            place: place.to_owned(),
            why,
        })?;
    }
    Ok(values)
}

/// Reads and checks a configuration file against `cmd`'s flags: every key known, every value of
/// the flag's type and accepted by it. Used at start and again on SIGHUP.
pub(crate) fn read_file(cmd: &Command, path: &Path) -> Result<FileValues, LayerError> {
    let shown = path.display().to_string();
    let read_error = |why: String| LayerError::Read { path: shown.clone(), why };
    let text = crate::fsread::read_text(path, CONFIG_FILE_BYTES_MAX)
        .map_err(|e| read_error(e.to_string()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| LayerError::Syntax {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    let by_key: BTreeMap<&str, &Arg> = settable(cmd)
        .filter(|arg| arg.get_long() != Some(CONFIG_FLAG))
        .filter_map(|arg| Some((arg.get_long()?, arg)))
        .collect();
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, value) in &table {
        if key == CONFIG_FLAG {
            let why = "a configuration file cannot name another one".to_owned();
            return Err(LayerError::BadValue { key: key.clone(), place: shown.clone(), why });
        }
        let tables = match value {
            toml::Value::Array(items) if key == UPSTREAM_KEY => {
                items.iter().any(toml::Value::is_table)
            }
            _ => false,
        };
        if tables {
            let toml::Value::Array(items) = value else { unreachable!("checked above") };
            upstream_tables(&by_key, &shown, items, &mut values)?;
            continue;
        }
        let Some(arg) = by_key.get(key.as_str()) else {
            let hint = did_you_mean(key, by_key.keys().copied());
            return Err(LayerError::UnknownKey { key: key.clone(), place: shown.clone(), hint });
        };
        let parsed = toml_values(arg, key, &shown, value)?;
        values.entry(key.clone()).or_default().extend(parsed);
    }
    Ok(FileValues { path: path.to_owned(), values })
}

/// `[[upstream]]` tables → `upstream` values (`NAME=SPEC`) and per-upstream flag values
/// (`NAME` or `NAME=VALUE`), appended to `values`.
fn upstream_tables(
    by_key: &BTreeMap<&str, &Arg>,
    path: &str,
    items: &[toml::Value],
    values: &mut BTreeMap<String, Vec<String>>,
) -> Result<(), LayerError> {
    let per_upstream: BTreeMap<&str, (&Arg, bool)> = by_key
        .values()
        .filter_map(|arg| per_upstream_key(arg).map(|(key, valued)| (key, (*arg, valued))))
        .collect();
    for (index, item) in items.iter().enumerate() {
        let place = format!("{path}, table [[upstream]] #{}", index + 1);
        let toml::Value::Table(table) = item else {
            let got = item.type_str();
            let expected = "a table (all [[upstream]] entries are tables)".to_owned();
            return Err(LayerError::WrongType { key: UPSTREAM_KEY.into(), place, expected, got });
        };
        let (name, upstream, place) = table_head(table, place)?;
        if let Some(arg) = by_key.get(UPSTREAM_KEY) {
            check_value(arg, &upstream).map_err(|why| LayerError::BadValue {
                key: UPSTREAM_TABLE_SPEC.into(),
                place: place.clone(),
                why,
            })?;
        }
        values.entry(UPSTREAM_KEY.to_owned()).or_default().push(upstream);
        for (key, value) in table {
            if key == UPSTREAM_TABLE_NAME || key == UPSTREAM_TABLE_SPEC {
                continue;
            }
            let Some(&(arg, valued)) = per_upstream.get(key.as_str()) else {
                let known = [UPSTREAM_TABLE_NAME, UPSTREAM_TABLE_SPEC].into_iter();
                let hint = did_you_mean(key, known.chain(per_upstream.keys().copied()));
                return Err(LayerError::UnknownKey { key: key.clone(), place, hint });
            };
            let Some(name) = &name else {
                let why = "a per-upstream key needs the table's 'name'".to_owned();
                return Err(LayerError::BadValue { key: key.clone(), place, why });
            };
            let long = arg.get_long().unwrap_or_default().to_owned();
            let given = table_key_values(name, key, valued, value, &place)?;
            for one in &given {
                check_value(arg, one).map_err(|why| LayerError::BadValue {
                    key: key.clone(),
                    place: place.clone(),
                    why,
                })?;
            }
            values.entry(long).or_default().extend(given);
        }
    }
    Ok(())
}

/// A `[[upstream]]` table's `name` and `spec`: the name, the `--upstream` value they make
/// (`NAME=SPEC`, or `SPEC`) and the table's place (its name added) for later errors.
fn table_head(
    table: &toml::map::Map<String, toml::Value>,
    mut place: String,
) -> Result<(Option<String>, String, String), LayerError> {
    let text = |key: &str| match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(LayerError::WrongType {
            key: key.to_owned(),
            place: place.clone(),
            expected: "a string".into(),
            got: other.type_str(),
        }),
    };
    let name = text(UPSTREAM_TABLE_NAME)?;
    let Some(spec) = text(UPSTREAM_TABLE_SPEC)? else {
        let why = "missing (the 'stdio:…' command or 'http://…' URL)".to_owned();
        return Err(LayerError::BadValue { key: UPSTREAM_TABLE_SPEC.into(), place, why });
    };
    if let Some(name) = &name {
        place = format!("{place} (name '{name}')");
    }
    let upstream = match &name {
        Some(name) => format!("{name}={spec}"),
        None => spec,
    };
    Ok((name, upstream, place))
}

/// The values one per-upstream key of a `[[upstream]]` table (named `name`) gives its flag:
/// a switch (`valued` false) names the upstream when true, a valued key gives `NAME=VALUE`
/// per string; `place` says where, for the error.
fn table_key_values(
    name: &str,
    key: &str,
    valued: bool,
    value: &toml::Value,
    place: &str,
) -> Result<Vec<String>, LayerError> {
    let key = key.to_owned();
    Ok(match (valued, value) {
        (false, toml::Value::Boolean(on)) => {
            if *on {
                vec![name.to_owned()]
            } else {
                vec![]
            }
        }
        (true, toml::Value::String(s)) => vec![format!("{name}={s}")],
        (true, toml::Value::Array(list)) => list
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(format!("{name}={s}")),
                other => Err(other.type_str()),
            })
            .collect::<Result<_, _>>()
            .map_err(|got| LayerError::WrongType {
                key: key.clone(),
                place: place.to_owned(),
                expected: "a string or an array of strings".into(),
                got,
            })?,
        (valued, other) => {
            let expected = if valued { "a string or an array of strings" } else { "a boolean" };
            return Err(LayerError::WrongType {
                key,
                place: place.to_owned(),
                expected: expected.into(),
                got: other.type_str(),
            });
        }
    })
}

/// One env var's values for `arg`: a switch takes true/false (1/0, yes/no, on/off too), a
/// repeated flag one value per line, any other flag the whole value.
fn env_values(arg: &Arg, name: &str, value: &str) -> Result<Vec<String>, LayerError> {
    let bad = |why: String| LayerError::BadEnv { name: name.to_owned(), why };
    let values = match Shape::of(arg) {
        Shape::Bool => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => vec!["true".to_owned()],
            "false" | "0" | "no" | "off" | "" => vec!["false".to_owned()],
            _ => return Err(bad(format!("expected true or false, got {value:?}"))),
        },
        Shape::List { .. } => {
            value.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
        }
        Shape::One { .. } => vec![value.to_owned()],
    };
    for one in &values {
        check_value(arg, one).map_err(bad)?;
    }
    Ok(values)
}

/// Parses `argv` (the program name first) with `env`'s `TIDEMARK_*` variables and the
/// `--config` file (from the command line, else `TIDEMARK_CONFIG`) under it: for each flag the
/// command line's value, else the env's, else the file's, else its default. A repeated flag
/// takes the whole list of the highest layer that sets it (lists are not merged across layers).
pub(crate) fn resolve(
    cmd: Command,
    argv: &[OsString],
    env: &[(String, String)],
) -> Result<Resolved, ResolveError> {
    // What the command line itself sets, before the lower layers' values are known (so a flag
    // `requires` whose partner is in the file does not fail here).
    let probe = match cmd.clone().ignore_errors(true).try_get_matches_from(argv) {
        Ok(probe) => probe,
        Err(_) => match cmd.clone().try_get_matches_from(argv) {
            Err(error) => return Err(ResolveError::Clap(error)),
            Ok(matches) => matches,
        },
    };
    let id_of = |long: &str| {
        cmd.get_arguments().find(|a| a.get_long() == Some(long)).map(|a| a.get_id().to_string())
    };
    let on_command_line = |id: &str| probe.value_source(id) == Some(ValueSource::CommandLine);

    let mut warnings = Vec::new();
    let by_env: BTreeMap<String, &Arg> =
        settable(&cmd).filter_map(|arg| Some((env_name(arg.get_long()?), arg))).collect();
    let mut env_given: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for (name, value) in env {
        if !name.starts_with(ENV_PREFIX) {
            continue;
        }
        let Some(arg) = by_env.get(name) else {
            // Compared as a long name, suggested as the variable.
            let as_long = name[ENV_PREFIX.len()..].to_ascii_lowercase().replace('_', "-");
            let longs = settable(&cmd).filter_map(Arg::get_long);
            let hint = match did_you_mean(&as_long, longs).split('\'').nth(1) {
                Some(long) => format!(" (did you mean {}?)", env_name(long)),
                None => String::new(),
            };
            warnings.push(format!("unknown environment variable {name} ignored{hint}"));
            continue;
        };
        let values = env_values(arg, name, value).map_err(ResolveError::Layer)?;
        env_given.insert(arg.get_id().to_string(), (name.clone(), values));
    }

    let config_id = id_of(CONFIG_FLAG);
    let config_path = match &config_id {
        Some(id) if on_command_line(id) => {
            probe.get_raw(id).and_then(|mut raw| raw.next()).map(PathBuf::from)
        }
        Some(id) => env_given.get(id).and_then(|(_, v)| v.first()).map(PathBuf::from),
        None => None,
    };
    let file = match &config_path {
        Some(path) => Some(read_file(&cmd, path).map_err(ResolveError::Layer)?),
        None => None,
    };

    // The lower layers' values become arguments before the command line's, for the flags the
    // command line does not set: clap then checks types, ranges and `requires` across layers.
    let mut sources = Vec::new();
    let mut full_argv: Vec<OsString> = argv.iter().take(1).cloned().collect();
    for arg in settable(&cmd) {
        let (Some(long), id) = (arg.get_long(), arg.get_id().to_string()) else { continue };
        let lower = if on_command_line(&id) {
            sources.push((long.to_owned(), Source::Flag));
            continue;
        } else if let Some((name, values)) = env_given.get(&id) {
            sources.push((long.to_owned(), Source::Env(name.clone())));
            values.as_slice()
        } else if let Some((path, values)) =
            file.as_ref().and_then(|f| Some((f.path.clone(), f.get(long)?)))
        {
            sources.push((long.to_owned(), Source::File(path)));
            values
        } else {
            sources.push((long.to_owned(), Source::Default));
            continue;
        };
        for value in lower {
            match Shape::of(arg) {
                Shape::Bool if value == "true" => full_argv.push(format!("--{long}").into()),
                Shape::Bool => {}
                _ => full_argv.push(format!("--{long}={value}").into()),
            }
        }
    }
    full_argv.extend(argv.iter().skip(1).cloned());
    let print_id = id_of(PRINT_FLAG);
    let matches = cmd.try_get_matches_from(full_argv).map_err(ResolveError::Clap)?;
    let print = print_id.is_some_and(|id| matches.get_flag(&id));
    Ok(Resolved { matches, sources, file, warnings, print })
}

/// The effective configuration as TOML that `--config` loads again, each key under a comment
/// naming its source. Secrets (`SECRET_KEYS`) are counted, never printed; secrets inside other
/// values are redacted (`literal`); unset options and the `--config` path itself appear as
/// comments.
pub(crate) fn print_config(cmd: &Command, resolved: &Resolved) -> String {
    let mut out = String::from(
        "# tidemark --print-config: the effective configuration (load it with --config FILE).\n\
         # Above each key: its source (flag, env NAME, file PATH or default).\n",
    );
    for (arg, (key, source)) in settable(cmd).zip(&resolved.sources) {
        let id = arg.get_id().as_str();
        out.push('\n');
        out.push_str(&format!("# {source}\n"));
        let shape = Shape::of(arg);
        if shape == Shape::Bool {
            let on = resolved.matches.get_flag(id);
            out.push_str(&format!("{key} = {on}\n"));
            continue;
        }
        let values: Option<Vec<String>> = resolved
            .matches
            .get_raw(id)
            .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect());
        if key == CONFIG_FLAG {
            match values.and_then(|v| v.into_iter().next()) {
                Some(path) => {
                    out.push_str(&format!("# {key} = {}  (not a file key)\n", toml_string(&path)))
                }
                None => out.push_str(&format!("# {key} = (none)\n")),
            }
            continue;
        }
        match (values, shape) {
            (None, Shape::List { .. }) => out.push_str(&format!("{key} = []\n")),
            (None, _) => out.push_str(&format!("# {key} = (unset)\n")),
            (Some(values), _) if SECRET_KEYS.contains(&key.as_str()) => out.push_str(&format!(
                "# {key} = [{} value(s) withheld: may hold secrets]\n",
                values.len()
            )),
            (Some(values), Shape::List { numeric }) => {
                let items: Vec<String> = values.iter().map(|v| literal(v, numeric)).collect();
                out.push_str(&format!("{key} = [{}]\n", items.join(", ")));
            }
            (Some(values), Shape::One { numeric }) => {
                let one = values.first().map(|v| literal(v, numeric)).unwrap_or_default();
                out.push_str(&format!("{key} = {one}\n"));
            }
            (Some(_), Shape::Bool) => unreachable!("handled above"),
        }
    }
    out
}

/// A value as a TOML literal: an integer flag's bare, anything else a quoted string with the
/// secrets embedded in it redacted (a URL's password, secret-looking query parameters and
/// `--flag=value` pairs: `redact`).
fn literal(value: &str, numeric: bool) -> String {
    match value.parse::<i64>() {
        Ok(n) if numeric => n.to_string(),
        _ => toml_string(&crate::redact::redact(value)),
    }
}

/// A TOML basic string, escaped by the toml crate.
fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_owned()).to_string()
}
