//! A process's memory and threads, from `/proc/<pid>/status`.

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
