//! Which issuer each `--auth-jwks-file`/`--auth-jwks-url` source belongs to
//! (`jwks_sources`), and why a set-up of them is refused.
//!
//! Owns: `JwksSourceError`, `IssuerKeys`. Never: reads or fetches a key set.

use std::path::PathBuf;

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
