//! One soak run: the instances and the clients, the traffic and the faults side by side, then
//! the final reads, the checks and the report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::churn::Churn;
use super::faults::{run_faults, FaultLog, FaultPlan};
use super::fleet::{Fleet, POOL_TIMEOUT_MS};
use super::owed::Owed;
use super::receipts_poller::{final_counts, ReceiptsPoller};
use super::report::{self, Findings};
use super::sampler::{sample, Sample};
use super::sync_poller::SyncPoller;
use crate::sigkill::report::Tally;
use crate::sigkill::traffic::Traffic;
use crate::sigkill::verdict::Verdict;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::private_cluster::PrivateCluster;
use crate::support::request_log::RequestLog;
use crate::support::scratch_db::ScratchDb;

/// Traffic runs in rounds this long: a send lost in one round is retried at the start of
/// the next, on the next instance.
const ROUND: Duration = Duration::from_secs(2);
/// Devices polling `/v1/sync`: two members' and the churned user c1's. A device id belongs to
/// one user only, hence the user in each.
const SYNC_POLLERS: [&str; 3] = ["m1#m1-sync", "m3#m3-sync", "c1#c1-sync"];
const RECEIPT_POLLERS: [&str; 4] = [
    "s1#s1-receipts",
    "s2#s2-receipts",
    "s3#s3-receipts",
    "s4#s4-receipts",
];
const CHURNED: [&str; 2] = ["c1", "c2"];

/// Every client of the run.
pub struct Cast {
    pub traffic: Traffic,
    pub churn: Churn,
    pub sync: Vec<SyncPoller>,
    pub receipts: Vec<ReceiptsPoller>,
}

impl Cast {
    async fn create(api: &ApiClient) -> Cast {
        let mut traffic = Traffic::create(api, true).await;
        let churn_group = api.create_group("s4", "churn", &[]).await;
        traffic.add_group(churn_group, "s4", &["s4"]);
        let mut sync = Vec::new();
        for caller in SYNC_POLLERS {
            sync.push(SyncPoller::start(api, caller).await);
        }
        let mut receipts = Vec::new();
        for caller in RECEIPT_POLLERS {
            receipts.push(ReceiptsPoller::start(api, caller).await);
        }
        Cast {
            traffic,
            churn: Churn::new(churn_group, "s4", &CHURNED),
            sync,
            receipts,
        }
    }

    /// The groups `user` belongs to for the whole run (not the churn group).
    pub fn static_groups(&self, user: &str) -> Vec<i64> {
        let prefix = format!("{user}#");
        self.traffic
            .members
            .iter()
            .find(|m| m.user == user || m.user.starts_with(&prefix))
            .map(|m| m.groups.clone())
            .unwrap_or_default()
    }
}

/// What the run was and what it did.
pub struct RunFacts {
    pub engine: Engine,
    pub seed: u64,
    pub secs: u64,
    pub instances: usize,
    pub plan: FaultPlan,
    pub faults: FaultLog,
    pub samples: Vec<Sample>,
    pub restart_ms: Vec<u64>,
    pub seconds: f64,
}

pub async fn soak(engine: Engine) {
    let _serial = crate::SERIAL.lock().await;
    let secs = super::soak_secs();
    let seed = crate::sigkill::seed();
    let dir = tempfile::tempdir().expect("temp dir");
    // Declared before the database it holds, so it is dropped after the servers.
    let cluster = (engine == Engine::Postgres).then(|| {
        PrivateCluster::create().expect(
            "a private PostgreSQL cluster, which needs root and Debian's PostgreSQL binaries",
        )
    });
    let sqlite = (engine == Engine::Sqlite).then(|| ScratchDb::sqlite().expect("SQLite file"));
    let url = match (&cluster, &sqlite) {
        (Some(cluster), _) => cluster.url(),
        (None, Some(db)) => db.url().to_owned(),
        (None, None) => unreachable!("one engine or the other"),
    };
    let client = crate::support::http::client(Duration::from_secs(30));
    let instances = if engine == Engine::Postgres { 3 } else { 1 };
    let started = Instant::now();
    let mut fleet = Fleet::start(dir.path().to_path_buf(), &url, &client, instances).await;
    println!("instances at {:?}", fleet.bases());
    let ordinary_bound = Duration::from_millis(POOL_TIMEOUT_MS) + super::ORDINARY_SLACK;
    let log = Arc::new(RequestLog::new(ordinary_bound, super::POLL_SLACK));
    let api = ApiClient::round_robin(client.clone(), fleet.bases()).timed(log.clone());
    let cast = Cast::create(&api).await;
    let plan = plan_for(engine, secs, instances);

    let (cast, faults, samples) =
        run_traffic(cast, &api, &mut fleet, cluster.as_ref(), &plan, secs, seed).await;
    let (cast, findings) = finish(cast, &api, seed).await;
    let facts = RunFacts {
        engine,
        seed,
        secs,
        instances,
        plan,
        faults,
        samples,
        restart_ms: fleet.restart_ms.clone(),
        seconds: started.elapsed().as_secs_f64(),
    };
    let tally = Tally::of(&cast.traffic);
    report::print(&facts, &tally, &findings, &cast, &log);
    report::append_to_reliability_log(&facts, &tally, &findings, &cast, &log);
    let logs = fleet.logs();
    fleet.stop_all();
    report::assert_promises_kept(&facts, &tally, &findings, &cast, &log, &logs);
}

