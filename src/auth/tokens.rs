//! The static token set (`--auth-tokens FILE`): one `TOKEN SUBJECT [SCOPE,SCOPE…]` per line,
//! `#` comments and blank lines skipped. Only each token's SHA-256 digest is kept. A presented
//! token is found by its digest (a hash-map probe, O(1) whatever the set's size) and the entry
//! found is compared with it in constant time (`lookup`): what the probe's timing could reveal
//! is about the digest of the token the client sent, which it knows anyway, never about a
//! valid token (SHA-256 has no usable preimage), and a bucket's place is keyed per process.
//! (A constant-time scan of every entry was measured at 0.6 ms per miss for 10 000 tokens:
//! a refused token must not cost that much.)
//!
//! Called by `auth::Authorizer` (at start and on SIGHUP). Never: keeps a token, or names one
//! (or any part of one) in an error: errors name the file and the line number only.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A token's SHA-256 digest: what the set and the per-connection cache hold instead of it.
pub(crate) type TokenDigest = [u8; 32];

/// The digest of a presented token.
pub(crate) fn digest(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

/// What one static token names: its subject and scopes (it never expires).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) subject: Box<str>,
    pub(crate) scopes: Vec<Box<str>>,
}

/// The static tokens, as digests with what each names. Immutable: a reload builds a new set.
#[derive(Default)]
pub(crate) struct TokenSet {
    entries: std::collections::HashMap<TokenDigest, Arc<Grant>>,
}

/// Why a token file was refused (the set in use, if any, stays). Never holds a token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum TokenFileError {
    /// The OS or the operator: the file could not be read, is not a regular file, or is over
    /// `AUTH_FILE_BYTES_MAX` (its path and why: `fsread::FileError`).
    #[error("--auth-tokens {path}: {reason}")]
    Unreadable { path: String, reason: String },
    /// The operator: a line is not `TOKEN SUBJECT [SCOPES]` (its number, never its text).
    #[error("--auth-tokens {path}:{line}: expected `TOKEN SUBJECT [SCOPE,SCOPE…]`")]
    BadLine { path: String, line: usize },
    /// The operator: a token holds a character a bearer token cannot (RFC 6750 §2.1 b64token).
    #[error("--auth-tokens {path}:{line}: the token is not an RFC 6750 b64token")]
    BadToken { path: String, line: usize },
    /// The operator: one token listed twice (on its second line).
    #[error("--auth-tokens {path}:{line}: this token is listed twice")]
    Duplicate { path: String, line: usize },
    /// The operator: more tokens than `--auth-tokens-max`.
    #[error("--auth-tokens {path}: more than --auth-tokens-max ({max}) tokens")]
    TooMany { path: String, max: usize },
}

impl TokenSet {
    /// Reads and parses `path` (at most `AUTH_FILE_BYTES_MAX` bytes, `max` tokens).
    pub(crate) fn load(path: &Path, max: usize) -> Result<TokenSet, TokenFileError> {
        let shown = path.display().to_string();
        let text =
            crate::fsread::read_text(path, crate::config::AUTH_FILE_BYTES_MAX).map_err(|e| {
                TokenFileError::Unreadable { path: shown.clone(), reason: e.to_string() }
            })?;
        TokenSet::parse(&text, &shown, max)
    }

    /// Parses a token file's text; `path` only names it in errors.
    pub(crate) fn parse(text: &str, path: &str, max: usize) -> Result<TokenSet, TokenFileError> {
        let mut entries: std::collections::HashMap<TokenDigest, Arc<Grant>> = Default::default();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut fields = content.split_ascii_whitespace();
            let (Some(token), Some(subject)) = (fields.next(), fields.next()) else {
                return Err(TokenFileError::BadLine { path: path.to_owned(), line });
            };
            let scopes = fields.next();
            if fields.next().is_some() {
                return Err(TokenFileError::BadLine { path: path.to_owned(), line });
            }
            if !is_b64token(token.as_bytes()) {
                return Err(TokenFileError::BadToken { path: path.to_owned(), line });
            }
            if entries.len() == max {
                return Err(TokenFileError::TooMany { path: path.to_owned(), max });
            }
            let digest = digest(token.as_bytes());
            if entries.contains_key(&digest) {
                return Err(TokenFileError::Duplicate { path: path.to_owned(), line });
            }
            let scopes = scopes
                .map(|s| s.split(',').filter(|s| !s.is_empty()).map(Box::from).collect())
                .unwrap_or_default();
            entries.insert(digest, Arc::new(Grant { subject: Box::from(subject), scopes }));
        }
        Ok(TokenSet { entries })
    }

    /// Tokens in the set.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// What the token whose digest is `presented` names: the entry its digest finds, confirmed
    /// by a constant-time compare of the two digests.
    pub(crate) fn lookup(&self, presented: &TokenDigest) -> Option<&Arc<Grant>> {
        let (digest, grant) = self.entries.get_key_value(presented)?;
        bool::from(digest.ct_eq(presented)).then_some(grant)
    }
}

/// RFC 6750 §2.1: `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
pub(crate) fn is_b64token(token: &[u8]) -> bool {
    let body_len = token.iter().rposition(|&b| b != b'=').map_or(0, |i| i + 1);
    body_len > 0
        && token[..body_len].iter().all(|&b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the file format: comments, blank lines, scopes optional, every bad line named by
    /// its number only (never its token), duplicates and the `--auth-tokens-max` limit at N and
    /// N+1. Method: parse small texts and look tokens up by digest.
    #[test]
    fn parses_lines_and_refuses_bad_ones_by_number() {
        let text = "# team tokens\n\ntok-alice alice read,write # comment\ntok-bob bob\n";
        let set = TokenSet::parse(text, "f", 2).expect("parses");
        assert_eq!(set.len(), 2);
        let alice = set.lookup(&digest(b"tok-alice")).expect("alice");
        assert_eq!(&*alice.subject, "alice");
        assert_eq!(alice.scopes, vec![Box::from("read"), Box::from("write")]);
        assert!(set.lookup(&digest(b"tok-bob")).expect("bob").scopes.is_empty());
        assert!(set.lookup(&digest(b"tok-carol")).is_none());
        assert!(set.lookup(&digest(b"tok-alic")).is_none());
        let too_many = TokenSet::parse(text, "f", 1).err().expect("limit");
        assert_eq!(too_many, TokenFileError::TooMany { path: "f".into(), max: 1 });
        let cases = [
            ("lonely-token\n", TokenFileError::BadLine { path: "f".into(), line: 1 }),
            ("a b c d\n", TokenFileError::BadLine { path: "f".into(), line: 1 }),
            ("ok s\nsecret\"x s\n", TokenFileError::BadToken { path: "f".into(), line: 2 }),
            ("t s\nt u\n", TokenFileError::Duplicate { path: "f".into(), line: 2 }),
        ];
        for (text, want) in cases {
            let got = TokenSet::parse(text, "f", 10).err().expect("refused");
            assert_eq!(got, want, "{text:?}");
            assert!(!got.to_string().contains("secret"), "an error never names a token");
        }
    }

    /// Goal: RFC 6750's b64token: the characters allowed, `=` only at the end, never empty.
    #[test]
    fn b64token_characters() {
        for ok in ["abc", "A-._~+/9", "abc==", "x="] {
            assert!(is_b64token(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "=", "a b", "a=b", "a\"", "a,b", "é"] {
            assert!(!is_b64token(bad.as_bytes()), "{bad}");
        }
    }
}
