//! The authorization server's signing keys (a JWK Set, RFC 7517) that `jwt` checks tokens
//! against: from a local file (`--auth-jwks-file`) and/or a URL (`--auth-jwks-url`), re-read
//! every `--auth-jwks-refresh-secs` and soon after a token names a `kid` the set lacks (at most
//! one read per `--auth-jwks-min-refetch-secs`, or on SIGHUP). A failed read keeps the last
//! good keys. A read whose keys differ from the last (by the documents' SHA-256) counts a
//! change (`Jwks::changes`): the endpoint's per-connection caches then verify again, so a key
//! dropped from the set stops working at the next request on every connection (CONTRACT §8).
//! One `Jwks` (and refresher thread) per `--auth-issuer`: an issuer's keys verify only its
//! own tokens.
//!
//! Owns: `KeySet` (the usable keys, each with the one algorithm it may verify), `Jwks` (the
//! current set, shared read-mostly: a worker core does one lock-free load per token) and the
//! refresher thread. Never: fetches on a worker core (a worker only raises a flag and unparks
//! the refresher), accepts an HMAC (`oct`) key, or lets a document larger than
//! `JWKS_BYTES_MAX` or with more than `JWKS_KEYS_MAX` keys in.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use sha2::Digest as _;

use crate::config::{JWKS_BYTES_MAX, JWKS_FETCH_TIMEOUT_SECS, JWKS_KEYS_MAX};

/// Longest the refresher sleeps at once, so a dropped `Jwks` ends its thread soon.
const REFRESHER_NAP: Duration = Duration::from_secs(1);

/// One usable key: the single algorithm it verifies (RS256, ES256 or EdDSA) and the key.
pub(crate) struct VerifyKey {
    pub(crate) algorithm: Algorithm,
    pub(crate) decoding: DecodingKey,
}

/// The usable keys of one or more JWK Sets.
#[derive(Default)]
pub(crate) struct KeySet {
    by_kid: HashMap<Box<str>, VerifyKey>,
    /// Keys without a `kid`: a token without `kid` may use one of these.
    unnamed: Vec<VerifyKey>,
    /// Keys of the documents left out (unsupported `kty`/`crv`/`alg`, `use` other than `sig`).
    skipped: usize,
    /// SHA-256 of the document (of both fingerprints when merged; zero when empty): two sets
    /// with the same fingerprint hold the same keys.
    fingerprint: [u8; 32],
}

/// Why a JWK Set document or its source is unusable.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JwksError {
    #[error("JWK Set larger than {JWKS_BYTES_MAX} bytes")]
    TooLarge,
    #[error("JWK Set with more than {JWKS_KEYS_MAX} keys")]
    TooManyKeys,
    #[error("not a JWK Set ({{\"keys\": [...]}}): {0}")]
    NotJwks(String),
    #[error("JWK Set with no usable RS256, ES256 or EdDSA key")]
    NoUsableKey,
    #[error("--auth-jwks-file {path}: {error}")]
    File { path: String, error: String },
    /// `url` as `redact` shows it (a `client_secret=` in the query never reaches a log).
    #[error("--auth-jwks-url {url}: {error}")]
    Fetch { url: String, error: String },
    /// The OS: the refresher thread could not be started.
    #[error("the JWK Set refresher thread: {0}")]
    Thread(String),
}

/// The document's outer shape: each key parsed on its own, so one odd key skips only itself.
#[derive(serde::Deserialize)]
struct Document {
    keys: Vec<serde_json::Value>,
}

impl KeySet {
    /// Parses a JWK Set document; keys tidemark cannot use are skipped (counted in `skipped`).
    pub(crate) fn parse(document: &[u8]) -> Result<KeySet, JwksError> {
        if document.len() > JWKS_BYTES_MAX {
            return Err(JwksError::TooLarge);
        }
        let document_bytes = document;
        let document: Document =
            serde_json::from_slice(document).map_err(|e| JwksError::NotJwks(e.to_string()))?;
        if document.keys.len() > JWKS_KEYS_MAX {
            return Err(JwksError::TooManyKeys);
        }
        let mut set = KeySet {
            fingerprint: sha2::Sha256::digest(document_bytes).into(),
            ..KeySet::default()
        };
        for value in document.keys {
            let Some((kid, key)) = serde_json::from_value::<Jwk>(value).ok().and_then(usable)
            else {
                set.skipped += 1;
                continue;
            };
            match kid {
                Some(kid) => {
                    set.by_kid.insert(kid, key);
                }
                None => set.unnamed.push(key),
            }
        }
        if set.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(set)
    }

