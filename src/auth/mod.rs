//! Authorization at the MCP endpoint (MCP authorization spec; OAuth 2.1 resource server): who
//! a request's bearer token names (`Claims`), the verifier chain that decides it (`Authorizer`:
//! the static tokens of `--auth-tokens`, then the JWT verifier when one is configured), the
//! per-connection cache of the last validated token (`ConnCache`), the `WWW-Authenticate`
//! challenges, and the protected resource metadata document (RFC 9728).
//!
//! Revocation is immediate (CONTRACT §8): a cached verification is used only while the token
//! set and every issuer's key set are the ones it was made under (a reload of the tokens, or a
//! JWK Set read that changed the keys, moves the generation), before the token's `exp`, and
//! for at most `--auth-cache-secs` after it was made, whatever the token says.
//!
//! Called by `endpoint` once per request (before the era is chosen), by the eras for the
//! subject that scopes their sessions, keys, tasks and request states, and by `server` on
//! SIGHUP (`Authorizer::reload`). Shared by every core in an `Arc`: the token set is swapped
//! whole on a reload (`arc_swap`), never locked. Never: keeps a token (only SHA-256 digests),
//! or puts a token or any part of one in a log line, an error, a metric label or an answer;
//! never calls the network on a request's path.

pub(crate) mod claims;
pub(crate) mod jwks;
pub(crate) mod jwt;
pub(crate) mod policy;
pub(crate) mod tokens;

#[cfg(test)]
mod jwt_tests;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;

use crate::config::{Config, ConfigError};
pub(crate) use claims::{Claims, TokenError, TokenVerifier};
use policy::{Item, Policy};
use tokens::{TokenDigest, TokenSet};

/// Why a request is refused authorization, as the endpoint answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Denial {
    /// Peer: no bearer token (no `Authorization` header, or one of another scheme): 401 with
    /// the challenge and no `error` (RFC 6750 §3.1).
    Missing,
    /// Peer: a token in the query string (`access_token`, RFC 6750 §2.3), which this server
    /// never accepts: 400 `invalid_request`, so the client learns to use the header.
    QueryToken,
    /// Peer: a bearer token that no verifier accepts: 401 `invalid_token`.
    Invalid(TokenError),
    /// Peer: a valid token without a scope every request needs (`--auth-required-scope`):
    /// 403 `insufficient_scope`.
    Scope,
}

/// The last token a connection presented that validated: its digest, the token and key sets
/// it was verified under (a change of either ends it), when, and what it names. Rebuilt, not
/// moved, when the connection is handed to another core (`runtime::handoff` moves only the
/// socket and its bytes): the first request there validates once more.
///
/// It also keeps the connection's peer address once asked (`peer`): who a request counts
/// against when no token names a subject.
#[derive(Default)]
pub(crate) struct ConnCache {
    entry: RefCell<Option<Cached>>,
    /// `Some` once asked: the peer's IP, `None` inside over a Unix socket.
    peer: std::cell::Cell<Option<Option<std::net::IpAddr>>>,
}

impl ConnCache {
    /// The connection's peer IP, from `ask` the first time (a `getpeername`), then kept.
    pub(crate) fn peer(
        &self,
        ask: impl FnOnce() -> Option<std::net::IpAddr>,
    ) -> Option<std::net::IpAddr> {
        if let Some(known) = self.peer.get() {
            return known;
        }
        let ip = ask();
        self.peer.set(Some(ip));
        ip
    }
}

struct Cached {
    digest: TokenDigest,
    generation: u64,
    /// When the chain verified it: it is verified again `--auth-cache-secs` later.
    verified_at: Instant,
    claims: Rc<Claims>,
}

/// How a request's token was found valid (counted: `tidemark_auth_verifications_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// The connection's cached verification of the same token, still current.
    Cached,
    /// The verifier chain ran (first use, another token, a changed set, or the cache's age).
    Verified,
}

