//! Goal: the documentation cannot drift from the binary or from itself (issue 21 item 6).
//!
//! - `docs/flags.md`'s flag table is rendered from the same clap `Command` as `tidemark
//!   --help` (`Config::command()`), with each default's constant read from the flags' source; the
//!   committed table must equal the rendering. `UPDATE_DOCS=1 cargo test --test docs` rewrites
//!   it. Every hand-written table whose first column is `flag` names only flags `--help` has,
//!   and a default it states (a number or a `literal`) is the one `--help` has.
//! - Every relative link of `README.md` and `docs/*.md` names a file that exists, every
//!   `#anchor` (in the file or another `.md`) names a heading by GitHub's slug rules, and every
//!   `docs/*.md` is reachable from `README.md` by links. External `http(s)` links are counted
//!   and listed, never fetched (CI must not depend on other sites).
//! - Every `CONTRACT §n` (or `contract.md §n`, with its `step k`) cited in `src/`, `README.md`
//!   or `docs/*.md` names a section (and a step of it) that `docs/contract.md` has (issue 39
//!   item 7).
//! - `docs/architecture.md`'s module table and `src/lib.rs`'s map of floors name exactly the
//!   modules `src/lib.rs` declares, both ways (issue 39 item 6).
//! - `README.md` is a front page: at most `README_MAX_LINES` lines; details live in `docs/`
//!   (issue 39 item 7).
//!
//! Method: plain text parsing (fenced code blocks and code spans are not markdown links). Each
//! failure names `file:line`. The checkers are first run on small made-up inputs, so the tests
//! are known to fail when the rules are broken.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

const FLAGS_DOC: &str = "docs/flags.md";
const FLAGS_BEGIN: &str = "<!-- BEGIN flags: generated from `tidemark --help` by tests/docs.rs; \
                           regenerate with `UPDATE_DOCS=1 cargo test --test docs` -->";
const FLAGS_END: &str = "<!-- END flags -->";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// Flags: the table rendered from clap's Command.

/// Field name → the `config::NAME` constants its `#[arg(…)]` attribute names, read from the
/// source of the flags (`src/cli.rs` or `src/cli/**.rs`, and the sections in `src/config/`).
fn flag_constants(sources: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut constants = BTreeMap::new();
    for text in sources {
        let mut attribute: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("//") {
                continue;
            }
            if trimmed.starts_with("#[arg") {
                attribute = Some(String::new());
            }
            if let Some(attr) = attribute.as_mut() {
                if let Some(field) = field_name(trimmed) {
                    let names = config_names(attr);
                    constants.insert(format!("--{}", field.replace('_', "-")), names);
                    attribute = None;
                } else {
                    attr.push_str(trimmed);
                    attr.push(' ');
                }
            }
        }
    }
    constants
}

/// `name: Type,` (a struct field) → `name`.
fn field_name(line: &str) -> Option<&str> {
    let line =
        line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
    let (name, rest) = line.split_once(':')?;
    let is_ident = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    (is_ident && !rest.starts_with(':') && line.ends_with(',')).then_some(name)
}

fn config_names(text: &str) -> Vec<String> {
    // A constant is a SCREAMING_CASE path segment outside string literals: `config::A_MAX`
    // in `cli.rs`, a bare `A_MAX` in the section files of `src/config/`.
    let mut names = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in text.chars().chain([' ']) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        let constant = word.len() > 1
            && word.starts_with(|c: char| c.is_ascii_uppercase())
            && word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if constant && !names.contains(&word) {
            names.push(word.clone());
        }
        word.clear();
    }
    names
}

/// Text for a table cell: one line, no `|` splitting the row, no `<…>` taken for HTML.
fn cell(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.replace('|', "\\|").replace('<', "&lt;")
}

