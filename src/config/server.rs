//! The server section: where and how the process serves (`--listen`: a TCP address and/or a
//! Unix socket file with `--listen-mode`; `--path`, `--threads`, `--driver`, `--tools`, TLS,
//! the admin listener, the drain, the node id), its defaults, validation and flags.
//!
//! Owns: `ServerConfig` and its flags. Never: opens a socket or reads a file.

use std::net::SocketAddr;
use std::time::Duration;

use super::error::{nonzero, ConfigError};

/// Default listen address: loopback, so DNS-rebinding protection is on (MCP 2025-11-25
/// transports §security: servers SHOULD bind to localhost when local).
pub(crate) const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// The permissions of a `--listen unix:PATH` socket file when `--listen-mode` is not given:
/// owner only. With authorization off (the default) the file's permissions are the only
/// access control over the socket, so the default grants no one but the server's own user;
/// a sidecar running as another user in a shared group takes `--listen-mode 0660`.
pub(crate) const LISTEN_MODE_DEFAULT: &str = "0600";
/// The prefix of a `--listen` value naming a Unix socket file (`unix:/run/tidemark.sock`).
pub(crate) const LISTEN_UNIX_PREFIX: &str = "unix:";
/// Default MCP endpoint path.
pub(crate) const PATH_DEFAULT: &str = "/mcp";
/// This node's id when `--node-id` is not given: a single node needs no other.
pub(crate) const NODE_ID_DEFAULT: u8 = 0;
/// The largest `--node-id`: session and task ids carry the owner node in 8 bits, as their first
/// two hex digits (the prefix a balancer routes on), so a cluster has at most 256 nodes.
pub(crate) const NODE_ID_MAX: u8 = u8::MAX;
/// Cores the server may run on; session ids carry the owner core in 16 bits.
pub(crate) const THREADS_MAX: usize = 1024;
/// Longest graceful drain after SIGTERM/SIGINT (or `Running::shutdown`): running calls get this
/// long to finish and deliver their results while no new connection or session is accepted.
/// 30 s is the usual grace period of process supervisors (Kubernetes'
/// `terminationGracePeriodSeconds`, systemd's `TimeoutStopSec` is 90 s), so a call shorter than
/// that survives a rolling restart. Over it: open SSE streams end with the chunked response's
/// last chunk (no result: the client sees a clean end and may retry elsewhere), and the process
/// exits 0.
pub(crate) const DRAIN_SECS: u64 = 30;

/// Connections queued in one core's hand-off inbox. Full: the sender answers 503.
pub(crate) const HANDOFF_INBOX_MAX: usize = 1024;
/// How long the end of a drain waits for connections to take their last bytes (an SSE stream's
/// last chunk, an answer being written) before the process exits regardless. One second covers
/// a slow reader on a loopback or LAN link; a peer that reads nothing is cut then.
pub(crate) const DRAIN_FLUSH_MS: u64 = 1000;
/// The kernel's accept queue of each core's listener (`listen(2)` backlog; the kernel caps it
/// at `net.core.somaxconn`). Connections beyond it wait in SYN retries; the drain takes at
/// most this many from the queue before closing the listener.
pub(crate) const LISTEN_BACKLOG: usize = 1024;
/// `Retry-After` of the 503 a new `initialize` gets during a drain, in seconds: by then a
/// restarted process or another replica answers.
pub(crate) const DRAIN_RETRY_AFTER_SECS: u64 = 1;
/// Concurrent connections on the admin listener (`--metrics-listen`), one thread each. Scrapers
/// and probes hold one or two; 64 leaves room for several of each and bounds the threads an
/// abuser can make us hold. Over it: 503, closed.
pub(crate) const ADMIN_CONNECTIONS_MAX: usize = 64;
/// Time an admin connection has to deliver its request head, and each write to be taken. Over
/// it: closed (an idle connection holds a thread this long at most).
pub(crate) const ADMIN_IO_TIMEOUT_MS: u64 = 2000;
/// Bytes of an admin request head. Over it: 431, closed.
pub(crate) const ADMIN_HEAD_BYTES_MAX: usize = 4096;
/// Bytes of one `--tls-cert` or `--tls-key` PEM file; larger is refused at start (and kept out
/// on a reload: the old certificate stays). 1 MiB: a chain of a leaf and two intermediates
/// with RSA-4096 keys is under 8 KiB in PEM. No flag: no certificate file comes near it.
pub(crate) const TLS_FILE_BYTES_MAX: u64 = 1024 * 1024;

