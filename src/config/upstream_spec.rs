//! The `--upstream` flag's value (`UpstreamSpec`: a name and a stdio command or HTTP URL) and
//! `--upstream-isolation`, parsed and checked at start-up. Owned here, on the ground floor, so
//! `Config` imports nothing of the crate; the bridge (`upstream`) reads them.

use std::fmt;

/// One `--upstream` flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// `NAME=` before the target; required when several upstreams are given (it prefixes their
    /// names), optional with one.
    pub name: Option<String>,
    /// The command or URL after `NAME=`.
    pub target: UpstreamTarget,
}

/// Where an upstream is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamTarget {
    /// `stdio:COMMAND ARGS…`: the command and its arguments, split like a shell would (quotes
    /// and backslashes), with no shell run.
    Stdio(Vec<String>),
    /// `http://HOST:PORT/PATH`: a Streamable HTTP MCP server.
    Http(String),
}

/// Why an `--upstream` value is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamSpecError {
    /// Neither `stdio:` nor `http://` after the optional `NAME=`; the value as given.
    #[error("--upstream {0:?}: expected 'stdio:COMMAND ARGS…' or 'http://HOST:PORT/PATH', optionally after 'NAME='")]
    Unknown(String),
    /// `stdio:` with no command; the value as given.
    #[error("--upstream {0:?}: the command is empty")]
    EmptyCommand(String),
    /// The `stdio:` command has an unclosed quote; the value as given.
    #[error("--upstream {0:?}: unbalanced quote in the command")]
    Unbalanced(String),
    /// An `https://` URL (no TLS client here); the value as given.
    #[error("--upstream {0:?}: https is not supported; run the upstream on http behind a local TLS terminator, or on this host")]
    Https(String),
    /// Several upstreams, one unnamed or two with the same `NAME=`; says which.
    #[error("several --upstream flags: each needs a distinct NAME= (letters, digits, '-', '_'; no '__'): {0}")]
    Naming(String),
    /// A `NAME=` before a target that is not a usable name: it prefixes tool names, so it must
    /// keep them inside the MCP tool-name charset; the name as given.
    #[error("--upstream name {0:?}: 1 to {UPSTREAM_NAME_BYTES_MAX} of A-Z a-z 0-9 '-' '_' with no '__' (it prefixes tool names as NAME__tool, MCP tool names are [A-Za-z0-9_.-])")]
    BadName(String),
    /// An `--upstream-prefix` value that is not `NAME=always|on-collision|never`; the value.
    #[error("--upstream-prefix {0:?}: expected NAME=always, NAME=on-collision or NAME=never")]
    PrefixSyntax(String),
    /// An `--upstream-prefix` NAME that no `--upstream NAME=` has; the value and the name.
    #[error("--upstream-prefix {0:?}: no --upstream is named {1:?}")]
    PrefixUnknownUpstream(String, String),
    /// Two `--upstream-prefix` values for one upstream; its name.
    #[error("--upstream-prefix: upstream {0:?} is given twice")]
    PrefixTwice(String),
}

/// Bytes of an upstream's `NAME=`: it is in every prefixed tool name (`NAME__tool`), in log
/// lines and metric labels, and a tool name may have at most `TOOL_NAME_BYTES_MAX`.
pub(crate) const UPSTREAM_NAME_BYTES_MAX: usize = 32;

/// The longest tool name the MCP spec recommends (2025-11-25, server/tools, "Tool names":
/// 1 to 128 characters of A-Z a-z 0-9 `_` `-` `.`). A prefixed name (`NAME__tool`) longer than
/// this is left out of `tools/list` (and refused as unknown), logged and counted. No flag: the
/// number is the spec's, not a budget of ours.
pub(crate) const TOOL_NAME_BYTES_MAX: usize = 128;

/// `--upstream-prefix NAME=POLICY`: whether an upstream's tool and prompt names carry
/// `NAME__` (and its resource URIs `NAME+`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrefixPolicy {
    /// Always prefixed (the default with several upstreams).
    Always,
    /// Prefixed only when one of its names collides with another provider's (decided at
    /// start-up from the upstream's first listing).
    OnCollision,
    /// Never prefixed (the default with one upstream); a collision is a start-up error.
    Never,
}