fn render_flags_table(
    command: &clap::Command,
    constants: &BTreeMap<String, Vec<String>>,
) -> String {
    let mut out = String::from(
        "| flag | default | constant | what it sets (its `--help` text) |\n| --- | --- | --- | --- |\n",
    );
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" || long == "version" {
            continue;
        }
        let flag = format!("--{long}");
        let defaults: Vec<String> =
            arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = if defaults.is_empty() {
            "—".to_string()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let constant = match constants.get(&flag) {
            Some(names) if !names.is_empty() => {
                names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            }
            _ => "—".to_string(),
        };
        let help =
            arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
        let mut help = cell(&help);
        let takes_values = arg.get_action().takes_values();
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if takes_values && !values.is_empty() {
            help.push_str(&format!("; values: {}", values.join(", ")));
        }
        if matches!(arg.get_action(), clap::ArgAction::Append) && !help.contains("repeatable") {
            help.push_str("; repeatable");
        }
        out.push_str(&format!("| `{flag}` | {default} | {constant} | {help} |\n"));
    }
    out
}

fn cli_sources() -> Vec<String> {
    let root = repo_root().join("src");
    let mut files = vec![root.join("cli.rs")];
    // The flags live in `cli.rs` and, a struct per section, in `src/config/`.
    let mut folders = vec![root.join("cli"), root.join("config")];
    while let Some(dir) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect()
}

/// The committed text between the markers, or why there is none.
fn generated_region(doc: &str) -> Result<(usize, usize), String> {
    let begin = doc.find(FLAGS_BEGIN).ok_or("the BEGIN marker is missing")? + FLAGS_BEGIN.len();
    let end = doc[begin..].find(FLAGS_END).ok_or("the END marker is missing")? + begin;
    Ok((begin, end))
}

#[test]
fn flags_table_is_the_rendering_of_help() {
    let command = tidemark::Config::command();
    let table = render_flags_table(&command, &flag_constants(&cli_sources()));
    let path = repo_root().join(FLAGS_DOC);
    let doc = std::fs::read_to_string(&path).expect("docs/flags.md");
    let (begin, end) = generated_region(&doc).unwrap_or_else(|e| panic!("{FLAGS_DOC}: {e}"));
    let committed = doc[begin..end].trim_matches('\n');
    let rendered = table.trim_matches('\n');
    if committed == rendered {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}\n{}\n{}", &doc[..begin], rendered, &doc[end..]);
        std::fs::write(&path, updated).expect("write docs/flags.md");
        eprintln!("docs: rewrote the flag table of {FLAGS_DOC}");
        return;
    }
    let first_line = doc[..begin].lines().count() + 1;
    let (ours, theirs): (Vec<&str>, Vec<&str>) =
        (committed.lines().collect(), rendered.lines().collect());
    let differs = (0..ours.len().max(theirs.len()))
        .find(|&n| ours.get(n) != theirs.get(n))
        .unwrap_or_default();
    let (line, ours, theirs) = (
        first_line + differs,
        ours.get(differs).copied().unwrap_or("(no line)"),
        theirs.get(differs).copied().unwrap_or("(no line)"),
    );
    panic!(
        "{FLAGS_DOC}:{line}: the flag table differs from `tidemark --help`\n  committed: {ours}\n  \
         rendered:  {theirs}\n({} committed rows, {} rendered). Fix: UPDATE_DOCS=1 cargo test \
         --test docs",
        committed.lines().count(),
        rendered.lines().count()
    );
}

/// One row of a hand-written table whose header starts with `flag`.
struct FlagRow {
    at: String,
    flags: Vec<String>,
    default: Option<String>,
}

fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        if c == '|' && !escaped {
            cells.push(String::new());
        } else if let Some(last) = cells.last_mut() {
            last.push(c);
        }
        escaped = c == '\\';
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