const _: () = assert!(THREADS_MAX <= u16::MAX as usize);
const _: () = assert!(LISTEN_BACKLOG > 0 && LISTEN_BACKLOG <= i32::MAX as usize);
const _: () = assert!(DRAIN_SECS > 0 && DRAIN_FLUSH_MS > 0 && DRAIN_RETRY_AFTER_SECS > 0);
const _: () = assert!(ADMIN_CONNECTIONS_MAX > 0 && ADMIN_IO_TIMEOUT_MS > 0);

/// Which io driver a worker runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverChoice {
    /// io_uring with the best ring flags the kernel takes, else epoll.
    Auto,
    /// io_uring only (fails if the kernel refuses).
    Uring,
    /// epoll (monoio's legacy driver).
    Epoll,
}

/// A built-in tool set (`--tools`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuiltinSet {
    /// `echo`, `slow_counter`, `get_counter`.
    Demo,
    /// The fixtures of the official MCP conformance suite.
    Conformance,
}
impl BuiltinSet {
    /// Parses the `--tools` flag: a comma list of set names (`demo`, `conformance`), whitespace
    /// around names ignored, repeats collapsed; `none` alone means no built-in set. An empty or
    /// unknown name is an operator error.
    pub fn parse_list(spec: &str) -> Result<Vec<BuiltinSet>, ConfigError> {
        if spec.trim() == "none" {
            return Ok(Vec::new());
        }
        let mut sets = Vec::new();
        for name in spec.split(',').map(str::trim) {
            let set = match name {
                "demo" => BuiltinSet::Demo,
                "conformance" => BuiltinSet::Conformance,
                other => return Err(ConfigError::UnknownToolSet(other.to_owned())),
            };
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
        Ok(sets)
    }

    /// The name `--tools` takes.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinSet::Demo => "demo",
            BuiltinSet::Conformance => "conformance",
        }
    }
}

/// The PEM files the MCP listeners' TLS is configured from (`--tls-cert`, `--tls-key`: both
/// or neither); read at start and again on SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`--tls-cert`).
    pub cert: std::path::PathBuf,
    /// The leaf's private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) (`--tls-key`).
    pub key: std::path::PathBuf,
}

/// One `--listen` value: a TCP address or a Unix socket file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListenAddr {
    /// `HOST:PORT`.
    Tcp(SocketAddr),
    /// `unix:PATH`.
    Unix(std::path::PathBuf),
}

/// Parses a `--listen` value: `unix:PATH` (an absolute or relative path, not empty) or a
/// socket address.
fn parse_listen(value: &str) -> Result<ListenAddr, String> {
    if let Some(path) = value.strip_prefix(LISTEN_UNIX_PREFIX) {
        if path.is_empty() {
            return Err("unix: needs a path (unix:/run/tidemark.sock)".into());
        }
        return Ok(ListenAddr::Unix(path.into()));
    }
    value
        .parse()
        .map(ListenAddr::Tcp)
        .map_err(|_| format!("expected HOST:PORT or {LISTEN_UNIX_PREFIX}PATH, got {value:?}"))
}

/// A Unix socket file's permission bits (`--listen-mode`), written in octal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMode(pub u32);

/// Parses `--listen-mode`: octal digits (`0600`, `660`), at most `0777` (no setuid, setgid or
/// sticky bits: they mean nothing on a socket).
fn parse_mode(value: &str) -> Result<FileMode, String> {
    match u32::from_str_radix(value, 8) {
        Ok(mode) if mode <= 0o777 => Ok(FileMode(mode)),
        _ => Err(format!("expected octal permissions 000..0777 (0600, 0660), got {value:?}")),
    }
}

