//! The authorization settings (`--auth-*`, `--allow-unauthenticated`): where the token set and
//! the policy are read from, what this resource is called, and the limits of both files.
//!
//! Owns: `AuthConfig` and its limits, and which issuer each JWK Set source belongs to
//! (`jwks_sources`). Never: reads a file (the `auth` module loads them).

use std::path::PathBuf;
use std::time::Duration;

/// Tokens one `--auth-tokens` file may list (`--auth-tokens-max`): the set is held in memory
/// (a digest, a subject and scopes each) and rebuilt whole on a reload, so it is bounded; a
/// longer file is refused at start (and kept out on a reload).
pub(crate) const AUTH_TOKENS_MAX: usize = 10_000;
/// Rules one `--auth-policy` file may hold (`--auth-policy-rules-max`). A decision walks the
/// rules in order until the first match; a longer file is refused at start.
pub(crate) const AUTH_POLICY_RULES_MAX: usize = 1_000;
/// Bytes of one `--auth-tokens` or `--auth-policy` file: a file larger than this is refused
/// whole (at start, or kept out on a reload) before it is parsed.
pub(crate) const AUTH_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// The longest a connection's cached verification of its token is used (`--auth-cache-secs`)
/// before the token is verified again, whatever its `exp`. A change of the token set or of a
/// JWK Set ends every cached verification at once anyway; this bounds what nothing signals
/// (a verifier's answer that would change with time alone). 300 s: one signature check per
/// connection per five minutes costs nothing (~50 µs for RS256).
pub(crate) const AUTH_CACHE_SECS: u64 = 300;
/// The largest `--auth-cache-secs` accepted: an hour; past it a verification would outlive
/// most access tokens' own lifetimes.
pub(crate) const AUTH_CACHE_SECS_MAX: u64 = 3600;

const _: () = assert!(AUTH_CACHE_SECS > 0 && AUTH_CACHE_SECS <= AUTH_CACHE_SECS_MAX);

/// Authorization of the MCP endpoint (OAuth 2.1 resource server, MCP authorization spec).
/// Off when no verifier is configured (`enabled`); a non-loopback listener then needs
/// `allow_unauthenticated`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AuthConfig {
    /// `--auth-tokens FILE`: static bearer tokens, `TOKEN SUBJECT [SCOPE,SCOPE…]` per line.
    pub tokens_file: Option<PathBuf>,
    /// `--auth-resource URL`: this server's resource URL (the metadata's `resource`, the `aud`
    /// a JWT must name). Default: `http://<listen address><path>`.
    pub resource: Option<String>,
    /// `--auth-issuer URL` (repeatable): the metadata's `authorization_servers`.
    pub issuers: Vec<String>,
    /// `--auth-scopes-supported` (comma-separated): the metadata's `scopes_supported`.
    pub scopes_supported: Vec<String>,
    /// `--auth-required-scope` (repeatable): scopes every request's token must hold (else 403
    /// `insufficient_scope`); the 401 challenge names them in `scope`.
    pub required_scopes: Vec<String>,
    /// `--auth-policy FILE`: the scopes tools, prompts and resources need.
    pub policy_file: Option<PathBuf>,
    /// `--auth-write-scope SCOPE`: the annotation default: a tool not annotated
    /// `readOnlyHint: true` needs this scope (on top of any policy rule).
    pub write_scope: Option<String>,
    /// `--allow-unauthenticated`: serve a non-loopback listener without authorization.
    pub allow_unauthenticated: bool,
    /// `--auth-tokens-max` (`AUTH_TOKENS_MAX`).
    pub tokens_max: usize,
    /// `--auth-policy-rules-max` (`AUTH_POLICY_RULES_MAX`).
    pub policy_rules_max: usize,
    /// `--auth-cache-secs` (`AUTH_CACHE_SECS`, at most `AUTH_CACHE_SECS_MAX`).
    pub cache_lifetime: Duration,
}

impl AuthConfig {
    /// The defaults with the limits set (what `Config::default` holds).
    pub(crate) fn with_limits() -> AuthConfig {
        AuthConfig {
            tokens_max: AUTH_TOKENS_MAX,
            policy_rules_max: AUTH_POLICY_RULES_MAX,
            cache_lifetime: Duration::from_secs(AUTH_CACHE_SECS),
            ..AuthConfig::default()
        }
    }

    /// True when static tokens are configured (`Config::auth_enabled` also counts the JWT
    /// verifier's `--auth-jwks-*`).
    pub fn enabled(&self) -> bool {
        self.tokens_file.is_some()
    }
}

/// Why the `--auth-jwks-*` sources cannot be given to issuers (the operator's mistake).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwksSourceError {
    /// An `--auth-issuer` holds `#` (RFC 8414 §2: an issuer has no fragment).
    #[error("--auth-issuer {0:?}: an issuer URL has no fragment ('#')")]
    IssuerFragment(String),
    /// An `--auth-jwks-*` value names no issuer while several `--auth-issuer` are configured.
    #[error(
        "{0} {1:?}: with several --auth-issuer, name the issuer the keys are for: ISSUER=SOURCE"
    )]
    WithoutIssuer(&'static str, String),
    /// Two `--auth-jwks-file` (or two `--auth-jwks-url`) for one issuer.
    #[error("{0}: given twice for the issuer {1:?}")]
    Twice(&'static str, String),
    /// An `--auth-issuer` with no `--auth-jwks-*` source while JWT access tokens are on.
    #[error(
        "--auth-issuer {0:?} has no key source: add --auth-jwks-url or --auth-jwks-file ISSUER=SOURCE"
    )]
    IssuerWithoutKeys(String),
    /// An `--auth-jwks-url` that is not an http:// or https:// URL.
    #[error("--auth-jwks-url must be an http:// or https:// URL, got {0:?}")]
    BadUrl(String),
}

