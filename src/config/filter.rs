//! `--upstream-allow-tools`/`--upstream-deny-tools` and the same for prompts and resources:
//! per upstream, globs of the tool and prompt names and resource URIs it may expose
//! (`NameFilter`, three per upstream in `UpstreamFilters`), parsed and checked at start-up. The
//! bridge (`upstream`) asks the tool filter once per tool when it lists an upstream's tools, so
//! a filtered tool is absent from `tools/list` and, being in no table, refused like an unknown
//! tool; prompts and resources are filtered where they are listed and where they are fetched.
//!
//! Owns: the flag syntax (`NAME=GLOB[,GLOB…]`, NAME an `--upstream`'s `NAME=` or `*` for every
//! upstream), the glob (`*` any run, `?` one character), deny-over-allow, and the limit on globs
//! per upstream. Never: knows prefixes (globs match the upstream's own names and URIs).
//!
//! Case: a glob compares bytes, so tool and prompt names match case-sensitively, as the
//! upstream spells them (`deny delete_*` does not hide `Delete_all`); resource URIs are matched
//! in canonical form (`uri::canonical`, lower-case scheme and host), globs put in the same form
//! by the server (`UpstreamFilters::with_resource_globs`). docs/gateway.md says what a filter
//! cannot protect (an upstream that resolves names loosely).

use super::upstream_spec::UpstreamSpec;

/// Globs one upstream's filters may hold, allow and deny of tools, prompts and resources
/// together, `*` rules included (`--upstream-filter-globs-max`): each listed item is matched
/// against its kind's globs, so the bound keeps a listing's cost linear in the items.
pub(crate) const UPSTREAM_FILTER_GLOBS_MAX: usize = 64;

/// The longest resource URI a request may name, in bytes (`--resource-uri-bytes-max`): what
/// a `resources/read`, `resources/subscribe` or a completion's reference is refused `-32602`
/// beyond. Long enough for any real path (Linux's PATH_MAX is 4096; common HTTP URL limits are
/// 8 KiB); it bounds the cost of matching the URI against an upstream's templates
/// (`uri::template`, linear in the URI per template byte).
pub(crate) const RESOURCE_URI_BYTES_MAX: usize = 8 * 1024;

/// Which tool names of one upstream are exposed: those an allow glob matches (every name when
/// there is none) and no deny glob matches. Deny wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NameFilter {
    allow: Vec<String>,
    deny: Vec<String>,
}

impl NameFilter {
    /// Whether tool `name` (the upstream's own name, before any prefix) is exposed.
    pub(crate) fn allows(&self, name: &str) -> bool {
        let allowed = self.allow.is_empty() || self.allow.iter().any(|g| glob_matches(g, name));
        allowed && !self.deny.iter().any(|g| glob_matches(g, name))
    }

    /// The filter of the upstream `spec` from one kind's flags (`NAME=GLOB[,GLOB…]` each),
    /// checked: NAME is `*` or a given upstream's `NAME=`, and no glob is empty.
    fn for_upstream(
        spec: &UpstreamSpec,
        specs: &[UpstreamSpec],
        allow: FilterFlag<'_>,
        deny: FilterFlag<'_>,
    ) -> Result<NameFilter, FilterError> {
        let mut filter = NameFilter::default();
        for ((flag, values), into) in [(allow, &mut filter.allow), (deny, &mut filter.deny)] {
            for value in values {
                let (name, globs) = parse(flag, value, specs)?;
                if name == "*" || spec.name.as_deref() == Some(name) {
                    into.extend(globs.map(str::to_owned));
                }
            }
        }
        Ok(filter)
    }

    fn globs(&self) -> usize {
        self.allow.len() + self.deny.len()
    }
}

/// A filter flag's name and its values.
pub(crate) type FilterFlag<'a> = (&'static str, &'a [String]);

