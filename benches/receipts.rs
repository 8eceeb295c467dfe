//! Receipts and long-poll benchmark (issue 3): the read-receipt storm of the design notes,
//! send and who-read cost against group size, 10,000 idle long-polls, and wake-ups across two
//! instances on one PostgreSQL database.
//!
//! ```sh
//! cargo bench --bench receipts -- [seed|group-size|idle|cross-instance|all] \
//!     [--engine sqlite|postgres|both] [--sqlite-sync full|normal]
//! ```
//!
//! `seed`, `group-size` and `cross-instance` run the real server in this process on 127.0.0.1
//! port 0 (clients and server share the machine's cores); `idle` starts the release binary as a
//! separate process so that its memory can be read from `/proc/<pid>/status`. Each engine run
//! gets a fresh database: a temporary SQLite file (`synchronous = FULL`, the default), or a
//! PostgreSQL database `chorus_bench_<random>` created from CHORUS_BENCH_DATABASE_URL (default
//! postgres://postgres@127.0.0.1:5432/postgres) and dropped afterwards. Everything is set up
//! and measured over HTTP. Every loop is bounded by a count and a wall-clock limit. Markdown
//! goes to stdout, progress to stderr.

#[path = "../tests/support/machine.rs"]
mod machine;
#[path = "../tests/support/scratch_pg.rs"]
mod scratch_pg;
use machine::Machine;
use scratch_pg::ScratchPg;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus::auth::TokenKeys;
use chorus::config::{Settings, SqliteSync};
use chorus::db::{self, AnyConnection, DbSettings};
use chorus::domain::UserId;
use chorus::schema::{group_members, group_msgs, receipt_events};
use chorus::startup::{Application, Stopper};
use diesel::prelude::*;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PG_URL_VAR: &str = "CHORUS_BENCH_DATABASE_URL";
const PG_DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const SECRET: &str = "receipts-bench-secret-receipts-bench-secret";
/// 100 bytes, the size of a typical chat line.
const CONTENT: &str =
    "The quick brown fox jumps over the lazy dog; lunch at noon? Bring the slides and the drafts, please!";
/// Long-polls in `seed` and `cross-instance` ask to wait this long (the documented default).
const POLL_TIMEOUT_S: u64 = 25;
/// Longer than any long-poll, so only a hung server trips it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);

// seed: the storm of the design notes.
const SEED_MEMBERS: usize = 200;
const SEED_ONLINE: usize = 40;
const SEED_MESSAGES: i64 = 200;
const SEED_PACE: Duration = Duration::from_millis(20);
const SEED_TIME_LIMIT: Duration = Duration::from_secs(120);
/// The seeds' design writes per message: the message, a row per other member, and an ack flag
/// update per online member.
const NAIVE_ROWS_PER_MESSAGE: usize = 1 + (SEED_MEMBERS - 1) + SEED_ONLINE;
/// PostgreSQL flushes a backend's table statistics at most every 10 s while it idles.
const PG_STATS_SETTLE: Duration = Duration::from_secs(11);

// group-size
const GS_SIZES: [usize; 3] = [2, 200, 2000];
const GS_OPS: usize = 500;
/// Operations per size are run in blocks, interleaving the sizes, so that a slow period of
/// the shared machine does not land on one size only.
const GS_BLOCK: usize = 100;
const GS_WARMUP: usize = 20;
const GS_BLOCK_TIME_LIMIT: Duration = Duration::from_secs(30);
const GS_RECEIPTS_LIMIT: usize = 200;

// idle
const IDLE_USERS: usize = 10_000;
const IDLE_GROUP_SIZE: usize = 100;
const IDLE_POLL_TIMEOUT_S: u64 = 60;
const IDLE_CONNECT_CONCURRENCY: usize = 200;
const IDLE_SETUP_CONCURRENCY: usize = 32;
const IDLE_OPEN_LIMIT: Duration = Duration::from_secs(40);
const IDLE_SETTLE_LIMIT: Duration = Duration::from_secs(15);
const IDLE_WAKE_LIMIT: Duration = Duration::from_secs(10);
/// The second RSS sample, this long after the last poll was opened (well within timeout_s).
const IDLE_STEADY_AFTER: Duration = Duration::from_secs(20);

// cross-instance
const X_MEMBERS: usize = 20;
const X_GROUPS: usize = 2;
const X_MESSAGES: i64 = 5;
/// After a wake-up is seen, let the sender's next poll park before the next ack, so each
/// sample measures a wake-up rather than a poll that finds the change on arrival.
const X_SETTLE: Duration = Duration::from_millis(5);
const X_WAIT: Duration = Duration::from_secs(5);
const X_TIME_LIMIT: Duration = Duration::from_secs(60);
const X_IMMEDIATE_POLLS: usize = 100;

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Seed,
    GroupSize,
    Idle,
    CrossInstance,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

/// Settings that differ from the production defaults only when asked for on the command
/// line, to find out what limits a run (never the defaults of a reported run).
#[derive(Debug, Clone, Copy)]
struct Tuning {
    /// SQLite durability for the in-process servers (`--sqlite-sync`), FULL by default.
    sqlite_sync: SqliteSync,
    /// Database connections per in-process server (`--pool-size`), 8 by default.
    pool_size: u32,
    /// `synchronous_commit = off` on the bench's PostgreSQL database (`--pg-async-commit`).
    pg_async_commit: bool,
}

const DEFAULT_TUNING: Tuning = Tuning {
    sqlite_sync: SqliteSync::Full,
    pool_size: 8,
    pg_async_commit: false,
};

static TUNING: std::sync::OnceLock<Tuning> = std::sync::OnceLock::new();

fn tuning() -> Tuning {
    *TUNING.get().unwrap_or(&DEFAULT_TUNING)
}

struct Args {
    scenarios: Vec<Scenario>,
    /// None: each scenario's default (both engines; SQLite only for `idle`).
    engines: Option<Vec<Engine>>,
}

const USAGE: &str = "usage: cargo bench --bench receipts -- \
     [seed|group-size|idle|cross-instance|all] [--engine sqlite|postgres|both] \
     [--sqlite-sync full|normal] [--pool-size N] [--pg-async-commit]";

fn parse_args() -> Result<Args, String> {
    let all = vec![
        Scenario::Seed,
        Scenario::GroupSize,
        Scenario::Idle,
        Scenario::CrossInstance,
    ];
    let mut scenarios = Vec::new();
    let mut engines = None;
    let mut tuning = DEFAULT_TUNING;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo bench appends --bench to a harness = false target.
            "--bench" => {}
            "--engine" => {
                engines = Some(match args.next().as_deref() {
                    Some("sqlite") => vec![Engine::Sqlite],
                    Some("postgres") => vec![Engine::Postgres],
                    Some("both") => vec![Engine::Sqlite, Engine::Postgres],
                    other => return Err(format!("unknown engine {other:?}")),
                })
            }
            "--sqlite-sync" => {
                tuning.sqlite_sync = match args.next().as_deref() {
                    Some("full") => SqliteSync::Full,
                    Some("normal") => SqliteSync::Normal,
                    other => return Err(format!("unknown SQLite sync {other:?}")),
                };
            }
            "--pool-size" => {
                tuning.pool_size = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--pool-size needs a positive number")?;
            }
            "--pg-async-commit" => tuning.pg_async_commit = true,
            "seed" => scenarios.push(Scenario::Seed),
            "group-size" => scenarios.push(Scenario::GroupSize),
            "idle" => scenarios.push(Scenario::Idle),
            "cross-instance" => scenarios.push(Scenario::CrossInstance),
            "all" => scenarios.extend(all.iter().copied()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if scenarios.is_empty() {
        scenarios = all;
    }
    TUNING.set(tuning).map_err(|_| "parse_args called twice")?;
    Ok(Args { scenarios, engines })
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

/// The name of the bench's own (client) runtime threads, to tell their CPU time apart from
/// the in-process server's (actix workers, and the blocking threads of database calls).
const CLIENT_THREAD_NAME: &str = "bench-client";

// Two client threads on a two-core machine: clients share the cores with the in-process
// server (two actix workers plus the database's blocking threads); the tables say so.
fn main() {
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
            Scenario::Seed => bench_seed(args.engines.as_ref().unwrap_or(&both)).await,
            Scenario::GroupSize => bench_group_size(args.engines.as_ref().unwrap_or(&both)).await,
            Scenario::Idle => {
                bench_idle(args.engines.as_ref().unwrap_or(&vec![Engine::Sqlite])).await
            }
            Scenario::CrossInstance => {
                bench_cross_instance(args.engines.as_ref().unwrap_or(&both)).await
            }
        }
    }
    println!(
        "_load average at the end: {}_",
        Machine::read().load_average
    );
}

