//! Load benchmark: the real Chorus server, in process on 127.0.0.1 port 0, driven over HTTP.
//!
//! ```sh
//! cargo bench --bench load -- [core|send|pull|ack|storage] [--engine sqlite|postgres|both]
//! ```
//!
//! Each engine gets a fresh database (a temporary SQLite file, or a PostgreSQL database
//! `chorus_bench_<random>` created from CHORUS_BENCH_DATABASE_URL and dropped afterwards) and
//! its own server. SQLite runs twice, with `synchronous = FULL` (the default) and `NORMAL`.
//! Fixtures (groups, and the messages that pulls and acks need) are seeded through the db
//! layer (`chorus::db::groups::create_group`, `chorus::db::messages::send`) on one direct
//! connection, because seeding 20,000 messages over HTTP would take longer than the runs;
//! everything measured goes through HTTP. Every load loop is bounded by a count and by
//! [`TIME_LIMIT`]. Markdown goes to stdout, progress to stderr.

#[path = "../tests/support/machine.rs"]
mod machine;
#[path = "../tests/support/scratch_pg.rs"]
mod scratch_pg;
use machine::Machine;
use scratch_pg::ScratchPg;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus::auth::TokenKeys;
use chorus::config::{Settings, SqliteSync};
use chorus::db::messages::SendOutcome;
use chorus::db::{self, AnyConnection, DbSettings};
use chorus::domain::UserId;
use chorus::schema::{group_members, group_msgs, groups};
use chorus::startup::{Application, Stopper};
// Seeding writes straight through the db layer, outside any server: it wakes no one.
use chorus::wake::Wakes;
use diesel::prelude::*;
use futures::future::join_all;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const PG_URL_VAR: &str = "CHORUS_BENCH_DATABASE_URL";
const PG_DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const SECRET: &str = "bench-secret-bench-secret-bench-secret-0123";

/// Every load loop stops at its count or at this wall-clock limit, whichever comes first.
const TIME_LIMIT: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONCURRENCY: [usize; 2] = [1, 32];

const SENDS_PER_RUN: usize = 3000;
const SEND_GROUP_MEMBERS: usize = 50;
const PULL_GROUP_MESSAGES: usize = 20_000;
const PULL_PAGE_LIMIT: usize = 200;
const RANDOM_PULLS_PER_RUN: usize = 3000;
const RANDOM_PULL_LIMIT: usize = 50;
const ACKS_PER_RUN: usize = 3000;
const BATCH_ACK_GROUPS: usize = 20;
const BATCH_ACK_REQUESTS_PER_RUN: usize = 300;
/// Requests per kind in the storage probe, each one diffed on its own.
const PROBE_OPS: usize = 20;
/// Messages per seeding transaction: enough that seeding is not bound by one flush per
/// message. (On PostgreSQL 100 beat 1000: 1.3 vs 2.4 ms per message over the first 2000.)
const SEED_BATCH: usize = 100;
/// The chat list: one user in this many groups, each with a few messages.
const CHAT_LIST_GROUPS: usize = 500;
const CHAT_LIST_MESSAGES_PER_GROUP: usize = 3;
const CHAT_LIST_REQUESTS_PER_RUN: usize = 1000;
/// 100 bytes, the size of a typical chat line.
const CONTENT: &str =
    "The quick brown fox jumps over the lazy dog; lunch at noon? Bring the slides and the drafts, please!";

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Core,
    Send,
    Pull,
    Ack,
    Storage,
    ChatList,
}