    /// The key a token with header `kid` and `alg` names. With a `kid`, only that key; without
    /// one, the first unnamed key of that algorithm.
    pub(crate) fn find(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<&VerifyKey> {
        match kid {
            Some(kid) => self.by_kid.get(kid),
            None => self.unnamed.iter().find(|key| key.algorithm == algorithm),
        }
    }

    /// Usable keys held.
    pub(crate) fn len(&self) -> usize {
        self.by_kid.len() + self.unnamed.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This set's keys with `other`'s added (a `kid` in both: `self`'s wins).
    fn merged(self: &Arc<Self>, other: &Arc<KeySet>) -> Arc<KeySet> {
        if other.is_empty() {
            return Arc::clone(self);
        }
        if self.is_empty() {
            return Arc::clone(other);
        }
        let mut fingerprint = sha2::Sha256::new();
        fingerprint.update(self.fingerprint);
        fingerprint.update(other.fingerprint);
        let mut set = KeySet { fingerprint: fingerprint.finalize().into(), ..KeySet::default() };
        for source in [self, other] {
            for (kid, key) in &source.by_kid {
                set.by_kid.entry(kid.clone()).or_insert_with(|| key.clone());
            }
            set.unnamed.extend(source.unnamed.iter().cloned());
            set.skipped += source.skipped;
        }
        Arc::new(set)
    }
}

impl Clone for VerifyKey {
    fn clone(&self) -> Self {
        VerifyKey { algorithm: self.algorithm, decoding: self.decoding.clone() }
    }
}

/// The key's `kid` and the one algorithm it verifies, when it is a public signing key of RS256,
/// ES256 (P-256) or EdDSA (Ed25519) whose `alg`, if given, says the same.
fn usable(jwk: Jwk) -> Option<(Option<Box<str>>, VerifyKey)> {
    if matches!(&jwk.common.public_key_use, Some(usage) if *usage != PublicKeyUse::Signature) {
        return None;
    }
    let (algorithm, named) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (Algorithm::RS256, KeyAlgorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            (Algorithm::EdDSA, KeyAlgorithm::EdDSA)
        }
        // `oct` (HMAC secrets), other curves: never.
        _ => return None,
    };
    if matches!(jwk.common.key_algorithm, Some(given) if given != named) {
        return None;
    }
    let decoding = DecodingKey::from_jwk(&jwk).ok()?;
    let kid = jwk.common.key_id.map(String::into_boxed_str);
    Some((kid, VerifyKey { algorithm, decoding }))
}

/// Where the keys come from and how often they are read again.
#[derive(Clone, Debug, Default)]
pub(crate) struct JwksSettings {
    pub(crate) file: Option<PathBuf>,
    pub(crate) url: Option<String>,
    pub(crate) refresh: Duration,
    pub(crate) min_refetch: Duration,
}

/// The current key set, shared by every core, and the refresher's doorbell.
pub(crate) struct Jwks {
    current: ArcSwap<KeySet>,
    /// A worker saw an unknown `kid`: the refresher reads the sources again (rate-limited).
    refetch_wanted: AtomicBool,
    refresher: OnceLock<Thread>,
    /// Completed reads of the sources, and failed ones (each logged).
    reads: AtomicU64,
    read_failures: AtomicU64,
    /// Reads that swapped in different keys; raised after the new set is stored, so a worker
    /// that sees the new count also sees the new keys.
    changes: AtomicU64,
}

impl Jwks {
    /// A fixed set, never read again (tests, benches).
    pub(crate) fn fixed(set: KeySet) -> Arc<Jwks> {
        Arc::new(Jwks::holding(Arc::new(set)))
    }

    fn holding(set: Arc<KeySet>) -> Jwks {
        Jwks {
            current: ArcSwap::new(set),
            refetch_wanted: AtomicBool::new(false),
            refresher: OnceLock::new(),
            reads: AtomicU64::new(0),
            read_failures: AtomicU64::new(0),
            changes: AtomicU64::new(0),
        }
    }

    /// Reads the sources once (the file must be usable; a URL that fails now is logged and
    /// tried again on the refresher's schedule, tokens getting `UnknownKey` until then) and
    /// starts the refresher thread. Called once at start-up, before the workers run.
    pub(crate) fn start(settings: JwksSettings) -> Result<Arc<Jwks>, JwksError> {
        let file_keys = match &settings.file {
            Some(path) => Arc::new(read_file(path)?),
            None => Arc::new(KeySet::default()),
        };
        let agent = settings.url.as_ref().map(|_| fetch_agent());
        let url_keys = match (&settings.url, &agent) {
            (Some(url), Some(agent)) => match fetch(agent, url) {
                Ok(set) => Arc::new(set),
                Err(e) => {
                    tracing::warn!(error = %e, "JWKS fetch failed; tokens are refused until it succeeds");
                    Arc::new(KeySet::default())
                }
            },
            _ => Arc::new(KeySet::default()),
        };
        let jwks = Arc::new(Jwks::holding(file_keys.merged(&url_keys)));
        jwks.reads.fetch_add(1, Ordering::Relaxed);
        let refresher =
            Refresher { jwks: Arc::downgrade(&jwks), settings, agent, file_keys, url_keys };
        let thread = std::thread::Builder::new()
            .name("tidemark-jwks".into())
            .spawn(move || refresher.run())
            .map_err(|e| JwksError::Thread(e.to_string()))?;
        let _ = jwks.refresher.set(thread.thread().clone());
        Ok(jwks)
    }

    /// The keys now (one lock-free load; a refresh swaps in a new set for later loads).
    pub(crate) fn keys(&self) -> arc_swap::Guard<Arc<KeySet>> {
        self.current.load()
    }

    /// Asks the refresher to read the sources again soon; returns at once (never blocks: an
    /// atomic store and an unpark). The refresher keeps to `--auth-jwks-min-refetch-secs`.
    pub(crate) fn request_refetch(&self) {
        if !self.refetch_wanted.swap(true, Ordering::AcqRel) {
            if let Some(thread) = self.refresher.get() {
                thread.unpark();
            }
        }
    }

    /// Reads since start that swapped in keys other than the ones before.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Completed reads of the sources since start (the first included), and failed ones.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> (u64, u64) {
        (self.reads.load(Ordering::Relaxed), self.read_failures.load(Ordering::Relaxed))
    }
}

/// The refresher thread's state: the last good keys of each source.
struct Refresher {
    jwks: Weak<Jwks>,
    settings: JwksSettings,
    agent: Option<ureq::Agent>,
    file_keys: Arc<KeySet>,
    url_keys: Arc<KeySet>,
}

impl Refresher {
    fn run(mut self) {
        let mut last_read = Instant::now();
        loop {
            // Sleep until the interval is over or a worker rang; end when the set is gone.
            let due = last_read + self.settings.refresh;
            loop {
                let Some(jwks) = self.jwks.upgrade() else { return };
                if jwks.refetch_wanted.swap(false, Ordering::AcqRel) {
                    break;
                }
                let now = Instant::now();
                if now >= due {
                    break;
                }
                drop(jwks);
                std::thread::park_timeout((due - now).min(REFRESHER_NAP));
            }
            // At most one read per min_refetch, whoever asked.
            let earliest = last_read + self.settings.min_refetch;
            while Instant::now() < earliest {
                if self.jwks.strong_count() == 0 {
                    return;
                }
                std::thread::sleep((earliest - Instant::now()).min(REFRESHER_NAP));
            }
            let Some(jwks) = self.jwks.upgrade() else { return };
            self.read_sources(&jwks);
            last_read = Instant::now();
        }
    }

