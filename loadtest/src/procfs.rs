//! The server process as Linux shows it: which process listens on a port, and its resident
//! memory. Used by the `sessions` scenario (RSS per idle session).
//!
//! Never: touches a process it was not pointed at; it only reads `/proc`.

use std::fs;

use anyhow::{bail, Context as _};

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line in /proc/PID/status")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmRSS line")?
        .parse()
        .context("malformed VmRSS value")?;
    Ok(kib * 1024)
}

/// The process with a listening TCP socket on `port` (any address, IPv4 or IPv6).
pub fn listener_pid(port: u16) -> anyhow::Result<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 || fields[3] != "0A" {
                continue; // not LISTEN
            }
            let local_port =
                fields[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                inodes.push(format!("socket:[{}]", fields[9]));
            }
        }
    }
    if inodes.is_empty() {
        bail!("no process listens on port {port}");
    }
    for proc_entry in fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(fds) = fs::read_dir(proc_entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if let Ok(link) = fs::read_link(fd.path()) {
                if inodes.iter().any(|i| link.as_os_str() == i.as_str()) {
                    return Ok(pid);
                }
            }
        }
    }
    bail!(
        "the socket listening on port {port} belongs to no process we can see (pass --server-pid)"
    )
}
