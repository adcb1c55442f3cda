//! The Unix socket file of `--listen unix:PATH`: one owner per file, as for ports. At start
//! the path is claimed (`bind`): a socket another live process listens on is refused (a
//! connect answers), a stale socket file a dead process left is removed, and anything that is
//! not a socket is never removed (start-up fails naming it). The socket is bound, given its
//! `--listen-mode`, and only then listens, so no client connects while the file still has the
//! process's umask. `SocketFile` removes the file when the server is done with it (after the
//! drain), and only if the path still names the file it bound (a successor's is left alone).
//!
//! Called by `server` at start. Never: removes a file that is not a socket, or one another
//! process listens on.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::{self, FileMode};

/// Why the socket file could not be claimed or bound: what was done, and the OS's error
/// (`server` reports it as its `ServerError::Io`).
pub(crate) struct BindError {
    pub(crate) what: String,
    pub(crate) source: std::io::Error,
}

/// `BindError` with `what`, for `map_err`.
fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BindError {
    let what = what.into();
    move |source| BindError { what, source }
}

/// The socket file this process bound; removes it on drop if the path still names it.
pub(crate) struct SocketFile {
    path: PathBuf,
    /// The bound file's device and inode: what the path must still name to be removed.
    identity: (u64, u64),
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else { return };
        if (meta.dev(), meta.ino()) == self.identity && meta.file_type().is_socket() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Claims `path` (see the module's doc), binds a listening socket there with `mode` and the
/// backlog of the TCP listeners, non-blocking: the listener every core accepts on (each on its
/// own duplicate), and the guard that removes the file at the end.
pub(crate) fn bind(
    path: &Path,
    mode: FileMode,
) -> Result<(std::os::unix::net::UnixListener, SocketFile), BindError> {
    use socket2::{Domain, SockAddr, Socket, Type};
    claim(path)?;
    let shown = path.display();
    let addr = SockAddr::unix(path).map_err(io(format!("unix:{shown}")))?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(io("socket"))?;
    socket.bind(&addr).map_err(io(format!("bind unix:{shown}")))?;
    let meta = std::fs::symlink_metadata(path).map_err(io(format!("stat unix:{shown}")))?;
    let file = SocketFile { path: path.to_owned(), identity: (meta.dev(), meta.ino()) };
    // Before `listen`: until then a connect is refused, whatever the umask gave the file.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode.0))
        .map_err(io(format!("chmod {:o} unix:{shown}", mode.0)))?;
    socket.listen(config::LISTEN_BACKLOG as i32).map_err(io("listen"))?;
    socket.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
    Ok((socket.into(), file))
}

/// Makes `path` free to bind: nothing there, or a stale socket file (removed). Refuses a
/// socket a live process listens on, and anything that is not a socket.
fn claim(path: &Path) -> Result<(), BindError> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(BindError { what: format!("stat unix:{shown}"), source: e }),
    };
    if !meta.file_type().is_socket() {
        return Err(BindError {
            what: format!("unix:{shown} exists and is not a socket (not removed)"),
            source: std::io::ErrorKind::AlreadyExists.into(),
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(BindError {
            what: format!("bind unix:{shown}: in use by another process"),
            source: std::io::ErrorKind::AddrInUse.into(),
        }),
        // Nobody listens: the file of a process that died without removing it.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %shown, "removing the stale socket file of a dead process");
            std::fs::remove_file(path).map_err(io(format!("remove stale unix:{shown}")))
        }
        // EACCES and the like: whether someone listens is unknown, so the file stays.
        Err(e) => Err(BindError { what: format!("connect unix:{shown}"), source: e }),
    }
}