// ---------------------------------------------------------------------------------------------
// Databases and in-process servers
// ---------------------------------------------------------------------------------------------

/// A database that exists for one run only.
enum BenchDb {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] ScratchPg),
}

impl BenchDb {
    /// Creates the database and returns it with its URL; Err says why the engine is skipped.
    fn create(engine: Engine) -> Result<(BenchDb, String), String> {
        if engine == Engine::Sqlite {
            // Under the system temp dir, which here is the same disk as PostgreSQL's data.
            let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
            let url = dir.path().join("chorus.sqlite3").display().to_string();
            return Ok((BenchDb::Sqlite(dir), url));
        }
        let admin_url = std::env::var(PG_URL_VAR).unwrap_or_else(|_| PG_DEFAULT_URL.into());
        let db = ScratchPg::create(&admin_url, "chorus_bench")
            .map_err(|e| format!("{e}; set {PG_URL_VAR}"))?;
        if tuning().pg_async_commit {
            let mut admin = diesel::PgConnection::establish(&admin_url)
                .map_err(|e| format!("cannot reconnect: {e}"))?;
            diesel::sql_query(format!(
                "ALTER DATABASE {} SET synchronous_commit = off",
                db.name()
            ))
            .execute(&mut admin)
            .map_err(|e| format!("cannot set synchronous_commit: {e}"))?;
        }
        let url = db.url();
        Ok((BenchDb::Postgres(db), url))
    }
}

fn bench_settings(database_url: &str, data_dir: &std::path::Path) -> Settings {
    let mut settings = Settings::defaults();
    settings.bind = "127.0.0.1:0".into();
    settings.database_url = Some(database_url.to_owned());
    settings.data_dir = data_dir.to_path_buf();
    settings.jwt_secret = Some(SECRET.into());
    // The production defaults (pool of 8, one actix worker per core, SQLite FULL) unless the
    // command line asks otherwise.
    settings.pool_size = tuning().pool_size;
    settings.workers = 0;
    settings.sqlite_sync = tuning().sqlite_sync;
    settings
}

/// One server instance in this process.
struct Server {
    http: Http,
    db_settings: DbSettings,
    stopper: Stopper,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _data_dir: tempfile::TempDir,
}

impl Server {
    async fn start(url: &str, requests: &Arc<AtomicU64>) -> Result<Server, String> {
        let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let settings = bench_settings(url, data_dir.path());
        let db_settings = settings.db_settings().map_err(|e| e.to_string())?;
        let app = Application::build(&settings)
            .await
            .map_err(|e| format!("server did not start: {e}"))?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let stopper = app.stopper();
        let task = tokio::spawn(app.run_until_stopped());
        Ok(Server {
            http: Http::new(base, requests.clone()),
            db_settings,
            stopper,
            task,
            _data_dir: data_dir,
        })
    }

    /// A connection of the bench's own, for counting rows.
    fn direct_connection(&self) -> AnyConnection {
        db::connect_once(&self.db_settings).expect("open a direct database connection")
    }

    /// Stops the server; waiting long-polls answer at once.
    async fn stop(self) {
        self.stopper.stop().await;
        let stopped = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        if !matches!(stopped, Ok(Ok(Ok(())))) {
            eprintln!("warning: the server did not stop cleanly: {stopped:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP and tokens
// ---------------------------------------------------------------------------------------------

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .expect("build HTTP client")
}

/// A client for one server on 127.0.0.1 that counts every request it makes.
#[derive(Clone)]
struct Http {
    client: reqwest::Client,
    base: String,
    requests: Arc<AtomicU64>,
}

impl Http {
    fn new(base: String, requests: Arc<AtomicU64>) -> Http {
        Http {
            client: http_client(),
            base,
            requests,
        }
    }

    /// Sends a request; Ok with the JSON body (Null when empty) when the status is one of
    /// `expect`, otherwise Err with a short label ("429 too_many_waiters", "transport: timeout").
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
        expect: &[u16],
    ) -> Result<Value, String> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(transport_label)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(transport_label)?;
        if !expect.contains(&status) {
            let code = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(format!("{status} {code}").trim().to_owned());
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| format!("bad body: {e}"))
    }

    async fn get(&self, path: &str, token: &str) -> Result<Value, String> {
        self.call(reqwest::Method::GET, path, token, None, &[200])
            .await
    }

    async fn post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        expect: &[u16],
    ) -> Result<Value, String> {
        self.call(reqwest::Method::POST, path, token, Some(body), expect)
            .await
    }

    /// Opens up to `n` keep-alive connections so measured requests do not pay for TCP set-up.
    async fn warm_up(&self, n: usize) {
        let url = format!("{}/healthz", self.base);
        let requests = (0..n).map(|_| self.client.get(&url).send());
        for response in futures::future::join_all(requests).await {
            response.expect("warm-up request to /healthz");
        }
    }
}

fn transport_label(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "other"
    };
    format!("transport: {kind}")
}

fn keys() -> TokenKeys {
    TokenKeys::new(SECRET.as_bytes(), false).expect("bench secret is valid")
}

fn token(keys: &TokenKeys, user: &str) -> String {
    let user = UserId::parse("user", user).expect("bench user ids are valid");
    keys.issue(&user, 4 * 3600).expect("sign bench token")
}

/// Creates a group owned by the token's user with `members` besides; ids go 1000 at a time
/// (the documented bound per request): the first 1000 with the create, the rest added after.
async fn create_group(
    http: &Http,
    owner_token: &str,
    name: &str,
    members: &[String],
) -> Result<i64, String> {
    let mut chunks = members.chunks(1000);
    let first = chunks.next().unwrap_or(&[]);
    let body = json!({"name": name, "member_ids": first});
    let created = http.post("/v1/groups", owner_token, &body, &[201]).await?;
    let group = created["group_id"]
        .as_i64()
        .ok_or("create group: no group_id")?;
    for chunk in chunks {
        let body = json!({ "user_ids": chunk });
        http.post(
            &format!("/v1/groups/{group}/members"),
            owner_token,
            &body,
            &[200],
        )
        .await?;
    }
    Ok(group)
}

async fn send_message(
    http: &Http,
    token: &str,
    group: i64,
    client_msg_id: &str,
) -> Result<i64, String> {
    let body = json!({"client_msg_id": client_msg_id, "content": CONTENT});
    let sent = http
        .post(
            &format!("/v1/groups/{group}/messages"),
            token,
            &body,
            &[201],
        )
        .await?;
    sent["msg_id"]
        .as_i64()
        .ok_or_else(|| "send: no msg_id".into())
}

