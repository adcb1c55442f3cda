//! The authorization settings (`--auth-*`, `--allow-unauthenticated`): where the token set and
//! the policy are read from, what this resource is called, and the limits of both files.
//!
//! Owns: `AuthConfig`, its limits, validation and flags (which issuer each JWK Set source
//! belongs to is `jwks`'s). Never: reads a file (the `auth` module loads them).

use std::path::PathBuf;
use std::time::Duration;

use super::error::{nonzero, ConfigError};
use super::jwks::jwks_sources;

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

/// Bytes of one bearer token (JWT access token) the verifier reads (`auth::jwt`); a longer one
/// is refused as malformed before any decoding. 8 KiB: a JWT with a few dozen scopes and an
/// RSA-4096 signature is under 2 KiB; the request head's own limit (`--max-header-bytes`) is
/// larger, so this is what bounds the verifier's work. No flag: no real token comes near it.
pub(crate) const AUTH_TOKEN_BYTES_MAX: usize = 8 * 1024;
/// Clock skew allowed on a JWT's `exp` and `nbf` (`--auth-leeway-secs`). 30 s: hosts synced by
/// NTP are within a second; a token stays usable this long past its `exp` at most.
pub(crate) const AUTH_LEEWAY_SECS: u64 = 30;
/// The largest `--auth-leeway-secs` accepted: past five minutes an expired token would be
/// honoured long enough to matter.
pub(crate) const AUTH_LEEWAY_SECS_MAX: u64 = 300;
/// How often the JWK Set is read again from `--auth-jwks-url`/`--auth-jwks-file`
/// (`--auth-jwks-refresh-secs`), so a key the authorization server adds in advance of a
/// rotation is known before tokens use it.
pub(crate) const JWKS_REFRESH_SECS: u64 = 300;
/// The shortest time between two reads of the JWK Set (`--auth-jwks-min-refetch-secs`): a
/// token naming an unknown `kid` asks for a read, and a flood of such tokens makes one per
/// this interval, not one each.
pub(crate) const JWKS_MIN_REFETCH_SECS: u64 = 10;
/// Bytes of one JWK Set document (file or fetched body); larger ones are refused and the last
/// good set stays. 256 KiB: a set of `JWKS_KEYS_MAX` RSA-4096 keys is under 64 KiB.
pub(crate) const JWKS_BYTES_MAX: usize = 256 * 1024;
/// Keys of one JWK Set document; more and the document is refused (a key lookup is a hash
/// probe, but every key is parsed and held).
pub(crate) const JWKS_KEYS_MAX: usize = 64;
/// Longest one JWK Set fetch may take, connect to last byte. The refresher thread waits this
/// long at most; no worker ever waits for it.
pub(crate) const JWKS_FETCH_TIMEOUT_SECS: u64 = 10;

const _: () = assert!(AUTH_CACHE_SECS > 0 && AUTH_CACHE_SECS <= AUTH_CACHE_SECS_MAX);
const _: () = assert!(AUTH_LEEWAY_SECS <= AUTH_LEEWAY_SECS_MAX && JWKS_MIN_REFETCH_SECS > 0);

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
    /// Local JWK Sets of the authorization servers (`--auth-jwks-file [ISSUER=]PATH`,
    /// repeatable: `jwks_sources`), read again on each refresh and on SIGHUP.
    pub jwks_file: Vec<PathBuf>,
    /// The authorization servers' `jwks_uri`s (`--auth-jwks-url [ISSUER=]URL`, repeatable:
    /// `jwks_sources`), fetched off the worker cores.
    pub jwks_url: Vec<String>,
    /// `--auth-jwks-refresh-secs` (`JWKS_REFRESH_SECS`).
    pub jwks_refresh: Duration,
    /// `--auth-jwks-min-refetch-secs` (`JWKS_MIN_REFETCH_SECS`).
    pub jwks_min_refetch: Duration,
    /// `--auth-leeway-secs` (`AUTH_LEEWAY_SECS`, at most `AUTH_LEEWAY_SECS_MAX`).
    pub leeway: Duration,
}