/// Kills every eighth of the run (8 s to 2 min apart); on PostgreSQL instance 0 is never
/// killed and the database restarts once, halfway.
fn plan_for(engine: Engine, secs: u64, instances: usize) -> FaultPlan {
    let kill_every = Duration::from_secs((secs / 8).clamp(8, 120));
    match engine {
        Engine::Postgres => FaultPlan {
            kill_every,
            killable: (1..instances).collect(),
            database_restart_at: Some(Duration::from_secs(secs / 2) + kill_every / 2),
        },
        Engine::Sqlite => FaultPlan {
            kill_every,
            killable: vec![0],
            database_restart_at: None,
        },
    }
}

/// The traffic in rounds, the pollers and the churn on their own, and the faults and the
/// sampler beside them, for `secs`.
async fn run_traffic(
    mut cast: Cast,
    api: &ApiClient,
    fleet: &mut Fleet,
    cluster: Option<&PrivateCluster>,
    plan: &FaultPlan,
    secs: u64,
    seed: u64,
) -> (Cast, FaultLog, Vec<Sample>) {
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let rng = |client: u64| StdRng::seed_from_u64(seed ^ (client << 32));
    let sync_tasks: Vec<_> = (cast.sync.drain(..).enumerate())
        .map(|(i, p)| tokio::spawn(p.run(api.clone(), stop.clone(), rng(i as u64 + 1))))
        .collect();
    let receipt_tasks: Vec<_> = (cast.receipts.drain(..).enumerate())
        .map(|(i, p)| tokio::spawn(p.run(api.clone(), stop.clone(), rng(i as u64 + 11))))
        .collect();
    let churn = Churn::new(cast.churn.group_id, cast.churn.owner, &CHURNED);
    let churn_task = tokio::spawn(churn.run(api.clone(), stop.clone(), rng(21)));
    let sample_every = Duration::from_secs((secs / 60).clamp(1, 10));
    let pids = fleet.pids.clone();
    let rounds = async {
        let mut round = 0;
        while Instant::now() + Duration::from_millis(200) < until {
            let window = ROUND.min(until.saturating_duration_since(Instant::now()));
            // The faults come on their own schedule, not at the end of a round.
            (cast
                .traffic
                .run_until_killed(api, seed, round, window, || ()))
            .await;
            round += 1;
        }
        stop.store(true, Ordering::SeqCst);
    };
    let (faults, samples, ()) = tokio::join!(
        run_faults(fleet, cluster, plan, started, until),
        sample(pids, sample_every, started, &stop),
        rounds,
    );
    for task in sync_tasks {
        cast.sync.push(task.await.expect("sync poller task"));
    }
    for task in receipt_tasks {
        cast.receipts
            .push(task.await.expect("receipts poller task"));
    }
    cast.churn = churn_task.await.expect("churn task");
    (cast, faults, samples)
}

/// With every instance up: retry what is unanswered, drain the feeds, read everything back.
async fn finish(mut cast: Cast, api: &ApiClient, seed: u64) -> (Cast, Findings) {
    cast.traffic.retry_unanswered(api, seed, usize::MAX).await;
    // Side by side: each drain ends with a wait for quiet.
    let sync = join_all(cast.sync.iter_mut().map(|poller| poller.drain(api)));
    let receipts = join_all(cast.receipts.iter_mut().map(|poller| poller.drain(api)));
    tokio::join!(sync, receipts);
    let verdict = Verdict::judge(api, &mut cast.traffic).await;
    let sends: Vec<_> = cast
        .traffic
        .lanes
        .iter()
        .flat_map(|l| &l.acknowledged)
        .collect();
    let mut owed = Owed::default();
    for poller in &cast.sync {
        let groups = cast.static_groups(poller.user());
        owed.check_sync(poller, &groups, &sends, &cast.churn);
    }
    for poller in &cast.receipts {
        let groups: Vec<i64> = (cast.traffic.lanes.iter())
            .filter(|l| l.user == poller.user())
            .flat_map(|l| l.groups.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let now = final_counts(api, poller.user(), &groups).await;
        owed.check_receipts(&poller.caller, &poller.latest, &now);
    }
    (cast, Findings { verdict, owed })
}
