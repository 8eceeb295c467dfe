//! Waking phones while the push service is down: sends and acks with the push service healthy
//! and with it hanging (it takes each connection and never answers), side by side in one run,
//! and the server's resident memory over a minute of hanging under steady traffic.
//!
//! The server is the `chorus` binary cargo built for this bench (bench profile = release) as
//! a child process, so the memory read is the server's own, not the bench's or the
//! receiver's. It runs with the production push settings (grace 5 s, interval 10 s, timeout
//! 5 s, backoff up to 60 s, retries for 15 min) on the engine's database. A 200-member group
//! has 160 phones with push targets that never ack; one sender and one acker (an online
//! member acking the newest message) each make a request every [`PACE`]: steady traffic, not
//! a saturating load, so the latencies show what the push job costs a request rather than
//! queueing behind the bench's own clients.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus::config::Settings;
use chorus::db::AnyConnection;
use diesel::prelude::*;
use serde_json::json;

use crate::args::EngineSetup;
use crate::push::scale;
use crate::report::EngineReport;
use crate::requests::{expect_empty, expect_json};
use crate::runner::Measured;
use crate::seed::{seed_group, seed_push_targets, users};
use crate::support::child_server::{test_binary, ChildConfig, ChildServer};
use crate::support::http::Http;
use crate::support::proc_status::{mib, proc_status_kib, rss_kib};
use crate::support::push_receiver::{Behaviour, PushReceiver};
use crate::support::scratch_db::{analyze, ScratchDb};
use crate::support::tokens::TokenMint;
use crate::REQUEST_TIMEOUT;

const SECRET: &str = "bench-push-secret-bench-push-secret-0123";
const MEMBERS: usize = 200;
const PHONES: usize = 160;
/// Each client's request rate: one every 50 ms, 20 per second.
const PACE: Duration = Duration::from_millis(50);
/// Traffic before the healthy phase is measured: past the grace period and the first round
/// of notifications, so the push job is in its steady state.
const WARM_UP: Duration = Duration::from_secs(10);
const HEALTHY: Duration = Duration::from_secs(30);
const HANGING: Duration = Duration::from_secs(60);
const RSS_EVERY: Duration = Duration::from_secs(5);

/// A phase's length under `CHORUS_BENCH_PUSH_SCALE` (a smoke run), at least the pace.
fn scaled(d: Duration) -> Duration {
    (d / scale() as u32).max(PACE)
}

/// The server process, its database, and what the bench reaches them with.
struct Child {
    server: ChildServer,
    http: Http,
    conn: AnyConnection,
    _db: ScratchDb,
    _dir: tempfile::TempDir,
}

/// What one phase of steady traffic measured, and the server's RSS every [`RSS_EVERY`].
struct Phase {
    sends: Measured,
    acks: Measured,
    rss_kib: Vec<u64>,
}

pub async fn bench(setup: EngineSetup, report: &mut EngineReport) {
    let push = PushReceiver::start(SECRET);
    let mut child = match start_child(setup, &push.url).await {
        Ok(child) => child,
        Err(e) => {
            report.notes.push(format!("push outage: skipped: {e}"));
            return;
        }
    };
    eprintln!("push outage: a group of {MEMBERS}, {PHONES} phones offline, steady traffic");
    let everyone = users("outage", MEMBERS);
    let group = seed_group(&mut child.conn, "push outage", &everyone);
    seed_push_targets(&mut child.conn, &everyone[1..=PHONES]);
    analyze(&mut child.conn);
    let mint = TokenMint::new();
    let traffic = Traffic {
        http: child.http.clone(),
        group,
        sender: Arc::new(mint.token(&everyone[0])),
        acker: Arc::new(mint.token(&everyone[MEMBERS - 1])),
        latest: Arc::new(AtomicI64::new(0)),
    };
    let pid = child.server.pid();
    traffic.run("warm-up", scaled(WARM_UP), pid).await;
    let pushed_before = push.received().len();
    let healthy = traffic.run("healthy", scaled(HEALTHY), pid).await;
    let pushed_healthy = push.received().len() - pushed_before;
    eprintln!(
        "push outage: the push service hangs for {:?}",
        scaled(HANGING)
    );
    push.set(Behaviour::Hang);
    let hanging = traffic.run("hanging", scaled(HANGING), pid).await;
    let attempts = push.received().len() - pushed_before - pushed_healthy;
    let outage = Outage {
        pushed_healthy,
        attempts,
        pending: pending_notifications(&mut child.conn),
        hwm_kib: proc_status_kib(pid, "VmHWM:").unwrap_or(0),
    };
    report.outage(&healthy, &hanging, &outage);
}

