//! Names (issue 22 item 4), the pure part: the separator, which upstreams' tool and prompt
//! names carry their `NAME__` prefix (`--upstream-prefix NAME=always|on-collision|never`)
//! given every provider's own names (`decide`), the start-up error when two providers offer
//! one final name (`Collision`), and the spec's length of a prefixed name (`fits`). The names
//! themselves come from `probe`, at start-up.
//!
//! Called by: `probe` (start-up), the bridge (a name's length when it lists). Never: does I/O.

use crate::config::PrefixPolicy;

/// The separator between an upstream's name and a tool or prompt name it prefixes
/// (`NAME__tool`): tool names allow only `[A-Za-z0-9_.-]` in many clients (and the spec), and
/// upstream names may not contain it.
pub(crate) const NAME_SEPARATOR: &str = "__";

/// Who offers a name, as a start-up error names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A `--tools` set.
    Builtin(&'static str),
    /// An `--upstream`: its `NAME=` (`None`: a single unnamed one) and its label.
    Upstream(Option<String>, String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Builtin(set) => write!(f, "built-in set `{set}`"),
            Source::Upstream(_, label) => write!(f, "upstream `{label}`"),
        }
    }
}

/// One provider's own names (tools and prompts, the upstream's own: unprefixed, filtered).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Names {
    pub(crate) tools: Vec<String>,
    pub(crate) prompts: Vec<String>,
}

/// One provider as the plan sees it.
#[derive(Clone, Debug)]
pub(crate) struct Offer {
    pub(crate) source: Source,
    /// An upstream's policy; `None` for a built-in set (never prefixed).
    pub(crate) policy: Option<PrefixPolicy>,
    /// Its names; `None` when they are unknown (an upstream that could not be probed).
    pub(crate) names: Option<Names>,
}

/// Two providers offer one final name and no policy separates them: the start-up error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} `{name}` is offered by {first} and {second}; {hint}")]
pub(crate) struct Collision {
    /// `tool` or `prompt`.
    pub(crate) kind: &'static str,
    pub(crate) name: String,
    pub(crate) first: Source,
    pub(crate) second: Source,
    /// What resolves it (the flag to set).
    pub(crate) hint: String,
}

/// Whether `offers`' upstreams are prefixed (index: `offers`; `false` for built-in sets), or
/// the first collision no policy resolves. `on-collision`: prefixed when one of its own names
/// is a final name of a provider with a fixed policy, or an own name of another
/// `on-collision` one (then both are prefixed), or its names are unknown.
pub(crate) fn decide(offers: &[Offer]) -> Result<Vec<bool>, Box<Collision>> {
    let fixed = |offer: &Offer| match offer.policy {
        Some(PrefixPolicy::Always) => Some(true),
        Some(PrefixPolicy::Never) | None => Some(false),
        Some(PrefixPolicy::OnCollision) => None,
    };
    let prefixed: Vec<bool> = (0..offers.len())
        .map(|i| {
            let offer = &offers[i];
            if let Some(prefixed) = fixed(offer) {
                return prefixed;
            }
            let Some(own) = &offer.names else { return true };
            offers.iter().enumerate().filter(|(j, _)| *j != i).any(|(_, other)| {
                let Some(theirs) = &other.names else { return false };
                let theirs = match fixed(other) {
                    Some(prefixed) => final_names(other, theirs, prefixed),
                    None => theirs.clone(),
                };
                overlaps(&own.tools, &theirs.tools) || overlaps(&own.prompts, &theirs.prompts)
            })
        })
        .collect();
    check(offers, &prefixed)?;
    Ok(prefixed)
}

/// The first final name two providers share where one of them is an upstream (built-in sets
/// among themselves keep "first wins": `--tools demo,conformance` both offer `greet`).
fn check(offers: &[Offer], prefixed: &[bool]) -> Result<(), Box<Collision>> {
    let finals: Vec<Option<Names>> = (offers.iter().zip(prefixed))
        .map(|(offer, &p)| offer.names.as_ref().map(|n| final_names(offer, n, p)))
        .collect();
    for (j, later) in offers.iter().enumerate() {
        for (i, earlier) in offers.iter().enumerate().take(j) {
            if earlier.policy.is_none() && later.policy.is_none() {
                continue;
            }
            let (Some(a), Some(b)) = (&finals[i], &finals[j]) else { continue };
            let shared = [("tool", &a.tools, &b.tools), ("prompt", &a.prompts, &b.prompts)]
                .into_iter()
                .find_map(|(kind, a, b)| a.iter().find(|n| b.contains(n)).map(|n| (kind, n)));
            if let Some((kind, name)) = shared {
                let hint = hint(later, prefixed[j]).or_else(|| hint(earlier, prefixed[i]));
                return Err(Box::new(Collision {
                    kind,
                    name: name.clone(),
                    first: earlier.source.clone(),
                    second: later.source.clone(),
                    hint: hint.unwrap_or_else(|| {
                        "hide one with --upstream-deny-tools / --upstream-deny-prompts".to_owned()
                    }),
                }));
            }
        }
    }
    Ok(())
}

/// The flag that would separate `offer`'s names, if it is an unprefixed upstream.
fn hint(offer: &Offer, prefixed: bool) -> Option<String> {
    match &offer.source {
        Source::Upstream(Some(name), _) if !prefixed => {
            Some(format!("set --upstream-prefix {name}=always (or {name}=on-collision)"))
        }
        Source::Upstream(None, _) => Some(
            "name the upstream (--upstream NAME=…) and set --upstream-prefix NAME=always".into(),
        ),
        _ => None,
    }
}