    fn read_sources(&mut self, jwks: &Jwks) {
        let mut failed = false;
        if let Some(path) = &self.settings.file {
            match read_file(path) {
                Ok(set) => self.file_keys = Arc::new(set),
                Err(e) => {
                    failed = true;
                    tracing::warn!(error = %e, "JWKS file unusable; the last good keys stay");
                }
            }
        }
        if let (Some(url), Some(agent)) = (&self.settings.url, &self.agent) {
            match fetch(agent, url) {
                Ok(set) => self.url_keys = Arc::new(set),
                Err(e) => {
                    failed = true;
                    tracing::warn!(error = %e, "JWKS fetch failed; the last good keys stay");
                }
            }
        }
        let keys = self.file_keys.merged(&self.url_keys);
        let changed = keys.fingerprint != jwks.current.load().fingerprint;
        jwks.current.store(keys);
        if changed {
            jwks.changes.fetch_add(1, Ordering::Release);
            tracing::info!(keys = jwks.current.load().len(), "JWK Set changed");
        }
        jwks.reads.fetch_add(1, Ordering::Relaxed);
        if failed {
            jwks.read_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn read_file(path: &std::path::Path) -> Result<KeySet, JwksError> {
    let file_error = |error: String| JwksError::File { path: path.display().to_string(), error };
    let document = crate::fsread::read(path, JWKS_BYTES_MAX as u64).map_err(|e| match e {
        crate::fsread::FileError::TooLarge(_) => file_error(JwksError::TooLarge.to_string()),
        other => file_error(other.to_string()),
    })?;
    KeySet::parse(&document).map_err(|e| file_error(e.to_string()))
}

/// One client for the refresher's reads: bounded in time, no redirects followed (the key set's
/// address is configuration, not something a response may change), statuses as values.
fn fetch_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(JWKS_FETCH_TIMEOUT_SECS)))
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into()
}

fn fetch(agent: &ureq::Agent, url: &str) -> Result<KeySet, JwksError> {
    let fetch_error = |error: String| JwksError::Fetch { url: crate::redact::redact(url), error };
    let mut response = agent
        .get(url)
        .header("Accept", "application/jwk-set+json, application/json")
        .call()
        .map_err(|e| fetch_error(e.to_string()))?;
    if response.status() != 200 {
        return Err(fetch_error(format!("HTTP status {}", response.status().as_u16())));
    }
    let document = response
        .body_mut()
        .with_config()
        .limit(JWKS_BYTES_MAX as u64)
        .read_to_vec()
        .map_err(|e| fetch_error(e.to_string()))?;
    KeySet::parse(&document).map_err(|e| fetch_error(e.to_string()))
}
