//! SIGKILL the server while two members send messages and recall, edit and delete their own
//! earlier ones, restart it, and check that every change answered 2xx is applied, every
//! change entry is in the log once under contiguous ids, and nothing is half-applied: no
//! change entry without its effect on the target, no effect without its entry.

mod lane;
mod verdict;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::server::start_server;
use crate::support::child_server::ChildServer;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::scratch_db::ScratchDb;
use lane::{Ask, ChangeLane};
use verdict::Verdict;

/// As many as the send test's at least; each phase is short, so a run takes about 10 s.
const KILLS: usize = 10;

mod sigkill_during_recalls_edits_and_deletes_leaves_nothing_half_applied {
    use crate::support::engine::Engine;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::sigkill_during_changes(Engine::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(chorus_pg_tests),
        ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
    )]
    async fn postgres() {
        super::sigkill_during_changes(Engine::Postgres).await
    }
}

struct Run {
    dir: tempfile::TempDir,
    database: ScratchDb,
    client: reqwest::Client,
}

impl Run {
    async fn start(&self, log_name: &str) -> (ChildServer, ApiClient) {
        let server =
            start_server(self.dir.path(), self.database.url(), log_name, &self.client).await;
        let api = ApiClient::with_client(self.client.clone(), server.base.clone());
        (server, api)
    }
}

async fn sigkill_during_changes(engine: Engine) {
    let _serial = crate::SERIAL.lock().await;
    let run = Run {
        dir: tempfile::tempdir().expect("temp dir"),
        database: ScratchDb::for_test(engine),
        client: crate::support::http::client(Duration::from_secs(20)),
    };
    let seed = crate::sigkill::seed();
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut server, mut api) = run.start("server-0.log").await;
    let group = api.create_group("alice", "changes", &["bob"]).await;
    // alice owns the group, so she also deletes; bob recalls and edits.
    let mut lanes = vec![
        ChangeLane::new("alice", group, true),
        ChangeLane::new("bob", group, false),
    ];
    for phase in 0..KILLS {
        if phase > 0 {
            (server, api) = run.start(&format!("server-{phase}.log")).await;
        }
        let window = Duration::from_millis(rng.random_range(300..=900));
        lanes = run_until_killed(lanes, &api, seed, phase, window, || server.kill()).await;
        let log = server.log();
        assert!(
            !log.contains("panicked"),
            "before kill {}:\n{log}",
            phase + 1
        );
    }

    // The last restart: retry what is still unanswered, then read the log back.
    let (mut server, api) = run.start("server-final.log").await;
    let never = Arc::new(AtomicBool::new(false));
    let mut retried = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let rng = rng_for(seed, KILLS, i);
        retried.push(lane.run_phase(api.clone(), never.clone(), rng, false).await);
    }
    let (entries, last_msg_id) = api.pull_all("alice", group).await;
    let verdict = Verdict::judge(&retried, &entries, last_msg_id);
    let log = server.log();
    server.kill();

    print_summary(engine, seed, started, &retried, &verdict);
    assert!(!log.contains("panicked"), "after the last restart:\n{log}");
    assert!(
        verdict.is_clean(),
        "changes not crash-safe on {} (seed {seed}): {}",
        engine.name(),
        verdict.findings()
    );
    assert_did_enough(&retried);
}

/// Every lane runs against `api` for `window`; then no new request starts, and `kill` meets
/// the ones in flight.
async fn run_until_killed(
    lanes: Vec<ChangeLane>,
    api: &ApiClient,
    seed: u64,
    phase: usize,
    window: Duration,
    kill: impl FnOnce(),
) -> Vec<ChangeLane> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = lanes
        .into_iter()
        .enumerate()
        .map(|(i, lane)| {
            let rng = rng_for(seed, phase, i);
            tokio::spawn(lane.run_phase(api.clone(), stop.clone(), rng, true))
        })
        .collect();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::SeqCst);
    kill();
    let mut lanes = Vec::new();
    for task in tasks {
        lanes.push(task.await.expect("lane task"));
    }
    lanes
}

/// A reproducible generator for one lane in one phase.
fn rng_for(seed: u64, phase: usize, lane: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ ((phase as u64) << 8 | lane as u64).wrapping_mul(0x9E37_79B9))
}

/// How many acknowledged entries of `kind` the lanes hold.
fn acknowledged(lanes: &[ChangeLane], kind: &str) -> usize {
    lanes
        .iter()
        .flat_map(|l| &l.acknowledged)
        .filter(|a| a.request.ask.kind() == kind)
        .count()
}

/// A clean verdict means little unless kills met changes in flight, of every kind.
fn assert_did_enough(lanes: &[ChangeLane]) {
    for kind in ["message", "recall", "edit", "delete"] {
        assert!(acknowledged(lanes, kind) > 0, "no {kind} was acknowledged");
    }
    let lost_changes: u64 = lanes.iter().map(|l| l.lost_changes).sum();
    assert!(
        lost_changes > 0,
        "no kill cut off a change's response: the run tested sends only"
    );
}

fn print_summary(
    engine: Engine,
    seed: u64,
    started: Instant,
    lanes: &[ChangeLane],
    verdict: &Verdict,
) {
    let sum = |f: fn(&ChangeLane) -> u64| lanes.iter().map(f).sum::<u64>();
    let edits_of_one: usize = {
        let mut edits = std::collections::HashMap::new();
        for a in lanes.iter().flat_map(|l| &l.acknowledged) {
            if let Ask::Edit { target, .. } = a.request.ask {
                *edits.entry(target).or_insert(0usize) += 1;
            }
        }
        edits.values().filter(|&&n| n > 1).count()
    };
    println!(
        "changes under SIGKILL on {}: seed {seed}, {KILLS} kills, {:.1} s; acknowledged \
         {} messages, {} recalls, {} edits ({edits_of_one} messages edited more than once), \
         {} deletes; responses lost to a kill: {} sends, {} changes; retries answered 200: {}, \
         201: {}; change entries read back: {}",
        engine.name(),
        started.elapsed().as_secs_f64(),
        acknowledged(lanes, "message"),
        acknowledged(lanes, "recall"),
        acknowledged(lanes, "edit"),
        acknowledged(lanes, "delete"),
        sum(|l| l.lost_sends),
        sum(|l| l.lost_changes),
        sum(|l| l.retried_200),
        sum(|l| l.retried_201),
        verdict.changes,
    );
}
