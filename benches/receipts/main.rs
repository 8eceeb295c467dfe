//! Receipts and long-poll benchmark: the read-receipt storm of the design notes, send and
//! who-read cost against group size, 10,000 idle long-polls, wake-ups across two
//! instances on one PostgreSQL database, and a group of 100,000 members.
//!
//! ```sh
//! cargo bench --bench receipts -- [seed|group-size|idle|cross-instance|large-group|all] \
//!     [--engine sqlite|postgres|both] [--sqlite-sync full|normal]
//! cargo bench --bench receipts -- idle --engine postgres --polls 50000 --instances 3
//! ```
//!
//! `seed`, `group-size` and `cross-instance` run the real server in this process on 127.0.0.1
//! port 0 (clients and server share the machine's cores); `idle` starts the release binary as a
//! separate process (or several on one PostgreSQL database, `--instances`) so that its memory
//! can be read from `/proc/<pid>/status`, and holds its polls in child processes of its own
//! (`idle-holder`), as many as the open-file limit per process requires. Each engine run
//! gets a fresh database: a temporary SQLite file (`synchronous = FULL`, the default), or a
//! PostgreSQL database `chorus_bench_<random>` created from CHORUS_BENCH_DATABASE_URL (default
//! postgres://postgres@127.0.0.1:5432/postgres) and dropped afterwards. Everything is set up
//! and measured over HTTP. Every loop is bounded by a count and a wall-clock limit. Markdown
//! goes to stdout, progress to stderr.
//!
//! One module per scenario (seed, group_size, idle, cross_instance, large_group); what they share: the
//! command line (args), the in-process server (server), HTTP calls (api), latency summaries
//! (measure) and CPU accounting (cpu), besides the harness in tests/support.

#[path = "../../tests/support/mod.rs"]
mod support;

mod api;
mod args;
mod cpu;
mod cross_instance;
mod group_size;
mod idle;
mod large_group;
mod measure;
mod seed;
mod server;

use std::time::Duration;

use args::{parse_args, tuning, Args, Scenario, USAGE};
use support::engine::Engine;
use support::machine::Machine;

/// 100 bytes, the size of a typical chat line.
const CONTENT: &str =
    "The quick brown fox jumps over the lazy dog; lunch at noon? Bring the slides and the drafts, please!";
/// Long-polls in `seed` and `cross-instance` ask to wait this long (the documented default).
const POLL_TIMEOUT_S: u64 = 25;
/// Longer than any long-poll, so only a hung server trips it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);

/// The name of the bench's own (client) runtime threads, to tell their CPU time apart from
/// the in-process server's (actix workers, and the blocking threads of database calls).
pub const CLIENT_THREAD_NAME: &str = "bench-client";

// Two client threads on a two-core machine: clients share the cores with the in-process
// server (two actix workers plus the database's blocking threads); the tables say so.
fn main() {
    if let Some(file) = idle::holder_file() {
        return hold_polls(&file);
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREAD_NAME)
        .enable_all()
        .build()
        .expect("build the client runtime")
        .block_on(run(args));
}

/// A child process of `idle` that holds a share of its long-polls (see `idle::holder`).
fn hold_polls(file: &str) {
    let held = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build the holder's runtime")
        .block_on(idle::holder_main(file));
    if let Err(e) = held {
        eprintln!("idle holder: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) {
    println!("# Chorus receipts and long-poll benchmark\n");
    println!("{}", machine_description());
    let both = vec![Engine::Sqlite, Engine::Postgres];
    for scenario in args.scenarios {
        println!(
            "_load average before this scenario: {}_\n",
            Machine::read().load_average
        );
        match scenario {
            Scenario::Seed => seed::bench(args.engines.as_ref().unwrap_or(&both)).await,
            Scenario::GroupSize => group_size::bench(args.engines.as_ref().unwrap_or(&both)).await,
            Scenario::Idle => {
                let engines = args.engines.as_deref().unwrap_or(&[Engine::Sqlite]);
                idle::bench(engines, args.idle_polls, args.idle_instances).await
            }
            Scenario::CrossInstance => {
                cross_instance::bench(args.engines.as_ref().unwrap_or(&both)).await
            }
            Scenario::LargeGroup => {
                large_group::bench(args.engines.as_ref().unwrap_or(&both)).await
            }
        }
    }
    println!(
        "_load average at the end: {}_",
        Machine::read().load_average
    );
}

fn machine_description() -> String {
    let m = Machine::read();
    format!(
        "- date: {}\n- machine: {} cores (nproc), {}, {} RAM, Linux {}\n\
         - in-process scenarios: server (actix workers = cores) and clients (2 tokio \
         threads) share the cores; HTTP/1.1 keep-alive over 127.0.0.1\n\
         - in-process servers: SQLite synchronous = {:?}, pool_size = {}, PostgreSQL \
         synchronous_commit = {} (the `idle` binary: the defaults)\n\
         - load average at the start: {}\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        m.cores,
        m.cpu,
        m.memory,
        m.kernel,
        tuning().sqlite_sync,
        tuning().pool_size,
        if tuning().pg_async_commit {
            "off"
        } else {
            "the server's (on)"
        },
        m.load_average,
    )
}
