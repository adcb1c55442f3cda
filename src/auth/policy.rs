//! The per-tool policy (`--auth-policy FILE`, `--auth-write-scope`): which scopes a tool,
//! prompt or resource needs, by name or glob, and per upstream. One decision (`Policy::needs`)
//! serves listing and enforcement alike, so a subject is never listed what it may not use.
//!
//! The file, one rule per line, `#` comments:
//!
//! ```text
//! # KIND      PATTERN            SCOPES (all needed, comma-separated)
//! tool        admin_*            admin
//! tool        echo               tools.read
//! prompt      *                  prompts
//! resource    file:///secret/*   secrets
//! upstream    github             github      # every tool, prompt and resource of --upstream github
//! ```
//!
//! A tool, prompt or resource needs the scopes of the first `tool`/`prompt`/`resource` rule
//! whose pattern matches its name (its uri for a resource), plus those of every `upstream`
//! rule naming the provider that serves it, plus (a tool not annotated `readOnlyHint: true`)
//! `--auth-write-scope`. No rule: any valid token may use it. Patterns: `*` any run of
//! characters, `?` one character, anything else itself, compared case-sensitively; a
//! resource's pattern is put in canonical form (`uri::canonical_glob`), as the URIs it is
//! matched against are (`FILE:///secret/*` is `file:///secret/*`).
//!
//! Called by `core::authorize` (both eras' calls) and `dispatch` (the listings). Never: reads a
//! token or decides who a subject is.

use std::path::Path;

// The one glob of the crate (`*`, `?`), shared with the upstream filters.
use crate::config::glob_matches;

/// What a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tool,
    Prompt,
    Resource,
}

/// What is being used or listed: its kind, name (a resource's uri), the provider serving it
/// (`Provider::name`: an upstream's name for a bridge) and, for a tool, its `readOnlyHint`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub(crate) kind: Kind,
    pub(crate) name: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) read_only: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Target {
    Kind(Kind),
    Upstream,
}

#[derive(Debug)]
struct Rule {
    target: Target,
    pattern: Box<str>,
    scopes: Vec<Box<str>>,
}

/// The rules in file order and the annotation default.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    rules: Vec<Rule>,
    write_scope: Option<Box<str>>,
}

/// Why a policy file was refused (the operator's mistake, or the OS's).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PolicyFileError {
    /// The OS or the operator: unreadable, not a regular file, or over `AUTH_FILE_BYTES_MAX`
    /// (the path and why: `fsread::FileError`).
    #[error("--auth-policy {path}: {reason}")]
    Unreadable { path: String, reason: String },
    /// The operator: not `KIND PATTERN SCOPES`, or an unknown kind (its line number).
    #[error(
        "--auth-policy {path}:{line}: expected `tool|prompt|resource|upstream PATTERN \
         SCOPE[,SCOPE…]`"
    )]
    BadLine { path: String, line: usize },
    /// The operator: more rules than `--auth-policy-rules-max`.
    #[error("--auth-policy {path}: more than --auth-policy-rules-max ({max}) rules")]
    TooMany { path: String, max: usize },
}

impl Policy {
    /// The policy of `--auth-policy` (if any) and `--auth-write-scope`.
    pub(crate) fn load(
        path: Option<&Path>,
        write_scope: Option<&str>,
        max: usize,
    ) -> Result<Policy, PolicyFileError> {
        let mut policy = match path {
            None => Policy::default(),
            Some(path) => {
                let shown = path.display().to_string();
                let limit = crate::config::AUTH_FILE_BYTES_MAX;
                let text = crate::fsread::read_text(path, limit).map_err(|e| {
                    PolicyFileError::Unreadable { path: shown.clone(), reason: e.to_string() }
                })?;
                Policy::parse(&text, &shown, max)?
            }
        };
        policy.write_scope = write_scope.map(Box::from);
        Ok(policy)
    }

