//! Crash-safety tests on the real `chorus` binary, run as a subprocess.
//!
//! - `sigkill_during_traffic_loses_and_duplicates_nothing`: SIGKILL the server again and again
//!   while senders and members are mid-request, restart it, and check that no acknowledged send
//!   was lost or stored twice, that message ids stay contiguous, that no cursor moved backwards,
//!   and that every send whose response was lost ends up stored exactly once after a retry.
//! - `sqlite_concurrent_writers_never_see_database_locked`: 32 concurrent writers on SQLite only
//!   ever get 2xx, and the server never logs "database is locked"; the `_with_outside_writer`
//!   variant adds a second process holding a write transaction on the same file for 1 s.
//!
//! Settings: `CHORUS_TEST_DATABASE_URL` (PostgreSQL admin URL; the PostgreSQL variant is ignored
//! unless it was set at build time), `CHORUS_CRASH_KILLS` (kills per engine, at least 10), `CHORUS_CRASH_SEED`
//! (replays the timings of an earlier run), `CHORUS_RELIABILITY_LOG` (a file each crash run
//! appends its summary to, as one JSON line).

#[path = "support/scratch_pg.rs"]
mod scratch_pg;
use scratch_pg::ScratchPg;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus::auth::TokenKeys;
use chorus::domain::UserId;
use diesel::connection::SimpleConnection;
use diesel::{Connection, SqliteConnection};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "crash-test-secret-crash-test-secret-0123456789";
const PG_URL_VAR: &str = "CHORUS_TEST_DATABASE_URL";
const KILLS_VAR: &str = "CHORUS_CRASH_KILLS";
const SEED_VAR: &str = "CHORUS_CRASH_SEED";
const RELIABILITY_LOG_VAR: &str = "CHORUS_RELIABILITY_LOG";
const MIN_KILLS: usize = 10;

/// The tests of this binary each run a server and many clients on a 2-core machine: one at a
/// time, so their timings do not disturb each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// Harness: databases, the server process, an HTTP client that tells lost responses apart.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

/// A database for one test: a SQLite file in the test's directory, or a fresh PostgreSQL
/// database dropped (WITH (FORCE)) when this value is dropped.
struct TestDatabase {
    url: String,
    _postgres: Option<ScratchPg>,
}

impl TestDatabase {
    /// None when the engine is PostgreSQL and CHORUS_TEST_DATABASE_URL is not set.
    fn create(engine: Engine, dir: &Path) -> Option<TestDatabase> {
        match engine {
            Engine::Sqlite => Some(TestDatabase {
                url: dir.join("chorus.sqlite3").display().to_string(),
                _postgres: None,
            }),
            Engine::Postgres => {
                let admin_url = std::env::var(PG_URL_VAR).ok()?;
                let db = ScratchPg::create(&admin_url, "chorus_test").expect("test database");
                Some(TestDatabase {
                    url: db.url(),
                    _postgres: Some(db),
                })
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

struct ServerConfig {
    data_dir: PathBuf,
    database_url: String,
    log: &'static str,
}

/// `chorus serve` as a child process, its stdout and stderr in a log file. Killed (SIGKILL)
/// when dropped, so a failing test leaves no server behind.
struct ServerProcess {
    child: Child,
    base: String,
    log_path: PathBuf,
}

impl ServerProcess {
    fn spawn(config: &ServerConfig, log_path: PathBuf) -> ServerProcess {
        let port = free_port();
        let log = File::create(&log_path).expect("server log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_chorus"));
        // Only the settings below: nothing from the environment the tests run in.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CHORUS_") {
                command.env_remove(name);
            }
        }
        let child = command
            .arg("serve")
            .env("CHORUS_BIND", format!("127.0.0.1:{port}"))
            .env("CHORUS_DATA_DIR", &config.data_dir)
            .env("CHORUS_DATABASE_URL", &config.database_url)
            .env("CHORUS_JWT_SECRET", SECRET)
            .env("CHORUS_LOG", config.log)
            .env("CHORUS_SQLITE_SYNC", "full")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .spawn()
            .expect("start the chorus binary");
        ServerProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log_path,
        }
    }

    /// Waits until `/healthz` answers 200; fails the test if the process exits first.
    async fn wait_healthy(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("child status") {
                panic!(
                    "chorus exited during start-up ({status}); its log:\n{}",
                    self.log()
                );
            }
            let probe = client
                .get(format!("{}/healthz", self.base))
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if matches!(&probe, Ok(r) if r.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "chorus did not answer /healthz within 60 s; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL (what `Child::kill` sends on unix), then reap the process.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tokens_for(users: &[String]) -> Arc<HashMap<String, String>> {
    let keys = TokenKeys::new(SECRET.as_bytes(), false).expect("token keys");
    let tokens = users
        .iter()
        .map(|user| {
            let id = UserId::parse("sub", user).expect("valid user id");
            (user.clone(), keys.issue(&id, 3600).expect("token"))
        })
        .collect();
    Arc::new(tokens)
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("HTTP client")
}

/// What came back: a response (status and JSON body), or nothing because the connection failed
/// (the server died before, while or after handling the request: the outcome is unknown).
#[derive(Debug)]
enum Reply {
    Answered(u16, Value),
    Lost(String),
}

#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
    tokens: Arc<HashMap<String, String>>,
}

impl Api {
    async fn call(&self, method: Method, path: &str, user: &str, body: Option<&Value>) -> Reply {
        let mut request = self
            .client
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(&self.tokens[user]);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Reply::Lost(e.to_string()),
        };
        let status = response.status().as_u16();
        match response.text().await {
            Ok(text) => {
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                Reply::Answered(status, body)
            }
            Err(e) => Reply::Lost(e.to_string()),
        }
    }