impl Scenario {
    fn includes(self, part: Scenario) -> bool {
        self == Scenario::Core || self == part
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    SqliteFull,
    SqliteNormal,
    Postgres,
}

impl Engine {
    fn title(self) -> &'static str {
        match self {
            Engine::SqliteFull => "SQLite, synchronous = FULL (default)",
            Engine::SqliteNormal => "SQLite, synchronous = NORMAL",
            Engine::Postgres => "PostgreSQL",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Engine::SqliteFull => "SQLite FULL",
            Engine::SqliteNormal => "SQLite NORMAL",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

struct Args {
    scenario: Scenario,
    engines: Vec<Engine>,
}

const USAGE: &str =
    "usage: cargo bench --bench load -- [core|send|pull|ack|storage|chat-list] [--engine sqlite|postgres|both]";

fn parse_args() -> Result<Args, String> {
    let mut scenario = Scenario::Core;
    let all = vec![Engine::SqliteFull, Engine::SqliteNormal, Engine::Postgres];
    let mut engines = all.clone();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo bench appends --bench to a harness = false target.
            "--bench" => {}
            "--engine" => {
                engines = match args.next().as_deref() {
                    Some("sqlite") => vec![Engine::SqliteFull, Engine::SqliteNormal],
                    Some("postgres") => vec![Engine::Postgres],
                    Some("both") => all.clone(),
                    other => return Err(format!("unknown engine {other:?}")),
                }
            }
            "core" => scenario = Scenario::Core,
            "send" => scenario = Scenario::Send,
            "pull" => scenario = Scenario::Pull,
            "ack" => scenario = Scenario::Ack,
            "storage" => scenario = Scenario::Storage,
            "chat-list" => scenario = Scenario::ChatList,
            "-h" | "--help" => return Err("Chorus load benchmark".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args { scenario, engines })
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

// Two client threads on a two-core machine: the client shares the cores with the server, as
// an in-process benchmark must; the tables say so.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    println!("# Chorus load benchmark ({:?})\n", args.scenario);
    println!("{}", machine_description());
    let mut summaries = Vec::new();
    for engine in args.engines {
        eprintln!("== {}", engine.title());
        match bench_engine(engine, args.scenario).await {
            Ok(report) => {
                report.print();
                summaries.push((engine, report.key_numbers));
            }
            Err(skip) => println!("## {}\n\nSkipped: {skip}\n", engine.title()),
        }
    }
    print_summary(&summaries);
}

async fn bench_engine(engine: Engine, scenario: Scenario) -> Result<EngineReport, String> {
    let server = BenchServer::start(engine).await?;
    let mut conn = server.direct_connection();
    let mut report = EngineReport::new(engine, engine_description(&mut conn));
    if scenario.includes(Scenario::Send) {
        bench_sends(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Pull) {
        bench_pulls(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Ack) {
        bench_acks(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Storage) {
        probe_storage(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::ChatList) {
        bench_chat_list(&server, &mut conn, &mut report).await;
    }
    drop(conn);
    server.stop().await;
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// The server under test and its database
// ---------------------------------------------------------------------------------------------

/// A database that exists for one engine run only.
enum BenchDb {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] ScratchPg),
}

impl BenchDb {
    /// Creates the database and returns it with its URL; Err says why the engine is skipped.
    fn create(engine: Engine) -> Result<(BenchDb, String), String> {
        if engine != Engine::Postgres {
            // Under the system temp dir, which here is the same ext4 disk as PostgreSQL's data:
            // a tmpfs would make FULL and NORMAL look alike.
            let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
            let url = dir.path().join("chorus.sqlite3").display().to_string();
            return Ok((BenchDb::Sqlite(dir), url));
        }
        let admin_url = std::env::var(PG_URL_VAR).unwrap_or_else(|_| PG_DEFAULT_URL.into());
        let db = ScratchPg::create(&admin_url, "chorus_bench")
            .map_err(|e| format!("{e}; set {PG_URL_VAR}"))?;
        let url = db.url();
        Ok((BenchDb::Postgres(db), url))
    }
}

fn bench_settings(engine: Engine, database_url: &str, data_dir: &std::path::Path) -> Settings {
    let mut settings = Settings::defaults();
    settings.bind = "127.0.0.1:0".into();
    settings.database_url = Some(database_url.to_owned());
    settings.data_dir = data_dir.to_path_buf();
    settings.jwt_secret = Some(SECRET.into());
    settings.pool_size = 8;
    settings.workers = 0;
    settings.sqlite_sync = match engine {
        Engine::SqliteNormal => SqliteSync::Normal,
        Engine::SqliteFull | Engine::Postgres => SqliteSync::Full,
    };
    settings
}

struct BenchServer {
    http: Http,
    keys: TokenKeys,
    db_settings: DbSettings,
    stopper: Stopper,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _data_dir: tempfile::TempDir,
    // Dropped last: the PostgreSQL database goes after the server that uses it.
    _db: BenchDb,
}

impl BenchServer {
    async fn start(engine: Engine) -> Result<BenchServer, String> {
        let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let (db, url) = BenchDb::create(engine)?;
        let settings = bench_settings(engine, &url, data_dir.path());
        let db_settings = settings.db_settings().map_err(|e| e.to_string())?;
        let app = Application::build(&settings)
            .await
            .map_err(|e| format!("server did not start: {e}"))?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let stopper = app.stopper();
        let task = tokio::spawn(app.run_until_stopped());
        Ok(BenchServer {
            http: Http::new(base),
            keys: TokenKeys::new(SECRET.as_bytes(), false).expect("bench secret is valid"),
            db_settings,
            stopper,
            task,
            _data_dir: data_dir,
            _db: db,
        })
    }

    fn token(&self, user: &str) -> String {
        let user = UserId::parse("user", user).expect("bench user ids are valid");
        self.keys.issue(&user, 3600).expect("sign bench token")
    }

    fn tokens(&self, users: &[String]) -> Arc<Vec<String>> {
        Arc::new(users.iter().map(|u| self.token(u)).collect())
    }

    /// A connection of the bench's own, for seeding and counting rows.
    fn direct_connection(&self) -> AnyConnection {
        db::connect_once(&self.db_settings).expect("open a direct database connection")
    }

    /// A graceful stop (nothing is in flight by now); the database is dropped after it.
    async fn stop(self) {
        self.stopper.stop().await;
        let stopped = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        if !matches!(stopped, Ok(Ok(Ok(())))) {
            eprintln!("warning: the server did not stop cleanly: {stopped:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/// A cheap-to-clone client for one server; all requests go to 127.0.0.1.
#[derive(Clone)]
struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(base: String) -> Http {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .no_proxy()
            .build()
            .expect("build HTTP client");
        Http { client, base }
    }

    fn post(&self, path: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
    }

    fn get(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
    }

    /// Opens up to `clients` keep-alive connections so the first measured requests do not pay
    /// for TCP set-up.
    async fn warm_up(&self, clients: usize) {
        let url = format!("{}/healthz", self.base);
        let requests = (0..clients).map(|_| self.client.get(&url).send());
        for response in join_all(requests).await {
            response.expect("warm-up request to /healthz");
        }
    }
}

/// Sends the request; Ok with the response on `expect`, otherwise Err with a short label
/// ("503 unavailable", "transport: timeout") that the tables count.
async fn checked(
    request: reqwest::RequestBuilder,
    expect: u16,
) -> Result<reqwest::Response, String> {
    let response = request.send().await.map_err(transport_label)?;
    let status = response.status().as_u16();
    if status == expect {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let code = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    Err(format!("{status} {code}").trim().to_owned())
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

/// The request's response body, read to the end and dropped (1 item).
async fn expect_empty(request: reqwest::RequestBuilder, expect: u16) -> Result<u64, String> {
    let response = checked(request, expect).await?;
    response.bytes().await.map_err(transport_label)?;
    Ok(1)
}

async fn expect_json(request: reqwest::RequestBuilder, expect: u16) -> Result<Value, String> {
    let response = checked(request, expect).await?;
    response
        .json::<Value>()
        .await
        .map_err(|e| format!("bad body: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Load runner and measurements
// ---------------------------------------------------------------------------------------------

/// What a run measured: successful requests, the items they carried (messages, group-acks),
/// the latency of each successful request, failures by label, and the wall time.
#[derive(Default)]
struct Measured {
    ok: u64,
    items: u64,
    latencies: Vec<Duration>,
    errors: BTreeMap<String, u64>,
    elapsed: Duration,
    hit_time_limit: bool,
}

impl Measured {
    fn record(&mut self, took: Duration, outcome: Result<u64, String>) {
        match outcome {
            Ok(items) => {
                self.ok += 1;
                self.items += items;
                self.latencies.push(took);
            }
            Err(label) => *self.errors.entry(label).or_default() += 1,
        }
    }

    fn merge(&mut self, other: Measured) {
        self.ok += other.ok;
        self.items += other.items;
        self.latencies.extend(other.latencies);
        for (label, n) in other.errors {
            *self.errors.entry(label).or_default() += n;
        }
        self.hit_time_limit |= other.hit_time_limit;
    }

    fn rate(&self, count: u64) -> f64 {
        count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Nearest-rank percentile of the successful requests' latencies, in milliseconds.
    fn percentile_ms(&self, q: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(sorted[rank - 1].as_secs_f64() * 1000.0)
    }

    fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "0".into();
        }
        self.errors
            .iter()
            .map(|(label, n)| format!("{n}× {label}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn requests_text(&self, planned: usize) -> String {
        let cut = if self.hit_time_limit {
            " (time limit)"
        } else {
            ""
        };
        format!("{}/{planned}{cut}", self.ok)
    }
}

/// How many of `total` operations client `k` of `clients` does.
fn share(total: usize, clients: usize, k: usize) -> usize {
    total / clients + usize::from(k < total % clients)
}

/// Runs `total` operations spread over `clients` concurrent tasks; `op(k, i)` is client k's
/// i-th operation and returns how many items it carried.
async fn run_load<F, Fut>(clients: usize, total: usize, op: F) -> Measured
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + TIME_LIMIT;
    let tasks = (0..clients).map(|k| {
        let op = op.clone();
        tokio::spawn(async move {
            let mut measured = Measured::default();
            for i in 0..share(total, clients, k) {
                if Instant::now() >= deadline {
                    measured.hit_time_limit = true;
                    break;
                }
                let t0 = Instant::now();
                let outcome = op(k, i).await;
                measured.record(t0.elapsed(), outcome);
            }
            measured
        })
    });
    let mut all = Measured::default();
    for part in join_all(tasks).await {
        all.merge(part.expect("load task panicked"));
    }
    all.elapsed = start.elapsed();
    all
}

// ---------------------------------------------------------------------------------------------
// Seeding through the db layer
// ---------------------------------------------------------------------------------------------

/// Creates a group owned by `users[0]` with the others as members; returns its id.
fn seed_group(conn: &mut AnyConnection, name: &str, users: &[String]) -> i64 {
    let (owner, others) = users.split_first().expect("a group needs an owner");
    let (group, _) =
        chorus::db::groups::create_group(conn, owner, name, others, &mut Wakes::default())
            .expect("seed group through the db layer");
    group.group_id
}

/// `prefix-0` … `prefix-(n-1)`.
fn users(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Stores `count` messages from `sender` with the same code path as a send, in transactions
/// of [`SEED_BATCH`] so that seeding is not bound by one flush per message.
fn seed_messages(conn: &mut AnyConnection, group_id: i64, sender: &str, count: usize) {
    for start in (0..count).step_by(SEED_BATCH) {
        let end = (start + SEED_BATCH).min(count);
        conn.transaction::<_, diesel::result::Error, _>(|conn| {
            for i in start..end {
                let client_msg_id = format!("seed-{group_id}-{i}");
                let outcome = chorus::db::messages::send(
                    conn,
                    group_id,
                    sender,
                    None,
                    &client_msg_id,
                    CONTENT,
                    &mut Wakes::default(),
                )?;
                assert!(
                    matches!(outcome, Ok(SendOutcome::Created(_))),
                    "seeding message {i} in group {group_id} did not create it"
                );
            }
            Ok(())
        })
        .expect("seed messages through the db layer");
        if (start / SEED_BATCH) % 20 == 19 {
            analyze(conn);
        }
    }
    analyze(conn);
}

/// Refreshes PostgreSQL's statistics, as autovacuum would sooner or later. Without them the
/// planner serves the send path's `client_msg_id` look-up from `group_msgs_by_sender` and
/// filters, so each send reads every earlier message of its sender in the group: seeding
/// 20,000 messages from one sender then took 40-90 s instead of a few.
fn analyze(conn: &mut AnyConnection) {
    if let AnyConnection::Postgresql(c) = conn {
        diesel::sql_query("ANALYZE")
            .execute(c)
            .expect("ANALYZE after seeding");
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 1: sends
// ---------------------------------------------------------------------------------------------

/// Each client sends as its own user; `senders[k]` is client k's (group, user).
async fn run_sends(server: &BenchServer, senders: &[(i64, String)], tag: &str) -> Measured {
    let users: Vec<String> = senders.iter().map(|(_, u)| u.clone()).collect();
    let tokens = server.tokens(&users);
    let groups: Arc<Vec<i64>> = Arc::new(senders.iter().map(|(g, _)| *g).collect());
    let http = server.http.clone();
    let tag = tag.to_owned();
    http.warm_up(senders.len()).await;
    run_load(senders.len(), SENDS_PER_RUN, move |k, i| {
        let path = format!("/v1/groups/{}/messages", groups[k]);
        let body = json!({"client_msg_id": format!("{tag}-{k}-{i}"), "content": CONTENT});
        let request = http.post(&path, &tokens[k], &body);
        // 201: a new message. A 200 (duplicate) would be a bench bug and counts as an error.
        expect_empty(request, 201)
    })
    .await
}

/// Rows added to `group_msgs` and `group_members` while the timed sends ran (not seeding).
#[derive(Default)]
struct BulkGrowth {
    created: u64,
    msgs: i64,
    members: i64,
}

impl BulkGrowth {
    async fn around(
        &mut self,
        conn: &mut AnyConnection,
        run: impl Future<Output = Measured>,
    ) -> Measured {
        let before = table_counts(conn);
        let m = run.await;
        let after = table_counts(conn);
        self.created += m.ok;
        self.msgs += after.msgs - before.msgs;
        self.members += after.members - before.members;
        m
    }
}

async fn bench_sends(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let mut growth = BulkGrowth::default();
    for c in CONCURRENCY {
        let members = users(&format!("send{c}"), SEND_GROUP_MEMBERS);
        let group = seed_group(conn, "send: shared group", &members);
        let senders: Vec<(i64, String)> = members[..c].iter().map(|u| (group, u.clone())).collect();
        eprintln!("send: one shared group, C={c}");
        let m = growth
            .around(conn, run_sends(server, &senders, &format!("shared{c}")))
            .await;
        report.send_row(
            &format!("send, one shared group of {SEND_GROUP_MEMBERS}"),
            c,
            &m,
        );
    }
    // With C = 1 "a group per client" is the row above; only C = 32 differs.
    let c = 32;
    let senders: Vec<(i64, String)> = (0..c)
        .map(|k| {
            let members = users(&format!("own{k}"), SEND_GROUP_MEMBERS);
            (
                seed_group(conn, "send: own group", &members),
                members[0].clone(),
            )
        })
        .collect();
    eprintln!("send: a group per client, C={c}");
    let m = growth
        .around(conn, run_sends(server, &senders, "own"))
        .await;
    report.send_row(
        &format!("send, a group of {SEND_GROUP_MEMBERS} per client"),
        c,
        &m,
    );
    report.bulk_send_note(&growth);
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: pulls
// ---------------------------------------------------------------------------------------------

/// A group of [`PULL_GROUP_MESSAGES`] messages with one offline member and readers.
fn seed_pull_group(conn: &mut AnyConnection, readers: &[String]) -> i64 {
    let mut members = vec!["pull-owner".to_owned(), "offline".to_owned()];
    members.extend_from_slice(readers);
    let group = seed_group(conn, "pull", &members);
    let t0 = Instant::now();
    seed_messages(conn, group, "pull-owner", PULL_GROUP_MESSAGES);
    eprintln!(
        "pull: seeded {PULL_GROUP_MESSAGES} messages in {:.1} s (db layer)",
        t0.elapsed().as_secs_f64()
    );
    group
}

/// The offline pull: page after page (no `after_msg_id`: the server starts after the cursor),
/// each page acked before the next. Returns the page and ack measurements and whether the ids
/// came back exactly as 1..=N, with no gap and no repeat.
async fn offline_pull(http: &Http, token: &str, group: i64) -> (Measured, Measured, bool) {
    let mut pages = Measured::default();
    let mut acks = Measured::default();
    let mut next_expected = 1;
    let mut contiguous = true;
    let max_pages = PULL_GROUP_MESSAGES / PULL_PAGE_LIMIT + 5;
    let start = Instant::now();
    for _ in 0..max_pages {
        if start.elapsed() >= TIME_LIMIT {
            pages.hit_time_limit = true;
            break;
        }
        let path = format!("/v1/groups/{group}/messages?limit={PULL_PAGE_LIMIT}");
        let t0 = Instant::now();
        let page = expect_json(http.get(&path, token), 200).await;
        let took = t0.elapsed();
        let page = match page {
            Ok(page) => page,
            Err(label) => {
                pages.record(took, Err(label));
                continue;
            }
        };
        let ids: Vec<i64> = page["messages"]
            .as_array()
            .map(|ms| ms.iter().filter_map(|m| m["msg_id"].as_i64()).collect())
            .unwrap_or_default();
        pages.record(took, Ok(ids.len() as u64));
        for id in &ids {
            contiguous &= *id == next_expected;
            next_expected = id + 1;
        }
        let Some(last) = ids.last() else { break };
        let ack_path = format!("/v1/groups/{group}/ack");
        let t1 = Instant::now();
        let outcome = expect_empty(
            http.post(&ack_path, token, &json!({"last_ack_msg_id": last})),
            200,
        )
        .await;
        acks.record(t1.elapsed(), outcome);
        if page["has_more"] != Value::Bool(true) {
            break;
        }
    }
    pages.elapsed = start.elapsed();
    acks.elapsed = pages.elapsed;
    let complete = next_expected == PULL_GROUP_MESSAGES as i64 + 1;
    (pages, acks, contiguous && complete)
}

async fn random_pulls(server: &BenchServer, readers: &[String], group: i64, c: usize) -> Measured {
    let tokens = server.tokens(&readers[..c]);
    let http = server.http.clone();
    let max_after = (PULL_GROUP_MESSAGES - RANDOM_PULL_LIMIT) as i64;
    http.warm_up(c).await;
    run_load(c, RANDOM_PULLS_PER_RUN, move |k, i| {
        // Seeded per request: reproducible, and a StdRng is Send where ThreadRng is not.
        let mut rng = rand::rngs::StdRng::seed_from_u64((k * 1_000_003 + i) as u64);
        let after = rng.random_range(0..=max_after);
        let path =
            format!("/v1/groups/{group}/messages?after_msg_id={after}&limit={RANDOM_PULL_LIMIT}");
        let request = http.get(&path, &tokens[k]);
        async move {
            let page = expect_json(request, 200).await?;
            Ok(page["messages"].as_array().map_or(0, |ms| ms.len() as u64))
        }
    })
    .await
}

async fn bench_pulls(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let readers = users("reader", 32);
    let group = seed_pull_group(conn, &readers);
    eprintln!("pull: offline member, {PULL_GROUP_MESSAGES} messages");
    let token = server.token("offline");
    let (pages, acks, contiguous) = offline_pull(&server.http, &token, group).await;
    report.offline_pull_rows(&pages, &acks, contiguous);
    for c in CONCURRENCY {
        eprintln!("pull: random pages, C={c}");
        let m = random_pulls(server, &readers, group, c).await;
        report.random_pull_row(c, &m);
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: acks
// ---------------------------------------------------------------------------------------------

/// Client k acks 1, 2, 3, … in one group, as its own member, so every ack moves a cursor.
async fn run_group_acks(server: &BenchServer, group: i64, ackers: &[String]) -> Measured {
    let tokens = server.tokens(ackers);
    let http = server.http.clone();
    http.warm_up(ackers.len()).await;
    run_load(ackers.len(), ACKS_PER_RUN, move |k, i| {
        let body = json!({"last_ack_msg_id": i + 1});
        expect_empty(
            http.post(&format!("/v1/groups/{group}/ack"), &tokens[k], &body),
            200,
        )
    })
    .await
}

/// Client k acks all `groups` in each request, at i + 1 in each.
async fn run_batch_acks(server: &BenchServer, groups: &[i64], ackers: &[String]) -> Measured {
    let tokens = server.tokens(ackers);
    let http = server.http.clone();
    let groups = Arc::new(groups.to_vec());
    http.warm_up(ackers.len()).await;
    run_load(ackers.len(), BATCH_ACK_REQUESTS_PER_RUN, move |k, i| {
        let acks: Vec<Value> = groups
            .iter()
            .map(|g| json!({"group_id": g, "last_ack_msg_id": i + 1}))
            .collect();
        let request = http.post("/v1/acks", &tokens[k], &json!({ "acks": acks }));
        let n = groups.len() as u64;
        async move { expect_empty(request, 200).await.map(|_| n) }
    })
    .await
}

async fn bench_acks(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    // Separate ackers per run, so the C = 32 run does not start from cursors the C = 1 run
    // already moved (an ack that moves nothing writes nothing and would flatter the numbers).
    let ackers: Vec<Vec<String>> = CONCURRENCY
        .iter()
        .map(|c| users(&format!("acker{c}"), *c))
        .collect();
    let mut members = vec!["ack-owner".to_owned()];
    members.extend(ackers.iter().flatten().cloned());
    let group = seed_group(conn, "ack", &members);
    seed_messages(conn, group, "ack-owner", ACKS_PER_RUN);
    for (c, ackers) in CONCURRENCY.iter().zip(&ackers) {
        eprintln!("ack: one group per request, C={c}");
        let m = run_group_acks(server, group, ackers).await;
        report.ack_row(*c, &m);
    }

    let batchers: Vec<Vec<String>> = CONCURRENCY
        .iter()
        .map(|c| users(&format!("batch{c}"), *c))
        .collect();
    let mut members = vec!["batch-owner".to_owned()];
    members.extend(batchers.iter().flatten().cloned());
    let groups: Vec<i64> = (0..BATCH_ACK_GROUPS)
        .map(|_| {
            let group = seed_group(conn, "batch ack", &members);
            seed_messages(conn, group, "batch-owner", BATCH_ACK_REQUESTS_PER_RUN);
            group
        })
        .collect();
    for (c, batchers) in CONCURRENCY.iter().zip(&batchers) {
        eprintln!("ack: POST /v1/acks with {BATCH_ACK_GROUPS} groups, C={c}");
        let m = run_batch_acks(server, &groups, batchers).await;
        report.batch_ack_row(*c, &m);
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario 4: rows written, measured by diffing the tables around single requests
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct TableCounts {
    msgs: i64,
    members: i64,
}

fn table_counts(conn: &mut AnyConnection) -> TableCounts {
    TableCounts {
        msgs: group_msgs::table
            .count()
            .get_result(conn)
            .expect("count group_msgs"),
        members: group_members::table
            .count()
            .get_result(conn)
            .expect("count group_members"),
    }
}

/// Every table's row count (inserts and deletes, in whatever tables the schema has now),
/// plus the full rows of the two tables the design updates in place, so an update shows as a
/// changed row. Net counts: a request that inserted and deleted in one table would cancel.
struct Snapshot {
    counts: BTreeMap<String, i64>,
    groups: HashMap<i64, (String, String, i64)>,
    members: HashMap<(i64, String), (String, i64, i64, i64)>,
}

type MemberColumns = (i64, String, String, i64, i64, i64);

#[derive(QueryableByName)]
struct TableName {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

#[derive(QueryableByName)]
struct RowCount {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The application's tables, read from the catalog so that tables added later are counted.
fn table_names(conn: &mut AnyConnection) -> Vec<String> {
    let query = match conn {
        AnyConnection::Sqlite(_) => {
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '__diesel%'"
        }
        AnyConnection::Postgresql(_) => {
            "SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename NOT LIKE '__diesel%'"
        }
    };
    let names: Vec<TableName> =
        chorus::on_engine!(conn, |c| diesel::sql_query(query).load(c)).expect("list tables");
    names.into_iter().map(|t| t.name).collect()
}

fn row_count(conn: &mut AnyConnection, table: &str) -> i64 {
    let query = format!("SELECT COUNT(*) AS n FROM \"{table}\"");
    let count: RowCount = chorus::on_engine!(conn, |c| diesel::sql_query(&query).get_result(c))
        .unwrap_or_else(|e| panic!("count rows of {table}: {e}"));
    count.n
}

fn snapshot(conn: &mut AnyConnection) -> Snapshot {
    let counts = table_names(conn)
        .into_iter()
        .map(|t| {
            let n = row_count(conn, &t);
            (t, n)
        })
        .collect();
    let groups = groups::table
        .select((
            groups::group_id,
            groups::name,
            groups::owner_id,
            groups::last_msg_id,
        ))
        .load::<(i64, String, String, i64)>(conn)
        .expect("read groups");
    let members = group_members::table
        .select((
            group_members::group_id,
            group_members::user_id,
            group_members::role,
            group_members::joined_after_msg_id,
            group_members::last_ack_msg_id,
            group_members::last_read_msg_id,
        ))
        .load::<MemberColumns>(conn)
        .expect("read group_members");
    Snapshot {
        counts,
        groups: groups
            .into_iter()
            .map(|(id, n, o, last)| (id, (n, o, last)))
            .collect(),
        members: members
            .into_iter()
            .map(|(g, u, role, joined, ack, read)| ((g, u), (role, joined, ack, read)))
            .collect(),
    }
}

/// Keys present in only one map, or with different values: rows inserted, deleted or updated.
fn changed<K: std::hash::Hash + Eq, V: PartialEq>(a: &HashMap<K, V>, b: &HashMap<K, V>) -> u64 {
    let updated_or_deleted = a.iter().filter(|(k, v)| b.get(k) != Some(v)).count();
    let inserted = b.keys().filter(|k| !a.contains_key(k)).count();
    (updated_or_deleted + inserted) as u64
}

/// Rows written per table, summed over the samples.
#[derive(Default)]
struct RowsWritten {
    samples: u64,
    by_table: BTreeMap<String, u64>,
}

impl RowsWritten {
    fn add(&mut self, before: &Snapshot, after: &Snapshot) {
        self.samples += 1;
        for (table, n) in &after.counts {
            let written = match table.as_str() {
                "groups" => changed(&before.groups, &after.groups),
                "group_members" => changed(&before.members, &after.members),
                _ => (n - before.counts.get(table).copied().unwrap_or(0)).unsigned_abs(),
            };
            *self.by_table.entry(table.clone()).or_default() += written;
        }
    }

    fn per_request(&self, table: &str) -> f64 {
        self.by_table.get(table).copied().unwrap_or(0) as f64 / self.samples.max(1) as f64
    }

    fn total_per_request(&self) -> f64 {
        self.by_table.values().sum::<u64>() as f64 / self.samples.max(1) as f64
    }
}

/// Runs `ops` requests one at a time, diffing the tables around each; fails loudly on an
/// unexpected status, since a failed request writes nothing and would skew the count.
async fn measure_rows<F, Fut>(conn: &mut AnyConnection, ops: usize, op: F) -> RowsWritten
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    let mut rows = RowsWritten::default();
    for i in 0..ops {
        let before = snapshot(conn);
        op(i)
            .await
            .unwrap_or_else(|e| panic!("storage probe request {i} failed: {e}"));
        rows.add(&before, &snapshot(conn));
    }
    rows
}

async fn probe_storage(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    eprintln!("storage: diffing tables around single requests");
    let members = users("probe", SEND_GROUP_MEMBERS);
    let group = seed_group(conn, "probe", &members);
    let tokens = server.tokens(&members);
    let http = &server.http;
    let send_path = format!("/v1/groups/{group}/messages");
    let sends = measure_rows(conn, PROBE_OPS, |i| {
        // Senders rotate, so a sender's cursor row is not the same row every time.
        let body = json!({"client_msg_id": format!("probe-{i}"), "content": CONTENT});
        expect_empty(http.post(&send_path, &tokens[i % tokens.len()], &body), 201)
    })
    .await;
    report.storage_row(&format!("send to a group of {SEND_GROUP_MEMBERS}"), sends);

    let ack_path = format!("/v1/groups/{group}/ack");
    let reader = &tokens[tokens.len() - 1];
    let acks = measure_rows(conn, PROBE_OPS, |i| {
        expect_empty(
            http.post(&ack_path, reader, &json!({"last_ack_msg_id": i + 1})),
            200,
        )
    })
    .await;
    report.storage_row("ack that moves the cursor", acks);
    let repeats = measure_rows(conn, PROBE_OPS, |_| {
        expect_empty(
            http.post(&ack_path, reader, &json!({"last_ack_msg_id": PROBE_OPS})),
            200,
        )
    })
    .await;
    report.storage_row("ack repeating the cursor", repeats);

    let batch_members = vec!["probe-batch-owner".to_owned(), "probe-batcher".to_owned()];
    let batch_groups: Vec<i64> = (0..BATCH_ACK_GROUPS)
        .map(|_| {
            let g = seed_group(conn, "probe batch", &batch_members);
            seed_messages(conn, g, "probe-batch-owner", PROBE_OPS);
            g
        })
        .collect();
    let batcher = server.token("probe-batcher");
    let batches = measure_rows(conn, PROBE_OPS, |i| {
        let acks: Vec<Value> = batch_groups
            .iter()
            .map(|g| json!({"group_id": g, "last_ack_msg_id": i + 1}))
            .collect();
        expect_empty(
            http.post("/v1/acks", &batcher, &json!({ "acks": acks })),
            200,
        )
    })
    .await;
    report.storage_row(
        &format!("POST /v1/acks, {BATCH_ACK_GROUPS} groups"),
        batches,
    );
}

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------
// Scenario 5: the chat list
// ---------------------------------------------------------------------------------------------

/// One reader in [`CHAT_LIST_GROUPS`] groups, each with messages from another member; the
/// groups get their messages in random order, so activity order differs from id order.
fn seed_chat_list(conn: &mut AnyConnection, reader: &str) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut groups: Vec<(i64, String)> = (0..CHAT_LIST_GROUPS)
        .map(|i| {
            let friend = format!("friend-{i}");
            let group = seed_group(conn, &format!("chat {i}"), &[friend.clone(), reader.into()]);
            (group, friend)
        })
        .collect();
    for i in (1..groups.len()).rev() {
        groups.swap(i, rng.random_range(0..=i));
    }
    for (group, friend) in &groups {
        seed_messages(conn, *group, friend, CHAT_LIST_MESSAGES_PER_GROUP);
    }
    analyze(conn);
}

/// Every page of the reader's chat list by latest activity, 200 groups a page; the items are
/// the groups listed.
async fn read_whole_chat_list(http: &Http, token: &str) -> Result<u64, String> {
    let mut listed = 0;
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("?order=recent&limit=200&cursor={c}"),
            None => "?order=recent&limit=200".to_owned(),
        };
        let page = expect_json(http.get(&format!("/v1/me/groups{query}"), token), 200).await?;
        listed += page["groups"].as_array().map_or(0, Vec::len) as u64;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(listed),
        }
    }
}

async fn bench_chat_list(
    server: &BenchServer,
    conn: &mut AnyConnection,
    report: &mut EngineReport,
) {
    let reader = "chat-reader";
    eprintln!("chat list: seeding {CHAT_LIST_GROUPS} groups");
    seed_chat_list(conn, reader);
    let token = Arc::new(server.token(reader));
    let http = server.http.clone();
    for (what, query) in [
        (
            "chat list: first page by activity (50 of 500 groups)",
            "?order=recent&limit=50",
        ),
        (
            "chat list: first page by group id (50 of 500 groups)",
            "?limit=50",
        ),
    ] {
        for c in CONCURRENCY {
            eprintln!("chat list: {query}, C={c}");
            http.warm_up(c).await;
            let (http, token) = (http.clone(), token.clone());
            let path = format!("/v1/me/groups{query}");
            let m = run_load(c, CHAT_LIST_REQUESTS_PER_RUN, move |_, _| {
                expect_empty(http.get(&path, &token), 200)
            })
            .await;
            report.chat_list_row(what, c, &m, CHAT_LIST_REQUESTS_PER_RUN);
        }
    }
    eprintln!("chat list: all 500 groups by activity, C=1");
    let (http, token) = (http.clone(), token.clone());
    let whole = CHAT_LIST_REQUESTS_PER_RUN / 10;
    let m = run_load(1, whole, move |_, _| {
        let (http, token) = (http.clone(), token.clone());
        async move { read_whole_chat_list(&http, &token).await }
    })
    .await;
    report.chat_list_row(
        "chat list: all 500 groups by activity (3 pages of 200)",
        1,
        &m,
        whole,
    );
}

// ---------------------------------------------------------------------------------------------

struct Row {
    what: String,
    clients: usize,
    requests: String,
    errors: String,
    throughput: String,
    p50: String,
    p99: String,
}

struct EngineReport {
    engine: Engine,
    description: String,
    rows: Vec<Row>,
    storage: Vec<(String, RowsWritten)>,
    notes: Vec<String>,
    key_numbers: Vec<(String, String)>,
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

impl EngineReport {
    fn new(engine: Engine, description: String) -> EngineReport {
        EngineReport {
            engine,
            description,
            rows: Vec::new(),
            storage: Vec::new(),
            notes: Vec::new(),
            key_numbers: Vec::new(),
        }
    }

    fn row(
        &mut self,
        what: &str,
        clients: usize,
        m: &Measured,
        planned: usize,
        throughput: String,
    ) {
        self.rows.push(Row {
            what: what.to_owned(),
            clients,
            requests: m.requests_text(planned),
            errors: m.errors_text(),
            throughput,
            p50: ms(m.percentile_ms(0.50)),
            p99: ms(m.percentile_ms(0.99)),
        });
    }

    fn key(&mut self, name: String, value: f64) {
        self.key_numbers.push((name, format!("{value:.0}")));
    }

    fn chat_list_row(&mut self, what: &str, c: usize, m: &Measured, planned: usize) {
        let rate = m.rate(m.ok);
        self.row(what, c, m, planned, format!("{rate:.0} lists/s"));
        let short = what.trim_start_matches("chat list: ");
        self.key_numbers.push((
            format!("chat list p50/p99 ms, {short}, C={c}"),
            format!(
                "{} / {}",
                ms(m.percentile_ms(0.50)),
                ms(m.percentile_ms(0.99))
            ),
        ));
    }

    fn send_row(&mut self, what: &str, c: usize, m: &Measured) {
        let rate = m.rate(m.items);
        self.row(what, c, m, SENDS_PER_RUN, format!("{rate:.0} msgs/s"));
        let shape = if what.contains("shared") {
            "shared"
        } else {
            "own"
        };
        self.key(format!("sends/s {shape} C={c}"), rate);
    }

    fn offline_pull_rows(&mut self, pages: &Measured, acks: &Measured, contiguous: bool) {
        let msgs = pages.rate(pages.items);
        let planned = PULL_GROUP_MESSAGES.div_ceil(PULL_PAGE_LIMIT);
        let throughput = format!("{msgs:.0} msgs/s, {:.0} pages/s", pages.rate(pages.ok));
        self.row(
            &format!("offline pull of {PULL_GROUP_MESSAGES}: GET limit={PULL_PAGE_LIMIT}"),
            1,
            pages,
            planned,
            throughput,
        );
        self.row(
            "… and the ack after each page",
            1,
            acks,
            planned,
            "(in the line above)".into(),
        );
        self.key("pulled msgs/s (offline, +ack)".into(), msgs);
        self.notes.push(format!(
            "Offline pull: {} messages arrived, ids 1..={PULL_GROUP_MESSAGES} each exactly once: {}.",
            pages.items,
            if contiguous { "yes" } else { "NO" }
        ));
    }

    fn random_pull_row(&mut self, c: usize, m: &Measured) {
        let throughput = format!("{:.0} req/s, {:.0} msgs/s", m.rate(m.ok), m.rate(m.items));
        self.row(
            &format!("random page: GET after_msg_id=rand limit={RANDOM_PULL_LIMIT}"),
            c,
            m,
            RANDOM_PULLS_PER_RUN,
            throughput,
        );
        self.key(format!("random-pull msgs/s C={c}"), m.rate(m.items));
    }

    fn ack_row(&mut self, c: usize, m: &Measured) {
        let rate = m.rate(m.ok);
        self.row(
            "ack: POST /groups/{id}/ack, cursor +1",
            c,
            m,
            ACKS_PER_RUN,
            format!("{rate:.0} acks/s"),
        );
        self.key(format!("acks/s C={c}"), rate);
    }

    fn batch_ack_row(&mut self, c: usize, m: &Measured) {
        let rate = m.rate(m.items);
        let throughput = format!("{rate:.0} group-acks/s ({:.0} req/s)", m.rate(m.ok));
        self.row(
            &format!("ack: POST /v1/acks, {BATCH_ACK_GROUPS} groups each"),
            c,
            m,
            BATCH_ACK_REQUESTS_PER_RUN,
            throughput,
        );
        self.key(format!("group-acks/s (batch) C={c}"), rate);
    }

    fn storage_row(&mut self, what: &str, rows: RowsWritten) {
        self.storage.push((what.to_owned(), rows));
    }

    fn print_storage(&self) {
        let mut tables: Vec<&str> = Vec::new();
        for (_, rows) in &self.storage {
            for table in rows.by_table.keys() {
                if !tables.contains(&table.as_str()) {
                    tables.push(table);
                }
            }
        }
        println!(
            "Rows written per request (requests sent one at a time; every table's row count, \
             and the full rows of `groups` and `group_members`, diffed before and after each):\n"
        );
        let header: Vec<String> = tables.iter().map(|t| format!("`{t}`")).collect();
        println!("| request | samples | {} | total |", header.join(" | "));
        println!("|---|--:|{}--:|", "--:|".repeat(tables.len()));
        for (what, rows) in &self.storage {
            let cells: Vec<String> = tables
                .iter()
                .map(|t| format!("{:.2}", rows.per_request(t)))
                .collect();
            println!(
                "| {what} | {} | {} | **{:.2}** |",
                rows.samples,
                cells.join(" | "),
                rows.total_per_request()
            );
        }
        println!();
    }

    fn bulk_send_note(&mut self, growth: &BulkGrowth) {
        self.notes.push(format!(
            "Over all timed send runs: {} sends answered 201; meanwhile `group_msgs` grew by {} \
             rows ({:.3} per send) and `group_members` by {} rows.",
            growth.created,
            growth.msgs,
            growth.msgs as f64 / growth.created.max(1) as f64,
            growth.members,
        ));
    }

    fn print(&self) {
        println!("## {}\n", self.engine.title());
        println!("{}\n", self.description);
        if !self.rows.is_empty() {
            println!("| operation | C | ok / planned | errors | throughput | p50 ms | p99 ms |");
            println!("|---|--:|--:|---|--:|--:|--:|");
            for r in &self.rows {
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    r.what, r.clients, r.requests, r.errors, r.throughput, r.p50, r.p99
                );
            }
            println!();
        }
        if !self.storage.is_empty() {
            self.print_storage();
        }
        for note in &self.notes {
            println!("- {note}");
        }
        if !self.notes.is_empty() {
            println!();
        }
    }
}

fn print_summary(summaries: &[(Engine, Vec<(String, String)>)]) {
    let Some((_, first)) = summaries.iter().find(|(_, keys)| !keys.is_empty()) else {
        return;
    };
    println!("## Summary\n");
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    println!("| engine | {} |", names.join(" | "));
    println!("|---|{}|", vec!["--:"; names.len()].join("|"));
    for (engine, keys) in summaries {
        let values: Vec<&str> = keys.iter().map(|(_, v)| v.as_str()).collect();
        println!("| {} | {} |", engine.short(), values.join(" | "));
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// The machine and the engine
// ---------------------------------------------------------------------------------------------

fn machine_description() -> String {
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

fn engine_description(conn: &mut AnyConnection) -> String {
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
