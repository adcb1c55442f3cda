//! The seam between the request path and every verifier: who a valid token names (`Claims`),
//! why one was refused (`TokenError`), and the trait a verifier implements (`TokenVerifier`).
//!
//! Used by `auth` (the verifier chain) and by `jwt`, the verifier behind the seam. Never:
//! holds a token or any part of one.

use std::time::SystemTime;

/// Who a valid token names, and what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claims {
    /// The namespaced subject (CONTRACT §8), what sessions, keys, tasks, request states, rate
    /// buckets, logs and traces are bound to: a static token's subject as its file names it
    /// (never holding `#`), a JWT's `ISS#SUB` (`jwt::subject`).
    pub(crate) subject: Box<str>,
    pub(crate) scopes: Vec<Box<str>>,
    pub(crate) expires_at: Option<std::time::SystemTime>,
}

impl Claims {
    /// True when the token was granted `scope`.
    pub(crate) fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| &**s == scope)
    }
}

/// Why a presented token was refused (never holds the token or any part of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// Peer: not a bearer token's syntax, or not a JWT's.
    Malformed,
    /// Peer: the signature does not verify.
    BadSignature,
    /// Peer: no key of the set has the token's `kid`.
    UnknownKey,
    /// Peer: past its `exp`.
    Expired,
    /// Peer: before its `nbf`.
    NotYetValid,
    /// Peer: `aud` does not name this resource (`--auth-resource`).
    WrongAudience,
    /// Peer: `iss` is none of `--auth-issuer`.
    WrongIssuer,
    /// Peer: an algorithm the key does not allow (`none`, HMAC with a public key, …).
    AlgorithmNotAllowed,
    /// Peer: no verifier knows the token (not a static token, and no JWT verifier took it).
    Unknown,
}

/// A token verifier the chain asks after the static tokens: the seam the JWT verifier
/// (`auth::jwt::JwtVerifier`) plugs into. Shared by every core, so it must never block on
/// the network while verifying (its keys are fetched off the worker cores).
pub(crate) trait TokenVerifier: Send + Sync {
    /// Validates `token` at time `now`.
    fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError>;

    /// A number that moves whenever what this verifier accepts may have shrunk (a key left the
    /// set): a connection's cached verification made under another number is redone.
    fn generation(&self) -> u64;

    /// SIGHUP: read the verifier's sources again soon (never blocks).
    fn reload(&self);
}