    async fn send(&self, user: &str, group_id: i64, client_msg_id: &str, content: &str) -> Reply {
        let body = json!({"client_msg_id": client_msg_id, "content": content});
        let path = format!("/v1/groups/{group_id}/messages");
        self.call(Method::POST, &path, user, Some(&body)).await
    }

    async fn ack(&self, user: &str, group_id: i64, body: &Value) -> Reply {
        let path = format!("/v1/groups/{group_id}/ack");
        self.call(Method::POST, &path, user, Some(body)).await
    }

    async fn create_group(&self, owner: &str, name: &str, members: &[&str]) -> i64 {
        let body = json!({"name": name, "member_ids": members});
        match self
            .call(Method::POST, "/v1/groups", owner, Some(&body))
            .await
        {
            Reply::Answered(201, body) => body["group_id"].as_i64().expect("group_id"),
            other => panic!("creating group {name} failed: {other:?}"),
        }
    }

    /// Every message of the group, from after_msg_id=0, read as `member`; and the group's
    /// last_msg_id as the last page reported it.
    async fn pull_all(&self, member: &str, group_id: i64) -> (Vec<StoredMessage>, i64) {
        let mut after = 0;
        let mut messages = Vec::new();
        loop {
            let path = format!("/v1/groups/{group_id}/messages?after_msg_id={after}&limit=200");
            let body = match self.call(Method::GET, &path, member, None).await {
                Reply::Answered(200, body) => body,
                other => panic!("pulling group {group_id} as {member} failed: {other:?}"),
            };
            let page = body["messages"].as_array().expect("messages");
            for m in page {
                messages.push(StoredMessage {
                    msg_id: m["msg_id"].as_i64().expect("msg_id"),
                    sender_id: m["sender_id"].as_str().expect("sender_id").to_owned(),
                    client_msg_id: m["client_msg_id"].as_str().expect("cmid").to_owned(),
                    content: m["content"].as_str().expect("content").to_owned(),
                });
            }
            if let Some(last) = messages.last() {
                after = last.msg_id;
            }
            if !body["has_more"].as_bool().expect("has_more") {
                return (messages, body["last_msg_id"].as_i64().expect("last_msg_id"));
            }
        }
    }

    /// The member's (last_ack_msg_id, last_read_msg_id) in the group, as a page reports them.
    async fn cursors(&self, member: &str, group_id: i64) -> (i64, i64) {
        let path = format!("/v1/groups/{group_id}/messages?limit=1");
        match self.call(Method::GET, &path, member, None).await {
            Reply::Answered(200, body) => (
                body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id"),
                body["last_read_msg_id"].as_i64().expect("last_read_msg_id"),
            ),
            other => panic!("reading {member}'s cursors in group {group_id} failed: {other:?}"),
        }
    }
}

#[derive(Debug)]
struct StoredMessage {
    msg_id: i64,
    sender_id: String,
    client_msg_id: String,
    content: String,
}

fn seed() -> u64 {
    let seed = std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed={seed} (replay the timings with {SEED_VAR}={seed})");
    seed
}