impl PrefixPolicy {
    fn parse(text: &str) -> Option<PrefixPolicy> {
        match text {
            "always" => Some(PrefixPolicy::Always),
            "on-collision" => Some(PrefixPolicy::OnCollision),
            "never" => Some(PrefixPolicy::Never),
            _ => None,
        }
    }

    /// Each upstream's policy, in order, from the `--upstream-prefix` values: the value naming
    /// it, else the default (one upstream: `Never`; several: `Always`, as before the flag).
    pub(crate) fn for_upstreams(
        specs: &[UpstreamSpec],
        values: &[String],
    ) -> Result<Vec<PrefixPolicy>, UpstreamSpecError> {
        let default = if specs.len() > 1 { PrefixPolicy::Always } else { PrefixPolicy::Never };
        let mut policies: Vec<Option<PrefixPolicy>> = vec![None; specs.len()];
        for value in values {
            let syntax = || UpstreamSpecError::PrefixSyntax(value.clone());
            let (name, policy) = value.split_once('=').ok_or_else(syntax)?;
            let policy = PrefixPolicy::parse(policy).ok_or_else(syntax)?;
            let Some(index) = specs.iter().position(|s| s.name.as_deref() == Some(name)) else {
                return Err(UpstreamSpecError::PrefixUnknownUpstream(
                    value.clone(),
                    name.to_owned(),
                ));
            };
            if policies[index].replace(policy).is_some() {
                return Err(UpstreamSpecError::PrefixTwice(name.to_owned()));
            }
        }
        Ok(policies.into_iter().map(|p| p.unwrap_or(default)).collect())
    }
}

impl UpstreamSpec {
    /// Parses one `--upstream` value.
    pub fn parse(text: &str) -> Result<UpstreamSpec, UpstreamSpecError> {
        let (name, rest) = match text.split_once('=') {
            Some((name, rest)) if is_upstream_name(name) && has_scheme(rest) => {
                (Some(name.to_owned()), rest)
            }
            // `bad.name=stdio:…` meant a name (the text before `=` is no target of its own).
            Some((name, rest)) if has_scheme(rest) && !has_scheme(name) => {
                return Err(UpstreamSpecError::BadName(name.to_owned()));
            }
            _ => (None, text),
        };
        let target = if let Some(command) = rest.strip_prefix("stdio:") {
            let argv = split_command(command)
                .ok_or_else(|| UpstreamSpecError::Unbalanced(text.to_owned()))?;
            if argv.is_empty() {
                return Err(UpstreamSpecError::EmptyCommand(text.to_owned()));
            }
            UpstreamTarget::Stdio(argv)
        } else if rest.starts_with("http://") {
            UpstreamTarget::Http(rest.to_owned())
        } else if rest.starts_with("https://") {
            return Err(UpstreamSpecError::Https(text.to_owned()));
        } else {
            return Err(UpstreamSpecError::Unknown(text.to_owned()));
        };
        Ok(UpstreamSpec { name, target })
    }

    /// Checks a whole list: with several upstreams each is named, uniquely.
    pub fn check_names(specs: &[UpstreamSpec]) -> Result<(), UpstreamSpecError> {
        if specs.len() < 2 {
            return Ok(());
        }
        let mut seen = std::collections::HashSet::new();
        for spec in specs {
            match &spec.name {
                Some(name) if seen.insert(name.as_str()) => {}
                Some(name) => return Err(UpstreamSpecError::Naming(format!("{name} twice"))),
                None => return Err(UpstreamSpecError::Naming(format!("{spec} has none"))),
            }
        }
        Ok(())
    }

    /// The name in everything a client or the admin listener can see (fault messages and
    /// data, `/status`, metric labels, logs): the given name, else `upstream-N` for the
    /// `index`-th flag (0-based; N counts from 1). Never the command or URL: a command line
    /// or a URL may carry a secret (`--api-key=…`, a password), and a client has no business
    /// with either.
    pub(crate) fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("upstream-{}", index + 1),
        }
    }
}

