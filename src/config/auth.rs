//! The authorization settings (`--auth-*`, `--allow-unauthenticated`): where the token set and
//! the policy are read from, what this resource is called, and the limits of both files.
//!
//! Owns: `AuthConfig` and its limits. Never: reads a file (the `auth` module loads them).

use std::path::PathBuf;

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
}

impl AuthConfig {
    /// The defaults with the limits set (what `Config::default` holds).
    pub(crate) fn with_limits() -> AuthConfig {
        AuthConfig {
            tokens_max: AUTH_TOKENS_MAX,
            policy_rules_max: AUTH_POLICY_RULES_MAX,
            ..AuthConfig::default()
        }
    }

    /// True when static tokens are configured (`Config::auth_enabled` also counts the JWT
    /// verifier's `--auth-jwks-*`).
    pub fn enabled(&self) -> bool {
        self.tokens_file.is_some()
    }
}