/// A reproducible generator for one client in one phase of a run.
fn rng_for(seed: u64, phase: usize, client: usize) -> StdRng {
    let mix = (phase as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (client as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    StdRng::seed_from_u64(seed ^ mix)
}

// ---------------------------------------------------------------------------------------------
// 1. SIGKILL during traffic.
// ---------------------------------------------------------------------------------------------

/// A send whose response never came: retried with the same client_msg_id and content.
#[derive(Debug, Clone)]
struct PendingSend {
    group_id: i64,
    client_msg_id: String,
    content: String,
}

/// A send answered 2xx: the server promised this message is stored, once, with this id.
#[derive(Debug, Clone)]
struct AcknowledgedSend {
    group_id: i64,
    sender_id: String,
    client_msg_id: String,
    content: String,
    msg_id: i64,
}

/// One sender's connection: sends new messages, and first retries those whose response a
/// crash swallowed. Each lane owns its client_msg_ids, so lanes never race each other.
struct SenderLane {
    index: usize,
    user: String,
    groups: Vec<i64>,
    next: u64,
    pending: Vec<PendingSend>,
    acknowledged: Vec<AcknowledgedSend>,
    /// New client_msg_ids sent.
    attempted: u64,
    /// Answered 2xx at their first attempt.
    first_try_2xx: u64,
    /// First attempt lost (connection failed); each is retried until answered.
    lost_response: u64,
    /// Retries answered 200 (the lost attempt had committed) or 201 (it had not).
    retried_200: u64,
    retried_201: u64,
    /// Retries whose response was lost too (the next kill came first).
    retry_lost_again: u64,
    problems: Vec<String>,
}

impl SenderLane {
    fn new(index: usize, user: &str, groups: Vec<i64>) -> SenderLane {
        SenderLane {
            index,
            user: user.to_owned(),
            groups,
            next: 0,
            pending: Vec::new(),
            acknowledged: Vec::new(),
            attempted: 0,
            first_try_2xx: 0,
            lost_response: 0,
            retried_200: 0,
            retried_201: 0,
            retry_lost_again: 0,
            problems: Vec::new(),
        }
    }

    /// Records a 2xx answer; false (and a problem) when the body does not fit the send.
    fn accept(&mut self, send: &PendingSend, status: u16, body: &Value) -> bool {
        let msg_id = body["msg_id"].as_i64();
        let matches = body["client_msg_id"].as_str() == Some(send.client_msg_id.as_str())
            && body["group_id"].as_i64() == Some(send.group_id)
            && body["content"].as_str() == Some(send.content.as_str());
        match msg_id {
            Some(msg_id) if matches => {
                self.acknowledged.push(AcknowledgedSend {
                    group_id: send.group_id,
                    sender_id: self.user.clone(),
                    client_msg_id: send.client_msg_id.clone(),
                    content: send.content.clone(),
                    msg_id,
                });
                true
            }
            _ => {
                self.problems.push(format!(
                    "send {} answered {status} with a body that does not match: {body}",
                    send.client_msg_id
                ));
                false
            }
        }
    }

    /// Retries every pending send (until `stop`), then sends new messages until `stop` (only
    /// when `new_sends`).
    async fn run_phase(
        mut self,
        api: Api,
        stop: Arc<AtomicBool>,
        mut rng: StdRng,
        phase: usize,
        new_sends: bool,
    ) -> SenderLane {
        let pending = std::mem::take(&mut self.pending);
        let mut queue = pending.into_iter();
        for send in queue.by_ref() {
            if stop.load(Ordering::SeqCst) {
                self.pending.push(send);
                break;
            }
            let reply = api
                .send(
                    &self.user,
                    send.group_id,
                    &send.client_msg_id,
                    &send.content,
                )
                .await;
            match reply {
                Reply::Answered(status @ (200 | 201), body) => {
                    if self.accept(&send, status, &body) {
                        if status == 200 {
                            self.retried_200 += 1;
                        } else {
                            self.retried_201 += 1;
                        }
                    }
                }
                Reply::Answered(status, body) => {
                    self.problems.push(format!(
                        "retry of {} answered {status}: {body}",
                        send.client_msg_id
                    ));
                    self.pending.push(send);
                }
                Reply::Lost(_) => {
                    self.retry_lost_again += 1;
                    self.pending.push(send);
                }
            }
        }
        self.pending.extend(queue);

        while new_sends && !stop.load(Ordering::SeqCst) {
            let group_id = self.groups[rng.random_range(0..self.groups.len())];
            self.next += 1;
            let client_msg_id = format!("{}-l{}-p{}-n{}", self.user, self.index, phase, self.next);
            let content = format!("{} says {} in group {group_id}", self.user, self.next);
            let send = PendingSend {
                group_id,
                client_msg_id,
                content,
            };
            self.attempted += 1;
            let reply = api
                .send(&self.user, group_id, &send.client_msg_id, &send.content)
                .await;
            match reply {
                Reply::Answered(201, body) => {
                    if self.accept(&send, 201, &body) {
                        self.first_try_2xx += 1;
                    }
                }
                Reply::Answered(status, body) => {
                    // 200 would mean the server saw this fresh client_msg_id before.
                    self.problems.push(format!(
                        "new send {} answered {status}: {body}",
                        send.client_msg_id
                    ));
                    if status != 200 {
                        self.pending.push(send);
                    }
                }
                Reply::Lost(_) => {
                    self.lost_response += 1;
                    self.pending.push(send);
                }
            }
            if rng.random_bool(0.2) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
            }
        }
        self
    }
}

/// One member: pulls a page after its cursor, acks it (sometimes reading less than it acks),
/// and checks that every cursor the server reports is at least the highest it reported before.
struct MemberClient {
    user: String,
    groups: Vec<i64>,
    /// Highest (last_ack_msg_id, last_read_msg_id) any 2xx response reported, per group.
    highest: HashMap<i64, (i64, i64)>,
    pulls: u64,
    pulls_lost: u64,
    acks: u64,
    acks_lost: u64,
    backwards: Vec<String>,
    gaps: Vec<String>,
    problems: Vec<String>,
}

impl MemberClient {
    fn new(user: &str, groups: Vec<i64>) -> MemberClient {
        MemberClient {
            user: user.to_owned(),
            groups,
            highest: HashMap::new(),
            pulls: 0,
            pulls_lost: 0,
            acks: 0,
            acks_lost: 0,
            backwards: Vec::new(),
            gaps: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Checks reported cursors against the highest seen before (within a phase and across
    /// restarts), then raises the highest.
    fn observe(&mut self, group_id: i64, ack: i64, read: i64, what: &str) {
        let (was_ack, was_read) = self.highest.get(&group_id).copied().unwrap_or((0, 0));
        if ack < was_ack || read < was_read {
            self.backwards.push(format!(
                "{} in group {group_id}: {what} reported (ack {ack}, read {read}) after \
                 (ack {was_ack}, read {was_read}) had been reported",
                self.user
            ));
        }
        self.highest
            .insert(group_id, (was_ack.max(ack), was_read.max(read)));
    }

    async fn run_phase(mut self, api: Api, stop: Arc<AtomicBool>, mut rng: StdRng) -> MemberClient {
        let mut turn = rng.random_range(0..self.groups.len());
        while !stop.load(Ordering::SeqCst) {
            let group_id = self.groups[turn % self.groups.len()];
            turn += 1;
            let limit = rng.random_range(1..=40);
            let path = format!("/v1/groups/{group_id}/messages?limit={limit}");
            let body = match api.call(Method::GET, &path, &self.user, None).await {
                Reply::Answered(200, body) => body,
                Reply::Answered(status, body) => {
                    self.problems.push(format!(
                        "pull of group {group_id} answered {status}: {body}"
                    ));
                    continue;
                }
                Reply::Lost(_) => {
                    self.pulls_lost += 1;
                    continue;
                }
            };
            self.pulls += 1;
            let ack = body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id");
            let read = body["last_read_msg_id"].as_i64().expect("last_read_msg_id");
            self.observe(group_id, ack, read, "a pull");
            let ids: Vec<i64> = body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(|m| m["msg_id"].as_i64().expect("msg_id"))
                .collect();
            let expected: Vec<i64> = (ack + 1..=ack + ids.len() as i64).collect();
            if ids != expected {
                self.gaps.push(format!(
                    "{} pulled group {group_id} after {ack}: ids {ids:?}, expected {expected:?}",
                    self.user
                ));
            }
            let Some(&last) = ids.last() else {
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..10))).await;
                continue;
            };
            let read_to = rng.random_bool(0.4).then(|| rng.random_range(read..=last));
            let request = match read_to {
                Some(read_to) => json!({"last_ack_msg_id": last, "last_read_msg_id": read_to}),
                None => json!({"last_ack_msg_id": last}),
            };
            match api.ack(&self.user, group_id, &request).await {
                Reply::Answered(200, body) => {
                    self.acks += 1;
                    let new_ack = body["last_ack_msg_id"].as_i64().expect("last_ack_msg_id");
                    let new_read = body["last_read_msg_id"].as_i64().expect("last_read_msg_id");
                    if new_ack < last || new_read < read_to.unwrap_or(last) {
                        self.backwards.push(format!(
                            "{} in group {group_id}: ack {request} answered (ack {new_ack}, \
                             read {new_read})",
                            self.user
                        ));
                    }
                    self.observe(group_id, new_ack, new_read, "an ack");
                }
                Reply::Answered(status, body) => self.problems.push(format!(
                    "ack {request} in group {group_id}: {status} {body}"
                )),
                Reply::Lost(_) => self.acks_lost += 1,
            }
        }
        self
    }
}

#[derive(Default, Debug)]
struct Verdict {
    /// Acknowledged sends missing from the group (or stored with another id).
    lost: Vec<String>,
    /// client_msg_ids stored more than once.
    duplicated: Vec<String>,
    /// Ids that are not exactly 1..=last_msg_id.
    gaps: Vec<String>,
    /// Cursors below what a 2xx response had reported.
    backwards: Vec<String>,
    /// Stored messages nobody was told about (a send must end acknowledged after its retries).
    unknown: Vec<String>,
    /// Sends still unanswered after the last restart, unexpected statuses, bad bodies.
    problems: Vec<String>,
}

impl Verdict {
    fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.gaps.is_empty()
            && self.backwards.is_empty()
            && self.unknown.is_empty()
            && self.problems.is_empty()
    }
}

