//! Goal: the crate's layering holds and its map cannot drift from the tree (issue 16). The
//! order is declared once, in `src/lib.rs`'s map (`//! | floor | `module` | owns |`): a module
//! may use only modules on lower floors, so two modules on one floor (`legacy` and `modern`,
//! the ground floor's) never use each other and no arrow runs back up; no two files of the
//! tree use each other (no import cycle, inside a folder either).
//!
//! Method: read every file of `src/` as text (comments, strings and `#[cfg(test)]` modules
//! left out, as are `tests.rs` and `*_tests.rs` files), collect every path that names another
//! module (`crate::…`, `super::…`, a child module's name, `use crate::{…}` groups), resolve it
//! to the file that defines it, then check the floors and look for pairs of files that name
//! each other. Each failure names the file and the import. The checker is first run on a small
//! made-up tree, so the test is known to fail when the rules are broken.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its path relative to `src/` and its text.
struct SourceFile {
    path: String,
    text: String,
}

/// The floors of the map in `lib.rs`: module name → floor (1 = ground).
fn declared_floors(lib: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else { continue };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.len() < 3 {
            continue;
        }
        let Ok(floor) = cells[0].parse::<u32>() else { continue };
        let name = cells[1].trim_matches('`');
        assert!(
            floors.insert(name.to_owned(), floor).is_none(),
            "src/lib.rs: the map lists `{name}` twice"
        );
    }
    floors
}

/// The module path of a file (`legacy/session/mod.rs` → `["legacy", "session"]`).
fn module_path(path: &str) -> Vec<String> {
    let trimmed = path.strip_suffix(".rs").expect("a .rs file");
    let mut segments: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
    if segments.last().map(String::as_str) == Some("mod") {
        segments.pop();
    }
    if segments == ["lib"] || segments == ["main"] {
        segments.clear();
    }
    segments
}

/// The file that defines module path `path` (or its deepest existing prefix), if any.
fn file_of(files: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|len| {
        let joined = path[..len].join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")].into_iter().find(|f| files.contains(f))
    })
}

/// The code of a file without comments, string contents and its trailing test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        code.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                code.push('"');
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                code.push('"');
            }
            // A char literal like '"' would open a string: skip the common short forms.
            '\'' => {
                code.push('\'');
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("\\") && rest.chars().nth(2) == Some('\'') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            _ => code.push(c),
        }
    }
    code
}

/// Child modules a file declares (`mod x;`, `pub(crate) mod x;`).
fn declared_children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub "));
            let rest = rest.unwrap_or(line).strip_prefix("mod ")?;
            let name = rest.strip_suffix(';')?.trim();
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_').then(|| name.to_owned())
        })
        .collect()
}

/// Every module path a file's code names, each with the text that named it.
fn named_paths(code: &str, me: &[String]) -> Vec<(Vec<String>, String)> {
    let children = declared_children(code);
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_path =
            is_ident(bytes[at]) && (at == 0 || (!is_ident(bytes[at - 1]) && bytes[at - 1] != b':'));
        if !starts_path {
            at += 1;
            continue;
        }
        let mut end = at;
        loop {
            while end < bytes.len() && is_ident(bytes[end]) {
                end += 1;
            }
            if code[end..].starts_with("::") && bytes.get(end + 2).copied().is_some_and(is_ident) {
                end += 2;
            } else {
                break;
            }
        }
        let text = &code[at..end];
        let segments: Vec<&str> = text.split("::").collect();
        let resolved: Option<Vec<String>> = match segments[0] {
            _ if segments.len() < 2 && !code[end..].starts_with("::{") => None,
            "crate" => Some(segments[1..].iter().map(|s| s.to_string()).collect()),
            "super" => {
                let mut base = me.to_vec();
                let mut rest = &segments[..];
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().map(|s| s.to_string()));
                Some(base)
            }
            "self" => Some(
                me.iter().cloned().chain(segments[1..].iter().map(|s| s.to_string())).collect(),
            ),
            first if children.contains(first) => {
                Some(me.iter().cloned().chain(segments.iter().map(|s| s.to_string())).collect())
            }
            _ => None,
        };
        if let Some(path) = resolved {
            if code[end..].starts_with("::{") {
                // `use crate::{a, b::c}`: each first name of the group.
                let close = code[end..].find('}').map_or(code.len(), |c| end + c);
                for item in code[end + 3..close].split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim_matches('{');
                    if !first.is_empty()
                        && first != "self"
                        && first.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        let mut p = path.clone();
                        p.push(first.to_owned());
                        found.push((p, format!("{text}::{{{first}}}")));
                    }
                }
            }
            found.push((path, text.to_owned()));
        }
        at = end.max(at + 1);
    }
    found
}

