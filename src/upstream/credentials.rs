//! What tidemark presents to an upstream of its own (issue 18 item 5): the operator's
//! per-upstream credentials, read once at start-up from `--upstream-credentials FILE`, never
//! from the command line (where `ps` shows them). The client's own token is never passed on,
//! except to an upstream named by `--upstream-forward-authorization` (one that is this same
//! resource, so the token's audience is right there too).
//!
//! The file, one rule per line (`#` starts a comment line; blank lines are skipped):
//!
//! ```text
//! NAME header HEADER-NAME VALUE…     an HTTP upstream gets HEADER-NAME: VALUE on every request
//! NAME env KEY VALUE…                a stdio upstream's child gets KEY=VALUE in its environment
//! NAME subject-header HEADER-NAME    an HTTP upstream gets the client's subject (not its token)
//! NAME exchange FIELD VALUE…         the token exchange of `--upstream-auth NAME=exchange`
//! ```
//!
//! An exchange (RFC 8693, `exchange`) takes the FIELDs `token-endpoint` (the authorization
//! server's URL), `client-id`, `client-secret` (tidemark's client there; the secret best as
//! `${VAR}`; none: a public client), and `audience` and/or `resource` (the upstream as the
//! server names it); an upstream with `--upstream-auth NAME=exchange` needs the endpoint, the
//! client id and one of the last two, and one without it may have no `exchange` line.
//!
//! NAME is an `--upstream NAME=…`, or `*` for every upstream (the only way to name a single
//! unnamed one). VALUE is the rest of the line (spaces kept, trailing blanks dropped); `${VAR}`
//! in it is replaced by tidemark's environment variable VAR (so the file can name secrets
//! without holding them), `$$` is a `$`. A missing VAR, an unknown NAME, a header tidemark sets
//! itself, a value with a CR, LF or NUL: start-up fails naming the line, never the value.
//!
//! Owns: the file's grammar, `CredentialTable` and `Credentials` (with each exchange's
//! `ExchangeTarget`). Never: logs, formats or
//! returns a value (`Debug` shows header names and variable keys only), or reads the client's
//! `Authorization` header (the request path hands it over for forwarding upstreams only).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::exchange::{ExchangeTarget, Tuning};
use crate::config::UPSTREAM_CREDENTIALS_BYTES_MAX;

/// Headers the HTTP transport writes itself: a credentials line may not set them.
const RESERVED_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "upgrade",
];

/// What tidemark presents to one upstream.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    /// Sent on every request to an HTTP upstream, after the transport's own headers.
    pub(crate) headers: Vec<(Box<str>, Box<str>)>,
    /// Added to a stdio upstream child's environment (after `--upstream-env`).
    pub(crate) env: Vec<(Box<str>, Box<str>)>,
    /// The header that carries the client's subject to an HTTP upstream: on every request of
    /// a per-session link (the session opener's, from `SessionStart::caller`), and on each
    /// call's requests (the call's, from `CallContext::caller`) of any link.
    pub(crate) subject_header: Option<Box<str>>,
    /// `--upstream-forward-authorization NAME`: the client's own `Authorization` header is sent
    /// on where `subject_header` would be, in place of a configured one (which stays for the
    /// link's own requests that no client made: a shared link's `initialize` and listings).
    pub(crate) forward_authorization: bool,
    /// `--upstream-auth NAME=exchange`: every request that speaks for a caller (a call's, or a
    /// per-session link's own) carries the caller's token exchanged at this target, in place
    /// of a configured `Authorization` (which stays for requests that speak for no one).
    pub(crate) exchange: Option<Arc<ExchangeTarget>>,
}

/// An upstream's `exchange` lines, as read.
#[derive(Clone, Default)]
struct ExchangeLines {
    token_endpoint: Option<Box<str>>,
    client_id: Option<Box<str>>,
    client_secret: Option<Box<str>>,
    audience: Option<Box<str>>,
    resource: Option<Box<str>>,
    /// The first line's number, for the errors.
    line: usize,
}

impl fmt::Debug for Credentials {
    // Names only: a credential's value never reaches a log line or a panic message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| &**name).collect();
        let env: Vec<&str> = self.env.iter().map(|(key, _)| &**key).collect();
        f.debug_struct("Credentials")
            .field("headers", &headers)
            .field("env", &env)
            .field("subject_header", &self.subject_header)
            .field("forward_authorization", &self.forward_authorization)
            .field("exchange", &self.exchange)
            .finish()
    }
}

/// Every upstream's credentials.
#[derive(Clone, Debug, Default)]
pub(crate) struct CredentialTable {
    every: Credentials,
    by_name: HashMap<Box<str>, Credentials>,
    /// Each upstream's `exchange` lines, until `load` made its target.
    exchanges: HashMap<Box<str>, ExchangeLines>,
}