impl fmt::Display for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name}=")?;
        }
        match &self.target {
            UpstreamTarget::Stdio(argv) => write!(f, "stdio:{}", argv.join(" ")),
            UpstreamTarget::Http(url) => f.write_str(url),
        }
    }
}

fn is_upstream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= UPSTREAM_NAME_BYTES_MAX
        && !name.contains("__")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn has_scheme(rest: &str) -> bool {
    ["stdio:", "http://", "https://"].iter().any(|s| rest.starts_with(s))
}

/// Splits a command line like a POSIX shell's word splitting with quotes: whitespace separates
/// words, '…' keeps everything literally, "…" keeps everything but `\"` and `\\`, a backslash
/// outside quotes escapes the next character. No expansion of any kind. `None` when a quote
/// is not closed.
fn split_command(command: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\') => word.push(c),
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// `--upstream-isolation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum Isolation {
    /// One upstream connection (child process) per client session.
    #[default]
    PerSession,
    /// One upstream connection per core for all its sessions.
    Shared,
}

/// `--upstream-protocol NAME=…`: which MCP era tidemark speaks to an HTTP upstream (a stdio
/// upstream always gets the legacy handshake: 2026-07-28 defines no stdio framing of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum UpstreamProtocol {
    /// Probe with `server/discover`: an upstream that serves only 2026-07-28 is spoken to
    /// statelessly; one that also (or only) serves a legacy revision gets `initialize`, whose
    /// response streams can be resumed when a connection to it breaks mid-call.
    #[default]
    Auto,
    /// `initialize` and a session, never a probe.
    Legacy,
    /// 2026-07-28 only: a session whose upstream does not offer it fails to start.
    Modern,
}

impl UpstreamProtocol {
    /// `auto`, `legacy` or `modern`.
    pub(crate) fn parse(text: &str) -> Option<UpstreamProtocol> {
        match text {
            "auto" => Some(UpstreamProtocol::Auto),
            "legacy" => Some(UpstreamProtocol::Legacy),
            "modern" => Some(UpstreamProtocol::Modern),
            _ => None,
        }
    }
}

/// `--upstream-auth NAME=…`: what tidemark presents to an HTTP upstream as its bearer token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum UpstreamAuth {
    /// What `--upstream-credentials` configures (static headers, the subject header) and, for
    /// an upstream named by `--upstream-forward-authorization`, the client's own token.
    #[default]
    Static,
    /// The caller's token exchanged (RFC 8693) for one whose audience is the upstream, at the
    /// authorization server the credentials file's `NAME exchange …` lines name.
    Exchange,
}

impl UpstreamAuth {
    /// `static` or `exchange`.
    pub(crate) fn parse(text: &str) -> Option<UpstreamAuth> {
        match text {
            "static" => Some(UpstreamAuth::Static),
            "exchange" => Some(UpstreamAuth::Exchange),
            _ => None,
        }
    }
}

/// `--upstream-policy NAME=…`: what a session does when the upstream cannot be reached as it
/// starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum UpstreamPolicy {
    /// A session cannot start without it: the legacy `initialize` gets 503 + `Retry-After`
    /// with -32603 naming it; a 2026-07-28 call of a tool no up upstream lists, the same.
    #[default]
    Required,
    /// The session starts without its tools (and prompts, resources); they come back, with
    /// `notifications/tools/list_changed`, once it answers again.
    Optional,
}

impl UpstreamPolicy {
    /// `required` or `optional`.
    pub(crate) fn parse(text: &str) -> Option<UpstreamPolicy> {
        match text {
            "required" => Some(UpstreamPolicy::Required),
            "optional" => Some(UpstreamPolicy::Optional),
            _ => None,
        }
    }

    /// The flag's word for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            UpstreamPolicy::Required => "required",
            UpstreamPolicy::Optional => "optional",
        }
    }
}