fn hand_written_flag_rows(name: &str, text: &str) -> Vec<FlagRow> {
    let mut rows = Vec::new();
    let (mut in_flag_table, mut has_default, mut generated) = (false, false, false);
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("<!-- BEGIN flags") {
            generated = true;
        } else if line.starts_with(FLAGS_END) {
            generated = false;
        }
        if generated || !line.trim_start().starts_with('|') {
            in_flag_table = false;
            continue;
        }
        let cells = split_row(line);
        if cells.first().is_some_and(|c| c == "flag") {
            in_flag_table = true;
            has_default = cells.get(1).is_some_and(|c| c == "default");
            continue;
        }
        if !in_flag_table || cells.first().is_none_or(|c| c.starts_with("---")) {
            continue;
        }
        let first = &cells[0];
        if !first.starts_with("`--") {
            continue;
        }
        let flags: Vec<String> = first
            .split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|span| span.split_whitespace().next())
            .filter(|f| f.starts_with("--"))
            .map(str::to_string)
            .collect();
        let default = (has_default && flags.len() == 1).then(|| cells.get(1).cloned()).flatten();
        rows.push(FlagRow { at: format!("{name}:{}", n + 1), flags, default });
    }
    rows
}

/// A stated default's value: a leading number, or a leading `literal`; anything else
/// ("cores", "off", "none") is prose, not compared.
fn stated_default(cell: &str) -> Option<String> {
    if let Some(rest) = cell.strip_prefix('`') {
        return rest.split('`').next().map(str::to_string);
    }
    let number: String = cell.chars().take_while(char::is_ascii_digit).collect();
    (!number.is_empty()).then_some(number)
}

fn check_flag_rows(rows: &[FlagRow], command: &clap::Command) -> Vec<String> {
    let mut problems = Vec::new();
    for row in rows {
        for flag in &row.flags {
            let long = &flag[2..];
            let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(long)) else {
                problems.push(format!("{}: {flag} is no flag of `tidemark --help`", row.at));
                continue;
            };
            let help_default: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let (Some(cell), false) = (&row.default, help_default.is_empty()) else { continue };
            if let Some(stated) = stated_default(cell) {
                let actual = help_default.join(",");
                if stated != actual {
                    problems.push(format!(
                        "{}: {flag}'s default is {stated} here but {actual} in `tidemark --help`",
                        row.at
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn hand_written_flag_tables_agree_with_help() {
    let command = tidemark::Config::command();
    let mut rows = Vec::new();
    for (name, text) in markdown_files() {
        rows.extend(hand_written_flag_rows(&name, &text));
    }
    assert!(
        rows.len() > 20,
        "found only {} hand-written flag rows: is the parser blind?",
        rows.len()
    );
    let problems = check_flag_rows(&rows, &command);
    assert!(problems.is_empty(), "flag tables disagree with --help:\n{}", problems.join("\n"));
}

#[test]
fn flag_checks_fail_on_made_up_drift() {
    let command = clap::Command::new("t")
        .arg(clap::Arg::new("a").long("alpha").default_value("5"))
        .arg(clap::Arg::new("b").long("beta-name").default_value("x"));
    let doc = "| flag | default | what |\n| --- | --- | --- |\n| `--alpha` | 6 (why) | a |\n\
               | `--beta-name N` | `x` | b |\n| `--gone` | 1 | c |\n| `--alpha`, `--beta-name` | 9 | d |\n";
    let problems = check_flag_rows(&hand_written_flag_rows("t.md", doc), &command);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].starts_with("t.md:3: --alpha's default is 6"), "{problems:#?}");
    assert!(problems[1].starts_with("t.md:5: --gone is no flag"), "{problems:#?}");

    let source = "struct Flags {\n    /// Help.\n    #[arg(long, default_value_t = config::A_MAX,\n          \
                  value_parser = x(config::B_MIN))]\n    some_flag: u8,\n    #[arg(long)]\n    other: bool,\n}\n";
    let constants = flag_constants(&[source.to_string()]);
    assert_eq!(constants["--some-flag"], ["A_MAX", "B_MIN"]);
    assert!(constants["--other"].is_empty());
    let table = render_flags_table(&command, &constants);
    assert!(table.contains("| `--alpha` | `5` | — |"), "{table}");
}

// ---------------------------------------------------------------------------------------------
// Links.

/// `README.md` and every `docs/*.md`, by path relative to the repository.
fn markdown_files() -> BTreeMap<String, String> {
    let root = repo_root();
    let mut files = BTreeMap::new();
    files.insert("README.md".to_string(), std::fs::read_to_string(root.join("README.md")).unwrap());
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    files
}

/// GitHub's heading anchor: lower case, everything but letters, digits, `_`, `-` and spaces
/// dropped, spaces to `-` (github-slugger); inline markup is not part of the text.
fn slug(heading: &str) -> String {
    let text = strip_inline_markup(heading);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Rendered text of inline markdown: code-span ticks, emphasis stars, link targets and HTML
/// tags removed.
fn strip_inline_markup(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '[' {
            if let Some(close) = rest.find("](") {
                if let Some(end) = rest[close..].find(')') {
                    out.push_str(&rest[1..close]);
                    rest = &rest[close + end + 1..];
                    continue;
                }
            }
        }
        if c == '<' {
            if let Some(end) = rest.find('>') {
                rest = &rest[end + 1..];
                continue;
            }
        }
        if c != '`' && c != '*' {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A markdown file's lines with fenced code blocks blanked (line numbers kept) and code spans
/// replaced by spaces, so neither yields headings or links.
fn prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            lines.push(String::new());
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(if trimmed.starts_with("```") { "```" } else { "~~~" });
            lines.push(String::new());
            continue;
        }
        lines.push(line.to_string());
    }
    lines
}

fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}

/// The anchors of a markdown file: its headings' slugs (a repeated slug gets `-1`, `-2`, …)
/// and explicit `id="…"` / `name="…"` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let heading = line[hashes..].trim().trim_end_matches('#').trim();
            let base = slug(heading);
            let count = seen.entry(base.clone()).or_insert(0);
            anchors.insert(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
            *count += 1;
        }
        for attr in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attr) {
                let value = &line[at + attr.len()..];
                if let Some(end) = value.find('"') {
                    anchors.insert(value[..end].to_string());
                }
            }
        }
    }
    anchors
}

