//! What a benchmark ran on, read from /proc: the facts every report starts with.

pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    pub memory: String,
    pub kernel: String,
    /// The 1, 5 and 15 minute load averages: other work on the machine skews every number.
    pub load_average: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .map_or("unknown".into(), |s| s.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or("unknown".into(), |kb| {
                format!("{:.1} GiB", kb / 1024.0 / 1024.0)
            });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or("unknown".into(), |s| s.trim().to_owned());
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            memory,
            kernel,
            load_average,
        }
    }
}