/// The endpoint's authorization: the verifier chain, the challenges and the metadata.
pub(crate) struct Authorizer {
    /// The static tokens, swapped whole by `reload`.
    tokens: ArcSwap<TokenSet>,
    /// Bumped by each reload that replaced the set: a connection's cached token found in an
    /// older set is validated again (a token removed from the file stops working at once).
    generation: AtomicU64,
    tokens_file: Option<PathBuf>,
    tokens_max: usize,
    /// `--auth-cache-secs`: the longest a connection's cached verification is used.
    cache_lifetime: Duration,
    /// THE JWT SEAM: the verifier asked when a token is not a static one (`None`: none is
    /// configured). The integrator sets it to `Some(Arc::new(jwt::JwtVerifier::…))` in
    /// `Authorizer::build`; nothing else changes.
    verifier: Option<Arc<dyn TokenVerifier>>,
    /// The per-tool policy (`--auth-policy`, `--auth-write-scope`), swapped whole by
    /// `reload`; a request keeps the one it was authorized under (`policy`).
    policy: ArcSwap<Policy>,
    policy_file: Option<PathBuf>,
    write_scope: Option<Box<str>>,
    policy_rules_max: usize,
    /// `--auth-required-scope`: held by every request's token.
    required_scopes: Vec<Box<str>>,
    /// `WWW-Authenticate` of a 401 without a token, with `invalid_token`, and of a 400 for a
    /// query-string token.
    challenge_missing: Box<str>,
    challenge_invalid: Box<str>,
    challenge_query: Box<str>,
    /// The base of a 403's challenge: `Bearer resource_metadata="…"`.
    challenge_base: Box<str>,
    /// The protected resource metadata document (RFC 9728 §2), JSON.
    metadata: Box<[u8]>,
    /// The paths it is served at: the well-known one, and it with the endpoint path appended.
    metadata_paths: [Box<str>; 2],
}

/// RFC 9728 §3: the well-known path of protected resource metadata.
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

impl Authorizer {
    /// The authorization `cfg` asks for (`None`: off), its files loaded; `cfg.server.listen` must
    /// name the bound address (the default resource URL names it).
    pub(crate) fn build(cfg: &Config) -> Result<Option<Authorizer>, ConfigError> {
        let auth = &cfg.auth;
        if !cfg.auth_enabled() {
            return Ok(None);
        }
        let tokens = match &auth.tokens_file {
            Some(path) => TokenSet::load(path, auth.tokens_max)
                .map_err(|e| ConfigError::AuthFile(e.to_string()))?,
            None => TokenSet::default(),
        };
        let policy = Policy::load(
            auth.policy_file.as_deref(),
            auth.write_scope.as_deref(),
            auth.policy_rules_max,
        )
        .map_err(|e| ConfigError::AuthFile(e.to_string()))?;
        let scheme = if cfg.server.tls.is_some() { "https" } else { "http" };
        let resource = auth
            .resource
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{}{}", cfg.server.listen, cfg.server.path));
        // The JWT verifier (`--auth-jwks-file`/`--auth-jwks-url`): its key refresher thread
        // starts here, once, and every core shares it.
        let verifier = jwt::JwtVerifier::from_config(cfg, &resource, &auth.issuers)
            .map_err(|e| ConfigError::AuthFile(e.to_string()))?
            .map(|v| Arc::new(v) as Arc<dyn TokenVerifier>);
        let metadata_url = metadata_url(&resource);
        let base = format!("Bearer resource_metadata=\"{metadata_url}\"");
        let scope = if auth.required_scopes.is_empty() {
            String::new()
        } else {
            format!(", scope=\"{}\"", auth.required_scopes.join(" "))
        };
        let mut document = serde_json::json!({
            "resource": resource,
            "bearer_methods_supported": ["header"],
        });
        if !auth.issuers.is_empty() {
            document["authorization_servers"] = serde_json::json!(auth.issuers);
        }
        if !auth.scopes_supported.is_empty() {
            document["scopes_supported"] = serde_json::json!(auth.scopes_supported);
        }
        Ok(Some(Authorizer {
            tokens: ArcSwap::from_pointee(tokens),
            generation: AtomicU64::new(0),
            tokens_file: auth.tokens_file.clone(),
            tokens_max: auth.tokens_max,
            cache_lifetime: auth.cache_lifetime,
            verifier,
            policy: ArcSwap::from_pointee(policy),
            policy_file: auth.policy_file.clone(),
            write_scope: auth.write_scope.as_deref().map(Box::from),
            policy_rules_max: auth.policy_rules_max,
            required_scopes: auth.required_scopes.iter().map(|s| Box::from(s.as_str())).collect(),
            challenge_missing: format!("{base}{scope}").into(),
            challenge_invalid: format!("{base}, error=\"invalid_token\"{scope}").into(),
            challenge_query: format!(
                "{base}, error=\"invalid_request\", error_description=\"a token in the query \
                 string is never accepted: send it in the Authorization header\""
            )
            .into(),
            challenge_base: base.into(),
            metadata: serde_json::to_vec(&document).unwrap_or_default().into(),
            metadata_paths: [
                METADATA_PATH.into(),
                format!("{METADATA_PATH}{}", cfg.server.path).into(),
            ],
        }))
    }