/// Every link target of a file with its line: `[text](target)`, `![alt](target)`,
/// `[label]: target` definitions and `<http…>` autolinks.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text).iter().enumerate() {
        let line = without_code_spans(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if let Some((label, target)) = trimmed.split_once("]:") {
                if !label.contains(']') {
                    found.push((n + 1, target.split_whitespace().next().unwrap_or("").to_string()));
                    continue;
                }
            }
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let target_end = after.find(')').unwrap_or(after.len());
            let target = after[..target_end].split_whitespace().next().unwrap_or("");
            found.push((n + 1, target.trim_matches(|c| c == '<' || c == '>').to_string()));
            rest = &after[target_end..];
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("<http") {
            let after = &rest[at + 1..];
            let end = after.find('>').unwrap_or(after.len());
            found.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// `base`'s folder joined with `target`, `.` and `..` resolved; `None` when it leaves the
/// repository.
fn resolve(base: &str, target: &str) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let joined = if let Some(from_root) = target.strip_prefix('/') {
        PathBuf::from(from_root)
    } else {
        Path::new(base).parent().unwrap_or(Path::new("")).join(target)
    };
    for component in joined.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.join("/"))
}

#[derive(Default)]
struct LinkReport {
    problems: Vec<String>,
    relative: usize,
    with_anchor: usize,
    external: Vec<String>,
}

