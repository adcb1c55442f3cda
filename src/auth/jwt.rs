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
//! leeway (`Expired`, `NotYetValid`). Scopes: `scope` (space separated), else `scp` (array
//! or string).
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
use crate::config::{Config, AUTH_TOKEN_BYTES_MAX};

/// The algorithms a token may be signed with (asymmetric only).
const ALGORITHMS: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// What a token must have been issued for.
#[derive(Clone, Debug)]
pub(crate) struct JwtSettings {
    /// This server's resource URL (`--auth-resource`): `aud` must contain it.
    pub(crate) resource: String,
    /// The accepted `iss` values (`--auth-issuer`); at least one.
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
    #[error(transparent)]
    Keys(#[from] JwksError),
}

/// Checks JWT access tokens against the current key set.
pub(crate) struct JwtVerifier {
    keys: Arc<Jwks>,
    /// One per entry of `ALGORITHMS`, built once: the audience and issuer sets are not
    /// rebuilt per token.
    validations: [Validation; 3],
    leeway_secs: u64,
}

/// The claims read from a token beyond what `jsonwebtoken` checks itself (`aud`, `iss`).
#[derive(serde::Deserialize)]
struct TokenClaims {
    sub: String,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
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

impl JwtVerifier {
    /// The verifier the flags ask for: `None` without `--auth-jwks-url` and
    /// `--auth-jwks-file`; else their keys (read once now, then by the refresher thread) for
    /// tokens of `resource` (`--auth-resource`) by one of `issuers` (`--auth-issuer`). Called
    /// once at start-up, before the workers run; an error stops the start.
    pub(crate) fn from_config(
        cfg: &Config,
        resource: &str,
        issuers: &[String],
    ) -> Result<Option<JwtVerifier>, JwtSettingsError> {
        if cfg.auth_jwks_url.is_none() && cfg.auth_jwks_file.is_none() {
            return Ok(None);
        }
        let settings = JwtSettings {
            resource: resource.to_owned(),
            issuers: issuers.to_vec(),
            leeway: cfg.auth_leeway,
        };
        // Checked before any key is read: a misconfiguration starts no thread.
        JwtVerifier::new(settings.clone(), Jwks::fixed(Default::default()))?;
        let keys = Jwks::start(JwksSettings {
            file: cfg.auth_jwks_file.clone(),
            url: cfg.auth_jwks_url.clone(),
            refresh: cfg.auth_jwks_refresh,
            min_refetch: cfg.auth_jwks_min_refetch,
        })?;
        JwtVerifier::new(settings, keys).map(Some)
    }

    pub(crate) fn new(settings: JwtSettings, keys: Arc<Jwks>) -> Result<Self, JwtSettingsError> {
        if settings.resource.is_empty() {
            return Err(JwtSettingsError::NoResource);
        }
        if settings.issuers.is_empty() {
            return Err(JwtSettingsError::NoIssuer);
        }
        let validations = ALGORITHMS.map(|algorithm| {
            let mut validation = Validation::new(algorithm);
            validation.set_required_spec_claims(&["exp", "sub", "aud", "iss"]);
            // Time is checked here against the caller's `now`, not the crate's clock.
            validation.validate_exp = false;
            validation.validate_nbf = false;
            validation.validate_aud = true;
            validation.set_audience(&[settings.resource.as_str()]);
            validation.set_issuer(&settings.issuers);
            validation
        });
        Ok(JwtVerifier { keys, validations, leeway_secs: settings.leeway.as_secs() })
    }

    fn validation(&self, algorithm: Algorithm) -> Option<&Validation> {
        ALGORITHMS.iter().position(|a| *a == algorithm).map(|at| &self.validations[at])
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        if token.len() > AUTH_TOKEN_BYTES_MAX || token.bytes().filter(|b| *b == b'.').count() != 2 {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| unusable_header(token))?;
        let Some(validation) = self.validation(header.alg) else {
            return Err(TokenError::AlgorithmNotAllowed);
        };
        let keys = self.keys.keys();
        let Some(key) = keys.find(header.kid.as_deref(), header.alg) else {
            self.keys.request_refetch();
            return Err(TokenError::UnknownKey);
        };
        if key.algorithm != header.alg {
            return Err(TokenError::AlgorithmNotAllowed);
        }
        let data = jsonwebtoken::decode::<TokenClaims>(token, &key.decoding, validation)
            .map_err(|e| token_error(e.kind()))?;
        let claims = data.claims;
        let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now_secs >= claims.exp.saturating_add(self.leeway_secs) {
            return Err(TokenError::Expired);
        }
        if matches!(claims.nbf, Some(nbf) if nbf > now_secs.saturating_add(self.leeway_secs)) {
            return Err(TokenError::NotYetValid);
        }
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
            subject: claims.sub.into_boxed_str(),
            scopes,
            expires_at: UNIX_EPOCH.checked_add(Duration::from_secs(claims.exp)),
        })
    }
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
