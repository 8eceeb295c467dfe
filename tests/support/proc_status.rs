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

/// A thread's or process's name and CPU ticks (user + system) from its `stat` file
/// (`/proc/<pid>/stat`, `/proc/self/task/<tid>/stat`); ticks are USER_HZ, 100 in /proc's ABI.
pub fn stat_ticks(path: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The name may hold spaces and parentheses; the fields after it start past the last ')'.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((stat[open + 1..close].to_owned(), utime + stime))
}

/// CPU ticks per second in /proc's ABI (USER_HZ).
pub const TICKS_PER_SEC: f64 = 100.0;

/// Bytes this process has passed to write calls (`wchar` of `/proc/self/io`): `write`,
/// `pwrite` and `writev` on files and sockets, but not `send`, which is how Rust's and
/// tokio's sockets write.
pub fn bytes_written_by_self() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// This process's soft limit on open files (`ulimit -n`), from `/proc/self/limits`; None
/// when unreadable or unlimited. Child processes inherit it.
pub fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
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