async fn start_child(setup: EngineSetup, push_url: &str) -> Result<Child, String> {
    let db = ScratchDb::for_bench(setup.engine())?;
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let sync = setup.sqlite_sync().pragma().to_lowercase();
    let env = [
        ("CHORUS_LOG", "warn"),
        ("CHORUS_POOL_SIZE", "8"),
        ("CHORUS_SQLITE_SYNC", sync.as_str()),
        ("CHORUS_PUSH_URL", push_url),
        ("CHORUS_PUSH_SECRET", SECRET),
    ];
    let config = ChildConfig {
        binary: test_binary(),
        data_dir: dir.path(),
        database_url: Some(db.url()),
        env: &env,
    };
    let mut server = ChildServer::spawn(&config, dir.path().join("server.log"))?;
    let http = Http::new(server.base.clone(), REQUEST_TIMEOUT);
    server
        .wait_healthy(&http.client, Duration::from_secs(60))
        .await?;
    // After the server's migrations: the bench seeds the tables they made.
    let conn = direct_connection(db.url(), setup)?;
    Ok(Child {
        server,
        http,
        conn,
        _db: db,
        _dir: dir,
    })
}

fn direct_connection(url: &str, setup: EngineSetup) -> Result<AnyConnection, String> {
    let mut settings = Settings::defaults();
    settings.database_url = Some(url.to_owned());
    settings.sqlite_sync = setup.sqlite_sync();
    let db = settings.db_settings().map_err(|e| e.to_string())?;
    chorus::db::connect_once(&db).map_err(|e| format!("a direct database connection: {e}"))
}

/// One sender and one acker, each paced at [`PACE`].
struct Traffic {
    http: Http,
    group: i64,
    sender: Arc<String>,
    acker: Arc<String>,
    /// The newest message id a send returned: what the acker acks.
    latest: Arc<AtomicI64>,
}

impl Traffic {
    /// Runs both clients for `lasting`, reading the server's RSS meanwhile.
    async fn run(&self, phase: &'static str, lasting: Duration, pid: u32) -> Phase {
        let deadline = Instant::now() + lasting;
        let (http, group, token, latest) = self.parts(&self.sender);
        let sends = tokio::spawn(paced(deadline, move |i| {
            let body = json!({"client_msg_id": format!("{phase}-{i}"), "content": crate::CONTENT});
            let request = http.post(&format!("/v1/groups/{group}/messages"), &token, &body);
            let latest = latest.clone();
            async move {
                let sent = expect_json(request, 201).await?;
                latest.fetch_max(sent["msg_id"].as_i64().unwrap_or(0), Ordering::Relaxed);
                Ok(1)
            }
        }));
        let (http, group, token, latest) = self.parts(&self.acker);
        let acks = tokio::spawn(paced(deadline, move |_| {
            let body = json!({"last_ack_msg_id": latest.load(Ordering::Relaxed).max(1)});
            expect_empty(
                http.post(&format!("/v1/groups/{group}/ack"), &token, &body),
                200,
            )
        }));
        let mut rss = Vec::new();
        while Instant::now() < deadline {
            rss.push(rss_kib(pid));
            tokio::time::sleep(RSS_EVERY.min(deadline - Instant::now())).await;
        }
        rss.push(rss_kib(pid));
        Phase {
            sends: sends.await.expect("the sender panicked"),
            acks: acks.await.expect("the acker panicked"),
            rss_kib: rss,
        }
    }