/// Checks every link of `files` (path → text). `exists` answers for paths that are not one of
/// `files` (sources, scripts, folders).
fn check_links(files: &BTreeMap<String, String>, exists: &dyn Fn(&str) -> bool) -> LinkReport {
    let anchors_of: BTreeMap<&str, BTreeSet<String>> =
        files.iter().map(|(name, text)| (name.as_str(), anchors(text))).collect();
    let mut report = LinkReport::default();
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in files {
        for (line, target) in links(text) {
            let at = format!("{name}:{line}");
            if target.starts_with("http://") || target.starts_with("https://") {
                report.external.push(format!("{at}: {target}"));
                continue;
            }
            if target.starts_with("mailto:") {
                continue;
            }
            if target.is_empty() {
                report.problems.push(format!("{at}: a link with no target"));
                continue;
            }
            report.relative += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { Some(name.clone()) } else { resolve(name, path) };
            let Some(file) = file else {
                report.problems.push(format!("{at}: {target} leaves the repository"));
                continue;
            };
            let is_doc = files.contains_key(&file);
            if !is_doc && !exists(&file) {
                report.problems.push(format!("{at}: {target}: no file {file}"));
                continue;
            }
            if is_doc {
                edges.entry(name.as_str()).or_default().insert(file.clone());
            }
            let Some(anchor) = anchor else { continue };
            report.with_anchor += 1;
            match anchors_of.get(file.as_str()) {
                Some(known) if !known.contains(anchor) => report
                    .problems
                    .push(format!("{at}: {target}: no heading of {file} has the anchor #{anchor}")),
                Some(_) => {}
                // An anchor into a file that is no markdown here (a line of a source): not ours.
                None => {}
            }
        }
    }
    let mut reached = BTreeSet::from(["README.md".to_string()]);
    let mut queue = VecDeque::from(["README.md".to_string()]);
    while let Some(file) = queue.pop_front() {
        for next in edges.get(file.as_str()).into_iter().flatten() {
            if reached.insert(next.clone()) {
                queue.push_back(next.clone());
            }
        }
    }
    for name in files.keys() {
        if !reached.contains(name) {
            report.problems.push(format!(
                "{name}:1: not reachable by links from README.md (link it from docs/README.md)"
            ));
        }
    }
    report
}

#[test]
fn links_and_anchors_resolve_and_every_doc_is_reachable() {
    let root = repo_root();
    let files = markdown_files();
    let report = check_links(&files, &|path| root.join(path).exists());
    println!(
        "docs: {} files, {} relative links checked ({} with an anchor), {} external links not \
         fetched:",
        files.len(),
        report.relative,
        report.with_anchor,
        report.external.len()
    );
    for link in &report.external {
        println!("  {link}");
    }
    assert!(
        report.relative > 20,
        "only {} relative links found: is the parser blind?",
        report.relative
    );
    assert!(
        report.problems.is_empty(),
        "broken documentation links:\n{}",
        report.problems.join("\n")
    );
}

#[test]
fn link_checks_fail_on_made_up_breakage() {
    let files = BTreeMap::from([
        (
            "README.md".to_string(),
            "# Top\n\n## Two `commands` (here)\n\n[a](#two-commands-here) [b](docs/a.md#deep-one) \
             [c](#nowhere)\n```\n[not](a/link.md)\n# not a heading\n```\n`[code](x.md)` \
             [d](docs/a.md#deep-one-1) [e](src/lib.rs#L3) [f](missing.rs) <https://example.com>\n"
                .to_string(),
        ),
        (
            "docs/a.md".to_string(),
            "# A\n## Deep one\n## Deep one\n[up](../README.md#top)\n".to_string(),
        ),
        ("docs/orphan.md".to_string(), "# Orphan\n[x](../../outside.md)\n".to_string()),
    ]);
    let report = check_links(&files, &|path| path == "src/lib.rs");
    let problems = &report.problems;
    assert_eq!(
        problems,
        &[
            "README.md:5: #nowhere: no heading of README.md has the anchor #nowhere",
            "README.md:10: missing.rs: no file missing.rs",
            "docs/orphan.md:2: ../../outside.md leaves the repository",
            "docs/orphan.md:1: not reachable by links from README.md (link it from docs/README.md)",
        ],
        "{problems:#?}"
    );
    assert_eq!(report.external, ["README.md:10: https://example.com"]);
    assert_eq!(
        slug("End to end (`loadtest/`, `scripts/compare.sh`)"),
        "end-to-end-loadtest-scriptscomparesh"
    );
    assert_eq!(slug("What a client sees (legacy sessions)"), "what-a-client-sees-legacy-sessions");
    assert_eq!(slug("2026-07-28: the `tasks/*` extension"), "2026-07-28-the-tasks-extension");
}

// ---------------------------------------------------------------------------------------------
// The wire contract's citations.

const CONTRACT_DOC: &str = "docs/contract.md";

