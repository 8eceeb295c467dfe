//! What a report says it ran on: the machine, a disk flush probe, and the engine's version
//! and durability settings.

use std::time::{Duration, Instant};

use chorus::db::AnyConnection;
use diesel::prelude::*;

use crate::report::ms;
use crate::runner::Measured;
use crate::support::machine::Machine;
use crate::{CONTENT, TIME_LIMIT};

pub fn machine_description() -> String {
    let m = Machine::read();
    format!(
        "- date: {}\n- machine: {} cores ({}), {} RAM, Linux {}\n\
         - {}\n\
         - load average at start (1, 5, 15 min): {}\n\
         - server and load generator share the machine: actix workers = cores, {} client threads, \
         pool_size 8, HTTP/1.1 keep-alive over 127.0.0.1\n\
         - each run stops at its count or after {} s; message content {} bytes\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        m.cores,
        m.cpu,
        m.memory,
        m.kernel,
        fsync_probe(),
        m.load_average,
        2,
        TIME_LIMIT.as_secs(),
        CONTENT.len(),
    )
}

/// How long a small durable write takes in the temp dir (where the SQLite files live; on this
/// machine the same disk as PostgreSQL's data): what FULL and a PostgreSQL commit pay per
/// flush. A flush that a disk cache absorbs shows up here as a very small number.
fn fsync_probe() -> String {
    use std::io::Write;
    const WRITES: usize = 200;
    let measure = || -> std::io::Result<Vec<Duration>> {
        let mut file = tempfile::tempfile()?;
        let block = [0x5au8; 4096];
        let mut took = Vec::with_capacity(WRITES);
        for _ in 0..WRITES {
            let t0 = Instant::now();
            file.write_all(&block)?;
            file.sync_data()?;
            took.push(t0.elapsed());
        }
        Ok(took)
    };
    match measure() {
        Ok(took) => {
            let m = Measured {
                latencies: took,
                ..Measured::default()
            };
            format!(
                "disk flush (4 KiB append + fdatasync, {WRITES}×, temp dir): p50 {} ms, p99 {} ms",
                ms(m.percentile_ms(0.5)),
                ms(m.percentile_ms(0.99))
            )
        }
        Err(e) => format!("disk flush probe failed: {e}"),
    }
}

pub fn engine_description(conn: &mut AnyConnection) -> String {
    use diesel::dsl::sql;
    use diesel::sql_types::Text;
    let setting = |conn: &mut AnyConnection, expr: &str| -> String {
        diesel::select(sql::<Text>(expr))
            .get_result::<String>(conn)
            .unwrap_or_else(|e| format!("? ({e})"))
    };
    match conn {
        AnyConnection::Sqlite(_) => format!(
            "SQLite {}, journal_mode = WAL, one writer connection plus 8 readers.",
            setting(conn, "sqlite_version()")
        ),
        AnyConnection::Postgresql(_) => format!(
            "{}; fsync = {}, synchronous_commit = {}, shared_buffers = {}; pool of 8 connections.",
            setting(conn, "split_part(version(), ' on ', 1)"),
            setting(conn, "current_setting('fsync')"),
            setting(conn, "current_setting('synchronous_commit')"),
            setting(conn, "current_setting('shared_buffers')"),
        ),
    }
}
