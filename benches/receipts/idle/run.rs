//! One idle run: the release binary as one or more child processes, 10,000 users (or as many
//! as asked) each with a waiting long-poll, the servers' memory while they wait, and one
//! message waking one group.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use super::binary::build_server_binary;
use super::holder::{start_holders, Holders, PollSpec};
use super::raw_poll::PollAnswer;
use super::{
    IdleResult, IDLE_GROUP_SIZE, IDLE_OPEN_LIMIT, IDLE_SETTLE_LIMIT, IDLE_SETUP_CONCURRENCY,
    IDLE_STEADY_AFTER, IDLE_WAKE_LIMIT,
};
use crate::api::{create_group, feed_cursor, send_message, CountingHttp};
use crate::measure::{ms, signed_ms, Errors};
use crate::server::bench_database;
use crate::support::child_server::{ChildConfig, ChildServer};
use crate::support::engine::Engine;
use crate::support::proc_status::{proc_status_kib, rss_kib};
use crate::support::scratch_db::ScratchDb;
use crate::support::tokens::TokenMint;

/// The server processes and what they run on, kept alive together. Set-up and the waking
/// message go through the first.
struct Servers {
    processes: Vec<ChildServer>,
    http: CountingHttp,
    _db: Option<ScratchDb>,
    _data_dirs: Vec<tempfile::TempDir>,
}

impl Servers {
    fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(ChildServer::pid).collect()
    }

    fn ports(&self) -> Vec<u16> {
        self.processes.iter().map(|s| s.port).collect()
    }
}

/// `VmRSS` summed over `pids`, KiB.
fn total_rss_kib(pids: &[u32]) -> u64 {
    pids.iter().map(|pid| rss_kib(*pid)).sum()
}

/// A `/proc/<pid>/status` field (a size in KiB or a count) summed over `pids`.
fn total_status(pids: &[u32], field: &str) -> u64 {
    pids.iter()
        .map(|pid| proc_status_kib(*pid, field).unwrap_or(0))
        .sum()
}

/// The users and what they need to poll: a token and a `/v1/sync` cursor each.
struct Users {
    tokens: Arc<Vec<String>>,
    groups: Vec<i64>,
    cursors: Vec<String>,
}

/// The waiting polls: the processes that hold them and their answers, and how the opening
/// went.
struct OpenPolls {
    holders: Holders,
    _files: tempfile::TempDir,
    started: Instant,
    secs: f64,
    opened: usize,
}

pub async fn run_idle(
    engine: Engine,
    polls: usize,
    instances: usize,
) -> Result<IdleResult, String> {
    let servers = start_servers(engine, polls, instances).await?;
    let pids = servers.pids();
    let rss_start = total_rss_kib(&pids);
    let users = create_users(&servers.http, polls).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = total_rss_kib(&pids);
    let threads_before = total_status(&pids, "Threads:");

    let mut polls = open_polls(&servers.ports(), &users).await?;
    eprintln!(
        "idle: {} requests written; waiting for the servers' RSS to settle",
        polls.opened
    );
    wait_for_rss_to_settle(&pids).await;
    let rss_waiting = total_rss_kib(&pids);
    let threads_waiting = total_status(&pids, "Threads:");
    // Threads tokio started for the burst of database reads idle out after 10 s; a later
    // sample shows the steady state of the same waiting polls.
    let steady_at = polls.started + Duration::from_secs(polls.secs as u64) + IDLE_STEADY_AFTER;
    tokio::time::sleep_until(steady_at.into()).await;
    let rss_steady = total_rss_kib(&pids);
    let threads_steady = total_status(&pids, "Threads:");
    let steady_secs = steady_at.duration_since(polls.started).as_secs_f64();
    let hwm = total_status(&pids, "VmHWM:");
    let client_rss_growth = polls.holders.rss_growth_kib.load(Ordering::Relaxed);
    let early = early_answers(&mut polls.holders.answers);

    let errors = Errors::default();
    let wake = wake_one_group(&servers.http, &users, &mut polls.holders.answers, &errors).await;
    // Once, at the end: a holder that failed to open or exited early is reported here.
    for problem in polls.holders.problems() {
        errors.add(problem);
    }
    let holders = polls.holders.count();
    let (opened, open_secs) = (polls.opened, polls.secs);
    // The holders go first: with the servers gone first, every poll they hold would fail.
    drop(polls);
    eprintln!("idle: stopping the servers");
    drop(servers);
    Ok(IdleResult {
        engine,
        instances,
        holders,
        polls: users.cursors.len(),
        rss_start,
        rss_before,
        rss_waiting,
        rss_steady,
        steady_secs,
        threads: [threads_before, threads_waiting, threads_steady],
        hwm,
        client_rss_growth,
        opened,
        open_secs,
        early,
        send_ms: wake.send_ms,
        wake: wake.samples,
        others_woken: wake.others_woken,
        errors: errors.text(),
    })
}