/// `docs/contract.md`'s sections (`## 4. Title` → `4`), each with the numbers of its numbered
/// steps (a line `2. …` inside the section).
fn contract_sections(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in prose_lines(text) {
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading.split_once(". ").map(|(n, _)| n.to_string());
            if let Some(n) = &current {
                sections.entry(n.clone()).or_default();
            }
            continue;
        }
        let (Some(section), Some((step, _))) = (&current, line.split_once(". ")) else { continue };
        if !step.is_empty() && step.chars().all(|c| c.is_ascii_digit()) {
            sections.entry(section.clone()).or_default().insert(step.to_string());
        }
    }
    sections
}

/// A section number at the start of `text` (`4`, `10`, `4.2`; a sentence's full stop is not
/// part of it) and the rest.
fn section_number(text: &str) -> Option<(String, &str)> {
    let mut end = text.chars().take_while(char::is_ascii_digit).count();
    if end == 0 {
        return None;
    }
    while text[end..].starts_with('.') && text[end + 1..].starts_with(|c: char| c.is_ascii_digit())
    {
        end += 1 + text[end + 1..].chars().take_while(char::is_ascii_digit).count();
    }
    Some((text[..end].to_string(), &text[end..]))
}

/// The steps of `step 2`, `steps 2–4`, `steps 2 and 3`, `steps 1, 2` (a range counts each
/// number in it) at the start of `text`, and the rest.
fn cited_steps(text: &str) -> (Vec<String>, &str) {
    let Some(mut rest) = text.strip_prefix(" steps ").or(text.strip_prefix(" step ")) else {
        return (Vec::new(), text);
    };
    let mut steps = Vec::new();
    let mut range_from: Option<u32> = None;
    loop {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = digits.parse::<u32>() else { break };
        let from = range_from.take().map_or(n, |first| first + 1);
        steps.extend((from..=n.max(from)).map(|s| s.to_string()));
        rest = &rest[digits.len()..];
        if let Some(after) = rest.strip_prefix('–').or(rest.strip_prefix('-')) {
            range_from = Some(n);
            rest = after;
        } else if let Some(after) = rest.strip_prefix(" and ").or(rest.strip_prefix(", ")) {
            if !after.starts_with(|c: char| c.is_ascii_digit()) {
                break;
            }
            rest = after;
        } else {
            break;
        }
    }
    (steps, rest)
}

/// Every contract citation of a source file: `CONTRACT §4`, `CONTRACT §4 step 2`, `CONTRACT
/// §4, §5` or `contract.md §n`, also when a comment's line break falls after `CONTRACT`.
/// Returns (`file:line`, section, steps).
fn contract_citations(name: &str, text: &str) -> Vec<(String, String, Vec<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        for marker in ["CONTRACT", "contract.md"] {
            for (at, _) in line.match_indices(marker) {
                let next = lines.get(n + 1).map_or("", |l| {
                    l.trim_start().trim_start_matches('/').trim_start_matches('!').trim_start()
                });
                let joined = format!("{} {next}", &line[at + marker.len()..]);
                let mut rest = joined.trim_start();
                while let Some(cited) = rest.strip_prefix('§') {
                    let Some((section, after)) = section_number(cited) else { break };
                    let (steps, after) = cited_steps(after);
                    found.push((format!("{name}:{}", n + 1), section, steps));
                    rest = after
                        .strip_prefix(", ")
                        .or(after.strip_prefix(" and "))
                        .filter(|r| r.starts_with('§'))
                        .unwrap_or("");
                }
            }
        }
    }
    found
}

fn check_contract_citations(
    sections: &BTreeMap<String, BTreeSet<String>>,
    citations: &[(String, String, Vec<String>)],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, section, steps) in citations {
        let Some(known) = sections.get(section) else {
            problems.push(format!(
                "{at}: CONTRACT §{section}: {CONTRACT_DOC} has no section {section}"
            ));
            continue;
        };
        for step in steps.iter().filter(|s| !known.contains(*s)) {
            problems.push(format!(
                "{at}: CONTRACT §{section} step {step}: §{section} of {CONTRACT_DOC} has no step \
                 {step}"
            ));
        }
    }
    problems
}