impl AuthConfig {
    /// The defaults with the limits set (what `Config::default` holds).
    pub(crate) fn with_limits() -> AuthConfig {
        AuthConfig {
            tokens_max: AUTH_TOKENS_MAX,
            policy_rules_max: AUTH_POLICY_RULES_MAX,
            cache_lifetime: Duration::from_secs(AUTH_CACHE_SECS),
            jwks_file: Vec::new(),
            jwks_url: Vec::new(),
            jwks_refresh: Duration::from_secs(JWKS_REFRESH_SECS),
            jwks_min_refetch: Duration::from_secs(JWKS_MIN_REFETCH_SECS),
            leeway: Duration::from_secs(AUTH_LEEWAY_SECS),
            ..AuthConfig::default()
        }
    }

    /// True when static tokens are configured (`Config::auth_enabled` also counts the JWT
    /// verifier's `--auth-jwks-*`).
    pub fn enabled(&self) -> bool {
        self.tokens_file.is_some()
    }

    /// True when some verifier is configured (static tokens, or JWT access tokens over a
    /// JWK Set), so every request must carry a valid token.
    pub fn verifies(&self) -> bool {
        self.enabled() || !self.jwks_file.is_empty() || !self.jwks_url.is_empty()
    }

    /// The section of the parsed flags (the JWT verifier's and the rest).
    pub(crate) fn from_flags(jwt: JwtFlags, auth: AuthFlags) -> AuthConfig {
        AuthConfig {
            tokens_file: auth.auth_tokens,
            resource: auth.auth_resource,
            issuers: auth.auth_issuer,
            scopes_supported: auth.auth_scopes_supported,
            required_scopes: auth.auth_required_scope,
            policy_file: auth.auth_policy,
            write_scope: auth.auth_write_scope,
            allow_unauthenticated: auth.allow_unauthenticated,
            tokens_max: auth.auth_tokens_max,
            policy_rules_max: auth.auth_policy_rules_max,
            cache_lifetime: Duration::from_secs(jwt.auth_cache_secs),
            jwks_file: jwt.auth_jwks_file,
            jwks_url: jwt.auth_jwks_url,
            jwks_refresh: Duration::from_secs(jwt.auth_jwks_refresh_secs),
            jwks_min_refetch: Duration::from_secs(jwt.auth_jwks_min_refetch_secs),
            leeway: Duration::from_secs(jwt.auth_leeway_secs),
        }
    }

    /// Checks the section's values (a non-loopback listener without a verifier is
    /// `Config::validate`'s: it needs the listen address).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("auth-jwks-refresh-secs", self.jwks_refresh.as_millis()),
            ("auth-jwks-min-refetch-secs", self.jwks_min_refetch.as_millis()),
            ("auth-tokens-max", self.tokens_max as u128),
            ("auth-policy-rules-max", self.policy_rules_max as u128),
            ("auth-cache-secs", self.cache_lifetime.as_millis()),
        ])?;
        if self.leeway.as_secs() > AUTH_LEEWAY_SECS_MAX {
            return Err(ConfigError::LeewayTooLong(self.leeway.as_secs(), AUTH_LEEWAY_SECS_MAX));
        }
        if self.cache_lifetime.as_secs() > AUTH_CACHE_SECS_MAX {
            return Err(ConfigError::AuthCacheTooLong(
                self.cache_lifetime.as_secs(),
                AUTH_CACHE_SECS_MAX,
            ));
        }
        if self.issuers.is_empty() {
            // No issuer: the verifier refuses to start (`jwt::JwtSettingsError::NoIssuer`).
            let web = |u: &&String| u.starts_with("http://") || u.starts_with("https://");
            if let Some(url) = self.jwks_url.iter().find(|u| !web(u)) {
                return Err(ConfigError::BadJwksUrl(url.clone()));
            }
        } else {
            jwks_sources(&self.issuers, &self.jwks_file, &self.jwks_url)?;
        }
        let scoped = [
            ("--auth-policy", self.policy_file.is_some()),
            ("--auth-write-scope", self.write_scope.is_some()),
            ("--auth-required-scope", !self.required_scopes.is_empty()),
        ];
        if let Some((flag, _)) = scoped.iter().find(|(_, set)| *set && !self.verifies()) {
            return Err(ConfigError::AuthFlagWithoutAuth(flag));
        }
        Ok(())
    }
}

