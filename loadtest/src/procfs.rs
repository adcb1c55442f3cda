//! The server process as Linux shows it: which process listens on a port, its resident memory
//! and its CPU time. Used by the `sessions` scenario (RSS per idle session) and `streams` (RSS
//! and CPU under live streams).
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

/// Clock ticks per second of `/proc/PID/stat`'s times (`USER_HZ`: 100 on every Linux ABI that
/// `getconf CLK_TCK` reports for; the scripts assume the same).
pub const CLOCK_TICKS_PER_S: f64 = 100.0;

/// User + system CPU time of `pid` (all threads), in clock ticks (`CLOCK_TICKS_PER_S`).
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields start after the last `)`.
    let rest = stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of proc(5); `rest` starts at field 3.
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields.get(i).context("short /proc/PID/stat")?.parse().context("malformed CPU time")
    };
    Ok(tick(11)? + tick(12)?)
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
