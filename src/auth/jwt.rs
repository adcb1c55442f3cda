//! JWT access tokens (RFC 9068 shape) issued by an OAuth authorization server for this
//! resource: `JwtVerifier` checks the signature against the issuer's keys (`jwks`) and the
//! claims the MCP authorization spec asks a resource server to check.
//!
//! Rules, in the order they are applied (the first that fails names the `TokenError`):
//! at most `AUTH_TOKEN_BYTES_MAX` bytes, three base64url parts (`Malformed`); header `alg`
//! RS256, ES256 or EdDSA (`none`, any HMAC, anything else: `AlgorithmNotAllowed`); the key
//! its `kid` names is in the set (`UnknownKey`, and the set is read again in the background)
//! and verifies exactly that `alg` (`AlgorithmNotAllowed`: no HMAC with a public key's bytes);
//! the signature (`BadSignature`); `exp`, `sub`, `aud`, `iss` present (`Malformed`); `aud`
//! contains the resource URL (`WrongAudience`); `iss` one of the configured issuers
//! (`WrongIssuer`); `exp` after now, `nbf` (when present) not after now, each with the
//! leeway (`Expired`, `NotYetValid`); `exp` a time the clock can represent (`Malformed`: a
//! token never "never expires"). `exp` and `nbf` may be fractional (RFC 7519 §2 NumericDate):
//! a token is valid from `nbf` on and strictly before `exp`, to the sub-second. Scopes:
//! `scope` (space separated), else `scp` (array or string).
//!
//! Issuers are kept apart (CONTRACT §8): each `--auth-issuer` has its own key sources, and a
//! token is checked only with the keys of the issuer its `iss` names (with several issuers the
//! unverified `iss` only picks the key set; the signature then decides). The subject a token
//! names is its issuer and `sub` together (`subject`), never `sub` alone.
//!
//! Owns: `JwtVerifier`. Never: blocks or reaches the network (keys come from memory; an
//! unknown `kid` only rings the refresher), reads the clock (the caller's `now` decides), or
//! puts a token or a claim in an error.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};

use super::claims::{Claims, TokenError, TokenVerifier};
use super::jwks::{Jwks, JwksError, JwksSettings};
use crate::config::{jwks_sources, Config, AUTH_TOKEN_BYTES_MAX};