/// Where and how the process serves: its MCP listener, workers, built-in tools, TLS, admin
/// listener, drain and node id.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The TCP address the workers listen on (`--listen`, `LISTEN_DEFAULT`: loopback), when
    /// `listen_tcp`. Without a TCP listener it keeps the loopback default, so the Host/Origin
    /// rules of a loopback listener are the Unix socket's.
    pub listen: SocketAddr,
    /// Whether the workers listen on TCP at `listen` (false when every `--listen` names a Unix
    /// socket file).
    pub listen_tcp: bool,
    /// The Unix socket file the workers listen on too (`--listen unix:PATH`), when set.
    pub listen_unix: Option<std::path::PathBuf>,
    /// The socket file's permissions (`--listen-mode`, `LISTEN_MODE_DEFAULT`).
    pub listen_mode: FileMode,
    /// The MCP endpoint path (`--path`, `PATH_DEFAULT`; starts with `/`); other paths get 404.
    pub path: String,
    /// Worker threads, one runtime pinned per core (`--threads`; at most `THREADS_MAX`).
    pub threads: usize,
    /// The io driver of every worker (`--driver`).
    pub driver: DriverChoice,
    /// Built-in tool sets (`--tools`); `None`: `demo` when no other provider is given, else none.
    pub builtin_tools: Option<Vec<BuiltinSet>>,
    /// TLS on every MCP listener (`--tls-cert`, `--tls-key`), when set; the handshake must end
    /// within `header_timeout` of the accept. The admin listener stays plain HTTP.
    pub tls: Option<TlsFiles>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`), when set.
    pub metrics_listen: Option<SocketAddr>,
    /// Longest graceful drain (`--drain-secs`, `DRAIN_SECS`).
    pub drain: Duration,
    /// This node's id among the nodes behind one balancer (`--node-id`, `NODE_ID_DEFAULT`, at
    /// most `NODE_ID_MAX`): the first two hex digits of every session and task id it mints.
    pub node_id: u8,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: LISTEN_DEFAULT.parse().expect("invariant: constant address parses"),
            listen_tcp: true,
            listen_unix: None,
            listen_mode: parse_mode(LISTEN_MODE_DEFAULT).expect("invariant: constant mode parses"),
            path: PATH_DEFAULT.to_owned(),
            threads: 1,
            driver: DriverChoice::Auto,
            builtin_tools: None,
            tls: None,
            metrics_listen: None,
            drain: Duration::from_secs(DRAIN_SECS),
            node_id: NODE_ID_DEFAULT,
        }
    }
}

impl ServerConfig {
    /// The section of the parsed flags; `--threads` defaults to the machine's cores.
    pub(crate) fn from_flags(
        server: ServerFlags,
        listener: ListenerFlags,
        node: NodeFlags,
    ) -> Result<ServerConfig, ConfigError> {
        let threads = server
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let (listen, listen_unix) = split_listen(server.listen)?;
        Ok(ServerConfig {
            listen: listen.unwrap_or_else(|| ServerConfig::default().listen),
            listen_tcp: listen.is_some(),
            listen_unix,
            listen_mode: server.listen_mode,
            path: server.path,
            threads,
            driver: match server.driver {
                DriverFlag::Auto => DriverChoice::Auto,
                DriverFlag::Uring => DriverChoice::Uring,
                DriverFlag::Epoll => DriverChoice::Epoll,
            },
            builtin_tools: server.tools.as_deref().map(BuiltinSet::parse_list).transpose()?,
            tls: match (listener.tls_cert, listener.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
                // clap's `requires` refuses one without the other.
                _ => None,
            },
            metrics_listen: listener.metrics_listen,
            drain: Duration::from_secs(node.drain_secs),
            node_id: node.node_id,
        })
    }

    /// Checks the section's values (the listener's authorization is `Config::validate`'s).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("threads", self.threads as u128), ("drain-secs", self.drain.as_millis())])?;
        if self.threads > THREADS_MAX {
            return Err(ConfigError::TooManyThreads(self.threads, THREADS_MAX));
        }
        if !self.path.starts_with('/') {
            return Err(ConfigError::BadPath(self.path.clone()));
        }
        Ok(())
    }
}

/// The `--listen` values as at most one TCP address and at most one Unix socket file.
type Listens = (Option<SocketAddr>, Option<std::path::PathBuf>);

/// Splits the `--listen` values; a second TCP address or a second socket file is refused (one
/// of each: every core accepts on both).
fn split_listen(values: Vec<ListenAddr>) -> Result<Listens, ConfigError> {
    let (mut tcp, mut unix) = (None, None);
    for value in values {
        let twice = match value {
            ListenAddr::Tcp(addr) => tcp.replace(addr).is_some(),
            ListenAddr::Unix(path) => unix.replace(path).is_some(),
        };
        if twice {
            return Err(ConfigError::ListenTwice);
        }
    }
    Ok((tcp, unix))
}

/// `--driver`'s values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DriverFlag {
    Auto,
    Uring,
    Epoll,
}

/// The command line's flags of this section: `--listen`, `--path`, `--threads`, `--driver`,
/// `--tools`. `cli` flattens them into its `Flags` in `--help`'s order (a section's flags may come
/// in several runs).
#[derive(clap::Args)]
pub(crate) struct ServerFlags {
    /// Address to listen on (loopback by default: DNS-rebinding protection applies), or
    /// unix:PATH for a Unix socket file; repeat it for both (one of each).
    #[arg(long, default_value = LISTEN_DEFAULT, value_parser = parse_listen,
          value_name = "ADDR|unix:PATH")]
    pub(crate) listen: Vec<ListenAddr>,
    /// Permissions of the --listen unix:PATH socket file, in octal (0660 lets the file's group
    /// connect: a sidecar's).
    #[arg(long, default_value = LISTEN_MODE_DEFAULT, value_parser = parse_mode)]
    pub(crate) listen_mode: FileMode,
    /// The MCP endpoint path.
    #[arg(long, default_value = PATH_DEFAULT)]
    pub(crate) path: String,
    /// Worker threads, one monoio runtime each (default: the machine's cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// io driver: auto tries io_uring (DEFER_TASKRUN, COOP_TASKRUN, plain), then epoll.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) driver: DriverFlag,
    /// Built-in tool sets, comma-separated: demo, conformance; `none` for none (default: demo,
    /// unless the embedding program adds providers of its own).
    #[arg(long)]
    pub(crate) tools: Option<String>,
}

/// The command line's flags of this section: TLS (`--tls-cert`, `--tls-key`) and the admin
/// listener. `cli` flattens them into its `Flags` in `--help`'s order (a section's flags may come
/// in several runs).
#[derive(clap::Args)]
pub(crate) struct ListenerFlags {
    /// Serve every MCP listener over TLS (1.3/1.2, ALPN http/1.1) with this PEM certificate
    /// chain, leaf first; needs --tls-key. Reloaded with the key on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// Admin listener: Prometheus text at http://ADDR/metrics, an HTML page at /status,
    /// /healthz, /readyz (off by default; no authentication: keep it on loopback).
    #[arg(long)]
    pub(crate) metrics_listen: Option<SocketAddr>,
}

/// The command line's flags of this section: `--drain-secs` and `--node-id`. `cli` flattens them
/// into its `Flags` in `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct NodeFlags {
    /// On SIGTERM/SIGINT: how long running calls may finish and deliver their results before
    /// open streams are ended and the process exits 0 (a second signal exits at once).
    #[arg(long, default_value_t = DRAIN_SECS)]
    pub(crate) drain_secs: u64,
    /// This node's id behind a balancer, 0..=255: the first two hex digits of every session
    /// and task id, which the balancer routes on (deploy/haproxy-config). Unique per node.
    #[arg(long, default_value_t = NODE_ID_DEFAULT,
          value_parser = clap::value_parser!(u8).range(..=i64::from(NODE_ID_MAX)))]
    pub(crate) node_id: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values_are_an_address_or_a_socket_file_one_of_each() {
        // Goal: `--listen` parses both forms, refuses an empty path and a second of either
        // kind. Method: the parsers on a table of values.
        let tcp = ListenAddr::Tcp("127.0.0.1:9".parse().expect("address"));
        assert_eq!(parse_listen("127.0.0.1:9"), Ok(tcp.clone()));
        let unix = ListenAddr::Unix("/run/t.sock".into());
        assert_eq!(parse_listen("unix:/run/t.sock"), Ok(unix.clone()));
        assert!(parse_listen("unix:").is_err());
        assert!(parse_listen("/run/t.sock").is_err());
        let both = split_listen(vec![tcp.clone(), unix.clone()]).expect("one of each");
        assert_eq!(
            both,
            (Some("127.0.0.1:9".parse().expect("address")), Some("/run/t.sock".into()))
        );
        assert_eq!(split_listen(vec![unix.clone()]).expect("unix only").0, None);
        assert!(matches!(split_listen(vec![tcp.clone(), tcp]), Err(ConfigError::ListenTwice)));
        assert!(matches!(split_listen(vec![unix.clone(), unix]), Err(ConfigError::ListenTwice)));
    }

    #[test]
    fn listen_mode_is_octal_permission_bits() {
        // Goal: `--listen-mode` takes octal up to 0777 and nothing else. Method: a table.
        let cases = [("0600", Some(0o600)), ("660", Some(0o660)), ("0777", Some(0o777))];
        for (text, want) in cases {
            assert_eq!(parse_mode(text).ok().map(|m| m.0), want, "{text}");
        }
        for bad in ["01777", "0800", "rw-", "", "-1"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        assert_eq!(ServerConfig::default().listen_mode, FileMode(0o600));
    }
}
