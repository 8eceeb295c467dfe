//! SIGKILL the server again and again while senders and members are mid-request, restart it,
//! and check that no acknowledged send was lost or stored twice, that message ids stay
//! contiguous, that no cursor moved backwards, that every send whose response was lost
//! ends up stored exactly once after a retry, and that the receipt counts still match the
//! cursors.

mod commits;
// The soak reuses the clients and the verdict.
pub mod member;
pub mod report;
pub mod sender_lane;
pub mod traffic;
pub mod verdict;

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::server::start_server;
use crate::support::child_server::ChildServer;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::histogram;
use crate::support::scratch_db::ScratchDb;
use commits::{CommitSampler, Commits};
use report::{RunFacts, Tally};
use traffic::Traffic;
use verdict::Verdict;

const KILLS_VAR: &str = "CHORUS_CRASH_KILLS";
const SEED_VAR: &str = "CHORUS_CRASH_SEED";
const MIN_KILLS: usize = 10;

mod sigkill_during_traffic_loses_and_duplicates_nothing {
    use crate::support::engine::Engine;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::sigkill_during_traffic(Engine::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(chorus_pg_tests),
        ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
    )]
    async fn postgres() {
        super::sigkill_during_traffic(Engine::Postgres).await
    }
}

/// What every server of one run shares: the directory of its logs, the database, and one
/// client for all of them.
struct Run {
    dir: tempfile::TempDir,
    database: ScratchDb,
    client: reqwest::Client,
    seed: u64,
    kills: usize,
}

impl Run {
    fn new(engine: Engine) -> Run {
        Run {
            dir: tempfile::tempdir().expect("temp dir"),
            database: ScratchDb::for_test(engine),
            client: crate::support::http::client(Duration::from_secs(20)),
            seed: seed(),
            kills: kills(),
        }
    }

    async fn start(&self, log_name: &str) -> (ChildServer, ApiClient) {
        let server =
            start_server(self.dir.path(), self.database.url(), log_name, &self.client).await;
        let api = ApiClient::with_client(self.client.clone(), server.base.clone());
        (server, api)
    }

    fn log_name(phase: usize) -> String {
        format!("server-{phase}.log")
    }

    /// Every server's log, in the order they ran.
    fn logs(&self) -> String {
        (0..self.kills)
            .map(Run::log_name)
            .chain(["server-final.log".to_owned()])
            .map(|name| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default())
            .collect()
    }
}

async fn sigkill_during_traffic(engine: Engine) {
    let _serial = crate::SERIAL.lock().await;
    let run = Run::new(engine);
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(run.seed);
    let (mut server, mut api) = run.start(&Run::log_name(0)).await;
    let mut traffic = Traffic::create(&api, false).await;
    let mut windows_ms = Vec::new();
    let mut killed_commits = Commits::default();
    for phase in 0..run.kills {
        if phase > 0 {
            (server, api) = run.start(&Run::log_name(phase)).await;
        }
        let window = rng.random_range(200..=1500u64);
        windows_ms.push(window);
        let sampler = CommitSampler::start(&api);
        let kill = || server.kill();
        (traffic.run_until_killed(&api, run.seed, phase, Duration::from_millis(window), kill))
            .await;
        killed_commits += sampler.finish();
        let log = server.log();
        assert!(
            !log.contains("panicked"),
            "the server panicked before kill {}:\n{log}",
            phase + 1
        );
    }

    // The last restart: retry what is still unanswered, then check everything.
    let (mut server, api) = run.start("server-final.log").await;
    traffic.retry_unanswered(&api, run.seed, run.kills).await;
    let verdict = Verdict::judge(&api, &mut traffic).await;
    // Receipt counts come from a histogram of the cursors, kept by the writes that move
    // them: it must still match the cursors after every kill.
    let histogram_off = histogram::disagreements_at(run.database.url()).await;
    server.kill();

    let tally = Tally::of(&traffic);
    let facts = RunFacts {
        engine,
        seed: run.seed,
        kills: run.kills,
        windows_ms,
        seconds: started.elapsed().as_secs_f64(),
        killed_commits,
    };
    report::print_summary(&facts, &tally, &verdict);
    report::append_to_reliability_log(&facts, &tally, &verdict);
    assert_crash_safe(&run, &facts, &tally, &verdict);
    assert_eq!(
        histogram_off, 0,
        "rows where the histogram of cursors (receipt counts) and the members' cursors \
         disagree after the kills"
    );
}

fn assert_crash_safe(run: &Run, facts: &RunFacts, t: &Tally, verdict: &Verdict) {
    let log = run.logs();
    assert!(
        !log.contains("panicked"),
        "the server panicked; its logs:\n{log}"
    );
    assert!(
        verdict.is_clean(),
        "crash safety broken on {} (seed {}): lost {:?}, duplicated {:?}, gaps {:?}, \
         backwards {:?}, unknown {:?}, problems {:?}",
        facts.engine.name(),
        facts.seed,
        first(&verdict.lost),
        first(&verdict.duplicated),
        first(&verdict.gaps),
        first(&verdict.backwards),
        first(&verdict.unknown),
        first(&verdict.problems),
    );
    assert_eq!(
        t.lost_response,
        t.retried_200 + t.retried_201,
        "every send whose response was lost is answered by exactly one retry"
    );
    assert_eq!(t.acknowledged, t.first_try + t.retried_200 + t.retried_201);
    assert_eq!(
        t.unavailable, 0,
        "one server on a database that stays up answers no 503"
    );
    assert!(
        t.attempted > 0 && t.acks > 0 && t.pulls > 0,
        "the run did too little to mean anything"
    );
    // SQLite groups every write queued during a flush; PostgreSQL the plain sends queued for
    // a group (the four senders share one).
    let c = facts.killed_commits;
    assert!(
        c.writes > c.commits,
        "the killed servers never grouped writes into one commit ({c:?}): the kills did not \
         hit a batch"
    );
}

fn first<T: std::fmt::Debug>(items: &[T]) -> Vec<&T> {
    items.iter().take(5).collect()
}

/// CHORUS_CRASH_KILLS, never below [`MIN_KILLS`].
fn kills() -> usize {
    let requested: usize = std::env::var(KILLS_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(MIN_KILLS);
    requested.max(MIN_KILLS)
}

/// CHORUS_CRASH_SEED, or a fresh seed; printed so a run can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed={seed} (replay the timings with {SEED_VAR}={seed})");
    seed
}