fn first<T: std::fmt::Debug>(items: &[T]) -> Vec<&T> {
    items.iter().take(5).collect()
}

async fn sigkill_during_traffic(engine: Engine) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(database) = TestDatabase::create(engine, dir.path()) else {
        eprintln!("skipped: {PG_URL_VAR} is not set, so the PostgreSQL variant does not run");
        return;
    };
    let requested: usize = std::env::var(KILLS_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(MIN_KILLS);
    let kills = requested.max(MIN_KILLS);
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let config = ServerConfig {
        data_dir: dir.path().to_path_buf(),
        database_url: database.url.clone(),
        log: "warn",
    };
    let senders = ["s1", "s2", "s3", "s4"];
    let members = ["m1", "m2", "m3", "m4"];
    let users: Vec<String> = senders
        .iter()
        .chain(&members)
        .map(|s| s.to_string())
        .collect();
    let tokens = tokens_for(&users);
    let client = http_client();
    let started = Instant::now();

    let mut server = ServerProcess::spawn(&config, dir.path().join("server-0.log"));
    server.wait_healthy(&client).await;
    let mut starts = 1;
    let api = Api {
        client: client.clone(),
        base: server.base.clone(),
        tokens: tokens.clone(),
    };
    // Three groups; each sender is in two, each member in two or three.
    let g0 = api
        .create_group("s1", "all", &["s2", "s3", "s4", "m1", "m2", "m3", "m4"])
        .await;
    let g1 = api
        .create_group("s2", "left", &["s1", "m1", "m2", "m3"])
        .await;
    let g2 = api
        .create_group("s3", "right", &["s4", "m2", "m3", "m4"])
        .await;
    let owners = [(g0, "s1"), (g1, "s2"), (g2, "s3")];
    let sender_groups = |s: &str| match s {
        "s1" | "s2" => vec![g0, g1],
        _ => vec![g0, g2],
    };
    let member_groups = |m: &str| match m {
        "m1" => vec![g0, g1],
        "m4" => vec![g0, g2],
        _ => vec![g0, g1, g2],
    };
    // Two lanes (connections) per sender, so a sender has two sends in flight at a kill.
    let mut lanes: Vec<SenderLane> = (0..senders.len() * 2)
        .map(|i| SenderLane::new(i, senders[i / 2], sender_groups(senders[i / 2])))
        .collect();
    let mut member_clients: Vec<MemberClient> = members
        .iter()
        .map(|m| MemberClient::new(m, member_groups(m)))
        .collect();

    let mut windows = Vec::new();
    for phase in 0..kills {
        if phase > 0 {
            server = ServerProcess::spawn(&config, dir.path().join(format!("server-{phase}.log")));
            server.wait_healthy(&client).await;
            starts += 1;
        }
        let api = Api {
            client: client.clone(),
            base: server.base.clone(),
            tokens: tokens.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let lane_tasks: Vec<_> = lanes
            .drain(..)
            .map(|lane| {
                let rng = rng_for(seed, phase, lane.index);
                tokio::spawn(lane.run_phase(api.clone(), stop.clone(), rng, phase, true))
            })
            .collect();
        let member_tasks: Vec<_> = member_clients
            .drain(..)
            .enumerate()
            .map(|(i, member)| {
                let rng = rng_for(seed, phase, 100 + i);
                tokio::spawn(member.run_phase(api.clone(), stop.clone(), rng))
            })
            .collect();
        let window = rng.random_range(200..=1500u64);
        windows.push(window);
        tokio::time::sleep(Duration::from_millis(window)).await;
        // No new request starts from here; the ones in flight meet the kill.
        stop.store(true, Ordering::SeqCst);
        server.kill();
        for task in lane_tasks {
            lanes.push(task.await.expect("sender lane task"));
        }
        for task in member_tasks {
            member_clients.push(task.await.expect("member task"));
        }
        let log = server.log();
        assert!(
            !log.contains("panicked"),
            "the server panicked before kill {}:\n{log}",
            phase + 1
        );
    }

    // The last restart: retry what is still unanswered, then check everything.
    server = ServerProcess::spawn(&config, dir.path().join("server-final.log"));
    server.wait_healthy(&client).await;
    starts += 1;
    let api = Api {
        client: client.clone(),
        base: server.base.clone(),
        tokens: tokens.clone(),
    };
    let never = Arc::new(AtomicBool::new(false));
    let mut retried = Vec::new();
    for lane in lanes.drain(..) {
        let rng = rng_for(seed, kills, lane.index);
        retried.push(
            lane.run_phase(api.clone(), never.clone(), rng, kills, false)
                .await,
        );
    }
    lanes = retried;

    let mut verdict = Verdict::default();
    for lane in &lanes {
        verdict.problems.extend(lane.problems.iter().cloned());
        verdict.problems.extend(
            lane.pending
                .iter()
                .map(|p| format!("send {} never answered 2xx", p.client_msg_id)),
        );
    }
    // (a) and (b): every group read from after_msg_id=0.
    let acknowledged: HashMap<&str, &AcknowledgedSend> = lanes
        .iter()
        .flat_map(|l| &l.acknowledged)
        .map(|a| (a.client_msg_id.as_str(), a))
        .collect();
    let mut stored_count = 0;
    let mut stored: HashMap<String, (i64, i64)> = HashMap::new();
    for (group_id, owner) in owners {
        let (messages, last_msg_id) = api.pull_all(owner, group_id).await;
        stored_count += messages.len();
        let ids: Vec<i64> = messages.iter().map(|m| m.msg_id).collect();
        if ids != (1..=last_msg_id).collect::<Vec<i64>>() {
            let mut seen = ids.clone();
            seen.dedup();
            verdict.gaps.push(format!(
                "group {group_id}: {} ids for last_msg_id {last_msg_id} ({} distinct)",
                ids.len(),
                seen.len()
            ));
        }
        for m in &messages {
            if stored
                .insert(m.client_msg_id.clone(), (group_id, m.msg_id))
                .is_some()
            {
                verdict.duplicated.push(format!(
                    "{} stored twice (again as {group_id}/{})",
                    m.client_msg_id, m.msg_id
                ));
            }
            match acknowledged.get(m.client_msg_id.as_str()) {
                Some(a) if a.sender_id == m.sender_id && a.content == m.content => {}
                Some(a) => verdict.problems.push(format!(
                    "{} stored as sent by {} with content {:?}, sent by {} as {:?}",
                    m.client_msg_id, m.sender_id, m.content, a.sender_id, a.content
                )),
                None => verdict.unknown.push(format!(
                    "{group_id}/{} ({}) was never acknowledged",
                    m.msg_id, m.client_msg_id
                )),
            }
        }
    }
    for a in acknowledged.values() {
        match stored.get(a.client_msg_id.as_str()) {
            Some(&found) if found == (a.group_id, a.msg_id) => {}
            Some(&(group_id, msg_id)) => verdict.lost.push(format!(
                "{} acknowledged as {}/{} but stored as {group_id}/{msg_id}",
                a.client_msg_id, a.group_id, a.msg_id
            )),
            None => verdict.lost.push(format!(
                "{} acknowledged as {}/{} but not stored",
                a.client_msg_id, a.group_id, a.msg_id
            )),
        }
    }
    // (c): final cursors at least the highest any 2xx response reported.
    for member in &mut member_clients {
        verdict.backwards.append(&mut member.backwards);
        verdict.gaps.append(&mut member.gaps);
        verdict.problems.append(&mut member.problems);
        for &group_id in &member.groups {
            let (ack, read) = api.cursors(&member.user, group_id).await;
            let (high_ack, high_read) = member.highest.get(&group_id).copied().unwrap_or((0, 0));
            if ack < high_ack || read < high_read {
                verdict.backwards.push(format!(
                    "{} in group {group_id}: final (ack {ack}, read {read}) below reported \
                     (ack {high_ack}, read {high_read})",
                    member.user
                ));
            }
        }
    }
    server.kill();
    let log: String = (0..kills)
        .map(|p| format!("server-{p}.log"))
        .chain(["server-final.log".to_owned()])
        .map(|name| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default())
        .collect();

    let sum = |f: fn(&SenderLane) -> u64| lanes.iter().map(f).sum::<u64>();
    let attempted = sum(|l| l.attempted);
    let first_try = sum(|l| l.first_try_2xx);
    let lost_response = sum(|l| l.lost_response);
    let retried_200 = sum(|l| l.retried_200);
    let retried_201 = sum(|l| l.retried_201);
    let retry_lost_again = sum(|l| l.retry_lost_again);
    let msum = |f: fn(&MemberClient) -> u64| member_clients.iter().map(f).sum::<u64>();
    let (acks, acks_lost) = (msum(|m| m.acks), msum(|m| m.acks_lost));
    let (pulls, pulls_lost) = (msum(|m| m.pulls), msum(|m| m.pulls_lost));
    let verdict_word = if verdict.is_clean() { "PASS" } else { "FAIL" };
    println!(
        "crash[{engine}] seed={seed} kills={kills} restarts={restarts} | sends attempted={attempted} \
         acknowledged_2xx={acked} (first try {first_try}) lost_response_then_retried={lost_response} \
         (200 committed before the kill: {retried_200}, 201 not committed: {retried_201}; \
         retries lost again: {retry_lost_again}) stored={stored_count} | acks={acks} \
         (lost {acks_lost}) pulls={pulls} (lost {pulls_lost}) | lost={lost} duplicated={dup} \
         backwards={back} gaps={gaps} unknown={unknown} problems={problems} -> {verdict_word} \
         ({secs:.1} s)",
        engine = engine.name(),
        restarts = starts - 1,
        acked = acknowledged.len(),
        lost = verdict.lost.len(),
        dup = verdict.duplicated.len(),
        back = verdict.backwards.len(),
        gaps = verdict.gaps.len(),
        unknown = verdict.unknown.len(),
        problems = verdict.problems.len(),
        secs = started.elapsed().as_secs_f64(),
    );
    println!("kill windows (ms): {windows:?}");
    if let Ok(path) = std::env::var(RELIABILITY_LOG_VAR) {
        let record = json!({
            "test": "sigkill_during_traffic_loses_and_duplicates_nothing",
            "engine": engine.name(),
            "seed": seed,
            "kills": kills,
            "restarts": starts - 1,
            "kill_windows_ms": windows,
            "sends_attempted": attempted,
            "sends_acknowledged": acknowledged.len(),
            "sends_acknowledged_first_try": first_try,
            "lost_response_then_retried": lost_response,
            "retried_200": retried_200,
            "retried_201": retried_201,
            "retries_lost_again": retry_lost_again,
            "messages_stored": stored_count,
            "acks": acks,
            "acks_lost": acks_lost,
            "pulls": pulls,
            "pulls_lost": pulls_lost,
            "lost": verdict.lost.len(),
            "duplicated": verdict.duplicated.len(),
            "backwards": verdict.backwards.len(),
            "gaps": verdict.gaps.len(),
            "unknown": verdict.unknown.len(),
            "problems": verdict.problems.len(),
            "verdict": verdict_word,
            "seconds": started.elapsed().as_secs_f64(),
        });
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open CHORUS_RELIABILITY_LOG");
        writeln!(file, "{record}").expect("append to CHORUS_RELIABILITY_LOG");
    }

    assert!(
        !log.contains("panicked"),
        "the server panicked; its logs:\n{log}"
    );
    assert!(
        verdict.is_clean(),
        "crash safety broken on {} (seed {seed}): lost {:?}, duplicated {:?}, gaps {:?}, \
         backwards {:?}, unknown {:?}, problems {:?}",
        engine.name(),
        first(&verdict.lost),
        first(&verdict.duplicated),
        first(&verdict.gaps),
        first(&verdict.backwards),
        first(&verdict.unknown),
        first(&verdict.problems),
    );
    assert_eq!(
        lost_response,
        retried_200 + retried_201,
        "every send whose response was lost is answered by exactly one retry"
    );
    assert_eq!(
        acknowledged.len() as u64,
        first_try + retried_200 + retried_201
    );
    assert!(
        attempted > 0 && acks > 0 && pulls > 0,
        "the run did too little to mean anything"
    );
    drop(database);
}

mod sigkill_during_traffic_loses_and_duplicates_nothing {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::sigkill_during_traffic(super::Engine::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(chorus_pg_tests),
        ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
    )]
    async fn postgres() {
        super::sigkill_during_traffic(super::Engine::Postgres).await
    }
}