fn final_names(offer: &Offer, names: &Names, prefixed: bool) -> Names {
    let prefix = match (&offer.source, prefixed) {
        (Source::Upstream(Some(name), _), true) => name.as_str(),
        _ => return names.clone(),
    };
    let with = |list: &[String]| {
        list.iter().map(|n| format!("{prefix}{NAME_SEPARATOR}{n}")).collect::<Vec<_>>()
    };
    Names { tools: with(&names.tools), prompts: with(&names.prompts) }
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.iter().any(|n| b.contains(n))
}

/// Whether `name` (a prefixed tool name) is inside the spec's length
/// (`config::TOOL_NAME_BYTES_MAX`); the charset is kept by construction (an upstream's
/// `NAME=` is inside it, so prefixing keeps a valid name valid).
pub(crate) fn fits(name: &str) -> bool {
    name.len() <= crate::config::TOOL_NAME_BYTES_MAX
}

/// A prefixed tool name of `upstream` past the spec's length: the tool is left out (listing
/// and calls alike), logged once per core and counted (`tidemark_tools_hidden_total{reason=
/// "name_too_long"}`).
pub(crate) fn report_too_long(upstream: &str, name: &str) {
    if !crate::logging::first_report(&format!("long\0{upstream}\0{name}")) {
        return;
    }
    if let Some(metrics) = crate::metrics::this_core() {
        metrics.tools_hidden_name_too_long.inc();
    }
    crate::logging::limited!(
        crate::logging::Kind::Upstream,
        tracing::Level::WARN,
        upstream = %upstream,
        bytes = name.len(),
        max = crate::config::TOOL_NAME_BYTES_MAX,
        "tool left out: its prefixed name is longer than MCP tool names may be"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[&str], prompts: &[&str]) -> Option<Names> {
        let own = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        Some(Names { tools: own(tools), prompts: own(prompts) })
    }

    fn builtin(tools: &[&str]) -> Offer {
        Offer { source: Source::Builtin("demo"), policy: None, names: names(tools, &[]) }
    }

    fn upstream(name: &str, policy: PrefixPolicy, tools: &[&str]) -> Offer {
        let source = Source::Upstream(Some(name.to_owned()), name.to_owned());
        Offer { source, policy: Some(policy), names: names(tools, &[]) }
    }

    use PrefixPolicy::{Always, Never, OnCollision};

    /// Goal: each policy's decision, and on-collision prefixing only the colliding upstream.
    #[test]
    fn policies_decide_prefixes() {
        let offers = [
            builtin(&["echo", "greet"]),
            upstream("a", OnCollision, &["echo", "pid"]),
            upstream("b", OnCollision, &["other"]),
            upstream("c", Always, &["echo"]),
            upstream("d", Never, &["d_only"]),
        ];
        assert_eq!(decide(&offers), Ok(vec![false, true, false, true, false]));
        // Two on-collision upstreams sharing a name: both prefixed.
        let offers = [upstream("a", OnCollision, &["x"]), upstream("b", OnCollision, &["x"])];
        assert_eq!(decide(&offers), Ok(vec![true, true]));
        // Unknown names (not probed): prefixed, and not checked.
        let unknown = Offer { names: None, ..upstream("a", OnCollision, &[]) };
        assert_eq!(decide(&[builtin(&["echo"]), unknown]), Ok(vec![false, true]));
        // A prefixed upstream's names do not make an on-collision one collide.
        let offers = [upstream("a", Always, &["x"]), upstream("b", OnCollision, &["x"])];
        assert_eq!(decide(&offers), Ok(vec![true, false]));
    }

    /// Goal: a collision no policy resolves names both sources and the flag to set; built-in
    /// sets among themselves are not checked; prompts collide like tools.
    #[test]
    fn unresolved_collisions_are_errors() {
        let got = decide(&[builtin(&["echo"]), upstream("time", Never, &["echo"])]);
        let want = "tool `echo` is offered by built-in set `demo` and upstream `time`; \
                    set --upstream-prefix time=always (or time=on-collision)";
        assert_eq!(got.map_err(|e| e.to_string()), Err(want.to_owned()));
        assert_eq!(decide(&[builtin(&["greet"]), builtin(&["greet"])]), Ok(vec![false, false]));
        let mut a = upstream("a", Never, &[]);
        let mut b = upstream("b", Always, &[]);
        a.names = names(&[], &["b__hello"]);
        b.names = names(&[], &["hello"]);
        let got = decide(&[a, b]).expect_err("a's prompt is b's prefixed one");
        assert_eq!((got.kind, got.name.as_str()), ("prompt", "b__hello"));
        assert!(got.hint.contains("--upstream-prefix a=always"), "{}", got.hint);
        let unnamed = Offer {
            source: Source::Upstream(None, "stdio:x".into()),
            ..upstream("x", Never, &["echo"])
        };
        let got = decide(&[builtin(&["echo"]), unnamed]).expect_err("collides");
        assert!(got.hint.starts_with("name the upstream"), "{}", got.hint);
    }

    /// Goal: the spec's length at 128 and past it.
    #[test]
    fn tool_name_length_at_the_limit() {
        assert!(fits(&"a".repeat(crate::config::TOOL_NAME_BYTES_MAX)));
        assert!(!fits(&"a".repeat(crate::config::TOOL_NAME_BYTES_MAX + 1)));
    }
}
