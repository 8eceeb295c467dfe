//! One idle run: the release binary as a child process, 10,000 users each with a waiting
//! long-poll, the server's memory while they wait, and one message waking one group.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use super::binary::build_server_binary;
use super::raw_poll::{raw_poll, PollAnswer};
use super::{
    IdleResult, IDLE_CONNECT_CONCURRENCY, IDLE_GROUP_SIZE, IDLE_OPEN_LIMIT, IDLE_POLL_TIMEOUT_S,
    IDLE_SETTLE_LIMIT, IDLE_SETUP_CONCURRENCY, IDLE_STEADY_AFTER, IDLE_WAKE_LIMIT,
};
use crate::api::{create_group, feed_cursor, send_message, CountingHttp};
use crate::measure::{ms, signed_ms, Errors};
use crate::server::bench_database;
use crate::support::child_server::{ChildConfig, ChildServer};
use crate::support::engine::Engine;
use crate::support::proc_status::{proc_status_kib, rss_kib};
use crate::support::scratch_db::ScratchDb;
use crate::support::tokens::TokenMint;

/// The server process and what it runs on, kept alive together.
struct Child {
    server: ChildServer,
    http: CountingHttp,
    _db: Option<ScratchDb>,
    _data_dir: tempfile::TempDir,
}

/// The users and what they need to poll: a token and a `/v1/sync` cursor each.
struct Users {
    tokens: Arc<Vec<String>>,
    groups: Vec<i64>,
    cursors: Vec<String>,
}

/// The waiting polls: their tasks and answers, and how the opening went.
struct OpenPolls {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    answers: UnboundedReceiver<PollAnswer>,
    started: Instant,
    secs: f64,
    opened: usize,
}

pub async fn run_idle(engine: Engine, polls: usize) -> Result<IdleResult, String> {
    let child = start_child(engine, polls).await?;
    let pid = child.server.pid();
    let rss_start = rss_kib(pid);
    let users = create_users(&child.http, polls).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kib(pid);
    let threads_before = proc_status_kib(pid, "Threads:").unwrap_or(0);
    let client_rss_before = rss_kib(std::process::id());

    let mut polls = open_polls(child.server.port, &users).await;
    eprintln!(
        "idle: {} requests written; waiting for the server's RSS to settle",
        polls.opened
    );
    wait_for_rss_to_settle(pid).await;
    let rss_waiting = rss_kib(pid);
    let threads_waiting = proc_status_kib(pid, "Threads:").unwrap_or(0);
    // Threads tokio started for the burst of database reads idle out after 10 s; a later
    // sample shows the steady state of the same waiting polls.
    let steady_at = polls.started + Duration::from_secs(polls.secs as u64) + IDLE_STEADY_AFTER;
    tokio::time::sleep_until(steady_at.into()).await;
    let rss_steady = rss_kib(pid);
    let threads_steady = proc_status_kib(pid, "Threads:").unwrap_or(0);
    let steady_secs = steady_at.duration_since(polls.started).as_secs_f64();
    let hwm = proc_status_kib(pid, "VmHWM:").unwrap_or(0);
    let client_rss_growth = rss_kib(std::process::id()).saturating_sub(client_rss_before);
    let early = early_answers(&mut polls.answers);

    let errors = Errors::default();
    let wake = wake_one_group(&child.http, &users, &mut polls.answers, &errors).await;
    eprintln!("idle: stopping the server");
    drop(child);
    for poll in &polls.tasks {
        poll.abort();
    }
    Ok(IdleResult {
        engine,
        polls: users.cursors.len(),
        rss_start,
        rss_before,
        rss_waiting,
        rss_steady,
        steady_secs,
        threads: [threads_before, threads_waiting, threads_steady],
        hwm,
        client_rss_growth,
        opened: polls.opened,
        open_secs: polls.secs,
        early,
        send_ms: wake.send_ms,
        wake: wake.samples,
        others_woken: wake.others_woken,
        errors: errors.text(),
    })
}

/// The release binary with the production defaults, but room for every poll.
async fn start_child(engine: Engine, polls: usize) -> Result<Child, String> {
    let binary = build_server_binary()?;
    let db = match engine {
        Engine::Postgres => Some(bench_database(engine)?),
        Engine::Sqlite => None,
    };
    let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let max_waiters = polls.max(10_000).saturating_mul(2).to_string();
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
    let http = CountingHttp::new(server.base.clone(), Arc::new(AtomicU64::new(0)));
    let client = crate::support::http::client(Duration::from_secs(5));
    server
        .wait_healthy(&client, Duration::from_secs(30))
        .await?;
    Ok(Child {
        server,
        http,
        _db: db,
        _data_dir: data_dir,
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

/// One `GET /v1/sync` per user on its own connection; returns once all are written or
/// [`IDLE_OPEN_LIMIT`] has passed.
async fn open_polls(port: u16, users: &Users) -> OpenPolls {
    let polls = users.cursors.len();
    eprintln!("idle: opening {polls} long-polls");
    let permits = Arc::new(tokio::sync::Semaphore::new(IDLE_CONNECT_CONCURRENCY));
    let opened = Arc::new(AtomicUsize::new(0));
    let (answers_tx, answers) = tokio::sync::mpsc::unbounded_channel::<PollAnswer>();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(polls);
    for (user, cursor) in users.cursors.iter().enumerate() {
        let request = format!(
            "GET /v1/sync?cursor={cursor}&timeout_s={IDLE_POLL_TIMEOUT_S} HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            users.tokens[user]
        );
        let (permits, opened, tx) = (permits.clone(), opened.clone(), answers_tx.clone());
        tasks.push(tokio::spawn(async move {
            let status = raw_poll(port, request, permits, opened).await;
            let _ = tx.send(PollAnswer {
                user,
                at: Instant::now(),
                status,
            });
        }));
    }
    drop(answers_tx);
    while opened.load(Ordering::Relaxed) < polls && started.elapsed() < IDLE_OPEN_LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    OpenPolls {
        tasks,
        answers,
        started,
        secs: started.elapsed().as_secs_f64(),
        opened: opened.load(Ordering::Relaxed),
    }
}

/// Until three samples 500 ms apart agree within 1% (after at least 2 s), or
/// [`IDLE_SETTLE_LIMIT`].
async fn wait_for_rss_to_settle(pid: u32) {
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