/// The algorithms a token may be signed with (asymmetric only).
const ALGORITHMS: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// What a token must have been issued for.
#[derive(Clone, Debug)]
pub(crate) struct JwtSettings {
    /// This server's resource URL (`--auth-resource`): `aud` must contain it.
    pub(crate) resource: String,
    /// The accepted `iss` values (`--auth-issuer`); at least one, each with its own keys.
    pub(crate) issuers: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf` (`--auth-leeway-secs`).
    pub(crate) leeway: Duration,
}

/// A `JwtSettings` that cannot check anything.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JwtSettingsError {
    #[error("JWT access tokens need --auth-resource (the audience tokens must name)")]
    NoResource,
    #[error("JWT access tokens need at least one --auth-issuer")]
    NoIssuer,
    #[error("JWT access tokens: {0}")]
    Sources(String),
    #[error(transparent)]
    Keys(#[from] JwksError),
}

/// Checks JWT access tokens, each against its own issuer's current key set.
pub(crate) struct JwtVerifier {
    issuers: Vec<Issuer>,
    leeway_secs: f64,
}

/// One configured issuer: its name, its keys, and how its tokens are checked.
struct Issuer {
    name: Box<str>,
    keys: Arc<Jwks>,
    /// One per entry of `ALGORITHMS`, built once: the audience and this issuer are not
    /// rebuilt per token.
    validations: [Validation; 3],
}

/// The claims read from a token beyond what `jsonwebtoken` checks itself (`aud`, `iss`).
/// `exp` and `nbf` are NumericDates, which RFC 7519 §2 lets be fractional.
#[derive(serde::Deserialize)]
struct TokenClaims {
    sub: String,
    iss: String,
    exp: f64,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<ScopeList>,
}

/// `scp` as some servers send it: an array of scopes or one space-separated string.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ScopeList {
    List(Vec<String>),
    Text(String),
}

/// Just the header's `alg`, to tell `none` and unknown algorithms from garbage.
#[derive(serde::Deserialize)]
struct AlgOnly {
    #[allow(
        dead_code,
        reason = "required by the decode (a header without `alg` is garbage), never read"
    )]
    alg: String,
}

/// Just the payload's `iss`: with several issuers, which key set to check the token with.
#[derive(serde::Deserialize)]
struct IssOnly {
    iss: String,
}

impl JwtVerifier {
    /// The verifier the flags ask for: `None` without `--auth-jwks-url` and
    /// `--auth-jwks-file`; else, for each of `issuers` (`--auth-issuer`), the key sources
    /// that name it (or, with one issuer, every source: `config::jwks_sources`), read once now
    /// and then by a refresher thread each, for tokens of `resource` (`--auth-resource`).
    /// Called once at start-up, before the workers run; an error stops the start.
    pub(crate) fn from_config(
        cfg: &Config,
        resource: &str,
        issuers: &[String],
    ) -> Result<Option<JwtVerifier>, JwtSettingsError> {
        if cfg.auth.jwks_url.is_empty() && cfg.auth.jwks_file.is_empty() {
            return Ok(None);
        }
        let settings = JwtSettings {
            resource: resource.to_owned(),
            issuers: issuers.to_vec(),
            leeway: cfg.auth.leeway,
        };
        // Checked before any key is read: a misconfiguration starts no thread.
        let none = issuers.iter().map(|_| Jwks::fixed(Default::default())).collect();
        JwtVerifier::new(settings.clone(), none)?;
        let sources = jwks_sources(issuers, &cfg.auth.jwks_file, &cfg.auth.jwks_url)
            .map_err(|e| JwtSettingsError::Sources(e.to_string()))?;
        let mut keys = Vec::with_capacity(sources.len());
        for source in sources {
            keys.push(Jwks::start(JwksSettings {
                file: source.file,
                url: source.url,
                refresh: cfg.auth.jwks_refresh,
                min_refetch: cfg.auth.jwks_min_refetch,
            })?);
        }
        JwtVerifier::new(settings, keys).map(Some)
    }

    /// A verifier of tokens by `settings.issuers`, the issuer at each index checked with the
    /// key set at the same index of `keys` (and only with it).
    pub(crate) fn new(
        settings: JwtSettings,
        keys: Vec<Arc<Jwks>>,
    ) -> Result<Self, JwtSettingsError> {
        if settings.resource.is_empty() {
            return Err(JwtSettingsError::NoResource);
        }
        if settings.issuers.is_empty() {
            return Err(JwtSettingsError::NoIssuer);
        }
        if keys.len() != settings.issuers.len() {
            let why = format!("{} issuers, {} key sets", settings.issuers.len(), keys.len());
            return Err(JwtSettingsError::Sources(why));
        }
        let issuers = settings
            .issuers
            .iter()
            .zip(keys)
            .map(|(name, keys)| Issuer {
                name: name.as_str().into(),
                keys,
                validations: validations(&settings.resource, name),
            })
            .collect();
        Ok(JwtVerifier { issuers, leeway_secs: settings.leeway.as_secs_f64() })
    }

    /// The issuer whose keys check `token`: the only one, or the one its (not yet verified)
    /// `iss` names; `WrongIssuer` when it names none, `Malformed` when it has no `iss`.
    fn issuer_of(&self, token: &str) -> Result<&Issuer, TokenError> {
        if let [only] = &self.issuers[..] {
            return Ok(only);
        }
        use base64::Engine as _;
        let payload = token.split('.').nth(1).unwrap_or_default();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let iss = serde_json::from_slice::<IssOnly>(&json).map_err(|_| TokenError::Malformed)?.iss;
        self.issuers.iter().find(|i| *i.name == *iss).ok_or(TokenError::WrongIssuer)
    }

    /// The number of changes of every issuer's key set so far: it moves when a refresh or a
    /// reload swaps in keys that differ, so a connection's cached verification is redone.
    pub(crate) fn key_changes(&self) -> u64 {
        self.issuers.iter().map(|i| i.keys.changes()).sum()
    }

    /// SIGHUP: every issuer's key sources read again soon (`--auth-jwks-min-refetch-secs`).
    pub(crate) fn reload_keys(&self) {
        for issuer in &self.issuers {
            issuer.keys.request_refetch();
        }
    }
}

/// The `jsonwebtoken` checks of one issuer's tokens, one per entry of `ALGORITHMS`.
fn validations(resource: &str, issuer: &str) -> [Validation; 3] {
    ALGORITHMS.map(|algorithm| {
        let mut validation = Validation::new(algorithm);
        validation.set_required_spec_claims(&["exp", "sub", "aud", "iss"]);
        // Time is checked here against the caller's `now`, not the crate's clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = true;
        validation.set_audience(&[resource]);
        validation.set_issuer(&[issuer]);
        validation
    })
}

impl Issuer {
    fn validation(&self, algorithm: Algorithm) -> Option<&Validation> {
        ALGORITHMS.iter().position(|a| *a == algorithm).map(|at| &self.validations[at])
    }
}

/// The subject of `sub` issued by `iss` (CONTRACT §8: namespaced): `ISS#SUB`. Unambiguous:
/// an issuer holds no `#` (`config::jwks_sources` refuses one; RFC 8414 §2: no fragment),
/// so the first `#` ends it; and a static token's subject holds none (`#` starts a comment in
/// `--auth-tokens`), so no JWT continues a static token's session or the reverse.
pub(crate) fn subject(iss: &str, sub: &str) -> Box<str> {
    format!("{iss}#{sub}").into_boxed_str()
}

impl TokenVerifier for JwtVerifier {
    fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        if token.len() > AUTH_TOKEN_BYTES_MAX || token.bytes().filter(|b| *b == b'.').count() != 2 {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| unusable_header(token))?;
        let issuer = self.issuer_of(token)?;
        let Some(validation) = issuer.validation(header.alg) else {
            return Err(TokenError::AlgorithmNotAllowed);
        };
        let keys = issuer.keys.keys();
        let Some(key) = keys.find(header.kid.as_deref(), header.alg) else {
            issuer.keys.request_refetch();
            return Err(TokenError::UnknownKey);
        };
        if key.algorithm != header.alg {
            return Err(TokenError::AlgorithmNotAllowed);
        }
        let data = jsonwebtoken::decode::<TokenClaims>(token, &key.decoding, validation)
            .map_err(|e| token_error(e.kind()))?;
        let claims = data.claims;
        let expires_at = check_time(claims.exp, claims.nbf, now, self.leeway_secs)?;
        if claims.sub.is_empty() {
            return Err(TokenError::Malformed);
        }
        let scopes = match (claims.scope, claims.scp) {
            (Some(text), _) | (None, Some(ScopeList::Text(text))) => {
                text.split(' ').filter(|s| !s.is_empty()).map(Box::from).collect()
            }
            (None, Some(ScopeList::List(list))) => {
                list.into_iter().map(String::into_boxed_str).collect()
            }
            (None, None) => Vec::new(),
        };
        Ok(Claims {
            subject: subject(&claims.iss, &claims.sub),
            scopes,
            expires_at: Some(expires_at),
        })
    }