    /// SIGHUP: reads `--auth-tokens` again and swaps the set in; sessions are untouched (a
    /// session names its subject, not a token). On an error the old set stays and the error
    /// says why (the file and line, never a token). `Ok`: the new set's size.
    pub(crate) fn reload(&self) -> Result<usize, String> {
        let Some(path) = &self.tokens_file else { return Ok(0) };
        let set = TokenSet::load(path, self.tokens_max).map_err(|e| e.to_string())?;
        let len = set.len();
        self.tokens.store(Arc::new(set));
        self.generation.fetch_add(1, Ordering::Release);
        Ok(len)
    }

    /// SIGHUP: reads `--auth-policy` again and swaps it in for the requests after; a request
    /// under way keeps the policy it was authorized under. On an error the old policy stays
    /// and the error names the file and line. `Ok(None)`: no policy file.
    pub(crate) fn reload_policy(&self) -> Result<Option<usize>, String> {
        let Some(path) = &self.policy_file else { return Ok(None) };
        let policy = Policy::load(Some(path), self.write_scope.as_deref(), self.policy_rules_max)
            .map_err(|e| e.to_string())?;
        let rules = policy.len();
        self.policy.store(Arc::new(policy));
        Ok(Some(rules))
    }

    /// SIGHUP: every issuer's JWK Set read again soon (off the workers, at most one read per
    /// `--auth-jwks-min-refetch-secs`); a read that changes the keys ends cached verifications.
    /// False when there is no JWT verifier.
    pub(crate) fn reload_keys(&self) -> bool {
        self.verifier.as_ref().map(|v| v.reload()).is_some()
    }

    /// The policy in force now: what a request authorized now is held to.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// The request's claims from its `Authorization` header (`None`: absent) and its target's
    /// query: the connection's cached token when it is the same one, else the verifier chain
    /// (static tokens, then the JWT verifier), whose answer the connection then caches.
    pub(crate) fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        query: &[u8],
        cache: &ConnCache,
    ) -> Result<(Rc<Claims>, Check), Denial> {
        if query_names_token(query) {
            return Err(Denial::QueryToken);
        }
        let token = bearer_token(authorization.ok_or(Denial::Missing)?)?;
        let (claims, check) =
            self.validate_at(token, cache, Instant::now()).map_err(Denial::Invalid)?;
        if self.required_scopes.iter().any(|s| !claims.has_scope(s)) {
            return Err(Denial::Scope);
        }
        Ok((claims, check))
    }

    /// A bearer token's claims: the cache, or the chain (and then the cache holds it).
    pub(crate) fn validate(
        &self,
        token: &[u8],
        cache: &ConnCache,
    ) -> Result<Rc<Claims>, TokenError> {
        self.validate_at(token, cache, Instant::now()).map(|(claims, _)| claims)
    }

    /// `validate` at `now`: the cached claims when the connection's last token is this one,
    /// verified under the current token and key sets less than `--auth-cache-secs` ago and
    /// before its `exp`; else the chain's answer, which the connection then caches.
    fn validate_at(
        &self,
        token: &[u8],
        cache: &ConnCache,
        now: Instant,
    ) -> Result<(Rc<Claims>, Check), TokenError> {
        let digest = tokens::digest(token);
        let generation = self.generation();
        if let Some(hit) = cache.entry.borrow().as_ref() {
            let same = bool::from(hit.digest.ct_eq(&digest)) && hit.generation == generation;
            let fresh = now.saturating_duration_since(hit.verified_at) < self.cache_lifetime;
            let unexpired = hit.claims.expires_at.is_none_or(|at| SystemTime::now() < at);
            if same && fresh && unexpired {
                return Ok((hit.claims.clone(), Check::Cached));
            }
        }
        let claims = Rc::new(self.verify_uncached(token, &digest)?);
        let verified_at = now;
        *cache.entry.borrow_mut() =
            Some(Cached { digest, generation, verified_at, claims: claims.clone() });
        Ok((claims, Check::Verified))
    }

    /// The token set's reloads plus the key sets' changes: both only grow, so the sum moves
    /// whenever either does. Read before verifying, so a change during a verification makes
    /// the next request verify again.
    fn generation(&self) -> u64 {
        let keys = self.verifier.as_ref().map_or(0, |v| v.generation());
        self.generation.load(Ordering::Acquire).wrapping_add(keys)
    }

    /// The verifier chain without the cache: the static tokens first, then (THE JWT SEAM)
    /// the configured verifier.
    fn verify_uncached(&self, token: &[u8], digest: &TokenDigest) -> Result<Claims, TokenError> {
        if let Some(grant) = self.tokens.load().lookup(digest) {
            let (subject, scopes) = (grant.subject.clone(), grant.scopes.clone());
            return Ok(Claims { subject, scopes, expires_at: None });
        }
        match &self.verifier {
            Some(verifier) => {
                let text = std::str::from_utf8(token).map_err(|_| TokenError::Malformed)?;
                verifier.verify(text, SystemTime::now())
            }
            None => Err(TokenError::Unknown),
        }
    }
}