/// Every violation of the layering rules in `files`, given the map `lib` (`lib.rs`'s text).
fn violations(files: &[SourceFile]) -> Vec<String> {
    let lib = files.iter().find(|f| f.path == "lib.rs").expect("src/lib.rs");
    let floors = declared_floors(&lib.text);
    let names: BTreeSet<String> = files.iter().map(|f| f.path.clone()).collect();
    let mut found = Vec::new();

    // The map and the tree list the same modules.
    let top: BTreeSet<String> =
        files.iter().filter_map(|f| module_path(&f.path).first().cloned()).collect();
    for module in &top {
        if !floors.contains_key(module) {
            found.push(format!("src/{module}: not in src/lib.rs's map (give it a floor)"));
        }
    }
    for module in floors.keys() {
        if !top.contains(module) {
            found.push(format!("src/lib.rs's map lists `{module}`, which the tree does not have"));
        }
    }

    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in files {
        let me = module_path(&file.path);
        let code = code_of(&file.text);
        for (path, text) in named_paths(&code, &me) {
            let Some(target) = file_of(&names, &path) else { continue };
            if target == file.path {
                continue;
            }
            edges
                .entry(file.path.clone())
                .or_default()
                .entry(target.clone())
                .or_insert(text.clone());
            let (Some(from), Some(to)) = (me.first(), path.first()) else { continue };
            if from == to {
                continue;
            }
            if let (Some(&high), Some(&low)) = (floors.get(from), floors.get(to)) {
                if low >= high {
                    found.push(format!(
                        "src/{}: `{text}` runs from `{from}` (floor {high}) to `{to}` (floor {low}): \
                         a module may use only lower floors",
                        file.path
                    ));
                }
            }
        }
    }
    for (a, targets) in &edges {
        for (b, text) in targets {
            if a < b {
                if let Some(back) = edges.get(b).and_then(|t| t.get(a)) {
                    found.push(format!(
                        "src/{a} and src/{b} use each other: `{text}` there, `{back}` back"
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

fn read_tree(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path: PathBuf = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let rel =
                path.strip_prefix(root).expect("under src/").to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("read a source file");
            files.push(SourceFile { path: rel, text });
        }
    }
    files
}

#[test]
fn the_checker_finds_an_upward_import_a_sibling_import_and_a_cycle() {
    // Goal: the rules can fail. Method: a made-up tree that breaks each rule once.
    let file = |path: &str, text: &str| SourceFile { path: path.into(), text: text.into() };
    let tree = [
        file(
            "lib.rs",
            "//! | floor | module | owns |\n//! | 3 | `top` | x |\n//! | 2 | `left` | x |\n\
             //! | 2 | `right` | x |\n//! | 1 | `ground` | x |\n//! | 1 | `gone` | x |\n",
        ),
        file("top.rs", "use crate::left::A;\n"),
        file("left/mod.rs", "mod inner;\nuse crate::right::B; // sibling\nuse inner::C;\n"),
        file("left/inner.rs", "use super::D;\n"),
        file("right.rs", "fn f() { crate::ground::g(); }\n"),
        file("ground.rs", "use crate::{top::T, left};\n// crate::right::in_a_comment\n"),
        file("extra.rs", "\"crate::top::in_a_string\";\n"),
    ];
    let found = violations(&tree);
    let has = |needle: &str| found.iter().any(|v| v.contains(needle));
    assert!(
        has("src/left/mod.rs: `crate::right::B` runs from `left` (floor 2) to `right`"),
        "{found:#?}"
    );
    assert!(
        has("src/ground.rs: `crate::{top}` runs from `ground` (floor 1) to `top`"),
        "{found:#?}"
    );
    assert!(has("src/ground.rs: `crate::{left}` runs"), "{found:#?}");
    assert!(has("src/left/inner.rs and src/left/mod.rs use each other"), "{found:#?}");
    assert!(has("src/extra: not in src/lib.rs's map"), "{found:#?}");
    assert!(has("lists `gone`, which the tree does not have"), "{found:#?}");
    assert!(!has("in_a_comment") && !has("in_a_string"), "{found:#?}");
    assert!(!has("src/top.rs"), "a downward import is allowed: {found:#?}");
    assert!(!has("src/right.rs"), "a downward import is allowed: {found:#?}");
    assert_eq!(found.len(), 6, "{found:#?}");
}

#[test]
fn no_module_imports_upward_or_sideways_and_no_two_files_import_each_other() {
    // Goal: the real tree keeps the declared order (src/lib.rs's map). Method: `violations`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_tree(&root);
    assert!(files.len() > 40, "src/ was read ({} files)", files.len());
    let lib = files.iter().find(|f| f.path == "lib.rs").expect("src/lib.rs");
    assert!(declared_floors(&lib.text).len() >= 10, "src/lib.rs has its map of floors");
    let found = violations(&files);
    assert!(found.is_empty(), "layering violations:\n{}", found.join("\n"));
}
