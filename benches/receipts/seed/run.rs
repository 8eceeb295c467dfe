//! One storm on one engine: the group and its online members, the storm itself, and what it
//! cost in requests, rows and CPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rows::{pg_growth, row_counts, settled_pg_stats, PgRows, RowCounts};
use super::storm::{
    storm_member, storm_sender_poll, storm_sender_send, Pacing, SeedShared, SendRun,
};
use super::wake::ack_to_wake;
use super::{SEED_EARLIER_MESSAGES, SEED_MEMBERS, SEED_ONLINE, SEED_TIME_LIMIT};
use crate::api::{create_group, feed_cursor, send_message, CountingHttp};
use crate::cpu::{backend_pids, cpu_breakdown, cpu_sample};
use crate::measure::{summarize, Summary};
use crate::server::{bench_database, Server};
use crate::support::engine::Engine;
use crate::support::scratch_db::analyze;
use crate::support::tokens::TokenMint;

pub struct SeedResult {
    pub engine: Engine,
    pub pacing: Pacing,
    pub sends: usize,
    pub send_secs: f64,
    pub send: Option<Summary>,
    pub acks: usize,
    pub storm_secs: f64,
    pub wake: Option<Summary>,
    pub wake_early: usize,
    pub wake_missed: usize,
    pub requests: u64,
    pub kinds: [u64; 5],
    pub members_done: usize,
    pub rows: RowCounts,
    pub pg_rows: Option<PgRows>,
    /// CPU seconds during the storm, as [`cpu_breakdown`] splits them, and its wall time.
    pub cpu: [f64; 5],
    pub wall: f64,
    pub errors: String,
}

/// The storm's group and clients before the first message.
struct Fixture {
    group: i64,
    owner_token: String,
    sender_cursor: String,
    /// Each online member's token and `/v1/sync` cursor.
    online: Vec<(String, String)>,
}

/// What the server and database did during the storm.
struct Cost {
    requests: u64,
    wall: f64,
    cpu: [f64; 5],
    rows: RowCounts,
    pg_rows: Option<PgRows>,
}

pub async fn run_seed(engine: Engine, pacing: Pacing) -> Result<SeedResult, String> {
    let db = bench_database(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let server = Server::start(db.url(), &requests).await?;
    let fixture = prepare(&server.http).await?;
    let mut conn = server.direct_connection();
    analyze(&mut conn);
    let rows_before = row_counts(&mut conn);
    let pg_before = settled_pg_stats(engine, &mut conn).await;

    eprintln!("seed: {} storm, {}", engine.title(), pacing.text());
    let cpu_before = cpu_sample(&backend_pids(&mut conn));
    let cpu_started = Instant::now();
    requests.store(0, Ordering::Relaxed);
    let (shared, send_run) = storm(&server.http, fixture, pacing).await?;
    let requests_made = requests.load(Ordering::Relaxed);
    let wall = cpu_started.elapsed().as_secs_f64();
    let cpu = cpu_breakdown(&cpu_before, &cpu_sample(&backend_pids(&mut conn)));
    let rows = row_counts(&mut conn).since(rows_before);
    let pg_rows = pg_growth(pg_before, settled_pg_stats(engine, &mut conn).await);
    drop(conn);
    server.stop().await;
    drop(db);
    let cost = Cost {
        requests: requests_made,
        wall,
        cpu,
        rows,
        pg_rows,
    };
    Ok(result(engine, pacing, &shared, send_run, cost))
}

/// The group of [`SEED_MEMBERS`], a `/v1/sync` cursor for each online member and a
/// `/v1/receipts` cursor for the sender, after [`SEED_EARLIER_MESSAGES`] in a group of
/// someone else's.
async fn prepare(http: &CountingHttp) -> Result<Fixture, String> {
    let mint = TokenMint::new();
    let earlier_token = mint.token("earlier-owner");
    let earlier = create_group(http, &earlier_token, "earlier", &[]).await?;
    for i in 0..SEED_EARLIER_MESSAGES {
        send_message(http, &earlier_token, earlier, &format!("earlier-{i}")).await?;
    }
    let owner_token = mint.token("storm-owner");
    let members: Vec<String> = (0..SEED_MEMBERS - 1)
        .map(|i| format!("storm-m{i:03}"))
        .collect();
    let group = create_group(http, &owner_token, "storm", &members).await?;
    let mut online = Vec::new();
    for member in &members[..SEED_ONLINE] {
        let t = mint.token(member);
        let cursor = feed_cursor(http, &t, "/v1/sync").await?;
        online.push((t, cursor));
    }
    let sender_cursor = feed_cursor(http, &owner_token, "/v1/receipts").await?;
    http.warm_up(2 * SEED_ONLINE + 2).await;
    Ok(Fixture {
        group,
        owner_token,
        sender_cursor,
        online,
    })
}

/// Every online member and the sender's receipt poll wait; then the sender sends. Returns
/// once every client is done or the time limit has passed.
async fn storm(
    http: &CountingHttp,
    fixture: Fixture,
    pacing: Pacing,
) -> Result<(Arc<SeedShared>, SendRun), String> {
    let shared = Arc::new(SeedShared::default());
    let deadline = Instant::now() + SEED_TIME_LIMIT;
    let group = fixture.group;
    let mut tasks = Vec::new();
    for (t, cursor) in fixture.online {
        let member = storm_member(http.clone(), t, group, cursor, shared.clone(), deadline);
        tasks.push(tokio::spawn(member));
    }
    tasks.push(tokio::spawn(storm_sender_poll(
        http.clone(),
        fixture.owner_token.clone(),
        fixture.sender_cursor,
        shared.clone(),
        deadline,
    )));
    // Let every long-poll park before the first message.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sender = tokio::spawn(storm_sender_send(
        http.clone(),
        fixture.owner_token,
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
    Ok((shared, send_run))
}

fn result(
    engine: Engine,
    pacing: Pacing,
    shared: &SeedShared,
    send_run: SendRun,
    cost: Cost,
) -> SeedResult {
    let acks = std::mem::take(&mut *shared.acks.lock().unwrap());
    let answers = std::mem::take(&mut *shared.answers.lock().unwrap());
    let (samples, missed) = ack_to_wake(&acks, &answers);
    let early = samples.iter().filter(|s| **s < 0.0).count();
    let clamped: Vec<f64> = samples.iter().map(|s| s.max(0.0)).collect();
    let last_ack = acks.iter().map(|a| a.at).max().unwrap_or(send_run.finished);
    let k = &shared.kinds;
    SeedResult {
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
        requests: cost.requests,
        kinds: [
            k.sends.load(Ordering::Relaxed),
            k.syncs.load(Ordering::Relaxed),
            k.pulls.load(Ordering::Relaxed),
            k.acks.load(Ordering::Relaxed),
            k.receipt_polls.load(Ordering::Relaxed),
        ],
        members_done: shared.members_done.load(Ordering::Relaxed),
        rows: cost.rows,
        pg_rows: cost.pg_rows,
        cpu: cost.cpu,
        wall: cost.wall,
        errors: shared.errors.text(),
    }
}
