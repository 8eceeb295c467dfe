//! A process's memory, threads and sockets, from `/proc/<pid>`: for benches and soak tests that
//! watch a child server for leaks.

/// A field of `/proc/<pid>/status`: a size in KiB (`VmRSS:`) or a count (`Threads:`).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

/// Resident memory in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:").unwrap_or(0)
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// How many of the process's file descriptors are sockets: its listener, the connections of
/// its clients and its database connections. None when the process is gone.
pub fn open_sockets(pid: u32) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let sockets = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count();
    Some(sockets)
}
