//! Every file tidemark reads by a name the operator gave (the `--config` file, `--auth-tokens`,
//! `--auth-policy`, `--tls-cert`/`--tls-key`, `--auth-jwks-file`, `--request-state-key-file`,
//! `--upstream-credentials`), read whole under its own byte limit, at start and on reload.
//!
//! The rules, for all of them (issue 38, finding 2): links are followed, and what they end at
//! must be a regular file; it is opened with `O_NONBLOCK`, so opening a FIFO returns at once
//! instead of waiting for a writer, and the type is taken from the opened descriptor (`fstat`),
//! not from the name, so nothing can swap the file between the check and the read; the read
//! goes through a `limit + 1` reader, so a file that grows (or lies about its length, as
//! `/dev/zero` and every device and pipe do: their length is 0) costs at most `limit + 1` bytes.
//!
//! Never: names a file in its own errors (each caller knows which flag the file belongs to and
//! puts it, with the path, in front of the reason), or reads more than `limit + 1` bytes.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Why a file was not read; the `Display` is the reason only (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// The OS: the file cannot be opened or read (missing, no permission, an I/O error).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The operator: the name ends at something other than a regular file (a device such as
    /// `/dev/zero`, a FIFO, a socket, a directory), which has no byte bound of its own.
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// The operator: the file holds more than the limit of its kind.
    #[error("over {0} bytes")]
    TooLarge(u64),
    /// The operator: a text file that is not UTF-8.
    #[error("not UTF-8 text")]
    NotUtf8,
}

/// The bytes of the regular file `path` names (links followed), if at most `limit` of them.
pub(crate) fn read(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        // A FIFO's open would otherwise wait for a writer, forever (issue 38: `--config` a FIFO).
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    // `metadata` on the open file is fstat(2): the type of what was opened, not of the name now.
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(describe(kind)));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge(limit));
    }
    Ok(bytes)
}

/// `read`, as UTF-8 text.
pub(crate) fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read(path, limit)?).map_err(|_| FileError::NotUtf8)
}

/// What a file that is not a regular one is, for the error.
fn describe(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_at_the_limit_and_over_it() {
        // Goal: the bound holds at N and N+1 and other kinds are refused without reading.
        // Method: a temporary file of 8 bytes read under limits 8 and 7; /dev/zero; a directory.
        let path = std::env::temp_dir().join(format!("tidemark-fsread-{}", std::process::id()));
        std::fs::write(&path, b"12345678").expect("write");
        assert_eq!(read(&path, 8).expect("at the limit"), b"12345678");
        assert!(matches!(read(&path, 7), Err(FileError::TooLarge(7))));
        std::fs::write(&path, b"\xff\xfe").expect("write");
        assert!(matches!(read_text(&path, 8), Err(FileError::NotUtf8)));
        let _ = std::fs::remove_file(&path);
        let zero = read(Path::new("/dev/zero"), 8).expect_err("a device");
        assert_eq!(zero.to_string(), "not a regular file (a character device)");
        let dir = read(&std::env::temp_dir(), 8).expect_err("a directory");
        assert_eq!(dir.to_string(), "not a regular file (a directory)");
    }
}