    fn parts(&self, token: &Arc<String>) -> (Http, i64, Arc<String>, Arc<AtomicI64>) {
        (
            self.http.clone(),
            self.group,
            token.clone(),
            self.latest.clone(),
        )
    }
}

/// Calls `op(i)` once every [`PACE`] until `deadline`, one call at a time (a call that takes
/// longer than the pace delays the next, it does not pile up), and measures each.
async fn paced<F, Fut>(deadline: Instant, op: F) -> Measured
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    let mut ticker = tokio::time::interval(PACE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut measured = Measured::default();
    let mut i = 0;
    while Instant::now() < deadline {
        ticker.tick().await;
        let t0 = Instant::now();
        let outcome = op(i).await;
        measured.record(t0.elapsed(), outcome);
        i += 1;
    }
    measured.elapsed = started.elapsed();
    measured
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// Notifications stored and not yet delivered: where an outage's backlog lives.
fn pending_notifications(conn: &mut AnyConnection) -> i64 {
    let query = "SELECT COUNT(*) AS n FROM push_targets WHERE pending_key IS NOT NULL";
    let rows: Vec<Count> = diesel::sql_query(query)
        .load(conn)
        .expect("count pending notifications");
    rows.first().map_or(0, |r| r.n)
}

/// What the outage left behind.
struct Outage {
    pushed_healthy: usize,
    attempts: usize,
    pending: i64,
    hwm_kib: u64,
}

impl EngineReport {
    fn outage(&mut self, healthy: &Phase, hanging: &Phase, outage: &Outage) {
        for (state, phase, lasting) in [
            ("healthy", healthy, scaled(HEALTHY)),
            ("hanging", hanging, scaled(HANGING)),
        ] {
            // The pace's first tick is at once.
            let planned = (lasting.as_millis() / PACE.as_millis()) as usize + 1;
            let what = format!("push service {state}: send, {MEMBERS} members, {PHONES} phones");
            let rate = format!("{:.0} sends/s", phase.sends.rate(phase.sends.ok));
            self.row(&what, 1, &phase.sends, planned, rate);
            let what = format!("push service {state}: ack the newest message");
            let rate = format!("{:.0} acks/s", phase.acks.rate(phase.acks.ok));
            self.row(&what, 1, &phase.acks, planned, rate);
            self.latency_key(format!("send p50/p99 ms, push {state}"), &phase.sends);
            self.latency_key(format!("ack p50/p99 ms, push {state}"), &phase.acks);
        }
        let rss = &hanging.rss_kib;
        let (start, end) = (rss[0], rss[rss.len() - 1]);
        let max = rss.iter().copied().max().unwrap_or(0);
        let samples: Vec<String> = rss.iter().map(|k| format!("{:.1}", mib(*k))).collect();
        self.notes.push(format!(
            "push outage: {} pushes delivered in the {} s healthy; then the push service hung \
             for {} s under the same traffic: {} attempts reached it, {} notifications pending \
             at the end; the server's RSS (its own process) {:.1} MiB at the start, {:.1} max, \
             {:.1} at the end (every {} s: {}); VmHWM {:.1} MiB",
            outage.pushed_healthy,
            scaled(HEALTHY).as_secs(),
            scaled(HANGING).as_secs(),
            outage.attempts,
            outage.pending,
            mib(start),
            mib(max),
            mib(end),
            RSS_EVERY.as_secs(),
            samples.join(", "),
            mib(outage.hwm_kib),
        ));
        let growth = mib(end) - mib(start);
        let name = format!("RSS growth MiB, {} s hanging", scaled(HANGING).as_secs());
        self.key_numbers.push((name, format!("{growth:+.1}")));
    }
}