    fn generation(&self) -> u64 {
        self.key_changes()
    }

    fn reload(&self) {
        self.reload_keys();
    }
}

/// The time rules at `now`, with `leeway` seconds of skew either way: valid from `nbf` on and
/// strictly before `exp` (both may be fractional); `Ok`: the instant `exp` names, which must be
/// one the clock can represent (`Malformed` otherwise: a token never "never expires").
fn check_time(
    exp: f64,
    nbf: Option<f64>,
    now: SystemTime,
    leeway: f64,
) -> Result<SystemTime, TokenError> {
    let expires_at = Duration::try_from_secs_f64(exp)
        .ok()
        .and_then(|since| UNIX_EPOCH.checked_add(since))
        .ok_or(if exp < 0.0 { TokenError::Expired } else { TokenError::Malformed })?;
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    if now_secs >= exp + leeway {
        return Err(TokenError::Expired);
    }
    if matches!(nbf, Some(nbf) if now_secs + leeway < nbf) {
        return Err(TokenError::NotYetValid);
    }
    Ok(expires_at)
}

/// A header `jsonwebtoken` would not read: `AlgorithmNotAllowed` when it names an algorithm
/// the crate has no variant for (`none` above all), `Malformed` otherwise.
fn unusable_header(token: &str) -> TokenError {
    use base64::Engine as _;
    let encoded = token.split('.').next().unwrap_or_default();
    let Ok(json) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) else {
        return TokenError::Malformed;
    };
    match serde_json::from_slice::<AlgOnly>(&json) {
        Ok(_) => TokenError::AlgorithmNotAllowed,
        Err(_) => TokenError::Malformed,
    }
}

fn token_error(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::MissingAlgorithm
        | ErrorKind::InvalidAlgorithmName => TokenError::AlgorithmNotAllowed,
        ErrorKind::InvalidAudience => TokenError::WrongAudience,
        ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidToken
        | ErrorKind::MissingRequiredClaim(_)
        | ErrorKind::InvalidClaimFormat(_)
        | ErrorKind::InvalidSubject
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => TokenError::Malformed,
        _ => TokenError::Unknown,
    }
}