/// The release binary with the production defaults, but room for every poll: `instances`
/// processes on one database (PostgreSQL when more than one), each in a data directory of
/// its own.
async fn start_servers(engine: Engine, polls: usize, instances: usize) -> Result<Servers, String> {
    let binary = build_server_binary()?;
    let db = match engine {
        Engine::Postgres => Some(bench_database(engine)?),
        Engine::Sqlite => None,
    };
    let max_waiters = polls.max(10_000).saturating_mul(2).to_string();
    let client = crate::support::http::client(Duration::from_secs(5));
    let (mut servers, mut data_dirs) = (Vec::new(), Vec::new());
    for _ in 0..instances {
        let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let config = ChildConfig {
            binary: &binary,
            data_dir: data_dir.path(),
            database_url: db.as_ref().map(ScratchDb::url),
            env: &[
                ("CHORUS_LONGPOLL_MAX_TOTAL", &max_waiters),
                ("CHORUS_LOG", "warn"),
            ],
        };
        let mut server = ChildServer::spawn(&config, data_dir.path().join("server.log"))?;
        server
            .wait_healthy(&client, Duration::from_secs(30))
            .await?;
        servers.push(server);
        data_dirs.push(data_dir);
    }
    let http = CountingHttp::new(servers[0].base.clone(), Arc::new(AtomicU64::new(0)));
    Ok(Servers {
        processes: servers,
        http,
        _db: db,
        _data_dirs: data_dirs,
    })
}

/// `polls` users in groups of [`IDLE_GROUP_SIZE`], and a `/v1/sync` cursor each.
async fn create_users(http: &CountingHttp, polls: usize) -> Result<Users, String> {
    eprintln!("idle: {polls} users in groups of {IDLE_GROUP_SIZE}");
    let mint = TokenMint::new();
    let users: Vec<String> = (0..polls).map(|i| format!("idle{i:05}")).collect();
    let tokens: Arc<Vec<String>> = Arc::new(mint.tokens(&users));
    let groups: Vec<Result<i64, String>> = stream::iter(0..polls / IDLE_GROUP_SIZE)
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
    let cursors: Vec<Result<String, String>> = stream::iter(0..polls)
        .map(|i| {
            let (http, tokens) = (http.clone(), tokens.clone());
            async move { feed_cursor(&http, &tokens[i], "/v1/sync").await }
        })
        .buffered(IDLE_SETUP_CONCURRENCY)
        .collect()
        .await;
    let cursors: Vec<String> = cursors.into_iter().collect::<Result<_, _>>()?;
    Ok(Users {
        tokens,
        groups,
        cursors,
    })
}