// ---------------------------------------------------------------------------------------------
// 2. SQLite under 32 concurrent writers (and a writer from outside).
// ---------------------------------------------------------------------------------------------

const WRITERS: usize = 32;
const WRITER_REQUESTS: usize = 3000;
const WRITER_GROUPS: usize = 4;
const OUTSIDE_HOLD: Duration = Duration::from_secs(1);
const OUTSIDE_HOLDS: usize = 3;

struct Outcome {
    kind: &'static str,
    status: Option<u16>,
    body: Value,
    started: Duration,
    ended: Duration,
}

/// Holds `BEGIN IMMEDIATE; INSERT …; (1 s); COMMIT` on the database from a connection of its
/// own, as another process or an operator's sqlite3 shell would. Tells `began` once the lock
/// is held; returns when the hold began and ended, relative to `t0`.
fn hold_write_lock(
    conn: &mut SqliteConnection,
    t0: Instant,
    began: Option<tokio::sync::oneshot::Sender<()>>,
) -> (Duration, Duration) {
    conn.batch_execute("BEGIN IMMEDIATE")
        .expect("outside BEGIN IMMEDIATE");
    let start = t0.elapsed();
    conn.batch_execute("INSERT INTO outside_writer (note) VALUES ('held')")
        .expect("outside insert");
    if let Some(began) = began {
        let _ = began.send(());
    }
    std::thread::sleep(OUTSIDE_HOLD);
    conn.batch_execute("COMMIT").expect("outside COMMIT");
    (start, t0.elapsed())
}