    /// Parses a policy file's text; `path` only names it in errors.
    pub(crate) fn parse(text: &str, path: &str, max: usize) -> Result<Policy, PolicyFileError> {
        let mut rules = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let bad = || PolicyFileError::BadLine { path: path.to_owned(), line };
            let fields: Vec<&str> = content.split_ascii_whitespace().collect();
            let [kind, pattern, scopes] = fields[..] else { return Err(bad()) };
            let target = match kind {
                "tool" => Target::Kind(Kind::Tool),
                "prompt" => Target::Kind(Kind::Prompt),
                "resource" => Target::Kind(Kind::Resource),
                "upstream" => Target::Upstream,
                _ => return Err(bad()),
            };
            let scopes: Vec<Box<str>> =
                scopes.split(',').filter(|s| !s.is_empty()).map(Box::from).collect();
            if scopes.is_empty() {
                return Err(bad());
            }
            if rules.len() == max {
                return Err(PolicyFileError::TooMany { path: path.to_owned(), max });
            }
            // Resources are judged in canonical form (`core::forbidden`), so are their patterns.
            let pattern = match target {
                Target::Kind(Kind::Resource) => crate::uri::canonical_glob(pattern).into(),
                _ => pattern.into(),
            };
            rules.push(Rule { target, pattern, scopes });
        }
        Ok(Policy { rules, write_scope: None })
    }

    /// The number of rules.
    pub(crate) fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when no rule and no default exists: everything is allowed to any valid token, and
    /// listings need no filtering.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.write_scope.is_none()
    }

    /// THE decision: the scopes `item` needs that `has` (the token's scopes) lacks; empty:
    /// allowed. Listing and enforcement both ask this.
    pub(crate) fn missing<'p>(
        &'p self,
        item: Item<'_>,
        has: impl Fn(&str) -> bool,
    ) -> Vec<&'p str> {
        let mut missing: Vec<&str> = Vec::new();
        let mut add = |scopes: &'p [Box<str>]| {
            for scope in scopes {
                if !has(scope) && !missing.contains(&&**scope) {
                    missing.push(scope);
                }
            }
        };
        let by_name = self
            .rules
            .iter()
            .find(|r| r.target == Target::Kind(item.kind) && glob_matches(&r.pattern, item.name));
        if let Some(rule) = by_name {
            add(&rule.scopes);
        }
        for rule in &self.rules {
            if rule.target == Target::Upstream && glob_matches(&rule.pattern, item.provider) {
                add(&rule.scopes);
            }
        }
        if item.kind == Kind::Tool && !item.read_only {
            if let Some(write) = &self.write_scope {
                add(std::slice::from_ref(write));
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, provider: &'a str, read_only: bool) -> Item<'a> {
        Item { kind: Kind::Tool, name, provider, read_only }
    }

    /// Goal: the glob: `*`, `?`, literals, whole-name matches only.
    #[test]
    fn globs() {
        for (p, n, want) in [
            ("*", "", true),
            ("admin_*", "admin_reset", true),
            ("admin_*", "xadmin_reset", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*.read", "files.read", true),
            ("file:///s/*", "file:///s/a/b", true),
            ("echo", "echo2", false),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b", "xxaxxbxxc", false),
        ] {
            assert_eq!(glob_matches(p, n), want, "{p} {n}");
        }
    }

    /// Goal: the decision: the first name rule, every upstream rule, the write default for
    /// tools not read-only; each missing scope named once. Also the file's errors (by line
    /// number) and the rules limit at N and N+1.
    #[test]
    fn decision_and_file() {
        let text = "# rules\ntool admin_* admin\ntool * basic\nupstream gh github,basic\n\
                    prompt secret_* secrets\nresource file:///s/* files\n";
        let mut policy = Policy::parse(text, "p", 5).expect("parses");
        policy.write_scope = Some("write".into());
        let none = |_: &str| false;
        assert_eq!(policy.missing(tool("admin_x", "demo", true), none), vec!["admin"]);
        assert_eq!(policy.missing(tool("echo", "demo", true), none), vec!["basic"]);
        assert_eq!(policy.missing(tool("echo", "demo", false), none), vec!["basic", "write"]);
        assert_eq!(policy.missing(tool("x", "gh", true), none), vec!["basic", "github"]);
        assert!(policy
            .missing(tool("x", "gh", true), |s| s == "github" || s == "basic")
            .is_empty());
        let prompt =
            Item { kind: Kind::Prompt, name: "secret_a", provider: "demo", read_only: false };
        assert_eq!(policy.missing(prompt, none), vec!["secrets"]);
        let open = Item { kind: Kind::Prompt, name: "hello", provider: "demo", read_only: false };
        assert!(policy.missing(open, none).is_empty(), "no rule: allowed");
        let resource =
            Item { kind: Kind::Resource, name: "file:///s/k", provider: "d", read_only: true };
        assert_eq!(policy.missing(resource, none), vec!["files"]);
        assert!(Policy::parse(text, "p", 4)
            .is_err_and(|e| e == PolicyFileError::TooMany { path: "p".into(), max: 4 }));
        for bad in ["tool x\n", "tools x y\n", "tool x ,\n", "tool x y z\n"] {
            let e = Policy::parse(bad, "p", 9).expect_err("refused");
            assert_eq!(e, PolicyFileError::BadLine { path: "p".into(), line: 1 }, "{bad:?}");
        }
        assert!(Policy::default().is_empty());
    }
}