/// The cursor of a long-poll feed ("/v1/sync" or "/v1/receipts") without waiting.
async fn feed_cursor(http: &Http, token: &str, feed: &str) -> Result<String, String> {
    let answer = http.get(feed, token).await?;
    answer["cursor"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{feed}: no cursor"))
}

// ---------------------------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------------------------

/// Failures by label.
#[derive(Default)]
struct Errors(Mutex<BTreeMap<String, u64>>);

impl Errors {
    fn add(&self, label: String) {
        *self.0.lock().unwrap().entry(label).or_default() += 1;
    }

    fn text(&self) -> String {
        let errors = self.0.lock().unwrap();
        if errors.is_empty() {
            return "none".into();
        }
        errors
            .iter()
            .map(|(label, n)| format!("{n}× {label}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Latency samples in milliseconds.
#[derive(Clone, Copy)]
struct Summary {
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Nearest rank.
    let at = |q: f64| {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    };
    Some(Summary {
        p50: at(0.50),
        p99: at(0.99),
        max: sorted[sorted.len() - 1],
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `b - a` in milliseconds, negative when b came first.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    if b >= a {
        ms(b - a)
    } else {
        -ms(a - b)
    }
}

fn f2(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

// ---------------------------------------------------------------------------------------------
// Who used the cores: CPU time of this process's threads and of the PostgreSQL backends
// ---------------------------------------------------------------------------------------------

/// A thread's or process's name and CPU ticks (user + system; USER_HZ is 100 in /proc's ABI).
fn stat_ticks(path: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((stat[open + 1..close].to_owned(), utime + stime))
}

const TICKS_PER_SEC: f64 = 100.0;

struct CpuSample {
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
fn backend_pids(conn: &mut AnyConnection) -> Vec<i32> {
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

fn cpu_sample(backends: &[i32]) -> CpuSample {
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
fn cpu_breakdown(before: &CpuSample, after: &CpuSample) -> [f64; 5] {
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

// ---------------------------------------------------------------------------------------------
// Scenario 1: seed — the storm of the design notes
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pacing {
    Paced,
    Unpaced,
}

impl Pacing {
    fn text(self) -> String {
        match self {
            Pacing::Paced => format!("one every {} ms", SEED_PACE.as_millis()),
            Pacing::Unpaced => "as fast as possible".into(),
        }
    }
}

/// One member's ack that moved its cursors over `(from, to]`, and when its response arrived.
struct AckRecord {
    from: i64,
    to: i64,
    at: Instant,
}

/// One answer of the sender's `/v1/receipts` poll: (msg_id, read_count) per change.
struct ReceiptAnswer {
    at: Instant,
    changes: Vec<(i64, i64)>,
}

#[derive(Default)]
struct RequestKinds {
    sends: AtomicU64,
    syncs: AtomicU64,
    pulls: AtomicU64,
    acks: AtomicU64,
    receipt_polls: AtomicU64,
}

#[derive(Default)]
struct SeedShared {
    acks: Mutex<Vec<AckRecord>>,
    answers: Mutex<Vec<ReceiptAnswer>>,
    errors: Errors,
    kinds: RequestKinds,
    members_done: AtomicUsize,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An online member: long-poll `/v1/sync`; on news pull the page after its own delivered
/// cursor and ack its last message. Stops once it has acked every message.
async fn storm_member(
    http: Http,
    token: String,
    group: i64,
    mut cursor: String,
    shared: Arc<SeedShared>,
    deadline: Instant,
) {
    let mut acked = 0i64;
    while acked < SEED_MESSAGES && Instant::now() < deadline {
        bump(&shared.kinds.syncs);
        let path = format!("/v1/sync?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
        let answer = match http.get(&path, &token).await {
            Ok(answer) => answer,
            Err(label) => {
                shared.errors.add(format!("sync: {label}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Some(next) = answer["cursor"].as_str() {
            cursor = next.to_owned();
        }
        let news = answer["groups"]
            .as_array()
            .is_some_and(|gs| gs.iter().any(|g| g["group_id"].as_i64() == Some(group)));
        if !news {
            continue;
        }
        // Pages until has_more is false; bounded in case of a bug.
        for _ in 0..=(SEED_MESSAGES as usize / 200 + 1) {
            bump(&shared.kinds.pulls);
            let page = match http
                .get(&format!("/v1/groups/{group}/messages?limit=200"), &token)
                .await
            {
                Ok(page) => page,
                Err(label) => {
                    shared.errors.add(format!("pull: {label}"));
                    break;
                }
            };
            let last = page["messages"]
                .as_array()
                .and_then(|ms| ms.last())
                .and_then(|m| m["msg_id"].as_i64());
            if let Some(last) = last.filter(|last| *last > acked) {
                bump(&shared.kinds.acks);
                let body = json!({ "last_ack_msg_id": last });
                match http
                    .post(&format!("/v1/groups/{group}/ack"), &token, &body, &[200])
                    .await
                {
                    Ok(_) => {
                        let at = Instant::now();
                        shared.acks.lock().unwrap().push(AckRecord {
                            from: acked,
                            to: last,
                            at,
                        });
                        acked = last;
                    }
                    Err(label) => shared.errors.add(format!("ack: {label}")),
                }
            }
            if page["has_more"] != Value::Bool(true) {
                break;
            }
        }
    }
    if acked >= SEED_MESSAGES {
        shared.members_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// The sender's `/v1/receipts` long-poll; stops once every message shows all online readers.
async fn storm_sender_poll(
    http: Http,
    token: String,
    mut cursor: String,
    shared: Arc<SeedShared>,
    deadline: Instant,
) {
    let mut max_read = vec![0i64; SEED_MESSAGES as usize + 1];
    let all_read = |max_read: &[i64]| max_read[1..].iter().all(|r| *r >= SEED_ONLINE as i64);
    while !all_read(&max_read) && Instant::now() < deadline {
        bump(&shared.kinds.receipt_polls);
        let path = format!("/v1/receipts?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
        let answer = match http.get(&path, &token).await {
            Ok(answer) => answer,
            Err(label) => {
                shared.errors.add(format!("receipts poll: {label}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let at = Instant::now();
        if let Some(next) = answer["cursor"].as_str() {
            cursor = next.to_owned();
        }
        let changes: Vec<(i64, i64)> = answer["changes"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| Some((c["msg_id"].as_i64()?, c["read_count"].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        for (msg, read) in &changes {
            if let Some(slot) = max_read.get_mut(*msg as usize) {
                *slot = (*slot).max(*read);
            }
        }
        shared
            .answers
            .lock()
            .unwrap()
            .push(ReceiptAnswer { at, changes });
    }
}

struct SendRun {
    latencies: Vec<f64>,
    started: Instant,
    finished: Instant,
}

async fn storm_sender_send(
    http: Http,
    token: String,
    group: i64,
    pacing: Pacing,
    shared: Arc<SeedShared>,
    deadline: Instant,
) -> SendRun {
    let started = Instant::now();
    let mut latencies = Vec::new();
    for i in 0..SEED_MESSAGES {
        if Instant::now() >= deadline {
            break;
        }
        if pacing == Pacing::Paced {
            tokio::time::sleep_until((started + SEED_PACE * i as u32).into()).await;
        }
        bump(&shared.kinds.sends);
        let t0 = Instant::now();
        match send_message(&http, &token, group, &format!("storm-{i}")).await {
            Ok(_) => latencies.push(ms(t0.elapsed())),
            Err(label) => shared.errors.add(format!("send: {label}")),
        }
    }
    SendRun {
        latencies,
        started,
        finished: Instant::now(),
    }
}

/// "ack → sender wake": for each ack, the time from its response reaching the member to the
/// first answer of the sender's poll whose read_count for the ack's last message counts it.
/// The k-th ack (by response time) covering message m is counted by the first answer showing
/// read_count(m) >= k. Returns the samples (negative when the sender heard first), and how
/// many acks were never reflected.
fn ack_to_wake(acks: &[AckRecord], answers: &[ReceiptAnswer]) -> (Vec<f64>, usize) {
    let mut order: Vec<&AckRecord> = acks.iter().collect();
    order.sort_by_key(|a| a.at);
    // msg -> how many acks (in response order) covered it so far.
    let mut covered: HashMap<i64, i64> = HashMap::new();
    let mut wanted: Vec<(i64, i64, Instant)> = Vec::new();
    for ack in &order {
        for msg in ack.from + 1..=ack.to {
            let k = covered.entry(msg).or_default();
            *k += 1;
            if msg == ack.to {
                wanted.push((msg, *k, ack.at));
            }
        }
    }
    // msg -> answers mentioning it, in arrival order: (at, read_count).
    let mut seen: HashMap<i64, Vec<(Instant, i64)>> = HashMap::new();
    for answer in answers {
        for (msg, read) in &answer.changes {
            seen.entry(*msg).or_default().push((answer.at, *read));
        }
    }
    let mut samples = Vec::new();
    let mut missed = 0;
    for (msg, k, acked_at) in wanted {
        let hit = seen
            .get(&msg)
            .and_then(|list| list.iter().find(|(_, read)| *read >= k));
        match hit {
            Some((at, _)) => samples.push(signed_ms(acked_at, *at)),
            None => missed += 1,
        }
    }
    (samples, missed)
}

/// Row counts of the tables a storm writes to.
#[derive(Clone, Copy, Default)]
struct RowCounts {
    msgs: i64,
    events: i64,
    members: i64,
}

fn row_counts(conn: &mut AnyConnection) -> RowCounts {
    RowCounts {
        msgs: group_msgs::table.count().get_result(conn).expect("count"),
        events: receipt_events::table
            .count()
            .get_result(conn)
            .expect("count"),
        members: group_members::table
            .count()
            .get_result(conn)
            .expect("count"),
    }
}

#[derive(QueryableByName)]
struct PgTableStat {
    #[diesel(sql_type = diesel::sql_types::Text)]
    relname: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    ins: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    upd: i64,
}

/// PostgreSQL's own counters of rows inserted and updated per table (None on SQLite).
fn pg_table_stats(conn: &mut AnyConnection) -> Option<BTreeMap<String, (i64, i64)>> {
    let AnyConnection::Postgresql(c) = conn else {
        return None;
    };
    let rows: Vec<PgTableStat> = diesel::sql_query(
        "SELECT relname::text AS relname, n_tup_ins AS ins, n_tup_upd AS upd \
         FROM pg_stat_user_tables \
         WHERE relname IN ('groups', 'group_members', 'group_msgs', 'receipt_events')",
    )
    .load(c)
    .ok()?;
    Some(
        rows.into_iter()
            .map(|r| (r.relname, (r.ins, r.upd)))
            .collect(),
    )
}

struct SeedResult {
    engine: Engine,
    pacing: Pacing,
    sends: usize,
    send_secs: f64,
    send: Option<Summary>,
    acks: usize,
    storm_secs: f64,
    wake: Option<Summary>,
    wake_early: usize,
    wake_missed: usize,
    requests: u64,
    kinds: [u64; 5],
    members_done: usize,
    rows: RowCounts,
    pg_rows: Option<BTreeMap<String, (i64, i64)>>,
    /// CPU seconds during the storm, as [`cpu_breakdown`] splits them, and its wall time.
    cpu: [f64; 5],
    wall: f64,
    errors: String,
}

async fn run_seed(engine: Engine, pacing: Pacing) -> Result<SeedResult, String> {
    let (db, url) = BenchDb::create(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let server = Server::start(&url, &requests).await?;
    let http = server.http.clone();
    let keys = keys();
    let owner_token = token(&keys, "storm-owner");
    let members: Vec<String> = (0..SEED_MEMBERS - 1)
        .map(|i| format!("storm-m{i:03}"))
        .collect();
    let group = create_group(&http, &owner_token, "storm", &members).await?;
    let mut online = Vec::new();
    for member in &members[..SEED_ONLINE] {
        let t = token(&keys, member);
        let cursor = feed_cursor(&http, &t, "/v1/sync").await?;
        online.push((t, cursor));
    }
    let sender_cursor = feed_cursor(&http, &owner_token, "/v1/receipts").await?;
    http.warm_up(2 * SEED_ONLINE + 2).await;

    let mut conn = server.direct_connection();
    let rows_before = row_counts(&mut conn);
    let pg_before = if engine == Engine::Postgres {
        eprintln!("seed: waiting for PostgreSQL's table statistics to settle");
        tokio::time::sleep(PG_STATS_SETTLE).await;
        pg_table_stats(&mut conn)
    } else {
        None
    };

    eprintln!("seed: {} storm, {}", engine.name(), pacing.text());
    let cpu_before = cpu_sample(&backend_pids(&mut conn));
    let cpu_started = Instant::now();
    requests.store(0, Ordering::Relaxed);
    let shared = Arc::new(SeedShared::default());
    let deadline = Instant::now() + SEED_TIME_LIMIT;
    let mut tasks = Vec::new();
    for (t, cursor) in online {
        tasks.push(tokio::spawn(storm_member(
            http.clone(),
            t,
            group,
            cursor,
            shared.clone(),
            deadline,
        )));
    }
    tasks.push(tokio::spawn(storm_sender_poll(
        http.clone(),
        owner_token.clone(),
        sender_cursor,
        shared.clone(),
        deadline,
    )));
    // Let every long-poll park before the first message.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sender = tokio::spawn(storm_sender_send(
        http.clone(),
        owner_token,
        group,
        pacing,
        shared.clone(),
        deadline,
    ));
    let send_run = sender.await.map_err(|e| format!("sender task: {e}"))?;
    for mut task in tasks {
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
        if tokio::time::timeout(left, &mut task).await.is_err() {
            task.abort();
            shared
                .errors
                .add("task still running at the time limit".into());
        }
    }
    let requests_made = requests.load(Ordering::Relaxed);
    let wall = cpu_started.elapsed().as_secs_f64();
    let cpu = cpu_breakdown(&cpu_before, &cpu_sample(&backend_pids(&mut conn)));
    let rows_after = row_counts(&mut conn);

    let acks = std::mem::take(&mut *shared.acks.lock().unwrap());
    let answers = std::mem::take(&mut *shared.answers.lock().unwrap());
    let (samples, missed) = ack_to_wake(&acks, &answers);
    let early = samples.iter().filter(|s| **s < 0.0).count();
    let clamped: Vec<f64> = samples.iter().map(|s| s.max(0.0)).collect();
    let last_ack = acks.iter().map(|a| a.at).max().unwrap_or(send_run.finished);
    let k = &shared.kinds;
    let pg_rows = if engine == Engine::Postgres {
        eprintln!("seed: waiting for PostgreSQL's table statistics to settle");
        tokio::time::sleep(PG_STATS_SETTLE).await;
        match (pg_before, pg_table_stats(&mut conn)) {
            (Some(before), Some(after)) => Some(
                after
                    .iter()
                    .map(|(t, (i, u))| {
                        let (bi, bu) = before.get(t).copied().unwrap_or((0, 0));
                        (t.clone(), (i - bi, u - bu))
                    })
                    .collect(),
            ),
            _ => None,
        }
    } else {
        None
    };
    drop(conn);
    server.stop().await;
    drop(db);
    Ok(SeedResult {
        engine,
        pacing,
        sends: send_run.latencies.len(),
        send_secs: (send_run.finished - send_run.started).as_secs_f64(),
        send: summarize(&send_run.latencies),
        acks: acks.len(),
        storm_secs: (last_ack.max(send_run.finished) - send_run.started).as_secs_f64(),
        wake: summarize(&clamped),
        wake_early: early,
        wake_missed: missed,
        requests: requests_made,
        kinds: [
            k.sends.load(Ordering::Relaxed),
            k.syncs.load(Ordering::Relaxed),
            k.pulls.load(Ordering::Relaxed),
            k.acks.load(Ordering::Relaxed),
            k.receipt_polls.load(Ordering::Relaxed),
        ],
        members_done: shared.members_done.load(Ordering::Relaxed),
        rows: RowCounts {
            msgs: rows_after.msgs - rows_before.msgs,
            events: rows_after.events - rows_before.events,
            members: rows_after.members - rows_before.members,
        },
        pg_rows,
        cpu,
        wall,
        errors: shared.errors.text(),
    })
}

async fn bench_seed(engines: &[Engine]) {
    println!("## seed: the read-receipt storm\n");
    println!(
        "One group of {SEED_MEMBERS} members; {SEED_ONLINE} of them online, each long-polling \
         `GET /v1/sync` (timeout_s={POLL_TIMEOUT_S}) and on news pulling \
         `GET /v1/groups/{{g}}/messages?limit=200` (no `after_msg_id`) and acking its last \
         `msg_id`; the sender long-polls `GET /v1/receipts` and sends {SEED_MESSAGES} \
         messages one after another. Server and all {} clients run in this one process on \
         the same cores. \"ack → sender wake\": from an ack's response reaching its member \
         to the sender's first poll answer whose `read_count` for that message counts it \
         (one sample per ack; negative gaps — the sender heard first — count as 0).\n",
        SEED_ONLINE + 1
    );
    let mut results = Vec::new();
    for &engine in engines {
        for pacing in [Pacing::Paced, Pacing::Unpaced] {
            match run_seed(engine, pacing).await {
                Ok(r) => results.push(r),
                Err(skip) => {
                    println!("{} ({}): skipped: {skip}\n", engine.name(), pacing.text());
                    break;
                }
            }
        }
    }
    if results.is_empty() {
        return;
    }
    println!(
        "| engine | sends | sent | sends/s | send p50 ms | acks | acks/s | ack→wake p50 ms | \
         p99 ms | max ms | sender first / missed | members done | errors |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    for r in &results {
        let wake = |f: fn(&Summary) -> f64| f2(r.wake.as_ref().map(f));
        println!(
            "| {} | {} | {}/{SEED_MESSAGES} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} / {} | {}/{SEED_ONLINE} | {} |",
            r.engine.name(),
            r.pacing.text(),
            r.sends,
            r.sends as f64 / r.send_secs.max(1e-9),
            f2(r.send.map(|s| s.p50)),
            r.acks,
            r.acks as f64 / r.storm_secs.max(1e-9),
            wake(|s| s.p50),
            wake(|s| s.p99),
            wake(|s| s.max),
            r.wake_early,
            r.wake_missed,
            r.members_done,
            r.errors,
        );
    }
    println!(
        "\nsends/s: messages over the time from the first send to the last send's response; \
         acks/s: acks that moved a cursor over the time from the first send to the last ack.\n"
    );
    println!("HTTP requests made by all clients during the storm, per message sent:\n");
    println!(
        "| engine | sends | total | per message | sends | `/v1/sync` polls | pulls | acks | `/v1/receipts` polls |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for r in &results {
        let n = r.sends.max(1) as f64;
        let per = |v: u64| format!("{:.2}", v as f64 / n);
        println!(
            "| {} | {} | {} | **{}** | {} | {} | {} | {} | {} |",
            r.engine.name(),
            r.pacing.text(),
            r.requests,
            per(r.requests),
            per(r.kinds[0]),
            per(r.kinds[1]),
            per(r.kinds[2]),
            per(r.kinds[3]),
            per(r.kinds[4]),
        );
    }
    println!(
        "\nDatabase rows written per message (row counts before and after the storm; an ack that \
         moves a cursor updates one membership row and inserts one `receipt_events` row, so \
         moved cursors = `receipt_events` growth):\n"
    );
    println!(
        "| engine | sends | `group_msgs` | `receipt_events` | membership rows updated by acks | \
         **total** | the seeds' design | PostgreSQL's own counters, all rows written |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|---|");
    for r in &results {
        let n = r.sends.max(1) as f64;
        let total = r.rows.msgs + 2 * r.rows.events;
        let pg = r.pg_rows.as_ref().map_or("–".into(), |rows| {
            let all: i64 = rows.values().map(|(i, u)| i + u).sum();
            let detail: Vec<String> = rows
                .iter()
                .map(|(t, (i, u))| format!("`{t}` +{i} ins / {u} upd"))
                .collect();
            format!("{:.1} per message ({})", all as f64 / n, detail.join(", "))
        });
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | **{:.2}** | {NAIVE_ROWS_PER_MESSAGE} | {pg} |",
            r.engine.name(),
            r.pacing.text(),
            r.rows.msgs as f64 / n,
            r.rows.events as f64 / n,
            r.rows.events as f64 / n,
            total as f64 / n,
        );
    }
    println!(
        "\nThe seeds' design: 1 message + {} per-recipient rows + {SEED_ONLINE} ack-flag updates \
         = {NAIVE_ROWS_PER_MESSAGE} rows per message. Besides the rows above, each send also \
         updates the group's `last_msg_id` and the sender's own cursors (in PostgreSQL's \
         counters). Membership rows added during the storm: {}.\n",
        SEED_MEMBERS - 1,
        results
            .iter()
            .map(|r| r.rows.members.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
    println!(
        "CPU seconds used during the storm (from just before the polls opened until every task ended), from \
         `/proc/self/task/*/stat` and the bench database's PostgreSQL backends; the machine \
         has {} cores, so at most {}× the wall time is available — to everything running on \
         it, other people's work included:\n",
        cores(),
        cores()
    );
    println!(
        "| engine | sends | wall s | clients | server HTTP workers | server database calls | \
         server other | PostgreSQL backends | sum / (cores × wall) |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for r in &results {
        let sum: f64 = r.cpu.iter().sum();
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% |",
            r.engine.name(),
            r.pacing.text(),
            r.wall,
            r.cpu[0],
            r.cpu[1],
            r.cpu[2],
            r.cpu[3],
            r.cpu[4],
            100.0 * sum / (cores() as f64 * r.wall.max(1e-9)),
        );
    }
    println!();
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: group-size — send and who-read cost against group size
// ---------------------------------------------------------------------------------------------

struct SizeResult {
    size: usize,
    send: Vec<f64>,
    send_secs: f64,
    receipts: Vec<f64>,
    receipts_secs: f64,
}

async fn run_group_size(engine: Engine, errors: &Errors) -> Result<Vec<SizeResult>, String> {
    let (db, url) = BenchDb::create(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let server = Server::start(&url, &requests).await?;
    let http = server.http.clone();
    let keys = keys();
    let mut groups = Vec::new();
    for size in GS_SIZES {
        let owner = format!("gs{size}-owner");
        let members: Vec<String> = (0..size - 1).map(|i| format!("gs{size}-m{i:04}")).collect();
        let t = token(&keys, &owner);
        let g = create_group(&http, &t, &format!("size {size}"), &members).await?;
        for i in 0..GS_WARMUP {
            send_message(&http, &t, g, &format!("warm-{i}")).await?;
        }
        let path = format!("/v1/groups/{g}/messages/1/receipts?limit={GS_RECEIPTS_LIMIT}");
        for _ in 0..GS_WARMUP {
            http.get(&path, &t).await?;
        }
        groups.push((size, g, t));
    }
    http.warm_up(1).await;
    let mut results: Vec<SizeResult> = GS_SIZES
        .iter()
        .map(|&size| SizeResult {
            size,
            send: Vec::new(),
            send_secs: 0.0,
            receipts: Vec::new(),
            receipts_secs: 0.0,
        })
        .collect();
    let rounds = GS_OPS / GS_BLOCK;
    for round in 0..rounds {
        for j in 0..GS_SIZES.len() {
            let k = (round + j) % GS_SIZES.len();
            let (size, g, t) = &groups[k];
            eprintln!(
                "group-size: {} sends, size {size}, round {}/{rounds}",
                engine.name(),
                round + 1
            );
            let start = Instant::now();
            for i in 0..GS_BLOCK {
                if start.elapsed() >= GS_BLOCK_TIME_LIMIT {
                    errors.add(format!("send block, size {size}: time limit"));
                    break;
                }
                let t0 = Instant::now();
                match send_message(&http, t, *g, &format!("gs-{round}-{i}")).await {
                    Ok(_) => results[k].send.push(ms(t0.elapsed())),
                    Err(label) => errors.add(format!("send, size {size}: {label}")),
                }
            }
            results[k].send_secs += start.elapsed().as_secs_f64();
        }
    }
    for round in 0..rounds {
        for j in 0..GS_SIZES.len() {
            let k = (round + j) % GS_SIZES.len();
            let (size, g, t) = &groups[k];
            let start = Instant::now();
            for i in 0..GS_BLOCK {
                if start.elapsed() >= GS_BLOCK_TIME_LIMIT {
                    errors.add(format!("receipts block, size {size}: time limit"));
                    break;
                }
                // Each of the measured messages in turn.
                let msg = GS_WARMUP + 1 + (round * GS_BLOCK + i) % GS_OPS;
                let path =
                    format!("/v1/groups/{g}/messages/{msg}/receipts?limit={GS_RECEIPTS_LIMIT}");
                let t0 = Instant::now();
                match http.get(&path, t).await {
                    Ok(_) => results[k].receipts.push(ms(t0.elapsed())),
                    Err(label) => errors.add(format!("receipts, size {size}: {label}")),
                }
            }
            results[k].receipts_secs += start.elapsed().as_secs_f64();
        }
    }
    server.stop().await;
    drop(db);
    Ok(results)
}

async fn bench_group_size(engines: &[Engine]) {
    println!("## group-size: send and who-read cost against group size\n");
    println!(
        "Groups of {:?} members (created with `POST /v1/groups`, at most 1000 ids per request, \
         the rest with `POST /v1/groups/{{g}}/members`). Per size, one client sends {GS_OPS} \
         messages one after another, then makes {GS_OPS} \
         `GET /v1/groups/{{g}}/messages/{{m}}/receipts?limit={GS_RECEIPTS_LIMIT}` as the sender \
         (over the {GS_OPS} messages it sent). The sizes take turns in blocks of {GS_BLOCK} \
         so that a slow moment of the shared machine does not fall on one size only; \
         {GS_WARMUP} sends and reads per size before measuring are not counted. Server and \
         client in one process.\n",
        GS_SIZES
    );
    for &engine in engines {
        let errors = Errors::default();
        let results = match run_group_size(engine, &errors).await {
            Ok(results) => results,
            Err(skip) => {
                println!("{}: skipped: {skip}\n", engine.name());
                continue;
            }
        };
        println!("### {}\n", engine.name());
        println!(
            "| members | sends | send p50 ms | send mean ms | send p99 ms | sends/s | who-read reads | who-read p50 ms | who-read mean ms | who-read p99 ms |"
        );
        println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        let mut summaries = Vec::new();
        for r in &results {
            let send = summarize(&r.send);
            let reads = summarize(&r.receipts);
            println!(
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
                r.size,
                r.send.len(),
                f2(send.map(|s| s.p50)),
                f2(send.map(|s| s.mean)),
                f2(send.map(|s| s.p99)),
                r.send.len() as f64 / r.send_secs.max(1e-9),
                r.receipts.len(),
                f2(reads.map(|s| s.p50)),
                f2(reads.map(|s| s.mean)),
                f2(reads.map(|s| s.p99)),
            );
            summaries.push((send, reads));
        }
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "–".into(),
        };
        let (small, large) = (&summaries[0], &summaries[summaries.len() - 1]);
        println!(
            "| **ratio {}/{}** | | {} | {} | | | | {} | {} | |",
            GS_SIZES[GS_SIZES.len() - 1],
            GS_SIZES[0],
            ratio(large.0.map(|s| s.p50), small.0.map(|s| s.p50)),
            ratio(large.0.map(|s| s.mean), small.0.map(|s| s.mean)),
            ratio(large.1.map(|s| s.p50), small.1.map(|s| s.p50)),
            ratio(large.1.map(|s| s.mean), small.1.map(|s| s.mean)),
        );
        println!("\nErrors: {}.\n", errors.text());
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: idle — 10,000 waiting long-polls against the release binary
// ---------------------------------------------------------------------------------------------

/// `$CARGO_TARGET_DIR/release`, found from this bench's own path (`…/release/deps/receipts-…`).
fn release_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .ok_or_else(|| format!("cannot find the target directory from {}", exe.display()))
}

/// Builds the release server binary into the same target directory and returns its path.
fn build_server_binary() -> Result<PathBuf, String> {
    let release = release_dir()?;
    let target = release.parent().ok_or("no target directory")?.to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "idle: cargo build --release --bin chorus (CARGO_TARGET_DIR={})",
        target.display()
    );
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--bin", "chorus"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build --release --bin chorus: {status}"));
    }
    let binary = release.join("chorus");
    binary
        .exists()
        .then_some(binary.clone())
        .ok_or_else(|| format!("{} does not exist after the build", binary.display()))
}

/// The server as a child process, killed when dropped.
struct ServerProcess {
    child: std::process::Child,
    log: PathBuf,
}

impl ServerProcess {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// A process's resident memory in KiB, from `/proc/<pid>/status`.
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
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

fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:").unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// What one raw long-poll got: its user's index, when the answer arrived, and its status
/// (or the error).
struct PollAnswer {
    user: usize,
    at: Instant,
    status: Result<u16, String>,
}

/// One long-poll over its own TCP connection: connect, write the request (bounded by the
/// connect semaphore), then wait for the whole answer.
async fn raw_poll(
    port: u16,
    request: String,
    permits: Arc<tokio::sync::Semaphore>,
    opened: Arc<AtomicUsize>,
) -> Result<u16, String> {
    let permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    drop(request);
    drop(permit);
    opened.fetch_add(1, Ordering::Relaxed);
    let limit = Duration::from_secs(IDLE_POLL_TIMEOUT_S + 15);
    let mut buf = Vec::with_capacity(512);
    let answer = tokio::time::timeout(limit, async {
        loop {
            if let Some(status) = complete_response(&buf) {
                return Ok(status);
            }
            let mut chunk = [0u8; 1024];
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return parse_status(&buf).ok_or_else(|| "closed without an answer".to_owned());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    answer.unwrap_or_else(|_| Err("no answer in time".into()))
}

fn parse_status(buf: &[u8]) -> Option<u16> {
    let line = buf.split(|b| *b == b'\r').next()?;
    std::str::from_utf8(line)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// The status once the head and a `content-length` body have arrived.
fn complete_response(buf: &[u8]) -> Option<u16> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    (buf.len() >= head_end + length).then(|| parse_status(buf))?
}

struct IdleResult {
    engine: Engine,
    rss_start: u64,
    rss_before: u64,
    rss_waiting: u64,
    rss_steady: u64,
    steady_secs: f64,
    /// Before the polls, once the RSS settled, and at the steady-state sample.
    threads: [u64; 3],
    hwm: u64,
    client_rss_growth: u64,
    opened: usize,
    open_secs: f64,
    early: Vec<String>,
    send_ms: f64,
    wake: Vec<f64>,
    others_woken: usize,
    errors: String,
}

async fn run_idle(engine: Engine) -> Result<IdleResult, String> {
    let binary = build_server_binary()?;
    let (db, database_url) = match engine {
        Engine::Postgres => {
            let (db, url) = BenchDb::create(engine)?;
            (Some(db), Some(url))
        }
        Engine::Sqlite => (None, None),
    };
    let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let port = free_port()?;
    let log = data_dir.path().join("server.log");
    let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let mut command = std::process::Command::new(&binary);
    for (name, _) in std::env::vars() {
        if name.starts_with("CHORUS_") {
            command.env_remove(name);
        }
    }
    command
        .env("CHORUS_BIND", format!("127.0.0.1:{port}"))
        .env("CHORUS_DATA_DIR", data_dir.path())
        .env("CHORUS_JWT_SECRET", SECRET)
        .env("CHORUS_LONGPOLL_MAX_TOTAL", "20000")
        .env("CHORUS_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log_file);
    if let Some(url) = &database_url {
        command.env("CHORUS_DATABASE_URL", url);
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let server = ServerProcess { child, log };
    let pid = server.pid();
    let requests = Arc::new(AtomicU64::new(0));
    let http = Http::new(format!("http://127.0.0.1:{port}"), requests);
    let up = Instant::now();
    loop {
        if http
            .client
            .get(format!("{}/healthz", http.base))
            .send()
            .await
            .is_ok()
        {
            break;
        }
        if up.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "the server did not answer /healthz in 30 s:\n{}",
                server.log_tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_start = rss_kib(pid);

    eprintln!("idle: {IDLE_USERS} users in groups of {IDLE_GROUP_SIZE}");
    let keys = keys();
    let users: Vec<String> = (0..IDLE_USERS).map(|i| format!("idle{i:05}")).collect();
    let tokens: Arc<Vec<String>> = Arc::new(users.iter().map(|u| token(&keys, u)).collect());
    let groups: Vec<Result<i64, String>> = stream::iter(0..IDLE_USERS / IDLE_GROUP_SIZE)
        .map(|g| {
            let (http, tokens, users) = (http.clone(), tokens.clone(), &users);
            async move {
                let first = g * IDLE_GROUP_SIZE;
                let members = &users[first + 1..first + IDLE_GROUP_SIZE];
                create_group(&http, &tokens[first], &format!("idle {g}"), members).await
            }
        })
        .buffered(4)
        .collect()
        .await;
    let groups: Vec<i64> = groups.into_iter().collect::<Result<_, _>>()?;
    eprintln!("idle: a /v1/sync cursor per user");
    let cursors: Vec<Result<String, String>> = stream::iter(0..IDLE_USERS)
        .map(|i| {
            let (http, tokens) = (http.clone(), tokens.clone());
            async move { feed_cursor(&http, &tokens[i], "/v1/sync").await }
        })
        .buffered(IDLE_SETUP_CONCURRENCY)
        .collect()
        .await;
    let cursors: Vec<String> = cursors.into_iter().collect::<Result<_, _>>()?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kib(pid);
    let threads_before = proc_status_kib(pid, "Threads:").unwrap_or(0);
    let client_rss_before = rss_kib(std::process::id());

    eprintln!("idle: opening {IDLE_USERS} long-polls");
    let permits = Arc::new(tokio::sync::Semaphore::new(IDLE_CONNECT_CONCURRENCY));
    let opened = Arc::new(AtomicUsize::new(0));
    let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel::<PollAnswer>();
    let open_start = Instant::now();
    let mut polls = Vec::with_capacity(IDLE_USERS);
    for (user, cursor) in cursors.iter().enumerate() {
        let request = format!(
            "GET /v1/sync?cursor={cursor}&timeout_s={IDLE_POLL_TIMEOUT_S} HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            tokens[user]
        );
        let (permits, opened, tx) = (permits.clone(), opened.clone(), answers_tx.clone());
        polls.push(tokio::spawn(async move {
            let status = raw_poll(port, request, permits, opened).await;
            let _ = tx.send(PollAnswer {
                user,
                at: Instant::now(),
                status,
            });
        }));
    }
    drop(answers_tx);
    while opened.load(Ordering::Relaxed) < IDLE_USERS && open_start.elapsed() < IDLE_OPEN_LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open_secs = open_start.elapsed().as_secs_f64();
    let opened_count = opened.load(Ordering::Relaxed);

    // Wait for the server's memory to settle: three samples 500 ms apart within 1%.
    eprintln!("idle: {opened_count} requests written; waiting for the server's RSS to settle");
    let settle_start = Instant::now();
    let mut samples: Vec<u64> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        samples.push(rss_kib(pid));
        let last3 = &samples[samples.len().saturating_sub(3)..];
        let (lo, hi) = (
            *last3.iter().min().unwrap_or(&0),
            *last3.iter().max().unwrap_or(&0),
        );
        let settled = last3.len() == 3 && (hi - lo) * 100 <= hi;
        if (settled && settle_start.elapsed() >= Duration::from_secs(2))
            || settle_start.elapsed() >= IDLE_SETTLE_LIMIT
        {
            break;
        }
    }
    let rss_waiting = rss_kib(pid);
    let threads_waiting = proc_status_kib(pid, "Threads:").unwrap_or(0);
    // Threads tokio started for the burst of database reads idle out after 10 s; a later
    // sample shows the steady state of the same waiting polls.
    let steady_at = open_start + Duration::from_secs(open_secs as u64) + IDLE_STEADY_AFTER;
    tokio::time::sleep_until(steady_at.into()).await;
    let rss_steady = rss_kib(pid);
    let threads_steady = proc_status_kib(pid, "Threads:").unwrap_or(0);
    let steady_secs = steady_at.duration_since(open_start).as_secs_f64();
    let hwm = proc_status_kib(pid, "VmHWM:").unwrap_or(0);
    let client_rss_growth = rss_kib(std::process::id()).saturating_sub(client_rss_before);
    let errors = Errors::default();
    let mut early = Vec::new();
    while let Ok(answer) = answers.try_recv() {
        let what = match &answer.status {
            Ok(status) => format!("{status}"),
            Err(e) => e.clone(),
        };
        early.push(format!("user {}: {what}", answer.user));
    }

    eprintln!("idle: one message to group 1; timing its members' polls");
    let woken_users = 0..IDLE_GROUP_SIZE;
    let t0 = Instant::now();
    let send = send_message(&http, &tokens[0], groups[0], "idle-wake").await;
    let send_ms = ms(t0.elapsed());
    if let Err(label) = send {
        errors.add(format!("send: {label}"));
    }
    let mut wake = Vec::new();
    let mut others_woken = 0;
    let wake_deadline = t0 + IDLE_WAKE_LIMIT;
    while wake.len() < IDLE_GROUP_SIZE {
        let left = wake_deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, answers.recv()).await {
            Ok(Some(answer)) => {
                if let Err(e) = &answer.status {
                    errors.add(format!("poll: {e}"));
                } else if answer.status != Ok(200) {
                    errors.add(format!("poll: {:?}", answer.status));
                }
                if woken_users.contains(&answer.user) {
                    wake.push(signed_ms(t0, answer.at));
                } else {
                    others_woken += 1;
                }
            }
            _ => break,
        }
    }
    // Anything else that answers shortly after was woken by mistake.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(answer) = answers.try_recv() {
        if woken_users.contains(&answer.user) {
            wake.push(signed_ms(t0, answer.at));
        } else {
            others_woken += 1;
        }
    }
    eprintln!("idle: stopping the server");
    drop(server);
    for poll in &polls {
        poll.abort();
    }
    drop(db);
    Ok(IdleResult {
        engine,
        rss_start,
        rss_before,
        rss_waiting,
        rss_steady,
        steady_secs,
        threads: [threads_before, threads_waiting, threads_steady],
        hwm,
        client_rss_growth,
        opened: opened_count,
        open_secs,
        early,
        send_ms,
        wake,
        others_woken,
        errors: errors.text(),
    })
}

async fn bench_idle(engines: &[Engine]) {
    println!("## idle: {IDLE_USERS} concurrent idle long-polls\n");
    println!(
        "The release binary (`cargo build --release --bin chorus`) runs as its own process \
         (defaults: actix workers = cores, pool 8, SQLite FULL; CHORUS_LONGPOLL_MAX_TOTAL=20000, \
         CHORUS_LOG=warn). {IDLE_USERS} users in {} groups of {IDLE_GROUP_SIZE}, each takes a \
         `/v1/sync` cursor, then each opens one `GET /v1/sync?cursor=…&timeout_s=\
         {IDLE_POLL_TIMEOUT_S}` on its own TCP connection (raw HTTP/1.1 from tokio tasks in \
         the bench process, at most {IDLE_CONNECT_CONCURRENCY} connecting at once). RSS is \
         `VmRSS` of `/proc/<pid>/status`: before the polls, with all of them waiting once \
         three samples 500 ms apart agree within 1%, and again {} s after the opening began \
         (the same polls still waiting). Then one message goes to one group: \
         the wake-up times of its {IDLE_GROUP_SIZE} members' polls count from just before \
         the send request.\n",
        IDLE_USERS / IDLE_GROUP_SIZE,
        IDLE_STEADY_AFTER.as_secs(),
    );
    for &engine in engines {
        eprintln!("== idle, {}", engine.name());
        let r = match run_idle(engine).await {
            Ok(r) => r,
            Err(skip) => {
                println!("{}: skipped: {skip}\n", engine.name());
                continue;
            }
        };
        let growth = r.rss_waiting.saturating_sub(r.rss_before);
        let wake = summarize(&r.wake.iter().map(|w| w.max(0.0)).collect::<Vec<_>>());
        let first = r.wake.iter().copied().reduce(f64::min);
        println!("### {}\n", r.engine.name());
        println!("| measure | value |");
        println!("|---|--:|");
        println!("| server RSS at start | {:.1} MiB |", mib(r.rss_start));
        println!(
            "| server RSS after set-up, before the polls | {:.1} MiB |",
            mib(r.rss_before)
        );
        println!(
            "| server RSS with {} polls waiting | **{:.1} MiB** |",
            r.opened,
            mib(r.rss_waiting)
        );
        println!(
            "| server RSS with the same polls waiting, {:.0} s after opening began | **{:.1} MiB** |",
            r.steady_secs,
            mib(r.rss_steady)
        );
        println!("| server peak RSS (VmHWM) | {:.1} MiB |", mib(r.hwm));
        let steady_growth = r.rss_steady.saturating_sub(r.rss_before);
        println!(
            "| growth per waiting poll (settled / later) | {:.1} / {:.1} KiB |",
            growth as f64 / r.opened.max(1) as f64,
            steady_growth as f64 / r.opened.max(1) as f64
        );
        println!(
            "| server threads (before / settled / later) | {} / {} / {} |",
            r.threads[0], r.threads[1], r.threads[2]
        );
        println!(
            "| time to open all polls | {:.1} s ({} of {IDLE_USERS} written) |",
            r.open_secs, r.opened
        );
        println!(
            "| polls answered before the message (should be 0) | {} |",
            r.early.len()
        );
        println!("| send (HTTP) | {:.2} ms |", r.send_ms);
        println!(
            "| group's polls answered | {} of {IDLE_GROUP_SIZE} |",
            r.wake.len()
        );
        println!("| first answer after the send began | {} ms |", f2(first));
        println!(
            "| wake p50 / max over the group | {} / {} ms |",
            f2(wake.map(|s| s.p50)),
            f2(wake.map(|s| s.max))
        );
        println!(
            "| other polls answered meanwhile (should be 0) | {} |",
            r.others_woken
        );
        println!(
            "| bench process (client) RSS growth for the polls | {:.1} MiB |",
            mib(r.client_rss_growth)
        );
        println!("| errors | {} |", r.errors);
        println!();
        if !r.early.is_empty() {
            let shown: Vec<&str> = r.early.iter().take(5).map(String::as_str).collect();
            println!("Early answers (first 5): {}.\n", shown.join("; "));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: cross-instance — an ack on one instance wakes a poll on another
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Topology {
    OneInstance,
    TwoInstances,
}

struct WakeResult {
    engine: Engine,
    topology: Topology,
    ack_http: Vec<f64>,
    /// `GET /v1/receipts` with changes already there: the read a woken poll makes.
    immediate: Vec<f64>,
    wake: Vec<f64>,
    missed: usize,
    errors: String,
}

/// (group, msg) -> read_count, one answer of the sender's poll.
type Changes = Vec<((i64, i64), i64)>;

async fn run_wake_loop(engine: Engine, topology: Topology) -> Result<WakeResult, String> {
    let (db, url) = BenchDb::create(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let a = Server::start(&url, &requests).await?;
    let b = match topology {
        Topology::TwoInstances => Some(Server::start(&url, &requests).await?),
        Topology::OneInstance => None,
    };
    let ack_http = b.as_ref().map_or(a.http.clone(), |b| b.http.clone());
    let keys = keys();
    let sender = token(&keys, "x-sender");
    let members: Vec<String> = (0..X_MEMBERS).map(|i| format!("x-m{i:02}")).collect();
    let member_tokens: Vec<String> = members.iter().map(|m| token(&keys, m)).collect();
    let mut groups = Vec::new();
    for g in 0..X_GROUPS {
        let group = create_group(&a.http, &sender, &format!("x {g}"), &members).await?;
        for m in 0..X_MESSAGES {
            send_message(&a.http, &sender, group, &format!("x-{g}-{m}")).await?;
        }
        groups.push(group);
    }
    let mut cursor = feed_cursor(&a.http, &sender, "/v1/receipts").await?;
    let first_cursor = cursor.clone();
    ack_http.warm_up(2).await;

    let errors = Arc::new(Errors::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Changes)>();
    let poller = {
        let (http, errors, stop) = (a.http.clone(), errors.clone(), stop.clone());
        let deadline = Instant::now() + X_TIME_LIMIT;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let path =
                    format!("/v1/receipts?cursor={cursor}&timeout_s={POLL_TIMEOUT_S}&limit=200");
                let answer = match http.get(&path, &sender).await {
                    Ok(answer) => answer,
                    Err(label) => {
                        errors.add(format!("receipts poll: {label}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let at = Instant::now();
                if let Some(next) = answer["cursor"].as_str() {
                    cursor = next.to_owned();
                }
                let changes: Changes = answer["changes"]
                    .as_array()
                    .map(|cs| {
                        cs.iter()
                            .filter_map(|c| {
                                let key = (c["group_id"].as_i64()?, c["msg_id"].as_i64()?);
                                Some((key, c["read_count"].as_i64()?))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if tx.send((at, changes)).is_err() {
                    return;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    eprintln!(
        "cross-instance: {} acks, {:?}, {}",
        X_GROUPS * X_MESSAGES as usize * X_MEMBERS,
        topology,
        engine.name()
    );
    let deadline = Instant::now() + X_TIME_LIMIT;
    let mut ack_latencies = Vec::new();
    let mut wake = Vec::new();
    let mut missed = 0;
    'all: for &group in &groups {
        for msg in 1..=X_MESSAGES {
            for (i, member) in member_tokens.iter().enumerate() {
                if Instant::now() >= deadline {
                    errors.add("time limit".into());
                    break 'all;
                }
                let t0 = Instant::now();
                let body = json!({ "last_ack_msg_id": msg });
                let acked = ack_http
                    .post(&format!("/v1/groups/{group}/ack"), member, &body, &[200])
                    .await;
                let acked_at = Instant::now();
                if let Err(label) = acked {
                    errors.add(format!("ack: {label}"));
                    continue;
                }
                ack_latencies.push(ms(acked_at - t0));
                let expected = i as i64 + 1;
                let found = tokio::time::timeout(X_WAIT, async {
                    while let Some((at, changes)) = rx.recv().await {
                        let hit = changes
                            .iter()
                            .any(|(key, read)| *key == (group, msg) && *read >= expected);
                        if hit {
                            return Some(at);
                        }
                    }
                    None
                })
                .await;
                match found {
                    Ok(Some(at)) => wake.push(signed_ms(acked_at, at)),
                    _ => missed += 1,
                }
                tokio::time::sleep(X_SETTLE).await;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    poller.abort();
    // What a woken poll does, without the wait: answer at once from a cursor with changes
    // behind it (every message of both groups).
    let mut immediate = Vec::new();
    let path = format!("/v1/receipts?cursor={first_cursor}&timeout_s=0&limit=200");
    let sender = token(&keys, "x-sender");
    for _ in 0..X_IMMEDIATE_POLLS {
        let t0 = Instant::now();
        match a.http.get(&path, &sender).await {
            Ok(_) => immediate.push(ms(t0.elapsed())),
            Err(label) => errors.add(format!("immediate poll: {label}")),
        }
    }
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
    drop(db);
    let errors = errors.text();
    Ok(WakeResult {
        engine,
        topology,
        ack_http: ack_latencies,
        immediate,
        wake,
        missed,
        errors,
    })
}

async fn bench_cross_instance(engines: &[Engine]) {
    println!("## cross-instance: an ack on one instance wakes the sender's poll on another\n");
    let acks = X_GROUPS * X_MESSAGES as usize * X_MEMBERS;
    println!(
        "{X_GROUPS} groups of a sender and {X_MEMBERS} members; the sender sent {X_MESSAGES} \
         messages to each. The sender long-polls `GET /v1/receipts` on instance A; the members \
         ack one message at a time, one after another ({acks} acks, each moving a cursor), on \
         instance B — a second `Application` in this process on the same PostgreSQL database, \
         woken through LISTEN/NOTIFY. Each ack waits until the sender's poll answered with it, \
         then {} ms more so the next poll is parked. The latency is from the ack's response \
         reaching the member to the sender's poll answer that counts it (negative gaps count \
         as 0). The same loop with one instance (acks on A too) is the in-process baseline.\n",
        X_SETTLE.as_millis()
    );
    let mut runs = Vec::new();
    for &engine in engines {
        runs.push((engine, Topology::OneInstance));
        if engine == Engine::Postgres {
            runs.push((engine, Topology::TwoInstances));
        }
    }
    let mut results = Vec::new();
    for (engine, topology) in runs {
        match run_wake_loop(engine, topology).await {
            Ok(r) => results.push(r),
            Err(skip) => println!("{} {topology:?}: skipped: {skip}\n", engine.name()),
        }
    }
    if results.is_empty() {
        return;
    }
    println!(
        "| engine | poll on / ack on | acks | ack HTTP p50 ms | ack→wake p50 ms | p99 ms | max ms | mean ms | sender first | missed | immediate poll p50 / p99 ms | errors |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    let mut p99s = HashMap::new();
    for r in &results {
        let clamped: Vec<f64> = r.wake.iter().map(|w| w.max(0.0)).collect();
        let wake = summarize(&clamped);
        let http = summarize(&r.ack_http);
        let immediate = summarize(&r.immediate);
        let early = r.wake.iter().filter(|w| **w < 0.0).count();
        let topology = match r.topology {
            Topology::OneInstance => "A / A (one instance)",
            Topology::TwoInstances => "A / B (two instances)",
        };
        if let Some(w) = wake {
            p99s.insert((r.engine, r.topology), w.p99);
        }
        println!(
            "| {} | {topology} | {} | {} | {} | {} | {} | {} | {early} | {} | {} / {} | {} |",
            r.engine.name(),
            r.ack_http.len(),
            f2(http.map(|s| s.p50)),
            f2(wake.map(|s| s.p50)),
            f2(wake.map(|s| s.p99)),
            f2(wake.map(|s| s.max)),
            f2(wake.map(|s| s.mean)),
            r.missed,
            f2(immediate.map(|s| s.p50)),
            f2(immediate.map(|s| s.p99)),
            r.errors,
        );
    }
    if let (Some(one), Some(two)) = (
        p99s.get(&(Engine::Postgres, Topology::OneInstance)),
        p99s.get(&(Engine::Postgres, Topology::TwoInstances)),
    ) {
        println!(
            "\nPostgreSQL p99, two instances / one instance: {:.2}×.",
            two / one.max(1e-9)
        );
    }
    println!(
        "\nImmediate poll: {X_IMMEDIATE_POLLS}× `GET /v1/receipts?timeout_s=0` on A from the \
         cursor taken before the acks (all {} messages changed behind it): the database read \
         and HTTP round trip a woken poll makes, without any waiting.",
        X_GROUPS * X_MESSAGES as usize
    );
    println!();
}

// ---------------------------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------------------------

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