fn outside_connection(path: &str) -> SqliteConnection {
    let mut conn = SqliteConnection::establish(path).expect("outside connection");
    conn.batch_execute(
        "PRAGMA busy_timeout = 5000; \
         CREATE TABLE IF NOT EXISTS outside_writer (id INTEGER PRIMARY KEY, note TEXT);",
    )
    .expect("outside table");
    conn
}

/// `OUTSIDE_HOLDS` holds while the clients write: the first after 300 ms, then one a second.
fn outside_writer(path: String, t0: Instant) -> std::thread::JoinHandle<Vec<(Duration, Duration)>> {
    std::thread::spawn(move || {
        let mut conn = outside_connection(&path);
        let mut holds = Vec::new();
        for i in 0..OUTSIDE_HOLDS {
            std::thread::sleep(Duration::from_millis(if i == 0 { 300 } else { 1000 }));
            holds.push(hold_write_lock(&mut conn, t0, None));
        }
        holds
    })
}

/// With no other traffic, one hold from outside and, while it is held, one ack that moves a
/// cursor and one send. Both should wait out the hold (1 s, below the 5 s busy timeout).
async fn quiet_probe(
    api: &Api,
    path: &str,
    group_id: i64,
    users: &[String],
    t0: Instant,
) -> (Vec<Outcome>, (Duration, Duration)) {
    let (sender, reader, other) = (&users[0], &users[1], &users[2]);
    let started = t0.elapsed();
    let msg_id = match api
        .send(sender, group_id, "probe-before-hold", "probe")
        .await
    {
        Reply::Answered(201, body) => body["msg_id"].as_i64().expect("msg_id"),
        other => panic!("probe send before the hold: {other:?}"),
    };
    let before = Outcome {
        kind: "probe setup send",
        status: Some(201),
        body: json!({"group_id": group_id, "msg_id": msg_id}),
        started,
        ended: t0.elapsed(),
    };
    let (began_tx, began_rx) = tokio::sync::oneshot::channel();
    let path = path.to_owned();
    let holder = std::thread::spawn(move || {
        let mut conn = outside_connection(&path);
        hold_write_lock(&mut conn, t0, Some(began_tx))
    });
    began_rx.await.expect("the outside writer holds the lock");
    let timed = |kind: &'static str, reply: Reply, started: Duration| {
        let (status, body) = match reply {
            Reply::Answered(status, body) => (Some(status), body),
            Reply::Lost(e) => (None, Value::String(e)),
        };
        Outcome {
            kind,
            status,
            body,
            started,
            ended: t0.elapsed(),
        }
    };
    let started = t0.elapsed();
    let ack = api
        .ack(reader, group_id, &json!({ "last_ack_msg_id": msg_id }))
        .await;
    let ack = timed("probe ack", ack, started);
    let started = t0.elapsed();
    let send = api
        .send(other, group_id, "probe-during-hold", "probe")
        .await;
    let send = timed("probe send", send, started);
    let hold = holder.join().expect("outside writer thread");
    (vec![before, ack, send], hold)
}