/// The filter flags' values, by kind: `[allow, deny]` each.
pub(crate) struct FilterFlags<'a> {
    pub(crate) tools: [&'a [String]; 2],
    pub(crate) prompts: [&'a [String]; 2],
    pub(crate) resources: [&'a [String]; 2],
}

/// One upstream's filters: tool names, prompt names, resource URIs (and URI templates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UpstreamFilters {
    pub(crate) tools: NameFilter,
    pub(crate) prompts: NameFilter,
    pub(crate) resources: NameFilter,
}

impl UpstreamFilters {
    /// The same filters with each resource glob passed through `canonical`: the bridge matches
    /// resource URIs in their canonical form (`uri::canonical`), so a glob is put in that form
    /// too (`FILE:///srv//secret/*` then filters what `file:///srv/secret/*` does).
    pub(crate) fn with_resource_globs(mut self, canonical: impl Fn(&str) -> String) -> Self {
        let resources = &mut self.resources;
        for glob in resources.allow.iter_mut().chain(resources.deny.iter_mut()) {
            *glob = canonical(glob);
        }
        self
    }

    /// The filters of the upstream `spec`, checked (`NameFilter::for_upstream`), with at most
    /// `globs_max` globs of all kinds together.
    pub(crate) fn for_upstream(
        spec: &UpstreamSpec,
        specs: &[UpstreamSpec],
        flags: &FilterFlags<'_>,
        globs_max: usize,
    ) -> Result<UpstreamFilters, FilterError> {
        let kind = |[allow, deny]: [&[String]; 2], what: [&'static str; 2]| {
            NameFilter::for_upstream(spec, specs, (what[0], allow), (what[1], deny))
        };
        let filters = UpstreamFilters {
            tools: kind(flags.tools, ["--upstream-allow-tools", "--upstream-deny-tools"])?,
            prompts: kind(flags.prompts, ["--upstream-allow-prompts", "--upstream-deny-prompts"])?,
            resources: kind(
                flags.resources,
                ["--upstream-allow-resources", "--upstream-deny-resources"],
            )?,
        };
        let globs = filters.tools.globs() + filters.prompts.globs() + filters.resources.globs();
        if globs > globs_max {
            let index = specs.iter().position(|s| std::ptr::eq(s, spec)).unwrap_or(0);
            let upstream = spec.label(index);
            return Err(FilterError::TooMany { upstream, globs, max: globs_max });
        }
        Ok(filters)
    }
}

/// Why a filter flag is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// Not `NAME=GLOB[,GLOB…]`, or an empty glob; the flag and its value.
    #[error("{0} {1:?}: expected NAME=GLOB[,GLOB…] (NAME an --upstream's NAME= or '*'; GLOB non-empty, '*' any run, '?' one character)")]
    Syntax(&'static str, String),
    /// NAME is neither `*` nor the `NAME=` of an `--upstream`.
    #[error("{0} {1:?}: no --upstream is named {2:?} (or use '*')")]
    UnknownUpstream(&'static str, String, String),
    /// More globs for one upstream than `--upstream-filter-globs-max`.
    #[error(
        "upstream {upstream}: {globs} filter globs, at most {max} (--upstream-filter-globs-max)"
    )]
    TooMany {
        /// The upstream's label.
        upstream: String,
        /// Its globs, allow and deny.
        globs: usize,
        /// The limit.
        max: usize,
    },
}

/// `NAME=GLOB[,GLOB…]` → (NAME, the globs).
fn parse<'a>(
    flag: &'static str,
    value: &'a str,
    specs: &[UpstreamSpec],
) -> Result<(&'a str, impl Iterator<Item = &'a str>), FilterError> {
    let syntax = || FilterError::Syntax(flag, value.to_owned());
    let (name, globs) = value.split_once('=').ok_or_else(syntax)?;
    if globs.split(',').any(str::is_empty) {
        return Err(syntax());
    }
    let known = name == "*" || specs.iter().any(|s| s.name.as_deref() == Some(name));
    if !known {
        return Err(FilterError::UnknownUpstream(flag, value.to_owned(), name.to_owned()));
    }
    Ok((name, globs.split(',')))
}

