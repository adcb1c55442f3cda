//! Authorization (issue 18): who a bearer token names. This branch holds only the seam the
//! request path codes against (`Claims`, `TokenError`, `TokenVerifier`) and the JWT half:
//! `jwt` (an access token's signature and claims) over `jwks` (the issuer's keys, fetched off
//! the worker cores).
//!
//! Owns: the verifier contract. Never: reaches the network on a worker core, or puts a token in
//! a log line, an error or a panic message.

pub(crate) mod jwks;
pub(crate) mod jwt;

/// What a valid token says about its bearer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) subject: Box<str>,
    pub(crate) scopes: Vec<Box<str>>,
    pub(crate) expires_at: Option<std::time::SystemTime>,
}

/// Why a token was refused (each a 401 `invalid_token`; the kind is for counters and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenError {
    Malformed,
    BadSignature,
    UnknownKey,
    Expired,
    NotYetValid,
    WrongAudience,
    WrongIssuer,
    AlgorithmNotAllowed,
    Unknown,
}

/// Checks one bearer token at `now`, on a worker core: never blocks, never waits on the network.
pub(crate) trait TokenVerifier: Send + Sync {
    fn verify(&self, token: &str, now: std::time::SystemTime) -> Result<Claims, TokenError>;
}

#[cfg(test)]
mod tests;