async fn concurrent_writers(with_outside_writer: bool) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let database = TestDatabase::create(Engine::Sqlite, dir.path()).expect("sqlite");
    let config = ServerConfig {
        data_dir: dir.path().to_path_buf(),
        database_url: database.url.clone(),
        log: "warn",
    };
    let client = http_client();
    let mut server = ServerProcess::spawn(&config, dir.path().join("server.log"));
    server.wait_healthy(&client).await;
    let users: Vec<String> = (0..WRITERS).map(|i| format!("w{i:02}")).collect();
    let api = Api {
        client,
        base: server.base.clone(),
        tokens: tokens_for(&users),
    };
    let others: Vec<&str> = users[1..].iter().map(String::as_str).collect();
    let mut groups = Vec::new();
    for g in 0..WRITER_GROUPS {
        groups.push(api.create_group(&users[0], &format!("g{g}"), &others).await);
    }
    let groups = Arc::new(groups);
    let known: Arc<Vec<AtomicI64>> =
        Arc::new((0..WRITER_GROUPS).map(|_| AtomicI64::new(0)).collect());

    let t0 = Instant::now();
    let outside = with_outside_writer.then(|| outside_writer(database.url.clone(), t0));
    let tasks: Vec<_> = users
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let quota = WRITER_REQUESTS / WRITERS + usize::from(i < WRITER_REQUESTS % WRITERS);
            let (api, user, groups, known) =
                (api.clone(), user.clone(), groups.clone(), known.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::with_capacity(quota);
                for j in 0..quota {
                    let slot = (i + j) % groups.len();
                    let group_id = groups[slot];
                    let last_known = known[slot].load(Ordering::SeqCst);
                    let started = t0.elapsed();
                    let (kind, reply) = if j % 2 == 0 || last_known == 0 {
                        let cmid = format!("{user}-{j}");
                        ("send", api.send(&user, group_id, &cmid, "concurrent").await)
                    } else {
                        let read = (last_known - (j as i64 % 3)).max(0);
                        let body = json!({"last_ack_msg_id": last_known, "last_read_msg_id": read});
                        ("ack", api.ack(&user, group_id, &body).await)
                    };
                    let ended = t0.elapsed();
                    let (status, body) = match reply {
                        Reply::Answered(status, body) => (Some(status), body),
                        Reply::Lost(e) => (None, Value::String(e)),
                    };
                    if kind == "send" && status == Some(201) {
                        let msg_id = body["msg_id"].as_i64().expect("msg_id");
                        known[slot].fetch_max(msg_id, Ordering::SeqCst);
                    }
                    outcomes.push(Outcome {
                        kind,
                        status,
                        body,
                        started,
                        ended,
                    });
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.expect("writer task"));
    }
    let elapsed = t0.elapsed();
    let mut holds = outside.map(|h| h.join().expect("outside writer thread"));
    if let Some(holds) = holds.as_mut() {
        let (probes, hold) = quiet_probe(&api, &database.url, groups[0], &users, t0).await;
        outcomes.extend(probes);
        holds.push(hold);
    }

    // Every 201 stored once, ids contiguous.
    let mut id_problems = Vec::new();
    for (slot, &group_id) in groups.iter().enumerate() {
        let (messages, last_msg_id) = api.pull_all(&users[0], group_id).await;
        let created = outcomes
            .iter()
            .filter(|o| o.kind.ends_with("send") && o.status == Some(201))
            .filter(|o| o.body["group_id"].as_i64() == Some(group_id))
            .count();
        let ids: Vec<i64> = messages.iter().map(|m| m.msg_id).collect();
        if ids != (1..=last_msg_id).collect::<Vec<i64>>() || ids.len() != created {
            id_problems.push(format!(
                "group {slot}: {} stored, {created} created, last_msg_id {last_msg_id}",
                ids.len()
            ));
        }
    }
    server.kill();
    let log = server.log();

    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for o in &outcomes {
        let status = o.status.map_or("lost".to_owned(), |s| s.to_string());
        *statuses.entry(format!("{} {status}", o.kind)).or_default() += 1;
    }
    let failures: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.status.is_some_and(|s| (200..300).contains(&s)))
        .map(|o| {
            format!(
                "{} at {:?} -> {:?} after {:?}: {}",
                o.kind,
                o.started,
                o.status,
                o.ended - o.started,
                o.body
            )
        })
        .collect();
    let slowest = outcomes
        .iter()
        .map(|o| o.ended - o.started)
        .max()
        .unwrap_or_default();
    let overlapping = holds.as_ref().map(|holds| {
        outcomes
            .iter()
            .filter(|o| holds.iter().any(|&(b, e)| o.started < e && o.ended > b))
            .count()
    });
    let locked_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("database is locked"))
        .collect();
    println!(
        "sqlite writers={WRITERS} requests={} outside_writer={with_outside_writer} holds={holds:?} \
         overlapping_holds={overlapping:?} elapsed={elapsed:?} slowest={slowest:?} \
         statuses={statuses:?} non_2xx={} locked_log_lines={}",
        outcomes.len(),
        failures.len(),
        locked_lines.len(),
    );
    let probes = if with_outside_writer { 3 } else { 0 };
    assert_eq!(outcomes.len(), WRITER_REQUESTS + probes);
    if let Some(overlapping) = overlapping {
        assert!(
            overlapping > 0,
            "no request overlapped the outside write transaction: the variant tested nothing"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} requests were not 2xx ({statuses:?}); first ones:\n{}\nlog lines with \
         \"database is locked\": {}\n{}",
        failures.len(),
        outcomes.len(),
        failures[..failures.len().min(5)].join("\n"),
        locked_lines.len(),
        locked_lines[..locked_lines.len().min(3)].join("\n"),
    );
    assert!(
        locked_lines.is_empty(),
        "the server logged \"database is locked\" {} times:\n{}",
        locked_lines.len(),
        locked_lines[..locked_lines.len().min(3)].join("\n")
    );
    assert!(id_problems.is_empty(), "{id_problems:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_never_see_database_locked() {
    concurrent_writers(false).await
}

/// Another process holds a write transaction for 1 s while clients write. With a 5 s busy
/// timeout the expected behaviour is slower 2xx answers (or a 503 after a bounded wait), never
/// a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_with_outside_writer_never_see_database_locked() {
    concurrent_writers(true).await
}