/// A request's authorization as the listings and calls ask it: the policy and the request's
/// claims. Only made when the policy has rules (`Access::of`), so without one nothing is
/// filtered or checked.
#[derive(Clone, Copy)]
pub(crate) struct Access<'a> {
    auth: &'a Authorizer,
    policy: &'a Policy,
    claims: &'a Claims,
}

impl<'a> Access<'a> {
    /// The access of a request authorized as `claims`; `None` when `auth` has no policy.
    pub(crate) fn of(
        auth: Option<&'a Authorizer>,
        policy: Option<&'a Policy>,
        claims: Option<&'a Claims>,
    ) -> Option<Access<'a>> {
        let (auth, policy, claims) = (auth?, policy?, claims?);
        (!policy.is_empty()).then_some(Access { auth, policy, claims })
    }

    /// The scopes `item` needs that the token lacks (empty: allowed): the one decision.
    pub(crate) fn missing(&self, item: Item<'_>) -> Vec<&'a str> {
        self.policy.missing(item, |s| self.claims.has_scope(s))
    }

    /// True when the token may use (and so is listed) `item`.
    pub(crate) fn allows(&self, item: Item<'_>) -> bool {
        self.missing(item).is_empty()
    }

    /// The `WWW-Authenticate` value of a 403 for the scopes `missing`.
    pub(crate) fn challenge(&self, missing: &[&str]) -> String {
        let needed: Vec<Box<str>> = missing.iter().map(|s| Box::from(*s)).collect();
        self.auth.insufficient_scope(&needed)
    }
}

impl Authorizer {
    /// The `WWW-Authenticate` value answering `denial` (`Scope`: see `insufficient_scope`).
    pub(crate) fn challenge(&self, denial: Denial) -> std::borrow::Cow<'_, str> {
        match denial {
            Denial::Missing => (*self.challenge_missing).into(),
            Denial::Invalid(_) => (*self.challenge_invalid).into(),
            Denial::QueryToken => (*self.challenge_query).into(),
            Denial::Scope => self.insufficient_scope(&self.required_scopes).into(),
        }
    }

    /// The `WWW-Authenticate` value of a 403: `insufficient_scope` naming the scopes `needed`
    /// (RFC 6750 §3.1), so a client can ask for them (step-up).
    pub(crate) fn insufficient_scope(&self, needed: &[Box<str>]) -> String {
        format!(
            "{}, error=\"insufficient_scope\", scope=\"{}\"",
            self.challenge_base,
            needed.join(" ")
        )
    }

    /// The metadata document when `path` is one of its paths.
    pub(crate) fn metadata_at(&self, path: &[u8]) -> Option<&[u8]> {
        self.metadata_paths.iter().any(|p| p.as_bytes() == path).then_some(&*self.metadata)
    }
}

/// The token of an `Authorization: Bearer <token>` value: the scheme case-insensitive (RFC
/// 9110 §11.1), one or more spaces, an RFC 6750 b64token. Another scheme is no bearer token
/// (`Missing`); a bearer value that is no b64token is `Invalid(Malformed)`.
fn bearer_token(value: &[u8]) -> Result<&[u8], Denial> {
    let Some((scheme, rest)) = value.split_at_checked(6) else {
        return Err(if value.eq_ignore_ascii_case(b"bearer") {
            Denial::Invalid(TokenError::Malformed)
        } else {
            Denial::Missing
        });
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(Denial::Missing);
    }
    let token = rest.trim_ascii_start();
    if token.len() == rest.len() || !tokens::is_b64token(token) {
        // `Bearerx…` is another scheme's name; `Bearer` with no token or a bad one is a token.
        return Err(if token.len() == rest.len() && !rest.is_empty() {
            Denial::Missing
        } else {
            Denial::Invalid(TokenError::Malformed)
        });
    }
    Ok(token)
}