/// The command line's flags of this section: the JWT verifier (`--auth-jwks-*`,
/// `--auth-leeway-secs`) and `--auth-cache-secs`. `cli` flattens them into its `Flags` in
/// `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct JwtFlags {
    /// A local JWK Set (an authorization server's signing keys), read again every refresh and
    /// on SIGHUP; ISSUER=PATH names the --auth-issuer it is for (needed with several).
    #[arg(long, value_name = "[ISSUER=]PATH")]
    pub(crate) auth_jwks_file: Vec<std::path::PathBuf>,
    /// An authorization server's jwks_uri, fetched off the worker cores; ISSUER=URL names the
    /// --auth-issuer it is for (needed with several).
    #[arg(long, value_name = "[ISSUER=]URL")]
    pub(crate) auth_jwks_url: Vec<String>,
    /// How often the JWK Set is read again.
    #[arg(long, default_value_t = JWKS_REFRESH_SECS)]
    pub(crate) auth_jwks_refresh_secs: u64,
    /// Shortest time between two JWK Set reads (a token with an unknown kid asks for one).
    #[arg(long, default_value_t = JWKS_MIN_REFETCH_SECS)]
    pub(crate) auth_jwks_min_refetch_secs: u64,
    /// Clock skew allowed on a JWT's exp and nbf, in seconds (at most 300).
    #[arg(long, default_value_t = AUTH_LEEWAY_SECS)]
    pub(crate) auth_leeway_secs: u64,
    /// Longest a connection's cached token verification is used before the token is verified
    /// again, whatever its exp (at most 3600); a changed token or key set ends it at once.
    #[arg(long, default_value_t = AUTH_CACHE_SECS)]
    pub(crate) auth_cache_secs: u64,
}

/// The command line's flags of this section: the rest of `--auth-*` and `--allow-unauthenticated`.
/// `cli` flattens them into its `Flags` in `--help`'s order (a section's flags may come in several
/// runs).
#[derive(clap::Args)]
pub(crate) struct AuthFlags {
    /// Static bearer tokens: `TOKEN SUBJECT [SCOPE,SCOPE…]` per line, `#` comments; reloaded on
    /// SIGHUP. Turns authorization on: every request needs a valid token.
    #[arg(long)]
    pub(crate) auth_tokens: Option<std::path::PathBuf>,
    /// This server's resource URL (the metadata's `resource`; the `aud` a JWT must name).
    /// Default: http://<listen address><path>.
    #[arg(long)]
    pub(crate) auth_resource: Option<String>,
    /// An authorization server's issuer URL (repeatable): the metadata's
    /// `authorization_servers`.
    #[arg(long)]
    pub(crate) auth_issuer: Vec<String>,
    /// Scopes listed in the metadata's `scopes_supported` (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) auth_scopes_supported: Vec<String>,
    /// A scope every request's token must hold (repeatable): else 403 insufficient_scope.
    #[arg(long)]
    pub(crate) auth_required_scope: Vec<String>,
    /// The per-tool policy: `tool|prompt|resource|upstream PATTERN SCOPE[,SCOPE…]` per line.
    #[arg(long)]
    pub(crate) auth_policy: Option<std::path::PathBuf>,
    /// The annotation default: tools not annotated `readOnlyHint: true` need this scope.
    #[arg(long)]
    pub(crate) auth_write_scope: Option<String>,
    /// Serve a non-loopback --listen address without authorization (anyone who reaches the
    /// port may use every session and tool).
    #[arg(long)]
    pub(crate) allow_unauthenticated: bool,
    /// Tokens one --auth-tokens file may list.
    #[arg(long, default_value_t = AUTH_TOKENS_MAX)]
    pub(crate) auth_tokens_max: usize,
    /// Rules one --auth-policy file may hold.
    #[arg(long, default_value_t = AUTH_POLICY_RULES_MAX)]
    pub(crate) auth_policy_rules_max: usize,
}