/// Every `.rs` file under `dir`, by path relative to the repository.
fn rust_files(dir: &str) -> BTreeMap<String, String> {
    let root = repo_root();
    let mut files = BTreeMap::new();
    let mut folders = vec![root.join(dir)];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                files.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn every_contract_citation_names_a_section_of_the_contract() {
    let doc = std::fs::read_to_string(repo_root().join(CONTRACT_DOC)).expect(CONTRACT_DOC);
    let sections = contract_sections(&doc);
    assert!(sections.len() >= 11, "{CONTRACT_DOC} has only {} sections", sections.len());
    let files = rust_files("src").into_iter().chain(markdown_files());
    let citations: Vec<_> =
        files.flat_map(|(name, text)| contract_citations(&name, &text)).collect();
    println!("docs: {} citations of {CONTRACT_DOC} in src/ and the docs checked", citations.len());
    assert!(citations.len() > 50, "only {} citations found: is the parser blind?", citations.len());
    let problems = check_contract_citations(&sections, &citations);
    assert!(
        problems.is_empty(),
        "citations of a missing contract section:\n{}",
        problems.join("\n")
    );
}

#[test]
fn contract_checks_fail_on_made_up_citations() {
    let contract =
        "# C\n## 1. One\ntext 2. not a step\n## 4. Four\n1. first\n2. second\n```\n## 9. \
                    code\n```\n";
    let sections = contract_sections(contract);
    assert_eq!(sections.keys().collect::<Vec<_>>(), ["1", "4"]);
    assert_eq!(sections["4"].iter().collect::<Vec<_>>(), ["1", "2"]);
    assert!(sections["1"].is_empty());
    let source = "// CONTRACT §4 step 2 and §1.\n// CONTRACT §4 steps 1–3 here\n\
                  // wrapped (CONTRACT\n//! §9: gone)\n/// docs/contract.md §1, §7.2, issue 4 §8\n\
                  // CONTRACT §4 steps 1 and 5, §4 step 2\n";
    let citations = contract_citations("src/x.rs", source);
    let cited: Vec<String> =
        citations.iter().map(|(at, s, steps)| format!("{at} {s} {}", steps.join(","))).collect();
    assert_eq!(
        cited,
        [
            "src/x.rs:1 4 2",
            "src/x.rs:1 1 ",
            "src/x.rs:2 4 1,2,3",
            "src/x.rs:3 9 ",
            "src/x.rs:5 1 ",
            "src/x.rs:5 7.2 ",
            "src/x.rs:6 4 1,5",
            "src/x.rs:6 4 2",
        ]
    );
    let problems = check_contract_citations(&sections, &citations);
    assert_eq!(
        problems,
        [
            "src/x.rs:2: CONTRACT §4 step 3: §4 of docs/contract.md has no step 3",
            "src/x.rs:3: CONTRACT §9: docs/contract.md has no section 9",
            "src/x.rs:5: CONTRACT §7.2: docs/contract.md has no section 7.2",
            "src/x.rs:6: CONTRACT §4 step 5: §4 of docs/contract.md has no step 5",
        ],
        "{problems:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The module maps.

const ARCHITECTURE_DOC: &str = "docs/architecture.md";

/// The modules `lib.rs` declares (`mod name;` or `pub mod name;` with a file of its own; an
/// inline `mod name { … }` is no module of the tree).
fn declared_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|line| {
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.strip_prefix("mod ")?.strip_suffix(';').map(str::to_string)
        })
        .collect()
}

/// The module names of the table in `text` whose first column is `module`, with their
/// `file:line`: each code span of the first cell (`legacy/`, `tls.rs`, `metrics.rs`, …)
/// without its `/` or `.rs`. `lib.rs`'s map (`//! | floor | module | owns |`) is read the same
/// way from its `module` column.
fn module_table(name: &str, text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut column: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start().trim_start_matches("//!").trim();
        if !line.starts_with('|') {
            column = None;
            continue;
        }
        let cells = split_row(line);
        if column.is_none() {
            column = cells.iter().position(|c| c == "module");
            continue;
        }
        let Some(cell) = column.and_then(|c| cells.get(c)) else { continue };
        for span in cell.split('`').skip(1).step_by(2) {
            let module = span.trim_end_matches('/').trim_end_matches(".rs");
            found.push((format!("{name}:{}", n + 1), module.to_string()));
        }
    }
    found
}