/// `*` any run (also empty), `?` one character, anything else itself; the whole name.
/// Iterative with one backtrack point: O(pattern × name) at worst, no recursion, no allocation.
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    // Bytes, not chars: `?` must take one whole UTF-8 character, so it skips continuation bytes.
    let char_len = |at: usize| {
        let mut end = at + 1;
        while end < n.len() && (n[end] & 0xC0) == 0x80 {
            end += 1;
        }
        end - at
    };
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'?' {
            pi += 1;
            ni += char_len(ni);
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += char_len(mark);
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the glob: `*`, `?` (one character, also a multi-byte one), literals, whole names.
    #[test]
    fn globs() {
        for (p, n, want) in [
            ("*", "", true),
            ("*", "anything", true),
            ("delete_*", "delete_file", true),
            ("delete_*", "undelete_file", false),
            ("*_file", "delete_file", true),
            ("get-?um", "get-sum", true),
            ("get-?um", "get-um", false),
            ("a?c", "aéc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("echo", "echo", true),
            ("echo", "echo2", false),
            // Case counts (docs/gateway.md): names are compared as the upstream spells them.
            ("delete_*", "Delete_all", false),
            ("delete_*", "DELETE_ALL", false),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob_matches(p, n), want, "{p:?} vs {n:?}");
        }
    }

    fn specs() -> Vec<UpstreamSpec> {
        ["a=stdio:x", "b=stdio:y"].iter().map(|t| UpstreamSpec::parse(t).expect(t)).collect()
    }

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    /// The tool filter of `spec` from tool flags alone, with `globs_max`.
    fn tools_of(
        spec: &UpstreamSpec,
        specs: &[UpstreamSpec],
        allow: &[String],
        deny: &[String],
        globs_max: usize,
    ) -> Result<NameFilter, FilterError> {
        let flags =
            FilterFlags { tools: [allow, deny], prompts: [&[], &[]], resources: [&[], &[]] };
        UpstreamFilters::for_upstream(spec, specs, &flags, globs_max).map(|f| f.tools)
    }

    /// Goal: deny wins over allow; no allow means all; `*` applies to every upstream; a flag of
    /// another upstream does not apply.
    #[test]
    fn deny_wins_and_names_select_upstreams() {
        let specs = specs();
        let allow = strings(&["a=get-*,echo"]);
        let deny = strings(&["*=get-secret*", "b=echo"]);
        let a = tools_of(&specs[0], &specs, &allow, &deny, 8).expect("a");
        let b = tools_of(&specs[1], &specs, &allow, &deny, 8).expect("b");
        assert!(a.allows("get-sum") && a.allows("echo"));
        assert!(!a.allows("get-secret-key"), "deny wins over allow");
        assert!(!a.allows("delete"), "an allow list admits only its names");
        assert!(b.allows("delete"), "no allow list for b: everything but its denials");
        assert!(!b.allows("echo") && !b.allows("get-secret"));
        assert!(NameFilter::default().allows("x"));
    }

    /// Goal: the limit on globs per upstream holds at the limit and refuses one more (allow and
    /// deny and `*` rules counted together); bad syntax and unknown names are start-up errors.
    #[test]
    fn glob_limit_and_bad_values() {
        let specs = specs();
        let allow = strings(&["a=x1,x2", "*=x3"]);
        let deny = strings(&["a=y1"]);
        assert!(tools_of(&specs[0], &specs, &allow, &deny, 4).is_ok());
        let over = tools_of(&specs[0], &specs, &allow, &deny, 3);
        assert_eq!(
            over,
            Err(FilterError::TooMany { upstream: "a".into(), globs: 4, max: 3 }),
            "one glob past the limit"
        );
        assert!(
            tools_of(&specs[1], &specs, &allow, &deny, 1).is_ok(),
            "b has one glob (the '*' rule)"
        );
        for bad in ["a", "a=", "a=x,,y", "=x"] {
            let got = tools_of(&specs[0], &specs, &strings(&[bad]), &[], 8);
            assert!(
                matches!(got, Err(FilterError::Syntax(..)) | Err(FilterError::UnknownUpstream(..))),
                "{bad}: {got:?}"
            );
        }
        let unknown = tools_of(&specs[0], &specs, &[], &strings(&["c=x"]), 8);
        assert!(matches!(unknown, Err(FilterError::UnknownUpstream(..))));
    }

    /// Goal: prompts and resources have filters of their own, and their globs count toward the
    /// same per-upstream limit as the tools'.
    #[test]
    fn prompts_and_resources_filter_apart_and_count_together() {
        let specs = specs();
        let (tools, prompts, uris) =
            (strings(&["a=echo"]), strings(&["a=secret_*"]), strings(&["*=file:///etc/*"]));
        let flags =
            FilterFlags { tools: [&tools, &[]], prompts: [&[], &prompts], resources: [&[], &uris] };
        let a = UpstreamFilters::for_upstream(&specs[0], &specs, &flags, 3).expect("at the limit");
        assert!(a.tools.allows("echo") && !a.tools.allows("secret_x"));
        assert!(a.prompts.allows("echo") && !a.prompts.allows("secret_x"));
        assert!(!a.resources.allows("file:///etc/passwd") && a.resources.allows("file:///srv/a"));
        let over = UpstreamFilters::for_upstream(&specs[0], &specs, &flags, 2);
        assert!(matches!(over, Err(FilterError::TooMany { globs: 3, .. })), "{over:?}");
        let bad = FilterFlags { prompts: [&strings(&["z=x"]), &[]], ..flags };
        let refused = UpstreamFilters::for_upstream(&specs[0], &specs, &bad, 8);
        assert!(
            matches!(&refused, Err(FilterError::UnknownUpstream("--upstream-allow-prompts", ..))),
            "{refused:?}"
        );
    }
}
