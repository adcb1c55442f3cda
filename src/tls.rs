//! TLS for the MCP listeners (`--tls-cert`, `--tls-key`): the certificate chain and private key
//! read from PEM files into one rustls `ServerConfig` (TLS 1.3 and 1.2, ALPN `http/1.1` only,
//! no client certificates), and each core's current one (`CoreCerts`), which its accept takes
//! for a new connection. `Certs::reload` (SIGHUP) builds a new one and posts it to every core's
//! one-slot mailbox (a newer reload replaces one not yet taken); a core takes it at its next
//! accept, without a lock: new handshakes use the new certificate, connections already up keep
//! theirs, and files that do not load leave the old one in place (the caller logs why).
//!
//! Never: touches a socket (`runtime::socket` drives each connection's `ServerConnection` over
//! its owned buffers), knows HTTP, or logs key material.

use std::cell::RefCell;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{TlsFiles, TLS_FILE_BYTES_MAX};

/// The one application protocol offered: a client that offers ALPN without it (e.g. only
/// `h2`) gets the `no_application_protocol` alert; one that offers none is served HTTP/1.1.
pub(crate) const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The TLS files and what every core is to use next.
pub(crate) struct Certs {
    files: TlsFiles,
    /// The configuration loaded at start.
    initial: Arc<ServerConfig>,
    /// Per core: the configuration of the last reload it has not taken yet.
    mailboxes: Vec<ArrayQueue<Arc<ServerConfig>>>,
}

impl Certs {
    /// Loads `files` for `cores` cores; `Err` says which file and why (a start-up error).
    pub(crate) fn load(files: &TlsFiles, cores: usize) -> Result<Certs, String> {
        let initial = Arc::new(server_config(files)?);
        let mailboxes = (0..cores).map(|_| ArrayQueue::new(1)).collect();
        Ok(Certs { files: files.clone(), initial, mailboxes })
    }

    /// Core `index`'s view, which starts with the configuration loaded at start.
    pub(crate) fn for_core(self: &Arc<Certs>, index: usize) -> CoreCerts {
        CoreCerts { certs: self.clone(), index, current: RefCell::new(self.initial.clone()) }
    }

    /// Reads the files again; on success every core's next handshake uses them, on failure
    /// the old configuration stays and `Err` says why.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let config = Arc::new(server_config(&self.files)?);
        for mailbox in &self.mailboxes {
            // A reload the core had not taken yet is replaced: only the newest matters.
            let _older = mailbox.force_push(config.clone());
        }
        Ok(())
    }
}

/// One core's current TLS configuration.
pub(crate) struct CoreCerts {
    certs: Arc<Certs>,
    index: usize,
    current: RefCell<Arc<ServerConfig>>,
}

impl CoreCerts {
    /// The configuration a new connection's handshake uses (a reload's, once posted).
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        if let Some(reloaded) = self.certs.mailboxes.get(self.index).and_then(|m| m.pop()) {
            *self.current.borrow_mut() = reloaded;
        }
        self.current.borrow().clone()
    }
}
/// A rustls server configuration from the PEM files (each read whole, at most
/// `TLS_FILE_BYTES_MAX` bytes, by `fsread`).
fn server_config(files: &TlsFiles) -> Result<ServerConfig, String> {
    let cert_path = files.cert.display();
    let cert_pem = crate::fsread::read(&files.cert, TLS_FILE_BYTES_MAX)
        .map_err(|e| format!("--tls-cert {cert_path}: {e}"))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--tls-cert {cert_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("--tls-cert {cert_path}: no CERTIFICATE block"));
    }
    let key_path = files.key.display();
    let key_pem = crate::fsread::read(&files.key, TLS_FILE_BYTES_MAX)
        .map_err(|e| format!("--tls-key {key_path}: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("--tls-key {key_path}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            format!("--tls-cert {cert_path} with --tls-key {}: {e}", files.key.display())
        })?;
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pem_file_at_its_byte_limit_loads_and_one_byte_more_is_refused() {
        // Goal: TLS_FILE_BYTES_MAX at N and N+1, for the certificate and the key (`fsread`).
        // Method: a self-signed pair, each file padded with newlines (outside any PEM block).
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let dir = std::env::temp_dir().join(format!("tidemark-tls-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let limit = usize::try_from(TLS_FILE_BYTES_MAX).expect("fits");
        let padded = |pem: String, extra: usize| {
            let mut text = pem.into_bytes();
            text.resize(limit + extra, b'\n');
            text
        };
        let files = TlsFiles { cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        std::fs::write(&files.cert, padded(pair.cert.pem(), 0)).expect("cert");
        std::fs::write(&files.key, padded(pair.key_pair.serialize_pem(), 0)).expect("key");
        server_config(&files).expect("both at the limit");
        std::fs::write(&files.key, padded(pair.key_pair.serialize_pem(), 1)).expect("key");
        let error = server_config(&files).expect_err("the key over it");
        assert_eq!(error, format!("--tls-key {}: over {limit} bytes", files.key.display()));
        std::fs::write(&files.cert, padded(pair.cert.pem(), 1)).expect("cert");
        let error = server_config(&files).expect_err("the certificate over it");
        assert_eq!(error, format!("--tls-cert {}: over {limit} bytes", files.cert.display()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