/// A table's modules against `lib.rs`'s, both ways. `main` (`src/main.rs`, the binary) may
/// have a row although `lib.rs` does not declare it.
fn check_module_table(
    table: &str,
    rows: &[(String, String)],
    declared: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let named: BTreeSet<&str> = rows.iter().map(|(_, m)| m.as_str()).collect();
    for (at, module) in rows {
        if module != "main" && !declared.contains(module) {
            problems.push(format!("{at}: `{module}` is no module src/lib.rs declares"));
        }
    }
    for module in declared.iter().filter(|m| !named.contains(m.as_str())) {
        problems.push(format!("{table}: no row for `{module}`, a module src/lib.rs declares"));
    }
    problems
}

#[test]
fn module_tables_list_every_module_of_lib_rs() {
    let root = repo_root();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let declared = declared_modules(&lib);
    assert!(declared.len() >= 20, "src/lib.rs declares only {} modules", declared.len());
    let doc = std::fs::read_to_string(root.join(ARCHITECTURE_DOC)).expect(ARCHITECTURE_DOC);
    let mut problems =
        check_module_table(ARCHITECTURE_DOC, &module_table(ARCHITECTURE_DOC, &doc), &declared);
    let map = module_table("src/lib.rs", &lib);
    problems.extend(check_module_table("src/lib.rs's map", &map, &declared));
    assert!(problems.is_empty(), "module tables differ from src/lib.rs:\n{}", problems.join("\n"));
}

#[test]
fn module_checks_fail_on_made_up_tables() {
    let lib = "//! | floor | module | owns |\n//! | --- | --- | --- |\n//! | 2 | `top` | x |\n\
               //! | 1 | `gone` | `y` |\nmod top;\npub mod low;\nmod inline {\n}\n";
    let declared = declared_modules(lib);
    assert_eq!(declared.iter().collect::<Vec<_>>(), ["low", "top"]);
    let problems = check_module_table("lib", &module_table("lib", lib), &declared);
    assert_eq!(
        problems,
        [
            "lib:4: `gone` is no module src/lib.rs declares",
            "lib: no row for `low`, a module src/lib.rs declares",
        ]
    );
    let doc = "| module | what |\n| --- | --- |\n| `main.rs` | bin |\n| `top/` | a `b` |\n\
               | `low.rs`, `extra.rs` | c |\n\n| other | module |\n| --- | --- |\n| x | `top` |\n";
    let rows = module_table("a.md", doc);
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert_eq!(
        check_module_table("a.md", &rows, &declared),
        ["a.md:5: `extra` is no module src/lib.rs declares"]
    );
}

// ---------------------------------------------------------------------------------------------
// The front page.

/// The README's length: what tidemark is, the two commands, the three examples, the promises
/// and pointers into `docs/`; a section that grows past a screen or two belongs in `docs/`.
const README_MAX_LINES: usize = 150;

/// Why `text` is no front page, if it is not.
fn front_page_problem(name: &str, text: &str) -> Option<String> {
    let lines = text.lines().count();
    (lines > README_MAX_LINES).then(|| {
        format!(
            "{name}:{}: {lines} lines, more than {README_MAX_LINES}: move the detail into docs/ \
             and link it",
            README_MAX_LINES + 1
        )
    })
}

#[test]
fn readme_is_a_front_page() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    println!("docs: README.md has {} lines (at most {README_MAX_LINES})", readme.lines().count());
    if let Some(problem) = front_page_problem("README.md", &readme) {
        panic!("{problem}");
    }
}

#[test]
fn front_page_check_fails_on_a_made_up_long_readme() {
    let at_limit = "line\n".repeat(README_MAX_LINES);
    assert_eq!(front_page_problem("R.md", &at_limit), None);
    let over = format!("{at_limit}one more\n");
    assert_eq!(
        front_page_problem("R.md", &over).as_deref(),
        Some("R.md:151: 151 lines, more than 150: move the detail into docs/ and link it")
    );
}
