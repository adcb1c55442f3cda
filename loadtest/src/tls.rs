//! TLS for `https://` targets (`--tls-ca FILE`): one rustls client configuration per process,
//! trusting the given CA alone, offering ALPN `http/1.1`; a non-blocking stream (`Sock`) the
//! engine drives from its epoll loop, and the blocking one of `client`.
//!
//! Owns: the client configuration, the handshake and record I/O on a non-blocking socket.
//! Never: used for an `http://` target (those stay plain sockets, measured as before).

use std::io::{ErrorKind, Read, Write};
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::wire::Target;

static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();

/// Trusts the CA certificates of the PEM file `ca` for every `https://` connection.
pub fn configure(ca: &std::path::Path) -> anyhow::Result<()> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("{}", ca.display()))? {
        roots.add(cert.with_context(|| format!("{}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Every connection pays the full handshake (certificate sent and verified): the cost a new
    // client pays, not the cheaper resumption a returning one may.
    config.resumption = rustls::client::Resumption::disabled();
    let _ = CONFIG.set(Arc::new(config));
    Ok(())
}

/// A new client session for `target`; `Err` when `--tls-ca` was not given.
pub fn session(target: &Target) -> std::io::Result<ClientConnection> {
    let config = CONFIG
        .get()
        .ok_or_else(|| std::io::Error::other("an https:// URL needs --tls-ca FILE"))?
        .clone();
    let name = ServerName::try_from(target.host.clone()).map_err(std::io::Error::other)?;
    ClientConnection::new(config, name).map_err(std::io::Error::other)
}

/// A socket of the engine, plain or TLS; non-blocking either way.
pub struct Sock {
    pub tcp: mio::net::TcpStream,
    tls: Option<Box<ClientConnection>>,
}

impl Sock {
    pub fn new(tcp: mio::net::TcpStream, target: &Target) -> std::io::Result<Sock> {
        let tls = if target.tls { Some(Box::new(session(target)?)) } else { None };
        let mut sock = Sock { tcp, tls };
        sock.push()?;
        Ok(sock)
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Sends the TLS records rustls has ready, as far as the socket takes them.
    fn push(&mut self) -> std::io::Result<()> {
        let Some(tls) = &mut self.tls else { return Ok(()) };
        while tls.wants_write() {
            match tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether TLS records wait for the socket to take them.
    pub fn pending(&self) -> bool {
        self.tls.as_ref().is_some_and(|tls| tls.wants_write())
    }

    /// Sends what is pending (the engine's writable event).
    pub fn flush_pending(&mut self) -> std::io::Result<()> {
        self.push()
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(tls) = &mut self.tls else { return self.tcp.read(buf) };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            tls.process_new_packets().map_err(std::io::Error::other)?;
            // Handshake flights and key updates the records asked for.
            while tls.wants_write() {
                match tls.write_tls(&mut self.tcp) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let Some(tls) = &mut self.tls else { return self.tcp.write(data) };
        let n = tls.writer().write(data)?;
        self.push()?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.push()
    }
}