/// One `GET /v1/sync` per user on its own connection, user i to server i mod the servers'
/// count, held by child processes; returns once every holder has written its requests or
/// [`IDLE_OPEN_LIMIT`] has passed.
async fn open_polls(ports: &[u16], users: &Users) -> Result<OpenPolls, String> {
    let polls = users.cursors.len();
    let specs: Vec<PollSpec> = users
        .cursors
        .iter()
        .enumerate()
        .map(|(user, cursor)| PollSpec {
            user,
            port: ports[user % ports.len()],
            token: users.tokens[user].clone(),
            cursor: cursor.clone(),
        })
        .collect();
    let files = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let started = Instant::now();
    let holders = start_holders(&specs, files.path())?;
    eprintln!(
        "idle: opening {polls} long-polls from {} processes",
        holders.count()
    );
    // Each holder stops waiting at the open limit itself; a little more for it to say so.
    let limit = IDLE_OPEN_LIMIT + Duration::from_secs(5);
    while holders.done_opening.load(Ordering::Relaxed) < holders.count()
        && started.elapsed() < limit
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(OpenPolls {
        opened: holders.opened.load(Ordering::Relaxed),
        holders,
        _files: files,
        started,
        secs: started.elapsed().as_secs_f64(),
    })
}

/// Until three samples 500 ms apart agree within 1% (after at least 2 s), or
/// [`IDLE_SETTLE_LIMIT`].
async fn wait_for_rss_to_settle(pids: &[u32]) {
    let settle_start = Instant::now();
    let mut samples: Vec<u64> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        samples.push(total_rss_kib(pids));
        let last3 = &samples[samples.len().saturating_sub(3)..];
        let (lo, hi) = (
            *last3.iter().min().unwrap_or(&0),
            *last3.iter().max().unwrap_or(&0),
        );
        let settled = last3.len() == 3 && (hi - lo) * 100 <= hi;
        if (settled && settle_start.elapsed() >= Duration::from_secs(2))
            || settle_start.elapsed() >= IDLE_SETTLE_LIMIT
        {
            return;
        }
    }
}

/// Polls that answered before any message was sent: none should have.
fn early_answers(answers: &mut UnboundedReceiver<PollAnswer>) -> Vec<String> {
    let mut early = Vec::new();
    while let Ok(answer) = answers.try_recv() {
        let what = match &answer.status {
            Ok(status) => format!("{status}"),
            Err(e) => e.clone(),
        };
        early.push(format!("user {}: {what}", answer.user));
    }
    early
}

/// How one message woke its group's polls.
struct Wake {
    send_ms: f64,
    /// Per woken member, from just before the send to its poll's answer.
    samples: Vec<f64>,
    /// Polls of other groups that answered meanwhile.
    others_woken: usize,
}

/// One message to the first group; times its members' polls, and counts any other poll
/// that answers meanwhile or shortly after.
async fn wake_one_group(
    http: &CountingHttp,
    users: &Users,
    answers: &mut UnboundedReceiver<PollAnswer>,
    errors: &Errors,
) -> Wake {
    eprintln!("idle: one message to group 1; timing its members' polls");
    let woken_users = 0..IDLE_GROUP_SIZE;
    let t0 = Instant::now();
    let send = send_message(http, &users.tokens[0], users.groups[0], "idle-wake").await;
    let send_ms = ms(t0.elapsed());
    if let Err(label) = send {
        errors.add(format!("send: {label}"));
    }
    let mut wake = Wake {
        send_ms,
        samples: Vec::new(),
        others_woken: 0,
    };
    let count = |answer: PollAnswer, wake: &mut Wake| {
        if woken_users.contains(&answer.user) {
            wake.samples.push(signed_ms(t0, answer.at));
        } else {
            wake.others_woken += 1;
        }
    };
    let wake_deadline = t0 + IDLE_WAKE_LIMIT;
    while wake.samples.len() < IDLE_GROUP_SIZE {
        let left = wake_deadline.saturating_duration_since(Instant::now());
        let Ok(Some(answer)) = tokio::time::timeout(left, answers.recv()).await else {
            break;
        };
        if let Err(e) = &answer.status {
            errors.add(format!("poll: {e}"));
        } else if answer.status != Ok(200) {
            errors.add(format!("poll: {:?}", answer.status));
        }
        count(answer, &mut wake);
    }
    // Anything else that answers shortly after was woken by mistake.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(answer) = answers.try_recv() {
        count(answer, &mut wake);
    }
    wake
}