impl fmt::Debug for ExchangeLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeLines").field("line", &self.line).finish_non_exhaustive()
    }
}

/// Why the credentials file cannot be used (each names the file's line, never a value).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    #[error("--upstream-credentials {path}: {error}")]
    File { path: String, error: String },
    #[error("--upstream-credentials line {line}: {why}")]
    Line { line: usize, why: String },
    #[error("--upstream-auth {name}=exchange: {why}")]
    Exchange { name: String, why: String },
}

impl CredentialTable {
    /// Reads `path` (at most `UPSTREAM_CREDENTIALS_BYTES_MAX` bytes), with `${VAR}` taken from
    /// the process's environment; `forward` are the `--upstream-forward-authorization` names,
    /// `exchange` the `--upstream-auth NAME=exchange` ones (each made a target with `tuning`).
    pub(crate) fn load(
        path: Option<&Path>,
        known: &[&str],
        forward: &[String],
        exchange: (&[&str], Tuning),
    ) -> Result<CredentialTable, CredentialsError> {
        let text = match path {
            Some(path) => read_bounded(path)?,
            None => String::new(),
        };
        let mut table = CredentialTable::parse(&text, known, |var| std::env::var(var).ok())?;
        for name in forward {
            table.by_name.entry(name.as_str().into()).or_default().forward_authorization = true;
        }
        table.make_exchanges(exchange.0, exchange.1)?;
        Ok(table)
    }

    /// Makes the target of each upstream in `exchanging` from its `exchange` lines; an
    /// upstream not in it may have none.
    fn make_exchanges(
        &mut self,
        exchanging: &[&str],
        tuning: Tuning,
    ) -> Result<(), CredentialsError> {
        for (name, lines) in &self.exchanges {
            if !exchanging.contains(&&**name) {
                let why =
                    format!("{name} has exchange lines but no --upstream-auth {name}=exchange");
                return Err(CredentialsError::Line { line: lines.line, why });
            }
        }
        for name in exchanging {
            let missing = |what: &str| CredentialsError::Exchange {
                name: (*name).to_owned(),
                why: format!("no '{name} exchange {what} …' line in --upstream-credentials"),
            };
            let lines = self.exchanges.get(*name).cloned().unwrap_or_default();
            let endpoint = lines.token_endpoint.ok_or_else(|| missing("token-endpoint"))?;
            let client_id = lines.client_id.ok_or_else(|| missing("client-id"))?;
            if lines.audience.is_none() && lines.resource.is_none() {
                return Err(missing("audience (or resource)"));
            }
            let target = ExchangeTarget::new(
                name,
                endpoint,
                client_id,
                lines.client_secret,
                lines.audience,
                lines.resource,
                tuning,
            );
            self.by_name.entry((*name).into()).or_default().exchange = Some(Arc::new(target));
        }
        Ok(())
    }

    /// Parses the file's text; `known` are the upstreams' names, `lookup` the environment.
    pub(crate) fn parse(
        text: &str,
        known: &[&str],
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<CredentialTable, CredentialsError> {
        let mut table = CredentialTable::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let fail = |why: String| CredentialsError::Line { line, why };
            let rule = raw.trim_end();
            if rule.trim_start().is_empty() || rule.trim_start().starts_with('#') {
                continue;
            }
            let mut words = rule.splitn(4, ' ');
            let (name, kind) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let target = if name == "*" {
                &mut table.every
            } else if known.contains(&name) {
                table.by_name.entry(name.into()).or_default()
            } else {
                return Err(fail(format!("no --upstream is named {name:?} (or use '*')")));
            };
            let key = words.next().unwrap_or("");
            let value = words.next();
            match (kind, value) {
                ("header", Some(value)) => {
                    check_header_name(key).map_err(fail)?;
                    let value = substitute(value, &lookup).map_err(fail)?;
                    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                        return Err(fail(format!("the value of header {key} has a CR, LF or NUL")));
                    }
                    target.headers.push((key.into(), value.into()));
                }
                ("env", Some(value)) => {
                    if key.is_empty() || key.contains('=') || key.contains('\0') {
                        return Err(fail(format!("{key:?} is not an environment variable name")));
                    }
                    let value = substitute(value, &lookup).map_err(fail)?;
                    if value.contains('\0') {
                        return Err(fail(format!("the value of {key} has a NUL")));
                    }
                    target.env.push((key.into(), value.into()));
                }
                ("subject-header", None) => {
                    check_header_name(key).map_err(fail)?;
                    target.subject_header = Some(key.into());
                }
                ("exchange", Some(value)) if name != "*" => {
                    let value = substitute(value, &lookup).map_err(fail)?;
                    let lines = table.exchanges.entry(name.into()).or_default();
                    if lines.line == 0 {
                        lines.line = line;
                    }
                    exchange_line(lines, key, value.into()).map_err(fail)?;
                }
                _ => {
                    let expected = "expected 'NAME header HEADER VALUE', 'NAME env KEY VALUE' or \
                                    'NAME subject-header HEADER' or 'NAME exchange FIELD VALUE'";
                    return Err(fail(expected.to_owned()));
                }
            }
        }
        Ok(table)
    }

    /// What upstream `name` (its `NAME=`, or `None` for an unnamed one) gets: the `*` rules,
    /// then its own.
    pub(crate) fn for_upstream(&self, name: Option<&str>) -> Arc<Credentials> {
        let mut credentials = self.every.clone();
        if let Some(own) = name.and_then(|name| self.by_name.get(name)) {
            credentials.headers.extend(own.headers.iter().cloned());
            credentials.env.extend(own.env.iter().cloned());
            if own.subject_header.is_some() {
                credentials.subject_header.clone_from(&own.subject_header);
            }
            credentials.forward_authorization |= own.forward_authorization;
            credentials.exchange.clone_from(&own.exchange);
        }
        Arc::new(credentials)
    }
}