/// True when a request target's query has an `access_token` parameter (RFC 6750 §2.3).
fn query_names_token(query: &[u8]) -> bool {
    query.split(|&b| b == b'&').any(|param| {
        let name = param.split(|&b| b == b'=').next().unwrap_or(param);
        name.eq_ignore_ascii_case(b"access_token")
    })
}

/// RFC 9728 §3.1: the metadata URL of resource `resource`: the well-known path inserted
/// between its authority and its path (`https://h/mcp` → `https://h/.well-known/…/mcp`).
fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("http", resource));
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let path = if path == "/" { "" } else { path };
    format!("{scheme}://{authority}{METADATA_PATH}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the Authorization header's shapes: `Bearer` in any case with one or more spaces,
    /// other schemes counted as no token, an empty or non-b64token bearer value a bad token.
    #[test]
    fn bearer_header_shapes() {
        assert_eq!(bearer_token(b"Bearer abc"), Ok(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer   abc="), Ok(&b"abc="[..]));
        assert_eq!(bearer_token(b"BEARER abc"), Ok(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic dXNlcjpwYXNz"), Err(Denial::Missing));
        assert_eq!(bearer_token(b"Bearerabc"), Err(Denial::Missing));
        assert_eq!(bearer_token(b"Token"), Err(Denial::Missing));
        let malformed = Err(Denial::Invalid(TokenError::Malformed));
        assert_eq!(bearer_token(b"Bearer"), malformed);
        assert_eq!(bearer_token(b"Bearer "), malformed);
        assert_eq!(bearer_token(b"Bearer a b"), malformed);
        assert_eq!(bearer_token(b"Bearer a\"b"), malformed);
    }

    /// Goal: an `access_token` query parameter is found whatever its place or case; other
    /// parameters are not it.
    #[test]
    fn query_token_is_found() {
        assert!(query_names_token(b"access_token=x"));
        assert!(query_names_token(b"a=1&ACCESS_TOKEN=x"));
        assert!(query_names_token(b"access_token"));
        assert!(!query_names_token(b""));
        assert!(!query_names_token(b"token=x&access_tokens=y"));
    }

    /// Goal: a cached verification is used strictly less than `--auth-cache-secs` after it was
    /// made, and verified again at the limit; a reload of the token set ends it at once.
    /// Method: an authorizer over a static token file, asked at chosen instants.
    #[test]
    fn the_cache_lives_at_most_its_lifetime() {
        let dir = std::env::temp_dir().join(format!("tidemark-cache-life-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("tokens");
        std::fs::write(
            &file,
            "tok-a alice
",
        )
        .expect("tokens");
        let mut cfg = Config::test_min();
        cfg.auth.tokens_file = Some(file);
        cfg.auth.cache_lifetime = Duration::from_secs(2);
        let auth = Authorizer::build(&cfg).expect("builds").expect("on");
        let cache = ConnCache::default();
        let start = Instant::now();
        let at = |after: Duration| auth.validate_at(b"tok-a", &cache, start + after);
        let check = |after| at(after).map(|(claims, check)| (claims.subject.clone(), check));
        let alice: Box<str> = "alice".into();
        assert_eq!(check(Duration::ZERO), Ok((alice.clone(), Check::Verified)));
        let just_before = Duration::from_secs(2) - Duration::from_nanos(1);
        assert_eq!(check(just_before), Ok((alice.clone(), Check::Cached)));
        assert_eq!(check(Duration::from_secs(2)), Ok((alice.clone(), Check::Verified)));
        assert_eq!(check(Duration::from_secs(3)), Ok((alice.clone(), Check::Cached)));
        auth.reload().expect("reloads");
        assert_eq!(check(Duration::from_secs(3)), Ok((alice, Check::Verified)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Goal: RFC 9728 §3.1's path insertion for the metadata URL.
    #[test]
    fn metadata_url_inserts_the_well_known_path() {
        let m = |r| metadata_url(r);
        assert_eq!(
            m("https://mcp.example/mcp"),
            "https://mcp.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            m("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert_eq!(m("https://h:1"), "https://h:1/.well-known/oauth-protected-resource");
        assert_eq!(m("https://h/a/b?x"), "https://h/.well-known/oauth-protected-resource/a/b");
    }
}
