//! idle: 10,000 concurrent idle long-polls (or `--polls`) against the release binary, run as
//! a process of its own so that its memory can be read from /proc (or as `--instances`
//! processes on one PostgreSQL database), the polls held by child processes of the bench;
//! then one message wakes one group.

mod binary;
mod holder;
mod raw_poll;
mod report;
mod run;

use std::time::Duration;

use holder::polls_per_holder;

use crate::support::engine::Engine;
pub use holder::holder_main;

/// The poll file when this process was started as a holder of `idle`'s polls.
pub fn holder_file() -> Option<String> {
    let mut args = std::env::args().skip(1);
    (args.next().as_deref() == Some(holder::HOLDER_COMMAND))
        .then(|| args.next())
        .flatten()
}

pub use crate::args::IDLE_GROUP_SIZE;
pub const IDLE_POLL_TIMEOUT_S: u64 = 60;
pub const IDLE_CONNECT_CONCURRENCY: usize = 200;
pub const IDLE_SETUP_CONCURRENCY: usize = 32;
pub const IDLE_OPEN_LIMIT: Duration = Duration::from_secs(40);
pub const IDLE_SETTLE_LIMIT: Duration = Duration::from_secs(15);
pub const IDLE_WAKE_LIMIT: Duration = Duration::from_secs(10);
/// The second RSS sample, this long after the last poll was opened (well within timeout_s).
pub const IDLE_STEADY_AFTER: Duration = Duration::from_secs(20);

pub struct IdleResult {
    pub engine: Engine,
    /// Server processes the polls were spread over.
    pub instances: usize,
    /// Processes of this bench that held the polls.
    pub holders: usize,
    /// Polls the run set out to open.
    pub polls: usize,
    /// RSS and threads: summed over the server processes.
    pub rss_start: u64,
    pub rss_before: u64,
    pub rss_waiting: u64,
    pub rss_steady: u64,
    pub steady_secs: f64,
    /// Before the polls, once the RSS settled, and at the steady-state sample.
    pub threads: [u64; 3],
    pub hwm: u64,
    pub client_rss_growth: u64,
    pub opened: usize,
    pub open_secs: f64,
    pub early: Vec<String>,
    pub send_ms: f64,
    pub wake: Vec<f64>,
    pub others_woken: usize,
    pub errors: String,
}

pub async fn bench(engines: &[Engine], polls: usize, instances: usize) {
    println!("## idle: {polls} concurrent idle long-polls\n");
    let per_holder = polls_per_holder();
    println!(
        "The release binary (`cargo build --release --bin chorus`) runs as its own process \
         ({instances} of them on one database when more than one; defaults: actix workers = \
         cores, pool 8, SQLite FULL; CHORUS_LOG=warn, CHORUS_LONGPOLL_MAX_TOTAL at least \
         20,000). {polls} users in {} groups of {IDLE_GROUP_SIZE}, each takes a `/v1/sync` \
         cursor, then each opens one `GET /v1/sync?cursor=…&timeout_s={IDLE_POLL_TIMEOUT_S}` \
         on its own TCP connection, user i to server i mod {instances} (raw HTTP/1.1 from \
         tokio tasks in child processes of the bench, up to {per_holder} each, each \
         with at most {IDLE_CONNECT_CONCURRENCY} connecting at once: a process holds only as \
         many sockets as its open-file limit). RSS is `VmRSS` of `/proc/<pid>/status`, \
         summed over the servers: before the polls, with all of them waiting once three \
         samples 500 ms apart agree within 1%, and again {} s after the opening began (the \
         same polls still waiting). Then one message goes to one group: the wake-up times of \
         its {IDLE_GROUP_SIZE} members' polls count from just before the send request.\n",
        polls / IDLE_GROUP_SIZE,
        IDLE_STEADY_AFTER.as_secs(),
    );
    for &engine in engines {
        eprintln!("== idle, {}", engine.title());
        if instances > 1 && engine == Engine::Sqlite {
            println!("SQLite: skipped: one SQLite database serves one process\n");
            continue;
        }
        match run::run_idle(engine, polls, instances).await {
            Ok(r) => report::print(&r),
            Err(skip) => println!("{}: skipped: {skip}\n", engine.title()),
        }
    }
}