fn read_bounded(path: &Path) -> Result<String, CredentialsError> {
    let fail = |error: String| CredentialsError::File { path: path.display().to_string(), error };
    let text = crate::fsread::read_text(path, UPSTREAM_CREDENTIALS_BYTES_MAX as u64)
        .map_err(|e| fail(e.to_string()))?;
    // The mode only warns, so reading it by name after the read (a race at worst) is enough.
    if let Ok(metadata) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt as _;
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the upstream credentials file is readable by others than its owner (chmod 600)"
            );
        }
    }
    Ok(text)
}

/// One `exchange FIELD VALUE` line into `lines`.
fn exchange_line(lines: &mut ExchangeLines, field: &str, value: Box<str>) -> Result<(), String> {
    let slot = match field {
        "token-endpoint" => {
            if !(value.starts_with("http://") || value.starts_with("https://")) {
                return Err("the exchange token-endpoint is no http:// or https:// URL".to_owned());
            }
            &mut lines.token_endpoint
        }
        "client-id" => &mut lines.client_id,
        "client-secret" => &mut lines.client_secret,
        "audience" => &mut lines.audience,
        "resource" => &mut lines.resource,
        _ => {
            return Err(format!(
                "exchange {field:?}: expected token-endpoint, client-id, client-secret, audience \
                 or resource"
            ))
        }
    };
    if slot.is_some() {
        return Err(format!("a second exchange {field}"));
    }
    *slot = Some(value);
    Ok(())
}

/// A header name (an RFC 9110 token) the transport does not write itself.
fn check_header_name(name: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!("{name} is set by tidemark itself"));
    }
    Ok(())
}

