//! Who used the cores: CPU time of this process's threads (clients, HTTP workers, database
//! calls) and of the PostgreSQL backends serving the bench database.

use std::collections::HashMap;

use chorus::db::AnyConnection;
use diesel::prelude::*;

use crate::support::proc_status::{stat_ticks, TICKS_PER_SEC};
use crate::CLIENT_THREAD_NAME;

pub struct CpuSample {
    process: u64,
    threads: HashMap<String, (String, u64)>,
    backends: HashMap<i32, u64>,
}

#[derive(QueryableByName)]
struct BackendPid {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}

/// The PostgreSQL backends serving the bench database (none on SQLite).
pub fn backend_pids(conn: &mut AnyConnection) -> Vec<i32> {
    let AnyConnection::Postgresql(c) = conn else {
        return Vec::new();
    };
    diesel::sql_query(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .load::<BackendPid>(c)
    .map(|rows| rows.into_iter().map(|r| r.pid).collect())
    .unwrap_or_default()
}

pub fn cpu_sample(backends: &[i32]) -> CpuSample {
    let mut threads = HashMap::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let tid = task.file_name().to_string_lossy().into_owned();
            if let Some(entry) = stat_ticks(&format!("/proc/self/task/{tid}/stat")) {
                threads.insert(tid, entry);
            }
        }
    }
    CpuSample {
        process: stat_ticks("/proc/self/stat").map_or(0, |(_, t)| t),
        threads,
        backends: backends
            .iter()
            .filter_map(|pid| Some((*pid, stat_ticks(&format!("/proc/{pid}/stat"))?.1)))
            .collect(),
    }
}

/// CPU seconds between two samples: [clients, HTTP workers, database calls, other server
/// threads, PostgreSQL backends]. Threads that exited meanwhile (idle blocking threads) count
/// as database calls.
pub fn cpu_breakdown(before: &CpuSample, after: &CpuSample) -> [f64; 5] {
    let mut parts = [0u64; 5];
    let mut threads_total = 0;
    for (tid, (name, ticks)) in &after.threads {
        let delta = ticks - before.threads.get(tid).map_or(0, |(_, t)| *t).min(*ticks);
        threads_total += delta;
        // The main thread only drives the bench's top-level future: a client.
        let part = if name.starts_with(CLIENT_THREAD_NAME) || name.starts_with("receipts") {
            0
        } else if name.starts_with("actix-server wo") {
            1
        } else if name.starts_with("tokio-rt-worker") || name.starts_with("tokio-runtime-w") {
            // The blocking threads of the actix workers' runtimes: every database call.
            2
        } else {
            3
        };
        parts[part] += delta;
    }
    parts[2] += (after.process - before.process).saturating_sub(threads_total);
    parts[4] = after
        .backends
        .iter()
        .map(|(pid, ticks)| ticks - before.backends.get(pid).copied().unwrap_or(0).min(*ticks))
        .sum();
    parts.map(|t| t as f64 / TICKS_PER_SEC)
}