/// One issuer's JWK Set sources (at most one file and one URL; at least one of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IssuerKeys {
    pub(crate) issuer: String,
    pub(crate) file: Option<PathBuf>,
    pub(crate) url: Option<String>,
}

/// The key sources of each of `issuers` (same order), from the `--auth-jwks-file` values
/// `files` and the `--auth-jwks-url` values `urls`: each value is `ISSUER=SOURCE`, ISSUER one
/// of `issuers` exactly, or a bare `SOURCE` when only one issuer is configured (it is that
/// issuer's). Empty when there are no sources. Refused: an issuer holding `#` (RFC 8414 §2: no
/// fragment; the namespaced subject `ISS#SUB` relies on it), a bare source beside several
/// issuers (its keys would verify every issuer's tokens), two files or two URLs for one
/// issuer, an issuer without a source, a URL that is not http(s).
pub(crate) fn jwks_sources(
    issuers: &[String],
    files: &[PathBuf],
    urls: &[String],
) -> Result<Vec<IssuerKeys>, JwksSourceError> {
    if files.is_empty() && urls.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(bad) = issuers.iter().find(|i| i.contains('#')) {
        return Err(JwksSourceError::IssuerFragment(bad.clone()));
    }
    let mut keys: Vec<IssuerKeys> = issuers
        .iter()
        .map(|issuer| IssuerKeys { issuer: issuer.clone(), file: None, url: None })
        .collect();
    for file in files {
        let text = file.to_string_lossy();
        let (at, path) = owner(&text, issuers, "--auth-jwks-file")?;
        if keys[at].file.replace(PathBuf::from(path)).is_some() {
            return Err(JwksSourceError::Twice("--auth-jwks-file", issuers[at].clone()));
        }
    }
    for value in urls {
        let (at, url) = owner(value, issuers, "--auth-jwks-url")?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(JwksSourceError::BadUrl(url.to_owned()));
        }
        if keys[at].url.replace(url.to_owned()).is_some() {
            return Err(JwksSourceError::Twice("--auth-jwks-url", issuers[at].clone()));
        }
    }
    if let Some(bare) = keys.iter().find(|k| k.file.is_none() && k.url.is_none()) {
        return Err(JwksSourceError::IssuerWithoutKeys(bare.issuer.clone()));
    }
    Ok(keys)
}

/// Which issuer a source value names (its index) and the source: the longest configured
/// issuer that `value` starts with, followed by `=`; else the only issuer.
fn owner<'v>(
    value: &'v str,
    issuers: &[String],
    flag: &'static str,
) -> Result<(usize, &'v str), JwksSourceError> {
    let named = issuers
        .iter()
        .enumerate()
        .filter(|(_, issuer)| {
            value.strip_prefix(issuer.as_str()).is_some_and(|r| r.starts_with('='))
        })
        .max_by_key(|(_, issuer)| issuer.len());
    match named {
        Some((at, issuer)) => Ok((at, &value[issuer.len() + 1..])),
        None if issuers.len() == 1 => Ok((0, value)),
        None => Err(JwksSourceError::WithoutIssuer(flag, value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: each source goes to the issuer it names (the longest match), a bare one to the
    /// only issuer, and every ambiguous or incomplete set-up is refused by name.
    #[test]
    fn sources_belong_to_the_issuer_they_name() {
        let one = vec!["https://a.example".to_owned()];
        let urls = vec!["https://a.example/jwks".to_owned()];
        let got = jwks_sources(&one, &[], &urls).expect("one issuer");
        assert_eq!(got[0].url.as_deref(), Some("https://a.example/jwks"));
        let two = vec!["https://a.example".to_owned(), "https://a.example/b".to_owned()];
        let files = vec![PathBuf::from("https://a.example/b=/etc/b.json")];
        let urls = vec!["https://a.example=https://a.example/jwks?x=1".to_owned()];
        let got = jwks_sources(&two, &files, &urls).expect("two issuers");
        assert_eq!(got[0].url.as_deref(), Some("https://a.example/jwks?x=1"));
        assert_eq!(got[0].file, None);
        assert_eq!(got[1].file, Some(PathBuf::from("/etc/b.json")));
        let bare = vec!["https://a.example/jwks".to_owned()];
        let e = jwks_sources(&two, &files, &bare).expect_err("bare beside two");
        assert!(matches!(e, JwksSourceError::WithoutIssuer("--auth-jwks-url", _)), "{e}");
        let e = jwks_sources(&two, &[], &urls).expect_err("b has no source");
        assert_eq!(e, JwksSourceError::IssuerWithoutKeys("https://a.example/b".into()));
        let twice = vec![urls[0].clone(), urls[0].clone()];
        let e = jwks_sources(&two, &files, &twice).expect_err("twice");
        assert_eq!(e, JwksSourceError::Twice("--auth-jwks-url", "https://a.example".into()));
        let hash = vec!["https://a.example#x".to_owned()];
        let e = jwks_sources(&hash, &[], &bare).expect_err("fragment");
        assert_eq!(e, JwksSourceError::IssuerFragment("https://a.example#x".into()));
        let e = jwks_sources(&one, &[], &["file:///etc/passwd".to_owned()]).expect_err("scheme");
        assert!(matches!(e, JwksSourceError::BadUrl(_)));
        assert_eq!(jwks_sources(&two, &[], &[]), Ok(Vec::new()));
    }
}