/// `value` with each `${VAR}` replaced by `lookup(VAR)` and `$$` by `$`.
fn substitute(value: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or("an unclosed ${")?;
            let var = &braced[..end];
            let found =
                lookup(var).ok_or_else(|| format!("environment variable {var} is unset"))?;
            out.push_str(&found);
            rest = &braced[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning() -> Tuning {
        let timeout = std::time::Duration::from_secs(10);
        let (margin, answer_bytes) = (std::time::Duration::from_secs(30), 64 * 1024);
        Tuning { margin, cache_entries: 16, timeout, answer_bytes }
    }

    #[test]
    fn exchange_lines_make_a_target_only_for_an_exchanging_upstream() {
        // Goal: the `exchange` lines of an `--upstream-auth NAME=exchange` upstream make its
        // target (the secret from the environment, shown nowhere); a missing field, a stray
        // line or a bad one fails naming the upstream or the line. Method: parse, then make.
        let text = "search exchange token-endpoint http://as.example/token\n\
            search exchange client-id gateway\n\
            search exchange client-secret ${TOKEN}\n\
            search exchange audience search-api\n";
        let mut table = CredentialTable::parse(text, &["search", "files"], lookup).expect("ok");
        table.make_exchanges(&["search"], tuning()).expect("made");
        let search = table.for_upstream(Some("search"));
        let target = search.exchange.as_ref().expect("a target");
        assert_eq!(target.client_secret.as_deref(), Some("s3cret"));
        assert_eq!(target.audience.as_deref(), Some("search-api"));
        assert!(table.for_upstream(Some("files")).exchange.is_none());
        assert!(!format!("{table:?}").contains("s3cret"));
        let mut stray = CredentialTable::parse(text, &["search"], lookup).expect("ok");
        let error = stray.make_exchanges(&[], tuning()).expect_err("stray").to_string();
        assert!(error.contains("line 1") && error.contains("no --upstream-auth"), "{error}");
        let mut empty = CredentialTable::parse("", &["search"], lookup).expect("ok");
        let error = empty.make_exchanges(&["search"], tuning()).expect_err("none").to_string();
        assert!(error.contains("search=exchange") && error.contains("token-endpoint"), "{error}");
        for (line, expected) in [
            ("search exchange token-endpoint ftp://x", "no http://"),
            ("search exchange scope x", "expected token-endpoint"),
            ("* exchange client-id x", "expected"),
        ] {
            let error = CredentialTable::parse(line, &["search"], lookup).expect_err(line);
            assert!(error.to_string().contains(expected), "{line}: {error}");
        }
    }

    fn lookup(var: &str) -> Option<String> {
        match var {
            "TOKEN" => Some("s3cret".to_owned()),
            "EVIL" => Some("x\r\nInjected: yes".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn rules_parse_per_upstream_with_variables_and_every_upstream_rules_first() {
        // Goal: the file's three rules, `*` and named, `${VAR}` and `$$`, comments; Debug
        // shows no value. Method: parse a file, look each upstream up.
        let text = "# credentials\n\
            \n\
            * header X-Tenant acme\n\
            search header Authorization Bearer ${TOKEN}\n\
            search subject-header X-Subject\n\
            files env API_KEY key-${TOKEN}-$$1  \n\
            files env PLAIN a b c\n";
        let table = CredentialTable::parse(text, &["search", "files"], lookup).expect("parses");
        let search = table.for_upstream(Some("search"));
        assert_eq!(
            search.headers,
            vec![
                ("X-Tenant".into(), "acme".into()),
                ("Authorization".into(), "Bearer s3cret".into())
            ]
        );
        assert_eq!(search.subject_header.as_deref(), Some("X-Subject"));
        let files = table.for_upstream(Some("files"));
        assert_eq!(
            files.env,
            vec![("API_KEY".into(), "key-s3cret-$1".into()), ("PLAIN".into(), "a b c".into())]
        );
        let unnamed = table.for_upstream(None);
        assert_eq!(unnamed.headers, vec![("X-Tenant".into(), "acme".into())]);
        assert!(!unnamed.forward_authorization);
        let shown = format!("{table:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("acme"), "{shown}");
        assert!(shown.contains("Authorization") && shown.contains("API_KEY"), "{shown}");
    }

    #[test]
    fn bad_lines_fail_naming_the_line_and_never_the_value() {
        // Goal: each mistake is refused at start-up with its line number; no secret in the
        // message. Method: one bad line per case.
        let cases = [
            ("nosuch header A b", "no --upstream is named"),
            ("up header Host x", "set by tidemark itself"),
            ("up header mcp-session-id x", "set by tidemark itself"),
            ("up header Bad:Name x", "not a header name"),
            ("up header A ${MISSING}", "MISSING is unset"),
            ("up header A ${EVIL}", "CR, LF or NUL"),
            ("up header A ${TOKEN", "unclosed"),
            ("up env A=B c", "not an environment variable name"),
            ("up header OnlyName", "expected"),
            ("up password x y", "expected"),
            ("up subject-header X-S extra", "expected"),
        ];
        for (text, expected) in cases {
            let text = format!("# first\n{text}\n");
            let error =
                CredentialTable::parse(&text, &["up"], lookup).expect_err(&text).to_string();
            assert!(error.contains("line 2") && error.contains(expected), "{text}: {error}");
            assert!(!error.contains("s3cret") && !error.contains("Injected"), "{error}");
        }
    }

    #[test]
    fn forwarding_is_per_named_upstream_and_the_file_is_bounded() {
        // Goal: --upstream-forward-authorization marks only its upstream; a file over the
        // limit is refused, one at the limit read. Method: load from temporary files.
        let dir = std::env::temp_dir().join(format!("tidemark-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("credentials");
        let mut text = "self header X-A b\n".to_owned();
        text.push_str(&"#".repeat(UPSTREAM_CREDENTIALS_BYTES_MAX - text.len()));
        std::fs::write(&path, &text).expect("write");
        let table = CredentialTable::load(
            Some(&path),
            &["self", "other"],
            &["self".to_owned()],
            (&[], tuning()),
        )
        .expect("at the limit");
        assert!(table.for_upstream(Some("self")).forward_authorization);
        assert!(!table.for_upstream(Some("other")).forward_authorization);
        text.push('#');
        std::fs::write(&path, &text).expect("write");
        let error =
            CredentialTable::load(Some(&path), &["self"], &[], (&[], tuning())).expect_err("over");
        assert!(error.to_string().contains("over 65536 bytes"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
